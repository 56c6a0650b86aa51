//! Issue 28, the node list at Ironic's page size: `[api] max_limit` caps every page and is the
//! page of a list asked without `limit`; the `next` links walk the whole list once, in order,
//! with filters and either direction; sort keys stored as a column are read by one keyset query
//! per page, the others still sort (over every node) and page alike.

use std::collections::HashSet;

use serde_json::json;

use super::{Api, fault};

/// Every node the list at `path` gives, following its `next` links: (names in order, pages).
fn walk(api: &Api, path: &str) -> (Vec<String>, usize) {
    let (mut names, mut pages) = (Vec::new(), 0);
    let mut at = path.to_owned();
    loop {
        let (status, page) = api.v("GET", &at, None);
        assert_eq!(status, 200, "{at}: {page}");
        pages += 1;
        let nodes = page["nodes"].as_array().unwrap();
        assert!(nodes.len() <= 3, "a page holds at most max_limit: {page}");
        names.extend(nodes.iter().map(|n| n["name"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => at = next[api.base.len()..].to_owned(),
            None => return (names, pages),
        }
        assert!(pages < 20, "the links never end: {at}");
    }
}

#[test]
fn max_limit_caps_pages_and_next_links_walk_every_node_once_in_order() {
    let api = Api::start_with(false, "max_limit = 3\n");
    // Created out of name order; two drivers; one in maintenance.
    for (name, driver) in [
        ("n5", "fake"),
        ("n2", "fake-hardware"),
        ("n7", "fake"),
        ("n1", "fake"),
        ("n4", "fake-hardware"),
        ("n6", "fake"),
        ("n3", "fake"),
    ] {
        let (status, node) =
            api.v("POST", "/v1/nodes", Some(json!({"name": name, "driver": driver})));
        assert_eq!(status, 201, "{node}");
    }
    assert_eq!(api.v("PUT", "/v1/nodes/n6/maintenance", Some(json!({"reason": "fan"}))).0, 202);
    let sorted = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();

    // No limit: max_limit's page, with a link; limit above max_limit: capped.
    let (_, first) = api.v("GET", "/v1/nodes", None);
    assert_eq!(first["nodes"].as_array().unwrap().len(), 3, "{first}");
    assert!(first["next"].as_str().unwrap().contains("limit=3"), "{first}");
    let (_, capped) = api.v("GET", "/v1/nodes?limit=100&sort_key=name", None);
    assert_eq!(capped["nodes"].as_array().unwrap().len(), 3, "{capped}");

    // The default order (created_at, then uuid), by name both ways, with filters.
    let (created, pages) = walk(&api, "/v1/nodes");
    let mut expected: Vec<(String, String, String)> = created
        .iter()
        .map(|name| {
            let node = api.v("GET", &format!("/v1/nodes/{name}"), None).1;
            let field = |f: &str| node[f].as_str().unwrap().to_owned();
            (field("created_at"), field("uuid"), name.clone())
        })
        .collect();
    expected.sort();
    let expected: Vec<String> = expected.into_iter().map(|(_, _, name)| name).collect();
    assert_eq!((&created, pages), (&expected, 3), "by created_at, then uuid");
    assert_eq!(created.iter().collect::<HashSet<_>>().len(), 7);
    let all = sorted(&["n1", "n2", "n3", "n4", "n5", "n6", "n7"]);
    assert_eq!(walk(&api, "/v1/nodes?sort_key=name").0, all);
    let mut reversed = all.clone();
    reversed.reverse();
    assert_eq!(walk(&api, "/v1/nodes/detail?sort_key=name&sort_dir=desc").0, reversed);
    assert_eq!(
        walk(&api, "/v1/nodes?driver=fake&sort_key=name").0,
        sorted(&["n1", "n3", "n5", "n6", "n7"])
    );
    assert_eq!(walk(&api, "/v1/nodes?maintenance=false&sort_key=name&limit=2").0.len(), 6);
    assert_eq!(walk(&api, "/v1/nodes?maintenance=true").0, sorted(&["n6"]));
    // Ties on the key (two drivers over seven nodes) are broken by UUID: every node once.
    let by_driver = walk(&api, "/v1/nodes?sort_key=driver&limit=2").0;
    assert_eq!(by_driver.iter().collect::<HashSet<_>>().len(), 7, "{by_driver:?}");
    let last_two: HashSet<&str> = by_driver[5..].iter().map(String::as_str).collect();
    assert_eq!(last_two, HashSet::from(["n2", "n4"]), "fake sorts before fake-hardware");
    // A key that is not a column (sorted over every node): the same pages and links.
    let by_interface = walk(&api, "/v1/nodes?sort_key=network_interface").0;
    assert_eq!(by_interface.iter().collect::<HashSet<_>>().len(), 7, "{by_interface:?}");

    // Fields still apply to a page; an unknown marker is Ironic's 400.
    let (_, fields) = api.v("GET", "/v1/nodes?fields=name&sort_key=name", None);
    assert_eq!(fields["nodes"][0], json!({"name": "n1", "links": fields["nodes"][0]["links"]}));
    let (status, body) =
        api.v("GET", "/v1/nodes?marker=2f7b6a8e-2a4d-4bb8-9a51-0f5b8fbd0001", None);
    assert!(status == 400 && fault(&body).contains("could not be found"), "{body}");
    assert_eq!(api.v("GET", "/v1/nodes?sort_key=name&limit=x", None).0, 400);
}

#[test]
fn a_port_by_address_is_found_in_any_spelling_of_the_mac_and_with_its_node_filter() {
    let api = Api::start(false);
    let (node_a, port_a) = super::compat::node_with_port(&api, "pa-n1", "52:54:00:d2:00:01");
    let (node_b, _) = super::compat::node_with_port(&api, "pa-n2", "52:54:00:d2:00:02");
    let found = |path: &str| {
        let (status, body) = api.v("GET", path, None);
        assert_eq!(status, 200, "{path}: {body}");
        body["ports"].as_array().unwrap().iter().map(|p| p["uuid"].clone()).collect::<Vec<_>>()
    };
    // The stored form, another spelling of the same MAC, and the detail view: the one port.
    for path in [
        "/v1/ports?address=52:54:00:d2:00:01",
        "/v1/ports?address=52-54-00-D2-00-01",
        "/v1/ports/detail?address=52:54:00:d2:00:01",
    ] {
        assert_eq!(found(path), vec![json!(port_a)], "{path}");
    }
    // With the port's own node, found; with another node, or an address nobody has: none.
    assert_eq!(
        found(&format!("/v1/ports?address=52:54:00:d2:00:01&node={node_a}")),
        vec![json!(port_a)]
    );
    assert!(found(&format!("/v1/ports?address=52:54:00:d2:00:01&node={node_b}")).is_empty());
    assert!(found("/v1/ports?address=52:54:00:d2:00:99").is_empty());
    let (status, body) = api.v("GET", "/v1/ports?address=not-a-mac", None);
    assert!(status == 400 && fault(&body).contains("address"), "{body}");
}
