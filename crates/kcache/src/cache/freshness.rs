//! What consistent reads have learnt about how fresh one type's cache can be proven.
//!
//! A consistent read is answered from the cache only once the cache has reached the revision
//! the upstream reports as current (see `upstream::RevisionProbe` and `api::App::consistent`).
//! Two things learnt from earlier reads make later ones cheaper, and live here:
//!
//! - the **unprovable memo**: the cache RV at which a read could not be proven fresh within
//!   its wait. Until the RV moves, nothing of the type has happened since, so the next read
//!   cannot be proven either and goes upstream at once, without a probe or a wait;
//! - the **catch-up estimate**: how long the cache takes to reach a revision the upstream has
//!   just reported (the lag of the watch that feeds it), with the bookkeeping that keeps it
//!   measured while reads are being forwarded.
//!
//! Everything is lock-free: readers update it concurrently and an estimate may lose a sample
//! to a race, never its meaning.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::latency::LatencyEstimate;

/// The freshness record of one cache.
#[derive(Debug)]
pub struct Freshness {
    /// One more than the cache RV at which a consistent read could not be proven fresh within
    /// the wait (0: never).
    unprovable_at: AtomicU64,
    /// How long the cache takes to reach a revision the upstream has just reported.
    catch_up: LatencyEstimate,
    /// When a read last waited to measure `catch_up` while reads were being forwarded
    /// (microseconds since `created`; 0: never).
    catch_up_sampled: AtomicU64,
    /// Whether a consistent read has waited for this cache yet.
    catch_up_tried: AtomicBool,
    created: Instant,
}

impl Default for Freshness {
    fn default() -> Self {
        Freshness {
            unprovable_at: AtomicU64::new(0),
            catch_up: LatencyEstimate::default(),
            catch_up_sampled: AtomicU64::new(0),
            catch_up_tried: AtomicBool::new(false),
            created: Instant::now(),
        }
    }
}

impl Freshness {
    /// Remember that a consistent read could not be proven fresh with the cache at `rv`.
    pub fn mark_unprovable(&self, rv: u64) {
        self.unprovable_at
            .store(rv.saturating_add(1), Ordering::Relaxed);
    }

    /// Whether a consistent read was found unprovable with the cache at `rv` (the cache's RV
    /// now): nothing of the type has happened since, so it cannot be proven now either.
    pub fn is_unprovable_at(&self, rv: u64) -> bool {
        self.unprovable_at.load(Ordering::Relaxed) == rv.saturating_add(1)
    }

    /// Take one measurement of how long the cache took to reach a revision after it was
    /// reported.
    pub fn record_catch_up(&self, took: Duration) {
        self.catch_up.record(took);
    }

    /// The estimated time the cache takes to reach a revision the upstream just reported
    /// (None before any consistent read waited).
    pub fn expected_catch_up(&self) -> Option<Duration> {
        self.catch_up.get()
    }

    /// Whether a read should wait anyway, to measure the catch-up again, although waiting
    /// looks slower than forwarding: true for one caller per `every`. Without it, a type whose
    /// reads are all forwarded would never notice that its watch stopped lagging.
    pub fn take_catch_up_sample(&self, every: Duration) -> bool {
        let now = u64::try_from(self.created.elapsed().as_micros()).unwrap_or(u64::MAX);
        let every = u64::try_from(every.as_micros()).unwrap_or(u64::MAX);
        let last = self.catch_up_sampled.load(Ordering::Relaxed);
        now.saturating_sub(last) >= every
            && self
                .catch_up_sampled
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// True for the first consistent read that waits for this cache, false after: that one
    /// waits the full time, so a type's catch-up is measured before shorter waits are judged
    /// by it.
    pub fn first_catch_up_try(&self) -> bool {
        !self.catch_up_tried.swap(true, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_holds_until_the_rv_moves() {
        let f = Freshness::default();
        assert!(!f.is_unprovable_at(0), "never marked");
        f.mark_unprovable(7);
        assert!(f.is_unprovable_at(7));
        assert!(!f.is_unprovable_at(8), "the RV moved");
    }

    #[test]
    fn one_sample_per_period_and_one_first_try() {
        let f = Freshness::default();
        assert!(f.first_catch_up_try());
        assert!(!f.first_catch_up_try());
        assert!(f.take_catch_up_sample(Duration::ZERO));
        assert!(!f.take_catch_up_sample(Duration::from_secs(3600)));
    }
}
