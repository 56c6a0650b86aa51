//! What the deploy ramdisk and the boot edge hand the control plane (scenario 4): who calls a
//! deploy endpoint ([`Caller`], with the boot edge's neighbour check already made) and what the
//! ramdisk reports ([`CallbackReport`]). Plain values; the rules are the conductor's.

use std::net::IpAddr;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::model::{MacAddr, NodeRecord};

/// What the deploy ramdisk reports.
#[derive(Debug, Clone, Deserialize)]
pub struct CallbackReport {
    pub status: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub disk: Option<String>,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub bytes: Option<u64>,
}

/// Who calls a deploy endpoint: its address, and the MAC the neighbour table names for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub address: IpAddr,
    pub mac: Option<MacAddr>,
    /// Whether the neighbour check applies (`[boot] script_secrets = "neighbour"`).
    pub checked: bool,
}

impl Caller {
    /// A caller the neighbour check is waived for (`script_secrets = "any"`, the CLI, tests).
    pub fn any(address: IpAddr) -> Caller {
        Caller { address, mac: None, checked: false }
    }

    /// Whether the caller is the node: one of its ports' MACs.
    pub fn is(&self, record: &NodeRecord) -> bool {
        !self.checked || self.mac.is_some_and(|mac| record.ports.iter().any(|p| p.address == mac))
    }

    /// How a deployment remembers the client that took its token.
    pub fn as_claimant(&self) -> Value {
        json!({"address": self.address.to_string(), "mac": self.mac.map(|m| m.to_string())})
    }

    /// Whether this caller is the claimant recorded as `claimant`.
    pub fn is_claimant(&self, claimant: Option<&Value>) -> bool {
        claimant.is_some_and(|c| *c == self.as_claimant())
    }

    pub fn describe(&self) -> String {
        match self.mac {
            Some(mac) => format!("{} ({mac})", self.address),
            None => self.address.to_string(),
        }
    }
}
