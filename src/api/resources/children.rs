//! The API's ports, volume connectors and volume targets (the children of a node), in Ironic's
//! JSON shapes: listing, showing, creating, patching and deleting them through the node
//! service, a port's `portgroup_uuid` (1.24) included. A part of `resources` (its shared
//! helpers and rules); the nodes are there.

use super::*;

/// A child in Ironic's JSON shape (secrets unmasked: the caller masks what it shows); `group`:
/// a port's port group.
fn child_json(r: &Request, s: Stamped<Child>, group: Option<&str>) -> Value {
    child_json_at(r, s, r.minor, group)
}

/// [`child_json`] as microversion `minor` shows it.
fn child_json_at(r: &Request, s: Stamped<Child>, minor: u32, group: Option<&str>) -> Value {
    let kind = s.item.kind();
    let mut doc = match s.item {
        Child::Port(p) => {
            let mut doc = json!({
                "uuid": p.uuid,
                "address": p.address,
                "extra": p.extra,
                "local_link_connection": p.more.local_link_connection,
                "pxe_enabled": p.more.pxe_enabled,
                "internal_info": p.more.internal_info,
                "physical_network": p.more.physical_network,
                "portgroup_uuid": group,
            });
            versions::hide(&mut doc, versions::PORT_FIELDS, minor);
            doc
        }
        Child::Connector(c) => json!({
            "uuid": c.uuid,
            "type": c.connector_type,
            "connector_id": c.connector_id,
            "extra": c.extra,
        }),
        Child::Target(t) => json!({
            "uuid": t.uuid,
            "volume_type": t.volume_type,
            "boot_index": t.boot_index,
            "volume_id": t.volume_id,
            "properties": t.properties,
            "extra": t.extra,
        }),
    };
    let uuid = doc["uuid"].as_str().unwrap_or_default().to_owned();
    if let Some(map) = doc.as_object_mut() {
        map.insert("node_uuid".into(), json!(s.node_uuid));
        map.insert("created_at".into(), json!(s.created_at));
        map.insert("updated_at".into(), json!(s.updated_at));
        map.insert("links".into(), links(&r.base, kind.api_path(), &uuid));
    }
    doc
}

/// The node a `node`/`node_uuid` query filter names, as a UUID (404 when unknown).
async fn node_filter(
    state: &ApiState,
    r: &Request,
    fixed: Option<String>,
) -> Result<Option<String>, ApiError> {
    if fixed.is_some() {
        return Ok(fixed);
    }
    match r.param("node").or_else(|| r.param("node_uuid")) {
        None => Ok(None),
        Some(key) => Ok(Some(load_node(state, key).await?.node.uuid)),
    }
}

/// The group of a port (none for connectors and targets, or a port in no group).
async fn group_of(state: &ApiState, s: &Stamped<Child>) -> Result<Option<String>, ApiError> {
    if s.item.kind() != ChildKind::Port {
        return Ok(None);
    }
    let groups = state.inner.nodes.port_portgroups(Some(s.node_uuid.clone())).await?;
    Ok(groups.get(s.item.uuid()).cloned())
}

/// The group a port list is filtered by: `group` (a port group's ports), else the
/// `portgroup` filter (1.24; 406 below), as a UUID.
async fn group_filter(
    state: &ApiState,
    r: &Request,
    group: Option<String>,
) -> Result<Option<String>, ApiError> {
    if group.is_some() {
        return Ok(group);
    }
    let Some(ident) = r.param("portgroup") else { return Ok(None) };
    if r.minor < versions::minor_of(versions::PORT_FILTERS, "portgroup") {
        return Err(ApiError::not_acceptable(format!(
            "The portgroup filter needs API version 1.24 or later (this request asked for 1.{})",
            r.minor
        )));
    }
    let ident = portgroups::ident_of(ident)?;
    Ok(Some(state.inner.nodes.portgroup(ident).await?.uuid))
}

/// The `address=` filter of the port list, a MAC in any of its spellings.
fn address_filter(r: &Request) -> Result<Option<bootvol_core::model::MacAddr>, ApiError> {
    r.param("address")
        .map(|a| a.parse().map_err(|e| ApiError::bad_request(format!("address: {e}"))))
        .transpose()
}

/// A list of children (`node`: one node's; `group`: one port group's ports).
pub(super) async fn list_children(
    state: &ApiState,
    r: &Request,
    kind: ChildKind,
    node: Option<String>,
    group: Option<String>,
) -> ApiResult {
    let node = node_filter(state, r, node).await?;
    let group = if kind == ChildKind::Port { group_filter(state, r, group).await? } else { None };
    let groups = if kind == ChildKind::Port {
        state.inner.nodes.port_portgroups(node.clone()).await?
    } else {
        Default::default()
    };
    let detail = r.segments.last().is_some_and(|s| s == "detail");
    let nodes = &state.inner.nodes;
    let rows: Vec<Stamped<Child>> = match kind {
        ChildKind::Port => {
            let ports = match address_filter(r)? {
                Some(mac) => nodes.port_by_address(mac, node).await?,
                None => nodes.ports(node).await?,
            };
            ports
                .into_iter()
                .filter(|s| group.is_none() || groups.get(&s.item.uuid) == group.as_ref())
                .map(|s| s.map(Child::Port))
                .collect()
        }
        ChildKind::Connector => {
            nodes.connectors(node).await?.into_iter().map(|s| s.map(Child::Connector)).collect()
        }
        ChildKind::Target => {
            nodes.targets(node).await?.into_iter().map(|s| s.map(Child::Target)).collect()
        }
    };
    let items = rows
        .into_iter()
        .map(|s| {
            let group = groups.get(s.item.uuid()).cloned();
            let mut v = child_json(r, s, group.as_deref());
            mask(&mut v);
            v
        })
        .collect();
    collection(r, kind.collection(), items, kind.list_fields(), detail)
}

pub(super) async fn show_child(
    state: &ApiState,
    r: &Request,
    kind: ChildKind,
    id: &str,
) -> ApiResult {
    let stored = state.inner.nodes.child(kind, id).await?;
    let group = group_of(state, &stored).await?;
    let mut doc = child_json(r, stored, group.as_deref());
    mask(&mut doc);
    shown(r, doc)
}

/// The spec and node of a child document (a create body, or a stored child patched); the node
/// named by `node_uuid` must exist (400).
async fn child_spec(
    state: &ApiState,
    kind: ChildKind,
    mut doc: Map<String, Value>,
) -> Result<(ChildSpec, String), ApiError> {
    let node = match doc.remove("node_uuid") {
        Some(Value::String(key)) => state.inner.nodes.parent(&key).await?,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "node_uuid: must be a string, not {}",
                kind_of(&other)
            )));
        }
        None => return Err(ApiError::bad_request("node_uuid: missing")),
    };
    if kind == ChildKind::Target && !doc.contains_key("properties") {
        doc.insert("properties".into(), json!({}));
    }
    let spec = ChildSpec::parse(kind, &Value::Object(doc)).map_err(ApiError::bad_request)?;
    Ok((spec, node))
}

/// The answer to a child's create or patch: the child as stored, its secrets masked.
async fn child_answer(
    state: &ApiState,
    r: &Request,
    stored: Stamped<Child>,
    status: StatusCode,
) -> ApiResult {
    let (kind, uuid) = (stored.item.kind(), stored.item.uuid().to_owned());
    let group = group_of(state, &stored).await?;
    let mut doc = child_json(r, stored, group.as_deref());
    mask(&mut doc);
    Ok(if status == StatusCode::CREATED {
        created(format!("{}/v1/{}/{uuid}", r.base, kind.api_path()), &doc)
    } else {
        json_response(status, &doc)
    })
}

/// A port's `portgroup_uuid` as a create or a patch gives it: `None` when not given (not a
/// port, or a create without it), `Some(None)` for no group.
fn group_given(
    kind: ChildKind,
    doc: &mut Map<String, Value>,
) -> Result<Option<Option<String>>, ApiError> {
    if kind != ChildKind::Port {
        return Ok(None);
    }
    match doc.remove("portgroup_uuid") {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(ident)) => Ok(Some(Some(portgroups::ident_of(&ident)?.to_owned()))),
        Some(other) => Err(ApiError::bad_request(format!(
            "portgroup_uuid: must be a port group's UUID or name, not {}",
            kind_of(&other)
        ))),
    }
}

pub(super) async fn create_child(state: &ApiState, r: &Request, kind: ChildKind) -> ApiResult {
    let writable = kind.writable_fields();
    let mut body = r.json()?;
    let group = body.as_object_mut().map(|doc| group_given(kind, doc)).transpose()?.flatten();
    if group.is_some() {
        port_fields_version(r, kind, ["portgroup_uuid"])?;
    }
    let mut doc = without_nulls(body)?;
    if let Some(key) = doc.keys().find(|k| !writable.contains(&k.as_str()) && *k != "uuid") {
        return Err(ApiError::bad_request(format!(
            "{key}: not a field bootvol accepts here (fields: uuid, {})",
            writable.join(", ")
        )));
    }
    port_fields_version(r, kind, doc.keys().map(String::as_str))?;
    let uuid = body_uuid(&mut doc)?;
    let (spec, node) = child_spec(state, kind, doc).await?;
    let nodes = &state.inner.nodes;
    let stored = match group {
        Some(group) => nodes.create_port_in_portgroup(&node, uuid, spec, group).await?,
        None => nodes.create_child(&node, uuid, spec).await?,
    };
    child_answer(state, r, stored, StatusCode::CREATED).await
}

pub(super) async fn patch_child(
    state: &ApiState,
    r: &Request,
    kind: ChildKind,
    id: &str,
) -> ApiResult {
    let patch = r.json()?;
    let mut writable = kind.writable_fields().to_vec();
    if kind == ChildKind::Port {
        writable.push("portgroup_uuid");
    }
    let writable = writable.as_slice();
    let stored = state.inner.nodes.child(kind, id).await?;
    let group = group_of(state, &stored).await?;
    let stored = child_json_at(r, stored, crate::api::MAX_MINOR, group.as_deref());
    let mut doc: Value = stored
        .as_object()
        .map(|m| m.iter().filter(|(k, _)| writable.contains(&k.as_str())))
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect::<Map<String, Value>>()
        .into();
    let read_only: Vec<&str> =
        CHILD_READ_ONLY.iter().copied().filter(|k| !writable.contains(k)).collect();
    let touched = apply_patch(&mut doc, &patch, writable, &read_only)?;
    port_fields_version(r, kind, touched.iter().map(String::as_str))?;
    let mut doc = without_nulls(doc)?;
    // A port is written with its group (the one it had unless patched), so that the group's
    // rules (its node, one physical network) hold after any change of the port.
    let group = group_given(kind, &mut doc)?.or_else(|| (kind == ChildKind::Port).then_some(None));
    let (spec, node) = child_spec(state, kind, doc).await?;
    let nodes = &state.inner.nodes;
    let stored = match group {
        Some(group) => nodes.update_port_in_portgroup(id, &node, spec, group).await?,
        None => nodes.update_child(id, &node, spec).await?,
    };
    child_answer(state, r, stored, StatusCode::OK).await
}

/// Refuses (406) a port field newer than the request's microversion.
fn port_fields_version<'a>(
    r: &Request,
    kind: ChildKind,
    given: impl IntoIterator<Item = &'a str>,
) -> Result<(), ApiError> {
    if kind != ChildKind::Port {
        return Ok(());
    }
    for field in given {
        let minor = versions::minor_of(versions::PORT_FIELDS, field);
        if r.minor < minor {
            return Err(ApiError::not_acceptable(format!(
                "{field} needs API version 1.{minor} or later (this request asked for 1.{})",
                r.minor
            )));
        }
    }
    Ok(())
}

pub(super) async fn delete_child(state: &ApiState, kind: ChildKind, id: &str) -> ApiResult {
    state.inner.nodes.delete_child(kind, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
