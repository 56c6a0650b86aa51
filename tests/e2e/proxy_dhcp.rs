//! The built-in ProxyDHCP with real firmware: the site's DHCP server (dnsmasq) hands out
//! addresses only, with no boot option at all, and the VM still boots its iSCSI volume because
//! bootvol's `[dhcp] mode = "proxy"` tells it where to boot from. Every case ends in a real
//! `sanboot` of a marker volume from tgtd, except the negative control, which must not boot.
//!
//! The rig of `appliance-and-scale.md` §B: in the server's namespace a bridge `br0` holds the
//! VM's tap and veths to more namespaces on the same L2 (dnsmasq's; a second bootvol's; a
//! router's); bootvol (HTTP, TFTP, ProxyDHCP on the bridge) and tgtd run in the server's
//! namespace. The cases:
//!
//! - SeaBIOS + the NIC's iPXE ROM, and OVMF + the NIC's iPXE EFI ROM: iPXE sends user class
//!   `iPXE` and is offered the full URL of `boot.ipxe`;
//! - OVMF's own PXE (no NIC ROM) with option 43 (skip boot server discovery): EDK2 TFTP-loads
//!   `snponly.efi` from bootvol, then that iPXE gets `boot.ipxe`;
//! - the same with `efi_discovery_bypass = false`: EDK2 asks port 4011 and uses that ACK;
//! - OVMF UEFI HTTP Boot (no NIC ROM, IPv4 PXE off): `HEAD` and `GET /ipxe/snponly.efi`, no TFTP;
//! - the negative control: an HTTP Boot client offered what bootvol offers but with option 60
//!   `PXEClient` (a stand-in responder, `support::responder`) ignores it and does not boot;
//! - two bootvol instances on one L2: the one that served a boot is killed, the next boot comes
//!   from the other;
//! - a node on a second L2 segment, behind a real DHCP relay (dnsmasq's `dhcp-relay`): bootvol
//!   answers to `giaddr`, the relay forwards, the node boots across the router.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::net::{Netns, SERVER_IP, TAP};
use crate::support::process::{Daemon, command, command_in, run};
use crate::support::qemu::{Boot, EXIT_BIOS_MARKER, EXIT_EFI_MARKER, Firmware, Network, Vm};
use crate::support::responder::Responder;
use crate::support::tgtd::{Target, Tgtd};
use crate::support::{BASE, E2e, LAN, NIC_ROM, Need, OVMF, TGT, begin, tail};
use crate::volumes::{bios_volume, efi_app, efi_volume};

/// Each boot's deadline (a boot takes 5–15 s under TCG).
const DEADLINE: Duration = Duration::from_secs(60);
/// The iPXE binary EDK2's own PXE and HTTP Boot are handed.
const SNPONLY: &[Need] = &[Need::File("/usr/lib/ipxe/snponly.efi", "ipxe")];
/// The target every case boots from.
const IQN: &str = "iqn.2024-01.org.example.e2e:proxy-dhcp";
/// The DHCP server's address.
const DHCP_IP: &str = "10.77.0.2";

/// A namespace joined to the server's bridge `br0` by a veth (its end is `eth0`). Dropping it
/// deletes the namespace, and with it the veth.
struct Side {
    name: String,
}

impl Side {
    /// The namespace `<server>-<tag>`, its `eth0` at `ip`/24 and `fd77::<last octet>`/64.
    fn attach(server: &Netns, tag: &str, ip: &str) -> Side {
        let side = Side { name: format!("{}-{tag}", server.name()) };
        run(command("ip").args(["netns", "add", &side.name]));
        let host_end = format!("bve2e{tag}");
        run(command_in(Some(server.name()), "ip").args([
            "link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &side.name,
        ]));
        run(command_in(Some(server.name()), "ip")
            .args(["link", "set", &host_end, "master", "br0", "up"]));
        let last = ip.rsplit('.').next().unwrap();
        side.ip(&["link", "set", "lo", "up"]);
        side.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        side.ip(&["-6", "addr", "add", &format!("fd77::{last}/64"), "dev", "eth0", "nodad"]);
        side.ip(&["link", "set", "eth0", "up"]);
        side
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn ip(&self, args: &[&str]) {
        run(command_in(Some(&self.name), "ip").args(args));
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        let _ = command("ip").args(["netns", "del", &self.name]).status();
    }
}

/// Turns the server's namespace into the boot network: a bridge `br0` with the server's
/// address, holding the VM's tap.
fn make_bridge(server: &Netns) {
    let ip_s = |args: &[&str]| run(command_in(Some(server.name()), "ip").args(args));
    ip_s(&["link", "add", "br0", "type", "bridge"]);
    ip_s(&["addr", "flush", "dev", TAP]);
    ip_s(&["addr", "add", &format!("{SERVER_IP}/24"), "dev", "br0"]);
    ip_s(&["-6", "addr", "add", "fd77::1/64", "dev", "br0", "nodad"]);
    ip_s(&["link", "set", TAP, "master", "br0"]);
    ip_s(&["link", "set", "br0", "up"]);
}

/// dnsmasq in `netns` (logging to `dir/<name>.log`), with `conf` after the common lines: DHCP
/// only (`port=0` turns DNS off), root all along (a change of user would clear its parent-death
/// signal).
fn start_dnsmasq(netns: &str, dir: &Path, name: &str, conf: &str) -> Daemon {
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(&path, format!("port=0\nuser=root\ngroup=root\nlog-dhcp\n{conf}")).unwrap();
    let mut cmd = command_in(Some(netns), "dnsmasq");
    cmd.arg("--keep-in-foreground")
        .arg("--log-facility=-")
        .arg(format!("--conf-file={}", path.display()))
        .arg(format!("--pid-file={}", dir.join(format!("{name}.pid")).display()));
    Daemon::spawn(name, cmd, &dir.join(format!("{name}.log")))
}

/// The node booting from `IQN` on `SERVER_IP`, with the port `mac`.
fn node(mac: &str, uefi: bool, more_capabilities: &str) -> serde_json::Value {
    let capabilities = if uefi { "iscsi_boot:true,boot_mode:uefi" } else { "iscsi_boot:true" };
    let capabilities = format!("{capabilities}{more_capabilities}");
    json!({"nodes": [{
        "name": "e2e-proxy-dhcp",
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": capabilities},
        "ports": [{"address": mac}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.e2e:proxy-node"}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-proxy",
            "properties": {"target_iqn": IQN, "target_portal": format!("{SERVER_IP}:3260"),
                "target_lun": 1}}]
    }]})
}

/// `bootvol serve` in `netns` on `ip` (HTTP on 8080, TFTP on 69), its files in `dir`, with the
/// inventory `nodes` and, when `dhcp` names an interface, the ProxyDHCP on it with `[dhcp]`
/// lines `extra` added.
fn start_bootvol(
    dir: &Path,
    netns: &str,
    ip: &str,
    dhcp: Option<(&str, &str)>,
    nodes: &serde_json::Value,
) -> Bootvol {
    start_bootvol_with(dir, Settings::in_netns(netns, ip), dhcp, nodes)
}

/// [`start_bootvol`] with `settings` of the caller's.
fn start_bootvol_with(
    dir: &Path,
    mut settings: Settings,
    dhcp: Option<(&str, &str)>,
    nodes: &serde_json::Value,
) -> Bootvol {
    std::fs::create_dir_all(dir).unwrap();
    if let Some((interface, extra)) = dhcp {
        settings.extra_config +=
            &format!("\n[dhcp]\nmode = \"proxy\"\ninterfaces = [\"{interface}\"]\n{extra}");
    }
    let mut bootvol = Bootvol::configure(dir, settings);
    bootvol.apply(nodes);
    bootvol.serve();
    bootvol
}

/// What a case changes in the rig.
#[derive(Default)]
pub(crate) struct Options<'a> {
    /// The volume holds an EFI system partition (else a BIOS boot sector).
    pub(crate) uefi: bool,
    /// bootvol's ProxyDHCP stays off (something else answers).
    pub(crate) no_proxy: bool,
    /// More `[dhcp]` lines.
    pub(crate) dhcp: &'a str,
    /// More dnsmasq configuration.
    pub(crate) dnsmasq: &'a str,
    /// More capabilities of the node (`,secure_boot:true`).
    pub(crate) capabilities: &'a str,
    /// More of bootvol's configuration (`[secure_boot]`).
    pub(crate) bootvol: &'a str,
    /// The EFI volume's `\EFI\BOOT\BOOTX64.EFI`, instead of the marker application as it is
    /// (a signed one).
    pub(crate) loader: Option<Vec<u8>>,
}

/// The boot network with dnsmasq (addresses only) on it, tgtd and bootvol in the server's
/// namespace, and the node's volume. Fields drop in order: the daemons, then the namespaces.
pub(crate) struct Rig {
    pub(crate) bootvol: Bootvol,
    tgtd: Tgtd,
    _dnsmasq: Daemon,
    dhcp: Side,
    netns: Netns,
    dir: PathBuf,
    pub(crate) mac: &'static str,
    marker: &'static str,
}

impl Rig {
    pub(crate) fn new(
        e2e: &E2e,
        mac: &'static str,
        marker: &'static str,
        options: &Options,
    ) -> Rig {
        let volume = if options.uefi {
            let loader = options.loader.clone().unwrap_or_else(|| efi_app(marker));
            efi_volume(e2e.dir.path(), "proxy", &[("EFI/BOOT/BOOTX64.EFI", loader)])
        } else {
            bios_volume(&e2e.path("boot.img"), marker, false)
        };
        let netns = Netns::new();
        make_bridge(&netns);
        let dhcp = Side::attach(&netns, "d", DHCP_IP);
        let mut tgtd =
            Tgtd::start(e2e.dir.path(), Some(netns.name()), &format!("{SERVER_IP}:3260"));
        tgtd.add(&Target {
            tid: 1,
            iqn: IQN,
            luns: vec![(1, volume)],
            initiators: vec![],
            incoming: None,
            outgoing: None,
        });
        let proxy = (!options.no_proxy).then_some(("br0", options.dhcp));
        let mut settings = Settings::in_netns(netns.name(), SERVER_IP);
        settings.extra_config = options.bootvol.to_owned();
        // The API listens on the namespace's loopback: the admin page without log-in.
        settings.api_noauth = true;
        let nodes = node(mac, options.uefi, options.capabilities);
        let bootvol = start_bootvol_with(e2e.dir.path(), settings, proxy, &nodes);
        // Addresses (and IPv6 router advertisements, so iPXE does not wait for IPv6), and
        // nothing else: no `dhcp-boot`, no `dhcp-match`, no TFTP.
        let conf = format!(
            "interface=eth0\nbind-interfaces\n\
             dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h\n\
             dhcp-leasefile={}\nenable-ra\ndhcp-range=::,constructor:eth0,ra-only\n{}",
            e2e.path("dnsmasq.leases").display(),
            options.dnsmasq
        );
        let dnsmasq = start_dnsmasq(dhcp.name(), e2e.dir.path(), "dnsmasq", &conf);
        Rig {
            bootvol,
            tgtd,
            _dnsmasq: dnsmasq,
            dhcp,
            netns,
            dir: e2e.dir.path().to_owned(),
            mac,
            marker,
        }
    }

    /// The VM, on the bridge.
    pub(crate) fn vm(&self, firmware: Firmware) -> Vm {
        let tap = Network::Tap { netns: self.netns.name().to_owned(), ifname: TAP.to_owned() };
        Vm::new(firmware, tap, self.mac)
    }

    /// Boots `vm` and asserts the marker volume booted.
    pub(crate) fn boot_marker(&self, vm: &Vm, others: &[String]) -> Boot {
        let boot = vm.boot(&self.dir, &[self.marker], DEADLINE);
        let code = if vm.firmware == Firmware::Bios { EXIT_BIOS_MARKER } else { EXIT_EFI_MARKER };
        let mut logs = self.logs();
        logs.extend_from_slice(others);
        boot.assert_marker(self.marker, code, &logs);
        boot
    }

    /// bootvol's, tgtd's and dnsmasq's logs, for failure messages.
    pub(crate) fn logs(&self) -> Vec<String> {
        vec![self.bootvol.log(), self.tgtd.log(), tail(&self.dir.join("dnsmasq.log"), 3000)]
    }
}

/// The lines of `log` holding every one of `words`.
pub(crate) fn lines<'a>(log: &'a str, words: &[&str]) -> Vec<&'a str> {
    log.lines().filter(|l| words.iter().all(|w| l.contains(w))).collect()
}

/// The index of the first line of `log` holding every one of `words`.
fn first(log: &str, words: &[&str]) -> Option<usize> {
    log.lines().position(|l| words.iter().all(|w| l.contains(w)))
}

/// The value of `name` (`from=`, `to=`...) in a log line.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let start = line.find(name).map_or(line.len(), |i| i + name.len());
    line[start..].split_whitespace().next().unwrap_or("")
}

/// Whether bootvol served the node's own script (`GET /boot/<mac>.ipxe`).
pub(crate) fn served_script(log: &str, mac: &str) -> bool {
    !lines(log, &["boot script", &format!("mac={mac}"), "scenario=\"iscsi\""]).is_empty()
}

#[test]
fn bios_ipxe_boots_through_proxy_dhcp() {
    let Some(e2e) = begin("bios_ipxe_boots_through_proxy_dhcp", &[BASE, TGT, NIC_ROM, LAN]) else {
        return;
    };
    let mut rig = Rig::new(&e2e, "52:54:00:e2:0d:01", "BVE2E-PROXY-DHCP-OK", &Options::default());
    rig.boot_marker(&rig.vm(Firmware::Bios), &[]);

    // The boot file came from bootvol: dnsmasq has none to give.
    let log = rig.bootvol.log_text();
    let offered = format!("file=http://{SERVER_IP}:8080/boot.ipxe");
    assert!(
        !lines(&log, &["ProxyDHCP answered", "arch=0 ", &offered]).is_empty(),
        "no ProxyDHCP offer of boot.ipxe in the log\n{}",
        rig.bootvol.log()
    );
    assert!(served_script(&log, rig.mac), "{}", rig.bootvol.log());
    rig.bootvol.stop();
}

/// OVMF with the NIC's iPXE EFI ROM: iPXE (arch 7, user class `iPXE`) takes bootvol's URL of
/// `boot.ipxe` straight away.
#[test]
fn uefi_ipxe_rom_boots_through_proxy_dhcp() {
    let Some(e2e) =
        begin("uefi_ipxe_rom_boots_through_proxy_dhcp", &[BASE, TGT, NIC_ROM, OVMF, LAN])
    else {
        return;
    };
    let options = Options { uefi: true, ..Options::default() };
    let mut rig = Rig::new(&e2e, "52:54:00:e2:0d:02", "BVE2E-PROXY-EFI-ROM-OK", &options);
    rig.boot_marker(&rig.vm(Firmware::Uefi), &[]);

    let log = rig.bootvol.log_text();
    let offered = format!("file=http://{SERVER_IP}:8080/boot.ipxe");
    assert!(
        !lines(&log, &["ProxyDHCP answered", "arch=7 ", &offered]).is_empty(),
        "no ProxyDHCP offer of boot.ipxe to arch 7\n{}",
        rig.bootvol.log()
    );
    assert!(lines(&log, &["tftp: file"]).is_empty(), "iPXE in ROM needs no TFTP\n{log}");
    assert!(served_script(&log, rig.mac), "{}", rig.bootvol.log());
    rig.bootvol.stop();
}

/// What EDK2's own PXE client did, from bootvol's log: the answer that sent it to
/// `snponly.efi` (port and kind), then the TFTP transfer, then iPXE's request for `boot.ipxe`.
pub(crate) fn assert_edk2_pxe_chainload(log: &str, mac: &str, port: &str, kind: &str) {
    let mac = format!("mac={mac}");
    let answer =
        first(log, &["ProxyDHCP answered", port, &mac, "arch=7 ", "file=snponly.efi ", kind]);
    let tftp = first(log, &["tftp: file", "file=\"snponly.efi\""]);
    let ipxe = first(
        log,
        &["ProxyDHCP answered", &mac, &format!("file=http://{SERVER_IP}:8080/boot.ipxe")],
    );
    assert!(
        matches!((answer, tftp, ipxe), (Some(a), Some(t), Some(i)) if a < t && t < i),
        "expected, in order: a {kind} of snponly.efi on {port}, its TFTP transfer, an answer to \
         iPXE (lines {answer:?}, {tftp:?}, {ipxe:?})\n{log}"
    );
}

/// OVMF's own PXE client (no NIC ROM), with option 43 "skip boot server discovery" (the
/// default): EDK2 takes `snponly.efi` by TFTP from bootvol, without asking port 4011.
#[test]
fn uefi_pxe_with_option_43_boots_through_proxy_dhcp() {
    let Some(e2e) =
        begin("uefi_pxe_with_option_43_boots_through_proxy_dhcp", &[BASE, TGT, OVMF, LAN, SNPONLY])
    else {
        return;
    };
    let options = Options { uefi: true, ..Options::default() };
    let mut rig = Rig::new(&e2e, "52:54:00:e2:0d:03", "BVE2E-PROXY-EFI-PXE-43-OK", &options);
    rig.boot_marker(&rig.vm(Firmware::UefiNoRom), &[]);

    let log = rig.bootvol.log_text();
    assert_edk2_pxe_chainload(&log, rig.mac, "port=67 ", "kind=\"offer\"");
    assert!(
        lines(&log, &["ProxyDHCP", "port=4011 "]).iter().all(|l| l.contains("listening")),
        "with option 43 EDK2 should not ask port 4011\n{log}"
    );
    assert!(served_script(&log, rig.mac), "{}", rig.bootvol.log());
    rig.bootvol.stop();
}

/// OVMF's own PXE client with `efi_discovery_bypass = false` (no option 43 on port 67): EDK2
/// asks the boot server on port 4011, and the ACK from there is what sends it to `snponly.efi`.
#[test]
fn uefi_pxe_via_port_4011_boots_through_proxy_dhcp() {
    let Some(e2e) =
        begin("uefi_pxe_via_port_4011_boots_through_proxy_dhcp", &[BASE, TGT, OVMF, LAN, SNPONLY])
    else {
        return;
    };
    let options =
        Options { uefi: true, dhcp: "efi_discovery_bypass = false\n", ..Options::default() };
    let mut rig = Rig::new(&e2e, "52:54:00:e2:0d:04", "BVE2E-PROXY-EFI-PXE-4011-OK", &options);
    rig.boot_marker(&rig.vm(Firmware::UefiNoRom), &[]);

    let log = rig.bootvol.log_text();
    // The ACK went back to where the REQUEST came from (EDK2's new address, port 4011), not
    // to a broadcast.
    let acks = lines(&log, &["ProxyDHCP answered", "port=4011 ", "kind=\"ack\""]);
    for ack in &acks {
        let (from, to) = (field(ack, "from="), field(ack, "to="));
        assert!(from == to && from.starts_with("10.77.0.1") && from.ends_with(":4011"), "{ack}");
    }
    assert_edk2_pxe_chainload(&log, rig.mac, "port=4011 ", "kind=\"ack\"");
    assert!(served_script(&log, rig.mac), "{}", rig.bootvol.log());
    rig.bootvol.stop();
}

/// OVMF UEFI HTTP Boot (no NIC ROM, IPv4 PXE off): bootvol's offer (option 60 `HTTPClient`,
/// the URL of `snponly.efi`) makes EDK2 `HEAD` then `GET` it over HTTP, with no TFTP at all.
#[test]
fn uefi_http_boot_through_proxy_dhcp() {
    let Some(e2e) = begin("uefi_http_boot_through_proxy_dhcp", &[BASE, TGT, OVMF, LAN, SNPONLY])
    else {
        return;
    };
    let options = Options { uefi: true, ..Options::default() };
    let mut rig = Rig::new(&e2e, "52:54:00:e2:0d:05", "BVE2E-PROXY-EFI-HTTP-OK", &options);
    rig.boot_marker(&rig.vm(Firmware::UefiHttp), &[]);

    let log = rig.bootvol.log_text();
    let url = format!("file=http://{SERVER_IP}:8080/ipxe/snponly.efi ");
    let offer = first(&log, &["ProxyDHCP answered", "arch=16 ", &url]);
    let head = first(&log, &["method=HEAD", "path=\"snponly.efi\"", "status=200"]);
    let get = first(&log, &["method=GET", "path=\"snponly.efi\"", "status=200"]);
    assert!(
        matches!((offer, head, get), (Some(o), Some(h), Some(g)) if o < h && h < g),
        "expected an offer of {url} to arch 16, then HEAD and GET of it (lines {offer:?}, \
         {head:?}, {get:?})\n{log}"
    );
    assert!(lines(&log, &["tftp:"]).is_empty(), "HTTP Boot used TFTP\n{log}");
    assert!(served_script(&log, rig.mac), "{}", rig.bootvol.log());
    rig.bootvol.stop();
}

/// Sets option 60 of a reply to `PXEClient`.
fn answer_as_pxe_client(reply: &mut bootvol_edge::dhcp::packet::Packet) {
    for (code, value) in &mut reply.options {
        if *code == 60 {
            *value = b"PXEClient".to_vec();
        }
    }
}

/// Leaves a reply as bootvol made it.
fn unchanged(_: &mut bootvol_edge::dhcp::packet::Packet) {}

/// The negative control of HTTP Boot: a responder offers exactly what bootvol offers an HTTP
/// Boot client, but with option 60 `PXEClient`. EDK2 must ignore it: it keeps sending
/// DISCOVERs, fetches nothing, and does not boot. Then the same responder with option 60 left
/// as bootvol sets it (`HTTPClient`) boots the same VM, so the first boot failed for that reason
/// alone.
#[test]
fn uefi_http_boot_ignores_a_pxe_client_answer() {
    let Some(e2e) =
        begin("uefi_http_boot_ignores_a_pxe_client_answer", &[BASE, TGT, OVMF, LAN, SNPONLY])
    else {
        return;
    };
    let options = Options { uefi: true, no_proxy: true, ..Options::default() };
    let mut rig = Rig::new(&e2e, "52:54:00:e2:0d:06", "BVE2E-PROXY-HTTP-CONTROL-OK", &options);
    let server: Ipv4Addr = SERVER_IP.parse().unwrap();
    let base = rig.bootvol.settings.public_url.clone();
    let vm = rig.vm(Firmware::UefiHttp);

    let wrong = Responder::start(rig.netns.name(), "br0", server, &base, answer_as_pxe_client);
    let wrong_dir = rig.dir.join("wrong-answer");
    std::fs::create_dir_all(&wrong_dir).unwrap();
    let boot = vm.boot(&wrong_dir, &[rig.marker], WRONG_ANSWER_WAIT);
    let answered = wrong.exchanges();
    drop(wrong);
    let report = boot.report(&rig.logs());
    assert!(
        boot.seen(rig.marker).is_none() && boot.code() != Some(EXIT_EFI_MARKER),
        "booted\n{report}"
    );
    let discovers: Vec<_> = answered
        .iter()
        .filter(|x| {
            x.request.message_type() == Some(bootvol_edge::dhcp::packet::msg::DISCOVER)
                && x.request.option(60).is_some_and(|c| c.starts_with(b"HTTPClient"))
                && x.reply.option(60) == Some(b"PXEClient")
        })
        .collect();
    assert!(
        discovers.len() >= 2,
        "EDK2 should have sent HTTP Boot DISCOVERs and kept sending them after the wrong answer \
         (answered: {answered:?})\n{report}"
    );
    let log = rig.bootvol.log_text();
    assert!(lines(&log, &["snponly.efi"]).is_empty(), "the NBP was fetched\n{log}");

    let right = Responder::start(rig.netns.name(), "br0", server, &base, unchanged);
    rig.boot_marker(&vm, &[]);
    assert!(
        right.exchanges().iter().any(|x| x.reply.option(60) == Some(b"HTTPClient")),
        "{:?}",
        right.exchanges()
    );
    rig.bootvol.stop();
}

/// How long the negative control waits for a boot that must not happen: a right answer boots
/// in about 11 s; EDK2 gives up on a wrong one after its DISCOVER retries.
const WRONG_ANSWER_WAIT: Duration = Duration::from_secs(25);

/// Two bootvol instances on one L2, each answering ProxyDHCP with its own address: the first
/// boot goes through whichever offer the firmware takes; that instance is then killed
/// (SIGKILL), and the second boot comes from the other, with no change anywhere else.
#[test]
fn two_instances_one_killed_still_boots() {
    let Some(e2e) = begin("two_instances_one_killed_still_boots", &[BASE, TGT, NIC_ROM, LAN])
    else {
        return;
    };
    let mut rig = Rig::new(&e2e, "52:54:00:e2:0d:07", "BVE2E-PROXY-TWO-OK", &Options::default());
    let second_ip = "10.77.0.3";
    let side = Side::attach(&rig.netns, "b", second_ip);
    let mut second = start_bootvol(
        &e2e.path("second"),
        side.name(),
        second_ip,
        Some(("eth0", "")),
        &node(rig.mac, false, ""),
    );
    let vm = rig.vm(Firmware::Bios);

    rig.boot_marker(&vm, &[second.log()]);
    let logs = [rig.bootvol.log_text(), second.log_text()];
    let mac = format!("mac={}", rig.mac);
    for (log, ip) in logs.iter().zip([SERVER_IP, second_ip]) {
        let url = format!("file=http://{ip}:8080/boot.ipxe");
        assert!(
            !lines(log, &["ProxyDHCP answered", &mac, &url]).is_empty(),
            "{ip} did not offer\n{log}"
        );
    }
    let served: Vec<bool> = logs.iter().map(|log| served_script(log, rig.mac)).collect();
    assert!(served[0] != served[1], "exactly one instance serves the script: {served:?}\n{logs:?}");
    let (killed, survivor) =
        if served[0] { (&mut rig.bootvol, &mut second) } else { (&mut second, &mut rig.bootvol) };
    eprintln!("first boot served by {}; killing it", killed.settings.http_listen);
    killed.kill();
    let before = survivor.log_text().len();

    rig.boot_marker(&vm, &[second.log()]);
    let survivor = if served[0] { &mut second } else { &mut rig.bootvol };
    let log = survivor.log_text();
    assert!(served_script(&log[before..], rig.mac), "the survivor did not serve\n{log}");
    eprintln!("second boot served by {}", survivor.settings.http_listen);
    survivor.stop();
}

/// A node on a second L2 segment (`10.78.0.0/24`) behind a router running a real DHCP relay
/// (dnsmasq `dhcp-relay`, to the DHCP server and to bootvol): bootvol sees only relayed
/// requests, answers them to the relay's `giaddr` port 67, the relay hands the offers to the
/// node, and the node boots across the router.
#[test]
fn bios_ipxe_boots_through_a_dhcp_relay() {
    let Some(e2e) = begin("bios_ipxe_boots_through_a_dhcp_relay", &[BASE, TGT, NIC_ROM, LAN])
    else {
        return;
    };
    // The DHCP server also serves the far segment, with the router as the gateway.
    let options = Options {
        dnsmasq: "dhcp-range=set:far,10.78.0.100,10.78.0.150,255.255.255.0,1h\n\
                  dhcp-option=tag:far,option:router,10.78.0.1\n",
        ..Options::default()
    };
    let mut rig = Rig::new(&e2e, "52:54:00:e2:0d:08", "BVE2E-PROXY-RELAY-OK", &options);
    // The router: `eth0` on the boot network, the far segment's tap (the VM's) at 10.78.0.1.
    let router_ip = "10.77.0.4";
    let router = Side::attach(&rig.netns, "r", router_ip);
    router.ip(&["tuntap", "add", "dev", TAP, "mode", "tap"]);
    router.ip(&["addr", "add", "10.78.0.1/24", "dev", TAP]);
    router.ip(&["-6", "addr", "add", "fd78::1/64", "dev", TAP, "nodad"]);
    router.ip(&["link", "set", TAP, "up"]);
    run(command_in(Some(router.name()), "bash")
        .args(["-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]));
    for ns in [rig.netns.name(), rig.dhcp.name()] {
        run(command_in(Some(ns), "ip").args(["route", "add", "10.78.0.0/24", "via", router_ip]));
    }
    // The relay, and router advertisements on the far segment (iPXE waits for IPv6 without).
    let relay_conf = format!(
        "interface={TAP}\ndhcp-relay=10.78.0.1,{DHCP_IP}\ndhcp-relay=10.78.0.1,{SERVER_IP}\n\
         enable-ra\ndhcp-range=::,constructor:{TAP},ra-only\n"
    );
    let _relay = start_dnsmasq(router.name(), e2e.dir.path(), "relay", &relay_conf);

    let vm = Vm::new(
        Firmware::Bios,
        Network::Tap { netns: router.name().to_owned(), ifname: TAP.to_owned() },
        rig.mac,
    );
    rig.boot_marker(&vm, &[tail(&e2e.path("relay.log"), 3000)]);

    // Only relayed requests reached bootvol (dnsmasq relays from its address on the far
    // segment, the `giaddr`), and every answer went back to the relay, port 67.
    let log = rig.bootvol.log_text();
    let answers = lines(&log, &["ProxyDHCP answered", &format!("mac={}", rig.mac)]);
    assert!(
        !answers.is_empty()
            && answers
                .iter()
                .all(|l| l.contains("from=10.78.0.1:67 ") && l.contains("to=10.78.0.1:67 ")),
        "every answer should come from and go to the relay's giaddr, port 67: {answers:?}\n{log}"
    );
    let script = lines(&log, &["boot script", &format!("mac={}", rig.mac)]);
    assert!(
        script.iter().any(|l| l.contains("client=10.78.0.")),
        "the script should be fetched from the far segment: {script:?}"
    );
    rig.bootvol.stop();
}
