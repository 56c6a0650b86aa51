//! `[probe]`: the probe of every node's boot target from the appliance (`bootvol probe`, the
//! admin page's button, and the background pass every `interval` seconds), and its checks.
//!
//! It must not know how targets are probed (`bootvol_control::probe` does): only the values.

use serde::Deserialize;

use super::Invalid;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeSection {
    /// Seconds between background probes of every node; 0 (the default) turns it off.
    pub interval: u64,
    /// Seconds one target's probe may take before it is reported failed.
    pub timeout: u64,
    /// The interface AoE Query Config frames go out on (the boot network's); empty: AoE
    /// targets are reported failed with the reason.
    pub aoe_interface: String,
}

impl Default for ProbeSection {
    fn default() -> Self {
        ProbeSection { interval: 0, timeout: 5, aoe_interface: String::new() }
    }
}

impl ProbeSection {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.interval != 0 && self.interval < 10 {
            return Err((
                "probe.interval",
                format!("{} is under 10 seconds (0 turns the background probe off)", self.interval),
            ));
        }
        if !(1..=120).contains(&self.timeout) {
            return Err((
                "probe.timeout",
                format!("{} is not between 1 and 120 seconds", self.timeout),
            ));
        }
        let name = &self.aoe_interface;
        if name.len() > 15
            || name == "."
            || name == ".."
            || name.bytes().any(|b| b == b'/' || b == b':' || !b.is_ascii_graphic())
        {
            return Err(("probe.aoe_interface", format!("{name:?} is not an interface name")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn probe_is_off_by_default_and_checked() {
        let config = Config::from_toml("", "t").unwrap();
        assert_eq!((config.probe.interval, config.probe.timeout), (0, 5));
        let on = Config::from_toml("[probe]\ninterval = 3600\naoe_interface = \"eth1\"\n", "t");
        assert_eq!(on.unwrap().probe.aoe_interface, "eth1");
        for (bad, key) in [
            ("interval = 5", "probe.interval"),
            ("timeout = 0", "probe.timeout"),
            ("aoe_interface = \"eth 1\"", "probe.aoe_interface"),
            ("aoe_interface = \"a-very-long-interface\"", "probe.aoe_interface"),
            ("aoe = 1", "aoe"),
        ] {
            let e = Config::from_toml(&format!("[probe]\n{bad}\n"), "t").unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }
}
