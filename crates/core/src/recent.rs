//! The recent boot requests (HTTP and TFTP script hits, ProxyDHCP replies) with their result
//! ([`BootResult`]: served, default script, refused and why, unknown MAC), for the admin page:
//! a bounded ring in memory, fed by `http::boot`, `tftp_files` and `dhcp`, read by `admin`. For
//! people only: nothing here authorises a script.
//!
//! The boot path pays one brief uncontended lock and a small push per hit (no I/O, no
//! allocation beyond the node's name); the ring drops its oldest entry when full. A listener
//! set at start ([`RecentBoots::with_listener`]: the admin page's live stream) is handed each
//! hit as it is recorded, after the lock; it must not block (the admin's is a bounded channel's
//! send that never waits).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::model::MacAddr;

/// How many hits are kept.
pub const CAPACITY: usize = 512;

/// One boot request.
#[derive(Debug, Clone)]
pub struct BootHit {
    /// Unix seconds.
    pub at: i64,
    /// `http`, `tftp` or `dhcp`.
    pub via: &'static str,
    pub client: IpAddr,
    /// The MAC asked for (none for the generic and default scripts).
    pub mac: Option<MacAddr>,
    /// The node that MAC belongs to; none for an unknown MAC.
    pub node: Option<String>,
    /// What the request got.
    pub result: BootResult,
}

/// What a boot request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootResult {
    /// The generic `boot.ipxe`.
    Generic,
    /// The default script, asked for by its name (`default.ipxe`).
    DefaultAsked,
    /// The node's own script, of this scenario (`iscsi`, `nfs-root`, `none`...).
    Served(&'static str),
    /// A known node got the default script (the snapshot's scenario: `not-deployed`, or
    /// `invalid` when its volume does not validate).
    DefaultScript(&'static str),
    /// A script with a secret refused to this client, and why: it got what an unknown MAC gets.
    Refused(&'static str),
    /// A MAC that is no node's port.
    UnknownMac,
    /// The ProxyDHCP answered a node's port.
    Offer,
}

impl BootResult {
    /// The result in a word or two, for the admin page: `served`, `default script`, `refused`,
    /// `unknown MAC`, `generic`, `default`, `offer`.
    pub fn word(self) -> &'static str {
        match self {
            BootResult::Generic => "generic",
            BootResult::DefaultAsked => "default",
            BootResult::Served(_) => "served",
            BootResult::DefaultScript(_) => "default script",
            BootResult::Refused(_) => "refused",
            BootResult::UnknownMac => "unknown MAC",
            BootResult::Offer => "offer",
        }
    }

    /// What goes with the word: the scenario served, or why a script was refused.
    pub fn detail(self) -> Option<&'static str> {
        match self {
            BootResult::Served(s) | BootResult::DefaultScript(s) | BootResult::Refused(s) => {
                Some(s)
            }
            _ => None,
        }
    }

    /// Whether this was not what the node should get (a refusal, or the default script).
    pub fn failed(self) -> bool {
        matches!(self, BootResult::Refused(_) | BootResult::DefaultScript("invalid"))
    }
}

/// What is handed each hit as it is recorded.
pub type BootListener = Box<dyn Fn(&BootHit) + Send + Sync>;

/// The ring of recent hits.
#[derive(Default)]
pub struct RecentBoots {
    hits: Mutex<VecDeque<BootHit>>,
    listener: Option<BootListener>,
}

impl std::fmt::Debug for RecentBoots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentBoots").field("listener", &self.listener.is_some()).finish()
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl RecentBoots {
    /// A ring whose every hit is also handed to `listener` as it is recorded.
    pub fn with_listener(listener: BootListener) -> RecentBoots {
        RecentBoots { hits: Mutex::default(), listener: Some(listener) }
    }

    /// Records a hit (now).
    pub fn record(
        &self,
        via: &'static str,
        client: IpAddr,
        mac: Option<MacAddr>,
        node: Option<&str>,
        result: BootResult,
    ) {
        let hit = BootHit { at: now(), via, client, mac, node: node.map(str::to_owned), result };
        if let Some(listener) = &self.listener {
            listener(&hit);
        }
        let mut hits = self.hits.lock().unwrap_or_else(|p| p.into_inner());
        if hits.len() >= CAPACITY {
            hits.pop_front();
        }
        hits.push_back(hit);
    }

    /// Every hit kept, newest first.
    pub fn newest_first(&self) -> Vec<BootHit> {
        let hits = self.hits.lock().unwrap_or_else(|p| p.into_inner());
        hits.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_hits() {
        let ring = RecentBoots::default();
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..CAPACITY + 3 {
            ring.record("http", client, None, None, BootResult::Generic);
        }
        ring.record("tftp", client, None, Some("n"), BootResult::Refused("outside a boot window"));
        let hits = ring.newest_first();
        assert_eq!(hits.len(), CAPACITY);
        assert_eq!(hits[0].via, "tftp");
        assert_eq!(hits[0].node.as_deref(), Some("n"));
        assert_eq!(hits[0].result.word(), "refused");
        assert_eq!(hits[0].result.detail(), Some("outside a boot window"));
        assert!(hits[0].result.failed() && !hits[1].result.failed());
    }

    #[test]
    fn the_listener_hears_every_hit() {
        let heard = std::sync::Arc::new(Mutex::new(Vec::new()));
        let ear = std::sync::Arc::clone(&heard);
        let ring = RecentBoots::with_listener(Box::new(move |hit| {
            ear.lock().unwrap().push(hit.result.word());
        }));
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        ring.record("http", client, None, None, BootResult::UnknownMac);
        ring.record("tftp", client, None, Some("n"), BootResult::Served("iscsi"));
        assert_eq!(*heard.lock().unwrap(), ["unknown MAC", "served"]);
        assert_eq!(ring.newest_first().len(), 2);
    }
}
