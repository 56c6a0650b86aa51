//! The kernel's neighbour table: which MAC the host at a client's address has, on a directly
//! attached network. The boot listeners ask it before they serve a script that carries a
//! secret, and the deploy endpoints before they hand out or take the deploy token.
//!
//! IPv4 only, read from `/proc/self/net/arp`: the table of this process's network namespace
//! (`/proc/net` is hidden under systemd's `ProcSubset=pid`, `/proc/self/net` is not). IPv6
//! neighbours (rtnetlink `RTM_GETNEIGH`) are not read: an IPv6 client is never found, so under
//! `[boot] script_secrets = "neighbour"` it gets no secret (a documented limitation).
//!
//! [`parse_arp`] is pure; [`lookup`] reads the table; [`resolve`] also provokes resolution
//! (a zero-length datagram to the client's discard port, 9/udp) when there is no complete
//! entry yet, and reads again for a while. Nothing is cached: every request reads the table.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::model::MacAddr;

/// The IPv4 neighbour table of this process's network namespace.
pub const ARP_TABLE: &str = "/proc/self/net/arp";

/// How long [`resolve`] waits for an entry after provoking resolution.
pub const RESOLVE_WAIT: Duration = Duration::from_secs(1);

/// `ATF_COM` in the table's flags: the entry is complete (a MAC is known).
const ATF_COM: u32 = 0x2;

/// How often [`resolve`] reads the table again while it waits.
const POLL: Duration = Duration::from_millis(20);

/// The MACs of the complete entries for `ip` in the text of `/proc/self/net/arp` (one per
/// interface that has one). Lines that do not parse are skipped.
pub fn parse_arp(text: &str, ip: Ipv4Addr) -> Vec<MacAddr> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address: Ipv4Addr = fields.next()?.parse().ok()?;
            let _hw_type = fields.next()?;
            let flags = u32::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
            let mac: MacAddr = fields.next()?.parse().ok()?;
            (address == ip && flags & ATF_COM != 0 && mac != MacAddr([0; 6])).then_some(mac)
        })
        .collect()
}

/// The one MAC the complete entries for `ip` agree on: none when there is no entry, or when
/// entries on several interfaces name different MACs (the client cannot be told apart).
pub fn single_mac(macs: &[MacAddr]) -> Option<MacAddr> {
    let first = *macs.first()?;
    macs.iter().all(|mac| *mac == first).then_some(first)
}

/// The client's MAC from the table as it is now; `None` for loopback, IPv6 and unknown clients.
pub async fn lookup(ip: IpAddr) -> Option<MacAddr> {
    let ip = on_link_ipv4(ip)?;
    let text = tokio::fs::read_to_string(ARP_TABLE)
        .await
        .inspect_err(
            |e| tracing::warn!(table = ARP_TABLE, error = %e, "cannot read the neighbour table"),
        )
        .ok()?;
    single_mac(&parse_arp(&text, ip))
}

/// [`lookup`]; without a complete entry, provokes resolution without sending anything of
/// value (a zero-length datagram to the client's discard port) and reads again for up to
/// `wait`. A UDP client that already knew our MAC leaves no entry until we send it something.
pub async fn resolve(ip: IpAddr, wait: Duration) -> Option<MacAddr> {
    if let Some(mac) = lookup(ip).await {
        return Some(mac);
    }
    let v4 = on_link_ipv4(ip)?;
    provoke(v4).await;
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        if let Some(mac) = lookup(ip).await {
            return Some(mac);
        }
    }
    None
}

/// The IPv4 address of a client that may be in the table: IPv4-mapped IPv6 addresses (a
/// dual-stack listener's) are unmapped; loopback and unspecified addresses never are.
fn on_link_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    let v4 = match ip {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => v6.to_ipv4_mapped()?,
    };
    (!v4.is_loopback() && !v4.is_unspecified() && !v4.is_broadcast()).then_some(v4)
}

async fn provoke(ip: Ipv4Addr) {
    let sent = async {
        let socket =
            tokio::net::UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))).await?;
        socket.send_to(&[], SocketAddr::from((ip, 9))).await
    };
    if let Err(e) = sent.await {
        tracing::debug!(client = %ip, error = %e, "cannot provoke neighbour resolution");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
IP address       HW type     Flags       HW address            Mask     Device
10.99.0.2        0x1         0x2         52:54:00:12:34:56     *        br0
10.99.0.3        0x1         0x0         00:00:00:00:00:00     *        br0
10.99.0.4        0x1         0x6         52:54:00:aa:bb:cc     *        br0
10.99.0.5        0x1         0x2         52:54:00:00:00:05     *        br0
10.99.0.5        0x1         0x2         52:54:00:00:00:06     *        eth1
garbage line
";

    fn mac(text: &str) -> MacAddr {
        text.parse().unwrap()
    }

    #[test]
    fn complete_entries_give_their_mac() {
        assert_eq!(parse_arp(TABLE, "10.99.0.2".parse().unwrap()), [mac("52:54:00:12:34:56")]);
        // Permanent (ATF_PERM | ATF_COM) entries are complete too.
        assert_eq!(parse_arp(TABLE, "10.99.0.4".parse().unwrap()), [mac("52:54:00:aa:bb:cc")]);
    }

    #[test]
    fn incomplete_and_absent_entries_give_nothing() {
        assert!(parse_arp(TABLE, "10.99.0.3".parse().unwrap()).is_empty());
        assert!(parse_arp(TABLE, "10.99.0.9".parse().unwrap()).is_empty());
        assert!(parse_arp("", "10.99.0.2".parse().unwrap()).is_empty());
        // The header line is never an entry.
        assert!(parse_arp(TABLE, "0.0.0.0".parse().unwrap()).is_empty());
    }

    #[test]
    fn entries_that_disagree_name_nobody() {
        let macs = parse_arp(TABLE, "10.99.0.5".parse().unwrap());
        assert_eq!(macs.len(), 2);
        assert_eq!(single_mac(&macs), None);
        assert_eq!(single_mac(&[mac("52:54:00:00:00:05")]), Some(mac("52:54:00:00:00:05")));
        assert_eq!(single_mac(&[]), None);
    }

    #[test]
    fn only_on_link_ipv4_clients_are_looked_up() {
        assert_eq!(on_link_ipv4("10.0.0.1".parse().unwrap()), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(
            on_link_ipv4("::ffff:10.0.0.1".parse().unwrap()),
            Some(Ipv4Addr::new(10, 0, 0, 1))
        );
        assert_eq!(on_link_ipv4("127.0.0.1".parse().unwrap()), None);
        assert_eq!(on_link_ipv4("::1".parse().unwrap()), None);
        assert_eq!(on_link_ipv4("fd00::2".parse().unwrap()), None);
    }
}
