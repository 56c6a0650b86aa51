//! Power drivers: turning nodes on and off and choosing what they boot, through their BMC.
//!
//! The [`PowerDriver`] trait is the seam the conductor calls; [`PowerDrivers`] (the conductor's,
//! given to it from outside) and [`driver_for`] pick the implementation from the node's hardware
//! type: [`fake`] (no BMC, for demos and tests), [`redfish`] (HTTP, Redfish `ComputerSystem`)
//! and [`ipmi`] (`ipmitool` over IPMI 2.0 lanplus).
//! Each reads Ironic's `driver_info` field names. [`metered`] wraps any of them to count its BMC
//! calls in the metrics.
//!
//! Only this module talks to BMCs; it knows nothing about SQLite, provision states or boot
//! scripts. BMC passwords never appear in logs, error messages or `Debug` output: the drivers
//! keep them in `Secret` and scrub them out of every message a BMC or a tool sends back.

pub mod fake;
pub mod ipmi;
pub mod metered;
pub mod redfish;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use bootvol_core::model::{Driver, Node, PowerState};

/// What to do with a node's power.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    /// Power on (nothing happens when the node is already on).
    On,
    /// Hard power off (nothing happens when the node is already off).
    Off,
    /// Hard restart; a node that is off is powered on instead (as Ironic does).
    Reboot,
    /// Ask the operating system to shut down (ACPI power button); waits until the node is off.
    SoftOff,
}

/// Which device a node boots from next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootDevice {
    /// The network: PXE, then iPXE from bootvol.
    Pxe,
    /// The local disk (or the LUN an HBA presents).
    Disk,
}

/// A failed power operation. Messages never contain a BMC password.
#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    /// `driver_info` is missing a field or has a malformed one; the message names the field.
    #[error("invalid driver_info: {0}")]
    Invalid(String),
    /// The BMC (or the tool talking to it) refused or failed; the message is the BMC's own.
    #[error("BMC error: {0}")]
    Bmc(String),
    /// The BMC did not answer within the request timeout, or did not reach the requested power
    /// state within the wait.
    #[error("BMC timeout: {0}")]
    Timeout(String),
    /// The BMC (or this driver) does not offer what was asked.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// A power driver: one per hardware type, shared by every node of that type.
#[async_trait::async_trait]
pub trait PowerDriver: Send + Sync + fmt::Debug {
    /// Checks driver_info (fields present and well formed); no BMC call.
    fn validate(&self, node: &Node) -> Result<(), PowerError>;

    /// The node's current power state, as the BMC reports it.
    async fn power_state(&self, node: &Node) -> Result<PowerState, PowerError>;

    /// Returns once the BMC accepted the action; for On/Off/SoftOff also waits (bounded) until
    /// the state is reached.
    async fn set_power(&self, node: &Node, action: PowerAction) -> Result<(), PowerError>;

    /// Sets the device the node boots from: for the next boot only, or for every boot when
    /// `persistent`.
    async fn set_boot_device(
        &self,
        node: &Node,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), PowerError>;
}

/// How long BMC operations may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerSettings {
    /// Bounds each BMC call (one HTTP request, one `ipmitool` run).
    pub timeout: Duration,
    /// How long `set_power` waits for the node to reach the requested state.
    pub state_wait: Duration,
}

impl Default for PowerSettings {
    /// 30 s per call; 60 s for a power state change (Ironic's `power_state_change_timeout`).
    fn default() -> Self {
        PowerSettings { timeout: Duration::from_secs(30), state_wait: Duration::from_secs(60) }
    }
}

/// The driver for a hardware type, made for this call (a fake's call log starts empty: a
/// conductor uses [`PowerDrivers`], whose one fake keeps its log).
pub fn driver_for(driver: Driver, settings: &PowerSettings) -> Arc<dyn PowerDriver> {
    PowerDrivers::new(*settings).driver(driver)
}

/// The power drivers of a conductor, one per hardware type: one [`fake::FakePower`] shared by
/// every call (so its call log holds everything the conductor did through it), and the settings
/// the Redfish and IPMI drivers are made with.
#[derive(Debug, Clone)]
pub struct PowerDrivers {
    fake: Arc<fake::FakePower>,
    settings: PowerSettings,
}

impl PowerDrivers {
    /// A fresh fake, and Redfish and IPMI with `settings`.
    pub fn new(settings: PowerSettings) -> PowerDrivers {
        PowerDrivers::with_fake(settings, Arc::new(fake::FakePower::new()))
    }

    /// `fake` answers for the `fake` and `fake-hardware` types (a test keeps a handle on it to
    /// read its call log).
    pub fn with_fake(settings: PowerSettings, fake: Arc<fake::FakePower>) -> PowerDrivers {
        PowerDrivers { fake, settings }
    }

    /// The one fake driver.
    pub fn fake(&self) -> &Arc<fake::FakePower> {
        &self.fake
    }

    /// The driver for a hardware type: the shared fake, or a Redfish or IPMI driver made for
    /// this call.
    pub fn driver(&self, driver: Driver) -> Arc<dyn PowerDriver> {
        match driver {
            Driver::Fake | Driver::FakeHardware => Arc::clone(&self.fake) as Arc<dyn PowerDriver>,
            Driver::Redfish => Arc::new(redfish::Redfish::new(self.settings)),
            Driver::Ipmi => Arc::new(ipmi::Ipmi::new(self.settings)),
        }
    }
}

/// A password from `driver_info`: shown as `******` by `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the secret in `text` (a BMC's or a tool's message).
    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.0, bootvol_core::secrets::MASK)
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(bootvol_core::secrets::MASK)
    }
}

/// Scrubs an optional secret out of a message.
pub(crate) fn scrub(secret: Option<&Secret>, text: &str) -> String {
    match secret {
        Some(secret) => secret.scrub(text),
        None => text.to_owned(),
    }
}

/// Reads an optional string field of `driver_info`; empty strings count as absent. Never echoes
/// the value (it may be a secret).
pub(crate) fn optional_str<'a>(node: &'a Node, field: &str) -> Result<Option<&'a str>, PowerError> {
    match node.driver_info.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(PowerError::Invalid(format!("{field} must be a string"))),
    }
}

/// Reads a required string field of `driver_info`.
pub(crate) fn required_str<'a>(node: &'a Node, field: &str) -> Result<&'a str, PowerError> {
    optional_str(node, field)?.ok_or_else(|| {
        PowerError::Invalid(format!("{field} is required for the {} driver", node.driver))
    })
}

/// Refuses control characters in a value that goes into a command line or a header; names the
/// field, never the value.
pub(crate) fn no_control_chars(field: &str, value: &str) -> Result<(), PowerError> {
    if value.chars().any(char::is_control) {
        return Err(PowerError::Invalid(format!("{field} contains control characters")));
    }
    Ok(())
}

/// A node with the given driver and driver_info, for the drivers' unit tests.
#[cfg(test)]
pub(crate) fn test_node(driver: Driver, driver_info: Value) -> Node {
    use bootvol_core::model::{BootInterfaceName, DeployInterfaceName, ProvisionState};
    Node {
        uuid: "11111111-2222-3333-4444-555555555555".to_owned(),
        name: "node-1".to_owned(),
        driver,
        driver_info: driver_info.as_object().cloned().unwrap_or_default(),
        properties: Default::default(),
        instance_info: Default::default(),
        driver_internal_info: Default::default(),
        extra: Default::default(),
        storage_interface: None,
        boot_interface: BootInterfaceName::Ipxe,
        deploy_interface: DeployInterfaceName::Direct,
        interfaces: Default::default(),
        instance_uuid: None,
        resource_class: None,
        provision_updated_at: None,
        reservation: None,
        chassis_uuid: None,
        power_state: None,
        target_power_state: None,
        provision_state: ProvisionState::Available,
        target_provision_state: None,
        maintenance: false,
        maintenance_reason: None,
        console_enabled: false,
        target_raid_config: Default::default(),
        last_error: None,
        created_at: None,
        updated_at: None,
    }
}
