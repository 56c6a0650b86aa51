//! Which microversion each field, filter and endpoint appears at, as Ironic's API history has
//! it up to 1.38 (the highest bootvol serves): plain tables and the functions that read them.
//! A field a request's version does not know is hidden from answers, and refused (406) in a
//! create or a patch. Pure.

use serde_json::Value;

/// Node fields newer than 1.1, and the microversion that added each.
pub(super) const NODE_FIELDS: &[(&str, u32)] = &[
    ("driver_internal_info", 3),
    ("name", 5),
    ("inspection_started_at", 6),
    ("inspection_finished_at", 6),
    ("clean_step", 7),
    ("raid_config", 12),
    ("target_raid_config", 12),
    ("network_interface", 20),
    ("resource_class", 21),
    ("boot_interface", 31),
    ("console_interface", 31),
    ("deploy_interface", 31),
    ("inspect_interface", 31),
    ("management_interface", 31),
    ("power_interface", 31),
    ("raid_interface", 31),
    ("vendor_interface", 31),
    ("volume", 32),
    ("storage_interface", 33),
    ("traits", 37),
    ("rescue_interface", 38),
];

/// Port fields newer than 1.1.
pub(super) const PORT_FIELDS: &[(&str, u32)] = &[
    ("internal_info", 18),
    ("local_link_connection", 19),
    ("pxe_enabled", 19),
    ("portgroup_uuid", 24),
    ("physical_network", 34),
];

/// Port group fields newer than 1.23 (port groups appear at 1.23).
pub(super) const PORTGROUP_FIELDS: &[(&str, u32)] = &[("mode", 26), ("properties", 26)];

/// Port list filters newer than 1.1.
pub(super) const PORT_FILTERS: &[(&str, u32)] = &[("portgroup", 24)];

/// Driver fields newer than 1.1 (`type` and the interface lists: 1.30; storage: 1.33; rescue:
/// 1.38).
pub(super) fn driver_field_minor(field: &str) -> u32 {
    if field.contains("storage_interface") {
        33
    } else if field.contains("rescue_interface") {
        38
    } else if field == "type" || field.ends_with("_interface") || field.ends_with("_interfaces") {
        30
    } else {
        1
    }
}

/// Node list filters and the microversion that added each.
pub(super) const NODE_FILTERS: &[(&str, u32)] = &[
    ("instance_uuid", 1),
    ("associated", 1),
    ("maintenance", 1),
    ("provision_state", 9),
    ("driver", 16),
    ("resource_class", 21),
];

/// Endpoints (the first segment under a node, or a top-level collection) and the microversion
/// that added each.
pub(super) const ENDPOINTS: &[(&str, u32)] = &[
    ("states/raid", 12),
    ("raid/logical_disk_properties", 12),
    ("lookup", 22),
    ("heartbeat", 22),
    ("portgroups", 23),
    ("nodes/portgroups", 24),
    ("portgroups/ports", 24),
    ("vifs", 28),
    ("management/inject_nmi", 29),
    ("volume", 32),
    ("traits", 37),
];

/// The microversion that added `name` in `table` (1 when it is not listed).
pub(super) fn minor_of(table: &[(&str, u32)], name: &str) -> u32 {
    table.iter().find(|(n, _)| *n == name).map_or(1, |(_, m)| *m)
}

/// Whether `field` of `table` exists at microversion `minor`.
pub(super) fn visible(table: &[(&str, u32)], field: &str, minor: u32) -> bool {
    minor >= minor_of(table, field)
}

/// Removes the members of `doc` that microversion `minor` does not know.
pub(super) fn hide(doc: &mut Value, table: &[(&str, u32)], minor: u32) {
    if let Value::Object(map) = doc {
        map.retain(|key, _| visible(table, key, minor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_below_their_version_are_hidden() {
        let full = json!({"uuid": "u", "name": "n", "network_interface": "flat",
            "resource_class": "c", "traits": [], "rescue_interface": "no-rescue",
            "storage_interface": "noop", "boot_interface": "ipxe"});
        for (minor, expect) in [
            (1, vec!["uuid"]),
            (5, vec!["name", "uuid"]),
            (20, vec!["name", "network_interface", "uuid"]),
            (21, vec!["name", "network_interface", "resource_class", "uuid"]),
            (31, vec!["boot_interface", "name", "network_interface", "resource_class", "uuid"]),
            (
                37,
                vec![
                    "boot_interface",
                    "name",
                    "network_interface",
                    "resource_class",
                    "storage_interface",
                    "traits",
                    "uuid",
                ],
            ),
        ] {
            let mut doc = full.clone();
            hide(&mut doc, NODE_FIELDS, minor);
            let mut keys: Vec<&str> = doc.as_object().unwrap().keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, expect, "at 1.{minor}");
        }
        assert!(visible(NODE_FIELDS, "rescue_interface", 38));
        assert!(!visible(PORT_FIELDS, "physical_network", 33));
        assert_eq!(driver_field_minor("default_storage_interface"), 33);
        assert_eq!(driver_field_minor("enabled_rescue_interfaces"), 38);
        assert_eq!(driver_field_minor("default_boot_interface"), 30);
        assert_eq!(driver_field_minor("hosts"), 1);
        assert_eq!(minor_of(ENDPOINTS, "vifs"), 28);
    }
}
