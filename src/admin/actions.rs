//! The words of every action the node page offers, pure: its label, whether the server asks for
//! a confirmation first and what that confirmation says (each names its own action: the power
//! actions, every provision verb of the state machine that takes a running node away, delete),
//! and how its start is told.
//!
//! A form's `target` is parsed into the action it names ([`Action`]) before anything is decided,
//! so that an alias (`undeploy` for `deleted`, `deploy` for `active`) is asked exactly as the
//! verb it stands for; what the conductor does is not decided here.

use bootvol_control::conductor::states::Verb;

/// An action a node form names: `power` with its target, `provision` with its verb, `delete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    PowerOn,
    PowerOff,
    SoftPowerOff,
    Reboot,
    Provision(Verb),
    Delete,
}

impl Action {
    /// The action of `form` (`power`, `provision`, `delete`) with `target`; `None` when it
    /// names none (the conductor then refuses it with its own words).
    pub(super) fn parse(form: &str, target: &str) -> Option<Action> {
        match (form, target) {
            ("power", "power on") => Some(Action::PowerOn),
            ("power", "power off") => Some(Action::PowerOff),
            ("power", "soft power off") => Some(Action::SoftPowerOff),
            ("power", "rebooting") => Some(Action::Reboot),
            ("provision", verb) => verb.parse().ok().map(Action::Provision),
            ("delete", _) => Some(Action::Delete),
            _ => None,
        }
    }

    /// What the button says.
    pub(super) fn label(self) -> &'static str {
        match self {
            Action::PowerOn => "Power on",
            Action::PowerOff => "Power off",
            Action::SoftPowerOff => "Soft power off",
            Action::Reboot => "Reboot",
            Action::Delete => "Delete",
            Action::Provision(verb) => match verb {
                Verb::Manage => "Manage",
                Verb::Provide => "Provide",
                Verb::Deploy => "Deploy",
                Verb::Undeploy => "Undeploy",
                Verb::Rebuild => "Rebuild",
                Verb::Inspect => "Inspect",
                Verb::Clean => "Clean",
                Verb::Abort => "Abort",
                Verb::Adopt => "Adopt",
                Verb::Rescue => "Rescue",
                Verb::Unrescue => "Unrescue",
            },
        }
    }

    /// What the action does to a node, when the server asks first (it cuts power, restarts,
    /// takes the instance away or stops it, or removes the node); `None` when it goes at once.
    pub(super) fn consequence(self) -> Option<&'static str> {
        Some(match self {
            Action::PowerOff => "cuts the node's power at once, as pulling the plug would",
            Action::SoftPowerOff => "asks the node's operating system to shut down",
            Action::Reboot => "restarts the node at once, without asking its operating system",
            Action::Delete => "removes the node, its ports, connectors and targets from bootvol",
            Action::Provision(Verb::Undeploy) => {
                "detaches its volumes and makes it available again (its instance stops)"
            }
            Action::Provision(Verb::Rebuild) => {
                "undeploys the node and deploys it again: its volumes are detached and attached again and it reboots (its instance restarts; an image deployment writes the image again)"
            }
            Action::Provision(Verb::Abort) => {
                "stops the deployment that waits for the deploy ramdisk: the node ends in deploy failed"
            }
            Action::Provision(Verb::Rescue) => {
                "takes the node into rescue: it no longer boots its volume until it is unrescued"
            }
            Action::Provision(Verb::Unrescue) => {
                "takes the node out of rescue: it boots its volume again"
            }
            Action::PowerOn | Action::Provision(_) => return None,
        })
    }
}

/// Whether the action `target` of `form` needs the node's name as `confirm`.
pub(super) fn needs_confirmation(form: &str, target: &str) -> bool {
    Action::parse(form, target).is_some_and(|a| a.consequence().is_some())
}

/// What a started action is called: "Deploy started", "Power off started".
pub(super) fn started(form: &str, target: &str) -> String {
    format!("{} started.", Action::parse(form, target).map_or("Action", Action::label))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_has_its_own_words() {
        let mut asked = Vec::new();
        for verb in Verb::ALL {
            let action = Action::parse("provision", verb.target()).unwrap();
            assert_eq!(action, Action::Provision(*verb));
            if action.consequence().is_some() {
                asked.push(action.label());
            }
            assert_eq!(started("provision", verb.target()), format!("{} started.", action.label()));
        }
        assert_eq!(asked, ["Undeploy", "Rebuild", "Abort", "Rescue", "Unrescue"]);
        // An alias asks as its verb does.
        assert!(needs_confirmation("provision", "undeploy"));
        assert!(!needs_confirmation("provision", "deploy"));
        assert!(
            needs_confirmation("power", "rebooting") && !needs_confirmation("power", "power on")
        );
        assert!(needs_confirmation("delete", "delete"));
        assert!(!needs_confirmation("provision", "no such verb"));
        let consequences: std::collections::HashSet<_> =
            Verb::ALL.iter().filter_map(|v| Action::Provision(*v).consequence()).collect();
        assert_eq!(consequences.len(), 5, "each confirmation says what its own verb does");
    }
}
