//! Where a consistent read (resourceVersion unset) is answered: the cache once it has caught
//! up with the upstream, the upstream, or the cache marked unconfirmed while the upstream
//! cannot be reached (docs/semantics.md, "Consistent reads" and "Stale while down").
//!
//! One [`ConsistentReader`] per read decides it and, when the upstream answers, forwards it,
//! with the type's probe and prover looked up once. How a read starts and what it does once
//! its wait ended are pure functions of facts (`plan`, table-tested row by row) that the reader
//! carries out; forwarded reads are timed (`forward`), and what the reader leaves running to
//! learn its type's verdict is in `learn`. The proof by metadata that may stand in for a
//! forwarded read is `api::proof`.

mod forward;
mod learn;
mod plan;

pub(crate) use forward::Forwarded;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::task::TaskTracker;

use super::filter::Filter;
use super::request::{Options, ReadRequest};
use super::{proof, Staleness};
use crate::cache::{Proof, Prover, ResourceCache};
use crate::error::Report;
use crate::metrics::{self, Metrics};
use crate::registry::Served;
use crate::status::ApiError;
use crate::upstream::{RevisionProbe, Upstream};
pub(super) use plan::Placed;
use plan::{
    after_probe_failed, after_wait, placed, plan, proof_answer, AfterWait, Facts, Learn, Plan,
    ProbeFailed, Proving, Wait, Waited,
};

/// How reads with resourceVersion unset are answered.
#[derive(Debug, Clone)]
pub(crate) struct ConsistentReads {
    /// Answer them from the cache once it has caught up with the upstream (else forward all).
    pub from_cache: bool,
    /// With `fallback` off, how long a read waits for the cache to catch up before its 504;
    /// otherwise the most a wait off the readers' path lasts (docs/semantics.md, "How long a
    /// consistent read waits").
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

/// One consistent read of one type, decided ([`ConsistentReader::decide`]) and, when the
/// upstream answers it, forwarded ([`ConsistentReader::forwarded`]). It holds everything the
/// decision needs: the read's size, the cache, the type's probe and prover as the request found
/// them in the registry, and the parts of the app it reads, counts with and leaves waits
/// running in.
pub(super) struct ConsistentReader<'a> {
    /// What is read: what forwarding it would cost bounds its wait.
    read: ConsistentRead,
    /// The read selects on a kcache index field, which only the cache can answer.
    local: bool,
    cache: &'a Arc<ResourceCache>,
    /// The type's revision probe.
    probe: &'a Arc<RevisionProbe>,
    /// What moves the cache's RV to a revision a proof showed current.
    prover: &'a Prover,
    config: &'a ConsistentReads,
    metrics: &'a Metrics,
    upstream: &'a Upstream,
    /// What a read gets while the upstream cannot confirm the cache current.
    staleness: &'a Staleness,
    /// Where the waits off the readers' path run: shutdown waits for them.
    tasks: &'a TaskTracker,
}

impl<'a> ConsistentReader<'a> {
    /// The reader of `read`, a consistent read of `served`'s type (`limit`: its page size).
    pub(super) fn new(
        read: &ReadRequest<'_>,
        limit: i64,
        served: &'a Served,
        config: &'a ConsistentReads,
        metrics: &'a Metrics,
        upstream: &'a Upstream,
        staleness: &'a Staleness,
        tasks: &'a TaskTracker,
    ) -> ConsistentReader<'a> {
        ConsistentReader {
            read: ConsistentRead::of(read, limit, &served.cache),
            local: read.local,
            cache: &served.cache,
            probe: &served.probe,
            prover: &served.prover,
            config,
            metrics,
            upstream,
            staleness,
            tasks,
        }
    }
}

impl ConsistentReader<'_> {
    /// Decide where a consistent read is answered (`synced`: whether the cache had synced when
    /// the read was decided): [`Consistency::Cache`] once the cache has
    /// reached the upstream's revision as of after the read arrived (see [`RevisionProbe`] for
    /// why that is never stale), [`Consistency::Upstream`] when the upstream must answer, and
    /// [`Consistency::Unconfirmed`] only while the upstream cannot be reached at all.
    ///
    /// No reader waits for what it cannot gain (docs/semantics.md, "Consistent reads"). While
    /// the upstream is reachable and `onTimeout` forwards, by what the type's last wait found
    /// ([`Verdict`](crate::cache::Verdict)):
    /// - **quiet** (a wait ran out, and no object event of the type since): forwarded at once,
    ///   without a probe, or, where that is expected to be faster, proven by the type's
    ///   metadata (`api::proof`). A bookmark moves the cache's RV but is no news about the
    ///   objects;
    /// - **unknown** (nothing learnt yet, or events since it was quiet): the probe, and a wait
    ///   no longer than the upstream is expected to take to answer the read
    ///   ([`crate::cache::Freshness::expected_forward`]; the probe's round trip before any
    ///   read of the type was forwarded); then the read is forwarded and the wait goes on off
    ///   the reader's path, to learn the verdict. Meanwhile the type's other reads probe and
    ///   go upstream without a wait;
    /// - **reaches** (the last wait reached the revision): the read waits a few times the
    ///   type's measured catch-up, never longer than the upstream is expected to take to answer
    ///   it, then is forwarded while the wait goes on off the reader's path. When the catch-up
    ///   alone is expected to take longer than forwarding (a lagging watch, a small read), the
    ///   read is forwarded at once and the catch-up is measured again in the background, about
    ///   once a second.
    ///
    /// A LIST whose wait ran out is proven by the type's metadata instead of forwarded, where
    /// that is expected to pay (a large read of a type only other types' writes moved past).
    ///
    /// A GET in front of v1.31 or later is forwarded at once: there the probe, a consistent
    /// list, waits for etcd's progress notification whenever the type's last event is older
    /// than etcd's revision, while the GET itself is read from etcd at once
    /// ([`crate::upstream::UpstreamVersion::consistent_lists_from_watch_cache`]).
    ///
    /// A probe the upstream answered with an error, or that got no answer in time while the
    /// reflector still reaches the upstream, forwards the read (one replica's 429, 5xx or
    /// slowness is not an outage); only an upstream that cannot be reached at all (the
    /// connection refused or cut, or no answer while the reflector has lost it too) has the
    /// cache answer unconfirmed. With `onTimeout: error` every read waits the full
    /// `consistentReads.waitSeconds` before its 504.
    ///
    /// How the read starts is [`plan()`]'s to say, what it does when its probe failed
    /// [`after_probe_failed`]'s, what it does once its wait ended [`after_wait`]'s, and where it
    /// is answered then [`placed`]'s, each from facts alone; this carries their steps out (the
    /// probe, the wait, a proof, a wait left running off the reader's path) and counts the
    /// outcome.
    pub(super) async fn decide(&self, synced: bool) -> Result<Placed, ApiError> {
        placed(self.found(synced).await?, self.local, synced)
    }

    /// How current the cache was found for the read (see [`ConsistentReader::decide`]).
    async fn found(&self, synced: bool) -> Result<Consistency, ApiError> {
        let (cache, probe, read) = (self.cache, self.probe, self.read);
        let plan = plan(&self.facts(synced));
        let outcome = |o: &'static str| self.count_outcome(o);
        let bound = match plan {
            Plan::Upstream => return Ok(Consistency::Upstream),
            Plan::Forward(why) => {
                outcome(why);
                return Ok(Consistency::Upstream);
            }
            Plan::ForwardLagging => {
                self.sample(probe);
                outcome("forwarded_lagging");
                return Ok(Consistency::Upstream);
            }
            Plan::ProveOrForward => match self.proof_instead(true) {
                Some(round_trip) => return Ok(self.proven(round_trip).await),
                None => {
                    outcome("forwarded_quiet");
                    return Ok(Consistency::Upstream);
                }
            },
            Plan::Probe(bound) => bound,
        };
        let started = Instant::now();
        let target = match probe.target().await {
            Ok(t) => t,
            Err(e) => {
                let reachable = cache.contact().reachable();
                match after_probe_failed(e.upstream_answered(), reachable) {
                    ProbeFailed::Forward => {
                        tracing::debug!(resource = %cache.info, error = %Report(&e),
                            "consistency probe failed; forwarding the read");
                        outcome("forwarded_probe_failed");
                        return Ok(Consistency::Upstream);
                    }
                    ProbeFailed::Unconfirmed => {
                        tracing::debug!(resource = %cache.info, error = %Report(&e), age = ?cache.contact().age(),
                            "upstream unreachable; answering from the cache unconfirmed");
                        if let Err(refused) = self.staleness.allow_unconfirmed(cache) {
                            outcome("too_stale");
                            return Err(refused);
                        }
                        outcome("stale");
                        return Ok(Consistency::Unconfirmed);
                    }
                }
            }
        };
        let probed = Instant::now();
        // Known only now: a first read's probe gives the round trip it is bounded by.
        let bound = bound.unwrap_or_else(|| {
            let round_trip = probe.round_trip().unwrap_or_default();
            cache
                .freshness()
                .expected_forward(read.objects(), round_trip)
                .min(self.config.wait)
        });
        let waited = cache.wait_for_rv(target, bound).await;
        self.metrics
            .consistent_wait
            .get_or_create(&metrics::ResourceLabels {
                resource: cache.info.resource.clone(),
            })
            .observe(started.elapsed().as_secs_f64());
        let wait = match waited {
            Ok(()) => Wait::Reached,
            Err(current) => Wait::RanOut { current },
        };
        self.finish(wait, target, probed).await
    }

    /// Carry out what [`after_wait`] says once the read's wait for `target` (probed at
    /// `probed`) ended as `wait`: weigh a proof and make it where it says so, then answer and
    /// record what the read learnt of the type.
    async fn finish(
        &self,
        wait: Wait,
        target: u64,
        probed: Instant,
    ) -> Result<Consistency, ApiError> {
        let cache = self.cache;
        let mut waited = Waited {
            wait,
            fallback: self.config.fallback,
            proof: Proving::Unweighed,
        };
        loop {
            match after_wait(&waited) {
                AfterWait::Weigh => {
                    waited.proof = match self.proof_instead(false) {
                        Some(round_trip) => Proving::Pays(round_trip),
                        None => Proving::DoesNotPay,
                    };
                }
                AfterWait::Prove(round_trip) => {
                    let before = cache.verdict();
                    let found = self.prove(round_trip).await;
                    waited.proof = Proving::Done { before, found };
                }
                AfterWait::Cache => {
                    cache.freshness().reached(probed.elapsed());
                    self.count_outcome("cache");
                    return Ok(Consistency::Cache);
                }
                AfterWait::Timeout { current } => {
                    cache.freshness().missed(cache.object_events());
                    self.count_outcome("timeout");
                    return Err(ApiError::TooLargeResourceVersion {
                        requested: target,
                        current,
                    });
                }
                AfterWait::Forward { current } => {
                    self.keep_waiting(target, probed);
                    self.count_outcome("forwarded");
                    tracing::trace!(resource = %cache.info, target, current, "forwarding a consistent read");
                    return Ok(Consistency::Upstream);
                }
                AfterWait::Answer {
                    outcome,
                    answer,
                    learn,
                } => {
                    self.count_outcome(outcome);
                    match learn {
                        Learn::Nothing => {}
                        Learn::Quiet => cache.freshness().missed(cache.object_events()),
                        Learn::KeepWaiting => self.keep_waiting(target, probed),
                    }
                    return Ok(answer);
                }
            }
        }
    }

    /// Where a read of a quiet type is answered once its cache was put to the proof
    /// ([`proof_answer`]).
    async fn proven(&self, round_trip: Duration) -> Consistency {
        let (o, answer) = proof_answer(self.prove(round_trip).await);
        self.count_outcome(o);
        answer
    }

    /// Prove the cache current by the type's metadata ([`proof::prove`]; `round_trip`: the
    /// probe's).
    async fn prove(&self, round_trip: Duration) -> Proof {
        proof::prove(self.upstream, self.cache, self.prover, round_trip).await
    }

    /// The probe's round trip, when the read is a LIST whose proof pays ([`proof::proof_pays`],
    /// with its periodic `retry` for a quiet type's reads).
    fn proof_instead(&self, retry: bool) -> Option<Duration> {
        let round_trip = self.probe.round_trip();
        let (ConsistentRead::List { whole, .. }, Some(round_trip)) = (self.read, round_trip) else {
            return None;
        };
        proof::proof_pays(self.cache, round_trip, whole, retry).then_some(round_trip)
    }

    /// Count a consistent read of the type where it was answered
    /// (`kcache_consistent_reads_total{outcome}`).
    fn count_outcome(&self, outcome: &'static str) {
        self.metrics
            .consistent_reads
            .get_or_create(&metrics::OutcomeLabels {
                resource: self.cache.info.resource.clone(),
                outcome,
            })
            .inc();
    }

    /// What [`plan()`] decides a consistent read by, read from the configuration, the cache and
    /// the type's probe; `synced`: whether the cache had synced when the read was decided.
    fn facts(&self, synced: bool) -> Facts {
        let (cache, read) = (self.cache, self.read);
        let freshness = cache.freshness();
        let contact = cache.contact();
        Facts {
            from_cache: self.config.from_cache,
            synced,
            confirmed: contact.confirmed(),
            // A type dropped since the request found it: its cache answers no new read.
            served: !cache.is_not_served(),
            fallback: self.config.fallback,
            reachable: contact.reachable(),
            get_from_etcd: read == ConsistentRead::Get
                && self.upstream.version().consistent_lists_from_watch_cache(),
            verdict: cache.verdict(),
            learning: freshness.is_learning(),
            catch_up: freshness.expected_catch_up(),
            forward: self
                .probe
                .round_trip()
                .map(|round_trip| freshness.expected_forward(read.objects(), round_trip)),
            wait: self.config.wait,
        }
    }
}

/// Where a consistent read is answered (see [`ConsistentReader::decide`]).
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

/// Set (`true`) on a consistent read answered from the cache while the upstream could not be
/// reached to confirm it current (see docs/semantics.md, "Stale while down").
pub const UNCONFIRMED_HEADER: &str = "x-kcache-unconfirmed";

/// Which kind of consistent read is deciding between the cache and the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConsistentRead {
    Get,
    /// A LIST, or a watch whose initial events must be consistent (its end bookmark promises
    /// a state no older than the upstream's when it began): about `objects` objects in this
    /// page, `whole` in all its pages.
    List {
        objects: usize,
        whole: usize,
    },
}

impl ConsistentRead {
    /// The consistent read `read` asks of `cache` (`limit`: its page size).
    fn of(read: &ReadRequest<'_>, limit: i64, cache: &ResourceCache) -> ConsistentRead {
        match &read.options {
            Options::List(Ok(listing)) => {
                ConsistentRead::list(expected_objects(cache, &listing.filter), limit)
            }
            _ => ConsistentRead::Get,
        }
    }

    /// A LIST of about `whole` objects in all, `limit` a page (zero or less: one page).
    fn list(whole: usize, limit: i64) -> ConsistentRead {
        let objects = usize::try_from(limit)
            .ok()
            .filter(|l| *l > 0)
            .map_or(whole, |l| l.min(whole));
        ConsistentRead::List { objects, whole }
    }

    /// About how many objects the upstream would send for this read (this page).
    pub(super) fn objects(self) -> usize {
        match self {
            ConsistentRead::Get => 1,
            ConsistentRead::List { objects, .. } => objects,
        }
    }
}

/// About how many objects a consistent LIST (or a watch's initial events) of `filter` would
/// send, all pages together: the namespace's or the type's objects. Selectors are not applied
/// (an upper bound, cheap to get): it only sizes what forwarding the read would cost, to
/// decide how long the read may wait for the cache and whether proving it pays.
fn expected_objects(cache: &ResourceCache, filter: &Filter) -> usize {
    let snap = cache.snapshot();
    match &filter.namespace {
        None => snap.objects.len(),
        // Counted: a namespace's keys are one range of the ordered map.
        Some(_) => snap
            .objects
            .range(filter.keys(None))
            .take(MAX_COUNTED)
            .count(),
    }
}

/// A namespace's objects are counted up to this many for [`expected_objects`]: beyond it the
/// read is large whatever its exact size, and counting would cost more than it tells.
const MAX_COUNTED: usize = 10_000;
