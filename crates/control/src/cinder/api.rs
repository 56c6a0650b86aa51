//! Cinder's JSON, request and response shapes: the only place they are spelled out.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The host side of a connection, as Cinder's drivers read it (os-brick's connector).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Connector {
    /// The iSCSI initiator name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initiator: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wwpns: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wwnns: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The node's UUID.
    pub host: String,
    pub multipath: bool,
    pub platform: String,
    pub os_type: String,
}

/// `GET /` on the Cinder host: the API versions.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct VersionsDoc {
    pub(super) versions: Vec<VersionEntry>,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct VersionEntry {
    pub(super) id: String,
    #[serde(default)]
    pub(super) min_version: String,
    /// The highest microversion; empty for APIs without microversions.
    #[serde(default)]
    pub(super) version: String,
    #[serde(default)]
    pub(super) status: String,
}

/// A volume, as much of it as bootvol reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Volume {
    pub id: String,
    pub status: String,
    #[serde(default)]
    pub attachments: Vec<VolumeAttachment>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    #[serde(default)]
    pub multiattach: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VolumeAttachment {
    #[serde(default)]
    pub attachment_id: String,
    #[serde(default)]
    pub host_name: Option<String>,
    #[serde(default)]
    pub server_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct VolumeBody {
    pub(super) volume: Volume,
}

/// An attachment of the attachments API. `connection_info` is Cinder's flattened driver dict.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Attachment {
    pub id: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub volume_id: String,
    #[serde(default)]
    pub connection_info: Map<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct AttachmentBody {
    pub(super) attachment: Attachment,
}

/// The legacy `os-initialize_connection` answer: `{"connection_info": {"driver_volume_type", "data"}}`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct InitializeBody {
    pub(super) connection_info: LegacyConnectionInfo,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct LegacyConnectionInfo {
    pub(super) driver_volume_type: String,
    #[serde(default)]
    pub(super) data: Map<String, Value>,
}

/// Connection info, whichever API gave it: the driver type and the properties a volume
/// target keeps.
#[derive(Clone, PartialEq)]
pub struct ConnectionInfo {
    pub driver_volume_type: String,
    pub data: Map<String, Value>,
}

impl std::fmt::Debug for ConnectionInfo {
    /// CHAP secrets are in `data`; never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut data = Value::Object(self.data.clone());
        bootvol_core::secrets::mask(&mut data);
        f.debug_struct("ConnectionInfo")
            .field("driver_volume_type", &self.driver_volume_type)
            .field("data", &data)
            .finish()
    }
}

/// Keys the attachments API adds to the flattened dict that are not connection properties.
const ENVELOPE_KEYS: &[&str] = &["driver_volume_type", "attachment_id", "mount_point_base"];

impl ConnectionInfo {
    /// From the attachments API's flattened dict.
    pub(super) fn from_flat(flat: &Map<String, Value>) -> Option<ConnectionInfo> {
        let driver_volume_type = flat.get("driver_volume_type")?.as_str()?.to_owned();
        let data = flat
            .iter()
            .filter(|(k, _)| !ENVELOPE_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Some(ConnectionInfo { driver_volume_type, data })
    }

    pub(super) fn from_legacy(info: LegacyConnectionInfo) -> ConnectionInfo {
        ConnectionInfo { driver_volume_type: info.driver_volume_type, data: info.data }
    }
}

/// Cinder's error bodies: `{"<faultName>": {"code": N, "message": "..."}}`.
pub(super) fn fault_message(body: &Value) -> Option<String> {
    body.as_object()?.values().find_map(|v| v.get("message")?.as_str().map(str::to_owned))
}

impl Attachment {
    /// The connection info of an attachment created with a connector; `None` before that.
    pub fn connection(&self) -> Option<ConnectionInfo> {
        ConnectionInfo::from_flat(&self.connection_info)
    }
}
