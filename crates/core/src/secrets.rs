//! Which JSON fields are secrets, and masking them.
//!
//! BMC passwords live in `driver_info`, CHAP secrets in volume target `properties`, config
//! drives in `instance_info`. Every output but the boot script served to the node itself goes
//! through [`mask`]. Pure.

use serde_json::{Map, Value};

/// What a masked secret is shown as (Ironic's form).
pub const MASK: &str = "******";

/// Whether a JSON key names a secret: any key containing `password`, `passwd`, `pswd`,
/// `secret` or `token`, a `*_key`, or a config drive.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "passwd", "pswd", "secret", "token"].iter().any(|word| key.contains(word))
        || key.ends_with("_key")
        || key == "configdrive"
}

/// Replaces every secret value (at any depth) with [`MASK`]; null values stay null.
pub fn mask(value: &mut Value) {
    match value {
        Value::Object(map) => mask_map(map),
        Value::Array(items) => items.iter_mut().for_each(mask),
        _ => {}
    }
}

/// [`mask`] for a JSON object.
pub fn mask_map(map: &mut Map<String, Value>) {
    for (key, value) in map.iter_mut() {
        if is_secret_key(key) && !value.is_null() {
            *value = Value::from(MASK);
        } else {
            mask(value);
        }
    }
}

/// Every secret value (at any depth) as it would print: strings as they are, numbers in
/// decimal; empty strings and other JSON types are left out.
pub fn secret_values(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect_secrets(value, &mut found);
    found
}

fn collect_secrets(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match value {
                    Value::String(s) if is_secret_key(key) && !s.is_empty() => {
                        found.push(s.clone())
                    }
                    Value::Number(n) if is_secret_key(key) => found.push(n.to_string()),
                    other => collect_secrets(other, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_secrets(v, found)),
        _ => {}
    }
}

/// Puts stored secrets back where `incoming` carries [`MASK`], so that an exported inventory
/// applies without losing secrets. Returns the path of a masked field with nothing stored.
pub fn restore_masked(
    incoming: &mut Map<String, Value>,
    stored: Option<&Map<String, Value>>,
) -> Result<(), String> {
    for (key, value) in incoming.iter_mut() {
        let old = stored.and_then(|s| s.get(key));
        match value {
            Value::String(s) if s == MASK && is_secret_key(key) => match old {
                Some(old) if old.as_str() != Some(MASK) && !old.is_null() => *value = old.clone(),
                _ => return Err(key.clone()),
            },
            Value::Object(inner) => restore_masked(inner, old.and_then(Value::as_object))
                .map_err(|path| format!("{key}.{path}"))?,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_secrets_at_any_depth() {
        let mut value = json!({"redfish_password": "pw", "auth_password": "chap", "auth_username": "u",
            "nested": {"auth_reverse_password": "r", "list": [{"app_cred_secret": "s"}]}, "none_password": null});
        mask(&mut value);
        assert_eq!(
            value,
            json!({"redfish_password": MASK, "auth_password": MASK, "auth_username": "u",
            "nested": {"auth_reverse_password": MASK, "list": [{"app_cred_secret": MASK}]}, "none_password": null})
        );
    }

    #[test]
    fn finds_secret_values_at_any_depth() {
        let value = json!({"auth_password": "chap", "auth_username": "u", "empty_secret": "",
            "nested": [{"pin_password": 1234, "x_token": null}], "other": "chap2"});
        assert_eq!(secret_values(&value), ["chap", "1234"]);
    }

    #[test]
    fn restores_masked_secrets_from_the_stored_copy() {
        let stored = json!({"auth_password": "chap", "d": {"ipmi_password": "pw"}});
        let mut incoming =
            json!({"auth_password": MASK, "d": {"ipmi_password": MASK}, "auth_username": "u"});
        restore_masked(incoming.as_object_mut().unwrap(), stored.as_object()).unwrap();
        assert_eq!(
            incoming,
            json!({"auth_password": "chap", "d": {"ipmi_password": "pw"}, "auth_username": "u"})
        );
        let mut orphan = json!({"d": {"ipmi_password": MASK}});
        assert_eq!(
            restore_masked(orphan.as_object_mut().unwrap(), None).unwrap_err(),
            "d.ipmi_password"
        );
    }
}

#[cfg(test)]
mod debug_tests {
    #[test]
    fn nodes_and_targets_print_masked() {
        let record: crate::model::NodeRecord = serde_json::from_value(serde_json::json!({
            "node": {"uuid": "u", "name": "n", "driver": "redfish", "driver_info": {"redfish_password": "bmc-pw-1"},
                "properties": {}, "instance_info": {}, "driver_internal_info": {}, "extra": {}, "storage_interface": null,
                "boot_interface": "ipxe", "deploy_interface": "direct", "power_state": null, "target_power_state": null,
                "provision_state": "available", "target_provision_state": null, "maintenance": false,
                "maintenance_reason": null, "last_error": null, "created_at": null, "updated_at": null},
            "ports": [], "volume_connectors": [],
            "volume_targets": [{"uuid": "t", "volume_type": "iscsi", "boot_index": 0, "volume_id": "v", "extra": {},
                "properties": {"auth_password": "chap-pw-2"}}]}))
        .unwrap();
        let printed = format!("{record:?}");
        assert!(!printed.contains("bmc-pw-1") && !printed.contains("chap-pw-2"), "{printed}");
        assert!(printed.contains("******"));
    }
}
