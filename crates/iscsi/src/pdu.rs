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

/// Login Request (§11.12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRequest {
    pub transit: bool,
    pub cont: bool,
    pub csg: u8,
    pub nsg: u8,
    pub version_max: u8,
    pub version_min: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub data: Vec<u8>,
}

/// Login Response (§11.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginResponse {
    pub transit: bool,
    pub cont: bool,
    pub csg: u8,
    pub nsg: u8,
    pub version_max: u8,
    pub version_active: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub status_class: u8,
    pub status_detail: u8,
    pub data: Vec<u8>,
}

/// Text Request (§11.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRequest {
    pub immediate: bool,
    pub final_: bool,
    pub cont: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub data: Vec<u8>,
}

/// Text Response (§11.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextResponse {
    pub final_: bool,
    pub cont: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data: Vec<u8>,
}

/// SCSI Command (§11.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiCommand {
    pub immediate: bool,
    pub final_: bool,
    pub read: bool,
    pub write: bool,
    /// Task attributes (three bits).
    pub attr: u8,
    pub lun: u64,
    pub itt: u32,
    pub expected_length: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub cdb: [u8; 16],
    pub data: Vec<u8>,
}

/// SCSI Response (§11.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiResponse {
    /// The o, u, O and U bits (`0x10`, `0x08`, `0x04`, `0x02`).
    pub flags: u8,
    pub response: u8,
    pub status: u8,
    pub itt: u32,
    pub snack_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub exp_data_sn: u32,
    pub bidi_residual: u32,
    pub residual: u32,
    /// SenseLength, sense data, then response data.
    pub data: Vec<u8>,
}

/// SCSI Data-In (§11.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataIn {
    pub final_: bool,
    pub ack: bool,
    pub overflow: bool,
    pub underflow: bool,
    /// The S bit: `status` (and `stat_sn`) are valid, no SCSI Response follows.
    pub has_status: bool,
    pub status: u8,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
    pub offset: u32,
    pub residual: u32,
    pub data: Vec<u8>,
}

/// Logout Request (§11.14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutRequest {
    pub immediate: bool,
    /// Reason code (seven bits): 0 closes the session.
    pub reason: u8,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// Logout Response (§11.15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutResponse {
    pub response: u8,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub time2wait: u16,
    pub time2retain: u16,
}

/// NOP-Out (§11.18).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopOut {
    pub immediate: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub data: Vec<u8>,
}

/// NOP-In (§11.19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopIn {
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data: Vec<u8>,
}

/// Reject (§11.17): the data segment is the rejected PDU's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub reason: u8,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
    pub data: Vec<u8>,
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

/// One PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pdu {
    LoginRequest(LoginRequest),
    LoginResponse(LoginResponse),
    TextRequest(TextRequest),
    TextResponse(TextResponse),
    ScsiCommand(ScsiCommand),
    ScsiResponse(ScsiResponse),
    DataIn(DataIn),
    LogoutRequest(LogoutRequest),
    LogoutResponse(LogoutResponse),
    NopOut(NopOut),
    NopIn(NopIn),
    Reject(Reject),
    Other(Other),
}

/// A header being read or written, with the RFC's big-endian fields.
struct Bhs([u8; BHS_LEN]);

impl Bhs {
    fn u16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.0[at], self.0[at + 1]])
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_be_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }
    fn u64(&self, at: usize) -> u64 {
        let mut b = [0; 8];
        b.copy_from_slice(&self.0[at..at + 8]);
        u64::from_be_bytes(b)
    }
    fn bit(&self, at: usize, mask: u8) -> bool {
        self.0[at] & mask != 0
    }
    fn put16(&mut self, at: usize, v: u16) {
        self.0[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    fn put32(&mut self, at: usize, v: u32) {
        self.0[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    fn put64(&mut self, at: usize, v: u64) {
        self.0[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
    fn flag(&mut self, at: usize, mask: u8, on: bool) {
        if on {
            self.0[at] |= mask;
        }
    }
}

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
        Ok(match bhs.0[0] & 0x3f {
            opcode::LOGIN_REQUEST => Pdu::LoginRequest(login_request(&bhs, data)),
            opcode::LOGIN_RESPONSE => Pdu::LoginResponse(login_response(&bhs, data)),
            opcode::TEXT_REQUEST => Pdu::TextRequest(text_request(&bhs, data)),
            opcode::TEXT_RESPONSE => Pdu::TextResponse(text_response(&bhs, data)),
            opcode::SCSI_COMMAND => Pdu::ScsiCommand(scsi_command(&bhs, data)),
            opcode::SCSI_RESPONSE => Pdu::ScsiResponse(scsi_response(&bhs, data)),
            opcode::DATA_IN => Pdu::DataIn(data_in(&bhs, data)),
            opcode::LOGOUT_REQUEST => Pdu::LogoutRequest(logout_request(&bhs)),
            opcode::LOGOUT_RESPONSE => Pdu::LogoutResponse(logout_response(&bhs)),
            opcode::NOP_OUT => Pdu::NopOut(nop_out(&bhs, data)),
            opcode::NOP_IN => Pdu::NopIn(nop_in(&bhs, data)),
            opcode::REJECT => Pdu::Reject(reject(&bhs, data)),
            _ => {
                bhs.0[4..8].fill(0);
                Pdu::Other(Other { bhs: Box::new(bhs.0), data })
            }
        })
    }

    /// The frame: header, data segment, padding.
    pub fn encode(&self) -> Vec<u8> {
        let (bhs, data) = match self {
            Pdu::LoginRequest(p) => (enc_login_request(p), &p.data[..]),
            Pdu::LoginResponse(p) => (enc_login_response(p), &p.data[..]),
            Pdu::TextRequest(p) => (enc_text_request(p), &p.data[..]),
            Pdu::TextResponse(p) => (enc_text_response(p), &p.data[..]),
            Pdu::ScsiCommand(p) => (enc_scsi_command(p), &p.data[..]),
            Pdu::ScsiResponse(p) => (enc_scsi_response(p), &p.data[..]),
            Pdu::DataIn(p) => (enc_data_in(p), &p.data[..]),
            Pdu::LogoutRequest(p) => (enc_logout_request(p), &[][..]),
            Pdu::LogoutResponse(p) => (enc_logout_response(p), &[][..]),
            Pdu::NopOut(p) => (enc_nop_out(p), &p.data[..]),
            Pdu::NopIn(p) => (enc_nop_in(p), &p.data[..]),
            Pdu::Reject(p) => (enc_reject(p), &p.data[..]),
            Pdu::Other(p) => (Bhs(*p.bhs), &p.data[..]),
        };
        let mut bhs = bhs;
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

fn start(op: u8, immediate: bool) -> Bhs {
    let mut b = Bhs([0; BHS_LEN]);
    b.0[0] = op | if immediate { IMMEDIATE } else { 0 };
    b
}

fn stages(b: &Bhs) -> (bool, bool, u8, u8) {
    (b.bit(1, FINAL), b.bit(1, CONTINUE), (b.0[1] >> 2) & 3, b.0[1] & 3)
}

fn put_stages(b: &mut Bhs, transit: bool, cont: bool, csg: u8, nsg: u8) {
    b.flag(1, FINAL, transit);
    b.flag(1, CONTINUE, cont);
    b.0[1] |= (csg & 3) << 2 | (nsg & 3);
}

fn isid(b: &Bhs) -> [u8; 6] {
    let mut isid = [0; 6];
    isid.copy_from_slice(&b.0[8..14]);
    isid
}

fn login_request(b: &Bhs, data: Vec<u8>) -> LoginRequest {
    let (transit, cont, csg, nsg) = stages(b);
    LoginRequest {
        transit,
        cont,
        csg,
        nsg,
        version_max: b.0[2],
        version_min: b.0[3],
        isid: isid(b),
        tsih: b.u16(14),
        itt: b.u32(16),
        cid: b.u16(20),
        cmd_sn: b.u32(24),
        exp_stat_sn: b.u32(28),
        data,
    }
}

fn enc_login_request(p: &LoginRequest) -> Bhs {
    let mut b = start(opcode::LOGIN_REQUEST, true);
    put_stages(&mut b, p.transit, p.cont, p.csg, p.nsg);
    b.0[2] = p.version_max;
    b.0[3] = p.version_min;
    b.0[8..14].copy_from_slice(&p.isid);
    b.put16(14, p.tsih);
    b.put32(16, p.itt);
    b.put16(20, p.cid);
    b.put32(24, p.cmd_sn);
    b.put32(28, p.exp_stat_sn);
    b
}

fn login_response(b: &Bhs, data: Vec<u8>) -> LoginResponse {
    let (transit, cont, csg, nsg) = stages(b);
    LoginResponse {
        transit,
        cont,
        csg,
        nsg,
        version_max: b.0[2],
        version_active: b.0[3],
        isid: isid(b),
        tsih: b.u16(14),
        itt: b.u32(16),
        stat_sn: b.u32(24),
        exp_cmd_sn: b.u32(28),
        max_cmd_sn: b.u32(32),
        status_class: b.0[36],
        status_detail: b.0[37],
        data,
    }
}

fn enc_login_response(p: &LoginResponse) -> Bhs {
    let mut b = start(opcode::LOGIN_RESPONSE, false);
    put_stages(&mut b, p.transit, p.cont, p.csg, p.nsg);
    b.0[2] = p.version_max;
    b.0[3] = p.version_active;
    b.0[8..14].copy_from_slice(&p.isid);
    b.put16(14, p.tsih);
    b.put32(16, p.itt);
    b.put32(24, p.stat_sn);
    b.put32(28, p.exp_cmd_sn);
    b.put32(32, p.max_cmd_sn);
    b.0[36] = p.status_class;
    b.0[37] = p.status_detail;
    b
}

fn text_request(b: &Bhs, data: Vec<u8>) -> TextRequest {
    TextRequest {
        immediate: b.bit(0, IMMEDIATE),
        final_: b.bit(1, FINAL),
        cont: b.bit(1, CONTINUE),
        lun: b.u64(8),
        itt: b.u32(16),
        ttt: b.u32(20),
        cmd_sn: b.u32(24),
        exp_stat_sn: b.u32(28),
        data,
    }
}

fn enc_text_request(p: &TextRequest) -> Bhs {
    let mut b = start(opcode::TEXT_REQUEST, p.immediate);
    b.flag(1, FINAL, p.final_);
    b.flag(1, CONTINUE, p.cont);
    b.put64(8, p.lun);
    b.put32(16, p.itt);
    b.put32(20, p.ttt);
    b.put32(24, p.cmd_sn);
    b.put32(28, p.exp_stat_sn);
    b
}

fn text_response(b: &Bhs, data: Vec<u8>) -> TextResponse {
    TextResponse {
        final_: b.bit(1, FINAL),
        cont: b.bit(1, CONTINUE),
        lun: b.u64(8),
        itt: b.u32(16),
        ttt: b.u32(20),
        stat_sn: b.u32(24),
        exp_cmd_sn: b.u32(28),
        max_cmd_sn: b.u32(32),
        data,
    }
}

fn enc_text_response(p: &TextResponse) -> Bhs {
    let mut b = start(opcode::TEXT_RESPONSE, false);
    b.flag(1, FINAL, p.final_);
    b.flag(1, CONTINUE, p.cont);
    b.put64(8, p.lun);
    b.put32(16, p.itt);
    b.put32(20, p.ttt);
    b.put32(24, p.stat_sn);
    b.put32(28, p.exp_cmd_sn);
    b.put32(32, p.max_cmd_sn);
    b
}

fn scsi_command(b: &Bhs, data: Vec<u8>) -> ScsiCommand {
    let mut cdb = [0; 16];
    cdb.copy_from_slice(&b.0[32..48]);
    ScsiCommand {
        immediate: b.bit(0, IMMEDIATE),
        final_: b.bit(1, FINAL),
        read: b.bit(1, 0x40),
        write: b.bit(1, 0x20),
        attr: b.0[1] & 7,
        lun: b.u64(8),
        itt: b.u32(16),
        expected_length: b.u32(20),
        cmd_sn: b.u32(24),
        exp_stat_sn: b.u32(28),
        cdb,
        data,
    }
}

fn enc_scsi_command(p: &ScsiCommand) -> Bhs {
    let mut b = start(opcode::SCSI_COMMAND, p.immediate);
    b.flag(1, FINAL, p.final_);
    b.flag(1, 0x40, p.read);
    b.flag(1, 0x20, p.write);
    b.0[1] |= p.attr & 7;
    b.put64(8, p.lun);
    b.put32(16, p.itt);
    b.put32(20, p.expected_length);
    b.put32(24, p.cmd_sn);
    b.put32(28, p.exp_stat_sn);
    b.0[32..48].copy_from_slice(&p.cdb);
    b
}

fn scsi_response(b: &Bhs, data: Vec<u8>) -> ScsiResponse {
    ScsiResponse {
        flags: b.0[1] & 0x1e,
        response: b.0[2],
        status: b.0[3],
        itt: b.u32(16),
        snack_tag: b.u32(20),
        stat_sn: b.u32(24),
        exp_cmd_sn: b.u32(28),
        max_cmd_sn: b.u32(32),
        exp_data_sn: b.u32(36),
        bidi_residual: b.u32(40),
        residual: b.u32(44),
        data,
    }
}

fn enc_scsi_response(p: &ScsiResponse) -> Bhs {
    let mut b = start(opcode::SCSI_RESPONSE, false);
    b.0[1] = FINAL | (p.flags & 0x1e);
    b.0[2] = p.response;
    b.0[3] = p.status;
    b.put32(16, p.itt);
    b.put32(20, p.snack_tag);
    b.put32(24, p.stat_sn);
    b.put32(28, p.exp_cmd_sn);
    b.put32(32, p.max_cmd_sn);
    b.put32(36, p.exp_data_sn);
    b.put32(40, p.bidi_residual);
    b.put32(44, p.residual);
    b
}

fn data_in(b: &Bhs, data: Vec<u8>) -> DataIn {
    DataIn {
        final_: b.bit(1, FINAL),
        ack: b.bit(1, 0x40),
        overflow: b.bit(1, 0x04),
        underflow: b.bit(1, 0x02),
        has_status: b.bit(1, 0x01),
        status: b.0[3],
        lun: b.u64(8),
        itt: b.u32(16),
        ttt: b.u32(20),
        stat_sn: b.u32(24),
        exp_cmd_sn: b.u32(28),
        max_cmd_sn: b.u32(32),
        data_sn: b.u32(36),
        offset: b.u32(40),
        residual: b.u32(44),
        data,
    }
}

fn enc_data_in(p: &DataIn) -> Bhs {
    let mut b = start(opcode::DATA_IN, false);
    b.flag(1, FINAL, p.final_);
    b.flag(1, 0x40, p.ack);
    b.flag(1, 0x04, p.overflow);
    b.flag(1, 0x02, p.underflow);
    b.flag(1, 0x01, p.has_status);
    b.0[3] = p.status;
    b.put64(8, p.lun);
    b.put32(16, p.itt);
    b.put32(20, p.ttt);
    b.put32(24, p.stat_sn);
    b.put32(28, p.exp_cmd_sn);
    b.put32(32, p.max_cmd_sn);
    b.put32(36, p.data_sn);
    b.put32(40, p.offset);
    b.put32(44, p.residual);
    b
}

fn logout_request(b: &Bhs) -> LogoutRequest {
    LogoutRequest {
        immediate: b.bit(0, IMMEDIATE),
        reason: b.0[1] & 0x7f,
        itt: b.u32(16),
        cid: b.u16(20),
        cmd_sn: b.u32(24),
        exp_stat_sn: b.u32(28),
    }
}

fn enc_logout_request(p: &LogoutRequest) -> Bhs {
    let mut b = start(opcode::LOGOUT_REQUEST, p.immediate);
    b.0[1] = FINAL | (p.reason & 0x7f);
    b.put32(16, p.itt);
    b.put16(20, p.cid);
    b.put32(24, p.cmd_sn);
    b.put32(28, p.exp_stat_sn);
    b
}

fn logout_response(b: &Bhs) -> LogoutResponse {
    LogoutResponse {
        response: b.0[2],
        itt: b.u32(16),
        stat_sn: b.u32(24),
        exp_cmd_sn: b.u32(28),
        max_cmd_sn: b.u32(32),
        time2wait: b.u16(40),
        time2retain: b.u16(42),
    }
}

fn enc_logout_response(p: &LogoutResponse) -> Bhs {
    let mut b = start(opcode::LOGOUT_RESPONSE, false);
    b.0[1] = FINAL;
    b.0[2] = p.response;
    b.put32(16, p.itt);
    b.put32(24, p.stat_sn);
    b.put32(28, p.exp_cmd_sn);
    b.put32(32, p.max_cmd_sn);
    b.put16(40, p.time2wait);
    b.put16(42, p.time2retain);
    b
}

fn nop_out(b: &Bhs, data: Vec<u8>) -> NopOut {
    NopOut {
        immediate: b.bit(0, IMMEDIATE),
        lun: b.u64(8),
        itt: b.u32(16),
        ttt: b.u32(20),
        cmd_sn: b.u32(24),
        exp_stat_sn: b.u32(28),
        data,
    }
}

fn enc_nop_out(p: &NopOut) -> Bhs {
    let mut b = start(opcode::NOP_OUT, p.immediate);
    b.0[1] = FINAL;
    b.put64(8, p.lun);
    b.put32(16, p.itt);
    b.put32(20, p.ttt);
    b.put32(24, p.cmd_sn);
    b.put32(28, p.exp_stat_sn);
    b
}

fn nop_in(b: &Bhs, data: Vec<u8>) -> NopIn {
    NopIn {
        lun: b.u64(8),
        itt: b.u32(16),
        ttt: b.u32(20),
        stat_sn: b.u32(24),
        exp_cmd_sn: b.u32(28),
        max_cmd_sn: b.u32(32),
        data,
    }
}

fn enc_nop_in(p: &NopIn) -> Bhs {
    let mut b = start(opcode::NOP_IN, false);
    b.0[1] = FINAL;
    b.put64(8, p.lun);
    b.put32(16, p.itt);
    b.put32(20, p.ttt);
    b.put32(24, p.stat_sn);
    b.put32(28, p.exp_cmd_sn);
    b.put32(32, p.max_cmd_sn);
    b
}

fn reject(b: &Bhs, data: Vec<u8>) -> Reject {
    Reject {
        reason: b.0[2],
        stat_sn: b.u32(24),
        exp_cmd_sn: b.u32(28),
        max_cmd_sn: b.u32(32),
        data_sn: b.u32(36),
        data,
    }
}

fn enc_reject(p: &Reject) -> Bhs {
    let mut b = start(opcode::REJECT, false);
    b.0[1] = FINAL;
    b.0[2] = p.reason;
    b.put32(16, 0xffff_ffff);
    b.put32(24, p.stat_sn);
    b.put32(28, p.exp_cmd_sn);
    b.put32(32, p.max_cmd_sn);
    b.put32(36, p.data_sn);
    b
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
        }));
        round_trip(Pdu::LogoutResponse(LogoutResponse {
            response: 0,
            itt: 9,
            stat_sn: 13,
            exp_cmd_sn: 12,
            max_cmd_sn: 44,
            time2wait: 2,
            time2retain: 20,
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
