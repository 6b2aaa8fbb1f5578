//! The object store: one global resourceVersion counter, per-type current state (persistent
//! ordered maps, so snapshots are O(1) clones), per-type event history for watch resume and
//! historical (Exact) lists, and a broadcast channel per type for live watchers.
//!
//! Every object is serialised once when written; lists, GETs and watch events reuse the bytes.

use super::encode::{encode_object, now_rfc3339};
use super::profile::Profile;
use super::status::{Cause, SimError, Target};
use super::types::ResourceType;
use bytes::Bytes;
use imbl::OrdMap;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};

/// The first resourceVersion a fresh sim reports. Greater than 1 so that `resourceVersion=1`
/// is "too old" once history has been compacted.
pub const INITIAL_RV: u64 = 100;

/// The longest watch-cache lag the store can rebuild.
pub const MAX_LAG: Duration = Duration::from_secs(300);

/// An object as stored: its JSON value and its encoding (done once).
#[derive(Debug)]
pub struct StoredObj {
    /// The full object including kind/apiVersion.
    pub value: Value,
    /// The compact encoding of `value` (no trailing newline).
    pub bytes: Bytes,
    /// Where the list-item form (without kind/apiVersion) continues after a `{`.
    item_at: usize,
    /// The object's resourceVersion.
    pub rv: u64,
    /// Store key: `namespace/name` or `name`.
    pub key: String,
    /// The protobuf message of `value` (None: it has none here), encoded on first use.
    proto: OnceLock<Option<Bytes>>,
    /// The PartialObjectMetadata of `value`, encoded on first use.
    meta: OnceLock<Bytes>,
    /// Its protobuf message (None: the metadata has none here), encoded on first use.
    proto_meta: OnceLock<Option<Bytes>>,
}

impl StoredObj {
    fn new(rt: &ResourceType, value: Value, rv: u64, key: String) -> StoredObj {
        let (bytes, item_at) = encode_object(rt, &value);
        StoredObj {
            value,
            bytes: Bytes::from(bytes),
            item_at,
            rv,
            key,
            proto: OnceLock::new(),
            meta: OnceLock::new(),
            proto_meta: OnceLock::new(),
        }
    }

    /// The object as a PartialObjectMetadata (no trailing newline), encoded once.
    pub fn metadata(&self, rt: &ResourceType) -> &Bytes {
        self.meta
            .get_or_init(|| Bytes::from(crate::metadata::encode(rt, &self.value)))
    }

    /// The object's protobuf message (bare, without envelope), encoded once; None when it has
    /// no protobuf form here (a kind without schema, or a field the schema does not know).
    pub fn proto(&self, rt: &ResourceType) -> Option<&Bytes> {
        self.proto
            .get_or_init(|| match crate::protobuf::encode_object(rt, &self.value) {
                Ok(b) => Some(Bytes::from(b)),
                Err(e) => {
                    tracing::debug!(kind = %rt.kind, key = %self.key, why = %e.0, "sim: no protobuf form, JSON instead");
                    None
                }
            })
            .as_ref()
    }

    /// The object's PartialObjectMetadata protobuf message (bare, a metadata list's item),
    /// encoded once; None when its metadata has a field the schema does not know. Every kind
    /// has it, custom resources included.
    pub fn proto_metadata(&self) -> Option<&Bytes> {
        self.proto_meta
            .get_or_init(
                || match crate::protobuf::encode_partial_metadata(&self.value) {
                    Ok(b) => Some(Bytes::from(b)),
                    Err(e) => {
                        tracing::debug!(key = %self.key, why = %e.0, "sim: no protobuf metadata, JSON instead");
                        None
                    }
                },
            )
            .as_ref()
    }

    /// The object's protobuf envelope (`k8s\0`...), for a GET or a watch event.
    pub fn proto_envelope(&self, rt: &ResourceType) -> Option<Vec<u8>> {
        let raw = self.proto(rt)?;
        Some(crate::protobuf::envelope(&rt.api_version(), &rt.kind, raw))
    }

    /// Appends the form used inside a list's `items` (built-ins omit kind/apiVersion).
    pub fn write_item(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        out.extend_from_slice(&self.bytes[self.item_at..]);
    }

    /// `metadata.namespace`, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.value
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// A copy re-encoded with another resourceVersion (deletions, selector "leave" events).
    fn with_rv(&self, rt: &ResourceType, rv: u64) -> StoredObj {
        let mut value = self.value.clone();
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        StoredObj::new(rt, value, rv, self.key.clone())
    }
}

/// Watch event types as they appear on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// `ADDED`
    Added,
    /// `MODIFIED`
    Modified,
    /// `DELETED`
    Deleted,
}

impl EventKind {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One write, kept in history and sent to watchers. Frames are built lazily and shared.
#[derive(Debug)]
pub struct Event {
    /// The write's resourceVersion.
    pub rv: u64,
    /// What happened.
    pub kind: EventKind,
    /// The new state; for a delete the last state carrying the deletion RV.
    pub obj: Arc<StoredObj>,
    /// The state before the write (updates and deletes).
    pub prev: Option<Arc<StoredObj>>,
    /// When the write happened (a lagging watch cache delivers it that much later).
    pub at: Instant,
    rt: Arc<ResourceType>,
    frames: [OnceLock<Bytes>; 3],
    leave: OnceLock<Bytes>,
    proto_frames: [OnceLock<Option<Bytes>>; 3],
    proto_leave: OnceLock<Option<Bytes>>,
    meta_frames: [OnceLock<Bytes>; 3],
    meta_leave: OnceLock<Bytes>,
}

/// `{"type":T,"object":O}\n`
pub fn frame(kind: &str, obj: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(obj.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(obj);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

impl Event {
    /// The frame carrying the new object as `kind` (shared by all watchers).
    pub fn frame(&self, kind: EventKind) -> Bytes {
        let idx = kind as usize;
        self.frames[idx]
            .get_or_init(|| frame(kind.name(), &self.obj.bytes))
            .clone()
    }

    /// DELETED carrying the previous object with this event's RV (selector "leave").
    pub fn leave_frame(&self) -> Bytes {
        self.leave
            .get_or_init(|| match &self.prev {
                Some(p) => frame("DELETED", &p.with_rv(&self.rt, self.rv).bytes),
                None => frame("DELETED", &self.obj.bytes),
            })
            .clone()
    }

    /// [`Event::frame`] in protobuf; None when the object has no protobuf form here.
    pub fn proto_frame(&self, kind: EventKind) -> Option<Bytes> {
        let idx = kind as usize;
        self.proto_frames[idx]
            .get_or_init(|| {
                let env = self.obj.proto_envelope(&self.rt)?;
                Some(crate::protobuf::watch_frame(kind.name(), &env))
            })
            .clone()
    }

    /// [`Event::leave_frame`] in protobuf; None when the object has no protobuf form here.
    pub fn proto_leave_frame(&self) -> Option<Bytes> {
        self.proto_leave
            .get_or_init(|| {
                let env = match &self.prev {
                    Some(p) => p.with_rv(&self.rt, self.rv).proto_envelope(&self.rt),
                    None => self.obj.proto_envelope(&self.rt),
                }?;
                Some(crate::protobuf::watch_frame("DELETED", &env))
            })
            .clone()
    }

    /// [`Event::frame`] with the object as a PartialObjectMetadata (shared by all watchers).
    pub fn metadata_frame(&self, kind: EventKind) -> Bytes {
        let idx = kind as usize;
        self.meta_frames[idx]
            .get_or_init(|| frame(kind.name(), self.obj.metadata(&self.rt)))
            .clone()
    }

    /// [`Event::leave_frame`] with the object as a PartialObjectMetadata.
    pub fn metadata_leave_frame(&self) -> Bytes {
        self.meta_leave
            .get_or_init(|| match &self.prev {
                Some(p) => frame("DELETED", p.with_rv(&self.rt, self.rv).metadata(&self.rt)),
                None => frame("DELETED", self.obj.metadata(&self.rt)),
            })
            .clone()
    }

    /// Whether every object this event may carry has a protobuf form.
    pub fn proto_ok(&self) -> bool {
        self.obj.proto(&self.rt).is_some()
            && self
                .prev
                .as_ref()
                .is_none_or(|p| p.proto(&self.rt).is_some())
    }
}

/// Everything about one served type.
struct TypeState {
    rt: Arc<ResourceType>,
    objects: OrdMap<String, Arc<StoredObj>>,
    history: VecDeque<Arc<Event>>,
    /// The oldest RV a watch can resume from or an Exact list can read (compaction moves it).
    floor: u64,
    /// The oldest RV the type's watch cache can still serve a list at (v1.34 reads old RVs
    /// from the cache, compacted or not): history trimming and `compact_watch_cache` move it.
    cache_floor: u64,
    /// Every event with rv > kept_from is in `history` (kept past a compaction so a lagging
    /// watch cache can still be rebuilt as it was).
    kept_from: u64,
    /// RV of the type's last event (the watch cache's RV in the apiserver).
    last_event_rv: u64,
    tx: broadcast::Sender<Arc<Event>>,
}

struct State {
    rv: u64,
    /// The store's revision as of the last progress notification (`wait_for_progress`): every
    /// type's watch cache has reached it, whatever type was written last.
    progress_rv: u64,
    /// When each recent global RV was written, oldest first (for lagging watch caches).
    writes: VecDeque<(Instant, u64)>,
    types: BTreeMap<(String, String), TypeState>,
    /// Registration order, for discovery.
    order: Vec<(String, String)>,
}

/// A consistent view of one type.
#[derive(Clone)]
pub struct Snapshot {
    /// Objects by key.
    pub objects: OrdMap<String, Arc<StoredObj>>,
    /// Global RV at the time of the snapshot.
    pub rv: u64,
    /// The type's last event RV.
    pub type_rv: u64,
}

/// What a watcher gets when it registers, all taken under one lock.
pub struct Subscription {
    /// Current state (for initial events).
    pub snapshot: Snapshot,
    /// Live events after this point.
    pub rx: broadcast::Receiver<Arc<Event>>,
    /// History events after the requested RV (empty unless asked for).
    pub replay: Vec<Arc<Event>>,
    /// The oldest RV a watch can resume from.
    pub floor: u64,
}

/// How an update treats `status` (types with a status subresource).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateMode {
    /// Replace everything (the sim's Rust API).
    Replace,
    /// The main resource over HTTP: status changes are ignored.
    Main,
    /// The `status` subresource: only status changes are taken.
    Status,
}

/// The store shared by the HTTP server and the Rust API.
pub struct Store {
    state: Mutex<State>,
    profile: Profile,
    rv_tx: watch::Sender<u64>,
    history_limit: usize,
    watch_buffer: usize,
    /// The phase of the progress-notification ticker (`wait_for_progress`): ticks fall at
    /// whole multiples of the interval after this.
    progress_origin: Instant,
}

/// The events of `ts` after `after`, for a watch to replay.
fn history_after(ts: &TypeState, after: u64) -> Vec<Arc<Event>> {
    let start = ts.history.partition_point(|ev| ev.rv <= after);
    ts.history.range(start..).cloned().collect()
}

/// Undoes the events after `rv`: the objects then, and the RV of the type's last event up to
/// `rv` (history must reach back to `rv`).
fn rewind(ts: &TypeState, rv: u64) -> (OrdMap<String, Arc<StoredObj>>, u64) {
    let mut objects = ts.objects.clone();
    let mut type_rv = ts.last_event_rv.min(rv);
    for ev in ts.history.iter().rev() {
        if ev.rv <= rv {
            type_rv = ev.rv;
            break;
        }
        match (&ev.kind, &ev.prev) {
            (EventKind::Added, _) | (_, None) => {
                objects.remove(&ev.obj.key);
            }
            (_, Some(prev)) => {
                objects.insert(prev.key.clone(), prev.clone());
            }
        }
    }
    (objects, type_rv)
}

/// Store key of an object.
pub fn obj_key(ns: Option<&str>, name: &str) -> String {
    match ns {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

fn target(rt: &ResourceType, name: &str) -> Target {
    Target {
        group: rt.group.clone(),
        resource: rt.resource.clone(),
        name: name.to_string(),
    }
}

const NAME_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn valid_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

fn random_suffix() -> String {
    // The apiserver's generateName alphabet (no vowels, no ambiguous characters).
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

impl Store {
    /// An empty store with the built-in types registered.
    pub fn new(history_limit: usize, watch_buffer: usize, profile: Profile) -> Store {
        let (rv_tx, _) = watch::channel(INITIAL_RV);
        let store = Store {
            state: Mutex::new(State {
                rv: INITIAL_RV,
                progress_rv: INITIAL_RV,
                writes: VecDeque::from([(Instant::now(), INITIAL_RV)]),
                types: BTreeMap::new(),
                order: Vec::new(),
            }),
            rv_tx,
            profile,
            history_limit: history_limit.max(1),
            watch_buffer: watch_buffer.max(16),
            progress_origin: Instant::now(),
        };
        for rt in super::types::builtins() {
            store.register(rt);
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a type (or replaces its description if already registered).
    pub fn register(&self, rt: ResourceType) {
        let mut st = self.lock();
        let key = (rt.group.clone(), rt.resource.clone());
        let rv = st.rv;
        if let Some(ts) = st.types.get_mut(&key) {
            ts.rt = Arc::new(rt);
            return;
        }
        let (tx, _) = broadcast::channel(self.watch_buffer);
        st.order.push(key.clone());
        st.types.insert(
            key,
            TypeState {
                rt: Arc::new(rt),
                objects: OrdMap::new(),
                history: VecDeque::new(),
                floor: 0,
                cache_floor: 0,
                kept_from: 0,
                last_event_rv: rv,
                tx,
            },
        );
    }

    /// Stop serving a type, as deleting its CustomResourceDefinition does: its objects go,
    /// its open watches end (their channel closes), and discovery, lists and watches of it
    /// answer 404 from now on. False when it was not served.
    pub fn unregister(&self, group: &str, resource: &str) -> bool {
        let mut st = self.lock();
        let key = (group.to_string(), resource.to_string());
        st.order.retain(|k| k != &key);
        st.types.remove(&key).is_some()
    }

    /// All registered types in registration order.
    pub fn types(&self) -> Vec<Arc<ResourceType>> {
        let st = self.lock();
        st.order
            .iter()
            .filter_map(|k| st.types.get(k))
            .map(|t| t.rt.clone())
            .collect()
    }

    /// The global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Waits until the global RV reaches `rv`; false on timeout.
    pub async fn wait_for_rv(&self, rv: u64, timeout: std::time::Duration) -> bool {
        let mut rx = self.rv_tx.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|cur| *cur >= rv))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// v1.34's wait before a consistent list is answered from the watch cache: the cache must
    /// reach the revision etcd has now. A type whose last event is that revision is there
    /// already (answers at once); one whose last event is older (the last write was of another
    /// type) learns that nothing of its own happened since only from a progress notification,
    /// which the apiserver requests on a `interval` tick (its progress requester's 100 ms), so
    /// it waits for the next tick, sim-wide in phase, or for an event of its own at or past
    /// that revision, whichever comes first: on average half an interval.
    pub async fn wait_for_progress(
        &self,
        group: &str,
        resource: &str,
        interval: Duration,
    ) -> Result<(), SimError> {
        let type_rv = |st: &State| {
            st.types
                .get(&(group.to_string(), resource.to_string()))
                .map(|ts| ts.last_event_rv)
                .ok_or(SimError::NoSuchResource)
        };
        let target = {
            let st = self.lock();
            if type_rv(&st)?.max(st.progress_rv) >= st.rv || interval.is_zero() {
                return Ok(());
            }
            st.rv
        };
        let period = interval.as_nanos();
        let into = self.progress_origin.elapsed().as_nanos() % period;
        let to_tick = Duration::from_nanos(u64::try_from(period - into).unwrap_or(u64::MAX));
        let mut rx = self.rv_tx.subscribe();
        let own_event = async {
            loop {
                let behind = matches!(type_rv(&self.lock()), Ok(rv) if rv < target);
                if !behind {
                    return;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        if tokio::time::timeout(to_tick, own_event).await.is_err() {
            // The tick's progress notification carries etcd's revision of then to every watch
            // cache: until the next write, no consistent list waits again.
            let mut st = self.lock();
            st.progress_rv = st.progress_rv.max(st.rv);
        }
        Ok(())
    }

    /// The current state of one type.
    pub fn snapshot(&self, group: &str, resource: &str) -> Result<Snapshot, SimError> {
        let st = self.lock();
        let ts = st
            .types
            .get(&(group.to_string(), resource.to_string()))
            .ok_or(SimError::NoSuchResource)?;
        Ok(Snapshot {
            objects: ts.objects.clone(),
            rv: st.rv,
            type_rv: ts.last_event_rv,
        })
    }

    /// The state of one type as it was at `rv`, rebuilt from history.
    /// `Err(Expired)` when history no longer reaches back that far, `Err(Internal)` for a future RV.
    /// With `cache_window` (v1.34) an RV etcd compacted is still served while the type's watch
    /// cache holds it.
    pub fn snapshot_at(
        &self,
        group: &str,
        resource: &str,
        rv: u64,
        cache_window: bool,
    ) -> Result<Snapshot, SimError> {
        let st = self.lock();
        let ts = st
            .types
            .get(&(group.to_string(), resource.to_string()))
            .ok_or(SimError::NoSuchResource)?;
        if rv > st.rv {
            return Err(SimError::Internal(
                "etcdserver: mvcc: required revision is a future revision".into(),
            ));
        }
        let in_cache = cache_window && rv >= ts.cache_floor && rv >= ts.kept_from;
        if rv < ts.floor && !in_cache {
            return Err(SimError::Expired {
                message: "The resourceVersion for the provided list is too old.".into(),
                continue_token: None,
            });
        }
        let (objects, _) = rewind(ts, rv);
        Ok(Snapshot {
            objects,
            rv,
            type_rv: ts.last_event_rv,
        })
    }

    /// The global RV a watch cache `lag` behind etcd has reached: that of the last write at
    /// least `lag` old.
    fn rv_ago(st: &State, lag: Duration) -> u64 {
        if lag.is_zero() {
            return st.rv;
        }
        let Some(cut) = Instant::now().checked_sub(lag) else {
            return st.writes.front().map_or(st.rv, |w| w.1);
        };
        match st.writes.partition_point(|(at, _)| *at <= cut) {
            0 => st.writes.front().map_or(st.rv, |w| w.1),
            i => st.writes[i - 1].1,
        }
    }

    /// One type as a watch cache that reached global RV `view` holds it (`rv` = `view`,
    /// `type_rv` the type's last event up to it); the current state when history no longer
    /// reaches back that far.
    fn view_locked(st: &State, ts: &TypeState, view: u64) -> Snapshot {
        if view >= st.rv || view < ts.kept_from {
            return Snapshot {
                objects: ts.objects.clone(),
                rv: st.rv,
                type_rv: ts.last_event_rv,
            };
        }
        let (objects, type_rv) = rewind(ts, view);
        Snapshot {
            objects,
            rv: view,
            type_rv,
        }
    }

    /// One type as a watch cache lagging `lag` behind etcd serves it.
    pub fn lagged(&self, group: &str, resource: &str, lag: Duration) -> Result<Snapshot, SimError> {
        let st = self.lock();
        let ts = st
            .types
            .get(&(group.to_string(), resource.to_string()))
            .ok_or(SimError::NoSuchResource)?;
        Ok(Self::view_locked(&st, ts, Self::rv_ago(&st, lag)))
    }

    /// Waits until a watch cache lagging `lag` behind etcd has reached `rv`; false on timeout.
    pub async fn wait_for_lagged(&self, rv: u64, lag: Duration, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        if !self.wait_for_rv(rv, timeout).await {
            return false;
        }
        if lag.is_zero() {
            return true;
        }
        let written = {
            let st = self.lock();
            let i = st.writes.partition_point(|(_, w)| *w < rv);
            st.writes.get(i).map_or_else(Instant::now, |w| w.0)
        };
        let ready = written + lag;
        tokio::time::sleep_until(ready.min(deadline).into()).await;
        ready <= deadline
    }

    /// A watcher of a watch cache lagging `lag` behind etcd: the state it holds, and the
    /// history after `replay_after` (when given and not compacted) or else after the state it
    /// holds, which the watcher delivers `lag` after each event happened.
    pub fn subscribe_lagged(
        &self,
        group: &str,
        resource: &str,
        lag: Duration,
        replay_after: Option<u64>,
    ) -> Result<Subscription, SimError> {
        let st = self.lock();
        let ts = st
            .types
            .get(&(group.to_string(), resource.to_string()))
            .ok_or(SimError::NoSuchResource)?;
        let snapshot = Self::view_locked(&st, ts, Self::rv_ago(&st, lag));
        let after = match replay_after {
            Some(after) if after >= ts.floor => Some(after),
            Some(_) => None,
            None => Some(snapshot.rv),
        };
        let replay = after.map_or_else(Vec::new, |after| history_after(ts, after));
        Ok(Subscription {
            snapshot,
            rx: ts.tx.subscribe(),
            replay,
            floor: ts.floor,
        })
    }

    /// Registers a watcher: current state, live receiver and the history after `replay_after`.
    pub fn subscribe(
        &self,
        group: &str,
        resource: &str,
        replay_after: Option<u64>,
    ) -> Result<Subscription, SimError> {
        let st = self.lock();
        let ts = st
            .types
            .get(&(group.to_string(), resource.to_string()))
            .ok_or(SimError::NoSuchResource)?;
        let replay = match replay_after {
            Some(after) if after >= ts.floor => history_after(ts, after),
            _ => Vec::new(),
        };
        Ok(Subscription {
            snapshot: Snapshot {
                objects: ts.objects.clone(),
                rv: st.rv,
                type_rv: ts.last_event_rv,
            },
            rx: ts.tx.subscribe(),
            replay,
            floor: ts.floor,
        })
    }

    /// Forgets all history: watches and Exact lists from older RVs get 410. (The events stay
    /// in memory, up to the history limit, only to rebuild what a lagging watch cache holds,
    /// and, for v1.34's lists, what the watch caches' window still holds.)
    pub fn compact(&self) {
        let mut st = self.lock();
        let rv = st.rv;
        for ts in st.types.values_mut() {
            ts.floor = rv;
        }
    }

    /// Moves every type's watch-cache window up to now: v1.34 lists at older RVs are no longer
    /// served from the cache (etcd still serves them unless compacted).
    pub fn compact_watch_cache(&self) {
        let mut st = self.lock();
        let rv = st.rv;
        for ts in st.types.values_mut() {
            ts.cache_floor = rv;
        }
    }

    /// When the write of global RV `rv` (or the first after it) happened; now if none has yet.
    pub fn written_at(&self, rv: u64) -> Instant {
        let st = self.lock();
        let i = st.writes.partition_point(|(_, w)| *w < rv);
        st.writes.get(i).map_or_else(Instant::now, |w| w.0)
    }

    /// The global RV a watch cache lagging `lag` behind etcd has reached.
    pub fn rv_lagged(&self, lag: Duration) -> u64 {
        Self::rv_ago(&self.lock(), lag)
    }

    /// Whether the apiserver sets and bumps `metadata.generation` for this type (v1.34 does for
    /// Pods too).
    fn tracks_generation(&self, rt: &ResourceType) -> bool {
        rt.has_generation()
            || (self.profile.is_1_34() && rt.group.is_empty() && rt.resource == "pods")
    }

    /// Records a write: bumps nothing itself (the caller chose `rv`), appends history,
    /// trims it, and fans the event out.
    fn publish(&self, st: &mut State, key: &(String, String), ev: Event) {
        st.rv = ev.rv;
        let limit = self.history_limit;
        if let Some(ts) = st.types.get_mut(key) {
            let ev = Arc::new(ev);
            ts.last_event_rv = ev.rv;
            ts.history.push_back(ev.clone());
            while ts.history.len() > limit {
                if let Some(old) = ts.history.pop_front() {
                    ts.kept_from = old.rv;
                    ts.floor = ts.floor.max(old.rv);
                    ts.cache_floor = ts.cache_floor.max(old.rv);
                }
            }
            // No receivers is fine: nobody is watching.
            let _ = ts.tx.send(ev);
        }
        let now = Instant::now();
        st.writes.push_back((now, st.rv));
        // Keep what the longest lag could look back to, and at least one write before it.
        while st.writes.len() > 2 && st.writes[1].0 + MAX_LAG < now {
            st.writes.pop_front();
        }
        self.rv_tx.send_replace(st.rv);
    }

    /// Creates an object. `url_ns` is the namespace from the request path (HTTP) or `None`
    /// (Rust API: the object's own namespace, default `default`).
    pub fn create(
        &self,
        group: &str,
        resource: &str,
        url_ns: Option<&str>,
        obj: Value,
    ) -> Result<Arc<StoredObj>, SimError> {
        self.create_created(group, resource, url_ns, obj, None)
    }

    /// [`Store::create`], with the creationTimestamp `created` (RFC 3339) instead of now when
    /// given: an object of a cluster that lived before the sim started.
    pub fn create_created(
        &self,
        group: &str,
        resource: &str,
        url_ns: Option<&str>,
        obj: Value,
        created: Option<String>,
    ) -> Result<Arc<StoredObj>, SimError> {
        let mut st = self.lock();
        let key = (group.to_string(), resource.to_string());
        let rt = st
            .types
            .get(&key)
            .ok_or(SimError::NoSuchResource)?
            .rt
            .clone();
        let Value::Object(mut map) = obj else {
            return Err(SimError::BadRequest(format!(
                "the object provided is unrecognized (must be of type {})",
                rt.kind
            )));
        };
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        let Some(meta) = meta.as_object_mut() else {
            return Err(SimError::BadRequest("metadata must be an object".into()));
        };
        // Namespace: from the URL, checked against the body.
        let ns = if rt.namespaced {
            let body_ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            match (url_ns, body_ns) {
                (Some(u), Some(b)) if u != b => {
                    return Err(SimError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ))
                }
                (Some(u), _) => Some(u.to_string()),
                (None, Some(b)) => Some(b.to_string()),
                (None, None) => Some("default".to_string()),
            }
        } else {
            None
        };
        match &ns {
            Some(ns) => {
                meta.insert("namespace".into(), Value::String(ns.clone()));
            }
            None => {
                meta.remove("namespace");
            }
        }
        // Name, possibly generated.
        let mut name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            let prefix = meta
                .get("generateName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if prefix.is_empty() {
                return Err(SimError::Invalid {
                    kind: rt.kind.clone(),
                    group: rt.group.clone(),
                    name: String::new(),
                    causes: vec![Cause::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                });
            }
            name = format!("{prefix}{}", random_suffix());
            meta.insert("name".into(), Value::String(name.clone()));
        }
        if !valid_subdomain(&name) {
            return Err(SimError::Invalid {
                kind: rt.kind.clone(),
                group: rt.group.clone(),
                name: name.clone(),
                causes: vec![Cause::invalid("metadata.name", &name, NAME_MSG)],
            });
        }
        let okey = obj_key(ns.as_deref(), &name);
        let ts = st.types.get(&key).ok_or(SimError::NoSuchResource)?;
        if ts.objects.contains_key(&okey) {
            return Err(SimError::AlreadyExists(target(&rt, &name)));
        }
        let rv = st.rv + 1;
        meta.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        if self.tracks_generation(&rt) {
            meta.insert("generation".into(), Value::from(1));
        } else {
            meta.remove("generation");
        }
        let created = created.unwrap_or_else(now_rfc3339);
        meta.insert("creationTimestamp".into(), Value::String(created));
        meta.remove("deletionTimestamp");
        meta.remove("selfLink");
        map.insert("kind".into(), Value::String(rt.kind.clone()));
        map.insert("apiVersion".into(), Value::String(rt.api_version()));
        apply_create_defaults(&rt, &mut map, self.profile);
        let stored = Arc::new(StoredObj::new(&rt, Value::Object(map), rv, okey.clone()));
        if let Some(ts) = st.types.get_mut(&key) {
            ts.objects.insert(okey, stored.clone());
        }
        let ev = Event {
            rv,
            kind: EventKind::Added,
            obj: stored.clone(),
            prev: None,
            at: Instant::now(),
            rt,
            frames: Default::default(),
            leave: OnceLock::new(),
            proto_frames: Default::default(),
            proto_leave: OnceLock::new(),
            meta_frames: Default::default(),
            meta_leave: OnceLock::new(),
        };
        self.publish(&mut st, &key, ev);
        Ok(stored)
    }

    /// Replaces an object. `url` is `(namespace, name)` from the request path, if any.
    pub fn update(
        &self,
        group: &str,
        resource: &str,
        url: Option<(Option<&str>, &str)>,
        obj: Value,
        mode: UpdateMode,
    ) -> Result<Arc<StoredObj>, SimError> {
        let mut st = self.lock();
        let key = (group.to_string(), resource.to_string());
        let ts = st.types.get(&key).ok_or(SimError::NoSuchResource)?;
        let rt = ts.rt.clone();
        let Value::Object(mut map) = obj else {
            return Err(SimError::BadRequest(format!(
                "the object provided is unrecognized (must be of type {})",
                rt.kind
            )));
        };
        let body_name = map
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let body_ns = map
            .get("metadata")
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let (ns, name) = match url {
            Some((url_ns, url_name)) => {
                if !body_name.is_empty() && body_name != url_name {
                    return Err(SimError::BadRequest(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
                    )));
                }
                if rt.namespaced {
                    if let (Some(u), Some(b)) = (url_ns, body_ns) {
                        if u != b {
                            return Err(SimError::BadRequest(
                                "the namespace of the provided object does not match the namespace sent on the request"
                                    .into(),
                            ));
                        }
                    }
                }
                (url_ns.map(str::to_string), url_name.to_string())
            }
            None => {
                let ns = if rt.namespaced {
                    Some(body_ns.unwrap_or("default").to_string())
                } else {
                    None
                };
                (ns, body_name.to_string())
            }
        };
        let ns = if rt.namespaced { ns } else { None };
        let okey = obj_key(ns.as_deref(), &name);
        let old = ts
            .objects
            .get(&okey)
            .cloned()
            .ok_or_else(|| SimError::NotFound(target(&rt, &name)))?;
        let given_rv = map
            .get("metadata")
            .and_then(|m| m.get("resourceVersion"))
            .and_then(Value::as_str);
        if let Some(given) = given_rv.filter(|s| !s.is_empty()) {
            if given != old.rv.to_string() {
                return Err(SimError::Conflict(target(&rt, &name)));
            }
        }
        // Status subresource rules.
        if rt.has_status() {
            match mode {
                UpdateMode::Main => match old.value.get("status") {
                    Some(s) => {
                        map.insert("status".into(), s.clone());
                    }
                    None => {
                        map.remove("status");
                    }
                },
                UpdateMode::Status => {
                    let status = map.get("status").cloned();
                    let mut base = old.value.as_object().cloned().unwrap_or_default();
                    match status {
                        Some(s) => base.insert("status".into(), s),
                        None => base.remove("status"),
                    };
                    map = base;
                }
                UpdateMode::Replace => {}
            }
        }
        check_immutable(&rt, &old.value, &map, &name)?;
        // Server-owned metadata comes from the stored object.
        let old_meta = old
            .value
            .get("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("name".into(), Value::String(name.clone()));
            match &ns {
                Some(ns) => meta.insert("namespace".into(), Value::String(ns.clone())),
                None => meta.remove("namespace"),
            };
            for k in [
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
            ] {
                match old_meta.get(k) {
                    Some(v) => meta.insert(k.into(), v.clone()),
                    None => meta.remove(k),
                };
            }
            meta.insert("resourceVersion".into(), Value::String(old.rv.to_string()));
        }
        map.insert("kind".into(), Value::String(rt.kind.clone()));
        map.insert("apiVersion".into(), Value::String(rt.api_version()));
        if rt.kind == "Secret" {
            fold_string_data(&mut map);
        }
        let mut new_value = Value::Object(map);
        // A write that changes nothing is not a write: no new RV, no event.
        if new_value == old.value {
            return Ok(old);
        }
        if self.tracks_generation(&rt) && spec_changed(&rt, &old.value, &new_value) {
            let gen = old
                .value
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            if let Some(meta) = new_value.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("generation".into(), Value::from(gen));
            }
        }
        let rv = st.rv + 1;
        if let Some(meta) = new_value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let stored = Arc::new(StoredObj::new(&rt, new_value, rv, okey.clone()));
        if let Some(ts) = st.types.get_mut(&key) {
            ts.objects.insert(okey, stored.clone());
        }
        let ev = Event {
            rv,
            kind: EventKind::Modified,
            obj: stored.clone(),
            prev: Some(old),
            at: Instant::now(),
            rt,
            frames: Default::default(),
            leave: OnceLock::new(),
            proto_frames: Default::default(),
            proto_leave: OnceLock::new(),
            meta_frames: Default::default(),
            meta_leave: OnceLock::new(),
        };
        self.publish(&mut st, &key, ev);
        Ok(stored)
    }

    /// Deletes an object; returns its last state carrying the deletion RV.
    /// `precondition_rv`/`precondition_uid` come from DeleteOptions.
    pub fn delete(
        &self,
        group: &str,
        resource: &str,
        ns: Option<&str>,
        name: &str,
        precondition_rv: Option<&str>,
        precondition_uid: Option<&str>,
    ) -> Result<Arc<StoredObj>, SimError> {
        let mut st = self.lock();
        let key = (group.to_string(), resource.to_string());
        let ts = st.types.get(&key).ok_or(SimError::NoSuchResource)?;
        let rt = ts.rt.clone();
        let ns = if rt.namespaced {
            Some(ns.unwrap_or("default"))
        } else {
            None
        };
        let okey = obj_key(ns, name);
        let old = ts
            .objects
            .get(&okey)
            .cloned()
            .ok_or_else(|| SimError::NotFound(target(&rt, name)))?;
        if precondition_rv.is_some_and(|p| p != old.rv.to_string())
            || precondition_uid.is_some_and(|p| p != old.uid())
        {
            return Err(SimError::Conflict(target(&rt, name)));
        }
        let rv = st.rv + 1;
        let gone = Arc::new(old.with_rv(&rt, rv));
        if let Some(ts) = st.types.get_mut(&key) {
            ts.objects.remove(&okey);
        }
        let ev = Event {
            rv,
            kind: EventKind::Deleted,
            obj: gone.clone(),
            prev: Some(old),
            at: Instant::now(),
            rt,
            frames: Default::default(),
            leave: OnceLock::new(),
            proto_frames: Default::default(),
            proto_leave: OnceLock::new(),
            meta_frames: Default::default(),
            meta_leave: OnceLock::new(),
        };
        self.publish(&mut st, &key, ev);
        Ok(gone)
    }

    /// One object by namespace and name.
    pub fn get(
        &self,
        group: &str,
        resource: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<StoredObj>, SimError> {
        let st = self.lock();
        let ts = st
            .types
            .get(&(group.to_string(), resource.to_string()))
            .ok_or(SimError::NoSuchResource)?;
        let ns = if ts.rt.namespaced { ns } else { None };
        ts.objects
            .get(&obj_key(ns, name))
            .cloned()
            .ok_or_else(|| SimError::NotFound(target(&ts.rt, name)))
    }
}

/// Defaults the apiserver fills in on create for the types the sim knows.
fn apply_create_defaults(rt: &ResourceType, map: &mut Map<String, Value>, profile: Profile) {
    if rt.custom || !rt.group.is_empty() {
        return;
    }
    let status_phase = |map: &mut Map<String, Value>, phase: &str| {
        let status = map
            .entry("status")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(s) = status.as_object_mut() {
            s.entry("phase")
                .or_insert_with(|| Value::String(phase.into()));
        }
    };
    match rt.kind.as_str() {
        "Pod" => {
            status_phase(map, "Pending");
            if profile.is_1_34() {
                add_service_ca_source(map);
            }
        }
        "Namespace" => {
            let spec = map
                .entry("spec")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(s) = spec.as_object_mut() {
                s.entry("finalizers")
                    .or_insert_with(|| serde_json::json!(["kubernetes"]));
            }
            status_phase(map, "Active");
        }
        "Secret" => {
            fold_string_data(map);
            map.entry("type")
                .or_insert_with(|| Value::String("Opaque".into()));
        }
        _ => {}
    }
}

/// The v1.34 recordings' apiserver (OpenShift's kubernetes fork, its OpenShift mode off) adds a
/// fourth source to the projected `kube-api-access-*` volume of every Pod: the
/// `openshift-service-ca.crt` ConfigMap. The sim adds it where a Pod has that volume without it.
fn add_service_ca_source(map: &mut Map<String, Value>) {
    let Some(volumes) = map
        .get_mut("spec")
        .and_then(|s| s.get_mut("volumes"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for v in volumes {
        let api_access = v
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.starts_with("kube-api-access-"));
        let Some(sources) = v
            .get_mut("projected")
            .and_then(|p| p.get_mut("sources"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        let has = sources.iter().any(|s| {
            s.pointer("/configMap/name").and_then(Value::as_str) == Some("openshift-service-ca.crt")
        });
        if api_access && !has {
            sources.push(serde_json::json!({"configMap": {
                "name": "openshift-service-ca.crt",
                "items": [{"key": "service-ca.crt", "path": "service-ca.crt"}],
            }}));
        }
    }
}

/// Secrets: `stringData` is write-only and merged into `data` as base64.
fn fold_string_data(map: &mut Map<String, Value>) {
    use base64::Engine;
    let Some(Value::Object(sd)) = map.remove("stringData") else {
        return;
    };
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let s = v.as_str().unwrap_or_default();
            d.insert(
                k,
                Value::String(base64::engine::general_purpose::STANDARD.encode(s)),
            );
        }
    }
}

/// ConfigMaps and Secrets with `immutable: true` reject data changes (422 as the apiserver).
fn check_immutable(
    rt: &ResourceType,
    old: &Value,
    new: &Map<String, Value>,
    name: &str,
) -> Result<(), SimError> {
    if rt.custom || !rt.group.is_empty() || !matches!(rt.kind.as_str(), "ConfigMap" | "Secret") {
        return Ok(());
    }
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return Ok(());
    }
    let msg = "field is immutable when `immutable` is set";
    let mut causes = Vec::new();
    let fields: &[&str] = if rt.kind == "ConfigMap" {
        &["data", "binaryData"]
    } else {
        &["data"]
    };
    for f in fields {
        if old.get(*f) != new.get(*f) {
            causes.push(Cause::forbidden(f, msg));
        }
    }
    if new.get("immutable") != Some(&Value::Bool(true)) {
        causes.push(Cause::forbidden("immutable", msg));
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(SimError::Invalid {
        kind: rt.kind.clone(),
        group: rt.group.clone(),
        name: name.into(),
        causes,
    })
}

/// Whether a write changes what `metadata.generation` tracks: `spec` for workloads,
/// everything but metadata and status for custom resources.
fn spec_changed(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    if !rt.custom {
        return old.get("spec") != new.get("spec");
    }
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.remove("metadata");
        m.remove("status");
        m
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_type_behind_the_revision_waits_for_the_progress_tick() {
        let s = Store::new(100, 100, Profile::V1_34);
        let tick = Duration::from_millis(100);
        let cm = json!({"metadata": {"name": "a"}});
        s.create("", "configmaps", Some("ns"), cm).unwrap();
        // The last write is of this type: at once.
        let t = Instant::now();
        s.wait_for_progress("", "configmaps", tick).await.unwrap();
        assert!(t.elapsed() < Duration::from_millis(20), "{:?}", t.elapsed());
        s.create(
            "",
            "secrets",
            Some("ns"),
            json!({"metadata": {"name": "b"}}),
        )
        .unwrap();
        // Behind: until the next tick, at most one interval.
        let t = Instant::now();
        s.wait_for_progress("", "configmaps", tick).await.unwrap();
        assert!(
            t.elapsed() <= tick + Duration::from_millis(20),
            "{:?}",
            t.elapsed()
        );
        // The tick's notification brought every cache to the revision: nothing written since,
        // nothing to wait for, for this type or another one behind.
        let t = Instant::now();
        s.wait_for_progress("", "configmaps", tick).await.unwrap();
        s.wait_for_progress("", "pods", tick).await.unwrap();
        assert!(t.elapsed() < Duration::from_millis(20), "{:?}", t.elapsed());
        s.create(
            "",
            "secrets",
            Some("ns"),
            json!({"metadata": {"name": "c"}}),
        )
        .unwrap();
        s.wait_for_progress("", "secrets", tick).await.unwrap();
        // Behind, but an event of its own ends the wait before the tick.
        let into = s.progress_origin.elapsed().as_millis() % 100;
        tokio::time::sleep(Duration::from_millis(((100 - into + 10) % 100) as u64)).await;
        let t = Instant::now();
        let wait = s.wait_for_progress("", "configmaps", tick);
        let write = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            s.create(
                "",
                "configmaps",
                Some("ns"),
                json!({"metadata": {"name": "c"}}),
            )
            .unwrap();
        };
        let (waited, ()) = tokio::join!(wait, write);
        waited.unwrap();
        assert!(t.elapsed() < Duration::from_millis(60), "{:?}", t.elapsed());
    }

    #[test]
    fn history_reconstructs_old_state_and_compaction_expires_it() {
        let s = Store::new(100, 100, Profile::V1_28);
        let a = s
            .create(
                "",
                "configmaps",
                Some("ns"),
                json!({"metadata": {"name": "a"}, "data": {"k": "1"}}),
            )
            .unwrap();
        let rv_after_create = a.rv;
        s.update(
            "",
            "configmaps",
            None,
            json!({"metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "2"}}),
            UpdateMode::Replace,
        )
        .unwrap();
        s.delete("", "configmaps", Some("ns"), "a", None, None)
            .unwrap();
        assert!(s.snapshot("", "configmaps").unwrap().objects.is_empty());
        let old = s
            .snapshot_at("", "configmaps", rv_after_create, false)
            .unwrap();
        let got = old.objects.get("ns/a").unwrap();
        assert_eq!(got.value["data"]["k"], "1");
        assert!(s
            .snapshot_at("", "configmaps", INITIAL_RV, false)
            .unwrap()
            .objects
            .is_empty());
        s.compact();
        assert!(matches!(
            s.snapshot_at("", "configmaps", rv_after_create, false),
            Err(SimError::Expired { .. })
        ));
    }

    #[test]
    fn noop_update_is_not_a_write_and_generation_tracks_spec() {
        let s = Store::new(100, 100, Profile::V1_28);
        let d = s
            .create(
                "apps",
                "deployments",
                Some("ns"),
                json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}}),
            )
            .unwrap();
        assert_eq!(d.value["metadata"]["generation"], 1);
        let same = s
            .update(
                "apps",
                "deployments",
                None,
                d.value.clone(),
                UpdateMode::Replace,
            )
            .unwrap();
        assert_eq!(same.rv, d.rv);
        let mut v = d.value.clone();
        v["spec"]["replicas"] = json!(2);
        let bumped = s
            .update("apps", "deployments", None, v, UpdateMode::Replace)
            .unwrap();
        assert_eq!(bumped.value["metadata"]["generation"], 2);
        assert_eq!(bumped.rv, d.rv + 1);
    }
}
