//! A running estimate of a latency, shared between tasks without a lock.
//!
//! Consistent reads choose between waiting for the cache and forwarding to the upstream by
//! comparing two such estimates (see `api::consistent`): how long the upstream takes to
//! answer a one-object read, and how long a cache takes to catch up with a revision it has
//! just been told about. Both change with load and with the upstream replica a watch happens
//! to be on, so the estimate follows recent samples rather than averaging all of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// No sample yet.
const UNKNOWN: u64 = u64::MAX;

/// An exponentially weighted moving average of durations, in microseconds.
///
/// Each sample moves the estimate a quarter of the way towards it: after four samples of a new
/// level, about 70% of the change shows, so a watch that starts lagging (or stops) changes the
/// decision within a handful of reads, while one outlier moves it only a quarter. Updates from
/// concurrent readers may overwrite each other; an estimate loses a sample then, never its
/// meaning.
#[derive(Debug)]
pub(crate) struct LatencyEstimate {
    micros: AtomicU64,
}

impl Default for LatencyEstimate {
    fn default() -> Self {
        LatencyEstimate {
            micros: AtomicU64::new(UNKNOWN),
        }
    }
}

impl LatencyEstimate {
    /// The estimate; None before the first sample.
    pub(crate) fn get(&self) -> Option<Duration> {
        match self.micros.load(Ordering::Relaxed) {
            UNKNOWN => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Take one more sample into the estimate (the first one is taken as it is).
    pub(crate) fn record(&self, sample: Duration) {
        // Saturating: a sample of ~584,000 years is still below UNKNOWN.
        let sample = u64::try_from(sample.as_micros())
            .unwrap_or(UNKNOWN - 1)
            .min(UNKNOWN - 1);
        let next = match self.micros.load(Ordering::Relaxed) {
            UNKNOWN => sample,
            old if sample >= old => old + (sample - old) / 4,
            old => old - (old - sample) / 4,
        };
        self.micros.store(next, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_recent_samples() {
        let e = LatencyEstimate::default();
        assert_eq!(e.get(), None);
        e.record(Duration::from_millis(100));
        assert_eq!(e.get(), Some(Duration::from_millis(100)));
        // One outlier moves it a quarter of the way.
        e.record(Duration::from_millis(500));
        assert_eq!(e.get(), Some(Duration::from_millis(200)));
        // A new level shows after a handful of samples.
        for _ in 0..12 {
            e.record(Duration::ZERO);
        }
        assert!(e.get().unwrap() < Duration::from_millis(10));
    }

    #[test]
    fn extreme_samples_saturate() {
        let e = LatencyEstimate::default();
        e.record(Duration::MAX);
        assert!(e.get().is_some());
        e.record(Duration::MAX);
        assert!(e.get().is_some());
    }
}
