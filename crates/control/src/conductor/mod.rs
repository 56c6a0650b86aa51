//! The conductor: provision and power actions on nodes, one at a time per node, with the
//! storage interface attaching and detaching volumes around them, and events at each step.
//!
//! It sits between the callers (CLI, REST API, admin page, deploy call-back) and the storage
//! interfaces, the power drivers and the database; the boot snapshot follows its writes
//! (`on_change`). It knows no SQL (through `db`), no Cinder JSON (through `storage`), no BMC
//! protocol (through `power`).
//!
//! One entry point starts an action ([`Conductor::start`], [`Action`]): it checks the action is
//! allowed now, takes the node's lock for this action alone (a token, not a process: background
//! work in the same process cannot take it over), records the target states, and runs the work
//! on a tracked task ([`Conductor::tasks`], drained at shutdown) that releases the lock when it
//! ends. Background passes (power sync, deploy expiry, recovery) take their own locks and skip
//! nodes an action holds; they write only the columns they own.
//!
//! This file holds the entry point and what the parts share; the work is in `provision`
//! (provision verbs: deploy, undeploy, adopt), `deploy` (scenario 4's image deployment and its
//! call-back), `power` (power actions and the power-state sync), `validate` and `recovery`.

mod admission;
mod deploy;
mod power;
mod provision;
mod recovery;
pub mod states;
mod validate;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::task::TaskTracker;

pub use admission::{Refusal, StateChange, UnknownTarget};
pub use deploy::{CallbackReport, Caller};
pub use states::{Plan, Verb, plan};
pub use validate::{InterfaceCheck, ValidationReport};

use recovery::stuck;

use crate::power::{BootDevice, PowerAction, PowerDriver, PowerDrivers, PowerSettings};
use crate::storage::{StorageError, StorageInterfaces};
use bootvol_core::config::Config;
use bootvol_core::model::{Driver, NodeRecord, PowerState, ProvisionState, StorageInterfaceName};
use bootvol_db::{DbError, LockError, Locked, NodeLock, SharedDb};

/// Why an action did not happen, or failed.
#[derive(Debug, thiserror::Error)]
pub enum ConductorError {
    /// Not allowed now (state, lock, validation); nothing was changed.
    #[error("{0}")]
    Refused(String),
    /// [`Conductor::start`]'s admission rules refused the action; nothing was changed.
    #[error("{0}")]
    Inadmissible(Refusal),
    /// The action ran and failed; the node's `last_error` says the same.
    #[error("{0}")]
    Failed(String),
    #[error("no node named or with UUID {0}")]
    NotFound(String),
    /// Another live action holds the node; nothing was changed.
    #[error("{0}")]
    Locked(Locked),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<StorageError> for ConductorError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::NotEnabled(..) | StorageError::Invalid(_) => {
                ConductorError::Refused(e.to_string())
            }
            StorageError::Db(e) => ConductorError::Db(e),
            other => ConductorError::Failed(other.to_string()),
        }
    }
}

/// Ironic's words for a node another live action holds: the 409 of the API, the refusal of
/// the node service.
pub fn locked_message(locked: &Locked) -> String {
    format!(
        "Node {} is locked by {} (since {}), please retry after the current operation is completed.",
        locked.node, locked.action, locked.since
    )
}

/// The conductor.
#[derive(Clone)]
pub struct Conductor {
    config: Arc<Config>,
    db: SharedDb,
    storage: StorageInterfaces,
    power: PowerDrivers,
    on_change: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Where BMC calls are counted (`serve`); none for the CLI's one-off commands.
    metrics: Option<Arc<bootvol_runtime::metrics::Metrics>>,
    tasks: TaskTracker,
    /// The boot URL in force (`[http] public_url`, followed when it is `"auto"`).
    public_url: bootvol_runtime::public_url::PublicUrl,
    /// Where a power-on, reboot or deploy opens the node's boot window (`serve`).
    windows: Option<Arc<bootvol_core::boot_window::BootWindows>>,
}

impl std::fmt::Debug for Conductor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conductor").field("storage", &self.storage).finish()
    }
}

const PROVISION: &str = "baremetal.node.provision_set";
const POWER: &str = "baremetal.node.power_set";

impl Conductor {
    /// A conductor over `db` with the storage interfaces and power drivers the configuration
    /// names (what `bootvol serve` and the CLI use).
    pub fn from_config(config: Arc<Config>, db: SharedDb) -> Result<Conductor, ConductorError> {
        let storage = StorageInterfaces::new(Arc::clone(&config), db.clone())?;
        let power = PowerDrivers::new(PowerSettings {
            timeout: Duration::from_secs(config.conductor.power_timeout),
            state_wait: Duration::from_secs(config.conductor.power_state_wait),
        });
        Ok(Conductor::new(config, db, storage, power))
    }

    /// A conductor over `db` that attaches volumes through `storage` and reaches BMCs through
    /// `power` (a test passes the fake whose call log it reads).
    pub fn new(
        config: Arc<Config>,
        db: SharedDb,
        storage: StorageInterfaces,
        power: PowerDrivers,
    ) -> Conductor {
        let public_url =
            bootvol_runtime::public_url::PublicUrl::new(config.http.public_url.clone());
        Conductor {
            config,
            db,
            storage,
            power,
            on_change: None,
            metrics: None,
            tasks: TaskTracker::new(),
            public_url,
            windows: None,
        }
    }

    /// Called after each in-process write that changes what a node boots (`serve` rebuilds
    /// the boot snapshot at once rather than at its next poll).
    pub fn with_on_change(mut self, on_change: Arc<dyn Fn() + Send + Sync>) -> Conductor {
        self.on_change = Some(on_change);
        self
    }

    /// Opens a node's boot window in `windows` when it powers the node on or reboots it.
    pub fn with_boot_windows(
        mut self,
        windows: Arc<bootvol_core::boot_window::BootWindows>,
    ) -> Conductor {
        self.windows = Some(windows);
        self
    }

    /// Reports that two hosts claim a node's deploy token: the warning event
    /// `baremetal.node.secret_conflict` naming both, and the metric.
    pub(crate) async fn secret_conflict(
        &self,
        record: &NodeRecord,
        message: &str,
        first: Option<&Value>,
        second: &Caller,
    ) {
        tracing::warn!(node = record.node.uuid, client = %second.address,
            client_mac = second.mac.map(|m| m.to_string()).unwrap_or_default(), message, "secret conflict: deploy token");
        if let Some(metrics) = &self.metrics {
            metrics.secret_conflict();
        }
        let field = |key: &str| first.and_then(|c| c.get(key)).cloned();
        self.event(
            record,
            "baremetal.node.secret_conflict".to_owned(),
            "warning",
            json!({"via": "deploy token", "message": message,
                   "first_client": field("address"), "first_client_mac": field("mac"),
                   "client": second.address.to_string(),
                   "client_mac": second.mac.map(|m| m.to_string())}),
        )
        .await;
    }

    /// Counts every BMC call of this conductor's power drivers in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<bootvol_runtime::metrics::Metrics>) -> Conductor {
        self.metrics = Some(metrics);
        self
    }

    /// Follows `url` for the URLs it hands out (`serve` with `public_url = "auto"`).
    pub fn with_public_url(mut self, url: bootvol_runtime::public_url::PublicUrl) -> Conductor {
        self.public_url = url;
        self
    }

    /// The boot URL in force.
    pub fn public_url(&self) -> Arc<String> {
        self.public_url.get()
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The storage interface of nodes that record none.
    pub fn default_storage(&self) -> StorageInterfaceName {
        self.config.default.default_storage_interface
    }

    pub fn storage(&self) -> &StorageInterfaces {
        &self.storage
    }

    pub fn db(&self) -> &SharedDb {
        &self.db
    }

    /// Every action's task (and the deploy call-back's BMC steps): `serve` closes and waits on
    /// it at shutdown.
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Tells whoever serves the nodes (the snapshot's watcher) that they changed.
    pub(crate) fn changed(&self) {
        if let Some(f) = &self.on_change {
            f();
        }
    }

    fn driver(&self, driver: Driver) -> Arc<dyn PowerDriver> {
        let inner = self.power.driver(driver);
        match &self.metrics {
            Some(metrics) => Arc::new(crate::power::metered::Metered {
                inner,
                driver,
                metrics: Arc::clone(metrics),
            }),
            None => inner,
        }
    }

    /// The node by name or UUID.
    pub async fn load(&self, name_or_uuid: &str) -> Result<NodeRecord, ConductorError> {
        let key = name_or_uuid.to_owned();
        self.db
            .run(move |db| db.node_record(&key))
            .await?
            .ok_or_else(|| ConductorError::NotFound(name_or_uuid.to_owned()))
    }

    async fn save(&self, record: &NodeRecord) -> Result<(), ConductorError> {
        let node = record.node.clone();
        self.db.run(move |db| db.save_node_runtime(&node)).await?;
        Ok(())
    }

    async fn event(
        &self,
        record: &NodeRecord,
        event_type: String,
        level: &'static str,
        extra: Value,
    ) {
        let mut payload = json!({"node_uuid": record.node.uuid, "node_name": record.node.name,
            "provision_state": record.node.provision_state, "power_state": record.node.power_state});
        if let (Some(map), Value::Object(extra)) = (payload.as_object_mut(), extra) {
            map.extend(extra);
        }
        self.db.record_event(&record.node.uuid, event_type, level, payload).await;
    }

    /// Takes the node's lock for a new action `verb` (refused while another live action holds
    /// it, in this process or any other, once [`Conductor::retry_locked`] gave up).
    async fn lock(&self, record: &NodeRecord, verb: &str) -> Result<NodeLock, ConductorError> {
        let node = record.node.uuid.as_str();
        let taken = self.retry_locked(|| self.db.lock_node(node, verb)).await;
        taken.map_err(|e| match e {
            LockError::Locked(mut locked) => {
                locked.name.clone_from(&record.node.name);
                ConductorError::Locked(locked)
            }
            LockError::Db(e) => ConductorError::Db(e),
        })
    }

    /// Runs `attempt` again while it finds the node's lock held by another live action, as
    /// Ironic's conductor does before a 409: up to `[conductor] node_locked_retry_attempts`
    /// tries, `node_locked_retry_interval` seconds apart; then the last answer.
    pub(crate) async fn retry_locked<T, F>(
        &self,
        mut attempt: impl FnMut() -> F,
    ) -> Result<T, LockError>
    where
        F: Future<Output = Result<T, LockError>>,
    {
        let settings = &self.config.conductor;
        let mut tries = 1;
        loop {
            match attempt().await {
                Err(LockError::Locked(_)) if tries < settings.node_locked_retry_attempts => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_secs(settings.node_locked_retry_interval))
                        .await;
                }
                answer => return answer,
            }
        }
    }

    /// Starts an action on a node: checks it is allowed now, takes the node's lock for it,
    /// records its target states, and runs it on a tracked task that releases the lock when it
    /// ends. The one way the CLI, the REST API, the admin page and the deploy call-back start
    /// anything that changes a node.
    pub async fn start(&self, key: &str, action: Action) -> Result<Started, ConductorError> {
        self.start_with(key, action, None).await
    }

    /// [`Conductor::start`] for a deploy or rebuild that brings a config drive (Ironic's
    /// `configdrive`): stored as Ironic stores it (`instance_info.configdrive`) once the action
    /// is admitted and the node locked for it, so a refused action stores nothing.
    pub async fn start_with_configdrive(
        &self,
        key: &str,
        verb: Verb,
        configdrive: Value,
    ) -> Result<Started, ConductorError> {
        self.start_with(key, Action::Provision(verb), Some(configdrive)).await
    }

    async fn start_with(
        &self,
        key: &str,
        action: Action,
        configdrive: Option<Value>,
    ) -> Result<Started, ConductorError> {
        let mut record = self.load(key).await?;
        // What a crashed process left half done on this node is ended first.
        if stuck(&record) && self.recover_node(&record).await?.is_some() {
            self.changed();
            record = self.load(key).await?;
        }
        self.admit(&record, &action)?;
        let shown = action.shown(&record);
        let marked = shown.marked();
        // The state to go back to when the action is refused once running.
        let previous = shown.during.map(|_| record.node.provision_state);
        let lock = self.begin(&record, &action.verb(), shown).await?;
        if let Some(drive) = configdrive
            && let Err(e) = self.store_configdrive(&mut record, drive).await
        {
            // What `begin` recorded is taken back, saying why.
            let why = format!("config drive not stored: {e}");
            self.end_refused(&record.node.uuid, previous, why).await;
            lock.release().await;
            return Err(e);
        }
        let node_uuid = record.node.uuid.clone();
        let this = self.clone();
        let handle = self.tasks.spawn(async move {
            let uuid = record.node.uuid.clone();
            let verb = action.verb();
            let result = this.perform(record, action).await;
            if let Err(e) = &result {
                tracing::warn!(node = uuid, action = verb, error = %e, "action failed");
            }
            // A refusal found once running (the state changed meanwhile) leaves no pending
            // target behind, and says why.
            if let Err(ConductorError::Refused(message)) = &result
                && marked
            {
                this.end_refused(&uuid, previous, message.clone()).await;
            }
            lock.release().await;
            this.changed();
            result
        });
        Ok(Started { node_uuid, handle })
    }

    /// Stores a deploy's config drive as Ironic does (`instance_info.configdrive`).
    async fn store_configdrive(
        &self,
        record: &mut NodeRecord,
        drive: Value,
    ) -> Result<(), ConductorError> {
        record.node.instance_info.insert("configdrive".into(), drive);
        let (uuid, info) = (record.node.uuid.clone(), record.node.instance_info.clone());
        self.db.run(move |db| db.set_instance_info(&uuid, &info)).await?;
        Ok(())
    }

    /// An accepted action refused before it changed anything: the node back in `previous`
    /// (when `begin` moved it), no pending target, `last_error` saying why.
    async fn end_refused(&self, uuid: &str, previous: Option<ProvisionState>, why: String) {
        let uuid = uuid.to_owned();
        if let Err(e) = self.db.run(move |db| db.end_refused_action(&uuid, previous, &why)).await {
            tracing::error!(error = %e, "recording a refused action");
        }
    }

    /// [`Conductor::start`], then waits for the action to end.
    pub async fn run(&self, key: &str, action: Action) -> Result<NodeRecord, ConductorError> {
        self.start(key, action).await?.finished().await
    }

    /// Locks the node for an action and records what it shows at once (those columns only).
    async fn begin(
        &self,
        record: &NodeRecord,
        verb: &str,
        shown: Shown,
    ) -> Result<NodeLock, ConductorError> {
        let lock = self.lock(record, verb).await?;
        if shown.marked() {
            let uuid = record.node.uuid.clone();
            let Shown { during, provision, power } = shown;
            if let Err(e) =
                self.db.run(move |db| db.set_action_targets(&uuid, during, provision, power)).await
            {
                lock.release().await;
                return Err(e.into());
            }
        }
        Ok(lock)
    }

    /// The work of an action, the node's lock held.
    async fn perform(
        &self,
        mut record: NodeRecord,
        action: Action,
    ) -> Result<NodeRecord, ConductorError> {
        match action {
            Action::Provision(verb) => self.provision_locked(record, verb).await,
            Action::Power(power) => {
                self.power_locked(&mut record, power).await?;
                Ok(record)
            }
            Action::BootDevice { device, persistent } => {
                let persistent = self
                    .set_boot_device(&record.node, device, persistent)
                    .await
                    .map_err(ConductorError::Failed)?;
                let info = &mut record.node.driver_internal_info;
                info.insert("boot_device".into(), json!(device_name(device)));
                info.insert("boot_device_persistent".into(), json!(persistent));
                self.save(&record).await?;
                Ok(record)
            }
            Action::AttachVolumes | Action::DetachVolumes => {
                let storage = self.storage.for_node(&record)?;
                let result = if matches!(action, Action::AttachVolumes) {
                    storage.attach_volumes(&record).await
                } else {
                    storage.detach_volumes(&record).await
                };
                result.map_err(|e| match e {
                    StorageError::Db(e) => ConductorError::Db(e),
                    other => ConductorError::Failed(other.to_string()),
                })?;
                self.reload(&mut record).await?;
                Ok(record)
            }
            Action::Delete => self.delete_locked(record).await,
        }
    }

    async fn reload(&self, record: &mut NodeRecord) -> Result<(), ConductorError> {
        let fresh = self.load(&record.node.uuid).await?;
        // Keep the in-flight state fields; take the storage interface's writes.
        let node = &mut record.node;
        let (provision, target, last_error) =
            (node.provision_state, node.target_provision_state, node.last_error.clone());
        *record = fresh;
        record.node.provision_state = provision;
        record.node.target_provision_state = target;
        record.node.last_error = last_error;
        Ok(())
    }

    /// Deletes a node. Refused while it is deployed or has volumes attached in Cinder (unlike
    /// Ironic, which deletes and leaves the attachments behind).
    async fn delete_locked(&self, record: NodeRecord) -> Result<NodeRecord, ConductorError> {
        let uuid = record.node.uuid.clone();
        let live = self.db.run({
            let uuid = uuid.clone();
            move |db| db.has_live_attachments(&uuid)
        });
        let result = if !states::deletable(record.node.provision_state) {
            Err(ConductorError::Refused(format!(
                "node {} is {}: undeploy it first",
                record.node.name, record.node.provision_state
            )))
        } else if live.await? {
            Err(ConductorError::Refused(format!(
                "node {} has volumes attached: detach them first (bootvol volumes detach {})",
                record.node.name, record.node.name
            )))
        } else {
            self.db.run(move |db| db.delete_node(&uuid)).await.map_err(ConductorError::from)
        };
        result.map(|()| record)
    }

    /// Waits until a scenario-4 deployment leaves `wait call-back`, for at most `timeout`.
    pub async fn wait_for_deploy(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<NodeRecord, ConductorError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let record = self.load(name).await?;
            if record.node.provision_state != ProvisionState::WaitCallBack {
                return Ok(record);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ConductorError::Failed(format!(
                    "node {} is still waiting for its deploy ramdisk after {timeout:?} (is `bootvol serve` running?)",
                    record.node.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The deploy ramdisk's one-time token, to the first caller that is the node (served by
    /// `bootvol serve`); refused afterwards.
    pub async fn deploy_token(
        &self,
        node_uuid: &str,
        caller: Caller,
    ) -> Result<String, ConductorError> {
        deploy::token(self, node_uuid, caller).await
    }

    /// The deploy ramdisk's call-back (served by `bootvol serve`).
    pub async fn deploy_callback(
        &self,
        node_uuid: &str,
        token: &str,
        caller: Caller,
        report: CallbackReport,
    ) -> Result<(), ConductorError> {
        let result = deploy::callback(self, node_uuid, token, caller, report).await;
        // A refused call-back changed nothing: no snapshot rebuild for a forger to provoke.
        if result.is_ok() {
            self.changed();
        }
        result
    }

    /// The config drive of a deployment in progress, for the deploy ramdisk.
    pub async fn configdrive(
        &self,
        node_uuid: &str,
        token: &str,
        caller: Caller,
    ) -> Result<Vec<u8>, ConductorError> {
        deploy::configdrive(self, node_uuid, token, caller).await
    }

    /// Fails deployments whose ramdisk did not call back within `[deploy] callback_timeout`.
    pub async fn expire_deployments(&self) -> Result<Vec<String>, ConductorError> {
        let expired = deploy::expire(self).await;
        if !expired.as_ref().is_ok_and(Vec::is_empty) {
            self.changed();
        }
        expired
    }
}

/// What an action started through [`Conductor::start`] does.
#[derive(Debug, Clone)]
pub enum Action {
    Provision(Verb),
    Power(PowerAction),
    BootDevice {
        device: BootDevice,
        persistent: bool,
    },
    /// `bootvol volumes attach`: the node's storage interface attaches its volumes.
    AttachVolumes,
    /// `bootvol volumes detach`.
    DetachVolumes,
    /// Refused while the node is deployed or has volumes attached.
    Delete,
}

impl Action {
    /// The verb the node's lock shows.
    pub fn verb(&self) -> String {
        match self {
            Action::Provision(verb) => verb.to_string(),
            Action::Power(_) => "power".into(),
            Action::BootDevice { .. } => "boot device".into(),
            Action::AttachVolumes => "volume attach".into(),
            Action::DetachVolumes => "volume detach".into(),
            Action::Delete => "delete".into(),
        }
    }

    /// What the node shows as soon as the action is accepted, as Ironic shows it before it
    /// answers 202, so that a client polling the node sees it pending: a provision action's
    /// passing state (a client waiting for `inspect` to end in `manageable` would otherwise
    /// see the node already there) and target, a power action's target.
    fn shown(&self, record: &NodeRecord) -> Shown {
        let none = Shown::NOTHING;
        match self {
            Action::Provision(verb) => match plan(record.node.provision_state, *verb) {
                Ok(plan) => Shown {
                    // Abort's end state is its work (fail_deployment), not a passing state.
                    during: (plan.during != record.node.provision_state && *verb != Verb::Abort)
                        .then_some(plan.during),
                    provision: Some(plan.target),
                    power: None,
                },
                Err(_) => none,
            },
            Action::Power(PowerAction::On | PowerAction::Reboot) => {
                Shown { power: Some(PowerState::On), ..none }
            }
            Action::Power(PowerAction::Off | PowerAction::SoftOff) => {
                Shown { power: Some(PowerState::Off), ..none }
            }
            _ => none,
        }
    }
}

/// What an accepted action shows before it runs: see [`Action::shown`].
#[derive(Debug, Clone, Copy)]
struct Shown {
    during: Option<ProvisionState>,
    provision: Option<ProvisionState>,
    power: Option<PowerState>,
}

impl Shown {
    /// An action that shows nothing before it runs (a boot device, a call-back).
    const NOTHING: Shown = Shown { during: None, provision: None, power: None };

    fn marked(&self) -> bool {
        self.during.is_some() || self.provision.is_some() || self.power.is_some()
    }
}

/// An accepted action: the node is locked for it and its work runs on a tracked task.
#[derive(Debug)]
pub struct Started {
    pub node_uuid: String,
    handle: tokio::task::JoinHandle<Result<NodeRecord, ConductorError>>,
}

impl Started {
    /// Waits for the action to end.
    pub async fn finished(self) -> Result<NodeRecord, ConductorError> {
        self.handle.await.unwrap_or_else(|e| {
            Err(ConductorError::Failed(format!("the action ended before it finished: {e}")))
        })
    }
}

fn device_name(device: BootDevice) -> &'static str {
    match device {
        BootDevice::Pxe => "pxe",
        BootDevice::Disk => "disk",
    }
}
