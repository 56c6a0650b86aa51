//! The deploy ramdisk's endpoints (scenario 4): its one-time token (handed out once), its config
//! drive and its call-back (both need the token, in `X-Bootvol-Token`). Each answers only a
//! client that is the node (`script_access`: the neighbour check, unless `[boot]
//! script_secrets = "any"`).

use std::sync::Arc;

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::BootState;
use crate::conductor::{CallbackReport, ConductorError};

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
        Err(e) => {
            tracing::warn!(%client, node = ?node, caller = ?caller, error = ?e.to_string(), "deploy token refused");
            error_response(e)
        }
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
    tracing::info!(%client, node = ?node, status = ?report.status, disk = ?report.disk.as_deref().unwrap_or("-"), "deploy call-back");
    let caller = state.access.caller(client.ip()).await;
    match conductor.deploy_callback(&node, token, caller, report).await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => {
            tracing::warn!(%client, node = ?node, error = ?e.to_string(), "deploy call-back refused");
            error_response(e)
        }
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
        Err(e) => {
            tracing::warn!(%client, node = ?node, caller = ?caller, error = ?e.to_string(), "config drive refused");
            error_response(e)
        }
    }
}
