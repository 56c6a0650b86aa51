//! Provision state transitions: which verb is allowed from which state, through which
//! intermediate state, to which target. Pure.

use std::fmt;
use std::str::FromStr;

use crate::model::{ProvisionState, ValueError};

/// What an operator asks (Ironic's `PUT /states/provision` targets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Manage,
    Provide,
    /// Ironic's target `active`.
    Deploy,
    /// Ironic's target `deleted`.
    Undeploy,
    Adopt,
}

impl Verb {
    /// Every verb, in the order an operator meets them.
    pub const ALL: &'static [Verb] =
        &[Verb::Manage, Verb::Provide, Verb::Deploy, Verb::Undeploy, Verb::Adopt];

    /// Ironic's target name of the verb (`PUT /states/provision`'s `target`).
    pub fn target(self) -> &'static str {
        match self {
            Verb::Manage => "manage",
            Verb::Provide => "provide",
            Verb::Deploy => "active",
            Verb::Undeploy => "deleted",
            Verb::Adopt => "adopt",
        }
    }
}

/// The verbs [`plan`] allows from `state` (the table is `plan`'s; this only asks it).
pub fn allowed(state: ProvisionState) -> Vec<Verb> {
    Verb::ALL.iter().copied().filter(|verb| plan(state, *verb).is_ok()).collect()
}

impl FromStr for Verb {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Verb, ValueError> {
        Ok(match text {
            "manage" => Verb::Manage,
            "provide" => Verb::Provide,
            "active" | "deploy" => Verb::Deploy,
            "deleted" | "undeploy" => Verb::Undeploy,
            "adopt" => Verb::Adopt,
            _ => {
                return Err(ValueError(format!(
                    "{text:?} is not a provision action (manage, provide, active, deleted, adopt)"
                )));
            }
        })
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verb::Manage => "manage",
            Verb::Provide => "provide",
            Verb::Deploy => "deploy",
            Verb::Undeploy => "undeploy",
            Verb::Adopt => "adopt",
        })
    }
}

/// A permitted transition: the state while the action runs, and where it ends on success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub during: ProvisionState,
    pub target: ProvisionState,
}

/// The transition `verb` makes from `state`, or why it is refused.
pub fn plan(state: ProvisionState, verb: Verb) -> Result<Plan, String> {
    use ProvisionState as S;
    let plan = |during, target| Ok(Plan { during, target });
    match (verb, state) {
        (Verb::Manage, S::Enroll | S::Available | S::Manageable) => plan(state, S::Manageable),
        (Verb::Provide, S::Manageable | S::Available) => plan(state, S::Available),
        (Verb::Deploy, S::Available | S::DeployFailed) => plan(S::Deploying, S::Active),
        (Verb::Undeploy, S::Active | S::DeployFailed | S::WaitCallBack | S::Error) => {
            plan(S::Deleting, S::Available)
        }
        (Verb::Adopt, S::Manageable) => plan(S::Manageable, S::Active),
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
            Ok(Plan { during: S::Deploying, target: S::Active })
        );
        assert_eq!(plan(S::DeployFailed, Verb::Deploy).unwrap().target, S::Active);
        assert_eq!(
            plan(S::Active, Verb::Undeploy),
            Ok(Plan { during: S::Deleting, target: S::Available })
        );
        assert_eq!(plan(S::Error, Verb::Undeploy).unwrap().target, S::Available);
        assert_eq!(plan(S::Enroll, Verb::Manage).unwrap().target, S::Manageable);
        assert_eq!(plan(S::Manageable, Verb::Adopt).unwrap().target, S::Active);
        assert_eq!(
            plan(S::Active, Verb::Deploy).unwrap_err(),
            "cannot deploy a node that is active"
        );
        assert_eq!(
            plan(S::Available, Verb::Adopt).unwrap_err(),
            "cannot adopt a node that is available"
        );
        assert_eq!(
            plan(S::Enroll, Verb::Deploy).unwrap_err(),
            "cannot deploy a node that is enroll"
        );
        assert_eq!("deleted".parse::<Verb>().unwrap(), Verb::Undeploy);
        assert_eq!(allowed(S::DeployFailed), [Verb::Deploy, Verb::Undeploy]);
        assert_eq!(allowed(S::Manageable), [Verb::Manage, Verb::Provide, Verb::Adopt]);
        assert!(allowed(S::Deploying).is_empty());
        for verb in Verb::ALL {
            assert_eq!(verb.target().parse::<Verb>().unwrap(), *verb);
        }
        assert!("explode".parse::<Verb>().is_err());
    }
}
