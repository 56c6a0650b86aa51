//! The one rule for a test that needs a tool the machine may lack (a TFTP client, QEMU, root and
//! network namespaces, a Python peer's venv, a browser, PostgreSQL...): without it the test is
//! skipped and says so in `cargo test`'s output (the test, what it lacks, how to get it),
//! unless the `BOOTVOL_REQUIRE_*` switch of that kind of tool is `1` (CI sets every one), where
//! the skip is a failure. When the test binary exits, one line counts the skips by what they
//! lacked and names `tests/install-tools.sh`, which installs everything (`.ci/run` runs it too,
//! so the list cannot drift).
//!
//! Shared by both test binaries (`#[path]`); every skip in `tests/` goes through [`skip`]
//! (tidy's `tests_rules` says so), so none returns early unseen.

use std::io::Write as _;
use std::sync::{Mutex, Once};

/// The command that installs every tool the tests can use (as root, on Debian 12).
pub(crate) const INSTALL_ALL: &str = "tests/install-tools.sh";

/// What a test lacks: the tool's kind, the switch that turns its skips into failures, and how
/// to bring it alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kind {
    /// Its words in the summary: "TFTP clients", "network namespaces".
    pub(crate) name: &'static str,
    /// `BOOTVOL_REQUIRE_...`.
    pub(crate) require: &'static str,
    /// The command (or package) that brings it alone.
    pub(crate) install: &'static str,
}

pub(crate) const TFTP_CLIENTS: Kind = Kind {
    name: "TFTP clients",
    require: "BOOTVOL_REQUIRE_TFTP_CLIENTS",
    install: "apt-get install curl atftp tftp-hpa",
};
pub(crate) const NETNS: Kind = Kind {
    name: "root and network namespaces",
    require: "BOOTVOL_REQUIRE_NETNS",
    install: "run as root with iproute2 (and the test's tools: apt-get install iproute2 python3)",
};
pub(crate) const E2E: Kind = Kind {
    name: "VM boots (QEMU, iPXE, OVMF, tgt, vblade, dnsmasq, nfs-ganesha)",
    require: "BOOTVOL_REQUIRE_E2E",
    install: ".ci/e2e-deps.sh",
};
pub(crate) const APPLIANCE: Kind = Kind {
    name: "the appliance image",
    require: "BOOTVOL_REQUIRE_APPLIANCE",
    install: "cargo build --release --locked && image/build-appliance.sh",
};
pub(crate) const POSTGRES: Kind = Kind {
    name: "PostgreSQL 15",
    require: "BOOTVOL_REQUIRE_POSTGRES",
    install: "apt-get install postgresql-15 util-linux (and root, for a private cluster)",
};
pub(crate) const SYSTEMD: Kind = Kind {
    name: "systemd-analyze",
    require: "BOOTVOL_REQUIRE_SYSTEMD",
    install: "apt-get install systemd",
};
pub(crate) const CINDER: Kind = Kind {
    name: "a real Cinder (venv)",
    require: "BOOTVOL_REQUIRE_CINDER",
    install: "tests/cinder/setup-venv.sh",
};
pub(crate) const API_CLIENTS: Kind = Kind {
    name: "the Ironic clients and Ironic's API suite (venvs)",
    require: "BOOTVOL_REQUIRE_API_CLIENTS",
    install: "tests/api/setup-venv.sh && tests/tempest/setup-venv.sh",
};
pub(crate) const PROMETHEUS: Kind = Kind {
    name: "Prometheus",
    require: "BOOTVOL_REQUIRE_PROMETHEUS",
    install: "apt-get install prometheus",
};
pub(crate) const BROWSER: Kind = Kind {
    name: "a real browser (chromium, playwright-core)",
    require: "BOOTVOL_REQUIRE_BROWSER",
    install: "tests/admin/setup.sh",
};
pub(crate) const POWER: Kind = Kind {
    name: "BMC peers (ipmi_sim, ipmitool, sushy-tools)",
    require: "BOOTVOL_REQUIRE_POWER",
    install: "tests/power/setup.sh",
};

pub(crate) const SECURE_BOOT: Kind = Kind {
    name: "Secure Boot signing (sbsign, sbverify, openssl, Debian's iPXE)",
    require: "BOOTVOL_REQUIRE_SECURE_BOOT",
    install: "apt-get install sbsigntool openssl ipxe",
};

/// The skips of this run: (test, kind's name).
static SKIPS: Mutex<Vec<(String, &'static str)>> = Mutex::new(Vec::new());
static SUMMARY: Once = Once::new();

/// Whether `kind`'s switch is set: a missing tool of that kind fails the test.
#[allow(clippy::disallowed_methods)] // the test suite's own switches
pub(crate) fn required(kind: Kind) -> bool {
    std::env::var(kind.require).is_ok_and(|v| v == "1")
}

/// The test running on this thread (libtest names each test's thread after it).
fn current_test() -> String {
    std::thread::current().name().unwrap_or("a test").to_owned()
}

/// Skips the running test because of `why` ("`atftp` is not on PATH", "not root"), a tool of
/// `kind` missing: fails it when `kind`'s switch is set;
/// otherwise writes the skip to the process's stderr (past the harness's capture, so it is seen
/// without `--nocapture`), records it for the summary, and returns, for the test to end at once.
pub(crate) fn skip(kind: Kind, why: &str) {
    let test = current_test();
    assert!(
        !required(kind),
        "{test}: {}=1 but {why}: {} (or {INSTALL_ALL} for every tool)",
        kind.require,
        kind.install
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} ({}: {}; every tool: {INSTALL_ALL}; {}=1 fails instead)",
        kind.name,
        kind.install,
        kind.require
    );
    SKIPS.lock().unwrap_or_else(|p| p.into_inner()).push((test, kind.name));
    // `atexit`: run once, at the exit of the test binary, after every test (passed or failed).
    SUMMARY.call_once(|| {
        shutdown_hooks::add_shutdown_hook(print_summary);
    });
}

/// Whether `tool` is a file in one of `PATH`'s folders.
#[allow(clippy::disallowed_methods)] // the test suite reads PATH to find its peers
pub(crate) fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| dir.join(tool).is_file())
}

/// Whether every one of `tools` is on `PATH`; when not, the test is [`skip`]ped naming those
/// that are missing.
pub(crate) fn have(kind: Kind, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return true;
    }
    skip(kind, &format!("`{}` not on PATH", missing.join("`, `")));
    false
}

/// The summary line: how many tests were skipped, for want of which tools, and the command.
fn summary(skips: &[(String, &'static str)]) -> Option<String> {
    if skips.is_empty() {
        return None;
    }
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for (_, kind) in skips {
        match kinds.iter_mut().find(|(k, _)| k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
    }
    let each: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} ({n})")).collect();
    Some(format!(
        "SKIPPED {} test{} for want of: {}. Install every tool (as root, Debian 12): {INSTALL_ALL}",
        skips.len(),
        if skips.len() == 1 { "" } else { "s" },
        each.join(", ")
    ))
}

extern "C" fn print_summary() {
    let skips = SKIPS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(line) = summary(&skips) {
        let _ = writeln!(std::io::stderr(), "\n{line}");
    }
}

#[test]
fn the_summary_counts_skips_by_kind_and_names_the_install_command() {
    assert_eq!(summary(&[]), None);
    let skips = [
        ("a".to_owned(), TFTP_CLIENTS.name),
        ("b".to_owned(), NETNS.name),
        ("c".to_owned(), TFTP_CLIENTS.name),
    ];
    assert_eq!(
        summary(&skips).unwrap(),
        "SKIPPED 3 tests for want of: TFTP clients (2), root and network namespaces (1). \
         Install every tool (as root, Debian 12): tests/install-tools.sh"
    );
}
