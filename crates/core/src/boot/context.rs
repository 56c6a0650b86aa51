//! `BootContext`: the view model a boot script is printed from.
//!
//! [`BootContext::new`] turns a node, its connectors and targets into ready-to-print values: SAN
//! URIs with IPv6 brackets kept and LUNs in hex, one URI per multipath portal paired with its own
//! IQN and LUN, CHAP pairs per volume, drive numbers, kernel URLs and arguments. Templates only
//! print and loop. Pure: no I/O, no SQL, no HTTP types.

use serde::Serialize;
use serde_json::Value;

use super::scenario::{Scenario, ScenarioError};
use crate::model::{
    ConnectorType, IscsiName, JsonMap, Lun, NodeRecord, Portal, VolumeTarget, VolumeType, Wwn,
    check_file_name, check_http_url, check_nfs_export,
};

/// Settings the renderer needs from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootSettings {
    /// How nodes reach the boot HTTP listener, without a trailing slash.
    pub public_url: String,
    /// Attempts to attach the SAN volumes before the script gives up.
    pub san_attempts: u32,
    /// Seconds between attempts.
    pub san_retry_delay: u32,
    /// The boot URLs of the other live instances on the same database (PostgreSQL), which the
    /// generic script falls back to when this one does not answer; empty on one box.
    pub peers: Vec<String>,
    /// Whether the iPXE binaries are served signed with the operator's Secure Boot key
    /// (`[secure_boot]`): a node with capability `secure_boot:true` boots only then.
    pub secure_boot: bool,
}

/// Everything a template prints. `template` names the template that prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BootContext {
    pub template: &'static str,
    pub scenario: &'static str,
    pub node: Option<NodeView>,
    pub san: Option<SanBoot>,
    pub kernel: Option<KernelBoot>,
    /// Where the script reports each step it reaches (`GET <url>?stage=...`, `boot::report`):
    /// `<public_url>/report/<MAC of the node's first port>`; none for an unknown MAC or a node
    /// without a port.
    pub report_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeView {
    pub name: String,
    pub uuid: String,
}

/// A SAN boot: volumes hooked in order, then `sanboot` of the first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SanBoot {
    pub initiator_iqn: Option<String>,
    /// The boot volume first (drive 0x80), then extra volumes in boot_index order.
    pub volumes: Vec<SanVolume>,
    pub filename: Option<String>,
    pub attempts: u32,
    pub retry_delay: u32,
    /// `(n, n + 1)` for n from `attempts - 1` down to 1: the counter steps, highest first, so
    /// that one pass of `iseq ... && set ...` lines increments the counter once.
    pub counter_steps: Vec<(u32, u32)>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SanVolume {
    pub drive: String,
    pub volume_id: String,
    /// One URI per path; several make an iPXE multipath device.
    pub uris: Vec<String>,
    /// iSCSI volumes set or clear the (global) CHAP settings before their hook.
    pub iscsi: bool,
    pub chap: Option<Credentials>,
    pub reverse_chap: Option<Credentials>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

/// A kernel boot (NFS root).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelBoot {
    pub kernel_url: String,
    pub initrd_url: String,
    pub args: Vec<String>,
}

impl BootContext {
    /// The context of the default script, served to unknown MACs and to nodes that do not boot
    /// from a volume or do not validate.
    pub fn default_script(node: Option<&NodeRecord>, scenario: &'static str) -> BootContext {
        BootContext {
            template: "ipxe/default.ipxe.j2",
            scenario,
            node: node.map(|r| NodeView { name: r.node.name.clone(), uuid: r.node.uuid.clone() }),
            san: None,
            kernel: None,
            report_url: None,
        }
    }

    /// The same context, reporting its steps to bootvol (`report_url`).
    pub fn reporting(mut self, record: &NodeRecord, settings: &BootSettings) -> BootContext {
        self.report_url = record.ports.first().map(|port| {
            let mac = port.address.to_string().replace(':', "-");
            format!("{}/report/{mac}", settings.public_url)
        });
        self
    }

    /// Builds the context for a node whose scenario was decided.
    pub fn new(
        record: &NodeRecord,
        scenario: Scenario,
        settings: &BootSettings,
    ) -> Result<BootContext, ScenarioError> {
        let mut context = BootContext::default_script(Some(record), scenario.name());
        if scenario != Scenario::NotBootFromVolume {
            // Every other scenario runs bootvol's iPXE first, which the firmware must accept.
            super::scenario::secure_boot(record, settings.secure_boot)?;
        }
        match scenario {
            Scenario::Iscsi | Scenario::Fcoe | Scenario::Aoe | Scenario::HttpSan => {
                context.template = "ipxe/san.ipxe.j2";
                context.san = Some(san_boot(record, settings)?);
            }
            Scenario::NfsRoot => {
                context.template = "ipxe/nfs.ipxe.j2";
                context.kernel = Some(nfs_kernel_boot(record, settings)?);
            }
            Scenario::Hba { .. } => context.template = "ipxe/hba.ipxe.j2",
            Scenario::NotBootFromVolume => {}
        }
        Ok(context)
    }
}

impl BootContext {
    /// The deploy ramdisk of a scenario-4 deployment in progress: the conductor records its
    /// kernel, ramdisk (names under `files_root`) and command line in
    /// `driver_internal_info.deploy`.
    pub fn deploy(
        record: &NodeRecord,
        settings: &BootSettings,
    ) -> Result<BootContext, ScenarioError> {
        let deploy =
            record.node.driver_internal_info.get("deploy").and_then(Value::as_object).ok_or_else(
                || ScenarioError("no deployment in progress (driver_internal_info.deploy)".into()),
            )?;
        let kernel = text(deploy.get("kernel").unwrap_or(&Value::Null), "deploy kernel")?;
        let ramdisk = text(deploy.get("ramdisk").unwrap_or(&Value::Null), "deploy ramdisk")?;
        for name in [&kernel, &ramdisk] {
            check_file_name(name).map_err(ScenarioError)?;
        }
        let initrd_name = ramdisk.rsplit('/').next().unwrap_or(&ramdisk).to_owned();
        let mut args = vec![format!("initrd={initrd_name}")];
        for arg in deploy.get("args").and_then(Value::as_array).into_iter().flatten() {
            args.push(text(arg, "deploy argument")?);
        }
        // The one-time token is in no script: the ramdisk asks the boot listener for it once
        // (`token_url`), and sends it with the config drive request and the call-back.
        let node_url = format!("{}/deploy/{}", settings.public_url, record.node.uuid);
        if let Some(format) = deploy.get("configdrive_format").and_then(Value::as_str) {
            args.push(format!("bootvol.configdrive_url={node_url}/configdrive"));
            args.push(format!("bootvol.configdrive_format={format}"));
        }
        args.push(format!("bootvol.token_url={node_url}/token"));
        args.push(format!("bootvol.callback_url={node_url}/callback"));
        let mut context = BootContext::default_script(Some(record), "hba-deploy");
        context.template = "ipxe/deploy.ipxe.j2";
        context.kernel = Some(KernelBoot {
            kernel_url: format!("{}/files/{kernel}", settings.public_url),
            initrd_url: format!("{}/files/{ramdisk}", settings.public_url),
            args,
        });
        Ok(context)
    }
}

fn san_boot(record: &NodeRecord, settings: &BootSettings) -> Result<SanBoot, ScenarioError> {
    let initiator_iqn = record
        .volume_connectors
        .iter()
        .find(|c| c.connector_type == ConnectorType::Iqn)
        .map(|c| c.connector_id.clone());
    let targets = record.volume_targets.iter().filter(|t| t.volume_type != VolumeType::Nfs);
    let volumes = targets
        .enumerate()
        .map(|(position, target)| san_volume(target, 0x80 + position))
        .collect::<Result<Vec<_>, _>>()?;
    if volumes.len() > 0x80 {
        return Err(ScenarioError(format!(
            "{} SAN volumes; iPXE drives end at 0xff",
            volumes.len()
        )));
    }
    let boot = record.volume_targets.iter().find(|t| t.boot_index == 0);
    let filename = boot
        .and_then(|t| t.properties.get("san_filename"))
        .map(|v| text(v, "san_filename"))
        .transpose()?;
    let attempts = settings.san_attempts.max(1);
    Ok(SanBoot {
        initiator_iqn,
        volumes,
        filename,
        attempts,
        retry_delay: settings.san_retry_delay,
        counter_steps: (1..attempts).rev().map(|n| (n, n + 1)).collect(),
    })
}

fn san_volume(target: &VolumeTarget, drive: usize) -> Result<SanVolume, ScenarioError> {
    let context = |e: ScenarioError| {
        ScenarioError(format!(
            "volume target boot_index {} ({}): {}",
            target.boot_index, target.volume_id, e.0
        ))
    };
    let props = &target.properties;
    let uris = match &target.volume_type {
        VolumeType::Iscsi => iscsi_uris(props),
        VolumeType::FibreChannel => fcp_uris(props),
        VolumeType::Aoe => aoe_uri(props).map(|u| vec![u]),
        VolumeType::Http => http_uri(props).map(|u| vec![u]),
        VolumeType::Nfs => {
            Err(ScenarioError("an nfs volume cannot be hooked as a SAN drive".into()))
        }
        VolumeType::Other(other) => Err(ScenarioError(format!(
            "volume type {other} cannot be hooked as a SAN drive (iscsi, fibre_channel, aoe or http)"
        ))),
    }
    .map_err(context)?;
    let (chap, reverse_chap) = if target.volume_type == VolumeType::Iscsi {
        chap_credentials(props).map_err(context)?
    } else {
        (None, None)
    };
    Ok(SanVolume {
        drive: format!("{drive:#04x}"),
        volume_id: target.volume_id.clone(),
        uris,
        iscsi: target.volume_type == VolumeType::Iscsi,
        chap,
        reverse_chap,
    })
}

/// One `iscsi:` URI per portal. With `target_portals`, portal *i* is paired with
/// `target_iqns[i]` and `target_luns[i]` (Ironic paired every portal with the first IQN and LUN).
fn iscsi_uris(props: &JsonMap) -> Result<Vec<String>, ScenarioError> {
    let portals = list_or_single(props, "target_portals", "target_portal")?;
    let iqns = list_or_single(props, "target_iqns", "target_iqn")?;
    let luns = list_or_single(props, "target_luns", "target_lun")?;
    if portals.is_empty() {
        return Err(ScenarioError("properties need target_portal (or target_portals)".into()));
    }
    if iqns.is_empty() {
        return Err(ScenarioError("properties need target_iqn (or target_iqns)".into()));
    }
    let paired = |list: &[&Value], what: &str| -> Result<(), ScenarioError> {
        if list.len() > 1 && list.len() != portals.len() {
            return Err(ScenarioError(format!(
                "{} {what} for {} portals; give one per portal",
                list.len(),
                portals.len()
            )));
        }
        Ok(())
    };
    paired(&iqns, "IQNs")?;
    paired(&luns, "LUNs")?;
    let pick =
        |list: &[&'_ Value], i: usize| list.get(i).or_else(|| list.first()).copied().cloned();
    (0..portals.len())
        .map(|i| {
            let portal: Portal = text(portals[i], "target_portal")?
                .parse()
                .map_err(|e: crate::model::ValueError| ScenarioError(e.0))?;
            let iqn: IscsiName = text(&pick(&iqns, i).unwrap_or_default(), "target_iqn")?
                .parse()
                .map_err(|e: crate::model::ValueError| ScenarioError(e.0))?;
            let lun = match pick(&luns, i) {
                None | Some(Value::Null) => Lun(0),
                Some(v) => {
                    Lun::from_json(&v).map_err(|e| ScenarioError(format!("target_lun: {e}")))?
                }
            };
            Ok(format!("iscsi:{}::{}:{:x}:{}", portal.host, portal.port, lun.0, iqn))
        })
        .collect()
}

/// One `fcp:` URI per target WWN (`target_wwn` is a string or a list).
fn fcp_uris(props: &JsonMap) -> Result<Vec<String>, ScenarioError> {
    let wwns = list_or_single(props, "target_wwns", "target_wwn")?;
    if wwns.is_empty() {
        return Err(ScenarioError("properties need target_wwn".into()));
    }
    let lun = match props.get("target_lun") {
        None | Some(Value::Null) => Lun(0),
        Some(v) => Lun::from_json(v).map_err(|e| ScenarioError(format!("target_lun: {e}")))?,
    };
    wwns.iter()
        .map(|v| {
            let wwn: Wwn = text(v, "target_wwn")?
                .parse()
                .map_err(|e: crate::model::ValueError| ScenarioError(e.0))?;
            Ok(format!("fcp:{}:{:x}", wwn.colon_bytes(), lun.0))
        })
        .collect()
}

fn aoe_uri(props: &JsonMap) -> Result<String, ScenarioError> {
    let number = |key: &str, max: u64| -> Result<u64, ScenarioError> {
        let value =
            props.get(key).ok_or_else(|| ScenarioError(format!("properties need {key}")))?;
        let n = match value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().ok()
            }
            _ => None,
        };
        n.filter(|n| *n <= max)
            .ok_or_else(|| ScenarioError(format!("{key} {value} is not an integer 0-{max}")))
    };
    Ok(format!("aoe:e{}.{}", number("target_shelf", 65534)?, number("target_slot", 254)?))
}

fn http_uri(props: &JsonMap) -> Result<String, ScenarioError> {
    let url = text(props.get("url").unwrap_or(&Value::Null), "url")?;
    check_http_url(&url).map_err(ScenarioError)?;
    Ok(url)
}

/// CHAP and mutual CHAP for an iSCSI target, from Cinder's property names.
fn chap_credentials(
    props: &JsonMap,
) -> Result<(Option<Credentials>, Option<Credentials>), ScenarioError> {
    let method = props.get("auth_method").and_then(Value::as_str).unwrap_or("None");
    if method.eq_ignore_ascii_case("none") {
        return Ok((None, None));
    }
    if !method.eq_ignore_ascii_case("chap") {
        return Err(ScenarioError(format!(
            "auth_method {method:?} is not supported (CHAP or None)"
        )));
    }
    let pair = |user_key: &str, pass_key: &str| -> Result<Option<Credentials>, ScenarioError> {
        match (props.get(user_key), props.get(pass_key)) {
            (None | Some(Value::Null), None | Some(Value::Null)) => Ok(None),
            (Some(u), Some(p)) => {
                Ok(Some(Credentials { username: text(u, user_key)?, password: text(p, pass_key)? }))
            }
            _ => Err(ScenarioError(format!("{user_key} and {pass_key} must be given together"))),
        }
    };
    let chap = pair("auth_username", "auth_password")?.ok_or_else(|| {
        ScenarioError("auth_method is CHAP but auth_username/auth_password are missing".into())
    })?;
    let reverse = pair("auth_reverse_username", "auth_reverse_password")?;
    Ok((Some(chap), reverse))
}

fn nfs_kernel_boot(
    record: &NodeRecord,
    settings: &BootSettings,
) -> Result<KernelBoot, ScenarioError> {
    let info = &record.node.instance_info;
    let boot_target = record.volume_targets.iter().find(|t| t.boot_index == 0);
    let (root, options) = match info.get("nfs_root").filter(|v| !v.is_null()) {
        Some(root) => (text(root, "instance_info.nfs_root")?, info.get("nfs_options").cloned()),
        None => {
            let props =
                &boot_target.ok_or_else(|| ScenarioError("no NFS export".into()))?.properties;
            (
                text(props.get("export").unwrap_or(&Value::Null), "export")?,
                props.get("options").cloned(),
            )
        }
    };
    check_nfs_export(&root).map_err(ScenarioError)?;
    let mut nfsroot = format!("nfsroot={root}");
    if let Some(options) = options.filter(|v| !v.is_null()) {
        let options = text(&options, "nfs options")?;
        let options = options.trim().trim_start_matches("-o").trim();
        if !options.is_empty() {
            nfsroot = format!("{nfsroot},{options}");
        }
    }
    let kernel = text(info.get("kernel").unwrap_or(&Value::Null), "instance_info.kernel")?;
    let ramdisk = text(info.get("ramdisk").unwrap_or(&Value::Null), "instance_info.ramdisk")?;
    for (field, name) in [("kernel", &kernel), ("ramdisk", &ramdisk)] {
        check_file_name(name).map_err(|e| ScenarioError(format!("instance_info.{field}: {e}")))?;
    }
    let initrd_name = ramdisk.rsplit('/').next().unwrap_or(&ramdisk);
    let mut args =
        vec![format!("initrd={initrd_name}"), "root=/dev/nfs".into(), nfsroot, "ip=dhcp".into()];
    if let Some(extra) = info.get("kernel_append_params").filter(|v| !v.is_null()) {
        args.extend(
            text(extra, "instance_info.kernel_append_params")?
                .split_whitespace()
                .map(str::to_owned),
        );
    }
    Ok(KernelBoot {
        kernel_url: format!("{}/files/{kernel}", settings.public_url),
        initrd_url: format!("{}/files/{ramdisk}", settings.public_url),
        args,
    })
}

/// Reads a JSON string value (numbers are accepted and printed as written).
fn text(value: &Value, field: &str) -> Result<String, ScenarioError> {
    match value {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Null => Err(ScenarioError(format!("{field} is missing"))),
        // The value is not repeated: the field may be a secret.
        _ => Err(ScenarioError(format!("{field} must be a string"))),
    }
}

/// The values of `list_key` (a JSON list) or else `single_key` (one value, or a list).
fn list_or_single<'a>(
    props: &'a JsonMap,
    list_key: &str,
    single_key: &str,
) -> Result<Vec<&'a Value>, ScenarioError> {
    let value = match props.get(list_key).filter(|v| !v.is_null()) {
        Some(v) => v,
        None => match props.get(single_key).filter(|v| !v.is_null()) {
            Some(v) => v,
            None => return Ok(Vec::new()),
        },
    };
    Ok(match value {
        Value::Array(items) => items.iter().collect(),
        single => vec![single],
    })
}

/// Builds the SAN view of one target on its own, so that `inventory` can check recorded
/// connection info with exactly the code that prints it.
pub fn san_volume_for_check(target: &VolumeTarget) -> Result<SanVolume, ScenarioError> {
    san_volume(target, 0x80)
}
