//! UEFI boots from iSCSI under OVMF: the volume holds an EFI system partition, and the EFI
//! application on it prints the marker.

use std::time::Duration;

use serde_json::json;

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::net::{Dhcp, Netns, SERVER_IP, TAP, free_tcp_port, start_dhcp};
use crate::support::qemu::{EXIT_EFI_MARKER, Firmware, Network, Vm};
use crate::support::tgtd::{Target, Tgtd};
use crate::support::{BASE, LAN, NIC_ROM, Need, OVMF, TGT, begin};
use crate::volumes::{efi_app, efi_volume};

const DEADLINE: Duration = Duration::from_secs(60);

fn uefi_node(
    name: &str,
    mac: &str,
    iqn: &str,
    portal: &str,
    filename: Option<&str>,
) -> serde_json::Value {
    let mut properties = json!({"target_iqn": iqn, "target_portal": portal, "target_lun": 1});
    if let Some(filename) = filename {
        properties["san_filename"] = json!(filename);
    }
    json!({
        "name": name,
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true,boot_mode:uefi"},
        "ports": [{"address": mac}],
        "volume_connectors": [{"type": "iqn", "connector_id": format!("iqn.2024-01.org.example.e2e:{name}")}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": format!("vol-{name}"),
                            "properties": properties}]
    })
}

/// OVMF with the NIC's iPXE EFI ROM on QEMU's user-mode network: bootvol's scripts sanboot the
/// volume, and iPXE starts the file the node's `san_filename` names, not the default
/// `\EFI\BOOT\BOOTX64.EFI` (a decoy that prints another marker).
#[test]
fn uefi_iscsi_sanboot_of_san_filename() {
    let Some(e2e) = begin("uefi_iscsi_sanboot_of_san_filename", &[BASE, TGT, NIC_ROM, OVMF]) else {
        return;
    };
    let mac = "52:54:00:e2:03:01";
    let iqn = "iqn.2024-01.org.example.e2e:uefi-boot";
    let marker = "BVE2E-UEFI-SAN-FILENAME-OK";
    let decoy = "BVE2E-UEFI-WRONG-DEFAULT-FILE";
    let volume = efi_volume(
        e2e.dir.path(),
        "uefi",
        &[("EFI/BOOT/BOOTX64.EFI", efi_app(decoy)), ("EFI/BVE2E/MARKER.EFI", efi_app(marker))],
    );

    let portal = free_tcp_port();
    let mut tgtd = Tgtd::start(e2e.dir.path(), None, &format!("127.0.0.1:{portal}"));
    tgtd.add(&Target {
        tid: 1,
        iqn,
        luns: vec![(1, volume)],
        initiators: vec![],
        incoming: None,
        outgoing: None,
    });

    let mut bootvol = Bootvol::configure(e2e.dir.path(), Settings::loopback());
    bootvol.apply(&json!({"nodes": [uefi_node(
        "e2e-uefi", mac, iqn, &format!("10.0.2.2:{portal}"), Some("\\EFI\\BVE2E\\MARKER.EFI"))]}));
    bootvol.serve();
    let script = bootvol.assert_serves_render(mac);
    assert!(script.contains("--filename \\EFI\\BVE2E\\MARKER.EFI"), "{script}");

    let bootfile = format!("{}/boot.ipxe", bootvol.settings.public_url);
    let vm = Vm::new(Firmware::Uefi, Network::User { bootfile }, mac);
    let boot = vm.boot(e2e.dir.path(), &[marker], DEADLINE);
    let logs = [bootvol.log(), tgtd.log()];
    boot.assert_marker(marker, EXIT_EFI_MARKER, &logs);
    assert!(!boot.serial.contains(decoy), "the default file booted\n{}", boot.report(&logs));
    bootvol.stop();
}

/// The production chainload, on a private network: EDK2's own PXE client (the NIC has no
/// option ROM) gets DHCP from dnsmasq, fetches `snponly.efi` from bootvol's TFTP server, that
/// iPXE asks DHCP again (user-class iPXE) and is sent to bootvol's `/boot.ipxe`, which leads to
/// the node's script and an iSCSI sanboot of `\EFI\BOOT\BOOTX64.EFI` from tgtd.
#[test]
fn uefi_pxe_chainload_through_bootvol_tftp() {
    let Some(e2e) = begin(
        "uefi_pxe_chainload_through_bootvol_tftp",
        &[BASE, TGT, OVMF, LAN, &[Need::File("/usr/lib/ipxe/snponly.efi", "ipxe")]],
    ) else {
        return;
    };
    let mac = "52:54:00:e2:04:01";
    let iqn = "iqn.2024-01.org.example.e2e:pxe-boot";
    let marker = "BVE2E-UEFI-PXE-CHAINLOAD-OK";
    let volume = efi_volume(e2e.dir.path(), "pxe", &[("EFI/BOOT/BOOTX64.EFI", efi_app(marker))]);

    let netns = Netns::new();
    let mut tgtd = Tgtd::start(e2e.dir.path(), Some(netns.name()), &format!("{SERVER_IP}:3260"));
    tgtd.add(&Target {
        tid: 1,
        iqn,
        luns: vec![(1, volume)],
        initiators: vec![],
        incoming: None,
        outgoing: None,
    });
    let mut bootvol =
        Bootvol::configure(e2e.dir.path(), Settings::in_netns(netns.name(), SERVER_IP));
    bootvol.apply(
        &json!({"nodes": [uefi_node("e2e-pxe", mac, iqn, &format!("{SERVER_IP}:3260"), None)]}),
    );
    bootvol.serve();
    let script = bootvol.assert_serves_render(mac);
    assert!(!script.contains("--filename"), "{script}");
    let _dhcp = start_dhcp(
        &netns,
        e2e.dir.path(),
        &Dhcp {
            ipxe_bootfile: format!("{}/boot.ipxe", bootvol.settings.public_url),
            efi_bootfile: Some("snponly.efi".into()),
        },
    );

    let vm = Vm::new(
        Firmware::UefiNoRom,
        Network::Tap { netns: netns.name().to_owned(), ifname: TAP.to_owned() },
        mac,
    );
    let boot = vm.boot(e2e.dir.path(), &[marker], DEADLINE);
    let logs = [bootvol.log(), tgtd.log(), crate::support::tail(&e2e.path("dnsmasq.log"), 3000)];
    boot.assert_marker(marker, EXIT_EFI_MARKER, &logs);
    bootvol.stop();
}
