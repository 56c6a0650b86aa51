//! The deploy ramdisk's endpoints (scenario 4): its config drive and its call-back. Both need
//! the deployment's one-time token.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Path, Query, State};
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

/// `POST /deploy/<node uuid>/callback` with `X-Bootvol-Token`.
pub(super) async fn callback(
    State(state): State<BootState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Path(node): Path<String>,
    headers: HeaderMap,
    Json(report): Json<CallbackReport>,
) -> Response {
    let Some(conductor) = &state.conductor else {
        return (StatusCode::NOT_FOUND, "no conductor\n").into_response();
    };
    let token = headers.get("X-Bootvol-Token").and_then(|v| v.to_str().ok()).unwrap_or("");
    tracing::info!(%client, node, status = report.status, disk = report.disk.as_deref().unwrap_or("-"), "deploy call-back");
    match conductor.deploy_callback(&node, token, report).await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => {
            tracing::warn!(%client, node, error = %e, "deploy call-back refused");
            error_response(e)
        }
    }
}

/// `GET /deploy/<node uuid>/configdrive?token=...`.
pub(super) async fn configdrive(
    State(state): State<BootState>,
    Path(node): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(conductor) = &state.conductor else {
        return (StatusCode::NOT_FOUND, "no conductor\n").into_response();
    };
    let token = query.get("token").map(String::as_str).unwrap_or("");
    match conductor.configdrive(&node, token).await {
        Ok(bytes) => ([(axum::http::header::CONTENT_TYPE, "application/octet-stream")], bytes)
            .into_response(),
        Err(e) => error_response(e),
    }
}
