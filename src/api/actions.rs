//! The API's node actions: power and provision states (accepted with 202: `Conductor::start`
//! locks the node for the action and records its target before the answer, then runs it on its
//! own task), validation, the boot device and the states document. Ironic's request shapes and
//! messages are here (the conductor's typed refusals worded as Ironic words them); what may
//! start, the lock and the work are the conductor's: the request's shape is checked here, its
//! admission there, once.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::resources::{kind_of, load_node, without_nulls};
use super::{ApiError, ApiResult, ApiState, Request, json_response};
use bootvol_control::conductor::{
    Action, ConductorError, Refusal, StateChange, UnknownTarget, Verb, locked_message,
};
use bootvol_control::power::BootDevice;
use bootvol_core::model::Driver;
use bootvol_core::model::hardware::Kind;
use bootvol_core::secrets::mask;

pub(super) fn map_conductor(e: ConductorError) -> ApiError {
    match e {
        ConductorError::NotFound(n) => ApiError::not_found(format!("Node {n} could not be found.")),
        ConductorError::Locked(l) => ApiError::conflict(locked_message(&l)),
        ConductorError::Refused(m) => ApiError::conflict(m),
        ConductorError::Inadmissible(refusal) => refused(&refusal),
        ConductorError::Failed(m) => ApiError::bad_request(m),
        ConductorError::Db(e) if e.is_unavailable() => ApiError::unavailable(e.to_string()),
        ConductorError::Db(e) => {
            tracing::error!(error = %e, "API database error");
            ApiError::internal(e.to_string())
        }
    }
}

/// Ironic's 400 for an action its conductor would not start.
fn refused(refusal: &Refusal) -> ApiError {
    ApiError::bad_request(match refusal {
        Refusal::Transition { node, verb, state, reason } => format!(
            "The requested action \"{}\" can not be performed on node \"{node}\" while it is in state \"{state}\": {reason}",
            verb.target()
        ),
        Refusal::Power { node, reason } => {
            format!("Failed to validate power driver interface for node {node}: {reason}")
        }
        Refusal::NoRescue { .. } => refusal.to_string(),
    })
}

pub(super) async fn node_states(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    let n = &record.node;
    let mut doc = json!({
        "power_state": n.power_state,
        "target_power_state": n.target_power_state,
        "provision_state": super::resources::shown_provision_state(r, n.provision_state),
        "target_provision_state": n.target_provision_state.map(|t| super::resources::shown_provision_state(r, t)),
        "provision_updated_at": n.provision_updated_at,
        "last_error": n.last_error,
        "console_enabled": n.console_enabled,
        "raid_config": {},
        "target_raid_config": n.target_raid_config,
    });
    // The RAID fields are 1.12's, as on the node.
    super::versions::hide(&mut doc, super::versions::NODE_FIELDS, r.minor);
    mask(&mut doc);
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
    if r.minor < 27 && (target.starts_with("soft ") || body.contains_key("timeout")) {
        return Err(ApiError::not_acceptable(format!(
            "Soft power actions and timeout need API version 1.27 or later (this request asked for 1.{})",
            r.minor
        )));
    }
    if let Some(t) = body.get("timeout")
        && t.as_u64().is_none_or(|t| t == 0)
    {
        return Err(ApiError::bad_request("timeout: must be a positive integer"));
    }
    let action = Action::from_target(StateChange::Power, &target)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let record = load_node(state, key).await?;
    let started =
        state.inner.conductor.start(&record.node.uuid, action).await.map_err(map_conductor)?;
    Ok(accepted(r, &started.node_uuid))
}

pub(super) async fn set_provision(state: &ApiState, r: &Request, key: &str) -> ApiResult {
    let (target, body) = target_of(r, &["configdrive", "clean_steps", "rescue_password"])?;
    let verb: Verb = target.parse().map_err(|_| {
        let unknown = UnknownTarget { change: StateChange::Provision, target: target.clone() };
        ApiError::bad_request(unknown.to_string())
    })?;
    if r.minor < verb.min_minor() {
        return Err(ApiError::not_acceptable(format!(
            "The provision action \"{target}\" needs API version 1.{} or later (this request asked for 1.{})",
            verb.min_minor(),
            r.minor
        )));
    }
    let configdrive = provision_fields(r, verb, &body)?;
    let record = load_node(state, key).await?;
    match (verb, body.get("rescue_password")) {
        (Verb::Rescue, Some(Value::String(p))) if !p.trim().is_empty() => {}
        (Verb::Rescue, _) => {
            return Err(ApiError::bad_request(
                "A non-empty 'rescue_password' is required when setting target provision state to rescue",
            ));
        }
        (_, Some(_)) => {
            return Err(ApiError::bad_request(
                "'rescue_password' is only valid when setting target provision state to rescue",
            ));
        }
        _ => {}
    }
    let conductor = &state.inner.conductor;
    let started = match configdrive {
        Some(drive) => conductor.start_with_configdrive(&record.node.uuid, verb, drive).await,
        None => conductor.start(&record.node.uuid, Action::Provision(verb)).await,
    }
    .map_err(map_conductor)?;
    Ok(accepted(r, &started.node_uuid))
}

/// The body's `configdrive` (answered) and `clean_steps`, checked against the verb and the
/// microversion.
fn provision_fields(
    r: &Request,
    verb: Verb,
    body: &Map<String, Value>,
) -> Result<Option<Value>, ApiError> {
    let configdrive = body.get("configdrive").cloned();
    if let Some(drive) = &configdrive {
        let allowed = verb == Verb::Deploy || (verb == Verb::Rebuild && r.minor >= 35);
        if !allowed {
            return Err(ApiError::bad_request(
                "Adding a config drive is only supported when setting provision state to active (or rebuild, from API 1.35)",
            ));
        }
        if !drive.is_string() {
            return Err(ApiError::bad_request(
                "configdrive: a gzipped, base64-encoded ISO image (a string) is expected; a JSON config drive needs API 1.56, above what bootvol serves",
            ));
        }
    }
    match (verb, body.get("clean_steps")) {
        // Ironic requires a non-empty list; a client sends none for `--clean-steps '[]'`.
        // bootvol runs no clean step on a volume (Cinder's to erase), so none is accepted.
        (Verb::Clean, None | Some(Value::Array(_))) => {}
        (Verb::Clean, Some(_)) => {
            return Err(ApiError::bad_request("\"clean_steps\" must be a list of clean steps"));
        }
        (_, Some(_)) => {
            return Err(ApiError::bad_request(
                "\"clean_steps\" is only valid when setting target provision state to clean",
            ));
        }
        _ => {}
    }
    Ok(configdrive)
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
    let node = &record.node;
    for (name, kind) in [
        ("console", Kind::Console),
        ("inspect", Kind::Inspect),
        ("raid", Kind::Raid),
        ("rescue", Kind::Rescue),
    ] {
        let value = if node.interfaces.effective(node.driver, kind).starts_with("no-") {
            json!({"result": null, "reason": "not supported"})
        } else {
            json!({"result": true, "reason": null})
        };
        doc.insert(name.into(), value);
    }
    doc.insert("bios".into(), json!({"result": null, "reason": "not supported"}));
    let mut doc = Value::Object(doc);
    mask(&mut doc);
    Ok(json_response(StatusCode::OK, &doc))
}

/// `GET .../management/boot_device`: the device bootvol last set and whether for good. A fake
/// driver's BMC, never set, boots from the network for one boot (Ironic's fake management); a
/// real BMC's is not read back, so a device never set is `null` there.
pub(super) async fn get_boot_device(state: &ApiState, key: &str) -> ApiResult {
    let record = load_node(state, key).await?;
    let info = &record.node.driver_internal_info;
    let fake = matches!(record.node.driver, Driver::Fake | Driver::FakeHardware);
    let (device, persistent) = match (info.get("boot_device"), fake) {
        (Some(device), _) => {
            (device.clone(), info.get("boot_device_persistent").cloned().unwrap_or(json!(false)))
        }
        (None, true) => (json!("pxe"), json!(false)),
        (None, false) => (Value::Null, Value::Null),
    };
    Ok(json_response(StatusCode::OK, &json!({"boot_device": device, "persistent": persistent})))
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
