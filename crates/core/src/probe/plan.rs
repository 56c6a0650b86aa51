//! What to probe for a node: the targets its boot script would attach, read from the same
//! [`BootContext`] the script is printed from (so the probe checks what the node will boot, not
//! another reading of its fields). Pure: a record in, a list of [`Target`]s out.

use crate::boot::context::{Credentials, KernelBoot, SanVolume};
use crate::boot::{BootContext, BootSettings, Scenario, decide};
use crate::model::{NodeRecord, StorageInterfaceName};

use super::aoe::Address;

/// One thing to probe, with the volume it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The volume target's `volume_id` (or the export, for an NFS root).
    pub volume: String,
    pub kind: TargetKind,
}

/// Credentials as the script sets them (`username`/`password`, `reverse-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chap {
    pub user: String,
    pub secret: String,
}

/// An iSCSI target as iPXE logs in to it: the portals (`host:port`, IPv6 in brackets) that
/// carry this IQN and LUN, the initiator name and CHAP the script sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iscsi {
    pub portals: Vec<String>,
    pub target_iqn: String,
    pub lun: u64,
    pub initiator_iqn: String,
    pub chap: Option<Chap>,
    pub mutual: Option<Chap>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetKind {
    Iscsi(Iscsi),
    Aoe(Address),
    /// `server:path` (the `nfsroot=`), and the kernel and initrd URLs the script loads.
    NfsRoot {
        server: String,
        path: String,
        kernel_url: String,
        initrd_url: String,
    },
    HttpSan {
        url: String,
    },
    /// FCoE or HBA: the appliance cannot reach the fabric; `why` says so.
    NotProbeable {
        what: &'static str,
        why: &'static str,
    },
}

impl TargetKind {
    /// Short name for the per-target lines.
    pub fn name(&self) -> &'static str {
        match self {
            TargetKind::Iscsi(_) => "iscsi",
            TargetKind::Aoe(_) => "aoe",
            TargetKind::NfsRoot { .. } => "nfs-root",
            TargetKind::HttpSan { .. } => "http-san",
            TargetKind::NotProbeable { what, .. } => what,
        }
    }
}

/// Why nothing can be probed for a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoPlan {
    /// Not a boot-from-volume node.
    NotBootFromVolume,
    /// The node does not validate (the message says why): its script is the default one.
    Invalid(String),
}

const FABRIC: &str =
    "the appliance cannot reach it (the node's HBA or FCoE NIC reaches the fabric, not this box)";

/// The targets of a node's boot, boot volume first.
pub fn targets(
    record: &NodeRecord,
    settings: &BootSettings,
    default_storage: StorageInterfaceName,
) -> Result<Vec<Target>, NoPlan> {
    let scenario = decide(record, default_storage).map_err(|e| NoPlan::Invalid(e.0))?;
    if scenario == Scenario::NotBootFromVolume {
        return Err(NoPlan::NotBootFromVolume);
    }
    let context = BootContext::new(record, scenario, settings).map_err(|e| NoPlan::Invalid(e.0))?;
    if let Scenario::Hba { .. } = scenario {
        let volume = record
            .volume_targets
            .iter()
            .find(|t| t.boot_index == 0)
            .map_or_else(|| "boot volume".to_owned(), |t| t.volume_id.clone());
        return Ok(vec![Target {
            volume,
            kind: TargetKind::NotProbeable { what: "hba", why: FABRIC },
        }]);
    }
    if let Some(kernel) = &context.kernel {
        return nfs_target(kernel).map(|t| vec![t]);
    }
    let Some(san) = &context.san else { return Err(NoPlan::NotBootFromVolume) };
    // iPXE's own initiator name when the node records none (`iqn.2010-04.org.ipxe:<uuid>`, the
    // UUID the firmware reports; the node's UUID here).
    let initiator = san
        .initiator_iqn
        .clone()
        .unwrap_or_else(|| format!("iqn.2010-04.org.ipxe:{}", record.node.uuid));
    let mut out = Vec::new();
    for volume in &san.volumes {
        volume_targets(volume, &initiator, &mut out);
    }
    Ok(out)
}

/// The NFS root of a kernel boot: its `nfsroot=` and the kernel and initrd URLs.
fn nfs_target(kernel: &KernelBoot) -> Result<Target, NoPlan> {
    let root = kernel.args.iter().find_map(|a| a.strip_prefix("nfsroot=")).unwrap_or("");
    let root = root.split(',').next().unwrap_or("");
    let (server, path) = split_nfs_root(root)
        .ok_or_else(|| NoPlan::Invalid(format!("nfsroot {root:?} is not server:/path")))?;
    Ok(Target {
        volume: root.to_owned(),
        kind: TargetKind::NfsRoot {
            server,
            path,
            kernel_url: kernel.kernel_url.clone(),
            initrd_url: kernel.initrd_url.clone(),
        },
    })
}

/// One SAN volume's targets: its iSCSI paths grouped by IQN and LUN, its AoE or HTTP URI, or
/// one line for its FCoE paths (none of them can be probed).
fn volume_targets(volume: &SanVolume, initiator: &str, out: &mut Vec<Target>) {
    let chap = |c: &Option<Credentials>| {
        c.as_ref().map(|c| Chap { user: c.username.clone(), secret: c.password.clone() })
    };
    let mut iscsi: Vec<Iscsi> = Vec::new();
    for uri in &volume.uris {
        let kind = if let Some((portal, lun, iqn)) = parse_iscsi_uri(uri) {
            match iscsi.iter_mut().find(|t| t.target_iqn == iqn && t.lun == lun) {
                Some(same) => same.portals.push(portal),
                None => iscsi.push(Iscsi {
                    portals: vec![portal],
                    target_iqn: iqn,
                    lun,
                    initiator_iqn: initiator.to_owned(),
                    chap: chap(&volume.chap),
                    mutual: chap(&volume.reverse_chap),
                }),
            }
            continue;
        } else if let Some(address) = parse_aoe_uri(uri) {
            TargetKind::Aoe(address)
        } else if uri.starts_with("http://") || uri.starts_with("https://") {
            TargetKind::HttpSan { url: uri.clone() }
        } else {
            TargetKind::NotProbeable { what: "fcoe", why: FABRIC }
        };
        if !out.iter().any(|t| t.volume == volume.volume_id && t.kind == kind) {
            out.push(Target { volume: volume.volume_id.clone(), kind });
        }
    }
    out.extend(
        iscsi
            .into_iter()
            .map(|t| Target { volume: volume.volume_id.clone(), kind: TargetKind::Iscsi(t) }),
    );
}

/// `server:/path` (IPv6 servers in brackets) into the server and the path.
fn split_nfs_root(root: &str) -> Option<(String, String)> {
    let (server, path) = if let Some(rest) = root.strip_prefix('[') {
        let (host, rest) = rest.split_once(']')?;
        (host, rest.strip_prefix(':')?)
    } else {
        root.split_once(':')?
    };
    (!server.is_empty() && path.starts_with('/')).then(|| (server.to_owned(), path.to_owned()))
}

/// `iscsi:<host>::<port>:<lun hex>:<iqn>` (as `context` prints it) into `host:port`, the LUN
/// and the IQN.
fn parse_iscsi_uri(uri: &str) -> Option<(String, u64, String)> {
    let rest = uri.strip_prefix("iscsi:")?;
    let (host, rest) = if rest.starts_with('[') {
        let end = rest.find(']')?;
        (&rest[..=end], rest[end + 1..].strip_prefix("::")?)
    } else {
        rest.split_once("::")?
    };
    let mut parts = rest.splitn(3, ':');
    let port = parts.next()?;
    let lun = u64::from_str_radix(parts.next()?, 16).ok()?;
    let iqn = parts.next()?;
    let port = if port.is_empty() { "3260" } else { port };
    Some((format!("{host}:{port}"), lun, iqn.to_owned()))
}

/// `aoe:e<shelf>.<slot>`.
fn parse_aoe_uri(uri: &str) -> Option<Address> {
    let (shelf, slot) = uri.strip_prefix("aoe:e")?.split_once('.')?;
    Some(Address { shelf: shelf.parse().ok()?, slot: slot.parse().ok()? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_as_the_context_prints_them_parse_back() {
        assert_eq!(
            parse_iscsi_uri("iscsi:192.0.2.5::3260:1:iqn.2010-10.org.openstack:volume-a"),
            Some(("192.0.2.5:3260".into(), 1, "iqn.2010-10.org.openstack:volume-a".into()))
        );
        assert_eq!(
            parse_iscsi_uri("iscsi:[2001:db8::5]::3261:a:iqn.x:y"),
            Some(("[2001:db8::5]:3261".into(), 10, "iqn.x:y".into()))
        );
        assert_eq!(parse_iscsi_uri("iscsi:host"), None);
        assert_eq!(parse_aoe_uri("aoe:e3.1"), Some(Address { shelf: 3, slot: 1 }));
        assert_eq!(parse_aoe_uri("aoe:e99999.1"), None);
        assert_eq!(split_nfs_root("10.0.0.1:/export"), Some(("10.0.0.1".into(), "/export".into())));
        assert_eq!(split_nfs_root("[fd00::1]:/r"), Some(("fd00::1".into(), "/r".into())));
        assert_eq!(split_nfs_root("host:relative"), None);
    }
}
