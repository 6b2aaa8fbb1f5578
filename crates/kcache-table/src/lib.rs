//! Server-side printing: `meta.k8s.io/v1` Tables (what `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) and PartialObjectMetadata, built from
//! cached objects exactly as kube-apiserver v1.28 writes them.
//!
//! The column definitions are not produced here: kcache takes each type's `columnDefinitions`
//! from the upstream (one Table request per type) and hands them to [`Printer::new`] verbatim.
//! This crate computes the cells: the built-in printers of `cells`, CRD
//! `additionalPrinterColumns` through `jsonpath`, and the default `Name`/`Created At` columns
//! of every other kind. A printer whose column definitions it cannot fill says so
//! ([`Printer::supported`]), and the caller then asks the upstream instead.
//!
//! Why one file of this length: the Table and the PartialObjectMetadata renderings share the
//! object-metadata writer at the end; the per-kind cells are in `cells`, CRD columns in
//! `jsonpath`, the tests in `tests.rs`.
//!
//! A crate of its own: it depends on nothing of kcache's but the JSON writer and Go's quoting
//! (`kcache-json`, `kcache-selector`); kcache re-exports it as `kcache::table`.
#![forbid(unsafe_code)]
#![deny(rustdoc::broken_intra_doc_links)]

mod cells;
mod duration;
mod jsonpath;
mod project;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;

pub use duration::human_duration;

use cells::Builtin;
use duration::{format_rfc3339, parse_rfc3339, parse_time, since, unix_nanos};
use jsonpath::JsonPath;
use kcache_json::gojson::{go_fmt_v, go_json_float, write_str, write_value};

/// How rows carry their object (`includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// `rows[].object` is `null`.
    None,
    /// `rows[].object` is the object's PartialObjectMetadata (the default).
    #[default]
    Metadata,
    /// `rows[].object` is the full object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` parameter (absent or empty: `Metadata`); any other value is
    /// the apiserver's 400 BadRequest.
    pub fn parse(v: Option<&str>) -> Result<Self, InvalidIncludeObject> {
        match v.unwrap_or("") {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(InvalidIncludeObject(other.to_string())),
        }
    }
}

/// An `includeObject` value other than `Metadata`, `Object`, `None` or empty; its message is
/// the apiserver's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Unable to convert to Table as requested: includeObject: Invalid value: {}: \
     must be 'Metadata', 'Object', 'None', or empty",
    kcache_selector::go_quote(.0)
)]
pub struct InvalidIncludeObject(pub String);

/// Why a CRD's `additionalPrinterColumns` cannot be printed by kcache (Table requests for the
/// type then go upstream).
#[derive(Debug, thiserror::Error)]
enum CrdColumnsError {
    #[error("additionalPrinterColumns is not an array")]
    NotAnArray,
    #[error("column {name:?}: unsupported jsonPath")]
    JsonPath {
        name: String,
        #[source]
        source: jsonpath::Unsupported,
    },
}

/// One column of a custom resource, from the CRD version's `additionalPrinterColumns`.
#[derive(Debug, Clone)]
struct CrdColumn {
    name: String,
    ty: String,
    path: JsonPath,
}

#[derive(Debug, Clone)]
enum Source {
    /// A built-in printer; `picks[i]` is the index, among the cells the printer computes, of
    /// the i-th upstream column.
    Builtin { kind: Builtin, picks: Vec<usize> },
    /// A custom resource: `Name`, then one cell per column.
    Custom(Vec<CrdColumn>),
    /// The apiserver's default table convertor: `Name`, `Created At`.
    Default,
}

/// A printer for one resource type.
#[derive(Debug, Clone)]
pub struct Printer {
    /// Which printer a [`RowSlot`]'s row was printed by: a type's printer is built again
    /// when its columns change (a CRD's new version), and rows of the old one must not be
    /// taken for the new one's.
    id: u64,
    column_definitions: Bytes,
    source: Source,
    /// Number of columns the upstream defines.
    width: usize,
    supported: bool,
    unsupported_reason: Option<String>,
}

/// The column definition fields the printer looks at.
#[derive(Debug, serde::Deserialize)]
struct ColumnDefinition {
    name: String,
    #[serde(default, rename = "type")]
    ty: String,
}

impl Printer {
    /// A printer for `group`/`resource`. `column_definitions` are the upstream's
    /// `columnDefinitions` JSON array for this type, verbatim; `crd_columns` the CRD version's
    /// `additionalPrinterColumns` array for custom resources (an absent or empty one means the
    /// apiextensions default, a single `Age` column).
    pub fn new(
        group: &str,
        resource: &str,
        column_definitions: Bytes,
        crd_columns: Option<&Value>,
    ) -> Printer {
        let trimmed = trim_ascii(&column_definitions);
        let column_definitions = column_definitions.slice_ref(trimmed);
        let defs: Vec<ColumnDefinition> = match serde_json::from_slice(trimmed) {
            Ok(d) => d,
            Err(e) => {
                return Printer::unsupported(
                    column_definitions,
                    0,
                    format!("columnDefinitions are not a column array: {e}"),
                );
            }
        };
        let width = defs.len();
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();

        let source = if let Some(cols) = crd_columns {
            match crd_source(cols) {
                Ok(s) => s,
                Err(e) => {
                    // The error and its cause on one line, as kcache's logs write errors.
                    let reason = match std::error::Error::source(&e) {
                        Some(cause) => format!("{e}: {cause}"),
                        None => e.to_string(),
                    };
                    return Printer::unsupported(column_definitions, width, reason);
                }
            }
        } else if let Some(kind) = Builtin::lookup(group, resource) {
            let known: Vec<&'static str> = cells::row(kind, &Value::Null, 0)
                .cells
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            let mut picks = Vec::with_capacity(width);
            for n in &names {
                match known.iter().position(|k| k == n) {
                    Some(i) => picks.push(i),
                    None => {
                        return Printer::unsupported(
                            column_definitions,
                            width,
                            format!("no printer for column {n:?} of {resource}"),
                        )
                    }
                }
            }
            Source::Builtin { kind, picks }
        } else if names == ["Name", "Age"] && defs[1].ty == "date" {
            // A custom resource without printer columns: apiextensions serves `Age`.
            default_crd_source()
        } else {
            Source::Default
        };

        let expected: Option<Vec<&str>> = match &source {
            Source::Builtin { .. } => None,
            Source::Custom(cols) => Some(
                std::iter::once("Name")
                    .chain(cols.iter().map(|c| c.name.as_str()))
                    .collect(),
            ),
            Source::Default => Some(vec!["Name", "Created At"]),
        };
        if let Some(expected) = expected {
            if expected != names {
                let reason = format!("upstream columns {names:?}, printer columns {expected:?}");
                return Printer::unsupported(column_definitions, width, reason);
            }
        }
        Printer {
            id: next_printer_id(),
            column_definitions,
            source,
            width,
            supported: true,
            unsupported_reason: None,
        }
    }

    fn unsupported(column_definitions: Bytes, width: usize, reason: String) -> Printer {
        Printer {
            id: next_printer_id(),
            column_definitions,
            source: Source::Default,
            width,
            supported: false,
            unsupported_reason: Some(reason),
        }
    }

    /// Whether this printer fills the upstream's columns; when not, its cells are `null` and
    /// Table requests for the type should go to the upstream.
    pub fn supported(&self) -> bool {
        self.supported
    }

    /// Whether every cell comes from the object's metadata, so that a metadata-only cache
    /// can print it: the default columns (`Name` and `Created At`, or a custom resource's
    /// `Age`) and custom resource columns under `.metadata`; built-in printers read spec and
    /// status.
    pub fn reads_only_metadata(&self) -> bool {
        match &self.source {
            Source::Default => true,
            Source::Custom(cols) => cols.iter().all(|c| c.path.within_metadata()),
            Source::Builtin { .. } => false,
        }
    }

    /// Why the printer is not supported, if it is not.
    pub fn unsupported_reason(&self) -> Option<&str> {
        self.unsupported_reason.as_deref()
    }

    /// The column definitions, as given.
    pub fn column_definitions(&self) -> &Bytes {
        &self.column_definitions
    }

    /// Cells of one object (strings, integers, `null` for missing custom resource values, …);
    /// `now` is the time ages are measured to.
    pub fn cells(&self, obj: &Value, now: SystemTime) -> Vec<Value> {
        self.row(obj, unix_nanos(now)).0
    }

    /// Cells and row conditions.
    fn row(&self, obj: &Value, now: i128) -> (Vec<Value>, Option<Value>) {
        if !self.supported {
            return (vec![Value::Null; self.width], None);
        }
        match &self.source {
            Source::Builtin { kind, picks } => {
                let row = cells::row(*kind, obj, now);
                let cells = picks.iter().map(|&i| row.cells[i].1.clone()).collect();
                (cells, row.conditions)
            }
            Source::Custom(cols) => {
                let mut cells = Vec::with_capacity(cols.len() + 1);
                cells.push(meta_str(obj, "name"));
                cells.extend(cols.iter().map(|c| crd_cell(c, obj, now)));
                (cells, None)
            }
            Source::Default => {
                let created = obj
                    .get("metadata")
                    .and_then(|m| m.get("creationTimestamp"))
                    .and_then(Value::as_str)
                    .and_then(parse_rfc3339)
                    .unwrap_or(ZERO_TIME);
                (
                    vec![meta_str(obj, "name"), Value::from(format_rfc3339(created))],
                    None,
                )
            }
        }
    }

    /// The Table body for a list (compact JSON and a newline, as the apiserver sends it).
    /// `objects` are the raw objects (full, with `kind`/`apiVersion`), in list order, each
    /// with the slot its row is remembered in, if it has one (see [`RowSlot`]).
    pub fn list_table(
        &self,
        objects: &[(&[u8], Option<&RowSlot>)],
        rv: &str,
        continue_token: Option<&str>,
        remaining: Option<u64>,
        include: IncludeObject,
        now: SystemTime,
    ) -> Bytes {
        let mut out = Vec::with_capacity(256 + objects.iter().map(|(o, _)| o.len()).sum::<usize>());
        let mut rows = self.list_rows(&mut out, rv, continue_token, remaining, include, now);
        for (raw, slot) in objects {
            rows.row(&mut out, raw, *slot);
        }
        rows.finish(&mut out);
        Bytes::from(out)
    }

    /// The same body as [`Printer::list_table`], written a row at a time into buffers of the
    /// caller's, which may change between rows (a body sent in chunks): the head is written
    /// into `out` now, each row by [`ListRows::row`], the end by [`ListRows::finish`].
    pub fn list_rows(
        &self,
        out: &mut Vec<u8>,
        rv: &str,
        continue_token: Option<&str>,
        remaining: Option<u64>,
        include: IncludeObject,
        now: SystemTime,
    ) -> ListRows<'_> {
        self.table_head(out, rv, continue_token, remaining, true);
        out.extend_from_slice(b",\"rows\":[");
        ListRows {
            printer: self,
            include,
            now: unix_nanos(now),
            first: true,
        }
    }

    /// A one-row Table for a GET; `metadata.resourceVersion` is the object's.
    pub fn get_table(&self, object: &[u8], include: IncludeObject, now: SystemTime) -> Bytes {
        let mut out = self.one_row_table(object, true, include, unix_nanos(now));
        out.push(b'\n');
        Bytes::from(out)
    }

    /// A watch event line whose object is a one-row Table. Only the `first` event of a watch
    /// carries the column definitions; later ones have `"columnDefinitions":null`.
    pub fn watch_event(
        &self,
        ty: &str,
        object: &[u8],
        first: bool,
        include: IncludeObject,
        now: SystemTime,
    ) -> Bytes {
        let table = self.one_row_table(object, first, include, unix_nanos(now));
        let mut out = Vec::with_capacity(table.len() + 32);
        out.extend_from_slice(b"{\"type\":");
        write_str(&mut out, ty);
        out.extend_from_slice(b",\"object\":");
        out.extend_from_slice(&table);
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    fn one_row_table(
        &self,
        object: &[u8],
        with_columns: bool,
        include: IncludeObject,
        now: i128,
    ) -> Vec<u8> {
        let rv = object_rv(object);
        let mut out = Vec::with_capacity(512 + object.len());
        self.table_head(&mut out, &rv, None, None, with_columns);
        out.extend_from_slice(b",\"rows\":[");
        self.write_row(&mut out, object, None, include, now);
        out.extend_from_slice(b"]}");
        out
    }

    /// `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{…},"columnDefinitions":…`
    fn table_head(
        &self,
        out: &mut Vec<u8>,
        rv: &str,
        continue_token: Option<&str>,
        remaining: Option<u64>,
        with_columns: bool,
    ) {
        out.extend_from_slice(br#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":"#);
        write_list_meta(out, rv, continue_token, remaining);
        out.extend_from_slice(br#","columnDefinitions":"#);
        if with_columns && !self.column_definitions.is_empty() {
            out.extend_from_slice(&self.column_definitions);
        } else {
            out.extend_from_slice(b"null");
        }
    }

    /// One row of `raw` at `now`. With a `slot`, a built-in kind's row is taken from it
    /// while its cells still read the same, and remembered in it otherwise.
    fn write_row(
        &self,
        out: &mut Vec<u8>,
        raw: &[u8],
        slot: Option<&RowSlot>,
        include: IncludeObject,
        now: i128,
    ) {
        let kind = match self.source {
            Source::Builtin { kind, .. } => Some(kind),
            _ => None,
        };
        // Only a built-in kind's: its PartialObjectMetadata is a part of its bytes.
        let slot = slot.filter(|_| kind.is_some() && self.supported);
        if let Some(slot) = slot {
            if slot.write(out, self.id, raw, include, now) {
                return;
            }
        }
        let RowObject { obj, metadata } = RowObject::parse(raw, kind);
        let start = out.len();
        let ((), until) = duration::unchanged_until(|| self.write_cells(out, &obj, now));
        let cells = start..out.len();
        let stored = metadata.map(|m| m.get().as_bytes());
        write_row_object(out, raw, include, stored, &obj);
        // Where the stored metadata is in `raw`: it was parsed from `raw` without copying.
        let span = metadata.and_then(|m| {
            let at = (m.get().as_ptr() as usize).checked_sub(raw.as_ptr() as usize)?;
            let span = at..at + m.get().len();
            (raw.get(span.clone()) == Some(m.get().as_bytes())).then_some(span)
        });
        if let (Some(slot), Some(metadata)) = (slot, span) {
            slot.keep(Memo {
                printer: self.id,
                from: now,
                until,
                cells: out[cells].into(),
                metadata,
            });
        }
    }

    /// `{"cells":[…]` and the row's `,"conditions":…` if it has any: the row up to its object.
    fn write_cells(&self, out: &mut Vec<u8>, obj: &Value, now: i128) {
        let (cells, conditions) = self.row(obj, now);
        out.extend_from_slice(b"{\"cells\":");
        write_value(out, &Value::Array(cells), false);
        if let Some(conditions) = conditions {
            out.extend_from_slice(b",\"conditions\":");
            write_value(out, &conditions, false);
        }
    }
}

/// A list Table being written row by row ([`Printer::list_rows`]).
pub struct ListRows<'p> {
    printer: &'p Printer,
    include: IncludeObject,
    /// The time every row's ages are measured to: one for the whole list.
    now: i128,
    first: bool,
}

impl ListRows<'_> {
    /// The next row: of `raw`, a whole object, taken from or remembered in `slot`.
    pub fn row(&mut self, out: &mut Vec<u8>, raw: &[u8], slot: Option<&RowSlot>) {
        if !self.first {
            out.push(b',');
        }
        self.first = false;
        self.printer
            .write_row(out, raw, slot, self.include, self.now);
    }

    /// The end of the body, after the last row.
    pub fn finish(self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"]}\n");
    }
}

/// Where an object's Table row is remembered between reads: kept beside the object in the
/// cache, so that it lives exactly as long as the object it was printed from, and a list
/// read by many clients (`kubectl get pods -A` from every dashboard) parses and prints
/// each object once rather than once per client. A row is taken again only by the printer
/// that printed it, and only while its ages print the same (`duration::unchanged_until`):
/// a Pod created an hour ago reads `60m` for a minute. What is kept is the row up to its
/// object (a few hundred bytes) and where its metadata is in the object's bytes.
#[derive(Debug, Default)]
pub struct RowSlot(Mutex<Option<Box<Memo>>>);

/// A copy of an object starts without a row: what is remembered is cheap to print again.
impl Clone for RowSlot {
    fn clone(&self) -> RowSlot {
        RowSlot::default()
    }
}

/// A remembered row (see [`RowSlot`]).
#[derive(Debug)]
struct Memo {
    printer: u64,
    /// From and until when (Unix nanoseconds) the cells print the same.
    from: i128,
    until: i128,
    /// The row up to its object ([`Printer::write_cells`]).
    cells: Box<[u8]>,
    /// Where the object's stored `metadata` is in its bytes.
    metadata: std::ops::Range<usize>,
}

impl RowSlot {
    /// Write the row remembered for `printer` if it still reads the same at `now`; whether
    /// there was one.
    fn write(
        &self,
        out: &mut Vec<u8>,
        printer: u64,
        raw: &[u8],
        include: IncludeObject,
        now: i128,
    ) -> bool {
        let Ok(memo) = self.0.lock() else {
            return false;
        };
        let Some(m) = memo
            .as_deref()
            .filter(|m| m.printer == printer && m.from <= now && now < m.until)
        else {
            return false;
        };
        let Some(metadata) = raw.get(m.metadata.clone()) else {
            return false;
        };
        out.extend_from_slice(&m.cells);
        write_row_object(out, raw, include, Some(metadata), &Value::Null);
        true
    }

    fn keep(&self, memo: Memo) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(Box::new(memo));
        }
    }
}

/// A row's `"object"` and its closing brace: `raw`'s PartialObjectMetadata from its `stored`
/// metadata where there is one, else from the parsed `obj`.
fn write_row_object(
    out: &mut Vec<u8>,
    raw: &[u8],
    include: IncludeObject,
    stored: Option<&[u8]>,
    obj: &Value,
) {
    out.extend_from_slice(b",\"object\":");
    match (include, stored) {
        (IncludeObject::None, _) => out.extend_from_slice(b"null"),
        (IncludeObject::Object, _) => out.extend_from_slice(trim_ascii(raw)),
        (IncludeObject::Metadata, Some(stored)) => write_partial_stored(out, stored),
        (IncludeObject::Metadata, None) => write_partial(out, obj),
    }
    out.push(b'}');
}

/// A process-wide number for each printer built ([`Printer`]'s `id`).
fn next_printer_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// An object as its row is printed from.
struct RowObject<'a> {
    /// Its JSON; for a built-in type, only what the kind's cells read (`project`), and
    /// without `metadata.managedFields`.
    obj: Value,
    /// A built-in type's `metadata` as stored, when it is a JSON object: its
    /// PartialObjectMetadata's.
    metadata: Option<&'a RawValue>,
}

impl<'a> RowObject<'a> {
    /// Parse `raw` (`kind`: a built-in kind's, None for a custom resource). Building the
    /// whole object made a Pod's row cost about 260 µs, then, without its managedFields, about
    /// 31 µs (BENCHMARKS.md, the fleet's interactive users); no cell reads most of a Pod's
    /// spec and status. A built-in type's stored bytes are the apiserver's own Go encoding,
    /// so its PartialObjectMetadata is its `metadata` as stored (`project`'s docs); a custom
    /// resource's stored metadata has its keys sorted, as unstructured objects are written,
    /// so its PartialObjectMetadata is written from the parsed object in Go's field order.
    fn parse(raw: &'a [u8], kind: Option<Builtin>) -> RowObject<'a> {
        let whole = || RowObject {
            obj: serde_json::from_slice(raw).unwrap_or(Value::Null),
            metadata: None,
        };
        let Some(kind) = kind else {
            return whole();
        };
        match project::parse(raw, project::for_kind(kind)) {
            Some((obj, metadata)) => RowObject {
                obj,
                metadata: metadata.filter(|m| m.get().starts_with('{')),
            },
            None => whole(),
        }
    }
}

/// Go's zero `time.Time` in Unix nanoseconds (`0001-01-01T00:00:00Z`).
const ZERO_TIME: i128 = -62_135_596_800 * 1_000_000_000;

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

fn meta_str(obj: &Value, key: &str) -> Value {
    Value::from(
        obj.get("metadata")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .unwrap_or(""),
    )
}

/// The object's `metadata.resourceVersion` (empty when it has none).
fn object_rv(raw: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        metadata: Option<HeadMeta>,
    }
    #[derive(serde::Deserialize)]
    struct HeadMeta {
        #[serde(default, rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    serde_json::from_slice::<Head>(raw)
        .ok()
        .and_then(|h| h.metadata)
        .and_then(|m| m.resource_version)
        .unwrap_or_default()
}

/// `ListMeta` with Go's omitempty rules: `{"resourceVersion":…,"continue":…,"remainingItemCount":…}`.
fn write_list_meta(
    out: &mut Vec<u8>,
    rv: &str,
    continue_token: Option<&str>,
    remaining: Option<u64>,
) {
    out.push(b'{');
    let mut first = true;
    let mut sep = |out: &mut Vec<u8>| {
        if !first {
            out.push(b',');
        }
        first = false;
    };
    if !rv.is_empty() {
        sep(out);
        out.extend_from_slice(b"\"resourceVersion\":");
        write_str(out, rv);
    }
    if let Some(c) = continue_token.filter(|c| !c.is_empty()) {
        sep(out);
        out.extend_from_slice(b"\"continue\":");
        write_str(out, c);
    }
    if let Some(n) = remaining {
        sep(out);
        out.extend_from_slice(b"\"remainingItemCount\":");
        out.extend_from_slice(n.to_string().as_bytes());
    }
    out.push(b'}');
}

// ----- custom resources ----------------------------------------------------------------------

fn crd_source(cols: &Value) -> Result<Source, CrdColumnsError> {
    let list = match cols {
        Value::Null => return Ok(default_crd_source()),
        Value::Array(a) if a.is_empty() => return Ok(default_crd_source()),
        Value::Array(a) => a,
        _ => return Err(CrdColumnsError::NotAnArray),
    };
    let mut out = Vec::with_capacity(list.len());
    for col in list {
        let field = |k: &str| col.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let json_path = field("jsonPath");
        let path = JsonPath::parse(&json_path).map_err(|source| CrdColumnsError::JsonPath {
            name: field("name"),
            source,
        })?;
        out.push(CrdColumn {
            name: field("name"),
            ty: field("type"),
            path,
        });
    }
    Ok(Source::Custom(out))
}

/// What apiextensions serves for a CRD version without printer columns.
fn default_crd_source() -> Source {
    Source::Custom(vec![CrdColumn {
        name: "Age".to_string(),
        ty: "date".to_string(),
        path: JsonPath::parse(".metadata.creationTimestamp").expect("static path parses"),
    }])
}

/// One custom resource cell, as apiextensions' table convertor computes it.
fn crd_cell(col: &CrdColumn, obj: &Value, now: i128) -> Value {
    let value = match col.path.find(obj) {
        Ok(found) if !found.is_empty() => found[0],
        _ => return Value::Null,
    };
    if col.ty == "string" {
        // The value printed as client-go's JSONPath prints it.
        return Value::from(match value {
            Value::Null => "<no value>".to_string(),
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i.to_string(),
                (None, Some(u)) => go_fmt_v(u as f64),
                _ => go_fmt_v(n.as_f64().unwrap_or(0.0)),
            },
            Value::Array(_) | Value::Object(_) => {
                let mut out = Vec::new();
                write_value(&mut out, value, true);
                String::from_utf8(out).unwrap_or_default()
            }
        });
    }
    match (col.ty.as_str(), value) {
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(0.0) as i64),
        },
        ("number", Value::Number(n)) => {
            let f = n.as_f64().unwrap_or(0.0);
            // Encoded the way Go writes a float64 (serde_json would write `7.0`).
            serde_json::from_str(&go_json_float(f)).unwrap_or(Value::Null)
        }
        ("boolean", Value::Bool(b)) => Value::from(*b),
        ("date", Value::String(s)) => {
            if s.is_empty() || s == "null" {
                return Value::from("<unknown>");
            }
            match parse_rfc3339(s) {
                Some(_) => Value::from(since(parse_time(s), now)),
                None => Value::from("<invalid>"),
            }
        }
        _ => Value::Null,
    }
}

// ----- PartialObjectMetadata -----------------------------------------------------------------

/// How a PartialObjectMetadata starts, as the apiserver writes one (the struct's field order).
const PARTIAL_PREFIX: &[u8] =
    br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#;

/// Whether `object` is already a PartialObjectMetadata as the apiserver writes it (the objects
/// of a metadata-only cache are: see `object::Strip::metadata_only`).
pub fn is_partial_object_metadata(object: &[u8]) -> bool {
    object.starts_with(PARTIAL_PREFIX)
}

/// The PartialObjectMetadata of one object (`{"kind":"PartialObjectMetadata","apiVersion":
/// "meta.k8s.io/v1","metadata":{…}}`), as in `rows[].object` and PartialObjectMetadataList
/// items: no trailing newline (append one for a GET body). A PartialObjectMetadata is its own
/// (a metadata-only cache's objects): returned as it is, unparsed.
pub fn partial_object_metadata(object: &[u8]) -> Bytes {
    if is_partial_object_metadata(object) {
        return Bytes::copy_from_slice(object);
    }
    let obj: Value = serde_json::from_slice(object).unwrap_or(Value::Null);
    let mut out = Vec::with_capacity(object.len());
    write_partial(&mut out, &obj);
    Bytes::from(out)
}

/// A PartialObjectMetadataList's envelope up to its items' opening bracket, and the whole body
/// of one without items (`"items":null`, as the apiserver writes it): for lists streamed from
/// objects that are PartialObjectMetadata already (closed by `]}` and a newline).
pub fn partial_object_metadata_list_head(
    rv: &str,
    continue_token: Option<&str>,
    remaining: Option<u64>,
) -> (String, String) {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(
        br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":"#,
    );
    write_list_meta(&mut out, rv, continue_token, remaining);
    out.extend_from_slice(br#","items":"#);
    let mut empty = out.clone();
    empty.extend_from_slice(b"null}\n");
    out.push(b'[');
    // Only ASCII and JSON-escaped strings were written.
    (
        String::from_utf8(out).unwrap_or_default(),
        String::from_utf8(empty).unwrap_or_default(),
    )
}

/// A PartialObjectMetadataList body (`Accept: …;as=PartialObjectMetadataList;…`): an empty
/// list has `"items":null`, as the apiserver writes it.
pub fn partial_object_metadata_list(
    objects: &[&[u8]],
    rv: &str,
    continue_token: Option<&str>,
    remaining: Option<u64>,
) -> Bytes {
    let (head, empty) = partial_object_metadata_list_head(rv, continue_token, remaining);
    if objects.is_empty() {
        return Bytes::from(empty);
    }
    let mut out =
        Vec::with_capacity(head.len() + 4 + objects.iter().map(|o| o.len()).sum::<usize>());
    out.extend_from_slice(head.as_bytes());
    for (i, raw) in objects.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if is_partial_object_metadata(raw) {
            out.extend_from_slice(raw);
        } else {
            let obj: Value = serde_json::from_slice(raw).unwrap_or(Value::Null);
            write_partial(&mut out, &obj);
        }
    }
    out.extend_from_slice(b"]}\n");
    Bytes::from(out)
}

/// The PartialObjectMetadata of a built-in object from its `metadata` as stored (`RowObject`).
fn write_partial_stored(out: &mut Vec<u8>, metadata: &[u8]) {
    out.extend_from_slice(PARTIAL_PREFIX);
    out.extend_from_slice(metadata);
    out.push(b'}');
}

/// The PartialObjectMetadata of a parsed object, its metadata written in Go's field order.
fn write_partial(out: &mut Vec<u8>, obj: &Value) {
    out.extend_from_slice(PARTIAL_PREFIX);
    write_object_meta(out, obj.get("metadata").unwrap_or(&Value::Null));
    out.push(b'}');
}

/// Writes fields of `src` in the given order with Go's omitempty rules.
struct FieldWriter<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl FieldWriter<'_> {
    fn key(&mut self, k: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        write_str(self.out, k);
        self.out.push(b':');
    }

    /// A string field with `omitempty`.
    fn str_omitempty(&mut self, src: &Value, k: &str) {
        if let Some(s) = src.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()) {
            self.key(k);
            write_str(self.out, s);
        }
    }

    /// A string field without `omitempty`.
    fn str_always(&mut self, src: &Value, k: &str) {
        self.key(k);
        write_str(self.out, src.get(k).and_then(Value::as_str).unwrap_or(""));
    }

    /// A pointer field (`omitempty` drops only nil): any non-null value as it is.
    fn ptr(&mut self, src: &Value, k: &str) {
        if let Some(v) = src.get(k).filter(|v| !v.is_null()) {
            self.key(k);
            write_value(self.out, v, false);
        }
    }

    /// A non-empty array of structs (`omitempty`), each written by `fields` in Go struct
    /// order.
    fn structs(&mut self, src: &Value, k: &str, fields: impl Fn(&mut FieldWriter<'_>, &Value)) {
        let Some(items) = src
            .get(k)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
        else {
            return;
        };
        self.key(k);
        self.out.push(b'[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.out.push(b'{');
            fields(
                &mut FieldWriter {
                    out: &mut *self.out,
                    first: true,
                },
                item,
            );
            self.out.push(b'}');
        }
        self.out.push(b']');
    }
}

/// `ObjectMeta` in Go struct order and with its omitempty rules (so also for unstructured
/// objects, whose keys are sorted).
fn write_object_meta(out: &mut Vec<u8>, m: &Value) {
    out.push(b'{');
    let mut w = FieldWriter { out, first: true };
    for k in [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
    ] {
        w.str_omitempty(m, k);
    }
    if let Some(g) = m
        .get("generation")
        .filter(|g| g.as_i64() != Some(0) && !g.is_null())
    {
        w.key("generation");
        write_value(w.out, g, false);
    }
    // A struct, not a pointer: always present, `null` for the zero time.
    w.key("creationTimestamp");
    match m.get("creationTimestamp") {
        Some(Value::String(s)) => write_str(w.out, s),
        _ => w.out.extend_from_slice(b"null"),
    }
    w.ptr(m, "deletionTimestamp");
    w.ptr(m, "deletionGracePeriodSeconds");
    for k in ["labels", "annotations"] {
        if let Some(map) = m.get(k).filter(|v| non_empty(v)) {
            w.key(k);
            write_value(w.out, map, true);
        }
    }
    w.structs(m, "ownerReferences", |f, r| {
        for k in ["apiVersion", "kind", "name", "uid"] {
            f.str_always(r, k);
        }
        f.ptr(r, "controller");
        f.ptr(r, "blockOwnerDeletion");
    });
    if let Some(fin) = m.get("finalizers").filter(|v| non_empty(v)) {
        w.key("finalizers");
        write_value(w.out, fin, false);
    }
    w.structs(m, "managedFields", |f, e| {
        for k in ["manager", "operation", "apiVersion"] {
            f.str_omitempty(e, k);
        }
        f.ptr(e, "time");
        f.str_omitempty(e, "fieldsType");
        f.ptr(e, "fieldsV1");
        f.str_omitempty(e, "subresource");
    });
    w.out.push(b'}');
}

fn non_empty(v: &Value) -> bool {
    match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Null => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests;
