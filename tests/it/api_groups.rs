//! Issue 26, chassis and port groups as real resources through the REST API: created, listed
//! (filters, fields, paging, sorting), shown, patched and deleted in Ironic's shapes and with
//! Ironic's statuses; the nodes and ports that refer to them.

use serde_json::{Value, json};

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
