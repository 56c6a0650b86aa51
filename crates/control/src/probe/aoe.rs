//! The AoE probe's I/O: a raw Ethernet (AF_PACKET) socket on `[probe] aoe_interface`, a Query
//! Config broadcast for the target's shelf and slot, then an ATA IDENTIFY DEVICE to the MAC
//! that answered, for the size. The frames are `bootvol_core::probe::aoe`'s. It runs on a
//! blocking thread, bounded by the probe's timeout; it only reads (IDENTIFY writes nothing).
//!
//! The socket comes from `nix` (no `unsafe` here): bound with the interface's own link address
//! as `getifaddrs` reports it, so it receives every frame of that interface only; frames that
//! are not AoE responses to our tag are skipped.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    AddressFamily, LinkAddr, MsgFlags, SockFlag, SockProtocol, SockType, bind, recv, send,
    setsockopt, socket, sockopt,
};

use bootvol_core::probe::aoe::{self, Address, Response};
use bootvol_core::probe::{Status, size_text};

/// What the probe of `address` on `interface` found: a status and its line.
pub(super) async fn probe(
    interface: &str,
    address: Address,
    timeout: Duration,
) -> (Status, String) {
    if interface.is_empty() {
        return (
            Status::Failed,
            "no [probe] aoe_interface configured: the interface of the AoE network is needed"
                .into(),
        );
    }
    let interface = interface.to_owned();
    let work = tokio::task::spawn_blocking(move || probe_blocking(&interface, address, timeout));
    match work.await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => (Status::Failed, e),
        Err(e) => (Status::Failed, format!("AoE probe thread: {e}")),
    }
}

fn link_of(interface: &str) -> Result<LinkAddr, String> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("listing interfaces: {e}"))?;
    for ifa in addrs.filter(|i| i.interface_name == interface) {
        if let Some(link) = ifa.address.as_ref().and_then(|a| a.as_link_addr()) {
            return Ok(*link);
        }
    }
    Err(format!("interface {interface} ([probe] aoe_interface) does not exist"))
}

fn open(interface: &str) -> Result<(OwnedFd, [u8; 6]), String> {
    let link = link_of(interface)?;
    let mac = link.addr().unwrap_or([0; 6]);
    let fd =
        socket(AddressFamily::Packet, SockType::Raw, SockFlag::SOCK_CLOEXEC, SockProtocol::EthAll)
            .map_err(|e| {
                format!(
                    "raw socket on {interface} (needs CAP_NET_RAW and the AF_PACKET family): {e}"
                )
            })?;
    bind(fd.as_raw_fd(), &link).map_err(|e| format!("binding to {interface}: {e}"))?;
    setsockopt(&fd, sockopt::ReceiveTimeout, &nix::sys::time::TimeVal::new(0, 100_000))
        .map_err(|e| format!("socket timeout: {e}"))?;
    Ok((fd, mac))
}

/// Sends `frame`, then waits until `deadline` for the response `wanted` picks.
fn exchange(
    fd: &OwnedFd,
    frame: &[u8],
    deadline: Instant,
    wanted: impl Fn(&Response) -> bool,
) -> Result<Option<Response>, String> {
    send(fd.as_raw_fd(), frame, MsgFlags::empty()).map_err(|e| format!("sending: {e}"))?;
    let mut buffer = [0u8; 2048];
    while Instant::now() < deadline {
        match recv(fd.as_raw_fd(), &mut buffer, MsgFlags::empty()) {
            Ok(n) => {
                if let Some(response) = aoe::parse(&buffer[..n]).filter(|r| wanted(r)) {
                    return Ok(Some(response));
                }
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(format!("receiving: {e}")),
        }
    }
    Ok(None)
}

fn probe_blocking(
    interface: &str,
    address: Address,
    timeout: Duration,
) -> Result<(Status, String), String> {
    let deadline = Instant::now() + timeout;
    let (fd, mac) = open(interface)?;
    let name = format!("e{}.{}", address.shelf, address.slot);
    let tag = uuid::Uuid::new_v4().as_u128() as u32 & 0x7fff_ffff;
    let ours = |r: &Response| r.tag() == tag && r.address() == address;
    let config = exchange(&fd, &aoe::query_config(mac, address, tag), deadline, ours)?;
    let from = match config {
        None => {
            return Ok((
                Status::Failed,
                format!(
                    "{name} absent: no answer to Query Config on {interface} within {}s",
                    timeout.as_secs()
                ),
            ));
        }
        Some(Response::Error { code, .. }) => {
            return Ok((
                Status::Failed,
                format!("{name}: AoE error {code}: {}", aoe::error_text(code)),
            ));
        }
        Some(Response::Config { from, .. } | Response::Identify { from, .. }) => from,
    };
    identify(&fd, mac, from, address, tag.wrapping_add(1) & 0x7fff_ffff, deadline, timeout)
}

/// IDENTIFY DEVICE to the target found at `from`: its size, or why not.
fn identify(
    fd: &OwnedFd,
    mac: [u8; 6],
    from: [u8; 6],
    address: Address,
    tag: u32,
    deadline: Instant,
    timeout: Duration,
) -> Result<(Status, String), String> {
    let name = format!("e{}.{} present at {}", address.shelf, address.slot, mac_text(from));
    let ours = |r: &Response| r.tag() == tag && r.address() == address;
    Ok(match exchange(fd, &aoe::identify(from, mac, address, tag), deadline, ours)? {
        Some(Response::Identify { sectors, .. }) => {
            (Status::Ok, format!("{name}, {}", size_text(sectors.saturating_mul(512))))
        }
        Some(Response::Error { code, .. }) => (
            Status::Failed,
            format!("{name} but IDENTIFY failed: AoE error {code}: {}", aoe::error_text(code)),
        ),
        _ => (
            Status::Failed,
            format!("{name} but did not answer IDENTIFY within {}s", timeout.as_secs()),
        ),
    })
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}
