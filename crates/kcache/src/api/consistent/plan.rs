//! How a consistent read goes, from facts alone: how it starts ([`plan`]), from what the
//! configuration, the cache and the type's probe say; what it does when its probe failed
//! ([`after_probe_failed`]) and once its wait ended ([`after_wait`]); and where it is answered
//! then ([`placed`]). Each only reads what it is given, nothing asked or changed, so the
//! policy is table-tested row by row; the reader carries the steps out.

use std::time::Duration;

use super::Consistency;
use crate::cache::{Proof, Verdict};
use crate::status::ApiError;

/// What a consistent read's [`Plan`] is made from: read, nothing asked or changed (see
/// [`ConsistentReader::decide`](super::ConsistentReader::decide) for what each means to the read).
#[derive(Debug, Clone, Copy)]
pub(super) struct Facts {
    /// `consistentReads.fromCache`.
    pub(super) from_cache: bool,
    /// The cache had synced when the read was decided.
    pub(super) synced: bool,
    /// The cache's state was seen current by this kcache, not only restored from disk
    /// (`ResourceCache::is_unconfirmed`).
    pub(super) confirmed: bool,
    /// The type is still served: its cache was not retired since the request found it.
    pub(super) served: bool,
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

/// How a consistent read starts, from its [`Facts`] alone (see [`ConsistentReader::decide`](super::ConsistentReader::decide)).
pub(super) fn plan(f: &Facts) -> Plan {
    // A state restored from disk that the reflector has not yet confirmed with the upstream
    // is treated as no state: the read goes upstream, as it would before a first sync (stale
    // while down is for states this kcache has seen current).
    if !f.from_cache || !f.synced || !f.confirmed || !f.served {
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

/// What a consistent read found by the end of its wait for the probed revision, and since
/// (see [`after_wait`]): read, nothing asked or changed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Waited {
    /// How the wait ended.
    pub(super) wait: Wait,
    /// `consistentReads.onTimeout` forwards (else a wait that runs out is a 504).
    pub(super) fallback: bool,
    /// How far a proof of the cache by the type's metadata has got.
    pub(super) proof: Proving,
}

/// How a consistent read's wait for the probed revision ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// The cache reached the revision.
    Reached,
    /// The wait ran out with the cache at RV `current`.
    RanOut { current: u64 },
}

/// How far a proof of the cache by the type's metadata (`api::proof`), in place of forwarding
/// the read, has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Proving {
    /// Not weighed yet: only a read whose wait ran out with `onTimeout` forwarding is.
    Unweighed,
    /// Not expected to pay (or not possible: a GET, or no probe round trip known yet).
    DoesNotPay,
    /// Expected to pay; the probe's round trip, which the proof's measurement subtracts.
    Pays(Duration),
    /// Made: what it found, and the type's verdict just before it.
    Done { before: Verdict, found: Proof },
}

/// What a consistent read does once its wait ended ([`after_wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterWait {
    /// Answered from the cache (`cache`), which reached the revision; its catch-up recorded.
    Cache,
    /// The 504 (`timeout`) naming the cache's RV `current`; the type recorded quiet.
    Timeout { current: u64 },
    /// Weigh whether proving the cache pays for this read, then go on with what that says.
    Weigh,
    /// Prove the cache (with the probe's round trip), then go on with what the proof found.
    Prove(Duration),
    /// Forwarded (`forwarded`; `current`: the cache's RV when the wait ran out), the wait going
    /// on off the reader's path.
    Forward { current: u64 },
    /// After a proof: answered where it says, counted as `outcome`, having learnt `learn`.
    Answer {
        outcome: &'static str,
        answer: Consistency,
        learn: Learn,
    },
}

/// What a proof made after a wait tells of the type, for its next reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Learn {
    /// Nothing new.
    Nothing,
    /// The type is quiet: record it so (its next reads are proven at once).
    Quiet,
    /// Nothing yet: the wait goes on off the reader's path, to learn the verdict.
    KeepWaiting,
}

/// What a consistent read does once its wait ended, from what it [`Waited`] for alone (see
/// [`ConsistentReader::decide`](super::ConsistentReader::decide)). Called again after each
/// step it asks for ([`AfterWait::Weigh`], [`AfterWait::Prove`]) with what that step found.
pub(super) fn after_wait(w: &Waited) -> AfterWait {
    let Wait::RanOut { current } = w.wait else {
        return AfterWait::Cache;
    };
    if !w.fallback {
        return AfterWait::Timeout { current };
    }
    match w.proof {
        Proving::Unweighed => AfterWait::Weigh,
        // A large read whose proof pays is proven rather than forwarded whole: no event of the
        // type arrived within a few catch-ups, so most likely nothing of it changed (the
        // revision moved with other types' writes).
        Proving::Pays(round_trip) => AfterWait::Prove(round_trip),
        // Forwarded now; the wait goes on off the reader's path, to learn whether the type
        // reaches such revisions at all (and how fast) or is quiet.
        Proving::DoesNotPay => AfterWait::Forward { current },
        Proving::Done { before, found } => {
            let (outcome, answer) = proof_answer(found);
            let learn = match (answer, before) {
                // Nothing of the type was on its way, and nothing was known of it: it is
                // quiet, and its next reads are proven at once.
                (Consistency::Cache, Verdict::Unknown) => Learn::Quiet,
                // A type that keeps up stays so: while the upstream's revision stands still its
                // next reads are answered after the probe alone, which costs the upstream less
                // than a proof.
                (Consistency::Cache, _) => Learn::Nothing,
                _ => Learn::KeepWaiting,
            };
            AfterWait::Answer {
                outcome,
                answer,
                learn,
            }
        }
    }
}

/// Where a read whose cache was put to the proof is answered, and the outcome it is counted
/// as: from the cache when it holds the upstream's state, else upstream (a proof that failed,
/// or that the upstream did not answer: it can answer the read).
pub(super) fn proof_answer(found: Proof) -> (&'static str, Consistency) {
    match found {
        Proof::Proven => ("proven", Consistency::Cache),
        Proof::Changed => ("forwarded_changed", Consistency::Upstream),
        Proof::Failed => ("forwarded_probe_failed", Consistency::Upstream),
    }
}

/// What a read whose probe failed does ([`after_probe_failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProbeFailed {
    /// Forwarded: the upstream can answer the read itself (`forwarded_probe_failed`).
    Forward,
    /// The cache answers, marked unconfirmed, unless it is older than the staleness policy
    /// allows (`stale`, or `too_stale` and refused).
    Unconfirmed,
}

/// What a read does when its probe failed, from whether the upstream answered the probe
/// (`answered`: an error status it sent, `Some(true)`; a connection refused or cut,
/// `Some(false)`; no answer in time, None) and whether the type's reflector still reaches it.
/// One replica's 429, 5xx or slowness is not an outage: the upstream can answer the read
/// itself. Only an upstream that cannot be reached at all, where forwarding would fail too,
/// leaves the read to the cache (stale while down).
pub(super) fn after_probe_failed(answered: Option<bool>, reachable: bool) -> ProbeFailed {
    if answered.unwrap_or(reachable) {
        ProbeFailed::Forward
    } else {
        ProbeFailed::Unconfirmed
    }
}

/// Where a consistent read is answered once the reader found `found`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::api) enum Placed {
    /// From the cache, shown current as the reader found (with [`Consistency::Upstream`]: a
    /// read only the cache can answer, which gets what the cache has, not shown current).
    Cache(Consistency),
    /// The upstream answers.
    Upstream,
}

/// Where a consistent read goes once the reader found `found`: the cache when it is current,
/// or answering unconfirmed while the upstream cannot be reached; else the upstream, except
/// for a read only the cache can answer (`local`: it selects on a kcache index field), which
/// gets what the cache has, or, before the cache's first sync (`synced`), the apiserver's 429.
pub(super) fn placed(found: Consistency, local: bool, synced: bool) -> Result<Placed, ApiError> {
    match found {
        Consistency::Cache | Consistency::Unconfirmed => Ok(Placed::Cache(found)),
        Consistency::Upstream if local && synced => Ok(Placed::Cache(found)),
        Consistency::Upstream if local => Err(ApiError::NotReady),
        Consistency::Upstream => Ok(Placed::Upstream),
    }
}

/// A consistent read waits this many times the expected catch-up (plus [`CATCH_UP_SLACK`]):
/// the events of a write arrive within about one catch-up, so several without the revision
/// mean there is nothing of this type to arrive.
const CATCH_UP_BOUND_FACTOR: u32 = 4;

/// Added to the bounded wait: scheduling noise on a busy machine, so a cache that is current
/// is not forwarded for being a few milliseconds late.
const CATCH_UP_SLACK: Duration = Duration::from_millis(20);

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(3);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A synced, confirmed, reachable, served type, nothing learnt yet, in front of
    /// v1.30, reads forwarded when a wait runs out: each row changes what it names.
    fn facts() -> Facts {
        Facts {
            from_cache: true,
            synced: true,
            confirmed: true,
            served: true,
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
                "the type dropped since the request found it",
                Facts {
                    served: false,
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

    /// A wait that ran out, `onTimeout` forwarding, no proof weighed yet: each row changes
    /// what it names.
    fn waited() -> Waited {
        Waited {
            wait: Wait::RanOut { current: 7 },
            fallback: true,
            proof: Proving::Unweighed,
        }
    }

    /// A proof made, after the verdict `before`, that found `found`.
    fn proven(before: Verdict, found: Proof) -> Waited {
        Waited {
            proof: Proving::Done { before, found },
            ..waited()
        }
    }

    #[test]
    fn a_consistent_read_goes_on_after_its_wait_as_its_facts_say() {
        let answer = |outcome, answer, learn| AfterWait::Answer {
            outcome,
            answer,
            learn,
        };
        let rows: Vec<(&str, Waited, AfterWait)> = vec![
            (
                "reached: from the cache",
                Waited {
                    wait: Wait::Reached,
                    ..waited()
                },
                AfterWait::Cache,
            ),
            (
                "reached, onTimeout: error: from the cache",
                Waited {
                    wait: Wait::Reached,
                    fallback: false,
                    ..waited()
                },
                AfterWait::Cache,
            ),
            (
                "ran out, onTimeout: error: the 504, whatever a proof would do",
                Waited {
                    fallback: false,
                    proof: Proving::Pays(ms(5)),
                    ..waited()
                },
                AfterWait::Timeout { current: 7 },
            ),
            ("ran out: weigh a proof first", waited(), AfterWait::Weigh),
            (
                "ran out, no proof pays: forwarded, the wait goes on",
                Waited {
                    proof: Proving::DoesNotPay,
                    ..waited()
                },
                AfterWait::Forward { current: 7 },
            ),
            (
                "ran out, a proof pays: proven with the probe's round trip",
                Waited {
                    proof: Proving::Pays(ms(5)),
                    ..waited()
                },
                AfterWait::Prove(ms(5)),
            ),
            (
                "proven, nothing known of the type: quiet",
                proven(Verdict::Unknown, Proof::Proven),
                answer("proven", Consistency::Cache, Learn::Quiet),
            ),
            (
                "proven, a type that reaches stays so",
                proven(Verdict::Reaches, Proof::Proven),
                answer("proven", Consistency::Cache, Learn::Nothing),
            ),
            (
                "proven, found quiet meanwhile",
                proven(Verdict::Quiet, Proof::Proven),
                answer("proven", Consistency::Cache, Learn::Nothing),
            ),
            (
                "changed: forwarded, the wait goes on",
                proven(Verdict::Unknown, Proof::Changed),
                answer(
                    "forwarded_changed",
                    Consistency::Upstream,
                    Learn::KeepWaiting,
                ),
            ),
            (
                "changed, a type that reaches",
                proven(Verdict::Reaches, Proof::Changed),
                answer(
                    "forwarded_changed",
                    Consistency::Upstream,
                    Learn::KeepWaiting,
                ),
            ),
            (
                "the proof failed: forwarded, the wait goes on",
                proven(Verdict::Unknown, Proof::Failed),
                answer(
                    "forwarded_probe_failed",
                    Consistency::Upstream,
                    Learn::KeepWaiting,
                ),
            ),
            (
                "the proof failed, found quiet meanwhile",
                proven(Verdict::Quiet, Proof::Failed),
                answer(
                    "forwarded_probe_failed",
                    Consistency::Upstream,
                    Learn::KeepWaiting,
                ),
            ),
        ];
        for (row, w, want) in rows {
            assert_eq!(after_wait(&w), want, "{row}");
        }
    }

    #[test]
    fn a_failed_probe_forwards_unless_the_upstream_cannot_be_reached_at_all() {
        use ProbeFailed::*;
        let rows = [
            (
                "an error status: one replica's 429 or 5xx",
                Some(true),
                false,
                Forward,
            ),
            (
                "an error status, reflector connected",
                Some(true),
                true,
                Forward,
            ),
            (
                "the connection refused or cut",
                Some(false),
                true,
                Unconfirmed,
            ),
            (
                "no answer in time, the reflector connected",
                None,
                true,
                Forward,
            ),
            (
                "no answer in time, the reflector lost it too",
                None,
                false,
                Unconfirmed,
            ),
        ];
        for (row, answered, reachable, want) in rows {
            assert_eq!(after_probe_failed(answered, reachable), want, "{row}");
        }
    }

    /// A consistent read once the reader has found how current the cache is: the cache when
    /// it is current or the upstream cannot be reached; else upstream, except for what only
    /// the cache can answer.
    #[test]
    fn consistent_reads_after_the_check() {
        use Consistency::*;
        let said = |p: Result<Placed, ApiError>| match p {
            Ok(Placed::Cache(_)) => "cache".to_string(),
            Ok(Placed::Upstream) => "upstream".to_string(),
            Err(e) => e.code().to_string(),
        };
        let rows = [
            (Cache, false, true, "cache"),
            (Unconfirmed, false, true, "cache"),
            (Upstream, false, true, "upstream"),
            (Upstream, true, true, "cache"),
            (Upstream, true, false, "429"),
        ];
        for (found, local, synced, want) in rows {
            let got = placed(found, local, synced);
            assert_eq!(said(got), want, "{found:?} local={local} synced={synced}");
        }
        // How the cache was shown current goes with the answer (marked unconfirmed, proven).
        assert_eq!(
            placed(Unconfirmed, false, true),
            Ok(Placed::Cache(Unconfirmed))
        );
    }
}
