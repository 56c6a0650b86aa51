//! The deploy ramdisk's endpoints (scenario 4): its one-time token (handed out once), its config
//! drive and its call-back (both need the token, in `X-Bootvol-Token`). Each answers only a
//! client that is the node (`script_access`: the neighbour check, unless `[boot]
//! script_secrets = "any"`).
//!
//! A refusal (403, 404, 409) is logged and recorded as the event `baremetal.node.deploy_refused`
//! (client, client_mac, endpoint, reason, count) at most once per client address per minute
//! (`ScriptAccess::deploy_refusal_due`), as script refusals are, so a prober floods neither the
//! log nor the database; the conductor's own reports (a second token claimant's conflict) are
//! its own and not limited here.

use std::sync::Arc;

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::BootState;
use crate::conductor::{CallbackReport, Caller, ConductorError};

fn error_response(e: ConductorError) -> Response {
    let status = match &e {
        ConductorError::Refused(_) => StatusCode::FORBIDDEN,
        ConductorError::NotFound(_) => StatusCode::NOT_FOUND,
        ConductorError::Locked(_) => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, format!("{e}\n")).into_response()
}

fn token_header(headers: &HeaderMap) -> &str {
    headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("")
}

const TOKEN_HEADER: &str = "X-Bootvol-Token";

/// The answer to a refused deploy request, reported the limited way (see the module's header);
/// an error of bootvol's own (500) is logged every time.
async fn refused(
    state: &BootState,
    node: &str,
    caller: Caller,
    endpoint: &'static str,
    e: ConductorError,
) -> Response {
    let client_refused = matches!(
        e,
        ConductorError::Refused(_) | ConductorError::NotFound(_) | ConductorError::Locked(_)
    );
    let reason = e.to_string();
    if !client_refused {
        tracing::error!(client = %caller.address, node = ?node, endpoint, error = ?reason, "deploy request failed");
        return error_response(e);
    }
    let Some(count) = state.access.deploy_refusal_due(caller.address) else {
        return error_response(e);
    };
    let shown_mac = caller.mac.map_or_else(|| "-".to_owned(), |m| m.to_string());
    tracing::warn!(client = %caller.address, client_mac = shown_mac, node = ?node, endpoint, count,
        reason = ?reason, "deploy request refused");
    if let Some(conductor) = &state.conductor
        && let Ok(record) = conductor.load(node).await
    {
        state.access.record_deploy_refused(
            (&record.node.uuid, &record.node.name),
            caller,
            endpoint,
            reason,
            count,
        );
    }
    error_response(e)
}

/// `POST /deploy/<node uuid>/token`: 200 with the token to the first caller that is the node,
/// while its deployment waits for the call-back; 403 afterwards and to anyone else.
pub(super) async fn token(
    State(state): State<Arc<BootState>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(node): Path<String>,
) -> Response {
    let Some(conductor) = &state.conductor else {
        return (StatusCode::NOT_FOUND, "no conductor\n").into_response();
    };
    let caller = state.access.caller(client.ip()).await;
    match conductor.deploy_token(&node, caller).await {
        Ok(token) => {
            tracing::info!(%client, node = ?node, "deploy token handed out");
            (StatusCode::OK, token).into_response()
        }
        Err(e) => refused(&state, &node, caller, "token", e).await,
    }
}

/// `POST /deploy/<node uuid>/callback` with `X-Bootvol-Token`.
pub(super) async fn callback(
    State(state): State<Arc<BootState>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Json(report): Json<CallbackReport>,
) -> Response {
    let Some(conductor) = &state.conductor else {
        return (StatusCode::NOT_FOUND, "no conductor\n").into_response();
    };
    let token = token_header(&headers);
    let (status, disk) = (report.status.clone(), report.disk.clone());
    let caller = state.access.caller(client.ip()).await;
    match conductor.deploy_callback(&node, token, caller, report).await {
        Ok(()) => {
            tracing::info!(%client, node = ?node, status = ?status, disk = ?disk.as_deref().unwrap_or("-"), "deploy call-back");
            (StatusCode::OK, "ok\n").into_response()
        }
        Err(e) => refused(&state, &node, caller, "callback", e).await,
    }
}

/// `GET /deploy/<node uuid>/configdrive` with `X-Bootvol-Token`.
pub(super) async fn configdrive(
    State(state): State<Arc<BootState>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(node): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(conductor) = &state.conductor else {
        return (StatusCode::NOT_FOUND, "no conductor\n").into_response();
    };
    let caller = state.access.caller(client.ip()).await;
    match conductor.configdrive(&node, token_header(&headers), caller).await {
        Ok(bytes) => ([(axum::http::header::CONTENT_TYPE, "application/octet-stream")], bytes)
            .into_response(),
        Err(e) => refused(&state, &node, caller, "configdrive", e).await,
    }
}
