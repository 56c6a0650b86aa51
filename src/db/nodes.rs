//! Reading nodes with their ports, connectors and targets (decoded by `rows`).

use std::collections::HashMap;

use super::engine::{Value, args};

use super::rows::{NODE_COLUMNS, node_from_row};
use super::{Db, DbError};
use crate::model::{MacAddr, NodeRecord, ProvisionState, Stamped};

impl Db {
    /// Every node with its children, by name.
    pub fn node_records(&self) -> Result<Vec<NodeRecord>, DbError> {
        self.records_where("1 = 1", &[])
    }

    /// The nodes in `state`, with their children: what a periodic pass that looks at one state
    /// reads, rather than every node (10,000 records every few seconds would compete with the
    /// boot path).
    pub fn node_records_in_state(&self, state: ProvisionState) -> Result<Vec<NodeRecord>, DbError> {
        self.records_where("provision_state = ?1", args![state.as_str()])
    }

    /// The nodes power sync asks a BMC about: a driver other than `fake`, not in maintenance.
    pub fn node_records_with_bmc(&self) -> Result<Vec<NodeRecord>, DbError> {
        self.records_where("driver <> 'fake' AND maintenance = 0", &[])
    }

    /// The node with this UUID or name.
    pub fn node_record(&self, name_or_uuid: &str) -> Result<Option<NodeRecord>, DbError> {
        Ok(self.records_where("uuid = ?1 OR name = ?1", args![name_or_uuid])?.pop())
    }

    /// The node that owns a port with this MAC.
    pub fn node_record_by_mac(&self, mac: MacAddr) -> Result<Option<NodeRecord>, DbError> {
        let node_id: Option<i64> = self
            .conn
            .query_opt("SELECT node_id FROM ports WHERE address = ?1", args![mac.to_string()])?
            .map(|r| r.get(0))
            .transpose()?;
        match node_id {
            None => Ok(None),
            Some(id) => Ok(self.records_where("id = ?1", args![id])?.pop()),
        }
    }

    fn records_where(&self, condition: &str, args: &[Value]) -> Result<Vec<NodeRecord>, DbError> {
        let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE {condition} ORDER BY name");
        let mut records: Vec<NodeRecord> = self
            .decoded(&sql, args, node_from_row)?
            .into_iter()
            .map(|(_, node)| NodeRecord {
                node,
                ports: Vec::new(),
                volume_connectors: Vec::new(),
                volume_targets: Vec::new(),
            })
            .collect();
        // One node: its children by indexed lookups. Many: each child table read once.
        let only = match records.as_slice() {
            [] => return Ok(records),
            [one] => Some(one.node.uuid.clone()),
            _ => None,
        };
        let at: HashMap<String, usize> =
            records.iter().enumerate().map(|(i, r)| (r.node.uuid.clone(), i)).collect();
        let only = only.as_deref();
        attach(&mut records, &at, self.stamped_ports(only)?, |r| &mut r.ports);
        attach(&mut records, &at, self.stamped_connectors(only)?, |r| &mut r.volume_connectors);
        attach(&mut records, &at, self.stamped_targets(only)?, |r| &mut r.volume_targets);
        Ok(records)
    }
}

/// Puts each child row into its node's record (`at`: record index by node UUID).
fn attach<T>(
    records: &mut [NodeRecord],
    at: &HashMap<String, usize>,
    rows: Vec<Stamped<T>>,
    list: fn(&mut NodeRecord) -> &mut Vec<T>,
) {
    for row in rows {
        if let Some(&i) = at.get(&row.node_uuid) {
            list(&mut records[i]).push(row.item);
        }
    }
}
