//! The versioned state of one cache: everything its one lock protects.
//!
//! The objects, their posting sets, the history of recent events with their sequence numbers,
//! the relists inside that history and the snapshots kept for follow-up pages change together:
//! a watcher placed at the end of the history has been given everything up to the state's RV,
//! and a state rebuilt at an older RV undoes exactly the events after it. So they are one
//! value, read and written under one lock (held by `ResourceCache` for O(log n) updates and
//! O(1) clones only: see `relist` for the O(n) work of a relist, done before the lock is taken).
//!
//! Guarantees kept here, which the cache's readers rely on:
//! - `postings` always index exactly `objects`; `bytes` is their JSON size;
//! - `history` is in RV order with consecutive sequence numbers ending at `next_seq - 1`, and
//!   holds every event with an RV above `history_start`;
//! - `epoch` moves whenever history is discarded for a reset, so older cursors get `TooOld`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::{AtError, Batch, CacheConfig, Cursor, Event, ObjectMap, Postings, Snapshot};

pub(super) struct State {
    pub objects: ObjectMap,
    /// Index value → keys, always consistent with `objects`.
    pub postings: Postings,
    /// Sum of the cached objects' JSON sizes.
    pub bytes: usize,
    /// Set through [`State::set_rv`] only, which keeps `rv_moved` with it; read with
    /// [`State::rv`].
    rv: u64,
    /// When `rv` last moved (None before the first sync): the age of the cache's RV.
    rv_moved: Option<Instant>,
    pub synced: bool,
    /// Recent events in order; their sequence numbers are consecutive (see [`Cursor`]).
    pub history: VecDeque<Arc<Event>>,
    /// The sequence number the next event appended gets.
    pub next_seq: u64,
    /// Every event with an RV above this is in `history`.
    pub history_start: u64,
    /// Bumped when history is discarded (upstream RVs went backwards): older watches must end.
    pub epoch: u64,
    /// The relists whose events are (or were) in `history`, oldest first.
    pub relists: VecDeque<Relist>,
    pub snapshots: VecDeque<(Instant, Snapshot)>,
}

/// Where a relist's events start in the history, and the RV range they fill: the cache was
/// at `floor`, the relist at `rv`.
pub(super) struct Relist {
    pub floor: u64,
    pub rv: u64,
    pub first_seq: u64,
}

impl State {
    /// The state of a cache that has not synced: nothing, at RV 0.
    pub(super) fn new(postings: Postings) -> State {
        State {
            objects: ObjectMap::new(),
            postings,
            bytes: 0,
            rv: 0,
            rv_moved: None,
            synced: false,
            history: VecDeque::new(),
            next_seq: 0,
            history_start: 0,
            epoch: 0,
            relists: VecDeque::new(),
            snapshots: VecDeque::new(),
        }
    }

    /// The RV the state is at: the upstream's, as of the last event, bookmark or list.
    pub(super) fn rv(&self) -> u64 {
        self.rv
    }

    /// When the RV last moved (None before the first sync).
    pub(super) fn rv_moved(&self) -> Option<Instant> {
        self.rv_moved
    }

    /// Move the RV to `rv` (backwards only for a reset), noting when it moved; the first
    /// install counts as a move even at the same RV.
    pub(super) fn set_rv(&mut self, rv: u64) {
        if rv != self.rv || self.rv_moved.is_none() {
            self.rv_moved = Some(Instant::now());
        }
        self.rv = rv;
    }

    /// The current objects and posting sets (O(1): shared structure).
    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot {
            rv: self.rv,
            objects: self.objects.clone(),
            postings: Some(self.postings.clone()),
        }
    }

    /// The cursor of the first event after the current state.
    pub(super) fn end(&self) -> Cursor {
        Cursor {
            epoch: self.epoch,
            seq: self.next_seq,
            skip_through: 0,
        }
    }

    pub(super) fn cursor_after(
        &self,
        rv: u64,
        resume: bool,
        epoch: u64,
    ) -> Result<Cursor, AtError> {
        let st = self;
        if st.epoch != epoch || rv < st.history_start {
            return Err(AtError::TooOld {
                oldest: st.history_start,
            });
        }
        if rv > st.rv {
            return Err(AtError::Future { current: st.rv });
        }
        let index = st.history.partition_point(|e| {
            if resume && e.synthetic {
                e.rv < rv
            } else {
                e.rv <= rv
            }
        });
        let first = st.next_seq - st.history.len() as u64;
        // An RV strictly inside a relist's range was not issued by kcache for this type (its
        // made-up deletes may sit at or below it): start at the relist, skip the real changes
        // the client has (see `Cursor`).
        if let Some(relist) = st.relists.iter().find(|r| r.floor < rv && rv < r.rv) {
            if relist.first_seq < first {
                return Err(AtError::TooOld {
                    oldest: st.history_start,
                });
            }
            let at_index = first + index as u64;
            return Ok(Cursor {
                epoch: st.epoch,
                seq: relist.first_seq.min(at_index),
                skip_through: rv,
            });
        }
        Ok(Cursor {
            epoch: st.epoch,
            seq: first + index as u64,
            skip_through: 0,
        })
    }

    pub(super) fn read_from(&self, cursor: &mut Cursor, max: usize) -> Result<Batch, AtError> {
        let st = self;
        let first = st.next_seq - st.history.len() as u64;
        if cursor.epoch != st.epoch || cursor.seq < first {
            return Err(AtError::TooOld {
                oldest: st.history_start,
            });
        }
        // A cursor is never placed past the end; `min` keeps the index in range regardless.
        let start = ((cursor.seq - first) as usize).min(st.history.len());
        let events: Vec<Arc<Event>> = st.history.range(start..).take(max).cloned().collect();
        cursor.seq = first + (start + events.len()) as u64;
        let events = events
            .into_iter()
            .filter(|e| cursor.wants(e))
            .map(|e| cursor.given(e))
            .collect();
        let caught_up = (cursor.seq == st.next_seq).then_some(st.rv);
        Ok(Batch { events, caught_up })
    }

    /// Put a new state's objects and posting sets in place, returning the old ones for the
    /// caller to drop once it has released the write lock (freeing a whole collection is O(n)).
    pub(super) fn swap_in(
        &mut self,
        objects: ObjectMap,
        postings: Postings,
    ) -> (ObjectMap, Postings) {
        (
            std::mem::replace(&mut self.objects, objects),
            std::mem::replace(&mut self.postings, postings),
        )
    }

    /// Drop what `cfg` no longer retains: events older than the window or beyond the count,
    /// relists no resume RV can fall into any more, and snapshots too many, too old, or older
    /// than the history.
    pub(super) fn trim(&mut self, cfg: &CacheConfig) {
        let now = Instant::now();
        while let Some(front) = self.history.front() {
            let too_many = self.history.len() > cfg.history_max_events;
            let too_old = now.duration_since(front.at) > cfg.history_window;
            if !(too_many || too_old) {
                break;
            }
            self.history_start = front.rv;
            self.history.pop_front();
        }
        let start = self.history_start;
        while self.relists.front().is_some_and(|r| r.rv <= start) {
            self.relists.pop_front();
        }
        while let Some((at, snap)) = self.snapshots.front() {
            if self.snapshots.len() > cfg.max_snapshots
                || now.duration_since(*at) > cfg.history_window
                || snap.rv < self.history_start
            {
                self.snapshots.pop_front();
            } else {
                break;
            }
        }
    }
}
