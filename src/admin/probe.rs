//! The boot target probe on the admin page: the node page's last result and "Probe" button
//! (`templates/admin/node_probe.html.j2`), and the nodes list's entry for nodes whose last
//! probe failed (`nodes_probe.html.j2`). Reads and runs go through the node service
//! (`NodeService::probe_result`, `probe_results`, `probe`); a report carries no secret (the
//! probes put CHAP secrets in their requests only).

use minijinja::Value;
use minijinja::context;

use super::AdminState;
use bootvol_control::nodes::NodeError;
use bootvol_core::probe::{Report, Status};
use bootvol_core::timefmt::format_unix;

/// The most failed probes the nodes list names.
const FAILURES_SHOWN: usize = 20;

fn view(report: &Report) -> Value {
    let at = format_unix(u64::try_from(report.probed_at).unwrap_or(0));
    context! {
        at => at.clone(), hhmm => at.get(11..16).unwrap_or("").to_owned(),
        status => report.status.as_str(), label => report.status.label(),
        summary => report.summary.clone(), lines => report.lines.clone(),
    }
}

/// The node's last probe for its page (none when it was never probed or cannot be read).
pub(super) async fn last(state: &AdminState, node_uuid: &str) -> Option<Value> {
    match state.nodes().probe_result(node_uuid).await {
        Ok(report) => report.as_ref().map(view),
        Err(e) => {
            tracing::warn!(error = %e, "admin: reading the last probe");
            None
        }
    }
}

/// The nodes whose last probe failed, for the list: at most [`FAILURES_SHOWN`], and how many
/// more there are.
pub(super) async fn failures(state: &AdminState) -> (Vec<Value>, usize) {
    let all = match state.nodes().probe_results().await {
        Ok(all) => all,
        Err(e) => {
            tracing::warn!(error = %e, "admin: reading the probes");
            return (Vec::new(), 0);
        }
    };
    let failed: Vec<_> = all.iter().filter(|(_, r)| r.status == Status::Failed).collect();
    let more = failed.len().saturating_sub(FAILURES_SHOWN);
    let shown = failed
        .into_iter()
        .take(FAILURES_SHOWN)
        .map(|(name, r)| {
            let v = view(r);
            context! { uuid => r.node_uuid.clone(), name => name.clone(), ..v }
        })
        .collect();
    (shown, more)
}

/// Runs the node's probe now: where to go, the message, and whether it is bad news.
pub(super) async fn run(
    state: &AdminState,
    node: &str,
    live: bool,
) -> Result<(String, String, bool), NodeError> {
    let probe = state.nodes().probe(node, live).await?;
    let r = &probe.report;
    let message = format!("Probe: {}: {}", r.status.label(), r.summary);
    Ok((format!("/admin/nodes/{}", r.node_uuid), message, r.status == Status::Failed))
}
