//! Admin sessions and the log-in rate limit: in memory, bounded, lost at restart (the operator
//! logs in again).
//!
//! A session id is random (from the system's CSPRNG through `uuid` v4: 244 random bits); the
//! cookie carries it with an HMAC-SHA256 under a key drawn at start, so a forged or altered
//! cookie is refused before any lookup. Each session has its own random CSRF token.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How long a logged-in session lives without being used.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(8 * 3600);
/// How long an anonymous (log-in form) session lives.
pub(super) const ANONYMOUS_TIMEOUT: Duration = Duration::from_secs(3600);
/// At most this many sessions are kept; the oldest anonymous ones go first.
pub(super) const MAX_SESSIONS: usize = 4096;
/// Log-in attempts allowed per client address per [`LOGIN_WINDOW`].
pub(super) const LOGIN_ATTEMPTS: u32 = 5;
/// The window of [`LOGIN_ATTEMPTS`].
pub(super) const LOGIN_WINDOW: Duration = Duration::from_secs(60);

fn random_hex() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// A session as the handlers see it.
#[derive(Debug, Clone)]
pub(super) struct Session {
    pub(super) user: Option<String>,
    pub(super) csrf: String,
    /// The cookie value that names this session.
    pub(super) cookie: String,
}

struct Entry {
    session: Session,
    expires: Instant,
    /// A message for the next page this session sees (after a redirect-after-POST).
    flash: Option<String>,
}

/// The session store.
pub(super) struct Sessions {
    key: [u8; 32],
    entries: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sessions")
    }
}

/// Compares two tokens in time independent of where they differ.
pub(super) fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && !a.is_empty()
        && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Sessions {
    pub(super) fn new() -> Sessions {
        use sha2::Digest;
        let key: [u8; 32] = Sha256::digest(random_hex().as_bytes()).into();
        Sessions { key, entries: Mutex::new(HashMap::new()) }
    }

    fn sign(&self, id: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(id.as_bytes());
        mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The id inside a cookie whose signature is right.
    fn verify<'a>(&self, cookie: &'a str) -> Option<&'a str> {
        let (id, signature) = cookie.split_once('.')?;
        same_token(signature, &self.sign(id)).then_some(id)
    }

    /// Opens a session; returns the cookie value and the session.
    pub(super) fn open(&self, user: Option<String>) -> (String, Session) {
        let id = random_hex();
        let cookie = format!("{id}.{}", self.sign(&id));
        let session = Session { user, csrf: random_hex(), cookie: cookie.clone() };
        let timeout = if session.user.is_some() { IDLE_TIMEOUT } else { ANONYMOUS_TIMEOUT };
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_SESSIONS {
            entries.retain(|_, e| e.expires > now);
        }
        if entries.len() >= MAX_SESSIONS {
            let mut anonymous: Vec<(String, Instant)> = entries
                .iter()
                .filter(|(_, e)| e.session.user.is_none())
                .map(|(k, e)| (k.clone(), e.expires))
                .collect();
            anonymous.sort_by_key(|(_, expires)| *expires);
            for (k, _) in anonymous.into_iter().take(MAX_SESSIONS / 4) {
                entries.remove(&k);
            }
        }
        // Still full (every session has a user: under `noauth` each visit opens one): the
        // sessions idle longest go, so no client can grow the table past the cap.
        if entries.len() >= MAX_SESSIONS {
            let mut oldest: Vec<(String, Instant)> =
                entries.iter().map(|(k, e)| (k.clone(), e.expires)).collect();
            oldest.sort_by_key(|(_, expires)| *expires);
            for (k, _) in oldest.into_iter().take(entries.len() + 1 - MAX_SESSIONS) {
                entries.remove(&k);
            }
        }
        entries.insert(id, Entry { session: session.clone(), expires: now + timeout, flash: None });
        (cookie, session)
    }

    /// The live session of a cookie (its idle time restarts).
    pub(super) fn get(&self, cookie: &str) -> Option<Session> {
        let id = self.verify(cookie)?;
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get_mut(id)?;
        if entry.expires <= now {
            entries.remove(id);
            return None;
        }
        let timeout = if entry.session.user.is_some() { IDLE_TIMEOUT } else { ANONYMOUS_TIMEOUT };
        entry.expires = now + timeout;
        Some(entry.session.clone())
    }

    /// Keeps `message` for the next page of the session (one message: the newest wins).
    pub(super) fn set_flash(&self, cookie: &str, message: String) {
        if let Some(id) = self.verify(cookie)
            && let Some(entry) = self.entries.lock().unwrap_or_else(|p| p.into_inner()).get_mut(id)
        {
            entry.flash = Some(message);
        }
    }

    /// The message kept for this page, once.
    pub(super) fn take_flash(&self, cookie: &str) -> Option<String> {
        let id = self.verify(cookie)?;
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).get_mut(id)?.flash.take()
    }

    /// Ends the session of a cookie.
    pub(super) fn close(&self, cookie: &str) {
        if let Some(id) = self.verify(cookie) {
            self.entries.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_signed_and_sessions_close() {
        let sessions = Sessions::new();
        let (cookie, session) = sessions.open(Some("admin".into()));
        assert_eq!(sessions.get(&cookie).unwrap().csrf, session.csrf);
        let (id, _) = cookie.split_once('.').unwrap();
        assert!(sessions.get(&format!("{id}.00")).is_none());
        assert!(sessions.get(id).is_none());
        sessions.close(&cookie);
        assert!(sessions.get(&cookie).is_none());
    }

    #[test]
    fn sessions_with_a_user_are_capped_too() {
        let sessions = Sessions::new();
        let (first, _) = sessions.open(Some("(noauth)".into()));
        for _ in 0..MAX_SESSIONS + 50 {
            sessions.open(Some("(noauth)".into()));
        }
        let held = sessions.entries.lock().unwrap().len();
        assert!(held <= MAX_SESSIONS, "{held} sessions held");
        assert!(sessions.get(&first).is_none(), "the session idle longest went first");
    }

    #[test]
    fn a_flash_message_is_shown_once() {
        let sessions = Sessions::new();
        let (cookie, _) = sessions.open(Some("admin".into()));
        let (other, _) = sessions.open(Some("admin".into()));
        sessions.set_flash(&cookie, "first".into());
        sessions.set_flash(&cookie, "second".into());
        assert_eq!(sessions.take_flash(&other), None);
        assert_eq!(sessions.take_flash(&cookie).as_deref(), Some("second"));
        assert_eq!(sessions.take_flash(&cookie), None);
    }

    #[test]
    fn tokens_compare_exactly() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("", ""));
        assert!(!same_token("ab", "abc"));
    }
}
