//! Limits on password guessing, per (client address, user name), with back-off: the admin
//! page's log-in and password forms and the API's authentications each keep one. Knows nothing
//! of HTTP.
//!
//! `limit` failures for a user from an address within `window` lock that pair for `window`;
//! each lock-out after it, while the pair keeps failing, doubles the lock (up to [`MAX_LOCK`]);
//! a success, or [`MAX_LOCK`] without a failure after the last lock ended, forgets it. A locked pair is refused without bcrypt. Only
//! the pair is locked: behind a TLS proxy every operator shares one address, and one operator's
//! (or an attacker's) failures for one name never refuse another user's right password. The
//! table is in memory and bounded (pruned past [`MAX_PAIRS`]: pairs neither locked nor in a
//! window go first; past it still, the oldest).
//!
//! Since rotating user names gets an address more checks than one pair allows, the checks
//! themselves go through a [`CheckGate`]: a few at once, on the blocking pool.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest lock; a pair quiet this long is forgotten.
pub(crate) const MAX_LOCK: Duration = Duration::from_secs(3600);
/// Pairs kept at most.
const MAX_PAIRS: usize = 10_000;
/// User names are kept to this many bytes (a name is a key, not a payload).
const MAX_USER: usize = 128;

/// A lock's remaining time in whole seconds, rounded up (at least 1): `Retry-After`.
pub(crate) fn retry_seconds(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[derive(Debug, Clone, Copy)]
struct Pair {
    /// Failures in the current window, and when it started.
    failures: u32,
    window_start: Instant,
    /// Lock-outs so far (the next lasts `window * 2^locks`), and until when the pair is locked.
    locks: u32,
    locked_until: Option<Instant>,
    last_failure: Instant,
}

/// Failed attempts per (client address, user), with back-off.
pub struct LoginLimiter {
    limit: u32,
    window: Duration,
    pairs: Mutex<HashMap<(String, String), Pair>>,
}

impl std::fmt::Debug for LoginLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginLimiter").field("limit", &self.limit).finish_non_exhaustive()
    }
}

fn key(client: &str, user: &str) -> (String, String) {
    let mut end = user.len().min(MAX_USER);
    while !user.is_char_boundary(end) {
        end -= 1;
    }
    (client.to_owned(), user[..end].to_owned())
}

impl LoginLimiter {
    /// `limit` failures per `window` before a lock of `window`, doubling after.
    pub fn new(limit: u32, window: Duration) -> LoginLimiter {
        LoginLimiter { limit, window, pairs: Mutex::new(HashMap::new()) }
    }

    /// How long `user` stays locked for `client`; `None` when an attempt may be checked.
    pub fn locked(&self, client: &str, user: &str) -> Option<Duration> {
        self.locked_at(client, user, Instant::now())
    }

    /// Records a failed attempt of `user` from `client`.
    pub fn failed(&self, client: &str, user: &str) {
        self.failed_at(client, user, Instant::now());
    }

    /// Forgets `user`'s failures from `client` (the right password).
    pub fn succeeded(&self, client: &str, user: &str) {
        self.pairs.lock().unwrap_or_else(|p| p.into_inner()).remove(&key(client, user));
    }

    fn locked_at(&self, client: &str, user: &str, now: Instant) -> Option<Duration> {
        let pairs = self.pairs.lock().unwrap_or_else(|p| p.into_inner());
        let until = pairs.get(&key(client, user))?.locked_until?;
        (until > now).then(|| until - now)
    }

    fn failed_at(&self, client: &str, user: &str, now: Instant) {
        let mut pairs = self.pairs.lock().unwrap_or_else(|p| p.into_inner());
        if pairs.len() >= MAX_PAIRS {
            self.prune(&mut pairs, now);
        }
        let pair = pairs.entry(key(client, user)).or_insert(Pair {
            failures: 0,
            window_start: now,
            locks: 0,
            locked_until: None,
            last_failure: now,
        });
        let quiet_since = pair.locked_until.map_or(pair.last_failure, |u| u.max(pair.last_failure));
        if now.saturating_duration_since(quiet_since) >= MAX_LOCK {
            pair.locks = 0; // quiet long enough since the last lock ended: a fresh start
        }
        if pair.locked_until.is_some_and(|until| until > now) {
            return; // refused without a check: nothing was tried
        }
        if now.duration_since(pair.window_start) >= self.window {
            pair.failures = 0;
            pair.window_start = now;
        }
        pair.failures += 1;
        pair.last_failure = now;
        // The first lock after `limit` failures; once locked before, every failure locks again.
        if pair.failures >= self.limit || pair.locks > 0 {
            let factor = 1u32.checked_shl(pair.locks.min(16)).unwrap_or(u32::MAX);
            let lock = self.window.saturating_mul(factor).min(MAX_LOCK);
            pair.locks += 1;
            pair.locked_until = Some(now + lock);
            pair.failures = 0;
            pair.window_start = now;
        }
    }

    fn prune(&self, pairs: &mut HashMap<(String, String), Pair>, now: Instant) {
        pairs.retain(|_, p| {
            p.locked_until.is_some_and(|u| u > now)
                || now.duration_since(p.window_start) < self.window
        });
        if pairs.len() >= MAX_PAIRS {
            let mut by_age: Vec<((String, String), Instant)> =
                pairs.iter().map(|(k, p)| (k.clone(), p.last_failure)).collect();
            by_age.sort_by_key(|(_, at)| *at);
            for (k, _) in by_age.into_iter().take(pairs.len() + 1 - MAX_PAIRS / 2) {
                pairs.remove(&k);
            }
        }
    }
}

/// Costly checks (bcrypt) run through a few permits, first come first served, on the blocking
/// pool: however many clients and user names are tried, at most `permits` checks take a core
/// at once, and never a worker that serves boots.
pub struct CheckGate {
    permits: tokio::sync::Semaphore,
    wait: Duration,
}

impl std::fmt::Debug for CheckGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckGate").field("available", &self.permits.available_permits()).finish()
    }
}

impl CheckGate {
    /// `permits` checks at once; a check that waits longer than `wait` for its turn is not run.
    pub fn new(permits: usize, wait: Duration) -> CheckGate {
        CheckGate { permits: tokio::sync::Semaphore::new(permits.max(1)), wait }
    }

    /// Half the cores, at least one.
    pub fn half_the_cores(wait: Duration) -> CheckGate {
        CheckGate::new(std::thread::available_parallelism().map_or(1, |n| n.get() / 2), wait)
    }

    /// Runs `f` on the blocking pool once a permit is free; `None` when none came within the
    /// wait (or the task failed).
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let permit = tokio::time::timeout(self.wait, self.permits.acquire()).await.ok()?.ok()?;
        let result = tokio::task::spawn_blocking(f).await.ok();
        drop(permit);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_runs_at_most_its_permits_at_once_and_gives_up_after_its_wait() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let gate = Arc::new(CheckGate::new(2, Duration::from_secs(10)));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let done: Vec<Option<usize>> = runtime.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|i| {
                    let (gate, running, most) = (gate.clone(), running.clone(), most.clone());
                    tokio::spawn(async move {
                        gate.run(move || {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(30));
                            running.fetch_sub(1, Ordering::SeqCst);
                            i
                        })
                        .await
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        });
        assert_eq!(done, (0..8).map(Some).collect::<Vec<_>>());
        let most = most.load(Ordering::SeqCst);
        assert!((1..=2).contains(&most), "never more than the permits at once: {most}");
        // One permit held for long: the next check gives up after the wait, unrun.
        let gate = Arc::new(CheckGate::new(1, Duration::from_millis(50)));
        let ran = Arc::new(AtomicUsize::new(0));
        let second = runtime.block_on(async {
            let holder = gate.clone();
            let first = tokio::spawn(async move {
                holder.run(|| std::thread::sleep(Duration::from_millis(300))).await
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            let counted = ran.clone();
            let second = gate.run(move || counted.fetch_add(1, Ordering::SeqCst)).await;
            first.await.unwrap();
            second
        });
        assert_eq!((second, ran.load(Ordering::SeqCst)), (None, 0));
    }

    #[test]
    fn a_pair_locks_after_its_failures_and_not_another_user_from_the_address() {
        let limiter = LoginLimiter::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(limiter.locked_at("10.0.0.1", "a", t0), None, "attempt {i}");
            limiter.failed_at("10.0.0.1", "a", t0);
        }
        assert_eq!(limiter.locked_at("10.0.0.1", "a", t0), Some(Duration::from_secs(60)));
        assert_eq!(limiter.locked_at("10.0.0.1", "b", t0), None, "another user, same address");
        assert_eq!(limiter.locked_at("10.0.0.2", "a", t0), None, "the same user elsewhere");
        limiter.succeeded("10.0.0.1", "b");
        assert!(limiter.locked_at("10.0.0.1", "a", t0).is_some(), "b's success frees only b");
    }

    #[test]
    fn each_lock_after_the_first_doubles_up_to_the_cap_and_success_forgets() {
        let window = Duration::from_secs(60);
        let limiter = LoginLimiter::new(2, window);
        let mut now = Instant::now();
        limiter.failed_at("c", "u", now);
        limiter.failed_at("c", "u", now);
        let mut expected = window;
        for _ in 0..8 {
            assert_eq!(limiter.locked_at("c", "u", now), Some(expected));
            // Failures while locked are not checks: they change nothing.
            limiter.failed_at("c", "u", now);
            assert_eq!(limiter.locked_at("c", "u", now), Some(expected));
            now += expected;
            assert_eq!(limiter.locked_at("c", "u", now), None, "unlocked once it ran out");
            // One more failure locks again, twice as long.
            limiter.failed_at("c", "u", now);
            expected = (expected * 2).min(MAX_LOCK);
        }
        assert_eq!(expected, MAX_LOCK);
        limiter.succeeded("c", "u");
        assert_eq!(limiter.locked_at("c", "u", now), None);
        limiter.failed_at("c", "u", now);
        assert_eq!(limiter.locked_at("c", "u", now), None, "a fresh start after a success");
    }

    #[test]
    fn failures_spread_wider_than_the_window_do_not_lock_and_a_quiet_hour_forgets() {
        let window = Duration::from_secs(60);
        let limiter = LoginLimiter::new(2, window);
        let mut now = Instant::now();
        for _ in 0..5 {
            limiter.failed_at("c", "u", now);
            now += window;
        }
        assert_eq!(limiter.locked_at("c", "u", now), None);
        limiter.failed_at("c", "u", now);
        limiter.failed_at("c", "u", now);
        assert!(limiter.locked_at("c", "u", now).is_some());
        now += window + MAX_LOCK;
        limiter.failed_at("c", "u", now);
        assert_eq!(limiter.locked_at("c", "u", now), None, "back-off forgotten after an hour");
    }

    #[test]
    fn the_table_stays_bounded() {
        let limiter = LoginLimiter::new(5, Duration::from_secs(60));
        let now = Instant::now();
        for i in 0..MAX_PAIRS + 100 {
            limiter.failed_at("c", &format!("user{i}"), now);
        }
        assert!(limiter.pairs.lock().unwrap().len() <= MAX_PAIRS);
        limiter.failed_at("c", &"x".repeat(10_000), now);
        assert!(limiter.pairs.lock().unwrap().keys().all(|(_, u)| u.len() <= MAX_USER));
    }
}
