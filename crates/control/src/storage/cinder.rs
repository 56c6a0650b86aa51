//! `cinder`: attach and detach a node's Cinder volumes, persist every step, undo what a failed
//! attach did, finish or undo what a crash interrupted, and keep the local connection info in
//! step with Cinder (sync).
//!
//! Each volume target has an `AttachmentRecord` whose `step` is written after each Cinder call
//! succeeds: so at any moment the database says what exists on the Cinder side. Steps:
//! attachments API `started → created → initialized → completed → tagged`; legacy actions
//! `started → reserved → initialized → attached → tagged`; then `undone` or `detached`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::{StorageError, StorageInterface, volume_should_write_image};
use crate::cinder::{ApiStyle, CinderClient, CinderError, ConnectionInfo, Connector};
use bootvol_core::config::Config;
use bootvol_core::model::{
    ConnectorType, JsonMap, NodeRecord, StorageInterfaceName, VolumeTarget, VolumeType,
};
use bootvol_core::timefmt::{format_unix, now_unix};
use bootvol_db::{
    AttachmentRecord, AttachmentState, LockError, NodeLock, SharedDb, SyncPass, SyncPassOutcome,
    SyncRunner,
};

/// The Cinder storage interface.
#[derive(Debug)]
pub struct CinderStorage {
    client: Arc<CinderClient>,
    db: SharedDb,
    multipath: bool,
    retries: u32,
    backoff: Duration,
}

/// What recovery at start did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub undone: Vec<String>,
    pub detached: Vec<String>,
    pub failed: Vec<String>,
}

/// What a sync pass found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    pub checked: usize,
    pub updated: Vec<String>,
    pub drifted: Vec<String>,
    pub errors: Vec<String>,
}

const ATTACH: &str = "baremetal.node.storage_attach";
const DETACH: &str = "baremetal.node.storage_detach";

impl CinderStorage {
    pub fn new(config: &Config, db: SharedDb) -> Result<CinderStorage, StorageError> {
        Ok(CinderStorage {
            client: Arc::new(CinderClient::new(config)?),
            db,
            multipath: config.cinder.multipath,
            retries: config.cinder.retries,
            backoff: Duration::from_millis(500),
        })
    }

    pub fn client(&self) -> &CinderClient {
        &self.client
    }

    fn connector(&self, record: &NodeRecord) -> Connector {
        let ids = |kind: ConnectorType| -> Vec<String> {
            record
                .volume_connectors
                .iter()
                .filter(|c| c.connector_type == kind)
                .map(|c| c.connector_id.clone())
                .collect()
        };
        Connector {
            initiator: ids(ConnectorType::Iqn).into_iter().next(),
            wwpns: ids(ConnectorType::Wwpn),
            wwnns: ids(ConnectorType::Wwnn),
            ip: ids(ConnectorType::Ip).into_iter().next(),
            host: record.node.uuid.clone(),
            multipath: self.multipath,
            platform: "x86_64".into(),
            os_type: "linux".into(),
        }
    }

    async fn save(&self, record: &AttachmentRecord) -> Result<(), StorageError> {
        let record = record.clone();
        self.db.run(move |db| db.save_attachment_record(&record)).await?;
        Ok(())
    }

    async fn set_properties(
        &self,
        target_uuid: &str,
        properties: JsonMap,
    ) -> Result<(), StorageError> {
        let uuid = target_uuid.to_owned();
        self.db.run(move |db| db.set_target_properties(&uuid, &properties)).await?;
        Ok(())
    }

    async fn event(&self, node: &str, event_type: String, level: &'static str, payload: Value) {
        self.db.record_event(node, event_type, level, payload).await;
    }

    async fn set_last_error(&self, node: &str, error: Option<String>) {
        let node = node.to_owned();
        if let Err(e) = self.db.run(move |db| db.set_node_last_error(&node, error.as_deref())).await
        {
            tracing::error!(error = %e, "cannot record the node's last_error");
        }
    }

    async fn tag(&self, record: &AttachmentRecord, action: &str) -> Result<(), CinderError> {
        let value = json!({"action": action, "at": format_unix(now_unix()), "attachment_id": record.attachment_id,
            "api": record.api});
        let mut metadata = Map::new();
        metadata
            .insert(format!("bootvol_node_{}", record.node_uuid), Value::String(value.to_string()));
        self.client.set_metadata(&record.volume_id, &metadata).await
    }

    /// Attaches one target; on failure, undoes what it did and returns the error.
    async fn attach_target(
        &self,
        node: &NodeRecord,
        target: &VolumeTarget,
    ) -> Result<(), StorageError> {
        if let Some(existing) = self
            .db
            .run({
                let uuid = target.uuid.clone();
                move |db| db.attachment_record(&uuid)
            })
            .await?
        {
            match existing.state {
                AttachmentState::Attached if !target.properties.is_empty() => return Ok(()),
                AttachmentState::Attaching
                | AttachmentState::Detaching
                | AttachmentState::Attached => {
                    self.undo(existing, target).await?;
                }
                AttachmentState::Failed if existing.step != "undone" => {
                    self.undo(existing, target).await?
                }
                _ => {}
            }
        }
        let style = self.client.api_style().await?;
        let mut record = AttachmentRecord {
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
        };
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

    async fn attach_steps(
        &self,
        node: &NodeRecord,
        target: &VolumeTarget,
        style: ApiStyle,
        record: &mut AttachmentRecord,
    ) -> Result<(), StorageError> {
        let connector = self.connector(node);
        let volume = &target.volume_id;
        let info = match style {
            ApiStyle::Attachments => {
                record.step = "creating".into();
                self.save(record).await?;
                let attachment = match self.client.attachment_create(volume, &connector).await {
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
                })?
            }
            ApiStyle::Legacy => {
                self.client.reserve(volume).await?;
                record.step = "reserved".into();
                self.save(record).await?;
                self.client.initialize_connection(volume, &connector).await?
            }
        };
        check_driver_type(&target.volume_type, &info)?;
        self.set_properties(&target.uuid, info.data.clone()).await?;
        record.step = "initialized".into();
        self.save(record).await?;
        match style {
            ApiStyle::Attachments => {
                let id = record.attachment_id.clone().unwrap_or_default();
                self.client.attachment_complete(&id).await?;
                record.step = "completed".into();
            }
            ApiStyle::Legacy => {
                let mountpoint = format!("/dev/bootvol{}", target.boot_index);
                self.client.attach(volume, &node.node.uuid, &mountpoint).await?;
                record.step = "attached".into();
                self.save(record).await?;
                record.attachment_id = self.legacy_attachment_id(volume, &node.node.uuid).await?;
            }
        }
        self.save(record).await?;
        self.tag(record, "attach").await?;
        record.step = "tagged".into();
        record.state = AttachmentState::Attached;
        record.last_error = None;
        self.save(record).await
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
    async fn undo(
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

    async fn detach_legacy(&self, record: &AttachmentRecord) -> Result<(), CinderError> {
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
    async fn detach_target(&self, target: &VolumeTarget) -> Result<(), StorageError> {
        let uuid = target.uuid.clone();
        let Some(mut record) = self.db.run(move |db| db.attachment_record(&uuid)).await? else {
            if !target.properties.is_empty() {
                self.set_properties(&target.uuid, JsonMap::new()).await?;
            }
            return Ok(());
        };
        if record.state == AttachmentState::Detached
            || (record.state == AttachmentState::Failed && record.step == "undone")
        {
            if !target.properties.is_empty() {
                self.set_properties(&target.uuid, JsonMap::new()).await?;
            }
            return Ok(());
        }
        record.state = AttachmentState::Detaching;
        self.save(&record).await?;
        let mut attempt = 0;
        loop {
            let result = match record.api.as_str() {
                "attachments" => match &record.attachment_id {
                    Some(id) => self.client.attachment_delete(id).await,
                    None => Ok(()),
                },
                _ => self.detach_legacy(&record).await,
            };
            match result {
                Ok(()) => break,
                Err(e) if attempt < self.retries => {
                    attempt += 1;
                    let delay = self.backoff * 2u32.saturating_pow(attempt - 1);
                    tracing::warn!(volume = record.volume_id, attempt, error = %e, "detach failed; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                Err(e) => {
                    record.last_error = Some(e.to_string());
                    self.save(&record).await?;
                    return Err(e.into());
                }
            }
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
            let node = record.node_uuid.clone();
            // A node another live action works on is not interrupted: its action is not over.
            let Some((lock, record)) = self.lock_current(&record, "recovery").await? else {
                continue;
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
        }
        Ok(report)
    }

    /// Takes the lock of `listed`'s node for `verb` and reads the record again under it (the
    /// action that wrote it may have ended since it was listed). `None`: skip it, because
    /// another action holds the node or the record is no longer in the same state and step.
    async fn lock_current(
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
    async fn target_of(&self, record: &AttachmentRecord) -> Result<VolumeTarget, StorageError> {
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

    /// Compares every attached target with Cinder and brings the local connection info up to
    /// date. Drift (attachment or volume gone) becomes an event and the node's `last_error`;
    /// nothing is deleted silently. Every pass, failed ones too, is recorded in the database
    /// (`Db::sync_status`) with `ran_by`; a failure to record it is logged, not returned.
    pub async fn sync(&self, ran_by: SyncRunner) -> Result<SyncReport, StorageError> {
        let started_at = now_unix();
        let mut report = SyncReport::default();
        let result = self.sync_pass(&mut report).await;
        let pass = sync_pass_record(ran_by, started_at, now_unix(), &report, result.as_ref().err());
        if let Err(e) = self.db.run(move |db| db.record_sync_pass(&pass)).await {
            tracing::warn!(error = %e, "cannot record the volume sync pass");
        }
        result.map(|()| report)
    }

    async fn sync_pass(&self, report: &mut SyncReport) -> Result<(), StorageError> {
        let attached =
            self.db.run(|db| db.attachment_records(&[AttachmentState::Attached])).await?;
        for record in attached {
            let Some((lock, record)) = self.lock_current(&record, "sync").await? else { continue };
            report.checked += 1;
            // A failed read must not leave the node locked until the next restart.
            let target = match self.target_of(&record).await {
                Ok(target) => target,
                Err(e) => {
                    lock.release().await;
                    return Err(e);
                }
            };
            let label = format!("{} on node {}", record.volume_id, record.node_uuid);
            let outcome = self.sync_one(&record, &target).await;
            lock.release().await;
            match outcome {
                Ok(SyncOutcome::Same) => {}
                Ok(SyncOutcome::Updated) => report.updated.push(label),
                Ok(SyncOutcome::Drift(why)) => {
                    let message = format!("volume {}: {why}", record.volume_id);
                    self.event(&record.node_uuid, "bootvol.volume.sync.drift".into(), "error",
                        json!({"volume_id": record.volume_id, "target_uuid": record.target_uuid, "problem": why})).await;
                    self.set_last_error(&record.node_uuid, Some(message.clone())).await;
                    report.drifted.push(message);
                }
                Err(e) => report.errors.push(format!("{label}: {e}")),
            }
        }
        Ok(())
    }

    async fn sync_one(
        &self,
        record: &AttachmentRecord,
        target: &VolumeTarget,
    ) -> Result<SyncOutcome, StorageError> {
        let volume = match self.client.volume(&record.volume_id).await {
            Ok(v) => v,
            Err(e) if e.is_not_found() => {
                return Ok(SyncOutcome::Drift("the volume no longer exists in Cinder".into()));
            }
            Err(e) => return Err(e.into()),
        };
        let still_attached = match (record.api.as_str(), &record.attachment_id) {
            ("attachments", Some(id)) => match self.client.attachment(id).await {
                Ok(a) => a.status != "detached" && a.status != "deleted",
                Err(e) if e.is_not_found() => false,
                Err(e) => return Err(e.into()),
            },
            (_, Some(id)) => volume.attachments.iter().any(|a| &a.attachment_id == id),
            (_, None) => !volume.attachments.is_empty(),
        };
        if !still_attached {
            return Ok(SyncOutcome::Drift(format!(
                "the attachment is gone (volume status {})",
                volume.status
            )));
        }
        // Ask the backend for the connection as it is now (after a migration or a CHAP
        // rotation it differs from what the attach returned).
        let fresh =
            self.client.initialize_connection_raw(&record.volume_id, &record.connector).await?;
        check_driver_type(&target.volume_type, &fresh)?;
        if boot_relevant(&fresh.data) == boot_relevant(&target.properties) {
            return Ok(SyncOutcome::Same);
        }
        self.set_properties(&target.uuid, fresh.data.clone()).await?;
        self.event(&record.node_uuid, "bootvol.volume.sync.updated".into(), "info",
            json!({"volume_id": record.volume_id, "target_uuid": record.target_uuid, "properties": fresh.data})).await;
        Ok(SyncOutcome::Updated)
    }

    async fn for_each_target<F, Fut>(
        &self,
        targets: Vec<VolumeTarget>,
        f: F,
    ) -> Result<Vec<VolumeTarget>, (Vec<VolumeTarget>, StorageError)>
    where
        F: Fn(VolumeTarget) -> Fut,
        Fut: std::future::Future<Output = Result<(), StorageError>>,
    {
        let mut done = Vec::new();
        for target in targets {
            match f(target.clone()).await {
                Ok(()) => done.push(target),
                Err(e) => return Err((done, e)),
            }
        }
        Ok(done)
    }
}

enum SyncOutcome {
    Same,
    Updated,
    Drift(String),
}

/// What is recorded of a sync pass: its counts, and its drift and error lines (after the error
/// that stopped it, if one did) as the CLI prints them.
fn sync_pass_record(
    ran_by: SyncRunner,
    started_at: u64,
    finished_at: u64,
    report: &SyncReport,
    stopped_by: Option<&StorageError>,
) -> SyncPass {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let outcome = match stopped_by {
        Some(_) => SyncPassOutcome::Failed,
        None if !report.errors.is_empty() => SyncPassOutcome::Partial,
        None if !report.drifted.is_empty() => SyncPassOutcome::Drift,
        None => SyncPassOutcome::Ok,
    };
    let lines: Vec<String> = stopped_by
        .map(|e| format!("failed: {e}"))
        .into_iter()
        .chain(report.drifted.iter().map(|l| format!("drift: {l}")))
        .chain(report.errors.iter().map(|l| format!("error: {l}")))
        .collect();
    SyncPass {
        ran_by,
        started_at: i64::try_from(started_at).unwrap_or(i64::MAX),
        finished_at: i64::try_from(finished_at).unwrap_or(i64::MAX),
        outcome,
        checked: count(report.checked),
        updated: count(report.updated.len()),
        drifted: count(report.drifted.len()),
        errors: count(report.errors.len()),
        message: lines.join("\n"),
    }
}

const LEGACY_STEPS: &[&str] = &["started", "reserved", "initialized", "attached", "tagged"];

/// Whether `current` is at or past `wanted` in `order`.
fn steps_reached(current: &str, wanted: &str, order: &[&str]) -> bool {
    let position = |s: &str| order.iter().position(|x| *x == s);
    matches!((position(current), position(wanted)), (Some(c), Some(w)) if c >= w)
}

/// The properties that reach a boot script, for comparing two connection infos.
fn boot_relevant(properties: &JsonMap) -> Vec<(String, Value)> {
    bootvol_core::inventory::SCRIPT_PROPERTY_KEYS
        .iter()
        .filter_map(|k| properties.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

/// Volume types Cinder can attach, and the `driver_volume_type`s that match them.
fn check_driver_type(volume_type: &VolumeType, info: &ConnectionInfo) -> Result<(), StorageError> {
    let matches = match volume_type {
        VolumeType::Iscsi => matches!(info.driver_volume_type.as_str(), "iscsi" | "iser" | "iSCSI"),
        VolumeType::FibreChannel => info.driver_volume_type == "fibre_channel",
        VolumeType::Nfs => info.driver_volume_type == "nfs",
        VolumeType::Aoe | VolumeType::Http | VolumeType::Other(_) => false,
    };
    if matches {
        Ok(())
    } else {
        Err(StorageError::Invalid(format!(
            "Cinder connects this volume as {:?}, but the volume target says {volume_type}",
            info.driver_volume_type
        )))
    }
}

/// The targets Cinder manages, in boot order.
fn cinder_targets(record: &NodeRecord) -> Vec<VolumeTarget> {
    record
        .volume_targets
        .iter()
        .filter(|t| {
            matches!(t.volume_type, VolumeType::Iscsi | VolumeType::FibreChannel | VolumeType::Nfs)
        })
        .cloned()
        .collect()
}

#[async_trait]
impl StorageInterface for CinderStorage {
    fn name(&self) -> StorageInterfaceName {
        StorageInterfaceName::Cinder
    }

    fn validate(&self, record: &NodeRecord) -> Result<(), StorageError> {
        let invalid = |m: String| Err(StorageError::Invalid(m));
        for target in &record.volume_targets {
            if matches!(
                target.volume_type,
                VolumeType::Aoe | VolumeType::Http | VolumeType::Other(_)
            ) {
                return invalid(format!(
                    "volume target boot_index {}: Cinder cannot attach {} volumes; use storage_interface external",
                    target.boot_index, target.volume_type
                ));
            }
            if uuid::Uuid::parse_str(&target.volume_id).is_err() {
                return invalid(format!(
                    "volume target boot_index {}: volume_id {:?} is not a Cinder volume UUID",
                    target.boot_index, target.volume_id
                ));
            }
        }
        let has =
            |kind: ConnectorType| record.volume_connectors.iter().any(|c| c.connector_type == kind);
        if record.volume_targets.iter().any(|t| t.volume_type == VolumeType::Iscsi)
            && !has(ConnectorType::Iqn)
        {
            return invalid(
                "iSCSI volumes need a volume connector of type iqn to send to Cinder".into(),
            );
        }
        if record.volume_targets.iter().any(|t| t.volume_type == VolumeType::FibreChannel)
            && !has(ConnectorType::Wwpn)
        {
            return invalid(
                "Fibre Channel volumes need volume connectors of type wwpn to send to Cinder"
                    .into(),
            );
        }
        Ok(())
    }

    fn should_write_image(&self, record: &NodeRecord) -> bool {
        volume_should_write_image(record)
    }

    async fn attach_volumes(&self, record: &NodeRecord) -> Result<(), StorageError> {
        self.validate(record)?;
        let node = record.node.uuid.clone();
        let volumes: Vec<String> =
            cinder_targets(record).iter().map(|t| t.volume_id.clone()).collect();
        self.event(&node, format!("{ATTACH}.start"), "info", json!({"volumes": volumes})).await;
        match self
            .for_each_target(cinder_targets(record), |t| async move {
                self.attach_target(record, &t).await
            })
            .await
        {
            Ok(_) => {
                self.set_last_error(&node, None).await;
                self.event(&node, format!("{ATTACH}.end"), "info", json!({"volumes": volumes}))
                    .await;
                Ok(())
            }
            Err((attached, error)) => {
                // Volumes attached earlier in this call are released: all or nothing.
                for target in attached.iter().rev() {
                    if let Err(e) = self.detach_target(target).await {
                        tracing::error!(volume = target.volume_id, error = %e, "releasing an earlier volume after a failed attach");
                    }
                }
                let message = format!("attaching volumes failed: {error}");
                self.set_last_error(&node, Some(message.clone())).await;
                self.event(
                    &node,
                    format!("{ATTACH}.error"),
                    "error",
                    json!({"volumes": volumes, "error": message}),
                )
                .await;
                Err(error)
            }
        }
    }

    async fn detach_volumes(&self, record: &NodeRecord) -> Result<(), StorageError> {
        let node = record.node.uuid.clone();
        let mut targets = cinder_targets(record);
        targets.reverse();
        let volumes: Vec<String> = targets.iter().map(|t| t.volume_id.clone()).collect();
        self.event(&node, format!("{DETACH}.start"), "info", json!({"volumes": volumes})).await;
        let mut first_error = None;
        for target in &targets {
            if let Err(e) = self.detach_target(target).await {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            None => {
                self.set_last_error(&node, None).await;
                self.event(&node, format!("{DETACH}.end"), "info", json!({"volumes": volumes}))
                    .await;
                Ok(())
            }
            Some(error) => {
                let message = format!("detaching volumes failed: {error}");
                self.set_last_error(&node, Some(message.clone())).await;
                self.event(
                    &node,
                    format!("{DETACH}.error"),
                    "error",
                    json!({"volumes": volumes, "error": message}),
                )
                .await;
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> SyncReport {
        SyncReport {
            checked: 3,
            updated: vec!["v1 on node n1".into()],
            drifted: vec!["volume v2: the attachment is gone (volume status available)".into()],
            errors: vec![],
        }
    }

    #[test]
    fn a_pass_without_errors_but_with_drift_is_drift() {
        let pass = sync_pass_record(SyncRunner::Cli, 10, 12, &report(), None);
        assert_eq!(
            pass,
            SyncPass {
                ran_by: SyncRunner::Cli,
                started_at: 10,
                finished_at: 12,
                outcome: SyncPassOutcome::Drift,
                checked: 3,
                updated: 1,
                drifted: 1,
                errors: 0,
                message: "drift: volume v2: the attachment is gone (volume status available)"
                    .into(),
            }
        );
    }

    #[test]
    fn errors_make_a_pass_partial_and_a_stopped_pass_failed() {
        let mut with_errors = report();
        with_errors.errors.push("v3 on node n3: Cinder answered 500 to get volume: boom".into());
        let pass = sync_pass_record(SyncRunner::Serve, 10, 12, &with_errors, None);
        assert_eq!(pass.outcome, SyncPassOutcome::Partial);
        assert_eq!((pass.drifted, pass.errors), (1, 1));
        assert_eq!(
            pass.message,
            "drift: volume v2: the attachment is gone (volume status available)\n\
             error: v3 on node n3: Cinder answered 500 to get volume: boom"
        );

        let stopped = StorageError::Invalid("the database is locked".into());
        let pass = sync_pass_record(SyncRunner::Serve, 10, 12, &report(), Some(&stopped));
        assert_eq!(pass.outcome, SyncPassOutcome::Failed);
        assert_eq!(pass.checked, 3, "what was checked before the failure still counts");
        assert!(
            pass.message.starts_with("failed: the database is locked\ndrift: "),
            "{}",
            pass.message
        );
    }

    #[tokio::test]
    async fn every_pass_is_recorded_with_the_process_that_ran_it() {
        let config = Config::from_toml(
            "[DEFAULT]\nenabled_storage_interfaces = [\"noop\", \"cinder\"]\n\
             [cinder]\nurl = \"http://127.0.0.1:9/v3\"\n",
            "test",
        )
        .unwrap();
        let db = bootvol_db::SharedDb::new(bootvol_db::Db::open_in_memory().unwrap());
        let storage = CinderStorage::new(&config, db.clone()).unwrap();
        // Nothing is attached: the pass asks Cinder nothing and is ok.
        let report = storage.sync(SyncRunner::Cli).await.unwrap();
        assert_eq!(report, SyncReport::default());
        let status = db.run(|db| db.sync_status()).await.unwrap().unwrap();
        assert_eq!((status.ran_by, status.outcome), (SyncRunner::Cli, SyncPassOutcome::Ok));
        assert_eq!((status.checked, status.updated, status.drifted, status.errors), (0, 0, 0, 0));
        assert!(status.started_at <= status.finished_at && status.started_at > 1_600_000_000);
        assert_eq!(status.last_ok_at, Some(status.finished_at));
        storage.sync(SyncRunner::Serve).await.unwrap();
        let status = db.run(|db| db.sync_status()).await.unwrap().unwrap();
        assert_eq!(status.ran_by, SyncRunner::Serve);
    }
}
