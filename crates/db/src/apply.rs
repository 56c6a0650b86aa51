//! Applying an inventory: create or update nodes with their ports, connectors and targets in
//! one transaction, all or nothing. Children are matched by their natural keys (port address,
//! connector type and id, target boot_index and volume), so re-applying a file changes nothing
//! and keeps UUIDs.

use std::collections::{HashMap, HashSet};

use super::engine::{Tx, args};

use super::rows::node_id;
use super::writes::{
    delete_child, holder, insert_child, insert_node, name_holder, update_child, update_node,
};
use super::{Db, DbError};
use bootvol_core::inventory::{ChildSpec, NodeSpec, TargetSpec};
use bootvol_core::model::{ChildKind, NodeRecord, ProvisionState, VolumeTarget, new_uuid};

/// What an apply changed, by node name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
    pub deleted: Vec<String>,
}

/// Why an apply changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Conflicts with what is stored, one line per node and field.
    #[error("{}", .0.join("\n"))]
    Conflicts(Vec<String>),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl Db {
    /// Applies validated node specs. With `prune`, nodes absent from `specs` are deleted.
    pub fn apply_inventory(
        &mut self,
        specs: &[NodeSpec],
        prune: bool,
    ) -> Result<ApplyReport, ApplyError> {
        let records: Vec<NodeRecord> = self.node_records()?;
        let existing = Stored::index(&records);
        let tx = self.conn.begin()?;
        let mut report = ApplyReport::default();
        let mut errors = Vec::new();
        if prune {
            prune_unlisted(&tx, &records, specs, &mut report, &mut errors)?;
        }
        let (node_ids, mut outcomes) = upsert_nodes(&tx, &existing, specs, &mut errors);
        if !errors.is_empty() {
            return Err(ApplyError::Conflicts(errors));
        }
        // Remove children the file no longer lists first, so a MAC or IQN may move between
        // two nodes of the same file.
        for spec in specs {
            remove_unlisted_children(&tx, spec, existing.find(spec))?;
        }
        upsert_all_children(&tx, &existing, specs, &node_ids, &mut outcomes, &mut errors);
        if !errors.is_empty() {
            return Err(ApplyError::Conflicts(errors));
        }
        tx.commit()?;
        for (spec, outcome) in specs.iter().zip(outcomes) {
            let list = match outcome {
                Outcome::Created => &mut report.created,
                Outcome::Updated => &mut report.updated,
                Outcome::Unchanged => &mut report.unchanged,
            };
            list.push(spec.name.clone());
        }
        Ok(report)
    }
}

/// Deletes the stored nodes `specs` does not name, except those with volumes still attached in
/// Cinder (an error each).
fn prune_unlisted(
    tx: &Tx<'_>,
    existing: &[NodeRecord],
    specs: &[NodeSpec],
    report: &mut ApplyReport,
    errors: &mut Vec<String>,
) -> Result<(), ApplyError> {
    let keep: HashSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    for record in existing.iter().filter(|r| !keep.contains(r.node.name.as_str())) {
        // Unlike Ironic, a node is never deleted with volumes still attached in Cinder.
        let live: i64 = tx
            .query_one(
                "SELECT COUNT(*) FROM volume_attachments WHERE node_uuid = ?1 \
                 AND (state IN ('attaching', 'attached', 'detaching') OR (state = 'failed' AND step != 'undone'))",
                args![&record.node.uuid],
            )?
            .get(0)?;
        if live > 0 {
            errors.push(format!(
                "node {}: has volumes attached; detach them (bootvol volumes detach {}) before pruning it",
                record.node.name, record.node.name
            ));
            continue;
        }
        tx.execute(
            "DELETE FROM volume_attachments WHERE node_uuid = ?1",
            args![&record.node.uuid],
        )?;
        tx.execute("DELETE FROM nodes WHERE uuid = ?1", args![&record.node.uuid])?;
        tx.changed("nodes", &record.node.uuid, "delete");
        report.deleted.push(record.node.name.clone());
    }
    Ok(())
}

/// The stored nodes, found by UUID or by name in constant time (an apply looks each spec's
/// node up three times: a scan each would make an apply quadratic in the node count).
struct Stored<'a> {
    by_uuid: HashMap<&'a str, &'a NodeRecord>,
    by_name: HashMap<&'a str, &'a NodeRecord>,
}

impl<'a> Stored<'a> {
    fn index(records: &'a [NodeRecord]) -> Stored<'a> {
        Stored {
            by_uuid: records.iter().map(|r| (r.node.uuid.as_str(), r)).collect(),
            by_name: records.iter().map(|r| (r.node.name.as_str(), r)).collect(),
        }
    }

    /// The stored node a spec names: by its UUID when it gives one, else by its name.
    fn find(&self, spec: &NodeSpec) -> Option<&'a NodeRecord> {
        match &spec.uuid {
            Some(uuid) => self.by_uuid.get(uuid.as_str()).copied(),
            None => self.by_name.get(spec.name.as_str()).copied(),
        }
    }
}

/// What an apply did to one spec's node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Created,
    Updated,
    Unchanged,
}

/// Inserts or updates each spec's node row (or records an error); returns the ids of the
/// rows and what was done to each, in `specs` order (complete when no error).
fn upsert_nodes(
    tx: &Tx<'_>,
    existing: &Stored<'_>,
    specs: &[NodeSpec],
    errors: &mut Vec<String>,
) -> (Vec<i64>, Vec<Outcome>) {
    let (mut node_ids, mut outcomes) = (Vec::new(), Vec::new());
    for spec in specs {
        let stored = existing.find(spec);
        match upsert_node(tx, spec, stored) {
            Ok((id, changed)) => {
                node_ids.push(id);
                outcomes.push(match (stored, changed) {
                    (None, _) => Outcome::Created,
                    (Some(_), true) => Outcome::Updated,
                    (Some(_), false) => Outcome::Unchanged,
                });
            }
            Err(e) => errors.push(format!("node {}: {e}", spec.name)),
        }
    }
    (node_ids, outcomes)
}

/// Inserts or updates each node's ports, connectors and targets; a stored node whose children
/// changed is reported updated rather than unchanged.
fn upsert_all_children(
    tx: &Tx<'_>,
    existing: &Stored<'_>,
    specs: &[NodeSpec],
    node_ids: &[i64],
    outcomes: &mut [Outcome],
    errors: &mut Vec<String>,
) {
    for ((spec, &id), outcome) in specs.iter().zip(node_ids).zip(outcomes) {
        match upsert_children(tx, spec, id, existing.find(spec)) {
            Ok(true) if *outcome == Outcome::Unchanged => *outcome = Outcome::Updated,
            Ok(_) => {}
            Err(e) => errors.push(format!("node {}: {e}", spec.name)),
        }
    }
}

/// Inserts or updates the node row (masked secrets keep the stored ones); returns its id and
/// whether anything changed.
fn upsert_node(
    tx: &Tx<'_>,
    spec: &NodeSpec,
    stored: Option<&NodeRecord>,
) -> Result<(i64, bool), String> {
    let sql_error = |e: DbError| e.to_string();
    let mut spec = NodeSpec {
        ports: Vec::new(),
        volume_connectors: Vec::new(),
        volume_targets: Vec::new(),
        ..spec.clone()
    };
    spec.restore_secrets(stored.map(|r| &r.node))?;
    if let Some(owner) = name_holder(tx, &spec.name).map_err(sql_error)?
        && stored.is_none_or(|r| r.node.uuid != owner)
    {
        return Err(format!("name: already used by node {owner}"));
    }
    let Some(record) = stored else {
        let uuid = spec.uuid.clone().unwrap_or_else(new_uuid);
        let initial = spec.provision_state.unwrap_or(ProvisionState::Available);
        return Ok((insert_node(tx, &uuid, &spec, initial).map_err(sql_error)?, true));
    };
    let node = &record.node;
    spec.storage_interface = spec.storage_interface.or(node.storage_interface);
    // Fields a file does not give keep what the API set.
    spec.instance_uuid = spec.instance_uuid.take().or_else(|| node.instance_uuid.clone());
    spec.resource_class = spec.resource_class.take().or_else(|| node.resource_class.clone());
    for kind in bootvol_core::model::hardware::Interfaces::KINDS {
        if spec.interfaces.get(*kind).is_none() {
            spec.interfaces.set(*kind, node.interfaces.get(*kind).map(str::to_owned));
        }
    }
    spec.maintenance = Some(spec.maintenance.unwrap_or(node.maintenance));
    spec.provision_state = Some(spec.provision_state.unwrap_or(node.provision_state));
    let changed = spec.differs_from(node);
    let id = node_id(tx, &node.uuid)
        .map_err(sql_error)?
        .ok_or_else(|| format!("node {} vanished during the apply", node.uuid))?;
    if changed {
        update_node(tx, &node.uuid, &spec, spec.provision_state).map_err(sql_error)?;
    }
    Ok((id, changed))
}

/// Deletes the stored children the spec no longer lists (matched by their natural keys).
fn remove_unlisted_children(
    tx: &Tx<'_>,
    spec: &NodeSpec,
    stored: Option<&NodeRecord>,
) -> Result<(), DbError> {
    let Some(record) = stored else { return Ok(()) };
    let ports = record
        .ports
        .iter()
        .filter(|p| !spec.ports.iter().any(|s| s.address == p.address))
        .map(|p| (ChildKind::Port, &p.uuid));
    let connectors = record
        .volume_connectors
        .iter()
        .filter(|c| {
            !spec
                .volume_connectors
                .iter()
                .any(|s| s.connector_type == c.connector_type && s.connector_id == c.connector_id)
        })
        .map(|c| (ChildKind::Connector, &c.uuid));
    let targets = record
        .volume_targets
        .iter()
        .filter(|t| !spec.volume_targets.iter().any(|s| same_target(s, t)))
        .map(|t| (ChildKind::Target, &t.uuid));
    for (kind, uuid) in ports.chain(connectors).chain(targets) {
        delete_child(tx, kind, uuid)?;
    }
    Ok(())
}

fn same_target(spec: &TargetSpec, stored: &VolumeTarget) -> bool {
    spec.boot_index == stored.boot_index
        && spec.volume_id == stored.volume_id
        && spec.volume_type == stored.volume_type
}

/// Inserts or updates ports, connectors and targets; returns whether anything changed.
fn upsert_children(
    tx: &Tx<'_>,
    spec: &NodeSpec,
    node_id: i64,
    stored: Option<&NodeRecord>,
) -> Result<bool, String> {
    let children = labelled("ports", &spec.ports, ChildSpec::Port)
        .chain(labelled("volume_connectors", &spec.volume_connectors, ChildSpec::Connector))
        .chain(labelled("volume_targets", &spec.volume_targets, ChildSpec::Target));
    let mut changed = false;
    for (label, child) in children {
        changed |= upsert_child(tx, child, node_id, stored).map_err(|e| format!("{label}{e}"))?;
    }
    Ok(changed)
}

/// A spec's children of one kind, each with its place in the file (`ports[0]`).
fn labelled<'a, T: Clone>(
    what: &'a str,
    items: &'a [T],
    wrap: fn(T) -> ChildSpec,
) -> impl Iterator<Item = (String, ChildSpec)> + 'a {
    items.iter().enumerate().map(move |(i, item)| (format!("{what}[{i}]"), wrap(item.clone())))
}

/// Inserts or updates one child, matched by the row that holds its unique value; an error
/// starts with the field it is about (`.address: ...`).
fn upsert_child(
    tx: &Tx<'_>,
    mut child: ChildSpec,
    node_id: i64,
    stored: Option<&NodeRecord>,
) -> Result<bool, String> {
    if let ChildSpec::Target(t) = &mut child {
        // No `properties` keeps the stored connection info (a Cinder attach writes it).
        let before = stored.and_then(|r| r.volume_targets.iter().find(|s| same_target(t, s)));
        let properties = t.properties.take().or_else(|| before.map(|b| b.properties.clone()));
        t.properties = Some(properties.unwrap_or_default());
        t.restore_secrets(before).map_err(|e| format!(".{e}"))?;
    }
    let sql_error = |e: DbError| format!(": {e}");
    match holder(tx, &child, node_id).map_err(sql_error)? {
        Some(h) if h.node_id != node_id => Err(match &child {
            ChildSpec::Port(p) => {
                format!(".address: {} already belongs to node {}", p.address, h.node_name)
            }
            ChildSpec::Connector(c) => format!(
                ": {} {} already belongs to node {}",
                c.connector_type, c.connector_id, h.node_name
            ),
            ChildSpec::Target(t) => {
                format!(".boot_index: {} already belongs to node {}", t.boot_index, h.node_name)
            }
        }),
        Some(h) if stored.is_some_and(|r| unchanged(&child, r, &h.uuid)) => Ok(false),
        Some(h) => {
            update_child(tx, &h.uuid, node_id, &child).map_err(sql_error)?;
            Ok(true)
        }
        None => {
            let uuid = match &child {
                ChildSpec::Port(p) => p.uuid.clone(),
                ChildSpec::Connector(c) => c.uuid.clone(),
                ChildSpec::Target(t) => t.uuid.clone(),
            };
            insert_child(tx, &uuid.unwrap_or_else(new_uuid), node_id, &child).map_err(sql_error)?;
            Ok(true)
        }
    }
}

/// Whether the stored child `uuid` of `record` already is what `child` says.
fn unchanged(child: &ChildSpec, record: &NodeRecord, uuid: &str) -> bool {
    record.child(child.kind(), uuid).is_some_and(|stored| child.matches(&stored))
}
