//! Boot script handlers: answers come from the snapshot, already rendered.

use std::net::SocketAddr;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::BootState;
use bootvol_core::model::MacAddr;
use bootvol_core::recent::BootResult;
use bootvol_runtime::logging::Peer;
use bootvol_runtime::metrics::{ScriptKind, Transport};

const SCRIPT_TYPE: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

fn script_response(status: StatusCode, body: Bytes) -> Response {
    (status, [(header::CONTENT_TYPE, SCRIPT_TYPE)], body).into_response()
}

/// `GET /boot.ipxe`: the script every iPXE client chains to first.
/// Fetched from an address whose neighbour entry is a node's MAC, it is a sign that the node
/// starts a boot (`script_access`).
pub(super) fn generic(state: &BootState, client: SocketAddr) -> Response {
    let snapshot = state.snapshot.load();
    state.access.boot_file_fetched(
        client.ip(),
        |mac| snapshot.script(mac).and_then(|s| s.node_uuid.clone()),
        "http",
    );
    tracing::info!(client = %Peer(client), path = "/boot.ipxe", "generic boot script");
    state.recent.record("http", client.ip(), None, None, BootResult::Generic);
    state.metrics.script(ScriptKind::Generic, Transport::Http);
    script_response(StatusCode::OK, snapshot.generic_script().clone())
}

/// `GET /boot/<mac>.ipxe` (any common MAC form) and `GET /boot/default.ipxe`. An unknown MAC
/// answers 404 with the default script as body, so the generic script tries the next NIC; so
/// does a script that carries a secret asked for by a client that is not its node.
pub(super) async fn per_mac(state: &BootState, client: SocketAddr, file: &str) -> Response {
    let snapshot = state.snapshot.load_full();
    let Some(stem) = file.strip_suffix(".ipxe") else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    if stem == "default" {
        tracing::info!(client = %Peer(client), mac = "-", node = "-", scenario = "default", "boot script");
        state.recent.record("http", client.ip(), None, None, BootResult::DefaultAsked);
        state.metrics.script(ScriptKind::Default, Transport::Http);
        return script_response(StatusCode::OK, snapshot.default_script().text.clone());
    }
    let mac: MacAddr = match stem.parse() {
        Ok(mac) => mac,
        Err(_) => return (StatusCode::BAD_REQUEST, "not a MAC address\n").into_response(),
    };
    let script = snapshot.script(mac);
    let refused = match script {
        Some(script) => state.access.allows(script, mac, client.ip(), "http").await.err(),
        None => None,
    };
    match (script, refused) {
        (Some(script), Some(why)) => {
            let why = BootResult::Refused(why);
            state.recent.record("http", client.ip(), Some(mac), script.node.as_deref(), why);
            state.metrics.script(ScriptKind::Refused, Transport::Http);
            script_response(StatusCode::NOT_FOUND, snapshot.default_script().text.clone())
        }
        (Some(script), None) => {
            let node = script.node.as_deref().unwrap_or("-");
            let result = script.result();
            state.recent.record("http", client.ip(), Some(mac), script.node.as_deref(), result);
            state.metrics.script(ScriptKind::Node, Transport::Http);
            match &script.problem {
                None => {
                    tracing::info!(client = %Peer(client), %mac, node, scenario = script.scenario, "boot script")
                }
                Some(problem) => {
                    tracing::warn!(client = %Peer(client), %mac, node, scenario = script.scenario, problem, "boot script")
                }
            }
            script_response(StatusCode::OK, script.text.clone())
        }
        (None, _) => {
            tracing::info!(client = %Peer(client), %mac, node = "-", scenario = "unknown", "boot script: unknown MAC");
            state.recent.record("http", client.ip(), Some(mac), None, BootResult::UnknownMac);
            state.metrics.script(ScriptKind::Unknown, Transport::Http);
            script_response(StatusCode::NOT_FOUND, snapshot.default_script().text.clone())
        }
    }
}
