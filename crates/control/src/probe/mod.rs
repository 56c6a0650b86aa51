//! The probe of every node's boot target from the appliance: `bootvol probe`, the admin page's
//! "Probe" button and the background pass (`[probe] interval`) all call [`run`], which probes
//! the targets the node's script would attach and records each node's [`Report`].
//!
//! What is probed comes from `bootvol_core::probe::plan` (the same boot context the script is
//! printed from); the wire codecs are `bootvol_core::probe::{aoe, rpc}`. The I/O is here, one
//! file per kind: [`aoe`] (a raw Ethernet socket), [`nfs`] (portmapper and MOUNT over TCP),
//! [`http`] (HEAD and a range read; the one HTTP client here beside Cinder, power and the
//! notifier), [`iscsi`] (the login, `bootvol-iscsi`'s). FCoE and HBA targets are not probeable
//! from the appliance and are reported so, never as ok.
//!
//! It never writes to a volume, and a powered-on node is not probed at all (its report says
//! "skipped") unless `live` is asked: some arrays limit sessions per initiator.

mod aoe;
mod http;
pub mod iscsi;
mod nfs;

use std::time::Duration;

use futures_util::StreamExt;

use bootvol_core::boot::BootSettings;
use bootvol_core::config::Config;
use bootvol_core::model::{NodeRecord, PowerState, StorageInterfaceName};
use bootvol_core::probe::plan::{self, NoPlan, Target, TargetKind};
use bootvol_core::probe::{Report, Status, TargetResult};
use bootvol_core::timefmt::now_unix;

use crate::conductor::{Conductor, ConductorError};

/// Nodes probed at once in a pass over all of them.
const CONCURRENCY: usize = 8;

/// Which nodes a run probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// One node, by name or UUID.
    Node(String),
    All,
}

/// One node's probe, as run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeProbe {
    pub name: String,
    pub report: Report,
}

/// What the probes need from the configuration, and the HTTP client they share.
#[derive(Debug, Clone)]
pub struct Prober {
    timeout: Duration,
    aoe_interface: String,
    settings: BootSettings,
    default_storage: StorageInterfaceName,
    http: http::Http,
}

impl Prober {
    /// From `[probe]`, with the boot URL in force (the kernel and initrd URLs are under it).
    pub fn new(config: &Config, public_url: &str) -> Prober {
        let timeout = Duration::from_secs(config.probe.timeout);
        let mut settings = config.boot_settings();
        settings.public_url = public_url.to_owned();
        Prober {
            timeout,
            aoe_interface: config.probe.aoe_interface.clone(),
            settings,
            default_storage: config.default.default_storage_interface,
            http: http::Http::new(timeout),
        }
    }

    /// Probes one node's targets, boot volume first; a powered-on node only when `live`.
    pub async fn node(&self, record: &NodeRecord, live: bool) -> Report {
        let now = i64::try_from(now_unix()).unwrap_or(i64::MAX);
        let uuid = &record.node.uuid;
        if !live && record.node.power_state == Some(PowerState::On) {
            return Report::without_targets(
                uuid,
                now,
                Status::SkippedPoweredOn,
                "powered on: not probed unless asked (--live)",
            );
        }
        let targets = match plan::targets(record, &self.settings, self.default_storage) {
            Ok(targets) => targets,
            Err(NoPlan::NotBootFromVolume) => {
                return Report::without_targets(
                    uuid,
                    now,
                    Status::NotProbeable,
                    "not a boot-from-volume node: nothing to probe",
                );
            }
            Err(NoPlan::Invalid(why)) => {
                return Report::without_targets(
                    uuid,
                    now,
                    Status::Failed,
                    &format!("the node does not validate: {why}"),
                );
            }
        };
        let mut results = Vec::with_capacity(targets.len());
        for target in &targets {
            results.push(self.target(target).await);
        }
        Report::from_results(uuid, now, &results)
    }

    async fn target(&self, target: &Target) -> TargetResult {
        let limit = match &target.kind {
            TargetKind::Iscsi(iscsi) => iscsi::limit(iscsi, self.timeout),
            _ => self.timeout * 3 + Duration::from_secs(1),
        };
        let (status, text) = match tokio::time::timeout(limit, self.dispatch(&target.kind)).await {
            Ok(found) => found,
            Err(_) => (Status::Failed, format!("no answer within {}s", limit.as_secs())),
        };
        TargetResult { volume: target.volume.clone(), kind: target.kind.name(), status, text }
    }

    async fn dispatch(&self, kind: &TargetKind) -> (Status, String) {
        match kind {
            TargetKind::Iscsi(target) => iscsi::probe(target, self.timeout).await,
            TargetKind::Aoe(address) => {
                aoe::probe(&self.aoe_interface, *address, self.timeout).await
            }
            TargetKind::NfsRoot { server, path, kernel_url, initrd_url } => {
                nfs::probe(&self.http, server, path, kernel_url, initrd_url, self.timeout).await
            }
            TargetKind::HttpSan { url } => self.http.san(url).await,
            TargetKind::NotProbeable { why, .. } => (Status::NotProbeable, (*why).to_owned()),
        }
    }
}

/// Probes the selected nodes (a powered-on one only when `live`) and records each node's
/// report as its last; answers them by node name.
pub async fn run(
    conductor: &Conductor,
    selection: Selection,
    live: bool,
) -> Result<Vec<NodeProbe>, ConductorError> {
    let records = match selection {
        Selection::Node(key) => vec![conductor.load(&key).await?],
        Selection::All => conductor.db().run(|db| db.node_records()).await?,
    };
    let prober = Prober::new(conductor.config(), &conductor.public_url());
    let prober = &prober;
    let mut probes: Vec<NodeProbe> = futures_util::stream::iter(records)
        .map(|record| async move {
            let report = prober.node(&record, live).await;
            NodeProbe { name: record.node.name, report }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    probes.sort_by(|a, b| a.name.cmp(&b.name));
    for probe in &probes {
        let report = probe.report.clone();
        conductor.db().run(move |db| db.record_probe(&report)).await?;
    }
    Ok(probes)
}
