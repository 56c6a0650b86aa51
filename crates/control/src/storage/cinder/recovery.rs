//! Recovery at start: attachments a crash left `attaching` are undone, `detaching` ones are
//! detached, failed undos are tried again; each under the node's lock, with an event.

use serde_json::json;

use super::{CinderStorage, RecoveryReport};
use crate::storage::StorageError;
use bootvol_core::model::{JsonMap, VolumeTarget, VolumeType};
use bootvol_db::{AttachmentRecord, AttachmentState, LockError, NodeLock};

impl CinderStorage {
    /// Finishes or undoes what a crash interrupted: records still `attaching` are undone,
    /// `detaching` ones are detached, failed ones whose undo failed are undone again.
    pub async fn recover(&self) -> Result<RecoveryReport, StorageError> {
        let pending = self
            .db
            .run(|db| {
                db.attachment_records(&[
                    AttachmentState::Attaching,
                    AttachmentState::Detaching,
                    AttachmentState::Failed,
                ])
            })
            .await?;
        let mut report = RecoveryReport::default();
        for record in pending
            .into_iter()
            .filter(|r| !(r.state == AttachmentState::Failed && r.step == "undone"))
        {
            self.recover_one(record, &mut report).await?;
        }
        Ok(report)
    }

    /// Finishes or undoes one interrupted attachment under its node's lock (skipped while
    /// another live action holds the node), with its event; the outcome goes into `report`.
    async fn recover_one(
        &self,
        record: AttachmentRecord,
        report: &mut RecoveryReport,
    ) -> Result<(), StorageError> {
        let node = record.node_uuid.clone();
        // A node another live action works on is not interrupted: its action is not over.
        let Some((lock, record)) = self.lock_current(&record, "recovery").await? else {
            return Ok(());
        };
        // A failed read must not leave the node locked until the next restart.
        let target = match self.target_of(&record).await {
            Ok(target) => target,
            Err(e) => {
                lock.release().await;
                return Err(e);
            }
        };
        let label = format!("{} on node {}", record.volume_id, node);
        let result = match record.state {
            AttachmentState::Detaching => {
                self.detach_target(&target).await.map(|()| report.detached.push(label.clone()))
            }
            _ => self.undo(record, &target).await.map(|()| report.undone.push(label.clone())),
        };
        match result {
            Ok(()) => {
                self.event(
                    &node,
                    "bootvol.volume.recovery.end".into(),
                    "info",
                    json!({"volume": label}),
                )
                .await;
            }
            Err(e) => {
                report.failed.push(format!("{label}: {e}"));
                self.event(
                    &node,
                    "bootvol.volume.recovery.error".into(),
                    "error",
                    json!({"volume": label, "error": e.to_string()}),
                )
                .await;
            }
        }
        lock.release().await;
        Ok(())
    }

    /// Takes the lock of `listed`'s node for `verb` and reads the record again under it (the
    /// action that wrote it may have ended since it was listed). `None`: skip it, because
    /// another action holds the node or the record is no longer in the same state and step.
    pub(super) async fn lock_current(
        &self,
        listed: &AttachmentRecord,
        verb: &str,
    ) -> Result<Option<(NodeLock, AttachmentRecord)>, StorageError> {
        let lock = match self.db.lock_node(&listed.node_uuid, verb).await {
            Ok(lock) => lock,
            Err(LockError::Locked(_)) => return Ok(None),
            Err(LockError::Db(e)) => return Err(e.into()),
        };
        let target = listed.target_uuid.clone();
        match self.db.run(move |db| db.attachment_record(&target)).await {
            Ok(Some(now)) if now.state == listed.state && now.step == listed.step => {
                Ok(Some((lock, now)))
            }
            other => {
                lock.release().await;
                other.map(|_| None).map_err(StorageError::from)
            }
        }
    }

    /// The target a record is about (a stand-in when the target was deleted meanwhile).
    pub(super) async fn target_of(
        &self,
        record: &AttachmentRecord,
    ) -> Result<VolumeTarget, StorageError> {
        let node_uuid = record.node_uuid.clone();
        let found = self.db.run(move |db| db.node_record(&node_uuid)).await?;
        let target =
            found.and_then(|n| n.volume_targets.into_iter().find(|t| t.uuid == record.target_uuid));
        Ok(target.unwrap_or_else(|| VolumeTarget {
            uuid: record.target_uuid.clone(),
            volume_type: VolumeType::Iscsi,
            boot_index: 0,
            volume_id: record.volume_id.clone(),
            properties: JsonMap::new(),
            extra: JsonMap::new(),
        }))
    }
}
