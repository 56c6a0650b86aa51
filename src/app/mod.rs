//! `bootvol serve`: wires the database, the boot snapshot and the listeners together, and runs
//! them until shutdown.
//!
//! The snapshot is built before the listeners answer, then rebuilt by a watcher task whenever
//! SQLite's `data_version` says another connection committed (for example `bootvol apply`), or
//! on SIGHUP, and swapped atomically: requests in flight keep the snapshot they started with.
//! Listeners take already-bound sockets, so tests run the real thing on port 0.
//!
//! Background work runs as named services (`services`): startup recovery, webhook delivery,
//! deploy expiry, power sync and Cinder sync, each on its own task and interval, and the
//! snapshot watcher. On SIGTERM the listeners drain, then the conductor's actions in flight and
//! the services are waited for (`TaskTracker`), all within [`DRAIN_TIMEOUT`]; an action the
//! deadline cuts short is ended at the next start, as after a crash.
//!
//! Under systemd (`Type=notify`): `READY=1` once the listeners are bound and the first snapshot
//! is built (what `/readyz` calls ready), `STOPPING=1` when draining starts, and with
//! `WatchdogSec=` a `WATCHDOG=1` only while the TFTP loop, both HTTP accept loops, each
//! ProxyDHCP socket's loop and the snapshot watcher answer their liveness ticks (`liveness`).

mod bridges;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bootvol_control::conductor::Conductor;
use bootvol_control::conductor::notify::Notifier;
use bootvol_core::boot::{BootSnapshot, SnapshotBuilder, Templates};
use bootvol_core::config::{Config, ScriptSecrets};
use bootvol_core::files::FileRoot;
use bootvol_db::Db;
use bootvol_edge::http::{BootState, router};
use bootvol_edge::script_access::ScriptAccess;
use bootvol_edge::tftp_files::TftpBootFiles;
use bootvol_runtime::liveness::{Heart, Liveness, ServiceManager};
use bootvol_runtime::metrics::Metrics;
use bootvol_runtime::services;

/// How long in-flight requests, transfers, actions and service passes may take to finish after
/// SIGTERM, in all.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the admin page's per-minute boot activity is sampled from the counters: a minute's
/// count takes in at most this much of the next.
const ACTIVITY_SAMPLE: Duration = Duration::from_secs(5);

/// The sockets `serve` answers on, bound by the caller.
#[derive(Debug)]
pub struct Listeners {
    pub http: TcpListener,
    pub tftp: UdpSocket,
    /// The Ironic-compatible REST API (`[api] listen`).
    pub api: TcpListener,
    /// `/metrics`, `/healthz` and `/readyz` alone (`[metrics] listen`), when configured.
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses the configuration names.
    pub async fn bind(config: &Config) -> Result<Listeners> {
        let http = TcpListener::bind(config.http.listen)
            .await
            .with_context(|| format!("binding the boot HTTP listener on {}", config.http.listen))?;
        let tftp = UdpSocket::bind(config.tftp.listen)
            .await
            .with_context(|| format!("binding the TFTP listener on {}", config.tftp.listen))?;
        let api = TcpListener::bind(config.api.listen)
            .await
            .with_context(|| format!("binding the REST API listener on {}", config.api.listen))?;
        let metrics = match config.metrics.listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding the metrics listener on {addr}"))?,
            ),
            None => None,
        };
        Ok(Listeners { http, tftp, api, metrics })
    }
}

/// A handle on the running snapshot machinery, for callers that change the data in-process.
#[derive(Debug, Clone)]
pub struct SnapshotHandle {
    pub current: Arc<ArcSwap<BootSnapshot>>,
    reload: mpsc::Sender<Wake>,
}

/// Why the snapshot watcher wakes before its next check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// Rebuild now, templates included (SIGHUP, a change made by this process).
    Reload,
    /// PostgreSQL announced a change (or the listener reconnected): check the change log now.
    Changed,
}

impl SnapshotHandle {
    /// Asks the watcher to rebuild now (SIGHUP does the same).
    pub fn reload(&self) {
        let _ = self.reload.send(Wake::Reload);
    }

    /// Asks the watcher to look for changes now.
    fn changed(&self) {
        let _ = self.reload.send(Wake::Changed);
    }
}

/// PostgreSQL's change listener, reported to the watcher and the metrics.
struct ListenerEvents {
    snapshot: SnapshotHandle,
    metrics: Arc<Metrics>,
}

impl bootvol_db::listen::ListenEvents for ListenerEvents {
    fn changed(&self, _seq: Option<i64>) {
        self.snapshot.changed();
    }

    fn connected(&self, up: bool) {
        self.metrics.set_database_connected(up);
    }
}

/// Runs the appliance until `shutdown` is cancelled, then drains.
pub async fn serve(
    mut config: Config,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<()> {
    let started = Instant::now();
    // With `auto`, what is served starts from the address now; `as_written` keeps `auto` for
    // the watch that follows it.
    let as_written = config.clone();
    let public_url = bootvol_runtime::public_url::initial(&config);
    config.http.public_url = public_url.get().to_string();
    let services = TaskTracker::new();
    let liveness = Arc::new(Liveness::new());
    let notifier = ServiceManager::default();
    // Its own connection: a scrape never waits behind the conductor's.
    let metrics = Metrics::new(Some(Arc::new(bridges::SyncBridge(bootvol_db::SharedDb::new(
        Db::open_config(&config.database)?,
    )))));
    let snapshot = start_snapshot(
        &config,
        shutdown.clone(),
        &services,
        &metrics,
        liveness.register("snapshot watcher"),
        &public_url,
    )?;
    let files = served_root(&config.http.files_root, "http.files_root");
    let tftp_root = served_root(&config.tftp.root, "tftp.root");
    let windows = Arc::new(bootvol_core::boot_window::BootWindows::new(
        config.boot.secret_window,
        Duration::from_secs(config.boot.secret_window_seconds),
    ));
    let conductor = {
        let db = bootvol_db::SharedDb::new(Db::open_config(&config.database)?);
        let reload = snapshot.clone();
        Conductor::new(Arc::new(config.clone()), db)?
            .with_on_change(Arc::new(move || reload.reload()))
            .with_metrics(Arc::clone(&metrics))
            .with_public_url(public_url.clone())
            .with_boot_windows(Arc::clone(&windows))
    };
    let recent = Arc::new(bootvol_core::recent::RecentBoots::default());
    // The neighbour table's copy is only kept when something asks it.
    let neighbours = match config.boot.script_secrets {
        ScriptSecrets::Neighbour => bootvol_edge::neighbour::Neighbours::start(),
        ScriptSecrets::Any => Arc::new(bootvol_edge::neighbour::Neighbours::empty()),
    };
    metrics.count_neighbour_overflow(neighbours.overflow_counter());
    let access = ScriptAccess::new(
        config.boot.script_secrets,
        Some(Arc::new(bridges::EventBridge {
            db: conductor.db().clone(),
            tasks: services.clone(),
        })),
        neighbours,
        windows,
        Arc::clone(&metrics),
    );
    if config.boot.script_secrets == ScriptSecrets::Any {
        tracing::warn!(
            "[boot] script_secrets = \"any\": scripts with CHAP secrets and the deploy token go to any client that asks, not only to the node itself"
        );
    }
    let state = BootState {
        snapshot: Arc::clone(&snapshot.current),
        files,
        ipxe: tftp_root.clone(),
        deploy: Some(Arc::new(bridges::DeployBridge(conductor.clone()))),
        recent: Arc::clone(&recent),
        access: Arc::clone(&access),
        metrics: Arc::clone(&metrics),
    };
    let http_addr = listeners.http.local_addr()?;
    let tftp_addr = listeners.tftp.local_addr()?;
    let api_addr = listeners.api.local_addr()?;
    // Before any password is shown: a certificate that cannot be used stops the start.
    let api_tls = bootvol_edge::http::tls::from_config(&config.api).map_err(anyhow::Error::msg)?;
    if let Err(e) = crate::api::htpasswd::ensure_first_password(
        &config,
        api_tls.as_ref().map(|t| t.fingerprint.as_str()),
    ) {
        // As with an unreadable file: the API refuses every request until the file is usable.
        tracing::error!(file = %config.api.http_basic_auth_user_file.display(), error = %e,
            "no admin password is set and none could be written");
    }
    let api_state = crate::api::ApiState::new(
        Arc::new(config.clone()),
        conductor.clone(),
        Arc::clone(&recent),
        api_addr,
        Arc::clone(&metrics),
        Arc::clone(&snapshot.current),
    );
    tracing::info!(http = %http_addr, tftp = %tftp_addr, api = %api_addr, auth = ?config.api.auth_strategy, nodes = snapshot.current.load().node_count(),
        startup_ms = started.elapsed().as_millis() as u64, "serving");
    // Installed before any listener answers: a SIGTERM that arrives once a request was answered
    // always drains, never kills the process outright.
    let signals =
        tokio::spawn(handle_signals(install_signals(), snapshot.clone(), shutdown.clone()));
    start_services(&config, &conductor, &services, &shutdown);
    if conductor.db().run(|db| db.is_postgres()).await {
        start_cluster_services(&public_url, &conductor, &services, &shutdown);
    }
    if let bootvol_db::Target::Postgres(target) =
        bootvol_db::Target::from_config(&config.database).map_err(anyhow::Error::msg)?
    {
        let events =
            Arc::new(ListenerEvents { snapshot: snapshot.clone(), metrics: Arc::clone(&metrics) });
        services.spawn(bootvol_db::listen::listen(target, events, shutdown.clone()));
    }
    let sampled = Arc::clone(&metrics);
    services::spawn_periodic(&services, &shutdown, "boot activity", ACTIVITY_SAMPLE, move || {
        sampled.sample_activity();
        std::future::ready(())
    });
    let inputs = bootvol_edge::dhcp::Inputs {
        snapshot: &snapshot.current,
        public_url: &public_url,
        recent: &recent,
        metrics: &metrics,
        access: &access,
    };
    bootvol_edge::dhcp::start(&config, inputs, &services, &shutdown, &liveness)?;
    let reload = snapshot.clone();
    bootvol_runtime::public_url::spawn_watch(
        &as_written,
        &public_url,
        &services,
        &shutdown,
        Arc::new(move || reload.reload()),
    );
    let tftp_handler = Arc::new(
        TftpBootFiles::new(Arc::clone(&snapshot.current), tftp_root, Arc::clone(&access))
            .with_recent(recent)
            .with_metrics(Arc::clone(&metrics)),
    );
    let tftp = tokio::spawn(bootvol_tftp::serve_with_heartbeat(
        listeners.tftp,
        tftp_handler,
        tftp_config(&config),
        shutdown.clone(),
        DRAIN_TIMEOUT,
        liveness.register("tftp"),
    ));
    let metrics_listener = listeners.metrics.map(|listener| {
        tracing::info!(metrics = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /metrics, /healthz and /readyz");
        tokio::spawn(bootvol_edge::http::listener::serve(
            "metrics",
            listener,
            crate::api::public_router(api_state.clone()),
            config.metrics.connection_limits(),
            shutdown.clone(),
            liveness.register("metrics http"),
        ))
    });
    if let Some(tls) = &api_tls {
        tracing::info!(api = %api_addr, cert = %tls.cert.display(), sha256 = %tls.fingerprint, "the API and admin page answer TLS only");
    }
    let loopback_api = match config.api.loopback_listen {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the loopback REST API listener on {addr}"))?;
            tracing::info!(api = %addr, "serving the REST API (plain HTTP, no admin page) on loopback");
            Some(tokio::spawn(bootvol_edge::http::listener::serve(
                "api loopback",
                listener,
                crate::api::router(api_state.clone()),
                config.api.connection_limits(),
                shutdown.clone(),
                liveness.register("api loopback http"),
            )))
        }
        None => None,
    };
    let api = tokio::spawn(bootvol_edge::http::listener::serve_tls(
        "api",
        listeners.api,
        crate::api::router(api_state.clone()).merge(crate::admin::router(api_state)),
        config.api.connection_limits(),
        api_tls.map(|tls| tls.acceptor),
        shutdown.clone(),
        liveness.register("api http"),
    ));
    let http = bootvol_edge::http::listener::serve(
        "boot",
        listeners.http,
        router(state),
        config.http.connection_limits(),
        shutdown.clone(),
        liveness.register("boot http"),
    );
    // Both boot listeners hold bound sockets and start answering now; the first snapshot is
    // built: ready, for `/readyz` and for systemd alike.
    metrics.set_boot_listeners_up(true);
    notifier.ready(&format!(
        "serving {} nodes; boot HTTP {http_addr}, TFTP {tftp_addr}, API {api_addr}",
        snapshot.current.load().node_count()
    ));
    if let Some(interval) = bootvol_runtime::liveness::watchdog_interval() {
        tokio::spawn(bootvol_runtime::liveness::watchdog(
            Arc::clone(&liveness),
            notifier.clone(),
            interval,
            shutdown.clone(),
        ));
    }
    let http_result = tokio::select! {
        result = http => result.context("boot HTTP listener"),
        () = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_TIMEOUT).await } => {
            tracing::warn!("drain timeout: exiting with requests still in flight");
            Ok(())
        }
    };
    // Whichever listener ends first (an error, or shutdown) ends the other.
    metrics.set_boot_listeners_up(false);
    notifier.stopping();
    shutdown.cancel();
    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    let tftp_result = match tftp.await {
        Ok(result) => result.context("TFTP listener"),
        Err(e) => Err(anyhow::anyhow!("TFTP listener task: {e}")),
    };
    let api_result = match tokio::time::timeout_at(deadline, api).await {
        Ok(Ok(result)) => result.context("REST API listener"),
        Ok(Err(e)) => Err(anyhow::anyhow!("REST API listener task: {e}")),
        Err(_) => {
            tracing::warn!("drain timeout: REST API requests still in flight");
            Ok(())
        }
    };
    if let Some(listener) = loopback_api {
        match tokio::time::timeout_at(deadline, listener).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "loopback REST API listener"),
            Ok(Err(e)) => tracing::warn!(error = %e, "loopback REST API listener task"),
            Ok(Ok(Ok(()))) | Err(_) => {}
        }
    }
    if let Some(listener) = metrics_listener {
        match tokio::time::timeout_at(deadline, listener).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "metrics listener"),
            Ok(Err(e)) => tracing::warn!(error = %e, "metrics listener task"),
            Ok(Ok(Ok(()))) | Err(_) => {}
        }
    }
    signals.abort();
    // The conductor's actions in flight (started by the API or the deploy call-back) and the
    // services' passes in progress end, within what is left of the deadline.
    services.close();
    conductor.tasks().close();
    let drained = tokio::time::timeout_at(deadline, async {
        tokio::join!(services.wait(), conductor.tasks().wait());
    });
    if drained.await.is_err() {
        tracing::warn!(
            actions = conductor.tasks().len(),
            services = services.len(),
            "drain timeout: actions cut short end at the next start, as after a crash"
        );
    }
    // Leaving cleanly: the peers drop this instance from their scripts at their next check and
    // take its once-only work at once, rather than after the heartbeat and the leases expire.
    let leaving = conductor.db().run(|db| {
        if !db.is_postgres() {
            return Ok(());
        }
        db.leave(bootvol_db::serve_id())?;
        for lease in LEASES {
            db.release_lease(lease, bootvol_db::serve_id())?;
        }
        Ok::<(), bootvol_db::DbError>(())
    });
    if let Err(e) = tokio::time::timeout(Duration::from_secs(2), leaving).await.unwrap_or(Ok(())) {
        tracing::warn!(error = %e, "could not leave the instances registry");
    }
    tracing::info!("stopped");
    http_result.and(tftp_result).and(api_result)
}

/// The conductor's background work, beside the listeners, as named services: at start, finish
/// or undo what a crashed process left (volume attaches, deploys); then, each on its own
/// interval, deliver events to the webhook, fail deployments whose ramdisk never called back,
/// record out-of-band power changes (`[conductor] power_sync_interval`) and sync volumes with
/// Cinder (`[cinder] sync_interval`). Each skips nodes an action holds.
fn start_services(
    config: &Config,
    conductor: &Conductor,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) {
    let cinder = conductor.storage().cinder().cloned();
    let webhook = (!config.notifications.webhook_url.is_empty()).then(|| {
        bootvol_control::conductor::notify::Webhook {
            url: config.notifications.webhook_url.clone(),
            secret: config.notifications.webhook_secret.clone(),
            max_attempts: i64::from(config.notifications.max_attempts),
            timeout: Duration::from_secs(10),
        }
    });
    let (c, volumes, skip_delivery) = (conductor.clone(), cinder.clone(), webhook.is_none());
    services::spawn_once(tracker, shutdown, "recovery", async move {
        if let Some(cinder) = &volumes {
            match cinder.recover().await {
                Ok(report) if report.failed.is_empty() => tracing::info!(
                    undone = report.undone.len(),
                    detached = report.detached.len(),
                    "volume recovery done"
                ),
                Ok(report) => {
                    tracing::error!(failed = ?report.failed, "volume recovery incomplete; retried next pass")
                }
                Err(e) => tracing::error!(error = %e, "volume recovery failed; retried next pass"),
            }
        }
        match c.recover_interrupted().await {
            Ok(done) if !done.is_empty() => {
                tracing::warn!(nodes = ?done, "interrupted actions ended")
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "recovering interrupted actions"),
        }
        if skip_delivery {
            let _ = c.db().run(|db| db.skip_event_delivery()).await;
        }
    });
    if let Some(hook) = webhook {
        let notifier = Notifier::new(conductor.db().clone(), hook);
        let db = conductor.db().clone();
        let every = Duration::from_secs(1);
        services::spawn_periodic(tracker, shutdown, "webhook", every, move || {
            let (notifier, db) = (notifier.clone(), db.clone());
            async move {
                if holds_lease(&db, "webhook", every).await {
                    notifier.deliver_due().await;
                }
            }
        });
    }
    let c = conductor.clone();
    let every = Duration::from_secs(5);
    services::spawn_periodic(tracker, shutdown, "deploy expiry", every, move || {
        let c = c.clone();
        async move {
            if !holds_lease(c.db(), "deploy expiry", every).await {
                return;
            }
            if let Err(e) = c.expire_deployments().await {
                tracing::warn!(error = %e, "expiring deployments");
            }
        }
    });
    let power_every = config.conductor.power_sync_interval;
    if power_every > 0 {
        let c = conductor.clone();
        let every = Duration::from_secs(power_every);
        services::spawn_periodic(tracker, shutdown, "power sync", every, move || {
            let c = c.clone();
            async move {
                if !holds_lease(c.db(), "power sync", every).await {
                    return;
                }
                if let Err(e) = c.sync_power_states().await {
                    tracing::warn!(error = %e, "power state sync");
                }
            }
        });
    }
    let volume_every = config.cinder.sync_interval;
    if let Some(cinder) = cinder.filter(|_| volume_every > 0) {
        let every = Duration::from_secs(volume_every);
        let db = conductor.db().clone();
        services::spawn_periodic(tracker, shutdown, "cinder sync", every, move || {
            let (cinder, db) = (cinder.clone(), db.clone());
            async move {
                if !holds_lease(&db, "cinder sync", every).await {
                    return;
                }
                if let Err(e) = cinder.recover().await {
                    tracing::warn!(error = %e, "volume recovery pass failed");
                }
                match cinder.sync(bootvol_db::SyncRunner::Serve).await {
                    Ok(report) => tracing::info!(
                        checked = report.checked,
                        updated = report.updated.len(),
                        drifted = report.drifted.len(),
                        errors = report.errors.len(),
                        "volume sync pass"
                    ),
                    Err(e) => tracing::warn!(error = %e, "volume sync pass failed"),
                }
            }
        });
    }
}

/// A served folder, or `None` (with a warning) when it does not exist: the listeners still
/// serve boot scripts.
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

/// Builds the first snapshot (synchronously: nothing is served before it exists) and starts
/// the watcher that rebuilds it, a blocking task of `tracker` (it only ever waits on SQLite and
/// its channel) that ends at `shutdown`, answering `heart` each time it wakes.
pub fn start_snapshot(
    config: &Config,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
    metrics: &Arc<Metrics>,
    heart: Heart,
    public_url: &bootvol_runtime::public_url::PublicUrl,
) -> Result<SnapshotHandle> {
    let db = Db::open_config(&config.database)
        .with_context(|| format!("opening {}", config.database.shown()))?;
    let templates = Templates::new(config.boot.templates_dir.as_deref())?;
    let first_peers = peers(&db);
    let first = build_snapshot(&db, &templates, config, metrics, &public_url.get(), &first_peers)?;
    let current = Arc::new(ArcSwap::from_pointee(first));
    let (reload, requests) = mpsc::channel();
    let watcher = Watcher {
        db,
        templates,
        config: config.clone(),
        current: Arc::clone(&current),
        requests,
        shutdown,
        metrics: Arc::clone(metrics),
        heart,
        public_url: public_url.clone(),
        peers: first_peers,
    };
    tracker.spawn_blocking(move || watcher.run());
    Ok(SnapshotHandle { current, reload })
}

/// Nodes read and rendered at a time when the snapshot is built.
const SNAPSHOT_PAGE: usize = 256;

/// How recent an instance's heartbeat must be for scripts to fall back to it (seconds).
const PEER_FRESH_SECS: i64 = 20;

/// The boot URLs of the other live instances on the database (PostgreSQL; none on SQLite),
/// sorted.
fn peers(db: &Db) -> Vec<String> {
    if !db.is_postgres() {
        return Vec::new();
    }
    let since =
        i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX) - PEER_FRESH_SECS;
    let mut urls: Vec<String> = match db.live_instances(since) {
        Ok(live) => live
            .into_iter()
            .filter(|i| i.id != bootvol_db::serve_id())
            .map(|i| i.boot_url)
            .collect(),
        Err(_) => return Vec::new(),
    };
    urls.sort();
    urls.dedup();
    urls
}

fn build_snapshot(
    db: &Db,
    templates: &Templates,
    config: &Config,
    metrics: &Metrics,
    public_url: &str,
    peers: &[String],
) -> Result<BootSnapshot> {
    let started = Instant::now();
    let settings = bootvol_core::boot::BootSettings {
        public_url: public_url.to_owned(),
        peers: peers.to_vec(),
        ..config.boot_settings()
    };
    let mut builder =
        SnapshotBuilder::new(templates, &settings, config.default.default_storage_interface, 0);
    // A page at a time: the decoded records of every node at once would cost more memory than
    // the snapshot itself, and the allocator keeps what a process once used.
    db.for_each_node_record_page(SNAPSHOT_PAGE, |records| {
        records.iter().for_each(|record| builder.add(record));
        Ok::<(), anyhow::Error>(())
    })?;
    let snapshot = builder.finish()?;
    if let Err(error) = db.release_memory() {
        tracing::debug!(%error, "could not release the watcher's database memory");
    }
    tracing::info!(
        nodes = snapshot.node_count(),
        macs = snapshot.mac_count(),
        build_ms = started.elapsed().as_millis() as u64,
        "boot snapshot built"
    );
    metrics.snapshot_built(snapshot.nodes_by_state(), started.elapsed());
    Ok(snapshot)
}

struct Watcher {
    db: Db,
    templates: Templates,
    config: Config,
    current: Arc<ArcSwap<BootSnapshot>>,
    requests: mpsc::Receiver<Wake>,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    heart: Heart,
    public_url: bootvol_runtime::public_url::PublicUrl,
    /// The peers the current snapshot's generic script falls back to.
    peers: Vec<String>,
}

/// The longest the watcher sleeps before it answers its liveness tick, whatever
/// `[database] watch_interval_ms` says.
const WATCHER_WAKE: Duration = Duration::from_secs(1);

impl Watcher {
    fn run(mut self) {
        let interval = Duration::from_millis(self.config.database.watch_interval_ms);
        let mut seen = self.db.data_version().ok();
        let mut next_check = Instant::now() + interval;
        while !self.shutdown.is_cancelled() {
            self.heart.answer();
            let wait = next_check.saturating_duration_since(Instant::now()).min(WATCHER_WAKE);
            let requested = match self.requests.recv_timeout(wait) {
                Ok(Wake::Reload) => true,
                Ok(Wake::Changed) => false,
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < next_check => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => false,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            next_check = Instant::now() + interval;
            let version = self.db.data_version().ok();
            let peers = peers(&self.db);
            let peers_changed = version.is_some() && peers != self.peers;
            if !requested && version == seen && !peers_changed {
                continue;
            }
            if !requested && self.db.is_postgres() {
                if version.is_none() {
                    // PostgreSQL unreachable: keep serving this snapshot; its connection is
                    // retried at the next check, and the change log is read from `seen` then.
                    continue;
                }
                self.log_changes(seen, version);
            }
            if requested {
                // SIGHUP: data and templates are re-read; the configuration is not.
                match Templates::new(self.config.boot.templates_dir.as_deref()) {
                    Ok(templates) => self.templates = templates,
                    Err(e) => {
                        tracing::error!(error = %e, "templates not reloaded; keeping the previous ones")
                    }
                }
            }
            let url = self.public_url.get();
            match build_snapshot(
                &self.db,
                &self.templates,
                &self.config,
                &self.metrics,
                &url,
                &peers,
            ) {
                Ok(snapshot) => {
                    self.current.store(Arc::new(snapshot));
                    self.peers = peers;
                    if version.is_some() {
                        seen = version;
                    }
                }
                Err(e) => {
                    self.metrics.snapshot_failed();
                    tracing::error!(error = %e, "snapshot not rebuilt; still serving the previous one")
                }
            }
        }
    }
}

impl Watcher {
    /// What the change log says happened between `seen` and `now` (PostgreSQL), for the log.
    /// The snapshot is rebuilt whole either way; a reader behind the pruned log notices here.
    fn log_changes(&self, seen: Option<i64>, now: Option<i64>) {
        let (Some(seen), Some(now)) = (seen, now) else { return };
        match self.db.changes_since(seen, 1000) {
            Ok(Some(changes)) => tracing::info!(
                from = seen,
                to = now,
                changes = changes.len(),
                first = ?changes.first().map(|c| format!("{} {} {}", c.op, c.entity, c.key)),
                "catching up by change seq"
            ),
            Ok(None) => tracing::warn!(
                from = seen,
                to = now,
                "behind the pruned change log: reloading everything"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot read the change log"),
        }
    }
}

/// Whether this instance holds lease `name` (taking or renewing it): work that must run once at
/// a time across instances on one database runs only where this is true. The lease outlives
/// three passes (at least 15 s), so a dead holder's work moves to another instance after that.
async fn holds_lease(db: &bootvol_db::SharedDb, name: &'static str, every: Duration) -> bool {
    let ttl = i64::try_from((every * 3).as_secs()).unwrap_or(i64::MAX).max(15);
    let now = i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX);
    match db.run(move |db| db.try_lease(name, bootvol_db::serve_id(), now, ttl)).await {
        Ok(held) => held,
        Err(e) => {
            tracing::debug!(lease = name, error = %e, "lease not taken");
            false
        }
    }
}

/// PostgreSQL only: this instance's heartbeat in the registry (its boot URL is what the other
/// instances' scripts fall back to), and recovery of actions that an instance which died left
/// behind (under a lease, as after a crash at start).
fn start_cluster_services(
    public_url: &bootvol_runtime::public_url::PublicUrl,
    conductor: &Conductor,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) {
    let beat = |db: bootvol_db::SharedDb, url: bootvol_runtime::public_url::PublicUrl| async move {
        let now = i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX);
        let url = url.get().to_string();
        if let Err(e) = db.run(move |db| db.heartbeat(bootvol_db::serve_id(), &url, now)).await {
            tracing::debug!(error = %e, "heartbeat not recorded");
        }
    };
    let (db, url) = (conductor.db().clone(), public_url.clone());
    services::spawn_once(tracker, shutdown, "first heartbeat", beat(db.clone(), url.clone()));
    services::spawn_periodic(tracker, shutdown, "heartbeat", HEARTBEAT, move || {
        beat(db.clone(), url.clone())
    });
    let c = conductor.clone();
    let every = Duration::from_secs(30);
    services::spawn_periodic(tracker, shutdown, "peer recovery", every, move || {
        let c = c.clone();
        async move {
            if !holds_lease(c.db(), "recovery", every).await {
                return;
            }
            match c.recover_interrupted().await {
                Ok(done) if !done.is_empty() => {
                    tracing::warn!(nodes = ?done, "actions of an instance that is gone ended")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "recovering other instances' actions"),
            }
        }
    });
}

/// Every lease name `serve` takes (released when it stops).
const LEASES: [&str; 5] = ["webhook", "deploy expiry", "power sync", "cinder sync", "recovery"];

/// How often an instance records its heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(5);

type Signals = (
    std::io::Result<tokio::signal::unix::Signal>,
    std::io::Result<tokio::signal::unix::Signal>,
    std::io::Result<tokio::signal::unix::Signal>,
);

fn install_signals() -> Signals {
    use tokio::signal::unix::{SignalKind, signal};
    (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
}

async fn handle_signals(signals: Signals, snapshot: SnapshotHandle, shutdown: CancellationToken) {
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = signals else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: draining"); shutdown.cancel(); return; }
            _ = int.recv() => { tracing::info!("SIGINT: draining"); shutdown.cancel(); return; }
            _ = hup.recv() => { tracing::info!("SIGHUP: reloading data and templates"); snapshot.reload(); }
        }
    }
}
