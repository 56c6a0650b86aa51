//! The local admin web page, `/admin/` on the API listener: the only module that knows the admin
//! HTML.
//!
//! Server-rendered with minijinja (`templates/admin/*.html.j2`, HTML auto-escaping), usable
//! without JavaScript. Log-in checks the same htpasswd file as the API (`[api]
//! http_basic_auth_user_file`, through `ApiState::verify_password`); a successful log-in gets
//! a fresh random session id in a signed cookie (HttpOnly, SameSite=Strict, Secure when the
//! request came through TLS: the API listener's own (`[api] tls_cert`), or
//! `X-Forwarded-Proto: https` from a terminating proxy).
//! Every form carries the session's CSRF token and every POST is refused without it (the
//! log-in form included: visiting it opens an anonymous session). Failed log-ins are limited
//! per (client address, user) with back-off ([`crate::limiter`]): a user locked from an
//! address does not lock out another user from it. With `[api] auth_strategy = "noauth"` the page needs no log-in, as the
//! API needs no credentials: visiting the log-in page opens a session at once (CSRF tokens and
//! messages still need one), and every page says that authentication is off.
//!
//! Reads and writes go through the node service ([`bootvol_control::nodes`]), the same typed core the
//! API calls (never through the API's routes, and never around the core to `db`); a node's
//! script, scenario and boot problem are read from the boot snapshot the boot edge serves
//! (`ApiState::snapshot`), never decided here again; the words and confirmations of actions are
//! `actions`'; the nodes list's rows are made from what `rows` reads; the rack-wide history of
//! events is `history`'s; the live stream and its script are `live`'s. Like the API, secrets
//! are masked before anything reaches a template. The password form (`password.rs`) sets the
//! logged-in user's own password in the htpasswd file, which the running process reloads.
//!
//! Every answer of this router, redirects, refusals, 405s and its own 404 for any other path
//! under `/admin/` included, forbids being framed (`framing`, a response layer: `X-Frame-Options:
//! DENY`, `frame-ancestors 'none'`); only `/admin/activity` sets its own (`SAMEORIGIN`, `'self'`).

mod actions;
mod activity;
mod extract;
mod forms;
mod history;
mod live;
mod node;
mod password;
mod probe;
mod rack;
mod rows;
mod session;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Extension, Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use minijinja::{Environment, context};
use serde::Serialize;

use crate::api::ApiState;
use crate::limiter::LoginLimiter;
use extract::{CheckedForm, LoggedIn};
use node::node_page;
use session::Sessions;

pub use live::Feed;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "bootvol_admin";

/// The user name of sessions opened without a log-in (`[api] auth_strategy = "noauth"`).
const NOAUTH_USER: &str = "(no authentication)";

/// What the admin handlers share.
#[derive(Clone)]
struct AdminState {
    api: ApiState,
    /// `[api] auth_strategy = "noauth"`: the page needs no log-in, as the API needs none.
    auth_off: bool,
    /// `[api] tls_cert`: the listener answers TLS only, so every cookie is `Secure`.
    tls: bool,
    templates: Arc<Environment<'static>>,
    /// Made at first use: its signing key and log-outs come from the database.
    sessions: Arc<tokio::sync::OnceCell<Sessions>>,
    limiter: Arc<LoginLimiter>,
    /// The live streams' changes and boot requests (`live`).
    live: Arc<Feed>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState").finish_non_exhaustive()
    }
}

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html.j2", include_str!("../../templates/admin/base.html.j2")),
    ("login.html.j2", include_str!("../../templates/admin/login.html.j2")),
    ("nodes.html.j2", include_str!("../../templates/admin/nodes.html.j2")),
    ("node.html.j2", include_str!("../../templates/admin/node.html.j2")),
    ("node_probe.html.j2", include_str!("../../templates/admin/node_probe.html.j2")),
    ("nodes_probe.html.j2", include_str!("../../templates/admin/nodes_probe.html.j2")),
    ("activity.html.j2", include_str!("../../templates/admin/activity.html.j2")),
    ("confirm.html.j2", include_str!("../../templates/admin/confirm.html.j2")),
    ("password.html.j2", include_str!("../../templates/admin/password.html.j2")),
    ("events.html.j2", include_str!("../../templates/admin/events.html.j2")),
];

/// What the browser checks before a form is sent (`pattern`, anchored whole): a MAC in the
/// forms `MacAddr` parses, an iSCSI name, a portal. The server still decides.
const MAC_PATTERN: &str = r"([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}|([0-9A-Fa-f]{2}-){5}[0-9A-Fa-f]{2}|([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}|[0-9A-Fa-f]{12}";
const IQN_PATTERN: &str =
    r"[iI][qQ][nN]\.[0-9]{4}-[0-9]{2}\..+|[eE][uU][iI]\.[0-9A-Fa-f]{16}|[nN][aA][aA]\.[0-9A-Fa-f]+";
const PORTAL_PATTERN: &str = r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?";

fn environment(auth_off: bool, secrets_to_anyone: bool) -> Environment<'static> {
    let mut env = Environment::new();
    env.add_global("mac_pattern", MAC_PATTERN);
    env.add_global("iqn_pattern", IQN_PATTERN);
    env.add_global("portal_pattern", PORTAL_PATTERN);
    env.add_global("auth_off", auth_off);
    env.add_global("secrets_to_anyone", secrets_to_anyone);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    for (name, source) in TEMPLATES {
        env.add_template(name, source).expect("admin templates parse");
    }
    env
}

/// The admin routes (`/admin`, `/admin/...`), merged with the API's on its listener by `app`;
/// `live` is what its live streams hear from.
pub fn router(api: ApiState, live: Arc<Feed>) -> Router {
    let auth_off = api.config().api.auth_strategy == bootvol_core::config::ApiAuthStrategy::Noauth;
    let secrets_to_anyone =
        api.config().boot.script_secrets == bootvol_core::config::ScriptSecrets::Any;
    let tls = api.config().api.tls_cert.is_some();
    let state = AdminState {
        auth_off,
        tls,
        api,
        templates: Arc::new(environment(auth_off, secrets_to_anyone)),
        sessions: Arc::new(tokio::sync::OnceCell::new()),
        limiter: Arc::new(LoginLimiter::new(session::LOGIN_ATTEMPTS, session::LOGIN_WINDOW)),
        live,
    };
    Router::new()
        .route("/admin", get(|| async { Redirect::to("/admin/") }))
        .route("/admin/", get(nodes_page))
        .route("/admin/activity", get(activity_page))
        .route("/admin/events", get(history::events_page))
        .route("/admin/stream", get(live::stream))
        .route("/admin/live.js", get(live::script))
        .route("/admin/metrics", get(metrics_page))
        .route("/admin/nodes", post(forms::create_node))
        .route("/admin/bulk", post(forms::bulk))
        .route("/admin/nodes/{node}", get(node_page))
        .route("/admin/nodes/{node}/{form}", post(forms::node_form))
        .route("/admin/nodes/{node}/{child}/{id}", post(forms::child_form))
        .route("/admin/nodes/{node}/{child}/{id}/delete", post(forms::child_form))
        .route("/admin/login", get(login_page).post(login))
        .route("/admin/logout", post(logout))
        .route("/admin/password", get(password::password_page).post(password::set_password))
        .route("/admin/{*rest}", axum::routing::any(not_found_page))
        .layer(axum::middleware::map_response(framing))
        .with_state(state)
}

/// What every admin answer carries unless it says otherwise (only `/admin/activity` does): it
/// may not be framed. Set here, on every route's answer (redirects, refusals, 404s, 405s, a
/// failed template's 500), so a new route cannot forget it.
const CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'";

async fn framing(mut response: Response) -> Response {
    let h = response.headers_mut();
    if !h.contains_key("x-frame-options") {
        h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    }
    if !h.contains_key("content-security-policy") {
        h.insert("content-security-policy", HeaderValue::from_static(CSP));
    }
    response
}

/// Any other path under `/admin/`: the admin's own 404 (the API's would answer in JSON).
async fn not_found_page(State(state): State<AdminState>) -> Response {
    state.render(
        StatusCode::NOT_FOUND,
        "base.html.j2",
        context! { user => (), csrf => "", error => "There is no such page." },
    )
}

/// True when the request reached us through TLS: the listener's own, or a terminating proxy's
/// (it says so).
fn behind_tls(state: &AdminState, headers: &HeaderMap) -> bool {
    state.tls
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

fn cookie_header(value: &str, secure: bool, max_age: Option<u64>) -> HeaderValue {
    let mut text = format!("{COOKIE}={value}; Path=/admin; HttpOnly; SameSite=Strict");
    if let Some(age) = max_age {
        text.push_str(&format!("; Max-Age={age}"));
    }
    if secure {
        text.push_str("; Secure");
    }
    HeaderValue::from_str(&text).expect("cookie value is ASCII")
}

fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|line| {
        line.split(';').find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE).then(|| value.to_owned())
        })
    })
}

fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}

impl AdminState {
    /// The node service both front ends write through.
    fn nodes(&self) -> &bootvol_control::nodes::NodeService {
        self.api.nodes()
    }

    /// The session store, made the first time with the signing key and the log-outs kept in
    /// the database (a key drawn now, and said so, when the database cannot give one).
    async fn sessions(&self) -> &Sessions {
        self.sessions
            .get_or_init(|| async {
                let now = i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX);
                let key = self.nodes().admin_session_key(Sessions::random_key()).await;
                let logged_out = self.nodes().admin_logouts(now).await;
                let api = self.api.clone();
                let entry_of: session::EntryOf = Arc::new(move |user| api.user_entry(user));
                match (key, logged_out) {
                    (Ok(key), Ok(logged_out)) => Sessions::new(key, logged_out, entry_of),
                    (Err(e), _) | (_, Err(e)) => {
                        tracing::error!(error = %e, "admin sessions: no kept key, sessions end at restart");
                        Sessions::new(Sessions::random_key(), Vec::new(), entry_of)
                    }
                }
            })
            .await
    }

    fn render(&self, status: StatusCode, name: &str, ctx: minijinja::Value) -> Response {
        match self.templates.get_template(name).and_then(|t| t.render(ctx)) {
            Ok(body) => html(status, body),
            Err(e) => {
                tracing::error!(template = name, error = %e, "admin template failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "template error").into_response()
            }
        }
    }
}

/// Where a log-in goes next: `next` when it is a page of this admin (a path under `/admin/`,
/// nothing that could leave the site), else the nodes list.
pub(super) fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with("/admin/")
                && !n.contains("//")
                && !n.contains('\\')
                && n.chars().all(|c| c.is_ascii_graphic()) =>
        {
            n.to_owned()
        }
        _ => "/admin/".to_owned(),
    }
}

/// The login page: opens (or reuses) an anonymous session so the form carries a CSRF token.
async fn login_page(
    State(state): State<AdminState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let next = safe_next(query.get("next").map(String::as_str));
    login_form(&state, &headers, StatusCode::OK, &next, None).await
}

/// The login form (or, with `noauth`, a session at once and on to `next`), with `error`.
async fn login_form(
    state: &AdminState,
    headers: &HeaderMap,
    status: StatusCode,
    next: &str,
    error: Option<&str>,
) -> Response {
    let secure = behind_tls(state, headers);
    let sessions = state.sessions().await;
    if state.auth_off {
        // No authentication, as for the API: a session (for CSRF tokens and messages) without
        // a log-in. The page says so on every screen.
        if cookie_value(headers).and_then(|c| sessions.get(&c)).is_some_and(|s| s.user.is_some()) {
            return Redirect::to(next).into_response();
        }
        let (cookie, _) = sessions.open(Some(NOAUTH_USER.to_owned()));
        let mut response = Redirect::to(next).into_response();
        response.headers_mut().append(header::SET_COOKIE, cookie_header(&cookie, secure, None));
        return response;
    }
    let existing = cookie_value(headers).and_then(|c| sessions.get(&c));
    if let Some(s) = &existing
        && s.user.is_some()
        && error.is_none()
    {
        return Redirect::to(next).into_response();
    }
    let (cookie, s) = match existing.filter(|s| s.user.is_none()) {
        Some(s) => (None, s),
        None => {
            let (cookie, s) = sessions.open(None);
            (Some(cookie), s)
        }
    };
    let mut response = state.render(
        status,
        "login.html.j2",
        context! { user => (), csrf => s.csrf, error => error, next => next },
    );
    if let Some(cookie) = cookie {
        response.headers_mut().append(header::SET_COOKIE, cookie_header(&cookie, secure, None));
    }
    response
}

fn client_key(connect: &Option<Extension<ConnectInfo<SocketAddr>>>) -> String {
    connect
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), |Extension(ConnectInfo(a))| a.ip().to_string())
}

async fn login(
    State(state): State<AdminState>,
    connect: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let secure = behind_tls(&state, &headers);
    if state.auth_off {
        return Redirect::to("/admin/login").into_response();
    }
    let next = safe_next(form.get("next").map(String::as_str));
    let sessions = state.sessions().await;
    let cookie = cookie_value(&headers);
    let Some(anonymous) = cookie.as_deref().and_then(|c| sessions.get(c)) else {
        return csrf_refused(&state);
    };
    if !session::same_token(form.get("csrf").map_or("", String::as_str), &anonymous.csrf) {
        return csrf_refused(&state);
    }
    let client = client_key(&connect);
    let user = form.get("username").cloned().unwrap_or_default();
    if let Some(wait) = state.limiter.locked(&client, &user) {
        tracing::warn!(client, user = ?user, "admin login refused: this user is locked for this address");
        let mut response = state.render(
            StatusCode::TOO_MANY_REQUESTS,
            "login.html.j2",
            context! { user => (), csrf => anonymous.csrf, next => next,
            error => format!("Too many failed log-ins for this user from this address; try again in {} s.", crate::limiter::retry_seconds(wait).max(1)) },
        );
        response.headers_mut().insert(header::RETRY_AFTER, retry_after(wait));
        return response;
    }
    let password = form.get("password").cloned().unwrap_or_default();
    let api = state.api.clone();
    let checked_user = user.clone();
    let Some(ok) = state.api.bcrypt(move || api.verify_password(&checked_user, &password)).await
    else {
        return state.render(
            StatusCode::SERVICE_UNAVAILABLE,
            "login.html.j2",
            context! { user => (), csrf => anonymous.csrf, next => next,
            error => "Too many password checks at once; try again shortly." },
        );
    };
    if !ok {
        state.limiter.failed(&client, &user);
        tracing::warn!(client, user = ?user, "admin login failed");
        return state.render(
            StatusCode::UNAUTHORIZED,
            "login.html.j2",
            context! { user => (), csrf => anonymous.csrf, next => next,
            error => "Wrong user or password." },
        );
    }
    state.limiter.succeeded(&client, &user);
    if let Some(old) = cookie.as_deref() {
        sessions.close(old);
    }
    // A new session id at log-in: a planted anonymous cookie never becomes a logged-in one.
    let (cookie, _) = sessions.open(Some(user.clone()));
    tracing::info!(client, user = ?user, "admin login");
    let mut response = Redirect::to(&next).into_response();
    response.headers_mut().append(header::SET_COOKIE, cookie_header(&cookie, secure, None));
    response
}

/// A `Retry-After` of at least one second.
fn retry_after(wait: std::time::Duration) -> HeaderValue {
    HeaderValue::from(crate::limiter::retry_seconds(wait).max(1))
}

fn csrf_refused(state: &AdminState) -> Response {
    state.render(
        StatusCode::FORBIDDEN,
        "base.html.j2",
        context! { user => (), csrf => "",
                   error => "This form has expired or did not come from this page (CSRF check failed). Go back, reload and try again." },
    )
}

/// A logged-in session from the request's cookie, or the redirect to the login page (which
/// comes back to `uri` after the log-in).
async fn logged_in(
    state: &AdminState,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<session::Session, Box<Response>> {
    let sessions = state.sessions().await;
    cookie_value(headers).and_then(|c| sessions.get(&c)).filter(|s| s.user.is_some()).ok_or_else(
        || {
            let back = uri.path_and_query().map_or("/admin/", |p| p.as_str());
            let next = safe_next(Some(back));
            let to = if next == "/admin/" {
                "/admin/login".to_owned()
            } else {
                format!(
                    "/admin/login?next={}",
                    percent_encoding::utf8_percent_encode(
                        &next,
                        percent_encoding::NON_ALPHANUMERIC
                    )
                )
            };
            Box::new(Redirect::to(&to).into_response())
        },
    )
}

/// The page a form posted to `path` belongs to: a node's forms to its page, the password form
/// to its own, the rest to the nodes list.
fn page_of(path: &str) -> String {
    if let Some(rest) = path.strip_prefix("/admin/nodes/") {
        let node = rest.split('/').next().unwrap_or("");
        if !node.is_empty() {
            return format!("/admin/nodes/{node}");
        }
    }
    if path == "/admin/password" { path.to_owned() } else { "/admin/".to_owned() }
}

/// Checks the session and the form's CSRF token of a POST. Without a live session (it ended,
/// or the cookie is from before a log-out): the log-in page, saying that nothing was done,
/// which returns to the form's page.
async fn checked_post(
    state: &AdminState,
    headers: &HeaderMap,
    uri: &Uri,
    form: &HashMap<String, String>,
) -> Result<session::Session, Box<Response>> {
    let sessions = state.sessions().await;
    let Some(s) = cookie_value(headers).and_then(|c| sessions.get(&c)).filter(|s| s.user.is_some())
    else {
        let next = page_of(uri.path());
        return Err(Box::new(
            login_form(
                state,
                headers,
                StatusCode::UNAUTHORIZED,
                &next,
                Some("Your session has ended: nothing was done. Log in to go back to the page and try again."),
            )
            .await,
        ));
    };
    if session::same_token(form.get("csrf").map_or("", String::as_str), &s.csrf) {
        Ok(s)
    } else {
        Err(Box::new(csrf_refused(state)))
    }
}

async fn logout(State(state): State<AdminState>, headers: HeaderMap, _: CheckedForm) -> Response {
    if let Some(c) = cookie_value(&headers)
        && let Some((id, until)) = state.sessions().await.close(&c)
    {
        state.live.end_session(&id, "logged out");
        let now = i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX);
        if let Err(e) = state.nodes().add_admin_logout(id, until, now).await {
            tracing::error!(error = %e, "admin log-out not kept: a restart would restore the session");
        }
    }
    let mut response = Redirect::to("/admin/login").into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, cookie_header("", behind_tls(&state, &headers), Some(0)));
    response
}

async fn nodes_page(
    State(state): State<AdminState>,
    LoggedIn(s): LoggedIn,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    // "Enroll" on an unknown MAC comes back here with the MAC to prefill the form.
    let mut view = NodesView::new(rack::ListQuery::parse(&query));
    if let Some(mac) =
        query.get("enroll").and_then(|m| m.parse::<bootvol_core::model::MacAddr>().ok())
    {
        view.typed.insert("mac".into(), mac.to_string());
        view.create_open = true;
    }
    render_nodes(&state, &s, StatusCode::OK, view).await
}

/// How many of the latest boot requests the activity frame lists, with their results.
const ACTIVITY_REQUESTS: usize = 8;

/// How often the boot activity frame redraws itself (`<meta http-equiv="refresh">`).
const ACTIVITY_REFRESH_SECS: u32 = 15;

/// The boot activity of the last hour and the latest boot requests with their results, a page
/// of its own that the nodes list frames and that redraws itself: live without JavaScript. Only this page may be framed, and only by the admin
/// page itself.
async fn activity_page(State(state): State<AdminState>, _: LoggedIn) -> Response {
    let minutes = state.api.metrics().boot_activity();
    let mut response = state.render(
        StatusCode::OK,
        "activity.html.j2",
        context! {
            svg => minijinja::Value::from_safe_string(activity::svg(&minutes)),
            summary => activity::summary(&minutes),
            refresh => ACTIVITY_REFRESH_SECS,
            boots => minijinja::value::Serde(state.api.recent_boots().newest_first().iter()
                .take(ACTIVITY_REQUESTS).map(node::boot_hit).collect::<Vec<_>>()),
        },
    );
    let h = response.headers_mut();
    h.insert("x-frame-options", HeaderValue::from_static("SAMEORIGIN"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'none'; frame-ancestors 'self'",
        ),
    );
    response
}

/// The metrics with refused scripts counted apart from unknown MACs, for a logged-in operator
/// (the public `/metrics` counts them as unknown, as their answer looked).
async fn metrics_page(State(state): State<AdminState>, _: LoggedIn) -> Response {
    let text = state.api.metrics().scrape_full().await;
    let kind = HeaderValue::from_static(bootvol_runtime::metrics::CONTENT_TYPE);
    (StatusCode::OK, [(header::CONTENT_TYPE, kind)], text).into_response()
}

/// What the nodes list shows beside the nodes: the list's query, the create form's typed
/// values (a refused creation shows them again, secrets left out) and where it was refused.
struct NodesView {
    query: rack::ListQuery,
    problem: Option<String>,
    /// The create form's fields as typed.
    typed: HashMap<String, String>,
    /// The create form's field the refusal is about, and why.
    field_error: Option<(&'static str, String)>,
    create_open: bool,
}

impl NodesView {
    fn new(query: rack::ListQuery) -> NodesView {
        NodesView {
            query,
            problem: None,
            typed: HashMap::new(),
            field_error: None,
            create_open: false,
        }
    }
}

/// The header links of the sortable columns.
#[derive(Serialize)]
struct Column {
    label: &'static str,
    href: String,
    /// `▲`/`▼` when the list is sorted by it.
    arrow: &'static str,
}

/// The nodes list (one page of it, with what needs attention at the top and the create form),
/// and the outcome of a form when there was one.
/// What the nodes list keeps of every node: its summary row, its MACs, its volumes.
#[derive(Default)]
struct ListFold {
    rows: Vec<rack::Summary>,
    known: std::collections::HashSet<bootvol_core::model::MacAddr>,
    /// Volume id to the node (UUID, name) that uses it.
    volumes: HashMap<String, (String, String)>,
}

async fn render_nodes(
    state: &AdminState,
    s: &session::Session,
    status: StatusCode,
    view: NodesView,
) -> Response {
    let (live_gen, flash) = (state.live.generation(), state.sessions().await.take_flash(&s.cookie));
    let (mut notice, mut problem) = (None, view.problem.clone());
    if let Some(f) = flash {
        if f.bad {
            problem = problem.or(Some(f.text));
        } else {
            notice = Some(f.text);
        }
    }
    let default = state.nodes().default_storage();
    let sync = state.nodes().sync_overview().await;
    let drift_lines = match &sync {
        Ok((Some(last), _)) => rack::sync_lines(&last.message),
        _ => Vec::new(),
    };
    // One pass over the nodes, a page at a time: a summary row each, the known MACs, and which
    // node uses which volume (for the sync panel's links).
    // Each row's scenario and boot problem are what the boot snapshot serves (one decision).
    let inputs = match rows::RowInputs::read(state, &drift_lines).await {
        Ok(inputs) => inputs,
        Err(e) => {
            problem = problem.or(Some(format!("reading the boot reports: {e}")));
            rows::RowInputs::read_without_reports(state, &drift_lines)
        }
    };
    let folded = state
        .nodes()
        .fold_nodes(ListFold::default(), move |fold, r| {
            fold.rows.push(inputs.row(r));
            fold.known.extend(r.ports.iter().map(|p| p.address));
            for t in &r.volume_targets {
                fold.volumes
                    .insert(t.volume_id.clone(), (r.node.uuid.clone(), r.node.name.clone()));
            }
        })
        .await;
    // MACs seen recently that belong to no node (now: the node may have been made since).
    let mut unknown: Vec<minijinja::Value> = Vec::new();
    let (rows, volumes) = match folded {
        Ok(ListFold { rows, known, volumes }) => {
            unknown = unknown_macs(state, &known);
            (rows, volumes)
        }
        Err(e) => {
            problem = problem.or(Some(e.to_string()));
            (Vec::new(), HashMap::new())
        }
    };
    let attention = rack::attention(&rows, unknown.len());
    let (probe_failures, probe_failures_more) = probe::failures(state).await;
    let page = rack::page(rows, &view.query);
    let query = &view.query;
    let columns = columns(query);
    let pages = context! {
        previous => (page.page > 1).then(|| query.href(&[("page", &(page.page - 1).to_string())])),
        next => (page.page < page.pages).then(|| query.href(&[("page", &(page.page + 1).to_string())])),
    };
    let sync = sync_status(state, sync, &drift_lines, &volumes);
    let create_open = view.create_open || !view.typed.is_empty() || view.field_error.is_some();
    let (error_field, error_text) = match view.field_error {
        Some((field, text)) => (Some(field), Some(text)),
        None => (None, None),
    };
    let filters = context! {
        q => query.q.clone(), state => query.state.clone(), power => query.power.clone(),
        maintenance => query.maintenance.map(|m| if m { "1" } else { "0" }),
        problem => query.problem, drift => query.drift, narrowed => query.narrowed(),
        per => query.per, per_sizes => rack::PAGE_SIZES.to_vec(),
        sort => query.href(&[("page", "")]),
    };
    state.render(
        status,
        "nodes.html.j2",
        context! { user => s.user.clone(), csrf => s.csrf.clone(), notice => notice,
        error => problem, page => minijinja::value::Serde(&page), columns => minijinja::value::Serde(columns),
        pages => pages, filters => filters, attention => minijinja::value::Serde(&attention),
        attention_any => attention.any(), sync => sync, unknown_macs => unknown,
        back => query.href(&[]),
        states => bootvol_core::model::ProvisionState::ALL.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        typed => view.typed, error_field => error_field, error_text => error_text,
        create_open => create_open, default_storage => default.as_str(),
        probe_failures => probe_failures, probe_failures_more => probe_failures_more, live_gen => live_gen },
    )
}

/// MACs seen recently that belong to no node of `known`, newest first, each once.
fn unknown_macs(
    state: &AdminState,
    known: &std::collections::HashSet<bootvol_core::model::MacAddr>,
) -> Vec<minijinja::Value> {
    let mut unknown = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for hit in state.api.recent_boots().newest_first() {
        if let (Some(mac), bootvol_core::recent::BootResult::UnknownMac) = (hit.mac, hit.result)
            && !known.contains(&mac)
            && seen.insert(mac)
        {
            unknown.push(context! {
                mac => mac.to_string(), client => hit.client.to_string(), via => hit.via,
                at => bootvol_core::timefmt::format_unix(hit.at.max(0) as u64),
            });
        }
    }
    unknown
}

/// The sortable columns' header links for the list as `query` has it.
fn columns(query: &rack::ListQuery) -> Vec<Column> {
    [
        ("Name", "name"),
        ("MAC", "mac"),
        ("Power", "power"),
        ("Provision state", "state"),
        ("Scenario", "scenario"),
        ("Last error", "error"),
    ]
    .into_iter()
    .map(|(label, key)| Column { label, href: query.sort_href(key), arrow: query.arrow(key) })
    .collect()
}

/// The last sync pass and the attachments counted by state, as the node service reads them.
type SyncOverview = (Option<bootvol_control::nodes::SyncStatus>, Vec<(String, i64)>);

/// The Cinder sync status: whether this process syncs, the last pass (by `serve` or `bootvol
/// sync`) with a verdict that is `ok` only when nothing drifted or failed, its problem lines
/// (a drifted volume linked to its node), the last clean pass, and the volume attachments by
/// state.
fn sync_status(
    state: &AdminState,
    found: Result<SyncOverview, bootvol_control::nodes::NodeError>,
    lines: &[rack::SyncLine],
    volumes: &HashMap<String, (String, String)>,
) -> minijinja::Value {
    let enabled = state.nodes().conductor().storage().cinder().is_some();
    let every = state.api.config().cinder.sync_interval;
    let time = |t: i64| bootvol_core::timefmt::format_unix(t.max(0) as u64);
    match found {
        Ok((last, counts)) => context! {
            enabled => enabled,
            interval => every,
            last => last.map(|p| {
                let (verdict, class) = rack::sync_verdict(p.outcome.as_str(), p.drifted, p.errors);
                context! {
                    ran_by => p.ran_by.as_str(), outcome => p.outcome.as_str(),
                    verdict => verdict, class => class,
                    started_at => time(p.started_at), finished_at => time(p.finished_at),
                    checked => p.checked, updated => p.updated, drifted => p.drifted, errors => p.errors,
                    last_ok_at => p.last_ok_at.map(time),
                    lines => lines.iter().map(|l| {
                        let node = l.volume.as_ref().and_then(|v| volumes.get(v));
                        context! { kind => l.kind.clone(), text => l.text.clone(),
                                   node_uuid => node.map(|n| n.0.clone()), node_name => node.map(|n| n.1.clone()) }
                    }).collect::<Vec<_>>(),
                }
            }),
            attachments => counts.into_iter().map(|(state, n)| format!("{state}: {n}")).collect::<Vec<_>>(),
            error => (),
        },
        Err(e) => {
            context! { enabled => enabled, interval => every, last => (), attachments => Vec::<String>::new(),
            error => e.to_string() }
        }
    }
}
