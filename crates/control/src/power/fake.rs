//! The `fake` hardware type: no BMC. For demos and tests.
//!
//! `power_state` answers the node's recorded `power_state` (the conductor records it after each
//! action, so the answer holds across processes; a node with nothing recorded is off).
//! `set_power` and `set_boot_device` always succeed: they log the call and remember the last
//! [`FakePower::CALLS_KEPT`] calls, so a test can assert "node X was rebooted". Knows nothing of
//! any BMC, of SQLite or of the conductor.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::{BootDevice, PowerAction, PowerDriver, PowerError};
use bootvol_core::model::{Node, PowerState};

/// One call made to the fake driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeCall {
    SetPower { node: String, action: PowerAction },
    SetBootDevice { node: String, device: BootDevice, persistent: bool },
}

/// The fake power driver.
#[derive(Debug, Default)]
pub struct FakePower {
    calls: Mutex<VecDeque<FakeCall>>,
}

impl FakePower {
    /// How many calls [`FakePower::calls`] keeps (the oldest are forgotten first).
    pub const CALLS_KEPT: usize = 256;

    pub fn new() -> FakePower {
        FakePower::default()
    }

    /// The calls made so far (at most [`FakePower::CALLS_KEPT`]), oldest first.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    fn record(&self, call: FakeCall) {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        if calls.len() == Self::CALLS_KEPT {
            calls.pop_front();
        }
        calls.push_back(call);
    }
}

#[async_trait::async_trait]
impl PowerDriver for FakePower {
    fn validate(&self, _node: &Node) -> Result<(), PowerError> {
        Ok(())
    }

    async fn power_state(&self, node: &Node) -> Result<PowerState, PowerError> {
        Ok(node.power_state.unwrap_or(PowerState::Off))
    }

    async fn set_power(&self, node: &Node, action: PowerAction) -> Result<(), PowerError> {
        tracing::info!(node = %node.uuid, name = %node.name, ?action, "fake power: set power");
        self.record(FakeCall::SetPower { node: node.uuid.clone(), action });
        Ok(())
    }

    async fn set_boot_device(
        &self,
        node: &Node,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), PowerError> {
        tracing::info!(
            node = %node.uuid, name = %node.name, ?device, persistent,
            "fake power: set boot device"
        );
        self.record(FakeCall::SetBootDevice { node: node.uuid.clone(), device, persistent });
        Ok(())
    }
}
