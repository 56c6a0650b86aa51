//! The built-in ProxyDHCP (`[dhcp] mode = "proxy"`): answers netboot clients with where to boot
//! from, next to the site's DHCP server, which keeps handing out the addresses.
//!
//! - [`packet`]: the DHCPv4 codec, bytes in and values out (a total parser).
//! - [`proxy`]: the decision, sans-io: a request and plain facts in, the reply and its
//!   destination out (to `giaddr` only from a relay); the reply limits, nodes' MACs on a budget
//!   of their own.
//! - This file, the edge: one normal UDP socket per interface and listen address
//!   (`SO_BROADCAST` + `SO_BINDTODEVICE`, no raw socket), the facts gathered for each request
//!   (the interface's address, whether the MAC is a node's port, whether the arm64 binary
//!   exists, the source address and `[dhcp] relays`), each reply recorded in the recent-boots
//!   ring (for people; it authorises nothing) in one place, `answered`.

pub mod packet;
pub mod proxy;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use arc_swap::ArcSwap;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, SockaddrIn, sockopt};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bootvol_core::boot::BootSnapshot;
use bootvol_core::config::{Config, DhcpAnswer, DhcpMode};
use bootvol_core::model::MacAddr;
use bootvol_core::recent::{BootResult, RecentBoots};
use bootvol_runtime::metrics::{DhcpMessage, DhcpResult, Metrics};
use packet::Packet;
use proxy::{Decision, Destination, Facts, Port, RateLimit, Settings};

/// The arm64 iPXE binary the operator may put in `[tftp] root`.
const ARM64_BINARY: &str = "snponly-arm64.efi";
/// How long an interface's address and the arm64 binary's presence are trusted.
const FACTS_TTL: Duration = Duration::from_secs(5);

/// What every socket shares.
struct Shared {
    settings: Settings,
    http_base: bootvol_runtime::public_url::PublicUrl,
    tftp_root: PathBuf,
    snapshot: Arc<ArcSwap<BootSnapshot>>,
    recent: Arc<RecentBoots>,
    metrics: Arc<Metrics>,
    /// Told of every answer to a node's MAC: a sign that the node starts a boot.
    access: Arc<crate::script_access::ScriptAccess>,
    limit: Mutex<RateLimit>,
    /// `[dhcp] relays`.
    relays: Vec<Ipv4Addr>,
}

/// What the ProxyDHCP reads (the snapshot: which MACs are nodes'; the boot URL) and feeds (the
/// recent-boots ring, the metrics) in the running appliance.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub snapshot: &'a Arc<ArcSwap<BootSnapshot>>,
    pub public_url: &'a bootvol_runtime::public_url::PublicUrl,
    pub recent: &'a Arc<RecentBoots>,
    pub metrics: &'a Arc<Metrics>,
    pub access: &'a Arc<crate::script_access::ScriptAccess>,
}

/// With `[dhcp] mode = "proxy"`, binds a socket per interface and listen address (an error
/// names the one that failed) and spawns a task per socket on `tracker`, answering until
/// `shutdown`. With `mode = "off"`, does nothing.
pub fn start(
    config: &Config,
    inputs: Inputs<'_>,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    liveness: &bootvol_runtime::liveness::Liveness,
) -> Result<()> {
    let Inputs { snapshot, public_url, recent, metrics, access } = inputs;
    let dhcp = &config.dhcp;
    if dhcp.mode == DhcpMode::Off {
        return Ok(());
    }
    let shared = Arc::new(Shared {
        settings: Settings {
            efi_discovery_bypass: dhcp.efi_discovery_bypass,
            known_only: dhcp.answer == DhcpAnswer::Known,
        },
        http_base: public_url.clone(),
        tftp_root: config.tftp.root.clone(),
        snapshot: Arc::clone(snapshot),
        recent: Arc::clone(recent),
        metrics: Arc::clone(metrics),
        access: Arc::clone(access),
        limit: Mutex::new(RateLimit::appliance()),
        relays: dhcp.relays.clone(),
    });
    let mut sockets = Vec::new();
    for interface in &dhcp.interfaces {
        for &listen in &dhcp.listen {
            let SocketAddr::V4(addr) = listen else { bail!("dhcp.listen: {listen} is not IPv4") };
            let socket = bind(interface, addr)
                .with_context(|| format!("binding ProxyDHCP on {interface} {addr}"))?;
            sockets.push((interface.clone(), Port::of(addr.port()), socket));
        }
    }
    for (interface, port, socket) in sockets {
        tracing::info!(%interface, port = socket.local_addr()?.port(), "ProxyDHCP listening");
        let (shared, shutdown) = (Arc::clone(&shared), shutdown.clone());
        let heart = liveness.register(format!("dhcp {interface}:{}", socket.local_addr()?.port()));
        tracker.spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = answer(socket, interface, port, shared, heart) => {}
            }
        });
    }
    Ok(())
}

/// A UDP socket on `addr`, bound to `interface`, allowed to broadcast.
fn bind(interface: &str, addr: SocketAddrV4) -> Result<UdpSocket> {
    let fd: OwnedFd = socket::socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    socket::setsockopt(&fd, sockopt::Broadcast, &true)?;
    socket::setsockopt(&fd, sockopt::BindToDevice, &interface.into())
        .with_context(|| format!("SO_BINDTODEVICE {interface}"))?;
    socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(addr))?;
    Ok(UdpSocket::from_std(std::net::UdpSocket::from(fd))?)
}

/// The first IPv4 address of `interface`.
fn interface_address(interface: &str) -> Option<Ipv4Addr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|ifa| {
        let addr = ifa.address?;
        (ifa.interface_name == interface).then(|| addr.as_sockaddr_in().map(|a| a.ip()))?
    })
}

/// Receives and answers on one socket, for ever (the caller stops it at shutdown), answering
/// `heart`'s ticks between two datagrams.
async fn answer(
    socket: UdpSocket,
    interface: String,
    port: Port,
    shared: Arc<Shared>,
    mut heart: bootvol_runtime::liveness::Heart,
) {
    // The port requests arrive on (67 or 4011), for the log.
    let local = socket.local_addr().map_or(0, |a| a.port());
    let link = Link { socket: &socket, interface: &interface, port, local };
    let mut buf = vec![0u8; 1500];
    let mut cached = LinkFacts::default();
    loop {
        let received = tokio::select! {
            () = heart.beat() => continue,
            received = socket.recv_from(&mut buf) => received,
        };
        match received {
            Ok((len, from)) => respond(&link, &shared, &mut cached, &buf[..len], from).await,
            Err(e) => {
                tracing::warn!(%interface, error = %e, "ProxyDHCP receive failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The socket a request came in on, and what the log says of it.
struct Link<'a> {
    socket: &'a UdpSocket,
    interface: &'a str,
    port: Port,
    /// The socket's port (67 or 4011).
    local: u16,
}

/// This interface's address and whether the arm64 binary exists, as looked up at most every
/// [`FACTS_TTL`] (not per packet).
#[derive(Debug, Default)]
struct LinkFacts {
    /// (when looked up, this interface's address, the arm64 binary exists)
    cached: Option<(Instant, Option<Ipv4Addr>, bool)>,
}

impl LinkFacts {
    /// The interface's address and whether the arm64 binary exists, looked up again when older
    /// than [`FACTS_TTL`]; `None` while the interface has no IPv4 address.
    fn current(
        &mut self,
        interface: &str,
        tftp_root: &Path,
        now: Instant,
    ) -> Option<(Ipv4Addr, bool)> {
        if self.cached.is_none_or(|(at, _, _)| now.duration_since(at) > FACTS_TTL) {
            let arm64 = tftp_root.join(ARM64_BINARY).is_file();
            let address = interface_address(interface);
            if address.is_none() {
                // Once per look-up, not per packet.
                tracing::warn!(%interface, "ProxyDHCP: the interface has no IPv4 address; not answering");
            }
            self.cached = Some((now, address, arm64));
        }
        let (_, server, has_arm64) = self.cached?;
        Some((server?, has_arm64))
    }
}

/// Answers one datagram from `from`: parsed, decided (`proxy::decide`), within the reply
/// limits, sent, counted, and recorded (`answered`).
async fn respond(
    link: &Link<'_>,
    shared: &Shared,
    cached: &mut LinkFacts,
    datagram: &[u8],
    from: SocketAddr,
) {
    let interface = link.interface;
    let request = match Packet::parse(datagram) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(%interface, %from, error = %e, "not a DHCP packet");
            shared.metrics.dhcp(DhcpMessage::Other, None, DhcpResult::Malformed);
            return;
        }
    };
    let count = |result| shared.metrics.dhcp(message_label(&request), request.arch(), result);
    let now = Instant::now();
    let Some((server, has_arm64)) = cached.current(interface, &shared.tftp_root, now) else {
        count(DhcpResult::Ignored);
        return;
    };
    let snapshot = shared.snapshot.load();
    let script = request.mac().and_then(|m| snapshot.script(MacAddr(m)));
    let http_base = shared.http_base.get();
    let (port, source, relays) = (link.port, source_address(from), &shared.relays);
    let known = script.is_some();
    let facts = Facts { server, http_base: &http_base, has_arm64, known, port, source, relays };
    let reply = match reply_within_limits(link, shared, &request, &facts, from, now) {
        Ok(reply) => reply,
        Err(result) => return count(result),
    };
    let mac = MacAddr(reply.mac);
    let to = send_address(reply.to, from);
    let kind =
        if reply.packet.message_type() == Some(packet::msg::OFFER) { "offer" } else { "ack" };
    if let Err(e) = link.socket.send_to(&reply.packet.encode(), to).await {
        tracing::warn!(%interface, %mac, %to, error = %e, "ProxyDHCP reply not sent");
        return count(DhcpResult::SendFailed);
    }
    count(DhcpResult::Answered);
    let node = script.and_then(|s| s.node.as_deref());
    tracing::info!(%interface, port = link.local, %from, %mac, arch = reply.arch, file = %reply.file, %to, node, kind, "ProxyDHCP answered");
    let client = match from.ip() {
        IpAddr::V4(ip) if !ip.is_unspecified() => from.ip(),
        _ => IpAddr::V4(request.ciaddr),
    };
    answered(shared, mac, client, node, script.and_then(|s| s.node_uuid.as_deref()));
}

/// The reply to `request` from `from`: `proxy::decide` on `facts`, then the reply limits at
/// `now`. `Err`: not answered, and how it is counted.
fn reply_within_limits(
    link: &Link<'_>,
    shared: &Shared,
    request: &Packet,
    facts: &Facts<'_>,
    from: SocketAddr,
    now: Instant,
) -> Result<Box<proxy::Reply>, DhcpResult> {
    let reply = match proxy::decide(request, shared.settings, facts) {
        Decision::Reply(reply) => reply,
        Decision::Ignore(why) => {
            let (interface, local) = (link.interface, link.local);
            tracing::debug!(%interface, port = local, %from, why, "ProxyDHCP: not answered");
            return Err(DhcpResult::Ignored);
        }
    };
    if !shared.limit.lock().unwrap_or_else(|p| p.into_inner()).allow(reply.mac, facts.known, now) {
        let (interface, mac) = (link.interface, MacAddr(reply.mac));
        tracing::debug!(%interface, %mac, "ProxyDHCP: reply limit reached");
        return Err(DhcpResult::Limited);
    }
    Ok(reply)
}

/// The IPv4 address a request came from (`0.0.0.0` from a client with none yet).
fn source_address(from: SocketAddr) -> Ipv4Addr {
    match from.ip() {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    }
}

/// Where a reply goes on the wire: a relay's port 67, back to its sender, or broadcast on the
/// interface (a sender with no address yet cannot be answered otherwise).
fn send_address(to: Destination, from: SocketAddr) -> SocketAddr {
    match to {
        Destination::Relay(relay) => SocketAddr::from((relay, 67)),
        Destination::Sender if !from.ip().is_unspecified() => from,
        Destination::Broadcast | Destination::Sender => SocketAddr::from((Ipv4Addr::BROADCAST, 68)),
    }
}

/// The one place where a DISCOVER or REQUEST for `mac` (a port of `node`, if any) from `client`
/// (its address, or `ciaddr` when it has none yet) was answered: the reply has gone out, within
/// the limits. Recorded in the recent-boots ring (for people), and for a node's MAC a boot sign:
/// it may open the node's boot window (`script_access`, `boot_window`).
fn answered(
    shared: &Shared,
    mac: MacAddr,
    client: IpAddr,
    node: Option<&str>,
    node_uuid: Option<&str>,
) {
    if let Some(uuid) = node_uuid {
        shared.access.sign(uuid, "dhcp");
    }
    let outcome = if node.is_some() { BootResult::Offer } else { BootResult::UnknownMac };
    shared.recent.record("dhcp", client, Some(mac), node, outcome);
}

/// The message type of `request`, as a metric label.
fn message_label(request: &Packet) -> DhcpMessage {
    match request.message_type() {
        Some(packet::msg::DISCOVER) => DhcpMessage::Discover,
        Some(packet::msg::REQUEST) => DhcpMessage::Request,
        _ => DhcpMessage::Other,
    }
}
