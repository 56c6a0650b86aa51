//! Real BMC peers for the power-driver tests (`tests/it/power.rs` includes this file):
//! sushy-tools' Redfish emulator with its fake driver (`sushy_emulator.py`, from the venv that
//! `setup.sh` makes) and OpenIPMI's `ipmi_sim` (`lan.conf.in`, `bmc.emu`, `chassis_control.sh`),
//! each started on a free loopback port in its own temporary directory and killed (and reaped)
//! when dropped, test failure or not. Also: capturing bootvol's log lines, and the switch that
//! turns a missing peer from "skipped" into a failure (`BOOTVOL_REQUIRE_POWER=1`).

use std::io::Write;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Reports a missing peer: fails when `BOOTVOL_REQUIRE_POWER=1`, else skips the test saying so
/// (`crate::skip`). Always returns `None`.
pub(crate) fn missing<T>(what: &str) -> Option<T> {
    crate::skip::skip(crate::skip::POWER, what);
    None
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The support directory, `tests/power/`.
fn support(file: &str) -> PathBuf {
    repo().join("tests/power").join(file)
}

/// The executable `tool` on PATH, if any.
#[allow(clippy::disallowed_methods)] // reading PATH, as a shell would
pub(crate) fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(tool)).find(|candidate| candidate.is_file())
}

/// A free TCP port on 127.0.0.1 (free when asked; the peer binds it right after).
fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A started peer: killed and reaped on drop; its log is printed when the test failed.
#[derive(Debug)]
pub(crate) struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    #[allow(clippy::disallowed_methods)] // tests start real peers
    fn spawn(name: &'static str, program: &Path, args: &[String], dir: &Path) -> Process {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({}): {e}", program.display()));
        Process { name, child, log }
    }

    /// Panics (with the peer's log) if the peer has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("{} exited ({status}) while starting:\n{log}", self.name);
        }
    }

    /// Waits (at most 20 s) until `ready` holds, checking that the peer still runs.
    fn wait_until(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            self.assert_running();
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{} never became ready ({what})",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- last lines of {}:", self.log.display());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// How to start the Redfish emulator.
#[derive(Debug, Clone, Default)]
pub(crate) struct SushyOptions {
    /// How many systems (0 means 1).
    pub(crate) systems: usize,
    /// Seconds before a power change shows (sushy's own default is a random 1-11 s; here 0).
    pub(crate) power_delay: u32,
    /// HTTP basic auth: (user, password), stored as a bcrypt htpasswd entry.
    pub(crate) auth: Option<(String, String)>,
    /// HTTPS with a certificate for 127.0.0.1 issued by a fresh test CA (`Sushy::ca_file`).
    pub(crate) tls: bool,
    /// Narrows ResetType@Redfish.AllowableValues, e.g. "On,ForceOff".
    pub(crate) reset_types: Option<String>,
    /// Names another URL as the Reset action's target.
    pub(crate) alt_reset_target: bool,
    /// Sends an ETag with each system resource.
    pub(crate) etag: bool,
}

/// sushy-tools' Redfish emulator (fake driver) on a free port.
#[derive(Debug)]
pub(crate) struct Sushy {
    /// `http://127.0.0.1:<port>` (or https).
    pub(crate) url: String,
    /// The CA that issued the emulator's certificate, with `tls`.
    pub(crate) ca_file: Option<PathBuf>,
    process: Process,
    dir: tempfile::TempDir,
}

impl Sushy {
    /// Starts the emulator, or answers `None` (skipped) when the venv is missing and the tests
    /// are not required.
    pub(crate) fn start(options: SushyOptions) -> Option<Sushy> {
        let python = repo().join("target/power-venv/bin/python");
        if !python.is_file() {
            return missing(&format!("no sushy-tools venv ({} is missing)", python.display()));
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_tcp_port();
        let mut args = vec![
            support("sushy_emulator.py").display().to_string(),
            "--port".into(),
            port.to_string(),
            "--state-dir".into(),
            dir.path().display().to_string(),
            "--systems".into(),
            options.systems.max(1).to_string(),
            "--power-delay".into(),
            options.power_delay.to_string(),
        ];
        if let Some((user, password)) = &options.auth {
            let htpasswd = dir.path().join("htpasswd");
            let entry = run(
                &python,
                &[
                    "-c",
                    "import bcrypt, sys; print(sys.argv[1] + ':' + bcrypt.hashpw(\
                     sys.argv[2].encode(), bcrypt.gensalt(rounds=4)).decode())",
                    user,
                    password,
                ],
                dir.path(),
            );
            std::fs::write(&htpasswd, entry).unwrap();
            args.extend(["--auth-file".into(), htpasswd.display().to_string()]);
        }
        let mut ca_file = None;
        if options.tls {
            let (ca, cert, key) = test_certificates(dir.path())?;
            args.extend([
                "--ssl-cert".into(),
                cert.display().to_string(),
                "--ssl-key".into(),
                key.display().to_string(),
            ]);
            ca_file = Some(ca);
        }
        if let Some(types) = &options.reset_types {
            args.extend(["--reset-types".into(), types.clone()]);
        }
        if options.alt_reset_target {
            args.push("--alt-reset-target".into());
        }
        if options.etag {
            args.push("--etag".into());
        }
        let mut process = Process::spawn("sushy-emulator", &python, &args, dir.path());
        process.wait_until("TCP port open", || TcpStream::connect(("127.0.0.1", port)).is_ok());
        let scheme = if options.tls { "https" } else { "http" };
        Some(Sushy { url: format!("{scheme}://127.0.0.1:{port}"), ca_file, process, dir })
    }

    /// The path of system `i` (from 1).
    pub(crate) fn system_path(i: usize) -> String {
        format!("/redfish/v1/Systems/00000000-0000-4000-8000-{i:012}")
    }

    /// Every request that reached the emulator (past authentication), oldest first.
    pub(crate) fn requests(&self) -> Vec<Value> {
        let text =
            std::fs::read_to_string(self.dir.path().join("requests.jsonl")).unwrap_or_default();
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    /// The requests with a method other than GET: what bootvol changed.
    pub(crate) fn changes(&self) -> Vec<Value> {
        self.requests().into_iter().filter(|r| r["method"] != "GET").collect()
    }

    /// A resource, read straight from the emulator (plain HTTP, no auth), as (JSON, ETag).
    pub(crate) fn get(&self, path: &str) -> (Value, Option<String>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut response =
            agent.get(format!("{}{path}", self.url)).call().expect("the emulator answers");
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        let etag = response.headers().get("ETag").map(|v| v.to_str().unwrap().to_owned());
        let text = response.body_mut().read_to_string().unwrap();
        (serde_json::from_str(&text).unwrap(), etag)
    }

    /// Whether the emulator is still running (it must be, until dropped).
    pub(crate) fn assert_running(&mut self) {
        self.process.assert_running();
    }
}

/// Runs a short helper command to completion; panics with its output when it fails.
#[allow(clippy::disallowed_methods)] // tests start real tools
fn run(program: &Path, args: &[&str], dir: &Path) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A test CA and a server certificate for 127.0.0.1 it issued (P-256 keys, openssl):
/// (ca.pem, server.pem, server.key). `None` (skipped) without openssl.
fn test_certificates(dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let Some(openssl) = on_path("openssl") else {
        return missing("openssl is not installed");
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=bootvol test CA"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    run(&openssl, &ca, dir);
    let mut csr = vec!["req", "-new", "-subj", "/CN=127.0.0.1"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    run(&openssl, &csr, dir);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(
        &openssl,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
        dir,
    );
    Some((dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key")))
}

/// OpenIPMI's `ipmi_sim` on a free UDP port, with one administrator and a chassis whose power
/// and boot device `chassis_control.sh` keeps in files.
#[derive(Debug)]
pub(crate) struct IpmiSim {
    pub(crate) port: u16,
    process: Process,
    dir: tempfile::TempDir,
}

impl IpmiSim {
    pub(crate) const USER: &'static str = "admin";
    /// At most 20 characters (IPMI 2.0).
    pub(crate) const PASSWORD: &'static str = "Ipmi-pw-7a1f93";

    /// Starts ipmi_sim, or answers `None` (skipped) when ipmi_sim or ipmitool is missing and
    /// the tests are not required.
    pub(crate) fn start() -> Option<IpmiSim> {
        let Some(ipmi_sim) = on_path("ipmi_sim") else {
            return missing("ipmi_sim is not installed (Debian package openipmi)");
        };
        on_path("ipmitool").or_else(|| missing("ipmitool is not installed"))?;
        let dir = tempfile::tempdir().unwrap();
        let port = free_udp_port();
        let template = std::fs::read_to_string(support("lan.conf.in")).unwrap();
        let config = template
            .replace("@PORT@", &port.to_string())
            .replace("@CHASSIS@", &support("chassis_control.sh").display().to_string())
            .replace("@STATE@", &dir.path().display().to_string())
            .replace("@USER@", IpmiSim::USER)
            .replace("@PASSWORD@", IpmiSim::PASSWORD);
        let lan_conf = dir.path().join("lan.conf");
        std::fs::write(&lan_conf, config).unwrap();
        let args = [
            "-n".to_owned(),
            "-c".to_owned(),
            lan_conf.display().to_string(),
            "-f".to_owned(),
            support("bmc.emu").display().to_string(),
            "-s".to_owned(),
            dir.path().display().to_string(),
        ];
        let mut process = Process::spawn("ipmi_sim", &ipmi_sim, &args, dir.path());
        process.wait_until("UDP port bound", || udp_port_bound(port));
        Some(IpmiSim { port, process, dir })
    }

    /// The chassis state `chassis_control.sh` keeps: "power" (0 or 1) or "boot".
    pub(crate) fn chassis(&self, what: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(what)).unwrap_or_default().trim().to_owned()
    }

    /// Every chassis_control call ipmi_sim made, one per line ("set power 1").
    pub(crate) fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("calls.log")).unwrap_or_default()
    }

    pub(crate) fn assert_running(&mut self) {
        self.process.assert_running();
    }
}

/// Whether a UDP socket is bound to 127.0.0.1:`port` (per /proc/net/udp).
fn udp_port_bound(port: u16) -> bool {
    let wanted = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .any(|line| line.split_whitespace().nth(1) == Some(wanted.as_str()))
}

/// bootvol's log lines (every level), captured for the current thread while this lives.
#[derive(Debug)]
pub(crate) struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Debug)]
struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl Write for BufferWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    pub(crate) fn start() -> LogCapture {
        let buffer: Arc<Mutex<Vec<u8>>> = Arc::default();
        let writer = Arc::clone(&buffer);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || BufferWriter(Arc::clone(&writer)))
            .finish();
        LogCapture { buffer, _guard: tracing::subscriber::set_default(subscriber) }
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap()).into_owned()
    }
}
