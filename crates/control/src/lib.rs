//! bootvol's control plane: what changes nodes and volumes.
//!
//! - [`nodes`]: the node service, the typed core every front end writes nodes through.
//! - [`conductor`]: node actions through one entry point, one at a time per node; events.
//! - [`storage`]: Ironic's storage interfaces (attach and detach volumes); [`cinder`]: the
//!   Cinder/Keystone REST client; [`power`]: the power drivers (fake, Redfish, IPMI).
//! - [`probe`]: the probe of every node's boot target from the appliance (AoE, NFS root, HTTP
//!   SAN, iSCSI; FCoE and HBA said to be not probeable), each node's last report recorded.
//! - [`services`]: the conductor's, the Cinder sync's and the cluster's background services;
//!   [`notify`]: webhook delivery of events (the one HTTP client outside Cinder and power).
//!
//! It must not know: HTTP routes, Ironic's JSON, HTML, SQL text (it goes through `bootvol_db`).

pub mod cinder;
pub mod conductor;
pub mod nodes;
pub mod notify;
pub mod power;
pub mod probe;
pub mod services;
pub mod storage;
