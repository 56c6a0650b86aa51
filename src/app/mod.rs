//! `bootvol serve`: builds the owners and wires them together, then runs them until shutdown.
//! It holds no rule of its own: what is served and when background work runs is decided by the
//! owners, each starting its own services on the one [`TaskTracker`] this drains.
//!
//! - the boot snapshot and its watcher (`bootvol_edge::snapshot`), fed by the database through
//!   [`bridges::DbSnapshotSource`]; built before the listeners answer;
//! - the conductor with its services, the Cinder sync and, on PostgreSQL, the cluster's
//!   heartbeat and leases (`bootvol_control::services`);
//! - the boot edge: script access, ProxyDHCP, the `public_url = "auto"` watch, and the
//!   listeners ([`listeners`]); the signals ([`signals`]).
//!
//! On SIGTERM the listeners drain, then the conductor's actions in flight, the services and the
//! database's lock tasks are waited for, all within [`DRAIN_TIMEOUT`]; an action the deadline
//! cuts short is ended at the next start, as after a crash.
//!
//! Under systemd (`Type=notify`): `READY=1` once the listeners are bound and the first snapshot
//! is built (what `/readyz` calls ready), `STOPPING=1` when draining starts, and with
//! `WatchdogSec=` a `WATCHDOG=1` only while the TFTP loop, both HTTP accept loops, each
//! ProxyDHCP socket's loop and the snapshot watcher answer their liveness ticks (`liveness`).

mod bridges;
mod listeners;
mod signals;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bootvol_control::conductor::Conductor;
use bootvol_control::services::Runner;
use bootvol_core::boot_window::BootWindows;
use bootvol_core::config::{Config, ScriptSecrets};
use bootvol_core::files::FileRoot;
use bootvol_core::recent::RecentBoots;
use bootvol_db::{Database, SharedDb};
use bootvol_edge::http::BootState;
use bootvol_edge::script_access::ScriptAccess;
use bootvol_edge::snapshot::{SnapshotHandle, WatcherInputs};
use bootvol_edge::tftp_files::TftpBootFiles;
use bootvol_runtime::liveness::{Liveness, ServiceManager};
use bootvol_runtime::metrics::Metrics;
use bootvol_runtime::public_url::PublicUrl;
use bootvol_runtime::services;

pub use listeners::Listeners;
use listeners::{Running, Served};

/// How long in-flight requests, transfers, actions and service passes may take to finish after
/// SIGTERM, in all.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the admin page's per-minute boot activity is sampled from the counters: a minute's
/// count takes in at most this much of the next.
const ACTIVITY_SAMPLE: Duration = Duration::from_secs(5);

/// Runs the appliance until `shutdown` is cancelled, then drains.
pub async fn serve(
    config: Config,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<()> {
    let started = Instant::now();
    // Whatever way serve returns (an error at start included), what it started stops.
    let _stop_on_return = shutdown.clone().drop_guard();
    let tasks = TaskTracker::new();
    let run = Runner { tracker: &tasks, shutdown: &shutdown };
    let owners = Owners::build(config, run)?;
    let (http_addr, tftp_addr, api_addr) = listeners.addresses()?;
    let served = owners.served(api_addr, &tasks)?;
    let nodes = owners.snapshot.current.load().node_count();
    tracing::info!(http = %http_addr, tftp = %tftp_addr, api = %api_addr, auth = ?owners.config.api.auth_strategy, nodes,
        startup_ms = started.elapsed().as_millis() as u64, "serving");
    signals::handle(&tasks, owners.snapshot.clone(), shutdown.clone());
    bootvol_control::services::start(&owners.config, &owners.conductor, &owners.public_url, run)
        .await;
    owners.start_edge_services(run)?;
    let running =
        Running::start(&owners.config, listeners, served, &tasks, &shutdown, &owners.liveness)
            .await?;
    // Both boot listeners hold bound sockets and answer now; the first snapshot is built:
    // ready, for `/readyz` and for systemd alike.
    owners.metrics.set_boot_listeners_up(true);
    let notifier = ServiceManager::default();
    notifier.ready(&format!(
        "serving {nodes} nodes; boot HTTP {http_addr}, TFTP {tftp_addr}, API {api_addr}"
    ));
    if let Some(interval) = bootvol_runtime::liveness::watchdog_interval() {
        let (liveness, notifier) = (Arc::clone(&owners.liveness), notifier.clone());
        tasks.spawn(bootvol_runtime::liveness::watchdog(
            liveness,
            notifier,
            interval,
            shutdown.clone(),
        ));
    }
    let (result, deadline) = running
        .drain(&shutdown, || {
            owners.metrics.set_boot_listeners_up(false);
            notifier.stopping();
        })
        .await;
    owners.drain(&tasks, deadline).await;
    bootvol_control::services::leave(owners.database.shared()).await;
    tracing::info!("stopped");
    result
}

/// The boot windows `[boot] secret_window` configures.
fn boot_windows(config: &Config) -> Arc<BootWindows> {
    Arc::new(BootWindows::new(
        config.boot.secret_window,
        Duration::from_secs(config.boot.secret_window_seconds),
    ))
}

/// The admin page's live feed, what the snapshot watcher calls after each rebuild, and the
/// ring of recent boot requests that hands the feed each one: the live streams hear of every
/// change to the nodes and every boot request from there.
fn live_feed(
    run: &Runner<'_>,
) -> (Arc<crate::admin::Feed>, Arc<dyn Fn() + Send + Sync>, Arc<RecentBoots>) {
    let live = crate::admin::Feed::new(run.shutdown.clone());
    let (rebuilt, heard) = (Arc::clone(&live), Arc::clone(&live));
    let recent = RecentBoots::with_listener(Box::new(move |hit| heard.boot(hit)));
    (live, Arc::new(move || rebuilt.nodes_changed()), Arc::new(recent))
}

/// The owners `serve` builds, once each, from one database handle.
struct Owners {
    config: Config,
    /// As written: with `public_url = "auto"`, `config` holds the address found at start and
    /// this keeps `auto` for the watch that follows it.
    as_written: Config,
    public_url: PublicUrl,
    database: Database,
    liveness: Arc<Liveness>,
    metrics: Arc<Metrics>,
    snapshot: SnapshotHandle,
    recent: Arc<RecentBoots>,
    access: Arc<ScriptAccess>,
    /// Nodes' boot reports, queued for the database (`bridges::ReportBridge`).
    reports: Arc<bootvol_edge::http::BootReports>,
    conductor: Conductor,
    live: Arc<crate::admin::Feed>,
}

impl Owners {
    fn build(mut config: Config, run: Runner<'_>) -> Result<Owners> {
        let as_written = config.clone();
        let public_url = bootvol_runtime::public_url::initial(&config);
        config.http.public_url = public_url.get().to_string();
        let database = Database::open(&config.database)
            .with_context(|| format!("opening {}", config.database.shown()))?;
        let liveness = Arc::new(Liveness::new());
        let (live, rebuilt, recent) = live_feed(&run);
        // Its own connection: a scrape never waits behind the conductor's.
        let scrape = SharedDb::new(database.connection()?);
        let metrics = Metrics::new(Some(Arc::new(bridges::SyncBridge(scrape))));
        let inputs = WatcherInputs {
            metrics: Arc::clone(&metrics),
            heart: liveness.register("snapshot watcher"),
            public_url: public_url.clone(),
            on_rebuilt: Some(rebuilt),
        };
        let source = bridges::DbSnapshotSource(database.connection()?);
        let snapshot = bootvol_edge::snapshot::start(
            &config,
            source,
            inputs,
            run.tracker,
            run.shutdown.clone(),
        )?;
        let windows = boot_windows(&config);
        let access = script_access(&config, &database, &metrics, &windows, run.tracker);
        let reload = snapshot.clone();
        let conductor =
            Conductor::from_config(Arc::new(config.clone()), database.shared().clone())?
                .with_on_change(Arc::new(move || reload.changed()))
                .with_metrics(Arc::clone(&metrics))
                .with_public_url(public_url.clone())
                .with_boot_windows(Arc::clone(&windows));
        Ok(Owners {
            config,
            as_written,
            public_url,
            reports: bridges::ReportBridge::reports(database.shared().clone(), run),
            database,
            liveness,
            metrics,
            snapshot,
            recent,
            access,
            conductor,
            live,
        })
    }

    /// What the listeners serve; a TLS certificate that cannot be used stops the start, before
    /// any password is shown.
    fn served(&self, api_addr: std::net::SocketAddr, tasks: &TaskTracker) -> Result<Served> {
        let config = &self.config;
        let api_tls =
            bootvol_edge::http::tls::from_config(&config.api).map_err(anyhow::Error::msg)?;
        let fingerprint = api_tls.as_ref().map(|t| t.fingerprint.as_str());
        if let Err(e) = crate::api::htpasswd::ensure_first_password(config, fingerprint) {
            // As with an unreadable file: the API refuses every request until it is usable.
            tracing::error!(file = %config.api.http_basic_auth_user_file.display(), error = %e,
                "no admin password is set and none could be written");
        }
        let tftp_root = served_root(&config.tftp.root, "tftp.root");
        let signed = signed_binaries(config, tftp_root.as_ref())?;
        let boot = BootState {
            snapshot: Arc::clone(&self.snapshot.current),
            files: served_root(&config.http.files_root, "http.files_root"),
            ipxe: tftp_root.clone(),
            signed: signed.clone(),
            deploy: Some(Arc::new(bridges::DeployBridge(self.conductor.clone()))),
            recent: Arc::clone(&self.recent),
            access: Arc::clone(&self.access),
            metrics: Arc::clone(&self.metrics),
            reports: Some(Arc::clone(&self.reports)),
        };
        let tftp = TftpBootFiles::new(
            Arc::clone(&self.snapshot.current),
            tftp_root,
            Arc::clone(&self.access),
            tasks.clone(),
        )
        .with_recent(Arc::clone(&self.recent))
        .with_metrics(Arc::clone(&self.metrics))
        .with_signed(signed);
        let api = crate::api::ApiState::new(
            Arc::new(config.clone()),
            self.conductor.clone(),
            Arc::clone(&self.recent),
            api_addr,
            Arc::clone(&self.metrics),
            Arc::clone(&self.snapshot.current),
        );
        Ok(Served { boot, tftp: Arc::new(tftp), api, api_tls, live: Arc::clone(&self.live) })
    }

    /// The edge's background work: PostgreSQL's change listener, the boot activity sample, the
    /// ProxyDHCP sockets and the `public_url = "auto"` watch.
    fn start_edge_services(&self, run: Runner<'_>) -> Result<()> {
        if let bootvol_db::Target::Postgres(target) = self.database.target() {
            let events = Arc::new(bridges::ListenerEvents {
                snapshot: self.snapshot.clone(),
                metrics: Arc::clone(&self.metrics),
            });
            let listen =
                bootvol_db::listen::listen(Arc::clone(target), events, run.shutdown.clone());
            run.tracker.spawn(listen);
        }
        let sampled = Arc::clone(&self.metrics);
        let sample = move || {
            sampled.sample_activity();
            std::future::ready(())
        };
        services::spawn_periodic(
            run.tracker,
            run.shutdown,
            "boot activity",
            ACTIVITY_SAMPLE,
            sample,
        );
        let inputs = bootvol_edge::dhcp::Inputs {
            snapshot: &self.snapshot.current,
            public_url: &self.public_url,
            recent: &self.recent,
            metrics: &self.metrics,
            access: &self.access,
        };
        bootvol_edge::dhcp::start(&self.config, inputs, run.tracker, run.shutdown, &self.liveness)?;
        let reload = self.snapshot.clone();
        bootvol_runtime::public_url::spawn_watch(
            &self.as_written,
            &self.public_url,
            run.tracker,
            run.shutdown,
            Arc::new(move || reload.reload()),
        );
        Ok(())
    }

    /// The conductor's actions in flight (started by the API or the deploy call-back), the
    /// services' passes in progress and the database's lock tasks end, within `deadline`.
    async fn drain(&self, tasks: &TaskTracker, deadline: tokio::time::Instant) {
        let actions = self.conductor.tasks();
        let locks = self.database.shared().tasks();
        tasks.close();
        actions.close();
        let drained = tokio::time::timeout_at(deadline, async {
            tokio::join!(tasks.wait(), actions.wait());
            locks.close();
            locks.wait().await;
        });
        if drained.await.is_err() {
            tracing::warn!(
                actions = actions.len(),
                services = tasks.len(),
                "drain timeout: actions cut short end at the next start, as after a crash"
            );
        }
    }
}

/// Secrets only to their node (`[boot] script_secrets`); refusals become node events written on
/// `tracker`'s tasks.
fn script_access(
    config: &Config,
    database: &Database,
    metrics: &Arc<Metrics>,
    windows: &Arc<BootWindows>,
    tracker: &TaskTracker,
) -> Arc<ScriptAccess> {
    if config.boot.script_secrets == ScriptSecrets::Any {
        tracing::warn!(
            "[boot] script_secrets = \"any\": scripts with CHAP secrets and the deploy token go to any client that asks, not only to the node itself"
        );
    }
    // Kept whatever the mode: boot reports say whether they come from the node's neighbour.
    let neighbours = bootvol_edge::neighbour::Neighbours::start();
    metrics.count_neighbour_overflow(neighbours.overflow_counter());
    let events = bridges::EventBridge { db: database.shared().clone(), tasks: tracker.clone() };
    ScriptAccess::new(
        config.boot.script_secrets,
        Some(Arc::new(events)),
        neighbours,
        Arc::clone(windows),
        Arc::clone(metrics),
    )
}

/// A served folder, or `None` (with a warning) when it does not exist: the listeners still
/// serve boot scripts.
/// With `[secure_boot]`: the signed EFI binaries of the TFTP root, those the ProxyDHCP hands
/// out signed now, so that a key, certificate or signer that does not work stops the start.
pub(crate) fn signed_binaries(
    config: &Config,
    tftp_root: Option<&FileRoot>,
) -> Result<Option<Arc<bootvol_edge::secure_boot::SignedBinaries>>> {
    if config.secure_boot.signing().is_none() {
        return Ok(None);
    }
    let Some(root) = tftp_root else {
        anyhow::bail!(
            "[secure_boot] is set but tftp.root {} is unusable: there is nothing to sign",
            config.tftp.root.display()
        );
    };
    let signed = bootvol_edge::secure_boot::SignedBinaries::new(&config.secure_boot, root.clone())?;
    let names = signed.sign_present()?;
    tracing::info!(signed = ?names, root = %root.path().display(), "secure boot: iPXE EFI binaries are served signed");
    Ok(Some(Arc::new(signed)))
}

fn served_root(path: &std::path::Path, key: &str) -> Option<FileRoot> {
    match FileRoot::new(path) {
        Ok(root) => Some(root),
        Err(e) => {
            tracing::warn!(key, path = %path.display(), error = %e, "folder unusable: only boot scripts are served from it");
            None
        }
    }
}

fn tftp_config(config: &Config) -> bootvol_tftp::TftpConfig {
    bootvol_tftp::TftpConfig {
        max_block_size: config.tftp.max_block_size,
        max_window_size: config.tftp.max_window_size,
        timeout: Duration::from_secs(config.tftp.timeout),
        max_retries: config.tftp.retries,
        max_transfers: config.tftp.max_transfers.max(1),
        max_transfers_per_client: config.tftp.max_transfers_per_client.max(1),
    }
}
