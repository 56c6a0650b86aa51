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
//!
//! This file is the accept loop and each connection's task (its deadlines enforced, one step
//! each: `next_wake`, `told_to_close`, `timer_fired`); `registry` keeps the open connections,
//! their phases and deadlines and picks the one to evict (no I/O); `watch` holds the socket
//! wrapper and the bodies that note what moved.

mod registry;
mod watch;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use bootvol_core::config::ConnectionLimits;
use registry::{Activity, Admitted, Phase, Refusal, Registry, client_key};
use watch::{IdleWhenDone, TrackedRequestBody, Watched};

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
    let Admitted { activity, close, .. } = admitted;
    let keep_alive = keep_alive_header(&limits);
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
        let wake = next_wake(give_up, activity, &limits);
        let step = tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "http connection ended");
                }
                break;
            }
            () = close.cancelled(), if !closing => told_to_close(activity, peer),
            () = tokio::time::sleep_until(wake.into()) => {
                timer_fired(activity, &limits, peer, closing, give_up)
            }
        };
        match step {
            Step::Wait => {}
            Step::Cut => break,
            Step::Close { give_up_at } => {
                connection.as_mut().graceful_shutdown();
                closing = true;
                if give_up_at.is_some() {
                    give_up = give_up_at;
                }
            }
        }
    }
}

/// The `Keep-Alive:` header every response offered keep-alive carries.
fn keep_alive_header(limits: &ConnectionLimits) -> HeaderValue {
    HeaderValue::from_str(&format!("timeout={}", limits.idle_timeout.as_secs()))
        .unwrap_or(HeaderValue::from_static("timeout=1"))
}

/// What a connection's task does next about its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing: serve on.
    Wait,
    /// Drop the connection where it stands.
    Cut,
    /// Close it gracefully (hyper answers a request in flight first, with `Connection: close`),
    /// and drop it at `give_up_at` if given (otherwise the give-up time stays as it was).
    Close { give_up_at: Option<Instant> },
}

/// When the connection's task looks again: at the give-up time, its phase's deadline, or a
/// [`TICK`] from now, whichever is first.
fn next_wake(give_up: Option<Instant>, activity: &Activity, limits: &ConnectionLimits) -> Instant {
    let now = Instant::now();
    [give_up, activity.deadline(limits), Some(now + TICK)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + TICK)
}

/// The connection was told to close (evicted, or shutdown): one evicted in the middle of a
/// request waiting on its client is cut; any other closes gracefully, a quiet one at once
/// (dropped after [`CLOSE_GRACE`]), a busy one after its answer.
fn told_to_close(activity: &Activity, peer: SocketAddr) -> Step {
    let phase = activity.phase();
    if phase.waits_on_client() && activity.evicted.load(Ordering::Acquire) {
        tracing::debug!(%peer, ?phase, "http: connection in a request cut to make room");
        return Step::Cut;
    }
    let give_up_at = phase.quiet().then(|| Instant::now() + CLOSE_GRACE);
    Step::Close { give_up_at }
}

/// The connection's timer fired: past the give-up time it is dropped; past its phase's deadline
/// an idle one is closed and one waiting on its client is cut; otherwise it serves on.
fn timer_fired(
    activity: &Activity,
    limits: &ConnectionLimits,
    peer: SocketAddr,
    closing: bool,
    give_up: Option<Instant>,
) -> Step {
    let now = Instant::now();
    if give_up.is_some_and(|at| now >= at) {
        return Step::Cut;
    }
    let Some(deadline) = activity.deadline(limits) else { return Step::Wait };
    if now < deadline {
        return Step::Wait;
    }
    // Debug: a flood of these is bounded by the caps, not by the log.
    match activity.phase() {
        Phase::Idle if !closing => {
            tracing::debug!(%peer, "http: idle keep-alive connection closed");
            Step::Close { give_up_at: Some(now + CLOSE_GRACE) }
        }
        Phase::Idle | Phase::Busy => Step::Wait,
        Phase::Fresh | Phase::Headers => {
            tracing::debug!(%peer, "http: request headers not received in time; connection closed");
            Step::Cut
        }
        Phase::Body => {
            tracing::debug!(%peer, "http: request body not received in time; connection cut");
            Step::Cut
        }
        Phase::Sending => {
            tracing::debug!(%peer, "http: response not taken in time; connection cut");
            Step::Cut
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
}
