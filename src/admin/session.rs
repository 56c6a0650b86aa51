//! Admin sessions and the log-in rate limit: in memory, bounded, and restored from their cookie
//! after a restart.
//!
//! A session id is random (from the system's CSPRNG through `uuid` v4: 244 random bits); the
//! cookie carries it, the user name and when the session opened, with an HMAC-SHA256 under a
//! key kept in the database (drawn once, the first time), so a forged or altered cookie is
//! refused before any lookup, and a cookie issued before a restart still names its session:
//! it is restored while younger than [`IDLE_TIMEOUT`] (its CSRF token is an HMAC of its id, so
//! an open page's forms still work). Sessions logged out are kept in the database until they
//! would have ended, so a restart never revives them.
//!
//! A logged-in session belongs to its user's htpasswd entry as it was at log-in: the cookie
//! carries a stamp, an HMAC of the user and their hash line, and every use compares it with
//! the entry of the file now ([`EntryOf`], which reloads the file when it changed). A password
//! changed (on the admin page or by rewriting the file) or the user removed ends every session
//! of that user at once, in this process, in every other instance and after a restart, with
//! nothing to store.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
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

/// A one-shot message for the next page: a success (`bad == false`) or a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Flash {
    pub(super) text: String,
    pub(super) bad: bool,
}

/// A session as the handlers see it.
#[derive(Debug, Clone)]
pub(super) struct Session {
    pub(super) user: Option<String>,
    pub(super) csrf: String,
    /// The cookie value that names this session (with the stamp of the user's htpasswd entry
    /// at log-in, `-` for an anonymous session).
    pub(super) cookie: String,
}

/// A user's htpasswd entry now (its hash; empty when authentication is off), `None` when the
/// user has none: what a session's stamp is checked against.
pub(super) type EntryOf = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

struct Entry {
    session: Session,
    expires: Instant,
    /// A message for the next page this session sees (after a redirect-after-POST).
    flash: Option<Flash>,
}

/// The session store.
pub(super) struct Sessions {
    key: Vec<u8>,
    entry_of: EntryOf,
    entries: Mutex<HashMap<String, Entry>>,
    /// Ids of sessions logged out (kept in the database too).
    logged_out: Mutex<HashSet<String>>,
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

/// What a verified cookie says.
struct Claims<'a> {
    id: &'a str,
    user: Option<String>,
    opened_at: u64,
    stamp: &'a str,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

impl Sessions {
    /// A store whose cookies are signed with `key` (kept by the caller across restarts), with
    /// the sessions `logged_out` refused and users' sessions bound to `entry_of`.
    pub(super) fn new(key: String, logged_out: Vec<String>, entry_of: EntryOf) -> Sessions {
        Sessions {
            key: key.into_bytes(),
            entry_of,
            entries: Mutex::new(HashMap::new()),
            logged_out: Mutex::new(logged_out.into_iter().collect()),
        }
    }

    /// A fresh random key (256 bits, as hex text: the database keeps it as it is), for a store
    /// that has none kept.
    pub(super) fn random_key() -> String {
        use sha2::Digest;
        hex(&Sha256::digest(random_hex().as_bytes()))
    }

    fn mac(&self, text: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(text.as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// The signed cookie value of a session.
    fn cookie(&self, id: &str, user: Option<&str>, opened_at: u64, stamp: &str) -> String {
        let body = format!("{id}.{}.{opened_at}.{stamp}", hex(user.unwrap_or("").as_bytes()));
        format!("{body}.{}", self.mac(&body))
    }

    /// The stamp of `user`'s htpasswd entry now (128 bits of an HMAC of the user and the
    /// hash), `None` without an entry; `-` for an anonymous session.
    fn stamp(&self, user: Option<&str>) -> Option<String> {
        let Some(user) = user else { return Some("-".to_owned()) };
        let entry = (self.entry_of)(user)?;
        let mut mac = self.mac(&format!("entry:{}:{entry}", hex(user.as_bytes())));
        mac.truncate(32);
        Some(mac)
    }

    /// Whether a session opened with `stamp` still belongs to `user`'s entry.
    fn current(&self, user: Option<&str>, stamp: &str) -> bool {
        self.stamp(user).is_some_and(|now| same_token(&now, stamp))
    }

    /// What a cookie whose signature is right says.
    fn verify<'a>(&self, cookie: &'a str) -> Option<Claims<'a>> {
        let (body, signature) = cookie.rsplit_once('.')?;
        if !same_token(signature, &self.mac(body)) {
            return None;
        }
        let mut parts = body.split('.');
        let (id, user, opened_at, stamp) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let user = String::from_utf8(unhex(user)?).ok()?;
        Some(Claims {
            id,
            user: (!user.is_empty()).then_some(user),
            opened_at: opened_at.parse().ok()?,
            stamp,
        })
    }

    /// A session's CSRF token: an HMAC of its id (so a restored session keeps it).
    fn csrf(&self, id: &str) -> String {
        self.mac(&format!("csrf:{id}"))
    }

    /// Opens a session, bound to the user's htpasswd entry now; returns the cookie value and
    /// the session. A user without an entry (removed meanwhile) gets a session that no request
    /// will find.
    pub(super) fn open(&self, user: Option<String>) -> (String, Session) {
        let id = random_hex();
        // No entry: a stamp no entry has (an HMAC is hex, never this).
        let stamp = self.stamp(user.as_deref()).unwrap_or_else(|| "none".to_owned());
        let cookie = self.cookie(&id, user.as_deref(), bootvol_core::timefmt::now_unix(), &stamp);
        let session = Session { user, csrf: self.csrf(&id), cookie: cookie.clone() };
        self.insert(id, session.clone());
        (cookie, session)
    }

    fn insert(&self, id: String, session: Session) {
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
        entries.insert(id, Entry { session, expires: now + timeout, flash: None });
    }

    /// The live session of a cookie (its idle time restarts). A cookie this store does not
    /// hold (issued before a restart) is restored while younger than its timeout, unless it was
    /// logged out. Either way, a session whose user's htpasswd entry changed or went since its
    /// log-in is ended.
    pub(super) fn get(&self, cookie: &str) -> Option<Session> {
        let claims = self.verify(cookie)?;
        let id = claims.id;
        if !self.current(claims.user.as_deref(), claims.stamp) {
            // Ended for good in this process, even if the old entry is put back.
            self.entries.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
            self.logged_out.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_owned());
            return None;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = entries.get_mut(id) else {
            drop(entries);
            return self.restore(cookie, claims);
        };
        if entry.expires <= now {
            entries.remove(id);
            return None;
        }
        let timeout = if entry.session.user.is_some() { IDLE_TIMEOUT } else { ANONYMOUS_TIMEOUT };
        entry.expires = now + timeout;
        Some(entry.session.clone())
    }

    fn restore(&self, cookie: &str, claims: Claims<'_>) -> Option<Session> {
        let timeout = if claims.user.is_some() { IDLE_TIMEOUT } else { ANONYMOUS_TIMEOUT };
        let young =
            bootvol_core::timefmt::now_unix() < claims.opened_at.saturating_add(timeout.as_secs());
        if !young || self.logged_out.lock().unwrap_or_else(|p| p.into_inner()).contains(claims.id) {
            return None;
        }
        let session =
            Session { user: claims.user, csrf: self.csrf(claims.id), cookie: cookie.to_owned() };
        self.insert(claims.id.to_owned(), session.clone());
        Some(session)
    }

    /// The id of the session a cookie names (its signature checked, nothing looked up).
    pub(super) fn id_of(&self, cookie: &str) -> Option<String> {
        self.verify(cookie).map(|claims| claims.id.to_owned())
    }

    /// Whether the cookie's session is still live, without using it (its idle time goes on):
    /// what a live stream checks on every tick, so that an open page does not keep its session
    /// alive, and a log-out, expiry or password change ends the stream.
    pub(super) fn alive(&self, cookie: &str) -> bool {
        let Some(claims) = self.verify(cookie) else { return false };
        if !self.current(claims.user.as_deref(), claims.stamp) {
            return false;
        }
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(claims.id)
            .is_some_and(|e| e.expires > Instant::now() && e.session.user.is_some())
    }

    /// Keeps `message` for the next page of the session (one message: the newest wins).
    pub(super) fn set_flash(&self, cookie: &str, message: String) {
        self.flash(cookie, Flash { text: message, bad: false });
    }

    /// Keeps a failure's `message` for the next page of the session.
    pub(super) fn set_flash_error(&self, cookie: &str, message: String) {
        self.flash(cookie, Flash { text: message, bad: true });
    }

    fn flash(&self, cookie: &str, flash: Flash) {
        if let Some(claims) = self.verify(cookie)
            && let Some(entry) =
                self.entries.lock().unwrap_or_else(|p| p.into_inner()).get_mut(claims.id)
        {
            entry.flash = Some(flash);
        }
    }

    /// The message kept for this page, once.
    pub(super) fn take_flash(&self, cookie: &str) -> Option<Flash> {
        let claims = self.verify(cookie)?;
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).get_mut(claims.id)?.flash.take()
    }

    /// Ends the session of a cookie; answers its id and until when it would have lived (Unix
    /// seconds), for the caller to keep.
    pub(super) fn close(&self, cookie: &str) -> Option<(String, i64)> {
        let claims = self.verify(cookie)?;
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).remove(claims.id);
        self.logged_out.lock().unwrap_or_else(|p| p.into_inner()).insert(claims.id.to_owned());
        let timeout = if claims.user.is_some() { IDLE_TIMEOUT } else { ANONYMOUS_TIMEOUT };
        let until = claims.opened_at.saturating_add(timeout.as_secs());
        Some((claims.id.to_owned(), i64::try_from(until).unwrap_or(i64::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_signed_and_sessions_close() {
        let sessions = store();
        let (cookie, session) = sessions.open(Some("admin".into()));
        assert_eq!(sessions.get(&cookie).unwrap().csrf, session.csrf);
        let (body, _) = cookie.rsplit_once('.').unwrap();
        assert!(sessions.get(&format!("{body}.00")).is_none());
        assert!(sessions.get(body).is_none());
        // Another user named in the same cookie breaks its signature.
        let (id, rest) = cookie.split_once('.').unwrap();
        let (_, rest) = rest.split_once('.').unwrap();
        assert!(sessions.get(&format!("{id}.{}.{rest}", hex(b"root"))).is_none());
        assert!(sessions.alive(&cookie) && sessions.id_of(&cookie).is_some());
        sessions.close(&cookie);
        assert!(sessions.get(&cookie).is_none());
        assert!(!sessions.alive(&cookie), "a closed session is not alive");
    }

    fn store() -> Sessions {
        Sessions::new(Sessions::random_key(), Vec::new(), entries(&[("admin", "h1")]))
    }

    /// An [`EntryOf`] over fixed users, and `(noauth)`'s empty entry.
    fn entries(users: &[(&str, &str)]) -> EntryOf {
        let users: HashMap<String, String> =
            users.iter().map(|(u, h)| ((*u).to_owned(), (*h).to_owned())).collect();
        Arc::new(
            move |user| {
                if user == "(noauth)" { Some(String::new()) } else { users.get(user).cloned() }
            },
        )
    }

    #[test]
    fn a_session_ends_when_its_users_entry_changes_or_goes() {
        let key = Sessions::random_key();
        let hash = Arc::new(Mutex::new(Some("h1".to_owned())));
        let now = Arc::clone(&hash);
        let sessions = Sessions::new(
            key.clone(),
            Vec::new(),
            Arc::new(move |u| if u == "admin" { now.lock().unwrap().clone() } else { None }),
        );
        let (cookie, _) = sessions.open(Some("admin".into()));
        let (anonymous, _) = sessions.open(None);
        assert!(sessions.get(&cookie).is_some());
        *hash.lock().unwrap() = Some("h2".into()); // the password changed
        assert!(sessions.get(&cookie).is_none());
        *hash.lock().unwrap() = Some("h1".into()); // and back: the session was ended
        assert!(sessions.get(&cookie).is_none(), "an ended session stays ended in this process");
        // After a restart, the cookie is checked against the entry too.
        let (fresh, _) = sessions.open(Some("admin".into()));
        let restarted = |h: Option<&str>| {
            let h = h.map(str::to_owned);
            Sessions::new(key.clone(), Vec::new(), Arc::new(move |_| h.clone()))
        };
        assert!(restarted(Some("h1")).get(&fresh).is_some());
        assert!(restarted(Some("h3")).get(&fresh).is_none());
        assert!(restarted(None).get(&fresh).is_none(), "the user removed");
        assert!(restarted(None).get(&anonymous).is_some(), "anonymous sessions have no user");
        // A user without an entry opens nothing usable.
        let (nobody, _) = sessions.open(Some("nobody".into()));
        assert!(sessions.get(&nobody).is_none());
    }

    #[test]
    fn a_cookie_outlives_a_restart_with_the_same_key_unless_logged_out() {
        let key = Sessions::random_key();
        let before = Sessions::new(key.clone(), Vec::new(), entries(&[("admin", "h1")]));
        let (cookie, session) = before.open(Some("admin".into()));
        let (other, _) = before.open(Some("admin".into()));
        let (logged_out, _) = before.close(&other).unwrap();
        // "Restart": a new store with the kept key and the kept log-outs.
        let after = Sessions::new(key, vec![logged_out], entries(&[("admin", "h1")]));
        let restored = after.get(&cookie).expect("restored from its cookie");
        assert_eq!((restored.user.as_deref(), restored.csrf), (Some("admin"), session.csrf));
        assert!(after.get(&other).is_none(), "a logged-out session stays out");
        // Another key (as drawn at start before): nothing is restored.
        assert!(store().get(&cookie).is_none());
    }

    #[test]
    fn sessions_with_a_user_are_capped_too() {
        let sessions = store();
        let (first, _) = sessions.open(Some("(noauth)".into()));
        for _ in 0..MAX_SESSIONS + 50 {
            sessions.open(Some("(noauth)".into()));
        }
        let held = sessions.entries.lock().unwrap().len();
        assert!(held <= MAX_SESSIONS, "{held} sessions held");
        assert!(!sessions.entries.lock().unwrap().contains_key(first.split('.').next().unwrap()));
        // Its cookie still names a live session: it comes back, and the table stays capped.
        assert!(sessions.get(&first).is_some());
        assert!(sessions.entries.lock().unwrap().len() <= MAX_SESSIONS);
    }

    #[test]
    fn a_flash_message_is_shown_once() {
        let sessions = store();
        let (cookie, _) = sessions.open(Some("admin".into()));
        let (other, _) = sessions.open(Some("admin".into()));
        sessions.set_flash(&cookie, "first".into());
        sessions.set_flash(&cookie, "second".into());
        assert_eq!(sessions.take_flash(&other), None);
        assert_eq!(sessions.take_flash(&cookie).map(|f| f.text).as_deref(), Some("second"));
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
