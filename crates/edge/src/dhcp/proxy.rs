//! The ProxyDHCP decision, sans-io: a parsed request and plain facts in, a reply packet and where
//! to send it (or why not) out. The rules were measured against real firmware
//! (`appliance-and-scale.md` §B): never an address (`yiaddr` 0), only netboot clients, the boot
//! file by option 93 as a number; a reply goes to `giaddr` only when the request came from it
//! or from a `[dhcp] relays` address (`relay_trusted`). Also the reply limits (`RateLimit`):
//! nodes' MACs and unknown ones on separate budgets, so a flood of made-up MACs cannot keep a
//! node from being answered.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::packet::{BOOTREPLY, Packet, fixed_field, msg, opt};

/// Which port a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// 67: DISCOVER → OFFER, REQUEST → ACK.
    Dhcp,
    /// 4011, PXE boot server discovery: REQUEST → ACK.
    BootServer,
}

impl Port {
    /// The port for a listening address: 4011 is the boot-server port, anything else DHCP.
    pub fn of(port: u16) -> Port {
        if port == 4011 { Port::BootServer } else { Port::Dhcp }
    }
}

/// What the operator chose (`[dhcp]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Send option 43 = `06 01 08 ff` (skip boot server discovery) to EFI PXE clients too.
    pub efi_discovery_bypass: bool,
    /// Answer only MACs that are ports of a node.
    pub known_only: bool,
}

/// Facts about this request, gathered by the edge.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// This host's address on the interface the request came in on.
    pub server: Ipv4Addr,
    /// `[http] public_url`, without a trailing `/`.
    pub http_base: &'a str,
    /// `snponly-arm64.efi` exists in `[tftp] root`.
    pub has_arm64: bool,
    /// The client MAC is a port of a node.
    pub known: bool,
    pub port: Port,
    /// The address the request came from (`0.0.0.0` from a client with none yet).
    pub source: Ipv4Addr,
    /// `[dhcp] relays`: addresses a relayed request may come from besides its `giaddr`.
    pub relays: &'a [Ipv4Addr],
}

/// Where a reply goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// 255.255.255.255:68 on the interface.
    Broadcast,
    /// A relay agent (`giaddr`), port 67.
    Relay(Ipv4Addr),
    /// Back to the address and port the request came from (port 4011).
    Sender,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Reply(Box<Reply>),
    /// Not answered, and why (for the log).
    Ignore(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub packet: Packet,
    pub to: Destination,
    /// The client's MAC.
    pub mac: [u8; 6],
    /// Option 93 as sent.
    pub arch: u16,
    /// The boot file or URL given.
    pub file: String,
}

/// The BOOTP broadcast bit of `flags` (RFC 1542 §3.1.1).
const BROADCAST_FLAG: u16 = 0x8000;

/// The client types of option 60.
const PXE_CLIENT: &[u8] = b"PXEClient";
const HTTP_CLIENT: &[u8] = b"HTTPClient";

/// Decides the reply to `request`: whether it is answered (`admit`), then the reply
/// (`reply_packet`).
pub fn decide(request: &Packet, settings: Settings, facts: &Facts) -> Decision {
    match admit(request, settings, facts) {
        Ok(admitted) => {
            let packet = reply_packet(request, settings, facts, &admitted);
            let Admitted { mac, arch, file, .. } = admitted;
            let to = destination(request, facts.port);
            Decision::Reply(Box::new(Reply { packet, to, mac, arch, file }))
        }
        Err(why) => Decision::Ignore(why),
    }
}

/// What an answered request is answered with.
struct Admitted {
    mac: [u8; 6],
    /// OFFER or ACK.
    reply_type: u8,
    /// Option 60's client type: [`PXE_CLIENT`] or [`HTTP_CLIENT`].
    client_type: &'static [u8],
    arch: u16,
    file: String,
}

/// Whether `request` is answered, in the order the rules are checked; `Err` says why not.
fn admit(request: &Packet, settings: Settings, facts: &Facts) -> Result<Admitted, &'static str> {
    if request.op != super::packet::BOOTREQUEST {
        return Err("not a request");
    }
    let mac = request.mac().ok_or("not an Ethernet client")?;
    let reply_type = match (facts.port, request.message_type()) {
        (Port::Dhcp, Some(msg::DISCOVER)) => msg::OFFER,
        (_, Some(msg::REQUEST)) => msg::ACK,
        _ => return Err("not a DISCOVER or REQUEST"),
    };
    let relayed = request.giaddr != Ipv4Addr::UNSPECIFIED;
    if relayed && !relay_trusted(request.giaddr, facts.source, facts.relays) {
        return Err("giaddr set, but not sent by it nor by a [dhcp] relays address");
    }
    let client_type = client_type(request).ok_or("not a netboot client (option 60)")?;
    let arch = request.arch().ok_or("no client architecture (option 93)")?;
    if settings.known_only && !facts.known {
        return Err("not a known port (answer = known)");
    }
    let ipxe = request.option(opt::USER_CLASS) == Some(b"iPXE");
    let file = boot_file(arch, ipxe, facts)?;
    Ok(Admitted { mac, reply_type, client_type, arch, file })
}

/// The client type option 60 starts with, if it is a netboot client's.
fn client_type(request: &Packet) -> Option<&'static [u8]> {
    let class = request.option(opt::VENDOR_CLASS).unwrap_or_default();
    if class.starts_with(PXE_CLIENT) {
        Some(PXE_CLIENT)
    } else if class.starts_with(HTTP_CLIENT) {
        Some(HTTP_CLIENT)
    } else {
        None
    }
}

/// The boot file or URL for architecture `arch` (option 93), as firmware or as iPXE.
fn boot_file(arch: u16, ipxe: bool, facts: &Facts) -> Result<String, &'static str> {
    let base = facts.http_base;
    Ok(match (arch, ipxe) {
        (0 | 7 | 9 | 11 | 16 | 19, true) => format!("{base}/boot.ipxe"),
        (0, false) => "undionly.kpxe".into(),
        (7 | 9, false) => "snponly.efi".into(),
        (16, false) => format!("{base}/ipxe/snponly.efi"),
        (11 | 19, false) if !facts.has_arm64 => {
            return Err("arm64 client, but no snponly-arm64.efi in [tftp] root");
        }
        (11, false) => "snponly-arm64.efi".into(),
        (19, false) => format!("{base}/ipxe/snponly-arm64.efi"),
        _ => return Err("unsupported client architecture (option 93)"),
    })
}

/// Where the reply to `request`, which came in on `port`, goes.
fn destination(request: &Packet, port: Port) -> Destination {
    if request.giaddr != Ipv4Addr::UNSPECIFIED {
        Destination::Relay(request.giaddr)
    } else if port == Port::BootServer {
        Destination::Sender
    } else {
        Destination::Broadcast
    }
}

/// The reply packet: never an address (`yiaddr` 0), this server as `siaddr` and `sname`, the
/// boot file, and the options ([`reply_options`]).
fn reply_packet(
    request: &Packet,
    settings: Settings,
    facts: &Facts,
    admitted: &Admitted,
) -> Packet {
    let relayed = request.giaddr != Ipv4Addr::UNSPECIFIED;
    // A relay delivers a reply as its broadcast bit says (RFC 1542 §5.4): clear, it unicasts
    // to `yiaddr`, which a ProxyDHCP reply leaves at 0. Firmware and iPXE leave the bit clear,
    // and dnsmasq's relay then sent bootvol's offers to 0.0.0.0 (measured, tests/e2e). So a
    // relayed reply to a client with no address yet asks the relay to broadcast it, as bootvol
    // does itself on a local link.
    let flags = if relayed && request.ciaddr == Ipv4Addr::UNSPECIFIED {
        request.flags | BROADCAST_FLAG
    } else {
        request.flags
    };
    Packet {
        op: BOOTREPLY,
        htype: request.htype,
        hlen: request.hlen,
        hops: 0,
        xid: request.xid,
        secs: 0,
        flags,
        ciaddr: request.ciaddr,
        yiaddr: Ipv4Addr::UNSPECIFIED,
        siaddr: facts.server,
        giaddr: request.giaddr,
        chaddr: request.chaddr,
        sname: fixed_field(&facts.server.to_string()),
        file: fixed_field(&admitted.file),
        options: reply_options(request, settings, facts, admitted),
    }
}

/// The reply's options: its type, the server, the client type, the client's UUID echoed, and
/// PXE boot server discovery control where it applies.
fn reply_options(
    request: &Packet,
    settings: Settings,
    facts: &Facts,
    admitted: &Admitted,
) -> Vec<(u8, Vec<u8>)> {
    let mut options = vec![
        (opt::MESSAGE_TYPE, vec![admitted.reply_type]),
        (opt::SERVER_ID, facts.server.octets().to_vec()),
        (opt::VENDOR_CLASS, admitted.client_type.to_vec()),
    ];
    if let Some(uuid) = request.option(opt::CLIENT_UUID) {
        options.push((opt::CLIENT_UUID, uuid.to_vec()));
    }
    // PXE boot server discovery control: bypass, boot from `file`. BIOS PXE always gets it;
    // EFI PXE unless the operator turned it off (some EFI firmware ignores offers carrying it,
    // and asks port 4011 instead). HTTP Boot clients are not PXE: never (as measured in §B.1).
    let efi = admitted.arch != 0;
    if admitted.client_type == PXE_CLIENT && (!efi || settings.efi_discovery_bypass) {
        options.push((opt::VENDOR_SPECIFIC, vec![6, 1, 8, 255]));
    }
    options
}

/// Reply limits, so that spoofed requests can neither make bootvol send without bound nor keep
/// a node from being answered. Two budgets that do not draw on each other:
///
/// - MACs that are no node's port (anyone can make up millions): `per_mac` replies per MAC each
///   `window`, and all of them together `per_second` (bursts of `burst`), at most `max_macs`
///   tracked at once. A flood of made-up MACs drains this budget, and only this one.
/// - A node's MAC: its own token bucket, `known_burst` replies refilled at `known_per_second`,
///   far above what a boot needs (firmware sends 4–5 DISCOVERs over ~30 s, then a REQUEST to
///   4011, then iPXE its own DISCOVER and REQUEST), so that another host sending DISCOVERs with
///   that MAC at a few a second does not starve it. Replies to nodes' MACs are bounded by the
///   number of nodes times that rate, each answering one request.
///
/// Sans-io: the caller passes the time, and whether the MAC is a node's ([`RateLimit::allow`]).
#[derive(Debug)]
pub struct RateLimit {
    per_mac: u32,
    window: Duration,
    macs: HashMap<[u8; 6], (Instant, u32)>,
    max_macs: usize,
    /// The unknown MACs' shared token bucket.
    tokens: f64,
    burst: f64,
    per_second: f64,
    last: Option<Instant>,
    /// Each node MAC's bucket: tokens left, when counted.
    known: HashMap<[u8; 6], (f64, Instant)>,
    known_burst: f64,
    known_per_second: f64,
}

/// The most node MACs whose buckets are kept at once (a full bucket is forgotten first).
const MAX_KNOWN_MACS: usize = 65_536;

impl RateLimit {
    /// For unknown MACs: at most `per_mac` replies per MAC each `window`, and `per_second`
    /// replies overall (with a burst of `burst`); at most `max_macs` MACs tracked at once. For
    /// a node's MAC: bursts of `known_burst`, `known_per_second` sustained, each MAC alone.
    pub fn new(
        per_mac: u32,
        window: Duration,
        max_macs: usize,
        per_second: u32,
        burst: u32,
    ) -> RateLimit {
        RateLimit {
            per_mac,
            window,
            macs: HashMap::new(),
            max_macs,
            tokens: f64::from(burst),
            burst: f64::from(burst),
            per_second: f64::from(per_second),
            last: None,
            known: HashMap::new(),
            known_burst: f64::from(KNOWN_BURST),
            known_per_second: f64::from(KNOWN_PER_SECOND),
        }
    }

    /// The appliance's limits: unknown MACs 8 replies per MAC per 10 s, 50 a second in all with
    /// bursts of 100, 4096 MACs; a node's MAC [`KNOWN_BURST`] at once and [`KNOWN_PER_SECOND`]
    /// a second, whatever unknown MACs do.
    pub fn appliance() -> RateLimit {
        RateLimit::new(8, Duration::from_secs(10), 4096, 50, 100)
    }

    /// Whether a reply to `mac` (a node's port when `known`) may be sent now; counts it if so.
    pub fn allow(&mut self, mac: [u8; 6], known: bool, now: Instant) -> bool {
        if known { self.allow_known(mac, now) } else { self.allow_unknown(mac, now) }
    }

    fn allow_known(&mut self, mac: [u8; 6], now: Instant) -> bool {
        let (burst, rate) = (self.known_burst, self.known_per_second);
        let refilled = |(tokens, at): (f64, Instant)| {
            (tokens + now.saturating_duration_since(at).as_secs_f64() * rate).min(burst)
        };
        if !self.known.contains_key(&mac) && self.known.len() >= MAX_KNOWN_MACS {
            self.known.retain(|_, bucket| refilled(*bucket) < burst);
            if self.known.len() >= MAX_KNOWN_MACS {
                return false;
            }
        }
        let bucket = self.known.entry(mac).or_insert((burst, now));
        let tokens = refilled(*bucket);
        if tokens < 1.0 {
            *bucket = (tokens, now);
            return false;
        }
        *bucket = (tokens - 1.0, now);
        true
    }

    fn allow_unknown(&mut self, mac: [u8; 6], now: Instant) -> bool {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        }
        self.last = Some(now);
        if self.tokens < 1.0 {
            return false;
        }
        if !self.macs.contains_key(&mac) && self.macs.len() >= self.max_macs {
            let window = self.window;
            self.macs.retain(|_, (start, _)| now.saturating_duration_since(*start) < window);
            if self.macs.len() >= self.max_macs {
                return false;
            }
        }
        let entry = self.macs.entry(mac).or_insert((now, 0));
        if now.saturating_duration_since(entry.0) >= self.window {
            *entry = (now, 0);
        }
        if entry.1 >= self.per_mac {
            return false;
        }
        entry.1 += 1;
        self.tokens -= 1.0;
        true
    }
}

/// Replies a node's MAC may get at once: a whole boot's (firmware's DISCOVERs and REQUEST, then
/// iPXE's) with room to spare.
pub const KNOWN_BURST: u32 = 20;
/// Replies a node's MAC gets a second, sustained: about 20 times what booting firmware asks
/// (4–5 DISCOVERs in ~30 s), so a host spoofing the MAC at up to 4 requests a second leaves
/// every one of the node's own answered.
pub const KNOWN_PER_SECOND: u32 = 5;

/// Whether a request whose `giaddr` is set came through a relay: sent from `giaddr` itself (a
/// relay on one router) or from an address listed in `[dhcp] relays` (a relay that sends from
/// another of its addresses). Otherwise an OFFER to `giaddr` would go wherever the sender
/// pointed it (reflection).
pub fn relay_trusted(giaddr: Ipv4Addr, source: Ipv4Addr, relays: &[Ipv4Addr]) -> bool {
    !giaddr.is_unspecified() && (source == giaddr || relays.contains(&source))
}

#[cfg(test)]
mod tests {
    use super::super::packet::tests::request;
    use super::*;

    const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
    const SERVER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
    const UUID: [u8; 17] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
    const BYPASS: Settings = Settings { efi_discovery_bypass: true, known_only: false };

    fn facts(port: Port) -> Facts<'static> {
        Facts {
            server: SERVER,
            http_base: "http://10.78.0.1:8080",
            has_arm64: true,
            known: false,
            port,
            source: Ipv4Addr::UNSPECIFIED,
            relays: &[],
        }
    }

    /// Facts for a request relayed by `relay` (sent from it).
    fn via(relay: Ipv4Addr, port: Port) -> Facts<'static> {
        Facts { source: relay, ..facts(port) }
    }

    fn client(kind: u8, class: &str, arch: u16, ipxe: bool) -> Packet {
        let arch = arch.to_be_bytes();
        let mut options: Vec<(u8, &[u8])> = vec![
            (53, std::slice::from_ref(&kind)),
            (60, class.as_bytes()),
            (93, &arch),
            (97, &UUID),
        ];
        if ipxe {
            options.push((77, b"iPXE"));
        }
        request(MAC, &options)
    }

    fn reply(request: &Packet, settings: Settings, facts: &Facts) -> Reply {
        match decide(request, settings, facts) {
            Decision::Reply(r) => *r,
            Decision::Ignore(why) => panic!("ignored: {why}"),
        }
    }

    fn ignored(request: &Packet, settings: Settings, facts: &Facts) -> &'static str {
        match decide(request, settings, facts) {
            Decision::Reply(r) => panic!("answered: {r:?}"),
            Decision::Ignore(why) => why,
        }
    }

    /// Checks what every reply must carry, after a trip through the bytes.
    fn common(r: &Reply, request: &Packet, kind: u8, class: &[u8]) -> Packet {
        let p = Packet::parse(&r.packet.encode()).unwrap();
        assert_eq!(p.op, BOOTREPLY);
        assert_eq!(p.xid, request.xid);
        assert_eq!(p.chaddr, request.chaddr);
        if matches!(r.to, Destination::Relay(_)) && request.ciaddr == Ipv4Addr::UNSPECIFIED {
            assert_eq!(p.flags, request.flags | 0x8000, "a relay must broadcast it");
        } else {
            assert_eq!(p.flags, request.flags);
        }
        assert_eq!(p.yiaddr, Ipv4Addr::UNSPECIFIED, "a proxy never gives an address");
        assert_eq!(p.siaddr, SERVER);
        assert_eq!(&p.sname[..9], b"10.78.0.1");
        assert_eq!(p.message_type(), Some(kind));
        assert_eq!(p.option(54), Some(&SERVER.octets()[..]));
        assert_eq!(p.option(60), Some(class));
        assert_eq!(p.option(97), Some(&UUID[..]));
        let end = p.file.iter().position(|b| *b == 0).unwrap();
        assert_eq!(&p.file[..end], r.file.as_bytes());
        p
    }

    #[test]
    fn bios_pxe_gets_undionly_with_discovery_bypass() {
        let req = client(msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", 0, false);
        let r = reply(&req, BYPASS, &facts(Port::Dhcp));
        assert_eq!(r.file, "undionly.kpxe");
        assert_eq!(r.to, Destination::Broadcast);
        let p = common(&r, &req, msg::OFFER, b"PXEClient");
        assert_eq!(p.option(43), Some(&[6, 1, 8, 255][..]));
        // BIOS keeps option 43 when only the EFI bypass is off.
        let off = Settings { efi_discovery_bypass: false, ..BYPASS };
        let p = reply(&req, off, &facts(Port::Dhcp)).packet;
        assert_eq!(p.option(43), Some(&[6, 1, 8, 255][..]));
    }

    #[test]
    fn efi_pxe_7_and_9_get_snponly() {
        for arch in [7, 9] {
            let req = client(msg::DISCOVER, "PXEClient:Arch:00007:UNDI:003000", arch, false);
            let r = reply(&req, BYPASS, &facts(Port::Dhcp));
            assert_eq!(r.file, "snponly.efi");
            assert_eq!(r.arch, arch);
            let p = common(&r, &req, msg::OFFER, b"PXEClient");
            assert_eq!(p.option(43), Some(&[6, 1, 8, 255][..]));
            let off = Settings { efi_discovery_bypass: false, ..BYPASS };
            assert_eq!(reply(&req, off, &facts(Port::Dhcp)).packet.option(43), None);
        }
    }

    #[test]
    fn uefi_http_boot_16_gets_the_url_as_http_client() {
        let req = client(msg::DISCOVER, "HTTPClient:Arch:00016:UNDI:003000", 16, false);
        let r = reply(&req, BYPASS, &facts(Port::Dhcp));
        assert_eq!(r.file, "http://10.78.0.1:8080/ipxe/snponly.efi");
        let p = common(&r, &req, msg::OFFER, b"HTTPClient");
        assert_eq!(p.option(43), None);
    }

    #[test]
    fn arm64_only_when_its_binary_exists() {
        let tftp = client(msg::DISCOVER, "PXEClient:Arch:00011:UNDI:003000", 11, false);
        let http = client(msg::DISCOVER, "HTTPClient:Arch:00019:UNDI:003000", 19, false);
        let r = reply(&tftp, BYPASS, &facts(Port::Dhcp));
        assert_eq!(r.file, "snponly-arm64.efi");
        common(&r, &tftp, msg::OFFER, b"PXEClient");
        let r = reply(&http, BYPASS, &facts(Port::Dhcp));
        assert_eq!(r.file, "http://10.78.0.1:8080/ipxe/snponly-arm64.efi");
        common(&r, &http, msg::OFFER, b"HTTPClient");
        let without = Facts { has_arm64: false, ..facts(Port::Dhcp) };
        assert!(ignored(&tftp, BYPASS, &without).contains("arm64"));
        assert!(ignored(&http, BYPASS, &without).contains("arm64"));
    }

    #[test]
    fn other_architectures_are_ignored() {
        // §B.2's table without a binary here: 6 EFI IA32, 10 EFI ARM32, 15 x86 UEFI HTTP,
        // 18 ARM32 UEFI HTTP, 20 x86 BIOS HTTP; then others. As firmware (either client type)
        // and as iPXE, on both ports.
        for arch in [1, 2, 6, 10, 15, 18, 20, 41, 0xffff] {
            for class in ["PXEClient", "HTTPClient"] {
                for ipxe in [false, true] {
                    let req = client(msg::DISCOVER, class, arch, ipxe);
                    let why = ignored(&req, BYPASS, &facts(Port::Dhcp));
                    assert!(why.contains("architecture"), "{arch} {class} {ipxe}: {why}");
                    let req = client(msg::REQUEST, class, arch, ipxe);
                    let why = ignored(&req, BYPASS, &facts(Port::BootServer));
                    assert!(why.contains("architecture"), "{arch} {class} {ipxe}: {why}");
                }
            }
        }
    }

    #[test]
    fn ipxe_gets_the_full_script_url() {
        for arch in [0, 7, 9, 11, 16, 19] {
            let req = client(msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", arch, true);
            let without = Facts { has_arm64: false, ..facts(Port::Dhcp) };
            let r = reply(&req, BYPASS, &without);
            assert_eq!(r.file, "http://10.78.0.1:8080/boot.ipxe");
            common(&r, &req, msg::OFFER, b"PXEClient");
        }
        // Only the raw 4 bytes `iPXE`.
        let mut req = client(msg::DISCOVER, "PXEClient", 0, false);
        req.options.push((77, b"\x04iPXE".to_vec()));
        assert_eq!(reply(&req, BYPASS, &facts(Port::Dhcp)).file, "undionly.kpxe");
    }

    #[test]
    fn request_gets_ack_on_both_ports() {
        let req = client(msg::REQUEST, "PXEClient:Arch:00007:UNDI:003000", 7, false);
        let r = reply(&req, BYPASS, &facts(Port::Dhcp));
        assert_eq!(r.to, Destination::Broadcast);
        common(&r, &req, msg::ACK, b"PXEClient");
        let r = reply(&req, BYPASS, &facts(Port::BootServer));
        assert_eq!(r.to, Destination::Sender);
        let p = common(&r, &req, msg::ACK, b"PXEClient");
        assert_eq!(p.file[..11], *b"snponly.efi");
        // A DISCOVER to 4011 is not how boot server discovery works.
        let discover = client(msg::DISCOVER, "PXEClient", 7, false);
        assert!(ignored(&discover, BYPASS, &facts(Port::BootServer)).contains("DISCOVER"));
        assert_eq!(Port::of(4011), Port::BootServer);
        assert_eq!(Port::of(67), Port::Dhcp);
    }

    #[test]
    fn relayed_requests_are_answered_to_the_relay() {
        let relay = Ipv4Addr::new(10, 9, 0, 1);
        let mut req = client(msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", 0, true);
        req.giaddr = relay;
        req.hops = 1;
        // Firmware and iPXE leave the broadcast bit clear.
        req.flags = 0;
        for port in [Port::Dhcp, Port::BootServer] {
            let mut req = req.clone();
            req.options[0].1 = vec![msg::REQUEST];
            let r = reply(&req, BYPASS, &via(relay, port));
            assert_eq!(r.to, Destination::Relay(relay));
            assert_eq!(r.packet.giaddr, req.giaddr);
            common(&r, &req, msg::ACK, b"PXEClient");
        }
        let r = reply(&req, BYPASS, &via(relay, Port::Dhcp));
        assert_eq!(r.to, Destination::Relay(relay));
        assert_eq!(r.file, "http://10.78.0.1:8080/boot.ipxe");
        let p = common(&r, &req, msg::OFFER, b"PXEClient");
        // yiaddr is 0, so the relay can only deliver it by broadcast: the bit asks for that.
        assert_eq!(p.flags, 0x8000);
        assert_eq!(p.hops, 0);
        // A client that has an address gets it unicast by the relay: the bit stays as sent.
        let mut bound = req.clone();
        bound.options[0].1 = vec![msg::REQUEST];
        bound.ciaddr = Ipv4Addr::new(10, 9, 0, 50);
        let r = reply(&bound, BYPASS, &via(relay, Port::BootServer));
        assert_eq!(r.to, Destination::Relay(relay));
        assert_eq!(r.packet.flags, 0);
        assert_eq!(r.packet.ciaddr, bound.ciaddr);
        // Never an address, relayed or not, for every architecture answered.
        for arch in [0, 7, 9, 11, 16, 19] {
            let class = if matches!(arch, 16 | 19) { "HTTPClient" } else { "PXEClient" };
            let mut req = client(msg::DISCOVER, class, arch, false);
            req.giaddr = relay;
            req.flags = 0;
            let r = reply(&req, BYPASS, &via(relay, Port::Dhcp));
            assert_eq!(r.to, Destination::Relay(relay), "arch {arch}");
            let p = common(&r, &req, msg::OFFER, class.as_bytes());
            assert_eq!(p.flags, 0x8000, "arch {arch}");
        }
    }

    #[test]
    fn a_giaddr_not_from_a_relay_gets_no_reply() {
        let (relay, victim) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(192, 0, 2, 7));
        let mut req = client(msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", 0, false);
        req.giaddr = victim;
        // From a host on the link (or one with no address yet) naming another as its relay.
        for source in [Ipv4Addr::UNSPECIFIED, Ipv4Addr::new(10, 78, 0, 66), relay] {
            let why = ignored(&req, BYPASS, &Facts { source, ..facts(Port::Dhcp) });
            assert!(why.contains("giaddr"), "{source}: {why}");
        }
        // A relay that sends from another of its addresses is listed in [dhcp] relays.
        let relays = [relay];
        let listed = Facts { source: relay, relays: &relays, ..facts(Port::Dhcp) };
        assert_eq!(reply(&req, BYPASS, &listed).to, Destination::Relay(victim));
        // Sent by the giaddr itself: answered to it, as before.
        assert_eq!(reply(&req, BYPASS, &via(victim, Port::Dhcp)).to, Destination::Relay(victim));
        assert!(relay_trusted(victim, victim, &[]));
        assert!(relay_trusted(victim, relay, &relays));
        assert!(!relay_trusted(victim, relay, &[]));
        assert!(!relay_trusted(Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED, &[]));
    }

    #[test]
    fn non_netboot_clients_are_ignored() {
        let plain = request(MAC, &[(53, &[msg::DISCOVER])]);
        assert!(ignored(&plain, BYPASS, &facts(Port::Dhcp)).contains("netboot"));
        let other = request(MAC, &[(53, &[1]), (60, b"MSFT 5.0"), (93, &[0, 0])]);
        assert!(ignored(&other, BYPASS, &facts(Port::Dhcp)).contains("netboot"));
        let no_arch = request(MAC, &[(53, &[1]), (60, b"PXEClient")]);
        assert!(ignored(&no_arch, BYPASS, &facts(Port::Dhcp)).contains("93"));
        for kind in [4, 7, 8] {
            let req = client(kind, "PXEClient", 0, false);
            assert!(ignored(&req, BYPASS, &facts(Port::Dhcp)).contains("DISCOVER"));
        }
        let no_type = request(MAC, &[(60, b"PXEClient"), (93, &[0, 0])]);
        ignored(&no_type, BYPASS, &facts(Port::Dhcp));
        let mut reply_packet = client(msg::DISCOVER, "PXEClient", 0, false);
        reply_packet.op = BOOTREPLY;
        assert!(ignored(&reply_packet, BYPASS, &facts(Port::Dhcp)).contains("request"));
    }

    #[test]
    fn answer_known_skips_unknown_macs() {
        let known_only = Settings { known_only: true, ..BYPASS };
        let req = client(msg::DISCOVER, "PXEClient", 0, false);
        assert!(ignored(&req, known_only, &facts(Port::Dhcp)).contains("known"));
        let known = Facts { known: true, ..facts(Port::Dhcp) };
        assert_eq!(reply(&req, known_only, &known).file, "undionly.kpxe");
    }

    #[test]
    fn replies_are_limited_per_mac_and_overall() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(2, Duration::from_secs(10), 3, 1, 4);
        let mut allow = |mac: u8, at| limit.allow([mac; 6], false, at);
        assert!(allow(1, t0));
        assert!(allow(1, t0));
        assert!(!allow(1, t0), "per MAC");
        assert!(allow(2, t0));
        assert!(allow(3, t0));
        assert!(!allow(4, t0), "overall burst spent");
        let t1 = t0 + Duration::from_secs(2);
        assert!(!allow(4, t1), "MAC table full while all are in their window");
        let t2 = t0 + Duration::from_secs(11);
        assert!(allow(4, t2), "expired MACs make room");
        assert!(allow(1, t2), "a new window");
        // A flood of spoofed MACs gets at most the burst plus the rate.
        let mut limit = RateLimit::appliance();
        let sent = (0..10_000u32)
            .filter(|i| {
                let b = i.to_be_bytes();
                limit.allow(
                    [2, 0, b[0], b[1], b[2], b[3]],
                    false,
                    t0 + Duration::from_millis(u64::from(*i)),
                )
            })
            .count();
        assert!(sent <= 100 + 50 * 10 + 1, "{sent}");
    }

    /// The threat review's flood: ~142 DISCOVERs a second from made-up MACs, and the node's own
    /// MAC spoofed at 3 a second. The node's firmware (a DISCOVER every 4 s for 30 s, then
    /// iPXE's) is answered every time, while the unknown MACs stay within their budget.
    #[test]
    fn a_flood_of_unknown_macs_and_a_spoofed_node_mac_leave_the_node_answered() {
        let t0 = Instant::now();
        let node = [0x52, 0x54, 0, 0x4d, 0, 1];
        let mut limit = RateLimit::appliance();
        let (mut unknown_sent, mut node_asked, mut node_answered) = (0, 0, 0);
        // One event per millisecond for 60 s: a made-up MAC every 7 ms, the spoofer every
        // 333 ms, the node's firmware every 4 s.
        for ms in 0..60_000u64 {
            let now = t0 + Duration::from_millis(ms);
            if ms % 7 == 0 {
                let b = (ms as u32).to_be_bytes();
                unknown_sent +=
                    usize::from(limit.allow([2, 0, b[0], b[1], b[2], b[3]], false, now));
            }
            if ms % 333 == 0 {
                limit.allow(node, true, now);
            }
            if ms % 4000 == 1 {
                node_asked += 1;
                node_answered += usize::from(limit.allow(node, true, now));
            }
        }
        assert_eq!(node_answered, node_asked, "the node starved");
        assert!(unknown_sent <= 100 + 50 * 60, "{unknown_sent}");
        // Within one MAC the ceiling holds: a burst, then the sustained rate.
        let mut spoofed = RateLimit::appliance();
        let burst = (0..100).filter(|_| spoofed.allow(node, true, t0)).count();
        assert_eq!(burst, KNOWN_BURST as usize);
        let second = t0 + Duration::from_secs(1);
        let more = (0..100).filter(|_| spoofed.allow(node, true, second)).count();
        assert_eq!(more, KNOWN_PER_SECOND as usize);
        // And the unknown MACs' budget, spent, is not the node's.
        let mut limit = RateLimit::new(8, Duration::from_secs(10), 4096, 1, 1);
        assert!(limit.allow([9; 6], false, t0));
        assert!(!limit.allow([8; 6], false, t0), "shared budget spent");
        assert!(limit.allow(node, true, t0), "a node's MAC is not on it");
    }
}
