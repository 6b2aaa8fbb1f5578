//! A watcher's place in a cache's history.
//!
//! Every event appended to a cache's history gets a sequence number: unique, and one more than
//! the event before it, whatever its resourceVersion. Several events may share an RV (the
//! deletes a relist makes up all carry the relist's RV), so an RV cannot say which of them a
//! watcher has already seen; a sequence number can. A cursor is the sequence number of the
//! next event a watcher has not been given, so reading on from it can neither skip nor repeat
//! an event, however the reads are batched — for watchers reading the history and for
//! index-routed watchers falling back to it after their queue overflowed alike.
//!
//! RVs stay what clients see: a watch is *placed* by RV once (where a client resumes, or where
//! a snapshot was taken), and from then on moves by sequence number only.
//!
//! One exception to "placed once": a client may resume from an RV it got from the upstream
//! itself (a consistent list kcache forwarded), which can fall inside the range of a relist
//! whose deletes kcache numbered itself. Such a client has seen the upstream's changes up to its
//! RV but none of kcache's made-up deletes, so its cursor starts at the relist and skips only
//! the real changes at or below its RV (`skip_through`).

use std::sync::Arc;

use super::Event;

/// The next event a watcher has not been given, in one epoch of a cache's history (history is
/// discarded, and the epoch bumped, when the upstream's RVs go backwards; a cursor of an older
/// epoch can never be read from again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(super) epoch: u64,
    pub(super) seq: u64,
    /// Real (upstream) events at or below this RV are not given: the watcher's state already
    /// has them. Made-up deletes are always given. Zero when nothing is skipped.
    pub(super) skip_through: u64,
}

impl Cursor {
    /// Whether the event with sequence number `seq` comes before this cursor: a watcher at
    /// the cursor has been given it.
    pub(crate) fn covers(&self, seq: u64) -> bool {
        seq < self.seq
    }

    /// Whether a watcher at this cursor is given `ev` once it reaches it (see `skip_through`).
    pub(crate) fn wants(&self, ev: &Event) -> bool {
        ev.made_up || ev.rv > self.skip_through
    }

    /// `ev` as this watcher is given it. A made-up delete below `skip_through` is given at
    /// `skip_through` itself, the client's own RV: RVs in a watch never go backwards, and a
    /// client resuming at that RV gets it again (a repeated delete is harmless). Only watchers
    /// placed inside a relist's range pay for the copy.
    pub(crate) fn given(&self, ev: Arc<Event>) -> Arc<Event> {
        if !(ev.made_up && ev.rv < self.skip_through) {
            return ev;
        }
        let mut copy = Event::new(
            ev.ty,
            Arc::new(ev.object.with_rv(self.skip_through)),
            ev.prev.clone(),
            true,
        );
        copy.made_up = true;
        copy.seq = ev.seq;
        Arc::new(copy)
    }

    /// Move past everything before `other` (of the same epoch); never backwards.
    pub(crate) fn advance_to(&mut self, other: Cursor) {
        if other.epoch == self.epoch && other.seq > self.seq {
            self.seq = other.seq;
        }
    }
}

/// What a read of the history from a cursor returned.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The events from the cursor on, in order (at most the number asked for).
    pub events: Vec<Arc<Event>>,
    /// Set when the read reached the end of the history: once these events are delivered, the
    /// watcher is current up to this RV (the cache's RV at the time of the read, which bookmarks
    /// may have moved past the last event's).
    pub caught_up: Option<u64>,
}
