//! The node service's port groups: create, read, update and delete them (a group with ports is
//! not deleted nor moved to another node), the group each port belongs to, and ports written
//! into a group (one of the port's node, whose ports share a physical network: `db` checks it
//! in the port's transaction). Every change is an event of the group's node, as for ports.

use std::collections::HashMap;

use super::{NodeError, NodeService};
use bootvol_core::inventory::ChildSpec;
use bootvol_core::model::groups::{Portgroup, PortgroupSpec};
use bootvol_core::model::{Child, Stamped};

impl NodeService {
    /// Every port group, or those of one node, oldest first.
    pub async fn portgroups(&self, node_uuid: Option<String>) -> Result<Vec<Portgroup>, NodeError> {
        Ok(self.db().run(move |db| db.portgroups(node_uuid.as_deref())).await?)
    }

    /// The port group with this UUID or name.
    pub async fn portgroup(&self, ident: &str) -> Result<Portgroup, NodeError> {
        let owned = ident.to_owned();
        self.db()
            .run(move |db| db.portgroup(&owned))
            .await?
            .ok_or_else(|| NodeError::NotFound(format!("Portgroup {ident} could not be found.")))
    }

    /// The group of each port in one (of one node's ports, or of all), by port UUID.
    pub async fn port_portgroups(
        &self,
        node_uuid: Option<String>,
    ) -> Result<HashMap<String, String>, NodeError> {
        let pairs = self.db().run(move |db| db.port_portgroups(node_uuid.as_deref())).await?;
        Ok(pairs.into_iter().collect())
    }

    /// Creates (`existing` false) or replaces port group `uuid` of node `node_uuid`.
    pub async fn write_portgroup(
        &self,
        uuid: String,
        node_uuid: String,
        spec: PortgroupSpec,
        existing: bool,
    ) -> Result<Portgroup, NodeError> {
        spec.check().map_err(|e| NodeError::Invalid(e.0))?;
        let (id, node) = (uuid.clone(), node_uuid.clone());
        self.db().run(move |db| db.write_portgroup(&id, &node, &spec, existing)).await?;
        let action = if existing { "update" } else { "create" };
        self.record_change("portgroup", action, &node_uuid, &uuid).await;
        self.portgroup(&uuid).await
    }

    /// Deletes a port group without ports.
    pub async fn delete_portgroup(&self, ident: &str) -> Result<Portgroup, NodeError> {
        let stored = self.portgroup(ident).await?;
        let uuid = stored.uuid.clone();
        self.db().run(move |db| db.delete_portgroup(&uuid)).await?;
        self.record_change("portgroup", "delete", &stored.node_uuid, &stored.uuid).await;
        Ok(stored)
    }

    /// [`NodeService::create_child`] for a port that belongs to group `portgroup` (none: to no
    /// group).
    pub async fn create_port_in_portgroup(
        &self,
        node_uuid: &str,
        uuid: String,
        mut spec: ChildSpec,
        portgroup: Option<String>,
    ) -> Result<Stamped<Child>, NodeError> {
        spec.restore_secrets(None).map_err(NodeError::Invalid)?;
        self.check_editable(None, node_uuid, &spec).await?;
        self.write_child_in(uuid, node_uuid, spec, false, Some(portgroup)).await
    }

    /// [`NodeService::update_child`] for a port that then belongs to group `portgroup`.
    pub async fn update_port_in_portgroup(
        &self,
        uuid: &str,
        node_uuid: &str,
        mut spec: ChildSpec,
        portgroup: Option<String>,
    ) -> Result<Stamped<Child>, NodeError> {
        let stored = self.child(spec.kind(), uuid).await?;
        spec.restore_secrets(Some(&stored.item)).map_err(NodeError::Invalid)?;
        self.check_editable(Some(&stored), node_uuid, &spec).await?;
        self.write_child_in(uuid.to_owned(), node_uuid, spec, true, Some(portgroup)).await
    }
}
