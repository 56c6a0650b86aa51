//! `cinder`: attach and detach a node's Cinder volumes, persist every step, undo what a failed
//! attach did, finish or undo what a crash interrupted, and keep the local connection info in
//! step with Cinder (sync).
//!
//! Each volume target has an `AttachmentRecord` whose `step` is written after each Cinder call
//! succeeds: so at any moment the database says what exists on the Cinder side. Steps:
//! attachments API `started → created → initialized → completed → tagged`; legacy actions
//! `started → reserved → initialized → attached → tagged`; then `undone` or `detached`.
//!
//! This file holds the interface itself and what its parts share; [`attach`] (attach, and undo
//! a failed one), [`detach`], [`recovery`] (what a crash left half done) and [`sync`] (Cinder
//! against the local connection info) are each a part of [`CinderStorage`]'s work.

mod attach;
mod detach;
mod recovery;
mod sync;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::{StorageError, StorageInterface, volume_should_write_image};
use crate::cinder::{CinderClient, CinderError, ConnectionInfo, Connector};
use bootvol_core::config::Config;
use bootvol_core::model::{
    ConnectorType, JsonMap, NodeRecord, StorageInterfaceName, VolumeTarget, VolumeType,
};
use bootvol_core::timefmt::{format_unix, now_unix};
use bootvol_db::{AttachmentRecord, SharedDb};

/// The Cinder storage interface.
#[derive(Debug)]
pub struct CinderStorage {
    client: Arc<CinderClient>,
    db: SharedDb,
    multipath: bool,
    retries: u32,
    backoff: Duration,
}

/// What recovery at start did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub undone: Vec<String>,
    pub detached: Vec<String>,
    pub failed: Vec<String>,
}

/// What a sync pass found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    pub checked: usize,
    pub updated: Vec<String>,
    pub drifted: Vec<String>,
    pub errors: Vec<String>,
}

const ATTACH: &str = "baremetal.node.storage_attach";
const DETACH: &str = "baremetal.node.storage_detach";

impl CinderStorage {
    pub fn new(config: &Config, db: SharedDb) -> Result<CinderStorage, StorageError> {
        Ok(CinderStorage {
            client: Arc::new(CinderClient::new(config)?),
            db,
            multipath: config.cinder.multipath,
            retries: config.cinder.retries,
            backoff: Duration::from_millis(500),
        })
    }

    pub fn client(&self) -> &CinderClient {
        &self.client
    }

    fn connector(&self, record: &NodeRecord) -> Connector {
        let ids = |kind: ConnectorType| -> Vec<String> {
            record
                .volume_connectors
                .iter()
                .filter(|c| c.connector_type == kind)
                .map(|c| c.connector_id.clone())
                .collect()
        };
        Connector {
            initiator: ids(ConnectorType::Iqn).into_iter().next(),
            wwpns: ids(ConnectorType::Wwpn),
            wwnns: ids(ConnectorType::Wwnn),
            ip: ids(ConnectorType::Ip).into_iter().next(),
            host: record.node.uuid.clone(),
            multipath: self.multipath,
            platform: "x86_64".into(),
            os_type: "linux".into(),
        }
    }

    async fn save(&self, record: &AttachmentRecord) -> Result<(), StorageError> {
        let record = record.clone();
        self.db.run(move |db| db.save_attachment_record(&record)).await?;
        Ok(())
    }

    async fn set_properties(
        &self,
        target_uuid: &str,
        properties: JsonMap,
    ) -> Result<(), StorageError> {
        let uuid = target_uuid.to_owned();
        self.db.run(move |db| db.set_target_properties(&uuid, &properties)).await?;
        Ok(())
    }

    async fn event(&self, node: &str, event_type: String, level: &'static str, payload: Value) {
        self.db.record_event(node, event_type, level, payload).await;
    }

    async fn set_last_error(&self, node: &str, error: Option<String>) {
        let node = node.to_owned();
        if let Err(e) = self.db.run(move |db| db.set_node_last_error(&node, error.as_deref())).await
        {
            tracing::error!(error = %e, "cannot record the node's last_error");
        }
    }

    async fn tag(&self, record: &AttachmentRecord, action: &str) -> Result<(), CinderError> {
        let value = json!({"action": action, "at": format_unix(now_unix()), "attachment_id": record.attachment_id,
            "api": record.api});
        let mut metadata = Map::new();
        metadata
            .insert(format!("bootvol_node_{}", record.node_uuid), Value::String(value.to_string()));
        self.client.set_metadata(&record.volume_id, &metadata).await
    }

    async fn for_each_target<F, Fut>(
        &self,
        targets: Vec<VolumeTarget>,
        f: F,
    ) -> Result<Vec<VolumeTarget>, (Vec<VolumeTarget>, StorageError)>
    where
        F: Fn(VolumeTarget) -> Fut,
        Fut: std::future::Future<Output = Result<(), StorageError>>,
    {
        let mut done = Vec::new();
        for target in targets {
            match f(target.clone()).await {
                Ok(()) => done.push(target),
                Err(e) => return Err((done, e)),
            }
        }
        Ok(done)
    }
}

/// Volume types Cinder can attach, and the `driver_volume_type`s that match them.
fn check_driver_type(volume_type: &VolumeType, info: &ConnectionInfo) -> Result<(), StorageError> {
    let matches = match volume_type {
        VolumeType::Iscsi => matches!(info.driver_volume_type.as_str(), "iscsi" | "iser" | "iSCSI"),
        VolumeType::FibreChannel => info.driver_volume_type == "fibre_channel",
        VolumeType::Nfs => info.driver_volume_type == "nfs",
        VolumeType::Aoe | VolumeType::Http | VolumeType::Other(_) => false,
    };
    if matches {
        Ok(())
    } else {
        Err(StorageError::Invalid(format!(
            "Cinder connects this volume as {:?}, but the volume target says {volume_type}",
            info.driver_volume_type
        )))
    }
}

/// The targets Cinder manages, in boot order.
fn cinder_targets(record: &NodeRecord) -> Vec<VolumeTarget> {
    record
        .volume_targets
        .iter()
        .filter(|t| {
            matches!(t.volume_type, VolumeType::Iscsi | VolumeType::FibreChannel | VolumeType::Nfs)
        })
        .cloned()
        .collect()
}

#[async_trait]
impl StorageInterface for CinderStorage {
    fn name(&self) -> StorageInterfaceName {
        StorageInterfaceName::Cinder
    }

    fn validate(&self, record: &NodeRecord) -> Result<(), StorageError> {
        let invalid = |m: String| Err(StorageError::Invalid(m));
        for target in &record.volume_targets {
            if matches!(
                target.volume_type,
                VolumeType::Aoe | VolumeType::Http | VolumeType::Other(_)
            ) {
                return invalid(format!(
                    "volume target boot_index {}: Cinder cannot attach {} volumes; use storage_interface external",
                    target.boot_index, target.volume_type
                ));
            }
            if uuid::Uuid::parse_str(&target.volume_id).is_err() {
                return invalid(format!(
                    "volume target boot_index {}: volume_id {:?} is not a Cinder volume UUID",
                    target.boot_index, target.volume_id
                ));
            }
        }
        let has =
            |kind: ConnectorType| record.volume_connectors.iter().any(|c| c.connector_type == kind);
        if record.volume_targets.iter().any(|t| t.volume_type == VolumeType::Iscsi)
            && !has(ConnectorType::Iqn)
        {
            return invalid(
                "iSCSI volumes need a volume connector of type iqn to send to Cinder".into(),
            );
        }
        if record.volume_targets.iter().any(|t| t.volume_type == VolumeType::FibreChannel)
            && !has(ConnectorType::Wwpn)
        {
            return invalid(
                "Fibre Channel volumes need volume connectors of type wwpn to send to Cinder"
                    .into(),
            );
        }
        Ok(())
    }

    fn should_write_image(&self, record: &NodeRecord) -> bool {
        volume_should_write_image(record)
    }

    async fn attach_volumes(&self, record: &NodeRecord) -> Result<(), StorageError> {
        self.validate(record)?;
        let node = record.node.uuid.clone();
        let volumes: Vec<String> =
            cinder_targets(record).iter().map(|t| t.volume_id.clone()).collect();
        self.event(&node, format!("{ATTACH}.start"), "info", json!({"volumes": volumes})).await;
        match self
            .for_each_target(cinder_targets(record), |t| async move {
                self.attach_target(record, &t).await
            })
            .await
        {
            Ok(_) => {
                self.set_last_error(&node, None).await;
                self.event(&node, format!("{ATTACH}.end"), "info", json!({"volumes": volumes}))
                    .await;
                Ok(())
            }
            Err((attached, error)) => {
                // Volumes attached earlier in this call are released: all or nothing.
                for target in attached.iter().rev() {
                    if let Err(e) = self.detach_target(target).await {
                        tracing::error!(volume = target.volume_id, error = %e, "releasing an earlier volume after a failed attach");
                    }
                }
                let message = format!("attaching volumes failed: {error}");
                self.set_last_error(&node, Some(message.clone())).await;
                self.event(
                    &node,
                    format!("{ATTACH}.error"),
                    "error",
                    json!({"volumes": volumes, "error": message}),
                )
                .await;
                Err(error)
            }
        }
    }

    async fn detach_volumes(&self, record: &NodeRecord) -> Result<(), StorageError> {
        let node = record.node.uuid.clone();
        let mut targets = cinder_targets(record);
        targets.reverse();
        let volumes: Vec<String> = targets.iter().map(|t| t.volume_id.clone()).collect();
        self.event(&node, format!("{DETACH}.start"), "info", json!({"volumes": volumes})).await;
        let mut first_error = None;
        for target in &targets {
            if let Err(e) = self.detach_target(target).await {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            None => {
                self.set_last_error(&node, None).await;
                self.event(&node, format!("{DETACH}.end"), "info", json!({"volumes": volumes}))
                    .await;
                Ok(())
            }
            Some(error) => {
                let message = format!("detaching volumes failed: {error}");
                self.set_last_error(&node, Some(message.clone())).await;
                self.event(
                    &node,
                    format!("{DETACH}.error"),
                    "error",
                    json!({"volumes": volumes, "error": message}),
                )
                .await;
                Err(error)
            }
        }
    }
}
