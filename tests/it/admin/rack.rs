//! The nodes list over a whole rack, over HTTP with a real client: pages of 50, 100 or 500, and
//! an action on every node a filter matches across pages, confirmed for exactly that set.

use super::*;

/// The value of the hidden field `name` in a page.
fn hidden(body: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = body.find(&marker).unwrap_or_else(|| panic!("no {name} in {body}")) + marker.len();
    let end = start + body[start..].find('"').unwrap();
    body[start..end].to_owned()
}

fn in_maintenance(admin: &Admin, name: &str) -> bool {
    stored(admin, name).node.maintenance
}

/// `per=100` shows 100 rows; "all matching" (`scope=all`) acts on every node of `q=rack-1`
/// (rack-100..rack-199, two pages of 50) only once confirmed: no confirm, no change; a set that
/// changed since the confirmation (one node more) is refused with nothing done; a tampered
/// digest too; the confirmation of the set as it is acts on every one of them, no other.
#[test]
fn an_action_on_all_nodes_a_filter_matches_across_pages() {
    let admin = Admin::start();
    let cookie = admin.login(PASSWORD).cookie();
    seed_rack(&admin);
    let get = |path: &str| admin.call("GET", path, None, &[("Cookie", &cookie)]);

    let list = get("/admin/?q=rack-1");
    assert!(list.body.contains("1–50 of 100 (of 500 nodes)"), "{}", list.body);
    assert!(list.body.contains("Apply to all 100 matching"), "{}", list.body);
    let hundred = get("/admin/?q=rack-1&per=100");
    assert_eq!(hundred.body.matches("name=\"node\" value=").count(), 100);
    assert!(hundred.body.contains("1–100 of 100"), "{}", hundred.body);
    let all = get("/admin/?per=500");
    assert_eq!(all.body.matches("name=\"node\" value=").count(), 500);
    let odd = get("/admin/?per=7");
    assert_eq!(odd.body.matches("name=\"node\" value=").count(), 50, "only 50, 100 or 500");
    let csrf = list.csrf();

    let bulk = |extra: &[(&str, &str)]| {
        let mut fields =
            vec![("scope", "all"), ("action", "maintenance on"), ("back", "/admin/?q=rack-1")];
        fields.extend_from_slice(extra);
        post(&admin, &cookie, &csrf, "/admin/bulk", &fields)
    };
    // No confirm: the confirmation, naming the count and the nodes; nothing done.
    let asked = bulk(&[]);
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(asked.body.contains("Maintenance on all 100 matching node(s)"), "{}", asked.body);
    assert!(asked.body.contains("rack-100, rack-101") && asked.body.contains("rack-199."));
    assert!(!asked.body.contains("rack-200"), "only the matching nodes are listed");
    let (count, digest) = (hidden(&asked.body, "count"), hidden(&asked.body, "digest"));
    assert_eq!(count, "100");
    assert!(!in_maintenance(&admin, "rack-150"), "nothing done before the confirmation");

    // A tampered digest: refused.
    let tampered = bulk(&[("count", "100"), ("digest", "00"), ("confirm", "100")]);
    assert_eq!(tampered.status, 409, "{}", tampered.body);
    assert!(!in_maintenance(&admin, "rack-150"));

    // The set changes before the confirmation comes back: refused, nothing done.
    let made = post(&admin, &cookie, &csrf, "/admin/nodes", &[("name", "rack-1extra")]);
    assert_eq!(made.status, 303, "{}", made.body);
    let stale = bulk(&[("count", &count), ("digest", &digest), ("confirm", &count)]);
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert!(stale.body.contains("changed since the confirmation was shown (100 then, 101 now)"));
    for name in ["rack-100", "rack-150", "rack-199", "rack-1extra"] {
        assert!(!in_maintenance(&admin, name), "{name}: nothing done on a changed set");
    }

    // Confirmed for the set as it is: every matching node, on every page, and no other.
    let asked = bulk(&[]);
    let (count, digest) = (hidden(&asked.body, "count"), hidden(&asked.body, "digest"));
    assert_eq!(count, "101");
    let done = bulk(&[("count", &count), ("digest", &digest), ("confirm", &count)]);
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(done.header("location"), Some("/admin/?q=rack-1"));
    for i in 100..200 {
        assert!(in_maintenance(&admin, &format!("rack-{i}")), "rack-{i}");
    }
    assert!(in_maintenance(&admin, "rack-1extra"));
    for name in ["rack-000", "rack-099", "rack-200", "rack-499"] {
        assert!(!in_maintenance(&admin, name), "{name} does not match");
    }
    let after = get("/admin/?maintenance=1");
    assert!(after.body.contains("1–50 of 103"), "101 and rack-007, rack-008: {}", after.body);
    assert!(
        after.body.contains("Maintenance set on 101 node(s)") && after.body.contains("and 81 more")
    );
}
