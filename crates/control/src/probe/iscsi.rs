//! The iSCSI probe: ONE function, [`probe`], from the node's iSCSI target as its script logs in
//! (the portals that carry the IQN and LUN, the initiator name the script sets, or iPXE's
//! default form of it, and the CHAP and mutual CHAP pairs) to the login's outcome. The login
//! itself (Login, then REPORT LUNS and READ CAPACITY for the LUN, then Logout; never a write)
//! is `bootvol-iscsi`'s; this only builds its request and reads its answer. Secrets go into the
//! request only, never into the outcome's text.

use std::time::Duration;

use bootvol_core::probe::Status;
use bootvol_core::probe::plan::{Chap, Iscsi};

/// The login probe of `target`, each connect, read and write within `timeout`.
pub(super) async fn probe(target: &Iscsi, timeout: Duration) -> (Status, String) {
    let credentials = |c: &Option<Chap>| {
        c.as_ref()
            .map(|c| bootvol_iscsi::Credentials { user: c.user.clone(), secret: c.secret.clone() })
    };
    let request = bootvol_iscsi::ProbeRequest {
        portals: target.portals.clone(),
        target_iqn: target.target_iqn.clone(),
        lun: target.lun,
        initiator_iqn: target.initiator_iqn.clone(),
        chap: credentials(&target.chap),
        mutual: credentials(&target.mutual),
        timeout,
    };
    let outcome = bootvol_iscsi::probe(&request).await;
    let status = match outcome {
        bootvol_iscsi::ProbeOutcome::Ok { .. } => Status::Ok,
        bootvol_iscsi::ProbeOutcome::Invalid(_) => Status::NotProbeable,
        _ => Status::Failed,
    };
    (status, outcome.to_string())
}

/// How long a whole probe of `target` may take: every portal's session in turn, and a second.
pub(super) fn limit(target: &Iscsi, timeout: Duration) -> Duration {
    let sessions = bootvol_iscsi::SESSION_TIMEOUTS * target.portals.len().max(1) as u32;
    timeout * sessions + Duration::from_secs(1)
}
