//! Node locks: one action at a time per node, across processes. A lock names its holder's
//! process (pid and start time); a lock whose process is gone (a crash) is taken over.

use rusqlite::{OptionalExtension, params};

use super::{Db, DbError};

/// Who holds a node's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub action: String,
    pub pid: i64,
    pub process_start: String,
    pub acquired_at: String,
}

/// The current process, as locks name it.
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

    /// Whether this process still runs.
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

impl Db {
    /// Takes a node's lock for `action`, unless a live process holds it.
    pub fn try_lock_node(
        &self,
        node_uuid: &str,
        action: &str,
        me: &ProcessId,
    ) -> Result<Result<(), LockHolder>, DbError> {
        let holder = self.lock_holder(node_uuid)?;
        if let Some(holder) = holder {
            let theirs = ProcessId { pid: holder.pid, start: holder.process_start.clone() };
            if theirs != *me && theirs.alive() {
                return Ok(Err(holder));
            }
            if theirs != *me {
                tracing::warn!(
                    node = node_uuid,
                    action = holder.action,
                    pid = holder.pid,
                    "taking over the lock of a process that is gone"
                );
            }
        }
        self.conn.execute(
            "INSERT INTO node_locks (node_uuid, action, pid, process_start) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (node_uuid) DO UPDATE SET action = ?2, pid = ?3, process_start = ?4, \
             acquired_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')",
            params![node_uuid, action, me.pid, me.start],
        )?;
        Ok(Ok(()))
    }

    /// Releases a node's lock if this process holds it.
    pub fn unlock_node(&self, node_uuid: &str, me: &ProcessId) -> Result<(), DbError> {
        self.conn.execute(
            "DELETE FROM node_locks WHERE node_uuid = ?1 AND pid = ?2 AND process_start = ?3",
            params![node_uuid, me.pid, me.start],
        )?;
        Ok(())
    }

    pub fn lock_holder(&self, node_uuid: &str) -> Result<Option<LockHolder>, DbError> {
        Ok(self
            .conn
            .query_row(
                "SELECT action, pid, process_start, acquired_at FROM node_locks WHERE node_uuid = ?1",
                params![node_uuid],
                |r| Ok(LockHolder { action: r.get(0)?, pid: r.get(1)?, process_start: r.get(2)?, acquired_at: r.get(3)? }),
            )
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_holder_keeps_its_lock_and_a_dead_one_loses_it() {
        let db = Db::open_in_memory().unwrap();
        let me = ProcessId::current();
        assert!(me.alive());
        assert_eq!(db.try_lock_node("n1", "attach", &me).unwrap(), Ok(()));
        // pid 1 is alive (init) but with another start time it is "another process".
        let other = ProcessId { pid: 1, start: process_start(1).unwrap() };
        let refused = db.try_lock_node("n1", "deploy", &other).unwrap().unwrap_err();
        assert_eq!((refused.action.as_str(), refused.pid), ("attach", me.pid));
        let gone = ProcessId { pid: me.pid, start: "0".into() };
        db.unlock_node("n1", &me).unwrap();
        assert_eq!(db.try_lock_node("n1", "attach", &gone).unwrap(), Ok(()));
        assert_eq!(
            db.try_lock_node("n1", "deploy", &me).unwrap(),
            Ok(()),
            "the holder's process is gone"
        );
        assert_eq!(db.lock_holder("n1").unwrap().unwrap().action, "deploy");
    }
}
