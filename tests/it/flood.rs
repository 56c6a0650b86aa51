//! One host floods `bootvol serve` (the real binary, in a child process under a 1,024-descriptor
//! limit, systemd's default soft limit): thousands of idle TCP connections, trickled headers,
//! thousands of TFTP requests from distinct ports. Other clients must still be served.
//!
//! The flooding host is 127.0.0.2 (and 127.0.0.3... for many hosts); the client that must still
//! be served is 127.0.0.1. Linux routes all of 127.0.0.0/8 to loopback.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// `bootvol serve` in a child process under `prlimit --nofile=1024:1024`, on port 0.
struct Flooded {
    child: Child,
    http: SocketAddr,
    tftp: SocketAddr,
    api: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

/// A TFTP file the served client fetches (several blocks).
const FILE_LEN: usize = 5000;

impl Flooded {
    /// Serves with the default caps plus `extra` lines appended to their sections (`[http]`
    /// gets `http_extra`).
    #[allow(clippy::disallowed_methods)] // tests run the real binary
    fn start(http_extra: &str) -> Flooded {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("files");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("undionly.kpxe"), file_contents()).unwrap();
        let config = format!(
            r#"[database]
{db}
[http]
listen = "127.0.0.1:0"
public_url = "http://127.0.0.1:8080"
files_root = "{root}"
{http_extra}
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
        // BOOTVOL_FLOOD_BIN: another build to flood (to see these tests fail on older code).
        let binary = std::env::var("BOOTVOL_FLOOD_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_bootvol").to_owned());
        // The default caps fit 1024 descriptors exactly; PostgreSQL's clients take
        // `POSTGRES_DESCRIPTORS` more.
        let limit = 1024
            + if crate::support::on_postgres() { bootvol::config::POSTGRES_DESCRIPTORS } else { 0 };
        let mut child = Command::new("prlimit")
            .arg(format!("--nofile={limit}:{limit}"))
            .arg(binary)
            .arg("--config")
            .arg(&config_path)
            .arg("serve")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("prlimit (util-linux) runs bootvol");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains(" serving ") {
                    let _ = tx.send(line.clone());
                }
                lines.lock().unwrap().push(line);
            }
        });
        let serving = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("bootvol did not start: {:?}", log.lock().unwrap()));
        let addr = |key: &str| -> SocketAddr {
            serving
                .split_whitespace()
                .find_map(|field| field.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key} in {serving}"))
                .parse()
                .unwrap()
        };
        let (http, tftp, api) = (addr("http="), addr("tftp="), addr("api="));
        Flooded { child, http, tftp, api, log, _dir: dir }
    }

    fn log_contains(&self, text: &str) -> bool {
        self.log.lock().unwrap().iter().any(|line| line.contains(text))
    }

    /// What a client at 127.0.0.1 sees: the generic script over HTTP, the API's root, a file
    /// over TFTP. Each must answer within `wait`.
    fn served(&self, wait: Duration) -> Result<(), String> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(wait))
            .build()
            .into();
        let boot = agent.get(&format!("http://{}/boot.ipxe", self.http)).call();
        match boot {
            Ok(response) if response.status() == 200 => {}
            other => return Err(format!("boot listener: {other:?}")),
        }
        let api = agent.get(&format!("http://{}/v1", self.api)).call();
        match api {
            Ok(response) if response.status() == 200 => {}
            other => return Err(format!("API: {other:?}")),
        }
        let got = tftp_fetch(self.tftp, "127.0.0.1", "undionly.kpxe", wait)?;
        if got != file_contents() {
            return Err(format!("TFTP: {} bytes, not the file", got.len()));
        }
        Ok(())
    }

    /// Descriptors the child's process holds (the `bootvol` under `prlimit`).
    fn open_descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).map_or(0, |d| d.count())
    }
}

impl Drop for Flooded {
    #[allow(clippy::disallowed_methods)]
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn file_contents() -> Vec<u8> {
    (0..FILE_LEN).map(|i| (i % 253) as u8).collect()
}

/// Lets this test process hold the flood's sockets (its soft limit up to its hard limit).
fn raise_own_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn source(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

/// Opens `count` TCP connections from `from` to `to` (connect succeeds in the kernel before the
/// server accepts); the ones the server closes read EOF later.
async fn connect_many(from: IpAddr, to: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(from, 0)).unwrap();
        match tokio::time::timeout(Duration::from_secs(2), socket.connect(to)).await {
            Ok(Ok(stream)) => streams.push(stream),
            // The accept queue is full: the server is refusing as fast as it can.
            _ => break,
        }
    }
    streams
}

/// How many of `streams` the server still holds open (no EOF, no reset).
async fn still_open(streams: &mut [TcpStream]) -> usize {
    let mut open = 0;
    let mut buf = [0u8; 64];
    for stream in streams.iter_mut() {
        match stream.try_read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => open += 1,
            _ => {}
        }
    }
    open
}

#[test]
fn thousands_of_idle_connections_from_one_host_leave_others_served() {
    raise_own_descriptor_limit();
    // Opening 2,000 connections takes seconds on a busy machine: a header timeout longer than
    // that, so that the count below sees the per-client cap, not the timeout.
    let server = Flooded::start("header_timeout = 60");
    server.served(Duration::from_secs(5)).expect("served before the flood");
    let runtime = runtime();
    // Each listener in turn, counted at once.
    let started = Instant::now();
    let (mut boot, boot_open) = runtime.block_on(async {
        let mut boot = connect_many(source(2), server.http, 2000).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let open = still_open(&mut boot).await;
        (boot, open)
    });
    let boot_took = started.elapsed();
    let (api, api_open) = runtime.block_on(async {
        let mut api = connect_many(source(2), server.api, 2000).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let open = still_open(&mut api).await;
        (api, open)
    });
    eprintln!(
        "one host: {} + {} connections made (boot in {boot_took:?}), {boot_open} + {api_open} still open; bootvol holds {} descriptors",
        boot.len(),
        api.len(),
        server.open_descriptors()
    );
    assert_eq!((boot_open, api_open), (64, 64), "max_connections_per_client");
    server.served(Duration::from_secs(5)).expect("served during the flood of one host");
    assert!(server.log_contains("connections refused"), "the refusals are logged");

    // Many hosts (20 × 64 on the boot listener, more than its 400): the connections idle the
    // longest make room, so a new client is still served.
    let mut many = runtime.block_on(async {
        let mut all = Vec::new();
        for host in 3..23 {
            all.extend(connect_many(source(host), server.http, 64).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        all
    });
    let open = runtime.block_on(still_open(&mut many));
    let boot_open = runtime.block_on(still_open(&mut boot));
    eprintln!("20 hosts: {} connections made, {open} still open (+ {boot_open})", many.len());
    assert!(open + boot_open <= 400, "max_connections: {open} + {boot_open} open");
    server.served(Duration::from_secs(5)).expect("served during the flood of many hosts");
    drop((boot, api, many));
}

#[test]
fn trickled_headers_are_cut_off_and_idle_keep_alive_connections_closed_between_requests() {
    raise_own_descriptor_limit();
    let server = Flooded::start("header_timeout = 2\nidle_timeout = 3");
    let runtime = runtime();
    runtime.block_on(async {
        // A header line every 500 ms: never a whole request.
        let mut slow = TcpStream::connect(server.http).await.unwrap();
        slow.write_all(b"GET /boot.ipxe HTTP/1.1\r\n").await.unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 256];
        let cut_after = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let alive = slow.write_all(b"X-Slow: 1\r\n").await.is_ok();
            let closed = match slow.try_read(&mut buf) {
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                Ok(_) => true, // EOF, or an answer: either way no longer waiting for headers
            };
            if !alive || closed {
                break started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "a trickling client is never cut off"
            );
        };
        eprintln!("trickled headers cut off after {cut_after:?} (header_timeout = 2 s)");
        assert!(cut_after >= Duration::from_millis(1500), "cut off too early: {cut_after:?}");

        // Many trickling connections from one host: capped, cut off, others served.
        let mut slow_many = connect_many(source(2), server.http, 500).await;
        for stream in &mut slow_many {
            let _ = stream.write_all(b"GET / HTTP/1.1\r\n").await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let open = still_open(&mut slow_many).await;
        eprintln!("500 trickling connections from one host: {open} held");
        assert!(open <= 64, "{open}");
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(still_open(&mut slow_many).await, 0, "all cut off after header_timeout");

        // A keep-alive connection: answered with Keep-Alive: timeout=3, then closed when idle.
        let mut kept = TcpStream::connect(server.http).await.unwrap();
        kept.write_all(b"GET /boot.ipxe HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut head = Vec::new();
        while !String::from_utf8_lossy(&head).contains("\r\n\r\n") {
            let n = kept.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the answer");
            head.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8_lossy(&head).to_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("keep-alive: timeout=3"), "{head}");
        let idle = Instant::now();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(8), kept.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "an idle keep-alive connection is never closed");
        let closed_after = idle.elapsed();
        eprintln!("idle keep-alive connection closed after {closed_after:?} (idle_timeout = 3 s)");
        assert!(closed_after >= Duration::from_millis(2900), "closed before the announced timeout");
    });
    server.served(Duration::from_secs(5)).expect("served after the slow clients");
}

#[test]
fn thousands_of_tftp_requests_from_distinct_ports_leave_others_served() {
    raise_own_descriptor_limit();
    let server = Flooded::start("");
    // 3,000 requests from 127.0.0.2, each from its own port, none ever acknowledged.
    // Paced (50 every 10 ms), so that the kernel does not drop most of them at the listening
    // socket.
    let sockets: Vec<UdpSocket> = (0..3000)
        .map(|i| {
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
            let socket = UdpSocket::bind((source(2), 0)).unwrap();
            socket.set_nonblocking(true).unwrap();
            socket.send_to(&rrq("undionly.kpxe", &[]), server.tftp).unwrap();
            socket
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let held = server.open_descriptors();
    let during = server.served(Duration::from_secs(5));
    eprintln!("bootvol holds {held} descriptors during the TFTP flood");
    // 20 of its own (32 on PostgreSQL), and one per transfer (32 for the flooding host).
    let own = if crate::support::on_postgres() {
        bootvol::config::RESERVED_DESCRIPTORS + bootvol::config::POSTGRES_DESCRIPTORS
    } else {
        bootvol::config::RESERVED_DESCRIPTORS
    };
    assert!(held as u64 <= own + 32, "{held} descriptors: more than one per transfer");
    // Count what every flooding port received, until the transfers have given up.
    std::thread::sleep(Duration::from_secs(4));
    let mut per_port = Vec::new();
    let mut buf = [0u8; 2048];
    for socket in &sockets {
        let (mut data, mut busy) = (0, 0);
        while let Ok((len, _)) = socket.recv_from(&mut buf) {
            match &buf[..len] {
                [0, 3, ..] => data += 1,
                [0, 5, ..] => busy += 1,
                _ => {}
            }
        }
        per_port.push((data, busy));
    }
    let data: usize = per_port.iter().map(|(d, _)| d).sum();
    let busy: usize = per_port.iter().map(|(_, b)| b).sum();
    let most = per_port.iter().map(|(d, b)| d + b).max().unwrap_or(0);
    eprintln!(
        "3000 RRQs from one host: {data} DATA packets, {busy} busy errors; at most {most} packets to one port"
    );
    during.expect("served during the TFTP flood");
    assert!(most <= 2, "one request made bootvol send {most} packets");
    assert!(data <= 32 * 2, "{data} DATA packets: more transfers than max_transfers_per_client");
    // Requests the kernel dropped (the listening socket's buffer overflows in such a burst) get
    // nothing; the others are told the server is busy.
    assert!(busy >= 2500, "{busy}: the rest are told the server is busy");
    let answered_with_data = per_port.iter().filter(|(d, _)| *d > 0).count();
    assert!(answered_with_data <= 32, "{answered_with_data} transfers for one host");
    server.served(Duration::from_secs(5)).expect("served after the TFTP flood");
}

/// 16 hosts (127.0.0.2..17) flooding with read requests, each from its own port and never
/// acknowledged (each would hold a slot for its retransmissions): at ~96 requests/s in all (the
/// threat review's figure) and at ~192/s (the table full, even with transfers that give up after
/// two packets), for 8 s each, another client's requests are still answered, each with the
/// file, and no flooding port got more than two DATA packets (an 18-byte request draws two of
/// 516 bytes at most).
#[test]
fn sixteen_hosts_flooding_tftp_leave_another_client_answered() {
    raise_own_descriptor_limit();
    let server = Flooded::start("");
    server.served(Duration::from_secs(5)).expect("served before the flood");
    for per_second in [96, 192] {
        let flood = flood_from_sixteen_hosts(server.tftp, per_second);
        eprintln!("16 hosts at {per_second}/s: {flood:?}");
        assert!(flood.rate > f64::from(per_second) * 0.85, "the flood ran at {:.0}/s", flood.rate);
        assert_eq!(flood.answered, flood.asked, "another client refused: {:?}", flood.failures);
        assert!(flood.most_data <= 2, "a request never acknowledged drew {} DATA", flood.most_data);
        if per_second == 192 {
            assert!(flood.busy > 0, "the table never filled: {flood:?}");
        }
        server.served(Duration::from_secs(5)).expect("served after the flood");
    }
}

/// What [`flood_from_sixteen_hosts`] measured.
#[derive(Debug)]
#[allow(dead_code)] // printed
struct TftpFlood {
    requests: usize,
    rate: f64,
    data: usize,
    busy: usize,
    most_data: usize,
    asked: usize,
    answered: usize,
    failures: Vec<String>,
}

/// Floods `tftp` from 127.0.0.2..17 at `per_second` requests for 3 s, then for 8 s more while
/// 127.0.0.1 fetches the file (one request at a time, 100 ms apart); then counts what the
/// flooding ports received.
fn flood_from_sixteen_hosts(tftp: SocketAddr, per_second: u32) -> TftpFlood {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooding = Arc::clone(&stop);
    let flood = std::thread::spawn(move || {
        let (mut sockets, started) = (Vec::new(), Instant::now());
        let request = rrq("undionly.kpxe", &[]);
        let every = Duration::from_secs(1) / per_second;
        while !flooding.load(std::sync::atomic::Ordering::Relaxed) {
            // Paced against the clock.
            let due = started + every * sockets.len() as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let socket = UdpSocket::bind((source(2 + (sockets.len() % 16) as u8), 0)).unwrap();
            socket.set_nonblocking(true).unwrap();
            let _ = socket.send_to(&request, tftp);
            sockets.push(socket);
        }
        (sockets, started.elapsed())
    });
    // Let the flood fill the table before measuring.
    std::thread::sleep(Duration::from_secs(3));
    let (mut asked, mut answered, mut failures) = (0, 0, Vec::new());
    let measuring = Instant::now();
    while measuring.elapsed() < Duration::from_secs(8) {
        asked += 1;
        match tftp_fetch(tftp, "127.0.0.1", "undionly.kpxe", Duration::from_secs(3)) {
            Ok(got) if got == file_contents() => answered += 1,
            Ok(got) => failures.push(format!("{} bytes, not the file", got.len())),
            Err(e) => failures.push(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sockets, flooded_for) = flood.join().unwrap();
    // What each flooding port received, once its transfer has given up.
    std::thread::sleep(Duration::from_secs(3));
    let mut buf = [0u8; 2048];
    let (mut data, mut busy, mut most_data) = (0, 0, 0);
    for socket in &sockets {
        let mut port_data = 0;
        while let Ok((len, _)) = socket.recv_from(&mut buf) {
            match &buf[..len] {
                [0, 3, ..] => port_data += 1,
                [0, 5, ..] => busy += 1,
                _ => {}
            }
        }
        data += port_data;
        most_data = most_data.max(port_data);
    }
    TftpFlood {
        requests: sockets.len(),
        rate: sockets.len() as f64 / flooded_for.as_secs_f64(),
        data,
        busy,
        most_data,
        asked,
        answered,
        failures,
    }
}

fn rrq(file: &str, options: &[(&str, &str)]) -> Vec<u8> {
    let mut packet = vec![0, 1];
    for field in [file, "octet"].into_iter().chain(options.iter().flat_map(|(n, v)| [*n, *v])) {
        packet.extend_from_slice(field.as_bytes());
        packet.push(0);
    }
    packet
}

/// A lock-step TFTP read from `from`, retrying the RRQ on "server busy" until `wait` passed.
fn tftp_fetch(
    server: SocketAddr,
    from: &str,
    file: &str,
    wait: Duration,
) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + wait;
    let socket = UdpSocket::bind((from, 0)).map_err(|e| e.to_string())?;
    socket.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    socket.send_to(&rrq(file, &[]), server).map_err(|e| e.to_string())?;
    let mut received = Vec::new();
    let mut next: u16 = 1;
    let mut buf = [0u8; 1024];
    while Instant::now() < deadline {
        let Ok((len, tid)) = socket.recv_from(&mut buf) else {
            if next == 1 {
                socket.send_to(&rrq(file, &[]), server).map_err(|e| e.to_string())?;
            }
            continue;
        };
        match &buf[..len] {
            [0, 3, hi, lo, data @ ..] if u16::from_be_bytes([*hi, *lo]) == next => {
                received.extend_from_slice(data);
                socket.send_to(&[0, 4, *hi, *lo], tid).map_err(|e| e.to_string())?;
                if data.len() < 512 {
                    return Ok(received);
                }
                next += 1;
            }
            [0, 5, ..] => {
                return Err(format!("TFTP error: {:?}", String::from_utf8_lossy(&buf[4..len])));
            }
            _ => {}
        }
    }
    Err(format!("TFTP: no complete answer within {wait:?} ({} bytes)", received.len()))
}

#[test]
#[allow(clippy::disallowed_methods)] // tests run the real binary
fn check_config_and_serve_refuse_caps_that_do_not_fit_the_descriptor_limit() {
    let dir = tempfile::tempdir().unwrap();
    let write = |extra: &str| {
        let text = format!(
            "[database]\n{}\n[api]\nlisten = \"127.0.0.1:0\"\n[http]\nlisten = \"127.0.0.1:0\"\n[tftp]\nlisten = \"127.0.0.1:0\"\n{extra}",
            crate::support::database(dir.path())
        );
        let path = dir.path().join("bootvol.toml");
        std::fs::write(&path, text).unwrap();
        path
    };
    let run = |limit: &str, config: &std::path::Path, command: &str| {
        Command::new("prlimit")
            .arg(format!("--nofile={limit}"))
            .arg(env!("CARGO_BIN_EXE_bootvol"))
            .arg("--config")
            .arg(config)
            .arg(command)
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    // The defaults fit 1024 descriptors (on PostgreSQL, its clients' few more).
    let limit = 1024
        + if crate::support::on_postgres() { bootvol::config::POSTGRES_DESCRIPTORS } else { 0 };
    let limit = format!("{limit}:{limit}");
    let defaults = write("");
    assert!(run(&limit, &defaults, "check-config").status.success(), "the defaults fit");
    let raised = write("max_transfers = 2000\n");
    for command in ["check-config", "serve"] {
        let output = run(&limit, &raised, command);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{command}: {stderr}");
        for key in
            ["http.max_connections", "api.max_connections", "tftp.max_transfers", &limit[..4]]
        {
            assert!(stderr.contains(key), "{command} does not name {key}: {stderr}");
        }
    }
    // A soft limit below the hard one is raised by serve, so check-config counts the hard one.
    assert!(run("256:4096", &raised, "check-config").status.success());
}
