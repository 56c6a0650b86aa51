//! One decoder per row kind (nodes, ports, volume connectors, volume targets) and the reads of
//! children: every read of a row of a kind goes through its one `SELECT` and its one decoder,
//! whether it lists them all, the children of one node, or one child by UUID (in SQL).

use std::str::FromStr;

use super::engine::{Conn, Row, Value, args};

use super::{Db, DbError};
use crate::model::{
    Child, ChildKind, JsonMap, Node, Port, Stamped, ValueError, VolumeConnector, VolumeTarget,
};

/// The node columns [`node_from_row`] reads, in order.
pub(super) const NODE_COLUMNS: &str = "id, uuid, name, driver, driver_info, properties, instance_info, driver_internal_info, \
    extra, storage_interface, boot_interface, deploy_interface, power_state, target_power_state, provision_state, \
    target_provision_state, maintenance, maintenance_reason, last_error, created_at, updated_at";

/// Child rows with their node and timestamps.
type Rows<T> = Result<Vec<Stamped<T>>, DbError>;

// Each child SELECT starts with the node's UUID and the row's UUID and timestamps (see
// `stamped`), then the kind's own columns.
const PORT_SELECT: &str = "SELECT n.uuid, c.uuid, c.created_at, c.updated_at, c.address, c.extra \
    FROM ports c JOIN nodes n ON n.id = c.node_id";
const CONNECTOR_SELECT: &str = "SELECT n.uuid, c.uuid, c.created_at, c.updated_at, c.type, c.connector_id, c.extra \
    FROM volume_connectors c JOIN nodes n ON n.id = c.node_id";
const TARGET_SELECT: &str = "SELECT n.uuid, c.uuid, c.created_at, c.updated_at, c.volume_type, c.boot_index, c.volume_id, \
    c.properties, c.extra FROM volume_targets c JOIN nodes n ON n.id = c.node_id";

impl Db {
    /// Every port (or the ports of one node), by address.
    pub fn stamped_ports(&self, node_uuid: Option<&str>) -> Rows<Port> {
        self.children(PORT_SELECT, "c.address", node_uuid, port_from_row)
    }

    /// Every volume connector (or those of one node), by type and id.
    pub fn stamped_connectors(&self, node_uuid: Option<&str>) -> Rows<VolumeConnector> {
        self.children(CONNECTOR_SELECT, "c.type, c.connector_id", node_uuid, connector_from_row)
    }

    /// Every volume target (or those of one node), by boot index.
    pub fn stamped_targets(&self, node_uuid: Option<&str>) -> Rows<VolumeTarget> {
        self.children(TARGET_SELECT, "c.boot_index", node_uuid, target_from_row)
    }

    /// The rows of a child SELECT, every one or those of one node (by the node's unique UUID,
    /// so that SQLite looks the node up by index and its children by `node_id`), in `order`.
    fn children<T>(
        &self,
        select: &str,
        order: &str,
        node_uuid: Option<&str>,
        decode: fn(&Row) -> Result<Stamped<T>, DbError>,
    ) -> Rows<T> {
        match node_uuid {
            Some(uuid) => self.decoded(
                &format!("{select} WHERE n.uuid = ?1 ORDER BY {order}"),
                args![uuid],
                decode,
            ),
            None => self.decoded(&format!("{select} ORDER BY {order}"), &[], decode),
        }
    }

    /// One port, connector or target by UUID.
    pub fn child(&self, kind: ChildKind, uuid: &str) -> Result<Option<Stamped<Child>>, DbError> {
        let one = |select: &str| format!("{select} WHERE c.uuid = ?1");
        let found = match kind {
            ChildKind::Port => self
                .decoded(&one(PORT_SELECT), args![uuid], port_from_row)?
                .pop()
                .map(|s| s.map(Child::Port)),
            ChildKind::Connector => self
                .decoded(&one(CONNECTOR_SELECT), args![uuid], connector_from_row)?
                .pop()
                .map(|s| s.map(Child::Connector)),
            ChildKind::Target => self
                .decoded(&one(TARGET_SELECT), args![uuid], target_from_row)?
                .pop()
                .map(|s| s.map(Child::Target)),
        };
        Ok(found)
    }

    /// The rows `sql` selects, each through `decode`.
    pub(super) fn decoded<T>(
        &self,
        sql: &str,
        args: &[Value],
        decode: fn(&Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        self.conn.query(sql, args)?.iter().map(decode).collect()
    }
}

/// The id of the node with this UUID.
pub(super) fn node_id(conn: &Conn, node_uuid: &str) -> Result<Option<i64>, DbError> {
    conn.query_opt("SELECT id FROM nodes WHERE uuid = ?1", args![node_uuid])?
        .map(|r| r.get(0))
        .transpose()
}

/// A child row's node, timestamps and `item` (the first four columns of each child SELECT).
fn stamped<T>(row: &Row, item: T) -> Result<Stamped<T>, DbError> {
    Ok(Stamped { node_uuid: row.get(0)?, item, created_at: row.get(2)?, updated_at: row.get(3)? })
}

fn port_from_row(row: &Row) -> Result<Stamped<Port>, DbError> {
    let uuid: String = row.get(1)?;
    let port = Port {
        address: parse("ports", &uuid, &row.get::<String>(4)?)?,
        extra: json_map("ports", &uuid, &row.get::<String>(5)?)?,
        uuid,
    };
    stamped(row, port)
}

fn connector_from_row(row: &Row) -> Result<Stamped<VolumeConnector>, DbError> {
    let uuid: String = row.get(1)?;
    let connector = VolumeConnector {
        connector_type: parse("volume_connectors", &uuid, &row.get::<String>(4)?)?,
        connector_id: row.get(5)?,
        extra: json_map("volume_connectors", &uuid, &row.get::<String>(6)?)?,
        uuid,
    };
    stamped(row, connector)
}

fn target_from_row(row: &Row) -> Result<Stamped<VolumeTarget>, DbError> {
    let uuid: String = row.get(1)?;
    let boot_index: i64 = row.get(5)?;
    let target = VolumeTarget {
        volume_type: parse("volume_targets", &uuid, &row.get::<String>(4)?)?,
        boot_index: u32::try_from(boot_index)
            .map_err(|_| corrupt("volume_targets", &uuid, "boot_index out of range".into()))?,
        volume_id: row.get(6)?,
        properties: json_map("volume_targets", &uuid, &row.get::<String>(7)?)?,
        extra: json_map("volume_targets", &uuid, &row.get::<String>(8)?)?,
        uuid,
    };
    stamped(row, target)
}

/// A node row of [`NODE_COLUMNS`], with its id.
pub(super) fn node_from_row(row: &Row) -> Result<(i64, Node), DbError> {
    let uuid: String = row.get(1)?;
    let text = |i: usize| -> Result<String, DbError> { row.get::<String>(i) };
    let optional = |i: usize| -> Result<Option<String>, DbError> { row.get::<Option<String>>(i) };
    let map = |i: usize| -> Result<JsonMap, DbError> { json_map("nodes", &uuid, &text(i)?) };
    let node = Node {
        name: text(2)?,
        driver: parse("nodes", &uuid, &text(3)?)?,
        driver_info: map(4)?,
        properties: map(5)?,
        instance_info: map(6)?,
        driver_internal_info: map(7)?,
        extra: map(8)?,
        storage_interface: optional(9)?.map(|s| parse("nodes", &uuid, &s)).transpose()?,
        boot_interface: parse("nodes", &uuid, &text(10)?)?,
        deploy_interface: parse("nodes", &uuid, &text(11)?)?,
        power_state: optional(12)?.map(|s| parse("nodes", &uuid, &s)).transpose()?,
        target_power_state: optional(13)?.map(|s| parse("nodes", &uuid, &s)).transpose()?,
        provision_state: parse("nodes", &uuid, &text(14)?)?,
        target_provision_state: optional(15)?.map(|s| parse("nodes", &uuid, &s)).transpose()?,
        maintenance: row.get::<i64>(16)? != 0,
        maintenance_reason: optional(17)?,
        last_error: optional(18)?,
        created_at: optional(19)?,
        updated_at: optional(20)?,
        uuid,
    };
    Ok((row.get(0)?, node))
}

fn parse<T: FromStr<Err = ValueError>>(
    table: &'static str,
    key: &str,
    text: &str,
) -> Result<T, DbError> {
    text.parse().map_err(|e: ValueError| corrupt(table, key, e.0))
}

fn json_map(table: &'static str, key: &str, text: &str) -> Result<JsonMap, DbError> {
    serde_json::from_str(text).map_err(|e| corrupt(table, key, e.to_string()))
}

fn corrupt(table: &'static str, key: &str, message: String) -> DbError {
    DbError::Corrupt { table, key: key.to_owned(), message }
}
