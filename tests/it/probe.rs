//! `bootvol probe` against real targets, run as an operator runs it: vblade (AoE) on a veth pair
//! and nfs-ganesha with rpcbind (NFS root, MOUNT's export list) in network namespaces; HTTP SAN
//! against bootvol's own `/files/` (ranges) and python's `http.server` (no ranges); the exit
//! codes; iSCSI against a real tgtd (CHAP, mutual CHAP, an ACL: each failure in the target's
//! words); a powered-on node skipped unless `--live`; FCoE and HBA said not probeable; and the
//! background pass of `[probe] interval` recording what it found.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::netns::Netns;
use crate::support::{Appliance, config_text, netns_available, start_serve};

/// A daemon the test started, killed and reaped when dropped.
struct Daemon(std::process::Child, &'static str);

impl Daemon {
    fn spawn(name: &'static str, mut command: Command, log: &Path) -> Daemon {
        let log = std::fs::File::create(log).unwrap();
        command.stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log);
        Daemon(command.spawn().unwrap_or_else(|e| panic!("{name}: {e}")), name)
    }

    fn assert_running(&mut self) {
        assert!(self.0.try_wait().unwrap().is_none(), "{} exited", self.1);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An appliance whose configuration has `[probe]` with `probe` and the boot URL `public_url`.
fn appliance(public_url: &str, probe: &str) -> Appliance {
    let public_url = public_url.to_owned();
    let probe = probe.to_owned();
    Appliance::with_config(move |dir| {
        let text = config_text(dir)
            .replace(
                "public_url = \"http://192.0.2.10:8080\"",
                &format!("public_url = \"{public_url}\""),
            )
            .replace(
                "files_root = \"/srv/bootvol/files\"",
                &format!("files_root = \"{}\"", dir.join("files").display()),
            );
        format!("{text}[probe]\ntimeout = 2\n{probe}\n")
    })
}

fn node(name: &str, mac: &str, capability: &str, extra: Value) -> Value {
    let mut node = json!({
        "name": name, "driver": "fake", "storage_interface": "external",
        "provision_state": "active", "properties": {"capabilities": capability},
        "ports": [{"address": mac}],
    });
    for (key, value) in extra.as_object().unwrap() {
        node[key] = value.clone();
    }
    node
}

fn target(kind: &str, volume: &str, properties: Value) -> Value {
    json!({"volume_targets": [{"volume_type": kind, "boot_index": 0, "volume_id": volume,
        "properties": properties}]})
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `bootvol probe ARGS` inside `ns` (or on this host).
fn probe(app: &Appliance, ns: Option<&Netns>, args: &[&str]) -> Output {
    let mut all = vec!["probe"];
    all.extend_from_slice(args);
    match ns {
        Some(ns) => ns.wrap(&app.command(&all)).output().unwrap(),
        None => app.run(&all),
    }
}

/// Probes until `done` holds of the output (a daemon that is still starting), for 10 s.
fn probe_until(
    app: &Appliance,
    ns: Option<&Netns>,
    args: &[&str],
    done: impl Fn(&Output) -> bool,
) -> Output {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let output = probe(app, ns, args);
        if done(&output) || Instant::now() > deadline {
            return output;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn aoe_probe_finds_vblade_with_its_size_and_reports_an_absent_slot() {
    if !netns_available("aoe_probe", &["vblade"]) {
        return;
    }
    let ns = Netns::add(format!("bvprobe-aoe-{}", std::process::id()));
    ns.ip(&["link", "add", "pa0", "type", "veth", "peer", "name", "pa1"]);
    ns.ip(&["link", "set", "pa0", "up"]);
    ns.ip(&["link", "set", "pa1", "up"]);
    let app = appliance("http://127.0.0.1:8080", "aoe_interface = \"pa0\"");
    let disk = app.path("aoe.img");
    std::fs::File::create(&disk).unwrap().set_len(20 << 20).unwrap();
    let mut vblade = ns.exec("vblade");
    vblade.args(["3", "1", "pa1"]).arg(&disk);
    let mut vblade = Daemon::spawn("vblade", vblade, &app.path("vblade.log"));
    app.apply(json!([
        node(
            "aoe-present",
            "52:54:00:0a:0e:01",
            "aoe_boot:true",
            target("aoe", "vol-e3-1", json!({"target_shelf": 3, "target_slot": 1}))
        ),
        node(
            "aoe-absent",
            "52:54:00:0a:0e:02",
            "aoe_boot:true",
            target("aoe", "vol-e9-9", json!({"target_shelf": 9, "target_slot": "9"}))
        ),
    ]));

    let present = probe_until(&app, Some(&ns), &["--node", "aoe-present"], |o| o.status.success());
    let out = text(&present);
    assert!(present.status.success(), "{out}");
    assert!(out.contains("aoe-present") && out.contains("ok: e3.1 present at "), "{out}");
    assert!(out.contains(", 20 MiB"), "vblade's 40,960 sectors: {out}");
    vblade.assert_running();

    let absent = probe(&app, Some(&ns), &["--node", "aoe-absent"]);
    let out = text(&absent);
    assert!(!absent.status.success(), "an absent slot must fail: {out}");
    assert!(out.contains("FAILED: e9.9 absent: no answer to Query Config on pa0"), "{out}");

    // Both, recorded as each node's last probe.
    let all = probe(&app, Some(&ns), &["--all"]);
    assert!(!all.status.success(), "{}", text(&all));
    let db = app.db();
    let results = db.probe_results().unwrap();
    assert_eq!(results.len(), 2, "{results:?}");
    let statuses: Vec<&str> = results.iter().map(|(_, r)| r.status.as_str()).collect();
    assert_eq!(statuses, ["failed", "ok"], "by name: aoe-absent, aoe-present");

    // Without the interface the probe says what is missing rather than "absent".
    let bare = appliance("http://127.0.0.1:8080", "");
    bare.apply(json!([node(
        "aoe-present",
        "52:54:00:0a:0e:01",
        "aoe_boot:true",
        target("aoe", "vol-e3-1", json!({"target_shelf": 3, "target_slot": 1}))
    )]));
    let out = text(&probe(&bare, Some(&ns), &["--all"]));
    assert!(out.contains("no [probe] aoe_interface configured"), "{out}");
}

/// nfs-ganesha (NFSv3 and v4, MOUNT registered with rpcbind) exporting `export` as `/export`
/// on the namespace's loopback.
fn start_nfs(ns: &Netns, dir: &Path, export: &Path) -> (Daemon, Daemon) {
    let rpcbind = {
        let mut c = ns.exec("rpcbind");
        c.arg("-f");
        Daemon::spawn("rpcbind", c, &dir.join("rpcbind.log"))
    };
    let state = dir.join("ganesha-state");
    std::fs::create_dir_all(&state).unwrap();
    let conf = dir.join("ganesha.conf");
    std::fs::write(
        &conf,
        format!(
            "NFS_CORE_PARAM {{ Protocols = 3, 4; Bind_addr = 127.0.0.1; Enable_NLM = false;\n\
             \x20 Enable_RQUOTA = false; Enable_UDP = false; Mount_Path_Pseudo = true; }}\n\
             NFSV4 {{ Graceless = true; RecoveryBackend = fs; RecoveryRoot = {}; }}\n\
             NFS_KRB5 {{ Active_krb5 = false; }}\n\
             EXPORT {{ Export_Id = 1; Path = {}; Pseudo = /export; Access_Type = RO;\n\
             \x20 Squash = No_Root_Squash; SecType = sys; Protocols = 3, 4; Transports = TCP;\n\
             \x20 FSAL {{ Name = VFS; }} }}\n",
            state.display(),
            export.display()
        ),
    )
    .unwrap();
    // rpcbind first: ganesha exits when it cannot register MOUNT and NFSv3.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ns.exec("rpcinfo").args(["-p", "127.0.0.1"]).output().is_ok_and(|o| o.status.success()) {
        assert!(
            Instant::now() < deadline,
            "rpcbind never answered (another rpcbind on this host holds /run/rpcbind.lock?): {}",
            std::fs::read_to_string(dir.join("rpcbind.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut c = ns.exec("ganesha.nfsd");
    c.arg("-F").arg("-L").arg(dir.join("ganesha.log")).arg("-f").arg(&conf);
    c.arg("-p").arg(dir.join("ganesha.pid"));
    (rpcbind, Daemon::spawn("ganesha.nfsd", c, &dir.join("ganesha.out")))
}

#[test]
fn nfs_root_probe_checks_the_export_list_and_the_kernel_urls() {
    if !netns_available("nfs_root_probe", &["rpcbind", "rpcinfo", "ganesha.nfsd", "python3"]) {
        return;
    }
    let ns = Netns::add(format!("bvprobe-nfs-{}", std::process::id()));
    // An interface with an address beside loopback: ganesha resolves its Bind_addr with
    // AI_ADDRCONFIG, which finds nothing on a namespace with loopback alone.
    ns.ip(&["link", "add", "pn0", "type", "veth", "peer", "name", "pn1"]);
    ns.ip(&["addr", "add", "10.99.7.1/24", "dev", "pn0"]);
    ns.ip(&["link", "set", "pn0", "up"]);
    ns.ip(&["link", "set", "pn1", "up"]);
    let app = appliance("http://127.0.0.1:18089", "");
    let files = app.path("files/nfs");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("vmlinuz"), "kernel").unwrap();
    std::fs::write(files.join("initrd.img"), "initrd").unwrap();
    let export = app.path("export");
    std::fs::create_dir_all(&export).unwrap();
    let (_rpcbind, mut ganesha) = start_nfs(&ns, app.dir.path(), &export);
    // The kernel and initrd from a real HTTP server: python's, serving the folder `files/` is in.
    let mut http = ns.exec("python3");
    http.args(["-m", "http.server", "18089", "--bind", "127.0.0.1", "--directory"])
        .arg(app.dir.path());
    let _http = Daemon::spawn("http.server", http, &app.path("http.log"));
    let nfs = |name: &str, mac: &str, root: &str, kernel: &str| {
        node(
            name,
            mac,
            "nfs_boot:true",
            json!({"instance_info": {
            "nfs_root": root, "kernel": kernel, "ramdisk": "nfs/initrd.img"}}),
        )
    };
    app.apply(json!([
        nfs("nfs-exported", "52:54:00:0a:0f:01", "127.0.0.1:/export", "nfs/vmlinuz"),
        nfs("nfs-not-exported", "52:54:00:0a:0f:02", "127.0.0.1:/elsewhere", "nfs/vmlinuz"),
        nfs("nfs-no-kernel", "52:54:00:0a:0f:03", "127.0.0.1:/export", "nfs/missing"),
    ]));

    let ok = probe_until(&app, Some(&ns), &["--node", "nfs-exported"], |o| o.status.success());
    let out = text(&ok);
    assert!(
        ok.status.success(),
        "{out}\n{}",
        std::fs::read_to_string(app.path("ganesha.log")).unwrap_or_default()
    );
    assert!(out.contains("ok: 127.0.0.1 exports /export; kernel and initrd answer 200"), "{out}");
    ganesha.assert_running();

    let missing = probe(&app, Some(&ns), &["--node", "nfs-not-exported"]);
    let out = text(&missing);
    assert!(!missing.status.success(), "{out}");
    assert!(out.contains("127.0.0.1 does not export /elsewhere (exports: /export)"), "{out}");

    let no_kernel = probe(&app, Some(&ns), &["--node", "nfs-no-kernel"]);
    let out = text(&no_kernel);
    assert!(!no_kernel.status.success(), "{out}");
    assert!(
        out.contains(
            "exported, but the kernel: HEAD http://127.0.0.1:18089/files/nfs/missing: 404"
        ),
        "{out}"
    );

    // A server with no portmapper: said so, with the reason.
    drop(_rpcbind);
    let gone = probe(&app, Some(&ns), &["--node", "nfs-exported"]);
    let out = text(&gone);
    assert!(
        !gone.status.success() && out.contains("portmapper: connecting to 127.0.0.1:111"),
        "{out}"
    );
}

/// A free loopback port (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
#[allow(clippy::disallowed_methods)] // the test's own HTTP server
fn http_san_probe_exit_codes_live_not_probeable_and_the_background_pass() {
    let python = free_port();
    let app =
        appliance("http://127.0.0.1:8080", "interval = 10\n[api]\nauth_strategy = \"noauth\"");
    std::fs::create_dir_all(app.path("files")).unwrap();
    std::fs::File::create(app.path("files/san.img")).unwrap().set_len(3 << 20).unwrap();
    let config = bootvol_core::config::Config::load(&app.path("bootvol.toml")).unwrap();
    let (api, boot, serve) = start_serve(config);
    let mut http = Command::new("python3");
    http.args(["-m", "http.server", &python.to_string(), "--bind", "127.0.0.1", "--directory"])
        .arg(app.path("files"));
    let _python = Daemon::spawn("http.server", http, &app.path("http.log"));
    let san = |name: &str, mac: &str, url: String| {
        node(
            name,
            mac,
            "http_boot:true",
            target("http", &format!("vol-{name}"), json!({"url": url})),
        )
    };
    app.apply(json!([
        san("http-ok", "52:54:00:0a:10:01", format!("http://{boot}/files/san.img")),
        san("http-missing", "52:54:00:0a:10:02", format!("http://{boot}/files/gone.img")),
        san("http-no-ranges", "52:54:00:0a:10:03", format!("http://127.0.0.1:{python}/san.img")),
        node("fcoe", "52:54:00:0a:10:04", "fiberchannel_boot:true", json!({
            "volume_connectors": [{"type": "wwpn", "connector_id": "20000025b500000a"}],
            "volume_targets": [{"volume_type": "fibre_channel", "boot_index": 0, "volume_id": "vol-fc",
                "properties": {"target_wwn": ["500a098280feeba5", "500a098290feeba5"], "target_lun": 1}}]})),
        node("hba", "52:54:00:0a:10:05", "hba_boot:true", json!({
            "volume_connectors": [{"type": "wwpn", "connector_id": "20000025b500000b"}],
            "volume_targets": [{"volume_type": "fibre_channel", "boot_index": 0, "volume_id": "vol-hba",
                "properties": {"target_wwn": "500a098280feeba5", "target_lun": 0}}]})),
    ]));

    let ok = probe(&app, None, &["--node", "http-ok"]);
    let out = text(&ok);
    assert!(ok.status.success(), "{out}");
    assert!(out.contains("ok: HEAD 200, 3 MiB; 512-byte range read ok"), "{out}");
    let missing = probe(&app, None, &["--node", "http-missing"]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(text(&missing).contains("FAILED: HEAD http://"), "{}", text(&missing));
    assert!(text(&missing).contains("/files/gone.img: 404 Not Found"), "{}", text(&missing));
    let no_ranges = probe_until(&app, None, &["--node", "http-no-ranges"], |o| {
        text(o).contains("instead of 206")
    });
    assert!(!no_ranges.status.success(), "{}", text(&no_ranges));
    assert!(
        text(&no_ranges).contains("200 OK instead of 206 Partial Content"),
        "{}",
        text(&no_ranges)
    );

    // FCoE and HBA: never ok, never a failure either; exit 0.
    for name in ["fcoe", "hba"] {
        let output = probe(&app, None, &["--node", name]);
        let out = text(&output);
        assert!(output.status.success(), "{out}");
        assert!(out.contains("not probeable: the appliance cannot reach it"), "{out}");
        assert!(!out.contains(" ok"), "{out}");
    }
    let fcoe = probe(&app, None, &["--node", "fcoe"]);
    assert_eq!(
        text(&fcoe).matches("vol-fc (fcoe)").count(),
        1,
        "one line per volume: {}",
        text(&fcoe)
    );

    // A powered-on node is not probed unless --live.
    app.ok(&["node", "power", "http-missing", "on"]);
    let skipped = probe(&app, None, &["--node", "http-missing"]);
    assert!(skipped.status.success(), "{}", text(&skipped));
    assert!(
        text(&skipped)
            .contains("skipped (powered on): powered on: not probed unless asked (--live)"),
        "{}",
        text(&skipped)
    );
    let live = probe(&app, None, &["--node", "http-missing", "--live"]);
    assert!(!live.status.success() && text(&live).contains("404"), "{}", text(&live));

    // --all fails when one target failed; the usage needs --node or --all, not both.
    let all = probe(&app, None, &["--all"]);
    assert_eq!(all.status.code(), Some(1), "{}", text(&all));
    assert!(text(&all).contains("http-ok") && text(&all).contains("nodes probed: a target failed"));
    assert_eq!(probe(&app, None, &[]).status.code(), Some(2));
    assert_eq!(probe(&app, None, &["--all", "--node", "hba"]).status.code(), Some(2));
    let unknown = probe(&app, None, &["--node", "nope"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));

    admin_page_probes_and_shows_the_result(&format!("http://{api}"));

    // The background pass (`[probe] interval = 10`) records a probe of every node by itself:
    // a newer one than the CLI's, and powered-on nodes skipped.
    let db = app.db();
    let cli_at = db.probe_results().unwrap().iter().map(|(_, r)| r.probed_at).max().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let results = db.probe_results().unwrap();
        let others: Vec<_> = results.iter().filter(|(name, _)| name != "http-missing").collect();
        if others.len() == 4 && others.iter().all(|(_, r)| r.probed_at > cli_at) {
            // The powered-on node was skipped: its last real probe stays.
            let (_, kept) = results.iter().find(|(name, _)| name == "http-missing").unwrap();
            assert_eq!(kept.status.as_str(), "failed", "{kept:?}");
            assert!(kept.probed_at <= cli_at, "{kept:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no background pass recorded: {results:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
    serve.stop().unwrap();
}

/// The admin page (no authentication in this test): the node page shows the last probe (the
/// CLI's) and probes again with its button (CSRF token, `live` for a powered-on node), and the
/// nodes list names the nodes whose last probe failed.
fn admin_page_probes_and_shows_the_result(base: &str) {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let login = agent.get(format!("{base}/admin/login")).call().unwrap();
    let cookie =
        login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let get = |path: &str| {
        let mut r = agent.get(format!("{base}{path}")).header("Cookie", &cookie).call().unwrap();
        assert_eq!(r.status(), 200, "{path}");
        r.body_mut().read_to_string().unwrap()
    };
    let page = get("/admin/nodes/http-missing");
    // The CLI's `--live` probe: a later skipped one (`--all`) does not hide it.
    assert!(page.contains("id=\"probe-result\" class=\"error\""), "{page}");
    // (HTML escapes the slashes.)
    assert!(
        page.contains("FAILED: HEAD http:") && page.contains("gone.img: 404 Not Found"),
        "{page}"
    );
    assert!(page.contains("Probe while powered on"), "a powered-on node offers the live probe");
    let csrf = page.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap();
    let post = |fields: &str| {
        agent
            .post(format!("{base}/admin/nodes/http-missing/probe"))
            .header("Cookie", &cookie)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .send(fields.to_owned())
            .unwrap()
    };
    assert_eq!(post("live=on").status(), 403, "no CSRF token, no probe");
    let probed = post(&format!("csrf={csrf}"));
    assert_eq!(probed.status(), 303);
    let shown = get(probed.headers()["location"].to_str().unwrap());
    assert!(shown.contains("Probe: skipped (powered on)"), "{shown}");
    let probed = post(&format!("csrf={csrf}&live=on"));
    let shown = get(probed.headers()["location"].to_str().unwrap());
    assert!(shown.contains("Probe: FAILED: HEAD http:"), "{shown}");
    let fcoe = get("/admin/nodes/fcoe");
    assert!(fcoe.contains("not probeable: the appliance cannot reach it"), "{fcoe}");
    let list = get("/admin/");
    let failures =
        list.split("id=\"probe-failures\"").nth(1).expect("the list names failed probes");
    let failures = failures.split("</section>").next().unwrap();
    assert!(
        failures.contains(">http-missing</a>") && failures.contains(">http-no-ranges</a>"),
        "{failures}"
    );
    assert!(!failures.contains(">fcoe</a>") && !failures.contains(">http-ok</a>"), "{failures}");
}

/// What the iSCSI arm is handed: per volume, the portals of each IQN and LUN, the initiator
/// name and CHAP the node's script sets; the other kinds as their scripts name them.
/// `bootvol probe` on iSCSI nodes against a real tgtd (tests/it/iscsi_probe.rs's target: CHAP,
/// mutual CHAP, an initiator ACL): the node as configured logs in (exit 0, the LUN's size); a
/// wrong CHAP secret, a node outside the ACL and a missing LUN each fail (exit 1) with the
/// target's own reason, and no secret is printed.
#[test]
fn iscsi_probe_logs_in_as_each_node_and_says_why_it_cannot() {
    use crate::iscsi_probe::{CHAP_TARGET, NODE, setup, tgtd_available};
    if !tgtd_available() {
        return;
    }
    let app = appliance("http://127.0.0.1:8080", "");
    std::fs::create_dir_all(app.path("tgt")).unwrap();
    let (tgtd, _disk) = setup(&app.path("tgt"));
    let portal = tgtd.portal();
    let closed = format!("127.0.0.1:{}", free_port());
    let san = |name: &str, mac: &str, initiator: &str, secret: &str, lun: u32| {
        node(
            name,
            mac,
            "iscsi_boot:true",
            json!({
            "volume_connectors": [{"type": "iqn", "connector_id": initiator}],
            "volume_targets": [{"volume_type": "iscsi", "boot_index": 0,
                "volume_id": format!("vol-{name}"),
                "properties": {"target_iqn": CHAP_TARGET, "target_portal": portal,
                    "target_lun": lun, "auth_method": "CHAP", "auth_username": "bfvuser",
                    "auth_password": secret, "auth_reverse_username": "tgtout",
                    "auth_reverse_password": "outsecret1234"}}]}),
        )
    };
    let stranger = "iqn.2026-12.test.bootvol.node:stranger";
    // Each node has its own initiator name (an inventory holds each once); the ACL has all
    // but the stranger's.
    let n = |i: u32| format!("iqn.2026-12.test.bootvol.node:n{i}");
    let (n2, n4, n5, n6, n7) = (n(2), n(4), n(5), n(6), n(7));
    for initiator in [&n2, &n4, &n5, &n6, &n7] {
        let bind = ["--op", "bind", "--mode", "target", "--tid", "1", "--initiator-name"];
        tgtd.admin(&[&bind[..], &[initiator]].concat());
    }
    app.apply(json!([
        san("iscsi-ok", "52:54:00:0a:11:01", NODE, "bfvsecret12345", 1),
        san("iscsi-wrong-chap", "52:54:00:0a:11:02", &n2, "wrongsecret99", 1),
        san("iscsi-stranger", "52:54:00:0a:11:03", stranger, "bfvsecret12345", 1),
        san("iscsi-no-lun", "52:54:00:0a:11:04", &n4, "bfvsecret12345", 5),
        edit(
            san("iscsi-wrong-mutual", "52:54:00:0a:11:05", &n5, "bfvsecret12345", 1),
            "auth_reverse_password",
            "wrongsecret99"
        ),
        edit(
            san("iscsi-no-target", "52:54:00:0a:11:06", &n6, "bfvsecret12345", 1),
            "target_iqn",
            "iqn.2026-12.test.bootvol:nothing-here"
        ),
        edit(
            san("iscsi-refused", "52:54:00:0a:11:07", &n7, "bfvsecret12345", 1),
            "target_portal",
            &closed
        ),
    ]));
    let run = |name: &str| {
        let output = probe(&app, None, &["--node", name]);
        let out = text(&output);
        for secret in ["bfvsecret12345", "outsecret1234", "wrongsecret99"] {
            assert!(!out.contains(secret), "a secret printed: {out}");
        }
        (output.status.code(), out)
    };
    let (code, out) = run("iscsi-ok");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("vol-iscsi-ok (iscsi)") && out.contains("login ok, LUN 1 24 MiB"),
        "{out}"
    );
    let (code, out) = run("iscsi-wrong-chap");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("CHAP rejected: authentication failure (0x0201)"), "{out}");
    let (code, out) = run("iscsi-stranger");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("initiator {stranger} not in its ACL")), "{out}");
    let (code, out) = run("iscsi-no-lun");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("LUN 5 missing (target has 0, 1)"), "{out}");
    let (code, out) = run("iscsi-wrong-mutual");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("mutual CHAP failed: the target's CHAP_R does not match"), "{out}");
    let (code, out) = run("iscsi-no-target");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("target iqn.2026-12.test.bootvol:nothing-here not found"), "{out}");
    let (code, out) = run("iscsi-refused");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("portal {closed} refused the connection")), "{out}");
}

/// `node` with its first volume target's property `key` set to `value`.
fn edit(mut node: Value, key: &str, value: &str) -> Value {
    node["volume_targets"][0]["properties"][key] = json!(value);
    node
}

#[test]
fn the_plan_is_what_the_scripts_attach() {
    use bootvol_core::probe::aoe::Address;
    use bootvol_core::probe::plan::{Chap, Iscsi, NoPlan, TargetKind, targets};
    let config = crate::support::config(tempfile::tempdir().unwrap().path());
    let db = crate::support::scenario_db(&config);
    let plan = |name: &str| {
        let record = db.node_record(name).unwrap().unwrap();
        targets(&record, &config.boot_settings(), config.default.default_storage_interface)
    };
    let chap = plan("iscsi-chap").unwrap();
    let kinds: Vec<(&str, &TargetKind)> =
        chap.iter().map(|t| (t.volume.as_str(), &t.kind)).collect();
    let iscsi = |portals: &[&str],
                 iqn: &str,
                 lun,
                 chap: Option<(&str, &str)>,
                 mutual: Option<(&str, &str)>| {
        TargetKind::Iscsi(Iscsi {
            portals: portals.iter().map(|p| (*p).to_owned()).collect(),
            target_iqn: iqn.into(),
            lun,
            initiator_iqn: "iqn.2024-01.org.example.node:iscsi-chap".into(),
            chap: chap.map(|(u, s)| Chap { user: u.into(), secret: s.into() }),
            mutual: mutual.map(|(u, s)| Chap { user: u.into(), secret: s.into() }),
        })
    };
    assert_eq!(
        kinds[0],
        (
            "vol-boot",
            &iscsi(
                &["192.0.2.5:3261"],
                "iqn.2024-01.org.example.san:boot",
                2,
                Some(("node-user", "boot-chap-secret-1")),
                Some(("san-user", "mutual-secret-22"))
            )
        )
    );
    assert_eq!(
        kinds[1],
        (
            "vol-data",
            &iscsi(
                &["[2001:db8::5]:3260"],
                "iqn.2024-01.org.example.san:data",
                16,
                Some(("data-user", "data-chap-secret-3")),
                None
            )
        )
    );
    assert_eq!(
        kinds[2],
        (
            "vol-scratch",
            &iscsi(&["san.example:3260"], "iqn.2024-01.org.example.san:scratch", 0, None, None)
        )
    );
    // Multipath with an IQN and LUN per portal: one login per pair.
    let mp = plan("iscsi-multipath").unwrap();
    assert_eq!(mp.len(), 2, "{mp:?}");
    assert!(matches!(&mp[1].kind, TargetKind::Iscsi(t) if t.portals == ["[2001:db8::6]:3260"]
        && t.target_iqn.ends_with(":ctrl-b") && t.lun == 7 && t.initiator_iqn.ends_with(":mp")));
    assert_eq!(plan("aoe").unwrap()[0].kind, TargetKind::Aoe(Address { shelf: 3, slot: 1 }));
    assert!(matches!(&plan("http-san").unwrap()[0].kind,
        TargetKind::HttpSan { url } if url == "http://192.0.2.10:8080/files/images/disk.img"));
    assert_eq!(
        plan("nfs-root").unwrap()[0].kind,
        TargetKind::NfsRoot {
            server: "192.0.2.7".into(),
            path: "/srv/nfsroot".into(),
            kernel_url: "http://192.0.2.10:8080/files/nfs/vmlinuz".into(),
            initrd_url: "http://192.0.2.10:8080/files/nfs/initrd.img".into()
        }
    );
    assert!(matches!(&plan("nfs-cinder").unwrap()[0].kind,
        TargetKind::NfsRoot { server, path, .. } if server == "2001:db8::7" && path == "/exports/root"));
    let fcoe = plan("fcoe").unwrap();
    assert_eq!(fcoe.len(), 2, "one line per volume: {fcoe:?}");
    assert!(fcoe.iter().all(|t| matches!(t.kind, TargetKind::NotProbeable { what: "fcoe", .. })));
    assert!(matches!(plan("hba").unwrap()[0].kind, TargetKind::NotProbeable { what: "hba", .. }));
    assert_eq!(plan("noop-storage"), Err(NoPlan::NotBootFromVolume));
    assert!(
        matches!(plan("no-capability"), Err(NoPlan::Invalid(_))),
        "{:?}",
        plan("no-capability")
    );
}
