//! Node locks: one action at a time per node. A lock is held by an **action**, named by an
//! [`ActionToken`] (the instance it runs on, its process, a random nonce and its verb), not by a
//! process: two actions of the same process exclude each other, and only the token that took a
//! lock may re-enter, renew or release it.
//!
//! A holder is live while its lease has not expired (a live action renews it) and, when it runs
//! on this instance, while its process runs. A dead holder's lock is taken over (a crash); a
//! holder on another instance is judged by its lease alone, since its pid cannot be checked from
//! here. Every write is a compare-and-swap on the row it read, so two takers never both win.

use std::sync::OnceLock;

use super::engine::args;

use super::{Db, DbError};

/// How long a lock stays live without renewal (seconds). A live action renews it every third
/// of this ([`crate::NodeLock`]).
pub const LEASE_SECS: i64 = 60;

/// A running process, as locks name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessId {
    pub pid: i64,
    /// The process start time (from `/proc/<pid>/stat`), so a reused pid is not mistaken.
    pub start: String,
}

impl ProcessId {
    pub fn current() -> ProcessId {
        let pid = i64::from(std::process::id());
        ProcessId { pid, start: process_start(pid).unwrap_or_default() }
    }

    /// Whether this process still runs (on this host).
    pub fn alive(&self) -> bool {
        process_start(self.pid).is_some_and(|start| start == self.start)
    }
}

/// Field 22 of `/proc/<pid>/stat`: the start time in clock ticks since boot.
fn process_start(pid: i64) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it follow the last ')'.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(19).map(str::to_owned)
}

/// This instance's id: the host's `/etc/machine-id`, else its host name. Processes with the same
/// instance id can check each other's pids.
pub fn instance_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/etc/machine-id")
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|s| s.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into())
    })
}

/// The action that holds (or wants) a node's lock.
#[derive(Clone, PartialEq, Eq)]
pub struct ActionToken {
    /// The instance (host) the action runs on: [`instance_id`].
    pub instance: String,
    pub process: ProcessId,
    /// Random, one per action: re-entry, renewal and release need it.
    pub nonce: String,
    /// What the action does (`deploy`, `power`, `power sync`...), shown to whoever is refused.
    pub verb: String,
}

impl std::fmt::Debug for ActionToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionToken")
            .field("verb", &self.verb)
            .field("pid", &self.process.pid)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl ActionToken {
    /// A new action of this process.
    pub fn new(verb: &str) -> ActionToken {
        ActionToken::of(ProcessId::current(), verb)
    }

    /// A new action of `process` on this instance.
    pub fn of(process: ProcessId, verb: &str) -> ActionToken {
        ActionToken {
            instance: instance_id().to_owned(),
            process,
            nonce: uuid::Uuid::new_v4().simple().to_string(),
            verb: verb.to_owned(),
        }
    }
}

/// Who holds a node's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub action: String,
    pub instance: String,
    pub pid: i64,
    pub process_start: String,
    /// Empty for a lock written before tokens existed (schema 5).
    pub nonce: String,
    pub acquired_at: String,
    /// Unix seconds.
    pub lease_expires_at: i64,
}

impl LockHolder {
    /// Whether the action holding the lock may still be running at `now` (Unix seconds).
    pub fn live(&self, now: i64) -> bool {
        let here = self.instance.is_empty() || self.instance == instance_id();
        let process = ProcessId { pid: self.pid, start: self.process_start.clone() };
        if self.nonce.is_empty() {
            // Written by an older bootvol on this host: judged by its process, as it was then.
            return process.alive();
        }
        self.lease_expires_at > now && (!here || process.alive())
    }

    fn held_by(&self, token: &ActionToken) -> bool {
        !self.nonce.is_empty() && self.nonce == token.nonce && self.instance == token.instance
    }
}

impl Db {
    /// Takes a node's lock for `token`'s action until `now + lease`, unless a live action holds
    /// it. The same token re-enters (and renews); a dead holder's lock is taken over.
    pub fn try_lock_node(
        &self,
        node_uuid: &str,
        token: &ActionToken,
        now: i64,
        lease: i64,
    ) -> Result<Result<(), LockHolder>, DbError> {
        let until = now + lease;
        let Some(holder) = self.lock_holder(node_uuid)? else {
            return self.insert_lock(node_uuid, token, until);
        };
        if !holder.held_by(token) {
            if holder.live(now) {
                return Ok(Err(holder));
            }
            tracing::warn!(
                node = node_uuid,
                action = holder.action,
                pid = holder.pid,
                instance = holder.instance,
                "taking over the lock of an action that is gone"
            );
        }
        self.swap_lock(node_uuid, token, until, holder)
    }

    /// Takes a lock no one holds; the holder if another action took it between the read and
    /// the insert.
    fn insert_lock(
        &self,
        node_uuid: &str,
        token: &ActionToken,
        until: i64,
    ) -> Result<Result<(), LockHolder>, DbError> {
        let taken = self.conn.execute(
            "INSERT INTO node_locks (node_uuid, action, pid, process_start, instance_id, nonce, lease_expires_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (node_uuid) DO NOTHING",
            args![node_uuid, &token.verb, token.process.pid, &token.process.start, &token.instance, &token.nonce, until],
        )?;
        match taken {
            1 => Ok(Ok(())),
            // Another action took it between the read and the insert.
            _ => Ok(Err(self.lock_holder(node_uuid)?.ok_or(DbError::Corrupt {
                table: "node_locks",
                key: node_uuid.to_owned(),
                message: "a lock vanished while being taken".into(),
            })?)),
        }
    }

    /// Re-enters, renews or takes over `holder`'s lock: a compare-and-swap on the holder read,
    /// so the lock goes to `token` only if no one changed it since; else the holder now.
    fn swap_lock(
        &self,
        node_uuid: &str,
        token: &ActionToken,
        until: i64,
        holder: LockHolder,
    ) -> Result<Result<(), LockHolder>, DbError> {
        let swapped = self.conn.execute(
            "UPDATE node_locks SET action = ?2, pid = ?3, process_start = ?4, instance_id = ?5, \
             nonce = ?6, lease_expires_at = ?7, \
             acquired_at = CASE WHEN nonce = ?6 THEN acquired_at ELSE strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') END \
             WHERE node_uuid = ?1 AND nonce = ?8 AND pid = ?9 AND process_start = ?10",
            args![
                node_uuid,
                &token.verb,
                token.process.pid,
                &token.process.start,
                &token.instance,
                &token.nonce,
                until,
                &holder.nonce,
                holder.pid,
                &holder.process_start
            ],
        )?;
        if swapped == 1 {
            Ok(Ok(()))
        } else {
            Ok(Err(self.lock_holder(node_uuid)?.unwrap_or(holder)))
        }
    }

    /// Extends the lease of `token`'s lock to `until`; false when it no longer holds it.
    pub fn renew_node_lock(
        &self,
        node_uuid: &str,
        token: &ActionToken,
        until: i64,
    ) -> Result<bool, DbError> {
        let renewed = self.conn.execute(
            "UPDATE node_locks SET lease_expires_at = ?3 WHERE node_uuid = ?1 AND nonce = ?2 AND instance_id = ?4",
            args![node_uuid, &token.nonce, until, &token.instance],
        )?;
        Ok(renewed == 1)
    }

    /// Releases a node's lock if `token` holds it; another action's lock is left alone.
    pub fn unlock_node(&self, node_uuid: &str, token: &ActionToken) -> Result<(), DbError> {
        self.conn.execute(
            "DELETE FROM node_locks WHERE node_uuid = ?1 AND nonce = ?2 AND instance_id = ?3",
            args![node_uuid, &token.nonce, &token.instance],
        )?;
        Ok(())
    }

    pub fn lock_holder(&self, node_uuid: &str) -> Result<Option<LockHolder>, DbError> {
        let row = self
            .conn
            .query_opt(
                "SELECT action, instance_id, pid, process_start, nonce, acquired_at, lease_expires_at \
                 FROM node_locks WHERE node_uuid = ?1",
                args![node_uuid],
            )?
            .map(|r| -> Result<_, DbError> {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
            })
            .transpose()?;
        Ok(row.map(
            |(action, instance, pid, process_start, nonce, acquired_at, lease_expires_at)| {
                LockHolder {
                    action,
                    instance,
                    pid,
                    process_start,
                    nonce,
                    acquired_at,
                    lease_expires_at,
                }
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    #[test]
    fn two_actions_of_one_process_exclude_each_other() {
        let db = Db::open_in_memory().unwrap();
        let deploy = ActionToken::new("deploy");
        let sync = ActionToken::new("power sync");
        assert_eq!(deploy.process, sync.process, "the same process");
        assert_eq!(db.try_lock_node("n1", &deploy, NOW, 60).unwrap(), Ok(()));
        let refused = db.try_lock_node("n1", &sync, NOW, 60).unwrap().unwrap_err();
        assert_eq!(refused.action, "deploy");
        // Another action's release does nothing; the holder's re-entry works.
        db.unlock_node("n1", &sync).unwrap();
        assert_eq!(db.lock_holder("n1").unwrap().unwrap().action, "deploy");
        assert_eq!(db.try_lock_node("n1", &deploy, NOW + 1, 60).unwrap(), Ok(()));
        assert!(!db.renew_node_lock("n1", &sync, NOW + 100).unwrap());
        assert!(db.renew_node_lock("n1", &deploy, NOW + 100).unwrap());
        db.unlock_node("n1", &deploy).unwrap();
        assert_eq!(db.lock_holder("n1").unwrap(), None);
        assert_eq!(db.try_lock_node("n1", &sync, NOW, 60).unwrap(), Ok(()));
    }

    #[test]
    fn a_dead_process_or_an_expired_lease_loses_the_lock() {
        let db = Db::open_in_memory().unwrap();
        // pid 1 is alive (init) but with another start time it is a process that is gone.
        let gone = ActionToken::of(ProcessId { pid: 1, start: "0".into() }, "deploy");
        db.try_lock_node("n1", &gone, NOW, 60).unwrap().unwrap();
        let me = ActionToken::new("power");
        assert_eq!(db.try_lock_node("n1", &me, NOW, 60).unwrap(), Ok(()), "its process is gone");
        assert_eq!(db.lock_holder("n1").unwrap().unwrap().action, "power");

        // A live process on this host whose lease ran out (it stopped renewing).
        let init =
            ActionToken::of(ProcessId { pid: 1, start: process_start(1).unwrap() }, "deploy");
        db.try_lock_node("n2", &init, NOW, 60).unwrap().unwrap();
        assert!(db.try_lock_node("n2", &me, NOW + 59, 60).unwrap().is_err(), "lease still runs");
        assert_eq!(db.try_lock_node("n2", &me, NOW + 60, 60).unwrap(), Ok(()), "lease expired");
    }

    #[test]
    fn another_instance_is_judged_by_its_lease_only() {
        let db = Db::open_in_memory().unwrap();
        // A pid that does not run here: on another host it may well run.
        let mut remote =
            ActionToken::of(ProcessId { pid: 999_999_999, start: "1".into() }, "deploy");
        remote.instance = "another-host".into();
        db.try_lock_node("n1", &remote, NOW, 60).unwrap().unwrap();
        let me = ActionToken::new("power sync");
        let holder = db.try_lock_node("n1", &me, NOW + 30, 60).unwrap().unwrap_err();
        assert_eq!((holder.instance.as_str(), holder.action.as_str()), ("another-host", "deploy"));
        assert!(db.renew_node_lock("n1", &remote, NOW + 120).unwrap());
        assert!(db.try_lock_node("n1", &me, NOW + 90, 60).unwrap().is_err(), "renewed");
        assert_eq!(db.try_lock_node("n1", &me, NOW + 120, 60).unwrap(), Ok(()));
    }

    #[test]
    fn a_lock_of_an_older_bootvol_is_judged_by_its_process() {
        let db = Db::open_in_memory().unwrap();
        db.conn
            .execute(
                "INSERT INTO node_locks (node_uuid, action, pid, process_start) VALUES ('n1', 'deploy', 1, ?1)",
                args![process_start(1).unwrap()],
            )
            .unwrap();
        let me = ActionToken::new("power");
        assert!(db.try_lock_node("n1", &me, NOW, 60).unwrap().is_err(), "init runs");
        db.conn.execute("UPDATE node_locks SET process_start = 'x'", &[]).unwrap();
        assert_eq!(db.try_lock_node("n1", &me, NOW, 60).unwrap(), Ok(()));
    }
}
