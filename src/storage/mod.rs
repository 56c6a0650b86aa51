//! Ironic's storage interface (`node.storage_interface`): attach and detach a node's volumes,
//! validate them, and say whether a deploy writes an image. "Storage" here means volumes, not
//! SQLite (that is `db`).
//!
//! Three implementations: `noop` (the default; does nothing), `external` (the operator records
//! the connection info; attach and detach only check it), and `cinder` (the Cinder client does
//! the work; see `cinder.rs`). The seam is a trait because Cinder is an external system.

mod cinder;
mod external;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

pub use cinder::{CinderStorage, RecoveryReport, SyncReport};

use crate::config::Config;
use crate::db::{Db, DbError};
use crate::model::{NodeRecord, StorageInterfaceName, VolumeTarget};

/// A storage operation that failed; the message is the operator's (Cinder's own, when it is
/// Cinder's).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Cinder(#[from] crate::cinder::CinderError),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("storage interface {0} is not enabled (enabled: {1})")]
    NotEnabled(StorageInterfaceName, String),
    #[error("node {node} is locked by {action} (process {pid}, since {since})")]
    Locked { node: String, action: String, pid: i64, since: String },
}

/// The database, shared by async callers; every use runs on the blocking pool.
#[derive(Debug, Clone)]
pub struct SharedDb(Arc<Mutex<Db>>);

impl SharedDb {
    pub fn new(db: Db) -> SharedDb {
        SharedDb(Arc::new(Mutex::new(db)))
    }

    /// Runs `f` with the database on the blocking pool.
    pub async fn run<R: Send + 'static>(&self, f: impl FnOnce(&Db) -> R + Send + 'static) -> R {
        let db = Arc::clone(&self.0);
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
}

/// A node's lock, held by this process until [`NodeLock::release`].
#[derive(Debug)]
pub struct NodeLock {
    db: SharedDb,
    node_uuid: String,
    me: crate::db::ProcessId,
}

impl SharedDb {
    /// Takes a node's lock for `action`, or says who holds it.
    pub async fn lock_node(&self, node_uuid: &str, action: &str) -> Result<NodeLock, StorageError> {
        let me = crate::db::ProcessId::current();
        let (node, what, who) = (node_uuid.to_owned(), action.to_owned(), me.clone());
        match self.run(move |db| db.try_lock_node(&node, &what, &who)).await? {
            Ok(()) => Ok(NodeLock { db: self.clone(), node_uuid: node_uuid.to_owned(), me }),
            Err(holder) => Err(StorageError::Locked {
                node: node_uuid.to_owned(),
                action: holder.action,
                pid: holder.pid,
                since: holder.acquired_at,
            }),
        }
    }
}

impl NodeLock {
    pub async fn release(self) {
        let (node, me) = (self.node_uuid.clone(), self.me.clone());
        if let Err(e) = self.db.run(move |db| db.unlock_node(&node, &me)).await {
            tracing::error!(node = self.node_uuid, error = %e, "cannot release the node lock");
        }
    }
}

/// Ironic's storage interface.
#[async_trait]
pub trait StorageInterface: Send + Sync {
    fn name(&self) -> StorageInterfaceName;

    /// Whether the node's volume information is complete and consistent for this interface.
    fn validate(&self, record: &NodeRecord) -> Result<(), StorageError>;

    /// Whether a deploy must write an image (false: the node boots a volume as it is).
    fn should_write_image(&self, record: &NodeRecord) -> bool;

    /// Makes the node's volumes usable and records their connection info.
    async fn attach_volumes(&self, record: &NodeRecord) -> Result<(), StorageError>;

    /// Releases the node's volumes and forgets their connection info.
    async fn detach_volumes(&self, record: &NodeRecord) -> Result<(), StorageError>;
}

/// Does nothing and declares no capability: no storage code runs until an operator enables one.
#[derive(Debug)]
pub struct NoopStorage;

#[async_trait]
impl StorageInterface for NoopStorage {
    fn name(&self) -> StorageInterfaceName {
        StorageInterfaceName::Noop
    }
    fn validate(&self, _: &NodeRecord) -> Result<(), StorageError> {
        Ok(())
    }
    fn should_write_image(&self, _: &NodeRecord) -> bool {
        true
    }
    async fn attach_volumes(&self, _: &NodeRecord) -> Result<(), StorageError> {
        Ok(())
    }
    async fn detach_volumes(&self, _: &NodeRecord) -> Result<(), StorageError> {
        Ok(())
    }
}

pub use external::ExternalStorage;

/// The boot volume, if any.
pub fn boot_volume(record: &NodeRecord) -> Option<&VolumeTarget> {
    record.volume_targets.iter().find(|t| t.boot_index == 0)
}

/// Shared by `external` and `cinder`: a node with a boot volume (or an NFS root) boots it as
/// it is, unless `instance_info.force_deployment` asks for an image deployment onto it
/// (scenario 4).
pub fn volume_should_write_image(record: &NodeRecord) -> bool {
    let forced = match record.node.instance_info.get("force_deployment") {
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    };
    let nfs_root = record.node.instance_info.get("nfs_root").is_some_and(|v| !v.is_null());
    (boot_volume(record).is_none() && !nfs_root) || forced
}

/// The storage interfaces, built once from the configuration.
#[derive(Clone)]
pub struct StorageInterfaces {
    config: Arc<Config>,
    cinder: Option<Arc<CinderStorage>>,
}

impl std::fmt::Debug for StorageInterfaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageInterfaces").field("cinder", &self.cinder.is_some()).finish()
    }
}

impl StorageInterfaces {
    pub fn new(config: Arc<Config>, db: SharedDb) -> Result<StorageInterfaces, StorageError> {
        let cinder = if config.storage_interface_enabled(StorageInterfaceName::Cinder) {
            Some(Arc::new(CinderStorage::new(&config, db)?))
        } else {
            None
        };
        Ok(StorageInterfaces { config, cinder })
    }

    /// The interface a node uses; refused when it is not enabled.
    pub fn for_node(&self, record: &NodeRecord) -> Result<Arc<dyn StorageInterface>, StorageError> {
        let name =
            record.node.effective_storage_interface(self.config.default.default_storage_interface);
        if !self.config.storage_interface_enabled(name) {
            let enabled: Vec<&str> =
                self.config.default.enabled_storage_interfaces.iter().map(|s| s.as_str()).collect();
            return Err(StorageError::NotEnabled(name, enabled.join(", ")));
        }
        Ok(match name {
            StorageInterfaceName::Noop => Arc::new(NoopStorage),
            StorageInterfaceName::External => Arc::new(ExternalStorage),
            StorageInterfaceName::Cinder => {
                self.cinder.clone().ok_or(StorageError::NotEnabled(name, String::new()))?
            }
        })
    }

    /// The Cinder interface, when enabled (for recovery and sync).
    pub fn cinder(&self) -> Option<&Arc<CinderStorage>> {
        self.cinder.as_ref()
    }
}
