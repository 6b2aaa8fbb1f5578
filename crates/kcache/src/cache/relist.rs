//! What a relist changes, worked out before the cache is locked.
//!
//! A relist (after the upstream's 410, or a restart of the reflector) replaces the whole
//! collection. Downstream watchers must see it as ordinary events, so the difference between
//! the cached state and the new list becomes ADDED, MODIFIED and made-up DELETED events, in
//! RV order. Working that out is O(n) in the collection (the diff, the sort, and rebuilding the
//! posting sets); done under the cache's write lock it would stop every reader of the type —
//! every LIST, GET and watch — for as long, and with them the tokio workers they run on. So it
//! is done here, from a snapshot of the state taken under a read lock, and the cache then only
//! swaps the new state in and appends the events under its write lock (see
//! `ResourceCache::install`). The reflector is the only writer of a synced cache, so the state
//! it diffed against is still the cache's when it takes the write lock; the cache checks that
//! (the map's identity and RV) and works the plan out again under the lock if not.

use std::sync::Arc;

use imbl::ordmap::DiffItem;

use super::{Event, EventType, ObjectMap, ReplaceSummary};
use crate::object::Object;

/// The events that turn the state at `floor` into a relist at `rv`, in RV order, and what they
/// change (`summary`; `reset` is never set here).
pub(super) struct RelistPlan {
    pub events: Vec<Event>,
    pub summary: ReplaceSummary,
}

/// Work out the events that take `old` (the cache at `floor`) to `new` (the list at `rv`).
pub(super) fn plan(old: &ObjectMap, new: &ObjectMap, floor: u64, rv: u64) -> RelistPlan {
    let mut changes = Vec::new();
    let mut removed = Vec::new();
    for item in old.diff(new) {
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
            DiffItem::Remove(_, old) => removed.push(old.clone()),
        }
    }
    for ev in &mut changes {
        // History must stay ordered by RV for resume; an object whose RV is not above the old
        // cache RV (it should not exist) is placed right after it.
        if ev.rv <= floor {
            ev.rv = floor + 1;
        }
    }
    changes.sort_by_key(|e| e.rv);
    let added = changes.iter().filter(|e| e.ty == EventType::Added).count();
    let summary = ReplaceSummary {
        added,
        modified: changes.len() - added,
        deleted: removed.len(),
        reset: false,
    };
    let deletes = made_up_deletes(removed, floor, rv, &changes);
    let mut events: Vec<Event> = changes.into_iter().chain(deletes).collect();
    // Stable: at a shared RV (only when there was no room, see `made_up_deletes`) the real
    // changes come before the made-up deletes, as resume expects.
    events.sort_by_key(|e| e.rv);
    RelistPlan { events, summary }
}

/// DELETED events for the objects a relist at `rv` no longer finds, the cache having been at
/// `floor`. Their real deletion RVs are unknown, but each delete took a revision of its own in
/// `(floor, rv]` that no surviving object of the type carries, so there are at least as many
/// such free RVs as deletes: each made-up delete gets one, in order. Those RVs are free for
/// this type only: a client may hold one of them from the upstream, so a resume from inside
/// the relist's range gets every made-up delete (see `Cursor`). Should there be too few free
/// RVs (an upstream breaking that rule), the rest share `rv` and are marked [`Event::synthetic`]: a client resuming at `rv` gets them again, since a
/// repeated delete is harmless to informers and a missed one is not.
fn made_up_deletes(
    removed: Vec<Arc<Object>>,
    floor: u64,
    rv: u64,
    changes: &[Event],
) -> Vec<Event> {
    let mut taken = changes.iter().map(|e| e.rv).peekable();
    let mut next = floor + 1;
    let mut out = Vec::with_capacity(removed.len());
    for old in removed {
        // The lowest RV from `next` on that no change uses (changes are sorted).
        loop {
            while taken.peek().is_some_and(|t| *t < next) {
                taken.next();
            }
            if next <= rv && taken.peek() == Some(&next) {
                next += 1;
            } else {
                break;
            }
        }
        let (at, synthetic) = if next <= rv {
            (next, false)
        } else {
            (rv, true)
        };
        next += 1;
        let mut ev = Event::new(
            EventType::Deleted,
            Arc::new(old.with_rv(at)),
            Some(old),
            synthetic,
        );
        ev.made_up = true;
        out.push(ev);
    }
    out
}
