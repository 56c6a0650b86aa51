//! The repository over SQLite: the only module that knows SQL.
//!
//! [`Db`] opens a database file (WAL, foreign keys, a busy timeout) and migrates it; methods are
//! named in the domain (`node_record_by_mac`, `apply_inventory`). Values come out as `model`
//! types; a row that does not parse is reported as corrupt, never passed on.

mod apply;
mod migrations;
mod nodes;

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

pub use apply::{ApplyError, ApplyReport};

/// A database error.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database migration: {0}")]
    Migration(#[from] rusqlite_migration::Error),
    #[error("cannot create the database folder {path}: {source}")]
    Folder { path: String, source: std::io::Error },
    #[error("database row {table} {key} is corrupt: {message}")]
    Corrupt { table: &'static str, key: String, message: String },
}

/// An open, migrated database.
#[derive(Debug)]
pub struct Db {
    conn: Connection,
}

impl Db {
    /// Opens (creating if needed) the database at `path`, in WAL mode, and migrates it.
    pub fn open(path: &Path) -> Result<Db, DbError> {
        if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(folder)
                .map_err(|source| DbError::Folder { path: folder.display().to_string(), source })?;
        }
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Db::prepare(conn)
    }

    /// A private in-memory database, for tests.
    pub fn open_in_memory() -> Result<Db, DbError> {
        Db::prepare(Connection::open_in_memory()?)
    }

    fn prepare(mut conn: Connection) -> Result<Db, DbError> {
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        migrations::migrations().to_latest(&mut conn)?;
        Ok(Db { conn })
    }

    /// The schema version (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<i64, DbError> {
        Ok(self.conn.pragma_query_value(None, "user_version", |row| row.get(0))?)
    }

    /// SQLite's `data_version`: changes when another connection commits, so a reader can
    /// notice writes by another process (`bootvol apply`) without re-reading everything.
    pub fn data_version(&self) -> Result<i64, DbError> {
        Ok(self.conn.pragma_query_value(None, "data_version", |row| row.get(0))?)
    }
}
