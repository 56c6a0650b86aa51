//! Which of the spec's scenarios a node boots by, and the spec's `boot_option` helper.
//!
//! [`decide`] reads a node, its connectors and its targets and returns the [`Scenario`], or a
//! [`ScenarioError`] that says exactly what is missing or contradictory. Pure: plain values in,
//! a decision out; no I/O, no SQL, no iPXE.

use serde_json::Value;

use crate::model::capabilities::{
    NodeCapabilities, boot_interface_tags, check_capability, deploy_interface_tags,
    volume_boot_tag, volume_deploy_tag,
};
use crate::model::{ConnectorType, NodeRecord, StorageInterfaceName, VolumeTarget, VolumeType};

/// How a node boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Scenario 1: iPXE attaches an iSCSI volume (`sanboot iscsi:...`).
    Iscsi,
    /// Scenario 2: iPXE attaches a Fibre Channel volume over Ethernet (`sanboot fcp:...`).
    Fcoe,
    /// ATA over Ethernet (`sanboot aoe:e<shelf>.<slot>`).
    Aoe,
    /// HTTP SAN boot (`sanboot http://...`).
    HttpSan,
    /// Scenario 5: a kernel and ramdisk from bootvol with an NFS root.
    NfsRoot,
    /// Scenarios 3 and 4: the firmware boots the LUN its HBA presents; with `force_deployment`
    /// an image is first written onto the volume.
    Hba { force_deployment: bool },
    /// Not a boot-from-volume node (noop storage, or no boot volume at all).
    NotBootFromVolume,
}

impl Scenario {
    /// Short name used in logs, the admin page and script comments.
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Iscsi => "iscsi",
            Scenario::Fcoe => "fcoe",
            Scenario::Aoe => "aoe",
            Scenario::HttpSan => "http-san",
            Scenario::NfsRoot => "nfs-root",
            Scenario::Hba { force_deployment: false } => "hba",
            Scenario::Hba { force_deployment: true } => "hba-deploy",
            Scenario::NotBootFromVolume => "none",
        }
    }

    /// Whether bootvol's iPXE script attaches the volume (scenarios 1, 2, 5 and AoE/HTTP SAN).
    pub fn is_network_boot(&self) -> bool {
        matches!(
            self,
            Scenario::Iscsi
                | Scenario::Fcoe
                | Scenario::Aoe
                | Scenario::HttpSan
                | Scenario::NfsRoot
        )
    }
}

/// Whether a node's firmware enforces Secure Boot (Ironic's capability `secure_boot:true`),
/// and whether bootvol can boot it: Secure Boot is UEFI's, and the firmware runs only an iPXE
/// signed with a key in its `db`, which bootvol serves only with `[secure_boot]` set
/// (`signed_ipxe`). `Ok(true)`: the node boots with Secure Boot.
pub fn secure_boot(record: &NodeRecord, signed_ipxe: bool) -> Result<bool, ScenarioError> {
    let caps = record.node.capabilities().map_err(|e| ScenarioError(e.0))?;
    if !caps.flag("secure_boot") {
        return Ok(false);
    }
    if caps.get("boot_mode").is_some_and(|mode| mode.eq_ignore_ascii_case("bios")) {
        return fail(
            "capability secure_boot is true but boot_mode is bios: Secure Boot needs boot_mode:uefi",
        );
    }
    if !signed_ipxe {
        return fail(
            "capability secure_boot is true but [secure_boot] key and cert are not set: the node's firmware refuses bootvol's unsigned iPXE (set them to a key whose certificate is in the node's db)",
        );
    }
    Ok(true)
}

/// Why a node cannot boot from its volume as configured: always names the field to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScenarioError(pub String);

fn fail<T>(message: impl Into<String>) -> Result<T, ScenarioError> {
    Err(ScenarioError(message.into()))
}

/// Decides the scenario of a node. `default_storage` applies when the node records no
/// storage interface.
pub fn decide(
    record: &NodeRecord,
    default_storage: StorageInterfaceName,
) -> Result<Scenario, ScenarioError> {
    let node = &record.node;
    let storage = node.effective_storage_interface(default_storage);
    if storage == StorageInterfaceName::Noop {
        return Ok(Scenario::NotBootFromVolume);
    }
    let caps = node.capabilities().map_err(|e| ScenarioError(e.0))?;
    let boot_target = record.volume_targets.iter().find(|t| t.boot_index == 0);
    let nfs_root = node.instance_info.get("nfs_root").filter(|v| !v.is_null());

    if caps.flag("hba_boot") {
        return decide_hba(record, &caps, boot_target, storage);
    }
    if caps.flag("nfs_boot")
        || nfs_root.is_some()
        || boot_target.is_some_and(|t| t.volume_type == VolumeType::Nfs)
    {
        return decide_nfs(record, &caps, boot_target, nfs_root.is_some());
    }
    match boot_target {
        Some(boot_target) => decide_san(record, &caps, boot_target),
        None => decide_without_boot_volume(record, &caps),
    }
}

/// A node with no boot volume (no target with boot_index 0) is not booted from a volume,
/// unless a capability or its other targets say it should be: then it is refused.
fn decide_without_boot_volume(
    record: &NodeRecord,
    caps: &NodeCapabilities,
) -> Result<Scenario, ScenarioError> {
    if let Some(flag) = ["iscsi_boot", "fibre_channel_boot", "aoe_boot", "http_boot"]
        .into_iter()
        .find(|f| caps.flag(f))
    {
        return fail(format!(
            "capability {flag} is true but the node has no volume target with boot_index 0"
        ));
    }
    if !record.volume_targets.is_empty() {
        return fail("the node has volume targets but none with boot_index 0 (the boot volume)");
    }
    Ok(Scenario::NotBootFromVolume)
}

/// iPXE attaches the boot volume (iSCSI, FCoE, AoE or HTTP SAN), by its type: the capability
/// and the boot interface must agree, and the initiator must be there.
fn decide_san(
    record: &NodeRecord,
    caps: &NodeCapabilities,
    boot_target: &VolumeTarget,
) -> Result<Scenario, ScenarioError> {
    if let VolumeType::Other(other) = &boot_target.volume_type {
        return fail(unknown_type(&boot_target.volume_id, other));
    }
    require_flag(caps, boot_target)?;
    require_boot_tag(record, &boot_target.volume_type)?;
    match boot_target.volume_type {
        VolumeType::Iscsi => {
            require_one_iqn(record)?;
            Ok(Scenario::Iscsi)
        }
        VolumeType::FibreChannel => {
            require_wwpn(record)?;
            Ok(Scenario::Fcoe)
        }
        VolumeType::Aoe => Ok(Scenario::Aoe),
        VolumeType::Http => Ok(Scenario::HttpSan),
        VolumeType::Nfs => unreachable_nfs(),
        VolumeType::Other(ref other) => fail(unknown_type(&boot_target.volume_id, other)),
    }
}

/// Why a boot volume of a type no scenario boots is refused (stored, as Ironic stores any type;
/// refused by validation and deploy).
fn unknown_type(volume_id: &str, volume_type: &str) -> String {
    format!(
        "boot volume {volume_id} has volume_type {volume_type}, which no bootvol scenario boots (iscsi, fibre_channel, aoe, http or nfs)"
    )
}

fn unreachable_nfs() -> Result<Scenario, ScenarioError> {
    // An NFS boot target is routed to decide_nfs above; reaching here is a logic error.
    fail("internal: NFS boot volume not routed to the NFS root scenario")
}

/// Scenarios 3 and 4: the node's HBA attaches the boot volume, which only iPXE would
/// otherwise; with `force_deployment` an image is written onto it first.
fn decide_hba(
    record: &NodeRecord,
    caps: &NodeCapabilities,
    boot_target: Option<&VolumeTarget>,
    storage: StorageInterfaceName,
) -> Result<Scenario, ScenarioError> {
    let Some(target) = boot_target else {
        return fail(
            "capability hba_boot is true but the node has no volume target with boot_index 0",
        );
    };
    for other in ["iscsi_boot", "fibre_channel_boot", "nfs_boot", "aoe_boot", "http_boot"] {
        if caps.flag(other) {
            return fail(format!(
                "capabilities hba_boot and {other} are both true: choose whether the HBA or iPXE attaches the volume"
            ));
        }
    }
    require_hba_volume(record, target, storage)?;
    let force_deployment = force_deployment(record)?;
    if force_deployment {
        let tag = volume_deploy_tag(&target.volume_type);
        let interface = record.node.deploy_interface;
        if !check_capability(deploy_interface_tags(interface), &tag) {
            return fail(format!(
                "instance_info.force_deployment is true but deploy interface {interface} does not declare {tag}"
            ));
        }
    }
    Ok(Scenario::Hba { force_deployment })
}

/// An HBA boots only fibre_channel or iscsi volumes; with Cinder the node needs the initiator
/// its attach sends.
fn require_hba_volume(
    record: &NodeRecord,
    target: &VolumeTarget,
    storage: StorageInterfaceName,
) -> Result<(), ScenarioError> {
    // The node's own HBA attaches the volume: only Cinder needs an initiator to send with its
    // attach; with `external` storage the LUN is zoned (or the target set up) by others.
    let cinder = storage == StorageInterfaceName::Cinder;
    match &target.volume_type {
        VolumeType::FibreChannel if cinder => require_wwpn(record),
        VolumeType::Iscsi if cinder => require_one_iqn(record),
        VolumeType::FibreChannel | VolumeType::Iscsi => Ok(()),
        other => fail(format!(
            "boot volume {} is {other}; an HBA boots only fibre_channel or iscsi volumes",
            target.volume_id
        )),
    }
}

/// `instance_info.force_deployment`: absent or null is false; a boolean, or "true"/"false".
fn force_deployment(record: &NodeRecord) -> Result<bool, ScenarioError> {
    match record.node.instance_info.get("force_deployment") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(other) => {
            fail(format!("instance_info.force_deployment must be true or false, not {other}"))
        }
    }
}

fn decide_nfs(
    record: &NodeRecord,
    caps: &NodeCapabilities,
    boot_target: Option<&VolumeTarget>,
    has_nfs_root: bool,
) -> Result<Scenario, ScenarioError> {
    if !caps.flag("nfs_boot") {
        let what =
            if has_nfs_root { "instance_info.nfs_root is set" } else { "the boot volume is nfs" };
        return fail(format!("{what} but capability nfs_boot is not true"));
    }
    match boot_target {
        Some(t) if t.volume_type != VolumeType::Nfs => {
            return fail(format!(
                "capability nfs_boot is true but boot volume {} is {}, not nfs",
                t.volume_id, t.volume_type
            ));
        }
        None if !has_nfs_root => {
            return fail(
                "capability nfs_boot is true but there is neither instance_info.nfs_root nor an nfs volume target with boot_index 0",
            );
        }
        _ => {}
    }
    require_boot_tag(record, &VolumeType::Nfs)?;
    for field in ["kernel", "ramdisk"] {
        if record.node.instance_info.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return fail(format!(
                "NFS root boot needs instance_info.{field} (a file name under [http] files_root)"
            ));
        }
    }
    Ok(Scenario::NfsRoot)
}

fn require_flag(caps: &NodeCapabilities, target: &VolumeTarget) -> Result<(), ScenarioError> {
    let flag = NodeCapabilities::boot_flag_for(&target.volume_type);
    if caps.flag(&flag) {
        Ok(())
    } else {
        fail(format!(
            "boot volume {} is {} but capability {flag} is not true in properties.capabilities",
            target.volume_id, target.volume_type
        ))
    }
}

fn require_boot_tag(record: &NodeRecord, volume_type: &VolumeType) -> Result<(), ScenarioError> {
    let tag = volume_boot_tag(volume_type);
    let interface = record.node.boot_interface;
    if check_capability(boot_interface_tags(interface), &tag) {
        Ok(())
    } else {
        fail(format!("boot interface {interface} does not declare {tag}; use boot_interface ipxe"))
    }
}

fn count_connectors(record: &NodeRecord, kind: ConnectorType) -> usize {
    record.volume_connectors.iter().filter(|c| c.connector_type == kind).count()
}

/// Refuses a connector of `kind` whose id is not one of its type: stored as given (Ironic's
/// rule), it can not be used to boot.
fn require_usable(record: &NodeRecord, kind: ConnectorType) -> Result<(), ScenarioError> {
    let bad = record
        .volume_connectors
        .iter()
        .filter(|c| c.connector_type == kind)
        .find(|c| crate::model::canonical_connector_id(kind, &c.connector_id).is_err());
    match bad {
        None => Ok(()),
        Some(c) => fail(format!(
            "volume connector {} of type {kind} has connector_id {}, which is not a {}: a boot can not use it",
            c.uuid,
            c.connector_id,
            if kind == ConnectorType::Iqn {
                "valid iSCSI name (iqn.YYYY-MM.domain:name or eui.)"
            } else {
                "valid WWN (16 hex digits)"
            }
        )),
    }
}

fn require_one_iqn(record: &NodeRecord) -> Result<(), ScenarioError> {
    require_usable(record, ConnectorType::Iqn)?;
    match count_connectors(record, ConnectorType::Iqn) {
        1 => Ok(()),
        0 => {
            fail("an iSCSI boot volume needs one volume connector of type iqn (the initiator name)")
        }
        n => fail(format!(
            "the node has {n} volume connectors of type iqn; an iSCSI initiator has exactly one name"
        )),
    }
}

fn require_wwpn(record: &NodeRecord) -> Result<(), ScenarioError> {
    require_usable(record, ConnectorType::Wwpn)?;
    if count_connectors(record, ConnectorType::Wwpn) == 0 {
        fail("a Fibre Channel boot volume needs at least one volume connector of type wwpn")
    } else {
        Ok(())
    }
}

/// Ironic's `instance_info.boot_option` values that bootvol sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootOption {
    /// The node network-boots every time (bootvol's script attaches the volume).
    Netboot,
    /// The node boots its local (HBA-presented) disk.
    Local,
}

impl BootOption {
    pub fn as_str(&self) -> &'static str {
        match self {
            BootOption::Netboot => "netboot",
            BootOption::Local => "local",
        }
    }
}

/// The spec's helper: decides `instance_info.boot_option` from the scenario, writes it into
/// the record's `instance_info`, and returns it. Nodes that do not boot from a volume keep
/// what they have (default `local`).
pub fn set_boot_option(
    record: &mut NodeRecord,
    default_storage: StorageInterfaceName,
) -> Result<BootOption, ScenarioError> {
    let option = match decide(record, default_storage)? {
        scenario if scenario.is_network_boot() => BootOption::Netboot,
        Scenario::NotBootFromVolume => {
            match record.node.instance_info.get("boot_option").and_then(Value::as_str) {
                Some("netboot") => BootOption::Netboot,
                _ => BootOption::Local,
            }
        }
        _ => BootOption::Local,
    };
    record.node.instance_info.insert("boot_option".into(), Value::from(option.as_str()));
    Ok(option)
}
