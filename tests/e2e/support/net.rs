//! Ports on the host, and private networks: a network namespace with a tap for the VM and a
//! DHCP server (dnsmasq, DHCP only) that tells firmware PXE and iPXE apart.

use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::process::{Daemon, command, command_in, run, run_quiet};
use super::tail;

/// A TCP port nothing listens on at 127.0.0.1 right now.
pub(crate) fn free_tcp_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding 127.0.0.1:0/tcp");
    listener.local_addr().unwrap().port()
}

/// A UDP port nothing is bound to at 127.0.0.1 right now.
pub(crate) fn free_udp_port() -> u16 {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding 127.0.0.1:0/udp");
    socket.local_addr().unwrap().port()
}

/// The server's address on every private network (each lives in its own namespace).
pub(crate) const SERVER_IP: &str = "10.77.0.1";
/// The name of the VM's tap inside the namespace.
pub(crate) const TAP: &str = "bve2e0";

static NETNS_SEQ: AtomicU32 = AtomicU32::new(0);

/// A network namespace with a tap (`TAP`, address `SERVER_IP`/24 and an IPv6 ULA) for one VM.
/// Everything started in it must be dropped before it; dropping it deletes the namespace.
#[derive(Debug)]
pub(crate) struct Netns {
    name: String,
}

impl Netns {
    pub(crate) fn new() -> Netns {
        remove_stale_namespaces();
        let name =
            format!("bve2e-{}-{}", std::process::id(), NETNS_SEQ.fetch_add(1, Ordering::Relaxed));
        run(command("ip").args(["netns", "add", &name]));
        // From here on, Drop deletes the namespace even if the setup below fails.
        let netns = Netns { name };
        let ns = Some(netns.name.as_str());
        run(command_in(ns, "ip").args(["link", "set", "lo", "up"]));
        run(command_in(ns, "ip").args(["tuntap", "add", "dev", TAP, "mode", "tap"]));
        run(command_in(ns, "ip").args(["addr", "add", &format!("{SERVER_IP}/24"), "dev", TAP]));
        run(command_in(ns, "ip").args(["-6", "addr", "add", "fd77::1/64", "dev", TAP, "nodad"]));
        run(command_in(ns, "ip").args(["link", "set", TAP, "up"]));
        netns
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Waits until something listens on `port` (`tcp` or `udp`) inside the namespace.
    pub(crate) fn wait_listening(&self, proto: &str, port: u16, daemon: &mut Daemon) {
        let flag = if proto == "udp" { "-Hlun" } else { "-Hltn" };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            daemon.assert_running();
            let out = run(command_in(Some(&self.name), "ss").args([flag]));
            if out.lines().any(|line| {
                line.split_whitespace().nth(3).is_some_and(|a| a.ends_with(&format!(":{port}")))
            }) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nothing listens on {proto} port {port} in {}\n{}",
                self.name,
                tail(daemon.log(), 3000)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Deletes namespaces an interrupted run of these tests left behind: `bve2e-<pid>-<n>` whose
/// test process is gone.
fn remove_stale_namespaces() {
    let Ok(listed) = std::fs::read_dir("/run/netns") else { return };
    for entry in listed.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("bve2e-").and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            eprintln!("deleting network namespace {name}, left by an interrupted run");
            run_quiet(command("ip").args(["netns", "del", &name]));
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !run_quiet(command("ip").args(["netns", "del", &self.name])) {
            eprintln!("could not delete network namespace {}", self.name);
        }
    }
}

/// An address of the host's own (`ip`/32 on the loopback link, labelled `lo:bv<pid>`), for a
/// server that both the host and a VM on QEMU's user network must reach at one address: the
/// VM's connections to it leave through QEMU's sockets on the host. Dropping it removes it.
#[derive(Debug)]
pub(crate) struct HostAddress {
    pub(crate) ip: &'static str,
}

impl HostAddress {
    /// `ip` should be from a documentation range (TEST-NET-2, 198.51.100.0/24) the host does
    /// not route anywhere.
    pub(crate) fn add(ip: &'static str) -> HostAddress {
        remove_stale_addresses();
        let label = format!("lo:bv{}", std::process::id());
        let cidr = format!("{ip}/32");
        run(command("ip").args(["addr", "add", &cidr, "dev", "lo", "label", &label]));
        HostAddress { ip }
    }
}

/// Removes the `lo:bv<pid>` addresses whose process is gone (an interrupted run).
fn remove_stale_addresses() {
    let listed = run(command("ip").args(["-o", "-4", "addr", "show", "dev", "lo"]));
    for line in listed.lines() {
        // "1: lo    inet 198.51.100.77/32 scope global lo:bv123\   valid_lft ..."
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "inet") else { continue };
        let Some(pid) = words.iter().find_map(|w| w.trim_end_matches('\\').strip_prefix("lo:bv"))
        else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            eprintln!("removing {} from lo, left by an interrupted run", words[at + 1]);
            run_quiet(command("ip").args(["addr", "del", words[at + 1], "dev", "lo"]));
        }
    }
}

impl Drop for HostAddress {
    fn drop(&mut self) {
        let cidr = format!("{}/32", self.ip);
        if !run_quiet(command("ip").args(["addr", "del", &cidr, "dev", "lo"])) {
            eprintln!("could not remove {cidr} from lo");
        }
    }
}

/// How the DHCP server answers.
#[derive(Debug, Clone)]
pub(crate) struct Dhcp {
    /// The boot file a client sending user-class `iPXE` gets (an HTTP URL).
    pub(crate) ipxe_bootfile: String,
    /// The boot file an x86-64 UEFI PXE client (not iPXE) gets from `SERVER_IP` by TFTP.
    pub(crate) efi_bootfile: Option<String>,
}

/// Starts dnsmasq in `netns`: DHCP and IPv6 router advertisements on `TAP`, no DNS, no TFTP.
/// The advertisements matter: without a router, iPXE's "Configuring" waits about 13 s for IPv6.
/// dnsmasq stays root (a change of user or group would also clear its parent-death signal).
pub(crate) fn start_dhcp(netns: &Netns, dir: &Path, dhcp: &Dhcp) -> Daemon {
    let mut text = format!(
        "port=0\n\
         user=root\n\
         group=root\n\
         interface={TAP}\n\
         bind-interfaces\n\
         dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h\n\
         dhcp-leasefile={leases}\n\
         log-dhcp\n\
         dhcp-userclass=set:ipxe,iPXE\n\
         dhcp-match=set:efi64,option:client-arch,7\n\
         dhcp-match=set:efi64,option:client-arch,9\n\
         dhcp-boot=tag:ipxe,{ipxe}\n\
         enable-ra\n\
         dhcp-range=::,constructor:{TAP},ra-only\n",
        leases = dir.join("dnsmasq.leases").display(),
        ipxe = dhcp.ipxe_bootfile,
    );
    if let Some(efi) = &dhcp.efi_bootfile {
        text.push_str(&format!("dhcp-boot=tag:!ipxe,tag:efi64,{efi},,{SERVER_IP}\n"));
    }
    run_dnsmasq(netns, dir, &text)
}

/// dnsmasq in `netns` with the configuration `text` (written to `dir/dnsmasq.conf`), in the
/// foreground and logging to `dir/dnsmasq.log`; returns once it listens on 67/udp.
pub(crate) fn run_dnsmasq(netns: &Netns, dir: &Path, text: &str) -> Daemon {
    let conf = dir.join("dnsmasq.conf");
    std::fs::write(&conf, text).unwrap();
    let mut cmd = command_in(Some(netns.name()), "dnsmasq");
    cmd.arg("--keep-in-foreground")
        .arg("--log-facility=-")
        .arg(format!("--conf-file={}", conf.display()))
        .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()));
    let mut daemon = Daemon::spawn("dnsmasq", cmd, &dir.join("dnsmasq.log"));
    netns.wait_listening("udp", 67, &mut daemon);
    daemon
}
