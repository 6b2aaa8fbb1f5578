//! The list + watch loop that keeps one resource's cache equal to the upstream.
//!
//! An explicit state machine:
//!
//! ```text
//!            ┌──────────── 410 Gone / unreadable event ─────────────┐
//!            ▼                                                      │
//!  ┌──► Sync ──(streaming list: initial events + end bookmark,     │
//!  │      │     or paged list)──► cache.replace ──► Watching{rv} ──┘
//!  │      │ error                                    │   ▲   │ stream ended cleanly
//!  │      ▼                                          │   └───┘ (timeoutSeconds): same rv
//!  └── Backoff{then} ◄────────── transport / 5xx ────┘
//! ```
//!
//! Sync uses the streaming-list form (`sendInitialEvents`) when the upstream supports it and
//! falls back to a paged consistent list when it rejects the parameter. After the first sync a
//! relist does not drop the cache: `ResourceCache::replace` turns the difference into ordinary
//! events, so downstream watchers stay exact across upstream 410s. A streaming relist (at
//! resourceVersion 0, from a watch cache) that ends older than the cache was answered by a
//! lagging watch cache, not by a restored upstream: kcache then lists consistently (etcd) instead,
//! and only a consistent list older than the cache is taken for a restore.
//!
//! A cache loaded from disk at start (`persist`) is already synced: its reflector begins in
//! Resume, which asks the upstream's current revision (one `limit=1` list) and goes on to
//! Watching at the stored RV, or to Sync when the upstream is behind the stored state (another
//! cluster, or a restore); a 410 in Watching relists like any other.
//!
//! A resource with a memory budget (`resources[].memoryBudget`) whose list or events take its
//! cache over it stops for good: the cache empties itself ([`Budget::is_over`](crate::cache::Budget::is_over)),
//! and the loop ends. A list is checked while it comes in, so one far over the budget is not
//! held whole first.
//!
//! A list or watch answered 404 whose type discovery no longer lists (its
//! CustomResourceDefinition deleted) ends the loop too ([`Ended::NotServed`]): retrying a type
//! that is gone would cost the upstream a request every backoff step. Whoever runs the
//! reflector drops the cache and follows discovery until the type is back.
//!
//! Why one file of this length: the state machine above and every transition of it, as in
//! kube-runtime's watcher; a transition split from the others could not be checked against
//! the diagram.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::stream::{LineStream, MetaOnly, WatchLine};
use super::{enc, Purpose, Upstream, UpstreamError};
use crate::background::Background;
use crate::cache::{EventType, ListReason, ResourceCache};
use crate::error::Report;
use crate::metrics::{Metrics, TypeLabels};
use crate::object::Object;

/// Whether to use the streaming-list form of the initial sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamingList {
    /// Try it; fall back to a paged list if the upstream rejects it.
    #[default]
    Auto,
    Never,
}

/// Tuning of a reflector.
#[derive(Debug, Clone)]
pub struct ReflectorConfig {
    pub page_size: u32,
    pub streaming_list: StreamingList,
    /// Watches are re-opened after a random time in this range, as client-go does (5–10 min).
    pub watch_timeout: (Duration, Duration),
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Give up on a streaming list whose stream has said nothing for this long before its
    /// initial-events-end bookmark, and list instead. The apiserver sends the initial events
    /// back to back and the bookmark right after them; a pause this long means the bookmark is
    /// not coming soon (a v1.28 apiserver in front of etcd 3.4 was seen holding it back until
    /// the type's next write, which for a quiet type may be never). Measured from the last line,
    /// not the start, so a large collection's initial events are never cut short.
    pub initial_events_idle: Duration,
    /// End the loop on a 403 from the type's list or watch ([`Ended::Forbidden`]) instead of
    /// retrying it: for a type cached on demand, which kcache's identity may lack the RBAC to
    /// follow (a configured type is retried: its RBAC is an operator's mistake to fix).
    pub stop_when_forbidden: bool,
}

impl ReflectorConfig {
    /// How long to wait before retry number `attempt` (from 1): exponential from
    /// `backoff_initial` up to `backoff_max`, with jitter over its upper half, so that many
    /// reflectors failing together do not retry together.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .backoff_initial
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.backoff_max);
        let ms = exp.as_millis().max(1) as u64;
        Duration::from_millis(rand::rng().random_range(ms / 2..=ms))
    }
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            page_size: 500,
            streaming_list: StreamingList::Auto,
            watch_timeout: (Duration::from_secs(300), Duration::from_secs(600)),
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
            initial_events_idle: Duration::from_secs(2),
            stop_when_forbidden: false,
        }
    }
}

/// The states of the loop; see the module docs.
#[derive(Debug)]
enum State {
    Sync,
    /// A cache restored from disk at `rv`: check that the upstream is not behind it before
    /// resuming the watch there.
    Resume {
        rv: u64,
    },
    Watching {
        rv: u64,
    },
    Backoff {
        then: Box<State>,
        attempt: u32,
    },
    /// The cache went over its memory budget: the loop ends.
    Stopped,
    /// The upstream no longer serves the type (its list or watch answered 404 and discovery
    /// no longer lists it): the loop ends.
    NotServed,
    /// The upstream refused the list or watch (403) and the config says to stop on it.
    Forbidden,
}

/// Why a reflector's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The cache went over its memory budget: the type stays passed through until restart.
    OverBudget,
    /// The upstream no longer serves the type (a CustomResourceDefinition deleted): whoever
    /// runs the reflector drops the cache and follows discovery until the type is back.
    NotServed,
    /// The upstream refused the type's list or watch (403), with
    /// [`ReflectorConfig::stop_when_forbidden`] set.
    Forbidden,
}

/// How a watch stream ended.
enum WatchEnd {
    /// The server closed it (timeoutSeconds); resume from this RV.
    Closed { rv: u64 },
    /// 410 or an event kcache could not take: the cache must relist.
    Relist,
    /// A streaming relist's initial events ended at an RV older than the cache's: answered by
    /// a watch cache that lags (another replica's, or this one's behind etcd), not installed.
    Behind { rv: u64 },
    /// The list or an event took the cache over its memory budget: stop.
    OverBudget,
}

/// What a reflector's lists and watches accept.
struct Accepts {
    list: &'static str,
    watch: &'static str,
}

/// JSON objects, or for a metadata-only cache their PartialObjectMetadata, as client-go's
/// metadata informers ask for it: the upstream then sends (and is read for) only metadata.
/// Plain JSON stays acceptable after it, so an upstream that cannot answer the metadata form
/// sends whole objects, which the cache turns into it (see `object::Strip::metadata_only`).
fn accepts(cache: &ResourceCache) -> Accepts {
    if cache.strip().metadata_only {
        Accepts {
            list:
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
            watch: "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
        }
    } else {
        Accepts {
            list: "application/json",
            watch: "application/json",
        }
    }
}

/// How every initial event of a streaming list from kube-apiserver begins (Go writes a
/// `WatchEvent`'s fields in this order): such lines are decoded in batches.
const INITIAL_EVENT: &[u8] = br#"{"type":"ADDED","object":"#;

/// One page of a list, decoded for a cache.
struct Page {
    meta: super::ListMeta,
    objects: Vec<Arc<Object>>,
    /// The objects' JSON bytes, against the memory budget.
    bytes: usize,
}

impl Page {
    /// Parses `body` and builds its objects as `cache` keeps them: the CPU of a list, run on
    /// the [`Background`] threads.
    fn decode(cache: &ResourceCache, body: &bytes::Bytes) -> Result<Page, UpstreamError> {
        #[derive(Deserialize)]
        struct Raw<'a> {
            metadata: super::ListMeta,
            #[serde(borrow)]
            items: Option<Vec<&'a RawValue>>,
        }
        let info = &cache.info;
        let raw: Raw<'_> = serde_json::from_slice(body)
            .map_err(UpstreamError::decode(format!("list of {info}")))?;
        let items = raw.items.unwrap_or_default();
        let mut objects = Vec::with_capacity(items.len());
        let mut bytes = 0;
        for item in items {
            let o = Object::from_upstream_stripped(
                info,
                &cache.indexes,
                &body.slice_ref(item.get().as_bytes()),
                cache.strip(),
                None,
            )
            .map_err(|source| UpstreamError::Object {
                what: info.to_string(),
                source,
            })?;
            bytes += o.raw().len();
            objects.push(Arc::new(o));
        }
        Ok(Page {
            meta: raw.metadata,
            objects,
            bytes,
        })
    }
}

/// Keeps one cache in step with the upstream.
pub struct Reflector {
    upstream: Upstream,
    cache: Arc<ResourceCache>,
    cfg: ReflectorConfig,
    streaming_supported: bool,
    /// Query parameters restricting what is cached (the resource's scope), pre-encoded.
    scope_query: String,
    /// The media types its lists and watches ask for (see [`accepts`]).
    accept: Accepts,
    /// Lists installed so far: tells whether a failed streaming sync had already synced.
    installs: u64,
    /// Why the next list is made: set where the cause is seen, recorded in the cache with the
    /// list it led to (see `cache::LastList`).
    list_reason: ListReason,
    /// Whether the current watch has delivered a live event or bookmark.
    progressed: bool,
    /// Watches in a row that ended in a 410 without delivering anything: relists are backed
    /// off by it, so an upstream answering every watch with 410 is not relisted in a hot loop.
    relist_streak: u32,
    /// `kcache_upstream_events_total` by event type, looked up once.
    event_counters: [prometheus_client::metrics::counter::Counter; 3],
    /// The running kcache's metrics.
    metrics: Arc<Metrics>,
    /// Where lists are decoded and installed: see [`Background`].
    background: Background,
}

impl Reflector {
    pub fn new(
        upstream: Upstream,
        cache: Arc<ResourceCache>,
        cfg: ReflectorConfig,
        metrics: Arc<Metrics>,
        background: Background,
    ) -> Reflector {
        let scope_query = super::scope_query(&cache);
        let accept = accepts(&cache);
        let event_counters =
            [EventType::Added, EventType::Modified, EventType::Deleted].map(|ty| {
                metrics.upstream_events.get_or_create_owned(&TypeLabels {
                    resource: cache.info.resource.clone(),
                    r#type: ty.as_str(),
                })
            });
        Reflector {
            event_counters,
            metrics,
            background,
            streaming_supported: cfg.streaming_list == StreamingList::Auto,
            upstream,
            cache,
            cfg,
            scope_query,
            accept,
            installs: 0,
            list_reason: ListReason::Startup,
            progressed: false,
            relist_streak: 0,
        }
    }

    fn collection(&self) -> String {
        super::collection_path(&self.cache)
    }

    /// Run until the task is dropped, the cache goes over its memory budget, or the upstream
    /// stops serving the type.
    pub async fn run(mut self) -> Ended {
        // A cache restored from disk resumes its watch from the stored RV: the upstream sends
        // what changed since, or a 410 that makes it relist (see `persist`). One restored over
        // its budget has nothing to follow.
        let mut state = if self.cache.budget().is_over() {
            State::Stopped
        } else if self.cache.is_synced() {
            tracing::info!(resource = %self.cache.info, rv = self.cache.rv(), objects = self.cache.len(),
                "restored from disk; resuming the watch");
            State::Resume {
                rv: self.cache.rv(),
            }
        } else {
            State::Sync
        };
        while !matches!(state, State::Stopped | State::NotServed | State::Forbidden) {
            state = self.step(state).await;
        }
        match state {
            State::NotServed => return Ended::NotServed,
            State::Forbidden => return Ended::Forbidden,
            _ => {}
        }
        if let Some(over) = self.cache.budget().overage() {
            tracing::warn!(resource = %self.cache.info, bytes = over.bytes, budget = over.budget,
                "over its memoryBudget: no longer cached, its objects dropped; every read of it \
                 is passed through to the upstream until kcache restarts");
        }
        Ended::OverBudget
    }

    /// After a failed list or watch: a 404 whose type discovery no longer lists ends the loop
    /// (the type's CRD was deleted: retrying would cost the upstream a request every backoff
    /// step for as long as it stays deleted); a 403 ends it if the config says so; anything
    /// else is retried after `then`'s backoff.
    async fn after_error(&self, e: &UpstreamError, then: State) -> State {
        if e.code() == Some(403) && self.cfg.stop_when_forbidden {
            return State::Forbidden;
        }
        if e.code() == Some(404) {
            let info = &self.cache.info;
            if let Err(UpstreamError::UnknownResource(_)) = self
                .upstream
                .discover(&info.group, &info.version, &info.resource)
                .await
            {
                return State::NotServed;
            }
        }
        State::Backoff {
            then: Box::new(then),
            attempt: 1,
        }
    }

    async fn step(&mut self, state: State) -> State {
        let name = self.cache.info.to_string();
        match state {
            State::Sync => {
                let installs = self.installs;
                let result = if self.streaming_supported {
                    self.streaming_sync().await
                } else {
                    self.paged_sync().await
                };
                match result {
                    Ok(WatchEnd::Closed { rv }) => State::Watching { rv },
                    Ok(WatchEnd::OverBudget) => State::Stopped,
                    Ok(WatchEnd::Relist | WatchEnd::Behind { .. }) => self.relist_state(),
                    // A streaming list that failed after its initial events were installed is
                    // an ordinary watch failure: resume from the cache RV, do not relist.
                    Err(e) if self.installs > installs => {
                        self.count_error(&e);
                        tracing::warn!(resource = %name, error = %Report(&e), "watch failed");
                        let rv = self.cache.rv();
                        self.after_error(&e, State::Watching { rv }).await
                    }
                    Err(e) => {
                        self.count_error(&e);
                        tracing::warn!(resource = %name, error = %Report(&e), "sync failed");
                        self.after_error(&e, State::Sync).await
                    }
                }
            }
            State::Watching { rv } => match self.watch(rv, false).await {
                Ok(WatchEnd::Closed { rv }) => State::Watching { rv },
                Ok(WatchEnd::OverBudget) => State::Stopped,
                Ok(WatchEnd::Relist | WatchEnd::Behind { .. }) => {
                    tracing::info!(resource = %name, rv, "upstream watch expired; relisting");
                    self.relist_state()
                }
                Err(e) => {
                    self.count_error(&e);
                    tracing::warn!(resource = %name, error = %Report(&e), "watch failed");
                    let rv = self.cache.rv().max(rv);
                    self.after_error(&e, State::Watching { rv }).await
                }
            },
            // A state from disk whose RV the upstream has not reached is from another
            // cluster, or from before a restore of this one: a watch from there would wait
            // for a revision that never comes (or be refused with "Too large resource
            // version" again and again), serving the stored state for good. Relist instead,
            // which replaces it as an upstream restore (history dropped, watches ended).
            State::Resume { rv } => match self.upstream_revision().await {
                Ok(current) if current >= rv => State::Watching { rv },
                Ok(current) => {
                    tracing::warn!(resource = %name, stored = rv, upstream = current,
                        "the state restored from disk is ahead of the upstream; relisting");
                    self.list_reason = ListReason::RestoredAhead;
                    State::Sync
                }
                Err(e) => {
                    self.count_error(&e);
                    tracing::warn!(resource = %name, error = %Report(&e),
                        "upstream not reachable; serving the state restored from disk meanwhile");
                    self.after_error(&e, State::Resume { rv }).await
                }
            },
            State::Backoff { then, attempt } => {
                if attempt > 0 {
                    tokio::time::sleep(self.backoff(attempt)).await;
                }
                *then
            }
            // Terminal: `run` ends before stepping them.
            State::Stopped => State::Stopped,
            State::NotServed => State::NotServed,
            State::Forbidden => State::Forbidden,
        }
    }

    /// Where to go after a watch that ended in a relist: at once when the watch had been
    /// working, else after a growing backoff (an upstream that expires every watch at once
    /// would otherwise be listed in a loop).
    fn relist_state(&mut self) -> State {
        if self.progressed {
            self.relist_streak = 0;
        } else {
            self.relist_streak = self.relist_streak.saturating_add(1);
        }
        State::Backoff {
            then: Box::new(State::Sync),
            attempt: self.relist_streak,
        }
    }

    /// A progress line while a large initial list is coming in.
    fn progress(&self, so_far: usize, started: std::time::Instant) {
        let secs = started.elapsed().as_secs_f64().max(0.001);
        tracing::info!(resource = %self.cache.info, objects = so_far,
            rate = (so_far as f64 / secs) as u64, "syncing");
    }

    fn count_error(&self, e: &UpstreamError) {
        self.cache.contact().lost();
        let reason = match e {
            UpstreamError::Status { .. } => "status",
            UpstreamError::Decode { .. }
            | UpstreamError::Object { .. }
            | UpstreamError::Protobuf { .. }
            | UpstreamError::Malformed(_) => "decode",
            _ => "transport",
        };
        Metrics::reason(
            &self.metrics.upstream_errors,
            &self.cache.info.resource,
            reason,
        );
    }

    fn backoff(&self, attempt: u32) -> Duration {
        self.cfg.backoff(attempt)
    }

    /// The upstream's current revision: the RV of a one-item consistent list (what the
    /// freshness probe asks, and counted with it).
    async fn upstream_revision(&self) -> Result<u64, UpstreamError> {
        let url = format!("{}?limit=1{}", self.collection(), self.scope_query);
        let body = self
            .upstream
            .get_accepting(&url, self.accept.list, Purpose::Probe)
            .await?;
        #[derive(Deserialize)]
        struct Head {
            metadata: super::ListMeta,
        }
        let head: Head = serde_json::from_slice(&body).map_err(UpstreamError::decode(format!(
            "list of {}",
            self.cache.info
        )))?;
        head.metadata.resource_version.parse().map_err(|_| {
            UpstreamError::Malformed(format!("list of {}: resourceVersion", self.cache.info))
        })
    }

    /// Consistent paged list, installed in the cache: then `Closed` at the list's RV (where
    /// the watch starts), or `OverBudget`.
    async fn paged_sync(&mut self) -> Result<WatchEnd, UpstreamError> {
        let info = self.cache.info.clone();
        let mut objects = Vec::new();
        let mut bytes = 0usize;
        let mut list_rv: Option<u64> = None;
        let mut cont: Option<String> = None;
        let started = std::time::Instant::now();
        loop {
            let mut url = format!(
                "{}?limit={}{}",
                self.collection(),
                self.cfg.page_size,
                self.scope_query
            );
            if let Some(c) = &cont {
                url.push_str(&format!("&continue={}", enc(c)));
            }
            let body = match self
                .upstream
                .get_accepting(&url, self.accept.list, Purpose::ReflectorList)
                .await
            {
                Ok(b) => b,
                // The snapshot behind our continue token was compacted: start over.
                Err(UpstreamError::Status { code: 410, .. }) if cont.is_some() => {
                    Metrics::counter(&self.metrics.upstream_expired, &info.resource).inc();
                    objects.clear();
                    bytes = 0;
                    list_rv = None;
                    cont = None;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.cache.contact().heard();
            let cache = self.cache.clone();
            let page = self
                .background
                .run(move || Page::decode(&cache, &body))
                .await?;
            if list_rv.is_none() {
                list_rv = Some(page.meta.resource_version.parse().map_err(|_| {
                    UpstreamError::Malformed(format!("list of {info}: resourceVersion"))
                })?);
            }
            bytes += page.bytes;
            objects.extend(page.objects);
            if self.cache.budget().exceeds(bytes) {
                self.cache.over_budget_while_listing(bytes);
                return Ok(WatchEnd::OverBudget);
            }
            cont = page.meta.continue_token.filter(|c| !c.is_empty());
            if let Some(c) = &cont {
                self.upstream.version().learn_token(c);
            }
            if cont.is_none() {
                break;
            }
            self.progress(objects.len(), started);
        }
        let rv = list_rv.unwrap_or(0);
        self.install(objects, rv).await;
        if self.cache.budget().is_over() {
            return Ok(WatchEnd::OverBudget);
        }
        Ok(WatchEnd::Closed { rv })
    }

    async fn install(&mut self, objects: Vec<Arc<Object>>, rv: u64) {
        self.installs += 1;
        let n = objects.len();
        let first = !self.cache.is_synced();
        // Recorded before the list is installed, so whoever sees the new state also finds why
        // it was listed.
        self.cache.last_list().record(self.list_reason);
        // Building the new state is O(n) in the collection (the sort, the map, the posting sets
        // and the diff against the old state; see `cache::ResourceCache::replace`): on the
        // background threads, so that the worker this task runs on goes on serving requests. A
        // worker busy for the length of a 100k-object install stalls the requests queued on it,
        // whatever type they read.
        let cache = self.cache.clone();
        let summary = self
            .background
            .run(move || cache.replace(objects, rv))
            .await;
        let name = self.cache.info.to_string();
        if first {
            tracing::info!(resource = %name, objects = n, rv, "synced");
        } else {
            Metrics::counter(&self.metrics.relists, &self.cache.info.resource).inc();
            tracing::info!(resource = %name, objects = n, rv, added = summary.added,
                modified = summary.modified, deleted = summary.deleted, reset = summary.reset, "relisted");
        }
    }

    /// Streaming list: one watch that sends every object, the initial-events-end bookmark, and
    /// then live events. Falls back to a paged list when the upstream rejects it.
    async fn streaming_sync(&mut self) -> Result<WatchEnd, UpstreamError> {
        let installs = self.installs;
        match self.watch(0, true).await {
            Err(UpstreamError::Status { code, message }) if code == 422 || code == 400 => {
                tracing::info!(resource = %self.cache.info, %message,
                    "upstream does not support streaming lists; using paged lists");
                self.streaming_supported = false;
                self.paged_sync().await
            }
            // Expired before its initial events were installed: the streaming form cannot be
            // had right now, a paged list can (looping on the stream would leave the cache
            // without any list for as long as the upstream keeps answering 410).
            Ok(WatchEnd::Relist) if self.installs == installs => self.paged_sync().await,
            // A lagging watch cache answered: going back to its state would look like an
            // upstream restore (history dropped, every downstream watch ended with 410). A
            // consistent paged list is answered from etcd, so it is at least as new as
            // anything the cache saw; only if even that is older was the upstream restored.
            Ok(WatchEnd::Behind { rv }) => {
                tracing::info!(resource = %self.cache.info, rv, cache_rv = self.cache.rv(),
                    "streaming relist answered by a lagging watch cache; listing consistently");
                self.paged_sync().await
            }
            other => other,
        }
    }

    /// Decodes a batch of a streaming list's initial events on the background threads and adds
    /// their objects to `objects`. `Some` ends the stream: an object kcache cannot read
    /// (relist, as for a live event) or the memory budget exceeded.
    async fn gather(
        &self,
        lines: Vec<bytes::Bytes>,
        objects: &mut Vec<Arc<Object>>,
        gathered_bytes: &mut usize,
    ) -> Result<Option<WatchEnd>, UpstreamError> {
        if lines.is_empty() {
            return Ok(None);
        }
        let cache = self.cache.clone();
        let decoded = self
            .background
            .run(
                move || -> Result<Result<Vec<Arc<Object>>, _>, UpstreamError> {
                    let mut built = Vec::with_capacity(lines.len());
                    for line in &lines {
                        let ev = WatchLine::parse(line)?;
                        match Object::from_upstream_stripped(
                            &cache.info,
                            &cache.indexes,
                            &ev.object,
                            cache.strip(),
                            None,
                        ) {
                            Ok(o) => built.push(Arc::new(o)),
                            Err(e) => return Ok(Err(e)),
                        }
                    }
                    Ok(Ok(built))
                },
            )
            .await?;
        let built = match decoded {
            Ok(built) => built,
            Err(e) => {
                tracing::warn!(resource = %self.cache.info, error = %e, "unreadable object from upstream; relisting");
                return Ok(Some(WatchEnd::Relist));
            }
        };
        self.event_counters[EventType::Added as usize].inc_by(built.len() as u64);
        *gathered_bytes += built.iter().map(|o| o.raw().len()).sum::<usize>();
        if self.cache.budget().exceeds(*gathered_bytes) {
            self.cache.over_budget_while_listing(*gathered_bytes);
            return Ok(Some(WatchEnd::OverBudget));
        }
        objects.extend(built);
        Ok(None)
    }

    /// One watch stream. With `initial`, a streaming list: objects are gathered until the
    /// initial-events-end bookmark and installed with `replace`.
    async fn watch(&mut self, rv: u64, initial: bool) -> Result<WatchEnd, UpstreamError> {
        let (lo, hi) = self.cfg.watch_timeout;
        let timeout = rand::rng().random_range(lo.as_secs()..=hi.as_secs().max(lo.as_secs()));
        let url = if initial {
            // RV=0 rather than "": the end bookmark of an RV="" stream waits for the upstream
            // cache to reach the etcd revision, which never happens on a quiet resource.
            format!("{}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds={timeout}{}",
                self.collection(), self.scope_query)
        } else {
            format!("{}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={timeout}{}",
                self.collection(), self.scope_query)
        };
        self.progressed = false;
        let resp = self
            .upstream
            .open_accepting(&url, self.accept.watch, Purpose::ReflectorWatch)
            .await?;
        self.cache.contact().heard();
        // The upstream ends the stream after timeoutSeconds; one still open well after that
        // is on a connection that died silently (no FIN or RST reached us), so give up on it.
        let silent_after = Duration::from_secs(timeout) + self.upstream.request_timeout();
        let stream_deadline = tokio::time::Instant::now() + silent_after;
        let mut lines = LineStream::new(resp.into_body());
        let info = self.cache.info.clone();
        // Objects are gathered shared, as the cache keeps them: the vector holds a pointer per
        // object rather than the object itself (a ninth of the bytes), so what it leaves behind
        // in the allocator after the sync is small.
        let mut gathering: Option<Vec<Arc<Object>>> = initial.then(Vec::new);
        // Their JSON bytes, against the memory budget.
        let mut gathered_bytes = 0usize;
        // Initial events not decoded yet.
        let mut pending: Vec<bytes::Bytes> = Vec::new();
        let mut rv = rv;
        let sync_started = std::time::Instant::now();
        loop {
            let next = if gathering.is_some() {
                match tokio::time::timeout(self.cfg.initial_events_idle, lines.next_line()).await {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!(resource = %info, idle = ?self.cfg.initial_events_idle,
                            "streaming list silent before its initial-events-end bookmark; using paged lists");
                        self.streaming_supported = false;
                        return Ok(WatchEnd::Relist);
                    }
                }
            } else {
                match tokio::time::timeout_at(stream_deadline, lines.next_line()).await {
                    Ok(r) => r,
                    Err(_) => return Err(UpstreamError::Timeout(silent_after)),
                }
            };
            let Some(line) = next? else {
                return if gathering.is_some() {
                    Err(UpstreamError::Truncated)
                } else {
                    Ok(WatchEnd::Closed { rv })
                };
            };
            if let Some(objects) = gathering.as_mut() {
                // Initial events are decoded a batch at a time on the background threads, like
                // the pages of a paged list; any other line (the end bookmark) is taken in
                // order, after the batch before it.
                let added = line.starts_with(INITIAL_EVENT);
                if added {
                    pending.push(line.clone());
                }
                if !added || pending.len() >= self.cfg.page_size.max(1) as usize {
                    let before = objects.len();
                    let batch = std::mem::take(&mut pending);
                    if let Some(end) = self.gather(batch, objects, &mut gathered_bytes).await? {
                        return Ok(end);
                    }
                    if objects.len() / 10_000 > before / 10_000 {
                        self.progress(objects.len(), sync_started);
                    }
                }
                if added {
                    continue;
                }
            }
            let ev = WatchLine::parse(&line)?;
            let ty = match ev.ty.as_str() {
                "ADDED" => EventType::Added,
                "MODIFIED" => EventType::Modified,
                "DELETED" => EventType::Deleted,
                "BOOKMARK" => {
                    let meta: MetaOnly = serde_json::from_slice(&ev.object)
                        .map_err(UpstreamError::decode("bookmark"))?;
                    let brv: u64 = meta
                        .metadata
                        .resource_version
                        .as_deref()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| {
                            UpstreamError::Malformed("bookmark without resourceVersion".into())
                        })?;
                    let end = meta
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("k8s.io/initial-events-end"))
                        .is_some_and(|v| v == "true");
                    if end {
                        if let Some(objects) = gathering.take() {
                            if self.cache.is_synced() && brv < self.cache.rv() {
                                return Ok(WatchEnd::Behind { rv: brv });
                            }
                            self.install(objects, brv).await;
                            if self.cache.budget().is_over() {
                                return Ok(WatchEnd::OverBudget);
                            }
                        }
                    }
                    if gathering.is_none() {
                        self.cache.bookmark(brv);
                        self.progressed |= !end;
                    }
                    rv = rv.max(brv);
                    continue;
                }
                "ERROR" => {
                    let status: MetaOnly = serde_json::from_slice(&ev.object).unwrap_or_default();
                    return match status.code {
                        Some(410) => {
                            Metrics::counter(&self.metrics.upstream_expired, &info.resource).inc();
                            // While gathering, the list under way goes on by pages, for
                            // the reason it was started.
                            if gathering.is_none() {
                                self.list_reason = ListReason::Expired;
                            }
                            Ok(WatchEnd::Relist)
                        }
                        code => Err(UpstreamError::Status {
                            code: code.unwrap_or(500),
                            message: status.message.unwrap_or_default(),
                        }),
                    };
                }
                other => {
                    return Err(UpstreamError::Malformed(format!(
                        "unknown watch event type {other:?}"
                    )))
                }
            };
            // An initial event laid out otherwise than the batching above expects: decoded
            // the same way, as a batch of one.
            if let Some(objects) = gathering.as_mut() {
                if let Some(end) = self
                    .gather(vec![line], objects, &mut gathered_bytes)
                    .await?
                {
                    return Ok(end);
                }
                continue;
            }
            // Live events keep their object's bytes laid out as the event's line, which the
            // cache's history then shares.
            let built = Object::from_upstream_stripped(
                &info,
                &self.cache.indexes,
                &ev.object,
                self.cache.strip(),
                Some(ty.as_str()),
            );
            let object = match built {
                Ok(o) => o,
                Err(e) => {
                    // Skipping it would leave the cache wrong; a relist repairs it.
                    tracing::warn!(resource = %info, error = %e, "unreadable object from upstream; relisting");
                    self.list_reason = ListReason::UnreadableEvent;
                    return Ok(WatchEnd::Relist);
                }
            };
            self.event_counters[ty as usize].inc();
            rv = rv.max(object.rv);
            self.cache.apply(ty, object);
            if self.cache.budget().is_over() {
                return Ok(WatchEnd::OverBudget);
            }
            self.progressed = true;
        }
    }
}
