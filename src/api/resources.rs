//! The API's resources: nodes, ports, volume connectors and volume targets (`children.rs`),
//! chassis (`chassis.rs`) and port groups (`portgroups.rs`), in Ironic's JSON shapes. Reads and
//! writes go through the node service ([`bootvol_control::nodes`]): this module turns Ironic's
//! JSON (bodies, JSON patches, microversions) into the `inventory` parsers' specs and the
//! service's answers back into JSON; the actions are in `actions.rs`.

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::actions::{
    accepted, get_boot_device, node_states, set_boot_device, set_power, set_provision, validate,
};
use super::ironic;
use super::{
    ApiError, ApiResult, ApiState, Request, VOLUME_MINOR, apply_patch, collection, json_response,
    page_limit, paged, parse_fields, select, versions,
};
use bootvol_control::nodes::NodeService;
use bootvol_core::inventory::{self, ChildSpec};
use bootvol_core::model::hardware::Interfaces;
use bootvol_core::model::records::NodeFilter;
use bootvol_core::model::{
    Child, ChildKind, Node, NodeRecord, ProvisionState, Stamped, canonical_uuid, new_uuid,
};
use bootvol_core::secrets::mask;

mod chassis;
mod children;
mod portgroups;
use children::{create_child, delete_child, list_children, patch_child, show_child};

const NODE_LIST_FIELDS: &[&str] =
    &["uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance"];

/// Node fields an operator may change with PATCH; the others are read-only.
const NODE_PATCHABLE: &[&str] = &[
    "name",
    "chassis_uuid",
    "driver",
    "driver_info",
    "properties",
    "instance_info",
    "extra",
    "storage_interface",
    "boot_interface",
    "deploy_interface",
    "instance_uuid",
    "resource_class",
    "console_interface",
    "inspect_interface",
    "management_interface",
    "network_interface",
    "power_interface",
    "raid_interface",
    "rescue_interface",
    "vendor_interface",
];

/// Child fields that exist but that bootvol keeps as Ironic's defaults.
const CHILD_READ_ONLY: &[&str] = &[
    "uuid",
    "created_at",
    "updated_at",
    "links",
    "local_link_connection",
    "pxe_enabled",
    "internal_info",
    "physical_network",
    "portgroup_uuid",
];

pub(super) async fn route(state: &ApiState, r: &Request) -> ApiResult {
    let segments: Vec<&str> = r.segments.iter().map(String::as_str).collect();
    let m = &r.method;
    match segments.as_slice() {
        ["nodes"] if m == Method::GET => list_nodes(state, r, false, None).await,
        ["nodes"] if m == Method::POST => create_node(state, r).await,
        ["nodes", "detail"] if m == Method::GET => list_nodes(state, r, true, None).await,
        // Ironic's older path for a node's console, still served (and used by its tests).
        ["nodes", "states", "console", node] if m == Method::GET => {
            ironic::console(state, r, node).await
        }
        ["nodes", node] if m == Method::GET => show_node(state, r, node).await,
        ["nodes", node] if m == Method::PATCH => patch_node(state, r, node).await,
        ["nodes", node] if m == Method::DELETE => delete_node(state, node).await,
        ["nodes", node, rest @ ..] if !rest.is_empty() => node_route(state, r, node, rest).await,
        ["drivers", rest @ ..] => ironic::drivers(r, rest).await,
        ["chassis", rest @ ..] => chassis::route(state, r, rest).await,
        ["portgroups", rest @ ..] => portgroups::route(state, r, rest).await,
        ["lookup"] | ["heartbeat"] | ["heartbeat", _] => ironic::agent(state, r, &segments).await,
        ["ports", rest @ ..] => children(state, r, ChildKind::Port, rest).await,
        ["volume", rest @ ..] => {
            require_volume(r)?;
            match (rest, m) {
                ([], &Method::GET) => Ok(volume_links(r, "volume")),
                (["connectors", rest @ ..], _) => {
                    children(state, r, ChildKind::Connector, rest).await
                }
                (["targets", rest @ ..], _) => children(state, r, ChildKind::Target, rest).await,
                _ => Err(not_found_path(r)),
            }
        }
        ["nodes", ..] => Err(method_not_allowed()),
        _ => Err(not_found_path(r)),
    }
}

/// `/v1/nodes/{node}/...`: a node's sub-resources and actions (`rest` after the node).
async fn node_route(state: &ApiState, r: &Request, node: &str, rest: &[&str]) -> ApiResult {
    let m = &r.method;
    match rest {
        ["states"] if m == Method::GET => node_states(state, r, node).await,
        ["states", "power"] if m == Method::PUT => set_power(state, r, node).await,
        ["states", "provision"] if m == Method::PUT => set_provision(state, r, node).await,
        ["validate"] if m == Method::GET => validate(state, node).await,
        ["maintenance"] if m == Method::PUT => set_maintenance(state, r, node, true).await,
        ["maintenance"] if m == Method::DELETE => set_maintenance(state, r, node, false).await,
        ["management", "boot_device"] if m == Method::GET => get_boot_device(state, node).await,
        ["management", "boot_device"] if m == Method::PUT => set_boot_device(state, r, node).await,
        ["management", "boot_device", "supported"] if m == Method::GET => {
            load_node(state, node).await?;
            Ok(json_response(StatusCode::OK, &json!({"supported_boot_devices": ["pxe", "disk"]})))
        }
        ["traits", rest @ ..] => ironic::traits(state, r, node, rest).await,
        ["vifs", rest @ ..] => ironic::vifs(state, r, node, rest).await,
        ["states", "raid"] if m == Method::PUT => ironic::set_raid(state, r, node).await,
        ["states", "console"] if m == Method::GET || m == Method::PUT => {
            ironic::console(state, r, node).await
        }
        ["management", "inject_nmi"] if m == Method::PUT => {
            ironic::inject_nmi(state, r, node).await
        }
        ["vendor_passthru", rest @ ..] => ironic::vendor_passthru(state, r, node, rest).await,
        ["portgroups"] | ["portgroups", "detail"] if m == Method::GET => {
            portgroups::of_node(state, r, node).await
        }
        ["ports"] | ["ports", "detail"] if m == Method::GET => {
            let uuid = load_node(state, node).await?.node.uuid;
            list_children(state, r, ChildKind::Port, Some(uuid), None).await
        }
        ["volume", rest @ ..] => {
            require_volume(r)?;
            let uuid = load_node(state, node).await?.node.uuid;
            match (rest, m) {
                ([], &Method::GET) => Ok(volume_links(r, &format!("nodes/{uuid}/volume"))),
                (["connectors"], &Method::GET) => {
                    list_children(state, r, ChildKind::Connector, Some(uuid), None).await
                }
                (["targets"], &Method::GET) => {
                    list_children(state, r, ChildKind::Target, Some(uuid), None).await
                }
                _ => Err(ApiError::bad_request(
                    "Malformed request URI: under a node, volume connectors and targets are only listed; use /v1/volume/connectors or /v1/volume/targets",
                )),
            }
        }
        // Sub-resources of later microversions (bios 1.40, history, firmware...): 404, as
        // Ironic answers at 1.38.
        [sub, ..]
            if ![
                "states",
                "validate",
                "maintenance",
                "management",
                "ports",
                "volume",
                "traits",
                "vifs",
                "vendor_passthru",
                "portgroups",
            ]
            .contains(sub) =>
        {
            Err(not_found_path(r))
        }
        _ => Err(method_not_allowed()),
    }
}

pub(super) fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "The method is not allowed for this resource.")
}

/// The routes of one kind of child below its collection (`rest`: the segments after it).
async fn children(state: &ApiState, r: &Request, kind: ChildKind, rest: &[&str]) -> ApiResult {
    match (rest, &r.method) {
        ([] | ["detail"], &Method::GET) => list_children(state, r, kind, None, None).await,
        ([], &Method::POST) => create_child(state, r, kind).await,
        ([id], &Method::GET) => show_child(state, r, kind, &child_uuid(kind, id)?).await,
        ([id], &Method::PATCH) => patch_child(state, r, kind, &child_uuid(kind, id)?).await,
        ([id], &Method::DELETE) => delete_child(state, kind, &child_uuid(kind, id)?).await,
        _ if kind == ChildKind::Port => Err(method_not_allowed()),
        _ => Err(not_found_path(r)),
    }
}

/// A port's, connector's or target's identifier: a UUID (up to 1.38 Ironic names them by UUID
/// only: a MAC or a name is 400, not 404), canonical.
fn child_uuid(kind: ChildKind, id: &str) -> Result<String, ApiError> {
    canonical_uuid(id).map_err(|_| {
        ApiError::bad_request(format!(
            "Invalid input for field/attribute {}_uuid. Value: '{id}'. Expected a UUID but received {id}.",
            kind.label().replace(' ', "_")
        ))
    })
}

pub(super) fn not_found_path(r: &Request) -> ApiError {
    ApiError::not_found(format!("The resource /v1/{} could not be found.", r.segments.join("/")))
}

/// Volume endpoints exist from 1.32 (404 below, as Ironic).
fn require_volume(r: &Request) -> Result<(), ApiError> {
    if r.minor < VOLUME_MINOR {
        return Err(not_found_path(r));
    }
    Ok(())
}

fn links(base: &str, resource: &str, uuid: &str) -> Value {
    json!([
        {"href": format!("{base}/v1/{resource}/{uuid}"), "rel": "self"},
        {"href": format!("{base}/{resource}/{uuid}"), "rel": "bookmark"},
    ])
}

fn volume_links(r: &Request, path: &str) -> Response {
    let base = &r.base;
    let link = |name: &str| {
        json!([{"href": format!("{base}/v1/{path}/{name}"), "rel": "self"},
               {"href": format!("{base}/{path}/{name}"), "rel": "bookmark"}])
    };
    json_response(
        StatusCode::OK,
        &json!({
            "connectors": link("connectors"),
            "targets": link("targets"),
            "links": [{"href": format!("{base}/v1/{path}/"), "rel": "self"},
                      {"href": format!("{base}/{path}/"), "rel": "bookmark"}],
        }),
    )
}

fn created(location: String, body: &Value) -> Response {
    let mut response = json_response(StatusCode::CREATED, body);
    if let Ok(v) = header::HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

// ---------------------------------------------------------------------------------------------
// Nodes

pub(super) async fn load_node(state: &ApiState, key: &str) -> Result<NodeRecord, ApiError> {
    Ok(state.inner.nodes.node(key).await?)
}

fn node_json(state: &ApiState, r: &Request, record: &NodeRecord) -> Value {
    let node: &Node = &record.node;
    let base = &r.base;
    let uuid = &node.uuid;
    let link = |path: &str| {
        json!([{"href": format!("{base}/v1/nodes/{uuid}/{path}"), "rel": "self"},
               {"href": format!("{base}/nodes/{uuid}/{path}"), "rel": "bookmark"}])
    };
    let mut out = json!({
        "uuid": uuid,
        "name": node.name,
        "driver": node.driver,
        "driver_info": node.driver_info,
        "driver_internal_info": node.driver_internal_info,
        "properties": node.properties,
        "instance_info": node.instance_info,
        "instance_uuid": node.instance_uuid,
        "extra": node.extra,
        "chassis_uuid": node.chassis_uuid,
        "power_state": node.power_state,
        "target_power_state": node.target_power_state,
        "provision_state": shown_provision_state(r, node.provision_state),
        "target_provision_state": node.target_provision_state.map(|t| shown_provision_state(r, t)),
        "provision_updated_at": node.provision_updated_at,
        "maintenance": node.maintenance,
        "maintenance_reason": node.maintenance_reason,
        "last_error": node.last_error,
        "console_enabled": node.console_enabled,
        "reservation": node.reservation,
        "inspection_started_at": null,
        "inspection_finished_at": null,
        "clean_step": {},
        "raid_config": {},
        "target_raid_config": node.target_raid_config,
        "resource_class": node.resource_class,
        "boot_interface": node.boot_interface,
        "deploy_interface": node.deploy_interface,
        "storage_interface": node.effective_storage_interface(state.inner.conductor.default_storage()),
        "traits": record.traits,
        "created_at": node.created_at,
        "updated_at": node.updated_at,
        "links": links(base, "nodes", uuid),
        "ports": link("ports"),
        "states": link("states"),
        "volume": link("volume"),
    });
    if let Some(map) = out.as_object_mut() {
        for kind in Interfaces::KINDS {
            map.insert(kind.field(), json!(node.interfaces.effective(node.driver, *kind)));
        }
    }
    versions::hide(&mut out, versions::NODE_FIELDS, r.minor);
    mask(&mut out);
    out
}

/// A provision state as microversion `r.minor` shows it: below 1.2 `available` is Ironic's
/// "no state" (null).
pub(super) fn shown_provision_state(r: &Request, state: ProvisionState) -> Value {
    if r.minor < 2 && state == ProvisionState::Available {
        return Value::Null;
    }
    json!(state)
}

/// Answers 406 when a list filter is newer than the request's microversion (`fault`, 1.42, is
/// above what bootvol serves).
fn check_filters(r: &Request) -> Result<(), ApiError> {
    for (key, _) in &r.query {
        let minor = match key.as_str() {
            "fault"
            | "conductor_group"
            | "owner"
            | "lessee"
            | "description_contains"
            | "conductor"
            | "project"
            | "sharded"
            | "shard"
            | "parent_node"
            | "include_children"
            | "retired"
            | "protected" => 100,
            other => versions::minor_of(versions::NODE_FILTERS, other),
        };
        if r.minor < minor {
            return Err(ApiError::not_acceptable(format!(
                "The {key} filter is not supported at API version 1.{} (bootvol serves up to 1.{})",
                r.minor,
                super::MAX_MINOR
            )));
        }
    }
    Ok(())
}

fn bool_param(r: &Request, key: &str) -> Result<Option<bool>, ApiError> {
    match r.param(key) {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") || v == "1" => Ok(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("false") || v == "0" => Ok(Some(false)),
        Some(v) => Err(ApiError::bad_request(format!(
            "Invalid value for {key}: {v:?}; true or false is expected"
        ))),
    }
}

/// The node list (`chassis`: only the nodes in it, `/v1/chassis/{uuid}/nodes`).
async fn list_nodes(
    state: &ApiState,
    r: &Request,
    detail: bool,
    chassis: Option<&str>,
) -> ApiResult {
    check_filters(r)?;
    fields_asked_version(r)?;
    let maintenance = bool_param(r, "maintenance")?;
    let associated = bool_param(r, "associated")?;
    let in_chassis = match chassis {
        Some(uuid) => Some(uuid.to_owned()),
        None => chassis::chassis_ref(r.param("chassis_uuid").map(|c| json!(c)))?,
    };
    let filter = NodeFilter {
        provision_state: r.param("provision_state").map(str::to_owned),
        driver: r.param("driver").map(str::to_owned),
        maintenance,
        associated,
        instance_uuid: r.param("instance_uuid").map(str::to_owned),
        resource_class: r.param("resource_class").map(str::to_owned),
        chassis_uuid: in_chassis,
    };
    let sort_key = r.param("sort_key").unwrap_or("created_at");
    if NodeService::sorts_by_index(sort_key)
        && matches!(r.param("sort_dir"), None | Some("asc" | "desc"))
    {
        // One keyset query for the page (and one node more, to know whether a next page is).
        let limit = page_limit(r)?;
        let descending = r.param("sort_dir") == Some("desc");
        let marker = r.param("marker").map(str::to_owned);
        let nodes = &state.inner.nodes;
        let mut records =
            nodes.node_page(filter, sort_key.to_owned(), descending, marker, limit + 1).await?;
        let more = records.len() > limit;
        records.truncate(limit);
        let items = records.iter().map(|record| node_json(state, r, record)).collect();
        return paged(r, "nodes", items, more, NODE_LIST_FIELDS, detail);
    }
    let records = state.inner.nodes.nodes().await?;
    let items = records
        .iter()
        .filter(|record| filter.keeps(&record.node))
        .map(|record| node_json(state, r, record))
        .collect();
    collection(r, "nodes", items, NODE_LIST_FIELDS, detail)
}

async fn show_node(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    fields_asked_version(r)?;
    let record = load_node(state, key).await?;
    shown(r, node_json(state, r, &record))
}

/// One resource as shown: the fields `?fields=` selects (all without it).
fn shown(r: &Request, doc: Value) -> ApiResult {
    let Some(fields) = r.param("fields") else {
        return Ok(json_response(StatusCode::OK, &doc));
    };
    let fields = parse_fields(fields)?;
    if let Some(f) = fields.iter().find(|f| doc.get(f.as_str()).is_none()) {
        return Err(ApiError::bad_request(format!("Field(s) \"{f}\" are not valid")));
    }
    Ok(json_response(StatusCode::OK, &select(doc, &fields)))
}

/// Drops null members (Ironic's "not given").
pub(super) fn without_nulls(value: Value) -> Result<Map<String, Value>, ApiError> {
    match value {
        Value::Object(map) => Ok(map.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => Err(ApiError::bad_request(format!(
            "The request body must be a JSON object, not {}",
            kind_of(&other)
        ))),
    }
}

pub(super) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Refuses (406, as Ironic) a field newer than the request's microversion.
fn fields_version<'a>(
    r: &Request,
    given: impl IntoIterator<Item = &'a str>,
) -> Result<(), ApiError> {
    for field in given {
        let minor = versions::minor_of(versions::NODE_FIELDS, field);
        if r.minor < minor {
            return Err(ApiError::not_acceptable(format!(
                "{field} needs API version 1.{minor} or later (this request asked for 1.{})",
                r.minor
            )));
        }
    }
    Ok(())
}

/// Refuses (406, as Ironic) `?fields=` naming a node field newer than the request's version.
fn fields_asked_version(r: &Request) -> Result<(), ApiError> {
    match r.param("fields") {
        Some(fields) => fields_version(r, parse_fields(fields)?.iter().map(String::as_str)),
        None => Ok(()),
    }
}

/// Ironic's answers to node fields bootvol keeps read-only in a create or a patch.
fn refuse_special(field: &str) -> Result<(), ApiError> {
    match field {
        "traits" => Err(ApiError::bad_request(
            "Cannot update node traits via node patch. Node traits should be updated via the node traits API.",
        )),
        _ => Ok(()),
    }
}

async fn create_node(state: &ApiState, r: &Request) -> ApiResult {
    let mut doc = r.json()?;
    if let Some(map) = doc.as_object() {
        for key in map.keys() {
            refuse_special(key)?;
        }
    }
    let chassis = chassis::chassis_ref(doc.as_object_mut().and_then(|m| m.remove("chassis_uuid")))?;
    let mut doc = without_nulls(doc)?;
    fields_version(r, doc.keys().map(String::as_str))?;
    for key in doc.keys() {
        if !NODE_PATCHABLE.contains(&key.as_str()) && key != "uuid" {
            return Err(ApiError::bad_request(format!(
                "{key}: not a field bootvol accepts when creating a node (fields: uuid, {})",
                NODE_PATCHABLE.join(", ")
            )));
        }
    }
    if !doc.contains_key("driver") {
        return Err(ApiError::bad_request(
            "driver: missing (fake-hardware, fake, redfish or ipmi)",
        ));
    }
    let uuid = body_uuid(&mut doc)?;
    doc.insert("uuid".into(), json!(uuid));
    if !doc.contains_key("name") {
        // bootvol's nodes always have a name: a node created without one is named by its UUID.
        doc.insert("name".into(), json!(uuid));
    }
    let spec = inventory::parse_node(&Value::Object(doc), &state.inner.config)
        .map_err(ApiError::bad_request)?;
    // Ironic: from 1.11 new nodes start in `enroll`; before, in `available`.
    let initial = if r.minor >= 11 { ProvisionState::Enroll } else { ProvisionState::Available };
    let record =
        state.inner.nodes.create_node_in_chassis(uuid.clone(), spec, initial, chassis).await?;
    Ok(created(format!("{}/v1/nodes/{uuid}", r.base), &node_json(state, r, &record)))
}

/// A create body's `uuid` (checked and made canonical), or a new one.
fn body_uuid(doc: &mut Map<String, Value>) -> Result<String, ApiError> {
    match doc.remove("uuid") {
        Some(Value::String(u)) => {
            canonical_uuid(&u).map_err(|e| ApiError::bad_request(format!("uuid: {e}")))
        }
        Some(other) => {
            Err(ApiError::bad_request(format!("uuid: must be a string, not {}", kind_of(&other))))
        }
        None => Ok(new_uuid()),
    }
}

async fn patch_node(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let patch = r.json()?;
    let record = load_node(state, key).await?;
    let node = &record.node;
    if let Some(ops) = patch.as_array() {
        for op in ops {
            let root = op["path"].as_str().unwrap_or_default().trim_start_matches('/');
            let root = root.split('/').next().unwrap_or_default();
            refuse_special(root)?;
        }
    }
    let mut doc = json!({
        "name": node.name,
        "driver": node.driver,
        "driver_info": node.driver_info,
        "properties": node.properties,
        "instance_info": node.instance_info,
        "extra": node.extra,
        "storage_interface": node.storage_interface,
        "boot_interface": node.boot_interface,
        "deploy_interface": node.deploy_interface,
        "instance_uuid": node.instance_uuid,
        "resource_class": node.resource_class,
        "chassis_uuid": node.chassis_uuid,
    });
    if let Some(map) = doc.as_object_mut() {
        for kind in Interfaces::KINDS {
            map.insert(kind.field(), json!(node.interfaces.get(*kind)));
        }
    }
    let touched = apply_patch(&mut doc, &patch, NODE_PATCHABLE, NODE_READ_ONLY)?;
    fields_version(r, touched.iter().map(String::as_str))?;
    if touched.iter().any(|t| t == "driver") {
        // A new hardware type: the interfaces not given fall back to its defaults (Ironic).
        let driver_default = |doc: &mut Value, field: &str| {
            if !touched.iter().any(|t| t == field)
                && let Some(map) = doc.as_object_mut()
            {
                map.insert(field.to_owned(), Value::Null);
            }
        };
        for kind in Interfaces::KINDS {
            driver_default(&mut doc, &kind.field());
        }
        driver_default(&mut doc, "boot_interface");
        driver_default(&mut doc, "deploy_interface");
    }
    let new_instance = doc["instance_uuid"].as_str().map(str::to_owned);
    if let (Some(old), Some(new)) = (&node.instance_uuid, &new_instance)
        && old != new
    {
        return Err(ApiError::conflict(format!(
            "Node {} is associated with instance {old}.",
            node.uuid
        )));
    }
    let mut map = without_nulls(doc)?;
    if !map.contains_key("driver") {
        return Err(ApiError::bad_request("driver: a node needs a driver; it can not be removed"));
    }
    if !map.contains_key("name") {
        map.insert("name".into(), json!(node.uuid));
    }
    map.insert("uuid".into(), json!(node.uuid));
    let chassis = chassis::chassis_ref(map.remove("chassis_uuid"))?;
    let spec = inventory::parse_node(&Value::Object(map), &state.inner.config)
        .map_err(ApiError::bad_request)?;
    let nodes = &state.inner.nodes;
    let record = if touched.iter().any(|t| t == "chassis_uuid") {
        nodes.update_node_in_chassis(&node.uuid, spec, chassis).await?
    } else {
        nodes.update_node(&node.uuid, spec).await?
    };
    Ok(json_response(StatusCode::OK, &node_json(state, r, &record)))
}

/// Every read-only field of a node document.
const NODE_READ_ONLY: &[&str] = &[
    "uuid",
    "driver_internal_info",
    "power_state",
    "target_power_state",
    "provision_state",
    "target_provision_state",
    "provision_updated_at",
    "maintenance",
    "maintenance_reason",
    "last_error",
    "console_enabled",
    "reservation",
    "inspection_started_at",
    "inspection_finished_at",
    "clean_step",
    "raid_config",
    "target_raid_config",
    "traits",
    "created_at",
    "updated_at",
    "links",
    "ports",
    "states",
    "volume",
];

async fn delete_node(state: &ApiState, key: &str) -> ApiResult {
    state.inner.nodes.delete_node(key).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `PUT /v1/nodes/{node}/maintenance` (`{"reason": ...}`, optional) and `DELETE`: sets or
/// clears maintenance at once (202, as Ironic).
async fn set_maintenance(state: &ApiState, r: &Request, key: &str, on: bool) -> ApiResult {
    let reason = if on && !r.body.is_empty() {
        let body = r.json()?;
        let Value::Object(body) = body else {
            return Err(ApiError::bad_request(
                "The body must be a JSON object, like {\"reason\": \"...\"}",
            ));
        };
        if let Some(key) = body.keys().find(|k| *k != "reason") {
            return Err(ApiError::bad_request(format!(
                "{key}: not a field of a maintenance request (fields: reason)"
            )));
        }
        match body.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "reason: must be a string, not {}",
                    kind_of(other)
                )));
            }
        }
    } else {
        None
    };
    let uuid = state.inner.nodes.set_maintenance(key, on, reason).await?.node.uuid;
    Ok(accepted(r, &uuid))
}

/// Applies a client's JSON patch (any bytes) to a node document as `PATCH /v1/nodes/{node}`
/// does (Ironic's operation rules, then RFC 6902), for the fuzzer and its corpus replay
/// (`fuzz/`): no input panics it. When the patch applies, only patchable fields changed.
#[doc(hidden)]
pub fn check_node_patch(patch: &[u8]) -> bool {
    let Ok(patch) = serde_json::from_slice::<Value>(patch) else { return false };
    let original = json!({
        "name": "n1", "driver": "fake", "driver_info": {"ipmi_password": "******", "x": [1, 2]},
        "properties": {"capabilities": "iscsi_boot:true"}, "instance_info": {}, "extra": {"a": {"b": 1}},
        "storage_interface": "external", "boot_interface": "ipxe", "deploy_interface": "direct",
        "uuid": "11111111-1111-4111-8111-111111111111", "provision_state": "available",
    });
    let mut doc = original.clone();
    let Ok(touched) = apply_patch(&mut doc, &patch, NODE_PATCHABLE, NODE_READ_ONLY) else {
        return false;
    };
    let (Some(before), Some(after)) = (original.as_object(), doc.as_object()) else {
        panic!("a patch turned the node document into {doc}");
    };
    for key in before.keys().chain(after.keys()) {
        if before.get(key) != after.get(key) {
            assert!(NODE_PATCHABLE.contains(&key.as_str()), "read-only {key} changed by {patch}");
            assert!(touched.iter().any(|t| t == key), "{key} changed but not reported");
        }
    }
    true
}
