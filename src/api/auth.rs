//! The API's authentication: the `[api]` strategy and its htpasswd users read (again when the
//! file changes), HTTP Basic credentials checked with bcrypt on the gate's blocking pool (once
//! per client: verified credentials are remembered), failures limited per (address, user).
//! A part of `api` (its state and errors); the admin page's log-in calls it through `ApiState`.

use super::*;

/// What tells that the htpasswd file changed: modification time, size, inode.
pub(super) type FileStamp = (std::time::SystemTime, u64, u64);

pub(super) fn file_stamp(config: &Config) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&config.api.http_basic_auth_user_file).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

/// The authentication `[api]` asks for, its user file read now (a file that cannot be read is
/// logged and every authenticated request is refused).
pub(super) fn load_auth(config: &Config) -> Auth {
    match config.api.auth_strategy {
        ApiAuthStrategy::Noauth => Auth::Noauth,
        ApiAuthStrategy::HttpBasic => match load_htpasswd(&config.api.http_basic_auth_user_file) {
            Ok(users) => Auth::Basic {
                users,
                verified: Mutex::new(HashSet::new()),
                dummy: std::sync::OnceLock::new(),
            },
            Err(e) => {
                tracing::error!(error = %e, "api.http_basic_auth_user_file unusable: every API request will be refused");
                Auth::Broken
            }
        },
    }
}

pub(crate) enum Auth {
    Noauth,
    /// user -> bcrypt hash; `verified` remembers digests of credentials already checked, so
    /// bcrypt's cost is paid once per client, not once per request.
    Basic {
        users: HashMap<String, String>,
        verified: Mutex<HashSet<[u8; 32]>>,
        /// A bcrypt hash of a random password at the users' cost: an unknown user is checked
        /// against it, so it costs what a wrong password costs (no user enumeration by timing).
        /// Made at the first check (on the blocking pool), not when the file is read.
        dummy: std::sync::OnceLock<String>,
    },
    Broken,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Noauth => f.write_str("noauth"),
            Auth::Basic { users, .. } => write!(f, "http_basic ({} users)", users.len()),
            Auth::Broken => f.write_str("http_basic (no usable user file)"),
        }
    }
}

/// Reads an htpasswd file: `user:hash` lines with bcrypt hashes (`$2y$`, `$2b$`, `$2a$`).
fn load_htpasswd(path: &std::path::Path) -> Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut users = HashMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((user, hash)) = line.split_once(':') else {
            return Err(format!("{} line {}: not user:hash", path.display(), number + 1));
        };
        if !(hash.starts_with("$2y$") || hash.starts_with("$2b$") || hash.starts_with("$2a$")) {
            return Err(format!(
                "{} line {}: only bcrypt entries are supported (htpasswd -B)",
                path.display(),
                number + 1
            ));
        }
        users.insert(user.to_owned(), hash.to_owned());
    }
    Ok(users)
}

/// A bcrypt hash of a random password, at the cost of the users' own hashes (the highest).
pub(super) fn dummy_hash(users: &HashMap<String, String>) -> String {
    let cost = users
        .values()
        .filter_map(|h| h.get(4..6).and_then(|c| c.parse::<u32>().ok()))
        .max()
        .unwrap_or(bcrypt::DEFAULT_COST);
    bcrypt::hash(bootvol_core::model::new_uuid(), cost)
        .or_else(|_| bcrypt::hash(bootvol_core::model::new_uuid(), bcrypt::DEFAULT_COST))
        .unwrap_or_default()
}

/// The user and password of an `Authorization: Basic` header.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let raw = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic ").or_else(|| v.strip_prefix("basic ")))
        .and_then(|b64| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok()
        })
        .and_then(|raw| String::from_utf8(raw).ok())?;
    let (user, password) = raw.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Failed authentications allowed per (client address, user) and window before that user's
/// answers from that address are 429 without running bcrypt (then with back-off).
pub(super) const AUTH_FAILURES: u32 = 10;
pub(super) const AUTH_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Authenticates a request. bcrypt runs on the blocking pool (never on the workers that serve
/// boots), only for credentials not already verified, and not at all for a user locked for the
/// client's address (429 with `Retry-After`); another user from the same address is checked.
pub(super) async fn authenticate(
    state: &ApiState,
    headers: &HeaderMap,
    client: Option<std::net::IpAddr>,
) -> Result<(), ApiError> {
    let auth = state.auth();
    match &*auth {
        Auth::Noauth => return Ok(()),
        Auth::Broken => return Err(ApiError::unauthorized()),
        Auth::Basic { .. } => {}
    }
    let client = client.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
    let credentials = basic_credentials(headers);
    if let Some((user, password)) = &credentials
        && auth.cached(user, password)
    {
        return Ok(());
    }
    let Some((user, password)) = credentials else {
        return Err(ApiError::unauthorized()); // nothing to check: no bcrypt, nothing counted
    };
    if let Some(wait) = state.inner.auth_failures.locked(&client, &user) {
        tracing::warn!(client, user = ?user, "API authentication refused: this user is locked for this address");
        let secs = crate::limiter::retry_seconds(wait).max(1);
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("Too many failed authentications for this user from this address; retry in {secs} s."),
        )
        .retry_after(secs));
    }
    let checked = std::sync::Arc::clone(&auth);
    let who = user.clone();
    let Some(verified) = state.bcrypt(move || checked.verify(&who, &password)).await else {
        tracing::warn!(client, "API authentication not checked: too many password checks waiting");
        return Err(ApiError::unavailable("Too many password checks at once; retry shortly."));
    };
    if verified {
        state.inner.auth_failures.succeeded(&client, &user);
        Ok(())
    } else {
        state.inner.auth_failures.failed(&client, &user);
        tracing::warn!(client, user = ?user, "API authentication failed");
        Err(ApiError::unauthorized())
    }
}

impl Auth {
    /// The digest under which verified credentials are remembered.
    fn digest(hash: &str, user: &str, password: &str) -> [u8; 32] {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(hash.as_bytes());
        h.update([0]);
        h.update(user.as_bytes());
        h.update([b':']);
        h.update(password.as_bytes());
        h.finalize().into()
    }

    /// Whether these credentials were verified before (no bcrypt).
    pub(super) fn cached(&self, user: &str, password: &str) -> bool {
        let Auth::Basic { users, verified, .. } = self else { return false };
        users.get(user).is_some_and(|hash| {
            verified
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&Auth::digest(hash, user, password))
        })
    }

    /// Checks a user and password against the htpasswd entries (bcrypt), remembering
    /// credentials verified. An unknown user is checked against the dummy hash, so it costs
    /// the same as a wrong password. Blocking: bcrypt costs tens of milliseconds.
    pub(super) fn verify(&self, user: &str, password: &str) -> bool {
        let Auth::Basic { users, verified, dummy } = self else { return false };
        if self.cached(user, password) {
            return true;
        }
        let Some(hash) = users.get(user) else {
            let _ = bcrypt::verify(password, dummy.get_or_init(|| dummy_hash(users)));
            return false;
        };
        if !bcrypt::verify(password, hash).unwrap_or(false) {
            return false;
        }
        let mut set = verified.lock().unwrap_or_else(|p| p.into_inner());
        if set.len() > 1024 {
            set.clear();
        }
        set.insert(Auth::digest(hash, user, password));
        true
    }
}
