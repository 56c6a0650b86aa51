//! The database as async callers share it: [`SharedDb`] runs each use on the blocking pool,
//! writes events ([`SharedDb::record_event`], the one event writer) and takes node locks
//! ([`NodeLock`]: an action's lock, its lease renewed while it is held).
//!
//! It knows what the conductor, storage and front ends need of the database, nothing of what
//! they do with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::locks::{ActionToken, LEASE_SECS, LockHolder};
use super::{Db, DbError};

/// The database, shared by async callers; every use runs on the blocking pool. The tasks it
/// starts itself (a held lock's lease renewal, the release of a lock dropped unreleased) are
/// on [`SharedDb::tasks`], which shutdown waits for.
#[derive(Debug, Clone)]
pub struct SharedDb {
    db: Arc<Mutex<Db>>,
    tasks: TaskTracker,
}

impl SharedDb {
    pub fn new(db: Db) -> SharedDb {
        SharedDb { db: Arc::new(Mutex::new(db)), tasks: TaskTracker::new() }
    }

    /// The lock tasks this handle (and every clone of it) started; shutdown closes it and
    /// waits, so a lock dropped unreleased is released before the process exits.
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Runs `f` with the database on the blocking pool.
    pub async fn run<R: Send + 'static>(&self, f: impl FnOnce(&Db) -> R + Send + 'static) -> R {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || {
            let guard = db.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&guard)
        })
        .await
        .expect("database task panicked")
    }

    /// Records an event of a node (masked when stored). An event that cannot be written is
    /// logged, never returned: the action it reports stands.
    pub async fn record_event(
        &self,
        node_uuid: &str,
        event_type: String,
        level: &'static str,
        payload: serde_json::Value,
    ) {
        let node = node_uuid.to_owned();
        if let Err(e) =
            self.run(move |db| db.add_event(Some(&node), &event_type, level, &payload)).await
        {
            tracing::error!(error = %e, "cannot record an event");
        }
    }

    /// The live action holding a node's lock, if any.
    pub async fn node_locked(&self, node_uuid: &str) -> Result<Option<Locked>, DbError> {
        let node = node_uuid.to_owned();
        let holder = self.run(move |db| db.lock_holder(&node)).await?;
        Ok(holder.filter(|h| h.live(now())).map(|h| Locked::by(node_uuid, h)))
    }

    /// Takes a node's lock for a new action `verb`, or says who holds it.
    pub async fn lock_node(&self, node_uuid: &str, verb: &str) -> Result<NodeLock, LockError> {
        let token = ActionToken::new(verb);
        let (node, taker) = (node_uuid.to_owned(), token.clone());
        let now = now();
        match self.run(move |db| db.try_lock_node(&node, &taker, now, LEASE_SECS)).await? {
            Ok(()) => Ok(NodeLock::held(self.clone(), node_uuid.to_owned(), token)),
            Err(holder) => Err(LockError::Locked(Locked::by(node_uuid, holder))),
        }
    }
}

fn now() -> i64 {
    i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX)
}

/// A node another live action holds.
#[derive(Debug, Clone, thiserror::Error)]
#[error("node {name} is locked by {action} (process {pid}, since {since})")]
pub struct Locked {
    /// The node's UUID.
    pub node: String,
    /// The node's name, when the caller knows it (else its UUID).
    pub name: String,
    pub action: String,
    pub pid: i64,
    pub since: String,
}

impl Locked {
    fn by(node: &str, holder: LockHolder) -> Locked {
        Locked {
            node: node.to_owned(),
            name: node.to_owned(),
            action: holder.action,
            pid: holder.pid,
            since: holder.acquired_at,
        }
    }
}

/// Why a lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(transparent)]
    Locked(Locked),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// A node's lock, held by one action until [`NodeLock::release`]. While it is held a task
/// renews its lease; a lock dropped without release stops renewing and is released in the
/// background.
#[derive(Debug)]
pub struct NodeLock {
    db: SharedDb,
    node_uuid: String,
    token: ActionToken,
    renewing: CancellationToken,
    released: bool,
}

impl NodeLock {
    fn held(db: SharedDb, node_uuid: String, token: ActionToken) -> NodeLock {
        let renewing = CancellationToken::new();
        let (renewer, node, who, stop) =
            (db.clone(), node_uuid.clone(), token.clone(), renewing.clone());
        db.tasks.spawn(async move {
            let every = Duration::from_secs((LEASE_SECS / 3).unsigned_abs());
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
                let (n, t, until) = (node.clone(), who.clone(), now() + LEASE_SECS);
                match renewer.run(move |db| db.renew_node_lock(&n, &t, until)).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::error!(
                            node,
                            action = who.verb,
                            "the node lock was taken over while held"
                        );
                        return;
                    }
                    Err(e) => tracing::warn!(node, error = %e, "cannot renew the node lock"),
                }
            }
        });
        NodeLock { db, node_uuid, token, renewing, released: false }
    }

    pub fn node_uuid(&self) -> &str {
        &self.node_uuid
    }

    /// The action holding the lock.
    pub fn token(&self) -> &ActionToken {
        &self.token
    }

    pub async fn release(mut self) {
        self.released = true;
        self.renewing.cancel();
        let (node, token) = (self.node_uuid.clone(), self.token.clone());
        if let Err(e) = self.db.run(move |db| db.unlock_node(&node, &token)).await {
            tracing::error!(node = self.node_uuid, error = %e, "cannot release the node lock");
        }
    }
}

impl Drop for NodeLock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.renewing.cancel();
        let (db, node, token) = (self.db.clone(), self.node_uuid.clone(), self.token.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let tasks = db.tasks.clone();
            tasks.spawn_on(
                async move {
                    let _ = db.run(move |db| db.unlock_node(&node, &token)).await;
                },
                &runtime,
            );
        }
    }
}
