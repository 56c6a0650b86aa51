//! Who may fetch what a node's secrets are in: scripts that carry a secret (HTTP and TFTP) and
//! the deploy ramdisk's endpoints, under `[boot] script_secrets = "neighbour"`; the boot signs
//! the listeners see; and the report of refusals and conflicts.
//!
//! A secret script goes out only inside the node's boot window (`boot_window`), and only to a
//! client whose neighbour entry names one of the node's MACs (`neighbour`); the first such
//! client claims it. Outside a window the request is refused at once, without a neighbour
//! look-up, exactly as an unknown MAC is answered, so neither the answer nor its time tells a
//! node's MAC from an unknown one. A refused client gets what an unknown MAC gets (the listeners
//! decide how that looks).
//!
//! Each refusal is logged and recorded as the event `baremetal.node.script_refused`, at most
//! once per client address per minute ([`RefusalLimiter`]), with the number of refusals since
//! the last report, so that a prober cannot flood the log, the database or the webhook; the
//! deploy endpoints' refusals likewise (`baremetal.node.deploy_refused`, a limiter of their own,
//! reported by `http::deploy`). A
//! conflict (a second client inside a window, or a sign that cannot be a boot) is the warning
//! event `baremetal.node.secret_conflict` naming both clients, limited the same way, and is
//! always counted (`bootvol_secret_conflicts_total`).
//!
//! The I/O is here (the neighbour table, the probe of a node's last address, the event
//! writes); the decisions are `boot_window`'s and [`RefusalLimiter`]'s, both pure.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::neighbour::{self, Neighbours};
use crate::segment;
use bootvol_core::boot::ServedScript;
use bootvol_core::boot_window::{Admission, BootWindows, Client, Conflict};
use bootvol_core::config::ScriptSecrets;
use bootvol_core::deploy::Caller;
use bootvol_core::model::MacAddr;
use bootvol_runtime::metrics::Metrics;

/// The event of a refused script.
pub const REFUSED_EVENT: &str = "baremetal.node.script_refused";

/// The event of a refused deploy endpoint (`POST /deploy/<uuid>/token`, `/callback`, `GET
/// /configdrive`).
pub const DEPLOY_REFUSED_EVENT: &str = "baremetal.node.deploy_refused";

/// The event of a conflict: two clients claim one node.
pub const CONFLICT_EVENT: &str = "baremetal.node.secret_conflict";

/// Why a script was refused: the node's boot window is closed.
pub const OUTSIDE_WINDOW: &str = "outside a boot window";

/// Why a script was refused: the neighbour table does not name one of the node's MACs.
pub const NOT_THE_NODE: &str = "not the node (neighbour table)";

/// Why a script was refused: another host already claimed the node in this window.
pub const CONFLICT: &str = "another host claims this node (secret conflict)";

/// Why a script was refused: it carries a secret but names no node.
const NO_NODE: &str = "no node";

/// At most one report per client address per this long.
pub const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Client addresses the limiter remembers. When full, those quiet for [`REPORT_EVERY`] are
/// forgotten (with the refusals they had not reported yet); when all were refused within the
/// last minute, refusals of further addresses go unreported.
const MAX_CLIENTS: usize = 4096;

/// Other addresses of a node's MAC probed at most, when the node's last address is not known.
const MAX_PROBED: usize = 4;

/// Where refusals and conflicts are recorded as node events, off the boot path: the call
/// returns at once and the write happens on a tracked task of the implementer's (the binary's,
/// over the database). This crate knows no SQL.
pub trait EventSink: Send + Sync + std::fmt::Debug {
    /// Records the warning event `event` of node `node_uuid` with `payload`.
    fn record(&self, node_uuid: &str, event: &'static str, payload: serde_json::Value);
}

/// The listeners' gate for secrets; shared by the HTTP and TFTP listeners and the ProxyDHCP.
#[derive(Debug)]
pub struct ScriptAccess {
    mode: ScriptSecrets,
    events: Option<Arc<dyn EventSink>>,
    refusals: Mutex<RefusalLimiter>,
    deploy_refusals: Mutex<RefusalLimiter>,
    conflicts: Mutex<RefusalLimiter>,
    neighbours: Arc<Neighbours>,
    windows: Arc<BootWindows>,
    metrics: Arc<Metrics>,
    /// Asks of the segment in flight ([`MAX_ASKING`]).
    asking: Arc<tokio::sync::Semaphore>,
}

/// Asks of the segment ([`segment::ask`]) in flight at once; past it the neighbour table's check.
pub const MAX_ASKING: usize = 32;

/// Said once per process: the segment cannot be asked (no raw socket), the table is used.
static CANNOT_ASK: std::sync::Once = std::sync::Once::new();

impl ScriptAccess {
    /// `events`: where refusals and conflicts are recorded (none: logged only).
    pub fn new(
        mode: ScriptSecrets,
        events: Option<Arc<dyn EventSink>>,
        neighbours: Arc<Neighbours>,
        windows: Arc<BootWindows>,
        metrics: Arc<Metrics>,
    ) -> Arc<ScriptAccess> {
        Arc::new(ScriptAccess {
            mode,
            events,
            refusals: Mutex::default(),
            deploy_refusals: Mutex::default(),
            conflicts: Mutex::default(),
            neighbours,
            windows,
            metrics,
            asking: Arc::new(tokio::sync::Semaphore::new(MAX_ASKING)),
        })
    }

    pub fn mode(&self) -> ScriptSecrets {
        self.mode
    }

    /// Whether `script` (asked for as `requested`) may go to `client`: `Err` says why not (for
    /// the admin page's boot requests); a refusal or a conflict is reported. `via`: `http` or
    /// `tftp`. In steps: the node's boot window is open (`window_open`, no look-up outside it),
    /// the neighbour entry names one of the node's MACs, the window admits this client
    /// (`admission`), and the outcome is reported (`outcome`).
    pub async fn allows(
        &self,
        script: &ServedScript,
        requested: MacAddr,
        client: IpAddr,
        via: &'static str,
    ) -> Result<(), &'static str> {
        if !script.secret || self.mode == ScriptSecrets::Any {
            return Ok(());
        }
        // A dual-stack listener's IPv4 clients, as IPv4 in the log, the event and the limiter.
        let client = client.to_canonical();
        let Some(uuid) = script.node_uuid.as_deref() else { return Err(NO_NODE) };
        if !self.window_open(script, uuid) {
            self.refused(script, requested, client, None, via, OUTSIDE_WINDOW);
            return Err(OUTSIDE_WINDOW);
        }
        let client_mac = self.neighbours.resolve(client, neighbour::RESOLVE_WAIT).await;
        let Some(mac) = client_mac.filter(|mac| script.node_macs.contains(mac)) else {
            self.refused(script, requested, client, client_mac, via, NOT_THE_NODE);
            return Err(NOT_THE_NODE);
        };
        let me = Client { address: client, mac };
        let admission = self.admission(script, uuid, me).await;
        self.outcome(script, requested, me, admission, via)
    }

    /// Whether node `uuid`'s boot window is open now, after following the window another
    /// instance opened (the snapshot's stamp), if any.
    fn window_open(&self, script: &ServedScript, uuid: &str) -> bool {
        if let Some(stamp) = script.window_opened_at {
            let now_unix = bootvol_core::timefmt::now_unix();
            self.windows.follow(uuid, stamp, Instant::now(), now_unix);
        }
        self.windows.is_open(uuid, Instant::now())
    }

    /// What node `uuid`'s window says of `me`; when it asks for a probe, whether the node's MAC
    /// still answers elsewhere decides between a conflict (the window contested: whoever claims
    /// it proves nothing of the node's address) and the claim.
    async fn admission(&self, script: &ServedScript, uuid: &str, me: Client) -> Admission {
        match self.windows.admit(uuid, me, script.powered_off, Instant::now()) {
            Admission::Probe { last } => match self.still_answering(script, me, last).await {
                Some(address) => {
                    self.windows.contested(uuid, Instant::now());
                    Admission::Conflict(Conflict::StillAnswers { address })
                }
                None => self.windows.claim(uuid, me, Instant::now()),
            },
            other => other,
        }
    }

    /// Serves on `Admission::Serve`; otherwise reports the refusal or the conflict.
    fn outcome(
        &self,
        script: &ServedScript,
        requested: MacAddr,
        me: Client,
        admission: Admission,
        via: &'static str,
    ) -> Result<(), &'static str> {
        match admission {
            Admission::Serve => Ok(()),
            Admission::Closed | Admission::Probe { .. } => {
                self.refused(script, requested, me.address, Some(me.mac), via, OUTSIDE_WINDOW);
                Err(OUTSIDE_WINDOW)
            }
            Admission::Conflict(conflict) => {
                let (uuid, node) = (script.node_uuid.as_deref(), script.node.as_deref());
                self.conflict(uuid, node, me, &conflict, via);
                Err(CONFLICT)
            }
        }
    }

    /// The address at which the node's MAC still answers, other than `client`'s: the node's last
    /// address if known, else the others the neighbour table names for its MACs.
    async fn still_answering(
        &self,
        script: &ServedScript,
        client: Client,
        last: Option<IpAddr>,
    ) -> Option<IpAddr> {
        if let Some(address) = last {
            return self.segment_answers(client, address, &script.node_macs).await;
        }
        let mut candidates: Vec<IpAddr> = script
            .node_macs
            .iter()
            .flat_map(|mac| self.neighbours.addresses_of(*mac, client.address))
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        candidates.truncate(MAX_PROBED);
        for address in candidates {
            if self.neighbours.answers_at(address, &script.node_macs).await {
                return Some(address);
            }
        }
        None
    }

    /// Whether one of `macs` answers at the node's last `address` (then `Some(address)`): bootvol
    /// asks the segment itself ([`segment::ask`]: an ARP request or a Neighbour Solicitation
    /// on the interface `client` came in on, every answer read for [`segment::ASK_WAIT`]), so
    /// that a host that poisoned the cache for that address (a double flip) cannot hide the
    /// node. Where it cannot ask (no raw socket, `CAP_NET_RAW`; the client's interface unknown;
    /// [`MAX_ASKING`] asks in flight), the neighbour table's check, as before.
    async fn segment_answers(
        &self,
        client: Client,
        address: IpAddr,
        macs: &[MacAddr],
    ) -> Option<IpAddr> {
        let interface = self.neighbours.interface_of(client.address);
        let permit = Arc::clone(&self.asking).try_acquire_owned().ok();
        if let (Some(ifindex), Some(permit)) = (interface, permit) {
            let wanted = macs.to_vec();
            let asked = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                segment::ask(ifindex, address, &wanted)
            })
            .await;
            match asked {
                Ok(Ok(answered)) => return answered.then_some(address),
                Ok(Err(e)) => CANNOT_ASK.call_once(|| {
                    tracing::warn!(error = %e, "cannot ask the segment who has a node's last address; the neighbour table is read instead (a double ARP flip can hide the node)");
                }),
                Err(e) => tracing::warn!(error = %e, "the ask of the segment failed"),
            }
        }
        self.neighbours.answers_at(address, macs).await.then_some(address)
    }

    /// A client fetched the first file of a boot chain (`via`: `tftp` or `http`): when its
    /// neighbour entry names a node's MAC, that node may be starting a boot. A look-up of the
    /// table's copy; never waits on resolution.
    pub fn boot_file_fetched(
        &self,
        client: IpAddr,
        node_of: impl FnOnce(MacAddr) -> Option<String>,
        via: &'static str,
    ) {
        if self.mode == ScriptSecrets::Any {
            return;
        }
        let Some(mac) = self.neighbours.lookup(client) else { return };
        if let Some(uuid) = node_of(mac) {
            self.sign(&uuid, via);
        }
    }

    /// A sign that a node starts a boot (`via`: `dhcp`, `tftp`, `http`).
    pub fn sign(&self, uuid: &str, via: &'static str) {
        if self.mode == ScriptSecrets::Neighbour && self.windows.sign(uuid, via, Instant::now()) {
            tracing::info!(node_uuid = uuid, via, "boot window opened by a boot sign");
        }
    }

    /// The MAC the neighbour table's copy maps `client` to, if any (never waits): whether a
    /// boot report comes from the node it names.
    pub fn neighbour_mac(&self, client: IpAddr) -> Option<MacAddr> {
        self.neighbours.lookup(client.to_canonical())
    }

    /// Who calls a deploy endpoint, for the conductor's neighbour and claimant checks.
    pub async fn caller(&self, client: IpAddr) -> Caller {
        let address = client.to_canonical();
        match self.mode {
            ScriptSecrets::Any => Caller { address, mac: None, checked: false },
            ScriptSecrets::Neighbour => Caller {
                address,
                mac: self.neighbours.resolve(address, neighbour::RESOLVE_WAIT).await,
                checked: true,
            },
        }
    }

    /// Reports a conflict: always counted; logged and recorded as an event at most once per
    /// client address per minute, with the count.
    pub fn conflict(
        &self,
        uuid: Option<&str>,
        node: Option<&str>,
        second: Client,
        conflict: &Conflict,
        via: &'static str,
    ) {
        self.metrics.secret_conflict();
        let due = match self.conflicts.lock() {
            Ok(mut limiter) => limiter.refuse(second.address, Instant::now()),
            Err(_) => None,
        };
        let Some(count) = due else { return };
        let text = conflict.describe(&second);
        tracing::warn!(client = %second.address, client_mac = %second.mac, node = node.unwrap_or("-"), via, count,
            conflict = text, "secret conflict: two hosts claim one node; refused");
        let (Some(events), Some(uuid)) = (&self.events, uuid) else { return };
        let first = conflict.first();
        let payload = json!({"node_uuid": uuid, "node_name": node, "via": via, "count": count,
            "message": text,
            "first_client": first.map(|c| c.address.to_string()),
            "first_client_mac": first.map(|c| c.mac.to_string()),
            "client": second.address.to_string(), "client_mac": second.mac.to_string()});
        events.record(uuid, CONFLICT_EVENT, payload);
    }

    /// Counts a deploy endpoint's refusal of `client` (apart from script refusals): the number
    /// to report when a report is due (at most once per client address per minute), else none.
    pub fn deploy_refusal_due(&self, client: IpAddr) -> Option<u64> {
        self.deploy_refusals.lock().ok()?.refuse(client.to_canonical(), Instant::now())
    }

    /// Records a due deploy refusal (see [`ScriptAccess::deploy_refusal_due`]) as the warning
    /// event `baremetal.node.deploy_refused` of the node, after the answer.
    pub fn record_deploy_refused(
        &self,
        node: (&str, &str),
        caller: Caller,
        endpoint: &'static str,
        reason: String,
        count: u64,
    ) {
        let Some(events) = &self.events else { return };
        let (uuid, name) = node;
        let payload = json!({"node_uuid": uuid, "node_name": name, "endpoint": endpoint,
            "client": caller.address.to_canonical().to_string(),
            "client_mac": caller.mac.map(|m| m.to_string()), "count": count, "reason": reason});
        events.record(uuid, DEPLOY_REFUSED_EVENT, payload);
    }

    fn refused(
        &self,
        script: &ServedScript,
        requested: MacAddr,
        client: IpAddr,
        client_mac: Option<MacAddr>,
        via: &'static str,
        why: &'static str,
    ) {
        let due = match self.refusals.lock() {
            Ok(mut limiter) => limiter.refuse(client, Instant::now()),
            Err(_) => None,
        };
        let Some(count) = due else { return };
        let node = script.node.as_deref().unwrap_or("-");
        let shown_mac = client_mac.map_or_else(|| "-".to_owned(), |m| m.to_string());
        tracing::warn!(%client, client_mac = shown_mac, mac = %requested, node, via, count, why,
            "script refused: it carries a secret");
        let (Some(events), Some(uuid)) = (&self.events, &script.node_uuid) else { return };
        let payload = json!({"node_uuid": uuid, "node_name": script.node, "client": client.to_string(),
            "client_mac": client_mac.map(|m| m.to_string()), "mac": requested.to_string(),
            "via": via, "count": count, "reason": why});
        // Written after the answer: the boot path never waits on SQLite.
        events.record(uuid, REFUSED_EVENT, payload);
    }
}

/// Refusals per client address: one report per [`REPORT_EVERY`], carrying the count.
#[derive(Debug, Default)]
pub struct RefusalLimiter {
    clients: HashMap<IpAddr, Window>,
}

#[derive(Debug)]
struct Window {
    reported_at: Instant,
    /// Refusals since the last report.
    unreported: u64,
}

impl RefusalLimiter {
    /// Counts a refusal of `client` at `now`. When a report is due, answers how many refusals it
    /// reports (this one and those held back since the last report).
    pub fn refuse(&mut self, client: IpAddr, now: Instant) -> Option<u64> {
        if let Some(window) = self.clients.get_mut(&client)
            && now.duration_since(window.reported_at) < REPORT_EVERY
        {
            window.unreported += 1;
            return None;
        }
        if self.clients.len() >= MAX_CLIENTS && !self.clients.contains_key(&client) {
            self.clients.retain(|_, w| now.duration_since(w.reported_at) < REPORT_EVERY);
            if self.clients.len() >= MAX_CLIENTS {
                // Thousands of addresses refused within a minute: the reports already made
                // say enough, and the table stays bounded.
                return None;
            }
        }
        let held_back = self.clients.get(&client).map_or(0, |w| w.unreported);
        self.clients.insert(client, Window { reported_at: now, unreported: 0 });
        Some(held_back + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_report_per_client_per_minute_with_the_count() {
        let mut limiter = RefusalLimiter::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert_eq!(limiter.refuse(a, t0), Some(1));
        for i in 1..=99 {
            assert_eq!(limiter.refuse(a, t0 + Duration::from_millis(i * 100)), None);
        }
        // Another client is reported on its own.
        assert_eq!(limiter.refuse(b, t0 + Duration::from_secs(1)), Some(1));
        assert_eq!(limiter.refuse(a, t0 + Duration::from_secs(59)), None);
        // A minute after the first report: the 100 held back and this one.
        assert_eq!(limiter.refuse(a, t0 + REPORT_EVERY), Some(101));
        assert_eq!(limiter.refuse(a, t0 + REPORT_EVERY + Duration::from_secs(1)), None);
        // Quiet for longer than a minute: the next refusal is reported at once.
        assert_eq!(limiter.refuse(b, t0 + Duration::from_secs(300)), Some(1));
    }

    #[test]
    fn the_table_of_clients_stays_bounded() {
        let mut limiter = RefusalLimiter::default();
        let t0 = Instant::now();
        for i in 0..(MAX_CLIENTS as u32 * 3) {
            let client = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            let now = t0 + Duration::from_secs(u64::from(i / MAX_CLIENTS as u32) * 61);
            assert_eq!(limiter.refuse(client, now), Some(1));
        }
        assert!(limiter.clients.len() <= MAX_CLIENTS);
        // A flood of new addresses within one minute: no more reports once the table is full.
        let later = t0 + Duration::from_secs(3600);
        let reports = (0..(MAX_CLIENTS as u32 * 2))
            .filter_map(|i| {
                limiter.refuse(IpAddr::from(std::net::Ipv4Addr::from(0x0b00_0000 + i)), later)
            })
            .count();
        assert_eq!(reports, MAX_CLIENTS);
        assert_eq!(limiter.clients.len(), MAX_CLIENTS);
    }
}
