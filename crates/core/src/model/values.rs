//! Value types parsed at the edge: MAC addresses, iSCSI names, WWNs, portals, LUNs and the
//! boolean strings of Ironic capabilities.
//!
//! Each type is built only by its parser, so code that holds one never re-checks it. Parsers are
//! total: any input gives a value or a [`ValueError`] that says what was expected.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a value was refused; the message is written for the operator who typed it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

fn refuse<T>(message: String) -> Result<T, ValueError> {
    Err(ValueError(message))
}

/// An Ethernet MAC address. Accepts `52:54:00:12:34:56`, `52-54-00-12-34-56`, `5254.0012.3456`
/// and `525400123456`, in any case; prints as lowercase colon-separated bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The form iPXE's `${netX/mac:hexhyp}` produces: `52-54-00-12-34-56`.
    pub fn hexhyp(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join("-")
    }
}

impl FromStr for MacAddr {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        parse_mac(text.as_bytes()).ok_or_else(|| {
            ValueError(format!("{text:?} is not a MAC address (expected e.g. 52:54:00:12:34:56)"))
        })
    }
}

/// The value of one hex digit.
fn nibble(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `52:54:00:12:34:56`, `52-54-00-12-34-56`, `5254.0012.3456` or `525400123456`, without
/// allocating (every boot script request parses one).
fn parse_mac(text: &[u8]) -> Option<MacAddr> {
    // The separator's positions, and which separator, by length.
    let (every, sep) = match text.len() {
        17 if matches!(text[2], b':' | b'-') => (3, text[2]),
        14 => (5, b'.'),
        12 => (usize::MAX, 0),
        _ => return None,
    };
    let mut digits = [0u8; 12];
    let mut n = 0;
    for (i, &b) in text.iter().enumerate() {
        if every != usize::MAX && (i + 1) % every == 0 {
            if b != sep {
                return None;
            }
            continue;
        }
        *digits.get_mut(n)? = nibble(b)?;
        n += 1;
    }
    if n != 12 {
        return None;
    }
    let mut bytes = [0u8; 6];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = digits[2 * i] << 4 | digits[2 * i + 1];
    }
    Some(MacAddr(bytes))
}

impl fmt::Display for MacAddr {
    /// `52:54:00:12:34:56`, written at once (it is in every boot request's log line).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [b':'; 17];
        for (i, byte) in self.0.iter().enumerate() {
            out[3 * i] = HEX[usize::from(byte >> 4)];
            out[3 * i + 1] = HEX[usize::from(byte & 15)];
        }
        // Hex digits and colons only.
        f.pad(std::str::from_utf8(&out).unwrap_or(""))
    }
}

/// An iSCSI name (RFC 3720 §3.2.6): `iqn.YYYY-MM.reversed.domain[:anything]`, `eui.` followed
/// by 16 hex digits, or `naa.` followed by 16 or 32 hex digits. Kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IscsiName(String);

impl IscsiName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for IscsiName {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        let lower = text.to_ascii_lowercase();
        if text.len() > 223 {
            return refuse(format!("iSCSI name {text:?} is longer than 223 bytes"));
        }
        if let Some(rest) = lower.strip_prefix("iqn.") {
            if !iqn_date_and_authority_ok(rest) {
                return refuse(format!(
                    "{text:?} is not an iSCSI qualified name (expected iqn.YYYY-MM.reversed.domain[:name])"
                ));
            }
        } else if let Some(hex) = lower.strip_prefix("eui.") {
            if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return refuse(format!(
                    "{text:?} is not an EUI-64 iSCSI name (expected eui. and 16 hex digits)"
                ));
            }
        } else if let Some(hex) = lower.strip_prefix("naa.") {
            if !(hex.len() == 16 || hex.len() == 32) || !hex.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return refuse(format!(
                    "{text:?} is not an NAA iSCSI name (expected naa. and 16 or 32 hex digits)"
                ));
            }
        } else {
            return refuse(format!("{text:?} is not an iSCSI name (expected iqn., eui. or naa.)"));
        }
        if let Some(c) =
            lower.chars().find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '.' | ':'))
        {
            return refuse(format!(
                "iSCSI name {text:?} contains {c:?}; only letters, digits, '-', '.' and ':' are allowed"
            ));
        }
        Ok(IscsiName(text.to_owned()))
    }
}

/// `YYYY-MM.` followed by a non-empty naming authority.
fn iqn_date_and_authority_ok(rest: &str) -> bool {
    let bytes = rest.as_bytes();
    let date_ok = bytes.len() > 8
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[5..7].iter().all(u8::is_ascii_digit)
        && matches!(
            &rest[5..7],
            "01" | "02" | "03" | "04" | "05" | "06" | "07" | "08" | "09" | "10" | "11" | "12"
        )
        && bytes[7] == b'.';
    date_ok && !rest[8..].starts_with(['.', ':']) && !rest[8..].is_empty()
}

impl fmt::Display for IscsiName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A Fibre Channel world wide name (port or node): 8 bytes, written as 16 hex digits with or
/// without colons. Prints as 16 lowercase hex digits, Cinder's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Wwn(pub u64);

impl Wwn {
    /// The colon-separated byte form iPXE's `fcp:` URI takes: `10:00:00:00:c9:5b:7f:ea`.
    pub fn colon_bytes(&self) -> String {
        self.0.to_be_bytes().iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
    }
}

impl FromStr for Wwn {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        let bad = || {
            ValueError(format!(
                "{text:?} is not a WWN (expected 16 hex digits, e.g. 500a0982991b8dc5)"
            ))
        };
        let digits = if text.contains(':') {
            let groups: Vec<&str> = text.split(':').collect();
            if groups.len() != 8 || groups.iter().any(|g| g.len() != 2) {
                return Err(bad());
            }
            groups.concat()
        } else {
            text.to_owned()
        };
        if digits.len() != 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        u64::from_str_radix(&digits, 16).map(Wwn).map_err(|_| bad())
    }
}

impl fmt::Display for Wwn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// The host part of a portal: an IP address or a DNS name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    Name(String),
}

impl fmt::Display for Host {
    /// IPv6 addresses keep their brackets, as iPXE's URI parsers need them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

/// An iSCSI portal: `host:port`, `[v6]:port`, or a host alone (port 3260).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Portal {
    pub host: Host,
    pub port: u16,
}

pub const ISCSI_DEFAULT_PORT: u16 = 3260;

impl FromStr for Portal {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        let (host_text, port_text) = if let Some(rest) = text.strip_prefix('[') {
            let Some((v6, after)) = rest.split_once(']') else {
                return refuse(format!("portal {text:?} has an unclosed '['"));
            };
            let v6: Ipv6Addr = v6.parse().map_err(|_| {
                ValueError(format!("portal {text:?}: {v6:?} is not an IPv6 address"))
            })?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or_else(|| {
                    ValueError(format!("portal {text:?}: expected ':' after ']'"))
                })?),
            };
            return Ok(Portal { host: Host::Ip(IpAddr::V6(v6)), port: parse_port(text, port)? });
        } else {
            match text.matches(':').count() {
                0 => (text, None),
                1 => {
                    let (host, port) = text.split_once(':').unwrap_or((text, ""));
                    (host, Some(port))
                }
                _ => {
                    return refuse(format!(
                        "portal {text:?}: write an IPv6 address in brackets, e.g. [2001:db8::5]:3260"
                    ));
                }
            }
        };
        let host =
            parse_host(host_text).map_err(|e| ValueError(format!("portal {text:?}: {e}")))?;
        Ok(Portal { host, port: parse_port(text, port_text)? })
    }
}

fn parse_port(portal: &str, port: Option<&str>) -> Result<u16, ValueError> {
    match port {
        None => Ok(ISCSI_DEFAULT_PORT),
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => refuse(format!("portal {portal:?}: {p:?} is not a port number (1-65535)")),
        },
    }
}

/// An IPv4 address or an RFC 1123 host name.
pub fn parse_host(text: &str) -> Result<Host, ValueError> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if text.is_empty() || text.len() > 253 || !text.split('.').all(label_ok) {
        return refuse(format!("{text:?} is not an IP address or host name"));
    }
    Ok(Host::Name(text.to_owned()))
}

impl fmt::Display for Portal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A SCSI logical unit number. JSON gives it as a number or a numeric string (`"3"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lun(pub u16);

impl Lun {
    /// Reads a LUN from a JSON value: a non-negative integer or a string of decimal digits.
    pub fn from_json(value: &serde_json::Value) -> Result<Lun, ValueError> {
        let bad = || ValueError(format!("{value} is not a LUN (expected an integer 0-65535)"));
        match value {
            serde_json::Value::Number(n) => {
                n.as_u64().and_then(|n| u16::try_from(n).ok()).map(Lun).ok_or_else(bad)
            }
            serde_json::Value::String(s)
                if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) =>
            {
                s.parse::<u16>().map(Lun).map_err(|_| bad())
            }
            _ => Err(bad()),
        }
    }
}

/// Reads Ironic's boolean capability strings: `true`/`True`/`false`/`False` (any case).
pub fn parse_capability_bool(text: &str) -> Result<bool, ValueError> {
    match text.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => refuse(format!("{text:?} is not a capability boolean (expected true or false)")),
    }
}

macro_rules! serde_via_str {
    ($($ty:ty),*) => {$(
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}
serde_via_str!(MacAddr, IscsiName, Wwn, Portal);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_accepts_every_common_form_in_any_case() {
        for text in [
            "52:54:00:12:34:56",
            "52-54-00-12-34-56",
            "5254.0012.3456",
            "525400123456",
            "52:54:00:12:34:56".to_uppercase().as_str(),
        ] {
            let mac: MacAddr = text.parse().unwrap();
            assert_eq!(mac.to_string(), "52:54:00:12:34:56", "{text}");
        }
        assert_eq!("5254.00AB.cdef".parse::<MacAddr>().unwrap().hexhyp(), "52-54-00-ab-cd-ef");
    }

    #[test]
    fn mac_refuses_malformed() {
        for text in [
            "",
            "52:54:00:12:34",
            "52:54:00:12:34:5g",
            "65:+0:65:60:60:60",
            "52:54-00:12:34:56",
            "5254.0012.345",
            "52540012345x",
            "52:54:00:12:34:56:",
            "52:54:00-12:34:56",
            "5254-0012-3456",
            "5254.0012:3456",
            "52:54:00:12:34:é",
            "52 54 00 12 34 56",
        ] {
            let err = text.parse::<MacAddr>().unwrap_err();
            assert!(err.0.contains("is not a MAC address"), "{text}: {err}");
        }
    }

    #[test]
    fn iscsi_names_follow_rfc_3720() {
        for ok in [
            "iqn.2024-01.org.example.san:vol-1",
            "iqn.1992-01.com.example",
            "eui.02004567A425678D",
            "naa.52004567BA64678D",
            "naa.52004567ba64678d52004567ba64678d",
        ] {
            assert_eq!(ok.parse::<IscsiName>().unwrap().as_str(), ok);
        }
        for bad in [
            "iqn.2024-13.org.example",
            "iqn.24-01.org.example",
            "iqn.2024-01.",
            "eui.1234",
            "naa.123",
            "iqn.2024-01.org.example:a b",
            "iqn.2024-01.org.example:${x}",
            "target",
            "iqn.2024-01.org.example:a_b",
        ] {
            assert!(bad.parse::<IscsiName>().is_err(), "{bad}");
        }
    }

    #[test]
    fn wwn_with_or_without_colons() {
        let a: Wwn = "50:0a:09:82:99:1b:8d:c5".parse().unwrap();
        let b: Wwn = "500A0982991B8DC5".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "500a0982991b8dc5");
        assert_eq!(a.colon_bytes(), "50:0a:09:82:99:1b:8d:c5");
        for bad in [
            "500a0982991b8dc",
            "500a0982991b8dc5aa",
            "50:0a:09:82:99:1b:8d",
            "+00a0982991b8dc5",
            "50:0a:09:82:99:1b:8dc5",
        ] {
            assert!(bad.parse::<Wwn>().is_err(), "{bad}");
        }
    }

    #[test]
    fn portals_keep_ipv6_brackets() {
        let p: Portal = "[2001:db8::5]:3261".parse().unwrap();
        assert_eq!(p.to_string(), "[2001:db8::5]:3261");
        assert_eq!("192.0.2.5".parse::<Portal>().unwrap().to_string(), "192.0.2.5:3260");
        assert_eq!(
            "san.example:3260".parse::<Portal>().unwrap().host,
            Host::Name("san.example".into())
        );
        for bad in [
            "2001:db8::5:3260",
            "[2001:db8::5",
            "host:0",
            "host:70000",
            "host:+1",
            "ho st:3260",
            "",
            "[x]:3260",
            "host:",
        ] {
            assert!(bad.parse::<Portal>().is_err(), "{bad}");
        }
    }

    #[test]
    fn luns_from_numbers_or_numeric_strings() {
        use serde_json::json;
        assert_eq!(Lun::from_json(&json!(3)).unwrap(), Lun(3));
        assert_eq!(Lun::from_json(&json!("3")).unwrap(), Lun(3));
        for bad in
            [json!(-1), json!("x"), json!(""), json!(1.5), json!(70000), json!(null), json!("+3")]
        {
            assert!(Lun::from_json(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn capability_booleans() {
        assert!(parse_capability_bool("True").unwrap());
        assert!(parse_capability_bool("true").unwrap());
        assert!(!parse_capability_bool("false").unwrap());
        assert!(parse_capability_bool("yes").is_err());
    }
}
