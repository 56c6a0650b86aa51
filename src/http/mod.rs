//! The boot HTTP listener, the nodes' side of HTTP. It is one of the HTTP front ends (with `api`
//! and `admin`); `app` serves them, and only these know axum (tests/it/tidy.rs checks it).
//!
//! `GET /boot.ipxe` (the generic script), `GET /boot/<mac>.ipxe` (a node's own script, from the
//! in-memory snapshot), `GET`/`HEAD /files/<path>` (kernels, ramdisks, images, with Range),
//! `GET`/`HEAD /ipxe/<path>` (the iPXE binaries of `[tftp] root`, for UEFI HTTP Boot);
//! and the deploy ramdisk's endpoints (`deploy`). The boot handlers read the current snapshot and
//! never wait on SQLite, Cinder or a BMC. A script that carries a secret, the deploy token, the
//! config drive and the call-back go only to the node itself (`script_access`).

mod boot;
mod deploy;
mod files;
pub mod listener;

use std::sync::Arc;

use arc_swap::ArcSwap;
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;

use crate::boot::BootSnapshot;
use crate::files::FileRoot;
use crate::metrics::{Metrics, Route};

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct BootState {
    pub snapshot: Arc<ArcSwap<BootSnapshot>>,
    /// `[http] files_root`, when it exists.
    pub files: Option<FileRoot>,
    /// `[tftp] root`, when it exists: the iPXE binaries, also over HTTP.
    pub ipxe: Option<FileRoot>,
    /// For the deploy ramdisk's call-back (scenario 4).
    pub conductor: Option<crate::conductor::Conductor>,
    /// Recent boot requests, for the admin page.
    pub recent: Arc<crate::recent::RecentBoots>,
    /// Who may fetch secrets (`[boot] script_secrets`).
    pub access: Arc<crate::script_access::ScriptAccess>,
    /// Requests and scripts are counted here (atomics only).
    pub metrics: Arc<Metrics>,
}

/// The boot listener's routes.
pub fn router(state: BootState) -> Router {
    Router::new()
        .route("/boot.ipxe", get(boot::generic))
        .route("/boot/{file}", get(boot::per_mac))
        .route("/files/{*path}", get(files::serve).head(files::serve))
        .route("/ipxe/{*path}", get(files::ipxe).head(files::ipxe))
        .route("/deploy/{node}/token", axum::routing::post(deploy::token))
        .route("/deploy/{node}/callback", axum::routing::post(deploy::callback))
        .route("/deploy/{node}/configdrive", get(deploy::configdrive))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state.metrics), count))
        // Shared, not cloned field by field: every request's extractor clones the state.
        .with_state(Arc::new(state))
}

/// Counts every request by route and status, with the time to its response's head (a file's
/// body streams after).
async fn count(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let route = if path == "/boot.ipxe" {
        Route::Generic
    } else if path.starts_with("/boot/") {
        Route::Script
    } else if path.starts_with("/files/") {
        Route::Files
    } else if path.starts_with("/ipxe/") {
        Route::Ipxe
    } else if path.starts_with("/deploy/") {
        Route::Deploy
    } else {
        Route::Other
    };
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.http_request(route, response.status().as_u16(), started.elapsed());
    response
}
