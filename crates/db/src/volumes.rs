//! Volume attachment records, target connection info, node errors and events.

use super::engine::{Row, args};
use serde_json::Value;

use super::{Db, DbError};
pub use bootvol_core::model::records::{AttachmentRecord, AttachmentState, Event};
use bootvol_core::model::{ChildKind, JsonMap};

/// Event types recorded once while they repeat as they are (same node, level and payload as
/// the node's newest event): a drift found again by every sync pass.
const COUNTED_EVENTS: &[&str] = &["bootvol.volume.sync.drift"];

/// An event of `SELECT id, node_uuid, event_type, level, payload, created_at, repeats,
/// last_seen_at ...`.
pub(crate) fn event_from_row(r: &Row) -> Result<Event, DbError> {
    let payload: String = r.get(4)?;
    Ok(Event {
        id: r.get(0)?,
        node_uuid: r.get(1)?,
        event_type: r.get(2)?,
        level: r.get(3)?,
        payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
        created_at: r.get(5)?,
        repeats: r.get(6)?,
        last_seen_at: r.get(7)?,
    })
}

const RECORD_COLUMNS: &str = "node_uuid, target_uuid, volume_id, api, attachment_id, state, step, connector, last_error, updated_at";

fn record_from_row(row: &Row) -> Result<(AttachmentRecord, String), DbError> {
    let state: String = row.get(5)?;
    let connector: String = row.get(7)?;
    Ok((
        AttachmentRecord {
            node_uuid: row.get(0)?,
            target_uuid: row.get(1)?,
            volume_id: row.get(2)?,
            api: row.get(3)?,
            attachment_id: row.get(4)?,
            state: AttachmentState::Failed,
            step: row.get(6)?,
            connector: serde_json::from_str(&connector).unwrap_or(Value::Null),
            last_error: row.get(8)?,
            updated_at: row.get(9)?,
        },
        state,
    ))
}

fn with_state(
    (mut record, state): (AttachmentRecord, String),
) -> Result<AttachmentRecord, DbError> {
    record.state = AttachmentState::parse(&state).ok_or_else(|| DbError::Corrupt {
        table: "volume_attachments",
        key: record.target_uuid.clone(),
        message: format!("unknown state {state:?}"),
    })?;
    Ok(record)
}

impl Db {
    /// The attachment record of a volume target.
    pub fn attachment_record(
        &self,
        target_uuid: &str,
    ) -> Result<Option<AttachmentRecord>, DbError> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM volume_attachments WHERE target_uuid = ?1");
        let row = self.conn.query_opt(&sql, args![target_uuid])?;
        row.map(|r| with_state(record_from_row(&r)?)).transpose()
    }

    /// Records in the given states (all when `states` is empty), oldest first.
    pub fn attachment_records(
        &self,
        states: &[AttachmentState],
    ) -> Result<Vec<AttachmentRecord>, DbError> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM volume_attachments ORDER BY id");
        let mut out = Vec::new();
        for row in self.conn.query(&sql, &[])? {
            let record = with_state(record_from_row(&row)?)?;
            if states.is_empty() || states.contains(&record.state) {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// Inserts or replaces the record of a target.
    pub fn save_attachment_record(&self, r: &AttachmentRecord) -> Result<(), DbError> {
        self.conn.execute(
            "INSERT INTO volume_attachments (node_uuid, target_uuid, volume_id, api, attachment_id, state, step, connector, last_error) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (target_uuid) DO UPDATE SET node_uuid = ?1, volume_id = ?3, api = ?4, attachment_id = ?5, \
             state = ?6, step = ?7, connector = ?8, last_error = ?9, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')",
            args![
                &r.node_uuid,
                &r.target_uuid,
                &r.volume_id,
                &r.api,
                &r.attachment_id,
                r.state.as_str(),
                &r.step,
                r.connector.to_string(),
                &r.last_error
            ],
        )?;
        Ok(())
    }

    /// Replaces a volume target's connection info (`properties`).
    pub fn set_target_properties(
        &self,
        target_uuid: &str,
        properties: &JsonMap,
    ) -> Result<(), DbError> {
        let tx = self.conn.begin()?;
        tx.execute(
            "UPDATE volume_targets SET properties = ?2, updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![target_uuid, Value::Object(properties.clone()).to_string()],
        )?;
        tx.changed("volume_targets", target_uuid, "update");
        super::writes::child_node_changed(&tx, ChildKind::Target, target_uuid)?;
        tx.commit()
    }

    /// Sets or clears a node's `last_error`.
    pub fn set_node_last_error(
        &self,
        node_uuid: &str,
        last_error: Option<&str>,
    ) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET last_error = ?2, updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![node_uuid, last_error],
        )?;
        Ok(())
    }

    /// Stores an event; secrets in the payload are masked first.
    pub fn add_event(
        &self,
        node_uuid: Option<&str>,
        event_type: &str,
        level: &str,
        payload: &Value,
    ) -> Result<(), DbError> {
        let mut payload = payload.clone();
        bootvol_core::secrets::mask(&mut payload);
        if COUNTED_EVENTS.contains(&event_type) {
            let counted = self.conn.execute(
                "UPDATE events SET repeats = repeats + 1, \
                 last_seen_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') \
                 WHERE id = (SELECT MAX(id) FROM events WHERE node_uuid IS NOT DISTINCT FROM CAST(?1 AS TEXT)) \
                 AND event_type = ?2 AND level = ?3 AND payload = ?4",
                args![node_uuid, event_type, level, payload.to_string()],
            )?;
            if counted > 0 {
                return Ok(());
            }
        }
        self.conn.execute(
            "INSERT INTO events (node_uuid, event_type, level, payload) VALUES (?1, ?2, ?3, ?4)",
            args![node_uuid, event_type, level, payload.to_string()],
        )?;
        Ok(())
    }

    /// The newest events, newest last; of one node when given.
    pub fn events(&self, node_uuid: Option<&str>, limit: u32) -> Result<Vec<Event>, DbError> {
        let rows = self.conn.query(
            "SELECT id, node_uuid, event_type, level, payload, created_at, repeats, last_seen_at \
             FROM events WHERE CAST(?1 AS TEXT) IS NULL OR node_uuid = ?1 ORDER BY id DESC LIMIT ?2",
            args![node_uuid, limit],
        )?;
        let mut events: Vec<Event> = rows.iter().map(event_from_row).collect::<Result<_, _>>()?;
        events.reverse();
        Ok(events)
    }

    /// Each node's newest event of `event_type` (its UUID and payload), one per node that has
    /// one: the nodes list reads every node's last boot report this way.
    pub fn last_events_of_type(&self, event_type: &str) -> Result<Vec<(String, Value)>, DbError> {
        let rows = self.conn.query(
            "SELECT e.node_uuid, e.payload FROM events e JOIN (SELECT node_uuid, MAX(id) AS id \
             FROM events WHERE event_type = ?1 AND node_uuid IS NOT NULL GROUP BY node_uuid) m \
             ON e.id = m.id",
            args![event_type],
        )?;
        rows.iter()
            .map(|row| {
                let payload: String = row.get(1)?;
                Ok((row.get(0)?, serde_json::from_str(&payload).unwrap_or(Value::Null)))
            })
            .collect()
    }
}

/// Events waiting for webhook delivery.
impl Db {
    /// Up to `limit` events due for delivery at `now` (Unix seconds), oldest first.
    pub fn events_to_deliver(&self, now: i64, limit: u32) -> Result<Vec<(Event, i64)>, DbError> {
        let rows = self.conn.query(
            "SELECT id, node_uuid, event_type, level, payload, created_at, repeats, last_seen_at, \
             attempts FROM events WHERE delivery = 'pending' AND next_attempt_at <= ?1 ORDER BY id LIMIT ?2",
            args![now, limit],
        )?;
        rows.iter().map(|r| Ok((event_from_row(r)?, r.get(8)?))).collect()
    }

    /// Records the outcome of a delivery attempt: `delivered`, `failed` (given up), or still
    /// `pending` with the next attempt's time.
    pub fn mark_event_delivery(
        &self,
        id: i64,
        delivery: &str,
        attempts: i64,
        next_attempt_at: i64,
    ) -> Result<(), DbError> {
        self.conn.execute(
            "UPDATE events SET delivery = ?2, attempts = ?3, next_attempt_at = ?4 WHERE id = ?1",
            args![id, delivery, attempts, next_attempt_at],
        )?;
        Ok(())
    }

    /// Marks every event delivered (no webhook is configured: nothing will ever send them).
    pub fn skip_event_delivery(&self) -> Result<(), DbError> {
        self.conn.execute("UPDATE events SET delivery = 'none' WHERE delivery = 'pending'", &[])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_repeated_drift_is_one_event_counted() {
        let db = Db::open_in_memory().unwrap();
        let drift = json!({"volume_id": "v1", "problem": "gone"});
        for _ in 0..3 {
            db.add_event(Some("n1"), "bootvol.volume.sync.drift", "error", &drift).unwrap();
        }
        db.add_event(Some("n1"), "bootvol.volume.sync.drift", "error", &json!({"volume_id": "v2"}))
            .unwrap();
        db.add_event(Some("n1"), "baremetal.node.update.end", "info", &json!({})).unwrap();
        db.add_event(Some("n1"), "baremetal.node.update.end", "info", &json!({})).unwrap();
        db.add_event(Some("n1"), "bootvol.volume.sync.drift", "error", &drift).unwrap();
        let events = db.events(Some("n1"), 50).unwrap();
        let seen: Vec<(&str, i64)> =
            events.iter().map(|e| (e.event_type.as_str(), e.repeats)).collect();
        assert_eq!(
            seen,
            [
                ("bootvol.volume.sync.drift", 3),
                ("bootvol.volume.sync.drift", 1),
                ("baremetal.node.update.end", 1),
                ("baremetal.node.update.end", 1),
                ("bootvol.volume.sync.drift", 1),
            ],
            "only drift is counted, and only while it is the node's newest event"
        );
        assert!(events[0].last_seen_at.is_some() && events[1].last_seen_at.is_none());
    }
}
