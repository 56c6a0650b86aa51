//! One write path per row. The per-row primitives (insert, update and delete of a node, a port,
//! a volume connector or a volume target, and each kind's uniqueness rule) run inside a
//! transaction the caller holds; `apply_inventory` (many rows, one transaction) and the single
//! writes below (one row, one transaction, for the node service) both use them. Values arrive
//! already checked by the `inventory` parsers. Uniqueness conflicts come back as
//! [`WriteError::Conflict`] with the operator's message; nothing is half-written.

use super::engine::{Conn, Tx, Value as SqlValue, args};

use super::rows::node_id;
use super::{Db, DbError};
use bootvol_core::inventory::{ChildSpec, NodeSpec};
use bootvol_core::model::{ChildKind, JsonMap, ProvisionState};

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A unique field is already used (a name, a MAC, a connector, a boot index).
    #[error("{0}")]
    Conflict(String),
    /// The row (or the node it names) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The change breaks a rule between rows (a port group with ports moved to another node).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// The row that already holds a value that must be unique.
#[derive(Debug)]
pub(super) struct Holder {
    pub(super) uuid: String,
    pub(super) node_id: i64,
    pub(super) node_name: String,
}

fn to_json(map: &JsonMap) -> SqlValue {
    SqlValue::Text(serde_json::Value::Object(map.clone()).to_string())
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_owned())
}

// ---------------------------------------------------------------------------------------------
// Nodes

/// The operator's columns of a node, as `?4`.. of [`insert_node`] and [`update_node`]: name,
/// driver, driver_info, properties, instance_info, extra, storage_interface, boot_interface,
/// deploy_interface, instance_uuid, resource_class, then the other interfaces (console,
/// inspect, management, network, power, raid, rescue, vendor).
fn node_values(spec: &NodeSpec) -> [SqlValue; 19] {
    let optional = |v: &Option<String>| v.as_deref().map_or(SqlValue::Null, text);
    let i = &spec.interfaces;
    [
        text(&spec.name),
        text(spec.driver.as_str()),
        to_json(&spec.driver_info),
        to_json(&spec.properties),
        to_json(&spec.instance_info),
        to_json(&spec.extra),
        spec.storage_interface.map_or(SqlValue::Null, |s| text(s.as_str())),
        text(spec.boot_interface.as_str()),
        text(spec.deploy_interface.as_str()),
        optional(&spec.instance_uuid),
        optional(&spec.resource_class),
        optional(&i.console),
        optional(&i.inspect),
        optional(&i.management),
        optional(&i.network),
        optional(&i.power),
        optional(&i.raid),
        optional(&i.rescue),
        optional(&i.vendor),
    ]
}

/// `?1` the UUID, `?2` the provision state, `?3` maintenance, then [`node_values`].
fn node_params(
    uuid: &str,
    provision_state: Option<ProvisionState>,
    spec: &NodeSpec,
) -> Vec<SqlValue> {
    let head = [
        text(uuid),
        provision_state.map_or(SqlValue::Null, |p| text(p.as_str())),
        spec.maintenance.map_or(SqlValue::Null, |m| SqlValue::Int(i64::from(m))),
    ];
    head.into_iter().chain(node_values(spec)).collect()
}

/// Inserts a node row (no children); returns its id.
pub(super) fn insert_node(
    tx: &Tx<'_>,
    uuid: &str,
    spec: &NodeSpec,
    provision_state: ProvisionState,
) -> Result<i64, DbError> {
    let id = tx
        .query_one(
            "INSERT INTO nodes (uuid, provision_state, maintenance, name, driver, driver_info, properties, \
             instance_info, extra, storage_interface, boot_interface, deploy_interface, instance_uuid, \
             resource_class, console_interface, inspect_interface, management_interface, network_interface, \
             power_interface, raid_interface, rescue_interface, vendor_interface, provision_updated_at) \
             VALUES (?1, ?2, COALESCE(?3, 0), ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
             ?17, ?18, ?19, ?20, ?21, ?22, strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')) RETURNING id",
            &node_params(uuid, Some(provision_state), spec),
        )?
        .get(0)?;
    tx.changed("nodes", uuid, "create");
    Ok(id)
}

/// Updates a node's operator columns; `provision_state` and `spec.maintenance` only when given.
/// Returns how many rows changed (0: no such node).
pub(super) fn update_node(
    tx: &Tx<'_>,
    uuid: &str,
    spec: &NodeSpec,
    provision_state: Option<ProvisionState>,
) -> Result<usize, DbError> {
    tx.changed("nodes", uuid, "update");
    tx.execute(
        "UPDATE nodes SET provision_state = COALESCE(?2, provision_state), maintenance = COALESCE(?3, maintenance), \
         name = ?4, driver = ?5, driver_info = ?6, properties = ?7, instance_info = ?8, extra = ?9, \
         storage_interface = ?10, boot_interface = ?11, deploy_interface = ?12, instance_uuid = ?13, \
         resource_class = ?14, console_interface = ?15, inspect_interface = ?16, management_interface = ?17, \
         network_interface = ?18, power_interface = ?19, raid_interface = ?20, rescue_interface = ?21, \
         vendor_interface = ?22, updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
        &node_params(uuid, provision_state, spec),
    )
}

/// The UUID of the node that is named `name`, or whose UUID is `name` (a name must not be
/// mistaken for another node's UUID).
pub(super) fn name_holder(conn: &Conn, name: &str) -> Result<Option<String>, DbError> {
    conn.query_opt("SELECT uuid FROM nodes WHERE name = ?1 OR uuid = ?1", args![name])?
        .map(|r| r.get(0))
        .transpose()
}

// ---------------------------------------------------------------------------------------------
// Ports, volume connectors, volume targets

/// A child's own columns, as `?3`.. of its INSERT and UPDATE (see [`child_statements`]).
fn child_values(spec: &ChildSpec) -> Vec<SqlValue> {
    match spec {
        ChildSpec::Port(p) => vec![
            text(&p.address.to_string()),
            to_json(&p.extra),
            SqlValue::Int(i64::from(p.pxe_enabled)),
            to_json(&p.local_link_connection),
            p.physical_network.as_deref().map_or(SqlValue::Null, text),
        ],
        ChildSpec::Connector(c) => {
            vec![text(c.connector_type.as_str()), text(&c.connector_id), to_json(&c.extra)]
        }
        ChildSpec::Target(t) => vec![
            text(t.volume_type.as_str()),
            SqlValue::Int(i64::from(t.boot_index)),
            text(&t.volume_id),
            to_json(&t.properties.clone().unwrap_or_default()),
            to_json(&t.extra),
        ],
    }
}

/// Each kind's INSERT and UPDATE: `?1` the row's UUID, `?2` its node's id, then
/// [`child_values`].
/// The table a child kind's rows live in (table names are the database's business).
fn table(kind: ChildKind) -> &'static str {
    match kind {
        ChildKind::Port => "ports",
        ChildKind::Connector => "volume_connectors",
        ChildKind::Target => "volume_targets",
    }
}

fn child_statements(kind: ChildKind) -> (&'static str, &'static str) {
    match kind {
        ChildKind::Port => (
            "INSERT INTO ports (uuid, node_id, address, extra, pxe_enabled, local_link_connection, \
             physical_network) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            "UPDATE ports SET node_id = ?2, address = ?3, extra = ?4, pxe_enabled = ?5, \
             local_link_connection = ?6, physical_network = ?7, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
        ),
        ChildKind::Connector => (
            "INSERT INTO volume_connectors (uuid, node_id, type, connector_id, extra) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            "UPDATE volume_connectors SET node_id = ?2, type = ?3, connector_id = ?4, extra = ?5, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
        ),
        ChildKind::Target => (
            "INSERT INTO volume_targets (uuid, node_id, volume_type, boot_index, volume_id, properties, extra) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            "UPDATE volume_targets SET node_id = ?2, volume_type = ?3, boot_index = ?4, volume_id = ?5, \
             properties = ?6, extra = ?7, updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') \
             WHERE uuid = ?1",
        ),
    }
}

fn child_params(uuid: &str, node_id: i64, spec: &ChildSpec) -> Vec<SqlValue> {
    let head = [text(uuid), SqlValue::Int(node_id)];
    head.into_iter().chain(child_values(spec)).collect()
}

/// Inserts a port, connector or target of node `node_id`.
pub(super) fn insert_child(
    tx: &Tx<'_>,
    uuid: &str,
    node_id: i64,
    spec: &ChildSpec,
) -> Result<(), DbError> {
    tx.execute(child_statements(spec.kind()).0, &child_params(uuid, node_id, spec))?;
    tx.changed(table(spec.kind()), uuid, "create");
    node_of_id_changed(tx, node_id)
}

/// Updates a port, connector or target (moving it to node `node_id`); how many rows changed.
pub(super) fn update_child(
    tx: &Tx<'_>,
    uuid: &str,
    node_id: i64,
    spec: &ChildSpec,
) -> Result<usize, DbError> {
    tx.changed(table(spec.kind()), uuid, "update");
    // The node it leaves (when it moves) and the node it is on now both change.
    child_node_changed(tx, spec.kind(), uuid)?;
    let rows = tx.execute(child_statements(spec.kind()).1, &child_params(uuid, node_id, spec))?;
    node_of_id_changed(tx, node_id)?;
    Ok(rows)
}

/// Deletes a port, connector or target; how many rows went.
pub(super) fn delete_child(tx: &Tx<'_>, kind: ChildKind, uuid: &str) -> Result<usize, DbError> {
    tx.changed(table(kind), uuid, "delete");
    child_node_changed(tx, kind, uuid)?;
    tx.execute(&format!("DELETE FROM {} WHERE uuid = ?1", table(kind)), args![uuid])
}

/// Logs a change of the node a child row `uuid` belongs to now (before the row is written):
/// the change log then names, as `nodes` entries, every node whose record a transaction
/// changed, children included, so that a reader re-reads just those nodes (the boot snapshot).
pub(super) fn child_node_changed(tx: &Tx<'_>, kind: ChildKind, uuid: &str) -> Result<(), DbError> {
    let sql = format!(
        "SELECT n.uuid FROM {} c JOIN nodes n ON n.id = c.node_id WHERE c.uuid = ?1",
        table(kind)
    );
    if let Some(row) = tx.query_opt(&sql, args![uuid])? {
        tx.changed("nodes", &row.get::<String>(0)?, "update");
    }
    Ok(())
}

/// Logs a change of node `node_id` (a child of it was written).
fn node_of_id_changed(tx: &Tx<'_>, node_id: i64) -> Result<(), DbError> {
    if let Some(row) = tx.query_opt("SELECT uuid FROM nodes WHERE id = ?1", args![node_id])? {
        tx.changed("nodes", &row.get::<String>(0)?, "update");
    }
    Ok(())
}

/// The row that holds what must be unique about `spec` (on node `node_id`): a port's MAC
/// (unique everywhere), a connector's type and id (unique everywhere), a target's boot index
/// (unique per node).
pub(super) fn holder(
    conn: &Conn,
    spec: &ChildSpec,
    node_id: i64,
) -> Result<Option<Holder>, DbError> {
    let (sql, args) = match spec {
        ChildSpec::Port(p) => (
            "SELECT c.uuid, c.node_id, n.name FROM ports c JOIN nodes n ON n.id = c.node_id \
             WHERE c.address = ?1",
            vec![text(&p.address.to_string())],
        ),
        ChildSpec::Connector(c) => (
            "SELECT c.uuid, c.node_id, n.name FROM volume_connectors c JOIN nodes n ON n.id = c.node_id \
             WHERE c.type = ?1 AND c.connector_id = ?2",
            vec![text(c.connector_type.as_str()), text(&c.connector_id)],
        ),
        ChildSpec::Target(t) => (
            "SELECT c.uuid, c.node_id, n.name FROM volume_targets c JOIN nodes n ON n.id = c.node_id \
             WHERE c.node_id = ?1 AND c.boot_index = ?2",
            vec![SqlValue::Int(node_id), SqlValue::Int(i64::from(t.boot_index))],
        ),
    };
    conn.query_opt(sql, &args)?
        .map(|r| Ok(Holder { uuid: r.get(0)?, node_id: r.get(1)?, node_name: r.get(2)? }))
        .transpose()
}

/// The single writes' message for a taken unique value.
fn conflict_message(spec: &ChildSpec, node_uuid: &str) -> String {
    match spec {
        ChildSpec::Port(p) => format!("A port with MAC address {} already exists.", p.address),
        ChildSpec::Connector(c) => format!(
            "A volume connector with type {} and connector ID {} already exists.",
            c.connector_type, c.connector_id
        ),
        ChildSpec::Target(t) => format!(
            "A volume target with boot index '{}' for node {node_uuid} already exists.",
            t.boot_index
        ),
    }
}

fn exists(conn: &Conn, kind: ChildKind, uuid: &str) -> Result<bool, DbError> {
    let sql = format!("SELECT 1 FROM {} WHERE uuid = ?1", table(kind));
    Ok(conn.query_opt(&sql, args![uuid])?.is_some())
}

// ---------------------------------------------------------------------------------------------
// Single writes, one transaction each

impl Db {
    /// Creates a node (no children) with this UUID in `provision_state`.
    pub fn create_node(
        &self,
        uuid: &str,
        spec: &NodeSpec,
        provision_state: ProvisionState,
    ) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        create_node(&tx, uuid, spec, provision_state)?;
        tx.commit()?;
        Ok(())
    }

    /// Updates a node's operator fields (identity, driver, interfaces, the JSON fields, and
    /// maintenance when the spec gives it); states are the conductor's and are not touched.
    pub fn update_node(&self, uuid: &str, spec: &NodeSpec) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        update_operator_fields(&tx, uuid, spec)?;
        tx.commit()?;
        Ok(())
    }

    /// Creates (`existing` false) or updates a port, connector or target of node `node_uuid`,
    /// refusing a value another row holds (each kind's rule: `holder`).
    pub fn write_child(
        &self,
        uuid: &str,
        node_uuid: &str,
        spec: &ChildSpec,
        existing: bool,
    ) -> Result<(), WriteError> {
        let tx = self.conn.begin()?;
        write_child(&tx, uuid, node_uuid, spec, existing)?;
        tx.commit()?;
        Ok(())
    }

    /// Deletes a port, connector or target by UUID; false when there was none.
    pub fn delete_child(&self, kind: ChildKind, uuid: &str) -> Result<bool, DbError> {
        let tx = self.conn.begin()?;
        let deleted = delete_child(&tx, kind, uuid)? > 0;
        tx.commit()?;
        Ok(deleted)
    }
}

/// [`Db::write_child`] in `tx`; answers the node's id.
pub(super) fn write_child(
    tx: &Tx<'_>,
    uuid: &str,
    node_uuid: &str,
    spec: &ChildSpec,
    existing: bool,
) -> Result<i64, WriteError> {
    let kind = spec.kind();
    let Some(node_id) = node_id(tx, node_uuid)? else {
        return Err(WriteError::NotFound(format!("node {node_uuid} could not be found")));
    };
    if holder(tx, spec, node_id)?.is_some_and(|h| h.uuid != uuid) {
        return Err(WriteError::Conflict(conflict_message(spec, node_uuid)));
    }
    if existing {
        if update_child(tx, uuid, node_id, spec)? == 0 {
            return Err(WriteError::NotFound(format!(
                "{} {uuid} could not be found.",
                kind.title()
            )));
        }
    } else {
        if exists(tx, kind, uuid)? {
            return Err(WriteError::Conflict(format!(
                "A {} with UUID {uuid} already exists.",
                kind.label()
            )));
        }
        insert_child(tx, uuid, node_id, spec)?;
    }
    Ok(node_id)
}

/// Inserts a node (no children) in `tx`, refusing a name, UUID or instance another holds.
pub(super) fn create_node(
    tx: &Tx<'_>,
    uuid: &str,
    spec: &NodeSpec,
    provision_state: ProvisionState,
) -> Result<(), WriteError> {
    if let Some(owner) = name_holder(tx, &spec.name)? {
        return Err(name_taken(spec, &owner));
    }
    if node_id(tx, uuid)?.is_some() {
        return Err(WriteError::Conflict(format!("A node with UUID {uuid} already exists.")));
    }
    instance_free(tx, spec, uuid)?;
    insert_node(tx, uuid, spec, provision_state)?;
    Ok(())
}

/// Updates a node's operator fields in `tx`, refusing a name or instance another holds.
pub(super) fn update_operator_fields(
    tx: &Tx<'_>,
    uuid: &str,
    spec: &NodeSpec,
) -> Result<(), WriteError> {
    if let Some(owner) = name_holder(tx, &spec.name)?.filter(|owner| owner != uuid) {
        return Err(name_taken(spec, &owner));
    }
    instance_free(tx, spec, uuid)?;
    if update_node(tx, uuid, spec, None)? == 0 {
        return Err(WriteError::NotFound(format!("node {uuid} could not be found")));
    }
    Ok(())
}

/// Refuses an `instance_uuid` another node holds (Ironic's `InstanceAssociated`).
pub(super) fn instance_free(
    conn: &Conn,
    spec: &NodeSpec,
    node_uuid: &str,
) -> Result<(), WriteError> {
    let Some(instance) = &spec.instance_uuid else { return Ok(()) };
    let holder: Option<String> = conn
        .query_opt(
            "SELECT uuid FROM nodes WHERE instance_uuid = ?1 AND uuid != ?2",
            args![instance, node_uuid],
        )?
        .map(|r| r.get(0))
        .transpose()?;
    match holder {
        None => Ok(()),
        Some(_) => Err(WriteError::Conflict(format!(
            "Instance {instance} is already associated with a node, it cannot be associated with this other node {node_uuid}"
        ))),
    }
}

impl Db {
    /// Replaces a node's traits with `traits` (already checked); false when there is no such
    /// node.
    pub fn set_traits(&self, node_uuid: &str, traits: &[String]) -> Result<bool, DbError> {
        let tx = self.conn.begin()?;
        let Some(id) = node_id(&tx, node_uuid)? else { return Ok(false) };
        tx.execute("DELETE FROM node_traits WHERE node_id = ?1", args![id])?;
        for name in traits {
            tx.execute(
                "INSERT INTO node_traits (node_id, trait) VALUES (?1, ?2)",
                args![id, name],
            )?;
        }
        tx.execute(
            "UPDATE nodes SET updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE id = ?1",
            args![id],
        )?;
        tx.changed("nodes", node_uuid, "update");
        tx.commit()?;
        Ok(true)
    }

    /// Writes a node's `instance_info` alone (the config drive of a deploy request).
    pub fn set_instance_info(&self, node_uuid: &str, info: &JsonMap) -> Result<(), DbError> {
        self.update_node_row(
            "UPDATE nodes SET instance_info = ?2, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![node_uuid, serde_json::Value::Object(info.clone()).to_string()],
        )?;
        Ok(())
    }

    /// Writes a port's `internal_info` (the flat network interface's VIF record); false when
    /// there is no such port.
    pub fn set_port_internal_info(&self, port_uuid: &str, info: &JsonMap) -> Result<bool, DbError> {
        let tx = self.conn.begin()?;
        let changed = tx.execute(
            "UPDATE ports SET internal_info = ?2, \
             updated_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE uuid = ?1",
            args![port_uuid, serde_json::Value::Object(info.clone()).to_string()],
        )?;
        if changed > 0 {
            tx.changed("ports", port_uuid, "update");
            child_node_changed(&tx, ChildKind::Port, port_uuid)?;
        }
        tx.commit()?;
        Ok(changed > 0)
    }
}

fn name_taken(spec: &NodeSpec, owner: &str) -> WriteError {
    WriteError::Conflict(format!("A node with name {} already exists ({owner}).", spec.name))
}
