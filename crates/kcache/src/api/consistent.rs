//! Where a consistent read (resourceVersion unset) is answered: the cache once it has caught
//! up with the upstream, the upstream, or the cache marked unconfirmed while the upstream
//! cannot be reached (docs/semantics.md, "Consistent reads" and "Stale while down").

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{shared_read, Answer, AnsweredBy, App};
use crate::cache::{Proof, ResourceCache, Verdict};
use crate::error::Report;
use crate::metrics;
use crate::status::ApiError;
use crate::upstream::RevisionProbe;

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

impl App {
    /// Decide where a consistent read is answered (`synced`: whether the cache had synced when
    /// the read was decided): [`Consistency::Cache`] once the cache has
    /// reached the upstream's revision as of after the read arrived (see [`RevisionProbe`] for
    /// why that is never stale), [`Consistency::Upstream`] when the upstream must answer, and
    /// [`Consistency::Unconfirmed`] only while the upstream cannot be reached at all.
    ///
    /// No reader waits for what it cannot gain (docs/semantics.md, "Consistent reads"). While
    /// the upstream is reachable and `onTimeout` forwards, by what the type's last wait found
    /// ([`Verdict`]):
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
    pub(super) async fn consistent(
        &self,
        cache: &Arc<ResourceCache>,
        read: ConsistentRead,
        synced: bool,
    ) -> Result<Consistency, ApiError> {
        let probe = self.registry.probe(cache);
        let facts = self.facts(cache, probe.as_deref(), read, synced);
        let (Some(probe), plan) = (probe, plan(&facts)) else {
            return Ok(Consistency::Upstream);
        };
        let outcome = |o: &'static str| self.count_outcome(cache, o);
        let bound = match plan {
            Plan::Upstream => return Ok(Consistency::Upstream),
            Plan::Forward(why) => {
                outcome(why);
                return Ok(Consistency::Upstream);
            }
            Plan::ForwardLagging => {
                self.sample(cache, &probe);
                outcome("forwarded_lagging");
                return Ok(Consistency::Upstream);
            }
            Plan::ProveOrForward => match self.proof_instead(cache, &probe, read, true) {
                Some(round_trip) => return Ok(self.proven(cache, round_trip).await),
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
        let probed = Instant::now();
        // Known only now: a first read's probe gives the round trip it is bounded by.
        let bound = bound.unwrap_or_else(|| {
            let round_trip = probe.round_trip().unwrap_or_default();
            cache
                .freshness()
                .expected_forward(read.objects(), round_trip)
                .min(self.consistent.wait)
        });
        let waited = cache.wait_for_rv(target, bound).await;
        self.metrics
            .consistent_wait
            .get_or_create(&metrics::ResourceLabels {
                resource: cache.info.resource.clone(),
            })
            .observe(started.elapsed().as_secs_f64());
        match waited {
            Ok(()) => {
                cache.freshness().reached(probed.elapsed());
                outcome("cache");
                Ok(Consistency::Cache)
            }
            Err(current) if self.consistent.fallback => {
                // A large read whose proof pays is proven rather than forwarded whole: no event
                // of the type arrived within a few catch-ups, so most likely nothing of it
                // changed (the revision moved with other types' writes).
                if let Some(round_trip) = self.proof_instead(cache, &probe, read, false) {
                    let verdict = cache.verdict();
                    let answer = self.proven(cache, round_trip).await;
                    match (answer, verdict) {
                        // Nothing of the type was on its way, and nothing was known of it: it
                        // is quiet, and its next reads are proven at once.
                        (Consistency::Cache, Verdict::Unknown) => {
                            cache.freshness().missed(cache.object_events());
                        }
                        // A type that keeps up stays so: while the upstream's revision stands
                        // still its next reads are answered after the probe alone, which costs
                        // the upstream less than a proof.
                        (Consistency::Cache, _) => {}
                        _ => self.keep_waiting(cache, target, probed),
                    }
                    return Ok(answer);
                }
                // Forwarded now; the wait goes on off the reader's path, to learn whether the
                // type reaches such revisions at all (and how fast) or is quiet.
                self.keep_waiting(cache, target, probed);
                outcome("forwarded");
                tracing::trace!(resource = %cache.info, target, current, "forwarding a consistent read");
                Ok(Consistency::Upstream)
            }
            Err(current) => {
                cache.freshness().missed(cache.object_events());
                outcome("timeout");
                Err(ApiError::TooLargeResourceVersion {
                    requested: target,
                    current,
                })
            }
        }
    }

    /// Where a read of a quiet type is answered once its cache was put to the proof: from the
    /// cache when it holds the upstream's state, else upstream (a proof that failed, or that
    /// the upstream did not answer: it can answer the read).
    async fn proven(&self, cache: &Arc<ResourceCache>, round_trip: Duration) -> Consistency {
        let (o, answer) = match self.prove(cache, round_trip).await {
            Proof::Proven => ("proven", Consistency::Cache),
            Proof::Changed => ("forwarded_changed", Consistency::Upstream),
            Proof::Failed => ("forwarded_probe_failed", Consistency::Upstream),
        };
        self.count_outcome(cache, o);
        answer
    }

    /// The probe's round trip, when `read` is a LIST whose proof pays ([`App::proof_pays`],
    /// with its periodic `retry` for a quiet type's reads).
    fn proof_instead(
        &self,
        cache: &ResourceCache,
        probe: &RevisionProbe,
        read: ConsistentRead,
        retry: bool,
    ) -> Option<Duration> {
        let (ConsistentRead::List { whole, .. }, Some(round_trip)) = (read, probe.round_trip())
        else {
            return None;
        };
        self.proof_pays(cache, round_trip, whole, retry)
            .then_some(round_trip)
    }

    /// Count a consistent read of `cache`'s type where it was answered
    /// (`kcache_consistent_reads_total{outcome}`).
    fn count_outcome(&self, cache: &ResourceCache, outcome: &'static str) {
        self.metrics
            .consistent_reads
            .get_or_create(&metrics::OutcomeLabels {
                resource: cache.info.resource.clone(),
                outcome,
            })
            .inc();
    }

    /// What [`plan`] decides a consistent read of `cache` by, read from the configuration,
    /// the cache and the type's probe (None: it has none); `synced`: whether the cache had
    /// synced when the read was decided.
    fn facts(
        &self,
        cache: &ResourceCache,
        probe: Option<&RevisionProbe>,
        read: ConsistentRead,
        synced: bool,
    ) -> Facts {
        let freshness = cache.freshness();
        let contact = cache.contact();
        Facts {
            from_cache: self.consistent.from_cache,
            synced,
            confirmed: contact.confirmed(),
            probe: probe.is_some(),
            fallback: self.consistent.fallback,
            reachable: contact.reachable(),
            get_from_etcd: read == ConsistentRead::Get
                && self.upstream.version().consistent_lists_from_watch_cache(),
            verdict: cache.verdict(),
            learning: freshness.is_learning(),
            catch_up: freshness.expected_catch_up(),
            forward: probe
                .and_then(RevisionProbe::round_trip)
                .map(|round_trip| freshness.expected_forward(read.objects(), round_trip)),
            wait: self.consistent.wait,
        }
    }

    /// Go on waiting, off the reader's path, for `cache` to reach `target` (probed at
    /// `probed`), up to [`App::learn_within`]: record the catch-up if it gets there, or that the type
    /// is quiet. One such wait per type at a time; others forward without one.
    fn keep_waiting(&self, cache: &Arc<ResourceCache>, target: u64, probed: Instant) {
        if !cache.freshness().begin_background(Duration::ZERO) {
            return;
        }
        let (cache, bound) = (cache.clone(), self.learn_within());
        self.tasks.spawn(async move {
            let _end = BackgroundWait(cache.clone());
            let remaining = bound.saturating_sub(probed.elapsed());
            learn(&cache, target, probed, remaining).await;
        });
    }

    /// Measure, off the readers' path, whether and how fast `cache` reaches the upstream's
    /// revision: one probe and a wait up to [`App::learn_within`], at most once per
    /// [`SAMPLE_EVERY`] per type.
    fn sample(&self, cache: &Arc<ResourceCache>, probe: &Arc<RevisionProbe>) {
        if !cache.freshness().begin_background(SAMPLE_EVERY) {
            return;
        }
        let (cache, probe, bound) = (cache.clone(), probe.clone(), self.learn_within());
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
        LEARN_WITHIN.min(self.consistent.wait)
    }
}

impl App {
    /// How `read`, a consistent GET or LIST of `cache`'s type decided for the upstream, is
    /// forwarded (see [`Forwarded`]); a LIST is untimed before the probe has a round trip.
    pub(super) fn forwarded(&self, cache: &Arc<ResourceCache>, read: ConsistentRead) -> Forwarded {
        let objects = read.objects();
        let timing = match read {
            ConsistentRead::Get => None,
            ConsistentRead::List { .. } => self
                .registry
                .probe(cache)
                .and_then(|p| p.round_trip())
                .map(|round_trip| ForwardTiming {
                    cache: cache.clone(),
                    objects,
                    round_trip,
                }),
        };
        Forwarded {
            timing,
            shared: shared_read::fits(cache, objects),
        }
    }
}

/// A consistent read forwarded: shared with identical reads that arrive together
/// (`api::shared_read`) where its answer is expected to be small enough to share, and, for a
/// LIST, timed until its answer is sent in full: what the upstream takes to answer the type's
/// reads bounds how long later ones wait for the cache.
pub(crate) struct Forwarded {
    timing: Option<ForwardTiming>,
    pub(super) shared: bool,
}

impl Forwarded {
    /// `resp`, the upstream's answer to this read (a request that arrived at `started`),
    /// with its body recording the time when its last byte has gone out, if it is timed and
    /// the upstream answered it (a client that leaves early records nothing).
    pub(super) fn timed(
        self,
        resp: axum::response::Response,
        started: Instant,
    ) -> axum::response::Response {
        match self.timing {
            Some(timing) if resp.status().is_success() => resp.map(|body| {
                axum::body::Body::new(TimedBody {
                    body,
                    started,
                    timing: Some(timing),
                })
            }),
            _ => resp,
        }
    }
}

/// A forwarded consistent LIST being timed (see [`App::forwarded`]).
struct ForwardTiming {
    cache: Arc<ResourceCache>,
    objects: usize,
    round_trip: Duration,
}

/// A forwarded body that records, at its end, how long the read took.
struct TimedBody {
    body: axum::body::Body,
    started: Instant,
    timing: Option<ForwardTiming>,
}

impl TimedBody {
    fn record(&mut self) {
        if let Some(t) = self.timing.take() {
            t.cache
                .freshness()
                .record_forward(t.objects, self.started.elapsed(), t.round_trip);
        }
    }
}

impl Drop for TimedBody {
    /// A body of known length is not polled past its last byte: it ends when it is dropped
    /// with nothing left.
    fn drop(&mut self) {
        use http_body::Body as _;
        if self.body.is_end_stream() || self.body.size_hint().exact() == Some(0) {
            self.record();
        }
    }
}

impl http_body::Body for TimedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        // The end is the last frame of a body that knows it (hyper polls no further), or the
        // end of the stream.
        let ended = match &polled {
            std::task::Poll::Ready(None) => true,
            std::task::Poll::Ready(Some(Ok(_))) => self.body.is_end_stream(),
            _ => false,
        };
        if ended {
            self.record();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
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

/// What a consistent read's [`Plan`] is made from: read, nothing asked or changed (see
/// [`App::consistent`] for what each means to the read).
#[derive(Debug, Clone, Copy)]
pub(super) struct Facts {
    /// `consistentReads.fromCache`.
    pub(super) from_cache: bool,
    /// The cache had synced when the read was decided.
    pub(super) synced: bool,
    /// The cache's state was seen current by this kcache, not only restored from disk
    /// (`ResourceCache::is_unconfirmed`).
    pub(super) confirmed: bool,
    /// The type has a revision probe.
    pub(super) probe: bool,
    /// `consistentReads.onTimeout` forwards (else a wait that runs out is a 504).
    pub(super) fallback: bool,
    /// The type's reflector reaches the upstream.
    pub(super) reachable: bool,
    /// A GET in front of v1.31 or later, where the probe (a list) may wait for etcd while
    /// the GET is read from etcd at once.
    pub(super) get_from_etcd: bool,
    /// What the type's last wait found.
    pub(super) verdict: Verdict,
    /// Another read of the type is learning its verdict off the readers' path.
    pub(super) learning: bool,
    /// The type's measured catch-up.
    pub(super) catch_up: Option<Duration>,
    /// How long forwarding this read is expected to take; None until the probe has a round
    /// trip.
    pub(super) forward: Option<Duration>,
    /// `consistentReads.waitSeconds`.
    pub(super) wait: Duration,
}

/// What a consistent read does first ([`plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// The upstream answers: the cache cannot answer a consistent read now at all (uncounted).
    Upstream,
    /// Forwarded at once, counted as this outcome.
    Forward(&'static str),
    /// Forwarded at once as lagging (its catch-up is expected to take longer than forwarding),
    /// its catch-up measured again off the reader's path.
    ForwardLagging,
    /// A quiet type: proven current by its metadata where that pays (`api::proof`), else
    /// forwarded (`forwarded_quiet`).
    ProveOrForward,
    /// Probe, then wait for the cache at most this long; None: as long as forwarding the read
    /// is expected to take, known once the probe has a round trip.
    Probe(Option<Duration>),
}

/// How a consistent read starts, from its [`Facts`] alone (see [`App::consistent`]).
pub(super) fn plan(f: &Facts) -> Plan {
    // A state restored from disk that the reflector has not yet confirmed with the upstream
    // is treated as no state: the read goes upstream, as it would before a first sync (stale
    // while down is for states this kcache has seen current).
    if !f.from_cache || !f.synced || !f.confirmed || !f.probe {
        return Plan::Upstream;
    }
    // With `fallback` off the read gets its full wait before the 504 instead, and while the
    // reflector cannot reach the upstream the probe decides (stale while down).
    if !(f.fallback && f.reachable) {
        return Plan::Probe(Some(f.wait));
    }
    if f.get_from_etcd {
        return Plan::Forward("forwarded_get");
    }
    match f.verdict {
        Verdict::Quiet => Plan::ProveOrForward,
        // Another read of the type is already learning its verdict: waiting as well would
        // only cost this reader. The probe stays: it is what tells an upstream that no longer
        // answers (stale while down) from one that does.
        Verdict::Unknown if f.learning => Plan::Probe(Some(Duration::ZERO)),
        Verdict::Unknown => Plan::Probe(None),
        Verdict::Reaches => {
            let catch_up = f.catch_up.unwrap_or_default();
            let bound = catch_up_bound(catch_up, f.wait);
            match f.forward {
                None => Plan::Probe(Some(bound)),
                Some(forward) if catch_up > forward => Plan::ForwardLagging,
                Some(forward) => Plan::Probe(Some(bound.min(forward))),
            }
        }
    }
}

/// A few times the expected catch-up, plus a little, at most the full `wait`: the events of a
/// write arrive within about one catch-up, so several without the revision mean nothing of
/// the type is on its way.
fn catch_up_bound(catch_up: Duration, wait: Duration) -> Duration {
    catch_up
        .saturating_mul(CATCH_UP_BOUND_FACTOR)
        .saturating_add(CATCH_UP_SLACK)
        .min(wait)
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

/// Set (`true`) on a consistent read answered from the cache while the upstream could not be
/// reached to confirm it current (see docs/semantics.md, "Stale while down").
pub const UNCONFIRMED_HEADER: &str = "x-kcache-unconfirmed";

/// Mark a consistent read's answer from the cache with how the cache was shown current (an
/// [`AnsweredBy`] extension, for its audit events), and as unconfirmed when it is one (`c`:
/// the decision of a consistent read, None for a read that was not one).
pub(super) fn mark_consistent(
    answer: Result<Answer, ApiError>,
    c: Option<Consistency>,
) -> Result<Answer, ApiError> {
    match answer {
        Ok(Answer::Ready(mut resp)) if c == Some(Consistency::Unconfirmed) => {
            resp.headers_mut()
                .insert(UNCONFIRMED_HEADER, http::HeaderValue::from_static("true"));
            resp.extensions_mut().insert(AnsweredBy::Unconfirmed);
            Ok(Answer::Ready(resp))
        }
        Ok(Answer::Ready(mut resp)) if c == Some(Consistency::Cache) => {
            resp.extensions_mut().insert(AnsweredBy::Proven);
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
    /// A LIST of about `whole` objects in all, `limit` a page (zero or less: one page).
    pub(super) fn list(whole: usize, limit: i64) -> ConsistentRead {
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

/// A wait off the readers' path that has not seen the probed revision within this finds the
/// type quiet. A watch that lags more than this is slower than forwarding any read, so taking
/// such a type for quiet costs nothing (its events, when they come, end the verdict), and a
/// type's second read a second or more after its first already knows.
const LEARN_WITHIN: Duration = Duration::from_secs(1);

/// Background measurements of a type whose reads are forwarded without waiting start at most
/// this often: a watch that stopped lagging is noticed within about a second, for one probe a
/// second at most.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(3);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A synced, confirmed, reachable type with a probe, nothing learnt yet, in front of
    /// v1.30, reads forwarded when a wait runs out: each row changes what it names.
    fn facts() -> Facts {
        Facts {
            from_cache: true,
            synced: true,
            confirmed: true,
            probe: true,
            fallback: true,
            reachable: true,
            get_from_etcd: false,
            verdict: Verdict::Unknown,
            learning: false,
            catch_up: None,
            forward: None,
            wait: WAIT,
        }
    }

    #[test]
    fn a_consistent_read_starts_as_its_facts_say() {
        let rows: Vec<(&str, Facts, Plan)> = vec![
            (
                "consistent reads not answered from the cache",
                Facts {
                    from_cache: false,
                    ..facts()
                },
                Plan::Upstream,
            ),
            (
                "not synced",
                Facts {
                    synced: false,
                    ..facts()
                },
                Plan::Upstream,
            ),
            (
                "restored from disk, not confirmed yet",
                Facts {
                    confirmed: false,
                    ..facts()
                },
                Plan::Upstream,
            ),
            (
                "no probe",
                Facts {
                    probe: false,
                    ..facts()
                },
                Plan::Upstream,
            ),
            (
                "onTimeout: error: the full wait, whatever is known",
                Facts {
                    fallback: false,
                    verdict: Verdict::Quiet,
                    get_from_etcd: true,
                    ..facts()
                },
                Plan::Probe(Some(WAIT)),
            ),
            (
                "upstream not reached: the probe tells stale while down",
                Facts {
                    reachable: false,
                    verdict: Verdict::Quiet,
                    ..facts()
                },
                Plan::Probe(Some(WAIT)),
            ),
            (
                "a GET on v1.31+",
                Facts {
                    get_from_etcd: true,
                    verdict: Verdict::Reaches,
                    ..facts()
                },
                Plan::Forward("forwarded_get"),
            ),
            (
                "quiet",
                Facts {
                    verdict: Verdict::Quiet,
                    ..facts()
                },
                Plan::ProveOrForward,
            ),
            ("unknown: as long as forwarding", facts(), Plan::Probe(None)),
            (
                "unknown, another read learning",
                Facts {
                    learning: true,
                    ..facts()
                },
                Plan::Probe(Some(Duration::ZERO)),
            ),
            (
                "reaches, no round trip yet: a few catch-ups and the slack",
                Facts {
                    verdict: Verdict::Reaches,
                    catch_up: Some(ms(10)),
                    ..facts()
                },
                Plan::Probe(Some(ms(60))),
            ),
            (
                "reaches, no catch-up measured: the slack",
                Facts {
                    verdict: Verdict::Reaches,
                    ..facts()
                },
                Plan::Probe(Some(ms(20))),
            ),
            (
                "reaches, forwarding slower than a few catch-ups",
                Facts {
                    verdict: Verdict::Reaches,
                    catch_up: Some(ms(10)),
                    forward: Some(ms(500)),
                    ..facts()
                },
                Plan::Probe(Some(ms(60))),
            ),
            (
                "reaches, forwarding faster than a few catch-ups",
                Facts {
                    verdict: Verdict::Reaches,
                    catch_up: Some(ms(10)),
                    forward: Some(ms(30)),
                    ..facts()
                },
                Plan::Probe(Some(ms(30))),
            ),
            (
                "reaches, catch-up slower than forwarding: lagging",
                Facts {
                    verdict: Verdict::Reaches,
                    catch_up: Some(ms(40)),
                    forward: Some(ms(30)),
                    ..facts()
                },
                Plan::ForwardLagging,
            ),
            (
                "reaches, a few catch-ups beyond the full wait",
                Facts {
                    verdict: Verdict::Reaches,
                    catch_up: Some(Duration::from_secs(2)),
                    forward: Some(Duration::from_secs(10)),
                    ..facts()
                },
                Plan::Probe(Some(WAIT)),
            ),
        ];
        for (row, f, want) in rows {
            assert_eq!(plan(&f), want, "{row}");
        }
    }
}
