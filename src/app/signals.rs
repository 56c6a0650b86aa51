//! The signals `serve` answers: SIGTERM and SIGINT drain (they cancel the shutdown token),
//! SIGHUP rebuilds the boot snapshot with its templates. Installed before any listener answers,
//! so a SIGTERM that arrives once a request was answered always drains, never kills the process
//! outright; the handler is a tracked task that ends at shutdown.

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bootvol_edge::snapshot::SnapshotHandle;

/// Installs the handlers now and answers them on a task of `tracker` until `shutdown`.
pub(crate) fn handle(tracker: &TaskTracker, snapshot: SnapshotHandle, shutdown: CancellationToken) {
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    );
    let (Ok(term), Ok(int), Ok(hup)) = signals else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tracker.spawn(answer(term, int, hup, snapshot, shutdown));
}

async fn answer(
    mut term: Signal,
    mut int: Signal,
    mut hup: Signal,
    snapshot: SnapshotHandle,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = term.recv() => { tracing::info!("SIGTERM: draining"); shutdown.cancel(); return; }
            _ = int.recv() => { tracing::info!("SIGINT: draining"); shutdown.cancel(); return; }
            _ = hup.recv() => { tracing::info!("SIGHUP: reloading data and templates"); snapshot.reload(); }
        }
    }
}
