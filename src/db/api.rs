//! Single-object writes and stamped reads for the REST API: create, update and delete one node,
//! port, volume connector or volume target, each in its own transaction, from values the
//! `inventory` parsers already checked. Uniqueness conflicts come back as [`WriteError::Conflict`]
//! with the operator's message; nothing is half-written.

use rusqlite::{OptionalExtension, params};

use super::nodes::json_map;
use super::{Db, DbError};
use crate::inventory::{ConnectorSpec, NodeSpec, PortSpec, TargetSpec};
use crate::model::{JsonMap, Port, ProvisionState, VolumeConnector, VolumeTarget};

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')";

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A unique field is already used (a name, a MAC, a connector, a boot index).
    #[error("{0}")]
    Conflict(String),
    /// The row (or the node it names) does not exist.
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<rusqlite::Error> for WriteError {
    fn from(e: rusqlite::Error) -> Self {
        WriteError::Db(DbError::Sqlite(e))
    }
}

/// A child row with what the API shows besides the model: its node and its timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped<T> {
    pub node_uuid: String,
    pub item: T,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

fn to_json(map: &JsonMap) -> String {
    serde_json::Value::Object(map.clone()).to_string()
}

fn corrupt(table: &'static str, key: &str, message: String) -> DbError {
    DbError::Corrupt { table, key: key.to_owned(), message }
}

impl Db {
    fn node_id(&self, node_uuid: &str) -> Result<i64, WriteError> {
        self.conn
            .query_row("SELECT id FROM nodes WHERE uuid = ?1", params![node_uuid], |r| r.get(0))
            .optional()?
            .ok_or_else(|| WriteError::NotFound(format!("node {node_uuid} could not be found")))
    }

    fn taken(&self, sql: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Option<String>, DbError> {
        Ok(self.conn.query_row(sql, args, |r| r.get::<_, String>(0)).optional()?)
    }

    /// Creates a node (no children) with this UUID in `provision_state`.
    pub fn create_node(
        &self,
        uuid: &str,
        spec: &NodeSpec,
        provision_state: ProvisionState,
    ) -> Result<(), WriteError> {
        let tx = self.conn.unchecked_transaction()?;
        if let Some(owner) =
            self.taken("SELECT uuid FROM nodes WHERE name = ?1 OR uuid = ?1", &[&spec.name])?
        {
            return Err(WriteError::Conflict(format!(
                "A node with name {} already exists ({owner}).",
                spec.name
            )));
        }
        if self.taken("SELECT uuid FROM nodes WHERE uuid = ?1", &[&uuid])?.is_some() {
            return Err(WriteError::Conflict(format!("A node with UUID {uuid} already exists.")));
        }
        tx.execute(
            "INSERT INTO nodes (uuid, name, driver, driver_info, properties, instance_info, extra, storage_interface, \
             boot_interface, deploy_interface, provision_state, maintenance) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                uuid,
                spec.name,
                spec.driver.as_str(),
                to_json(&spec.driver_info),
                to_json(&spec.properties),
                to_json(&spec.instance_info),
                to_json(&spec.extra),
                spec.storage_interface.map(|s| s.as_str()),
                spec.boot_interface.as_str(),
                spec.deploy_interface.as_str(),
                provision_state.as_str(),
                spec.maintenance.unwrap_or(false),
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Updates a node's operator fields (identity, driver, interfaces, the JSON fields,
    /// maintenance); states are the conductor's and are not touched.
    pub fn update_node(&self, uuid: &str, spec: &NodeSpec) -> Result<(), WriteError> {
        let tx = self.conn.unchecked_transaction()?;
        self.node_id(uuid)?;
        if let Some(owner) = self.taken(
            "SELECT uuid FROM nodes WHERE (name = ?1 OR uuid = ?1) AND uuid != ?2",
            &[&spec.name, &uuid],
        )? {
            return Err(WriteError::Conflict(format!(
                "A node with name {} already exists ({owner}).",
                spec.name
            )));
        }
        tx.execute(
            &format!(
                "UPDATE nodes SET name = ?2, driver = ?3, driver_info = ?4, properties = ?5, instance_info = ?6, \
                 extra = ?7, storage_interface = ?8, boot_interface = ?9, deploy_interface = ?10, \
                 maintenance = ?11, updated_at = {NOW} WHERE uuid = ?1"
            ),
            params![
                uuid,
                spec.name,
                spec.driver.as_str(),
                to_json(&spec.driver_info),
                to_json(&spec.properties),
                to_json(&spec.instance_info),
                to_json(&spec.extra),
                spec.storage_interface.map(|s| s.as_str()),
                spec.boot_interface.as_str(),
                spec.deploy_interface.as_str(),
                spec.maintenance.unwrap_or(false),
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Every port with its node and timestamps, by address.
    pub fn stamped_ports(&self) -> Result<Vec<Stamped<Port>>, DbError> {
        let mut statement = self.conn.prepare_cached(
            "SELECT n.uuid, p.uuid, p.address, p.extra, p.created_at, p.updated_at \
             FROM ports p JOIN nodes n ON n.id = p.node_id ORDER BY p.address",
        )?;
        let rows = statement.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (node_uuid, uuid, address, extra, created_at, updated_at) = row?;
            let port = Port {
                address: address
                    .parse()
                    .map_err(|e: crate::model::ValueError| corrupt("ports", &uuid, e.0))?,
                extra: json_map("ports", &uuid, &extra)?,
                uuid,
            };
            out.push(Stamped { node_uuid, item: port, created_at, updated_at });
        }
        Ok(out)
    }

    /// Every volume connector with its node and timestamps.
    pub fn stamped_connectors(&self) -> Result<Vec<Stamped<VolumeConnector>>, DbError> {
        let mut statement = self.conn.prepare_cached(
            "SELECT n.uuid, c.uuid, c.type, c.connector_id, c.extra, c.created_at, c.updated_at \
             FROM volume_connectors c JOIN nodes n ON n.id = c.node_id ORDER BY c.id",
        )?;
        let rows = statement.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, Option<String>>(6)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (node_uuid, uuid, kind, connector_id, extra, created_at, updated_at) = row?;
            let connector = VolumeConnector {
                connector_type: kind.parse().map_err(|e: crate::model::ValueError| {
                    corrupt("volume_connectors", &uuid, e.0)
                })?,
                connector_id,
                extra: json_map("volume_connectors", &uuid, &extra)?,
                uuid,
            };
            out.push(Stamped { node_uuid, item: connector, created_at, updated_at });
        }
        Ok(out)
    }

    /// Every volume target with its node and timestamps.
    pub fn stamped_targets(&self) -> Result<Vec<Stamped<VolumeTarget>>, DbError> {
        let mut statement = self.conn.prepare_cached(
            "SELECT n.uuid, t.uuid, t.volume_type, t.boot_index, t.volume_id, t.properties, t.extra, \
             t.created_at, t.updated_at FROM volume_targets t JOIN nodes n ON n.id = t.node_id ORDER BY t.id",
        )?;
        let rows = statement.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, String>(6)?,
                r.get::<_, Option<String>>(7)?,
                r.get::<_, Option<String>>(8)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (node_uuid, uuid, kind, boot_index, volume_id, properties, extra, created, updated) =
                row?;
            let target = VolumeTarget {
                volume_type: kind
                    .parse()
                    .map_err(|e: crate::model::ValueError| corrupt("volume_targets", &uuid, e.0))?,
                boot_index: u32::try_from(boot_index).map_err(|_| {
                    corrupt("volume_targets", &uuid, "boot_index out of range".into())
                })?,
                volume_id,
                properties: json_map("volume_targets", &uuid, &properties)?,
                extra: json_map("volume_targets", &uuid, &extra)?,
                uuid,
            };
            out.push(Stamped { node_uuid, item: target, created_at: created, updated_at: updated });
        }
        Ok(out)
    }

    /// Creates (`existing` None) or updates a port.
    pub fn write_port(
        &self,
        uuid: &str,
        node_uuid: &str,
        spec: &PortSpec,
        existing: bool,
    ) -> Result<(), WriteError> {
        let tx = self.conn.unchecked_transaction()?;
        let node_id = self.node_id(node_uuid)?;
        let address = spec.address.to_string();
        if self
            .taken("SELECT uuid FROM ports WHERE address = ?1 AND uuid != ?2", &[&address, &uuid])?
            .is_some()
        {
            return Err(WriteError::Conflict(format!(
                "A port with MAC address {address} already exists."
            )));
        }
        if existing {
            let n = tx.execute(
                &format!(
                    "UPDATE ports SET node_id = ?2, address = ?3, extra = ?4, updated_at = {NOW} WHERE uuid = ?1"
                ),
                params![uuid, node_id, address, to_json(&spec.extra)],
            )?;
            if n == 0 {
                return Err(WriteError::NotFound(format!("Port {uuid} could not be found.")));
            }
        } else {
            if self.taken("SELECT uuid FROM ports WHERE uuid = ?1", &[&uuid])?.is_some() {
                return Err(WriteError::Conflict(format!(
                    "A port with UUID {uuid} already exists."
                )));
            }
            tx.execute(
                "INSERT INTO ports (uuid, node_id, address, extra) VALUES (?1, ?2, ?3, ?4)",
                params![uuid, node_id, address, to_json(&spec.extra)],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Creates or updates a volume connector; (type, connector_id) is unique.
    pub fn write_connector(
        &self,
        uuid: &str,
        node_uuid: &str,
        spec: &ConnectorSpec,
        existing: bool,
    ) -> Result<(), WriteError> {
        let tx = self.conn.unchecked_transaction()?;
        let node_id = self.node_id(node_uuid)?;
        if self
            .taken(
                "SELECT uuid FROM volume_connectors WHERE type = ?1 AND connector_id = ?2 AND uuid != ?3",
                &[&spec.connector_type.as_str(), &spec.connector_id, &uuid],
            )?
            .is_some()
        {
            return Err(WriteError::Conflict(format!(
                "A volume connector with type {} and connector ID {} already exists.",
                spec.connector_type, spec.connector_id
            )));
        }
        if existing {
            let n = tx.execute(
                &format!(
                    "UPDATE volume_connectors SET node_id = ?2, type = ?3, connector_id = ?4, extra = ?5, \
                     updated_at = {NOW} WHERE uuid = ?1"
                ),
                params![
                    uuid,
                    node_id,
                    spec.connector_type.as_str(),
                    spec.connector_id,
                    to_json(&spec.extra)
                ],
            )?;
            if n == 0 {
                return Err(WriteError::NotFound(format!(
                    "Volume connector {uuid} could not be found."
                )));
            }
        } else {
            if self.taken("SELECT uuid FROM volume_connectors WHERE uuid = ?1", &[&uuid])?.is_some()
            {
                return Err(WriteError::Conflict(format!(
                    "A volume connector with UUID {uuid} already exists."
                )));
            }
            tx.execute(
                "INSERT INTO volume_connectors (uuid, node_id, type, connector_id, extra) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    uuid,
                    node_id,
                    spec.connector_type.as_str(),
                    spec.connector_id,
                    to_json(&spec.extra)
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Creates or updates a volume target; `boot_index` is unique per node. `properties` must
    /// already carry stored secrets in place of masked values.
    pub fn write_target(
        &self,
        uuid: &str,
        node_uuid: &str,
        spec: &TargetSpec,
        existing: bool,
    ) -> Result<(), WriteError> {
        let tx = self.conn.unchecked_transaction()?;
        let node_id = self.node_id(node_uuid)?;
        if self
            .taken(
                "SELECT uuid FROM volume_targets WHERE node_id = ?1 AND boot_index = ?2 AND uuid != ?3",
                &[&node_id, &spec.boot_index, &uuid],
            )?
            .is_some()
        {
            return Err(WriteError::Conflict(format!(
                "A volume target with boot index '{}' for node {node_uuid} already exists.",
                spec.boot_index
            )));
        }
        let properties = to_json(&spec.properties.clone().unwrap_or_default());
        if existing {
            let n = tx.execute(
                &format!(
                    "UPDATE volume_targets SET node_id = ?2, volume_type = ?3, boot_index = ?4, volume_id = ?5, \
                     properties = ?6, extra = ?7, updated_at = {NOW} WHERE uuid = ?1"
                ),
                params![
                    uuid,
                    node_id,
                    spec.volume_type.as_str(),
                    spec.boot_index,
                    spec.volume_id,
                    properties,
                    to_json(&spec.extra)
                ],
            )?;
            if n == 0 {
                return Err(WriteError::NotFound(format!(
                    "Volume target {uuid} could not be found."
                )));
            }
        } else {
            if self.taken("SELECT uuid FROM volume_targets WHERE uuid = ?1", &[&uuid])?.is_some() {
                return Err(WriteError::Conflict(format!(
                    "A volume target with UUID {uuid} already exists."
                )));
            }
            tx.execute(
                "INSERT INTO volume_targets (uuid, node_id, volume_type, boot_index, volume_id, properties, extra) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    uuid,
                    node_id,
                    spec.volume_type.as_str(),
                    spec.boot_index,
                    spec.volume_id,
                    properties,
                    to_json(&spec.extra)
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Deletes a port, connector or target by UUID; false when there was none.
    pub fn delete_child(&self, kind: ChildKind, uuid: &str) -> Result<bool, DbError> {
        let table = match kind {
            ChildKind::Port => "ports",
            ChildKind::Connector => "volume_connectors",
            ChildKind::Target => "volume_targets",
        };
        let n =
            self.conn.execute(&format!("DELETE FROM {table} WHERE uuid = ?1"), params![uuid])?;
        Ok(n > 0)
    }
}

/// Which child table [`Db::delete_child`] deletes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildKind {
    Port,
    Connector,
    Target,
}
