//! The built-in ProxyDHCP with a real firmware: the site's DHCP server (dnsmasq) hands out
//! addresses only, with no boot option at all, and the VM still boots its iSCSI volume because
//! bootvol's `[dhcp] mode = "proxy"` tells it where to boot from.
//!
//! The rig of `appliance-and-scale.md` §B: in the server's namespace a bridge holds the VM's tap
//! and a veth to a second namespace where dnsmasq runs; bootvol (HTTP, TFTP, ProxyDHCP on the
//! bridge) and tgtd run in the server's namespace. SeaBIOS + the NIC's iPXE ROM: iPXE sends user
//! class `iPXE`, so bootvol's offer carries the full URL of `boot.ipxe`.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::net::{Netns, SERVER_IP, TAP};
use crate::support::process::{Daemon, command, command_in, run};
use crate::support::qemu::{EXIT_BIOS_MARKER, Firmware, Network, Vm};
use crate::support::tgtd::{Target, Tgtd};
use crate::support::{BASE, LAN, NIC_ROM, TGT, begin, tail};
use crate::volumes::bios_volume;

/// The DHCP server's namespace, joined to the server's bridge `br0` by a veth; the VM's tap
/// moves onto that bridge (with the server's address). Dropping it deletes the namespace.
struct DhcpSide {
    name: String,
}

impl DhcpSide {
    fn new(server: &Netns) -> DhcpSide {
        let side = DhcpSide { name: format!("{}-d", server.name()) };
        run(command("ip").args(["netns", "add", &side.name]));
        let (s, d) = (Some(server.name()), Some(side.name.as_str()));
        let ip_s = |args: &[&str]| run(command_in(s, "ip").args(args));
        let ip_d = |args: &[&str]| run(command_in(d, "ip").args(args));
        ip_s(&["link", "add", "br0", "type", "bridge"]);
        ip_s(&["addr", "flush", "dev", TAP]);
        ip_s(&["addr", "add", &format!("{SERVER_IP}/24"), "dev", "br0"]);
        ip_s(&["-6", "addr", "add", "fd77::1/64", "dev", "br0", "nodad"]);
        ip_s(&["link", "set", TAP, "master", "br0"]);
        ip_s(&[
            "link", "add", "bve2ed", "type", "veth", "peer", "name", "eth0", "netns", &side.name,
        ]);
        ip_s(&["link", "set", "bve2ed", "master", "br0", "up"]);
        ip_s(&["link", "set", "br0", "up"]);
        ip_d(&["link", "set", "lo", "up"]);
        ip_d(&["addr", "add", "10.77.0.2/24", "dev", "eth0"]);
        ip_d(&["-6", "addr", "add", "fd77::2/64", "dev", "eth0", "nodad"]);
        ip_d(&["link", "set", "eth0", "up"]);
        side
    }

    /// dnsmasq giving addresses (and IPv6 router advertisements, so iPXE does not wait for
    /// IPv6), and nothing else: no `dhcp-boot`, no `dhcp-match`, no TFTP, no DNS.
    fn start_dnsmasq(&self, dir: &Path) -> Daemon {
        let conf = dir.join("dnsmasq.conf");
        let text = format!(
            "port=0\nuser=root\ngroup=root\ninterface=eth0\nbind-interfaces\n\
             dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h\n\
             dhcp-leasefile={}\nlog-dhcp\nenable-ra\ndhcp-range=::,constructor:eth0,ra-only\n",
            dir.join("dnsmasq.leases").display()
        );
        std::fs::write(&conf, text).unwrap();
        let mut cmd = command_in(Some(&self.name), "dnsmasq");
        cmd.arg("--keep-in-foreground")
            .arg("--log-facility=-")
            .arg(format!("--conf-file={}", conf.display()))
            .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()));
        Daemon::spawn("dnsmasq", cmd, &dir.join("dnsmasq.log"))
    }
}

impl Drop for DhcpSide {
    fn drop(&mut self) {
        let _ = command("ip").args(["netns", "del", &self.name]).status();
    }
}

#[test]
fn bios_ipxe_boots_through_proxy_dhcp() {
    let Some(e2e) = begin("bios_ipxe_boots_through_proxy_dhcp", &[BASE, TGT, NIC_ROM, LAN]) else {
        return;
    };
    let mac = "52:54:00:e2:0d:01";
    let iqn = "iqn.2024-01.org.example.e2e:proxy-dhcp";
    let marker = "BVE2E-PROXY-DHCP-OK";
    let volume = bios_volume(&e2e.path("boot.img"), marker, false);

    let netns = Netns::new();
    let side = DhcpSide::new(&netns);
    let mut tgtd = Tgtd::start(e2e.dir.path(), Some(netns.name()), &format!("{SERVER_IP}:3260"));
    tgtd.add(&Target {
        tid: 1,
        iqn,
        luns: vec![(1, volume)],
        initiators: vec![],
        incoming: None,
        outgoing: None,
    });
    let mut settings = Settings::in_netns(netns.name(), SERVER_IP);
    settings.extra_config = "\n[dhcp]\nmode = \"proxy\"\ninterfaces = [\"br0\"]\n".into();
    let mut bootvol = Bootvol::configure(e2e.dir.path(), settings);
    bootvol.apply(&json!({"nodes": [{
        "name": "e2e-proxy-dhcp",
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true"},
        "ports": [{"address": mac}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.e2e:proxy-node"}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-proxy",
            "properties": {"target_iqn": iqn, "target_portal": format!("{SERVER_IP}:3260"),
                "target_lun": 1}}]
    }]}));
    bootvol.serve();
    let _dnsmasq = side.start_dnsmasq(e2e.dir.path());

    let vm = Vm::new(
        Firmware::Bios,
        Network::Tap { netns: netns.name().to_owned(), ifname: TAP.to_owned() },
        mac,
    );
    let boot = vm.boot(e2e.dir.path(), &[marker], Duration::from_secs(60));
    let logs = [bootvol.log(), tgtd.log(), tail(&e2e.path("dnsmasq.log"), 3000)];
    boot.assert_marker(marker, EXIT_BIOS_MARKER, &logs);

    // The boot file came from bootvol: dnsmasq has none to give.
    let log = std::fs::read_to_string(e2e.path("bootvol.log")).unwrap();
    let offered = format!("file=http://{SERVER_IP}:8080/boot.ipxe");
    assert!(
        log.lines().any(|l| l.contains("ProxyDHCP answered") && l.contains(&offered)),
        "no ProxyDHCP offer of boot.ipxe in the log\n{}",
        bootvol.log()
    );
    bootvol.stop();
}
