//! Boot reports: what a node's script tells bootvol of its own progress, as
//! `GET <public_url>/report/<mac>?stage=<stage>&err=${errno}` (`imgfetch`, its errors ignored).
//!
//! [`Stage`] is the fixed list of steps a script can see; [`parse_query`] reads the query a
//! script sends (bounded, total: any bytes in, a [`Report`] or a refusal out); [`IpxeError`]
//! decodes iPXE's `${errno}` into words from iPXE's documented layout of its error codes
//! (`include/errno.h`): bits 30-24 are the closest POSIX error, whose iPXE number and text
//! [`posix_text`] knows; bits 23-13 name the source file, 12-8 disambiguate within it, 7-0 are
//! the platform's (PXE or EFI) code. `https://ipxe.org/err/<8 hex digits>` documents each code.
//!
//! A report is a claim from the network: nothing here trusts it beyond its shape, and nothing
//! anywhere changes a node for it. Pure: no I/O, no clock.

use std::fmt;

/// A step of a boot script, in the words of the report URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The node received its script (the first line the script runs).
    Script,
    /// Every volume is attached, just before `sanboot`.
    Sanhook,
    /// A `sanhook` failed (`err`: iPXE's `${errno}`).
    SanhookFailed,
    /// `sanboot` failed (or returned).
    SanbootFailed,
    /// The kernel and initrd were fetched, just before `boot`.
    Kernel,
    /// `kernel`, `initrd` or `boot` failed.
    KernelFailed,
}

impl Stage {
    /// Every stage, in the order of a boot.
    pub const ALL: [Stage; 6] = [
        Stage::Script,
        Stage::Sanhook,
        Stage::SanhookFailed,
        Stage::SanbootFailed,
        Stage::Kernel,
        Stage::KernelFailed,
    ];

    /// The stage's word in the report URL, the event and the metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Script => "script",
            Stage::Sanhook => "sanhook",
            Stage::SanhookFailed => "sanhook-failed",
            Stage::SanbootFailed => "sanboot-failed",
            Stage::Kernel => "kernel",
            Stage::KernelFailed => "kernel-failed",
        }
    }

    /// The stage a word names, if any.
    pub fn parse(word: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// Whether the stage reports a failure.
    pub fn failed(self) -> bool {
        matches!(self, Stage::SanhookFailed | Stage::SanbootFailed | Stage::KernelFailed)
    }

    /// `ok` or `failed`, the metric's `result` label.
    pub fn result(self) -> &'static str {
        if self.failed() { "failed" } else { "ok" }
    }

    /// How the stage reads in a sentence ("sanhook failed").
    pub fn describe(self) -> &'static str {
        match self {
            Stage::Script => "script received",
            Stage::Sanhook => "volumes attached",
            Stage::SanhookFailed => "sanhook failed",
            Stage::SanbootFailed => "sanboot failed",
            Stage::Kernel => "kernel fetched",
            Stage::KernelFailed => "kernel boot failed",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest query a report may carry (`stage=sanhook-failed&err=0x0216eb3c` is 36 bytes).
pub const MAX_QUERY: usize = 64;

/// One report as the script sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub stage: Stage,
    /// iPXE's error, for a failed stage when it sent a non-zero one (an ok stage's `${errno}`
    /// is an earlier command's, and is not kept).
    pub error: Option<IpxeError>,
}

/// Reads a report's query (`stage=<stage>&err=<errno>`, in any order, `err` optional). Refused:
/// a query longer than [`MAX_QUERY`], a key other than these two or one given twice, a stage
/// not in [`Stage::ALL`], an `err` that is neither `0x` and up to 8 hex digits nor a decimal
/// `u32`.
pub fn parse_query(query: &str) -> Result<Report, &'static str> {
    if query.len() > MAX_QUERY {
        return Err("query too long");
    }
    let (mut stage, mut err) = (None, None);
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').ok_or("not key=value")?;
        let slot = match key {
            "stage" => &mut stage,
            "err" => &mut err,
            _ => return Err("unknown key"),
        };
        if slot.replace(value).is_some() {
            return Err("key given twice");
        }
    }
    let stage = Stage::parse(stage.ok_or("no stage")?).ok_or("unknown stage")?;
    let code = err.map(parse_errno).transpose()?;
    let error = code.filter(|c| *c != 0 && stage.failed()).map(IpxeError);
    Ok(Report { stage, error })
}

/// `${errno}` as iPXE prints it (`0x` and hex digits) or as a decimal number.
fn parse_errno(text: &str) -> Result<u32, &'static str> {
    let bad = "err is not a 32-bit number";
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    // from_str_radix takes a sign; a report's number has none.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad);
    }
    u32::from_str_radix(digits, radix).map_err(|_| bad)
}

/// An iPXE error code (`${errno}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpxeError(pub u32);

impl IpxeError {
    /// The POSIX error class, bits 30-24.
    pub fn class(self) -> u8 {
        ((self.0 >> 24) & 0x7f) as u8
    }

    /// The class in words ("Permission denied"), as iPXE's `errno.h` names it.
    pub fn text(self) -> &'static str {
        posix_text(self.class())
    }

    /// The code as iPXE prints it in its messages: 8 hex digits.
    pub fn hex(self) -> String {
        format!("{:08x}", self.0)
    }

    /// iPXE's page on this code.
    pub fn url(self) -> String {
        format!("https://ipxe.org/err/{}", self.hex())
    }

    /// The class in words, with what it most likely means at `stage` of a `scenario` boot:
    /// a `sanhook` of an iSCSI volume refused with "Permission denied" or "Operation not
    /// permitted" is the target refusing the login (CHAP, or the initiator's IQN).
    pub fn describe(self, stage: Stage, scenario: &str) -> String {
        let text = self.text();
        let login = matches!(self.class(), 0x02 | 0x41);
        if stage == Stage::SanhookFailed && scenario == "iscsi" && login {
            format!("{text} (iSCSI login)")
        } else {
            text.to_owned()
        }
    }
}

impl fmt::Display for IpxeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08x} {}", self.0, self.text())
    }
}

/// iPXE's POSIX error numbers (its own, not Linux's) and their texts, from `include/errno.h`.
const POSIX: [&str; 0x50] = [
    "Operation completed successfully",
    "Argument list too long",
    "Permission denied",
    "Address already in use",
    "Address not available",
    "Address family not supported",
    "Resource temporarily unavailable",
    "Connection already in progress",
    "Bad file descriptor",
    "Bad message",
    "Device or resource busy",
    "Operation canceled",
    "No child processes",
    "Connection aborted",
    "Connection refused",
    "Connection reset",
    "Resource deadlock avoided",
    "Destination address required",
    "Mathematics argument out of domain of function",
    "Disk quota exceeded",
    "File exists",
    "Bad address",
    "File too large",
    "Host is unreachable",
    "Identifier removed",
    "Illegal byte sequence",
    "Operation in progress",
    "Interrupted function call",
    "Invalid argument",
    "Input/output error",
    "Socket is connected",
    "Is a directory",
    "Too many levels of symbolic links",
    "Too many open files",
    "Too many links",
    "Message too long",
    "Multihop attempted",
    "Filename too long",
    "Network is down",
    "Connection aborted by network",
    "Network unreachable",
    "Too many open files in system",
    "No buffer space available",
    "No message is available on the STREAM head read queue",
    "No such device",
    "No such file or directory",
    "Exec format error",
    "No locks available",
    "Link has been severed",
    "Not enough space",
    "No message of the desired type",
    "Protocol not available",
    "No space left on device",
    "No STREAM resources",
    "Not a STREAM",
    "Function not implemented",
    "The socket is not connected",
    "Not a directory",
    "Directory not empty",
    "Not a socket",
    "Operation not supported",
    "Inappropriate I/O control operation",
    "No such device or address",
    "Operation not supported on socket",
    "Value too large to be stored in data type",
    "Operation not permitted",
    "Broken pipe",
    "Protocol error",
    "Protocol not supported",
    "Protocol wrong type for socket",
    "Result too large",
    "Read-only file system",
    "Invalid seek",
    "No such process",
    "Stale file handle",
    "Timer expired",
    "Connection timed out",
    "Text file busy",
    "Operation would block",
    "Improper link",
];

/// The text of iPXE's POSIX error number `class` (0x7f: an error the platform, BIOS or EFI,
/// returned; past the list: unknown).
pub fn posix_text(class: u8) -> &'static str {
    match POSIX.get(usize::from(class)) {
        Some(text) => text,
        None if class == 0x7f => "Platform-generated error",
        None => "Unknown error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_round_trip_and_say_their_result() {
        for stage in Stage::ALL {
            assert_eq!(Stage::parse(stage.as_str()), Some(stage));
        }
        assert_eq!(Stage::parse("Sanhook"), None);
        assert_eq!(Stage::parse(""), None);
        let failed: Vec<&str> =
            Stage::ALL.iter().filter(|s| s.failed()).map(|s| s.as_str()).collect();
        assert_eq!(failed, ["sanhook-failed", "sanboot-failed", "kernel-failed"]);
        assert_eq!(Stage::Sanhook.result(), "ok");
        assert_eq!(Stage::KernelFailed.result(), "failed");
    }

    #[test]
    fn errors_decode_to_their_documented_class() {
        // The first six are codes iPXE printed (on this project's VMs, or on ipxe.org; the
        // first is a CHAP login tgtd refused); the others are built from the layout, class first.
        let cases = [
            (0x410d_613c, 0x41, "Operation not permitted"),
            (0x0216_eb3c, 0x02, "Permission denied"),
            (0x1d85_2039, 0x1d, "Input/output error"),
            (0x3c09_2003, 0x3c, "Operation not supported"),
            (0x2c0d_603b, 0x2c, "No such device"),
            (0x2d0c_613b, 0x2d, "No such file or directory"),
            (0x0e13_2003, 0x0e, "Connection refused"),
            (0x4c10_6035, 0x4c, "Connection timed out"),
            (0x7f04_0001, 0x7f, "Platform-generated error"),
            (0x5000_0000, 0x50, "Unknown error"),
        ];
        for (code, class, text) in cases {
            let error = IpxeError(code);
            assert_eq!(error.class(), class, "{code:#x}");
            assert_eq!(error.text(), text, "{code:#x}");
        }
        // Bit 31 is iPXE's reserved bit, not part of the class.
        assert_eq!(IpxeError(0x8216_eb3c).text(), "Permission denied");
        let error = IpxeError(0x0216_eb3c);
        assert_eq!(error.to_string(), "0x0216eb3c Permission denied");
        assert_eq!(error.url(), "https://ipxe.org/err/0216eb3c");
        assert_eq!(
            error.describe(Stage::SanhookFailed, "iscsi"),
            "Permission denied (iSCSI login)"
        );
        assert_eq!(error.describe(Stage::SanhookFailed, "aoe"), "Permission denied");
        assert_eq!(
            IpxeError(0x410d_613c).describe(Stage::SanhookFailed, "iscsi"),
            "Operation not permitted (iSCSI login)"
        );
        assert_eq!(error.describe(Stage::SanbootFailed, "iscsi"), "Permission denied");
        assert_eq!(
            IpxeError(0x0e13_2003).describe(Stage::SanhookFailed, "iscsi"),
            "Connection refused"
        );
    }

    #[test]
    fn queries_are_read_strictly() {
        let report = parse_query("stage=sanhook-failed&err=0x0216eb3c").unwrap();
        assert_eq!(report.stage, Stage::SanhookFailed);
        assert_eq!(report.error, Some(IpxeError(0x0216_eb3c)));
        // Decimal, either order.
        let report = parse_query("err=35056444&stage=sanhook-failed").unwrap();
        assert_eq!(report.error, Some(IpxeError(0x0216_eb3c)));
        // No error, or a zero one, or an ok stage's (an earlier command's): none kept.
        for query in
            ["stage=kernel-failed", "stage=kernel-failed&err=0", "stage=sanhook&err=0x0216eb3c"]
        {
            assert_eq!(parse_query(query).unwrap().error, None, "{query}");
        }
        assert_eq!(parse_query("stage=script&err=").unwrap_err(), "err is not a 32-bit number");
        for (query, why) in [
            ("", "not key=value"),
            ("stage", "not key=value"),
            ("stage=booted", "unknown stage"),
            ("stage=script&stage=sanhook", "key given twice"),
            ("stage=script&mac=x", "unknown key"),
            ("err=1", "no stage"),
            ("stage=sanhook-failed&err=0x1ffffffff", "err is not a 32-bit number"),
            ("stage=sanhook-failed&err=4294967296", "err is not a 32-bit number"),
            ("stage=sanhook-failed&err=-1", "err is not a 32-bit number"),
            ("stage=sanhook-failed&err=+1", "err is not a 32-bit number"),
            ("stage=sanhook-failed&err=12ab", "err is not a 32-bit number"),
            ("stage=sanhook-failed&err=${errno}", "err is not a 32-bit number"),
        ] {
            assert_eq!(parse_query(query), Err(why), "{query:?}");
        }
        let long = format!("stage=script&err={}", "0".repeat(MAX_QUERY));
        assert_eq!(parse_query(&long), Err("query too long"));
        assert_eq!(
            parse_query("stage=sanhook-failed&err=4294967295").unwrap().error,
            Some(IpxeError(u32::MAX))
        );
    }

    #[test]
    fn any_bytes_give_an_answer() {
        let mut seed = 0x2545_f491_u32;
        for _ in 0..20_000 {
            let len = (seed % 80) as usize;
            let text: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    char::from(b"stage=rcipt&err0x9f-kn"[(seed % 22) as usize])
                })
                .collect();
            let _ = parse_query(&text);
        }
    }
}
