//! The scenario decision's validation messages and the `boot_option` helper, on plain values.

use serde_json::{Value, json};

use bootvol_core::boot::{BootOption, Scenario, decide, set_boot_option};
use bootvol_core::model::{NodeRecord, StorageInterfaceName};

/// A valid iSCSI node; tests change one thing at a time.
fn iscsi_node() -> Value {
    json!({
        "node": {"uuid": "33333333-3333-4333-8333-000000000001", "name": "n", "driver": "fake",
            "driver_info": {}, "properties": {"capabilities": "iscsi_boot:true"}, "instance_info": {},
            "driver_internal_info": {}, "extra": {}, "storage_interface": "external", "boot_interface": "ipxe",
            "deploy_interface": "direct", "power_state": null, "target_power_state": null,
            "provision_state": "available", "target_provision_state": null, "maintenance": false,
            "maintenance_reason": null, "last_error": null, "created_at": null, "updated_at": null},
        "ports": [],
        "volume_connectors": [{"uuid": "c1", "type": "iqn", "connector_id": "iqn.2024-01.org.example:n", "extra": {}}],
        "volume_targets": [{"uuid": "t0", "volume_type": "iscsi", "boot_index": 0, "volume_id": "v0", "extra": {},
            "properties": {"target_iqn": "iqn.2024-01.org.example.san:v0", "target_portal": "192.0.2.5:3260"}}]
    })
}

fn record(value: Value) -> NodeRecord {
    serde_json::from_value(value).unwrap()
}

fn decided(value: Value) -> Result<Scenario, String> {
    decide(&record(value), StorageInterfaceName::Noop).map_err(|e| e.0)
}

fn fails_with(value: Value, message: &str) {
    match decided(value) {
        Err(e) => assert!(e.contains(message), "expected {message:?} in {e:?}"),
        Ok(s) => panic!("expected {message:?}, got {s:?}"),
    }
}

#[test]
fn a_valid_iscsi_node() {
    assert_eq!(decided(iscsi_node()), Ok(Scenario::Iscsi));
}

#[test]
fn noop_storage_or_no_recorded_interface_is_not_boot_from_volume() {
    let mut v = iscsi_node();
    v["node"]["storage_interface"] = json!("noop");
    assert_eq!(decided(v), Ok(Scenario::NotBootFromVolume));
    let mut v = iscsi_node();
    v["node"]["storage_interface"] = Value::Null;
    assert_eq!(decided(v.clone()), Ok(Scenario::NotBootFromVolume), "the default applies: noop");
    assert_eq!(decide(&record(v), StorageInterfaceName::External), Ok(Scenario::Iscsi));
}

#[test]
fn connectors_must_agree_with_the_boot_volume() {
    let mut v = iscsi_node();
    v["volume_connectors"] = json!([]);
    fails_with(v, "needs one volume connector of type iqn");
    let mut v = iscsi_node();
    v["volume_connectors"].as_array_mut().unwrap().push(json!({"uuid": "c2", "type": "iqn", "connector_id": "iqn.2024-01.org.example:m", "extra": {}}));
    fails_with(v, "2 volume connectors of type iqn");
    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("fibre_channel_boot:true");
    v["volume_targets"][0]["volume_type"] = json!("fibre_channel");
    fails_with(v, "needs at least one volume connector of type wwpn");
}

#[test]
fn capabilities_must_agree_with_the_boot_volume() {
    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("iscsi_boot:false");
    fails_with(v, "boot volume v0 is iscsi but capability iscsi_boot is not true");
    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("iscsi_boot:true,hba_boot:true");
    fails_with(v, "hba_boot and iscsi_boot are both true");
    let mut v = iscsi_node();
    v["volume_targets"][0]["boot_index"] = json!(1);
    fails_with(
        v,
        "capability iscsi_boot is true but the node has no volume target with boot_index 0",
    );
    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("");
    v["volume_targets"][0]["boot_index"] = json!(1);
    fails_with(v, "the node has volume targets but none with boot_index 0");
    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("hba_boot:true");
    v["volume_targets"] = json!([]);
    fails_with(
        v,
        "capability hba_boot is true but the node has no volume target with boot_index 0",
    );
}

#[test]
fn interfaces_must_declare_the_capability_tag() {
    let mut v = iscsi_node();
    v["node"]["boot_interface"] = json!("pxe");
    fails_with(v, "boot interface pxe does not declare iscsi_volume_boot");
    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("hba_boot:true");
    v["node"]["deploy_interface"] = json!("ramdisk");
    v["node"]["instance_info"] = json!({"force_deployment": true});
    fails_with(v.clone(), "deploy interface ramdisk does not declare iscsi_volume_deploy");
    v["node"]["deploy_interface"] = json!("direct");
    assert_eq!(decided(v), Ok(Scenario::Hba { force_deployment: true }));
}

#[test]
fn nfs_root_needs_its_capability_kernel_and_ramdisk() {
    let mut v = iscsi_node();
    v["volume_targets"] = json!([]);
    v["node"]["properties"]["capabilities"] = json!("");
    v["node"]["instance_info"] = json!({"nfs_root": "192.0.2.7:/srv"});
    fails_with(v.clone(), "instance_info.nfs_root is set but capability nfs_boot is not true");
    v["node"]["properties"]["capabilities"] = json!("nfs_boot:true");
    fails_with(v.clone(), "NFS root boot needs instance_info.kernel");
    v["node"]["instance_info"]["kernel"] = json!("vmlinuz");
    fails_with(v.clone(), "NFS root boot needs instance_info.ramdisk");
    v["node"]["instance_info"]["ramdisk"] = json!("initrd");
    assert_eq!(decided(v.clone()), Ok(Scenario::NfsRoot));
    let mut with_iscsi = v.clone();
    with_iscsi["volume_targets"] = iscsi_node()["volume_targets"].clone();
    fails_with(with_iscsi, "capability nfs_boot is true but boot volume v0 is iscsi, not nfs");
}

#[test]
fn boot_option_helper_sets_and_returns_instance_info_boot_option() {
    let mut r = record(iscsi_node());
    assert_eq!(set_boot_option(&mut r, StorageInterfaceName::Noop), Ok(BootOption::Netboot));
    assert_eq!(r.node.instance_info["boot_option"], "netboot");

    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("hba_boot:true");
    let mut r = record(v);
    assert_eq!(set_boot_option(&mut r, StorageInterfaceName::Noop), Ok(BootOption::Local));
    assert_eq!(r.node.instance_info["boot_option"], "local");

    let mut v = iscsi_node();
    v["node"]["storage_interface"] = json!("noop");
    v["node"]["instance_info"] = json!({"boot_option": "netboot"});
    let mut r = record(v);
    assert_eq!(
        set_boot_option(&mut r, StorageInterfaceName::Noop),
        Ok(BootOption::Netboot),
        "kept"
    );

    let mut v = iscsi_node();
    v["volume_connectors"] = json!([]);
    let mut r = record(v);
    assert!(set_boot_option(&mut r, StorageInterfaceName::Noop).is_err());
    assert!(
        !r.node.instance_info.contains_key("boot_option"),
        "not written when the node does not validate"
    );
}

#[test]
fn hba_scenarios_need_no_connector_with_external_storage_but_do_with_cinder() {
    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("hba_boot:true");
    v["volume_connectors"] = json!([]);
    v["volume_targets"][0]["volume_type"] = json!("fibre_channel");
    v["volume_targets"][0]["properties"] =
        json!({"target_wwn": "500a0982991b8dc5", "target_lun": 1});
    assert_eq!(
        decided(v.clone()),
        Ok(Scenario::Hba { force_deployment: false }),
        "zoned by others"
    );
    v["node"]["storage_interface"] = json!("cinder");
    fails_with(v, "needs at least one volume connector of type wwpn");
}

#[test]
fn a_boot_volume_of_a_type_no_scenario_boots_is_refused_with_its_reason() {
    let mut v = iscsi_node();
    v["volume_targets"][0]["volume_type"] = json!("rbd");
    fails_with(v.clone(), "has volume_type rbd, which no bootvol scenario boots");
    v["node"]["properties"]["capabilities"] = json!("hba_boot:true");
    fails_with(v, "an HBA boots only fibre_channel or iscsi volumes");
}

#[test]
fn a_connector_id_stored_as_given_is_refused_at_validation_with_its_reason() {
    // Ironic stores any connector_id; a boot needs one of its type.
    let mut v = iscsi_node();
    v["volume_connectors"][0]["connector_id"] = json!("tempest-connector_id-123");
    fails_with(v, "has connector_id tempest-connector_id-123, which is not a valid iSCSI name");
    let mut v = iscsi_node();
    v["node"]["properties"]["capabilities"] = json!("fibre_channel_boot:true");
    v["node"]["storage_interface"] = json!("cinder");
    v["volume_connectors"] =
        json!([{"uuid": "c2", "type": "wwpn", "connector_id": "port-1", "extra": {}}]);
    v["volume_targets"][0]["volume_type"] = json!("fibre_channel");
    v["volume_targets"][0]["properties"] =
        json!({"target_wwn": "500a0982991b8dc5", "target_lun": 1});
    fails_with(v, "has connector_id port-1, which is not a valid WWN");
}

/// Ironic's `secure_boot:true`: the node boots only through an iPXE signed with a key its `db`
/// holds, so bootvol refuses it until `[secure_boot]` is set, and in BIOS mode at all; the
/// script served says why, as the node page does.
#[test]
fn secure_boot_nodes_need_the_signing_key_and_uefi() {
    use bootvol_core::boot::{BootSettings, Templates, script_for, secure_boot};
    let with = |caps: &str| {
        let mut v = iscsi_node();
        v["node"]["properties"]["capabilities"] = json!(caps);
        record(v)
    };
    let node = with("iscsi_boot:true,secure_boot:true,boot_mode:uefi");
    assert_eq!(secure_boot(&node, true), Ok(true));
    assert_eq!(secure_boot(&with("iscsi_boot:true"), false), Ok(false));
    let unsigned = secure_boot(&node, false).unwrap_err().0;
    assert!(unsigned.contains("[secure_boot] key and cert are not set"), "{unsigned}");
    let bios = secure_boot(&with("iscsi_boot:true,secure_boot:True,boot_mode:bios"), true);
    assert!(bios.unwrap_err().0.contains("Secure Boot needs boot_mode:uefi"));

    // What the snapshot serves the deployed node: the default script and the reason, until
    // the key is set; then its volume.
    let mut node = node;
    node.node.provision_state = bootvol_core::model::ProvisionState::Active;
    let settings = |secure_boot| BootSettings {
        public_url: "http://192.0.2.10:8080".into(),
        san_attempts: 1,
        san_retry_delay: 1,
        peers: Vec::new(),
        secure_boot,
    };
    let templates = Templates::new(None).unwrap();
    let default = StorageInterfaceName::External;
    let refused = script_for(&templates, &settings(false), default, Some(&node));
    assert_eq!(refused.problem.as_deref(), Some(unsigned.as_str()));
    let served = script_for(&templates, &settings(true), default, Some(&node));
    assert_eq!((served.scenario, served.problem), ("iscsi", None));
}
