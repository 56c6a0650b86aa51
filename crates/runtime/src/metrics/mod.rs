//! The appliance's metrics and readiness: counters, gauges and histograms kept in atomics, turned
//! into OpenMetrics text by `prometheus-client` only when scraped ([`Metrics::scrape`]).
//!
//! The boot listener, the TFTP handler and the snapshot watcher count through the methods here;
//! the API serves what `scrape` and [`Metrics::readiness`] return. Counting is a relaxed atomic
//! add into a table fixed at start: no lock, no allocation, no I/O, so it never holds up a boot
//! (`prometheus-client`'s own `Family` and `Histogram` take locks, hence the tables and
//! [`AtomicHistogram`]). Every label value comes from a fixed list here: never a MAC, an address
//! or a node name. What only the database knows (the last Cinder sync pass) is read at scrape
//! time, off the boot path. This module knows nothing of HTTP.
//!
//! Here: [`Metrics`], its counting methods, readiness and the scrape. The label values are in
//! `labels`, [`AtomicHistogram`] in `histogram`, the per-minute boot activity in `activity`, and
//! the OpenMetrics text of each family in `encode`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::registry::Registry;

use bootvol_core::boot::report::Stage;
use bootvol_core::model::sync::SyncStatus;
use bootvol_core::model::{Driver, ProvisionState};

mod activity;
mod encode;
mod histogram;
mod labels;

use activity::Activity;
pub use activity::{ACTIVITY_MINUTES, Minute};
use encode::Scrape;
pub use histogram::AtomicHistogram;
use histogram::{HTTP_BOUNDS, REBUILD_BOUNDS, TFTP_BOUNDS};
pub use labels::{
    BmcCall, BmcResult, DhcpMessage, DhcpResult, FileClass, ReportDropped, Route, ScriptKind,
    TftpResult, Transport,
};
use labels::{DHCP_ARCHES, STATUSES, index_of};

/// What only the database knows, read at scrape time off the boot path: the last Cinder sync
/// pass, and whether the database can be read at all (an `Err` says why not). The binary
/// implements it over the database handle; this crate knows no SQL.
pub trait SyncSource: Send + Sync + std::fmt::Debug {
    fn last_sync(
        &self,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Option<SyncStatus>, String>> + Send + '_>>;
}

/// The content type of [`Metrics::scrape`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a scrape or a readiness check waits for the database before calling it unreadable.
const DB_TIMEOUT: Duration = Duration::from_secs(2);

/// Every metric of one `bootvol serve`, and what `/readyz` answers from.
#[derive(Debug)]
pub struct Metrics {
    /// `[route][status]`, the last status slot being `other`.
    http_requests: Vec<Vec<AtomicU64>>,
    http_seconds: Vec<AtomicHistogram>,
    /// `[kind][transport]`.
    scripts: Vec<Vec<AtomicU64>>,
    /// `[class][result]`: TFTP read requests, by how they ended.
    tftp_transfers: Vec<Vec<AtomicU64>>,
    tftp_seconds: Vec<AtomicHistogram>,
    /// Bytes clients acknowledged.
    tftp_bytes: AtomicU64,
    rebuild_seconds: AtomicHistogram,
    rebuild_failures: AtomicU64,
    /// Requests for a secret script (or a deploy token) that a second client claimed.
    secret_conflicts: AtomicU64,
    /// `[stage]` in `Stage::ALL` order: boot reports recorded.
    boot_reports: Vec<AtomicU64>,
    /// `[reason]`: boot reports of known nodes not recorded.
    boot_reports_dropped: Vec<AtomicU64>,
    /// Neighbour resolutions refused because too many were in flight (`neighbour`'s count).
    neighbour_overflow: std::sync::OnceLock<Arc<AtomicU64>>,
    generation: AtomicU64,
    /// Unix milliseconds of the snapshot being served; 0 before the first.
    built_at_ms: AtomicU64,
    /// `[state]` in `ProvisionState::ALL` order, as of the snapshot being served.
    nodes: Vec<AtomicU64>,
    boot_listeners_up: AtomicBool,
    database_readable: AtomicBool,
    /// PostgreSQL: whether the change listener's connection is up (always 1 on SQLite).
    database_connected: AtomicBool,
    /// `[message][arch][result]`, flattened ([`Metrics::dhcp_slot`]).
    dhcp_packets: Vec<AtomicU64>,
    /// `[driver][call][result]`, flattened ([`Metrics::bmc_slot`]).
    bmc_calls: Vec<AtomicU64>,
    /// The last hour of boots, per minute, sampled from the counters above.
    activity: Mutex<Activity>,
    db: Option<Arc<dyn SyncSource>>,
}

fn zeros(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

fn now_unix() -> i64 {
    i64::try_from(now_ms() / 1000).unwrap_or(i64::MAX)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Metrics {
    /// `db`: where scrapes read the last Cinder sync pass and check the database is readable.
    pub fn new(db: Option<Arc<dyn SyncSource>>) -> Arc<Metrics> {
        Arc::new(Metrics {
            http_requests: Route::ALL.iter().map(|_| zeros(STATUSES.len() + 1)).collect(),
            http_seconds: Route::ALL.iter().map(|_| AtomicHistogram::new(HTTP_BOUNDS)).collect(),
            scripts: ScriptKind::ALL.iter().map(|_| zeros(Transport::ALL.len())).collect(),
            tftp_transfers: FileClass::ALL.iter().map(|_| zeros(TftpResult::ALL.len())).collect(),
            tftp_seconds: FileClass::ALL
                .iter()
                .map(|_| AtomicHistogram::new(TFTP_BOUNDS))
                .collect(),
            tftp_bytes: AtomicU64::new(0),
            rebuild_seconds: AtomicHistogram::new(REBUILD_BOUNDS),
            rebuild_failures: AtomicU64::new(0),
            secret_conflicts: AtomicU64::new(0),
            boot_reports: zeros(Stage::ALL.len()),
            boot_reports_dropped: zeros(ReportDropped::ALL.len()),
            neighbour_overflow: std::sync::OnceLock::new(),
            generation: AtomicU64::new(0),
            built_at_ms: AtomicU64::new(0),
            nodes: zeros(ProvisionState::ALL.len()),
            boot_listeners_up: AtomicBool::new(false),
            database_readable: AtomicBool::new(true),
            database_connected: AtomicBool::new(true),
            dhcp_packets: zeros(
                DhcpMessage::ALL.len() * (DHCP_ARCHES.len() + 2) * DhcpResult::ALL.len(),
            ),
            bmc_calls: zeros(Driver::ALL.len() * BmcCall::ALL.len() * BmcResult::ALL.len()),
            activity: Mutex::new(Activity::new(now_unix(), (0, 0))),
            db,
        })
    }

    fn dhcp_slot(message: usize, arch: usize, result: usize) -> usize {
        (message * (DHCP_ARCHES.len() + 2) + arch) * DhcpResult::ALL.len() + result
    }

    fn bmc_slot(driver: usize, call: usize, result: usize) -> usize {
        (driver * BmcCall::ALL.len() + call) * BmcResult::ALL.len() + result
    }

    /// One packet received by the ProxyDHCP; `arch` is its option 93, if any.
    pub fn dhcp(&self, message: DhcpMessage, arch: Option<u16>, result: DhcpResult) {
        let a = match arch {
            Some(n) => DHCP_ARCHES.iter().position(|&x| x == n).unwrap_or(DHCP_ARCHES.len()),
            None => DHCP_ARCHES.len() + 1,
        };
        let slot = Metrics::dhcp_slot(
            index_of(&DhcpMessage::ALL, message),
            a,
            index_of(&DhcpResult::ALL, result),
        );
        self.dhcp_packets[slot].fetch_add(1, Relaxed);
    }

    /// One call of a power driver to a BMC, and how it ended.
    pub fn bmc_call(&self, driver: Driver, call: BmcCall, result: BmcResult) {
        let d = Driver::ALL.iter().position(|x| *x == driver).unwrap_or(0);
        let slot =
            Metrics::bmc_slot(d, index_of(&BmcCall::ALL, call), index_of(&BmcResult::ALL, result));
        self.bmc_calls[slot].fetch_add(1, Relaxed);
    }

    /// Boots (nodes' own scripts served) and failures so far: what [`Minute`] counts.
    fn activity_totals(&self) -> (u64, u64) {
        let sum = |row: &[AtomicU64]| row.iter().map(|v| v.load(Relaxed)).sum::<u64>();
        let boots = sum(&self.scripts[index_of(&ScriptKind::ALL, ScriptKind::Node)]);
        let mut failures = sum(&self.scripts[index_of(&ScriptKind::ALL, ScriptKind::Refused)]);
        for row in &self.tftp_transfers {
            for result in [TftpResult::TimedOut, TftpResult::SocketError] {
                failures += row[index_of(&TftpResult::ALL, result)].load(Relaxed);
            }
        }
        for (r, row) in self.http_requests.iter().enumerate() {
            if Route::ALL[r] == Route::Other {
                continue;
            }
            for (s, value) in row.iter().enumerate() {
                if STATUSES.get(s).is_some_and(|&code| code >= 500) {
                    failures += value.load(Relaxed);
                }
            }
        }
        (boots, failures)
    }

    /// Closes the activity minute once it has ended; `serve` calls it every few seconds.
    pub fn sample_activity(&self) {
        let totals = self.activity_totals();
        self.activity.lock().unwrap_or_else(|p| p.into_inner()).advance(now_unix(), totals);
    }

    /// The last hour of boot activity, per minute, oldest first; the last minute is the
    /// current one, counted up to now.
    pub fn boot_activity(&self) -> Vec<Minute> {
        let totals = self.activity_totals();
        let mut activity = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        activity.advance(now_unix(), totals);
        activity.last_hour(totals)
    }

    /// One request answered by the boot HTTP listener.
    pub fn http_request(&self, route: Route, status: u16, elapsed: Duration) {
        let r = index_of(&Route::ALL, route);
        let s = STATUSES.iter().position(|&c| c == status).unwrap_or(STATUSES.len());
        self.http_requests[r][s].fetch_add(1, Relaxed);
        self.http_seconds[r].observe(elapsed);
    }

    /// One boot script request, whatever it got.
    pub fn script(&self, kind: ScriptKind, transport: Transport) {
        let k = index_of(&ScriptKind::ALL, kind);
        let t = index_of(&Transport::ALL, transport);
        self.scripts[k][t].fetch_add(1, Relaxed);
    }

    /// One TFTP read request ended: `bytes` acknowledged in `elapsed` since the request.
    pub fn tftp_transfer(
        &self,
        class: FileClass,
        result: TftpResult,
        bytes: u64,
        elapsed: Duration,
    ) {
        let c = index_of(&FileClass::ALL, class);
        self.tftp_transfers[c][index_of(&TftpResult::ALL, result)].fetch_add(1, Relaxed);
        self.tftp_seconds[c].observe(elapsed);
        self.tftp_bytes.fetch_add(bytes, Relaxed);
    }

    /// A snapshot built in `elapsed` is now served; `nodes_by_state` counts its nodes per
    /// provision state, in the order of `ProvisionState::ALL`.
    pub fn snapshot_built(&self, nodes_by_state: &[usize], elapsed: Duration) {
        self.rebuild_seconds.observe(elapsed);
        for (gauge, n) in self.nodes.iter().zip(nodes_by_state) {
            gauge.store(*n as u64, Relaxed);
        }
        self.built_at_ms.store(now_ms(), Relaxed);
        self.generation.fetch_add(1, Relaxed);
    }

    /// A second client claimed a node's secret script or deploy token (`boot_window`).
    pub fn secret_conflict(&self) {
        self.secret_conflicts.fetch_add(1, Relaxed);
    }

    /// A node's boot report was accepted (it is recorded as an event unless the queue is full).
    pub fn boot_report(&self, stage: Stage) {
        self.boot_reports[index_of(&Stage::ALL, stage)].fetch_add(1, Relaxed);
    }

    /// A boot report of a known node was not recorded.
    pub fn boot_report_dropped(&self, why: ReportDropped) {
        self.boot_reports_dropped[index_of(&ReportDropped::ALL, why)].fetch_add(1, Relaxed);
    }

    /// Where the neighbour table counts the resolutions it refused.
    pub fn count_neighbour_overflow(&self, counter: Arc<AtomicU64>) {
        let _ = self.neighbour_overflow.set(counter);
    }

    /// A rebuild failed: the previous snapshot is still served.
    pub fn snapshot_failed(&self) {
        self.rebuild_failures.fetch_add(1, Relaxed);
    }

    /// Whether the boot listeners (HTTP and TFTP) are answering.
    pub fn set_boot_listeners_up(&self, up: bool) {
        self.boot_listeners_up.store(up, Relaxed);
    }

    /// Whether the connection to the database engine (PostgreSQL's change listener) is up.
    pub fn set_database_connected(&self, up: bool) {
        self.database_connected.store(up, Relaxed);
    }

    /// Reads the last sync pass, recording whether the database could be read at all.
    async fn read_db(&self) -> Result<Option<SyncStatus>, String> {
        let Some(db) = &self.db else { return Ok(None) };
        let read = tokio::time::timeout(DB_TIMEOUT, db.last_sync()).await;
        let result = match read {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("no answer within {} s", DB_TIMEOUT.as_secs())),
        };
        self.database_readable.store(result.is_ok(), Relaxed);
        result
    }

    /// Whether boots can be served, and the text `/readyz` answers: ready when the boot
    /// listeners are up and a snapshot is built. A database that cannot be read is reported
    /// but does not make the appliance unready: boots are served from the snapshot.
    pub async fn readiness(&self) -> (bool, String) {
        let mut problems = Vec::new();
        if !self.boot_listeners_up.load(Relaxed) {
            problems.push("the boot listeners are not up".to_owned());
        }
        if self.generation.load(Relaxed) == 0 {
            problems.push("no boot snapshot is built yet".to_owned());
        }
        let database = match self.read_db().await {
            Ok(_) if self.database_connected.load(Relaxed) => "database: readable".to_owned(),
            Ok(_) => "database: readable; degraded: the change listener is disconnected (changes arrive by polling)".to_owned(),
            Err(e) => format!(
                "database: unreadable ({e}); degraded: boots are served from the snapshot, writes answer 503"
            ),
        };
        let ready = problems.is_empty();
        let mut text = if ready {
            format!(
                "ready: boot listeners up, snapshot generation {}\n",
                self.generation.load(Relaxed)
            )
        } else {
            format!("not ready: {}\n", problems.join("; "))
        };
        text.push_str(&database);
        text.push('\n');
        (ready, text)
    }

    /// The OpenMetrics text of every metric, the sync status read now, for anyone (the API's
    /// unauthenticated `/metrics`, `[metrics] listen`): a script refused to a client that is
    /// not its node counts as `unknown`, as its answer looked, so a prober cannot tell a node's
    /// MAC from an unknown one by watching the counters.
    pub async fn scrape(self: &Arc<Metrics>) -> String {
        self.scrape_as(true).await
    }

    /// The same with refusals counted apart (`kind="refused"`), for the logged-in admin page
    /// (`/admin/metrics`).
    pub async fn scrape_full(self: &Arc<Metrics>) -> String {
        self.scrape_as(false).await
    }

    async fn scrape_as(self: &Arc<Metrics>, public: bool) -> String {
        let sync = self.read_db().await.ok().flatten();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape { metrics: Arc::clone(self), sync, public }));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_the_overflow_last() {
        let metrics = Metrics::new(None);
        metrics.http_request(Route::Script, 200, Duration::from_micros(500));
        metrics.http_request(Route::Script, 404, Duration::from_secs(100));
        metrics.http_request(Route::Ipxe, 418, Duration::from_millis(3));
        metrics.script(ScriptKind::Refused, Transport::Tftp);
        let text = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(metrics.scrape_full());
        for line in [
            "bootvol_http_requests_total{route=\"/boot/\",status=\"200\"} 1",
            "bootvol_http_requests_total{route=\"/boot/\",status=\"404\"} 1",
            "bootvol_http_requests_total{route=\"/ipxe/\",status=\"other\"} 1",
            "bootvol_http_request_seconds_bucket{le=\"0.001\",route=\"/boot/\"} 1",
            "bootvol_http_request_seconds_bucket{le=\"30.0\",route=\"/boot/\"} 1",
            "bootvol_http_request_seconds_bucket{le=\"+Inf\",route=\"/boot/\"} 2",
            "bootvol_http_request_seconds_count{route=\"/boot/\"} 2",
            "bootvol_boot_scripts_total{kind=\"refused\",transport=\"tftp\"} 1",
            "bootvol_snapshot_generation 0",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("bootvol_snapshot_age_seconds "), "no age before a snapshot");
    }

    #[test]
    fn the_public_scrape_counts_a_refused_script_as_unknown() {
        let metrics = Metrics::new(None);
        metrics.script(ScriptKind::Unknown, Transport::Http);
        metrics.script(ScriptKind::Refused, Transport::Http);
        metrics.script(ScriptKind::Refused, Transport::Tftp);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let public = runtime.block_on(metrics.scrape());
        for line in [
            "bootvol_boot_scripts_total{kind=\"unknown\",transport=\"http\"} 2",
            "bootvol_boot_scripts_total{kind=\"unknown\",transport=\"tftp\"} 1",
        ] {
            assert!(public.contains(line), "{line} missing from\n{public}");
        }
        assert!(!public.contains("kind=\"refused\""), "{public}");
        let full = runtime.block_on(metrics.scrape_full());
        for line in [
            "bootvol_boot_scripts_total{kind=\"unknown\",transport=\"http\"} 1",
            "bootvol_boot_scripts_total{kind=\"refused\",transport=\"http\"} 1",
            "bootvol_boot_scripts_total{kind=\"refused\",transport=\"tftp\"} 1",
        ] {
            assert!(full.contains(line), "{line} missing from\n{full}");
        }
    }

    #[test]
    fn ready_only_with_the_boot_listeners_up_and_a_snapshot_built() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let metrics = Metrics::new(None);
        let (ready, text) = runtime.block_on(metrics.readiness());
        assert!(!ready);
        assert_eq!(
            text,
            "not ready: the boot listeners are not up; no boot snapshot is built yet\ndatabase: readable\n"
        );
        metrics.snapshot_built(&[], Duration::from_millis(5));
        let (ready, text) = runtime.block_on(metrics.readiness());
        assert_eq!(
            (ready, text.lines().next()),
            (false, Some("not ready: the boot listeners are not up"))
        );
        metrics.set_boot_listeners_up(true);
        let (ready, text) = runtime.block_on(metrics.readiness());
        assert!(ready, "{text}");
        assert!(text.starts_with("ready: boot listeners up, snapshot generation 1\n"));
    }

    #[test]
    fn dhcp_and_bmc_counts_use_fixed_labels_and_only_seen_errors() {
        let metrics = Metrics::new(None);
        metrics.dhcp(DhcpMessage::Discover, Some(7), DhcpResult::Answered);
        metrics.dhcp(DhcpMessage::Discover, Some(7), DhcpResult::Answered);
        metrics.dhcp(DhcpMessage::Request, Some(4242), DhcpResult::Ignored);
        metrics.dhcp(DhcpMessage::Other, None, DhcpResult::Malformed);
        metrics.bmc_call(Driver::Redfish, BmcCall::SetPower, BmcResult::Timeout);
        metrics.bmc_call(Driver::Ipmi, BmcCall::PowerState, BmcResult::Ok);
        let text = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(metrics.scrape());
        for line in [
            "bootvol_dhcp_packets_total{message=\"discover\",arch=\"7\",result=\"answered\"} 2",
            "bootvol_dhcp_packets_total{message=\"request\",arch=\"other\",result=\"ignored\"} 1",
            "bootvol_dhcp_packets_total{message=\"other\",arch=\"none\",result=\"malformed\"} 1",
            "bootvol_bmc_calls_total{driver=\"redfish\",call=\"set_power\",result=\"timeout\"} 1",
            "bootvol_bmc_calls_total{driver=\"redfish\",call=\"set_power\",result=\"ok\"} 0",
            "bootvol_bmc_calls_total{driver=\"ipmi\",call=\"power_state\",result=\"ok\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert_eq!(text.matches("bootvol_dhcp_packets_total{").count(), 3, "{text}");
        assert!(!text.contains("result=\"bmc_error\""), "{text}");
    }

    #[test]
    fn activity_gives_each_minute_what_was_counted_in_it() {
        let t0 = 1_700_000_040; // a minute's start
        let mut a = Activity::new(t0 + 5, (10, 1));
        assert_eq!(a.last_hour((10, 1)).len(), ACTIVITY_MINUTES);
        a.advance(t0 + 30, (13, 1)); // same minute: nothing closes
        assert_eq!(a.last_hour((14, 2)).last(), Some(&Minute { start: t0, boots: 4, failures: 1 }));
        a.advance(t0 + 62, (14, 2)); // next minute: the first closes with 4 boots, 1 failure
        a.advance(t0 + 60 * 4 + 1, (20, 2)); // two minutes without a sample count nothing
        let hour = a.last_hour((21, 5));
        assert_eq!(hour.len(), ACTIVITY_MINUTES);
        let tail: Vec<(i64, u64, u64)> =
            hour[hour.len() - 5..].iter().map(|m| (m.start - t0, m.boots, m.failures)).collect();
        assert_eq!(tail, [(0, 4, 1), (60, 6, 0), (120, 0, 0), (180, 0, 0), (240, 1, 3)]);
        assert!(hour.windows(2).all(|w| w[1].start - w[0].start == 60));
        // After more than an hour, only the last hour is kept.
        a.advance(t0 + 60 * 200, (30, 5));
        let hour = a.last_hour((30, 5));
        assert_eq!(hour.iter().map(|m| m.boots).sum::<u64>(), 0);
        assert_eq!(hour.last().map(|m| m.start), Some(t0 + 60 * 200));
    }

    #[test]
    fn boots_and_failures_come_from_the_counters() {
        let metrics = Metrics::new(None);
        metrics.script(ScriptKind::Node, Transport::Http);
        metrics.script(ScriptKind::Node, Transport::Tftp);
        metrics.script(ScriptKind::Unknown, Transport::Http);
        metrics.script(ScriptKind::Refused, Transport::Http);
        metrics.tftp_transfer(FileClass::File, TftpResult::TimedOut, 0, Duration::from_secs(5));
        metrics.tftp_transfer(FileClass::File, TftpResult::ClientError, 0, Duration::ZERO);
        metrics.http_request(Route::Files, 503, Duration::ZERO);
        metrics.http_request(Route::Other, 500, Duration::ZERO);
        // Summed over the hour: the minute may turn during the test.
        let hour = metrics.boot_activity();
        let sum = |f: fn(&Minute) -> u64| hour.iter().map(f).sum::<u64>();
        assert_eq!((sum(|m| m.boots), sum(|m| m.failures)), (2, 3));
    }
}
