//! The conductor's BMC calls, as the one fake power driver it was given records them: the exact
//! sequence a deploy (volume boot and image deployment with its call-back), a power action and
//! an undeploy make. Needs no BMC: the nodes use the `fake` hardware type.

use std::path::Path;
use std::sync::Arc;

use bootvol_control::conductor::{Action, CallbackReport, Caller, Conductor, Verb};
use bootvol_control::power::fake::{FakeCall, FakePower};
use bootvol_control::power::{BootDevice, PowerAction, PowerDrivers, PowerSettings};
use bootvol_control::storage::StorageInterfaces;
use bootvol_core::config::Config;
use bootvol_core::inventory::{self, Format};
use bootvol_core::model::{PowerState, ProvisionState};
use bootvol_db::{Db, SharedDb};
use serde_json::{Value, json};

/// A conductor over an in-memory database holding `nodes`, whose fake power driver is `fake`.
fn conductor(files: &Path, nodes: Value, fake: &Arc<FakePower>) -> Conductor {
    for file in ["deploy/vmlinuz", "deploy/initrd.img", "images/image.raw"] {
        std::fs::create_dir_all(files.join(file).parent().unwrap()).unwrap();
        std::fs::write(files.join(file), b"x").unwrap();
    }
    let config = Arc::new(
        Config::from_toml(
            &format!(
                "[DEFAULT]\nenabled_storage_interfaces = [\"noop\", \"external\"]\n\
                 [http]\npublic_url = \"http://192.0.2.10:8080\"\nfiles_root = \"{}\"\n",
                files.display()
            ),
            "test",
        )
        .unwrap(),
    );
    let specs =
        inventory::parse(&json!({"nodes": nodes}).to_string(), Format::Json, &config).unwrap();
    let mut db = Db::open_in_memory().unwrap();
    db.apply_inventory(&specs, false).unwrap();
    let db = SharedDb::new(db);
    let storage = StorageInterfaces::new(Arc::clone(&config), db.clone()).unwrap();
    let power = PowerDrivers::with_fake(PowerSettings::default(), Arc::clone(fake));
    Conductor::new(config, db, storage, power)
}

/// An iSCSI boot-from-volume node (scenario 2: it network-boots its volume).
fn iscsi_node(name: &str) -> Value {
    json!({"name": name, "driver": "fake", "storage_interface": "external",
        "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": "52:54:00:fa:00:01"}],
        "volume_connectors": [{"type": "iqn", "connector_id": format!("iqn.2024-01.org.example.node:{name}")}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v1",
            "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1", "target_portal": "192.0.2.5:3260", "target_lun": 1}}]})
}

/// An HBA node whose volume gets an image written by the deploy ramdisk (scenario 4).
fn hba_node(name: &str) -> Value {
    json!({"name": name, "driver": "fake", "storage_interface": "external",
        "properties": {"capabilities": "hba_boot:true"},
        "instance_info": {"force_deployment": true, "image_source": "images/image.raw",
            "image_checksum": format!("sha256:{}", "ab".repeat(32))},
        "ports": [{"address": "52:54:00:fa:00:02"}],
        "volume_connectors": [{"type": "wwpn", "connector_id": "20000025b500fa02"}],
        "volume_targets": [{"volume_type": "fibre_channel", "boot_index": 0, "volume_id": "vol-hba",
            "properties": {"target_wwn": "5000c50015ea71ac", "target_lun": 0, "wwn": "0x5000c50015ea71ac"}}]})
}

/// The fake's calls for one node, oldest first.
fn calls_for(fake: &FakePower, uuid: &str) -> Vec<FakeCall> {
    fake.calls()
        .into_iter()
        .filter(|call| match call {
            FakeCall::SetPower { node, .. } | FakeCall::SetBootDevice { node, .. } => node == uuid,
        })
        .collect()
}

fn power(node: &str, action: PowerAction) -> FakeCall {
    FakeCall::SetPower { node: node.to_owned(), action }
}

fn boot_device(node: &str, device: BootDevice, persistent: bool) -> FakeCall {
    FakeCall::SetBootDevice { node: node.to_owned(), device, persistent }
}

/// Waits for the conductor's tracked tasks (the call-back's BMC steps run on one).
async fn settle(conductor: &Conductor) {
    conductor.tasks().close();
    conductor.tasks().wait().await;
    conductor.tasks().reopen();
}

#[tokio::test]
async fn an_image_deploy_network_boots_the_ramdisk_and_its_call_back_sets_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakePower::new());
    let conductor = conductor(dir.path(), json!([hba_node("d1")]), &fake);

    let node = conductor.run("d1", Action::Provision(Verb::Deploy)).await.unwrap();
    assert_eq!(node.node.provision_state, ProvisionState::WaitCallBack);
    let uuid = node.node.uuid.clone();
    // The ramdisk boots from the network once, the node being off: powered on, not rebooted.
    assert_eq!(
        calls_for(&fake, &uuid),
        [boot_device(&uuid, BootDevice::Pxe, false), power(&uuid, PowerAction::On)]
    );

    let ramdisk = Caller::any("10.0.0.2".parse().unwrap());
    let token = conductor.deploy_token(&uuid, ramdisk).await.unwrap();
    let report: CallbackReport = serde_json::from_value(
        json!({"status": "done", "disk": "/dev/sda", "sha256": "ab".repeat(32), "bytes": 1}),
    )
    .unwrap();
    conductor.deploy_callback(&uuid, &token, ramdisk, report).await.unwrap();
    settle(&conductor).await;
    // The call-back makes the volume the boot device for good; with the fake driver the
    // ramdisk reboots the node itself (`bootvol.reboot=1`), so no power call follows.
    assert_eq!(
        calls_for(&fake, &uuid),
        [
            boot_device(&uuid, BootDevice::Pxe, false),
            power(&uuid, PowerAction::On),
            boot_device(&uuid, BootDevice::Disk, true),
        ]
    );
    let node = conductor.load("d1").await.unwrap();
    assert_eq!(node.node.provision_state, ProvisionState::Active);
    assert_eq!(node.node.last_error, None);

    // Undeploy powers the (recorded on) node off, and touches the boot device no more.
    let node = conductor.run("d1", Action::Provision(Verb::Undeploy)).await.unwrap();
    assert_eq!(node.node.provision_state, ProvisionState::Available);
    assert_eq!(calls_for(&fake, &uuid)[3..], [power(&uuid, PowerAction::Off)]);
}

#[tokio::test]
async fn power_actions_a_volume_deploy_and_undeploy_reach_the_one_fake_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakePower::new());
    let conductor = conductor(dir.path(), json!([iscsi_node("n1")]), &fake);
    let uuid = conductor.load("n1").await.unwrap().node.uuid;

    let node = conductor.run("n1", Action::Power(PowerAction::On)).await.unwrap();
    assert_eq!(node.node.power_state, Some(PowerState::On));
    // Deploying a node that is on: the boot device for every boot, then a reboot.
    let node = conductor.run("n1", Action::Provision(Verb::Deploy)).await.unwrap();
    assert_eq!(node.node.provision_state, ProvisionState::Active);
    conductor
        .run("n1", Action::BootDevice { device: BootDevice::Disk, persistent: false })
        .await
        .unwrap();
    conductor.run("n1", Action::Power(PowerAction::Reboot)).await.unwrap();
    let node = conductor.run("n1", Action::Provision(Verb::Undeploy)).await.unwrap();
    assert_eq!(node.node.provision_state, ProvisionState::Available);
    assert_eq!(node.node.power_state, Some(PowerState::Off));
    // Undeploying a node that is off makes no power call.
    conductor.run("n1", Action::Provision(Verb::Deploy)).await.unwrap();
    conductor.run("n1", Action::Power(PowerAction::Off)).await.unwrap();
    conductor.run("n1", Action::Provision(Verb::Undeploy)).await.unwrap();

    assert_eq!(
        calls_for(&fake, &uuid),
        [
            power(&uuid, PowerAction::On),
            boot_device(&uuid, BootDevice::Pxe, true),
            power(&uuid, PowerAction::Reboot),
            boot_device(&uuid, BootDevice::Disk, false),
            power(&uuid, PowerAction::Reboot),
            power(&uuid, PowerAction::Off),
            boot_device(&uuid, BootDevice::Pxe, true),
            power(&uuid, PowerAction::On),
            power(&uuid, PowerAction::Off),
        ]
    );
}
