//! What a refused admin form had in it, to show it again ([`Typed`]): its fields as typed,
//! secrets left out, JSON fields with their secrets masked even when they do not parse, and the
//! field the refusal is about (for the focus and the summary's link). A part of `forms`.

use super::*;

/// What a refused form had in it, to show it again.
#[derive(Debug, Clone, Default)]
pub(in crate::admin) struct Typed {
    /// Which form (`edit-node`, `add-targets`, `targets-<uuid>`, ...).
    pub(in crate::admin) form: String,
    /// Its fields as typed, secrets left out.
    pub(in crate::admin) values: HashMap<String, String>,
    /// The field the refusal is about, when known.
    pub(in crate::admin) field: Option<&'static str>,
}

/// Fields never shown again: secrets are typed again.
const UNECHOED: &[&str] = &["csrf", "auth_password", "bmc_password", "confirm"];

/// Fields typed as JSON: shown again with their secrets masked.
const JSON_FIELDS: &[&str] = &["driver_info", "instance_info", "properties"];

pub(super) fn typed_values(form: &HashMap<String, String>) -> HashMap<String, String> {
    form.iter()
        .filter(|(k, _)| !UNECHOED.contains(&k.as_str()))
        .map(|(k, v)| {
            let v = if JSON_FIELDS.contains(&k.as_str()) { mask_typed_json(v) } else { v.clone() };
            (k.clone(), v)
        })
        .collect()
}

/// JSON as typed, to show again, with the value of every secret key (`secrets::is_secret_key`)
/// replaced by the mask, even when the text does not parse (the typo that got it refused):
/// string literals are scanned, and a literal followed by `:` is a key.
pub(super) fn mask_typed_json(text: &str) -> String {
    if let Ok(mut value) = serde_json::from_str::<Value>(text) {
        bootvol_core::secrets::mask(&mut value);
        return serde_json::to_string_pretty(&value).unwrap_or_default();
    }
    mask_unparsed(text)
}

/// [`mask_typed_json`] of text that does not parse: its string literals scanned, a secret
/// key's value (a literal or a bare value up to its end) masked.
fn mask_unparsed(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut secret_value = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            let end = i.min(chars.len());
            i = (i + 1).min(chars.len());
            let literal: String = chars[start..i].iter().collect();
            if secret_value {
                out.push_str(&format!("\"{}\"", bootvol_core::secrets::MASK));
                secret_value = false;
                continue;
            }
            out.push_str(&literal);
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if next == Some(&':') {
                let key: String = chars[start + 1..end].iter().collect();
                secret_value = bootvol_core::secrets::is_secret_key(&key);
            }
            continue;
        }
        if secret_value && !c.is_whitespace() && c != ':' {
            if matches!(c, '{' | '[') {
                secret_value = false;
            } else {
                // A bare value (a number, or text that is not JSON): masked to its end.
                while i < chars.len() && !matches!(chars[i], ',' | '}' | ']' | '\n') {
                    i += 1;
                }
                out.push_str(&format!("\"{}\"", bootvol_core::secrets::MASK));
                secret_value = false;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The create form's field a refusal is about: `kind` is what was refused (`node`, `port`,
/// `volume connector`, `volume target`), `message` why.
pub(super) fn create_field(kind: &str, message: &str) -> &'static str {
    let m = message.to_lowercase();
    match kind {
        "port" => "mac",
        "volume connector" => "connector_iqn",
        "volume target" if m.contains("portal") => "target_portal",
        "volume target" if m.contains("lun") => "target_lun",
        "volume target" if m.contains("auth") || m.contains("chap") => "auth_username",
        "volume target" if m.contains("iqn") => "target_iqn",
        "volume target" => "volume_id",
        _ if m.contains("password") => "bmc_password",
        _ if m.contains("redfish_") || m.contains("ipmi_") || m.contains("driver_info") => {
            "bmc_address"
        }
        _ if m.contains("capabilit") => "capabilities",
        _ if m.contains("storage_interface") => "storage_interface",
        _ if m.contains("driver") => "driver",
        _ => "name",
    }
}

/// The field of a node page's form (`edit-node`, `add-ports`, `targets-<uuid>`...) that a
/// refusal is about, for the focus and the summary's link: the one it names, else the form's
/// first.
pub(in crate::admin) fn field_of(form: &str, message: &str) -> &'static str {
    let m = message.to_lowercase();
    match form.split_once('-').map_or(form, |(_, kind)| kind) {
        "node" => create_field("node", message),
        "ports" => "address",
        "connectors" if m.contains("type") && !m.contains("connector_id") => "type",
        "connectors" => "connector_id",
        "targets" if m.contains("boot_index") && !m.contains("volume target boot_index") => {
            "boot_index"
        }
        "targets" if m.contains("volume_id") => "volume_id",
        "targets" if m.contains("volume_type") => "volume_type",
        "targets" => "properties",
        _ => "name",
    }
}
