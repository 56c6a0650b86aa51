//! The rack-wide history of events: every node's events newest first, narrowed by an
//! [`EventFilter`] (node, type, level, time), a page at a time by id (keyset: older than
//! `before`, or just newer than `after`; never an offset, so a page costs the same at the
//! millionth event), and the event types recorded. The statement is made of fixed fragments for
//! the conditions set only, so each one can use its index (`events_node`, `events_type`,
//! `events_level`, all ending in `id`) and the primary key orders the rest.
//!
//! It must not know what the filter's words mean to an operator (a node's name or MAC, a date
//! as typed): the admin page resolves them to the stored values first.

use super::engine::Value as SqlValue;
use super::volumes::event_from_row;
use super::{Db, DbError};
use bootvol_core::model::records::{Event, EventFilter};

/// The most event types [`Db::event_types`] lists.
const TYPES_MAX: u32 = 200;

impl Db {
    /// Up to `filter.limit` events that match, newest first: the newest, those older than
    /// `before`, or those just newer than `after` (`before` wins when both are set).
    pub fn events_page(&self, filter: &EventFilter) -> Result<Vec<Event>, DbError> {
        let mut conditions: Vec<String> = Vec::new();
        let mut args: Vec<SqlValue> = Vec::new();
        let mut add = |fragment: &str, value: SqlValue| {
            args.push(value);
            conditions.push(format!("{fragment} ?{}", args.len()));
        };
        let text = |v: &Option<String>| v.clone().map(SqlValue::Text);
        for (fragment, value) in [
            ("node_uuid =", text(&filter.node_uuid)),
            ("event_type =", text(&filter.event_type)),
            ("level =", text(&filter.level)),
            ("created_at >=", text(&filter.since)),
            ("created_at <=", text(&filter.until)),
        ] {
            if let Some(value) = value {
                add(fragment, value);
            }
        }
        let newer = filter.before.is_none() && filter.after.is_some();
        if let Some(before) = filter.before {
            add("id <", SqlValue::Int(before));
        } else if let Some(after) = filter.after {
            add("id >", SqlValue::Int(after));
        }
        let mut sql = "SELECT id, node_uuid, event_type, level, payload, created_at, repeats, \
                       last_seen_at FROM events"
            .to_owned();
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        args.push(SqlValue::Int(i64::from(filter.limit)));
        let order = if newer { "ASC" } else { "DESC" };
        sql.push_str(&format!(" ORDER BY id {order} LIMIT ?{}", args.len()));
        let rows = self.conn.query(&sql, &args)?;
        let mut events: Vec<Event> = rows.iter().map(event_from_row).collect::<Result<_, _>>()?;
        if newer {
            events.reverse();
        }
        Ok(events)
    }

    /// The event types recorded, sorted (at most [`TYPES_MAX`]): a skip over `events_type`,
    /// one index probe per type, not a scan of every event.
    pub fn event_types(&self) -> Result<Vec<String>, DbError> {
        let rows = self.conn.query(
            "WITH RECURSIVE t(x) AS (SELECT MIN(event_type) FROM events \
             UNION ALL SELECT (SELECT MIN(event_type) FROM events WHERE event_type > t.x) \
             FROM t WHERE t.x IS NOT NULL) \
             SELECT x FROM t WHERE x IS NOT NULL LIMIT ?1",
            &[SqlValue::Int(i64::from(TYPES_MAX))],
        )?;
        rows.iter().map(|r| r.get(0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn filter(limit: u32) -> EventFilter {
        EventFilter { limit, ..EventFilter::default() }
    }

    fn ids(events: &[Event]) -> Vec<i64> {
        events.iter().map(|e| e.id).collect()
    }

    #[test]
    fn pages_newest_first_narrowed_by_each_filter() {
        let db = Db::open_in_memory().unwrap();
        for i in 0..10 {
            let (node, kind, level) = match i % 3 {
                0 => ("n1", "baremetal.node.power_set.end", "info"),
                1 => ("n2", "baremetal.node.provision_set.end", "info"),
                _ => ("n2", "baremetal.node.provision_set.error", "error"),
            };
            db.add_event(Some(node), kind, level, &json!({"i": i})).unwrap();
        }
        let first = db.events_page(&filter(4)).unwrap();
        assert_eq!(ids(&first), [10, 9, 8, 7]);
        let next = db.events_page(&EventFilter { before: Some(7), ..filter(4) }).unwrap();
        assert_eq!(ids(&next), [6, 5, 4, 3]);
        let previous = db.events_page(&EventFilter { after: Some(6), ..filter(4) }).unwrap();
        assert_eq!(ids(&previous), [10, 9, 8, 7], "the newer page, still newest first");
        let closer = db.events_page(&EventFilter { after: Some(2), ..filter(2) }).unwrap();
        assert_eq!(ids(&closer), [4, 3], "just newer than `after`");
        let node = EventFilter { node_uuid: Some("n1".into()), ..filter(50) };
        assert_eq!(ids(&db.events_page(&node).unwrap()), [10, 7, 4, 1]);
        let errors = EventFilter { level: Some("error".into()), ..filter(50) };
        assert_eq!(ids(&db.events_page(&errors).unwrap()), [9, 6, 3]);
        let kind = EventFilter {
            node_uuid: Some("n2".into()),
            event_type: Some("baremetal.node.provision_set.end".into()),
            ..filter(50)
        };
        assert_eq!(ids(&db.events_page(&kind).unwrap()), [8, 5, 2]);
        let all = db.events_page(&filter(50)).unwrap();
        let (t3, t5) = (all[7].created_at.clone(), all[5].created_at.clone());
        let window = EventFilter { since: Some(t3.clone()), until: Some(t5.clone()), ..filter(50) };
        let found = db.events_page(&window).unwrap();
        assert!(found.iter().all(|e| e.created_at >= t3 && e.created_at <= t5), "{found:?}");
        assert!(ids(&found).contains(&3) && ids(&found).contains(&5));
        let none = EventFilter { until: Some("2000-01-01T00:00:00.000+00:00".into()), ..filter(5) };
        assert!(db.events_page(&none).unwrap().is_empty());
        assert_eq!(
            db.event_types().unwrap(),
            [
                "baremetal.node.power_set.end",
                "baremetal.node.provision_set.end",
                "baremetal.node.provision_set.error"
            ]
        );
    }
}
