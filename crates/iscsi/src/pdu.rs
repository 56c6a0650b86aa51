//! iSCSI PDUs (RFC 7143 §11): the 48-byte Basic Header Segment, an optional AHS (skipped) and the
//! data segment padded to four bytes; bytes in, values out, and values back to bytes. No I/O, no
//! clock.
//!
//! Decoding is total: any bytes give a [`Pdu`] or a [`PduError`], never a panic, and a data
//! segment longer than [`MAX_DATA_SEGMENT`] is refused before anything is read into it
//! ([`frame_len`] answers from the header alone, so a reader knows how much to take). Digests
//! are never negotiated, so no PDU carries one. Opcodes this initiator does not use decode as
//! [`Pdu::Other`], keeping their header so that they encode back unchanged.
//!
//! Fields are kept as the RFC names them; reserved bits are ignored on decode and written as
//! zero, so a decoded PDU encodes back to bytes that decode to the same value.

use std::fmt;

/// Bytes in a Basic Header Segment.
pub const BHS_LEN: usize = 48;

/// The longest data segment accepted: a frame announcing more is refused from its header.
/// Four times the `MaxRecvDataSegmentLength` the login declares, room for a target that
/// ignores it during login (where the RFC's limit is 8192).
pub const MAX_DATA_SEGMENT: usize = 256 * 1024;

/// Opcodes (RFC 7143 §11.1.1.1).
pub mod opcode {
    /// NOP-Out (initiator).
    pub const NOP_OUT: u8 = 0x00;
    /// SCSI Command.
    pub const SCSI_COMMAND: u8 = 0x01;
    /// Login Request.
    pub const LOGIN_REQUEST: u8 = 0x03;
    /// Text Request.
    pub const TEXT_REQUEST: u8 = 0x04;
    /// Logout Request.
    pub const LOGOUT_REQUEST: u8 = 0x06;
    /// NOP-In (target).
    pub const NOP_IN: u8 = 0x20;
    /// SCSI Response.
    pub const SCSI_RESPONSE: u8 = 0x21;
    /// Login Response.
    pub const LOGIN_RESPONSE: u8 = 0x23;
    /// Text Response.
    pub const TEXT_RESPONSE: u8 = 0x24;
    /// SCSI Data-In.
    pub const DATA_IN: u8 = 0x25;
    /// Logout Response.
    pub const LOGOUT_RESPONSE: u8 = 0x26;
    /// Reject.
    pub const REJECT: u8 = 0x3f;
}

const IMMEDIATE: u8 = 0x40;
const FINAL: u8 = 0x80;
const CONTINUE: u8 = 0x40;

/// Why bytes are not a PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PduError {
    /// Fewer than [`BHS_LEN`] bytes.
    Short(usize),
    /// The header announces a data segment over [`MAX_DATA_SEGMENT`].
    TooLong(usize),
    /// The frame is not as long as its header says.
    Length {
        /// What the header announces (BHS, AHS, padded data).
        expected: usize,
        /// What was given.
        got: usize,
    },
}

impl fmt::Display for PduError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PduError::Short(n) => write!(f, "a PDU of {n} bytes (a header is {BHS_LEN})"),
            PduError::TooLong(n) => {
                write!(f, "a data segment of {n} bytes (at most {MAX_DATA_SEGMENT} accepted)")
            }
            PduError::Length { expected, got } => {
                write!(f, "a PDU of {got} bytes where its header says {expected}")
            }
        }
    }
}

impl std::error::Error for PduError {}

/// One field of a header, and how it is read and written: [`Byte`], [`Be16`], [`Be32`] and
/// [`Be64`] at a byte offset, [`Bytes`] (an array) from one, [`Bit`] (a byte and its mask) and
/// [`Bits`] (a byte, a shift and a mask). Writing ORs into a header that starts zeroed, so the
/// fields of one byte share it.
struct Byte;
struct Be16;
struct Be32;
struct Be64;
struct Bytes;
struct Bit;
struct Bits;

impl Byte {
    fn get(b: &Bhs, at: usize) -> u8 {
        b.0[at]
    }
    fn put(b: &mut Bhs, at: usize, v: &u8) {
        b.0[at] |= *v;
    }
}

impl Be16 {
    fn get(b: &Bhs, at: usize) -> u16 {
        u16::from_be_bytes(Bytes::get(b, at))
    }
    fn put(b: &mut Bhs, at: usize, v: &u16) {
        Bytes::put(b, at, &v.to_be_bytes());
    }
}

impl Be32 {
    fn get(b: &Bhs, at: usize) -> u32 {
        u32::from_be_bytes(Bytes::get(b, at))
    }
    fn put(b: &mut Bhs, at: usize, v: &u32) {
        Bytes::put(b, at, &v.to_be_bytes());
    }
}

impl Be64 {
    fn get(b: &Bhs, at: usize) -> u64 {
        u64::from_be_bytes(Bytes::get(b, at))
    }
    fn put(b: &mut Bhs, at: usize, v: &u64) {
        Bytes::put(b, at, &v.to_be_bytes());
    }
}

impl Bytes {
    fn get<const N: usize>(b: &Bhs, at: usize) -> [u8; N] {
        let mut out = [0; N];
        out.copy_from_slice(&b.0[at..at + N]);
        out
    }
    fn put<const N: usize>(b: &mut Bhs, at: usize, v: &[u8; N]) {
        b.0[at..at + N].copy_from_slice(v);
    }
}

impl Bit {
    fn get(b: &Bhs, at: usize, mask: u8) -> bool {
        b.0[at] & mask != 0
    }
    fn put(b: &mut Bhs, at: usize, mask: u8, on: &bool) {
        if *on {
            b.0[at] |= mask;
        }
    }
}

impl Bits {
    fn get(b: &Bhs, at: usize, shift: u8, mask: u8) -> u8 {
        (b.0[at] >> shift) & mask
    }
    fn put(b: &mut Bhs, at: usize, shift: u8, mask: u8, v: &u8) {
        b.0[at] |= (v & mask) << shift;
    }
}

/// The PDUs this initiator reads or writes, each declared once as the layout of its header:
/// every field with where it sits, and the bits a sender always sets (`sets`, ignored on
/// decode like the reserved ones). From it come the struct, its decoder and its encoder, so
/// the two cannot disagree on an offset; and [`Pdu`] with a variant for each.
macro_rules! pdus {
    ($(
        $(#[$doc:meta])*
        $name:ident = $op:ident $(sets $skind:ident($($sarg:expr),*) = $sv:expr;)* {
            $($(#[$fdoc:meta])* $field:ident: $ty:ty = $kind:ident($($arg:expr),*),)*
        }
    )*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, PartialEq, Eq)]
            pub struct $name {
                $($(#[$fdoc])* pub $field: $ty,)*
                /// The data segment (without its padding).
                pub data: Vec<u8>,
            }

            impl $name {
                fn from_header(b: &Bhs, data: Vec<u8>) -> $name {
                    $name { $($field: $kind::get(b, $($arg),*),)* data }
                }

                fn header(&self) -> Bhs {
                    let mut b = Bhs([0; BHS_LEN]);
                    b.0[0] = opcode::$op;
                    $($skind::put(&mut b, $($sarg,)* &$sv);)*
                    $($kind::put(&mut b, $($arg,)* &self.$field);)*
                    b
                }
            }
        )*

        /// One PDU.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Pdu {
            $($name($name),)*
            Other(Other),
        }

        impl Pdu {
            /// The PDU a header (and its data segment) holds.
            fn from_header(b: Bhs, data: Vec<u8>) -> Pdu {
                match b.0[0] & 0x3f {
                    $(opcode::$op => Pdu::$name($name::from_header(&b, data)),)*
                    _ => {
                        let mut bhs = b.0;
                        bhs[4..8].fill(0);
                        Pdu::Other(Other { bhs: Box::new(bhs), data })
                    }
                }
            }

            /// The header (its length fields not yet written) and the data segment.
            fn header(&self) -> (Bhs, &[u8]) {
                match self {
                    $(Pdu::$name(p) => (p.header(), &p.data[..]),)*
                    Pdu::Other(p) => (Bhs(*p.bhs), &p.data[..]),
                }
            }
        }
    };
}

pdus! {
    /// Login Request (§11.12).
    LoginRequest = LOGIN_REQUEST sets Bit(0, IMMEDIATE) = true; {
        transit: bool = Bit(1, FINAL),
        cont: bool = Bit(1, CONTINUE),
        csg: u8 = Bits(1, 2, 3),
        nsg: u8 = Bits(1, 0, 3),
        version_max: u8 = Byte(2),
        version_min: u8 = Byte(3),
        isid: [u8; 6] = Bytes(8),
        tsih: u16 = Be16(14),
        itt: u32 = Be32(16),
        cid: u16 = Be16(20),
        cmd_sn: u32 = Be32(24),
        exp_stat_sn: u32 = Be32(28),
    }

    /// Login Response (§11.13).
    LoginResponse = LOGIN_RESPONSE {
        transit: bool = Bit(1, FINAL),
        cont: bool = Bit(1, CONTINUE),
        csg: u8 = Bits(1, 2, 3),
        nsg: u8 = Bits(1, 0, 3),
        version_max: u8 = Byte(2),
        version_active: u8 = Byte(3),
        isid: [u8; 6] = Bytes(8),
        tsih: u16 = Be16(14),
        itt: u32 = Be32(16),
        stat_sn: u32 = Be32(24),
        exp_cmd_sn: u32 = Be32(28),
        max_cmd_sn: u32 = Be32(32),
        status_class: u8 = Byte(36),
        status_detail: u8 = Byte(37),
    }

    /// Text Request (§11.10).
    TextRequest = TEXT_REQUEST {
        immediate: bool = Bit(0, IMMEDIATE),
        final_: bool = Bit(1, FINAL),
        cont: bool = Bit(1, CONTINUE),
        lun: u64 = Be64(8),
        itt: u32 = Be32(16),
        ttt: u32 = Be32(20),
        cmd_sn: u32 = Be32(24),
        exp_stat_sn: u32 = Be32(28),
    }

    /// Text Response (§11.11).
    TextResponse = TEXT_RESPONSE {
        final_: bool = Bit(1, FINAL),
        cont: bool = Bit(1, CONTINUE),
        lun: u64 = Be64(8),
        itt: u32 = Be32(16),
        ttt: u32 = Be32(20),
        stat_sn: u32 = Be32(24),
        exp_cmd_sn: u32 = Be32(28),
        max_cmd_sn: u32 = Be32(32),
    }

    /// SCSI Command (§11.3).
    ScsiCommand = SCSI_COMMAND {
        immediate: bool = Bit(0, IMMEDIATE),
        final_: bool = Bit(1, FINAL),
        read: bool = Bit(1, 0x40),
        write: bool = Bit(1, 0x20),
        /// Task attributes (three bits).
        attr: u8 = Bits(1, 0, 7),
        lun: u64 = Be64(8),
        itt: u32 = Be32(16),
        expected_length: u32 = Be32(20),
        cmd_sn: u32 = Be32(24),
        exp_stat_sn: u32 = Be32(28),
        cdb: [u8; 16] = Bytes(32),
    }

    /// SCSI Response (§11.4); its data segment is SenseLength, sense data, then response data.
    ScsiResponse = SCSI_RESPONSE sets Bit(1, FINAL) = true; {
        /// The o, u, O and U bits (`0x10`, `0x08`, `0x04`, `0x02`).
        flags: u8 = Bits(1, 0, 0x1e),
        response: u8 = Byte(2),
        status: u8 = Byte(3),
        itt: u32 = Be32(16),
        snack_tag: u32 = Be32(20),
        stat_sn: u32 = Be32(24),
        exp_cmd_sn: u32 = Be32(28),
        max_cmd_sn: u32 = Be32(32),
        exp_data_sn: u32 = Be32(36),
        bidi_residual: u32 = Be32(40),
        residual: u32 = Be32(44),
    }

    /// SCSI Data-In (§11.7).
    DataIn = DATA_IN {
        final_: bool = Bit(1, FINAL),
        ack: bool = Bit(1, 0x40),
        overflow: bool = Bit(1, 0x04),
        underflow: bool = Bit(1, 0x02),
        /// The S bit: `status` (and `stat_sn`) are valid, no SCSI Response follows.
        has_status: bool = Bit(1, 0x01),
        status: u8 = Byte(3),
        lun: u64 = Be64(8),
        itt: u32 = Be32(16),
        ttt: u32 = Be32(20),
        stat_sn: u32 = Be32(24),
        exp_cmd_sn: u32 = Be32(28),
        max_cmd_sn: u32 = Be32(32),
        data_sn: u32 = Be32(36),
        offset: u32 = Be32(40),
        residual: u32 = Be32(44),
    }

    /// Logout Request (§11.14); the RFC gives it no data segment (one received is kept).
    LogoutRequest = LOGOUT_REQUEST sets Bit(1, FINAL) = true; {
        immediate: bool = Bit(0, IMMEDIATE),
        /// Reason code (seven bits): 0 closes the session.
        reason: u8 = Bits(1, 0, 0x7f),
        itt: u32 = Be32(16),
        cid: u16 = Be16(20),
        cmd_sn: u32 = Be32(24),
        exp_stat_sn: u32 = Be32(28),
    }

    /// Logout Response (§11.15); no data segment either.
    LogoutResponse = LOGOUT_RESPONSE sets Bit(1, FINAL) = true; {
        response: u8 = Byte(2),
        itt: u32 = Be32(16),
        stat_sn: u32 = Be32(24),
        exp_cmd_sn: u32 = Be32(28),
        max_cmd_sn: u32 = Be32(32),
        time2wait: u16 = Be16(40),
        time2retain: u16 = Be16(42),
    }

    /// NOP-Out (§11.18).
    NopOut = NOP_OUT sets Bit(1, FINAL) = true; {
        immediate: bool = Bit(0, IMMEDIATE),
        lun: u64 = Be64(8),
        itt: u32 = Be32(16),
        ttt: u32 = Be32(20),
        cmd_sn: u32 = Be32(24),
        exp_stat_sn: u32 = Be32(28),
    }

    /// NOP-In (§11.19).
    NopIn = NOP_IN sets Bit(1, FINAL) = true; {
        lun: u64 = Be64(8),
        itt: u32 = Be32(16),
        ttt: u32 = Be32(20),
        stat_sn: u32 = Be32(24),
        exp_cmd_sn: u32 = Be32(28),
        max_cmd_sn: u32 = Be32(32),
    }

    /// Reject (§11.17): the data segment is the rejected PDU's header.
    Reject = REJECT sets Bit(1, FINAL) = true; sets Be32(16) = 0xffff_ffff; {
        reason: u8 = Byte(2),
        stat_sn: u32 = Be32(24),
        exp_cmd_sn: u32 = Be32(28),
        max_cmd_sn: u32 = Be32(32),
        data_sn: u32 = Be32(36),
    }
}

/// A PDU of an opcode this initiator does not use (Async Message, R2T, ...), header kept with
/// its length fields zeroed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Other {
    pub bhs: Box<[u8; BHS_LEN]>,
    pub data: Vec<u8>,
}

impl Other {
    /// The opcode (six bits).
    pub fn opcode(&self) -> u8 {
        self.bhs[0] & 0x3f
    }
}

/// A header being read or written, with the RFC's big-endian fields.
struct Bhs([u8; BHS_LEN]);

fn padded(len: usize) -> usize {
    len.div_ceil(4) * 4
}

/// The whole frame's length (header, AHS, padded data segment) from its first [`BHS_LEN`]
/// bytes, or why the header is refused.
pub fn frame_len(header: &[u8]) -> Result<usize, PduError> {
    if header.len() < BHS_LEN {
        return Err(PduError::Short(header.len()));
    }
    let ahs = usize::from(header[4]) * 4;
    let data = usize::from(header[5]) << 16 | usize::from(header[6]) << 8 | usize::from(header[7]);
    if data > MAX_DATA_SEGMENT {
        return Err(PduError::TooLong(data));
    }
    Ok(BHS_LEN + ahs + padded(data))
}

impl Pdu {
    /// Decodes one whole frame (exactly [`frame_len`] bytes).
    pub fn decode(frame: &[u8]) -> Result<Pdu, PduError> {
        let expected = frame_len(frame)?;
        if frame.len() != expected {
            return Err(PduError::Length { expected, got: frame.len() });
        }
        let mut bhs = Bhs([0; BHS_LEN]);
        bhs.0.copy_from_slice(&frame[..BHS_LEN]);
        let start = BHS_LEN + usize::from(bhs.0[4]) * 4;
        let len = usize::from(bhs.0[5]) << 16 | usize::from(bhs.0[6]) << 8 | usize::from(bhs.0[7]);
        let data = frame[start..start + len].to_vec();
        Ok(Pdu::from_header(bhs, data))
    }

    /// The frame: header, data segment, padding.
    pub fn encode(&self) -> Vec<u8> {
        let (mut bhs, data) = self.header();
        // Data segments here are ours or were decoded under MAX_DATA_SEGMENT: 24 bits hold them.
        let len = data.len().min(0xff_ffff);
        bhs.0[4] = 0;
        bhs.0[5..8].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
        let mut out = Vec::with_capacity(BHS_LEN + padded(len));
        out.extend_from_slice(&bhs.0);
        out.extend_from_slice(&data[..len]);
        out.resize(BHS_LEN + padded(len), 0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(pdu: Pdu) {
        let bytes = pdu.encode();
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(frame_len(&bytes), Ok(bytes.len()));
        assert_eq!(Pdu::decode(&bytes), Ok(pdu));
    }

    fn login() -> LoginRequest {
        LoginRequest {
            transit: true,
            cont: false,
            csg: 0,
            nsg: 1,
            version_max: 0,
            version_min: 0,
            isid: [0x80, 1, 2, 3, 0x62, 0x76],
            tsih: 0,
            itt: 7,
            cid: 0,
            cmd_sn: 1,
            exp_stat_sn: 0,
            data: b"InitiatorName=iqn.x\0".to_vec(),
        }
    }

    #[test]
    fn a_login_request_has_the_rfc_layout() {
        let bytes = Pdu::LoginRequest(login()).encode();
        assert_eq!(bytes[0], 0x43, "immediate, opcode 3");
        assert_eq!(bytes[1], 0x81, "T, CSG 0, NSG 1");
        assert_eq!(&bytes[5..8], &[0, 0, 20]);
        assert_eq!(&bytes[8..14], &[0x80, 1, 2, 3, 0x62, 0x76]);
        assert_eq!(&bytes[16..20], &[0, 0, 0, 7]);
        assert_eq!(&bytes[24..28], &[0, 0, 0, 1]);
        assert_eq!(bytes.len(), 48 + 20);
        round_trip(Pdu::LoginRequest(login()));
    }

    #[test]
    fn every_pdu_round_trips() {
        let mut odd = login();
        odd.data = b"abcde".to_vec();
        odd.cont = true;
        odd.csg = 1;
        odd.nsg = 3;
        round_trip(Pdu::LoginRequest(odd));
        round_trip(Pdu::LoginResponse(LoginResponse {
            transit: true,
            cont: false,
            csg: 1,
            nsg: 3,
            version_max: 0,
            version_active: 0,
            isid: [1; 6],
            tsih: 9,
            itt: 2,
            stat_sn: 3,
            exp_cmd_sn: 4,
            max_cmd_sn: 5,
            status_class: 2,
            status_detail: 1,
            data: vec![1, 2, 3],
        }));
        round_trip(Pdu::TextRequest(TextRequest {
            immediate: true,
            final_: true,
            cont: false,
            lun: 0x0001_0000_0000_0000,
            itt: 1,
            ttt: 0xffff_ffff,
            cmd_sn: 2,
            exp_stat_sn: 3,
            data: b"SendTargets=All\0".to_vec(),
        }));
        round_trip(Pdu::TextResponse(TextResponse {
            final_: false,
            cont: true,
            lun: 5,
            itt: 1,
            ttt: 6,
            stat_sn: 2,
            exp_cmd_sn: 3,
            max_cmd_sn: 4,
            data: vec![9; 7],
        }));
        round_trip(Pdu::ScsiCommand(ScsiCommand {
            immediate: false,
            final_: true,
            read: true,
            write: false,
            attr: 1,
            lun: 0x0001_0000_0000_0000,
            itt: 3,
            expected_length: 8,
            cmd_sn: 10,
            exp_stat_sn: 11,
            cdb: [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            data: Vec::new(),
        }));
        round_trip(Pdu::ScsiResponse(ScsiResponse {
            flags: 0x02,
            response: 0,
            status: 2,
            itt: 3,
            snack_tag: 0,
            stat_sn: 4,
            exp_cmd_sn: 5,
            max_cmd_sn: 6,
            exp_data_sn: 1,
            bidi_residual: 0,
            residual: 12,
            data: vec![0, 2, 0x70, 0],
        }));
        round_trip(Pdu::DataIn(DataIn {
            final_: true,
            ack: false,
            overflow: false,
            underflow: true,
            has_status: true,
            status: 0,
            lun: 1,
            itt: 3,
            ttt: 0xffff_ffff,
            stat_sn: 4,
            exp_cmd_sn: 5,
            max_cmd_sn: 6,
            data_sn: 0,
            offset: 0,
            residual: 2,
            data: vec![0, 0, 0, 8, 0, 0, 2, 0],
        }));
    }

    #[test]
    fn the_small_pdus_round_trip() {
        round_trip(Pdu::LogoutRequest(LogoutRequest {
            immediate: true,
            reason: 0,
            itt: 9,
            cid: 0,
            cmd_sn: 12,
            exp_stat_sn: 13,
            data: Vec::new(),
        }));
        round_trip(Pdu::LogoutResponse(LogoutResponse {
            response: 0,
            itt: 9,
            stat_sn: 13,
            exp_cmd_sn: 12,
            max_cmd_sn: 44,
            time2wait: 2,
            time2retain: 20,
            data: Vec::new(),
        }));
        let nop = NopOut {
            immediate: true,
            lun: 0,
            itt: 0xffff_ffff,
            ttt: 5,
            cmd_sn: 1,
            exp_stat_sn: 2,
            data: Vec::new(),
        };
        round_trip(Pdu::NopOut(nop));
        round_trip(Pdu::NopIn(NopIn {
            lun: 0,
            itt: 0xffff_ffff,
            ttt: 5,
            stat_sn: 1,
            exp_cmd_sn: 2,
            max_cmd_sn: 3,
            data: vec![1],
        }));
        round_trip(Pdu::Reject(Reject {
            reason: 4,
            stat_sn: 1,
            exp_cmd_sn: 2,
            max_cmd_sn: 3,
            data_sn: 0,
            data: vec![0; 48],
        }));
        let mut bhs = Box::new([0u8; BHS_LEN]);
        bhs[0] = 0x32;
        bhs[36] = 1;
        round_trip(Pdu::Other(Other { bhs, data: vec![7, 7] }));
    }

    #[test]
    fn decode_is_bounded_and_total() {
        assert_eq!(Pdu::decode(&[0; 47]), Err(PduError::Short(47)));
        let mut huge = [0u8; 48];
        huge[5] = 0xff;
        assert!(matches!(frame_len(&huge), Err(PduError::TooLong(_))));
        let mut with_data = Pdu::LoginRequest(login()).encode();
        with_data.pop();
        assert!(matches!(Pdu::decode(&with_data), Err(PduError::Length { .. })));
        // An AHS is skipped: the data segment follows it.
        let mut ahs = vec![0u8; 48 + 8 + 4];
        ahs[0] = opcode::NOP_IN;
        ahs[4] = 2;
        ahs[7] = 3;
        ahs[56..59].copy_from_slice(b"abc");
        let Ok(Pdu::NopIn(nop)) = Pdu::decode(&ahs) else { panic!("not a NOP-In") };
        assert_eq!(nop.data, b"abc");
    }
}
