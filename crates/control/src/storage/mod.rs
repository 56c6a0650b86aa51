//! Ironic's storage interface (`node.storage_interface`): attach and detach a node's volumes,
//! validate them, and say whether a deploy writes an image. "Storage" here means volumes, not
//! SQLite (that is `db`).
//!
//! Three implementations: `noop` (the default; does nothing), `external` (the operator records
//! the connection info; attach and detach only check it), and `cinder` (the Cinder client does
//! the work; see `cinder/`). The seam is a trait because Cinder is an external system.
//! The database handle, events and node locks are `db`'s ([`bootvol_db::SharedDb`]).

mod cinder;
mod external;

use std::sync::Arc;

use async_trait::async_trait;

pub use cinder::{CinderStorage, RecoveryReport, SyncReport};

use bootvol_core::config::Config;
use bootvol_core::model::{NodeRecord, StorageInterfaceName, VolumeTarget};
use bootvol_db::{DbError, SharedDb};

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
