//! The rows of the nodes list, read once per request: [`RowInputs`] gathers what a row needs
//! besides its node (the boot snapshot, the drifted volumes, each node's last boot report), so
//! the list and the bulk form's `scope=all` make the same rows. The row itself is `rack`'s
//! (pure); this part only reads.

use std::collections::HashMap;
use std::sync::Arc;

use bootvol_edge::http::report::REPORT_EVENT;

use super::{AdminState, rack};

/// What a list row is made of besides its node: the boot snapshot (the scenario and boot
/// problem it serves), the volumes the last Cinder sync found drifted, and each node's last boot
/// report. The list and the bulk form's `scope=all` make their rows from the same.
pub(in crate::admin) struct RowInputs {
    snapshot: Arc<bootvol_core::boot::BootSnapshot>,
    drifted: std::collections::HashSet<String>,
    reports: HashMap<String, serde_json::Value>,
}

impl RowInputs {
    /// Reads them; `drift_lines` are the last sync pass's lines.
    pub(in crate::admin) async fn read(
        state: &AdminState,
        drift_lines: &[rack::SyncLine],
    ) -> Result<RowInputs, bootvol_control::nodes::NodeError> {
        let reports = state.nodes().last_events_of_type(REPORT_EVENT).await?;
        Ok(RowInputs { reports, ..RowInputs::read_without_reports(state, drift_lines) })
    }

    pub(in crate::admin) fn read_without_reports(
        state: &AdminState,
        drift_lines: &[rack::SyncLine],
    ) -> RowInputs {
        let drifted = drift_lines
            .iter()
            .filter(|l| l.kind == "drift")
            .filter_map(|l| l.volume.clone())
            .collect();
        RowInputs { snapshot: state.api.snapshot(), drifted, reports: HashMap::new() }
    }

    /// The node's row.
    pub(in crate::admin) fn row(&self, r: &bootvol_core::model::NodeRecord) -> rack::Summary {
        let boot = rack::NodeBoot::of(&self.snapshot, &r.node.uuid);
        rack::Summary::of(r, boot, &self.drifted).with_report(self.reports.get(&r.node.uuid))
    }
}
