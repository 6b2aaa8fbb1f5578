//! Lists: `{ metadata ListMeta(1), items(2) repeated }` inside an envelope, each item the
//! bare object message (no envelope of its own).
//!
//! The writer streams: kcache sends big lists in chunks, and protobuf puts the list's length
//! before its items, so the caller sums [`list_item_len`] over the items first, writes
//! [`write_list_head`], then each item with [`write_list_item`] (in as many chunks as it
//! likes), then [`write_list_tail`].

use bytes::{BufMut, BytesMut};

use super::envelope::{envelope_len, put_envelope_head, put_envelope_tail};
use super::wire::{len_field_len, put_bytes_field, put_len_head, put_varint_field};
use super::wire::{varint_field_len, Fields};
use super::ProtoError;

/// The ListMeta of a list kcache writes (or of a Status: the same message).
///
/// `selfLink` (field 1) is not here: the apiserver no longer fills it (1.20+), so it is
/// always written empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListMeta<'a> {
    /// The list's resourceVersion (field 2), always written, even empty.
    pub resource_version: &'a str,
    /// The `continue` token (field 3), always written, empty on the last page.
    pub continue_token: &'a str,
    /// `remainingItemCount` (field 4): a pointer in Go, so written only when set, even to 0.
    pub remaining_item_count: Option<i64>,
}

/// The ListMeta of a list read with [`parse_list`], owned so that it outlives the body (the
/// items borrow it; the metadata is kept by the cache).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnedListMeta {
    /// See [`ListMeta::resource_version`].
    pub resource_version: String,
    /// See [`ListMeta::continue_token`].
    pub continue_token: String,
    /// See [`ListMeta::remaining_item_count`].
    pub remaining_item_count: Option<i64>,
}

#[cfg(test)]
impl OwnedListMeta {
    /// Borrowed, to write it back with [`write_list_head`].
    pub fn as_list_meta(&self) -> ListMeta<'_> {
        ListMeta {
            resource_version: &self.resource_version,
            continue_token: &self.continue_token,
            remaining_item_count: self.remaining_item_count,
        }
    }
}

/// Reads a list message (the `raw` of a list's envelope, see
/// [`parse_envelope`](super::parse_envelope)): its ListMeta and its items, each the bare
/// object message borrowed from `raw`, in order. Unknown fields are skipped.
pub fn parse_list(raw: &[u8]) -> Result<(OwnedListMeta, Vec<&[u8]>), ProtoError> {
    let mut meta = OwnedListMeta::default();
    let mut items = Vec::new();
    for field in Fields::new(raw, "List") {
        let field = field?;
        match field.number {
            1 => read_list_meta(field.bytes("List.metadata")?, &mut meta)?,
            2 => items.push(field.bytes("List.items")?),
            _ => {}
        }
    }
    Ok((meta, items))
}

/// Merges a ListMeta message into `meta` (as protobuf merges a message written twice).
fn read_list_meta(bytes: &[u8], meta: &mut OwnedListMeta) -> Result<(), ProtoError> {
    for f in Fields::new(bytes, "ListMeta") {
        let f = f?;
        match f.number {
            2 => meta.resource_version = f.str("ListMeta.resourceVersion")?.to_owned(),
            3 => meta.continue_token = f.str("ListMeta.continue")?.to_owned(),
            4 => meta.remaining_item_count = Some(f.varint("ListMeta.remainingItemCount")? as i64),
            _ => {}
        }
    }
    Ok(())
}

/// Bytes of the ListMeta message with this `selfLink`.
pub(super) fn list_meta_len(self_link: &str, meta: &ListMeta<'_>) -> usize {
    len_field_len(1, self_link.len())
        + len_field_len(2, meta.resource_version.len())
        + len_field_len(3, meta.continue_token.len())
        + meta
            .remaining_item_count
            .map_or(0, |n| varint_field_len(4, n as u64))
}

/// Writes the ListMeta message's fields (not its own key and length).
pub(super) fn put_list_meta(self_link: &str, meta: &ListMeta<'_>, out: &mut impl BufMut) {
    put_bytes_field(out, 1, self_link.as_bytes());
    put_bytes_field(out, 2, meta.resource_version.as_bytes());
    put_bytes_field(out, 3, meta.continue_token.as_bytes());
    if let Some(n) = meta.remaining_item_count {
        put_varint_field(out, 4, n as u64);
    }
}

/// Bytes of one encoded `items` field around an object message of `item_len` bytes: what
/// [`write_list_item`] writes. Summed over the items, it is the `items_len` of
/// [`write_list_head`].
pub fn list_item_len(item_len: usize) -> usize {
    len_field_len(2, item_len)
}

/// Bytes of the list message (ListMeta and items), the `raw` of the list's envelope.
fn list_message_len(meta: &ListMeta<'_>, items_len: usize) -> usize {
    len_field_len(1, list_meta_len("", meta)) + items_len
}

/// Bytes of a whole list body (head, items, tail) whose items take `items_len` bytes (the sum
/// of [`list_item_len`]): its Content-Length.
pub fn list_body_len(
    api_version: &str,
    list_kind: &str,
    meta: &ListMeta<'_>,
    items_len: usize,
) -> usize {
    envelope_len(api_version, list_kind, list_message_len(meta, items_len))
}

/// Writes a list body up to its first item: the envelope's magic and TypeMeta (`list_kind`
/// is e.g. `ConfigMapList`), the list message's key and length, and the ListMeta.
/// `items_len` is the sum of [`list_item_len`] over the items that will follow; a wrong sum
/// makes a body clients cannot read.
pub fn write_list_head(
    api_version: &str,
    list_kind: &str,
    meta: &ListMeta<'_>,
    items_len: usize,
    out: &mut BytesMut,
) {
    let meta_len = list_meta_len("", meta);
    // The head, and the tail's four bytes with it.
    out.reserve(list_body_len(api_version, list_kind, meta, items_len) - items_len);
    put_envelope_head(
        api_version,
        list_kind,
        list_message_len(meta, items_len),
        out,
    );
    put_len_head(out, 1, meta_len);
    put_list_meta("", meta, out);
}

/// Writes one item of a list: the bare object message (as kcache keeps it, the `raw` of the
/// object's envelope) as an `items` field, [`list_item_len`] bytes.
pub fn write_list_item(item: &[u8], out: &mut BytesMut) {
    out.reserve(list_item_len(item.len()));
    put_bytes_field(out, 2, item);
}

/// Writes the end of a list body, after its last item: the envelope's empty
/// `contentEncoding` and `contentType`.
pub fn write_list_tail(out: &mut BytesMut) {
    put_envelope_tail(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_envelope;

    fn build(meta: &ListMeta<'_>, items: &[&[u8]]) -> BytesMut {
        let items_len = items.iter().map(|i| list_item_len(i.len())).sum();
        let mut out = BytesMut::new();
        write_list_head("v1", "ConfigMapList", meta, items_len, &mut out);
        for item in items {
            write_list_item(item, &mut out);
        }
        write_list_tail(&mut out);
        assert_eq!(
            out.len(),
            list_body_len("v1", "ConfigMapList", meta, items_len)
        );
        out
    }

    #[test]
    fn empty_list_and_round_trip() {
        let meta = ListMeta {
            resource_version: "42",
            ..ListMeta::default()
        };
        let body = build(&meta, &[]);
        let env = parse_envelope(&body).unwrap();
        assert_eq!(env.kind, "ConfigMapList");
        // ListMeta with selfLink, resourceVersion and continue, nothing else.
        assert_eq!(env.raw, b"\x0a\x08\x0a\x00\x12\x0242\x1a\x00");
        let (m, items) = parse_list(env.raw).unwrap();
        assert_eq!(m.as_list_meta(), meta);
        assert!(items.is_empty());
    }

    #[test]
    fn remaining_item_count_zero_and_negative_are_written() {
        for n in [0i64, 7, -1] {
            let meta = ListMeta {
                resource_version: "1",
                continue_token: "tok",
                remaining_item_count: Some(n),
            };
            let big = vec![7u8; 300];
            let body = build(&meta, &[b"\x0a\x00", &big]);
            let (m, items) = parse_list(parse_envelope(&body).unwrap().raw).unwrap();
            assert_eq!(m.as_list_meta(), meta);
            assert_eq!(items, [&b"\x0a\x00"[..], &big[..]]);
        }
    }
}
