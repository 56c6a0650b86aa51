//! The node service: the one typed core between the front ends (the REST API, the admin page)
//! and `db` for everything an operator writes about nodes.
//!
//! It owns create, update and delete of nodes, ports, volume connectors, volume targets,
//! chassis (`chassis.rs`) and port groups (`portgroups.rs`);
//! Ironic's edit rules (a deployed node's port addresses change only in maintenance; its
//! volume connectors and targets only while it is powered off, and never while an action
//! holds it; a node another action holds is not edited); masked-secret restoration (`******`
//! sent back keeps the stored secret); uniqueness (through `db`'s writes); an event for every
//! create, update and delete; and maintenance set/unset. Both front ends call the same
//! functions, so the admin page cannot write anything the API would refuse.
//!
//! It takes specs the `inventory` parsers checked and answers [`NodeError`]s, never HTTP
//! statuses. It knows no HTTP, no Ironic JSON shapes, no HTML and no SQL: it reaches the
//! database through `SharedDb::run` and `Db`'s domain methods, whose signatures carry no
//! `rusqlite` types. Node deletion goes through the conductor (it takes the node's lock).

mod chassis;
mod ironic;
mod portgroups;
mod rules;

use serde_json::json;

use crate::conductor::{Action, Conductor, ConductorError, locked_message};
use crate::probe::NodeProbe;
use bootvol_core::inventory::{ChildSpec, NodeSpec};
use bootvol_core::model::records::NodeFilter;
pub use bootvol_core::model::records::{AttachmentRecord, Event, EventFilter};
pub use bootvol_core::model::sync::SyncStatus;
use bootvol_core::model::{
    Child, ChildKind, MacAddr, NodeRecord, Port, ProvisionState, Stamped, StorageInterfaceName,
    VolumeConnector, VolumeTarget,
};
use bootvol_core::probe::Report;
use bootvol_db::SharedDb;
use bootvol_db::{DbError, WriteError};

/// Why the node service did not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// The node or child named does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A value, or the change it asks for, is refused (the message names the field or rule).
    #[error("{0}")]
    Invalid(String),
    /// A unique value is taken, or the node's state forbids the change.
    #[error("{0}")]
    Conflict(String),
    /// Another action holds the node.
    #[error("{0}")]
    Locked(String),
    /// The database failed.
    #[error("database: {0}")]
    Database(String),
    /// The database cannot be reached (PostgreSQL down or the connection lost): boots go on
    /// from the snapshot, writes wait for it.
    #[error("database: {0}")]
    Unavailable(String),
}

impl From<DbError> for NodeError {
    fn from(e: DbError) -> Self {
        tracing::error!(error = %e, "node service database error");
        if e.is_unavailable() {
            return NodeError::Unavailable(e.to_string());
        }
        NodeError::Database(e.to_string())
    }
}

impl From<WriteError> for NodeError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Conflict(m) => NodeError::Conflict(m),
            WriteError::NotFound(m) | WriteError::Invalid(m) => NodeError::Invalid(m),
            WriteError::Db(e) => e.into(),
        }
    }
}

impl From<ConductorError> for NodeError {
    fn from(e: ConductorError) -> Self {
        match e {
            ConductorError::NotFound(n) => {
                NodeError::NotFound(format!("Node {n} could not be found."))
            }
            ConductorError::Locked(l) => NodeError::Locked(locked_message(&l)),
            ConductorError::Refused(m) => NodeError::Conflict(m),
            ConductorError::Inadmissible(r) => NodeError::Conflict(r.to_string()),
            ConductorError::Failed(m) => NodeError::Invalid(m),
            ConductorError::Db(e) => e.into(),
        }
    }
}

/// The node service over the conductor's database.
#[derive(Debug, Clone)]
pub struct NodeService {
    conductor: Conductor,
}

impl NodeService {
    pub fn new(conductor: Conductor) -> NodeService {
        NodeService { conductor }
    }

    /// The conductor, for actions and validation.
    pub fn conductor(&self) -> &Conductor {
        &self.conductor
    }

    /// The storage interface of nodes that record none.
    pub fn default_storage(&self) -> StorageInterfaceName {
        self.conductor.default_storage()
    }

    fn db(&self) -> &SharedDb {
        self.conductor.db()
    }

    // -----------------------------------------------------------------------------------------
    // Reads

    /// The node with this name or UUID.
    pub async fn node(&self, key: &str) -> Result<NodeRecord, NodeError> {
        let owned = key.to_owned();
        self.db()
            .run(move |db| db.node_record(&owned))
            .await?
            .ok_or_else(|| NodeError::NotFound(format!("Node {key} could not be found.")))
    }

    /// The node's last probe of its boot target, if it was ever probed.
    pub async fn probe_result(&self, node_uuid: &str) -> Result<Option<Report>, NodeError> {
        let uuid = node_uuid.to_owned();
        Ok(self.db().run(move |db| db.probe_result(&uuid)).await?)
    }

    /// Every node's last probe with the node's name, by name.
    pub async fn probe_results(&self) -> Result<Vec<(String, Report)>, NodeError> {
        Ok(self.db().run(|db| db.probe_results()).await?)
    }

    /// Probes the node's boot target now (a powered-on node only when `live`) and records the
    /// report as its last (`crate::probe`).
    pub async fn probe(&self, key: &str, live: bool) -> Result<NodeProbe, NodeError> {
        let mut probes =
            crate::probe::run(&self.conductor, crate::probe::Selection::Node(key.into()), live)
                .await?;
        probes.pop().ok_or_else(|| NodeError::NotFound(format!("Node {key} could not be found.")))
    }

    /// Every node, by name.
    pub async fn nodes(&self) -> Result<Vec<NodeRecord>, NodeError> {
        Ok(self.db().run(|db| db.node_records()).await?)
    }

    /// Whether the node list can be sorted by `field` in the database (a keyset page, see
    /// [`NodeService::node_page`]); other fields are sorted over every node.
    pub fn sorts_by_index(field: &str) -> bool {
        bootvol_db::sortable(field).is_some()
    }

    /// One page of the node list: the nodes `filter` keeps, by `sort_key` (one that
    /// [`NodeService::sorts_by_index`]) then UUID, those after node `marker`, at most `limit`.
    /// An unknown marker is refused as Ironic refuses it.
    pub async fn node_page(
        &self,
        filter: NodeFilter,
        sort_key: String,
        descending: bool,
        marker: Option<String>,
        limit: usize,
    ) -> Result<Vec<NodeRecord>, NodeError> {
        let read = self.db().run(move |db| {
            let page = bootvol_db::NodePage {
                filter: &filter,
                sort_key: &sort_key,
                descending,
                marker: marker.as_deref(),
                limit,
            };
            db.node_page(&page)
        });
        read.await.map_err(|e| match e {
            bootvol_db::PageError::Db(e) => NodeError::from(e),
            refused => NodeError::Invalid(refused.to_string()),
        })
    }

    /// Folds every node, by name, into `acc` a page of records at a time: what a view of every
    /// node keeps of each (a summary row) is all it holds, never every decoded record at once
    /// (10,000 of those cost tens of megabytes that the allocator keeps).
    pub async fn fold_nodes<T: Send + 'static>(
        &self,
        acc: T,
        mut each: impl FnMut(&mut T, &NodeRecord) + Send + 'static,
    ) -> Result<T, NodeError> {
        let folded = self
            .db()
            .run(move |db| {
                let mut acc = acc;
                db.for_each_node_record_page(256, |page| {
                    page.iter().for_each(|record| each(&mut acc, record));
                    Ok::<(), bootvol_db::DbError>(())
                })
                .map(|()| acc)
            })
            .await?;
        Ok(folded)
    }

    /// The UUID of the node a child names as its parent (refused, not "not found", when there
    /// is none: the child is what is asked for).
    pub async fn parent(&self, key: &str) -> Result<String, NodeError> {
        match self.node(key).await {
            Ok(record) => Ok(record.node.uuid),
            Err(NodeError::NotFound(_)) => Err(NodeError::Invalid(format!(
                "Invalid input for field/attribute node_uuid: node {key} could not be found"
            ))),
            Err(other) => Err(other),
        }
    }

    /// One port, connector or target by UUID.
    pub async fn child(&self, kind: ChildKind, uuid: &str) -> Result<Stamped<Child>, NodeError> {
        let owned = uuid.to_owned();
        self.db().run(move |db| db.child(kind, &owned)).await?.ok_or_else(|| {
            NodeError::NotFound(format!("{} {uuid} could not be found.", kind.title()))
        })
    }

    /// Every port, or those of one node.
    pub async fn ports(&self, node_uuid: Option<String>) -> Result<Vec<Stamped<Port>>, NodeError> {
        Ok(self.db().run(move |db| db.stamped_ports(node_uuid.as_deref())).await?)
    }

    /// The port with this address (of one node when given): one indexed read.
    pub async fn port_by_address(
        &self,
        mac: MacAddr,
        node_uuid: Option<String>,
    ) -> Result<Vec<Stamped<Port>>, NodeError> {
        Ok(self.db().run(move |db| db.stamped_port_by_address(mac, node_uuid.as_deref())).await?)
    }

    /// Every volume connector, or those of one node.
    pub async fn connectors(
        &self,
        node_uuid: Option<String>,
    ) -> Result<Vec<Stamped<VolumeConnector>>, NodeError> {
        Ok(self.db().run(move |db| db.stamped_connectors(node_uuid.as_deref())).await?)
    }

    /// Every volume target, or those of one node.
    pub async fn targets(
        &self,
        node_uuid: Option<String>,
    ) -> Result<Vec<Stamped<VolumeTarget>>, NodeError> {
        Ok(self.db().run(move |db| db.stamped_targets(node_uuid.as_deref())).await?)
    }

    /// The newest `limit` events of a node.
    pub async fn events(&self, node_uuid: &str, limit: u32) -> Result<Vec<Event>, NodeError> {
        let node = node_uuid.to_owned();
        Ok(self.db().run(move |db| db.events(Some(&node), limit)).await?)
    }

    /// A page of the rack-wide history of events, newest first (`db::history`).
    pub async fn events_page(&self, filter: EventFilter) -> Result<Vec<Event>, NodeError> {
        Ok(self.db().run(move |db| db.events_page(&filter)).await?)
    }

    /// The event types recorded, sorted.
    pub async fn event_types(&self) -> Result<Vec<String>, NodeError> {
        Ok(self.db().run(|db| db.event_types()).await?)
    }

    /// The node that owns a port with this MAC, if any.
    pub async fn node_by_mac(
        &self,
        mac: bootvol_core::model::MacAddr,
    ) -> Result<Option<NodeRecord>, NodeError> {
        Ok(self.db().run(move |db| db.node_record_by_mac(mac)).await?)
    }

    /// Each node's newest event of `event_type`, by node UUID (its payload as stored).
    pub async fn last_events_of_type(
        &self,
        event_type: &'static str,
    ) -> Result<std::collections::HashMap<String, serde_json::Value>, NodeError> {
        let found = self.db().run(move |db| db.last_events_of_type(event_type)).await?;
        Ok(found.into_iter().collect())
    }

    /// The last Cinder sync pass and the volume attachments counted by state.
    pub async fn sync_overview(
        &self,
    ) -> Result<(Option<SyncStatus>, Vec<(String, i64)>), NodeError> {
        Ok(self
            .db()
            .run(|db| Ok::<_, DbError>((db.sync_status()?, db.attachment_counts()?)))
            .await?)
    }

    /// The Cinder attachment records of a node's targets.
    pub async fn attachments(&self, node_uuid: &str) -> Result<Vec<AttachmentRecord>, NodeError> {
        let all = self.db().run(|db| db.attachment_records(&[])).await?;
        Ok(all.into_iter().filter(|a| a.node_uuid == node_uuid).collect())
    }

    // -----------------------------------------------------------------------------------------
    // The admin page's sessions (kept in the same database, so they survive a restart)

    /// The admin session signing key: the stored one, or `fresh` stored when there is none.
    pub async fn admin_session_key(&self, fresh: String) -> Result<String, NodeError> {
        Ok(self.db().run(move |db| db.admin_key("session", &fresh)).await?)
    }

    /// The admin sessions logged out that would still be live at `now` (Unix seconds).
    pub async fn admin_logouts(&self, now: i64) -> Result<Vec<String>, NodeError> {
        Ok(self.db().run(move |db| db.admin_logouts(now)).await?)
    }

    /// Records an admin session logged out (kept until `expires_at`).
    pub async fn add_admin_logout(
        &self,
        session: String,
        expires_at: i64,
        now: i64,
    ) -> Result<(), NodeError> {
        Ok(self.db().run(move |db| db.add_admin_logout(&session, expires_at, now)).await?)
    }

    // -----------------------------------------------------------------------------------------
    // Nodes

    /// Creates a node (no children) with `uuid`, starting in `initial`. A masked secret is
    /// refused: there is nothing stored to keep.
    pub async fn create_node(
        &self,
        uuid: String,
        spec: NodeSpec,
        initial: ProvisionState,
    ) -> Result<NodeRecord, NodeError> {
        self.create_node_in_chassis(uuid, spec, initial, None).await
    }

    /// Replaces a node's operator fields with `spec` (masked secrets keep the stored ones;
    /// maintenance and states are not the spec's to change). Refused while an action holds it.
    pub async fn update_node(&self, key: &str, spec: NodeSpec) -> Result<NodeRecord, NodeError> {
        self.update_node_with(key, spec, None).await
    }

    /// [`NodeService::update_node`], and the node's chassis when `chassis` is given.
    async fn update_node_with(
        &self,
        key: &str,
        mut spec: NodeSpec,
        chassis: Option<Option<String>>,
    ) -> Result<NodeRecord, NodeError> {
        let record = self.node(key).await?;
        let node = &record.node;
        spec.restore_secrets(Some(node)).map_err(NodeError::Invalid)?;
        spec.maintenance = Some(node.maintenance);
        spec.provision_state = None;
        self.check_unlocked(node).await?;
        let uuid = node.uuid.clone();
        self.db()
            .run(move |db| match chassis {
                None => db.update_node(&uuid, &spec),
                Some(chassis) => db.update_node_in_chassis(&uuid, &spec, chassis.as_deref()),
            })
            .await?;
        self.record_change("node", "update", &node.uuid, &node.uuid).await;
        self.node(&node.uuid).await
    }

    /// Whether `spec` (masked secrets restored) would change nothing of `record`.
    pub fn node_unchanged(record: &NodeRecord, spec: &NodeSpec) -> bool {
        let mut spec = spec.clone();
        spec.maintenance = None;
        spec.provision_state = None;
        spec.restore_secrets(Some(&record.node)).is_ok() && !spec.differs_from(&record.node)
    }

    /// Whether `spec` (masked secrets restored) would change nothing of the stored child.
    pub fn child_unchanged(stored: &Child, spec: &ChildSpec) -> bool {
        let mut spec = spec.clone();
        spec.restore_secrets(Some(stored)).is_ok() && spec.matches(stored)
    }

    /// Deletes a node through the conductor (which refuses while it is deployed or has volumes
    /// attached); answers what it was.
    pub async fn delete_node(&self, key: &str) -> Result<NodeRecord, NodeError> {
        let record = self.node(key).await?;
        // An action like any other: the conductor takes the node's lock for it.
        let started = self.conductor.start(&record.node.uuid, Action::Delete).await?;
        started.finished().await?;
        let uuid = &record.node.uuid;
        self.record_change("node", "delete", uuid, uuid).await;
        Ok(record)
    }

    /// Sets maintenance (with an optional reason: at most 255 characters, no control
    /// characters) or ends it, at once. A node in maintenance is
    /// left out of the power-state sync, and its ports may change while it is deployed.
    pub async fn set_maintenance(
        &self,
        key: &str,
        on: bool,
        reason: Option<String>,
    ) -> Result<NodeRecord, NodeError> {
        if reason
            .as_ref()
            .is_some_and(|r| r.chars().count() > 255 || r.chars().any(char::is_control))
        {
            return Err(NodeError::Invalid(
                "reason: at most 255 characters, without control characters".into(),
            ));
        }
        let record = self.node(key).await?;
        let uuid = record.node.uuid.clone();
        let write = {
            let (uuid, reason) = (uuid.clone(), reason.clone());
            self.db().run(move |db| db.set_maintenance(&uuid, on, reason.as_deref()))
        };
        write.await?;
        self.conductor.changed();
        let payload = json!({"node_uuid": uuid, "node_name": record.node.name,
                             "maintenance": on, "reason": reason});
        let event_type = "baremetal.node.maintenance_set.end".to_owned();
        self.db().record_event(&uuid, event_type, "info", payload).await;
        self.node(&uuid).await
    }

    // -----------------------------------------------------------------------------------------
    // Ports, volume connectors, volume targets

    /// Adds a port, connector or target with `uuid` to node `node_uuid`.
    pub async fn create_child(
        &self,
        node_uuid: &str,
        uuid: String,
        mut spec: ChildSpec,
    ) -> Result<Stamped<Child>, NodeError> {
        spec.restore_secrets(None).map_err(NodeError::Invalid)?;
        self.check_editable(None, node_uuid, &spec).await?;
        self.write_child(uuid, node_uuid, spec, false).await
    }

    /// Replaces a port, connector or target with `spec`, under node `node_uuid` (it may move);
    /// masked secrets keep the stored ones.
    pub async fn update_child(
        &self,
        uuid: &str,
        node_uuid: &str,
        mut spec: ChildSpec,
    ) -> Result<Stamped<Child>, NodeError> {
        let stored = self.child(spec.kind(), uuid).await?;
        spec.restore_secrets(Some(&stored.item)).map_err(NodeError::Invalid)?;
        self.check_editable(Some(&stored), node_uuid, &spec).await?;
        self.write_child(uuid.to_owned(), node_uuid, spec, true).await
    }

    /// Deletes a port, connector or target; answers what it was.
    pub async fn delete_child(
        &self,
        kind: ChildKind,
        uuid: &str,
    ) -> Result<Stamped<Child>, NodeError> {
        let stored = self.child(kind, uuid).await?;
        self.check_rule(kind, &stored.node_uuid, "deletion").await?;
        let owned = uuid.to_owned();
        if !self.db().run(move |db| db.delete_child(kind, &owned)).await? {
            return Err(NodeError::NotFound("It was deleted meanwhile.".into()));
        }
        self.record_change(kind.event_resource(), "delete", &stored.node_uuid, uuid).await;
        Ok(stored)
    }

    async fn write_child(
        &self,
        uuid: String,
        node_uuid: &str,
        spec: ChildSpec,
        existing: bool,
    ) -> Result<Stamped<Child>, NodeError> {
        self.write_child_in(uuid, node_uuid, spec, existing, None).await
    }

    /// [`NodeService::write_child`], and the port's group when `portgroup` is given.
    async fn write_child_in(
        &self,
        uuid: String,
        node_uuid: &str,
        spec: ChildSpec,
        existing: bool,
        portgroup: Option<Option<String>>,
    ) -> Result<Stamped<Child>, NodeError> {
        let kind = spec.kind();
        let (id, node) = (uuid.clone(), node_uuid.to_owned());
        self.db()
            .run(move |db| match portgroup {
                None => db.write_child(&id, &node, &spec, existing),
                Some(group) => {
                    db.write_port_in_portgroup(&id, &node, &spec, existing, group.as_deref())
                }
            })
            .await?;
        let action = if existing { "update" } else { "create" };
        self.record_change(kind.event_resource(), action, node_uuid, &uuid).await;
        self.child(kind, &uuid).await
    }

    /// Records a create, update or delete as an event with Ironic's name
    /// (`baremetal.node.update.end`, `baremetal.port.create.end`, ...): the node's history, and
    /// the webhook's, shows who changed what. A failure to record is logged; the change stands.
    /// The snapshot's watcher is told at once (it reads the change log now, not at its next
    /// `[database] watch_interval_ms` tick), so the change is served within milliseconds.
    async fn record_change(&self, resource: &str, action: &str, node_uuid: &str, uuid: &str) {
        self.conductor.changed();
        let payload = json!({"uuid": uuid, "node_uuid": node_uuid});
        let event_type = format!("baremetal.{resource}.{action}.end");
        self.db().record_event(node_uuid, event_type, "info", payload).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use bootvol_core::config::Config;
    use bootvol_core::model::new_uuid;
    use bootvol_db::Db;

    fn port(mac: &str) -> ChildSpec {
        ChildSpec::parse(ChildKind::Port, &json!({ "address": mac })).unwrap()
    }

    #[tokio::test]
    async fn secrets_edit_rules_uniqueness_and_events_are_the_services() {
        let config = Arc::new(Config::from_toml("", "test").unwrap());
        let db = SharedDb::new(Db::open_in_memory().unwrap());
        let nodes =
            NodeService::new(Conductor::from_config(Arc::clone(&config), db.clone()).unwrap());
        let node = |doc: Value| bootvol_core::inventory::parse_node(&doc, &config).unwrap();

        // A masked secret with nothing stored is refused; sent back, it keeps the stored one.
        let masked = node(json!({"name": "n1", "driver_info": {"fake_password": "******"}}));
        let refused = nodes.create_node(new_uuid(), masked.clone(), ProvisionState::Enroll).await;
        assert!(
            matches!(refused, Err(NodeError::Invalid(m)) if m.contains("driver_info.fake_password"))
        );
        let uuid = new_uuid();
        let spec = node(json!({"name": "n1", "driver_info": {"fake_password": "pw"}}));
        nodes.create_node(uuid.clone(), spec, ProvisionState::Enroll).await.unwrap();
        let record = nodes.update_node("n1", masked).await.unwrap();
        assert_eq!(record.node.driver_info["fake_password"], json!("pw"));
        assert!(NodeService::node_unchanged(
            &record,
            &node(json!({"name": "n1",
            "driver_info": {"fake_password": "******"}}))
        ));

        // A deployed node's port changes address only in maintenance; a MAC is unique.
        let port_uuid = new_uuid();
        nodes.create_child(&uuid, port_uuid.clone(), port("52:54:00:00:00:01")).await.unwrap();
        let id = uuid.clone();
        db.run(move |db| {
            let mut record = db.node_record(&id)?.expect("stored");
            record.node.provision_state = ProvisionState::Active;
            db.save_node_runtime(&record.node)
        })
        .await
        .unwrap();
        let readdressed = nodes.update_child(&port_uuid, &uuid, port("52:54:00:00:00:02")).await;
        assert!(matches!(readdressed, Err(NodeError::Invalid(m)) if m.contains("maintenance")));
        nodes.set_maintenance(&uuid, true, Some("swap NIC".into())).await.unwrap();
        let moved = nodes.update_child(&port_uuid, &uuid, port("52:54:00:00:00:02")).await.unwrap();
        assert!(
            matches!(moved.item, Child::Port(p) if p.address.to_string() == "52:54:00:00:00:02")
        );
        let taken = nodes.create_child(&uuid, new_uuid(), port("52:54:00:00:00:02")).await;
        assert!(matches!(taken, Err(NodeError::Conflict(_))), "{taken:?}");
        assert!(matches!(nodes.child(ChildKind::Port, "nope").await, Err(NodeError::NotFound(_))));

        // Every change is an event, in order; refused ones are not.
        let events = nodes.events(&uuid, 50).await.unwrap();
        let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            types,
            [
                "baremetal.node.create.end",
                "baremetal.node.update.end",
                "baremetal.port.create.end",
                "baremetal.node.maintenance_set.end",
                "baremetal.port.update.end",
            ]
        );
    }
}
