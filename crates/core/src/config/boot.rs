//! `[boot]`: how the scripts attach SAN volumes, where template overrides live, who may fetch a
//! script that carries a secret and when (the boot window), and their checks.
//!
//! It must not know how a script is rendered or served: only the values.

use std::path::PathBuf;

use serde::Deserialize;

use super::Invalid;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BootSection {
    /// Attempts to attach SAN volumes before the script gives up and hands back to the firmware.
    pub san_attempts: u32,
    /// Seconds between attempts.
    pub san_retry_delay: u32,
    /// A directory whose files override the built-in templates of the same name
    /// (`ipxe/san.ipxe.j2`, `ipxe/default.ipxe.j2`...).
    pub templates_dir: Option<PathBuf>,
    /// Who may fetch a script that carries a secret (CHAP), and the deploy ramdisk's token.
    pub script_secrets: ScriptSecrets,
    /// What opens a node's boot window, the only time its secret-carrying script goes out
    /// (with `script_secrets = "neighbour"`).
    pub secret_window: SecretWindow,
    /// How long a boot window lasts from its opening, in seconds.
    pub secret_window_seconds: u64,
}

/// What opens a boot window (`[boot] secret_window`): see `boot_window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretWindow {
    /// bootvol powered the node on or rebooted it, or saw it start a boot (its ProxyDHCP
    /// answered the node's MAC, or the node fetched the first file of its boot chain). The
    /// default.
    Boot,
    /// Only bootvol's own power-on, reboot or deploy: the strict choice.
    Power,
}

impl SecretWindow {
    pub fn as_str(self) -> &'static str {
        match self {
            SecretWindow::Boot => "boot",
            SecretWindow::Power => "power",
        }
    }
}

/// Who may fetch a node's script when it carries a secret (`[boot] script_secrets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScriptSecrets {
    /// Only a client whose address maps, in the kernel's neighbour table, to a MAC of one of
    /// that node's ports. The default.
    Neighbour,
    /// Any client: for DHCP-relayed (routed) boot networks, where the neighbour is a router,
    /// and for clients on loopback or behind NAT.
    Any,
}

impl Default for BootSection {
    fn default() -> Self {
        BootSection {
            san_attempts: 3,
            san_retry_delay: 5,
            templates_dir: None,
            script_secrets: ScriptSecrets::Neighbour,
            secret_window: SecretWindow::Boot,
            secret_window_seconds: 300,
        }
    }
}

impl BootSection {
    /// SAN attempts and their delay within reason, and a boot window a firmware's boot fits in.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if !(1..=20).contains(&self.san_attempts) {
            return Err((
                "boot.san_attempts",
                format!("{} is not between 1 and 20", self.san_attempts),
            ));
        }
        if self.san_retry_delay > 300 {
            return Err((
                "boot.san_retry_delay",
                format!("{} is more than 300 seconds", self.san_retry_delay),
            ));
        }
        if !(10..=86_400).contains(&self.secret_window_seconds) {
            return Err((
                "boot.secret_window_seconds",
                format!(
                    "{} is not between 10 and 86400 (a firmware's whole boot must fit in it)",
                    self.secret_window_seconds
                ),
            ));
        }
        Ok(())
    }
}
