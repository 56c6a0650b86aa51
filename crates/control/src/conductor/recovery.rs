//! Recovery: actions a crashed process left half done are ended (`deploying` becomes
//! `deploy failed`, its volumes detached; a pending power target is cleared), each with
//! `last_error` and an event. Nodes a live process holds are left alone.

use serde_json::json;

use super::{Conductor, ConductorError, PROVISION};
use bootvol_core::model::{NodeRecord, ProvisionState};

impl Conductor {
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
    pub(super) async fn recover_node(
        &self,
        listed: &NodeRecord,
    ) -> Result<Option<String>, ConductorError> {
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
}

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

/// Whether a node shows an action in flight (which, without a live lock holder, a crash cut
/// short).
pub(super) fn stuck(record: &NodeRecord) -> bool {
    INTERRUPTIBLE.iter().any(|(passing, ..)| *passing == record.node.provision_state)
        || record.node.target_power_state.is_some()
}
