//! Hardware types and their interfaces, as plain data: which interface implementations each
//! hardware type bootvol serves supports (the first is its default), the node's optional
//! interface fields, and the check of an interface a client names, with Ironic's error text.
//! Pure.

use serde::{Deserialize, Serialize};

use super::{Driver, ValueError};

/// Ironic's hardware interfaces, in the order the driver resource lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Bios,
    Boot,
    Console,
    Deploy,
    Inspect,
    Management,
    Network,
    Power,
    Raid,
    Rescue,
    Storage,
    Vendor,
}

impl Kind {
    /// Every kind, in Ironic's order.
    pub const ALL: &'static [Kind] = &[
        Kind::Bios,
        Kind::Boot,
        Kind::Console,
        Kind::Deploy,
        Kind::Inspect,
        Kind::Management,
        Kind::Network,
        Kind::Power,
        Kind::Raid,
        Kind::Rescue,
        Kind::Storage,
        Kind::Vendor,
    ];

    /// `boot`, `console`...
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Bios => "bios",
            Kind::Boot => "boot",
            Kind::Console => "console",
            Kind::Deploy => "deploy",
            Kind::Inspect => "inspect",
            Kind::Management => "management",
            Kind::Network => "network",
            Kind::Power => "power",
            Kind::Raid => "raid",
            Kind::Rescue => "rescue",
            Kind::Storage => "storage",
            Kind::Vendor => "vendor",
        }
    }

    /// The node field: `boot_interface`...
    pub fn field(self) -> String {
        format!("{}_interface", self.as_str())
    }
}

/// The interfaces a node records beyond boot, deploy and storage (which have their own typed
/// fields); `None`: the hardware type's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interfaces {
    pub console: Option<String>,
    pub inspect: Option<String>,
    pub management: Option<String>,
    pub network: Option<String>,
    pub power: Option<String>,
    pub raid: Option<String>,
    pub rescue: Option<String>,
    pub vendor: Option<String>,
}

impl Interfaces {
    /// The kinds this struct holds, in the order of its fields.
    pub const KINDS: &'static [Kind] = &[
        Kind::Console,
        Kind::Inspect,
        Kind::Management,
        Kind::Network,
        Kind::Power,
        Kind::Raid,
        Kind::Rescue,
        Kind::Vendor,
    ];

    fn slot(&mut self, kind: Kind) -> Option<&mut Option<String>> {
        Some(match kind {
            Kind::Console => &mut self.console,
            Kind::Inspect => &mut self.inspect,
            Kind::Management => &mut self.management,
            Kind::Network => &mut self.network,
            Kind::Power => &mut self.power,
            Kind::Raid => &mut self.raid,
            Kind::Rescue => &mut self.rescue,
            Kind::Vendor => &mut self.vendor,
            Kind::Bios | Kind::Boot | Kind::Deploy | Kind::Storage => return None,
        })
    }

    /// The recorded value of `kind` (None also for the kinds this struct does not hold).
    pub fn get(&self, kind: Kind) -> Option<&str> {
        match kind {
            Kind::Console => self.console.as_deref(),
            Kind::Inspect => self.inspect.as_deref(),
            Kind::Management => self.management.as_deref(),
            Kind::Network => self.network.as_deref(),
            Kind::Power => self.power.as_deref(),
            Kind::Raid => self.raid.as_deref(),
            Kind::Rescue => self.rescue.as_deref(),
            Kind::Vendor => self.vendor.as_deref(),
            Kind::Bios | Kind::Boot | Kind::Deploy | Kind::Storage => None,
        }
    }

    /// Records `value` for `kind` (a kind this struct holds).
    pub fn set(&mut self, kind: Kind, value: Option<String>) {
        if let Some(slot) = self.slot(kind) {
            *slot = value;
        }
    }

    /// The value that applies: the recorded one, else `driver`'s default.
    pub fn effective(&self, driver: Driver, kind: Kind) -> &str {
        self.get(kind).unwrap_or_else(|| default(driver, kind))
    }
}

/// The implementations of `kind` that `driver` supports, its default first. Storage is the
/// configuration's (`[DEFAULT] enabled_storage_interfaces`), so it is not listed here.
pub fn supported(driver: Driver, kind: Kind) -> &'static [&'static str] {
    use Driver::{Fake, FakeHardware, Ipmi, Redfish};
    match (kind, driver) {
        (Kind::Bios, FakeHardware) => &["fake", "no-bios"],
        (Kind::Bios, _) => &["no-bios"],
        (Kind::Boot, FakeHardware) => &["fake", "ipxe", "pxe"],
        (Kind::Boot, _) => &["ipxe", "pxe", "fake"],
        (Kind::Deploy, FakeHardware) => &["fake", "direct", "ramdisk"],
        (Kind::Deploy, _) => &["direct", "ramdisk", "fake"],
        (Kind::Console, FakeHardware) => &["fake", "no-console"],
        (Kind::Console, _) => &["no-console"],
        (Kind::Inspect, FakeHardware) => &["fake", "no-inspect"],
        (Kind::Inspect, _) => &["no-inspect"],
        (Kind::Management | Kind::Power, Fake | FakeHardware) => &["fake"],
        (Kind::Management | Kind::Power, Redfish) => &["redfish"],
        (Kind::Management | Kind::Power, Ipmi) => &["ipmitool"],
        (Kind::Network, _) => &["flat", "noop"],
        (Kind::Raid, FakeHardware) => &["fake", "no-raid"],
        (Kind::Raid, _) => &["no-raid"],
        (Kind::Rescue, FakeHardware) => &["fake", "no-rescue"],
        (Kind::Rescue, _) => &["no-rescue"],
        (Kind::Storage, _) => &["noop", "external", "cinder"],
        (Kind::Vendor, FakeHardware) => &["fake", "no-vendor"],
        (Kind::Vendor, _) => &["no-vendor"],
    }
}

/// `driver`'s default implementation of `kind`.
pub fn default(driver: Driver, kind: Kind) -> &'static str {
    supported(driver, kind)[0]
}

/// Every implementation of `kind` some hardware type supports (the driver resource's
/// `enabled_*_interfaces`), sorted.
pub fn enabled(kind: Kind) -> Vec<&'static str> {
    let mut all: Vec<&'static str> =
        Driver::ALL.iter().flat_map(|d| supported(*d, kind).iter().copied()).collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Checks that `driver` supports `value` for `kind`, with Ironic's messages (an implementation
/// no hardware type has; one this hardware type does not support).
pub fn check(driver: Driver, kind: Kind, value: &str) -> Result<(), ValueError> {
    let all = enabled(kind);
    if !all.contains(&value) {
        return Err(ValueError(format!(
            "Could not find the following interface in the 'ironic.hardware.interfaces.{}' entrypoint: {value}. Valid interfaces are {}.",
            kind.as_str(),
            all.join(", ")
        )));
    }
    if !supported(driver, kind).contains(&value) {
        return Err(ValueError(format!(
            "{} interface implementation '{value}' is not supported by hardware type {driver}.",
            kind.as_str()
        )));
    }
    Ok(())
}

/// The `driver_info` key every hardware type reads when it sets a boot device (the deploy's,
/// the API's `PUT .../management/boot_device`): see [`boot_persistence`].
pub const FORCE_PERSISTENT_BOOT_DEVICE: (&str, &str) = (
    "force_persistent_boot_device",
    "Whether boot device changes persist: \"Always\" makes every change persistent, \"Never\" none, \"Default\" (when absent) as each request asks. \"True\" and \"False\" are taken for \"Always\" and \"Never\". Optional.",
);

/// Whether a boot device change asked as `asked` (persistent or not) is made persistent, by
/// the node's `driver_info.force_persistent_boot_device` (Ironic's values, any case).
pub fn boot_persistence(driver_info: &super::JsonMap, asked: bool) -> Result<bool, ValueError> {
    let (key, _) = FORCE_PERSISTENT_BOOT_DEVICE;
    let value = match driver_info.get(key) {
        None | Some(serde_json::Value::Null) => return Ok(asked),
        Some(serde_json::Value::Bool(b)) => return Ok(*b),
        Some(serde_json::Value::String(s)) => s.to_ascii_lowercase(),
        Some(other) => {
            return Err(ValueError(format!(
                "driver_info.{key}: {other} is not one of Always, Never, Default"
            )));
        }
    };
    match value.as_str() {
        "always" | "true" => Ok(true),
        "never" | "false" => Ok(false),
        "default" => Ok(asked),
        _ => Err(ValueError(format!(
            "driver_info.{key}: {value:?} is not one of Always, Never, Default"
        ))),
    }
}

/// What `GET /v1/drivers/{name}/properties` lists: the `driver_info` keys the hardware type
/// reads, with their descriptions (its BMC's, then [`FORCE_PERSISTENT_BOOT_DEVICE`]).
pub fn properties(driver: Driver) -> Vec<(&'static str, &'static str)> {
    let mut all = bmc_properties(driver).to_vec();
    all.push(FORCE_PERSISTENT_BOOT_DEVICE);
    all
}

fn bmc_properties(driver: Driver) -> &'static [(&'static str, &'static str)] {
    match driver {
        Driver::Fake | Driver::FakeHardware => &[],
        Driver::Redfish => &[
            ("redfish_address", "The URL address to the Redfish controller. Required."),
            ("redfish_system_id", "The canonical path to the ComputerSystem resource. Optional."),
            (
                "redfish_username",
                "User account with admin/server-profile access privilege. Optional.",
            ),
            ("redfish_password", "User account password. Optional."),
            ("redfish_verify_ca", "Whether to verify the BMC's TLS certificate. Optional."),
        ],
        Driver::Ipmi => &[
            ("ipmi_address", "IP address or hostname of the node. Required."),
            ("ipmi_username", "username; default is NULL user. Optional."),
            ("ipmi_password", "password. Optional."),
            ("ipmi_port", "remote IPMI RMCP port. Optional."),
            (
                "ipmi_protocol_version",
                "the version of the IPMI protocol; default is \"2.0\". Optional.",
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_persistence_follows_force_persistent_boot_device() {
        let info = |v: serde_json::Value| {
            let mut m = super::super::JsonMap::new();
            m.insert("force_persistent_boot_device".into(), v);
            m
        };
        let none = super::super::JsonMap::new();
        assert_eq!(boot_persistence(&none, false), Ok(false));
        assert_eq!(boot_persistence(&none, true), Ok(true));
        assert_eq!(boot_persistence(&info("Always".into()), false), Ok(true));
        assert_eq!(boot_persistence(&info("never".into()), true), Ok(false));
        assert_eq!(boot_persistence(&info("Default".into()), false), Ok(false));
        assert_eq!(boot_persistence(&info("True".into()), false), Ok(true));
        assert_eq!(boot_persistence(&info(false.into()), true), Ok(false));
        assert!(
            boot_persistence(&info("sometimes".into()), true).unwrap_err().0.contains("Always")
        );
        assert!(boot_persistence(&info(3.into()), true).is_err());
        for driver in Driver::ALL {
            assert_eq!(properties(*driver).last(), Some(&FORCE_PERSISTENT_BOOT_DEVICE));
        }
    }

    #[test]
    fn defaults_and_checks() {
        assert_eq!(default(Driver::FakeHardware, Kind::Boot), "fake");
        assert_eq!(default(Driver::FakeHardware, Kind::Rescue), "fake");
        assert_eq!(default(Driver::Fake, Kind::Boot), "ipxe");
        assert_eq!(default(Driver::Ipmi, Kind::Power), "ipmitool");
        assert_eq!(default(Driver::Redfish, Kind::Network), "flat");
        assert!(check(Driver::Ipmi, Kind::Network, "noop").is_ok());
        assert_eq!(
            check(Driver::Ipmi, Kind::Power, "redfish").unwrap_err().0,
            "power interface implementation 'redfish' is not supported by hardware type ipmi."
        );
        let e = check(Driver::Fake, Kind::Network, "neutron").unwrap_err().0;
        assert!(e.contains("Valid interfaces are flat, noop."), "{e}");
        assert_eq!(enabled(Kind::Power), ["fake", "ipmitool", "redfish"]);
        let mut i = Interfaces::default();
        i.set(Kind::Network, Some("noop".into()));
        assert_eq!(i.effective(Driver::Fake, Kind::Network), "noop");
        assert_eq!(i.effective(Driver::Fake, Kind::Console), "no-console");
    }
}
