//! The rack-wide history, `GET /admin/events`: every node's events, newest first, narrowed by
//! node (its name, UUID or a MAC in any form the nodes list's search takes), type, level and
//! time (UTC, a day or a minute as typed), a page of 50, 100 or 500 at a time with newer and
//! older links that keep the filter. Each row links to its node's page; payloads are masked as
//! the node page masks them (`node::event_view`: the same function). A filter value that does
//! not parse is said on the page (400), never a 500 and never silently dropped.
//!
//! It owns the filter's words and the page; the query is the node service's
//! (`NodeService::events_page`, keyset pages by id), the SQL `db`'s. It must not know SQL.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;
use minijinja::value::Serde;
use serde_json::Value;

use super::extract::LoggedIn;
use super::{AdminState, rack};
use bootvol_control::nodes::EventFilter;
use bootvol_core::model::MacAddr;

/// The levels events are recorded at.
const LEVELS: [&str; 3] = ["info", "warning", "error"];

/// The longest event type accepted in the filter.
const TYPE_MAX: usize = 128;

/// The filter as typed (shown back in the form, kept by the page links).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Typed {
    pub node: String,
    pub event_type: String,
    pub level: String,
    pub since: String,
    pub until: String,
    pub per: usize,
}

impl Typed {
    fn of(query: &HashMap<String, String>) -> Typed {
        let text = |k: &str| query.get(k).map_or(String::new(), |v| v.trim().to_owned());
        Typed {
            node: text("node"),
            event_type: text("type"),
            level: text("level"),
            since: text("since"),
            until: text("until"),
            per: rack::PAGE_SIZE,
        }
    }

    fn narrowed(&self) -> bool {
        !(self.node.is_empty()
            && self.event_type.is_empty()
            && self.level.is_empty()
            && self.since.is_empty()
            && self.until.is_empty())
    }

    /// `/admin/events?...` with this filter and `page` (`before=` or `after=`, or none).
    pub(super) fn href(&self, page: Option<(&str, i64)>) -> String {
        let per = (self.per != rack::PAGE_SIZE).then(|| self.per.to_string());
        let id = page.map(|(_, id)| id.to_string());
        let pairs = [
            ("node", Some(self.node.as_str())),
            ("type", Some(self.event_type.as_str())),
            ("level", Some(self.level.as_str())),
            ("since", Some(self.since.as_str())),
            ("until", Some(self.until.as_str())),
            ("per", per.as_deref()),
            (page.map_or("", |(key, _)| key), id.as_deref()),
        ];
        let text: Vec<String> = pairs
            .into_iter()
            .filter_map(|(k, v)| v.filter(|v| !v.is_empty() && !k.is_empty()).map(|v| (k, v)))
            .map(|(k, v)| format!("{k}={}", percent_encoding::utf8_percent_encode(v, rack::QUERY)))
            .collect();
        if text.is_empty() {
            "/admin/events".to_owned()
        } else {
            format!("/admin/events?{}", text.join("&"))
        }
    }
}

/// Which end of a time bound a typed time is: a day or a minute means its first instant for
/// `since` and its last for `until` (both included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    Since,
    Until,
}

/// A typed UTC time (`2026-12-03`, `2026-12-03T10:15`, `2026-12-03 10:15:30`, with a `Z` or
/// an offset or none) as the stored text (`2026-12-03T10:15:00.000+00:00`), or why not.
fn stored_time(typed: &str, bound: Bound, what: &str) -> Result<String, String> {
    let text = typed.replacen(' ', "T", 1);
    let padded = match (text.len(), bound) {
        (10, Bound::Since) => format!("{text}T00:00:00"),
        (10, Bound::Until) => format!("{text}T23:59:59"),
        (16, Bound::Since) => format!("{text}:00"),
        (16, Bound::Until) => format!("{text}:59"),
        _ => text,
    };
    let secs = bootvol_core::timefmt::parse_iso8601(&padded).ok_or_else(|| {
        format!(
            "{what} {typed:?} is not a time: type a UTC day (2026-12-03) or a day and a time (2026-12-03T10:15)."
        )
    })?;
    let whole = bootvol_core::timefmt::format_unix(secs);
    let fraction = if bound == Bound::Since { ".000" } else { ".999" };
    Ok(format!("{}{fraction}+00:00", whole.trim_end_matches('Z')))
}

/// The filter of `query` but its node (resolved apart: that needs the database), or what is
/// wrong with it, each problem once.
fn parse(query: &HashMap<String, String>, typed: &mut Typed) -> (EventFilter, Vec<String>) {
    let mut problems = Vec::new();
    let mut filter = EventFilter::default();
    if let Some(per) = query.get("per").map(|p| p.trim()).filter(|p| !p.is_empty()) {
        match per.parse::<usize>().ok().filter(|p| rack::PAGE_SIZES.contains(p)) {
            Some(per) => typed.per = per,
            None => problems.push(format!("Rows a page {per:?}: choose 50, 100 or 500.")),
        }
    }
    parse_words(typed, &mut filter, &mut problems);
    for (value, bound, what, slot) in [
        (&typed.since, Bound::Since, "Since", &mut filter.since),
        (&typed.until, Bound::Until, "Until", &mut filter.until),
    ] {
        if !value.is_empty() {
            match stored_time(value, bound, what) {
                Ok(t) => *slot = Some(t),
                Err(p) => problems.push(p),
            }
        }
    }
    if let (Some(since), Some(until)) = (&filter.since, &filter.until)
        && since > until
    {
        problems.push("Since is after until: no event could match.".to_owned());
    }
    for (key, slot) in [("before", &mut filter.before), ("after", &mut filter.after)] {
        if let Some(v) = query.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
            match v.parse::<i64>().ok().filter(|id| *id > 0) {
                Some(id) => *slot = Some(id),
                None => problems.push(format!("The page link's {key}={v:?} is not an event id.")),
            }
        }
    }
    filter.limit = u32::try_from(typed.per).unwrap_or(u32::MAX);
    (filter, problems)
}

/// The type and the level of the filter as typed, or why not.
fn parse_words(typed: &Typed, filter: &mut EventFilter, problems: &mut Vec<String>) {
    let t = &typed.event_type;
    if !t.is_empty() {
        if t.len() <= TYPE_MAX
            && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            filter.event_type = Some(t.clone());
        } else {
            problems.push(format!(
                "Type {t:?} is not an event type (letters, digits, dots, dashes: baremetal.node.power_set.end)."
            ));
        }
    }
    if !typed.level.is_empty() {
        match LEVELS.iter().find(|l| **l == typed.level) {
            Some(level) => filter.level = Some((*level).to_owned()),
            None => problems
                .push(format!("Level {:?} is not one of info, warning, error.", typed.level)),
        }
    }
}

/// The node a typed filter names: by name or UUID, else by a MAC in any common form; a UUID
/// no node has (a node deleted since) is still its events' key. `Err`: none, in words.
async fn resolve_node(state: &AdminState, typed: &str) -> Result<(String, String), String> {
    let nodes = state.nodes();
    match nodes.node(typed).await {
        Ok(record) => return Ok((record.node.uuid, record.node.name)),
        Err(bootvol_control::nodes::NodeError::NotFound(_)) => {}
        Err(e) => return Err(format!("Finding node {typed:?}: {e}")),
    }
    if let Ok(mac) = typed.parse::<MacAddr>() {
        return match nodes.node_by_mac(mac).await {
            Ok(Some(record)) => Ok((record.node.uuid, record.node.name)),
            Ok(None) => Err(format!("No node has a port with the MAC {mac}.")),
            Err(e) => Err(format!("Finding the MAC {mac}: {e}")),
        };
    }
    if let Ok(uuid) = uuid::Uuid::parse_str(typed) {
        let uuid = uuid.hyphenated().to_string();
        return Ok((uuid.clone(), uuid));
    }
    Err(format!(
        "No node is named {typed:?}, nor has it as its UUID or a MAC: type a node's name, UUID or MAC (52:54:00:12:34:56, 52-54-00-12-34-56 or 5254.0012.3456)."
    ))
}

/// One page of events and whether there are newer and older ones beyond it.
struct Found {
    rows: Vec<bootvol_control::nodes::Event>,
    newer: bool,
    older: bool,
}

/// The page `filter` asks for: older than `before`, just newer than `after` (the newest page
/// again when nothing newer is left beyond it), or the newest.
async fn read_page(state: &AdminState, filter: EventFilter) -> Result<Found, String> {
    let nodes = state.nodes();
    let per = filter.limit as usize;
    let read = |f: EventFilter| async move {
        nodes.events_page(EventFilter { limit: f.limit + 1, ..f }).await.map_err(|e| e.to_string())
    };
    if filter.before.is_none() && filter.after.is_some() {
        let mut rows = read(filter.clone()).await?;
        if rows.len() > per {
            rows.remove(0);
            return Ok(Found { rows, newer: true, older: true });
        }
    }
    let before = filter.before;
    let mut rows = read(EventFilter { after: None, ..filter }).await?;
    let older = rows.len() > per;
    rows.truncate(per);
    Ok(Found { rows, newer: before.is_some(), older })
}

/// The events as the page lists them: masked as the node page masks them, each with its
/// node's name from the boot snapshot (else the payload's, else its UUID).
fn rows_view(state: &AdminState, events: Vec<bootvol_control::nodes::Event>) -> Vec<Value> {
    let snapshot = state.api.snapshot();
    events
        .into_iter()
        .map(|e| {
            let mut row = super::node::event_view(e);
            let uuid = row["node_uuid"].as_str().map(str::to_owned);
            if let Some(name) =
                uuid.as_deref().and_then(|u| snapshot.node(u)).and_then(|s| s.node.clone())
            {
                row["node_name"] = Value::String(name);
            }
            row
        })
        .collect()
}

/// The links to the newest page, the newer one and the older one, those there are.
fn pages_view(typed: &Typed, newer: bool, older: bool, rows: &[Value]) -> minijinja::Value {
    let id = |row: Option<&Value>| row.and_then(|r| r["id"].as_i64());
    context! {
        newest => newer.then(|| typed.href(None)),
        newer => id(rows.first()).filter(|_| newer).map(|id| typed.href(Some(("after", id)))),
        older => id(rows.last()).filter(|_| older).map(|id| typed.href(Some(("before", id)))),
    }
}

pub(super) async fn events_page(
    State(state): State<AdminState>,
    LoggedIn(s): LoggedIn,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let mut typed = Typed::of(&query);
    let (mut filter, mut problems) = parse(&query, &mut typed);
    let mut node = None;
    if !typed.node.is_empty() {
        match resolve_node(&state, &typed.node).await {
            Ok((uuid, name)) => {
                filter.node_uuid = Some(uuid.clone());
                node = Some(context! { uuid => uuid, name => name });
            }
            Err(p) => problems.push(p),
        }
    }
    let types = state.nodes().event_types().await.unwrap_or_default();
    let (found, status) = if problems.is_empty() {
        match read_page(&state, filter).await {
            Ok(found) => (found, StatusCode::OK),
            Err(e) => {
                problems.push(format!("Reading the events: {e}"));
                (Found { rows: Vec::new(), newer: false, older: false }, StatusCode::OK)
            }
        }
    } else {
        (Found { rows: Vec::new(), newer: false, older: false }, StatusCode::BAD_REQUEST)
    };
    let rows = rows_view(&state, found.rows);
    let pages = pages_view(&typed, found.newer, found.older, &rows);
    let error = (!problems.is_empty()).then(|| problems.join(" "));
    let narrowed = typed.narrowed();
    state.render(
        status,
        "events.html.j2",
        context! {
            user => s.user.clone(), csrf => s.csrf.clone(), error => error,
            rows => Serde(rows), pages => pages, node => node, types => types,
            filter => context! { node => typed.node, event_type => typed.event_type,
                level => typed.level, since => typed.since, until => typed.until,
                per => typed.per, narrowed => narrowed },
            levels => LEVELS.to_vec(), per_sizes => rack::PAGE_SIZES.to_vec(),
        },
    )
}

/// The link to a node's events on the rack-wide history.
pub(super) fn node_href(name: &str) -> String {
    Typed { node: name.to_owned(), per: rack::PAGE_SIZE, ..Typed::default() }.href(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn typed_times_become_the_stored_text_both_ends_included() {
        assert_eq!(
            stored_time("2026-12-03", Bound::Since, "Since").unwrap(),
            "2026-12-03T00:00:00.000+00:00"
        );
        assert_eq!(
            stored_time("2026-12-03", Bound::Until, "Until").unwrap(),
            "2026-12-03T23:59:59.999+00:00"
        );
        assert_eq!(
            stored_time("2026-12-03T10:15", Bound::Until, "Until").unwrap(),
            "2026-12-03T10:15:59.999+00:00"
        );
        assert_eq!(
            stored_time("2026-12-03 10:15:30", Bound::Since, "Since").unwrap(),
            "2026-12-03T10:15:30.000+00:00"
        );
        assert_eq!(
            stored_time("2026-12-03T11:15:30+01:00", Bound::Since, "Since").unwrap(),
            "2026-12-03T10:15:30.000+00:00"
        );
        let refused = stored_time("yesterday", Bound::Since, "Since").unwrap_err();
        assert!(refused.contains("\"yesterday\" is not a time"), "{refused}");
        assert!(stored_time("2026-13-03", Bound::Since, "Since").is_err());
    }

    #[test]
    fn every_bad_value_is_named_and_links_keep_the_filter() {
        let q = query(&[
            ("per", "7"),
            ("level", "loud"),
            ("type", "a b"),
            ("since", "x"),
            ("before", "-3"),
        ]);
        let mut typed = Typed::of(&q);
        let (_, problems) = parse(&q, &mut typed);
        assert_eq!(problems.len(), 5, "{problems:?}");
        let q = query(&[("since", "2026-12-04"), ("until", "2026-12-03")]);
        let (_, problems) = parse(&q, &mut Typed::of(&q));
        assert_eq!(problems, ["Since is after until: no event could match."]);
        let q = query(&[("node", "r 1"), ("level", "error"), ("per", "100")]);
        let mut typed = Typed::of(&q);
        let (filter, problems) = parse(&q, &mut typed);
        assert!(
            problems.is_empty() && filter.limit == 100 && filter.level.as_deref() == Some("error")
        );
        assert_eq!(
            typed.href(Some(("before", 42))),
            "/admin/events?node=r%201&level=error&per=100&before=42"
        );
        assert_eq!(Typed::of(&query(&[])).href(None), "/admin/events");
        assert_eq!(node_href("rack-001"), "/admin/events?node=rack-001");
    }
}
