//! A node's secrets go to that node only, on a real L2 path: bootvol, tgtd and dnsmasq in a
//! network namespace, the VM on its tap (`[boot] script_secrets = "neighbour"`, the default).
//! The VM boots its CHAP volume; a stranger in a second namespace, with another MAC, on the same
//! subnet (a veth into the server's namespace), asks for the VM's script over HTTP and TFTP and
//! gets what an unknown MAC gets, and the refusal is in the events.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::bootvol::{BIN, Bootvol, Settings};
use crate::support::net::{Dhcp, Netns, SERVER_IP, TAP, start_dhcp};
use crate::support::process::{command, command_in, run};
use crate::support::qemu::{EXIT_BIOS_MARKER, Firmware, Network, Vm};
use crate::support::tgtd::{Account, Target, Tgtd};
use crate::support::{BASE, LAN, NIC_ROM, Need, TGT, begin, tail};
use crate::volumes::bios_volume;

const STRANGER_IP: &str = "10.77.0.200";
const STRANGER_MAC: &str = "52:54:00:e2:0e:99";
const UNKNOWN_MAC: &str = "52:54:00:e2:0e:0f";

/// A namespace with one NIC (`eth0`, `STRANGER_MAC`, `STRANGER_IP`/24) whose peer sits in the
/// server's namespace with a host route: to the server it is one more host on its subnet.
struct Stranger {
    name: String,
}

impl Stranger {
    fn new(server: &Netns) -> Stranger {
        let stranger = Stranger { name: format!("{}-x", server.name()) };
        run(command("ip").args(["netns", "add", &stranger.name]));
        let (s, x) = (Some(server.name()), Some(stranger.name.as_str()));
        run(command_in(s, "ip").args([
            "link",
            "add",
            "bve2ex",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &stranger.name,
        ]));
        run(command_in(s, "ip").args(["link", "set", "bve2ex", "up"]));
        run(command_in(s, "ip").args([
            "route",
            "add",
            &format!("{STRANGER_IP}/32"),
            "dev",
            "bve2ex",
        ]));
        run(command_in(x, "ip").args(["link", "set", "lo", "up"]));
        run(command_in(x, "ip").args(["link", "set", "eth0", "address", STRANGER_MAC]));
        run(command_in(x, "ip").args(["addr", "add", &format!("{STRANGER_IP}/24"), "dev", "eth0"]));
        run(command_in(x, "ip").args(["link", "set", "eth0", "up"]));
        stranger
    }

    /// `curl URL` from the stranger: (exit code, HTTP status, body).
    fn curl(&self, url: &str) -> (i32, String, String) {
        let out = command_in(Some(&self.name), "curl")
            .args(["-s", "-m", "10", "-w", "\n%{response_code}", url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (out.status.code().unwrap_or(-1), status.to_owned(), body.to_owned())
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = command("ip").args(["netns", "del", &self.name]).status();
    }
}

#[test]
fn chap_script_only_to_the_node_on_a_real_l2_path() {
    let Some(e2e) = begin(
        "chap_script_only_to_the_node_on_a_real_l2_path",
        &[BASE, TGT, NIC_ROM, LAN, &[Need::Tool("curl", "curl")]],
    ) else {
        return;
    };
    let mac = "52:54:00:e2:0e:01";
    let node_iqn = "iqn.2024-01.org.example.e2e:neigh-node";
    let boot_iqn = "iqn.2024-01.org.example.e2e:neigh-boot";
    let marker = "BVE2E-NEIGHBOUR-CHAP-OK";
    let user = Account { user: "e2e-neigh-user", password: "e2e-neigh-secret-1" };
    let volume = bios_volume(&e2e.path("boot.img"), marker, false);

    let netns = Netns::new();
    let stranger = Stranger::new(&netns);
    let mut tgtd = Tgtd::start(e2e.dir.path(), Some(netns.name()), &format!("{SERVER_IP}:3260"));
    tgtd.add(&Target {
        tid: 1,
        iqn: boot_iqn,
        luns: vec![(1, volume)],
        initiators: vec![node_iqn],
        incoming: Some(user),
        outgoing: None,
    });
    let settings = Settings::in_netns(netns.name(), SERVER_IP);
    assert_eq!(settings.script_secrets, "neighbour");
    let mut bootvol = Bootvol::configure(e2e.dir.path(), settings);
    bootvol.apply(&json!({"nodes": [{
        "name": "e2e-neigh",
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true"},
        "ports": [{"address": mac}],
        "volume_connectors": [{"type": "iqn", "connector_id": node_iqn}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-neigh",
            "properties": {"target_iqn": boot_iqn, "target_portal": format!("{SERVER_IP}:3260"),
                "target_lun": 1, "auth_method": "CHAP",
                "auth_username": user.user, "auth_password": user.password}}]
    }]}));
    assert!(bootvol.render(mac).contains(user.password), "render runs as the operator");
    bootvol.serve();
    let _dhcp = start_dhcp(
        &netns,
        e2e.dir.path(),
        &Dhcp {
            ipxe_bootfile: format!("{}/boot.ipxe", bootvol.settings.public_url),
            efi_bootfile: None,
        },
    );

    // The node boots its CHAP volume.
    let vm = Vm::new(
        Firmware::Bios,
        Network::Tap { netns: netns.name().to_owned(), ifname: TAP.to_owned() },
        mac,
    );
    let boot = vm.boot(e2e.dir.path(), &[marker], Duration::from_secs(60));
    let logs = [bootvol.log(), tgtd.log(), tail(&e2e.path("dnsmasq.log"), 3000)];
    boot.assert_marker(marker, EXIT_BIOS_MARKER, &logs);

    // The stranger gets what an unknown MAC gets, over HTTP and TFTP.
    let base = &bootvol.settings.public_url;
    let http = |m: &str| stranger.curl(&format!("{base}/boot/{}.ipxe", m.replace(':', "-")));
    let tftp = |m: &str| stranger.curl(&format!("tftp://{SERVER_IP}/boot/{m}.ipxe"));
    let unknown = http(UNKNOWN_MAC);
    assert_eq!(unknown.1, "404", "{unknown:?}\n{}", bootvol.log());
    let refused = http(mac);
    assert_eq!(refused, unknown, "{}", bootvol.log());
    assert!(!refused.2.contains(user.password));
    let unknown = tftp(UNKNOWN_MAC);
    assert_eq!(unknown.0, 68, "curl: TFTP file not found\n{}", bootvol.log());
    let refused = tftp(mac);
    assert_eq!(refused, unknown, "{}", bootvol.log());

    // The refusal is an event, naming the stranger.
    let events = run(command(BIN).arg("--config").arg(&bootvol.config).args([
        "events",
        "--node",
        "e2e-neigh",
        "--json",
    ]));
    let refusals: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event_type"] == "baremetal.node.script_refused")
        .collect();
    assert_eq!(refusals.len(), 1, "{events}\n{}", bootvol.log());
    let payload = &refusals[0]["payload"];
    assert_eq!(payload["client"], STRANGER_IP, "{payload}");
    assert_eq!(payload["client_mac"], STRANGER_MAC, "{payload}");
    assert_eq!(payload["mac"], mac, "{payload}");
    bootvol.stop();
    drop(stranger);
}
