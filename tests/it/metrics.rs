//! `/healthz`, `/readyz` and `/metrics` on the API listener of `app::serve`, with real HTTP and
//! TFTP clients: no authentication for these three while `/v1/nodes` still needs it, counters
//! equal to what the test caused, no MAC in the text, readiness while the database is broken;
//! and, when Debian's `prometheus` is installed, a real Prometheus scraping them.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bootvol::config::Config;
use bootvol::db::Db;
use bootvol::inventory::{self, Format};
use tokio_util::sync::CancellationToken;

use crate::support::{config_text, fixture};

const USER: &str = "operator";
const PASSWORD: &str = "s3cret-pass";

struct Serve {
    api: String,
    boot: String,
    tftp: SocketAddr,
    shutdown: CancellationToken,
    db_path: std::path::PathBuf,
    binary: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// `serve` with http_basic auth, the scenario inventory (12 nodes, all `active`) and a
/// `[tftp] root` holding `snponly.efi`.
fn start() -> Serve {
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = dir.path().join("htpasswd");
    std::fs::write(&htpasswd, format!("{USER}:{}\n", bcrypt::hash(PASSWORD, 4).unwrap())).unwrap();
    let root = dir.path().join("ipxe");
    std::fs::create_dir_all(&root).unwrap();
    let binary: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(root.join("snponly.efi"), &binary).unwrap();
    let text = format!(
        "{}[api]\nauth_strategy = \"http_basic\"\nhttp_basic_auth_user_file = \"{}\"\n",
        config_text(dir.path()).replace("/usr/lib/ipxe", &root.display().to_string()),
        htpasswd.display()
    );
    let config = Config::from_toml(&text, "test").unwrap();
    let inventory = std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap();
    let specs = inventory::parse(&inventory, Format::Json, &config).unwrap();
    Db::open(&config.database.path).unwrap().apply_inventory(&specs, false).unwrap();
    let db_path = config.database.path.clone();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let http = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let tftp = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
            let api = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            tx.send((api.local_addr()?, http.local_addr()?, tftp.local_addr()?)).unwrap();
            bootvol::app::serve(config, bootvol::app::Listeners { http, tftp, api }, token).await
        })
    });
    let (api, boot, tftp) = rx.recv_timeout(Duration::from_secs(10)).expect("bound");
    let serve = Serve {
        api: format!("http://{api}"),
        boot: format!("http://{boot}"),
        tftp,
        shutdown,
        db_path,
        binary,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&format!("{}/healthz", serve.api)).0 != 200 {
        assert!(Instant::now() < deadline, "the API never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
    serve
}

/// Status, content type and body of a GET without credentials.
fn get(url: &str) -> (u16, String, String) {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    match agent.get(url).call() {
        Ok(mut response) => {
            let kind = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let body = response.body_mut().read_to_string().unwrap_or_default();
            (response.status().as_u16(), kind, body)
        }
        Err(_) => (0, String::new(), String::new()),
    }
}

/// `curl` over TFTP: exit status and bytes.
#[allow(clippy::disallowed_methods)] // tests drive real clients
fn tftp(tftp: SocketAddr, name: &str) -> (i32, Vec<u8>) {
    let output = std::process::Command::new("curl")
        .args(["-s", "--max-time", "10", &format!("tftp://{tftp}/{name}")])
        .output()
        .expect("curl is installed");
    (output.status.code().unwrap_or(-1), output.stdout)
}

fn tftp_get(server: SocketAddr, name: &str) -> Vec<u8> {
    let (status, bytes) = tftp(server, name);
    assert_eq!(status, 0, "tftp {name}");
    bytes
}

/// The boot traffic the counters are checked against.
const KNOWN: usize = 5;
const UNKNOWN: usize = 3;
const GENERIC: usize = 2;

/// Returns the bytes TFTP clients received.
fn boot_traffic(serve: &Serve) -> usize {
    for _ in 0..KNOWN {
        assert_eq!(get(&format!("{}/boot/52-54-00-00-01-01.ipxe", serve.boot)).0, 200);
    }
    for i in 0..UNKNOWN {
        assert_eq!(get(&format!("{}/boot/52-54-00-de-ad-0{i}.ipxe", serve.boot)).0, 404);
    }
    for _ in 0..GENERIC {
        assert_eq!(get(&format!("{}/boot.ipxe", serve.boot)).0, 200);
    }
    assert_eq!(get(&format!("{}/ipxe/snponly.efi", serve.boot)).0, 200);
    let generic = tftp_get(serve.tftp, "boot.ipxe");
    assert_eq!(tftp_get(serve.tftp, "snponly.efi"), serve.binary);
    // curl: 68 = TFTP file not found.
    assert_eq!(tftp(serve.tftp, "boot/52-54-00-de-ad-99.ipxe").0, 68);
    assert_eq!(tftp(serve.tftp, "missing.efi").0, 68);
    generic.len() + serve.binary.len()
}

/// The scrape once `line` is in it: a TFTP transfer is counted when the server reads the last
/// ACK, which may be just after the client is done.
fn scrape_until(serve: &Serve, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, text) = get(&format!("{}/metrics", serve.api));
        assert_eq!(status, 200);
        if text.lines().any(|l| l == line) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const TFTP_DONE: &str = "bootvol_tftp_transfers_total{file_class=\"file\",result=\"refused\"} 1";

/// The sample lines every check below expects after `boot_traffic`.
fn expected_samples(tftp_bytes: usize) -> Vec<String> {
    vec![
        format!("bootvol_boot_scripts_total{{kind=\"node\",transport=\"http\"}} {KNOWN}"),
        format!("bootvol_boot_scripts_total{{kind=\"unknown\",transport=\"http\"}} {UNKNOWN}"),
        format!("bootvol_boot_scripts_total{{kind=\"generic\",transport=\"http\"}} {GENERIC}"),
        "bootvol_boot_scripts_total{kind=\"generic\",transport=\"tftp\"} 1".to_owned(),
        "bootvol_boot_scripts_total{kind=\"refused\",transport=\"http\"} 0".to_owned(),
        format!("bootvol_http_requests_total{{route=\"/boot/\",status=\"200\"}} {KNOWN}"),
        format!("bootvol_http_requests_total{{route=\"/boot/\",status=\"404\"}} {UNKNOWN}"),
        format!("bootvol_http_requests_total{{route=\"/boot.ipxe\",status=\"200\"}} {GENERIC}"),
        "bootvol_http_requests_total{route=\"/ipxe/\",status=\"200\"} 1".to_owned(),
        format!("bootvol_http_request_seconds_count{{route=\"/boot/\"}} {}", KNOWN + UNKNOWN),
        "bootvol_boot_scripts_total{kind=\"unknown\",transport=\"tftp\"} 1".to_owned(),
        "bootvol_tftp_transfers_total{file_class=\"script\",result=\"complete\"} 1".to_owned(),
        "bootvol_tftp_transfers_total{file_class=\"script\",result=\"refused\"} 1".to_owned(),
        "bootvol_tftp_transfers_total{file_class=\"file\",result=\"complete\"} 1".to_owned(),
        TFTP_DONE.to_owned(),
        "bootvol_tftp_transfer_seconds_count{file_class=\"file\"} 2".to_owned(),
        format!("bootvol_tftp_bytes_total {tftp_bytes}"),
        "bootvol_snapshot_generation 1".to_owned(),
        "bootvol_snapshot_rebuild_seconds_count 1".to_owned(),
        "bootvol_nodes{provision_state=\"active\"} 12".to_owned(),
        "bootvol_nodes{provision_state=\"available\"} 0".to_owned(),
        "bootvol_boot_listeners_up 1".to_owned(),
        "bootvol_database_readable 1".to_owned(),
    ]
}

#[test]
fn public_routes_need_no_credentials_and_count_what_the_boots_did() {
    let serve = start();
    assert_eq!(get(&format!("{}/v1/nodes", serve.api)).0, 401, "the API still needs credentials");
    assert_eq!(
        get(&format!("{}/healthz", serve.api)),
        (200, "text/plain; charset=utf-8".into(), "ok\n".into())
    );
    let (status, _, body) = get(&format!("{}/readyz", serve.api));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "ready: boot listeners up, snapshot generation 1\ndatabase: readable\n");

    let tftp_bytes = boot_traffic(&serve);
    let (status, kind, _) = get(&format!("{}/metrics", serve.api));
    assert_eq!(status, 200);
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = scrape_until(&serve, TFTP_DONE);
    for line in expected_samples(tftp_bytes) {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));
    // No identifying label: no MAC in any form, no address, no node name.
    for needle in ["52:54", "52-54", "525400", "127.0.0.1", "iscsi-chap", "de-ad"] {
        assert!(!text.to_lowercase().contains(needle), "{needle} in\n{text}");
    }
    // Scraping is not a boot: the counters did not move.
    let (_, _, again) = get(&format!("{}/metrics", serve.api));
    assert!(again.contains(&format!("route=\"/boot/\",status=\"200\"}} {KNOWN}")));
}

#[test]
fn a_broken_database_is_reported_while_boots_go_on_from_the_snapshot() {
    let serve = start();
    // Garbage over the database file's header, as a failing disk would leave it.
    std::fs::write(&serve.db_path, vec![0xa5u8; 8192]).unwrap();
    let _ = std::fs::remove_file(serve.db_path.with_extension("db-wal"));
    let (status, _, body) = get(&format!("{}/readyz", serve.api));
    assert_eq!(status, 200, "boots are still served: {body}");
    assert!(body.starts_with("ready: "), "{body}");
    assert!(body.contains("database: unreadable ("), "{body}");
    assert_eq!(get(&format!("{}/boot/52-54-00-00-01-01.ipxe", serve.boot)).0, 200);
    let (_, _, text) = get(&format!("{}/metrics", serve.api));
    assert!(text.lines().any(|l| l == "bootvol_database_readable 0"), "{text}");
}

/// A real Prometheus (Debian's package) scrapes `/metrics` and has every family, with the
/// values the boots caused. Skipped without `prometheus` unless `BOOTVOL_REQUIRE_PROMETHEUS=1`.
#[test]
#[allow(clippy::disallowed_methods)] // tests drive real programs
fn a_real_prometheus_scrapes_every_family() {
    let required = std::env::var("BOOTVOL_REQUIRE_PROMETHEUS").is_ok_and(|v| v == "1");
    if !Path::new("/usr/bin/prometheus").exists() {
        assert!(!required, "BOOTVOL_REQUIRE_PROMETHEUS=1 but /usr/bin/prometheus is missing");
        eprintln!("skipped: /usr/bin/prometheus is not installed (apt-get install prometheus)");
        return;
    }
    let serve = start();
    let tftp_bytes = boot_traffic(&serve);
    scrape_until(&serve, TFTP_DONE);
    let work = tempfile::tempdir().unwrap();
    let target = serve.api.trim_start_matches("http://");
    let config = work.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: bootvol\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut prometheus = std::process::Command::new("/usr/bin/prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", work.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(work.path().join("prometheus.log")).unwrap())
        .spawn()
        .expect("prometheus starts");
    let result = std::panic::catch_unwind(|| {
        let query = |q: &str| -> serde_json::Value {
            let url = format!("http://127.0.0.1:{port}/api/v1/query?query={}", encode(q));
            serde_json::from_str(&get(&url).2).unwrap_or(serde_json::Value::Null)
        };
        let value = |q: &str| -> Option<String> {
            let answer = query(q);
            answer["data"]["result"][0]["value"][1].as_str().map(str::to_owned)
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while value("bootvol_boot_scripts_total{kind=\"node\",transport=\"http\"}").is_none() {
            assert!(Instant::now() < deadline, "Prometheus never scraped bootvol");
            std::thread::sleep(Duration::from_millis(250));
        }
        let families = [
            "bootvol_http_requests_total",
            "bootvol_http_request_seconds_bucket",
            "bootvol_boot_scripts_total",
            "bootvol_tftp_transfers_total",
            "bootvol_tftp_transfer_seconds_bucket",
            "bootvol_tftp_bytes_total",
            "bootvol_snapshot_rebuild_seconds_count",
            "bootvol_snapshot_rebuild_failures_total",
            "bootvol_snapshot_generation",
            "bootvol_snapshot_age_seconds",
            "bootvol_nodes",
            "bootvol_boot_listeners_up",
            "bootvol_database_readable",
        ];
        for family in families {
            assert!(value(family).is_some(), "{family} not in Prometheus: {}", query(family));
        }
        let checks = [
            (r#"bootvol_boot_scripts_total{kind="node",transport="http"}"#, KNOWN),
            (r#"bootvol_boot_scripts_total{kind="unknown",transport="http"}"#, UNKNOWN),
            (r#"bootvol_http_requests_total{route="/boot.ipxe",status="200"}"#, GENERIC),
            ("bootvol_tftp_bytes_total", tftp_bytes),
            ("sum(bootvol_nodes)", 12),
            ("bootvol_snapshot_generation", 1),
        ];
        for (q, expected) in checks {
            assert_eq!(value(q), Some(expected.to_string()), "{q}");
        }
    });
    let _ = prometheus.kill();
    let _ = prometheus.wait();
    if let Err(panic) = result {
        let log = std::fs::read_to_string(work.path().join("prometheus.log")).unwrap_or_default();
        eprintln!("prometheus log:\n{log}");
        std::panic::resume_unwind(panic);
    }
}

/// Percent-encodes a PromQL query for a URL.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
