//! Nodes with Secure Boot enforced (`capabilities: secure_boot:true`): OVMF with Secure Boot on
//! and Debian's test key the only key of its `db` (`OVMF_VARS_4M.snakeoil.fd`), no option ROM,
//! on the ProxyDHCP rig of `proxy_dhcp`. With `[secure_boot]` set to that key, EDK2's own PXE
//! client TFTP-loads the `snponly.efi` bootvol signed with it, that iPXE gets the node's script
//! and `sanboot`s an iSCSI volume whose loader the same key signed (the firmware checks it
//! too). Without `[secure_boot]`, the firmware refuses bootvol's iPXE, and the node page says
//! why the node cannot boot.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::proxy_dhcp::{Options, Rig, assert_edk2_pxe_chainload, lines, served_script};
use crate::support::process::{command, run};
use crate::support::qemu::{
    Firmware, SECURE_BOOT_CODE, SECURE_BOOT_VARS, SNAKEOIL_CERT, SNAKEOIL_KEY,
};
use crate::support::{BASE, E2e, LAN, Need, OVMF, TGT, begin};
use crate::volumes::efi_app;

/// What these boots need beyond the UEFI PXE rig.
const SECURE_BOOT: &[Need] = &[
    Need::File("/usr/lib/ipxe/snponly.efi", "ipxe"),
    Need::File(SECURE_BOOT_CODE, "ovmf"),
    Need::File(SECURE_BOOT_VARS, "ovmf"),
    Need::File(SNAKEOIL_KEY, "ovmf"),
    Need::Tool("sbsign", "sbsigntool"),
    Need::Tool("openssl", "openssl"),
    Need::Tool("curl", "curl"),
];

/// How the firmware words its refusal of an unsigned image (research/secure-boot.md).
const REFUSED: &str = "Access Denied";

/// Debian's test key, decrypted (the service cannot type a passphrase), as an operator would
/// keep theirs: a file only bootvol reads.
fn operator_key(e2e: &E2e) -> PathBuf {
    let key = e2e.path("db.key");
    run(command("openssl")
        .args(["pkey", "-passin", "pass:snakeoil", "-in", SNAKEOIL_KEY, "-out"])
        .arg(&key));
    key
}

/// `binary` signed with `key` and the snakeoil certificate, as the operator signs the volumes'
/// loaders.
fn signed(dir: &Path, key: &Path, binary: &[u8]) -> Vec<u8> {
    let (unsigned, out) = (dir.join("loader.efi"), dir.join("loader.signed.efi"));
    std::fs::write(&unsigned, binary).unwrap();
    run(command("sbsign")
        .arg("--key")
        .arg(key)
        .args(["--cert", SNAKEOIL_CERT, "--output"])
        .arg(&out)
        .arg(&unsigned));
    std::fs::read(&out).unwrap()
}

/// The ProxyDHCP rig with a node marked `secure_boot:true` whose volume's loader (printing
/// `marker`) the operator's key signed; bootvol gets that key in `[secure_boot]` when `keyed`.
fn secure_boot_rig(e2e: &E2e, mac: &'static str, marker: &'static str, keyed: bool) -> Rig {
    let key = operator_key(e2e);
    let config = if keyed {
        format!("\n[secure_boot]\nkey = \"{}\"\ncert = \"{SNAKEOIL_CERT}\"\n", key.display())
    } else {
        String::new()
    };
    let options = Options {
        uefi: true,
        capabilities: ",secure_boot:true",
        bootvol: &config,
        loader: Some(signed(e2e.dir.path(), &key, &efi_app(marker))),
        ..Options::default()
    };
    Rig::new(e2e, mac, marker, &options)
}

/// The node page, read inside the rig's namespace.
fn node_page(rig: &Rig) -> String {
    let (status, page) = rig.bootvol.admin_get("/admin/nodes/e2e-proxy-dhcp").unwrap();
    assert_eq!(status, 200, "{page}");
    page
}

#[test]
fn uefi_secure_boot_node_boots_its_signed_volume_through_signed_ipxe() {
    let Some(e2e) = begin(
        "uefi_secure_boot_node_boots_its_signed_volume_through_signed_ipxe",
        &[BASE, TGT, OVMF, LAN, SECURE_BOOT],
    ) else {
        return;
    };
    let marker = "BVE2E-SECURE-BOOT-SIGNED-VOLUME-OK";
    let mut rig = secure_boot_rig(&e2e, "52:54:00:e2:0e:01", marker, true);
    rig.boot_marker(&rig.vm(Firmware::UefiSecureBoot), &[]);

    let log = rig.bootvol.log_text();
    assert!(
        !lines(&log, &["secure boot: iPXE EFI binaries are served signed", "snponly.efi"])
            .is_empty(),
        "no word of signing at start\n{log}"
    );
    assert_edk2_pxe_chainload(&log, rig.mac, "port=67 ", "kind=\"offer\"");
    assert!(served_script(&log, rig.mac), "{}", rig.bootvol.log());
    let page = node_page(&rig);
    assert!(
        page.contains(
            "its firmware runs the iPXE bootvol serves signed with the [secure_boot] key"
        ),
        "{page}"
    );
    rig.bootvol.stop();
}

/// The negative control: the same firmware and node, bootvol without `[secure_boot]`. The
/// firmware fetches bootvol's unsigned `snponly.efi` and refuses to run it, so no script is
/// ever asked for; the node page says what to set.
#[test]
fn uefi_secure_boot_refuses_unsigned_ipxe_and_the_node_page_says_why() {
    let Some(e2e) = begin(
        "uefi_secure_boot_refuses_unsigned_ipxe_and_the_node_page_says_why",
        &[BASE, TGT, OVMF, LAN, SECURE_BOOT],
    ) else {
        return;
    };
    let marker = "BVE2E-SECURE-BOOT-MUST-NOT-BOOT";
    let mut rig = secure_boot_rig(&e2e, "52:54:00:e2:0e:02", marker, false);
    let vm = rig.vm(Firmware::UefiSecureBoot);
    // OVMF waits at "press any key" after a refusal: the boot is stopped once it is seen.
    let boot =
        vm.boot_until(e2e.dir.path(), &[REFUSED, marker], Duration::from_secs(60), &mut |seen| {
            seen == REFUSED
        });
    let logs = rig.logs();
    assert!(
        boot.serial.contains(REFUSED),
        "the firmware did not refuse iPXE\n{}",
        boot.report(&logs)
    );
    assert!(!boot.serial.contains(marker), "the volume booted\n{}", boot.report(&logs));
    let log = rig.bootvol.log_text();
    assert!(
        !lines(&log, &["tftp: file", "file=\"snponly.efi\""]).is_empty(),
        "the firmware never fetched bootvol's iPXE\n{log}"
    );
    assert!(!served_script(&log, rig.mac), "iPXE ran and asked for the script\n{log}");
    let page = node_page(&rig);
    assert!(
        page.contains("capability secure_boot is true but [secure_boot] key and cert are not set"),
        "{page}"
    );
    rig.bootvol.stop();
}
