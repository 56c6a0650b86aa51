//! The admin forms: create, edit and delete nodes, ports, volume connectors and volume targets;
//! maintenance; power, provision (manage, provide, deploy, undeploy) and validate a node.
//!
//! Each form turns its fields into the `inventory` parsers' specs and calls the node service
//! ([`crate::nodes::NodeService`]), the same functions the REST API calls: a form writes exactly
//! what the API would accept (Ironic's edit rules, uniqueness, masked secrets sent back
//! unchanged keep the stored ones). Power and provision actions start through the API's action
//! entry point (`api::start_state_change`); validation asks the conductor. A
//! form that worked redirects (303, redirect-after-POST) with its message kept in the session
//! for the next page; one that was refused renders the page again with the message and a 4xx
//! status.

use std::collections::HashMap;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Map, Value, json};

use super::node::render_node;
use super::session::Session;
use super::{AdminState, checked_post};
use crate::api::StateChange;
use crate::inventory::{self, ChildSpec};
use crate::model::{Child, ChildKind, NodeRecord, ProvisionState, Stamped, new_uuid};
use crate::nodes::{NodeError, NodeService};

fn field<'a>(form: &'a HashMap<String, String>, name: &str) -> &'a str {
    form.get(name).map_or("", |v| v.trim())
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

/// What a form came to.
enum Outcome {
    /// Worked: go to `to`, showing `message` there.
    Done { to: String, message: String },
    /// Refused: show the node page (or the nodes list when `node` is `None`) with `message`.
    Refused { node: Option<String>, status: StatusCode, message: String },
}

impl Outcome {
    fn refused(node: &str, status: StatusCode, message: impl Into<String>) -> Outcome {
        Outcome::Refused { node: Some(node.to_owned()), status, message: message.into() }
    }

    fn on_node(node: &str, message: impl Into<String>) -> Outcome {
        Outcome::Done { to: format!("/admin/nodes/{node}"), message: message.into() }
    }

    /// The node service's refusal, on `node`'s page (after `what: ` when given).
    fn failed(node: &str, e: &NodeError, what: Option<&str>) -> Outcome {
        let message = match what {
            Some(what) => format!("{what}: {e}"),
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

/// Turns an outcome into the answer: a 303 with a flash message, or the page with the problem.
async fn finish(state: &AdminState, s: &Session, outcome: Outcome) -> Response {
    match outcome {
        Outcome::Done { to, message } => {
            state.sessions.set_flash(&s.cookie, message);
            Redirect::to(&to).into_response()
        }
        Outcome::Refused { node: Some(node), status, message } => {
            render_node(state, s, &node, status, None, Some(message)).await
        }
        Outcome::Refused { node: None, status, message } => {
            super::render_nodes(state, s, status, None, Some(message), None).await
        }
    }
}

/// Runs a form handler after the session and CSRF checks.
async fn with_session<F, Fut>(
    state: &AdminState,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
    run: F,
) -> Response
where
    F: FnOnce(Session) -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    match checked_post(state, headers, form) {
        Ok(s) => {
            let outcome = run(s.clone()).await;
            finish(state, &s, outcome).await
        }
        Err(refused) => *refused,
    }
}

/// `POST /admin/nodes/{node}/{name}`: the forms of a node's page, by name; the name of a child
/// collection (`ports`, `connectors`, `targets`) adds one.
pub(super) async fn node_form(
    State(state): State<AdminState>,
    Path((node, name)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        match name.as_str() {
            which @ ("power" | "provision") => set_state(&state, &node, &form, which).await,
            "validate" => validate(&state, &node).await,
            "maintenance" => maintenance(&state, &node, &form).await,
            "edit" => edit_node(&state, &node, &form).await,
            "delete" => delete_node(&state, &node).await,
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
    which: &str,
) -> Outcome {
    let target = field(form, "target");
    let change = if which == "power" { StateChange::Power } else { StateChange::Provision };
    let started = crate::api::start_state_change(&state.api, node, change, target).await;
    match started {
        Ok(uuid) => {
            Outcome::on_node(&uuid, format!("{} action \"{target}\" started.", capitalized(which)))
        }
        Err(e) => Outcome::refused(node, e.status(), e.message()),
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
    Outcome::on_node(&record.node.uuid, format!("Validation: {}", lines.join("; ")))
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
        let map = match (form.contains_key(key), kept) {
            (true, _) => json_object(form, key)?,
            (false, Some(kept)) => kept.clone(),
            (false, None) => Map::new(),
        };
        node.insert(key.into(), Value::Object(map));
    }
    if let Some(n) = current {
        node.insert("extra".into(), Value::Object(n.extra.clone()));
        node.insert("boot_interface".into(), json!(n.boot_interface));
        node.insert("deploy_interface".into(), json!(n.deploy_interface));
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
/// or nothing (a refused child deletes the node just created).
pub(super) async fn create_node(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        let refused =
            |status: StatusCode, message: String| Outcome::Refused { node: None, status, message };
        let uuid = new_uuid();
        let spec = node_document(&form, &uuid, None)
            .and_then(|doc| inventory::parse_node(&Value::Object(doc), state.api.config()));
        let spec = match spec {
            Ok(spec) => spec,
            Err(e) => return refused(StatusCode::BAD_REQUEST, format!("node: {e}")),
        };
        let nodes = state.nodes();
        if let Err(e) = nodes.create_node(uuid.clone(), spec, ProvisionState::Enroll).await {
            return refused(status_of(&e), format!("node: {e}"));
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
                let message = format!("{}: {e} (the node was not created)", kind.label());
                return refused(status_of(&e), message);
            }
        }
        Outcome::on_node(&uuid, "Node created.")
    })
    .await
}

/// Edits a node's name, driver, storage interface, capabilities, driver_info and
/// instance_info.
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
    match state.nodes().update_node(&uuid, spec).await {
        Ok(_) => Outcome::on_node(&uuid, "Node saved."),
        Err(e) => Outcome::failed(&uuid, &e, None),
    }
}

/// Deletes a node (refused while it is deployed or has volumes attached).
async fn delete_node(state: &AdminState, node: &str) -> Outcome {
    match state.nodes().delete_node(node).await {
        Ok(record) => Outcome::Done {
            to: "/admin/".into(),
            message: format!("Node {} deleted.", record.node.name),
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
    child_document(kind, form).and_then(|doc| ChildSpec::parse(kind, &Value::Object(doc))).map_err(
        |e| Outcome::refused(node_uuid, StatusCode::BAD_REQUEST, format!("{}: {e}", kind.label())),
    )
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
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let delete = uri.path().ends_with("/delete");
    with_session(&state, &headers, &form, |_| async {
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

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn an_edit_keeps_what_the_form_does_not_show() {
        let config = crate::config::Config::from_toml("", "test").unwrap();
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
