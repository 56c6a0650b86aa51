//! Provision actions, the node's lock held: the state walk of each verb with its events, and
//! the work of deploy (attach, then boot the volume or start an image deployment), undeploy
//! and adopt.

use serde_json::json;

use super::{
    Conductor, ConductorError, InterfaceCheck, PROVISION, Plan, Verb, deploy, device_name, plan,
};
use crate::power::{BootDevice, PowerAction};
use bootvol_core::boot::{Scenario, decide, set_boot_option};
use bootvol_core::model::{Driver, NodeRecord, PowerState, ProvisionState};

impl Conductor {
    /// A provision action, to its end (for scenario 4, until the deploy ramdisk is booting: see
    /// [`Conductor::wait_for_deploy`]).
    pub(super) async fn provision_locked(
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
        if verb == Verb::Abort {
            self.fail_deployment(&mut record, "deployment aborted by the operator".into()).await?;
            return Ok(record);
        }
        let (outcome, note) = self.provision_work(&mut record, verb).await;
        match outcome {
            Ok(()) => {
                self.provision_done(&mut record, verb, plan, note).await?;
                Ok(record)
            }
            Err(message) => {
                self.provision_failed(&mut record, verb, plan, message.clone()).await?;
                Err(ConductorError::Failed(message))
            }
        }
    }

    /// What a provision verb does to the node (not abort), and a note for its end event.
    async fn provision_work(
        &self,
        record: &mut NodeRecord,
        verb: Verb,
    ) -> (Result<(), String>, Option<String>) {
        let fake = record.node.driver == Driver::FakeHardware;
        let outcome = match verb {
            Verb::Manage | Verb::Provide | Verb::Abort => Ok(()),
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
            Verb::Deploy => self.deploy(record).await,
            Verb::Rebuild => match self.undeploy(record).await {
                Ok(()) => self.deploy(record).await,
                Err(e) => Err(e),
            },
            Verb::Undeploy => self.undeploy(record).await,
            Verb::Adopt => self.adopt(record).await,
            Verb::Inspect | Verb::Clean if !fake => {
                let note = format!(
                    "{verb}: nothing to do on a boot-from-volume node: its disks are volumes, which are Cinder's (or their owner's) to inspect and erase"
                );
                return (Ok(()), Some(note));
            }
            Verb::Inspect | Verb::Clean => Ok(()),
            Verb::Rescue | Verb::Unrescue => Ok(()),
        };
        (outcome, None)
    }

    /// A provision action that succeeded: its target state (unless it moved on, to `wait
    /// call-back`), and its end event (not while the deploy ramdisk is still to call back).
    async fn provision_done(
        &self,
        record: &mut NodeRecord,
        verb: Verb,
        plan: Plan,
        note: Option<String>,
    ) -> Result<(), ConductorError> {
        if record.node.provision_state == plan.during {
            record.node.provision_state = plan.target;
            record.node.target_provision_state = None;
        }
        self.save(record).await?;
        if record.node.provision_state != ProvisionState::WaitCallBack {
            let mut payload = json!({"action": verb.to_string()});
            if let (Some(note), Some(map)) = (note, payload.as_object_mut()) {
                map.insert("note".into(), json!(note));
            }
            self.event(record, format!("{PROVISION}.end"), "info", payload).await;
        }
        Ok(())
    }

    /// A provision action that failed: its failed state, `last_error`, and the error event.
    async fn provision_failed(
        &self,
        record: &mut NodeRecord,
        verb: Verb,
        plan: Plan,
        message: String,
    ) -> Result<(), ConductorError> {
        record.node.provision_state = plan.failed;
        record.node.target_provision_state = None;
        record.node.last_error = Some(message.clone());
        self.save(record).await?;
        self.event(
            record,
            format!("{PROVISION}.error"),
            "error",
            json!({"action": verb.to_string(), "error": message}),
        )
        .await;
        Ok(())
    }

    /// Deploy: validate, attach the volumes, then either finish at once (the volume is booted
    /// as it is: the spec's DEPLOYDONE) or start an image deployment onto it (scenario 4). A
    /// failure detaches what was attached.
    async fn deploy(&self, record: &mut NodeRecord) -> Result<(), String> {
        let report = self.validate(record).await;
        if !report.ok() {
            return Err(format!("validation failed: {}", report.failures()));
        }
        let storage = self.attach_volumes(record).await?;
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

    /// Sets the boot device (persistent) and powers the node on (or reboots it if it is on).
    async fn boot_and_power_on(
        &self,
        record: &mut NodeRecord,
        device: BootDevice,
    ) -> Result<(), String> {
        let persistent = self
            .set_boot_device(&record.node, device, true)
            .await
            .map_err(|e| format!("setting the boot device: {e}"))?;
        let info = &mut record.node.driver_internal_info;
        info.insert("boot_device".into(), json!(device_name(device)));
        info.insert("boot_device_persistent".into(), json!(persistent));
        let driver = self.driver(record.node.driver);
        let action = if driver.power_state(&record.node).await.map_err(|e| e.to_string())?
            == PowerState::On
        {
            PowerAction::Reboot
        } else {
            PowerAction::On
        };
        self.power_action(record, action).await
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
        for key in
            ["deploy", "deployed_image", "deployed_by", "boot_device", "boot_device_persistent"]
        {
            record.node.driver_internal_info.remove(key);
        }
        record.node.instance_info.remove("boot_option");
        // Nova's association ends with the deployment, as in Ironic's tear-down.
        record.node.instance_uuid = None;
        Ok(())
    }

    /// The node's storage interface attaches its volumes, and is answered; the record is read
    /// again after.
    async fn attach_volumes(
        &self,
        record: &mut NodeRecord,
    ) -> Result<std::sync::Arc<dyn crate::storage::StorageInterface>, String> {
        let storage = self.storage.for_node(record).map_err(|e| e.to_string())?;
        storage
            .attach_volumes(record)
            .await
            .map_err(|e| format!("attaching volumes failed: {e}"))?;
        self.reload(record).await.map_err(|e| e.to_string())?;
        Ok(storage)
    }

    /// Adopt: an OS deployed by other means; attach the volumes and serve the node's script.
    async fn adopt(&self, record: &mut NodeRecord) -> Result<(), String> {
        let report = self.validate(record).await;
        let failures: Vec<&InterfaceCheck> =
            report.0.iter().filter(|c| !c.result && c.interface != "deploy").collect();
        if !failures.is_empty() {
            return Err(format!("validation failed: {}", report.failures()));
        }
        self.attach_volumes(record).await?;
        set_boot_option(record, self.config.default.default_storage_interface).map_err(|e| e.0)?;
        Ok(())
    }
}
