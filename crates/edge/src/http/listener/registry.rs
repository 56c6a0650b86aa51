//! The registry of one HTTP listener's open connections: each connection's phase and its
//! deadline (`deadline`), its client as the per-client cap counts it (`client_key`), and the
//! choice of the connection to close when the listener is full (`evictable_since`, `victim`).
//! The accept loop admits and releases connections here; the connection's task, its socket
//! wrapper and its bodies (`watch`) move its phase.
//!
//! It decides, from atomics and the time, and does no I/O: it knows neither sockets nor hyper.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use bootvol_core::config::ConnectionLimits;

/// Added to `idle_timeout` before an idle connection is closed, so that a client that honours
/// the announced `Keep-Alive: timeout=` never sends on a connection being closed.
const IDLE_GRACE: Duration = Duration::from_secs(1);

/// Why a new connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    PerClient,
    Full,
}

/// What the per-client cap counts a connection's address as: an IPv4 address (IPv4-mapped IPv6
/// included) as itself, an IPv6 address by its /64 prefix (one host, or one LAN, gets a whole
/// /64 and can pick any address in it).
pub(super) fn client_key(ip: IpAddr) -> IpAddr {
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
pub(super) enum Phase {
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
    pub(super) fn quiet(self) -> bool {
        matches!(self, Phase::Fresh | Phase::Idle)
    }

    /// In the middle of a request, waiting on the client (to send its headers or body, to take
    /// the answer).
    pub(super) fn waits_on_client(self) -> bool {
        matches!(self, Phase::Headers | Phase::Body | Phase::Sending)
    }
}

/// A connection's phase as of one moment: what the deadlines are decided from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct State {
    pub(super) phase: Phase,
    /// When the phase began.
    pub(super) since: Instant,
    /// When the last byte was received or sent (at least `since`).
    pub(super) progress: Instant,
    /// Bytes of the request body received (in `Body`).
    pub(super) body_received: u64,
}

/// When a connection in `state` is cut (or, idle, closed), or `None` while its handler works.
pub(super) fn deadline(state: &State, limits: &ConnectionLimits) -> Option<Instant> {
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
pub(super) fn evictable_since(state: &State) -> Option<Instant> {
    match state.phase {
        phase if phase.quiet() => Some(state.since),
        Phase::Busy => None,
        _ => Some(state.progress.max(state.since)),
    }
}

/// The connection to close to make room: of the client holding the most connections, the one
/// that moved nothing for the longest. `candidates`: (id, client's open connections, since when
/// evictable).
pub(super) fn victim(candidates: impl Iterator<Item = (u64, usize, Instant)>) -> Option<u64> {
    candidates
        .min_by_key(|&(id, held, since)| (std::cmp::Reverse(held), since, id))
        .map(|(id, ..)| id)
}

/// A connection's phase and when it began, shared by its task, its socket wrapper, its request
/// handler and the registry (which reads it to pick the connection to evict).
#[derive(Debug)]
pub(super) struct Activity {
    epoch: Instant,
    phase: AtomicU8,
    /// Nanoseconds from `epoch` to the start of the phase.
    since: AtomicU64,
    /// Nanoseconds from `epoch` to the last byte read or written.
    progress: AtomicU64,
    body_received: AtomicU64,
    /// Closed by the registry to make room (not by shutdown).
    pub(super) evicted: AtomicBool,
}

impl Activity {
    pub(super) fn new(epoch: Instant) -> Activity {
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

    pub(super) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    fn nanos_now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn state(&self) -> State {
        let at =
            |nanos: &AtomicU64| self.epoch + Duration::from_nanos(nanos.load(Ordering::Acquire));
        State {
            phase: self.phase(),
            since: at(&self.since),
            progress: at(&self.progress),
            body_received: self.body_received.load(Ordering::Acquire),
        }
    }

    pub(super) fn enter(&self, phase: Phase) {
        let nanos = self.nanos_now();
        self.since.store(nanos, Ordering::Release);
        self.progress.store(nanos, Ordering::Release);
        self.body_received.store(0, Ordering::Release);
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// Bytes arrived: a request is starting, if none was, or its headers or body are moving.
    pub(super) fn received(&self) {
        match self.phase() {
            phase if phase.quiet() => self.enter(Phase::Headers),
            Phase::Headers | Phase::Body => self.progressed(),
            // Bytes of a pipelined request do not make up for a response not taken.
            _ => {}
        }
    }

    /// The socket took bytes: a response is moving.
    pub(super) fn sent(&self) {
        if self.phase() == Phase::Sending {
            self.progressed();
        }
    }

    fn progressed(&self) {
        self.progress.store(self.nanos_now(), Ordering::Release);
    }

    /// Bytes of the request body reached the handler.
    pub(super) fn body_bytes(&self, count: usize) {
        self.body_received.fetch_add(count as u64, Ordering::AcqRel);
    }

    /// The body was received to its end: the handler, not the client, is waited on.
    pub(super) fn body_done(&self) {
        if self.phase() == Phase::Body {
            self.enter(Phase::Busy);
        }
    }

    pub(super) fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        deadline(&self.state(), limits)
    }

    fn evictable_since(&self) -> Option<Instant> {
        evictable_since(&self.state())
    }
}

/// The open connections of one listener, by id, with a count per client address.
#[derive(Debug)]
pub(super) struct Registry {
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
pub(super) struct Admitted {
    pub(super) id: u64,
    pub(super) activity: Arc<Activity>,
    /// Cancelled when the registry evicts the connection, or at shutdown (a child token).
    pub(super) close: CancellationToken,
}

impl Registry {
    pub(super) fn new(limits: ConnectionLimits) -> Registry {
        Registry { limits, epoch: Instant::now(), inner: Mutex::new(RegistryInner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        // A panic while holding the lock leaves consistent counts (every change is one step).
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Makes room for a connection from `client` (a `client_key`), evicting one (`victim`) if
    /// the listener is full, or refuses it.
    pub(super) fn admit(
        &self,
        client: IpAddr,
        shutdown: &CancellationToken,
    ) -> Result<Admitted, Refusal> {
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

    pub(super) fn release(&self, id: u64) {
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
