//! Status objects as protobuf (rule E9: errors to a protobuf client are protobuf too), from
//! the JSON form kcache's `ApiError::to_status` builds, so that the messages and details are
//! decided in one place for both encodings.
//!
//! `Status { metadata ListMeta(1), status(2), message(3), reason(4), details(5),
//! code(6) int32 }`; `details` is a pointer (written only when the JSON has it, even `{}`):
//! `StatusDetails { name(1), group(2), kind(3), causes(4) repeated, retryAfterSeconds(5)
//! int32, uid(6) }`, each cause `StatusCause { type(1), message(2), field(3) }` (`type` is
//! `reason` in JSON). Strings and ints are always written, empty or zero.

use bytes::BufMut;
use serde_json::Value;

use super::envelope::{envelope_len, put_envelope_head, put_envelope_tail};
use super::list::{list_meta_len, put_list_meta, ListMeta};
use super::watch::{frame_len_around, put_event_head};
use super::wire::varint_field_len;
use super::wire::{len_field_len, put_bytes_field, put_len_head, put_varint_field};

/// The string at `key` of a JSON object, `""` when absent (Go's zero value).
fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// An int32 field at `key` as its varint: Go sign-extends int32 to 64 bits.
fn int32(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0) as i32 as i64 as u64
}

/// The causes of a details object (none when absent).
fn causes(details: &Value) -> impl Iterator<Item = &Value> {
    details
        .get("causes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Bytes of a StatusCause message.
fn cause_len(c: &Value) -> usize {
    len_field_len(1, text(c, "reason").len())
        + len_field_len(2, text(c, "message").len())
        + len_field_len(3, text(c, "field").len())
}

/// Bytes of a StatusDetails message.
fn details_len(d: &Value) -> usize {
    len_field_len(1, text(d, "name").len())
        + len_field_len(2, text(d, "group").len())
        + len_field_len(3, text(d, "kind").len())
        + causes(d)
            .map(|c| len_field_len(4, cause_len(c)))
            .sum::<usize>()
        + varint_field_len(5, int32(d, "retryAfterSeconds"))
        + len_field_len(6, text(d, "uid").len())
}

/// A Status's `metadata` as a ListMeta, and its `selfLink`.
fn metadata(status: &Value) -> (&str, ListMeta<'_>) {
    let m = status.get("metadata").unwrap_or(&Value::Null);
    let meta = ListMeta {
        resource_version: text(m, "resourceVersion"),
        continue_token: text(m, "continue"),
        remaining_item_count: m.get("remainingItemCount").and_then(Value::as_i64),
    };
    (text(m, "selfLink"), meta)
}

/// The `details` of a Status, if set (JSON `null` counts as unset, as in Go).
fn details(status: &Value) -> Option<&Value> {
    status.get("details").filter(|d| !d.is_null())
}

/// Bytes of the Status message.
fn status_len(status: &Value) -> usize {
    let (self_link, meta) = metadata(status);
    len_field_len(1, list_meta_len(self_link, &meta))
        + len_field_len(2, text(status, "status").len())
        + len_field_len(3, text(status, "message").len())
        + len_field_len(4, text(status, "reason").len())
        + details(status).map_or(0, |d| len_field_len(5, details_len(d)))
        + varint_field_len(6, int32(status, "code"))
}

/// Writes the Status message's fields.
fn put_status(status: &Value, out: &mut impl BufMut) {
    let (self_link, meta) = metadata(status);
    put_len_head(out, 1, list_meta_len(self_link, &meta));
    put_list_meta(self_link, &meta, out);
    for (n, key) in [(2, "status"), (3, "message"), (4, "reason")] {
        put_bytes_field(out, n, text(status, key).as_bytes());
    }
    if let Some(d) = details(status) {
        put_len_head(out, 5, details_len(d));
        for (n, key) in [(1, "name"), (2, "group"), (3, "kind")] {
            put_bytes_field(out, n, text(d, key).as_bytes());
        }
        for c in causes(d) {
            put_len_head(out, 4, cause_len(c));
            for (n, key) in [(1, "reason"), (2, "message"), (3, "field")] {
                put_bytes_field(out, n, text(c, key).as_bytes());
            }
        }
        put_varint_field(out, 5, int32(d, "retryAfterSeconds"));
        put_bytes_field(out, 6, text(d, "uid").as_bytes());
    }
    put_varint_field(out, 6, int32(status, "code"));
}

/// The envelope's TypeMeta of a Status: from the JSON, `v1` / `Status` if it has none.
fn type_meta(status: &Value) -> (&str, &str) {
    let api_version = match text(status, "apiVersion") {
        "" => "v1",
        v => v,
    };
    let kind = match text(status, "kind") {
        "" => "Status",
        k => k,
    };
    (api_version, kind)
}

/// A Status (the JSON value of kcache's `ApiError::to_status`) as a protobuf body, envelope
/// included, byte for byte as the apiserver sends its errors to protobuf clients (the 404 and
/// 406 recordings).
pub fn status_envelope(status: &Value) -> Vec<u8> {
    let (api_version, kind) = type_meta(status);
    let raw_len = status_len(status);
    let mut out = Vec::with_capacity(envelope_len(api_version, kind, raw_len));
    put_status_envelope(status, raw_len, &mut out);
    out
}

/// Writes [`status_envelope`], whose Status message takes `raw_len` bytes.
fn put_status_envelope(status: &Value, raw_len: usize, out: &mut impl BufMut) {
    let (api_version, kind) = type_meta(status);
    put_envelope_head(api_version, kind, raw_len, out);
    put_status(status, out);
    put_envelope_tail(out);
}

/// A Status as the `ERROR` frame of a protobuf watch stream (length prefix included), as the
/// apiserver ends a watch it cannot serve (the 410 recording).
pub fn status_watch_event(status: &Value) -> Vec<u8> {
    let (api_version, kind) = type_meta(status);
    let raw_len = status_len(status);
    let env_len = envelope_len(api_version, kind, raw_len);
    let mut out = Vec::with_capacity(frame_len_around("ERROR", env_len));
    put_event_head("ERROR", env_len, &mut out);
    put_status_envelope(status, raw_len, &mut out);
    out
}
