//! The API's port groups (`/v1/portgroups`, 1.23; a node's from 1.24): listing, showing,
//! creating, patching and deleting them in Ironic's JSON shape (`mode` and `properties` from
//! 1.26), the ports of one (`/v1/portgroups/{id}/ports`, 1.24). A part of `resources` (its
//! shared helpers); the node service keeps the rules (a group with ports is not deleted, a
//! port joins a group of its own node whose ports share its physical network).

use super::*;
use bootvol_core::model::MacAddr;
use bootvol_core::model::groups::{DEFAULT_MODE, Portgroup, PortgroupSpec, is_logical_name};

/// The fields a list shows without `detail` or `fields` (Ironic's).
const LIST_FIELDS: &[&str] = &["uuid", "address", "name"];
const WRITABLE: &[&str] =
    &["address", "extra", "mode", "name", "node_uuid", "properties", "standalone_ports_supported"];
const READ_ONLY: &[&str] = &["uuid", "internal_info", "created_at", "updated_at", "links", "ports"];

/// `/v1/portgroups[/...]` (`rest`: the segments after `portgroups`).
pub(super) async fn route(state: &ApiState, r: &Request, rest: &[&str]) -> ApiResult {
    ironic::require(r, "portgroups")?;
    match (rest, &r.method) {
        ([], &Method::GET) => list(state, r, None, false).await,
        (["detail"], &Method::GET) => list(state, r, None, true).await,
        ([], &Method::POST) => create(state, r).await,
        ([id], &Method::GET) => {
            let group = state.inner.nodes.portgroup(ident_of(id)?).await?;
            shown(r, portgroup_json(r, &group))
        }
        ([id], &Method::PATCH) => patch(state, r, id).await,
        ([id], &Method::DELETE) => {
            state.inner.nodes.delete_portgroup(ident_of(id)?).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        ([id, "ports"] | [id, "ports", "detail"], &Method::GET) => {
            ironic::require(r, "portgroups/ports")?;
            let group = state.inner.nodes.portgroup(ident_of(id)?).await?;
            list_children(state, r, ChildKind::Port, None, Some(group.uuid)).await
        }
        ([] | [_] | [_, "ports"] | [_, "ports", "detail"], _) => Err(method_not_allowed()),
        _ => Err(not_found_path(r)),
    }
}

/// `GET /v1/nodes/{node}/portgroups[/detail]` (1.24).
pub(super) async fn of_node(state: &ApiState, r: &Request, node: &str) -> ApiResult {
    ironic::require(r, "nodes/portgroups")?;
    let uuid = load_node(state, node).await?.node.uuid;
    let detail = r.segments.last().is_some_and(|s| s == "detail");
    list(state, r, Some(uuid), detail).await
}

/// A port group identifier: its UUID or its name (400 otherwise, as Ironic).
pub(super) fn ident_of(id: &str) -> Result<&str, ApiError> {
    if canonical_uuid(id).is_ok() || is_logical_name(id) {
        return Ok(id);
    }
    Err(ApiError::bad_request(format!("Expected a logical name or UUID but received {id}.")))
}

fn portgroup_json(r: &Request, group: &Portgroup) -> Value {
    let (base, uuid, spec) = (&r.base, &group.uuid, &group.spec);
    let mut doc = json!({
        "uuid": uuid,
        "name": spec.name,
        "address": spec.address.map(|a| a.to_string()),
        "node_uuid": group.node_uuid,
        "standalone_ports_supported": spec.standalone_ports_supported,
        "mode": spec.mode,
        "properties": spec.properties,
        "extra": spec.extra,
        "internal_info": group.internal_info,
        "created_at": group.created_at,
        "updated_at": group.updated_at,
        "links": links(base, "portgroups", uuid),
        "ports": [{"href": format!("{base}/v1/portgroups/{uuid}/ports"), "rel": "self"},
                  {"href": format!("{base}/portgroups/{uuid}/ports"), "rel": "bookmark"}],
    });
    versions::hide(&mut doc, versions::PORTGROUP_FIELDS, r.minor);
    mask(&mut doc);
    doc
}

/// Refuses (406, as Ironic) `mode` or `properties` below 1.26.
fn fields_version<'a>(
    r: &Request,
    given: impl IntoIterator<Item = &'a str>,
) -> Result<(), ApiError> {
    for field in given {
        let minor = versions::minor_of(versions::PORTGROUP_FIELDS, field);
        if r.minor < minor {
            return Err(ApiError::not_acceptable(format!(
                "{field} needs API version 1.{minor} or later (this request asked for 1.{})",
                r.minor
            )));
        }
    }
    Ok(())
}

/// A port group's spec and node from a create body or a patched document (nulls dropped).
async fn spec_of(
    state: &ApiState,
    doc: Map<String, Value>,
) -> Result<(PortgroupSpec, String), ApiError> {
    let mut spec = PortgroupSpec::default();
    let mut node = None;
    for (key, value) in doc {
        let wrong = |what: &str, v: &Value| {
            ApiError::bad_request(format!("{key}: must be {what}, not {}", kind_of(v)))
        };
        match (key.as_str(), value) {
            ("node_uuid", Value::String(n)) => node = Some(state.inner.nodes.parent(&n).await?),
            ("name", Value::String(n)) => spec.name = Some(n),
            ("address", Value::String(a)) => {
                let mac = a.parse::<MacAddr>();
                spec.address =
                    Some(mac.map_err(|e| ApiError::bad_request(format!("address: {e}")))?);
            }
            ("extra", Value::Object(m)) => spec.extra = m,
            ("properties", Value::Object(m)) => spec.properties = m,
            ("mode", Value::String(m)) => spec.mode = m,
            ("standalone_ports_supported", Value::Bool(b)) => spec.standalone_ports_supported = b,
            ("standalone_ports_supported", Value::String(s))
                if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") =>
            {
                spec.standalone_ports_supported = s.eq_ignore_ascii_case("true");
            }
            ("node_uuid" | "name" | "address" | "mode", other) => {
                return Err(wrong("a string", &other));
            }
            ("extra" | "properties", other) => return Err(wrong("an object", &other)),
            ("standalone_ports_supported", other) => return Err(wrong("true or false", &other)),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "{key}: not a field of a port group (fields: uuid, {})",
                    WRITABLE.join(", ")
                )));
            }
        }
    }
    let node = node.ok_or_else(|| ApiError::bad_request("node_uuid: missing"))?;
    Ok((spec, node))
}

async fn list(state: &ApiState, r: &Request, node: Option<String>, detail: bool) -> ApiResult {
    let node = match (node, r.param("node")) {
        (Some(fixed), _) => Some(fixed),
        (None, Some(key)) => Some(load_node(state, key).await?.node.uuid),
        (None, None) => None,
    };
    let address = r
        .param("address")
        .map(|a| a.parse::<MacAddr>().map_err(|e| ApiError::bad_request(format!("address: {e}"))))
        .transpose()?;
    let groups = state.inner.nodes.portgroups(node).await?;
    let items = groups
        .iter()
        .filter(|g| address.is_none_or(|a| g.spec.address == Some(a)))
        .map(|g| portgroup_json(r, g))
        .collect();
    collection(r, "portgroups", items, LIST_FIELDS, detail)
}

async fn create(state: &ApiState, r: &Request) -> ApiResult {
    let mut doc = without_nulls(r.json()?)?;
    fields_version(r, doc.keys().map(String::as_str))?;
    let uuid = body_uuid(&mut doc)?;
    let (spec, node) = spec_of(state, doc).await?;
    let group = state.inner.nodes.write_portgroup(uuid.clone(), node, spec, false).await?;
    Ok(created(format!("{}/v1/portgroups/{uuid}", r.base), &portgroup_json(r, &group)))
}

async fn patch(state: &ApiState, r: &Request, id: &str) -> ApiResult {
    let patch = r.json()?;
    let stored = state.inner.nodes.portgroup(ident_of(id)?).await?;
    let spec = &stored.spec;
    let mut doc = json!({
        "node_uuid": stored.node_uuid,
        "name": spec.name,
        "address": spec.address.map(|a| a.to_string()),
        "extra": spec.extra,
        "properties": spec.properties,
        "mode": spec.mode,
        "standalone_ports_supported": spec.standalone_ports_supported,
    });
    let touched = apply_patch(&mut doc, &patch, WRITABLE, READ_ONLY)?;
    fields_version(r, touched.iter().map(String::as_str))?;
    let doc = without_nulls(doc)?;
    if !doc.contains_key("mode") {
        return Err(ApiError::bad_request(format!(
            "'mode' is a mandatory attribute and can not be removed (the default is {DEFAULT_MODE})"
        )));
    }
    let (spec, node) = spec_of(state, doc).await?;
    let group = state.inner.nodes.write_portgroup(stored.uuid, node, spec, true).await?;
    Ok(json_response(StatusCode::OK, &portgroup_json(r, &group)))
}
