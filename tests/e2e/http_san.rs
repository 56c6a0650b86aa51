//! HTTP SAN: iPXE attaches a disk image over HTTP with Range requests, here the image bootvol
//! itself serves from `/files/`.

use std::time::Duration;

use serde_json::json;

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::qemu::{EXIT_BIOS_MARKER, Firmware, Network, Vm};
use crate::support::{BASE, NIC_ROM, begin};
use crate::volumes::bios_volume;

/// BIOS, QEMU's user-mode network: the node's script sanboots
/// `<public_url>/files/images/disk.img`, and every sector the boot code reads comes through a
/// Range request to bootvol's `/files/`.
#[test]
fn bios_http_san_boot_from_bootvol_files() {
    let Some(e2e) = begin("bios_http_san_boot_from_bootvol_files", &[BASE, NIC_ROM]) else {
        return;
    };
    let mac = "52:54:00:e2:08:01";
    let marker = "BVE2E-HTTP-SAN-OK";
    let mut bootvol = Bootvol::configure(e2e.dir.path(), Settings::loopback());
    let images = bootvol.files_root.join("images");
    std::fs::create_dir_all(&images).unwrap();
    bios_volume(&images.join("disk.img"), marker, false);
    let url = format!("{}/files/images/disk.img", bootvol.settings.public_url);
    bootvol.apply(&json!({"nodes": [{
        "name": "e2e-http-san",
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "http_boot:true"},
        "ports": [{"address": mac}],
        "volume_targets": [{"volume_type": "http", "boot_index": 0, "volume_id": "vol-http",
                            "properties": {"url": url}}]
    }]}));
    bootvol.serve();
    let script = bootvol.assert_serves_render(mac);
    assert!(script.contains(&format!("sanhook --drive 0x80 {url}")), "{script}");

    let bootfile = format!("{}/boot.ipxe", bootvol.settings.public_url);
    let vm = Vm::new(Firmware::Bios, Network::User { bootfile }, mac);
    let boot = vm.boot(e2e.dir.path(), &[marker], Duration::from_secs(60));
    let logs = [bootvol.log()];
    boot.assert_marker(marker, EXIT_BIOS_MARKER, &logs);
    assert!(
        std::fs::read_to_string(e2e.path("bootvol.log")).unwrap().contains("status=206"),
        "iPXE read the image without Range requests\n{}",
        logs[0]
    );
    bootvol.stop();
}
