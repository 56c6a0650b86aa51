//! What groups nodes and ports, with Ironic's field names: a chassis (nodes refer to one by
//! `chassis_uuid`) and a port group (a node's bond of ports, which refer to it by
//! `portgroup_uuid`) as plain values, and the checks of their operator fields. Owns their shape
//! and rules only; how they are stored is the database crate's business. A port group never
//! changes how a port's MAC finds its node: it is not part of the boot decision.

use super::{JsonMap, MacAddr, ValueError};

/// The longest chassis description Ironic takes.
pub const DESCRIPTION_MAX: usize = 255;

/// A chassis: a description and `extra`, which nodes may belong to.
#[derive(Debug, Clone, PartialEq)]
pub struct Chassis {
    pub uuid: String,
    pub description: Option<String>,
    pub extra: JsonMap,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

/// What an operator writes of a chassis (the rest is the database's).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChassisSpec {
    pub description: Option<String>,
    pub extra: JsonMap,
}

impl ChassisSpec {
    /// The spec, its description checked: at most [`DESCRIPTION_MAX`] characters, no control
    /// characters but newlines and tabs.
    pub fn new(description: Option<String>, extra: JsonMap) -> Result<ChassisSpec, ValueError> {
        if let Some(text) = &description {
            if text.chars().count() > DESCRIPTION_MAX {
                return Err(ValueError(format!(
                    "description: at most {DESCRIPTION_MAX} characters (this one has {})",
                    text.chars().count()
                )));
            }
            if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
                return Err(ValueError("description: control characters are not allowed".into()));
            }
        }
        Ok(ChassisSpec { description, extra })
    }
}

/// A port group's mode when none is given (Ironic's `default_portgroup_mode`).
pub const DEFAULT_MODE: &str = "active-backup";

/// A node's port group.
#[derive(Debug, Clone, PartialEq)]
pub struct Portgroup {
    pub uuid: String,
    pub node_uuid: String,
    pub spec: PortgroupSpec,
    pub internal_info: JsonMap,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

/// What an operator writes of a port group.
#[derive(Debug, Clone, PartialEq)]
pub struct PortgroupSpec {
    /// Unique when set; a logical name (Ironic's: letters, digits, `-`, `.`, `_`, `~`).
    pub name: Option<String>,
    /// Unique among port groups when set.
    pub address: Option<MacAddr>,
    pub extra: JsonMap,
    pub properties: JsonMap,
    pub mode: String,
    pub standalone_ports_supported: bool,
}

impl Default for PortgroupSpec {
    fn default() -> PortgroupSpec {
        PortgroupSpec {
            name: None,
            address: None,
            extra: JsonMap::new(),
            properties: JsonMap::new(),
            mode: DEFAULT_MODE.into(),
            standalone_ports_supported: true,
        }
    }
}

/// Whether `text` is a logical name as Ironic has it (RFC 3986's unreserved characters, at most
/// 255 of them): what names a port group (or a node) besides its UUID.
pub fn is_logical_name(text: &str) -> bool {
    super::check_node_name(text).is_ok()
}

impl PortgroupSpec {
    /// Checks the name (a logical name that is not a UUID's shape is not required: Ironic's
    /// rule) and the mode (1 to 255 printable characters).
    pub fn check(&self) -> Result<(), ValueError> {
        if let Some(name) = &self.name
            && !is_logical_name(name)
        {
            return Err(ValueError(format!(
                "Cannot use invalid name {name:?} for a port group: letters, digits, '-', '.', '_' and '~' only, at most 255"
            )));
        }
        if self.mode.is_empty()
            || self.mode.chars().count() > 255
            || self.mode.chars().any(char::is_control)
        {
            return Err(ValueError(
                "mode: 1 to 255 characters, without control characters (such as active-backup or 802.3ad)"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_group_name_is_a_logical_name_and_its_mode_is_text() {
        let spec = |name: &str, mode: &str| PortgroupSpec {
            name: Some(name.into()),
            mode: mode.into(),
            ..Default::default()
        };
        assert!(spec("bond0.a_b~1", "802.3ad").check().is_ok());
        assert!(spec("bond 0", "802.3ad").check().unwrap_err().0.contains("invalid name"));
        assert!(spec("bond0", "").check().is_err());
        assert!(spec(&"x".repeat(256), "balance-rr").check().is_err());
        assert_eq!(PortgroupSpec::default().mode, "active-backup");
        assert!(PortgroupSpec::default().standalone_ports_supported);
    }

    #[test]
    fn a_description_is_ironics_length_and_printable() {
        let ok = ChassisSpec::new(Some("В Україні ♡ OpenStack!".into()), JsonMap::new());
        assert!(ok.is_ok());
        assert!(ChassisSpec::new(Some("é".repeat(255)), JsonMap::new()).is_ok());
        let long = ChassisSpec::new(Some("x".repeat(256)), JsonMap::new()).unwrap_err();
        assert!(long.0.contains("at most 255"), "{long}");
        assert!(ChassisSpec::new(Some("a\u{7}b".into()), JsonMap::new()).is_err());
        assert!(ChassisSpec::new(None, JsonMap::new()).is_ok());
    }
}
