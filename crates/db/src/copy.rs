//! `bootvol migrate-to-postgres`: a single box's SQLite data copied into an empty PostgreSQL
//! database in one transaction, then checked: for every table the row count and a SHA-256 over
//! its rows (in key order, each value tagged by kind) must be equal on both sides.
//!
//! Columns are read from SQLite's `pragma_table_info`, so a column added by a later migration
//! (on both engines, same step) is copied without touching this file; a new **table** goes into
//! [`TABLES`].

use sha2::{Digest, Sha256};

use super::engine::{Conn, Row, Value, args};
use super::{Db, DbError};

/// The tables copied, parents first, each with the columns that order its rows. `instances`
/// and `leases` are not copied: they describe running processes.
pub(super) const TABLES: &[(&str, &str)] = &[
    ("chassis", "id"),
    ("nodes", "id"),
    ("portgroups", "id"),
    ("ports", "id"),
    ("volume_connectors", "id"),
    ("volume_targets", "id"),
    ("volume_attachments", "id"),
    ("events", "id"),
    ("node_locks", "node_uuid"),
    ("sync_status", "id"),
    ("change_log", "seq"),
    ("change_counter", "id"),
    ("probe_results", "node_id"),
];

/// One table's check after the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCheck {
    pub table: &'static str,
    pub rows: u64,
    /// SHA-256 of the rows (hex), equal on both sides.
    pub checksum: String,
}

/// Why a copy was refused or did not check out.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("the source must be a SQLite database and the destination a PostgreSQL one")]
    Engines,
    #[error("the destination already holds data ({0} nodes): migrate into an empty database")]
    NotEmpty(i64),
    #[error(
        "table {table}: {source_rows} rows with checksum {source_sum} in the source, {dest_rows} rows with checksum {dest_sum} in the destination"
    )]
    Mismatch {
        table: &'static str,
        source_rows: u64,
        source_sum: String,
        dest_rows: u64,
        dest_sum: String,
    },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl Db {
    /// Copies every row of this (SQLite) database into `dest` (PostgreSQL, migrated and empty),
    /// then checks each table on both sides.
    pub fn copy_to_postgres(&self, dest: &Db) -> Result<Vec<TableCheck>, CopyError> {
        if !matches!(self.conn, Conn::Sqlite(_)) || !dest.is_postgres() {
            return Err(CopyError::Engines);
        }
        let nodes: i64 = dest.conn.query_one("SELECT COUNT(*) FROM nodes", &[])?.get(0)?;
        if nodes > 0 {
            return Err(CopyError::NotEmpty(nodes));
        }
        let tx = dest.conn.begin()?;
        // The destination's own rows of the one-row tables give way to the source's.
        tx.execute("DELETE FROM change_counter", &[])?;
        tx.execute("DELETE FROM change_log", &[])?;
        for (table, key) in TABLES {
            let columns = self.columns(table)?;
            let list = columns.join(", ");
            let marks: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
            let insert = format!("INSERT INTO {table} ({list}) VALUES ({})", marks.join(", "));
            for row in
                self.conn.query(&format!("SELECT {list} FROM {table} ORDER BY {key}"), &[])?
            {
                tx.execute(&insert, &row.values())?;
            }
            if columns.iter().any(|c| c == "id")
                && *key == "id"
                && *table != "sync_status"
                && *table != "change_counter"
            {
                // Identity columns continue after the copied ids.
                tx.query(
                    &format!(
                        "SELECT setval(pg_get_serial_sequence('{table}', 'id'), COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"
                    ),
                    &[],
                )?;
            }
        }
        tx.commit()?;
        let mut checks = Vec::new();
        for (table, key) in TABLES {
            let columns = self.columns(table)?;
            let (source_rows, source_sum) = self.table_sum(table, key, &columns)?;
            let (dest_rows, dest_sum) = dest.table_sum(table, key, &columns)?;
            if (source_rows, &source_sum) != (dest_rows, &dest_sum) {
                return Err(CopyError::Mismatch {
                    table,
                    source_rows,
                    source_sum,
                    dest_rows,
                    dest_sum,
                });
            }
            checks.push(TableCheck { table, rows: source_rows, checksum: source_sum });
        }
        Ok(checks)
    }

    /// A SQLite table's columns, in order.
    fn columns(&self, table: &str) -> Result<Vec<String>, DbError> {
        self.conn
            .query("SELECT name FROM pragma_table_info(?1) ORDER BY cid", args![table])?
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// The row count and SHA-256 of `columns` of `table`, rows in `key` order.
    fn table_sum(
        &self,
        table: &str,
        key: &str,
        columns: &[String],
    ) -> Result<(u64, String), DbError> {
        let rows = self
            .conn
            .query(&format!("SELECT {} FROM {table} ORDER BY {key}", columns.join(", ")), &[])?;
        let mut hash = Sha256::new();
        for row in &rows {
            for value in row.values() {
                match value {
                    Value::Null => hash.update(b"n;"),
                    Value::Int(i) => hash.update(format!("i{i};")),
                    Value::Text(t) => hash.update(format!("t{}:{t};", t.len())),
                }
            }
            hash.update(b"\n");
        }
        let sum: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok((u64::try_from(rows.len()).unwrap_or(u64::MAX), sum))
    }
}

impl Row {
    fn values(&self) -> Vec<Value> {
        self.all().to_vec()
    }
}
