//! What resourceVersion a consistent read must see, learnt cheaply and once for every reader.
//!
//! A consistent read (LIST/GET with resourceVersion unset) must reflect every write the upstream
//! acknowledged before the read began. The upstream's resourceVersion is etcd's revision, one
//! counter for every resource, so a single number answers "what is current" for all of them:
//! kcache learns it, `P`, from a one-item consistent list (`limit=1`, resourceVersion unset).
//! A v1.28 apiserver answers that list from etcd, never from its watch cache (rule L2 of
//! docs/semantics.md: `limit` is honoured only on the etcd path); from v1.31 on the apiserver
//! answers it from its watch cache once that cache has reached etcd's current revision. Either
//! way it costs one object, not a collection, and its list RV is etcd's revision of now.
//!
//! There is one probe per cached collection, which lists that collection first: on a newer
//! apiserver the type's own watch cache is current right after a write of that type (a client
//! reading its own write), where another type's must first wait for a progress notification
//! from etcd, tens of milliseconds.
//!
//! A cache may answer the read once its RV is at least `P`. Why that is never stale:
//! - `P` is read after the read arrived (a reader only joins a probe that has not been sent
//!   yet, below) and is etcd's revision as the apiserver read it after the probe arrived, so
//!   `P` is at least the revision of every write
//!   acknowledged before the read began. That holds on one apiserver whose watch cache lags
//!   and with several apiservers behind one address alike: every replica reads the same etcd.
//! - A cache's RV is that of the last event (or bookmark) its reflector applied from the
//!   upstream's watch, which delivers a type's events in revision order. At RV `r ≥ P` the
//!   cache has therefore applied every change of its type up to `P`, whichever replica's watch
//!   cache fed it and however far that one lags.
//!
//! kcache never uses a `resourceVersion=0` list for freshness: it is answered by a watch cache,
//! possibly a lagging one (so its RV may be below an acknowledged write), and the 1.28 apiserver
//! sends the whole collection for it whatever the limit (L2).
//!
//! A type nobody writes never reaches a `P` that other types' writes moved. kcache remembers
//! that a wait for such a type ran out (`cache::Freshness`, kept on each cache); until an
//! object event of the type arrives (a bookmark is no news about its objects), its consistent
//! reads are forwarded at once, without a probe or a wait, or proven by the type's metadata
//! (`api::proof`).
//!
//! Probes are shared (`shared_call`): at most two are in flight, and every reader that arrives
//! while both run joins the next one, which is sent when one of them returns. Under load that
//! is two probes per upstream round trip per type read, whatever the read rate.
//!
//! The probe also keeps an estimate of its round trip ([`RevisionProbe::round_trip`]): a
//! one-object read from etcd on a v1.28 apiserver, which is what forwarding a consistent GET
//! costs too, so the read path can tell when waiting for a lagging cache would take longer
//! than asking the upstream. (From v1.31 on the probe is answered from the watch cache and
//! may wait for a progress notification, so there consistent GETs are forwarded without one:
//! see `UpstreamVersion::consistent_lists_from_watch_cache`.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Deserialize;

use super::{Purpose, Upstream, UpstreamError};
use crate::latency::LatencyEstimate;
use crate::shared_call::SharedCalls;

/// Why the upstream's current revision is not known. Every reader waiting on one probe gets
/// the same answer, so the upstream's error is shared.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error(transparent)]
    Upstream(Arc<UpstreamError>),
    /// No collection is cached, so there is nothing to list.
    #[error("no collection to probe")]
    NoCollection,
}

impl ProbeError {
    /// What the failure says of the upstream: `Some(true)` it answered (an error status, or a
    /// body kcache could not read), so it can answer the read itself; `Some(false)` it could
    /// not be reached (the connection was refused or cut); `None` it did not say (no answer in
    /// time, which one slow replica and an upstream that is gone look alike).
    pub(crate) fn upstream_answered(&self) -> Option<bool> {
        match self {
            ProbeError::Upstream(e) => match e.as_ref() {
                UpstreamError::Transport(_) | UpstreamError::Body(_) => Some(false),
                UpstreamError::Timeout(_) => None,
                _ => Some(true),
            },
            ProbeError::NoCollection => None,
        }
    }
}

/// The upstream's current revision, probed by listing one collection.
pub(crate) struct RevisionProbe {
    upstream: Upstream,
    /// Collection URLs the reflectors list (namespaced when a cache is), the probe's own type
    /// first; the probe lists the first one that answers.
    collections: Vec<String>,
    /// Index into `collections` of the one that answered last.
    current: AtomicUsize,
    /// The probes out, and the readers waiting for the next.
    calls: SharedCalls<Result<u64, ProbeError>>,
    /// How long a probe takes, from sending to its answer.
    round_trip: LatencyEstimate,
}

impl RevisionProbe {
    pub(crate) fn new(upstream: Upstream, collections: Vec<String>) -> Arc<RevisionProbe> {
        Arc::new(RevisionProbe {
            upstream,
            collections,
            current: AtomicUsize::new(0),
            calls: SharedCalls::default(),
            round_trip: LatencyEstimate::default(),
        })
    }

    /// The RV a cache must reach before it may answer a consistent read that starts now.
    pub(crate) async fn target(&self) -> Result<u64, ProbeError> {
        self.calls.join(|| self.timed()).await
    }

    /// The estimated round trip of a probe (None before the first answer): about what the
    /// upstream takes to answer a consistent one-object read.
    pub(crate) fn round_trip(&self) -> Option<std::time::Duration> {
        self.round_trip.get()
    }

    /// One probe, its round trip recorded when it is answered.
    async fn timed(&self) -> Result<u64, ProbeError> {
        let sent = std::time::Instant::now();
        let result = self.probe().await;
        if result.is_ok() {
            self.round_trip.record(sent.elapsed());
        }
        result
    }

    /// One `limit=1` consistent list; when the upstream refuses it (a 403 or 404: one
    /// collection it no longer serves or lets kcache read must not blind every consistent
    /// read) the next collection is tried. Other errors end the probe at once: the upstream is
    /// not answering, and trying every collection would only multiply the wait.
    async fn probe(&self) -> Result<u64, ProbeError> {
        let n = self.collections.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..n {
            let at = (first + i) % n;
            match self.list_rv(&self.collections[at]).await {
                Ok(rv) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(rv);
                }
                Err(e) if matches!(e.code(), Some(403 | 404)) => last = Some(e),
                Err(e) => return Err(ProbeError::Upstream(Arc::new(e))),
            }
        }
        Err(last.map_or(ProbeError::NoCollection, |e| {
            ProbeError::Upstream(Arc::new(e))
        }))
    }

    async fn list_rv(&self, collection: &str) -> Result<u64, UpstreamError> {
        #[derive(Deserialize)]
        struct Head {
            metadata: super::ListMeta,
        }
        let url = format!("{collection}?limit=1");
        let body = self.upstream.get(&url, Purpose::Probe).await?;
        let head: Head = serde_json::from_slice(&body)
            .map_err(UpstreamError::decode(format!("list of {collection}")))?;
        // A one-item page of a collection of several carries the upstream's own token: the
        // form kcache's tokens copy.
        if let Some(token) = head
            .metadata
            .continue_token
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            self.upstream.version().learn_token(token);
        }
        head.metadata
            .resource_version
            .parse()
            .map_err(|_| UpstreamError::Malformed(format!("list of {collection}: resourceVersion")))
    }
}
