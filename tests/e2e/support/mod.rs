//! What every boot needs: the skip-or-fail check of the environment, the lock that runs boots
//! one at a time, and a scratch directory kept on failure.

pub(crate) mod bootvol;
pub(crate) mod net;
pub(crate) mod process;
pub(crate) mod qemu;
pub(crate) mod responder;
pub(crate) mod tgtd;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// The environment variable that keeps the scratch directories of passing tests too.
pub(crate) const KEEP_VAR: &str = "BOOTVOL_E2E_KEEP";

/// The one place the tests read the environment.
#[allow(clippy::disallowed_methods)]
pub(crate) fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// Something a boot needs from the machine.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Need {
    /// Running as root (tgtd, network namespaces, raw sockets).
    Root,
    /// A program on `PATH`, and the package it comes from.
    Tool(&'static str, &'static str),
    /// A file, and what provides it.
    File(&'static str, &'static str),
    /// Anything else: what is needed, and the check.
    Check(&'static str, fn() -> bool),
}

impl Need {
    /// What is missing, or `None`.
    fn missing(self) -> Option<String> {
        match self {
            Need::Root => (!nix::unistd::geteuid().is_root()).then(|| "root".to_owned()),
            Need::Tool(name, package) => {
                which(name).is_none().then(|| format!("`{name}` (package {package})"))
            }
            Need::File(path, from) => {
                (!Path::new(path).exists()).then(|| format!("{path} (from {from})"))
            }
            Need::Check(what, check) => (!check()).then(|| what.to_owned()),
        }
    }
}

/// The full path of a program on `PATH`.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = env("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| {
        use std::os::unix::fs::PermissionsExt;
        candidate.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Every boot needs these.
pub(crate) const BASE: &[Need] = &[
    Need::Root,
    Need::Tool("qemu-system-x86_64", "qemu-system-x86"),
    Need::Tool("ip", "iproute2"),
    Need::Tool("bash", "bash"),
    Need::Tool("setpriv", "util-linux"),
    Need::Tool("ss", "iproute2"),
];
/// iSCSI targets.
pub(crate) const TGT: &[Need] = &[Need::Tool("tgtd", "tgt"), Need::Tool("tgtadm", "tgt")];
/// The iPXE ROM (BIOS and EFI) QEMU loads for virtio-net.
pub(crate) const NIC_ROM: &[Need] = &[Need::File("/usr/lib/ipxe/qemu/efi-virtio.rom", "ipxe-qemu")];
/// UEFI firmware, and the tools that build EFI system partitions.
pub(crate) const OVMF: &[Need] = &[
    Need::File("/usr/share/OVMF/OVMF_CODE_4M.fd", "ovmf"),
    Need::File("/usr/share/OVMF/OVMF_VARS_4M.fd", "ovmf"),
    Need::Tool("mkfs.fat", "dosfstools"),
    Need::Tool("mmd", "mtools"),
    Need::Tool("mcopy", "mtools"),
];
/// A private network's DHCP server.
pub(crate) const LAN: &[Need] = &[Need::Tool("dnsmasq", "dnsmasq-base")];

/// Runs one boot at a time: the machine has two cores, and every boot is timed.
static BOOTS: Mutex<()> = Mutex::new(());

/// A running end-to-end test: holds the boot lock and the scratch directory.
#[derive(Debug)]
pub(crate) struct E2e {
    pub(crate) name: &'static str,
    pub(crate) dir: Scratch,
    started: Instant,
    _lock: MutexGuard<'static, ()>,
}

/// Checks what the test `name` needs. When something is missing it fails the test if
/// `BOOTVOL_REQUIRE_E2E=1`, and otherwise prints why it is skipped and returns `None`.
/// Then it waits for its turn to boot.
pub(crate) fn begin(name: &'static str, needs: &[&[Need]]) -> Option<E2e> {
    let mut missing: Vec<String> = Vec::new();
    for what in needs.iter().flat_map(|group| group.iter()).filter_map(|need| need.missing()) {
        if !missing.contains(&what) {
            missing.push(what);
        }
    }
    if !missing.is_empty() {
        crate::skip::skip(crate::skip::E2E, &format!("missing {}", missing.join(", ")));
        return None;
    }
    let lock = BOOTS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = Scratch::new(name);
    eprintln!("{name}: scratch {}", dir.path().display());
    Some(E2e { name, dir, started: Instant::now(), _lock: lock })
}

impl E2e {
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for E2e {
    fn drop(&mut self) {
        let outcome = if std::thread::panicking() { "FAILED" } else { "passed" };
        eprintln!("{}: {outcome} in {:.1} s", self.name, self.started.elapsed().as_secs_f64());
    }
}

/// A temporary directory, kept (and named on stderr) when the test fails or `BOOTVOL_E2E_KEEP=1`.
#[derive(Debug)]
pub(crate) struct Scratch(Option<tempfile::TempDir>);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(&format!("bootvol-e2e-{name}-"))
            .tempdir()
            .expect("creating a scratch directory");
        Scratch(Some(dir))
    }

    pub(crate) fn path(&self) -> &Path {
        self.0.as_ref().expect("scratch directory").path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if (std::thread::panicking() || env(KEEP_VAR).is_some_and(|v| v == "1"))
            && let Some(dir) = self.0.take()
        {
            eprintln!("scratch kept for inspection: {}", dir.keep().display());
        }
    }
}

/// The last `max` bytes of a log file, for failure messages.
pub(crate) fn tail(path: &Path, max: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let start = bytes.len().saturating_sub(max);
            let text = String::from_utf8_lossy(&bytes[start..]).into_owned();
            format!("--- {} (last {} bytes) ---\n{text}\n--- end ---", path.display(), max)
        }
        Err(e) => format!("--- {}: {e} ---", path.display()),
    }
}

/// Where `.ci/e2e-deps.sh` puts the downloaded kernel and busybox.
pub(crate) fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/e2e-cache")
}
