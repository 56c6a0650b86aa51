//! The control plane's background work, started by its owners as named services
//! (`bootvol_runtime::services`): at start, finish or undo what a crashed process left (volume
//! attaches, deploys); then, each on its own interval, deliver events to the webhook, fail
//! deployments whose ramdisk never called back, record out-of-band power changes
//! (`[conductor] power_sync_interval`), sync volumes with Cinder (`[cinder] sync_interval`) and
//! probe every node's boot target (`[probe] interval`; powered-on nodes are skipped).
//! On a shared database (PostgreSQL) also this instance's heartbeat and the recovery of actions
//! an instance that died left behind. Work that must run once across instances runs under a
//! lease ([`LEASES`]); [`leave`] gives them up at shutdown.
//!
//! It decides when the conductor's passes run, not what they do; it must not know HTTP routes
//! or the boot edge.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bootvol_core::config::Config;
use bootvol_core::model::sync::SyncRunner;
use bootvol_core::timefmt::now_unix;
use bootvol_db::{DbError, SharedDb, serve_id};
use bootvol_runtime::public_url::PublicUrl;
use bootvol_runtime::services::{spawn_once, spawn_periodic};

use crate::conductor::Conductor;
use crate::notify::{Notifier, Webhook};
use crate::storage::CinderStorage;

/// Every lease name the services take (released by [`leave`]).
pub const LEASES: [&str; 6] =
    ["webhook", "deploy expiry", "power sync", "cinder sync", "recovery", "probe"];

/// How often an instance records its heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// Where the services run and when they stop.
#[derive(Debug, Clone, Copy)]
pub struct Runner<'a> {
    pub tracker: &'a TaskTracker,
    pub shutdown: &'a CancellationToken,
}

/// Starts the conductor's services and the Cinder sync, and on a shared database the cluster's.
pub async fn start(
    config: &Config,
    conductor: &Conductor,
    public_url: &PublicUrl,
    run: Runner<'_>,
) {
    let webhook = webhook(config);
    start_recovery(conductor, webhook.is_none(), run);
    if let Some(hook) = webhook {
        start_webhook(conductor.db(), hook, run);
    }
    start_deploy_expiry(conductor, run);
    if config.conductor.power_sync_interval > 0 {
        start_power_sync(conductor, Duration::from_secs(config.conductor.power_sync_interval), run);
    }
    if config.probe.interval > 0 {
        start_probe(conductor, Duration::from_secs(config.probe.interval), run);
    }
    let cinder = conductor.storage().cinder().cloned();
    if let Some(cinder) = cinder.filter(|_| config.cinder.sync_interval > 0) {
        let every = Duration::from_secs(config.cinder.sync_interval);
        start_cinder_sync(conductor.db(), cinder, every, run);
    }
    if conductor.db().run(|db| db.is_postgres()).await {
        start_cluster(conductor, public_url, run);
    }
}

fn webhook(config: &Config) -> Option<Webhook> {
    let notifications = &config.notifications;
    (!notifications.webhook_url.is_empty()).then(|| Webhook {
        url: notifications.webhook_url.clone(),
        secret: notifications.webhook_secret.clone(),
        max_attempts: i64::from(notifications.max_attempts),
        timeout: Duration::from_secs(10),
    })
}

/// Once at start: volume recovery, then the actions a crash interrupted; with no webhook, the
/// outbox is marked delivered.
fn start_recovery(conductor: &Conductor, skip_delivery: bool, run: Runner<'_>) {
    let (c, volumes) = (conductor.clone(), conductor.storage().cinder().cloned());
    spawn_once(run.tracker, run.shutdown, "recovery", async move {
        if let Some(cinder) = &volumes {
            recover_volumes(cinder).await;
        }
        match c.recover_interrupted().await {
            Ok(done) if !done.is_empty() => {
                tracing::warn!(nodes = ?done, "interrupted actions ended")
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "recovering interrupted actions"),
        }
        if skip_delivery {
            let _ = c.db().run(|db| db.skip_event_delivery()).await;
        }
    });
}

async fn recover_volumes(cinder: &CinderStorage) {
    match cinder.recover().await {
        Ok(report) if report.failed.is_empty() => tracing::info!(
            undone = report.undone.len(),
            detached = report.detached.len(),
            "volume recovery done"
        ),
        Ok(report) => {
            tracing::error!(failed = ?report.failed, "volume recovery incomplete; retried next pass")
        }
        Err(e) => tracing::error!(error = %e, "volume recovery failed; retried next pass"),
    }
}

fn start_webhook(db: &SharedDb, hook: Webhook, run: Runner<'_>) {
    let notifier = Notifier::new(db.clone(), hook);
    let db = db.clone();
    let every = Duration::from_secs(1);
    spawn_periodic(run.tracker, run.shutdown, "webhook", every, move || {
        let (notifier, db) = (notifier.clone(), db.clone());
        async move {
            if holds_lease(&db, "webhook", every).await {
                notifier.deliver_due().await;
            }
        }
    });
}

fn start_deploy_expiry(conductor: &Conductor, run: Runner<'_>) {
    let c = conductor.clone();
    let every = Duration::from_secs(5);
    spawn_periodic(run.tracker, run.shutdown, "deploy expiry", every, move || {
        let c = c.clone();
        async move {
            if !holds_lease(c.db(), "deploy expiry", every).await {
                return;
            }
            if let Err(e) = c.expire_deployments().await {
                tracing::warn!(error = %e, "expiring deployments");
            }
        }
    });
}

fn start_power_sync(conductor: &Conductor, every: Duration, run: Runner<'_>) {
    let c = conductor.clone();
    spawn_periodic(run.tracker, run.shutdown, "power sync", every, move || {
        let c = c.clone();
        async move {
            if !holds_lease(c.db(), "power sync", every).await {
                return;
            }
            if let Err(e) = c.sync_power_states().await {
                tracing::warn!(error = %e, "power state sync");
            }
        }
    });
}

/// Every `[probe] interval`: every node's boot target probed (a powered-on node skipped, as
/// without `--live`), each node's report recorded; once across instances.
fn start_probe(conductor: &Conductor, every: Duration, run: Runner<'_>) {
    let c = conductor.clone();
    spawn_periodic(run.tracker, run.shutdown, "probe", every, move || {
        let c = c.clone();
        async move {
            if !holds_lease(c.db(), "probe", every).await {
                return;
            }
            match crate::probe::run(&c, crate::probe::Selection::All, false).await {
                Ok(probes) => tracing::info!(
                    nodes = probes.len(),
                    failed = probes
                        .iter()
                        .filter(|p| p.report.status == bootvol_core::probe::Status::Failed)
                        .count(),
                    "probe pass"
                ),
                Err(e) => tracing::warn!(error = %e, "probe pass failed"),
            }
        }
    });
}

fn start_cinder_sync(db: &SharedDb, cinder: Arc<CinderStorage>, every: Duration, run: Runner<'_>) {
    let db = db.clone();
    spawn_periodic(run.tracker, run.shutdown, "cinder sync", every, move || {
        let (cinder, db) = (cinder.clone(), db.clone());
        async move {
            if !holds_lease(&db, "cinder sync", every).await {
                return;
            }
            if let Err(e) = cinder.recover().await {
                tracing::warn!(error = %e, "volume recovery pass failed");
            }
            match cinder.sync(SyncRunner::Serve).await {
                Ok(report) => tracing::info!(
                    checked = report.checked,
                    updated = report.updated.len(),
                    drifted = report.drifted.len(),
                    errors = report.errors.len(),
                    "volume sync pass"
                ),
                Err(e) => tracing::warn!(error = %e, "volume sync pass failed"),
            }
        }
    });
}

/// PostgreSQL only: this instance's heartbeat in the registry (its boot URL is what the other
/// instances' scripts fall back to), and recovery of actions that an instance which died left
/// behind (under a lease, as after a crash at start).
fn start_cluster(conductor: &Conductor, public_url: &PublicUrl, run: Runner<'_>) {
    let beat = |db: SharedDb, url: PublicUrl| async move {
        let now = i64::try_from(now_unix()).unwrap_or(i64::MAX);
        let url = url.get().to_string();
        if let Err(e) = db.run(move |db| db.heartbeat(serve_id(), &url, now)).await {
            tracing::debug!(error = %e, "heartbeat not recorded");
        }
    };
    let (db, url) = (conductor.db().clone(), public_url.clone());
    spawn_once(run.tracker, run.shutdown, "first heartbeat", beat(db.clone(), url.clone()));
    spawn_periodic(run.tracker, run.shutdown, "heartbeat", HEARTBEAT, move || {
        beat(db.clone(), url.clone())
    });
    let c = conductor.clone();
    let every = Duration::from_secs(30);
    spawn_periodic(run.tracker, run.shutdown, "peer recovery", every, move || {
        let c = c.clone();
        async move {
            if !holds_lease(c.db(), "recovery", every).await {
                return;
            }
            match c.recover_interrupted().await {
                Ok(done) if !done.is_empty() => {
                    tracing::warn!(nodes = ?done, "actions of an instance that is gone ended")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "recovering other instances' actions"),
            }
        }
    });
}

/// Whether this instance holds lease `name` (taking or renewing it): work that must run once at
/// a time across instances on one database runs only where this is true. The lease outlives
/// three passes (at least 15 s), so a dead holder's work moves to another instance after that.
async fn holds_lease(db: &SharedDb, name: &'static str, every: Duration) -> bool {
    let ttl = i64::try_from((every * 3).as_secs()).unwrap_or(i64::MAX).max(15);
    let now = i64::try_from(now_unix()).unwrap_or(i64::MAX);
    match db.run(move |db| db.try_lease(name, serve_id(), now, ttl)).await {
        Ok(held) => held,
        Err(e) => {
            tracing::debug!(lease = name, error = %e, "lease not taken");
            false
        }
    }
}

/// Leaving cleanly (PostgreSQL): the peers drop this instance from their scripts at their next
/// check and take its once-only work at once, rather than after the heartbeat and the leases
/// expire. Gives up after two seconds.
pub async fn leave(db: &SharedDb) {
    let leaving = db.run(|db| {
        if !db.is_postgres() {
            return Ok(());
        }
        db.leave(serve_id())?;
        for lease in LEASES {
            db.release_lease(lease, serve_id())?;
        }
        Ok::<(), DbError>(())
    });
    if let Err(e) = tokio::time::timeout(Duration::from_secs(2), leaving).await.unwrap_or(Ok(())) {
        tracing::warn!(error = %e, "could not leave the instances registry");
    }
}
