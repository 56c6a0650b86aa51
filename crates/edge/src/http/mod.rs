//! The boot HTTP listener, the nodes' side of HTTP. It is one of the HTTP front ends (with `api`
//! and `admin`); `app` serves them, and only these know axum (tests/it/tidy.rs checks it).
//!
//! `GET /boot.ipxe` (the generic script), `GET /boot/<mac>.ipxe` (a node's own script, from the
//! in-memory snapshot), `GET`/`HEAD /files/<path>` (kernels, ramdisks, images, with Range),
//! `GET`/`HEAD /ipxe/<path>` (the iPXE binaries of `[tftp] root`, for UEFI HTTP Boot);
//! `GET /report/<mac>?stage=...` (a node's script reports its progress: `report`);
//! and the deploy ramdisk's endpoints (`deploy`). The boot handlers read the current snapshot and
//! never wait on SQLite, Cinder or a BMC. A script that carries a secret, the deploy token, the
//! config drive and the call-back go only to the node itself (`script_access`).
//!
//! The two script routes and the report route, which a boot storm hits, are matched by hand in
//! `dispatch` and
//! answered without axum's router, extractors or middleware; the other routes go through an
//! axum `Router`. Every answer is counted in `metrics` there.

mod boot;
mod deploy;
pub use deploy::{DeployBackend, DeployError};
mod files;
pub mod listener;
pub mod report;
pub use report::{BootReports, ReportSink};
pub mod tls;

use std::sync::Arc;

use arc_swap::ArcSwap;
use std::time::Instant;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::net::SocketAddr;
use tower::ServiceExt;

use bootvol_core::boot::BootSnapshot;
use bootvol_core::files::FileRoot;
use bootvol_runtime::metrics::{Metrics, Route};

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct BootState {
    pub snapshot: Arc<ArcSwap<BootSnapshot>>,
    /// `[http] files_root`, when it exists.
    pub files: Option<FileRoot>,
    /// `[tftp] root`, when it exists: the iPXE binaries, also over HTTP.
    pub ipxe: Option<FileRoot>,
    /// With `[secure_boot]`: the EFI binaries of `ipxe`, signed.
    pub signed: Option<Arc<crate::secure_boot::SignedBinaries>>,
    /// The deploy ramdisk's token, config drive and call-back (scenario 4): the control
    /// plane's, through the binary's wiring.
    pub deploy: Option<Arc<dyn DeployBackend>>,
    /// Recent boot requests, for the admin page.
    pub recent: Arc<bootvol_core::recent::RecentBoots>,
    /// Who may fetch secrets (`[boot] script_secrets`).
    pub access: Arc<crate::script_access::ScriptAccess>,
    /// Requests and scripts are counted here (atomics only).
    pub metrics: Arc<Metrics>,
    /// Where nodes' boot reports are recorded (none: `/report/` answers 404).
    pub reports: Option<Arc<BootReports>>,
}

/// The boot listener's routes.
pub fn router(state: BootState) -> Router {
    let state = Arc::new(state);
    let others = Router::new()
        .route("/files/{*path}", get(files::serve).head(files::serve))
        .route("/ipxe/{*path}", get(files::ipxe).head(files::ipxe))
        .route("/deploy/{node}/token", axum::routing::post(deploy::token))
        .route("/deploy/{node}/callback", axum::routing::post(deploy::callback))
        .route("/deploy/{node}/configdrive", get(deploy::configdrive))
        // Shared, not cloned field by field: every request's extractor clones the state.
        .with_state(Arc::clone(&state));
    Router::new().fallback(dispatch).with_state(Dispatch { state, others })
}

/// The boot listener's state and the router of its less travelled routes.
#[derive(Clone)]
struct Dispatch {
    state: Arc<BootState>,
    others: Router,
}

/// Where a request goes, by its path (and the metrics label).
fn route_of(path: &str) -> Route {
    if path == "/boot.ipxe" {
        Route::Generic
    } else if path.starts_with("/boot/") {
        Route::Script
    } else if path.starts_with("/files/") {
        Route::Files
    } else if path.starts_with("/ipxe/") {
        Route::Ipxe
    } else if path.starts_with("/deploy/") {
        Route::Deploy
    } else if path.starts_with("/report/") {
        Route::Report
    } else {
        Route::Other
    }
}

/// Answers a request: the script routes here, the others through `others`; counts each.
async fn dispatch(State(d): State<Dispatch>, request: Request) -> Response {
    let started = Instant::now();
    let route = route_of(request.uri().path());
    let response = match route {
        Route::Generic | Route::Script | Route::Report => {
            // Only what is Sync crosses the await (the body is not).
            let client = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
            script(&d.state, route, request.method(), client, request.uri()).await
        }
        _ => match d.others.oneshot(request).await {
            Ok(response) => response,
            Err(infallible) => match infallible {},
        },
    };
    d.state.metrics.http_request(route, response.status().as_u16(), started.elapsed());
    response
}

/// `GET` (or `HEAD`) `/boot.ipxe`, `/boot/<file>` and `/report/<mac>`, as axum's router answered them: a path
/// with more segments is 404, another method 405.
async fn script(
    state: &BootState,
    route: Route,
    method: &Method,
    client: Option<SocketAddr>,
    uri: &axum::http::Uri,
) -> Response {
    if !matches!(*method, Method::GET | Method::HEAD) {
        let allow = HeaderValue::from_static("GET,HEAD");
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, allow)]).into_response();
    }
    // The listener always attaches the peer's address.
    let Some(client) = client else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if route == Route::Generic {
        return boot::generic(state, client);
    }
    if route == Route::Report {
        return match uri.path().strip_prefix("/report/").map(percent_decoded) {
            Some(Some(mac)) if !mac.is_empty() && !mac.contains('/') => {
                report::report(state, client, &mac, uri.query())
            }
            Some(None) => StatusCode::BAD_REQUEST.into_response(),
            _ => StatusCode::NOT_FOUND.into_response(),
        };
    }
    match uri.path().strip_prefix("/boot/") {
        Some(file) if !file.is_empty() && !file.contains('/') => match percent_decoded(file) {
            Some(file) => boot::per_mac(state, client, &file).await,
            None => StatusCode::BAD_REQUEST.into_response(),
        },
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A path segment with `%XX` escapes decoded (as axum's `Path` does); `None` when that is not
/// UTF-8. Borrowed when there is nothing to decode, which is always so for a MAC.
fn percent_decoded(segment: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !segment.contains('%') {
        return Some(std::borrow::Cow::Borrowed(segment));
    }
    percent_encoding::percent_decode_str(segment).decode_utf8().ok()
}
