//! The iSCSI probe: ONE function, [`probe`], from the node's iSCSI target as its script logs in
//! (the portals that carry the IQN and LUN, the initiator name the script sets, or iPXE's
//! default form of it, and the CHAP and mutual CHAP pairs) to the login's outcome. The login
//! itself (Login, then for a LUN check REPORT LUNS/READ CAPACITY, then Logout; never a write)
//! is `bootvol-iscsi`'s; this only builds its request and reads its answer. Secrets go into the
//! request only, never into the outcome's text.

use std::time::Duration;

use bootvol_core::probe::Status;
use bootvol_core::probe::plan::Iscsi;

/// What the probe says until `bootvol-iscsi` is wired in (at merge).
pub const NOT_WIRED: &str = "iSCSI probe not wired yet";

/// The login probe of `target`, within `timeout`.
pub(super) async fn probe(target: &Iscsi, timeout: Duration) -> (Status, String) {
    // Wired at merge, with `bootvol-iscsi` in Cargo.toml:
    //
    // let credentials = |c: &Option<bootvol_core::probe::plan::Chap>| {
    //     c.as_ref().map(|c| bootvol_iscsi::Credentials { user: c.user.clone(), secret: c.secret.clone() })
    // };
    // let request = bootvol_iscsi::ProbeRequest {
    //     portals: target.portals.clone(),
    //     target_iqn: target.target_iqn.clone(),
    //     lun: target.lun,
    //     initiator_iqn: target.initiator_iqn.clone(),
    //     chap: credentials(&target.chap),
    //     mutual: credentials(&target.mutual),
    //     timeout,
    // };
    // let outcome = bootvol_iscsi::probe(&request).await;
    // return (if outcome.is_ok() { Status::Ok } else { Status::Failed }, outcome.to_string());
    let _ = (target, timeout);
    (Status::NotProbeable, NOT_WIRED.to_owned())
}
