//! Applying an inventory: create or update nodes with their ports, connectors and targets in
//! one transaction, all or nothing. Children are matched by their natural keys (port address,
//! connector type and id, target boot_index and volume), so re-applying a file changes nothing
//! and keeps UUIDs.

use std::collections::HashSet;

use rusqlite::{OptionalExtension, Transaction, params};

use super::{Db, DbError};
use crate::inventory::{NodeSpec, TargetSpec};
use crate::model::{JsonMap, NodeRecord, ProvisionState, new_uuid};
use crate::secrets::restore_masked;

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

impl From<rusqlite::Error> for ApplyError {
    fn from(e: rusqlite::Error) -> Self {
        ApplyError::Db(DbError::Sqlite(e))
    }
}

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')";

impl Db {
    /// Applies validated node specs. With `prune`, nodes absent from `specs` are deleted.
    pub fn apply_inventory(
        &mut self,
        specs: &[NodeSpec],
        prune: bool,
    ) -> Result<ApplyReport, ApplyError> {
        let existing: Vec<NodeRecord> = self.node_records()?;
        let tx = self.conn.transaction()?;
        let mut report = ApplyReport::default();
        let mut errors = Vec::new();
        if prune {
            let keep: HashSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            for record in existing.iter().filter(|r| !keep.contains(r.node.name.as_str())) {
                // Unlike Ironic, a node is never deleted with volumes still attached in Cinder.
                let live: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM volume_attachments WHERE node_uuid = ?1 \
                     AND (state IN ('attaching', 'attached', 'detaching') OR (state = 'failed' AND step != 'undone'))",
                    params![record.node.uuid],
                    |r| r.get(0),
                )?;
                if live > 0 {
                    errors.push(format!(
                        "node {}: has volumes attached; detach them (bootvol volumes detach {}) before pruning it",
                        record.node.name, record.node.name
                    ));
                    continue;
                }
                tx.execute(
                    "DELETE FROM volume_attachments WHERE node_uuid = ?1",
                    params![record.node.uuid],
                )?;
                tx.execute("DELETE FROM nodes WHERE uuid = ?1", params![record.node.uuid])?;
                report.deleted.push(record.node.name.clone());
            }
        }
        let mut node_ids = Vec::new();
        for spec in specs {
            let stored = find(&existing, spec);
            match upsert_node(&tx, spec, stored) {
                Ok((id, changed)) => {
                    node_ids.push(id);
                    match (stored, changed) {
                        (None, _) => report.created.push(spec.name.clone()),
                        (Some(_), true) => report.updated.push(spec.name.clone()),
                        (Some(_), false) => report.unchanged.push(spec.name.clone()),
                    }
                }
                Err(e) => errors.push(format!("node {}: {e}", spec.name)),
            }
        }
        if !errors.is_empty() {
            return Err(ApplyError::Conflicts(errors));
        }
        // Remove children the file no longer lists first, so a MAC or IQN may move between
        // two nodes of the same file.
        for (spec, &id) in specs.iter().zip(&node_ids) {
            remove_unlisted_children(&tx, spec, id)?;
        }
        for (spec, &id) in specs.iter().zip(&node_ids) {
            let stored = find(&existing, spec);
            match upsert_children(&tx, spec, id, stored) {
                Ok(true) if stored.is_some() && !report.updated.contains(&spec.name) => {
                    report.unchanged.retain(|n| n != &spec.name);
                    report.updated.push(spec.name.clone());
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("node {}: {e}", spec.name)),
            }
        }
        if !errors.is_empty() {
            return Err(ApplyError::Conflicts(errors));
        }
        tx.commit()?;
        Ok(report)
    }
}

fn find<'a>(existing: &'a [NodeRecord], spec: &NodeSpec) -> Option<&'a NodeRecord> {
    match &spec.uuid {
        Some(uuid) => existing.iter().find(|r| &r.node.uuid == uuid),
        None => existing.iter().find(|r| r.node.name == spec.name),
    }
}

fn to_json(map: &JsonMap) -> String {
    serde_json::Value::Object(map.clone()).to_string()
}

/// Inserts or updates the node row; returns its id and whether anything changed.
fn upsert_node(
    tx: &Transaction<'_>,
    spec: &NodeSpec,
    stored: Option<&NodeRecord>,
) -> Result<(i64, bool), String> {
    let mut driver_info = spec.driver_info.clone();
    let mut instance_info = spec.instance_info.clone();
    let stored_node = stored.map(|r| &r.node);
    restore_masked(&mut driver_info, stored_node.map(|n| &n.driver_info)).map_err(|path| {
        format!("driver_info.{path}: masked (******) but no secret is stored; give the real value")
    })?;
    restore_masked(&mut instance_info, stored_node.map(|n| &n.instance_info)).map_err(|path| {
        format!(
            "instance_info.{path}: masked (******) but no secret is stored; give the real value"
        )
    })?;
    if let Some(owner) = tx
        .query_row("SELECT uuid FROM nodes WHERE name = ?1", params![spec.name], |r| {
            r.get::<_, String>(0)
        })
        .optional()
        .map_err(|e| e.to_string())?
        && stored_node.is_none_or(|n| n.uuid != owner)
    {
        return Err(format!("name: already used by node {owner}"));
    }
    let Some(node) = stored_node else {
        let uuid = spec.uuid.clone().unwrap_or_else(new_uuid);
        tx.execute(
            "INSERT INTO nodes (uuid, name, driver, driver_info, properties, instance_info, extra, storage_interface, \
             boot_interface, deploy_interface, provision_state, maintenance) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                uuid,
                spec.name,
                spec.driver.as_str(),
                to_json(&driver_info),
                to_json(&spec.properties),
                to_json(&instance_info),
                to_json(&spec.extra),
                spec.storage_interface.map(|s| s.as_str()),
                spec.boot_interface.as_str(),
                spec.deploy_interface.as_str(),
                spec.provision_state.unwrap_or(ProvisionState::Available).as_str(),
                spec.maintenance.unwrap_or(false),
            ],
        )
        .map_err(|e| e.to_string())?;
        return Ok((tx.last_insert_rowid(), true));
    };
    let storage_interface = spec.storage_interface.or(node.storage_interface);
    let provision_state = spec.provision_state.unwrap_or(node.provision_state);
    let maintenance = spec.maintenance.unwrap_or(node.maintenance);
    let changed = node.name != spec.name
        || node.driver != spec.driver
        || node.driver_info != driver_info
        || node.properties != spec.properties
        || node.instance_info != instance_info
        || node.extra != spec.extra
        || node.storage_interface != storage_interface
        || node.boot_interface != spec.boot_interface
        || node.deploy_interface != spec.deploy_interface
        || node.provision_state != provision_state
        || node.maintenance != maintenance;
    let id: i64 = tx
        .query_row("SELECT id FROM nodes WHERE uuid = ?1", params![node.uuid], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if changed {
        tx.execute(
            &format!(
                "UPDATE nodes SET name = ?2, driver = ?3, driver_info = ?4, properties = ?5, instance_info = ?6, \
                 extra = ?7, storage_interface = ?8, boot_interface = ?9, deploy_interface = ?10, \
                 provision_state = ?11, maintenance = ?12, updated_at = {NOW} WHERE id = ?1"
            ),
            params![
                id,
                spec.name,
                spec.driver.as_str(),
                to_json(&driver_info),
                to_json(&spec.properties),
                to_json(&instance_info),
                to_json(&spec.extra),
                storage_interface.map(|s| s.as_str()),
                spec.boot_interface.as_str(),
                spec.deploy_interface.as_str(),
                provision_state.as_str(),
                maintenance,
            ],
        )
        .map_err(|e| e.to_string())?;
    }
    Ok((id, changed))
}

fn remove_unlisted_children(
    tx: &Transaction<'_>,
    spec: &NodeSpec,
    node_id: i64,
) -> Result<(), rusqlite::Error> {
    let macs: Vec<String> = spec.ports.iter().map(|p| p.address.to_string()).collect();
    let mut statement = tx.prepare("SELECT id, address FROM ports WHERE node_id = ?1")?;
    let ports: Vec<(i64, String)> = statement
        .query_map(params![node_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (id, address) in ports.into_iter().filter(|(_, a)| !macs.contains(a)) {
        let _ = address;
        tx.execute("DELETE FROM ports WHERE id = ?1", params![id])?;
    }
    let listed: Vec<(String, String)> = spec
        .volume_connectors
        .iter()
        .map(|c| (c.connector_type.to_string(), c.connector_id.clone()))
        .collect();
    let mut statement =
        tx.prepare("SELECT id, type, connector_id FROM volume_connectors WHERE node_id = ?1")?;
    let connectors: Vec<(i64, String, String)> = statement
        .query_map(params![node_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    for (id, kind, connector_id) in connectors {
        if !listed.contains(&(kind, connector_id)) {
            tx.execute("DELETE FROM volume_connectors WHERE id = ?1", params![id])?;
        }
    }
    let mut statement = tx.prepare(
        "SELECT id, boot_index, volume_id, volume_type FROM volume_targets WHERE node_id = ?1",
    )?;
    let targets: Vec<(i64, i64, String, String)> = statement
        .query_map(params![node_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_, _>>()?;
    for (id, boot_index, volume_id, volume_type) in targets {
        let kept = spec
            .volume_targets
            .iter()
            .any(|t| same_target(t, boot_index, &volume_id, &volume_type));
        if !kept {
            tx.execute("DELETE FROM volume_targets WHERE id = ?1", params![id])?;
        }
    }
    Ok(())
}

fn same_target(spec: &TargetSpec, boot_index: i64, volume_id: &str, volume_type: &str) -> bool {
    i64::from(spec.boot_index) == boot_index
        && spec.volume_id == volume_id
        && spec.volume_type.as_str() == volume_type
}

/// Inserts or updates ports, connectors and targets; returns whether anything changed.
fn upsert_children(
    tx: &Transaction<'_>,
    spec: &NodeSpec,
    node_id: i64,
    stored: Option<&NodeRecord>,
) -> Result<bool, String> {
    let sql_error = |e: rusqlite::Error| e.to_string();
    let owner_name =
        |sql: &str, args: &[&dyn rusqlite::ToSql]| -> Result<Option<(i64, String)>, String> {
            tx.query_row(sql, args, |r| Ok((r.get(0)?, r.get(1)?))).optional().map_err(sql_error)
        };
    let mut changed = false;
    for (i, port) in spec.ports.iter().enumerate() {
        let address = port.address.to_string();
        let owner = owner_name(
            "SELECT p.node_id, n.name FROM ports p JOIN nodes n ON n.id = p.node_id WHERE p.address = ?1",
            &[&address],
        )?;
        match owner {
            Some((owner_id, name)) if owner_id != node_id => {
                return Err(format!(
                    "ports[{i}].address: {address} already belongs to node {name}"
                ));
            }
            Some(_) => {
                let before =
                    stored.and_then(|r| r.ports.iter().find(|p| p.address == port.address));
                if before.is_some_and(|p| p.extra != port.extra) {
                    tx.execute(
                        &format!(
                            "UPDATE ports SET extra = ?2, updated_at = {NOW} WHERE address = ?1"
                        ),
                        params![address, to_json(&port.extra)],
                    )
                    .map_err(sql_error)?;
                    changed = true;
                }
            }
            None => {
                tx.execute(
                    "INSERT INTO ports (uuid, node_id, address, extra) VALUES (?1, ?2, ?3, ?4)",
                    params![
                        port.uuid.clone().unwrap_or_else(new_uuid),
                        node_id,
                        address,
                        to_json(&port.extra)
                    ],
                )
                .map_err(|e| format!("ports[{i}]: {e}"))?;
                changed = true;
            }
        }
    }
    for (i, c) in spec.volume_connectors.iter().enumerate() {
        let owner = owner_name(
            "SELECT c.node_id, n.name FROM volume_connectors c JOIN nodes n ON n.id = c.node_id \
             WHERE c.type = ?1 AND c.connector_id = ?2",
            &[&c.connector_type.as_str(), &c.connector_id],
        )?;
        match owner {
            Some((owner_id, name)) if owner_id != node_id => {
                return Err(format!(
                    "volume_connectors[{i}]: {} {} already belongs to node {name}",
                    c.connector_type, c.connector_id
                ));
            }
            Some(_) => {
                let before = stored.and_then(|r| {
                    r.volume_connectors.iter().find(|s| {
                        s.connector_type == c.connector_type && s.connector_id == c.connector_id
                    })
                });
                if before.is_some_and(|s| s.extra != c.extra) {
                    tx.execute(
                        &format!(
                            "UPDATE volume_connectors SET extra = ?3, updated_at = {NOW} WHERE type = ?1 AND connector_id = ?2"
                        ),
                        params![c.connector_type.as_str(), c.connector_id, to_json(&c.extra)],
                    )
                    .map_err(sql_error)?;
                    changed = true;
                }
            }
            None => {
                tx.execute(
                    "INSERT INTO volume_connectors (uuid, node_id, type, connector_id, extra) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        c.uuid.clone().unwrap_or_else(new_uuid),
                        node_id,
                        c.connector_type.as_str(),
                        c.connector_id,
                        to_json(&c.extra)
                    ],
                )
                .map_err(|e| format!("volume_connectors[{i}]: {e}"))?;
                changed = true;
            }
        }
    }
    for (i, t) in spec.volume_targets.iter().enumerate() {
        changed |= upsert_target(tx, t, node_id, stored)
            .map_err(|e| format!("volume_targets[{i}].{e}"))?;
    }
    Ok(changed)
}

fn upsert_target(
    tx: &Transaction<'_>,
    t: &TargetSpec,
    node_id: i64,
    stored: Option<&NodeRecord>,
) -> Result<bool, String> {
    let before = stored.and_then(|r| {
        r.volume_targets
            .iter()
            .find(|s| same_target(t, i64::from(s.boot_index), &s.volume_id, s.volume_type.as_str()))
    });
    let mut properties = match (&t.properties, before) {
        (Some(p), _) => p.clone(),
        (None, Some(b)) => b.properties.clone(),
        (None, None) => JsonMap::new(),
    };
    restore_masked(&mut properties, before.map(|b| &b.properties)).map_err(|path| {
        format!("properties.{path}: masked (******) but no secret is stored; give the real value")
    })?;
    match before {
        Some(b) if b.properties == properties && b.extra == t.extra => Ok(false),
        Some(b) => {
            tx.execute(
                &format!("UPDATE volume_targets SET properties = ?2, extra = ?3, updated_at = {NOW} WHERE uuid = ?1"),
                params![b.uuid, to_json(&properties), to_json(&t.extra)],
            )
            .map_err(|e| e.to_string())?;
            Ok(true)
        }
        None => {
            tx.execute(
                "INSERT INTO volume_targets (uuid, node_id, volume_type, boot_index, volume_id, properties, extra) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    t.uuid.clone().unwrap_or_else(new_uuid),
                    node_id,
                    t.volume_type.as_str(),
                    t.boot_index,
                    t.volume_id,
                    to_json(&properties),
                    to_json(&t.extra)
                ],
            )
            .map_err(|e| e.to_string())?;
            Ok(true)
        }
    }
}
