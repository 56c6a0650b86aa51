//! The nodes list's bulk form (`POST /admin/bulk`): one action on every node ticked, or on
//! every node the list's filter matches across its pages (`scope=all`), each done or refused on
//! its own. A part of `forms` (its outcomes, confirmation and session handling).
//!
//! "All matching" is always confirmed: the confirmation names the count and lists the names,
//! and carries the count and a digest of the matching set (SHA-256 of the sorted UUIDs). At
//! confirm time the server evaluates the filter again and refuses, doing nothing, when the set
//! is not the one shown. Every action starts through [`act`].

use sha2::{Digest, Sha256};

use super::*;
use crate::admin::rack::{ListQuery, Summary};

/// The names a message lists before "and N more".
const NAMES_SHOWN: usize = 20;

/// `POST /admin/bulk`: one action on the nodes ticked in the list (`node`, repeated), or with
/// `scope=all` on every node the filter of `back` (the list's query) matches: `power on`,
/// `power off`, `rebooting`, `soft power off`, `maintenance on`, `maintenance off` or
/// `provide`. Ticked nodes: power off, reboot and soft power off need `confirm` naming the
/// nodes (as the confirmation step lists them). All matching: every action needs `confirm`
/// with the `count` and `digest` the confirmation carried. Each node is done or refused on its
/// own; the message says which. Back to the list as it was (`back`).
pub(in crate::admin) async fn bulk(
    State(state): State<AdminState>,
    checked: CheckedForm,
) -> Response {
    let CheckedForm { session, pairs, fields: form } = checked;
    let picked: Vec<String> =
        pairs.iter().filter(|(k, _)| k == "node").map(|(_, v)| v.clone()).collect();
    let back = crate::admin::safe_next(form.get("back").map(String::as_str));
    with_session(&state, &session, &form, None, || async {
        let action = field(&form, "action");
        let refused = |message: String| Outcome::Done { to: back.clone(), message, bad: true };
        let (which, target) = match action {
            "power on" | "power off" | "rebooting" | "soft power off" => ("power", action),
            "maintenance on" | "maintenance off" => ("maintenance", action),
            "provide" => ("provision", action),
            _ => return refused("Choose an action for the selected nodes.".into()),
        };
        if field(&form, "scope") == "all" {
            return all_matching(&state, &form, &back, which, target).await;
        }
        ticked(&state, &form, &picked, &back, (which, target, action)).await
    })
    .await
}

/// The ticked nodes (`node`, repeated) of a bulk form: looked up, confirmed when the action
/// needs it (the confirmation names them), then acted on one by one.
async fn ticked(
    state: &AdminState,
    form: &HashMap<String, String>,
    picked: &[String],
    back: &str,
    (which, target, action): (&'static str, &str, &str),
) -> Outcome {
    let refused = |message: String| Outcome::Done { to: back.to_owned(), message, bad: true };
    if picked.is_empty() {
        return refused("No node was selected: tick the nodes first.".into());
    }
    let mut records = Vec::new();
    for key in picked {
        match state.nodes().node(key).await {
            Ok(record) => records.push(record),
            Err(e) => return refused(format!("Nothing was done: {e}")),
        }
    }
    let names: Vec<String> = records.iter().map(|r| r.node.name.clone()).collect();
    let listed = names.join(", ");
    if needs_confirmation(which, target) && field(form, "confirm") != listed {
        let mut fields: Vec<(String, String)> =
            records.iter().map(|r| ("node".to_owned(), r.node.uuid.clone())).collect();
        fields.push(("action".into(), action.into()));
        fields.push(("back".into(), back.to_owned()));
        fields.push(("confirm".into(), listed.clone()));
        let label = label(which, target);
        return Outcome::Confirm(Box::new(Confirm {
            what: format!("{label} {} node(s)", records.len()),
            consequence: format!("{label} these {} node(s): {listed}.", records.len()),
            action: "/admin/bulk".into(),
            fields,
            back: back.to_owned(),
        }));
    }
    let nodes: Vec<(String, String)> =
        records.into_iter().map(|r| (r.node.uuid, r.node.name)).collect();
    apply(state, &nodes, which, target, back).await
}

/// What the action is called in a confirmation ("Power off", "Maintenance on").
fn label(which: &str, target: &str) -> String {
    match target {
        "maintenance on" => "Maintenance on".to_owned(),
        "maintenance off" => "Maintenance off".to_owned(),
        _ => started(which, target).replace(" started.", ""),
    }
}

/// The filter of the list page `back` (`/admin/?...`), page and page size aside.
fn filter_of(back: &str) -> ListQuery {
    let text = back.split_once('?').map_or("", |(_, q)| q);
    let pairs: HashMap<String, String> = serde_urlencoded::from_str(text).unwrap_or_default();
    ListQuery::parse(&pairs)
}

/// A digest of a set of nodes: SHA-256 of their sorted UUIDs, one a line, in hex.
pub(in crate::admin) fn digest(rows: &[Summary]) -> String {
    let mut uuids: Vec<&str> = rows.iter().map(|s| s.uuid.as_str()).collect();
    uuids.sort_unstable();
    let mut hash = Sha256::new();
    for u in uuids {
        hash.update(u.as_bytes());
        hash.update(b"\n");
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Every node `query`'s search and filters match now, by name, as the list would show them
/// over all its pages.
async fn matching(state: &AdminState, query: &ListQuery) -> Result<Vec<Summary>, NodeError> {
    // The rows the list shows, made as the list makes them.
    let drift_lines = match state.nodes().sync_overview().await? {
        (Some(last), _) => crate::admin::rack::sync_lines(&last.message),
        _ => Vec::new(),
    };
    let inputs = crate::admin::rows::RowInputs::read(state, &drift_lines).await?;
    let query = query.clone();
    let mut rows = state
        .nodes()
        .fold_nodes(Vec::new(), move |rows, r| {
            let row = inputs.row(r);
            if query.matches(&row) {
                rows.push(row);
            }
        })
        .await?;
    rows.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.uuid.cmp(&b.uuid)));
    Ok(rows)
}

/// `scope=all`: the action on every node the list's filter matches, once confirmed for
/// exactly that set.
async fn all_matching(
    state: &AdminState,
    form: &HashMap<String, String>,
    back: &str,
    which: &str,
    target: &str,
) -> Outcome {
    let refused =
        |status, message: String| Outcome::Refused { node: None, status, message, typed: None };
    let query = filter_of(back);
    let rows = match matching(state, &query).await {
        Ok(rows) => rows,
        Err(e) => return refused(status_of(&e), format!("Nothing was done: {e}")),
    };
    if rows.is_empty() {
        return refused(
            StatusCode::CONFLICT,
            "Nothing was done: no node matches the filter.".into(),
        );
    }
    let (count, digest) = (rows.len().to_string(), digest(&rows));
    let confirm = field(form, "confirm");
    if confirm.is_empty() {
        let label = label(which, target);
        let names: Vec<&str> = rows.iter().map(|s| s.name.as_str()).collect();
        let fields = vec![
            ("scope".to_owned(), "all".to_owned()),
            ("action".into(), target.to_owned()),
            ("back".into(), back.to_owned()),
            ("count".into(), count.clone()),
            ("digest".into(), digest),
            ("confirm".into(), count.clone()),
        ];
        return Outcome::Confirm(Box::new(Confirm {
            what: format!("{label} all {count} matching node(s)"),
            consequence: format!(
                "{label} every node the filter matches, on every page: these {count} node(s): {}.",
                names.join(", ")
            ),
            action: "/admin/bulk".into(),
            fields,
            back: back.to_owned(),
        }));
    }
    if confirm != count || field(form, "count") != count || field(form, "digest") != digest {
        let then = field(form, "count");
        return refused(
            StatusCode::CONFLICT,
            format!(
                "Nothing was done: the nodes matching the filter changed since the confirmation \
                 was shown ({then} then, {count} now). Look at the list again and retry."
            ),
        );
    }
    let nodes: Vec<(String, String)> = rows.into_iter().map(|s| (s.uuid, s.name)).collect();
    apply(state, &nodes, which, target, back).await
}

/// Starts the action on one node: the one place the bulk form acts. `which` is `power`,
/// `provision` or `maintenance`.
async fn act(state: &AdminState, uuid: &str, which: &str, target: &str) -> Result<(), String> {
    match which {
        "maintenance" => state
            .nodes()
            .set_maintenance(uuid, target == "maintenance on", None)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        _ => start_action(state, uuid, which, target).await.map_err(|(_, message)| message),
    }
}

/// `names` joined, the first [`NAMES_SHOWN`] of them and how many more.
fn some_of(names: &[String], sep: &str) -> String {
    let shown = names.iter().take(NAMES_SHOWN).cloned().collect::<Vec<_>>().join(sep);
    match names.len().saturating_sub(NAMES_SHOWN) {
        0 => shown,
        more => format!("{shown}{sep}and {more} more"),
    }
}

/// The action on each of `nodes` (UUID, name), each done or refused on its own.
async fn apply(
    state: &AdminState,
    nodes: &[(String, String)],
    which: &str,
    target: &str,
    back: &str,
) -> Outcome {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for (uuid, name) in nodes {
        match act(state, uuid, which, target).await {
            Ok(()) => done.push(name.clone()),
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    let what = match which {
        "maintenance" if target == "maintenance on" => "Maintenance set".to_owned(),
        "maintenance" => "Maintenance ended".to_owned(),
        _ => started(which, target).replace('.', ""),
    };
    let mut message = if done.is_empty() {
        String::new()
    } else {
        format!("{what} on {} node(s): {}. ", done.len(), some_of(&done, ", "))
    };
    if !failed.is_empty() {
        message.push_str(&format!(
            "Refused on {} node(s): {}",
            failed.len(),
            some_of(&failed, "; ")
        ));
    }
    Outcome::Done {
        to: back.to_owned(),
        message: message.trim_end().to_owned(),
        bad: !failed.is_empty(),
    }
}
