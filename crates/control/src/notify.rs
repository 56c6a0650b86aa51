//! Webhook delivery of events. Events are written to SQLite by whoever emits them (an outbox);
//! `serve` delivers them in the background, signed with HMAC-SHA256, retried with backoff, so
//! a slow or absent receiver never blocks an action.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use bootvol_core::timefmt::now_unix;
use bootvol_db::Event;
use bootvol_db::SharedDb;

/// The signature header: `sha256=<hex of HMAC-SHA256(secret, body)>`.
pub const SIGNATURE_HEADER: &str = "X-Bootvol-Signature";

/// Where and how events are delivered.
#[derive(Clone)]
pub struct Webhook {
    pub url: String,
    pub secret: String,
    pub max_attempts: i64,
    pub timeout: Duration,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

/// `sha256=<hex>` of the body under the secret.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    format!("sha256={}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The JSON body of one event, Ironic-notification-like.
pub fn body(event: &Event) -> Vec<u8> {
    json!({"event_type": event.event_type, "priority": event.level, "timestamp": event.created_at,
        "publisher_id": "bootvol", "id": event.id, "node_uuid": event.node_uuid, "payload": event.payload})
    .to_string()
    .into_bytes()
}

/// The webhook's sender: the hook and the HTTP client it posts with.
#[derive(Debug, Clone)]
pub struct Notifier {
    db: SharedDb,
    client: reqwest::Client,
    hook: Webhook,
}

impl Notifier {
    pub fn new(db: SharedDb, hook: Webhook) -> Notifier {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Notifier { db, client: reqwest::Client::new(), hook }
    }

    /// Delivers the events that are due, once.
    pub async fn deliver_due(&self) -> usize {
        deliver_due(&self.db, &self.client, &self.hook).await
    }
}

/// Delivers due events once; returns how many were delivered. Failures are rescheduled with
/// exponential backoff (2 s, 4 s... capped at 10 min) and dropped after `max_attempts`.
async fn deliver_due(db: &SharedDb, client: &reqwest::Client, hook: &Webhook) -> usize {
    let now = now_unix() as i64;
    let due = match db.run(move |db| db.events_to_deliver(now, 50)).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(error = %e, "reading events to deliver");
            return 0;
        }
    };
    let mut delivered = 0;
    for (event, attempts) in due {
        let body = body(&event);
        let sent = client
            .post(&hook.url)
            .timeout(hook.timeout)
            .header("Content-Type", "application/json")
            .header(SIGNATURE_HEADER, sign(&hook.secret, &body))
            .header("X-Bootvol-Event", &event.event_type)
            .body(body)
            .send()
            .await;
        let ok = matches!(&sent, Ok(r) if r.status().is_success());
        let attempts = attempts + 1;
        let (delivery, next) = if ok {
            delivered += 1;
            ("delivered", 0)
        } else if attempts >= hook.max_attempts {
            tracing::warn!(event = event.id, attempts, "webhook delivery given up");
            ("failed", 0)
        } else {
            ("pending", now + (2_i64.pow(attempts.min(20) as u32)).min(600))
        };
        if let Err(e) =
            db.run(move |db| db.mark_event_delivery(event.id, delivery, attempts, next)).await
        {
            tracing::warn!(error = %e, "recording a webhook delivery");
        }
    }
    delivered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
