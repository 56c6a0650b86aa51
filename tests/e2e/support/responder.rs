//! A ProxyDHCP stand-in for negative controls: it answers exactly as bootvol's own decision
//! (`bootvol_edge::dhcp::proxy::decide`, with the default `[dhcp]` settings) would, then lets the test
//! change the reply before it is sent. It runs on a thread of its own inside a network
//! namespace, on `0.0.0.0:67` bound to one interface (as bootvol's sockets are), until dropped.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use bootvol_edge::dhcp::packet::Packet;
use bootvol_edge::dhcp::proxy::{self, Decision, Destination, Facts, Port, Settings};
use nix::sys::socket::{setsockopt, sockopt};

/// One request answered, and the reply as sent (after the change).
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    pub(crate) request: Packet,
    pub(crate) reply: Packet,
}

/// A running responder.
#[derive(Debug)]
pub(crate) struct Responder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
}

impl Responder {
    /// Answers on `interface` in the namespace `netns` as bootvol would with `server` as its
    /// address and `http_base` as `[http] public_url`, passing each reply through `change`.
    pub(crate) fn start(
        netns: &str,
        interface: &str,
        server: Ipv4Addr,
        http_base: &str,
        change: fn(&mut Packet),
    ) -> Responder {
        let stop = Arc::new(AtomicBool::new(false));
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let (ready, bound) = mpsc::channel::<Result<(), String>>();
        let thread = std::thread::spawn({
            let (netns, interface, http_base) =
                (netns.to_owned(), interface.to_owned(), http_base.to_owned());
            let (stop, exchanges) = (Arc::clone(&stop), Arc::clone(&exchanges));
            move || {
                let socket = match bind(&netns, &interface) {
                    Ok(socket) => {
                        let _ = ready.send(Ok(()));
                        socket
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let facts = Facts {
                    server,
                    http_base: &http_base,
                    has_arm64: false,
                    known: true,
                    port: Port::Dhcp,
                    source: Ipv4Addr::UNSPECIFIED,
                    relays: &[],
                };
                let settings = Settings { efi_discovery_bypass: true, known_only: false };
                let mut buf = [0u8; 1500];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = socket.recv_from(&mut buf) else { continue };
                    let Ok(request) = Packet::parse(&buf[..n]) else { continue };
                    let source = match from.ip() {
                        std::net::IpAddr::V4(ip) => ip,
                        std::net::IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
                    };
                    let facts = Facts { source, ..facts };
                    let Decision::Reply(reply) = proxy::decide(&request, settings, &facts) else {
                        continue;
                    };
                    let mut packet = reply.packet;
                    change(&mut packet);
                    let to = match reply.to {
                        Destination::Relay(relay) => SocketAddr::from((relay, 67)),
                        Destination::Sender => from,
                        Destination::Broadcast => SocketAddr::from((Ipv4Addr::BROADCAST, 68)),
                    };
                    if let Err(e) = socket.send_to(&packet.encode(), to) {
                        eprintln!("responder: sending to {to}: {e}");
                        continue;
                    }
                    exchanges.lock().unwrap().push(Exchange { request, reply: packet });
                }
            }
        });
        match bound.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("responder on {interface} in {netns}: {e}"),
            Err(_) => panic!("responder thread died before binding"),
        }
        Responder { stop, thread: Some(thread), exchanges }
    }

    /// Every request answered so far.
    pub(crate) fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().unwrap().clone()
    }
}

/// `0.0.0.0:67` in `netns`, bound to `interface`, allowed to broadcast. Switches this thread
/// (only) into the namespace.
fn bind(netns: &str, interface: &str) -> Result<UdpSocket, String> {
    let ns = File::open(format!("/run/netns/{netns}")).map_err(|e| e.to_string())?;
    nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("setns: {e}"))?;
    let socket = UdpSocket::bind("0.0.0.0:67").map_err(|e| format!("bind 0.0.0.0:67: {e}"))?;
    setsockopt(&socket, sockopt::Broadcast, &true).map_err(|e| e.to_string())?;
    setsockopt(&socket, sockopt::BindToDevice, &interface.into())
        .map_err(|e| format!("SO_BINDTODEVICE {interface}: {e}"))?;
    socket.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| e.to_string())?;
    Ok(socket)
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
