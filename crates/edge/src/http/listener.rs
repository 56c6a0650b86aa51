//! The accept loop of both HTTP listeners (boot and API, and the metrics listener): connection
//! caps, a deadline for every phase of a connection, and draining on shutdown, in front of an
//! axum `Router`.
//!
//! Why not `axum::serve`: it has no timer at all, so one host could hold every descriptor with
//! idle or trickling connections. Here each connection is served by hyper's HTTP/1 machinery on
//! its own task, and a registry at the accept side knows, for every open connection, its client
//! (an IPv4 address, or an IPv6 /64 prefix: `client_key`) and its phase, each with a deadline
//! (`deadline`):
//!
//! - *fresh* (accepted, nothing received yet) and *headers* (a request's first bytes arrived,
//!   not yet all of its headers): closed when `header_timeout` passes;
//! - *body* (the headers are in, the body is not all received): cut when `body_timeout` has
//!   passed since the headers, unless the body has averaged at least `body_min_rate` bytes a
//!   second since then (a large upload that keeps its pace goes on);
//! - *busy* (the handler is working, the request all received): never timed out, the client is
//!   not the one being waited on;
//! - *sending* (the response is being written): cut when the client has taken nothing of it for
//!   `send_timeout`;
//! - *idle* (a keep-alive connection between requests): closed when `idle_timeout` passes, with
//!   one second of grace after what the `Keep-Alive: timeout=` header of every response announced.
//!
//! Over `max_connections_per_client` a new connection is closed at once; over `max_connections`
//! one is closed to make room (`victim`): of the client holding the most connections, the one
//! quiet (fresh or idle) or stalled (waiting on its client for headers, a body or to take a
//! response) the longest, counted from the last byte it moved (`evictable_since`). The new one is
//! refused only when every connection is busy (its handler working). A quiet connection closes
//! gracefully; one in the middle of a request is cut where it stands. So a host that holds many
//! stalled connections loses them first, and a client with one connection making progress
//! keeps it.
//!
//! What a connection holds in memory is bounded: hyper buffers at most `MAX_BUF` bytes of a
//! response beyond what the socket took (and reads headers into the same bound), and `/files/`
//! reads a file in chunks of `http::files::CHUNK` only as hyper asks for them.
//!
//! Keep-alive is only offered when it is safe: a response sent before its request's body was read
//! to the end (a refusal before the body, a 413) says `Connection: close`, as hyper closes such a
//! connection after the response; without the header a client that reuses it would see "Remote
//! end closed connection without response".
//!
//! With TLS (`[api] tls_cert`), the handshake is one step between accept and the first request,
//! with its own deadline (`header_timeout` from accept; a connection evicted or shut down
//! meanwhile is dropped); after it the connection is fresh again and served as a plain one is.
//! A client that speaks plain HTTP to a TLS listener fails the handshake and is closed.
//!
//! It knows nothing of the routes: it hands each request, with its client address as axum's
//! `ConnectInfo<SocketAddr>`, to the router it was given.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, header};
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use bootvol_core::config::ConnectionLimits;

/// Added to `idle_timeout` before an idle connection is closed, so that a client that honours
/// the announced `Keep-Alive: timeout=` never sends on a connection being closed.
const IDLE_GRACE: Duration = Duration::from_secs(1);

/// How long a quiet connection told to close (idle too long, evicted, shutdown) may take to
/// close before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The longest a connection sleeps before it looks at its phase again (phases change without
/// waking its task).
const TICK: Duration = Duration::from_secs(1);

/// hyper's buffer bound per connection: request headers (64 KiB at most) and the response bytes
/// queued beyond what the socket took.
pub const MAX_BUF: usize = 16 * 1024;

/// Pause after a failed `accept` (out of descriptors, most likely) so that it cannot spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// At most one warning about refused connections per listener in this period (with a count).
const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` is cancelled; then stops accepting, closes
/// idle connections, lets requests in flight finish, and returns when every connection is
/// closed (the caller bounds that wait). Between two accepts it answers `heart`'s ticks.
pub async fn serve(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    heart: bootvol_runtime::liveness::Heart,
) -> io::Result<()> {
    serve_tls(name, listener, router, limits, None, shutdown, heart).await
}

/// [`serve`], each connection's TLS handshake first when `tls` is given.
pub async fn serve_tls(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: CancellationToken,
    mut heart: bootvol_runtime::liveness::Heart,
) -> io::Result<()> {
    let registry = Arc::new(Registry::new(limits));
    let tracker = TaskTracker::new();
    let mut refusals = RefusalLog::default();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            () = heart.beat() => continue,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                refusals.accept_failed(name, &e);
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        match registry.admit(client_key(peer.ip()), &shutdown) {
            Ok(admitted) => {
                let connection = Connection {
                    stream,
                    peer,
                    router: router.clone(),
                    limits,
                    registry: Arc::clone(&registry),
                    admitted,
                    tls: tls.clone(),
                };
                tracker.spawn(connection.run());
            }
            // Dropping the stream closes it: nothing was read, nothing is answered.
            Err(refusal) => refusals.refused(name, peer, refusal, registry.open()),
        }
    }
    drop(listener);
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// Why a new connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    PerClient,
    Full,
}

/// What the per-client cap counts a connection's address as: an IPv4 address (IPv4-mapped IPv6
/// included) as itself, an IPv6 address by its /64 prefix (one host, or one LAN, gets a whole
/// /64 and can pick any address in it).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

/// What a connection is doing, as the registry sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    Fresh = 0,
    Headers = 1,
    Body = 2,
    Busy = 3,
    Sending = 4,
    Idle = 5,
}

impl Phase {
    fn from_u8(value: u8) -> Phase {
        match value {
            0 => Phase::Fresh,
            1 => Phase::Headers,
            2 => Phase::Body,
            3 => Phase::Busy,
            4 => Phase::Sending,
            _ => Phase::Idle,
        }
    }

    /// Nothing received since accept or since the last response: closing loses nothing.
    fn quiet(self) -> bool {
        matches!(self, Phase::Fresh | Phase::Idle)
    }

    /// In the middle of a request, waiting on the client (to send its headers or body, to take
    /// the answer).
    fn waits_on_client(self) -> bool {
        matches!(self, Phase::Headers | Phase::Body | Phase::Sending)
    }
}

/// A connection's phase as of one moment: what the deadlines are decided from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    phase: Phase,
    /// When the phase began.
    since: Instant,
    /// When the last byte was received or sent (at least `since`).
    progress: Instant,
    /// Bytes of the request body received (in `Body`).
    body_received: u64,
}

/// When a connection in `state` is cut (or, idle, closed), or `None` while its handler works.
fn deadline(state: &State, limits: &ConnectionLimits) -> Option<Instant> {
    match state.phase {
        Phase::Fresh | Phase::Headers => Some(state.since + limits.header_timeout),
        Phase::Body => {
            // The time the bytes received so far buy at the minimum rate.
            let earned = match limits.body_min_rate {
                0 => Duration::ZERO,
                rate => Duration::from_millis(state.body_received.saturating_mul(1000) / rate),
            };
            Some(state.since + limits.body_timeout.max(earned))
        }
        Phase::Busy => None,
        Phase::Sending => Some(state.progress.max(state.since) + limits.send_timeout),
        Phase::Idle => Some(state.since + limits.idle_timeout + IDLE_GRACE),
    }
}

/// Since when a connection in `state` may be closed to make room: a quiet one since its phase
/// began, one waiting on its client (headers, body, response) since the last byte it moved;
/// `None` while its handler works.
fn evictable_since(state: &State) -> Option<Instant> {
    match state.phase {
        phase if phase.quiet() => Some(state.since),
        Phase::Busy => None,
        _ => Some(state.progress.max(state.since)),
    }
}

/// The connection to close to make room: of the client holding the most connections, the one
/// that moved nothing for the longest. `candidates`: (id, client's open connections, since when
/// evictable).
fn victim(candidates: impl Iterator<Item = (u64, usize, Instant)>) -> Option<u64> {
    candidates
        .min_by_key(|&(id, held, since)| (std::cmp::Reverse(held), since, id))
        .map(|(id, ..)| id)
}

/// A connection's phase and when it began, shared by its task, its socket wrapper, its request
/// handler and the registry (which reads it to pick the connection to evict).
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    phase: AtomicU8,
    /// Nanoseconds from `epoch` to the start of the phase.
    since: AtomicU64,
    /// Nanoseconds from `epoch` to the last byte read or written.
    progress: AtomicU64,
    body_received: AtomicU64,
    /// Closed by the registry to make room (not by shutdown).
    evicted: AtomicBool,
}

impl Activity {
    fn new(epoch: Instant) -> Activity {
        let activity = Activity {
            epoch,
            phase: AtomicU8::new(Phase::Fresh as u8),
            since: AtomicU64::new(0),
            progress: AtomicU64::new(0),
            body_received: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
        };
        activity.enter(Phase::Fresh);
        activity
    }

    fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    fn nanos_now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn state(&self) -> State {
        let at =
            |nanos: &AtomicU64| self.epoch + Duration::from_nanos(nanos.load(Ordering::Acquire));
        State {
            phase: self.phase(),
            since: at(&self.since),
            progress: at(&self.progress),
            body_received: self.body_received.load(Ordering::Acquire),
        }
    }

    fn enter(&self, phase: Phase) {
        let nanos = self.nanos_now();
        self.since.store(nanos, Ordering::Release);
        self.progress.store(nanos, Ordering::Release);
        self.body_received.store(0, Ordering::Release);
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// Bytes arrived: a request is starting, if none was, or its headers or body are moving.
    fn received(&self) {
        match self.phase() {
            phase if phase.quiet() => self.enter(Phase::Headers),
            Phase::Headers | Phase::Body => self.progressed(),
            // Bytes of a pipelined request do not make up for a response not taken.
            _ => {}
        }
    }

    /// The socket took bytes: a response is moving.
    fn sent(&self) {
        if self.phase() == Phase::Sending {
            self.progressed();
        }
    }

    fn progressed(&self) {
        self.progress.store(self.nanos_now(), Ordering::Release);
    }

    /// Bytes of the request body reached the handler.
    fn body_bytes(&self, count: usize) {
        self.body_received.fetch_add(count as u64, Ordering::AcqRel);
    }

    /// The body was received to its end: the handler, not the client, is waited on.
    fn body_done(&self) {
        if self.phase() == Phase::Body {
            self.enter(Phase::Busy);
        }
    }

    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        deadline(&self.state(), limits)
    }

    fn evictable_since(&self) -> Option<Instant> {
        evictable_since(&self.state())
    }
}

/// The open connections of one listener, by id, with a count per client address.
#[derive(Debug)]
struct Registry {
    limits: ConnectionLimits,
    epoch: Instant,
    inner: Mutex<RegistryInner>,
}

#[derive(Debug, Default)]
struct RegistryInner {
    next_id: u64,
    open: HashMap<u64, Entry>,
    per_client: HashMap<IpAddr, usize>,
}

#[derive(Debug)]
struct Entry {
    client: IpAddr,
    activity: Arc<Activity>,
    close: CancellationToken,
}

/// A connection's place in the registry.
#[derive(Debug)]
struct Admitted {
    id: u64,
    activity: Arc<Activity>,
    /// Cancelled when the registry evicts the connection, or at shutdown (a child token).
    close: CancellationToken,
}

impl Registry {
    fn new(limits: ConnectionLimits) -> Registry {
        Registry { limits, epoch: Instant::now(), inner: Mutex::new(RegistryInner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        // A panic while holding the lock leaves consistent counts (every change is one step).
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Makes room for a connection from `client` (a `client_key`), evicting one (`victim`) if
    /// the listener is full, or refuses it.
    fn admit(&self, client: IpAddr, shutdown: &CancellationToken) -> Result<Admitted, Refusal> {
        let mut inner = self.lock();
        if inner.per_client.get(&client).copied().unwrap_or(0)
            >= self.limits.max_connections_per_client
        {
            return Err(Refusal::PerClient);
        }
        if inner.open.len() >= self.limits.max_connections {
            let candidates = inner.open.iter().filter_map(|(id, entry)| {
                let held = inner.per_client.get(&entry.client).copied().unwrap_or(0);
                Some((*id, held, entry.activity.evictable_since()?))
            });
            let Some(victim) = victim(candidates) else { return Err(Refusal::Full) };
            if let Some(entry) = inner.remove(victim) {
                entry.activity.evicted.store(true, Ordering::Release);
                entry.close.cancel();
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let activity = Arc::new(Activity::new(self.epoch));
        let close = shutdown.child_token();
        *inner.per_client.entry(client).or_default() += 1;
        inner
            .open
            .insert(id, Entry { client, activity: Arc::clone(&activity), close: close.clone() });
        Ok(Admitted { id, activity, close })
    }

    fn release(&self, id: u64) {
        self.lock().remove(id);
    }
}

impl RegistryInner {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.open.remove(&id)?;
        if let Some(count) = self.per_client.get_mut(&entry.client) {
            *count -= 1;
            if *count == 0 {
                self.per_client.remove(&entry.client);
            }
        }
        Some(entry)
    }
}

/// One accepted connection and what it needs to be served.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    registry: Arc<Registry>,
    admitted: Admitted,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Connection {
    async fn run(self) {
        let Connection { stream, peer, router, limits, registry, admitted, tls } = self;
        let watched = Watched { stream, activity: Arc::clone(&admitted.activity) };
        match tls {
            None => serve_http(TokioIo::new(watched), peer, router, limits, &admitted).await,
            Some(acceptor) => {
                if let Some(tls) = handshake(&acceptor, watched, peer, &limits, &admitted).await {
                    serve_http(TokioIo::new(tls), peer, router, limits, &admitted).await;
                }
            }
        }
        registry.release(admitted.id);
    }
}

/// The TLS handshake of a new connection, within `header_timeout` of accept; `None` (the
/// connection is dropped) when it fails, stalls, or the connection is evicted or shut down.
async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    io: Watched,
    peer: SocketAddr,
    limits: &ConnectionLimits,
    admitted: &Admitted,
) -> Option<tokio_rustls::server::TlsStream<Watched>> {
    let deadline = admitted.activity.state().since + limits.header_timeout;
    tokio::select! {
        result = tokio::time::timeout_at(deadline.into(), acceptor.accept(io)) => match result {
            Ok(Ok(stream)) => {
                // The request's own clock starts now; until its first byte the connection is
                // as quiet (and as evictable) as a fresh plain one.
                admitted.activity.enter(Phase::Fresh);
                Some(stream)
            }
            // Debug: a flood of these is bounded by the caps, not by the log.
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "https: TLS handshake failed; connection closed");
                None
            }
            Err(_) => {
                tracing::debug!(%peer, "https: TLS handshake not done in time; connection closed");
                None
            }
        },
        () = admitted.close.cancelled() => None,
    }
}

/// Serves HTTP/1 requests on `io` (the socket, or the TLS stream over it) until the connection
/// ends, enforcing the phases' deadlines.
async fn serve_http<I>(
    io: I,
    peer: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    admitted: &Admitted,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    {
        let Admitted { activity, close, .. } = admitted;
        let keep_alive =
            HeaderValue::from_str(&format!("timeout={}", limits.idle_timeout.as_secs()))
                .unwrap_or(HeaderValue::from_static("timeout=1"));
        let handler_activity = Arc::clone(activity);
        let service = hyper::service::service_fn(move |request| {
            answer(router.clone(), request, peer, Arc::clone(&handler_activity), keep_alive.clone())
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.keep_alive(true).max_buf_size(MAX_BUF);
        let connection = builder.serve_connection(io, service);
        tokio::pin!(connection);
        let mut closing = false;
        // A quiet connection told to close is dropped if hyper has not closed it by then (it
        // closes a quiet one at once; this only bounds a client that stopped reading).
        let mut give_up: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let wake = [give_up, activity.deadline(&limits), Some(now + TICK)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + TICK);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "http connection ended");
                    }
                    break;
                }
                () = close.cancelled(), if !closing => {
                    let phase = activity.phase();
                    if phase.waits_on_client() && activity.evicted.load(Ordering::Acquire) {
                        tracing::debug!(%peer, ?phase, "http: connection in a request cut to make room");
                        break;
                    }
                    // Evicted, or shutdown: a quiet connection closes now, a busy one after its
                    // answer (hyper adds `Connection: close`).
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                    if phase.quiet() {
                        give_up = Some(Instant::now() + CLOSE_GRACE);
                    }
                }
                () = tokio::time::sleep_until(wake.into()) => {
                    let now = Instant::now();
                    if give_up.is_some_and(|at| now >= at) {
                        break;
                    }
                    let Some(deadline) = activity.deadline(&limits) else { continue };
                    if now < deadline {
                        continue;
                    }
                    // Debug: a flood of these is bounded by the caps, not by the log.
                    match activity.phase() {
                        Phase::Idle if !closing => {
                            tracing::debug!(%peer, "http: idle keep-alive connection closed");
                            connection.as_mut().graceful_shutdown();
                            closing = true;
                            give_up = Some(now + CLOSE_GRACE);
                        }
                        Phase::Idle | Phase::Busy => {}
                        Phase::Fresh | Phase::Headers => {
                            tracing::debug!(%peer, "http: request headers not received in time; connection closed");
                            break;
                        }
                        Phase::Body => {
                            tracing::debug!(%peer, "http: request body not received in time; connection cut");
                            break;
                        }
                        Phase::Sending => {
                            tracing::debug!(%peer, "http: response not taken in time; connection cut");
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Hands one request to the router and marks the connection busy until the response body is
/// handed to the socket.
async fn answer(
    router: Router,
    request: Request<Incoming>,
    peer: SocketAddr,
    activity: Arc<Activity>,
    keep_alive: HeaderValue,
) -> Result<Response<Body>, Infallible> {
    let empty = hyper::body::Body::is_end_stream(request.body());
    activity.enter(if empty { Phase::Busy } else { Phase::Body });
    let client_keeps_alive = wants_keep_alive(&request);
    let read_to_end = Arc::new(AtomicBool::new(empty));
    let mut request = request.map(|incoming| {
        Body::new(TrackedRequestBody {
            inner: incoming,
            read_to_end: Arc::clone(&read_to_end),
            activity: Arc::clone(&activity),
        })
    });
    request.extensions_mut().insert(ConnectInfo(peer));
    let Ok(mut response) = router.oneshot(request).await;
    activity.enter(Phase::Sending);
    let headers = response.headers_mut();
    if !read_to_end.load(Ordering::Acquire) {
        // hyper closes a connection whose request body was not read to the end: say so.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    } else if client_keeps_alive && !headers.contains_key(header::CONNECTION) {
        headers.insert(header::HeaderName::from_static("keep-alive"), keep_alive);
    }
    let (parts, body) = response.into_parts();
    let body = Body::new(IdleWhenDone { inner: body, activity: Some(activity) });
    Ok(Response::from_parts(parts, body))
}

/// Whether the client asked to keep the connection (HTTP/1.1 unless `Connection: close`,
/// HTTP/1.0 only with `Connection: keep-alive`), so that `Keep-Alive:` goes only to those.
fn wants_keep_alive<B>(request: &Request<B>) -> bool {
    let connection = |token: &str| {
        request.headers().get_all(header::CONNECTION).iter().any(|value| {
            value.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    match request.version() {
        axum::http::Version::HTTP_10 => connection("keep-alive"),
        _ => !connection("close"),
    }
}

/// The socket, noting the first bytes of each request (that is when `header_timeout` starts
/// for a keep-alive connection) and every byte moved either way (what tells a stalled client).
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.received();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.sent();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.sent();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A request body that records whether it was read to its end, and counts its bytes.
struct TrackedRequestBody {
    inner: Incoming,
    read_to_end: Arc<AtomicBool>,
    activity: Arc<Activity>,
}

impl hyper::body::Body for TrackedRequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.activity.body_bytes(data.len());
        }
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read_to_end.store(true, Ordering::Release);
            self.activity.body_done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that marks its connection idle once hyper has taken all of it (or dropped
/// it: the connection is then closing).
struct IdleWhenDone {
    inner: Body,
    activity: Option<Arc<Activity>>,
}

impl IdleWhenDone {
    fn done(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.enter(Phase::Idle);
        }
    }
}

impl Drop for IdleWhenDone {
    fn drop(&mut self) {
        self.done();
    }
}

impl hyper::body::Body for IdleWhenDone {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            self.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Refused connections and failed accepts, logged at most once per period with a count, so
/// that a flood cannot flood the log too.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    per_client: u64,
    full: u64,
    accept_errors: u64,
}

impl RefusalLog {
    fn refused(&mut self, name: &str, peer: SocketAddr, refusal: Refusal, open: usize) {
        match refusal {
            Refusal::PerClient => self.per_client += 1,
            Refusal::Full => self.full += 1,
        }
        if self.due() {
            tracing::warn!(listener = name, last = %peer, open, over_per_client_cap = self.per_client,
                full_none_idle = self.full, "http: connections refused");
            (self.per_client, self.full) = (0, 0);
        }
    }

    fn accept_failed(&mut self, name: &str, error: &io::Error) {
        self.accept_errors += 1;
        if self.due() {
            tracing::warn!(listener = name, error = %error, count = self.accept_errors, "http: accept failed");
            self.accept_errors = 0;
        }
    }

    fn due(&mut self) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_PERIOD) {
            return false;
        }
        self.last = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_client: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: max,
            max_connections_per_client: per_client,
            ..ConnectionLimits::DEFAULT
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn over_the_per_client_cap_a_new_connection_is_refused() {
        let registry = Registry::new(limits(10, 2));
        let shutdown = CancellationToken::new();
        let first = registry.admit(ip(1), &shutdown).unwrap();
        registry.admit(ip(1), &shutdown).unwrap();
        assert_eq!(registry.admit(ip(1), &shutdown).unwrap_err(), Refusal::PerClient);
        registry.admit(ip(2), &shutdown).unwrap();
        registry.release(first.id);
        registry.admit(ip(1), &shutdown).unwrap();
    }

    #[test]
    fn a_full_listener_closes_the_oldest_idle_connection_else_refuses() {
        let registry = Registry::new(limits(3, 3));
        let shutdown = CancellationToken::new();
        let conns: Vec<Admitted> =
            (1..=3).map(|i| registry.admit(ip(i), &shutdown).unwrap()).collect();
        for conn in &conns {
            conn.activity.enter(Phase::Busy);
        }
        assert_eq!(registry.admit(ip(9), &shutdown).unwrap_err(), Refusal::Full);
        conns[2].activity.enter(Phase::Idle);
        std::thread::sleep(Duration::from_millis(2));
        conns[1].activity.enter(Phase::Idle);
        let newer = registry.admit(ip(9), &shutdown).unwrap();
        assert!(conns[2].close.is_cancelled(), "the oldest idle one is closed");
        assert!(!conns[1].close.is_cancelled() && !conns[0].close.is_cancelled());
        assert_eq!(registry.open(), 3);
        // A fresh connection (nothing received yet) is quiet too, but younger than the idle one.
        let newest = registry.admit(ip(8), &shutdown).unwrap();
        assert!(conns[1].close.is_cancelled() && !newer.close.is_cancelled());
        // A busy connection is never evicted: with none quiet, refusal.
        newer.activity.enter(Phase::Busy);
        newest.activity.enter(Phase::Busy);
        assert_eq!(registry.admit(ip(7), &shutdown).unwrap_err(), Refusal::Full);
    }

    #[test]
    fn keep_alive_is_announced_only_to_clients_that_keep_the_connection() {
        let request = |version, connection: Option<&str>| {
            let mut builder = Request::builder().version(version);
            if let Some(value) = connection {
                builder = builder.header(header::CONNECTION, value);
            }
            builder.body(()).unwrap()
        };
        use axum::http::Version;
        assert!(wants_keep_alive(&request(Version::HTTP_11, None)));
        assert!(!wants_keep_alive(&request(Version::HTTP_11, Some("Close"))));
        assert!(!wants_keep_alive(&request(Version::HTTP_10, None)));
        assert!(wants_keep_alive(&request(Version::HTTP_10, Some("keep-alive"))));
    }

    #[test]
    fn bytes_received_start_the_header_clock_and_only_quiet_phases_time_out_fast() {
        let limits = limits(1, 1);
        let activity = Activity::new(Instant::now());
        assert_eq!(activity.phase(), Phase::Fresh);
        activity.received();
        assert_eq!(activity.phase(), Phase::Headers);
        assert!(activity.deadline(&limits).unwrap() <= Instant::now() + limits.header_timeout);
        activity.enter(Phase::Busy);
        activity.received();
        assert_eq!(activity.phase(), Phase::Busy, "bytes of a body do not reset a request");
        assert_eq!(activity.deadline(&limits), None);
        activity.enter(Phase::Idle);
        assert!(activity.deadline(&limits).unwrap() > Instant::now() + limits.header_timeout);
    }

    fn state(phase: Phase, since: Instant, progress: Instant, body_received: u64) -> State {
        State { phase, since, progress, body_received }
    }

    #[test]
    fn every_phase_but_busy_has_a_deadline() {
        let limits = limits(1, 1);
        let t0 = Instant::now();
        let later = |secs| t0 + Duration::from_secs(secs);
        let at = |phase, bytes| deadline(&state(phase, t0, later(3), bytes), &limits);
        assert_eq!(at(Phase::Fresh, 0), Some(later(10)), "header_timeout");
        assert_eq!(at(Phase::Headers, 0), Some(later(10)));
        assert_eq!(at(Phase::Busy, 0), None, "the handler is not the client");
        // A body: body_timeout whatever its bytes (a trickle gets no more)...
        assert_eq!(at(Phase::Body, 0), Some(later(10)));
        assert_eq!(at(Phase::Body, 512), Some(later(10)));
        // ...and longer only while it averages body_min_rate (512 bytes a second).
        assert_eq!(at(Phase::Body, 512 * 25), Some(later(25)));
        let strict = ConnectionLimits { body_min_rate: 0, ..limits };
        let body = state(Phase::Body, t0, t0, u64::MAX);
        assert_eq!(deadline(&body, &strict), Some(later(10)), "0: never past body_timeout");
        assert!(deadline(&body, &limits).unwrap() > later(1_000_000), "saturates");
        // A response: send_timeout from the last byte the socket took.
        assert_eq!(at(Phase::Sending, 0), Some(later(33)));
        assert_eq!(at(Phase::Idle, 0), Some(later(61)), "idle_timeout and its grace");
    }

    #[test]
    fn the_biggest_client_loses_its_longest_stalled_connection_first() {
        let t0 = Instant::now();
        let later = |secs| t0 + Duration::from_secs(secs);
        // Quiet: since the phase began; waiting on the client: since its last byte; busy: never.
        assert_eq!(evictable_since(&state(Phase::Idle, later(1), later(5), 0)), Some(later(1)));
        assert_eq!(evictable_since(&state(Phase::Body, later(1), later(5), 9)), Some(later(5)));
        assert_eq!(evictable_since(&state(Phase::Sending, later(1), later(4), 0)), Some(later(4)));
        assert_eq!(evictable_since(&state(Phase::Headers, later(2), later(2), 0)), Some(later(2)));
        assert_eq!(evictable_since(&state(Phase::Busy, later(1), later(1), 0)), None);
        // (id, connections its client holds, evictable since)
        let candidates = [(1, 1, later(0)), (2, 64, later(7)), (3, 64, later(5)), (4, 3, later(1))];
        assert_eq!(victim(candidates.into_iter()), Some(3), "the biggest client's oldest");
        assert_eq!(victim(candidates.into_iter().filter(|c| c.1 < 64)), Some(4));
        assert_eq!(victim(std::iter::empty()), None);
    }

    #[test]
    fn ipv6_clients_are_counted_per_64_and_ipv4_per_address() {
        let key = |text: &str| client_key(text.parse().unwrap());
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:ffff:1:2:3"));
        assert_eq!(key("2001:db8:1:2::1"), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_ne!(key("fe80::1"), key("2001:db8::1"));
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"), "IPv4-mapped: its IPv4 address");
        assert_ne!(key("::ffff:192.0.2.7"), key("::ffff:192.0.2.8"));
        assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
    }

    #[test]
    fn addresses_of_one_64_share_one_per_client_cap() {
        let registry = Registry::new(limits(10, 2));
        let shutdown = CancellationToken::new();
        let ip = |text: &str| client_key(text.parse().unwrap());
        registry.admit(ip("2001:db8:0:1::a"), &shutdown).unwrap();
        registry.admit(ip("2001:db8:0:1::b"), &shutdown).unwrap();
        let third = registry.admit(ip("2001:db8:0:1:ffff::c"), &shutdown).unwrap_err();
        assert_eq!(third, Refusal::PerClient);
        registry.admit(ip("2001:db8:0:2::a"), &shutdown).unwrap();
    }

    #[test]
    fn a_request_body_moves_the_connection_from_body_to_busy_and_counts_its_bytes() {
        let activity = Activity::new(Instant::now());
        activity.received();
        activity.enter(Phase::Body);
        activity.body_bytes(100);
        activity.received();
        assert_eq!(activity.state().body_received, 100);
        activity.body_done();
        assert_eq!(activity.phase(), Phase::Busy);
        activity.enter(Phase::Sending);
        activity.body_done();
        assert_eq!(activity.phase(), Phase::Sending, "a late end of body changes nothing");
        activity.received();
        assert_eq!(activity.phase(), Phase::Sending, "a pipelined request is no progress");
    }
}
