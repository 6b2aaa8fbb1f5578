//! The list + watch loop that keeps one resource's cache equal to the upstream.
//!
//! An explicit state machine. Its states are [`State`]; each transition is a function of what
//! the state's list, watch or check came to, on [`Machine`] (the facts the transitions depend
//! on besides the state: whether streaming lists are used, lists installed, whether the current
//! watch progressed, relists in a row, why the next list is made). [`Reflector::step`] runs one
//! state's I/O and hands its outcome to the transition; the unit tests check each transition.
//!
//! ```text
//!  start ──┬──► Sync ◄──────────────────────────────────────────────────┐
//!          │     ├──► StreamingList ── end bookmark: install ──┐         │ 410 or unreadable
//!          │     │         │ rejected, silent,                 │         │ event: Backoff{Sync},
//!          │     │         │ 410 before install, lagging       │         │ at once if the watch
//!          │     │         ▼                                   ▼         │ progressed
//!          │     └──► PagedList ──── install ───────────► Watching{rv} ──┘
//!          │                                              ▲   │    ▲
//!          └──► Resume{rv} ── upstream at or past rv ─────┘   └────┘ closed at rv': Watching{rv'}
//!                  └── upstream behind rv ──► Sync
//!
//!  a failed request ──► Backoff{then} ──► then       (a 403 or a 404 may end the loop instead)
//!  the cache over its memory budget ──► Stopped
//! ```
//!
//! State by state, what happened and where the loop goes:
//!
//! | State | What happened | Next |
//! |---|---|---|
//! | start | the cache is over its budget | Stopped |
//! | start | the cache was restored from disk at `rv` | Resume{rv} |
//! | start | otherwise | Sync |
//! | Sync | streaming lists in use | StreamingList |
//! | Sync | otherwise | PagedList |
//! | StreamingList | rejected (400/422) | PagedList, and paged lists from now on |
//! | StreamingList | silent for `initial_events_idle` before its end bookmark | PagedList, and paged lists from now on |
//! | StreamingList | 410 before its initial events were installed | PagedList |
//! | StreamingList | its initial events ended older than the synced cache (Behind) | PagedList |
//! | StreamingList, PagedList | installed, and the stream closed at `rv` (a paged list: at its RV) | Watching{rv} |
//! | StreamingList, PagedList | the cache went over its budget | Stopped |
//! | StreamingList | 410 or an unreadable event after the install | as Watching's relist |
//! | StreamingList, PagedList | failed after the install | Backoff{Watching{cache RV}} |
//! | StreamingList, PagedList | failed before any install | Backoff{Sync} |
//! | Watching{rv} | the stream closed at `rv'` (timeoutSeconds) | Watching{rv'} |
//! | Watching{rv} | 410 or an unreadable event | Backoff{Sync}: at once if the watch progressed, else after a backoff growing with each such watch in a row |
//! | Watching{rv} | the cache went over its budget | Stopped |
//! | Watching{rv} | failed | Backoff{Watching{max(rv, cache RV)}} |
//! | Resume{rv} | the upstream's revision is at or past `rv` | Watching{rv} |
//! | Resume{rv} | the upstream's revision is behind `rv` | Sync, listed for [`RestoredAhead`](crate::cache::ListReason::RestoredAhead) |
//! | Resume{rv} | failed | Backoff{Resume{rv}} |
//! | Backoff{then, attempt} | waited [`ReflectorConfig::backoff`] of `attempt` (none for 0) | `then` |
//!
//! A failed request (the rows "failed") waits the backoff of attempt 1; it ends the loop
//! instead when it was a 403 and [`ReflectorConfig::stop_when_forbidden`] is set
//! ([`State::Forbidden`]), or a 404 for a type discovery no longer lists ([`State::NotServed`]);
//! see [`Machine::after_error`].
//!
//! Within one watch stream a streaming list has a phase of its own ([`watch::Phase`]): its
//! initial events are gathered (decoded in batches on the background threads) until the
//! initial-events-end bookmark, installed together, and the same stream then goes on live.
//!
//! Sync uses the streaming-list form (`sendInitialEvents`) when the upstream supports it and
//! falls back to a paged consistent list when it rejects the parameter. After the first sync a
//! relist does not drop the cache: `Writer::replace` turns the difference into ordinary
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
//! The states, their facts and transitions are in [`state`], with no I/O; one watch stream's
//! reading is in [`watch`]; this file holds the lists and the loop that runs them.

mod state;
#[cfg(test)]
mod tests;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{enc, Purpose, Upstream, UpstreamError};
use crate::background::Background;
use crate::cache::{EventType, ResourceCache, Writer};
use crate::error::Report;
use crate::metrics::{Metrics, TypeLabels};
use crate::object::Object;
use state::{backoff, Failed, Machine, Note, State, Transition, WatchEnd};

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
    /// End the loop on a 403 from the type's list or watch (`Ended::Forbidden`) instead of
    /// retrying it: for a type cached on demand, which kcache's identity may lack the RBAC to
    /// follow (a configured type is retried: its RBAC is an operator's mistake to fix).
    pub stop_when_forbidden: bool,
}

impl ReflectorConfig {
    /// How long to wait before retry number `attempt` (from 1): exponential from
    /// `backoff_initial` up to `backoff_max`, with jitter over its upper half, so that many
    /// reflectors failing together do not retry together.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
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

/// Why a reflector's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The cache went over its memory budget: the type stays passed through until restart.
    OverBudget,
    /// The upstream no longer serves the type (a CustomResourceDefinition deleted): whoever
    /// runs the reflector drops the cache and follows discovery until the type is back.
    NotServed,
    /// The upstream refused the type's list or watch (403), with
    /// [`ReflectorConfig::stop_when_forbidden`] set.
    Forbidden,
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
pub(crate) struct Reflector {
    upstream: Upstream,
    /// The cache's one writer, through which the reflector reads the cache too: only the
    /// reflector changes the cache. Shared with the background jobs that install its lists,
    /// and nothing else.
    writer: Arc<Writer>,
    cfg: ReflectorConfig,
    /// The facts the loop's transitions depend on besides its state.
    machine: Machine,
    /// Query parameters restricting what is cached (the resource's scope), pre-encoded.
    scope_query: String,
    /// The media types its lists and watches ask for (see [`accepts`]).
    accept: Accepts,
    /// `kcache_upstream_events_total` by event type, looked up once.
    event_counters: [prometheus_client::metrics::counter::Counter; 3],
    /// The running kcache's metrics.
    metrics: Arc<Metrics>,
    /// Where lists are decoded and installed: see [`Background`].
    background: Background,
}

impl Reflector {
    pub(crate) fn new(
        upstream: Upstream,
        writer: Writer,
        cfg: ReflectorConfig,
        metrics: Arc<Metrics>,
        background: Background,
    ) -> Reflector {
        let cache = writer.cache();
        let scope_query = super::scope_query(cache);
        let accept = accepts(cache);
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
            machine: Machine::new(&cfg),
            upstream,
            writer: Arc::new(writer),
            cfg,
            scope_query,
            accept,
        }
    }

    /// The cache the reflector keeps.
    fn cache(&self) -> &Arc<ResourceCache> {
        self.writer.cache()
    }

    fn collection(&self) -> String {
        super::collection_path(self.cache())
    }

    /// Run until the task is dropped, the cache goes over its memory budget, or the upstream
    /// stops serving the type.
    pub(crate) async fn run(mut self) -> Ended {
        let restored = self.cache().is_synced().then(|| self.cache().rv());
        let mut state = Machine::start(self.cache().budget().is_over(), restored);
        if let State::Resume { rv } = state {
            tracing::info!(resource = %self.cache().info, rv, objects = self.cache().len(),
                "restored from disk; resuming the watch");
        }
        let ended = loop {
            if let Some(ended) = state.ended() {
                break ended;
            }
            state = self.step(state).await;
        };
        if ended == Ended::OverBudget {
            if let Some(over) = self.cache().budget().overage() {
                tracing::warn!(resource = %self.cache().info, bytes = over.bytes, budget = over.budget,
                    "over its memoryBudget: no longer cached, its objects dropped; every read of it \
                     is passed through to the upstream until kcache restarts");
            }
        }
        ended
    }

    /// Runs one state's list, watch, check or wait, and goes where its outcome leads.
    async fn step(&mut self, state: State) -> State {
        let transition = match state {
            State::Sync => return self.machine.sync(),
            State::StreamingList => {
                let end = self.watch(0, true).await;
                self.machine.after_streaming_list(end, self.cache().rv())
            }
            State::PagedList => {
                let end = self.paged_sync().await;
                self.machine.after_list(end, self.cache().rv())
            }
            State::Watching { rv } => {
                let end = self.watch(rv, false).await;
                self.machine.after_watch(rv, end, self.cache().rv())
            }
            State::Resume { rv } => {
                let current = self.upstream_revision().await;
                self.machine.after_resume(rv, current)
            }
            State::Backoff { then, attempt } => return backoff(&self.cfg, *then, attempt).await,
            // Terminal: `run` ends before stepping them.
            State::Stopped | State::NotServed | State::Forbidden => return state,
        };
        self.take(transition).await
    }

    /// Takes a transition: logs why, and for a failure counts and logs the error and asks
    /// discovery whether a 404's type is still served.
    async fn take(&self, transition: Transition) -> State {
        match transition {
            Transition::To(next) => next,
            Transition::Noted(note, next) => {
                self.log_note(note);
                next
            }
            Transition::Failed {
                failed,
                error,
                then,
            } => {
                self.count_error(&error);
                self.log_failure(failed, &error);
                self.after_error(&error, then).await
            }
        }
    }

    fn log_note(&self, note: Note) {
        let info = &self.cache().info;
        match note {
            Note::StreamingRejected { message } => tracing::info!(resource = %info, %message,
                "upstream does not support streaming lists; using paged lists"),
            Note::StreamingSilent => {
                tracing::warn!(resource = %info, idle = ?self.cfg.initial_events_idle,
                "streaming list silent before its initial-events-end bookmark; using paged lists")
            }
            Note::LaggingWatchCache { rv } => {
                tracing::info!(resource = %info, rv, cache_rv = self.cache().rv(),
                "streaming relist answered by a lagging watch cache; listing consistently")
            }
            Note::WatchExpired { rv } => {
                tracing::info!(resource = %info, rv, "upstream watch expired; relisting")
            }
            Note::RestoredAhead { stored, upstream } => {
                tracing::warn!(resource = %info, stored, upstream,
                "the state restored from disk is ahead of the upstream; relisting")
            }
        }
    }

    fn log_failure(&self, failed: Failed, error: &UpstreamError) {
        let (info, error) = (&self.cache().info, Report(error));
        match failed {
            Failed::Sync => tracing::warn!(resource = %info, error = %error, "sync failed"),
            Failed::Watch => tracing::warn!(resource = %info, error = %error, "watch failed"),
            Failed::Resume => tracing::warn!(resource = %info, error = %error,
                "upstream not reachable; serving the state restored from disk meanwhile"),
        }
    }

    /// After a failed list or watch: see [`Machine::after_error`]. Discovery is asked on a 404
    /// only.
    async fn after_error(&self, e: &UpstreamError, then: State) -> State {
        let code = e.code();
        let undiscovered = code == Some(404) && {
            let info = &self.cache().info;
            let found = self
                .upstream
                .discover(&info.group, &info.version, &info.resource)
                .await;
            matches!(found, Err(UpstreamError::UnknownResource(_)))
        };
        self.machine.after_error(code, undiscovered, then)
    }

    /// A progress line while a large initial list is coming in.
    fn progress(&self, so_far: usize, started: std::time::Instant) {
        let secs = started.elapsed().as_secs_f64().max(0.001);
        tracing::info!(resource = %self.cache().info, objects = so_far,
            rate = (so_far as f64 / secs) as u64, "syncing");
    }

    fn count_error(&self, e: &UpstreamError) {
        self.cache().contact().lost();
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
            &self.cache().info.resource,
            reason,
        );
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
            self.cache().info
        )))?;
        head.metadata.resource_version.parse().map_err(|_| {
            UpstreamError::Malformed(format!("list of {}: resourceVersion", self.cache().info))
        })
    }

    /// Consistent paged list, installed in the cache: then `Closed` at the list's RV (where
    /// the watch starts), or `OverBudget`.
    async fn paged_sync(&mut self) -> Result<WatchEnd, UpstreamError> {
        let info = self.cache().info.clone();
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
            self.cache().contact().heard();
            let cache = self.cache().clone();
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
            if self.cache().budget().exceeds(bytes) {
                self.writer.over_budget_while_listing(bytes);
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
        if self.cache().budget().is_over() {
            return Ok(WatchEnd::OverBudget);
        }
        Ok(WatchEnd::Closed { rv })
    }

    async fn install(&mut self, objects: Vec<Arc<Object>>, rv: u64) {
        self.machine.installs += 1;
        let n = objects.len();
        let first = !self.cache().is_synced();
        // Recorded before the list is installed, so whoever sees the new state also finds why
        // it was listed.
        self.cache().last_list().record(self.machine.list_reason);
        // Building the new state is O(n) in the collection (the sort, the map, the posting sets
        // and the diff against the old state; see `cache::Writer::replace`): on the
        // background threads, so that the worker this task runs on goes on serving requests. A
        // worker busy for the length of a 100k-object install stalls the requests queued on it,
        // whatever type they read.
        let writer = self.writer.clone();
        let summary = self
            .background
            .run(move || writer.replace(objects, rv))
            .await;
        let name = self.cache().info.to_string();
        if first {
            tracing::info!(resource = %name, objects = n, rv, "synced");
        } else {
            Metrics::counter(&self.metrics.relists, &self.cache().info.resource).inc();
            tracing::info!(resource = %name, objects = n, rv, added = summary.added,
                modified = summary.modified, deleted = summary.deleted, reset = summary.reset, "relisted");
        }
    }
}
