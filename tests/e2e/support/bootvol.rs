//! The thing under test: `bootvol serve` with a configuration of its own, an inventory applied
//! with `bootvol apply`, run until the guard drops.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::net::{free_tcp_port, free_udp_port};
use super::process::{Daemon, command, command_in, run};
use super::tail;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_bootvol");

/// Where bootvol listens and what it tells nodes.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) http_listen: String,
    pub(crate) public_url: String,
    pub(crate) tftp_listen: String,
    pub(crate) tftp_root: PathBuf,
    pub(crate) san_attempts: u32,
    pub(crate) san_retry_delay: u32,
    /// Run inside this network namespace.
    pub(crate) netns: Option<String>,
    /// `[boot] script_secrets`: `any` on QEMU's user-mode network (its NAT hides the guest's
    /// MAC), `neighbour` on a real L2 path.
    pub(crate) script_secrets: &'static str,
    /// More configuration, appended as is (whole TOML sections).
    pub(crate) extra_config: String,
    /// `[api] auth_strategy = "noauth"`: the API and the admin page answer without a log-in.
    pub(crate) api_noauth: bool,
}

impl Settings {
    /// On host loopback, for VMs on QEMU's user-mode network (which reach the host as 10.0.2.2).
    pub(crate) fn loopback() -> Settings {
        let http = free_tcp_port();
        Settings {
            http_listen: format!("127.0.0.1:{http}"),
            public_url: format!("http://10.0.2.2:{http}"),
            tftp_listen: format!("127.0.0.1:{}", free_udp_port()),
            tftp_root: PathBuf::from("/usr/lib/ipxe"),
            san_attempts: 2,
            san_retry_delay: 1,
            netns: None,
            script_secrets: "any",
            extra_config: String::new(),
            api_noauth: false,
        }
    }

    /// Inside a network namespace, on the server address, with TFTP on port 69.
    pub(crate) fn in_netns(netns: &str, ip: &str) -> Settings {
        Settings {
            http_listen: format!("{ip}:8080"),
            public_url: format!("http://{ip}:8080"),
            tftp_listen: format!("{ip}:69"),
            tftp_root: PathBuf::from("/usr/lib/ipxe"),
            san_attempts: 2,
            san_retry_delay: 1,
            netns: Some(netns.to_owned()),
            script_secrets: "neighbour",
            extra_config: String::new(),
            api_noauth: false,
        }
    }
}

/// A running `bootvol serve`.
#[derive(Debug)]
pub(crate) struct Bootvol {
    pub(crate) settings: Settings,
    pub(crate) config: PathBuf,
    pub(crate) files_root: PathBuf,
    /// The API's (and the admin page's) address, `127.0.0.1:<port>`.
    pub(crate) api: String,
    daemon: Option<Daemon>,
    log: PathBuf,
}

impl Bootvol {
    /// Writes the configuration into `dir` (database and `files/` there too). Nothing runs yet.
    pub(crate) fn configure(dir: &Path, settings: Settings) -> Bootvol {
        let files_root = dir.join("files");
        std::fs::create_dir_all(&files_root).unwrap();
        let config = dir.join("bootvol.toml");
        let api = format!("127.0.0.1:{}", free_tcp_port());
        let auth = if settings.api_noauth { "auth_strategy = \"noauth\"\n" } else { "" };
        let text = format!(
            r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "external"]

[database]
path = "{db}"
watch_interval_ms = 100

[http]
listen = "{http_listen}"
public_url = "{public_url}"
files_root = "{files_root}"

[tftp]
listen = "{tftp_listen}"
root = "{tftp_root}"

[api]
listen = "{api}"
{auth}
[boot]
san_attempts = {san_attempts}
san_retry_delay = {san_retry_delay}
script_secrets = "{script_secrets}"
"#,
            db = dir.join("bootvol.db").display(),
            http_listen = settings.http_listen,
            public_url = settings.public_url,
            files_root = files_root.display(),
            tftp_listen = settings.tftp_listen,
            tftp_root = settings.tftp_root.display(),
            san_attempts = settings.san_attempts,
            san_retry_delay = settings.san_retry_delay,
            script_secrets = settings.script_secrets,
        ) + &settings.extra_config;
        std::fs::write(&config, text).unwrap();
        Bootvol { settings, config, files_root, api, daemon: None, log: dir.join("bootvol.log") }
    }

    fn cli(&self) -> Command {
        let mut cmd = command(BIN);
        cmd.arg("--config").arg(&self.config);
        cmd
    }

    /// `bootvol apply` of `inventory`.
    pub(crate) fn apply(&self, inventory: &serde_json::Value) {
        let path = self.config.with_file_name("inventory.json");
        std::fs::write(&path, serde_json::to_string_pretty(inventory).unwrap()).unwrap();
        run(self.cli().arg("apply").arg(&path));
    }

    /// `bootvol probe --node <node>`: its exit code and what it printed (stdout, then stderr).
    pub(crate) fn probe(&self, node: &str) -> (Option<i32>, String) {
        let output = self.cli().args(["probe", "--node", node]).output().expect("bootvol probe");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code(), text)
    }

    /// `bootvol events --node <node> --json`: the node's events, oldest first.
    pub(crate) fn events(&self, node: &str) -> Vec<serde_json::Value> {
        run(self.cli().args(["events", "--node", node, "--json", "--limit", "1000"]))
            .lines()
            .map(|line| serde_json::from_str(line).expect("an event as JSON"))
            .collect()
    }

    /// `GET path` of the admin page, in a session of its own (with `api_noauth`, visiting the
    /// log-in page opens one): (status, body).
    pub(crate) fn admin_get(&self, path: &str) -> Result<(u16, String), String> {
        if let Some(netns) = &self.settings.netns {
            return self.admin_get_in(netns, path);
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let base = format!("http://{}", self.api);
        let login = agent.get(format!("{base}/admin/login")).call().map_err(|e| e.to_string())?;
        let cookie = login
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .ok_or("no session cookie")?
            .to_owned();
        let mut response = agent
            .get(format!("{base}{path}"))
            .header("Cookie", &cookie)
            .call()
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
        Ok((status, body))
    }

    /// [`Bootvol::admin_get`] from inside `netns`, where the API listens: curl, its session
    /// cookie in a jar of its own.
    fn admin_get_in(&self, netns: &str, path: &str) -> Result<(u16, String), String> {
        let jar = self.config.with_extension("cookies");
        let base = format!("http://{}", self.api);
        let curl = |args: &[&str]| {
            let out = command_in(Some(netns), "curl")
                .args(["-sS", "--max-time", "5", "-b"])
                .arg(&jar)
                .arg("-c")
                .arg(&jar)
                .args(args)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        curl(&["-o", "/dev/null", &format!("{base}/admin/login")])?;
        let out = curl(&["-w", "\n%{http_code}", &format!("{base}{path}")])?;
        let (body, status) = out.rsplit_once('\n').ok_or("no status from curl")?;
        Ok((status.trim().parse().map_err(|_| format!("status {status:?}"))?, body.to_owned()))
    }

    /// `bootvol render --mac`: the script that MAC must be served.
    pub(crate) fn render(&self, mac: &str) -> String {
        run(self.cli().args(["render", "--mac", mac]))
    }

    /// Starts `bootvol serve` and waits until `GET /boot.ipxe` answers 200.
    pub(crate) fn serve(&mut self) {
        let mut cmd = command_in(self.settings.netns.as_deref(), BIN);
        cmd.arg("--config").arg(&self.config).arg("serve").env("RUST_LOG", "debug");
        let mut daemon = Daemon::spawn("bootvol serve", cmd, &self.log);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            daemon.assert_running();
            if let Ok((200, _)) = self.get("/boot.ipxe") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "bootvol serve did not answer GET /boot.ipxe with 200\n{}",
                tail(&self.log, 4000)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.daemon = Some(daemon);
    }

    /// `GET path` from bootvol's HTTP listener: (status, body).
    pub(crate) fn get(&self, path: &str) -> Result<(u16, String), String> {
        self.get_with(path, &[])
    }

    /// `GET path` with extra request headers. Inside a namespace it goes through bash's
    /// /dev/tcp there.
    pub(crate) fn get_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<(u16, String), String> {
        let (host, port) = self.settings.http_listen.rsplit_once(':').unwrap();
        match &self.settings.netns {
            None => {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(5)))
                    .build()
                    .into();
                let mut request = agent.get(format!("http://{host}:{port}{path}"));
                for (name, value) in headers {
                    request = request.header(*name, *value);
                }
                let mut response = request.call().map_err(|e| e.to_string())?;
                let status = response.status().as_u16();
                let body = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
                Ok((status, body))
            }
            Some(netns) => {
                let extra: String =
                    headers.iter().map(|(name, value)| format!("{name}: {value}\\r\\n")).collect();
                let script = format!(
                    "exec 3<>/dev/tcp/{host}/{port} || exit 1\n\
                     printf 'GET {path} HTTP/1.0\\r\\nHost: {host}\\r\\n{extra}\\r\\n' >&3\n\
                     timeout 5 cat <&3"
                );
                let out = command_in(Some(netns), "bash")
                    .args(["-c", &script])
                    .output()
                    .map_err(|e| e.to_string())?;
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                let (head, body) = text
                    .split_once("\r\n\r\n")
                    .ok_or_else(|| format!("no HTTP answer: {text:?}"))?;
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("bad status line: {head:?}"))?;
                Ok((status, body.to_owned()))
            }
        }
    }

    /// Asserts that `GET /boot/<mac>.ipxe` serves exactly what `bootvol render` prints, waiting
    /// a little for the server to notice a fresh `apply`. Returns the script.
    pub(crate) fn assert_serves_render(&self, mac: &str) -> String {
        let expected = self.render(mac);
        let path = format!("/boot/{}.ipxe", mac.replace(':', "-"));
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = self.get(&path);
            if matches!(&got, Ok((200, body)) if *body == expected) {
                return expected;
            }
            assert!(
                Instant::now() < deadline,
                "GET {path} does not serve what `bootvol render --mac {mac}` prints\n\
                 render:\n{expected}\nserved: {got:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn log(&self) -> String {
        tail(&self.log, 4000)
    }

    /// The whole log so far.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills the server at once (SIGKILL), as a crash or a power cut would.
    pub(crate) fn kill(&mut self) {
        if let Some(mut daemon) = self.daemon.take() {
            daemon.assert_running();
            daemon.signal(Signal::SIGKILL);
            assert!(
                daemon.wait_timeout(Duration::from_secs(5)).is_some(),
                "bootvol serve outlived SIGKILL"
            );
        }
    }

    /// Stops the server with SIGTERM and asserts it exits 0 promptly.
    pub(crate) fn stop(&mut self) {
        if let Some(mut daemon) = self.daemon.take() {
            daemon.assert_running();
            daemon.signal(Signal::SIGTERM);
            let status = daemon.wait_timeout(Duration::from_secs(5));
            assert!(
                status.is_some_and(|s| s.success()),
                "bootvol serve did not exit 0 within 5 s of SIGTERM ({status:?})\n{}",
                self.log()
            );
        }
    }
}
