//! The configuration file: TOML with the spec's section and key names, read once at start and
//! passed down. Every key has a default; unknown keys and bad values fail with the key's name.
//!
//! Pure: [`Config::from_toml`] takes text. Only [`Config::load`] reads a file.
//!
//! This module owns [`Config`], the `[DEFAULT]` section, loading and the order in which the
//! sections are validated (the first bad key is the one reported); each section's type, defaults
//! and checks live in a submodule of its own: `http` (the boot HTTP, API and metrics listeners
//! and their connection limits), `tftp`, `database`, `cinder` (with `[keystone]`),
//! `boot`, `dhcp`, `conductor` (with `[deploy]` and `[notifications]`), `probe` and `secure_boot`. It must not
//! know what reads the values: no sockets, no SQL, no HTTP.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::boot::BootSettings;
use crate::model::StorageInterfaceName;

mod boot;
mod cinder;
mod conductor;
mod database;
mod dhcp;
mod http;
mod probe;
mod secure_boot;
mod tftp;

pub use boot::{BootSection, ScriptSecrets, SecretWindow};
pub use cinder::{CinderApi, CinderAuthStrategy, CinderSection, KeystoneSection};
pub use conductor::{ConductorSection, DeploySection, NotificationsSection};
pub use database::DatabaseSection;
pub use dhcp::{DhcpAnswer, DhcpMode, DhcpSection};
pub use http::{ApiAuthStrategy, ApiSection, ConnectionLimits, HttpSection, MetricsSection};
pub use probe::ProbeSection;
pub use secure_boot::SecureBootSection;
pub use tftp::TftpSection;

/// Where bootvol looks for its configuration when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/bootvol/bootvol.toml";

/// The value of `[http] public_url` that asks for the boot URL from this box's address.
pub const PUBLIC_URL_AUTO: &str = "auto";

/// A configuration error, naming the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: {key}: {message}")]
    Invalid { origin: String, key: &'static str, message: String },
}

/// A bad value found by validation: the key (`section.key`) and what is wrong with it.
type Invalid = (&'static str, String);

/// Refuses a relative path, naming its key.
fn require_absolute(key: &'static str, path: &Path) -> Result<(), Invalid> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err((key, format!("{} is not an absolute path", path.display())))
    }
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
    #[serde(default)]
    pub probe: ProbeSection,
    #[serde(default)]
    pub secure_boot: SecureBootSection,
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

impl DefaultSection {
    /// At least one interface enabled, the default among them.
    fn validate(&self) -> Result<(), Invalid> {
        let enabled = &self.enabled_storage_interfaces;
        if enabled.is_empty() {
            return Err((
                "DEFAULT.enabled_storage_interfaces",
                "list at least one interface (noop)".into(),
            ));
        }
        if !enabled.contains(&self.default_storage_interface) {
            return Err((
                "DEFAULT.default_storage_interface",
                format!("{} is not in enabled_storage_interfaces", self.default_storage_interface),
            ));
        }
        Ok(())
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

    /// Each section's checks, in the order that decides which bad key is reported first.
    fn validate(&self) -> Result<(), Invalid> {
        self.default.validate()?;
        self.http.validate_public_url()?;
        self.api.validate_public_endpoint()?;
        self.database.validate_location()?;
        self.validate_read_and_served_folders()?;
        self.api.validate_tls()?;
        self.api.validate_loopback_listen(self.http.listen)?;
        self.api.validate_first_password_files()?;
        self.cinder.validate_requests()?;
        self.cinder.validate_auth(
            &self.keystone,
            self.storage_interface_enabled(StorageInterfaceName::Cinder),
        )?;
        self.dhcp.validate()?;
        self.metrics.validate_listen(&[self.http.listen, self.api.listen])?;
        self.deploy.validate()?;
        self.conductor.validate()?;
        self.notifications.validate()?;
        self.tftp.validate_transfer_options()?;
        self.http.validate_limits()?;
        self.api.validate_limits()?;
        self.tftp.validate_caps()?;
        self.database.validate_watch_interval()?;
        self.probe.validate()?;
        self.secure_boot.validate()?;
        self.boot.validate()
    }

    /// The password file the API reads and the folders the boot listeners serve from.
    fn validate_read_and_served_folders(&self) -> Result<(), Invalid> {
        require_absolute("api.http_basic_auth_user_file", &self.api.http_basic_auth_user_file)?;
        require_absolute("http.files_root", &self.http.files_root)?;
        require_absolute("tftp.root", &self.tftp.root)
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
            secure_boot: self.secure_boot.signing().is_some(),
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

    use std::net::Ipv4Addr;

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
        let text = include_str!("../../../../examples/bootvol.toml");
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
            ("[api]\nmax_limit = 0\n", "api.max_limit"),
            ("[api]\nmax_limit = 10001\n", "api.max_limit"),
            ("[tftp]\nmax_transfers_per_client = 201\n", "tftp.max_transfers_per_client"),
        ];
        for (text, key) in cases {
            let err = Config::from_toml(text, "t.toml").unwrap_err().to_string();
            assert!(err.contains(key), "{text:?} gave {err:?}, which does not name {key}");
        }
    }
}
