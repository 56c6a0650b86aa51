//! bootvol: a boot-from-volume appliance for bare-metal machines.
//!
//! Nodes chainload iPXE and get, per MAC, a script that boots their remote volume (iSCSI, FCoE,
//! AoE, HTTP SAN, an NFS root, or the LUN behind an HBA), rendered from a local SQLite database.
//!
//! # Layout
//!
//! Every module, from plain values out to the edges (ARCHITECTURE.md's code map says what each
//! must not know):
//!
//! - Values: [`model`] (plain data with Ironic's field names, the value parsers: MAC, IQN,
//!   WWN..., the value checks: iPXE script values, file names, NFS exports, URLs, and node
//!   capabilities); [`secrets`] (which fields are secrets, and masking them); [`timefmt`]
//!   (ISO 8601 timestamps to and from Unix seconds).
//! - Input: [`config`] (the TOML configuration, read once and passed down); [`inventory`]
//!   (inventory files in and out; the edge where operator input is validated).
//! - Storage of record: [`db`] (the repository over SQLite; the only module that knows SQL);
//!   [`nodes`] (the node service: the typed core both front ends write nodes through).
//! - The boot path: [`boot`] (scenario decision, boot context and iPXE rendering, pure; the
//!   snapshot of every node's script); [`files`] (confining client-supplied paths to a served
//!   folder); [`recent`] (the ring of recent boot requests); [`neighbour`] (the kernel's
//!   neighbour table, kept from rtnetlink's notifications: a client's MAC); [`boot_window`]
//!   (when a node's secret script may go out, and who claimed it: pure); [`script_access`]
//!   (secrets only to their node, once per boot: the window, the neighbour check, conflicts
//!   and refusals reported); [`http`] (the boot HTTP listener, the deploy
//!   ramdisk's call-back, and `http::listener`, the accept loop with its connection caps and
//!   timeouts that both HTTP listeners use); [`tftp_files`] (what the TFTP listener serves; the
//!   server itself is the `bootvol_tftp` crate, `crates/tftp`); [`metrics`] (what the boot path
//!   counts, in atomics, and readiness; OpenMetrics text at scrape time); [`dhcp`] (the
//!   ProxyDHCP: the DHCPv4 codec and the reply decision, sans-io, and its UDP sockets).
//! - Actions: [`conductor`] (node actions, started through one entry point, one at a time per
//!   node, and events);
//!   [`power`] (the power drivers: fake, Redfish, IPMI); [`storage`] (Ironic's storage interface:
//!   attaching and detaching volumes); [`cinder`] (the Cinder/Keystone REST client).
//! - Front ends: [`api`] (the Ironic-compatible REST API; the only module that knows its JSON);
//!   [`limiter`] (per-address limits on log-ins and failed authentications); [`logging`] (the
//!   log line and its non-blocking writer: one line per boot request, cheaply);
//!   [`admin`] (the local admin web page); [`cli`] (the `bootvol` commands, wiring the above
//!   together); [`app`] (`bootvol serve`: the listeners, the snapshot watcher and background
//!   work, until shutdown); [`services`] (background work as named services, drained at
//!   shutdown); [`liveness`] (whether `serve`'s loops answer, and `sd_notify`: readiness, the
//!   watchdog); [`public_url`] (`[http] public_url = "auto"`: the boot URL from this
//!   box's address, followed as it changes).

pub mod admin;
pub mod api;
pub mod app;
pub mod boot;
pub mod boot_window;
pub mod cinder;
pub mod cli;
pub mod conductor;
pub mod config;
pub mod db;
pub mod dhcp;
pub mod files;
pub mod http;
pub mod inventory;
pub mod limiter;
pub mod liveness;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod neighbour;
pub mod nodes;
pub mod power;
pub mod public_url;
pub mod recent;
pub mod script_access;
pub mod secrets;
pub mod services;
pub mod storage;
pub mod tftp_files;
pub mod timefmt;
