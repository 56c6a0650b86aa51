//! bootvol's boot edge: everything a booting node talks to.
//!
//! - [`http`]: the boot HTTP listener (scripts from the snapshot, `/files/`, `/ipxe/`, the deploy
//!   ramdisk's endpoints through [`http::DeployBackend`]) and the accept loop both HTTP
//!   listeners use.
//! - [`tftp_files`]: what the TFTP listener serves (the server is `bootvol_tftp`).
//! - [`dhcp`]: the ProxyDHCP, a sans-io codec and decision with its UDP sockets.
//! - [`script_access`]: secrets only to their node, once per boot window; refusals reported
//!   through [`script_access::EventSink`]. [`neighbour`]: the kernel's neighbour table;
//!   [`segment`]: bootvol's own ARP and Neighbour Solicitation, which the table's poisoning
//!   cannot answer for the node.
//! - [`secure_boot`]: the EFI binaries of the TFTP root signed with `[secure_boot]`'s key, for
//!   TFTP and HTTP `/ipxe/` alike.
//! - [`snapshot`]: the boot snapshot's watcher, reading the store through
//!   [`snapshot::SnapshotSource`].
//!
//! It must not know (and cannot reach: no `rusqlite`, `postgres`, `reqwest` or `bcrypt` in its
//! dependency tree): SQL, Cinder, BMCs, password checks. What it needs of the control plane it
//! asks through the traits it defines.

pub mod dhcp;
pub mod http;
pub mod neighbour;
pub mod script_access;
pub mod secure_boot;
pub mod segment;
pub mod snapshot;
pub mod tftp_files;
