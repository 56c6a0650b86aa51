//! Scenario 4, HBA boot with an image deployment: the deploy ramdisk of `image/` (built by
//! `image/build-deploy-ramdisk.sh` from the packages `.ci/e2e-deps.sh` unpacks) boots through
//! iPXE, finds the one disk of the VM's virtio-scsi "HBA" whose WWN and serial match the
//! root-device hints, writes and verifies the image, adds a `config-2` partition, and calls back.
//! The disks are files on the host, read back after the VM is gone.
//!
//! Two ways to drive it:
//! - through bootvol itself (`Driver::Bootvol`): `bootvol node deploy` of a `fake`-driver node
//!   with `instance_info.force_deployment`; bootvol serves the ramdisk's script, its config drive
//!   and takes the call-back, then the node is `active` and its script hands it back to the
//!   firmware, which boots the volume (or the node is `deploy failed`, with the ramdisk's reason).
//!   The full round and the refusal of hints no disk matches use this whenever the binary has
//!   `bootvol node deploy`, and the stand-in below otherwise;
//! - with the test as the conductor (`Driver::StandIn`), for the ramdisk's own contract (the
//!   exact call-back, its header and token): the test serves the ramdisk's iPXE script
//!   from bootvol's `/files/`, records the call-back on a listener of its own and, when it says
//!   `done`, points the node's boot file at bootvol's generic script.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::bootvol::{BIN, Bootvol, Settings};
use crate::support::process::{Daemon, command, run, run_quiet};
use crate::support::qemu::{Boot, EXIT_BIOS_MARKER, Firmware, Network, ScsiDisk, Vm};
use crate::support::{BASE, E2e, NIC_ROM, Need, begin, cache_dir, tail};
use crate::volumes::boot_sector;

const MIB: usize = 1024 * 1024;
/// The HBA's LUNs, as blank sparse files.
const DISK_BYTES: u64 = 128 * MIB as u64;
/// The boot volume's identity, and the decoy's.
const LUN_WWN: &str = "0x5000c50015ea71ac";
const LUN_SERIAL: &str = "vol-hba-deploy";
const DECOY_WWN: &str = "0x5000c50015ea71ad";
const DECOY_SERIAL: &str = "vol-hba-decoy";
const NODE: &str = "e2e-hba-deploy";

/// What a deployment needs beyond every boot's basics.
const DEPLOY: &[Need] = &[
    Need::Tool("mtype", "mtools"),
    Need::Tool("tar", "tar"),
    Need::Tool("sha256sum", "coreutils"),
    Need::Check(
        "the deploy ramdisk's packages in target/e2e-cache (kernel, busybox, sfdisk: \
         .ci/e2e-deps.sh unpacks them)",
        || {
            ["kernel", "busybox", "sfdisk"]
                .iter()
                .all(|d| cache_dir().join(d).join(".package").is_file())
        },
    ),
];

// ---- the ramdisk ------------------------------------------------------------------------------

/// Builds the ramdisk once per test run (`--offline`: from the cache only), as CI would:
/// `image/build-deploy-ramdisk.sh`. Returns its `vmlinuz` and `initrd.img`.
fn ramdisk() -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let out = BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = root.join("target/deploy-ramdisk");
        let result = command("bash")
            .arg(root.join("image/build-deploy-ramdisk.sh"))
            .arg("--offline")
            .arg("--cache")
            .arg(cache_dir())
            .arg("--out")
            .arg(&out)
            .output()
            .map_err(|e| e.to_string())?;
        if !result.status.success() {
            return Err(format!(
                "image/build-deploy-ramdisk.sh --offline failed:\n{}{}",
                String::from_utf8_lossy(&result.stdout),
                String::from_utf8_lossy(&result.stderr)
            ));
        }
        eprintln!("{}", String::from_utf8_lossy(&result.stdout).trim_end());
        Ok(out)
    });
    let out = out.as_ref().unwrap_or_else(|e| panic!("{e}"));
    (out.join("vmlinuz"), out.join("initrd.img"))
}

// ---- the call-back listener -------------------------------------------------------------------

/// One request the ramdisk sent.
#[derive(Debug, Clone)]
struct Callback {
    method: String,
    path: String,
    /// Names in lower case.
    headers: Vec<(String, String)>,
    body: Value,
}

impl Callback {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A small HTTP listener on host loopback (the VM's 10.0.2.2) that records every request and
/// calls `on_callback` before it answers `200`.
struct CallbackServer {
    port: u16,
    received: Arc<Mutex<Vec<Callback>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for CallbackServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackServer").field("port", &self.port).finish_non_exhaustive()
    }
}

impl CallbackServer {
    fn start(on_callback: impl Fn(&Callback) + Send + 'static) -> CallbackServer {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding a listener");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (received, stop) = (received.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                            if let Some(callback) = read_request(&mut stream) {
                                on_callback(&callback);
                                received.lock().unwrap().push(callback);
                            }
                            let _ = stream.write_all(
                                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                            );
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        CallbackServer { port, received, stop, thread: Some(thread) }
    }

    fn received(&self) -> Vec<Callback> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for CallbackServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Callback> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut words = line.split_whitespace();
    let (method, path) = (words.next()?.to_owned(), words.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    Some(Callback { method, path, headers, body })
}

// ---- images -----------------------------------------------------------------------------------

/// Deterministic filler, so that a misplaced or missing block changes the bytes.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A 16 MiB BIOS disk image: the marker boot sector, and one Linux partition from 1 MiB to the
/// image's end, full of pattern bytes.
fn mbr_image(marker: &str) -> Vec<u8> {
    let len = 16 * MIB;
    let mut image = pattern(0x5eed_0001, len);
    let mut sector = boot_sector(marker, false, None);
    let (start, sectors) = (2048u32, u32::try_from(len / 512).unwrap() - 2048);
    let mut entry = vec![0x00, 0xFE, 0xFF, 0xFF, 0x83, 0xFE, 0xFF, 0xFF];
    entry.extend_from_slice(&start.to_le_bytes());
    entry.extend_from_slice(&sectors.to_le_bytes());
    sector[446..462].copy_from_slice(&entry);
    image[..512].copy_from_slice(&sector);
    image
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// A GUID in its on-disk byte order (the first three fields little-endian).
fn guid(text: &str) -> [u8; 16] {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    let mut bytes: Vec<u8> =
        (0..16).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    bytes[0..4].reverse();
    bytes[4..6].reverse();
    bytes[6..8].reverse();
    bytes.try_into().unwrap()
}

const LINUX_FS: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
const BASIC_DATA: &str = "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7";
const GPT_ENTRIES: usize = 128 * 128;

fn gpt_header(my_lba: u64, alternate: u64, entries_lba: u64, sectors: u64, crc: u32) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[0..8].copy_from_slice(b"EFI PART");
    h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
    h[12..16].copy_from_slice(&92u32.to_le_bytes());
    h[24..32].copy_from_slice(&my_lba.to_le_bytes());
    h[32..40].copy_from_slice(&alternate.to_le_bytes());
    h[40..48].copy_from_slice(&34u64.to_le_bytes());
    h[48..56].copy_from_slice(&(sectors - 34).to_le_bytes());
    h[56..72].copy_from_slice(&guid("B0E2E000-0000-4000-8000-00000000D15C"));
    h[72..80].copy_from_slice(&entries_lba.to_le_bytes());
    h[80..84].copy_from_slice(&128u32.to_le_bytes());
    h[84..88].copy_from_slice(&128u32.to_le_bytes());
    h[88..92].copy_from_slice(&crc.to_le_bytes());
    let header_crc = crc32(&h[..92]);
    h[16..20].copy_from_slice(&header_crc.to_le_bytes());
    h
}

/// An 8 MiB GPT disk image (a cloud image's layout): the marker boot code in the protective
/// MBR, a 2 MiB partition at 1 MiB and a second one up to the last usable sector, the backup
/// GPT at the image's end.
fn gpt_image(marker: &str) -> Vec<u8> {
    let len = 8 * MIB;
    let sectors = (len / 512) as u64;
    let mut image = pattern(0x5eed_0002, len);
    let mut mbr = boot_sector(marker, false, None);
    let mut entry = vec![0x00, 0x00, 0x02, 0x00, 0xEE, 0xFF, 0xFF, 0xFF];
    entry.extend_from_slice(&1u32.to_le_bytes());
    entry.extend_from_slice(&u32::try_from(sectors - 1).unwrap().to_le_bytes());
    mbr[446..462].copy_from_slice(&entry);
    image[..512].copy_from_slice(&mbr);
    let mut entries = vec![0u8; GPT_ENTRIES];
    for (i, (first, last, name)) in
        [(2048u64, 6143u64, "bve2e-boot"), (6144, sectors - 34, "bve2e-root")].iter().enumerate()
    {
        let e = &mut entries[i * 128..(i + 1) * 128];
        e[0..16].copy_from_slice(&guid(LINUX_FS));
        e[16..32].copy_from_slice(&guid(&format!("B0E2E000-0000-4000-8000-00000000000{}", i + 1)));
        e[32..40].copy_from_slice(&first.to_le_bytes());
        e[40..48].copy_from_slice(&last.to_le_bytes());
        for (j, unit) in name.encode_utf16().enumerate() {
            e[56 + 2 * j..58 + 2 * j].copy_from_slice(&unit.to_le_bytes());
        }
    }
    let crc = crc32(&entries);
    image[512..1024].copy_from_slice(&gpt_header(1, sectors - 1, 2, sectors, crc));
    image[1024..1024 + GPT_ENTRIES].copy_from_slice(&entries);
    let backup_entries = (sectors - 33) as usize * 512;
    image[backup_entries..backup_entries + GPT_ENTRIES].copy_from_slice(&entries);
    image[len - 512..].copy_from_slice(&gpt_header(sectors - 1, 1, sectors - 33, sectors, crc));
    image
}

fn sha256_of(path: &Path) -> String {
    run(command("sha256sum").arg(path)).split_whitespace().next().unwrap().to_owned()
}

fn blank_disk(path: &Path) -> PathBuf {
    let file = std::fs::File::create(path).unwrap();
    file.set_len(DISK_BYTES).unwrap();
    path.to_owned()
}

fn is_blank(path: &Path) -> bool {
    let mut file = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; MIB];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            return total == DISK_BYTES;
        }
        if buf[..n].iter().any(|b| *b != 0) {
            return false;
        }
        total += n as u64;
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// The guest's name of the disk whose serial is `serial`, from the ramdisk's list on the
/// console (`disks: sda (wwn naa..., serial ..., 128 MiB); sdb (...)`).
fn guest_disk(serial_log: &str, serial: &str) -> Option<String> {
    let line =
        serial_log.lines().find(|l| l.contains("bootvol-deploy") && l.contains("disks: "))?;
    let list = line.split_once("disks: ")?.1;
    list.split("; ")
        .find(|item| item.contains(&format!("serial {serial},")))
        .and_then(|item| item.split_whitespace().next())
        .map(|name| format!("/dev/{name}"))
}

// ---- one deployment ---------------------------------------------------------------------------

/// A config drive, as the conductor serves it.
enum ConfigDrive {
    /// Files (path in the drive, contents), packed as a tar archive.
    Tar(Vec<(&'static str, String)>),
    /// The bytes of a file system image.
    Image(Vec<u8>),
}

/// Who plays the conductor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    /// `bootvol node deploy` and `bootvol serve`.
    Bootvol,
    /// The test (a static iPXE script, a call-back listener).
    StandIn,
}

/// `bootvol node deploy` exists (the conductor has landed).
fn bootvol_deploys() -> bool {
    run_quiet(command(BIN).args(["node", "deploy", "--help"]))
}

struct Case {
    name: &'static str,
    driver: Driver,
    mac: &'static str,
    image: Vec<u8>,
    /// (boot volume, decoy)
    disks: [ScsiDisk; 2],
    /// `bootvol.root_*` hints.
    hints: Vec<(&'static str, &'static str)>,
    configdrive: Option<ConfigDrive>,
    /// `bootvol.reboot=1`, and the VM may reboot.
    reboot: bool,
    extra_args: Vec<String>,
    watch: Vec<String>,
    deadline: Duration,
}

struct Deployed {
    boot: Boot,
    /// With the stand-in: what the ramdisk reported.
    callbacks: Vec<Callback>,
    token: String,
    image_path: PathBuf,
    /// Through bootvol: the node afterwards (`bootvol node show --json`), and how
    /// `bootvol node deploy` ended (`None`: still running after the VM).
    node: Option<Value>,
    node_deploy: Option<std::process::ExitStatus>,
    logs: Vec<String>,
}

fn disks(e2e: &E2e, lun_serial: &'static str, decoy_serial: &'static str) -> [ScsiDisk; 2] {
    [
        ScsiDisk {
            path: blank_disk(&e2e.path("lun.img")),
            wwn: LUN_WWN.into(),
            serial: lun_serial.into(),
            bootindex: Some(2),
        },
        ScsiDisk {
            path: blank_disk(&e2e.path("decoy.img")),
            wwn: DECOY_WWN.into(),
            serial: decoy_serial.into(),
            bootindex: None,
        },
    ]
}

fn deploy(e2e: &E2e, case: Case) -> Deployed {
    match case.driver {
        Driver::Bootvol => deploy_through_bootvol(e2e, case),
        Driver::StandIn => deploy_with_stand_in(e2e, case),
    }
}

/// Everything through bootvol: `node deploy` of a `fake`-driver node (bootvol cannot power the
/// VM: the test starts it once the node waits for its call-back, and the ramdisk reboots it).
fn deploy_through_bootvol(e2e: &E2e, case: Case) -> Deployed {
    let (vmlinuz, initrd) = ramdisk();
    let mut settings = Settings::loopback();
    if !case.extra_args.is_empty() {
        settings.extra_config = format!(
            "\n[deploy]\nkernel_append_params = \"console=ttyS0 {}\"\n",
            case.extra_args.join(" ")
        );
    }
    let mut bootvol = Bootvol::configure(e2e.dir.path(), settings);
    let public = bootvol.settings.public_url.clone();
    let files = bootvol.files_root.clone();
    for dir in ["deploy", "images"] {
        std::fs::create_dir_all(files.join(dir)).unwrap();
    }
    // Where `[deploy] kernel` and `ramdisk` point by default.
    std::fs::copy(&vmlinuz, files.join("deploy/vmlinuz")).unwrap();
    std::fs::copy(&initrd, files.join("deploy/initrd.img")).unwrap();
    let image_path = files.join("images/image.raw");
    std::fs::write(&image_path, &case.image).unwrap();
    let sha256 = sha256_of(&image_path);
    let mut instance_info = json!({
        "force_deployment": true,
        "image_source": "images/image.raw",
        "image_checksum": format!("sha256:{sha256}"),
    });
    match &case.configdrive {
        Some(ConfigDrive::Tar(entries)) => {
            // Ironic's JSON form: bootvol packs it as openstack/latest/... in a tar archive.
            let mut drive = serde_json::Map::new();
            for (path, contents) in entries {
                match *path {
                    "openstack/latest/meta_data.json" => {
                        drive.insert("meta_data".into(), serde_json::from_str(contents).unwrap())
                    }
                    "openstack/latest/user_data" => {
                        drive.insert("user_data".into(), json!(contents))
                    }
                    other => panic!("bootvol's config drives do not hold {other}"),
                };
            }
            instance_info["configdrive"] = Value::Object(drive);
        }
        Some(ConfigDrive::Image(_)) => panic!("only tar config drives through bootvol here"),
        None => {}
    }
    let hints: serde_json::Map<String, Value> =
        case.hints.iter().map(|(hint, value)| ((*hint).to_owned(), json!(value))).collect();
    bootvol.apply(&json!({"nodes": [{
        "name": NODE,
        "driver": "fake",
        "storage_interface": "external",
        "provision_state": "available",
        "properties": {"capabilities": "hba_boot:true"},
        "instance_info": instance_info,
        "ports": [{"address": case.mac}],
        "volume_connectors": [{"type": "wwpn", "connector_id": "20000025b500e204"}],
        "volume_targets": [{"volume_type": "fibre_channel", "boot_index": 0,
            "volume_id": LUN_SERIAL, "properties": {"target_wwn": &LUN_WWN[2..], "target_lun": 0},
            "extra": hints}]
    }]}));
    bootvol.serve();

    let mut cmd = command(BIN);
    cmd.arg("--config").arg(&bootvol.config).args(["node", "deploy", NODE]);
    let mut node_deploy = Daemon::spawn("bootvol node deploy", cmd, &e2e.path("node-deploy.log"));
    // The VM starts once its script is the ramdisk's.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !bootvol.render(case.mac).contains("bootvol.image_url=") {
        if node_deploy.try_status().is_some() || std::time::Instant::now() >= deadline {
            panic!(
                "the node did not reach wait call-back\n{}\n{}",
                tail(node_deploy.log(), 3000),
                bootvol.log()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let script = bootvol.assert_serves_render(case.mac);
    assert!(script.contains(&format!("bootvol.image_sha256={sha256}")), "{script}");
    // The one-time token is in no script: the ramdisk asks for it once.
    assert!(script.contains("bootvol.token_url="), "{script}");
    assert!(!script.contains("token="), "{script}");

    let mut vm = Vm::new(
        Firmware::Bios,
        Network::User { bootfile: format!("{public}/boot.ipxe") },
        case.mac,
    );
    vm.memory_mib = 512;
    vm.scsi_disks = case.disks.to_vec();
    vm.allow_reboot = case.reboot;
    let watch: Vec<&str> = case.watch.iter().map(String::as_str).collect();
    let boot = vm.boot(e2e.dir.path(), &watch, case.deadline);
    let finished = node_deploy.wait_timeout(Duration::from_secs(20));
    let logs = vec![bootvol.log(), tail(node_deploy.log(), 3000)];
    let shown = run(command(BIN)
        .arg("--config")
        .arg(&bootvol.config)
        .args(["node", "show", NODE, "--json"]));
    let node = serde_json::from_str(&shown).unwrap_or_else(|e| panic!("{e}: {shown}"));
    bootvol.stop();
    Deployed {
        boot,
        callbacks: Vec::new(),
        token: String::new(),
        image_path,
        node: Some(node),
        node_deploy: finished,
        logs,
    }
}

/// The test as the conductor: bootvol serves the files and, once the node is deployed, the HBA
/// node's script; the test serves the ramdisk's script and takes the call-back.
fn deploy_with_stand_in(e2e: &E2e, case: Case) -> Deployed {
    let (vmlinuz, initrd) = ramdisk();
    let mut bootvol = Bootvol::configure(e2e.dir.path(), Settings::loopback());
    let public = bootvol.settings.public_url.clone();
    let files = bootvol.files_root.clone();
    for dir in ["deploy", "images"] {
        std::fs::create_dir_all(files.join(dir)).unwrap();
    }
    std::fs::copy(&vmlinuz, files.join("deploy/vmlinuz")).unwrap();
    std::fs::copy(&initrd, files.join("deploy/initrd.img")).unwrap();
    let image_path = files.join("images/image.raw");
    std::fs::write(&image_path, &case.image).unwrap();
    let sha256 = sha256_of(&image_path);
    bootvol.apply(&json!({"nodes": [{
        "name": NODE,
        "storage_interface": "external",
        "provision_state": "active",
        "properties": {"capabilities": "hba_boot:true"},
        "ports": [{"address": case.mac}],
        "volume_connectors": [{"type": "wwpn", "connector_id": "20000025b500e204"}],
        "volume_targets": [{"volume_type": "fibre_channel", "boot_index": 0,
            "volume_id": LUN_SERIAL, "properties": {"target_wwn": &LUN_WWN[2..], "target_lun": 0}}]
    }]}));
    bootvol.serve();

    // The node's boot file: the ramdisk's script until the call-back says `done`, then
    // bootvol's generic script (the HBA node's: back to the firmware).
    let boot_script = files.join("deploy/boot.ipxe");
    let callbacks = {
        let (boot_script, public) = (boot_script.clone(), public.clone());
        CallbackServer::start(move |callback| {
            if callback.body["status"] == "done" {
                std::fs::write(&boot_script, format!("#!ipxe\nchain {public}/boot.ipxe\n"))
                    .unwrap();
            }
        })
    };
    let token = uuid::Uuid::new_v4().simple().to_string();
    let mut args = vec![
        "initrd=initrd.img".to_owned(),
        "console=ttyS0".to_owned(),
        format!("bootvol.image_url={public}/files/images/image.raw"),
        format!("bootvol.image_sha256={sha256}"),
    ];
    for (hint, value) in &case.hints {
        args.push(format!("bootvol.root_{hint}={value}"));
    }
    match &case.configdrive {
        Some(ConfigDrive::Tar(entries)) => {
            let tree = e2e.path("configdrive");
            for (path, contents) in entries {
                let file = tree.join(path);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(file, contents).unwrap();
            }
            run(command("tar")
                .arg("-cf")
                .arg(files.join("images/configdrive.tar"))
                .arg("-C")
                .arg(&tree)
                .arg("openstack"));
            args.push(format!("bootvol.configdrive_url={public}/files/images/configdrive.tar"));
            args.push("bootvol.configdrive_format=tar".into());
        }
        Some(ConfigDrive::Image(bytes)) => {
            std::fs::write(files.join("images/configdrive.img"), bytes).unwrap();
            args.push(format!("bootvol.configdrive_url={public}/files/images/configdrive.img"));
            args.push("bootvol.configdrive_format=image".into());
        }
        None => {}
    }
    args.push(format!(
        "bootvol.callback_url=http://10.0.2.2:{}/deploy/{NODE}/callback",
        callbacks.port
    ));
    args.push(format!("bootvol.callback_token={token}"));
    if case.reboot {
        args.push("bootvol.reboot=1".into());
    }
    args.extend(case.extra_args.iter().cloned());
    std::fs::write(
        &boot_script,
        format!(
            "#!ipxe\necho BVE2E-DEPLOY: {name}\n\
             kernel {public}/files/deploy/vmlinuz {args} || goto failed\n\
             initrd {public}/files/deploy/initrd.img || goto failed\n\
             boot || goto failed\n\
             :failed\necho BVE2E-DEPLOY-SCRIPT-FAILED\nexit 1\n",
            name = case.name,
            args = args.join(" ")
        ),
    )
    .unwrap();

    let mut vm = Vm::new(
        Firmware::Bios,
        Network::User { bootfile: format!("{public}/files/deploy/boot.ipxe") },
        case.mac,
    );
    vm.memory_mib = 512;
    vm.scsi_disks = case.disks.to_vec();
    vm.allow_reboot = case.reboot;
    let watch: Vec<&str> = case.watch.iter().map(String::as_str).collect();
    let boot = vm.boot(e2e.dir.path(), &watch, case.deadline);
    let logs = vec![bootvol.log()];
    bootvol.stop();
    Deployed {
        boot,
        callbacks: callbacks.received(),
        token,
        image_path,
        node: None,
        node_deploy: None,
        logs,
    }
}

impl Deployed {
    /// The one call-back, checked for the token; panics with the logs otherwise.
    fn callback(&self) -> &Callback {
        let [callback] = self.callbacks.as_slice() else {
            panic!(
                "expected exactly one call-back, got {:?}\n{}",
                self.callbacks,
                self.boot.report(&self.logs)
            );
        };
        assert_eq!(callback.method, "POST");
        assert_eq!(callback.path, format!("/deploy/{NODE}/callback"));
        assert_eq!(callback.header("x-bootvol-token"), Some(self.token.as_str()), "{callback:?}");
        assert_eq!(callback.header("content-type"), Some("application/json"), "{callback:?}");
        callback
    }

    /// Asserts a `done` call-back for the boot volume (as the guest named it), with the image's
    /// SHA-256 and length; through bootvol, that the node is `active`, without
    /// `force_deployment`, with that report as its deployed image.
    fn assert_done(&self, image: &[u8]) {
        let lun = guest_disk(&self.boot.serial, LUN_SERIAL).unwrap_or_else(|| {
            panic!("no disk list on the console\n{}", self.boot.report(&self.logs))
        });
        let sha256 = sha256_of(&self.image_path);
        let Some(node) = &self.node else {
            let expected =
                json!({"status": "done", "disk": lun, "sha256": sha256, "bytes": image.len()});
            assert_eq!(self.callback().body, expected, "\n{}", self.boot.report(&self.logs));
            return;
        };
        assert!(
            self.node_deploy.is_some_and(|s| s.success()),
            "bootvol node deploy: {:?}\n{}",
            self.node_deploy,
            self.boot.report(&self.logs)
        );
        let node = &node["node"];
        assert_eq!(node["provision_state"], "active", "{node:#}");
        assert!(node["last_error"].is_null(), "{node:#}");
        assert!(node["instance_info"].get("force_deployment").is_none(), "{node:#}");
        assert!(node["driver_internal_info"].get("deploy").is_none(), "{node:#}");
        assert_eq!(
            node["driver_internal_info"]["deployed_image"],
            json!({"disk": lun, "sha256": sha256, "bytes": image.len()}),
            "{node:#}"
        );
    }

    /// Asserts a `failed` call-back whose message contains `why` (through bootvol: the node is
    /// `deploy failed` with that message as its last error), shown on the console too. Returns
    /// the message.
    fn assert_failed(&self, why: &str) -> String {
        let message = match &self.node {
            None => {
                let callback = self.callback();
                assert_eq!(callback.body["status"], "failed", "{callback:?}");
                callback.body["message"].as_str().unwrap_or_default().to_owned()
            }
            Some(node) => {
                assert!(
                    self.node_deploy.is_some_and(|s| !s.success()),
                    "bootvol node deploy of a failed deployment: {:?}\n{}",
                    self.node_deploy,
                    self.boot.report(&self.logs)
                );
                let node = &node["node"];
                assert_eq!(node["provision_state"], "deploy failed", "{node:#}");
                let error = node["last_error"].as_str().unwrap_or_default();
                error
                    .strip_prefix("the deploy ramdisk failed: ")
                    .unwrap_or_else(|| panic!("last_error: {error:?}"))
                    .to_owned()
            }
        };
        assert!(message.contains(why), "message {message:?} lacks {why:?}");
        assert!(
            self.boot.serial.contains(&format!("BOOTVOL-DEPLOY-FAILED: {message}")),
            "the console does not show the failure\n{}",
            self.boot.report(&self.logs)
        );
        message
    }
}

// ---- the tests --------------------------------------------------------------------------------

/// The full round: an MBR image and a tar config drive onto the LUN with this WWN (given in
/// upper case, as an operator might) and serial; `done` reported with the token; the VM reboots,
/// tries the network first (bootvol now hands the HBA node back to the firmware) and boots the
/// written volume, whose boot sector prints the marker.
#[test]
fn hba_deploy_writes_image_and_config_drive_then_boots_the_volume() {
    let name = "hba_deploy_writes_image_and_config_drive_then_boots_the_volume";
    let Some(e2e) = begin(name, &[BASE, NIC_ROM, DEPLOY]) else { return };
    let marker = "BVE2E-HBA-DEPLOYED-VOLUME-BOOTED";
    // Compact, keys in order: as bootvol writes Ironic's JSON config drive.
    let meta_data = r#"{"name":"e2e-hba","uuid":"b0e2e000-0000-4000-8000-000000000004"}"#;
    let user_data = "#cloud-config\nhostname: e2e-hba\n";
    let image = mbr_image(marker);
    let handed_back = format!("bootvol: {NODE}: the HBA boots the volume of this node");
    let driver = if bootvol_deploys() { Driver::Bootvol } else { Driver::StandIn };
    eprintln!("{name}: the conductor is {driver:?}");
    let deployed = deploy(
        &e2e,
        Case {
            name,
            driver,
            mac: "52:54:00:e2:08:01",
            image: image.clone(),
            disks: disks(&e2e, LUN_SERIAL, DECOY_SERIAL),
            hints: vec![("wwn", "0x5000C50015EA71AC"), ("serial", LUN_SERIAL)],
            configdrive: Some(ConfigDrive::Tar(vec![
                ("openstack/latest/meta_data.json", meta_data.to_owned()),
                ("openstack/latest/user_data", user_data.to_owned()),
            ])),
            reboot: true,
            extra_args: vec![],
            watch: vec![
                "BOOTVOL-DEPLOY-STARTED".into(),
                "BOOTVOL-DEPLOY-DONE".into(),
                handed_back.clone(),
                marker.into(),
            ],
            deadline: Duration::from_secs(150),
        },
    );
    let boot = &deployed.boot;
    boot.assert_marker(marker, EXIT_BIOS_MARKER, &deployed.logs);
    deployed.assert_done(&image);
    let times: Vec<Duration> =
        ["BOOTVOL-DEPLOY-STARTED", "BOOTVOL-DEPLOY-DONE", &handed_back, marker]
            .iter()
            .map(|w| {
                boot.seen(w)
                    .unwrap_or_else(|| panic!("never saw {w:?}\n{}", boot.report(&deployed.logs)))
            })
            .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "out of order: {times:?}");
    eprintln!(
        "deploy: ramdisk up at {:.1} s, image written and reported at {:.1} s, volume booted at {:.1} s",
        times[0].as_secs_f64(),
        times[1].as_secs_f64(),
        times[3].as_secs_f64()
    );

    // The volume holds the image; only the partition table's second entry is new.
    let lun = std::fs::read(e2e.path("lun.img")).unwrap();
    assert!(
        lun[..462] == image[..462] && lun[478..image.len()] == image[478..],
        "image bytes differ"
    );
    let entry = &lun[462..478];
    assert_eq!(entry[4], 0x0C, "the config drive partition is FAT32 (LBA)");
    let (start, sectors) = (u32_at(entry, 8) as usize, u32_at(entry, 12) as usize);
    assert_eq!((start, sectors), (image.len() / 512, 64 * MIB / 512), "config drive: start, size");
    let fat = &lun[start * 512..(start + sectors) * 512];
    assert_eq!(&fat[71..82], b"config-2\0\0\0", "the FAT32 volume label");
    assert_eq!(&fat[82..90], b"FAT32   ");
    let drive = format!("{}@@{}", e2e.path("lun.img").display(), start * 512);
    for (path, contents) in
        [("openstack/latest/meta_data.json", meta_data), ("openstack/latest/user_data", user_data)]
    {
        let got = run(command("mtype").env("MTOOLS_SKIP_CHECK", "1").args([
            "-i",
            &drive,
            &format!("::/{path}"),
        ]));
        assert_eq!(got, contents, "{path} on the config drive");
    }
    assert!(lun[(start + sectors) * 512..].iter().all(|b| *b == 0), "bytes past the config drive");
    assert!(is_blank(&e2e.path("decoy.img")), "the decoy disk was written to");
}

/// A GPT image (the backup GPT moved to the disk's end) and a config drive given as an image,
/// found by serial alone; no reboot asked for, so the ramdisk powers the node off.
#[test]
fn hba_deploy_gpt_image_with_config_drive_image() {
    let name = "hba_deploy_gpt_image_with_config_drive_image";
    let Some(e2e) = begin(name, &[BASE, NIC_ROM, DEPLOY]) else { return };
    let image = gpt_image("BVE2E-GPT-VOLUME-BOOTED");
    let mut drive = b"BVE2E-CONFIG-DRIVE-IMAGE\n".to_vec();
    drive.extend(pattern(0x5eed_0003, 300 * 1024));
    let deployed = deploy(
        &e2e,
        Case {
            name,
            driver: Driver::StandIn,
            mac: "52:54:00:e2:08:02",
            image: image.clone(),
            disks: disks(&e2e, LUN_SERIAL, DECOY_SERIAL),
            hints: vec![("serial", LUN_SERIAL)],
            configdrive: Some(ConfigDrive::Image(drive.clone())),
            reboot: false,
            extra_args: vec![],
            watch: vec!["BOOTVOL-DEPLOY-DONE".into()],
            deadline: Duration::from_secs(90),
        },
    );
    deployed.boot.assert_marker("BOOTVOL-DEPLOY-DONE", 0, &deployed.logs);
    deployed.assert_done(&image);

    let lun = std::fs::read(e2e.path("lun.img")).unwrap();
    let sectors = DISK_BYTES / 512;
    // The image's partitions are intact (from 1 MiB to where its backup GPT began).
    let data = MIB..image.len() - 33 * 512;
    assert!(lun[data.clone()] == image[data], "the image's partitions differ");
    // The primary GPT now describes the whole disk and has a third partition, config-2.
    let header = &lun[512..1024];
    assert_eq!(&header[..8], b"EFI PART");
    assert_eq!(u32_at(header, 16), crc32(&[&header[..16], &[0; 4], &header[20..92]].concat()));
    assert_eq!(u64_at(header, 32), sectors - 1, "the backup GPT is at the disk's end");
    assert_eq!(u64_at(header, 48), sectors - 34, "the last usable sector");
    let entries = &lun[1024..1024 + GPT_ENTRIES];
    assert_eq!(u32_at(header, 88), crc32(entries));
    assert!(entries[..256] == image[1024..1024 + 256], "the image's partition entries changed");
    let third = &entries[256..384];
    assert_eq!(third[..16], guid(BASIC_DATA), "config-2's partition type");
    let name_units: Vec<u16> = third[56..128]
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|u| *u != 0)
        .collect();
    assert_eq!(String::from_utf16(&name_units).unwrap(), "config-2");
    let (first, last) = (u64_at(third, 32) as usize, u64_at(third, 40) as usize);
    assert_eq!(first, image.len() / 512, "config-2 starts at the first MiB after the image");
    assert_eq!(last - first + 1, MIB / 512, "config-2 is its image, rounded up to a MiB");
    assert!(lun[first * 512..first * 512 + drive.len()] == drive[..], "config-2's bytes");
    let backup = &lun[lun.len() - 512..];
    assert_eq!(&backup[..8], b"EFI PART", "the backup GPT header");
    assert_eq!(u64_at(backup, 72), sectors - 33);
    assert!(lun[lun.len() - 33 * 512..lun.len() - 33 * 512 + GPT_ENTRIES] == *entries);
    assert!(is_blank(&e2e.path("decoy.img")), "the decoy disk was written to");
}

/// Hints no disk matches all of (the boot volume's WWN, in `naa.` form, with a wrong serial):
/// `failed`, with the disks seen in the message, and nothing written anywhere.
#[test]
fn hba_deploy_refuses_when_no_disk_matches() {
    let name = "hba_deploy_refuses_when_no_disk_matches";
    let Some(e2e) = begin(name, &[BASE, NIC_ROM, DEPLOY]) else { return };
    let deployed = deploy(
        &e2e,
        Case {
            name,
            driver: if bootvol_deploys() { Driver::Bootvol } else { Driver::StandIn },
            mac: "52:54:00:e2:08:03",
            image: mbr_image("BVE2E-MUST-NOT-BE-WRITTEN"),
            disks: disks(&e2e, LUN_SERIAL, DECOY_SERIAL),
            hints: vec![("wwn", "naa.5000c50015ea71ac"), ("serial", "vol-somewhere-else")],
            configdrive: None,
            reboot: true,
            extra_args: vec!["bootvol.disk_wait=5".into()],
            watch: vec!["BOOTVOL-DEPLOY-FAILED".into()],
            deadline: Duration::from_secs(90),
        },
    );
    deployed.boot.assert_marker("BOOTVOL-DEPLOY-FAILED", 0, &deployed.logs);
    let message = deployed.assert_failed("no disk matches the root device hints");
    assert!(message.contains(&format!("serial {LUN_SERIAL}")), "the disks seen: {message}");
    assert!(is_blank(&e2e.path("lun.img")), "the boot volume was written to");
    assert!(is_blank(&e2e.path("decoy.img")), "the decoy disk was written to");
}

/// Two disks with the hinted serial (say, two paths or a cloned volume): the ramdisk refuses to
/// choose.
#[test]
fn hba_deploy_refuses_two_matching_disks() {
    let name = "hba_deploy_refuses_two_matching_disks";
    let Some(e2e) = begin(name, &[BASE, NIC_ROM, DEPLOY]) else { return };
    let deployed = deploy(
        &e2e,
        Case {
            name,
            driver: Driver::StandIn,
            mac: "52:54:00:e2:08:04",
            image: mbr_image("BVE2E-MUST-NOT-BE-WRITTEN"),
            disks: disks(&e2e, LUN_SERIAL, LUN_SERIAL),
            hints: vec![("serial", LUN_SERIAL)],
            configdrive: None,
            reboot: true,
            extra_args: vec![],
            watch: vec!["BOOTVOL-DEPLOY-FAILED".into()],
            deadline: Duration::from_secs(90),
        },
    );
    deployed.boot.assert_marker("BOOTVOL-DEPLOY-FAILED", 0, &deployed.logs);
    deployed.assert_failed("2 disks match the root device hints (serial=vol-hba-deploy)");
    assert!(is_blank(&e2e.path("lun.img")), "a matching disk was written to");
    assert!(is_blank(&e2e.path("decoy.img")), "a matching disk was written to");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt_images_are_consistent() {
        let image = gpt_image("BVE2E-UNIT");
        let header = &image[512..1024];
        assert_eq!(u32_at(header, 16), crc32(&[&header[..16], &[0; 4], &header[20..92]].concat()));
        assert_eq!(u32_at(header, 88), crc32(&image[1024..1024 + GPT_ENTRIES]));
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(guid(LINUX_FS)[..4], [0xAF, 0x3D, 0xC6, 0x0F]);
    }

    #[test]
    fn the_guest_disk_is_read_from_the_console() {
        let log = "bootvol-deploy [9.7 s]: disks: sda (wwn naa.5000c50015ea71ad, serial vol-x, 128 MiB); \
                   sdb (wwn naa.5000c50015ea71ac, serial vol-hba-deploy, 128 MiB)\n";
        assert_eq!(guest_disk(log, "vol-hba-deploy").as_deref(), Some("/dev/sdb"));
        assert_eq!(guest_disk(log, "vol-y"), None);
    }
}
