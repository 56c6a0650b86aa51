//! Ironic's edit rules: which changes a node's state allows, and which the node's lock forbids
//! (an edit waits for the lock as Ironic's conductor does, `Conductor::retry_locked`, before it
//! is refused).

use super::{NodeError, NodeService};
use crate::conductor::locked_message;
use bootvol_core::inventory::ChildSpec;
use bootvol_core::model::{Child, ChildKind, EditRule, Node, PowerState, ProvisionState, Stamped};
use bootvol_db::LockError;

/// Whether a node is deployed or on its way in or out (its volume and MACs are in use).
fn deployed(state: ProvisionState) -> bool {
    matches!(
        state,
        ProvisionState::Active
            | ProvisionState::Deploying
            | ProvisionState::WaitCallBack
            | ProvisionState::Deleting
    )
}

impl NodeService {
    /// Checks that a create (`stored` none) or an update of a child under `node_uuid` is
    /// allowed by its kind's rule, on the node it leaves as well as the one it is under.
    pub(super) async fn check_editable(
        &self,
        stored: Option<&Stamped<Child>>,
        node_uuid: &str,
        spec: &ChildSpec,
    ) -> Result<(), NodeError> {
        let kind = spec.kind();
        let moved = stored.filter(|s| s.node_uuid != node_uuid);
        match kind.edit_rule() {
            EditRule::Address => {
                // A new port, a new address or a move is the rule's: the new MAC would get the
                // node's script.
                if stored.is_none() {
                    self.check_rule(kind, node_uuid, "creation").await?;
                }
                let readdressed = match (stored.map(|s| &s.item), spec) {
                    (Some(Child::Port(old)), ChildSpec::Port(new)) => old.address != new.address,
                    _ => false,
                };
                if let Some(old) = stored.filter(|_| readdressed || moved.is_some()) {
                    self.check_rule(kind, &old.node_uuid, "update").await?;
                }
                if moved.is_some() {
                    self.check_rule(kind, node_uuid, "update").await?;
                }
            }
            EditRule::Volume => {
                let action = if stored.is_some() { "update" } else { "creation" };
                if let Some(old) = moved {
                    self.check_rule(kind, &old.node_uuid, action).await?;
                }
                self.check_rule(kind, node_uuid, action).await?;
            }
        }
        Ok(())
    }

    /// Checks `kind`'s rule on node `node_uuid` as it is now, for `action` (`creation`,
    /// `update` or `deletion`): a volume connector or target changes only while its node is
    /// powered off or not deployed, and (as Ironic) is updated or deleted never while it is
    /// powered on.
    pub(super) async fn check_rule(
        &self,
        kind: ChildKind,
        node_uuid: &str,
        action: &str,
    ) -> Result<(), NodeError> {
        let mut record = self.node(node_uuid).await?;
        if kind.edit_rule() == EditRule::Volume {
            // As Ironic's conductor: the node's lock first (waiting a little for an action that
            // holds it, such as a power change just asked for), then its state as it is after.
            self.check_unlocked(&record.node).await?;
            record = self.node(node_uuid).await?;
        }
        let node = &record.node;
        match kind.edit_rule() {
            EditRule::Address if deployed(node.provision_state) && !node.maintenance => {
                Err(NodeError::Invalid(format!(
                    "Invalid state requested: the port addresses of node {} ({}) change only in maintenance: they pick the script it boots (set maintenance first)",
                    node.uuid, node.provision_state
                )))
            }
            EditRule::Address => Ok(()),
            EditRule::Volume
                if action != "creation" && node.power_state == Some(PowerState::On) =>
            {
                Err(NodeError::Invalid(format!(
                    "The requested action \"{} {action}\" can not be performed on node \"{}\" while it is in state \"power on\" (power it off first).",
                    kind.label(),
                    node.uuid
                )))
            }
            EditRule::Volume
                if deployed(node.provision_state) && node.power_state != Some(PowerState::Off) =>
            {
                Err(NodeError::Invalid(format!(
                    "Invalid state requested: the volume information of node {} can only be changed while it is powered off or not deployed (it is {} and {})",
                    node.uuid,
                    node.provision_state,
                    node.power_state.map_or("power unknown", |p| p.as_str())
                )))
            }
            EditRule::Volume => Ok(()),
        }
    }

    /// Refuses to edit a node that a live action (of any process) holds, once the conductor's
    /// retries of the lock gave up.
    pub(super) async fn check_unlocked(&self, node: &Node) -> Result<(), NodeError> {
        let free = || async {
            match self.db().node_locked(&node.uuid).await {
                Ok(None) => Ok(()),
                Ok(Some(holder)) => Err(LockError::Locked(holder)),
                Err(e) => Err(LockError::Db(e)),
            }
        };
        match self.conductor().retry_locked(free).await {
            Ok(()) => Ok(()),
            Err(LockError::Locked(holder)) => Err(NodeError::Locked(locked_message(&holder))),
            Err(LockError::Db(e)) => Err(e.into()),
        }
    }
}
