//! Boot windows: the only times a node's secret-carrying script goes out, and who took it.
//!
//! A window opens when bootvol powers a node on, reboots it or starts its deploy (the
//! conductor says so: [`BootWindows::open`]), or, with `[boot] secret_window = "boot"`, when
//! bootvol sees the node start a boot ([`BootWindows::sign`]: its ProxyDHCP answered the node's
//! MAC, or the node fetched the first file of its boot chain from an address whose neighbour
//! entry is its MAC). It lasts `[boot] secret_window_seconds` from its opening; a sign while a
//! window is open neither extends nor resets it, bootvol's own power-on or reboot does (a new
//! boot starts).
//!
//! Inside a window the first client that is the node (its neighbour entry names one of the
//! node's MACs) claims the script, and may fetch it again; any other client that asks is
//! refused and is a *conflict* (two hosts claim the node). A window opened by a sign is not
//! taken on trust, as signs can be forged: a node its BMC reports off is not booting, and when
//! the client's address is not the one the node last used, the caller must ask whether the
//! node's MAC still answers at that address ([`Admission::Probe`]) before it claims
//! ([`BootWindows::claim`]). Outside a window a script with a secret is refused exactly like
//! an unknown MAC.
//!
//! The node's last address moves only on proof: when a window ends (it expires, or a new one
//! replaces it) with a claimant, the claimant's address becomes the node's last one, if bootvol
//! opened the window itself (its first claimant is served on trust) or no one contested it. A
//! request from an address, or the claim of a sign's window later contested (a second claimant,
//! or the caller's report that the node's MAC still answers elsewhere:
//! [`BootWindows::contested`]) moves nothing, so a host that took a window a forged sign opened
//! cannot make its own address the one the node's next boot is checked against.
//!
//! Pure state and decisions, kept in memory (a restart closes every window): it knows nothing
//! of sockets, the neighbour table or HTTP; `script_access` asks it and does the I/O.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::SecretWindow;
use crate::model::MacAddr;

/// Nodes remembered at most (windows and last addresses); past it the oldest are forgotten.
const MAX_NODES: usize = 200_000;

/// A client as the boot listeners see it: its address and the MAC its neighbour entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    pub address: IpAddr,
    pub mac: MacAddr,
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.address, self.mac)
    }
}

/// What opened a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// bootvol's own action: `power on`, `reboot`, `deploy`.
    Conductor(&'static str),
    /// A sign that the node started a boot: `dhcp`, `tftp`, `http`.
    Sign(&'static str),
}

/// Why a request inside a window is a conflict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// Another client took the script in this window.
    Claimed { first: Client },
    /// The window was opened by a sign, and the node's BMC reports it off.
    PoweredOff,
    /// The window was opened by a sign, and the node's MAC still answers at its last address.
    StillAnswers { address: IpAddr },
}

impl Conflict {
    /// One line for logs, events and `last_error`.
    pub fn describe(&self, second: &Client) -> String {
        match self {
            Conflict::Claimed { first } => format!(
                "{first} took this node's secret script in this boot window; {second} asked for it too"
            ),
            Conflict::PoweredOff => format!(
                "{second} claims this node's MAC, but its BMC reports it off and bootvol did not power it on"
            ),
            Conflict::StillAnswers { address } => format!(
                "{second} claims this node's MAC, which still answers at {address}, the address the node last used"
            ),
        }
    }

    /// The first client, when there is one (events name both).
    pub fn first(&self) -> Option<Client> {
        match self {
            Conflict::Claimed { first } => Some(*first),
            _ => None,
        }
    }
}

/// The answer to a client that is the node, asking inside or outside a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Serve it: it claimed the script now, or it is the client that did.
    Serve,
    /// No window is open: refused like an unknown MAC.
    Closed,
    /// Refused, and reported as a conflict.
    Conflict(Conflict),
    /// Ask whether the node's MAC still answers at another address (`last`, the node's last
    /// one, when known; else those the neighbour table names for it): if it does, a conflict
    /// ([`Conflict::StillAnswers`]); if not, [`BootWindows::claim`].
    Probe { last: Option<IpAddr> },
}

#[derive(Debug, Clone)]
struct Window {
    opened: Instant,
    opener: Opener,
    claimant: Option<Client>,
    /// For a window the conductor opened: its Unix time, as recorded on the node.
    stamp: Option<u64>,
    /// A conflict was raised in it: the claimant of a sign's window is then no proof of the
    /// node's address.
    contested: bool,
}

impl Window {
    fn new(opened: Instant, opener: Opener, stamp: Option<u64>) -> Window {
        Window { opened, opener, claimant: None, stamp, contested: false }
    }
}

#[derive(Debug, Clone, Default)]
struct NodeState {
    window: Option<Window>,
    /// The address of the claimant of the node's last window that ended uncontested.
    last_address: Option<IpAddr>,
    touched: Option<Instant>,
}

/// Every node's window, shared by the conductor (which opens them) and the boot listeners.
#[derive(Debug)]
pub struct BootWindows {
    policy: SecretWindow,
    length: Duration,
    nodes: Mutex<HashMap<String, NodeState>>,
}

impl BootWindows {
    pub fn new(policy: SecretWindow, length: Duration) -> BootWindows {
        BootWindows { policy, length, nodes: Mutex::default() }
    }

    fn with_nodes<T>(&self, f: impl FnOnce(&mut HashMap<String, NodeState>) -> T) -> T {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut nodes)
    }

    fn node<'a>(
        nodes: &'a mut HashMap<String, NodeState>,
        uuid: &str,
        now: Instant,
    ) -> &'a mut NodeState {
        if nodes.len() >= MAX_NODES && !nodes.contains_key(uuid) {
            // Forget the node touched longest ago (rare: more nodes than any rack has).
            if let Some(oldest) =
                nodes.iter().min_by_key(|(_, s)| s.touched).map(|(uuid, _)| uuid.clone())
            {
                nodes.remove(&oldest);
            }
        }
        let state = nodes.entry(uuid.to_owned()).or_default();
        state.touched = Some(now);
        state
    }

    /// Accounts for the end of the node's window, if it has ended by `now` (or `replaced`: a
    /// new window takes its place): an uncontested claimant's address becomes the last one.
    /// Idempotent: an ended window no longer changes, so settling it again sets the same.
    fn settle(&self, state: &mut NodeState, now: Instant, replaced: bool) {
        let Some(window) = state.window.as_ref() else { return };
        if !replaced && self.live(window, now) {
            return;
        }
        // bootvol's own window serves its first claimant on trust, and that is the node; a
        // sign's window proves its claimant only if no one contested it.
        let proven = !window.contested || matches!(window.opener, Opener::Conductor(_));
        if let Some(claimant) = window.claimant.filter(|_| proven) {
            state.last_address = Some(claimant.address);
        }
    }

    /// A new window for the node, the one before it settled.
    fn replace(&self, state: &mut NodeState, window: Window, now: Instant) {
        self.settle(state, now, true);
        state.window = Some(window);
    }

    /// A conflict was raised over the node's window by the caller (its MAC still answers at its
    /// last address): the window's claimant, if any, does not become its last address.
    pub fn contested(&self, uuid: &str, now: Instant) {
        self.with_nodes(|nodes| {
            if let Some(window) =
                nodes.get_mut(uuid).and_then(|s| s.window.as_mut()).filter(|w| self.live(w, now))
            {
                window.contested = true;
            }
        });
    }

    /// bootvol powers the node on, reboots it or deploys it: a new boot, a new window.
    /// `stamp`: the Unix time the conductor records on the node for it (`boot_window` in its
    /// `driver_internal_info`), so that a process that only sees the record agrees
    /// ([`BootWindows::follow`]).
    pub fn open(&self, uuid: &str, what: &'static str, stamp: u64, now: Instant) {
        self.with_nodes(|nodes| {
            let window = Window::new(now, Opener::Conductor(what), Some(stamp));
            self.replace(Self::node(nodes, uuid, now), window, now);
        });
    }

    /// The node's record says the conductor opened a window at Unix time `stamp` (perhaps in
    /// another process: the CLI, another appliance on the same database): the window is that
    /// one, unless it is already.
    pub fn follow(&self, uuid: &str, stamp: u64, now: Instant, now_unix: u64) {
        let age = Duration::from_secs(now_unix.saturating_sub(stamp));
        if age >= self.length {
            return;
        }
        self.with_nodes(|nodes| {
            let state = Self::node(nodes, uuid, now);
            if state.window.as_ref().is_some_and(|w| w.stamp.is_some_and(|s| s >= stamp)) {
                return;
            }
            let opened = now.checked_sub(age).unwrap_or(now);
            self.replace(state, Window::new(opened, Opener::Conductor("power"), Some(stamp)), now);
        });
    }

    /// bootvol's power action failed: the window it opened for it closes (one a sign opened
    /// stays).
    pub fn close(&self, uuid: &str) {
        self.with_nodes(|nodes| {
            if let Some(state) = nodes.get_mut(uuid)
                && state.window.as_ref().is_some_and(|w| matches!(w.opener, Opener::Conductor(_)))
            {
                state.window = None;
            }
        });
    }

    /// A sign that the node started a boot: opens a window unless one is open, under
    /// `secret_window = "boot"`. Answers whether it opened one.
    pub fn sign(&self, uuid: &str, via: &'static str, now: Instant) -> bool {
        if self.policy != SecretWindow::Boot {
            return false;
        }
        self.with_nodes(|nodes| {
            let state = Self::node(nodes, uuid, now);
            if state.window.as_ref().is_some_and(|w| now.duration_since(w.opened) < self.length) {
                return false;
            }
            self.replace(state, Window::new(now, Opener::Sign(via), None), now);
            true
        })
    }

    /// Whether a window is open for the node (the deploy token is handed out only then).
    pub fn is_open(&self, uuid: &str, now: Instant) -> bool {
        self.with_nodes(|nodes| {
            nodes.get(uuid).and_then(|s| s.window.as_ref()).is_some_and(|w| self.live(w, now))
        })
    }

    fn live(&self, window: &Window, now: Instant) -> bool {
        now.duration_since(window.opened) < self.length
    }

    /// What `client` (which is the node, by its neighbour entry) gets for the node's secret
    /// script. `powered_off`: the node's BMC reports it off.
    pub fn admit(&self, uuid: &str, client: Client, powered_off: bool, now: Instant) -> Admission {
        self.with_nodes(|nodes| {
            let Some(state) = nodes.get_mut(uuid) else { return Admission::Closed };
            self.settle(state, now, false);
            let NodeState { window, last_address, touched } = state;
            let Some(window) = window.as_mut().filter(|w| self.live(w, now)) else {
                return Admission::Closed;
            };
            if let Some(refused) = Self::claimed(window, client) {
                return refused;
            }
            if let Opener::Sign(_) = window.opener {
                if powered_off {
                    window.contested = true;
                    return Admission::Conflict(Conflict::PoweredOff);
                }
                if *last_address != Some(client.address) {
                    return Admission::Probe { last: *last_address };
                }
            }
            Self::take(window, touched, client, now)
        })
    }

    /// Claims the script for `client` after a [`Admission::Probe`] found nobody at the node's
    /// last address: serves it, unless another client claimed it meanwhile or the window closed.
    pub fn claim(&self, uuid: &str, client: Client, now: Instant) -> Admission {
        self.with_nodes(|nodes| {
            let Some(state) = nodes.get_mut(uuid) else { return Admission::Closed };
            self.settle(state, now, false);
            let NodeState { window, touched, .. } = state;
            let Some(window) = window.as_mut().filter(|w| self.live(w, now)) else {
                return Admission::Closed;
            };
            match Self::claimed(window, client) {
                Some(answer) => answer,
                None => Self::take(window, touched, client, now),
            }
        })
    }

    /// What a window already claimed answers `client`: served again when it is the claimant,
    /// a conflict (the window contested) when not; `None` when no one has claimed it.
    fn claimed(window: &mut Window, client: Client) -> Option<Admission> {
        let first = window.claimant?;
        if first == client {
            return Some(Admission::Serve);
        }
        window.contested = true;
        Some(Admission::Conflict(Conflict::Claimed { first }))
    }

    /// `client` claims the window; its address becomes the node's last one only when the
    /// window ends uncontested ([`BootWindows::settle`]).
    fn take(
        window: &mut Window,
        touched: &mut Option<Instant>,
        client: Client,
        now: Instant,
    ) -> Admission {
        window.claimant = Some(client);
        *touched = Some(now);
        Admission::Serve
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LENGTH: Duration = Duration::from_secs(300);

    fn client(address: &str, mac: u8) -> Client {
        Client { address: address.parse().unwrap(), mac: MacAddr([0x52, 0x54, 0, 0, 0, mac]) }
    }

    #[test]
    fn no_window_no_secret() {
        let windows = BootWindows::new(SecretWindow::Boot, LENGTH);
        assert_eq!(
            windows.admit("n1", client("10.0.0.2", 1), false, Instant::now()),
            Admission::Closed
        );
    }

    #[test]
    fn the_first_claimant_gets_it_again_and_a_second_is_a_conflict() {
        let windows = BootWindows::new(SecretWindow::Power, LENGTH);
        let t0 = Instant::now();
        windows.open("n1", "reboot", 1_000, t0);
        let node = client("10.0.0.2", 1);
        assert_eq!(windows.admit("n1", node, true, t0), Admission::Serve, "bootvol powered it on");
        assert_eq!(windows.admit("n1", node, false, t0 + Duration::from_secs(5)), Admission::Serve);
        // The same MAC from another address, or another of the node's MACs: a second claimant.
        for thief in [client("10.0.0.3", 1), client("10.0.0.2", 2)] {
            assert_eq!(
                windows.admit("n1", thief, false, t0 + Duration::from_secs(6)),
                Admission::Conflict(Conflict::Claimed { first: node })
            );
        }
        // After the window: closed for everyone, the claimant too.
        assert_eq!(windows.admit("n1", node, false, t0 + LENGTH), Admission::Closed);
        // A new reboot: a new window, a new first claimant.
        windows.open("n1", "reboot", 1_300, t0 + LENGTH);
        assert_eq!(
            windows.admit("n1", client("10.0.0.9", 1), false, t0 + LENGTH),
            Admission::Serve
        );
    }

    #[test]
    fn signs_open_windows_only_under_boot_and_never_extend_one() {
        let strict = BootWindows::new(SecretWindow::Power, LENGTH);
        let t0 = Instant::now();
        assert!(!strict.sign("n1", "dhcp", t0));
        assert_eq!(strict.admit("n1", client("10.0.0.2", 1), false, t0), Admission::Closed);
        let windows = BootWindows::new(SecretWindow::Boot, LENGTH);
        assert!(windows.sign("n1", "dhcp", t0));
        assert!(!windows.sign("n1", "tftp", t0 + Duration::from_secs(200)), "already open");
        assert!(windows.is_open("n1", t0 + Duration::from_secs(299)));
        assert!(!windows.is_open("n1", t0 + LENGTH), "not extended by the second sign");
        assert!(windows.sign("n1", "http", t0 + LENGTH));
    }

    #[test]
    fn a_sign_is_not_taken_on_trust() {
        let windows = BootWindows::new(SecretWindow::Boot, LENGTH);
        let t0 = Instant::now();
        // Powered off by its BMC, and bootvol did not power it on: a forged sign.
        windows.sign("n0", "dhcp", t0);
        assert_eq!(
            windows.admit("n0", client("10.0.0.2", 1), true, t0),
            Admission::Conflict(Conflict::PoweredOff)
        );
        windows.sign("n1", "dhcp", t0);
        // Up, never served: the caller looks for the node's MAC at other addresses first.
        let node = client("10.0.0.2", 1);
        assert_eq!(windows.admit("n1", node, false, t0), Admission::Probe { last: None });
        assert_eq!(windows.claim("n1", node, t0), Admission::Serve);
        // The next window: a client at another address must wait for the probe of .2.
        let later = t0 + LENGTH;
        windows.sign("n1", "dhcp", later);
        let other = client("10.0.0.7", 1);
        let probe = windows.admit("n1", other, false, later);
        assert_eq!(probe, Admission::Probe { last: Some(node.address) });
        // Nobody answered there: the claim goes through, once.
        assert_eq!(windows.claim("n1", other, later), Admission::Serve);
        assert_eq!(
            windows.claim("n1", node, later),
            Admission::Conflict(Conflict::Claimed { first: other })
        );
        // That sign's window was contested: .7 did not become the node's last address, .2
        // stays it and needs no probe.
        windows.open("n1", "power on", 1_600, later + LENGTH);
        windows.close("n1");
        assert_eq!(windows.admit("n1", other, false, later + LENGTH), Admission::Closed);
        windows.sign("n1", "http", later + LENGTH);
        assert_eq!(
            windows.admit("n1", other, false, later + LENGTH),
            Admission::Probe { last: Some(node.address) }
        );
        assert_eq!(windows.admit("n1", node, false, later + LENGTH), Admission::Serve);
    }

    #[test]
    fn the_last_address_moves_only_when_a_window_ends_uncontested() {
        let windows = BootWindows::new(SecretWindow::Boot, LENGTH);
        let second = Duration::from_secs(1);
        let (node, thief) = (client("10.0.0.2", 1), client("10.0.0.9", 1));
        // A first boot, claimed by the node, uncontested: at its end .2 is the last address.
        let t0 = Instant::now();
        windows.sign("n1", "dhcp", t0);
        assert_eq!(windows.admit("n1", node, false, t0), Admission::Probe { last: None });
        assert_eq!(windows.claim("n1", node, t0), Admission::Serve);
        let t1 = t0 + LENGTH;
        windows.sign("n1", "dhcp", t1);
        assert_eq!(windows.admit("n1", node, false, t1), Admission::Serve, "no probe of itself");
        // A thief claims a window (the probe of .2 found nobody: the node was rebooting), then
        // the node asks in the same window: a conflict, so the thief's address proves nothing.
        let t2 = t1 + LENGTH;
        windows.sign("n1", "tftp", t2);
        assert_eq!(
            windows.admit("n1", thief, false, t2),
            Admission::Probe { last: Some(node.address) }
        );
        assert_eq!(windows.claim("n1", thief, t2), Admission::Serve);
        assert_eq!(
            windows.admit("n1", node, false, t2 + second),
            Admission::Conflict(Conflict::Claimed { first: thief })
        );
        let t3 = t2 + LENGTH;
        windows.sign("n1", "http", t3);
        assert_eq!(
            windows.admit("n1", thief, false, t3),
            Admission::Probe { last: Some(node.address) }
        );
        // A claim the caller contests (the node's MAC answered elsewhere after it) proves
        // nothing either; nor does a window replaced before it ended.
        let t4 = t3 + LENGTH;
        windows.sign("n1", "dhcp", t4);
        assert_eq!(windows.claim("n1", thief, t4), Admission::Serve);
        windows.contested("n1", t4 + second);
        windows.open("n1", "reboot", 2_000, t4 + 2 * second);
        assert_eq!(windows.admit("n1", node, false, t4 + 2 * second), Admission::Serve);
        windows.close("n1");
        windows.sign("n1", "dhcp", t4 + LENGTH);
        assert_eq!(
            windows.admit("n1", thief, false, t4 + LENGTH),
            Admission::Probe { last: Some(node.address) }
        );
        // The reboot's window, claimed by the node and replaced uncontested, kept .2; a window
        // the thief claims uncontested (the node is gone) moves it, at its end only.
        assert_eq!(windows.claim("n1", thief, t4 + LENGTH), Admission::Serve);
        let t5 = t4 + 2 * LENGTH;
        windows.sign("n1", "dhcp", t5);
        assert_eq!(windows.admit("n1", thief, false, t5), Admission::Serve);
        assert_eq!(
            windows.admit("n1", node, false, t5),
            Admission::Conflict(Conflict::Claimed { first: thief })
        );
        // bootvol powers the node on: its window's first claimant is the node, on trust, and
        // a thief's conflict in it does not undo that.
        let t6 = t5 + LENGTH;
        windows.open("n1", "power on", 3_000, t6);
        assert_eq!(windows.admit("n1", node, false, t6), Admission::Serve);
        assert_eq!(
            windows.admit("n1", thief, false, t6 + second),
            Admission::Conflict(Conflict::Claimed { first: node })
        );
        windows.sign("n1", "dhcp", t6 + LENGTH);
        assert_eq!(windows.admit("n1", node, false, t6 + LENGTH), Admission::Serve);
    }

    #[test]
    fn a_window_recorded_on_the_node_is_followed_once() {
        let windows = BootWindows::new(SecretWindow::Power, LENGTH);
        let t0 = Instant::now() + Duration::from_secs(1000);
        // Opened 100 s ago by another process: open for 200 s more.
        windows.follow("n1", 900, t0, 1_000);
        assert!(windows.is_open("n1", t0 + Duration::from_secs(199)));
        assert!(!windows.is_open("n1", t0 + Duration::from_secs(200)));
        let node = client("10.0.0.2", 1);
        assert_eq!(windows.admit("n1", node, true, t0), Admission::Serve);
        // Seen again: the same window, its claimant kept.
        windows.follow("n1", 900, t0 + Duration::from_secs(1), 1_001);
        assert_eq!(
            windows.admit("n1", client("10.0.0.3", 1), false, t0 + Duration::from_secs(1)),
            Admission::Conflict(Conflict::Claimed { first: node })
        );
        // A later power-on: a new window.
        windows.follow("n1", 1_010, t0 + Duration::from_secs(10), 1_010);
        assert_eq!(
            windows.admit("n1", client("10.0.0.3", 1), false, t0 + Duration::from_secs(10)),
            Admission::Serve
        );
        // Too old to matter.
        windows.follow("n2", 100, t0, 1_000);
        assert!(!windows.is_open("n2", t0));
    }

    #[test]
    fn conflicts_say_who() {
        let first = client("10.0.0.2", 1);
        let second = client("10.0.0.3", 1);
        let text = Conflict::Claimed { first }.describe(&second);
        assert!(
            text.contains("10.0.0.2 (52:54:00:00:00:01)") && text.contains("10.0.0.3"),
            "{text}"
        );
        let text = Conflict::StillAnswers { address: first.address }.describe(&second);
        assert!(text.contains("still answers at 10.0.0.2"), "{text}");
    }
}
