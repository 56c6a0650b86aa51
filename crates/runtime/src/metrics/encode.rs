//! The OpenMetrics text of one scrape: [`Scrape`] is the `prometheus-client` collector, and each
//! family (or group of families) is written by a function of its own, in the order the text
//! has always had them.
//!
//! It must not know how the values are counted, nor HTTP: it reads [`Metrics`] and the sync
//! status read for this scrape.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use bootvol_core::boot::report::Stage;
use bootvol_core::model::sync::{SyncPassOutcome, SyncStatus};
use bootvol_core::model::{Driver, ProvisionState};

use super::labels::{
    BmcCall, BmcResult, DHCP_ARCHES, DhcpMessage, DhcpResult, FileClass, ReportDropped, Route,
    STATUSES, ScriptKind, TftpResult, Transport, index_of,
};
use super::{Metrics, now_ms};

/// One scrape: the counters, and what was read from the database for it.
#[derive(Debug)]
pub(super) struct Scrape {
    pub(super) metrics: Arc<Metrics>,
    pub(super) sync: Option<SyncStatus>,
    /// Refused scripts counted as unknown (the unauthenticated scrape).
    pub(super) public: bool,
}

fn counter(encoder: MetricEncoder, value: u64) -> std::fmt::Result {
    ConstCounter::new(value).encode(encoder)
}

fn gauge(encoder: MetricEncoder, value: i64) -> std::fmt::Result {
    ConstGauge::new(value).encode(encoder)
}

/// A family of one counter without labels.
fn single_counter(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    counter(e.encode_descriptor(name, help, None, MetricType::Counter)?, value)
}

/// A family of one gauge without labels.
fn single_gauge(e: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> std::fmt::Result {
    gauge(e.encode_descriptor(name, help, None, MetricType::Gauge)?, value)
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let m = &self.metrics;
        encode_http(&mut e, m)?;
        encode_scripts(&mut e, m, self.public)?;
        encode_tftp(&mut e, m)?;
        encode_rebuilds(&mut e, m)?;
        encode_refusals(&mut e, m)?;
        encode_reports(&mut e, m)?;
        encode_snapshot(&mut e, m)?;
        encode_health(&mut e, m)?;
        encode_dhcp(&mut e, m)?;
        encode_bmc(&mut e, m)?;
        if let Some(sync) = &self.sync {
            encode_sync(&mut e, sync)?;
        }
        Ok(())
    }
}

/// The boot HTTP listener: requests by route and status, and their timings by route.
fn encode_http(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "bootvol_http_requests",
        "Requests answered by the boot HTTP listener, by route and status (200 always, others once seen).",
        None,
        MetricType::Counter,
    )?;
    for (r, route) in Route::ALL.iter().enumerate() {
        for (s, value) in m.http_requests[r].iter().enumerate() {
            // 200 always, the other statuses once seen: a fixed, small set either way.
            let value = value.load(Relaxed);
            if value == 0 && s != 0 {
                continue;
            }
            let status = STATUSES.get(s).map_or("other".to_owned(), u16::to_string);
            let labels = [("route", route.as_str()), ("status", status.as_str())];
            counter(family.encode_family(&labels)?, value)?;
        }
    }
    let mut family = e.encode_descriptor(
        "bootvol_http_request_seconds",
        "Time to answer a request of the boot HTTP listener, by route.",
        None,
        MetricType::Histogram,
    )?;
    for (r, route) in Route::ALL.iter().enumerate() {
        m.http_seconds[r].encode(family.encode_family(&[("route", route.as_str())])?)?;
    }
    Ok(())
}

/// Boot script requests by kind and transport; `public`: refused ones counted as unknown.
fn encode_scripts(e: &mut DescriptorEncoder, m: &Metrics, public: bool) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "bootvol_boot_scripts",
        if public {
            "Boot script requests by what they got (generic, default, node, unknown: refused ones included) and transport."
        } else {
            "Boot script requests by what they got (generic, default, node, unknown, refused) and transport."
        },
        None,
        MetricType::Counter,
    )?;
    let (unknown, refused) = (
        index_of(&ScriptKind::ALL, ScriptKind::Unknown),
        index_of(&ScriptKind::ALL, ScriptKind::Refused),
    );
    for (k, kind) in ScriptKind::ALL.iter().enumerate() {
        if public && k == refused {
            continue;
        }
        for (t, transport) in Transport::ALL.iter().enumerate() {
            let labels = [("kind", kind.as_str()), ("transport", transport.as_str())];
            let mut value = m.scripts[k][t].load(Relaxed);
            if public && k == unknown {
                value += m.scripts[refused][t].load(Relaxed);
            }
            counter(family.encode_family(&labels)?, value)?;
        }
    }
    Ok(())
}

/// TFTP read requests by file class and result, their timings, and the bytes acknowledged.
fn encode_tftp(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "bootvol_tftp_transfers",
        "TFTP read requests by what they carried (script, file) and how they ended.",
        None,
        MetricType::Counter,
    )?;
    for (c, class) in FileClass::ALL.iter().enumerate() {
        for (i, result) in TftpResult::ALL.iter().enumerate() {
            let labels = [("file_class", class.as_str()), ("result", result.as_str())];
            let value = m.tftp_transfers[c][i].load(Relaxed);
            counter(family.encode_family(&labels)?, value)?;
        }
    }
    let mut family = e.encode_descriptor(
        "bootvol_tftp_transfer_seconds",
        "Time from a TFTP read request to its end, by what it carried.",
        None,
        MetricType::Histogram,
    )?;
    for (c, class) in FileClass::ALL.iter().enumerate() {
        m.tftp_seconds[c].encode(family.encode_family(&[("file_class", class.as_str())])?)?;
    }
    single_counter(
        e,
        "bootvol_tftp_bytes",
        "Bytes TFTP clients acknowledged.",
        m.tftp_bytes.load(Relaxed),
    )
}

/// Snapshot rebuilds: how long they take, and how many failed.
fn encode_rebuilds(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let family = e.encode_descriptor(
        "bootvol_snapshot_rebuild_seconds",
        "Time to read the database and render every node's boot script.",
        None,
        MetricType::Histogram,
    )?;
    m.rebuild_seconds.encode(family)?;
    single_counter(
        e,
        "bootvol_snapshot_rebuild_failures",
        "Snapshot rebuilds that failed (the previous snapshot stayed in service).",
        m.rebuild_failures.load(Relaxed),
    )
}

/// What was refused to a client: secrets a second client claimed, neighbour resolutions over
/// the limit.
fn encode_refusals(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    single_counter(
        e,
        "bootvol_secret_conflicts",
        "Requests for a node's secret script or deploy token refused because another client claimed it in the same boot window, or because the node was not booting (baremetal.node.secret_conflict).",
        m.secret_conflicts.load(Relaxed),
    )?;
    single_counter(
        e,
        "bootvol_neighbour_resolutions_refused",
        "Neighbour resolutions not started because too many were in flight (the client was answered as unknown).",
        m.neighbour_overflow.get().map_or(0, |c| c.load(Relaxed)),
    )
}

/// Boot reports (`/report/<mac>`): recorded by stage, and those of known nodes not recorded.
fn encode_reports(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "bootvol_boot_reports",
        "Boot reports accepted from nodes' scripts, by stage and result (claims from the network, baremetal.node.boot_reported).",
        None,
        MetricType::Counter,
    )?;
    for (i, stage) in Stage::ALL.iter().enumerate() {
        let labels = [("stage", stage.as_str()), ("result", stage.result())];
        counter(family.encode_family(&labels)?, m.boot_reports[i].load(Relaxed))?;
    }
    let mut family = e.encode_descriptor(
        "bootvol_boot_reports_dropped",
        "Boot reports of known nodes not recorded: over the client's rate (limited) or with the event queue full (queue_full).",
        None,
        MetricType::Counter,
    )?;
    for (i, why) in ReportDropped::ALL.iter().enumerate() {
        let value = m.boot_reports_dropped[i].load(Relaxed);
        counter(family.encode_family(&[("reason", why.as_str())])?, value)?;
    }
    Ok(())
}

/// The snapshot being served: its generation, its age once there is one, its nodes by state.
fn encode_snapshot(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    single_gauge(
        e,
        "bootvol_snapshot_generation",
        "Snapshots built since start; the one served is the last.",
        m.generation.load(Relaxed) as i64,
    )?;
    let built = m.built_at_ms.load(Relaxed);
    if built > 0 {
        single_gauge(
            e,
            "bootvol_snapshot_age_seconds",
            "Seconds since the snapshot being served was built.",
            (now_ms().saturating_sub(built) / 1000) as i64,
        )?;
    }
    let mut family = e.encode_descriptor(
        "bootvol_nodes",
        "Nodes by provision state, as of the snapshot being served.",
        None,
        MetricType::Gauge,
    )?;
    for (i, state) in ProvisionState::ALL.iter().enumerate() {
        let labels = [("provision_state", state.as_str())];
        gauge(family.encode_family(&labels)?, m.nodes[i].load(Relaxed) as i64)?;
    }
    Ok(())
}

/// Whether the boot listeners are up and the database can be read and is connected.
fn encode_health(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    single_gauge(
        e,
        "bootvol_boot_listeners_up",
        "1 while the boot HTTP and TFTP listeners answer.",
        i64::from(m.boot_listeners_up.load(Relaxed)),
    )?;
    single_gauge(
        e,
        "bootvol_database_readable",
        "1 when the last read of the database (by a scrape or /readyz) succeeded.",
        i64::from(m.database_readable.load(Relaxed)),
    )?;
    single_gauge(
        e,
        "bootvol_database_connected",
        "1 while the connection to the database engine is up (PostgreSQL's change listener; always 1 on SQLite).",
        i64::from(m.database_connected.load(Relaxed)),
    )
}

/// ProxyDHCP packets: only the combinations seen (most never are).
fn encode_dhcp(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "bootvol_dhcp_packets",
        "Packets received by the ProxyDHCP, by message type, client architecture (option 93, IANA number) and what was done (only combinations seen).",
        None,
        MetricType::Counter,
    )?;
    let arch_label = |a: usize| match DHCP_ARCHES.get(a) {
        Some(n) => n.to_string(),
        None if a == DHCP_ARCHES.len() => "other".to_owned(),
        None => "none".to_owned(),
    };
    for (mi, message) in DhcpMessage::ALL.iter().enumerate() {
        for a in 0..DHCP_ARCHES.len() + 2 {
            for (ri, result) in DhcpResult::ALL.iter().enumerate() {
                let value = m.dhcp_packets[Metrics::dhcp_slot(mi, a, ri)].load(Relaxed);
                if value == 0 {
                    continue;
                }
                let arch = arch_label(a);
                let labels = [
                    ("message", message.as_str()),
                    ("arch", arch.as_str()),
                    ("result", result.as_str()),
                ];
                counter(family.encode_family(&labels)?, value)?;
            }
        }
    }
    Ok(())
}

/// BMC calls: `ok` for every driver and call, the errors once seen.
fn encode_bmc(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let mut family = e.encode_descriptor(
        "bootvol_bmc_calls",
        "Calls of the power drivers to BMCs, by driver, call and result (ok always, errors once seen).",
        None,
        MetricType::Counter,
    )?;
    for (di, driver) in Driver::ALL.iter().enumerate() {
        for (ci, call) in BmcCall::ALL.iter().enumerate() {
            for (ri, result) in BmcResult::ALL.iter().enumerate() {
                let value = m.bmc_calls[Metrics::bmc_slot(di, ci, ri)].load(Relaxed);
                if value == 0 && *result != BmcResult::Ok {
                    continue;
                }
                let labels = [
                    ("driver", driver.as_str()),
                    ("call", call.as_str()),
                    ("result", result.as_str()),
                ];
                counter(family.encode_family(&labels)?, value)?;
            }
        }
    }
    Ok(())
}

/// The last Cinder sync pass (`sync_status`), present once a pass was recorded.
fn encode_sync(e: &mut DescriptorEncoder, sync: &SyncStatus) -> std::fmt::Result {
    let family = e.encode_descriptor(
        "bootvol_cinder_sync_last_pass_timestamp_seconds",
        "When the last Cinder sync pass finished (Unix seconds).",
        None,
        MetricType::Gauge,
    )?;
    gauge(family, sync.finished_at)?;
    let family = e.encode_descriptor(
        "bootvol_cinder_sync_last_pass_errors",
        "Volumes the last Cinder sync pass could not check.",
        None,
        MetricType::Gauge,
    )?;
    gauge(family, sync.errors)?;
    let mut family = e.encode_descriptor(
        "bootvol_cinder_sync_last_pass_outcome",
        "1 for the outcome of the last Cinder sync pass (ok, drift, partial, failed), 0 for the others.",
        None,
        MetricType::Gauge,
    )?;
    for outcome in SyncPassOutcome::ALL.map(|o| o.as_str()) {
        let value = i64::from(sync.outcome.as_str() == outcome);
        gauge(family.encode_family(&[("outcome", outcome)])?, value)?;
    }
    if let Some(ok_at) = sync.last_ok_at {
        let family = e.encode_descriptor(
            "bootvol_cinder_sync_last_success_timestamp_seconds",
            "When the last clean Cinder sync pass (outcome ok: nothing drifted, nothing failed) finished (Unix seconds).",
            None,
            MetricType::Gauge,
        )?;
        gauge(family, ok_at)?;
    }
    Ok(())
}
