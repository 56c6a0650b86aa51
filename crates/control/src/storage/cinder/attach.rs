//! Attaching one Cinder volume target, step by step with each step persisted, and undoing
//! what a failed (or interrupted) attach did on the Cinder side. Knows nothing of nodes'
//! provision states or power.

use std::time::Duration;

use super::{CinderStorage, check_driver_type};
use crate::cinder::{ApiStyle, CinderError, ConnectionInfo, Connector};
use crate::storage::StorageError;
use bootvol_core::model::{JsonMap, NodeRecord, VolumeTarget};
use bootvol_db::{AttachmentRecord, AttachmentState};

impl CinderStorage {
    /// Attaches one target; on failure, undoes what it did and returns the error.
    pub(super) async fn attach_target(
        &self,
        node: &NodeRecord,
        target: &VolumeTarget,
    ) -> Result<(), StorageError> {
        if self.attached_or_undone(target).await? {
            return Ok(());
        }
        let style = self.client.api_style().await?;
        let mut record = self.started_record(node, target, style);
        self.save(&record).await?;
        match self.attach_steps(node, target, style, &mut record).await {
            Ok(()) => Ok(()),
            Err(error) => {
                record.last_error = Some(error.to_string());
                self.save(&record).await?;
                if let Err(undo_error) = self.undo(record, target).await {
                    tracing::error!(volume = target.volume_id, error = %undo_error, "undoing a failed attach failed; recovery retries it");
                }
                Err(error)
            }
        }
    }

    /// What an earlier attach of the target left: `true` when it is attached with its
    /// connection info (nothing to do); otherwise what it left on the Cinder side is undone.
    async fn attached_or_undone(&self, target: &VolumeTarget) -> Result<bool, StorageError> {
        let uuid = target.uuid.clone();
        let Some(existing) = self.db.run(move |db| db.attachment_record(&uuid)).await? else {
            return Ok(false);
        };
        match existing.state {
            AttachmentState::Attached if !target.properties.is_empty() => return Ok(true),
            AttachmentState::Attaching | AttachmentState::Detaching | AttachmentState::Attached => {
                self.undo(existing, target).await?;
            }
            AttachmentState::Failed if existing.step != "undone" => {
                self.undo(existing, target).await?
            }
            _ => {}
        }
        Ok(false)
    }

    /// The record of a new attach, at its first step.
    fn started_record(
        &self,
        node: &NodeRecord,
        target: &VolumeTarget,
        style: ApiStyle,
    ) -> AttachmentRecord {
        AttachmentRecord {
            node_uuid: node.node.uuid.clone(),
            target_uuid: target.uuid.clone(),
            volume_id: target.volume_id.clone(),
            api: style.as_str().into(),
            attachment_id: None,
            state: AttachmentState::Attaching,
            step: "started".into(),
            connector: serde_json::to_value(self.connector(node)).unwrap_or_default(),
            last_error: None,
            updated_at: None,
        }
    }

    /// The Cinder calls of an attach, each step saved once Cinder did it.
    async fn attach_steps(
        &self,
        node: &NodeRecord,
        target: &VolumeTarget,
        style: ApiStyle,
        record: &mut AttachmentRecord,
    ) -> Result<(), StorageError> {
        let connector = self.connector(node);
        let info = match style {
            ApiStyle::Attachments => {
                self.create_attachment(&target.volume_id, &connector, record).await?
            }
            ApiStyle::Legacy => {
                self.client.reserve(&target.volume_id).await?;
                record.step = "reserved".into();
                self.save(record).await?;
                self.client.initialize_connection(&target.volume_id, &connector).await?
            }
        };
        check_driver_type(&target.volume_type, &info)?;
        self.set_properties(&target.uuid, info.data.clone()).await?;
        record.step = "initialized".into();
        self.save(record).await?;
        self.complete_attach(node, target, style, record).await?;
        self.save(record).await?;
        self.tag(record, "attach").await?;
        record.step = "tagged".into();
        record.state = AttachmentState::Attached;
        record.last_error = None;
        self.save(record).await
    }

    /// Attachments API: creates the attachment (a lost answer: the one Cinder may have made is
    /// looked for and deleted) and answers its connection info.
    async fn create_attachment(
        &self,
        volume: &str,
        connector: &Connector,
        record: &mut AttachmentRecord,
    ) -> Result<ConnectionInfo, StorageError> {
        record.step = "creating".into();
        self.save(record).await?;
        let attachment = match self.client.attachment_create(volume, connector).await {
            Ok(attachment) => attachment,
            Err(e) if e.answer_lost() => {
                // Cinder may have created it: find it once it shows, and delete it.
                let settle = Duration::from_secs(5 * self.client_timeout_secs());
                tracing::warn!(
                    volume,
                    "the answer to the attachment create was lost; watching the volume for up to {settle:?}"
                );
                if self.forget_unknown_attachments(volume, settle).await {
                    record.step = "started".into();
                }
                return Err(e.into());
            }
            Err(e) => {
                record.step = "started".into();
                return Err(e.into());
            }
        };
        record.attachment_id = Some(attachment.id.clone());
        record.step = "created".into();
        self.save(record).await?;
        attachment.connection().ok_or_else(|| {
            StorageError::Invalid(format!(
                "Cinder gave attachment {} no connection info",
                attachment.id
            ))
        })
    }

    /// The last Cinder call of an attach: the attachment completed, or the legacy `os-attach`
    /// (whose attachment id is then looked up).
    async fn complete_attach(
        &self,
        node: &NodeRecord,
        target: &VolumeTarget,
        style: ApiStyle,
        record: &mut AttachmentRecord,
    ) -> Result<(), StorageError> {
        match style {
            ApiStyle::Attachments => {
                let id = record.attachment_id.clone().unwrap_or_default();
                self.client.attachment_complete(&id).await?;
                record.step = "completed".into();
            }
            ApiStyle::Legacy => {
                let volume = &target.volume_id;
                let mountpoint = format!("/dev/bootvol{}", target.boot_index);
                self.client.attach(volume, &node.node.uuid, &mountpoint).await?;
                record.step = "attached".into();
                self.save(record).await?;
                record.attachment_id = self.legacy_attachment_id(volume, &node.node.uuid).await?;
            }
        }
        Ok(())
    }

    /// The legacy API returns no attachment id: find ours on the volume by host name.
    async fn legacy_attachment_id(
        &self,
        volume: &str,
        host: &str,
    ) -> Result<Option<String>, StorageError> {
        let volume = self.client.volume(volume).await?;
        Ok(volume
            .attachments
            .iter()
            .find(|a| a.host_name.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(host)))
            .or(volume.attachments.first())
            .map(|a| a.attachment_id.clone()))
    }

    fn client_timeout_secs(&self) -> u64 {
        self.client.timeout().as_secs().max(1)
    }

    /// After an attachment create whose answer was lost (a timeout), Cinder may hold an
    /// attachment we have no id for, or may still be creating it. Watches the volume for up to
    /// `settle`: an attachment no record knows is deleted as soon as it shows. Returns whether
    /// the volume ended free (no stray, status `available`). Only called when the answer was
    /// lost, never after an error Cinder returned, so another consumer's attachment is never
    /// touched.
    async fn forget_unknown_attachments(&self, volume: &str, settle: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + settle;
        loop {
            let known: Vec<String> = self
                .db
                .run(|db| db.attachment_records(&[]))
                .await
                .unwrap_or_default()
                .into_iter()
                .filter_map(|r| r.attachment_id)
                .collect();
            let listed = self.client.attachments_of_volume(volume).await;
            tracing::debug!(
                volume,
                ?listed,
                "looking for an attachment whose create answer was lost"
            );
            if let Ok(list) = listed {
                let strays: Vec<String> =
                    list.into_iter().filter(|id| !known.contains(id)).collect();
                if !strays.is_empty() {
                    let mut all_deleted = true;
                    for id in strays {
                        tracing::warn!(
                            volume,
                            attachment = id,
                            "deleting an attachment whose create answer was lost"
                        );
                        all_deleted &= self.client.attachment_delete(&id).await.is_ok();
                    }
                    return all_deleted;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return self.client.volume(volume).await.is_ok_and(|v| v.status == "available");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Undoes whatever the record says exists on the Cinder side, clears the target's
    /// connection info, and marks the record `failed`/`undone`.
    pub(super) async fn undo(
        &self,
        mut record: AttachmentRecord,
        target: &VolumeTarget,
    ) -> Result<(), StorageError> {
        let result = match record.api.as_str() {
            "attachments" => match &record.attachment_id {
                Some(id) => self.client.attachment_delete(id).await,
                None if record.step == "creating" => {
                    if self
                        .forget_unknown_attachments(&record.volume_id, Duration::from_secs(1))
                        .await
                    {
                        Ok(())
                    } else {
                        Err(CinderError::Protocol {
                            action: "undoing an attachment create whose answer was lost".into(),
                            message: "the volume is not free yet; recovery looks again".into(),
                        })
                    }
                }
                None => Ok(()),
            },
            _ => self.undo_legacy(&record).await,
        };
        match result {
            Ok(()) => {
                self.set_properties(&target.uuid, JsonMap::new()).await?;
                record.state = AttachmentState::Failed;
                record.step = "undone".into();
                self.save(&record).await
            }
            Err(e) => {
                record.state = AttachmentState::Failed;
                record.last_error = Some(format!("undo failed: {e}"));
                self.save(&record).await?;
                Err(e.into())
            }
        }
    }

    async fn undo_legacy(&self, record: &AttachmentRecord) -> Result<(), CinderError> {
        let volume = &record.volume_id;
        // `os-attach` may have happened even when its answer was lost: ask the volume.
        let current = match self.client.volume(volume).await {
            Ok(v) => v,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        let ours = current.attachments.iter().find(|a| {
            a.host_name.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(&record.node_uuid))
        });
        if let Some(attachment) = ours {
            let mut attached = record.clone();
            attached.attachment_id = Some(attachment.attachment_id.clone());
            return self.detach_legacy(&attached).await;
        }
        if steps_reached(&record.step, "initialized", LEGACY_STEPS) {
            self.client.terminate_connection_raw(volume, &record.connector).await?;
        }
        if steps_reached(&record.step, "reserved", LEGACY_STEPS) || current.status == "attaching" {
            self.client.unreserve(volume).await?;
        }
        Ok(())
    }
}

const LEGACY_STEPS: &[&str] = &["started", "reserved", "initialized", "attached", "tagged"];

/// Whether `current` is at or past `wanted` in `order`.
fn steps_reached(current: &str, wanted: &str, order: &[&str]) -> bool {
    let position = |s: &str| order.iter().position(|x| *x == s);
    matches!((position(current), position(wanted)), (Some(c), Some(w)) if c >= w)
}
