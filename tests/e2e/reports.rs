//! Boot reports from real iPXE: a node's script reports each step it reaches to
//! `GET /report/<mac>`, and bootvol records it as the node's event `baremetal.node.boot_reported`
//! with iPXE's error decoded, shown on the node's admin page.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::net::{HostAddress, free_tcp_port};
use crate::support::qemu::{EXIT_BIOS_MARKER, Firmware, Network, Vm};
use crate::support::tgtd::{Account, Target, Tgtd};
use crate::support::{BASE, NIC_ROM, TGT, begin};
use crate::volumes::bios_volume;

const DEADLINE: Duration = Duration::from_secs(90);

/// How soon after the script's failure the report must be seen, on the events and the page.
const WITHIN: Duration = Duration::from_secs(5);

const NODE: &str = "e2e-report";

fn inventory(mac: &str, iqn: &str, portal: &str, password: &str) -> Value {
    json!({"nodes": [{
        "name": NODE,
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true"},
        "ports": [{"address": mac}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.e2e:report-node"}],
        "volume_targets": [{
            "volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-report",
            "properties": {"target_iqn": iqn, "target_portal": portal, "target_lun": 1,
                           "auth_method": "CHAP", "auth_username": "e2e-report-user",
                           "auth_password": password}
        }]
    }]})
}

/// The node's boot reports at `stage`, oldest first.
fn reports(bootvol: &Bootvol, stage: &str) -> Vec<Value> {
    bootvol
        .events(NODE)
        .into_iter()
        .filter(|e| e["event_type"] == "baremetal.node.boot_reported")
        .map(|e| e["payload"].clone())
        .filter(|p| p["stage"] == stage)
        .collect()
}

/// Waits up to [`WITHIN`] for a report at `stage` and for the node page to show `shown`;
/// returns the report and how long it took.
fn wait_for_report(bootvol: &Bootvol, stage: &str, shown: &str) -> (Option<Value>, Duration) {
    let started = Instant::now();
    loop {
        let report = reports(bootvol, stage).pop();
        let page = bootvol.admin_get(&format!("/admin/nodes/{NODE}"));
        let on_page = matches!(&page, Ok((200, body)) if body.contains(shown));
        if (report.is_some() && on_page) || started.elapsed() > WITHIN {
            return (report, started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A node whose script carries a wrong CHAP secret fails its `sanhook`; within 5 s its events
/// and its page show the report with iPXE's error in words. The operator fixes the secret
/// (`bootvol apply`), and the next boot reports `sanhook` and boots the volume's marker.
/// `bootvol probe` said "CHAP rejected" before the first boot and "login ok" after the fix: the
/// target sits at an address of the host's own that the VM reaches through QEMU's user network
/// and the probe directly, so both log in to the same portal the script names.
#[test]
fn bios_iscsi_wrong_chap_is_reported_then_fixed() {
    let Some(e2e) = begin("bios_iscsi_wrong_chap_is_reported_then_fixed", &[BASE, TGT, NIC_ROM])
    else {
        return;
    };
    let mac = "52:54:00:e2:05:01";
    let iqn = "iqn.2024-01.org.example.e2e:report-boot";
    let marker = "BVE2E-REPORT-FIXED-OK";
    let right = "e2e-report-secret-right";
    let volume = bios_volume(&e2e.path("boot.img"), marker, false);
    let san = HostAddress::add("198.51.100.77");
    let portal = format!("{}:{}", san.ip, free_tcp_port());
    let mut tgtd = Tgtd::start(e2e.dir.path(), None, &portal);
    tgtd.add(&Target {
        tid: 1,
        iqn,
        luns: vec![(1, volume)],
        initiators: vec![],
        incoming: Some(Account { user: "e2e-report-user", password: right }),
        outgoing: None,
    });
    let mut settings = Settings::loopback();
    settings.api_noauth = true;
    let mut bootvol = Bootvol::configure(e2e.dir.path(), settings);
    bootvol.apply(&inventory(mac, iqn, &portal, "e2e-report-secret-wrong"));
    bootvol.serve();
    bootvol.assert_serves_render(mac);
    let (code, probed) = bootvol.probe(NODE);
    assert_eq!(code, Some(1), "the probe with the wrong secret:\n{probed}\n{}", tgtd.log());
    assert!(
        probed.contains("CHAP rejected: authentication failure"),
        "the probe did not say CHAP rejected:\n{probed}"
    );
    assert!(!probed.contains("e2e-report-secret"), "a secret printed by the probe:\n{probed}");
    eprintln!("probe before the first boot (exit 1):\n{probed}");
    let bootfile = format!("{}/boot.ipxe", bootvol.settings.public_url);
    let vm = Vm::new(Firmware::Bios, Network::User { bootfile }, mac);

    // The script echoes this right after its sanhook-failed report.
    let failed = format!("attempt 1 of 2 to attach the volume(s) of {NODE} failed");
    let shown = "sanhook failed: 0x";
    let mut seen = None;
    let boot = vm.boot_until(e2e.dir.path(), &[&failed], DEADLINE, &mut |_| {
        seen = Some(wait_for_report(&bootvol, "sanhook-failed", shown));
        true
    });
    let logs = [bootvol.log(), tgtd.log()];
    let Some((report, took)) = seen else {
        panic!("the sanhook never failed\n{}", boot.report(&logs));
    };
    let report = report.unwrap_or_else(|| {
        panic!("no sanhook-failed report within {WITHIN:?}\n{}", boot.report(&logs))
    });
    assert!(took <= WITHIN, "the report took {took:?}\n{}", boot.report(&logs));
    eprintln!("sanhook-failed report after {:.1} s: {report}", took.as_secs_f64());
    assert_eq!(report["result"], "failed");
    // iPXE's iSCSI login refused by the target's CHAP check: class 0x41, EPERM.
    let err = report["err"].as_str().unwrap_or_default();
    assert!(
        err.len() == 10 && err.starts_with("0x41"),
        "iPXE's error is not an Operation not permitted one: {report}"
    );
    assert_eq!(report["error"], "Operation not permitted (iSCSI login)", "{report}");
    assert_eq!(report["error_url"], format!("https://ipxe.org/err/{}", &err[2..]));
    // QEMU's user-mode network reaches bootvol from host loopback: no neighbour entry.
    assert_eq!(report["client"], "127.0.0.1");
    assert_eq!(report["from_neighbour"], false);
    let (_, page) = bootvol.admin_get(&format!("/admin/nodes/{NODE}")).unwrap();
    let line = format!("sanhook failed: {err} Operation not permitted (iSCSI login)");
    assert!(page.contains(&line), "the node page does not show {line:?}");
    assert!(page.contains("(not from the node's neighbour)"), "no neighbour mark on the page");
    assert_eq!(reports(&bootvol, "script").len(), 1, "the script's first report");
    assert!(reports(&bootvol, "sanhook").is_empty(), "a sanhook report with the wrong secret");

    // The operator fixes the secret.
    bootvol.apply(&inventory(mac, iqn, &portal, right));
    bootvol.assert_serves_render(mac);
    let (code, probed) = bootvol.probe(NODE);
    assert_eq!(code, Some(0), "the probe after the fix:\n{probed}\n{}", tgtd.log());
    assert!(probed.contains("login ok, LUN 1"), "the probe did not say ok:\n{probed}");
    eprintln!("probe after the fix (exit 0):\n{probed}");
    let boot = vm.boot(e2e.dir.path(), &[marker], DEADLINE);
    let logs = [bootvol.log(), tgtd.log()];
    boot.assert_marker(marker, EXIT_BIOS_MARKER, &logs);
    let (report, took) = wait_for_report(&bootvol, "sanhook", "volumes attached");
    let report =
        report.unwrap_or_else(|| panic!("no sanhook report after the fix\n{}", boot.report(&logs)));
    eprintln!("sanhook report {:.1} s after the boot: {report}", took.as_secs_f64());
    assert_eq!(report["result"], "ok");
    assert_eq!(report["err"], Value::Null);
    // The first boot was stopped after its first attempt; the fixed one failed none.
    assert_eq!(reports(&bootvol, "sanhook-failed").len(), 1);
    assert_eq!(reports(&bootvol, "script").len(), 2, "one script report per boot");
    assert_eq!(reports(&bootvol, "sanboot-failed").len(), 0);
    bootvol.stop();
}
