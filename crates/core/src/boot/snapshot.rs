//! The boot snapshot: every script the boot listeners can serve, rendered ahead of time.
//!
//! [`BootSnapshot::build`] (or [`SnapshotBuilder`], a record at a time) renders each node once and indexes the result by each of its MACs,
//! so answering a boot request is a hash lookup and a reference-counted copy: no SQL, no
//! rendering, no lock. Pure: records in, snapshot out. Who builds it and when is `app`'s job.
//!
//! Each node's script is also kept by its UUID, with the scenario served and the problem (why
//! it gets the default script, or would once deployed), so that the admin page shows the one
//! decision the listeners serve ([`BootSnapshot::node`]), ports or not.
//!
//! Each script records whether it carries a secret and the MACs of every port of its node, so
//! that the listeners can serve it only to that node (a node with two NICs may fetch net1's
//! script over net0); who the client is, the neighbour table says (`neighbour`), not this.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::{BootSettings, RenderError, Templates, script_for};
use crate::model::{MacAddr, NodeRecord, ProvisionState, StorageInterfaceName};

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
    /// A node not deployed: why it could not boot its volume once deployed, if it could not.
    pub problem_once_deployed: Option<String>,
    /// The node's UUID (for events).
    pub node_uuid: Option<String>,
    /// Whether the text carries a secret: then only the node itself gets it.
    pub secret: bool,
    /// Every port of the node: the MACs the node may ask from.
    pub node_macs: Arc<[MacAddr]>,
    /// The node's BMC reported it off (its last known power state): a boot sign for it cannot
    /// be a boot unless bootvol powered it on (`boot_window`).
    pub powered_off: bool,
    /// The Unix time the conductor last opened the node's boot window (it powered the node on
    /// or rebooted it), as recorded in `driver_internal_info.boot_window.opened_at`.
    pub window_opened_at: Option<u64>,
    /// The node's provision state when rendered (for the snapshot's counts).
    pub provision_state: Option<ProvisionState>,
}

impl ServedScript {
    /// Whether a client whose address maps to `client_mac` in the neighbour table may get this
    /// script: anyone when it carries no secret, else only one of the node's own ports.
    pub fn served_to(&self, client_mac: Option<MacAddr>) -> bool {
        !self.secret || client_mac.is_some_and(|mac| self.node_macs.contains(&mac))
    }

    /// Why the node cannot boot its volume: it gets the default script (deployed), or would
    /// once deployed; `None` when it can.
    pub fn boot_problem(&self) -> Option<&str> {
        self.problem.as_deref().or(self.problem_once_deployed.as_deref())
    }

    /// What a request that gets this script got: the node's own script, or the default one.
    pub fn result(&self) -> crate::recent::BootResult {
        match self.scenario {
            "not-deployed" | "invalid" | "unknown" => {
                crate::recent::BootResult::DefaultScript(self.scenario)
            }
            scenario => crate::recent::BootResult::Served(scenario),
        }
    }
}

/// Every script, by MAC, plus the generic and default scripts.
#[derive(Debug, Clone)]
pub struct BootSnapshot {
    index: Index,
    default: Arc<ServedScript>,
    generic: Bytes,
}

/// The nodes' scripts, by MAC and by node, and how many nodes there are in each state.
#[derive(Debug, Clone)]
struct Index {
    by_mac: HashMap<MacAddr, Arc<ServedScript>>,
    /// Every node's script by its UUID (ports or not).
    by_node: HashMap<String, Arc<ServedScript>>,
    /// Nodes per provision state, in the order of `ProvisionState::ALL`.
    nodes_by_state: Vec<usize>,
}

impl Index {
    fn with_capacity(nodes: usize) -> Index {
        Index {
            by_mac: HashMap::with_capacity(nodes),
            by_node: HashMap::with_capacity(nodes),
            nodes_by_state: vec![0; ProvisionState::ALL.len()],
        }
    }

    /// `script`, rendered for `record`, under each of the node's MACs and its UUID.
    fn insert(&mut self, record: &NodeRecord, script: Arc<ServedScript>) {
        for port in &record.ports {
            self.by_mac.insert(port.address, Arc::clone(&script));
        }
        if let Some(i) = state_index(script.provision_state) {
            self.nodes_by_state[i] += 1;
        }
        if let Some(old) = self.by_node.insert(record.node.uuid.clone(), script) {
            // A node added twice (not done here): counted once.
            if let Some(i) = state_index(old.provision_state) {
                self.nodes_by_state[i] -= 1;
            }
        }
    }

    /// The node `uuid`'s script out of every map: its MACs (those still pointing at it) and
    /// its UUID.
    fn remove(&mut self, uuid: &str) {
        let Some(old) = self.by_node.remove(uuid) else { return };
        for mac in old.node_macs.iter() {
            if self.by_mac.get(mac).is_some_and(|s| Arc::ptr_eq(s, &old)) {
                self.by_mac.remove(mac);
            }
        }
        if let Some(i) = state_index(old.provision_state) {
            self.nodes_by_state[i] -= 1;
        }
    }
}

fn state_index(state: Option<ProvisionState>) -> Option<usize> {
    ProvisionState::ALL.iter().position(|s| Some(*s) == state)
}

/// A snapshot built a record at a time, so that the caller holds only the records it is
/// adding (`app` reads them a page at a time): [`BootSnapshot::build`] over a whole list.
#[derive(Debug)]
pub struct SnapshotBuilder<'a> {
    templates: &'a Templates,
    settings: &'a BootSettings,
    default_storage: StorageInterfaceName,
    default: Arc<ServedScript>,
    index: Index,
}

impl<'a> SnapshotBuilder<'a> {
    /// An empty snapshot with room for about `nodes` nodes.
    pub fn new(
        templates: &'a Templates,
        settings: &'a BootSettings,
        default_storage: StorageInterfaceName,
        nodes: usize,
    ) -> SnapshotBuilder<'a> {
        let default = served(script_for(templates, settings, default_storage, None), None);
        SnapshotBuilder {
            templates,
            settings,
            default_storage,
            default,
            index: Index::with_capacity(nodes),
        }
    }

    /// Renders one node's script and indexes it by each of the node's MACs.
    pub fn add(&mut self, record: &NodeRecord) {
        let script = served(
            script_for(self.templates, self.settings, self.default_storage, Some(record)),
            Some(record),
        );
        self.index.insert(record, script);
    }

    /// The snapshot, with the generic script rendered.
    pub fn finish(mut self) -> Result<BootSnapshot, RenderError> {
        let generic = Bytes::from(self.templates.render_generic(
            &self.settings.public_url,
            &self.settings.peers,
            GENERIC_SCRIPT_NICS,
        )?);
        self.index.by_mac.shrink_to_fit();
        self.index.by_node.shrink_to_fit();
        Ok(BootSnapshot { index: self.index, default: self.default, generic })
    }
}

/// A rendered script as served. The text is copied to an allocation of its exact length: the
/// renderer's string grows by doubling, and 10,000 scripts would otherwise keep up to twice
/// their size.
fn served(script: super::BootScript, record: Option<&NodeRecord>) -> Arc<ServedScript> {
    Arc::new(ServedScript {
        text: Bytes::copy_from_slice(script.text.as_bytes()),
        node: script.node,
        scenario: script.scenario,
        problem: script.problem,
        problem_once_deployed: script.problem_once_deployed,
        node_uuid: record.map(|r| r.node.uuid.clone()),
        secret: script.secret,
        node_macs: record.map(|r| r.ports.iter().map(|p| p.address).collect()).unwrap_or_default(),
        powered_off: record
            .is_some_and(|r| r.node.power_state == Some(crate::model::PowerState::Off)),
        window_opened_at: record.and_then(|r| {
            r.node.driver_internal_info.get("boot_window")?.get("opened_at")?.as_u64()
        }),
        provision_state: record.map(|r| r.node.provision_state),
    })
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
        let mut builder = SnapshotBuilder::new(templates, settings, default_storage, records.len());
        for record in records {
            builder.add(record);
        }
        builder.finish()
    }

    /// This snapshot with the nodes of `changed` rendered again from their records (`None`:
    /// the node is gone) and every other node's script kept: what [`BootSnapshot::build`] over
    /// all the records would give, at the cost of the changed nodes (and a copy of the maps'
    /// entries, not of the scripts). The settings and templates must be those this snapshot
    /// was built with; when they change, build anew.
    pub fn with_changes(
        &self,
        changed: &[(String, Option<NodeRecord>)],
        templates: &Templates,
        settings: &BootSettings,
        default_storage: StorageInterfaceName,
    ) -> BootSnapshot {
        let mut index = self.index.clone();
        // Every changed node out first: a MAC that moved between two of them is the new one's.
        for (uuid, _) in changed {
            index.remove(uuid);
        }
        for record in changed.iter().filter_map(|(_, r)| r.as_ref()) {
            let script = script_for(templates, settings, default_storage, Some(record));
            index.insert(record, served(script, Some(record)));
        }
        BootSnapshot { index, default: Arc::clone(&self.default), generic: self.generic.clone() }
    }

    /// The script of a known MAC.
    pub fn script(&self, mac: MacAddr) -> Option<&Arc<ServedScript>> {
        self.index.by_mac.get(&mac)
    }

    /// The script of the node with this UUID, as its ports get it (for the admin page: the
    /// scenario served and the problem, ports or not).
    pub fn node(&self, uuid: &str) -> Option<&Arc<ServedScript>> {
        self.index.by_node.get(uuid)
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
        self.index.by_node.len()
    }

    /// Nodes per provision state, in the order of `ProvisionState::ALL`.
    pub fn nodes_by_state(&self) -> &[usize] {
        &self.index.nodes_by_state
    }

    /// Known MACs.
    pub fn mac_count(&self) -> usize {
        self.index.by_mac.len()
    }
}
