//! Live updates: `GET /admin/stream`, one server-sent events stream (`text/event-stream`) that
//! pushes each node's row (state, power, where an action takes it, last error, scenario and boot
//! problem), the attention counts and the boot requests as they happen; and `GET /admin/live.js`,
//! the small script (no framework) the nodes list and the node pages load to follow it. Without
//! JavaScript the pages work as before, by reload.
//!
//! Where it hears of changes: [`Feed`], which `app` makes once and hands to the boot snapshot's
//! watcher (called after every rebuilt snapshot: any change to the nodes, here or by another
//! instance, [`Feed::nodes_changed`], a `watch` channel that keeps only the newest generation)
//! and to the ring of recent boot requests the boot listeners record into ([`Feed::boot`], a
//! `broadcast` channel of [`BOOTS_BUFFER`]). A stream reads the rack again (one fold, shared by
//! every stream of the same generation) at most once a tick, when the generation moved, and
//! sends only the rows that differ from what it sent. What a stream holds is bounded: the view
//! it last sent (shared), the rows of one diff waiting to be taken, and its place in the
//! broadcast; a reader that falls [`BOOTS_BUFFER`] boot requests behind is dropped (`end`,
//! "too slow"), and the listener cuts one that takes nothing for its `send_timeout`.
//!
//! One stream per session: a second stream of the same session **replaces** the first, which
//! gets `event: end` (`replaced`) and ends (a page reloaded or left for another opens the new
//! one while the old may not have closed yet; refusing it would leave the new page without
//! updates). The script does not reconnect after `end`, so two tabs do not take it in turns.
//! The stream ends with its session: every tick ([`TICK`]) checks it without using it (an open
//! page does not keep a session alive), and a log-out ends it at once. A `: keepalive` comment
//! goes out after [`KEEPALIVE`] without an event, so proxies keep it open.
//!
//! It must not know SQL or how rows are decided: the rows are `rack`'s, read through `rows`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{AdminState, rack, rows};
use bootvol_core::recent::{BootHit, BootResult};

/// How often a stream checks its session and whether the rack changed.
pub(super) const TICK: Duration = Duration::from_secs(1);

/// A `: keepalive` comment after this long without an event (under the listener's
/// `send_timeout`, 30 s by default).
pub(super) const KEEPALIVE: Duration = Duration::from_secs(15);

/// Boot requests a stream may fall behind before it is dropped.
pub(super) const BOOTS_BUFFER: usize = 64;

/// What EventSource waits before it reconnects after a lost connection.
const RETRY: Duration = Duration::from_secs(3);

/// The script of the pages, served as it is.
const SCRIPT: &str = include_str!("../../templates/admin/live.js");

/// The rack as a stream shows it at one generation: each node's row by UUID, and the counts.
#[derive(Debug, Default)]
pub(super) struct View {
    rows: BTreeMap<String, rack::Summary>,
    attention: rack::Attention,
}

/// How a stream is told to end, and why.
#[derive(Debug, Default)]
struct Ending {
    token: CancellationToken,
    reason: Mutex<&'static str>,
}

impl Ending {
    fn end(&self, reason: &'static str) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason;
        self.token.cancel();
    }
}

/// Where the live streams hear of changes and boot requests, and which stream each session
/// has.
pub struct Feed {
    changes: watch::Sender<u64>,
    boots: broadcast::Sender<BootHit>,
    shutdown: CancellationToken,
    /// Each session's stream: its number and how to end it.
    streams: Mutex<HashMap<String, (u64, Arc<Ending>)>>,
    next: AtomicU64,
    /// The view of the newest generation read (one fold for every stream).
    cache: tokio::sync::Mutex<Option<(u64, Arc<View>)>>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("generation", &*self.changes.borrow()).finish()
    }
}

impl Feed {
    /// A feed whose streams end at `shutdown`.
    pub fn new(shutdown: CancellationToken) -> Arc<Feed> {
        Arc::new(Feed {
            changes: watch::channel(0).0,
            boots: broadcast::channel(BOOTS_BUFFER).0,
            shutdown,
            streams: Mutex::default(),
            next: AtomicU64::new(1),
            cache: tokio::sync::Mutex::new(None),
        })
    }

    /// The nodes changed (a snapshot was rebuilt): a new generation. Never blocks.
    pub fn nodes_changed(&self) {
        self.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// A boot request as it happens. Never blocks; an unknown MAC changes the counts too.
    pub fn boot(&self, hit: &BootHit) {
        let _ = self.boots.send(hit.clone());
        if hit.result == BootResult::UnknownMac {
            self.nodes_changed();
        }
    }

    pub(super) fn generation(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Ends the stream of the session `id` (its log-out).
    pub(super) fn end_session(&self, id: &str, reason: &'static str) {
        let ended = self.streams.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        if let Some((_, ending)) = ended {
            ending.end(reason);
        }
    }

    /// The stream of session `id` from now, ending the one it had.
    fn register(self: &Arc<Feed>, id: String) -> Registration {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let ending = Arc::new(Ending::default());
        let old = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), (number, Arc::clone(&ending)));
        if let Some((_, old)) = old {
            old.end("replaced");
        }
        Registration { feed: Arc::clone(self), id, number, ending }
    }

    /// The view of the current generation: the one read already, or read now.
    async fn view(&self, state: &AdminState) -> Result<Arc<View>, String> {
        let mut cache = self.cache.lock().await;
        let generation = self.generation();
        if let Some((g, view)) = cache.as_ref()
            && *g == generation
        {
            return Ok(Arc::clone(view));
        }
        let view = Arc::new(read_view(state).await?);
        *cache = Some((generation, Arc::clone(&view)));
        Ok(view)
    }
}

/// A stream's place in [`Feed::streams`], given up when the stream is dropped (it ended, or
/// its client went away).
struct Registration {
    feed: Arc<Feed>,
    id: String,
    number: u64,
    ending: Arc<Ending>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut streams = self.feed.streams.lock().unwrap_or_else(|p| p.into_inner());
        if streams.get(&self.id).is_some_and(|(n, _)| *n == self.number) {
            streams.remove(&self.id);
        }
    }
}

/// Every node's row and the counts, as the nodes list makes them (`rows`, `rack`).
async fn read_view(state: &AdminState) -> Result<View, String> {
    let drift_lines = match state.nodes().sync_overview().await {
        Ok((Some(last), _)) => rack::sync_lines(&last.message),
        _ => Vec::new(),
    };
    let inputs = match rows::RowInputs::read(state, &drift_lines).await {
        Ok(inputs) => inputs,
        Err(_) => rows::RowInputs::read_without_reports(state, &drift_lines),
    };
    let (rows, known) = state
        .nodes()
        .fold_nodes((Vec::new(), HashSet::new()), move |(rows, known), r| {
            rows.push(inputs.row(r));
            known.extend(r.ports.iter().map(|p| p.address));
        })
        .await
        .map_err(|e| e.to_string())?;
    let attention = rack::attention(&rows, super::unknown_macs(state, &known).len());
    Ok(View { rows: rows.into_iter().map(|r| (r.uuid.clone(), r)).collect(), attention })
}

/// An event named `name` whose data is `value` as JSON.
fn json_event(name: &str, value: &impl serde::Serialize) -> Event {
    Event::default().event(name).data(serde_json::to_string(value).unwrap_or_default())
}

/// What woke a stream up.
enum Wake {
    Ended(&'static str),
    Boot(Result<BootHit, RecvError>),
    Tick,
}

/// One stream: what it sent last, what waits to be taken, and where it hears from.
struct Live {
    state: AdminState,
    cookie: String,
    /// Only this node's rows (a node page).
    node: Option<String>,
    changes: watch::Receiver<u64>,
    boots: broadcast::Receiver<BootHit>,
    registration: Registration,
    sent: Arc<View>,
    queue: VecDeque<Event>,
    tick: tokio::time::Interval,
    last_sent: Instant,
    done: bool,
}

impl Live {
    /// The next event, or `None` once the stream ended.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                self.last_sent = Instant::now();
                return Some(event);
            }
            if self.done {
                return None;
            }
            let wake = self.wait().await;
            self.handle(wake).await;
        }
    }

    async fn wait(&mut self) -> Wake {
        let ending = &self.registration.ending;
        tokio::select! {
            () = self.state.live.shutdown.cancelled() => Wake::Ended("the server is stopping"),
            () = ending.token.cancelled() =>
                Wake::Ended(*ending.reason.lock().unwrap_or_else(|p| p.into_inner())),
            hit = self.boots.recv() => Wake::Boot(hit),
            _ = self.tick.tick() => Wake::Tick,
        }
    }

    async fn handle(&mut self, wake: Wake) {
        match wake {
            Wake::Ended(reason) => self.end(reason),
            Wake::Boot(Ok(hit)) => {
                self.queue.push_back(json_event("boot", &super::node::boot_hit(&hit)))
            }
            Wake::Boot(Err(RecvError::Lagged(_))) => {
                self.end("too slow: boot requests came faster than this page took them");
            }
            Wake::Boot(Err(RecvError::Closed)) => self.end("the server is stopping"),
            Wake::Tick => self.tick().await,
        }
    }

    /// The session still live? The rack changed? Quiet for too long?
    async fn tick(&mut self) {
        if !self.state.sessions().await.alive(&self.cookie) {
            return self.end("session ended");
        }
        if self.changes.has_changed().unwrap_or(false) {
            self.changes.borrow_and_update();
            match self.state.live.view(&self.state).await {
                Ok(view) => self.diff(view),
                Err(e) => {
                    tracing::warn!(error = %e, "admin live stream: the rack could not be read")
                }
            }
        }
        if self.queue.is_empty() && self.last_sent.elapsed() >= KEEPALIVE {
            self.queue.push_back(Event::default().comment(" keepalive"));
        }
    }

    /// The rows of `view` that differ from those sent (or went), the counts if they changed.
    fn diff(&mut self, view: Arc<View>) {
        let wanted = |uuid: &str| self.node.as_deref().is_none_or(|n| n == uuid);
        for (uuid, row) in &view.rows {
            if wanted(uuid) && self.sent.rows.get(uuid) != Some(row) {
                self.queue.push_back(json_event("node", row));
            }
        }
        for uuid in self.sent.rows.keys() {
            if wanted(uuid) && !view.rows.contains_key(uuid) {
                self.queue.push_back(json_event("gone", &serde_json::json!({"uuid": uuid})));
            }
        }
        if view.attention != self.sent.attention {
            self.queue.push_back(json_event("attention", &view.attention));
        }
        self.sent = view;
    }

    fn end(&mut self, reason: &'static str) {
        self.queue.push_back(json_event("end", &serde_json::json!({"reason": reason})));
        self.done = true;
    }
}

/// `GET /admin/stream[?gen=G][&node=UUID]`: the live stream of a logged-in session (401
/// without one: EventSource does not retry it). `gen` is the generation the page was made at:
/// when the rack changed since, every row (or the node's) is sent first.
pub(super) async fn stream(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let sessions = state.sessions().await;
    let found = super::cookie_value(&headers).and_then(|c| {
        let live = sessions.get(&c).is_some_and(|s| s.user.is_some());
        live.then(|| sessions.id_of(&c).map(|id| (c, id))).flatten()
    });
    let Some((cookie, id)) = found else {
        return (StatusCode::UNAUTHORIZED, "Log in first: the live stream is for a session.")
            .into_response();
    };
    let live = match Live::open(state, cookie, id, &query).await {
        Ok(live) => live,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
    };
    let events = futures_util::stream::unfold(live, |mut live| async move {
        live.next().await.map(|event| (Ok::<Event, Infallible>(event), live))
    });
    let mut response = Sse::new(events).into_response();
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

impl Live {
    /// The stream of session `id` (replacing the one it had), its first events queued: the
    /// reconnection delay, a hello, and every row when the page is older than the rack.
    async fn open(
        state: AdminState,
        cookie: String,
        id: String,
        query: &HashMap<String, String>,
    ) -> Result<Live, String> {
        let feed = Arc::clone(&state.live);
        let registration = feed.register(id);
        let generation = feed.generation();
        let (changes, boots) = (feed.changes.subscribe(), feed.boots.subscribe());
        let view = feed.view(&state).await?;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let node = query.get("node").filter(|n| !n.is_empty()).cloned();
        let mut live = Live {
            state,
            cookie,
            node,
            changes,
            boots,
            registration,
            tick,
            sent: Arc::new(View::default()),
            queue: VecDeque::new(),
            last_sent: Instant::now(),
            done: false,
        };
        live.queue.push_back(Event::default().retry(RETRY));
        live.queue.push_back(json_event(
            "hello",
            &serde_json::json!({"generation": generation,
            "rule": "one stream per session: a newer one replaces this one"}),
        ));
        if query.get("gen").and_then(|g| g.parse::<u64>().ok()) == Some(generation) {
            live.sent = view;
        } else {
            live.diff(view);
        }
        Ok(live)
    }
}

/// `GET /admin/live.js`: the script the pages load (the same for everyone: no session).
pub(super) async fn script() -> Response {
    let kind = HeaderValue::from_static("text/javascript; charset=utf-8");
    let cache = HeaderValue::from_static("no-cache");
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, cache)], SCRIPT).into_response()
}
