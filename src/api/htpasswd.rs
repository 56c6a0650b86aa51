//! The htpasswd file of `http_basic` as bootvol writes it: the one-time admin password of a
//! first start, and a password set on the admin page.
//!
//! - Pure: [`needs_first_password`] (no entry yet, or only the one-time entry bootvol wrote),
//!   [`with_password`] (the file's text with one user's hash replaced, the one-time mark
//!   dropped), [`new_password`] (random, readable, from the system's CSPRNG through `uuid`).
//! - The edge: [`write_atomic`] (a temporary file in the same folder, mode 0600, synced, renamed
//!   over the old one), [`ensure_first_password`] (called by `serve` before the API reads the
//!   file) and [`show`] (the password to `[api] first_password_files`: the console and the
//!   file the login prompt shows, never the log).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use bootvol_core::config::{ApiAuthStrategy, Config};

/// The first line of a file that holds only the one-time password bootvol generated.
pub const ONE_TIME_MARK: &str =
    "# bootvol: one-time admin password; set a real one on the admin page";

/// The user of the one-time password.
pub const FIRST_USER: &str = "admin";

/// Whether a start must generate a one-time password: no file, a file without an entry, or a
/// file that still holds only the one-time entry bootvol wrote (it is replaced at each start
/// until a real password is set, so the console always shows one that works).
pub fn needs_first_password(text: Option<&str>) -> bool {
    let Some(text) = text else { return true };
    let entries = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
    entries.count() == 0 || text.lines().next() == Some(ONE_TIME_MARK)
}

/// `text` with `user`'s entry set to `hash` (added when missing), other users kept, the
/// one-time mark dropped.
pub fn with_password(text: &str, user: &str, hash: &str) -> String {
    let mut out = String::new();
    let mut replaced = false;
    for line in text.lines().filter(|l| *l != ONE_TIME_MARK) {
        if line.split_once(':').is_some_and(|(u, _)| u.trim() == user) {
            if !replaced {
                out.push_str(&format!("{user}:{hash}\n"));
                replaced = true;
            }
        } else if !line.trim().is_empty() {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !replaced {
        out.push_str(&format!("{user}:{hash}\n"));
    }
    out
}

/// A random password: 20 characters from 32 unambiguous ones (about 99 random bits), in groups
/// of four.
pub fn new_password() -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghjkmnpqrstuvwxyz23456789X";
    let bytes: Vec<u8> =
        [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()].iter().flat_map(|u| *u.as_bytes()).collect();
    // Skip the bytes that carry a version or variant nibble in full.
    let random = bytes.iter().enumerate().filter(|(i, _)| i % 16 != 6).map(|(_, b)| *b);
    let chars: Vec<char> = random.take(20).map(|b| ALPHABET[usize::from(b % 32)] as char).collect();
    chars.chunks(4).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>().join("-")
}

/// Writes `text` to `path` atomically: a temporary file beside it (mode 0600), synced, renamed
/// over `path`, the folder synced.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let folder = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = folder.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        std::fs::File::open(folder)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// The bcrypt cost of the one-time password: 12, as for a password set on the admin page. The
/// password is random (about 99 bits), but its hash sits on the data partition, and one cost
/// for every entry leaves nothing to reason about (a quarter second, once per first start).
const ONE_TIME_COST: u32 = 12;

/// With `http_basic`, when [`needs_first_password`]: a new password for [`FIRST_USER`], its
/// bcrypt in the htpasswd file (marked one-time), the password shown ([`show`]). The password
/// itself is never logged. A file whose folder is missing fails at once, before any hash.
/// `tls_fingerprint` (the API's certificate, `[api] tls_cert`) is shown beside it, with an
/// `https://` address.
pub fn ensure_first_password(
    config: &Config,
    tls_fingerprint: Option<&str>,
) -> std::io::Result<()> {
    if config.api.auth_strategy != ApiAuthStrategy::HttpBasic {
        return Ok(());
    }
    let path = &config.api.http_basic_auth_user_file;
    let text = match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if !needs_first_password(text.as_deref()) {
        return Ok(());
    }
    // Where the file cannot be written, say so before spending a hash on it.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} is not a directory", dir.display()),
        ));
    }
    let password = new_password();
    let hash = bcrypt::hash(&password, ONE_TIME_COST).map_err(std::io::Error::other)?;
    write_atomic(path, &format!("{ONE_TIME_MARK}\n{FIRST_USER}:{hash}\n"))?;
    let shown = show(config, &password, tls_fingerprint);
    tracing::warn!(
        user = FIRST_USER,
        file = %path.display(),
        shown_in = ?shown,
        "no admin password was set: a one-time password was generated and shown on the console only; set a real one on the admin page"
    );
    Ok(())
}

/// Writes the one-time password to each of `[api] first_password_files` that can be opened
/// (created 0600 when missing), with the API certificate's fingerprint when it has one;
/// answers those written.
fn show(config: &Config, password: &str, tls_fingerprint: Option<&str>) -> Vec<String> {
    let port = config.api.listen.port();
    let scheme = if tls_fingerprint.is_some() { "https" } else { "http" };
    let certificate = tls_fingerprint
        .map(|f| format!("  certificate SHA-256 fingerprint (check it in your browser): {f}\n"))
        .unwrap_or_default();
    let mut shown = Vec::new();
    for path in &config.api.first_password_files {
        // In an /etc/issue.d file agetty prints `\4` as this box's IPv4 address.
        let host =
            if path.extension().is_some_and(|e| e == "issue") { "\\4" } else { "<this box>" };
        let text = format!(
            "\nbootvol admin page: {scheme}://{host}:{port}/admin/\n{certificate}  user: {FIRST_USER}\n  one-time password: {password}\n  (set a real password on the admin page: Password; until then a new one-time password replaces this one at every start)\n\n"
        );
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        match written {
            Ok(()) => shown.push(path.display().to_string()),
            Err(e) => {
                tracing::debug!(file = %path.display(), error = %e, "one-time password not shown there")
            }
        }
    }
    shown
}

/// Removes what [`show`] left in regular files (not the console), once a password is set.
pub fn forget_shown(config: &Config) {
    for path in &config.api.first_password_files {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_password_only_without_a_real_entry() {
        assert!(needs_first_password(None));
        assert!(needs_first_password(Some("")));
        assert!(needs_first_password(Some("# nobody yet\n\n")));
        assert!(needs_first_password(Some(&format!("{ONE_TIME_MARK}\nadmin:$2b$12$x\n"))));
        assert!(!needs_first_password(Some("admin:$2b$12$x\n")));
        assert!(!needs_first_password(Some("# mine\nops:$2y$05$y\n")));
    }

    #[test]
    fn setting_a_password_replaces_one_user_keeps_the_others_and_drops_the_mark() {
        let text = format!("{ONE_TIME_MARK}\nadmin:$2b$12$old\nops:$2y$05$ops\n");
        let new = with_password(&text, "admin", "$2b$12$new");
        assert_eq!(new, "admin:$2b$12$new\nops:$2y$05$ops\n");
        assert!(!needs_first_password(Some(&new)));
        assert_eq!(with_password("ops:$2y$05$ops\n", "admin", "$h"), "ops:$2y$05$ops\nadmin:$h\n");
    }

    #[test]
    fn passwords_are_long_random_and_readable() {
        let (a, b) = (new_password(), new_password());
        assert_ne!(a, b);
        assert_eq!(a.len(), 24, "{a}");
        assert!(a.split('-').all(|g| g.len() == 4), "{a}");
    }

    #[test]
    fn an_atomic_write_is_0600_and_leaves_no_temporary_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("htpasswd");
        std::fs::write(&path, "old").unwrap();
        write_atomic(&path, "admin:$2b$x\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "admin:$2b$x\n");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
