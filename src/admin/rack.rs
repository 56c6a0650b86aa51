//! The nodes list of a whole rack, pure: one summary row per node (its scenario and boot problem
//! are the boot snapshot's, [`NodeBoot`]), the list's query (search by name, MAC in any common
//! form, UUID, scenario or boot problem; filters by state, power, maintenance, problem; sort;
//! page), the counts of what needs attention, which actions fit a node's state (the provision
//! verbs are the conductor's table, [`bootvol_control::conductor::states::allowed`]; which of them ask
//! for a confirmation and in which words is `actions`'), and the Cinder sync verdict.
//!
//! No I/O: `mod.rs` loads the records and renders; everything here is tested with plain values.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use bootvol_control::conductor::states::{allowed, deletable};
use bootvol_core::model::{NodeRecord, PowerState, ProvisionState};

/// Rows shown on one page of the list unless `per` asks for another of [`PAGE_SIZES`].
pub(super) const PAGE_SIZE: usize = 50;

/// The page sizes the list offers (`per=`).
pub(super) const PAGE_SIZES: [usize; 3] = [50, 100, 500];

/// The longest `last_error` shown in a list row (the node page shows all of it).
const ERROR_CHARS: usize = 100;

/// One node as the list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Summary {
    pub uuid: String,
    pub name: String,
    /// The node's MACs as stored (`52:54:00:12:34:56`).
    pub macs: Vec<String>,
    pub power: Option<&'static str>,
    pub provision: &'static str,
    /// Where a running action takes the node (provision, else power).
    pub heading_to: Option<&'static str>,
    pub maintenance: bool,
    /// The scenario of the script the boot snapshot serves the node.
    pub scenario: String,
    /// Why the node gets the default script, or would once deployed (the snapshot's).
    pub boot_problem: Option<String>,
    /// The whole `last_error`.
    pub last_error: Option<String>,
    /// Its first line, cut to [`ERROR_CHARS`].
    pub error_line: Option<String>,
    /// One of the node's volumes drifted in the last Cinder sync pass.
    pub drift: bool,
    /// The node's last boot report, when it was a failure (its message: "sanhook failed: ...").
    pub boot_failed: Option<String>,
}

/// What the boot snapshot says of a node: the scenario of the script it serves and why the
/// node cannot boot its volume (the default script served, or served once deployed), if so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct NodeBoot {
    pub scenario: String,
    pub problem: Option<String>,
}

impl NodeBoot {
    /// The snapshot's verdict on the node `uuid`; a node it does not know yet (just made: it is
    /// rebuilt after every change) says so.
    pub(super) fn of(snapshot: &bootvol_core::boot::BootSnapshot, uuid: &str) -> NodeBoot {
        match snapshot.node(uuid) {
            Some(script) => NodeBoot {
                scenario: script.scenario.to_owned(),
                problem: script.boot_problem().map(str::to_owned),
            },
            None => NodeBoot { scenario: "not in the boot snapshot yet".into(), problem: None },
        }
    }
}

impl Summary {
    /// The row of `record`; `boot` is what the boot snapshot serves it, `drifted` the volume
    /// ids of the last pass's drift.
    pub(super) fn of(record: &NodeRecord, boot: NodeBoot, drifted: &HashSet<String>) -> Summary {
        let n = &record.node;
        Summary {
            uuid: n.uuid.clone(),
            name: n.name.clone(),
            macs: record.ports.iter().map(|p| p.address.to_string()).collect(),
            power: n.power_state.map(|p| p.as_str()),
            provision: n.provision_state.as_str(),
            heading_to: n
                .target_provision_state
                .map(|s| s.as_str())
                .or(n.target_power_state.map(|p| p.as_str())),
            maintenance: n.maintenance,
            scenario: boot.scenario,
            boot_problem: boot.problem,
            last_error: n.last_error.clone(),
            error_line: n.last_error.as_deref().map(one_line),
            drift: record.volume_targets.iter().any(|t| drifted.contains(&t.volume_id)),
            boot_failed: None,
        }
    }

    /// The row with the node's last boot report (the payload of its newest
    /// `baremetal.node.boot_reported`): a failure is shown and needs attention.
    pub(super) fn with_report(mut self, report: Option<&serde_json::Value>) -> Summary {
        self.boot_failed = report.filter(|r| boot_report_needs_attention(r)).map(|r| {
            r["message"].as_str().map_or_else(|| "a boot step failed".to_owned(), str::to_owned)
        });
        self
    }

    fn failed(&self) -> bool {
        self.provision == ProvisionState::DeployFailed.as_str()
    }

    fn error(&self) -> bool {
        self.provision == ProvisionState::Error.as_str()
    }

    /// Failed, in error, in maintenance, drifted, or it cannot boot its volume.
    fn problem(&self) -> bool {
        self.failed()
            || self.error()
            || self.maintenance
            || self.drift
            || self.boot_problem.is_some()
            || self.boot_failed.is_some()
    }
}

/// The first line of `text`, cut to [`ERROR_CHARS`] characters (with `…` when cut).
pub(super) fn one_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    let cut: String = first.chars().take(ERROR_CHARS).collect();
    if cut.len() < text.trim_end().len() { format!("{cut}…") } else { cut }
}

/// The hex digits of a MAC typed in any common form (`52:54:00:ab:cd:ef`, `52-54-00-AB-CD-EF`,
/// `5254.00ab.cdef`, `525400abcdef`), lower case; `None` when `text` is not one (or part of
/// one: at least two hex digits, separators only between them).
fn mac_digits(text: &str) -> Option<String> {
    let digits: String =
        text.chars().filter(|c| !matches!(c, ':' | '-' | '.')).collect::<String>().to_lowercase();
    (digits.len() >= 2 && digits.len() <= 12 && digits.chars().all(|c| c.is_ascii_hexdigit()))
        .then_some(digits)
}

/// The columns the list sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SortKey {
    Name,
    Mac,
    Power,
    State,
    Scenario,
    Error,
}

impl SortKey {
    const ALL: &'static [(SortKey, &'static str)] = &[
        (SortKey::Name, "name"),
        (SortKey::Mac, "mac"),
        (SortKey::Power, "power"),
        (SortKey::State, "state"),
        (SortKey::Scenario, "scenario"),
        (SortKey::Error, "error"),
    ];

    fn name(self) -> &'static str {
        SortKey::ALL.iter().find(|(k, _)| *k == self).map_or("name", |(_, n)| n)
    }
}

/// `GET /admin/?q=&state=&power=&maintenance=&problem=&drift=&sort=&dir=&page=&per=`, parsed; what
/// does not parse is ignored (the whole list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ListQuery {
    pub q: String,
    pub state: Option<String>,
    pub power: Option<String>,
    pub maintenance: Option<bool>,
    pub problem: bool,
    pub drift: bool,
    pub sort: SortKey,
    pub descending: bool,
    /// From 1.
    pub page: usize,
    /// Rows a page: one of [`PAGE_SIZES`].
    pub per: usize,
}

impl ListQuery {
    pub(super) fn parse(query: &HashMap<String, String>) -> ListQuery {
        let text = |k: &str| query.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let flag = |k: &str| matches!(text(k), Some("1" | "yes" | "true" | "on"));
        ListQuery {
            q: text("q").unwrap_or("").to_owned(),
            state: text("state")
                .filter(|s| ProvisionState::ALL.iter().any(|p| p.as_str() == *s))
                .map(str::to_owned),
            power: text("power")
                .filter(|s| *s == "unknown" || PowerState::ALL.iter().any(|p| p.as_str() == *s))
                .map(str::to_owned),
            maintenance: match text("maintenance") {
                Some("1" | "yes" | "true" | "on") => Some(true),
                Some("0" | "no" | "false" | "off") => Some(false),
                _ => None,
            },
            problem: flag("problem"),
            drift: flag("drift"),
            sort: text("sort")
                .and_then(|s| SortKey::ALL.iter().find(|(_, n)| *n == s))
                .map_or(SortKey::Name, |(k, _)| *k),
            descending: text("dir") == Some("desc"),
            page: text("page").and_then(|p| p.parse().ok()).filter(|p| *p >= 1).unwrap_or(1),
            per: text("per")
                .and_then(|p| p.parse().ok())
                .filter(|p| PAGE_SIZES.contains(p))
                .unwrap_or(PAGE_SIZE),
        }
    }

    /// Whether any search or filter narrows the list.
    pub(super) fn narrowed(&self) -> bool {
        !self.q.is_empty()
            || self.state.is_some()
            || self.power.is_some()
            || self.maintenance.is_some()
            || self.problem
            || self.drift
    }

    /// Whether `s` passes the search and the filters.
    pub(super) fn matches(&self, s: &Summary) -> bool {
        if let Some(state) = &self.state
            && s.provision != state
        {
            return false;
        }
        if let Some(power) = &self.power
            && s.power.unwrap_or("unknown") != power
        {
            return false;
        }
        if self.maintenance.is_some_and(|m| m != s.maintenance)
            || (self.problem && !s.problem())
            || (self.drift && !s.drift)
        {
            return false;
        }
        let q = self.q.to_lowercase();
        if q.is_empty() {
            return true;
        }
        if s.name.to_lowercase().contains(&q) || s.uuid.contains(&q) {
            return true;
        }
        // What the row says of its boot: "invalid", "not bootable", the problem's words.
        let boot = |text: &str| text.to_lowercase().contains(&q);
        if boot(&s.scenario)
            || s.boot_problem.as_deref().is_some_and(|p| boot(p) || boot(NOT_BOOTABLE))
            || s.boot_failed.as_deref().is_some_and(|r| boot(r) || boot(BOOT_FAILED))
        {
            return true;
        }
        if let Some(digits) = mac_digits(&q) {
            // Whole bytes only: "00:ab" must not match across a byte boundary.
            return s.macs.iter().any(|m| {
                let mac = m.replace(':', "");
                (0..mac.len()).step_by(2).any(|i| mac[i..].starts_with(&digits))
            }) || s.uuid.replace('-', "").contains(&digits);
        }
        false
    }

    /// The query string of this query with `changes` applied (`""` removes a key), for links.
    pub(super) fn href(&self, changes: &[(&str, &str)]) -> String {
        let page = self.page.to_string();
        let maintenance = self.maintenance.map(|m| if m { "1" } else { "0" });
        let mut pairs: Vec<(&str, String)> = vec![
            ("q", self.q.clone()),
            ("state", self.state.clone().unwrap_or_default()),
            ("power", self.power.clone().unwrap_or_default()),
            ("maintenance", maintenance.unwrap_or("").to_owned()),
            ("problem", if self.problem { "1" } else { "" }.to_owned()),
            ("drift", if self.drift { "1" } else { "" }.to_owned()),
            ("sort", if self.sort == SortKey::Name { "" } else { self.sort.name() }.to_owned()),
            ("dir", if self.descending { "desc" } else { "" }.to_owned()),
            ("page", if self.page == 1 { String::new() } else { page }),
            ("per", if self.per == PAGE_SIZE { String::new() } else { self.per.to_string() }),
        ];
        for (key, value) in changes {
            match pairs.iter_mut().find(|(k, _)| k == key) {
                Some(pair) => pair.1 = (*value).to_owned(),
                None => pairs.push((key, (*value).to_owned())),
            }
        }
        let text: Vec<String> = pairs
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={}", percent_encoding::utf8_percent_encode(&v, QUERY)))
            .collect();
        if text.is_empty() { "/admin/".to_owned() } else { format!("/admin/?{}", text.join("&")) }
    }

    /// The arrow a column's header shows: `▲` sorted by it ascending, `▼` descending.
    pub(super) fn arrow(&self, key: &str) -> &'static str {
        match (self.sort.name() == key, self.descending) {
            (true, false) => " ▲",
            (true, true) => " ▼",
            _ => "",
        }
    }

    /// The link of a column's header: sorts by it, ascending first, the other way when it
    /// already sorts by it; back to page 1.
    pub(super) fn sort_href(&self, key: &str) -> String {
        let again = self.sort.name() == key && !self.descending;
        self.href(&[("sort", key), ("dir", if again { "desc" } else { "" }), ("page", "")])
    }
}

/// What a query value is encoded with in a link (the list's and the history's).
pub(super) const QUERY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b':');

/// One page of the list: its rows, and where it is in the whole.
#[derive(Debug, Serialize)]
pub(super) struct Page {
    pub rows: Vec<Summary>,
    /// 1-based index of the first row shown (0 when none).
    pub first: usize,
    pub last: usize,
    /// Rows that matched.
    pub total: usize,
    /// Nodes in all.
    pub all: usize,
    pub page: usize,
    pub pages: usize,
}

fn sort_text(s: &Summary, key: SortKey) -> String {
    match key {
        SortKey::Name => s.name.to_lowercase(),
        SortKey::Mac => s.macs.first().cloned().unwrap_or_default(),
        SortKey::Power => s.power.unwrap_or("").to_owned(),
        SortKey::State => s.provision.to_owned(),
        SortKey::Scenario => s.scenario.clone(),
        SortKey::Error => s.last_error.clone().unwrap_or_default(),
    }
}

/// Filters, sorts (then by name) and cuts `rows` to the query's page (the last page when it
/// asks for one past the end).
pub(super) fn page(rows: Vec<Summary>, query: &ListQuery) -> Page {
    let all = rows.len();
    let mut rows: Vec<Summary> = rows.into_iter().filter(|s| query.matches(s)).collect();
    rows.sort_by(|a, b| {
        let order = sort_text(a, query.sort).cmp(&sort_text(b, query.sort));
        let order = if query.descending { order.reverse() } else { order };
        order.then_with(|| a.name.cmp(&b.name))
    });
    let total = rows.len();
    let pages = total.div_ceil(query.per).max(1);
    let page = query.page.min(pages);
    let start = (page - 1) * query.per;
    let rows: Vec<Summary> = rows.into_iter().skip(start).take(query.per).collect();
    let (first, last) = if rows.is_empty() { (0, 0) } else { (start + 1, start + rows.len()) };
    Page { rows, first, last, total, all, page, pages }
}

/// The words a row shows before a boot problem (searching them finds every such node).
pub(super) const NOT_BOOTABLE: &str = "not bootable";

/// The words a row shows before its last boot report when that was a failure.
pub(super) const BOOT_FAILED: &str = "last boot failed";

/// Whether a node's last boot report (the payload of its newest
/// `baremetal.node.boot_reported`) needs attention: its script reported a failure.
pub(super) fn boot_report_needs_attention(report: &serde_json::Value) -> bool {
    report["result"] == "failed"
}

/// What needs attention, counted over every node.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Attention {
    pub failed: usize,
    pub error: usize,
    pub maintenance: usize,
    pub drift: usize,
    /// Nodes that cannot boot their volume: served the default script, or would be once
    /// deployed.
    pub not_bootable: usize,
    /// Nodes whose last boot report was a failure.
    pub boot_failed: usize,
    pub unknown_macs: usize,
}

impl Attention {
    pub(super) fn any(&self) -> bool {
        self.failed
            + self.error
            + self.maintenance
            + self.drift
            + self.not_bootable
            + self.boot_failed
            + self.unknown_macs
            > 0
    }
}

pub(super) fn attention(rows: &[Summary], unknown_macs: usize) -> Attention {
    Attention {
        failed: rows.iter().filter(|s| s.failed()).count(),
        error: rows.iter().filter(|s| s.error()).count(),
        maintenance: rows.iter().filter(|s| s.maintenance).count(),
        drift: rows.iter().filter(|s| s.drift).count(),
        not_bootable: rows.iter().filter(|s| s.boot_problem.is_some()).count(),
        boot_failed: rows.iter().filter(|s| s.boot_failed.is_some()).count(),
        unknown_macs,
    }
}

/// An action offered on a node's page (a button posting `target` to `form`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Offer {
    /// `power`, `provision` or `delete`.
    pub form: &'static str,
    pub target: &'static str,
    pub label: &'static str,
    /// Whether the server asks for a confirmation naming the node first.
    pub confirm: bool,
}

/// The actions that fit `record` now: none while an action runs (its target state is set);
/// power on unless on, the others unless off (all when the power state is unknown); the
/// provision verbs the state machine allows; delete unless deployed or on its way.
pub(super) fn offers(record: &NodeRecord) -> Vec<Offer> {
    let n = &record.node;
    if n.target_provision_state.is_some() || n.target_power_state.is_some() {
        return Vec::new();
    }
    let offer = |form, target, label| Offer {
        form,
        target,
        label,
        confirm: needs_confirmation(form, target),
    };
    let mut offers = Vec::new();
    if n.power_state != Some(PowerState::On) {
        offers.push(offer("power", "power on", "Power on"));
    }
    if n.power_state != Some(PowerState::Off) {
        offers.push(offer("power", "power off", "Power off"));
        offers.push(offer("power", "soft power off", "Soft power off"));
        offers.push(offer("power", "rebooting", "Reboot"));
    }
    for verb in allowed(n.provision_state) {
        let label = super::actions::Action::Provision(verb).label();
        offers.push(offer("provision", verb.target(), label));
    }
    if deletable(n.provision_state) {
        offers.push(offer("delete", "delete", "Delete node"));
    }
    offers
}

pub(super) use super::actions::{needs_confirmation, started};

/// The word the page shows for the last Cinder sync pass and its class: `failed`, `errors`
/// (some volumes not checked), `drift` (checked, but some no longer match), `ok` only when
/// none of those.
pub(super) fn sync_verdict(
    outcome: &str,
    drifted: i64,
    errors: i64,
) -> (&'static str, &'static str) {
    match outcome {
        "failed" => ("failed", "bad"),
        _ if errors > 0 || outcome == "partial" => ("errors", "bad"),
        _ if drifted > 0 => ("drift", "warn"),
        _ => ("ok", "good"),
    }
}

/// One problem line of a sync pass (`drift: volume V: why`, `error: V on node N: why`,
/// `failed: why`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct SyncLine {
    /// `drift`, `error` or `failed`.
    pub kind: String,
    /// The volume named, when the line names one.
    pub volume: Option<String>,
    pub text: String,
}

pub(super) fn sync_lines(message: &str) -> Vec<SyncLine> {
    message
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (kind, rest) = line.split_once(": ").unwrap_or(("error", line));
            let volume = match kind {
                "drift" => rest.strip_prefix("volume ").and_then(|r| r.split_once(": ")),
                "error" => rest.split_once(" on node "),
                _ => None,
            }
            .map(|(v, _)| v.to_owned());
            SyncLine { kind: kind.to_owned(), volume, text: line.to_owned() }
        })
        .collect()
}

/// An event payload in one line: its scalar fields as `key=value`, cut to 160 characters.
pub(super) fn payload_line(payload: &serde_json::Value) -> String {
    let Some(map) = payload.as_object() else { return payload.to_string() };
    let parts: Vec<String> = map
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => format!("{k}=…"),
            other => format!("{k}={other}"),
        })
        .collect();
    let line = parts.join(" ");
    if line.chars().count() > 160 {
        format!("{}…", line.chars().take(160).collect::<String>())
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(i: usize) -> Summary {
        Summary {
            uuid: format!("44444444-4444-4444-8444-{i:012}"),
            name: format!("node-{i:03}"),
            macs: vec![format!("52:54:00:00:{:02x}:{:02x}", i / 256, i % 256)],
            power: Some("power on"),
            provision: "active",
            heading_to: None,
            maintenance: false,
            scenario: "iscsi".into(),
            boot_problem: None,
            last_error: None,
            error_line: None,
            drift: false,
            boot_failed: None,
        }
    }

    fn query(pairs: &[(&str, &str)]) -> ListQuery {
        ListQuery::parse(&pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect())
    }

    fn rack() -> Vec<Summary> {
        let mut rows: Vec<Summary> = (0..500).map(row).collect();
        rows[250].provision = "deploy failed";
        rows[250].last_error = Some("deploy timed out".into());
        rows[251].provision = "error";
        rows[252].maintenance = true;
        rows[253].drift = true;
        rows[254].power = None;
        rows[255].scenario = "invalid".into();
        rows[255].boot_problem = Some("volume target boot_index 0 has no target_iqn".into());
        rows[256].scenario = "not-deployed".into();
        rows[256].boot_problem = Some("capability iscsi_boot is true but no target".into());
        let failed = serde_json::json!({"result": "failed",
            "message": "sanhook failed: 0x410de13c Operation not permitted (iSCSI login)"});
        rows[257] = rows[257].clone().with_report(Some(&failed));
        let served = serde_json::json!({"result": "ok", "message": "script received"});
        rows[258] = rows[258].clone().with_report(Some(&served));
        rows
    }

    #[test]
    fn a_mac_in_any_common_form_finds_its_node_among_500() {
        for typed in [
            "52:54:00:00:01:2c",
            "52-54-00-00-01-2C",
            "5254.0000.012c",
            "52540000012c",
            " 52:54:00:00:01:2C ",
        ] {
            let found = page(rack(), &query(&[("q", typed)]));
            assert_eq!(found.total, 1, "{typed}");
            assert_eq!(found.rows[0].name, "node-300", "{typed}");
        }
        // By name, by UUID (whole or a part), by a MAC's last bytes.
        assert_eq!(page(rack(), &query(&[("q", "NODE-42")])).total, 10); // node-420..node-429
        assert_eq!(
            page(rack(), &query(&[("q", "4444-8444-000000000300")])).rows[0].name,
            "node-300"
        );
        assert_eq!(page(rack(), &query(&[("q", "01:2c")])).rows[0].name, "node-300");
        // Whole bytes only: "0:01" does not match 00:01 shifted by a digit.
        assert_eq!(page(rack(), &query(&[("q", "zz-not-there")])).total, 0);
    }

    #[test]
    fn pages_of_fifty_counts_and_filters() {
        let first = page(rack(), &query(&[]));
        assert_eq!((first.first, first.last, first.total, first.pages), (1, 50, 500, 10));
        assert_eq!(first.rows.len(), PAGE_SIZE);
        let last = page(rack(), &query(&[("page", "99")]));
        assert_eq!((last.page, last.first, last.last), (10, 451, 500));
        let failed = page(rack(), &query(&[("state", "deploy failed")]));
        assert_eq!(failed.total, 1);
        assert_eq!(page(rack(), &query(&[("problem", "1")])).total, 7);
        assert_eq!(page(rack(), &query(&[("maintenance", "1")])).total, 1);
        assert_eq!(page(rack(), &query(&[("power", "unknown")])).total, 1);
        assert_eq!(page(rack(), &query(&[("drift", "1")])).rows[0].name, "node-253");
        assert_eq!(page(rack(), &query(&[("state", "no such state")])).total, 500);
        let hundred = page(rack(), &query(&[("per", "100"), ("page", "2")]));
        assert_eq!((hundred.first, hundred.last, hundred.pages), (101, 200, 5));
        assert_eq!(page(rack(), &query(&[("per", "500")])).rows.len(), 500);
        assert_eq!(page(rack(), &query(&[("per", "7")])).rows.len(), PAGE_SIZE, "only 50/100/500");
        assert_eq!(query(&[("per", "100"), ("page", "2")]).href(&[]), "/admin/?page=2&per=100");
        let counts = attention(&rack(), 2);
        assert_eq!(
            counts,
            Attention {
                failed: 1,
                error: 1,
                maintenance: 1,
                drift: 1,
                not_bootable: 2,
                boot_failed: 1,
                unknown_macs: 2
            }
        );
        assert!(counts.any());
        assert!(!attention(&[row(1)], 0).any());
        // The boot problems are found by their words, by "not bootable" and by scenario.
        for q in ["not bootable", "target_iqn", "invalid", "last boot failed", "iscsi login"] {
            assert!(page(rack(), &query(&[("q", q)])).total >= 1, "{q}");
        }
        assert_eq!(page(rack(), &query(&[("q", "not bootable")])).total, 2);
    }

    #[test]
    fn sorting_and_links() {
        let by_error = page(rack(), &query(&[("sort", "error"), ("dir", "desc")]));
        assert_eq!(by_error.rows[0].name, "node-250");
        let by_name = page(rack(), &query(&[("dir", "desc")]));
        assert_eq!(by_name.rows[0].name, "node-499");
        let q = query(&[("q", "52:54"), ("state", "active"), ("page", "3")]);
        assert_eq!(q.href(&[("page", "4")]), "/admin/?q=52:54&state=active&page=4");
        assert_eq!(q.sort_href("mac"), "/admin/?q=52:54&state=active&sort=mac");
        let sorted = query(&[("sort", "mac")]);
        assert_eq!(sorted.sort_href("mac"), "/admin/?sort=mac&dir=desc");
        assert_eq!(query(&[]).href(&[]), "/admin/");
        assert_eq!(query(&[("q", "a b&c")]).href(&[]), "/admin/?q=a%20b%26c");
        assert!(q.narrowed() && !query(&[("page", "2")]).narrowed());
    }

    #[test]
    fn a_long_error_is_one_line() {
        assert_eq!(one_line("short"), "short");
        assert_eq!(one_line("first\nsecond"), "first…");
        let long = "x".repeat(300);
        assert_eq!(one_line(&long).chars().count(), ERROR_CHARS + 1);
    }

    fn record(provision: &str, power: Option<&str>) -> NodeRecord {
        serde_json::from_value(json!({
            "node": {"uuid": "44444444-4444-4444-8444-000000000001", "name": "n1", "driver": "fake",
                     "storage_interface": null, "properties": {}, "driver_info": {},
                     "instance_info": {}, "driver_internal_info": {}, "extra": {},
                     "boot_interface": "ipxe", "deploy_interface": "direct", "power_state": power,
                     "target_power_state": null, "provision_state": provision,
                     "target_provision_state": null, "maintenance": false,
                     "maintenance_reason": null, "last_error": null, "created_at": null,
                     "updated_at": null},
            "ports": [], "volume_connectors": [], "volume_targets": []}))
        .unwrap()
    }

    fn labels(record: &NodeRecord) -> Vec<&'static str> {
        offers(record).into_iter().map(|o| o.label).collect()
    }

    #[test]
    fn only_the_actions_that_fit_the_state_are_offered() {
        assert_eq!(
            labels(&record("deploy failed", Some("power off"))),
            ["Power on", "Deploy", "Undeploy", "Rebuild", "Delete node"]
        );
        assert_eq!(
            labels(&record("active", Some("power on"))),
            ["Power off", "Soft power off", "Reboot", "Undeploy", "Rebuild", "Rescue"]
        );
        assert_eq!(
            labels(&record("enroll", None)),
            ["Power on", "Power off", "Soft power off", "Reboot", "Manage", "Delete node"]
        );
        let mut running = record("deploying", Some("power on"));
        running.node.target_provision_state = Some(ProvisionState::Active);
        assert!(offers(&running).is_empty(), "nothing while an action runs");
        let confirmed: Vec<&str> = offers(&record("active", Some("power on")))
            .into_iter()
            .filter(|o| o.confirm)
            .map(|o| o.label)
            .collect();
        assert_eq!(
            confirmed,
            ["Power off", "Soft power off", "Reboot", "Undeploy", "Rebuild", "Rescue"]
        );
        assert!(needs_confirmation("delete", "delete"));
        assert!(!needs_confirmation("power", "power on"));
        assert!(!needs_confirmation("provision", "active"));
    }

    #[test]
    fn plain_words_for_started_actions() {
        assert_eq!(started("provision", "active"), "Deploy started.");
        assert_eq!(started("provision", "deleted"), "Undeploy started.");
        assert_eq!(started("power", "rebooting"), "Reboot started.");
        assert_eq!(started("power", "power off"), "Power off started.");
    }

    #[test]
    fn a_pass_with_drift_or_errors_is_not_ok() {
        assert_eq!(sync_verdict("ok", 0, 0), ("ok", "good"));
        assert_eq!(sync_verdict("ok", 2, 0), ("drift", "warn"));
        assert_eq!(sync_verdict("partial", 0, 1), ("errors", "bad"));
        assert_eq!(sync_verdict("failed", 0, 0), ("failed", "bad"));
        let lines = sync_lines(
            "drift: volume vol-7: the volume no longer exists in Cinder\n\
             error: vol-8 on node n8: Cinder answered 500\nfailed: locked",
        );
        assert_eq!(lines[0].volume.as_deref(), Some("vol-7"));
        assert_eq!(lines[1].volume.as_deref(), Some("vol-8"));
        assert_eq!((lines[2].kind.as_str(), lines[2].volume.as_deref()), ("failed", None));
    }

    #[test]
    fn payloads_in_one_line() {
        let line = payload_line(&json!({"volume_id": "v1", "problem": "gone", "n": 2,
                                        "nested": {"a": 1}, "none": null}));
        assert_eq!(line, "n=2 nested=… problem=gone volume_id=v1");
        assert_eq!(payload_line(&json!({"x": "y".repeat(400)})).chars().count(), 161);
    }
}
