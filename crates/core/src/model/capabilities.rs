//! Capabilities, both kinds the spec names.
//!
//! *Node capabilities* live in `properties.capabilities` as Ironic's `"key:value,key:value"`
//! string (`iscsi_boot:true`). *Interface capability tags* are declared by boot and deploy
//! interfaces (`iscsi_volume_boot`, `iscsi_volume_deploy`...); [`check_capability`] is the spec's
//! helper. Pure: no I/O.

use std::collections::BTreeMap;
use std::str::FromStr;

use super::{
    BootInterfaceName, DeployInterfaceName, ValueError, VolumeType, parse_capability_bool,
};

/// The boolean node capabilities bootvol reads. `fiberchannel_boot` is the spec's spelling of
/// `fibre_channel_boot` and is read as the same flag.
pub const BOOLEAN_NODE_CAPABILITIES: &[&str] = &[
    "iscsi_boot",
    "fibre_channel_boot",
    "fiberchannel_boot",
    "hba_boot",
    "nfs_boot",
    "aoe_boot",
    "http_boot",
];

/// A node's parsed `properties.capabilities`, keys in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeCapabilities(BTreeMap<String, String>);

impl NodeCapabilities {
    /// Whether a boolean capability is `true`; a missing key is `false`.
    pub fn flag(&self, key: &str) -> bool {
        let value =
            |k: &str| self.0.get(k).is_some_and(|v| parse_capability_bool(v).unwrap_or(false));
        match key {
            "fibre_channel_boot" | "fiberchannel_boot" => {
                value("fibre_channel_boot") || value("fiberchannel_boot")
            }
            _ => value(key),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The `<kind>_boot` capability a volume type needs (`iscsi_boot` for `iscsi`...).
    pub fn boot_flag_for(volume_type: &VolumeType) -> String {
        format!("{volume_type}_boot")
    }
}

impl FromStr for NodeCapabilities {
    type Err = ValueError;

    /// Parses `"key:value,key:value"`; boolean capabilities must say `true` or `false`.
    fn from_str(text: &str) -> Result<Self, ValueError> {
        let mut map = BTreeMap::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once(':') else {
                return Err(ValueError(format!("capability {pair:?} is not key:value")));
            };
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty()
                || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(ValueError(format!(
                    "capability name {key:?} must be letters, digits, '_' or '-'"
                )));
            }
            if BOOLEAN_NODE_CAPABILITIES.contains(&key) {
                parse_capability_bool(value)
                    .map_err(|e| ValueError(format!("capability {key}: {e}")))?;
            }
            if map.insert(key.to_owned(), value.to_owned()).is_some() {
                return Err(ValueError(format!("capability {key} is given twice")));
            }
        }
        Ok(NodeCapabilities(map))
    }
}

/// The spec's helper: whether an interface's capability tags include `tag`; false when missing.
pub fn check_capability(tags: &[&str], tag: &str) -> bool {
    tags.contains(&tag)
}

/// The tag a boot interface needs to boot a volume type: `<type>_volume_boot`.
pub fn volume_boot_tag(volume_type: &VolumeType) -> String {
    format!("{volume_type}_volume_boot")
}

/// The tag a deploy interface needs to write an image onto a volume type: `<type>_volume_deploy`.
pub fn volume_deploy_tag(volume_type: &VolumeType) -> String {
    format!("{volume_type}_volume_deploy")
}

/// Capability tags each boot interface declares.
pub fn boot_interface_tags(interface: BootInterfaceName) -> &'static [&'static str] {
    match interface {
        BootInterfaceName::Ipxe => &[
            "iscsi_volume_boot",
            "fibre_channel_volume_boot",
            "aoe_volume_boot",
            "nfs_volume_boot",
            "http_volume_boot",
            "ramdisk_boot",
            "ipxe_boot",
            "pxe_boot",
        ],
        BootInterfaceName::Pxe => &["ramdisk_boot", "pxe_boot"],
        BootInterfaceName::Fake => &[],
    }
}

/// Capability tags each deploy interface declares. `direct` writes images onto SAN volumes the
/// node reaches through an HBA (scenario 4).
pub fn deploy_interface_tags(interface: DeployInterfaceName) -> &'static [&'static str] {
    match interface {
        DeployInterfaceName::Direct => &["iscsi_volume_deploy", "fibre_channel_volume_deploy"],
        DeployInterfaceName::Ramdisk | DeployInterfaceName::Fake => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ironic_capability_strings() {
        let caps: NodeCapabilities =
            "iscsi_boot:True,boot_mode:uefi, hba_boot:false".parse().unwrap();
        assert!(caps.flag("iscsi_boot"));
        assert!(!caps.flag("hba_boot"));
        assert!(!caps.flag("nfs_boot"));
        assert_eq!(caps.get("boot_mode"), Some("uefi"));
        assert_eq!("".parse::<NodeCapabilities>().unwrap(), NodeCapabilities::default());
    }

    #[test]
    fn spec_spelling_of_fibre_channel_is_the_same_flag() {
        let caps: NodeCapabilities = "fiberchannel_boot:true".parse().unwrap();
        assert!(caps.flag("fibre_channel_boot"));
        assert!(caps.flag("fiberchannel_boot"));
    }

    #[test]
    fn refuses_malformed_capabilities() {
        for bad in ["iscsi_boot", "iscsi_boot:yes", "a b:c", "iscsi_boot:true,iscsi_boot:false"] {
            assert!(bad.parse::<NodeCapabilities>().is_err(), "{bad}");
        }
    }

    #[test]
    fn check_capability_is_false_when_missing() {
        let tags = boot_interface_tags(BootInterfaceName::Ipxe);
        assert!(check_capability(tags, "iscsi_volume_boot"));
        assert!(!check_capability(tags, "iscsi_volume_deploy"));
        assert!(!check_capability(
            boot_interface_tags(BootInterfaceName::Pxe),
            "iscsi_volume_boot"
        ));
        assert!(!check_capability(&[], "anything"));
    }
}
