//! Issue 26, chassis and port groups as real resources through the REST API: created, listed
//! (filters, fields, paging, sorting), shown, patched and deleted in Ironic's shapes and with
//! Ironic's statuses; the nodes and ports that refer to them.

use serde_json::{Value, json};

use super::compat::node_with_port;
use super::{Api, fault};

fn uuids(list: &Value, key: &str) -> Vec<String> {
    list[key].as_array().unwrap().iter().map(|i| i["uuid"].as_str().unwrap().to_owned()).collect()
}

fn make_chassis(api: &Api, body: Value) -> String {
    let (status, chassis) = api.v("POST", "/v1/chassis", Some(body));
    assert_eq!(status, 201, "{chassis}");
    chassis["uuid"].as_str().unwrap().to_owned()
}

#[test]
fn a_chassis_is_created_shown_listed_patched_and_deleted_as_ironic_does() {
    let api = Api::start(false);
    let given = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";
    let (status, chassis) = api.v(
        "POST",
        "/v1/chassis",
        Some(json!({"uuid": given, "description": "В Україні ♡ OpenStack!", "extra": {"rack": 4}})),
    );
    assert_eq!(status, 201, "{chassis}");
    assert_eq!(chassis["uuid"], given);
    assert_eq!(chassis["description"], "В Україні ♡ OpenStack!");
    assert_eq!(chassis["extra"], json!({"rack": 4}));
    assert!(chassis["created_at"].is_string() && chassis["updated_at"].is_null(), "{chassis}");
    let self_link = chassis["links"][0]["href"].as_str().unwrap();
    assert!(self_link.ends_with(&format!("/v1/chassis/{given}")), "{chassis}");
    let nodes_link = chassis["nodes"][0]["href"].as_str().unwrap();
    assert!(nodes_link.ends_with(&format!("/v1/chassis/{given}/nodes")), "{chassis}");
    let (status, shown) = api.v("GET", &format!("/v1/chassis/{given}"), None);
    assert_eq!((status, &shown), (200, &chassis));
    let (_, some) = api.v("GET", &format!("/v1/chassis/{given}?fields=description"), None);
    assert_eq!(some.as_object().unwrap().len(), 2, "description and links: {some}");
    // A second one without a UUID or description gets a UUID and a null description.
    let (status, plain) = api.v("POST", "/v1/chassis", Some(json!({})));
    assert_eq!((status, &plain["description"]), (201, &Value::Null), "{plain}");
    let other = plain["uuid"].as_str().unwrap().to_owned();

    // The list: uuid, description and links by default; everything with detail.
    let (status, list) = api.v("GET", "/v1/chassis", None);
    assert_eq!(status, 200);
    let first = list["chassis"][0].as_object().unwrap();
    let mut keys: Vec<&str> = first.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["description", "links", "uuid"], "{list}");
    let (_, detail) = api.v("GET", "/v1/chassis/detail", None);
    assert_eq!(detail["chassis"][0]["extra"], json!({"rack": 4}), "{detail}");
    assert!(detail["chassis"][0]["nodes"].is_array());
    // Paging and sorting.
    let (_, page) = api.v("GET", "/v1/chassis?limit=1", None);
    assert_eq!(uuids(&page, "chassis"), [given]);
    assert!(page["next"].as_str().unwrap().contains(&format!("marker={given}")), "{page}");
    let (_, rest) = api.v("GET", &format!("/v1/chassis?limit=1&marker={given}"), None);
    assert_eq!(uuids(&rest, "chassis"), [other.as_str()]);
    let (_, desc) = api.v("GET", "/v1/chassis?sort_key=created_at&sort_dir=desc", None);
    assert_eq!(uuids(&desc, "chassis"), [other.clone(), given.to_owned()]);
    let (status, body) = api.v("GET", "/v1/chassis?sort_key=extra", None);
    assert!(status == 400 && fault(&body).contains("sort_key"), "{body}");

    // PATCH: description and extra; the rest is read-only.
    let patch = json!([{"op": "replace", "path": "/description", "value": "rack 4, row B"},
                       {"op": "add", "path": "/extra/row", "value": "B"}]);
    let (status, patched) = api.v("PATCH", &format!("/v1/chassis/{given}"), Some(patch));
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["description"], "rack 4, row B");
    assert_eq!(patched["extra"], json!({"rack": 4, "row": "B"}));
    assert!(patched["updated_at"].is_string());
    let remove = json!([{"op": "remove", "path": "/description"}]);
    let (_, removed) = api.v("PATCH", &format!("/v1/chassis/{given}"), Some(remove));
    assert_eq!(removed["description"], Value::Null, "{removed}");
    let uuid_patch = json!([{"op": "replace", "path": "/uuid", "value": other}]);
    let (status, body) = api.v("PATCH", &format!("/v1/chassis/{given}"), Some(uuid_patch));
    assert!(status == 400 && fault(&body).contains("/uuid"), "{body}");

    // DELETE, then it is gone.
    assert_eq!(api.v("DELETE", &format!("/v1/chassis/{other}"), None).0, 204);
    let (status, body) = api.v("GET", &format!("/v1/chassis/{other}"), None);
    assert!(status == 404 && fault(&body).contains("could not be found"), "{body}");
    assert_eq!(api.v("DELETE", &format!("/v1/chassis/{other}"), None).0, 404);
}

#[test]
fn bad_chassis_input_gets_ironics_400_with_the_reason() {
    let api = Api::start(false);
    let uuid = make_chassis(&api, json!({"description": "rack 1"}));
    for (body, words) in [
        (json!({"description": "x".repeat(256)}), "at most 255"),
        (json!({"description": 7}), "description: must be a string"),
        (json!({"extra": "no"}), "extra: must be an object"),
        (json!({"name": "c1"}), "not a field of a chassis"),
        (json!({"uuid": "not-a-uuid"}), "uuid"),
        (json!({"uuid": uuid}), "already exists"),
    ] {
        let (status, answer) = api.v("POST", "/v1/chassis", Some(body.clone()));
        let expected = if words == "already exists" { 409 } else { 400 };
        assert_eq!(status, expected, "{body}: {answer}");
        assert!(fault(&answer).contains(words), "{body}: {answer}");
    }
    // An identifier that is not a UUID is refused (400), not "not found".
    for method in ["GET", "PATCH", "DELETE"] {
        let body = (method == "PATCH").then(|| json!([]));
        let (status, answer) = api.v(method, "/v1/chassis/rack-1", body);
        assert!(status == 400 && fault(&answer).contains("Expected a UUID"), "{method}: {answer}");
    }
    let ghost = "2f7b6a8e-2a4d-4bb8-9a51-0f5b8fbd0001";
    assert_eq!(api.v("GET", &format!("/v1/chassis/{ghost}/nodes"), None).0, 404);
    assert_eq!(api.v("PUT", "/v1/chassis", Some(json!({}))).0, 405);
}

#[test]
fn nodes_belong_to_a_chassis_that_exists_and_keep_it_from_deletion() {
    let api = Api::start(false);
    let rack = make_chassis(&api, json!({"description": "rack 1"}));
    let spare = make_chassis(&api, json!({"description": "rack 2"}));
    let ghost = "2f7b6a8e-2a4d-4bb8-9a51-0f5b8fbd0001";
    // A node names an existing chassis on create (400 otherwise: nothing is created).
    let body = json!({"name": "c-n1", "driver": "fake-hardware", "chassis_uuid": ghost});
    let (status, answer) = api.v("POST", "/v1/nodes", Some(body));
    assert!(status == 400 && fault(&answer).contains(ghost), "{answer}");
    assert_eq!(api.v("GET", "/v1/nodes/c-n1", None).0, 404, "nothing was created");
    let body = json!({"name": "c-n1", "driver": "fake-hardware", "chassis_uuid": rack});
    let (status, node) = api.v("POST", "/v1/nodes", Some(body));
    assert_eq!((status, node["chassis_uuid"].as_str()), (201, Some(rack.as_str())), "{node}");
    let body = json!({"name": "c-n2", "driver": "fake-hardware", "chassis_uuid": null});
    let (status, other) = api.v("POST", "/v1/nodes", Some(body));
    assert_eq!((status, &other["chassis_uuid"]), (201, &Value::Null), "{other}");
    // Shown, filtered by, and listed under the chassis.
    assert_eq!(api.v("GET", "/v1/nodes/c-n1", None).1["chassis_uuid"], rack);
    let (_, filtered) = api.v("GET", &format!("/v1/nodes?chassis_uuid={rack}"), None);
    assert_eq!(uuids(&filtered, "nodes"), [node["uuid"].as_str().unwrap()]);
    let (status, body) = api.v("GET", "/v1/nodes?chassis_uuid=rack-1", None);
    assert!(status == 400 && fault(&body).contains("Expected a UUID"), "{body}");
    let (status, under) = api.v("GET", &format!("/v1/chassis/{rack}/nodes"), None);
    assert_eq!(status, 200, "{under}");
    assert_eq!(uuids(&under, "nodes"), [node["uuid"].as_str().unwrap()]);
    assert!(under["nodes"][0].get("driver").is_none(), "the list's default fields: {under}");
    let (_, detail) = api.v("GET", &format!("/v1/chassis/{rack}/nodes/detail"), None);
    assert_eq!(detail["nodes"][0]["driver"], "fake-hardware", "{detail}");
    // A chassis with nodes is not deleted (Ironic's 400).
    let (status, body) = api.v("DELETE", &format!("/v1/chassis/{rack}"), None);
    assert!(status == 400 && fault(&body).contains("contains nodes"), "{body}");
    // PATCH moves a node: to a chassis that exists only; remove takes it out.
    let to = |value: &str| json!([{"op": "replace", "path": "/chassis_uuid", "value": value}]);
    let (status, body) = api.v("PATCH", "/v1/nodes/c-n1", Some(to(ghost)));
    assert!(status == 400 && fault(&body).contains(ghost), "{body}");
    assert_eq!(api.v("GET", "/v1/nodes/c-n1", None).1["chassis_uuid"], rack, "unchanged");
    let (status, moved) = api.v("PATCH", "/v1/nodes/c-n1", Some(to(&spare)));
    assert_eq!((status, moved["chassis_uuid"].as_str()), (200, Some(spare.as_str())), "{moved}");
    assert_eq!(api.v("DELETE", &format!("/v1/chassis/{rack}"), None).0, 204);
    let out = json!([{"op": "remove", "path": "/chassis_uuid"}]);
    let (status, freed) = api.v("PATCH", "/v1/nodes/c-n1", Some(out));
    assert_eq!((status, &freed["chassis_uuid"]), (200, &Value::Null), "{freed}");
    // Another field patched keeps the chassis.
    api.v("PATCH", "/v1/nodes/c-n2", Some(to(&spare)));
    let extra = json!([{"op": "add", "path": "/extra/a", "value": 1}]);
    assert_eq!(api.v("PATCH", "/v1/nodes/c-n2", Some(extra)).1["chassis_uuid"], spare);
    // Deleting its nodes frees a chassis.
    assert_eq!(api.v("DELETE", "/v1/nodes/c-n2", None).0, 204);
    assert_eq!(api.v("DELETE", &format!("/v1/chassis/{spare}"), None).0, 204);
}

#[test]
fn a_port_group_is_created_shown_listed_patched_and_deleted_as_ironic_does() {
    let api = Api::start(false);
    let (node, _) = node_with_port(&api, "pg-n1", "52:54:00:e0:00:01");
    let body = json!({"node_uuid": node, "name": "bond0", "address": "52:54:00:e0:00:0a",
                      "extra": {"foo": "bar", "open": "stack"}, "mode": "802.3ad",
                      "properties": {"miimon": "100"}});
    let (status, group) = api.v("POST", "/v1/portgroups", Some(body));
    assert_eq!(status, 201, "{group}");
    let uuid = group["uuid"].as_str().unwrap().to_owned();
    for (field, value) in [
        ("name", json!("bond0")),
        ("address", json!("52:54:00:e0:00:0a")),
        ("node_uuid", json!(node)),
        ("mode", json!("802.3ad")),
        ("properties", json!({"miimon": "100"})),
        ("standalone_ports_supported", json!(true)),
        ("internal_info", json!({})),
    ] {
        assert_eq!(group[field], value, "{field}: {group}");
    }
    assert!(
        group["links"][0]["href"].as_str().unwrap().ends_with(&format!("/v1/portgroups/{uuid}"))
    );
    assert!(
        group["ports"][0]["href"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/portgroups/{uuid}/ports"))
    );
    // By UUID or by name; another without an address or mode gets Ironic's defaults.
    assert_eq!(api.v("GET", "/v1/portgroups/bond0", None).1, group);
    let (status, plain) = api.v("POST", "/v1/portgroups", Some(json!({"node_uuid": "pg-n1"})));
    assert_eq!(status, 201, "{plain}");
    assert_eq!((&plain["address"], &plain["mode"]), (&Value::Null, &json!("active-backup")));
    // mode and properties are 1.26's: hidden and refused below it.
    let (_, old) = api.at("1.25", "GET", &format!("/v1/portgroups/{uuid}"), None);
    assert!(old.get("mode").is_none() && old.get("properties").is_none(), "{old}");
    let body = json!({"node_uuid": node, "mode": "balance-rr"});
    assert_eq!(api.at("1.25", "POST", "/v1/portgroups", Some(body)).0, 406);
    // The list: uuid, address, name and links by default; filters node and address.
    let (_, list) = api.v("GET", "/v1/portgroups", None);
    let mut keys: Vec<&str> =
        list["portgroups"][0].as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["address", "links", "name", "uuid"], "{list}");
    let (_, by_address) = api.v("GET", "/v1/portgroups?address=52:54:00:e0:00:0a", None);
    assert_eq!(uuids(&by_address, "portgroups"), [uuid.as_str()]);
    let (_, by_node) = api.v("GET", &format!("/v1/portgroups/detail?node={node}"), None);
    assert_eq!(by_node["portgroups"].as_array().unwrap().len(), 2, "{by_node}");
    assert_eq!(by_node["portgroups"][0]["extra"], json!({"foo": "bar", "open": "stack"}));
    let (status, body) = api.v("GET", "/v1/portgroups?sort_key=properties", None);
    assert!(status == 400 && fault(&body).contains("sort_key"), "{body}");
    // PATCH: add, replace and remove in one; mode can not be removed; uuid is read-only.
    let patch = json!([{"op": "replace", "path": "/address", "value": "52:54:00:e0:00:0b"},
                       {"op": "remove", "path": "/extra/foo"},
                       {"op": "add", "path": "/extra/key3", "value": {"cat": "meow"}},
                       {"op": "add", "path": "/properties/key1", "value": "value1"}]);
    let (status, patched) = api.v("PATCH", &format!("/v1/portgroups/{uuid}"), Some(patch));
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["address"], "52:54:00:e0:00:0b");
    assert_eq!(patched["extra"], json!({"open": "stack", "key3": {"cat": "meow"}}));
    assert_eq!(patched["properties"], json!({"miimon": "100", "key1": "value1"}));
    let remove = json!([{"op": "remove", "path": "/extra"}]);
    assert_eq!(api.v("PATCH", "/v1/portgroups/bond0", Some(remove)).1["extra"], json!({}));
    let no_mode = json!([{"op": "remove", "path": "/mode"}]);
    let (status, body) = api.v("PATCH", "/v1/portgroups/bond0", Some(no_mode));
    assert!(status == 400 && fault(&body).contains("'mode' is a mandatory"), "{body}");
    let uuid_patch = json!([{"op": "replace", "path": "/uuid", "value": plain["uuid"]}]);
    assert_eq!(api.v("PATCH", "/v1/portgroups/bond0", Some(uuid_patch)).0, 400);
    // DELETE, then it is gone; a node's deletion takes its groups.
    assert_eq!(api.v("DELETE", "/v1/portgroups/bond0", None).0, 204);
    assert_eq!(api.v("GET", &format!("/v1/portgroups/{uuid}"), None).0, 404);
    assert_eq!(api.v("DELETE", "/v1/nodes/pg-n1", None).0, 204);
    assert_eq!(api.v("GET", "/v1/portgroups", None).1, json!({"portgroups": []}));
}

#[test]
fn bad_port_group_input_gets_ironics_status_with_the_reason() {
    let api = Api::start(false);
    let (node, _) = node_with_port(&api, "pg-n2", "52:54:00:e1:00:01");
    let ok = json!({"node_uuid": node, "name": "bond1", "address": "52:54:00:e1:00:0a"});
    assert_eq!(api.v("POST", "/v1/portgroups", Some(ok)).0, 201);
    let ghost = "2f7b6a8e-2a4d-4bb8-9a51-0f5b8fbd0001";
    for (body, status, words) in [
        (json!({}), 400, "node_uuid: missing"),
        (json!({"node_uuid": ghost}), 400, ghost),
        (json!({"node_uuid": node, "name": "bond 1"}), 400, "invalid name"),
        (json!({"node_uuid": node, "address": "zz"}), 400, "address"),
        (json!({"node_uuid": node, "standalone_ports_supported": 3}), 400, "true or false"),
        (json!({"node_uuid": node, "color": "red"}), 400, "not a field of a port group"),
        (json!({"node_uuid": node, "name": "bond1"}), 409, "name bond1 already exists"),
        (json!({"node_uuid": node, "address": "52:54:00:e1:00:0a"}), 409, "already exists"),
    ] {
        let (got, answer) = api.v("POST", "/v1/portgroups", Some(body.clone()));
        assert_eq!(got, status, "{body}: {answer}");
        assert!(fault(&answer).contains(words), "{body}: {answer}");
    }
    // Identifiers that are neither a UUID nor a logical name: 400; endpoints by microversion.
    let (status, body) = api.v("GET", "/v1/portgroups/bad%20name", None);
    assert!(status == 400 && fault(&body).contains("logical name or UUID"), "{body}");
    assert_eq!(api.at("1.22", "GET", "/v1/portgroups", None).0, 404);
    let by_node = format!("/v1/nodes/{node}/portgroups");
    assert_eq!(api.at("1.23", "GET", &by_node, None).0, 404);
    let (status, list) = api.at("1.24", "GET", &by_node, None);
    assert_eq!((status, list["portgroups"].as_array().unwrap().len()), (200, 1), "{list}");
    assert_eq!(api.at("1.23", "GET", "/v1/portgroups/bond1/ports", None).0, 404);
    assert_eq!(api.at("1.23", "GET", "/v1/ports?portgroup=bond1", None).0, 406);
}

#[test]
fn ports_join_a_group_of_their_node_with_one_physical_network_and_keep_booting_by_mac() {
    let api = Api::start(false);
    let (node, port) = node_with_port(&api, "pg-n3", "52:54:00:e2:00:01");
    let (other_node, other_port) = node_with_port(&api, "pg-n4", "52:54:00:e2:00:02");
    let script = |mac: &str| crate::serve::get(&format!("{}/boot/{mac}.ipxe", api.boot));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while script("52-54-00-e2-00-01").0 != 200 {
        assert!(std::time::Instant::now() < deadline, "the node's script never arrived");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let before = script("52-54-00-e2-00-01");
    let unknown = script("52-54-00-e2-00-99");
    let body = json!({"node_uuid": node, "name": "bond2", "address": "52:54:00:e2:00:99"});
    let (_, group) = api.v("POST", "/v1/portgroups", Some(body));
    let group_uuid = group["uuid"].as_str().unwrap().to_owned();
    // A port joins by patch (by UUID or name) and shows its group from 1.24.
    let join = |value: &str| json!([{"op": "add", "path": "/portgroup_uuid", "value": value}]);
    let (status, joined) = api.v("PATCH", &format!("/v1/ports/{port}"), Some(join("bond2")));
    assert_eq!(
        (status, joined["portgroup_uuid"].as_str()),
        (200, Some(group_uuid.as_str())),
        "{joined}"
    );
    let (_, old) = api.at("1.23", "GET", &format!("/v1/ports/{port}"), None);
    assert!(old.get("portgroup_uuid").is_none(), "{old}");
    assert_eq!(api.at("1.23", "PATCH", &format!("/v1/ports/{port}"), Some(join("bond2"))).0, 406);
    // ... or on create, with the group's physical network; a group of another node: 400.
    let second =
        json!({"node_uuid": node, "address": "52:54:00:e2:00:03", "portgroup_uuid": group_uuid});
    let (status, second) = api.v("POST", "/v1/ports", Some(second));
    assert_eq!((status, &second["portgroup_uuid"]), (201, &json!(group_uuid)), "{second}");
    let (status, body) =
        api.v("PATCH", &format!("/v1/ports/{other_port}"), Some(join(&group_uuid)));
    assert!(status == 400 && fault(&body).contains("another node"), "{body}");
    let ghost =
        json!({"node_uuid": other_node, "address": "52:54:00:e2:00:04", "portgroup_uuid": "bond9"});
    let (status, body) = api.v("POST", "/v1/ports", Some(ghost));
    assert!(status == 400 && fault(&body).contains("bond9"), "{body}");
    // One physical network per group (Ironic's 409).
    let physnet = |value: &str| json!([{"op": "add", "path": "/physical_network", "value": value}]);
    let (status, body) = api.v("PATCH", &format!("/v1/ports/{port}"), Some(physnet("physnet2")));
    assert!(status == 409 && fault(&body).contains("physical network"), "{body}");
    let third = json!({"node_uuid": node, "address": "52:54:00:e2:00:05", "portgroup_uuid": "bond2",
                       "physical_network": "physnet1"});
    assert_eq!(api.v("POST", "/v1/ports", Some(third)).0, 409);
    // The group's ports, by filter and under it.
    let (_, members) = api.v("GET", &format!("/v1/portgroups/{group_uuid}/ports"), None);
    assert_eq!(members["ports"].as_array().unwrap().len(), 2, "{members}");
    let (_, filtered) = api.v("GET", "/v1/ports/detail?portgroup=bond2", None);
    assert_eq!(filtered["ports"].as_array().unwrap().len(), 2, "{filtered}");
    assert!(
        filtered["ports"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["portgroup_uuid"] == json!(group_uuid))
    );
    // A group with ports is not deleted (400), nor moved to another node.
    let (status, body) = api.v("DELETE", "/v1/portgroups/bond2", None);
    assert!(status == 400 && fault(&body).contains("contains ports"), "{body}");
    let moved = json!([{"op": "replace", "path": "/node_uuid", "value": other_node}]);
    let (status, body) = api.v("PATCH", "/v1/portgroups/bond2", Some(moved));
    assert!(status == 400 && fault(&body).contains("has ports"), "{body}");
    // The member port's MAC still finds its node's script, unchanged; the group's MAC finds
    // nothing more than before.
    api.settled();
    assert_eq!(script("52-54-00-e2-00-01"), before, "a port in a group boots as before");
    assert_eq!(script("52-54-00-e2-00-99").0, unknown.0, "a group's address is not a port's");
    // Leaving the group (remove), then the group can go.
    let leave = json!([{"op": "remove", "path": "/portgroup_uuid"}]);
    let (status, left) = api.v("PATCH", &format!("/v1/ports/{port}"), Some(leave));
    assert_eq!((status, &left["portgroup_uuid"]), (200, &Value::Null), "{left}");
    let second = second["uuid"].as_str().unwrap();
    assert_eq!(api.v("DELETE", &format!("/v1/ports/{second}"), None).0, 204);
    assert_eq!(api.v("DELETE", "/v1/portgroups/bond2", None).0, 204);
}
