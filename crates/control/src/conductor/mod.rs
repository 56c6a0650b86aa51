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

mod deploy;
pub mod notify;
pub mod states;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::task::TaskTracker;

pub use deploy::{CallbackReport, Caller};
pub use states::{Plan, Verb, plan};

use crate::power::{BootDevice, PowerAction, PowerDriver, PowerDrivers, PowerError, PowerSettings};
use crate::storage::{StorageError, StorageInterfaces};
use bootvol_core::boot::{Scenario, decide, set_boot_option};
use bootvol_core::config::Config;
use bootvol_core::files::FileRoot;
use bootvol_core::model::{Driver, NodeRecord, PowerState, ProvisionState, StorageInterfaceName};
use bootvol_db::{DbError, LockError, Locked, NodeLock, SharedDb};

/// Why an action did not happen, or failed.
#[derive(Debug, thiserror::Error)]
pub enum ConductorError {
    /// Not allowed now (state, lock, validation); nothing was changed.
    #[error("{0}")]
    Refused(String),
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

/// One line of `validate`: an interface and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceCheck {
    pub interface: &'static str,
    pub result: bool,
    pub reason: Option<String>,
}

/// Every interface's verdict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ValidationReport(pub Vec<InterfaceCheck>);

impl ValidationReport {
    pub fn ok(&self) -> bool {
        self.0.iter().all(|c| c.result)
    }

    /// `interface: reason` for each failure, one per line.
    pub fn failures(&self) -> String {
        self.0
            .iter()
            .filter(|c| !c.result)
            .map(|c| format!("{}: {}", c.interface, c.reason.as_deref().unwrap_or("failed")))
            .collect::<Vec<_>>()
            .join("; ")
    }
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

    fn changed(&self) {
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
    /// it, in this process or any other).
    async fn lock(&self, record: &NodeRecord, verb: &str) -> Result<NodeLock, ConductorError> {
        self.db.lock_node(&record.node.uuid, verb).await.map_err(|e| match e {
            LockError::Locked(mut locked) => {
                locked.name.clone_from(&record.node.name);
                ConductorError::Locked(locked)
            }
            LockError::Db(e) => ConductorError::Db(e),
        })
    }

    /// Starts an action on a node: checks it is allowed now, takes the node's lock for it,
    /// records its target states, and runs it on a tracked task that releases the lock when it
    /// ends. The one way the CLI, the REST API, the admin page and the deploy call-back start
    /// anything that changes a node.
    pub async fn start(&self, key: &str, action: Action) -> Result<Started, ConductorError> {
        let mut record = self.load(key).await?;
        // What a crashed process left half done on this node is ended first.
        if stuck(&record) && self.recover_node(&record).await?.is_some() {
            self.changed();
            record = self.load(key).await?;
        }
        self.admit(&record, &action)?;
        let (provision, power) = action.targets(&record);
        let marked = provision.is_some() || power.is_some();
        let lock = self.begin(&record, &action.verb(), provision, power).await?;
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
                let message = message.clone();
                if let Err(e) = this.db.run(move |db| db.end_refused_action(&uuid, &message)).await
                {
                    tracing::error!(error = %e, "recording a refused action");
                }
            }
            lock.release().await;
            this.changed();
            result
        });
        Ok(Started { node_uuid, handle })
    }

    /// [`Conductor::start`], then waits for the action to end.
    pub async fn run(&self, key: &str, action: Action) -> Result<NodeRecord, ConductorError> {
        self.start(key, action).await?.finished().await
    }

    /// Whether `action` may start on the node as it is now.
    fn admit(&self, record: &NodeRecord, action: &Action) -> Result<(), ConductorError> {
        match action {
            Action::Provision(verb) => {
                plan(record.node.provision_state, *verb).map_err(ConductorError::Refused)?;
            }
            Action::Power(_) => {
                self.driver(record.node.driver)
                    .validate(&record.node)
                    .map_err(|e| ConductorError::Refused(format!("power: {e}")))?;
            }
            Action::AttachVolumes | Action::DetachVolumes => {
                self.storage.for_node(record)?;
            }
            Action::BootDevice { .. } | Action::Delete => {}
        }
        Ok(())
    }

    /// Locks the node for an action and records its target states (those columns only).
    async fn begin(
        &self,
        record: &NodeRecord,
        verb: &str,
        provision: Option<ProvisionState>,
        power: Option<PowerState>,
    ) -> Result<NodeLock, ConductorError> {
        let lock = self.lock(record, verb).await?;
        if provision.is_some() || power.is_some() {
            let uuid = record.node.uuid.clone();
            if let Err(e) =
                self.db.run(move |db| db.set_action_targets(&uuid, provision, power)).await
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
                self.driver(record.node.driver)
                    .set_boot_device(&record.node, device, persistent)
                    .await
                    .map_err(|e: PowerError| ConductorError::Failed(e.to_string()))?;
                record
                    .node
                    .driver_internal_info
                    .insert("boot_device".into(), json!(device_name(device)));
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

    /// Checks every interface of a node: boot (the scenario and its files), deploy, power and
    /// storage. Image checks are skipped for boot-from-volume nodes.
    pub async fn validate(&self, record: &NodeRecord) -> ValidationReport {
        let check = |interface: &'static str, result: Result<(), String>| InterfaceCheck {
            interface,
            result: result.is_ok(),
            reason: result.err(),
        };
        if record.node.driver == Driver::FakeHardware {
            // Ironic's test hardware type: every interface fake, no boot volume needed.
            return ValidationReport(
                ["boot", "deploy", "power", "storage"].map(|i| check(i, Ok(()))).into(),
            );
        }
        let scenario =
            decide(record, self.config.default.default_storage_interface).map_err(|e| e.0);
        let boot = match &scenario {
            Ok(Scenario::NfsRoot) => self.check_files(&["kernel", "ramdisk"].map(|k| {
                record
                    .node
                    .instance_info
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })),
            Ok(_) => Ok(()),
            Err(e) => Err(e.clone()),
        };
        let deploy = match &scenario {
            Ok(Scenario::NotBootFromVolume) => Err(
                "bootvol deploys boot-from-volume nodes only: give the node a storage interface and a boot volume".into(),
            ),
            Ok(Scenario::Hba { force_deployment: true }) => deploy::check(self, record),
            Ok(_) => Ok(()),
            Err(_) => Err("see boot".into()),
        };
        let power =
            self.driver(record.node.driver).validate(&record.node).map_err(|e| e.to_string());
        let storage = self
            .storage
            .for_node(record)
            .and_then(|s| s.validate(record))
            .map_err(|e| e.to_string());
        let writes_image = matches!(scenario, Ok(Scenario::Hba { force_deployment: true }));
        let mut deploy = check("deploy", deploy);
        if deploy.result && !writes_image && record.node.instance_info.contains_key("configdrive") {
            deploy.reason = Some(
                "instance_info.configdrive is stored but will not be written: this node's scenario writes no image (only scenario 4, an HBA volume deployment, does)".into(),
            );
        }
        ValidationReport(vec![
            check("boot", boot),
            deploy,
            check("power", power),
            check("storage", storage),
        ])
    }

    /// Checks that files exist under `[http] files_root`.
    fn check_files(&self, names: &[String]) -> Result<(), String> {
        let root = FileRoot::new(&self.config.http.files_root)
            .map_err(|e| format!("files_root {}: {e}", self.config.http.files_root.display()))?;
        for name in names {
            root.resolve(name).map_err(|e| format!("{name} under files_root: {e}"))?;
        }
        Ok(())
    }

    /// A provision action, to its end (for scenario 4, until the deploy ramdisk is booting: see
    /// [`Conductor::wait_for_deploy`]).
    async fn provision_locked(
        &self,
        mut record: NodeRecord,
        verb: Verb,
    ) -> Result<NodeRecord, ConductorError> {
        let plan = plan(record.node.provision_state, verb).map_err(ConductorError::Refused)?;
        let previous = record.node.provision_state;
        record.node.provision_state = plan.during;
        record.node.target_provision_state = Some(plan.target);
        record.node.last_error = None;
        self.save(&record).await?;
        self.event(
            &record,
            format!("{PROVISION}.start"),
            "info",
            json!({"action": verb.to_string(), "previous_state": previous}),
        )
        .await;
        let fake = record.node.driver == Driver::FakeHardware;
        let mut note = None;
        let outcome = match verb {
            Verb::Manage | Verb::Provide => Ok(()),
            Verb::Abort => {
                self.fail_deployment(&mut record, "deployment aborted by the operator".into())
                    .await?;
                return Ok(record);
            }
            // Ironic's fake-hardware: every interface fake, nothing touched.
            Verb::Deploy | Verb::Rebuild | Verb::Adopt if fake => {
                record.node.power_state = Some(PowerState::On);
                Ok(())
            }
            Verb::Undeploy if fake => {
                record.node.power_state = Some(PowerState::Off);
                record.node.instance_uuid = None;
                Ok(())
            }
            Verb::Deploy => self.deploy(&mut record).await,
            Verb::Rebuild => match self.undeploy(&mut record).await {
                Ok(()) => self.deploy(&mut record).await,
                Err(e) => Err(e),
            },
            Verb::Undeploy => self.undeploy(&mut record).await,
            Verb::Adopt => self.adopt(&mut record).await,
            Verb::Inspect | Verb::Clean if !fake => {
                note = Some(format!(
                    "{verb}: nothing to do on a boot-from-volume node: its disks are volumes, which are Cinder's (or their owner's) to inspect and erase"
                ));
                Ok(())
            }
            Verb::Inspect | Verb::Clean => Ok(()),
            Verb::Rescue | Verb::Unrescue => Ok(()),
        };
        match outcome {
            Ok(()) => {
                if record.node.provision_state == plan.during {
                    record.node.provision_state = plan.target;
                    record.node.target_provision_state = None;
                }
                self.save(&record).await?;
                if record.node.provision_state != ProvisionState::WaitCallBack {
                    let mut payload = json!({"action": verb.to_string()});
                    if let (Some(note), Some(map)) = (note, payload.as_object_mut()) {
                        map.insert("note".into(), json!(note));
                    }
                    self.event(&record, format!("{PROVISION}.end"), "info", payload).await;
                }
                Ok(record)
            }
            Err(message) => {
                record.node.provision_state = plan.failed;
                record.node.target_provision_state = None;
                record.node.last_error = Some(message.clone());
                self.save(&record).await?;
                self.event(
                    &record,
                    format!("{PROVISION}.error"),
                    "error",
                    json!({"action": verb.to_string(), "error": message}),
                )
                .await;
                Err(ConductorError::Failed(message))
            }
        }
    }

    /// Deploy: validate, attach the volumes, then either finish at once (the volume is booted
    /// as it is: the spec's DEPLOYDONE) or start an image deployment onto it (scenario 4). A
    /// failure detaches what was attached.
    async fn deploy(&self, record: &mut NodeRecord) -> Result<(), String> {
        let report = self.validate(record).await;
        if !report.ok() {
            return Err(format!("validation failed: {}", report.failures()));
        }
        let storage = self.storage.for_node(record).map_err(|e| e.to_string())?;
        storage
            .attach_volumes(record)
            .await
            .map_err(|e| format!("attaching volumes failed: {e}"))?;
        self.reload(record).await.map_err(|e| e.to_string())?;
        let result = async {
            set_boot_option(record, self.config.default.default_storage_interface).map_err(|e| e.0)?;
            let scenario = decide(record, self.config.default.default_storage_interface).map_err(|e| e.0)?;
            if !storage.should_write_image(record) {
                let device = if scenario.is_network_boot() { BootDevice::Pxe } else { BootDevice::Disk };
                self.boot_and_power_on(record, device).await
            } else if scenario == (Scenario::Hba { force_deployment: true }) {
                deploy::start(self, record).await
            } else {
                Err("nothing to deploy: the storage interface asks for an image and the node is not an HBA volume deployment".into())
            }
        }
        .await;
        if let Err(message) = result {
            let detached = storage.detach_volumes(record).await;
            let message = match detached {
                Ok(()) => message,
                Err(e) => {
                    format!("{message}; detaching the volumes after the failure also failed: {e}")
                }
            };
            return Err(message);
        }
        Ok(())
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

    /// Sets the boot device (persistent) and powers the node on (or reboots it if it is on).
    async fn boot_and_power_on(
        &self,
        record: &mut NodeRecord,
        device: BootDevice,
    ) -> Result<(), String> {
        let driver = self.driver(record.node.driver);
        driver
            .set_boot_device(&record.node, device, true)
            .await
            .map_err(|e| format!("setting the boot device: {e}"))?;
        record.node.driver_internal_info.insert("boot_device".into(), json!(device_name(device)));
        let action = if driver.power_state(&record.node).await.map_err(|e| e.to_string())?
            == PowerState::On
        {
            PowerAction::Reboot
        } else {
            PowerAction::On
        };
        self.power_action(record, action).await
    }

    /// One power action with its events; records the new state.
    async fn power_action(
        &self,
        record: &mut NodeRecord,
        action: PowerAction,
    ) -> Result<(), String> {
        let driver = self.driver(record.node.driver);
        let target = match action {
            PowerAction::On | PowerAction::Reboot => PowerState::On,
            PowerAction::Off | PowerAction::SoftOff => PowerState::Off,
        };
        record.node.target_power_state = Some(target);
        // A boot starts: its secret script may go out now, to the first client that is the node
        // (recorded on the node, so that every process serving it knows; `boot_window`).
        let opens_window = matches!(action, PowerAction::On | PowerAction::Reboot);
        if opens_window {
            let stamp = bootvol_core::timefmt::now_unix();
            record.node.driver_internal_info.insert(
                "boot_window".into(),
                json!({"opened_at": stamp, "by": action_name(action)}),
            );
            if let Some(windows) = &self.windows {
                windows.open(
                    &record.node.uuid,
                    action_name(action),
                    stamp,
                    std::time::Instant::now(),
                );
            }
        }
        self.save(record).await.map_err(|e| e.to_string())?;
        self.event(
            record,
            format!("{POWER}.start"),
            "info",
            json!({"action": action_name(action)}),
        )
        .await;
        let result = driver.set_power(&record.node, action).await;
        record.node.target_power_state = None;
        match result {
            Ok(()) => {
                record.node.power_state = Some(target);
                self.save(record).await.map_err(|e| e.to_string())?;
                self.event(
                    record,
                    format!("{POWER}.end"),
                    "info",
                    json!({"action": action_name(action)}),
                )
                .await;
                Ok(())
            }
            Err(e) => {
                if opens_window {
                    record.node.driver_internal_info.remove("boot_window");
                    if let Some(windows) = &self.windows {
                        windows.close(&record.node.uuid);
                    }
                }
                let message = format!("power {} failed: {e}", action_name(action));
                record.node.last_error = Some(message.clone());
                self.save(record).await.map_err(|e| e.to_string())?;
                self.event(
                    record,
                    format!("{POWER}.error"),
                    "error",
                    json!({"action": action_name(action), "error": message}),
                )
                .await;
                Err(message)
            }
        }
    }

    /// Tear down: power off, detach the volumes (events at the start and end of the storage
    /// detach come from the storage interface), forget deployment details.
    async fn undeploy(&self, record: &mut NodeRecord) -> Result<(), String> {
        if record.node.power_state != Some(PowerState::Off) {
            self.power_action(record, PowerAction::Off).await?;
        }
        let storage = self.storage.for_node(record).map_err(|e| e.to_string())?;
        storage
            .detach_volumes(record)
            .await
            .map_err(|e| format!("detaching volumes failed: {e}"))?;
        self.reload(record).await.map_err(|e| e.to_string())?;
        for key in ["deploy", "deployed_image", "deployed_by", "boot_device"] {
            record.node.driver_internal_info.remove(key);
        }
        record.node.instance_info.remove("boot_option");
        // Nova's association ends with the deployment, as in Ironic's tear-down.
        record.node.instance_uuid = None;
        Ok(())
    }

    /// Adopt: an OS deployed by other means; attach the volumes and serve the node's script.
    async fn adopt(&self, record: &mut NodeRecord) -> Result<(), String> {
        let report = self.validate(record).await;
        let failures: Vec<&InterfaceCheck> =
            report.0.iter().filter(|c| !c.result && c.interface != "deploy").collect();
        if !failures.is_empty() {
            return Err(format!("validation failed: {}", report.failures()));
        }
        let storage = self.storage.for_node(record).map_err(|e| e.to_string())?;
        storage
            .attach_volumes(record)
            .await
            .map_err(|e| format!("attaching volumes failed: {e}"))?;
        self.reload(record).await.map_err(|e| e.to_string())?;
        set_boot_option(record, self.config.default.default_storage_interface).map_err(|e| e.0)?;
        Ok(())
    }

    /// A power action requested by an operator. With `[cinder] toggle_attachments_with_power`,
    /// an active boot-from-volume node's volumes are attached before power-on (a failure
    /// aborts it) and detached after power-off.
    async fn power_locked(
        &self,
        record: &mut NodeRecord,
        action: PowerAction,
    ) -> Result<(), ConductorError> {
        let toggles = self.config.cinder.toggle_attachments_with_power
            && record.node.provision_state == ProvisionState::Active
            && record
                .node
                .effective_storage_interface(self.config.default.default_storage_interface)
                != StorageInterfaceName::Noop;
        let storage = self.storage.for_node(record)?;
        if toggles && matches!(action, PowerAction::On | PowerAction::Reboot) {
            if let Err(e) = storage.attach_volumes(record).await {
                let message =
                    format!("power {} aborted: attaching volumes failed: {e}", action_name(action));
                self.reload(record).await?;
                record.node.last_error = Some(message.clone());
                self.save(record).await?;
                self.event(
                    record,
                    format!("{POWER}.error"),
                    "error",
                    json!({"action": action_name(action), "error": message}),
                )
                .await;
                return Err(ConductorError::Failed(message));
            }
            self.reload(record).await?;
        }
        record.node.last_error = None;
        self.power_action(record, action).await.map_err(ConductorError::Failed)?;
        if toggles && matches!(action, PowerAction::Off | PowerAction::SoftOff) {
            if let Err(e) = storage.detach_volumes(record).await {
                let message = format!("powered off, but detaching volumes failed: {e}");
                self.reload(record).await?;
                record.node.last_error = Some(message.clone());
                self.save(record).await?;
                return Err(ConductorError::Failed(message));
            }
            self.reload(record).await?;
        }
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

    /// Ends actions a crashed process left half done: `deploying` becomes `deploy failed` (its
    /// volumes detached), `deleting` becomes `error`, a pending power target is cleared, each
    /// with `last_error` and an event. Nodes a live process holds are left alone.
    pub async fn recover_interrupted(&self) -> Result<Vec<String>, ConductorError> {
        let states: Vec<ProvisionState> =
            INTERRUPTIBLE.iter().map(|(passing, ..)| *passing).collect();
        let records = self.db.run(move |db| db.node_records_interrupted(&states)).await?;
        let mut recovered = Vec::new();
        for record in records.into_iter().filter(stuck) {
            if let Some(line) = self.recover_node(&record).await? {
                recovered.push(line);
            }
        }
        if !recovered.is_empty() {
            self.changed();
        }
        Ok(recovered)
    }

    /// Ends the interrupted action of one node, if it has one; the line says what was done.
    async fn recover_node(&self, listed: &NodeRecord) -> Result<Option<String>, ConductorError> {
        // A node a live action holds is not stuck: its action is not over.
        let Ok(lock) = self.lock(listed, "recovery").await else { return Ok(None) };
        // Read again under the lock: the action may have ended since the list was read.
        let uuid = listed.node.uuid.clone();
        let mut record = match self.db.run(move |db| db.node_record(&uuid)).await {
            Ok(Some(record)) if stuck(&record) => record,
            other => {
                lock.release().await;
                return other.map(|_| None).map_err(ConductorError::from);
            }
        };
        if record.node.provision_state == ProvisionState::Deploying {
            if let Ok(storage) = self.storage.for_node(&record)
                && let Err(e) = storage.detach_volumes(&record).await
            {
                tracing::warn!(node = record.node.name, error = %e, "detaching after an interrupted deploy");
            }
            let _ = self.reload(&mut record).await;
        }
        let state = record.node.provision_state;
        let what = match INTERRUPTIBLE.iter().find(|(passing, ..)| *passing == state) {
            Some(&(_, failed, what)) => {
                record.node.provision_state = failed;
                what
            }
            None => "power action",
        };
        record.node.target_provision_state = None;
        record.node.target_power_state = None;
        let message = format!(
            "the {what} was interrupted (the bootvol process running it ended); run it again"
        );
        record.node.last_error = Some(message.clone());
        let saved = self.save(&record).await;
        if saved.is_ok() {
            self.event(&record, format!("{PROVISION}.error"), "error", json!({"error": message}))
                .await;
        }
        lock.release().await;
        saved.map(|()| Some(format!("{}: {message}", record.node.name)))
    }

    /// Records power states changed out of band (someone pressed the button), for nodes no
    /// action holds. Returns the nodes corrected.
    pub async fn sync_power_states(&self) -> Result<Vec<String>, ConductorError> {
        let records = self.db.run(|db| db.node_records_with_bmc()).await?;
        let mut corrected = Vec::new();
        for record in records.into_iter().filter(|r| {
            !matches!(r.node.driver, Driver::Fake | Driver::FakeHardware) && !r.node.maintenance
        }) {
            let Ok(lock) = self.lock(&record, "power sync").await else { continue };
            // Read again under the lock: an action may have ended since the list was read.
            let Ok(Some(mut record)) = self
                .db
                .run({
                    let uuid = record.node.uuid.clone();
                    move |db| db.node_record(&uuid)
                })
                .await
            else {
                lock.release().await;
                continue;
            };
            match self.driver(record.node.driver).power_state(&record.node).await {
                Ok(state) if Some(state) != record.node.power_state => {
                    let previous = record.node.power_state;
                    record.node.power_state = Some(state);
                    let uuid = record.node.uuid.clone();
                    self.db.run(move |db| db.set_power_state(&uuid, state)).await?;
                    self.event(
                        &record,
                        "baremetal.node.power_state_corrected.success".into(),
                        "info",
                        json!({"previous_power_state": previous}),
                    )
                    .await;
                    corrected.push(record.node.name.clone());
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(node = record.node.name, error = %e, "power state sync"),
            }
            lock.release().await;
        }
        Ok(corrected)
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

/// Whether a node shows an action in flight (which, without a live lock holder, a crash cut
/// short).
/// The provision states an action passes through, which a crash can leave a node in: each with
/// the state recovery ends it in and what the interrupted action was.
const INTERRUPTIBLE: &[(ProvisionState, ProvisionState, &str)] = &[
    (ProvisionState::Deploying, ProvisionState::DeployFailed, "deploy"),
    (ProvisionState::Deleting, ProvisionState::Error, "undeploy"),
    (ProvisionState::Cleaning, ProvisionState::CleanFailed, "cleaning"),
    (ProvisionState::Inspecting, ProvisionState::InspectFailed, "inspection"),
    (ProvisionState::Adopting, ProvisionState::AdoptFailed, "adoption"),
    (ProvisionState::Rescuing, ProvisionState::RescueFailed, "rescue"),
    (ProvisionState::Unrescuing, ProvisionState::UnrescueFailed, "unrescue"),
];

fn stuck(record: &NodeRecord) -> bool {
    INTERRUPTIBLE.iter().any(|(passing, ..)| *passing == record.node.provision_state)
        || record.node.target_power_state.is_some()
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

    /// The target states shown as soon as the action is accepted (as Ironic does before it
    /// answers 202), so that a client polling the node sees it pending.
    fn targets(&self, record: &NodeRecord) -> (Option<ProvisionState>, Option<PowerState>) {
        match self {
            Action::Provision(verb) => {
                (plan(record.node.provision_state, *verb).ok().map(|p| p.target), None)
            }
            Action::Power(PowerAction::On | PowerAction::Reboot) => (None, Some(PowerState::On)),
            Action::Power(PowerAction::Off | PowerAction::SoftOff) => (None, Some(PowerState::Off)),
            _ => (None, None),
        }
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

fn action_name(action: PowerAction) -> &'static str {
    match action {
        PowerAction::On => "power on",
        PowerAction::Off => "power off",
        PowerAction::Reboot => "reboot",
        PowerAction::SoftOff => "soft power off",
    }
}

fn device_name(device: BootDevice) -> &'static str {
    match device {
        BootDevice::Pxe => "pxe",
        BootDevice::Disk => "disk",
    }
}
