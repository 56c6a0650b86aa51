//! PostgreSQL's change notifications: one async connection per `serve` that `LISTEN`s on
//! `bootvol_changes` (every transaction that logs a change sends its last `seq` there, see
//! `engine.rs`), says whether the engine is reachable, and reconnects with backoff.
//!
//! A notification only wakes the reader: what changed is read from `change_log` by `seq`. A
//! listener that was away misses the notifications of that time (PostgreSQL never replays
//! them), so after every (re)connection it wakes the reader once, which catches up by `seq`.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use super::engine::PostgresTarget;

/// The channel every change is announced on.
pub const CHANNEL: &str = "bootvol_changes";

/// What the listener reports.
pub trait ListenEvents: Send + Sync {
    /// A change was committed (its `seq`), or the listener (re)connected (`None`): look.
    fn changed(&self, seq: Option<i64>);
    /// Whether the listening connection is up.
    fn connected(&self, up: bool);
}

/// Listens until `shutdown`, reconnecting after 1, 2, 4... up to 10 seconds.
pub async fn listen(
    target: Arc<PostgresTarget>,
    events: Arc<dyn ListenEvents>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_secs(1);
    while !shutdown.is_cancelled() {
        let outcome = match &target.tls {
            Some(tls) => match target.config.connect(tls.clone()).await {
                Ok((client, connection)) => {
                    run(client, connection, &*events, &shutdown, &mut backoff).await
                }
                Err(e) => Err(e),
            },
            None => match target.config.connect(tokio_postgres::NoTls).await {
                Ok((client, connection)) => {
                    run(client, connection, &*events, &shutdown, &mut backoff).await
                }
                Err(e) => Err(e),
            },
        };
        events.connected(false);
        if shutdown.is_cancelled() {
            return;
        }
        match outcome {
            Ok(()) => tracing::warn!(database = %target.shown, "change listener disconnected"),
            Err(e) => {
                tracing::warn!(database = %target.shown, error = %e, retry_s = backoff.as_secs(), "change listener cannot connect")
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Drives one connection: `LISTEN`, then notifications until it ends.
async fn run<S, T>(
    client: tokio_postgres::Client,
    connection: tokio_postgres::Connection<S, T>,
    events: &dyn ListenEvents,
    shutdown: &CancellationToken,
    backoff: &mut Duration,
) -> Result<(), tokio_postgres::Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    let (messages_tx, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let mut driver = std::pin::pin!(drive(connection, messages_tx));
    let statement = format!("LISTEN {CHANNEL}");
    let listen = client.batch_execute(&statement);
    tokio::select! {
        done = &mut driver => return done,
        listened = listen => listened?,
    }
    *backoff = Duration::from_secs(1);
    events.connected(true);
    events.changed(None);
    // A connection that went quiet is noticed by TCP keepalives (`engine.rs` sets them) and by
    // a query every few seconds.
    let mut probe = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            done = &mut driver => return done,
            Some(message) = messages.recv() => {
                if let tokio_postgres::AsyncMessage::Notification(n) = message
                    && n.channel() == CHANNEL
                {
                    events.changed(n.payload().parse().ok());
                }
            }
            _ = probe.tick() => {
                if !answers_probe(&client, driver.as_mut()).await? {
                    return Ok(());
                }
            }
        }
    }
}

/// The connection's messages, forwarded to `messages` (notifications among them): the future
/// ends when the connection does.
fn drive<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    messages: tokio::sync::mpsc::UnboundedSender<tokio_postgres::AsyncMessage>,
) -> impl Future<Output = Result<(), tokio_postgres::Error>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    std::future::poll_fn(move |cx| {
        loop {
            match connection.poll_message(cx) {
                Poll::Ready(Some(Ok(message))) => {
                    let _ = messages.send(message);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
}

/// Whether the server answers `SELECT 1` within 5 seconds, driving the connection meanwhile;
/// `Ok(false)` when it did not answer in time or the connection ended cleanly.
async fn answers_probe<D>(
    client: &tokio_postgres::Client,
    mut driver: std::pin::Pin<&mut D>,
) -> Result<bool, tokio_postgres::Error>
where
    D: Future<Output = Result<(), tokio_postgres::Error>>,
{
    let ping = client.simple_query("SELECT 1");
    tokio::select! {
        done = &mut driver => done.map(|()| false),
        answered = tokio::time::timeout(Duration::from_secs(5), ping) => match answered {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(false),
        },
    }
}
