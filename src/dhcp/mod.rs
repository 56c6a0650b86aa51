//! The built-in ProxyDHCP (`[dhcp] mode = "proxy"`): answers netboot clients with where to boot
//! from, next to the site's DHCP server, which keeps handing out the addresses.
//!
//! - [`packet`]: the DHCPv4 codec, bytes in and values out (a total parser).
//! - [`proxy`]: the decision, sans-io: a request and plain facts in, the reply and its
//!   destination out; the reply rate limits.

pub mod packet;
pub mod proxy;
