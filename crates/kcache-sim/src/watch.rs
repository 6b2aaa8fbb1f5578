//! WATCH streams: initial events, history replay, live events with selector transitions,
//! bookmarks (periodic and initial-events-end), timeouts, and the ERROR events.
//!
//! Each watch runs as a task that writes one frame per chunk into a small bounded channel
//! feeding the response body. A watcher whose broadcast receiver lags (the client does not
//! read fast enough) is closed, as the apiserver closes a blocked watcher.

use super::encode::J;
use super::metadata::{self, Form};
use super::profile::Profile;
use super::protobuf::{self, Media};
use super::query::{parse_rv, ListOptions};
use super::status::SimError;
use super::store::{frame, Event, EventKind, Store, StoredObj};
use super::table_rows::Printer;
use super::types::ResourceType;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::{sleep_until, Instant};

/// Frames of a watch response body; an `Err` aborts the connection (no final chunk).
pub type FrameRx = mpsc::Receiver<Result<Bytes, std::io::Error>>;

/// What a watch needs besides its options.
pub struct WatchEnv {
    /// Periodic bookmark interval.
    pub bookmark_interval: Duration,
    /// How long a WatchList with a future RV holds the response.
    pub too_large_wait: Duration,
    /// Fires when watches must be dropped abruptly.
    pub drop_rx: watch::Receiver<u64>,
    /// Fires when watches must send their periodic bookmark now.
    pub bookmark_rx: watch::Receiver<u64>,
    /// Answer with an ERROR 410 at once (injected fault).
    pub fail_410: bool,
    /// Leave out the initial-events-end bookmark (injected fault: what a v1.28 apiserver in
    /// front of etcd 3.4 was seen doing for quiet types, see `Faults::withhold_initial_events_end`).
    pub withhold_end: bool,
    /// How far the serving replica's watch cache lags etcd: it starts from the state it held
    /// that long ago and delivers each event that long after it happened.
    pub lag: Duration,
    /// Bookmarks at the store's revision (see `SimConfig::progress_bookmarks`).
    pub progress_bookmarks: bool,
    /// The encoding the client negotiated (protobuf falls back to JSON for the whole stream
    /// when an object of its start has no protobuf form).
    pub media: Media,
    /// The form the client negotiated for the objects (`as=PartialObjectMetadata`).
    pub form: Form,
    /// The upstream imitated.
    pub profile: Profile,
    /// The client asked for a Table of a type whose columns the sim serves: each event's
    /// object is a one-row Table printed by this.
    pub table: Option<Printer>,
}

/// How a stream writes its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lines {
    /// JSON lines carrying the objects as stored.
    Json,
    /// Protobuf frames.
    Protobuf,
    /// JSON lines carrying each object, BOOKMARKs included, as a PartialObjectMetadata.
    /// ERROR events keep their plain Status (the apiserver transforms no Status).
    Metadata,
    /// JSON lines carrying each object as a one-row Table (`Tables`). ERROR events keep their
    /// plain Status (`err-table-watch-widgets-rv1-too-old`); BOOKMARKs are written as in a
    /// plain watch (no recording shows one in a Table watch: kubectl's `get -w` asks for none).
    Table,
}

/// The Table lines of one watch: each event's object printed on its own, the columns with
/// the first event only (`table-watch-cm-ns-a-from-list-rv`).
struct Tables {
    printer: Printer,
    /// No event written yet: the next one carries the `columnDefinitions`.
    first: bool,
}

impl Tables {
    fn frame(&mut self, kind: &str, obj: &serde_json::Value) -> Bytes {
        let first = std::mem::replace(&mut self.first, false);
        let table = self
            .printer
            .event_object(obj, first, std::time::SystemTime::now());
        frame(kind, &table)
    }
}

/// The ADDED frame of an object of the initial state.
fn initial_frame(rt: &ResourceType, obj: &StoredObj, lines: Lines) -> Bytes {
    match lines {
        Lines::Metadata => frame("ADDED", obj.metadata(rt)),
        Lines::Protobuf => match obj.proto_envelope(rt) {
            Some(env) => protobuf::watch_frame("ADDED", &env),
            None => frame("ADDED", &obj.bytes),
        },
        // A Table watch prints its lines itself (`Tables`).
        Lines::Json | Lines::Table => frame("ADDED", &obj.bytes),
    }
}

/// The object of a BOOKMARK event in the apiserver's form for the type, as a frame in the
/// stream's encoding (None: a protobuf stream of a kind the sim cannot encode, which
/// negotiation never starts).
fn bookmark(
    rt: &ResourceType,
    rv: u64,
    initial_end: bool,
    lines: Lines,
    profile: Profile,
) -> Option<Bytes> {
    let null_timestamp = !profile.is_1_34();
    if lines == Lines::Metadata {
        let mut obj = metadata::bookmark(rv, initial_end);
        if !null_timestamp {
            // v1.34 omits a zero creationTimestamp (no recording of this form; the built-in
            // BOOKMARKs show the change).
            const NULL: &[u8] = b",\"creationTimestamp\":null";
            if let Some(i) = obj.windows(NULL.len()).position(|w| w == NULL) {
                obj.drain(i..i + NULL.len());
            }
        }
        return Some(frame("BOOKMARK", &obj));
    }
    let obj = bookmark_object(rt, rv, initial_end, null_timestamp);
    let mut json = Vec::new();
    obj.write(&mut json);
    if matches!(lines, Lines::Json | Lines::Table) {
        return Some(frame("BOOKMARK", &json));
    }
    let value: serde_json::Value = serde_json::from_slice(&json).unwrap_or_default();
    let raw = protobuf::encode_object(rt, &value).ok()?;
    let env = protobuf::envelope(&rt.api_version(), &rt.kind, &raw);
    Some(protobuf::watch_frame("BOOKMARK", &env))
}

/// The BOOKMARK object (JSON). Built-in kinds carry `"creationTimestamp":null` in v1.28 (Go's
/// ObjectMeta), not in v1.34; custom resources never.
fn bookmark_object(rt: &ResourceType, rv: u64, initial_end: bool, null_timestamp: bool) -> J {
    let annotations = J::Map(vec![("k8s.io/initial-events-end".into(), J::s("true"))]);
    if rt.custom {
        let mut meta = Vec::new();
        if initial_end {
            meta.push(("annotations", annotations));
        }
        meta.push(("resourceVersion", J::Str(rv.to_string())));
        J::Obj(vec![
            ("apiVersion", J::Str(rt.api_version())),
            ("kind", J::s(&rt.kind)),
            ("metadata", J::Obj(meta)),
        ])
    } else {
        let mut meta = vec![("resourceVersion", J::Str(rv.to_string()))];
        if null_timestamp {
            meta.push(("creationTimestamp", J::Null));
        }
        if initial_end {
            meta.push(("annotations", annotations));
        }
        J::Obj(vec![
            ("kind", J::s(&rt.kind)),
            ("apiVersion", J::Str(rt.api_version())),
            ("metadata", J::Obj(meta)),
        ])
    }
}

/// An ERROR event carrying a Status, in the stream's encoding.
pub fn error_frame(err: &SimError, proto: bool) -> Bytes {
    if proto {
        return protobuf::status_frame(&err.status_json());
    }
    let mut bytes = Vec::new();
    err.status_json().write(&mut bytes);
    frame("ERROR", &bytes)
}

fn too_old(requested: u64, floor: u64) -> SimError {
    SimError::Expired {
        message: format!("too old resource version: {requested} ({floor})"),
        continue_token: None,
    }
}

/// Filters events for one watcher.
struct Filter {
    ns: Option<String>,
    opts: ListOptions,
}

impl Filter {
    fn matches(&self, obj: &StoredObj) -> bool {
        self.ns
            .as_deref()
            .is_none_or(|ns| obj.namespace() == Some(ns))
            && self.opts.labels.matches(&obj.value)
            && self.opts.fields.matches(&obj.value)
    }

    /// What this watcher sees of `ev`, if anything (W2 transitions): the event's object as
    /// `kind`, or (`Seen::Left`) a DELETED carrying the object as it was before the write
    /// that took it out of the selection.
    fn sees(&self, ev: &Event) -> Option<Seen> {
        let now = self.matches(&ev.obj);
        match ev.kind {
            EventKind::Added | EventKind::Deleted if now => Some(Seen::As(ev.kind)),
            EventKind::Added | EventKind::Deleted => None,
            EventKind::Modified => {
                let before = ev.prev.as_deref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some(Seen::As(EventKind::Modified)),
                    (false, true) => Some(Seen::As(EventKind::Added)),
                    (true, false) => Some(Seen::Left),
                    (false, false) => None,
                }
            }
        }
    }

    /// The frame this watcher sees for `ev`, if any, in the shared forms (every form but
    /// Table). `Err`: the stream is protobuf and the object has no protobuf form here.
    fn frame_for(&self, ev: &Event, lines: Lines) -> Result<Option<Bytes>, ()> {
        let frame = match self.sees(ev) {
            None => return Ok(None),
            Some(Seen::As(kind)) => match lines {
                Lines::Protobuf => ev.proto_frame(kind).ok_or(())?,
                Lines::Metadata => ev.metadata_frame(kind),
                Lines::Json | Lines::Table => ev.frame(kind),
            },
            Some(Seen::Left) => match lines {
                Lines::Protobuf => ev.proto_leave_frame().ok_or(())?,
                Lines::Metadata => ev.metadata_leave_frame(),
                Lines::Json | Lines::Table => ev.leave_frame(),
            },
        };
        Ok(Some(frame))
    }
}

/// What a watcher sees of an event (`Filter::sees`).
enum Seen {
    /// The event's object, as this kind of event.
    As(EventKind),
    /// DELETED with the object before the write, at the write's resourceVersion.
    Left,
}

/// The object a Table line prints for what a watcher saw of `ev`.
fn seen_object(ev: &Event, seen: &Seen) -> serde_json::Value {
    match (seen, &ev.prev) {
        (Seen::Left, Some(prev)) => {
            let mut value = prev.value.clone();
            if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.insert("resourceVersion".into(), ev.rv.to_string().into());
            }
            value
        }
        _ => ev.obj.value.clone(),
    }
}

/// Starts a watch. Errors returned here are plain HTTP errors (before any stream);
/// afterwards problems are ERROR events. Returns the frames and their encoding.
pub async fn start(
    store: Arc<Store>,
    rt: Arc<ResourceType>,
    ns: Option<String>,
    opts: ListOptions,
    env: WatchEnv,
) -> Result<(FrameRx, Media), SimError> {
    let rv = opts.rv.as_deref().map(parse_rv).transpose()?;
    let (tx, rx) = mpsc::channel(16);
    let (group, resource) = (rt.group.clone(), rt.resource.clone());
    let proto = env.media == Media::Protobuf;
    if env.fail_410 {
        let floor = store.current_rv();
        let frames = vec![error_frame(&too_old(rv.unwrap_or(0), floor), proto)];
        tokio::spawn(send_and_close(tx, frames));
        return Ok((rx, env.media));
    }
    let streaming = opts.send_initial_events == Some(true);
    let mut initial_rv_wait_failed = None;
    // A WatchList with resourceVersion unset is a consistent read: the watch cache first
    // catches up with etcd's revision of now.
    let catch_up = match rv {
        None if streaming && !env.lag.is_zero() => Some(store.current_rv()),
        Some(n) if n > 0 && streaming => Some(n),
        _ => None,
    };
    if let Some(n) = catch_up {
        if !store.wait_for_lagged(n, env.lag, env.too_large_wait).await {
            initial_rv_wait_failed = Some(SimError::TooLargeResourceVersion {
                requested: n,
                current: store.current_rv(),
            });
        }
    }
    if let Some(err) = initial_rv_wait_failed {
        tokio::spawn(send_and_close(tx, vec![error_frame(&err, proto)]));
        return Ok((rx, env.media));
    }
    let filter = Filter { ns, opts };
    // Decide what comes first: initial state, or history after the requested RV.
    let initial_state = match filter.opts.send_initial_events {
        Some(send) => send,
        None => matches!(rv, None | Some(0)),
    };
    let replay_after = rv.filter(|n| *n > 0 && !initial_state);
    let sub = if env.lag.is_zero() {
        store.subscribe(&group, &resource, replay_after)?
    } else {
        store.subscribe_lagged(&group, &resource, env.lag, replay_after)?
    };
    let mut frames = Vec::new();
    let mut start_rv = 0;
    // Protobuf only if everything the stream starts with has a protobuf form (the live
    // events are checked as they come).
    let proto = proto && sub.replay.iter().all(|ev| ev.proto_ok());
    let mut initial_objs = Vec::new();
    let v134 = env.profile.is_1_34();
    if initial_state {
        // The initial state's RV is the watch cache's: the type's last event for RV=0 in
        // v1.28, the cache's revision otherwise (v1.34 keeps it current with etcd's progress
        // notifications).
        start_rv = if rv == Some(0) && !v134 {
            sub.snapshot.type_rv
        } else {
            sub.snapshot.rv
        };
        let range = match filter.ns.as_deref() {
            Some(ns) => sub
                .snapshot
                .objects
                .range(format!("{ns}/")..format!("{ns}0")),
            None => sub.snapshot.objects.range::<_, String>(..),
        };
        for (_, obj) in range {
            if filter.matches(obj) {
                initial_objs.push(obj.clone());
            }
        }
    }
    let proto = proto && initial_objs.iter().all(|o| o.proto(&rt).is_some());
    let media = if proto { Media::Protobuf } else { Media::Json };
    // `as=PartialObjectMetadataList` on a watch is not refused by the apiserver, whose
    // transformation of each object then fails and hands it on as it is; the sim writes the
    // objects in their own JSON form then (no recording shows this case).
    let mut tables = env.table.map(|printer| Tables {
        printer,
        first: true,
    });
    let lines = match (proto, env.form) {
        _ if tables.is_some() => Lines::Table,
        (true, _) => Lines::Protobuf,
        (false, Form::Metadata) => Lines::Metadata,
        (false, Form::Object | Form::MetadataList) => Lines::Json,
    };
    if initial_state {
        for obj in &initial_objs {
            frames.push(match &mut tables {
                Some(t) => t.frame("ADDED", &obj.value),
                None => initial_frame(&rt, obj, lines),
            });
        }
        if streaming && filter.opts.allow_bookmarks && !env.withhold_end {
            frames.extend(bookmark(&rt, start_rv, true, lines, env.profile));
        }
    } else {
        // From an explicit RV (or from "now" for sendInitialEvents=false).
        let n = match rv {
            Some(n) if n > 0 => n,
            _ => sub.snapshot.rv,
        };
        if rv.is_some_and(|r| r > 0) && n < sub.floor {
            tokio::spawn(send_and_close(
                tx,
                vec![error_frame(&too_old(n, sub.floor), proto)],
            ));
            return Ok((rx, media));
        }
        start_rv = n;
    }
    let seen_rv = sub.snapshot.type_rv;
    // v1.34: a WatchList from RV=0 served from a cache behind the store's revision of now gets
    // a plain BOOKMARK at that revision once the cache has caught up with it (the recorded
    // `watchlist-cm-ns-b-rv0`: initial-events-end at 15007, then 15011).
    let catch_up_bookmark = (v134 && streaming && rv == Some(0) && filter.opts.allow_bookmarks)
        .then(|| store.current_rv())
        .filter(|now| *now > start_rv)
        .map(|now| (now, Instant::from_std(store.written_at(now) + env.lag)));
    // The apiserver turns the seconds into a Go time.Duration, nanoseconds in an i64, with
    // Go's wrapping multiplication: zero picks a random timeout between 30 and 60 minutes, a
    // negative duration is a timer that has already fired.
    let nanos = filter
        .opts
        .timeout_seconds
        .unwrap_or(0)
        .wrapping_mul(1_000_000_000);
    let timeout = match nanos {
        0 => Duration::from_secs(1800 + rand::random_range(0..1800)),
        n if n < 0 => Duration::ZERO,
        n => Duration::from_nanos(n.unsigned_abs()),
    };
    let w = Watcher {
        rt,
        filter,
        rx: sub.rx,
        tx,
        drop_rx: env.drop_rx,
        bookmark_rx: env.bookmark_rx,
        start_rv,
        seen_rv,
        deadline: Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(Instant::now),
        interval: env.bookmark_interval,
        progress: (env.progress_bookmarks && env.lag.is_zero()).then(|| store.clone()),
        heartbeat: v134.then(|| store.clone()),
        catch_up_bookmark,
        lag: env.lag,
        lines,
        tables,
        profile: env.profile,
    };
    tokio::spawn(w.run(frames, sub.replay));
    Ok((rx, media))
}

async fn send_and_close(tx: mpsc::Sender<Result<Bytes, std::io::Error>>, frames: Vec<Bytes>) {
    for f in frames {
        if tx.send(Ok(f)).await.is_err() {
            return;
        }
    }
}

struct Watcher {
    rt: Arc<ResourceType>,
    filter: Filter,
    rx: broadcast::Receiver<Arc<Event>>,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    drop_rx: watch::Receiver<u64>,
    /// Fires when the periodic bookmark is due now (see `Faults::send_bookmarks_now`).
    bookmark_rx: watch::Receiver<u64>,
    /// Bookmarks are sent only once the type has an event newer than this.
    start_rv: u64,
    /// RV of the newest event of the type this watcher has seen (matching or not).
    seen_rv: u64,
    deadline: Instant,
    interval: Duration,
    lag: Duration,
    /// The store, when bookmarks carry its revision.
    progress: Option<Arc<Store>>,
    /// The store, when a periodic bookmark is a heartbeat (v1.34): a watch that saw no event
    /// of its type since its start gets one at the cache's revision once that moved past the
    /// start (v1.28 sends none until the type has an event).
    heartbeat: Option<Arc<Store>>,
    /// A plain BOOKMARK still owed after the initial events: (its RV, when the cache reaches it).
    catch_up_bookmark: Option<(u64, Instant)>,
    /// How the stream writes its objects.
    lines: Lines,
    /// The Table lines of a Table watch (`Lines::Table`).
    tables: Option<Tables>,
    /// The upstream imitated.
    profile: Profile,
}

enum Flow {
    Continue,
    Stop,
}

impl Watcher {
    /// Next bookmark time: every interval, and about 2 s before the deadline.
    fn next_bookmark(&self, now: Instant) -> Option<Instant> {
        let mut at = now + self.interval;
        if let Some(pre) = self.deadline.checked_sub(Duration::from_secs(2)) {
            if pre < at {
                at = pre;
            }
        }
        (at >= now).then_some(at)
    }

    async fn emit(&mut self, f: Bytes) -> Flow {
        tokio::select! {
            r = self.tx.send(Ok(f)) => if r.is_ok() { Flow::Continue } else { Flow::Stop },
            _ = self.drop_rx.changed() => { self.abort().await; Flow::Stop }
            _ = sleep_until(self.deadline) => Flow::Stop,
        }
    }

    /// Ends the response abruptly: the body errors and the connection is closed.
    async fn abort(&mut self) {
        let err = std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "watch dropped");
        let _ = self.tx.try_send(Err(err));
    }

    /// `replay`: the history events after the start, delivered before the live ones.
    async fn run(mut self, initial: Vec<Bytes>, replay: Vec<Arc<Event>>) {
        // Mark the current drop epoch as seen so only later drops end this watch.
        self.drop_rx.borrow_and_update();
        self.bookmark_rx.borrow_and_update();
        for f in initial {
            if let Flow::Stop = self.emit(f).await {
                return;
            }
        }
        for ev in replay {
            if let Flow::Stop = self.on_event(&ev).await {
                return;
            }
        }
        let mut next_bm = self.next_bookmark(Instant::now());
        loop {
            let bm_at = next_bm.unwrap_or(self.deadline + Duration::from_secs(1));
            let catch_up_at = self
                .catch_up_bookmark
                .map_or(self.deadline + Duration::from_secs(1), |(_, at)| at);
            tokio::select! {
                r = self.rx.recv() => match r {
                    Ok(ev) => {
                        if let Flow::Stop = self.on_event(&ev).await { return; }
                    }
                    // Too far behind (or the store is gone): close the watch; the client re-watches.
                    Err(_) => return,
                },
                _ = sleep_until(catch_up_at), if self.catch_up_bookmark.is_some() => {
                    let Some((rv, _)) = self.catch_up_bookmark.take() else { continue };
                    if let Flow::Stop = self.drain().await { return; }
                    let rv = rv.max(self.seen_rv);
                    if let Some(f) = bookmark(&self.rt, rv, false, self.lines, self.profile) {
                        if let Flow::Stop = self.emit(f).await { return; }
                    }
                }
                _ = sleep_until(bm_at), if next_bm.is_some() => {
                    if let Flow::Stop = self.periodic_bookmark().await { return; }
                    next_bm = self.next_bookmark(Instant::now());
                }
                _ = self.bookmark_rx.changed() => {
                    if let Flow::Stop = self.periodic_bookmark().await { return; }
                }
                _ = sleep_until(self.deadline) => return,
                _ = self.drop_rx.changed() => { self.abort().await; return; }
                _ = self.tx.closed() => return,
            }
        }
    }

    /// The periodic bookmark: the type's newest event when it had one since the start (both
    /// versions), else v1.34's heartbeat at the cache's revision; none before either.
    async fn periodic_bookmark(&mut self) -> Flow {
        // Read before draining: the store broadcasts an event before its revision is visible,
        // so everything up to `store_rv` is queued by now.
        let store_rv = self.progress.as_ref().map_or(0, |s| s.current_rv());
        let cache_rv = self.heartbeat.as_ref().map_or(0, |s| s.rv_lagged(self.lag));
        // Deliver anything already queued first, so a bookmark never overtakes an event.
        if let Flow::Stop = self.drain().await {
            return Flow::Stop;
        }
        self.seen_rv = self.seen_rv.max(store_rv);
        let rv = if self.seen_rv > self.start_rv {
            self.seen_rv
        } else {
            cache_rv
        };
        if self.filter.opts.allow_bookmarks && rv > self.start_rv {
            if let Some(f) = bookmark(&self.rt, rv, false, self.lines, self.profile) {
                return self.emit(f).await;
            }
        }
        Flow::Continue
    }

    /// Delivers the events already queued.
    async fn drain(&mut self) -> Flow {
        loop {
            match self.rx.try_recv() {
                Ok(ev) => {
                    if let Flow::Stop = self.on_event(&ev).await {
                        return Flow::Stop;
                    }
                }
                Err(broadcast::error::TryRecvError::Empty) => return Flow::Continue,
                Err(_) => return Flow::Stop,
            }
        }
    }

    async fn on_event(&mut self, ev: &Event) -> Flow {
        if !self.lag.is_zero() {
            // A lagging watch cache hears of the write only `lag` after it happened.
            let due = Instant::from_std(ev.at + self.lag);
            tokio::select! {
                _ = sleep_until(due) => {}
                _ = self.drop_rx.changed() => { self.abort().await; return Flow::Stop; }
                _ = sleep_until(self.deadline) => return Flow::Stop,
            }
        }
        self.seen_rv = self.seen_rv.max(ev.rv);
        if ev.rv <= self.start_rv {
            return Flow::Continue;
        }
        if let Some(tables) = &mut self.tables {
            let Some(seen) = self.filter.sees(ev) else {
                return Flow::Continue;
            };
            let kind = match seen {
                Seen::As(kind) => kind.name(),
                Seen::Left => EventKind::Deleted.name(),
            };
            let f = tables.frame(kind, &seen_object(ev, &seen));
            return self.emit(f).await;
        }
        match self.filter.frame_for(ev, self.lines) {
            Ok(Some(f)) => self.emit(f).await,
            Ok(None) => Flow::Continue,
            // No protobuf form for this object: end the stream; the client's re-watch
            // replays this event and so gets JSON.
            Err(()) => Flow::Stop,
        }
    }
}
