//! bootvol: a boot-from-volume appliance for bare-metal machines.
//!
//! Nodes chainload iPXE and get, per MAC, a script that boots their remote volume (iSCSI, FCoE,
//! AoE, HTTP SAN, an NFS root, or the LUN behind an HBA), rendered from a local SQLite database.
//!
//! This crate is the top layer: it wires the others (ARCHITECTURE.md draws them):
//! `bootvol_core` (values, config, the pure boot decision and rendering), `bootvol_db` (the
//! repository, the only SQL), `bootvol_runtime` (services, liveness, logging, metrics, the
//! public URL), `bootvol_edge` (what a booting node talks to: boot HTTP, TFTP, ProxyDHCP,
//! script access), `bootvol_control` (the node service, the conductor, storage, Cinder, power).
//!
//! Its own modules are the front ends and the wiring: [`api`] (the Ironic-compatible REST API;
//! the only module that knows its JSON), [`admin`] (the local admin web page), [`limiter`]
//! (limits on password guessing, the bcrypt gate), [`cli`] (the `bootvol` commands), [`app`]
//! (`bootvol serve`: builds the services and wires them until shutdown).

pub mod admin;
pub mod api;
pub mod app;
pub mod cli;
pub mod limiter;
