//! The probe of a node's boot target from the appliance, as plain values: what to probe
//! ([`plan`]), the wire codecs ([`aoe`]: ATA over Ethernet frames; [`rpc`]: ONC RPC and XDR for
//! the portmapper and MOUNT), and what a probe found ([`Report`]).
//!
//! Sans-io (tidy's SANS_IO list): no socket, no clock, no file. The sockets, HTTP and iSCSI
//! logins are `bootvol_control::probe`'s; storing reports is `bootvol_db`'s.

pub mod aoe;
pub mod plan;
pub mod rpc;

use std::fmt;
use std::str::FromStr;

/// The longest summary or target line kept (longer text is cut on a character boundary).
pub const LINE_LIMIT: usize = 300;
/// The most target lines kept per node.
pub const LINES_LIMIT: usize = 64;

/// How a probe of one target, or of a node, ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Failed,
    /// FCoE and HBA: the appliance cannot reach the target. Never shown as ok.
    NotProbeable,
    /// The node is powered on and `--live` was not given: nothing was sent.
    SkippedPoweredOn,
}

impl Status {
    /// The stored and printed form.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::NotProbeable => "not-probeable",
            Status::SkippedPoweredOn => "skipped-powered-on",
        }
    }

    /// As an operator reads it.
    pub fn label(&self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "FAILED",
            Status::NotProbeable => "not probeable",
            Status::SkippedPoweredOn => "skipped (powered on)",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = String;

    fn from_str(text: &str) -> Result<Status, String> {
        [Status::Ok, Status::Failed, Status::NotProbeable, Status::SkippedPoweredOn]
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| format!("{text:?} is not a probe status"))
    }
}

/// One target's outcome: its volume, kind, status and what was found, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetResult {
    pub volume: String,
    pub kind: &'static str,
    pub status: Status,
    pub text: String,
}

impl TargetResult {
    /// `volume (kind): status: text`.
    pub fn line(&self) -> String {
        cut(&format!("{} ({}): {}: {}", self.volume, self.kind, self.status.label(), self.text))
    }
}

/// A node's last probe: when (Unix seconds), its status, a one-line summary and a line per
/// target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub node_uuid: String,
    pub probed_at: i64,
    pub status: Status,
    pub summary: String,
    pub lines: Vec<String>,
}

impl Report {
    /// The node's report from its targets' results: failed when one failed, not probeable
    /// when none could be probed, else ok. The summary is the first failure's text, else the
    /// boot volume's.
    pub fn from_results(node_uuid: &str, probed_at: i64, results: &[TargetResult]) -> Report {
        let failed = results.iter().find(|r| r.status == Status::Failed);
        let status = if failed.is_some() {
            Status::Failed
        } else if results.iter().any(|r| r.status == Status::Ok) {
            Status::Ok
        } else if results.iter().any(|r| r.status == Status::SkippedPoweredOn) {
            Status::SkippedPoweredOn
        } else {
            Status::NotProbeable
        };
        let summary = failed.or(results.first()).map_or_else(
            || "nothing to probe".to_owned(),
            |r| {
                if results.len() > 1 && r.status == Status::Failed {
                    format!("{}: {}", r.volume, r.text)
                } else {
                    r.text.clone()
                }
            },
        );
        Report {
            node_uuid: node_uuid.to_owned(),
            probed_at,
            status,
            summary: cut(&summary),
            lines: results.iter().take(LINES_LIMIT).map(TargetResult::line).collect(),
        }
    }

    /// A report with no target: `status` and why.
    pub fn without_targets(node_uuid: &str, probed_at: i64, status: Status, why: &str) -> Report {
        Report {
            node_uuid: node_uuid.to_owned(),
            probed_at,
            status,
            summary: cut(why),
            lines: Vec::new(),
        }
    }
}

/// `text` on one line, at most [`LINE_LIMIT`] bytes.
pub fn cut(text: &str) -> String {
    let one: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one.len() <= LINE_LIMIT {
        return one;
    }
    let mut end = LINE_LIMIT - 3;
    while !one.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &one[..end])
}

/// A size as an operator reads it: `20 GiB`, `512 MiB`, `4096 bytes`.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] =
        [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            let whole = bytes / size;
            let tenth = (bytes % size) * 10 / size;
            return if tenth == 0 {
                format!("{whole} {unit}")
            } else {
                format!("{whole}.{tenth} {unit}")
            };
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(volume: &str, status: Status, text: &str) -> TargetResult {
        TargetResult { volume: volume.into(), kind: "aoe", status, text: text.into() }
    }

    #[test]
    fn a_node_fails_when_one_target_fails_and_is_never_ok_unprobed() {
        let ok = result("v1", Status::Ok, "present, 20 GiB");
        let bad = result("v2", Status::Failed, "absent");
        let fc = result("v3", Status::NotProbeable, "not probeable");
        let r = Report::from_results("u", 5, &[ok.clone(), bad]);
        assert_eq!((r.status, r.summary.as_str()), (Status::Failed, "v2: absent"));
        assert_eq!(r.lines[1], "v2 (aoe): FAILED: absent");
        let r = Report::from_results("u", 5, &[ok.clone(), fc.clone()]);
        assert_eq!((r.status, r.summary.as_str()), (Status::Ok, "present, 20 GiB"));
        assert_eq!(Report::from_results("u", 5, &[fc]).status, Status::NotProbeable);
        for s in ["ok", "failed", "not-probeable", "skipped-powered-on"] {
            assert_eq!(s.parse::<Status>().unwrap().as_str(), s);
        }
        assert!("fine".parse::<Status>().is_err());
    }

    #[test]
    fn sizes_and_lines() {
        assert_eq!(size_text(20 << 30), "20 GiB");
        assert_eq!(size_text(1536 << 20), "1.5 GiB");
        assert_eq!(size_text(4096), "4 KiB");
        assert_eq!(size_text(100), "100 bytes");
        assert_eq!(cut("a\nb"), "a b");
        let long = "é".repeat(400);
        assert!(cut(&long).len() <= LINE_LIMIT);
    }
}
