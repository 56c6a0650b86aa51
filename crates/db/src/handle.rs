//! One handle on the configured database for a long-running process ([`Database`]): the target
//! is read once (its password and CA files included) and migrated by the first connection,
//! which async callers share; an owner that needs a connection of its own (the snapshot
//! watcher's blocking thread, the metrics' scrape-time reads, PostgreSQL's change listener)
//! takes it from here rather than from the configuration.

use super::engine::Target;
use super::shared::SharedDb;
use super::{Db, DbError};

/// The database of `[database]`, opened once.
#[derive(Debug, Clone)]
pub struct Database {
    target: Target,
    shared: SharedDb,
}

impl Database {
    /// Reads `[database]`, connects and migrates.
    pub fn open(section: &bootvol_core::config::DatabaseSection) -> Result<Database, DbError> {
        let target = Target::from_config(section).map_err(DbError::Config)?;
        let shared = SharedDb::new(Db::connect(&target)?);
        Ok(Database { target, shared })
    }

    /// The connection async callers share (the conductor, the node service, events).
    pub fn shared(&self) -> &SharedDb {
        &self.shared
    }

    /// A new connection of its own to the same database.
    pub fn connection(&self) -> Result<Db, DbError> {
        Db::connect(&self.target)
    }

    /// What it connects to.
    pub fn target(&self) -> &Target {
        &self.target
    }
}
