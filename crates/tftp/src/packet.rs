//! TFTP packets: bytes in, values out, and values back to bytes.
//!
//! RFC 1350 (RRQ, WRQ, DATA, ACK, ERROR) with the RFC 2347 option extension (options in requests,
//! OACK) for the options this server knows: `blksize` (RFC 2348), `timeout` and `tsize`
//! (RFC 2349) and `windowsize` (RFC 7440). Parsing is total: any byte slice gives a packet or a
//! [`ParseError`], never a panic. No I/O, no clock.
//!
//! Option handling follows RFC 2347: names are case-insensitive, values are decimal. An option
//! this module does not know, or a known one with a value out of its RFC range, is dropped at
//! parse time, which is what the RFC asks of a server that does not accept an option (it is then
//! left out of the OACK).

use std::borrow::Cow;

const OP_RRQ: u16 = 1;
const OP_WRQ: u16 = 2;
const OP_DATA: u16 = 3;
const OP_ACK: u16 = 4;
const OP_ERROR: u16 = 5;
const OP_OACK: u16 = 6;

/// Bytes before the payload of a DATA packet (opcode and block number).
pub(crate) const DATA_HEADER_LEN: usize = 4;

/// RFC 2348 bounds of `blksize`.
pub(crate) const MIN_BLOCK_SIZE: u16 = 8;
pub(crate) const MAX_BLOCK_SIZE: u16 = 65464;

/// TFTP error codes (RFC 1350 section 5, RFC 2347 for code 8).
pub(crate) mod code {
    pub(crate) const UNDEFINED: u16 = 0;
    pub(crate) const FILE_NOT_FOUND: u16 = 1;
    pub(crate) const ACCESS_VIOLATION: u16 = 2;
    pub(crate) const ILLEGAL_OPERATION: u16 = 4;
    pub(crate) const UNKNOWN_TRANSFER_ID: u16 = 5;
}

/// One TFTP packet. DATA borrows its payload from the datagram; everything else is small.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Packet<'a> {
    Rrq(Request),
    Wrq(Request),
    Data { block: u16, data: &'a [u8] },
    Ack { block: u16 },
    Error { code: u16, message: Cow<'a, str> },
    Oack(Options),
}

/// The body of an RRQ or WRQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) filename: String,
    pub(crate) mode: Mode,
    pub(crate) options: Options,
}

/// The transfer mode. Only `octet` and `netascii` are served; `Other` keeps what was asked (in
/// lower case) so that it can be named in the refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    Octet,
    Netascii,
    Other(String),
}

impl Mode {
    fn parse(text: &str) -> Mode {
        let lower = text.to_ascii_lowercase();
        match lower.as_str() {
            "octet" => Mode::Octet,
            "netascii" => Mode::Netascii,
            _ => Mode::Other(lower),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Mode::Octet => "octet",
            Mode::Netascii => "netascii",
            Mode::Other(text) => text,
        }
    }
}

/// The options this server understands, each `None` when absent or out of range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// RFC 2348, 8..=65464 bytes.
    pub(crate) blksize: Option<u16>,
    /// RFC 2349, 1..=255 seconds.
    pub(crate) timeout: Option<u8>,
    /// RFC 2349, the file size (0 in a read request, which asks for the size).
    pub(crate) tsize: Option<u64>,
    /// RFC 7440, 1..=65535 blocks.
    pub(crate) windowsize: Option<u16>,
}

impl Options {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Options::default()
    }

    /// Records one name/value pair; unknown names and out-of-range values are ignored.
    fn set(&mut self, name: &str, value: &str) {
        let Some(value) = decimal(value) else { return };
        if name.eq_ignore_ascii_case("blksize") {
            self.blksize = in_range(value, MIN_BLOCK_SIZE.into(), MAX_BLOCK_SIZE.into());
        } else if name.eq_ignore_ascii_case("timeout") {
            self.timeout = in_range(value, 1, 255);
        } else if name.eq_ignore_ascii_case("tsize") {
            self.tsize = Some(value);
        } else if name.eq_ignore_ascii_case("windowsize") {
            self.windowsize = in_range(value, 1, 65535);
        }
    }

    fn encode(&self, buf: &mut Vec<u8>) {
        let pairs = [
            ("blksize", self.blksize.map(u64::from)),
            ("timeout", self.timeout.map(u64::from)),
            ("tsize", self.tsize),
            ("windowsize", self.windowsize.map(u64::from)),
        ];
        for (name, value) in pairs {
            if let Some(value) = value {
                put_str(buf, name);
                put_str(buf, &value.to_string());
            }
        }
    }

    /// Reads NUL-terminated name/value pairs. Lenient where clients are known to be sloppy: a
    /// trailing fragment without its NUL, a name without a value and empty names (padding) are
    /// skipped rather than failing the whole request.
    fn parse(bytes: &[u8]) -> Options {
        let mut options = Options::default();
        // Only NUL-terminated fields count: whatever follows the last NUL is an unterminated
        // fragment and is dropped.
        let Some(last_nul) = bytes.iter().rposition(|&b| b == 0) else { return options };
        let mut fields = bytes[..last_nul].split(|&b| b == 0);
        while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
            if let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) {
                options.set(name, value);
            }
        }
        options
    }
}

/// A decimal number as RFC 2347 writes option values: ASCII digits only.
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok() // fails only on overflow
}

fn in_range<T: TryFrom<u64>>(value: u64, min: u64, max: u64) -> Option<T> {
    if (min..=max).contains(&value) { T::try_from(value).ok() } else { None }
}

/// Why a datagram is not a TFTP packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParseError {
    #[error("packet of {0} bytes is too short")]
    TooShort(usize),
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    #[error("{0} is not terminated by a NUL byte")]
    Unterminated(&'static str),
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    #[error("empty file name")]
    EmptyFilename,
    #[error("ACK of {0} bytes (must be 4)")]
    AckLength(usize),
}

impl<'a> Packet<'a> {
    /// Parses one datagram.
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Packet<'a>, ParseError> {
        let (opcode, body) = split_u16(bytes).ok_or(ParseError::TooShort(bytes.len()))?;
        match opcode {
            OP_RRQ => Ok(Packet::Rrq(parse_request(body)?)),
            OP_WRQ => Ok(Packet::Wrq(parse_request(body)?)),
            OP_DATA => {
                let (block, data) = split_u16(body).ok_or(ParseError::TooShort(bytes.len()))?;
                Ok(Packet::Data { block, data })
            }
            OP_ACK => match split_u16(body) {
                Some((block, [])) => Ok(Packet::Ack { block }),
                _ => Err(ParseError::AckLength(bytes.len())),
            },
            OP_ERROR => {
                let (code, rest) = split_u16(body).ok_or(ParseError::TooShort(bytes.len()))?;
                // The message is for humans: take it up to its NUL (or the end, if the sender
                // forgot the NUL) and replace invalid UTF-8 rather than refusing the packet.
                let text = rest.split(|&b| b == 0).next().unwrap_or_default();
                Ok(Packet::Error { code, message: String::from_utf8_lossy(text) })
            }
            OP_OACK => Ok(Packet::Oack(Options::parse(body))),
            other => Err(ParseError::UnknownOpcode(other)),
        }
    }

    /// Encodes the packet into `buf`, replacing its contents. The server sends only DATA, ERROR
    /// and OACK (with the functions below); the whole set exists for the round-trip checks (the
    /// unit tests and `check_datagram`, the fuzzer's).
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        match self {
            Packet::Rrq(request) => encode_request(buf, OP_RRQ, request),
            Packet::Wrq(request) => encode_request(buf, OP_WRQ, request),
            Packet::Data { block, data } => encode_data(buf, *block, data),
            Packet::Ack { block } => {
                buf.clear();
                buf.extend_from_slice(&OP_ACK.to_be_bytes());
                buf.extend_from_slice(&block.to_be_bytes());
            }
            Packet::Error { code, message } => encode_error(buf, *code, message),
            Packet::Oack(options) => encode_oack(buf, options),
        }
    }
}

/// Encodes DATA into `buf`, replacing its contents. The hot path: `buf` is reused for every
/// block of a transfer, so this never allocates once `buf` has grown to one block.
pub(crate) fn encode_data(buf: &mut Vec<u8>, block: u16, data: &[u8]) {
    buf.clear();
    buf.extend_from_slice(&OP_DATA.to_be_bytes());
    buf.extend_from_slice(&block.to_be_bytes());
    buf.extend_from_slice(data);
}

/// Encodes ERROR into `buf`, replacing its contents. A NUL inside `message` would end the
/// message early on the wire, so NULs are dropped.
pub(crate) fn encode_error(buf: &mut Vec<u8>, code: u16, message: &str) {
    buf.clear();
    buf.extend_from_slice(&OP_ERROR.to_be_bytes());
    buf.extend_from_slice(&code.to_be_bytes());
    buf.extend(message.bytes().filter(|&b| b != 0));
    buf.push(0);
}

/// Encodes OACK into `buf`, replacing its contents.
pub(crate) fn encode_oack(buf: &mut Vec<u8>, options: &Options) {
    buf.clear();
    buf.extend_from_slice(&OP_OACK.to_be_bytes());
    options.encode(buf);
}

fn encode_request(buf: &mut Vec<u8>, opcode: u16, request: &Request) {
    buf.clear();
    buf.extend_from_slice(&opcode.to_be_bytes());
    put_str(buf, &request.filename);
    put_str(buf, request.mode.as_str());
    request.options.encode(buf);
}

fn put_str(buf: &mut Vec<u8>, text: &str) {
    buf.extend_from_slice(text.as_bytes());
    buf.push(0);
}

fn split_u16(bytes: &[u8]) -> Option<(u16, &[u8])> {
    match bytes {
        [hi, lo, rest @ ..] => Some((u16::from_be_bytes([*hi, *lo]), rest)),
        _ => None,
    }
}

/// Splits off one NUL-terminated string.
fn take_str<'a>(bytes: &'a [u8], what: &'static str) -> Result<(&'a str, &'a [u8]), ParseError> {
    let nul = bytes.iter().position(|&b| b == 0).ok_or(ParseError::Unterminated(what))?;
    let text = std::str::from_utf8(&bytes[..nul]).map_err(|_| ParseError::NotUtf8(what))?;
    Ok((text, &bytes[nul + 1..]))
}

fn parse_request(body: &[u8]) -> Result<Request, ParseError> {
    let (filename, rest) = take_str(body, "file name")?;
    if filename.is_empty() {
        return Err(ParseError::EmptyFilename);
    }
    let (mode, rest) = take_str(rest, "mode")?;
    Ok(Request {
        filename: filename.to_owned(),
        mode: Mode::parse(mode),
        options: Options::parse(rest),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(packet: &Packet<'_>) -> Vec<u8> {
        let mut buf = vec![0xAA; 3]; // encode must replace, not append
        packet.encode(&mut buf);
        buf
    }

    fn request(filename: &str, mode: Mode, options: Options) -> Request {
        Request { filename: filename.to_owned(), mode, options }
    }

    #[test]
    fn rrq_without_options_golden() {
        let bytes = b"\x00\x01boot/undionly.kpxe\x00octet\x00";
        let expected = Packet::Rrq(request("boot/undionly.kpxe", Mode::Octet, Options::default()));
        assert_eq!(Packet::parse(bytes), Ok(expected.clone()));
        assert_eq!(encoded(&expected), bytes);
    }

    #[test]
    fn rrq_with_options_golden() {
        let bytes = b"\x00\x01f\x00octet\x00blksize\x001468\x00timeout\x005\x00tsize\x000\x00windowsize\x008\x00";
        let options =
            Options { blksize: Some(1468), timeout: Some(5), tsize: Some(0), windowsize: Some(8) };
        let expected = Packet::Rrq(request("f", Mode::Octet, options));
        assert_eq!(Packet::parse(bytes), Ok(expected.clone()));
        assert_eq!(encoded(&expected), bytes);
    }

    #[test]
    fn wrq_golden() {
        let bytes = b"\x00\x02up.bin\x00netascii\x00";
        let expected = Packet::Wrq(request("up.bin", Mode::Netascii, Options::default()));
        assert_eq!(Packet::parse(bytes), Ok(expected.clone()));
        assert_eq!(encoded(&expected), bytes);
    }

    #[test]
    fn data_golden() {
        let bytes = b"\x00\x03\x12\x34hello";
        let expected = Packet::Data { block: 0x1234, data: b"hello" };
        assert_eq!(Packet::parse(bytes), Ok(expected.clone()));
        assert_eq!(encoded(&expected), bytes);
        // The empty last block of a file whose size is a multiple of the block size.
        assert_eq!(
            Packet::parse(b"\x00\x03\xff\xff"),
            Ok(Packet::Data { block: 65535, data: b"" })
        );
    }

    #[test]
    fn ack_golden() {
        let expected = Packet::Ack { block: 0xfffe };
        assert_eq!(Packet::parse(b"\x00\x04\xff\xfe"), Ok(expected.clone()));
        assert_eq!(encoded(&expected), b"\x00\x04\xff\xfe");
    }

    #[test]
    fn error_golden() {
        let bytes = b"\x00\x05\x00\x08tsize probe\x00";
        let expected = Packet::Error { code: 8, message: "tsize probe".into() };
        assert_eq!(Packet::parse(bytes), Ok(expected.clone()));
        assert_eq!(encoded(&expected), bytes);
    }

    #[test]
    fn oack_golden() {
        let bytes = b"\x00\x06blksize\x001468\x00tsize\x001048576\x00windowsize\x008\x00";
        let options = Options {
            blksize: Some(1468),
            timeout: None,
            tsize: Some(1_048_576),
            windowsize: Some(8),
        };
        assert_eq!(Packet::parse(bytes), Ok(Packet::Oack(options)));
        assert_eq!(encoded(&Packet::Oack(options)), bytes);
        // An OACK with nothing in it is just the opcode.
        assert_eq!(encoded(&Packet::Oack(Options::default())), b"\x00\x06");
    }

    #[test]
    fn error_message_nul_is_dropped_on_encode() {
        let mut buf = Vec::new();
        encode_error(&mut buf, code::ACCESS_VIOLATION, "a\0b");
        assert_eq!(buf, b"\x00\x05\x00\x02ab\x00");
    }

    #[test]
    fn error_without_nul_or_with_bad_utf8_still_parses() {
        assert_eq!(
            Packet::parse(b"\x00\x05\x00\x01gone"),
            Ok(Packet::Error { code: 1, message: "gone".into() })
        );
        assert_eq!(
            Packet::parse(b"\x00\x05\x00\x00\xff\x00"),
            Ok(Packet::Error { code: 0, message: "\u{fffd}".into() })
        );
        assert_eq!(
            Packet::parse(b"\x00\x05\x00\x00"),
            Ok(Packet::Error { code: 0, message: "".into() })
        );
    }

    fn options_of(tail: &[u8]) -> Options {
        let mut bytes = b"\x00\x01f\x00octet\x00".to_vec();
        bytes.extend_from_slice(tail);
        match Packet::parse(&bytes) {
            Ok(Packet::Rrq(request)) => request.options,
            other => panic!("not an RRQ: {other:?}"),
        }
    }

    #[test]
    fn option_names_are_case_insensitive_and_mode_too() {
        let options =
            options_of(b"BLKSIZE\x00512\x00TimeOut\x003\x00TSize\x000\x00WindowSize\x004\x00");
        assert_eq!(
            options,
            Options { blksize: Some(512), timeout: Some(3), tsize: Some(0), windowsize: Some(4) }
        );
        let parsed = Packet::parse(b"\x00\x01f\x00OcTeT\x00");
        assert!(matches!(parsed, Ok(Packet::Rrq(Request { mode: Mode::Octet, .. }))), "{parsed:?}");
    }

    #[test]
    fn unknown_options_and_bad_values_are_ignored() {
        // Unknown name, sign, hex, empty, overflow: all dropped; the good option survives.
        let options = options_of(
            b"multicast\x00\x00blksize\x00+512\x00timeout\x000x5\x00tsize\x00\x00windowsize\x0099999999999999999999999\x00blksize\x001024\x00",
        );
        assert_eq!(options, Options { blksize: Some(1024), ..Options::default() });
    }

    #[test]
    fn option_ranges_follow_the_rfcs() {
        assert_eq!(options_of(b"blksize\x007\x00").blksize, None);
        assert_eq!(options_of(b"blksize\x008\x00").blksize, Some(8));
        assert_eq!(options_of(b"blksize\x0065464\x00").blksize, Some(65464));
        assert_eq!(options_of(b"blksize\x0065465\x00").blksize, None);
        assert_eq!(options_of(b"timeout\x000\x00").timeout, None);
        assert_eq!(options_of(b"timeout\x00255\x00").timeout, Some(255));
        assert_eq!(options_of(b"timeout\x00256\x00").timeout, None);
        assert_eq!(options_of(b"windowsize\x000\x00").windowsize, None);
        assert_eq!(options_of(b"windowsize\x0065535\x00").windowsize, Some(65535));
        assert_eq!(options_of(b"windowsize\x0065536\x00").windowsize, None);
        assert_eq!(options_of(b"tsize\x0018446744073709551615\x00").tsize, Some(u64::MAX));
    }

    #[test]
    fn sloppy_option_tails_are_tolerated() {
        // Padding NULs, a name without value, an unterminated trailing fragment.
        assert_eq!(options_of(b"blksize\x001468\x00\x00\x00").blksize, Some(1468));
        assert_eq!(options_of(b"blksize\x001468\x00tsize\x00").blksize, Some(1468));
        assert_eq!(options_of(b"blksize\x001468\x00tsize\x000").tsize, None);
        assert_eq!(options_of(b"blksize\x001468").blksize, None);
        assert_eq!(options_of(b"\xff\xfe\x00512\x00blksize\x00\xff\x00").blksize, None);
    }

    #[test]
    fn other_modes_are_kept_lower_case() {
        let parsed = Packet::parse(b"\x00\x01f\x00MAIL\x00");
        assert_eq!(
            parsed,
            Ok(Packet::Rrq(request("f", Mode::Other("mail".into()), Options::default())))
        );
    }

    #[test]
    fn malformed_packets_are_errors() {
        let cases: &[(&[u8], ParseError)] = &[
            (b"", ParseError::TooShort(0)),
            (b"\x00", ParseError::TooShort(1)),
            (b"\x00\x00", ParseError::UnknownOpcode(0)),
            (b"\x00\x07", ParseError::UnknownOpcode(7)),
            (b"\xff\xff\x00", ParseError::UnknownOpcode(65535)),
            (b"\x00\x01", ParseError::Unterminated("file name")),
            (b"\x00\x01file", ParseError::Unterminated("file name")),
            (b"\x00\x01file\x00octet", ParseError::Unterminated("mode")),
            (b"\x00\x01\x00octet\x00", ParseError::EmptyFilename),
            (b"\x00\x02f\xc3\x28\x00octet\x00", ParseError::NotUtf8("file name")),
            (b"\x00\x01f\x00\xff\x00", ParseError::NotUtf8("mode")),
            (b"\x00\x03\x00", ParseError::TooShort(3)),
            (b"\x00\x04\x00", ParseError::AckLength(3)),
            (b"\x00\x04\x00\x01\x00", ParseError::AckLength(5)),
            (b"\x00\x05\x00", ParseError::TooShort(3)),
        ];
        for (bytes, expected) in cases {
            assert_eq!(Packet::parse(bytes).as_ref(), Err(expected), "{bytes:?}");
        }
    }

    /// Every prefix of every golden packet, and a pseudo-random byte soup, parses to something
    /// without panicking; the request prefixes that cut a field are errors.
    #[test]
    fn parse_is_total() {
        let goldens: &[&[u8]] = &[
            b"\x00\x01f\x00octet\x00blksize\x001468\x00tsize\x000\x00",
            b"\x00\x03\x00\x01abc",
            b"\x00\x05\x00\x08x\x00",
            b"\x00\x06blksize\x00512\x00",
        ];
        for golden in goldens {
            for end in 0..=golden.len() {
                let _ = Packet::parse(&golden[..end]);
            }
        }
        assert!(Packet::parse(b"\x00\x01f\x00oct").is_err());
        let mut state: u32 = 0x1234_5678;
        let mut soup = Vec::new();
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let len = (state % 40) as usize;
            soup.clear();
            soup.extend((0..len).map(|i| (state.rotate_left(i as u32) % 8) as u8));
            soup[..len.min(1)].fill(0); // mostly valid opcodes, so the body parsers run
            let _ = Packet::parse(&soup);
        }
    }
}
