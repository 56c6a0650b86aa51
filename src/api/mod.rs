//! The Ironic-compatible REST API (`[api] listen`, served by `bootvol serve`): the only module
//! that knows the API's JSON.
//!
//! A subset of Ironic's v1 API that the real `baremetal` CLI, `openstack baremetal` and
//! openstacksdk drive unchanged: the version documents, microversion negotiation (1.1 to
//! [`MAX_MINOR`]; volume endpoints from 1.32, `storage_interface` from 1.33), nodes, ports,
//! volume connectors and targets, chassis, port groups, power and provision actions (answered 202, run by the
//! conductor in the background), validation and the boot device. Errors have Ironic's shape;
//! every secret is masked; `http_basic` (bcrypt htpasswd) or `noauth`.
//!
//! Every write is parsed by the `inventory` parsers (the same checks as an inventory file) and
//! handed to the node service ([`bootvol_control::nodes`]), which owns the edit rules, secrets and events;
//! its typed errors become Ironic's statuses here. `/healthz`, `/readyz` and `/metrics` are
//! answered without authentication (`public`). This module knows nothing of the admin page
//! (`app` merges the two routers).

mod actions;
mod auth;
pub mod htpasswd;
mod ironic;
mod listing;
mod public;
mod resources;
mod versions;

pub use resources::check_node_patch;

use auth::{
    AUTH_FAILURES, AUTH_WINDOW, Auth, FileStamp, authenticate, dummy_hash, file_stamp, load_auth,
};
pub(crate) use listing::{collection, page_limit, paged, parse_fields, select};

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use bootvol_control::conductor::Conductor;
use bootvol_control::nodes::{NodeError, NodeService};
use bootvol_core::config::{ApiAuthStrategy, Config};

/// The lowest microversion served (and the one a request without a version header gets).
pub(crate) const MIN_MINOR: u32 = 1;
/// The highest microversion served.
pub(crate) const MAX_MINOR: u32 = 38;
/// Volume connectors and targets appear at this microversion.
pub(crate) const VOLUME_MINOR: u32 = 32;
/// `storage_interface` appears at this microversion.
pub const STORAGE_INTERFACE_MINOR: u32 = 33;
/// The largest request body accepted.
pub(crate) const MAX_BODY: usize = 1024 * 1024;

const MIN_HEADER: &str = "X-OpenStack-Ironic-API-Minimum-Version";
const MAX_HEADER: &str = "X-OpenStack-Ironic-API-Maximum-Version";
const VERSION_HEADER: &str = "X-OpenStack-Ironic-API-Version";
const REQUEST_ID_HEADER: &str = "X-OpenStack-Request-Id";

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<Inner>,
}

struct Inner {
    conductor: Conductor,
    nodes: NodeService,
    config: Arc<Config>,
    /// Replaced whole when the admin page sets a password, or when the file changed on disk
    /// (`ApiState::auth`).
    auth: arc_swap::ArcSwap<Auth>,
    /// The htpasswd file as it was when `auth` was read: modification time, size and inode.
    auth_file: Mutex<Option<FileStamp>>,
    recent: Arc<bootvol_core::recent::RecentBoots>,
    /// bcrypt checks running at once: at most half the cores (at least one), whatever the
    /// number of clients and user names tried, so password guessing never takes the CPU the
    /// boots need (`ApiState::bcrypt`).
    bcrypt_gate: crate::limiter::CheckGate,
    /// Failed authentications per (client address, user).
    auth_failures: crate::limiter::LoginLimiter,
    /// The base of every link in an answer (`http://host:port`): `[api] public_endpoint`, else
    /// the listener's bound address. Never the request's `Host` header.
    endpoint: String,
    /// What `/metrics` and `/readyz` answer from.
    metrics: Arc<bootvol_runtime::metrics::Metrics>,
    /// The boot snapshot the boot edge serves from (the admin page shows a node's script as
    /// served).
    snapshot: Arc<arc_swap::ArcSwap<bootvol_core::boot::BootSnapshot>>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").field("auth", &self.inner.auth.load()).finish()
    }
}

impl ApiState {
    /// The API over `conductor`, answering on `local` (the bound listener), showing the admin
    /// page the boot requests `recent` holds and the scripts `snapshot` serves. With `http_basic`, the user file is read now (a
    /// file that cannot be read is logged and every authenticated request is refused).
    pub fn new(
        config: Arc<Config>,
        conductor: Conductor,
        recent: Arc<bootvol_core::recent::RecentBoots>,
        local: std::net::SocketAddr,
        metrics: Arc<bootvol_runtime::metrics::Metrics>,
        snapshot: Arc<arc_swap::ArcSwap<bootvol_core::boot::BootSnapshot>>,
    ) -> ApiState {
        let stamp = file_stamp(&config);
        let first = load_auth(&config);
        if let Auth::Basic { users, dummy, .. } = &first {
            dummy.get_or_init(|| dummy_hash(users)); // at start, as before: no first-use delay
        }
        let auth = arc_swap::ArcSwap::from_pointee(first);
        let endpoint = if config.api.public_endpoint.is_empty() {
            if local.ip().is_unspecified() {
                tracing::warn!(listen = %local, "[api] listens on a wildcard address and public_endpoint is not set: links in answers name the wildcard address");
            }
            format!("http://{local}")
        } else {
            config.api.public_endpoint.trim_end_matches('/').to_owned()
        };
        let nodes = NodeService::new(conductor.clone());
        let auth_failures = crate::limiter::LoginLimiter::new(AUTH_FAILURES, AUTH_WINDOW);
        ApiState {
            inner: Arc::new(Inner {
                conductor,
                nodes,
                config,
                auth,
                auth_file: Mutex::new(stamp),
                bcrypt_gate: crate::limiter::CheckGate::half_the_cores(BCRYPT_WAIT),
                recent,
                auth_failures,
                endpoint,
                metrics,
                snapshot,
            }),
        }
    }

    /// The appliance's counters (the admin page's boot activity).
    pub(crate) fn metrics(&self) -> &Arc<bootvol_runtime::metrics::Metrics> {
        &self.inner.metrics
    }

    /// The boot snapshot as the boot edge serves it now.
    pub(crate) fn snapshot(&self) -> Arc<bootvol_core::boot::BootSnapshot> {
        self.inner.snapshot.load_full()
    }

    /// The recent boot requests.
    pub(crate) fn recent_boots(&self) -> &bootvol_core::recent::RecentBoots {
        &self.inner.recent
    }

    /// The node service the API (and the admin page) writes through.
    pub(crate) fn nodes(&self) -> &NodeService {
        &self.inner.nodes
    }

    /// The configuration the API was started with.
    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Checks a user and password against `[api] http_basic_auth_user_file`, as the API does
    /// (the admin page's log-in). False without `http_basic` or a usable file. Blocking (bcrypt).
    pub(crate) fn verify_password(&self, user: &str, password: &str) -> bool {
        let auth = self.auth();
        match &*auth {
            Auth::Basic { .. } => auth.verify(user, password),
            Auth::Noauth | Auth::Broken => false,
        }
    }

    /// Sets `user`'s password in the htpasswd file (written atomically, 0600) and makes the
    /// running API and admin page use the file at once; what the one-time password left on the
    /// console's login prompt is removed. Blocking (bcrypt, file I/O). The error never holds
    /// the password.
    pub(crate) fn set_password(&self, user: &str, password: &str) -> Result<(), String> {
        let config = &self.inner.config;
        if config.api.auth_strategy != ApiAuthStrategy::HttpBasic {
            return Err("authentication is off ([api] auth_strategy = \"noauth\")".into());
        }
        let path = &config.api.http_basic_auth_user_file;
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let hash = bcrypt::hash(password, bcrypt::DEFAULT_COST).map_err(|e| e.to_string())?;
        htpasswd::write_atomic(path, &htpasswd::with_password(&text, user, &hash))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        self.reload_auth();
        htpasswd::forget_shown(config);
        Ok(())
    }
}

impl ApiState {
    /// The users now: the htpasswd file is read again when its modification time, size or
    /// inode changed since it was last read (one `stat` per call; the file is small and bcrypt
    /// is not run here), so an entry changed or removed by hand takes effect at the next
    /// request, as the admin page's own password change does.
    pub(crate) fn auth(&self) -> Arc<Auth> {
        let config = &self.inner.config;
        if config.api.auth_strategy == ApiAuthStrategy::HttpBasic {
            let now = file_stamp(config);
            let changed = *self.inner.auth_file.lock().unwrap_or_else(|p| p.into_inner()) != now;
            if changed {
                tracing::info!(file = %config.api.http_basic_auth_user_file.display(), "the htpasswd file changed: users read again");
                self.reload_auth();
            }
        }
        self.inner.auth.load_full()
    }

    fn reload_auth(&self) {
        let config = &self.inner.config;
        let stamp = file_stamp(config);
        self.inner.auth.store(Arc::new(load_auth(config)));
        *self.inner.auth_file.lock().unwrap_or_else(|p| p.into_inner()) = stamp;
    }

    /// `user`'s htpasswd entry now (the hash), what an admin session is bound to: empty under
    /// `noauth` (every session is the same nobody), `None` for a user the file lacks.
    pub(crate) fn user_entry(&self, user: &str) -> Option<String> {
        match &*self.auth() {
            Auth::Noauth => Some(String::new()),
            Auth::Basic { users, .. } => users.get(user).cloned(),
            Auth::Broken => None,
        }
    }
}

/// How long a password check waits for its turn before the answer is "busy".
const BCRYPT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl ApiState {
    /// Runs `f` (a bcrypt check or hash) on the blocking pool, never on the workers that serve
    /// boots, once one of the gate's few permits is free (first come, first served); `None`
    /// when none came within [`BCRYPT_WAIT`] (or the task failed).
    pub(crate) async fn bcrypt<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        self.inner.bcrypt_gate.run(f).await
    }
}

/// The API's routes: the public `/healthz`, `/readyz` and `/metrics` (no authentication), then
/// everything else through one dispatcher, so trailing slashes, node names, authentication and
/// Ironic's error shapes are handled in one place.
pub(crate) fn router(state: ApiState) -> Router {
    public_routes().fallback(handle).with_state(state)
}

/// The public routes alone, for `[metrics] listen`: anything else is 404.
pub(crate) fn public_router(state: ApiState) -> Router {
    public_routes().with_state(state)
}

fn public_routes() -> Router<ApiState> {
    Router::new()
        .route("/healthz", axum::routing::get(public::healthz))
        .route("/readyz", axum::routing::get(public::readyz))
        .route("/metrics", axum::routing::get(public::metrics))
}

/// An error with Ironic's shape.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    /// `Retry-After` seconds (a 429).
    retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), retry_after: None }
    }
    /// The same with `Retry-After: secs`.
    fn retry_after(mut self, secs: u64) -> ApiError {
        self.retry_after = Some(secs);
        self
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
    pub(crate) fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }
    pub(crate) fn not_acceptable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_ACCEPTABLE, message)
    }
    /// 503: the database cannot be reached; the same request may succeed later.
    pub(crate) fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
    fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "The request you have made requires authentication.",
        )
    }
    fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "The method is not allowed for this resource.",
        )
    }
}

/// Ironic's error body: `error_message` holding the fault as a JSON string, with
/// `WWW-Authenticate` on a 401 and `Retry-After` on a 429.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let fault = json!({
            "faultstring": self.message,
            "faultcode": if self.status.is_server_error() { "Server" } else { "Client" },
            "debuginfo": null,
        });
        let body = json!({ "error_message": fault.to_string() });
        let mut response = json_response(self.status, &body);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"Baremetal API\""),
            );
        }
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::NotFound(m) => ApiError::not_found(m),
            NodeError::Invalid(m) => ApiError::bad_request(m),
            NodeError::Conflict(m) | NodeError::Locked(m) => ApiError::conflict(m),
            NodeError::Database(m) => ApiError::internal(format!("database: {m}")),
            NodeError::Unavailable(m) => ApiError::unavailable(format!("database: {m}")),
        }
    }
}

pub(crate) type ApiResult = Result<Response, ApiError>;

/// A JSON answer with `Content-Type: application/json`.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// `GET /`: the version document.
fn root_document(base: &str) -> Value {
    let v1 = version_object(base);
    json!({
        "name": "OpenStack Ironic API",
        "description": "Ironic is an OpenStack project which enables the provision and management of baremetal machines (served by bootvol).",
        "default_version": v1,
        "versions": [v1],
    })
}

/// `GET /v1`: the links of the resources at microversion `minor`.
fn v1_document(base: &str, minor: u32) -> Value {
    let link = |name: &str| {
        json!([{"href": format!("{base}/v1/{name}/"), "rel": "self"},
               {"href": format!("{base}/{name}/"), "rel": "bookmark"}])
    };
    let mut doc = json!({
        "id": "v1",
        "version": version_object(base),
        "links": [{"href": format!("{base}/v1/"), "rel": "self"}],
        "media_types": [{"base": "application/json", "type": "application/vnd.openstack.ironic.v1+json"}],
        "nodes": link("nodes"),
        "ports": link("ports"),
        "chassis": link("chassis"),
        "drivers": link("drivers"),
    });
    if let Some(map) = doc.as_object_mut() {
        if minor >= 23 {
            map.insert("portgroups".into(), link("portgroups"));
        }
        if minor >= VOLUME_MINOR {
            map.insert("volume".into(), link("volume"));
        }
    }
    doc
}

/// A write's body, refused (413) when it declares or holds more than [`MAX_BODY`] bytes; other
/// methods read none.
async fn read_body(method: &Method, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("The request body is larger than {MAX_BODY} bytes."),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let writes = matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if writes && declared.is_some_and(|n| n > MAX_BODY as u64) {
        // Refused before reading a byte of it.
        return Err(too_large());
    }
    if writes {
        axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| too_large())
    } else {
        Ok(Bytes::new())
    }
}

/// One request, parsed.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: Method,
    /// Path segments after `/v1`.
    pub(crate) segments: Vec<String>,
    pub(crate) query: Vec<(String, String)>,
    /// The negotiated minor version.
    pub(crate) minor: u32,
    /// `http://<Host>`, for links.
    pub(crate) base: String,
    pub(crate) body: Bytes,
    /// `[api] max_limit`: the largest page of a list.
    pub(crate) max_limit: usize,
}

impl Request {
    pub(crate) fn param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> Result<Value, ApiError> {
        if self.body.is_empty() {
            return Err(ApiError::bad_request(
                "The request has no body; a JSON document is expected.",
            ));
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::bad_request(format!("The request body is not valid JSON: {e}")))
    }
}

async fn handle(
    State(state): State<ApiState>,
    connect: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let request_id = format!("req-{}", bootvol_core::model::new_uuid());
    let negotiated = negotiate(&headers);
    let minor = negotiated.as_ref().map_or(MIN_MINOR, |m| *m);
    let result = match negotiated {
        Err(e) => Err(e),
        Ok(minor) => {
            let client = connect.map(|axum::Extension(axum::extract::ConnectInfo(a))| a.ip());
            dispatch(&state, client, method.clone(), &uri, &headers, body, minor).await
        }
    };
    let mut response = result.into_response();
    let status = response.status();
    let h = response.headers_mut();
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    };
    put(MIN_HEADER, format!("1.{MIN_MINOR}"));
    put(MAX_HEADER, format!("1.{MAX_MINOR}"));
    put(VERSION_HEADER, format!("1.{minor}"));
    put(REQUEST_ID_HEADER, request_id.clone());
    tracing::info!(%method, path = uri.path(), status = status.as_u16(), request_id, version = format!("1.{minor}"), "api request");
    response
}

/// The microversion asked for: `X-OpenStack-Ironic-API-Version: 1.N|latest`, else
/// `OpenStack-API-Version: baremetal 1.N`, else the minimum. 406 when out of range.
fn negotiate(headers: &HeaderMap) -> Result<u32, ApiError> {
    let asked = headers
        .get(VERSION_HEADER)
        .map(|v| v.to_str().unwrap_or("?").trim().to_owned())
        .or_else(|| {
            let value = headers.get("OpenStack-API-Version")?.to_str().ok()?;
            value.split(',').find_map(|part| {
                let mut words = part.split_whitespace();
                (words.next()?.eq_ignore_ascii_case("baremetal"))
                    .then(|| words.next().unwrap_or("?").to_owned())
            })
        });
    let Some(asked) = asked else { return Ok(MIN_MINOR) };
    if asked.eq_ignore_ascii_case("latest") {
        return Ok(MAX_MINOR);
    }
    let range = format!("Supported version range is 1.{MIN_MINOR} to 1.{MAX_MINOR}.");
    let minor = asked.strip_prefix("1.").and_then(|m| m.parse::<u32>().ok()).ok_or_else(|| {
        ApiError::not_acceptable(format!("Invalid API version {asked:?}. {range}"))
    })?;
    if !(MIN_MINOR..=MAX_MINOR).contains(&minor) {
        return Err(ApiError::not_acceptable(format!(
            "Version {asked} was requested but it is not supported. {range}"
        )));
    }
    Ok(minor)
}

fn version_object(base: &str) -> Value {
    json!({
        "id": "v1",
        "status": "CURRENT",
        "min_version": format!("1.{MIN_MINOR}"),
        "version": format!("1.{MAX_MINOR}"),
        "links": [{"href": format!("{base}/v1/"), "rel": "self"}],
    })
}

/// The v1 collections a path without `/v1` names (`/nodes/detail`, `/drivers/{name}/properties`):
/// served as `/v1/...`, with the same authentication.
const UNVERSIONED: &[&str] =
    &["nodes", "ports", "chassis", "drivers", "portgroups", "volume", "lookup", "heartbeat"];

async fn dispatch(
    state: &ApiState,
    client: Option<std::net::IpAddr>,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
    minor: u32,
) -> ApiResult {
    let base = state.inner.endpoint.clone();
    let path = uri.path();
    let trimmed = path.trim_end_matches('/');
    let segments: Vec<&str> =
        if trimmed.is_empty() { Vec::new() } else { trimmed[1..].split('/').collect() };
    if segments.iter().any(|s| s.is_empty()) {
        return Err(ApiError::not_found(format!("The resource {path} could not be found.")));
    }
    let v1 = match segments.as_slice() {
        [] | ["v1"] => {
            if method != Method::GET && method != Method::HEAD {
                return Err(ApiError::method_not_allowed());
            }
            let doc =
                if segments.is_empty() { root_document(&base) } else { v1_document(&base, minor) };
            return Ok(json_response(StatusCode::OK, &doc));
        }
        ["v1", rest @ ..] => rest,
        // Ironic's root controller serves its collections without the version too, as v1.
        [first, ..] if UNVERSIONED.contains(first) => &segments[..],
        _ => return Err(ApiError::not_found(format!("The resource {path} could not be found."))),
    };
    authenticate(state, headers, client).await?;
    let query = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map_err(|e| ApiError::bad_request(format!("Invalid query string: {e}")))?
        .0;
    let body = read_body(&method, headers, body).await?;
    let request = Request {
        method,
        segments: v1.iter().map(|s| (*s).to_owned()).collect(),
        query,
        minor,
        base,
        body,
        max_limit: state.inner.config.api.max_limit,
    };
    resources::route(state, &request).await
}

/// Applies a JSON patch to `doc` with the `json-patch` crate (RFC 6902), under Ironic's rules:
/// only `add`, `replace` and `remove`; `patchable` lists the top-level fields that may change,
/// `read_only` those that exist but may not. Answers the top-level fields the patch touches.
pub(crate) fn apply_patch(
    doc: &mut Value,
    patch: &Value,
    patchable: &[&str],
    read_only: &[&str],
) -> Result<Vec<String>, ApiError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| ApiError::bad_request("A JSON patch must be a list of operations."))?;
    let mut touched = Vec::new();
    for op in ops {
        touched.push(ironic_operation(op, patchable, read_only)?);
    }
    let operations: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ApiError::bad_request(format!("Invalid JSON patch: {e}")))?;
    json_patch::patch(doc, &operations).map_err(|e| {
        let op = ops.get(e.operation).and_then(|o| o["op"].as_str()).unwrap_or("patch");
        ApiError::bad_request(format!(
            "Can not {op} {}: {}",
            e.path,
            match e.kind {
                json_patch::PatchErrorKind::InvalidPointer =>
                    "it (or its parent) does not exist".to_owned(),
                other => other.to_string(),
            }
        ))
    })?;
    Ok(touched)
}

/// Checks one operation against Ironic's rules; answers the top-level field it changes.
fn ironic_operation(
    op: &Value,
    patchable: &[&str],
    read_only: &[&str],
) -> Result<String, ApiError> {
    let obj = op
        .as_object()
        .ok_or_else(|| ApiError::bad_request("Each patch operation must be an object."))?;
    let kind = obj.get("op").and_then(Value::as_str).ok_or_else(|| {
        ApiError::bad_request("Each patch operation needs \"op\" (add, replace or remove).")
    })?;
    if !matches!(kind, "add" | "replace" | "remove") {
        return Err(ApiError::bad_request(format!(
            "Invalid patch operation {kind:?}: add, replace or remove"
        )));
    }
    if let Some(key) = obj.keys().find(|k| !matches!(k.as_str(), "op" | "path" | "value")) {
        return Err(ApiError::bad_request(format!(
            "Invalid patch operation: unknown member {key:?}"
        )));
    }
    if kind != "remove" && !obj.contains_key("value") {
        return Err(ApiError::bad_request(format!("Patch operation {kind} needs a \"value\".")));
    }
    let path = obj
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("Each patch operation needs a \"path\" string."))?;
    let root = path
        .strip_prefix('/')
        .map(|rest| {
            rest.split('/').next().unwrap_or_default().replace("~1", "/").replace("~0", "~")
        })
        .filter(|root| !root.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("Invalid patch path {path:?}")))?;
    if read_only.contains(&root.as_str()) {
        return Err(ApiError::bad_request(format!(
            "'/{root}' is an internal attribute and can not be updated"
        )));
    }
    if !patchable.contains(&root.as_str()) {
        return Err(ApiError::bad_request(format!(
            "Invalid patch path {path:?}: {root:?} is not a field that can be updated (fields: {})",
            patchable.join(", ")
        )));
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: &[&str] = &["name", "extra"];

    #[test]
    fn a_patch_reaches_into_lists_and_keeps_ironics_rules() {
        let mut doc = json!({"name": "n1", "extra": {"disks": ["a", "b"]}});
        let patch = json!([{"op": "add", "path": "/extra/disks/1", "value": "x"},
                           {"op": "remove", "path": "/extra/disks/0"},
                           {"op": "replace", "path": "/name", "value": "n2"}]);
        let touched = apply_patch(&mut doc, &patch, FIELDS, &["uuid"]).unwrap();
        assert_eq!(doc, json!({"name": "n2", "extra": {"disks": ["x", "b"]}}));
        assert_eq!(touched, ["extra", "extra", "name"]);
        for (patch, words) in [
            (
                json!([{"op": "move", "from": "/name", "path": "/extra/n"}]),
                "add, replace or remove",
            ),
            (json!([{"op": "add", "path": "/uuid", "value": "u"}]), "internal attribute"),
            (json!([{"op": "add", "path": "/other", "value": 1}]), "not a field"),
            (json!([{"op": "remove", "path": "/extra/disks/7"}]), "does not exist"),
            (json!([{"op": "add", "path": "/name"}]), "needs a \"value\""),
            (json!([{"op": "add", "path": "/name", "value": 1, "x": 2}]), "unknown member"),
        ] {
            let before = doc.clone();
            let e = apply_patch(&mut doc, &patch, FIELDS, &["uuid"]).unwrap_err();
            assert!(e.message.contains(words), "{patch}: {}", e.message);
            assert_eq!(doc, before, "a refused patch changes nothing");
        }
    }
}
