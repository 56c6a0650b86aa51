//! The admin forms: create, edit and delete nodes, ports, volume connectors and volume targets;
//! maintenance; power, provision (manage, provide, deploy, undeploy) and validate a node; the
//! same on many nodes at once (`bulk`: power, maintenance, provide).
//!
//! Power off, reboot, soft power off, delete and the provision verbs that take a running node
//! away (undeploy, rebuild, abort, rescue, unrescue: `actions`) change nothing without
//! `confirm=<the node's name>` (the server's rule, not the page's): without it they answer the
//! confirmation step, a page naming the action and the node, whose button posts the same form
//! with it. A refused form
//! renders its page again with what was typed (secrets left out: they are typed again) and the
//! message beside the form.
//!
//! Each form turns its fields into the `inventory` parsers' specs and calls the node service
//! ([`bootvol_control::nodes::NodeService`]), the same functions the REST API calls: a form writes exactly
//! what the API would accept (Ironic's edit rules, uniqueness, masked secrets sent back
//! unchanged keep the stored ones). Power and provision actions start through the conductor's
//! one entry point (`Conductor::start`, in `start_action`) as the API's do; validation asks the
//! conductor. A
//! form that worked redirects (303, redirect-after-POST) with its message kept in the session
//! for the next page; one that was refused renders the page again with the message and a 4xx
//! status.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Map, Value, json};

use super::extract::CheckedForm;

mod bulk;
mod typed;
use super::node::render_node;
use super::rack::{needs_confirmation, started};
use super::session::Session;
use super::{AdminState, NodesView};
use bootvol_control::conductor::{Action, StateChange};
use bootvol_control::nodes::{NodeError, NodeService};
use bootvol_core::inventory::{self, ChildSpec};
use bootvol_core::model::{
    Child, ChildKind, Driver, NodeRecord, ProvisionState, Stamped, StorageInterfaceName, new_uuid,
};
pub(super) use bulk::bulk;
pub(super) use typed::{Typed, field_of};
use typed::{create_field, typed_values};

fn field<'a>(form: &'a HashMap<String, String>, name: &str) -> &'a str {
    form.get(name).map_or("", |v| v.trim())
}

/// `what: message`, unless the message already starts by naming it (said once).
fn about(what: &str, message: impl std::fmt::Display) -> String {
    let message = message.to_string();
    if message.starts_with(what) { message } else { format!("{what}: {message}") }
}

/// The status a refusal of the node service is shown with (as the API answers it).
fn status_of(e: &NodeError) -> StatusCode {
    match e {
        NodeError::NotFound(_) => StatusCode::NOT_FOUND,
        NodeError::Invalid(_) => StatusCode::BAD_REQUEST,
        NodeError::Conflict(_) | NodeError::Locked(_) => StatusCode::CONFLICT,
        NodeError::Database(_) => StatusCode::INTERNAL_SERVER_ERROR,
        NodeError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// An action asked again before it is done: the node named, the same form with `confirm`.
pub(super) struct Confirm {
    /// What the button says ("Power off node-7").
    pub(super) what: String,
    /// What it will do, in a sentence.
    pub(super) consequence: String,
    /// Where the form posts.
    pub(super) action: String,
    /// The form's fields (without the CSRF token), `confirm` among them.
    pub(super) fields: Vec<(String, String)>,
    /// Where "Cancel" goes.
    pub(super) back: String,
}

/// What a form came to.
enum Outcome {
    /// Worked (or ran and found problems, `bad`): go to `to`, showing `message` there.
    Done { to: String, message: String, bad: bool },
    /// Refused: show the node page (or the nodes list when `node` is `None`) with `message`.
    Refused { node: Option<String>, status: StatusCode, message: String, typed: Option<Box<Typed>> },
    /// Not done yet: ask first.
    Confirm(Box<Confirm>),
}

impl Outcome {
    fn refused(node: &str, status: StatusCode, message: impl Into<String>) -> Outcome {
        Outcome::Refused {
            node: Some(node.to_owned()),
            status,
            message: message.into(),
            typed: None,
        }
    }

    fn on_node(node: &str, message: impl Into<String>) -> Outcome {
        Outcome::Done { to: format!("/admin/nodes/{node}"), message: message.into(), bad: false }
    }

    /// The node service's refusal, on `node`'s page (after `what: ` when given).
    fn failed(node: &str, e: &NodeError, what: Option<&str>) -> Outcome {
        let message = match what {
            Some(what) => about(what, e),
            None => e.to_string(),
        };
        Outcome::refused(node, status_of(e), message)
    }

    /// A write of the node service on `node`'s page: `done` when it worked, else why not.
    fn of<T>(node: &str, result: Result<T, NodeError>, done: String, what: &str) -> Outcome {
        match result {
            Ok(_) => Outcome::on_node(node, done),
            Err(e) => Outcome::failed(node, &e, Some(what)),
        }
    }
}

/// Turns an outcome into the answer: a 303 with a flash message, the page with the problem and
/// what was typed in `typed_form` (when the form has an id), or the confirmation step.
async fn finish(
    state: &AdminState,
    s: &Session,
    outcome: Outcome,
    typed_form: Option<String>,
    form: &HashMap<String, String>,
) -> Response {
    match outcome {
        Outcome::Done { to, message, bad } => {
            let sessions = state.sessions().await;
            if bad {
                sessions.set_flash_error(&s.cookie, message);
            } else {
                sessions.set_flash(&s.cookie, message);
            }
            Redirect::to(&to).into_response()
        }
        Outcome::Refused { node: Some(node), status, message, typed } => {
            let typed = typed.map(|t| *t).or_else(|| {
                typed_form.map(|id| Typed { form: id, values: typed_values(form), field: None })
            });
            render_node(state, s, &node, status, Some(message), typed).await
        }
        Outcome::Refused { node: None, status, message, typed } => {
            let mut view = NodesView::new(super::rack::ListQuery::parse(&HashMap::new()));
            match typed.map(|t| *t) {
                Some(typed) => {
                    view.field_error = typed.field.map(|f| (f, message));
                    view.typed = typed.values;
                    if view.field_error.is_none() {
                        view.problem = Some("The node was not created: see the form.".into());
                    }
                }
                None => view.problem = Some(message),
            }
            super::render_nodes(state, s, status, view).await
        }
        Outcome::Confirm(confirm) => super::node::render_confirm(state, s, *confirm),
    }
}

/// Runs a form handler (its session and CSRF token checked by [`CheckedForm`]); a refusal shows the form
/// `typed_form` again with what was typed.
async fn with_session<F, Fut>(
    state: &AdminState,
    s: &Session,
    form: &HashMap<String, String>,
    typed_form: Option<String>,
    run: F,
) -> Response
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    let outcome = run().await;
    finish(state, s, outcome, typed_form, form).await
}

/// The confirmation step of `form`'s action on `record` when it needs one and `confirm` does
/// not name the node; `None` when it may go on.
fn unconfirmed(
    record: &NodeRecord,
    form: &HashMap<String, String>,
    path: &str,
    which: &str,
    target: &str,
) -> Option<Outcome> {
    let name = &record.node.name;
    if !needs_confirmation(which, target) || field(form, "confirm") == name {
        return None;
    }
    let action = super::actions::Action::parse(which, target)?;
    let (what, consequence) = (action.label(), action.consequence()?);
    let mut fields: Vec<(String, String)> = form
        .iter()
        .filter(|(k, _)| k.as_str() != "csrf" && k.as_str() != "confirm")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    fields.sort();
    fields.push(("confirm".into(), name.clone()));
    Some(Outcome::Confirm(Box::new(Confirm {
        what: format!("{what} {name}"),
        consequence: format!("This {consequence}."),
        action: path.to_owned(),
        fields,
        back: format!("/admin/nodes/{}", record.node.uuid),
    })))
}

/// `POST /admin/nodes/{node}/{name}`: the forms of a node's page, by name; the name of a child
/// collection (`ports`, `connectors`, `targets`) adds one.
pub(super) async fn node_form(
    State(state): State<AdminState>,
    Path((node, name)): Path<(String, String)>,
    uri: Uri,
    checked: CheckedForm,
) -> Response {
    let CheckedForm { session, fields: form, .. } = checked;
    let typed_form = match name.as_str() {
        "edit" => Some("edit-node".to_owned()),
        "ports" | "connectors" | "targets" => Some(format!("add-{name}")),
        _ => None,
    };
    let path = uri.path().to_owned();
    with_session(&state, &session, &form, typed_form, || async {
        match name.as_str() {
            which @ ("power" | "provision") => set_state(&state, &node, &form, &path, which).await,
            "validate" => validate(&state, &node).await,
            "probe" => match super::probe::run(&state, &node, field(&form, "live") == "on").await {
                Ok((to, message, bad)) => Outcome::Done { to, message, bad },
                Err(e) => Outcome::failed(&node, &e, Some("Probe")),
            },
            "maintenance" => maintenance(&state, &node, &form).await,
            "edit" => edit_node(&state, &node, &form).await,
            "delete" => delete_node(&state, &node, &form, &path).await,
            segment => add_child(&state, &node, segment, &form).await,
        }
    })
    .await
}

/// Starts the power or provision action the form's `target` names (it goes on in the
/// background), through the same entry points as the API's `PUT .../states/{which}`.
async fn set_state(
    state: &AdminState,
    node: &str,
    form: &HashMap<String, String>,
    path: &str,
    which: &str,
) -> Outcome {
    let target = field(form, "target");
    let record = match state.nodes().node(node).await {
        Ok(record) => record,
        Err(e) => return Outcome::failed(node, &e, None),
    };
    if let Some(ask) = unconfirmed(&record, form, path, which, target) {
        return ask;
    }
    let uuid = &record.node.uuid;
    match start_action(state, uuid, which, target).await {
        Ok(()) => Outcome::on_node(uuid, started(which, target)),
        Err((status, message)) => Outcome::refused(uuid, status, message),
    }
}

/// Starts the power (`which` = `power`) or provision action `target` names on the node, through
/// the conductor's one entry point: its admission rules, its refusal worded for the page.
pub(super) async fn start_action(
    state: &AdminState,
    uuid: &str,
    which: &str,
    target: &str,
) -> Result<(), (StatusCode, String)> {
    let change = if which == "power" { StateChange::Power } else { StateChange::Provision };
    let action = Action::from_target(change, target)
        .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    match state.nodes().conductor().start(uuid, action).await {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = NodeError::from(e);
            Err((status_of(&e), e.to_string()))
        }
    }
}

/// Sets maintenance (with a reason) or ends it.
async fn maintenance(state: &AdminState, node: &str, form: &HashMap<String, String>) -> Outcome {
    let on = field(form, "maintenance") == "on";
    let reason = Some(field(form, "reason").to_owned()).filter(|r| on && !r.is_empty());
    match state.nodes().set_maintenance(node, on, reason).await {
        Ok(record) => Outcome::on_node(
            &record.node.uuid,
            if on { "Maintenance set." } else { "Maintenance ended." },
        ),
        Err(e) => Outcome::failed(node, &e, None),
    }
}

/// Validates the node's interfaces (the conductor's checks) and says what each found.
async fn validate(state: &AdminState, node: &str) -> Outcome {
    let record = match state.nodes().node(node).await {
        Ok(record) => record,
        Err(e) => return Outcome::failed(node, &e, None),
    };
    let report = state.nodes().conductor().validate(&record).await;
    let lines: Vec<String> = ["boot", "deploy", "power", "storage"]
        .iter()
        .map(|interface| match report.0.iter().find(|c| c.interface == *interface) {
            Some(check) if check.result => format!("{interface}: ok"),
            check => format!(
                "{interface}: {}",
                check.and_then(|c| c.reason.as_deref()).unwrap_or("not valid")
            ),
        })
        .collect();
    let bad = lines.iter().any(|l| !l.ends_with(": ok"));
    Outcome::Done {
        to: format!("/admin/nodes/{}", record.node.uuid),
        message: format!("Validation{}: {}", if bad { " failed" } else { "" }, lines.join("; ")),
        bad,
    }
}

/// A JSON object typed into a text area (empty means `{}`).
fn json_object(form: &HashMap<String, String>, name: &str) -> Result<Map<String, Value>, String> {
    let text = field(form, name);
    if text.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!("{name}: must be a JSON object, like {{\"key\": \"value\"}}")),
        Err(e) => Err(format!("{name}: not valid JSON ({e})")),
    }
}

/// The `driver_info` keys of a driver's BMC fields (address, system id, user, password), by
/// Ironic's names; `None` for drivers without a BMC.
pub(super) fn bmc_keys(driver: &str) -> Option<[Option<&'static str>; 4]> {
    match driver.parse::<Driver>().ok()? {
        Driver::Redfish => Some([
            Some("redfish_address"),
            Some("redfish_system_id"),
            Some("redfish_username"),
            Some("redfish_password"),
        ]),
        Driver::Ipmi => {
            Some([Some("ipmi_address"), None, Some("ipmi_username"), Some("ipmi_password")])
        }
        Driver::Fake | Driver::FakeHardware => None,
    }
}

/// The BMC fields of the form (`bmc_address`, `bmc_system_id`, `bmc_username`,
/// `bmc_password`), when it has them, into `driver_info` under `driver`'s key names: a field
/// left empty removes its key, except the password, which is write-only: empty keeps the
/// stored one (sent as the mask, which the node service restores).
fn bmc_fields(
    form: &HashMap<String, String>,
    driver: &str,
    stored: Option<&Map<String, Value>>,
    map: &mut Map<String, Value>,
) {
    let Some(keys) = bmc_keys(if driver.is_empty() { "fake" } else { driver }) else { return };
    let names = ["bmc_address", "bmc_system_id", "bmc_username", "bmc_password"];
    for (name, key) in names.iter().zip(keys) {
        let Some(key) = key else { continue };
        if !form.contains_key(*name) {
            continue;
        }
        let value = field(form, name);
        if !value.is_empty() {
            map.insert(key.into(), json!(value));
        } else if *name == "bmc_password" && stored.is_some_and(|d| d.contains_key(key)) {
            map.insert(key.into(), json!(bootvol_core::secrets::MASK));
        } else {
            map.remove(key);
        }
    }
}

/// A LUN or boot index typed as text: a number when it is one, else the text (the parser
/// names what is wrong with it).
fn number_or_text(text: &str) -> Value {
    text.parse::<u64>().map_or_else(|_| json!(text), |n| json!(n))
}

/// The node the create and edit forms describe, as a node document for `inventory`: the
/// form's fields, and for an edit what the form does not show kept from `current`.
fn node_document(
    form: &HashMap<String, String>,
    uuid: &str,
    current: Option<&NodeRecord>,
) -> Result<Map<String, Value>, String> {
    let mut node = Map::new();
    node.insert("uuid".into(), json!(uuid));
    node.insert("name".into(), json!(field(form, "name")));
    let driver = field(form, "driver");
    node.insert("driver".into(), json!(if driver.is_empty() { "fake" } else { driver }));
    if !field(form, "storage_interface").is_empty() {
        node.insert("storage_interface".into(), json!(field(form, "storage_interface")));
    }
    // The form edits one key of `properties`; the others are kept as they are.
    let current = current.map(|r| &r.node);
    let mut properties = current.map(|n| n.properties.clone()).unwrap_or_default();
    properties.remove("capabilities");
    if !field(form, "capabilities").is_empty() {
        properties.insert("capabilities".into(), json!(field(form, "capabilities")));
    }
    node.insert("properties".into(), Value::Object(properties));
    for (key, kept) in [
        ("driver_info", current.map(|n| &n.driver_info)),
        ("instance_info", current.map(|n| &n.instance_info)),
    ] {
        let mut map = match (form.contains_key(key), kept) {
            (true, _) => json_object(form, key)?,
            (false, Some(kept)) => kept.clone(),
            (false, None) => Map::new(),
        };
        if key == "driver_info" {
            bmc_fields(form, driver, current.map(|n| &n.driver_info), &mut map);
        }
        node.insert(key.into(), Value::Object(map));
    }
    if let Some(n) = current {
        node.insert("extra".into(), Value::Object(n.extra.clone()));
        node.insert("boot_interface".into(), json!(n.boot_interface));
        node.insert("deploy_interface".into(), json!(n.deploy_interface));
        // What the API sets and the form does not show is kept (issue 15).
        node.insert("instance_uuid".into(), json!(n.instance_uuid));
        node.insert("resource_class".into(), json!(n.resource_class));
        for kind in bootvol_core::model::hardware::Interfaces::KINDS {
            node.insert(kind.field(), json!(n.interfaces.get(*kind)));
        }
    }
    Ok(node)
}

/// The children of the create form: one port, an iqn connector and an iSCSI boot target, each
/// when its field is filled in.
fn initial_children(form: &HashMap<String, String>) -> Vec<(ChildKind, Value)> {
    let mut children = Vec::new();
    if !field(form, "mac").is_empty() {
        children.push((ChildKind::Port, json!({"address": field(form, "mac")})));
    }
    if !field(form, "connector_iqn").is_empty() {
        children.push((
            ChildKind::Connector,
            json!({"type": "iqn", "connector_id": field(form, "connector_iqn")}),
        ));
    }
    if !field(form, "volume_id").is_empty() {
        let mut properties = Map::new();
        for key in ["target_iqn", "target_portal", "auth_username", "auth_password"] {
            if !field(form, key).is_empty() {
                properties.insert(key.into(), json!(field(form, key)));
            }
        }
        if !field(form, "target_lun").is_empty() {
            properties.insert("target_lun".into(), number_or_text(field(form, "target_lun")));
        }
        if properties.contains_key("auth_username") {
            properties.insert("auth_method".into(), json!("CHAP"));
        }
        children.push((
            ChildKind::Target,
            json!({"volume_type": "iscsi", "boot_index": 0,
                   "volume_id": field(form, "volume_id"), "properties": properties}),
        ));
    }
    children
}

/// Creates a node with, optionally, one port, an iqn connector and an iSCSI boot target; all
/// or nothing (a refused child deletes the node just created). With a target and no storage
/// interface chosen, the node gets `external` when the configured default is `noop` (with
/// `noop` it could not boot its volume). A refusal shows the form again as typed (secrets left
/// out), the message beside the field it is about.
pub(super) async fn create_node(State(state): State<AdminState>, checked: CheckedForm) -> Response {
    let CheckedForm { session, fields: form, .. } = checked;
    with_session(&state, &session, &form, None, || async {
        let refused = |status: StatusCode, kind: &str, message: String| Outcome::Refused {
            node: None,
            status,
            typed: Some(Box::new(Typed {
                form: "create".into(),
                values: typed_values(&form),
                field: Some(create_field(kind, &message)),
            })),
            message,
        };
        let mut form = form.clone();
        let defaulted = field(&form, "storage_interface").is_empty()
            && !field(&form, "volume_id").is_empty()
            && state.nodes().default_storage() == StorageInterfaceName::Noop;
        if defaulted {
            form.insert("storage_interface".into(), "external".into());
        }
        let uuid = new_uuid();
        let spec = node_document(&form, &uuid, None)
            .and_then(|doc| inventory::parse_node(&Value::Object(doc), state.api.config()));
        let spec = match spec {
            Ok(spec) => spec,
            Err(e) => return refused(StatusCode::BAD_REQUEST, "node", about("node", e)),
        };
        let nodes = state.nodes();
        let made = match nodes.create_node(uuid.clone(), spec, ProvisionState::Enroll).await {
            Ok(made) => made,
            Err(e) => return refused(status_of(&e), "node", about("node", &e)),
        };
        // The BMC fields as validation reads them, when an address was given.
        if !field(&form, "bmc_address").is_empty()
            && let Err(e) = nodes.conductor().validate_power(&made.node)
        {
            if let Err(undo) = nodes.delete_node(&uuid).await {
                tracing::error!(node = uuid, error = %undo, "admin: undoing a node creation");
            }
            let message = format!("BMC: {e}");
            return refused(StatusCode::BAD_REQUEST, "node", message);
        }
        for (kind, doc) in initial_children(&form) {
            let created = match ChildSpec::parse(kind, &doc) {
                Ok(spec) => nodes.create_child(&uuid, new_uuid(), spec).await,
                Err(e) => Err(NodeError::Invalid(e)),
            };
            if let Err(e) = created {
                if let Err(undo) = nodes.delete_node(&uuid).await {
                    tracing::error!(node = uuid, error = %undo, "admin: undoing a node creation");
                }
                let message = about(kind.label(), &e);
                return refused(status_of(&e), kind.label(), message);
            }
        }
        let extra = if defaulted {
            " Storage interface: external (a volume target was given; the default, noop, cannot boot it)."
        } else {
            ""
        };
        // A target that the node will not boot is said at once, as a failure, not found later.
        if !field(&form, "volume_id").is_empty()
            && let Ok(record) = nodes.node(&uuid).await
        {
            let why = match bootvol_core::boot::decide(&record, nodes.default_storage()) {
                Ok(bootvol_core::boot::Scenario::NotBootFromVolume) => Some(format!(
                    "its storage interface is {} (choose external or cinder)",
                    record.node.effective_storage_interface(nodes.default_storage())
                )),
                Ok(_) => None,
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = why {
                return Outcome::Done {
                    to: format!("/admin/nodes/{uuid}"),
                    message: format!("Node created, but it cannot boot its volume: {why}."),
                    bad: true,
                };
            }
        }
        Outcome::on_node(&uuid, format!("Node created.{extra}"))
    })
    .await
}

/// Edits a node's name, driver, storage interface, capabilities, driver_info and
/// instance_info. The BMC fields are checked as validation checks them (the driver's own
/// reading of `driver_info`) when an address is given; a driver switch needs the new driver's
/// password typed when the old one had one stored, and says which old keys it removed.
async fn edit_node(state: &AdminState, node: &str, form: &HashMap<String, String>) -> Outcome {
    let current = match state.nodes().node(node).await {
        Ok(current) => current,
        Err(e) => return Outcome::failed(node, &e, None),
    };
    let uuid = current.node.uuid.clone();
    let spec = node_document(form, &uuid, Some(&current))
        .and_then(|doc| inventory::parse_node(&Value::Object(doc), state.api.config()));
    let spec = match spec {
        Ok(spec) => spec,
        Err(e) => return Outcome::refused(&uuid, StatusCode::BAD_REQUEST, e),
    };
    if NodeService::node_unchanged(&current, &spec) {
        return Outcome::on_node(&uuid, "Nothing changed.");
    }
    let removed = match driver_switch(&current.node, spec.driver, form) {
        Ok(removed) => removed,
        Err(why) => return Outcome::refused(&uuid, StatusCode::BAD_REQUEST, why),
    };
    if !field(form, "bmc_address").is_empty() && bmc_keys(spec.driver.as_str()).is_some() {
        let mut probe = current.node.clone();
        probe.driver = spec.driver;
        probe.driver_info = spec.driver_info.clone();
        if let Err(e) = state.nodes().conductor().validate_power(&probe) {
            return Outcome::refused(&uuid, StatusCode::BAD_REQUEST, format!("BMC: {e}"));
        }
    }
    match state.nodes().update_node(&uuid, spec).await {
        Ok(_) if removed.is_empty() => Outcome::on_node(&uuid, "Node saved."),
        Ok(saved) => Outcome::on_node(
            &uuid,
            format!(
                "Node saved. The driver is now {}: {} removed (the old driver's BMC fields).",
                saved.node.driver,
                removed.join(", ")
            ),
        ),
        Err(e) => Outcome::failed(&uuid, &e, None),
    }
}

/// A change of driver from `current`'s to `driver`: the old driver's BMC keys it removes (to
/// be said), or the refusal when the old driver had a password stored and none is typed for
/// the new one (a stored secret is never dropped silently, nor carried to another driver).
fn driver_switch(
    current: &bootvol_core::model::Node,
    driver: Driver,
    form: &HashMap<String, String>,
) -> Result<Vec<&'static str>, String> {
    if current.driver == driver {
        return Ok(Vec::new());
    }
    let Some(old) = bmc_keys(current.driver.as_str()) else { return Ok(Vec::new()) };
    let stored: Vec<&'static str> =
        old.into_iter().flatten().filter(|k| current.driver_info.contains_key(*k)).collect();
    let password_stored = old[3].is_some_and(|k| current.driver_info.contains_key(k));
    if password_stored
        && bmc_keys(driver.as_str()).is_some()
        && field(form, "bmc_password").is_empty()
    {
        return Err(format!(
            "The driver changes from {} to {driver}: type the BMC password for {driver} (the stored {} is not carried over to another driver). Nothing was saved.",
            current.driver,
            old[3].unwrap_or("password"),
        ));
    }
    Ok(stored)
}

/// Deletes a node (refused while it is deployed or has volumes attached).
async fn delete_node(
    state: &AdminState,
    node: &str,
    form: &HashMap<String, String>,
    path: &str,
) -> Outcome {
    let record = match state.nodes().node(node).await {
        Ok(record) => record,
        Err(e) => return Outcome::failed(node, &e, None),
    };
    if let Some(ask) = unconfirmed(&record, form, path, "delete", "delete") {
        return ask;
    }
    match state.nodes().delete_node(&record.node.uuid).await {
        Ok(record) => Outcome::Done {
            to: "/admin/".into(),
            message: format!("Node {} deleted.", record.node.name),
            bad: false,
        },
        Err(e) => Outcome::failed(node, &e, None),
    }
}

/// The fields of a child's form, as a document for `inventory`.
fn child_document(
    kind: ChildKind,
    form: &HashMap<String, String>,
) -> Result<Map<String, Value>, String> {
    let mut doc = Map::new();
    match kind {
        ChildKind::Port => {
            doc.insert("address".into(), json!(field(form, "address")));
        }
        ChildKind::Connector => {
            doc.insert("type".into(), json!(field(form, "type")));
            doc.insert("connector_id".into(), json!(field(form, "connector_id")));
        }
        ChildKind::Target => {
            doc.insert("volume_type".into(), json!(field(form, "volume_type")));
            doc.insert("boot_index".into(), number_or_text(field(form, "boot_index")));
            doc.insert("volume_id".into(), json!(field(form, "volume_id")));
            doc.insert("properties".into(), Value::Object(json_object(form, "properties")?));
        }
    }
    Ok(doc)
}

/// A child form's spec, or the refusal naming the kind.
fn child_spec(
    kind: ChildKind,
    form: &HashMap<String, String>,
    node_uuid: &str,
) -> Result<ChildSpec, Outcome> {
    child_document(kind, form)
        .and_then(|doc| ChildSpec::parse(kind, &Value::Object(doc)))
        .map_err(|e| Outcome::refused(node_uuid, StatusCode::BAD_REQUEST, about(kind.label(), e)))
}

/// The kind of child a URL segment names, and the UUID of the node it is under.
async fn child_of(
    state: &AdminState,
    node: &str,
    segment: &str,
) -> Result<(ChildKind, String), Outcome> {
    let Some(kind) = ChildKind::ALL.into_iter().find(|k| k.collection() == segment) else {
        return Err(Outcome::refused(node, StatusCode::NOT_FOUND, "No such form."));
    };
    match state.nodes().node(node).await {
        Ok(record) => Ok((kind, record.node.uuid)),
        Err(e) => Err(Outcome::failed(node, &e, None)),
    }
}

/// A child of `node_uuid` as stored, refused when it belongs to another node.
async fn current_child(
    state: &AdminState,
    node_uuid: &str,
    kind: ChildKind,
    id: &str,
) -> Result<Stamped<Child>, Outcome> {
    match state.nodes().child(kind, id).await {
        Ok(stored) if stored.node_uuid == node_uuid => Ok(stored),
        Ok(_) | Err(NodeError::NotFound(_)) => Err(Outcome::refused(
            node_uuid,
            StatusCode::NOT_FOUND,
            format!("No such {} on this node.", kind.label()),
        )),
        Err(e) => Err(Outcome::failed(node_uuid, &e, None)),
    }
}

/// Adds a port, connector or target to a node.
async fn add_child(
    state: &AdminState,
    node: &str,
    segment: &str,
    form: &HashMap<String, String>,
) -> Outcome {
    let (kind, uuid) = match child_of(state, node, segment).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let spec = match child_spec(kind, form, &uuid) {
        Ok(spec) => spec,
        Err(refused) => return refused,
    };
    let created = state.nodes().create_child(&uuid, new_uuid(), spec).await;
    Outcome::of(&uuid, created, format!("{} added.", kind.title()), kind.label())
}

/// `POST /admin/nodes/{node}/{child}/{id}` (save the edit form of a port, connector or
/// target) and `.../{id}/delete`: the child must be under that node.
pub(super) async fn child_form(
    State(state): State<AdminState>,
    Path((node, segment, id)): Path<(String, String, String)>,
    uri: Uri,
    checked: CheckedForm,
) -> Response {
    let CheckedForm { session, fields: form, .. } = checked;
    let delete = uri.path().ends_with("/delete");
    let typed_form = (!delete).then(|| format!("{segment}-{id}"));
    with_session(&state, &session, &form, typed_form, || async {
        let (kind, uuid) = match child_of(&state, &node, &segment).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let current = match current_child(&state, &uuid, kind, &id).await {
            Ok(current) => current,
            Err(refused) => return refused,
        };
        if delete {
            let deleted = state.nodes().delete_child(kind, &id).await;
            return Outcome::of(&uuid, deleted, format!("{} deleted.", kind.title()), kind.label());
        }
        let spec = match child_spec(kind, &form, &uuid) {
            Ok(spec) => spec,
            Err(refused) => return refused,
        };
        if NodeService::child_unchanged(&current.item, &spec) {
            return Outcome::on_node(&uuid, "Nothing changed.");
        }
        let saved = state.nodes().update_child(&id, &uuid, spec).await;
        Outcome::of(&uuid, saved, format!("{} saved.", kind.title()), kind.label())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use typed::mask_typed_json;

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn an_edit_keeps_what_the_form_does_not_show() {
        let config = bootvol_core::config::Config::from_toml("", "test").unwrap();
        let current: NodeRecord = serde_json::from_value(json!({
            "node": {"uuid": "44444444-4444-4444-8444-000000000001", "name": "n1", "driver": "fake", "storage_interface": "noop",
                     "properties": {"capabilities": "iscsi_boot:true", "cpus": 4},
                     "driver_info": {"fake_password": "pw"}, "instance_info": {},
                     "driver_internal_info": {}, "extra": {"rack": "r1"},
                     "boot_interface": "ipxe", "deploy_interface": "direct", "power_state": null,
                     "target_power_state": null, "provision_state": "enroll",
                     "target_provision_state": null, "maintenance": false,
                     "maintenance_reason": null, "last_error": null, "created_at": null,
                     "updated_at": null},
            "ports": [], "volume_connectors": [], "volume_targets": []}))
        .unwrap();
        // Storage interface emptied, capabilities edited alone, driver_info sent back masked.
        let edited = form(&[
            ("name", "n2"),
            ("driver", "fake"),
            ("storage_interface", ""),
            ("driver_info", r#"{"fake_password": "******"}"#),
        ]);
        let doc = node_document(&edited, &current.node.uuid, Some(&current)).unwrap();
        assert_eq!(doc.get("storage_interface"), None);
        assert_eq!(doc["properties"], json!({"cpus": 4}));
        assert_eq!(doc["extra"], json!({"rack": "r1"}));
        assert_eq!(doc["instance_info"], json!({}));
        let spec = inventory::parse_node(&Value::Object(doc), &config).unwrap();
        assert!(!NodeService::node_unchanged(&current, &spec));
        // The same node as stored, its secret masked: nothing changed.
        let same = form(&[
            ("name", "n1"),
            ("driver", "fake"),
            ("storage_interface", "noop"),
            ("capabilities", "iscsi_boot:true"),
            ("driver_info", r#"{"fake_password": "******"}"#),
        ]);
        let doc = node_document(&same, &current.node.uuid, Some(&current)).unwrap();
        let spec = inventory::parse_node(&Value::Object(doc), &config).unwrap();
        assert!(NodeService::node_unchanged(&current, &spec));
    }

    #[test]
    fn bmc_fields_go_under_the_drivers_names_and_the_password_is_write_only() {
        let stored: Map<String, Value> = serde_json::from_value(
            json!({"redfish_address": "https://old", "redfish_password": "pw", "x": 1}),
        )
        .unwrap();
        let mut map = stored.clone();
        let typed = form(&[
            ("bmc_address", "https://10.0.0.5"),
            ("bmc_system_id", ""),
            ("bmc_username", "admin"),
            ("bmc_password", ""),
        ]);
        bmc_fields(&typed, "redfish", Some(&stored), &mut map);
        assert_eq!(
            Value::Object(map),
            json!({"redfish_address": "https://10.0.0.5", "redfish_username": "admin",
                   "redfish_password": bootvol_core::secrets::MASK, "x": 1}),
            "an empty password keeps the stored one (the mask), an empty system id is removed"
        );
        let mut fresh = Map::new();
        bmc_fields(
            &form(&[("bmc_address", "10.0.0.6"), ("bmc_password", "s")]),
            "ipmi",
            None,
            &mut fresh,
        );
        assert_eq!(Value::Object(fresh), json!({"ipmi_address": "10.0.0.6", "ipmi_password": "s"}));
        let mut none = Map::new();
        bmc_fields(&form(&[("bmc_address", "10.0.0.6")]), "fake", None, &mut none);
        assert!(none.is_empty(), "the fake driver has no BMC");
    }

    #[test]
    fn typed_json_is_shown_again_without_its_secrets() {
        let typo = r#"{"redfish_password": "hunter2", "redfish_address": "10.0.0.5", "x": fals"#;
        let shown = mask_typed_json(typo);
        assert_eq!(
            shown,
            r#"{"redfish_password": "******", "redfish_address": "10.0.0.5", "x": fals"#
        );
        let escaped = r#"{"auth_password" : "a\"b", "ipmi_password": 1234, "token": secret}"#;
        let shown = mask_typed_json(escaped);
        assert!(!shown.contains("a\\\"b") && !shown.contains("1234") && !shown.contains("secret}"));
        assert_eq!(shown.matches("******").count(), 3, "{shown}");
        let unterminated = r#"{"auth_password": "no end"#;
        assert!(!mask_typed_json(unterminated).contains("no end"));
        let parsed = mask_typed_json(r#"{"fake_password": "pw", "a": 1}"#);
        assert!(parsed.contains("******") && !parsed.contains("\"pw\""), "{parsed}");
    }

    #[test]
    fn a_refusal_names_the_create_forms_field() {
        assert_eq!(create_field("port", "\"x\" is not a MAC address"), "mac");
        assert_eq!(create_field("volume connector", "not an iSCSI name"), "connector_iqn");
        assert_eq!(create_field("volume target", "target_portal: bad"), "target_portal");
        assert_eq!(create_field("node", "node: driver_info.redfish_address: bad"), "bmc_address");
        assert_eq!(create_field("node", "node: a node named n1 exists"), "name");
    }

    #[test]
    fn text_areas_must_hold_json_objects() {
        assert!(json_object(&form(&[("driver_info", "[1]")]), "driver_info").is_err());
        assert!(json_object(&form(&[("driver_info", "{")]), "driver_info").is_err());
        assert_eq!(json_object(&form(&[("driver_info", " ")]), "driver_info").unwrap(), Map::new());
        let target = child_document(
            ChildKind::Target,
            &form(&[("volume_type", "iscsi"), ("boot_index", "x"), ("properties", "{}")]),
        )
        .unwrap();
        assert_eq!(target["boot_index"], json!("x"), "the parser names a bad boot index");
        let refused = ChildSpec::parse(ChildKind::Target, &Value::Object(target)).unwrap_err();
        assert!(refused.contains("boot_index"), "{refused}");
    }
}
