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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use bootvol_core::model::sync::{SyncPassOutcome, SyncStatus};
use bootvol_core::model::{Driver, ProvisionState};

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

/// A route of the boot HTTP listener, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Generic,
    Script,
    Files,
    Ipxe,
    Deploy,
    Other,
}

impl Route {
    const ALL: [Route; 6] =
        [Route::Generic, Route::Script, Route::Files, Route::Ipxe, Route::Deploy, Route::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Route::Generic => "/boot.ipxe",
            Route::Script => "/boot/",
            Route::Files => "/files/",
            Route::Ipxe => "/ipxe/",
            Route::Deploy => "/deploy/",
            Route::Other => "other",
        }
    }
}

/// The statuses counted on their own; any other is counted as `other`.
const STATUSES: [u16; 12] = [200, 206, 304, 400, 403, 404, 405, 413, 416, 429, 500, 503];

/// How a boot script was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Tftp,
}

impl Transport {
    const ALL: [Transport; 2] = [Transport::Http, Transport::Tftp];

    fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Tftp => "tftp",
        }
    }
}

/// What a boot script request got (the same words as the admin page's recent boots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptKind {
    /// `boot.ipxe`.
    Generic,
    /// `default.ipxe` asked for by name.
    Default,
    /// A node's own script.
    Node,
    /// A MAC no node has: the default script (404 over HTTP, not found over TFTP).
    Unknown,
    /// A script with a secret asked for by a client that is not its node: treated as unknown.
    Refused,
}

impl ScriptKind {
    const ALL: [ScriptKind; 5] = [
        ScriptKind::Generic,
        ScriptKind::Default,
        ScriptKind::Node,
        ScriptKind::Unknown,
        ScriptKind::Refused,
    ];

    fn as_str(self) -> &'static str {
        match self {
            ScriptKind::Generic => "generic",
            ScriptKind::Default => "default",
            ScriptKind::Node => "node",
            ScriptKind::Unknown => "unknown",
            ScriptKind::Refused => "refused",
        }
    }
}

/// What a TFTP transfer carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileClass {
    /// A boot script (`boot.ipxe`, `default.ipxe`, `boot/<mac>.ipxe`).
    Script,
    /// Anything else: a file of `[tftp] root` (the iPXE binaries), or a name that is neither.
    File,
}

impl FileClass {
    const ALL: [FileClass; 2] = [FileClass::Script, FileClass::File];

    fn as_str(self) -> &'static str {
        match self {
            FileClass::Script => "script",
            FileClass::File => "file",
        }
    }
}

/// How a TFTP read request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TftpResult {
    /// The last block was acknowledged.
    Complete,
    /// The client sent an ERROR (the `tsize` probe of PXE ROMs ends so, on purpose).
    ClientError,
    TimedOut,
    /// A new request from the same client replaced it.
    Superseded,
    /// Not found or not allowed (an unknown MAC's script is not found).
    Refused,
    SocketError,
}

impl TftpResult {
    const ALL: [TftpResult; 6] = [
        TftpResult::Complete,
        TftpResult::ClientError,
        TftpResult::TimedOut,
        TftpResult::Superseded,
        TftpResult::Refused,
        TftpResult::SocketError,
    ];

    fn as_str(self) -> &'static str {
        match self {
            TftpResult::Complete => "complete",
            TftpResult::ClientError => "client_error",
            TftpResult::TimedOut => "timed_out",
            TftpResult::Superseded => "superseded",
            TftpResult::Refused => "refused",
            TftpResult::SocketError => "socket_error",
        }
    }
}

/// A DHCP message, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpMessage {
    Discover,
    Request,
    /// Any other type, or none (a packet that did not parse).
    Other,
}

impl DhcpMessage {
    const ALL: [DhcpMessage; 3] = [DhcpMessage::Discover, DhcpMessage::Request, DhcpMessage::Other];

    fn as_str(self) -> &'static str {
        match self {
            DhcpMessage::Discover => "discover",
            DhcpMessage::Request => "request",
            DhcpMessage::Other => "other",
        }
    }
}

/// How the ProxyDHCP dealt with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpResult {
    /// An OFFER or ACK was sent.
    Answered,
    /// Not for us: not a netboot client, no binary for its architecture, `answer = "known"`...
    Ignored,
    /// Over the per-MAC or overall reply limit.
    Limited,
    /// The reply could not be sent.
    SendFailed,
    /// Not a DHCP packet.
    Malformed,
}

impl DhcpResult {
    const ALL: [DhcpResult; 5] = [
        DhcpResult::Answered,
        DhcpResult::Ignored,
        DhcpResult::Limited,
        DhcpResult::SendFailed,
        DhcpResult::Malformed,
    ];

    fn as_str(self) -> &'static str {
        match self {
            DhcpResult::Answered => "answered",
            DhcpResult::Ignored => "ignored",
            DhcpResult::Limited => "limited",
            DhcpResult::SendFailed => "send_failed",
            DhcpResult::Malformed => "malformed",
        }
    }
}

/// The client architectures (option 93) counted on their own (IANA numbers); any other is
/// `other`, and a packet without the option `none`.
const DHCP_ARCHES: [u16; 11] = [0, 6, 7, 9, 10, 11, 15, 16, 18, 19, 20];

/// A BMC call of the power drivers, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmcCall {
    PowerState,
    SetPower,
    SetBootDevice,
}

impl BmcCall {
    const ALL: [BmcCall; 3] = [BmcCall::PowerState, BmcCall::SetPower, BmcCall::SetBootDevice];

    fn as_str(self) -> &'static str {
        match self {
            BmcCall::PowerState => "power_state",
            BmcCall::SetPower => "set_power",
            BmcCall::SetBootDevice => "set_boot_device",
        }
    }
}

/// How a BMC call ended (the kinds of `PowerError`, and `ok`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmcResult {
    Ok,
    Invalid,
    BmcError,
    Timeout,
    Unsupported,
}

impl BmcResult {
    const ALL: [BmcResult; 5] = [
        BmcResult::Ok,
        BmcResult::Invalid,
        BmcResult::BmcError,
        BmcResult::Timeout,
        BmcResult::Unsupported,
    ];

    fn as_str(self) -> &'static str {
        match self {
            BmcResult::Ok => "ok",
            BmcResult::Invalid => "invalid",
            BmcResult::BmcError => "bmc_error",
            BmcResult::Timeout => "timeout",
            BmcResult::Unsupported => "unsupported",
        }
    }
}

/// A histogram in atomics: fixed bucket bounds, a count, and the sum in nanoseconds.
#[derive(Debug)]
pub struct AtomicHistogram {
    bounds: &'static [f64],
    /// One per bound, then the overflow (`+Inf`) bucket; not cumulative.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl AtomicHistogram {
    fn new(bounds: &'static [f64]) -> AtomicHistogram {
        AtomicHistogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let slot = self.bounds.iter().position(|b| seconds <= *b).unwrap_or(self.bounds.len());
        self.buckets[slot].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum_nanos.fetch_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets.iter().map(|b| b.load(Relaxed)))
            .collect();
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, self.count.load(Relaxed), &buckets, None)
    }
}

const HTTP_BOUNDS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0];
const TFTP_BOUNDS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 120.0];
const REBUILD_BOUNDS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0];

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

/// Boots and failures in one minute of the admin page's boot activity view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Minute {
    /// Unix seconds of the minute's start.
    pub start: i64,
    /// Nodes' own boot scripts served (over HTTP or TFTP).
    pub boots: u64,
    /// Scripts refused to a client that is not their node, TFTP transfers that timed out or
    /// failed on the socket, and 5xx answers of the boot HTTP listener.
    pub failures: u64,
}

/// How many minutes the activity view keeps.
pub const ACTIVITY_MINUTES: usize = 60;

/// Per-minute differences of the boot and failure totals: the minutes closed so far (oldest
/// first) and the totals when the open minute began.
#[derive(Debug)]
struct Activity {
    closed: VecDeque<Minute>,
    open_start: i64,
    base: (u64, u64),
}

fn minute_of(unix: i64) -> i64 {
    unix - unix.rem_euclid(60)
}

impl Activity {
    fn new(now: i64, totals: (u64, u64)) -> Activity {
        Activity { closed: VecDeque::new(), open_start: minute_of(now), base: totals }
    }

    /// Closes the open minute once `now` is past it: what was counted since it began is its
    /// share (a sample a few seconds late gives it those seconds too); minutes with no sample
    /// at all count nothing.
    fn advance(&mut self, now: i64, totals: (u64, u64)) {
        let minute = minute_of(now);
        if minute <= self.open_start {
            return;
        }
        self.closed.push_back(Minute {
            start: self.open_start,
            boots: totals.0.saturating_sub(self.base.0),
            failures: totals.1.saturating_sub(self.base.1),
        });
        let skipped = (minute - self.open_start) / 60 - 1;
        if skipped >= ACTIVITY_MINUTES as i64 {
            self.closed.clear();
        } else {
            for k in 1..=skipped {
                self.closed
                    .push_back(Minute { start: self.open_start + 60 * k, ..Minute::default() });
            }
        }
        while self.closed.len() >= ACTIVITY_MINUTES {
            self.closed.pop_front();
        }
        self.open_start = minute;
        self.base = totals;
    }

    /// The last [`ACTIVITY_MINUTES`] minutes, oldest first, ending with the open one (counted
    /// up to `totals`).
    fn last_hour(&self, totals: (u64, u64)) -> Vec<Minute> {
        let first = self.open_start - 60 * (ACTIVITY_MINUTES as i64 - 1);
        let mut minutes: Vec<Minute> = (0..ACTIVITY_MINUTES as i64 - 1)
            .map(|k| {
                let start = first + 60 * k;
                self.closed
                    .iter()
                    .find(|m| m.start == start)
                    .copied()
                    .unwrap_or(Minute { start, ..Minute::default() })
            })
            .collect();
        minutes.push(Minute {
            start: self.open_start,
            boots: totals.0.saturating_sub(self.base.0),
            failures: totals.1.saturating_sub(self.base.1),
        });
        minutes
    }
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

fn index_of<T: PartialEq>(all: &[T], value: T) -> usize {
    all.iter().position(|v| *v == value).unwrap_or(0)
}

/// One scrape: the counters, and what was read from the database for it.
#[derive(Debug)]
struct Scrape {
    metrics: Arc<Metrics>,
    sync: Option<SyncStatus>,
    /// Refused scripts counted as unknown (the unauthenticated scrape).
    public: bool,
}

fn counter(encoder: MetricEncoder, value: u64) -> std::fmt::Result {
    ConstCounter::new(value).encode(encoder)
}

fn gauge(encoder: MetricEncoder, value: i64) -> std::fmt::Result {
    ConstGauge::new(value).encode(encoder)
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let m = &self.metrics;
        let mut family = e.encode_descriptor(
            "bootvol_http_requests",
            "Requests answered by the boot HTTP listener, by route and status (200 always, others once seen).",
            None,
            MetricType::Counter,
        )?;
        for (r, route) in Route::ALL.iter().enumerate() {
            for (s, value) in m.http_requests[r].iter().enumerate() {
                // 200 always, the other statuses once seen: a fixed, small set either way.
                let value = value.load(Relaxed);
                if value == 0 && s != 0 {
                    continue;
                }
                let status = STATUSES.get(s).map_or("other".to_owned(), u16::to_string);
                let labels = [("route", route.as_str()), ("status", status.as_str())];
                counter(family.encode_family(&labels)?, value)?;
            }
        }
        let mut family = e.encode_descriptor(
            "bootvol_http_request_seconds",
            "Time to answer a request of the boot HTTP listener, by route.",
            None,
            MetricType::Histogram,
        )?;
        for (r, route) in Route::ALL.iter().enumerate() {
            m.http_seconds[r].encode(family.encode_family(&[("route", route.as_str())])?)?;
        }
        let mut family = e.encode_descriptor(
            "bootvol_boot_scripts",
            if self.public {
                "Boot script requests by what they got (generic, default, node, unknown: refused ones included) and transport."
            } else {
                "Boot script requests by what they got (generic, default, node, unknown, refused) and transport."
            },
            None,
            MetricType::Counter,
        )?;
        let (unknown, refused) = (
            index_of(&ScriptKind::ALL, ScriptKind::Unknown),
            index_of(&ScriptKind::ALL, ScriptKind::Refused),
        );
        for (k, kind) in ScriptKind::ALL.iter().enumerate() {
            if self.public && k == refused {
                continue;
            }
            for (t, transport) in Transport::ALL.iter().enumerate() {
                let labels = [("kind", kind.as_str()), ("transport", transport.as_str())];
                let mut value = m.scripts[k][t].load(Relaxed);
                if self.public && k == unknown {
                    value += m.scripts[refused][t].load(Relaxed);
                }
                counter(family.encode_family(&labels)?, value)?;
            }
        }
        let mut family = e.encode_descriptor(
            "bootvol_tftp_transfers",
            "TFTP read requests by what they carried (script, file) and how they ended.",
            None,
            MetricType::Counter,
        )?;
        for (c, class) in FileClass::ALL.iter().enumerate() {
            for (i, result) in TftpResult::ALL.iter().enumerate() {
                let labels = [("file_class", class.as_str()), ("result", result.as_str())];
                let value = m.tftp_transfers[c][i].load(Relaxed);
                counter(family.encode_family(&labels)?, value)?;
            }
        }
        let mut family = e.encode_descriptor(
            "bootvol_tftp_transfer_seconds",
            "Time from a TFTP read request to its end, by what it carried.",
            None,
            MetricType::Histogram,
        )?;
        for (c, class) in FileClass::ALL.iter().enumerate() {
            m.tftp_seconds[c].encode(family.encode_family(&[("file_class", class.as_str())])?)?;
        }
        let family = e.encode_descriptor(
            "bootvol_tftp_bytes",
            "Bytes TFTP clients acknowledged.",
            None,
            MetricType::Counter,
        )?;
        counter(family, m.tftp_bytes.load(Relaxed))?;
        let family = e.encode_descriptor(
            "bootvol_snapshot_rebuild_seconds",
            "Time to read the database and render every node's boot script.",
            None,
            MetricType::Histogram,
        )?;
        m.rebuild_seconds.encode(family)?;
        let family = e.encode_descriptor(
            "bootvol_snapshot_rebuild_failures",
            "Snapshot rebuilds that failed (the previous snapshot stayed in service).",
            None,
            MetricType::Counter,
        )?;
        counter(family, m.rebuild_failures.load(Relaxed))?;
        let family = e.encode_descriptor(
            "bootvol_secret_conflicts",
            "Requests for a node's secret script or deploy token refused because another client claimed it in the same boot window, or because the node was not booting (baremetal.node.secret_conflict).",
            None,
            MetricType::Counter,
        )?;
        counter(family, m.secret_conflicts.load(Relaxed))?;
        let family = e.encode_descriptor(
            "bootvol_neighbour_resolutions_refused",
            "Neighbour resolutions not started because too many were in flight (the client was answered as unknown).",
            None,
            MetricType::Counter,
        )?;
        counter(family, m.neighbour_overflow.get().map_or(0, |c| c.load(Relaxed)))?;
        let family = e.encode_descriptor(
            "bootvol_snapshot_generation",
            "Snapshots built since start; the one served is the last.",
            None,
            MetricType::Gauge,
        )?;
        gauge(family, m.generation.load(Relaxed) as i64)?;
        let built = m.built_at_ms.load(Relaxed);
        if built > 0 {
            let family = e.encode_descriptor(
                "bootvol_snapshot_age_seconds",
                "Seconds since the snapshot being served was built.",
                None,
                MetricType::Gauge,
            )?;
            gauge(family, (now_ms().saturating_sub(built) / 1000) as i64)?;
        }
        let mut family = e.encode_descriptor(
            "bootvol_nodes",
            "Nodes by provision state, as of the snapshot being served.",
            None,
            MetricType::Gauge,
        )?;
        for (i, state) in ProvisionState::ALL.iter().enumerate() {
            let labels = [("provision_state", state.as_str())];
            gauge(family.encode_family(&labels)?, m.nodes[i].load(Relaxed) as i64)?;
        }
        let family = e.encode_descriptor(
            "bootvol_boot_listeners_up",
            "1 while the boot HTTP and TFTP listeners answer.",
            None,
            MetricType::Gauge,
        )?;
        gauge(family, i64::from(m.boot_listeners_up.load(Relaxed)))?;
        let family = e.encode_descriptor(
            "bootvol_database_readable",
            "1 when the last read of the database (by a scrape or /readyz) succeeded.",
            None,
            MetricType::Gauge,
        )?;
        gauge(family, i64::from(m.database_readable.load(Relaxed)))?;
        let family = e.encode_descriptor(
            "bootvol_database_connected",
            "1 while the connection to the database engine is up (PostgreSQL's change listener; always 1 on SQLite).",
            None,
            MetricType::Gauge,
        )?;
        gauge(family, i64::from(m.database_connected.load(Relaxed)))?;
        encode_dhcp(&mut e, m)?;
        encode_bmc(&mut e, m)?;
        if let Some(sync) = &self.sync {
            encode_sync(&mut e, sync)?;
        }
        Ok(())
    }
}

/// ProxyDHCP packets: only the combinations seen (most never are).
fn encode_dhcp(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "bootvol_dhcp_packets",
        "Packets received by the ProxyDHCP, by message type, client architecture (option 93, IANA number) and what was done (only combinations seen).",
        None,
        MetricType::Counter,
    )?;
    let arch_label = |a: usize| match DHCP_ARCHES.get(a) {
        Some(n) => n.to_string(),
        None if a == DHCP_ARCHES.len() => "other".to_owned(),
        None => "none".to_owned(),
    };
    for (mi, message) in DhcpMessage::ALL.iter().enumerate() {
        for a in 0..DHCP_ARCHES.len() + 2 {
            for (ri, result) in DhcpResult::ALL.iter().enumerate() {
                let value = m.dhcp_packets[Metrics::dhcp_slot(mi, a, ri)].load(Relaxed);
                if value == 0 {
                    continue;
                }
                let arch = arch_label(a);
                let labels = [
                    ("message", message.as_str()),
                    ("arch", arch.as_str()),
                    ("result", result.as_str()),
                ];
                counter(family.encode_family(&labels)?, value)?;
            }
        }
    }
    Ok(())
}

/// BMC calls: `ok` for every driver and call, the errors once seen.
fn encode_bmc(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "bootvol_bmc_calls",
        "Calls of the power drivers to BMCs, by driver, call and result (ok always, errors once seen).",
        None,
        MetricType::Counter,
    )?;
    for (di, driver) in Driver::ALL.iter().enumerate() {
        for (ci, call) in BmcCall::ALL.iter().enumerate() {
            for (ri, result) in BmcResult::ALL.iter().enumerate() {
                let value = m.bmc_calls[Metrics::bmc_slot(di, ci, ri)].load(Relaxed);
                if value == 0 && *result != BmcResult::Ok {
                    continue;
                }
                let labels = [
                    ("driver", driver.as_str()),
                    ("call", call.as_str()),
                    ("result", result.as_str()),
                ];
                counter(family.encode_family(&labels)?, value)?;
            }
        }
    }
    Ok(())
}

/// The last Cinder sync pass (`sync_status`), present once a pass was recorded.
fn encode_sync(e: &mut DescriptorEncoder, sync: &SyncStatus) -> std::fmt::Result {
    let family = e.encode_descriptor(
        "bootvol_cinder_sync_last_pass_timestamp_seconds",
        "When the last Cinder sync pass finished (Unix seconds).",
        None,
        MetricType::Gauge,
    )?;
    gauge(family, sync.finished_at)?;
    let family = e.encode_descriptor(
        "bootvol_cinder_sync_last_pass_errors",
        "Volumes the last Cinder sync pass could not check.",
        None,
        MetricType::Gauge,
    )?;
    gauge(family, sync.errors)?;
    let mut family = e.encode_descriptor(
        "bootvol_cinder_sync_last_pass_outcome",
        "1 for the outcome of the last Cinder sync pass (ok, drift, partial, failed), 0 for the others.",
        None,
        MetricType::Gauge,
    )?;
    for outcome in SyncPassOutcome::ALL.map(|o| o.as_str()) {
        let value = i64::from(sync.outcome.as_str() == outcome);
        gauge(family.encode_family(&[("outcome", outcome)])?, value)?;
    }
    if let Some(ok_at) = sync.last_ok_at {
        let family = e.encode_descriptor(
            "bootvol_cinder_sync_last_success_timestamp_seconds",
            "When the last clean Cinder sync pass (outcome ok: nothing drifted, nothing failed) finished (Unix seconds).",
            None,
            MetricType::Gauge,
        )?;
        gauge(family, ok_at)?;
    }
    Ok(())
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
