//! The repository over SQLite or PostgreSQL: the only module that knows SQL.
//!
//! [`Db`] opens a database file (WAL, foreign keys, a busy timeout) or connects to a PostgreSQL
//! server, and migrates it (`migrations.rs`: one list of steps per engine, numbered alike);
//! every statement is written once, and `engine.rs` runs it on either engine. Methods are
//! named in the domain (`node_record_by_mac`, `apply_inventory`, `write_child`). They are the
//! seam the node service and the conductor reach the database through: their signatures carry
//! `model` and `inventory` values, never `rusqlite` types. Values come out as `model` types; a
//! row that does not parse is reported as corrupt, never passed on. `rows.rs` decodes each kind
//! of row in one place; `writes.rs` writes each kind of row in one place. [`SharedDb`] is the
//! handle async callers share (events and node locks included); [`Database`] is `serve`'s one
//! handle, from which each owner that needs a connection of its own takes it.
//!
//! It must not know HTTP, Cinder, BMCs, iPXE or the front ends: it stores and reads values.
//!
//! What holds here (ARCHITECTURE.md names the rest):
//! - every transaction that changes what a snapshot is built from (nodes, ports, connectors,
//!   targets) writes `change_log` rows in that transaction, `seq` taken from the one-row
//!   `change_counter` at commit inside it, so `seq` follows commit order; locks, leases, events,
//!   attachment records and sync status are not logged (no instance caches them);
//! - on PostgreSQL a lost engine never stops boots: writes fail as `DbError::Unavailable` (503),
//!   the watcher keeps its snapshot, catch-up is by `seq`, never by trusting a notification; the
//!   client's own statement logging is capped at `info` (parameters carry secrets);
//! - a step is added at the end of both migration lists in the same commit
//!   (`both_engines_have_every_step`);
//! - interface columns left NULL (`storage_interface`, `console_interface`...) mean the
//!   configured or hardware type's default, applied at read time; `instance_uuid` is unique;
//!   `maintenance` is written only by `set_maintenance` and inventories, never by an action's
//!   `save_node_runtime`.
//!
//! # Layout
//!
//! - [`engine`]: one connection type over either engine; [`migrations`]: the schema steps.
//! - [`nodes`] and [`rows`]: reading nodes; [`pages`]: a page of the node list by a keyset
//!   query; [`writes`]: one write path per row; [`apply`]: an
//!   inventory applied in one transaction; [`runtime`]: a node's runtime fields.
//! - [`volumes`]: attachment records, connection info, events; [`history`]: the rack-wide
//!   history of events, filtered and paged; [`sync`]: the last Cinder pass.
//! - [`locks`]: node locks; [`shared`]: the async handle; [`handle`]: `serve`'s one handle.
//! - [`cluster`]: instances and leases on PostgreSQL; [`listen`]: its change notifications;
//!   [`copy`]: `migrate-to-postgres`.
//! - [`admin`]: what the admin page keeps across restarts; [`probe`]: each node's last probe.
//! - [`chassis`]: chassis and the nodes in them; [`portgroups`]: port groups and their ports.

mod admin;
mod apply;
mod chassis;
mod cluster;
mod copy;
pub mod engine;
mod handle;
mod history;
pub mod listen;
mod locks;
mod migrations;
mod nodes;
mod pages;
mod portgroups;
mod probe;
mod rows;
mod runtime;
mod shared;
mod sync;
mod volumes;
mod writes;

use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use engine::Conn;
pub use engine::{Change, PostgresTarget, Target};

pub use apply::{ApplyError, ApplyReport};
pub use chassis::ChassisDeleted;
pub use cluster::{Instance, serve_id};
pub use copy::{CopyError, TableCheck};
pub use handle::Database;
pub use locks::{ActionToken, LEASE_SECS, LockHolder, ProcessId, instance_id};
pub use pages::{NodePage, PageError, sortable};
pub use shared::{LockError, Locked, NodeLock, SharedDb};
pub use sync::{SYNC_MESSAGE_LIMIT, SyncPass, SyncPassOutcome, SyncRunner, SyncStatus};
pub use volumes::{AttachmentRecord, AttachmentState, Event};
pub use writes::WriteError;

/// A database error.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The server's message and SQLSTATE (its detail, which can quote a row's values, is left out).
    #[error("database: {}", engine::pg_message(.0))]
    Postgres(#[from] postgres::Error),
    /// The engine cannot be reached (PostgreSQL down or the connection lost): writes answer 503.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Config(String),
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
    conn: Conn,
}

impl DbError {
    /// Whether the engine could not be reached (rather than refusing a statement).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, DbError::Unavailable(_))
    }
}

impl Db {
    /// Opens the database `target` names: a SQLite file, or a PostgreSQL server.
    pub fn connect(target: &Target) -> Result<Db, DbError> {
        match target {
            Target::Sqlite(path) => Db::open(path),
            Target::Postgres(pg) => Db::open_postgres(Arc::clone(pg)),
        }
    }

    /// Opens the database of `[database]`.
    pub fn open_config(section: &bootvol_core::config::DatabaseSection) -> Result<Db, DbError> {
        let target = Target::from_config(section).map_err(DbError::Config)?;
        Db::connect(&target)
    }

    /// Connects to a PostgreSQL server and migrates its database.
    pub fn open_postgres(target: Arc<PostgresTarget>) -> Result<Db, DbError> {
        let client = engine::connect_postgres(&target).map_err(engine::pg_error)?;
        let db =
            Db { conn: Conn::Postgres(Box::new(RefCell::new(engine::Pg::new(target, client)))) };
        migrations::migrate_postgres(&db.conn)?;
        Ok(db)
    }

    /// Whether this is the PostgreSQL engine.
    pub fn is_postgres(&self) -> bool {
        self.conn.is_postgres()
    }

    /// Opens (creating if needed) the database at `path`, in WAL mode, and migrates it.
    pub fn open(path: &Path) -> Result<Db, DbError> {
        if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(folder)
                .map_err(|source| DbError::Folder { path: folder.display().to_string(), source })?;
        }
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // FULL: a commit is on disk before it returns, so a write answered 2xx survives a power
        // cut (NORMAL in WAL mode may lose the last commits; see docs/decisions.md).
        conn.pragma_update(None, "synchronous", "FULL")?;
        // 512 KiB of page cache per connection rather than SQLite's 2 MiB: bootvol's reads are
        // index lookups of a few pages or whole-table passes (the snapshot, the periodic
        // services) that the kernel's page cache serves as well, and each connection's cache
        // would otherwise stay resident after one such pass.
        conn.pragma_update(None, "cache_size", -512)?;
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
        Ok(Db { conn: Conn::Sqlite(conn) })
    }

    /// The schema version (SQLite's `user_version`, PostgreSQL's `schema_version` row).
    pub fn schema_version(&self) -> Result<i64, DbError> {
        match &self.conn {
            Conn::Sqlite(c) => Ok(c.pragma_query_value(None, "user_version", |row| row.get(0))?),
            Conn::Postgres(_) => {
                self.conn.query_one("SELECT version FROM schema_version WHERE id = 1", &[])?.get(0)
            }
        }
    }

    /// What changes when another connection commits a change the boot snapshot may depend on:
    /// SQLite's `data_version` (any commit by another connection, `bootvol apply` included) or,
    /// on PostgreSQL, the highest change-log `seq`.
    pub fn data_version(&self) -> Result<i64, DbError> {
        match &self.conn {
            Conn::Sqlite(c) => Ok(c.pragma_query_value(None, "data_version", |row| row.get(0))?),
            Conn::Postgres(_) => self.conn.change_seq(),
        }
    }

    /// The highest change-log `seq` committed.
    pub fn change_seq(&self) -> Result<i64, DbError> {
        self.conn.change_seq()
    }

    /// The changes after `seq`, oldest first (at most `limit`); `None` when the log no longer
    /// holds every change after `seq` (pruned): the reader reloads everything.
    pub fn changes_since(&self, seq: i64, limit: u32) -> Result<Option<Vec<Change>>, DbError> {
        let oldest: Option<i64> =
            self.conn.query_one("SELECT MIN(seq) FROM change_log", &[])?.get(0)?;
        let last = self.conn.change_seq()?;
        if last > seq && oldest.is_none_or(|o| o > seq + 1) {
            return Ok(None);
        }
        let rows = self.conn.query(
            "SELECT seq, entity, key, op FROM change_log WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            engine::args![seq, limit],
        )?;
        rows.iter()
            .map(|r| {
                Ok(Change { seq: r.get(0)?, entity: r.get(1)?, key: r.get(2)?, op: r.get(3)? })
            })
            .collect::<Result<Vec<_>, DbError>>()
            .map(Some)
    }

    /// Frees what this connection's page cache and statement cache hold (SQLite's `PRAGMA
    /// shrink_memory`): the snapshot watcher reads every row on each rebuild and then sleeps,
    /// so its cache would only keep the last rebuild's pages resident. Nothing on PostgreSQL
    /// (the server caches, not bootvol).
    pub fn release_memory(&self) -> Result<(), DbError> {
        if let Conn::Sqlite(c) = &self.conn {
            c.flush_prepared_statement_cache();
            c.execute_batch("PRAGMA shrink_memory")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database file as schema step `step` left it, with `rows` inserted, opened (so
    /// migrated) by today's code; and the folder to remove afterwards.
    fn opened_from_step(name: &str, step: usize, rows: &[&str]) -> (std::path::PathBuf, Db) {
        let dir = std::env::temp_dir().join(format!("bootvol-{name}-{}", std::process::id()));
        let path = dir.join("old.db");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            let mut conn = Connection::open(&path).unwrap();
            migrations::migrations().to_version(&mut conn, step).unwrap();
            for sql in rows {
                conn.execute(sql, []).unwrap();
            }
        }
        let db = Db::open(&path).unwrap();
        let latest = Db::open_in_memory().unwrap().schema_version().unwrap();
        assert_eq!(db.schema_version().unwrap(), latest, "migrated to the latest step");
        (dir, db)
    }

    /// A node as the first schema step stored it.
    const STEP_1_NODE: &str = "INSERT INTO nodes (uuid, name, driver, boot_interface, deploy_interface, provision_state) \
        VALUES ('44444444-4444-4444-8444-000000000001', 'old', 'fake', 'ipxe', 'direct', 'active')";

    /// An attachment record and an event as step 4 stored them.
    const STEP_4_ROWS: &[&str] = &[
        "INSERT INTO volume_attachments (node_uuid, target_uuid, volume_id, api, state, step) \
         VALUES ('n1', 't1', 'v1', 'attachments', 'attached', 'tagged')",
        "INSERT INTO events (event_type, level) VALUES ('x', 'info')",
    ];

    #[test]
    fn storage_interface_arrives_by_its_own_step_and_starts_empty() {
        let (dir, db) = opened_from_step("migration", 1, &[STEP_1_NODE]);
        let record = db.node_record("old").unwrap().unwrap();
        assert_eq!(record.node.storage_interface, None, "no implied default in the database");
        let journal: String =
            db.conn.query_one("PRAGMA journal_mode", &[]).unwrap().get(0).unwrap();
        assert_eq!(journal, "wal");
        let synchronous: i64 =
            db.conn.query_one("PRAGMA synchronous", &[]).unwrap().get(0).unwrap();
        assert_eq!(synchronous, 2, "FULL: every commit is synced before it returns");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ironic_fields_arrive_by_their_own_steps_with_ironics_defaults() {
        let port = "INSERT INTO ports (uuid, node_id, address) VALUES \
            ('44444444-4444-4444-8444-0000000000a1', 1, '52:54:00:00:00:01')";
        let (dir, db) = opened_from_step("migration-9", 6, &[STEP_1_NODE, port]);
        let record = db.node_record("old").unwrap().unwrap();
        assert_eq!(record.node.instance_uuid, None);
        assert_eq!(record.node.interfaces, Default::default(), "the hardware type's defaults");
        assert!(record.traits.is_empty());
        assert!(record.ports[0].more.pxe_enabled);
        assert!(record.ports[0].more.internal_info.is_empty());
        assert!(db.set_traits(&record.node.uuid, &["CUSTOM_A".to_owned()]).unwrap());
        assert_eq!(db.node_record("old").unwrap().unwrap().traits, ["CUSTOM_A"]);
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sync_status_arrives_by_its_own_step_on_a_version_4_database() {
        let (dir, db) = opened_from_step("migration-5", 4, STEP_4_ROWS);
        assert_eq!(db.sync_status().unwrap(), None, "no pass recorded yet");
        assert_eq!(db.attachment_counts().unwrap(), vec![("attached".to_owned(), 1)]);
        assert_eq!(db.events(None, 10).unwrap().len(), 1);
        db.record_sync_pass(&SyncPass {
            ran_by: SyncRunner::Serve,
            started_at: 10,
            finished_at: 12,
            outcome: SyncPassOutcome::Ok,
            checked: 1,
            updated: 0,
            drifted: 0,
            errors: 0,
            message: String::new(),
        })
        .unwrap();
        assert_eq!(db.sync_status().unwrap().unwrap().last_ok_at, Some(12));
        // The table holds one row only.
        let second = db.conn.execute(
            "INSERT INTO sync_status (id, ran_by, started_at, finished_at, outcome) \
             VALUES (2, 'cli', 1, 1, 'ok')",
            &[],
        );
        assert!(second.is_err(), "a second row was accepted");
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
