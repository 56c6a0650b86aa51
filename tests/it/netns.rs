//! The one harness for network namespaces (`dhcp.rs`, `neighbour.rs`, `public_url.rs`,
//! `cluster.rs`): a namespace made with its loopback up and deleted when dropped ([`Netns`]),
//! `ip` in it, a command run inside it (`ip netns exec`), or a closure on a thread that entered
//! it ([`enter`], [`spawn_in`]: the one place a thread enters a namespace). Whether namespaces
//! can be used at all is `support::netns_available`.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::process::Command;

/// `ip ARGS...`, which must succeed.
#[allow(clippy::disallowed_methods)] // the tests' own tool
pub(crate) fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().unwrap();
    assert!(output.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// A network namespace, deleted when dropped; derefs to its name.
#[derive(Debug)]
pub(crate) struct Netns(String);

impl Netns {
    /// `ip netns add NAME`, with `lo` up. Names must differ between tests run in parallel.
    pub(crate) fn add(name: impl Into<String>) -> Netns {
        let ns = Netns(name.into());
        ip(&["netns", "add", &ns.0]);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NAME ARGS...`, which must succeed.
    pub(crate) fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.0.as_str()];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// `program` to run inside the namespace (`ip netns exec NAME program`).
    #[allow(clippy::disallowed_methods)] // the tests' own tool
    pub(crate) fn exec(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.0]).arg(program);
        command
    }

    /// `inner` (its program and arguments, not its environment) run inside the namespace.
    pub(crate) fn wrap(&self, inner: &Command) -> Command {
        let mut command = self.exec(inner.get_program());
        command.args(inner.get_args());
        command
    }

    /// Runs `f` on a thread of its own that entered the namespace; its panic, if any, is
    /// returned for the caller to raise.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::Result<T> {
        spawn_in(&self.0, f).join()
    }
}

/// The calling thread (only it: `setns` acts on the caller) enters the namespace `name` (one
/// `ip netns add` made).
pub(crate) fn enter(name: &str) {
    let path = format!("/var/run/netns/{name}");
    let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
}

/// `f` on a thread of its own that [`enter`]ed the namespace `name`.
pub(crate) fn spawn_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let name = name.to_owned();
    std::thread::spawn(move || {
        enter(&name);
        f()
    })
}

impl std::ops::Deref for Netns {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Drop for Netns {
    #[allow(clippy::disallowed_methods)] // the tests' own tool
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
