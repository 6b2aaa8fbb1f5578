//! The PartialObjectMetadata form (`meta.k8s.io/v1`) that metadata clients (client-go's
//! metadata informers, the garbage collector) ask for with
//! `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` on a LIST and
//! `as=PartialObjectMetadata` on a GET or WATCH (rule E4 of the recordings' `INDEX.md`).
//!
//! * An object becomes `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{..}}`
//!   whose metadata is a Go `ObjectMeta`: keys in struct order for every type, custom resources
//!   included (`pom-list-widgets-ns-a`, whose full JSON has sorted keys), Go's `omitempty`
//!   rules, map keys (labels, annotations) sorted as Go writes maps, unknown keys dropped.
//!   `creationTimestamp` is never omitted (`null` when unset, as in a BOOKMARK).
//! * A list becomes a `PartialObjectMetadataList` whose `ListMeta` has only what is set (no
//!   `"continue":""` for custom resources) and whose empty `items` is `null`
//!   (`pom-list-cm-ns-empty`).
//! * Asking for the wrong one (PartialObjectMetadata of a list, PartialObjectMetadataList of an
//!   object) is a 406 naming the Go type the apiserver holds (`err-pom-list-wrong-as`).
//!
//! This module writes the JSON form; a LIST that prefers the protobuf one gets the
//! `protobuf` module's `metadata_list_body`.
//!
//! The encoding of a stored object is done once and kept with it (`StoredObj::metadata`);
//! watch lines in this form are built once per event and shared by every watcher.

use super::encode::{write_str, write_value};
use super::status::SimError;
use super::types::ResourceType;
use serde_json::{Map, Value};

/// The apiVersion of both kinds.
pub const API_VERSION: &str = "meta.k8s.io/v1";

/// The representation a client negotiated for the objects of a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The resource's own form (JSON or protobuf).
    Object,
    /// `as=PartialObjectMetadata`: for a GET and each object of a WATCH.
    Metadata,
    /// `as=PartialObjectMetadataList`: for a LIST.
    MetadataList,
}

/// What a JSON `Accept` clause with these parameters asks for; None when the apiserver skips
/// the clause (a transformation it does not offer), so negotiation moves on to the next one.
///
/// A clause naming any of `as`, `g` or `v` asks for a transformation. The apiserver offers
/// `PartialObjectMetadata` and `PartialObjectMetadataList` of `meta.k8s.io` (also `v1beta1`,
/// which the sim does not serve: such clauses are skipped here) whatever the endpoint, so a
/// LIST asked `as=PartialObjectMetadata` is accepted by negotiation and then refused with a
/// 406, even with a fallback clause after it. `as=Table` is answered like plain JSON here: a
/// read of a type whose columns the sim serves is printed before negotiation
/// (`http::table_asked`, `table_rows`), anything else is answered in its own form.
pub fn clause_form(params: &[&str]) -> Option<Form> {
    let param = |name: &str| {
        params.iter().find_map(|p| {
            let (k, v) = p.split_once('=')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    let (kind, group, version) = (param("as"), param("g"), param("v"));
    if kind.is_none() && group.is_none() && version.is_none() {
        return Some(Form::Object);
    }
    if kind == Some("Table") {
        return Some(Form::Object);
    }
    if group != Some("meta.k8s.io") || version != Some("v1") {
        return None;
    }
    match kind {
        Some("PartialObjectMetadata") => Some(Form::Metadata),
        Some("PartialObjectMetadataList") => Some(Form::MetadataList),
        _ => None,
    }
}

/// The 406 for `as=PartialObjectMetadata` on a LIST (`list`) or `as=PartialObjectMetadataList`
/// on anything else, naming the Go type of the apiserver's result as it does
/// (`err-pom-list-wrong-as`: `*core.ConfigMapList`).
pub fn wrong_form(rt: &ResourceType, list: bool) -> SimError {
    let message = if list {
        format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            go_type(rt, true)
        )
    } else {
        format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
            go_type(rt, false)
        )
    };
    SimError::Other {
        code: 406,
        reason: "NotAcceptable",
        message,
    }
}

/// The Go type the apiserver's handlers hold for `rt`: the internal type of a built-in kind
/// (package `core` for the core group, else the group's first label: `apps`, `batch`,
/// `discovery`) or the unstructured type of a custom resource.
fn go_type(rt: &ResourceType, list: bool) -> String {
    let suffix = if list { "List" } else { "" };
    if rt.custom {
        return format!("*unstructured.Unstructured{suffix}");
    }
    let package = match rt.group.split('.').next() {
        None | Some("") => "core",
        Some(first) => first,
    };
    format!("*{package}.{}{suffix}", rt.kind)
}

/// The PartialObjectMetadata of an object (compact, no trailing newline).
pub fn encode(rt: &ResourceType, obj: &Value) -> Vec<u8> {
    let empty = Map::new();
    let meta = obj
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    encode_meta(meta, rt.custom)
}

/// The object of a BOOKMARK in this form: an ObjectMeta with only the resourceVersion (and
/// the initial-events-end annotation), as the apiserver's bookmark object becomes once
/// transformed: `{"resourceVersion":"N","creationTimestamp":null[,"annotations":{..}]}`.
pub fn bookmark(rv: u64, initial_end: bool) -> Vec<u8> {
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    if initial_end {
        let mut annotations = Map::new();
        annotations.insert(
            "k8s.io/initial-events-end".into(),
            Value::String("true".into()),
        );
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    encode_meta(&meta, false)
}

fn encode_meta(meta: &Map<String, Value>, custom: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":");
    write_str(&mut out, API_VERSION);
    out.extend_from_slice(b",\"metadata\":");
    write_struct(&mut out, meta, OBJECT_META, custom);
    out.push(b'}');
    out
}

/// A `PartialObjectMetadataList` around items already in this form, with the list's
/// resourceVersion, continue token and remaining count (ListMeta: each only when set).
/// No items is `"items":null` (`pom-list-cm-ns-empty`). Ends with the trailing newline.
pub fn list_body<'a>(
    list_rv: u64,
    token: Option<&str>,
    remaining: Option<u64>,
    items: impl ExactSizeIterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.len() * 512 + 256);
    out.extend_from_slice(b"{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":");
    write_str(&mut out, API_VERSION);
    out.extend_from_slice(b",\"metadata\":{\"resourceVersion\":");
    write_str(&mut out, &list_rv.to_string());
    if let Some(t) = token {
        out.extend_from_slice(b",\"continue\":");
        write_str(&mut out, t);
    }
    if let Some(r) = remaining {
        out.extend_from_slice(b",\"remainingItemCount\":");
        out.extend_from_slice(r.to_string().as_bytes());
    }
    out.extend_from_slice(b"},\"items\":");
    if items.len() == 0 {
        out.extend_from_slice(b"null");
    } else {
        out.push(b'[');
        for (i, item) in items.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item);
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}\n");
    out
}

/// How a Go struct field holding its zero value is written.
#[derive(Clone, Copy)]
enum Zero {
    /// `omitempty` on a value: left out when absent, null, "", 0, false, [] or {}.
    Omit,
    /// `omitempty` on a pointer: left out only when absent or null.
    OmitNil,
    /// A `metav1.Time` value (a struct, which `omitempty` never drops): `null`.
    Null,
    /// A string without `omitempty`: `""`.
    Blank,
}

/// `metav1.ObjectMeta`, in struct order.
const OBJECT_META: &[(&str, Zero)] = &[
    ("name", Zero::Omit),
    ("generateName", Zero::Omit),
    ("namespace", Zero::Omit),
    ("selfLink", Zero::Omit),
    ("uid", Zero::Omit),
    ("resourceVersion", Zero::Omit),
    ("generation", Zero::Omit),
    ("creationTimestamp", Zero::Null),
    ("deletionTimestamp", Zero::OmitNil),
    ("deletionGracePeriodSeconds", Zero::OmitNil),
    ("labels", Zero::Omit),
    ("annotations", Zero::Omit),
    ("ownerReferences", Zero::Omit),
    ("finalizers", Zero::Omit),
    ("managedFields", Zero::Omit),
];

/// `metav1.OwnerReference`, in struct order.
const OWNER_REFERENCE: &[(&str, Zero)] = &[
    ("apiVersion", Zero::Blank),
    ("kind", Zero::Blank),
    ("name", Zero::Blank),
    ("uid", Zero::Blank),
    ("controller", Zero::OmitNil),
    ("blockOwnerDeletion", Zero::OmitNil),
];

/// `metav1.ManagedFieldsEntry`, in struct order.
const MANAGED_FIELDS_ENTRY: &[(&str, Zero)] = &[
    ("manager", Zero::Omit),
    ("operation", Zero::Omit),
    ("apiVersion", Zero::Omit),
    ("time", Zero::OmitNil),
    ("fieldsType", Zero::Omit),
    ("fieldsV1", Zero::OmitNil),
    ("subresource", Zero::Omit),
];

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Writes the fields of `map` named in `fields`, in that order, as Go writes the struct.
fn write_struct(
    out: &mut Vec<u8>,
    map: &Map<String, Value>,
    fields: &[(&str, Zero)],
    custom: bool,
) {
    out.push(b'{');
    let mut first = true;
    for (key, zero) in fields {
        let v = map.get(*key).unwrap_or(&Value::Null);
        let zero_literal: Option<&[u8]> = match zero {
            Zero::Omit if is_empty(v) => continue,
            Zero::OmitNil if v.is_null() => continue,
            Zero::Null if v.is_null() => Some(b"null"),
            Zero::Blank if v.is_null() => Some(b"\"\""),
            _ => None,
        };
        if !first {
            out.push(b',');
        }
        first = false;
        write_str(out, key);
        out.push(b':');
        match zero_literal {
            Some(lit) => out.extend_from_slice(lit),
            None => write_field(out, key, v, custom),
        }
    }
    out.push(b'}');
}

/// Writes one field's value: nested structs in struct order, Go maps with sorted keys, the
/// rest as stored. `fieldsV1` is raw JSON the apiserver passes through: written as the
/// object's full form writes it (sorted keys for a custom resource).
fn write_field(out: &mut Vec<u8>, key: &str, v: &Value, custom: bool) {
    match (key, v) {
        ("labels" | "annotations", Value::Object(_)) => write_value(out, v, true),
        ("ownerReferences", Value::Array(items)) => {
            write_structs(out, items, OWNER_REFERENCE, custom)
        }
        ("managedFields", Value::Array(items)) => {
            write_structs(out, items, MANAGED_FIELDS_ENTRY, custom)
        }
        ("fieldsV1", _) => write_value(out, v, custom),
        _ => write_value(out, v, false),
    }
}

fn write_structs(out: &mut Vec<u8>, items: &[Value], fields: &[(&str, Zero)], custom: bool) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match item {
            Value::Object(m) => write_struct(out, m, fields, custom),
            other => write_value(out, other, false),
        }
    }
    out.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clause(s: &str) -> Option<Form> {
        let params: Vec<&str> = s.split(';').skip(1).map(str::trim).collect();
        clause_form(&params)
    }

    #[test]
    fn clauses() {
        assert_eq!(clause("application/json"), Some(Form::Object));
        assert_eq!(
            clause("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
            Some(Form::MetadataList)
        );
        assert_eq!(
            clause("application/json;g=meta.k8s.io;v=v1;as=PartialObjectMetadata"),
            Some(Form::Metadata)
        );
        assert_eq!(
            clause("application/json;as=Table;v=v1;g=meta.k8s.io"),
            Some(Form::Object)
        );
        assert_eq!(
            clause("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"),
            None
        );
        assert_eq!(clause("application/json;as=PartialObjectMetadata"), None);
        assert_eq!(clause("application/json;as=Pod;g=;v=v1"), None);
    }

    #[test]
    fn struct_order_omitempty_and_sorted_maps() {
        let obj: Value = serde_json::from_str(
            r#"{"apiVersion":"x/v1","kind":"W","metadata":{"uid":"u","name":"n","extra":1,
            "labels":{"b":"2","a":"1"},"annotations":{},"generation":0,"deletionGracePeriodSeconds":0,
            "ownerReferences":[{"uid":"o","name":"p","controller":false}],
            "managedFields":[{"time":"t","manager":"m","fieldsV1":{"f:b":{},"f:a":{}}}]},"spec":{}}"#,
        )
        .unwrap();
        let rt = ResourceType::custom("x", "v1", "ws", "w", "W", true, &[]);
        assert_eq!(
            String::from_utf8(encode(&rt, &obj)).unwrap(),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"n","uid":"u","creationTimestamp":null,"deletionGracePeriodSeconds":0,"labels":{"a":"1","b":"2"},"ownerReferences":[{"apiVersion":"","kind":"","name":"p","uid":"o","controller":false}],"managedFields":[{"manager":"m","time":"t","fieldsV1":{"f:a":{},"f:b":{}}}]}}"#
        );
    }

    #[test]
    fn bookmarks_and_lists() {
        assert_eq!(
            String::from_utf8(bookmark(7, true)).unwrap(),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}"#
        );
        assert_eq!(
            String::from_utf8(list_body(5, None, None, std::iter::empty())).unwrap(),
            "{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"5\"},\"items\":null}\n"
        );
        let items: [&[u8]; 2] = [b"{}", b"{}"];
        assert_eq!(
            String::from_utf8(list_body(5, Some("t"), Some(3), items.into_iter())).unwrap(),
            "{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"5\",\"continue\":\"t\",\"remainingItemCount\":3},\"items\":[{},{}]}\n"
        );
    }

    #[test]
    fn wrong_form_names_the_go_type() {
        let cm = super::super::types::builtins()
            .into_iter()
            .find(|t| t.resource == "configmaps")
            .unwrap();
        assert_eq!(
            wrong_form(&cm, true).to_string(),
            "you requested PartialObjectMetadata, but the requested object is a list (*core.ConfigMapList)"
        );
        let w = ResourceType::custom("x.io", "v1", "ws", "w", "W", true, &[]);
        assert_eq!(
            wrong_form(&w, false).to_string(),
            "you requested PartialObjectMetadataList, but the requested object is not a list (*unstructured.Unstructured)"
        );
    }
}
