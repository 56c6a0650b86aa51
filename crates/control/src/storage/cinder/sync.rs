//! Sync: every attached target compared with Cinder, its connection info brought up to date,
//! drift reported (never deleted silently); every pass recorded in the database.

use serde_json::{Value, json};

use super::{CinderStorage, SyncReport, check_driver_type};
use crate::storage::StorageError;
use bootvol_core::model::{JsonMap, VolumeTarget};
use bootvol_core::timefmt::now_unix;
use bootvol_db::{AttachmentRecord, AttachmentState, SyncPass, SyncPassOutcome, SyncRunner};

impl CinderStorage {
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

/// The properties that reach a boot script, for comparing two connection infos.
fn boot_relevant(properties: &JsonMap) -> Vec<(String, Value)> {
    bootvol_core::inventory::SCRIPT_PROPERTY_KEYS
        .iter()
        .filter_map(|k| properties.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootvol_core::config::Config;

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
