//! iSCSI text: `key=value` pairs, each followed by one NUL (RFC 7143 §6.1), in the data segment of
//! Login and Text PDUs. Parsing is total and bounded: at most [`MAX_PAIRS`] pairs, keys of at most
//! [`MAX_KEY`] bytes (the RFC's 63) from the RFC's key alphabet, values of at most [`MAX_VALUE`]
//! bytes of UTF-8 without NUL; a key given twice is refused (none of the keys a login uses is
//! multi-valued, §6.2). No I/O, no clock.
//!
//! Also the value forms the RFC defines for numbers and binary values (§6.1): decimal, `0x` hex
//! and `0b` base64 constants.

use std::fmt;

use base64::Engine as _;

/// Pairs in one text (a login's answers are a dozen).
pub const MAX_PAIRS: usize = 128;
/// Bytes in a key (RFC 7143 §6.1: at most 63).
pub const MAX_KEY: usize = 63;
/// Bytes in a value: the RFC's 8192 for text, room for a 1024-byte CHAP challenge in hex.
pub const MAX_VALUE: usize = 8192;

/// Why a text was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextError {
    /// More than [`MAX_PAIRS`] pairs.
    TooManyPairs,
    /// The last pair has no NUL after it.
    Unterminated,
    /// A pair with no `=`.
    NoEquals(String),
    /// A key that is empty, too long or outside the key alphabet.
    BadKey(String),
    /// A value too long, or not UTF-8.
    BadValue(String),
    /// A key given twice.
    Duplicate(String),
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextError::TooManyPairs => write!(f, "more than {MAX_PAIRS} key=value pairs"),
            TextError::Unterminated => write!(f, "a key=value pair not followed by NUL"),
            TextError::NoEquals(pair) => write!(f, "{pair:?} is not key=value"),
            TextError::BadKey(key) => write!(f, "{key:?} is not a key"),
            TextError::BadValue(key) => write!(f, "the value of {key} is not valid text"),
            TextError::Duplicate(key) => write!(f, "{key} given twice"),
        }
    }
}

impl std::error::Error for TextError {}

/// Key/value pairs in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pairs(Vec<(String, String)>);

impl Pairs {
    /// No pairs.
    pub fn new() -> Pairs {
        Pairs(Vec::new())
    }

    /// Adds a pair (replacing an earlier value of the key).
    pub fn push(&mut self, key: &str, value: &str) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(pair) => pair.1 = value.to_owned(),
            None => self.0.push((key.to_owned(), value.to_owned())),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Every pair, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The data segment: every pair followed by NUL.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, value) in &self.0 {
            out.extend_from_slice(key.as_bytes());
            out.push(b'=');
            out.extend_from_slice(value.as_bytes());
            out.push(0);
        }
        out
    }

    /// Parses a data segment. Extra NULs (empty pairs) are skipped.
    pub fn parse(data: &[u8]) -> Result<Pairs, TextError> {
        let mut pairs = Pairs::new();
        let mut rest = data;
        while !rest.is_empty() {
            let Some(end) = rest.iter().position(|&b| b == 0) else {
                return Err(TextError::Unterminated);
            };
            let (pair, tail) = (&rest[..end], &rest[end + 1..]);
            rest = tail;
            if pair.is_empty() {
                continue;
            }
            if pairs.0.len() == MAX_PAIRS {
                return Err(TextError::TooManyPairs);
            }
            let (key, value) = split_pair(pair)?;
            if pairs.get(&key).is_some() {
                return Err(TextError::Duplicate(key));
            }
            pairs.0.push((key, value));
        }
        Ok(pairs)
    }
}

fn split_pair(pair: &[u8]) -> Result<(String, String), TextError> {
    let shown = || String::from_utf8_lossy(&pair[..pair.len().min(80)]).into_owned();
    let Some(eq) = pair.iter().position(|&b| b == b'=') else {
        return Err(TextError::NoEquals(shown()));
    };
    let (key, value) = (&pair[..eq], &pair[eq + 1..]);
    if !is_key(key) {
        return Err(TextError::BadKey(shown()));
    }
    let key = String::from_utf8_lossy(key).into_owned();
    if value.len() > MAX_VALUE {
        return Err(TextError::BadValue(key));
    }
    match std::str::from_utf8(value) {
        Ok(value) => Ok((key, value.to_owned())),
        Err(_) => Err(TextError::BadValue(key)),
    }
}

/// RFC 7143 §6.1: letters, digits, `.`, `-`, `+`, `@`, `_`; 1 to 63 bytes.
fn is_key(key: &[u8]) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY
        && key.iter().all(|&b| b.is_ascii_alphanumeric() || b".-+@_".contains(&b))
}

/// A numerical value (§6.1): decimal or `0x` hex, under 2^64.
pub fn parse_number(value: &str) -> Option<u64> {
    match value.strip_prefix("0x").or_else(|| value.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.len() <= 16 => u64::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
            value.parse().ok()
        }
        None => None,
    }
}

/// A binary value (§6.1): `0x` hex (an odd count of digits is read with a leading zero) or `0b`
/// base64.
pub fn parse_binary(value: &str) -> Option<Vec<u8>> {
    if let Some(hex) = value.strip_prefix("0x").or_else(|| value.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let padded = if hex.len() % 2 == 1 { format!("0{hex}") } else { hex.to_owned() };
        return (0..padded.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&padded[i..i + 2], 16).ok())
            .collect();
    }
    let b64 = value.strip_prefix("0b").or_else(|| value.strip_prefix("0B"))?;
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine.decode(b64).ok().filter(|bytes| !bytes.is_empty())
}

/// A binary value as `0x` and lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len() * 2);
    out.push_str("0x");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip_in_order() {
        let mut pairs = Pairs::new();
        pairs.push("InitiatorName", "iqn.2024-01.org.example:n1");
        pairs.push("AuthMethod", "CHAP,None");
        let bytes = pairs.encode();
        assert_eq!(bytes, b"InitiatorName=iqn.2024-01.org.example:n1\0AuthMethod=CHAP,None\0");
        assert_eq!(Pairs::parse(&bytes), Ok(pairs.clone()));
        assert_eq!(pairs.get("AuthMethod"), Some("CHAP,None"));
        assert_eq!(pairs.get("Nope"), None);
        assert_eq!(Pairs::parse(b"a=\0\0\0b=c\0").unwrap().get("a"), Some(""));
    }

    #[test]
    fn bad_text_is_refused_by_name() {
        assert_eq!(Pairs::parse(b"a=b"), Err(TextError::Unterminated));
        assert_eq!(Pairs::parse(b"ab\0"), Err(TextError::NoEquals("ab".into())));
        assert!(matches!(Pairs::parse(b"=b\0"), Err(TextError::BadKey(_))));
        assert!(matches!(Pairs::parse(b"a b=c\0"), Err(TextError::BadKey(_))));
        let long_key = format!("{}=1\0", "k".repeat(64));
        assert!(matches!(Pairs::parse(long_key.as_bytes()), Err(TextError::BadKey(_))));
        assert_eq!(Pairs::parse(b"a=\xff\0"), Err(TextError::BadValue("a".into())));
        let long_value = format!("a={}\0", "v".repeat(MAX_VALUE + 1));
        assert!(matches!(Pairs::parse(long_value.as_bytes()), Err(TextError::BadValue(_))));
        assert_eq!(Pairs::parse(b"a=1\0a=2\0"), Err(TextError::Duplicate("a".into())));
        let many: String = (0..=MAX_PAIRS).map(|i| format!("k{i}=v\0")).collect();
        assert_eq!(Pairs::parse(many.as_bytes()), Err(TextError::TooManyPairs));
    }

    #[test]
    fn numbers_and_binary_values() {
        assert_eq!(parse_number("5"), Some(5));
        assert_eq!(parse_number("0x1f"), Some(31));
        assert_eq!(parse_number("0x"), None);
        assert_eq!(parse_number("-1"), None);
        assert_eq!(parse_number("18446744073709551616"), None);
        assert_eq!(parse_binary("0x0a0B"), Some(vec![10, 11]));
        assert_eq!(parse_binary("0xabc"), Some(vec![0x0a, 0xbc]));
        assert_eq!(parse_binary("0bAQID"), Some(vec![1, 2, 3]));
        assert_eq!(parse_binary("0bAQI="), Some(vec![1, 2]));
        assert_eq!(parse_binary("0bAQI"), Some(vec![1, 2]));
        assert_eq!(parse_binary("0xzz"), None);
        assert_eq!(parse_binary("abcd"), None);
        assert_eq!(parse_binary("0b"), None);
        assert_eq!(hex(&[0, 0xab, 0x10]), "0x00ab10");
    }
}
