//! The background work of `bootvol serve` as named services: each runs on its own task with its
//! own interval and stops at the shared shutdown signal, so a slow pass (an unreachable Cinder
//! or BMC) delays nothing but itself. A pass in progress when shutdown comes is let finish:
//! `serve` waits for every service's task (a `TaskTracker`) within its drain deadline.
//!
//! It knows when and how often work runs, not what the work does (the conductor, storage and
//! notifier do it).

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Runs `pass` every `every` (the first after one interval) on a task of `tracker`, until
/// `shutdown`. `name` names the service in logs.
pub fn spawn_periodic<F, Fut>(
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    name: &'static str,
    every: Duration,
    mut pass: F,
) where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let shutdown = shutdown.clone();
    tracker.spawn(async move {
        tracing::debug!(service = name, every_s = every.as_secs_f64(), "service started");
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
            // Not raced against shutdown: a pass that started ends, within the drain deadline.
            pass().await;
        }
        tracing::debug!(service = name, "service stopped");
    });
}

/// Runs `work` once on a task of `tracker` (startup recovery), unless shutdown comes first.
pub fn spawn_once<Fut>(
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    name: &'static str,
    work: Fut,
) where
    Fut: Future<Output = ()> + Send + 'static,
{
    let shutdown = shutdown.clone();
    tracker.spawn(async move {
        if shutdown.is_cancelled() {
            return;
        }
        work.await;
        tracing::debug!(service = name, "service done");
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_slow_service_delays_no_other_and_a_pass_in_progress_ends_before_shutdown() {
        let tracker = TaskTracker::new();
        let shutdown = CancellationToken::new();
        let (fast, slow_done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let counter = Arc::clone(&fast);
        spawn_periodic(&tracker, &shutdown, "fast", Duration::from_secs(1), move || {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        let done = Arc::clone(&slow_done);
        spawn_periodic(&tracker, &shutdown, "slow", Duration::from_secs(1), move || {
            let done = Arc::clone(&done);
            async move {
                tokio::time::sleep(Duration::from_secs(30)).await;
                done.fetch_add(1, Ordering::SeqCst);
            }
        });
        tokio::time::sleep(Duration::from_millis(10_500)).await;
        assert_eq!(fast.load(Ordering::SeqCst), 10, "the slow pass held nothing up");
        assert_eq!(slow_done.load(Ordering::SeqCst), 0);
        shutdown.cancel();
        tracker.close();
        let started = tokio::time::Instant::now();
        tracker.wait().await;
        assert_eq!(slow_done.load(Ordering::SeqCst), 1, "the pass in progress finished");
        assert!(started.elapsed() <= Duration::from_secs(21), "{:?}", started.elapsed());
        assert_eq!(fast.load(Ordering::SeqCst), 10, "no pass after shutdown");
    }
}
