//! `/healthz`, `/readyz` and `/metrics` on the API listener of `app::serve`, with real HTTP and
//! TFTP clients: no authentication for these three while `/v1/nodes` still needs it, counters
//! equal to what the test caused, no MAC in the text, readiness while the database is broken;
//! and, when Debian's `prometheus` is installed, a real Prometheus scraping them.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bootvol_core::config::Config;
use bootvol_core::inventory::{self, Format};
use bootvol_db::Db;

use crate::support::{config_text, fixture};

const USER: &str = "operator";
const PASSWORD: &str = "s3cret-pass";

struct Serve {
    api: String,
    /// `[metrics] listen`: the public routes alone.
    metrics: String,
    /// The ProxyDHCP's socket, on loopback.
    dhcp: SocketAddr,
    boot: String,
    tftp: SocketAddr,
    /// Stops and joins `serve` when the test ends.
    _serve: crate::support::ServeGuard,
    db_path: std::path::PathBuf,
    binary: Vec<u8>,
    _dir: tempfile::TempDir,
}

/// `serve` with http_basic auth, the scenario inventory (12 nodes, all `active`, fake power), a
/// `[tftp] root` holding `snponly.efi`, a `[metrics] listen` listener and the ProxyDHCP on
/// loopback (a free port: no root needed).
fn start() -> Serve {
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = dir.path().join("htpasswd");
    std::fs::write(&htpasswd, format!("{USER}:{}\n", bcrypt::hash(PASSWORD, 4).unwrap())).unwrap();
    let root = dir.path().join("ipxe");
    std::fs::create_dir_all(&root).unwrap();
    let binary: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(root.join("snponly.efi"), &binary).unwrap();
    let dhcp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let text = format!(
        "{}[api]\nauth_strategy = \"http_basic\"\nhttp_basic_auth_user_file = \"{}\"\n\
         [dhcp]\nmode = \"proxy\"\ninterfaces = [\"lo\"]\nlisten = [\"{dhcp}\"]\n",
        config_text(dir.path()).replace("/usr/lib/ipxe", &root.display().to_string()),
        htpasswd.display()
    );
    let config = Config::from_toml(&text, "test").unwrap();
    let inventory = std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap();
    let specs = inventory::parse(&inventory, Format::Json, &config).unwrap();
    Db::open_config(&config.database).unwrap().apply_inventory(&specs, false).unwrap();
    let db_path = config.database.path.clone();
    let (bound, serve) = crate::support::serve_guarded(config, true);
    let (api, boot, tftp) = (bound.api, bound.boot, bound.tftp);
    let metrics = bound.metrics.expect("asked for");
    Serve {
        api: format!("http://{api}"),
        metrics: format!("http://{metrics}"),
        dhcp,
        boot: format!("http://{boot}"),
        tftp,
        _serve: serve,
        db_path,
        binary,
        _dir: dir,
    }
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
    // ProxyDHCP: a DISCOVER that is not a netboot client's (ignored), and one from BIOS PXE
    // firmware (answered, or counted as not sent: loopback has no broadcast).
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for class in [&b"MSFT 5.0"[..], b"PXEClient:Arch:00000:UNDI:002001"] {
        client.send_to(&discover(class), serve.dhcp).unwrap();
    }
    generic.len() + serve.binary.len()
}

/// A power action on a node with the fake driver (one BMC call); returns the scrape once it is
/// counted. The node's change rebuilds the snapshot.
fn power_on(serve: &Serve) -> String {
    assert_eq!(put_power(serve, "iscsi-chap", "power on"), 202);
    scrape_until_all(serve, &[BMC_DONE], String::new())
}

/// A DHCPDISCOVER with option 60 `class` and option 93 = 0 (x86 BIOS).
fn discover(class: &[u8]) -> Vec<u8> {
    let options = vec![(53, vec![1]), (60, class.to_vec()), (93, vec![0, 0])];
    bootvol_edge::dhcp::packet::Packet::request(
        [0x52, 0x54, 0x00, 0xd4, 0xc0, 0x01],
        0x0b00_7001,
        options,
    )
    .encode()
}

/// `PUT /v1/nodes/<node>/states/power` with the operator's credentials: the status.
fn put_power(serve: &Serve, node: &str, target: &str) -> u16 {
    use base64::Engine;
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    agent
        .put(format!("{}/v1/nodes/{node}/states/power", serve.api))
        .header("Authorization", format!("Basic {basic}"))
        .header("Content-Type", "application/json")
        .send(serde_json::json!({"target": target}).to_string())
        .unwrap()
        .status()
        .as_u16()
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

/// Scrapes again until every line is in the text (counted after the client saw its answer).
fn scrape_until_all(serve: &Serve, lines: &[&str], mut text: String) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lines.iter().all(|line| text.lines().any(|l| l == *line)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        text = get(&format!("{}/metrics", serve.api)).2;
    }
    text
}

const TFTP_DONE: &str = "bootvol_tftp_transfers_total{file_class=\"file\",result=\"refused\"} 1";

/// The sample lines every check below expects after `boot_traffic`.
fn expected_samples(tftp_bytes: usize) -> Vec<String> {
    vec![
        format!("bootvol_boot_scripts_total{{kind=\"node\",transport=\"http\"}} {KNOWN}"),
        format!("bootvol_boot_scripts_total{{kind=\"unknown\",transport=\"http\"}} {UNKNOWN}"),
        format!("bootvol_boot_scripts_total{{kind=\"generic\",transport=\"http\"}} {GENERIC}"),
        "bootvol_boot_scripts_total{kind=\"generic\",transport=\"tftp\"} 1".to_owned(),
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
        "bootvol_database_connected 1".to_owned(),
        DHCP_IGNORED.to_owned(),
    ]
}

const BMC_DONE: &str =
    "bootvol_bmc_calls_total{driver=\"fake\",call=\"set_power\",result=\"ok\"} 1";
const DHCP_IGNORED: &str =
    "bootvol_dhcp_packets_total{message=\"discover\",arch=\"0\",result=\"ignored\"} 1";

/// The ProxyDHCP's BIOS DISCOVER: answered or not sent, once.
fn dhcp_netboot_counted(text: &str) -> bool {
    ["answered", "send_failed"].iter().any(|r| {
        let line = format!(
            "bootvol_dhcp_packets_total{{message=\"discover\",arch=\"0\",result=\"{r}\"}} 1"
        );
        text.lines().any(|l| l == line)
    })
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
    let text = scrape_until_all(&serve, &[TFTP_DONE, DHCP_IGNORED], text);
    for line in expected_samples(tftp_bytes) {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
    }
    assert!(dhcp_netboot_counted(&text), "{text}");
    let text = power_on(&serve);
    assert!(text.lines().any(|l| l == BMC_DONE), "{text}");
    assert!(!text.contains("result=\"bmc_error\""), "{text}");
    // `[metrics] listen` serves the same text, and nothing but the public routes.
    let (status, _, other) = get(&format!("{}/metrics", serve.metrics));
    assert_eq!(status, 200);
    assert!(other.lines().any(|l| l == BMC_DONE), "{other}");
    assert_eq!(get(&format!("{}/readyz", serve.metrics)).0, 200);
    assert_eq!(get(&format!("{}/v1/nodes", serve.metrics)).0, 404);
    assert_eq!(get(&format!("{}/admin/", serve.metrics)).0, 404);
    assert!(text.ends_with("# EOF\n"));
    // Refusals are counted as unknown MACs here, never apart (tests/it/admin.rs).
    assert!(!text.contains("kind=\"refused\""), "{text}");
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
    if crate::support::on_postgres() {
        return; // a SQLite file overwritten; the PostgreSQL outage is tests/it/cluster.rs's
    }
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
    if !Path::new("/usr/bin/prometheus").exists() {
        crate::skip::skip(crate::skip::PROMETHEUS, "/usr/bin/prometheus not installed");
        return;
    }
    let serve = start();
    let tftp_bytes = boot_traffic(&serve);
    let text = scrape_until(&serve, TFTP_DONE);
    scrape_until_all(&serve, &[TFTP_DONE, DHCP_IGNORED], text);
    power_on(&serve);
    let work = tempfile::tempdir().unwrap();
    // Scraped on `[metrics] listen`, as a site that keeps scrapers off the API network would.
    let target = serve.metrics.trim_start_matches("http://");
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
            "bootvol_database_connected",
            "bootvol_dhcp_packets_total",
            "bootvol_bmc_calls_total",
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
            // The power action changed a node: at least one rebuild after the first.
            ("bootvol_snapshot_generation >= bool 2", 1),
            (r#"sum(bootvol_dhcp_packets_total{arch="0"})"#, 2),
            (r#"bootvol_dhcp_packets_total{result="ignored"}"#, 1),
            (r#"bootvol_bmc_calls_total{driver="fake",call="set_power",result="ok"}"#, 1),
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
