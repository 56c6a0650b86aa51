//! bootvol's process plumbing, shared by the boot edge and the control plane.
//!
//! - [`services`]: background work as named, tracked services, drained at shutdown.
//! - [`liveness`]: whether `serve`'s loops answer, and `sd_notify` (readiness, the watchdog).
//! - [`logging`]: the log line and its non-blocking writer.
//! - [`metrics`]: what the boot path and the BMC calls count, in atomics; OpenMetrics at scrape
//!   time, with what only the database knows read through [`metrics::SyncSource`].
//! - [`public_url`]: `[http] public_url = "auto"`, the boot URL from this box's address.
//!
//! It must not know: SQL, HTTP routes, Cinder, BMC protocols, passwords.

pub mod liveness;
pub mod logging;
pub mod metrics;
pub mod public_url;
pub mod services;
