//! The accept loop of both HTTP listeners (boot and API): connection caps, header and idle
//! timeouts, and draining on shutdown, in front of an axum `Router`.
//!
//! Why not `axum::serve`: it has no timer at all, so one host could hold every descriptor with
//! idle or trickling connections. Here each connection is served by hyper's HTTP/1 machinery on
//! its own task, and a registry at the accept side knows, for every open connection, its client
//! address and its phase:
//!
//! - *fresh* (accepted, nothing received yet) and *headers* (a request's first bytes arrived,
//!   not yet all of its headers): closed when `header_timeout` passes;
//! - *busy* (a request is being answered, until its response body was handed to the socket): never
//!   timed out;
//! - *idle* (a keep-alive connection between requests): closed when `idle_timeout` passes, with
//!   one second of grace after what the `Keep-Alive: timeout=` header of every response announced.
//!
//! Over `max_connections_per_client` a new connection is closed at once; over `max_connections`
//! the connection idle (fresh or between requests) the longest is closed to make room, and the
//! new one is refused only when none is idle. A connection is only ever closed between requests
//! (or before its first), never under a request being read or answered.
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
use std::net::{IpAddr, SocketAddr};
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

use crate::config::ConnectionLimits;

/// Added to `idle_timeout` before an idle connection is closed, so that a client that honours
/// the announced `Keep-Alive: timeout=` never sends on a connection being closed.
const IDLE_GRACE: Duration = Duration::from_secs(1);

/// How long a quiet connection told to close (idle too long, evicted, shutdown) may take to
/// close before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

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
    heart: crate::liveness::Heart,
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
    mut heart: crate::liveness::Heart,
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
        match registry.admit(peer.ip(), &shutdown) {
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

/// What a connection is doing, as the registry sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    Fresh = 0,
    Headers = 1,
    Busy = 2,
    Idle = 3,
}

impl Phase {
    fn from_u8(value: u8) -> Phase {
        match value {
            0 => Phase::Fresh,
            1 => Phase::Headers,
            2 => Phase::Busy,
            _ => Phase::Idle,
        }
    }

    /// Nothing received since accept or since the last response: closing loses nothing.
    fn quiet(self) -> bool {
        matches!(self, Phase::Fresh | Phase::Idle)
    }
}

/// A connection's phase and when it began, shared by its task, its socket wrapper, its request
/// handler and the registry (which reads it to pick the connection idle the longest).
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    phase: AtomicU8,
    /// Nanoseconds from `epoch` to the start of the phase.
    since: AtomicU64,
}

impl Activity {
    fn new(epoch: Instant) -> Activity {
        let activity =
            Activity { epoch, phase: AtomicU8::new(Phase::Fresh as u8), since: AtomicU64::new(0) };
        activity.enter(Phase::Fresh);
        activity
    }

    fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    fn since(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.since.load(Ordering::Acquire))
    }

    fn enter(&self, phase: Phase) {
        let nanos = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.since.store(nanos, Ordering::Release);
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// Bytes arrived: a request is starting, if none was.
    fn received(&self) {
        if self.phase().quiet() {
            self.enter(Phase::Headers);
        }
    }

    /// When the current phase runs out, or `None` when it cannot (busy).
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match self.phase() {
            Phase::Fresh | Phase::Headers => Some(self.since() + limits.header_timeout),
            Phase::Idle => Some(self.since() + limits.idle_timeout + IDLE_GRACE),
            Phase::Busy => None,
        }
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

    /// Makes room for a connection from `client`, evicting the connection idle the longest if
    /// the listener is full, or refuses it.
    fn admit(&self, client: IpAddr, shutdown: &CancellationToken) -> Result<Admitted, Refusal> {
        let mut inner = self.lock();
        if inner.per_client.get(&client).copied().unwrap_or(0)
            >= self.limits.max_connections_per_client
        {
            return Err(Refusal::PerClient);
        }
        if inner.open.len() >= self.limits.max_connections {
            let oldest_idle = inner
                .open
                .iter()
                .filter(|(_, entry)| entry.activity.phase().quiet())
                .min_by_key(|(_, entry)| entry.activity.since())
                .map(|(id, _)| *id);
            let Some(victim) = oldest_idle else { return Err(Refusal::Full) };
            if let Some(entry) = inner.remove(victim) {
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
    let deadline = admitted.activity.since() + limits.header_timeout;
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
        builder.keep_alive(true);
        let connection = builder.serve_connection(io, service);
        tokio::pin!(connection);
        let mut closing = false;
        // A quiet connection told to close is dropped if hyper has not closed it by then (it
        // closes a quiet one at once; this only bounds a client that stopped reading).
        let mut give_up: Option<Instant> = None;
        loop {
            // Busy: look again later (the phase changes without waking this task).
            let wake = give_up
                .or_else(|| activity.deadline(&limits))
                .unwrap_or_else(|| Instant::now() + limits.header_timeout);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "http connection ended");
                    }
                    break;
                }
                () = close.cancelled(), if !closing => {
                    // Evicted, or shutdown: a quiet connection closes now, a busy one after its
                    // answer (hyper adds `Connection: close`).
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                    if activity.phase().quiet() {
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
                    match activity.phase() {
                        Phase::Idle => {
                            tracing::debug!(%peer, "http: idle keep-alive connection closed");
                            connection.as_mut().graceful_shutdown();
                            closing = true;
                            give_up = Some(now + CLOSE_GRACE);
                        }
                        // Debug: a flood of these is bounded by the caps, not by the log.
                        phase => {
                            tracing::debug!(%peer, ?phase, "http: request headers not received in time; connection closed");
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
    activity.enter(Phase::Busy);
    let client_keeps_alive = wants_keep_alive(&request);
    let read_to_end = Arc::new(AtomicBool::new(hyper::body::Body::is_end_stream(request.body())));
    let mut request = request.map(|incoming| {
        Body::new(TrackedRequestBody { inner: incoming, read_to_end: Arc::clone(&read_to_end) })
    });
    request.extensions_mut().insert(ConnectInfo(peer));
    let Ok(mut response) = router.oneshot(request).await;
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
/// for a keep-alive connection).
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
        Pin::new(&mut self.stream).poll_write(cx, buf)
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
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A request body that records whether it was read to its end.
struct TrackedRequestBody {
    inner: Incoming,
    read_to_end: Arc<AtomicBool>,
}

impl hyper::body::Body for TrackedRequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read_to_end.store(true, Ordering::Release);
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
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: max,
            max_connections_per_client: per_client,
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
}
