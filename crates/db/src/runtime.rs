//! Writing a node's runtime fields: states, errors, `instance_info`, `driver_internal_info`,
//! the console flag and the RAID configuration asked for; and deleting a node.

use super::engine::{Value as SqlValue, args};
use serde_json::Value;

use super::{Db, DbError};
use bootvol_core::model::{JsonMap, Node, PowerState, ProvisionState};

impl Db {
    /// Saves what actions change: provision and power states (and targets), `last_error`,
    /// `instance_info`, `driver_internal_info` and `instance_uuid` (undeploy clears it); the
    /// time of a provision state change. Identity, interfaces, `driver_info` and
    /// `maintenance` (the operator's: [`Db::set_maintenance`], inventories) are not touched, so
    /// an action that ends after the operator set maintenance does not clear it.
    pub fn save_node_runtime(&self, node: &Node) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET provision_updated_at = CASE WHEN provision_state = ?2 \
             THEN provision_updated_at ELSE strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') END, \
             provision_state = ?2, target_provision_state = ?3, power_state = ?4, \
             target_power_state = ?5, last_error = ?6, instance_info = ?7, \
             driver_internal_info = ?8, instance_uuid = ?9, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![
                &node.uuid,
                node.provision_state.as_str(),
                node.target_provision_state.map(|s| s.as_str()),
                node.power_state.map(|s| s.as_str()),
                node.target_power_state.map(|s| s.as_str()),
                &node.last_error,
                Value::Object(node.instance_info.clone()).to_string(),
                Value::Object(node.driver_internal_info.clone()).to_string(),
                &node.instance_uuid,
            ],
        )?;
        Ok(())
    }

    /// Records a power state read from the BMC (power sync): that column only, so a state an
    /// action wrote a moment earlier is never overwritten.
    pub fn set_power_state(&self, node_uuid: &str, state: PowerState) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET power_state = ?2, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![node_uuid, state.as_str()],
        )?;
        Ok(())
    }

    /// What an accepted action shows at once, before it runs, as Ironic shows it before its
    /// 202: the state it passes through (`during`, e.g. `inspecting`) and its target states;
    /// clears `last_error`. Only those columns.
    pub fn set_action_targets(
        &self,
        node_uuid: &str,
        during: Option<ProvisionState>,
        provision: Option<ProvisionState>,
        power: Option<PowerState>,
    ) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET provision_state = COALESCE(?4, provision_state), \
             target_provision_state = COALESCE(?2, target_provision_state), \
             target_power_state = COALESCE(?3, target_power_state), last_error = NULL, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![
                node_uuid,
                provision.map(|s| s.as_str()),
                power.map(|s| s.as_str()),
                during.map(|s| s.as_str())
            ],
        )?;
        Ok(())
    }

    /// An accepted action that was refused before it changed anything: back in the state it
    /// was accepted in (`previous`, when [`Db::set_action_targets`] moved it), no pending
    /// target, and `last_error` says why. Only those columns.
    pub fn end_refused_action(
        &self,
        node_uuid: &str,
        previous: Option<ProvisionState>,
        message: &str,
    ) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET provision_state = COALESCE(?3, provision_state), \
             target_provision_state = NULL, target_power_state = NULL, last_error = ?2, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![node_uuid, message, previous.map(|s| s.as_str())],
        )?;
        Ok(())
    }

    /// Sets or clears a node's maintenance flag and reason (cleared with the flag).
    pub fn set_maintenance(
        &self,
        node_uuid: &str,
        on: bool,
        reason: Option<&str>,
    ) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET maintenance = ?2, maintenance_reason = ?3, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![node_uuid, on, if on { reason } else { None }],
        )?;
        Ok(())
    }

    /// Records whether the node's console is enabled.
    pub fn set_console_enabled(&self, node_uuid: &str, on: bool) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET console_enabled = ?2, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![node_uuid, on],
        )?;
        Ok(())
    }

    /// Records the RAID configuration asked for (an empty object: none).
    pub fn set_target_raid_config(&self, node_uuid: &str, config: &JsonMap) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET target_raid_config = ?2, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![node_uuid, Value::Object(config.clone()).to_string()],
        )?;
        Ok(())
    }

    /// Deletes a node with its ports, connectors, targets and attachment records.
    pub fn delete_node(&self, node_uuid: &str) -> Result<(), DbError> {
        let tx = self.conn.begin()?;
        tx.execute("DELETE FROM volume_attachments WHERE node_uuid = ?1", args![node_uuid])?;
        tx.execute("DELETE FROM node_locks WHERE node_uuid = ?1", args![node_uuid])?;
        if tx.execute("DELETE FROM nodes WHERE uuid = ?1", args![node_uuid])? > 0 {
            tx.changed("nodes", node_uuid, "delete");
        }
        tx.commit()
    }

    /// One `UPDATE nodes ... WHERE uuid = ?1` in its own transaction, logged as a change of
    /// node `args[0]` when it changed a row.
    pub(super) fn update_node_row(&self, sql: &str, args: &[SqlValue]) -> Result<usize, DbError> {
        let tx = self.conn.begin()?;
        let changed = tx.execute(sql, args)?;
        if changed > 0
            && let Some(SqlValue::Text(uuid)) = args.first()
        {
            tx.changed("nodes", uuid, "update");
        }
        tx.commit()?;
        Ok(changed)
    }

    /// Whether a node has volumes Cinder considers in use by it (attached, or mid-way).
    pub fn has_live_attachments(&self, node_uuid: &str) -> Result<bool, DbError> {
        let count: i64 = self
            .conn
            .query_one(
                "SELECT COUNT(*) FROM volume_attachments WHERE node_uuid = ?1 \
                 AND (state IN ('attaching', 'attached', 'detaching') OR (state = 'failed' AND step != 'undone'))",
                args![node_uuid],
            )?
            .get(0)?;
        Ok(count > 0)
    }
}
