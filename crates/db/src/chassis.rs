//! Chassis: their rows (read and written here only) and nodes' membership (`nodes.chassis_id`):
//! a node is created in or moved to a chassis in the same transaction as its other fields, a
//! chassis that must exist is looked up in that transaction, and one that nodes refer to is not
//! deleted. Chassis do not change what a snapshot is built from, so their own writes log no
//! change; a node's membership is logged as the node's update.

use bootvol_core::inventory::NodeSpec;
use bootvol_core::model::groups::{Chassis, ChassisSpec};
use bootvol_core::model::{JsonMap, ProvisionState};

use super::engine::{Conn, Row, Tx, Value, args};
use super::writes::{WriteError, create_node, update_operator_fields};
use super::{Db, DbError};

const SELECT: &str = "SELECT uuid, description, extra, created_at, updated_at FROM chassis";

fn chassis_from_row(row: &Row) -> Result<Chassis, DbError> {
    let uuid: String = row.get(0)?;
    let extra: String = row.get(2)?;
    let extra: JsonMap = serde_json::from_str(&extra).map_err(|e| DbError::Corrupt {
        table: "chassis",
        key: uuid.clone(),
        message: format!("extra: {e}"),
    })?;
    Ok(Chassis {
        description: row.get(1)?,
        extra,
        created_at: row.get(3)?,
        updated_at: row.get(4)?,
        uuid,
    })
}

fn extra_text(spec: &ChassisSpec) -> String {
    serde_json::Value::Object(spec.extra.clone()).to_string()
}

/// The id of chassis `uuid` (refused as "not found" when there is none).
fn chassis_id(conn: &Conn, uuid: &str) -> Result<i64, WriteError> {
    conn.query_opt("SELECT id FROM chassis WHERE uuid = ?1", args![uuid])?
        .map(|r| r.get(0))
        .transpose()?
        .ok_or_else(|| WriteError::NotFound(format!("Chassis {uuid} could not be found.")))
}

/// Puts node `node_uuid` in chassis `chassis` (none: in no chassis), in `tx`.
fn set_membership(tx: &Tx<'_>, node_uuid: &str, chassis: Option<&str>) -> Result<(), WriteError> {
    let id = chassis.map(|uuid| chassis_id(tx, uuid)).transpose()?;
    tx.execute(
        "UPDATE nodes SET chassis_id = ?2 WHERE uuid = ?1",
        args![node_uuid, id.map_or(Value::Null, Value::Int)],
    )?;
    tx.changed("nodes", node_uuid, "update");
    Ok(())
}

/// What [`Db::delete_chassis`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChassisDeleted {
    Deleted,
    NotFound,
    /// Refused: this many nodes are in it.
    HasNodes(i64),
}

impl Db {
    /// Every chassis, oldest first.
    pub fn chassis_list(&self) -> Result<Vec<Chassis>, DbError> {
        let rows = self.conn.query(&format!("{SELECT} ORDER BY id"), &[])?;
        rows.iter().map(chassis_from_row).collect()
    }

    /// The chassis with this UUID.
    pub fn chassis(&self, uuid: &str) -> Result<Option<Chassis>, DbError> {
        let row = self.conn.query_opt(&format!("{SELECT} WHERE uuid = ?1"), args![uuid])?;
        row.as_ref().map(chassis_from_row).transpose()
    }

    /// Creates chassis `uuid` (refused when the UUID is taken).
    pub fn create_chassis(&self, uuid: &str, spec: &ChassisSpec) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        if tx.query_opt("SELECT id FROM chassis WHERE uuid = ?1", args![uuid])?.is_some() {
            return Err(WriteError::Conflict(format!(
                "A chassis with UUID {uuid} already exists."
            )));
        }
        tx.execute(
            "INSERT INTO chassis (uuid, description, extra) VALUES (?1, ?2, ?3)",
            args![
                uuid,
                spec.description.clone().map_or(Value::Null, Value::Text),
                extra_text(spec)
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Replaces a chassis' description and `extra`; false when there is no such chassis.
    pub fn update_chassis(&self, uuid: &str, spec: &ChassisSpec) -> Result<bool, DbError> {
        let changed = self.conn.execute(
            "UPDATE chassis SET description = ?2, extra = ?3, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![
                uuid,
                spec.description.clone().map_or(Value::Null, Value::Text),
                extra_text(spec)
            ],
        )?;
        Ok(changed > 0)
    }

    /// Deletes a chassis no node is in.
    pub fn delete_chassis(&self, uuid: &str) -> Result<ChassisDeleted, DbError> {
        let tx = self.conn.begin()?;
        let Some(id) = tx
            .query_opt("SELECT id FROM chassis WHERE uuid = ?1", args![uuid])?
            .map(|r| r.get::<i64>(0))
            .transpose()?
        else {
            return Ok(ChassisDeleted::NotFound);
        };
        let nodes: i64 =
            tx.query_one("SELECT COUNT(*) FROM nodes WHERE chassis_id = ?1", args![id])?.get(0)?;
        if nodes > 0 {
            return Ok(ChassisDeleted::HasNodes(nodes));
        }
        tx.execute("DELETE FROM chassis WHERE id = ?1", args![id])?;
        tx.commit()?;
        Ok(ChassisDeleted::Deleted)
    }

    /// Creates a node (no children) in chassis `chassis` (which must exist), in one transaction.
    pub fn create_node_in_chassis(
        &self,
        uuid: &str,
        spec: &NodeSpec,
        provision_state: ProvisionState,
        chassis: Option<&str>,
    ) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        create_node(&tx, uuid, spec, provision_state)?;
        set_membership(&tx, uuid, chassis)?;
        tx.commit()?;
        Ok(())
    }

    /// Updates a node's operator fields and its chassis (which must exist), in one transaction.
    pub fn update_node_in_chassis(
        &self,
        uuid: &str,
        spec: &NodeSpec,
        chassis: Option<&str>,
    ) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        update_operator_fields(&tx, uuid, spec)?;
        set_membership(&tx, uuid, chassis)?;
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(description: &str) -> ChassisSpec {
        ChassisSpec::new(Some(description.into()), JsonMap::new()).unwrap()
    }

    #[test]
    fn a_chassis_holds_nodes_and_is_not_deleted_while_it_does() {
        let db = Db::open_in_memory().unwrap();
        let config = bootvol_core::config::Config::from_toml("", "t").unwrap();
        let (a, b) =
            ("11111111-1111-4111-8111-0000000000c1", "11111111-1111-4111-8111-0000000000c2");
        db.create_chassis(a, &spec("rack 1")).unwrap();
        db.create_chassis(b, &spec("rack 2")).unwrap();
        assert!(matches!(db.create_chassis(a, &spec("again")), Err(WriteError::Conflict(_))));
        let node = bootvol_core::inventory::parse_node(
            &serde_json::json!({"name": "n1", "driver": "fake"}),
            &config,
        )
        .unwrap();
        let n = "11111111-1111-4111-8111-0000000000a1";
        let ghost = "11111111-1111-4111-8111-0000000000ff";
        let refused = db.create_node_in_chassis(n, &node, ProvisionState::Enroll, Some(ghost));
        assert!(matches!(refused, Err(WriteError::NotFound(_))), "{refused:?}");
        assert!(db.node_record(n).unwrap().is_none(), "nothing half-written");
        db.create_node_in_chassis(n, &node, ProvisionState::Enroll, Some(a)).unwrap();
        assert_eq!(db.node_record(n).unwrap().unwrap().node.chassis_uuid.as_deref(), Some(a));
        assert_eq!(db.delete_chassis(a).unwrap(), ChassisDeleted::HasNodes(1));
        db.update_node_in_chassis(n, &node, Some(b)).unwrap();
        assert_eq!(db.delete_chassis(a).unwrap(), ChassisDeleted::Deleted);
        assert_eq!(db.delete_chassis(a).unwrap(), ChassisDeleted::NotFound);
        assert!(db.update_chassis(b, &spec("rack two")).unwrap());
        let shown = db.chassis(b).unwrap().unwrap();
        assert_eq!(shown.description.as_deref(), Some("rack two"));
        assert!(shown.updated_at.is_some());
        db.update_node_in_chassis(n, &node, None).unwrap();
        assert_eq!(db.node_record(n).unwrap().unwrap().node.chassis_uuid, None);
        assert_eq!(db.chassis_list().unwrap().len(), 1);
    }
}
