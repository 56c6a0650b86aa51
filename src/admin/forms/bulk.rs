//! The nodes list's bulk form (`POST /admin/bulk`): one action on every node ticked, each done
//! or refused on its own. A part of `forms` (its outcomes, confirmation and session handling).

use super::*;

/// `POST /admin/bulk`: one action on the nodes ticked in the list (`node`, repeated): `power
/// on`, `power off`, `rebooting`, `soft power off`, `maintenance on`, `maintenance off` or
/// `provide`. Power off, reboot and soft power off need `confirm` naming the nodes (as the
/// confirmation step lists them). Each node is done or refused on its own; the message says
/// which. Back to the list as it was (`back`).
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
        if picked.is_empty() {
            return refused("No node was selected: tick the nodes first.".into());
        }
        let mut records = Vec::new();
        for key in &picked {
            match state.nodes().node(key).await {
                Ok(record) => records.push(record),
                Err(e) => return refused(format!("Nothing was done: {e}")),
            }
        }
        let names: Vec<String> = records.iter().map(|r| r.node.name.clone()).collect();
        let listed = names.join(", ");
        if needs_confirmation(which, target) && field(&form, "confirm") != listed {
            let mut fields: Vec<(String, String)> =
                records.iter().map(|r| ("node".to_owned(), r.node.uuid.clone())).collect();
            fields.push(("action".into(), action.into()));
            fields.push(("back".into(), back.clone()));
            fields.push(("confirm".into(), listed.clone()));
            let label = started(which, target).replace(" started.", "");
            return Outcome::Confirm(Box::new(Confirm {
                what: format!("{label} {} node(s)", records.len()),
                consequence: format!("{label} these {} node(s): {listed}.", records.len()),
                action: "/admin/bulk".into(),
                fields,
                back: back.clone(),
            }));
        }
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        for record in &records {
            let name = record.node.name.clone();
            let result = match which {
                "maintenance" => state
                    .nodes()
                    .set_maintenance(&record.node.uuid, target == "maintenance on", None)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                _ => start_action(&state, &record.node.uuid, which, target)
                    .await
                    .map_err(|(_, message)| message),
            };
            match result {
                Ok(()) => done.push(name),
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
            format!("{what} on {} node(s): {}. ", done.len(), done.join(", "))
        };
        if !failed.is_empty() {
            message.push_str(&format!(
                "Refused on {} node(s): {}",
                failed.len(),
                failed.join("; ")
            ));
        }
        Outcome::Done {
            to: back.clone(),
            message: message.trim_end().to_owned(),
            bad: !failed.is_empty(),
        }
    })
    .await
}
