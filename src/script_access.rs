//! Who may fetch what a node's secrets are in: the neighbour check of `[boot] script_secrets`
//! for scripts that carry a secret (HTTP and TFTP) and for the deploy ramdisk's endpoints, and
//! the report of refusals.
//!
//! A refused client gets what an unknown MAC gets (the listeners decide how that looks), so a
//! prober cannot tell nodes from unknown MACs. Each refusal is logged and recorded as the event
//! `baremetal.node.script_refused`, at most once per client address per minute
//! ([`RefusalLimiter`]), with the number of refusals since the last report, so that a prober
//! cannot flood the log, the database or the webhook.
//!
//! The neighbour table is read through `neighbour` (I/O); [`RefusalLimiter`] is pure.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::boot::ServedScript;
use crate::conductor::Caller;
use crate::config::ScriptSecrets;
use crate::db::SharedDb;
use crate::model::MacAddr;
use crate::neighbour;

/// The event of a refused script.
pub const REFUSED_EVENT: &str = "baremetal.node.script_refused";

/// At most one report per client address per this long.
pub const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Client addresses the limiter remembers. When full, those quiet for [`REPORT_EVERY`] are
/// forgotten (with the refusals they had not reported yet); when all were refused within the
/// last minute, refusals of further addresses go unreported.
const MAX_CLIENTS: usize = 4096;

/// The listeners' gate for secrets; shared by the HTTP and TFTP listeners.
#[derive(Debug)]
pub struct ScriptAccess {
    mode: ScriptSecrets,
    events: Option<SharedDb>,
    refusals: Mutex<RefusalLimiter>,
}

impl ScriptAccess {
    /// `events`: where refusals are recorded (none: logged only).
    pub fn new(mode: ScriptSecrets, events: Option<SharedDb>) -> Arc<ScriptAccess> {
        Arc::new(ScriptAccess { mode, events, refusals: Mutex::default() })
    }

    pub fn mode(&self) -> ScriptSecrets {
        self.mode
    }

    /// Whether `script` (asked for as `requested`) may go to `client`; a refusal is reported.
    /// `via`: `http` or `tftp`.
    pub async fn allows(
        &self,
        script: &ServedScript,
        requested: MacAddr,
        client: IpAddr,
        via: &'static str,
    ) -> bool {
        if !script.secret || self.mode == ScriptSecrets::Any {
            return true;
        }
        // A dual-stack listener's IPv4 clients, as IPv4 in the log, the event and the limiter.
        let client = client.to_canonical();
        let client_mac = neighbour::resolve(client, neighbour::RESOLVE_WAIT).await;
        if script.served_to(client_mac) {
            return true;
        }
        self.refused(script, requested, client, client_mac, via).await;
        false
    }

    /// For an unknown MAC: the same neighbour look-up a node's secret script costs, its answer
    /// unused, so that the time to answer does not tell nodes from unknown MACs.
    pub async fn as_if_checked(&self, client: IpAddr) {
        if self.mode == ScriptSecrets::Neighbour {
            let _ = neighbour::resolve(client, neighbour::RESOLVE_WAIT).await;
        }
    }

    /// Who calls a deploy endpoint, for the conductor's neighbour check.
    pub async fn caller(&self, client: IpAddr) -> Caller {
        match self.mode {
            ScriptSecrets::Any => Caller::Any,
            ScriptSecrets::Neighbour => {
                Caller::Neighbour(neighbour::resolve(client, neighbour::RESOLVE_WAIT).await)
            }
        }
    }

    async fn refused(
        &self,
        script: &ServedScript,
        requested: MacAddr,
        client: IpAddr,
        client_mac: Option<MacAddr>,
        via: &'static str,
    ) {
        let due = match self.refusals.lock() {
            Ok(mut limiter) => limiter.refuse(client, Instant::now()),
            Err(_) => None,
        };
        let Some(count) = due else { return };
        let node = script.node.as_deref().unwrap_or("-");
        let shown_mac = client_mac.map_or_else(|| "-".to_owned(), |m| m.to_string());
        tracing::warn!(%client, client_mac = shown_mac, mac = %requested, node, via, count,
            "script refused: it carries a secret and the client is not that node (neighbour table)");
        let (Some(events), Some(uuid)) = (&self.events, &script.node_uuid) else { return };
        let payload = json!({"node_uuid": uuid, "node_name": script.node, "client": client.to_string(),
            "client_mac": client_mac.map(|m| m.to_string()), "mac": requested.to_string(),
            "via": via, "count": count});
        // Written after the answer: the boot path never waits on SQLite.
        let (events, uuid) = (events.clone(), uuid.clone());
        tokio::spawn(async move {
            events.record_event(&uuid, REFUSED_EVENT.to_owned(), "warning", payload).await;
        });
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
