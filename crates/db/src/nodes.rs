//! Reading nodes with their ports, connectors and targets (decoded by `rows`).

use std::collections::HashMap;

use super::engine::{Value, args};

use super::rows::{NODE_COLUMNS, node_from_row};
use super::{Db, DbError};
use bootvol_core::model::{MacAddr, NodeRecord, ProvisionState, Stamped};

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

    /// The nodes an interrupted action may have left behind: in one of `states`, or with a power
    /// target still set. Startup recovery reads these rather than every node.
    pub fn node_records_interrupted(
        &self,
        states: &[ProvisionState],
    ) -> Result<Vec<NodeRecord>, DbError> {
        let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        let marks: Vec<String> = (1..=names.len()).map(|i| format!("?{i}")).collect();
        let condition = format!(
            "provision_state IN ({}) OR target_power_state IS NOT NULL",
            if marks.is_empty() { "NULL".to_owned() } else { marks.join(", ") }
        );
        let args: Vec<Value> = names.into_iter().map(Value::from).collect();
        self.records_where(&condition, &args)
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

    /// Every node with its children, `page` nodes at a time in name order, each page handed to
    /// `each` before the next is read. The pages are read in one read-only transaction that sees
    /// one snapshot (SQLite's WAL read; PostgreSQL's `REPEATABLE READ`), and at most one page of
    /// decoded records is held at once: what the boot snapshot reads (10,000 decoded records at
    /// once cost tens of megabytes the allocator keeps).
    pub fn for_each_node_record_page<E: From<DbError>>(
        &self,
        page: usize,
        mut each: impl FnMut(Vec<NodeRecord>) -> Result<(), E>,
    ) -> Result<(), E> {
        let read = self.conn.begin_read()?;
        let limit = i64::try_from(page.max(1)).unwrap_or(i64::MAX);
        let mut after = String::new();
        loop {
            let sql =
                format!("SELECT {NODE_COLUMNS} FROM nodes WHERE name > ?1 ORDER BY name LIMIT ?2");
            let records =
                self.records_from(&sql, args![&after, limit], Children::NamesIn(&after))?;
            let Some(last) = records.last() else { break };
            let full = records.len() as i64 == limit;
            after = last.node.name.clone();
            each(records)?;
            if !full {
                break;
            }
        }
        read.commit()?;
        Ok(())
    }

    fn records_where(&self, condition: &str, args: &[Value]) -> Result<Vec<NodeRecord>, DbError> {
        let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE {condition} ORDER BY name");
        self.records_from(&sql, args, Children::All)
    }

    /// The nodes a SELECT of [`NODE_COLUMNS`] gives, with their children.
    pub(super) fn records_from(
        &self,
        sql: &str,
        args: &[Value],
        children: Children<'_>,
    ) -> Result<Vec<NodeRecord>, DbError> {
        let decoded = self.decoded(sql, args, node_from_row)?;
        let ids: Vec<i64> = decoded.iter().map(|(id, _)| *id).collect();
        let mut records: Vec<NodeRecord> = decoded
            .into_iter()
            .map(|(_, node)| NodeRecord {
                node,
                ports: Vec::new(),
                volume_connectors: Vec::new(),
                volume_targets: Vec::new(),
                traits: Vec::new(),
            })
            .collect();
        // One node: its children by indexed lookups. A page: the children of its name range.
        // Many: each child table read once.
        let which = match (records.as_slice(), children) {
            ([], _) => return Ok(records),
            ([one], _) => ChildRows::Node(one.node.uuid.clone()),
            ([.., last], Children::NamesIn(after)) => {
                ChildRows::NameRange(after.to_owned(), last.node.name.clone())
            }
            (_, Children::All) => ChildRows::All,
            (_, Children::Read) => ChildRows::Ids(ids),
        };
        let at: HashMap<String, usize> =
            records.iter().enumerate().map(|(i, r)| (r.node.uuid.clone(), i)).collect();
        attach(&mut records, &at, self.ports_of(&which)?, |r| &mut r.ports);
        attach(&mut records, &at, self.connectors_of(&which)?, |r| &mut r.volume_connectors);
        attach(&mut records, &at, self.targets_of(&which)?, |r| &mut r.volume_targets);
        for (node_uuid, name) in self.node_traits(&which)? {
            if let Some(&i) = at.get(&node_uuid) {
                records[i].traits.push(name);
            }
        }
        let now = i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX);
        for (node_uuid, instance) in self.reservations(now)? {
            if let Some(&i) = at.get(&node_uuid) {
                records[i].node.reservation = Some(instance);
            }
        }
        Ok(records)
    }
}

/// Which children [`Db::records_from`] reads when it reads more than one node.
#[derive(Clone, Copy)]
pub(super) enum Children<'a> {
    /// Every child row.
    All,
    /// Those of the nodes named after this name, up to the page's last.
    NamesIn(&'a str),
    /// Those of the nodes read, by their row ids (a page in any order).
    Read,
}

/// Whose child rows to read.
pub(super) enum ChildRows {
    /// Every one.
    All,
    /// One node's, by its UUID.
    Node(String),
    /// Those of the nodes with these row ids (a page of a list).
    Ids(Vec<i64>),
    /// Those of the nodes named after the first name, up to and including the second.
    NameRange(String, String),
    /// The port with this address (its unique index), of one node when given.
    Address(String, Option<String>),
}

impl ChildRows {
    /// The `WHERE` clause (on `n`, the nodes joined; empty for all) and its arguments.
    pub(super) fn clause(&self) -> (String, Vec<Value>) {
        match self {
            ChildRows::All => (String::new(), Vec::new()),
            ChildRows::Node(uuid) => (" WHERE n.uuid = ?1".into(), vec![Value::from(uuid)]),
            ChildRows::NameRange(after, last) => (
                " WHERE n.name > ?1 AND n.name <= ?2".into(),
                vec![Value::from(after), Value::from(last)],
            ),
            ChildRows::Address(mac, None) => {
                (" WHERE c.address = ?1".into(), vec![Value::from(mac)])
            }
            ChildRows::Address(mac, Some(node)) => (
                " WHERE c.address = ?1 AND n.uuid = ?2".into(),
                vec![Value::from(mac), Value::from(node)],
            ),
            ChildRows::Ids(ids) => {
                let marks: Vec<String> = (1..=ids.len()).map(|i| format!("?{i}")).collect();
                let list = if marks.is_empty() { "NULL".to_owned() } else { marks.join(", ") };
                (format!(" WHERE n.id IN ({list})"), ids.iter().map(Value::from).collect())
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use bootvol_core::config::Config;
    use bootvol_core::inventory::{Format, parse};

    #[test]
    fn pages_give_every_record_once_with_its_children() {
        let config = Config::from_toml("", "test").unwrap();
        let mut db = Db::open_in_memory().unwrap();
        let nodes: Vec<String> = (0..7)
            .map(|i| {
                format!(
                    r#"{{"name": "n{i}", "ports": [{{"address": "52:54:00:00:00:0{i}"}}],
                    "volume_connectors": [{{"type": "iqn", "connector_id": "iqn.2024-01.org.example:n{i}"}}],
                    "volume_targets": [{{"volume_type": "iscsi", "boot_index": 0, "volume_id": "v{i}",
                        "properties": {{"target_iqn": "iqn.2024-01.org.example:v{i}",
                        "target_portal": "192.0.2.5:3260", "target_lun": {i}}}}}]}}"#
                )
            })
            .collect();
        let specs = parse(&format!(r#"{{"nodes": [{}]}}"#, nodes.join(",")), Format::Json, &config)
            .unwrap();
        db.apply_inventory(&specs, false).unwrap();
        let all = db.node_records().unwrap();
        assert_eq!(all.len(), 7);
        for page in [1, 3, 7, 50] {
            let mut seen = Vec::new();
            let mut sizes = Vec::new();
            db.for_each_node_record_page(page, |records| {
                sizes.push(records.len());
                seen.extend(records);
                Ok::<(), DbError>(())
            })
            .unwrap();
            assert_eq!(seen, all, "page size {page}");
            assert!(sizes.iter().all(|&n| n <= page && n > 0), "page size {page}: {sizes:?}");
        }
        // An error from the callback stops the pass and comes back.
        let stopped = db.for_each_node_record_page(2, |_| {
            Err(DbError::Corrupt { table: "nodes", key: "n0".into(), message: "stop".into() })
        });
        assert!(matches!(stopped, Err(DbError::Corrupt { .. })));
    }
}
