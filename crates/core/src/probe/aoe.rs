//! ATA over Ethernet frames for the probe (AoE specification r11): a Query Config request to a
//! shelf and slot, an ATA IDENTIFY DEVICE request, and the parse of their responses. Sans-io:
//! bytes in, values out; no socket, no clock. Every parser is total: any bytes give a value or
//! `None`, never a panic.
//!
//! A frame is the Ethernet header (destination, source, ethertype [`ETHERTYPE`]), the AoE
//! header (version and flags, error, major = shelf, minor = slot, command, tag) and the
//! command's argument. Frames are padded to Ethernet's 60-byte minimum.

/// The AoE ethertype.
pub const ETHERTYPE: u16 = 0x88a2;
/// The broadcast address a Query Config is sent to.
pub const BROADCAST: [u8; 6] = [0xff; 6];
/// The AoE protocol version this speaks.
const VERSION: u8 = 1;
/// Flag bits of the first header byte: a response, an error.
const FLAG_RESPONSE: u8 = 0x08;
const FLAG_ERROR: u8 = 0x04;
/// Commands.
const CMD_ATA: u8 = 0;
const CMD_QUERY_CONFIG: u8 = 1;
/// ATA IDENTIFY DEVICE, and the "extended" (LBA48) flag of the ATA argument.
const ATA_IDENTIFY: u8 = 0xec;
/// Ethernet header + AoE header.
const HEADER: usize = 14 + 10;
/// Ethernet's smallest frame (without the frame check sequence).
const MIN_FRAME: usize = 60;

/// A shelf (major) and slot (minor): `aoe:e<shelf>.<slot>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    pub shelf: u16,
    pub slot: u8,
}

/// What a response frame says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// A Query Config response: the target answers at `from` (its MAC).
    Config { from: [u8; 6], address: Address, tag: u32, buffer_count: u16, firmware: u16 },
    /// An ATA response to IDENTIFY: the device's size in 512-byte sectors (LBA48 when the
    /// device says it supports it, else LBA28).
    Identify { from: [u8; 6], address: Address, tag: u32, sectors: u64 },
    /// The target answered with the AoE error code `code`.
    Error { from: [u8; 6], address: Address, tag: u32, code: u8 },
}

impl Response {
    /// The tag the response answers.
    pub fn tag(&self) -> u32 {
        match self {
            Response::Config { tag, .. }
            | Response::Identify { tag, .. }
            | Response::Error { tag, .. } => *tag,
        }
    }

    /// The shelf and slot that answered.
    pub fn address(&self) -> Address {
        match self {
            Response::Config { address, .. }
            | Response::Identify { address, .. }
            | Response::Error { address, .. } => *address,
        }
    }
}

/// The meaning of an AoE error code (the specification's table).
pub fn error_text(code: u8) -> &'static str {
    match code {
        1 => "unrecognized command code",
        2 => "bad argument parameter",
        3 => "device unavailable",
        4 => "config string present",
        5 => "unsupported version",
        6 => "target is reserved",
        _ => "unknown error",
    }
}

fn header(dst: [u8; 6], src: [u8; 6], to: Address, command: u8, tag: u32) -> Vec<u8> {
    let mut frame = Vec::with_capacity(MIN_FRAME);
    frame.extend_from_slice(&dst);
    frame.extend_from_slice(&src);
    frame.extend_from_slice(&ETHERTYPE.to_be_bytes());
    frame.push(VERSION << 4);
    frame.push(0);
    frame.extend_from_slice(&to.shelf.to_be_bytes());
    frame.push(to.slot);
    frame.push(command);
    frame.extend_from_slice(&tag.to_be_bytes());
    frame
}

fn padded(mut frame: Vec<u8>) -> Vec<u8> {
    if frame.len() < MIN_FRAME {
        frame.resize(MIN_FRAME, 0);
    }
    frame
}

/// A Query Config "read" (ccmd 0) for `to`, broadcast from `src`.
pub fn query_config(src: [u8; 6], to: Address, tag: u32) -> Vec<u8> {
    let mut frame = header(BROADCAST, src, to, CMD_QUERY_CONFIG, tag);
    // Buffer count, firmware version, sector count, version/ccmd, config string length.
    frame.extend_from_slice(&[0, 0, 0, 0, 0, VERSION << 4, 0, 0]);
    padded(frame)
}

/// An ATA IDENTIFY DEVICE for `to`, sent to the MAC that answered its Query Config.
pub fn identify(dst: [u8; 6], src: [u8; 6], to: Address, tag: u32) -> Vec<u8> {
    let mut frame = header(dst, src, to, CMD_ATA, tag);
    // AFlags, feature, sector count 1, command, LBA 0-5, two reserved bytes.
    frame.extend_from_slice(&[0, 0, 1, ATA_IDENTIFY, 0, 0, 0, 0, 0, 0, 0, 0]);
    padded(frame)
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn le16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// Parses a received frame: `None` for anything that is not an AoE response (another
/// ethertype, a request, a short frame, an unknown command).
pub fn parse(frame: &[u8]) -> Option<Response> {
    if frame.len() < HEADER || be16(frame, 12)? != ETHERTYPE {
        return None;
    }
    let from: [u8; 6] = frame.get(6..12)?.try_into().ok()?;
    let flags = frame[14] & 0x0f;
    if frame[14] >> 4 != VERSION || flags & FLAG_RESPONSE == 0 {
        return None;
    }
    let address = Address { shelf: be16(frame, 16)?, slot: frame[18] };
    let command = frame[19];
    let tag = u32::from_be_bytes(frame.get(20..24)?.try_into().ok()?);
    if flags & FLAG_ERROR != 0 {
        return Some(Response::Error { from, address, tag, code: frame[15] });
    }
    let arg = &frame[HEADER..];
    match command {
        CMD_QUERY_CONFIG => Some(Response::Config {
            from,
            address,
            tag,
            buffer_count: be16(arg, 0)?,
            firmware: be16(arg, 2)?,
        }),
        CMD_ATA => {
            // The ATA argument is 12 bytes; the 512-byte IDENTIFY block follows.
            let status = *arg.get(3)?;
            let data = arg.get(12..12 + 512)?;
            if status & 0x01 != 0 {
                // ERR in the ATA status: the device refused IDENTIFY.
                return Some(Response::Error { from, address, tag, code: 0 });
            }
            Some(Response::Identify { from, address, tag, sectors: identify_sectors(data)? })
        }
        _ => None,
    }
}

/// The user-addressable sectors an IDENTIFY DEVICE block reports: words 100-103 when word 83
/// says LBA48 is supported, else words 60-61.
fn identify_sectors(data: &[u8]) -> Option<u64> {
    let word = |n: usize| le16(data, n * 2).map(u64::from);
    if word(83)? & (1 << 10) != 0 {
        let lba48 = word(100)? | word(101)? << 16 | word(102)? << 32 | word(103)? << 48;
        if lba48 != 0 {
            return Some(lba48);
        }
    }
    Some(word(60)? | word(61)? << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: [u8; 6] = [2, 0, 0, 0, 0, 9];
    const US: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn response(command: u8, flags: u8, error: u8, arg: &[u8]) -> Vec<u8> {
        let mut frame = header(US, TARGET, Address { shelf: 3, slot: 1 }, command, 77);
        frame[14] |= flags;
        frame[15] = error;
        frame.extend_from_slice(arg);
        frame
    }

    #[test]
    fn requests_are_padded_aoe_frames_for_the_address() {
        let q = query_config(US, Address { shelf: 0x0102, slot: 7 }, 0xdead_beef);
        assert_eq!(q.len(), 60);
        assert_eq!(&q[0..6], &BROADCAST);
        assert_eq!(&q[6..12], &US);
        assert_eq!(&q[12..14], &[0x88, 0xa2]);
        assert_eq!(&q[14..24], &[0x10, 0, 1, 2, 7, 1, 0xde, 0xad, 0xbe, 0xef]);
        let i = identify(TARGET, US, Address { shelf: 3, slot: 1 }, 5);
        assert_eq!(&i[0..6], &TARGET);
        assert_eq!(i[19], 0);
        assert_eq!(&i[24..28], &[0, 0, 1, 0xec]);
    }

    #[test]
    fn config_and_identify_responses_parse() {
        let config = response(CMD_QUERY_CONFIG, FLAG_RESPONSE, 0, &[0, 16, 0x40, 0x14, 0, 0x11]);
        assert_eq!(
            parse(&config),
            Some(Response::Config {
                from: TARGET,
                address: Address { shelf: 3, slot: 1 },
                tag: 77,
                buffer_count: 16,
                firmware: 0x4014
            })
        );
        let mut block = vec![0u8; 512];
        block[83 * 2] = 0x00;
        block[83 * 2 + 1] = 0x04; // bit 10: LBA48
        block[100 * 2..100 * 2 + 2].copy_from_slice(&0x8000u16.to_le_bytes());
        block[101 * 2..101 * 2 + 2].copy_from_slice(&0x0002u16.to_le_bytes());
        let mut arg = vec![0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0];
        arg.extend_from_slice(&block);
        let parsed = parse(&response(CMD_ATA, FLAG_RESPONSE, 0, &arg)).unwrap();
        assert!(matches!(parsed, Response::Identify { sectors: 0x2_8000, .. }), "{parsed:?}");
        // LBA28 when LBA48 is not claimed.
        block[83 * 2 + 1] = 0;
        block[60 * 2] = 0x10;
        let mut arg = vec![0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0];
        arg.extend_from_slice(&block);
        let parsed = parse(&response(CMD_ATA, FLAG_RESPONSE, 0, &arg)).unwrap();
        assert!(matches!(parsed, Response::Identify { sectors: 0x10, .. }), "{parsed:?}");
    }

    #[test]
    fn errors_requests_and_other_frames() {
        let e = parse(&response(CMD_QUERY_CONFIG, FLAG_RESPONSE | FLAG_ERROR, 3, &[])).unwrap();
        assert!(matches!(e, Response::Error { code: 3, .. }));
        assert_eq!(error_text(3), "device unavailable");
        // A request (ours, looped back) is not a response.
        assert_eq!(parse(&query_config(US, Address { shelf: 3, slot: 1 }, 1)), None);
        let mut ip = response(CMD_QUERY_CONFIG, FLAG_RESPONSE, 0, &[0; 8]);
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(parse(&ip), None);
        // A truncated ATA response.
        assert_eq!(parse(&response(CMD_ATA, FLAG_RESPONSE, 0, &[0; 40])), None);
    }

    #[test]
    fn parse_is_total() {
        let mut seed = 0x1234_5678u32;
        for len in 0..700 {
            let mut frame: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (seed >> 16) as u8
                })
                .collect();
            let _ = parse(&frame);
            if frame.len() > 20 {
                frame[12] = 0x88;
                frame[13] = 0xa2;
                frame[14] = 0x18;
                let _ = parse(&frame);
            }
        }
    }
}
