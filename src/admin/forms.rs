//! The admin forms: create, edit and delete nodes, ports, volume connectors and volume targets;
//! power, provision (manage, provide, deploy, undeploy) and validate a node.
//!
//! Each form goes through the REST API's own routes
//! ([`ApiState::internal_call`](crate::api::ApiState)), so a form writes exactly what the API
//! would accept: the `inventory` parsers, `db::api`, Ironic's edit rules and the conductor.
//! Edits are JSON patches of the fields that changed; a masked secret (`******`) sent back
//! unchanged keeps the stored one (the API restores it). A form that worked redirects
//! (303, redirect-after-POST) with its message kept in the session for the next page; one that
//! was refused renders the page again with the API's message and a 4xx status.

use std::collections::HashMap;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Map, Value, json};

use super::node::render_node;
use super::session::Session;
use super::{AdminState, checked_post};

fn field<'a>(form: &'a HashMap<String, String>, name: &str) -> &'a str {
    form.get(name).map_or("", |v| v.trim())
}

/// The message of an API answer that is not a success.
fn fault(body: &Value) -> String {
    match body {
        Value::String(message) => message.clone(),
        other => other.to_string(),
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

    /// An API answer as the outcome of a form on `node`'s page: `done` when it worked, else
    /// the API's message (after `what: ` when given).
    fn of_answer(
        node: &str,
        (status, body): (StatusCode, Value),
        done: impl Into<String>,
        what: Option<&str>,
    ) -> Outcome {
        if status.is_success() {
            return Outcome::on_node(node, done);
        }
        let message = match what {
            Some(what) => format!("{what}: {}", fault(&body)),
            None => fault(&body),
        };
        Outcome::refused(node, status, message)
    }

    /// Refuses a node name or UUID that cannot name one resource.
    fn check_node(node: &str) -> Result<(), Outcome> {
        if plain_segment(node) {
            Ok(())
        } else {
            Err(Outcome::refused(node, StatusCode::NOT_FOUND, "No such node."))
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

/// A path segment that names one resource (a node or a child): no separators, no dots only.
fn plain_segment(text: &str) -> bool {
    !text.is_empty() && !text.contains('/') && text != "." && text != ".."
}

pub(super) async fn power(
    state: State<AdminState>,
    node: Path<String>,
    headers: HeaderMap,
    form: Form<HashMap<String, String>>,
) -> Response {
    set_state(state, node, headers, form, "power").await
}

pub(super) async fn provision(
    state: State<AdminState>,
    node: Path<String>,
    headers: HeaderMap,
    form: Form<HashMap<String, String>>,
) -> Response {
    set_state(state, node, headers, form, "provision").await
}

/// `PUT /v1/nodes/{node}/states/{which}` with the form's `target` (an action that goes on in
/// the background).
async fn set_state(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
    which: &'static str,
) -> Response {
    let target = field(&form, "target").to_owned();
    with_session(&state, &headers, &form, |_| async {
        if let Err(refused) = Outcome::check_node(&node) {
            return refused;
        }
        let answer = state
            .api
            .internal_call(
                Method::PUT,
                &format!("/v1/nodes/{node}/states/{which}"),
                Some(&json!({ "target": target })),
            )
            .await;
        Outcome::of_answer(
            &node,
            answer,
            format!("{} action \"{target}\" started.", capitalized(which)),
            None,
        )
    })
    .await
}

/// Sets maintenance (with a reason) or ends it.
pub(super) async fn maintenance(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let on = field(&form, "maintenance") == "on";
    let reason = field(&form, "reason").to_owned();
    with_session(&state, &headers, &form, |_| async {
        if let Err(refused) = Outcome::check_node(&node) {
            return refused;
        }
        let path = format!("/v1/nodes/{node}/maintenance");
        let answer = if on {
            let reason = if reason.is_empty() { Value::Null } else { json!(reason) };
            state.api.internal_call(Method::PUT, &path, Some(&json!({ "reason": reason }))).await
        } else {
            state.api.internal_call(Method::DELETE, &path, None).await
        };
        let done = if on { "Maintenance set." } else { "Maintenance ended." };
        Outcome::of_answer(&node, answer, done, None)
    })
    .await
}

pub(super) async fn validate(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        if let Err(refused) = Outcome::check_node(&node) {
            return refused;
        }
        let (status, body) =
            state.api.internal_call(Method::GET, &format!("/v1/nodes/{node}/validate"), None).await;
        if !status.is_success() {
            return Outcome::refused(&node, status, fault(&body));
        }
        let mut lines = Vec::new();
        for interface in ["boot", "deploy", "power", "storage"] {
            let check = &body[interface];
            match check["result"].as_bool() {
                Some(true) => lines.push(format!("{interface}: ok")),
                _ => lines.push(format!(
                    "{interface}: {}",
                    check["reason"].as_str().unwrap_or("not valid")
                )),
            }
        }
        Outcome::on_node(&node, format!("Validation: {}", lines.join("; ")))
    })
    .await
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

/// A LUN or boot index typed as text: a number when it is one, else the text (the API names
/// what is wrong with it).
fn number_or_text(text: &str) -> Value {
    text.parse::<u64>().map_or_else(|_| json!(text), |n| json!(n))
}

/// The JSON patch that takes `current` to `desired`: `add` for each field whose value changed,
/// `remove` for each field of `removable` that is absent from `desired` but set in `current`.
fn patch_between(current: &Value, desired: &Map<String, Value>, removable: &[&str]) -> Vec<Value> {
    let mut ops = Vec::new();
    for (key, value) in desired {
        if current.get(key) != Some(value) {
            ops.push(json!({"op": "add", "path": format!("/{key}"), "value": value}));
        }
    }
    for key in removable {
        if !desired.contains_key(*key) && current.get(*key).is_some_and(|v| !v.is_null()) {
            ops.push(json!({"op": "remove", "path": format!("/{key}")}));
        }
    }
    ops
}

/// The node fields of the create and edit forms.
fn node_document(
    form: &HashMap<String, String>,
    current: Option<&Value>,
) -> Result<Map<String, Value>, String> {
    let mut node = Map::new();
    node.insert("name".into(), json!(field(form, "name")));
    let driver = field(form, "driver");
    node.insert("driver".into(), json!(if driver.is_empty() { "fake" } else { driver }));
    if !field(form, "storage_interface").is_empty() {
        node.insert("storage_interface".into(), json!(field(form, "storage_interface")));
    }
    // The form edits one key of `properties`; the others are kept as they are.
    let mut properties =
        current.and_then(|c| c["properties"].as_object().cloned()).unwrap_or_default();
    properties.remove("capabilities");
    if !field(form, "capabilities").is_empty() {
        properties.insert("capabilities".into(), json!(field(form, "capabilities")));
    }
    if current.is_some() || !properties.is_empty() {
        node.insert("properties".into(), Value::Object(properties));
    }
    for key in ["driver_info", "instance_info"] {
        if form.contains_key(key) {
            node.insert(key.into(), Value::Object(json_object(form, key)?));
        }
    }
    Ok(node)
}

/// Creates a node with, optionally, one port, an iqn connector and an iSCSI boot target; all
/// or nothing (a refused child deletes the node just created).
pub(super) async fn create_node(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        let refused = |message: String| Outcome::Refused {
            node: None,
            status: StatusCode::BAD_REQUEST,
            message,
        };
        let node = match node_document(&form, None) {
            Ok(node) => node,
            Err(e) => return refused(format!("node: {e}")),
        };
        let (status, created) =
            state.api.internal_call(Method::POST, "/v1/nodes", Some(&Value::Object(node))).await;
        if !status.is_success() {
            return refused(format!("node: {}", fault(&created)));
        }
        let Some(uuid) = created["uuid"].as_str().map(str::to_owned) else {
            return refused("node: no uuid in the answer".into());
        };
        let mut children = Vec::new();
        if !field(&form, "mac").is_empty() {
            children.push((Child::Port, json!({"address": field(&form, "mac")})));
        }
        if !field(&form, "connector_iqn").is_empty() {
            children.push((
                Child::Connector,
                json!({"type": "iqn", "connector_id": field(&form, "connector_iqn")}),
            ));
        }
        if !field(&form, "volume_id").is_empty() {
            let mut properties = Map::new();
            for key in ["target_iqn", "target_portal", "auth_username", "auth_password"] {
                if !field(&form, key).is_empty() {
                    properties.insert(key.into(), json!(field(&form, key)));
                }
            }
            if !field(&form, "target_lun").is_empty() {
                properties.insert("target_lun".into(), number_or_text(field(&form, "target_lun")));
            }
            if properties.contains_key("auth_username") {
                properties.insert("auth_method".into(), json!("CHAP"));
            }
            children.push((
                Child::Target,
                json!({"volume_type": "iscsi", "boot_index": 0,
                       "volume_id": field(&form, "volume_id"), "properties": properties}),
            ));
        }
        for (child, mut body) in children {
            body["node_uuid"] = json!(uuid);
            let (status, answer) =
                state.api.internal_call(Method::POST, child.api(), Some(&body)).await;
            if !status.is_success() {
                let _ = state
                    .api
                    .internal_call(Method::DELETE, &format!("/v1/nodes/{uuid}"), None)
                    .await;
                return refused(format!(
                    "{}: {} (the node was not created)",
                    child.label(),
                    fault(&answer)
                ));
            }
        }
        Outcome::on_node(&uuid, "Node created.")
    })
    .await
}

/// The node as the API shows it (secrets masked), or why not.
async fn current_node(state: &AdminState, node: &str) -> Result<Value, Outcome> {
    Outcome::check_node(node)?;
    let (status, body) =
        state.api.internal_call(Method::GET, &format!("/v1/nodes/{node}"), None).await;
    if status.is_success() { Ok(body) } else { Err(Outcome::refused(node, status, fault(&body))) }
}

/// Edits a node's name, driver, storage interface, capabilities, driver_info and
/// instance_info.
pub(super) async fn edit_node(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        let current = match current_node(&state, &node).await {
            Ok(current) => current,
            Err(refused) => return refused,
        };
        let uuid = current["uuid"].as_str().unwrap_or(&node).to_owned();
        let desired = match node_document(&form, Some(&current)) {
            Ok(desired) => desired,
            Err(e) => return Outcome::refused(&uuid, StatusCode::BAD_REQUEST, e),
        };
        let patch = patch_between(&current, &desired, &["storage_interface"]);
        if patch.is_empty() {
            return Outcome::on_node(&uuid, "Nothing changed.");
        }
        let answer = state
            .api
            .internal_call(Method::PATCH, &format!("/v1/nodes/{uuid}"), Some(&Value::Array(patch)))
            .await;
        Outcome::of_answer(&uuid, answer, "Node saved.", None)
    })
    .await
}

/// Deletes a node (the API refuses while it is deployed or has volumes attached).
pub(super) async fn delete_node(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        let current = match current_node(&state, &node).await {
            Ok(current) => current,
            Err(refused) => return refused,
        };
        let uuid = current["uuid"].as_str().unwrap_or(&node).to_owned();
        let name = current["name"].as_str().filter(|n| !n.is_empty()).unwrap_or(&uuid).to_owned();
        let (status, body) =
            state.api.internal_call(Method::DELETE, &format!("/v1/nodes/{uuid}"), None).await;
        if status.is_success() {
            Outcome::Done { to: "/admin/".into(), message: format!("Node {name} deleted.") }
        } else {
            Outcome::refused(&uuid, status, fault(&body))
        }
    })
    .await
}

/// The resources that belong to a node, by their segment in the admin URLs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Child {
    Port,
    Connector,
    Target,
}

impl Child {
    fn from_segment(segment: &str) -> Option<Child> {
        match segment {
            "ports" => Some(Child::Port),
            "connectors" => Some(Child::Connector),
            "targets" => Some(Child::Target),
            _ => None,
        }
    }

    fn api(self) -> &'static str {
        match self {
            Child::Port => "/v1/ports",
            Child::Connector => "/v1/volume/connectors",
            Child::Target => "/v1/volume/targets",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Child::Port => "port",
            Child::Connector => "volume connector",
            Child::Target => "volume target",
        }
    }

    /// The fields of this child's form, as the API's JSON.
    fn document(self, form: &HashMap<String, String>) -> Result<Map<String, Value>, String> {
        let mut doc = Map::new();
        match self {
            Child::Port => {
                doc.insert("address".into(), json!(field(form, "address")));
            }
            Child::Connector => {
                doc.insert("type".into(), json!(field(form, "type")));
                doc.insert("connector_id".into(), json!(field(form, "connector_id")));
            }
            Child::Target => {
                doc.insert("volume_type".into(), json!(field(form, "volume_type")));
                doc.insert("boot_index".into(), number_or_text(field(form, "boot_index")));
                doc.insert("volume_id".into(), json!(field(form, "volume_id")));
                doc.insert("properties".into(), Value::Object(json_object(form, "properties")?));
            }
        }
        Ok(doc)
    }
}

/// Adds a port, connector or target to a node.
pub(super) async fn create_child(
    State(state): State<AdminState>,
    Path((node, segment)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        let (child, uuid) = match child_of(&state, &node, &segment).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let mut doc = match child.document(&form) {
            Ok(doc) => doc,
            Err(e) => {
                return Outcome::refused(
                    &uuid,
                    StatusCode::BAD_REQUEST,
                    format!("{}: {e}", child.label()),
                );
            }
        };
        doc.insert("node_uuid".into(), json!(uuid));
        let answer =
            state.api.internal_call(Method::POST, child.api(), Some(&Value::Object(doc))).await;
        Outcome::of_answer(
            &uuid,
            answer,
            format!("{} added.", capitalized(child.label())),
            Some(child.label()),
        )
    })
    .await
}

/// The kind of child a URL segment names, and the UUID of the node it is under.
async fn child_of(
    state: &AdminState,
    node: &str,
    segment: &str,
) -> Result<(Child, String), Outcome> {
    let Some(child) = Child::from_segment(segment) else {
        return Err(Outcome::refused(node, StatusCode::NOT_FOUND, "No such form."));
    };
    let current = current_node(state, node).await?;
    Ok((child, current["uuid"].as_str().unwrap_or(node).to_owned()))
}

/// A child of `node` as the API shows it, refused when it belongs to another node.
async fn current_child(
    state: &AdminState,
    node_uuid: &str,
    child: Child,
    id: &str,
) -> Result<Value, Outcome> {
    let missing = || {
        Outcome::refused(
            node_uuid,
            StatusCode::NOT_FOUND,
            format!("No such {} on this node.", child.label()),
        )
    };
    if !plain_segment(id) {
        return Err(missing());
    }
    let (status, body) =
        state.api.internal_call(Method::GET, &format!("{}/{id}", child.api()), None).await;
    if status == StatusCode::NOT_FOUND {
        return Err(missing());
    }
    if !status.is_success() {
        return Err(Outcome::refused(node_uuid, status, fault(&body)));
    }
    if body["node_uuid"].as_str() != Some(node_uuid) {
        return Err(missing());
    }
    Ok(body)
}

/// Saves the edit form of a port, connector or target.
pub(super) async fn edit_child(
    State(state): State<AdminState>,
    Path((node, segment, id)): Path<(String, String, String)>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        let (child, uuid) = match child_of(&state, &node, &segment).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let current = match current_child(&state, &uuid, child, &id).await {
            Ok(current) => current,
            Err(refused) => return refused,
        };
        let desired = match child.document(&form) {
            Ok(doc) => doc,
            Err(e) => {
                return Outcome::refused(
                    &uuid,
                    StatusCode::BAD_REQUEST,
                    format!("{}: {e}", child.label()),
                );
            }
        };
        let patch = patch_between(&current, &desired, &[]);
        if patch.is_empty() {
            return Outcome::on_node(&uuid, "Nothing changed.");
        }
        let answer = state
            .api
            .internal_call(
                Method::PATCH,
                &format!("{}/{id}", child.api()),
                Some(&Value::Array(patch)),
            )
            .await;
        Outcome::of_answer(
            &uuid,
            answer,
            format!("{} saved.", capitalized(child.label())),
            Some(child.label()),
        )
    })
    .await
}

/// Deletes a port, connector or target of a node.
pub(super) async fn delete_child(
    State(state): State<AdminState>,
    Path((node, segment, id)): Path<(String, String, String)>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    with_session(&state, &headers, &form, |_| async {
        let (child, uuid) = match child_of(&state, &node, &segment).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        if let Err(refused) = current_child(&state, &uuid, child, &id).await {
            return refused;
        }
        let answer =
            state.api.internal_call(Method::DELETE, &format!("{}/{id}", child.api()), None).await;
        Outcome::of_answer(
            &uuid,
            answer,
            format!("{} deleted.", capitalized(child.label())),
            Some(child.label()),
        )
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
    fn a_patch_holds_only_what_changed() {
        let current = json!({"name": "n1", "driver": "fake", "storage_interface": "cinder",
                             "properties": {"capabilities": "iscsi_boot:true", "cpus": 4},
                             "driver_info": {"ipmi_password": "******"}});
        let edited = form(&[
            ("name", "n2"),
            ("driver", "fake"),
            ("storage_interface", ""),
            ("capabilities", "iscsi_boot:true"),
            ("driver_info", r#"{"ipmi_password": "******"}"#),
        ]);
        let desired = node_document(&edited, Some(&current)).unwrap();
        let patch = patch_between(&current, &desired, &["storage_interface"]);
        assert_eq!(
            patch,
            vec![
                json!({"op": "add", "path": "/name", "value": "n2"}),
                json!({"op": "remove", "path": "/storage_interface"}),
            ]
        );
        // Capabilities edited alone: the other properties stay.
        let edited = form(&[("name", "n1"), ("driver", "fake"), ("storage_interface", "cinder")]);
        let desired = node_document(&edited, Some(&current)).unwrap();
        assert_eq!(
            patch_between(&current, &desired, &["storage_interface"]),
            vec![json!({"op": "add", "path": "/properties", "value": {"cpus": 4}})]
        );
    }

    #[test]
    fn text_areas_must_hold_json_objects() {
        assert!(json_object(&form(&[("driver_info", "[1]")]), "driver_info").is_err());
        assert!(json_object(&form(&[("driver_info", "{")]), "driver_info").is_err());
        assert_eq!(json_object(&form(&[("driver_info", " ")]), "driver_info").unwrap(), Map::new());
        let target = Child::Target
            .document(&form(&[("volume_type", "iscsi"), ("boot_index", "x"), ("properties", "{}")]))
            .unwrap();
        assert_eq!(target["boot_index"], json!("x"), "the API names a bad boot index");
        assert_eq!(Child::from_segment("nodes"), None);
    }
}
