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
use bootvol_core::deploy::{CallbackReport, Caller};

/// Why the control plane refused a deploy request, as the boot edge answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeployError {
    /// Not allowed (the caller is not the node, the token is wrong or spent): 403.
    Refused(String),
    /// No such node, or no deployment waiting: 404.
    NotFound(String),
    /// Another action holds the node: 409.
    Locked(String),
    /// bootvol's own failure (the database, say): 500, logged every time.
    Failed(String),
}

impl std::fmt::Display for DeployError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeployError::Refused(m)
            | DeployError::NotFound(m)
            | DeployError::Locked(m)
            | DeployError::Failed(m) => f.write_str(m),
        }
    }
}

/// What the deploy endpoints ask of the control plane (the conductor implements it, through the
/// binary's wiring): this crate cannot name the conductor, its database or its BMCs.
#[async_trait::async_trait]
pub trait DeployBackend: Send + Sync + std::fmt::Debug {
    /// The deployment's one-time token, to its first caller that is the node.
    async fn token(&self, node_uuid: &str, caller: Caller) -> Result<String, DeployError>;
    /// The ramdisk's report, with the token.
    async fn callback(
        &self,
        node_uuid: &str,
        token: &str,
        caller: Caller,
        report: CallbackReport,
    ) -> Result<(), DeployError>;
    /// The deployment's config drive, with the token.
    async fn configdrive(
        &self,
        node_uuid: &str,
        token: &str,
        caller: Caller,
    ) -> Result<Vec<u8>, DeployError>;
    /// The node's UUID and name, for the refusal event; none when there is no such node.
    async fn node_names(&self, node: &str) -> Option<(String, String)>;
}

fn error_response(e: DeployError) -> Response {
    let status = match &e {
        DeployError::Refused(_) => StatusCode::FORBIDDEN,
        DeployError::NotFound(_) => StatusCode::NOT_FOUND,
        DeployError::Locked(_) => StatusCode::CONFLICT,
        DeployError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
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
    e: DeployError,
) -> Response {
    let client_refused =
        matches!(e, DeployError::Refused(_) | DeployError::NotFound(_) | DeployError::Locked(_));
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
    if let Some(backend) = &state.deploy
        && let Some((uuid, name)) = backend.node_names(node).await
    {
        state.access.record_deploy_refused((&uuid, &name), caller, endpoint, reason, count);
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
    let Some(backend) = &state.deploy else {
        return (StatusCode::NOT_FOUND, "no deployments here\n").into_response();
    };
    let caller = state.access.caller(client.ip()).await;
    match backend.token(&node, caller).await {
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
    let Some(backend) = &state.deploy else {
        return (StatusCode::NOT_FOUND, "no deployments here\n").into_response();
    };
    let token = token_header(&headers);
    let (status, disk) = (report.status.clone(), report.disk.clone());
    let caller = state.access.caller(client.ip()).await;
    match backend.callback(&node, token, caller, report).await {
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
    let Some(backend) = &state.deploy else {
        return (StatusCode::NOT_FOUND, "no deployments here\n").into_response();
    };
    let caller = state.access.caller(client.ip()).await;
    match backend.configdrive(&node, token_header(&headers), caller).await {
        Ok(bytes) => ([(axum::http::header::CONTENT_TYPE, "application/octet-stream")], bytes)
            .into_response(),
        Err(e) => refused(&state, &node, caller, "configdrive", e).await,
    }
}
