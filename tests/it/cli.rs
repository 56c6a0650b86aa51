//! The `bootvol` binary run as an operator runs it: apply, export, render, check-config, demo.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::{Appliance, config_text, fixture};

const SECRETS: &[&str] =
    &["boot-chap-secret-1", "mutual-secret-22", "data-chap-secret-3", "bmc-password-9"];

trait Scenarios {
    fn write_scenarios(&self) -> String;
}

fn new_appliance() -> Appliance {
    Appliance::with_config(config_text)
}

impl Scenarios for Appliance {
    /// The scenario inventory with a BMC password added to one node.
    fn write_scenarios(&self) -> String {
        let mut doc: Value = serde_json::from_str(
            &std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap(),
        )
        .unwrap();
        doc["nodes"][0]["driver"] = "redfish".into();
        doc["nodes"][0]["driver_info"] = serde_json::json!({"redfish_address": "https://192.0.2.50",
            "redfish_username": "admin", "redfish_password": "bmc-password-9"});
        let path = self.path("scenarios.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        path.display().to_string()
    }
}

fn file_str(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn apply_is_idempotent_and_keeps_uuids() {
    let app = new_appliance();
    let file = app.write_scenarios();
    let first = app.ok(&["apply", &file]);
    assert!(first.starts_with("created: "), "{first}");
    assert_eq!(first.matches(',').count(), 11, "12 nodes created: {first}");
    let export_before = app.ok(&["export"]);
    // Written a node at a time, it is exactly the pretty JSON of the whole document.
    let document: Value = serde_json::from_str(&export_before).unwrap();
    assert_eq!(document["nodes"].as_array().map(Vec::len), Some(12));
    assert_eq!(export_before, format!("{}\n", serde_json::to_string_pretty(&document).unwrap()));
    let second = app.ok(&["apply", &file]);
    assert!(
        second.starts_with("unchanged: ")
            && !second.contains("created")
            && !second.contains("updated"),
        "{second}"
    );
    assert_eq!(app.ok(&["export"]), export_before, "a second apply changed something");
}

#[test]
fn export_masks_every_secret_and_render_is_the_only_place_a_chap_secret_is_written() {
    let app = new_appliance();
    let file = app.write_scenarios();
    app.ok(&["apply", &file]);
    let export = app.ok(&["export"]);
    for secret in SECRETS {
        assert!(!export.contains(secret), "export shows {secret}");
    }
    let doc: Value = serde_json::from_str(&export).unwrap();
    let chap =
        &doc["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "iscsi-chap").unwrap();
    assert_eq!(chap["volume_targets"][0]["properties"]["auth_password"], "******");
    assert_eq!(chap["volume_targets"][0]["properties"]["auth_reverse_password"], "******");
    assert_eq!(chap["driver_info"]["redfish_password"], "******");
    assert_eq!(chap["volume_targets"][0]["properties"]["auth_username"], "node-user");

    let script = app.ok(&["render", "--mac", "52-54-00-00-01-01"]);
    assert!(script.contains("set password boot-chap-secret-1"));
    assert!(script.contains("set reverse-password mutual-secret-22"));

    // The masked export applies back without losing the stored secrets.
    let exported = app.path("exported.json");
    std::fs::write(&exported, &export).unwrap();
    let report = app.ok(&["apply", &file_str(&exported)]);
    assert!(report.starts_with("unchanged: "), "{report}");
    assert_eq!(app.ok(&["render", "--mac", "5254.0000.0101"]), script);
}

#[test]
fn one_bad_node_fails_the_whole_file_and_changes_nothing() {
    let app = new_appliance();
    let file = app.write_scenarios();
    app.ok(&["apply", &file]);
    let before = app.ok(&["export"]);
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    doc["nodes"][1]["volume_targets"][0]["properties"]["target_portals"][1] =
        "2001:db8::6:3260".into();
    doc["nodes"][2]["properties"]["capabilities"] = "iscsi_boot:maybe".into();
    doc["nodes"][3]["ports"][0]["address"] = "52:54:00:00:04".into();
    doc["nodes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "new-node", "ports": [{"address": "52:54:00:99:99:99"}]}));
    let bad = app.path("bad.json");
    std::fs::write(&bad, doc.to_string()).unwrap();
    let stderr = app.fails(&["apply", &file_str(&bad)]);
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert!(stderr.contains("node iscsi-multipath: volume_targets[0].volume target boot_index 0 (8b9a2a86-6a4a-4d5a-9c0e-2b6a0c1f0a01): portal \"2001:db8::6:3260\": write an IPv6 address in brackets")
        || stderr.contains("node iscsi-multipath: volume_targets[0]"), "{stderr}");
    assert!(
        stderr.contains("node iscsi-uefi: properties.capabilities: capability iscsi_boot"),
        "{stderr}"
    );
    assert!(
        stderr.contains("node fcoe: ports[0].address: \"52:54:00:00:04\" is not a MAC address"),
        "{stderr}"
    );
    assert_eq!(app.ok(&["export"]), before);
    let unknown = app.ok(&["render", "--mac", "52:54:00:99:99:99"]);
    assert!(unknown.contains("unknown machine"), "new-node must not exist: {unknown}");
}

#[test]
fn a_conflict_with_the_database_names_the_node_and_field_and_changes_nothing() {
    let app = new_appliance();
    let file = app.write_scenarios();
    app.ok(&["apply", &file]);
    let before = app.ok(&["export"]);
    let other = app.path("other.json");
    std::fs::write(
        &other,
        r#"{"nodes": [
        {"name": "fresh", "ports": [{"address": "52:54:00:77:77:77"}]},
        {"name": "thief", "ports": [{"address": "52:54:00:00:05:01"}]}]}"#,
    )
    .unwrap();
    let stderr = app.fails(&["apply", &file_str(&other)]);
    assert!(
        stderr.contains(
            "node thief: ports[0].address: 52:54:00:00:05:01 already belongs to node aoe"
        ),
        "{stderr}"
    );
    assert_eq!(app.ok(&["export"]), before);
    assert!(app.ok(&["render", "--mac", "52:54:00:77:77:77"]).contains("unknown machine"));
}

#[test]
fn prune_deletes_nodes_absent_from_the_file_and_macs_can_move() {
    let app = new_appliance();
    let file = app.write_scenarios();
    app.ok(&["apply", &file]);
    let small = app.path("small.toml");
    std::fs::write(&small, r#"
[[nodes]]
name = "aoe"
storage_interface = "external"
properties = { capabilities = "aoe_boot:true" }
ports = [{ address = "52:54:00:00:05:01" }, { address = "52:54:00:00:06:01" }]
volume_targets = [{ volume_type = "aoe", boot_index = 0, volume_id = "vol-aoe", properties = { target_shelf = 3, target_slot = 1 } }]
"#).unwrap();
    // Without --prune the MAC of http-san is still taken.
    let stderr = app.fails(&["apply", &file_str(&small)]);
    assert!(stderr.contains("already belongs to node http-san"), "{stderr}");
    let report = app.ok(&["apply", "--prune", &file_str(&small)]);
    assert!(report.contains("updated: aoe"), "{report}");
    assert!(
        report.contains("deleted: ")
            && report.contains("http-san")
            && report.contains("iscsi-chap"),
        "{report}"
    );
    let doc: Value = serde_json::from_str(&app.ok(&["export"])).unwrap();
    assert_eq!(doc["nodes"].as_array().unwrap().len(), 1);
    assert!(
        app.ok(&["render", "--mac", "52:54:00:00:06:01"]).contains("sanhook --drive 0x80 aoe:e3.1")
    );
}

#[test]
fn storage_interfaces_must_be_enabled() {
    let app = new_appliance();
    std::fs::write(
        app.path("bootvol.toml"),
        config_text(app.dir.path()).replace(
            r#"enabled_storage_interfaces = ["noop", "external", "cinder"]"#,
            r#"enabled_storage_interfaces = ["noop", "external"]"#,
        ),
    )
    .unwrap();
    let stderr = app.fails(&["apply", &app.write_scenarios()]);
    assert!(stderr.contains("node iscsi-multipath: storage_interface: cinder is not enabled (enabled: noop, external)"), "{stderr}");
}

#[test]
fn render_matches_the_golden_scripts() {
    let app = new_appliance();
    app.ok(&["apply", &file_str(&fixture("inventory/scenarios.json"))]);
    let script = app.ok(&["render", "--mac", "52:54:00:00:04:01"]);
    assert_eq!(script, std::fs::read_to_string(fixture("ipxe/fcoe.ipxe")).unwrap());
    let stderr =
        String::from_utf8(app.run(&["render", "--mac", "52:54:00:00:0c:01"]).stderr).unwrap();
    assert!(stderr.contains("capability iscsi_boot is not true"), "{stderr}");
    assert!(app.fails(&["render", "--mac", "not-a-mac"]).contains("is not a MAC address"));
}

/// `apply`'s report names the first 20 nodes of each line and counts them all; `--verbose`
/// names every one. A second apply of the same file reports them unchanged, in file order.
#[test]
fn apply_reports_counts_and_names_the_rest_with_verbose() {
    let app = new_appliance();
    let nodes: Vec<Value> = (0..30)
        .map(|i| serde_json::json!({"name": format!("r{i:02}"), "ports": [{"address": format!("52:54:00:77:00:{i:02x}")}]}))
        .collect();
    let file = app.path("rack.json");
    std::fs::write(&file, serde_json::json!({"nodes": nodes}).to_string()).unwrap();
    let file = file_str(&file);
    let first = app.ok(&["apply", &file]);
    assert_eq!(first.lines().count(), 1, "{first}");
    assert!(first.starts_with("created: r00, r01, "), "{first}");
    assert!(first.contains("r19 and 10 more (30; --verbose names them all)"), "{first}");
    assert!(!first.contains("r20"), "{first}");
    let again = app.ok(&["apply", "--verbose", &file]);
    let names: Vec<String> = (0..30).map(|i| format!("r{i:02}")).collect();
    assert_eq!(again.trim_end(), format!("unchanged: {} (30)", names.join(", ")));
}

/// `check-config` signs what `serve` would sign: a key that is not the certificate's, an
/// encrypted key, or a missing signer is named before the service starts.
#[test]
#[allow(clippy::disallowed_methods)] // tests drive real tools (openssl, sbverify)
fn check_config_signs_with_the_secure_boot_key_before_serve_does() {
    let app = new_appliance();
    let Some((key, cert)) = crate::serve::secure_boot_key(app.dir.path()) else { return };
    let root = app.path("ipxe");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy("/usr/lib/ipxe/snponly.efi", root.join("snponly.efi")).unwrap();
    let config = |key: &Path, sbsign: &str| {
        let text = format!(
            "[tftp]\nroot = \"{}\"\n[secure_boot]\nkey = \"{}\"\ncert = \"{}\"\nsbsign = \"{sbsign}\"\n",
            root.display(),
            key.display(),
            cert.display()
        );
        std::fs::write(app.path("bootvol.toml"), text).unwrap();
    };
    config(&key, "/usr/bin/sbsign");
    let out = app.ok(&["check-config"]);
    assert!(out.contains("secure_boot: the EFI binaries of"), "{out}");
    // Another key than the certificate's.
    let other = app.dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (other_key, _) = crate::serve::secure_boot_key(&other).unwrap();
    config(&other_key, "/usr/bin/sbsign");
    let err = app.fails(&["check-config"]);
    assert!(err.contains("[secure_boot]: signing snponly.efi:"), "{err}");
    assert!(err.contains("private key does not match certificate"), "{err}");
    // An encrypted key: refused by name, never handed to a signer that would ask for its
    // passphrase.
    let encrypted = app.path("encrypted.key");
    let status = std::process::Command::new("openssl")
        .args(["pkey", "-aes256", "-passout", "pass:secret", "-in"])
        .arg(&key)
        .arg("-out")
        .arg(&encrypted)
        .status()
        .unwrap();
    assert!(status.success());
    config(&encrypted, "/usr/bin/sbsign");
    let err = app.fails(&["check-config"]);
    assert!(err.contains("is encrypted, and the service cannot type its passphrase"), "{err}");
    config(&key, "/nonexistent/sbsign");
    let err = app.fails(&["check-config"]);
    assert!(err.contains("apt install sbsigntool"), "{err}");
}

#[test]
fn check_config_names_the_bad_key() {
    let app = new_appliance();
    assert!(app.ok(&["check-config"]).contains(": OK"));
    std::fs::write(app.path("bootvol.toml"), "[cinder]\nurl_timeout = 0\n").unwrap();
    assert!(app.fails(&["check-config"]).contains("cinder.url_timeout"));
    std::fs::write(app.path("bootvol.toml"), "[http]\nlisten = \"0.0.0.0:8080\"\nbogus = 1\n")
        .unwrap();
    assert!(app.fails(&["check-config"]).contains("bogus"));
    std::fs::write(app.path("bootvol.toml"), "[dhcp]\nmode = \"proxy\"\n").unwrap();
    assert!(app.fails(&["check-config"]).contains("dhcp.interfaces"));
    let example = file_str(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bootvol.toml"));
    std::fs::copy(&example, app.path("bootvol.toml")).unwrap();
    assert!(app.ok(&["check-config"]).contains("public_url: \"http://192.0.2.10:8080\""));
}

#[test]
#[allow(clippy::disallowed_methods)]
fn demo_runs_without_configuration() {
    let output =
        Command::new(env!("CARGO_BIN_EXE_bootvol")).args(["demo", "--print"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    for scenario in ["[iscsi]", "[fcoe]", "[aoe]", "[http-san]", "[nfs-root]", "[hba]", "[none]"] {
        assert!(text.contains(scenario), "demo lacks {scenario}");
    }
}

#[test]
#[allow(clippy::disallowed_methods)]
fn demo_serves_the_sample_nodes_until_interrupted() {
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let tftp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let api = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bootvol"))
        .args([
            "demo",
            "--http",
            &http.to_string(),
            "--tftp",
            &tftp.to_string(),
            "--api",
            &api.to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let url = format!("http://{http}/boot/52-54-00-00-00-01.ipxe");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let body = loop {
        if let Ok(mut response) = agent.get(&url).call() {
            break response.body_mut().read_to_string().unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "demo never served");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = Command::new("kill").arg("-INT").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    assert!(
        body.contains(
            "sanhook --drive 0x80 iscsi:192.0.2.5::3260:1:iqn.2024-01.org.example.san:vol-boot"
        ),
        "{body}"
    );
    assert!(status.success(), "Ctrl-C ends the demo cleanly: {status:?}");
}
