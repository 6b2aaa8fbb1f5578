//! One cached object: its raw JSON bytes exactly as the upstream sent them, plus the few head
//! fields kcache needs to index, select and order it. Built once per upstream event and shared by
//! every reader: list bodies and watch lines are assembled from these bytes, never re-serialised.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use crate::index::{IndexSet, Indexed};
use crate::resource::ResourceInfo;
use crate::selector;

/// Why an object from the upstream could not be taken into the cache.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object has no metadata.name")]
    NoName,
    #[error("object has no numeric metadata.resourceVersion")]
    NoResourceVersion,
}

/// A cached object.
#[derive(Debug, Clone)]
pub struct Object {
    /// Store key: `namespace/name`, or `name` for cluster-scoped objects; sorts like etcd keys.
    /// Shared with the cache map's key, so each object holds its key once.
    pub key: Arc<str>,
    /// Length of the namespace part of `key` (0 for cluster-scoped).
    ns_len: usize,
    pub rv: u64,
    /// Full JSON with `kind`/`apiVersion`, as sent in watch events.
    pub raw: Bytes,
    /// Where the fields after `kind`/`apiVersion` start in `raw`, for typed built-ins whose list
    /// items omit them: the item is `{` + `raw[item_offset..]`. `None` means the item is `raw`.
    item_offset: Option<usize>,
    /// Byte range of the resourceVersion value (without quotes) inside `raw`.
    rv_range: Range<usize>,
    pub labels: BTreeMap<String, String>,
    /// The kind's selectable fields other than metadata.name/namespace, with their values.
    fields: Vec<(&'static str, String)>,
    /// Values of the resource's configured field-path indexes, (slot, value) sorted; extracted
    /// once here so the cache never re-parses an object. Empty costs no allocation.
    index_values: Box<[(u16, Box<str>)]>,
}

/// Two versions are equal when they are the same bytes (the relist diff relies on this).
impl PartialEq for Object {
    fn eq(&self, other: &Object) -> bool {
        self.rv == other.rv && self.key == other.key && self.raw == other.raw
    }
}

impl Object {
    /// Take an object from an upstream list item or watch event. `raw` may carry `kind` and
    /// `apiVersion` (watch events) or not (typed list items).
    pub fn from_upstream(
        info: &ResourceInfo,
        raw: Bytes,
        drop_managed_fields: bool,
    ) -> Result<Object, ObjectError> {
        Self::from_upstream_indexed(info, &IndexSet::default(), raw, drop_managed_fields)
    }

    /// [`Object::from_upstream`], extracting the values of the configured field-path indexes.
    pub fn from_upstream_indexed(
        info: &ResourceInfo,
        indexes: &IndexSet,
        raw: Bytes,
        drop_managed_fields: bool,
    ) -> Result<Object, ObjectError> {
        let mut value: Value = serde_json::from_slice(&raw)?;
        let mut raw = raw;
        // Whether `raw` is a fresh buffer of this object's own (else it is a slice of a list
        // page or of the watch stream's read buffer).
        let mut owned = false;
        if drop_managed_fields {
            let removed = value
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .and_then(|m| m.remove("managedFields"))
                .is_some();
            if removed {
                raw = Bytes::from(serde_json::to_vec(&value)?);
                owned = true;
            }
        }
        let meta = value.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .ok_or(ObjectError::NoName)?;
        let namespace = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let rv_str = meta
            .and_then(|m| m.get("resourceVersion"))
            .and_then(Value::as_str)
            .ok_or(ObjectError::NoResourceVersion)?;
        let rv: u64 = rv_str.parse().map_err(|_| ObjectError::NoResourceVersion)?;
        let labels = meta
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        // Name and namespace are read from the key; only the kind's other fields are kept.
        let mut fields = selector::extract_fields(&info.group, &info.resource, &value);
        fields.retain(|(f, _)| *f != "metadata.name" && *f != "metadata.namespace");
        fields.shrink_to_fit();
        let index_values = indexes.extract(&value);
        let (key, ns_len) = if info.namespaced && !namespace.is_empty() {
            (format!("{namespace}/{name}"), namespace.len())
        } else {
            (name.to_string(), 0)
        };

        let (raw, item_offset) = if info.custom {
            (raw, None)
        } else {
            let (typed, off, rebuilt) = typed_form(info, raw, &value)?;
            owned |= rebuilt;
            (typed, Some(off))
        };
        // An object kept for hours must not pin a whole page or read buffer: one memcpy per
        // upstream event gives it its own allocation.
        let raw = if owned {
            raw
        } else {
            Bytes::copy_from_slice(&raw)
        };
        let rv_range = find_rv(&raw, rv_str).unwrap_or(0..0);
        Ok(Object {
            key: Arc::from(key),
            ns_len,
            rv,
            raw,
            item_offset,
            rv_range,
            labels,
            fields,
            index_values,
        })
    }

    pub fn namespace(&self) -> &str {
        &self.key[..self.ns_len]
    }

    pub fn name(&self) -> &str {
        if self.ns_len == 0 {
            &self.key
        } else {
            &self.key[self.ns_len + 1..]
        }
    }

    /// Value of a selectable field, for field selectors.
    pub fn field(&self, name: &str) -> Option<&str> {
        match name {
            "metadata.name" => Some(self.name()),
            "metadata.namespace" => Some(self.namespace()),
            _ => self
                .fields
                .iter()
                .find(|(f, _)| *f == name)
                .map(|(_, v)| v.as_str()),
        }
    }

    /// Values of the configured field-path index in `slot`.
    pub fn index_values(&self, slot: u16) -> impl Iterator<Item = &str> {
        let start = self.index_values.partition_point(|(s, _)| *s < slot);
        self.index_values[start..]
            .iter()
            .take_while(move |(s, _)| *s == slot)
            .map(|(_, v)| v.as_ref())
    }

    /// Append the list-item form of this object to `out`.
    pub fn write_item(&self, out: &mut BytesMut) {
        match self.item_offset {
            Some(off) => {
                out.extend_from_slice(b"{");
                out.extend_from_slice(&self.raw[off..]);
            }
            None => out.extend_from_slice(&self.raw),
        }
    }

    /// The same object at another resourceVersion (a delete the cache learnt of by relisting
    /// carries the relist's RV, since the real deletion RV is unknown).
    pub fn with_rv(&self, rv: u64) -> Object {
        let mut o = self.clone();
        o.raw = self.raw_with_rv(rv);
        o.rv = rv;
        if !self.rv_range.is_empty() {
            let start = self.rv_range.start;
            o.rv_range = start..start + rv.to_string().len();
        }
        o
    }

    /// The object bytes with its resourceVersion replaced: a watcher whose selector the object
    /// leaves receives the previous state with the new RV (rule W2).
    pub fn raw_with_rv(&self, rv: u64) -> Bytes {
        if self.rv_range.is_empty() {
            return self.raw.clone();
        }
        let mut out = BytesMut::with_capacity(self.raw.len() + 4);
        out.extend_from_slice(&self.raw[..self.rv_range.start]);
        out.extend_from_slice(rv.to_string().as_bytes());
        out.extend_from_slice(&self.raw[self.rv_range.end..]);
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
        self.labels.get(key).map(String::as_str)
    }

    fn index_values(&self, slot: u16) -> impl Iterator<Item = &str> {
        Object::index_values(self, slot)
    }
}

/// Bring a typed built-in object to `{"kind":"K","apiVersion":"V",…}` and return the offset
/// of the fields after that prefix, and whether a new buffer was built. Watch objects already
/// have it; typed list items have no kind/apiVersion, so the prefix is prepended without
/// re-serialising.
fn typed_form(
    info: &ResourceInfo,
    raw: Bytes,
    value: &Value,
) -> Result<(Bytes, usize, bool), ObjectError> {
    let prefix = info.typed_prefix();
    if raw.starts_with(prefix.as_bytes()) {
        return Ok((raw, prefix.len(), false));
    }
    let obj = value.as_object();
    let has_type = obj.is_some_and(|o| o.contains_key("kind") || o.contains_key("apiVersion"));
    let body: Bytes = if has_type {
        // Some other key order: drop the type fields once and re-serialise this object only.
        let mut v = value.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("kind");
            o.remove("apiVersion");
        }
        Bytes::from(serde_json::to_vec(&v)?)
    } else {
        raw
    };
    let rest = body.get(1..).unwrap_or_default();
    let mut out = BytesMut::with_capacity(prefix.len() + body.len());
    if rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}') {
        // An object with no other fields: no trailing comma after the type fields.
        out.extend_from_slice(&prefix.as_bytes()[..prefix.len() - 1]);
        out.extend_from_slice(b"}");
        let len = out.len();
        return Ok((out.freeze(), len - 1, true));
    }
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(rest);
    Ok((out.freeze(), prefix.len(), true))
}

/// Byte range of the object's own resourceVersion value: the first `"resourceVersion":"N"`,
/// which is metadata's because metadata precedes every other nested object in both wire forms
/// (and escaped quotes inside string values cannot match).
fn find_rv(raw: &[u8], rv: &str) -> Option<Range<usize>> {
    let needle = format!("\"resourceVersion\":\"{rv}\"");
    let pos = raw
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())?;
    let start = pos + "\"resourceVersion\":\"".len();
    Some(start..start + rv.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm_info() -> ResourceInfo {
        ResourceInfo {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
            kind: "ConfigMap".into(),
            namespaced: true,
            custom: false,
        }
    }

    #[test]
    fn list_item_and_watch_object_share_bytes() {
        let item = Bytes::from_static(br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"web"}},"data":{"k":"v"}}"#);
        let o = Object::from_upstream(&cm_info(), item.clone(), false).unwrap();
        assert_eq!(
            &o.raw[..],
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"web"}},"data":{"k":"v"}}"#
        );
        let mut out = BytesMut::new();
        o.write_item(&mut out);
        assert_eq!(&out[..], &item[..]);
        assert_eq!(o.key.as_ref(), "ns/a");
        assert_eq!(o.namespace(), "ns");
        assert_eq!(o.name(), "a");
        assert_eq!(o.rv, 7);
        assert_eq!(o.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(o.field("metadata.name"), Some("a"));

        let w = Object::from_upstream(&cm_info(), o.raw.clone(), false).unwrap();
        assert_eq!(w.raw, o.raw);
    }

    #[test]
    fn rv_replacement() {
        let raw = Bytes::from_static(br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#);
        let o = Object::from_upstream(&cm_info(), raw, false).unwrap();
        assert_eq!(
            &o.raw_with_rv(1234)[..],
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"1234"}}"#
        );
    }

    #[test]
    fn drops_managed_fields_once() {
        let raw = Bytes::from_static(br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","managedFields":[{"manager":"x"}]}}"#);
        let o = Object::from_upstream(&cm_info(), raw, true).unwrap();
        assert!(!o.raw.windows(13).any(|w| w == b"managedFields"));
    }

    #[test]
    fn rejects_objects_without_head() {
        assert!(Object::from_upstream(&cm_info(), Bytes::from_static(b"{}"), false).is_err());
        assert!(Object::from_upstream(&cm_info(), Bytes::from_static(b"[1"), false).is_err());
    }
}
