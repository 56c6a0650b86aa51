//! `[conductor]`, `[deploy]` and `[notifications]`: what the conductor's actions are given (BMC
//! timeouts, the deploy ramdisk, the event webhook), and their checks.
//!
//! It must not know how the actions run: no BMC protocol, no HTTP client, no SQL.

use serde::Deserialize;

use super::Invalid;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConductorSection {
    /// Seconds each BMC call may take.
    pub power_timeout: u64,
    /// Seconds a power action waits for the node to reach the new state.
    pub power_state_wait: u64,
    /// Seconds between two checks of power states changed out of band (in `serve`); 0: off.
    pub power_sync_interval: u64,
    /// Tries at a node's lock while another action holds it, before the request is refused
    /// with 409 (Ironic's conductor option of the same name, and its default).
    pub node_locked_retry_attempts: u32,
    /// Seconds between two of those tries.
    pub node_locked_retry_interval: u64,
}

impl Default for ConductorSection {
    fn default() -> Self {
        ConductorSection {
            power_timeout: 20,
            power_state_wait: 60,
            power_sync_interval: 60,
            node_locked_retry_attempts: 3,
            node_locked_retry_interval: 1,
        }
    }
}

/// Scenario 4: the deploy ramdisk (built by `image/build-deploy-ramdisk.sh`) under
/// `[http] files_root`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeploySection {
    pub kernel: String,
    pub ramdisk: String,
    /// Extra kernel arguments of the deploy ramdisk.
    pub kernel_append_params: String,
    /// Seconds the ramdisk has to write the image and call back.
    pub callback_timeout: u64,
}

impl Default for DeploySection {
    fn default() -> Self {
        DeploySection {
            kernel: "deploy/vmlinuz".into(),
            ramdisk: "deploy/initrd.img".into(),
            kernel_append_params: "console=ttyS0".into(),
            callback_timeout: 1800,
        }
    }
}

/// Event delivery to a webhook (optional).
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotificationsSection {
    /// Where events are POSTed; empty: events are only kept in the database.
    pub webhook_url: String,
    /// The HMAC-SHA256 key of the `X-Bootvol-Signature` header.
    pub webhook_secret: String,
    pub max_attempts: u32,
}

impl Default for NotificationsSection {
    fn default() -> Self {
        NotificationsSection {
            webhook_url: String::new(),
            webhook_secret: String::new(),
            max_attempts: 8,
        }
    }
}

impl std::fmt::Debug for NotificationsSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = if self.webhook_secret.is_empty() { "" } else { crate::secrets::MASK };
        f.debug_struct("NotificationsSection")
            .field("webhook_url", &self.webhook_url)
            .field("webhook_secret", &secret)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl ConductorSection {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.power_timeout == 0 {
            return Err(("conductor.power_timeout", "must be at least 1 second".into()));
        }
        if self.node_locked_retry_attempts == 0 {
            return Err(("conductor.node_locked_retry_attempts", "must be at least 1".into()));
        }
        if self.node_locked_retry_interval > 60 {
            return Err((
                "conductor.node_locked_retry_interval",
                "at most 60 seconds (a request waits this long between its tries)".into(),
            ));
        }
        Ok(())
    }
}

impl DeploySection {
    /// The kernel and ramdisk are file names under `files_root`; the kernel arguments go into
    /// an iPXE script.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        for (key, name) in [("deploy.kernel", &self.kernel), ("deploy.ramdisk", &self.ramdisk)] {
            crate::model::check_file_name(name).map_err(|m| (key, m))?;
        }
        for arg in self.kernel_append_params.split_whitespace() {
            crate::model::check_script_value(arg)
                .map_err(|m| ("deploy.kernel_append_params", m))?;
        }
        Ok(())
    }
}

impl NotificationsSection {
    /// No webhook, or an `http(s)://` one with the secret that signs its events.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if !self.webhook_url.is_empty() {
            crate::model::check_http_url(&self.webhook_url)
                .map_err(|m| ("notifications.webhook_url", m))?;
            if self.webhook_secret.is_empty() {
                return Err((
                    "notifications.webhook_secret",
                    "a webhook needs a secret to sign its events".into(),
                ));
            }
        }
        Ok(())
    }
}
