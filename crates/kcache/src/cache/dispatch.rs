//! Index-aware watch dispatch: watchers whose selector pins an indexed value (a kubelet's
//! `spec.nodeName=<node>`) register under (index, value) and receive only the events whose old
//! or new object has that value, so an event costs O(matching watchers) instead of waking and
//! filtering every watcher of the resource.
//!
//! Each registered watcher has a small bounded queue of shared events. On overflow the queue is
//! dropped and the watcher reads the history from its last delivered RV instead (nothing is
//! lost; a 410 only if history no longer covers it).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::Notify;

use super::{Cursor, Event};
use crate::index::IndexSet;

/// Events queued per registered watcher before it falls back to reading history.
const QUEUE: usize = 256;

/// Not an index: the route of watchers that pin one object's name (`metadata.name=<name>`, as
/// a kubelet watches its own Node), by the name of the event's object. Every type has names,
/// and no index is kept for them (a name is the object's key, not a value worth a posting
/// set).
pub(crate) const BY_NAME: usize = usize::MAX;

/// One registered watcher's inbox.
#[derive(Default)]
pub(crate) struct Subscriber {
    queue: Mutex<Inbox>,
    notify: Notify,
}

#[derive(Default)]
struct Inbox {
    events: VecDeque<Arc<Event>>,
    overflowed: bool,
}

/// The queue overflowed (or history was reset): read the history instead.
#[derive(Debug)]
pub(crate) struct Overflowed;

impl Subscriber {
    fn inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, ev: &Arc<Event>) {
        let mut q = self.inbox();
        if q.overflowed {
            return;
        }
        if q.events.len() >= QUEUE {
            q.overflowed = true;
            q.events.clear();
        } else {
            q.events.push_back(ev.clone());
        }
        drop(q);
        self.notify.notify_one();
    }

    fn overflow(&self) {
        let mut q = self.inbox();
        q.overflowed = true;
        q.events.clear();
        drop(q);
        self.notify.notify_one();
    }

    /// The queued events before `end` (a position of the cache, see
    /// `ResourceCache::position`), in order; Err once after an overflow (the queue then starts
    /// afresh, and the watcher reads the history from its cursor instead).
    pub(crate) fn take(&self, end: &Cursor) -> Result<Vec<Arc<Event>>, Overflowed> {
        let mut q = self.inbox();
        if std::mem::take(&mut q.overflowed) {
            q.events.clear();
            return Err(Overflowed);
        }
        let n = q.events.partition_point(|e| end.covers(e.seq));
        Ok(q.events
            .drain(..n)
            .filter(|e| end.wants(e))
            .map(|e| end.given(e))
            .collect())
    }

    /// Resolves once something was pushed since the last call (a push while nobody waits is
    /// remembered).
    pub(crate) async fn notified(&self) {
        self.notify.notified().await
    }
}

/// The watchers registered under each value of one index.
type ByValue = HashMap<Box<str>, Vec<Arc<Subscriber>>>;

/// Registered watchers by index and value.
#[derive(Default)]
pub(super) struct Dispatch {
    table: RwLock<HashMap<usize, ByValue>>,
    /// Watchers registered, read without the table's lock.
    registered: AtomicUsize,
}

impl Dispatch {
    pub(super) fn register(&self, index: usize, value: &str) -> Arc<Subscriber> {
        let sub = Arc::new(Subscriber::default());
        let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
        t.entry(index)
            .or_default()
            .entry(value.into())
            .or_default()
            .push(sub.clone());
        self.registered.fetch_add(1, Ordering::Relaxed);
        sub
    }

    /// How many watchers are registered.
    pub(super) fn registered(&self) -> usize {
        self.registered.load(Ordering::Relaxed)
    }

    pub(super) fn unregister(&self, index: usize, value: &str, sub: &Arc<Subscriber>) {
        let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
        let Some(by_value) = t.get_mut(&index) else {
            return;
        };
        if let Some(subs) = by_value.get_mut(value) {
            let before = subs.len();
            subs.retain(|s| !Arc::ptr_eq(s, sub));
            self.registered
                .fetch_sub(before - subs.len(), Ordering::Relaxed);
            if subs.is_empty() {
                by_value.remove(value);
            }
        }
        if by_value.is_empty() {
            t.remove(&index);
        }
    }

    /// Hand `ev` to the watchers registered under a value its old or new object has.
    pub(super) fn dispatch(&self, indexes: &IndexSet, ev: &Arc<Event>) {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        for (&i, by_value) in t.iter() {
            let mut values: Vec<&str> = Vec::with_capacity(2);
            for o in std::iter::once(&ev.object).chain(ev.prev.as_ref()) {
                let mut add = |v| {
                    if !values.contains(&v) {
                        values.push(v)
                    }
                };
                if i == BY_NAME {
                    add(o.name());
                } else {
                    indexes.for_each_value(i, o, add);
                }
            }
            for v in values {
                for s in by_value.get(v).into_iter().flatten() {
                    s.push(ev);
                }
            }
        }
    }

    /// Every registered watcher must re-read history (it was reset: they will get their 410).
    pub(super) fn overflow_all(&self) {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        for s in t.values().flat_map(|m| m.values()).flatten() {
            s.overflow();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::EventType;
    use crate::object::Object;
    use crate::resource::ResourceInfo;

    fn event(rv: u64) -> Arc<Event> {
        let info = ResourceInfo::core_v1("pods", "Pod");
        let raw = format!(
            r#"{{"metadata":{{"name":"p","namespace":"d","resourceVersion":"{rv}"}},"spec":{{"nodeName":"n1"}}}}"#
        );
        let o = Object::from_upstream(&info, bytes::Bytes::from(raw), false).unwrap();
        let mut ev = Event::new(EventType::Added, Arc::new(o), None, false);
        ev.seq = rv;
        Arc::new(ev)
    }

    /// The position before the event with sequence number `seq`.
    fn at(seq: u64) -> Cursor {
        Cursor {
            epoch: 0,
            seq,
            skip_through: 0,
        }
    }

    #[test]
    fn routes_by_value_and_overflows_to_history() {
        let set = IndexSet::new("", "pods", false, &[]);
        let node = set.by_field("spec.nodeName").unwrap();
        let d = Dispatch::default();
        let n1 = d.register(node, "n1");
        let n2 = d.register(node, "n2");
        d.dispatch(&set, &event(1));
        d.dispatch(&set, &event(2));
        assert_eq!(n1.take(&at(2)).unwrap().len(), 1);
        assert_eq!(n1.take(&at(6)).unwrap().len(), 1);
        assert!(n2.take(&at(6)).unwrap().is_empty());
        for rv in 3..3 + QUEUE as u64 + 1 {
            d.dispatch(&set, &event(rv));
        }
        assert!(n1.take(&at(u64::MAX)).is_err(), "overflow is reported once");
        d.dispatch(&set, &event(1000));
        assert_eq!(n1.take(&at(u64::MAX)).unwrap().len(), 1);
        d.unregister(node, "n1", &n1);
        d.dispatch(&set, &event(1001));
        assert!(n1.take(&at(u64::MAX)).unwrap().is_empty());
        d.overflow_all();
        assert!(n2.take(&at(u64::MAX)).is_err());
    }

    #[test]
    fn routes_by_name() {
        let set = IndexSet::new("", "pods", false, &[]);
        let d = Dispatch::default();
        let p = d.register(BY_NAME, "p");
        let q = d.register(BY_NAME, "q");
        d.dispatch(&set, &event(1));
        assert_eq!(p.take(&at(2)).unwrap().len(), 1);
        assert!(q.take(&at(2)).unwrap().is_empty());
    }
}
