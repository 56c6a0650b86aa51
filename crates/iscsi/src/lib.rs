//! A small iSCSI initiator (RFC 7143) that probes a boot target the way its node will log in to
//! it: [`probe`] connects to each portal, logs in with the node's own initiator name (so the
//! target's ACL applies as it does to the node) and the node's CHAP or mutual CHAP accounts,
//! with an ISID of its own (never the node's session), asks REPORT LUNS and READ CAPACITY for
//! the boot LUN, and logs out. It never writes: the only SCSI commands it can send are those
//! two reads.
//!
//! It is its own crate: it knows nothing of bootvol, and the compiler keeps it that way.
//!
//! The result ([`ProbeOutcome`]) names the failure as the target gave it: the login's status
//! class and detail in words (authentication failure, authorization failure, target not
//! found, ...), a wrong mutual-CHAP answer, a missing LUN (with the LUNs the target has), a
//! portal that refused or timed out; on success, the LUN's size.
//!
//! Why our own rather than `iscsiadm` or libiscsi: a probe must not touch the appliance's own
//! iSCSI state (sessions, node records, the kernel's SCSI hosts), must log in under another
//! initiator's name with a fresh ISID, and must say exactly what the target answered; a
//! login, two commands and a logout are a few hundred lines of sans-io code.
//!
//! # Layout
//!
//! - [`pdu`]: PDUs, bytes in and out (pure); [`text`]: `key=value` text and the RFC's value
//!   forms (pure); [`chap`]: CHAP MD5 in both directions (pure); [`status`]: login status in
//!   words (pure); [`scsi`]: the commands and their answers (pure); [`login`]: one probe's
//!   session as a state machine (pure); [`outcome`]: the request and the result (pure).
//! - [`driver`]: the tokio edge: TCP, deadlines, portals in turn, randomness.

pub mod chap;
mod driver;
pub mod login;
pub mod outcome;
pub mod pdu;
pub mod scsi;
pub mod status;
pub mod text;

pub use driver::{SESSION_TIMEOUTS, probe};
pub use outcome::{Credentials, ProbeOutcome, ProbeRequest};

/// Runs bytes through every parser and the login machine, for the fuzzer and its corpus replay
/// (`fuzz/`). No input panics them. The bytes are read as a stream of PDUs: each that decodes
/// encodes back to bytes that decode to itself, and is fed to two machines (one with mutual
/// CHAP, one without credentials); every data segment is parsed as text, which prints back to
/// text that parses to the same pairs, and as the answers the machine reads. Returns how many
/// PDUs decoded.
#[doc(hidden)]
pub fn check_bytes(bytes: &[u8]) -> usize {
    let mut machines = [fuzz_machine(true), fuzz_machine(false)];
    let mut rest = bytes;
    let mut decoded = 0;
    while let Ok(len) = pdu::frame_len(rest) {
        let Some(frame) = rest.get(..len) else { break };
        rest = &rest[len..];
        let Ok(pdu) = pdu::Pdu::decode(frame) else { break };
        decoded += 1;
        let again = pdu::Pdu::decode(&pdu.encode());
        assert_eq!(again.as_ref(), Ok(&pdu), "{frame:?} re-encoded differently");
        check_data(data_of(&pdu));
        for machine in &mut machines {
            let _ = machine.receive(pdu.clone());
        }
    }
    check_data(bytes);
    decoded
}

fn fuzz_machine(mutual: bool) -> login::Machine {
    let account = |user: &str| Some((user.to_owned(), format!("{user}-secret")));
    let config = login::Config {
        initiator: "iqn.2024-01.org.example.node:fuzz".into(),
        target: "iqn.2024-01.org.example:fuzz".into(),
        lun: 1,
        chap: if mutual { account("user") } else { None },
        mutual: if mutual { account("target") } else { None },
    };
    let random = login::Random { isid: [1, 2, 3], chap_id: 7, challenge: [9; 16] };
    login::Machine::new(config, random).0
}

fn data_of(pdu: &pdu::Pdu) -> &[u8] {
    use pdu::Pdu::*;
    match pdu {
        LoginRequest(p) => &p.data,
        LoginResponse(p) => &p.data,
        TextRequest(p) => &p.data,
        TextResponse(p) => &p.data,
        ScsiCommand(p) => &p.data,
        ScsiResponse(p) => &p.data,
        DataIn(p) => &p.data,
        NopOut(p) => &p.data,
        NopIn(p) => &p.data,
        Reject(p) => &p.data,
        Other(p) => &p.data,
        LogoutRequest(_) | LogoutResponse(_) => &[],
    }
}

fn check_data(data: &[u8]) {
    if let Ok(pairs) = text::Pairs::parse(data) {
        let again = text::Pairs::parse(&pairs.encode());
        assert_eq!(again.as_ref(), Ok(&pairs), "{data:?} printed differently");
        let _ = chap::read_challenge(&pairs);
        let _ = chap::check_target(&pairs, "target", "target-secret", (7, &[9; 16]));
        for (_, value) in pairs.iter() {
            let _ = (text::parse_number(value), text::parse_binary(value));
        }
    }
    let _ = scsi::Sense::from_response(data);
    let _ = scsi::parse_report_luns(data);
    let _ = (scsi::parse_read_capacity_10(data), scsi::parse_read_capacity_16(data));
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = outcome::parse_portal(text);
    }
}
