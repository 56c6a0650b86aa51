//! What groups nodes and ports, with Ironic's field names: a chassis (nodes refer to one by
//! `chassis_uuid`) as a plain value, and the checks of its operator fields. Owns their shape
//! and rules only; how they are stored is the database crate's business.

use super::{JsonMap, ValueError};

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

#[cfg(test)]
mod tests {
    use super::*;

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
