//! What a probe is asked ([`ProbeRequest`]) and what it found ([`ProbeOutcome`]), with the one
//! line an operator reads. Plain values: no I/O, no clock. Secrets never appear in `Debug` or
//! `Display`.

use std::fmt;
use std::time::Duration;

use crate::login::{Config, Finish};
use crate::scsi::MAX_LUN;
use crate::status;

/// The iSCSI port when a portal names none.
pub const DEFAULT_PORT: u16 = 3260;
/// The longest iSCSI name (RFC 7143 §4.2.7.1: 223 bytes).
pub const MAX_NAME: usize = 223;
/// The longest CHAP user or secret accepted.
pub const MAX_CREDENTIAL: usize = 255;

/// A CHAP user and secret. `Debug` shows the user only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub secret: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).field("secret", &"***").finish()
    }
}

/// One probe of one boot target, as the node would log in to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRequest {
    /// `host:port`, `[v6]:port`, `host` or `[v6]` (port 3260); a `,tpgt` suffix is ignored.
    pub portals: Vec<String>,
    pub target_iqn: String,
    pub lun: u64,
    /// The node's own initiator name, so that the target's ACL applies as it will to the node.
    pub initiator_iqn: String,
    /// The CHAP account the node logs in with.
    pub chap: Option<Credentials>,
    /// The account the target must answer with (mutual CHAP); needs `chap`.
    pub mutual: Option<Credentials>,
    /// The deadline of each connect, read and write.
    pub timeout: Duration,
}

impl ProbeRequest {
    /// Why the request cannot be probed, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.portals.is_empty() {
            return Err("no portal to probe".into());
        }
        for portal in &self.portals {
            parse_portal(portal)?;
        }
        name("target", &self.target_iqn)?;
        name("initiator", &self.initiator_iqn)?;
        if self.lun > MAX_LUN {
            return Err(format!("LUN {} is over {MAX_LUN}", self.lun));
        }
        for (what, c) in [("CHAP", &self.chap), ("mutual CHAP", &self.mutual)] {
            if let Some(c) = c {
                credential(what, "user", &c.user)?;
                credential(what, "secret", &c.secret)?;
            }
        }
        if self.mutual.is_some() && self.chap.is_none() {
            return Err("mutual CHAP without CHAP".into());
        }
        if self.timeout.is_zero() {
            return Err("a timeout of zero".into());
        }
        Ok(())
    }

    /// The login state machine's configuration.
    pub fn config(&self) -> Config {
        let pair = |c: &Option<Credentials>| c.as_ref().map(|c| (c.user.clone(), c.secret.clone()));
        Config {
            initiator: self.initiator_iqn.clone(),
            target: self.target_iqn.clone(),
            lun: self.lun,
            chap: pair(&self.chap),
            mutual: pair(&self.mutual),
        }
    }
}

fn name(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > MAX_NAME {
        return Err(format!("the {what} name must be 1 to {MAX_NAME} bytes"));
    }
    if value.chars().any(|c| c.is_control() || c.is_whitespace() || c == '=') {
        return Err(format!("the {what} name {value:?} has a character iSCSI names cannot"));
    }
    Ok(())
}

fn credential(what: &str, field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > MAX_CREDENTIAL || value.contains('\0') {
        return Err(format!("the {what} {field} must be 1 to {MAX_CREDENTIAL} bytes, no NUL"));
    }
    Ok(())
}

/// `(host, port)` of a portal: `host:port`, `[v6]:port`, `host`, `[v6]` or a bare IPv6 address;
/// a `,tpgt` suffix (as Ironic writes portals) is dropped.
pub fn parse_portal(portal: &str) -> Result<(String, u16), String> {
    let bad = || format!("portal {portal:?} is not host:port or [v6]:port");
    let text = match portal.rsplit_once(',') {
        Some((text, tpgt)) if !tpgt.is_empty() && tpgt.bytes().all(|b| b.is_ascii_digit()) => text,
        _ => portal,
    };
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match text.matches(':').count() {
            0 => (text, None),
            1 => text.split_once(':').map(|(h, p)| (h, Some(p))).ok_or_else(bad)?,
            _ => (text, None),
        }
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad)?,
    };
    let allowed = |c: char| c.is_ascii_alphanumeric() || ".-:_%".contains(c);
    if host.is_empty() || host.len() > 253 || !host.chars().all(allowed) {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}

/// What a probe found. With several portals, the first that answers ok, or else the last
/// portal's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Logged in; the LUN is there, this big.
    Ok { portal: String, lun: u64, size_bytes: u64, block_size: u32 },
    /// The portal refused the TCP connection.
    PortalRefused { portal: String },
    /// No answer within the timeout (the connection, or the target in the middle of a login).
    PortalTimedOut { portal: String, after: Duration },
    /// The portal could not be reached otherwise (no route, no such host, a reset).
    PortalUnreachable { portal: String, error: String },
    /// The target refused the login with this status.
    LoginFailed {
        portal: String,
        target: String,
        initiator: String,
        status_class: u8,
        status_detail: u8,
        /// The status in words (RFC 7143 §11.13.5).
        words: String,
        /// `TargetAddress` of a redirection.
        redirect: Option<String>,
    },
    /// The target's answer to mutual CHAP was wrong or missing.
    MutualChapFailed { portal: String, detail: String },
    /// The LUN is not among those the target reports.
    LunMissing { portal: String, lun: u64, luns: Vec<u64> },
    /// The target broke the protocol or answered a command with an error.
    Protocol { portal: String, detail: String },
    /// The request itself cannot be probed.
    Invalid(String),
}

impl ProbeOutcome {
    /// Whether the node could log in and find its LUN.
    pub fn is_ok(&self) -> bool {
        matches!(self, ProbeOutcome::Ok { .. })
    }

    /// The outcome of the login state machine at `portal`.
    pub fn from_finish(finish: Finish, portal: &str, request: &ProbeRequest) -> ProbeOutcome {
        let portal = portal.to_owned();
        match finish {
            Finish::Ok { size_bytes, block_size } => {
                ProbeOutcome::Ok { portal, lun: request.lun, size_bytes, block_size }
            }
            Finish::LoginFailed { class, detail, redirect } => ProbeOutcome::LoginFailed {
                portal,
                target: request.target_iqn.clone(),
                initiator: request.initiator_iqn.clone(),
                status_class: class,
                status_detail: detail,
                words: status::describe(class, detail).to_owned(),
                redirect,
            },
            Finish::MutualChapFailed(detail) => ProbeOutcome::MutualChapFailed { portal, detail },
            Finish::LunMissing { luns } => {
                ProbeOutcome::LunMissing { portal, lun: request.lun, luns }
            }
            Finish::Protocol(detail) => ProbeOutcome::Protocol { portal, detail },
        }
    }
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeOutcome::Ok { portal, lun, size_bytes, block_size } => write!(
                f,
                "login ok, LUN {lun} {} ({size_bytes} bytes in {block_size}-byte blocks), portal {portal}",
                human(*size_bytes)
            ),
            ProbeOutcome::PortalRefused { portal } => {
                write!(f, "portal {portal} refused the connection")
            }
            ProbeOutcome::PortalTimedOut { portal, after } => {
                write!(f, "portal {portal} timed out after {}", seconds(*after))
            }
            ProbeOutcome::PortalUnreachable { portal, error } => {
                write!(f, "portal {portal} unreachable: {error}")
            }
            ProbeOutcome::LoginFailed { .. } => login_failed(self, f),
            ProbeOutcome::MutualChapFailed { portal, detail } => {
                write!(f, "mutual CHAP failed: {detail}, portal {portal}")
            }
            ProbeOutcome::LunMissing { portal, lun, luns } => {
                let has: Vec<String> = luns.iter().map(u64::to_string).collect();
                let has = if has.is_empty() { "none".to_owned() } else { has.join(", ") };
                write!(f, "LUN {lun} missing (target has {has}), portal {portal}")
            }
            ProbeOutcome::Protocol { portal, detail } => {
                write!(f, "iSCSI error: {detail}, portal {portal}")
            }
            ProbeOutcome::Invalid(why) => write!(f, "cannot probe: {why}"),
        }
    }
}

fn login_failed(outcome: &ProbeOutcome, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let ProbeOutcome::LoginFailed {
        portal,
        target,
        initiator,
        status_class,
        status_detail,
        words,
        redirect,
    } = outcome
    else {
        return Ok(());
    };
    let code = status::code(*status_class, *status_detail);
    match (*status_class, *status_detail) {
        (2, 1) => write!(f, "CHAP rejected: {words} ({code})")?,
        (2, 2) => write!(f, "initiator {initiator} not allowed: {words} ({code})")?,
        // tgtd answers 0x0203 also to an initiator its ACL leaves out.
        (2, 3) => write!(
            f,
            "target {target} not found, or initiator {initiator} not in its ACL ({code})"
        )?,
        (2, 4) => write!(f, "target {target} removed ({code})")?,
        _ => write!(f, "login refused: {words} ({code})")?,
    }
    if let Some(to) = redirect {
        write!(f, " to {to:?}")?;
    }
    write!(f, ", portal {portal}")
}

fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Bytes in binary units: `20 GiB`, `1.5 GiB`, `512 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ProbeRequest {
        ProbeRequest {
            portals: vec!["10.0.0.5".into()],
            target_iqn: "iqn.2024-01.org.example:disk1".into(),
            lun: 1,
            initiator_iqn: "iqn.2024-01.org.example.node:n1".into(),
            chap: Some(Credentials { user: "u".into(), secret: "s3cret-chap".into() }),
            mutual: Some(Credentials { user: "t".into(), secret: "s3cret-mutual".into() }),
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn portals_are_parsed_with_the_default_port() {
        let ok = |p: &str| parse_portal(p).unwrap();
        assert_eq!(ok("10.0.0.5"), ("10.0.0.5".into(), 3260));
        assert_eq!(ok("10.0.0.5:3261"), ("10.0.0.5".into(), 3261));
        assert_eq!(ok("10.0.0.5:3260,1"), ("10.0.0.5".into(), 3260));
        assert_eq!(ok("[fd00::5]:3262"), ("fd00::5".into(), 3262));
        assert_eq!(ok("[fd00::5]"), ("fd00::5".into(), 3260));
        assert_eq!(ok("fd00::5"), ("fd00::5".into(), 3260));
        assert_eq!(ok("san.example"), ("san.example".into(), 3260));
        for bad in ["", ":3260", "h:0", "h:99999", "[fd00::5", "[::1]x", "a b:1", "h:x"] {
            assert!(parse_portal(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn requests_are_validated() {
        assert_eq!(request().validate(), Ok(()));
        let mut r = request();
        r.chap = None;
        assert_eq!(r.validate(), Err("mutual CHAP without CHAP".into()));
        let mut r = request();
        r.lun = MAX_LUN + 1;
        assert!(r.validate().is_err());
        let mut r = request();
        r.target_iqn = "iqn x".into();
        assert!(r.validate().is_err());
        let mut r = request();
        r.portals.clear();
        assert!(r.validate().is_err());
        let mut r = request();
        r.chap.as_mut().unwrap().secret.clear();
        assert!(r.validate().is_err());
        let mut r = request();
        r.timeout = Duration::ZERO;
        assert!(r.validate().is_err());
    }

    #[test]
    fn secrets_are_never_shown() {
        let r = request();
        let shown = format!("{r:?} {:?}", r.config());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("iqn.2024-01.org.example.node:n1"));
    }

    #[test]
    fn each_outcome_is_one_line_an_operator_reads() {
        let r = request();
        let p = "10.0.0.5:3260";
        let line = |f: Finish| ProbeOutcome::from_finish(f, p, &r).to_string();
        let failed = |class, detail| Finish::LoginFailed { class, detail, redirect: None };
        assert_eq!(
            line(Finish::Ok { size_bytes: 20 << 30, block_size: 512 }),
            "login ok, LUN 1 20 GiB (21474836480 bytes in 512-byte blocks), portal 10.0.0.5:3260"
        );
        assert_eq!(
            line(failed(2, 1)),
            "CHAP rejected: authentication failure (0x0201), portal 10.0.0.5:3260"
        );
        assert!(line(failed(2, 2)).starts_with(
            "initiator iqn.2024-01.org.example.node:n1 not allowed: authorization failure (0x0202)"
        ));
        assert!(line(failed(2, 3)).starts_with("target iqn.2024-01.org.example:disk1 not found"));
        assert!(line(failed(3, 1)).starts_with("login refused: service unavailable (0x0301)"));
        let moved = Finish::LoginFailed { class: 1, detail: 1, redirect: Some("10.0.0.6".into()) };
        assert!(line(moved).contains("target moved temporarily (0x0101) to \"10.0.0.6\""));
        assert_eq!(
            line(Finish::LunMissing { luns: vec![0, 1] }),
            "LUN 1 missing (target has 0, 1), portal 10.0.0.5:3260"
        );
        let refused = ProbeOutcome::PortalRefused { portal: p.into() };
        assert_eq!(refused.to_string(), "portal 10.0.0.5:3260 refused the connection");
        assert!(!refused.is_ok());
        let after = Duration::from_secs(5);
        let timed_out = ProbeOutcome::PortalTimedOut { portal: p.into(), after };
        assert_eq!(timed_out.to_string(), "portal 10.0.0.5:3260 timed out after 5 s");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(16 << 20), "16 MiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(u64::MAX), "16 EiB");
    }
}
