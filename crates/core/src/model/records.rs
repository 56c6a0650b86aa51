//! The records the control plane reads back from the database as plain values: a volume
//! attachment's progress, a persisted event, the filter of the rack-wide history of events
//! ([`EventFilter`]) and that of the node list ([`NodeFilter`]). Owns their shape only; how they are stored
//! (tables, columns, SQL) is the database crate's business, and nothing here does I/O.

use serde_json::Value;

/// Where an attachment stands. Only `attached` volumes are in use by the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachmentState {
    Attaching,
    Attached,
    Detaching,
    Detached,
    Failed,
}

impl AttachmentState {
    pub fn as_str(&self) -> &'static str {
        match self {
            AttachmentState::Attaching => "attaching",
            AttachmentState::Attached => "attached",
            AttachmentState::Detaching => "detaching",
            AttachmentState::Detached => "detached",
            AttachmentState::Failed => "failed",
        }
    }

    /// The state named `text` (as [`AttachmentState::as_str`] writes it).
    pub fn parse(text: &str) -> Option<AttachmentState> {
        Some(match text {
            "attaching" => AttachmentState::Attaching,
            "attached" => AttachmentState::Attached,
            "detaching" => AttachmentState::Detaching,
            "detached" => AttachmentState::Detached,
            "failed" => AttachmentState::Failed,
            _ => return None,
        })
    }
}

/// The persisted progress of one volume target's attachment. `step` names the last step that
/// completed, so recovery knows what to undo or finish.
#[derive(Debug, Clone, PartialEq)]
pub struct AttachmentRecord {
    pub node_uuid: String,
    pub target_uuid: String,
    pub volume_id: String,
    /// `attachments` or `legacy`.
    pub api: String,
    /// Cinder's attachment id, once known.
    pub attachment_id: Option<String>,
    pub state: AttachmentState,
    pub step: String,
    /// The connector sent (needed again to terminate a legacy connection).
    pub connector: Value,
    pub last_error: Option<String>,
    pub updated_at: Option<String>,
}

/// A notification, persisted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Event {
    pub id: i64,
    pub node_uuid: Option<String>,
    pub event_type: String,
    pub level: String,
    pub payload: Value,
    pub created_at: String,
    /// How many times it was recorded as it is (a repeated sync drift is one event, counted).
    pub repeats: i64,
    /// When it was last recorded, when it repeated.
    pub last_seen_at: Option<String>,
}

/// Which events the rack-wide history reads: every condition set narrows it (all of them at
/// once), a page at a time by id, newest first. Times are the stored text
/// (`YYYY-MM-DDTHH:MM:SS.fff+00:00`, UTC), compared as text: both bounds included.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// The node's UUID (events of a node deleted since are still found by it).
    pub node_uuid: Option<String>,
    /// The event type, whole (`baremetal.node.power_set.end`).
    pub event_type: Option<String>,
    /// `info`, `warning` or `error`.
    pub level: Option<String>,
    /// Recorded at or after.
    pub since: Option<String>,
    /// Recorded at or before.
    pub until: Option<String>,
    /// The page older than this id (the next page).
    pub before: Option<i64>,
    /// The page just newer than this id (the previous page).
    pub after: Option<i64>,
    /// Events a page.
    pub limit: u32,
}

/// The node list's filters, Ironic's (each unset: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFilter {
    pub provision_state: Option<String>,
    pub driver: Option<String>,
    pub maintenance: Option<bool>,
    /// Whether an instance is associated (`instance_uuid` set).
    pub associated: Option<bool>,
    pub instance_uuid: Option<String>,
    pub resource_class: Option<String>,
    pub chassis_uuid: Option<String>,
}

impl NodeFilter {
    /// Whether `node` passes every filter (what the database's query keeps, for a list sorted
    /// over every node).
    pub fn keeps(&self, node: &super::Node) -> bool {
        let same = |want: &Option<String>, got: Option<&str>| {
            want.as_deref().is_none_or(|w| Some(w) == got)
        };
        same(&self.provision_state, Some(node.provision_state.as_str()))
            && same(&self.driver, Some(node.driver.as_str()))
            && self.maintenance.is_none_or(|m| m == node.maintenance)
            && self.associated.is_none_or(|a| a == node.instance_uuid.is_some())
            && same(&self.instance_uuid, node.instance_uuid.as_deref())
            && same(&self.resource_class, node.resource_class.as_deref())
            && same(&self.chassis_uuid, node.chassis_uuid.as_deref())
    }
}
