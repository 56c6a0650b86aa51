//! Plain data: nodes, ports, volume connectors and volume targets with Ironic's field names, and
//! the value types they are built from.
//!
//! Nothing here does I/O or knows SQL, HTTP or iPXE. Records are only built from values that
//! passed their parsers (see `inventory` for the edge that parses files).

pub mod capabilities;
mod checks;
mod child;
pub mod groups;
pub mod hardware;
pub mod raid;
pub mod records;
pub mod sync;
pub mod traits;
mod values;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use checks::{check_file_name, check_http_url, check_nfs_export, check_script_value};
pub use child::{Child, ChildKind, EditRule, Stamped};
pub use values::{
    Host, ISCSI_DEFAULT_PORT, IscsiName, Lun, MacAddr, Portal, ValueError, Wwn,
    parse_capability_bool, parse_host,
};

/// A JSON object, as Ironic keeps `driver_info`, `properties`, `instance_info` and `extra`.
pub type JsonMap = Map<String, Value>;

/// Declares a string-backed enum whose text forms are Ironic's.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(&self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl FromStr for $name {
            type Err = ValueError;

            fn from_str(text: &str) -> Result<Self, ValueError> {
                match text {
                    $($text => Ok($name::$variant),)+
                    _ => Err(ValueError(format!(
                        "{text:?} is not a {} (expected one of: {})",
                        $what,
                        [$($text),+].join(", ")
                    ))),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// The hardware type, which picks the power driver. `fake` is bootvol's own (fake power, real
    /// iPXE boot from the volume); `fake-hardware` is Ironic's test type (every interface `fake`
    /// or `noop`: nothing is touched).
    Driver, "driver" { Fake => "fake", FakeHardware => "fake-hardware", Redfish => "redfish", Ipmi => "ipmi" }
);

string_enum!(
    /// Ironic's storage interfaces (`node.storage_interface`).
    StorageInterfaceName, "storage interface" { Noop => "noop", External => "external", Cinder => "cinder" }
);

string_enum!(
    /// Boot interfaces: `ipxe` network-boots volumes; `pxe` and `fake` cannot.
    BootInterfaceName, "boot interface" { Ipxe => "ipxe", Pxe => "pxe", Fake => "fake" }
);

string_enum!(
    /// Deploy interfaces: `direct` writes images (scenario 4); `ramdisk` and `fake` never do.
    DeployInterfaceName, "deploy interface" { Direct => "direct", Ramdisk => "ramdisk", Fake => "fake" }
);

string_enum!(
    /// Ironic's power states.
    PowerState, "power state" { On => "power on", Off => "power off" }
);

string_enum!(
    /// The subset of Ironic's provision states (up to API 1.38) a boot-from-volume appliance
    /// uses: no `verifying`, `clean wait`, `inspect wait` or `rescue wait` (those steps end at once).
    ProvisionState, "provision state" {
        Enroll => "enroll",
        Manageable => "manageable",
        Available => "available",
        Deploying => "deploying",
        WaitCallBack => "wait call-back",
        Active => "active",
        Deleting => "deleting",
        DeployFailed => "deploy failed",
        Error => "error",
        Cleaning => "cleaning",
        CleanFailed => "clean failed",
        Inspecting => "inspecting",
        InspectFailed => "inspect failed",
        Adopting => "adopting",
        AdoptFailed => "adopt failed",
        Rescuing => "rescuing",
        Rescue => "rescue",
        RescueFailed => "rescue failed",
        Unrescuing => "unrescuing",
        UnrescueFailed => "unrescue failed",
    }
);

string_enum!(
    /// Volume connector types of the "volume connection information" spec.
    ConnectorType, "volume connector type" {
        Iqn => "iqn", Ip => "ip", Mac => "mac", Wwnn => "wwnn", Wwpn => "wwpn", Port => "port", Portgroup => "portgroup",
    }
);

/// A volume target's type: Cinder's `driver_volume_type` names plus AoE and HTTP SAN, which
/// bootvol's scenarios boot, or any other short token, stored as Ironic stores it (`validate`
/// and deploy refuse a type no scenario boots).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VolumeType {
    Iscsi,
    FibreChannel,
    Aoe,
    Nfs,
    Http,
    /// Any other token (no whitespace, at most 64 characters, Ironic's column width).
    Other(String),
}

impl VolumeType {
    /// The types bootvol boots.
    pub const ALL: &'static [VolumeType] = &[
        VolumeType::Iscsi,
        VolumeType::FibreChannel,
        VolumeType::Aoe,
        VolumeType::Nfs,
        VolumeType::Http,
    ];

    pub fn as_str(&self) -> &str {
        match self {
            VolumeType::Iscsi => "iscsi",
            VolumeType::FibreChannel => "fibre_channel",
            VolumeType::Aoe => "aoe",
            VolumeType::Nfs => "nfs",
            VolumeType::Http => "http",
            VolumeType::Other(text) => text,
        }
    }

    /// Whether a bootvol scenario boots this type.
    pub fn is_known(&self) -> bool {
        !matches!(self, VolumeType::Other(_))
    }
}

impl FromStr for VolumeType {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        Ok(match text {
            "iscsi" => VolumeType::Iscsi,
            "fibre_channel" => VolumeType::FibreChannel,
            "aoe" => VolumeType::Aoe,
            "nfs" => VolumeType::Nfs,
            "http" => VolumeType::Http,
            _ if text.is_empty()
                || text.len() > 64
                || text.chars().any(|c| c.is_whitespace() || c.is_control()) =>
            {
                return Err(ValueError(format!(
                    "{text:?} is not a volume type (a token of 1-64 characters without whitespace, e.g. iscsi, fibre_channel, aoe, nfs, http)"
                )));
            }
            other => VolumeType::Other(other.to_owned()),
        })
    }
}

impl fmt::Display for VolumeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for VolumeType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for VolumeType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(|e: ValueError| serde::de::Error::custom(e.0))
    }
}

/// A bare-metal node, with Ironic's field names. `Debug` masks secrets (BMC passwords...).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub uuid: String,
    pub name: String,
    pub driver: Driver,
    pub driver_info: JsonMap,
    pub properties: JsonMap,
    pub instance_info: JsonMap,
    pub driver_internal_info: JsonMap,
    pub extra: JsonMap,
    /// Starts empty (no implied default); see [`Node::effective_storage_interface`].
    pub storage_interface: Option<StorageInterfaceName>,
    pub boot_interface: BootInterfaceName,
    pub deploy_interface: DeployInterfaceName,
    /// The other hardware interfaces (`None`: the hardware type's default).
    #[serde(default)]
    pub interfaces: hardware::Interfaces,
    /// The instance (Nova's server) the node is associated with: unique across nodes.
    #[serde(default)]
    pub instance_uuid: Option<String>,
    #[serde(default)]
    pub resource_class: Option<String>,
    pub power_state: Option<PowerState>,
    pub target_power_state: Option<PowerState>,
    pub provision_state: ProvisionState,
    /// When the provision state last changed.
    #[serde(default)]
    pub provision_updated_at: Option<String>,
    /// The instance (`db::instance_id`) whose action holds the node's lock, while its lease
    /// runs: Ironic's `reservation` (there, the conductor's host name). Read, never written.
    #[serde(default)]
    pub reservation: Option<String>,
    /// The chassis the node belongs to (Ironic's `chassis_uuid`): set through the API only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis_uuid: Option<String>,
    pub target_provision_state: Option<ProvisionState>,
    pub maintenance: bool,
    pub maintenance_reason: Option<String>,
    pub last_error: Option<String>,
    /// Whether the node's console is enabled (Ironic's `console_enabled`): only a console
    /// interface that does something (`fake` on fake-hardware) turns it on.
    #[serde(default)]
    pub console_enabled: bool,
    /// The RAID configuration asked for (Ironic's `target_raid_config`, `PUT .../states/raid`),
    /// checked against `raid::validate_target`. Nothing applies it: a boot-from-volume node's
    /// disks are volumes.
    #[serde(default)]
    pub target_raid_config: JsonMap,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

impl Node {
    /// The storage interface that applies: the node's own, or the configured default when the
    /// node has none recorded.
    pub fn effective_storage_interface(
        &self,
        default: StorageInterfaceName,
    ) -> StorageInterfaceName {
        self.storage_interface.unwrap_or(default)
    }

    /// The node's `properties.capabilities`, parsed.
    pub fn capabilities(&self) -> Result<capabilities::NodeCapabilities, ValueError> {
        match self.properties.get("capabilities") {
            None | Some(Value::Null) => Ok(Default::default()),
            Some(Value::String(text)) => text.parse(),
            Some(other) => Err(ValueError(format!(
                "properties.capabilities must be a \"key:value,key:value\" string, not {other}"
            ))),
        }
    }
}

/// `Debug` through the masked JSON form, so that no log line or panic message can show a
/// secret held in a node or a volume target.
macro_rules! masked_debug {
    ($($ty:ident),*) => {$(
        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut value = serde_json::to_value(self).unwrap_or_default();
                crate::secrets::mask(&mut value);
                write!(f, "{}({value})", stringify!($ty))
            }
        }
    )*};
}
masked_debug!(Node, VolumeTarget);

/// A network port of a node, identified by its MAC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Port {
    pub uuid: String,
    pub address: MacAddr,
    pub extra: JsonMap,
    /// Ironic's port fields beyond the address (1.18, 1.19, 1.34).
    #[serde(default)]
    pub more: PortFields,
}

/// A port's `pxe_enabled`, `local_link_connection`, `physical_network` and `internal_info`
/// (where the flat network interface records a VIF: `tenant_vif_port_id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortFields {
    pub pxe_enabled: bool,
    pub local_link_connection: JsonMap,
    pub physical_network: Option<String>,
    pub internal_info: JsonMap,
}

impl Default for PortFields {
    fn default() -> PortFields {
        PortFields {
            pxe_enabled: true,
            local_link_connection: JsonMap::new(),
            physical_network: None,
            internal_info: JsonMap::new(),
        }
    }
}

/// The key of a port's `internal_info` that holds the VIF attached to it (Ironic's flat
/// network interface).
pub const TENANT_VIF: &str = "tenant_vif_port_id";

impl Port {
    /// The VIF attached to this port, if any.
    pub fn vif(&self) -> Option<&str> {
        self.more.internal_info.get(TENANT_VIF).and_then(Value::as_str)
    }
}

/// The node's side of a volume connection: an initiator IQN, a WWPN, an IP...
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeConnector {
    pub uuid: String,
    #[serde(rename = "type")]
    pub connector_type: ConnectorType,
    pub connector_id: String,
    pub extra: JsonMap,
}

/// A volume the node uses; `boot_index` 0 is the boot volume. `properties` carries the
/// connection info (Cinder's `connection_info.data`, or what the operator recorded). `Debug`
/// masks CHAP secrets.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeTarget {
    pub uuid: String,
    pub volume_type: VolumeType,
    pub boot_index: u32,
    pub volume_id: String,
    pub properties: JsonMap,
    pub extra: JsonMap,
}

/// A node with everything the boot path needs about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node: Node,
    pub ports: Vec<Port>,
    pub volume_connectors: Vec<VolumeConnector>,
    /// Sorted by `boot_index`.
    pub volume_targets: Vec<VolumeTarget>,
    /// The node's traits, sorted.
    #[serde(default)]
    pub traits: Vec<String>,
}

impl NodeRecord {
    /// The port, connector or target with this UUID.
    pub fn child(&self, kind: ChildKind, uuid: &str) -> Option<Child> {
        match kind {
            ChildKind::Port => self.ports.iter().find(|p| p.uuid == uuid).cloned().map(Child::Port),
            ChildKind::Connector => self
                .volume_connectors
                .iter()
                .find(|c| c.uuid == uuid)
                .cloned()
                .map(Child::Connector),
            ChildKind::Target => {
                self.volume_targets.iter().find(|t| t.uuid == uuid).cloned().map(Child::Target)
            }
        }
    }
}

/// Parses a connector id according to its type and returns its canonical form: MACs and WWNs
/// normalised, IQNs and IPs checked, port/portgroup ids checked as UUIDs.
pub fn canonical_connector_id(
    connector_type: ConnectorType,
    id: &str,
) -> Result<String, ValueError> {
    Ok(match connector_type {
        ConnectorType::Iqn => id.parse::<IscsiName>()?.to_string(),
        ConnectorType::Ip => id
            .parse::<std::net::IpAddr>()
            .map_err(|_| ValueError(format!("{id:?} is not an IP address")))?
            .to_string(),
        ConnectorType::Mac => id.parse::<MacAddr>()?.to_string(),
        ConnectorType::Wwnn | ConnectorType::Wwpn => id.parse::<Wwn>()?.to_string(),
        ConnectorType::Port | ConnectorType::Portgroup => uuid::Uuid::parse_str(id)
            .map_err(|_| ValueError(format!("{id:?} is not a UUID")))?
            .hyphenated()
            .to_string(),
    })
}

/// Checks a node name: 1-255 characters of RFC 3986's unreserved set, as Ironic allows.
pub fn check_node_name(name: &str) -> Result<(), ValueError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
    if ok {
        Ok(())
    } else {
        Err(ValueError(format!(
            "{name:?} is not a node name (1-255 characters: letters, digits, '-', '.', '_', '~')"
        )))
    }
}

/// Checks a UUID given by the operator and returns it in hyphenated lowercase form.
pub fn canonical_uuid(text: &str) -> Result<String, ValueError> {
    uuid::Uuid::parse_str(text)
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| ValueError(format!("{text:?} is not a UUID")))
}

/// A fresh random UUID.
pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}
