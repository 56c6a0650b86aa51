//! `GET /report/<mac>` on the boot listener of `app::serve`, with a real HTTP client: what is
//! accepted and refused, the per-client budget, the counters, the events written and the node
//! left as it was.

use std::time::{Duration, Instant};

use bootvol_core::config::Config;
use bootvol_core::inventory::{self, Format};
use bootvol_db::Db;

use crate::support::{config_text, fixture};

/// Status and body of a GET.
fn get(url: &str) -> (u16, String) {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut response = agent.get(url).call().expect("an HTTP answer");
    let body = response.body_mut().read_to_string().unwrap_or_default();
    (response.status().as_u16(), body)
}

/// Polls `check` for up to 10 s.
fn eventually<T>(mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn reports_of_known_macs_are_recorded_bounded_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_toml(&config_text(dir.path()), "test").unwrap();
    let inventory = std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap();
    let specs = inventory::parse(&inventory, Format::Json, &config).unwrap();
    let mut db = Db::open_config(&config.database).unwrap();
    db.apply_inventory(&specs, false).unwrap();
    let before = serde_json::to_value(db.node_record("iscsi-chap").unwrap().unwrap()).unwrap();
    let (bound, _serve) = crate::support::serve_guarded(config, false);
    let boot = format!("http://{}", bound.boot);
    let report = |query: &str| get(&format!("{boot}/report/52-54-00-00-01-01?{query}"));

    assert_eq!(report("stage=script"), (200, "ok\n".to_owned()));
    assert_eq!(report("stage=sanhook-failed&err=0x410d613c").0, 200);
    // Any of the node's MACs, in any common form.
    assert_eq!(get(&format!("{boot}/report/52:54:00:00:01:02?stage=sanhook")).0, 200);
    // A MAC of no node: answered as a node's is (no oracle), recorded nowhere, the budget spent.
    assert_eq!(get(&format!("{boot}/report/52-54-00-de-ad-01?stage=script")), (200, "ok\n".into()));
    // Refused: not a MAC, a stage or a query out of shape, an unexpanded errno.
    assert_eq!(get(&format!("{boot}/report/nobody?stage=script")).0, 400);
    assert_eq!(get(&format!("{boot}/report/52-54-00-00-01-01/x?stage=script")).0, 404);
    for query in [
        "stage=booted",
        "",
        "stage=script&stage=script",
        "stage=sanhook-failed&err=${errno}",
        "stage=sanhook-failed&err=0x1ffffffff",
        &format!("stage=script&pad={}", "x".repeat(100)),
    ] {
        assert_eq!(report(query).0, 400, "{query:?}");
    }
    // The client's budget: 30 reports a minute, the four above among them.
    let mut accepted = 4;
    while report("stage=script").0 == 200 {
        accepted += 1;
        assert!(accepted <= 30, "more than the budget accepted");
    }
    assert_eq!(accepted, 30);
    assert_eq!(report("stage=script").0, 429);

    let scrape = || get(&format!("http://{}/metrics", bound.api)).1;
    let lines = [
        "bootvol_boot_reports_total{stage=\"script\",result=\"ok\"} 27",
        "bootvol_boot_reports_total{stage=\"sanhook\",result=\"ok\"} 1",
        "bootvol_boot_reports_total{stage=\"sanhook-failed\",result=\"failed\"} 1",
        "bootvol_boot_reports_total{stage=\"kernel-failed\",result=\"failed\"} 0",
        "bootvol_boot_reports_dropped_total{reason=\"limited\"} 2",
        "bootvol_boot_reports_dropped_total{reason=\"queue_full\"} 0",
        "bootvol_http_requests_total{route=\"/report/\",status=\"429\"} 2",
    ];
    let text = scrape();
    for line in lines {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
    }

    let uuid = before["node"]["uuid"].as_str().unwrap().to_owned();
    let db = Db::open_config(&crate::support::config(dir.path()).database).unwrap();
    let reports = eventually(|| {
        let events = db.events(Some(&uuid), 1000).unwrap();
        let reports: Vec<serde_json::Value> = events
            .into_iter()
            .filter(|e| e.event_type == "baremetal.node.boot_reported")
            .map(|e| serde_json::json!({"level": e.level, "payload": e.payload}))
            .collect();
        (reports.len() == 29).then_some(reports)
    })
    .expect("29 report events: the unknown MAC's is not one");
    let failed = &reports[1];
    assert_eq!(failed["level"], "warning");
    let payload = &failed["payload"];
    assert_eq!(payload["stage"], "sanhook-failed");
    assert_eq!(payload["err"], "0x410d613c");
    assert_eq!(payload["error"], "Operation not permitted (iSCSI login)");
    assert_eq!(
        payload["message"],
        "sanhook failed: 0x410d613c Operation not permitted (iSCSI login)"
    );
    assert_eq!(payload["error_url"], "https://ipxe.org/err/410d613c");
    // From loopback: no neighbour entry names one of the node's MACs.
    assert_eq!(payload["client"], "127.0.0.1");
    assert_eq!(payload["from_neighbour"], false);
    assert_eq!(reports[0]["level"], "info");
    assert_eq!(reports[0]["payload"]["err"], serde_json::Value::Null);
    assert_eq!(reports[2]["payload"]["mac"], "52:54:00:00:01:02");
    // A claim from the network changes no node.
    let after = serde_json::to_value(db.node_record("iscsi-chap").unwrap().unwrap()).unwrap();
    assert_eq!(before, after);
}

/// `/report` is no oracle of which MACs are nodes: a MAC of no node gets a node's answer (status
/// and body), spends the same budget, and past it the same 429; nothing is recorded for it.
#[test]
fn report_answers_do_not_tell_which_macs_are_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_toml(&config_text(dir.path()), "test").unwrap();
    let inventory = std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap();
    let specs = inventory::parse(&inventory, Format::Json, &config).unwrap();
    Db::open_config(&config.database).unwrap().apply_inventory(&specs, false).unwrap();
    let (bound, _serve) = crate::support::serve_guarded(config, false);
    let boot = format!("http://{}", bound.boot);
    let node = |query: &str| get(&format!("{boot}/report/52-54-00-00-01-01?{query}"));
    let nobody = |query: &str| get(&format!("{boot}/report/52-54-00-de-ad-02?{query}"));
    assert_eq!(nobody("stage=script"), node("stage=script"));
    assert_eq!(nobody("stage=sanhook-failed&err=0x410d613c"), (200, "ok\n".to_owned()));
    assert_eq!(nobody("stage=booted"), node("stage=booted"), "the same 400");
    // The budget of 30 is shared: spent on no node's MAC, the node's report is limited too.
    for i in 3..30 {
        assert_eq!(nobody("stage=script").0, 200, "report {i}");
    }
    assert_eq!(node("stage=script"), (429, "too many reports\n".to_owned()));
    assert_eq!(nobody("stage=script"), (429, "too many reports\n".to_owned()));
    let scrape = get(&format!("http://{}/metrics", bound.api)).1;
    assert!(
        scrape.lines().any(|l| l == "bootvol_boot_reports_total{stage=\"script\",result=\"ok\"} 1"),
        "only the node's one report counted\n{scrape}"
    );
}
