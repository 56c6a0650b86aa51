//! Inventory files: the edge where operator-written nodes become validated values.
//!
//! [`parse`] reads JSON (or TOML) into [`NodeSpec`]s, checking every field and naming the node
//! and field of the first problem of each node; nothing unchecked reaches the database.
//! [`export`] writes the inverse, with every secret masked. Pure: text in, values out.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::config::Config;
use crate::model::hardware::{self, Interfaces};
use crate::model::{
    BootInterfaceName, Child, ChildKind, ConnectorType, DeployInterfaceName, Driver, JsonMap,
    MacAddr, Node, NodeRecord, ProvisionState, StorageInterfaceName, VolumeTarget, VolumeType,
    canonical_connector_id, canonical_uuid, check_file_name, check_nfs_export, check_node_name,
    check_script_value,
};
use crate::secrets;

/// A node as the inventory file describes it, validated. `None` means "not given": keep what
/// is stored (or the default for a new node).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub uuid: Option<String>,
    pub name: String,
    pub driver: Driver,
    pub driver_info: JsonMap,
    pub properties: JsonMap,
    pub instance_info: JsonMap,
    pub extra: JsonMap,
    pub storage_interface: Option<StorageInterfaceName>,
    pub boot_interface: BootInterfaceName,
    pub deploy_interface: DeployInterfaceName,
    /// The other interfaces, each checked against the hardware type (`None`: its default).
    pub interfaces: Interfaces,
    pub instance_uuid: Option<String>,
    pub resource_class: Option<String>,
    pub provision_state: Option<ProvisionState>,
    pub maintenance: Option<bool>,
    pub ports: Vec<PortSpec>,
    pub volume_connectors: Vec<ConnectorSpec>,
    pub volume_targets: Vec<TargetSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PortSpec {
    pub uuid: Option<String>,
    pub address: MacAddr,
    pub extra: JsonMap,
    pub pxe_enabled: bool,
    pub local_link_connection: JsonMap,
    pub physical_network: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorSpec {
    pub uuid: Option<String>,
    pub connector_type: ConnectorType,
    pub connector_id: String,
    pub extra: JsonMap,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    pub uuid: Option<String>,
    pub volume_type: VolumeType,
    pub boot_index: u32,
    pub volume_id: String,
    /// `None` when the file gives no `properties`: keep the stored connection info (a Cinder
    /// attach writes it).
    pub properties: Option<JsonMap>,
    pub extra: JsonMap,
}

/// One child of a node as given (a port, a volume connector or a volume target), validated.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildSpec {
    Port(PortSpec),
    Connector(ConnectorSpec),
    Target(TargetSpec),
}

impl ChildSpec {
    /// One child of `kind` given as a JSON object, checked as [`parse`] checks it.
    pub fn parse(kind: ChildKind, value: &Value) -> Result<ChildSpec, String> {
        Ok(match kind {
            ChildKind::Port => ChildSpec::Port(port_spec(value)?),
            ChildKind::Connector => ChildSpec::Connector(connector_spec(value)?),
            ChildKind::Target => ChildSpec::Target(target_spec(value)?),
        })
    }

    pub fn kind(&self) -> ChildKind {
        match self {
            ChildSpec::Port(_) => ChildKind::Port,
            ChildSpec::Connector(_) => ChildKind::Connector,
            ChildSpec::Target(_) => ChildKind::Target,
        }
    }
}

impl ChildSpec {
    /// Whether `stored` already is what this spec says (masked secrets restored first).
    pub fn matches(&self, stored: &Child) -> bool {
        match (self, stored) {
            (ChildSpec::Port(p), Child::Port(s)) => {
                p.address == s.address
                    && p.extra == s.extra
                    && p.pxe_enabled == s.more.pxe_enabled
                    && p.local_link_connection == s.more.local_link_connection
                    && p.physical_network == s.more.physical_network
            }
            (ChildSpec::Connector(c), Child::Connector(s)) => {
                c.connector_type == s.connector_type
                    && c.connector_id == s.connector_id
                    && c.extra == s.extra
            }
            (ChildSpec::Target(t), Child::Target(s)) => {
                t.volume_type == s.volume_type
                    && t.boot_index == s.boot_index
                    && t.volume_id == s.volume_id
                    && t.properties.as_ref().is_none_or(|p| p == &s.properties)
                    && t.extra == s.extra
            }
            _ => false,
        }
    }

    /// Puts the stored secrets back where a target's `properties` carry `******`.
    pub fn restore_secrets(&mut self, stored: Option<&Child>) -> Result<(), String> {
        match (self, stored) {
            (ChildSpec::Target(t), Some(Child::Target(s))) => t.restore_secrets(Some(s)),
            (ChildSpec::Target(t), _) => t.restore_secrets(None),
            _ => Ok(()),
        }
    }
}

impl NodeSpec {
    /// Whether `node` differs from this spec in an operator field (the provision state and
    /// maintenance only when the spec gives them).
    pub fn differs_from(&self, node: &Node) -> bool {
        node.name != self.name
            || node.driver != self.driver
            || node.driver_info != self.driver_info
            || node.properties != self.properties
            || node.instance_info != self.instance_info
            || node.extra != self.extra
            || node.storage_interface != self.storage_interface
            || node.boot_interface != self.boot_interface
            || node.deploy_interface != self.deploy_interface
            || node.interfaces != self.interfaces
            || node.instance_uuid != self.instance_uuid
            || node.resource_class != self.resource_class
            || self.provision_state.is_some_and(|p| p != node.provision_state)
            || self.maintenance.is_some_and(|m| m != node.maintenance)
    }
}

/// The message for a masked secret (`******`) given where nothing is stored to keep.
fn nothing_stored(field: &str, path: &str) -> String {
    format!("{field}.{path}: masked (******) but no secret is stored; give the real value")
}

impl NodeSpec {
    /// Puts the stored secrets back where this spec carries `******` (in `driver_info`,
    /// `instance_info`, `properties` and `extra`): a masked value sent back keeps the secret.
    pub fn restore_secrets(&mut self, stored: Option<&Node>) -> Result<(), String> {
        for (field, map, old) in [
            ("driver_info", &mut self.driver_info, stored.map(|n| &n.driver_info)),
            ("instance_info", &mut self.instance_info, stored.map(|n| &n.instance_info)),
            ("properties", &mut self.properties, stored.map(|n| &n.properties)),
            ("extra", &mut self.extra, stored.map(|n| &n.extra)),
        ] {
            secrets::restore_masked(map, old).map_err(|path| nothing_stored(field, &path))?;
        }
        Ok(())
    }
}

impl TargetSpec {
    /// Puts the stored secrets back where `properties` carries `******`.
    pub fn restore_secrets(&mut self, stored: Option<&VolumeTarget>) -> Result<(), String> {
        if let Some(properties) = &mut self.properties {
            secrets::restore_masked(properties, stored.map(|t| &t.properties))
                .map_err(|path| nothing_stored("properties", &path))?;
        }
        Ok(())
    }
}

/// Every problem found, one line per node and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct InventoryError(pub Vec<String>);

/// The format of an inventory file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Toml,
}

impl Format {
    pub fn from_path(path: &std::path::Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("toml") => Format::Toml,
            _ => Format::Json,
        }
    }
}

/// Parses and validates an inventory. All nodes are checked; the error lists every bad one.
pub fn parse(text: &str, format: Format, config: &Config) -> Result<Vec<NodeSpec>, InventoryError> {
    let document: Value = match format {
        Format::Json => serde_json::from_str(text)
            .map_err(|e| InventoryError(vec![format!("not valid JSON: {e}")]))?,
        Format::Toml => {
            let table: toml::Table = toml::from_str(text)
                .map_err(|e| InventoryError(vec![format!("not valid TOML: {e}")]))?;
            serde_json::to_value(table).map_err(|e| InventoryError(vec![e.to_string()]))?
        }
    };
    let mut top = Object::new(&document, "inventory").map_err(|e| InventoryError(vec![e]))?;
    let nodes = top.array("nodes").map_err(|e| InventoryError(vec![e]))?;
    top.finish().map_err(|e| InventoryError(vec![e]))?;
    let mut errors = Vec::new();
    let mut specs = Vec::new();
    for (index, value) in nodes.iter().enumerate() {
        let label = value
            .get("name")
            .and_then(Value::as_str)
            .map_or(format!("nodes[{index}]"), |n| format!("node {n}"));
        match node_spec(value, config) {
            Ok(spec) => specs.push(spec),
            Err(e) => errors.push(format!("{label}: {e}")),
        }
    }
    check_unique(&specs, &mut errors);
    if errors.is_empty() { Ok(specs) } else { Err(InventoryError(errors)) }
}

fn check_unique(specs: &[NodeSpec], errors: &mut Vec<String>) {
    let mut names = HashSet::new();
    let mut macs = HashSet::new();
    let mut connectors = HashSet::new();
    for spec in specs {
        if !names.insert(&spec.name) {
            errors.push(format!("node {}: name: given twice in the file", spec.name));
        }
        for port in &spec.ports {
            if !macs.insert(port.address) {
                errors.push(format!(
                    "node {}: ports: address {} appears twice in the file",
                    spec.name, port.address
                ));
            }
        }
        for c in &spec.volume_connectors {
            if !connectors.insert((c.connector_type, &c.connector_id)) {
                errors.push(format!(
                    "node {}: volume_connectors: {} {} appears twice in the file",
                    spec.name, c.connector_type, c.connector_id
                ));
            }
        }
    }
}

/// One node given as a JSON object (the REST API's create body, or a stored node after a JSON
/// patch), checked exactly as [`parse`] checks a node of a file. Errors name the field.
pub fn parse_node(value: &Value, config: &Config) -> Result<NodeSpec, String> {
    node_spec(value, config)
}

fn node_spec(value: &Value, config: &Config) -> Result<NodeSpec, String> {
    let mut o = Object::new(value, "node")?;
    let name = o.string("name")?.ok_or("name: missing")?;
    check_node_name(&name).map_err(|e| format!("name: {e}"))?;
    let storage_interface = enabled_storage_interface(&mut o, config)?;
    let properties = o.map("properties")?;
    check_capabilities(&properties)?;
    let instance_info = o.map("instance_info")?;
    check_instance_info(&instance_info)?;
    let driver: Driver = o.parsed("driver")?.unwrap_or(Driver::Fake);
    let interfaces = hardware_interfaces(&mut o, driver)?;
    let resource_class = o.string("resource_class")?;
    if let Some(class) = &resource_class
        && (class.is_empty() || class.len() > 80)
    {
        return Err(format!("resource_class: {class:?} must have 1 to 80 characters"));
    }
    let fake_hardware = driver == Driver::FakeHardware;
    let spec = NodeSpec {
        uuid: o.uuid("uuid")?,
        name,
        driver,
        driver_info: o.map("driver_info")?,
        properties,
        instance_info,
        extra: o.map("extra")?,
        storage_interface,
        boot_interface: o.parsed("boot_interface")?.unwrap_or(if fake_hardware {
            BootInterfaceName::Fake
        } else {
            BootInterfaceName::Ipxe
        }),
        deploy_interface: o.parsed("deploy_interface")?.unwrap_or(if fake_hardware {
            DeployInterfaceName::Fake
        } else {
            DeployInterfaceName::Direct
        }),
        interfaces,
        instance_uuid: o.uuid("instance_uuid")?,
        resource_class,
        provision_state: o.parsed("provision_state")?,
        maintenance: o.bool("maintenance")?,
        ports: o.items("ports", port_spec)?,
        volume_connectors: o.items("volume_connectors", connector_spec)?,
        volume_targets: o.items("volume_targets", target_spec)?,
    };
    o.finish()?;
    check_boot_indexes(&spec.volume_targets)?;
    Ok(spec)
}

/// The node's `storage_interface`, if it sets one: only an interface the configuration enables.
fn enabled_storage_interface(
    o: &mut Object,
    config: &Config,
) -> Result<Option<StorageInterfaceName>, String> {
    let storage_interface = o.parsed::<StorageInterfaceName>("storage_interface")?;
    if let Some(s) = storage_interface
        && !config.storage_interface_enabled(s)
    {
        let enabled: Vec<&str> =
            config.default.enabled_storage_interfaces.iter().map(|s| s.as_str()).collect();
        return Err(format!(
            "storage_interface: {s} is not enabled (enabled: {})",
            enabled.join(", ")
        ));
    }
    Ok(storage_interface)
}

/// `properties.capabilities`, if given: a `"key:value,..."` string that parses.
fn check_capabilities(properties: &JsonMap) -> Result<(), String> {
    match properties.get("capabilities") {
        None => Ok(()),
        Some(Value::String(text)) => text
            .parse::<crate::model::capabilities::NodeCapabilities>()
            .map(|_| ())
            .map_err(|e| format!("properties.capabilities: {e}")),
        Some(other) => {
            Err(format!("properties.capabilities: must be a \"key:value,...\" string, not {other}"))
        }
    }
}

/// The hardware interfaces the node names (power, management...), each one `driver` supports.
fn hardware_interfaces(o: &mut Object, driver: Driver) -> Result<Interfaces, String> {
    let mut interfaces = Interfaces::default();
    for kind in Interfaces::KINDS {
        if let Some(value) = o.string(&kind.field())? {
            hardware::check(driver, *kind, &value).map_err(|e| format!("{}: {e}", kind.field()))?;
            interfaces.set(*kind, Some(value));
        }
    }
    Ok(interfaces)
}

/// No two volume targets of one node share a `boot_index`.
fn check_boot_indexes(targets: &[TargetSpec]) -> Result<(), String> {
    let mut boot_indexes = HashSet::new();
    for t in targets {
        if !boot_indexes.insert(t.boot_index) {
            return Err(format!("volume_targets: boot_index {} is used twice", t.boot_index));
        }
    }
    Ok(())
}

fn port_spec(value: &Value) -> Result<PortSpec, String> {
    let mut o = Object::new(value, "port")?;
    let address = o.string("address")?.ok_or("address: missing")?;
    let pxe_enabled = match o.take("pxe_enabled") {
        None | Some(Value::Bool(true)) => true,
        Some(Value::Bool(false)) => false,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(other) => return Err(format!("pxe_enabled: must be true or false, not {other}")),
    };
    let local_link_connection = o.map("local_link_connection")?;
    if let Some(key) = local_link_connection
        .keys()
        .find(|k| !matches!(k.as_str(), "switch_id" | "port_id" | "switch_info"))
    {
        return Err(format!(
            "local_link_connection: {key} is not a key of a local link connection (switch_id, port_id, switch_info)"
        ));
    }
    let physical_network = o.string("physical_network")?;
    if let Some(network) = &physical_network
        && (network.is_empty() || network.len() > 64)
    {
        return Err(format!("physical_network: {network:?} must have 1 to 64 characters"));
    }
    let spec = PortSpec {
        uuid: o.uuid("uuid")?,
        address: address.parse().map_err(|e| format!("address: {e}"))?,
        extra: o.map("extra")?,
        pxe_enabled,
        local_link_connection,
        physical_network,
    };
    o.finish()?;
    Ok(spec)
}

fn connector_spec(value: &Value) -> Result<ConnectorSpec, String> {
    let mut o = Object::new(value, "volume connector")?;
    let connector_type: ConnectorType = o.parsed("type")?.ok_or("type: missing")?;
    let id = o.string("connector_id")?.ok_or("connector_id: missing")?;
    let spec = ConnectorSpec {
        uuid: o.uuid("uuid")?,
        connector_type,
        connector_id: connector_id(connector_type, &id)?,
        extra: o.map("extra")?,
    };
    o.finish()?;
    Ok(spec)
}

/// A connector's id: canonical when it is one of its type (an IQN, a MAC, a WWN...), else kept
/// as given, as Ironic stores any string, when it is 1-255 characters that could appear in a
/// script (so a refused value never reaches the database); `validate` and deploy say why a
/// boot can not use it.
fn connector_id(connector_type: ConnectorType, id: &str) -> Result<String, String> {
    match canonical_connector_id(connector_type, id) {
        Ok(canonical) => Ok(canonical),
        Err(not_canonical) => {
            if id.is_empty() || id.chars().count() > 255 {
                return Err(format!("connector_id: 1 to 255 characters ({not_canonical})"));
            }
            check_script_value(id).map_err(|e| format!("connector_id: {e} ({not_canonical})"))?;
            Ok(id.to_owned())
        }
    }
}

fn target_spec(value: &Value) -> Result<TargetSpec, String> {
    let mut o = Object::new(value, "volume target")?;
    let volume_type: VolumeType = o.parsed("volume_type")?.ok_or("volume_type: missing")?;
    let boot_index = match o.take("boot_index") {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        None => return Err("boot_index: missing".into()),
        Some(_) => None,
    }
    .ok_or("boot_index: must be an integer >= 0")?;
    let volume_id = o.string("volume_id")?.ok_or("volume_id: missing")?;
    check_volume_id(&volume_id)?;
    let properties = match o.take("properties") {
        None => None,
        Some(Value::Object(map)) => Some(map),
        Some(other) => return Err(format!("properties: must be an object, not {other}")),
    };
    let spec = TargetSpec {
        uuid: o.uuid("uuid")?,
        volume_type: volume_type.clone(),
        boot_index,
        volume_id,
        properties,
        extra: o.map("extra")?,
    };
    o.finish()?;
    if let Some(props) = &spec.properties {
        let target = VolumeTarget {
            uuid: String::new(),
            volume_type,
            boot_index,
            volume_id: spec.volume_id.clone(),
            properties: props.clone(),
            extra: JsonMap::new(),
        };
        // Said once: the SAN checks already name the target.
        check_target_properties(&target).map_err(|e| {
            if e.starts_with("volume target ") {
                e
            } else {
                format!("volume target boot_index {boot_index}: {e}")
            }
        })?;
    }
    Ok(spec)
}

fn check_volume_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 255
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!("volume_id: {id:?} must be 1-255 letters, digits, '-', '_' or '.'"))
    }
}

/// Target property keys whose values are printed into scripts.
pub const SCRIPT_PROPERTY_KEYS: &[&str] = &[
    "target_portal",
    "target_portals",
    "target_iqn",
    "target_iqns",
    "target_lun",
    "target_luns",
    "auth_method",
    "auth_username",
    "auth_password",
    "auth_reverse_username",
    "auth_reverse_password",
    "san_filename",
    "target_wwn",
    "target_wwns",
    "target_shelf",
    "target_slot",
    "url",
    "export",
];

/// Checks the connection info of a target that has any: every value that reaches a script is
/// checked as script-safe, then parsed by the code that prints it (portal, IQN, LUN, WWN...).
pub fn check_target_properties(target: &VolumeTarget) -> Result<(), String> {
    if target.properties.is_empty() {
        return Ok(());
    }
    for key in SCRIPT_PROPERTY_KEYS {
        let mut printed = Vec::new();
        collect_strings(target.properties.get(*key).unwrap_or(&Value::Null), &mut printed);
        for text in printed {
            check_script_value(&text).map_err(|e| format!("properties.{key}: {e}"))?;
        }
    }
    match target.volume_type {
        VolumeType::Nfs => {
            let export = target
                .properties
                .get("export")
                .and_then(Value::as_str)
                .ok_or("properties.export: missing")?;
            check_nfs_export(export).map_err(|e| format!("properties.export: {e}"))?;
            if let Some(options) = target.properties.get("options").filter(|v| !v.is_null()) {
                let options = options.as_str().ok_or("properties.options: must be a string")?;
                let options = options.trim().trim_start_matches("-o").trim();
                if !options.is_empty() {
                    check_script_value(options).map_err(|e| format!("properties.options: {e}"))?;
                }
            }
        }
        // Stored as given, as Ironic does; validation and deploy refuse what no scenario boots.
        VolumeType::Other(_) => {}
        _ => {
            crate::boot::context::san_volume_for_check(target).map_err(|e| e.0)?;
            if let Some(name) = target.properties.get("san_filename").filter(|v| !v.is_null()) {
                name.as_str().ok_or("properties.san_filename: must be a string")?;
            }
        }
    }
    Ok(())
}

fn check_instance_info(info: &JsonMap) -> Result<(), String> {
    let string = |key: &str| -> Result<Option<&str>, String> {
        match info.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!("instance_info.{key}: must be a string, not {other}")),
        }
    };
    for key in ["kernel", "ramdisk"] {
        if let Some(name) = string(key)? {
            check_file_name(name).map_err(|e| format!("instance_info.{key}: {e}"))?;
        }
    }
    if let Some(root) = string("nfs_root")? {
        check_nfs_export(root.split(',').next().unwrap_or(root))
            .map_err(|e| format!("instance_info.nfs_root: {e}"))?;
        check_script_value(root).map_err(|e| format!("instance_info.nfs_root: {e}"))?;
    }
    if let Some(options) = string("nfs_options")? {
        check_script_value(options).map_err(|e| format!("instance_info.nfs_options: {e}"))?;
    }
    if let Some(params) = string("kernel_append_params")? {
        for arg in params.split_whitespace() {
            check_script_value(arg)
                .map_err(|e| format!("instance_info.kernel_append_params: {e}"))?;
        }
        if params.chars().any(|c| c.is_control()) {
            return Err("instance_info.kernel_append_params: contains a control character".into());
        }
    }
    match info.get("force_deployment") {
        None | Some(Value::Null | Value::Bool(_)) => {}
        Some(Value::String(s))
            if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") => {}
        Some(other) => {
            return Err(format!(
                "instance_info.force_deployment: must be true or false, not {other}"
            ));
        }
    }
    Ok(())
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// The inventory of every node, as JSON in the file's own shape, with every secret masked.
pub fn export(records: &[NodeRecord]) -> Value {
    json!({ "nodes": records.iter().map(export_one).collect::<Vec<_>>() })
}

/// One node of [`export`]'s `nodes`, its secrets masked: for a writer that streams the
/// document a node at a time (`bootvol export` of a large database).
pub fn export_one(record: &NodeRecord) -> Value {
    let mut node = export_node(record);
    secrets::mask(&mut node);
    node
}

fn export_node(record: &NodeRecord) -> Value {
    let node = &record.node;
    let mut out = json!({
        "uuid": node.uuid,
        "name": node.name,
        "driver": node.driver,
        "driver_info": node.driver_info,
        "properties": node.properties,
        "instance_info": node.instance_info,
        "extra": node.extra,
        "boot_interface": node.boot_interface,
        "deploy_interface": node.deploy_interface,
        "provision_state": node.provision_state,
        "maintenance": node.maintenance,
        "ports": record.ports.iter().map(|p| json!({"uuid": p.uuid, "address": p.address, "extra": p.extra,
            "pxe_enabled": p.more.pxe_enabled, "local_link_connection": p.more.local_link_connection,
            "physical_network": p.more.physical_network})).collect::<Vec<_>>(),
        "volume_connectors": record.volume_connectors.iter().map(|c| json!({
            "uuid": c.uuid, "type": c.connector_type, "connector_id": c.connector_id, "extra": c.extra})).collect::<Vec<_>>(),
        "volume_targets": record.volume_targets.iter().map(|t| json!({
            "uuid": t.uuid, "volume_type": t.volume_type, "boot_index": t.boot_index, "volume_id": t.volume_id,
            "properties": t.properties, "extra": t.extra})).collect::<Vec<_>>(),
    });
    if let Some(map) = out.as_object_mut() {
        if let Some(storage) = node.storage_interface {
            map.insert("storage_interface".into(), json!(storage));
        }
        for kind in Interfaces::KINDS {
            if let Some(value) = node.interfaces.get(*kind) {
                map.insert(kind.field(), json!(value));
            }
        }
        if let Some(instance) = &node.instance_uuid {
            map.insert("instance_uuid".into(), json!(instance));
        }
        if let Some(class) = &node.resource_class {
            map.insert("resource_class".into(), json!(class));
        }
    }
    out
}

/// A JSON object being read field by field; [`Object::finish`] refuses fields nobody read.
struct Object {
    map: Map<String, Value>,
    what: &'static str,
}

impl Object {
    fn new(value: &Value, what: &'static str) -> Result<Object, String> {
        match value {
            Value::Object(map) => Ok(Object { map: map.clone(), what }),
            other => Err(format!("a {what} must be an object, not {other}")),
        }
    }

    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    fn string(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!("{key}: must be a string, not {other}")),
        }
    }

    fn parsed<T: std::str::FromStr<Err = crate::model::ValueError>>(
        &mut self,
        key: &str,
    ) -> Result<Option<T>, String> {
        self.string(key)?
            .map(|s| s.parse().map_err(|e: crate::model::ValueError| format!("{key}: {e}")))
            .transpose()
    }

    fn uuid(&mut self, key: &str) -> Result<Option<String>, String> {
        self.string(key)?.map(|s| canonical_uuid(&s).map_err(|e| format!("{key}: {e}"))).transpose()
    }

    fn bool(&mut self, key: &str) -> Result<Option<bool>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => Err(format!("{key}: must be true or false, not {other}")),
        }
    }

    fn map(&mut self, key: &str) -> Result<JsonMap, String> {
        match self.take(key) {
            None => Ok(JsonMap::new()),
            Some(Value::Object(map)) => Ok(map),
            Some(other) => Err(format!("{key}: must be an object, not {other}")),
        }
    }

    fn array(&mut self, key: &str) -> Result<Vec<Value>, String> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(format!("{key}: must be a list, not {other}")),
        }
    }

    fn items<T>(
        &mut self,
        key: &str,
        parse: fn(&Value) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let items = self.array(key)?;
        items
            .iter()
            .enumerate()
            .map(|(i, v)| parse(v).map_err(|e| format!("{key}[{i}].{e}")))
            .collect()
    }

    fn finish(self) -> Result<(), String> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(key) => Err(format!("{key}: not a field of a {}", self.what)),
        }
    }
}
