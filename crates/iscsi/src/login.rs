//! One probe's session as a state machine: login (security negotiation with CHAP or none, then
//! operational negotiation), REPORT LUNS and READ CAPACITY for one LUN, then logout. PDUs in,
//! PDUs out; no I/O, no clock, and the randomness (ISID, CHAP identifier and challenge) comes
//! from the caller.
//!
//! The session is a normal session of the node's initiator name with an ISID of its own: the
//! RFC 7143 §11.12.5 "random" format (`T` = 0b10, so the first byte is `0x80`), 24 random bits
//! for `B` and `C`, and the qualifier `D` = `0x6276` ("bv"). No initiator the node runs uses
//! the random format (iPXE uses the IANA enterprise format, open-iscsi the OUI format), so the
//! probe never reinstates the node's session, and two probes at once do not share an ISID.
//!
//! Security: `AuthMethod=CHAP,None` when credentials are given (`None` otherwise), so the target
//! decides as it does for the node; with mutual CHAP configured a target that does not
//! authenticate itself fails the probe, as it fails the node. Operational: no digests, a single
//! connection, error recovery level 0, `DefaultTime2Retain=0` (nothing of the session is kept
//! after it ends). Full feature: REPORT LUNS to LUN 0, then READ CAPACITY (10) for the LUN
//! (READ CAPACITY (16) when the last LBA is 0xFFFFFFFF), each retried up to three times on a
//! UNIT ATTENTION; then a Logout that closes the session. Every answer that ends the probe ends
//! it after the logout, once logged in. Nothing is ever written.
//!
//! Bounds: at most [`MAX_LOGIN_PDUS`] login exchanges, [`MAX_PDUS`] PDUs in all, continued
//! login text up to [`MAX_TEXT`] bytes, data up to each command's allocation length.

use crate::chap::{self, CHALLENGE_LEN, Challenge};
use crate::pdu::{DataIn, LoginRequest, LoginResponse, LogoutRequest, NopIn, NopOut, Pdu};
use crate::pdu::{ScsiCommand, ScsiResponse};
use crate::scsi::{self, Sense};
use crate::text::Pairs;

/// Login exchanges before the probe gives up on a target that never finishes.
pub const MAX_LOGIN_PDUS: u8 = 16;
/// PDUs received in all (NOP-Ins and Data-Ins included).
pub const MAX_PDUS: u16 = 512;
/// Bytes of login text continued over several PDUs.
pub const MAX_TEXT: usize = 64 * 1024;
/// The data segment length the initiator declares it receives.
pub const MAX_RECV_DATA_SEGMENT: u32 = 65536;
/// The ISID qualifier (`D`) of every probe: "bv".
pub const ISID_QUALIFIER: [u8; 2] = *b"bv";
/// Bytes REPORT LUNS is asked for (2047 LUNs).
pub const REPORT_LUNS_LEN: u32 = 16384;
const UNIT_ATTENTION_RETRIES: u8 = 3;
const NO_TAG: u32 = 0xffff_ffff;
const SECURITY: u8 = 0;
const OPERATIONAL: u8 = 1;
const FULL_FEATURE: u8 = 3;

/// What the probe logs in as and asks for.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    pub initiator: String,
    pub target: String,
    pub lun: u64,
    /// (user, secret) the initiator authenticates with.
    pub chap: Option<(String, String)>,
    /// (user, secret) the target must authenticate with.
    pub mutual: Option<(String, String)>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let user = |c: &Option<(String, String)>| c.as_ref().map(|(u, _)| format!("{u}/***"));
        f.debug_struct("Config")
            .field("initiator", &self.initiator)
            .field("target", &self.target)
            .field("lun", &self.lun)
            .field("chap", &user(&self.chap))
            .field("mutual", &user(&self.mutual))
            .finish()
    }
}

/// The randomness a probe needs, from the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Random {
    /// `B` and `C` of the ISID.
    pub isid: [u8; 3],
    /// The identifier of the initiator's CHAP challenge.
    pub chap_id: u8,
    /// The initiator's CHAP challenge (mutual CHAP).
    pub challenge: [u8; CHALLENGE_LEN],
}

/// The ISID of a probe (see the module header).
pub fn isid(random: [u8; 3]) -> [u8; 6] {
    let [q0, q1] = ISID_QUALIFIER;
    [0x80, random[0], random[1], random[2], q0, q1]
}

/// How the probe ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Logged in, the LUN is there and this big.
    Ok { size_bytes: u64, block_size: u32 },
    /// The target refused the login with this status.
    LoginFailed { class: u8, detail: u8, redirect: Option<String> },
    /// The target's mutual-CHAP answer was wrong or missing.
    MutualChapFailed(String),
    /// The LUN is not among those the target reports.
    LunMissing { luns: Vec<u64> },
    /// The target broke the protocol, or answered a command with an error.
    Protocol(String),
}

/// What to do after a PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this PDU, then read the next.
    Send(Pdu),
    /// Read the next PDU.
    Wait,
    /// Close the connection: the probe is over.
    Done(Finish),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    ReportLuns,
    ReadCapacity10,
    ReadCapacity16,
}

impl Command {
    fn name(self) -> &'static str {
        match self {
            Command::ReportLuns => "REPORT LUNS",
            Command::ReadCapacity10 => "READ CAPACITY (10)",
            Command::ReadCapacity16 => "READ CAPACITY (16)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Security,
    ChapAlgorithm,
    ChapAnswer,
    SecurityEnd,
    Operational,
    Command(Command, u32),
    LoggingOut,
    Done,
}

/// One probe's session.
#[derive(Debug)]
pub struct Machine {
    config: Config,
    random: Random,
    state: State,
    isid: [u8; 6],
    text: Vec<u8>,
    logins: u8,
    received: u16,
    cmd_sn: u32,
    exp_stat_sn: u32,
    next_itt: u32,
    sent_challenge: Option<[u8; CHALLENGE_LEN]>,
    data: Vec<u8>,
    expected: usize,
    retries: u8,
    luns: Vec<u64>,
    pending: Option<Finish>,
}

impl Machine {
    /// A probe and the first PDU to send.
    pub fn new(config: Config, random: Random) -> (Machine, Pdu) {
        let mut machine = Machine {
            isid: isid(random.isid),
            config,
            random,
            state: State::Security,
            text: Vec::new(),
            logins: 0,
            received: 0,
            cmd_sn: 1,
            exp_stat_sn: 0,
            next_itt: 1,
            sent_challenge: None,
            data: Vec::new(),
            expected: 0,
            retries: 0,
            luns: Vec::new(),
            pending: None,
        };
        let mut pairs = Pairs::new();
        pairs.push("InitiatorName", &machine.config.initiator);
        pairs.push("SessionType", "Normal");
        pairs.push("TargetName", &machine.config.target);
        let offer = if machine.config.chap.is_some() { "CHAP,None" } else { "None" };
        pairs.push("AuthMethod", offer);
        let first = machine.login(true, SECURITY, OPERATIONAL, &pairs);
        (machine, first)
    }

    /// The next step after the target's `pdu`.
    pub fn receive(&mut self, pdu: Pdu) -> Step {
        if self.state == State::Done {
            return Step::Done(Finish::Protocol("a PDU after the probe ended".into()));
        }
        self.received += 1;
        if self.received > MAX_PDUS {
            return self.end(Finish::Protocol(format!("the target sent over {MAX_PDUS} PDUs")));
        }
        let logging_in = matches!(
            self.state,
            State::Security
                | State::ChapAlgorithm
                | State::ChapAnswer
                | State::SecurityEnd
                | State::Operational
        );
        match pdu {
            Pdu::LoginResponse(r) if logging_in => self.on_login(r),
            _ if logging_in => self.end(Finish::Protocol(format!(
                "the target answered a login with {}",
                pdu_name(&pdu)
            ))),
            Pdu::DataIn(d) => self.on_data_in(d),
            Pdu::ScsiResponse(r) => self.on_scsi_response(r),
            Pdu::LogoutResponse(r) if self.state == State::LoggingOut => {
                let finish = self.pending.take().unwrap_or_else(|| {
                    Finish::Protocol(format!("logout answered {:#04x}", r.response))
                });
                self.end(finish)
            }
            Pdu::NopIn(nop) => self.on_nop_in(nop),
            Pdu::Reject(r) => self.end(Finish::Protocol(format!(
                "the target rejected a PDU (reason {:#04x})",
                r.reason
            ))),
            Pdu::Other(_) => Step::Wait,
            other => self.end(Finish::Protocol(format!("unexpected {}", pdu_name(&other)))),
        }
    }

    fn end(&mut self, finish: Finish) -> Step {
        self.state = State::Done;
        Step::Done(finish)
    }

    fn login(&mut self, transit: bool, csg: u8, nsg: u8, pairs: &Pairs) -> Pdu {
        self.logins += 1;
        Pdu::LoginRequest(LoginRequest {
            transit,
            cont: false,
            csg,
            nsg: if transit { nsg } else { 0 },
            version_max: 0,
            version_min: 0,
            isid: self.isid,
            tsih: 0,
            itt: 0,
            cid: 0,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            data: pairs.encode(),
        })
    }

    fn on_login(&mut self, r: LoginResponse) -> Step {
        if self.logins > MAX_LOGIN_PDUS {
            return self.end(Finish::Protocol("the login did not finish".into()));
        }
        self.exp_stat_sn = r.stat_sn.wrapping_add(1);
        if r.status_class != 0 {
            let redirect = Pairs::parse(&r.data)
                .ok()
                .and_then(|p| p.get("TargetAddress").map(|a| a.chars().take(128).collect()));
            let (class, detail) = (r.status_class, r.status_detail);
            return self.end(Finish::LoginFailed { class, detail, redirect });
        }
        if r.version_active != 0 {
            return self.end(Finish::Protocol(format!("iSCSI version {}", r.version_active)));
        }
        if self.text.len() + r.data.len() > MAX_TEXT {
            return self.end(Finish::Protocol("login text over 64 KiB".into()));
        }
        self.text.extend_from_slice(&r.data);
        if r.cont {
            // More text to come: an empty request asks for it.
            let csg = r.csg;
            return Step::Send(self.login(false, csg, 0, &Pairs::new()));
        }
        let pairs = match Pairs::parse(&std::mem::take(&mut self.text)) {
            Ok(pairs) => pairs,
            Err(e) => return self.end(Finish::Protocol(format!("login text: {e}"))),
        };
        match self.state {
            State::Security => self.on_security(&r, &pairs),
            State::ChapAlgorithm => self.on_chap_challenge(&pairs),
            State::ChapAnswer => self.on_chap_answer(&r, &pairs),
            State::SecurityEnd => self.after_security(&r),
            _ => self.on_operational(&r, &pairs),
        }
    }

    fn on_security(&mut self, r: &LoginResponse, pairs: &Pairs) -> Step {
        match pairs.get("AuthMethod") {
            Some("CHAP") if self.config.chap.is_some() => {
                self.state = State::ChapAlgorithm;
                let mut ask = Pairs::new();
                ask.push("CHAP_A", &chap::ALGORITHM_MD5.to_string());
                Step::Send(self.login(false, SECURITY, 0, &ask))
            }
            Some("None") | None => self.after_security(r),
            Some(other) => self.end(Finish::Protocol(format!(
                "the target chose AuthMethod={:?}",
                other.chars().take(64).collect::<String>()
            ))),
        }
    }

    fn on_chap_challenge(&mut self, pairs: &Pairs) -> Step {
        let challenge = match chap::read_challenge(pairs) {
            Ok(challenge) => challenge,
            Err(e) => return self.end(Finish::Protocol(e.to_string())),
        };
        let Some((user, secret)) = self.config.chap.clone() else {
            return self.end(Finish::Protocol("CHAP without credentials".into()));
        };
        let ours = self.config.mutual.as_ref().map(|_| own(&self.random, &challenge));
        self.sent_challenge = ours;
        let mutual = ours.as_ref().map(|c| (self.random.chap_id, c));
        let answer = chap::answer(&challenge, &user, &secret, mutual);
        self.state = State::ChapAnswer;
        Step::Send(self.login(true, SECURITY, OPERATIONAL, &answer))
    }

    fn on_chap_answer(&mut self, r: &LoginResponse, pairs: &Pairs) -> Step {
        if let (Some((user, secret)), Some(sent)) = (&self.config.mutual, &self.sent_challenge)
            && let Err(e) = chap::check_target(pairs, user, secret, (self.random.chap_id, sent))
        {
            return self.end(Finish::MutualChapFailed(e.to_string()));
        }
        self.after_security(r)
    }

    /// The security stage is over on our side: on to the operational stage when the target
    /// moves on, or another request until it does.
    fn after_security(&mut self, r: &LoginResponse) -> Step {
        if self.config.mutual.is_some() && self.sent_challenge.is_none() {
            return self.end(Finish::MutualChapFailed(
                "the target did not authenticate itself (it chose no CHAP)".into(),
            ));
        }
        if !r.transit {
            self.state = State::SecurityEnd;
            return Step::Send(self.login(true, SECURITY, OPERATIONAL, &Pairs::new()));
        }
        if r.nsg == FULL_FEATURE {
            return self.logged_in(r);
        }
        self.state = State::Operational;
        let pairs = operational_keys();
        Step::Send(self.login(true, OPERATIONAL, FULL_FEATURE, &pairs))
    }

    fn on_operational(&mut self, r: &LoginResponse, pairs: &Pairs) -> Step {
        for key in ["HeaderDigest", "DataDigest"] {
            if pairs.get(key).is_some_and(|v| v != "None") {
                return self.end(Finish::Protocol(format!("the target wants {key}")));
            }
        }
        if r.transit && r.nsg == FULL_FEATURE {
            return self.logged_in(r);
        }
        // The target offered keys of its own: refuse those not ours, and move on.
        let ours = operational_keys();
        let mut reply = Pairs::new();
        for (key, _) in pairs.iter().filter(|(k, _)| ours.get(k).is_none()) {
            if !DECLARATIVE.contains(&key) {
                reply.push(key, "NotUnderstood");
            }
        }
        Step::Send(self.login(true, OPERATIONAL, FULL_FEATURE, &reply))
    }

    fn logged_in(&mut self, r: &LoginResponse) -> Step {
        self.cmd_sn = r.exp_cmd_sn;
        self.command(Command::ReportLuns)
    }

    fn command(&mut self, command: Command) -> Step {
        let (lun, cdb, length) = match command {
            Command::ReportLuns => (0, scsi::report_luns(REPORT_LUNS_LEN), REPORT_LUNS_LEN),
            Command::ReadCapacity10 => (self.config.lun, scsi::read_capacity_10(), 8),
            Command::ReadCapacity16 => {
                (self.config.lun, scsi::read_capacity_16(), scsi::READ_CAPACITY_16_LEN)
            }
        };
        let Some(lun) = scsi::lun_field(lun) else {
            return self.end(Finish::Protocol(format!("LUN {lun} cannot be addressed")));
        };
        let itt = self.next_itt;
        self.next_itt = self.next_itt.wrapping_add(1) % NO_TAG;
        self.state = State::Command(command, itt);
        self.data.clear();
        self.expected = length as usize;
        let pdu = Pdu::ScsiCommand(ScsiCommand {
            immediate: false,
            final_: true,
            read: true,
            write: false,
            attr: 1,
            lun,
            itt,
            expected_length: length,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            cdb,
            data: Vec::new(),
        });
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        Step::Send(pdu)
    }

    fn current(&self, itt: u32) -> Option<Command> {
        match self.state {
            State::Command(command, current) if current == itt => Some(command),
            _ => None,
        }
    }

    fn on_data_in(&mut self, d: DataIn) -> Step {
        let Some(command) = self.current(d.itt) else {
            return self.end(Finish::Protocol("Data-In for no command".into()));
        };
        let offset = d.offset as usize;
        if offset < self.expected {
            let end = (offset + d.data.len()).min(self.expected);
            if self.data.len() < end {
                self.data.resize(end, 0);
            }
            self.data[offset..end].copy_from_slice(&d.data[..end - offset]);
        }
        if !d.has_status {
            return Step::Wait;
        }
        self.exp_stat_sn = d.stat_sn.wrapping_add(1);
        self.on_status(command, d.status, None)
    }

    fn on_scsi_response(&mut self, r: ScsiResponse) -> Step {
        let Some(command) = self.current(r.itt) else {
            return self.end(Finish::Protocol("SCSI Response for no command".into()));
        };
        self.exp_stat_sn = r.stat_sn.wrapping_add(1);
        if r.response != 0 {
            let what =
                format!("{} failed in the target (response {:#04x})", command.name(), r.response);
            return self.finish(Finish::Protocol(what));
        }
        self.on_status(command, r.status, Sense::from_response(&r.data))
    }

    fn on_status(&mut self, command: Command, status: u8, sense: Option<Sense>) -> Step {
        match (status, sense) {
            (scsi::GOOD, _) => self.on_good(command),
            (scsi::CHECK_CONDITION, Some(sense))
                if sense.key == scsi::UNIT_ATTENTION && self.retries < UNIT_ATTENTION_RETRIES =>
            {
                self.retries += 1;
                self.command(command)
            }
            (scsi::CHECK_CONDITION, Some(sense))
                if sense.lun_not_supported() && command != Command::ReportLuns =>
            {
                let luns = std::mem::take(&mut self.luns);
                self.finish(Finish::LunMissing { luns })
            }
            (scsi::CHECK_CONDITION, Some(sense)) => {
                self.finish(Finish::Protocol(format!("{}: {}", command.name(), sense.words())))
            }
            (status, _) => self.finish(Finish::Protocol(format!(
                "{} answered SCSI status {status:#04x}",
                command.name()
            ))),
        }
    }

    fn on_good(&mut self, command: Command) -> Step {
        let data = std::mem::take(&mut self.data);
        let bad = |what: &str| Finish::Protocol(format!("{what}: a short answer"));
        match command {
            Command::ReportLuns => {
                let Some(luns) = scsi::parse_report_luns(&data) else {
                    return self.finish(bad(command.name()));
                };
                if !luns.contains(&self.config.lun) {
                    return self.finish(Finish::LunMissing { luns });
                }
                self.luns = luns;
                self.retries = 0;
                self.command(Command::ReadCapacity10)
            }
            Command::ReadCapacity10 | Command::ReadCapacity16 => {
                let parsed = if command == Command::ReadCapacity10 {
                    scsi::parse_read_capacity_10(&data)
                } else {
                    scsi::parse_read_capacity_16(&data)
                };
                match parsed {
                    Some((0xffff_ffff, _)) if command == Command::ReadCapacity10 => {
                        self.retries = 0;
                        self.command(Command::ReadCapacity16)
                    }
                    Some((last, block)) => match scsi::capacity_bytes(last, block) {
                        Some(size_bytes) => {
                            self.finish(Finish::Ok { size_bytes, block_size: block })
                        }
                        None => self.finish(Finish::Protocol(format!(
                            "{}: last LBA {last}, block length {block}",
                            command.name()
                        ))),
                    },
                    None => self.finish(bad(command.name())),
                }
            }
        }
    }

    /// Logs out, and ends with `finish` once the target answers.
    fn finish(&mut self, finish: Finish) -> Step {
        self.pending = Some(finish);
        self.state = State::LoggingOut;
        let itt = self.next_itt;
        self.next_itt = self.next_itt.wrapping_add(1) % NO_TAG;
        Step::Send(Pdu::LogoutRequest(LogoutRequest {
            immediate: true,
            reason: 0,
            itt,
            cid: 0,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            data: Vec::new(),
        }))
    }

    /// The pending result, when the target closes the connection instead of answering the
    /// logout (the session is over either way).
    pub fn pending(&self) -> Option<&Finish> {
        if self.state == State::LoggingOut { self.pending.as_ref() } else { None }
    }

    fn on_nop_in(&mut self, nop: NopIn) -> Step {
        if nop.ttt == NO_TAG {
            return Step::Wait;
        }
        // A ping from the target: answered with its tag and data.
        Step::Send(Pdu::NopOut(NopOut {
            immediate: true,
            lun: nop.lun,
            itt: NO_TAG,
            ttt: nop.ttt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            data: nop.data,
        }))
    }
}

fn own(random: &Random, challenge: &Challenge) -> [u8; CHALLENGE_LEN] {
    chap::own_challenge(random.challenge, challenge)
}

/// Keys a target declares without expecting an answer.
const DECLARATIVE: &[&str] =
    &["TargetAlias", "TargetPortalGroupTag", "TargetAddress", "MaxRecvDataSegmentLength"];

fn operational_keys() -> Pairs {
    let mut pairs = Pairs::new();
    for (key, value) in [
        ("HeaderDigest", "None"),
        ("DataDigest", "None"),
        ("MaxRecvDataSegmentLength", "65536"),
        ("MaxConnections", "1"),
        ("InitialR2T", "Yes"),
        ("ImmediateData", "No"),
        ("MaxBurstLength", "262144"),
        ("FirstBurstLength", "65536"),
        ("DefaultTime2Wait", "0"),
        ("DefaultTime2Retain", "0"),
        ("MaxOutstandingR2T", "1"),
        ("DataPDUInOrder", "Yes"),
        ("DataSequenceInOrder", "Yes"),
        ("ErrorRecoveryLevel", "0"),
    ] {
        pairs.push(key, value);
    }
    pairs
}

fn pdu_name(pdu: &Pdu) -> String {
    match pdu {
        Pdu::LoginRequest(_) => "a Login Request".into(),
        Pdu::LoginResponse(_) => "a Login Response".into(),
        Pdu::TextRequest(_) => "a Text Request".into(),
        Pdu::TextResponse(_) => "a Text Response".into(),
        Pdu::ScsiCommand(_) => "a SCSI Command".into(),
        Pdu::ScsiResponse(_) => "a SCSI Response".into(),
        Pdu::DataIn(_) => "a Data-In".into(),
        Pdu::LogoutRequest(_) => "a Logout Request".into(),
        Pdu::LogoutResponse(_) => "a Logout Response".into(),
        Pdu::NopOut(_) => "a NOP-Out".into(),
        Pdu::NopIn(_) => "a NOP-In".into(),
        Pdu::Reject(_) => "a Reject".into(),
        Pdu::Other(other) => format!("opcode {:#04x}", other.opcode()),
    }
}
