//! The node service's chassis: create, read, update and delete them (Ironic's rule: a chassis
//! that nodes are in is not deleted), and nodes created in or moved to one (the chassis must
//! exist; the node's own edit rules hold as for any other node update).

use super::{NodeError, NodeService};
use bootvol_core::inventory::NodeSpec;
use bootvol_core::model::groups::{Chassis, ChassisSpec};
use bootvol_core::model::{NodeRecord, ProvisionState};
use bootvol_db::ChassisDeleted;

impl NodeService {
    /// Every chassis, oldest first.
    pub async fn chassis_list(&self) -> Result<Vec<Chassis>, NodeError> {
        Ok(self.db().run(|db| db.chassis_list()).await?)
    }

    /// The chassis with this UUID.
    pub async fn chassis(&self, uuid: &str) -> Result<Chassis, NodeError> {
        let owned = uuid.to_owned();
        self.db()
            .run(move |db| db.chassis(&owned))
            .await?
            .ok_or_else(|| NodeError::NotFound(format!("Chassis {uuid} could not be found.")))
    }

    /// Creates chassis `uuid`.
    pub async fn create_chassis(
        &self,
        uuid: String,
        spec: ChassisSpec,
    ) -> Result<Chassis, NodeError> {
        let id = uuid.clone();
        self.db().run(move |db| db.create_chassis(&id, &spec)).await?;
        self.chassis(&uuid).await
    }

    /// Replaces a chassis' description and `extra`.
    pub async fn update_chassis(
        &self,
        uuid: &str,
        spec: ChassisSpec,
    ) -> Result<Chassis, NodeError> {
        let id = uuid.to_owned();
        if !self.db().run(move |db| db.update_chassis(&id, &spec)).await? {
            return Err(NodeError::NotFound(format!("Chassis {uuid} could not be found.")));
        }
        self.chassis(uuid).await
    }

    /// Deletes a chassis; refused (as Ironic: invalid, not a conflict) while nodes are in it.
    pub async fn delete_chassis(&self, uuid: &str) -> Result<(), NodeError> {
        let id = uuid.to_owned();
        match self.db().run(move |db| db.delete_chassis(&id)).await? {
            ChassisDeleted::Deleted => Ok(()),
            ChassisDeleted::NotFound => {
                Err(NodeError::NotFound(format!("Chassis {uuid} could not be found.")))
            }
            ChassisDeleted::HasNodes(n) => Err(NodeError::Invalid(format!(
                "Cannot complete the requested action because chassis {uuid} contains nodes ({n}): move or delete them first."
            ))),
        }
    }

    /// [`NodeService::create_node`] in chassis `chassis` (refused when it does not exist).
    pub async fn create_node_in_chassis(
        &self,
        uuid: String,
        mut spec: NodeSpec,
        initial: ProvisionState,
        chassis: Option<String>,
    ) -> Result<NodeRecord, NodeError> {
        spec.restore_secrets(None).map_err(NodeError::Invalid)?;
        let id = uuid.clone();
        self.db()
            .run(move |db| db.create_node_in_chassis(&id, &spec, initial, chassis.as_deref()))
            .await?;
        self.record_change("node", "create", &uuid, &uuid).await;
        self.node(&uuid).await
    }

    /// [`NodeService::update_node`] that also puts the node in chassis `chassis` (none: in no
    /// chassis; refused when it does not exist).
    pub async fn update_node_in_chassis(
        &self,
        key: &str,
        spec: NodeSpec,
        chassis: Option<String>,
    ) -> Result<NodeRecord, NodeError> {
        self.update_node_with(key, spec, Some(chassis)).await
    }
}
