//! The admin forms: create a node (with one port, an iqn connector and an iSCSI target), power,
//! provision (manage, provide, deploy, undeploy) and validate. Each goes through the REST API's
//! own routes ([`ApiState::internal_call`](crate::api::ApiState)), so a form writes exactly what
//! the API would accept: the `inventory` parsers, `db::api` and the conductor.

use std::collections::HashMap;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Map, Value, json};

use super::node::render_node;
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

pub(super) async fn power(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let s = match checked_post(&state, &headers, &form) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    if node.contains('/') {
        return render_node(&state, &s, &node, StatusCode::NOT_FOUND, None, None).await;
    }
    let target = field(&form, "target");
    let (status, body) = state
        .api
        .internal_call(
            Method::PUT,
            &format!("/v1/nodes/{node}/states/power"),
            Some(&json!({ "target": target })),
        )
        .await;
    if status.is_success() {
        render_node(
            &state,
            &s,
            &node,
            StatusCode::OK,
            Some(format!("Power action \"{target}\" started.")),
            None,
        )
        .await
    } else {
        render_node(&state, &s, &node, status, None, Some(fault(&body))).await
    }
}

pub(super) async fn provision(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let s = match checked_post(&state, &headers, &form) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    if node.contains('/') {
        return render_node(&state, &s, &node, StatusCode::NOT_FOUND, None, None).await;
    }
    let target = field(&form, "target");
    let (status, body) = state
        .api
        .internal_call(
            Method::PUT,
            &format!("/v1/nodes/{node}/states/provision"),
            Some(&json!({ "target": target })),
        )
        .await;
    if status.is_success() {
        render_node(
            &state,
            &s,
            &node,
            StatusCode::OK,
            Some(format!("Provision action \"{target}\" started.")),
            None,
        )
        .await
    } else {
        render_node(&state, &s, &node, status, None, Some(fault(&body))).await
    }
}

pub(super) async fn validate(
    State(state): State<AdminState>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let s = match checked_post(&state, &headers, &form) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    if node.contains('/') {
        return render_node(&state, &s, &node, StatusCode::NOT_FOUND, None, None).await;
    }
    let (status, body) =
        state.api.internal_call(Method::GET, &format!("/v1/nodes/{node}/validate"), None).await;
    if !status.is_success() {
        return render_node(&state, &s, &node, status, None, Some(fault(&body))).await;
    }
    let mut lines = Vec::new();
    for interface in ["boot", "deploy", "power", "storage"] {
        let check = &body[interface];
        match check["result"].as_bool() {
            Some(true) => lines.push(format!("{interface}: ok")),
            _ => lines
                .push(format!("{interface}: {}", check["reason"].as_str().unwrap_or("not valid"))),
        }
    }
    render_node(
        &state,
        &s,
        &node,
        StatusCode::OK,
        Some(format!("Validation: {}", lines.join("; "))),
        None,
    )
    .await
}

/// Creates a node with one port, an iqn connector and an iSCSI boot target; all or nothing
/// (a refused child deletes the node just created).
pub(super) async fn create_node(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let s = match checked_post(&state, &headers, &form) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let mut node = Map::new();
    node.insert("name".into(), json!(field(&form, "name")));
    node.insert(
        "driver".into(),
        json!(if field(&form, "driver").is_empty() { "fake" } else { field(&form, "driver") }),
    );
    if !field(&form, "storage_interface").is_empty() {
        node.insert("storage_interface".into(), json!(field(&form, "storage_interface")));
    }
    if !field(&form, "capabilities").is_empty() {
        node.insert("properties".into(), json!({"capabilities": field(&form, "capabilities")}));
    }
    let refused = |message: String| {
        super::render_nodes(&state, &s, StatusCode::BAD_REQUEST, None, Some(message), None)
    };
    let (status, created) =
        state.api.internal_call(Method::POST, "/v1/nodes", Some(&Value::Object(node))).await;
    if !status.is_success() {
        return refused(format!("node: {}", fault(&created))).await;
    }
    let Some(uuid) = created["uuid"].as_str().map(str::to_owned) else {
        return refused("node: no uuid in the answer".into()).await;
    };
    let mut children = Vec::new();
    if !field(&form, "mac").is_empty() {
        children.push((
            "port",
            "/v1/ports",
            json!({"node_uuid": uuid, "address": field(&form, "mac")}),
        ));
    }
    if !field(&form, "connector_iqn").is_empty() {
        children.push((
            "connector",
            "/v1/volume/connectors",
            json!({"node_uuid": uuid, "type": "iqn", "connector_id": field(&form, "connector_iqn")}),
        ));
    }
    if !field(&form, "volume_id").is_empty() {
        let mut properties = Map::new();
        for (key, name) in [
            ("target_iqn", "target_iqn"),
            ("target_portal", "target_portal"),
            ("auth_username", "auth_username"),
            ("auth_password", "auth_password"),
        ] {
            if !field(&form, name).is_empty() {
                properties.insert(key.into(), json!(field(&form, name)));
            }
        }
        if !field(&form, "target_lun").is_empty() {
            match field(&form, "target_lun").parse::<u64>() {
                Ok(lun) => properties.insert("target_lun".into(), json!(lun)),
                Err(_) => properties.insert("target_lun".into(), json!(field(&form, "target_lun"))),
            };
        }
        if properties.contains_key("auth_username") {
            properties.insert("auth_method".into(), json!("CHAP"));
        }
        children.push((
            "target",
            "/v1/volume/targets",
            json!({"node_uuid": uuid, "volume_type": "iscsi", "boot_index": 0,
                   "volume_id": field(&form, "volume_id"), "properties": properties}),
        ));
    }
    for (what, path, body) in children {
        let (status, answer) = state.api.internal_call(Method::POST, path, Some(&body)).await;
        if !status.is_success() {
            let _ =
                state.api.internal_call(Method::DELETE, &format!("/v1/nodes/{uuid}"), None).await;
            return refused(format!("{what}: {} (the node was not created)", fault(&answer))).await;
        }
    }
    Redirect::to(&format!("/admin/nodes/{uuid}")).into_response()
}
