//! `app::serve` on port 0, driven by a real HTTP client: boot scripts from the snapshot, files
//! with Range and confinement, live updates from another connection, graceful shutdown.

use std::path::Path;
use std::time::{Duration, Instant};

use bootvol_core::config::Config;
use bootvol_core::inventory::{self, Format};
use bootvol_db::Db;

use crate::support::{config_text, fixture, render_mac, scenario_db};

pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) tftp: std::net::SocketAddr,
    /// Stops `serve` and joins it when the test ends (its error fails the test).
    serve: crate::support::ServeGuard,
}

impl Server {
    /// Applies the scenario inventory to a database in `dir`, then serves it on 127.0.0.1:0.
    pub(crate) fn start(dir: &Path) -> Server {
        Server::start_from(&config_text(dir))
    }

    fn start_from(config_text: &str) -> Server {
        let config = Config::from_toml(config_text, "test").unwrap();
        let text = std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap();
        let specs = inventory::parse(&text, Format::Json, &config).unwrap();
        Db::open_config(&config.database).unwrap().apply_inventory(&specs, false).unwrap();
        // Returns once `/readyz` says the boot listeners are up.
        let (bound, serve) = crate::support::serve_guarded(config, false);
        Server { base: format!("http://{}", bound.boot), tftp: bound.tftp, serve }
    }

    fn stop(self) -> Result<(), String> {
        self.serve.stop()
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// Status, content type and body of a GET.
pub(crate) fn get(url: &str) -> (u16, String, Vec<u8>) {
    get_with(url, None)
}

fn get_with(url: &str, range: Option<&str>) -> (u16, String, Vec<u8>) {
    let mut request = agent().get(url);
    if let Some(range) = range {
        request = request.header("Range", range);
    }
    match request.call() {
        Ok(mut response) => {
            let status = response.status().as_u16();
            let kind = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let body = response.body_mut().read_to_vec().unwrap();
            (status, kind, body)
        }
        Err(_) => (0, String::new(), Vec::new()),
    }
}

#[test]
fn per_mac_scripts_are_exactly_what_render_prints_in_any_mac_form() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let config = Config::from_toml(&config_text(dir.path()), "t").unwrap();
    let db = scenario_db(&config);
    for (mac, forms) in [
        (
            "52:54:00:00:01:01",
            ["52-54-00-00-01-01", "52:54:00:00:01:01", "5254.0000.0101", "525400000101"],
        ),
        (
            "52:54:00:00:07:01",
            ["52-54-00-00-07-01", "52:54:00:00:07:01", "5254.0000.0701", "525400000701"],
        ),
    ] {
        let expected = render_mac(&db, &config, mac).text;
        for form in forms {
            let (status, kind, body) = get(&format!("{}/boot/{form}.ipxe", server.base));
            assert_eq!(status, 200, "{form}");
            assert_eq!(kind, "text/plain; charset=utf-8");
            assert_eq!(String::from_utf8(body).unwrap(), expected, "{form}");
        }
    }
    let (status, _, body) = get(&format!("{}/boot/52-54-00-de-ad-00.ipxe", server.base));
    assert_eq!(status, 404, "an unknown MAC is a 404 so the generic script tries the next NIC");
    assert!(String::from_utf8(body).unwrap().contains("unknown machine"));
    assert_eq!(get(&format!("{}/boot/not-a-mac.ipxe", server.base)).0, 400);
    let (status, _, body) = get(&format!("{}/boot/default.ipxe", server.base));
    assert_eq!(status, 200);
    assert!(String::from_utf8(body).unwrap().lines().any(|l| l == "exit"));
    server.stop().unwrap();
}

#[test]
fn the_generic_script_tries_each_nic_then_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let (status, _, body) = get(&format!("{}/boot.ipxe", server.base));
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    for nic in 0..8 {
        assert!(text.contains(&format!(
            "isset ${{net{nic}/mac}} && imgfetch --name bootvol-node http://192.0.2.10:8080/boot/${{net{nic}/mac:hexhyp}}.ipxe && goto bootvol_found ||"
        )), "net{nic}");
    }
    assert!(text.contains("chain --autofree http://192.0.2.10:8080/boot/default.ipxe || exit"));
}

#[test]
fn files_have_length_ranges_and_stay_inside_files_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir_all(root.join("nfs")).unwrap();
    let kernel: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("nfs/vmlinuz"), &kernel).unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "secret").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    let server = Server::start_with_files(dir.path(), &root);
    let base = &server.base;
    let (status, _, body) = get(&format!("{base}/files/nfs/vmlinuz"));
    assert_eq!((status, body.len()), (200, kernel.len()));
    assert_eq!(body, kernel);
    let (status, _, body) = get_with(&format!("{base}/files/nfs/vmlinuz"), Some("bytes=1000-1999"));
    assert_eq!(status, 206);
    assert_eq!(body, &kernel[1000..2000]);
    let head = agent().head(&format!("{base}/files/nfs/vmlinuz")).call().unwrap();
    assert_eq!(head.headers().get("content-length").unwrap(), "100000");
    assert_eq!(get(&format!("{base}/files/escape")).0, 403, "symlink out of the root");
    assert_eq!(get(&format!("{base}/files/nfs")).0, 404, "no directory listing");
    assert_eq!(get(&format!("{base}/files/missing")).0, 404);
    assert_eq!(get(&format!("{base}/files/nfs/%2e%2e/%2e%2e/outside.txt")).0, 403);
    assert_eq!(get(&format!("{base}/files/nfs%2f..%2f..%2foutside.txt")).0, 403);
}

#[test]
fn ipxe_binaries_of_the_tftp_root_over_http_with_length_for_uefi_http_boot() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ipxe");
    std::fs::create_dir_all(root.join("arm64")).unwrap();
    let binary: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 256) as u8).collect();
    std::fs::write(root.join("snponly.efi"), &binary).unwrap();
    std::fs::write(root.join("arm64/snponly.efi"), b"arm64 stand-in").unwrap();
    std::fs::write(dir.path().join("outside.bin"), "outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.bin"), root.join("escape.bin")).unwrap();
    let text = config_text(dir.path()).replace("/usr/lib/ipxe", &root.display().to_string());
    let server = Server::start_from(&text);
    let base = &server.base;
    // EDK2's HTTP Boot sends HEAD first and needs the length before it downloads.
    let head = agent().head(&format!("{base}/ipxe/snponly.efi")).call().unwrap();
    assert_eq!(head.status().as_u16(), 200);
    assert_eq!(head.headers().get("content-length").unwrap(), "200000");
    let (status, _, body) = get(&format!("{base}/ipxe/snponly.efi"));
    assert_eq!((status, body == binary), (200, true));
    assert_eq!(get(&format!("{base}/ipxe/arm64/snponly.efi")).2, b"arm64 stand-in");
    assert_eq!(get(&format!("{base}/ipxe/escape.bin")).0, 403, "symlink out of the root");
    assert_eq!(get(&format!("{base}/ipxe/%2e%2e/outside.bin")).0, 403);
    assert_eq!(get(&format!("{base}/ipxe/arm64")).0, 404, "no directory listing");
    assert_eq!(get(&format!("{base}/ipxe/missing.efi")).0, 404);
    server.stop().unwrap();
}

impl Server {
    fn start_with_files(dir: &Path, root: &Path) -> Server {
        let text = config_text(dir)
            .replace("/srv/bootvol/files", &root.display().to_string())
            .replace("/usr/lib/ipxe", &root.display().to_string());
        Server::start_from(&text)
    }
}

#[test]
fn changes_by_another_process_reach_the_boot_path_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let url = format!("{}/boot/52-54-00-00-05-01.ipxe", server.base);
    assert!(String::from_utf8(get(&url).2).unwrap().contains("aoe:e3.1"));
    // Another connection (as `bootvol apply` would) moves the AoE target to another slot.
    let config = Config::from_toml(&config_text(dir.path()), "t").unwrap();
    let text = std::fs::read_to_string(fixture("inventory/scenarios.json"))
        .unwrap()
        .replace("\"target_slot\": \"1\"", "\"target_slot\": 7");
    let specs = inventory::parse(&text, Format::Json, &config).unwrap();
    Db::open_config(&config.database).unwrap().apply_inventory(&specs, false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if String::from_utf8(get(&url).2).unwrap().contains("aoe:e3.7") {
            break;
        }
        assert!(Instant::now() < deadline, "the new slot never reached the boot path");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The snapshot is updated node by node: the others keep their scripts, and a node deleted
    // by another process (an apply with --prune) leaves the boot path with its MAC.
    let hba = format!("{}/boot/52-54-00-00-09-01.ipxe", server.base);
    let before = get(&hba);
    assert_eq!(before.0, 200);
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["nodes"].as_array_mut().unwrap().retain(|n| n["name"] != "aoe");
    let specs = inventory::parse(&doc.to_string(), Format::Json, &config).unwrap();
    Db::open_config(&config.database).unwrap().apply_inventory(&specs, true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(&url).0 != 404 {
        assert!(Instant::now() < deadline, "the deleted node's MAC is still served");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(&hba), before, "another node's script changed");
    server.stop().unwrap();
}

/// `curl` over TFTP: (exit status, bytes received).
#[allow(clippy::disallowed_methods)] // tests drive real clients
fn curl_tftp(server: &Server, name: &str, extra: &[&str]) -> (i32, Vec<u8>) {
    let output = std::process::Command::new("curl")
        .args(["-s", "--max-time", "10"])
        .args(extra)
        .arg(format!("tftp://{}/{name}", server.tftp))
        .output()
        .expect("curl is installed");
    (output.status.code().unwrap_or(-1), output.stdout)
}

#[test]
fn tftp_serves_scripts_by_name_and_files_confined_to_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir_all(root.join("efi")).unwrap();
    let binary: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(root.join("efi/snponly.efi"), &binary).unwrap();
    std::fs::write(dir.path().join("outside.bin"), "outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.bin"), root.join("escape.bin")).unwrap();
    let server = Server::start_with_files(dir.path(), &root);
    let config = Config::from_toml(&config_text(dir.path()), "t").unwrap();
    let db = scenario_db(&config);

    let (status, body) = curl_tftp(&server, "boot.ipxe", &[]);
    assert_eq!(status, 0);
    assert_eq!(
        body,
        get(&format!("{}/boot.ipxe", server.base)).2,
        "the same generic script over TFTP and HTTP"
    );
    let (status, body) =
        curl_tftp(&server, "boot/52-54-00-00-01-01.ipxe", &["--tftp-blksize", "1468"]);
    assert_eq!(status, 0);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        render_mac(&db, &config, "52:54:00:00:01:01").text
    );
    let (status, body) = curl_tftp(&server, "efi/snponly.efi", &["--tftp-blksize", "1468"]);
    assert_eq!((status, body.len()), (0, binary.len()));
    assert_eq!(body, binary);
    let (status, body) = curl_tftp(&server, "efi/snponly.efi", &[]);
    assert_eq!((status, body == binary), (0, true), "512-byte blocks");

    // curl: 68 = TFTP file not found, 69 = TFTP permission denied.
    assert_eq!(
        curl_tftp(&server, "boot/52-54-00-de-ad-00.ipxe", &[]).0,
        68,
        "an unknown MAC is not found"
    );
    assert_eq!(curl_tftp(&server, "missing.bin", &[]).0, 68);
    assert_eq!(curl_tftp(&server, "escape.bin", &[]).0, 69, "a symlink out of the root is refused");
    assert_eq!(curl_tftp(&server, "efi/../../outside.bin", &["--path-as-is"]).0, 69);
    assert_eq!(curl_tftp(&server, "efi%2f..%2f..%2foutside.bin", &[]).0, 69);
    assert_eq!(curl_tftp(&server, "efi", &[]).0, 68, "a directory is not a file");
}

#[test]
#[allow(clippy::disallowed_methods)]
fn tftp_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir_all(&root).unwrap();
    let server = Server::start_with_files(dir.path(), &root);
    let upload = dir.path().join("upload.bin");
    std::fs::write(&upload, "payload").unwrap();
    let output = std::process::Command::new("curl")
        .args(["-s", "--max-time", "10", "-T"])
        .arg(&upload)
        .arg(format!("tftp://{}/upload.bin", server.tftp))
        .output()
        .unwrap();
    assert_ne!(output.status.code(), Some(0), "a write request must fail");
    assert!(!root.join("upload.bin").exists(), "nothing was written");
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}

/// A FIFO, a device and a link to `/dev/zero` in a served root: each is refused at once, over
/// HTTP (`/files/`, `/ipxe/`) and TFTP, and nothing waits on them (a FIFO opened for reading
/// blocks until a writer comes; `/dev/zero` never ends).
#[test]
fn fifos_and_devices_in_the_served_roots_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("ok.bin"), "ok").unwrap();
    nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644))
        .unwrap();
    std::os::unix::fs::symlink("/dev/zero", root.join("zero")).unwrap();
    let mut names = vec!["fifo", "zero"];
    if nix::unistd::geteuid().is_root() {
        // /dev/null's own numbers (1, 3), made inside the root: a device that stays inside.
        nix::sys::stat::mknod(
            &root.join("null"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o644),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        names.push("null");
    } else {
        eprintln!("not root: no device made inside the root, the /dev/zero link only");
    }
    let server = Server::start_with_files(dir.path(), &root);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    for prefix in ["files", "ipxe"] {
        assert_eq!(get(&format!("{}/{prefix}/ok.bin", server.base)).0, 200);
        for name in &names {
            let started = Instant::now();
            let status = match agent.get(&format!("{}/{prefix}/{name}", server.base)).call() {
                Ok(response) => response.status().as_u16(),
                Err(e) => panic!("/{prefix}/{name}: no answer ({e})"),
            };
            assert_eq!(status, 403, "/{prefix}/{name}");
            assert!(started.elapsed() < Duration::from_secs(2), "/{prefix}/{name} was slow");
        }
    }
    for name in &names {
        let started = Instant::now();
        // curl: 69 = TFTP permission denied.
        assert_eq!(curl_tftp(&server, name, &["--max-time", "5"]).0, 69, "tftp {name}");
        assert!(started.elapsed() < Duration::from_secs(2), "tftp {name} was slow");
    }
    assert_eq!(curl_tftp(&server, "ok.bin", &[]), (0, b"ok".to_vec()));
    server.stop().unwrap();
}

/// A key and a self-signed certificate (PEM) made for a test, as an operator makes theirs for
/// their nodes' `db`; `None` (the test skipped, saying so) without the Secure Boot tools or
/// Debian's iPXE.
#[allow(clippy::disallowed_methods)] // tests drive real tools (openssl, sbverify)
pub(crate) fn secure_boot_key(dir: &Path) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    use crate::skip::{SECURE_BOOT, have, skip};
    if !have(SECURE_BOOT, &["sbsign", "sbverify", "openssl"]) {
        return None;
    }
    if !Path::new("/usr/lib/ipxe/snponly.efi").is_file()
        || !Path::new("/usr/lib/ipxe/ipxe.efi").is_file()
    {
        skip(SECURE_BOOT, "Debian's iPXE (/usr/lib/ipxe/snponly.efi, ipxe.efi) is not installed");
        return None;
    }
    let (key, cert) = (dir.join("db.key"), dir.join("db.pem"));
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=bootvol test db key",
            "-days",
            "1",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    Some((key, cert))
}

/// Whether `binary` carries a signature `cert` verifies (sbverify).
#[allow(clippy::disallowed_methods)] // tests drive real tools (openssl, sbverify)
fn verifies(dir: &Path, binary: &[u8], cert: &Path) -> bool {
    let file = dir.join("verify.efi");
    std::fs::write(&file, binary).unwrap();
    std::process::Command::new("sbverify")
        .arg("--cert")
        .arg(cert)
        .arg(&file)
        .output()
        .unwrap()
        .status
        .success()
}

/// `[secure_boot]`: the EFI binaries of the TFTP root go out signed with the operator's key,
/// the same bytes over HTTP `/ipxe/` and TFTP, with their length; a binary replaced on disk is
/// signed again before it is served; other files go out as they are.
#[test]
fn efi_binaries_are_served_signed_with_the_secure_boot_key_and_signed_again_when_changed() {
    let dir = tempfile::tempdir().unwrap();
    let Some((key, cert)) = secure_boot_key(dir.path()) else { return };
    let root = dir.path().join("ipxe");
    std::fs::create_dir_all(&root).unwrap();
    let original = std::fs::read("/usr/lib/ipxe/snponly.efi").unwrap();
    std::fs::write(root.join("snponly.efi"), &original).unwrap();
    std::fs::write(root.join("undionly.kpxe"), b"a BIOS binary, never signed").unwrap();
    let text = config_text(dir.path()).replace("/usr/lib/ipxe", &root.display().to_string())
        + &format!("\n[secure_boot]\nkey = \"{}\"\ncert = \"{}\"\n", key.display(), cert.display());
    let server = Server::start_from(&text);
    let base = &server.base;

    let (status, _, signed) = get(&format!("{base}/ipxe/snponly.efi"));
    assert_eq!(status, 200);
    assert!(signed.len() > original.len(), "no signature appended");
    assert!(verifies(dir.path(), &signed, &cert), "the served iPXE does not verify");
    assert!(!verifies(dir.path(), &original, &cert), "the control: Debian's iPXE is unsigned");
    let head = agent().head(&format!("{base}/ipxe/snponly.efi")).call().unwrap();
    assert_eq!(head.headers().get("content-length").unwrap(), &signed.len().to_string());
    if crate::skip::have(crate::skip::TFTP_CLIENTS, &["curl"]) {
        let (status, over_tftp) = curl_tftp(&server, "snponly.efi", &["--tftp-blksize", "1468"]);
        assert_eq!((status, over_tftp == signed), (0, true), "TFTP serves the same signed bytes");
    }
    assert_eq!(get(&format!("{base}/ipxe/undionly.kpxe")).2, b"a BIOS binary, never signed");

    // The operator upgrades iPXE in place: the next request gets the new binary, signed.
    let upgraded = std::fs::read("/usr/lib/ipxe/ipxe.efi").unwrap();
    std::fs::write(root.join("snponly.efi"), &upgraded).unwrap();
    let (status, _, again) = get(&format!("{base}/ipxe/snponly.efi"));
    assert_eq!(status, 200);
    assert!(again.len() > upgraded.len() && again[..0x40] == upgraded[..0x40], "not the new file");
    assert!(verifies(dir.path(), &again, &cert), "the new iPXE does not verify");
    assert_eq!(get(&format!("{base}/ipxe/missing.efi")).0, 404);
    server.stop().unwrap();
}
