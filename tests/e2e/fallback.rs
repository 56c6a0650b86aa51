//! Failing safely: whatever bootvol cannot boot goes back to the firmware, which boots its next
//! device (here a local disk that prints its own marker), quickly and within the bounds the
//! configuration sets.

use std::time::Duration;

use serde_json::json;

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::net::free_tcp_port;
use crate::support::qemu::{EXIT_BIOS_MARKER, EXIT_EFI_MARKER, Firmware, Network, Vm};
use crate::support::{BASE, NIC_ROM, OVMF, begin};
use crate::volumes::{bios_volume, efi_app, efi_volume};

/// A node bootvol knows, that is not the VM: so the inventory is not empty.
fn other_node(portal: &str) -> serde_json::Value {
    json!({
        "name": "e2e-someone-else",
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true"},
        "ports": [{"address": "52:54:00:e2:ff:ff"}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.e2e:other"}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-other",
            "properties": {"target_iqn": "iqn.2024-01.org.example.e2e:other", "target_portal": portal,
                           "target_lun": 1}}]
    })
}

/// A MAC bootvol does not know gets the default script, which hands back to the firmware at
/// once: the VM boots its local disk a few seconds after the script ran.
#[test]
fn unknown_mac_falls_through_to_the_next_boot_device() {
    let Some(e2e) = begin("unknown_mac_falls_through_to_the_next_boot_device", &[BASE, NIC_ROM])
    else {
        return;
    };
    let mac = "52:54:00:e2:07:01";
    let local = "BVE2E-UNKNOWN-MAC-LOCAL-DISK";
    let handed_back = "bootvol: unknown machine, handing back to the firmware";

    let mut bootvol = Bootvol::configure(e2e.dir.path(), Settings::loopback());
    bootvol.apply(&json!({"nodes": [other_node("10.0.2.2:3260")]}));
    bootvol.serve();
    let (status, body) = bootvol.get(&format!("/boot/{}.ipxe", mac.replace(':', "-"))).unwrap();
    assert_eq!(status, 404, "an unknown MAC's script: {body}");
    assert_eq!(body, bootvol.render(mac), "an unknown MAC gets the default script as body");

    let mut vm = Vm::new(
        Firmware::Bios,
        Network::User { bootfile: format!("{}/boot.ipxe", bootvol.settings.public_url) },
        mac,
    );
    vm.local_disk = Some(bios_volume(&e2e.path("local.img"), local, false));
    let boot = vm.boot(e2e.dir.path(), &[handed_back, local], Duration::from_secs(60));
    let logs = [bootvol.log()];
    boot.assert_marker(local, EXIT_BIOS_MARKER, &logs);
    let (Some(script), Some(disk)) = (boot.seen(handed_back), boot.seen(local)) else {
        panic!("the default script did not run before the local disk\n{}", boot.report(&logs));
    };
    assert!(
        disk > script && disk - script < Duration::from_secs(5),
        "the local disk booted {:.1} s after the default script (expected under 5 s)\n{}",
        (disk.saturating_sub(script)).as_secs_f64(),
        boot.report(&logs)
    );
    bootvol.stop();
}

/// A node whose iSCSI target is down: the script tries `san_attempts` times, `san_retry_delay`
/// seconds apart, says it gives up, and hands back to the firmware, which boots the local disk.
#[test]
fn target_down_gives_up_after_bounded_retries() {
    let Some(e2e) = begin("target_down_gives_up_after_bounded_retries", &[BASE, NIC_ROM]) else {
        return;
    };
    let mac = "52:54:00:e2:07:02";
    let node = "e2e-target-down";
    let local = "BVE2E-TARGET-DOWN-LOCAL-DISK";
    let (attempts, delay) = (3u32, 2u32);
    // Nothing listens there: connections are refused.
    let dead_portal = format!("10.0.2.2:{}", free_tcp_port());

    let mut settings = Settings::loopback();
    settings.san_attempts = attempts;
    settings.san_retry_delay = delay;
    let mut bootvol = Bootvol::configure(e2e.dir.path(), settings);
    bootvol.apply(&json!({"nodes": [other_node(&dead_portal), {
        "name": node,
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true"},
        "ports": [{"address": mac}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.e2e:down"}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-down",
            "properties": {"target_iqn": "iqn.2024-01.org.example.e2e:down",
                           "target_portal": dead_portal, "target_lun": 1}}]
    }]}));
    bootvol.serve();
    bootvol.assert_serves_render(mac);

    let mut vm = Vm::new(
        Firmware::Bios,
        Network::User { bootfile: format!("{}/boot.ipxe", bootvol.settings.public_url) },
        mac,
    );
    vm.local_disk = Some(bios_volume(&e2e.path("local.img"), local, false));
    let failed: Vec<String> = (1..=attempts)
        .map(|n| format!("attempt {n} of {attempts} to attach the volume(s) of {node} failed"))
        .collect();
    let gave_up = format!("giving up on {node} after {attempts} attempts");
    let beyond = format!("attempt {} of {attempts}", attempts + 1);
    let mut watch: Vec<&str> = failed.iter().map(String::as_str).collect();
    watch.extend([gave_up.as_str(), local]);
    let boot = vm.boot(e2e.dir.path(), &watch, Duration::from_secs(60));
    let logs = [bootvol.log()];
    boot.assert_marker(local, EXIT_BIOS_MARKER, &logs);
    let times: Vec<Duration> = watch
        .iter()
        .map(|w| {
            boot.seen(w).unwrap_or_else(|| panic!("never printed {w:?}\n{}", boot.report(&logs)))
        })
        .collect();
    assert!(times.is_sorted(), "out of order: {watch:?} at {times:?}\n{}", boot.report(&logs));
    assert!(!boot.serial.contains(&beyond), "tried too often\n{}", boot.report(&logs));
    // Between the first failure and giving up: (attempts - 1) sleeps of `delay` seconds, plus
    // the refused connections, which take well under a second each.
    let retrying = times[attempts as usize] - times[0];
    let sleeps = Duration::from_secs(u64::from((attempts - 1) * delay));
    assert!(
        retrying >= sleeps && retrying < sleeps + Duration::from_secs(u64::from(attempts) * 2),
        "retrying took {:.1} s; the configuration allows {} s of sleep plus quick refusals\n{}",
        retrying.as_secs_f64(),
        sleeps.as_secs(),
        boot.report(&logs)
    );
    let handback = times[attempts as usize + 1] - times[attempts as usize];
    assert!(
        handback < Duration::from_secs(5),
        "the local disk booted {:.1} s after giving up\n{}",
        handback.as_secs_f64(),
        boot.report(&logs)
    );
    bootvol.stop();
}

/// The same under UEFI: iPXE's `exit` from the default script returns to OVMF's boot manager,
/// which boots the next option, the EFI system partition of the local disk. OVMF first tries the
/// NIC's other boot options (EDK2's own PXEv4 and HTTPv4 clients: about 10 s here), so the bound
/// is looser than under BIOS.
#[test]
fn uefi_unknown_mac_falls_through_to_the_next_boot_device() {
    let Some(e2e) =
        begin("uefi_unknown_mac_falls_through_to_the_next_boot_device", &[BASE, NIC_ROM, OVMF])
    else {
        return;
    };
    let mac = "52:54:00:e2:07:03";
    let local = "BVE2E-UEFI-UNKNOWN-MAC-LOCAL-DISK";
    let handed_back = "bootvol: unknown machine, handing back to the firmware";

    let mut bootvol = Bootvol::configure(e2e.dir.path(), Settings::loopback());
    bootvol.apply(&json!({"nodes": [other_node("10.0.2.2:3260")]}));
    bootvol.serve();

    let mut vm = Vm::new(
        Firmware::Uefi,
        Network::User { bootfile: format!("{}/boot.ipxe", bootvol.settings.public_url) },
        mac,
    );
    vm.local_disk =
        Some(efi_volume(e2e.dir.path(), "local", &[("EFI/BOOT/BOOTX64.EFI", efi_app(local))]));
    let boot = vm.boot(e2e.dir.path(), &[handed_back, local], Duration::from_secs(60));
    let logs = [bootvol.log()];
    boot.assert_marker(local, EXIT_EFI_MARKER, &logs);
    let (Some(script), Some(disk)) = (boot.seen(handed_back), boot.seen(local)) else {
        panic!("the default script did not run before the local disk\n{}", boot.report(&logs));
    };
    assert!(
        disk > script && disk - script < Duration::from_secs(20),
        "the local disk booted {:.1} s after the default script (expected under 20 s)\n{}",
        (disk.saturating_sub(script)).as_secs_f64(),
        boot.report(&logs)
    );
    bootvol.stop();
}
