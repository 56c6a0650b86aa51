//! `bootvol serve` under a service manager's protocol (`sd_notify(3)`), with the real binary:
//! the test binds the Unix datagram socket systemd would and passes it as `NOTIFY_SOCKET`,
//! with `WATCHDOG_USEC` set. `READY=1` must come once the listeners answer, `WATCHDOG=1` must
//! keep coming while the process is idle (every loop answers its liveness tick: the TFTP loop,
//! both HTTP accept loops, the snapshot watcher), `bootvol reload PID` (the unit's
//! `ExecReload=`) must reload it, and SIGTERM must bring `STOPPING=1`. That a wedged loop stops
//! the pings is proven at unit level (`liveness`'s tests). And the unit files themselves,
//! through `systemd/check.sh`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every message received until `deadline` or until one contains `until`.
fn receive(socket: &UnixDatagram, deadline: Instant, until: Option<&str>) -> Vec<String> {
    let mut messages = Vec::new();
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        socket.set_read_timeout(Some(left.max(Duration::from_millis(1)))).unwrap();
        let Ok(n) = socket.recv(&mut buf) else { break };
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        let done = until.is_some_and(|u| message.contains(u));
        messages.push(message);
        if done {
            break;
        }
    }
    messages
}

#[test]
#[allow(clippy::disallowed_methods)] // tests run the real binary
fn serve_tells_systemd_it_is_ready_pings_the_watchdog_while_alive_and_says_when_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("undionly.kpxe"), b"not really iPXE").unwrap();
    let config = format!(
        r#"[database]
{db}
[http]
listen = "127.0.0.1:0"
files_root = "{root}"
[tftp]
listen = "127.0.0.1:0"
root = "{root}"
[api]
listen = "127.0.0.1:0"
auth_strategy = "noauth"
"#,
        db = crate::support::database(dir.path()),
        root = root.display(),
    );
    let config_path = dir.path().join("bootvol.toml");
    std::fs::write(&config_path, config).unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bootvol"))
        .arg("--config")
        .arg(&config_path)
        .arg("serve")
        .env("NOTIFY_SOCKET", &socket_path)
        // 1 s: a ping every 0.5 s.
        .env("WATCHDOG_USEC", "1000000")
        .env_remove("WATCHDOG_PID")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let lines = std::sync::Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(" serving ") {
                let _ = tx.send(line.clone());
            }
            lines.lock().unwrap().push(line);
        }
    });

    let first = receive(&socket, Instant::now() + Duration::from_secs(20), Some("READY=1"));
    let ready = first.last().cloned().unwrap_or_default();
    assert!(
        ready.lines().any(|l| l == "READY=1"),
        "no READY=1: {first:?}; log: {:?}",
        log.lock().unwrap()
    );
    assert!(ready.lines().any(|l| l.starts_with("STATUS=serving")), "{ready:?}");
    // When READY=1 arrives, the listeners answer (their sockets were bound before it).
    let serving = rx.recv_timeout(Duration::from_secs(5)).expect("the serving line");
    let addr = |key: &str| -> SocketAddr {
        serving
            .split_whitespace()
            .find_map(|field| field.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {serving}"))
            .parse()
            .unwrap()
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let boot = agent.get(&format!("http://{}/boot.ipxe", addr("http="))).call().unwrap();
    assert_eq!(boot.status(), 200);
    let readyz = agent.get(&format!("http://{}/readyz", addr("api="))).call().unwrap();
    assert_eq!(readyz.status(), 200, "/readyz and READY=1 agree");
    let tftp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    tftp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    tftp.send_to(b"\x00\x01undionly.kpxe\x00octet\x00", addr("tftp=")).unwrap();
    let mut reply = [0u8; 600];
    let (n, _) = tftp.recv_from(&mut reply).expect("TFTP answers");
    assert_eq!(&reply[..4], b"\x00\x03\x00\x01", "the first DATA block");
    assert_eq!(&reply[4..n], b"not really iPXE");

    // Idle for 3 s: with a 1 s watchdog, a ping every half second.
    let idle = receive(&socket, Instant::now() + Duration::from_secs(3), None);
    let pings = idle.iter().filter(|m| m.lines().any(|l| l == "WATCHDOG=1")).count();
    assert!((4..=8).contains(&pings), "{pings} pings in 3 s: {idle:?}");

    // The unit's ExecReload=: SIGHUP without a `kill` binary.
    let reload = Command::new(env!("CARGO_BIN_EXE_bootvol"))
        .args(["reload", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(reload.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !log.lock().unwrap().iter().any(|l| l.contains("SIGHUP: reloading")) {
        assert!(Instant::now() < deadline, "no reload: {:?}", log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let last = receive(&socket, Instant::now() + Duration::from_secs(10), Some("STOPPING=1"));
    assert!(
        last.iter().any(|m| m.lines().any(|l| l == "STOPPING=1")),
        "no STOPPING=1 after SIGTERM: {last:?}"
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {:?}", log.lock().unwrap());
}

/// `systemd/check.sh` with this build as `/usr/bin/bootvol`: `systemd-analyze verify` of the
/// unit against a staged tree, sysusers.d and tmpfiles.d applied to it, the sysctl.d keys, and
/// `systemd-analyze security --offline=true` at most 1.6. Skipped without systemd-analyze unless
/// `BOOTVOL_REQUIRE_SYSTEMD=1`.
#[test]
#[allow(clippy::disallowed_methods)] // tests run the real script
fn the_unit_verifies_and_its_exposure_is_at_most_1_5() {
    let present = Command::new("systemd-analyze")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        crate::skip::skip(crate::skip::SYSTEMD, "`systemd-analyze` not installed");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/check.sh");
    let output = Command::new(script).arg(env!("CARGO_BIN_EXE_bootvol")).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("Overall exposure level for bootvol.service"), "{stdout}");
}
