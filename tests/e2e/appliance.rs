//! The appliance, proven by a second machine booting through it (issue 13). Slow: one to two
//! minutes per firmware.
//!
//! VM 1 boots the appliance disk image that `image/build-appliance.sh` built beforehand
//! (`target/appliance/bootvol-appliance.img`, or `BOOTVOL_APPLIANCE_IMAGE`), under SeaBIOS
//! (syslinux) in one test and OVMF (systemd-boot) in the other. Its data partition is replaced
//! by one the test makes: the database holds a node whose port is VM 2's MAC and whose boot
//! volume is a CHAP-protected iSCSI target; the configuration is the appliance's own first-boot
//! default. The BIOS run also seeds the admin password; the UEFI run reads the one-time
//! password the appliance shows on its console. On a bridge in a network namespace: dnsmasq
//! gives addresses only, tgtd exports the marker volume. VM 2, a bare node with the NIC's iPXE
//! ROM, gets its boot file from the appliance's ProxyDHCP, its script from the appliance's HTTP
//! listener (served past the neighbour check: VM 2 is on the appliance's L2) and boots the
//! volume. The test then creates a node through the appliance's API, powers VM 1 off (ACPI),
//! boots it again and finds both nodes there.
//!
//! The UEFI run boots again twice, through slot updates written as `bootvol-update` writes
//! them (`/b/vmlinuz`, `/b/initrd.img`, `loader/entries/bootvol-<N>+3.conf`, no `default` in
//! `loader.conf`), with mtools on the image: a slot b whose initramfs is junk (the kernel panics
//! and reboots) is tried three times, then systemd-boot falls back to slot a; a good slot b is
//! booted and marked good by systemd-bless-boot once bootvol has started.
//!
//! The API and admin page answer TLS only on port 6385 (issue 22, finding 10): the certificate
//! the appliance made on first boot is fetched (`openssl s_client`) and must have the SHA-256
//! fingerprint its console shows; every API call then trusts that certificate alone (curl
//! `--cacert`); plain HTTP to 6385 gets no HTTP answer. The UEFI run logs in to the admin page
//! with the console's one-time password, sets a real one there, and from then on the one-time
//! password is refused and no new one is shown at the next boots.
//!
//! Without the image the tests skip, saying so, unless `BOOTVOL_REQUIRE_APPLIANCE=1` (CI), which
//! makes a missing image a failure. Everything else is required as for the other boots
//! (`BOOTVOL_REQUIRE_E2E=1`).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::net::{Netns, SERVER_IP, TAP};
use crate::support::process::{Daemon, command, command_in, run};
use crate::support::qemu::{EXIT_BIOS_MARKER, Firmware, Network, Vm};
use crate::support::tgtd::{Account, Target, Tgtd};
use crate::support::{BASE, LAN, NIC_ROM, Need, OVMF, TGT, begin, env, tail};
use crate::volumes::bios_volume;

/// Where the image is, if not at the default path.
const IMAGE_VAR: &str = "BOOTVOL_APPLIANCE_IMAGE";
/// The appliance's address (dnsmasq gives it to VM 1's MAC).
const APPLIANCE_IP: &str = "10.77.0.10";
const APPLIANCE_MAC: &str = "52:54:00:a9:11:01";
/// VM 2's tap on the bridge (VM 1 has `TAP`).
const NODE_TAP: &str = "bve2e1";
/// bootvol's log line once its listeners are bound (on the appliance's console).
const SERVING: &str = "serving http=0.0.0.0:8080";
const ADMIN_PASSWORD: &str = "e2e-appliance-admin-pw";
const NODES: [&str; 2] = ["e2e-appliance-node", "e2e-made-through-the-api"];

const TOOLS: &[Need] = &[
    Need::Tool("curl", "curl"),
    Need::Tool("openssl", "openssl"),
    Need::Tool("signify-openbsd", "signify-openbsd"),
    Need::Tool("mkfs.vfat", "dosfstools"),
    Need::Tool("mkfs.ext4", "e2fsprogs"),
    Need::Tool("mcopy", "mtools"),
    Need::Tool("mdir", "mtools"),
];

/// The image, or `None` (after saying why) when the test is to be skipped.
fn appliance_image() -> Option<PathBuf> {
    let image = env(IMAGE_VAR).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/appliance/bootvol-appliance.img")
    });
    if image.is_file() {
        return Some(image);
    }
    crate::skip::skip(
        crate::skip::APPLIANCE,
        &format!("no appliance image at {}", image.display()),
    );
    None
}

#[test]
fn appliance_bios_serves_a_node_and_keeps_its_data() {
    appliance_round("appliance_bios_serves_a_node_and_keeps_its_data", Firmware::Bios);
}

#[test]
fn appliance_uefi_serves_a_node_and_falls_back_from_a_broken_slot() {
    appliance_round(
        "appliance_uefi_serves_a_node_and_falls_back_from_a_broken_slot",
        Firmware::Uefi,
    );
}

fn appliance_round(name: &'static str, firmware: Firmware) {
    let Some(image) = appliance_image() else { return };
    let needs: &[&[Need]] = if firmware == Firmware::Bios {
        &[BASE, TGT, NIC_ROM, LAN, TOOLS]
    } else {
        &[BASE, TGT, NIC_ROM, LAN, TOOLS, OVMF]
    };
    let Some(e2e) = begin(name, needs) else { return };
    let node_mac =
        if firmware == Firmware::Bios { "52:54:00:a9:22:01" } else { "52:54:00:a9:22:02" };
    let node_iqn = "iqn.2024-01.org.example.e2e:appliance-node";
    let target_iqn = "iqn.2024-01.org.example.e2e:appliance-boot";
    let marker = "BVE2E-APPLIANCE-NODE-OK";
    let chap = Account { user: "e2e-appliance-user", password: "e2e-appliance-secret-1" };
    let volume = bios_volume(&e2e.path("boot.img"), marker, false);

    // The appliance's disk, with the test's data partition.
    let disk = e2e.path("appliance.img");
    std::fs::copy(&image, &disk).expect("copying the appliance image");
    let seed_password = firmware == Firmware::Bios;
    seed_data_partition(
        e2e.dir.path(),
        &disk,
        seed_password,
        &json!({"nodes": [{
            "name": NODES[0],
            "storage_interface": "external", "provision_state": "active",
            "properties": {"capabilities": "iscsi_boot:true"},
            "ports": [{"address": node_mac}],
            "volume_connectors": [{"type": "iqn", "connector_id": node_iqn}],
            "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-appliance",
                "properties": {"target_iqn": target_iqn, "target_portal": format!("{SERVER_IP}:3260"),
                    "target_lun": 1, "auth_method": "CHAP",
                    "auth_username": chap.user, "auth_password": chap.password}}]
        }]}),
    );

    let netns = Netns::new();
    bridge(&netns);
    let _dnsmasq = start_dnsmasq(&netns, e2e.dir.path());
    let mut tgtd = Tgtd::start(e2e.dir.path(), Some(netns.name()), &format!("{SERVER_IP}:3260"));
    tgtd.add(&Target {
        tid: 1,
        iqn: target_iqn,
        luns: vec![(1, volume)],
        initiators: vec![],
        incoming: Some(chap),
        outgoing: None,
    });

    // First boot of the appliance.
    let mut appliance = Appliance::start(e2e.dir.path(), &netns, firmware, &disk, 1);
    let ready = appliance.wait_for(SERVING, Duration::from_secs(150));
    eprintln!("{name}: appliance power-on -> bootvol serving: {:.1} s", ready.as_secs_f64());
    if !seed_password {
        // bootvol shows it at the console's login prompt (/etc/issue.d), once the getty is up.
        appliance.wait_for("one-time password: ", Duration::from_secs(90));
    }
    let console = appliance.serial();
    let fingerprint = shown_fingerprint(&console).unwrap_or_else(|| {
        panic!("no certificate fingerprint on the console\n{}", appliance.report())
    });
    let cert = e2e.path("appliance-cert.pem");
    let served = fetch_certificate(netns.name(), &cert);
    assert_eq!(
        served, fingerprint,
        "the certificate served on 6385 is not the one the console shows"
    );
    let password = if seed_password {
        ADMIN_PASSWORD.to_owned()
    } else {
        let one_time = one_time_password(&console).unwrap_or_else(|| {
            panic!("no one-time password on the console\n{}", appliance.report())
        });
        let beside = console.lines().any(|l| l.contains("fingerprint") && l.contains(&fingerprint));
        assert!(beside, "no fingerprint beside the one-time password\n{}", appliance.report());
        one_time
    };
    let mut api = Api { netns: netns.name().to_owned(), password, cert, jar: e2e.path("cookies") };
    assert_eq!(api.request("GET", &format!("/v1/nodes/{}", NODES[0]), None).0, 200);
    assert!(
        api.plain_http_answers().is_none(),
        "plain HTTP on 6385 got an HTTP answer\n{}",
        appliance.report()
    );
    if !seed_password {
        // The one-time password opens the admin page once, to set a real one.
        let one_time = api.password.clone();
        api.set_password_on_the_admin_page(&one_time, ADMIN_PASSWORD);
        api.password = ADMIN_PASSWORD.to_owned();
        assert_eq!(api.request("GET", &format!("/v1/nodes/{}", NODES[0]), None).0, 200);
        let refused = Api { password: one_time, ..api.clone() };
        assert_eq!(
            refused.request("GET", "/v1/nodes", None).0,
            401,
            "the one-time password still works"
        );
    }

    // The node boots through the appliance.
    let vm = Vm::new(
        Firmware::Bios,
        Network::Tap { netns: netns.name().to_owned(), ifname: NODE_TAP.to_owned() },
        node_mac,
    );
    let node_dir = e2e.path("node");
    std::fs::create_dir_all(&node_dir).unwrap();
    let boot = vm.boot(&node_dir, &[marker], Duration::from_secs(90));
    boot.assert_marker(
        marker,
        EXIT_BIOS_MARKER,
        &[appliance.report(), tgtd.log(), tail(&e2e.path("dnsmasq.log"), 3000)],
    );
    let console = appliance.serial();
    let offered = format!("file=http://{APPLIANCE_IP}:8080/boot.ipxe");
    assert!(
        console.lines().any(|l| l.contains("ProxyDHCP answered") && l.contains(&offered)),
        "no ProxyDHCP offer of {offered} on the appliance's console\n{}",
        appliance.report()
    );

    // A change made through the API, then a clean power-off and a second boot.
    let (status, body) = api.request(
        "POST",
        "/v1/nodes",
        Some(&format!(r#"{{"name": "{}", "driver": "fake"}}"#, NODES[1])),
    );
    assert_eq!(status, 201, "creating a node through the appliance's API: {body}");
    appliance.power_off(Duration::from_secs(60));

    if firmware == Firmware::Bios {
        // With a stick labelled BOOTVOL-UPD holding a bundle signed by a key the image does not
        // hold: refused, on the console, and nothing written.
        let media = update_media(e2e.dir.path());
        let mut appliance =
            Appliance::start_with(e2e.dir.path(), &netns, firmware, &disk, 2, Some(&media));
        let ready = appliance.wait_for(SERVING, Duration::from_secs(150));
        eprintln!("{name}: second boot -> bootvol serving: {:.1} s", ready.as_secs_f64());
        appliance.wait_for("update refused; nothing was changed", Duration::from_secs(120));
        // A build with keys in image/update-keys/ says the first, one without the second.
        let console = appliance.serial();
        assert!(
            console.contains("not signed by a key of this image")
                || console.contains("holds no update signing key"),
            "{}",
            appliance.report()
        );
        appliance.assert_kept(&api);
        appliance.power_off(Duration::from_secs(60));
        let esp = Esp::new(&disk, e2e.dir.path());
        assert_eq!(esp.entries(), ["bootvol-1.conf"], "a refused update wrote an entry");
        return;
    }

    // UEFI: a broken slot b, version 2, three tries; then slot a again.
    let esp = Esp::new(&disk, e2e.dir.path());
    assert_eq!(esp.entries(), ["bootvol-1.conf"]);
    esp.write_slot_b(&[b"not an initramfs\n".as_slice(), &[0u8; 495]].concat(), 2);
    let mut appliance = Appliance::start(e2e.dir.path(), &netns, firmware, &disk, 2);
    let console = appliance.serves_after_three_panics(name, Duration::from_secs(240));
    assert!(console.contains("bootvol.slot=a"), "{}", appliance.report());
    appliance.assert_kept(&api);
    appliance.power_off(Duration::from_secs(60));
    assert_eq!(esp.entries(), ["bootvol-1.conf", "bootvol-2+0-3.conf"], "after the fallback");

    // A good slot b, version 3 (bootvol-update deletes the other slot's old entry first).
    esp.mtools("mdel", &["::/loader/entries/bootvol-2+0-3.conf"]);
    let initrd = e2e.path("initrd-a.img");
    esp.mtools("mcopy", &["::/a/initrd.img", initrd.to_str().unwrap()]);
    esp.write_slot_b(&std::fs::read(&initrd).unwrap(), 3);
    let mut appliance = Appliance::start(e2e.dir.path(), &netns, firmware, &disk, 3);
    let ready = appliance.wait_for(SERVING, Duration::from_secs(150));
    eprintln!("{name}: slot b (version 3) serving after {:.1} s", ready.as_secs_f64());
    // systemd's status line, shortened in the middle to fit the console:
    // "[  OK  ] Finished systemd-bless-boo…rrent Boot Loader Entry as Good."
    appliance.wait_for_line(
        |line| line.contains("Finished") && line.contains("Entry as Good"),
        "systemd-bless-boot.service finished",
        Duration::from_secs(180),
    );
    assert!(appliance.serial().contains("bootvol.slot=b"), "{}", appliance.report());
    appliance.assert_kept(&api);
    appliance.power_off(Duration::from_secs(60));
    assert_eq!(esp.entries(), ["bootvol-1.conf", "bootvol-3.conf"], "slot b blessed");
}

/// The appliance on a box with Secure Boot enforced and Microsoft's keys, as most servers ship:
/// OVMF runs shim (Microsoft-signed), shim runs GRUB (Debian-signed), GRUB boots the
/// Debian-signed kernel it checked through shim, and bootvol serves, the kernel in Secure Boot's
/// integrity lockdown. Then the boot counting GRUB does under Secure Boot: a slot b whose
/// initramfs is junk, three tries in GRUB's environment block (written by the image's own
/// `grubenv`, as `bootvol-update` does), is tried three times, slot a boots again and
/// `bootvol-bless-grub` marks it good. The negative control: slot a's kernel without its
/// signature (`sbattach --remove`) is refused by GRUB, and nothing serves.
#[test]
fn appliance_boots_with_secure_boot_through_shim_and_grub() {
    let name = "appliance_boots_with_secure_boot_through_shim_and_grub";
    let Some(image) = appliance_image() else { return };
    let firmware = Firmware::UefiSecureBootMs;
    let secure_boot: &[Need] = &[
        Need::File(crate::support::qemu::SECURE_BOOT_CODE, "ovmf"),
        Need::File(crate::support::qemu::SECURE_BOOT_MS_VARS, "ovmf"),
        Need::Tool("sbattach", "sbsigntool"),
    ];
    let Some(e2e) = begin(name, &[BASE, LAN, TOOLS, OVMF, secure_boot]) else { return };
    let disk = e2e.path("appliance.img");
    std::fs::copy(&image, &disk).expect("copying the appliance image");
    let netns = Netns::new();
    bridge(&netns);
    let _dnsmasq = start_dnsmasq(&netns, e2e.dir.path());

    let mut appliance = Appliance::start(e2e.dir.path(), &netns, firmware, &disk, 1);
    let ready = appliance.wait_for(SERVING, Duration::from_secs(150));
    eprintln!("{name}: serving {:.1} s after power-on", ready.as_secs_f64());
    let console = appliance.serial();
    for line in [
        "Welcome to GRUB!",
        "secureboot: Secure boot enabled",
        "Kernel is locked down from EFI Secure Boot",
        "bootvol.slot=a bootvol.loader=grub",
    ] {
        assert!(console.contains(line), "{line:?} not on the console\n{}", appliance.report());
    }
    appliance.power_off(Duration::from_secs(60));

    // A broken slot b with three tries, as bootvol-update leaves it; then slot a again.
    let esp = Esp::new(&disk, e2e.dir.path());
    esp.write_slot_b(&[b"not an initramfs\n".as_slice(), &[0u8; 495]].concat(), 2);
    let grubenv = e2e.path("grubenv");
    esp.mtools("mcopy", &["::/EFI/debian/grubenv", grubenv.to_str().unwrap()]);
    let helper =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("image/appliance/usr/lib/bootvol/grubenv");
    run(command(helper.to_str().unwrap())
        .env("BOOTVOL_GRUBENV", &grubenv)
        .args(["bootvol_next=b", "bootvol_tries=3"]));
    esp.mtools("mcopy", &["-o", grubenv.to_str().unwrap(), "::/EFI/debian/grubenv"]);
    let mut appliance = Appliance::start(e2e.dir.path(), &netns, firmware, &disk, 2);
    let console = appliance.serves_after_three_panics(name, Duration::from_secs(300));
    assert_eq!(
        console.matches("bootvol.slot=b bootvol.loader=grub").count(),
        6,
        "three tries of b (two lines each)\n{}",
        appliance.report()
    );
    appliance.wait_for_line(
        // systemd's status line, shortened to fit the console: "Finished bootvol-bless-gru…".
        |line| line.contains("Finished") && line.contains("bootvol-bless-gru"),
        "bootvol-bless-grub.service finished",
        Duration::from_secs(360),
    );
    appliance.power_off(Duration::from_secs(60));
    let block = esp.mtools("mtype", &["::/EFI/debian/grubenv"]);
    for pair in ["bootvol_good=a", "bootvol_next=a", "bootvol_tries=0"] {
        assert!(
            block.lines().any(|l| l == pair),
            "{pair} not in GRUB's block after the fallback:\n{block}"
        );
    }
    assert_eq!(block.len(), 1024, "GRUB's environment block must stay 1024 bytes");

    // The negative control: slot a's kernel unsigned.
    let vmlinuz = e2e.path("vmlinuz-unsigned");
    esp.mtools("mcopy", &["-o", "::/a/vmlinuz", vmlinuz.to_str().unwrap()]);
    run(command("sbattach").arg("--remove").arg(&vmlinuz));
    esp.mtools("mcopy", &["-o", vmlinuz.to_str().unwrap(), "::/a/vmlinuz"]);
    let mut appliance = Appliance::start(e2e.dir.path(), &netns, firmware, &disk, 3);
    appliance.wait_for("bad shim signature", Duration::from_secs(120));
    assert!(!appliance.serial().contains(SERVING), "{}", appliance.report());
}

/// The appliance's ESP inside the disk image, through mtools (`IMAGE@@OFFSET`).
struct Esp {
    spec: String,
    dir: PathBuf,
    options: String,
}

impl Esp {
    fn new(disk: &Path, dir: &Path) -> Esp {
        let (start, _) = gpt_partition(disk, "bootvol-esp");
        let mut esp = Esp {
            spec: format!("{}@@{start}", disk.display()),
            dir: dir.to_owned(),
            options: String::new(),
        };
        esp.options = esp
            .mtools("mtype", &["::/loader/entries/bootvol-1.conf"])
            .lines()
            .find_map(|l| l.strip_prefix("options ").map(str::to_owned))
            .expect("options in bootvol-1.conf");
        esp
    }

    fn mtools(&self, program: &str, args: &[&str]) -> String {
        run(command(program).env("MTOOLS_SKIP_CHECK", "1").args(["-i", &self.spec]).args(args))
    }

    /// The names in `loader/entries/`, sorted.
    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .mtools("mdir", &["-b", "::/loader/entries"])
            .lines()
            .filter_map(|l| l.rsplit('/').next().map(str::to_owned))
            .filter(|n| n.ends_with(".conf"))
            .collect();
        names.sort();
        names
    }

    /// Slot b: slot a's kernel, `initrd`, and the entry `bootvol-<version>+3.conf` (`panic=1`,
    /// so that a failed try reboots at once).
    fn write_slot_b(&self, initrd: &[u8], version: u32) {
        let vmlinuz = self.dir.join("vmlinuz-a");
        if !vmlinuz.exists() {
            self.mtools("mcopy", &["::/a/vmlinuz", vmlinuz.to_str().unwrap()]);
        }
        self.mtools("mcopy", &["-o", vmlinuz.to_str().unwrap(), "::/b/vmlinuz"]);
        let put = |name: &str, data: &[u8], to: &str| {
            let path = self.dir.join(name);
            std::fs::write(&path, data).unwrap();
            self.mtools("mcopy", &["-o", path.to_str().unwrap(), to]);
        };
        put("initrd-b.img", initrd, "::/b/initrd.img");
        let entry = format!(
            "title bootvol (slot b)\nversion {version}\nsort-key bootvol\nlinux /b/vmlinuz\n\
             initrd /b/initrd.img\noptions {} panic=1\n",
            self.options.replace("bootvol.slot=a", "bootvol.slot=b")
        );
        let name = format!("bootvol-{version}+3.conf");
        put(&name, entry.as_bytes(), &format!("::/loader/entries/{name}"));
    }
}

/// The API certificate's SHA-256 fingerprint as the console shows it (link-config's line, or
/// bootvol's beside the one-time password): `AB:CD:...`.
fn shown_fingerprint(console: &str) -> Option<String> {
    console.lines().find_map(|line| {
        let (_, rest) = line.split_once("SHA-256 fingerprint")?;
        let hex = rest.split_whitespace().last()?;
        (hex.len() == 95 && hex.chars().all(|c| c.is_ascii_hexdigit() || c == ':'))
            .then(|| hex.to_owned())
    })
}

/// The certificate the appliance serves on 6385 (`openssl s_client` in the namespace), written
/// to `path` as PEM; its SHA-256 fingerprint.
fn fetch_certificate(netns: &str, path: &Path) -> String {
    let shown = run(command_in(Some(netns), "sh").args([
        "-c",
        &format!(
            "openssl s_client -connect {APPLIANCE_IP}:6385 -servername bootvol < /dev/null 2> /dev/null | openssl x509"
        ),
    ]));
    std::fs::write(path, &shown).unwrap();
    let out = run(command("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(path));
    out.trim().split_once('=').expect("Fingerprint=").1.to_owned()
}

/// A FAT disk labelled BOOTVOL-UPD holding `bootvol-update.tar.sig` signed (signify-openbsd,
/// `image/sign-update.sh`) with a key made here, which no image holds.
fn update_media(dir: &Path) -> PathBuf {
    let out = dir.join("update-out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("vmlinuz"), b"not a kernel").unwrap();
    std::fs::write(out.join("initrd.img"), b"not an initramfs").unwrap();
    std::fs::write(out.join("cmdline"), b"console=ttyS0\n").unwrap();
    let (public, secret) = (dir.join("stranger.pub"), dir.join("stranger.sec"));
    run(command("signify-openbsd").args(["-G", "-n", "-p"]).arg(&public).arg("-s").arg(&secret));
    let sign = Path::new(env!("CARGO_MANIFEST_DIR")).join("image/sign-update.sh");
    run(command(sign).arg(&secret).arg(&out));
    let media = dir.join("update-media.img");
    let _ = std::fs::remove_file(&media);
    run(command("mkfs.vfat").args(["-C", "-n", "BOOTVOL-UPD"]).arg(&media).arg("8192"));
    run(command("mcopy")
        .arg("-i")
        .arg(&media)
        .arg(out.join("bootvol-update.tar.sig"))
        .arg("::/bootvol-update.tar.sig"));
    media
}

/// The password the appliance shows on its console on first boot.
fn one_time_password(console: &str) -> Option<String> {
    console.lines().find_map(|line| {
        line.split_once("one-time password: ").map(|(_, rest)| rest.trim().to_owned())
    })
}

/// Replaces the image's `bootvol-data` partition by an ext4 file system holding the database
/// (`lib/bootvol.db`, written by `bootvol apply` on this machine) and, if `with_password`,
/// `etc/htpasswd` (user `admin`). No `etc/bootvol.toml`: the appliance seeds its default.
fn seed_data_partition(
    dir: &Path,
    disk: &Path,
    with_password: bool,
    inventory: &serde_json::Value,
) {
    let (start, bytes) = gpt_partition(disk, "bootvol-data");
    let build = dir.join("seed-build");
    std::fs::create_dir_all(&build).unwrap();
    let bootvol = Bootvol::configure(&build, Settings::loopback());
    bootvol.apply(inventory);
    let seed = dir.join("seed");
    std::fs::create_dir_all(seed.join("etc")).unwrap();
    std::fs::create_dir_all(seed.join("lib")).unwrap();
    std::fs::copy(build.join("bootvol.db"), seed.join("lib/bootvol.db")).unwrap();
    if with_password {
        let hash = bcrypt::hash(ADMIN_PASSWORD, 5).unwrap();
        std::fs::write(seed.join("etc/htpasswd"), format!("admin:{hash}\n")).unwrap();
    }
    let fs = dir.join("data.ext4");
    run(command("mkfs.ext4")
        .args(["-q", "-F", "-L", "bootvol-data", "-d"])
        .arg(&seed)
        .arg(&fs)
        .arg(format!("{}k", bytes / 1024)));
    let data = std::fs::read(&fs).unwrap();
    assert_eq!(data.len() as u64, bytes);
    let mut file = std::fs::OpenOptions::new().write(true).open(disk).unwrap();
    file.seek(SeekFrom::Start(start)).unwrap();
    file.write_all(&data).unwrap();
}

/// The byte offset and length of the GPT partition named `name`.
fn gpt_partition(disk: &Path, name: &str) -> (u64, u64) {
    let mut file = std::fs::File::open(disk).unwrap();
    let mut header = [0u8; 512];
    file.seek(SeekFrom::Start(512)).unwrap();
    file.read_exact(&mut header).unwrap();
    assert_eq!(&header[..8], b"EFI PART", "{}: no GPT", disk.display());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let (entries_lba, count, size) =
        (u64_at(&header, 72), u32_at(&header, 80) as usize, u32_at(&header, 84) as usize);
    let mut table = vec![0u8; count * size];
    file.seek(SeekFrom::Start(entries_lba * 512)).unwrap();
    file.read_exact(&mut table).unwrap();
    for entry in table.chunks(size) {
        let utf16: Vec<u16> = entry[56..128]
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .take_while(|&c| c != 0)
            .collect();
        if String::from_utf16_lossy(&utf16) == name {
            let (first, last) = (u64_at(entry, 32), u64_at(entry, 40));
            return (first * 512, (last - first + 1) * 512);
        }
    }
    panic!("{}: no partition named {name}", disk.display());
}

/// The namespace's network as one L2: a bridge `br0` (the host side's address, where tgtd
/// listens) with VM 1's tap (`TAP`) and VM 2's (`NODE_TAP`).
fn bridge(netns: &Netns) {
    let ns = Some(netns.name());
    let ip = |args: &[&str]| run(command_in(ns, "ip").args(args));
    ip(&["link", "add", "br0", "type", "bridge"]);
    ip(&["addr", "flush", "dev", TAP]);
    ip(&["addr", "add", &format!("{SERVER_IP}/24"), "dev", "br0"]);
    ip(&["-6", "addr", "add", "fd77::1/64", "dev", "br0", "nodad"]);
    ip(&["link", "set", TAP, "master", "br0"]);
    ip(&["tuntap", "add", "dev", NODE_TAP, "mode", "tap"]);
    ip(&["link", "set", NODE_TAP, "master", "br0", "up"]);
    ip(&["link", "set", "br0", "up"]);
}

/// dnsmasq on the bridge: addresses (the appliance's fixed) and IPv6 router advertisements,
/// nothing else (no boot option, no TFTP, no DNS).
fn start_dnsmasq(netns: &Netns, dir: &Path) -> Daemon {
    let text = format!(
        "port=0\nuser=root\ngroup=root\ninterface=br0\nbind-interfaces\n\
         dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h\n\
         dhcp-host={APPLIANCE_MAC},{APPLIANCE_IP}\n\
         dhcp-leasefile={}\nlog-dhcp\nenable-ra\ndhcp-range=::,constructor:br0,ra-only\n",
        dir.join("dnsmasq.leases").display()
    );
    crate::support::net::run_dnsmasq(netns, dir, &text)
}

/// VM 1: the appliance's disk (writable, the first boot device), its NIC without option ROM,
/// a QEMU monitor for the ACPI power button. Killed when dropped.
struct Appliance {
    qemu: Daemon,
    serial: PathBuf,
    monitor: PathBuf,
    started: Instant,
}

impl Appliance {
    fn start(dir: &Path, netns: &Netns, firmware: Firmware, disk: &Path, run_no: u32) -> Appliance {
        Appliance::start_with(dir, netns, firmware, disk, run_no, None)
    }

    /// [`Appliance::start`], with a second disk (`media`: an update stick) when given.
    fn start_with(
        dir: &Path,
        netns: &Netns,
        firmware: Firmware,
        disk: &Path,
        run_no: u32,
        media: Option<&Path>,
    ) -> Appliance {
        let serial = dir.join(format!("appliance-serial-{run_no}.log"));
        let monitor = dir.join(format!("mon-{run_no}.sock"));
        // One vCPU: under TCG with two, on a loaded 2-core CI machine, an interrupt once reached
        // the second vCPU after its vector had moved ("No irq handler for vector" on the
        // console), the serial console stopped and the shutdown hung at the power button.
        let machine =
            if firmware.secure_boot() { "q35,graphics=off,smm=on" } else { "q35,graphics=off" };
        let mut args: Vec<String> = vec![
            "-machine".into(),
            machine.into(),
            "-accel".into(),
            "tcg".into(),
            "-smp".into(),
            "1".into(),
            "-m".into(),
            "1024".into(),
            "-nodefaults".into(),
            "-display".into(),
            "none".into(),
            "-serial".into(),
            format!("file:{}", serial.display()),
            "-monitor".into(),
            format!("unix:{},server=on,wait=off", monitor.display()),
            "-drive".into(),
            format!("if=none,id=disk,format=raw,file={}", disk.display()),
            "-device".into(),
            "virtio-blk-pci,drive=disk,bootindex=0".into(),
            "-netdev".into(),
            format!("tap,id=n0,ifname={TAP},script=no,downscript=no"),
            "-device".into(),
            format!("virtio-net-pci,netdev=n0,mac={APPLIANCE_MAC},romfile="),
        ];
        if let Some(media) = media {
            args.extend([
                "-drive".into(),
                format!("if=none,id=media,format=raw,readonly=on,file={}", media.display()),
                "-device".into(),
                "virtio-blk-pci,drive=media".into(),
            ]);
        }
        if firmware != Firmware::Bios {
            let (code, store) = firmware.ovmf();
            let vars = dir.join("appliance-ovmf-vars.fd");
            if !vars.exists() {
                std::fs::copy(store, &vars).unwrap();
            }
            if firmware.secure_boot() {
                args.extend(Firmware::SECURE_FLASH.map(String::from));
            }
            args.extend([
                "-drive".into(),
                format!("if=pflash,format=raw,unit=0,readonly=on,file={code}"),
                "-drive".into(),
                format!("if=pflash,format=raw,unit=1,file={}", vars.display()),
            ]);
        }
        let mut cmd = command_in(Some(netns.name()), "qemu-system-x86_64");
        cmd.args(&args);
        let started = Instant::now();
        let qemu =
            Daemon::spawn("appliance", cmd, &dir.join(format!("appliance-qemu-{run_no}.log")));
        Appliance { qemu, serial, monitor, started }
    }

    fn serial(&self) -> String {
        std::fs::read(&self.serial)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Both nodes are still there (the API), and no second one-time password was shown.
    fn assert_kept(&self, api: &Api) {
        for node in NODES {
            let (status, body) = api.request("GET", &format!("/v1/nodes/{node}"), None);
            assert_eq!(status, 200, "{node} after a reboot: {body}\n{}", self.report());
        }
        assert!(
            one_time_password(&self.serial()).is_none(),
            "a one-time password again after a reboot\n{}",
            self.report()
        );
    }

    fn report(&self) -> String {
        format!("{}\n{}", tail(&self.serial, 8000), tail(self.qemu.log(), 1500))
    }

    /// Waits for bootvol to serve after a broken slot b was tried: asserts three kernel panics
    /// on the console, one per try, before the good slot served; the console.
    fn serves_after_three_panics(&mut self, name: &str, deadline: Duration) -> String {
        let ready = self.wait_for(SERVING, deadline);
        let console = self.serial();
        let panics = console.matches("Kernel panic").count();
        eprintln!(
            "{name}: slot b panicked {panics} times, then slot a served after {:.1} s",
            ready.as_secs_f64()
        );
        assert_eq!(panics, 3, "slot b should have been tried three times\n{}", self.report());
        console
    }

    /// Waits until `text` is on the console; the time since power-on.
    fn wait_for(&mut self, text: &str, deadline: Duration) -> Duration {
        self.wait_for_line(|line| line.contains(text), text, deadline)
    }

    /// Waits until a line of the console matches; the time since power-on.
    fn wait_for_line(
        &mut self,
        matches: impl Fn(&str) -> bool,
        text: &str,
        deadline: Duration,
    ) -> Duration {
        loop {
            if self.serial().lines().any(&matches) {
                return self.started.elapsed();
            }
            if let Some(status) = self.qemu.try_status() {
                panic!("the appliance's QEMU exited ({status}) before {text:?}\n{}", self.report());
            }
            assert!(
                self.started.elapsed() < deadline,
                "no {text:?} on the appliance's console within {deadline:?}\n{}",
                self.report()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Presses the power button (ACPI) and waits for the appliance to shut down and QEMU to exit.
    fn power_off(mut self, deadline: Duration) {
        let mut monitor = std::os::unix::net::UnixStream::connect(&self.monitor)
            .unwrap_or_else(|e| panic!("{}: {e}", self.monitor.display()));
        monitor.write_all(b"system_powerdown\n").unwrap();
        let status = self.qemu.wait_timeout(deadline);
        assert!(
            status.is_some(),
            "the appliance did not power off within {deadline:?} of the power button\n{}",
            self.report()
        );
    }
}

/// The appliance's API, from the namespace (curl inside it), with the admin's credentials, over
/// TLS trusting the certificate the console's fingerprint named (`cert`) and nothing else.
#[derive(Clone)]
struct Api {
    netns: String,
    password: String,
    cert: PathBuf,
    /// The admin page's cookies (curl's jar).
    jar: PathBuf,
}

impl Api {
    /// curl in the namespace, to `https://bootvol:6385` (the certificate's name) at the
    /// appliance's address.
    fn curl(&self) -> std::process::Command {
        let mut cmd = command_in(Some(&self.netns), "curl");
        cmd.args(["--resolve", &format!("bootvol:6385:{APPLIANCE_IP}"), "--cacert"])
            .arg(&self.cert);
        cmd
    }

    /// What plain HTTP to port 6385 gets: `None` when no HTTP answer came.
    fn plain_http_answers(&self) -> Option<String> {
        let out = command_in(Some(&self.netns), "curl")
            .args(["-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://{APPLIANCE_IP}:6385/v1/"))
            .output()
            .unwrap();
        let code = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.success() || code != "000").then_some(code)
    }

    /// An admin page form: (status, body), cookies kept in the jar.
    fn page(&self, method: &str, path: &str, form: &[(&str, &str)]) -> (u16, String) {
        let mut cmd = self.curl();
        cmd.args(["-sS", "--max-time", "20", "-X", method, "-b"])
            .arg(&self.jar)
            .arg("-c")
            .arg(&self.jar)
            .args(["-w", "\n%{http_code}"]);
        for (name, value) in form {
            cmd.args(["--data-urlencode", &format!("{name}={value}")]);
        }
        cmd.arg(format!("https://bootvol:6385{path}"));
        let out = run(&mut cmd);
        let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", out.trim()));
        (code.parse().unwrap_or(0), body.to_owned())
    }

    /// Logs in to the admin page with `current` and sets `new` on its password page.
    fn set_password_on_the_admin_page(&self, current: &str, new: &str) {
        let csrf = |body: &str| {
            let (_, rest) = body.split_once("name=\"csrf\" value=\"").expect("a CSRF token");
            rest.split('"').next().unwrap().to_owned()
        };
        let (status, body) = self.page("GET", "/admin/login", &[]);
        assert_eq!(status, 200, "{body}");
        let token = csrf(&body);
        let form = [("csrf", token.as_str()), ("username", "admin"), ("password", current)];
        let (status, body) = self.page("POST", "/admin/login", &form);
        assert_eq!(status, 303, "logging in with the one-time password: {body}");
        let (status, body) = self.page("GET", "/admin/password", &[]);
        assert_eq!(status, 200, "{body}");
        let token = csrf(&body);
        let form = [("csrf", token.as_str()), ("current", current), ("new", new), ("again", new)];
        let (status, body) = self.page("POST", "/admin/password", &form);
        assert_eq!(status, 303, "setting the admin password: {body}");
    }

    fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let mut cmd = self.curl();
        cmd.args(["-sS", "--max-time", "20", "-X", method, "-u"])
            .arg(format!("admin:{}", self.password))
            .args(["-H", "Content-Type: application/json", "-w", "\n%{http_code}"])
            // As Ironic's clients do: without it a request is at 1.1, where `name` is unknown.
            .args(["-H", "X-OpenStack-Ironic-API-Version: 1.38"]);
        if let Some(body) = body {
            cmd.args(["--data", body]);
        }
        cmd.arg(format!("https://bootvol:6385{path}"));
        let out = run(&mut cmd);
        let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", out.trim()));
        (code.parse().unwrap_or(0), body.to_owned())
    }
}
