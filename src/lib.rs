//! bootvol: a boot-from-volume appliance for bare-metal machines.
//!
//! Nodes chainload iPXE and get, per MAC, a script that boots their remote volume (iSCSI, FCoE,
//! AoE, HTTP SAN, an NFS root, or the LUN behind an HBA), rendered from a local SQLite database.
//!
//! # Layout
//!
//! - [`model`]: plain data with Ironic's field names, the value parsers (MAC, IQN, WWN...) and
//!   checks (iPXE script values, file names, NFS exports, URLs), and capabilities.
//! - [`config`]: the TOML configuration, read once and passed down.
//! - [`inventory`]: inventory files in and out; the edge where operator input is validated.
//! - [`secrets`]: which fields are secrets, and masking them.
//! - [`db`]: the repository over SQLite; the only module that knows SQL.
//! - [`nodes`]: the node service, the typed core both front ends write nodes through.
//! - [`boot`]: scenario decision, boot context and iPXE rendering; pure.
//! - [`api`]: the Ironic-compatible REST API (`bootvol serve`); the only module that knows its JSON.
//! - [`cli`]: the `bootvol` commands, wiring the above together.

pub mod admin;
pub mod api;
pub mod app;
pub mod boot;
pub mod cinder;
pub mod cli;
pub mod conductor;
pub mod config;
pub mod db;
pub mod files;
pub mod http;
pub mod inventory;
pub mod model;
pub mod nodes;
pub mod power;
pub mod recent;
pub mod secrets;
pub mod storage;
pub mod tftp;
pub mod tftp_files;
pub mod timefmt;
