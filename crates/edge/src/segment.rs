//! Asking the segment itself who has an address: bootvol's own ARP request (IPv4) or Neighbour
//! Solicitation (IPv6), broadcast or sent to the solicited-node multicast group from a raw
//! Ethernet socket on the interface the client came in on, and every answer read for a short
//! deadline. Not the kernel's neighbour cache, which any host on the segment can overwrite with
//! one gratuitous ARP or unsolicited advertisement: a host that flips the node's entry at
//! bootvol cannot stop the node itself from answering a broadcast.
//!
//! The frames are built and parsed here with plain values ([`arp_request`],
//! [`neighbour_solicitation`], [`answer`]); [`ask`] is the I/O: an `AF_PACKET` socket from `nix`
//! (no `unsafe`), which needs `CAP_NET_RAW`. Without it [`ask`] says so and the caller decides.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use bootvol_core::model::MacAddr;
use nix::sys::socket::{
    AddressFamily, LinkAddr, MsgFlags, SockFlag, SockProtocol, SockType, bind, recv, send,
    setsockopt, socket, sockopt,
};

/// How long [`ask`] waits for answers.
pub const ASK_WAIT: Duration = Duration::from_millis(300);

const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ICMPV6: u8 = 58;
const SOLICITATION: u8 = 135;
const ADVERTISEMENT: u8 = 136;

fn ethernet(destination: [u8; 6], source: MacAddr, ethertype: u16) -> Vec<u8> {
    let mut frame = Vec::with_capacity(86);
    frame.extend_from_slice(&destination);
    frame.extend_from_slice(&source.0);
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame
}

/// An ARP request "who has `target`? tell `own_ip`", broadcast from `own_mac`.
pub fn arp_request(own_mac: MacAddr, own_ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut frame = ethernet([0xff; 6], own_mac, ETHERTYPE_ARP);
    // Ethernet, IPv4, 6-byte and 4-byte addresses, request.
    frame.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    frame.extend_from_slice(&own_mac.0);
    frame.extend_from_slice(&own_ip.octets());
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&target.octets());
    frame
}

/// The solicited-node multicast group of `target` (ff02::1:ffXX:XXXX) and its Ethernet group
/// (33:33:ff:XX:XX:XX).
fn solicited_node(target: Ipv6Addr) -> (Ipv6Addr, [u8; 6]) {
    let t = target.octets();
    let group = Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(t[13]),
        u16::from_be_bytes([t[14], t[15]]),
    );
    (group, [0x33, 0x33, 0xff, t[13], t[14], t[15]])
}

/// The ICMPv6 checksum over the pseudo-header and `message`.
fn icmpv6_checksum(source: Ipv6Addr, destination: Ipv6Addr, message: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
        }
    };
    add(&source.octets());
    add(&destination.octets());
    add(&(message.len() as u32).to_be_bytes());
    add(&[0, 0, 0, ICMPV6]);
    add(message);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A Neighbour Solicitation for `target` from `own_ip` (one of the interface's addresses) and
/// `own_mac`, to `target`'s solicited-node group, hop limit 255 (RFC 4861).
pub fn neighbour_solicitation(own_mac: MacAddr, own_ip: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let (group, group_mac) = solicited_node(target);
    let mut message = vec![SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
    message.extend_from_slice(&target.octets());
    // Source link-layer address option: type 1, 8 bytes.
    message.extend_from_slice(&[1, 1]);
    message.extend_from_slice(&own_mac.0);
    let checksum = icmpv6_checksum(own_ip, group, &message);
    message[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = ethernet(group_mac, own_mac, ETHERTYPE_IPV6);
    // Version 6, no class or flow; payload length; next header ICMPv6; hop limit 255.
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&(message.len() as u16).to_be_bytes());
    frame.extend_from_slice(&[ICMPV6, 255]);
    frame.extend_from_slice(&own_ip.octets());
    frame.extend_from_slice(&group.octets());
    frame.extend_from_slice(&message);
    frame
}

/// The MAC a received frame says `target` is at, if it is an answer for `target`: an ARP reply
/// (or a request: a host asking tells its own address) whose sender is `target`, or a Neighbour
/// Advertisement for `target` (its target link-layer option, else the frame's source). Total:
/// any bytes give an answer or `None`.
pub fn answer(frame: &[u8], target: IpAddr) -> Option<MacAddr> {
    let mac = |bytes: &[u8]| -> Option<MacAddr> { Some(MacAddr(bytes.get(..6)?.try_into().ok()?)) };
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    match (ethertype, target) {
        (ETHERTYPE_ARP, IpAddr::V4(target)) => {
            let arp = frame.get(14..42)?;
            let opcode = u16::from_be_bytes([arp[6], arp[7]]);
            let sender_ip = Ipv4Addr::new(arp[14], arp[15], arp[16], arp[17]);
            (arp[..6] == [0, 1, 8, 0, 6, 4] && (opcode == 1 || opcode == 2) && sender_ip == target)
                .then(|| mac(&arp[8..14]))?
        }
        (ETHERTYPE_IPV6, IpAddr::V6(target)) => {
            let ip = frame.get(14..54)?;
            let message = frame.get(54..)?;
            let length = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let message = message.get(..length)?;
            if ip[6] != ICMPV6 || ip[7] != 255 || message.len() < 24 || message[0] != ADVERTISEMENT
            {
                return None;
            }
            if message[8..24] != target.octets() {
                return None;
            }
            // Options: the target link-layer address (type 2), else the Ethernet source.
            let mut options = &message[24..];
            while options.len() >= 8 {
                let size = usize::from(options[1]) * 8;
                if size == 0 || size > options.len() {
                    break;
                }
                if options[0] == 2 {
                    return mac(&options[2..8]);
                }
                options = &options[size..];
            }
            mac(&frame[6..12])
        }
        _ => None,
    }
}

/// The interface with index `ifindex`: its name, link address (for the socket), MAC and an
/// address of the family of `target` to ask from.
fn interface(ifindex: i32, target: IpAddr) -> Result<(String, LinkAddr, MacAddr, IpAddr), String> {
    let all: Vec<_> = nix::ifaddrs::getifaddrs().map_err(|e| format!("interfaces: {e}"))?.collect();
    let (name, link) = all
        .iter()
        .find_map(|i| {
            let link = i.address.as_ref()?.as_link_addr()?;
            (link.ifindex() == ifindex as usize).then(|| (i.interface_name.clone(), *link))
        })
        .ok_or_else(|| format!("no interface with index {ifindex}"))?;
    let own_mac = MacAddr(link.addr().ok_or_else(|| format!("{name} has no MAC"))?);
    let mut own: Vec<IpAddr> = all
        .iter()
        .filter(|i| i.interface_name == name)
        .filter_map(|i| i.address.as_ref())
        .filter_map(|a| match target {
            IpAddr::V4(_) => a.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())),
            IpAddr::V6(_) => a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())),
        })
        .collect();
    // Over IPv6 the link-local address first (always there once the link is up).
    own.sort_by_key(|ip| !matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80));
    let own_ip =
        *own.first().ok_or_else(|| format!("{name} has no address to ask {target} from"))?;
    Ok((name, link, own_mac, own_ip))
}

/// Asks the segment on interface `ifindex` who has `target`, and reads answers until one names
/// a MAC of `wanted` (`Ok(true)`) or [`ASK_WAIT`] passes (`Ok(false)`). Blocking (run it on the
/// blocking pool). `Err`: no raw socket here (`CAP_NET_RAW`), or no such interface.
pub fn ask(ifindex: i32, target: IpAddr, wanted: &[MacAddr]) -> Result<bool, String> {
    let (name, link, own_mac, own_ip) = interface(ifindex, target)?;
    let fd: OwnedFd =
        socket(AddressFamily::Packet, SockType::Raw, SockFlag::SOCK_CLOEXEC, SockProtocol::EthAll)
            .map_err(|e| format!("raw socket on {name} (needs CAP_NET_RAW): {e}"))?;
    bind(fd.as_raw_fd(), &link).map_err(|e| format!("binding to {name}: {e}"))?;
    setsockopt(&fd, sockopt::ReceiveTimeout, &nix::sys::time::TimeVal::new(0, 50_000))
        .map_err(|e| format!("socket timeout: {e}"))?;
    let frame = match (own_ip, target) {
        (IpAddr::V4(own), IpAddr::V4(t)) => arp_request(own_mac, own, t),
        (IpAddr::V6(own), IpAddr::V6(t)) => neighbour_solicitation(own_mac, own, t),
        _ => return Err(format!("{target}: no address of its family on {name}")),
    };
    send(fd.as_raw_fd(), &frame, MsgFlags::empty())
        .map_err(|e| format!("sending on {name}: {e}"))?;
    let deadline = Instant::now() + ASK_WAIT;
    let mut buffer = [0u8; 1600];
    while Instant::now() < deadline {
        match recv(fd.as_raw_fd(), &mut buffer, MsgFlags::empty()) {
            Ok(n) => {
                if answer(&buffer[..n], target).is_some_and(|mac| wanted.contains(&mac)) {
                    return Ok(true);
                }
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(format!("receiving on {name}: {e}")),
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
    const NODE: MacAddr = MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]);

    #[test]
    fn an_arp_request_is_broadcast_and_its_reply_names_the_sender() {
        let (own, target) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let request = arp_request(OWN, own, target);
        assert_eq!(request.len(), 42);
        assert_eq!(&request[..6], &[0xff; 6]);
        assert_eq!(&request[38..42], &target.octets());
        // The reply: the request turned round, from the node.
        let mut reply = ethernet(OWN.0, NODE, ETHERTYPE_ARP);
        reply.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
        reply.extend_from_slice(&NODE.0);
        reply.extend_from_slice(&target.octets());
        reply.extend_from_slice(&OWN.0);
        reply.extend_from_slice(&own.octets());
        assert_eq!(answer(&reply, IpAddr::V4(target)), Some(NODE));
        // Not for this address, not ARP, our own request, short or empty: no answer.
        assert_eq!(answer(&reply, IpAddr::V4(own)), None);
        assert_eq!(answer(&request, IpAddr::V4(target)), None);
        assert_eq!(answer(&reply[..30], IpAddr::V4(target)), None);
        assert_eq!(answer(&[], IpAddr::V4(target)), None);
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(answer(&reply, v6), None);
    }

    #[test]
    fn a_solicitation_goes_to_the_solicited_node_group_with_a_valid_checksum() {
        let own: Ipv6Addr = "fe80::1".parse().unwrap();
        let target: Ipv6Addr = "fd13:1::2:3456".parse().unwrap();
        let frame = neighbour_solicitation(OWN, own, target);
        assert_eq!(&frame[..6], &[0x33, 0x33, 0xff, 0x02, 0x34, 0x56]);
        let group: Ipv6Addr = "ff02::1:ff02:3456".parse().unwrap();
        assert_eq!(&frame[38..54], &group.octets());
        assert_eq!(frame[21], 255, "hop limit");
        let message = &frame[54..];
        assert_eq!(message[0], SOLICITATION);
        // The checksum over the message as sent (with its checksum) sums to zero.
        assert_eq!(icmpv6_checksum(own, group, message), 0);
    }

    #[test]
    fn an_advertisement_names_its_target_link_layer_address() {
        let node_ip: Ipv6Addr = "fd13:1::2".parse().unwrap();
        let own: Ipv6Addr = "fe80::1".parse().unwrap();
        let mut message = vec![ADVERTISEMENT, 0, 0, 0, 0x60, 0, 0, 0];
        message.extend_from_slice(&node_ip.octets());
        message.extend_from_slice(&[2, 1]);
        message.extend_from_slice(&NODE.0);
        let mut frame = ethernet(OWN.0, MacAddr([0x02, 9, 9, 9, 9, 9]), ETHERTYPE_IPV6);
        frame.extend_from_slice(&[0x60, 0, 0, 0]);
        frame.extend_from_slice(&(message.len() as u16).to_be_bytes());
        frame.extend_from_slice(&[ICMPV6, 255]);
        frame.extend_from_slice(&node_ip.octets());
        frame.extend_from_slice(&own.octets());
        frame.extend_from_slice(&message);
        assert_eq!(answer(&frame, IpAddr::V6(node_ip)), Some(NODE), "the option, not the source");
        // Another target, a hop limit that is not 255 (from off the link): none.
        assert_eq!(answer(&frame, "fd13:1::3".parse().unwrap()), None);
        let mut routed = frame.clone();
        routed[21] = 64;
        assert_eq!(answer(&routed, IpAddr::V6(node_ip)), None);
        // Without the option: the frame's source.
        let mut bare = frame[..54 + 24].to_vec();
        bare[18..20].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(answer(&bare, IpAddr::V6(node_ip)), Some(MacAddr([0x02, 9, 9, 9, 9, 9])));
        // Truncated anywhere: none, no panic.
        for cut in 0..frame.len() {
            let _ = answer(&frame[..cut], IpAddr::V6(node_ip));
        }
    }
}
