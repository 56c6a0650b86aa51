//! The configuration file: TOML with the spec's section and key names, read once at start and
//! passed down. Every key has a default; unknown keys and bad values fail with the key's name.
//!
//! Pure: [`Config::from_toml`] takes text. Only [`Config::load`] reads a file.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::boot::BootSettings;
use crate::model::StorageInterfaceName;

/// Where bootvol looks for its configuration when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/bootvol/bootvol.toml";

/// A configuration error, naming the file and the key.
/// The value of `[http] public_url` that asks for the boot URL from this box's address.
pub const PUBLIC_URL_AUTO: &str = "auto";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: {key}: {message}")]
    Invalid { origin: String, key: &'static str, message: String },
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(rename = "DEFAULT", default)]
    pub default: DefaultSection,
    #[serde(default)]
    pub database: DatabaseSection,
    #[serde(default)]
    pub http: HttpSection,
    #[serde(default)]
    pub tftp: TftpSection,
    #[serde(default)]
    pub api: ApiSection,
    #[serde(default)]
    pub cinder: CinderSection,
    #[serde(default)]
    pub keystone: KeystoneSection,
    #[serde(default)]
    pub boot: BootSection,
    #[serde(default)]
    pub conductor: ConductorSection,
    #[serde(default)]
    pub deploy: DeploySection,
    #[serde(default)]
    pub notifications: NotificationsSection,
    #[serde(default)]
    pub dhcp: DhcpSection,
    #[serde(default)]
    pub metrics: MetricsSection,
}

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

    fn connections(&self) -> usize {
        if self.listen.is_some() { METRICS_MAX_CONNECTIONS } else { 0 }
    }
}

/// Connections the `[metrics] listen` listener takes at once.
const METRICS_MAX_CONNECTIONS: usize = 32;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConductorSection {
    /// Seconds each BMC call may take.
    pub power_timeout: u64,
    /// Seconds a power action waits for the node to reach the new state.
    pub power_state_wait: u64,
    /// Seconds between two checks of power states changed out of band (in `serve`); 0: off.
    pub power_sync_interval: u64,
}

impl Default for ConductorSection {
    fn default() -> Self {
        ConductorSection { power_timeout: 20, power_state_wait: 60, power_sync_interval: 60 }
    }
}

/// Scenario 4: the deploy ramdisk (built by `image/build-deploy-ramdisk.sh`) under
/// `[http] files_root`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeploySection {
    pub kernel: String,
    pub ramdisk: String,
    /// Extra kernel arguments of the deploy ramdisk.
    pub kernel_append_params: String,
    /// Seconds the ramdisk has to write the image and call back.
    pub callback_timeout: u64,
}

impl Default for DeploySection {
    fn default() -> Self {
        DeploySection {
            kernel: "deploy/vmlinuz".into(),
            ramdisk: "deploy/initrd.img".into(),
            kernel_append_params: "console=ttyS0".into(),
            callback_timeout: 1800,
        }
    }
}

/// Event delivery to a webhook (optional).
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotificationsSection {
    /// Where events are POSTed; empty: events are only kept in the database.
    pub webhook_url: String,
    /// The HMAC-SHA256 key of the `X-Bootvol-Signature` header.
    pub webhook_secret: String,
    pub max_attempts: u32,
}

impl Default for NotificationsSection {
    fn default() -> Self {
        NotificationsSection {
            webhook_url: String::new(),
            webhook_secret: String::new(),
            max_attempts: 8,
        }
    }
}

impl std::fmt::Debug for NotificationsSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = if self.webhook_secret.is_empty() { "" } else { crate::secrets::MASK };
        f.debug_struct("NotificationsSection")
            .field("webhook_url", &self.webhook_url)
            .field("webhook_secret", &secret)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DefaultSection {
    /// Only these may be set on nodes. The spec: none but `noop` until the operator lists them.
    pub enabled_storage_interfaces: Vec<StorageInterfaceName>,
    /// The interface of nodes that record none.
    pub default_storage_interface: StorageInterfaceName,
}

impl Default for DefaultSection {
    fn default() -> Self {
        DefaultSection {
            enabled_storage_interfaces: vec![StorageInterfaceName::Noop],
            default_storage_interface: StorageInterfaceName::Noop,
        }
    }
}

/// Where the data lives: a SQLite file (`path`, the default: one box) or a PostgreSQL server
/// (`url`: several appliances on one database). Exactly one of the two.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawDatabaseSection")]
pub struct DatabaseSection {
    pub path: PathBuf,
    /// `postgres://user@host:port/db[?sslmode=require]`: PostgreSQL instead of `path`.
    pub url: Option<String>,
    /// The PostgreSQL password, in a file of its own (never in the configuration).
    pub password_file: Option<PathBuf>,
    /// The CA certificates (PEM) the PostgreSQL server's certificate must chain to, when the
    /// URL asks for TLS.
    pub ca_file: Option<PathBuf>,
    /// How often `bootvol serve` checks whether another process (such as `bootvol apply`)
    /// changed the database, in milliseconds.
    pub watch_interval_ms: u64,
}

impl Default for DatabaseSection {
    fn default() -> Self {
        DatabaseSection {
            path: PathBuf::from("/var/lib/bootvol/bootvol.db"),
            url: None,
            password_file: None,
            ca_file: None,
            watch_interval_ms: 500,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDatabaseSection {
    path: Option<PathBuf>,
    url: Option<String>,
    password_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    watch_interval_ms: Option<u64>,
}

impl TryFrom<RawDatabaseSection> for DatabaseSection {
    type Error = String;

    fn try_from(raw: RawDatabaseSection) -> Result<Self, String> {
        let default = DatabaseSection::default();
        if raw.path.is_some() && raw.url.is_some() {
            return Err("set either path (SQLite) or url (PostgreSQL), not both".into());
        }
        if raw.url.is_none() && (raw.password_file.is_some() || raw.ca_file.is_some()) {
            return Err("password_file and ca_file go with url (PostgreSQL)".into());
        }
        Ok(DatabaseSection {
            path: raw.path.unwrap_or(default.path),
            url: raw.url,
            password_file: raw.password_file,
            ca_file: raw.ca_file,
            watch_interval_ms: raw.watch_interval_ms.unwrap_or(default.watch_interval_ms),
        })
    }
}

impl DatabaseSection {
    /// What a message names the database by: the file, or the URL.
    pub fn shown(&self) -> String {
        match &self.url {
            Some(url) => url.clone(),
            None => self.path.display().to_string(),
        }
    }
}

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
pub struct TftpSection {
    pub listen: SocketAddr,
    /// iPXE binaries and other files served by name.
    pub root: PathBuf,
    /// The largest `blksize` granted (RFC 2348); 1468 fits a 1500-byte Ethernet frame.
    pub max_block_size: u16,
    /// The largest `windowsize` granted (RFC 7440).
    pub max_window_size: u16,
    /// Seconds before a block is sent again.
    pub timeout: u64,
    /// Retransmissions before a silent client is given up.
    pub retries: u32,
    /// Transfers open at once (each holds a thread and a socket until it ends); past it,
    /// "server busy".
    pub max_transfers: usize,
    /// Transfers open at once for one client address; past it, "server busy" to that address.
    pub max_transfers_per_client: usize,
}

impl Default for TftpSection {
    fn default() -> Self {
        TftpSection {
            listen: SocketAddr::from(([0, 0, 0, 0], 69)),
            root: PathBuf::from("/usr/lib/ipxe"),
            max_block_size: 1468,
            max_window_size: 16,
            timeout: 1,
            retries: 5,
            max_transfers: 200,
            max_transfers_per_client: 32,
        }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CinderAuthStrategy {
    Noauth,
    Keystone,
}

/// Which Cinder attach API to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CinderApi {
    /// The attachments API when the server offers microversion 3.44, else the legacy actions.
    Auto,
    /// Always the attachments API (create, complete, delete).
    Attachments,
    /// Always the legacy `os-reserve` / `os-initialize_connection` / `os-attach` actions.
    Legacy,
}

#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CinderSection {
    /// A fixed Cinder endpoint; empty means "find it in the Keystone catalog".
    pub url: String,
    /// Seconds every Cinder request may take.
    pub url_timeout: u64,
    /// Retries of requests that are safe to repeat.
    pub retries: u32,
    pub auth_strategy: CinderAuthStrategy,
    pub toggle_attachments_with_power: bool,
    /// `noauth`: the user and project sent as `X-Auth-Token: <user>:<project>`.
    pub noauth_user: String,
    pub noauth_project: String,
    pub api: CinderApi,
    /// Ask Cinder for every path to a volume (`target_portals`...), not just one.
    pub multipath: bool,
    /// A PEM file of CA certificates to trust for `https://` (Cinder and Keystone).
    pub ca_file: Option<PathBuf>,
    /// Verify TLS certificates; turn off only on a lab network.
    pub verify_tls: bool,
    /// Seconds between two passes of the background sync in `bootvol serve`; 0 turns it off.
    pub sync_interval: u64,
}

impl Default for CinderSection {
    fn default() -> Self {
        CinderSection {
            url: String::new(),
            url_timeout: 30,
            retries: 3,
            auth_strategy: CinderAuthStrategy::Noauth,
            toggle_attachments_with_power: true,
            noauth_user: "bootvol".into(),
            noauth_project: "bootvol".into(),
            api: CinderApi::Auto,
            multipath: false,
            ca_file: None,
            verify_tls: true,
            sync_interval: 300,
        }
    }
}

impl std::fmt::Debug for CinderSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CinderSection")
            .field("url", &self.url)
            .field("url_timeout", &self.url_timeout)
            .field("retries", &self.retries)
            .field("auth_strategy", &self.auth_strategy)
            .field("toggle_attachments_with_power", &self.toggle_attachments_with_power)
            .field("noauth_user", &self.noauth_user)
            .field("noauth_project", &self.noauth_project)
            .field("api", &self.api)
            .field("multipath", &self.multipath)
            .field("ca_file", &self.ca_file)
            .field("verify_tls", &self.verify_tls)
            .field("sync_interval", &self.sync_interval)
            .finish()
    }
}

/// Keystone v3, for `[cinder] auth_strategy = "keystone"`: Ironic's `[cinder]` keystoneauth
/// option names. Either a user (name or id) with a password, or an application credential.
#[derive(Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeystoneSection {
    /// The identity endpoint, e.g. `https://keystone.example:5000/v3` (with or without `/v3`).
    pub auth_url: String,
    pub username: String,
    pub user_id: String,
    pub password: String,
    pub user_domain_name: String,
    pub user_domain_id: String,
    pub project_name: String,
    pub project_id: String,
    pub project_domain_name: String,
    pub project_domain_id: String,
    pub application_credential_id: String,
    pub application_credential_secret: String,
    /// Catalog service type; empty means `block-storage`, then `volumev3`, `volume`.
    pub service_type: String,
    /// Endpoint interface: `public` (default), `internal` or `admin`.
    pub interface: String,
    pub region_name: String,
}

impl std::fmt::Debug for KeystoneSection {
    /// Secrets are shown as `******`, like everywhere else.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masked = |s: &str| if s.is_empty() { "" } else { crate::secrets::MASK };
        f.debug_struct("KeystoneSection")
            .field("auth_url", &self.auth_url)
            .field("username", &self.username)
            .field("user_id", &self.user_id)
            .field("password", &masked(&self.password))
            .field("user_domain_name", &self.user_domain_name)
            .field("user_domain_id", &self.user_domain_id)
            .field("project_name", &self.project_name)
            .field("project_id", &self.project_id)
            .field("project_domain_name", &self.project_domain_name)
            .field("project_domain_id", &self.project_domain_id)
            .field("application_credential_id", &self.application_credential_id)
            .field("application_credential_secret", &masked(&self.application_credential_secret))
            .field("service_type", &self.service_type)
            .field("interface", &self.interface)
            .field("region_name", &self.region_name)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BootSection {
    /// Attempts to attach SAN volumes before the script gives up and hands back to the firmware.
    pub san_attempts: u32,
    /// Seconds between attempts.
    pub san_retry_delay: u32,
    /// A directory whose files override the built-in templates of the same name
    /// (`ipxe/san.ipxe.j2`, `ipxe/default.ipxe.j2`...).
    pub templates_dir: Option<PathBuf>,
    /// Who may fetch a script that carries a secret (CHAP), and the deploy ramdisk's token.
    pub script_secrets: ScriptSecrets,
    /// What opens a node's boot window, the only time its secret-carrying script goes out
    /// (with `script_secrets = "neighbour"`).
    pub secret_window: SecretWindow,
    /// How long a boot window lasts from its opening, in seconds.
    pub secret_window_seconds: u64,
}

/// What opens a boot window (`[boot] secret_window`): see `boot_window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretWindow {
    /// bootvol powered the node on or rebooted it, or saw it start a boot (its ProxyDHCP
    /// answered the node's MAC, or the node fetched the first file of its boot chain). The
    /// default.
    Boot,
    /// Only bootvol's own power-on, reboot or deploy: the strict choice.
    Power,
}

impl SecretWindow {
    pub fn as_str(self) -> &'static str {
        match self {
            SecretWindow::Boot => "boot",
            SecretWindow::Power => "power",
        }
    }
}

/// Who may fetch a node's script when it carries a secret (`[boot] script_secrets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScriptSecrets {
    /// Only a client whose address maps, in the kernel's neighbour table, to a MAC of one of
    /// that node's ports. The default.
    Neighbour,
    /// Any client: for DHCP-relayed (routed) boot networks, where the neighbour is a router,
    /// and for clients on loopback or behind NAT.
    Any,
}

impl Default for BootSection {
    fn default() -> Self {
        BootSection {
            san_attempts: 3,
            san_retry_delay: 5,
            templates_dir: None,
            script_secrets: ScriptSecrets::Neighbour,
            secret_window: SecretWindow::Boot,
            secret_window_seconds: 300,
        }
    }
}

/// The built-in ProxyDHCP (`[dhcp]`): answers netboot clients next to the site's DHCP server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DhcpSection {
    pub mode: DhcpMode,
    /// The links to answer on (required with `mode = "proxy"`).
    pub interfaces: Vec<String>,
    /// Where to listen on each interface: DHCP (67) and PXE boot server discovery (4011).
    pub listen: Vec<SocketAddr>,
    /// Send option 43 "skip boot server discovery" to EFI PXE clients too.
    pub efi_discovery_bypass: bool,
    pub answer: DhcpAnswer,
    /// DHCP relays that forward from an address other than their `giaddr`: a request with
    /// `giaddr` set is answered (to `giaddr`) only when it comes from `giaddr` or from one of
    /// these.
    pub relays: Vec<Ipv4Addr>,
}

/// `[dhcp] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DhcpMode {
    /// No DHCP: the site's DHCP server hands out the boot file (docs/dhcp.md). The default.
    Off,
    /// ProxyDHCP: bootvol answers netboot clients with the boot file, never with an address.
    Proxy,
}

/// `[dhcp] answer`: which clients get a ProxyDHCP reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DhcpAnswer {
    /// Every netboot client (unknown ones get the default script). The default.
    All,
    /// Only MACs that are ports of a node.
    Known,
}

impl Default for DhcpSection {
    fn default() -> Self {
        DhcpSection {
            mode: DhcpMode::Off,
            interfaces: Vec::new(),
            listen: vec![
                SocketAddr::from(([0, 0, 0, 0], 67)),
                SocketAddr::from(([0, 0, 0, 0], 4011)),
            ],
            efi_discovery_bypass: true,
            answer: DhcpAnswer::All,
            relays: Vec::new(),
        }
    }
}

impl DhcpSection {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.mode == DhcpMode::Off {
            return Ok(());
        }
        if self.interfaces.is_empty() {
            return Err((
                "dhcp.interfaces",
                "list the links to answer on (mode = \"proxy\")".into(),
            ));
        }
        for name in &self.interfaces {
            if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
                return Err(("dhcp.interfaces", format!("{name:?} is not an interface name")));
            }
        }
        if self.listen.is_empty() {
            return Err(("dhcp.listen", "list at least one address".into()));
        }
        if let Some(a) = self.listen.iter().find(|a| !a.is_ipv4()) {
            return Err(("dhcp.listen", format!("{a} is not IPv4 (DHCPv4 only)")));
        }
        if let Some(a) = self
            .relays
            .iter()
            .find(|a| a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback())
        {
            return Err(("dhcp.relays", format!("{a} is not a relay's unicast address")));
        }
        Ok(())
    }

    /// The sockets `serve` opens: one per interface and listen address.
    pub fn sockets(&self) -> usize {
        match self.mode {
            DhcpMode::Off => 0,
            DhcpMode::Proxy => self.interfaces.len() * self.listen.len(),
        }
    }
}

/// Descriptors `serve` keeps for itself beside its connections and transfers: standard streams,
/// the runtime's epoll and event descriptors, the three listening sockets, the TFTP wake socket,
/// two SQLite connections (database, WAL and shared-memory files each), measured at 20, plus room
/// for a file being read.
pub const RESERVED_DESCRIPTORS: u64 = 24;

/// What the PostgreSQL engine holds beyond [`RESERVED_DESCRIPTORS`]: three sync clients (each a
/// socket, and its own runtime's epoll and event descriptors) and the change listener's socket,
/// in place of the SQLite files; measured at 12 more.
pub const POSTGRES_DESCRIPTORS: u64 = 16;

fn check_connection_limits(
    section: &str,
    limits: &ConnectionLimits,
) -> Result<(), (&'static str, String)> {
    let key = |name: &str| -> &'static str {
        const KEYS: [&str; 7] = [
            "header_timeout",
            "idle_timeout",
            "body_timeout",
            "body_min_rate",
            "send_timeout",
            "max_connections",
            "max_connections_per_client",
        ];
        const HTTP: [&str; 7] = [
            "http.header_timeout",
            "http.idle_timeout",
            "http.body_timeout",
            "http.body_min_rate",
            "http.send_timeout",
            "http.max_connections",
            "http.max_connections_per_client",
        ];
        const API: [&str; 7] = [
            "api.header_timeout",
            "api.idle_timeout",
            "api.body_timeout",
            "api.body_min_rate",
            "api.send_timeout",
            "api.max_connections",
            "api.max_connections_per_client",
        ];
        let i = KEYS.iter().position(|k| *k == name).unwrap_or(KEYS.len() - 1);
        if section == "http" { HTTP[i] } else { API[i] }
    };
    let header = limits.header_timeout.as_secs();
    if !(1..=300).contains(&header) {
        return Err((key("header_timeout"), format!("{header} is not between 1 and 300 seconds")));
    }
    let idle = limits.idle_timeout.as_secs();
    if !(1..=3600).contains(&idle) {
        return Err((key("idle_timeout"), format!("{idle} is not between 1 and 3600 seconds")));
    }
    let body = limits.body_timeout.as_secs();
    if !(1..=3600).contains(&body) {
        return Err((key("body_timeout"), format!("{body} is not between 1 and 3600 seconds")));
    }
    // A guard against typos: no client keeps up a gigabyte a second.
    if limits.body_min_rate > 1_000_000_000 {
        return Err((
            key("body_min_rate"),
            format!("{} is more than 1000000000 bytes a second", limits.body_min_rate),
        ));
    }
    let send = limits.send_timeout.as_secs();
    if !(1..=3600).contains(&send) {
        return Err((key("send_timeout"), format!("{send} is not between 1 and 3600 seconds")));
    }
    if limits.max_connections == 0 {
        return Err((key("max_connections"), "must be at least 1".into()));
    }
    if !(1..=limits.max_connections).contains(&limits.max_connections_per_client) {
        return Err((
            key("max_connections_per_client"),
            format!(
                "{} is not between 1 and max_connections ({})",
                limits.max_connections_per_client, limits.max_connections
            ),
        ));
    }
    Ok(())
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Config::from_toml(&text, &path.display().to_string())
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.into(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        config.validate().map_err(|(key, message)| ConfigError::Invalid {
            origin: origin.into(),
            key,
            message,
        })?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), (&'static str, String)> {
        let enabled = &self.default.enabled_storage_interfaces;
        if enabled.is_empty() {
            return Err((
                "DEFAULT.enabled_storage_interfaces",
                "list at least one interface (noop)".into(),
            ));
        }
        if !enabled.contains(&self.default.default_storage_interface) {
            return Err((
                "DEFAULT.default_storage_interface",
                format!(
                    "{} is not in enabled_storage_interfaces",
                    self.default.default_storage_interface
                ),
            ));
        }
        if self.http.public_url != PUBLIC_URL_AUTO {
            crate::model::check_http_url(&self.http.public_url)
                .map_err(|m| ("http.public_url", m))?;
            crate::model::check_script_value(&self.http.public_url)
                .map_err(|m| ("http.public_url", m))?;
            if self.http.public_url.ends_with('/') {
                return Err(("http.public_url", "leave out the trailing '/'".into()));
            }
        }
        if !self.api.public_endpoint.is_empty() {
            crate::model::check_http_url(&self.api.public_endpoint)
                .map_err(|m| ("api.public_endpoint", m))?;
            if self
                .api
                .public_endpoint
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '"')
            {
                return Err(("api.public_endpoint", "must be a plain URL".into()));
            }
        }
        if let Some(url) = &self.database.url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err(("database.url", "must start with postgres:// or postgresql://".into()));
        }
        for (key, path) in [
            ("database.password_file", self.database.password_file.as_ref()),
            ("database.ca_file", self.database.ca_file.as_ref()),
        ] {
            if let Some(path) = path.filter(|p| !p.is_absolute()) {
                return Err((key, format!("{} is not an absolute path", path.display())));
            }
        }
        for (key, path) in [
            ("database.path", &self.database.path),
            ("api.http_basic_auth_user_file", &self.api.http_basic_auth_user_file),
            ("http.files_root", &self.http.files_root),
            ("tftp.root", &self.tftp.root),
        ] {
            if !path.is_absolute() {
                return Err((key, format!("{} is not an absolute path", path.display())));
            }
        }
        match (&self.api.tls_cert, &self.api.tls_key) {
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
        for (key, path) in
            [("api.tls_cert", &self.api.tls_cert), ("api.tls_key", &self.api.tls_key)]
        {
            if let Some(path) = path.as_ref().filter(|p| !p.is_absolute()) {
                return Err((key, format!("{} is not an absolute path", path.display())));
            }
        }
        if let Some(listen) = self.api.loopback_listen {
            if !listen.ip().is_loopback() {
                return Err((
                    "api.loopback_listen",
                    format!("{listen} is not a loopback address (it serves plain HTTP)"),
                ));
            }
            if [self.http.listen, self.api.listen].contains(&listen) {
                return Err((
                    "api.loopback_listen",
                    format!("{listen} is already the boot HTTP or the API listener's address"),
                ));
            }
        }
        if let Some(path) = self.api.first_password_files.iter().find(|p| !p.is_absolute()) {
            return Err((
                "api.first_password_files",
                format!("{} is not an absolute path", path.display()),
            ));
        }
        if self.cinder.url_timeout == 0 || self.cinder.url_timeout > 600 {
            return Err((
                "cinder.url_timeout",
                format!("{} is not between 1 and 600 seconds", self.cinder.url_timeout),
            ));
        }
        if self.cinder.retries > 10 {
            return Err(("cinder.retries", format!("{} is more than 10", self.cinder.retries)));
        }
        if !self.cinder.url.is_empty() {
            crate::model::check_http_url(&self.cinder.url).map_err(|m| ("cinder.url", m))?;
        }
        self.validate_cinder_auth()?;
        self.dhcp.validate()?;
        if let Some(listen) = self.metrics.listen
            && [self.http.listen, self.api.listen].contains(&listen)
        {
            return Err((
                "metrics.listen",
                format!("{listen} is already the boot HTTP or the API listener's address"),
            ));
        }
        for (key, name) in
            [("deploy.kernel", &self.deploy.kernel), ("deploy.ramdisk", &self.deploy.ramdisk)]
        {
            crate::model::check_file_name(name).map_err(|m| (key, m))?;
        }
        for arg in self.deploy.kernel_append_params.split_whitespace() {
            crate::model::check_script_value(arg)
                .map_err(|m| ("deploy.kernel_append_params", m))?;
        }
        if self.conductor.power_timeout == 0 {
            return Err(("conductor.power_timeout", "must be at least 1 second".into()));
        }
        if !self.notifications.webhook_url.is_empty() {
            crate::model::check_http_url(&self.notifications.webhook_url)
                .map_err(|m| ("notifications.webhook_url", m))?;
            if self.notifications.webhook_secret.is_empty() {
                return Err((
                    "notifications.webhook_secret",
                    "a webhook needs a secret to sign its events".into(),
                ));
            }
        }
        if !(512..=65464).contains(&self.tftp.max_block_size) {
            return Err((
                "tftp.max_block_size",
                format!("{} is not between 512 and 65464", self.tftp.max_block_size),
            ));
        }
        if self.tftp.max_window_size == 0 {
            return Err(("tftp.max_window_size", "must be at least 1".into()));
        }
        if !(1..=255).contains(&self.tftp.timeout) {
            return Err((
                "tftp.timeout",
                format!("{} is not between 1 and 255 seconds", self.tftp.timeout),
            ));
        }
        if self.tftp.retries > 50 {
            return Err(("tftp.retries", format!("{} is more than 50", self.tftp.retries)));
        }
        for (section, limits) in
            [("http", self.http.connection_limits()), ("api", self.api.connection_limits())]
        {
            check_connection_limits(section, &limits)?;
        }
        if self.tftp.max_transfers == 0 {
            return Err(("tftp.max_transfers", "must be at least 1".into()));
        }
        if !(1..=self.tftp.max_transfers).contains(&self.tftp.max_transfers_per_client) {
            return Err((
                "tftp.max_transfers_per_client",
                format!(
                    "{} is not between 1 and max_transfers ({})",
                    self.tftp.max_transfers_per_client, self.tftp.max_transfers
                ),
            ));
        }
        if !(10..=60_000).contains(&self.database.watch_interval_ms) {
            return Err((
                "database.watch_interval_ms",
                format!("{} is not between 10 and 60000", self.database.watch_interval_ms),
            ));
        }
        if !(1..=20).contains(&self.boot.san_attempts) {
            return Err((
                "boot.san_attempts",
                format!("{} is not between 1 and 20", self.boot.san_attempts),
            ));
        }
        if self.boot.san_retry_delay > 300 {
            return Err((
                "boot.san_retry_delay",
                format!("{} is more than 300 seconds", self.boot.san_retry_delay),
            ));
        }
        if !(10..=86_400).contains(&self.boot.secret_window_seconds) {
            return Err((
                "boot.secret_window_seconds",
                format!(
                    "{} is not between 10 and 86400 (a firmware's whole boot must fit in it)",
                    self.boot.secret_window_seconds
                ),
            ));
        }
        Ok(())
    }

    fn validate_cinder_auth(&self) -> Result<(), (&'static str, String)> {
        let cinder_enabled =
            self.default.enabled_storage_interfaces.contains(&StorageInterfaceName::Cinder);
        let k = &self.keystone;
        match self.cinder.auth_strategy {
            CinderAuthStrategy::Noauth => {
                if cinder_enabled && self.cinder.url.is_empty() {
                    return Err((
                        "cinder.url",
                        "auth_strategy noauth needs a fixed Cinder URL".into(),
                    ));
                }
                for (key, value) in [
                    ("cinder.noauth_user", &self.cinder.noauth_user),
                    ("cinder.noauth_project", &self.cinder.noauth_project),
                ] {
                    if value.is_empty()
                        || value.contains(':')
                        || value.chars().any(|c| c.is_whitespace() || c.is_control())
                    {
                        return Err((key, "must be a non-empty word without ':'".into()));
                    }
                }
            }
            CinderAuthStrategy::Keystone => {
                if k.auth_url.is_empty() {
                    return Err((
                        "keystone.auth_url",
                        "auth_strategy keystone needs the identity endpoint".into(),
                    ));
                }
                crate::model::check_http_url(&k.auth_url).map_err(|m| ("keystone.auth_url", m))?;
                let app_cred = !k.application_credential_id.is_empty();
                if app_cred {
                    if k.application_credential_secret.is_empty() {
                        return Err(("keystone.application_credential_secret", "missing".into()));
                    }
                } else {
                    if k.username.is_empty() && k.user_id.is_empty() {
                        return Err((
                            "keystone.username",
                            "give username (or user_id) and password, or an application credential"
                                .into(),
                        ));
                    }
                    if k.password.is_empty() {
                        return Err(("keystone.password", "missing".into()));
                    }
                    if !k.username.is_empty()
                        && k.user_domain_name.is_empty()
                        && k.user_domain_id.is_empty()
                    {
                        return Err((
                            "keystone.user_domain_name",
                            "a user given by name needs its domain".into(),
                        ));
                    }
                    if k.project_name.is_empty() && k.project_id.is_empty() {
                        return Err((
                            "keystone.project_name",
                            "give project_name (or project_id)".into(),
                        ));
                    }
                    if !k.project_name.is_empty()
                        && k.project_domain_name.is_empty()
                        && k.project_domain_id.is_empty()
                    {
                        return Err((
                            "keystone.project_domain_name",
                            "a project given by name needs its domain".into(),
                        ));
                    }
                }
                if !matches!(k.interface.as_str(), "" | "public" | "internal" | "admin") {
                    return Err((
                        "keystone.interface",
                        format!("{:?} is not public, internal or admin", k.interface),
                    ));
                }
            }
        }
        if let Some(ca) = &self.cinder.ca_file
            && !ca.is_absolute()
        {
            return Err(("cinder.ca_file", format!("{} is not an absolute path", ca.display())));
        }
        Ok(())
    }

    /// File descriptors the caps can take at once: one per connection on each HTTP listener,
    /// one per TFTP transfer, the ProxyDHCP sockets, and [`RESERVED_DESCRIPTORS`] for the process
    /// itself.
    pub fn descriptors_needed(&self) -> u64 {
        [
            self.http.max_connections,
            self.api.max_connections,
            self.tftp.max_transfers,
            self.dhcp.sockets(),
            self.metrics.connections(),
        ]
        .iter()
        .map(|&cap| cap as u64)
        .fold(
            RESERVED_DESCRIPTORS
                + if self.database.url.is_some() { POSTGRES_DESCRIPTORS } else { 0 },
            u64::saturating_add,
        )
    }

    /// Refuses caps that cannot fit in `limit` descriptors (`RLIMIT_NOFILE` as `serve` gets
    /// it), naming the keys.
    pub fn check_descriptors(&self, limit: u64, origin: &str) -> Result<(), ConfigError> {
        let needed = self.descriptors_needed();
        if needed <= limit {
            return Ok(());
        }
        let own = RESERVED_DESCRIPTORS
            + if self.database.url.is_some() { POSTGRES_DESCRIPTORS } else { 0 };
        Err(ConfigError::Invalid {
            origin: origin.into(),
            key: "http.max_connections",
            message: format!(
                "http.max_connections ({}) + api.max_connections ({}) + tftp.max_transfers ({}) \
                 + {own} for the process need {needed} file descriptors; the \
                 limit is {limit} (RLIMIT_NOFILE: raise LimitNOFILE= in the unit, or lower the caps)",
                self.http.max_connections, self.api.max_connections, self.tftp.max_transfers
            ),
        })
    }

    /// What the renderer needs.
    pub fn boot_settings(&self) -> BootSettings {
        BootSettings {
            peers: Vec::new(),
            public_url: self.http.public_url.clone(),
            san_attempts: self.boot.san_attempts,
            san_retry_delay: self.boot.san_retry_delay,
        }
    }

    /// Whether a storage interface may be set on a node.
    pub fn storage_interface_enabled(&self, name: StorageInterfaceName) -> bool {
        self.default.enabled_storage_interfaces.contains(&name)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_database_is_a_sqlite_path_or_a_postgres_url_never_both() {
        let both = "[database]\npath = \"/var/lib/x.db\"\nurl = \"postgres://b@h/d\"\n";
        let e = Config::from_toml(both, "t").unwrap_err().to_string();
        assert!(e.contains("not both"), "{e}");
        let url = Config::from_toml("[database]\nurl = \"postgres://b@h/d\"\n", "t").unwrap();
        assert_eq!(url.database.url.as_deref(), Some("postgres://b@h/d"));
        let e = Config::from_toml("[database]\nca_file = \"/etc/ca.pem\"\n", "t").unwrap_err();
        assert!(e.to_string().contains("go with url"), "{e}");
        let e = Config::from_toml("[database]\nurl = \"mysql://h/d\"\n", "t").unwrap_err();
        assert!(e.to_string().contains("database.url"), "{e}");
    }

    use super::*;

    #[test]
    fn metrics_listen_is_optional_and_not_another_listeners_address() {
        assert_eq!(Config::from_toml("", "t").unwrap().metrics.listen, None);
        let config = Config::from_toml("[metrics]\nlisten = \"0.0.0.0:9100\"\n", "t").unwrap();
        assert_eq!(config.metrics.listen, Some("0.0.0.0:9100".parse().unwrap()));
        assert_eq!(
            config.descriptors_needed(),
            Config::from_toml("", "t").unwrap().descriptors_needed() + 32
        );
        let clash = "[api]\nlisten = \"0.0.0.0:6385\"\n[metrics]\nlisten = \"0.0.0.0:6385\"\n";
        let err = Config::from_toml(clash, "t").unwrap_err().to_string();
        assert!(err.contains("metrics.listen"), "{err}");
    }

    #[test]
    fn dhcp_is_off_by_default_and_proxy_needs_interfaces() {
        let config = Config::from_toml("", "t").unwrap();
        assert_eq!(config.dhcp.mode, DhcpMode::Off);
        assert_eq!(config.dhcp.sockets(), 0);
        assert!(config.dhcp.efi_discovery_bypass);
        assert_eq!(config.dhcp.answer, DhcpAnswer::All);
        let err = Config::from_toml("[dhcp]\nmode = \"proxy\"\n", "t").unwrap_err();
        assert!(err.to_string().contains("dhcp.interfaces"), "{err}");
        let ok =
            "[dhcp]\nmode = \"proxy\"\ninterfaces = [\"eth0\", \"eth1\"]\nanswer = \"known\"\n";
        let config = Config::from_toml(ok, "t").unwrap();
        assert_eq!(config.dhcp.answer, DhcpAnswer::Known);
        assert_eq!(config.dhcp.sockets(), 4);
        let v6 = format!("{ok}listen = [\"[::]:67\"]\n");
        let err = Config::from_toml(&v6, "t").unwrap_err();
        assert!(err.to_string().contains("dhcp.listen"), "{err}");
        let bad = "[dhcp]\nmode = \"proxy\"\ninterfaces = [\"a/b\"]\n";
        assert!(Config::from_toml(bad, "t").unwrap_err().to_string().contains("dhcp.interfaces"));
        assert!(config.dhcp.relays.is_empty());
        let relays = format!("{ok}relays = [\"10.9.0.1\", \"10.9.1.1\"]\n");
        let config = Config::from_toml(&relays, "t").unwrap();
        assert_eq!(config.dhcp.relays, [Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 1, 1)]);
        for bad in ["0.0.0.0", "255.255.255.255", "224.0.0.1", "127.0.0.1"] {
            let err = Config::from_toml(&format!("{ok}relays = [\"{bad}\"]\n"), "t").unwrap_err();
            assert!(err.to_string().contains("dhcp.relays"), "{bad}: {err}");
        }
        let v6 = format!("{ok}relays = [\"fe80::1\"]\n");
        assert!(Config::from_toml(&v6, "t").unwrap_err().to_string().contains("relays"));
    }

    #[test]
    fn script_secrets_default_to_the_neighbour_check() {
        assert_eq!(
            Config::from_toml("", "t").unwrap().boot.script_secrets,
            ScriptSecrets::Neighbour
        );
        let any = Config::from_toml("[boot]\nscript_secrets = \"any\"\n", "t").unwrap();
        assert_eq!(any.boot.script_secrets, ScriptSecrets::Any);
        let err = Config::from_toml("[boot]\nscript_secrets = \"nobody\"\n", "t").unwrap_err();
        assert!(err.to_string().contains("script_secrets"), "{err}");
    }

    #[test]
    fn empty_file_gives_the_spec_defaults() {
        let config = Config::from_toml("", "test").unwrap();
        assert_eq!(config.default.enabled_storage_interfaces, vec![StorageInterfaceName::Noop]);
        assert_eq!(config.default.default_storage_interface, StorageInterfaceName::Noop);
        assert_eq!(config.cinder.url_timeout, 30);
        assert_eq!(config.cinder.retries, 3);
        assert!(config.cinder.toggle_attachments_with_power);
        assert_eq!(config.api.listen.to_string(), "127.0.0.1:6385");
        assert_eq!(config.api.auth_strategy, ApiAuthStrategy::HttpBasic);
    }

    #[test]
    fn the_issue_example_parses() {
        let text = include_str!("../../../examples/bootvol.toml");
        let config = Config::from_toml(text, "example").unwrap();
        assert!(config.storage_interface_enabled(StorageInterfaceName::Cinder));
        assert_eq!(config.http.public_url, "http://192.0.2.10:8080");
    }

    #[test]
    fn the_default_caps_fit_in_1024_descriptors_and_raised_ones_are_refused_by_name() {
        let config = Config::from_toml("", "t").unwrap();
        assert_eq!(config.descriptors_needed(), 1024);
        config.check_descriptors(1024, "t").unwrap();
        let raised = Config::from_toml("[tftp]\nmax_transfers = 2000\n", "t").unwrap();
        let err = raised.check_descriptors(1024, "t.toml").unwrap_err().to_string();
        for key in ["http.max_connections", "api.max_connections", "tftp.max_transfers", "2824"] {
            assert!(err.contains(key), "{err}");
        }
        raised.check_descriptors(8192, "t").unwrap();
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let cases = [
            ("[http]\nlisten = \"nowhere\"\n", "listen"),
            ("[cinder]\nurl_timout = 3\n", "url_timout"),
            (
                "[DEFAULT]\nenabled_storage_interfaces = [\"noop\", \"nfs\"]\n",
                "enabled_storage_interfaces",
            ),
            (
                "[DEFAULT]\ndefault_storage_interface = \"cinder\"\n",
                "DEFAULT.default_storage_interface",
            ),
            ("[http]\npublic_url = \"ftp://x\"\n", "http.public_url"),
            ("[http]\npublic_url = \"http://x/${evil}\"\n", "http.public_url"),
            ("[cinder]\nurl_timeout = 0\n", "cinder.url_timeout"),
            ("[cinder]\nauth_strategy = \"magic\"\n", "auth_strategy"),
            ("[database]\npath = \"relative.db\"\n", "database.path"),
            ("[bogus]\n", "bogus"),
            ("[api]\nauth_strategy = \"keystone\"\n", "auth_strategy"),
            ("[api]\nhttp_basic_auth_user_file = \"htpasswd\"\n", "api.http_basic_auth_user_file"),
            ("[http]\nheader_timeout = 0\n", "http.header_timeout"),
            ("[api]\nidle_timeout = 0\n", "api.idle_timeout"),
            ("[http]\nbody_timeout = 0\n", "http.body_timeout"),
            ("[api]\nbody_timeout = 3601\n", "api.body_timeout"),
            ("[http]\nbody_min_rate = 1000000001\n", "http.body_min_rate"),
            ("[api]\nsend_timeout = 0\n", "api.send_timeout"),
            ("[http]\nsend_timeout = 3601\n", "http.send_timeout"),
            ("[http]\nmax_connections = 0\n", "http.max_connections"),
            ("[api]\nmax_connections = 10\n", "api.max_connections_per_client"),
            ("[tftp]\nmax_transfers = 0\n", "tftp.max_transfers"),
            ("[tftp]\nmax_transfers_per_client = 201\n", "tftp.max_transfers_per_client"),
        ];
        for (text, key) in cases {
            let err = Config::from_toml(text, "t.toml").unwrap_err().to_string();
            assert!(err.contains(key), "{text:?} gave {err:?}, which does not name {key}");
        }
    }
}
