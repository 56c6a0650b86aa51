//! `external`: the operator records each target's connection info; attach and detach only
//! check that it is there and printable.

use async_trait::async_trait;

use super::{StorageError, StorageInterface, volume_should_write_image};
use bootvol_core::model::{NodeRecord, StorageInterfaceName};

#[derive(Debug)]
pub struct ExternalStorage;

#[async_trait]
impl StorageInterface for ExternalStorage {
    fn name(&self) -> StorageInterfaceName {
        StorageInterfaceName::External
    }

    fn validate(&self, record: &NodeRecord) -> Result<(), StorageError> {
        for target in &record.volume_targets {
            if target.properties.is_empty() {
                return Err(StorageError::Invalid(format!(
                    "volume target boot_index {} ({}): storage interface external needs its connection info in properties",
                    target.boot_index, target.volume_id
                )));
            }
            bootvol_core::inventory::check_target_properties(target).map_err(|e| {
                StorageError::Invalid(format!(
                    "volume target boot_index {} ({}): {e}",
                    target.boot_index, target.volume_id
                ))
            })?;
        }
        Ok(())
    }

    fn should_write_image(&self, record: &NodeRecord) -> bool {
        volume_should_write_image(record)
    }

    async fn attach_volumes(&self, record: &NodeRecord) -> Result<(), StorageError> {
        self.validate(record)
    }

    async fn detach_volumes(&self, _: &NodeRecord) -> Result<(), StorageError> {
        // The operator owns the volumes and their connection info: nothing to release.
        Ok(())
    }
}
