//! The TFTP server as clients see it: real clients (curl, atftp, tftp-hpa) fetch files and the
//! bytes are compared; raw UDP drives the cases clients cannot be made to produce (the PXE tsize
//! probe of async-tftp issue #18, foreign TIDs, write requests, retries, shutdown).
//!
//! Without a client binary its test is skipped, saying so (`crate::skip`), unless
//! `BOOTVOL_REQUIRE_TFTP_CLIENTS=1` (CI), where it fails.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bootvol_tftp::{Handler, TftpConfig, TftpError, serve};
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------------
// The server under test

/// Files from a directory (no `..`, no absolute escape) plus in-memory files by name.
#[derive(Debug)]
struct TestHandler {
    root: PathBuf,
    memory: HashMap<String, Bytes>,
}

impl Handler for TestHandler {
    async fn read(&self, path: &str, _peer: SocketAddr) -> Result<Bytes, TftpError> {
        let path = path.trim_start_matches('/');
        if let Some(contents) = self.memory.get(path) {
            return Ok(contents.clone());
        }
        if path.split('/').any(|part| part == "..") {
            return Err(TftpError::AccessViolation("path leaves the root".into()));
        }
        match tokio::fs::read(self.root.join(path)).await {
            Ok(contents) => Ok(contents.into()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(TftpError::NotFound),
            Err(e) => Err(TftpError::Io(e)),
        }
    }
}

/// A running `serve` on 127.0.0.1 with its own runtime on a background thread.
struct Server {
    addr: SocketAddr,
    dir: tempfile::TempDir,
    shutdown: CancellationToken,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Server {
    /// Writes `files` under a temporary root and serves it, plus the in-memory file
    /// `memory/script.ipxe`.
    fn start(files: &[(&str, &[u8])], config: TftpConfig, drain: Duration) -> Server {
        let dir = tempfile::tempdir().unwrap();
        for (name, contents) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        let memory = HashMap::from([("memory/script.ipxe".to_owned(), Bytes::from(SCRIPT))]);
        let handler = Arc::new(TestHandler { root: dir.path().to_owned(), memory });
        let shutdown = CancellationToken::new();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let token = shutdown.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(socket.local_addr().unwrap()).unwrap();
                serve(socket, handler, config, token, drain).await
            })
        });
        let addr = addr_rx.recv_timeout(Duration::from_secs(10)).expect("server started");
        Server { addr, dir, shutdown, thread: Some(thread) }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Cancels the shutdown token and waits for `serve` to return.
    fn stop(mut self) -> std::io::Result<()> {
        self.shutdown.cancel();
        self.thread.take().unwrap().join().expect("serve thread panicked")
    }
}

/// Every test's server is joined when the test ends, and an error or panic in `serve` fails it.
impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            crate::support::join_server("the TFTP server", thread);
        }
    }
}

const SCRIPT: &[u8] = b"#!ipxe\necho rendered in memory\nexit\n";

/// Deterministic pseudo-random bytes (xorshift), so a shifted or repeated block cannot match.
fn contents(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn fast_config() -> TftpConfig {
    TftpConfig { timeout: Duration::from_millis(300), ..TftpConfig::default() }
}

// ---------------------------------------------------------------------------------------------
// Real clients

/// Whether `tool` is on PATH; the test is skipped (`crate::skip`) when not, unless
/// `BOOTVOL_REQUIRE_TFTP_CLIENTS=1`.
fn have_tool(tool: &str) -> bool {
    crate::skip::have(crate::skip::TFTP_CLIENTS, &[tool])
}

/// Runs a client under coreutils' `timeout`, so that a hung transfer fails the test.
#[allow(clippy::disallowed_methods)] // tests start the real clients
fn run(program: &str, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("120")
        .arg(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn assert_same_file(out: &Path, expected: &[u8], what: &str) {
    let got = std::fs::read(out).unwrap_or_else(|e| panic!("{what}: no output file: {e}"));
    assert_eq!(got.len(), expected.len(), "{what}: size differs");
    if let Some(at) = got.iter().zip(expected).position(|(a, b)| a != b) {
        panic!("{what}: first difference at byte {at}");
    }
}

#[test]
fn curl_fetches_files_byte_for_byte() {
    if !have_tool("curl") {
        return;
    }
    let one_mib = contents(1 << 20, 1);
    let exact = contents(1468 * 100, 2); // ends with an empty DATA block
    let server = Server::start(
        &[("boot/one.bin", &one_mib), ("exact.bin", &exact), ("empty", b"")],
        TftpConfig::default(),
        Duration::ZERO,
    );
    let out = server.root().join("out");
    let cases: [(&str, &[u8], &[&str]); 5] = [
        ("boot/one.bin", &one_mib, &["--tftp-blksize", "1468"]),
        ("exact.bin", &exact, &["--tftp-blksize", "1468"]),
        ("boot/one.bin", &one_mib, &[]),
        ("empty", b"", &["--tftp-blksize", "1468"]),
        ("memory/script.ipxe", SCRIPT, &["--tftp-blksize", "1468"]),
    ];
    for (file, expected, extra) in cases {
        let url = format!("tftp://{}/{file}", server.addr);
        let out_arg = out.to_str().unwrap();
        let mut args = vec!["-sS", "--max-time", "60", "-o", out_arg];
        args.extend_from_slice(extra);
        args.push(&url);
        let output = run("curl", &args);
        assert!(output.status.success(), "curl {file} {extra:?}: {output:?}");
        assert_same_file(&out, expected, &format!("curl {file} {extra:?}"));
    }

    // curl's exit codes for TFTP "not found" (68) and "permission denied" (69).
    let missing = run("curl", &["-s", "-o", "/dev/null", &format!("tftp://{}/nope", server.addr)]);
    assert_eq!(missing.status.code(), Some(68), "{missing:?}");
    let escape = run(
        "curl",
        &[
            "-s",
            "--path-as-is",
            "-o",
            "/dev/null",
            &format!("tftp://{}/a/../../etc/passwd", server.addr),
        ],
    );
    assert_eq!(escape.status.code(), Some(69), "{escape:?}");
}

#[test]
fn atftp_fetches_with_blksize_1468_and_windowsize_8() {
    if !have_tool("atftp") {
        return;
    }
    let ten_mib = contents(10 << 20, 3);
    let exact = contents(1468 * 8 * 20, 4); // whole windows, then the empty block
    let odd = contents(1468 * 8 * 3 + 5, 5); // a short last window
    let server = Server::start(
        &[("ten.bin", &ten_mib), ("exact.bin", &exact), ("odd.bin", &odd)],
        TftpConfig::default(),
        Duration::ZERO,
    );
    let out = server.root().join("out");
    let port = server.addr.port().to_string();
    for (file, expected) in [("ten.bin", &ten_mib), ("exact.bin", &exact), ("odd.bin", &odd)] {
        let out_arg = out.to_str().unwrap();
        let args = [
            "--option",
            "blksize 1468",
            "--option",
            "windowsize 8",
            "-g",
            "-r",
            file,
            "-l",
            out_arg,
            "127.0.0.1",
            &port,
        ];
        let output = run("atftp", &args);
        assert!(output.status.success(), "atftp {file}: {output:?}");
        assert_same_file(&out, expected, &format!("atftp {file}"));
    }
}

/// tftp-hpa sends no options: 512-byte lock-step, and over 32 MiB the block number rolls over.
#[test]
fn tftp_hpa_fetches_in_512_byte_lock_step_past_the_roll_over() {
    if !have_tool("tftp") {
        return;
    }
    let small = contents(5000, 6);
    let exact = contents(512 * 64, 7);
    let big = contents(33 << 20, 8); // 67 584 blocks of 512 bytes: past 65535
    let server = Server::start(
        &[("small.bin", &small), ("exact.bin", &exact), ("big.bin", &big)],
        TftpConfig::default(),
        Duration::ZERO,
    );
    let out = server.root().join("out");
    let port = server.addr.port().to_string();
    for (file, expected) in [
        ("small.bin", &small[..]),
        ("exact.bin", &exact),
        ("memory/script.ipxe", SCRIPT),
        ("big.bin", &big),
    ] {
        let _ = std::fs::remove_file(&out);
        let out_arg = out.to_str().unwrap();
        let output = run("tftp", &["-m", "octet", "127.0.0.1", &port, "-c", "get", file, out_arg]);
        assert!(output.status.success(), "tftp {file}: {output:?}");
        assert_same_file(&out, expected, &format!("tftp-hpa {file}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Raw UDP

/// A client socket with helpers to build and read packets by hand (not with the server's code,
/// so the wire format is checked independently).
struct Raw {
    socket: UdpSocket,
    server: SocketAddr,
}

#[derive(Debug, PartialEq, Eq)]
enum Got {
    Data(u16, Vec<u8>),
    Oack(Vec<(String, String)>),
    Error(u16, String),
    Other(Vec<u8>),
}

impl Raw {
    fn new(server: SocketAddr) -> Raw {
        Raw::from_ip(server, "127.0.0.1")
    }

    /// A client at another loopback address (another host, as the server sees it).
    fn from_ip(server: SocketAddr, ip: &str) -> Raw {
        let socket = UdpSocket::bind((ip, 0)).unwrap();
        Raw { socket, server }
    }

    fn request(&self, opcode: u8, file: &str, mode: &str, options: &[(&str, &str)]) {
        let mut packet = vec![0, opcode];
        for field in [file, mode].into_iter().chain(options.iter().flat_map(|(n, v)| [*n, *v])) {
            packet.extend_from_slice(field.as_bytes());
            packet.push(0);
        }
        self.socket.send_to(&packet, self.server).unwrap();
    }

    fn rrq(&self, file: &str, options: &[(&str, &str)]) {
        self.request(1, file, "octet", options);
    }

    fn ack(&self, to: SocketAddr, block: u16) {
        let [hi, lo] = block.to_be_bytes();
        self.socket.send_to(&[0, 4, hi, lo], to).unwrap();
    }

    fn error(&self, to: SocketAddr, code: u16, message: &str) {
        let [hi, lo] = code.to_be_bytes();
        let mut packet = vec![0, 5, hi, lo];
        packet.extend_from_slice(message.as_bytes());
        packet.push(0);
        self.socket.send_to(&packet, to).unwrap();
    }

    /// The next packet within `wait`, or None.
    fn recv(&self, wait: Duration) -> Option<(Got, SocketAddr)> {
        self.socket.set_read_timeout(Some(wait)).unwrap();
        let mut buf = vec![0u8; 70_000];
        let (len, from) = match self.socket.recv_from(&mut buf) {
            Ok(received) => received,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None;
            }
            Err(e) => panic!("recv: {e}"),
        };
        Some((decode(&buf[..len]), from))
    }

    fn expect(&self, what: &str) -> (Got, SocketAddr) {
        self.recv(Duration::from_secs(3)).unwrap_or_else(|| panic!("no packet: expected {what}"))
    }

    /// Receives DATA `block` from `tid`, failing on anything else.
    fn expect_data(&self, tid: SocketAddr, block: u16) -> Vec<u8> {
        match self.expect(&format!("DATA {block}")) {
            (Got::Data(got, data), from) if got == block && from == tid => data,
            other => panic!("expected DATA {block} from {tid}, got {other:?}"),
        }
    }

    /// Packets arriving within `wait`.
    fn drain(&self, wait: Duration) -> Vec<(Got, SocketAddr)> {
        let end = Instant::now() + wait;
        let mut got = Vec::new();
        while let Some(left) = end.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
            match self.recv(left) {
                Some(packet) => got.push(packet),
                None => break,
            }
        }
        got
    }

    /// Lock-step download from `tid`, DATA 1 (already received as `first`) onwards.
    fn finish_lock_step(&self, tid: SocketAddr, first: Vec<u8>, block_size: usize) -> Vec<u8> {
        let mut file = Vec::new();
        let mut data = first;
        let mut block: u16 = 1;
        loop {
            let last = data.len() < block_size;
            file.extend_from_slice(&data);
            self.ack(tid, block);
            if last {
                return file;
            }
            block = block.wrapping_add(1);
            data = self.expect_data(tid, block);
        }
    }
}

fn decode(bytes: &[u8]) -> Got {
    let strings = |body: &[u8]| -> Vec<String> {
        let body = body.strip_suffix(&[0]).unwrap_or(body);
        body.split(|&b| b == 0).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
    };
    match bytes {
        [0, 3, hi, lo, data @ ..] => Got::Data(u16::from_be_bytes([*hi, *lo]), data.to_vec()),
        [0, 5, hi, lo, message @ ..] => {
            Got::Error(u16::from_be_bytes([*hi, *lo]), strings(message).concat())
        }
        [0, 6, body @ ..] => {
            let fields = strings(body);
            Got::Oack(fields.chunks(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect())
        }
        other => Got::Other(other.to_vec()),
    }
}

fn oack(pairs: &[(&str, &str)]) -> Got {
    Got::Oack(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect())
}

/// async-tftp issue #18, as PXE firmware does it: RRQ with tsize=0, OACK, ERROR 8, then the
/// real RRQ from the same source port. The second request must be served at once and the
/// first transfer must be silent from the ERROR on.
#[test]
fn tsize_probe_abort_then_rerequest_from_the_same_port_is_served_at_once() {
    let file = contents(3000, 9);
    let server = Server::start(&[("pxe.bin", &file)], fast_config(), Duration::ZERO);
    let client = Raw::new(server.addr);

    client.rrq("pxe.bin", &[("tsize", "0"), ("blksize", "1468")]);
    let (got, probe_tid) = client.expect("OACK");
    assert_eq!(got, oack(&[("blksize", "1468"), ("tsize", "3000")]));
    assert_ne!(probe_tid, server.addr, "a transfer answers from its own port");
    client.error(probe_tid, 8, "tsize probe done");
    // With a 300 ms timeout, an ignored ERROR would show as OACK retransmissions by now.
    let late = client.drain(Duration::from_millis(700));
    assert!(late.is_empty(), "packets after the client's ERROR: {late:?}");

    let asked = Instant::now();
    client.rrq("pxe.bin", &[]);
    let (got, tid) = client.expect("DATA 1");
    let Got::Data(1, first) = got else { panic!("expected DATA 1, got {got:?}") };
    assert!(asked.elapsed() < Duration::from_secs(1), "DATA 1 took {:?}", asked.elapsed());
    assert_ne!(tid, probe_tid);
    assert_eq!(client.finish_lock_step(tid, first, 512), file);

    let late = client.drain(Duration::from_millis(700));
    assert!(late.is_empty(), "packets after the transfer: {late:?}");
}

/// The same without the ERROR: a second RRQ from the same address and port replaces the open
/// transfer, whose socket then falls silent.
#[test]
fn a_new_request_from_the_same_port_replaces_the_open_transfer() {
    let file = contents(2000, 10);
    let server = Server::start(&[("a.bin", &file)], fast_config(), Duration::ZERO);
    let client = Raw::new(server.addr);

    client.rrq("a.bin", &[("tsize", "0")]);
    let (got, old_tid) = client.expect("OACK");
    assert_eq!(got, oack(&[("tsize", "2000")]));

    client.rrq("a.bin", &[]);
    let (got, tid) = client.expect("DATA 1");
    let Got::Data(1, first) = got else { panic!("expected DATA 1, got {got:?}") };
    assert_ne!(tid, old_tid);
    assert_eq!(client.finish_lock_step(tid, first, 512), file);
    let late = client.drain(Duration::from_millis(1200));
    assert!(late.is_empty(), "the replaced transfer kept sending: {late:?}");
}

/// Some clients send their ERROR to the listening port rather than to the transfer's: it still
/// ends their transfer.
#[test]
fn an_error_sent_to_the_listening_port_ends_the_peers_transfer() {
    let server = Server::start(&[("e.bin", &contents(100, 18))], fast_config(), Duration::ZERO);
    let client = Raw::new(server.addr);
    client.rrq("e.bin", &[("tsize", "0")]);
    let (got, _) = client.expect("OACK");
    assert_eq!(got, oack(&[("tsize", "100")]));
    client.error(server.addr, 8, "probe done");
    let late = client.drain(Duration::from_millis(1200));
    assert!(late.is_empty(), "OACK retransmitted after the ERROR: {late:?}");
}

#[test]
fn write_requests_are_refused_and_nothing_is_written() {
    let server = Server::start(&[], TftpConfig::default(), Duration::ZERO);
    let client = Raw::new(server.addr);
    client.request(2, "upload.bin", "octet", &[]);
    match client.expect("ERROR") {
        (Got::Error(code, _), _) => assert!(code == 2 || code == 4, "error code {code}"),
        other => panic!("expected ERROR, got {other:?}"),
    }
    // Whatever the client does next, nothing lands in the root.
    client.socket.send_to(b"\x00\x03\x00\x01payload", server.addr).unwrap();
    let late = client.drain(Duration::from_millis(300));
    assert!(late.is_empty(), "{late:?}");
    let entries: Vec<_> = std::fs::read_dir(server.root()).unwrap().collect();
    assert!(entries.is_empty(), "files appeared: {entries:?}");
}

#[test]
fn a_packet_from_a_foreign_tid_gets_error_5_and_the_transfer_goes_on() {
    let file = contents(512 * 3 + 100, 11);
    let server = Server::start(&[("f.bin", &file)], TftpConfig::default(), Duration::ZERO);
    let client = Raw::new(server.addr);
    let intruder = Raw::new(server.addr);

    client.rrq("f.bin", &[]);
    let (got, tid) = client.expect("DATA 1");
    let Got::Data(1, first) = got else { panic!("expected DATA 1, got {got:?}") };

    intruder.ack(tid, 1);
    match intruder.expect("ERROR 5") {
        (Got::Error(5, _), from) => assert_eq!(from, tid),
        other => panic!("expected ERROR 5, got {other:?}"),
    }
    // An ERROR from a foreign TID is not answered (two servers must not ping-pong ERRORs).
    intruder.error(tid, 5, "unknown transfer ID");
    assert_eq!(intruder.recv(Duration::from_millis(300)), None);
    // The intruder's packets did not disturb the transfer: the client still gets everything.
    assert_eq!(client.finish_lock_step(tid, first, 512), file);
}

#[test]
fn windowed_transfer_resends_only_the_unacknowledged_suffix() {
    let file = contents(512 * 10 + 7, 12); // 11 blocks
    let server = Server::start(&[("w.bin", &file)], TftpConfig::default(), Duration::ZERO);
    let client = Raw::new(server.addr);
    client.rrq("w.bin", &[("blksize", "512"), ("windowsize", "4"), ("unknown", "1")]);
    let (got, tid) = client.expect("OACK");
    assert_eq!(got, oack(&[("blksize", "512"), ("windowsize", "4")]), "unknown option ignored");
    client.ack(tid, 0);
    let blocks = |range: std::ops::RangeInclusive<u16>| -> Vec<Vec<u8>> {
        range.map(|block| client.expect_data(tid, block)).collect()
    };
    // ACK 0 showed the client is there: windows of 4 from block 1.
    let first = blocks(1..=4);
    client.ack(tid, 2); // as if 3 and 4 were lost
    let second = blocks(3..=6);
    assert_eq!(second[..2], first[2..], "the suffix 3..4 is sent again");
    client.ack(tid, 6);
    let third = blocks(7..=10);
    client.ack(tid, 10);
    let last = blocks(11..=11);
    client.ack(tid, 11);
    let got: Vec<u8> = [&first[..2], &second[..], &third[..], &last[..]].concat().concat();
    assert_eq!(got, file);
    assert!(client.drain(Duration::from_millis(300)).is_empty());
}

#[test]
fn oack_caps_and_tsize_follow_the_configuration() {
    let file = contents(4321, 13);
    let config = TftpConfig { max_block_size: 1024, max_window_size: 2, ..TftpConfig::default() };
    let server = Server::start(&[("c.bin", &file)], config, Duration::ZERO);
    let client = Raw::new(server.addr);
    client.rrq(
        "c.bin",
        &[("BLKSIZE", "8192"), ("WindowSize", "64"), ("tsize", "0"), ("timeout", "2")],
    );
    let (got, _) = client.expect("OACK");
    assert_eq!(
        got,
        oack(&[("blksize", "1024"), ("timeout", "2"), ("tsize", "4321"), ("windowsize", "2")])
    );
}

#[test]
fn retransmits_after_the_timeout_then_gives_up() {
    let file = contents(2000, 14);
    let config =
        TftpConfig { timeout: Duration::from_millis(150), max_retries: 2, ..TftpConfig::default() };
    let server = Server::start(&[("r.bin", &file)], config, Duration::ZERO);
    let client = Raw::new(server.addr);
    client.rrq("r.bin", &[]);
    let got = client.drain(Duration::from_millis(1500));
    let data_1: Vec<_> = got.iter().filter(|(p, _)| matches!(p, Got::Data(1, _))).collect();
    assert_eq!(data_1.len(), 2, "one send and one retransmission, then silence: {got:?}");
    assert_eq!(got.len(), 2, "{got:?}");
}

/// A request from a forged source is never acknowledged: it draws two DATA packets of one block
/// at most, or two OACKs, whatever window was asked. A client that acknowledged the OACK (ACK 0:
/// it received it at its address) is there, and gets the agreed window at once: a windowed
/// client that waits for a full window before it acknowledges must not wait for its timeout.
#[test]
fn a_request_never_acknowledged_draws_at_most_two_data_packets() {
    let file = contents(512 * 40, 24);
    let config = TftpConfig { max_retries: 5, ..fast_config() };
    let server = Server::start(&[("f.bin", &file)], config, Duration::ZERO);
    // An 18-byte request without options.
    let forged = Raw::new(server.addr);
    forged.rrq("f.bin", &[]);
    let got = forged.drain(Duration::from_millis(1500));
    let data = got.iter().filter(|(p, _)| matches!(p, Got::Data(..))).count();
    eprintln!("no options: {data} DATA packets: {got:?}");
    assert_eq!(data, 2, "{got:?}");
    // windowsize 16 agreed and ACK 0 sent: the window of 16 at once.
    let windowed = Raw::new(server.addr);
    windowed.rrq("f.bin", &[("blksize", "512"), ("windowsize", "16")]);
    let (got, tid) = windowed.expect("OACK");
    assert_eq!(got, oack(&[("blksize", "512"), ("windowsize", "16")]));
    windowed.ack(tid, 0);
    let got = windowed.drain(Duration::from_millis(1500));
    let blocks: Vec<u16> = got
        .iter()
        .filter_map(|(p, _)| if let Got::Data(b, _) = p { Some(*b) } else { None })
        .collect();
    eprintln!("windowsize 16 and ACK 0: DATA blocks {blocks:?}");
    assert_eq!(blocks[..16], (1..=16).collect::<Vec<u16>>(), "{got:?}");
    // The OACK itself, never acknowledged: twice.
    let silent = Raw::new(server.addr);
    silent.rrq("f.bin", &[("windowsize", "16")]);
    let got = silent.drain(Duration::from_millis(1500));
    assert_eq!(got.iter().filter(|(p, _)| matches!(p, Got::Oack(_))).count(), 2, "{got:?}");
    assert_eq!(got.len(), 2, "{got:?}");
}

/// Duplicate ACKs are ignored (no Sorcerer's Apprentice) but must not push the retransmission
/// back either: a client repeating its ACK still gets the lost block again after the timeout.
#[test]
fn duplicate_acks_neither_trigger_nor_postpone_the_retransmission() {
    let file = contents(2000, 19);
    let server = Server::start(&[("dup.bin", &file)], fast_config(), Duration::ZERO);
    let client = Raw::new(server.addr);
    client.rrq("dup.bin", &[]);
    let (got, tid) = client.expect("DATA 1");
    assert!(matches!(got, Got::Data(1, _)), "{got:?}");
    let sent = Instant::now();
    let resent = loop {
        assert!(sent.elapsed() < Duration::from_secs(2), "DATA 1 never retransmitted");
        client.ack(tid, 0); // "I still want block 1", every 50 ms
        match client.recv(Duration::from_millis(50)) {
            Some((Got::Data(1, _), from)) if from == tid => break sent.elapsed(),
            Some(other) => panic!("unexpected {other:?}"),
            None => {}
        }
    };
    // The 300 ms timeout, not the ACKs, decides: not at once, and not pushed back 50 ms a time.
    assert!(resent >= Duration::from_millis(250), "resent after {resent:?}: answered a duplicate");
    assert!(resent < Duration::from_millis(700), "resent after {resent:?}");
}

#[test]
fn errors_are_mapped_to_tftp_codes_and_malformed_requests_get_error_4() {
    let server = Server::start(&[("ok.bin", b"fine")], TftpConfig::default(), Duration::ZERO);
    let client = Raw::new(server.addr);
    let expect_error = |what: &str| match client.expect(what) {
        (Got::Error(code, _), _) => code,
        other => panic!("{what}: expected ERROR, got {other:?}"),
    };
    client.rrq("missing.bin", &[]);
    assert_eq!(expect_error("not found"), 1);
    client.rrq("../secret", &[]);
    assert_eq!(expect_error("access violation"), 2);
    client.request(1, "ok.bin", "mail", &[]);
    assert_eq!(expect_error("mode refused"), 4);
    client.socket.send_to(b"\x00\x01no-nul-anywhere", server.addr).unwrap();
    assert_eq!(expect_error("unterminated file name"), 4);
    client.socket.send_to(b"\x07", server.addr).unwrap();
    assert_eq!(expect_error("one byte"), 4);
    client.socket.send_to(b"\x00\x09abc", server.addr).unwrap();
    assert_eq!(expect_error("unknown opcode"), 4);
    // An ERROR sent to the listening port is not answered (no error ping-pong).
    client.error(server.addr, 0, "hello");
    assert!(client.drain(Duration::from_millis(300)).is_empty());
    // And the server still works.
    client.rrq("ok.bin", &[]);
    let (got, _) = client.expect("DATA 1");
    assert_eq!(got, Got::Data(1, b"fine".to_vec()));
}

#[test]
fn shutdown_lets_a_transfer_in_flight_finish_and_answers_no_new_request() {
    let file = contents(512 * 4 + 1, 15);
    let server = Server::start(&[("d.bin", &file)], TftpConfig::default(), Duration::from_secs(10));
    let client = Raw::new(server.addr);
    client.rrq("d.bin", &[]);
    let (got, tid) = client.expect("DATA 1");
    let Got::Data(1, first) = got else { panic!("expected DATA 1, got {got:?}") };

    server.shutdown.cancel();
    // Once the server has seen the shutdown (the first request it leaves unanswered), no new
    // request is answered.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let probe = Raw::new(server.addr);
        probe.rrq("d.bin", &[]);
        let Some((_, tid)) = probe.recv(Duration::from_millis(100)) else { break };
        probe.error(tid, 0, "probe"); // ends the transfer it started: nothing left to drain
        assert!(Instant::now() < deadline, "requests still answered 5 s after the shutdown");
    }
    let late = Raw::new(server.addr);
    late.rrq("d.bin", &[]);
    assert_eq!(
        late.recv(Duration::from_millis(500)),
        None,
        "a request after shutdown was answered"
    );

    assert_eq!(client.finish_lock_step(tid, first, 512), file);
    let stopping = Instant::now();
    server.stop().unwrap();
    assert!(stopping.elapsed() < Duration::from_secs(5), "serve waited {:?}", stopping.elapsed());
}

#[test]
fn shutdown_waits_no_longer_than_the_drain_period_then_stops_transfers() {
    let server = Server::start(
        &[("s.bin", &contents(5000, 16))],
        TftpConfig::default(),
        Duration::from_millis(300),
    );
    let client = Raw::new(server.addr);
    client.rrq("s.bin", &[]);
    let (got, _) = client.expect("DATA 1");
    assert!(matches!(got, Got::Data(1, _)), "{got:?}");
    // The client never acknowledges: the transfer would retransmit after 1 s, for 6 s.
    let stopping = Instant::now();
    server.stop().unwrap();
    let took = stopping.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(900),
        "stop took {took:?}"
    );
    let late = client.drain(Duration::from_millis(1500));
    assert!(late.is_empty(), "the aborted transfer kept sending: {late:?}");
}

/// 500 clients at once, each a lock-step blksize 1468 client with retries, fetching 100 KiB.
#[test]
fn five_hundred_simultaneous_clients_all_get_the_file() {
    let file = contents(100 << 10, 17);
    // All 500 come from 127.0.0.1: the caps are set above them (this checks concurrency).
    let config =
        TftpConfig { max_transfers: 500, max_transfers_per_client: 500, ..TftpConfig::default() };
    let server = Server::start(&[("many.bin", &file)], config, Duration::ZERO);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let results = runtime.block_on(async {
        let clients: Vec<_> =
            (0..500).map(|_| tokio::spawn(fetch_with_retries(server.addr, "many.bin"))).collect();
        let mut results = Vec::new();
        for client in clients {
            results.push(client.await.unwrap());
        }
        results
    });
    let failures: Vec<_> = results.iter().filter(|r| r.as_deref() != Ok(&file[..])).collect();
    assert!(
        failures.is_empty(),
        "{} of 500 failed, e.g. {:?}",
        failures.len(),
        failures[0].as_ref().err()
    );
}

/// A minimal lock-step client (blksize 1468) that retries like a real one: resends its last
/// ACK (or the RRQ) on a 1 s timeout, up to 10 times.
async fn fetch_with_retries(server: SocketAddr, file: &str) -> Result<Vec<u8>, String> {
    const BLOCK: usize = 1468;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let mut rrq = vec![0, 1];
    for field in [file, "octet", "blksize", "1468"] {
        rrq.extend_from_slice(field.as_bytes());
        rrq.push(0);
    }
    let mut buf = vec![0u8; 2048];
    let mut tid: Option<SocketAddr> = None;
    let mut received = Vec::new();
    let mut next: u16 = 1;
    let mut last_sent = rrq.clone();
    socket.send_to(&rrq, server).await.map_err(|e| e.to_string())?;
    let mut timeouts = 0;
    loop {
        let wait = tokio::time::timeout(Duration::from_secs(1), socket.recv_from(&mut buf)).await;
        let Ok(Ok((len, from))) = wait else {
            timeouts += 1;
            if timeouts > 10 {
                return Err(format!("gave up at block {next}"));
            }
            socket.send_to(&last_sent, tid.unwrap_or(server)).await.map_err(|e| e.to_string())?;
            continue;
        };
        if *tid.get_or_insert(from) != from {
            continue;
        }
        let ack_of = |block: u16| {
            let [hi, lo] = block.to_be_bytes();
            vec![0, 4, hi, lo]
        };
        match &buf[..len] {
            [0, 6, ..] if next == 1 => last_sent = ack_of(0),
            [0, 3, hi, lo, data @ ..] if u16::from_be_bytes([*hi, *lo]) == next => {
                received.extend_from_slice(data);
                last_sent = ack_of(next);
                if data.len() < BLOCK {
                    socket.send_to(&last_sent, from).await.map_err(|e| e.to_string())?;
                    return Ok(received);
                }
                next = next.wrapping_add(1);
            }
            [0, 5, ..] => return Err(format!("{:?}", decode(&buf[..len]))),
            _ => continue, // duplicate: the timeout path re-sends our last ACK
        }
        socket.send_to(&last_sent, from).await.map_err(|e| e.to_string())?;
    }
}

#[test]
fn past_the_transfer_cap_new_requests_are_told_the_server_is_busy() {
    let file = contents(10_000, 21);
    let config = TftpConfig { max_transfers: 1, ..fast_config() };
    let server = Server::start(&[("cap.bin", &file)], config, Duration::ZERO);
    // The first client takes the only slot and holds it (it never ACKs).
    let first = Raw::new(server.addr);
    first.rrq("cap.bin", &[]);
    let (got, _) = first.expect("DATA 1");
    assert!(matches!(got, Got::Data(1, _)), "{got:?}");
    let second = Raw::new(server.addr);
    second.rrq("cap.bin", &[]);
    let (got, _) = second.expect("busy");
    assert_eq!(got, Got::Error(0, "server busy, try again".into()));
    // The same peer asking again replaces its own transfer: that is never refused.
    first.rrq("cap.bin", &[]);
    let (got, _) = first.expect("DATA 1 again");
    assert!(matches!(got, Got::Data(1, _)), "{got:?}");
}

#[test]
fn past_the_per_client_cap_that_client_is_busy_and_others_are_served() {
    let file = contents(10_000, 23);
    let config = TftpConfig { max_transfers_per_client: 2, ..fast_config() };
    let server = Server::start(&[("c.bin", &file)], config, Duration::ZERO);
    // Two ports of 127.0.0.2 take its two slots (they never ACK).
    let holders: Vec<Raw> = (0..2).map(|_| Raw::from_ip(server.addr, "127.0.0.2")).collect();
    for holder in &holders {
        holder.rrq("c.bin", &[]);
        assert!(matches!(holder.expect("DATA 1").0, Got::Data(1, _)));
    }
    let third = Raw::from_ip(server.addr, "127.0.0.2");
    third.rrq("c.bin", &[]);
    assert_eq!(third.expect("busy").0, Got::Error(0, "server busy, try again".into()));
    // Another address is served.
    let other = Raw::from_ip(server.addr, "127.0.0.3");
    other.rrq("c.bin", &[]);
    let (got, tid) = other.expect("DATA 1");
    let Got::Data(1, first) = got else { panic!("{got:?}") };
    assert_eq!(other.finish_lock_step(tid, first, 512), file);
    // The holders never acknowledge: DATA 1 twice in all, then their slots free up.
    for holder in &holders {
        let resent = holder.drain(Duration::from_millis(1500));
        assert_eq!(resent.len(), 1, "one retransmission after the first: {resent:?}");
    }
    third.rrq("c.bin", &[]);
    assert!(matches!(third.expect("DATA 1 once a slot is free").0, Got::Data(1, _)));
}

/// A full table: the client holding the most transfers yields its newest to a client that holds
/// none, and the heaviest holders are the ones told the server is busy.
#[test]
fn a_full_table_makes_the_client_holding_the_most_yield() {
    let file = contents(10_000, 25);
    let config =
        TftpConfig { max_transfers: 6, timeout: Duration::from_secs(2), ..TftpConfig::default() };
    let server = Server::start(&[("c.bin", &file)], config, Duration::ZERO);
    // 127.0.0.2, .3 and .4 hold two transfers each (never acknowledged): the table is full.
    let holders = ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3", "127.0.0.4", "127.0.0.4"]
        .map(|ip| Raw::from_ip(server.addr, ip));
    for holder in &holders {
        holder.rrq("c.bin", &[]);
        assert!(matches!(holder.expect("DATA 1").0, Got::Data(1, _)));
    }
    // One more from a holder: as heavy as the heaviest, so busy.
    let heavy = Raw::from_ip(server.addr, "127.0.0.3");
    heavy.rrq("c.bin", &[]);
    assert_eq!(heavy.expect("busy").0, Got::Error(0, "server busy, try again".into()));
    // A client holding nothing is served in full: the newest of 127.0.0.2 (the heaviest,
    // lowest address) made room, and is stopped.
    let other = Raw::from_ip(server.addr, "127.0.0.5");
    other.rrq("c.bin", &[]);
    let (got, tid) = other.expect("DATA 1, not busy");
    let Got::Data(1, first) = got else { panic!("{got:?}") };
    // 127.0.0.2 now holds one: it may not push out 127.0.0.3 or .4 (two each).
    let again = Raw::from_ip(server.addr, "127.0.0.2");
    again.rrq("c.bin", &[]);
    assert_eq!(again.expect("busy").0, Got::Error(0, "server busy, try again".into()));
    assert_eq!(other.finish_lock_step(tid, first, 512), file);
    // The yielded transfer (127.0.0.2's newest) sent nothing more; the others retransmit.
    let yielded = holders[1].drain(Duration::from_millis(2500));
    assert!(yielded.is_empty(), "the cancelled transfer went on: {yielded:?}");
    let kept = holders[0].drain(Duration::from_millis(500));
    assert_eq!(kept.len(), 1, "the older transfer of 127.0.0.2 goes on: {kept:?}");
}
