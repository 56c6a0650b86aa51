//! Reading nodes with their ports, connectors and targets.

use std::collections::HashMap;
use std::str::FromStr;

use rusqlite::{OptionalExtension, Row, params};

use super::{Db, DbError};
use crate::model::{
    JsonMap, MacAddr, Node, NodeRecord, Port, ValueError, VolumeConnector, VolumeTarget,
};

const NODE_COLUMNS: &str = "id, uuid, name, driver, driver_info, properties, instance_info, driver_internal_info, \
    extra, storage_interface, boot_interface, deploy_interface, power_state, target_power_state, provision_state, \
    target_provision_state, maintenance, maintenance_reason, last_error, created_at, updated_at";

impl Db {
    /// Every node with its children, by name.
    pub fn node_records(&self) -> Result<Vec<NodeRecord>, DbError> {
        self.records_where("1 = 1", params![])
    }

    /// The node with this UUID or name.
    pub fn node_record(&self, name_or_uuid: &str) -> Result<Option<NodeRecord>, DbError> {
        Ok(self.records_where("uuid = ?1 OR name = ?1", params![name_or_uuid])?.pop())
    }

    /// The node that owns a port with this MAC.
    pub fn node_record_by_mac(&self, mac: MacAddr) -> Result<Option<NodeRecord>, DbError> {
        let node_id: Option<i64> = self
            .conn
            .query_row(
                "SELECT node_id FROM ports WHERE address = ?1",
                params![mac.to_string()],
                |r| r.get(0),
            )
            .optional()?;
        match node_id {
            None => Ok(None),
            Some(id) => Ok(self.records_where("id = ?1", params![id])?.pop()),
        }
    }

    fn records_where(
        &self,
        condition: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<NodeRecord>, DbError> {
        let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE {condition} ORDER BY name");
        let mut statement = self.conn.prepare_cached(&sql)?;
        let rows =
            statement.query_map(args, |row| Ok((row.get::<_, i64>(0)?, node_from_row(row))))?;
        let mut nodes = Vec::new();
        for row in rows {
            let (id, node) = row?;
            nodes.push((id, node?));
        }
        let mut children =
            self.children(nodes.iter().map(|(id, _)| *id).collect::<Vec<_>>().as_slice())?;
        Ok(nodes
            .into_iter()
            .map(|(id, node)| {
                let (ports, volume_connectors, volume_targets) =
                    children.remove(&id).unwrap_or_default();
                NodeRecord { node, ports, volume_connectors, volume_targets }
            })
            .collect())
    }

    /// Ports, connectors and targets of the given nodes, by node id.
    #[allow(clippy::type_complexity)]
    fn children(
        &self,
        ids: &[i64],
    ) -> Result<HashMap<i64, (Vec<Port>, Vec<VolumeConnector>, Vec<VolumeTarget>)>, DbError> {
        let mut out: HashMap<i64, (Vec<Port>, Vec<VolumeConnector>, Vec<VolumeTarget>)> =
            HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        // One id: an indexed lookup. Many: read each table once.
        let filter =
            if ids.len() == 1 { format!("node_id = {}", ids[0]) } else { "1 = 1".to_owned() };
        let sql = format!(
            "SELECT node_id, uuid, address, extra FROM ports WHERE {filter} ORDER BY address"
        );
        let mut statement = self.conn.prepare_cached(&sql)?;
        for row in statement.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })? {
            let (node_id, uuid, address, extra) = row?;
            let port = Port {
                address: parse("ports", &uuid, &address)?,
                extra: json_map("ports", &uuid, &extra)?,
                uuid,
            };
            out.entry(node_id).or_default().0.push(port);
        }
        let sql = format!(
            "SELECT node_id, uuid, type, connector_id, extra FROM volume_connectors WHERE {filter} ORDER BY type, connector_id"
        );
        let mut statement = self.conn.prepare_cached(&sql)?;
        for row in statement.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
            ))
        })? {
            let (node_id, uuid, kind, connector_id, extra) = row?;
            let connector = VolumeConnector {
                connector_type: parse("volume_connectors", &uuid, &kind)?,
                connector_id,
                extra: json_map("volume_connectors", &uuid, &extra)?,
                uuid,
            };
            out.entry(node_id).or_default().1.push(connector);
        }
        let sql = format!(
            "SELECT node_id, uuid, volume_type, boot_index, volume_id, properties, extra FROM volume_targets \
             WHERE {filter} ORDER BY boot_index"
        );
        let mut statement = self.conn.prepare_cached(&sql)?;
        for row in statement.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, String>(6)?,
            ))
        })? {
            let (node_id, uuid, kind, boot_index, volume_id, properties, extra) = row?;
            let target = VolumeTarget {
                volume_type: parse("volume_targets", &uuid, &kind)?,
                boot_index: u32::try_from(boot_index)
                    .map_err(|_| corrupt("volume_targets", &uuid, "boot_index"))?,
                volume_id,
                properties: json_map("volume_targets", &uuid, &properties)?,
                extra: json_map("volume_targets", &uuid, &extra)?,
                uuid,
            };
            out.entry(node_id).or_default().2.push(target);
        }
        Ok(out)
    }
}

fn node_from_row(row: &Row<'_>) -> Result<Node, DbError> {
    let uuid: String = row.get(1)?;
    let text = |i: usize| -> Result<String, DbError> { Ok(row.get::<_, String>(i)?) };
    let optional =
        |i: usize| -> Result<Option<String>, DbError> { Ok(row.get::<_, Option<String>>(i)?) };
    let map = |i: usize| -> Result<JsonMap, DbError> { json_map("nodes", &uuid, &text(i)?) };
    let parsed_opt = |i: usize| -> Result<Option<String>, DbError> { optional(i) };
    Ok(Node {
        name: text(2)?,
        driver: parse("nodes", &uuid, &text(3)?)?,
        driver_info: map(4)?,
        properties: map(5)?,
        instance_info: map(6)?,
        driver_internal_info: map(7)?,
        extra: map(8)?,
        storage_interface: parsed_opt(9)?.map(|s| parse("nodes", &uuid, &s)).transpose()?,
        boot_interface: parse("nodes", &uuid, &text(10)?)?,
        deploy_interface: parse("nodes", &uuid, &text(11)?)?,
        power_state: parsed_opt(12)?.map(|s| parse("nodes", &uuid, &s)).transpose()?,
        target_power_state: parsed_opt(13)?.map(|s| parse("nodes", &uuid, &s)).transpose()?,
        provision_state: parse("nodes", &uuid, &text(14)?)?,
        target_provision_state: parsed_opt(15)?.map(|s| parse("nodes", &uuid, &s)).transpose()?,
        maintenance: row.get::<_, i64>(16)? != 0,
        maintenance_reason: optional(17)?,
        last_error: optional(18)?,
        created_at: optional(19)?,
        updated_at: optional(20)?,
        uuid,
    })
}

fn parse<T: FromStr<Err = ValueError>>(
    table: &'static str,
    key: &str,
    text: &str,
) -> Result<T, DbError> {
    text.parse().map_err(|e: ValueError| DbError::Corrupt {
        table,
        key: key.to_owned(),
        message: e.0,
    })
}

pub(super) fn json_map(table: &'static str, key: &str, text: &str) -> Result<JsonMap, DbError> {
    serde_json::from_str(text).map_err(|e| DbError::Corrupt {
        table,
        key: key.to_owned(),
        message: e.to_string(),
    })
}

fn corrupt(table: &'static str, key: &str, field: &str) -> DbError {
    DbError::Corrupt { table, key: key.to_owned(), message: format!("{field} out of range") }
}
