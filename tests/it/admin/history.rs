//! The rack-wide history (`/admin/events`) over HTTP with a real client: every node's events
//! newest first, filtered by node (name, UUID, MAC in another form), type, level and time,
//! paged with links that keep the filter; secrets in payloads masked; bad filter values said
//! on the page (400, never a 500); linked from the layout and from each node's page.

use super::*;

/// Two nodes (`ev-a`, `ev-b`, one port each) and their events: 120 ticks of `ev-a`, then five
/// failures of `ev-b`, then an event of `ev-b` with secrets in its payload (masked when stored;
/// on SQLite also written raw, unmasked, as an older bootvol or a hand might have).
fn seed_events(admin: &Admin) -> (String, String) {
    let nodes = serde_json::json!({"nodes": [
        {"name": "ev-a", "driver": "fake", "ports": [{"address": "52:54:00:20:00:01"}]},
        {"name": "ev-b", "driver": "fake", "ports": [{"address": "52:54:00:20:00:02"}]}]});
    let config = Config::from_toml(&config_text(admin._dir.path()), "test").unwrap();
    let specs = bootvol_core::inventory::parse(
        &nodes.to_string(),
        bootvol_core::inventory::Format::Json,
        &config,
    )
    .unwrap();
    let mut db = crate::support::open_db(admin._dir.path());
    db.apply_inventory(&specs, false).unwrap();
    let a = db.node_record("ev-a").unwrap().unwrap().node.uuid;
    let b = db.node_record("ev-b").unwrap().unwrap().node.uuid;
    for i in 0..120 {
        db.add_event(Some(&a), "test.tick", "info", &serde_json::json!({"i": i})).unwrap();
    }
    for i in 0..5 {
        let payload = serde_json::json!({"message": format!("boom {i}")});
        db.add_event(Some(&b), "test.failure", "error", &payload).unwrap();
    }
    let secret = serde_json::json!({"auth_password": "hunter2-event-secret",
        "nested": {"chap_secret": "inner-event-secret"}, "user": "visible-user"});
    db.add_event(Some(&b), "test.secret", "warning", &secret).unwrap();
    let file = admin._dir.path().join("bootvol.db");
    if file.exists() {
        let raw = rusqlite::Connection::open(file).unwrap();
        raw.execute(
            "INSERT INTO events (node_uuid, event_type, level, payload) VALUES (?1, 'test.secret', 'warning', ?2)",
            rusqlite::params![b, secret.to_string()],
        )
        .unwrap();
    }
    (a, b)
}

/// How many event rows a page lists (each links its node in its own cell).
fn rows(body: &str) -> usize {
    body.matches("<td><a href=\"/admin/nodes/").count()
}

/// The `href` of the link whose text is `text`, unescaped.
fn link(body: &str, text: &str) -> Option<String> {
    let end = body.find(&format!(">{text}</a>"))?;
    let tag = &body[body[..end].rfind("<a ")?..end];
    let start = tag.find("href=\"")? + 6;
    let href = &tag[start..start + tag[start..].find('"')?];
    Some(href.replace("&amp;", "&").replace("&#x2f;", "/"))
}

#[test]
fn the_history_of_every_node_filtered_paged_and_masked() {
    let admin = Admin::start();
    assert_eq!(admin.call("GET", "/admin/events", None, &[]).status, 303, "logged-in only");
    let cookie = admin.login(PASSWORD).cookie();
    let (a, b) = seed_events(&admin);
    let get = |path: &str| admin.call("GET", path, None, &[("Cookie", &cookie)]);

    // Newest first, 50 a page, each row linked to its node (named once the boot snapshot
    // knows it: it is rebuilt after the seeding); the layout links here.
    let named = format!("<a href=\"/admin/nodes/{b}\">ev-b</a>");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut first = get("/admin/events");
    while !first.body.contains(&named) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        first = get("/admin/events");
    }
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(first.body.contains("href=\"/admin/events\""), "the layout's navigation");
    assert_eq!(rows(&first.body), 50);
    let table = &first.body[first.body.find("id=\"event-list\"").unwrap()..];
    assert!(table.find("test.secret").unwrap() < table.find("test.failure").unwrap());
    assert!(first.body.contains(&named), "{}", first.body);
    for secret in ["hunter2-event-secret", "inner-event-secret"] {
        assert!(!first.body.contains(secret), "a secret on the page: {secret}");
    }
    assert!(first.body.contains("visible-user") && first.body.contains("******"));

    // By node: its name, a MAC as a switch prints it, its UUID: the same events, its only.
    let by_name = get("/admin/events?node=ev-b");
    let by_mac = get("/admin/events?node=5254.0020.0002");
    let by_uuid = get(&format!("/admin/events?node={b}"));
    for page in [&by_name, &by_mac, &by_uuid] {
        assert_eq!(page.status, 200, "{}", page.body);
        assert_eq!(rows(&page.body), rows(&by_name.body));
        assert!(!page.body.contains(&format!("/admin/nodes/{a}\">")), "only ev-b's events");
    }
    let expected = if admin._dir.path().join("bootvol.db").exists() { 7 } else { 6 };
    assert_eq!(rows(&by_name.body), expected, "five failures and the secrets");
    assert_eq!(rows(&get("/admin/events?node=52-54-00-20-00-01&per=500").body), 120);

    // By type and by level.
    assert_eq!(rows(&get("/admin/events?type=test.failure").body), 5);
    assert_eq!(rows(&get("/admin/events?level=error").body), 5);
    assert_eq!(rows(&get("/admin/events?level=warning&node=ev-a").body), 0);

    // By time: today is all of them, a day in the past none.
    let today = bootvol_core::timefmt::format_unix(bootvol_core::timefmt::now_unix());
    let today = &today[..10];
    let all_today = get(&format!("/admin/events?since={today}&per=500"));
    assert_eq!(rows(&all_today.body), 120 + expected);
    let past = get("/admin/events?until=2000-01-01");
    assert_eq!((past.status, rows(&past.body)), (200, 0));
    assert!(past.body.contains("No events match this filter."), "{}", past.body);

    // Pages: older and newer keep the filter; newer from the second page is the first again.
    let page1 = get("/admin/events?node=ev-a&per=100");
    assert_eq!(rows(&page1.body), 100);
    let older = link(&page1.body, "Older →").expect("an older page");
    assert!(older.contains("node=ev-a") && older.contains("per=100") && older.contains("before="));
    let page2 = get(&older);
    assert_eq!(rows(&page2.body), 20);
    assert!(link(&page2.body, "Older →").is_none(), "the last page");
    let newer = link(&page2.body, "← Newer").expect("a newer page");
    assert!(newer.contains("node=ev-a") && newer.contains("after="), "{newer}");
    let back = get(&newer);
    assert_eq!(rows(&back.body), 100);
    assert!(back.body.contains("i=119") && link(&back.body, "← Newer").is_none());

    // Bad values: said on the page, with the form kept; never a 500.
    for (query, says) in [
        ("level=loud", "Level \"loud\" is not one of info, warning, error."),
        ("since=yesterday", "Since \"yesterday\" is not a time"),
        ("until=2026-13-40", "Until \"2026-13-40\" is not a time"),
        ("node=nobody-here", "No node is named \"nobody-here\""),
        ("node=52:54:00:99:99:99", "No node has a port with the MAC 52:54:00:99:99:99."),
        ("per=7", "Rows a page \"7\": choose 50, 100 or 500."),
        ("type=%3Cscript%3E", "is not an event type"),
        ("before=abc", "is not an event id"),
        ("since=2026-12-04&until=2026-12-03", "Since is after until"),
    ] {
        let page = get(&format!("/admin/events?{query}"));
        assert_eq!(page.status, 400, "{query}: {}", page.body);
        let said = says.replace('"', "&quot;").replace('/', "&#x2f;");
        assert!(page.body.contains(&said), "{query}: {}", page.body);
        assert!(page.body.contains("id=\"event-filter\""), "{query}: the form is shown");
        assert_eq!(rows(&page.body), 0);
    }

    // Each node's page links to its own events here.
    let node = get("/admin/nodes/ev-a");
    let node = node.body.replace("&#x2f;", "/");
    assert!(node.contains("href=\"/admin/events?node=ev-a\""), "{node}");
}
