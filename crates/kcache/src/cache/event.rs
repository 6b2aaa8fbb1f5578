//! A change to the cache, with its watch-line bytes built once and shared by every watcher.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::object::Object;

/// The kind of a change, as in a watch event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added = 0,
    Modified = 1,
    Deleted = 2,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in a resource's history.
#[derive(Debug)]
pub(crate) struct Event {
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
    /// `{"type":"T","object":…}\n`: a slice of the object's own bytes when the object was
    /// built from the upstream event of the same type (see `Object::line`), else a copy.
    line: Bytes,
    /// The other lines of this event, built on first use by some watcher and then shared by
    /// every other one; boxed, so an event no such watcher reads costs one pointer for them.
    other: OnceLock<Box<OtherLines>>,
}

/// Which of an event's lines a watcher receives (rule W2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineKind {
    /// The event as it is.
    AsIs = 0,
    /// ADDED with the new state: the object starts matching the watcher's selector.
    Entered = 1,
    /// DELETED with the previous state at the new RV: the object stops matching.
    Left = 2,
}

/// Lines of an event other than its JSON line as is.
#[derive(Debug, Default)]
struct OtherLines {
    /// JSON lines for [`LineKind::Entered`] and [`LineKind::Left`] (index 0 unused).
    json: [OnceLock<Bytes>; 3],
    /// Lines for metadata-only watches (`PartialObjectMetadata`), by [`LineKind`].
    metadata: [OnceLock<Bytes>; 3],
    /// Protobuf watch frames, by [`LineKind`] (built from the protobuf mirror's bytes).
    protobuf: [OnceLock<Bytes>; 3],
}

impl Event {
    pub(crate) fn new(
        ty: EventType,
        object: Arc<Object>,
        prev: Option<Arc<Object>>,
        synthetic: bool,
    ) -> Event {
        let line = object
            .line(ty.as_str())
            .unwrap_or_else(|| event_line(ty.as_str(), object.raw()));
        Event {
            rv: object.rv,
            line,
            ty,
            object,
            prev,
            synthetic,
            made_up: false,
            seq: 0,
            at: Instant::now(),
            other: OnceLock::new(),
        }
    }

    /// The event as every unfiltered watcher receives it.
    #[cfg(test)]
    pub(crate) fn line(&self) -> &Bytes {
        &self.line
    }

    /// For a watcher whose selector the object starts matching: ADDED with the new state (W2).
    #[cfg(test)]
    pub(crate) fn entered_line(&self) -> Bytes {
        self.json_line(LineKind::Entered)
    }

    /// For a watcher whose selector the object stops matching: DELETED with the previous state
    /// but the new resourceVersion (W2).
    #[cfg(test)]
    pub(crate) fn left_line(&self) -> Bytes {
        self.json_line(LineKind::Left)
    }

    /// The JSON line of `kind`, built once per event.
    pub(crate) fn json_line(&self, kind: LineKind) -> Bytes {
        if kind == LineKind::AsIs {
            return self.line.clone();
        }
        self.others().json[kind as usize]
            .get_or_init(|| {
                let (ty, raw) = self.state(kind);
                event_line(ty, &raw)
            })
            .clone()
    }

    /// The line of `kind` for metadata-only watches: the object as `PartialObjectMetadata`,
    /// built once per event and shared by all of them, as JSON lines are. The objects of a
    /// metadata-only cache are PartialObjectMetadata already: their JSON lines are these.
    pub(crate) fn metadata_line(&self, kind: LineKind) -> Bytes {
        // A prefix compare per call, rather than keeping the JSON line in the metadata cell
        // too: the cells are what `memory` counts, and the bytes are the same.
        if crate::table::is_partial_object_metadata(self.object.raw()) {
            return self.json_line(kind);
        }
        self.others().metadata[kind as usize]
            .get_or_init(|| {
                let (ty, raw) = self.state(kind);
                event_line(ty, &crate::table::partial_object_metadata(&raw))
            })
            .clone()
    }

    /// The protobuf watch frame of `kind`, built once per event by `build` and shared by every
    /// protobuf watcher; `None` (and nothing kept) while `build` cannot make it yet (the
    /// protobuf mirror has not received the object's version).
    pub(crate) fn protobuf_line(
        &self,
        kind: LineKind,
        build: impl FnOnce() -> Option<Bytes>,
    ) -> Option<Bytes> {
        let cell = &self.others().protobuf[kind as usize];
        if let Some(line) = cell.get() {
            return Some(line.clone());
        }
        let line = build()?;
        Some(cell.get_or_init(|| line).clone())
    }

    fn others(&self) -> &OtherLines {
        self.other.get_or_init(Box::default)
    }

    /// The type and object bytes a line of `kind` carries.
    pub(crate) fn state(&self, kind: LineKind) -> (&'static str, Bytes) {
        match kind {
            LineKind::AsIs => (self.ty.as_str(), self.object.raw_bytes()),
            LineKind::Entered => ("ADDED", self.object.raw_bytes()),
            LineKind::Left => {
                let prev = self.prev.as_ref().unwrap_or(&self.object);
                ("DELETED", prev.raw_with_rv(self.rv))
            }
        }
    }

    /// Bytes this event holds beyond the current objects: its struct, its line unless it
    /// shares the object's bytes, lines built for watchers, and the versions of the object
    /// that only the history keeps (the previous state; for a DELETED, the deleted one).
    pub(crate) fn memory(&self) -> usize {
        let mut n = std::mem::size_of::<Event>() + 16;
        if !self.object.holds(&self.line) {
            n += self.line.len();
        }
        if let Some(other) = self.other.get() {
            n += std::mem::size_of::<OtherLines>();
            n += other
                .json
                .iter()
                .chain(&other.metadata)
                .chain(&other.protobuf)
                .filter_map(OnceLock::get)
                .map(Bytes::len)
                .sum::<usize>();
        }
        if let Some(prev) = &self.prev {
            n += prev.memory().total();
        }
        if self.ty == EventType::Deleted {
            n += self.object.memory().total();
        }
        n
    }
}

/// `{"type":"T","object":RAW}\n`
pub(crate) fn event_line(ty: &str, raw: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(raw.len() + 32);
    write_event(&mut out, ty, raw);
    out.freeze()
}

/// Append `{"type":"T","object":RAW}\n` to a buffer (initial events are batched into chunks).
pub(crate) fn write_event(out: &mut BytesMut, ty: &str, raw: &[u8]) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(raw);
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::ResourceInfo;

    fn object(rv: u64, label: &str) -> Arc<Object> {
        let info = ResourceInfo::core_v1("configmaps", "ConfigMap");
        let raw = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"a","namespace":"ns","resourceVersion":"{rv}","labels":{{"v":"{label}"}}}},"data":{{"k":"v"}}}}"#
        );
        Arc::new(Object::from_upstream(&info, Bytes::from(raw), false).unwrap())
    }

    #[test]
    fn metadata_lines_are_built_once_per_event() {
        let ev = Event::new(
            EventType::Modified,
            object(8, "new"),
            Some(object(7, "old")),
            false,
        );
        let pom = |raw: &[u8]| crate::table::partial_object_metadata(raw);
        for (kind, ty, raw) in [
            (LineKind::AsIs, "MODIFIED", ev.object.raw_bytes()),
            (LineKind::Entered, "ADDED", ev.object.raw_bytes()),
            (
                LineKind::Left,
                "DELETED",
                ev.prev.as_ref().unwrap().raw_with_rv(8),
            ),
        ] {
            let first = ev.metadata_line(kind);
            assert_eq!(first, event_line(ty, &pom(&raw)));
            // Every later watcher gets the same bytes, not a new encoding.
            let again = ev.metadata_line(kind);
            assert_eq!(first.as_ptr(), again.as_ptr());
            let json = ev.json_line(kind);
            assert_eq!(json, event_line(ty, &raw));
            assert_eq!(json.as_ptr(), ev.json_line(kind).as_ptr());
        }
        assert_eq!(ev.json_line(LineKind::AsIs), ev.line());
        assert_eq!(ev.entered_line(), ev.json_line(LineKind::Entered));
        assert_eq!(ev.left_line(), ev.json_line(LineKind::Left));
    }

    #[test]
    fn memory_counts_what_the_history_alone_keeps() {
        let ev = Event::new(
            EventType::Modified,
            object(8, "new"),
            Some(object(7, "old")),
            false,
        );
        let base = ev.memory();
        // The line is a copy (the object was not built as this event's line) and the previous
        // version is kept by the event only.
        assert!(base >= ev.line().len() + ev.prev.as_ref().unwrap().memory().total());
        let _ = ev.metadata_line(LineKind::AsIs);
        assert!(ev.memory() > base);
    }
}
