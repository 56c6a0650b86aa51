//! Confining client-supplied paths to a served root (`[http] files_root`, `[tftp] root`).
//!
//! A name is refused when it is absolute, has an empty, `.` or `..` component, carries a
//! backslash, an encoded separator or dot (`%2f`, `%5c`, `%2e`), or a control character; what
//! remains is resolved with symlinks followed and must still lie inside the root, so a symlink
//! pointing outside is refused too (a link to `/dev/zero` among them). Only regular files are
//! served: a directory is not found (no listing); a FIFO, a device or a socket is refused without
//! being opened (opening a FIFO blocks until a writer comes). [`open_regular`] opens what
//! `resolve` answered without blocking and checks the descriptor again, for a name swapped
//! since (the TFTP listener reads through it; `/files/` hands the path to tower-http).

use std::path::{Path, PathBuf};

/// Why a path is not served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("file not found")]
    NotFound,
    #[error("access denied: {0}")]
    Denied(&'static str),
}

/// A served root, canonicalised once.
#[derive(Debug, Clone)]
pub struct FileRoot {
    /// Shared: the boot listener's state is cloned per request, and a clone must not allocate.
    root: std::sync::Arc<Path>,
}

impl FileRoot {
    /// The root must exist; it is resolved (symlinks followed) once, here.
    pub fn new(root: &Path) -> std::io::Result<FileRoot> {
        Ok(FileRoot { root: root.canonicalize()?.into() })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The regular file `name` designates inside the root.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, FileError> {
        check_name(name)?;
        let joined = self.root.join(name);
        let resolved = match joined.canonicalize() {
            Ok(path) => path,
            Err(_) => return Err(FileError::NotFound),
        };
        if !resolved.starts_with(&*self.root) {
            return Err(FileError::Denied("the path leads outside the served folder"));
        }
        match std::fs::metadata(&resolved) {
            Ok(meta) if meta.is_file() => Ok(resolved),
            // A FIFO would block the reader that opens it until a writer comes; a device reads
            // without end (`/dev/zero`) or reaches the host: neither is opened, both are refused.
            Ok(meta) if !meta.is_dir() => Err(FileError::Denied("not a regular file")),
            _ => Err(FileError::NotFound),
        }
    }
}

/// Opens a file that [`FileRoot::resolve`] answered, without blocking on what may have replaced
/// it since (`O_NONBLOCK`: a FIFO opens at once), and refuses it unless the opened file is
/// still a regular file: the check is made on what is read, not on the name.
pub fn open_regular(path: &Path) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits() | nix::fcntl::OFlag::O_NOCTTY.bits())
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a regular file",
        ));
    }
    Ok((file, meta))
}

/// The checks that need no file system.
pub fn check_name(name: &str) -> Result<(), FileError> {
    if name.is_empty() || name.starts_with('/') {
        return Err(FileError::Denied("absolute or empty path"));
    }
    if name.chars().any(|c| c.is_control() || c == '\\') {
        return Err(FileError::Denied("control character or backslash in the path"));
    }
    let lower = name.to_ascii_lowercase();
    if ["%2f", "%5c", "%2e", "%00"].iter().any(|e| lower.contains(e)) {
        return Err(FileError::Denied("encoded separator in the path"));
    }
    if name.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(FileError::Denied("empty, '.' or '..' path component"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_traversal_and_encodings() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a\\..\\b",
            "a%2f..%2fb",
            "%2e%2e/x",
            "a\0b",
            "a/",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["undionly.kpxe", "nfs/vmlinuz", "a.b-c_d+e"] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
    }

    /// The check made on the descriptor: a FIFO (what a name may have become since `resolve`)
    /// opens without waiting for a writer and is refused.
    #[test]
    fn open_regular_refuses_a_fifo_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        std::fs::write(dir.path().join("file"), "ok").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(open_regular(&fifo).map(|_| ()).map_err(|e| e.kind()));
        });
        let answer = rx.recv_timeout(std::time::Duration::from_secs(2)).expect("no wait on a FIFO");
        assert_eq!(answer, Err(std::io::ErrorKind::PermissionDenied));
        assert_eq!(open_regular(&dir.path().join("file")).unwrap().1.len(), 2);
    }

    #[test]
    fn refuses_symlinks_out_of_the_root_and_directories() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("sub")).unwrap();
        std::fs::write(root.path().join("sub/ok"), "ok").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("escape"))
            .unwrap();
        std::os::unix::fs::symlink("sub/ok", root.path().join("inside-link")).unwrap();
        let files = FileRoot::new(root.path()).unwrap();
        assert!(files.resolve("sub/ok").is_ok());
        assert!(files.resolve("inside-link").is_ok(), "a symlink that stays inside is fine");
        assert_eq!(
            files.resolve("escape"),
            Err(FileError::Denied("the path leads outside the served folder"))
        );
        assert_eq!(files.resolve("sub"), Err(FileError::NotFound));
        assert_eq!(files.resolve("missing"), Err(FileError::NotFound));
    }
}
