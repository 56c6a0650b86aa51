//! `GET /report/<mac>?stage=<stage>&err=<errno>`: a node's script reports the step it reached
//! (`boot::report`), and bootvol records it as the node's event `baremetal.node.boot_reported`.
//!
//! A report is a claim from the network, so it is taken as one: the query is bounded and read
//! strictly (`boot::report::parse_query`), each client address has a budget ([`ReportLimiter`],
//! a table of fixed size) spent before the MAC is looked at, a MAC that is no node's is answered
//! exactly as a node's is and recorded nowhere (no oracle of which MACs are nodes), the event says
//! whether the neighbour table maps the client's address to one of the node's MACs (a report
//! from elsewhere is recorded, marked), and nothing here changes a node. The answer is small
//! (`ok`, 400 or 429), so the script's `imgfetch` succeeds or fails harmlessly. The event is
//! handed to a [`ReportSink`], which queues it (bounded) for the binary to write: the boot
//! path never waits on the database, and a full queue drops the report and counts it.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::BootState;
use bootvol_core::boot::ServedScript;
use bootvol_core::boot::report::{Report, parse_query};
use bootvol_core::model::MacAddr;
use bootvol_runtime::logging::Peer;
use bootvol_runtime::metrics::ReportDropped;

/// The event of a boot report.
pub const REPORT_EVENT: &str = "baremetal.node.boot_reported";

/// Where boot reports go to be recorded, off the boot path (the binary's bridge, over the
/// database). This crate knows no SQL.
pub trait ReportSink: Send + Sync + std::fmt::Debug {
    /// Queues node `node_uuid`'s event [`REPORT_EVENT`] at `level` (`info` or `warning`);
    /// `false` when the queue is full (the report is dropped).
    fn record(&self, node_uuid: &str, level: &'static str, payload: serde_json::Value) -> bool;
}

/// The boot listener's reports: the sink and the per-client budget.
#[derive(Debug)]
pub struct BootReports {
    sink: Arc<dyn ReportSink>,
    limiter: Mutex<ReportLimiter>,
}

impl BootReports {
    pub fn new(sink: Arc<dyn ReportSink>) -> Arc<BootReports> {
        Arc::new(BootReports { sink, limiter: Mutex::new(ReportLimiter::new()) })
    }
}

/// Reports a client address may make per [`REPORT_WINDOW`]: a script makes two to four per
/// attempt, a few attempts per boot.
pub const REPORTS_PER_WINDOW: u32 = 30;

/// The window of [`REPORTS_PER_WINDOW`].
pub const REPORT_WINDOW: Duration = Duration::from_secs(60);

/// Slots of the limiter's table; addresses that hash to one slot share its budget.
const SLOTS: usize = 1024;

/// Reports per client address, in a table whose size never changes: each address hashes (with
/// a key of this process's, so a client cannot aim at another's slot) to one slot, a window
/// with its count. Addresses that share a slot share its budget, which errs on the side of
/// fewer reports.
#[derive(Debug)]
pub struct ReportLimiter {
    hasher: RandomState,
    slots: Box<[Option<(Instant, u32)>]>,
}

impl Default for ReportLimiter {
    fn default() -> Self {
        ReportLimiter::new()
    }
}

impl ReportLimiter {
    pub fn new() -> ReportLimiter {
        ReportLimiter { hasher: RandomState::new(), slots: vec![None; SLOTS].into_boxed_slice() }
    }

    /// Whether `client` may make one more report at `now` (counted if so).
    pub fn allow(&mut self, client: IpAddr, now: Instant) -> bool {
        let slot = &mut self.slots[self.hasher.hash_one(client) as usize % SLOTS];
        match slot {
            Some((start, count)) if now.saturating_duration_since(*start) < REPORT_WINDOW => {
                if *count >= REPORTS_PER_WINDOW {
                    return false;
                }
                *count += 1;
                true
            }
            _ => {
                *slot = Some((now, 1));
                true
            }
        }
    }
}

fn answer(status: StatusCode, text: &'static str) -> Response {
    (status, text).into_response()
}

/// Answers one report (`segment`: what follows `/report/`, decoded; `query`: the URL's query).
pub(super) fn report(
    state: &BootState,
    client: SocketAddr,
    segment: &str,
    query: Option<&str>,
) -> Response {
    let Some(reports) = &state.reports else {
        return answer(StatusCode::NOT_FOUND, "not found\n");
    };
    let Ok(mac) = segment.parse::<MacAddr>() else {
        return answer(StatusCode::BAD_REQUEST, "not a MAC address\n");
    };
    let report = match parse_query(query.unwrap_or("")) {
        Ok(report) => report,
        Err(why) => {
            tracing::debug!(client = %Peer(client), %mac, why, "boot report refused");
            return answer(StatusCode::BAD_REQUEST, "bad report\n");
        }
    };
    // The budget first, and the same answer whether the MAC is a node's or not: `/report` tells
    // no one which MACs are nodes (an unknown MAC spends the budget and is recorded nowhere).
    let address = client.ip().to_canonical();
    let allowed = reports.limiter.lock().is_ok_and(|mut l| l.allow(address, Instant::now()));
    if !allowed {
        state.metrics.boot_report_dropped(ReportDropped::Limited);
        return answer(StatusCode::TOO_MANY_REQUESTS, "too many reports\n");
    }
    let snapshot = state.snapshot.load();
    let Some((script, uuid)) =
        snapshot.script(mac).and_then(|s| s.node_uuid.as_deref().map(|uuid| (s, uuid)))
    else {
        tracing::debug!(client = %Peer(client), %mac, "boot report for a MAC of no node: not recorded");
        return answer(StatusCode::OK, "ok\n");
    };
    state.metrics.boot_report(report.stage);
    record(state, reports, (client, address), (mac, uuid, script), &report);
    answer(StatusCode::OK, "ok\n")
}

/// Logs an accepted report and queues its event (counted when the queue is full).
fn record(
    state: &BootState,
    reports: &BootReports,
    (client, address): (SocketAddr, IpAddr),
    (mac, uuid, script): (MacAddr, &str, &ServedScript),
    report: &Report,
) {
    let client_mac = state.access.neighbour_mac(address);
    let from_neighbour = client_mac.is_some_and(|m| script.node_macs.contains(&m));
    let node = script.node.as_deref().unwrap_or("-");
    let message = describe(report, script.scenario);
    if report.stage.failed() {
        tracing::warn!(client = %Peer(client), %mac, node, from_neighbour, report = message, "boot report");
    } else {
        tracing::info!(client = %Peer(client), %mac, node, from_neighbour, report = message, "boot report");
    }
    let error = report.error;
    let payload = json!({"node_uuid": uuid, "node_name": script.node, "mac": mac.to_string(),
        "stage": report.stage.as_str(), "result": report.stage.result(),
        "err": error.map(|e| format!("0x{}", e.hex())),
        "error": error.map(|e| e.describe(report.stage, script.scenario)),
        "error_url": error.map(|e| e.url()), "message": message,
        "client": address.to_string(), "client_mac": client_mac.map(|m| m.to_string()),
        "from_neighbour": from_neighbour});
    let level = if report.stage.failed() { "warning" } else { "info" };
    if !reports.sink.record(uuid, level, payload) {
        state.metrics.boot_report_dropped(ReportDropped::QueueFull);
    }
}

/// The report in a sentence: "sanhook failed: 0x0216eb3c Permission denied (iSCSI login)".
pub fn describe(report: &Report, scenario: &str) -> String {
    match report.error {
        Some(error) => format!(
            "{}: 0x{} {}",
            report.stage.describe(),
            error.hex(),
            error.describe(report.stage, scenario)
        ),
        None => report.stage.describe().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_has_a_budget_per_window() {
        let mut limiter = ReportLimiter::new();
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for i in 0..REPORTS_PER_WINDOW {
            assert!(limiter.allow(a, t0 + Duration::from_millis(u64::from(i))), "report {i}");
        }
        assert!(!limiter.allow(a, t0 + Duration::from_secs(1)));
        assert!(!limiter.allow(a, t0 + REPORT_WINDOW - Duration::from_millis(1)));
        // The next window starts afresh.
        assert!(limiter.allow(a, t0 + REPORT_WINDOW));
    }

    #[test]
    fn a_flood_of_addresses_neither_grows_the_table_nor_exceeds_the_budgets() {
        let mut limiter = ReportLimiter::new();
        let now = Instant::now();
        let allowed = (0..200_000u32)
            .filter(|i| limiter.allow(IpAddr::from(std::net::Ipv4Addr::from(*i)), now))
            .count();
        assert_eq!(limiter.slots.len(), SLOTS);
        assert!(allowed <= SLOTS * REPORTS_PER_WINDOW as usize, "{allowed}");
    }

    #[test]
    fn a_report_in_a_sentence() {
        let report = parse_query("stage=sanhook-failed&err=0x0216eb3c").unwrap();
        assert_eq!(
            describe(&report, "iscsi"),
            "sanhook failed: 0x0216eb3c Permission denied (iSCSI login)"
        );
        let report = parse_query("stage=sanhook").unwrap();
        assert_eq!(describe(&report, "iscsi"), "volumes attached");
    }
}
