//! AoE: ATA over raw Ethernet, so the VM, vblade, dnsmasq and bootvol share a private network.

use std::time::Duration;

use serde_json::json;

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::net::{Dhcp, Netns, SERVER_IP, TAP, start_dhcp};
use crate::support::process::{Daemon, command_in};
use crate::support::qemu::{EXIT_BIOS_MARKER, Firmware, Network, Vm};
use crate::support::{BASE, LAN, NIC_ROM, Need, begin, tail};
use crate::volumes::bios_volume;

/// BIOS, the NIC's iPXE ROM gets bootvol's URL from DHCP (user-class iPXE), and the node's
/// script sanboots `aoe:e3.1`, which vblade exports as shelf 3, slot 1 (not 0.0, so the shelf and
/// slot of the inventory are what reaches the wire).
#[test]
fn bios_aoe_sanboot() {
    let Some(e2e) =
        begin("bios_aoe_sanboot", &[BASE, NIC_ROM, LAN, &[Need::Tool("vblade", "vblade")]])
    else {
        return;
    };
    let mac = "52:54:00:e2:05:01";
    let marker = "BVE2E-AOE-SHELF3-SLOT1-OK";
    let volume = bios_volume(&e2e.path("aoe.img"), marker, false);

    let netns = Netns::new();
    let mut cmd = command_in(Some(netns.name()), "vblade");
    cmd.args(["3", "1", TAP]).arg(&volume);
    let mut vblade = Daemon::spawn("vblade", cmd, &e2e.path("vblade.log"));

    let mut bootvol =
        Bootvol::configure(e2e.dir.path(), Settings::in_netns(netns.name(), SERVER_IP));
    bootvol.apply(&json!({"nodes": [{
        "name": "e2e-aoe",
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "aoe_boot:true"},
        "ports": [{"address": mac}],
        "volume_targets": [{"volume_type": "aoe", "boot_index": 0, "volume_id": "vol-aoe",
                            "properties": {"target_shelf": 3, "target_slot": "1"}}]
    }]}));
    bootvol.serve();
    let script = bootvol.assert_serves_render(mac);
    assert!(script.contains("aoe:e3.1"), "{script}");
    let _dhcp = start_dhcp(
        &netns,
        e2e.dir.path(),
        &Dhcp {
            ipxe_bootfile: format!("{}/boot.ipxe", bootvol.settings.public_url),
            efi_bootfile: None,
        },
    );
    vblade.assert_running();

    let vm = Vm::new(
        Firmware::Bios,
        Network::Tap { netns: netns.name().to_owned(), ifname: TAP.to_owned() },
        mac,
    );
    let boot = vm.boot(e2e.dir.path(), &[marker], Duration::from_secs(60));
    boot.assert_marker(
        marker,
        EXIT_BIOS_MARKER,
        &[bootvol.log(), tail(vblade.log(), 2000), tail(&e2e.path("dnsmasq.log"), 3000)],
    );
    bootvol.stop();
}
