//! The conductor through the `bootvol` binary: deploy, undeploy, power with volume toggling,
//! validation, node locks, recovery of interrupted actions, events and their webhook.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cinder_support::{Cinder, Fault, FaultProxy};
use crate::support::Appliance;

fn appliance(extra: &str) -> Appliance {
    let app = Appliance::with_config(|dir| {
        let config = format!(
            r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "external", "cinder"]
[database]
{database}
[boot]
script_secrets = "any" # clients on loopback
[http]
public_url = "http://192.0.2.10:8080"
files_root = "{dir}/files"
{extra}"#,
            dir = dir.display(),
            database = crate::support::database(dir)
        );
        if config.contains("[cinder]") {
            config
        } else {
            config + "[cinder]\nurl = \"http://127.0.0.1:9/v3\"\n"
        }
    });
    std::fs::create_dir_all(app.path("files")).unwrap();
    app
}

fn events(app: &Appliance, node: &str) -> Vec<Value> {
    app.ok(&["events", "--node", node, "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn iscsi_node(name: &str, mac: &str) -> Value {
    json!({"name": name, "driver": "fake", "storage_interface": "external",
        "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": mac}],
        "volume_connectors": [{"type": "iqn", "connector_id": format!("iqn.2024-01.org.example.node:{name}")}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v1",
            "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1", "target_portal": "192.0.2.5:3260", "target_lun": 1}}]})
}

fn event_types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["event_type"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn deploy_boots_the_volume_and_undeploy_removes_the_script() {
    let app = appliance("");
    app.apply(json!([iscsi_node("n1", "52:54:00:d0:00:01")]));
    let mac = ["render", "--mac", "52:54:00:d0:00:01"];
    assert!(
        app.ok(&mac).contains("no boot volume to attach (not-deployed)"),
        "available nodes do not boot their volume"
    );
    let validate = app.ok(&["node", "validate", "n1"]);
    for interface in ["boot", "deploy", "power", "storage"] {
        assert!(
            validate.lines().any(|l| l.starts_with(interface) && l.ends_with(" ok")),
            "{validate}"
        );
    }
    assert_eq!(app.ok(&["node", "deploy", "n1"]).trim(), "n1: active");
    let node = app.show("n1");
    assert_eq!(node["node"]["provision_state"], "active");
    assert_eq!(node["node"]["power_state"], "power on");
    assert_eq!(node["node"]["instance_info"]["boot_option"], "netboot");
    assert_eq!(node["node"]["driver_internal_info"]["boot_device"], "pxe");
    assert!(app.ok(&mac).contains("sanboot --no-describe --drive 0x80"));
    let types = event_types(&events(&app, "n1"));
    for expected in [
        "baremetal.node.provision_set.start",
        "baremetal.node.power_set.start",
        "baremetal.node.power_set.end",
        "baremetal.node.provision_set.end",
    ] {
        assert!(types.contains(&expected.to_owned()), "{expected} missing from {types:?}");
    }
    assert!(app.fails(&["node", "deploy", "n1"]).contains("cannot deploy a node that is active"));

    assert_eq!(app.ok(&["node", "undeploy", "n1"]).trim(), "n1: available");
    let node = app.show("n1");
    assert_eq!(node["node"]["power_state"], "power off");
    assert!(node["node"]["instance_info"].get("boot_option").is_none());
    assert!(app.ok(&mac).contains("not-deployed"), "the node's boot script is gone");
}

#[test]
fn hba_nodes_boot_their_disk_and_failed_validation_is_deploy_failed() {
    let app = appliance("");
    app.apply(json!([
        {"name": "hba", "driver": "fake", "storage_interface": "external", "properties": {"capabilities": "hba_boot:true"},
         "ports": [{"address": "52:54:00:d0:01:01"}], "volume_connectors": [{"type": "wwpn", "connector_id": "20000025b500000b"}],
         "volume_targets": [{"volume_type": "fibre_channel", "boot_index": 0, "volume_id": "v-hba",
             "properties": {"target_wwn": "500a0982991b8dc6", "target_lun": 0}}]},
        {"name": "wrong", "driver": "fake", "boot_interface": "pxe", "storage_interface": "external",
         "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": "52:54:00:d0:01:02"}],
         "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:wrong"}],
         "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v2",
             "properties": {"target_iqn": "iqn.2024-01.org.example.san:v2", "target_portal": "192.0.2.5:3260"}}]},
        {"name": "plain", "driver": "fake", "ports": [{"address": "52:54:00:d0:01:03"}]}
    ]));
    app.ok(&["node", "deploy", "hba"]);
    let node = app.show("hba");
    assert_eq!(
        node["node"]["driver_internal_info"]["boot_device"], "disk",
        "scenario 3 boots the HBA's LUN"
    );
    assert_eq!(node["node"]["instance_info"]["boot_option"], "local");

    let validate = app.run(&["node", "validate", "wrong"]);
    assert!(!validate.status.success());
    assert!(
        String::from_utf8_lossy(&validate.stdout)
            .contains("boot     FAILED: boot interface pxe does not declare iscsi_volume_boot")
    );
    let stderr = app.fails(&["node", "deploy", "wrong"]);
    assert!(
        stderr.contains(
            "validation failed: boot: boot interface pxe does not declare iscsi_volume_boot"
        ),
        "{stderr}"
    );
    assert_eq!(app.show("wrong")["node"]["provision_state"], "deploy failed");
    assert!(
        events(&app, "wrong")
            .iter()
            .any(|e| e["event_type"] == "baremetal.node.provision_set.error")
    );

    let stderr = app.fails(&["node", "deploy", "plain"]);
    assert!(stderr.contains("bootvol deploys boot-from-volume nodes only"), "{stderr}");
}

#[test]
fn a_locked_node_refuses_a_second_action_and_a_crashed_one_is_recovered() {
    let app = appliance("");
    app.apply(json!([iscsi_node("n1", "52:54:00:d0:02:01")]));
    let uuid = app.show("n1")["node"]["uuid"].as_str().unwrap().to_owned();
    // A live process (pid 1) holds the node.
    let stat = std::fs::read_to_string("/proc/1/stat").unwrap();
    let start = stat[stat.rfind(')').unwrap() + 2..].split(' ').nth(19).unwrap().to_owned();
    let db = app.db();
    let live = bootvol_db::ActionToken::of(bootvol_db::ProcessId { pid: 1, start }, "deploy");
    let now = bootvol_core::timefmt::now_unix() as i64;
    db.try_lock_node(&uuid, &live, now, bootvol_db::LEASE_SECS).unwrap().unwrap();
    let stderr = app.fails(&["node", "power", "n1", "on"]);
    assert!(stderr.contains("node n1 is locked by deploy (process 1"), "{stderr}");

    // A process that died mid-deploy: the node ends in deploy failed, not stuck.
    db.unlock_node(&uuid, &live).unwrap();
    let gone = bootvol_db::ActionToken::of(
        bootvol_db::ProcessId { pid: 1, start: "gone".into() },
        "deploy",
    );
    db.try_lock_node(&uuid, &gone, now, bootvol_db::LEASE_SECS).unwrap().unwrap();
    let mut record = db.node_record("n1").unwrap().unwrap();
    record.node.provision_state = bootvol_core::model::ProvisionState::Deploying;
    record.node.target_provision_state = Some(bootvol_core::model::ProvisionState::Active);
    db.save_node_runtime(&record.node).unwrap();
    app.ok(&["node", "power", "n1", "on"]);
    let node = app.show("n1");
    assert_eq!(node["node"]["provision_state"], "deploy failed");
    // The power action that noticed it then ran (and, as any new action, cleared last_error);
    // the event says what happened.
    let events = events(&app, "n1");
    assert!(
        events.iter().any(|e| e["event_type"] == "baremetal.node.provision_set.error"
            && e["payload"]["error"].as_str().unwrap_or("").contains("the deploy was interrupted")),
        "{events:?}"
    );
    assert_eq!(
        app.ok(&["node", "deploy", "n1"]).trim(),
        "n1: active",
        "an operator can retry from deploy failed"
    );
}

#[test]
fn power_toggles_cinder_attachments_and_a_failed_attach_aborts_power_on() {
    let Some(cinder) = Cinder::start() else { return };
    let proxy = FaultProxy::start(&cinder.url);
    let app = appliance(&format!(
        "[cinder]\nurl = \"{}/v3\"\nurl_timeout = 5\nretries = 1\nsync_interval = 0\n",
        proxy.url
    ));
    let volume = cinder.create_volume("power");
    app.apply(json!([{"name": "n1", "driver": "fake", "storage_interface": "cinder",
        "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": "52:54:00:d0:03:01"}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:n1"}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": volume}]}]));
    app.ok(&["node", "deploy", "n1"]);
    assert_eq!(cinder.volume(&volume)["status"], "in-use");
    assert!(
        app.ok(&["render", "--mac", "52:54:00:d0:03:01"])
            .contains("set password bootvol-chap-secret-1")
    );

    app.ok(&["node", "power", "n1", "off"]);
    cinder.assert_free(&volume, "powered off");
    assert!(
        !app.ok(&["render", "--mac", "52:54:00:d0:03:01"]).contains("bootvol-chap-secret"),
        "no secret while detached"
    );
    app.ok(&["node", "power", "n1", "on"]);
    assert_eq!(cinder.volume(&volume)["status"], "in-use");

    app.ok(&["node", "power", "n1", "off"]);
    proxy.fail("POST", "/attachments", Fault::Error500, 10);
    let stderr = app.fails(&["node", "power", "n1", "on"]);
    assert!(stderr.contains("power on aborted: attaching volumes failed"), "{stderr}");
    assert_eq!(app.show("n1")["node"]["power_state"], "power off", "the node stays off");
    cinder.assert_free(&volume, "aborted power on");
    proxy.clear();

    // A detach that fails on tear-down: error state, an error event, and a retry works.
    app.ok(&["node", "power", "n1", "on"]);
    proxy.fail("DELETE", "/attachments/", Fault::Error500, 100);
    let stderr = app.fails(&["node", "undeploy", "n1"]);
    assert!(stderr.contains("detaching volumes failed"), "{stderr}");
    assert_eq!(app.show("n1")["node"]["provision_state"], "error");
    let types = event_types(&events(&app, "n1"));
    assert!(types.contains(&"baremetal.node.storage_detach.error".to_owned()), "{types:?}");
    proxy.clear();
    assert_eq!(app.ok(&["node", "undeploy", "n1"]).trim(), "n1: available");
    cinder.assert_free(&volume, "after undeploy");
    let types = event_types(&events(&app, "n1"));
    assert!(types.contains(&"baremetal.node.storage_detach.start".to_owned()));
    assert!(types.contains(&"baremetal.node.storage_detach.end".to_owned()));
    assert!(
        app.ok(&["events", "--node", "n1"]).lines().all(|l| !l.contains("bootvol-chap-secret"))
    );
}

/// A webhook delivery: its signature header and body.
type Delivery = (String, Vec<u8>);

#[test]
#[allow(clippy::disallowed_methods)]
fn serve_delivers_signed_events_to_the_webhook_and_retries() {
    // A receiver that fails its first request, then records what it gets.
    let received: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    let calls = Arc::new(Mutex::new(0));
    let (hook, _receiver) = {
        let (received, calls) = (Arc::clone(&received), Arc::clone(&calls));
        crate::support::Background::serve("the webhook receiver", |listener, shutdown| async move {
            let app = axum::Router::new().route(
                "/hook",
                axum::routing::post(
                    move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                        let (received, calls) = (Arc::clone(&received), Arc::clone(&calls));
                        async move {
                            let mut n = calls.lock().unwrap();
                            *n += 1;
                            if *n == 1 {
                                return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                            }
                            let signature = headers
                                .get("X-Bootvol-Signature")
                                .unwrap()
                                .to_str()
                                .unwrap()
                                .to_owned();
                            received.lock().unwrap().push((signature, body.to_vec()));
                            axum::http::StatusCode::OK
                        }
                    },
                ),
            );
            axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await?;
            Ok(())
        })
    };
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let tftp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let app = appliance(&format!(
        "[tftp]\nlisten = \"{tftp}\"\nroot = \"/tmp\"\n[notifications]\nwebhook_url = \"http://{hook}/hook\"\nwebhook_secret = \"hook-secret\"\n[api]\nlisten = \"127.0.0.1:0\"\n"
    ));
    let config = std::fs::read_to_string(app.path("bootvol.toml"))
        .unwrap()
        .replace("[http]\n", &format!("[http]\nlisten = \"{http}\"\n"));
    std::fs::write(app.path("bootvol.toml"), config).unwrap();
    app.apply(json!([iscsi_node("n1", "52:54:00:d0:04:01")]));
    let mut serve =
        app.command(&["serve"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    app.ok(&["node", "deploy", "n1"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.lock().unwrap().len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill").arg("-TERM").arg(serve.id().to_string()).status();
    serve.wait().unwrap();
    let received = received.lock().unwrap();
    assert!(received.len() >= 4, "events delivered: {}", received.len());
    for (signature, body) in received.iter() {
        assert_eq!(
            signature,
            &bootvol_control::notify::sign("hook-secret", body),
            "signed with the secret"
        );
        let event: Value = serde_json::from_slice(body).unwrap();
        assert!(event["event_type"].as_str().unwrap().starts_with("baremetal.node."));
        assert_eq!(event["publisher_id"], "bootvol");
    }
    let types: Vec<String> = received
        .iter()
        .map(|(_, b)| {
            serde_json::from_slice::<Value>(b).unwrap()["event_type"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(
        types.contains(&"baremetal.node.provision_set.start".to_owned()),
        "the event refused once was retried: {types:?}"
    );
    assert!(*calls.lock().unwrap() > received.len(), "the first delivery failed and was retried");
}

#[test]
fn every_scenario_deploys_with_the_boot_device_it_needs_and_undeploys() {
    let app = appliance("");
    std::fs::create_dir_all(app.path("files/nfs")).unwrap();
    std::fs::write(app.path("files/nfs/vmlinuz"), "kernel").unwrap();
    std::fs::write(app.path("files/nfs/initrd.img"), "initrd").unwrap();
    // The scenario inventory, every node available and on the fake power driver; the Cinder
    // ones are left out (no Cinder here).
    let text =
        std::fs::read_to_string(crate::support::fixture("inventory/scenarios.json")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    let nodes: Vec<Value> = doc["nodes"]
        .as_array_mut()
        .unwrap()
        .drain(..)
        .filter(|n| n["storage_interface"] != "cinder")
        .map(|mut n| {
            n.as_object_mut().unwrap().remove("provision_state");
            n
        })
        .collect();
    app.apply(Value::Array(nodes));
    for (node, device, option) in [
        ("iscsi-chap", "pxe", "netboot"),
        ("iscsi-uefi", "pxe", "netboot"),
        ("fcoe", "pxe", "netboot"),
        ("aoe", "pxe", "netboot"),
        ("http-san", "pxe", "netboot"),
        ("nfs-root", "pxe", "netboot"),
        ("hba", "disk", "local"),
    ] {
        assert_eq!(app.ok(&["node", "deploy", node]).trim(), format!("{node}: active"));
        let shown = app.show(node);
        assert_eq!(shown["node"]["driver_internal_info"]["boot_device"], device, "{node}");
        assert_eq!(shown["node"]["instance_info"]["boot_option"], option, "{node}");
        assert_eq!(shown["node"]["power_state"], "power on", "{node}");
        assert_eq!(app.ok(&["node", "undeploy", node]).trim(), format!("{node}: available"));
        assert_eq!(app.show(node)["node"]["power_state"], "power off", "{node}");
    }
    // Nodes that are not bootable from a volume as configured fail to deploy, saying why.
    let stderr = app.fails(&["node", "deploy", "no-capability"]);
    assert!(stderr.contains("capability iscsi_boot is not true"), "{stderr}");
    let stderr = app.fails(&["node", "deploy", "noop-storage"]);
    assert!(stderr.contains("bootvol deploys boot-from-volume nodes only"), "{stderr}");
    // NFS root needs its kernel and ramdisk on disk.
    std::fs::remove_file(app.path("files/nfs/vmlinuz")).unwrap();
    let stderr = app.fails(&["node", "deploy", "nfs-root"]);
    assert!(stderr.contains("nfs/vmlinuz under files_root"), "{stderr}");
}
