//! Read-only TFTP server (RFC 1350, RFC 2347 options, RFC 2348 `blksize`, RFC 2349 `timeout` and
//! `tsize`, RFC 7440 `windowsize`) on tokio.
//!
//! It is its own crate (bootvol's binary depends on it): it knows nothing of bootvol, and the
//! compiler keeps it that way.
//!
//! This file owns the listening socket it is given (with a receive buffer wide enough for a
//! storm's requests), binds one socket per transfer (to the listening IP with port 0, so each
//! transfer has its own TID), runs the tasks, and logs each transfer's end; `engine` runs every
//! transfer's packets and retransmission clock on one poll loop. Packet syntax lives in `packet`
//! and the protocol rules of a transfer in `transfer`; both are pure.
//!
//! Shape: one tokio task reads the listening socket and keeps the map of open transfers (no
//! lock: only it touches the map). Each RRQ gets a task that asks the [`Handler`] for the bytes,
//! binds the transfer's socket and hands both to the engine's thread (see `engine` for why one
//! thread); the task waits for the end, stops the transfer when it is replaced or aborted, and
//! logs.
//!
//! What one client can take is bounded: a transfer holds exactly one socket (the file is read
//! before it is bound), transfers are capped in all (`max_transfers`) and per client IP address
//! (`max_transfers_per_client`); when the table is full the client holding the most transfers
//! yields first (`admission`, pure), so many flooding addresses cannot shut out one that asks
//! once. Until a client acknowledges block 1 it gets one block at a time and each packet twice
//! at most (`transfer`'s `FIRST_PACKET_RETRIES`), so a forged request draws at most two DATA
//! packets.
//!
//! It must not know what it serves: file contents come from a [`Handler`], which maps a path and
//! a client address to bytes. Nothing here knows about boot scripts, MAC addresses or SQLite.
//!
//! Why our own server rather than `async-tftp`: a PXE ROM probes `tsize`, aborts with ERROR 8 and
//! asks again from the same source port. Here a client ERROR ends its transfer at once, and a new
//! RRQ from the same address and port replaces the transfer still open for it.
//!
//! Deliberate limits: `netascii` is accepted and served byte for byte, like `octet` (boot files
//! are binary; converting line ends would change them). Transfer sockets take the listening
//! socket's IP: with a wildcard listener (`0.0.0.0`) replies leave by the routing table and are
//! not bound to a device.
//!
//! # Layout
//!
//! - [`packet`]: the wire format (pure); [`transfer`]: one transfer's protocol rules (pure);
//!   [`admission`]: who yields when the table is full (pure).
//! - [`engine`]: the poll loop that runs every transfer's packets and clock; this file: the
//!   listening socket, the per-transfer tasks and the log.

mod admission;
mod engine;
mod packet;
mod transfer;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use admission::{Admission, Load};
use engine::Engine;
use packet::{Mode, Packet, Request, code};
use transfer::{Negotiated, Outcome, Transfer};

/// Limits applied to what clients ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TftpConfig {
    /// Largest `blksize` granted (clamped to 8..=65464). 1468 fills an Ethernet frame.
    pub max_block_size: u16,
    /// Largest `windowsize` granted (at least 1).
    pub max_window_size: u16,
    /// Wait before retransmitting, when the client does not set the `timeout` option.
    pub timeout: Duration,
    /// Retransmissions of one window before the transfer is abandoned.
    pub max_retries: u32,
    /// Transfers open at once; past it, new requests get "server busy". Each holds one socket
    /// (one file descriptor) and one thread until it ends.
    pub max_transfers: usize,
    /// Transfers open at once for one client IP address; past it, "server busy" to that address.
    pub max_transfers_per_client: usize,
}

impl Default for TftpConfig {
    fn default() -> Self {
        TftpConfig {
            max_block_size: 1468,
            max_window_size: 16,
            timeout: Duration::from_secs(1),
            max_retries: 5,
            max_transfers: 200,
            max_transfers_per_client: 32,
        }
    }
}

/// Why a file cannot be served; each variant is sent to the client as a TFTP error code.
#[derive(Debug, thiserror::Error)]
pub enum TftpError {
    /// Code 1.
    #[error("file not found")]
    NotFound,
    /// Code 2. The text is sent to the client.
    #[error("access violation: {0}")]
    AccessViolation(String),
    /// Code 4. The text is sent to the client.
    #[error("illegal operation: {0}")]
    IllegalOperation(String),
    /// Code 0. Only "read error" goes to the client; the detail is logged.
    #[error("read error: {0}")]
    Io(#[from] io::Error),
}

impl TftpError {
    /// The TFTP error code sent to the client.
    pub fn code(&self) -> u16 {
        match self {
            TftpError::NotFound => code::FILE_NOT_FOUND,
            TftpError::AccessViolation(_) => code::ACCESS_VIOLATION,
            TftpError::IllegalOperation(_) => code::ILLEGAL_OPERATION,
            TftpError::Io(_) => code::UNDEFINED,
        }
    }

    /// The message sent to the client: never the detail of a local I/O error.
    fn wire_message(&self) -> String {
        match self {
            TftpError::NotFound => "file not found".to_owned(),
            TftpError::AccessViolation(text) | TftpError::IllegalOperation(text) => text.clone(),
            TftpError::Io(_) => "read error".to_owned(),
        }
    }
}

/// Where file contents come from.
pub trait Handler: Send + Sync + 'static {
    /// Contents of a file requested for reading. `peer` is the client address.
    ///
    /// `path` is the file name exactly as the client sent it (UTF-8, non-empty, otherwise
    /// unchecked): confining it to a folder is the handler's job. Called concurrently, once per
    /// request, from the transfer's own task.
    fn read(
        &self,
        path: &str,
        peer: SocketAddr,
    ) -> impl Future<Output = Result<Bytes, TftpError>> + Send;

    /// Called once per read request when it ends (acknowledged to the end, refused, timed out,
    /// stopped by the client or superseded), from the transfer's own task, with the same `path`
    /// as [`Handler::read`]. For counting: it must not block. The default does nothing.
    fn transfer_ended(&self, path: &str, end: &TransferEnd) {
        let _ = (path, end);
    }
}

/// How a read request ended, for [`Handler::transfer_ended`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferEnd {
    pub result: TransferResult,
    /// Bytes the client acknowledged.
    pub bytes: u64,
    /// From the request to the end.
    pub duration: Duration,
}

/// The kinds of end a read request has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferResult {
    /// The last block was acknowledged.
    Complete,
    /// The client sent an ERROR (the `tsize` probe ends so, on purpose).
    ClientError,
    /// The client stopped answering.
    TimedOut,
    /// A new request from the same client address replaced it.
    Superseded,
    /// The handler refused the file (not found, access violation...).
    Refused,
    /// A socket call failed.
    SocketError,
}

/// Largest request accepted on the listening socket. RFC 2347 limits requests to 512 bytes, but
/// some clients send more; a longer datagram is cut and then fails to parse.
const MAX_REQUEST_LEN: usize = 4096;

/// Largest packet expected on a transfer socket (ACK or ERROR). A longer ERROR message is cut,
/// which the lenient ERROR parser tolerates.
const MAX_REPLY_LEN: usize = 1024;

/// Pause after a failed receive on the listening socket, so that a persistent error cannot spin.
const RECV_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The transfer open for one client address, so that a new RRQ from it can replace it.
#[derive(Debug)]
struct Open {
    task: Id,
    cancel: CancellationToken,
    /// Order of start: when its client must yield a slot, its newest transfer goes.
    seq: u64,
}

/// At most one warning about refused requests in this period (with a count), so that a flood of
/// requests cannot flood the log.
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// A liveness probe the listening loop answers whenever it is free, between two datagrams, so
/// that a supervisor can tell an idle server from a wedged one. `()` never asks.
pub trait Heartbeat: Send {
    /// Completes once a probe was asked and answered; the loop polls it beside its socket, and
    /// drops it (a cancellation that must lose nothing) when a datagram comes first.
    fn beat(&mut self) -> impl Future<Output = ()> + Send;
}

impl Heartbeat for () {
    fn beat(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// Serves until `shutdown` is cancelled, then stops accepting requests and waits (at most `drain`
/// long) for transfers in flight.
pub async fn serve<H: Handler>(
    socket: UdpSocket,
    handler: Arc<H>,
    config: TftpConfig,
    shutdown: CancellationToken,
    drain: Duration,
) -> io::Result<()> {
    serve_with_heartbeat(socket, handler, config, shutdown, drain, ()).await
}

/// [`serve`], answering `heartbeat` between datagrams.
pub async fn serve_with_heartbeat<H: Handler>(
    socket: UdpSocket,
    handler: Arc<H>,
    config: TftpConfig,
    shutdown: CancellationToken,
    drain: Duration,
    mut heartbeat: impl Heartbeat,
) -> io::Result<()> {
    let local_ip = socket.local_addr()?.ip();
    widen_receive_buffer(&socket);
    let mut listener = Listener {
        local_ip,
        socket,
        handler,
        config,
        transfers: JoinSet::new(),
        open: HashMap::new(),
        clients: HashMap::new(),
        per_client: HashMap::new(),
        started: 0,
        engine: Engine::start()?,
        refused: Refused::default(),
        reply: Vec::new(),
    };
    let mut buf = vec![0u8; MAX_REQUEST_LEN];
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = heartbeat.beat() => {}
            Some(joined) = listener.transfers.join_next_with_id() => listener.forget(joined),
            received = listener.socket.recv_from(&mut buf) => match received {
                Ok((len, peer)) => listener.on_datagram(&buf[..len], peer).await,
                Err(e) => {
                    tracing::warn!(error = %e, "tftp: receive on the listening socket failed");
                    tokio::time::sleep(RECV_ERROR_PAUSE).await;
                }
            },
        }
    }
    // Closing the listening socket now means a new request gets nothing (or an ICMP error),
    // rather than waiting unread while we drain.
    let Listener { socket, transfers, .. } = listener;
    drop(socket);
    drain_transfers(transfers, drain).await;
    Ok(())
}

/// What the listening socket asks the kernel to queue: a boot storm's requests arrive at once
/// (500 RRQs take about 500 KiB of socket buffer, past the usual 208 KiB default), and a request
/// dropped there costs its client a retransmission timeout, seconds. The kernel caps it at
/// `net.core.rmem_max` (raised by the appliance's `sysctl.d`).
const LISTEN_RECEIVE_BUFFER: usize = 4 * 1024 * 1024;

/// Asks for [`LISTEN_RECEIVE_BUFFER`] on the listening socket; logs what the kernel granted.
fn widen_receive_buffer(socket: &UdpSocket) {
    let socket = socket2::SockRef::from(socket);
    if let Err(e) = socket.set_recv_buffer_size(LISTEN_RECEIVE_BUFFER) {
        tracing::warn!(error = %e, "tftp: cannot set the listening socket's receive buffer");
    }
    // Linux reports twice what it reserves for data (the other half is bookkeeping).
    let granted = socket.recv_buffer_size().unwrap_or(0) / 2;
    if granted < LISTEN_RECEIVE_BUFFER {
        tracing::info!(
            granted,
            wanted = LISTEN_RECEIVE_BUFFER,
            "tftp: the listening socket's receive buffer is capped by net.core.rmem_max: a burst of requests past it is dropped and retried by clients"
        );
    }
}

/// The listening socket and the transfers it started. Owned by the `serve` loop alone, so the
/// map of open transfers needs no lock.
#[derive(Debug)]
struct Listener<H> {
    socket: UdpSocket,
    local_ip: IpAddr,
    handler: Arc<H>,
    config: TftpConfig,
    /// Each task returns its peer, so that its entry in `open` can be found when it ends.
    transfers: JoinSet<SocketAddr>,
    open: HashMap<SocketAddr, Open>,
    /// The client address of every transfer task still running (superseded ones included, as
    /// they hold a socket until they end), and how many each address has.
    clients: HashMap<Id, IpAddr>,
    per_client: HashMap<IpAddr, usize>,
    /// Transfers started so far (each `Open`'s `seq`).
    started: u64,
    /// The loop every transfer's packets go through.
    engine: Arc<Engine>,
    refused: Refused,
    /// Buffer for ERROR replies from the listening socket.
    reply: Vec<u8>,
}

/// Requests refused since the last warning.
#[derive(Debug, Default)]
struct Refused {
    last_logged: Option<Instant>,
    count: u64,
}

impl Refused {
    fn note(&mut self, peer: SocketAddr, open: usize, from_peer: usize) {
        self.count += 1;
        let now = Instant::now();
        if self.last_logged.is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_PERIOD) {
            return;
        }
        tracing::warn!(last = %peer, open, open_for_last = from_peer, refused = self.count,
            "tftp: too many transfers open; requests refused");
        self.last_logged = Some(now);
        self.count = 0;
    }
}

impl<H: Handler> Listener<H> {
    /// An RRQ starts a transfer; a WRQ or a malformed request is answered with an ERROR; an
    /// ERROR ends the peer's open transfer; anything else is dropped.
    async fn on_datagram(&mut self, datagram: &[u8], peer: SocketAddr) {
        let from_peer = self.per_client.get(&peer.ip()).copied().unwrap_or(0);
        let (error_code, message) = match Packet::parse(datagram) {
            // Each transfer holds a socket until it ends: past the caps, a flood of requests is
            // told to come back rather than allowed to exhaust the machine, and when the table
            // is full the client holding the most yields first (`admission`). One busy ERROR
            // per request: no amplification.
            Ok(Packet::Rrq(request)) if !self.open.contains_key(&peer) => {
                match self.admission(peer.ip(), from_peer) {
                    Admission::Start => return self.start(request, peer),
                    Admission::Evict(heaviest) => {
                        self.yield_newest(heaviest);
                        return self.start(request, peer);
                    }
                    Admission::Busy => {
                        self.refused.note(peer, self.transfers.len(), from_peer);
                        (code::UNDEFINED, "server busy, try again".to_owned())
                    }
                }
            }
            // The same address and port asking again replaces its own transfer: never refused.
            Ok(Packet::Rrq(request)) => return self.start(request, peer),
            Ok(Packet::Wrq(request)) => {
                tracing::warn!(%peer, file = ?request.filename, "tftp: write request refused");
                (code::ACCESS_VIOLATION, "read-only server".to_owned())
            }
            // The client should send this to the transfer's port; some send it here. Either way
            // it means "stop". Never answered, so that two peers cannot ping-pong errors.
            Ok(Packet::Error { .. }) => return self.cancel(peer),
            // DATA, ACK or OACK to the listening port belong to no transfer: most likely stale.
            Ok(other) => {
                tracing::debug!(%peer, packet = ?other, "tftp: stray packet on the listening socket");
                return;
            }
            Err(e) => {
                tracing::warn!(%peer, error = %e, "tftp: malformed request");
                (code::ILLEGAL_OPERATION, format!("malformed request: {e}"))
            }
        };
        send_error(&self.socket, peer, error_code, &message, &mut self.reply).await;
    }

    /// Whether a request from `client` (which runs `from_client` transfers) gets a slot.
    fn admission(&self, client: IpAddr, from_client: usize) -> Admission {
        let (running, config) = (self.transfers.len(), &self.config);
        // Only a full table needs the open transfers counted by address.
        let full = running >= config.max_transfers && from_client < config.max_transfers_per_client;
        let load = Load {
            running,
            requester_running: from_client,
            requester_open: if full {
                self.open.keys().filter(|peer| peer.ip() == client).count()
            } else {
                0
            },
            heaviest: if full {
                admission::heaviest(self.open.keys().map(|p| p.ip()))
            } else {
                None
            },
        };
        admission::admit(load, config.max_transfers, config.max_transfers_per_client)
    }

    /// Cancels the newest transfer open for `client`, which holds the most: its slot frees once
    /// the engine has stopped it (at once: the engine closes its socket on the stop).
    fn yield_newest(&mut self, client: IpAddr) {
        let newest = self.open.iter().filter(|(peer, _)| peer.ip() == client);
        if let Some((&peer, _)) = newest.max_by_key(|(_, open)| open.seq) {
            tracing::debug!(%peer, "tftp: table full; the client holding the most transfers yields one");
            self.cancel(peer);
        }
    }

    /// Starts a transfer in its own task, replacing the one open for the same peer: that is
    /// the issue #18 case, a client that gave up on a transfer (or never saw its first packet)
    /// and asks again from the same port.
    fn start(&mut self, request: Request, peer: SocketAddr) {
        self.cancel(peer);
        let cancel = CancellationToken::new();
        let job = run_transfer(
            Arc::clone(&self.handler),
            request,
            peer,
            self.local_ip,
            self.config,
            Arc::clone(&self.engine),
            cancel.clone(),
        );
        let task = self.transfers.spawn(async move {
            job.await;
            peer
        });
        self.clients.insert(task.id(), peer.ip());
        *self.per_client.entry(peer.ip()).or_default() += 1;
        self.started += 1;
        self.open.insert(peer, Open { task: task.id(), cancel, seq: self.started });
    }

    fn cancel(&mut self, peer: SocketAddr) {
        if let Some(old) = self.open.remove(&peer) {
            old.cancel.cancel();
        }
    }

    /// Removes a finished transfer from the open map, unless a newer one for the same peer
    /// took its place already.
    fn forget(&mut self, joined: Result<(Id, SocketAddr), tokio::task::JoinError>) {
        let task = match &joined {
            Ok((task, _)) => *task,
            Err(e) => e.id(),
        };
        if let Some(ip) = self.clients.remove(&task)
            && let Some(count) = self.per_client.get_mut(&ip)
        {
            *count -= 1;
            if *count == 0 {
                self.per_client.remove(&ip);
            }
        }
        match joined {
            Ok((task, peer)) => {
                if self.open.get(&peer).is_some_and(|entry| entry.task == task) {
                    self.open.remove(&peer);
                }
            }
            // A panic (a bug): the peer is not known, so look for the task.
            Err(e) => {
                tracing::warn!(error = %e, "tftp: transfer task failed");
                self.open.retain(|_, entry| entry.task != e.id());
            }
        }
    }
}

async fn drain_transfers(mut transfers: JoinSet<SocketAddr>, drain: Duration) {
    if transfers.is_empty() {
        return;
    }
    tracing::info!(transfers = transfers.len(), "tftp: draining transfers in flight");
    let deadline = tokio::time::sleep(drain);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => break,
            joined = transfers.join_next() => if joined.is_none() { return },
        }
    }
    tracing::warn!(transfers = transfers.len(), "tftp: drain timeout; aborting transfers");
    transfers.shutdown().await;
}

async fn send_error(
    socket: &UdpSocket,
    peer: SocketAddr,
    code: u16,
    message: &str,
    buf: &mut Vec<u8>,
) {
    packet::encode_error(buf, code, message);
    if let Err(e) = socket.send_to(buf, peer).await {
        tracing::warn!(%peer, error = %e, "tftp: cannot send error packet");
    }
}

/// How a transfer ended, for the log line.
#[derive(Debug)]
enum End {
    Protocol(Outcome),
    /// A new RRQ (or an ERROR to the listening port) from the same peer stopped this transfer.
    Superseded,
    Refused(TftpError),
    Io(io::Error),
}

/// Counters for the log line.
#[derive(Debug, Default)]
struct Stats {
    bytes: u64,
    blocks: u64,
    resent: u64,
}

/// One transfer, from the handler's answer to the last ACK, on its own socket. Logs its end.
async fn run_transfer<H: Handler>(
    handler: Arc<H>,
    request: Request,
    peer: SocketAddr,
    local_ip: IpAddr,
    config: TftpConfig,
    engine: Arc<Engine>,
    cancel: CancellationToken,
) {
    let started = Instant::now();
    let (end, stats) =
        serve_request(&*handler, &request, peer, local_ip, config, &engine, &cancel).await;
    log_end(&request.filename, peer, started, &stats, &end);
    let result = match &end {
        End::Protocol(Outcome::Complete) => TransferResult::Complete,
        End::Protocol(Outcome::PeerError { .. }) => TransferResult::ClientError,
        End::Protocol(Outcome::TimedOut) => TransferResult::TimedOut,
        End::Superseded => TransferResult::Superseded,
        End::Refused(_) => TransferResult::Refused,
        End::Io(_) => TransferResult::SocketError,
    };
    let end = TransferEnd { result, bytes: stats.bytes, duration: started.elapsed() };
    handler.transfer_ended(&request.filename, &end);
}

/// Asks the handler for the file, then (so that a file the handler opens is closed before the
/// transfer's socket exists: one descriptor per transfer at any time) binds the transfer's
/// socket and refuses with an ERROR or runs the transfer.
async fn serve_request<H: Handler>(
    handler: &H,
    request: &Request,
    peer: SocketAddr,
    local_ip: IpAddr,
    config: TftpConfig,
    engine: &Engine,
    cancel: &CancellationToken,
) -> (End, Stats) {
    let contents = match &request.mode {
        Mode::Octet | Mode::Netascii => tokio::select! {
            biased;
            () = cancel.cancelled() => return (End::Superseded, Stats::default()),
            contents = handler.read(&request.filename, peer) => contents,
        },
        Mode::Other(mode) => Err(TftpError::IllegalOperation(format!("mode {mode} not supported"))),
    };
    let socket = match UdpSocket::bind((local_ip, 0)).await {
        Ok(socket) => socket,
        Err(e) => return (End::Io(e), Stats::default()),
    };
    let data = match contents {
        Ok(data) => data,
        Err(refusal) => {
            let mut buf = Vec::new();
            send_error(&socket, peer, refusal.code(), &refusal.wire_message(), &mut buf).await;
            return (End::Refused(refusal), Stats::default());
        }
    };
    let negotiated = Negotiated::new(&request.options, data.len() as u64, &config);
    let transfer = Transfer::new(data, &negotiated, config.max_retries);
    // tokio hands the socket back non-blocking, as the transfer loop wants it.
    let socket = match socket.into_std() {
        Ok(socket) => socket,
        Err(e) => return (End::Io(e), Stats::default()),
    };
    engine.run(socket, transfer, peer, negotiated.timeout, cancel).await
}

fn log_end(file: &str, peer: SocketAddr, started: Instant, stats: &Stats, end: &End) {
    let duration_ms = started.elapsed().as_millis() as u64;
    let (bytes, blocks, resent) = (stats.bytes, stats.blocks, stats.resent);
    macro_rules! end_line {
        ($level:ident, $($fields:tt)*) => {
            tracing::$level!(%peer, file = ?file, bytes, blocks, resent, duration_ms, $($fields)*,
                "tftp transfer ended")
        };
    }
    match end {
        End::Protocol(Outcome::Complete) => end_line!(info, outcome = "complete"),
        // A client that stops on purpose (the tsize probe ends with ERROR 8) is not a failure.
        End::Protocol(Outcome::PeerError { code, message }) => {
            end_line!(info, outcome = "client error", code = *code, message = ?message)
        }
        End::Superseded => end_line!(info, outcome = "superseded by a new request"),
        End::Protocol(Outcome::TimedOut) => end_line!(warn, outcome = "timed out"),
        End::Refused(refusal) => end_line!(warn, outcome = "refused", error = %refusal),
        End::Io(e) => end_line!(warn, outcome = "socket error", error = %e),
    }
}

/// Parses one datagram as the listening socket's task does, and re-encodes what it understood,
/// for the fuzzer and its corpus replay (`fuzz/`). The parser is total: no input panics it.
/// Returns whether the datagram is a packet; when it is, its encoding parses back to itself.
#[doc(hidden)]
pub fn check_datagram(bytes: &[u8]) -> bool {
    let Ok(packet) = Packet::parse(bytes) else { return false };
    let mut buf = Vec::new();
    packet.encode(&mut buf);
    let again = Packet::parse(&buf);
    assert_eq!(again.as_ref(), Ok(&packet), "{bytes:?} re-encoded as {buf:?}");
    true
}
