//! The built-in ProxyDHCP on a real link: `bootvol serve` with `[dhcp] mode = "proxy"` in one
//! network namespace, a client in another over a veth pair. The client is hand-crafted (no DHCP
//! client in the test image sends option 93): DISCOVERs and REQUESTs as firmware and iPXE send
//! them, from real UDP sockets (broadcast from port 68, and unicast to port 4011).
//!
//! Needs root and `ip`; without them it says so and passes.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bootvol::dhcp::packet::{Packet, msg};
use nix::sys::socket::{setsockopt, sockopt};
use serde_json::json;

use crate::support::Appliance;

const KNOWN_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x4d, 0x00, 0x01];
const UNKNOWN_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x4d, 0x00, 0x99];
const UUID: [u8; 17] = [0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6];

#[allow(clippy::disallowed_methods)] // tests run tools
fn tool(program: &str) -> Command {
    Command::new(program)
}

fn ip(args: &[&str]) {
    let output = tool("ip").args(args).output().unwrap();
    assert!(output.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// Two namespaces joined by a veth pair: the server's `dh0` at `.1`, the client's `eth0` at `.2`.
struct Link {
    server: String,
    client: String,
    prefix: String,
}

impl Link {
    fn new() -> Link {
        let pid = std::process::id();
        let link = Link {
            server: format!("bvdh-{pid}-s"),
            client: format!("bvdh-{pid}-c"),
            prefix: format!("10.214.{}", pid % 250 + 1),
        };
        for ns in [&link.server, &link.client] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&["-n", &link.server, "link", "add", "dh0", "type", "veth", "peer", "name", "eth0"]);
        ip(&["-n", &link.server, "link", "set", "eth0", "netns", &link.client]);
        ip(&["-n", &link.server, "addr", "add", &format!("{}.1/24", link.prefix), "dev", "dh0"]);
        ip(&["-n", &link.server, "link", "set", "dh0", "up"]);
        let mac = KNOWN_MAC.map(|b| format!("{b:02x}")).join(":");
        ip(&["-n", &link.client, "link", "set", "eth0", "address", &mac]);
        ip(&["-n", &link.client, "addr", "add", &format!("{}.2/24", link.prefix), "dev", "eth0"]);
        ip(&["-n", &link.client, "link", "set", "eth0", "up"]);
        link
    }

    fn server_ip(&self) -> Ipv4Addr {
        format!("{}.1", self.prefix).parse().unwrap()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in [&self.server, &self.client] {
            let _ = tool("ip").args(["netns", "del", ns]).status();
        }
    }
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
    let link = Link::new();
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
    let mut command = tool("ip");
    command.args(["netns", "exec", &link.server]).arg(serve.get_program()).args(serve.get_args());
    let log_path = app.path("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let _serve = Serve(command.stdout(Stdio::null()).stderr(log).spawn().unwrap());
    let serve_log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let client_ns = format!("/var/run/netns/{}", link.client);
    let prefix = link.prefix.clone();
    let checked = std::thread::spawn(move || {
        // This thread only: the client's namespace.
        let ns = std::fs::File::open(&client_ns).unwrap();
        nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let bootp = UdpSocket::bind("0.0.0.0:68").unwrap();
        setsockopt(&bootp, sockopt::Broadcast, &true).unwrap();
        setsockopt(&bootp, sockopt::BindToDevice, &"eth0".into()).unwrap();
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
    let server_ns = format!("/var/run/netns/{}", link.server);
    let (metrics, node_page) = std::thread::spawn(move || {
        let ns = std::fs::File::open(&server_ns).unwrap();
        nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
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
}
