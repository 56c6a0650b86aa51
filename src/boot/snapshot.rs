//! The boot snapshot: every script the boot listeners can serve, rendered ahead of time.
//!
//! [`BootSnapshot::build`] renders each node once and indexes the result by each of its MACs,
//! so answering a boot request is a hash lookup and a reference-counted copy: no SQL, no
//! rendering, no lock. Pure: records in, snapshot out. Who builds it and when is `app`'s job.
//!
//! Each script records whether it carries a secret and the MACs of every port of its node, so
//! that the listeners can serve it only to that node (a node with two NICs may fetch net1's
//! script over net0); who the client is, the neighbour table says (`neighbour`), not this.

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
    /// The node's UUID (for events).
    pub node_uuid: Option<String>,
    /// Whether the text carries a secret: then only the node itself gets it.
    pub secret: bool,
    /// Every port of the node: the MACs the node may ask from.
    pub node_macs: Arc<[MacAddr]>,
}

impl ServedScript {
    /// Whether a client whose address maps to `client_mac` in the neighbour table may get this
    /// script: anyone when it carries no secret, else only one of the node's own ports.
    pub fn served_to(&self, client_mac: Option<MacAddr>) -> bool {
        !self.secret || client_mac.is_some_and(|mac| self.node_macs.contains(&mac))
    }
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
        let served = |script: super::BootScript, record: Option<&NodeRecord>| {
            Arc::new(ServedScript {
                text: Bytes::from(script.text),
                node: script.node,
                scenario: script.scenario,
                problem: script.problem,
                node_uuid: record.map(|r| r.node.uuid.clone()),
                secret: script.secret,
                node_macs: record
                    .map(|r| r.ports.iter().map(|p| p.address).collect())
                    .unwrap_or_default(),
            })
        };
        let default = served(script_for(templates, settings, default_storage, None), None);
        let mut by_mac = HashMap::with_capacity(records.len() * 2);
        for record in records {
            let script = served(
                script_for(templates, settings, default_storage, Some(record)),
                Some(record),
            );
            for port in &record.ports {
                by_mac.insert(port.address, Arc::clone(&script));
            }
        }
        let generic = Bytes::from(templates.render_generic(
            &settings.public_url,
            &settings.peers,
            GENERIC_SCRIPT_NICS,
        )?);
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
