//! The local admin web page, `/admin/` on the API listener: the only module that knows the admin
//! HTML.
//!
//! Server-rendered with minijinja (`templates/admin/*.html.j2`, HTML auto-escaping), usable
//! without JavaScript. Log-in checks the same htpasswd file as the API (`[api]
//! http_basic_auth_user_file`, through `ApiState::verify_password`); a successful log-in gets
//! a fresh random session id in a signed cookie (HttpOnly, SameSite=Strict, Secure when the
//! request came through TLS, i.e. `X-Forwarded-Proto: https` from the terminating proxy).
//! Every form carries the session's CSRF token and every POST is refused without it (the
//! log-in form included: visiting it opens an anonymous session). Log-in attempts are limited
//! per client address. With `[api] auth_strategy = "noauth"` the page needs no log-in, as the
//! API needs no credentials: visiting the log-in page opens a session at once (CSRF tokens and
//! messages still need one), and every page says that authentication is off.
//!
//! Reads and writes go through the node service ([`crate::nodes`]), the same typed core the
//! API calls (never through the API's routes, and never around the core to `db`); scripts come
//! from the `boot` scenario rules. Like the API, secrets are masked before anything reaches a
//! template. The password form (`password.rs`) sets the logged-in user's own password in the
//! htpasswd file, which the running process reloads.

mod activity;
mod forms;
mod node;
mod password;
mod session;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Extension, Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use minijinja::{Environment, context};
use serde::Serialize;

use crate::api::ApiState;
use crate::limiter::LoginLimiter;
use node::node_page;
use session::Sessions;

/// The session cookie's name.
pub const COOKIE: &str = "bootvol_admin";

/// The user name of sessions opened without a log-in (`[api] auth_strategy = "noauth"`).
const NOAUTH_USER: &str = "(no authentication)";

/// What the admin handlers share.
#[derive(Clone)]
struct AdminState {
    api: ApiState,
    /// `[api] auth_strategy = "noauth"`: the page needs no log-in, as the API needs none.
    auth_off: bool,
    templates: Arc<Environment<'static>>,
    sessions: Arc<Sessions>,
    limiter: Arc<LoginLimiter>,
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
    ("activity.html.j2", include_str!("../../templates/admin/activity.html.j2")),
    ("password.html.j2", include_str!("../../templates/admin/password.html.j2")),
];

fn environment(auth_off: bool, secrets_to_anyone: bool) -> Environment<'static> {
    let mut env = Environment::new();
    env.add_global("auth_off", auth_off);
    env.add_global("secrets_to_anyone", secrets_to_anyone);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    for (name, source) in TEMPLATES {
        env.add_template(name, source).expect("admin templates parse");
    }
    env
}

/// The admin routes (`/admin`, `/admin/...`), merged with the API's on its listener by `app`.
pub fn router(api: ApiState) -> Router {
    let auth_off = api.config().api.auth_strategy == crate::config::ApiAuthStrategy::Noauth;
    let secrets_to_anyone = api.config().boot.script_secrets == crate::config::ScriptSecrets::Any;
    let state = AdminState {
        auth_off,
        api,
        templates: Arc::new(environment(auth_off, secrets_to_anyone)),
        sessions: Arc::new(Sessions::new()),
        limiter: Arc::new(LoginLimiter::new(session::LOGIN_ATTEMPTS, session::LOGIN_WINDOW)),
    };
    Router::new()
        .route("/admin", get(|| async { Redirect::to("/admin/") }))
        .route("/admin/", get(nodes_page))
        .route("/admin/activity", get(activity_page))
        .route("/admin/nodes", post(forms::create_node))
        .route("/admin/nodes/{node}", get(node_page))
        .route("/admin/nodes/{node}/{form}", post(forms::node_form))
        .route("/admin/nodes/{node}/{child}/{id}", post(forms::child_form))
        .route("/admin/nodes/{node}/{child}/{id}/delete", post(forms::child_form))
        .route("/admin/login", get(login_page).post(login))
        .route("/admin/logout", post(logout))
        .route("/admin/password", get(password::password_page).post(password::set_password))
        .with_state(state)
}

/// True when the request reached us through TLS (a terminating proxy says so).
fn behind_tls(headers: &HeaderMap) -> bool {
    headers
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
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}

impl AdminState {
    /// The node service both front ends write through.
    fn nodes(&self) -> &crate::nodes::NodeService {
        self.api.nodes()
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

/// The login page: opens (or reuses) an anonymous session so the form carries a CSRF token.
async fn login_page(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    let secure = behind_tls(&headers);
    if state.auth_off {
        // No authentication, as for the API: a session (for CSRF tokens and messages) without
        // a log-in. The page says so on every screen.
        if cookie_value(&headers)
            .and_then(|c| state.sessions.get(&c))
            .is_some_and(|s| s.user.is_some())
        {
            return Redirect::to("/admin/").into_response();
        }
        let (cookie, _) = state.sessions.open(Some(NOAUTH_USER.to_owned()));
        let mut response = Redirect::to("/admin/").into_response();
        response.headers_mut().append(header::SET_COOKIE, cookie_header(&cookie, secure, None));
        return response;
    }
    if let Some(s) = cookie_value(&headers).and_then(|c| state.sessions.get(&c)) {
        if s.user.is_some() {
            return Redirect::to("/admin/").into_response();
        }
        return state.render(
            StatusCode::OK,
            "login.html.j2",
            context! { user => (), csrf => s.csrf, error => () },
        );
    }
    let (cookie, s) = state.sessions.open(None);
    let mut response = state.render(
        StatusCode::OK,
        "login.html.j2",
        context! { user => (), csrf => s.csrf, error => () },
    );
    response.headers_mut().append(header::SET_COOKIE, cookie_header(&cookie, secure, None));
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
    let secure = behind_tls(&headers);
    if state.auth_off {
        return Redirect::to("/admin/login").into_response();
    }
    let cookie = cookie_value(&headers);
    let Some(anonymous) = cookie.as_deref().and_then(|c| state.sessions.get(c)) else {
        return csrf_refused(&state);
    };
    if !session::same_token(form.get("csrf").map_or("", String::as_str), &anonymous.csrf) {
        return csrf_refused(&state);
    }
    let client = client_key(&connect);
    if !state.limiter.attempt(&client) {
        tracing::warn!(client, "admin login rate limited");
        return state.render(
            StatusCode::TOO_MANY_REQUESTS,
            "login.html.j2",
            context! { user => (), csrf => anonymous.csrf,
            error => "Too many login attempts from this address; try again later." },
        );
    }
    let user = form.get("username").cloned().unwrap_or_default();
    let password = form.get("password").cloned().unwrap_or_default();
    let api = state.api.clone();
    let checked_user = user.clone();
    let ok = tokio::task::spawn_blocking(move || api.verify_password(&checked_user, &password))
        .await
        .unwrap_or(false);
    if !ok {
        tracing::warn!(client, "admin login failed");
        return state.render(
            StatusCode::UNAUTHORIZED,
            "login.html.j2",
            context! { user => (), csrf => anonymous.csrf, error => "Wrong user or password." },
        );
    }
    state.limiter.reset(&client);
    if let Some(old) = cookie.as_deref() {
        state.sessions.close(old);
    }
    // A new session id at log-in: a planted anonymous cookie never becomes a logged-in one.
    let (cookie, _) = state.sessions.open(Some(user.clone()));
    tracing::info!(client, user, "admin login");
    let mut response = Redirect::to("/admin/").into_response();
    response.headers_mut().append(header::SET_COOKIE, cookie_header(&cookie, secure, None));
    response
}

fn csrf_refused(state: &AdminState) -> Response {
    state.render(
        StatusCode::FORBIDDEN,
        "base.html.j2",
        context! { user => (), csrf => "",
                   error => "This form has expired or did not come from this page (CSRF check failed). Go back, reload and try again." },
    )
}

/// A logged-in session from the request's cookie, or the redirect to the login page.
fn logged_in(state: &AdminState, headers: &HeaderMap) -> Result<session::Session, Box<Response>> {
    cookie_value(headers)
        .and_then(|c| state.sessions.get(&c))
        .filter(|s| s.user.is_some())
        .ok_or_else(|| Box::new(Redirect::to("/admin/login").into_response()))
}

/// Checks the session and the form's CSRF token of a POST.
fn checked_post(
    state: &AdminState,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<session::Session, Box<Response>> {
    let s = logged_in(state, headers)?;
    if session::same_token(form.get("csrf").map_or("", String::as_str), &s.csrf) {
        Ok(s)
    } else {
        Err(Box::new(csrf_refused(state)))
    }
}

async fn logout(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(refused) = checked_post(&state, &headers, &form) {
        return *refused;
    }
    if let Some(c) = cookie_value(&headers) {
        state.sessions.close(&c);
    }
    let mut response = Redirect::to("/admin/login").into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, cookie_header("", behind_tls(&headers), Some(0)));
    response
}

#[derive(Serialize)]
struct NodeRow {
    uuid: String,
    name: String,
    power_state: Option<&'static str>,
    provision_state: &'static str,
    scenario: String,
    last_error: Option<String>,
}

async fn nodes_page(
    State(state): State<AdminState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    match logged_in(&state, &headers) {
        Ok(s) => {
            // "Enroll" on an unknown MAC comes back here with the MAC to prefill the form.
            let enroll = query.get("enroll").and_then(|m| m.parse::<crate::model::MacAddr>().ok());
            render_nodes(&state, &s, StatusCode::OK, None, None, enroll).await
        }
        Err(redirect) => *redirect,
    }
}

/// How often the boot activity frame redraws itself (`<meta http-equiv="refresh">`).
const ACTIVITY_REFRESH_SECS: u32 = 15;

/// The boot activity of the last hour, a page of its own that the nodes list frames and that
/// redraws itself: live without JavaScript. Only this page may be framed, and only by the admin
/// page itself.
async fn activity_page(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Err(redirect) = logged_in(&state, &headers) {
        return *redirect;
    }
    let minutes = state.api.metrics().boot_activity();
    let mut response = state.render(
        StatusCode::OK,
        "activity.html.j2",
        context! {
            svg => minijinja::Value::from_safe_string(activity::svg(&minutes)),
            summary => activity::summary(&minutes),
            refresh => ACTIVITY_REFRESH_SECS,
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

/// The nodes list (with the create form), and the outcome of a form when there was one.
async fn render_nodes(
    state: &AdminState,
    s: &session::Session,
    status: StatusCode,
    notice: Option<String>,
    problem: Option<String>,
    enroll: Option<crate::model::MacAddr>,
) -> Response {
    let notice = notice.or_else(|| state.sessions.take_flash(&s.cookie));
    let default = state.nodes().default_storage();
    let records = state.nodes().nodes().await;
    // MACs seen recently that belong to no node (now: the node may have been made since).
    let mut unknown: Vec<minijinja::Value> = Vec::new();
    if let Ok(records) = &records {
        let known: std::collections::HashSet<crate::model::MacAddr> =
            records.iter().flat_map(|r| r.ports.iter().map(|p| p.address)).collect();
        let mut seen = std::collections::HashSet::new();
        for hit in state.api.recent_boots().newest_first() {
            if let (Some(mac), "unknown") = (hit.mac, hit.what)
                && !known.contains(&mac)
                && seen.insert(mac)
            {
                unknown.push(context! {
                    mac => mac.to_string(), client => hit.client.to_string(), via => hit.via,
                    at => crate::timefmt::format_unix(hit.at.max(0) as u64),
                });
            }
        }
    }
    let (nodes, error) = match records {
        Ok(records) => (
            records
                .iter()
                .map(|r| NodeRow {
                    uuid: r.node.uuid.clone(),
                    name: r.node.name.clone(),
                    power_state: r.node.power_state.map(|p| p.as_str()),
                    provision_state: r.node.provision_state.as_str(),
                    scenario: match crate::boot::decide(r, default) {
                        Ok(scenario) => scenario.name().to_owned(),
                        Err(e) => format!("not bootable: {e}"),
                    },
                    last_error: r.node.last_error.clone(),
                })
                .collect::<Vec<_>>(),
            problem,
        ),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let sync = sync_status(state).await;
    state.render(
        status,
        "nodes.html.j2",
        context! { user => s.user.clone(), csrf => s.csrf.clone(), notice => notice,
        nodes => minijinja::value::Serde(nodes), error => error, sync => sync,
        unknown_macs => unknown, enroll_mac => enroll.map(|m| m.to_string()) },
    )
}

/// The Cinder sync status: whether this process syncs, the last pass (by `serve` or `bootvol
/// sync`), the last clean one, and the volume attachments by state.
async fn sync_status(state: &AdminState) -> minijinja::Value {
    let enabled = state.nodes().conductor().storage().cinder().is_some();
    let every = state.api.config().cinder.sync_interval;
    let found = state.nodes().sync_overview().await;
    let time = |t: i64| crate::timefmt::format_unix(t.max(0) as u64);
    match found {
        Ok((last, counts)) => context! {
            enabled => enabled,
            interval => every,
            last => last.map(|p| context! {
                ran_by => p.ran_by.as_str(), outcome => p.outcome.as_str(),
                started_at => time(p.started_at), finished_at => time(p.finished_at),
                checked => p.checked, updated => p.updated, drifted => p.drifted, errors => p.errors,
                message => p.message.clone(), last_ok_at => p.last_ok_at.map(time),
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
