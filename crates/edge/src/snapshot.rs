//! The boot snapshot's owner at run time: builds the first snapshot before anything is served,
//! then runs the watcher that brings it up to date whenever the store says a writer committed
//! (SQLite's `data_version`, PostgreSQL's change log) or [`SnapshotHandle::changed`] asks, and
//! swaps it atomically: requests in flight keep the snapshot they started with.
//!
//! Up to date means, by preference, only the nodes the change log names since the snapshot's
//! own change (their records read again and rendered, every other script kept:
//! [`BootSnapshot::with_changes`]), so that one change is served in milliseconds whatever the
//! number of nodes. The whole snapshot is built anew at start, on [`SnapshotHandle::reload`]
//! (SIGHUP: templates too), when the boot URL or the set of live peers changed (every script
//! names them), and when the log cannot say what changed (pruned, or more than
//! [`INCREMENTAL_LIMIT`] changes). Each new snapshot, whole or updated, is announced
//! (`WatcherInputs::on_rebuilt`).
//!
//! It reads the store only through [`SnapshotSource`], which the binary implements over the
//! database: it must not know SQL, tables or which engine answers.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bootvol_core::boot::{BootSettings, BootSnapshot, SnapshotBuilder, Templates};
use bootvol_core::config::Config;
use bootvol_core::model::NodeRecord;
use bootvol_runtime::liveness::Heart;
use bootvol_runtime::metrics::Metrics;
use bootvol_runtime::public_url::PublicUrl;

/// What the watcher reads of the store, on its own blocking thread.
pub trait SnapshotSource: Send + 'static {
    /// A number that changes whenever another writer committed; `None` when the store cannot
    /// be read now.
    fn version(&mut self) -> Option<i64>;
    /// Whether several instances share the store (PostgreSQL): then an unreadable store keeps
    /// the current snapshot, and what changed is logged from the change log.
    fn is_shared(&self) -> bool;
    /// The boot URLs of the other live instances, sorted (none when the store is not shared).
    fn peers(&mut self) -> Vec<String>;
    /// Feeds every node's record to `add`, a page at a time.
    fn each_record(&mut self, add: &mut dyn FnMut(&NodeRecord)) -> Result<(), String>;
    /// Logs what changed between versions `from` and `to` (diagnostics only).
    fn log_changes(&mut self, from: i64, to: i64);
    /// Hands back what reading the records cost (caches), after a build.
    fn release_memory(&mut self);
    /// The change log's last sequence number; `None` when the store cannot be read now.
    fn change_seq(&mut self) -> Option<i64>;
    /// The nodes changed after change `since` (their UUIDs, each once) and the last change
    /// read; `None` when the log cannot say (pruned past `since`, unreadable) or names more
    /// than `limit` changes: then the whole snapshot is built anew.
    fn changed_nodes(&mut self, since: i64, limit: usize) -> Option<(i64, Vec<String>)>;
    /// Each node's record now, by UUID (`None`: it is gone).
    fn records(&mut self, uuids: &[String]) -> Result<Vec<(String, Option<NodeRecord>)>, String>;
}

/// A handle on the running snapshot, for callers that change the data in-process.
#[derive(Debug, Clone)]
pub struct SnapshotHandle {
    pub current: Arc<ArcSwap<BootSnapshot>>,
    wake: mpsc::Sender<Wake>,
}

/// Why the watcher wakes before its next check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// Rebuild now, templates included (SIGHUP, a change made by this process).
    Reload,
    /// The store announced a change (or its listener reconnected): check now.
    Changed,
}

impl SnapshotHandle {
    /// Asks the watcher to rebuild now, templates included (SIGHUP does the same).
    pub fn reload(&self) {
        let _ = self.wake.send(Wake::Reload);
    }

    /// Asks the watcher to look for changes now.
    pub fn changed(&self) {
        let _ = self.wake.send(Wake::Changed);
    }
}

/// What the watcher needs besides its source.
pub struct WatcherInputs {
    pub metrics: Arc<Metrics>,
    pub heart: Heart,
    pub public_url: PublicUrl,
    /// Called after each rebuilt snapshot is swapped in (every change to the nodes, made here
    /// or by another instance): the admin page's live stream hears of changes so. It must not
    /// block (the watcher's thread calls it).
    pub on_rebuilt: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for WatcherInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatcherInputs")
            .field("public_url", &self.public_url)
            .field("on_rebuilt", &self.on_rebuilt.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds the first snapshot (synchronously: nothing is served before it exists) and starts
/// the watcher that rebuilds it: a blocking task of `tracker` (it only ever waits on the store
/// and its channel) that ends at `shutdown`, answering its heart each time it wakes.
pub fn start(
    config: &Config,
    mut source: impl SnapshotSource,
    inputs: WatcherInputs,
    tracker: &TaskTracker,
    shutdown: CancellationToken,
) -> anyhow::Result<SnapshotHandle> {
    let templates = Templates::new(config.boot.templates_dir.as_deref())?;
    let peers = source.peers();
    let url = inputs.public_url.get();
    let seq = source.change_seq();
    let started = Instant::now();
    let first = build(&mut source, &templates, config, &inputs.metrics, &url, &peers)?;
    let built_in = started.elapsed();
    let current = Arc::new(ArcSwap::from_pointee(first));
    let (wake, requests) = mpsc::channel();
    let watcher = Watcher {
        source,
        templates,
        config: config.clone(),
        current: Arc::clone(&current),
        requests,
        shutdown,
        inputs,
        peers,
        url,
        seq,
        last_full: (Instant::now(), built_in),
        unexplained: false,
    };
    tracker.spawn_blocking(move || watcher.run());
    Ok(SnapshotHandle { current, wake })
}

fn build(
    source: &mut impl SnapshotSource,
    templates: &Templates,
    config: &Config,
    metrics: &Metrics,
    public_url: &str,
    peers: &[String],
) -> anyhow::Result<BootSnapshot> {
    let started = Instant::now();
    let settings = settings(config, public_url, peers);
    let mut builder =
        SnapshotBuilder::new(templates, &settings, config.default.default_storage_interface, 0);
    source.each_record(&mut |record| builder.add(record)).map_err(anyhow::Error::msg)?;
    let snapshot = builder.finish()?;
    source.release_memory();
    tracing::info!(
        nodes = snapshot.node_count(),
        macs = snapshot.mac_count(),
        build_ms = started.elapsed().as_millis() as u64,
        "boot snapshot built"
    );
    metrics.snapshot_built(snapshot.nodes_by_state(), started.elapsed());
    Ok(snapshot)
}

/// The settings every script is rendered with.
fn settings(config: &Config, public_url: &str, peers: &[String]) -> BootSettings {
    BootSettings {
        public_url: public_url.to_owned(),
        peers: peers.to_vec(),
        ..config.boot_settings()
    }
}

/// The most changes the watcher applies node by node; past it, it builds anew.
pub const INCREMENTAL_LIMIT: usize = 2000;

struct Watcher<S> {
    source: S,
    templates: Templates,
    config: Config,
    current: Arc<ArcSwap<BootSnapshot>>,
    requests: mpsc::Receiver<Wake>,
    shutdown: CancellationToken,
    inputs: WatcherInputs,
    /// The peers the current snapshot's generic script falls back to.
    peers: Vec<String>,
    /// The boot URL the current snapshot's scripts name.
    url: Arc<String>,
    /// The last change the current snapshot holds (`None`: unknown, build anew next time).
    seq: Option<i64>,
    /// When the last whole build ended, and what it took.
    last_full: (Instant, Duration),
    /// The store changed with nothing in the change log to say what (a write made behind
    /// bootvol's back, or only events): a whole build is due once [`Watcher::full_due`].
    unexplained: bool,
}

/// The least time between two whole builds made for writes the change log does not explain;
/// at least ten times what the last whole build took, so that a store busy with events costs
/// the watcher a tenth of a core at the most.
const UNEXPLAINED_REBUILD: Duration = Duration::from_secs(10);

/// The longest the watcher sleeps before it answers its liveness tick, whatever
/// `[database] watch_interval_ms` says.
const WATCHER_WAKE: Duration = Duration::from_secs(1);

impl<S: SnapshotSource> Watcher<S> {
    fn run(mut self) {
        let interval = Duration::from_millis(self.config.database.watch_interval_ms);
        let mut seen = self.source.version();
        let mut next_check = Instant::now() + interval;
        while !self.shutdown.is_cancelled() {
            self.inputs.heart.answer();
            let wait = next_check.saturating_duration_since(Instant::now()).min(WATCHER_WAKE);
            let requested = match self.requests.recv_timeout(wait) {
                Ok(Wake::Reload) => true,
                Ok(Wake::Changed) => false,
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < next_check => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => false,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            next_check = Instant::now() + interval;
            if let Some(version) = self.check(requested, seen) {
                seen = version;
            }
        }
    }

    /// One wake: rebuilds when asked, when the store changed since `seen` or when the peers
    /// changed; the version to remember, when a rebuild succeeded on a readable store.
    fn check(&mut self, requested: bool, seen: Option<i64>) -> Option<Option<i64>> {
        let version = self.source.version();
        let peers = self.source.peers();
        let peers_changed = version.is_some() && peers != self.peers;
        let due = self.unexplained && self.full_due();
        if !(requested || version != seen || peers_changed || due) {
            return None;
        }
        if !requested && self.source.is_shared() {
            // Unreachable: keep serving this snapshot; the store is retried at the next check,
            // and what changed is read from `seen` then.
            let to = version?;
            if let Some(from) = seen {
                self.source.log_changes(from, to);
            }
        }
        if requested {
            self.reload_templates();
        }
        let url = self.inputs.public_url.get();
        if !requested && !peers_changed && *url == *self.url && self.updated(version != seen) {
            return version.is_some().then_some(version);
        }
        let seq = self.source.change_seq();
        let full_started = Instant::now();
        let built = self.build_all(&url, &peers);
        match built {
            Ok(snapshot) => {
                self.current.store(Arc::new(snapshot));
                self.last_full = (Instant::now(), full_started.elapsed());
                self.unexplained = false;
                if let Some(rebuilt) = &self.inputs.on_rebuilt {
                    rebuilt();
                }
                self.peers = peers;
                self.url = url;
                self.seq = seq;
                version.is_some().then_some(version)
            }
            Err(e) => {
                self.inputs.metrics.snapshot_failed();
                tracing::error!(error = %e, "snapshot not rebuilt; still serving the previous one");
                None
            }
        }
    }

    /// Every node's script, built anew.
    fn build_all(&mut self, url: &str, peers: &[String]) -> anyhow::Result<BootSnapshot> {
        build(&mut self.source, &self.templates, &self.config, &self.inputs.metrics, url, peers)
    }

    /// Whether the snapshot is up to date without a whole build: [`Watcher::update`] did it,
    /// and no write the change log does not name (the store `moved` with no node changed) is
    /// due for a whole build.
    fn updated(&mut self, moved: bool) -> bool {
        if self.update() == Some(0) && moved {
            self.unexplained = true;
        }
        let due = self.unexplained && self.full_due();
        if self.seq.is_some() && due {
            tracing::info!(
                "the database changed where the change log does not say: building the snapshot anew"
            );
        }
        self.seq.is_some() && !due
    }

    /// Whether a whole build for unexplained writes may run now.
    fn full_due(&self) -> bool {
        let (ended, took) = self.last_full;
        ended.elapsed() >= UNEXPLAINED_REBUILD.max(took * 10)
    }

    /// Brings the snapshot up to date with the nodes the change log names since its own
    /// change: how many nodes changed, or `None` when it cannot (the caller builds anew, and
    /// forgets the snapshot's change so that it does).
    fn update(&mut self) -> Option<usize> {
        let started = Instant::now();
        let since = self.seq?;
        let Some((last, uuids)) = self.source.changed_nodes(since, INCREMENTAL_LIMIT) else {
            self.seq = None;
            return None;
        };
        if !uuids.is_empty() {
            let changed = match self.source.records(&uuids) {
                Ok(changed) => changed,
                Err(e) => {
                    tracing::warn!(error = %e, "changed nodes not read; building anew");
                    self.seq = None;
                    return None;
                }
            };
            let settings = settings(&self.config, &self.url, &self.peers);
            let storage = self.config.default.default_storage_interface;
            let next =
                self.current.load().with_changes(&changed, &self.templates, &settings, storage);
            self.current.store(Arc::new(next));
            let snapshot = self.current.load();
            tracing::info!(
                changed = uuids.len(),
                nodes = snapshot.node_count(),
                update_ms = started.elapsed().as_millis() as u64,
                "boot snapshot updated"
            );
            self.inputs.metrics.snapshot_built(snapshot.nodes_by_state(), started.elapsed());
        }
        self.seq = Some(last);
        // Said even when no node changed: the store did (an event, a boot report), and what the
        // admin page's live feed shows beside the scripts may have.
        if let Some(rebuilt) = &self.inputs.on_rebuilt {
            rebuilt();
        }
        Some(uuids.len())
    }

    /// SIGHUP: data and templates are re-read; the configuration is not.
    fn reload_templates(&mut self) {
        match Templates::new(self.config.boot.templates_dir.as_deref()) {
            Ok(templates) => self.templates = templates,
            Err(e) => {
                tracing::error!(error = %e, "templates not reloaded; keeping the previous ones")
            }
        }
    }
}
