//! Whether an action may start now, and the action a front end's target names: the one set of
//! admission rules every caller meets (the REST API, the admin page, the CLI), answered as a
//! typed [`Refusal`] each front end words in its own way (Ironic's messages, a form's banner).
//! Pure decisions over the node as loaded; the lock is taken after them, in `Conductor::start`.

use std::fmt;

use bootvol_core::model::hardware::Kind;
use bootvol_core::model::{Driver, NodeRecord, ProvisionState};

use super::{Action, Conductor, ConductorError, Verb, plan};
use crate::power::PowerAction;

/// Why an action was not admitted; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The node's provision state does not allow the verb (Ironic's state machine).
    Transition { node: String, verb: Verb, state: ProvisionState, reason: String },
    /// The node's power interface does not validate (its `driver_info`).
    Power { node: String, reason: String },
    /// A rescue verb on a node whose rescue interface is `no-rescue`.
    NoRescue { node: String, driver: Driver },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Transition { reason, .. } => f.write_str(reason),
            Refusal::Power { reason, .. } => write!(f, "power: {reason}"),
            Refusal::NoRescue { driver, .. } => {
                write!(f, "Driver {driver} does not support rescue (disabled or not implemented).")
            }
        }
    }
}

/// Which of a node's states a target changes (`PUT .../states/power` or `.../provision`, the
/// admin page's power and provision forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateChange {
    Power,
    Provision,
}

/// A target no action has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTarget {
    pub change: StateChange,
    pub target: String,
}

impl fmt::Display for UnknownTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.change {
            StateChange::Power => write!(
                f,
                "Invalid power target {:?}: {}",
                self.target,
                POWER_TARGETS.map(|(t, _)| t).join(", ")
            ),
            StateChange::Provision => write!(
                f,
                "The requested action \"{}\" is not supported ({})",
                self.target,
                Verb::ALL.iter().map(|v| v.target()).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// Ironic's power targets and what each does (`soft rebooting` restarts as `rebooting` does).
const POWER_TARGETS: [(&str, PowerAction); 5] = [
    ("power on", PowerAction::On),
    ("power off", PowerAction::Off),
    ("rebooting", PowerAction::Reboot),
    ("soft power off", PowerAction::SoftOff),
    ("soft rebooting", PowerAction::Reboot),
];

impl Action {
    /// The action a power or provision target names (Ironic's strings: `power on`,
    /// `rebooting`, `active`, `deleted`, `rebuild`...).
    pub fn from_target(change: StateChange, target: &str) -> Result<Action, UnknownTarget> {
        let unknown = || UnknownTarget { change, target: target.to_owned() };
        match change {
            StateChange::Power => POWER_TARGETS
                .iter()
                .find(|(t, _)| *t == target)
                .map(|(_, action)| Action::Power(*action))
                .ok_or_else(unknown),
            StateChange::Provision => target.parse().map(Action::Provision).map_err(|_| unknown()),
        }
    }
}

impl Conductor {
    /// Whether `action` may start on the node as it is now: the state machine for provision
    /// verbs (and a rescue interface for rescue), a valid power interface for power actions, an
    /// enabled storage interface for volume actions.
    pub(super) fn admit(&self, record: &NodeRecord, action: &Action) -> Result<(), ConductorError> {
        let node = &record.node;
        let refuse = |r: Refusal| Err(ConductorError::Inadmissible(r));
        match action {
            Action::Provision(Verb::Rescue | Verb::Unrescue)
                if node.interfaces.effective(node.driver, Kind::Rescue) == "no-rescue" =>
            {
                refuse(Refusal::NoRescue { node: node.uuid.clone(), driver: node.driver })
            }
            Action::Provision(verb) => match plan(node.provision_state, *verb) {
                Ok(_) => Ok(()),
                Err(reason) => refuse(Refusal::Transition {
                    node: node.uuid.clone(),
                    verb: *verb,
                    state: node.provision_state,
                    reason,
                }),
            },
            Action::Power(_) => match self.driver(node.driver).validate(node) {
                Ok(()) => Ok(()),
                Err(e) => refuse(Refusal::Power { node: node.uuid.clone(), reason: e.to_string() }),
            },
            Action::AttachVolumes | Action::DetachVolumes => {
                self.storage.for_node(record)?;
                Ok(())
            }
            Action::BootDevice { .. } | Action::Delete => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_actions() {
        let power = |t| Action::from_target(StateChange::Power, t).map(|a| format!("{a:?}"));
        assert_eq!(power("power on").unwrap(), "Power(On)");
        assert_eq!(power("soft rebooting").unwrap(), "Power(Reboot)");
        assert_eq!(power("soft power off").unwrap(), "Power(SoftOff)");
        let err = power("active").unwrap_err().to_string();
        assert!(err.starts_with("Invalid power target \"active\": power on, power off"), "{err}");
        let provision =
            |t| Action::from_target(StateChange::Provision, t).map(|a| format!("{a:?}"));
        assert_eq!(provision("rebuild").unwrap(), "Provision(Rebuild)");
        assert_eq!(provision("deleted").unwrap(), "Provision(Undeploy)");
        let err = provision("power on").unwrap_err().to_string();
        assert!(err.contains("\"power on\" is not supported (manage, provide, active"), "{err}");
    }
}
