//! What only the PostgreSQL engine does, run when `BOOTVOL_TEST_DATABASE_URL` names a server
//! (skipped otherwise): `bootvol migrate-to-postgres` moves a single box's SQLite data and
//! checks it, and `seq` of the change log follows commit order under concurrent writers.

use std::path::Path;

use crate::support::{Appliance, fixture, on_postgres, postgres_url, test_database_url};

/// A configuration on the SQLite file of `dir`, whatever the suite's engine.
fn sqlite_config(dir: &Path) -> String {
    format!(
        "[DEFAULT]\nenabled_storage_interfaces = [\"noop\", \"external\", \"cinder\"]\n\
         [database]\npath = \"{}\"\n[http]\npublic_url = \"http://192.0.2.10:8080\"\n\
         [cinder]\nurl = \"http://127.0.0.1:8776/v3\"\n",
        dir.join("bootvol.db").display()
    )
}

#[test]
fn migrate_to_postgres_copies_every_table_and_checks_it() {
    let Some(admin) = test_database_url() else { return };
    let single = Appliance::with_config(sqlite_config);
    single.ok(&["apply", fixture("inventory/scenarios.json").to_str().unwrap()]);
    let target = tempfile::tempdir().unwrap();
    let url = postgres_url(&admin, target.path());
    let from = single.path("bootvol.db");
    let report =
        single.ok(&["migrate-to-postgres", "--from", from.to_str().unwrap(), "--to", &url]);
    assert!(report.contains("every table checked"), "{report}");
    assert!(report.lines().any(|l| l.starts_with("nodes ") && !l.contains(" 0 rows")), "{report}");
    // The same inventory, events and scripts from the PostgreSQL database.
    let cluster = Appliance::with_config(|_| {
        sqlite_config(Path::new("/nonexistent"))
            .replace("path = \"/nonexistent/bootvol.db\"", &format!("url = \"{url}\""))
    });
    assert_eq!(cluster.ok(&["export"]), single.ok(&["export"]));
    assert_eq!(cluster.ok(&["events"]), single.ok(&["events"]));
    for mac in ["52:54:00:00:01:01", "52:54:00:00:02:01"] {
        assert_eq!(cluster.ok(&["render", "--mac", mac]), single.ok(&["render", "--mac", mac]));
    }
    // New rows continue after the copied ids: the first event written on PostgreSQL.
    let last_id = |events: &str| events.lines().count();
    let copied = last_id(&cluster.ok(&["events"]));
    cluster.ok(&["sync"]);
    assert!(last_id(&cluster.ok(&["events"])) >= copied);
    // A second migration into the now used database is refused.
    let again =
        single.fails(&["migrate-to-postgres", "--from", from.to_str().unwrap(), "--to", &url]);
    assert!(again.contains("already holds data"), "{again}");
}

#[test]
fn change_seq_follows_commit_order_under_concurrent_writers() {
    if !on_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::config(dir.path());
    let specs = bootvol::inventory::parse(
        &std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap(),
        bootvol::inventory::Format::Json,
        &config,
    )
    .unwrap();
    let before = crate::support::open_db(dir.path()).change_seq().unwrap();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (dir, specs) = (dir.path().to_owned(), specs.clone());
            std::thread::spawn(move || {
                let db = crate::support::open_db(&dir);
                for (i, spec) in specs.iter().take(5).enumerate() {
                    let mut spec = spec.clone();
                    spec.name = format!("w{w}-{i}");
                    spec.ports.clear();
                    spec.volume_connectors.clear();
                    spec.volume_targets.clear();
                    let uuid = bootvol::model::new_uuid();
                    db.create_node(&uuid, &spec, bootvol::model::ProvisionState::Available)
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let db = crate::support::open_db(dir.path());
    let changes = db.changes_since(before, 1000).unwrap().expect("nothing pruned");
    assert_eq!(changes.len(), 20);
    let seqs: Vec<i64> = changes.iter().map(|c| c.seq).collect();
    let expected: Vec<i64> = (before + 1..=before + 20).collect();
    assert_eq!(seqs, expected, "no gap: a reader at any seq misses nothing");
    assert_eq!(db.change_seq().unwrap(), before + 20);
}
