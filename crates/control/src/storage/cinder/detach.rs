//! Detaching one Cinder volume target (retried with backoff), through the attachments API or
//! the legacy volume actions; the target's connection info goes once the volume is released.

use super::CinderStorage;
use crate::cinder::CinderError;
use crate::storage::StorageError;
use bootvol_core::model::{JsonMap, VolumeTarget};
use bootvol_db::{AttachmentRecord, AttachmentState};

impl CinderStorage {
    pub(super) async fn detach_legacy(&self, record: &AttachmentRecord) -> Result<(), CinderError> {
        let volume = &record.volume_id;
        let current = match self.client.volume(volume).await {
            Ok(v) => v,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        let ours = current
            .attachments
            .iter()
            .any(|a| Some(&a.attachment_id) == record.attachment_id.as_ref());
        if current.status == "in-use" && ours {
            self.client.begin_detaching(volume).await?;
        }
        let result = async {
            self.client.terminate_connection_raw(volume, &record.connector).await?;
            if ours || current.status == "detaching" {
                self.client.detach(volume, record.attachment_id.as_deref()).await?;
            }
            Ok(())
        }
        .await;
        if result.is_err() {
            let _ = self.client.roll_detaching(volume).await;
        }
        result
    }

    /// Detaches one target, retried with backoff.
    pub(super) async fn detach_target(&self, target: &VolumeTarget) -> Result<(), StorageError> {
        let uuid = target.uuid.clone();
        let record = self.db.run(move |db| db.attachment_record(&uuid)).await?;
        let Some(mut record) = record.filter(|r| !released(r)) else {
            if !target.properties.is_empty() {
                self.set_properties(&target.uuid, JsonMap::new()).await?;
            }
            return Ok(());
        };
        record.state = AttachmentState::Detaching;
        self.save(&record).await?;
        if let Err(e) = self.release_with_retries(&record).await {
            record.last_error = Some(e.to_string());
            self.save(&record).await?;
            return Err(e.into());
        }
        // Connection info, CHAP secrets included, goes once the volume is released.
        self.set_properties(&target.uuid, JsonMap::new()).await?;
        if let Err(e) = self.tag(&record, "detach").await {
            tracing::warn!(volume = record.volume_id, error = %e, "volume detached but its metadata tag was not updated");
        }
        record.state = AttachmentState::Detached;
        record.step = "detached".into();
        record.last_error = None;
        self.save(&record).await
    }

    /// Releases the volume on the Cinder side, retried with backoff; the last error when every
    /// try failed.
    async fn release_with_retries(&self, record: &AttachmentRecord) -> Result<(), CinderError> {
        let mut attempt = 0;
        loop {
            let result = match record.api.as_str() {
                "attachments" => match &record.attachment_id {
                    Some(id) => self.client.attachment_delete(id).await,
                    None => Ok(()),
                },
                _ => self.detach_legacy(record).await,
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) if attempt < self.retries => {
                    attempt += 1;
                    let delay = self.backoff * 2u32.saturating_pow(attempt - 1);
                    tracing::warn!(volume = record.volume_id, attempt, error = %e, "detach failed; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether a record says the volume is released already (detached, or its attach undone).
fn released(record: &AttachmentRecord) -> bool {
    record.state == AttachmentState::Detached
        || (record.state == AttachmentState::Failed && record.step == "undone")
}
