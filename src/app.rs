//! `bootvol serve`: wires the database, the boot snapshot and the listeners together, and runs
//! them until shutdown.
//!
//! The snapshot is built before the listeners answer, then rebuilt by a watcher thread whenever
//! SQLite's `data_version` says another connection committed (for example `bootvol apply`), or
//! on SIGHUP, and swapped atomically: requests in flight keep the snapshot they started with.
//! Listeners take already-bound sockets, so tests run the real thing on port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::boot::{BootSnapshot, Templates};
use crate::config::Config;
use crate::db::Db;
use crate::files::FileRoot;
use crate::http::{BootState, router};

/// How long in-flight requests and transfers may take to finish after SIGTERM.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The sockets `serve` answers on, bound by the caller.
#[derive(Debug)]
pub struct Listeners {
    pub http: TcpListener,
}

impl Listeners {
    /// Binds the addresses the configuration names.
    pub async fn bind(config: &Config) -> Result<Listeners> {
        let http = TcpListener::bind(config.http.listen)
            .await
            .with_context(|| format!("binding the boot HTTP listener on {}", config.http.listen))?;
        Ok(Listeners { http })
    }
}

/// A handle on the running snapshot machinery, for callers that change the data in-process.
#[derive(Debug, Clone)]
pub struct SnapshotHandle {
    pub current: Arc<ArcSwap<BootSnapshot>>,
    reload: mpsc::Sender<()>,
}

impl SnapshotHandle {
    /// Asks the watcher to rebuild now (SIGHUP does the same).
    pub fn reload(&self) {
        let _ = self.reload.send(());
    }
}

/// Runs the appliance until `shutdown` is cancelled, then drains.
pub async fn serve(
    config: Config,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<()> {
    let started = Instant::now();
    let snapshot = start_snapshot(&config, shutdown.clone())?;
    let files = match FileRoot::new(&config.http.files_root) {
        Ok(root) => Some(root),
        Err(e) => {
            tracing::warn!(files_root = %config.http.files_root.display(), error = %e, "files_root unusable: /files/ answers 404");
            None
        }
    };
    let state = BootState { snapshot: Arc::clone(&snapshot.current), files };
    let http_addr = listeners.http.local_addr()?;
    tracing::info!(http = %http_addr, nodes = snapshot.current.load().node_count(),
        startup_ms = started.elapsed().as_millis() as u64, "serving");
    let signals = tokio::spawn(handle_signals(snapshot.clone(), shutdown.clone()));
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    let http =
        axum::serve(listeners.http, app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let result = tokio::select! {
        result = http => result.context("boot HTTP listener"),
        () = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_TIMEOUT).await } => {
            tracing::warn!("drain timeout: exiting with requests still in flight");
            Ok(())
        }
    };
    signals.abort();
    tracing::info!("stopped");
    result
}

/// Builds the first snapshot (synchronously: nothing is served before it exists) and starts
/// the watcher thread that rebuilds it.
pub fn start_snapshot(config: &Config, shutdown: CancellationToken) -> Result<SnapshotHandle> {
    let db = Db::open(&config.database.path)
        .with_context(|| format!("opening {}", config.database.path.display()))?;
    let templates = Templates::new(config.boot.templates_dir.as_deref())?;
    let first = build_snapshot(&db, &templates, config)?;
    let current = Arc::new(ArcSwap::from_pointee(first));
    let (reload, requests) = mpsc::channel();
    let watcher = Watcher {
        db,
        templates,
        config: config.clone(),
        current: Arc::clone(&current),
        requests,
        shutdown,
    };
    std::thread::Builder::new().name("bootvol-snapshot".into()).spawn(move || watcher.run())?;
    Ok(SnapshotHandle { current, reload })
}

fn build_snapshot(db: &Db, templates: &Templates, config: &Config) -> Result<BootSnapshot> {
    let started = Instant::now();
    let records = db.node_records()?;
    let snapshot = BootSnapshot::build(
        &records,
        templates,
        &config.boot_settings(),
        config.default.default_storage_interface,
    )?;
    tracing::info!(
        nodes = snapshot.node_count(),
        macs = snapshot.mac_count(),
        build_ms = started.elapsed().as_millis() as u64,
        "boot snapshot built"
    );
    Ok(snapshot)
}

struct Watcher {
    db: Db,
    templates: Templates,
    config: Config,
    current: Arc<ArcSwap<BootSnapshot>>,
    requests: mpsc::Receiver<()>,
    shutdown: CancellationToken,
}

impl Watcher {
    fn run(mut self) {
        let interval = Duration::from_millis(self.config.database.watch_interval_ms);
        let mut seen = self.db.data_version().ok();
        while !self.shutdown.is_cancelled() {
            let requested = match self.requests.recv_timeout(interval) {
                Ok(()) => true,
                Err(mpsc::RecvTimeoutError::Timeout) => false,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let version = self.db.data_version().ok();
            if !requested && version == seen {
                continue;
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
            match build_snapshot(&self.db, &self.templates, &self.config) {
                Ok(snapshot) => {
                    self.current.store(Arc::new(snapshot));
                    seen = version;
                }
                Err(e) => {
                    tracing::error!(error = %e, "snapshot not rebuilt; still serving the previous one")
                }
            }
        }
    }
}

async fn handle_signals(snapshot: SnapshotHandle, shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
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
