//! The in-memory cache of one resource type, fed by its upstream reflector.
//!
//! State is an ordered persistent map (`imbl::OrdMap`, keyed `namespace/name` so it sorts like
//! the apiserver's etcd keys) plus a history of recent events. Taking a snapshot is O(1) and
//! shares structure with the live map, so a LIST streams from a snapshot without holding a lock,
//! and a consistent list at an older resourceVersion (exact-RV lists, continue tokens) is rebuilt
//! by undoing the events after it instead of keeping full copies.
//!
//! One writer (the reflector) and many readers, by type: the cache is shared read-only as
//! `Arc<ResourceCache>`, and its objects and resourceVersion change only through its one
//! `Writer` (see the `writer` module), made once by `ResourceCache::split`. The lock is
//! held only for O(log n) updates, O(1) clones and, for a relist, the swap of the new state and the append of its events:
//! the O(n) work of a relist (the diff, the sort, the posting sets, freeing the old state) is
//! done outside it (see `relist`), and nothing holds it while bytes are written to a client.
//!
//! A [`ResourceCache`] is made of parts with one concern each:
//! - `state`: the versioned state the lock protects (objects, posting sets, history, relists,
//!   snapshots, the sequence positions watchers read from);
//! - [`Contact`]: when the reflector last heard from the upstream, and so the cache's age;
//! - `Freshness`: what consistent reads learnt about proving this cache current;
//! - [`Budget`]: the memory budget and whether the type went over it;
//! - [`LastList`]: when the reflector last listed the type, and why;
//! - the protobuf [`Mirror`], once a protobuf read started one;
//! - `dispatch`: the index-routed watchers, handed each event as it is appended.
//!
//! Why one file of this length: every write path here (`replace`, `apply`, `bookmark`, going
//! over budget) is one transaction on the locked `State` (append, dispatch, trim, the RV
//! broadcast) and is read and changed as a whole; the types it is made of live in their own
//! modules above, and its tests in `tests.rs`.

mod budget;
mod contact;
mod cursor;
mod dispatch;
mod event;
mod freshness;
mod last_list;
mod mirror;
mod range_counts;
mod relist;
mod state;
mod writer;

pub use budget::Budget;
pub use contact::Contact;
pub(crate) use cursor::{Batch, Cursor};
pub(crate) use dispatch::{Subscriber, BY_NAME};
pub(crate) use event::{event_line, write_event, Event, EventType, LineKind};
pub use freshness::Verdict;
pub(crate) use freshness::{Freshness, Proof, MEASURED_FROM, PROOF_SHARE};
pub use last_list::{LastList, ListReason, ListRecord};
pub use mirror::Mirror;
pub(crate) use writer::{Keeper, Prover, Writer};

use std::collections::VecDeque;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::index::{IndexConfig, IndexSet};
use crate::object::{Key, Object, Strip};
use crate::resource::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use state::{Relist, State};

/// Objects of one resource by store key (the key is a second pointer to the object: see
/// [`Key`]).
pub(crate) type ObjectMap = imbl::OrdMap<Key, Arc<Object>>;

/// A range of an [`ObjectMap`]'s keys, as its `range` takes them (a namespace's objects, or
/// a page's and what follows it).
pub(crate) type KeyRange = (std::ops::Bound<Arc<str>>, std::ops::Bound<Arc<str>>);

/// The posting sets of a cache: index value → keys of the objects with it.
pub(crate) type Postings = crate::index::Postings<Key>;

/// Limits on what the cache retains for watch resume and consistent paging.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// How long events are kept for watches resuming from an RV and for rebuilding older states
    /// (continue tokens, exact-RV lists). The apiserver keeps ~75 s of watch history and 5 min of
    /// etcd history; kcache keeps one window for both.
    pub history_window: Duration,
    /// Upper bound on retained events, whatever their age.
    pub history_max_events: usize,
    /// How many rebuilt or served snapshots to keep for follow-up pages.
    pub max_snapshots: usize,
    /// What the type's objects are cached without (memory controls).
    pub strip: Strip,
    /// The most the cached objects' JSON may take, in bytes (`resources[].memoryBudget`);
    /// None: no budget. See [`Budget::is_over`] for what happens above it.
    pub memory_budget: Option<usize>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            history_window: Duration::from_secs(300),
            history_max_events: 100_000,
            max_snapshots: 32,
            strip: Strip::default(),
            memory_budget: None,
        }
    }
}

/// What part of the upstream collection is cached (from the resource's config).
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub namespace: Option<String>,
    pub label: LabelSelector,
    pub field: FieldSelector,
}

impl Scope {
    /// Whether a request for `namespace` (None = all) with these selectors can be answered from
    /// a cache holding only this scope: it must stay inside the cached namespace and repeat
    /// every requirement the cache was restricted by.
    pub(crate) fn covers(
        &self,
        namespace: Option<&str>,
        label: &LabelSelector,
        field: &FieldSelector,
    ) -> bool {
        let ns_ok = match (&self.namespace, namespace) {
            (None, _) => true,
            (Some(c), Some(r)) => c == r,
            (Some(_), None) => false,
        };
        ns_ok
            && self
                .label
                .requirements()
                .iter()
                .all(|r| label.requirements().contains(r))
            && self
                .field
                .requirements()
                .iter()
                .all(|r| field.requirements().contains(r))
    }
}

/// A consistent view of the collection at one resourceVersion.
#[derive(Clone)]
pub struct Snapshot {
    pub rv: u64,
    pub objects: ObjectMap,
    /// The posting sets of exactly these objects; None when they were not kept (then lists
    /// scan).
    pub(crate) postings: Option<Postings>,
}

/// Why a state at an RV cannot be produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtError {
    /// Older than the retained history; `oldest` is the oldest RV that can be served.
    TooOld { oldest: u64 },
    /// Newer than the cache; `current` is the cache's RV.
    Future { current: u64 },
}

/// The cache of one resource type.
pub struct ResourceCache {
    pub info: Arc<ResourceInfo>,
    pub scope: Scope,
    /// The resource's indexes (built-in selectable fields and configured ones).
    pub indexes: Arc<IndexSet>,
    cfg: CacheConfig,
    state: RwLock<State>,
    /// Carries the cache RV; every change to the state is announced through it.
    rv_tx: watch::Sender<u64>,
    /// When the reflector last heard from the upstream: the cache's age.
    contact: Contact,
    /// What consistent reads learnt about proving this cache fresh.
    freshness: Freshness,
    /// The memory budget, and whether the type went over it.
    budget: Budget,
    /// When the reflector last listed the type, and why.
    last_list: LastList,
    /// The type's protobuf mirror, once a protobuf read has started it (see `api::Mirrors`).
    mirror: std::sync::OnceLock<Arc<Mirror>>,
    /// Lists installed after the first sync (upstream 410s, restarts).
    relists: std::sync::atomic::AtomicU64,
    /// Watchers registered under an index value.
    dispatch: dispatch::Dispatch,
    /// Selector evaluations by watchers (what index dispatch saves; tests read it).
    evaluations: std::sync::atomic::AtomicU64,
    /// Set once the upstream stopped serving the type (see [`ResourceCache::stop_serving`]).
    not_served: watch::Sender<bool>,
    /// The CRD `selectableFields` (jsonPaths) the indexes were built with.
    selectable: Vec<String>,
    /// What paginated lists' pages counted of the objects after them, for the next page.
    range_counts: range_counts::RangeCounts,
}

impl ResourceCache {
    /// The type's protobuf mirror, if one was started.
    pub fn mirror(&self) -> Option<&Arc<Mirror>> {
        self.mirror.get()
    }

    /// The type's protobuf mirror, made by `start` (once) if there is none yet.
    pub(crate) fn mirror_or_start(&self, start: impl FnOnce() -> Arc<Mirror>) -> &Arc<Mirror> {
        self.mirror.get_or_init(start)
    }

    /// What this type's objects are cached without: every object put in the cache must have
    /// been built with it (see `Object::from_upstream_stripped`).
    pub fn strip(&self) -> &Strip {
        &self.cfg.strip
    }

    pub fn new(info: ResourceInfo, scope: Scope, cfg: CacheConfig) -> ResourceCache {
        let (rv_tx, _) = watch::channel(0);
        let cfg_budget = cfg.memory_budget;
        let indexes = Arc::new(IndexSet::new(&info.group, &info.resource, info.custom, &[]));
        ResourceCache {
            info: Arc::new(info),
            scope,
            cfg,
            state: RwLock::new(State::new(Postings::new(&indexes))),
            rv_tx,
            contact: Contact::default(),
            freshness: Freshness::default(),
            budget: Budget::new(cfg_budget),
            last_list: LastList::default(),
            mirror: std::sync::OnceLock::new(),
            relists: std::sync::atomic::AtomicU64::new(0),
            indexes,
            dispatch: Default::default(),
            evaluations: Default::default(),
            not_served: watch::channel(false).0,
            selectable: Vec::new(),
            range_counts: Default::default(),
        }
    }

    /// Add the configured indexes (before anything is cached).
    pub fn with_indexes(mut self, configured: &[IndexConfig]) -> ResourceCache {
        let info = &self.info;
        let set = Arc::new(IndexSet::new(
            &info.group,
            &info.resource,
            info.custom,
            configured,
        ));
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        st.postings = Postings::build(&set, st.objects.iter());
        self.indexes = set;
        self
    }

    /// Add a custom resource's `selectableFields` (jsonPaths, from its CRD) as indexes,
    /// before anything is cached: field selectors on them are then answered from the cache.
    pub fn with_selectable_fields(mut self, json_paths: &[String]) -> ResourceCache {
        self.selectable = json_paths.to_vec();
        let set = Arc::new((*self.indexes).clone().with_selectable_fields(json_paths));
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        st.postings = Postings::build(&set, st.objects.iter());
        self.indexes = set;
        self
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way readers
        // could misuse (updates are single assignments), so a poisoned lock is still usable.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// When the reflector last heard from the upstream, and so the cache's age (the reflector
    /// reports contact here: every list page, watch opened, event and bookmark).
    pub fn contact(&self) -> &Contact {
        &self.contact
    }

    /// What consistent reads learnt about proving this cache fresh.
    pub(crate) fn freshness(&self) -> &Freshness {
        &self.freshness
    }

    /// The type's memory budget, and whether it went over it.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// When the reflector last listed the type, and why (the reflector records it).
    pub fn last_list(&self) -> &LastList {
        &self.last_list
    }

    /// What the last wait for this cache found (see `Freshness::verdict`).
    pub fn verdict(&self) -> Verdict {
        self.freshness.verdict(self.object_events())
    }

    /// How many object events (changes of the cached objects, a relist's included) the cache
    /// has applied: moves with news about the type's objects, never with a bookmark.
    pub(crate) fn object_events(&self) -> u64 {
        self.read().next_seq
    }

    /// Whether the cache holds a state that was loaded from disk and that the upstream has not
    /// confirmed since (the reflector has not reached it yet): served to reads that accept any
    /// state (`resourceVersion=0`), never taken as current by consistent reads.
    pub(crate) fn is_unconfirmed(&self) -> bool {
        !self.contact.confirmed() && self.is_synced()
    }

    // ---- the memory budget (see the `budget` module) ----

    /// Whether the type is done syncing: synced, or over its budget (then it never will be,
    /// and is passed through instead). What readiness and start-up wait for.
    pub(crate) fn is_settled(&self) -> bool {
        self.is_synced() || self.budget.is_over()
    }

    /// A list the reflector is gathering is over the budget before it is complete (`bytes`
    /// so far): the cache goes over budget without holding the rest of it.
    fn over_budget_while_listing(&self, bytes: usize) {
        let mut st = self.write();
        self.go_over_budget(&mut st, bytes);
        drop(st);
        self.announce_over_budget();
    }

    /// Mark the cache over budget, then empty it (in that order: see the `budget` module).
    /// Under the write lock; [`ResourceCache::announce_over_budget`] after releasing it.
    fn go_over_budget(&self, st: &mut State, bytes: usize) {
        self.budget.mark_over(bytes);
        // New containers rather than `clear()`: their capacity goes back to the allocator.
        st.objects = ObjectMap::new();
        st.postings = Postings::new(&self.indexes);
        st.bytes = 0;
        st.history = VecDeque::new();
        st.relists = VecDeque::new();
        st.snapshots = VecDeque::new();
        st.history_start = st.rv();
        // Routed watchers wake (and find the mark) like every other.
        self.dispatch.overflow_all();
    }

    /// Tell everything waiting on the cache that it went over budget: watchers and readers
    /// waiting for an RV wake up (and find the mark), the protobuf mirror drops its bytes.
    fn announce_over_budget(&self) {
        if let Some(mirror) = self.mirror.get() {
            mirror.stop();
        }
        self.budget.announce();
        self.rv_tx.send_modify(|_| {});
    }

    // ---- a type the upstream stopped serving ----

    /// The type left the registry (the upstream no longer serves it: its
    /// CustomResourceDefinition was deleted; or it was dropped when idle): the cache, already
    /// out of the registry so that new requests pass through, is done. Only the registry calls
    /// it, through the writer's [`Keeper`]. Its open watches end cleanly, as the apiserver ends
    /// its own (their clients' next watch gets the upstream's 404), and its protobuf mirror
    /// stops. Its state is left as it was:
    /// a read that took the cache just before still answers a state the type had.
    fn stop_serving(&self) {
        self.not_served.send_replace(true);
        if let Some(mirror) = self.mirror.get() {
            mirror.stop();
        }
        self.dispatch.overflow_all();
        self.rv_tx.send_modify(|_| {});
    }

    /// The CRD `selectableFields` (jsonPaths) the cache's indexes were built with (see
    /// [`ResourceCache::with_selectable_fields`]).
    pub(crate) fn selectable_fields(&self) -> &[String] {
        &self.selectable
    }

    /// Whether the cache was retired (its type left the registry).
    pub(crate) fn is_not_served(&self) -> bool {
        *self.not_served.borrow()
    }

    /// Resolves once the cache is retired (never, if it is not).
    pub(crate) async fn until_not_served(&self) {
        let mut rx = self.not_served.subscribe();
        let _ = rx.wait_for(|gone| *gone).await;
    }

    // ---- writer side: through the one `Writer` (see the `writer` module) ----

    /// Install a complete list of the collection at `rv` (initial sync or relist). After the
    /// first sync the difference to the previous state becomes ordinary events, so downstream
    /// watchers stay exact across upstream 410s. If the upstream's RVs went backwards (a restore
    /// or a new cluster), history is discarded and every running watch is ended with 410.
    fn replace<O: Into<Arc<Object>>>(&self, objects: Vec<O>, rv: u64) -> ReplaceSummary {
        let (summary, now) = self.install(objects, rv);
        self.contact.heard();
        self.rv_tx.send_replace(now);
        summary
    }

    /// Install a state loaded from disk (see `persist`) as the first sync: served at once,
    /// aged `age` plus the time until the reflector first reaches the upstream, and not
    /// confirmed current until then (see [`ResourceCache::is_unconfirmed`]). Ignored once the
    /// cache has synced.
    fn restore(&self, objects: Vec<Arc<Object>>, rv: u64, age: Duration) {
        if self.is_synced() {
            return;
        }
        self.contact.restored(age);
        let (_, now) = self.install(objects, rv);
        self.rv_tx.send_replace(now);
    }

    /// [`ResourceCache::replace`] without the contact: returns the summary and the cache RV.
    fn install<O: Into<Arc<Object>>>(&self, objects: Vec<O>, rv: u64) -> (ReplaceSummary, u64) {
        if self.budget.is_over() {
            return (ReplaceSummary::default(), self.rv());
        }
        // Reuses the vector's allocation when the objects come shared (the reflector's).
        let mut objects: Vec<Arc<Object>> = objects.into_iter().map(Into::into).collect();
        // A list comes in key order; sorted all the same (cheap then), since the map is built
        // in `dense_order` for full nodes. The last of a repeated key is kept, as inserting
        // one by one would.
        objects.sort_by(|a, b| a.key().cmp(b.key()));
        objects.dedup_by(|later, earlier| {
            let same = later.key() == earlier.key();
            if same {
                std::mem::swap(later, earlier);
            }
            same
        });
        let bytes: usize = objects.iter().map(|o| o.raw().len()).sum();
        if self.budget.exceeds(bytes) {
            drop(objects);
            let mut st = self.write();
            self.go_over_budget(&mut st, bytes);
            let now = st.rv();
            drop(st);
            self.announce_over_budget();
            return (ReplaceSummary::default(), now);
        }
        let mut new_map = ObjectMap::new();
        crate::index::dense_order(&objects, |o| {
            new_map.insert(Key::of(o), o.clone());
        });
        drop(objects);
        // Everything that is O(n) in the collection is done before the write lock is taken, so
        // readers of the type (and the workers they run on) are never held up by a relist for
        // longer than the swap and the appends: the posting sets of the new state, and the
        // events from the state now to it (see `relist`).
        let postings = Postings::build(&self.indexes, new_map.iter());
        let base = {
            let st = self.read();
            (st.synced && rv >= st.rv()).then(|| (st.objects.clone(), st.rv()))
        };
        let planned = base.map(|(old, floor)| {
            let plan = relist::plan(&old, &new_map, floor, rv);
            (old, floor, plan)
        });
        let mut st = self.write();
        if st.synced {
            self.relists
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if !st.synced || rv < st.rv() {
            let mut summary = ReplaceSummary::default();
            if st.synced {
                st.epoch += 1;
                summary.reset = true;
                self.dispatch.overflow_all();
            }
            st.history.clear();
            st.relists.clear();
            st.snapshots.clear();
            st.history_start = rv;
            let replaced = st.swap_in(new_map, postings);
            st.bytes = bytes;
            st.set_rv(rv);
            st.synced = true;
            drop(st);
            drop(replaced);
            return (summary, rv);
        }
        // The plan holds if the state it was worked out from is still the cache's: the
        // reflector is the only writer of a synced cache, so it is unless something else
        // installed a state meanwhile; then it is worked out again, under the lock.
        let floor = st.rv();
        let (plan, diffed) = match planned {
            Some((old, at, plan)) if at == floor && old.ptr_eq(&st.objects) => (plan, Some(old)),
            _ => (relist::plan(&st.objects, &new_map, floor, rv), None),
        };
        if !plan.events.is_empty() {
            let first_seq = st.next_seq;
            st.relists.push_back(Relist {
                floor,
                rv,
                first_seq,
            });
        }
        for ev in plan.events {
            self.append(&mut st, ev);
        }
        let replaced = st.swap_in(new_map, postings);
        st.bytes = bytes;
        let rv = rv.max(st.rv());
        st.set_rv(rv);
        st.trim(&self.cfg);
        let now = st.rv();
        drop(st);
        // The old state is freed after the lock is released (O(n) too).
        drop((replaced, diffed));
        (plan.summary, now)
    }

    /// Apply one upstream watch event. Events at or below the cache RV are repeats (after a
    /// re-watch) and are ignored.
    /// An event that would take the cached objects over the budget is not applied: the cache
    /// goes over budget instead (see [`Budget::is_over`]).
    fn apply(&self, ty: EventType, object: Object) {
        let mut st = self.write();
        if object.rv <= st.rv() || self.budget.is_over() {
            return;
        }
        let object = Arc::new(object);
        let key = Key::of(&object);
        let prev = st.objects.get(&key).cloned();
        let rv = object.rv;
        let mut bytes = st.bytes - prev.as_ref().map_or(0, |p| p.raw().len());
        if ty != EventType::Deleted {
            bytes += object.raw().len();
        }
        if self.budget.exceeds(bytes) {
            self.go_over_budget(&mut st, bytes);
            drop(st);
            self.announce_over_budget();
            return;
        }
        st.bytes = bytes;
        let indexes = &self.indexes;
        let new = (ty != EventType::Deleted).then_some(&*object);
        st.postings.update(indexes, &key, prev.as_deref(), new);
        let event = match (ty, prev) {
            (EventType::Deleted, Some(prev)) => {
                st.objects.remove(&key);
                Some(Event::new(EventType::Deleted, object, Some(prev), false))
            }
            // A delete of something never seen changes nothing a watcher saw.
            (EventType::Deleted, None) => None,
            (_, Some(prev)) => {
                st.objects.insert(key, object.clone());
                Some(Event::new(EventType::Modified, object, Some(prev), false))
            }
            (_, None) => {
                st.objects.insert(key, object.clone());
                Some(Event::new(EventType::Added, object, None, false))
            }
        };
        if let Some(ev) = event {
            self.append(&mut st, ev);
        }
        st.set_rv(rv);
        st.trim(&self.cfg);
        drop(st);
        self.contact.heard();
        self.rv_tx.send_replace(rv);
    }

    /// An upstream bookmark: nothing changed up to `rv`.
    fn bookmark(&self, rv: u64) {
        self.contact.heard();
        let mut st = self.write();
        if rv > st.rv() {
            st.set_rv(rv);
            drop(st);
            self.rv_tx.send_replace(rv);
        }
    }

    /// Give `ev` the next sequence number, hand it to the index-routed watchers and append it
    /// to the history. Under the write lock, before the cache RV moves: a watcher that reads the
    /// cache's position finds every event before it in its queue or in the history.
    fn append(&self, st: &mut State, mut ev: Event) {
        ev.seq = st.next_seq;
        st.next_seq += 1;
        let ev = Arc::new(ev);
        self.dispatch.dispatch(&self.indexes, &ev);
        st.history.push_back(ev);
    }

    // ---- reader side ----

    /// How many times the collection was listed again after the first sync.
    pub fn relists(&self) -> u64 {
        self.relists.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_synced(&self) -> bool {
        self.read().synced
    }

    /// The cache's resourceVersion: the RV of the last event or bookmark seen.
    pub fn rv(&self) -> u64 {
        self.read().rv()
    }

    /// Time since the cache's RV last moved (an event, a bookmark or a list; None before the
    /// first sync). A bookmark that repeats the RV does not reset it.
    pub(crate) fn rv_age(&self) -> Option<Duration> {
        self.read().rv_moved().map(|t| t.elapsed())
    }

    /// The oldest RV the cache can still serve a state at (every event above it is in the
    /// history).
    pub(crate) fn history_start(&self) -> u64 {
        self.read().history_start
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Number of objects and their JSON bytes.
    pub fn size(&self) -> (usize, usize) {
        let st = self.read();
        (st.objects.len(), st.bytes)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An estimate of the bytes this cache holds, by part (for `/metrics`): walks every
    /// object and event, so it is for scrapes, not for request paths.
    pub fn memory(&self) -> CacheMemory {
        let (objects, postings, history) = {
            let st = self.read();
            let history: usize = st.history.iter().map(|e| e.memory()).sum();
            (st.objects.clone(), st.postings.clone(), history)
        };
        let mut m = CacheMemory {
            objects: objects.len(),
            history,
            index: postings.memory(),
            protobuf: self.mirror().map_or(0, |m| m.bytes()),
            ..CacheMemory::default()
        };
        for (_, o) in objects.iter() {
            let om = o.memory();
            m.json += om.json;
            m.head += om.head;
        }
        // The map's own nodes: a key and an object pointer per entry, nodes full after a list
        // (see `index::dense_order`), half full where later inserts split them.
        m.index += objects.len() * 5 / 4 * std::mem::size_of::<(Key, Arc<Object>)>();
        m
    }

    /// Current state.
    pub fn snapshot(&self) -> Snapshot {
        self.read().snapshot()
    }

    /// The state of the collection at resourceVersion `rv`: a retained snapshot, or the current
    /// state with every later event undone.
    pub(crate) fn snapshot_at(&self, rv: u64) -> Result<Snapshot, AtError> {
        let st = self.read();
        if rv > st.rv() {
            return Err(AtError::Future { current: st.rv() });
        }
        if rv == st.rv() {
            return Ok(st.snapshot());
        }
        if let Some((_, s)) = st.snapshots.iter().rev().find(|(_, s)| s.rv == rv) {
            return Ok(s.clone());
        }
        if rv < st.history_start {
            return Err(AtError::TooOld {
                oldest: st.history_start,
            });
        }
        let mut objects = st.objects.clone();
        let mut postings = st.postings.clone();
        let history = st.history.clone();
        drop(st);
        for ev in history.iter().rev().take_while(|e| e.rv > rv) {
            let current = objects.get(ev.object.key()).cloned();
            let before = match (&ev.ty, &ev.prev) {
                (EventType::Added, _) | (_, None) => None,
                (_, Some(prev)) => Some(prev.clone()),
            };
            // The key of the version put back, which the map and posting sets then hold.
            let key = Key::of(before.as_ref().unwrap_or(&ev.object));
            postings.update(&self.indexes, &key, current.as_deref(), before.as_deref());
            match before {
                Some(prev) => {
                    objects.insert(key, prev);
                }
                None => {
                    objects.remove(&key);
                }
            }
        }
        let snap = Snapshot {
            rv,
            objects,
            postings: Some(postings),
        };
        self.remember(snap.clone());
        Ok(snap)
    }

    /// How many objects the state at `rv` holds in `range`, if a page before counted them
    /// (see `range_counts`).
    pub(crate) fn range_count(&self, rv: u64, range: &KeyRange) -> Option<usize> {
        self.range_counts.get(rv, range)
    }

    /// The state at `rv` holds `count` objects in `range`: for the page that reads it next.
    pub(crate) fn keep_range_count(&self, rv: u64, range: KeyRange, count: usize) {
        self.range_counts.keep(rv, range, count)
    }

    /// Keep a snapshot for follow-up pages of a paginated list.
    pub(crate) fn remember(&self, snap: Snapshot) {
        let mut st = self.write();
        if st.snapshots.iter().any(|(_, s)| s.rv == snap.rv) {
            return;
        }
        st.snapshots.push_back((Instant::now(), snap));
        st.trim(&self.cfg);
    }

    /// The epoch watches must start in: a watch registered in it whose cursor is placed after
    /// a reset (see [`Writer::replace`]) gets a 410 instead of a history it never saw.
    pub(crate) fn epoch(&self) -> u64 {
        self.read().epoch
    }

    /// The end of the history and the cache RV, read together: a watcher placed there has been
    /// given everything up to that RV.
    pub(crate) fn position(&self) -> (Cursor, u64) {
        let st = self.read();
        (st.end(), st.rv())
    }

    /// The current state, and the cursor of the first event after it: a watch that sends the
    /// snapshot as initial events goes on from there.
    pub(crate) fn snapshot_with_cursor(&self) -> (Snapshot, Cursor) {
        let st = self.read();
        (st.snapshot(), st.end())
    }

    /// Place a watch that continues after resourceVersion `rv` (a client resuming from it):
    /// the cursor of the first event above `rv` — or, with `resume`, of the first made-up
    /// delete *at* `rv` (see [`Event::synthetic`]). `epoch` is the one the watch registered in.
    /// `Future` when the cache has not reached `rv` yet (the watch waits and tries again);
    /// `TooOld` when history no longer covers `rv` or was discarded since `epoch`.
    pub(crate) fn cursor_after(
        &self,
        rv: u64,
        resume: bool,
        epoch: u64,
    ) -> Result<Cursor, AtError> {
        self.read().cursor_after(rv, resume, epoch)
    }

    /// At most `max` events from `cursor` on, moving the cursor past them. `TooOld` when the
    /// history no longer holds the cursor's event (the watcher fell behind the retained
    /// history) or was discarded since the cursor was placed.
    pub(crate) fn read_from(&self, cursor: &mut Cursor, max: usize) -> Result<Batch, AtError> {
        self.read().read_from(cursor, max)
    }

    /// Receive the events whose old or new object has `value` for index `index` (see
    /// the `dispatch` module); undo with [`ResourceCache::unregister`].
    pub(crate) fn register(&self, index: usize, value: &str) -> Arc<Subscriber> {
        self.dispatch.register(index, value)
    }

    pub(crate) fn unregister(&self, index: usize, value: &str, sub: &Arc<Subscriber>) {
        self.dispatch.unregister(index, value, sub)
    }

    /// Count one selector evaluation by a watcher.
    pub(crate) fn count_evaluation(&self) {
        self.evaluations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Selector evaluations by watchers so far.
    pub fn selector_evaluations(&self) -> u64 {
        self.evaluations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A receiver that wakes on every change, carrying the cache RV.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// About how many watchers every change of the type wakes: those subscribed and not
    /// routed by an index (every watcher subscribes; a read waiting for an RV is counted
    /// while it waits). What one change costs in writes.
    pub(crate) fn broadcast_watchers(&self) -> usize {
        self.rv_tx
            .receiver_count()
            .saturating_sub(self.dispatch.registered())
    }

    /// Wait until the cache has reached `rv`, at most `timeout`. Err carries the current RV;
    /// it comes at once when the cache goes over its budget (it will not move again).
    pub(crate) async fn wait_for_rv(&self, rv: u64, timeout: Duration) -> Result<(), u64> {
        let mut rx = self.subscribe();
        let wait = async move {
            rx.wait_for(|cur| *cur >= rv || self.budget.is_over())
                .await
                .is_ok()
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(true) if !self.budget.is_over() => Ok(()),
            _ => Err(self.rv()),
        }
    }
}

/// Bytes a cache holds, by part (estimates: what the allocator holds for each structure).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheMemory {
    pub objects: usize,
    /// The objects' JSON as served.
    pub json: usize,
    /// Per object beyond its JSON: struct, key, head table, watch-line bytes.
    pub head: usize,
    /// The object map's nodes and the posting sets.
    pub index: usize,
    /// Events beyond the current objects (see `Event::memory`).
    pub history: usize,
    /// The protobuf mirror's object messages, every version it keeps (0 without a mirror).
    pub protobuf: usize,
}

impl CacheMemory {
    /// Every part together: what the cache holds (and frees when it is dropped).
    pub(crate) fn total(&self) -> usize {
        self.json + self.head + self.index + self.history + self.protobuf
    }
}

/// What a relist changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ReplaceSummary {
    pub added: usize,
    pub modified: usize,
    pub deleted: usize,
    /// History was discarded (the upstream's RVs went backwards).
    pub reset: bool,
}

#[cfg(test)]
mod tests;
