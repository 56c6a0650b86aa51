//! Port groups: their rows (read and written here only) and ports' membership
//! (`ports.portgroup_id`). A port joins a group of its own node only, and every port of a group
//! has the same physical network (Ironic's rules), checked in the transaction that writes the
//! port; a group with ports is not deleted nor moved to another node. Port groups are not what
//! a snapshot is built from (a MAC finds its node by its port), so their writes log no change.

use bootvol_core::inventory::ChildSpec;
use bootvol_core::model::JsonMap;
use bootvol_core::model::groups::{Portgroup, PortgroupSpec};

use super::engine::{Conn, Row, Tx, Value, args};
use super::rows::node_id;
use super::writes::{WriteError, write_child};
use super::{Db, DbError};

const SELECT: &str = "SELECT g.uuid, n.uuid, g.name, g.address, g.extra, g.internal_info, \
    g.properties, g.mode, g.standalone_ports_supported, g.created_at, g.updated_at \
    FROM portgroups g JOIN nodes n ON n.id = g.node_id";

fn from_row(row: &Row) -> Result<Portgroup, DbError> {
    let uuid: String = row.get(0)?;
    let corrupt =
        |message: String| DbError::Corrupt { table: "portgroups", key: uuid.clone(), message };
    let map = |i: usize| -> Result<JsonMap, DbError> {
        serde_json::from_str(&row.get::<String>(i)?).map_err(|e| corrupt(e.to_string()))
    };
    let address = row
        .get::<Option<String>>(3)?
        .map(|a| a.parse().map_err(|e: bootvol_core::model::ValueError| corrupt(e.0)))
        .transpose()?;
    Ok(Portgroup {
        node_uuid: row.get(1)?,
        spec: PortgroupSpec {
            name: row.get(2)?,
            address,
            extra: map(4)?,
            properties: map(6)?,
            mode: row.get(7)?,
            standalone_ports_supported: row.get::<i64>(8)? != 0,
        },
        internal_info: map(5)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
        uuid,
    })
}

/// The id and node id of the group with this UUID or name.
fn group_ids(conn: &Conn, ident: &str) -> Result<Option<(i64, i64)>, DbError> {
    conn.query_opt("SELECT id, node_id FROM portgroups WHERE uuid = ?1 OR name = ?1", args![ident])?
        .map(|r| Ok((r.get(0)?, r.get(1)?)))
        .transpose()
}

fn ports_in(conn: &Conn, group: i64) -> Result<i64, DbError> {
    conn.query_one("SELECT COUNT(*) FROM ports WHERE portgroup_id = ?1", args![group])?.get(0)
}

/// Refuses a name or an address another group holds.
fn check_unique(tx: &Tx<'_>, uuid: &str, spec: &PortgroupSpec) -> Result<(), WriteError> {
    let holder = |column: &str, value: &str| -> Result<Option<String>, DbError> {
        tx.query_opt(
            &format!("SELECT uuid FROM portgroups WHERE {column} = ?1 AND uuid != ?2"),
            args![value, uuid],
        )?
        .map(|r| r.get(0))
        .transpose()
    };
    if let Some(name) = &spec.name
        && let Some(other) = holder("name", name)?
    {
        return Err(WriteError::Conflict(format!(
            "A port group with name {name} already exists ({other})."
        )));
    }
    if let Some(address) = spec.address
        && let Some(other) = holder("address", &address.to_string())?
    {
        return Err(WriteError::Conflict(format!(
            "A port group with MAC address {address} already exists ({other})."
        )));
    }
    Ok(())
}

fn spec_values(spec: &PortgroupSpec) -> Vec<Value> {
    let json = |m: &JsonMap| Value::Text(serde_json::Value::Object(m.clone()).to_string());
    vec![
        spec.name.clone().map_or(Value::Null, Value::Text),
        spec.address.map_or(Value::Null, |a| Value::Text(a.to_string())),
        json(&spec.extra),
        json(&spec.properties),
        Value::Text(spec.mode.clone()),
        Value::Int(i64::from(spec.standalone_ports_supported)),
    ]
}

impl Db {
    /// Every port group (or those of one node), oldest first.
    pub fn portgroups(&self, node_uuid: Option<&str>) -> Result<Vec<Portgroup>, DbError> {
        let rows = match node_uuid {
            None => self.conn.query(&format!("{SELECT} ORDER BY g.id"), &[])?,
            Some(node) => self
                .conn
                .query(&format!("{SELECT} WHERE n.uuid = ?1 ORDER BY g.id"), args![node])?,
        };
        rows.iter().map(from_row).collect()
    }

    /// The port group with this UUID or name.
    pub fn portgroup(&self, ident: &str) -> Result<Option<Portgroup>, DbError> {
        let row = self
            .conn
            .query_opt(&format!("{SELECT} WHERE g.uuid = ?1 OR g.name = ?1"), args![ident])?;
        row.as_ref().map(from_row).transpose()
    }

    /// Creates (`existing` false) or updates port group `uuid` of node `node_uuid`.
    pub fn write_portgroup(
        &self,
        uuid: &str,
        node_uuid: &str,
        spec: &PortgroupSpec,
        existing: bool,
    ) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        let Some(node) = node_id(&tx, node_uuid)? else {
            return Err(WriteError::NotFound(format!("node {node_uuid} could not be found")));
        };
        check_unique(&tx, uuid, spec)?;
        let stored = group_ids(&tx, uuid)?;
        let mut values = vec![Value::Text(uuid.to_owned()), Value::Int(node)];
        values.extend(spec_values(spec));
        match (existing, stored) {
            (false, Some(_)) => {
                return Err(WriteError::Conflict(format!(
                    "A port group with UUID {uuid} already exists."
                )));
            }
            (false, None) => {
                tx.execute(
                    "INSERT INTO portgroups (uuid, node_id, name, address, extra, properties, mode, \
                     standalone_ports_supported) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    &values,
                )?;
            }
            (true, None) => {
                return Err(WriteError::NotFound(format!("Port group {uuid} could not be found.")));
            }
            (true, Some((id, old_node))) => {
                if old_node != node && ports_in(&tx, id)? > 0 {
                    return Err(WriteError::Invalid(format!(
                        "Port group {uuid} has ports: it can not move to node {node_uuid} (move or delete its ports first)."
                    )));
                }
                tx.execute(
                    "UPDATE portgroups SET node_id = ?2, name = ?3, address = ?4, extra = ?5, \
                     properties = ?6, mode = ?7, standalone_ports_supported = ?8, \
                     updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
                    &values,
                )?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Deletes a port group without ports (Ironic's rule).
    pub fn delete_portgroup(&self, uuid: &str) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        let Some((id, _)) = group_ids(&tx, uuid)? else {
            return Err(WriteError::NotFound(format!("Port group {uuid} could not be found.")));
        };
        let ports = ports_in(&tx, id)?;
        if ports > 0 {
            return Err(WriteError::Invalid(format!(
                "Cannot complete the requested action because port group {uuid} contains ports ({ports})."
            )));
        }
        tx.execute("DELETE FROM portgroups WHERE id = ?1", args![id])?;
        tx.commit()?;
        Ok(())
    }

    /// The group of every port in one (or of one node's ports): (port UUID, group UUID).
    pub fn port_portgroups(
        &self,
        node_uuid: Option<&str>,
    ) -> Result<Vec<(String, String)>, DbError> {
        let select =
            "SELECT p.uuid, g.uuid FROM ports p JOIN portgroups g ON g.id = p.portgroup_id";
        let rows = match node_uuid {
            None => self.conn.query(select, &[])?,
            Some(node) => self.conn.query(
                &format!("{select} JOIN nodes n ON n.id = p.node_id WHERE n.uuid = ?1"),
                args![node],
            )?,
        };
        rows.iter().map(|r| Ok((r.get(0)?, r.get(1)?))).collect()
    }

    /// [`Db::write_child`] for a port, which then belongs to port group `portgroup` (UUID or
    /// name; none: to no group) in the same transaction: a group of the port's node, whose
    /// other ports have the port's physical network.
    pub fn write_port_in_portgroup(
        &self,
        uuid: &str,
        node_uuid: &str,
        spec: &ChildSpec,
        existing: bool,
        portgroup: Option<&str>,
    ) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        let node = write_child(&tx, uuid, node_uuid, spec, existing)?;
        let group = match portgroup {
            None => None,
            Some(ident) => {
                let Some((group, group_node)) = group_ids(&tx, ident)? else {
                    return Err(WriteError::NotFound(format!(
                        "Invalid input for field/attribute portgroup_uuid: port group {ident} could not be found."
                    )));
                };
                if group_node != node {
                    return Err(WriteError::Invalid(format!(
                        "Port can not be added to port group {ident}: it belongs to another node than the port's ({node_uuid})."
                    )));
                }
                if let ChildSpec::Port(port) = spec {
                    check_physnet(&tx, group, uuid, ident, port.physical_network.as_deref())?;
                }
                Some(group)
            }
        };
        tx.execute(
            "UPDATE ports SET portgroup_id = ?2 WHERE uuid = ?1",
            args![uuid, group.map_or(Value::Null, Value::Int)],
        )?;
        tx.changed("ports", uuid, "update");
        tx.commit()?;
        Ok(())
    }
}

/// Refuses (409, Ironic's `PortgroupPhysnetInconsistent`) a port whose physical network is not
/// that of the other ports of its group.
fn check_physnet(
    tx: &Tx<'_>,
    group: i64,
    port_uuid: &str,
    ident: &str,
    physnet: Option<&str>,
) -> Result<(), WriteError> {
    let others = tx.query(
        "SELECT DISTINCT physical_network FROM ports WHERE portgroup_id = ?1 AND uuid != ?2",
        args![group, port_uuid],
    )?;
    for row in &others {
        let theirs: Option<String> = row.get(0)?;
        if theirs.as_deref() != physnet {
            return Err(WriteError::Conflict(format!(
                "Port group {ident} has ports with physical network {}; this port's is {}: the ports of a group share one.",
                theirs.as_deref().unwrap_or("(none)"),
                physnet.unwrap_or("(none)")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootvol_core::model::{ChildKind, ProvisionState};

    #[test]
    fn a_group_holds_its_nodes_ports_and_goes_with_the_node() {
        let db = Db::open_in_memory().unwrap();
        let config = bootvol_core::config::Config::from_toml("", "t").unwrap();
        let node = |name: &str| {
            bootvol_core::inventory::parse_node(&serde_json::json!({"name": name}), &config)
                .unwrap()
        };
        let (n1, n2) =
            ("11111111-1111-4111-8111-0000000000a1", "11111111-1111-4111-8111-0000000000a2");
        db.create_node(n1, &node("n1"), ProvisionState::Enroll).unwrap();
        db.create_node(n2, &node("n2"), ProvisionState::Enroll).unwrap();
        let g = "11111111-1111-4111-8111-0000000000b1";
        let spec = PortgroupSpec { name: Some("bond0".into()), ..Default::default() };
        db.write_portgroup(g, n1, &spec, false).unwrap();
        let taken = db.write_portgroup("11111111-1111-4111-8111-0000000000b2", n2, &spec, false);
        assert!(matches!(taken, Err(WriteError::Conflict(_))), "{taken:?}");
        let port = |mac: &str| {
            ChildSpec::parse(ChildKind::Port, &serde_json::json!({"address": mac})).unwrap()
        };
        let p1 = "11111111-1111-4111-8111-0000000000c1";
        let other = db.write_port_in_portgroup(p1, n2, &port("52:54:00:00:00:01"), false, Some(g));
        assert!(matches!(other, Err(WriteError::Invalid(_))), "{other:?}");
        assert!(db.stamped_ports(None).unwrap().is_empty(), "nothing half-written");
        db.write_port_in_portgroup(p1, n1, &port("52:54:00:00:00:01"), false, Some("bond0"))
            .unwrap();
        assert_eq!(db.port_portgroups(Some(n1)).unwrap(), vec![(p1.to_owned(), g.to_owned())]);
        assert!(matches!(db.delete_portgroup(g), Err(WriteError::Invalid(_))));
        assert!(matches!(db.write_portgroup(g, n2, &spec, true), Err(WriteError::Invalid(_))));
        // The node's deletion takes its ports and groups.
        db.delete_node(n1).unwrap();
        assert!(db.portgroups(None).unwrap().is_empty());
        assert!(db.port_portgroups(None).unwrap().is_empty());
    }
}
