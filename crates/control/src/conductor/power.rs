//! Power actions: one BMC power call with its events and the node's boot window; the boot
//! device as `force_persistent_boot_device` rules; an
//! operator's power action (with `[cinder] toggle_attachments_with_power`); and the sync of
//! power states changed out of band.

use serde_json::json;

use super::{Conductor, ConductorError, POWER};
use crate::power::{BootDevice, PowerAction};
use bootvol_core::model::hardware;
use bootvol_core::model::{
    Driver, Node, NodeRecord, PowerState, ProvisionState, StorageInterfaceName,
};

impl Conductor {
    /// One power action with its events; records the new state.
    pub(super) async fn power_action(
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
            self.open_boot_window(record, action);
        }
        self.save(record).await.map_err(|e| e.to_string())?;
        self.power_event(record, "start", action).await;
        let result = driver.set_power(&record.node, action).await;
        record.node.target_power_state = None;
        match result {
            Ok(()) => {
                record.node.power_state = Some(target);
                self.save(record).await.map_err(|e| e.to_string())?;
                self.power_event(record, "end", action).await;
                Ok(())
            }
            Err(e) => Err(self.power_failed(record, action, opens_window, e).await),
        }
    }

    /// The `start` or `end` event of a power action.
    async fn power_event(&self, record: &NodeRecord, phase: &str, action: PowerAction) {
        let payload = json!({"action": action_name(action)});
        self.event(record, format!("{POWER}.{phase}"), "info", payload).await;
    }

    /// Sets the node's boot device, persistent as `driver_info.force_persistent_boot_device`
    /// rules on what was asked (`asked`); answers whether it was made persistent.
    pub(super) async fn set_boot_device(
        &self,
        node: &Node,
        device: BootDevice,
        asked: bool,
    ) -> Result<bool, String> {
        let persistent = hardware::boot_persistence(&node.driver_info, asked).map_err(|e| e.0)?;
        self.driver(node.driver)
            .set_boot_device(node, device, persistent)
            .await
            .map_err(|e| e.to_string())?;
        Ok(persistent)
    }

    /// Opens the node's boot window for a power-on or reboot: on the node (for every process
    /// serving it) and in this process's windows.
    fn open_boot_window(&self, record: &mut NodeRecord, action: PowerAction) {
        let stamp = bootvol_core::timefmt::now_unix();
        record
            .node
            .driver_internal_info
            .insert("boot_window".into(), json!({"opened_at": stamp, "by": action_name(action)}));
        if let Some(windows) = &self.windows {
            windows.open(&record.node.uuid, action_name(action), stamp, std::time::Instant::now());
        }
    }

    /// A power call the BMC failed: the boot window it opened is closed again, and the error
    /// is the node's `last_error` and an event. Answers the message.
    async fn power_failed(
        &self,
        record: &mut NodeRecord,
        action: PowerAction,
        opened_window: bool,
        error: crate::power::PowerError,
    ) -> String {
        if opened_window {
            record.node.driver_internal_info.remove("boot_window");
            if let Some(windows) = &self.windows {
                windows.close(&record.node.uuid);
            }
        }
        let message = format!("power {} failed: {error}", action_name(action));
        record.node.last_error = Some(message.clone());
        if let Err(e) = self.save(record).await {
            return e.to_string();
        }
        self.event(
            record,
            format!("{POWER}.error"),
            "error",
            json!({"action": action_name(action), "error": message}),
        )
        .await;
        message
    }

    /// A power action requested by an operator. With `[cinder] toggle_attachments_with_power`,
    /// an active boot-from-volume node's volumes are attached before power-on (a failure
    /// aborts it) and detached after power-off.
    pub(super) async fn power_locked(
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
}

fn action_name(action: PowerAction) -> &'static str {
    match action {
        PowerAction::On => "power on",
        PowerAction::Off => "power off",
        PowerAction::Reboot => "reboot",
        PowerAction::SoftOff => "soft power off",
    }
}
