//! The iSCSI probe (`bootvol_iscsi::probe`) against a real tgtd: a private daemon on a free
//! port and its own management socket (`tgtd -C N`), a file-backed LUN of a known size, one
//! target with CHAP, mutual CHAP and an initiator ACL, and one open target. The probe says ok
//! with the LUN's size, and names each failure the way the target gave it: a wrong CHAP secret,
//! a wrong mutual secret, an initiator outside the ACL, a missing target, a missing LUN, a
//! portal that refuses and one that does not answer (tgtd stopped with SIGSTOP). It leaves no
//! session behind and writes nothing.
//!
//! `tests/it/probe.rs` runs `bootvol probe` against the same target ([`setup`]).
//!
//! Needs root and tgtd; without them it says "skipped: ..." and passes, unless
//! `BOOTVOL_REQUIRE_E2E=1` (CI), where it fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bootvol_iscsi::{Credentials, ProbeOutcome, ProbeRequest};

const SOCKET_DIR: &str = "/var/run/tgtd";
pub(crate) const CHAP_TARGET: &str = "iqn.2026-12.test.bootvol:probe-chap";
const OPEN_TARGET: &str = "iqn.2026-12.test.bootvol:probe-open";
pub(crate) const NODE: &str = "iqn.2026-12.test.bootvol.node:n1";
pub(crate) const LUN_SIZE: u64 = 24 * 1024 * 1024;

/// A private tgtd, torn down as it needs (targets deleted with `--force`, then the system).
pub(crate) struct Tgtd {
    control: String,
    child: Child,
    port: u16,
    log: PathBuf,
}

#[allow(clippy::disallowed_methods)] // the test runs tgtd and tgtadm
fn command(program: &str) -> Command {
    Command::new(program)
}

impl Tgtd {
    fn start(dir: &Path) -> Tgtd {
        std::fs::create_dir_all(SOCKET_DIR).unwrap();
        let control = free_control_number().to_string();
        let port = free_port();
        let log = dir.join("tgtd.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = command("setpriv")
            .args(["--pdeathsig", "KILL", "--", "tgtd", "-f", "-C", &control])
            .arg("--iscsi")
            .arg(format!("portal=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting tgtd");
        let tgtd = Tgtd { control, child, port, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tgtd.try_admin(&["--op", "show", "--mode", "system"]) {
            assert!(Instant::now() < deadline, "tgtd did not answer: {}", tgtd.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        tgtd
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn try_admin(&self, args: &[&str]) -> bool {
        command("tgtadm")
            .args(["-C", &self.control])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    pub(crate) fn admin(&self, args: &[&str]) -> String {
        let out = command("tgtadm")
            .args(["-C", &self.control, "--lld", "iscsi"])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "tgtadm {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        text
    }

    fn target(&self, tid: &str, iqn: &str, lun_file: &Path) {
        self.admin(&["--op", "new", "--mode", "target", "--tid", tid, "-T", iqn]);
        let file = lun_file.display().to_string();
        let lun = ["--op", "new", "--mode", "logicalunit", "--tid", tid, "--lun", "1"];
        self.admin(&[&lun[..], &["-b", &file]].concat());
    }

    fn account(&self, tid: &str, user: &str, password: &str, outgoing: bool) {
        self.admin(&["--op", "new", "--mode", "account", "--user", user, "--password", password]);
        let bind = ["--op", "bind", "--mode", "account", "--tid", tid, "--user", user];
        let out: &[&str] = if outgoing { &["--outgoing"] } else { &[] };
        self.admin(&[&bind[..], out].concat());
    }

    pub(crate) fn portal(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn signal(&self, signal: &str) {
        // setpriv execs tgtd: the child is tgtd itself.
        let pid = self.child.id().to_string();
        let status = command("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for Tgtd {
    fn drop(&mut self) {
        self.signal("-CONT");
        for tid in ["1", "2"] {
            let delete = ["--op", "delete", "--mode", "target", "--tid", tid, "--force"];
            let _ = self.try_admin(&[&["--lld", "iscsi"][..], &delete].concat());
        }
        let _ = self.try_admin(&["--op", "delete", "--mode", "system"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for suffix in ["", ".lock"] {
            let _ = std::fs::remove_file(format!("{SOCKET_DIR}/socket.{}{suffix}", self.control));
        }
    }
}

/// A management socket number no other tgtd uses (above the range tests/e2e takes).
fn free_control_number() -> u32 {
    // Tests of one process start their tgtd at once: each takes the next number of its own.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mine = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) * 97;
    let start = (std::process::id() + mine) % 800;
    (0..800)
        .map(|i| 1000 + (start + i) % 800)
        .find(|n| {
            !Path::new(&format!("{SOCKET_DIR}/socket.{n}")).exists()
                && !Path::new(&format!("{SOCKET_DIR}/socket.{n}.lock")).exists()
        })
        .expect("a free tgtd management socket number")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether tgtd can run here; the test is skipped (`crate::skip`, `BOOTVOL_REQUIRE_E2E`) when not.
pub(crate) fn tgtd_available() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let tools = ["tgtd", "tgtadm", "setpriv"].iter().all(|t| {
        command("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if root && tools {
        return true;
    }
    let why = if root { "tgtd, tgtadm or setpriv missing" } else { "not root (tgtd needs it)" };
    crate::skip::skip(crate::skip::E2E, why);
    false
}

fn account(user: &str, secret: &str) -> Option<Credentials> {
    Some(Credentials { user: user.into(), secret: secret.into() })
}

fn request(portal: &str) -> ProbeRequest {
    ProbeRequest {
        portals: vec![portal.to_owned()],
        target_iqn: CHAP_TARGET.into(),
        lun: 1,
        initiator_iqn: NODE.into(),
        chap: account("bfvuser", "bfvsecret12345"),
        mutual: account("tgtout", "outsecret1234"),
        timeout: Duration::from_secs(3),
    }
}

fn probe(request: &ProbeRequest) -> ProbeOutcome {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let outcome = runtime.block_on(bootvol_iscsi::probe(request));
    eprintln!("probe {:?}: {outcome}", request.portals);
    let shown = format!("{outcome} {outcome:?} {request:?}");
    for secret in ["bfvsecret12345", "outsecret1234", "wrongsecret99"] {
        assert!(!shown.contains(secret), "a secret shown: {shown}");
    }
    outcome
}

fn login_status(outcome: &ProbeOutcome) -> Option<(u8, u8)> {
    match outcome {
        ProbeOutcome::LoginFailed { status_class, status_detail, .. } => {
            Some((*status_class, *status_detail))
        }
        _ => None,
    }
}

pub(crate) fn setup(dir: &Path) -> (Tgtd, PathBuf) {
    let disk = dir.join("disk.img");
    let file = std::fs::File::create(&disk).unwrap();
    file.set_len(LUN_SIZE).unwrap();
    std::fs::write(dir.join("open.img"), vec![0x5a; 8 * 1024 * 1024]).unwrap();
    let tgtd = Tgtd::start(dir);
    tgtd.target("1", CHAP_TARGET, &disk);
    tgtd.account("1", "bfvuser", "bfvsecret12345", false);
    tgtd.account("1", "tgtout", "outsecret1234", true);
    tgtd.admin(&["--op", "bind", "--mode", "target", "--tid", "1", "--initiator-name", NODE]);
    tgtd.target("2", OPEN_TARGET, &dir.join("open.img"));
    tgtd.admin(&["--op", "bind", "--mode", "target", "--tid", "2", "-I", "ALL"]);
    (tgtd, disk)
}

#[test]
fn the_probe_logs_in_as_the_node_and_names_each_failure() {
    if !tgtd_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, disk) = setup(dir.path());
    let before = std::fs::read(&disk).unwrap();
    let portal = tgtd.portal();

    // Mutual CHAP, the node's initiator name: ok, with the LUN's size.
    let outcome = probe(&request(&portal));
    let expected =
        ProbeOutcome::Ok { portal: portal.clone(), lun: 1, size_bytes: LUN_SIZE, block_size: 512 };
    assert_eq!(outcome, expected, "{}", tgtd.log_text());
    assert!(outcome.to_string().starts_with("login ok, LUN 1 24 MiB"), "{outcome}");
    // One-way CHAP only.
    let mut one_way = request(&portal);
    one_way.mutual = None;
    assert!(probe(&one_way).is_ok());

    // A wrong CHAP secret: the target's authentication failure.
    let mut wrong = request(&portal);
    wrong.chap = account("bfvuser", "wrongsecret99");
    let outcome = probe(&wrong);
    assert_eq!(login_status(&outcome), Some((2, 1)), "{outcome:?}");
    assert!(outcome.to_string().starts_with("CHAP rejected: authentication failure (0x0201)"));
    // No CHAP at all against a target that wants it.
    let mut none = request(&portal);
    (none.chap, none.mutual) = (None, None);
    assert_eq!(login_status(&probe(&none)), Some((2, 1)));

    // A wrong mutual secret: the target's answer does not match it.
    let mut wrong = request(&portal);
    wrong.mutual = account("tgtout", "wrongsecret99");
    let outcome = probe(&wrong);
    assert!(
        matches!(&outcome, ProbeOutcome::MutualChapFailed { detail, .. } if detail.contains("CHAP_R")),
        "{outcome:?}"
    );
    // The wrong mutual user.
    let mut wrong = request(&portal);
    wrong.mutual = account("someoneelse", "outsecret1234");
    assert!(matches!(probe(&wrong), ProbeOutcome::MutualChapFailed { .. }));

    // An initiator the ACL leaves out: tgtd answers "target not found".
    let mut stranger = request(&portal);
    stranger.initiator_iqn = "iqn.2026-12.test.bootvol.node:stranger".into();
    let outcome = probe(&stranger);
    assert_eq!(login_status(&outcome), Some((2, 3)), "{outcome:?}");
    assert!(outcome.to_string().contains("iqn.2026-12.test.bootvol.node:stranger not in its ACL"));

    // A target that does not exist.
    let mut missing = request(&portal);
    missing.target_iqn = "iqn.2026-12.test.bootvol:nothing-here".into();
    let outcome = probe(&missing);
    assert_eq!(login_status(&outcome), Some((2, 3)), "{outcome:?}");
    assert!(
        outcome.to_string().starts_with("target iqn.2026-12.test.bootvol:nothing-here not found")
    );

    // A LUN the target does not have: it names those it has (tgt's controller is LUN 0).
    let mut lun = request(&portal);
    lun.lun = 3;
    let outcome = probe(&lun);
    assert_eq!(
        outcome,
        ProbeOutcome::LunMissing { portal: portal.clone(), lun: 3, luns: vec![0, 1] }
    );
    assert!(outcome.to_string().starts_with("LUN 3 missing (target has 0, 1)"));

    the_open_target_and_the_portals(&tgtd);

    // Every probe logged out: no session is left, and nothing was written.
    let sessions = tgtd.admin(&["--op", "show", "--mode", "conn", "--tid", "1"]);
    assert!(!sessions.contains("Connection"), "sessions left: {sessions}");
    assert!(std::fs::read(&disk).unwrap() == before, "the probe changed the LUN");
}

fn the_open_target_and_the_portals(tgtd: &Tgtd) {
    let portal = tgtd.portal();
    // A target without CHAP: ok without credentials, and ok when CHAP is offered but not asked.
    let mut open = request(&portal);
    open.target_iqn = OPEN_TARGET.into();
    (open.chap, open.mutual) = (None, None);
    let outcome = probe(&open);
    assert!(matches!(outcome, ProbeOutcome::Ok { size_bytes: 8388608, .. }), "{outcome:?}");
    open.chap = account("bfvuser", "bfvsecret12345");
    assert!(probe(&open).is_ok());
    // With mutual CHAP configured the node would refuse a target that never authenticates.
    open.mutual = account("tgtout", "outsecret1234");
    assert!(matches!(probe(&open), ProbeOutcome::MutualChapFailed { .. }));

    // A portal that refuses; the first ok of several; else the last failure.
    let closed = format!("127.0.0.1:{}", free_port());
    let outcome = probe(&request(&closed));
    assert_eq!(outcome, ProbeOutcome::PortalRefused { portal: closed.clone() });
    assert_eq!(outcome.to_string(), format!("portal {closed} refused the connection"));
    let mut several = request(&closed);
    several.portals.push(portal.clone());
    assert!(matches!(probe(&several), ProbeOutcome::Ok { portal: p, .. } if p == portal));
    let closed2 = format!("127.0.0.1:{}", free_port());
    several.portals = vec![portal.clone(), closed2.clone()];
    several.target_iqn = "iqn.2026-12.test.bootvol:nothing-here".into();
    assert_eq!(probe(&several), ProbeOutcome::PortalRefused { portal: closed2 });

    // A target that accepts the connection but never answers: timed out.
    tgtd.signal("-STOP");
    let mut slow = request(&portal);
    slow.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let outcome = probe(&slow);
    tgtd.signal("-CONT");
    assert_eq!(
        outcome,
        ProbeOutcome::PortalTimedOut { portal: portal.clone(), after: slow.timeout }
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(outcome.to_string(), format!("portal {portal} timed out after 0.5 s"));
}
