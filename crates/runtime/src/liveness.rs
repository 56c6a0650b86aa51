//! Whether `bootvol serve`'s loops are alive, and what systemd is told about it (`sd_notify`).
//!
//! - The core: [`Liveness`] asks every registered loop a question (a *tick*, a counter in a
//!   `tokio::sync::watch` channel) and, one round later, tells which loops did not answer.
//!   Each loop holds a [`Heart`] and answers between two pieces of its own work: an async loop
//!   polls [`Heart::beat`] in its `select!` beside its socket, the snapshot watcher (a blocking
//!   thread) calls [`Heart::answer`] each time it wakes. An idle loop answers at once; a loop
//!   that is stuck (a handler that never returns, a task that ended) does not, and the round
//!   names it. No timer of its own and no I/O: the caller decides when a round ends.
//! - The edge: [`ServiceManager`], over the `sd-notify` crate (the one place that reads
//!   `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`, the service manager's protocol rather
//!   than configuration): `READY=1`, `STATUS=`, `STOPPING=1`, and [`watchdog`], the task that
//!   ends a round every half `WATCHDOG_USEC` and sends `WATCHDOG=1` only when every loop
//!   answered. Without `NOTIFY_SOCKET` every message is dropped; without `WATCHDOG_USEC` no
//!   round runs.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The loops of one process and the tick they answer.
#[derive(Debug)]
pub struct Liveness {
    tick: watch::Sender<u64>,
    hearts: Mutex<Vec<Arc<HeartState>>>,
}

#[derive(Debug)]
struct HeartState {
    name: String,
    /// The last tick this loop answered.
    answered: AtomicU64,
}

/// One loop's side: answers the ticks while the loop runs.
#[derive(Debug)]
pub struct Heart {
    state: Arc<HeartState>,
    tick: watch::Receiver<u64>,
}

/// How a round ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Every loop answered the tick of the previous round.
    Alive,
    /// These loops did not.
    Late(Vec<String>),
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::new()
    }
}

impl Liveness {
    pub fn new() -> Liveness {
        // Tick 1 is asked from the start: the first round already needs every loop's answer.
        Liveness { tick: watch::Sender::new(1), hearts: Mutex::new(Vec::new()) }
    }

    /// A heart for the loop `name` (a name says which loop, for the log and `STATUS=`). It
    /// counts from now on: a loop that never polls it is late at the next round.
    pub fn register(&self, name: impl Into<String>) -> Heart {
        let state = Arc::new(HeartState { name: name.into(), answered: AtomicU64::new(0) });
        self.hearts.lock().unwrap_or_else(|p| p.into_inner()).push(Arc::clone(&state));
        let mut tick = self.tick.subscribe();
        // The tick in force when the loop starts is one to answer too.
        tick.mark_changed();
        Heart { state, tick }
    }

    /// Ends a round: which loops did not answer the current tick; then asks the next one.
    pub fn round(&self) -> Round {
        let current = *self.tick.borrow();
        let late: Vec<String> = self
            .hearts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|h| h.answered.load(Relaxed) < current)
            .map(|h| h.name.clone())
            .collect();
        self.tick.send_replace(current + 1);
        if late.is_empty() { Round::Alive } else { Round::Late(late) }
    }
}

impl Heart {
    /// Completes when a tick was asked, having answered it. Polled by a loop's `select!` beside
    /// its work; cancelling it (another branch won) loses nothing.
    pub async fn beat(&mut self) {
        if self.tick.changed().await.is_err() {
            // The `Liveness` is gone: nobody asks any more.
            std::future::pending::<()>().await;
        }
        self.answer();
    }

    /// Answers the tick in force now (for a loop that is not async: call it each time it wakes).
    pub fn answer(&mut self) {
        let tick = *self.tick.borrow_and_update();
        self.state.answered.store(tick, Relaxed);
    }
}

impl bootvol_tftp::Heartbeat for Heart {
    fn beat(&mut self) -> impl Future<Output = ()> + Send {
        Heart::beat(self)
    }
}

/// The messages to the service manager (`sd_notify(3)`); each is dropped without
/// `NOTIFY_SOCKET` and a failure to send is logged once, never fatal.
#[derive(Debug, Default, Clone)]
pub struct ServiceManager {
    failed: Arc<std::sync::atomic::AtomicBool>,
}

impl ServiceManager {
    fn send(&self, states: &[sd_notify::NotifyState<'_>]) {
        if let Err(e) = sd_notify::notify(states)
            && !self.failed.swap(true, Relaxed)
        {
            tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
        }
    }

    /// `READY=1` with a status line: the listeners are bound and the first snapshot is built.
    pub fn ready(&self, status: &str) {
        self.send(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(status)]);
    }

    /// `STATUS=` alone.
    pub fn status(&self, status: &str) {
        self.send(&[sd_notify::NotifyState::Status(status)]);
    }

    /// `STOPPING=1`: draining has begun.
    pub fn stopping(&self) {
        self.send(&[sd_notify::NotifyState::Stopping, sd_notify::NotifyState::Status("draining")]);
    }

    fn watchdog(&self) {
        self.send(&[sd_notify::NotifyState::Watchdog]);
    }
}

/// The watchdog interval the service manager asked for (`WATCHDOG_USEC`, for this process).
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}

/// Until `shutdown`: every `interval / 2`, ends a round of `liveness` and sends `WATCHDOG=1` if
/// every loop answered; otherwise sends nothing (the service manager restarts the service when
/// `interval` passes without one), logs the late loops and says so in `STATUS=`.
pub async fn watchdog(
    liveness: Arc<Liveness>,
    notifier: ServiceManager,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let period = interval / 2;
    tracing::info!(watchdog_ms = interval.as_millis() as u64, "systemd watchdog on");
    let mut late_before = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        match liveness.round() {
            Round::Alive => {
                notifier.watchdog();
                if late_before {
                    tracing::info!("every loop answers again");
                    notifier.status("serving");
                    late_before = false;
                }
            }
            Round::Late(loops) => {
                let names = loops.join(", ");
                tracing::error!(loops = %names, "loops not answering: watchdog ping withheld");
                notifier.status(&format!("not answering: {names}"));
                late_before = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_answering_fails_the_round_and_one_that_answers_again_passes() {
        let liveness = Liveness::new();
        let mut tftp = liveness.register("tftp");
        let mut http = liveness.register("boot http");
        // The first round already asks.
        assert_eq!(liveness.round(), Round::Late(vec!["tftp".to_owned(), "boot http".to_owned()]));
        tftp.answer();
        http.answer();
        assert_eq!(liveness.round(), Round::Alive);
        // Only one loop answers tick 2.
        tftp.answer();
        assert_eq!(liveness.round(), Round::Late(vec!["boot http".to_owned()]));
        // An answer to an old tick does not count for a new one.
        tftp.answer();
        assert_eq!(liveness.round(), Round::Late(vec!["boot http".to_owned()]));
        tftp.answer();
        http.answer();
        assert_eq!(liveness.round(), Round::Alive);
    }

    /// Real loops on a runtime: idle ones (waiting on a socket that never receives) answer
    /// every round; one wedged in its work (here, awaiting something that never comes, outside
    /// its `select!`) makes every round late, naming it; one whose task ended too.
    #[tokio::test]
    async fn idle_loops_are_alive_and_a_wedged_or_ended_loop_is_not() {
        let liveness = Arc::new(Liveness::new());
        let idle = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut heart = liveness.register("idle");
        tokio::spawn(async move {
            let mut buf = [0u8; 16];
            loop {
                tokio::select! {
                    () = heart.beat() => {}
                    _ = idle.recv_from(&mut buf) => {}
                }
            }
        });
        let wedge = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let wedge_at = wedge.local_addr().unwrap();
        let mut heart = liveness.register("wedged");
        tokio::spawn(async move {
            let mut buf = [0u8; 16];
            loop {
                tokio::select! {
                    () = heart.beat() => {}
                    _ = wedge.recv_from(&mut buf) => {
                        // A handler that never returns.
                        std::future::pending::<()>().await;
                    }
                }
            }
        });
        let heart = liveness.register("ended");
        tokio::spawn(async move { drop(heart) });
        let settle = || tokio::time::sleep(Duration::from_millis(50));
        settle().await;
        assert_eq!(liveness.round(), Round::Late(vec!["ended".to_owned()]));
        settle().await;
        assert_eq!(liveness.round(), Round::Late(vec!["ended".to_owned()]));
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.send_to(b"x", wedge_at).unwrap();
        settle().await;
        // The wedge came after the loop had answered this tick: the next round names it.
        liveness.round();
        settle().await;
        assert_eq!(liveness.round(), Round::Late(vec!["wedged".to_owned(), "ended".to_owned()]));
        settle().await;
        assert_eq!(liveness.round(), Round::Late(vec!["wedged".to_owned(), "ended".to_owned()]));
    }
}
