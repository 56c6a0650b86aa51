//! `[http]`, `[api]` and `[metrics]`: the HTTP listeners, what each connection and client may
//! take ([`ConnectionLimits`]), and the checks of their addresses, URLs, TLS files and limits.
//!
//! It must not know how a listener is served: no sockets, no HTTP types, no TLS library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{Invalid, PUBLIC_URL_AUTO, require_absolute};

/// `[metrics]`: `/metrics`, `/healthz` and `/readyz` are always on the API listener; `listen`
/// serves them (and nothing else) on one more address, for a scraper kept off the API's network.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    pub listen: Option<SocketAddr>,
}

impl MetricsSection {
    /// The metrics listener's limits: a scraper or two, with the API's timeouts.
    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: METRICS_MAX_CONNECTIONS,
            max_connections_per_client: METRICS_MAX_CONNECTIONS / 4,
            ..ConnectionLimits::DEFAULT
        }
    }

    pub(super) fn connections(&self) -> usize {
        if self.listen.is_some() { METRICS_MAX_CONNECTIONS } else { 0 }
    }
}

/// Connections the `[metrics] listen` listener takes at once.
const METRICS_MAX_CONNECTIONS: usize = 32;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// The boot listener nodes talk to.
    pub listen: SocketAddr,
    /// How nodes reach that listener; used in chain, kernel and initrd URLs. `"auto"`: from
    /// this box's address (`bootvol_runtime::public_url` follows it), followed while `serve` runs.
    pub public_url: String,
    /// Kernels, ramdisks and images served under `/files/`.
    pub files_root: PathBuf,
    /// Seconds a client has to send a request's headers (from its first byte, or from accept).
    pub header_timeout: u64,
    /// Seconds a keep-alive connection may stay idle between requests.
    pub idle_timeout: u64,
    /// Seconds a request's body has to arrive in full (from the end of its headers); past it a
    /// body still arriving goes on only while it averages `body_min_rate`.
    pub body_timeout: u64,
    /// Bytes a second a request body must average to go on past `body_timeout` (0: never).
    pub body_min_rate: u64,
    /// Seconds a response may go without the client taking any of it; then it is cut.
    pub send_timeout: u64,
    /// Connections open at once; past it the one idle or stalled the longest is closed, else
    /// the new one.
    pub max_connections: usize,
    /// Connections open at once from one client address; past it a new one is closed at once.
    pub max_connections_per_client: usize,
}

impl Default for HttpSection {
    fn default() -> Self {
        HttpSection {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            public_url: "http://127.0.0.1:8080".into(),
            files_root: PathBuf::from("/var/lib/bootvol/files"),
            header_timeout: DEFAULT_LIMITS.0,
            idle_timeout: DEFAULT_LIMITS.1,
            body_timeout: DEFAULT_DEADLINES.0,
            body_min_rate: DEFAULT_DEADLINES.1,
            send_timeout: DEFAULT_DEADLINES.2,
            max_connections: DEFAULT_LIMITS.2,
            max_connections_per_client: DEFAULT_LIMITS.3,
        }
    }
}

/// `header_timeout`, `idle_timeout`, `max_connections`, `max_connections_per_client`: the same
/// defaults on both HTTP listeners.
const DEFAULT_LIMITS: (u64, u64, usize, usize) = (10, 60, 400, 64);

/// `body_timeout` (seconds), `body_min_rate` (bytes a second), `send_timeout` (seconds): the
/// same defaults on both HTTP listeners.
const DEFAULT_DEADLINES: (u64, u64, u64) = (10, 512, 30);

/// What one HTTP listener (`[http]` or `[api]`) allows each connection and each client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    /// Bytes a second; 0: a body never goes on past `body_timeout`.
    pub body_min_rate: u64,
    pub send_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_client: usize,
}

impl ConnectionLimits {
    /// The defaults of `[http]` and `[api]`.
    pub const DEFAULT: ConnectionLimits = ConnectionLimits {
        header_timeout: Duration::from_secs(DEFAULT_LIMITS.0),
        idle_timeout: Duration::from_secs(DEFAULT_LIMITS.1),
        body_timeout: Duration::from_secs(DEFAULT_DEADLINES.0),
        body_min_rate: DEFAULT_DEADLINES.1,
        send_timeout: Duration::from_secs(DEFAULT_DEADLINES.2),
        max_connections: DEFAULT_LIMITS.2,
        max_connections_per_client: DEFAULT_LIMITS.3,
    };
}

/// The limits of a listener's section (`[http]` and `[api]` spell them alike).
macro_rules! connection_limits {
    ($section:expr) => {
        ConnectionLimits {
            header_timeout: Duration::from_secs($section.header_timeout),
            idle_timeout: Duration::from_secs($section.idle_timeout),
            body_timeout: Duration::from_secs($section.body_timeout),
            body_min_rate: $section.body_min_rate,
            send_timeout: Duration::from_secs($section.send_timeout),
            max_connections: $section.max_connections,
            max_connections_per_client: $section.max_connections_per_client,
        }
    };
}

impl HttpSection {
    pub fn connection_limits(&self) -> ConnectionLimits {
        connection_limits!(self)
    }
}

impl ApiSection {
    pub fn connection_limits(&self) -> ConnectionLimits {
        connection_limits!(self)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSection {
    /// The Ironic-compatible REST API (`bootvol serve`).
    pub listen: SocketAddr,
    /// Ironic's option: `http_basic` (the default; a bcrypt htpasswd file) or `noauth` (only
    /// when set explicitly).
    pub auth_strategy: ApiAuthStrategy,
    /// Ironic's option: the htpasswd file of `http_basic` (bcrypt entries only), read at start.
    pub http_basic_auth_user_file: PathBuf,
    /// Where `serve` shows the one-time admin password it generates when `http_basic` has no
    /// user yet (never the log): the console, and the file the login prompt shows
    /// (`/etc/issue.d/bootvol.issue` links to it). Files that cannot be opened are skipped.
    pub first_password_files: Vec<PathBuf>,
    /// Ironic's option: the URL clients reach the API at (`https://bootvol.example:6385`, for a
    /// proxy or a wildcard listener), the base of every link in an answer. Empty: the
    /// listener's bound address. The request's `Host` header is never used.
    pub public_endpoint: String,
    /// The API and admin page over TLS (rustls): the PEM certificate chain (the server's
    /// certificate first) and its PEM private key (PKCS#8, PKCS#1 or SEC1). Both or neither;
    /// with them, `listen` answers TLS only, the TLS handshake bounded by `header_timeout`.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// A second, plain-HTTP listener of the REST API alone (no admin page), on a loopback
    /// address only (the appliance's `127.0.0.1:6386`, for tools on the box itself).
    pub loopback_listen: Option<SocketAddr>,
    /// Ironic's option: the most items one list answer holds, and the page a list asked
    /// without `limit` gets; the rest is behind the answer's `next` link.
    pub max_limit: usize,
    /// As in `[http]`.
    pub header_timeout: u64,
    pub idle_timeout: u64,
    pub body_timeout: u64,
    pub body_min_rate: u64,
    pub send_timeout: u64,
    pub max_connections: usize,
    pub max_connections_per_client: usize,
}

impl Default for ApiSection {
    fn default() -> Self {
        ApiSection {
            listen: SocketAddr::from(([127, 0, 0, 1], 6385)),
            auth_strategy: ApiAuthStrategy::HttpBasic,
            http_basic_auth_user_file: PathBuf::from("/etc/bootvol/htpasswd"),
            first_password_files: vec![
                PathBuf::from("/dev/console"),
                PathBuf::from("/run/bootvol/first-password.issue"),
            ],
            public_endpoint: String::new(),
            tls_cert: None,
            tls_key: None,
            loopback_listen: None,
            max_limit: 1000,
            header_timeout: DEFAULT_LIMITS.0,
            idle_timeout: DEFAULT_LIMITS.1,
            body_timeout: DEFAULT_DEADLINES.0,
            body_min_rate: DEFAULT_DEADLINES.1,
            send_timeout: DEFAULT_DEADLINES.2,
            max_connections: DEFAULT_LIMITS.2,
            max_connections_per_client: DEFAULT_LIMITS.3,
        }
    }
}

/// How the REST API authenticates its clients (`[api] auth_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiAuthStrategy {
    HttpBasic,
    Noauth,
}

impl MetricsSection {
    /// `listen` may not take the address of another listener (`taken`).
    pub(super) fn validate_listen(&self, taken: &[SocketAddr]) -> Result<(), Invalid> {
        if let Some(listen) = self.listen
            && taken.contains(&listen)
        {
            return Err((
                "metrics.listen",
                format!("{listen} is already the boot HTTP or the API listener's address"),
            ));
        }
        Ok(())
    }
}

impl HttpSection {
    /// The boot URL given to nodes: `auto`, or a plain `http(s)://` URL an iPXE script can
    /// carry, without a trailing `/`.
    pub(super) fn validate_public_url(&self) -> Result<(), Invalid> {
        if self.public_url != PUBLIC_URL_AUTO {
            crate::model::check_http_url(&self.public_url).map_err(|m| ("http.public_url", m))?;
            crate::model::check_script_value(&self.public_url)
                .map_err(|m| ("http.public_url", m))?;
            if self.public_url.ends_with('/') {
                return Err(("http.public_url", "leave out the trailing '/'".into()));
            }
        }
        Ok(())
    }

    pub(super) fn validate_limits(&self) -> Result<(), Invalid> {
        self.connection_limits().check(&HTTP_LIMIT_KEYS)
    }
}

/// The largest `[api] max_limit`.
const MAX_PAGE: usize = 10_000;

impl ApiSection {
    /// The base of the API's links: empty, or a plain URL.
    pub(super) fn validate_public_endpoint(&self) -> Result<(), Invalid> {
        if !self.public_endpoint.is_empty() {
            crate::model::check_http_url(&self.public_endpoint)
                .map_err(|m| ("api.public_endpoint", m))?;
            if self.public_endpoint.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"')
            {
                return Err(("api.public_endpoint", "must be a plain URL".into()));
            }
        }
        Ok(())
    }

    /// The certificate and its key: both or neither, at absolute paths.
    pub(super) fn validate_tls(&self) -> Result<(), Invalid> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err((
                    "api.tls_key",
                    "must be set with api.tls_cert (both or neither)".into(),
                ));
            }
            (None, Some(_)) => {
                return Err((
                    "api.tls_cert",
                    "must be set with api.tls_key (both or neither)".into(),
                ));
            }
            _ => {}
        }
        for (key, path) in [("api.tls_cert", &self.tls_cert), ("api.tls_key", &self.tls_key)] {
            if let Some(path) = path {
                require_absolute(key, path)?;
            }
        }
        Ok(())
    }

    /// The plain-HTTP listener: on a loopback address, and not the address of the boot HTTP
    /// listener (`http_listen`) or the API's own.
    pub(super) fn validate_loopback_listen(&self, http_listen: SocketAddr) -> Result<(), Invalid> {
        if let Some(listen) = self.loopback_listen {
            if !listen.ip().is_loopback() {
                return Err((
                    "api.loopback_listen",
                    format!("{listen} is not a loopback address (it serves plain HTTP)"),
                ));
            }
            if [http_listen, self.listen].contains(&listen) {
                return Err((
                    "api.loopback_listen",
                    format!("{listen} is already the boot HTTP or the API listener's address"),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn validate_first_password_files(&self) -> Result<(), Invalid> {
        if let Some(path) = self.first_password_files.iter().find(|p| !p.is_absolute()) {
            return Err((
                "api.first_password_files",
                format!("{} is not an absolute path", path.display()),
            ));
        }
        Ok(())
    }

    pub(super) fn validate_limits(&self) -> Result<(), Invalid> {
        // A page's children are read by the ids of its nodes, one statement parameter each.
        if !(1..=MAX_PAGE).contains(&self.max_limit) {
            return Err(("api.max_limit", format!("must be from 1 to {MAX_PAGE}")));
        }
        self.connection_limits().check(&API_LIMIT_KEYS)
    }
}

/// The keys one listener's limits are named by in errors (`http.` or `api.`, then the key).
struct LimitKeys {
    header_timeout: &'static str,
    idle_timeout: &'static str,
    body_timeout: &'static str,
    body_min_rate: &'static str,
    send_timeout: &'static str,
    max_connections: &'static str,
    max_connections_per_client: &'static str,
}

macro_rules! limit_keys {
    ($section:literal) => {
        LimitKeys {
            header_timeout: concat!($section, ".header_timeout"),
            idle_timeout: concat!($section, ".idle_timeout"),
            body_timeout: concat!($section, ".body_timeout"),
            body_min_rate: concat!($section, ".body_min_rate"),
            send_timeout: concat!($section, ".send_timeout"),
            max_connections: concat!($section, ".max_connections"),
            max_connections_per_client: concat!($section, ".max_connections_per_client"),
        }
    };
}

const HTTP_LIMIT_KEYS: LimitKeys = limit_keys!("http");
const API_LIMIT_KEYS: LimitKeys = limit_keys!("api");

impl ConnectionLimits {
    /// The timeouts, then the caps.
    fn check(&self, keys: &LimitKeys) -> Result<(), Invalid> {
        self.check_timeouts(keys)?;
        self.check_caps(keys)
    }

    /// Every timeout between 1 second and its ceiling, and a body rate a client can keep up.
    fn check_timeouts(&self, keys: &LimitKeys) -> Result<(), Invalid> {
        let header = self.header_timeout.as_secs();
        if !(1..=300).contains(&header) {
            return Err((
                keys.header_timeout,
                format!("{header} is not between 1 and 300 seconds"),
            ));
        }
        let idle = self.idle_timeout.as_secs();
        if !(1..=3600).contains(&idle) {
            return Err((keys.idle_timeout, format!("{idle} is not between 1 and 3600 seconds")));
        }
        let body = self.body_timeout.as_secs();
        if !(1..=3600).contains(&body) {
            return Err((keys.body_timeout, format!("{body} is not between 1 and 3600 seconds")));
        }
        // A guard against typos: no client keeps up a gigabyte a second.
        if self.body_min_rate > 1_000_000_000 {
            return Err((
                keys.body_min_rate,
                format!("{} is more than 1000000000 bytes a second", self.body_min_rate),
            ));
        }
        let send = self.send_timeout.as_secs();
        if !(1..=3600).contains(&send) {
            return Err((keys.send_timeout, format!("{send} is not between 1 and 3600 seconds")));
        }
        Ok(())
    }

    /// At least one connection, and a per-client cap within the overall one.
    fn check_caps(&self, keys: &LimitKeys) -> Result<(), Invalid> {
        if self.max_connections == 0 {
            return Err((keys.max_connections, "must be at least 1".into()));
        }
        if !(1..=self.max_connections).contains(&self.max_connections_per_client) {
            return Err((
                keys.max_connections_per_client,
                format!(
                    "{} is not between 1 and max_connections ({})",
                    self.max_connections_per_client, self.max_connections
                ),
            ));
        }
        Ok(())
    }
}
