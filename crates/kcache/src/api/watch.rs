//! WATCH from the cache.
//!
//! A watcher is a cursor into the cache's shared event history, not a queue of its own: it
//! copies nothing but `Arc`s and sends each event's pre-built line (shared by every watcher).
//! The cursor is placed by resourceVersion once, where the watch starts, and from then on moves
//! by the history's sequence numbers (`cache::Cursor`), so events that share an RV — the deletes
//! a relist makes up — are each delivered exactly once however the reads are batched.
//! The watcher runs inside its response body (see `watch_body`): a slow client stalls only its
//! own body; if it falls behind the retained history it gets a 410 ERROR event and relists, as a client of
//! the apiserver does after being dropped. Nothing is ever skipped silently.
//!
//! A watch of a type that goes over its memory budget ends cleanly, without an event, as at
//! its timeout: its client re-watches from the last resourceVersion it got, which kcache then
//! passes through to the upstream, which has that RV in its history (the cache's RVs are the
//! upstream's), so the client misses nothing and need not relist. The watcher checks for that
//! after each read of the cache and before sending what it read (see
//! [`Budget::is_over`](crate::cache::Budget::is_over)).
//!
//! A watcher whose selector pins an indexed value is routed instead (see `cache::dispatch`): it
//! is woken only by events for that value, taken from a small queue, and reads the history as
//! above only at its start and after the queue overflowed.
//!
//! Why one file of this length: most of it is one type, the `Watcher` loop of a downstream
//! watch (its start, catching up from history, the routed queue, bookmarks, ending), whose
//! steps share its state and are read in order.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use rand::Rng;
use tokio::time::{Instant, Sleep};

use super::filter::Filter;
use super::params::{parse_rv, ListOptions};
use super::response;
use super::watch_body::{Outlet, WatchBody};
use crate::cache::{
    write_event, AtError, Cursor, Event, EventType, Mirror, ResourceCache, Snapshot, Subscriber,
    BY_NAME,
};
use crate::index::IndexSet;
use crate::metrics::Metrics;
use crate::object::Object;
use crate::resource::{json_str, ResourceInfo};
use crate::selector::{FieldOp, LabelOp};
use crate::status::ApiError;
use crate::table::{IncludeObject, Printer};
use crate::upstream::UpstreamVersion;

/// Initial events, and the live events a watcher catches up on after falling behind, are
/// sent in chunks of about this size. Such chunks are the watcher's own (a live event sent
/// alone is its shared line), so a client that stops reading pins what hyper has queued of
/// them (at most 16 buffers): with 16 KiB chunks, well under 0.5 MiB per stalled watcher
/// (with the channel this body replaced, 1,000 watchers stalled at RV=0 measured +445 MiB
/// with 16 KiB chunks, +825 MiB with 64 KiB). 16 KiB is also HTTP/2's default frame size.
const CHUNK: usize = 16 * 1024;
/// Events taken from history per lock.
const BATCH: usize = 256;

/// Watch tuning.
#[derive(Debug, Clone)]
pub(crate) struct WatchConfig {
    /// Periodic bookmarks (the apiserver: about a minute).
    pub bookmark_interval: Duration,
    /// How long a watch waits for the cache to reach a requested RV before the 504.
    pub rv_wait: Duration,
    /// The upstream's version: bookmark objects are written as it writes them.
    pub upstream: UpstreamVersion,
    /// How watchers of a type with a large fan-out gather its changes into fewer writes.
    pub fanout: Fanout,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            bookmark_interval: Duration::from_secs(60),
            rv_wait: Duration::from_secs(3),
            upstream: UpstreamVersion::default(),
            fanout: Fanout::default(),
        }
    }
}

/// Where a watch starts.
enum Start {
    /// Synthetic ADDED for every object of the snapshot, then (if requested) the
    /// initial-events-end bookmark at the snapshot's RV, then the events from `cursor` (the
    /// first after the snapshot).
    Initial {
        snapshot: Snapshot,
        cursor: Cursor,
        end_bookmark: bool,
    },
    /// The events from `cursor`, current up to `rv` (a watch of what happens from now on).
    Now { cursor: Cursor, rv: u64 },
    /// The events after this RV (a client resuming from it; see `ResourceCache::cursor_after`).
    After { rv: u64 },
    /// One ERROR event, then the end.
    Error(ApiError),
}

/// How often a watcher of a type with a large fan-out writes.
///
/// Every change of a type wakes each of its watchers that no index routes (every kube-proxy
/// watches every EndpointSlice), and each writes the change to its own connection: a write,
/// a TLS record, an HTTP/2 frame and a wake-up of the connection's task per watcher per
/// change. What an event's bytes cost is small beside that (measured 2026-11-28: about 19 µs
/// of kcache's CPU a delivery at 500 watchers, one event a write). So when a type's writes
/// would exceed `writes_per_second`, each of its watchers writes at most once per `watchers /
/// writes_per_second` (at most `max_delay`), and the changes in between go out with that
/// write, in order. Below that rate nothing waits: a watcher whose last write is older than
/// its gap writes at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fanout {
    /// Writes a second, summed over a type's watchers, above which they gather.
    pub writes_per_second: u64,
    /// The longest an event waits to be gathered with later ones; zero: never.
    pub max_delay: Duration,
}

impl Default for Fanout {
    fn default() -> Self {
        Fanout {
            writes_per_second: 20_000,
            max_delay: Duration::from_millis(100),
        }
    }
}

impl Fanout {
    /// The least time between two writes of one of `watchers` watchers woken by every change.
    pub(crate) fn gap(&self, watchers: usize) -> Duration {
        if self.max_delay.is_zero() || self.writes_per_second == 0 {
            return Duration::ZERO;
        }
        let gap = Duration::from_secs_f64(watchers as f64 / self.writes_per_second as f64);
        // Tokio's timers count whole milliseconds: a shorter hold would wait a millisecond.
        if gap < Duration::from_millis(1) {
            return Duration::ZERO;
        }
        gap.min(self.max_delay)
    }
}

/// Open a watch on `cache`. A watch whose initial events must be consistent (resourceVersion
/// unset with the end bookmark asked for: W6b) comes here only once the cache has reached the
/// upstream's current revision (see `ConsistentReader::decide`), so its bookmark is never below it.
pub(super) async fn watch(
    cache: Arc<ResourceCache>,
    filter: Filter,
    opts: &ListOptions,
    cfg: &WatchConfig,
    stopping: tokio::sync::watch::Receiver<bool>,
    encoding: Encoding,
    metrics: &Arc<Metrics>,
) -> Result<Response, ApiError> {
    if !cache.is_synced() {
        return Err(ApiError::NotReady);
    }
    let rv_param = opts.resource_version.as_deref();
    // With RV unset or 0 the recorded server sends initial events even without
    // sendInitialEvents (W7), and then also the end bookmark.
    let initial = opts
        .send_initial_events
        .unwrap_or(matches!(rv_param, None | Some("0")));
    let end_bookmark = opts.allow_bookmarks && initial;
    // Registered before the start is fixed, like the subscription: no event can fall between.
    let routed = route(&filter, &cache.indexes).map(|(index, value)| Registration {
        sub: cache.register(index, &value),
        cache: cache.clone(),
        index,
        value,
    });
    let subscription = cache.subscribe();
    let epoch = cache.epoch();
    let start = match (initial, rv_param) {
        (true, None | Some("0")) => {
            let (snapshot, cursor) = cache.snapshot_with_cursor();
            Start::Initial {
                snapshot,
                cursor,
                end_bookmark,
            }
        }
        (true, Some(rv)) => {
            let n = parse_rv(rv)?;
            // W6c: headers wait, then a 200 with the 504 as an ERROR event.
            match cache.wait_for_rv(n, cfg.rv_wait).await {
                Ok(()) => {
                    let (snapshot, cursor) = cache.snapshot_with_cursor();
                    Start::Initial {
                        snapshot,
                        cursor,
                        end_bookmark,
                    }
                }
                Err(current) => Start::Error(ApiError::TooLargeResourceVersion {
                    requested: n,
                    current,
                }),
            }
        }
        (false, None | Some("0")) => {
            let (cursor, rv) = cache.position();
            Start::Now { cursor, rv }
        }
        (false, Some(rv)) => Start::After { rv: parse_rv(rv)? },
    };
    // When the client leaves it open, the apiserver picks between its minimum request timeout
    // and twice that.
    let server_chosen = Duration::from_secs(rand::rng().random_range(1800..=3600));
    let deadline = opts.timeout.deadline(Instant::now(), server_chosen);
    let resource = cache.info.resource.clone();
    let content_type = match encoding {
        Encoding::Protobuf(_) => crate::protobuf::WATCH_MEDIA_TYPE,
        _ => "application/json",
    };
    // The watcher is built inside the body, around the outlet the body reads from.
    let body = WatchBody::new(move |out| {
        Watcher {
            sent: Metrics::counter(&metrics.watch_events_sent, &resource),
            unsent_count: 0,
            gathered: Gathered::default(),
            open: OpenWatch::new(resource, metrics.clone()),
            cache,
            filter,
            out,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            allow_bookmarks: opts.allow_bookmarks,
            bookmark_interval: cfg.bookmark_interval,
            upstream: cfg.upstream.clone(),
            epoch,
            subscription,
            stopping: (Box::pin(async move {
                let mut stopping = stopping;
                let _ = stopping.wait_for(|s| *s).await;
            }) as BoxedSignal)
                .fuse(),
            encoding,
            first_table: true,
            routed,
            fanout: cfg.fanout,
            next_write: None,
        }
        .run(start)
    });
    Ok(response::stream_as(Body::from_stream(body), content_type))
}

/// The (index, value) a watcher can be routed by: an equality its every selected object
/// satisfies on its name (the [`BY_NAME`] route), an indexed field, configured index path or
/// label. An event can change what such a watcher sees only if its old or new object has that
/// value.
fn route(f: &Filter, indexes: &IndexSet) -> Option<(usize, String)> {
    // One object's name first: nothing pins fewer events.
    let name = f
        .field
        .requirements()
        .iter()
        .find(|r| r.op == FieldOp::Equals && r.field == "metadata.name")
        .map(|r| (BY_NAME, r.value.clone()));
    if name.is_some() {
        return name;
    }
    let field = f
        .field
        .requirements()
        .iter()
        .filter(|r| r.op == FieldOp::Equals)
        .find_map(|r| Some((indexes.by_field(&r.field)?, r.value.clone())));
    let path = || {
        f.indexed
            .iter()
            .find(|r| r.op == FieldOp::Equals)
            .map(|r| (r.index, r.value.clone()))
    };
    let label = || {
        f.label
            .requirements()
            .iter()
            .find_map(|r| match (r.op, r.values.as_slice()) {
                (LabelOp::Equals | LabelOp::In, [v]) => {
                    Some((indexes.by_label(&r.key)?, v.clone()))
                }
                _ => None,
            })
    };
    field.or_else(path).or_else(label)
}

/// A watcher's place in the cache's dispatch table, removed when the watcher ends.
struct Registration {
    cache: Arc<ResourceCache>,
    index: usize,
    value: String,
    sub: Arc<Subscriber>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.cache.unregister(self.index, &self.value, &self.sub);
    }
}

/// How a watch's events are written (from the request's Accept header).
pub(super) enum Encoding {
    /// Watch events with the objects as JSON: the shared, pre-built lines.
    Json,
    /// Each object as a one-row Table (`kubectl get -w`).
    Table {
        printer: Arc<Printer>,
        include: IncludeObject,
    },
    /// Each object as PartialObjectMetadata (metadata informers).
    Metadata,
    /// Kubernetes protobuf frames (E9) made from the mirror's bytes, built once per event and
    /// shared as the JSON lines are.
    Protobuf(Arc<Mirror>),
}

/// How a watcher sees one event (W2).
#[derive(Clone, Copy)]
enum Pick {
    /// As it happened.
    AsIs,
    /// The object started matching the selector: ADDED with its new state.
    Entered,
    /// It stopped matching: DELETED with its previous state at the new RV.
    Left,
}

/// Why a waiting watcher woke up.
enum Wake {
    Changed,
    Bookmark,
    End(&'static str),
}

/// Counts a watch in `kcache_watchers` while it lives, and why it ended.
struct OpenWatch {
    resource: String,
    reason: &'static str,
    metrics: Arc<Metrics>,
}

impl OpenWatch {
    fn new(resource: String, metrics: Arc<Metrics>) -> OpenWatch {
        Metrics::gauge_add(&metrics.watchers, &resource, 1);
        OpenWatch {
            resource,
            reason: "client",
            metrics,
        }
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        Metrics::gauge_add(&self.metrics.watchers, &self.resource, -1);
        Metrics::reason(&self.metrics.watchers_closed, &self.resource, self.reason);
    }
}

struct Watcher {
    /// `kcache_watch_events_sent_total` of the resource, shared by all its watchers: added to
    /// once per wait rather than per event, so that watchers on different cores do not take
    /// turns with one counter's cache line at every delivery.
    sent: prometheus_client::metrics::counter::Counter,
    unsent_count: u64,
    /// Event lines taken from the cache but not yet handed to the body: a watcher that is
    /// behind sends what it catches up on in chunks of up to [`CHUNK`] bytes, one write each,
    /// instead of one write per event (see [`Watcher::send_event`]).
    gathered: Gathered,
    open: OpenWatch,
    cache: Arc<ResourceCache>,
    filter: Filter,
    /// Where chunks go: the response body.
    out: Outlet,
    deadline: Instant,
    /// One timer, for the earliest of the deadline, the next bookmark and the end of the
    /// initial-events wait. It and the shutdown signal live as long as the watcher, so that
    /// waiting between two events registers nothing but the cache's change notification.
    timer: Pin<Box<Sleep>>,
    allow_bookmarks: bool,
    bookmark_interval: Duration,
    /// The upstream's version, for the form of bookmark objects.
    upstream: UpstreamVersion,
    epoch: u64,
    subscription: tokio::sync::watch::Receiver<u64>,
    stopping: futures::future::Fuse<BoxedSignal>,
    encoding: Encoding,
    /// Whether the next Table sent is this watch's first (only it carries the columns).
    first_table: bool,
    /// Set when the watcher receives its events through index dispatch rather than by reading
    /// every event of the history.
    routed: Option<Registration>,
    fanout: Fanout,
    /// While its type's fan-out makes it gather events (see [`Fanout`]): the earliest its next
    /// write of events may go, a gap after its last.
    next_write: Option<Instant>,
}

/// Event lines waiting to go out together.
#[derive(Default)]
struct Gathered {
    lines: Vec<Bytes>,
    bytes: usize,
}

impl Gathered {
    /// Add a line; the bytes gathered so far.
    fn push(&mut self, line: Bytes) -> usize {
        self.bytes += line.len();
        self.lines.push(line);
        self.bytes
    }

    /// The gathered lines as one chunk, if any.
    fn take(&mut self) -> Option<Bytes> {
        let chunk = match self.lines.len() {
            0 => return None,
            1 => self.lines.pop(),
            _ => {
                let mut buf = bytes::BytesMut::with_capacity(self.bytes);
                for line in self.lines.drain(..) {
                    buf.extend_from_slice(&line);
                }
                Some(buf.freeze())
            }
        };
        self.bytes = 0;
        chunk
    }
}

/// The shutdown signal, as a future the watcher keeps.
type BoxedSignal = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Drop for Watcher {
    fn drop(&mut self) {
        self.count_sent();
    }
}

impl Watcher {
    /// Send one chunk, after the event lines gathered before it. (A client that leaves drops
    /// the body and with it this watcher, at whatever await it is: the reason stays
    /// "client".)
    async fn send(&mut self, chunk: Bytes) {
        self.send_gathered().await;
        self.out.send(chunk).await
    }

    /// Send the event lines gathered so far as one chunk (a single line as it is: the event's
    /// shared bytes, not a copy).
    async fn send_gathered(&mut self) -> bool {
        match self.gathered.take() {
            Some(chunk) => {
                self.out.send(chunk).await;
                true
            }
            None => false,
        }
    }

    /// Whether the watch's time is up (checked per batch of events, not per event: a clock
    /// read per delivery is measurable at 10k watchers; the timer ends an idle watch).
    fn time_is_up(&mut self) -> bool {
        let up = Instant::now() >= self.deadline;
        if up {
            self.open.reason = "timeout";
        }
        up
    }

    /// Whether the type went over its memory budget, or the upstream stopped serving it: then
    /// the watch ends cleanly, without an event (see the module docs). Asked after every read
    /// of the cache.
    fn cache_ended(&mut self) -> bool {
        if self.cache.budget().is_over() {
            self.open.reason = "over_budget";
            return true;
        }
        if self.cache.is_not_served() {
            self.open.reason = "not_served";
            return true;
        }
        false
    }

    /// Count one event line and gather it; the lines go out together when they fill a chunk,
    /// before any other line (a bookmark, an ERROR), and when the watcher has caught up (see
    /// [`Watcher::catch_up`]). On HTTP/1.1 each chunk the body yields is one chunked-encoding
    /// write, and on HTTP/2 one DATA frame: a watcher woken after several events costs one of
    /// each for all of them.
    async fn send_event(&mut self, line: Bytes) {
        self.unsent_count += 1;
        if self.gathered.push(line) >= CHUNK {
            self.send_gathered().await;
        }
    }

    fn count_sent(&mut self) {
        if self.unsent_count > 0 {
            self.sent.inc_by(std::mem::take(&mut self.unsent_count));
        }
    }

    async fn run(mut self, start: Start) {
        // `cursor`: the next event not yet given; `rv`: what the watcher is current up to
        // (its bookmarks' RV).
        let (mut cursor, mut rv) = match start {
            Start::Error(e) => {
                self.open.reason = "error";
                let line = self.error_line(&e);
                self.send(line).await;
                return;
            }
            Start::Now { cursor, rv } => (cursor, rv),
            Start::After { rv } => match self.place(rv).await {
                Some(cursor) => (cursor, rv),
                None => return,
            },
            Start::Initial {
                snapshot,
                cursor,
                end_bookmark,
            } => {
                if !self.send_initial(&snapshot).await {
                    return;
                }
                if end_bookmark {
                    if let Some(line) = self.bookmark(snapshot.rv, true) {
                        self.send(line).await;
                    }
                }
                (cursor, snapshot.rv)
            }
        };
        let started_at = rv;
        let mut last_bookmark = rv;
        let mut next_bookmark = self.next_bookmark_time(Instant::now());
        // A routed watcher reads history first (from its start) and after a queue overflow.
        let mut from_history = true;
        loop {
            // Mark the current state seen before reading, so a change during the drain wakes us.
            self.subscription.borrow_and_update();
            if !self.catch_up(&mut cursor, &mut rv, &mut from_history).await {
                return;
            }
            match self.wait(next_bookmark).await {
                Wake::Changed => {
                    if !self.hold().await {
                        return;
                    }
                }
                Wake::Bookmark => {
                    // A routed watcher's cursor moves only with its own events: bring it to
                    // the cache's position first.
                    if self.routed.is_some()
                        && !self.catch_up(&mut cursor, &mut rv, &mut from_history).await
                    {
                        return;
                    }
                    // Only when the resource moved past what this watcher last heard (W5).
                    if rv > last_bookmark && rv > started_at {
                        last_bookmark = rv;
                        if let Some(line) = self.bookmark(rv, false) {
                            self.send(line).await;
                        }
                    }
                    next_bookmark = self.next_bookmark_time(Instant::now());
                }
                Wake::End(reason) => {
                    self.open.reason = reason;
                    return;
                }
            }
        }
    }

    /// Place a watch resuming after `rv`: its cursor once the cache has reached `rv` (a watch
    /// from an RV the cache has not seen yet waits, as the apiserver's does); None when the
    /// watch ended instead — with a 410 ERROR event when `rv` is older than the history.
    async fn place(&mut self, rv: u64) -> Option<Cursor> {
        loop {
            self.subscription.borrow_and_update();
            let placed = self.cache.cursor_after(rv, true, self.epoch);
            if self.cache_ended() {
                return None;
            }
            match placed {
                Ok(cursor) => return Some(cursor),
                Err(AtError::TooOld { oldest }) => {
                    self.open.reason = "error";
                    let line = self.expired(rv, oldest);
                    self.send(line).await;
                    return None;
                }
                Err(AtError::Future { .. }) => {}
            }
            let reason = tokio::select! {
                changed = self.subscription.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => "error",
                },
                _ = self.timer.as_mut() => "timeout",
                _ = &mut self.stopping => "shutdown",
            };
            self.open.reason = reason;
            return None;
        }
    }

    /// Deliver everything up to the cache's position: a routed watcher takes its queued events
    /// (or, the first time and after an overflow, reads history); others read every event of
    /// the history from `cursor`. Leaves `rv` at what the watcher is then current up to. False
    /// when the watch is over.
    async fn catch_up(
        &mut self,
        cursor: &mut Cursor,
        rv: &mut u64,
        from_history: &mut bool,
    ) -> bool {
        let going_on = self.deliver_pending(cursor, rv, from_history).await;
        if self.send_gathered().await {
            let gap = self.gap();
            self.next_write = (!gap.is_zero()).then(|| Instant::now() + gap);
        }
        going_on
    }

    /// The least time between two of this watcher's writes of events (see [`Fanout`]): zero
    /// for a routed watcher, which wakes for its own events only.
    fn gap(&self) -> Duration {
        match self.routed {
            Some(_) => Duration::ZERO,
            None => self.fanout.gap(self.cache.broadcast_watchers()),
        }
    }

    /// Woken by a change less than a gap after the last write: wait out the gap, so that the
    /// changes of the meantime go out with this one. False when kcache is shutting down.
    async fn hold(&mut self) -> bool {
        let Some(next_write) = self.next_write else {
            return true;
        };
        let until = next_write.min(self.deadline);
        if until <= Instant::now() {
            return true;
        }
        self.timer.as_mut().reset(until);
        tokio::select! {
            _ = self.timer.as_mut() => true,
            _ = &mut self.stopping => {
                self.open.reason = "shutdown";
                false
            }
        }
    }

    /// [`Watcher::catch_up`]'s reading, with the lines it delivers gathered.
    async fn deliver_pending(
        &mut self,
        cursor: &mut Cursor,
        rv: &mut u64,
        from_history: &mut bool,
    ) -> bool {
        if let Some(sub) = self.routed.as_ref().map(|r| r.sub.clone()) {
            if !*from_history {
                if self.time_is_up() {
                    return false;
                }
                let (end, now) = self.cache.position();
                let taken = sub.take(&end);
                if self.cache_ended() {
                    return false;
                }
                if let Ok(events) = taken {
                    for ev in events {
                        // Already delivered by the history read that preceded the queue.
                        if cursor.covers(ev.seq) {
                            continue;
                        }
                        if !self.deliver(&ev, *rv).await {
                            return false;
                        }
                    }
                    cursor.advance_to(end);
                    *rv = (*rv).max(now);
                    return true;
                }
            }
            *from_history = false;
        }
        loop {
            if self.time_is_up() {
                return false;
            }
            let read = self.cache.read_from(cursor, BATCH);
            if self.cache_ended() {
                return false;
            }
            match read {
                // History never answers "future" for a cursor; both mean the watch cannot go on:
                // it fell so far behind that history moved past it, or history was reset.
                Err(AtError::TooOld { oldest }) | Err(AtError::Future { current: oldest }) => {
                    self.open.reason = "slow";
                    let line = self.expired(*rv, oldest);
                    self.send(line).await;
                    return false;
                }
                Ok(batch) => {
                    for ev in &batch.events {
                        if !self.deliver(ev, *rv).await {
                            return false;
                        }
                    }
                    if let Some(now) = batch.caught_up {
                        *rv = (*rv).max(now);
                        return true;
                    }
                }
            }
        }
    }

    /// Sleep until something needs this watcher's attention.
    async fn wait(&mut self, next_bookmark: Instant) -> Wake {
        self.count_sent();
        // Caught up and long-lived from here on: on HTTP/2, run in the connection's task
        // with its other watches (the initial events, a large list's worth, stayed on a task
        // of their own, in parallel with the connection's other work).
        crate::conn_task::join_connection();
        let mut due = self.deadline;
        if self.allow_bookmarks {
            due = due.min(next_bookmark);
        }
        if self.timer.deadline() != due {
            self.timer.as_mut().reset(due);
        }
        let sub = self.routed.as_ref().map(|r| r.sub.clone());
        // A routed watcher wakes for its own events only.
        let global = sub.is_none();
        let own = async {
            match &sub {
                Some(s) => s.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = self.subscription.changed(), if global => {
                if changed.is_err() { Wake::End("error") } else { Wake::Changed }
            }
            _ = own => Wake::Changed,
            _ = self.timer.as_mut() => {
                // What came due: the end first, else a bookmark.
                if Instant::now() >= self.deadline {
                    Wake::End("timeout")
                } else if self.allow_bookmarks {
                    Wake::Bookmark
                } else {
                    Wake::Changed
                }
            }
            // Shutting down: end the stream cleanly (no event), so the client re-watches from
            // its last RV against another replica.
            _ = &mut self.stopping => Wake::End("shutdown"),
        }
    }

    /// About every interval, and once shortly before the deadline.
    fn next_bookmark_time(&self, now: Instant) -> Instant {
        let periodic = now + self.bookmark_interval;
        let before_end = self
            .deadline
            .checked_sub(Duration::from_secs(2))
            .unwrap_or(now);
        if before_end > now && before_end < periodic {
            before_end
        } else {
            periodic
        }
    }

    /// Synthetic ADDED events for the snapshot, batched into chunks (the client reads them as
    /// a burst; per-event flushing matters for live events only).
    async fn send_initial(&mut self, snap: &Snapshot) -> bool {
        let mut buf = BytesMut::with_capacity(CHUNK + 4096);
        let range = self.filter.keys(None);
        // A selective watch (a kubelet's node) reads its index instead of every object.
        let indexed: Option<Vec<Arc<Object>>> = snap
            .postings
            .as_ref()
            .and_then(|p| super::plan::plan(&self.filter, &self.cache.indexes, p))
            .map(|c| {
                c.keys(range.clone())
                    .filter_map(|k| snap.objects.get(k).cloned())
                    .collect()
            });
        let items: Box<dyn Iterator<Item = &Arc<Object>> + Send> = match &indexed {
            Some(objects) => Box::new(objects.iter()),
            None => Box::new(snap.objects.range(range).map(|(_, o)| o)),
        };
        if let Encoding::Protobuf(mirror) = &self.encoding {
            let mirror = mirror.clone();
            let selected: Vec<Arc<Object>> =
                items.filter(|o| self.filter.selects(o)).cloned().collect();
            let versions = super::protobuf::versions(&selected);
            let Some(found) = mirror
                .wait_all(&versions, super::protobuf::MIRROR_WATCH_WAIT)
                .await
            else {
                self.lost(snap.rv).await;
                return false;
            };
            let api_version = self.cache.info.api_version();
            for obj in found {
                super::protobuf::write_added(&self.cache.info, &api_version, &obj, &mut buf);
                if !self.send_full_chunk(&mut buf).await {
                    return false;
                }
            }
            self.send_rest(buf).await;
            return true;
        }
        for o in items {
            if !self.filter.selects(o) {
                continue;
            }
            if let Encoding::Json = self.encoding {
                write_event(&mut buf, "ADDED", o.raw());
            } else {
                let line = self.encode("ADDED", o.raw());
                buf.extend_from_slice(&line);
            }
            if !self.send_full_chunk(&mut buf).await {
                return false;
            }
        }
        self.send_rest(buf).await;
        true
    }

    /// Initial events go out in chunks: send `buf` once it holds one. False when the watch's
    /// time is up (nothing more is sent).
    async fn send_full_chunk(&mut self, buf: &mut BytesMut) -> bool {
        if buf.len() >= CHUNK {
            if self.time_is_up() {
                return false;
            }
            self.send(buf.split().freeze()).await;
        }
        true
    }

    /// The last, partial chunk of initial events.
    async fn send_rest(&mut self, buf: BytesMut) {
        if !buf.is_empty() {
            self.send(buf.freeze()).await;
        }
    }

    /// Whether and how this watcher sees an event: selector transitions per W2.
    fn pick(&self, ev: &Event) -> Option<Pick> {
        let f = &self.filter;
        if let Some(ns) = &f.namespace {
            if ev.object.namespace() != ns {
                return None;
            }
        }
        if f.selects_all() {
            return Some(Pick::AsIs);
        }
        self.cache.count_evaluation();
        let now = f.selects(&ev.object);
        let before = ev.prev.as_ref().is_some_and(|p| f.selects(p));
        match ev.ty {
            EventType::Added => now.then_some(Pick::AsIs),
            EventType::Deleted => (before || now).then_some(Pick::AsIs),
            EventType::Modified => match (before, now) {
                (true, true) => Some(Pick::AsIs),
                (false, true) => Some(Pick::Entered),
                (true, false) => Some(Pick::Left),
                (false, false) => None,
            },
        }
    }

    /// Send `ev` if this watcher sees it; false when the watch had to end instead (a protobuf
    /// frame that could not be made: the client got a 410 at `rv`).
    async fn deliver(&mut self, ev: &Event, rv: u64) -> bool {
        match self.line_for(ev).await {
            Ok(Some(line)) => self.send_event(line).await,
            Ok(None) => {}
            Err(Lost) => {
                self.lost(rv).await;
                return false;
            }
        }
        true
    }

    /// The line this watcher receives for an event, if any. JSON and metadata lines are the
    /// event's shared bytes, built once per event; Table watches encode per watcher, as the
    /// apiserver does (a Table row carries the age at send time, and only a watch's first
    /// Table its columns).
    ///
    /// `Err(Lost)`: a protobuf watcher whose frame could not be made (the mirror did not get
    /// the object's version in time); the watch must end with a 410 so the client relists.
    async fn line_for(&mut self, ev: &Event) -> Result<Option<Bytes>, Lost> {
        use crate::cache::LineKind;
        let Some(pick) = self.pick(ev) else {
            return Ok(None);
        };
        let kind = match pick {
            Pick::AsIs => LineKind::AsIs,
            Pick::Entered => LineKind::Entered,
            Pick::Left => LineKind::Left,
        };
        Ok(Some(match &self.encoding {
            Encoding::Json => ev.json_line(kind),
            Encoding::Metadata => ev.metadata_line(kind),
            Encoding::Table { .. } => {
                let (ty, raw) = ev.state(kind);
                self.encode(ty, &raw)
            }
            Encoding::Protobuf(mirror) => {
                super::protobuf::watch_frame(&self.cache.info, mirror, ev, kind)
                    .await
                    .ok_or(Lost)?
            }
        }))
    }

    /// End a protobuf watch whose next frame could not be made: a 410, so the client relists
    /// (from the cache, or from the upstream) instead of missing the event.
    async fn lost(&mut self, rv: u64) {
        // The mirror stopped because the type went over its budget: a clean end instead.
        if self.cache_ended() {
            return;
        }
        self.open.reason = "error";
        let line = self.expired(rv, self.cache.history_start().max(rv + 1));
        self.send(line).await;
    }

    /// The ERROR event of a watch whose place is no longer in the history (410 Expired).
    fn expired(&self, rv: u64, oldest: u64) -> Bytes {
        self.error_line(&ApiError::Expired {
            message: format!("too old resource version: {rv} ({oldest})"),
            continue_token: None,
        })
    }

    /// An ERROR event carrying `e`'s Status, in the watch's encoding.
    fn error_line(&self, e: &ApiError) -> Bytes {
        match self.encoding {
            Encoding::Protobuf(_) => {
                Bytes::from(crate::protobuf::status_watch_event(&e.to_status()))
            }
            _ => e.watch_event(),
        }
    }

    /// One event line in this watch's encoding.
    fn encode(&mut self, ty: &str, raw: &[u8]) -> Bytes {
        match &self.encoding {
            // JSON lines are the events' shared bytes, and protobuf frames `api::protobuf`'s; this
            // is the plain form for completeness.
            Encoding::Json | Encoding::Protobuf(_) => crate::cache::event_line(ty, raw),
            Encoding::Table { printer, include } => {
                let first = std::mem::replace(&mut self.first_table, false);
                printer.watch_event(ty, raw, first, *include, std::time::SystemTime::now())
            }
            Encoding::Metadata => {
                crate::cache::event_line(ty, &crate::table::partial_object_metadata(raw))
            }
        }
    }

    /// A BOOKMARK event; `None` for a protobuf watch until the upstream has shown the kind's
    /// empty object (bookmarks are hints: a client that gets none is still exact, and watches
    /// that need the end-of-initial-events one went upstream instead).
    fn bookmark(&self, rv: u64, initial_end: bool) -> Option<Bytes> {
        if let Encoding::Protobuf(mirror) = &self.encoding {
            return super::protobuf::bookmark(&self.cache.info, mirror, rv, initial_end);
        }
        let null_timestamp = self.upstream.null_creation_timestamp_in_bookmarks();
        let line = bookmark_line(&self.cache.info, rv, initial_end, null_timestamp);
        Some(match self.encoding {
            // Metadata informers get the bookmark object as PartialObjectMetadata, like every
            // other object of their watch.
            Encoding::Metadata => {
                let timestamp = if null_timestamp {
                    ",\"creationTimestamp\":null"
                } else {
                    ""
                };
                let end = if initial_end {
                    ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}"
                } else {
                    ""
                };
                let pom = format!("{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{timestamp}{end}}}}}");
                crate::cache::event_line("BOOKMARK", pom.as_bytes())
            }
            _ => Bytes::from(line),
        })
    }
}

/// A protobuf watcher's next frame could not be made (see `Watcher::line_for`).
struct Lost;

/// A BOOKMARK line in the built-in or CR form (W5, W6); built-in kinds' objects carry
/// `"creationTimestamp":null` when `null_timestamp` (apiservers before v1.34).
pub(super) fn bookmark_line(
    info: &ResourceInfo,
    rv: u64,
    initial_end: bool,
    null_timestamp: bool,
) -> String {
    const END: &str = "\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}";
    let object = if info.custom {
        let meta = if initial_end {
            format!("{END},\"resourceVersion\":\"{rv}\"")
        } else {
            format!("\"resourceVersion\":\"{rv}\"")
        };
        format!(
            "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{{{meta}}}}}",
            json_str(&info.api_version()),
            json_str(&info.kind)
        )
    } else {
        let timestamp = if null_timestamp {
            ",\"creationTimestamp\":null"
        } else {
            ""
        };
        let extra = if initial_end {
            format!(",{END}")
        } else {
            String::new()
        };
        format!(
            "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{{\"resourceVersion\":\"{rv}\"{timestamp}{extra}}}}}",
            json_str(&info.kind),
            json_str(&info.api_version())
        )
    };
    format!("{{\"type\":\"BOOKMARK\",\"object\":{object}}}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheConfig, EventType, Scope};
    use crate::object::Object;
    use http_body_util::BodyExt;

    fn cm(name: &str, rv: u64) -> Object {
        let info = ResourceInfo::core_v1("configmaps", "ConfigMap");
        let raw = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"k":"{}"}}}}"#,
            "v".repeat(200)
        );
        Object::from_upstream(&info, Bytes::from(raw), false).unwrap()
    }

    #[tokio::test]
    async fn a_watcher_behind_gets_every_event_in_order_in_few_chunks() {
        let info = ResourceInfo::core_v1("configmaps", "ConfigMap");
        let (cache, writer) =
            ResourceCache::new(info.clone(), Scope::default(), CacheConfig::default()).split();
        writer.replace(vec![cm("first", 5)], 10);
        let q = [
            ("watch".to_string(), "1".to_string()),
            ("resourceVersion".to_string(), "10".to_string()),
            ("timeoutSeconds".to_string(), "5".to_string()),
        ];
        let opts = ListOptions::parse(&q, &info, &cache.indexes, false).unwrap();
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        let resp = watch(
            cache.clone(),
            Filter::default(),
            &opts,
            &WatchConfig::default(),
            stopping,
            Encoding::Json,
            &Arc::new(Metrics::new()),
        )
        .await
        .unwrap();
        // The watcher has not run yet (its body is not polled): every event below is pending
        // when it first does, as for a watcher woken late.
        const EVENTS: u64 = 200;
        for i in 0..EVENTS {
            writer.apply(EventType::Added, cm(&format!("o{i}"), 11 + i));
        }
        let mut body = resp.into_body();
        let (mut chunks, mut text) = (0, String::new());
        while text.lines().count() < EVENTS as usize {
            let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
                .await
                .expect("every event arrives")
                .unwrap()
                .unwrap();
            let data = frame.into_data().unwrap();
            assert!(data.len() <= CHUNK + 1024, "a chunk of {}", data.len());
            text.push_str(std::str::from_utf8(&data).unwrap());
            chunks += 1;
        }
        let rvs: Vec<u64> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(v["type"], "ADDED");
                v["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(rvs, (11..11 + EVENTS).collect::<Vec<_>>());
        let bytes = text.len();
        assert!(
            chunks <= bytes / CHUNK + 2,
            "{EVENTS} events ({bytes} bytes) took {chunks} chunks"
        );
    }

    #[test]
    fn watchers_gather_only_when_their_writes_would_exceed_the_rate() {
        let fanout = Fanout::default();
        let ms = Duration::from_millis;
        for (watchers, gap) in [
            (0, Duration::ZERO),
            (1, Duration::ZERO),
            // 19 writes per change at 20,000 a second: under a millisecond, not worth a timer.
            (19, Duration::ZERO),
            (20, ms(1)),
            (500, ms(25)),
            (2_000, ms(100)),
            (5_000, ms(100)),
        ] {
            assert_eq!(fanout.gap(watchers), gap, "{watchers} watchers");
        }
        let off = |f: Fanout| f.gap(5_000);
        assert_eq!(
            off(Fanout {
                max_delay: Duration::ZERO,
                ..fanout
            }),
            Duration::ZERO
        );
        assert_eq!(
            off(Fanout {
                writes_per_second: 0,
                ..fanout
            }),
            Duration::ZERO
        );
    }

    #[test]
    fn bookmark_forms_match_the_recordings() {
        let cm = ResourceInfo::core_v1("configmaps", "ConfigMap");
        assert_eq!(
            bookmark_line(&cm, 5565, false, true),
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"5565\",\"creationTimestamp\":null}}}\n"
        );
        assert_eq!(
            bookmark_line(&cm, 4230, true, true),
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"4230\",\"creationTimestamp\":null,\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n"
        );
        let w = ResourceInfo {
            group: "fixtures.example.com".into(),
            version: "v1".into(),
            resource: "widgets".into(),
            kind: "Widget".into(),
            namespaced: true,
            custom: true,
        };
        assert_eq!(
            bookmark_line(&w, 348, true, true),
            "{\"type\":\"BOOKMARK\",\"object\":{\"apiVersion\":\"fixtures.example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"annotations\":{\"k8s.io/initial-events-end\":\"true\"},\"resourceVersion\":\"348\"}}}\n"
        );
        assert_eq!(
            bookmark_line(&w, 4437, false, true),
            "{\"type\":\"BOOKMARK\",\"object\":{\"apiVersion\":\"fixtures.example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"resourceVersion\":\"4437\"}}}\n"
        );
    }
}
