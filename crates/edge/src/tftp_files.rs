//! What the TFTP listener serves: the generic `boot.ipxe` and per-MAC scripts by name from the
//! boot snapshot (`boot.ipxe`, `boot/<mac>.ipxe`, `default.ipxe`), and files under `[tftp] root`
//! (iPXE binaries; the EFI ones signed with `[secure_boot]`, `secure_boot`), confined by
//! `files::FileRoot` and kept in memory once read, so a boot storm reads each binary from disk
//! once. A script that carries a secret goes only to its node
//! (`script_access`); anyone else gets what an unknown MAC gets, ERROR 1 "file not found".
//! The boot sign a fetched file gives is looked at on a task of the tracker the owner hands in
//! (`serve`'s, waited for at shutdown), never on a bare `tokio::spawn`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use bootvol_tftp::{Handler, TftpError, TransferEnd, TransferResult};
use bytes::Bytes;
use tokio_util::task::TaskTracker;

use crate::script_access::ScriptAccess;
use crate::secure_boot::SignedBinaries;
use bootvol_core::boot::BootSnapshot;
use bootvol_core::files::{FileError, FileRoot, check_name};
use bootvol_core::model::MacAddr;
use bootvol_core::recent::BootResult;
use bootvol_runtime::logging::Peer;
use bootvol_runtime::metrics::{FileClass, Metrics, ScriptKind, TftpResult, Transport};

/// Files larger than this are refused over TFTP: iPXE fetches anything big over HTTP.
pub const MAX_TFTP_FILE: u64 = 64 * 1024 * 1024;

/// The TFTP handler of `bootvol serve`.
#[derive(Debug)]
pub struct TftpBootFiles {
    snapshot: Arc<ArcSwap<BootSnapshot>>,
    root: Option<FileRoot>,
    /// With `[secure_boot]`: the EFI binaries of `root`, signed.
    signed: Option<Arc<SignedBinaries>>,
    cache: Arc<Mutex<HashMap<PathBuf, CachedFile>>>,
    recent: Arc<bootvol_core::recent::RecentBoots>,
    access: Arc<ScriptAccess>,
    metrics: Arc<Metrics>,
    /// Where the boot-sign look-ups run (`boot_file_sign`): the owner's, waited for at shutdown.
    tasks: TaskTracker,
}

#[derive(Debug, Clone)]
struct CachedFile {
    modified: Option<SystemTime>,
    len: u64,
    bytes: Bytes,
}

impl TftpBootFiles {
    /// `access`: who may fetch a script that carries a secret. `tasks`: the tracker the
    /// boot-sign look-ups run on (a second after a file is fetched); the owner closes and waits
    /// for it at shutdown.
    pub fn new(
        snapshot: Arc<ArcSwap<BootSnapshot>>,
        root: Option<FileRoot>,
        access: Arc<ScriptAccess>,
        tasks: TaskTracker,
    ) -> TftpBootFiles {
        TftpBootFiles {
            snapshot,
            root,
            signed: None,
            cache: Arc::default(),
            recent: Arc::default(),
            access,
            metrics: Metrics::new(None),
            tasks,
        }
    }

    /// Counts scripts and file requests in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> TftpBootFiles {
        self.metrics = metrics;
        self
    }

    /// Serves the EFI binaries of the root signed (`[secure_boot]`).
    pub fn with_signed(mut self, signed: Option<Arc<SignedBinaries>>) -> TftpBootFiles {
        self.signed = signed;
        self
    }

    /// Records script requests in `recent` (the admin page's recent boot requests).
    pub fn with_recent(mut self, recent: Arc<bootvol_core::recent::RecentBoots>) -> TftpBootFiles {
        self.recent = recent;
        self
    }

    async fn script(&self, name: &str, peer: SocketAddr) -> Option<Result<Bytes, TftpError>> {
        let snapshot = self.snapshot.load_full();
        if name == "boot.ipxe" {
            tracing::info!(peer = %Peer(peer), file = name, "tftp: generic boot script");
            self.recent.record("tftp", peer.ip(), None, None, BootResult::Generic);
            self.metrics.script(ScriptKind::Generic, Transport::Tftp);
            return Some(Ok(snapshot.generic_script().clone()));
        }
        if name == "default.ipxe" || name == "boot/default.ipxe" {
            tracing::info!(peer = %Peer(peer), file = name, scenario = "default", "tftp: boot script");
            self.recent.record("tftp", peer.ip(), None, None, BootResult::DefaultAsked);
            self.metrics.script(ScriptKind::Default, Transport::Tftp);
            return Some(Ok(snapshot.default_script().text.clone()));
        }
        let stem = name.strip_prefix("boot/")?.strip_suffix(".ipxe")?;
        let Ok(mac) = stem.parse::<MacAddr>() else {
            return Some(Err(TftpError::NotFound));
        };
        let script = snapshot.script(mac);
        let refused = match script {
            Some(script) => self.access.allows(script, mac, peer.ip(), "tftp").await.err(),
            None => None,
        };
        Some(match (script, refused) {
            (Some(script), Some(why)) => {
                let why = BootResult::Refused(why);
                self.recent.record("tftp", peer.ip(), Some(mac), script.node.as_deref(), why);
                self.metrics.script(ScriptKind::Refused, Transport::Tftp);
                Err(TftpError::NotFound)
            }
            (Some(script), None) => {
                tracing::info!(peer = %Peer(peer), %mac, node = script.node.as_deref().unwrap_or("-"), scenario = script.scenario, "tftp: boot script");
                self.recent.record(
                    "tftp",
                    peer.ip(),
                    Some(mac),
                    script.node.as_deref(),
                    script.result(),
                );
                self.metrics.script(ScriptKind::Node, Transport::Tftp);
                Ok(script.text.clone())
            }
            (None, _) => {
                tracing::info!(peer = %Peer(peer), %mac, scenario = "unknown", "tftp: boot script for an unknown MAC");
                self.recent.record("tftp", peer.ip(), Some(mac), None, BootResult::UnknownMac);
                self.metrics.script(ScriptKind::Unknown, Transport::Tftp);
                Err(TftpError::NotFound)
            }
        })
    }
}

impl TftpBootFiles {
    /// A file of the TFTP root (an iPXE binary: the first file of a boot chain) asked for by a
    /// client: once its neighbour entry exists (the kernel resolves it to answer), a sign that
    /// the node with that MAC starts a boot. Looked at after a second, off the transfer's path,
    /// on a task of `tasks`.
    fn boot_file_sign(&self, peer: SocketAddr) {
        if self.access.mode() == bootvol_core::config::ScriptSecrets::Any {
            return;
        }
        let (access, snapshot) = (Arc::clone(&self.access), Arc::clone(&self.snapshot));
        self.tasks.spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let snapshot = snapshot.load();
            access.boot_file_fetched(
                peer.ip(),
                |mac| snapshot.script(mac).and_then(|s| s.node_uuid.clone()),
                "tftp",
            );
        });
    }
}

/// Where the file served as `name` is: under the root, or its signed copy.
fn served_path(
    root: &FileRoot,
    signed: Option<&SignedBinaries>,
    name: &str,
) -> Result<PathBuf, TftpError> {
    let refused = |e| match e {
        FileError::NotFound => TftpError::NotFound,
        FileError::Denied(why) => TftpError::AccessViolation(why.into()),
    };
    match signed {
        None => root.resolve(name).map_err(refused),
        Some(signed) => signed.served(name).map_err(|e| match e {
            Some(e) => refused(e),
            None => TftpError::Io(std::io::Error::other("signing failed")),
        }),
    }
}

/// Reads a file under the root (its signed copy when `signed` is given), from the cache when
/// its size and time have not changed.
fn read_file(
    root: &FileRoot,
    signed: Option<&SignedBinaries>,
    cache: &Mutex<HashMap<PathBuf, CachedFile>>,
    name: &str,
) -> Result<Bytes, TftpError> {
    let path = served_path(root, signed, name)?;
    // Opened once and checked on the descriptor: a name swapped for a FIFO or a device since
    // `resolve` neither blocks nor is read.
    let (mut file, meta) =
        bootvol_core::files::open_regular(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => {
                TftpError::AccessViolation("not a regular file".into())
            }
            _ => TftpError::Io(e),
        })?;
    if meta.len() > MAX_TFTP_FILE {
        return Err(TftpError::AccessViolation(
            "file too large for TFTP; fetch it over HTTP".into(),
        ));
    }
    let modified = meta.modified().ok();
    let hit = cache.lock().ok().and_then(|c| {
        c.get(&path)
            .filter(|f| f.modified == modified && f.len == meta.len())
            .map(|f| f.bytes.clone())
    });
    if let Some(bytes) = hit {
        return Ok(bytes);
    }
    let mut read = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    std::io::Read::read_to_end(&mut file, &mut read)?;
    let bytes = Bytes::from(read);
    if let Ok(mut cache) = cache.lock() {
        cache.insert(path, CachedFile { modified, len: bytes.len() as u64, bytes: bytes.clone() });
    }
    Ok(bytes)
}

impl Handler for TftpBootFiles {
    async fn read(&self, name: &str, peer: SocketAddr) -> Result<Bytes, TftpError> {
        check_name(name).map_err(|e| TftpError::AccessViolation(e.to_string()))?;
        if let Some(script) = self.script(name, peer).await {
            return script;
        }
        let root = self.root.clone().ok_or(TftpError::NotFound)?;
        self.boot_file_sign(peer);
        let cache = Arc::clone(&self.cache);
        let signed = self.signed.clone().filter(|_| SignedBinaries::signs(name));
        let owned = name.to_owned();
        let result = tokio::task::spawn_blocking(move || {
            read_file(&root, signed.as_deref(), &cache, &owned)
        })
        .await
        .map_err(|e| TftpError::Io(std::io::Error::other(e.to_string())))?;
        match &result {
            Ok(bytes) => {
                tracing::debug!(peer = %Peer(peer), file = name, bytes = bytes.len(), "tftp: file")
            }
            Err(e) => tracing::info!(peer = %Peer(peer), file = name, error = %e, "tftp: refused"),
        }
        result
    }

    fn transfer_ended(&self, name: &str, end: &TransferEnd) {
        let is_script = name == "boot.ipxe"
            || name == "default.ipxe"
            || (name.starts_with("boot/") && name.ends_with(".ipxe"));
        let class = if is_script { FileClass::Script } else { FileClass::File };
        let result = match end.result {
            TransferResult::Complete => TftpResult::Complete,
            TransferResult::ClientError => TftpResult::ClientError,
            TransferResult::TimedOut => TftpResult::TimedOut,
            TransferResult::Superseded => TftpResult::Superseded,
            TransferResult::Refused => TftpResult::Refused,
            TransferResult::SocketError => TftpResult::SocketError,
        };
        self.metrics.tftp_transfer(class, result, end.bytes, end.duration);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bootvol_core::boot::Templates;
    use bootvol_core::boot_window::BootWindows;
    use bootvol_core::config::{Config, ScriptSecrets, SecretWindow};

    use super::*;
    use crate::neighbour::Neighbours;

    #[tokio::test]
    async fn a_fetched_file_s_boot_sign_runs_on_the_owner_s_tracker() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("snponly.efi"), b"binary").unwrap();
        let config = Config::from_toml("", "t").unwrap();
        let snapshot = BootSnapshot::build(
            &[],
            &Templates::new(None).unwrap(),
            &config.boot_settings(),
            config.default.default_storage_interface,
        )
        .unwrap();
        let windows = BootWindows::new(SecretWindow::Boot, Duration::from_secs(300));
        let access = ScriptAccess::new(
            ScriptSecrets::Neighbour,
            None,
            Arc::new(Neighbours::empty()),
            Arc::new(windows),
            Metrics::new(None),
        );
        let tasks = TaskTracker::new();
        let files = TftpBootFiles::new(
            Arc::new(ArcSwap::from_pointee(snapshot)),
            Some(FileRoot::new(dir.path()).unwrap()),
            access,
            tasks.clone(),
        );
        let peer: SocketAddr = "192.0.2.7:1234".parse().unwrap();
        assert_eq!(&files.read("snponly.efi", peer).await.unwrap()[..], b"binary");
        assert_eq!(tasks.len(), 1, "the boot sign waits on the owner's tracker");
        tasks.close();
        tokio::time::timeout(Duration::from_secs(5), tasks.wait()).await.unwrap();
    }
}
