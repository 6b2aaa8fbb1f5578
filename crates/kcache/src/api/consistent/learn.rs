//! Waits off the readers' path: what a consistent read leaves running to learn whether, and
//! how fast, its type's cache reaches the upstream's revision (the type's [`Verdict`]).
//!
//! [`Verdict`]: crate::cache::Verdict

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ConsistentReader;
use crate::cache::ResourceCache;
use crate::upstream::RevisionProbe;

impl ConsistentReader<'_> {
    /// Go on waiting, off the reader's path, for the cache to reach `target` (probed at
    /// `probed`), up to [`ConsistentReader::learn_within`]: record the catch-up if it gets
    /// there, or that the type is quiet. One such wait per type at a time; others forward
    /// without one.
    pub(super) fn keep_waiting(&self, target: u64, probed: Instant) {
        if !self.cache.freshness().begin_background(Duration::ZERO) {
            return;
        }
        let (cache, bound) = (self.cache.clone(), self.learn_within());
        self.tasks.spawn(async move {
            let _end = BackgroundWait(cache.clone());
            let remaining = bound.saturating_sub(probed.elapsed());
            learn(&cache, target, probed, remaining).await;
        });
    }

    /// Measure, off the readers' path, whether and how fast the cache reaches the upstream's
    /// revision (`probe`: the type's): one probe and a wait up to
    /// [`ConsistentReader::learn_within`], at most once per [`SAMPLE_EVERY`] per type.
    pub(super) fn sample(&self, probe: &Arc<RevisionProbe>) {
        if !self.cache.freshness().begin_background(SAMPLE_EVERY) {
            return;
        }
        let (cache, probe, bound) = (self.cache.clone(), probe.clone(), self.learn_within());
        self.tasks.spawn(async move {
            let _end = BackgroundWait(cache.clone());
            let Ok(target) = probe.target().await else {
                return;
            };
            learn(&cache, target, Instant::now(), bound).await;
        });
    }

    /// How long a wait off the readers' path goes on before it finds the type quiet:
    /// [`LEARN_WITHIN`], at most `consistentReads.waitSeconds`.
    fn learn_within(&self) -> Duration {
        LEARN_WITHIN.min(self.config.wait)
    }
}

/// Wait up to `bound` for `cache` to reach `target`, probed at `probed`, and record what it
/// found: the catch-up, or that the type is quiet. Not quiet when the reflector lost the
/// upstream meanwhile: then no event could arrive, whatever the type does.
async fn learn(cache: &ResourceCache, target: u64, probed: Instant, bound: Duration) {
    match cache.wait_for_rv(target, bound).await {
        Ok(()) => cache.freshness().reached(probed.elapsed()),
        Err(_) if cache.contact().reachable() => cache.freshness().missed(cache.object_events()),
        Err(_) => {}
    }
}

/// Ends a background wait when its task does, however it ends.
struct BackgroundWait(Arc<ResourceCache>);

impl Drop for BackgroundWait {
    fn drop(&mut self) {
        self.0.freshness().end_background();
    }
}

/// A wait off the readers' path that has not seen the probed revision within this finds the
/// type quiet. A watch that lags more than this is slower than forwarding any read, so taking
/// such a type for quiet costs nothing (its events, when they come, end the verdict), and a
/// type's second read a second or more after its first already knows.
const LEARN_WITHIN: Duration = Duration::from_secs(1);

/// Background measurements of a type whose reads are forwarded without waiting start at most
/// this often: a watch that stopped lagging is noticed within about a second, for one probe a
/// second at most.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
