//! CHAP with MD5 (RFC 1994, as iSCSI uses it: RFC 7143 §12.1.3), in both directions. No I/O, no
//! clock: the random challenge the initiator sends comes from the caller.
//!
//! One-way: the target sends `CHAP_A=5`, `CHAP_I` (an identifier, 0-255) and `CHAP_C` (the
//! challenge); the initiator answers `CHAP_N` (its user) and `CHAP_R = MD5(I || secret || C)`.
//! Mutual: the initiator's answer also carries its own `CHAP_I` and `CHAP_C`, and the target's
//! next response must carry `CHAP_N` (the user the initiator expects) and the `CHAP_R` only the
//! mutual secret gives. The initiator never sends back the challenge it was given (a reflection
//! would let a target answer with the initiator's own response), and refuses a target that
//! answers with the expected user but a response that does not match.

use md5::{Digest as _, Md5};

use crate::text::{Pairs, hex, parse_binary, parse_number};

/// `CHAP_A` for MD5, the only algorithm offered.
pub const ALGORITHM_MD5: u64 = 5;
/// Bytes of the challenge the initiator sends.
pub const CHALLENGE_LEN: usize = 16;
/// The longest challenge accepted from a target.
pub const MAX_CHALLENGE: usize = 1024;

/// Why a CHAP step failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChapError {
    /// The target chose an algorithm other than MD5.
    Algorithm(String),
    /// A key the step needs is missing.
    Missing(&'static str),
    /// A key's value is not of its form.
    BadValue(&'static str),
    /// The target answered mutual CHAP as another user.
    WrongUser(String),
    /// The target's response does not match the mutual secret.
    WrongResponse,
}

impl std::fmt::Display for ChapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChapError::Algorithm(a) => {
                write!(f, "the target chose CHAP_A={a} (only 5, MD5, offered)")
            }
            ChapError::Missing(key) => write!(f, "the target sent no {key}"),
            ChapError::BadValue(key) => write!(f, "the target's {key} is malformed"),
            ChapError::WrongUser(user) => {
                write!(f, "the target answered as CHAP user {user:?}, not the mutual user")
            }
            ChapError::WrongResponse => {
                write!(f, "the target's CHAP_R does not match the mutual secret")
            }
        }
    }
}

impl std::error::Error for ChapError {}

/// `MD5(id || secret || challenge)`.
pub fn response(id: u8, secret: &[u8], challenge: &[u8]) -> [u8; 16] {
    let mut md5 = Md5::new();
    md5.update([id]);
    md5.update(secret);
    md5.update(challenge);
    md5.finalize().into()
}

/// The target's challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub id: u8,
    pub challenge: Vec<u8>,
}

/// Reads `CHAP_A`, `CHAP_I` and `CHAP_C` from the target's response.
pub fn read_challenge(pairs: &Pairs) -> Result<Challenge, ChapError> {
    let algorithm = pairs.get("CHAP_A").ok_or(ChapError::Missing("CHAP_A"))?;
    if parse_number(algorithm) != Some(ALGORITHM_MD5) {
        return Err(ChapError::Algorithm(algorithm.chars().take(20).collect()));
    }
    let id = pairs.get("CHAP_I").ok_or(ChapError::Missing("CHAP_I"))?;
    let id = parse_number(id)
        .and_then(|id| u8::try_from(id).ok())
        .ok_or(ChapError::BadValue("CHAP_I"))?;
    let challenge = pairs.get("CHAP_C").ok_or(ChapError::Missing("CHAP_C"))?;
    let challenge = parse_binary(challenge)
        .filter(|c| c.len() <= MAX_CHALLENGE)
        .ok_or(ChapError::BadValue("CHAP_C"))?;
    Ok(Challenge { id, challenge })
}

/// The challenge the initiator sends for mutual CHAP: `random`, unless that is the target's own
/// challenge, in which case its bitwise complement.
pub fn own_challenge(random: [u8; CHALLENGE_LEN], target: &Challenge) -> [u8; CHALLENGE_LEN] {
    if target.challenge == random { random.map(|b| !b) } else { random }
}

/// The initiator's answer: `CHAP_N`, `CHAP_R`, and for mutual CHAP its own `CHAP_I`, `CHAP_C`.
pub fn answer(
    target: &Challenge,
    user: &str,
    secret: &str,
    mutual: Option<(u8, &[u8; CHALLENGE_LEN])>,
) -> Pairs {
    let mut pairs = Pairs::new();
    pairs.push("CHAP_N", user);
    pairs.push("CHAP_R", &hex(&response(target.id, secret.as_bytes(), &target.challenge)));
    if let Some((id, challenge)) = mutual {
        pairs.push("CHAP_I", &id.to_string());
        pairs.push("CHAP_C", &hex(challenge));
    }
    pairs
}

/// Checks the target's mutual-CHAP answer against the user and secret the initiator expects.
pub fn check_target(
    pairs: &Pairs,
    user: &str,
    secret: &str,
    sent: (u8, &[u8; CHALLENGE_LEN]),
) -> Result<(), ChapError> {
    let name = pairs.get("CHAP_N").ok_or(ChapError::Missing("CHAP_N"))?;
    let got = pairs.get("CHAP_R").ok_or(ChapError::Missing("CHAP_R"))?;
    let got = parse_binary(got).ok_or(ChapError::BadValue("CHAP_R"))?;
    if name != user {
        return Err(ChapError::WrongUser(name.chars().take(64).collect()));
    }
    let expected = response(sent.0, secret.as_bytes(), sent.1);
    // Compared without an early exit, as response checks are.
    let differs = got.len() != expected.len()
        || got.iter().zip(expected.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0;
    if differs { Err(ChapError::WrongResponse) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target_pairs(challenge: &str) -> Pairs {
        let mut pairs = Pairs::new();
        pairs.push("CHAP_A", "5");
        pairs.push("CHAP_I", "1");
        pairs.push("CHAP_C", challenge);
        pairs
    }

    #[test]
    fn the_response_matches_a_vector_computed_by_hand() {
        // python3: hashlib.md5(bytes([1]) + b"bfvsecret12345" + bytes(range(16))).hexdigest()
        let challenge: Vec<u8> = (0..16).collect();
        let r = response(1, b"bfvsecret12345", &challenge);
        assert_eq!(hex(&r), "0xace121814f4e8060f98de0a7ded5aac1");
        // hashlib.md5(bytes([0xa7]) + b"outsecret1234" + bytes([0xff] * 16)).hexdigest()
        let r = response(0xa7, b"outsecret1234", &[0xff; 16]);
        assert_eq!(hex(&r), "0xc1f1f2c51a700dc0443e75f4d20f47f6");
    }

    #[test]
    fn a_challenge_in_hex_or_base64_is_answered() {
        let hex_form = target_pairs("0x000102030405060708090a0b0c0d0e0f");
        let b64_form = target_pairs("0bAAECAwQFBgcICQoLDA0ODw==");
        for pairs in [hex_form, b64_form] {
            let challenge = read_challenge(&pairs).unwrap();
            assert_eq!(challenge.id, 1);
            let answer = answer(&challenge, "bfvuser", "bfvsecret12345", None);
            assert_eq!(answer.get("CHAP_N"), Some("bfvuser"));
            assert_eq!(answer.get("CHAP_R"), Some("0xace121814f4e8060f98de0a7ded5aac1"));
            assert_eq!(answer.get("CHAP_C"), None);
        }
    }

    #[test]
    fn a_bad_challenge_is_named() {
        let mut pairs = target_pairs("0x00");
        pairs.push("CHAP_A", "7");
        assert_eq!(read_challenge(&pairs), Err(ChapError::Algorithm("7".into())));
        let mut pairs = target_pairs("0x00");
        pairs.push("CHAP_I", "256");
        assert_eq!(read_challenge(&pairs), Err(ChapError::BadValue("CHAP_I")));
        assert_eq!(read_challenge(&target_pairs("zz")), Err(ChapError::BadValue("CHAP_C")));
        let long = hex(&[1; MAX_CHALLENGE + 1]);
        assert_eq!(read_challenge(&target_pairs(&long)), Err(ChapError::BadValue("CHAP_C")));
        assert_eq!(read_challenge(&Pairs::new()), Err(ChapError::Missing("CHAP_A")));
    }

    #[test]
    fn mutual_chap_checks_the_target() {
        let target = read_challenge(&target_pairs("0x0102")).unwrap();
        let ours = own_challenge([0xff; 16], &target);
        assert_eq!(ours, [0xff; 16]);
        let sent = answer(&target, "bfvuser", "bfvsecret12345", Some((0xa7, &ours)));
        assert_eq!(sent.get("CHAP_I"), Some("167"));
        assert_eq!(sent.get("CHAP_C"), Some(hex(&[0xff; 16]).as_str()));
        let mut reply = Pairs::new();
        reply.push("CHAP_N", "tgtout");
        reply.push("CHAP_R", "0xc1f1f2c51a700dc0443e75f4d20f47f6");
        assert_eq!(check_target(&reply, "tgtout", "outsecret1234", (0xa7, &ours)), Ok(()));
        assert_eq!(
            check_target(&reply, "tgtout", "wrong", (0xa7, &ours)),
            Err(ChapError::WrongResponse)
        );
        assert_eq!(
            check_target(&reply, "other", "outsecret1234", (0xa7, &ours)),
            Err(ChapError::WrongUser("tgtout".into()))
        );
        assert_eq!(
            check_target(&Pairs::new(), "tgtout", "x", (0xa7, &ours)),
            Err(ChapError::Missing("CHAP_N"))
        );
    }

    #[test]
    fn the_initiator_never_reflects_the_targets_challenge() {
        let target = Challenge { id: 3, challenge: vec![0x11; 16] };
        assert_eq!(own_challenge([0x11; 16], &target), [0xee; 16]);
    }
}
