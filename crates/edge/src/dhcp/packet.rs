//! DHCPv4 packets (RFC 2131/2132): bytes in, values out, and back. A total parser: any bytes give
//! a [`Packet`] or a [`ParseError`], never a panic.
//!
//! Only what a ProxyDHCP needs: the fixed BOOTP header and the options as raw bytes by code
//! (an option that appears more than once is concatenated, RFC 3396). Option overload (52) is not
//! followed: `sname` and `file` are read as plain fields.

use std::net::Ipv4Addr;

/// The magic cookie that starts the options (RFC 2131 §3).
const COOKIE: [u8; 4] = [99, 130, 83, 99];
/// The fixed header plus the cookie.
const HEADER_LEN: usize = 240;
/// BOOTP's smallest message; some firmware drops shorter replies.
const MIN_REPLY_LEN: usize = 300;

pub const BOOTREQUEST: u8 = 1;
pub const BOOTREPLY: u8 = 2;

/// Option codes used here.
pub mod opt {
    pub const VENDOR_SPECIFIC: u8 = 43;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const VENDOR_CLASS: u8 = 60;
    pub const USER_CLASS: u8 = 77;
    pub const CLIENT_ARCH: u8 = 93;
    pub const CLIENT_UUID: u8 = 97;
}

/// Message types (option 53).
pub mod msg {
    pub const DISCOVER: u8 = 1;
    pub const OFFER: u8 = 2;
    pub const REQUEST: u8 = 3;
    pub const ACK: u8 = 5;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("{0} bytes is shorter than a DHCP header")]
    Short(usize),
    #[error("no DHCP magic cookie")]
    NoCookie,
    #[error("option {0} runs past the end of the packet")]
    TruncatedOption(u8),
}

/// One DHCPv4 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub op: u8,
    pub htype: u8,
    pub hlen: u8,
    pub hops: u8,
    pub xid: u32,
    pub secs: u16,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub siaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub chaddr: [u8; 16],
    pub sname: [u8; 64],
    pub file: [u8; 128],
    /// Options in the order first seen, without pad and end.
    pub options: Vec<(u8, Vec<u8>)>,
}

fn ip(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

impl Packet {
    /// Parses a DHCPv4 message.
    pub fn parse(bytes: &[u8]) -> Result<Packet, ParseError> {
        if bytes.len() < HEADER_LEN {
            return Err(ParseError::Short(bytes.len()));
        }
        if bytes[236..240] != COOKIE {
            return Err(ParseError::NoCookie);
        }
        let mut chaddr = [0; 16];
        chaddr.copy_from_slice(&bytes[28..44]);
        let mut sname = [0; 64];
        sname.copy_from_slice(&bytes[44..108]);
        let mut file = [0; 128];
        file.copy_from_slice(&bytes[108..236]);
        Ok(Packet {
            op: bytes[0],
            htype: bytes[1],
            hlen: bytes[2],
            hops: bytes[3],
            xid: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            secs: u16::from_be_bytes([bytes[8], bytes[9]]),
            flags: u16::from_be_bytes([bytes[10], bytes[11]]),
            ciaddr: ip(&bytes[12..16]),
            yiaddr: ip(&bytes[16..20]),
            siaddr: ip(&bytes[20..24]),
            giaddr: ip(&bytes[24..28]),
            chaddr,
            sname,
            file,
            options: parse_options(&bytes[HEADER_LEN..])?,
        })
    }

    /// The option's bytes, if present.
    pub fn option(&self, code: u8) -> Option<&[u8]> {
        self.options.iter().find(|(c, _)| *c == code).map(|(_, v)| v.as_slice())
    }

    /// A request as a netboot client sends it (BOOTREQUEST over Ethernet, broadcast flag set, no
    /// addresses yet): what tests and load generators build their DISCOVERs and REQUESTs from.
    pub fn request(mac: [u8; 6], xid: u32, options: Vec<(u8, Vec<u8>)>) -> Packet {
        let mut chaddr = [0; 16];
        chaddr[..6].copy_from_slice(&mac);
        Packet {
            op: BOOTREQUEST,
            htype: 1,
            hlen: 6,
            hops: 0,
            xid,
            secs: 0,
            flags: 0x8000,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            chaddr,
            sname: [0; 64],
            file: [0; 128],
            options,
        }
    }

    /// Option 93, the client architecture, as a number (the first listed, which is the one
    /// booting).
    pub fn arch(&self) -> Option<u16> {
        match self.option(opt::CLIENT_ARCH) {
            Some([hi, lo, ..]) => Some(u16::from_be_bytes([*hi, *lo])),
            _ => None,
        }
    }

    /// Option 53, if it is one byte.
    pub fn message_type(&self) -> Option<u8> {
        match self.option(opt::MESSAGE_TYPE) {
            Some([t]) => Some(*t),
            _ => None,
        }
    }

    /// The client's Ethernet MAC (`htype` 1, `hlen` 6), else none.
    pub fn mac(&self) -> Option<[u8; 6]> {
        if self.htype != 1 || self.hlen != 6 {
            return None;
        }
        let mut mac = [0; 6];
        mac.copy_from_slice(&self.chaddr[..6]);
        Some(mac)
    }

    /// Encodes the message, options ended by 255 and padded to BOOTP's 300 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MIN_REPLY_LEN + 64);
        out.extend_from_slice(&[self.op, self.htype, self.hlen, self.hops]);
        out.extend_from_slice(&self.xid.to_be_bytes());
        out.extend_from_slice(&self.secs.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        for a in [self.ciaddr, self.yiaddr, self.siaddr, self.giaddr] {
            out.extend_from_slice(&a.octets());
        }
        out.extend_from_slice(&self.chaddr);
        out.extend_from_slice(&self.sname);
        out.extend_from_slice(&self.file);
        out.extend_from_slice(&COOKIE);
        for (code, value) in &self.options {
            // Longer values are split into several options of the same code (RFC 3396).
            let mut chunks = value.chunks(255).peekable();
            if chunks.peek().is_none() {
                out.extend_from_slice(&[*code, 0]);
            }
            for chunk in chunks {
                out.extend_from_slice(&[*code, chunk.len() as u8]);
                out.extend_from_slice(chunk);
            }
        }
        out.push(255);
        if out.len() < MIN_REPLY_LEN {
            out.resize(MIN_REPLY_LEN, 0);
        }
        out
    }
}

fn parse_options(mut rest: &[u8]) -> Result<Vec<(u8, Vec<u8>)>, ParseError> {
    let mut options: Vec<(u8, Vec<u8>)> = Vec::new();
    while let Some((&code, tail)) = rest.split_first() {
        match code {
            0 => rest = tail,
            255 => break,
            _ => {
                let Some((&len, tail)) = tail.split_first() else {
                    return Err(ParseError::TruncatedOption(code));
                };
                let len = usize::from(len);
                if tail.len() < len {
                    return Err(ParseError::TruncatedOption(code));
                }
                let value = &tail[..len];
                match options.iter_mut().find(|(c, _)| *c == code) {
                    Some((_, v)) => v.extend_from_slice(value),
                    None => options.push((code, value.to_vec())),
                }
                rest = &tail[len..];
            }
        }
    }
    Ok(options)
}

/// Copies `text` into a fixed, zero-filled field, cut to leave a terminating zero.
pub fn fixed_field<const N: usize>(text: &str) -> [u8; N] {
    let mut field = [0; N];
    let n = text.len().min(N - 1);
    field[..n].copy_from_slice(&text.as_bytes()[..n]);
    field
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A client message as firmware sends it.
    pub(crate) fn request(mac: [u8; 6], options: &[(u8, &[u8])]) -> Packet {
        let options = options.iter().map(|(c, v)| (*c, v.to_vec())).collect();
        Packet { secs: 4, ..Packet::request(mac, 0xdead_beef, options) }
    }

    #[test]
    fn a_packet_round_trips() {
        let p = request([0x52, 0x54, 0, 0x12, 0x34, 0x56], &[(53, &[1]), (60, b"PXEClient")]);
        let bytes = p.encode();
        assert_eq!(bytes.len(), MIN_REPLY_LEN);
        let back = Packet::parse(&bytes).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.message_type(), Some(msg::DISCOVER));
        assert_eq!(back.mac(), Some([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
    }

    #[test]
    fn bad_packets_are_errors_not_panics() {
        assert_eq!(Packet::parse(&[]), Err(ParseError::Short(0)));
        assert_eq!(Packet::parse(&[0; 300]), Err(ParseError::NoCookie));
        let mut bytes = request([1; 6], &[]).encode();
        bytes.truncate(240);
        bytes.extend_from_slice(&[60, 9, b'P']);
        assert_eq!(Packet::parse(&bytes), Err(ParseError::TruncatedOption(60)));
        bytes.truncate(240);
        bytes.push(60);
        assert_eq!(Packet::parse(&bytes), Err(ParseError::TruncatedOption(60)));
        // No end option: the options simply stop.
        bytes.truncate(240);
        bytes.extend_from_slice(&[0, 0, 53, 1, 3]);
        assert_eq!(Packet::parse(&bytes).unwrap().message_type(), Some(msg::REQUEST));
    }

    #[test]
    fn every_prefix_and_every_byte_flip_parses_or_errs() {
        let good =
            request([7; 6], &[(53, &[1]), (60, b"PXEClient:Arch:00000"), (93, &[0, 0])]).encode();
        for n in 0..good.len() {
            let _ = Packet::parse(&good[..n]);
        }
        for i in 236..good.len() {
            for b in [0u8, 1, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[i] = b;
                let _ = Packet::parse(&bad);
            }
        }
    }

    #[test]
    fn repeated_options_are_concatenated_and_long_ones_split() {
        let mut p = request([1; 6], &[]);
        p.options.push((43, vec![7; 300]));
        let back = Packet::parse(&p.encode()).unwrap();
        assert_eq!(back.option(43).unwrap().len(), 300);
    }

    #[test]
    fn short_ethernet_addresses_have_no_mac() {
        let mut p = request([1; 6], &[]);
        p.hlen = 16;
        assert_eq!(p.mac(), None);
        assert_eq!(fixed_field::<4>("10.0.0.1"), *b"10.\0");
    }
}
