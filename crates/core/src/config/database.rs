//! `[database]`: where the data lives (a SQLite file or a PostgreSQL URL, exactly one), the
//! files that go with a server, how often `serve` looks for changes, and their checks.
//!
//! It must not know SQL or connect to anything: crates/db opens what this names.

use std::path::PathBuf;

use serde::Deserialize;

use super::{Invalid, require_absolute};

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

impl DatabaseSection {
    /// A `postgres://` URL if any, and absolute paths for its files and the SQLite file.
    pub(super) fn validate_location(&self) -> Result<(), Invalid> {
        if let Some(url) = &self.url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            return Err(("database.url", "must start with postgres:// or postgresql://".into()));
        }
        for (key, path) in [
            ("database.password_file", self.password_file.as_ref()),
            ("database.ca_file", self.ca_file.as_ref()),
        ] {
            if let Some(path) = path {
                require_absolute(key, path)?;
            }
        }
        require_absolute("database.path", &self.path)
    }

    pub(super) fn validate_watch_interval(&self) -> Result<(), Invalid> {
        if !(10..=60_000).contains(&self.watch_interval_ms) {
            return Err((
                "database.watch_interval_ms",
                format!("{} is not between 10 and 60000", self.watch_interval_ms),
            ));
        }
        Ok(())
    }
}
