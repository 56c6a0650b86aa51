//! RAID configuration asked for a node (Ironic's `target_raid_config`): the logical disk
//! properties a RAID interface takes (`GET /v1/drivers/{name}/raid/logical_disk_properties`)
//! and the check of a configuration against them (`PUT /v1/nodes/{node}/states/raid`). The
//! field names and value sets are Ironic's RAID schema, so a configuration written for Ironic
//! is judged alike. Pure: no storage, no API.

use serde_json::{Map, Value};

use super::ValueError;

/// Each logical disk property, with what it means (required ones say so).
pub const LOGICAL_DISK_PROPERTIES: &[(&str, &str)] = &[
    (
        "raid_level",
        "The RAID level of the logical disk: one of JBOD, 0, 1, 2, 5, 6, 1+0, 5+0, 6+0. Required.",
    ),
    (
        "size_gb",
        "The size of the logical disk in GiB (a positive integer), or MAX for the space left. Required.",
    ),
    ("volume_name", "The name given to the volume (made up when absent). Optional."),
    (
        "is_root_volume",
        "Whether this logical disk is the root volume (at most one is; false when absent). Optional.",
    ),
    (
        "share_physical_disks",
        "Whether other logical disks may use the same physical disks (false when absent). Optional.",
    ),
    ("disk_type", "The kind of physical disk wanted: hdd or ssd (any when absent). Optional."),
    (
        "interface_type",
        "The interface of the physical disks wanted: sata, scsi or sas (any when absent). Optional.",
    ),
    (
        "number_of_physical_disks",
        "How many physical disks back it (a positive integer; the level's minimum when absent). Optional.",
    ),
    ("controller", "The RAID controller to use (the driver picks one when absent). Optional."),
    (
        "physical_disks",
        "The physical disks to use, as a list of names; needs controller. Optional.",
    ),
];

const RAID_LEVELS: &[&str] = &["JBOD", "0", "1", "2", "5", "6", "1+0", "5+0", "6+0"];

/// Checks a `target_raid_config`: an empty object clears it; otherwise exactly
/// `{"logical_disks": [...]}` with at least one disk, each of the properties above with values
/// of their kind, `raid_level` and `size_gb` present, at most one root volume. Answers the
/// object to store.
pub fn validate_target(value: &Value) -> Result<Map<String, Value>, ValueError> {
    let Value::Object(config) = value else {
        return Err(ValueError(format!(
            "the RAID configuration must be a JSON object, not {value}"
        )));
    };
    if config.is_empty() {
        return Ok(Map::new());
    }
    if let Some(other) = config.keys().find(|k| *k != "logical_disks") {
        return Err(ValueError(format!(
            "unknown field {other:?} in the RAID configuration: only \"logical_disks\" is allowed"
        )));
    }
    let disks = match config.get("logical_disks") {
        Some(Value::Array(disks)) if !disks.is_empty() => disks,
        _ => {
            return Err(ValueError(
                "logical_disks: a non-empty list of logical disks is required".into(),
            ));
        }
    };
    for (i, disk) in disks.iter().enumerate() {
        logical_disk(disk).map_err(|e| ValueError(format!("logical_disks[{i}]: {e}")))?;
    }
    let roots =
        disks.iter().filter(|d| d.get("is_root_volume") == Some(&Value::Bool(true))).count();
    if roots > 1 {
        return Err(ValueError(format!(
            "logical_disks: at most one logical disk may be the root volume ({roots} are)"
        )));
    }
    Ok(config.clone())
}

fn logical_disk(disk: &Value) -> Result<(), String> {
    let Value::Object(disk) = disk else {
        return Err(format!("a logical disk must be a JSON object, not {disk}"));
    };
    for (key, value) in disk {
        let fits = match key.as_str() {
            "raid_level" => value.as_str().is_some_and(|l| RAID_LEVELS.contains(&l)),
            "size_gb" => value.as_u64().is_some_and(|n| n > 0) || value == "MAX",
            "volume_name" | "controller" => value.is_string(),
            "is_root_volume" | "share_physical_disks" => value.is_boolean(),
            "disk_type" => matches!(value.as_str(), Some("hdd" | "ssd")),
            "interface_type" => matches!(value.as_str(), Some("sata" | "scsi" | "sas")),
            "number_of_physical_disks" => value.as_u64().is_some_and(|n| n > 0),
            "physical_disks" => value.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            _ => return Err(format!("unknown logical disk property {key:?}")),
        };
        if !fits {
            let wanted = LOGICAL_DISK_PROPERTIES
                .iter()
                .find(|(name, _)| name == key)
                .map_or("", |(_, what)| *what);
            return Err(format!("{key}: {value} is not valid. {wanted}"));
        }
    }
    for required in ["raid_level", "size_gb"] {
        if !disk.contains_key(required) {
            return Err(format!("{required} is required"));
        }
    }
    if disk.contains_key("physical_disks") && !disk.contains_key("controller") {
        return Err("physical_disks needs controller".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(value: Value) -> String {
        validate_target(&value).unwrap_err().0
    }

    #[test]
    fn a_configuration_is_checked_as_ironics_schema_would() {
        let good = json!({"logical_disks": [
            {"size_gb": 100, "raid_level": "1", "is_root_volume": true, "controller": "RAID.1",
             "physical_disks": ["d0", "d1"], "disk_type": "ssd", "interface_type": "sas"},
            {"size_gb": "MAX", "raid_level": "5", "number_of_physical_disks": 3,
             "volume_name": "data", "share_physical_disks": false}]});
        assert_eq!(Value::Object(validate_target(&good).unwrap()), good);
        assert!(validate_target(&json!({})).unwrap().is_empty());

        assert!(refused(json!([])).contains("JSON object"));
        assert!(refused(json!({"logical_disks": []})).contains("non-empty"));
        assert!(refused(json!({"logical_disks": [], "x": 1})).contains("\"x\""));
        assert!(
            refused(json!({"logical_disks": [{"size_gb": 1}]})).contains("raid_level is required")
        );
        assert!(
            refused(json!({"logical_disks": [{"raid_level": "7", "size_gb": 1}]}))
                .contains("raid_level: \"7\" is not valid")
        );
        assert!(
            refused(json!({"logical_disks": [{"raid_level": "0", "size_gb": 0}]}))
                .contains("size_gb")
        );
        assert!(
            refused(json!({"logical_disks": [{"raid_level": "0", "size_gb": 1, "foo": 1}]}))
                .contains("unknown logical disk property \"foo\"")
        );
        assert!(
            refused(json!({"logical_disks": [
            {"raid_level": "0", "size_gb": 1, "physical_disks": ["a"]}]}))
            .contains("needs controller")
        );
        let two_roots = json!({"logical_disks": [
            {"raid_level": "0", "size_gb": 1, "is_root_volume": true},
            {"raid_level": "1", "size_gb": 2, "is_root_volume": true}]});
        assert!(refused(two_roots).contains("at most one"));
        assert!(refused(json!({"logical_disks": [1]})).starts_with("logical_disks[0]:"));
    }
}
