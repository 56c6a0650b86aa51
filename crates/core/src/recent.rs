//! The recent boot requests (HTTP and TFTP script hits, ProxyDHCP replies), for the admin page:
//! a bounded ring in memory, fed by `http::boot`, `tftp_files` and `dhcp`, read by `admin`. For
//! people only: nothing here authorises a script.
//!
//! The boot path pays one brief uncontended lock and a small push per hit (no I/O, no
//! allocation beyond the node's name); the ring drops its oldest entry when full.

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
    /// What was served: `generic`, `default`, `script`, `unknown`, or `refused` (a script with a
    /// secret asked for by a client that is not its node: it got what `unknown` gets); for
    /// `dhcp`, `offer` (a node's port was answered) or `unknown`.
    pub what: &'static str,
}

/// The ring of recent hits.
#[derive(Debug, Default)]
pub struct RecentBoots {
    hits: Mutex<VecDeque<BootHit>>,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl RecentBoots {
    /// Records a hit (now).
    pub fn record(
        &self,
        via: &'static str,
        client: IpAddr,
        mac: Option<MacAddr>,
        node: Option<&str>,
        what: &'static str,
    ) {
        let hit = BootHit { at: now(), via, client, mac, node: node.map(str::to_owned), what };
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
            ring.record("http", client, None, None, "generic");
        }
        ring.record("tftp", client, None, Some("n"), "script");
        let hits = ring.newest_first();
        assert_eq!(hits.len(), CAPACITY);
        assert_eq!(hits[0].via, "tftp");
        assert_eq!(hits[0].node.as_deref(), Some("n"));
    }
}
