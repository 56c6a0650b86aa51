//! The API and admin page over TLS (`[api] tls_cert` / `tls_key`), as a client sees the real
//! `bootvol serve`: HTTPS with the test's own self-signed certificate (made by `openssl req`)
//! answers, with `Secure` cookies; plain HTTP to the TLS port gets no HTTP answer; a stalled
//! handshake is cut by `header_timeout`; the certificate's SHA-256 fingerprint is what
//! `check-config` reports and what the console shows beside the one-time password; the
//! loopback listener answers the API alone in plain HTTP; a bad certificate or key stops
//! `check-config` and `serve` with a clear message.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `openssl req`: a self-signed P-256 certificate for 127.0.0.1 into `dir/NAME.crt`/`NAME.key`.
#[allow(clippy::disallowed_methods)] // tests run real tools
fn self_signed(dir: &Path, name: &str) {
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args(["-nodes", "-days", "2", "-subj", "/CN=bootvol-test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(dir.join(format!("{name}.key")))
        .arg("-out")
        .arg(dir.join(format!("{name}.crt")))
        .stderr(Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success(), "openssl req failed");
}

/// What `openssl x509 -fingerprint -sha256` says of `cert`: `AB:CD:...`.
#[allow(clippy::disallowed_methods)] // tests run real tools
fn openssl_fingerprint(cert: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(cert)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.trim().split_once('=').expect("Fingerprint=...").1.to_owned()
}

fn config(dir: &Path, api_extra: &str) -> String {
    format!(
        r#"[database]
{db}
[http]
listen = "127.0.0.1:0"
files_root = "{dir}"
[tftp]
listen = "127.0.0.1:0"
root = "{dir}"
[api]
listen = "127.0.0.1:0"
http_basic_auth_user_file = "{dir}/htpasswd"
first_password_files = ["{dir}/console"]
header_timeout = 2
{api_extra}
"#,
        db = crate::support::database(dir),
        dir = dir.display(),
    )
}

fn tls_keys(dir: &Path, name: &str) -> String {
    format!("tls_cert = \"{d}/{name}.crt\"\ntls_key = \"{d}/{name}.key\"\n", d = dir.display())
}

#[allow(clippy::disallowed_methods)] // tests run the real binary
fn bootvol(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bootvol"))
        .arg("--config")
        .arg(dir.join("bootvol.toml"))
        .args(args)
        .output()
        .unwrap()
}

/// The running `bootvol serve` and its API address.
struct Serving {
    child: Child,
    api: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[allow(clippy::disallowed_methods)] // tests run the real binary
fn serve(dir: &Path) -> Serving {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bootvol"))
        .arg("--config")
        .arg(dir.join("bootvol.toml"))
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains(" serving ") {
                let _ = tx.send(line.clone());
            }
        }
    });
    let serving = rx.recv_timeout(Duration::from_secs(30)).expect("serve started");
    let api = serving.split_whitespace().find_map(|f| f.strip_prefix("api=")).unwrap().to_owned();
    Serving { child, api }
}

/// `curl` over HTTPS, trusting `ca` only: status line and headers, or `None` when it failed.
#[allow(clippy::disallowed_methods)] // tests run real tools
fn curl_https(ca: &Path, url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sS", "-D", "-", "-o", "/dev/null", "--max-time", "10", "--cacert"])
        .arg(ca)
        .arg(url)
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Everything the server sends on `stream` until it closes it (or 10 s), and how long that took.
fn read_until_closed(stream: &mut TcpStream) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    (got, started.elapsed())
}

#[test]
fn the_api_and_admin_page_answer_https_only_and_a_stalled_handshake_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    self_signed(d, "api");
    let loopback = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let extra = format!("{}loopback_listen = \"{loopback}\"\n", tls_keys(d, "api"));
    std::fs::write(d.join("bootvol.toml"), config(d, &extra)).unwrap();
    let fingerprint = openssl_fingerprint(&d.join("api.crt"));

    let checked = bootvol(d, &["check-config"]);
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    assert!(report.contains(&format!("SHA-256 fingerprint {fingerprint}")), "{report}");

    let server = serve(d);
    let ca = d.join("api.crt");
    let base = format!("https://{}", server.api);
    let head = curl_https(&ca, &format!("{base}/v1/")).expect("HTTPS answers");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let login = curl_https(&ca, &format!("{base}/admin/login")).expect("the admin page answers");
    let cookie = login
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {login}"));
    assert!(cookie.contains("; Secure"), "{cookie}");

    // The console shows the address as https and the fingerprint beside the password.
    let shown = std::fs::read_to_string(d.join("console")).unwrap();
    assert!(shown.contains("https://"), "{shown}");
    assert!(shown.contains(&fingerprint) && shown.contains("one-time password: "), "{shown}");

    // Plain HTTP to the TLS port: no HTTP answer, the connection closed at once.
    let mut plain = TcpStream::connect(&server.api).unwrap();
    plain.write_all(b"GET /v1/ HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (got, took) = read_until_closed(&mut plain);
    assert!(!got.starts_with(b"HTTP/"), "{}", String::from_utf8_lossy(&got));
    assert!(took < Duration::from_secs(2), "closed after {took:?}");

    // A handshake that starts and stalls (a TLS record header, then nothing) is cut by
    // header_timeout (2 s), and one that never starts too.
    for first in [&b"\x16\x03\x01\x02\x00"[..], b""] {
        let mut stalled = TcpStream::connect(&server.api).unwrap();
        stalled.write_all(first).unwrap();
        let (got, took) = read_until_closed(&mut stalled);
        assert!(!got.starts_with(b"HTTP/"));
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
            "a stalled handshake was closed after {took:?}"
        );
    }
    // Meanwhile HTTPS still answers.
    assert!(curl_https(&ca, &format!("{base}/v1/")).is_some());

    // Loopback: the REST API in plain HTTP, without the admin page.
    let (status, _, _) = crate::serve::get(&format!("http://{loopback}/v1/"));
    assert_eq!(status, 200);
    let (status, _, _) = crate::serve::get(&format!("http://{loopback}/admin/login"));
    assert_eq!(status, 404);
}

#[test]
fn check_config_and_serve_refuse_a_certificate_they_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    self_signed(d, "one");
    self_signed(d, "two");
    let cases = [
        (format!("tls_cert = \"{}/one.crt\"\n", d.display()), "both or neither"),
        (format!("tls_key = \"{}/one.key\"\n", d.display()), "both or neither"),
        (
            format!("tls_cert = \"{d}/missing.crt\"\ntls_key = \"{d}/one.key\"\n", d = d.display()),
            "api.tls_cert: cannot read",
        ),
        (
            format!("tls_cert = \"{d}/one.key\"\ntls_key = \"{d}/one.key\"\n", d = d.display()),
            "holds no PEM certificate",
        ),
        (
            format!("tls_cert = \"{d}/one.crt\"\ntls_key = \"{d}/one.crt\"\n", d = d.display()),
            "holds no PEM private key",
        ),
        (
            format!("tls_cert = \"{d}/one.crt\"\ntls_key = \"{d}/two.key\"\n", d = d.display()),
            "is not the private key of the certificate",
        ),
        ("loopback_listen = \"0.0.0.0:6386\"\n".to_owned(), "is not a loopback address"),
    ];
    for (extra, expected) in cases {
        std::fs::write(d.join("bootvol.toml"), config(d, &extra)).unwrap();
        for command in ["check-config", "serve"] {
            let out = bootvol(d, &[command]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{command} accepted {extra}");
            assert!(stderr.contains(expected), "{command} with {extra}: {stderr}");
        }
    }
}
