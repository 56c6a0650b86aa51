//! Node locks exclude actions, not processes: inside one `bootvol serve`, the background
//! services (power sync, Cinder sync, deploy expiry, recovery) never take over, release or
//! overwrite the lock of an action started through the API; and SIGTERM lets an action in
//! flight finish instead of killing it. The power driver is real and slow: sushy-tools' Redfish
//! emulator with every power change landing 3 s after it was asked for.

use std::time::{Duration, Instant};

use bootvol_core::config::Config;
use bootvol_db::Db;
use serde_json::{Value, json};

use crate::power::peers::{Sushy, SushyOptions};

const POWER_DELAY: u32 = 3;

/// An appliance whose power sync and Cinder sync tick every second, with one Redfish node on
/// external storage, and a Cinder attachment record on it so that the Cinder sync pass has that
/// node to look at (its Cinder is unreachable: a sync pass fails, as an unlucky one would).
struct Rig {
    sushy: Sushy,
    dir: tempfile::TempDir,
    base: String,
    shutdown: tokio_util::sync::CancellationToken,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    uuid: String,
}

impl Rig {
    fn start() -> Option<Rig> {
        let sushy =
            Sushy::start(SushyOptions { power_delay: POWER_DELAY, ..SushyOptions::default() })?;
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "external", "cinder"]
[database]
{database}
[boot]
script_secrets = "any" # clients on loopback
[http]
public_url = "http://192.0.2.10:8080"
files_root = "{dir}"
[api]
auth_strategy = "noauth"
[conductor]
power_sync_interval = 1
power_state_wait = 20
# One try at a held lock: the second action is refused while the deploy still runs, not
# after the retries have waited for the deploy's end.
node_locked_retry_attempts = 1
[cinder]
url = "http://127.0.0.1:9/v3"
sync_interval = 1
"#,
            dir = dir.path().display(),
            database = crate::support::database(dir.path())
        );
        let config = Config::from_toml(&text, "test").unwrap();
        let inventory = json!({"nodes": [{"name": "n1", "driver": "redfish", "storage_interface": "external",
            "driver_info": {"redfish_address": sushy.url, "redfish_system_id": Sushy::system_path(1)},
            "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": "52:54:00:ee:00:01"}],
            "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:n1"}],
            "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v1",
                "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1", "target_portal": "192.0.2.5:3260", "target_lun": 1}}]}]});
        let specs = bootvol_core::inventory::parse(
            &inventory.to_string(),
            bootvol_core::inventory::Format::Json,
            &config,
        )
        .unwrap();
        let mut db = Db::open_config(&config.database).unwrap();
        db.apply_inventory(&specs, false).unwrap();
        let record = db.node_record("n1").unwrap().unwrap();
        db.save_attachment_record(&bootvol_db::AttachmentRecord {
            node_uuid: record.node.uuid.clone(),
            target_uuid: record.volume_targets[0].uuid.clone(),
            volume_id: "v1".into(),
            api: "attachments".into(),
            attachment_id: Some("a1".into()),
            state: bootvol_db::AttachmentState::Attached,
            step: "tagged".into(),
            connector: json!({}),
            last_error: None,
            updated_at: None,
        })
        .unwrap();
        let (api, _, shutdown, thread) = crate::support::start_serve_joinable(config);
        let rig = Rig {
            sushy,
            dir,
            base: format!("http://{api}"),
            shutdown,
            thread: Some(thread),
            uuid: record.node.uuid,
        };
        Some(rig)
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("X-OpenStack-Ironic-API-Version", "1.38")
            .header("Content-Type", "application/json")
            .body(body.map(|b| b.to_string()).unwrap_or_default())
            .unwrap();
        match agent.run(request) {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let text = response.body_mut().read_to_string().unwrap_or_default();
                (status, serde_json::from_str(&text).unwrap_or(Value::Null))
            }
            Err(e) => panic!("{method} {path}: {e}"),
        }
    }

    fn db(&self) -> Db {
        crate::support::open_db_ok(self.dir.path()).unwrap()
    }

    fn node(&self) -> Value {
        self.call("GET", "/v1/nodes/n1", None).1
    }

    /// Stops `serve` as SIGTERM does and waits for it to return.
    fn stop(&mut self) -> Duration {
        let started = Instant::now();
        self.shutdown.cancel();
        self.thread.take().unwrap().join().unwrap().unwrap();
        started.elapsed()
    }
}

/// A rig's `serve` is joined when the test ends; an error or panic in it fails the test.
impl Drop for Rig {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            crate::support::join_server("serve", thread);
        }
    }
}

#[test]
fn background_services_never_take_over_an_api_action() {
    let Some(mut rig) = Rig::start() else { return };
    let (status, body) =
        rig.call("PUT", "/v1/nodes/n1/states/provision", Some(json!({"target": "active"})));
    assert_eq!(status, 202, "{body}");
    // The passing state and the target are recorded before the 202, as Ironic records them: a
    // client that waits for the node to leave `deploying` never sees it before it entered.
    let node = rig.node();
    assert_eq!(node["provision_state"], "deploying", "{node}");
    assert_eq!(node["target_provision_state"], "active", "{node}");
    let db = rig.db();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Counted in time, not in samples: under load each look takes longer than its 100 ms pause.
    let (mut deploying, mut refused): (Option<(Instant, Instant)>, bool) = (None, false);
    loop {
        let node = rig.node();
        if node["provision_state"] != "deploying" {
            assert_eq!(node["provision_state"], "active", "{node}");
            break;
        }
        assert!(Instant::now() < deadline, "the deploy never ended: {node}");
        if node["provision_state"] == "deploying" {
            // Power sync and Cinder sync tick every second in this process while the deploy
            // waits on the BMC: the lock stays the deploy's, whole.
            let holder = db.lock_holder(&rig.uuid).unwrap();
            let holder = holder.unwrap_or_else(|| panic!("the deploy's lock vanished: {node}"));
            assert_eq!(holder.action, "deploy", "{holder:?}");
            let now = Instant::now();
            let (first, _) = *deploying.get_or_insert((now, now));
            deploying = Some((first, now));
            if !refused && now - first >= Duration::from_millis(1500) {
                // A second action meanwhile is refused, like any other process's.
                let (status, body) = rig.call(
                    "PUT",
                    "/v1/nodes/n1/states/power",
                    Some(json!({"target": "power off"})),
                );
                assert_eq!(status, 409, "{body}");
                refused = true;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Two ticks of each background service fit in what was seen of the deploy.
    let (first, last) = deploying.expect("the deploy was never seen running");
    assert!(
        last - first >= Duration::from_secs(2),
        "the deploy was seen running for {:?} only: the BMC was not slow enough",
        last - first
    );
    assert!(refused);
    let node = rig.node();
    assert_eq!(node["power_state"], "power on", "{node}");
    assert_eq!(node["target_provision_state"], Value::Null, "{node}");
    assert_eq!(node["last_error"], Value::Null, "{node}");
    assert_eq!(db.lock_holder(&rig.uuid).unwrap(), None, "released at the end");
    // The BMC saw exactly one power-on: power sync only reads.
    let resets: Vec<Value> = rig
        .sushy
        .requests()
        .into_iter()
        .filter(|r| r["method"] == "POST" && r["path"].as_str().unwrap_or("").contains("Reset"))
        .collect();
    assert_eq!(resets.len(), 1, "{resets:?}");
    // Power sync did run beside it, and the Cinder sync passes were recorded (failed: Cinder is
    // unreachable), without touching the deploy's lock.
    let status = db.sync_status().unwrap().expect("a Cinder sync pass ran");
    assert_eq!(status.ran_by, bootvol_db::SyncRunner::Serve);
    rig.stop();
}

#[test]
fn sigterm_lets_an_action_in_flight_finish() {
    let Some(mut rig) = Rig::start() else { return };
    let (status, body) =
        rig.call("PUT", "/v1/nodes/n1/states/power", Some(json!({"target": "power on"})));
    assert_eq!(status, 202, "{body}");
    // The target is recorded before the 202, not some time after it.
    assert_eq!(rig.node()["target_power_state"], "power on");
    let took = rig.stop();
    // The power-on lands on the BMC 3 s after it was asked for; serve waited for it.
    assert!(took >= Duration::from_secs(1), "serve returned at once ({took:?})");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let db = rig.db();
    let record = db.node_record("n1").unwrap().unwrap();
    assert_eq!(record.node.power_state, Some(bootvol_core::model::PowerState::On));
    assert_eq!(record.node.target_power_state, None);
    assert_eq!(record.node.last_error, None);
    assert_eq!(db.lock_holder(&rig.uuid).unwrap(), None, "the action released its lock");
}
