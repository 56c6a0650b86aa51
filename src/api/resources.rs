//! The API's resources: nodes (with states, validation and the boot device), ports, volume
//! connectors and volume targets, in Ironic's JSON shapes.

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{
    ApiError, ApiResult, ApiState, Request, STORAGE_INTERFACE_MINOR, VOLUME_MINOR, apply_patch,
    collection, json_response, parse_fields, select,
};
use crate::conductor::{Action, ConductorError, Verb, plan};
use crate::db::{ChildKind, Stamped};
use crate::inventory;
use crate::model::{
    Driver, Node, NodeRecord, Port, PowerState, ProvisionState, VolumeConnector, VolumeTarget,
    canonical_uuid, new_uuid,
};
use crate::power::{BootDevice, PowerAction};
use crate::secrets::{mask, restore_masked};

const NODE_LIST_FIELDS: &[&str] =
    &["uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance"];
const PORT_LIST_FIELDS: &[&str] = &["uuid", "address"];
const CONNECTOR_LIST_FIELDS: &[&str] = &["uuid", "node_uuid", "type", "connector_id"];
const TARGET_LIST_FIELDS: &[&str] =
    &["uuid", "node_uuid", "volume_type", "boot_index", "volume_id"];

/// Node fields an operator may change with PATCH; the others are read-only.
const NODE_PATCHABLE: &[&str] = &[
    "name",
    "driver",
    "driver_info",
    "properties",
    "instance_info",
    "extra",
    "storage_interface",
    "boot_interface",
    "deploy_interface",
];

pub(super) async fn route(state: &ApiState, r: &Request) -> ApiResult {
    let segments: Vec<&str> = r.segments.iter().map(String::as_str).collect();
    let m = &r.method;
    match segments.as_slice() {
        ["nodes"] if m == Method::GET => list_nodes(state, r, false).await,
        ["nodes"] if m == Method::POST => create_node(state, r).await,
        ["nodes", "detail"] if m == Method::GET => list_nodes(state, r, true).await,
        ["nodes", node] if m == Method::GET => show_node(state, r, node).await,
        ["nodes", node] if m == Method::PATCH => patch_node(state, r, node).await,
        ["nodes", node] if m == Method::DELETE => delete_node(state, node).await,
        ["nodes", node, "states"] if m == Method::GET => node_states(state, r, node).await,
        ["nodes", node, "states", "power"] if m == Method::PUT => set_power(state, r, node).await,
        ["nodes", node, "states", "provision"] if m == Method::PUT => {
            set_provision(state, r, node).await
        }
        ["nodes", node, "validate"] if m == Method::GET => validate(state, node).await,
        ["nodes", node, "maintenance"] if m == Method::PUT => {
            set_maintenance(state, r, node, true).await
        }
        ["nodes", node, "maintenance"] if m == Method::DELETE => {
            set_maintenance(state, r, node, false).await
        }
        ["nodes", node, "management", "boot_device"] if m == Method::GET => {
            get_boot_device(state, node).await
        }
        ["nodes", node, "management", "boot_device"] if m == Method::PUT => {
            set_boot_device(state, r, node).await
        }
        ["nodes", node, "management", "boot_device", "supported"] if m == Method::GET => {
            load_node(state, node).await?;
            Ok(json_response(StatusCode::OK, &json!({"supported_boot_devices": ["pxe", "disk"]})))
        }
        ["nodes", node, "ports"] if m == Method::GET => {
            let uuid = load_node(state, node).await?.node.uuid;
            list_ports(state, r, Some(uuid), false).await
        }
        ["nodes", node, "ports", "detail"] if m == Method::GET => {
            let uuid = load_node(state, node).await?.node.uuid;
            list_ports(state, r, Some(uuid), true).await
        }
        ["nodes", node, "volume", rest @ ..] => {
            require_volume(r)?;
            let uuid = load_node(state, node).await?.node.uuid;
            match (rest, m) {
                ([], &Method::GET) => Ok(volume_links(r, &format!("nodes/{uuid}/volume"))),
                (["connectors"], &Method::GET) => list_connectors(state, r, Some(uuid)).await,
                (["targets"], &Method::GET) => list_targets(state, r, Some(uuid)).await,
                _ => Err(ApiError::bad_request(
                    "Malformed request URI: under a node, volume connectors and targets are only listed; use /v1/volume/connectors or /v1/volume/targets",
                )),
            }
        }
        ["ports"] if m == Method::GET => list_ports(state, r, None, false).await,
        ["ports"] if m == Method::POST => write_port(state, r, None).await,
        ["ports", "detail"] if m == Method::GET => list_ports(state, r, None, true).await,
        ["ports", id] if m == Method::GET => show_child(state, r, ChildKind::Port, id).await,
        ["ports", id] if m == Method::PATCH => write_port(state, r, Some(id)).await,
        ["ports", id] if m == Method::DELETE => delete_child(state, ChildKind::Port, id).await,
        ["volume", rest @ ..] => {
            require_volume(r)?;
            match (rest, m) {
                ([], &Method::GET) => Ok(volume_links(r, "volume")),
                (["connectors"], &Method::GET) => list_connectors(state, r, None).await,
                (["connectors"], &Method::POST) => write_connector(state, r, None).await,
                (["connectors", "detail"], &Method::GET) => list_connectors(state, r, None).await,
                (["connectors", id], &Method::GET) => {
                    show_child(state, r, ChildKind::Connector, id).await
                }
                (["connectors", id], &Method::PATCH) => write_connector(state, r, Some(id)).await,
                (["connectors", id], &Method::DELETE) => {
                    delete_child(state, ChildKind::Connector, id).await
                }
                (["targets"], &Method::GET) => list_targets(state, r, None).await,
                (["targets"], &Method::POST) => write_target(state, r, None).await,
                (["targets", "detail"], &Method::GET) => list_targets(state, r, None).await,
                (["targets", id], &Method::GET) => {
                    show_child(state, r, ChildKind::Target, id).await
                }
                (["targets", id], &Method::PATCH) => write_target(state, r, Some(id)).await,
                (["targets", id], &Method::DELETE) => {
                    delete_child(state, ChildKind::Target, id).await
                }
                _ => Err(not_found_path(r)),
            }
        }
        ["nodes" | "ports", ..] => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "The method is not allowed for this resource.",
        )),
        _ => Err(not_found_path(r)),
    }
}

fn not_found_path(r: &Request) -> ApiError {
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

fn map_conductor(e: ConductorError) -> ApiError {
    match e {
        ConductorError::NotFound(n) => ApiError::not_found(format!("Node {n} could not be found.")),
        ConductorError::Locked(l) => locked(&l),
        ConductorError::Refused(m) => ApiError::conflict(m),
        ConductorError::Failed(m) => ApiError::bad_request(m),
        ConductorError::Db(e) => e.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Nodes

async fn load_node(state: &ApiState, key: &str) -> Result<NodeRecord, ApiError> {
    let key = key.to_owned();
    let found = state.inner.conductor.db().run({
        let key = key.clone();
        move |db| db.node_record(&key)
    });
    found.await?.ok_or_else(|| ApiError::not_found(format!("Node {key} could not be found.")))
}

fn interface_of(driver: Driver) -> &'static str {
    match driver {
        Driver::Fake => "fake",
        Driver::Redfish => "redfish",
        Driver::Ipmi => "ipmitool",
    }
}

fn node_json(state: &ApiState, r: &Request, record: &NodeRecord) -> Value {
    let node: &Node = &record.node;
    let base = &r.base;
    let uuid = &node.uuid;
    let power = interface_of(node.driver);
    let mut out = json!({
        "uuid": uuid,
        "name": node.name,
        "driver": node.driver,
        "driver_info": node.driver_info,
        "driver_internal_info": node.driver_internal_info,
        "properties": node.properties,
        "instance_info": node.instance_info,
        "instance_uuid": null,
        "extra": node.extra,
        "chassis_uuid": null,
        "power_state": node.power_state,
        "target_power_state": node.target_power_state,
        "provision_state": node.provision_state,
        "target_provision_state": node.target_provision_state,
        "provision_updated_at": null,
        "maintenance": node.maintenance,
        "maintenance_reason": node.maintenance_reason,
        "last_error": node.last_error,
    });
    let more = json!({
        "console_enabled": false,
        "reservation": null,
        "inspection_started_at": null,
        "inspection_finished_at": null,
        "clean_step": {},
        "raid_config": {},
        "target_raid_config": {},
        "resource_class": null,
    });
    let interfaces = json!({
        "boot_interface": node.boot_interface,
        "deploy_interface": node.deploy_interface,
        "console_interface": "no-console",
        "inspect_interface": "no-inspect",
        "management_interface": power,
        "network_interface": "noop",
        "power_interface": power,
        "raid_interface": "no-raid",
        "rescue_interface": "no-rescue",
        "vendor_interface": "no-vendor",
        "traits": [],
        "created_at": node.created_at,
        "updated_at": node.updated_at,
        "links": links(base, "nodes", uuid),
        "ports": [{"href": format!("{base}/v1/nodes/{uuid}/ports"), "rel": "self"},
                  {"href": format!("{base}/nodes/{uuid}/ports"), "rel": "bookmark"}],
        "states": [{"href": format!("{base}/v1/nodes/{uuid}/states"), "rel": "self"},
                   {"href": format!("{base}/nodes/{uuid}/states"), "rel": "bookmark"}],
    });
    if let Some(map) = out.as_object_mut() {
        for part in [more, interfaces] {
            if let Value::Object(part) = part {
                map.extend(part);
            }
        }
        if r.minor >= STORAGE_INTERFACE_MINOR {
            let default = state.inner.conductor.default_storage();
            map.insert(
                "storage_interface".into(),
                json!(node.effective_storage_interface(default)),
            );
        }
        if r.minor >= VOLUME_MINOR {
            map.insert(
                "volume".into(),
                json!([{"href": format!("{base}/v1/nodes/{uuid}/volume"), "rel": "self"},
                       {"href": format!("{base}/nodes/{uuid}/volume"), "rel": "bookmark"}]),
            );
        }
    }
    mask(&mut out);
    out
}

async fn list_nodes(state: &ApiState, r: &Request, detail: bool) -> ApiResult {
    let records = state.inner.conductor.db().run(|db| db.node_records()).await?;
    let mut items: Vec<Value> = Vec::new();
    for record in &records {
        let n = &record.node;
        if r.param("provision_state").is_some_and(|p| p != n.provision_state.as_str())
            || r.param("driver").is_some_and(|d| d != n.driver.as_str())
            || r.param("maintenance")
                .is_some_and(|m| m.eq_ignore_ascii_case("true") != n.maintenance)
        {
            continue;
        }
        items.push(node_json(state, r, record));
    }
    collection(r, "nodes", items, NODE_LIST_FIELDS, detail)
}

async fn show_node(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    let mut doc = node_json(state, r, &record);
    if let Some(fields) = r.param("fields") {
        let fields = parse_fields(fields)?;
        for f in &fields {
            if doc.get(f).is_none() {
                return Err(ApiError::bad_request(format!("Field(s) \"{f}\" are not valid")));
            }
        }
        doc = select(doc, &fields);
    }
    Ok(json_response(StatusCode::OK, &doc))
}

/// Drops null members (Ironic's "not given").
fn without_nulls(value: Value) -> Result<Map<String, Value>, ApiError> {
    match value {
        Value::Object(map) => Ok(map.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => Err(ApiError::bad_request(format!(
            "The request body must be a JSON object, not {}",
            kind_of(&other)
        ))),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn storage_interface_version(r: &Request, given: bool) -> Result<(), ApiError> {
    if given && r.minor < STORAGE_INTERFACE_MINOR {
        return Err(ApiError::not_acceptable(format!(
            "storage_interface needs API version 1.{STORAGE_INTERFACE_MINOR} or later (this request asked for 1.{})",
            r.minor
        )));
    }
    Ok(())
}

/// Restores masked secrets in a node document's JSON fields from the stored node.
fn restore_node_secrets(
    doc: &mut Map<String, Value>,
    stored: Option<&Node>,
) -> Result<(), ApiError> {
    for (key, stored_map) in [
        ("driver_info", stored.map(|n| &n.driver_info)),
        ("instance_info", stored.map(|n| &n.instance_info)),
        ("properties", stored.map(|n| &n.properties)),
        ("extra", stored.map(|n| &n.extra)),
    ] {
        if let Some(Value::Object(map)) = doc.get_mut(key) {
            restore_masked(map, stored_map).map_err(|path| {
                ApiError::bad_request(format!(
                    "{key}.{path}: masked (******) but no secret is stored; give the real value"
                ))
            })?;
        }
    }
    Ok(())
}

async fn create_node(state: &ApiState, r: &Request) -> ApiResult {
    let mut doc = without_nulls(r.json()?)?;
    storage_interface_version(r, doc.contains_key("storage_interface"))?;
    for key in doc.keys() {
        if !NODE_PATCHABLE.contains(&key.as_str()) && key != "uuid" {
            return Err(ApiError::bad_request(format!(
                "{key}: not a field bootvol accepts when creating a node (fields: uuid, {})",
                NODE_PATCHABLE.join(", ")
            )));
        }
    }
    if !doc.contains_key("driver") {
        return Err(ApiError::bad_request("driver: missing (fake, redfish or ipmi)"));
    }
    let uuid = match doc.get("uuid") {
        Some(Value::String(u)) => {
            canonical_uuid(u).map_err(|e| ApiError::bad_request(format!("uuid: {e}")))?
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "uuid: must be a string, not {}",
                kind_of(other)
            )));
        }
        None => new_uuid(),
    };
    doc.insert("uuid".into(), json!(uuid));
    if !doc.contains_key("name") {
        // bootvol's nodes always have a name: a node created without one is named by its UUID.
        doc.insert("name".into(), json!(uuid));
    }
    restore_node_secrets(&mut doc, None)?;
    let spec = inventory::parse_node(&Value::Object(doc), &state.inner.config)
        .map_err(ApiError::bad_request)?;
    // Ironic: from 1.11 new nodes start in `enroll`; before, in `available`.
    let initial = if r.minor >= 11 { ProvisionState::Enroll } else { ProvisionState::Available };
    let write = {
        let (uuid, spec) = (uuid.clone(), spec.clone());
        state.inner.conductor.db().run(move |db| db.create_node(&uuid, &spec, initial))
    };
    write.await?;
    let record = load_node(state, &uuid).await?;
    record_change(state, "node", "create", &uuid, &uuid).await;
    Ok(created(format!("{}/v1/nodes/{uuid}", r.base), &node_json(state, r, &record)))
}

/// Ironic's answer for a node another action holds.
fn locked(l: &crate::db::Locked) -> ApiError {
    ApiError::conflict(format!(
        "Node {} is locked by {} (since {}), please retry after the current operation is completed.",
        l.node, l.action, l.since
    ))
}

async fn check_unlocked(state: &ApiState, node: &Node) -> Result<(), ApiError> {
    match state.inner.conductor.db().node_locked(&node.uuid).await? {
        Some(l) => Err(locked(&l)),
        None => Ok(()),
    }
}

async fn patch_node(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let patch = r.json()?;
    let record = load_node(state, key).await?;
    let node = &record.node;
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
    });
    let touched = apply_patch(&mut doc, &patch, NODE_PATCHABLE, NODE_READ_ONLY)?;
    storage_interface_version(r, touched.iter().any(|t| t == "storage_interface"))?;
    let mut map = without_nulls(doc)?;
    if !map.contains_key("driver") {
        return Err(ApiError::bad_request("driver: a node needs a driver; it can not be removed"));
    }
    if !map.contains_key("name") {
        map.insert("name".into(), json!(node.uuid));
    }
    map.insert("uuid".into(), json!(node.uuid));
    restore_node_secrets(&mut map, Some(node))?;
    let mut spec = inventory::parse_node(&Value::Object(map), &state.inner.config)
        .map_err(ApiError::bad_request)?;
    spec.maintenance = Some(node.maintenance);
    check_unlocked(state, node).await?;
    let write = {
        let (uuid, spec) = (node.uuid.clone(), spec.clone());
        state.inner.conductor.db().run(move |db| db.update_node(&uuid, &spec))
    };
    write.await?;
    record_change(state, "node", "update", &node.uuid, &node.uuid).await;
    let record = load_node(state, &node.uuid).await?;
    Ok(json_response(StatusCode::OK, &node_json(state, r, &record)))
}

/// Every read-only field of a node document.
const NODE_READ_ONLY: &[&str] = &[
    "uuid",
    "driver_internal_info",
    "instance_uuid",
    "chassis_uuid",
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
    "resource_class",
    "console_interface",
    "inspect_interface",
    "management_interface",
    "network_interface",
    "power_interface",
    "raid_interface",
    "rescue_interface",
    "vendor_interface",
    "traits",
    "created_at",
    "updated_at",
    "links",
    "ports",
    "states",
    "volume",
];

async fn delete_node(state: &ApiState, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    check_unlocked(state, &record.node).await?;
    let conductor = &state.inner.conductor;
    let started = conductor.start(&record.node.uuid, Action::Delete).await;
    started.map_err(map_conductor)?.finished().await.map_err(map_conductor)?;
    record_change(state, "node", "delete", &record.node.uuid, &record.node.uuid).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Records a create, update or delete made through the API as an event with Ironic's name
/// (`baremetal.node.update.end`, `baremetal.port.create.end`, ...): the node's history, and the
/// webhook's, shows who changed what. A failure to record is logged; the change stands.
async fn record_change(
    state: &ApiState,
    resource: &str,
    action: &str,
    node_uuid: &str,
    uuid: &str,
) {
    let payload = json!({"uuid": uuid, "node_uuid": node_uuid});
    let event_type = format!("baremetal.{resource}.{action}.end");
    state.inner.conductor.db().record_event(node_uuid, event_type, "info", payload).await;
}

/// `PUT /v1/nodes/{node}/maintenance` (`{"reason": ...}`, optional) and `DELETE`: sets or
/// clears maintenance at once (202, as Ironic). A node in maintenance is left out of the
/// power-state sync, and its ports may change while it is deployed.
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
            Some(Value::String(text)) => {
                if text.chars().count() > 255 || text.chars().any(char::is_control) {
                    return Err(ApiError::bad_request(
                        "reason: at most 255 characters, without control characters",
                    ));
                }
                Some(text.clone())
            }
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
    let record = load_node(state, key).await?;
    let uuid = record.node.uuid.clone();
    let write = {
        let (uuid, reason) = (uuid.clone(), reason.clone());
        state.inner.conductor.db().run(move |db| db.set_maintenance(&uuid, on, reason.as_deref()))
    };
    write.await?;
    let payload = json!({"node_uuid": uuid, "node_name": record.node.name, "maintenance": on, "reason": reason});
    let event_type = "baremetal.node.maintenance_set.end".to_owned();
    state.inner.conductor.db().record_event(&uuid, event_type, "info", payload).await;
    Ok(accepted(r, &uuid))
}

async fn node_states(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    let n = &record.node;
    let _ = r;
    let mut doc = json!({
        "power_state": n.power_state,
        "target_power_state": n.target_power_state,
        "provision_state": n.provision_state,
        "target_provision_state": n.target_provision_state,
        "provision_updated_at": null,
        "last_error": n.last_error,
        "console_enabled": false,
        "raid_config": {},
        "target_raid_config": {},
    });
    mask(&mut doc);
    let _ = state;
    Ok(json_response(StatusCode::OK, &doc))
}

/// A body's `target` (a string), refusing members other than `allowed`.
fn target_of(r: &Request, allowed: &[&str]) -> Result<(String, Map<String, Value>), ApiError> {
    let body = without_nulls(r.json()?)?;
    for key in body.keys() {
        if key != "target" && !allowed.contains(&key.as_str()) {
            return Err(ApiError::bad_request(format!("{key}: not accepted here")));
        }
    }
    match body.get("target") {
        Some(Value::String(t)) => Ok((t.clone(), body)),
        Some(other) => {
            Err(ApiError::bad_request(format!("target: must be a string, not {}", kind_of(other))))
        }
        None => Err(ApiError::bad_request("target: missing")),
    }
}

fn accepted(r: &Request, uuid: &str) -> Response {
    let mut response = StatusCode::ACCEPTED.into_response();
    if let Ok(v) = header::HeaderValue::from_str(&format!("{}/v1/nodes/{uuid}/states", r.base)) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

async fn set_power(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let (target, body) = target_of(r, &["timeout"])?;
    if let Some(t) = body.get("timeout")
        && t.as_u64().is_none_or(|t| t == 0)
    {
        return Err(ApiError::bad_request("timeout: must be a positive integer"));
    }
    let action = match target.as_str() {
        "power on" => PowerAction::On,
        "power off" => PowerAction::Off,
        "rebooting" => PowerAction::Reboot,
        "soft power off" => PowerAction::SoftOff,
        other => {
            return Err(ApiError::bad_request(format!(
                "Invalid power target {other:?}: power on, power off, rebooting or soft power off"
            )));
        }
    };
    let record = load_node(state, key).await?;
    let report = state.inner.conductor.validate(&record).await;
    if let Some(check) = report.0.iter().find(|c| c.interface == "power" && !c.result) {
        return Err(ApiError::bad_request(format!(
            "Failed to validate power driver interface for node {}: {}",
            record.node.uuid,
            check.reason.as_deref().unwrap_or("invalid")
        )));
    }
    start_action(state, r, &record.node.uuid, Action::Power(action)).await
}

/// 202: the conductor accepted the action, holds the node's lock for it and runs it on its
/// own task.
async fn start_action(state: &ApiState, r: &Request, uuid: &str, action: Action) -> ApiResult {
    state.inner.conductor.start(uuid, action).await.map_err(map_conductor)?;
    Ok(accepted(r, uuid))
}

async fn set_provision(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let (target, body) = target_of(r, &["configdrive", "clean_steps", "deploy_steps"])?;
    if let Some(extra) =
        ["configdrive", "clean_steps", "deploy_steps"].iter().find(|k| body.contains_key(**k))
    {
        return Err(ApiError::bad_request(format!(
            "{extra}: not supported by bootvol (give a config drive as instance_info.configdrive)"
        )));
    }
    let verb: Verb = match target.as_str() {
        "active" | "deleted" | "manage" | "provide" | "adopt" => {
            target.parse().map_err(|e: crate::model::ValueError| ApiError::bad_request(e.0))?
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "The requested action \"{other}\" is not supported (active, deleted, manage, provide, adopt)"
            )));
        }
    };
    let record = load_node(state, key).await?;
    plan(record.node.provision_state, verb).map_err(|m| {
        ApiError::bad_request(format!(
            "The requested action \"{target}\" can not be performed on node \"{}\" while it is in state \"{}\": {m}",
            record.node.uuid, record.node.provision_state
        ))
    })?;
    start_action(state, r, &record.node.uuid, Action::Provision(verb)).await
}

async fn validate(state: &ApiState, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    let report = state.inner.conductor.validate(&record).await;
    let mut doc = Map::new();
    for check in &report.0 {
        doc.insert(check.interface.into(), json!({"result": check.result, "reason": check.reason}));
    }
    if let Some(power) = doc.get("power").cloned() {
        doc.insert("management".into(), power);
    }
    doc.insert("network".into(), json!({"result": true, "reason": null}));
    for unsupported in ["console", "inspect", "raid", "rescue", "bios"] {
        doc.insert(unsupported.into(), json!({"result": null, "reason": "not supported"}));
    }
    let mut doc = Value::Object(doc);
    mask(&mut doc);
    Ok(json_response(StatusCode::OK, &doc))
}

async fn get_boot_device(state: &ApiState, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    let device =
        record.node.driver_internal_info.get("boot_device").cloned().unwrap_or(Value::Null);
    Ok(json_response(StatusCode::OK, &json!({"boot_device": device, "persistent": null})))
}

async fn set_boot_device(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let body = without_nulls(r.json()?)?;
    for k in body.keys() {
        if k != "boot_device" && k != "persistent" {
            return Err(ApiError::bad_request(format!("{k}: not accepted here")));
        }
    }
    let device = match body.get("boot_device").and_then(Value::as_str) {
        Some("pxe") => BootDevice::Pxe,
        Some("disk") => BootDevice::Disk,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid boot device {other:?}: pxe or disk"
            )));
        }
        None => return Err(ApiError::bad_request("boot_device: missing (pxe or disk)")),
    };
    let persistent = match body.get("persistent") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(_) => return Err(ApiError::bad_request("persistent: must be true or false")),
    };
    let record = load_node(state, key).await?;
    let conductor = &state.inner.conductor;
    let started = conductor.start(&record.node.uuid, Action::BootDevice { device, persistent });
    started.await.map_err(map_conductor)?.finished().await.map_err(map_conductor)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---------------------------------------------------------------------------------------------
// Ports, volume connectors, volume targets

fn port_json(r: &Request, s: &Stamped<Port>) -> Value {
    json!({
        "uuid": s.item.uuid,
        "address": s.item.address,
        "node_uuid": s.node_uuid,
        "extra": s.item.extra,
        "local_link_connection": {},
        "pxe_enabled": true,
        "internal_info": {},
        "physical_network": null,
        "portgroup_uuid": null,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "links": links(&r.base, "ports", &s.item.uuid),
    })
}

fn connector_json(r: &Request, s: &Stamped<VolumeConnector>) -> Value {
    json!({
        "uuid": s.item.uuid,
        "node_uuid": s.node_uuid,
        "type": s.item.connector_type,
        "connector_id": s.item.connector_id,
        "extra": s.item.extra,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "links": links(&r.base, "volume/connectors", &s.item.uuid),
    })
}

fn target_json(r: &Request, s: &Stamped<VolumeTarget>) -> Value {
    json!({
        "uuid": s.item.uuid,
        "node_uuid": s.node_uuid,
        "volume_type": s.item.volume_type,
        "boot_index": s.item.boot_index,
        "volume_id": s.item.volume_id,
        "properties": s.item.properties,
        "extra": s.item.extra,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "links": links(&r.base, "volume/targets", &s.item.uuid),
    })
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

async fn list_ports(
    state: &ApiState,
    r: &Request,
    node: Option<String>,
    detail: bool,
) -> ApiResult {
    let node = node_filter(state, r, node).await?;
    let rows = state.inner.conductor.db().run(|db| db.stamped_ports()).await?;
    let address = r
        .param("address")
        .map(|a| {
            a.parse::<crate::model::MacAddr>()
                .map_err(|e| ApiError::bad_request(format!("address: {e}")))
        })
        .transpose()?;
    let items = rows
        .iter()
        .filter(|s| node.as_ref().is_none_or(|n| &s.node_uuid == n))
        .filter(|s| address.is_none_or(|a| s.item.address == a))
        .map(|s| port_json(r, s))
        .collect();
    collection(r, "ports", items, PORT_LIST_FIELDS, detail)
}

async fn list_connectors(state: &ApiState, r: &Request, node: Option<String>) -> ApiResult {
    let node = node_filter(state, r, node).await?;
    let detail = r.segments.last().is_some_and(|s| s == "detail");
    let rows = state.inner.conductor.db().run(|db| db.stamped_connectors()).await?;
    let items = rows
        .iter()
        .filter(|s| node.as_ref().is_none_or(|n| &s.node_uuid == n))
        .map(|s| connector_json(r, s))
        .collect();
    collection(r, "connectors", items, CONNECTOR_LIST_FIELDS, detail)
}

async fn list_targets(state: &ApiState, r: &Request, node: Option<String>) -> ApiResult {
    let node = node_filter(state, r, node).await?;
    let detail = r.segments.last().is_some_and(|s| s == "detail");
    let rows = state.inner.conductor.db().run(|db| db.stamped_targets()).await?;
    let items = rows
        .iter()
        .filter(|s| node.as_ref().is_none_or(|n| &s.node_uuid == n))
        .map(|s| {
            let mut v = target_json(r, s);
            mask(&mut v);
            v
        })
        .collect();
    collection(r, "targets", items, TARGET_LIST_FIELDS, detail)
}

/// One child as stored: its JSON (unmasked) and its node.
async fn find_child(
    state: &ApiState,
    r: &Request,
    kind: ChildKind,
    id: &str,
) -> Result<(Value, String), ApiError> {
    let (what, found) = match kind {
        ChildKind::Port => {
            let rows = state.inner.conductor.db().run(|db| db.stamped_ports()).await?;
            (
                "Port",
                rows.iter()
                    .find(|s| s.item.uuid == id)
                    .map(|s| (port_json(r, s), s.node_uuid.clone())),
            )
        }
        ChildKind::Connector => {
            let rows = state.inner.conductor.db().run(|db| db.stamped_connectors()).await?;
            (
                "Volume connector",
                rows.iter()
                    .find(|s| s.item.uuid == id)
                    .map(|s| (connector_json(r, s), s.node_uuid.clone())),
            )
        }
        ChildKind::Target => {
            let rows = state.inner.conductor.db().run(|db| db.stamped_targets()).await?;
            (
                "Volume target",
                rows.iter()
                    .find(|s| s.item.uuid == id)
                    .map(|s| (target_json(r, s), s.node_uuid.clone())),
            )
        }
    };
    found.ok_or_else(|| ApiError::not_found(format!("{what} {id} could not be found.")))
}

async fn show_child(state: &ApiState, r: &Request, kind: ChildKind, id: &str) -> ApiResult {
    let (mut doc, _) = find_child(state, r, kind, id).await?;
    mask(&mut doc);
    if let Some(fields) = r.param("fields") {
        let fields = parse_fields(fields)?;
        for f in &fields {
            if doc.get(f).is_none() {
                return Err(ApiError::bad_request(format!("Field(s) \"{f}\" are not valid")));
            }
        }
        doc = select(doc, &fields);
    }
    Ok(json_response(StatusCode::OK, &doc))
}

/// Whether a node is deployed or on its way in or out (its volume and MACs are in use).
fn deployed(state: ProvisionState) -> bool {
    matches!(
        state,
        ProvisionState::Active
            | ProvisionState::Deploying
            | ProvisionState::WaitCallBack
            | ProvisionState::Deleting
    )
}

/// Ironic's rule for a port's address: on a deployed node it changes (or the port goes) only
/// in maintenance. Its MAC is how the node is given the script that boots its volume.
async fn port_editable(state: &ApiState, node_uuid: &str) -> Result<(), ApiError> {
    let record = load_node(state, node_uuid).await?;
    let node = &record.node;
    if deployed(node.provision_state) && !node.maintenance {
        return Err(ApiError::bad_request(format!(
            "Invalid state requested: the port addresses of node {} ({}) change only in maintenance: they pick the script it boots (set maintenance first)",
            node.uuid, node.provision_state
        )));
    }
    Ok(())
}

/// Ironic's rule for volume connectors and targets: they change only while the node is
/// powered off or not deployed.
async fn volume_editable(state: &ApiState, node_uuid: &str) -> Result<(), ApiError> {
    let record = load_node(state, node_uuid).await?;
    let node = &record.node;
    if deployed(node.provision_state) && node.power_state != Some(PowerState::Off) {
        return Err(ApiError::bad_request(format!(
            "Invalid state requested: the volume information of node {} can only be changed while it is powered off or not deployed (it is {} and {})",
            node.uuid,
            node.provision_state,
            node.power_state.map_or("power unknown", |p| p.as_str())
        )));
    }
    check_unlocked(state, node).await
}

/// The `node_uuid` of a create or patch body, resolved to a node UUID (400 when unknown).
async fn body_node(state: &ApiState, doc: &mut Map<String, Value>) -> Result<String, ApiError> {
    let key = match doc.remove("node_uuid") {
        Some(Value::String(k)) => k,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "node_uuid: must be a string, not {}",
                kind_of(&other)
            )));
        }
        None => return Err(ApiError::bad_request("node_uuid: missing")),
    };
    let found = state.inner.conductor.db().run({
        let key = key.clone();
        move |db| db.node_record(&key)
    });
    match found.await? {
        Some(record) => Ok(record.node.uuid),
        None => Err(ApiError::bad_request(format!(
            "Invalid input for field/attribute node_uuid: node {key} could not be found"
        ))),
    }
}

/// The document a create (body) or patch (stored object, patched) describes, with its node
/// and UUID; `patchable` are the fields a client may set.
async fn child_document(
    state: &ApiState,
    r: &Request,
    kind: ChildKind,
    id: Option<&str>,
    patchable: &[&str],
) -> Result<(Map<String, Value>, String, String, Option<(Value, String)>), ApiError> {
    match id {
        None => {
            let mut doc = without_nulls(r.json()?)?;
            for key in doc.keys() {
                if !patchable.contains(&key.as_str()) && key != "uuid" {
                    return Err(ApiError::bad_request(format!(
                        "{key}: not a field bootvol accepts here (fields: uuid, {})",
                        patchable.join(", ")
                    )));
                }
            }
            let node = body_node(state, &mut doc).await?;
            let uuid = match doc.remove("uuid") {
                Some(Value::String(u)) => {
                    canonical_uuid(&u).map_err(|e| ApiError::bad_request(format!("uuid: {e}")))?
                }
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "uuid: must be a string, not {}",
                        kind_of(&other)
                    )));
                }
                None => new_uuid(),
            };
            Ok((doc, node, uuid, None))
        }
        Some(id) => {
            let patch = r.json()?;
            let (stored, old_node) = find_child(state, r, kind, id).await?;
            let mut doc = Value::Object(
                stored
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter(|(k, _)| patchable.contains(&k.as_str()))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            );
            let read_only: Vec<&str> = [
                "uuid",
                "created_at",
                "updated_at",
                "links",
                "local_link_connection",
                "pxe_enabled",
                "internal_info",
                "physical_network",
                "portgroup_uuid",
            ]
            .into_iter()
            .filter(|k| !patchable.contains(k))
            .collect();
            apply_patch(&mut doc, &patch, patchable, &read_only)?;
            let mut doc = without_nulls(doc)?;
            let node = body_node(state, &mut doc).await?;
            let uuid = stored["uuid"].as_str().unwrap_or_default().to_owned();
            Ok((doc, node, uuid, Some((stored, old_node))))
        }
    }
}

async fn write_port(state: &ApiState, r: &Request, id: Option<&str>) -> ApiResult {
    let (doc, node, uuid, stored) =
        child_document(state, r, ChildKind::Port, id, &["address", "node_uuid", "extra"]).await?;
    let spec = inventory::parse_port(&Value::Object(doc)).map_err(ApiError::bad_request)?;
    if let Some((old, old_node)) = &stored {
        let moved = old_node != &node;
        let readdressed = old["address"].as_str() != Some(spec.address.to_string().as_str());
        if moved || readdressed {
            port_editable(state, old_node).await?;
        }
        if moved {
            port_editable(state, &node).await?;
        }
    }
    let existing = stored.is_some();
    let write = {
        let (uuid, node) = (uuid.clone(), node.clone());
        state.inner.conductor.db().run(move |db| db.write_port(&uuid, &node, &spec, existing))
    };
    write.await?;
    record_change(state, "port", if existing { "update" } else { "create" }, &node, &uuid).await;
    let (doc, _) = find_child(state, r, ChildKind::Port, &uuid).await?;
    Ok(if existing {
        json_response(StatusCode::OK, &doc)
    } else {
        created(format!("{}/v1/ports/{uuid}", r.base), &doc)
    })
}

async fn write_connector(state: &ApiState, r: &Request, id: Option<&str>) -> ApiResult {
    let (doc, node, uuid, stored) = child_document(
        state,
        r,
        ChildKind::Connector,
        id,
        &["type", "connector_id", "node_uuid", "extra"],
    )
    .await?;
    let spec = inventory::parse_connector(&Value::Object(doc)).map_err(ApiError::bad_request)?;
    if let Some((_, old_node)) = &stored
        && old_node != &node
    {
        volume_editable(state, old_node).await?;
    }
    volume_editable(state, &node).await?;
    let existing = stored.is_some();
    let write = {
        let (uuid, node) = (uuid.clone(), node.clone());
        state.inner.conductor.db().run(move |db| db.write_connector(&uuid, &node, &spec, existing))
    };
    write.await?;
    let action = if existing { "update" } else { "create" };
    record_change(state, "volumeconnector", action, &node, &uuid).await;
    let (doc, _) = find_child(state, r, ChildKind::Connector, &uuid).await?;
    Ok(if existing {
        json_response(StatusCode::OK, &doc)
    } else {
        created(format!("{}/v1/volume/connectors/{uuid}", r.base), &doc)
    })
}

async fn write_target(state: &ApiState, r: &Request, id: Option<&str>) -> ApiResult {
    let (mut doc, node, uuid, stored) = child_document(
        state,
        r,
        ChildKind::Target,
        id,
        &["volume_type", "boot_index", "volume_id", "properties", "node_uuid", "extra"],
    )
    .await?;
    let stored_properties =
        stored.as_ref().and_then(|(s, _)| s.get("properties").and_then(Value::as_object).cloned());
    if let Some(Value::Object(props)) = doc.get_mut("properties") {
        restore_masked(props, stored_properties.as_ref()).map_err(|path| {
            ApiError::bad_request(format!(
                "properties.{path}: masked (******) but no secret is stored; give the real value"
            ))
        })?;
    }
    if !doc.contains_key("properties") {
        doc.insert("properties".into(), json!({}));
    }
    let spec = inventory::parse_target(&Value::Object(doc)).map_err(ApiError::bad_request)?;
    if let Some((_, old_node)) = &stored
        && old_node != &node
    {
        volume_editable(state, old_node).await?;
    }
    volume_editable(state, &node).await?;
    let existing = stored.is_some();
    let write = {
        let (uuid, node) = (uuid.clone(), node.clone());
        state.inner.conductor.db().run(move |db| db.write_target(&uuid, &node, &spec, existing))
    };
    write.await?;
    let action = if existing { "update" } else { "create" };
    record_change(state, "volumetarget", action, &node, &uuid).await;
    let (mut doc, _) = find_child(state, r, ChildKind::Target, &uuid).await?;
    mask(&mut doc);
    Ok(if existing {
        json_response(StatusCode::OK, &doc)
    } else {
        created(format!("{}/v1/volume/targets/{uuid}", r.base), &doc)
    })
}

async fn delete_child(state: &ApiState, kind: ChildKind, id: &str) -> ApiResult {
    let r = Request {
        method: Method::DELETE,
        segments: Vec::new(),
        query: Vec::new(),
        minor: super::MAX_MINOR,
        base: String::new(),
        body: Default::default(),
    };
    let (_, node) = find_child(state, &r, kind, id).await?;
    if kind == ChildKind::Port {
        port_editable(state, &node).await?;
    } else {
        volume_editable(state, &node).await?;
    }
    let uuid = id.to_owned();
    let deleted = state.inner.conductor.db().run(move |db| db.delete_child(kind, &uuid)).await?;
    if !deleted {
        return Err(ApiError::not_found("It was deleted meanwhile."));
    }
    let resource = match kind {
        ChildKind::Port => "port",
        ChildKind::Connector => "volumeconnector",
        ChildKind::Target => "volumetarget",
    };
    record_change(state, resource, "delete", &node, id).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
