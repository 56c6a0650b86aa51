//! The traits the lower crates define to call up, implemented here over the database and the
//! conductor: the boot edge's deploy endpoints ([`DeployBridge`]), its refusal and conflict
//! events ([`EventBridge`]), and the metrics' scrape-time read of the last sync pass
//! ([`SyncBridge`]). Each is a thin adapter: no rule of its own.

use std::future::Future;
use std::pin::Pin;

use tokio_util::task::TaskTracker;

use bootvol_control::conductor::{Conductor, ConductorError};
use bootvol_core::deploy::{CallbackReport, Caller};
use bootvol_core::model::sync::SyncStatus;
use bootvol_db::SharedDb;
use bootvol_edge::http::{DeployBackend, DeployError};

/// The conductor behind the boot listener's deploy endpoints.
#[derive(Debug)]
pub(crate) struct DeployBridge(pub(crate) Conductor);

fn deploy_error(e: ConductorError) -> DeployError {
    let text = e.to_string();
    match e {
        ConductorError::Refused(_) => DeployError::Refused(text),
        ConductorError::NotFound(_) => DeployError::NotFound(text),
        ConductorError::Locked(_) => DeployError::Locked(text),
        ConductorError::Failed(_) | ConductorError::Db(_) => DeployError::Failed(text),
    }
}

#[async_trait::async_trait]
impl DeployBackend for DeployBridge {
    async fn token(&self, node_uuid: &str, caller: Caller) -> Result<String, DeployError> {
        self.0.deploy_token(node_uuid, caller).await.map_err(deploy_error)
    }

    async fn callback(
        &self,
        node_uuid: &str,
        token: &str,
        caller: Caller,
        report: CallbackReport,
    ) -> Result<(), DeployError> {
        self.0.deploy_callback(node_uuid, token, caller, report).await.map_err(deploy_error)
    }

    async fn configdrive(
        &self,
        node_uuid: &str,
        token: &str,
        caller: Caller,
    ) -> Result<Vec<u8>, DeployError> {
        self.0.configdrive(node_uuid, token, caller).await.map_err(deploy_error)
    }

    async fn node_names(&self, node: &str) -> Option<(String, String)> {
        let record = self.0.load(node).await.ok()?;
        Some((record.node.uuid, record.node.name))
    }
}

/// Node events written for the boot edge, each on a task of `serve`'s tracker (drained at
/// shutdown), so the boot path never waits on the database.
#[derive(Debug)]
pub(crate) struct EventBridge {
    pub(crate) db: SharedDb,
    pub(crate) tasks: TaskTracker,
}

impl bootvol_edge::script_access::EventSink for EventBridge {
    fn record(&self, node_uuid: &str, event: &'static str, payload: serde_json::Value) {
        let (db, uuid) = (self.db.clone(), node_uuid.to_owned());
        self.tasks.spawn(async move {
            db.record_event(&uuid, event.to_owned(), "warning", payload).await;
        });
    }
}

/// The last Cinder sync pass, read for a scrape on the metrics' own connection.
#[derive(Debug)]
pub(crate) struct SyncBridge(pub(crate) SharedDb);

impl bootvol_runtime::metrics::SyncSource for SyncBridge {
    fn last_sync(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<Option<SyncStatus>, String>> + Send + '_>> {
        Box::pin(async move { self.0.run(|db| db.sync_status()).await.map_err(|e| e.to_string()) })
    }
}
