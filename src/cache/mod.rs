//! The in-memory cache of one resource type, fed by its upstream reflector.
//!
//! State is an ordered persistent map (`imbl::OrdMap`, keyed `namespace/name` so it sorts like
//! the apiserver's etcd keys) plus a history of recent events. Taking a snapshot is O(1) and
//! shares structure with the live map, so a LIST streams from a snapshot without holding a lock,
//! and a consistent list at an older resourceVersion (exact-RV lists, continue tokens) is rebuilt
//! by undoing the events after it instead of keeping full copies.
//!
//! One writer (the reflector) and many readers; the lock is held only for O(log n) updates and
//! O(1) clones, never while bytes are written to a client.

mod dispatch;
mod event;

pub use dispatch::{Overflowed, Subscriber};
pub use event::{event_line, write_event, Event, EventType};

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use imbl::ordmap::DiffItem;
use tokio::sync::watch;

use crate::index::{IndexConfig, IndexSet, Postings};
use crate::object::Object;
use crate::resource::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};

/// Objects of one resource by store key.
pub type ObjectMap = imbl::OrdMap<Arc<str>, Arc<Object>>;

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
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            history_window: Duration::from_secs(300),
            history_max_events: 100_000,
            max_snapshots: 32,
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
    pub fn covers(
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
    pub postings: Option<Postings>,
}

/// Why a state at an RV cannot be produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtError {
    /// Older than the retained history; `oldest` is the oldest RV that can be served.
    TooOld { oldest: u64 },
    /// Newer than the cache; `current` is the cache's RV.
    Future { current: u64 },
}

struct State {
    objects: ObjectMap,
    /// Index value → keys, always consistent with `objects`.
    postings: Postings,
    /// Sum of the cached objects' JSON sizes.
    bytes: usize,
    rv: u64,
    synced: bool,
    history: VecDeque<Arc<Event>>,
    /// Every event with an RV above this is in `history`.
    history_start: u64,
    /// Bumped when history is discarded (upstream RVs went backwards): older watches must end.
    epoch: u64,
    snapshots: VecDeque<(Instant, Snapshot)>,
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
    /// When the reflector last had confirmed contact with the upstream: an event, a bookmark,
    /// a list page or a watch opened. The cache's age is measured from it.
    last_contact: RwLock<Option<Instant>>,
    /// Before any contact the age runs from here.
    created: Instant,
    /// Whether the reflector's latest request to the upstream got through.
    upstream_reachable: std::sync::atomic::AtomicBool,
    /// Lists installed after the first sync (upstream 410s, restarts).
    relists: std::sync::atomic::AtomicU64,
    /// Watchers registered under an index value.
    dispatch: dispatch::Dispatch,
    /// Selector evaluations by watchers (what index dispatch saves; tests read it).
    evaluations: std::sync::atomic::AtomicU64,
}

impl ResourceCache {
    pub fn new(info: ResourceInfo, scope: Scope, cfg: CacheConfig) -> ResourceCache {
        let (rv_tx, _) = watch::channel(0);
        let indexes = Arc::new(IndexSet::new(&info.group, &info.resource, info.custom, &[]));
        ResourceCache {
            info: Arc::new(info),
            scope,
            cfg,
            state: RwLock::new(State {
                postings: Postings::new(&indexes),
                objects: ObjectMap::new(),
                bytes: 0,
                rv: 0,
                synced: false,
                history: VecDeque::new(),
                history_start: 0,
                epoch: 0,
                snapshots: VecDeque::new(),
            }),
            rv_tx,
            last_contact: RwLock::new(None),
            created: Instant::now(),
            upstream_reachable: std::sync::atomic::AtomicBool::new(false),
            relists: std::sync::atomic::AtomicU64::new(0),
            indexes,
            dispatch: Default::default(),
            evaluations: Default::default(),
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

    fn read(&self) -> RwLockReadGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way readers
        // could misuse (updates are single assignments), so a poisoned lock is still usable.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self) {
        *self.last_contact.write().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.upstream_reachable
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The reflector heard from the upstream without changing the cache (a list page came in,
    /// a watch was opened): the cache is confirmed current as of now.
    pub fn contact(&self) {
        self.touch();
    }

    /// The reflector's request to the upstream failed; the cache ages until the next contact.
    pub fn lost_contact(&self) {
        self.upstream_reachable
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the reflector's latest request to the upstream got through.
    pub fn upstream_reachable(&self) -> bool {
        self.upstream_reachable
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Time since the last upstream event, bookmark, list page or watch opened.
    pub fn since_last_contact(&self) -> Option<Duration> {
        self.last_contact
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .map(|t| t.elapsed())
    }

    /// How old what the cache serves may be: the time since the last confirmed contact with
    /// the upstream (since the cache was created, before any).
    pub fn age(&self) -> Duration {
        self.since_last_contact()
            .unwrap_or_else(|| self.created.elapsed())
    }

    // ---- writer side (the reflector) ----

    /// Install a complete list of the collection at `rv` (initial sync or relist). After the
    /// first sync the difference to the previous state becomes ordinary events, so downstream
    /// watchers stay exact across upstream 410s. If the upstream's RVs went backwards (a restore
    /// or a new cluster), history is discarded and every running watch is ended with 410.
    pub fn replace(&self, objects: Vec<Object>, rv: u64) -> ReplaceSummary {
        let mut new_map = ObjectMap::new();
        let mut bytes = 0;
        for o in objects {
            bytes += o.raw.len();
            new_map.insert(o.key.clone(), Arc::new(o));
        }
        let mut st = self.write();
        let mut summary = ReplaceSummary::default();
        if st.synced {
            self.relists
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if !st.synced || rv < st.rv {
            if st.synced {
                st.epoch += 1;
                summary.reset = true;
                self.dispatch.overflow_all();
            }
            st.history.clear();
            st.snapshots.clear();
            st.history_start = rv;
            st.postings = Postings::build(&self.indexes, new_map.iter());
            st.objects = new_map;
            st.bytes = bytes;
            st.rv = rv;
            st.synced = true;
        } else {
            let mut changes = Vec::new();
            let mut deletes = Vec::new();
            for item in st.objects.diff(&new_map) {
                match item {
                    DiffItem::Add(_, new) => {
                        changes.push(Event::new(EventType::Added, new.clone(), None, false))
                    }
                    DiffItem::Update {
                        old: (_, old),
                        new: (_, new),
                    } => {
                        if old.rv != new.rv {
                            changes.push(Event::new(
                                EventType::Modified,
                                new.clone(),
                                Some(old.clone()),
                                false,
                            ))
                        }
                    }
                    DiffItem::Remove(_, old) => deletes.push(Event::new(
                        EventType::Deleted,
                        Arc::new(old.with_rv(rv)),
                        Some(old.clone()),
                        true,
                    )),
                }
            }
            changes.sort_by_key(|e| e.rv);
            summary.added = changes.iter().filter(|e| e.ty == EventType::Added).count();
            summary.modified = changes.len() - summary.added;
            summary.deleted = deletes.len();
            let floor = st.rv;
            for ev in changes.into_iter().chain(deletes) {
                let mut ev = ev;
                // History must stay ordered by RV for resume; an object whose RV is not above
                // the old cache RV (it should not exist) is placed right after it.
                if ev.rv <= floor {
                    ev.rv = floor + 1;
                }
                let ev = Arc::new(ev);
                self.dispatch.dispatch(&self.indexes, &ev);
                st.history.push_back(ev);
            }
            st.postings = Postings::build(&self.indexes, new_map.iter());
            st.objects = new_map;
            st.bytes = bytes;
            st.rv = rv.max(st.rv);
            self.trim(&mut st);
        }
        let now = st.rv;
        drop(st);
        self.touch();
        self.rv_tx.send_replace(now);
        summary
    }

    /// Apply one upstream watch event. Events at or below the cache RV are repeats (after a
    /// re-watch) and are ignored.
    pub fn apply(&self, ty: EventType, object: Object) {
        let mut st = self.write();
        if object.rv <= st.rv {
            return;
        }
        let key = object.key.clone();
        let object = Arc::new(object);
        let prev = st.objects.get(&key).cloned();
        let rv = object.rv;
        if let Some(p) = &prev {
            st.bytes -= p.raw.len();
        }
        if ty != EventType::Deleted {
            st.bytes += object.raw.len();
        }
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
            let ev = Arc::new(ev);
            // Under the lock, before the RV moves: a watcher that reads the cache RV finds every
            // event up to it in its queue.
            self.dispatch.dispatch(&self.indexes, &ev);
            st.history.push_back(ev);
        }
        st.rv = rv;
        self.trim(&mut st);
        drop(st);
        self.touch();
        self.rv_tx.send_replace(rv);
    }

    /// An upstream bookmark: nothing changed up to `rv`.
    pub fn bookmark(&self, rv: u64) {
        self.touch();
        let mut st = self.write();
        if rv > st.rv {
            st.rv = rv;
            drop(st);
            self.rv_tx.send_replace(rv);
        }
    }

    fn trim(&self, st: &mut State) {
        let now = Instant::now();
        while let Some(front) = st.history.front() {
            let too_many = st.history.len() > self.cfg.history_max_events;
            let too_old = now.duration_since(front.at) > self.cfg.history_window;
            if !(too_many || too_old) {
                break;
            }
            st.history_start = front.rv;
            st.history.pop_front();
        }
        while let Some((at, snap)) = st.snapshots.front() {
            if st.snapshots.len() > self.cfg.max_snapshots
                || now.duration_since(*at) > self.cfg.history_window
                || snap.rv < st.history_start
            {
                st.snapshots.pop_front();
            } else {
                break;
            }
        }
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
        self.read().rv
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

    /// Current state.
    pub fn snapshot(&self) -> Snapshot {
        let st = self.read();
        Snapshot {
            rv: st.rv,
            objects: st.objects.clone(),
            postings: Some(st.postings.clone()),
        }
    }

    /// The state of the collection at resourceVersion `rv`: a retained snapshot, or the current
    /// state with every later event undone.
    pub fn snapshot_at(&self, rv: u64) -> Result<Snapshot, AtError> {
        let st = self.read();
        if rv > st.rv {
            return Err(AtError::Future { current: st.rv });
        }
        if rv == st.rv {
            return Ok(Snapshot {
                rv,
                objects: st.objects.clone(),
                postings: Some(st.postings.clone()),
            });
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
            let key = ev.object.key.clone();
            let current = objects.get(&key).cloned();
            let before = match (&ev.ty, &ev.prev) {
                (EventType::Added, _) | (_, None) => None,
                (_, Some(prev)) => Some(prev.clone()),
            };
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

    /// Keep a snapshot for follow-up pages of a paginated list.
    pub fn remember(&self, snap: Snapshot) {
        let mut st = self.write();
        if st.snapshots.iter().any(|(_, s)| s.rv == snap.rv) {
            return;
        }
        st.snapshots.push_back((Instant::now(), snap));
        self.trim(&mut st);
    }

    /// The epoch watches must start in; see [`ResourceCache::events_after`].
    pub fn epoch(&self) -> u64 {
        self.read().epoch
    }

    /// Events with an RV above `after` (and synthetic deletes *at* `after` when
    /// `resume` is set: a client resuming from an RV), at most `max` of them, together with the
    /// cache RV at the time: once all returned events are delivered, a watcher is current up to
    /// that RV. Err when `after` is older than the retained history or history was discarded
    /// since `epoch`.
    pub fn events_after(
        &self,
        after: u64,
        resume: bool,
        epoch: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), AtError> {
        let st = self.read();
        if st.epoch != epoch || after < st.history_start {
            return Err(AtError::TooOld {
                oldest: st.history_start,
            });
        }
        let start = st.history.partition_point(|e| {
            if resume && e.synthetic {
                e.rv < after
            } else {
                e.rv <= after
            }
        });
        let evs: Vec<Arc<Event>> = st.history.range(start..).take(max).cloned().collect();
        let rv = if start + evs.len() < st.history.len() {
            evs.last().map_or(after, |e| e.rv)
        } else {
            st.rv
        };
        Ok((evs, rv))
    }

    /// Receive the events whose old or new object has `value` for index `index` (see
    /// [`dispatch`]); undo with [`ResourceCache::unregister`].
    pub fn register(&self, index: usize, value: &str) -> Arc<Subscriber> {
        self.dispatch.register(index, value)
    }

    pub fn unregister(&self, index: usize, value: &str, sub: &Arc<Subscriber>) {
        self.dispatch.unregister(index, value, sub)
    }

    /// Count one selector evaluation by a watcher.
    pub fn count_evaluation(&self) {
        self.evaluations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Selector evaluations by watchers so far.
    pub fn selector_evaluations(&self) -> u64 {
        self.evaluations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A receiver that wakes on every change, carrying the cache RV.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// Wait until the cache has reached `rv`, at most `timeout`. Err carries the current RV.
    pub async fn wait_for_rv(&self, rv: u64, timeout: Duration) -> Result<(), u64> {
        let mut rx = self.subscribe();
        let wait = async move { rx.wait_for(|cur| *cur >= rv).await.is_ok() };
        match tokio::time::timeout(timeout, wait).await {
            Ok(true) => Ok(()),
            _ => Err(self.rv()),
        }
    }
}

/// What a relist changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplaceSummary {
    pub added: usize,
    pub modified: usize,
    pub deleted: usize,
    /// History was discarded (the upstream's RVs went backwards).
    pub reset: bool,
}

/// Something per cached resource type, by API group and plural resource. Nested maps so a
/// lookup from a request's `&str`s allocates nothing (it happens on every request).
pub struct ByResource<T> {
    by_group: HashMap<String, HashMap<String, T>>,
}

impl<T> Default for ByResource<T> {
    fn default() -> Self {
        ByResource {
            by_group: HashMap::new(),
        }
    }
}

impl<T> ByResource<T> {
    pub fn insert(&mut self, group: &str, resource: &str, value: T) {
        self.by_group
            .entry(group.to_string())
            .or_default()
            .insert(resource.to_string(), value);
    }

    pub fn get(&self, group: &str, resource: &str) -> Option<&T> {
        self.by_group.get(group)?.get(resource)
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.by_group.values().flat_map(HashMap::values)
    }
}

/// All cached resource types.
#[derive(Default)]
pub struct Registry {
    caches: ByResource<Arc<ResourceCache>>,
}

impl Registry {
    pub fn insert(&mut self, cache: Arc<ResourceCache>) {
        let info = cache.info.clone();
        self.caches.insert(&info.group, &info.resource, cache);
    }

    /// The cache serving `group/version/resource`, if that exact version is cached.
    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<&Arc<ResourceCache>> {
        self.caches
            .get(group, resource)
            .filter(|c| c.info.version == version)
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceCache>> {
        self.caches.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn info() -> ResourceInfo {
        ResourceInfo {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
            kind: "ConfigMap".into(),
            namespaced: true,
            custom: false,
        }
    }

    fn cm(name: &str, rv: u64, label: &str) -> Object {
        let raw = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{{"v":"{label}"}}}}}}"#
        );
        Object::from_upstream(&info(), Bytes::from(raw), false).unwrap()
    }

    fn names(s: &Snapshot) -> Vec<String> {
        s.objects
            .values()
            .map(|o| format!("{}@{}", o.name(), o.rv))
            .collect()
    }

    #[test]
    fn postings_follow_events_relists_and_rebuilt_snapshots() {
        let label = IndexConfig {
            name: "byV".into(),
            field: None,
            label: Some("v".into()),
        };
        let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default())
            .with_indexes(&[label]);
        let consistent = |s: &Snapshot| {
            let built = Postings::build(&c.indexes, s.objects.iter());
            assert_eq!(
                s.postings.as_ref().unwrap().dump(),
                built.dump(),
                "at {}",
                s.rv
            );
        };
        c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x")], 10);
        c.apply(EventType::Added, cm("c", 11, "y"));
        c.apply(EventType::Modified, cm("a", 12, "y"));
        c.apply(EventType::Deleted, cm("b", 13, "x"));
        c.replace(vec![cm("a", 12, "y"), cm("d", 14, "x")], 20);
        let now = c.snapshot();
        assert_eq!(
            now.postings.as_ref().unwrap().dump(),
            [
                (0, "x".to_string(), vec!["ns/d".to_string()]),
                (0, "y".to_string(), vec!["ns/a".to_string()]),
            ]
        );
        for rv in [10, 11, 12, 13, 20] {
            consistent(&c.snapshot_at(rv).unwrap());
        }
    }

    #[test]
    fn rebuilds_older_states_by_undoing_events() {
        let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
        c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x")], 10);
        c.apply(EventType::Added, cm("c", 11, "x"));
        c.apply(EventType::Modified, cm("a", 12, "y"));
        c.apply(EventType::Deleted, cm("b", 13, "x"));
        assert_eq!(names(&c.snapshot()), ["a@12", "c@11"]);
        assert_eq!(names(&c.snapshot_at(10).unwrap()), ["a@5", "b@6"]);
        assert_eq!(names(&c.snapshot_at(11).unwrap()), ["a@5", "b@6", "c@11"]);
        assert_eq!(names(&c.snapshot_at(12).unwrap()), ["a@12", "b@6", "c@11"]);
        assert_eq!(c.snapshot_at(9).err(), Some(AtError::TooOld { oldest: 10 }));
        assert_eq!(
            c.snapshot_at(14).err(),
            Some(AtError::Future { current: 13 })
        );
    }

    #[test]
    fn relist_turns_differences_into_events() {
        let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
        c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x"), cm("c", 7, "x")], 10);
        let s = c.replace(
            vec![cm("a", 5, "x"), cm("b", 14, "y"), cm("d", 12, "x")],
            20,
        );
        assert_eq!((s.added, s.modified, s.deleted, s.reset), (1, 1, 1, false));
        let (evs, rv) = c.events_after(10, true, c.epoch(), 100).unwrap();
        assert_eq!(rv, 20);
        let got: Vec<_> = evs
            .iter()
            .map(|e| (e.ty, e.object.name().to_string(), e.rv))
            .collect();
        assert_eq!(
            got,
            [
                (EventType::Added, "d".into(), 12),
                (EventType::Modified, "b".into(), 14),
                (EventType::Deleted, "c".into(), 20)
            ]
        );
        // A client resuming at the relist RV gets the made-up delete again.
        let (evs, _) = c.events_after(20, true, c.epoch(), 100).unwrap();
        assert_eq!(evs.len(), 1);
        let (evs, _) = c.events_after(20, false, c.epoch(), 100).unwrap();
        assert!(evs.is_empty());
        // The state before the relist is still reachable.
        assert_eq!(names(&c.snapshot_at(10).unwrap()), ["a@5", "b@6", "c@7"]);
    }

    #[test]
    fn backwards_rv_resets_history() {
        let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
        c.replace(vec![cm("a", 5, "x")], 10);
        let epoch = c.epoch();
        let s = c.replace(vec![cm("a", 2, "x")], 3);
        assert!(s.reset);
        assert!(c.events_after(10, true, epoch, 10).is_err());
        assert_eq!(c.rv(), 3);
    }

    #[test]
    fn history_is_bounded() {
        let cfg = CacheConfig {
            history_max_events: 2,
            ..CacheConfig::default()
        };
        let c = ResourceCache::new(info(), Scope::default(), cfg);
        c.replace(vec![], 1);
        for i in 2..6 {
            c.apply(EventType::Added, cm(&format!("o{i}"), i, "x"));
        }
        assert_eq!(
            c.events_after(1, false, c.epoch(), 10).err(),
            Some(AtError::TooOld { oldest: 3 })
        );
        assert_eq!(c.events_after(3, false, c.epoch(), 10).unwrap().0.len(), 2);
    }

    #[test]
    fn stale_events_are_ignored() {
        let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
        c.replace(vec![cm("a", 5, "x")], 10);
        c.apply(EventType::Modified, cm("a", 9, "y"));
        assert_eq!(names(&c.snapshot()), ["a@5"]);
    }
}
