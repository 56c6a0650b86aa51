//! Issue 26, accepting what Ironic accepts and refusing where it refuses: identifiers that are
//! not UUIDs (400, not 404), the collections Ironic's root controller serves without `/v1`, and
//! node fields by microversion (the RAID fields of a node's states from 1.12, "no state" for
//! `available` below 1.2).

use serde_json::{Value, json};

use super::{Api, fault, wait_for};

/// A fake-hardware node `name` with one port `mac`: (node UUID, port UUID).
pub(super) fn node_with_port(api: &Api, name: &str, mac: &str) -> (String, String) {
    let (status, node) =
        api.v("POST", "/v1/nodes", Some(json!({"name": name, "driver": "fake-hardware"})));
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let (status, port) =
        api.v("POST", "/v1/ports", Some(json!({"node_uuid": uuid, "address": mac})));
    assert_eq!(status, 201, "{port}");
    (uuid, port["uuid"].as_str().unwrap().to_owned())
}

#[test]
fn a_port_connector_or_target_named_by_anything_but_a_uuid_is_a_bad_request() {
    let api = Api::start(false);
    let (_, port) = node_with_port(&api, "id-n1", "52:54:00:d0:00:01");
    for path in [
        "/v1/ports/52:54:00:d0:00:01",
        "/v1/ports/not-a-uuid",
        "/v1/volume/connectors/fake_volume_connector",
        "/v1/volume/targets/fake_volume_target",
    ] {
        for method in ["GET", "PATCH", "DELETE"] {
            let body = (method == "PATCH").then(|| json!([]));
            let (status, answer) = api.v(method, path, body);
            assert!(
                status == 400 && fault(&answer).contains("Expected a UUID"),
                "{method} {path}: {status} {answer}"
            );
        }
    }
    // A UUID that names nothing is still 404; the port by its UUID (any case) is found.
    let ghost = "2f7b6a8e-2a4d-4bb8-9a51-0f5b8fbd0001";
    assert_eq!(api.v("GET", &format!("/v1/ports/{ghost}"), None).0, 404);
    assert_eq!(api.v("GET", &format!("/v1/volume/targets/{ghost}"), None).0, 404);
    let (status, shown) = api.v("GET", &format!("/v1/ports/{}", port.to_uppercase()), None);
    assert_eq!((status, shown["uuid"].as_str()), (200, Some(port.as_str())), "{shown}");
}

#[test]
fn collections_without_v1_are_served_as_v1_with_the_same_authentication() {
    let api = Api::start(false);
    let (_, port) = node_with_port(&api, "uv-n1", "52:54:00:d1:00:01");
    for (bare, versioned) in [
        ("/nodes/detail", "/v1/nodes/detail"),
        ("/ports/detail?address=52:54:00:d1:00:01", "/v1/ports/detail?address=52:54:00:d1:00:01"),
        ("/drivers/fake-hardware", "/v1/drivers/fake-hardware"),
        ("/drivers/fake-hardware/properties", "/v1/drivers/fake-hardware/properties"),
        ("/chassis", "/v1/chassis"),
    ] {
        let (status, answer) = api.v("GET", bare, None);
        assert_eq!(status, 200, "{bare}: {answer}");
        assert_eq!(answer, api.v("GET", versioned, None).1, "{bare}");
    }
    assert_eq!(api.v("GET", "/ports/detail", None).1["ports"][0]["uuid"], json!(port));
    assert_eq!(api.v("GET", "/elsewhere", None).0, 404);
    // Not a way around authentication.
    let guarded = Api::start(true);
    let (status, _, _) = guarded.call("GET", "/nodes/detail", None, &[]);
    assert_eq!(status, 401);
}

#[test]
fn a_nodes_states_and_provision_state_are_shown_as_the_microversion_knows_them() {
    let api = Api::start(false);
    let (status, node) =
        api.at("1.2", "POST", "/v1/nodes", Some(json!({"driver": "fake-hardware"})));
    assert_eq!((status, node["provision_state"].as_str()), (201, Some("available")), "{node}");
    let uuid = node["uuid"].as_str().unwrap();
    let (_, old) = api.at("1.1", "GET", &format!("/v1/nodes/{uuid}"), None);
    assert_eq!(old["provision_state"], Value::Null, "no state below 1.2: {old}");
    let (_, states) = api.at("1.1", "GET", &format!("/v1/nodes/{uuid}/states"), None);
    assert_eq!(states["provision_state"], Value::Null, "{states}");
    // Every field of the states is the node's as the same version shows it.
    for minor in ["1.1", "1.11", "1.12", "1.38"] {
        let (_, states) = api.at(minor, "GET", &format!("/v1/nodes/{uuid}/states"), None);
        let (_, node) = api.at(minor, "GET", &format!("/v1/nodes/{uuid}"), None);
        for (key, value) in states.as_object().unwrap() {
            assert_eq!(Some(value), node.get(key), "{key} at {minor}: {states} / {node}");
        }
        let raid = states.get("raid_config").is_some();
        assert_eq!(raid, minor == "1.12" || minor == "1.38", "raid_config at {minor}: {states}");
        assert_eq!(states.get("target_raid_config").is_some(), raid, "{states}");
    }
}

#[test]
fn a_free_form_connector_id_is_stored_and_validate_says_why_it_can_not_boot() {
    let api = Api::start(false);
    let body = json!({"name": "cid-n1", "driver": "fake", "storage_interface": "external",
                      "properties": {"capabilities": "iscsi_boot:true"}});
    let (status, node) = api.v("POST", "/v1/nodes", Some(body));
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap();
    let connector =
        json!({"node_uuid": uuid, "type": "iqn", "connector_id": "tempest-connector_id-123"});
    let (status, stored) = api.v("POST", "/v1/volume/connectors", Some(connector.clone()));
    assert_eq!((status, stored["connector_id"].as_str()), (201, Some("tempest-connector_id-123")));
    // Unique by (type, connector_id) all the same (Ironic's words).
    let (status, body) = api.v("POST", "/v1/volume/connectors", Some(connector));
    assert!(status == 409 && fault(&body).contains("already exists"), "{body}");
    // A valid id of its type is still made canonical; a value no script could hold is refused.
    let upper = json!({"node_uuid": uuid, "type": "mac", "connector_id": "52:54:00:D2:00:0A"});
    let (_, mac) = api.v("POST", "/v1/volume/connectors", Some(upper));
    assert_eq!(mac["connector_id"], "52:54:00:d2:00:0a", "{mac}");
    let hostile = json!({"node_uuid": uuid, "type": "iqn", "connector_id": "a b$"});
    let (status, body) = api.v("POST", "/v1/volume/connectors", Some(hostile));
    assert!(status == 400 && fault(&body).contains("connector_id"), "{body}");
    let target = json!({"node_uuid": uuid, "volume_type": "iscsi", "boot_index": 0, "volume_id": "v1",
        "properties": {"target_iqn": "iqn.2024-01.org.example.san:v1", "target_portal": "192.0.2.5:3260"}});
    assert_eq!(api.v("POST", "/v1/volume/targets", Some(target)).0, 201);
    let (_, validation) = api.v("GET", &format!("/v1/nodes/{uuid}/validate"), None);
    let text = validation.to_string();
    assert!(text.contains("which is not a valid iSCSI name"), "{validation}");
}

#[test]
fn volume_information_of_a_powered_on_node_is_not_changed_and_an_edit_waits_for_the_lock() {
    let api = Api::start(false);
    let (status, node) =
        api.v("POST", "/v1/nodes", Some(json!({"name": "vol-n1", "driver": "fake-hardware"})));
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap();
    let connector = json!({"node_uuid": uuid, "type": "ip", "connector_id": "192.0.2.20"});
    let (_, connector) = api.v("POST", "/v1/volume/connectors", Some(connector));
    let target = json!({"node_uuid": uuid, "volume_type": "iscsi", "boot_index": 0,
                        "volume_id": "v1", "properties": {}});
    let (_, target) = api.v("POST", "/v1/volume/targets", Some(target));
    let connector = format!("/v1/volume/connectors/{}", connector["uuid"].as_str().unwrap());
    let target = format!("/v1/volume/targets/{}", target["uuid"].as_str().unwrap());
    let power = |state: &str| {
        let (status, body) =
            api.v("PUT", &format!("/v1/nodes/{uuid}/states/power"), Some(json!({"target": state})));
        assert_eq!(status, 202, "{body}");
    };
    power("power on");
    wait_for(&api, uuid, "power_state", "power on");
    // Powered on, though not deployed: updates and deletions are Ironic's 400.
    let patch = json!([{"op": "add", "path": "/extra/a", "value": 1}]);
    for (method, path, words) in [
        ("PATCH", &target, "\"volume target update\" can not be performed on node"),
        ("DELETE", &target, "\"volume target deletion\" can not be performed on node"),
        ("PATCH", &connector, "\"volume connector update\" can not be performed on node"),
        ("DELETE", &connector, "\"volume connector deletion\" can not be performed on node"),
    ] {
        let body = (method == "PATCH").then(|| patch.clone());
        let (status, answer) = api.v(method, path, body);
        assert!(status == 400 && fault(&answer).contains(words), "{method} {path}: {answer}");
    }
    // Powered off: the deletion asked for at once waits for the power action's lock.
    power("power off");
    assert_eq!(api.v("DELETE", &target, None).0, 204);
    assert_eq!(api.v("DELETE", &connector, None).0, 204);
}

#[test]
fn traits_and_raid_below_their_microversion_get_ironics_statuses() {
    let api = Api::start(false);
    let (_, node) =
        api.v("POST", "/v1/nodes", Some(json!({"name": "tr-n1", "driver": "fake-hardware"})));
    let uuid = node["uuid"].as_str().unwrap();
    let traits = format!("/v1/nodes/{uuid}/traits");
    let one = format!("{traits}/CUSTOM_TRAIT1");
    // Below 1.37: reading 406, writing 405, deleting 404; at 1.37 served.
    for (minor, method, path, body, status) in [
        ("1.36", "GET", &traits, None, 406),
        ("1.27", "GET", &traits, None, 406),
        ("1.36", "PUT", &traits, Some(json!({"traits": ["CUSTOM_TRAIT1"]})), 405),
        ("1.36", "PUT", &one, None, 405),
        ("1.36", "DELETE", &one, None, 404),
        ("1.36", "DELETE", &traits, None, 404),
        ("1.37", "PUT", &one, None, 204),
        ("1.37", "GET", &traits, None, 200),
    ] {
        let (got, answer) = api.at(minor, method, path, body);
        assert_eq!(got, status, "{method} {path} at {minor}: {answer}");
    }
    // Asking for a field the version does not know: 406, in a list and on one node.
    assert_eq!(api.at("1.36", "GET", "/v1/nodes?fields=uuid,traits", None).0, 406);
    assert_eq!(api.at("1.36", "GET", &format!("/v1/nodes/{uuid}?fields=traits"), None).0, 406);
    let (status, list) = api.at("1.37", "GET", "/v1/nodes?fields=uuid,traits", None);
    assert_eq!((status, &list["nodes"][0]["traits"]), (200, &json!(["CUSTOM_TRAIT1"])), "{list}");
    // RAID configuration below 1.12: 406.
    let raid = format!("/v1/nodes/{uuid}/states/raid");
    assert_eq!(api.at("1.2", "PUT", &raid, Some(json!({"logical_disks": []}))).0, 406);
}

#[test]
fn an_action_or_edit_asked_for_while_another_holds_the_node_waits_for_it_before_409() {
    let api = Api::start(false);
    let (_, node) =
        api.v("POST", "/v1/nodes", Some(json!({"name": "lk-n1", "driver": "fake-hardware"})));
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let db = crate::support::open_db_ok(api._dir.path()).unwrap();
    let other = bootvol_db::ActionToken::new("power on");
    let now = bootvol_core::timefmt::now_unix() as i64;
    db.try_lock_node(&uuid, &other, now, bootvol_db::LEASE_SECS).unwrap().unwrap();
    // Released while the request waits: the request goes through (Ironic's conductor retries).
    let release = {
        let (uuid, other) = (uuid.clone(), other.clone());
        let path = api._dir.path().to_owned();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(1200));
            crate::support::open_db_ok(&path).unwrap().unlock_node(&uuid, &other).unwrap();
        })
    };
    let started = std::time::Instant::now();
    let power = json!({"target": "power off"});
    let (status, body) = api.v("PUT", "/v1/nodes/lk-n1/states/power", Some(power.clone()));
    assert_eq!(status, 202, "{body}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "it waited for the lock");
    release.join().unwrap();
    wait_for(&api, &uuid, "power_state", "power off");
    // Held all along: 409 after the looks, for an action and for an edit alike.
    db.try_lock_node(&uuid, &other, now, bootvol_db::LEASE_SECS).unwrap().unwrap();
    let started = std::time::Instant::now();
    let (status, body) = api.v("PUT", "/v1/nodes/lk-n1/states/power", Some(power));
    assert!(status == 409 && fault(&body).contains("locked"), "{body}");
    let patch = json!([{"op": "add", "path": "/extra/x", "value": 1}]);
    let (status, body) = api.v("PATCH", "/v1/nodes/lk-n1", Some(patch));
    assert!(status == 409 && fault(&body).contains("locked"), "{body}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(4), "two requests, 2 s each");
    db.unlock_node(&uuid, &other).unwrap();
}

/// `POST /v1/heartbeat` takes the node from the path or, as Ironic's controller does, from the
/// body's `node_ident` (from 1.22; 404 below); a body without one is a 400 that says so.
#[test]
fn a_heartbeat_names_its_node_in_the_path_or_the_body() {
    let api = Api::start(false);
    let (status, node) =
        api.v("POST", "/v1/nodes", Some(json!({"name": "hb", "driver": "fake-hardware"})));
    assert_eq!(status, 201, "{node}");
    let body = json!({"node_ident": "hb", "callback_url": "http://192.0.2.9:9999",
        "agent_version": "9.0.0", "agent_token": "t"});
    assert_eq!(api.at("1.22", "POST", "/v1/heartbeat", Some(body.clone())).0, 202);
    assert_eq!(
        api.at(
            "1.22",
            "POST",
            "/v1/heartbeat/hb",
            Some(json!({"callback_url": "http://192.0.2.9:9999"}))
        )
        .0,
        202
    );
    assert_eq!(api.at("1.21", "POST", "/v1/heartbeat", Some(body)).0, 404);
    let (status, reply) =
        api.at("1.22", "POST", "/v1/heartbeat", Some(json!({"callback_url": "x"})));
    assert_eq!(status, 400, "{reply}");
    assert!(fault(&reply).contains("node_ident"), "{}", fault(&reply));
    let gone = json!({"node_ident": "no-such-node", "callback_url": "x"});
    assert_eq!(api.at("1.22", "POST", "/v1/heartbeat", Some(gone)).0, 404);
}
