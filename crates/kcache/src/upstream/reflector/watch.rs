//! One watch stream: [`Reflector::watch`] reads its lines and takes each by its event type.
//! A streaming list's stream begins in [`Phase::Listing`], gathering its initial events, and
//! goes on in [`Phase::Live`] from its initial-events-end bookmark; a plain watch is live from
//! its first line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;

use super::super::stream::{LineStream, MetaOnly, WatchLine};
use super::super::{Purpose, UpstreamError};
use super::state::WatchEnd;
use super::Reflector;
use crate::cache::{EventType, ListReason};
use crate::metrics::Metrics;
use crate::object::Object;

/// How every initial event of a streaming list from kube-apiserver begins (Go writes a
/// `WatchEvent`'s fields in this order): such lines are decoded in batches.
const INITIAL_EVENT: &[u8] = br#"{"type":"ADDED","object":"#;

/// Where one watch stream is.
#[derive(Debug)]
pub(super) enum Phase {
    /// A streaming list before its initial-events-end bookmark: its initial events are
    /// gathered, to be installed together, not applied one by one.
    Listing(Gathering),
    /// Events are applied to the cache as they come.
    Live,
}

/// A streaming list's initial events so far.
#[derive(Debug)]
pub(super) struct Gathering {
    /// Objects are gathered shared, as the cache keeps them: the vector holds a pointer per
    /// object rather than the object itself (a ninth of the bytes), so what it leaves behind
    /// in the allocator after the sync is small.
    pub objects: Vec<Arc<Object>>,
    /// Their JSON bytes, against the memory budget.
    pub bytes: usize,
    /// Initial events not decoded yet.
    pending: Vec<Bytes>,
    /// For the progress lines of a large list.
    started: Instant,
}

/// One watch stream's phase and the RV it would resume from.
#[derive(Debug)]
pub(super) struct Stream {
    pub phase: Phase,
    pub rv: u64,
}

/// What a bookmark leads to ([`Stream::bookmark`]).
#[derive(Debug, PartialEq)]
pub(super) enum Bookmark {
    /// One amid a streaming list's initial events: nothing to do.
    Skip,
    /// Mark the cache at the bookmark's RV; `progressed`: the watch has delivered something
    /// (an initial-events-end bookmark is not progress of a watch).
    Mark { progressed: bool },
    /// The initial events ended: install these objects at the bookmark's RV, then mark the
    /// cache there.
    Install(Vec<Arc<Object>>),
    /// The initial events ended older than the cache (see [`WatchEnd::Behind`]).
    Behind,
}

impl Stream {
    /// A stream from `rv`; with `listing`, a streaming list's.
    pub(super) fn new(rv: u64, listing: bool) -> Stream {
        let phase = if listing {
            Phase::Listing(Gathering {
                objects: Vec::new(),
                bytes: 0,
                pending: Vec::new(),
                started: Instant::now(),
            })
        } else {
            Phase::Live
        };
        Stream { phase, rv }
    }

    pub(super) fn is_listing(&self) -> bool {
        matches!(self.phase, Phase::Listing(_))
    }

    /// The upstream ended the stream: a streaming list cut before its end bookmark is
    /// truncated; a watch resumes from the newest RV it saw.
    pub(super) fn closed(&self) -> Result<WatchEnd, UpstreamError> {
        match self.phase {
            Phase::Listing(_) => Err(UpstreamError::Truncated),
            Phase::Live => Ok(WatchEnd::Closed { rv: self.rv }),
        }
    }

    /// A bookmark at `rv`, `end` if it carries the initial-events-end annotation, with the
    /// cache at `synced_rv` once it has synced. The end of a streaming list's initial events
    /// makes the stream live; they are installed unless they end older than the cache.
    pub(super) fn bookmark(&mut self, rv: u64, end: bool, synced_rv: Option<u64>) -> Bookmark {
        let step = match std::mem::replace(&mut self.phase, Phase::Live) {
            Phase::Listing(gathered) if end => {
                if synced_rv.is_some_and(|cache_rv| rv < cache_rv) {
                    Bookmark::Behind
                } else {
                    Bookmark::Install(gathered.objects)
                }
            }
            listing @ Phase::Listing(_) => {
                self.phase = listing;
                Bookmark::Skip
            }
            Phase::Live => Bookmark::Mark { progressed: !end },
        };
        self.rv = self.rv.max(rv);
        step
    }
}

/// A BOOKMARK event's object: its RV, and whether it ends a streaming list's initial events.
pub(super) fn parse_bookmark(object: &[u8]) -> Result<(u64, bool), UpstreamError> {
    let meta: MetaOnly =
        serde_json::from_slice(object).map_err(UpstreamError::decode("bookmark"))?;
    let rv: u64 = meta
        .metadata
        .resource_version
        .as_deref()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| UpstreamError::Malformed("bookmark without resourceVersion".into()))?;
    let end = meta
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("k8s.io/initial-events-end"))
        .is_some_and(|v| v == "true");
    Ok((rv, end))
}

impl Reflector {
    /// One watch stream from `rv`. With `initial`, a streaming list (from RV 0): objects are
    /// gathered until the initial-events-end bookmark and installed with `replace`, then the
    /// stream goes on as a watch.
    pub(super) async fn watch(
        &mut self,
        rv: u64,
        initial: bool,
    ) -> Result<WatchEnd, UpstreamError> {
        let (lo, hi) = self.cfg.watch_timeout;
        let timeout = rand::rng().random_range(lo.as_secs()..=hi.as_secs().max(lo.as_secs()));
        let url = self.watch_url(rv, initial, timeout);
        self.machine.progressed = false;
        let resp = self
            .upstream
            .open_accepting(&url, self.accept.watch, Purpose::ReflectorWatch)
            .await?;
        self.cache().contact().heard();
        // The upstream ends the stream after timeoutSeconds; one still open well after that
        // is on a connection that died silently (no FIN or RST reached us), so give up on it.
        let silent_after = Duration::from_secs(timeout) + self.upstream.request_timeout();
        let stream_deadline = tokio::time::Instant::now() + silent_after;
        let mut lines = LineStream::new(resp.into_body());
        let mut stream = Stream::new(rv, initial);
        loop {
            let next = if stream.is_listing() {
                let idle = self.cfg.initial_events_idle;
                match tokio::time::timeout(idle, lines.next_line()).await {
                    Ok(r) => r,
                    Err(_) => return Ok(WatchEnd::Silent),
                }
            } else {
                match tokio::time::timeout_at(stream_deadline, lines.next_line()).await {
                    Ok(r) => r,
                    Err(_) => return Err(UpstreamError::Timeout(silent_after)),
                }
            };
            let Some(line) = next? else {
                return stream.closed();
            };
            if let Some(end) = self.on_line(&mut stream, line).await? {
                return Ok(end);
            }
        }
    }

    fn watch_url(&self, rv: u64, initial: bool, timeout: u64) -> String {
        if initial {
            // RV=0 rather than "": the end bookmark of an RV="" stream waits for the upstream
            // cache to reach the etcd revision, which never happens on a quiet resource.
            format!("{}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds={timeout}{}",
                self.collection(), self.scope_query)
        } else {
            format!("{}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={timeout}{}",
                self.collection(), self.scope_query)
        }
    }

    /// One line of the stream; `Some` ends it.
    async fn on_line(
        &mut self,
        stream: &mut Stream,
        line: Bytes,
    ) -> Result<Option<WatchEnd>, UpstreamError> {
        if let Phase::Listing(gathering) = &mut stream.phase {
            // Initial events are decoded a batch at a time on the background threads, like
            // the pages of a paged list; any other line (the end bookmark) is taken in order,
            // after the batch before it.
            if line.starts_with(INITIAL_EVENT) {
                gathering.pending.push(line);
                if gathering.pending.len() < self.cfg.page_size.max(1) as usize {
                    return Ok(None);
                }
                return self.gather_pending(gathering).await;
            }
            if let Some(end) = self.gather_pending(gathering).await? {
                return Ok(Some(end));
            }
        }
        let ev = WatchLine::parse(&line)?;
        let ty = match ev.ty.as_str() {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            "BOOKMARK" => return self.on_bookmark(stream, &ev.object).await,
            "ERROR" => return self.on_error_event(stream, &ev.object).map(Some),
            other => {
                return Err(UpstreamError::Malformed(format!(
                    "unknown watch event type {other:?}"
                )))
            }
        };
        if let Phase::Listing(gathering) = &mut stream.phase {
            // An initial event laid out otherwise than the batching above expects: decoded
            // the same way, as a batch of one.
            return self.gather(vec![line], gathering).await;
        }
        Ok(self.on_event(stream, ty, &ev.object))
    }

    /// A live event: applied to the cache. `Some` ends the stream.
    fn on_event(&mut self, stream: &mut Stream, ty: EventType, object: &Bytes) -> Option<WatchEnd> {
        // Live events keep their object's bytes laid out as the event's line, which the
        // cache's history then shares.
        let built = Object::from_upstream_stripped(
            &self.cache().info,
            &self.cache().indexes,
            object,
            self.cache().strip(),
            Some(ty.as_str()),
        );
        let object = match built {
            Ok(o) => o,
            Err(e) => {
                // Skipping it would leave the cache wrong; a relist repairs it.
                tracing::warn!(resource = %self.cache().info, error = %e, "unreadable object from upstream; relisting");
                self.machine.list_reason = ListReason::UnreadableEvent;
                return Some(WatchEnd::Relist);
            }
        };
        self.event_counters[ty as usize].inc();
        stream.rv = stream.rv.max(object.rv);
        self.writer.apply(ty, object);
        if self.cache().budget().is_over() {
            return Some(WatchEnd::OverBudget);
        }
        self.machine.progressed = true;
        None
    }

    /// A BOOKMARK: see [`Stream::bookmark`]. `Some` ends the stream.
    async fn on_bookmark(
        &mut self,
        stream: &mut Stream,
        object: &[u8],
    ) -> Result<Option<WatchEnd>, UpstreamError> {
        let (rv, end) = parse_bookmark(object)?;
        let synced_rv = self.cache().is_synced().then(|| self.cache().rv());
        let progressed = match stream.bookmark(rv, end, synced_rv) {
            Bookmark::Skip => return Ok(None),
            Bookmark::Behind => return Ok(Some(WatchEnd::Behind { rv })),
            Bookmark::Install(objects) => {
                self.install(objects, rv).await;
                if self.cache().budget().is_over() {
                    return Ok(Some(WatchEnd::OverBudget));
                }
                false
            }
            Bookmark::Mark { progressed } => progressed,
        };
        self.writer.bookmark(rv);
        self.machine.progressed |= progressed;
        Ok(None)
    }

    /// An ERROR event: 410 relists, anything else fails the stream with its status.
    fn on_error_event(
        &mut self,
        stream: &Stream,
        object: &[u8],
    ) -> Result<WatchEnd, UpstreamError> {
        let status: MetaOnly = serde_json::from_slice(object).unwrap_or_default();
        match status.code {
            Some(410) => {
                Metrics::counter(&self.metrics.upstream_expired, &self.cache().info.resource).inc();
                // While gathering, the list under way goes on by pages, for the reason it was
                // started.
                if !stream.is_listing() {
                    self.machine.list_reason = ListReason::Expired;
                }
                Ok(WatchEnd::Relist)
            }
            code => Err(UpstreamError::Status {
                code: code.unwrap_or(500),
                message: status.message.unwrap_or_default(),
            }),
        }
    }

    /// Decodes the initial events not decoded yet (see [`Reflector::gather`]), with a progress
    /// line every ten thousand objects.
    async fn gather_pending(
        &self,
        gathering: &mut Gathering,
    ) -> Result<Option<WatchEnd>, UpstreamError> {
        let before = gathering.objects.len();
        let batch = std::mem::take(&mut gathering.pending);
        if let Some(end) = self.gather(batch, gathering).await? {
            return Ok(Some(end));
        }
        let after = gathering.objects.len();
        if after / 10_000 > before / 10_000 {
            self.progress(after, gathering.started);
        }
        Ok(None)
    }

    /// Decodes a batch of a streaming list's initial events on the background threads and adds
    /// their objects to `gathering`. `Some` ends the stream: an object kcache cannot read
    /// (relist, as for a live event) or the memory budget exceeded.
    async fn gather(
        &self,
        lines: Vec<Bytes>,
        gathering: &mut Gathering,
    ) -> Result<Option<WatchEnd>, UpstreamError> {
        if lines.is_empty() {
            return Ok(None);
        }
        let cache = self.cache().clone();
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
                tracing::warn!(resource = %self.cache().info, error = %e, "unreadable object from upstream; relisting");
                return Ok(Some(WatchEnd::Relist));
            }
        };
        self.event_counters[EventType::Added as usize].inc_by(built.len() as u64);
        gathering.bytes += built.iter().map(|o| o.raw().len()).sum::<usize>();
        if self.cache().budget().exceeds(gathering.bytes) {
            self.writer.over_budget_while_listing(gathering.bytes);
            return Ok(Some(WatchEnd::OverBudget));
        }
        gathering.objects.extend(built);
        Ok(None)
    }
}
