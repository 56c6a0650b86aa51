//! `[dhcp]`: the built-in ProxyDHCP's mode, links, addresses, whom it answers and which relays
//! it trusts, the check of those values, and the sockets they open.
//!
//! It must not know DHCP packets or open sockets: only the values.

use std::net::{Ipv4Addr, SocketAddr};

use serde::Deserialize;

use super::Invalid;

/// The built-in ProxyDHCP (`[dhcp]`): answers netboot clients next to the site's DHCP server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DhcpSection {
    pub mode: DhcpMode,
    /// The links to answer on (required with `mode = "proxy"`).
    pub interfaces: Vec<String>,
    /// Where to listen on each interface: DHCP (67) and PXE boot server discovery (4011).
    pub listen: Vec<SocketAddr>,
    /// Send option 43 "skip boot server discovery" to EFI PXE clients too.
    pub efi_discovery_bypass: bool,
    pub answer: DhcpAnswer,
    /// DHCP relays that forward from an address other than their `giaddr`: a request with
    /// `giaddr` set is answered (to `giaddr`) only when it comes from `giaddr` or from one of
    /// these.
    pub relays: Vec<Ipv4Addr>,
}

/// `[dhcp] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DhcpMode {
    /// No DHCP: the site's DHCP server hands out the boot file (docs/dhcp.md). The default.
    Off,
    /// ProxyDHCP: bootvol answers netboot clients with the boot file, never with an address.
    Proxy,
}

/// `[dhcp] answer`: which clients get a ProxyDHCP reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DhcpAnswer {
    /// Every netboot client (unknown ones get the default script). The default.
    All,
    /// Only MACs that are ports of a node.
    Known,
}

impl Default for DhcpSection {
    fn default() -> Self {
        DhcpSection {
            mode: DhcpMode::Off,
            interfaces: Vec::new(),
            listen: vec![
                SocketAddr::from(([0, 0, 0, 0], 67)),
                SocketAddr::from(([0, 0, 0, 0], 4011)),
            ],
            efi_discovery_bypass: true,
            answer: DhcpAnswer::All,
            relays: Vec::new(),
        }
    }
}

impl DhcpSection {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.mode == DhcpMode::Off {
            return Ok(());
        }
        if self.interfaces.is_empty() {
            return Err((
                "dhcp.interfaces",
                "list the links to answer on (mode = \"proxy\")".into(),
            ));
        }
        for name in &self.interfaces {
            if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
                return Err(("dhcp.interfaces", format!("{name:?} is not an interface name")));
            }
        }
        if self.listen.is_empty() {
            return Err(("dhcp.listen", "list at least one address".into()));
        }
        if let Some(a) = self.listen.iter().find(|a| !a.is_ipv4()) {
            return Err(("dhcp.listen", format!("{a} is not IPv4 (DHCPv4 only)")));
        }
        if let Some(a) = self
            .relays
            .iter()
            .find(|a| a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback())
        {
            return Err(("dhcp.relays", format!("{a} is not a relay's unicast address")));
        }
        Ok(())
    }

    /// The sockets `serve` opens: one per interface and listen address.
    pub fn sockets(&self) -> usize {
        match self.mode {
            DhcpMode::Off => 0,
            DhcpMode::Proxy => self.interfaces.len() * self.listen.len(),
        }
    }
}
