//! The cinder storage interface against a real Cinder (PyPI, `tests/cinder/`): attach, render,
//! detach and sync with both attach APIs; every step of attach and detach failed by a proxy;
//! a crash between two steps; Cinder unreachable while serving.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bootvol_db::{SyncPassOutcome, SyncRunner};
use serde_json::{Value, json};

use crate::cinder_support::{Cinder, Fault, FaultProxy};
use crate::support::Appliance;

const CHAP_SECRET: &str = "cinder-chap-secret-77";

/// bootvol's configuration and database in a temporary folder, talking to `cinder_url`; no
/// command may log a CHAP secret.
fn appliance(cinder_url: &str, api: &str) -> Appliance {
    Appliance::with_config(|dir| {
        format!(
            r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "external", "cinder"]
[database]
{}
[boot]
script_secrets = "any" # clients on loopback
[http]
public_url = "http://192.0.2.10:8080"
[cinder]
url = "{cinder_url}/v3"
url_timeout = 4
retries = 2
api = "{api}"
sync_interval = 0
"#,
            crate::support::database(dir)
        )
    })
    .never_logging(&[CHAP_SECRET, "rotated-secret-88", "bootvol-chap-secret-1"])
}

trait CinderNodes {
    fn add_node(&self, name: &str, mac: &str, volume: &str);
    fn node(&self, name: &str) -> Value;
}

impl CinderNodes for Appliance {
    /// One iSCSI boot-from-volume node on a Cinder volume.
    fn add_node(&self, name: &str, mac: &str, volume: &str) {
        let inventory = json!({"nodes": [{"name": name, "storage_interface": "cinder", "provision_state": "active",
            "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": mac}],
            "volume_connectors": [{"type": "iqn", "connector_id": format!("iqn.2024-01.org.example.node:{name}")},
                                  {"type": "ip", "connector_id": "192.0.2.101"}],
            "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": volume}]}]});
        self.apply(inventory["nodes"].clone());
    }

    fn node(&self, name: &str) -> Value {
        let export: Value = serde_json::from_str(&self.ok(&["export"])).unwrap();
        export["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).cloned().unwrap()
    }
}

fn backend() -> Value {
    json!({"target_portal": "192.0.2.20:3261", "target_iqn": "iqn.2010-10.org.openstack:volume-{volume_id}",
        "target_lun": 5, "auth_method": "CHAP", "auth_username": "chap-user", "auth_password": CHAP_SECRET})
}

fn attach_render_sync_detach(cinder: &Cinder, api: &str) {
    let app = appliance(&cinder.url, api);
    let volume = cinder.create_volume(&format!("boot-{api}"));
    app.add_node("n1", "52:54:00:c1:00:01", &volume);
    let uuid = app.node("n1")["uuid"].as_str().unwrap().to_owned();

    let out = app.ok(&["volumes", "attach", "n1"]);
    assert!(out.contains("attached: n1 (cinder storage)"), "{out}");
    let script = app.ok(&["render", "--mac", "52:54:00:c1:00:01"]);
    assert!(
        script.contains(&format!(
            "iscsi:192.0.2.20::3261:5:iqn.2010-10.org.openstack:volume-{volume}"
        )),
        "{api}: {script}"
    );
    assert!(script.contains("set username chap-user"));
    assert!(script.contains(&format!("set password {CHAP_SECRET}")));
    assert!(script.contains("set initiator-iqn iqn.2024-01.org.example.node:n1"));
    let v = cinder.volume(&volume);
    assert_eq!(v["status"], "in-use", "{api}");
    assert_eq!(v["attachments"].as_array().unwrap().len(), 1);
    let tag: Value =
        serde_json::from_str(v["metadata"][format!("bootvol_node_{uuid}")].as_str().unwrap())
            .unwrap();
    assert_eq!(tag["action"], "attach");
    assert!(!app.ok(&["export"]).contains(CHAP_SECRET), "export shows the CHAP secret");

    // Attach again: nothing new in Cinder.
    app.ok(&["volumes", "attach", "n1"]);
    assert_eq!(
        cinder.attachments(&volume).len(),
        1,
        "{api}: a second attach must not add an attachment"
    );

    // Sync: unchanged, then the backend moves the volume to another portal and rotates CHAP.
    let db = crate::support::open_db_ok(app.dir.path()).unwrap();
    assert_eq!(db.sync_status().unwrap(), None, "{api}: no pass recorded before the first");
    assert!(app.ok(&["sync"]).contains("checked: 1"));
    let first = db.sync_status().unwrap().expect("the pass is recorded");
    assert_eq!(first.ran_by, SyncRunner::Cli, "{api}");
    assert_eq!(first.outcome, SyncPassOutcome::Ok, "{api}: {first:?}");
    assert_eq!((first.checked, first.updated, first.drifted, first.errors), (1, 0, 0, 0), "{api}");
    assert_eq!(first.last_ok_at, Some(first.finished_at), "{api}");
    cinder.set_backend(json!({"target_portal": "[2001:db8::20]:3260", "target_iqn": "iqn.2010-10.org.openstack:moved-{volume_id}",
        "target_lun": 6, "auth_method": "CHAP", "auth_username": "chap-user", "auth_password": "rotated-secret-88"}));
    let sync = app.ok(&["sync"]);
    assert!(sync.contains(&format!("updated: {volume} on node {uuid}")), "{api}: {sync}");
    let second = db.sync_status().unwrap().expect("the pass is recorded");
    assert_eq!(second.outcome, SyncPassOutcome::Ok, "{api}: {second:?}");
    assert!(second.checked >= 1, "{api}: {second:?}");
    assert_eq!((second.updated, second.drifted, second.errors), (1, 0, 0), "{api}: {second:?}");
    assert!(second.finished_at >= first.finished_at && second.started_at <= second.finished_at);
    assert_eq!(second.last_ok_at, Some(second.finished_at), "{api}");
    assert_eq!(second.message, "", "{api}: nothing drifted or failed");
    assert_eq!(db.attachment_counts().unwrap(), vec![("attached".to_owned(), 1)], "{api}");
    drop(db);
    let script = app.ok(&["render", "--mac", "52:54:00:c1:00:01"]);
    assert!(
        script.contains(&format!(
            "iscsi:[2001:db8::20]::3260:6:iqn.2010-10.org.openstack:moved-{volume}"
        )),
        "{script}"
    );
    assert!(script.contains("set password rotated-secret-88"));
    cinder.set_backend(backend());

    let out = app.ok(&["volumes", "detach", "n1"]);
    assert!(out.contains("detached: n1"), "{out}");
    cinder.assert_free(&volume, api);
    let script = app.ok(&["render", "--mac", "52:54:00:c1:00:01"]);
    assert!(
        !script.contains("set password") && !script.contains("rotated-secret"),
        "{api}: secrets left in {script}"
    );
    assert!(!script.contains("sanboot"), "a detached volume is not booted");
    let export = app.ok(&["export"]);
    assert!(!export.contains("rotated-secret") && !export.contains(CHAP_SECRET));
    let target = &app.node("n1")["volume_targets"][0];
    assert_eq!(target["properties"], json!({}), "connection info removed once detached");
    let tag: Value = serde_json::from_str(
        cinder.volume(&volume)["metadata"][format!("bootvol_node_{uuid}")].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(tag["action"], "detach");
}

#[test]
fn attach_render_sync_detach_with_both_cinder_apis() {
    let Some(cinder) = Cinder::start() else { return };
    cinder.set_backend(backend());
    attach_render_sync_detach(&cinder, "attachments");
    attach_render_sync_detach(&cinder, "legacy");
}

#[test]
fn sync_reports_drift_and_deletes_nothing() {
    let Some(cinder) = Cinder::start() else { return };
    cinder.set_backend(backend());
    let app = appliance(&cinder.url, "attachments");
    let volume = cinder.create_volume("drift");
    app.add_node("n1", "52:54:00:c1:00:02", &volume);
    app.ok(&["volumes", "attach", "n1"]);
    // Someone deletes the attachment behind bootvol's back.
    let attachment = cinder.attachments(&volume)[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        cinder.request("DELETE", &format!("/attachments/{attachment}"), None, "volume 3.44").0,
        200
    );
    let output = app.run(&["sync"]);
    assert!(!output.status.success(), "drift is a failure of the sync");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("drift: volume {volume}: the attachment is gone")),
        "{stdout}"
    );
    let node = app.node("n1");
    assert!(
        node["volume_targets"][0]["properties"]["target_portal"].is_string(),
        "no silent deletion"
    );
    let db = crate::support::open_db_ok(app.dir.path()).unwrap();
    let record = db.node_record("n1").unwrap().unwrap();
    assert!(record.node.last_error.unwrap().contains("the attachment is gone"));
    let events = db.events(Some(&record.node.uuid), 50).unwrap();
    assert!(events.iter().any(|e| e.event_type == "bootvol.volume.sync.drift"), "{events:?}");
    // The pass itself worked, but it is not "ok": drift is its own outcome, counted and listed.
    let status = db.sync_status().unwrap().expect("the pass is recorded");
    assert_eq!((status.ran_by, status.outcome), (SyncRunner::Cli, SyncPassOutcome::Drift));
    assert_eq!((status.checked, status.updated, status.drifted, status.errors), (1, 0, 1, 0));
    assert!(
        status.message.contains(&format!("drift: volume {volume}: the attachment is gone")),
        "{status:?}"
    );
    assert!(!status.message.contains(CHAP_SECRET), "the recorded message carries no secret");
    assert!(
        events.iter().all(|e| !e.payload.to_string().contains(CHAP_SECRET)),
        "events carry no secret"
    );

    // The same drift found again: one event, counted, not one per pass.
    assert!(!app.run(&["sync"]).status.success());
    let events = db.events(Some(&record.node.uuid), 50).unwrap();
    let drifts: Vec<_> =
        events.iter().filter(|e| e.event_type == "bootvol.volume.sync.drift").collect();
    assert_eq!(drifts.len(), 1, "{events:?}");
    assert_eq!(drifts[0].repeats, 2, "{events:?}");

    // The admin page of `serve` on the same database: the pass is a warning, not "ok", not a
    // clean pass; the drifted volume is linked to its node and marked on the node's page.
    let text = std::fs::read_to_string(app.path("bootvol.toml")).unwrap()
        + "[api]\nauth_strategy = \"noauth\"\n";
    let config = bootvol_core::config::Config::from_toml(&text, "test").unwrap();
    let (api, _, shutdown) = crate::support::start_serve(config);
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let deadline = Instant::now() + Duration::from_secs(10);
    let login = loop {
        if let Ok(reply) = agent.get(format!("http://{api}/admin/login")).call() {
            break reply;
        }
        assert!(Instant::now() < deadline, "admin page never answered");
        std::thread::sleep(Duration::from_millis(20));
    };
    let cookie =
        login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let get = |path: &str| {
        agent
            .get(format!("http://{api}{path}"))
            .header("Cookie", &cookie)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    };
    let list = get("/admin/");
    assert!(list.contains("<span id=\"sync-verdict\" class=\"warn\">drift</span>"), "{list}");
    assert!(list.contains("<th>Last clean pass</th><td>never (not this one)"), "{list}");
    assert!(
        list.contains(&format!("— node <a href=\"/admin/nodes/{}\">n1</a>", record.node.uuid)),
        "{list}"
    );
    assert!(list.contains("<span class=\"n\">1</span> with volume drift"), "{list}");
    let page = get("/admin/nodes/n1");
    assert!(page.contains("drift: the last Cinder sync found this volume"), "{page}");
    assert!(page.contains("<strong>×2</strong>"), "the repeated drift, counted: {page}");
    assert!(!list.contains(CHAP_SECRET) && !page.contains(CHAP_SECRET));
    shutdown.cancel();
}

/// Each step of an attach fails once (500, or a lost answer): the attach fails with Cinder's
/// message and leaves the volume free; then an attach without faults works.
#[test]
fn a_failure_at_any_attach_step_leaves_no_stranded_volume() {
    let Some(cinder) = Cinder::start() else { return };
    cinder.set_backend(backend());
    let proxy = FaultProxy::start(&cinder.url);
    let lost = Fault::ForwardThenStall(Duration::from_secs(6));
    let cases: &[(&str, &'static str, &str, Fault)] = &[
        ("attachments", "POST", "/attachments", Fault::Error500),
        ("attachments", "POST", "/attachments", lost),
        ("attachments", "POST", "os-complete", Fault::Error500),
        ("attachments", "POST", "/metadata", Fault::Error500),
        ("legacy", "POST", "os-reserve", Fault::Error500),
        ("legacy", "POST", "os-initialize_connection", Fault::Error500),
        ("legacy", "POST", "os-initialize_connection", lost),
        ("legacy", "POST", "os-attach", Fault::Error500),
        ("legacy", "POST", "os-attach", lost),
        ("legacy", "POST", "/metadata", Fault::Error500),
    ];
    for (i, (api, method, step, fault)) in cases.iter().enumerate() {
        let context = format!("{api} {step} {fault:?}");
        let app = appliance(&proxy.url, api);
        let volume = cinder.create_volume(&format!("fault-{i}"));
        app.add_node("n1", "52:54:00:c1:01:01", &volume);
        proxy.clear();
        // Enough failures to outlast the retries of steps that are safe to repeat.
        proxy.fail(method, step, *fault, 10);
        let started = Instant::now();
        let stderr = app.fails(&["volumes", "attach", "n1"]);
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{context}: took {:?}",
            started.elapsed()
        );
        let expected =
            if *fault == Fault::Error500 { "injected by the test proxy" } else { "did not answer" };
        assert!(stderr.contains(expected), "{context}: {stderr}");
        proxy.clear();
        // Give a stalled proxy request time to reach Cinder before looking.
        std::thread::sleep(Duration::from_millis(300));

        cinder.assert_free(&volume, &context);
        let script = app.ok(&["render", "--mac", "52:54:00:c1:01:01"]);
        assert!(!script.contains(CHAP_SECRET), "{context}: the script kept the secret");
        let db = crate::support::open_db_ok(app.dir.path()).unwrap();
        assert!(
            db.node_record("n1")
                .unwrap()
                .unwrap()
                .node
                .last_error
                .unwrap()
                .contains("attaching volumes failed")
        );
        // Without the fault the same node attaches.
        app.ok(&["volumes", "attach", "n1"]);
        assert_eq!(cinder.volume(&volume)["status"], "in-use", "{context}");
        app.ok(&["volumes", "detach", "n1"]);
        cinder.assert_free(&volume, &context);
    }
}

#[test]
fn detach_retries_then_reports_and_can_be_retried() {
    let Some(cinder) = Cinder::start() else { return };
    cinder.set_backend(backend());
    let proxy = FaultProxy::start(&cinder.url);
    for (api, method, step) in
        [("attachments", "DELETE", "/attachments/"), ("legacy", "POST", "os-detach")]
    {
        let app = appliance(&proxy.url, api);
        let volume = cinder.create_volume(&format!("detach-{api}"));
        app.add_node("n1", "52:54:00:c1:02:01", &volume);
        app.ok(&["volumes", "attach", "n1"]);
        // One failure: the retry with backoff succeeds.
        proxy.fail(method, step, Fault::Error500, 1);
        app.ok(&["volumes", "detach", "n1"]);
        cinder.assert_free(&volume, api);
        // Failing for good: the detach fails, the volume is still attached, the node says why.
        app.ok(&["volumes", "attach", "n1"]);
        proxy.fail(method, step, Fault::Error500, 100);
        let stderr = app.fails(&["volumes", "detach", "n1"]);
        assert!(stderr.contains("injected by the test proxy"), "{api}: {stderr}");
        assert_eq!(cinder.volume(&volume)["status"], "in-use");
        let db = crate::support::open_db_ok(app.dir.path()).unwrap();
        assert!(
            db.node_record("n1")
                .unwrap()
                .unwrap()
                .node
                .last_error
                .unwrap()
                .contains("detaching volumes failed")
        );
        proxy.clear();
        app.ok(&["volumes", "detach", "n1"]);
        cinder.assert_free(&volume, api);
    }
}

#[test]
fn a_crash_between_two_steps_is_recovered_at_the_next_start() {
    let Some(cinder) = Cinder::start() else { return };
    cinder.set_backend(backend());
    let proxy = FaultProxy::start(&cinder.url);
    let app = appliance(&proxy.url, "attachments");
    let volume = cinder.create_volume("crash");
    app.add_node("n1", "52:54:00:c1:03:01", &volume);
    proxy.fail("POST", "os-complete", Fault::Stall(Duration::from_secs(30)), 1);
    let mut child = app
        .command(&["volumes", "attach", "n1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !proxy.log.lock().unwrap().iter().any(|l| l.contains("os-complete")) {
        assert!(Instant::now() < deadline, "the attach never reached os-complete");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Killed between "initialized" and "completed": Cinder holds an attachment in progress.
    assert_eq!(cinder.attachments(&volume).len(), 1);
    proxy.clear();
    let output = app.run(&["volumes", "attach", "n1"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("recovered: undid the interrupted attach"), "{stderr}");
    let attachments = cinder.attachments(&volume);
    assert_eq!(attachments.len(), 1, "exactly one attachment after recovery: {attachments:?}");
    assert_eq!(attachments[0]["status"], "attached");
    assert_eq!(cinder.volume(&volume)["status"], "in-use");
    app.ok(&["volumes", "detach", "n1"]);
    cinder.assert_free(&volume, "after recovery");
}

#[test]
#[allow(clippy::disallowed_methods)]
fn cinder_unreachable_at_start_does_not_stop_serving() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let app = appliance(&format!("http://127.0.0.1:{closed}"), "auto");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let tftp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = std::fs::read_to_string(app.path("bootvol.toml"))
        .unwrap()
        .replace("[http]\n", &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n"))
        + &format!(
            "[tftp]\nlisten = \"127.0.0.1:{tftp}\"\nroot = \"/tmp\"\n[api]\nlisten = \"127.0.0.1:0\"\n"
        );
    std::fs::write(
        app.path("bootvol.toml"),
        config.replace("sync_interval = 0", "sync_interval = 1"),
    )
    .unwrap();
    let mut child =
        app.command(&["serve"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut answered = false;
    while started.elapsed() < Duration::from_secs(10) {
        if agent
            .get(&format!("http://127.0.0.1:{port}/boot.ipxe"))
            .call()
            .is_ok_and(|r| r.status() == 200)
        {
            answered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let elapsed = started.elapsed();
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    assert!(answered, "bootvol did not serve while Cinder was unreachable");
    assert!(elapsed < Duration::from_secs(5), "serving waited on Cinder: {elapsed:?}");
    assert!(status.success(), "SIGTERM ends serve cleanly: {status:?}");
}
