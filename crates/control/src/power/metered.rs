//! A power driver that counts what another does: each BMC call and how it ended, into the
//! appliance's metrics (`bootvol_bmc_calls_total`). It adds no behaviour: every call and its
//! result pass through unchanged. `validate` is not counted (it reads `driver_info`, no BMC).

use std::sync::Arc;

use bootvol_core::model::{Driver, Node, PowerState};
use bootvol_runtime::metrics::{BmcCall, BmcResult, Metrics};

use super::{BootDevice, PowerAction, PowerDriver, PowerError};

/// `inner`, counted as `driver`.
#[derive(Debug)]
pub struct Metered {
    pub inner: Arc<dyn PowerDriver>,
    pub driver: Driver,
    pub metrics: Arc<Metrics>,
}

impl Metered {
    fn count<T>(&self, call: BmcCall, result: &Result<T, PowerError>) {
        let label = match result {
            Ok(_) => BmcResult::Ok,
            Err(PowerError::Invalid(_)) => BmcResult::Invalid,
            Err(PowerError::Bmc(_)) => BmcResult::BmcError,
            Err(PowerError::Timeout(_)) => BmcResult::Timeout,
            Err(PowerError::Unsupported(_)) => BmcResult::Unsupported,
        };
        self.metrics.bmc_call(self.driver, call, label);
    }
}

#[async_trait::async_trait]
impl PowerDriver for Metered {
    fn validate(&self, node: &Node) -> Result<(), PowerError> {
        self.inner.validate(node)
    }

    async fn power_state(&self, node: &Node) -> Result<PowerState, PowerError> {
        let result = self.inner.power_state(node).await;
        self.count(BmcCall::PowerState, &result);
        result
    }

    async fn set_power(&self, node: &Node, action: PowerAction) -> Result<(), PowerError> {
        let result = self.inner.set_power(node, action).await;
        self.count(BmcCall::SetPower, &result);
        result
    }

    async fn set_boot_device(
        &self,
        node: &Node,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), PowerError> {
        let result = self.inner.set_boot_device(node, device, persistent).await;
        self.count(BmcCall::SetBootDevice, &result);
        result
    }
}
