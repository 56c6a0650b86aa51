//! The node service's writes of Ironic's node sub-resources: traits (the whole set, one added,
//! one removed: checked by `model::traits`), VIFs (recorded on a free port's
//! `internal_info.tenant_vif_port_id`, as Ironic's flat network interface does, without
//! Neutron; the `noop` network interface records nothing, as Ironic's), and the config drive a
//! deploy request carries (stored in `instance_info.configdrive`, as Ironic stores it), the
//! console flag, and the RAID configuration asked for (checked by `model::raid` before).

use serde_json::json;

use super::{NodeError, NodeService};
use bootvol_core::model::hardware::Kind;
use bootvol_core::model::{JsonMap, NodeRecord, Port, TENANT_VIF, traits};

impl NodeService {
    /// Replaces the node's traits (each checked, at most 50). Refused while an action holds it.
    pub async fn set_traits(&self, key: &str, names: Vec<String>) -> Result<NodeRecord, NodeError> {
        let record = self.node(key).await?;
        let checked = traits::check_set(names.iter().map(String::as_str))
            .map_err(|e| NodeError::Invalid(e.0))?;
        self.check_unlocked(&record.node).await?;
        let uuid = record.node.uuid.clone();
        let written = {
            let uuid = uuid.clone();
            self.db().run(move |db| db.set_traits(&uuid, &checked))
        };
        if !written.await? {
            return Err(NodeError::NotFound(format!("Node {key} could not be found.")));
        }
        self.record_change("node", "traits", &uuid, &uuid).await;
        self.node(&uuid).await
    }

    /// Adds one trait to the node's set.
    pub async fn add_trait(&self, key: &str, name: &str) -> Result<NodeRecord, NodeError> {
        traits::check(name).map_err(|e| NodeError::Invalid(e.0))?;
        let record = self.node(key).await?;
        let mut all = record.traits.clone();
        all.push(name.to_owned());
        self.set_traits(&record.node.uuid, all).await
    }

    /// Removes one trait (404 when the node does not have it, as Ironic).
    pub async fn remove_trait(&self, key: &str, name: &str) -> Result<NodeRecord, NodeError> {
        let record = self.node(key).await?;
        if !record.traits.iter().any(|t| t == name) {
            return Err(NodeError::NotFound(format!(
                "Node {} doesn't have a trait '{name}'",
                record.node.uuid
            )));
        }
        let rest = record.traits.iter().filter(|t| *t != name).cloned().collect();
        self.set_traits(&record.node.uuid, rest).await
    }

    /// Enables or disables the node's console (its console interface does something: the
    /// caller checks). Refused while an action holds the node.
    pub async fn set_console(&self, key: &str, on: bool) -> Result<NodeRecord, NodeError> {
        let record =
            self.write_unlocked(key, move |db, uuid| db.set_console_enabled(uuid, on)).await?;
        let uuid = record.node.uuid.clone();
        let payload =
            json!({"node_uuid": uuid, "node_name": record.node.name, "console_enabled": on});
        let event_type = "baremetal.node.console_set.end".to_owned();
        self.db().record_event(&uuid, event_type, "info", payload).await;
        self.node(&uuid).await
    }

    /// Records the RAID configuration asked for, checked by `model::raid::validate_target`
    /// (an empty one clears it). Refused while an action holds the node.
    pub async fn set_target_raid_config(
        &self,
        key: &str,
        config: JsonMap,
    ) -> Result<NodeRecord, NodeError> {
        let record = self
            .write_unlocked(key, move |db, uuid| db.set_target_raid_config(uuid, &config))
            .await?;
        let uuid = &record.node.uuid;
        self.record_change("node", "raid_config", uuid, uuid).await;
        self.node(uuid).await
    }

    /// Runs `write` on the node's UUID once no action holds the node (as Ironic's conductor
    /// takes the lock, waiting a little); answers the node as it was before.
    async fn write_unlocked(
        &self,
        key: &str,
        write: impl FnOnce(&bootvol_db::Db, &str) -> Result<(), bootvol_db::DbError> + Send + 'static,
    ) -> Result<NodeRecord, NodeError> {
        let record = self.node(key).await?;
        self.check_unlocked(&record.node).await?;
        let uuid = record.node.uuid.clone();
        self.db().run(move |db| write(db, &uuid)).await?;
        Ok(record)
    }

    /// The VIFs attached to the node's ports.
    pub async fn vifs(&self, key: &str) -> Result<Vec<String>, NodeError> {
        let record = self.node(key).await?;
        Ok(record.ports.iter().filter_map(Port::vif).map(str::to_owned).collect())
    }

    /// Attaches VIF `vif` to a free port of the node (one with no VIF, PXE-enabled ports first),
    /// as Ironic's flat network interface; `noop` accepts and records nothing. Refused while an
    /// action holds the node.
    pub async fn attach_vif(&self, key: &str, vif: &str) -> Result<(), NodeError> {
        let record = self.node(key).await?;
        let node = &record.node;
        if node.interfaces.effective(node.driver, Kind::Network) == "noop" {
            return Ok(());
        }
        self.check_unlocked(node).await?;
        if let Some(port) = record.ports.iter().find(|p| p.vif() == Some(vif)) {
            return Err(NodeError::Conflict(format!(
                "Unable to attach VIF because VIF {vif} is already attached to Ironic port {}",
                port.uuid
            )));
        }
        let mut free: Vec<&Port> = record.ports.iter().filter(|p| p.vif().is_none()).collect();
        free.sort_by_key(|p| !p.more.pxe_enabled);
        let Some(port) = free.first() else {
            return Err(NodeError::Invalid(format!(
                "Unable to attach VIF {vif}, not enough free physical ports."
            )));
        };
        let mut info = port.more.internal_info.clone();
        info.insert(TENANT_VIF.into(), json!(vif));
        self.write_internal_info(&port.uuid, info).await?;
        self.record_change("node", "vif_attach", &node.uuid, &port.uuid).await;
        Ok(())
    }

    /// Detaches VIF `vif` from the node's port that holds it.
    pub async fn detach_vif(&self, key: &str, vif: &str) -> Result<(), NodeError> {
        let record = self.node(key).await?;
        let node = &record.node;
        if node.interfaces.effective(node.driver, Kind::Network) == "noop" {
            return Ok(());
        }
        self.check_unlocked(node).await?;
        let Some(port) = record.ports.iter().find(|p| p.vif() == Some(vif)) else {
            return Err(NodeError::Invalid(format!(
                "Unable to detach VIF {vif} from node {} because it is not attached to it.",
                node.uuid
            )));
        };
        let mut info = port.more.internal_info.clone();
        info.remove(TENANT_VIF);
        self.write_internal_info(&port.uuid, info).await?;
        self.record_change("node", "vif_detach", &node.uuid, &port.uuid).await;
        Ok(())
    }

    async fn write_internal_info(
        &self,
        port_uuid: &str,
        info: bootvol_core::model::JsonMap,
    ) -> Result<(), NodeError> {
        let uuid = port_uuid.to_owned();
        if !self.db().run(move |db| db.set_port_internal_info(&uuid, &info)).await? {
            return Err(NodeError::NotFound(format!("Port {port_uuid} could not be found.")));
        }
        Ok(())
    }
}
