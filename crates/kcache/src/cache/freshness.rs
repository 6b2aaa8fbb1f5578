//! What consistent reads have learnt about proving one type's cache fresh, and about what
//! the upstream takes to answer the type's reads itself.
//!
//! A consistent read is answered from the cache only once the cache has reached the revision
//! the upstream reports as current (see `upstream::RevisionProbe` and `api::consistent`).
//! Whether waiting for that is worth it depends on things only earlier waits tell, kept here:
//!
//! - the **verdict** of the last wait ([`Verdict`]): it reached the probed revision (the type's
//!   cache keeps up), or it ran out because the revision had moved on with other types' writes
//!   and nothing of this type was on its way (the type is *quiet*). A quiet verdict holds
//!   until the next object event of the type: a bookmark moves the cache's RV but is no news
//!   about the type's objects, so it does not make the next read wait again;
//! - the **catch-up estimate**: how long the cache takes to reach a revision the upstream has
//!   just reported (the lag of the watch that feeds it);
//! - the **forwarded-read estimate**: how long the upstream takes to answer a consistent LIST
//!   of the type, per object, from the reads kcache forwarded. No reader waits longer than its
//!   read would take forwarded;
//! - whether a wait is running **off the readers' path**: a read that stopped waiting goes
//!   upstream, and one background wait per type goes on to learn the verdict;
//! - the **proofs** of the cache out (`api::proof`), which readers that arrive before the
//!   next is sent share (`shared_call`).
//!
//! Readers update it concurrently: estimates are lock-free and may lose a sample to a race,
//! never their meaning; the verdict is one small value behind a mutex.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::latency::LatencyEstimate;
use crate::shared_call::SharedCalls;

/// What the last wait for a type's cache found, as a consistent read decides by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing learnt yet, or the type has had object events since it was found quiet.
    Unknown,
    /// The last wait reached the probed revision: the type's cache keeps up with it.
    Reaches,
    /// The last wait ran out, and the type has had no object event since: waiting again
    /// would only delay the read.
    Quiet,
}

/// What a proof of the cache by the type's metadata list found (`api::proof`), as every
/// reader that waited for it gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proof {
    /// The upstream's state is the cache's: the cache is now at the upstream's revision.
    Proven,
    /// Something of the type changed since the cache's RV: the read goes upstream.
    Changed,
    /// The upstream did not answer the metadata list (an error, or no answer): it can answer
    /// the read itself.
    Failed,
}

/// The last wait's outcome, with what the verdict needs of it.
#[derive(Debug, Clone, Copy)]
enum LastWait {
    None,
    Reached,
    /// Ran out when the cache had seen `events` object events.
    Missed {
        events: u64,
    },
}

/// The freshness record of one cache.
#[derive(Debug)]
pub(crate) struct Freshness {
    last: Mutex<LastWait>,
    /// How long the cache takes to reach a revision the upstream has just reported.
    catch_up: LatencyEstimate,
    /// What the upstream takes per 1,000 objects of a forwarded consistent LIST, beyond one
    /// round trip (µs resolution per 1,000 is ns per object).
    forward_per_thousand: LatencyEstimate,
    /// What the upstream takes per 1,000 objects of the type's metadata list, the proof of a
    /// quiet cache (`api::proof`), beyond one round trip.
    proof_per_thousand: LatencyEstimate,
    /// A wait is running off the readers' path.
    background: AtomicBool,
    /// When a background wait last started (µs since `created`; 0: never).
    background_started: AtomicU64,
    /// When a proof was last tried although its estimate said it would not pay (µs since
    /// `created`; 0: never).
    proof_retried: AtomicU64,
    /// The proofs out, and the readers waiting for the next.
    proofs: SharedCalls<Proof>,
    created: Instant,
}

impl Default for Freshness {
    fn default() -> Self {
        Freshness {
            last: Mutex::new(LastWait::None),
            catch_up: LatencyEstimate::default(),
            forward_per_thousand: LatencyEstimate::default(),
            proof_per_thousand: LatencyEstimate::default(),
            background: AtomicBool::new(false),
            background_started: AtomicU64::new(0),
            proof_retried: AtomicU64::new(0),
            proofs: SharedCalls::default(),
            created: Instant::now(),
        }
    }
}

impl Freshness {
    fn last(&self) -> std::sync::MutexGuard<'_, LastWait> {
        // A single assignment cannot be left half done: a poisoned lock is still usable.
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The verdict for a cache that has now seen `events` object events
    /// (`ResourceCache::object_events`).
    pub(crate) fn verdict(&self, events: u64) -> Verdict {
        match *self.last() {
            LastWait::None => Verdict::Unknown,
            LastWait::Reached => Verdict::Reaches,
            LastWait::Missed { events: then } if then == events => Verdict::Quiet,
            LastWait::Missed { .. } => Verdict::Unknown,
        }
    }

    /// A wait reached the probed revision `took` after the probe answered.
    pub(crate) fn reached(&self, took: Duration) {
        self.catch_up.record(took);
        *self.last() = LastWait::Reached;
    }

    /// A wait ran out with the cache having seen `events` object events.
    pub(crate) fn missed(&self, events: u64) {
        *self.last() = LastWait::Missed { events };
    }

    /// The estimated time the cache takes to reach a revision the upstream just reported
    /// (None before any wait reached one).
    pub(crate) fn expected_catch_up(&self) -> Option<Duration> {
        self.catch_up.get()
    }

    /// A consistent LIST of about `objects` objects was forwarded and took `took` to answer
    /// in full; `round_trip` is the upstream's time for a one-object read (the probe's).
    /// Reads of fewer than [`MEASURED_FROM`] objects are not taken: their time is the round
    /// trip's, whose noise (a v1.34 apiserver's wait for etcd's progress notification, up to
    /// 100 ms) would read as a cost per object many times the real one.
    pub(crate) fn record_forward(&self, objects: usize, took: Duration, round_trip: Duration) {
        if objects >= MEASURED_FROM {
            self.forward_per_thousand
                .record(per_thousand(objects, took, round_trip));
        }
    }

    /// How long the upstream is expected to take to answer a consistent read of `objects`
    /// objects: one round trip, plus what forwarded LISTs of the type took per object (a
    /// round trip alone before any was forwarded).
    pub(crate) fn expected_forward(&self, objects: usize, round_trip: Duration) -> Duration {
        self.measured_forward(objects, round_trip)
            .unwrap_or(round_trip)
    }

    /// [`Freshness::expected_forward`], once a LIST of the type has been forwarded and timed.
    pub(crate) fn measured_forward(
        &self,
        objects: usize,
        round_trip: Duration,
    ) -> Option<Duration> {
        let per_thousand = self.forward_per_thousand.get()?;
        Some(round_trip.saturating_add(scaled(per_thousand, objects)))
    }

    /// A metadata list of the type's `objects` objects took `took` (taken as forwarded reads
    /// are, see [`Freshness::record_forward`]).
    pub(crate) fn record_proof(&self, objects: usize, took: Duration, round_trip: Duration) {
        if objects >= MEASURED_FROM {
            self.proof_per_thousand
                .record(per_thousand(objects, took, round_trip));
        }
    }

    /// How long a metadata list of the type's `objects` objects is expected to take: as
    /// measured, or a [`PROOF_SHARE`]th of a forwarded list's time per object before any was.
    /// None before either was measured.
    pub(crate) fn expected_proof(&self, objects: usize, round_trip: Duration) -> Option<Duration> {
        let per_thousand = self
            .proof_per_thousand
            .get()
            .or_else(|| Some(self.forward_per_thousand.get()? / PROOF_SHARE))?;
        Some(round_trip.saturating_add(scaled(per_thousand, objects)))
    }

    /// Start a wait off the readers' path, unless one is running or one started less than
    /// `every` ago. True: the caller owns it and calls [`Freshness::end_background`] when it
    /// is over.
    pub(crate) fn begin_background(&self, every: Duration) -> bool {
        if !self.due(self.background_started.load(Ordering::Relaxed), every) {
            return false;
        }
        if self.background.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.background_started
            .store(self.now_micros(), Ordering::Relaxed);
        true
    }

    /// Whether a proof whose estimate says it would not pay should be tried anyway: true for
    /// one caller per `every`. One slow proof (a cold upstream, a busy moment) must not rule
    /// proofs out for good, and only a proof tried measures proofs again.
    pub(crate) fn retry_proof(&self, every: Duration) -> bool {
        let then = self.proof_retried.load(Ordering::Relaxed);
        self.due(then, every)
            && self
                .proof_retried
                .compare_exchange(
                    then,
                    self.now_micros(),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// µs since `created`, never 0 (0 in a time field means "never").
    fn now_micros(&self) -> u64 {
        u64::try_from(self.created.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Whether `every` has passed since `then` (µs since `created`; 0: never).
    fn due(&self, then: u64, every: Duration) -> bool {
        let every = u64::try_from(every.as_micros()).unwrap_or(u64::MAX);
        then == 0 || self.now_micros().saturating_sub(then) >= every
    }

    /// The proofs of the cache out, which a reader joins (see `api::proof`).
    pub(crate) fn proofs(&self) -> &SharedCalls<Proof> {
        &self.proofs
    }

    /// Whether a wait is running off the readers' path.
    pub(crate) fn is_learning(&self) -> bool {
        self.background.load(Ordering::Acquire)
    }

    /// The background wait begun with [`Freshness::begin_background`] is over.
    pub(crate) fn end_background(&self) {
        self.background.store(false, Ordering::Release);
    }
}

/// The fewest objects a read must have for its time to be taken as a cost per object.
pub(crate) const MEASURED_FROM: usize = 100;

/// How many metadata lists of a type's objects are taken to cost what a forwarded LIST of
/// the same objects does, until both were measured: an object's metadata is part of it, and
/// a fraction of its bytes (2.8 MB against 19 MB for 10k ConfigMaps, 23 against 87 ms,
/// measured 2026-11-27 on v1.34).
pub(crate) const PROOF_SHARE: u32 = 4;

/// `took` beyond `round_trip`, per 1,000 of `objects`.
fn per_thousand(objects: usize, took: Duration, round_trip: Duration) -> Duration {
    let objects = u32::try_from(objects.max(1)).unwrap_or(u32::MAX);
    took.saturating_sub(round_trip).saturating_mul(1000) / objects
}

/// A time per 1,000 objects, for `objects`.
fn scaled(per_thousand: Duration, objects: usize) -> Duration {
    per_thousand.saturating_mul(u32::try_from(objects).unwrap_or(u32::MAX)) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_holds_until_an_object_event() {
        let f = Freshness::default();
        assert_eq!(f.verdict(0), Verdict::Unknown, "nothing learnt");
        f.missed(7);
        assert_eq!(f.verdict(7), Verdict::Quiet);
        assert_eq!(f.verdict(8), Verdict::Unknown, "an object event since");
        f.reached(Duration::from_millis(3));
        assert_eq!(f.verdict(8), Verdict::Reaches);
        assert_eq!(f.expected_catch_up(), Some(Duration::from_millis(3)));
    }

    #[test]
    fn forwarded_reads_scale_with_their_size() {
        let f = Freshness::default();
        let rtt = Duration::from_millis(2);
        assert_eq!(
            f.expected_forward(10_000, rtt),
            rtt,
            "a round trip before any"
        );
        f.record_forward(10_000, Duration::from_millis(262), rtt);
        assert_eq!(f.expected_forward(10_000, rtt), Duration::from_millis(262));
        assert_eq!(f.expected_forward(0, rtt), rtt);
        f.record_forward(3, Duration::from_millis(100), rtt);
        assert_eq!(
            f.expected_forward(10_000, rtt),
            Duration::from_millis(262),
            "a small read's time is its round trip's, not a cost per object"
        );
    }

    #[test]
    fn a_proof_is_guessed_from_forwarded_reads_until_measured() {
        let f = Freshness::default();
        let rtt = Duration::from_millis(2);
        assert_eq!(f.expected_proof(10_000, rtt), None, "nothing measured");
        f.record_forward(10_000, Duration::from_millis(82), rtt);
        assert_eq!(
            f.expected_proof(10_000, rtt),
            Some(Duration::from_millis(22))
        );
        f.record_proof(10_000, Duration::from_millis(12), rtt);
        assert_eq!(
            f.expected_proof(10_000, rtt),
            Some(Duration::from_millis(12))
        );
    }

    #[test]
    fn one_background_wait_at_a_time() {
        let f = Freshness::default();
        assert!(f.begin_background(Duration::ZERO));
        assert!(!f.begin_background(Duration::ZERO), "one is running");
        f.end_background();
        assert!(f.begin_background(Duration::ZERO));
        f.end_background();
        assert!(
            !f.begin_background(Duration::from_secs(3600)),
            "one started less than an hour ago"
        );
        assert!(f.retry_proof(Duration::from_secs(3600)), "never retried");
        assert!(!f.retry_proof(Duration::from_secs(3600)));
    }
}
