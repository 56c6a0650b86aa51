//! The outcome of the last Cinder sync pass (`sync_status`, one row) and attachment counts per
//! state: what an operator looks at to see whether sync keeps working.

use super::engine::{Row, args};

use super::{Db, DbError};

pub use bootvol_core::model::sync::{
    SYNC_MESSAGE_LIMIT, SyncPass, SyncPassOutcome, SyncRunner, SyncStatus,
};

const TRUNCATED: &str = "\n… (truncated)";

/// `message` cut to at most [`SYNC_MESSAGE_LIMIT`] bytes, on a character boundary.
fn truncated(message: &str) -> String {
    if message.len() <= SYNC_MESSAGE_LIMIT {
        return message.to_owned();
    }
    let mut end = SYNC_MESSAGE_LIMIT - TRUNCATED.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{TRUNCATED}", &message[..end])
}

fn status_from_row(row: &Row) -> Result<(SyncStatus, String, String), DbError> {
    Ok((
        SyncStatus {
            pass: SyncPass {
                ran_by: SyncRunner::Serve,
                started_at: row.get(1)?,
                finished_at: row.get(2)?,
                outcome: SyncPassOutcome::Failed,
                checked: row.get(4)?,
                updated: row.get(5)?,
                drifted: row.get(6)?,
                errors: row.get(7)?,
                message: row.get(8)?,
            },
            last_ok_at: row.get(9)?,
        },
        row.get(0)?,
        row.get(3)?,
    ))
}

impl Db {
    /// Records a finished sync pass in place of the previous one; `last_ok_at` moves to this
    /// pass's end only when it was clean: outcome `ok` and no drift.
    pub fn record_sync_pass(&self, pass: &SyncPass) -> Result<(), DbError> {
        self.conn.execute(
            "INSERT INTO sync_status (id, ran_by, started_at, finished_at, outcome, checked, updated, \
             drifted, errors, message, last_ok_at) \
             VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, CASE WHEN ?4 = 'ok' AND CAST(?7 AS BIGINT) = 0 THEN CAST(?3 AS BIGINT) END) \
             ON CONFLICT (id) DO UPDATE SET ran_by = excluded.ran_by, started_at = excluded.started_at, \
             finished_at = excluded.finished_at, outcome = excluded.outcome, checked = excluded.checked, \
             updated = excluded.updated, drifted = excluded.drifted, errors = excluded.errors, \
             message = excluded.message, \
             last_ok_at = CASE WHEN excluded.outcome = 'ok' AND excluded.drifted = 0 \
             THEN excluded.finished_at ELSE sync_status.last_ok_at END",
            args![
                pass.ran_by.as_str(),
                pass.started_at,
                pass.finished_at,
                pass.outcome.stored(),
                pass.checked,
                pass.updated,
                pass.drifted,
                pass.errors,
                truncated(&pass.message),
            ],
        )?;
        Ok(())
    }

    /// The last recorded sync pass, or `None` before the first one.
    pub fn sync_status(&self) -> Result<Option<SyncStatus>, DbError> {
        let row = self
            .conn
            .query_opt(
                "SELECT ran_by, started_at, finished_at, outcome, checked, updated, drifted, errors, \
                 message, last_ok_at FROM sync_status WHERE id = 1",
                &[],
            )?
            .map(|r| status_from_row(&r))
            .transpose()?;
        let Some((mut status, ran_by, outcome)) = row else { return Ok(None) };
        let corrupt =
            |message: String| DbError::Corrupt { table: "sync_status", key: "1".into(), message };
        status.pass.ran_by = SyncRunner::parse(&ran_by)
            .ok_or_else(|| corrupt(format!("unknown ran_by {ran_by:?}")))?;
        status.pass.outcome = match SyncPassOutcome::parse(&outcome) {
            Some(SyncPassOutcome::Ok) if status.pass.drifted > 0 => SyncPassOutcome::Drift,
            Some(outcome) => outcome,
            None => return Err(corrupt(format!("unknown outcome {outcome:?}"))),
        };
        Ok(Some(status))
    }

    /// How many `volume_attachments` records are in each state (only states that have some),
    /// by state name.
    pub fn attachment_counts(&self) -> Result<Vec<(String, i64)>, DbError> {
        let rows = self.conn.query(
            "SELECT state, COUNT(*) FROM volume_attachments GROUP BY state ORDER BY state",
            &[],
        )?;
        rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttachmentRecord, AttachmentState};

    fn pass(outcome: SyncPassOutcome, finished_at: i64) -> SyncPass {
        SyncPass {
            ran_by: SyncRunner::Serve,
            started_at: finished_at - 2,
            finished_at,
            outcome,
            checked: 3,
            updated: 1,
            drifted: 0,
            errors: 0,
            message: String::new(),
        }
    }

    #[test]
    fn nothing_recorded_before_the_first_pass() {
        let db = Db::open_in_memory().unwrap();
        assert_eq!(db.sync_status().unwrap(), None);
    }

    #[test]
    fn a_pass_is_read_back_as_recorded() {
        let db = Db::open_in_memory().unwrap();
        let mut first = pass(SyncPassOutcome::Partial, 1_700_000_000);
        first.ran_by = SyncRunner::Cli;
        first.errors = 2;
        first.drifted = 1;
        first.message = "drift: volume v1: gone\nerror: v2 on node n: Cinder answered 500".into();
        db.record_sync_pass(&first).unwrap();
        let status = db.sync_status().unwrap().unwrap();
        assert_eq!(
            status,
            SyncStatus { pass: first, last_ok_at: None },
            "read back as recorded, with nothing clean yet"
        );
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["ran_by"], "cli");
        assert_eq!(json["outcome"], "partial");
    }

    #[test]
    fn last_ok_at_is_kept_across_passes_that_were_not_ok() {
        let db = Db::open_in_memory().unwrap();
        db.record_sync_pass(&pass(SyncPassOutcome::Ok, 100)).unwrap();
        assert_eq!(db.sync_status().unwrap().unwrap().last_ok_at, Some(100));

        let mut failed = pass(SyncPassOutcome::Failed, 200);
        failed.checked = 0;
        failed.updated = 0;
        failed.message = "database: disk I/O error".into();
        db.record_sync_pass(&failed).unwrap();
        let status = db.sync_status().unwrap().unwrap();
        assert_eq!(status.outcome, SyncPassOutcome::Failed);
        assert_eq!((status.finished_at, status.checked), (200, 0));
        assert_eq!(status.message, "database: disk I/O error");
        assert_eq!(status.last_ok_at, Some(100), "a failed pass keeps the last good one");

        db.record_sync_pass(&pass(SyncPassOutcome::Partial, 300)).unwrap();
        assert_eq!(db.sync_status().unwrap().unwrap().last_ok_at, Some(100));

        let mut drifted = pass(SyncPassOutcome::Drift, 350);
        drifted.drifted = 1;
        db.record_sync_pass(&drifted).unwrap();
        let status = db.sync_status().unwrap().unwrap();
        assert_eq!(status.last_ok_at, Some(100), "drift is not clean");
        assert_eq!(status.outcome, SyncPassOutcome::Drift, "read back as drift, not ok");

        db.record_sync_pass(&pass(SyncPassOutcome::Ok, 400)).unwrap();
        let status = db.sync_status().unwrap().unwrap();
        assert_eq!((status.outcome, status.last_ok_at), (SyncPassOutcome::Ok, Some(400)));
        assert_eq!(status.message, "", "the previous pass's message is gone");
        let rows: i64 =
            db.conn.query_one("SELECT COUNT(*) FROM sync_status", &[]).unwrap().get(0).unwrap();
        assert_eq!(rows, 1);
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let db = Db::open_in_memory().unwrap();
        let mut long = pass(SyncPassOutcome::Partial, 100);
        long.message = "error: volume é\n".repeat(1000);
        db.record_sync_pass(&long).unwrap();
        let message = db.sync_status().unwrap().unwrap().pass.message;
        assert!(message.len() <= SYNC_MESSAGE_LIMIT, "{}", message.len());
        assert!(message.len() > SYNC_MESSAGE_LIMIT - 8);
        assert!(message.starts_with("error: volume é\nerror: volume é\n"));
        assert!(message.ends_with("(truncated)"));
        assert_eq!(truncated("short"), "short");
    }

    #[test]
    fn attachment_counts_group_records_by_state() {
        let db = Db::open_in_memory().unwrap();
        assert_eq!(db.attachment_counts().unwrap(), vec![]);
        let states =
            [AttachmentState::Attached, AttachmentState::Failed, AttachmentState::Attached];
        for (i, state) in states.into_iter().enumerate() {
            db.save_attachment_record(&AttachmentRecord {
                node_uuid: "44444444-4444-4444-8444-000000000001".into(),
                target_uuid: format!("55555555-5555-4555-8555-00000000000{i}"),
                volume_id: format!("66666666-6666-4666-8666-00000000000{i}"),
                api: "attachments".into(),
                attachment_id: None,
                state,
                step: "tagged".into(),
                connector: serde_json::json!({}),
                last_error: None,
                updated_at: None,
            })
            .unwrap();
        }
        assert_eq!(
            db.attachment_counts().unwrap(),
            vec![("attached".to_owned(), 2), ("failed".to_owned(), 1)]
        );
    }
}
