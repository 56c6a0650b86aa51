//! [`AtomicHistogram`]: a histogram in atomics (observing takes no lock), with the bucket
//! bounds of the boot HTTP, TFTP and snapshot rebuild timings, encoded at scrape time.
//!
//! It must not know which metric a histogram belongs to, nor the other metrics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use prometheus_client::encoding::{MetricEncoder, NoLabelSet};

/// A histogram in atomics: fixed bucket bounds, a count, and the sum in nanoseconds.
#[derive(Debug)]
pub struct AtomicHistogram {
    bounds: &'static [f64],
    /// One per bound, then the overflow (`+Inf`) bucket; not cumulative.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl AtomicHistogram {
    pub(super) fn new(bounds: &'static [f64]) -> AtomicHistogram {
        AtomicHistogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let slot = self.bounds.iter().position(|b| seconds <= *b).unwrap_or(self.bounds.len());
        self.buckets[slot].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum_nanos.fetch_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    pub(super) fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets.iter().map(|b| b.load(Relaxed)))
            .collect();
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, self.count.load(Relaxed), &buckets, None)
    }
}

pub(super) const HTTP_BOUNDS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0];
pub(super) const TFTP_BOUNDS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 120.0];
pub(super) const REBUILD_BOUNDS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0];
