//! What a node owns besides its own fields: ports, volume connectors and volume targets, and
//! the facts that differ between the three kinds (their table, how they are named to an
//! operator and in Ironic's API and events, their list fields, and the rule that guards their
//! edits), in one place.

use super::{Port, VolumeConnector, VolumeTarget};

/// The kinds of rows that belong to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChildKind {
    Port,
    Connector,
    Target,
}

/// Which of Ironic's rules guards a child's edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditRule {
    /// A port's MAC picks the script a node boots: on a deployed node it changes (or goes) only
    /// in maintenance; adding one is always allowed.
    Address,
    /// Connectors and targets change only while the node is powered off or not deployed, and
    /// not while an action holds it.
    Volume,
}

impl ChildKind {
    pub const ALL: [ChildKind; 3] = [ChildKind::Port, ChildKind::Connector, ChildKind::Target];

    /// Its name in messages, lower case ("volume connector").
    pub fn label(self) -> &'static str {
        match self {
            ChildKind::Port => "port",
            ChildKind::Connector => "volume connector",
            ChildKind::Target => "volume target",
        }
    }

    /// Its name at the start of a sentence ("Volume connector").
    pub fn title(self) -> &'static str {
        match self {
            ChildKind::Port => "Port",
            ChildKind::Connector => "Volume connector",
            ChildKind::Target => "Volume target",
        }
    }

    /// Its collection under `/v1/` in Ironic's API.
    pub fn api_path(self) -> &'static str {
        match self {
            ChildKind::Port => "ports",
            ChildKind::Connector => "volume/connectors",
            ChildKind::Target => "volume/targets",
        }
    }

    /// The JSON key of its collection in Ironic's list answers.
    pub fn collection(self) -> &'static str {
        match self {
            ChildKind::Port => "ports",
            ChildKind::Connector => "connectors",
            ChildKind::Target => "targets",
        }
    }

    /// Its resource name in Ironic's event types (`baremetal.volumeconnector.create.end`).
    pub fn event_resource(self) -> &'static str {
        match self {
            ChildKind::Port => "port",
            ChildKind::Connector => "volumeconnector",
            ChildKind::Target => "volumetarget",
        }
    }

    /// The fields a list shows without `detail` or `fields`.
    pub fn list_fields(self) -> &'static [&'static str] {
        match self {
            ChildKind::Port => &["uuid", "address"],
            ChildKind::Connector => &["uuid", "node_uuid", "type", "connector_id"],
            ChildKind::Target => &["uuid", "node_uuid", "volume_type", "boot_index", "volume_id"],
        }
    }

    /// The fields a client sets (create) or patches.
    pub fn writable_fields(self) -> &'static [&'static str] {
        match self {
            ChildKind::Port => &[
                "address",
                "node_uuid",
                "extra",
                "pxe_enabled",
                "local_link_connection",
                "physical_network",
            ],
            ChildKind::Connector => &["type", "connector_id", "node_uuid", "extra"],
            ChildKind::Target => {
                &["volume_type", "boot_index", "volume_id", "properties", "node_uuid", "extra"]
            }
        }
    }

    /// The rule that guards its edits.
    pub fn edit_rule(self) -> EditRule {
        match self {
            ChildKind::Port => EditRule::Address,
            ChildKind::Connector | ChildKind::Target => EditRule::Volume,
        }
    }
}

/// One child of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Child {
    Port(Port),
    Connector(VolumeConnector),
    Target(VolumeTarget),
}

impl Child {
    pub fn kind(&self) -> ChildKind {
        match self {
            Child::Port(_) => ChildKind::Port,
            Child::Connector(_) => ChildKind::Connector,
            Child::Target(_) => ChildKind::Target,
        }
    }

    pub fn uuid(&self) -> &str {
        match self {
            Child::Port(p) => &p.uuid,
            Child::Connector(c) => &c.uuid,
            Child::Target(t) => &t.uuid,
        }
    }
}

/// A row with what the API shows besides the model: its node and its timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped<T> {
    pub node_uuid: String,
    pub item: T,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

impl<T> Stamped<T> {
    /// The same row with its item turned into another type.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Stamped<U> {
        Stamped {
            node_uuid: self.node_uuid,
            item: f(self.item),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}
