//! The API's node actions: power and provision states (accepted with 202: `Conductor::start`
//! locks the node for the action and records its target before the answer, then runs it on its
//! own task), validation, the boot device and the states document. Ironic's request shapes and
//! messages are here; what may start, the lock and the work are the conductor's. The admin
//! page starts actions through `start_state_change`, so its forms are held to
//! the same checks.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::resources::{kind_of, load_node, without_nulls};
use super::{ApiError, ApiResult, ApiState, Request, json_response};
use crate::conductor::{Action, ConductorError, plan};
use crate::power::{BootDevice, PowerAction};
use crate::secrets::mask;

pub(super) fn map_conductor(e: ConductorError) -> ApiError {
    match e {
        ConductorError::NotFound(n) => ApiError::not_found(format!("Node {n} could not be found.")),
        ConductorError::Locked(l) => ApiError::conflict(format!(
            "Node {} is locked by {} (since {}), please retry after the current operation is completed.",
            l.node, l.action, l.since
        )),
        ConductorError::Refused(m) => ApiError::conflict(m),
        ConductorError::Failed(m) => ApiError::bad_request(m),
        ConductorError::Db(e) if e.is_unavailable() => ApiError::unavailable(e.to_string()),
        ConductorError::Db(e) => {
            tracing::error!(error = %e, "API database error");
            ApiError::internal(e.to_string())
        }
    }
}

pub(super) async fn node_states(state: &ApiState, r: &Request, key: &str) -> ApiResult {
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

pub(super) fn accepted(r: &Request, uuid: &str) -> Response {
    let mut response = StatusCode::ACCEPTED.into_response();
    if let Ok(v) = header::HeaderValue::from_str(&format!("{}/v1/nodes/{uuid}/states", r.base)) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

pub(super) async fn set_power(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let (target, body) = target_of(r, &["timeout"])?;
    if let Some(t) = body.get("timeout")
        && t.as_u64().is_none_or(|t| t == 0)
    {
        return Err(ApiError::bad_request("timeout: must be a positive integer"));
    }
    let uuid = start_state_change(state, key, StateChange::Power, &target).await?;
    Ok(accepted(r, &uuid))
}

pub(super) async fn set_provision(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let (target, body) = target_of(r, &["configdrive", "clean_steps", "deploy_steps"])?;
    if let Some(extra) =
        ["configdrive", "clean_steps", "deploy_steps"].iter().find(|k| body.contains_key(**k))
    {
        return Err(ApiError::bad_request(format!(
            "{extra}: not supported by bootvol (give a config drive as instance_info.configdrive)"
        )));
    }
    let uuid = start_state_change(state, key, StateChange::Provision, &target).await?;
    Ok(accepted(r, &uuid))
}

/// Which state a `PUT /v1/nodes/{node}/states/...` (or an admin form) changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateChange {
    Power,
    Provision,
}

/// Starts the action `target` names on node `key` in the background (a power target: `power
/// on`, `power off`, `rebooting`, `soft power off`; a provision target: `active`, `deleted`,
/// `manage`, `provide`, `adopt`), after Ironic's checks; answers the node's UUID.
pub(crate) async fn start_state_change(
    state: &ApiState,
    key: &str,
    which: StateChange,
    target: &str,
) -> Result<String, ApiError> {
    let action = match (which, target) {
        (StateChange::Power, "power on") => Action::Power(PowerAction::On),
        (StateChange::Power, "power off") => Action::Power(PowerAction::Off),
        (StateChange::Power, "rebooting") => Action::Power(PowerAction::Reboot),
        (StateChange::Power, "soft power off") => Action::Power(PowerAction::SoftOff),
        (StateChange::Power, other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid power target {other:?}: power on, power off, rebooting or soft power off"
            )));
        }
        (StateChange::Provision, "active" | "deleted" | "manage" | "provide" | "adopt") => {
            Action::Provision(
                target.parse().map_err(|e: crate::model::ValueError| ApiError::bad_request(e.0))?,
            )
        }
        (StateChange::Provision, other) => {
            return Err(ApiError::bad_request(format!(
                "The requested action \"{other}\" is not supported (active, deleted, manage, provide, adopt)"
            )));
        }
    };
    let record = load_node(state, key).await?;
    let node = &record.node;
    match action {
        Action::Power(_) => {
            let report = state.inner.conductor.validate(&record).await;
            if let Some(check) = report.0.iter().find(|c| c.interface == "power" && !c.result) {
                return Err(ApiError::bad_request(format!(
                    "Failed to validate power driver interface for node {}: {}",
                    node.uuid,
                    check.reason.as_deref().unwrap_or("invalid")
                )));
            }
        }
        Action::Provision(verb) => {
            plan(node.provision_state, verb).map_err(|m| {
                ApiError::bad_request(format!(
                    "The requested action \"{target}\" can not be performed on node \"{}\" while it is in state \"{}\": {m}",
                    node.uuid, node.provision_state
                ))
            })?;
        }
        _ => {}
    }
    // Accepted: the conductor locks the node for the action and records its target before it
    // returns, then runs it on its own task.
    state.inner.conductor.start(&node.uuid, action).await.map_err(map_conductor)?;
    Ok(node.uuid.clone())
}

pub(super) async fn validate(state: &ApiState, key: &str) -> ApiResult {
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

pub(super) async fn get_boot_device(state: &ApiState, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    let device =
        record.node.driver_internal_info.get("boot_device").cloned().unwrap_or(Value::Null);
    Ok(json_response(StatusCode::OK, &json!({"boot_device": device, "persistent": null})))
}

pub(super) async fn set_boot_device(state: &ApiState, r: &Request, key: &str) -> ApiResult {
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
