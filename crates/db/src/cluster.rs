//! Several `serve` instances on one database: leases of work that must run once at a time
//! (Cinder sync, power sync, deploy expiry, webhook delivery, recovery), and the registry of
//! live instances (a heartbeat row each, with the boot URL scripts fall back to).
//!
//! A lease is a row (`leases`: name, holder, expiry), taken by an upsert that only wins when
//! the row is free, expired or already this holder's: it survives reconnections and works
//! behind any connection pooler, unlike PostgreSQL's session-scoped advisory locks.

use std::sync::OnceLock;

use super::engine::args;
use super::{Db, DbError};

/// This process's name in leases and the registry: the host's instance id, the pid and a
/// random part (two `serve` on one host, or in network namespaces of one host, differ).
pub fn serve_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        format!(
            "{}-{}-{}",
            super::instance_id(),
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        )
    })
}

/// A live instance, as the registry shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    /// Its boot HTTP base URL (`[http] public_url`).
    pub boot_url: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
}

impl Db {
    /// Takes or renews lease `name` for `holder` until `now + ttl`; false while another holder's
    /// lease runs.
    pub fn try_lease(&self, name: &str, holder: &str, now: i64, ttl: i64) -> Result<bool, DbError> {
        let taken = self.conn.execute(
            "INSERT INTO leases (name, holder, expires_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE leases.holder = excluded.holder OR leases.expires_at < ?4",
            args![name, holder, now + ttl, now],
        )?;
        Ok(taken == 1)
    }

    /// Gives lease `name` up if `holder` has it (a clean shutdown: another instance takes over
    /// at once).
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<(), DbError> {
        self.conn
            .execute("DELETE FROM leases WHERE name = ?1 AND holder = ?2", args![name, holder])?;
        Ok(())
    }

    /// Records this instance's heartbeat (and its boot URL).
    pub fn heartbeat(&self, id: &str, boot_url: &str, now: i64) -> Result<(), DbError> {
        self.conn.execute(
            "INSERT INTO instances (id, boot_url, started_at, heartbeat_at) VALUES (?1, ?2, ?3, ?3) \
             ON CONFLICT (id) DO UPDATE SET boot_url = excluded.boot_url, heartbeat_at = excluded.heartbeat_at",
            args![id, boot_url, now],
        )?;
        // Rows of instances gone for a day are forgotten.
        self.conn.execute("DELETE FROM instances WHERE heartbeat_at < ?1", args![now - 86_400])?;
        Ok(())
    }

    /// Removes an instance from the registry (a clean shutdown).
    pub fn leave(&self, id: &str) -> Result<(), DbError> {
        self.conn.execute("DELETE FROM instances WHERE id = ?1", args![id])?;
        Ok(())
    }

    /// Instances whose heartbeat is newer than `since`, oldest first.
    pub fn live_instances(&self, since: i64) -> Result<Vec<Instance>, DbError> {
        let rows = self.conn.query(
            "SELECT id, boot_url, started_at, heartbeat_at FROM instances WHERE heartbeat_at >= ?1 \
             ORDER BY started_at, id",
            args![since],
        )?;
        rows.iter()
            .map(|r| {
                Ok(Instance {
                    id: r.get(0)?,
                    boot_url: r.get(1)?,
                    started_at: r.get(2)?,
                    heartbeat_at: r.get(3)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_held_by_one_holder_until_it_expires_or_is_released() {
        let db = Db::open_in_memory().unwrap();
        assert!(db.try_lease("power sync", "a", 100, 30).unwrap());
        assert!(!db.try_lease("power sync", "b", 110, 30).unwrap(), "a's lease runs");
        assert!(db.try_lease("power sync", "a", 120, 30).unwrap(), "a renews");
        assert!(!db.try_lease("power sync", "b", 149, 30).unwrap());
        assert!(db.try_lease("power sync", "b", 151, 30).unwrap(), "expired: b takes over");
        assert!(db.try_lease("cinder sync", "a", 151, 30).unwrap(), "leases are per name");
        db.release_lease("power sync", "a").unwrap();
        assert!(!db.try_lease("power sync", "a", 152, 30).unwrap(), "a no longer held it");
        db.release_lease("power sync", "b").unwrap();
        assert!(db.try_lease("power sync", "a", 153, 30).unwrap());
    }

    #[test]
    fn the_registry_lists_instances_with_a_recent_heartbeat() {
        let db = Db::open_in_memory().unwrap();
        db.heartbeat("one", "http://10.0.0.1:8080", 100).unwrap();
        db.heartbeat("two", "http://10.0.0.2:8080", 105).unwrap();
        db.heartbeat("one", "http://10.0.0.1:8080", 130).unwrap();
        let live: Vec<String> =
            db.live_instances(110).unwrap().into_iter().map(|i| i.boot_url).collect();
        assert_eq!(live, ["http://10.0.0.1:8080"]);
        db.leave("one").unwrap();
        assert!(db.live_instances(0).unwrap().iter().all(|i| i.id == "two"));
    }
}
