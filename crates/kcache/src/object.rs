//! One cached object: its raw JSON bytes exactly as the upstream sent them, plus the few head
//! fields kcache needs to index, select and order it. Built once per upstream event and shared by
//! every reader: list bodies and watch lines are assembled from these bytes, never re-serialised.
//!
//! Memory is what limits how much a kcache can hold, so an object is one allocation of bytes
//! (`buf`) plus its small struct (56 bytes, inside its `Arc`):
//!
//! ```text
//! buf: [{"type":"T","object":]  RAW JSON  [}\n]  KEY  HEAD
//!       └ only when built from a watch event: the event's line is then a slice of `buf`
//! ```
//!
//! KEY is the store key, `namespace/name`: the cache's map and posting sets hold an object's
//! key as a pointer to the object itself ([`Key`]), so no key is allocated apart from it.
//!
//! The head is a table of little-endian words (`u16`, or `u32` for objects beyond 64 KiB;
//! see `pack_head`): the label, selectable-field and index
//! value counts, then one entry per value giving its position in `buf`. A value points into
//! the raw JSON when the JSON string had no escapes (the common case), else at its decoded
//! text appended after the table, as are values the JSON does not spell (Go zero values such
//! as `"false"`, rendered numbers). Upstream objects are read with a borrowed, metadata-only
//! parse (`crate::json_view`): no `serde_json::Value` is built per object.
//!
//! Why one file of this length: the packed head's layout is written by `pack_head` and read by
//! the accessors of [`Object`]; the two must change together, so they are kept side by side.
//! The tests are in `object/tests.rs`.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::index::{IndexSet, Indexed};
use crate::json_view::{self, Members};
use crate::resource::ResourceInfo;
use crate::selector;
use crate::table::RowSlot;

/// Why an object from the upstream could not be taken into the cache.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object is not valid UTF-8")]
    Utf8,
    #[error("object has no metadata.name")]
    NoName,
    #[error("object has no numeric metadata.resourceVersion")]
    NoResourceVersion,
    #[error("object is too large to cache ({0})")]
    TooLarge(&'static str),
}

/// The start and end of a watch line around an object: `{"type":"T","object":RAW}\n`.
const LINE_START: &[u8] = b"{\"type\":\"";
const LINE_MID: &[u8] = b"\",\"object\":";
const LINE_END: &[u8] = b"}\n";

/// Words of the head table before its entries: label, field and index value counts.
const HEAD_COUNTS: usize = 3;
/// Words per label (key offset, key length, value offset, value length), per selectable field
/// (name position, offset, length) and per index value (slot, offset, length).
const LABEL_WORDS: usize = 4;
const FIELD_WORDS: usize = 3;
const INDEX_WORDS: usize = 3;

/// A cached object.
#[derive(Debug, Clone)]
pub struct Object {
    pub rv: u64,
    /// The one allocation of bytes (see the module comment).
    buf: Bytes,
    /// Where the head table starts in `buf` (the raw JSON, line end if any, and key are before
    /// it).
    head_at: u32,
    /// Where the resourceVersion value (without quotes) is in `buf`, and its length.
    rv_at: u32,
    rv_len: u8,
    /// Length of the watch-line start before the raw JSON (0: `buf` holds no line).
    line_start: u8,
    /// Bytes per word of the head table: 2 or 4 (see `pack_head`).
    word_width: u8,
    /// Where the fields after `kind`/`apiVersion` start in the raw JSON, for typed built-ins
    /// whose list items omit them: the item is `{` + `raw[item_at..]`. 0 means the item is
    /// the raw JSON.
    item_at: u16,
    /// Length of the store key, which ends where the head table starts.
    key_len: u16,
    /// Its Table row, once printed (see `table::RowSlot`): empty in a copy.
    row: RowSlot,
}

/// An object's store key as the cache's map and posting sets hold it: the object itself (one
/// pointer, no key text of its own), ordered and compared as its key text
/// (`Object::key`), so it can be looked up by a `&str` or an `Arc<str>`.
///
/// A posting set keeps the `Key` it was given until the object's entry is replaced: the
/// posting sets replace the entries of every changed object (see `index::Postings::update`),
/// so a key never keeps an old version of an object alive longer than the snapshots do.
#[derive(Debug, Clone)]
pub struct Key(Arc<Object>);

impl Key {
    pub(crate) fn of(object: &Arc<Object>) -> Key {
        Key(object.clone())
    }

    pub(crate) fn as_str(&self) -> &str {
        self.0.key()
    }

    /// The key's bytes, for comparing: a str's order is its bytes' order, and comparing bytes
    /// skips the UTF-8 check [`Key::as_str`] makes, which every step of a map lookup or range
    /// seek would otherwise repeat (4 % of kcache's CPU in a profile of large LISTs).
    fn as_bytes(&self) -> &[u8] {
        self.0.key_bytes()
    }

    /// The version of the object this key was taken from.
    #[cfg(test)]
    pub(crate) fn object(&self) -> &Arc<Object> {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl std::ops::Deref for Key {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

/// Key ranges are written with `Arc<str>` bounds (`api::list`, `api::watch`): looked up in
/// imbl's maps through these.
impl equivalent::Equivalent<Key> for Arc<str> {
    fn equivalent(&self, key: &Key) -> bool {
        self.as_bytes() == key.as_bytes()
    }
}

impl equivalent::Comparable<Key> for Arc<str> {
    fn compare(&self, key: &Key) -> std::cmp::Ordering {
        self.as_bytes().cmp(key.as_bytes())
    }
}

/// Two versions are equal when they are the same bytes (the relist diff relies on this).
impl PartialEq for Object {
    fn eq(&self, other: &Object) -> bool {
        self.rv == other.rv && self.key_bytes() == other.key_bytes() && self.raw() == other.raw()
    }
}

/// Bytes an object costs, by part (estimates of what the allocator holds for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ObjectMemory {
    /// The JSON as served (with `kind`/`apiVersion`).
    pub json: usize,
    /// Everything else: the struct and its reference count, the key, the head table and its
    /// text, the watch-line bytes around the JSON.
    pub head: usize,
}

impl ObjectMemory {
    pub(crate) fn total(&self) -> usize {
        self.json + self.head
    }
}

/// A string of the head while an object is built: a position in the new `buf`, or text to
/// append after the table.
enum Loc<'a> {
    At(usize, usize),
    Text(Cow<'a, str>),
}

/// What kcache leaves out of a type's objects before caching them, to save memory: every
/// answer is then exactly what the apiserver would send for the objects without those fields
/// (the rest of each object is kept byte for byte; an emptied map is left out, as Go's
/// `omitempty` does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Strip {
    /// `metadata.managedFields`.
    pub managed_fields: bool,
    /// These keys of `metadata.annotations` (for example
    /// `kubectl.kubernetes.io/last-applied-configuration`).
    pub annotations: Vec<String>,
    /// Everything but `metadata`: each object is kept as its `meta.k8s.io/v1`
    /// PartialObjectMetadata, the form metadata informers read (`resources[].metadataOnly`).
    /// Its raw JSON is then that PartialObjectMetadata, `kind` and `apiVersion` included.
    pub metadata_only: bool,
}

impl Strip {
    /// Nothing left out but, when `drop`, `metadata.managedFields`.
    pub(crate) fn managed_fields(drop: bool) -> Strip {
        Strip {
            managed_fields: drop,
            ..Strip::default()
        }
    }

    /// Whether anything is left out.
    pub(crate) fn is_empty(&self) -> bool {
        !self.managed_fields && self.annotations.is_empty() && !self.metadata_only
    }

    /// An object's text without what this leaves out; None when it has none of it.
    fn apply(&self, text: &str) -> Result<Option<String>, ObjectError> {
        let without_managed = if self.managed_fields {
            without_managed_fields(text)?
        } else {
            None
        };
        if self.annotations.is_empty() {
            return Ok(without_managed);
        }
        let text_now = without_managed.as_deref().unwrap_or(text);
        Ok(without_annotations(text_now, &self.annotations)?.or(without_managed))
    }
}

impl Object {
    /// Take an object from an upstream list item or watch event. `raw` may carry `kind` and
    /// `apiVersion` (watch events) or not (typed list items).
    #[cfg(test)]
    pub(crate) fn from_upstream(
        info: &ResourceInfo,
        raw: Bytes,
        drop_managed_fields: bool,
    ) -> Result<Object, ObjectError> {
        Self::from_upstream_indexed(info, &IndexSet::default(), raw, drop_managed_fields)
    }

    /// `Object::from_upstream`, extracting the values of the configured field-path indexes.
    pub(crate) fn from_upstream_indexed(
        info: &ResourceInfo,
        indexes: &IndexSet,
        raw: Bytes,
        drop_managed_fields: bool,
    ) -> Result<Object, ObjectError> {
        Self::build(
            info,
            indexes,
            &raw,
            &Strip::managed_fields(drop_managed_fields),
            None,
        )
    }

    /// [`Object::from_upstream_indexed`] for an object that came in a watch event of type
    /// `ty`: its bytes are laid out as that event's line, which the cache's event then shares
    /// (see [`Object::line`]) instead of copying the object.
    #[cfg(test)]
    pub(crate) fn from_upstream_event(
        info: &ResourceInfo,
        indexes: &IndexSet,
        ty: &str,
        raw: Bytes,
        drop_managed_fields: bool,
    ) -> Result<Object, ObjectError> {
        Self::build(
            info,
            indexes,
            &raw,
            &Strip::managed_fields(drop_managed_fields),
            Some(ty),
        )
    }

    /// `Object::from_upstream_event` (with `line`) or [`Object::from_upstream_indexed`]
    /// (without), leaving out what `strip` names.
    pub(crate) fn from_upstream_stripped(
        info: &ResourceInfo,
        indexes: &IndexSet,
        raw: &[u8],
        strip: &Strip,
        line: Option<&str>,
    ) -> Result<Object, ObjectError> {
        Self::build(info, indexes, raw, strip, line)
    }

    fn build(
        info: &ResourceInfo,
        indexes: &IndexSet,
        raw: &[u8],
        strip: &Strip,
        line: Option<&str>,
    ) -> Result<Object, ObjectError> {
        let text = std::str::from_utf8(raw).map_err(|_| ObjectError::Utf8)?;
        // A metadata-only type is listed and watched as PartialObjectMetadata, so its objects
        // arrive in that form; a full object (an upstream that ignored the `as=` of the
        // request) is turned into it, so the cache never holds the two forms mixed.
        let metadata = (strip.metadata_only && !crate::table::is_partial_object_metadata(raw))
            .then(|| crate::table::partial_object_metadata(raw));
        let text = match &metadata {
            Some(m) => std::str::from_utf8(m).map_err(|_| ObjectError::Utf8)?,
            None => text,
        };
        // Each edit below rebuilds the text of this one object (rare: fields kept out of the
        // cache, a list item with its type fields in another order).
        let stripped = strip.apply(text)?;
        let text = stripped.as_deref().unwrap_or(text);
        let prefix = info.typed_prefix();
        // Kept as they are, type fields and all: custom resources (whose list items carry
        // them) and PartialObjectMetadata (whose list items do too).
        let as_is = info.custom || strip.metadata_only;
        // `body` is what is parsed; with `prepend`, the raw JSON is `prepend` + `body[1..]`.
        let mut untyped = None;
        let (body, prepend): (&str, Option<&str>) = if as_is || text.starts_with(prefix.as_str()) {
            (text, None)
        } else {
            let top = Members::parse(text)?;
            if top.get("kind").is_some() || top.get("apiVersion").is_some() {
                // Some other key order: drop the type fields; the prefix brings them back.
                untyped = Some(without_members(text, &top, |k| {
                    k == "kind" || k == "apiVersion"
                }));
            }
            (untyped.as_deref().unwrap_or(text), Some(prefix.as_str()))
        };
        let top = Members::parse(body)?;
        let meta = top.object("metadata");
        let name = meta.str("name").ok_or(ObjectError::NoName)?;
        let namespace = meta.str("namespace").unwrap_or_default();
        let rv_value = meta
            .get("resourceVersion")
            .ok_or(ObjectError::NoResourceVersion)?;
        let rv: u64 = json_view::as_str(rv_value)
            .and_then(|s| s.parse().ok())
            .ok_or(ObjectError::NoResourceVersion)?;
        let labels = labels_of(&meta);
        // Name and namespace are read from the key; only the kind's other fields are kept.
        let mut fields = selector::object_fields(&info.group, &info.resource, &top);
        fields.retain(|(f, _)| *f != "metadata.name" && *f != "metadata.namespace");
        let index_values = if indexes.has_paths() {
            indexes.extract(&top)
        } else {
            Vec::new()
        };
        let key = if info.namespaced && !namespace.is_empty() {
            format!("{namespace}/{name}")
        } else {
            name.to_string()
        };
        let key_len = u16::try_from(key.len()).map_err(|_| ObjectError::TooLarge("name"))?;

        // The raw JSON, the body's bytes possibly behind the type prefix.
        let line_start = line.map_or(0, |ty| LINE_START.len() + ty.len() + LINE_MID.len());
        let (raw_len, item_at) = match prepend {
            None if as_is => (body.len(), 0),
            None => (body.len(), prefix.len()),
            Some(p) => {
                let rest = body.get(1..).unwrap_or_default();
                if rest.trim_start().starts_with('}') {
                    // An object with no other fields: no trailing comma after the type fields.
                    (p.len(), p.len() - 1)
                } else {
                    (p.len() - 1 + body.len(), p.len())
                }
            }
        };
        let item_at = u16::try_from(item_at).map_err(|_| ObjectError::TooLarge("type fields"))?;
        // Position in `buf` of a byte of `body`.
        let body_at = |o: usize| -> usize {
            line_start
                + match prepend {
                    Some(p) => p.len() - 1 + o,
                    None => o,
                }
        };
        let locate = |s| locate(s, body, &body_at);
        let rv_text = rv_value.get();
        let rv_at = json_view::offset_in(body, rv_text)
            .map(|o| body_at(o + 1))
            .unwrap_or(0);
        let rv_len = u8::try_from(rv_text.len().saturating_sub(2))
            .map_err(|_| ObjectError::TooLarge("resourceVersion"))?;
        let labels: Vec<(Loc, Loc)> = labels
            .into_iter()
            .map(|(k, v)| (locate(k), locate(v)))
            .collect();
        let fields: Vec<(u8, Loc)> = fields
            .into_iter()
            .filter_map(|(f, v)| Some((selector::field_name_index(f)?, locate(v))))
            .collect();
        let index_values: Vec<(u16, Loc)> = index_values
            .into_iter()
            .map(|(slot, v)| (slot, locate(v)))
            .collect();

        // One memcpy per upstream event into the object's own allocation: an object kept for
        // hours must not pin a whole list page or read buffer. Sized exactly, so that `Bytes`
        // takes the vector over without an allocation of its own.
        let line_end = if line.is_some() { LINE_END.len() } else { 0 };
        let key_at = line_start + raw_len + line_end;
        let head_at = key_at + key.len();
        let (head, word_width) = pack_head(head_at, &labels, &fields, &index_values)?;
        let mut buf = Vec::with_capacity(head_at + head.len());
        if let Some(ty) = line {
            buf.extend_from_slice(LINE_START);
            buf.extend_from_slice(ty.as_bytes());
            buf.extend_from_slice(LINE_MID);
        }
        match prepend {
            None => buf.extend_from_slice(body.as_bytes()),
            Some(p) if raw_len == p.len() => {
                buf.extend_from_slice(&p.as_bytes()[..p.len() - 1]);
                buf.push(b'}');
            }
            Some(p) => {
                buf.extend_from_slice(p.as_bytes());
                buf.extend_from_slice(body.get(1..).unwrap_or_default().as_bytes());
            }
        }
        if line.is_some() {
            buf.extend_from_slice(LINE_END);
        }
        debug_assert_eq!(buf.len(), key_at);
        buf.extend_from_slice(key.as_bytes());
        buf.extend_from_slice(&head);
        Ok(Object {
            rv,
            buf: Bytes::from(buf),
            head_at: u32::try_from(head_at).map_err(|_| ObjectError::TooLarge("object"))?,
            rv_at: u32::try_from(rv_at).map_err(|_| ObjectError::TooLarge("object"))?,
            rv_len,
            line_start: u8::try_from(line_start)
                .map_err(|_| ObjectError::TooLarge("event type"))?,
            word_width,
            item_at,
            key_len,
            row: RowSlot::default(),
        })
    }

    /// Where this object's Table row is remembered between reads.
    pub(crate) fn row_slot(&self) -> &RowSlot {
        &self.row
    }

    /// Full JSON with `kind`/`apiVersion`, as sent in watch events.
    pub(crate) fn raw(&self) -> &[u8] {
        self.buf.get(self.raw_range()).unwrap_or_default()
    }

    /// [`Object::raw`] as shared bytes (no copy).
    pub(crate) fn raw_bytes(&self) -> Bytes {
        self.buf.slice(self.raw_range())
    }

    fn raw_range(&self) -> std::ops::Range<usize> {
        let end = self.key_at();
        let start = usize::from(self.line_start);
        if start == 0 {
            start..end
        } else {
            start..end.saturating_sub(LINE_END.len())
        }
    }

    /// The watch line `{"type":"TY","object":RAW}\n`, if this object's bytes were laid out as
    /// that line (built by `Object::from_upstream_event` with `ty`): a slice of the same
    /// allocation as [`Object::raw`], so an event holds no copy of its object.
    pub(crate) fn line(&self, ty: &str) -> Option<Bytes> {
        let start = self.buf.get(..usize::from(self.line_start))?;
        let expected = LINE_START.iter().chain(ty.as_bytes()).chain(LINE_MID);
        (!start.is_empty() && start.iter().eq(expected)).then(|| self.buf.slice(..self.key_at()))
    }

    /// Whether `bytes` lie in this object's own allocation (an event line sharing it).
    pub(crate) fn holds(&self, bytes: &[u8]) -> bool {
        let start = self.buf.as_ptr() as usize;
        let at = bytes.as_ptr() as usize;
        at >= start && at + bytes.len() <= start + self.buf.len()
    }

    /// What this object costs in memory, by part.
    pub(crate) fn memory(&self) -> ObjectMemory {
        // The struct inside its `Arc` (two counters).
        let header = std::mem::size_of::<Object>() + 16;
        let json = self.raw().len();
        ObjectMemory {
            json,
            head: header + self.buf.len() - json,
        }
    }

    fn key_at(&self) -> usize {
        (self.head_at as usize).saturating_sub(usize::from(self.key_len))
    }

    /// Store key: `namespace/name`, or `name` for cluster-scoped objects; sorts like etcd keys.
    pub(crate) fn key(&self) -> &str {
        self.text(self.key_at(), usize::from(self.key_len))
    }

    /// [`Object::key`]'s bytes, without the UTF-8 check (the key was written from a `String`).
    fn key_bytes(&self) -> &[u8] {
        self.bytes(self.key_at(), usize::from(self.key_len))
    }

    pub fn namespace(&self) -> &str {
        // Neither a namespace nor a name has a '/': the first one ends the namespace.
        self.key().split_once('/').map_or("", |(ns, _)| ns)
    }

    pub fn name(&self) -> &str {
        let key = self.key();
        key.split_once('/').map_or(key, |(_, name)| name)
    }

    /// Word `i` of the head table.
    fn word(&self, i: usize) -> usize {
        let width = usize::from(self.word_width);
        let at = self.head_at as usize + width * i;
        match self.buf.get(at..at + width) {
            Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
            Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]) as usize,
            _ => 0,
        }
    }

    /// The head string at `buf[at..at + len]` (built from `&str`s, so always UTF-8).
    fn text(&self, at: usize, len: usize) -> &str {
        self.buf
            .get(at..at + len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }

    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        self.buf.get(at..at + len).unwrap_or_default()
    }

    fn label_count(&self) -> usize {
        self.word(0)
    }

    /// First word of label `i`'s entry.
    fn label_entry(&self, i: usize) -> usize {
        HEAD_COUNTS + LABEL_WORDS * i
    }

    fn field_entries(&self) -> impl Iterator<Item = usize> + '_ {
        let first = HEAD_COUNTS + LABEL_WORDS * self.label_count();
        (0..self.word(1)).map(move |i| first + FIELD_WORDS * i)
    }

    fn index_entries(&self) -> impl Iterator<Item = usize> + '_ {
        let first = HEAD_COUNTS + LABEL_WORDS * self.label_count() + FIELD_WORDS * self.word(1);
        (0..self.word(2)).map(move |i| first + INDEX_WORDS * i)
    }

    /// The value of label `key`.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        // Labels are sorted by key.
        let (mut lo, mut hi) = (0, self.label_count());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.label_entry(mid);
            match self
                .bytes(self.word(e), self.word(e + 1))
                .cmp(key.as_bytes())
            {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return Some(self.text(self.word(e + 2), self.word(e + 3)))
                }
            }
        }
        None
    }

    /// Every label, sorted by key.
    #[cfg(test)]
    pub(crate) fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.label_count()).map(|i| {
            let e = self.label_entry(i);
            (
                self.text(self.word(e), self.word(e + 1)),
                self.text(self.word(e + 2), self.word(e + 3)),
            )
        })
    }

    /// Value of a selectable field, for field selectors.
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        match name {
            "metadata.name" => Some(self.name()),
            "metadata.namespace" => Some(self.namespace()),
            _ => {
                let index = selector::field_name_index(name)?;
                self.field_entries()
                    .find(|e| self.word(*e) == usize::from(index))
                    .map(|e| self.text(self.word(e + 1), self.word(e + 2)))
            }
        }
    }

    /// Values of the configured field-path index in `slot`.
    pub(crate) fn index_values(&self, slot: u16) -> impl Iterator<Item = &str> {
        self.index_entries()
            .filter(move |e| self.word(*e) == usize::from(slot))
            .map(|e| self.text(self.word(e + 1), self.word(e + 2)))
    }

    /// The list-item form of this object is `{` followed by these bytes when the flag is set
    /// (the raw JSON past `kind`/`apiVersion`), else these bytes alone.
    fn item_parts(&self) -> (bool, &[u8]) {
        let raw = self.raw();
        match raw.get(usize::from(self.item_at)..) {
            Some(rest) if self.item_at > 0 => (true, rest),
            _ => (false, raw),
        }
    }

    /// How many bytes [`Object::write_item`] writes.
    pub(crate) fn item_len(&self) -> usize {
        let (brace, rest) = self.item_parts();
        usize::from(brace) + rest.len()
    }

    /// Append the list-item form of this object to `out`.
    pub(crate) fn write_item(&self, out: &mut Vec<u8>) {
        let (brace, rest) = self.item_parts();
        if brace {
            out.extend_from_slice(b"{");
        }
        out.extend_from_slice(rest);
    }

    /// The same object at another resourceVersion (a delete the cache learnt of by relisting
    /// carries the relist's RV, since the real deletion RV is unknown). Its bytes hold no
    /// watch line.
    pub(crate) fn with_rv(&self, rv: u64) -> Object {
        let digits = rv.to_string();
        let raw_range = self.raw_range();
        let (rv_at, rv_end) = (
            self.rv_at as usize,
            self.rv_at as usize + usize::from(self.rv_len),
        );
        if self.rv_len == 0 || rv_at < raw_range.start || rv_end > raw_range.end {
            // No resourceVersion to replace (cannot happen for an object built here).
            let mut o = self.clone();
            o.rv = rv;
            return o;
        }
        // Where a byte of the old raw JSON is in the new one; a value overlapping the old
        // resourceVersion is copied as text.
        let moved = |at: usize, len: usize| -> Loc<'_> {
            if at >= raw_range.start && at + len <= rv_at {
                Loc::At(at - raw_range.start, len)
            } else if at >= rv_end && at + len <= raw_range.end {
                Loc::At(at - raw_range.start - (rv_end - rv_at) + digits.len(), len)
            } else {
                Loc::Text(Cow::Borrowed(self.text(at, len)))
            }
        };
        let labels: Vec<(Loc, Loc)> = (0..self.label_count())
            .map(|i| {
                let e = self.label_entry(i);
                (
                    moved(self.word(e), self.word(e + 1)),
                    moved(self.word(e + 2), self.word(e + 3)),
                )
            })
            .collect();
        let fields: Vec<(u8, Loc)> = self
            .field_entries()
            .map(|e| {
                let name = u8::try_from(self.word(e)).unwrap_or(u8::MAX);
                (name, moved(self.word(e + 1), self.word(e + 2)))
            })
            .collect();
        let index_values: Vec<(u16, Loc)> = self
            .index_entries()
            .map(|e| {
                let slot = u16::try_from(self.word(e)).unwrap_or(u16::MAX);
                (slot, moved(self.word(e + 1), self.word(e + 2)))
            })
            .collect();
        let key_at = raw_range.len() - (rv_end - rv_at) + digits.len();
        let head_at = key_at + usize::from(self.key_len);
        // The new head fits as the old one did (positions move by a few digits at most; a
        // head that no longer fits 16-bit words takes 32-bit ones).
        let (head, word_width) =
            pack_head(head_at, &labels, &fields, &index_values).unwrap_or_default();
        let mut buf = Vec::with_capacity(head_at + head.len());
        buf.extend_from_slice(self.buf.get(raw_range.start..rv_at).unwrap_or_default());
        buf.extend_from_slice(digits.as_bytes());
        buf.extend_from_slice(self.buf.get(rv_end..raw_range.end).unwrap_or_default());
        buf.extend_from_slice(self.key().as_bytes());
        buf.extend_from_slice(&head);
        Object {
            rv,
            buf: Bytes::from(buf),
            head_at: u32::try_from(head_at).unwrap_or(u32::MAX),
            rv_at: u32::try_from(rv_at - raw_range.start).unwrap_or(0),
            rv_len: u8::try_from(digits.len()).unwrap_or(0),
            line_start: 0,
            word_width,
            item_at: self.item_at,
            key_len: self.key_len,
            row: RowSlot::default(),
        }
    }

    /// The object bytes with its resourceVersion replaced: a watcher whose selector the object
    /// leaves receives the previous state with the new RV (rule W2).
    pub(crate) fn raw_with_rv(&self, rv: u64) -> Bytes {
        let raw_range = self.raw_range();
        let (rv_at, rv_end) = (
            self.rv_at as usize,
            self.rv_at as usize + usize::from(self.rv_len),
        );
        if self.rv_len == 0 || rv_at < raw_range.start || rv_end > raw_range.end {
            return self.raw_bytes();
        }
        let mut out = BytesMut::with_capacity(raw_range.len() + 4);
        out.extend_from_slice(self.buf.get(raw_range.start..rv_at).unwrap_or_default());
        out.extend_from_slice(rv.to_string().as_bytes());
        out.extend_from_slice(self.buf.get(rv_end..raw_range.end).unwrap_or_default());
        out.freeze()
    }
}

/// How indexing reads an object (the trait lives in `index`, so that `index` need not know
/// `Object`: the dependency points from `object` to `index` only).
impl Indexed for Object {
    fn field(&self, name: &str) -> Option<&str> {
        Object::field(self, name)
    }

    fn label(&self, key: &str) -> Option<&str> {
        Object::label(self, key)
    }

    fn index_values(&self, slot: u16) -> impl Iterator<Item = &str> {
        Object::index_values(self, slot)
    }
}

/// Where a head string goes: its place in `buf` if it is a slice of `body` (`body_at` maps a
/// position in `body` to one in `buf`), else its text.
fn locate<'a>(s: Cow<'a, str>, body: &str, body_at: &dyn Fn(usize) -> usize) -> Loc<'a> {
    if let Cow::Borrowed(b) = &s {
        if let Some(o) = json_view::offset_in(body, b) {
            return Loc::At(body_at(o), b.len());
        }
    }
    Loc::Text(s)
}

/// The labels of an object's metadata, sorted by key: string values only, the last of a
/// repeated key deciding (as a `serde_json::Value` map would).
fn labels_of<'a>(meta: &Members<'a>) -> Vec<(Cow<'a, str>, Cow<'a, str>)> {
    let labels = meta.object("labels");
    let mut out: Vec<(Cow<'a, str>, Option<Cow<'a, str>>)> = Vec::new();
    for (k, v) in labels.entries() {
        let v = json_view::as_str(v);
        match out.iter_mut().find(|(have, _)| have == k) {
            Some(entry) => entry.1 = v,
            None => out.push((k.clone(), v)),
        }
    }
    let mut out: Vec<(Cow<'a, str>, Cow<'a, str>)> =
        out.into_iter().filter_map(|(k, v)| Some((k, v?))).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The head table for these values, followed by the text of those that are not in `buf`,
/// for a head that starts at `head_at` in `buf`; and the width of its words.
///
/// Words are `u16` when every position fits (the head ends below 64 KiB: nearly every object),
/// else `u32`: a ConfigMap with two labels saves 22 bytes, a Pod with its eight selectable
/// fields and three labels about 70.
fn pack_head(
    head_at: usize,
    labels: &[(Loc, Loc)],
    fields: &[(u8, Loc)],
    index_values: &[(u16, Loc)],
) -> Result<(Vec<u8>, u8), ObjectError> {
    let words = HEAD_COUNTS
        + LABEL_WORDS * labels.len()
        + FIELD_WORDS * fields.len()
        + INDEX_WORDS * index_values.len();
    let text_len: usize = labels
        .iter()
        .flat_map(|(k, v)| [k, v])
        .chain(fields.iter().map(|(_, v)| v))
        .chain(index_values.iter().map(|(_, v)| v))
        .map(|loc| match loc {
            Loc::At(..) => 0,
            Loc::Text(s) => s.len(),
        })
        .sum();
    let width: u8 = if head_at + 2 * words + text_len <= usize::from(u16::MAX) {
        2
    } else {
        4
    };
    let end = head_at + usize::from(width) * words + text_len;
    if u32::try_from(end).is_err() {
        return Err(ObjectError::TooLarge("object"));
    }
    let mut text_at = head_at + usize::from(width) * words;
    let mut text: Vec<u8> = Vec::with_capacity(text_len);
    let mut table: Vec<usize> = Vec::with_capacity(words);
    let mut place = |loc: &Loc, table: &mut Vec<usize>| match loc {
        Loc::At(at, len) => table.extend([*at, *len]),
        Loc::Text(s) => {
            table.extend([text_at, s.len()]);
            text_at += s.len();
            text.extend_from_slice(s.as_bytes());
        }
    };
    table.extend([labels.len(), fields.len(), index_values.len()]);
    for (k, v) in labels {
        place(k, &mut table);
        place(v, &mut table);
    }
    for (name, v) in fields {
        table.push(usize::from(*name));
        place(v, &mut table);
    }
    for (slot, v) in index_values {
        table.push(usize::from(*slot));
        place(v, &mut table);
    }
    let mut head = Vec::with_capacity(usize::from(width) * words + text.len());
    for w in table {
        // Every word is a count or a position below `end`, which fits the width (checked
        // above).
        if width == 2 {
            head.extend_from_slice(&u16::try_from(w).unwrap_or(u16::MAX).to_le_bytes());
        } else {
            head.extend_from_slice(&u32::try_from(w).unwrap_or(u32::MAX).to_le_bytes());
        }
    }
    head.extend_from_slice(&text);
    Ok((head, width))
}

/// An object's text without `metadata.managedFields`, if it has them.
fn without_managed_fields(text: &str) -> Result<Option<String>, ObjectError> {
    let top = Members::parse(text)?;
    let Some(meta) = top.get("metadata") else {
        return Ok(None);
    };
    let meta_text = meta.get();
    let members = Members::of(meta);
    if members.get("managedFields").is_none() {
        return Ok(None);
    }
    let meta_without = without_members(meta_text, &members, |k| k == "managedFields");
    Ok(replaced(text, meta_text, &meta_without))
}

/// `doc` with its part `part` (a slice of it) replaced by `with`; None if `part` is not in it.
fn replaced(doc: &str, part: &str, with: &str) -> Option<String> {
    let at = json_view::offset_in(doc, part)?;
    let mut out = String::with_capacity(doc.len() + with.len());
    out.push_str(doc.get(..at)?);
    out.push_str(with);
    out.push_str(doc.get(at + part.len()..)?);
    Some(out)
}

/// An object's text without the annotations `keys`, if it has any of them; without
/// `metadata.annotations` altogether when no other annotation is left (Go leaves an empty map
/// out).
fn without_annotations(text: &str, keys: &[String]) -> Result<Option<String>, ObjectError> {
    let top = Members::parse(text)?;
    let Some(meta) = top.get("metadata") else {
        return Ok(None);
    };
    let meta_text = meta.get();
    let meta_members = Members::of(meta);
    let Some(annotations) = meta_members.get("annotations") else {
        return Ok(None);
    };
    let ann_text = annotations.get();
    if !ann_text.trim_start().starts_with('{') {
        return Ok(None);
    }
    let ann_members = Members::of(annotations);
    let dropped = |k: &str| keys.iter().any(|d| d == k);
    let total = ann_members.iter().count();
    let hit = ann_members.iter().filter(|(k, _)| dropped(k)).count();
    if hit == 0 {
        return Ok(None);
    }
    let new_meta = if hit == total {
        without_members(meta_text, &meta_members, |k| k == "annotations")
    } else {
        let Some(m) = replaced(
            meta_text,
            ann_text,
            &without_members(ann_text, &ann_members, dropped),
        ) else {
            return Ok(None);
        };
        m
    };
    Ok(replaced(text, meta_text, &new_meta))
}

/// An object's text (`obj`, whose `members` were parsed from it) without the members `drop`
/// names; the others are kept byte for byte, in order, joined by `,`.
fn without_members(obj: &str, members: &Members<'_>, drop: impl Fn(&str) -> bool) -> String {
    let mut out = String::with_capacity(obj.len());
    out.push('{');
    // A member's text runs from the end of the previous value (or the `{`) to the end of its
    // own value: separators and the key lie in between.
    let mut from = 1;
    let mut first = true;
    for (k, v) in members.iter() {
        let Some(end) = json_view::offset_in(obj, v.get()).map(|o| o + v.get().len()) else {
            continue;
        };
        let member = obj.get(from..end).unwrap_or_default().trim_start();
        let member = member.strip_prefix(',').unwrap_or(member).trim_start();
        if !drop(k) {
            if !first {
                out.push(',');
            }
            out.push_str(member);
            first = false;
        }
        from = end;
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests;
