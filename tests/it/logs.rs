//! The real `bootvol serve` binary's log under requests that carry line ends and terminal
//! escapes in every place a client controls (the deploy, boot and files paths, the admin
//! log-in's user name, an API user name): every line the process writes starts with its own
//! timestamp and level, and what the client sent shows escaped (`\n`), never as a line of its
//! own (issue 22, finding 11).

use std::io::{BufRead, BufReader};
use std::time::Duration;

use crate::support::config_text;

/// A line a client tries to plant: the stock layout's head, so a reader could not tell it.
const FORGED_HEAD: &str = "2026-12-02T04:00:00.000000Z  INFO bootvol_edge::http::deploy: FORGED";

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
#[allow(clippy::disallowed_methods)] // tests run the real binary
fn client_values_in_the_log_are_escaped_and_forge_no_line() {
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = dir.path().join("htpasswd");
    std::fs::write(&htpasswd, format!("operator:{}\n", bcrypt::hash("s3cret-pass", 4).unwrap()))
        .unwrap();
    let text = format!(
        "{}[api]\nlisten = \"127.0.0.1:0\"\nhttp_basic_auth_user_file = \"{}\"\n",
        config_text(dir.path())
            .replace("[http]\n", "[http]\nlisten = \"127.0.0.1:0\"\n")
            .replace("[tftp]\n", "[tftp]\nlisten = \"127.0.0.1:0\"\n"),
        htpasswd.display()
    );
    std::fs::write(dir.path().join("bootvol.toml"), text).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bootvol"));
    command.arg("--config").arg(dir.path().join("bootvol.toml")).arg("serve");
    let (mut child, reader, serving) = spawn_logged(command);
    let field = |name: &str| {
        serving
            .split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_owned()
    };
    let (http, api) = (field("http"), field("api"));
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let forged = format!("zz\n{FORGED_HEAD}\r\u{1b}[2K");
    let path = encode(&forged);
    for url in [
        format!("http://{http}/deploy/{path}/token"),
        format!("http://{http}/deploy/{path}/callback"),
        format!("http://{http}/deploy/{path}/configdrive"),
    ] {
        let reply = agent.post(&url).send("{}").unwrap();
        assert!(reply.status().as_u16() >= 400, "{url}");
    }
    for url in [
        format!("http://{http}/boot/{path}.ipxe"),
        format!("http://{http}/files/{path}"),
        format!("http://{api}/v1/nodes/{path}"),
    ] {
        agent.get(&url).call().unwrap();
    }
    // A user name with a line end, in the API's Basic credentials and the admin log-in.
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{forged}:wrong"));
    agent
        .get(format!("http://{api}/v1/nodes"))
        .header("Authorization", format!("Basic {basic}"))
        .call()
        .unwrap();
    let mut login = agent.get(format!("http://{api}/admin/login")).call().unwrap();
    let cookie = login.headers().get("set-cookie").unwrap().to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let page = login.body_mut().read_to_string().unwrap();
    let marker = "name=\"csrf\" value=\"";
    let start = page.find(marker).unwrap() + marker.len();
    let csrf = &page[start..start + page[start..].find('"').unwrap()];
    agent
        .post(format!("http://{api}/admin/login"))
        .header("Cookie", &cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("csrf={csrf}&username={path}&password=wrong"))
        .unwrap();

    reader.wait_for("zz\\n2026-12-02T04:00:00");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = child.wait();
    let lines = reader.join().unwrap();
    let log = lines.join("\n");
    // Each line is bootvol's own: its timestamp (now, not the forged one) and a level.
    for line in &lines {
        let head = line.get(..27).unwrap_or("");
        let ok = head.len() == 27
            && head.ends_with('Z')
            && head.as_bytes()[10] == b'T'
            && !line.starts_with("2026-12-02T04:00:00.000000Z");
        assert!(ok, "a line not written by bootvol: {line:?}\nin\n{log}");
        assert!(!line.contains('\r') && !line.contains('\u{1b}'), "{line:?}");
    }
    // And the requests were logged, escaped: the test saw what it meant to.
    assert!(log.contains("/deploy/") || log.contains("deploy"), "no deploy refusal logged:\n{log}");
    let escaped = lines.iter().filter(|l| l.contains("zz\\n2026-12-02T04:00:00")).count();
    assert!(escaped >= 1, "no escaped client value in\n{log}");
}

/// A prober's loop on the deploy endpoints (200 refused token requests, then call-backs and
/// config drives) through the real `bootvol serve`: every request is refused, the log gets one
/// line for them, and the node one `baremetal.node.deploy_refused` event with the client, the
/// endpoint, the reason and the count (issue 22, finding 14).
#[test]
#[allow(clippy::disallowed_methods)] // tests run the real binary
fn deploy_refusals_are_logged_and_recorded_once_a_minute_per_client() {
    let app = crate::support::Appliance::with_config(|dir| {
        config_text(dir)
            .replace("[http]\n", "[http]\nlisten = \"127.0.0.1:0\"\n")
            .replace("[tftp]\n", "[tftp]\nlisten = \"127.0.0.1:0\"\n")
            + "[api]\nlisten = \"127.0.0.1:0\"\nauth_strategy = \"noauth\"\n"
    });
    app.apply(serde_json::json!([{"name": "probed", "provision_state": "available",
        "ports": [{"address": "52:54:00:dd:00:01"}]}]));
    let uuid = app.show("probed")["node"]["uuid"].as_str().unwrap().to_owned();
    let (mut child, reader, serving) = spawn_logged(app.command(&["serve"]));
    let http = serving.split_whitespace().find_map(|f| f.strip_prefix("http=")).unwrap().to_owned();
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    for _ in 0..200 {
        let reply = agent.post(format!("http://{http}/deploy/{uuid}/token")).send("").unwrap();
        assert_eq!(reply.status().as_u16(), 403);
    }
    for _ in 0..20 {
        let reply = agent
            .post(format!("http://{http}/deploy/{uuid}/callback"))
            .header("X-Bootvol-Token", "guess")
            .header("Content-Type", "application/json")
            .send(r#"{"status": "done", "disk": "/dev/forged"}"#)
            .unwrap();
        assert_eq!(reply.status().as_u16(), 403);
        let reply = agent
            .get(format!("http://{http}/deploy/{uuid}/configdrive"))
            .header("X-Bootvol-Token", "guess")
            .call()
            .unwrap();
        assert_eq!(reply.status().as_u16(), 403);
    }
    reader.wait_for("deploy request refused");
    // The event is written behind the answer: wait for it too.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !app
        .db()
        .events(Some(&uuid), 1000)
        .unwrap()
        .iter()
        .any(|e| e.event_type == "baremetal.node.deploy_refused")
    {
        assert!(std::time::Instant::now() < deadline, "no deploy_refused event");
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = child.wait();
    let lines = reader.join().unwrap();
    let log = lines.join("\n");
    let refused: Vec<&String> =
        lines.iter().filter(|l| l.contains("deploy request refused")).collect();
    assert_eq!(refused.len(), 1, "one log line for 240 refusals:\n{log}");
    assert!(
        refused[0].contains("client=127.0.0.1") && refused[0].contains("count=1"),
        "{}",
        refused[0]
    );
    assert!(lines.len() < 30, "the log stays short ({} lines):\n{log}", lines.len());
    let events: Vec<_> = app
        .db()
        .events(Some(&uuid), 1000)
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type == "baremetal.node.deploy_refused")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let payload = &events[0].payload;
    assert_eq!(payload["client"], "127.0.0.1", "{payload}");
    assert_eq!(payload["endpoint"], "token", "{payload}");
    assert_eq!(payload["count"], 1, "{payload}");
    assert!(payload["client_mac"].is_null(), "{payload}");
    assert!(payload["reason"].as_str().unwrap().contains("no deploy token"), "{payload}");
    assert_eq!(app.show("probed")["node"]["provision_state"], "available", "nothing changed");
}

/// `serve` started from `command` at level info, its log read by a thread (every line, returned
/// when the process ends), once it logged its `serving` line (returned too).
fn spawn_logged(mut command: std::process::Command) -> (std::process::Child, Logged, String) {
    let mut child = command
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let lines: std::sync::Arc<std::sync::Mutex<Vec<String>>> = std::sync::Arc::default();
    let seen = std::sync::Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(" serving ") {
                let _ = tx.send(line.clone());
            }
            seen.lock().unwrap().push(line);
        }
    });
    let serving = rx.recv_timeout(Duration::from_secs(20)).expect("serve started");
    (child, Logged { lines, reader }, serving)
}

/// The log of a [`spawn_logged`] process, read as it is written.
struct Logged {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Logged {
    /// Waits until a line holds `needle` (10 s at most, then fails naming it).
    fn wait_for(&self, needle: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !self.lines.lock().unwrap().iter().any(|l| l.contains(needle)) {
            assert!(std::time::Instant::now() < deadline, "no log line with {needle:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every line, once the process has ended (its stderr closed).
    fn join(self) -> std::thread::Result<Vec<String>> {
        self.reader.join()?;
        Ok(std::mem::take(&mut *self.lines.lock().unwrap()))
    }
}
