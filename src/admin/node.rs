//! The node page: states (and, while an action runs, where it heads, the page refreshing
//! itself; a red banner when the node failed or its last action did), the actions that fit its state, scenario, ports,
//! connectors, targets (secrets masked; a drifted volume said so on its row), the BMC fields of
//! its driver (the password write-only), the script the boot edge serves it, read from the
//! same boot snapshot (secrets masked; the default script, said so, when that is what it gets),
//! the last boot report its script sent (`edge::http::report`: a claim, marked when it did not
//! come from the node's neighbour) and its events, newest first, each in one line with its JSON behind a disclosure; and the
//! confirmation step of an action that asks for one.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;
use minijinja::value::Serde;
use serde_json::{Map, Value, json};

use super::extract::LoggedIn;
use super::forms::{Confirm, Typed, bmc_keys};
use super::session::Session;
use super::{AdminState, rack};
use bootvol_core::model::{ConnectorType, Driver, NodeRecord, StorageInterfaceName, VolumeType};
use bootvol_core::secrets::{MASK, is_secret_key, mask, mask_map};
use bootvol_edge::http::report::REPORT_EVENT;

/// The events shown on a node page.
const EVENTS: u32 = 50;

/// How often a node page with an action running reloads itself, in seconds.
const REFRESH_SECS: u32 = 2;

/// Every secret value (at any depth) of `map` as it prints in a script: strings, and numbers
/// as written (a numeric CHAP password prints as its digits).
fn collect_secrets(map: &Map<String, Value>, out: &mut Vec<String>) {
    for (key, value) in map {
        if is_secret_key(key) {
            secret_texts(value, out);
            continue;
        }
        match value {
            Value::Object(inner) => collect_secrets(inner, out),
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(inner) = item {
                        collect_secrets(inner, out);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The printable texts of a secret value, whatever its JSON type (booleans and null are not
/// secrets' values: masking every `true` would mask the script, not the secret).
fn secret_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if !s.is_empty() => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|v| secret_texts(v, out)),
        Value::Object(inner) => inner.values().for_each(|v| secret_texts(v, out)),
        _ => {}
    }
}

/// The script with every secret value of the record replaced by [`MASK`], and the value of
/// every `set <...password>` line too (a snapshot built before the record's last change may
/// hold a secret the record no longer has).
pub(super) fn masked_script(record: &NodeRecord, script: &str) -> String {
    let mut maps = vec![
        &record.node.driver_info,
        &record.node.instance_info,
        &record.node.driver_internal_info,
    ];
    maps.extend(record.volume_targets.iter().map(|t| &t.properties));
    let masked = mask_secrets(script, &maps);
    let mut out = String::with_capacity(masked.len());
    for line in masked.split_inclusive('\n') {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("set"), Some(name), Some(value))
                if name.ends_with("password") && value != MASK =>
            {
                let indent = &line[..line.len() - line.trim_start().len()];
                let end = if line.ends_with('\n') { "\n" } else { "" };
                out.push_str(&format!("{indent}set {name} {MASK}{end}"));
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// The script the boot edge serves the node now, read from the same snapshot (the bytes a boot
/// gets), masked, and why it is not the node's own when it is not: the node does not validate
/// (the snapshot holds the default script for it), it has no port, or the snapshot was built
/// before its ports (it is rebuilt after every change): then a boot gets the default script.
fn served_script(state: &AdminState, record: &NodeRecord) -> (String, Option<String>) {
    let snapshot = state.api.snapshot();
    let own = record.ports.iter().find_map(|p| {
        snapshot
            .script(p.address)
            .filter(|s| s.node_uuid.as_deref() == Some(record.node.uuid.as_str()))
    });
    let (served, why) = match own {
        Some(script) => {
            (script, script.problem.as_ref().map(|p| format!("Served the default script: {p}")))
        }
        None if record.ports.is_empty() => (
            snapshot.default_script(),
            Some("This node has no port, so no script of its own: a machine the boot edge does not know gets the default script, shown here.".to_owned()),
        ),
        None => (
            snapshot.default_script(),
            Some("The boot snapshot does not know this node's ports yet (it is rebuilt after every change): a boot now gets the default script, shown here.".to_owned()),
        ),
    };
    (masked_script(record, &String::from_utf8_lossy(&served.text)), why)
}

/// `text` with every secret string of `maps` replaced by [`MASK`].
fn mask_secrets(text: &str, maps: &[&Map<String, Value>]) -> String {
    let mut secrets = Vec::new();
    for map in maps {
        collect_secrets(map, &mut secrets);
    }
    // Longest first, so a secret that contains another is masked whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut text = text.to_owned();
    for secret in secrets {
        text = text.replace(&secret, MASK);
    }
    text
}

pub(super) async fn node_page(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    LoggedIn(s): LoggedIn,
) -> Response {
    render_node(&state, &s, &node, StatusCode::OK, None, None).await
}

/// The confirmation step of an action: what it does to which node, a button that posts the
/// same form with `confirm`, and the way back.
pub(super) fn render_confirm(state: &AdminState, s: &Session, confirm: Confirm) -> Response {
    state.render(
        StatusCode::OK,
        "confirm.html.j2",
        context! { user => s.user.clone(), csrf => s.csrf.clone(), error => (),
        what => confirm.what, consequence => confirm.consequence,
        action => confirm.action, fields => confirm.fields, back => confirm.back },
    )
}

/// The node page, with the refusal of a form (`problem`, and what was typed) when there was
/// one.
pub(super) async fn render_node(
    state: &AdminState,
    s: &Session,
    node: &str,
    status: StatusCode,
    problem: Option<String>,
    typed: Option<Typed>,
) -> Response {
    let (mut notice, mut flash_error, live_gen) = (None, None, state.live.generation());
    if let Some(flash) = state.sessions().await.take_flash(&s.cookie) {
        if flash.bad {
            flash_error = Some(flash.text);
        } else {
            notice = Some(flash.text);
        }
    }
    let nodes = state.nodes();
    let record = match nodes.node(node).await {
        Ok(record) => record,
        Err(e) => {
            return state.render(
                StatusCode::NOT_FOUND,
                "base.html.j2",
                context! { user => s.user.clone(), csrf => s.csrf.clone(), error => format!("{e}") },
            );
        }
    };
    let default = nodes.default_storage();
    let (script, script_problem) = served_script(state, &record);
    let (events, error) = node_events(nodes, &record.node.uuid).await;
    // Two hosts claimed this node's secrets (`script_access`): a red banner, newest first.
    let conflict = events
        .iter()
        .find(|e| e["event_type"] == bootvol_edge::script_access::CONFLICT_EVENT)
        .map(|e| json!({"at": e["created_at"], "message": e["message"], "repeats": e["repeats"]}));
    let report = last_report(&events);
    // A refusal of a form is summed up at the top (the template), linking to the field it is
    // about, which gets the focus; the message is said there once.
    let form_problem = typed.as_ref().and(problem.clone());
    let focus = typed
        .as_ref()
        .zip(form_problem.as_deref())
        .map(|(t, p)| t.field.unwrap_or_else(|| super::forms::field_of(&t.form, p)));
    let error = match (&typed, problem, flash_error, error) {
        (Some(_), Some(_), _, _) => None,
        (_, Some(p), _, _) => Some(p),
        (_, None, Some(f), _) => Some(f),
        (_, None, None, e) => e,
    };
    let drifted = drifted_volumes(nodes).await;
    let boots = recent_boots_of(state, &record);
    let n = &record.node;
    let heading_to =
        n.target_provision_state.map(|s| s.as_str()).or(n.target_power_state.map(|p| p.as_str()));
    let boot = rack::NodeBoot::of(&state.api.snapshot(), &record.node.uuid);
    let node = node_view(&record, default, boot);
    let ports: Vec<Value> = record
        .ports
        .iter()
        .map(|p| json!({"uuid": p.uuid, "address": p.address.to_string()}))
        .collect();
    let connectors: Vec<Value> = record
        .volume_connectors
        .iter()
        .map(|c| {
            json!({"uuid": c.uuid, "type": c.connector_type.as_str(), "connector_id": c.connector_id})
        })
        .collect();
    let targets = targets_view(nodes, &record, &drifted).await;
    state.render(
        status,
        "node.html.j2",
        context! {
            user => s.user.clone(), csrf => s.csrf.clone(), error => error, notice => notice,
            offers => Serde(rack::offers(&record)),
            refresh => heading_to.map(|_| REFRESH_SECS),
            typed_form => typed.as_ref().map(|t| t.form.clone()),
            typed => typed.as_ref().map(|t| t.values.clone()),
            typed_field => focus,
            form_problem => form_problem,
            node => Serde(node), ports => Serde(ports), connectors => Serde(connectors),
            targets => Serde(targets), script => script, script_problem => script_problem,
            volume_types => VolumeType::ALL.iter().map(VolumeType::as_str).collect::<Vec<_>>(),
            connector_types => ConnectorType::ALL.iter().map(ConnectorType::as_str).collect::<Vec<_>>(),
            drivers => Driver::ALL.iter().map(Driver::as_str).collect::<Vec<_>>(),
            storage_interfaces => StorageInterfaceName::ALL.iter().map(StorageInterfaceName::as_str).collect::<Vec<_>>(),
            events => Serde(events), boots => Serde(boots), conflict => Serde(conflict),
            probe => super::probe::last(state, &record.node.uuid).await,
            report => Serde(report),
            events_href => super::history::node_href(&record.node.name), live_gen => live_gen,
        },
    )
}

/// The node's last boot report among `events` (newest first): when, what, whether it is a
/// failure (which needs attention) and whether it came from the node's neighbour.
fn last_report(events: &[Value]) -> Option<Value> {
    let event = events.iter().find(|e| e["event_type"] == REPORT_EVENT)?;
    let payload = &event["report"];
    Some(json!({"at": event["created_at"], "message": payload["message"],
        "failed": rack::boot_report_needs_attention(payload),
        "from_neighbour": payload["from_neighbour"] == true,
        "error_url": payload["error_url"]}))
}

/// The node's events, newest first, their payloads masked (and the problem reading them).
async fn node_events(
    nodes: &bootvol_control::nodes::NodeService,
    uuid: &str,
) -> (Vec<Value>, Option<String>) {
    match nodes.events(uuid, EVENTS).await {
        Ok(events) => (events.into_iter().rev().map(event_view).collect::<Vec<_>>(), None),
        Err(e) => (Vec::new(), Some(format!("events: {e}"))),
    }
}

/// An event as the pages show it (the node page, the rack-wide history): its payload masked
/// first, then in one line and as pretty JSON.
pub(super) fn event_view(e: bootvol_control::nodes::Event) -> Value {
    let mut payload = e.payload;
    mask(&mut payload);
    json!({"id": e.id, "node_uuid": e.node_uuid,
           "created_at": e.created_at, "level": e.level, "event_type": e.event_type,
           "summary": rack::payload_line(&payload),
           "message": payload.get("message").and_then(Value::as_str),
           "node_name": payload.get("node_name").and_then(Value::as_str),
           "report": (e.event_type == REPORT_EVENT).then(|| payload.clone()),
           "repeats": e.repeats, "last_seen_at": e.last_seen_at,
           "payload": serde_json::to_string_pretty(&payload).unwrap_or_default()})
}

/// The volumes the last sync pass found drifted.
async fn drifted_volumes(
    nodes: &bootvol_control::nodes::NodeService,
) -> std::collections::HashSet<String> {
    match nodes.sync_overview().await {
        Ok((Some(last), _)) => rack::sync_lines(&last.message)
            .into_iter()
            .filter(|l| l.kind == "drift")
            .filter_map(|l| l.volume)
            .collect(),
        _ => Default::default(),
    }
}

/// The recent boot requests for the node's MACs, newest first, with their results.
fn recent_boots_of(state: &AdminState, record: &NodeRecord) -> Vec<Value> {
    let macs: Vec<bootvol_core::model::MacAddr> = record.ports.iter().map(|p| p.address).collect();
    state
        .api
        .recent_boots()
        .newest_first()
        .into_iter()
        .filter(|h| h.mac.is_some_and(|m| macs.contains(&m)))
        .take(50)
        .map(|h| boot_hit(&h))
        .collect()
}

/// A boot request as the pages show it: when, how, from where, for which MAC and node, and
/// its result (`served`, `default script`, `refused`, `unknown MAC`...) with its detail (the
/// scenario, or why it was refused).
pub(super) fn boot_hit(h: &bootvol_core::recent::BootHit) -> Value {
    json!({"at": bootvol_core::timefmt::format_unix(h.at.max(0) as u64), "via": h.via,
           "client": h.client.to_string(), "mac": h.mac.map(|m| m.to_string()),
           "node": h.node, "result": h.result.word(), "detail": h.result.detail(),
           "failed": h.result.failed()})
}

/// A map as pretty JSON, its secrets masked; empty when the map is.
fn masked_pretty(map: &Map<String, Value>) -> String {
    let mut map = map.clone();
    mask_map(&mut map);
    if map.is_empty() {
        String::new()
    } else {
        serde_json::to_string_pretty(&map).unwrap_or_default()
    }
}

/// The node's fields as the page shows them: the BMC fields of its driver out of the raw
/// driver_info shown beside them, states, the scenario and boot problem the boot snapshot
/// serves (`boot`), secrets masked.
fn node_view(record: &NodeRecord, default: StorageInterfaceName, boot: rack::NodeBoot) -> Value {
    let n = &record.node;
    // The BMC fields of the node's driver, out of the raw driver_info shown beside them.
    let mut other_info = n.driver_info.clone();
    let bmc = bmc_keys(n.driver.as_str()).map(|keys| {
        let mut value = |key: Option<&str>| {
            key.and_then(|k| other_info.remove(k)).and_then(|v| v.as_str().map(str::to_owned))
        };
        let (address, system_id, username) = (value(keys[0]), value(keys[1]), value(keys[2]));
        let password_set = value(keys[3]).is_some_and(|p| !p.is_empty());
        json!({"address": address, "system_id": system_id, "username": username,
               "password_set": password_set, "has_system_id": keys[1].is_some()})
    });
    let failed = matches!(
        n.provision_state,
        bootvol_core::model::ProvisionState::DeployFailed
            | bootvol_core::model::ProvisionState::Error
    );
    let heading_to =
        n.target_provision_state.map(|s| s.as_str()).or(n.target_power_state.map(|p| p.as_str()));
    json!({
        "uuid": n.uuid, "name": n.name, "driver": n.driver.as_str(),
        "bmc": bmc, "failed": failed, "heading_to": heading_to,
        "storage_interface_set": n.storage_interface.map(|i| i.as_str()).unwrap_or(""),
        "capabilities": n.properties.get("capabilities").and_then(Value::as_str).unwrap_or(""),
        "driver_info": masked_pretty(&other_info),
        "instance_info": masked_pretty(&n.instance_info),
        "power_state": n.power_state.map(|p| p.as_str()),
        "provision_state": n.provision_state.as_str(),
        "storage_interface": n.effective_storage_interface(default).as_str(),
        "scenario": boot.scenario, "boot_problem": boot.problem,
        "secure_boot": n.capabilities().is_ok_and(|c| c.flag("secure_boot")),
        "maintenance": n.maintenance, "maintenance_reason": n.maintenance_reason,
        "last_error": n.last_error,
    })
}

/// The node's volume targets with their Cinder attachments, secrets masked.
async fn targets_view(
    nodes: &bootvol_control::nodes::NodeService,
    record: &NodeRecord,
    drifted: &std::collections::HashSet<String>,
) -> Vec<Value> {
    let attachments = nodes.attachments(&record.node.uuid).await.unwrap_or_default();
    record
        .volume_targets
        .iter()
        .map(|t| {
            let attachment = attachments.iter().find(|a| a.target_uuid == t.uuid).map(|a| {
                json!({"state": a.state.as_str(), "step": a.step, "api": a.api,
                       "attachment_id": a.attachment_id, "last_error": a.last_error,
                       "updated_at": a.updated_at})
            });
            json!({"uuid": t.uuid, "boot_index": t.boot_index, "volume_type": t.volume_type.as_str(),
                   "volume_id": t.volume_id, "properties": masked_pretty(&t.properties),
                   "attachment": attachment, "drift": drifted.contains(&t.volume_id)})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_in_scripts_longest_first() {
        let driver_info = json!({"redfish_password": "pw", "user": "pw-not-secret-key"});
        let instance_info = json!({"x": {"auth_password": "pwlonger"}, "list": [{"token": "tk"}]});
        let maps = [driver_info.as_object().unwrap(), instance_info.as_object().unwrap()];
        let text = mask_secrets("set password pwlonger\nset p pw\nset t tk\n", &maps);
        assert_eq!(text, format!("set password {MASK}\nset p {MASK}\nset t {MASK}\n"));
    }
}

#[cfg(test)]
mod masking_tests {
    use super::*;

    #[test]
    fn secrets_are_masked_whatever_their_json_type() {
        let props = json!({"auth_username": "u", "auth_password": 123456789012_u64,
            "nested": {"auth_reverse_password": "rev-secret"}, "keys": {"chap_secret": [42.5]}});
        let script = "set username u\nset password 123456789012\nset reverse rev-secret\nx 42.5\n";
        let masked = mask_secrets(script, &[props.as_object().unwrap()]);
        assert!(!masked.contains("123456789012"), "{masked}");
        assert!(!masked.contains("rev-secret"), "{masked}");
        assert!(masked.contains("set username u"), "a user name is not a secret: {masked}");
    }
}
