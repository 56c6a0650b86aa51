//! The kernel's neighbour table: which MAC the host at a client's address has, on a directly
//! attached network. The boot listeners ask it before they serve a script that carries a
//! secret, and the deploy endpoints before they hand out or take the deploy token.
//!
//! IPv4 from `/proc/self/net/arp`: the table of this process's network namespace (`/proc/net`
//! is hidden under systemd's `ProcSubset=pid`, `/proc/self/net` is not). IPv6 from a dump of
//! rtnetlink's `RTM_GETNEIGH` (the unit allows `AF_NETLINK` for it). Loopback clients are never
//! in a table.
//!
//! [`parse_arp`] and [`parse_neigh_dump`] are pure; [`lookup`] reads the table; [`resolve`] also
//! provokes resolution (a zero-length datagram to the client's discard port, 9/udp) when there
//! is no complete entry yet, and reads again for a while. Nothing is cached: every request reads
//! the table.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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

/// The client's MAC from the table as it is now; `None` for loopback and unknown clients.
pub async fn lookup(ip: IpAddr) -> Option<MacAddr> {
    match neighbour_address(ip)? {
        IpAddr::V4(v4) => {
            let text = tokio::fs::read_to_string(ARP_TABLE)
                .await
                .inspect_err(|e| tracing::warn!(table = ARP_TABLE, error = %e, "cannot read the neighbour table"))
                .ok()?;
            single_mac(&parse_arp(&text, v4))
        }
        IpAddr::V6(v6) => {
            let macs = tokio::task::spawn_blocking(move || ipv6_neighbours(v6))
                .await
                .ok()?
                .inspect_err(|e| tracing::warn!(error = %e, "cannot dump the IPv6 neighbour table (rtnetlink)"))
                .ok()?;
            single_mac(&macs)
        }
    }
}

/// [`lookup`]; without a complete entry, provokes resolution without sending anything of
/// value (a zero-length datagram to the client's discard port) and reads again for up to
/// `wait`. A UDP client that already knew our MAC leaves no entry until we send it something.
pub async fn resolve(ip: IpAddr, wait: Duration) -> Option<MacAddr> {
    if let Some(mac) = lookup(ip).await {
        return Some(mac);
    }
    provoke(neighbour_address(ip)?).await;
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        if let Some(mac) = lookup(ip).await {
            return Some(mac);
        }
    }
    None
}

/// The address of a client that may be in a table: IPv4-mapped IPv6 addresses (a dual-stack
/// listener's) are unmapped; loopback, unspecified and broadcast addresses never are.
fn neighbour_address(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => {
            neighbour_address(IpAddr::V4(v6.to_ipv4_mapped()?))
        }
        IpAddr::V4(v4) if v4.is_loopback() || v4.is_unspecified() || v4.is_broadcast() => None,
        IpAddr::V6(v6) if v6.is_loopback() || v6.is_unspecified() || v6.is_multicast() => None,
        other => Some(other),
    }
}

async fn provoke(ip: IpAddr) {
    let sent = async {
        let any: IpAddr = match ip {
            IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let socket = tokio::net::UdpSocket::bind(SocketAddr::new(any, 0)).await?;
        socket.send_to(&[], SocketAddr::new(ip, 9)).await
    };
    if let Err(e) = sent.await {
        tracing::debug!(client = %ip, error = %e, "cannot provoke neighbour resolution");
    }
}

// rtnetlink, as much of it as a neighbour dump needs (linux/netlink.h, linux/rtnetlink.h,
// linux/neighbour.h).
const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NDMSG: usize = 12;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const AF_INET6: u8 = 10;
/// `NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_NOARP | NUD_PERMANENT`: a MAC is
/// known (`ip neigh` shows it); not `NUD_INCOMPLETE` nor `NUD_FAILED`.
const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// The request for a dump of the IPv6 neighbour table.
fn neigh_dump_request(seq: u32) -> Vec<u8> {
    let len = (NLMSG_HDR + NDMSG) as u32;
    let mut message = Vec::with_capacity(len as usize);
    message.extend_from_slice(&len.to_ne_bytes());
    message.extend_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    message.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    message.extend_from_slice(&seq.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(&[AF_INET6, 0, 0, 0]);
    message.extend_from_slice(&[0; NDMSG - 4]);
    message
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// One datagram of a `RTM_GETNEIGH` dump: the MACs of the complete IPv6 entries for `ip`, and
/// whether the dump ended (`NLMSG_DONE`, an error, or bytes that do not parse).
pub fn parse_neigh_dump(datagram: &[u8], ip: Ipv6Addr) -> (Vec<MacAddr>, bool) {
    let mut macs = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDR <= datagram.len() {
        let Some(len) = datagram[at..at + 4].try_into().ok().map(u32::from_ne_bytes) else {
            return (macs, true);
        };
        let len = len as usize;
        let kind = u16_at(datagram, at + 4).unwrap_or(NLMSG_ERROR);
        if len < NLMSG_HDR || at + len > datagram.len() || matches!(kind, NLMSG_DONE | NLMSG_ERROR)
        {
            return (macs, true);
        }
        if kind == RTM_NEWNEIGH {
            macs.extend(neighbour_entry(&datagram[at + NLMSG_HDR..at + len], ip));
        }
        at += align4(len);
    }
    (macs, false)
}

/// The MAC of one `ndmsg` and its attributes, when it is a complete entry for `ip`.
fn neighbour_entry(body: &[u8], ip: Ipv6Addr) -> Option<MacAddr> {
    let (&family, state) = (body.first()?, u16_at(body, 8)?);
    if family != AF_INET6 || state & NUD_VALID == 0 {
        return None;
    }
    let (mut dst, mut lladdr) = (None, None);
    let mut at = NDMSG;
    while at + 4 <= body.len() {
        let (len, kind) = (u16_at(body, at)? as usize, u16_at(body, at + 2)?);
        let data = body.get(at + 4..at + len.max(4))?;
        match kind {
            NDA_DST => dst = <[u8; 16]>::try_from(data).ok().map(Ipv6Addr::from),
            NDA_LLADDR => lladdr = <[u8; 6]>::try_from(data).ok().map(MacAddr),
            _ => {}
        }
        at += align4(len.max(4));
    }
    (dst? == ip).then_some(lladdr?).filter(|mac| *mac != MacAddr([0; 6]))
}

/// Dumps the IPv6 neighbour table over rtnetlink (blocking, bounded by a receive timeout).
fn ipv6_neighbours(ip: Ipv6Addr) -> std::io::Result<Vec<MacAddr>> {
    use std::os::fd::AsRawFd;

    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send,
        setsockopt, socket, sockopt,
    };
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    setsockopt(&fd, sockopt::ReceiveTimeout, &nix::sys::time::TimeVal::new(1, 0))?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    send(fd.as_raw_fd(), &neigh_dump_request(1), MsgFlags::empty())?;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut macs = Vec::new();
    loop {
        let n = recv(fd.as_raw_fd(), &mut buffer, MsgFlags::empty())?;
        let (found, done) = parse_neigh_dump(&buffer[..n], ip);
        macs.extend(found);
        if done || n == 0 {
            return Ok(macs);
        }
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
    fn loopback_clients_are_never_looked_up_and_mapped_ones_are_unmapped() {
        let address = |text: &str| neighbour_address(text.parse().unwrap());
        assert_eq!(address("10.0.0.1"), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(address("::ffff:10.0.0.1"), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(address("fd00::2"), Some("fd00::2".parse().unwrap()));
        for never in ["127.0.0.1", "::ffff:127.0.0.1", "::1", "0.0.0.0", "::", "ff02::1"] {
            assert_eq!(address(never), None, "{never}");
        }
    }

    /// An `RTM_NEWNEIGH` message as the kernel sends it.
    fn neigh_message(family: u8, state: u16, dst: &[u8], lladdr: Option<[u8; 6]>) -> Vec<u8> {
        let mut body = vec![family, 0, 0, 0];
        body.extend_from_slice(&2i32.to_ne_bytes());
        body.extend_from_slice(&state.to_ne_bytes());
        body.extend_from_slice(&[0, 1]);
        let mut attr = |kind: u16, data: &[u8]| {
            body.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
            body.extend_from_slice(&kind.to_ne_bytes());
            body.extend_from_slice(data);
            body.resize(align4(body.len()), 0);
        };
        attr(NDA_DST, dst);
        if let Some(mac) = lladdr {
            attr(NDA_LLADDR, &mac);
        }
        attr(8, &7u32.to_ne_bytes()); // NDA_PROBES: skipped
        let mut message = Vec::new();
        message.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        message.extend_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        message.extend_from_slice(&2u16.to_ne_bytes());
        message.extend_from_slice(&[0; 8]);
        message.extend_from_slice(&body);
        message
    }

    fn done_message() -> Vec<u8> {
        let mut message = (20u32).to_ne_bytes().to_vec();
        message.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        message.extend_from_slice(&[0; 14]);
        message
    }

    #[test]
    fn neighbour_dumps_give_the_complete_entries_for_the_address() {
        let ip: Ipv6Addr = "fd13::2".parse().unwrap();
        let other: Ipv6Addr = "fd13::3".parse().unwrap();
        let node = [0x52, 0x54, 0, 0x4e, 0, 1];
        let mut datagram = neigh_message(AF_INET6, 0x02, &ip.octets(), Some(node));
        datagram.extend(neigh_message(AF_INET6, 0x04, &other.octets(), Some([2; 6])));
        datagram.extend(neigh_message(AF_INET6, 0x01, &ip.octets(), Some([3; 6]))); // incomplete
        datagram.extend(neigh_message(AF_INET6, 0x20, &ip.octets(), Some([4; 6]))); // failed
        datagram.extend(neigh_message(AF_INET6, 0x80, &ip.octets(), None)); // no MAC
        datagram.extend(neigh_message(2, 0x02, &[10, 0, 0, 2], Some([5; 6]))); // IPv4
        assert_eq!(parse_neigh_dump(&datagram, ip), (vec![MacAddr(node)], false));
        assert_eq!(parse_neigh_dump(&datagram, other), (vec![MacAddr([2; 6])], false));
        datagram.extend(done_message());
        assert_eq!(parse_neigh_dump(&datagram, ip), (vec![MacAddr(node)], true));
        // Truncated or empty datagrams end the dump rather than loop.
        assert!(parse_neigh_dump(&datagram[..datagram.len() - 3], ip).1);
        assert_eq!(parse_neigh_dump(&[], ip), (vec![], false));
        let stuck = [0u8; 16];
        assert_eq!(parse_neigh_dump(&stuck, ip), (vec![], true));
    }

    #[test]
    fn the_ipv6_table_of_this_namespace_can_be_dumped() {
        // Nothing to find for a documentation address, but the dump itself must work.
        assert_eq!(ipv6_neighbours("2001:db8::1".parse().unwrap()).unwrap(), vec![]);
    }
}
