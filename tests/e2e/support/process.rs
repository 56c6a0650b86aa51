//! Child processes: every one runs in its own process group and is killed, group and all, when
//! its guard drops (also when the test panics).

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::tail;

/// The one place the tests create a `Command`.
#[allow(clippy::disallowed_methods)]
pub(crate) fn command(program: impl AsRef<OsStr>) -> Command {
    Command::new(program)
}

/// `program args...`, run inside the network namespace `netns` when one is given. The process
/// gets SIGKILL if the test thread that started it dies without cleaning up (the harness killed,
/// Ctrl-C), so that no daemon or VM outlives an interrupted run.
pub(crate) fn command_in(netns: Option<&str>, program: &str) -> Command {
    let mut cmd = command("setpriv");
    cmd.args(["--pdeathsig", "KILL", "--"]);
    if let Some(ns) = netns {
        cmd.args(["ip", "netns", "exec", ns]);
    }
    cmd.arg(program);
    cmd
}

/// Runs a short command to completion; panics with its output when it fails.
pub(crate) fn run(cmd: &mut Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a short command to completion and says whether it succeeded, ignoring its output.
pub(crate) fn run_quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A long-running child (daemon, QEMU) with its output in a log file.
#[derive(Debug)]
pub(crate) struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Daemon {
    /// Starts `cmd` in a new process group with standard input closed and standard output and
    /// error appended to `log`.
    pub(crate) fn spawn(name: &str, mut cmd: Command, log: &Path) -> Daemon {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().expect("duplicating a log file handle");
        cmd.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {name} ({cmd:?}): {e}"));
        Daemon { name: name.to_owned(), child, log: log.to_owned(), status: None }
    }

    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// The exit status, if the process has ended.
    pub(crate) fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap_or(None);
        }
        self.status
    }

    /// Panics, showing the log, if the process has already ended.
    pub(crate) fn assert_running(&mut self) {
        if let Some(status) = self.try_status() {
            panic!("{} exited early ({status})\n{}", self.name, tail(&self.log, 4000));
        }
    }

    /// Waits up to `timeout` for the process to end by itself.
    pub(crate) fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` to the whole process group.
    pub(crate) fn signal(&self, signal: Signal) {
        let pgid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits in i32"));
        let _ = killpg(pgid, signal);
    }

    /// SIGTERM to the group, then SIGKILL if it is still there after `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) -> ExitStatus {
        if let Some(status) = self.try_status() {
            // The leader is gone; make sure nothing it started lingers.
            self.signal(Signal::SIGKILL);
            return status;
        }
        self.signal(Signal::SIGTERM);
        if let Some(status) = self.wait_timeout(grace) {
            self.signal(Signal::SIGKILL);
            return status;
        }
        eprintln!("{} ignored SIGTERM for {grace:?}; killing it", self.name);
        self.signal(Signal::SIGKILL);
        let status = self.child.wait().unwrap_or_else(|_| ExitStatus::from_raw(9));
        self.status = Some(status);
        status
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}
