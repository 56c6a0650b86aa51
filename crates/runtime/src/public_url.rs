//! `[http] public_url = "auto"`: the boot URL taken from this box's own address, for an
//! appliance whose address comes from DHCP.
//!
//! - Pure: [`choose`] picks the link and its IPv4 address (the first `[dhcp] interfaces` entry
//!   when listed, else the link of the default route, else the first non-loopback link that is
//!   up and has an IPv4 address), [`url_for`] makes the URL (`http://ADDRESS:PORT`, the port of
//!   `[http] listen`), [`default_route_link`] reads the kernel's IPv4 route table text.
//! - The edge: [`resolve`] reads the links (`getifaddrs`, through `nix`) and
//!   `/proc/self/net/route`; [`spawn_watch`] re-resolves every [`WATCH_EVERY`] as a service of
//!   `serve` and, when the URL changed, stores it in the shared [`PublicUrl`] and calls back
//!   (`serve` rebuilds the snapshot: every script's base URL; the ProxyDHCP and the conductor
//!   read the handle each time).
//!
//! A fixed `public_url` gives a [`PublicUrl`] that never changes, and nothing is watched.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bootvol_core::config::Config;

pub use bootvol_core::config::PUBLIC_URL_AUTO as AUTO;

/// How often `serve` looks at the addresses again.
pub const WATCH_EVERY: Duration = Duration::from_secs(5);

/// The boot URL in force, shared by what builds URLs (`serve`'s snapshot watcher, the ProxyDHCP,
/// the conductor); without a trailing `/`.
#[derive(Debug, Clone)]
pub struct PublicUrl(Arc<ArcSwap<String>>);

impl PublicUrl {
    pub fn new(url: String) -> PublicUrl {
        PublicUrl(Arc::new(ArcSwap::from_pointee(url)))
    }

    pub fn get(&self) -> Arc<String> {
        self.0.load_full()
    }

    /// Stores `url`; true when it differs from the one in force.
    fn set(&self, url: String) -> bool {
        if *self.0.load_full() == url {
            return false;
        }
        self.0.store(Arc::new(url));
        true
    }
}

/// A network link as `getifaddrs` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    pub up: bool,
    pub loopback: bool,
    pub ipv4: Vec<Ipv4Addr>,
}

/// Why a link was chosen, for `check-config` and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    DhcpInterface,
    DefaultRoute,
    FirstUpLink,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::DhcpInterface => "the first of [dhcp] interfaces",
            Reason::DefaultRoute => "the link of the default route",
            Reason::FirstUpLink => "the first non-loopback link that is up with an IPv4 address",
        }
    }
}

/// The link whose first IPv4 address makes the URL, and why; `None` when that link has no
/// address yet (or no link qualifies). A named `[dhcp]` interface is never passed over for
/// another: the URL must be the one nodes on that link reach.
pub fn choose<'a>(
    links: &'a [Link],
    dhcp_interface: Option<&str>,
    default_route: Option<&str>,
) -> Option<(&'a Link, Ipv4Addr, Reason)> {
    let usable = |l: &&Link| l.up && !l.loopback && !l.ipv4.is_empty();
    if let Some(name) = dhcp_interface {
        let link = links.iter().find(|l| l.name == name).filter(usable)?;
        return Some((link, link.ipv4[0], Reason::DhcpInterface));
    }
    if let Some(link) =
        default_route.and_then(|n| links.iter().find(|l| l.name == n)).filter(usable)
    {
        return Some((link, link.ipv4[0], Reason::DefaultRoute));
    }
    let link = links.iter().find(usable)?;
    Some((link, link.ipv4[0], Reason::FirstUpLink))
}

/// `http://ADDRESS:PORT` with the boot listener's port (left out when it is 80).
pub fn url_for(address: Ipv4Addr, listen: SocketAddr) -> String {
    match listen.port() {
        80 => format!("http://{address}"),
        port => format!("http://{address}:{port}"),
    }
}

/// The link of the first IPv4 default route (destination and mask 0) in the text of
/// `/proc/self/net/route`.
pub fn default_route_link(route_table: &str) -> Option<String> {
    route_table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
        let (name, destination, mask) = (fields.first()?, fields.get(1)?, fields.get(7)?);
        (*destination == "00000000" && *mask == "00000000").then(|| (*name).to_owned())
    })
}

/// This host's links now.
fn links() -> Vec<Link> {
    use nix::net::if_::InterfaceFlags;
    let mut links: Vec<Link> = Vec::new();
    let Ok(addresses) = nix::ifaddrs::getifaddrs() else { return links };
    for ifa in addresses {
        let index = match links.iter().position(|l| l.name == ifa.interface_name) {
            Some(i) => i,
            None => {
                links.push(Link {
                    name: ifa.interface_name.clone(),
                    up: ifa.flags.contains(InterfaceFlags::IFF_UP),
                    loopback: ifa.flags.contains(InterfaceFlags::IFF_LOOPBACK),
                    ipv4: Vec::new(),
                });
                links.len() - 1
            }
        };
        if let Some(ip) = ifa.address.as_ref().and_then(|a| a.as_sockaddr_in()).map(|a| a.ip()) {
            links[index].ipv4.push(ip);
        }
    }
    links
}

/// What `auto` gives on this host now: the URL, or why there is none.
pub fn resolve(config: &Config) -> Result<(String, String), String> {
    let routes = std::fs::read_to_string("/proc/self/net/route").unwrap_or_default();
    let links = links();
    let dhcp = config.dhcp.interfaces.first().map(String::as_str);
    match choose(&links, dhcp, default_route_link(&routes).as_deref()) {
        Some((link, address, reason)) => Ok((
            url_for(address, config.http.listen),
            format!("{address} on {} ({})", link.name, reason.as_str()),
        )),
        None => Err(match dhcp {
            Some(name) => {
                format!("{name} (the first of [dhcp] interfaces) is not up with an IPv4 address")
            }
            None => "no link other than loopback is up with an IPv4 address".to_owned(),
        }),
    }
}

/// What `check-config` prints about `[http] public_url`.
pub fn explain(config: &Config) -> String {
    if config.http.public_url != AUTO {
        return format!("http.public_url: {} (fixed)", config.http.public_url);
    }
    let rule = "auto: the first IPv4 address of the first [dhcp] interfaces entry if listed, \
                else of the default route's link, else of the first non-loopback link that is \
                up, with the port of [http] listen; looked at again every 5 s by serve, which \
                rebuilds the scripts and ProxyDHCP answers when it changes";
    match resolve(config) {
        Ok((url, why)) => format!("http.public_url: {rule}\n  now: {url} ({why})"),
        Err(why) => format!(
            "http.public_url: {rule}\n  now: none ({why}); serve waits for an address and \
             serves http://0.0.0.0 until then"
        ),
    }
}

/// The URL to start with: `public_url` itself, or what `auto` resolves to now (a placeholder
/// that no node can use when there is no address yet, logged).
pub fn initial(config: &Config) -> PublicUrl {
    if config.http.public_url != AUTO {
        return PublicUrl::new(config.http.public_url.clone());
    }
    match resolve(config) {
        Ok((url, why)) => {
            tracing::info!(%url, from = %why, "[http] public_url = \"auto\"");
            PublicUrl::new(url)
        }
        Err(why) => {
            let url = url_for(Ipv4Addr::UNSPECIFIED, config.http.listen);
            tracing::warn!(%url, reason = %why, "[http] public_url = \"auto\": no address yet");
            PublicUrl::new(url)
        }
    }
}

/// With `auto`: every [`WATCH_EVERY`], resolves again; a new URL is stored in `current` and
/// `changed` is called. Nothing without `auto`.
pub fn spawn_watch(
    config: &Config,
    current: &PublicUrl,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    changed: Arc<dyn Fn() + Send + Sync>,
) {
    if config.http.public_url != AUTO {
        return;
    }
    let (config, current) = (config.clone(), current.clone());
    crate::services::spawn_periodic(tracker, shutdown, "public url", WATCH_EVERY, move || {
        let (config, current, changed) = (config.clone(), current.clone(), Arc::clone(&changed));
        async move {
            let Ok((url, why)) = resolve(&config) else { return };
            let old = current.get();
            if current.set(url.clone()) {
                tracing::info!(old = %old, new = %url, from = %why, "public_url changed: rebuilding the scripts");
                changed();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, up: bool, ipv4: &[&str]) -> Link {
        Link {
            name: name.into(),
            up,
            loopback: name == "lo",
            ipv4: ipv4.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn the_dhcp_interface_then_the_default_route_then_the_first_up_link() {
        let links = [
            link("lo", true, &["127.0.0.1"]),
            link("eth0", false, &["192.0.2.1"]),
            link("eth1", true, &["198.51.100.7", "198.51.100.8"]),
            link("eth2", true, &["203.0.113.9"]),
            link("eth3", true, &[]),
        ];
        let pick =
            |dhcp, route| choose(&links, dhcp, route).map(|(l, a, r)| (l.name.clone(), a, r));
        assert_eq!(
            pick(Some("eth2"), Some("eth1")),
            Some(("eth2".into(), "203.0.113.9".parse().unwrap(), Reason::DhcpInterface))
        );
        // A named interface without an address is waited for, never replaced by another.
        assert_eq!(pick(Some("eth3"), Some("eth1")), None);
        assert_eq!(pick(Some("eth0"), None), None);
        assert_eq!(
            pick(None, Some("eth2")),
            Some(("eth2".into(), "203.0.113.9".parse().unwrap(), Reason::DefaultRoute))
        );
        // A default route over a link that is down or has no address: the first usable link.
        assert_eq!(
            pick(None, Some("eth0")),
            Some(("eth1".into(), "198.51.100.7".parse().unwrap(), Reason::FirstUpLink))
        );
        assert_eq!(pick(None, None).unwrap().0, "eth1");
        assert_eq!(choose(&links[..2], None, None), None, "loopback and a down link: none");
    }

    #[test]
    fn the_url_has_the_listen_port_unless_it_is_80() {
        let ip = "192.0.2.1".parse().unwrap();
        assert_eq!(url_for(ip, "0.0.0.0:8080".parse().unwrap()), "http://192.0.2.1:8080");
        assert_eq!(url_for(ip, "0.0.0.0:80".parse().unwrap()), "http://192.0.2.1");
    }

    #[test]
    fn the_default_route_is_read_from_the_route_table() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     eth1\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                     eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert_eq!(default_route_link(table).as_deref(), Some("eth0"));
        assert_eq!(default_route_link(&table[..table.find("eth0").unwrap()]), None);
        assert_eq!(default_route_link(""), None);
    }

    #[test]
    fn a_public_url_changes_only_when_it_differs() {
        let url = PublicUrl::new("http://a".into());
        assert!(!url.set("http://a".into()));
        assert!(url.set("http://b".into()));
        assert_eq!(*url.get(), "http://b");
    }
}
