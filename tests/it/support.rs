//! Shared helpers: a configuration on a temporary database, the scenario inventory, goldens.

use std::path::{Path, PathBuf};

use bootvol_core::boot::{BootScript, Templates, script_for};
use bootvol_core::config::Config;
use bootvol_core::inventory::{self, Format};
use bootvol_core::model::{MacAddr, NodeRecord};
use bootvol_db::Db;

pub(crate) fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
}

/// `BOOTVOL_TEST_DATABASE_URL` (`postgres://user@host:port/db`, a server the tests may create
/// databases on): the integration tests then run on PostgreSQL, each test folder on a database
/// of its own; unset, on SQLite files.
#[allow(clippy::disallowed_methods)] // the test suite's own switch, not bootvol's configuration
pub(crate) fn test_database_url() -> Option<String> {
    std::env::var("BOOTVOL_TEST_DATABASE_URL").ok().filter(|u| !u.is_empty())
}

/// Whether the integration tests run on PostgreSQL.
pub(crate) fn on_postgres() -> bool {
    test_database_url().is_some()
}

/// The `[database]` line for a test folder: `path = "<dir>/bootvol.db"`, or with
/// `BOOTVOL_TEST_DATABASE_URL` the `url` of a database of this folder's own (created here).
pub(crate) fn database(dir: &Path) -> String {
    match test_database_url() {
        None => format!("path = \"{}\"", dir.join("bootvol.db").display()),
        Some(admin) => format!("url = \"{}\"", postgres_url(&admin, dir)),
    }
}

/// The URL of the test folder's own database (created when missing).
pub(crate) fn postgres_url(admin: &str, dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut hasher);
    let name = format!("bv_{:016x}", hasher.finish());
    bootvol_db::engine::create_database(admin, None, &name).expect("test database created");
    let (server, _) = admin.rsplit_once('/').expect("BOOTVOL_TEST_DATABASE_URL names a database");
    format!("{server}/{name}")
}

/// The test folder's database, opened as `[database]` of [`database`] would.
pub(crate) fn open_db(dir: &Path) -> Db {
    let config =
        Config::from_toml(&format!("[database]\n{}\n", database(dir)), "test").expect("config");
    Db::open_config(&config.database).unwrap()
}

/// [`open_db`] as a `Result`, for callers that `unwrap` it.
pub(crate) fn open_db_ok(dir: &Path) -> Result<Db, bootvol_db::DbError> {
    Ok(open_db(dir))
}

/// A configuration with every storage interface enabled and its database in `dir`. Its clients
/// are on loopback, which has no neighbour table: `script_secrets = "any"`.
pub(crate) fn config_text(dir: &Path) -> String {
    format!(
        r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "external", "cinder"]
default_storage_interface = "noop"
[database]
{}
[http]
public_url = "http://192.0.2.10:8080"
files_root = "/srv/bootvol/files"
[tftp]
root = "/usr/lib/ipxe"
[cinder]
url = "http://127.0.0.1:8776/v3"
[boot]
san_attempts = 4
san_retry_delay = 3
script_secrets = "any"
"#,
        database(dir)
    )
}

pub(crate) fn config(dir: &Path) -> Config {
    Config::from_toml(&config_text(dir), "test").expect("test configuration")
}

/// The scenario inventory applied to an in-memory database.
pub(crate) fn scenario_db(config: &Config) -> Db {
    let text = std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap();
    let specs = inventory::parse(&text, Format::Json, config).expect("scenario inventory is valid");
    let mut db = Db::open_in_memory().unwrap();
    db.apply_inventory(&specs, false).unwrap();
    db
}

pub(crate) fn render_mac(db: &Db, config: &Config, mac: &str) -> BootScript {
    let mac: MacAddr = mac.parse().unwrap();
    let record = db.node_record_by_mac(mac).unwrap();
    render_record(config, record.as_ref())
}

pub(crate) fn render_record(config: &Config, record: Option<&NodeRecord>) -> BootScript {
    let templates = Templates::new(None).unwrap();
    script_for(
        &templates,
        &config.boot_settings(),
        config.default.default_storage_interface,
        record,
    )
}

/// Compares `actual` with `tests/fixtures/ipxe/<name>.ipxe`. A missing golden is written and
/// the test fails, so that a new golden is always read by a person before it is committed.
pub(crate) fn check_golden(name: &str, actual: &str) {
    let path = fixture(&format!("ipxe/{name}.ipxe"));
    match std::fs::read_to_string(&path) {
        Ok(expected) => {
            if expected != actual {
                let actual_path = path.with_extension("ipxe.actual");
                std::fs::write(&actual_path, actual).unwrap();
                panic!(
                    "{name}: script differs from {} (actual written to {})",
                    path.display(),
                    actual_path.display()
                );
            }
        }
        Err(_) => {
            std::fs::write(&path, actual).unwrap();
            panic!("{name}: golden {} did not exist; written, review it", path.display());
        }
    }
}

/// bootvol's configuration and database in a temporary folder, driven through the real
/// `bootvol` binary as an operator drives it.
pub(crate) struct Appliance {
    pub(crate) dir: tempfile::TempDir,
    /// Values that must never show in what bootvol writes to standard error (its logs).
    never_logged: Vec<String>,
}

impl Appliance {
    /// `config` gets the folder and returns the configuration file's text.
    pub(crate) fn with_config(config: impl FnOnce(&Path) -> String) -> Appliance {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bootvol.toml"), config(dir.path())).unwrap();
        Appliance { dir, never_logged: Vec::new() }
    }

    /// Runs every command with debug logging and fails when a log line shows one of `secrets`.
    pub(crate) fn never_logging(mut self, secrets: &[&str]) -> Appliance {
        self.never_logged = secrets.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    #[allow(clippy::disallowed_methods)] // tests run the real binary
    pub(crate) fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bootvol"));
        command.arg("--config").arg(self.path("bootvol.toml")).args(args);
        if !self.never_logged.is_empty() {
            command.env("RUST_LOG", "debug");
        }
        command
    }

    pub(crate) fn run(&self, args: &[&str]) -> std::process::Output {
        let output = self.command(args).output().expect("bootvol runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        for secret in &self.never_logged {
            assert!(
                !stderr.contains(secret.as_str()),
                "bootvol {args:?} logged a secret: {stderr}"
            );
        }
        output
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "bootvol {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    pub(crate) fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            !output.status.success(),
            "bootvol {args:?} should fail; it printed {}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stderr).unwrap()
    }

    /// Applies `{"nodes": nodes}`.
    pub(crate) fn apply(&self, nodes: serde_json::Value) {
        let file = self.path("inventory.json");
        std::fs::write(&file, serde_json::json!({"nodes": nodes}).to_string()).unwrap();
        self.ok(&["apply", file.to_str().unwrap()]);
    }

    /// `bootvol node show NODE --json`.
    pub(crate) fn show(&self, node: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["node", "show", node, "--json"])).unwrap()
    }

    pub(crate) fn db(&self) -> Db {
        open_db(self.dir.path())
    }
}

/// Starts `app::serve` with `config` on 127.0.0.1 ephemeral ports, in its own thread and
/// runtime; answers the API and boot HTTP addresses and the guard that stops it (and, when the
/// test ends, joins it: an error or a panic in `serve` fails the test).
pub(crate) fn start_serve(
    config: Config,
) -> (std::net::SocketAddr, std::net::SocketAddr, ServeGuard) {
    let (bound, guard) = serve_guarded(config, false);
    (bound.api, bound.boot, guard)
}

/// The one way the tests run `serve`: [`spawn_serve`] (returns once `/readyz` says ready) with
/// its guard (stops and joins it on drop; its error fails the test).
pub(crate) fn serve_guarded(config: Config, metrics: bool) -> (Bound, ServeGuard) {
    let (bound, shutdown, thread) = spawn_serve(config, metrics);
    (bound, ServeGuard { shutdown, thread: Some(thread) })
}

/// A running `serve`: derefs to its shutdown token; dropped, it cancels the token and joins the
/// thread, and fails the test (unless it is already failing) when `serve` returned an error,
/// panicked or did not stop within [`ServeGuard::JOIN_WITHIN`].
#[derive(Debug)]
pub(crate) struct ServeGuard {
    shutdown: tokio_util::sync::CancellationToken,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl ServeGuard {
    /// `serve`'s drain deadline and some: a `serve` that takes longer is wedged.
    const JOIN_WITHIN: std::time::Duration = std::time::Duration::from_secs(45);

    /// A guard with no `serve` behind it (a rig that does not start one).
    pub(crate) fn unstarted() -> ServeGuard {
        ServeGuard { shutdown: tokio_util::sync::CancellationToken::new(), thread: None }
    }

    /// Stops `serve` and says how it ended.
    pub(crate) fn stop(mut self) -> Result<(), String> {
        self.join()
    }

    fn join(&mut self) -> Result<(), String> {
        self.shutdown.cancel();
        let Some(thread) = self.thread.take() else { return Ok(()) };
        let deadline = std::time::Instant::now() + Self::JOIN_WITHIN;
        while !thread.is_finished() {
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "serve did not stop within {:?} of shutdown",
                    Self::JOIN_WITHIN
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        ended("serve", thread.join())
    }
}

/// How a server thread of a test ended: `Err` naming `what` when it returned an error or
/// panicked.
pub(crate) fn ended<E: std::fmt::Debug>(
    what: &str,
    joined: std::thread::Result<Result<(), E>>,
) -> Result<(), String> {
    match joined {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{what} returned an error: {e:?}")),
        Err(_) => Err(format!("{what} panicked")),
    }
}

/// Joins a test's server thread when the test ends, failing the test (unless it is already
/// failing) when the server returned an error or panicked.
pub(crate) fn join_server<E: std::fmt::Debug>(
    what: &str,
    thread: std::thread::JoinHandle<Result<(), E>>,
) {
    let joined = thread.join();
    if let Err(e) = ended(what, joined)
        && !std::thread::panicking()
    {
        panic!("{e}");
    }
}

impl std::ops::Deref for ServeGuard {
    type Target = tokio_util::sync::CancellationToken;

    fn deref(&self) -> &Self::Target {
        &self.shutdown
    }
}

impl Drop for ServeGuard {
    fn drop(&mut self) {
        let ended = self.join();
        if let Err(e) = ended
            && !std::thread::panicking()
        {
            panic!("{e}");
        }
    }
}

/// [`start_serve`], with the thread `serve` runs on (it ends when `serve` returns).
pub(crate) fn start_serve_joinable(
    config: Config,
) -> (
    std::net::SocketAddr,
    std::net::SocketAddr,
    tokio_util::sync::CancellationToken,
    std::thread::JoinHandle<anyhow::Result<()>>,
) {
    let (bound, shutdown, thread) = spawn_serve(config, false);
    (bound.api, bound.boot, shutdown, thread)
}

/// Where a [`spawn_serve`] answers: every listener on loopback, port 0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    pub(crate) api: std::net::SocketAddr,
    pub(crate) boot: std::net::SocketAddr,
    pub(crate) tftp: std::net::SocketAddr,
    /// `[metrics] listen`, when asked for.
    pub(crate) metrics: Option<std::net::SocketAddr>,
}

/// `app::serve` on a thread of its own (a 2-worker runtime), its listeners bound first, with a
/// `[metrics] listen` listener when `metrics`.
pub(crate) fn spawn_serve(
    config: Config,
    metrics: bool,
) -> (Bound, tokio_util::sync::CancellationToken, std::thread::JoinHandle<anyhow::Result<()>>) {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let token = shutdown.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let http = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let tftp = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
            let api = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let metrics = match metrics {
                true => Some(tokio::net::TcpListener::bind("127.0.0.1:0").await?),
                false => None,
            };
            let bound = Bound {
                api: api.local_addr()?,
                boot: http.local_addr()?,
                tftp: tftp.local_addr()?,
                metrics: metrics.as_ref().map(|m| m.local_addr()).transpose()?,
            };
            tx.send(bound).unwrap();
            bootvol::app::serve(config, bootvol::app::Listeners { http, tftp, api, metrics }, token)
                .await
        })
    });
    let bound = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("listeners bound");
    wait_until_serving(bound.api, &thread);
    (bound, shutdown, thread)
}

/// Waits until the API listener at `api` answers `/readyz` with 200 (a snapshot built and the
/// boot listeners up: `/healthz` alone comes before the listeners report, and a test that
/// asserted then raced them), failing at once when `serve` ended instead, and after 30 s (a
/// busy machine) naming the last answer.
fn wait_until_serving(
    api: std::net::SocketAddr,
    serve: &std::thread::JoinHandle<anyhow::Result<()>>,
) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(2)))
        .build()
        .into();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let last = match agent.get(&format!("http://{api}/readyz")).call() {
            Ok(r) if r.status() == 200 => return,
            Ok(mut r) => {
                format!("{} {}", r.status(), r.body_mut().read_to_string().unwrap_or_default())
            }
            Err(e) => e.to_string(),
        };
        assert!(!serve.is_finished(), "serve ended before it was ready (the guard says why)");
        assert!(
            std::time::Instant::now() < deadline,
            "serve never answered /readyz with 200 on {api}: {last}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether the network-namespace tests can run here: root and every tool of `tools` (`ip`
/// always). Without them the test is skipped, saying so (`crate::skip`), unless
/// `BOOTVOL_REQUIRE_NETNS=1` (CI, `.ci/run`), where it fails: a security test never skips
/// silently there.
#[allow(clippy::disallowed_methods)] // the test suite's tools
pub(crate) fn netns_available(test: &str, tools: &[&str]) -> bool {
    let root = nix::unistd::geteuid().is_root();
    let missing: Vec<&str> = std::iter::once(&"ip")
        .chain(tools)
        .copied()
        .filter(|t| {
            std::process::Command::new(t)
                .arg("-V")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_err()
        })
        .collect();
    if root && missing.is_empty() {
        return true;
    }
    let why = format!(
        "{test}: needs root and {} (network namespaces){}",
        std::iter::once("ip").chain(tools.iter().copied()).collect::<Vec<_>>().join(", "),
        if root { format!("; missing: {}", missing.join(", ")) } else { "; not root".into() }
    );
    crate::skip::skip(crate::skip::NETNS, &why);
    false
}

/// A test's own server (a fault proxy, a webhook receiver, a hostile database) on a thread of
/// its own, with a runtime: dropped, it is cancelled and joined, and fails the test (unless it
/// is already failing) when it returned an error or panicked. Never left running past its test.
#[derive(Debug)]
pub(crate) struct Background {
    what: &'static str,
    shutdown: tokio_util::sync::CancellationToken,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Background {
    /// Runs `server(listener, shutdown)` on a loopback listener of its own (port 0); returns
    /// once it is bound, with its address. `server` must return soon after `shutdown` fires.
    pub(crate) fn serve<F, Fut>(what: &'static str, server: F) -> (std::net::SocketAddr, Background)
    where
        F: FnOnce(tokio::net::TcpListener, tokio_util::sync::CancellationToken) -> Fut
            + Send
            + 'static,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let token = shutdown.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                tx.send(listener.local_addr()?)?;
                server(listener, token).await
            })
        });
        let addr = match rx.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(addr) => addr,
            Err(_) => panic!("{what} never bound: {:?}", ended(what, thread.join())),
        };
        (addr, Background { what, shutdown, thread: Some(thread) })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.shutdown.cancel();
        let Some(thread) = self.thread.take() else { return };
        // A connection a client keeps open must not hold the test forever.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !thread.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let joined = match thread.is_finished() {
            true => ended(self.what, thread.join()),
            false => Err(format!("{} did not stop within 30 s of its shutdown", self.what)),
        };
        if let Err(e) = joined
            && !std::thread::panicking()
        {
            panic!("{e}");
        }
    }
}
