//! The outcome of a Cinder sync pass, as plain values: what the database keeps (`sync_status`),
//! the metrics export and the admin page shows.

/// The longest `message` stored, in bytes; longer ones are cut and end with "(truncated)".
pub const SYNC_MESSAGE_LIMIT: usize = 4096;

/// Which process ran a sync pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncRunner {
    /// The background loop of `bootvol serve`.
    Serve,
    /// `bootvol sync`.
    Cli,
}

impl SyncRunner {
    pub fn as_str(&self) -> &'static str {
        match self {
            SyncRunner::Serve => "serve",
            SyncRunner::Cli => "cli",
        }
    }

    pub fn parse(text: &str) -> Option<SyncRunner> {
        match text {
            "serve" => Some(SyncRunner::Serve),
            "cli" => Some(SyncRunner::Cli),
            _ => None,
        }
    }
}

/// How a sync pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncPassOutcome {
    /// Every attached volume was checked and matched.
    Ok,
    /// Every attached volume was checked, and some no longer match what bootvol boots (drift:
    /// counted and listed, for an operator to look at).
    Drift,
    /// The pass went through, but some volumes could not be checked.
    Partial,
    /// The pass stopped early (its error is the message).
    Failed,
}

impl SyncPassOutcome {
    /// Every outcome, in the order the metrics list them.
    pub const ALL: [SyncPassOutcome; 4] = [
        SyncPassOutcome::Ok,
        SyncPassOutcome::Drift,
        SyncPassOutcome::Partial,
        SyncPassOutcome::Failed,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            SyncPassOutcome::Ok => "ok",
            SyncPassOutcome::Drift => "drift",
            SyncPassOutcome::Partial => "partial",
            SyncPassOutcome::Failed => "failed",
        }
    }

    /// The value in `sync_status.outcome`, whose CHECK predates `drift`: a drift pass is stored
    /// as `ok` with its `drifted` count, and read back as `drift`.
    pub fn stored(&self) -> &'static str {
        match self {
            SyncPassOutcome::Drift => "ok",
            other => other.as_str(),
        }
    }

    pub fn parse(text: &str) -> Option<SyncPassOutcome> {
        match text {
            "ok" => Some(SyncPassOutcome::Ok),
            "partial" => Some(SyncPassOutcome::Partial),
            "failed" => Some(SyncPassOutcome::Failed),
            _ => None,
        }
    }
}

/// One finished sync pass, to record. Times are Unix seconds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SyncPass {
    pub ran_by: SyncRunner,
    pub started_at: i64,
    pub finished_at: i64,
    pub outcome: SyncPassOutcome,
    pub checked: i64,
    pub updated: i64,
    pub drifted: i64,
    pub errors: i64,
    /// The drift and error lines (or the error that stopped the pass), one a line; cut to
    /// [`SYNC_MESSAGE_LIMIT`] bytes when stored.
    pub message: String,
}

/// The last recorded sync pass (its fields read through it), and when the last clean one
/// ended. Times are Unix seconds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SyncStatus {
    #[serde(flatten)]
    pub pass: SyncPass,
    /// When the last clean pass (outcome `ok`, no drift) finished (kept across passes that
    /// were not).
    pub last_ok_at: Option<i64>,
}

impl std::ops::Deref for SyncStatus {
    type Target = SyncPass;

    fn deref(&self) -> &SyncPass {
        &self.pass
    }
}
