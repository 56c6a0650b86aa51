//! An iSCSI target: tgtd on a private management socket (`-C N`), torn down in the order it
//! needs (tgtd ignores SIGTERM while it has targets).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::process::{Daemon, command, command_in, run, run_quiet};
use super::tail;

const SOCKET_DIR: &str = "/var/run/tgtd";

/// A running tgtd with its targets.
#[derive(Debug)]
pub(crate) struct Tgtd {
    control: u32,
    tids: Vec<u32>,
    daemon: Option<Daemon>,
}

/// One-way or mutual CHAP accounts, bound to a target.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Account<'a> {
    pub(crate) user: &'a str,
    pub(crate) password: &'a str,
}

/// A target to create.
#[derive(Debug, Clone)]
pub(crate) struct Target<'a> {
    pub(crate) tid: u32,
    pub(crate) iqn: &'a str,
    /// (LUN, backing file); LUN 0 is tgt's controller, so start at 1.
    pub(crate) luns: Vec<(u32, PathBuf)>,
    /// The initiator IQNs allowed in; empty means everybody.
    pub(crate) initiators: Vec<&'a str>,
    /// The account the initiator must log in with (one-way CHAP).
    pub(crate) incoming: Option<Account<'a>>,
    /// The account the target answers with (mutual CHAP).
    pub(crate) outgoing: Option<Account<'a>>,
}

impl Tgtd {
    /// Starts tgtd with its portal at `portal` (`ip:port`), inside `netns` if given.
    pub(crate) fn start(dir: &Path, netns: Option<&str>, portal: &str) -> Tgtd {
        std::fs::create_dir_all(SOCKET_DIR).unwrap();
        let control = free_control_number();
        let mut cmd = command_in(netns, "tgtd");
        cmd.args(["-f", "-C", &control.to_string(), "--iscsi", &format!("portal={portal}")]);
        let log = dir.join(format!("tgtd-{control}.log"));
        let mut tgtd =
            Tgtd { control, tids: Vec::new(), daemon: Some(Daemon::spawn("tgtd", cmd, &log)) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let daemon = tgtd.daemon.as_mut().unwrap();
        while !run_quiet(command("tgtadm").args([
            "-C",
            &control.to_string(),
            "--op",
            "show",
            "--mode",
            "system",
        ])) {
            daemon.assert_running();
            assert!(Instant::now() < deadline, "tgtd did not answer\n{}", tail(&log, 3000));
            std::thread::sleep(Duration::from_millis(50));
        }
        tgtd
    }

    fn tgtadm(&self, args: &[&str]) -> String {
        let control = self.control.to_string();
        let mut cmd = command("tgtadm");
        cmd.args(["-C", &control, "--lld", "iscsi"]).args(args);
        run(&mut cmd)
    }

    /// Creates a target with its LUNs, accounts and ACL.
    pub(crate) fn add(&mut self, target: &Target<'_>) {
        let tid = target.tid.to_string();
        self.tgtadm(&["--op", "new", "--mode", "target", "--tid", &tid, "-T", target.iqn]);
        self.tids.push(target.tid);
        for (lun, file) in &target.luns {
            self.tgtadm(&[
                "--op",
                "new",
                "--mode",
                "logicalunit",
                "--tid",
                &tid,
                "--lun",
                &lun.to_string(),
                "-b",
                &file.display().to_string(),
            ]);
        }
        if let Some(account) = target.incoming {
            self.account(&tid, account, false);
        }
        if let Some(account) = target.outgoing {
            self.account(&tid, account, true);
        }
        if target.initiators.is_empty() {
            self.tgtadm(&["--op", "bind", "--mode", "target", "--tid", &tid, "-I", "ALL"]);
        }
        for initiator in &target.initiators {
            self.tgtadm(&[
                "--op",
                "bind",
                "--mode",
                "target",
                "--tid",
                &tid,
                "--initiator-name",
                initiator,
            ]);
        }
    }

    fn account(&self, tid: &str, account: Account<'_>, outgoing: bool) {
        self.tgtadm(&[
            "--op",
            "new",
            "--mode",
            "account",
            "--user",
            account.user,
            "--password",
            account.password,
        ]);
        let mut bind =
            vec!["--op", "bind", "--mode", "account", "--tid", tid, "--user", account.user];
        if outgoing {
            bind.push("--outgoing");
        }
        self.tgtadm(&bind);
    }

    /// Closes every iSCSI connection to target `tid`, as a target restart or a network
    /// failure would; initiators must log in again.
    pub(crate) fn drop_connections(&self, tid: u32) -> usize {
        let tid = tid.to_string();
        let shown = self.tgtadm(&["--op", "show", "--mode", "conn", "--tid", &tid]);
        let mut session = None;
        let mut dropped = 0;
        for line in shown.lines() {
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                (Some("Session:"), Some(sid)) => session = Some(sid.to_owned()),
                (Some("Connection:"), Some(cid)) => {
                    let sid = session.as_deref().expect("a session before its connections");
                    self.tgtadm(&[
                        "--op", "delete", "--mode", "conn", "--tid", &tid, "--sid", sid, "--cid",
                        cid,
                    ]);
                    dropped += 1;
                }
                _ => {}
            }
        }
        dropped
    }

    pub(crate) fn log(&self) -> String {
        match &self.daemon {
            Some(daemon) => tail(daemon.log(), 3000),
            None => String::new(),
        }
    }
}

impl Drop for Tgtd {
    fn drop(&mut self) {
        let control = self.control.to_string();
        for tid in &self.tids {
            let tid = tid.to_string();
            run_quiet(command("tgtadm").args([
                "-C", &control, "--lld", "iscsi", "--op", "delete", "--mode", "target", "--tid",
                &tid, "--force",
            ]));
        }
        run_quiet(command("tgtadm").args(["-C", &control, "--op", "delete", "--mode", "system"]));
        if let Some(mut daemon) = self.daemon.take() {
            if daemon.wait_timeout(Duration::from_secs(5)).is_none() {
                eprintln!("tgtd -C {control} did not stop; killing it");
            }
            drop(daemon);
        }
        for suffix in ["", ".lock"] {
            let _ = std::fs::remove_file(format!("{SOCKET_DIR}/socket.{control}{suffix}"));
        }
    }
}

/// A management socket number no other tgtd uses.
fn free_control_number() -> u32 {
    let start = 100 + std::process::id() % 800;
    (0..800)
        .map(|i| 100 + (start - 100 + i) % 800)
        .find(|n| {
            !Path::new(&format!("{SOCKET_DIR}/socket.{n}")).exists()
                && !Path::new(&format!("{SOCKET_DIR}/socket.{n}.lock")).exists()
        })
        .expect("a free tgtd management socket number")
}
