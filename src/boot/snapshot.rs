//! The boot snapshot: every script the boot listeners can serve, rendered ahead of time.
//!
//! [`BootSnapshot::build`] renders each node once and indexes the result by each of its MACs,
//! so answering a boot request is a hash lookup and a reference-counted copy: no SQL, no
//! rendering, no lock. Pure: records in, snapshot out. Who builds it and when is `app`'s job.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::{BootSettings, RenderError, Templates, script_for};
use crate::model::{MacAddr, NodeRecord, StorageInterfaceName};

/// How many NICs (`net0`...) the generic script tries.
pub const GENERIC_SCRIPT_NICS: u32 = 8;

/// One script as served, with what it was rendered for (for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedScript {
    pub text: Bytes,
    pub node: Option<String>,
    pub scenario: &'static str,
    /// Why a known node gets the default script, if it does.
    pub problem: Option<String>,
}

/// Every script, by MAC, plus the generic and default scripts.
#[derive(Debug, Clone)]
pub struct BootSnapshot {
    by_mac: HashMap<MacAddr, Arc<ServedScript>>,
    default: Arc<ServedScript>,
    generic: Bytes,
    nodes: usize,
}

impl BootSnapshot {
    /// Renders every node's script. A node that does not validate gets the default script
    /// (its `problem` says why); nothing here fails but the generic script's own template.
    pub fn build(
        records: &[NodeRecord],
        templates: &Templates,
        settings: &BootSettings,
        default_storage: StorageInterfaceName,
    ) -> Result<BootSnapshot, RenderError> {
        let served = |script: super::BootScript| {
            Arc::new(ServedScript {
                text: Bytes::from(script.text),
                node: script.node,
                scenario: script.scenario,
                problem: script.problem,
            })
        };
        let default = served(script_for(templates, settings, default_storage, None));
        let mut by_mac = HashMap::with_capacity(records.len() * 2);
        for record in records {
            let script = served(script_for(templates, settings, default_storage, Some(record)));
            for port in &record.ports {
                by_mac.insert(port.address, Arc::clone(&script));
            }
        }
        let generic =
            Bytes::from(templates.render_generic(&settings.public_url, GENERIC_SCRIPT_NICS)?);
        Ok(BootSnapshot { by_mac, default, generic, nodes: records.len() })
    }

    /// The script of a known MAC.
    pub fn script(&self, mac: MacAddr) -> Option<&Arc<ServedScript>> {
        self.by_mac.get(&mac)
    }

    /// The script for unknown machines.
    pub fn default_script(&self) -> &Arc<ServedScript> {
        &self.default
    }

    /// The generic `boot.ipxe`.
    pub fn generic_script(&self) -> &Bytes {
        &self.generic
    }

    /// Nodes rendered.
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// Known MACs.
    pub fn mac_count(&self) -> usize {
        self.by_mac.len()
    }
}
