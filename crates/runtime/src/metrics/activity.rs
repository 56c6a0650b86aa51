//! The admin page's boot activity view: boots and failures per minute over the last hour
//! ([`Minute`]), from differences of the totals sampled from the counters.
//!
//! It must not know the counters themselves: [`super::Metrics`] hands it the totals.

use std::collections::VecDeque;

/// Boots and failures in one minute of the admin page's boot activity view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Minute {
    /// Unix seconds of the minute's start.
    pub start: i64,
    /// Nodes' own boot scripts served (over HTTP or TFTP).
    pub boots: u64,
    /// Scripts refused to a client that is not their node, TFTP transfers that timed out or
    /// failed on the socket, and 5xx answers of the boot HTTP listener.
    pub failures: u64,
}

/// How many minutes the activity view keeps.
pub const ACTIVITY_MINUTES: usize = 60;

/// Per-minute differences of the boot and failure totals: the minutes closed so far (oldest
/// first) and the totals when the open minute began.
#[derive(Debug)]
pub(super) struct Activity {
    closed: VecDeque<Minute>,
    open_start: i64,
    base: (u64, u64),
}

fn minute_of(unix: i64) -> i64 {
    unix - unix.rem_euclid(60)
}

impl Activity {
    pub(super) fn new(now: i64, totals: (u64, u64)) -> Activity {
        Activity { closed: VecDeque::new(), open_start: minute_of(now), base: totals }
    }

    /// Closes the open minute once `now` is past it: what was counted since it began is its
    /// share (a sample a few seconds late gives it those seconds too); minutes with no sample
    /// at all count nothing.
    pub(super) fn advance(&mut self, now: i64, totals: (u64, u64)) {
        let minute = minute_of(now);
        if minute <= self.open_start {
            return;
        }
        self.closed.push_back(Minute {
            start: self.open_start,
            boots: totals.0.saturating_sub(self.base.0),
            failures: totals.1.saturating_sub(self.base.1),
        });
        let skipped = (minute - self.open_start) / 60 - 1;
        if skipped >= ACTIVITY_MINUTES as i64 {
            self.closed.clear();
        } else {
            for k in 1..=skipped {
                self.closed
                    .push_back(Minute { start: self.open_start + 60 * k, ..Minute::default() });
            }
        }
        while self.closed.len() >= ACTIVITY_MINUTES {
            self.closed.pop_front();
        }
        self.open_start = minute;
        self.base = totals;
    }

    /// The last [`ACTIVITY_MINUTES`] minutes, oldest first, ending with the open one (counted
    /// up to `totals`).
    pub(super) fn last_hour(&self, totals: (u64, u64)) -> Vec<Minute> {
        let first = self.open_start - 60 * (ACTIVITY_MINUTES as i64 - 1);
        let mut minutes: Vec<Minute> = (0..ACTIVITY_MINUTES as i64 - 1)
            .map(|k| {
                let start = first + 60 * k;
                self.closed
                    .iter()
                    .find(|m| m.start == start)
                    .copied()
                    .unwrap_or(Minute { start, ..Minute::default() })
            })
            .collect();
        minutes.push(Minute {
            start: self.open_start,
            boots: totals.0.saturating_sub(self.base.0),
            failures: totals.1.saturating_sub(self.base.1),
        });
        minutes
    }
}
