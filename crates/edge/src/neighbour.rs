//! The kernel's neighbour table: which MAC the host at a client's address has, on a directly
//! attached network, at the kernel's cost. The boot listeners ask it before they serve a
//! script that carries a secret, the deploy endpoints before they hand out or take the deploy
//! token, and `boot_window` when it looks for a second host claiming a node's MAC.
//!
//! [`Neighbours`] keeps a copy of the table of this process's network namespace, IPv4 and IPv6
//! alike: one rtnetlink dump (`RTM_GETNEIGH`) at start, then the kernel's own `RTM_NEWNEIGH` /
//! `RTM_DELNEIGH` notifications (the `RTNLGRP_NEIGH` group), read by one thread. A look-up is a
//! hash look-up under a read lock: no read of the whole table per request, no trip through the
//! blocking pool. When the kernel drops notifications (`ENOBUFS`, a socket that overflowed),
//! the thread dumps the table again and swaps the copy whole.
//!
//! [`Neighbours::resolve`] also provokes resolution (a zero-length datagram to the client's
//! discard port, 9/udp) when there is no complete entry yet, and waits for the kernel's
//! notification, up to a deadline; at most [`MAX_RESOLVING`] resolutions are in flight, the
//! ones past it are answered "no MAC" at once and counted ([`Neighbours::overflowed`]).
//! [`Neighbours::answers_at`] asks whether a host still answers at an address.
//!
//! [`parse_messages`] and [`single_mac`] are pure; the socket is at the edge. Loopback clients
//! are never in a table.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use bootvol_core::model::MacAddr;

/// How long [`Neighbours::resolve`] waits for an entry after provoking resolution.
pub const RESOLVE_WAIT: Duration = Duration::from_secs(1);

/// Resolutions in flight at once; past it a look-up is answered "no MAC" at once.
pub const MAX_RESOLVING: usize = 32;

/// How long [`Neighbours::answers_at`] waits for a host to answer.
pub const ANSWER_WAIT: Duration = Duration::from_millis(500);

/// One entry of the table: the interface, the state (`NUD_*`) and the MAC, if known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub ifindex: i32,
    pub state: u16,
    pub mac: Option<MacAddr>,
}

impl Entry {
    /// A MAC is known for it (`ip neigh` shows one), not incomplete nor failed.
    fn complete_mac(&self) -> Option<MacAddr> {
        (self.state & NUD_VALID != 0).then_some(self.mac?).filter(|mac| *mac != MacAddr([0; 6]))
    }
}

type Table = HashMap<IpAddr, Vec<Entry>>;

/// The copy of the kernel's neighbour table, kept by its notifications.
#[derive(Debug)]
pub struct Neighbours {
    table: RwLock<Table>,
    /// Woken on every change the kernel notifies.
    changed: tokio::sync::Notify,
    resolving: tokio::sync::Semaphore,
    overflowed: Arc<AtomicU64>,
    /// The first dump arrived: until then nothing is known and nothing is claimed to be.
    ready: AtomicBool,
}

impl Neighbours {
    /// Starts the thread that keeps the copy (it ends once the last `Arc` is dropped).
    pub fn start() -> Arc<Neighbours> {
        let neighbours = Arc::new(Neighbours::empty());
        let weak = Arc::downgrade(&neighbours);
        let spawned =
            std::thread::Builder::new().name("neighbours".into()).spawn(move || keep(&weak));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the neighbour table's thread: no client will be known");
        }
        neighbours
    }

    /// A table that knows nobody (and is kept by nobody): for tests and one-off commands.
    pub fn empty() -> Neighbours {
        Neighbours {
            table: RwLock::default(),
            changed: tokio::sync::Notify::new(),
            resolving: tokio::sync::Semaphore::new(MAX_RESOLVING),
            overflowed: Arc::new(AtomicU64::new(0)),
            ready: AtomicBool::new(false),
        }
    }

    /// Whether the first dump has been read.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The client's MAC from the copy as it is now; `None` for loopback and unknown clients,
    /// and when complete entries on several interfaces name different MACs.
    pub fn lookup(&self, ip: IpAddr) -> Option<MacAddr> {
        let ip = neighbour_address(ip)?;
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        let macs: Vec<MacAddr> = table.get(&ip)?.iter().filter_map(Entry::complete_mac).collect();
        single_mac(&macs)
    }

    /// The interface a complete entry for `ip` is on (the one a client came in on), when one
    /// interface alone has it.
    pub fn interface_of(&self, ip: IpAddr) -> Option<i32> {
        let ip = neighbour_address(ip)?;
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        let mut interfaces: Vec<i32> = table
            .get(&ip)?
            .iter()
            .filter(|e| e.complete_mac().is_some())
            .map(|e| e.ifindex)
            .collect();
        interfaces.sort_unstable();
        interfaces.dedup();
        match interfaces.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// The addresses other than `except` whose complete entry names `mac`: other hosts that
    /// claim it, or the address the host had before. A scan of the copy: only asked when a
    /// window opened by a boot sign is claimed.
    pub fn addresses_of(&self, mac: MacAddr, except: IpAddr) -> Vec<IpAddr> {
        let except = except.to_canonical();
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        table
            .iter()
            .filter(|(ip, entries)| {
                **ip != except && entries.iter().any(|e| e.complete_mac() == Some(mac))
            })
            .map(|(ip, _)| *ip)
            .collect()
    }

    /// [`lookup`](Self::lookup); without a complete entry, provokes resolution without sending
    /// anything of value and waits for the kernel's notification for up to `wait`. A UDP client
    /// that already knew our MAC leaves no entry until we send it something. Past
    /// [`MAX_RESOLVING`] resolutions in flight: `None` at once, counted.
    pub async fn resolve(&self, ip: IpAddr, wait: Duration) -> Option<MacAddr> {
        if let Some(mac) = self.lookup(ip) {
            return Some(mac);
        }
        let address = neighbour_address(ip)?;
        let Ok(_permit) = self.resolving.try_acquire() else {
            self.overflowed.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let deadline = tokio::time::Instant::now() + wait;
        let changed = self.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        provoke(address).await;
        loop {
            if let Some(mac) = self.lookup(address) {
                return Some(mac);
            }
            if tokio::time::timeout_at(deadline, changed.as_mut()).await.is_err() {
                return None;
            }
            changed.set(self.changed.notified());
            changed.as_mut().enable();
        }
    }

    /// Whether a host still answers at `ip` with one of `macs` as its neighbour entry: the entry
    /// names one of them, and something at the address answers a TCP connection to its discard
    /// port (a reset or an accept) or a UDP datagram (an ICMP port unreachable) within
    /// [`ANSWER_WAIT`]. Unprivileged: a host that drops both is taken for gone.
    pub async fn answers_at(&self, ip: IpAddr, macs: &[MacAddr]) -> bool {
        if !self.lookup(ip).is_some_and(|mac| macs.contains(&mac)) {
            return false;
        }
        let answered = tokio::time::timeout(ANSWER_WAIT, async {
            tokio::select! {
                tcp = tcp_answers(ip) => tcp || std::future::pending::<bool>().await,
                udp = udp_answers(ip) => udp || std::future::pending::<bool>().await,
            }
        })
        .await
        .unwrap_or(false);
        // The answer went to the entry's MAC: it must still be one of the node's.
        answered && self.lookup(ip).is_some_and(|mac| macs.contains(&mac))
    }

    /// Resolutions refused because [`MAX_RESOLVING`] were in flight.
    pub fn overflowed(&self) -> u64 {
        self.overflowed.load(Ordering::Relaxed)
    }

    /// The counter behind [`overflowed`](Self::overflowed), for the metrics.
    pub fn overflow_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.overflowed)
    }

    /// Applies one message of the kernel's.
    fn apply(table: &mut Table, message: &Message) {
        let entries = table.entry(message.address).or_default();
        entries.retain(|e| e.ifindex != message.entry.ifindex);
        if message.kind == Kind::New {
            entries.push(message.entry);
        }
        if entries.is_empty() {
            table.remove(&message.address);
        }
    }

    /// Inserts an entry as if the kernel had notified it.
    #[cfg(test)]
    fn insert_for_test(&self, ip: IpAddr, mac: MacAddr) {
        let message = Message {
            kind: Kind::New,
            address: ip.to_canonical(),
            entry: Entry { ifindex: 1, state: 0x02, mac: Some(mac) },
        };
        Neighbours::apply(&mut self.table.write().unwrap_or_else(|p| p.into_inner()), &message);
        self.ready.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }
}

async fn tcp_answers(ip: IpAddr) -> bool {
    match tokio::net::TcpStream::connect(SocketAddr::new(ip, 9)).await {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
    }
}

async fn udp_answers(ip: IpAddr) -> bool {
    let socket = match tokio::net::UdpSocket::bind(SocketAddr::new(unspecified(ip), 0)).await {
        Ok(socket) => socket,
        Err(_) => return false,
    };
    if socket.connect(SocketAddr::new(ip, 9)).await.is_err() || socket.send(&[]).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    match socket.recv(&mut buf).await {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
    }
}

fn unspecified(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// The one MAC the complete entries for an address agree on: none when there is no entry, or
/// when entries on several interfaces name different MACs (the client cannot be told apart).
pub fn single_mac(macs: &[MacAddr]) -> Option<MacAddr> {
    let first = *macs.first()?;
    macs.iter().all(|mac| *mac == first).then_some(first)
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
        let socket = tokio::net::UdpSocket::bind(SocketAddr::new(unspecified(ip), 0)).await?;
        socket.send_to(&[], SocketAddr::new(ip, 9)).await
    };
    if let Err(e) = sent.await {
        tracing::debug!(client = %ip, error = %e, "cannot provoke neighbour resolution");
    }
}

// rtnetlink, as much of it as the neighbour table needs (linux/netlink.h, linux/rtnetlink.h,
// linux/neighbour.h).
const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const RTM_GETNEIGH: u16 = 30;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
/// `1 << (RTNLGRP_NEIGH - 1)`: the notifications of neighbour changes.
const RTMGRP_NEIGH: u32 = 0x4;
const NDMSG: usize = 12;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// `NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_NOARP | NUD_PERMANENT`: a MAC is
/// known (`ip neigh` shows it); not `NUD_INCOMPLETE` nor `NUD_FAILED`.
const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// A dump of the whole neighbour table, both families.
fn dump_request(seq: u32) -> Vec<u8> {
    let len = (NLMSG_HDR + NDMSG) as u32;
    let mut message = Vec::with_capacity(len as usize);
    message.extend_from_slice(&len.to_ne_bytes());
    message.extend_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    message.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    message.extend_from_slice(&seq.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(&[0; NDMSG]);
    message
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// A neighbour message: an entry added or changed, or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    New,
    Del,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Message {
    kind: Kind,
    address: IpAddr,
    entry: Entry,
}

/// What one datagram from the kernel holds: the neighbour messages in it, and whether it ends
/// the dump whose sequence number is `dump_seq` (`NLMSG_DONE` or an error for it).
#[derive(Debug, Default, PartialEq, Eq)]
struct Datagram {
    messages: Vec<Message>,
    dump_done: bool,
    /// Bytes that do not parse: the rest of the datagram is skipped.
    malformed: bool,
}

/// Parses a datagram of rtnetlink messages. Total: any bytes give an answer.
fn parse_messages(datagram: &[u8], dump_seq: u32) -> Datagram {
    let mut out = Datagram::default();
    let mut at = 0;
    while at + NLMSG_HDR <= datagram.len() {
        let (Some(len), Some(kind), Some(seq)) =
            (u32_at(datagram, at), u16_at(datagram, at + 4), u32_at(datagram, at + 8))
        else {
            out.malformed = true;
            return out;
        };
        let len = len as usize;
        if len < NLMSG_HDR || at + len > datagram.len() {
            out.malformed = true;
            return out;
        }
        match kind {
            NLMSG_DONE | NLMSG_ERROR if seq == dump_seq => out.dump_done = true,
            RTM_NEWNEIGH | RTM_DELNEIGH => {
                let kind = if kind == RTM_NEWNEIGH { Kind::New } else { Kind::Del };
                if let Some(message) = neighbour_message(kind, &datagram[at + NLMSG_HDR..at + len])
                {
                    out.messages.push(message);
                }
            }
            _ => {}
        }
        at += align4(len);
    }
    out
}

/// One `ndmsg` and its attributes.
fn neighbour_message(kind: Kind, body: &[u8]) -> Option<Message> {
    let family = *body.first()?;
    let ifindex = i32::from_ne_bytes(body.get(4..8)?.try_into().ok()?);
    let state = u16_at(body, 8)?;
    let (mut dst, mut mac) = (None, None);
    let mut at = NDMSG;
    while at + 4 <= body.len() {
        let (len, attr) = (u16_at(body, at)? as usize, u16_at(body, at + 2)?);
        let data = body.get(at + 4..at + len.max(4))?;
        match (attr, family) {
            (NDA_DST, AF_INET) => dst = <[u8; 4]>::try_from(data).ok().map(IpAddr::from),
            (NDA_DST, AF_INET6) => dst = <[u8; 16]>::try_from(data).ok().map(IpAddr::from),
            (NDA_LLADDR, _) => mac = <[u8; 6]>::try_from(data).ok().map(MacAddr),
            _ => {}
        }
        at += align4(len.max(4));
    }
    Some(Message { kind, address: dst?.to_canonical(), entry: Entry { ifindex, state, mac } })
}

/// The thread's loop: open, dump, follow; again after an error, while the table is wanted.
fn keep(neighbours: &Weak<Neighbours>) {
    let mut seq = 0u32;
    while neighbours.strong_count() > 0 {
        seq = seq.wrapping_add(1);
        match follow(neighbours, seq) {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "neighbour table (rtnetlink): reading again");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Dumps the table and follows its notifications, until the table is dropped (`Ok`) or the
/// socket fails (`Err`: the caller opens a new one). `ENOBUFS` (notifications lost) dumps again.
fn follow(neighbours: &Weak<Neighbours>, mut seq: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;

    use nix::errno::Errno;
    use nix::sys::socket::{MsgFlags, recv, send};
    let fd = open_socket()?;
    let mut buffer = vec![0u8; 256 * 1024];
    // The dump in progress: filled from its messages, swapped in whole at its end; the
    // notifications that arrive meanwhile go to both.
    let mut dumping: Option<Table> = None;
    let start_dump = |seq: u32, dumping: &mut Option<Table>| -> std::io::Result<()> {
        send(fd.as_raw_fd(), &dump_request(seq), MsgFlags::empty())?;
        *dumping = Some(Table::new());
        Ok(())
    };
    start_dump(seq, &mut dumping)?;
    loop {
        let n = match recv(fd.as_raw_fd(), &mut buffer, MsgFlags::empty()) {
            Ok(n) => n,
            Err(Errno::EAGAIN | Errno::EINTR) => {
                if neighbours.strong_count() == 0 {
                    return Ok(());
                }
                continue;
            }
            Err(Errno::ENOBUFS) => {
                tracing::debug!("neighbour notifications were lost: dumping the table again");
                seq = seq.wrapping_add(1);
                start_dump(seq, &mut dumping)?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let Some(neighbours) = neighbours.upgrade() else { return Ok(()) };
        neighbours.take(&parse_messages(&buffer[..n], seq), &mut dumping);
    }
}

/// The rtnetlink socket, subscribed to the neighbour notifications.
fn open_socket() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;

    use nix::sys::socket::{
        AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, setsockopt, socket,
        sockopt,
    };
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    // A timeout only so that the thread notices the table was dropped.
    setsockopt(&fd, sockopt::ReceiveTimeout, &nix::sys::time::TimeVal::new(1, 0))?;
    // A large buffer: a boot storm changes thousands of entries at once.
    let _ = setsockopt(&fd, sockopt::RcvBuf, &(4 << 20));
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, RTMGRP_NEIGH))?;
    Ok(fd)
}

impl Neighbours {
    /// Applies one datagram's messages to the copy (and to the dump in progress, if any); at
    /// the dump's end swaps it in whole. Wakes the resolutions waiting when anything changed.
    fn take(&self, datagram: &Datagram, dumping: &mut Option<Table>) {
        {
            let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
            for message in &datagram.messages {
                Neighbours::apply(&mut table, message);
                if let Some(fresh) = dumping.as_mut() {
                    Neighbours::apply(fresh, message);
                }
            }
            if datagram.dump_done
                && let Some(fresh) = dumping.take()
            {
                *table = fresh;
                self.ready.store(true, Ordering::Release);
            }
        }
        if !datagram.messages.is_empty() || datagram.dump_done {
            self.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(text: &str) -> MacAddr {
        text.parse().unwrap()
    }

    #[test]
    fn entries_that_disagree_name_nobody() {
        assert_eq!(single_mac(&[mac("52:54:00:00:00:05")]), Some(mac("52:54:00:00:00:05")));
        assert_eq!(single_mac(&[mac("52:54:00:00:00:05"), mac("52:54:00:00:00:06")]), None);
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

    /// A neighbour message as the kernel sends it.
    fn neigh_message(
        kind: u16,
        family: u8,
        ifindex: i32,
        state: u16,
        dst: &[u8],
        lladdr: Option<[u8; 6]>,
    ) -> Vec<u8> {
        let mut body = vec![family, 0, 0, 0];
        body.extend_from_slice(&ifindex.to_ne_bytes());
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
        message.extend_from_slice(&kind.to_ne_bytes());
        message.extend_from_slice(&2u16.to_ne_bytes());
        message.extend_from_slice(&[0; 8]);
        message.extend_from_slice(&body);
        message
    }

    fn done_message(seq: u32) -> Vec<u8> {
        let mut message = (20u32).to_ne_bytes().to_vec();
        message.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        message.extend_from_slice(&[0; 2]);
        message.extend_from_slice(&seq.to_ne_bytes());
        message.extend_from_slice(&[0; 8]);
        message
    }

    #[test]
    fn notifications_keep_the_copy_of_both_families() {
        let neighbours = Neighbours::empty();
        let v6: Ipv6Addr = "fd13::2".parse().unwrap();
        let node = [0x52, 0x54, 0, 0x4e, 0, 1];
        let mut datagram = neigh_message(RTM_NEWNEIGH, AF_INET6, 2, 0x02, &v6.octets(), Some(node));
        datagram.extend(neigh_message(
            RTM_NEWNEIGH,
            AF_INET,
            2,
            0x04,
            &[10, 0, 0, 2],
            Some([2; 6]),
        ));
        datagram.extend(neigh_message(RTM_NEWNEIGH, AF_INET, 2, 0x01, &[10, 0, 0, 3], None));
        datagram.extend(neigh_message(
            RTM_NEWNEIGH,
            AF_INET,
            2,
            0x20,
            &[10, 0, 0, 4],
            Some([4; 6]),
        ));
        let parsed = parse_messages(&datagram, 7);
        assert_eq!(parsed.messages.len(), 4);
        assert!(!parsed.dump_done && !parsed.malformed);
        let mut table = Table::new();
        for m in &parsed.messages {
            Neighbours::apply(&mut table, m);
        }
        *neighbours.table.write().unwrap() = table;
        assert_eq!(neighbours.lookup(IpAddr::V6(v6)), Some(MacAddr(node)));
        assert_eq!(neighbours.lookup("10.0.0.2".parse().unwrap()), Some(MacAddr([2; 6])));
        assert_eq!(neighbours.lookup("::ffff:10.0.0.2".parse().unwrap()), Some(MacAddr([2; 6])));
        // Incomplete and failed entries name nobody.
        assert_eq!(neighbours.lookup("10.0.0.3".parse().unwrap()), None);
        assert_eq!(neighbours.lookup("10.0.0.4".parse().unwrap()), None);
        // A second interface that disagrees: nobody; removed again: the first.
        let other = neigh_message(RTM_NEWNEIGH, AF_INET, 3, 0x02, &[10, 0, 0, 2], Some([9; 6]));
        let gone = neigh_message(RTM_DELNEIGH, AF_INET, 3, 0x02, &[10, 0, 0, 2], Some([9; 6]));
        for (bytes, want) in [(other, None), (gone, Some(MacAddr([2; 6])))] {
            for m in parse_messages(&bytes, 7).messages {
                Neighbours::apply(&mut neighbours.table.write().unwrap(), &m);
            }
            assert_eq!(neighbours.lookup("10.0.0.2".parse().unwrap()), want);
        }
        // The reverse look-up finds the other addresses naming a MAC.
        assert_eq!(
            neighbours.addresses_of(MacAddr([2; 6]), "10.0.0.9".parse().unwrap()),
            vec!["10.0.0.2".parse::<IpAddr>().unwrap()]
        );
        assert!(neighbours.addresses_of(MacAddr([2; 6]), "10.0.0.2".parse().unwrap()).is_empty());
    }

    #[test]
    fn the_dump_ends_on_its_own_done_and_bad_bytes_never_loop() {
        let mut datagram = done_message(3);
        assert!(!parse_messages(&datagram, 4).dump_done, "another dump's end");
        assert!(parse_messages(&datagram, 3).dump_done);
        datagram.extend(neigh_message(
            RTM_NEWNEIGH,
            AF_INET,
            2,
            0x02,
            &[10, 0, 0, 2],
            Some([2; 6]),
        ));
        assert!(parse_messages(&datagram[..datagram.len() - 3], 3).malformed);
        assert_eq!(parse_messages(&[], 3), Datagram::default());
        assert!(parse_messages(&[0u8; 16], 3).malformed);
        // Attributes that lie about their length are skipped with the message.
        let mut lying = neigh_message(RTM_NEWNEIGH, AF_INET, 2, 0x02, &[10, 0, 0, 2], None);
        let attr_len_at = NLMSG_HDR + NDMSG;
        lying[attr_len_at..attr_len_at + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert!(parse_messages(&lying, 3).messages.is_empty());
    }

    #[test]
    fn resolutions_past_the_bound_are_refused_at_once_and_counted() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let neighbours = Arc::new(Neighbours::empty());
            let held: Vec<_> =
                (0..MAX_RESOLVING).map(|_| neighbours.resolving.try_acquire().unwrap()).collect();
            let started = std::time::Instant::now();
            assert_eq!(neighbours.resolve("192.0.2.1".parse().unwrap(), RESOLVE_WAIT).await, None);
            assert!(started.elapsed() < Duration::from_millis(100));
            assert_eq!(neighbours.overflowed(), 1);
            drop(held);
            // An entry that the kernel notifies while a resolution waits ends the wait.
            let tasks = tokio_util::task::TaskTracker::new();
            let waiting = {
                let neighbours = Arc::clone(&neighbours);
                tasks.spawn(async move {
                    neighbours.resolve("192.0.2.1".parse().unwrap(), Duration::from_secs(5)).await
                })
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
            neighbours.insert_for_test("192.0.2.1".parse().unwrap(), MacAddr([7; 6]));
            let found = tokio::time::timeout(Duration::from_secs(2), waiting).await;
            assert_eq!(found.unwrap().unwrap(), Some(MacAddr([7; 6])));
            tasks.close();
            tasks.wait().await;
        });
    }

    #[test]
    fn the_table_of_this_namespace_is_dumped_and_followed() {
        let neighbours = Neighbours::start();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !neighbours.is_ready() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(neighbours.is_ready(), "no dump of the neighbour table within 5 s");
        assert_eq!(neighbours.lookup("2001:db8::1".parse().unwrap()), None);
    }
}
