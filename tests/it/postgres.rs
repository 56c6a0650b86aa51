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
    // A chassis, and a port group with a port in it: the new tables are copied, parents first.
    {
        let db = bootvol_db::Db::open(&single.path("bootvol.db")).unwrap();
        let record = db.node_records().unwrap().into_iter().find(|r| !r.ports.is_empty()).unwrap();
        let chassis = "1be26c0b-03f2-4d2e-ae87-c02d7f33c001";
        let spec = bootvol_core::model::groups::ChassisSpec::default();
        db.create_chassis(chassis, &spec).unwrap();
        let group = "1be26c0b-03f2-4d2e-ae87-c02d7f33c002";
        let group_spec = bootvol_core::model::groups::PortgroupSpec::default();
        db.write_portgroup(group, &record.node.uuid, &group_spec, false).unwrap();
        let port = &record.ports[0];
        let port_spec = bootvol_core::inventory::ChildSpec::parse(
            bootvol_core::model::ChildKind::Port,
            &serde_json::json!({"address": port.address.to_string()}),
        )
        .unwrap();
        db.write_port_in_portgroup(&port.uuid, &record.node.uuid, &port_spec, true, Some(group))
            .unwrap();
    }
    let target = tempfile::tempdir().unwrap();
    let url = postgres_url(&admin, target.path());
    let from = single.path("bootvol.db");
    let report =
        single.ok(&["migrate-to-postgres", "--from", from.to_str().unwrap(), "--to", &url]);
    assert!(report.contains("every table checked"), "{report}");
    for table in ["nodes ", "chassis ", "portgroups "] {
        let copied = report.lines().any(|l| l.starts_with(table) && !l.contains(" 0 rows"));
        assert!(copied, "{table}: {report}");
    }
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
    let specs = bootvol_core::inventory::parse(
        &std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap(),
        bootvol_core::inventory::Format::Json,
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
                    let uuid = bootvol_core::model::new_uuid();
                    db.create_node(&uuid, &spec, bootvol_core::model::ProvisionState::Available)
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

/// `sslmode=require` with `ca_file`: the server's certificate is checked against the CA (and the
/// host name) by rustls; another CA is refused. The suite's server gets TLS turned on for this
/// (`ALTER SYSTEM`, plain connections still work), so it runs only as root on a local server
/// reached over its socket (as CI runs it); on the PostgreSQL pass with
/// `BOOTVOL_REQUIRE_POSTGRES=1`, anything else fails rather than skips.
#[test]
#[allow(clippy::disallowed_methods)] // tests run tools
fn tls_with_ca_file_checks_the_server_certificate() {
    let Some(admin) = test_database_url() else { return };
    // On the suite's PostgreSQL pass, under BOOTVOL_REQUIRE_POSTGRES=1 (CI), a skip is a failure.
    let skip = |why: &str| crate::skip::skip(crate::skip::POSTGRES, why);
    let Some(port) = admin.strip_prefix("postgres://postgres@%2F").and_then(|rest| {
        rest.split(':').nth(1).and_then(|p| p.split('/').next()).map(str::to_owned)
    }) else {
        return skip("needs the suite's server over its socket");
    };
    if !nix::unistd::geteuid().is_root() {
        return skip("needs root (the server's key is handed to the postgres user)");
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(d).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    for ca in ["ca", "other"] {
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=bootvol test {ca}"),
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.pem"),
        ]);
    }
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(d.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
    ]);
    let user = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    for file in ["server.pem", "server.key"] {
        nix::unistd::chown(&d.join(file), Some(user.uid), Some(user.gid)).unwrap();
    }
    std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        d.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let psql = |sql: &str| {
        let out =
            std::process::Command::new("psql").arg(&admin).args(["-qAtc", sql]).output().unwrap();
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    };
    psql(&format!("ALTER SYSTEM SET ssl_cert_file = '{}'", d.join("server.pem").display()));
    psql(&format!("ALTER SYSTEM SET ssl_key_file = '{}'", d.join("server.key").display()));
    psql("ALTER SYSTEM SET ssl = on");
    psql("SELECT pg_reload_conf()");
    // The reload is asynchronous: wait until the server says TLS is on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let out = std::process::Command::new("psql")
            .arg(&admin)
            .args(["-qAtc", "SHOW ssl"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).trim() == "on" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "ssl never on after the reload");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let db = tempfile::tempdir().unwrap();
    let name = postgres_url(&admin, db.path()).rsplit('/').next().unwrap().to_owned();
    let config = |ca: &str| {
        let (ca, port, name) = (d.join(ca), port.clone(), name.clone());
        Appliance::with_config(move |_| {
            sqlite_config(Path::new("/nonexistent")).replace(
                "path = \"/nonexistent/bootvol.db\"",
                &format!(
                    "url = \"postgres://postgres@localhost:{port}/{name}?sslmode=require\"\nca_file = \"{}\"",
                    ca.display()
                ),
            )
        })
    };
    let trusted = config("ca.pem");
    assert!(
        trusted
            .ok(&["check-config"])
            .contains("TLS required, server certificate checked against ca_file")
    );
    assert!(trusted.ok(&["export"]).contains("\"nodes\""));
    let untrusted = config("other.pem").fails(&["export"]);
    assert!(untrusted.to_lowercase().contains("certificate"), "{untrusted}");
    psql("ALTER SYSTEM RESET ssl");
    psql("ALTER SYSTEM RESET ssl_cert_file");
    psql("ALTER SYSTEM RESET ssl_key_file");
    psql("SELECT pg_reload_conf()");
}

/// What a fake server that declines TLS received: it answers `N` to the SSLRequest and, to
/// whatever follows, `AuthenticationCleartextPassword`, as a downgrading host on the path would.
/// Stopped and joined with the test (the third value).
fn declining_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<u8>>>, crate::support::Background)
{
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&received);
    let (addr, server) = crate::support::Background::serve(
        "the declining server",
        |listener, shutdown| async move {
            let connections = tokio_util::task::TaskTracker::new();
            loop {
                let (stream, _) = tokio::select! {
                    () = shutdown.cancelled() => break,
                    accepted = listener.accept() => accepted?,
                };
                let (seen, shutdown) = (std::sync::Arc::clone(&seen), shutdown.clone());
                connections.spawn(async move {
                    tokio::select! {
                        () = shutdown.cancelled() => {}
                        () = decline(stream, seen) => {}
                    }
                });
            }
            connections.close();
            connections.wait().await;
            Ok(())
        },
    );
    (addr.port(), received, server)
}

/// One connection of [`declining_server`]: everything read is kept in `seen`.
async fn decline(
    mut stream: tokio::net::TcpStream,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = [0u8; 4096];
    let mut read = async |stream: &mut tokio::net::TcpStream| -> Option<Vec<u8>> {
        let wait = std::time::Duration::from_secs(10);
        let n = tokio::time::timeout(wait, stream.read(&mut buf)).await.ok()?.ok()?;
        (n > 0).then_some(())?;
        seen.lock().unwrap().extend_from_slice(&buf[..n]);
        Some(buf[..n].to_vec())
    };
    let Some(first) = read(&mut stream).await else { return };
    // SSLRequest: length 8, code 80877103.
    if first.get(4..8) == Some(&80_877_103u32.to_be_bytes()[..])
        && (stream.write_all(b"N").await.is_err() || read(&mut stream).await.is_none())
    {
        return;
    }
    // Whatever the startup message said: "send me your password in clear text".
    let _ = stream.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).await;
    while read(&mut stream).await.is_some() {}
}

/// `ca_file` without `sslmode`: TLS is required, so a server (or a host on the path) that
/// declines TLS and asks for a cleartext password is refused before any password leaves;
/// `check-config` says TLS is required. A password without `ca_file` over TCP is refused by the
/// configuration, so it never goes out in clear text. No real server can be made to decline
/// TLS and ask for a cleartext password in mid-handshake at will; the fake speaks exactly the
/// protocol's bytes for it, and bootvol's real client talks to it.
#[test]
fn ca_file_requires_tls_and_no_password_goes_out_in_clear() {
    let (port, received, _server) = declining_server();
    const SECRET: &str = "pg-secret-never-in-clear";
    let with = |extra: &str| {
        let extra = extra.to_owned();
        Appliance::with_config(move |dir| {
            std::fs::write(dir.join("pgpass"), format!("{SECRET}\n")).unwrap();
            std::fs::write(dir.join("ca.pem"), TEST_CA).unwrap();
            sqlite_config(Path::new("/nonexistent")).replace(
                "path = \"/nonexistent/bootvol.db\"",
                &format!(
                    "url = \"postgres://bootvol@127.0.0.1:{port}/bootvol{extra}\"\n\
                     password_file = \"{}\"\nca_file = \"{}\"",
                    dir.join("pgpass").display(),
                    dir.join("ca.pem").display()
                ),
            )
        })
    };
    for extra in ["", "?sslmode=prefer", "?sslmode=require"] {
        let refused = with(extra).fails(&["export"]);
        let bytes = received.lock().unwrap().clone();
        assert!(!bytes.is_empty(), "bootvol never reached the fake server");
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(SECRET), "{extra}: the password went out in clear text: {text:?}");
        assert!(refused.to_lowercase().contains("tls"), "{extra}: {refused}");
        let said = with(extra).ok(&["check-config"]);
        assert!(
            said.contains("TLS required, server certificate checked against ca_file"),
            "{extra}: {said}"
        );
    }
    // `sslmode=disable` with a ca_file contradicts it: refused, naming the keys.
    let contradiction = with("?sslmode=disable").fails(&["check-config"]);
    assert!(contradiction.contains("ca_file"), "{contradiction}");
    // A password without ca_file over TCP: refused, nothing sent.
    let before = received.lock().unwrap().len();
    let plain = Appliance::with_config(move |dir| {
        std::fs::write(dir.join("pgpass"), format!("{SECRET}\n")).unwrap();
        sqlite_config(Path::new("/nonexistent")).replace(
            "path = \"/nonexistent/bootvol.db\"",
            &format!(
                "url = \"postgres://bootvol@127.0.0.1:{port}/bootvol\"\npassword_file = \"{}\"",
                dir.join("pgpass").display()
            ),
        )
    });
    let refused = plain.fails(&["export"]);
    assert!(refused.contains("password_file") && refused.contains("ca_file"), "{refused}");
    assert_eq!(received.lock().unwrap().len(), before, "nothing was sent to the server");
    let text = String::from_utf8_lossy(&received.lock().unwrap()).into_owned();
    assert!(!text.contains(SECRET), "{text:?}");
}

/// A CA certificate (any will do: the fake server never gets as far as presenting one).
const TEST_CA: &str = include_str!("../fixtures/tls/test-ca.pem");

#[test]
fn instances_starting_together_on_an_empty_database_migrate_it_once() {
    if !on_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    crate::support::database(dir.path()); // the empty database, created once
    let openers: Vec<_> = (0..4)
        .map(|_| {
            let dir = dir.path().to_owned();
            std::thread::spawn(move || crate::support::open_db(&dir).schema_version().unwrap())
        })
        .collect();
    let versions: Vec<i64> = openers.into_iter().map(|o| o.join().unwrap()).collect();
    assert!(versions.windows(2).all(|w| w[0] == w[1]), "{versions:?}");
}
