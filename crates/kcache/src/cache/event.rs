//! A change to the cache, with its watch-line bytes built once and shared by every watcher.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::object::Object;

/// The kind of a change, as in a watch event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added = 0,
    Modified = 1,
    Deleted = 2,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in a resource's history.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the change (for DELETED the deletion RV, carried by `object`).
    pub rv: u64,
    pub ty: EventType,
    /// State after the change; for DELETED the last state, carrying the deletion RV.
    pub object: Arc<Object>,
    /// State before the change (MODIFIED, DELETED).
    pub prev: Option<Arc<Object>>,
    /// A DELETED made up by a relist whose real deletion RV is unknown (it carries the relist's
    /// RV, which it may share with other events). Watches resuming *at* that RV get it again:
    /// a repeated delete is harmless to informers, a missed one is not.
    pub synthetic: bool,
    /// A DELETED made up by a relist (its deletion RV is kcache's choice, see
    /// `made_up_deletes`); clients that never saw it are always given it (see `Cursor`).
    pub made_up: bool,
    /// Its place in the cache's history, given when it is appended (see `cache::Cursor`).
    pub seq: u64,
    pub(crate) at: Instant,
    line: Bytes,
    entered: OnceLock<Bytes>,
    left: OnceLock<Bytes>,
}

impl Event {
    pub fn new(
        ty: EventType,
        object: Arc<Object>,
        prev: Option<Arc<Object>>,
        synthetic: bool,
    ) -> Event {
        Event {
            rv: object.rv,
            line: event_line(ty.as_str(), &object.raw),
            ty,
            object,
            prev,
            synthetic,
            made_up: false,
            seq: 0,
            at: Instant::now(),
            entered: OnceLock::new(),
            left: OnceLock::new(),
        }
    }

    /// The event as every unfiltered watcher receives it.
    pub fn line(&self) -> &Bytes {
        &self.line
    }

    /// For a watcher whose selector the object starts matching: ADDED with the new state (W2).
    pub fn entered_line(&self) -> Bytes {
        self.entered
            .get_or_init(|| event_line("ADDED", &self.object.raw))
            .clone()
    }

    /// For a watcher whose selector the object stops matching: DELETED with the previous state
    /// but the new resourceVersion (W2).
    pub fn left_line(&self) -> Bytes {
        self.left
            .get_or_init(|| {
                let prev = self.prev.as_ref().unwrap_or(&self.object);
                event_line("DELETED", &prev.raw_with_rv(self.rv))
            })
            .clone()
    }
}

/// `{"type":"T","object":RAW}\n`
pub fn event_line(ty: &str, raw: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(raw.len() + 32);
    write_event(&mut out, ty, raw);
    out.freeze()
}

/// Append `{"type":"T","object":RAW}\n` to a buffer (initial events are batched into chunks).
pub fn write_event(out: &mut BytesMut, ty: &str, raw: &[u8]) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(raw);
    out.extend_from_slice(b"}\n");
}
