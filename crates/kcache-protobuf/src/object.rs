//! What kcache reads and changes in an object's message without knowing its kind: every
//! built-in Kubernetes object has its ObjectMeta as field 1, and ObjectMeta's field numbers
//! are the same for all of them (name 1, namespace 3, resourceVersion 6, annotations 12, …).
//!
//! Changes are splices: the bytes before and after the changed field are copied unchanged,
//! and only the ObjectMeta's length is written anew, so the result is what Go's marshaller
//! would write for the changed object (it writes fields in ascending order, which is where
//! the new field goes).

use std::cmp::Ordering;

use super::wire::{len_field_len, put_bytes_field, put_len_head, Field, Fields};
use super::ProtoError;

/// ObjectMeta field numbers kcache uses.
const NAME: u32 = 1;
const NAMESPACE: u32 = 3;
const RESOURCE_VERSION: u32 = 6;
const ANNOTATIONS: u32 = 12;

/// The parts of an object's ObjectMeta that the cache keys and orders objects by, borrowed
/// from the object's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectMeta<'a> {
    /// `metadata.name` (field 1).
    pub name: &'a str,
    /// `metadata.namespace` (field 3); empty for a cluster-scoped object.
    pub namespace: &'a str,
    /// `metadata.resourceVersion` (field 6).
    pub resource_version: &'a str,
}

/// The ObjectMeta field of an object message: the field (its span in `obj`) and its value.
/// Errors when there is none, or two (Go writes it once; which one a decoder would take, or
/// merge, is not worth guessing).
fn find_meta(obj: &[u8]) -> Result<(Field<'_>, &[u8]), ProtoError> {
    let mut found = None;
    for field in Fields::new(obj, "object") {
        let field = field?;
        if field.number == 1 {
            if found.is_some() {
                return Err(ProtoError::Malformed("object with two metadata fields"));
            }
            found = Some((field, field.bytes("object.metadata")?));
        }
    }
    found.ok_or(ProtoError::Malformed("object without metadata"))
}

/// Reads the name, namespace and resourceVersion of a bare object message (a list item, or
/// an envelope's `raw`). Cheap: every other field, in the object and in its ObjectMeta, is
/// skipped by its length without being decoded. A field written twice counts by its last
/// value, as protobuf decoders do.
pub fn object_meta(obj: &[u8]) -> Result<ObjectMeta<'_>, ProtoError> {
    let (_, meta) = find_meta(obj)?;
    let mut out = ObjectMeta::default();
    for f in Fields::new(meta, "ObjectMeta") {
        let f = f?;
        match f.number {
            NAME => out.name = f.str("ObjectMeta.name")?,
            NAMESPACE => out.namespace = f.str("ObjectMeta.namespace")?,
            RESOURCE_VERSION => out.resource_version = f.str("ObjectMeta.resourceVersion")?,
            _ => {}
        }
    }
    Ok(out)
}

/// The object message with the span `cut` of its ObjectMeta replaced by `new_len` bytes that
/// `put` writes: one allocation of the exact size, the ObjectMeta's length re-encoded.
fn splice_meta(
    obj: &[u8],
    meta_field: Field<'_>,
    meta: &[u8],
    cut: (usize, usize),
    new_len: usize,
    put: impl FnOnce(&mut Vec<u8>),
) -> Vec<u8> {
    let meta_len = meta.len() - (cut.1 - cut.0) + new_len;
    let total = meta_field.start + len_field_len(1, meta_len) + (obj.len() - meta_field.end);
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&obj[..meta_field.start]);
    put_len_head(&mut out, 1, meta_len);
    out.extend_from_slice(&meta[..cut.0]);
    put(&mut out);
    out.extend_from_slice(&meta[cut.1..]);
    out.extend_from_slice(&obj[meta_field.end..]);
    debug_assert_eq!(out.len(), total);
    out
}

/// The same object message with `metadata.resourceVersion` set to `rv`, byte for byte what
/// Go would marshal for the changed object: the field replaced where it was (Go always
/// writes it, even empty) or, if missing, inserted before the first ObjectMeta field above
/// 6, and the ObjectMeta's length re-encoded.
///
/// kcache sends objects at another resourceVersion than they were stored with: the DELETED
/// event of an object leaving a watch's selector carries its previous state at the new RV,
/// and a bookmark an empty object at the bookmark's RV.
pub fn with_resource_version(obj: &[u8], rv: &str) -> Result<Vec<u8>, ProtoError> {
    let (meta_field, meta) = find_meta(obj)?;
    // Where the field is, else where Go would have written it.
    let mut found = None;
    let mut insert_at = None;
    for f in Fields::new(meta, "ObjectMeta") {
        let f = f?;
        match f.number.cmp(&RESOURCE_VERSION) {
            Ordering::Less => {}
            Ordering::Equal => {
                if found.is_some() {
                    return Err(ProtoError::Malformed(
                        "ObjectMeta with two resourceVersion fields",
                    ));
                }
                f.bytes("ObjectMeta.resourceVersion")?;
                found = Some((f.start, f.end));
            }
            Ordering::Greater => {
                insert_at.get_or_insert((f.start, f.start));
            }
        }
    }
    let cut = found.or(insert_at).unwrap_or((meta.len(), meta.len()));
    let new_len = len_field_len(RESOURCE_VERSION, rv.len());
    Ok(splice_meta(obj, meta_field, meta, cut, new_len, |out| {
        put_bytes_field(out, RESOURCE_VERSION, rv.as_bytes())
    }))
}

/// The key of an annotations map entry (`{ key(1), value(2) }`).
fn entry_key(entry: &[u8]) -> Result<&[u8], ProtoError> {
    let mut key: &[u8] = &[];
    for f in Fields::new(entry, "ObjectMeta.annotations entry") {
        let f = f?;
        if f.number == 1 {
            key = f.bytes("ObjectMeta.annotations key")?;
        }
    }
    Ok(key)
}

/// The same object message with the annotation `key: value` added (or its value replaced if
/// the key is there), byte for byte what Go would marshal: Go writes a map's entries sorted by
/// key (byte order), each `{ key(1), value(2) }` with both always written, so the entry goes
/// after the annotations whose keys sort before it and before any ObjectMeta field above 12
/// (ownerReferences, finalizers, managedFields).
///
/// kcache sends the bookmark that ends a watch's initial events with the annotation
/// `k8s.io/initial-events-end: "true"` (rule W7).
pub fn with_annotation(obj: &[u8], key: &str, value: &str) -> Result<Vec<u8>, ProtoError> {
    let (meta_field, meta) = find_meta(obj)?;
    let mut cut = None;
    for f in Fields::new(meta, "ObjectMeta") {
        let f = f?;
        if f.number > ANNOTATIONS {
            cut = Some((f.start, f.start));
            break;
        }
        if f.number == ANNOTATIONS {
            let existing = entry_key(f.bytes("ObjectMeta.annotations")?)?;
            match existing.cmp(key.as_bytes()) {
                Ordering::Less => {}
                Ordering::Equal => {
                    cut = Some((f.start, f.end));
                    break;
                }
                Ordering::Greater => {
                    cut = Some((f.start, f.start));
                    break;
                }
            }
        }
    }
    let cut = cut.unwrap_or((meta.len(), meta.len()));
    let entry_len = len_field_len(1, key.len()) + len_field_len(2, value.len());
    let new_len = len_field_len(ANNOTATIONS, entry_len);
    Ok(splice_meta(obj, meta_field, meta, cut, new_len, |out| {
        put_len_head(out, ANNOTATIONS, entry_len);
        put_bytes_field(out, 1, key.as_bytes());
        put_bytes_field(out, 2, value.as_bytes());
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ConfigMap-like object: ObjectMeta with the given fields, then a `data` entry.
    fn object(meta_fields: &[(u32, &[u8])]) -> Vec<u8> {
        let mut meta = Vec::new();
        for (n, v) in meta_fields {
            put_bytes_field(&mut meta, *n, v);
        }
        let mut obj = Vec::new();
        put_bytes_field(&mut obj, 1, &meta);
        put_bytes_field(&mut obj, 2, b"\x0a\x01k\x12\x01v");
        obj
    }

    #[test]
    fn reads_name_namespace_rv() {
        let obj = object(&[(1, b"a"), (2, b""), (3, b"ns"), (5, b"uid"), (6, b"17")]);
        assert_eq!(
            object_meta(&obj).unwrap(),
            ObjectMeta {
                name: "a",
                namespace: "ns",
                resource_version: "17"
            }
        );
        assert_eq!(
            object_meta(b"\x12\x00").unwrap_err(),
            ProtoError::Malformed("object without metadata")
        );
        assert_eq!(
            object_meta(b"\x0a\x00\x0a\x00").unwrap_err(),
            ProtoError::Malformed("object with two metadata fields")
        );
    }

    #[test]
    fn resource_version_replaced_or_inserted() {
        let obj = object(&[(1, b"a"), (6, b"17"), (7, b"")]);
        let want = object(&[(1, b"a"), (6, b"123456"), (7, b"")]);
        assert_eq!(with_resource_version(&obj, "123456").unwrap(), want);
        // Missing: inserted in field order.
        let obj = object(&[(1, b"a"), (5, b"u"), (8, b"")]);
        let want = object(&[(1, b"a"), (5, b"u"), (6, b"9"), (8, b"")]);
        assert_eq!(with_resource_version(&obj, "9").unwrap(), want);
        let obj = object(&[(1, b"a")]);
        let want = object(&[(1, b"a"), (6, b"9")]);
        assert_eq!(with_resource_version(&obj, "9").unwrap(), want);
    }

    #[test]
    fn metadata_length_grows_a_byte() {
        // 127 bytes of ObjectMeta take a one-byte length, 128 a two-byte one.
        let name = vec![b'n'; 122];
        let obj = object(&[(1, &name), (6, b"1")]);
        assert_eq!(obj[1], 127);
        let out = with_resource_version(&obj, "12").unwrap();
        assert_eq!(out[1..3], [0x80, 0x01]);
        assert_eq!(out, object(&[(1, &name), (6, b"12")]));
        assert_eq!(object_meta(&out).unwrap().resource_version, "12");
    }

    fn annotations(pairs: &[(&str, &str)]) -> Vec<Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| {
                let mut e = Vec::new();
                put_bytes_field(&mut e, 1, k.as_bytes());
                put_bytes_field(&mut e, 2, v.as_bytes());
                e
            })
            .collect()
    }

    #[test]
    fn annotation_goes_in_key_order() {
        let [a, m, z, new] = &annotations(&[("a", "1"), ("m", "2"), ("z", "3"), ("k", "true")])[..]
        else {
            unreachable!()
        };
        let obj = object(&[(1, b"x"), (11, b""), (12, a), (12, m), (12, z), (14, b"f")]);
        let want = object(&[
            (1, b"x"),
            (11, b""),
            (12, a),
            (12, new),
            (12, m),
            (12, z),
            (14, b"f"),
        ]);
        assert_eq!(with_annotation(&obj, "k", "true").unwrap(), want);
        // None yet: before the first field above 12.
        let obj = object(&[(1, b"x"), (11, b""), (17, b"mf")]);
        let want = object(&[(1, b"x"), (11, b""), (12, new), (17, b"mf")]);
        assert_eq!(with_annotation(&obj, "k", "true").unwrap(), want);
        // Nothing after: at the end.
        let obj = object(&[(1, b"x"), (12, a)]);
        let want = object(&[(1, b"x"), (12, a), (12, new)]);
        assert_eq!(with_annotation(&obj, "k", "true").unwrap(), want);
        // Same key: value replaced.
        let old = &annotations(&[("k", "false")])[0];
        let obj = object(&[(1, b"x"), (12, a), (12, old), (12, z)]);
        let want = object(&[(1, b"x"), (12, a), (12, new), (12, z)]);
        assert_eq!(with_annotation(&obj, "k", "true").unwrap(), want);
    }

    #[test]
    fn keys_sort_by_bytes_as_go_does() {
        // Byte order: upper case before lower case, '.' (0x2e) before '/' (0x2f).
        let [dot, slash, upper] = &annotations(&[("k8s.io/x", ""), ("k8s/x", ""), ("Z", "")])[..]
        else {
            unreachable!()
        };
        let obj = object(&[(1, b"x"), (12, upper), (12, slash)]);
        let want = object(&[(1, b"x"), (12, upper), (12, dot), (12, slash)]);
        assert_eq!(with_annotation(&obj, "k8s.io/x", "").unwrap(), want);
    }
}
