//! Each node's last probe of its boot target (`probe_results`, one row per node, gone with the
//! node): written after every probe, read by the CLI, the admin page and its node list.

use bootvol_core::probe::{Report, Status};

use super::engine::{Row, args};
use super::{Db, DbError};

fn report_from_row(row: &Row) -> Result<Report, DbError> {
    let uuid: String = row.get(0)?;
    let corrupt =
        |message: String| DbError::Corrupt { table: "probe_results", key: uuid.clone(), message };
    let status: String = row.get(2)?;
    let lines: String = row.get(4)?;
    Ok(Report {
        probed_at: row.get(1)?,
        status: status.parse::<Status>().map_err(corrupt)?,
        summary: row.get(3)?,
        lines: serde_json::from_str(&lines).map_err(|e| corrupt(format!("lines: {e}")))?,
        node_uuid: uuid.clone(),
    })
}

const SELECT: &str = "SELECT n.uuid, p.probed_at, p.status, p.summary, p.lines";
const FROM: &str = "FROM probe_results p JOIN nodes n ON n.id = p.node_id";

impl Db {
    /// Records `report` as its node's last probe; a node deleted since is skipped. A skipped
    /// probe (the node was powered on) is recorded only for a node never probed: it does not
    /// hide what the last real probe found.
    pub fn record_probe(&self, report: &Report) -> Result<(), DbError> {
        let lines = serde_json::to_string(&report.lines).unwrap_or_else(|_| "[]".into());
        let Some(node_id) = super::rows::node_id(&self.conn, &report.node_uuid)? else {
            return Ok(());
        };
        self.conn.execute(
            "INSERT INTO probe_results (node_id, probed_at, status, summary, lines) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (node_id) DO UPDATE SET probed_at = excluded.probed_at, \
             status = excluded.status, summary = excluded.summary, lines = excluded.lines \
             WHERE excluded.status <> 'skipped-powered-on'",
            args![
                node_id,
                report.probed_at,
                report.status.as_str(),
                report.summary.as_str(),
                lines.as_str()
            ],
        )?;
        Ok(())
    }

    /// A node's last probe, if it was ever probed.
    pub fn probe_result(&self, node_uuid: &str) -> Result<Option<Report>, DbError> {
        let row =
            self.conn.query_opt(&format!("{SELECT} {FROM} WHERE n.uuid = ?1"), args![node_uuid])?;
        row.as_ref().map(report_from_row).transpose()
    }

    /// Every node's last probe with the node's name, by name.
    pub fn probe_results(&self) -> Result<Vec<(String, Report)>, DbError> {
        let rows = self.conn.query(&format!("{SELECT}, n.name {FROM} ORDER BY n.name"), &[])?;
        rows.iter().map(|row| Ok((row.get(5)?, report_from_row(row)?))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_probe_replaces_the_previous_and_goes_with_the_node() {
        let mut db = Db::open_in_memory().unwrap();
        let config = bootvol_core::config::Config::from_toml("", "t").unwrap();
        let specs = bootvol_core::inventory::parse(
            r#"{"nodes": [{"name": "n1", "driver": "fake", "ports": [{"address": "52:54:00:00:00:01"}]}]}"#,
            bootvol_core::inventory::Format::Json,
            &config,
        )
        .unwrap();
        db.apply_inventory(&specs, false).unwrap();
        let uuid = db.node_records().unwrap()[0].node.uuid.clone();
        assert_eq!(db.probe_result(&uuid).unwrap(), None);
        let mut report = Report {
            node_uuid: uuid.clone(),
            probed_at: 100,
            status: Status::Failed,
            summary: "absent".into(),
            lines: vec!["v (aoe): FAILED: absent".into()],
        };
        db.record_probe(&report).unwrap();
        report.status = Status::Ok;
        report.probed_at = 200;
        db.record_probe(&report).unwrap();
        assert_eq!(db.probe_result(&uuid).unwrap(), Some(report.clone()));
        // A skipped probe keeps what the last real one found.
        let skipped = Report { status: Status::SkippedPoweredOn, probed_at: 300, ..report.clone() };
        db.record_probe(&skipped).unwrap();
        assert_eq!(db.probe_result(&uuid).unwrap(), Some(report.clone()));
        assert_eq!(db.probe_results().unwrap(), vec![("n1".to_owned(), report)]);
        // A node that does not exist is not recorded.
        let ghost = Report { node_uuid: "nope".into(), ..db.probe_results().unwrap()[0].1.clone() };
        db.record_probe(&ghost).unwrap();
        assert_eq!(db.probe_results().unwrap().len(), 1);
    }
}
