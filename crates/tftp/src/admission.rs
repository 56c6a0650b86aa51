//! Who gets a transfer slot, sans-io: the counts of transfers in, a verdict out.
//!
//! Each transfer holds a socket until it ends, so the table is capped in all and per client
//! address. A full table alone must not shut out a client: several flooding addresses would
//! otherwise keep every other client busy. So when it is full, the client holding the most
//! open transfers yields first: a request from an address that holds fewer (by two or more)
//! cancels that client's newest transfer and takes its place; the heaviest holders, and clients
//! as heavy as them, get "server busy". A client with one transfer is never made to yield to a
//! new one, and the table converges on an even share between the addresses that ask.

use std::collections::HashMap;
use std::net::IpAddr;

/// What to do with a read request from a client that has no transfer open from the same port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A slot is free: start it.
    Start,
    /// The table is full: cancel the newest transfer of this (the heaviest) client, then start.
    Evict(IpAddr),
    /// "server busy".
    Busy,
}

/// The counts the decision reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    /// Transfer tasks still running, cancelled ones included (they hold a socket until they end).
    pub(crate) running: usize,
    /// Of those, the requesting address's.
    pub(crate) requester_running: usize,
    /// Transfers open (not cancelled) for the requesting address.
    pub(crate) requester_open: usize,
    /// The address with the most open transfers, and how many.
    pub(crate) heaviest: Option<(IpAddr, usize)>,
}

/// The verdict for a new request under `max_transfers` in all and `max_per_client` per address.
pub(crate) fn admit(load: Load, max_transfers: usize, max_per_client: usize) -> Admission {
    if load.requester_running >= max_per_client {
        return Admission::Busy;
    }
    if load.running < max_transfers {
        return Admission::Start;
    }
    match load.heaviest {
        Some((heaviest, held)) if held > load.requester_open + 1 => Admission::Evict(heaviest),
        _ => Admission::Busy,
    }
}

/// The address holding the most of `open` (one entry per open transfer), ties to the lowest
/// address, so the choice does not depend on a map's order.
pub(crate) fn heaviest(open: impl Iterator<Item = IpAddr>) -> Option<(IpAddr, usize)> {
    let mut counts: HashMap<IpAddr, usize> = HashMap::new();
    for ip in open {
        *counts.entry(ip).or_default() += 1;
    }
    counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    fn load(running: usize, mine: usize, heaviest: Option<(IpAddr, usize)>) -> Load {
        Load { running, requester_running: mine, requester_open: mine, heaviest }
    }

    #[test]
    fn a_free_slot_is_taken_within_the_per_client_cap() {
        assert_eq!(admit(load(0, 0, None), 200, 32), Admission::Start);
        assert_eq!(admit(load(199, 31, Some((ip(2), 31))), 200, 32), Admission::Start);
        assert_eq!(admit(load(10, 32, Some((ip(2), 32))), 200, 32), Admission::Busy);
        // Cancelled transfers still running count against the per-client cap too.
        let closing =
            Load { running: 10, requester_running: 32, requester_open: 3, heaviest: None };
        assert_eq!(admit(closing, 200, 32), Admission::Busy);
    }

    #[test]
    fn a_full_table_makes_the_heaviest_client_yield_to_a_lighter_one() {
        assert_eq!(admit(load(200, 0, Some((ip(2), 13))), 200, 32), Admission::Evict(ip(2)));
        assert_eq!(admit(load(200, 11, Some((ip(2), 13))), 200, 32), Admission::Evict(ip(2)));
        // As heavy, or one short: busy (no churn between equals).
        assert_eq!(admit(load(200, 12, Some((ip(2), 13))), 200, 32), Admission::Busy);
        assert_eq!(admit(load(200, 13, Some((ip(2), 13))), 200, 32), Admission::Busy);
        // A client with one transfer never yields to a newcomer.
        assert_eq!(admit(load(1, 0, Some((ip(2), 1))), 1, 32), Admission::Busy);
        assert_eq!(admit(load(200, 0, None), 200, 32), Admission::Busy);
    }

    #[test]
    fn the_heaviest_is_the_most_open_ties_to_the_lowest_address() {
        assert_eq!(heaviest(std::iter::empty()), None);
        let open = [ip(5), ip(3), ip(5), ip(3), ip(9)];
        assert_eq!(heaviest(open.into_iter()), Some((ip(3), 2)));
        assert_eq!(heaviest([ip(9), ip(9), ip(3)].into_iter()), Some((ip(9), 2)));
    }

    /// 16 addresses asking as fast as they can, then one more client: it always gets a slot,
    /// and the flooders end with an even share.
    #[test]
    fn sixteen_flooders_cannot_push_out_a_one_request_client() {
        let max = 200;
        let mut open: Vec<(IpAddr, u64)> = Vec::new();
        let mut seq = 0;
        for round in 0..1000 {
            let requester = ip(2 + (round % 16) as u8);
            let mine = open.iter().filter(|(a, _)| *a == requester).count();
            let l = load(open.len(), mine, heaviest(open.iter().map(|(a, _)| *a)));
            match admit(l, max, 32) {
                Admission::Start => {}
                Admission::Evict(who) => {
                    let newest = open.iter().enumerate().filter(|(_, (a, _))| *a == who);
                    let (at, _) = newest.max_by_key(|(_, (_, s))| *s).unwrap();
                    open.remove(at);
                }
                Admission::Busy => continue,
            }
            seq += 1;
            open.push((requester, seq));
        }
        assert_eq!(open.len(), max);
        let l = load(open.len(), 0, heaviest(open.iter().map(|(a, _)| *a)));
        assert!(matches!(admit(l, max, 32), Admission::Evict(_)), "{l:?}");
        let (_, most) = heaviest(open.iter().map(|(a, _)| *a)).unwrap();
        assert!(most <= max.div_ceil(16) + 1, "uneven: {most}");
    }
}
