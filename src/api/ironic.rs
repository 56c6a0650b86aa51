//! The rest of Ironic's v1 API up to 1.38, in Ironic's shapes: drivers (hardware types, with
//! their interfaces from 1.30), node traits (1.37), VIFs (1.28), the node endpoints bootvol
//! answers with Ironic's own error when the hardware type has no such interface (console, RAID,
//! NMI, vendor passthru), the agent's lookup and heartbeat (1.22) as Ironic answers a node that
//! runs no agent. Writes go through the node service.

use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use serde_json::{Map, Value, json};

use super::resources::{load_node, without_nulls};
use super::{ApiError, ApiResult, ApiState, Request, json_response, versions};
use bootvol_core::model::hardware::{self, Kind};
use bootvol_core::model::{Driver, NodeRecord, raid};

/// The conductor host the driver resources name.
const HOST: &str = "bootvol";

/// Answers 404 (as Ironic) for an endpoint newer than the request's microversion.
pub(super) fn require(r: &Request, endpoint: &str) -> Result<(), ApiError> {
    if r.minor < versions::minor_of(versions::ENDPOINTS, endpoint) {
        return Err(ApiError::not_found(format!(
            "The resource /v1/{} could not be found.",
            r.segments.join("/")
        )));
    }
    Ok(())
}

/// 406 (as Ironic) for an endpoint that exists, asked for below its microversion.
fn below(r: &Request, endpoint: &str) -> ApiError {
    ApiError::not_acceptable(format!(
        "{endpoint} needs API version 1.{} or later (this request asked for 1.{})",
        versions::minor_of(versions::ENDPOINTS, endpoint),
        r.minor
    ))
}

// ---------------------------------------------------------------------------------------------
// Drivers

fn driver_json(r: &Request, driver: Driver, detail: bool) -> Value {
    let base = &r.base;
    let name = driver.as_str();
    let mut doc = json!({
        "name": name,
        "hosts": [HOST],
        "type": "dynamic",
        "links": [{"href": format!("{base}/v1/drivers/{name}"), "rel": "self"},
                  {"href": format!("{base}/drivers/{name}"), "rel": "bookmark"}],
        "properties": [{"href": format!("{base}/v1/drivers/{name}/properties"), "rel": "self"},
                       {"href": format!("{base}/drivers/{name}/properties"), "rel": "bookmark"}],
    });
    if let Some(map) = doc.as_object_mut() {
        for kind in Kind::ALL {
            let (default, enabled) = if detail {
                let supported = hardware::supported(driver, *kind);
                (json!(supported[0]), json!(supported))
            } else {
                (Value::Null, Value::Null)
            };
            map.insert(format!("default_{}_interface", kind.as_str()), default);
            map.insert(format!("enabled_{}_interfaces", kind.as_str()), enabled);
        }
        // bios (1.40) is above what bootvol serves.
        map.remove("default_bios_interface");
        map.remove("enabled_bios_interfaces");
        map.retain(|key, _| r.minor >= versions::driver_field_minor(key));
    }
    doc
}

fn driver_named(name: &str) -> Result<Driver, ApiError> {
    name.parse().map_err(|_| {
        ApiError::not_found(format!(
            "Could not find the following driver(s) or hardware type(s): {name}."
        ))
    })
}

/// `GET /v1/drivers[?type=&detail=]`, `GET /v1/drivers/{name}`, `.../properties`.
pub(super) async fn drivers(r: &Request, rest: &[&str]) -> ApiResult {
    if r.method != Method::GET {
        return Err(super::resources::method_not_allowed());
    }
    match rest {
        [] => {
            let detail = r.minor >= 30
                && matches!(r.param("detail"), Some(v) if v.eq_ignore_ascii_case("true"));
            let drivers: Vec<Value> = match r.param("type") {
                Some("classic") if r.minor >= 30 => Vec::new(),
                Some("dynamic") | None => {
                    Driver::ALL.iter().map(|d| driver_json(r, *d, detail)).collect()
                }
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "Invalid value {other:?} for type: classic or dynamic"
                    )));
                }
            };
            Ok(json_response(StatusCode::OK, &json!({"drivers": drivers})))
        }
        [name] => Ok(json_response(StatusCode::OK, &driver_json(r, driver_named(name)?, true))),
        [name, "properties"] => {
            let driver = driver_named(name)?;
            let props: Map<String, Value> = hardware::properties(driver)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), json!(v)))
                .collect();
            Ok(json_response(StatusCode::OK, &Value::Object(props)))
        }
        [_, "raid", "logical_disk_properties"] if r.minor < 12 => {
            Err(below(r, "raid/logical_disk_properties"))
        }
        [name, "raid", "logical_disk_properties"] => {
            let driver = driver_named(name)?;
            if hardware::default(driver, Kind::Raid) == "fake" {
                let props: Map<String, Value> = raid::LOGICAL_DISK_PROPERTIES
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), json!(v)))
                    .collect();
                Ok(json_response(StatusCode::OK, &Value::Object(props)))
            } else {
                Err(unsupported(driver, "raid"))
            }
        }
        _ => Err(super::resources::not_found_path(r)),
    }
}

/// Ironic's `UnsupportedDriverExtension`.
fn unsupported(driver: Driver, extension: &str) -> ApiError {
    ApiError::bad_request(format!(
        "Driver {driver} does not support {extension} (disabled or not implemented)."
    ))
}

/// Whether the node's interface of `kind` does something (not `no-*`).
fn has_interface(record: &NodeRecord, kind: Kind) -> bool {
    let node = &record.node;
    !node.interfaces.effective(node.driver, kind).starts_with("no-")
}

// ---------------------------------------------------------------------------------------------
// Traits

fn traits_body(record: &NodeRecord) -> Value {
    json!({"traits": record.traits})
}

/// `/v1/nodes/{node}/traits[/{trait}]`.
pub(super) async fn traits(state: &ApiState, r: &Request, key: &str, rest: &[&str]) -> ApiResult {
    if r.minor < versions::minor_of(versions::ENDPOINTS, "traits") {
        // Ironic's answers below 1.37: reading is not acceptable, writing not allowed, and
        // the trait to delete is not found.
        return Err(match r.method {
            Method::GET => below(r, "traits"),
            Method::PUT => super::resources::method_not_allowed(),
            _ => super::resources::not_found_path(r),
        });
    }
    let nodes = state.nodes();
    match (rest, &r.method) {
        ([], &Method::GET) => {
            Ok(json_response(StatusCode::OK, &traits_body(&load_node(state, key).await?)))
        }
        ([], &Method::PUT) => {
            let body = without_nulls(r.json()?)?;
            if let Some(other) = body.keys().find(|k| *k != "traits") {
                return Err(ApiError::bad_request(format!("{other}: not accepted here (traits)")));
            }
            let Some(Value::Array(items)) = body.get("traits") else {
                return Err(ApiError::bad_request("traits: a list of trait names is expected"));
            };
            let names = items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| ApiError::bad_request("traits: every trait is a string"))
                })
                .collect::<Result<Vec<String>, ApiError>>()?;
            nodes.set_traits(key, names).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        ([], &Method::DELETE) => {
            nodes.set_traits(key, Vec::new()).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        ([name], &Method::PUT) => {
            nodes.add_trait(key, name).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        ([name], &Method::DELETE) => {
            nodes.remove_trait(key, name).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Err(super::resources::method_not_allowed()),
    }
}

// ---------------------------------------------------------------------------------------------
// VIFs

/// `/v1/nodes/{node}/vifs[/{vif}]`.
pub(super) async fn vifs(state: &ApiState, r: &Request, key: &str, rest: &[&str]) -> ApiResult {
    require(r, "vifs")?;
    let nodes = state.nodes();
    match (rest, &r.method) {
        ([], &Method::GET) => {
            let vifs: Vec<Value> =
                nodes.vifs(key).await?.into_iter().map(|id| json!({"id": id})).collect();
            Ok(json_response(StatusCode::OK, &json!({"vifs": vifs})))
        }
        ([], &Method::POST) => {
            let body = without_nulls(r.json()?)?;
            let id = match body.get("id") {
                Some(Value::String(id)) if !id.is_empty() && id.len() <= 255 => id.clone(),
                _ => return Err(ApiError::bad_request("id: the VIF's id (a string) is required")),
            };
            nodes.attach_vif(key, &id).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        ([vif], &Method::DELETE) => {
            nodes.detach_vif(key, vif).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Err(super::resources::method_not_allowed()),
    }
}

// ---------------------------------------------------------------------------------------------
// Node endpoints served only by interfaces bootvol's hardware types mostly lack

/// `PUT /v1/nodes/{node}/states/raid` (1.12).
pub(super) async fn set_raid(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    if r.minor < versions::minor_of(versions::ENDPOINTS, "states/raid") {
        return Err(below(r, "states/raid"));
    }
    let record = load_node(state, key).await?;
    if !has_interface(&record, Kind::Raid) {
        return Err(unsupported(record.node.driver, "raid"));
    }
    let config = raid::validate_target(&r.json()?)
        .map_err(|e| ApiError::bad_request(format!("Invalid RAID configuration: {}", e.0)))?;
    state.inner.nodes.set_target_raid_config(&record.node.uuid, config).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET|PUT /v1/nodes/{node}/states/console`.
pub(super) async fn console(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    if !has_interface(&record, Kind::Console) {
        return Err(unsupported(record.node.driver, "console"));
    }
    if r.method == Method::GET {
        return Ok(json_response(StatusCode::OK, &console_body(&record)));
    }
    let body = without_nulls(r.json()?)?;
    let enabled = match body.get("enabled") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        _ => return Err(ApiError::bad_request("enabled: true or false is required")),
    };
    state.inner.nodes.set_console(&record.node.uuid, enabled).await?;
    Ok(super::actions::accepted(r, &record.node.uuid))
}

/// `GET .../states/console`: the flag, and the fake console's (empty) connection details
/// while it is enabled.
fn console_body(record: &NodeRecord) -> Value {
    let enabled = record.node.console_enabled;
    json!({"console_enabled": enabled, "console_info": if enabled { json!({}) } else { Value::Null }})
}

/// `PUT /v1/nodes/{node}/management/inject_nmi` (1.29): only fake management "injects" one.
pub(super) async fn inject_nmi(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    require(r, "management/inject_nmi")?;
    let record = load_node(state, key).await?;
    if record.node.driver == Driver::FakeHardware {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Err(unsupported(record.node.driver, "inject_nmi"))
}

/// `/v1/nodes/{node}/vendor_passthru[/methods]`: no vendor methods.
pub(super) async fn vendor_passthru(
    state: &ApiState,
    r: &Request,
    key: &str,
    rest: &[&str],
) -> ApiResult {
    let record = load_node(state, key).await?;
    if !has_interface(&record, Kind::Vendor) {
        return Err(unsupported(record.node.driver, "vendor"));
    }
    match rest {
        ["methods"] if r.method == Method::GET => Ok(json_response(StatusCode::OK, &json!({}))),
        _ => Err(ApiError::bad_request(format!(
            "Unsupported method ({}) passed through to vendor extension.",
            r.param("method").unwrap_or("none given")
        ))),
    }
}

/// `GET /v1/lookup` and `POST /v1/heartbeat/{node}` (1.22): bootvol runs no agent; a lookup
/// finds no node waiting for one, and a heartbeat is accepted and ignored, as Ironic ignores
/// one from a node in a state that expects none.
pub(super) async fn agent(state: &ApiState, r: &Request, rest: &[&str]) -> ApiResult {
    match (rest, &r.method) {
        (["lookup"], &Method::GET) => {
            require(r, "lookup")?;
            Err(ApiError::not_found(
                "Node could not be found: no node waits for an agent (bootvol runs no ironic-python-agent).",
            ))
        }
        (["heartbeat", node], &Method::POST) => {
            require(r, "heartbeat")?;
            let record = load_node(state, node).await?;
            Ok(super::actions::accepted(r, &record.node.uuid))
        }
        // Ironic's controller also takes the node from the body (`node_ident`), as its clients
        // and its own API tests send it.
        (["heartbeat"], &Method::POST) => {
            require(r, "heartbeat")?;
            let body = r.json()?;
            let Some(node) = body.get("node_ident").and_then(Value::as_str) else {
                return Err(ApiError::bad_request(
                    "node_ident: the node (UUID or name) is required, in the path or the body",
                ));
            };
            let record = load_node(state, node).await?;
            Ok(super::actions::accepted(r, &record.node.uuid))
        }
        _ => Err(super::resources::not_found_path(r)),
    }
}
