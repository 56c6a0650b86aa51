//! The built-in ProxyDHCP on a real link: `bootvol serve` with `[dhcp] mode = "proxy"` in one
//! network namespace, on a bridge (`dh0`) joining it to a client's namespace and an attacker's,
//! each over a veth pair. The client is hand-crafted (no DHCP client in the test image sends
//! option 93): DISCOVERs and REQUESTs as firmware and iPXE send them, from real UDP sockets
//! (broadcast from port 68, and unicast to port 4011). The attacker floods DISCOVERs from
//! made-up MACs and the node's own, and forges `giaddr` to have offers sent elsewhere.
//!
//! Needs root and `ip`; without them it says so and passes.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use bootvol_edge::dhcp::packet::{Packet, msg};
use nix::sys::socket::{setsockopt, sockopt};
use serde_json::json;

use crate::netns::Netns;
use crate::support::Appliance;

const KNOWN_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x4d, 0x00, 0x01];
const UNKNOWN_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x4d, 0x00, 0x99];
const UUID: [u8; 17] = [0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6];

/// Three namespaces on one bridge: the server's bridge `dh0` at `.1`, the client's `eth0` at
/// `.2` (with the node's MAC), the attacker's `eth0` at `.3` and `.4` (its own MAC).
struct Link {
    server: Netns,
    client: Netns,
    attacker: Netns,
    prefix: String,
}

impl Link {
    /// `name` tells one test's namespaces from another's (tests run in parallel).
    fn new(name: &str) -> Link {
        let pid = std::process::id();
        let link = Link {
            server: Netns::add(format!("bvdh-{pid}-{name}-s")),
            client: Netns::add(format!("bvdh-{pid}-{name}-c")),
            attacker: Netns::add(format!("bvdh-{pid}-{name}-a")),
            prefix: format!(
                "10.{}.{}",
                200 + name.bytes().map(u32::from).sum::<u32>() % 50,
                pid % 250 + 1
            ),
        };
        let server = &link.server;
        server.ip(&["link", "add", "dh0", "type", "bridge"]);
        server.ip(&["addr", "add", &format!("{}.1/24", link.prefix), "dev", "dh0"]);
        server.ip(&["link", "set", "dh0", "up"]);
        let mac = KNOWN_MAC.map(|b| format!("{b:02x}")).join(":");
        for (ns, port, host, mac) in
            [(&link.client, "c0", "2", Some(mac.as_str())), (&link.attacker, "a0", "3", None)]
        {
            server.ip(&["link", "add", port, "type", "veth", "peer", "name", "eth0"]);
            server.ip(&["link", "set", "eth0", "netns", ns]);
            server.ip(&["link", "set", port, "master", "dh0"]);
            server.ip(&["link", "set", port, "up"]);
            if let Some(mac) = mac {
                ns.ip(&["link", "set", "eth0", "address", mac]);
            }
            let address = format!("{}.{host}/24", link.prefix);
            ns.ip(&["addr", "add", &address, "dev", "eth0"]);
            ns.ip(&["link", "set", "eth0", "up"]);
        }
        let second = format!("{}.4/24", link.prefix);
        link.attacker.ip(&["addr", "add", &second, "dev", "eth0"]);
        link
    }

    fn server_ip(&self) -> Ipv4Addr {
        self.host(1)
    }

    fn host(&self, n: u8) -> Ipv4Addr {
        format!("{}.{n}", self.prefix).parse().unwrap()
    }
}

/// Runs `f` on a thread of its own inside namespace `ns`, and returns what it returns (a panic
/// in it is raised again with `log()` appended).
fn in_netns<T: Send + 'static>(
    ns: &str,
    log: impl Fn() -> String,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    match crate::netns::spawn_in(ns, f).join() {
        Ok(value) => value,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!("{message}\nserve log:\n{}", log());
        }
    }
}

/// `bootvol serve` in the server's namespace with the ProxyDHCP on `dh0` (plus `dhcp_extra`
/// lines in `[dhcp]`) and node n1 (port `KNOWN_MAC`), logging to `serve.log`.
struct Served {
    // Stopped before its directory goes.
    _serve: Serve,
    app: Appliance,
}

impl Served {
    fn start(link: &Link, dhcp_extra: &str) -> Served {
        let server = link.server_ip();
        let app = Appliance::with_config(|dir| {
            std::fs::create_dir_all(dir.join("files")).unwrap();
            format!(
                r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "external"]
[database]
{database}
[http]
listen = "0.0.0.0:8080"
public_url = "http://{server}:8080"
files_root = "{dir}/files"
[tftp]
listen = "{server}:69"
root = "{dir}/files"
[api]
listen = "127.0.0.1:6385"
auth_strategy = "noauth"
[dhcp]
mode = "proxy"
interfaces = ["dh0"]
{dhcp_extra}
"#,
                dir = dir.display(),
                database = crate::support::database(dir)
            )
        });
        app.apply(json!([{"name": "n1", "driver": "fake", "storage_interface": "external",
            "provision_state": "active", "properties": {"capabilities": "iscsi_boot:true"},
            "ports": [{"address": "52:54:00:4d:00:01"}],
            "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:n1"}],
            "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v1",
                "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1",
                    "target_portal": "192.0.2.5:3260"}}]}]));
        let serve = app.command(&["serve"]);
        let mut command = link.server.wrap(&serve);
        let log = std::fs::File::create(app.path("serve.log")).unwrap();
        let serve = Serve(command.stdout(Stdio::null()).stderr(log).spawn().unwrap());
        Served { _serve: serve, app }
    }

    fn log(&self) -> impl Fn() -> String + use<> {
        let path = self.app.path("serve.log");
        move || std::fs::read_to_string(&path).unwrap_or_default()
    }
}

/// A socket on port 68 in this thread's namespace, bound to `eth0`, allowed to broadcast.
fn bootp_socket() -> UdpSocket {
    let bootp = UdpSocket::bind("0.0.0.0:68").unwrap();
    setsockopt(&bootp, sockopt::Broadcast, &true).unwrap();
    setsockopt(&bootp, sockopt::BindToDevice, &"eth0".into()).unwrap();
    bootp
}

/// Sends DISCOVERs as `mac` (an unknown MAC by default) until serve answers one, for 20 s at most.
fn wait_until_answering(bootp: &UdpSocket, mac: [u8; 6]) -> (Packet, SocketAddr) {
    let to67 = SocketAddr::from((Ipv4Addr::BROADCAST, 67));
    let bios = client(mac, msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", 0, false);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(r) = exchange(bootp, &bios, to67, Duration::from_millis(500)) {
            return r;
        }
        assert!(Instant::now() < deadline, "no OFFER");
    }
}

/// xorshift: made-up MACs and transaction ids without a dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A client message as firmware sends it: option 53, 60, 93 and 97, and 77 `iPXE` if `ipxe`.
fn client(mac: [u8; 6], kind: u8, class: &str, arch: u16, ipxe: bool) -> Packet {
    let mut options =
        vec![(53, vec![kind]), (93, arch.to_be_bytes().to_vec()), (97, UUID.to_vec())];
    if !class.is_empty() {
        options.push((60, class.as_bytes().to_vec()));
    }
    if ipxe {
        options.push((77, b"iPXE".to_vec()));
    }
    let xid = u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) ^ u32::from(arch);
    Packet::request(mac, xid, options)
}

/// Sends `request` and waits up to `wait` for a reply with its `xid` (from `from` if given).
fn exchange(
    socket: &UdpSocket,
    request: &Packet,
    to: SocketAddr,
    wait: Duration,
) -> Option<(Packet, SocketAddr)> {
    socket.send_to(&request.encode(), to).unwrap();
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 1500];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        socket.set_read_timeout(Some(left.max(Duration::from_millis(1)))).unwrap();
        let Ok((n, from)) = socket.recv_from(&mut buf) else { return None };
        if let Ok(reply) = Packet::parse(&buf[..n])
            && reply.xid == request.xid
            && reply.op == 2
        {
            return Some((reply, from));
        }
    }
    None
}

fn file(p: &Packet) -> String {
    let end = p.file.iter().position(|b| *b == 0).unwrap_or(p.file.len());
    String::from_utf8_lossy(&p.file[..end]).into_owned()
}

fn available() -> bool {
    crate::support::netns_available("dhcp", &[])
}

#[test]
fn proxy_dhcp_answers_netboot_clients_on_a_real_link() {
    if !available() {
        return;
    }
    let link = Link::new("a");
    let server = link.server_ip();
    let served = Served::start(&link, "");
    let serve_log = served.log();

    let prefix = link.prefix.clone();
    // This thread only: the client's namespace.
    let checked = crate::netns::spawn_in(&link.client, move || {
        let bootp = bootp_socket();
        let to67 = SocketAddr::from((Ipv4Addr::BROADCAST, 67));

        // BIOS PXE firmware (arch 0), until serve is up.
        let bios = client(KNOWN_MAC, msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", 0, false);
        let deadline = Instant::now() + Duration::from_secs(20);
        let (offer, from) = loop {
            if let Some(r) = exchange(&bootp, &bios, to67, Duration::from_millis(500)) {
                break r;
            }
            assert!(Instant::now() < deadline, "no OFFER");
        };
        assert_eq!(from, SocketAddr::from((server, 67)));
        assert_eq!(offer.message_type(), Some(msg::OFFER));
        assert_eq!(offer.yiaddr, Ipv4Addr::UNSPECIFIED);
        assert_eq!(offer.siaddr, server);
        assert_eq!(offer.chaddr, bios.chaddr);
        assert_eq!(file(&offer), "undionly.kpxe");
        assert_eq!(offer.option(54), Some(&server.octets()[..]));
        assert_eq!(offer.option(60), Some(&b"PXEClient"[..]));
        assert_eq!(offer.option(97), Some(&UUID[..]));
        assert_eq!(offer.option(43), Some(&[6, 1, 8, 255][..]));

        // iPXE (arch 7, user class iPXE): the full URL of boot.ipxe; an unknown MAC too.
        for mac in [KNOWN_MAC, UNKNOWN_MAC] {
            let ipxe = client(mac, msg::DISCOVER, "PXEClient:Arch:00007:UNDI:003010", 7, true);
            let (offer, _) =
                exchange(&bootp, &ipxe, to67, Duration::from_secs(2)).expect("iPXE OFFER");
            assert_eq!(file(&offer), format!("http://{server}:8080/boot.ipxe"));
        }

        // UEFI HTTP Boot (arch 16): the URL of snponly.efi, as HTTPClient.
        let http = client(KNOWN_MAC, msg::DISCOVER, "HTTPClient:Arch:00016:UNDI:003000", 16, false);
        let (offer, _) = exchange(&bootp, &http, to67, Duration::from_secs(2)).expect("HTTP OFFER");
        assert_eq!(file(&offer), format!("http://{server}:8080/ipxe/snponly.efi"));
        assert_eq!(offer.option(60), Some(&b"HTTPClient"[..]));

        // EFI PXE asking the boot server on 4011 from its new address: an ACK, back to it.
        let unicast = UdpSocket::bind(format!("{prefix}.2:0")).unwrap();
        let mut request =
            client(KNOWN_MAC, msg::REQUEST, "PXEClient:Arch:00007:UNDI:003000", 7, false);
        request.ciaddr = format!("{prefix}.2").parse().unwrap();
        let (ack, from) =
            exchange(&unicast, &request, SocketAddr::from((server, 4011)), Duration::from_secs(2))
                .expect("ACK on 4011");
        assert_eq!(from, SocketAddr::from((server, 4011)));
        assert_eq!(ack.message_type(), Some(msg::ACK));
        assert_eq!(file(&ack), "snponly.efi");

        // Not netboot clients, and an architecture without a binary: silence.
        let plain = client(KNOWN_MAC, msg::DISCOVER, "", 0, false);
        assert!(exchange(&bootp, &plain, to67, Duration::from_secs(1)).is_none());
        let arm64 = client(KNOWN_MAC, msg::DISCOVER, "PXEClient:Arch:00011:UNDI:003000", 11, false);
        assert!(exchange(&bootp, &arm64, to67, Duration::from_secs(1)).is_none());
    });
    if let Err(panic) = checked.join() {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        panic!("{message}\nserve log:\n{}", serve_log());
    }
    let log = serve_log();
    assert!(log.contains("ProxyDHCP answered"), "{log}");
    assert!(log.contains("node=n1") || log.contains("node=\"n1\""), "{log}");

    // What the exchanges above left in the metrics and on the admin page, read from the
    // server's namespace (the API listens on its loopback).
    let (metrics, node_page) = crate::netns::spawn_in(&link.server, move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let api = "http://127.0.0.1:6385";
        let metrics = agent.get(format!("{api}/metrics")).call().unwrap().into_body();
        let metrics = metrics.into_with_config().limit(1 << 20).read_to_string().unwrap();
        let login = agent.get(format!("{api}/admin/login")).call().unwrap();
        let cookie = login.headers().get("set-cookie").unwrap().to_str().unwrap();
        let cookie = cookie.split(';').next().unwrap().to_owned();
        let page = agent.get(format!("{api}/admin/nodes/n1")).header("Cookie", &cookie).call();
        let page = page.unwrap().into_body().read_to_string().unwrap();
        (metrics, page)
    })
    .join()
    .unwrap();
    let count = |labels: &str| -> u64 {
        let prefix = format!("bootvol_dhcp_packets_total{{{labels}}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map_or(0, |v| v.parse().unwrap())
    };
    for (labels, expected) in [
        (r#"message="discover",arch="7",result="answered""#, 2),
        (r#"message="discover",arch="16",result="answered""#, 1),
        (r#"message="request",arch="7",result="answered""#, 1),
        (r#"message="discover",arch="0",result="ignored""#, 1),
        (r#"message="discover",arch="11",result="ignored""#, 1),
    ] {
        assert_eq!(count(labels), expected, "{labels}\n{metrics}");
    }
    // The BIOS DISCOVER was sent until serve answered: at least one answer.
    assert!(count(r#"message="discover",arch="0",result="answered""#) >= 1, "{metrics}");
    // The node's page lists the offers among its recent boot requests.
    assert!(node_page.contains("<td>dhcp</td>"), "no DHCP entry on the node's page:\n{node_page}");
    assert!(
        node_page.contains("<td class=\"result\">offer</td>"),
        "the offer's result on the node's page:\n{node_page}"
    );
}

/// The threat review's starvation: from another host on the link, ~142 DISCOVERs a second from
/// made-up MACs and the node's own MAC (fresh transaction ids) at 3 a second, for 25 s. The node
/// sends a DISCOVER every 1.5 s (firmware retries every 4 s or so) and must be answered every
/// time; before nodes' MACs had a budget of their own it got 1 of 17.
#[test]
fn a_dhcp_flood_leaves_a_known_node_answered_on_every_discover() {
    if !available() {
        return;
    }
    let link = Link::new("flood");
    let served = Served::start(&link, "");
    let log = served.log();
    // Up: an unknown MAC's DISCOVER is answered (the node's budget is left alone).
    in_netns(&link.client, &log, || wait_until_answering(&bootp_socket(), UNKNOWN_MAC));

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooding = std::sync::Arc::clone(&stop);
    // How many made-up DISCOVERs the flood has sent: the node starts once the unknown MACs'
    // budget is spent (two seconds' worth: more than it holds).
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sending = std::sync::Arc::clone(&sent);
    let attacker = link.attacker.to_string();
    let flood = std::thread::spawn(move || {
        in_netns(&attacker, String::new, move || {
            let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
            setsockopt(&socket, sockopt::Broadcast, &true).unwrap();
            setsockopt(&socket, sockopt::BindToDevice, &"eth0".into()).unwrap();
            let to67 = SocketAddr::from((Ipv4Addr::BROADCAST, 67));
            let (mut state, started) = (0x9e37_79b9_7f4a_7c15_u64, Instant::now());
            let (mut made_up, mut spoofed) = (0u64, 0u64);
            while !flooding.load(std::sync::atomic::Ordering::Relaxed) {
                // Paced against the clock: one made-up MAC every 7 ms (~142/s), the node's MAC
                // every 333 ms (3/s).
                let due = started + Duration::from_millis(7) * (made_up as u32 + 1);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let r = next(&mut state).to_be_bytes();
                // A locally administered unicast MAC.
                let mac = [0x02, r[1], r[2], r[3], r[4], r[5]];
                let mut p =
                    client(mac, msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", 0, false);
                p.xid = next(&mut state) as u32;
                let _ = socket.send_to(&p.encode(), to67);
                made_up += 1;
                sending.store(made_up, std::sync::atomic::Ordering::Relaxed);
                let spoof_due = Duration::from_millis(333) * spoofed as u32;
                if started.elapsed() >= spoof_due {
                    let mut p = client(
                        KNOWN_MAC,
                        msg::DISCOVER,
                        "PXEClient:Arch:00000:UNDI:002001",
                        0,
                        false,
                    );
                    p.xid = next(&mut state) as u32;
                    let _ = socket.send_to(&p.encode(), to67);
                    spoofed += 1;
                }
            }
            let seconds = started.elapsed().as_secs_f64();
            (made_up as f64 / seconds, spoofed as f64 / seconds)
        })
    });
    // Let the flood spend the unknown MACs' budget first.
    let deadline = Instant::now() + Duration::from_secs(20);
    while sent.load(std::sync::atomic::Ordering::Relaxed) < 280 {
        assert!(Instant::now() < deadline, "the flood never sent 280 DISCOVERs");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (asked, answered) = in_netns(&link.client, &log, || {
        let bootp = bootp_socket();
        let to67 = SocketAddr::from((Ipv4Addr::BROADCAST, 67));
        let (mut asked, mut answered) = (0, 0);
        let mut state = 7u64;
        while asked < 17 {
            let started = Instant::now();
            let mut discover =
                client(KNOWN_MAC, msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", 0, false);
            discover.xid = next(&mut state) as u32;
            asked += 1;
            if let Some((offer, _)) = exchange(&bootp, &discover, to67, Duration::from_secs(1)) {
                assert_eq!(file(&offer), "undionly.kpxe");
                answered += 1;
            }
            std::thread::sleep(Duration::from_millis(1500).saturating_sub(started.elapsed()));
        }
        (asked, answered)
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (made_up_rate, spoofed_rate) = flood.join().unwrap();
    let limited = log().matches("reply limit reached").count();
    eprintln!(
        "flood: {made_up_rate:.0} DISCOVERs/s from made-up MACs, the node's MAC spoofed at {spoofed_rate:.1}/s; the node: {answered} of {asked} DISCOVERs answered"
    );
    assert!(made_up_rate > 120.0, "the flood ran at {made_up_rate:.0}/s only");
    assert!(spoofed_rate > 2.5, "the node's MAC was spoofed at {spoofed_rate:.1}/s only");
    assert_eq!(answered, asked, "the node was starved ({limited} limited in the log at debug)");
}

/// Reflection: a DISCOVER carrying a `giaddr` that is not its sender's (the attacker at `.3`
/// naming the client at `.2` as its relay) gets no OFFER at that address, port 67. One sent by
/// the `giaddr` itself, or from an address in `[dhcp] relays` (`.4`), is answered to `giaddr`.
#[test]
fn a_forged_giaddr_does_not_reflect_offers() {
    if !available() {
        return;
    }
    let link = Link::new("relay");
    let (victim, attacker, listed) = (link.host(2), link.host(3), link.host(4));
    let served = Served::start(&link, &format!("relays = [\"{listed}\"]"));
    let log = served.log();
    in_netns(&link.client, &log, || wait_until_answering(&bootp_socket(), UNKNOWN_MAC));
    let server = SocketAddr::from((link.server_ip(), 67));
    // The client at .2 listens on port 67, where a relay would get the OFFER.
    let (tx, rx) = std::sync::mpsc::channel::<Packet>();
    let listening = std::sync::Arc::new(std::sync::Barrier::new(2));
    let ready = std::sync::Arc::clone(&listening);
    let victim_ns = link.client.to_string();
    let reflected = std::thread::spawn(move || {
        in_netns(&victim_ns, String::new, move || {
            let socket = UdpSocket::bind((victim, 67)).unwrap();
            socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            ready.wait();
            let mut buf = [0u8; 1500];
            let until = Instant::now() + Duration::from_secs(6);
            while Instant::now() < until {
                if let Ok((n, _)) = socket.recv_from(&mut buf)
                    && let Ok(p) = Packet::parse(&buf[..n])
                {
                    let _ = tx.send(p);
                }
            }
        })
    });
    listening.wait();
    let replies = in_netns(&link.attacker, &log, move || {
        let forged = |from: Ipv4Addr, giaddr: Ipv4Addr, xid: u32| {
            let socket = UdpSocket::bind((from, 0)).unwrap();
            let mut p =
                client(UNKNOWN_MAC, msg::DISCOVER, "PXEClient:Arch:00000:UNDI:002001", 0, true);
            (p.giaddr, p.hops, p.flags, p.xid) = (giaddr, 1, 0, xid);
            socket.send_to(&p.encode(), server).unwrap();
        };
        // Forged: from .3, naming .2. Then genuine relays: .3 naming itself (its own socket on
        // 67 catches that), and the listed .4 naming .2.
        forged(attacker, victim, 0x0bad_0001);
        let own = UdpSocket::bind((attacker, 67)).unwrap();
        own.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        forged(attacker, attacker, 0x0bad_0002);
        let mut buf = [0u8; 1500];
        let to_itself =
            own.recv_from(&mut buf).ok().and_then(|(n, _)| Packet::parse(&buf[..n]).ok());
        std::thread::sleep(Duration::from_secs(1));
        forged(listed, victim, 0x0bad_0003);
        to_itself.map(|p| p.xid)
    });
    reflected.join().unwrap();
    let at_victim: Vec<u32> = rx.try_iter().map(|p| p.xid).collect();
    eprintln!(
        "OFFERs at {victim}:67: {at_victim:x?}; to the relay at {attacker} itself: {replies:x?}"
    );
    assert!(!at_victim.contains(&0x0bad_0001), "a forged giaddr reflected an OFFER:\n{}", log());
    assert_eq!(replies, Some(0x0bad_0002), "a relay sending from its giaddr is answered");
    assert!(at_victim.contains(&0x0bad_0003), "a [dhcp] relays address is trusted:\n{}", log());
}
