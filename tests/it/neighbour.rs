//! A node's secrets go to that node only: `bootvol serve` in a network namespace, clients in two
//! others on one bridge (a real L2 path, so the kernel's neighbour table knows their MACs): the
//! node gets its CHAP script over HTTP and TFTP, a stranger gets what an unknown MAC gets and
//! the refusal is an event, once. And the deploy token of scenario 4, through the conductor:
//! handed out once, to the node only; a call-back from anyone else changes nothing.
//!
//! The namespace test needs root and `ip`, `curl` (HTTP and `tftp://`); without them it says so
//! and passes. The HTTP listener is dual-stack (`[::]:8080`): IPv4 clients arrive IPv4-mapped,
//! IPv6 clients are looked up over rtnetlink.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bootvol::conductor::{Action, CallbackReport, Caller, Conductor, ConductorError, Verb};
use bootvol::config::Config;
use bootvol::db::{Db, SharedDb};
use bootvol::inventory::{self, Format};
use bootvol::model::{MacAddr, ProvisionState};
use serde_json::{Value, json};

use crate::support::Appliance;

const CHAP_SECRET: &str = "chap-secret-only-for-n1";
const NODE_MAC: &str = "52:54:00:4e:00:01";
/// The node's second NIC: its script may be fetched over the first.
const NODE_MAC_2: &str = "52:54:00:4e:00:02";
const STRANGER_MAC: &str = "52:54:00:4e:00:99";
const OPEN_MAC: &str = "52:54:00:4e:01:01";
const UNKNOWN_MAC: &str = "52:54:00:4e:0f:0f";

static SEQ: AtomicU32 = AtomicU32::new(0);

#[allow(clippy::disallowed_methods)] // tests run tools
fn tool(program: &str) -> Command {
    Command::new(program)
}

fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn ip(netns: &str, args: &[&str]) {
    run(tool("ip").arg("-n").arg(netns).args(args));
}

fn available() -> bool {
    crate::support::netns_available("neighbour", &["curl"])
}

/// The server's namespace (a bridge at `.1`) and two clients on it: the node's NIC and a
/// stranger's. Dropping it deletes the three namespaces.
struct Lan {
    server: String,
    node: String,
    stranger: String,
    prefix: String,
}

impl Lan {
    fn new() -> Lan {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let base = format!("bvit-{}-{n}", std::process::id());
        let lan = Lan {
            server: format!("{base}-s"),
            node: format!("{base}-n"),
            stranger: format!("{base}-x"),
            prefix: format!("10.213.{}", (std::process::id() + n) % 250 + 1),
        };
        for ns in [&lan.server, &lan.node, &lan.stranger] {
            run(tool("ip").args(["netns", "add", ns]));
            ip(ns, &["link", "set", "lo", "up"]);
        }
        ip(&lan.server, &["link", "add", "br0", "type", "bridge"]);
        ip(&lan.server, &["addr", "add", &format!("{}.1/24", lan.prefix), "dev", "br0"]);
        ip(
            &lan.server,
            &["addr", "add", &format!("{}::1/64", lan.prefix6()), "dev", "br0", "nodad"],
        );
        ip(&lan.server, &["link", "set", "br0", "up"]);
        for (ns, mac, host, port) in
            [(&lan.node, NODE_MAC, 2, "p-node"), (&lan.stranger, STRANGER_MAC, 3, "p-x")]
        {
            ip(
                &lan.server,
                &["link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns],
            );
            ip(&lan.server, &["link", "set", port, "master", "br0", "up"]);
            ip(ns, &["link", "set", "eth0", "address", mac]);
            ip(ns, &["addr", "add", &format!("{}.{host}/24", lan.prefix), "dev", "eth0"]);
            let v6 = format!("{}::{host}/64", lan.prefix6());
            ip(ns, &["addr", "add", &v6, "dev", "eth0", "nodad"]);
            ip(ns, &["link", "set", "eth0", "up"]);
        }
        lan
    }

    fn server_ip(&self) -> String {
        format!("{}.1", self.prefix)
    }

    /// The IPv6 prefix (a /64 of fd13::/16) of the same bridge.
    fn prefix6(&self) -> String {
        format!("fd13:{}", self.prefix.rsplit('.').next().unwrap())
    }

    /// `curl` in a client's namespace: (exit code, HTTP status, body).
    fn curl(&self, ns: &str, url: &str) -> (i32, String, String) {
        self.curl_with(ns, &[url])
    }

    /// `curl ARGS...` in a client's namespace: (exit code, HTTP status, body).
    fn curl_with(&self, ns: &str, args: &[&str]) -> (i32, String, String) {
        let output = tool("ip")
            .args(["netns", "exec", ns, "curl", "-s", "-m", "10", "-w", "\n%{response_code}"])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (output.status.code().unwrap_or(-1), status.to_owned(), body.to_owned())
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in [&self.server, &self.node, &self.stranger] {
            let _ = tool("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// `bootvol serve` inside the server's namespace, killed on drop.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chap_node() -> Value {
    json!({"name": "n1", "driver": "fake", "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true"},
        "ports": [{"address": NODE_MAC}, {"address": NODE_MAC_2}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:n1"}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v1",
            "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1", "target_portal": "192.0.2.5:3260",
                "target_lun": 1, "auth_method": "CHAP", "auth_username": "n1", "auth_password": CHAP_SECRET}}]})
}

fn open_node() -> Value {
    json!({"name": "open", "driver": "fake", "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "iscsi_boot:true"}, "ports": [{"address": OPEN_MAC}],
        "volume_connectors": [{"type": "iqn", "connector_id": "iqn.2024-01.org.example.node:open"}],
        "volume_targets": [{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v2",
            "properties": {"target_iqn": "iqn.2024-01.org.example.san:v2", "target_portal": "192.0.2.5:3260"}}]})
}

#[test]
fn secret_scripts_go_only_to_the_node_over_http_and_tftp() {
    if !available() {
        return;
    }
    let lan = Lan::new();
    let server = lan.server_ip();
    let app = Appliance::with_config(|dir| {
        std::fs::create_dir_all(dir.join("files")).unwrap();
        format!(
            r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "external"]
[database]
{database}
watch_interval_ms = 100
[http]
listen = "[::]:8080"
public_url = "http://{server}:8080"
files_root = "{dir}/files"
[tftp]
listen = "{server}:69"
root = "{dir}/files"
[api]
listen = "127.0.0.1:6385"
"#,
            dir = dir.display(),
            database = crate::support::database(dir)
        )
    });
    // The stranger is a node too, deploying an image (scenario 4): the deploy token is its own.
    let mut deploying = hba_node("d1", STRANGER_MAC, false);
    deploying["provision_state"] = json!("available");
    app.apply(json!([chap_node(), open_node(), deploying]));
    deploy_files(&app.path("files"));
    let serve = app.command(&["serve"]);
    let mut command = tool("ip");
    command.args(["netns", "exec", &lan.server]).arg(serve.get_program()).args(serve.get_args());
    let log = std::fs::File::create(app.path("serve.log")).unwrap();
    let _serve = Serve(command.stdout(Stdio::null()).stderr(log).spawn().unwrap());
    let base = format!("http://{server}:8080");
    let deadline = Instant::now() + Duration::from_secs(20);
    while lan.curl(&lan.node, &format!("{base}/boot.ipxe")).1 != "200" {
        assert!(Instant::now() < deadline, "serve never answered: {}", serve_log(&app));
        std::thread::sleep(Duration::from_millis(100));
    }
    let script = |ns: &str, mac: &str| lan.curl(ns, &format!("{base}/boot/{mac}.ipxe"));
    let tftp = |ns: &str, mac: &str| lan.curl(ns, &format!("tftp://{server}/boot/{mac}.ipxe"));

    // The node, over HTTP and TFTP, for either of its NICs.
    for mac in [NODE_MAC, NODE_MAC_2] {
        let (_, status, body) = script(&lan.node, mac);
        assert_eq!(status, "200", "{body}");
        assert!(body.contains(CHAP_SECRET), "{body}");
        let (code, _, body) = tftp(&lan.node, mac);
        assert_eq!(code, 0, "TFTP to the node: {}", serve_log(&app));
        assert!(body.contains(CHAP_SECRET), "{body}");
    }

    // The stranger gets exactly what an unknown MAC gets.
    let unknown = script(&lan.stranger, UNKNOWN_MAC);
    assert_eq!(unknown.1, "404");
    let refused = script(&lan.stranger, NODE_MAC);
    assert_eq!(refused, unknown, "HTTP: a refused script looks like an unknown MAC");
    assert!(!refused.2.contains(CHAP_SECRET));
    let unknown = tftp(&lan.stranger, UNKNOWN_MAC);
    assert_eq!(unknown.0, 68, "curl: TFTP file not found");
    assert_eq!(tftp(&lan.stranger, NODE_MAC), unknown, "TFTP: a refused script looks unknown");
    assert_eq!(tftp(&lan.stranger, NODE_MAC_2), unknown);
    // The same over IPv6 (the neighbour table of rtnetlink), on the dual-stack listener.
    let base6 = format!("http://[{}::1]:8080", lan.prefix6());
    let script6 =
        |ns: &str, mac: &str| lan.curl_with(ns, &["-g", &format!("{base6}/boot/{mac}.ipxe")]);
    let (_, status, body) = script6(&lan.node, NODE_MAC_2);
    assert_eq!(status, "200", "IPv6 to the node: {body}\n{}", serve_log(&app));
    assert!(body.contains(CHAP_SECRET), "{body}");
    assert_eq!(script6(&lan.stranger, NODE_MAC), script6(&lan.stranger, UNKNOWN_MAC));
    assert_eq!(script6(&lan.stranger, NODE_MAC).1, "404");

    // Scripts without a secret stay open to anyone.
    let (_, status, body) = script(&lan.stranger, OPEN_MAC);
    assert_eq!(status, "200", "{body}");
    assert_eq!(tftp(&lan.stranger, OPEN_MAC).0, 0);

    // A UDP client that knows the server's MAC leaves no neighbour entry: bootvol provokes one
    // (a zero-length datagram to 9/udp) before it decides.
    let bridge_mac = netns_mac(&lan.server, "br0");
    ip(
        &lan.node,
        &["neigh", "replace", &server, "lladdr", &bridge_mac, "nud", "permanent", "dev", "eth0"],
    );
    ip(&lan.server, &["neigh", "flush", "all"]);
    let (code, _, body) = tftp(&lan.node, NODE_MAC);
    assert_eq!(code, 0, "TFTP after the neighbour table was flushed: {}", serve_log(&app));
    assert!(body.contains(CHAP_SECRET));

    // The deploy token goes to the deploying node (the stranger), once; the config drive and
    // the call-back want the token and that node: another host with the token changes nothing.
    let mut node_deploy = app.command(&["node", "deploy", "d1"]);
    let _node_deploy =
        Serve(node_deploy.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.show("d1")["node"]["provision_state"] != "wait call-back" {
        assert!(Instant::now() < deadline, "d1 never waited for its call-back: {}", app.show("d1"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let uuid = app.show("d1")["node"]["uuid"].as_str().unwrap().to_owned();
    let token_url = format!("{base}/deploy/{uuid}/token");
    let post = |ns: &str, url: &str, headers: &[&str], body: &str| {
        let mut args = vec!["-X", "POST", "-H", "Content-Type: application/json", "--data", body];
        for header in headers {
            args.extend(["-H", header]);
        }
        args.push(url);
        lan.curl_with(ns, &args)
    };
    assert_eq!(post(&lan.node, &token_url, &[], "").1, "403", "not d1's MAC");
    let (_, status, token) = post(&lan.stranger, &token_url, &[], "");
    assert_eq!(status, "200", "{token}\n{}", serve_log(&app));
    assert_eq!(token.len(), 64, "{token}");
    assert_eq!(post(&lan.stranger, &token_url, &[], "").1, "403", "handed out once");
    let header = format!("X-Bootvol-Token: {token}");
    let report =
        json!({"status": "done", "disk": "/dev/forged", "sha256": "ab".repeat(32), "bytes": 1});
    let callback = format!("{base}/deploy/{uuid}/callback");
    let forged = post(&lan.node, &callback, &[&header], &report.to_string());
    assert_eq!(forged.1, "403", "{forged:?}");
    let configdrive =
        lan.curl_with(&lan.node, &["-H", &header, &format!("{base}/deploy/{uuid}/configdrive")]);
    assert_eq!(configdrive.1, "403", "{configdrive:?}");
    let node = app.show("d1");
    assert_eq!(node["node"]["provision_state"], "wait call-back", "{node}");
    assert!(node["node"]["driver_internal_info"].get("deployed_image").is_none(), "{node}");

    // One event for the stranger's refusals over IPv4 (once per client address per minute), one
    // for its refusal over IPv6 (another address).
    let events: Vec<Value> = app
        .ok(&["events", "--node", "n1", "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &Value| e["event_type"] == "baremetal.node.script_refused")
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    let v6 = &events[1]["payload"];
    assert_eq!(v6["client"], format!("{}::3", lan.prefix6()), "{v6}");
    assert_eq!(v6["client_mac"], STRANGER_MAC, "{v6}");
    let payload = &events[0]["payload"];
    assert_eq!(payload["client"], format!("{}.3", lan.prefix), "{payload}");
    assert_eq!(payload["client_mac"], STRANGER_MAC, "{payload}");
    assert_eq!(payload["mac"], NODE_MAC, "{payload}");
    assert_eq!(payload["via"], "http", "{payload}");
    assert_eq!(payload["count"], 1, "{payload}");
    let log = serve_log(&app);
    assert_eq!(log.matches("script refused").count(), 2, "{log}");
    assert!(!log.contains(CHAP_SECRET), "{log}");
}

fn netns_mac(netns: &str, dev: &str) -> String {
    let output = run(tool("ip")
        .args(["netns", "exec", netns, "cat"])
        .arg(format!("/sys/class/net/{dev}/address")));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn serve_log(app: &Appliance) -> String {
    std::fs::read_to_string(app.path("serve.log")).unwrap_or_default()
}

// ---- the deploy token -------------------------------------------------------------------------

const HBA_MAC: &str = "52:54:00:4e:0d:01";

fn hba_node(name: &str, mac: &str, configdrive: bool) -> Value {
    let mut info = json!({"force_deployment": true, "image_source": "images/image.raw",
        "image_checksum": format!("sha256:{}", "ab".repeat(32))});
    if configdrive {
        info["configdrive"] = json!({"meta_data": {"uuid": "u"}, "user_data": "#cloud-config\n"});
    }
    json!({"name": name, "driver": "fake", "storage_interface": "external",
        "properties": {"capabilities": "hba_boot:true"}, "instance_info": info,
        "ports": [{"address": mac}],
        "volume_connectors": [{"type": "wwpn", "connector_id": "20000025b500e204"}],
        "volume_targets": [{"volume_type": "fibre_channel", "boot_index": 0, "volume_id": format!("vol-{name}"),
            "properties": {"target_wwn": "5000c50015ea71ac", "target_lun": 0, "wwn": "0x5000c50015ea71ac"}}]})
}

/// The files a deployment needs, under `files`.
fn deploy_files(files: &Path) {
    for file in ["deploy/vmlinuz", "deploy/initrd.img", "images/image.raw"] {
        std::fs::create_dir_all(files.join(file).parent().unwrap()).unwrap();
        std::fs::write(files.join(file), b"x").unwrap();
    }
}

/// A conductor over a database with `nodes` applied, and the files a deployment needs.
fn deploy_setup(dir: &Path, nodes: Value) -> (Conductor, Config) {
    let files = dir.join("files");
    deploy_files(&files);
    let config = Config::from_toml(
        &format!(
            "[DEFAULT]\nenabled_storage_interfaces = [\"noop\", \"external\"]\n[database]\n{}\n\
             [http]\npublic_url = \"http://192.0.2.10:8080\"\nfiles_root = \"{}\"\n",
            crate::support::database(dir),
            files.display()
        ),
        "test",
    )
    .unwrap();
    let specs =
        inventory::parse(&json!({"nodes": nodes}).to_string(), Format::Json, &config).unwrap();
    let mut db = Db::open_config(&config.database).unwrap();
    db.apply_inventory(&specs, false).unwrap();
    let conductor = Conductor::new(Arc::new(config.clone()), SharedDb::new(db)).unwrap();
    (conductor, config)
}

fn done(sha: &str) -> CallbackReport {
    serde_json::from_value(json!({"status": "done", "disk": "/dev/sda", "sha256": sha, "bytes": 1}))
        .unwrap()
}

fn refused<T: std::fmt::Debug>(result: Result<T, ConductorError>) {
    assert!(matches!(result, Err(ConductorError::Refused(_))), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_token_goes_once_to_the_node_and_forged_call_backs_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (conductor, config) = deploy_setup(dir.path(), json!([hba_node("d1", HBA_MAC, true)]));
    let node = conductor.run("d1", Action::Provision(Verb::Deploy)).await.unwrap();
    assert_eq!(node.node.provision_state, ProvisionState::WaitCallBack);
    let uuid = node.node.uuid.clone();
    let stored =
        node.node.driver_internal_info["deploy"]["callback_token"].as_str().unwrap().to_owned();

    // The ramdisk's script names where to ask for the token, never the token.
    let templates = bootvol::boot::Templates::new(None).unwrap();
    let script = bootvol::boot::script_for(
        &templates,
        &config.boot_settings(),
        config.default.default_storage_interface,
        Some(&node),
    );
    assert!(!script.text.contains(&stored), "{}", script.text);
    assert!(
        script
            .text
            .contains(&format!("bootvol.token_url=http://192.0.2.10:8080/deploy/{uuid}/token"))
    );
    assert!(script.text.contains(&format!(
        "bootvol.configdrive_url=http://192.0.2.10:8080/deploy/{uuid}/configdrive "
    )));

    let node_mac: MacAddr = HBA_MAC.parse().unwrap();
    let stranger = Caller::Neighbour(Some(STRANGER_MAC.parse().unwrap()));
    let the_node = Caller::Neighbour(Some(node_mac));
    refused(conductor.deploy_token(&uuid, stranger).await);
    refused(conductor.deploy_token(&uuid, Caller::Neighbour(None)).await);
    let token = conductor.deploy_token(&uuid, the_node).await.unwrap();
    assert_eq!(token, stored);
    refused(conductor.deploy_token(&uuid, the_node).await);
    refused(conductor.deploy_token(&uuid, Caller::Any).await);

    // The config drive and the call-back want the token and the node.
    refused(conductor.configdrive(&uuid, &token, stranger).await);
    refused(conductor.configdrive(&uuid, "wrong", the_node).await);
    assert!(!conductor.configdrive(&uuid, &token, the_node).await.unwrap().is_empty());
    let before = conductor.load("d1").await.unwrap();
    let sha = "ab".repeat(32);
    refused(conductor.deploy_callback(&uuid, &token, stranger, done(&sha)).await);
    refused(conductor.deploy_callback(&uuid, "wrong", the_node, done(&sha)).await);
    assert_eq!(conductor.load("d1").await.unwrap(), before, "forged call-backs change nothing");

    conductor.deploy_callback(&uuid, &token, the_node, done(&sha)).await.unwrap();
    conductor.tasks().close();
    conductor.tasks().wait().await;
    let after = conductor.load("d1").await.unwrap();
    assert_eq!(after.node.provision_state, ProvisionState::Active);
    // Not in wait call-back any more: everything is refused, the node stays as it is.
    refused(conductor.deploy_callback(&uuid, &token, the_node, done(&sha)).await);
    refused(conductor.deploy_token(&uuid, the_node).await);
    assert_eq!(conductor.load("d1").await.unwrap(), after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_concurrent_token_requests_only_the_first_gets_it() {
    let dir = tempfile::tempdir().unwrap();
    let (conductor, _) = deploy_setup(dir.path(), json!([hba_node("d2", HBA_MAC, false)]));
    let uuid = conductor.run("d2", Action::Provision(Verb::Deploy)).await.unwrap().node.uuid;
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let (conductor, uuid) = (conductor.clone(), uuid.clone());
            tokio::spawn(async move { conductor.deploy_token(&uuid, Caller::Any).await })
        })
        .collect();
    let mut handed_out = 0;
    for caller in callers {
        if caller.await.unwrap().is_ok() {
            handed_out += 1;
        }
    }
    assert_eq!(handed_out, 1);
    refused(conductor.deploy_token(&uuid, Caller::Any).await);
}

// ---- which scripts carry a secret -------------------------------------------------------------

/// Only CHAP scripts (and any script an override template makes print a secret) are kept for
/// the node; NFS root, AoE, HBA, iSCSI without CHAP, FCoE, HTTP SAN and the default script stay
/// open. A CHAP node's script goes to either of its ports, to nobody else.
#[test]
fn the_snapshot_marks_the_scripts_that_carry_a_secret() {
    use bootvol::boot::{BootSnapshot, Templates};
    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::config(dir.path());
    let db = crate::support::scenario_db(&config);
    let records = db.node_records().unwrap();
    let build = |templates: &Templates| {
        BootSnapshot::build(
            &records,
            templates,
            &config.boot_settings(),
            config.default.default_storage_interface,
        )
        .unwrap()
    };
    let snapshot = build(&Templates::new(None).unwrap());
    let mac = |m: &str| m.parse::<MacAddr>().unwrap();
    let mut secret = Vec::new();
    for record in &records {
        for port in &record.ports {
            let script = snapshot.script(port.address).unwrap();
            assert!(script.served_to(Some(port.address)), "{}", record.node.name);
            if script.secret {
                secret.push(record.node.name.clone());
            } else {
                assert!(script.served_to(None) && script.served_to(Some(mac(STRANGER_MAC))));
            }
        }
    }
    assert_eq!(secret, ["iscsi-chap", "iscsi-chap"]);
    let chap = snapshot.script(mac("52:54:00:00:01:01")).unwrap();
    assert!(chap.served_to(Some(mac("52:54:00:00:01:02"))), "the node's other NIC");
    assert!(!chap.served_to(Some(mac("52:54:00:00:02:01"))), "another node's NIC");
    assert!(!chap.served_to(Some(mac(STRANGER_MAC))));
    assert!(!chap.served_to(None));
    assert!(!snapshot.default_script().secret);

    // An override template that prints a secret value makes its script secret too.
    let overrides = dir.path().join("templates");
    std::fs::create_dir_all(overrides.join("ipxe")).unwrap();
    std::fs::write(
        overrides.join("ipxe/hba.ipxe.j2"),
        "#!ipxe\necho {{ node.name }}\necho hba-secret-in-extra\nexit\n",
    )
    .unwrap();
    let mut records = records.clone();
    let hba = records.iter_mut().find(|r| r.node.name == "hba").unwrap();
    hba.node.extra.insert("bmc_token".into(), json!("hba-secret-in-extra"));
    let templates = Templates::new(Some(&overrides)).unwrap();
    let snapshot = BootSnapshot::build(
        &records,
        &templates,
        &config.boot_settings(),
        config.default.default_storage_interface,
    )
    .unwrap();
    assert!(snapshot.script(mac("52:54:00:00:09:01")).unwrap().secret);
    assert!(!snapshot.script(mac("52:54:00:00:0a:01")).unwrap().secret, "hba-deploy");
}
