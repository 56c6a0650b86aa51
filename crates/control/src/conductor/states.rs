//! Provision state transitions, Ironic's state machine up to API 1.38: which verb is allowed
//! from which state, through which intermediate state, to which target, and the microversion
//! each verb needs. Pure data and functions.

use std::fmt;
use std::str::FromStr;

use bootvol_core::model::{ProvisionState, ValueError};

/// What an operator asks (Ironic's `PUT /states/provision` targets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Manage,
    Provide,
    /// Ironic's target `active`.
    Deploy,
    /// Ironic's target `deleted`.
    Undeploy,
    Rebuild,
    Inspect,
    Clean,
    Abort,
    Adopt,
    Rescue,
    Unrescue,
}

impl Verb {
    /// Every verb.
    pub const ALL: &'static [Verb] = &[
        Verb::Manage,
        Verb::Provide,
        Verb::Deploy,
        Verb::Undeploy,
        Verb::Rebuild,
        Verb::Inspect,
        Verb::Clean,
        Verb::Abort,
        Verb::Adopt,
        Verb::Rescue,
        Verb::Unrescue,
    ];

    /// Ironic's name of the verb in a provision request (`active`, `deleted`...).
    pub fn target(self) -> &'static str {
        match self {
            Verb::Manage => "manage",
            Verb::Provide => "provide",
            Verb::Deploy => "active",
            Verb::Undeploy => "deleted",
            Verb::Rebuild => "rebuild",
            Verb::Inspect => "inspect",
            Verb::Clean => "clean",
            Verb::Abort => "abort",
            Verb::Adopt => "adopt",
            Verb::Rescue => "rescue",
            Verb::Unrescue => "unrescue",
        }
    }

    /// The microversion at which the API accepts the verb.
    pub fn min_minor(self) -> u32 {
        match self {
            Verb::Deploy | Verb::Undeploy | Verb::Rebuild => 1,
            Verb::Manage | Verb::Provide => 4,
            Verb::Inspect => 6,
            Verb::Abort => 13,
            Verb::Clean => 15,
            Verb::Adopt => 17,
            Verb::Rescue | Verb::Unrescue => 38,
        }
    }
}

/// Whether a node in `state` may be deleted: not while it holds an instance (deployed, in
/// rescue, or on its way into or out of either) nor while an action runs through it. Unlike
/// Ironic, `available`, `deploy failed` and `error` nodes may be deleted too (their volumes are
/// checked separately).
pub fn deletable(state: ProvisionState) -> bool {
    use ProvisionState as S;
    !matches!(
        state,
        S::Active
            | S::Deploying
            | S::WaitCallBack
            | S::Deleting
            | S::Cleaning
            | S::Inspecting
            | S::Adopting
            | S::Rescuing
            | S::Rescue
            | S::RescueFailed
            | S::Unrescuing
            | S::UnrescueFailed
    )
}

/// The verbs [`plan`] allows from `state` (the table is `plan`'s; this only asks it).
pub fn allowed(state: ProvisionState) -> Vec<Verb> {
    Verb::ALL.iter().copied().filter(|verb| plan(state, *verb).is_ok()).collect()
}

impl FromStr for Verb {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Verb, ValueError> {
        if let Some(verb) = Verb::ALL.iter().find(|v| v.target() == text) {
            return Ok(*verb);
        }
        Ok(match text {
            "deploy" => Verb::Deploy,
            "undeploy" => Verb::Undeploy,
            _ => {
                let names: Vec<&str> = Verb::ALL.iter().map(|v| v.target()).collect();
                return Err(ValueError(format!(
                    "{text:?} is not a provision action ({})",
                    names.join(", ")
                )));
            }
        })
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verb::Deploy => "deploy",
            Verb::Undeploy => "undeploy",
            other => other.target(),
        })
    }
}

/// A permitted transition: the state while the action runs, where it ends on success, and
/// where on failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub during: ProvisionState,
    pub target: ProvisionState,
    pub failed: ProvisionState,
}

/// The transition `verb` makes from `state`, or why it is refused.
pub fn plan(state: ProvisionState, verb: Verb) -> Result<Plan, String> {
    use ProvisionState as S;
    let plan = |during, target, failed| Ok(Plan { during, target, failed });
    match (verb, state) {
        (
            Verb::Manage,
            S::Enroll | S::Available | S::CleanFailed | S::InspectFailed | S::AdoptFailed,
        ) => plan(state, S::Manageable, state),
        (Verb::Provide, S::Manageable) => plan(S::Cleaning, S::Available, S::CleanFailed),
        (Verb::Deploy, S::Available | S::DeployFailed) => {
            plan(S::Deploying, S::Active, S::DeployFailed)
        }
        (Verb::Rebuild, S::Active | S::DeployFailed | S::Error) => {
            plan(S::Deploying, S::Active, S::DeployFailed)
        }
        (
            Verb::Undeploy,
            S::Active
            | S::DeployFailed
            | S::WaitCallBack
            | S::Error
            | S::Rescue
            | S::RescueFailed
            | S::UnrescueFailed,
        ) => plan(S::Deleting, S::Available, S::Error),
        (Verb::Inspect, S::Manageable | S::InspectFailed) => {
            plan(S::Inspecting, S::Manageable, S::InspectFailed)
        }
        (Verb::Clean, S::Manageable) => plan(S::Cleaning, S::Manageable, S::CleanFailed),
        (Verb::Abort, S::WaitCallBack) => plan(S::DeployFailed, S::DeployFailed, S::DeployFailed),
        (Verb::Adopt, S::Manageable | S::AdoptFailed) => {
            plan(S::Adopting, S::Active, S::AdoptFailed)
        }
        (Verb::Rescue, S::Active | S::Rescue | S::RescueFailed | S::UnrescueFailed) => {
            plan(S::Rescuing, S::Rescue, S::RescueFailed)
        }
        (Verb::Unrescue, S::Rescue | S::RescueFailed | S::UnrescueFailed) => {
            plan(S::Unrescuing, S::Active, S::UnrescueFailed)
        }
        _ => Err(format!("cannot {verb} a node that is {state}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProvisionState as S;

    #[test]
    fn the_transition_table() {
        assert_eq!(
            plan(S::Available, Verb::Deploy),
            Ok(Plan { during: S::Deploying, target: S::Active, failed: S::DeployFailed })
        );
        assert_eq!(plan(S::DeployFailed, Verb::Deploy).unwrap().target, S::Active);
        assert_eq!(plan(S::Active, Verb::Undeploy).unwrap().during, S::Deleting);
        assert_eq!(plan(S::Active, Verb::Undeploy).unwrap().target, S::Available);
        assert_eq!(plan(S::Error, Verb::Undeploy).unwrap().target, S::Available);
        assert_eq!(plan(S::Enroll, Verb::Manage).unwrap().target, S::Manageable);
        assert_eq!(plan(S::Manageable, Verb::Adopt).unwrap().target, S::Active);
        assert_eq!(plan(S::Manageable, Verb::Provide).unwrap().during, S::Cleaning);
        assert_eq!(plan(S::Manageable, Verb::Clean).unwrap().target, S::Manageable);
        assert_eq!(plan(S::Manageable, Verb::Inspect).unwrap().target, S::Manageable);
        assert_eq!(plan(S::Active, Verb::Rebuild).unwrap().during, S::Deploying);
        assert_eq!(plan(S::Active, Verb::Rescue).unwrap().target, S::Rescue);
        assert_eq!(plan(S::Rescue, Verb::Unrescue).unwrap().target, S::Active);
        assert_eq!(plan(S::WaitCallBack, Verb::Abort).unwrap().target, S::DeployFailed);
        for (state, verb) in [
            (S::Active, Verb::Deploy),
            (S::Available, Verb::Adopt),
            (S::Enroll, Verb::Deploy),
            (S::Available, Verb::Provide),
            (S::Manageable, Verb::Manage),
            (S::Available, Verb::Clean),
            (S::Active, Verb::Abort),
            (S::Available, Verb::Rescue),
            (S::Active, Verb::Unrescue),
        ] {
            assert!(plan(state, verb).is_err(), "{verb} from {state}");
        }
        assert_eq!(
            plan(S::Active, Verb::Deploy).unwrap_err(),
            "cannot deploy a node that is active"
        );
        assert_eq!("deleted".parse::<Verb>().unwrap(), Verb::Undeploy);
        assert_eq!(allowed(S::DeployFailed), [Verb::Deploy, Verb::Undeploy, Verb::Rebuild]);
        assert_eq!(
            allowed(S::Manageable),
            [Verb::Provide, Verb::Inspect, Verb::Clean, Verb::Adopt]
        );
        assert!(allowed(S::Deploying).is_empty());
        for verb in Verb::ALL {
            assert_eq!(verb.target().parse::<Verb>().unwrap(), *verb);
        }
        assert_eq!("rebuild".parse::<Verb>().unwrap(), Verb::Rebuild);
        assert!("explode".parse::<Verb>().is_err());
        assert_eq!(Verb::Rescue.min_minor(), 38);
    }
}
