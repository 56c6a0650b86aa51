//! The traits the lower crates define to call up, implemented here over the database and the
//! conductor: the boot edge's deploy endpoints ([`DeployBridge`]), its refusal and conflict
//! events ([`EventBridge`]), nodes' boot reports ([`ReportBridge`]), the metrics' scrape-time read of the last sync pass
//! ([`SyncBridge`]), the snapshot watcher's reads ([`DbSnapshotSource`]) and PostgreSQL's change
//! listener's reports ([`ListenerEvents`]). Each is a thin adapter: no rule of its own.

use std::future::Future;
use std::pin::Pin;

use tokio_util::task::TaskTracker;

use bootvol_control::conductor::{Conductor, ConductorError};
use bootvol_core::deploy::{CallbackReport, Caller};
use bootvol_core::model::NodeRecord;
use bootvol_core::model::sync::SyncStatus;
use bootvol_db::{Db, SharedDb};
use bootvol_edge::http::{DeployBackend, DeployError};

/// The conductor behind the boot listener's deploy endpoints.
#[derive(Debug)]
pub(crate) struct DeployBridge(pub(crate) Conductor);

fn deploy_error(e: ConductorError) -> DeployError {
    let text = e.to_string();
    match e {
        ConductorError::Refused(_) | ConductorError::Inadmissible(_) => DeployError::Refused(text),
        ConductorError::NotFound(_) => DeployError::NotFound(text),
        ConductorError::Locked(_) => DeployError::Locked(text),
        ConductorError::Failed(_) | ConductorError::Db(_) => DeployError::Failed(text),
    }
}

#[async_trait::async_trait]
impl DeployBackend for DeployBridge {
    async fn token(&self, node_uuid: &str, caller: Caller) -> Result<String, DeployError> {
        self.0.deploy_token(node_uuid, caller).await.map_err(deploy_error)
    }

    async fn callback(
        &self,
        node_uuid: &str,
        token: &str,
        caller: Caller,
        report: CallbackReport,
    ) -> Result<(), DeployError> {
        self.0.deploy_callback(node_uuid, token, caller, report).await.map_err(deploy_error)
    }

    async fn configdrive(
        &self,
        node_uuid: &str,
        token: &str,
        caller: Caller,
    ) -> Result<Vec<u8>, DeployError> {
        self.0.configdrive(node_uuid, token, caller).await.map_err(deploy_error)
    }

    async fn node_names(&self, node: &str) -> Option<(String, String)> {
        let record = self.0.load(node).await.ok()?;
        Some((record.node.uuid, record.node.name))
    }
}

/// Node events written for the boot edge, each on a task of `serve`'s tracker (drained at
/// shutdown), so the boot path never waits on the database.
#[derive(Debug)]
pub(crate) struct EventBridge {
    pub(crate) db: SharedDb,
    pub(crate) tasks: TaskTracker,
}

impl bootvol_edge::script_access::EventSink for EventBridge {
    fn record(&self, node_uuid: &str, event: &'static str, payload: serde_json::Value) {
        let (db, uuid) = (self.db.clone(), node_uuid.to_owned());
        self.tasks.spawn(async move {
            db.record_event(&uuid, event.to_owned(), "warning", payload).await;
        });
    }
}

/// Boot reports waiting to be written, at most: past it a report is dropped (and counted by
/// the edge), so a flood of reports never grows memory nor the database's backlog.
const REPORT_QUEUE: usize = 256;

/// A queued report: the node's UUID, the level, the payload.
type QueuedReport = (String, &'static str, serde_json::Value);

/// Nodes' boot reports, queued (bounded) and written one after another by one task on
/// `serve`'s tracker, which writes what is queued and ends at shutdown.
#[derive(Debug)]
pub(crate) struct ReportBridge {
    queue: tokio::sync::mpsc::Sender<QueuedReport>,
}

impl ReportBridge {
    /// The boot listener's reports, written through a new bridge.
    pub(crate) fn reports(
        db: SharedDb,
        run: bootvol_control::services::Runner<'_>,
    ) -> std::sync::Arc<bootvol_edge::http::BootReports> {
        let (queue, mut queued) = tokio::sync::mpsc::channel::<QueuedReport>(REPORT_QUEUE);
        let shutdown = run.shutdown.clone();
        run.tracker.spawn(async move {
            let event = bootvol_edge::http::report::REPORT_EVENT;
            loop {
                let (uuid, level, payload) = tokio::select! {
                    Some(next) = queued.recv() => next,
                    () = shutdown.cancelled() => break,
                };
                db.record_event(&uuid, event.to_owned(), level, payload).await;
            }
            while let Ok((uuid, level, payload)) = queued.try_recv() {
                db.record_event(&uuid, event.to_owned(), level, payload).await;
            }
        });
        bootvol_edge::http::BootReports::new(std::sync::Arc::new(ReportBridge { queue }))
    }
}

impl bootvol_edge::http::ReportSink for ReportBridge {
    fn record(&self, node_uuid: &str, level: &'static str, payload: serde_json::Value) -> bool {
        self.queue.try_send((node_uuid.to_owned(), level, payload)).is_ok()
    }
}

/// The last Cinder sync pass, read for a scrape on the metrics' own connection.
#[derive(Debug)]
pub(crate) struct SyncBridge(pub(crate) SharedDb);

impl bootvol_runtime::metrics::SyncSource for SyncBridge {
    fn last_sync(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<Option<SyncStatus>, String>> + Send + '_>> {
        Box::pin(async move { self.0.run(|db| db.sync_status()).await.map_err(|e| e.to_string()) })
    }
}

/// How recent an instance's heartbeat must be for scripts to fall back to it (seconds).
const PEER_FRESH_SECS: i64 = 20;

/// Nodes read and rendered at a time when the snapshot is built: the decoded records of every
/// node at once would cost more memory than the snapshot itself, and the allocator keeps what a
/// process once used.
const SNAPSHOT_PAGE: usize = 256;

/// The snapshot watcher's own connection.
#[derive(Debug)]
pub(crate) struct DbSnapshotSource(pub(crate) Db);

impl bootvol_edge::snapshot::SnapshotSource for DbSnapshotSource {
    fn version(&mut self) -> Option<i64> {
        self.0.data_version().ok()
    }

    fn is_shared(&self) -> bool {
        self.0.is_postgres()
    }

    fn peers(&mut self) -> Vec<String> {
        if !self.0.is_postgres() {
            return Vec::new();
        }
        let now = i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX);
        let Ok(live) = self.0.live_instances(now - PEER_FRESH_SECS) else { return Vec::new() };
        let mut urls: Vec<String> = live
            .into_iter()
            .filter(|i| i.id != bootvol_db::serve_id())
            .map(|i| i.boot_url)
            .collect();
        urls.sort();
        urls.dedup();
        urls
    }

    fn each_record(&mut self, add: &mut dyn FnMut(&NodeRecord)) -> Result<(), String> {
        self.0
            .for_each_node_record_page(SNAPSHOT_PAGE, |records| {
                records.iter().for_each(&mut *add);
                Ok::<(), bootvol_db::DbError>(())
            })
            .map_err(|e| e.to_string())
    }

    fn change_seq(&mut self) -> Option<i64> {
        self.0.change_seq().ok()
    }

    fn changed_nodes(&mut self, since: i64, limit: usize) -> Option<(i64, Vec<String>)> {
        let read = u32::try_from(limit + 1).unwrap_or(u32::MAX);
        let changes = self.0.changes_since(since, read).ok()??;
        if changes.len() > limit {
            return None;
        }
        let last = changes.last().map_or(since, |c| c.seq);
        let mut seen = std::collections::HashSet::new();
        let nodes = changes
            .into_iter()
            .filter(|c| c.entity == "nodes" && seen.insert(c.key.clone()))
            .map(|c| c.key)
            .collect();
        Some((last, nodes))
    }

    fn records(&mut self, uuids: &[String]) -> Result<Vec<(String, Option<NodeRecord>)>, String> {
        uuids
            .iter()
            .map(|uuid| Ok((uuid.clone(), self.0.node_record(uuid).map_err(|e| e.to_string())?)))
            .collect()
    }

    /// What the change log says happened (PostgreSQL), for the log. The snapshot is rebuilt
    /// whole either way; a reader behind the pruned log notices here.
    fn log_changes(&mut self, from: i64, to: i64) {
        match self.0.changes_since(from, 1000) {
            Ok(Some(changes)) => tracing::info!(
                from,
                to,
                changes = changes.len(),
                first = ?changes.first().map(|c| format!("{} {} {}", c.op, c.entity, c.key)),
                "catching up by change seq"
            ),
            Ok(None) => {
                tracing::warn!(from, to, "behind the pruned change log: reloading everything")
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the change log"),
        }
    }

    fn release_memory(&mut self) {
        if let Err(error) = self.0.release_memory() {
            tracing::debug!(%error, "could not release the watcher's database memory");
        }
    }
}

/// PostgreSQL's change listener, reported to the snapshot watcher and the metrics.
#[derive(Debug)]
pub(crate) struct ListenerEvents {
    pub(crate) snapshot: bootvol_edge::snapshot::SnapshotHandle,
    pub(crate) metrics: std::sync::Arc<bootvol_runtime::metrics::Metrics>,
}

impl bootvol_db::listen::ListenEvents for ListenerEvents {
    fn changed(&self, _seq: Option<i64>) {
        self.snapshot.changed();
    }

    fn connected(&self, up: bool) {
        self.metrics.set_database_connected(up);
    }
}
