//! Where a consistent read (resourceVersion unset) is answered: the cache once it has caught
//! up with the upstream, the upstream, or the cache marked unconfirmed while the upstream
//! cannot be reached (docs/semantics.md, "Consistent reads" and "Stale while down").

use std::time::Duration;

use super::{Answer, App};
use crate::cache::ResourceCache;
use crate::error::Report;
use crate::metrics;
use crate::status::ApiError;
use crate::upstream::{collection_path, RevisionProbe};

/// How reads with resourceVersion unset are answered.
#[derive(Debug, Clone)]
pub struct ConsistentReads {
    /// Answer them from the cache once it has caught up with the upstream (else forward all).
    pub from_cache: bool,
    /// How long to wait for the cache to catch up.
    pub wait: Duration,
    /// After the wait: forward to the upstream (true) or answer 504 (false).
    pub fallback: bool,
}

impl Default for ConsistentReads {
    fn default() -> Self {
        ConsistentReads {
            from_cache: true,
            wait: Duration::from_secs(3),
            fallback: true,
        }
    }
}

impl App {
    /// Decide where a consistent read is answered: [`Consistency::Cache`] once the cache has
    /// reached the upstream's revision as of after the read arrived (see [`RevisionProbe`] for
    /// why that is never stale), [`Consistency::Upstream`] when the upstream must answer, and
    /// [`Consistency::Unconfirmed`] only while the upstream cannot be reached at all.
    ///
    /// Never slower than passing the read through, as far as kcache can tell beforehand:
    /// - a type already found unprovable at the RV it is still at is forwarded at once (no
    ///   probe, no wait: nothing of it has happened since);
    /// - a GET whose cache is expected to take longer to catch up than the upstream takes to
    ///   answer (a lagging watch) is forwarded at once: forwarding costs the upstream one
    ///   object, no more than the probe itself;
    /// - a wait is bounded by how long this cache is expected to take to catch up (a few times
    ///   its measured catch-up), not by the full `consistentReads.waitSeconds`: a type whose
    ///   events arrive within milliseconds of a write and that has not reached the revision
    ///   after many times that is quiet, and waiting longer only delays the read. One read per
    ///   second still waits the full time, so a watch that starts lagging is measured again;
    /// - a GET is forwarded at once when the upstream answers consistent lists from its watch
    ///   cache (v1.31 on, [`crate::upstream::UpstreamVersion::consistent_lists_from_watch_cache`]): there the
    ///   probe, a consistent list, waits ~50-100 ms for etcd's progress notification whenever
    ///   the type's last event is older than etcd's revision, while the GET itself is read from
    ///   etcd at once. Proving the cache would cost the upstream a request and the reader a
    ///   wait, to save the upstream a one-object read;
    /// - a probe the upstream answered with an error, or that got no answer in time while the
    ///   reflector still reaches the upstream, forwards the read (one replica's 429, 5xx or
    ///   slowness is not an outage); only an upstream that cannot be reached at all (the
    ///   connection refused or cut, or no answer while the reflector has lost it too) has
    ///   the cache answer unconfirmed.
    pub(super) async fn consistent(
        &self,
        cache: &ResourceCache,
        read: Read,
    ) -> Result<Consistency, ApiError> {
        // A state restored from disk that the reflector has not yet confirmed with the upstream
        // is treated as no state: the read goes upstream, as it would before a first sync (the
        // stale-while-down policy below is for states this kcache has seen current).
        if !self.consistent.from_cache || !cache.is_synced() || cache.is_unconfirmed() {
            return Ok(Consistency::Upstream);
        }
        let Some(probe) = self.probes.get(&collection_path(cache)) else {
            return Ok(Consistency::Upstream);
        };
        let resource = cache.info.resource.clone();
        let outcome = |o: &'static str| {
            self.metrics
                .consistent_reads
                .get_or_create(&metrics::OutcomeLabels {
                    resource: resource.clone(),
                    outcome: o,
                })
                .inc()
        };
        // With `fallback` off the read gets its full wait before the 504 instead, and while the
        // reflector cannot reach the upstream the probe decides (stale while down, below).
        let quick = self.consistent.fallback && cache.contact().reachable();
        if quick && cache.is_unprovable() {
            outcome("forwarded");
            return Ok(Consistency::Upstream);
        }
        if read == Read::Get && quick {
            if self.upstream.version().consistent_lists_from_watch_cache() {
                outcome("forwarded_get");
                return Ok(Consistency::Upstream);
            }
            if waiting_is_slower(cache, probe) {
                outcome("forwarded_lagging");
                return Ok(Consistency::Upstream);
            }
        }
        let started = std::time::Instant::now();
        let target = match probe.target().await {
            Ok(t) => t,
            Err(e) => {
                // The upstream answered (an error status), or gave no answer in time while the
                // reflector still reaches it (one slow replica): it can answer the read itself.
                if e.upstream_answered()
                    .unwrap_or_else(|| cache.contact().reachable())
                {
                    tracing::debug!(resource = %cache.info, error = %Report(&e),
                        "consistency probe failed; forwarding the read");
                    outcome("forwarded_probe_failed");
                    return Ok(Consistency::Upstream);
                }
                // Not reachable at all: forwarding would fail too. Serve what the cache has,
                // marked, unless it is older than the policy allows.
                tracing::debug!(resource = %cache.info, error = %Report(&e), age = ?cache.contact().age(),
                    "upstream unreachable; answering from the cache unconfirmed");
                if let Err(refused) = self.staleness.allow_unconfirmed(cache) {
                    outcome("too_stale");
                    return Err(refused);
                }
                outcome("stale");
                return Ok(Consistency::Unconfirmed);
            }
        };
        let probed = std::time::Instant::now();
        let bound = if quick {
            self.wait_bound(cache, probe)
        } else {
            self.consistent.wait
        };
        let waited = cache.wait_for_rv(target, bound).await;
        // Only a wait that ended is a catch-up: one that ran out says the type cannot reach
        // `P` at all (a quiet type, which the unprovable memo below handles), not how far its
        // watch lags, and counting it would keep the type's GETs forwarded long after.
        if waited.is_ok() {
            let took = probed.elapsed();
            cache.freshness().record_catch_up(took);
            self.catch_up.record(took);
        }
        self.metrics
            .consistent_wait
            .get_or_create(&metrics::ResourceLabels {
                resource: resource.clone(),
            })
            .observe(started.elapsed().as_secs_f64());
        match waited {
            Ok(()) => {
                outcome("cache");
                Ok(Consistency::Cache)
            }
            Err(current) => {
                cache.freshness().mark_unprovable(current);
                if self.consistent.fallback {
                    outcome("forwarded");
                    Ok(Consistency::Upstream)
                } else {
                    outcome("timeout");
                    Err(ApiError::TooLargeResourceVersion {
                        requested: target,
                        current,
                    })
                }
            }
        }
    }

    /// How long a consistent read waits for `cache` to reach the probed revision: a few times
    /// what this type is expected to take (its measured catch-up, plus a little, at most the
    /// full wait; the full wait for one read per second, to measure a watch that started
    /// lagging). A type that has not measured its own: the full wait for its first read, then
    /// a few times any type's catch-up, else the probe's round trip.
    fn wait_bound(&self, cache: &ResourceCache, probe: &RevisionProbe) -> Duration {
        let full = self.consistent.wait;
        let short = |expected: Duration| {
            expected
                .saturating_mul(CATCH_UP_BOUND_FACTOR)
                .saturating_add(CATCH_UP_SLACK)
                .min(full)
        };
        if let Some(own) = cache.freshness().expected_catch_up() {
            let bound = short(own);
            return if bound < full
                && cache
                    .freshness()
                    .take_catch_up_sample(CATCH_UP_SAMPLE_EVERY)
            {
                full
            } else {
                bound
            };
        }
        if cache.freshness().first_catch_up_try() {
            return full;
        }
        self.catch_up
            .get()
            .or_else(|| probe.round_trip())
            .map_or(full, short)
    }
}

/// Where a consistent read is answered (see [`App::consistent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Consistency {
    /// The cache has reached the upstream's current revision.
    Cache,
    /// The upstream answers.
    Upstream,
    /// The upstream cannot be reached at all: the cache answers, marked with
    /// [`UNCONFIRMED_HEADER`] (within `staleness.maxConsistentReadStalenessSeconds`).
    Unconfirmed,
}

impl Consistency {
    pub(super) fn answered_by_cache(self) -> bool {
        self != Consistency::Upstream
    }
}

/// Set (`true`) on a consistent read answered from the cache while the upstream could not be
/// reached to confirm it current (see docs/semantics.md, "Stale while down").
pub const UNCONFIRMED_HEADER: &str = "x-kcache-unconfirmed";

/// Mark an answer as unconfirmed when it is one (`c`: the decision of a consistent read, None
/// for a read that was not one).
pub(super) fn mark_unconfirmed(
    answer: Result<Answer, ApiError>,
    c: Option<Consistency>,
) -> Result<Answer, ApiError> {
    match answer {
        Ok(Answer::Ready(mut resp)) if c == Some(Consistency::Unconfirmed) => {
            resp.headers_mut()
                .insert(UNCONFIRMED_HEADER, http::HeaderValue::from_static("true"));
            Ok(Answer::Ready(resp))
        }
        other => other,
    }
}

/// A consistent read waits this many times the expected catch-up (plus [`CATCH_UP_SLACK`]):
/// the events of a write arrive within about one catch-up, so several without the revision
/// mean there is nothing of this type to arrive.
const CATCH_UP_BOUND_FACTOR: u32 = 4;

/// Added to the bounded wait: scheduling noise on a busy machine, so a cache that is current
/// is not forwarded for being a few milliseconds late.
const CATCH_UP_SLACK: Duration = Duration::from_millis(20);

/// Which kind of consistent read is deciding between the cache and the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    Get,
    /// A LIST, or a watch whose initial events must be consistent (its end bookmark promises
    /// a state no older than the upstream's when it began).
    List,
}

/// Reads forwarded because the cache lags still wait, one per this long (or per twenty
/// catch-ups, when those are longer), to measure the lag again: at most ~5% of the time one
/// reader pays the lag, and a watch that caught up is noticed within about a second.
const CATCH_UP_SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Whether a consistent GET would wait longer for the cache than the upstream takes to answer
/// it: the cache's expected catch-up exceeds the probe's round trip (both measured, see
/// [`App::consistent`]). Unknown estimates mean "wait", which measures them.
fn waiting_is_slower(cache: &ResourceCache, probe: &RevisionProbe) -> bool {
    let (Some(round_trip), Some(catch_up)) =
        (probe.round_trip(), cache.freshness().expected_catch_up())
    else {
        return false;
    };
    catch_up > round_trip
        && !cache
            .freshness()
            .take_catch_up_sample(CATCH_UP_SAMPLE_EVERY.max(catch_up.saturating_mul(20)))
}
