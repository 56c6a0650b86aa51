//! Per-client-address limits on attempts that cost the server (a bcrypt check): the admin
//! page's log-in form and the API's failed authentications share it. In memory, bounded (the
//! table is pruned past 10,000 addresses). Knows nothing of HTTP.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Attempts per client address: at most `limit` per `window`.
pub struct LoginLimiter {
    limit: u32,
    window: Duration,
    clients: Mutex<HashMap<String, (Instant, u32)>>,
}

impl std::fmt::Debug for LoginLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginLimiter").field("limit", &self.limit).finish_non_exhaustive()
    }
}

impl LoginLimiter {
    pub fn new(limit: u32, window: Duration) -> LoginLimiter {
        LoginLimiter { limit, window, clients: Mutex::new(HashMap::new()) }
    }

    /// Whether the client is already over its limit (nothing recorded).
    pub fn blocked(&self, client: &str) -> bool {
        let now = Instant::now();
        let clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients.get(client).is_some_and(|(start, count)| {
            now.duration_since(*start) < self.window && *count >= self.limit
        })
    }

    /// Records an attempt; false when the client is over its limit.
    pub fn attempt(&self, client: &str) -> bool {
        let now = Instant::now();
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if clients.len() > 10_000 {
            clients.retain(|_, (start, _)| now.duration_since(*start) < self.window);
        }
        let entry = clients.entry(client.to_owned()).or_insert((now, 0));
        if now.duration_since(entry.0) >= self.window {
            *entry = (now, 0);
        }
        entry.1 += 1;
        entry.1 <= self.limit
    }

    /// Forgets a client's attempts (after a successful log-in).
    pub fn reset(&self, client: &str) {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).remove(client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_counts_per_client_and_resets() {
        let limiter = LoginLimiter::new(2, Duration::from_secs(60));
        assert!(!limiter.blocked("a"));
        assert!(limiter.attempt("a"));
        assert!(limiter.attempt("a"));
        assert!(limiter.blocked("a"));
        assert!(!limiter.attempt("a"));
        assert!(limiter.attempt("b"));
        limiter.reset("a");
        assert!(!limiter.blocked("a"));
        assert!(limiter.attempt("a"));
    }
}
