//! Every scenario rendered from the scenario inventory and compared with its golden script.

use crate::support::{check_golden, config, render_mac, scenario_db};

fn golden(mac: &str, name: &str, scenario: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let db = scenario_db(&config);
    let script = render_mac(&db, &config, mac);
    assert_eq!(script.scenario, scenario, "{name}: {:?}", script.problem);
    check_golden(name, &script.text);
    script.text
}

#[test]
fn iscsi_with_mutual_chap_and_extra_volumes() {
    let text = golden("52:54:00:00:01:02", "iscsi-chap", "iscsi");
    // Mutual CHAP is set for the boot volume and cleared before a volume without it.
    let boot = text.find("sanhook --drive 0x80").unwrap();
    let data = text.find("sanhook --drive 0x81").unwrap();
    let scratch = text.find("sanhook --drive 0x82").unwrap();
    assert!(text[..boot].contains("set reverse-password mutual-secret-22"));
    assert!(text[boot..data].contains("set password data-chap-secret-3"));
    assert!(text[boot..data].contains("clear reverse-password"));
    assert!(text[data..scratch].contains("clear password"));
    // iPXE re-reads the (global) CHAP settings when it reconnects: the boot volume's are put
    // back before sanboot.
    let sanboot = text.find("sanboot").unwrap();
    assert!(
        text[scratch..sanboot]
            .contains("set password boot-chap-secret-1\nset reverse-username san-user")
    );
    // Ironic's defects: IPv6 brackets kept, a string LUN read and printed in hex, a missing LUN is 0.
    assert!(text.contains("iscsi:[2001:db8::5]::3260:10:iqn.2024-01.org.example.san:data"));
    assert!(text.contains("iscsi:san.example::3260:0:iqn.2024-01.org.example.san:scratch"));
    assert!(text.contains("iscsi:192.0.2.5::3261:2:iqn.2024-01.org.example.san:boot"));
    // Reports: received first, attached just before sanboot (after the boot volume's
    // credentials are back), each failure with iPXE's error, to the node's first port's MAC.
    let report = |stage: &str| {
        let url = "http://192.0.2.10:8080/report/52-54-00-00-01-01";
        let line = format!(
            "imgfetch --name bootvol-report {url}?stage={stage} && imgfree bootvol-report ||\n"
        );
        text.find(&line).unwrap_or_else(|| panic!("no {stage} report:\n{text}"))
    };
    assert!(report("script") < boot);
    assert!(sanboot > report("sanhook") && report("sanhook") > text.rfind("set password").unwrap());
    let boot_failed = text.find(":bootvol_boot_failed\n").unwrap();
    let hook_failed = text.find(":bootvol_hook_failed\n").unwrap();
    let retry = text.find(":bootvol_retry\n").unwrap();
    assert!(boot_failed < report("sanboot-failed&err=${errno}"));
    assert!(report("sanboot-failed&err=${errno}") < hook_failed);
    assert!(hook_failed < report("sanhook-failed&err=${errno}"));
    assert!(report("sanhook-failed&err=${errno}") < retry);
    assert_eq!(text.matches("|| goto bootvol_hook_failed").count(), 3);
}

#[test]
fn iscsi_multipath_pairs_each_portal_with_its_own_iqn_and_lun() {
    let text = golden("52:54:00:00:02:01", "iscsi-multipath", "iscsi");
    assert!(text.contains(
        "sanhook --drive 0x80 iscsi:192.0.2.5::3260:1:iqn.2024-01.org.example.san:ctrl-a \
         iscsi:[2001:db8::6]::3260:7:iqn.2024-01.org.example.san:ctrl-b || goto bootvol_hook_failed"
    ));
    assert!(!text.contains("set username"));
}

#[test]
fn iscsi_uefi_boots_the_named_file() {
    let text = golden("52:54:00:00:03:01", "iscsi-uefi", "iscsi");
    assert!(text.contains("sanboot --no-describe --drive 0x80 --filename \\EFI\\BOOT\\BOOTX64.EFI || goto bootvol_boot_failed"));
}

#[test]
fn fcoe_one_uri_per_target_wwn() {
    let text = golden("52:54:00:00:04:01", "fcoe", "fcoe");
    assert!(text.contains(
        "sanhook --drive 0x80 fcp:50:0a:09:82:99:1b:8d:c5:11 fcp:50:0a:09:82:a9:1b:8d:c5:11 ||"
    ));
    assert!(text.contains("sanhook --drive 0x81 fcp:50:0a:09:82:99:1b:8d:c5:0 ||"));
}

#[test]
fn aoe_shelf_and_slot() {
    let text = golden("52:54:00:00:05:01", "aoe", "aoe");
    assert!(text.contains("sanhook --drive 0x80 aoe:e3.1 ||"));
}

#[test]
fn http_san_url() {
    let text = golden("52:54:00:00:06:01", "http-san", "http-san");
    assert!(text.contains("sanhook --drive 0x80 http://192.0.2.10:8080/files/images/disk.img ||"));
}

#[test]
fn nfs_root_from_instance_info() {
    let text = golden("52:54:00:00:07:01", "nfs-root", "nfs-root");
    assert!(text.contains(
        "kernel http://192.0.2.10:8080/files/nfs/vmlinuz initrd=initrd.img root=/dev/nfs \
         nfsroot=192.0.2.7:/srv/nfsroot,vers=3,tcp ip=dhcp console=ttyS0 panic=-1 || goto bootvol_failed"
    ));
    assert!(
        text.contains("initrd http://192.0.2.10:8080/files/nfs/initrd.img || goto bootvol_failed")
    );
}

#[test]
fn nfs_root_from_a_cinder_nfs_target() {
    let text = golden("52:54:00:00:08:01", "nfs-cinder", "nfs-root");
    assert!(text.contains("nfsroot=[2001:db8::7]:/exports/root,vers=4.1 ip=dhcp"));
}

#[test]
fn hba_hands_back_to_the_firmware() {
    let text = golden("52:54:00:00:09:01", "hba", "hba");
    assert!(text.lines().any(|l| l == "exit"));
    assert!(!text.contains("sanboot") && !text.contains("sanhook"));
    golden("52:54:00:00:0a:01", "hba-deploy", "hba-deploy");
}

#[test]
fn noop_storage_and_unknown_macs_get_the_default_script() {
    let text = golden("52:54:00:00:0b:01", "noop-storage", "none");
    assert!(!text.contains("sanboot"));
    let unknown = golden("52:54:00:ff:ff:ff", "unknown-mac", "unknown");
    assert!(unknown.lines().any(|l| l == "exit"));
}

#[test]
fn a_node_that_does_not_validate_gets_the_default_script_and_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let db = scenario_db(&config);
    let script = render_mac(&db, &config, "52:54:00:00:0c:01");
    assert_eq!(script.scenario, "invalid");
    assert_eq!(
        script.problem.as_deref(),
        Some(
            "boot volume vol-nocap is iscsi but capability iscsi_boot is not true in properties.capabilities"
        )
    );
    check_golden("no-capability", &script.text);
}

#[test]
fn san_retries_are_bounded_by_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let db = scenario_db(&config);
    let text = render_mac(&db, &config, "52:54:00:00:05:01").text;
    // san_attempts = 4: the counter stops at 4, then the script gives up and exits.
    assert!(text.contains("iseq ${bootvol-try} 4 && goto bootvol_failed ||"));
    for (from, to) in [(3, 4), (2, 3), (1, 2)] {
        assert!(text.contains(&format!("iseq ${{bootvol-try}} {from} && set bootvol-try {to} ||")));
    }
    assert!(text.contains("sleep 3\ngoto bootvol_attach\n"));
    assert!(text.trim_end().ends_with(":bootvol_failed\necho bootvol: giving up on aoe after 4 attempts, handing back to the firmware\nexit 1"));
}

#[test]
fn only_deployed_nodes_boot_from_their_volume() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let db = scenario_db(&config);
    let mac: bootvol_core::model::MacAddr = "52:54:00:00:05:01".parse().unwrap();
    let mut record = db.node_record_by_mac(mac).unwrap().unwrap();
    for (state, booted) in [
        (bootvol_core::model::ProvisionState::Available, false),
        (bootvol_core::model::ProvisionState::Manageable, false),
        (bootvol_core::model::ProvisionState::DeployFailed, false),
        (bootvol_core::model::ProvisionState::Deploying, true),
        (bootvol_core::model::ProvisionState::Active, true),
    ] {
        record.node.provision_state = state;
        let script = crate::support::render_record(&config, Some(&record));
        assert_eq!(script.text.contains("sanhook"), booted, "{state}");
        if !booted {
            assert_eq!(script.scenario, "not-deployed");
            assert!(script.text.lines().any(|l| l == "exit"));
        }
    }
}

/// The snapshot keeps every node's verdict by UUID, ports or not, as its MACs get it: the
/// scenario served, why a deployed node gets the default script, and why a node not deployed
/// would once deployed (the admin page reads these, not a decision of its own).
#[test]
fn the_snapshot_keeps_each_nodes_scenario_and_problem() {
    use bootvol_core::boot::{BootSnapshot, Templates};
    use bootvol_core::model::ProvisionState;
    use bootvol_core::recent::BootResult;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let db = scenario_db(&config);
    let good = db.node_record("iscsi-chap").unwrap().unwrap();
    let mut broken = good.clone();
    broken.node.uuid = "44444444-4444-4444-8444-00000000b001".into();
    broken.node.name = "broken".into();
    broken.ports.clear();
    for target in &mut broken.volume_targets {
        target.properties.clear();
    }
    let mut waiting = broken.clone();
    waiting.node.uuid = "44444444-4444-4444-8444-00000000b002".into();
    waiting.node.provision_state = ProvisionState::Available;
    let templates = Templates::new(None).unwrap();
    let snapshot = BootSnapshot::build(
        &[good.clone(), broken.clone(), waiting.clone()],
        &templates,
        &config.boot_settings(),
        config.default.default_storage_interface,
    )
    .unwrap();
    let served = snapshot.node(&good.node.uuid).unwrap();
    assert_eq!((served.scenario, served.boot_problem()), ("iscsi", None));
    assert_eq!(served.result(), BootResult::Served("iscsi"));
    assert!(std::sync::Arc::ptr_eq(served, snapshot.script(good.ports[0].address).unwrap()));
    let invalid = snapshot.node(&broken.node.uuid).expect("kept without a port");
    assert_eq!(invalid.scenario, "invalid");
    assert!(invalid.problem.as_deref().unwrap().contains("volume target boot_index 0"));
    assert_eq!(invalid.result(), BootResult::DefaultScript("invalid"));
    let later = snapshot.node(&waiting.node.uuid).unwrap();
    assert_eq!((later.scenario, later.problem.as_deref()), ("not-deployed", None));
    assert_eq!(
        later.boot_problem(),
        invalid.problem.as_deref(),
        "the same decision, once deployed"
    );
    assert!(snapshot.node("no-such-node").is_none());
}

/// A snapshot updated by the changed nodes alone serves what one built anew from every record
/// serves: a node whose state changed, a port moved between two nodes, a node deleted, a node
/// added; MAC by MAC, node by node, and in its counts.
#[test]
fn a_snapshot_updated_by_its_changed_nodes_is_the_one_built_anew() {
    use bootvol_core::boot::{BootSnapshot, Templates};
    use bootvol_core::model::{NodeRecord, ProvisionState};
    let config = config(tempfile::tempdir().unwrap().path());
    let db = scenario_db(&config);
    let before: Vec<NodeRecord> = db.node_records().unwrap();
    let templates = Templates::new(None).unwrap();
    let settings = config.boot_settings();
    let storage = config.default.default_storage_interface;
    let build = |records: &[NodeRecord]| {
        BootSnapshot::build(records, &templates, &settings, storage).unwrap()
    };
    let old = build(&before);
    let mut after = before.clone();
    let at = |records: &[NodeRecord], name: &str| {
        records.iter().position(|r| r.node.name == name).unwrap()
    };
    // iscsi-chap undeployed; fcoe's port moves to aoe; http-san deleted; a copy of nfs-root
    // added under a new UUID, name and MAC.
    let chap = at(&after, "iscsi-chap");
    after[chap].node.provision_state = ProvisionState::Available;
    let (fcoe, aoe) = (at(&after, "fcoe"), at(&after, "aoe"));
    let port = after[fcoe].ports.remove(0);
    let moved = port.address;
    after[aoe].ports.push(port);
    let gone = after.remove(at(&after, "http-san"));
    let mut added = after[at(&after, "nfs-root")].clone();
    added.node.uuid = "55555555-5555-4555-8555-000000000001".into();
    added.node.name = "nfs-root-2".into();
    added.ports[0].address = "52:54:00:55:00:01".parse().unwrap();
    added.ports[0].uuid = "55555555-5555-4555-8555-000000000002".into();
    after.push(added.clone());
    let record = |name: &str| {
        let record = after.iter().find(|r| r.node.name == name).cloned().unwrap();
        (record.node.uuid.clone(), Some(record))
    };
    let changed = vec![
        record("iscsi-chap"),
        record("fcoe"),
        record("aoe"),
        (gone.node.uuid.clone(), None),
        (added.node.uuid.clone(), Some(added.clone())),
    ];
    let updated = old.with_changes(&changed, &templates, &settings, storage);
    let anew = build(&after);
    let macs = before.iter().chain(&after).flat_map(|r| r.ports.iter().map(|p| p.address));
    for mac in macs {
        let text = |s: &BootSnapshot| s.script(mac).map(|x| (x.text.clone(), x.node.clone()));
        assert_eq!(text(&updated), text(&anew), "{mac}");
    }
    for uuid in before.iter().chain(&after).map(|r| r.node.uuid.as_str()) {
        let served = |s: &BootSnapshot| s.node(uuid).map(|x| (**x).clone());
        assert_eq!(served(&updated), served(&anew), "{uuid}");
    }
    assert_eq!(updated.node_count(), anew.node_count());
    assert_eq!(updated.mac_count(), anew.mac_count());
    assert_eq!(updated.nodes_by_state(), anew.nodes_by_state());
    assert_eq!(updated.script(moved).unwrap().node.as_deref(), Some("aoe"), "the moved MAC");
    assert!(updated.node(&gone.node.uuid).is_none());
    // The old snapshot is untouched: requests in flight keep what they started with.
    assert_eq!(old.node_count(), before.len());
    assert_eq!(old.script(moved).unwrap().node.as_deref(), Some("fcoe"));
}
