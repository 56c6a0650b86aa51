//! One decoder per row kind (nodes, ports, volume connectors, volume targets) and the reads of
//! children: every read of a row of a kind goes through its one `SELECT` and its one decoder,
//! whether it lists them all, the children of one node, or one child by UUID (in SQL).

use std::str::FromStr;

use super::engine::{Conn, Row, Value, args};

use super::nodes::ChildRows;
use super::{Db, DbError};
use bootvol_core::model::hardware::Interfaces;
use bootvol_core::model::{
    Child, ChildKind, JsonMap, MacAddr, Node, Port, PortFields, Stamped, ValueError,
    VolumeConnector, VolumeTarget,
};

/// The node columns [`node_from_row`] reads, in order. The chassis' UUID is named
/// `chassis_uuid`: unnamed, PostgreSQL calls it `uuid`, and an `ORDER BY uuid` is then ambiguous.
pub(super) const NODE_COLUMNS: &str = "id, uuid, name, driver, driver_info, properties, instance_info, driver_internal_info, \
    extra, storage_interface, boot_interface, deploy_interface, power_state, target_power_state, provision_state, \
    target_provision_state, maintenance, maintenance_reason, last_error, created_at, updated_at, \
    instance_uuid, resource_class, console_interface, inspect_interface, management_interface, \
    network_interface, power_interface, raid_interface, rescue_interface, vendor_interface, \
    provision_updated_at, (SELECT ch.uuid FROM chassis ch WHERE ch.id = nodes.chassis_id) AS chassis_uuid, \
    console_enabled, target_raid_config";

/// Child rows with their node and timestamps.
type Rows<T> = Result<Vec<Stamped<T>>, DbError>;

// Each child SELECT starts with the node's UUID and the row's UUID and timestamps (see
// `stamped`), then the kind's own columns.
const PORT_SELECT: &str = "SELECT n.uuid, c.uuid, c.created_at, c.updated_at, c.address, c.extra, \
    c.pxe_enabled, c.local_link_connection, c.physical_network, c.internal_info \
    FROM ports c JOIN nodes n ON n.id = c.node_id";
const CONNECTOR_SELECT: &str = "SELECT n.uuid, c.uuid, c.created_at, c.updated_at, c.type, c.connector_id, c.extra \
    FROM volume_connectors c JOIN nodes n ON n.id = c.node_id";
const TARGET_SELECT: &str = "SELECT n.uuid, c.uuid, c.created_at, c.updated_at, c.volume_type, c.boot_index, c.volume_id, \
    c.properties, c.extra FROM volume_targets c JOIN nodes n ON n.id = c.node_id";

impl Db {
    /// The traits of every node (or of one node), as (node UUID, trait), sorted.
    /// The instance holding each node lock whose lease runs at `now` (Unix seconds), by node
    /// UUID: Ironic's `reservation`. Locks are few (one per running action), so all are read.
    pub(super) fn reservations(&self, now: i64) -> Result<Vec<(String, String)>, DbError> {
        let rows = self.conn.query(
            "SELECT node_uuid, instance_id FROM node_locks WHERE lease_expires_at > ?1 AND instance_id != ''",
            args![now],
        )?;
        rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
    }

    pub(super) fn node_traits(&self, which: &ChildRows) -> Result<Vec<(String, String)>, DbError> {
        let (condition, args) = which.clause();
        let sql = format!(
            "SELECT n.uuid, t.trait FROM node_traits t JOIN nodes n ON n.id = t.node_id{condition} \
             ORDER BY n.uuid, t.trait"
        );
        let rows = self.conn.query(&sql, &args)?;
        rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
    }

    /// Every port (or the ports of one node), by address.
    pub fn stamped_ports(&self, node_uuid: Option<&str>) -> Rows<Port> {
        self.ports_of(&node_uuid.map_or(ChildRows::All, |u| ChildRows::Node(u.to_owned())))
    }

    /// The port with this address (none or one: addresses are unique), of one node when
    /// given: one indexed lookup, not a read of every port.
    pub fn stamped_port_by_address(&self, mac: MacAddr, node_uuid: Option<&str>) -> Rows<Port> {
        self.ports_of(&ChildRows::Address(mac.to_string(), node_uuid.map(str::to_owned)))
    }

    pub(super) fn ports_of(&self, which: &ChildRows) -> Rows<Port> {
        self.children(PORT_SELECT, "c.address", which, port_from_row)
    }

    /// Every volume connector (or those of one node), by type and id.
    pub fn stamped_connectors(&self, node_uuid: Option<&str>) -> Rows<VolumeConnector> {
        self.connectors_of(&node_uuid.map_or(ChildRows::All, |u| ChildRows::Node(u.to_owned())))
    }

    pub(super) fn connectors_of(&self, which: &ChildRows) -> Rows<VolumeConnector> {
        self.children(CONNECTOR_SELECT, "c.type, c.connector_id", which, connector_from_row)
    }

    /// Every volume target (or those of one node), by boot index.
    pub fn stamped_targets(&self, node_uuid: Option<&str>) -> Rows<VolumeTarget> {
        self.targets_of(&node_uuid.map_or(ChildRows::All, |u| ChildRows::Node(u.to_owned())))
    }

    pub(super) fn targets_of(&self, which: &ChildRows) -> Rows<VolumeTarget> {
        self.children(TARGET_SELECT, "c.boot_index", which, target_from_row)
    }

    /// The rows of a child SELECT, of the nodes `which` names (one node by its unique UUID, so
    /// that SQLite looks the node up by index and its children by `node_id`), in `order`.
    fn children<T>(
        &self,
        select: &str,
        order: &str,
        which: &ChildRows,
        decode: fn(&Row) -> Result<Stamped<T>, DbError>,
    ) -> Rows<T> {
        let (condition, args) = which.clause();
        self.decoded(&format!("{select}{condition} ORDER BY {order}"), &args, decode)
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
        more: PortFields {
            pxe_enabled: row.get::<i64>(6)? != 0,
            local_link_connection: json_map("ports", &uuid, &row.get::<String>(7)?)?,
            physical_network: row.get(8)?,
            internal_info: json_map("ports", &uuid, &row.get::<String>(9)?)?,
        },
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
        instance_uuid: optional(21)?,
        resource_class: optional(22)?,
        interfaces: Interfaces {
            console: optional(23)?,
            inspect: optional(24)?,
            management: optional(25)?,
            network: optional(26)?,
            power: optional(27)?,
            raid: optional(28)?,
            rescue: optional(29)?,
            vendor: optional(30)?,
        },
        provision_updated_at: optional(31)?,
        reservation: None,
        chassis_uuid: optional(32)?,
        console_enabled: row.get::<i64>(33)? != 0,
        target_raid_config: map(34)?,
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
