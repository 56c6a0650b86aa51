//! bootvol's values and its pure boot decision: the layer every other crate stands on.
//!
//! - [`model`]: plain data with Ironic's field names, the value parsers (MAC, IQN, WWN...) and
//!   value checks (iPXE script values, file names, NFS exports, URLs), node capabilities.
//! - [`secrets`]: which fields are secrets, masking them. [`timefmt`]: ISO 8601 to and from
//!   Unix seconds.
//! - [`config`]: the TOML configuration, read once and passed down. [`inventory`]: inventory
//!   files in and out and the specs the front ends parse into; where operator input is checked.
//! - [`deploy`]: the deploy ramdisk's caller and report, as the boot edge hands them over.
//! - [`boot`]: the scenario decision, the boot context, iPXE rendering and the snapshot of every
//!   node's script; [`boot_window`]: when a secret script may go out, and to whom (pure);
//!   [`files`]: confining client paths to a served folder; [`recent`]: the ring of recent boots.
//! - [`probe`]: the probe of a node's boot target as plain values: what to probe, the AoE and
//!   ONC RPC codecs (sans-io), what a probe found.
//!
//! It must not know: SQL, sockets beyond opening a served file, HTTP, Cinder, BMCs, passwords.

pub mod boot;
pub mod boot_window;
pub mod config;
pub mod deploy;
pub mod files;
pub mod inventory;
pub mod model;
pub mod probe;
pub mod recent;
pub mod secrets;
pub mod timefmt;
