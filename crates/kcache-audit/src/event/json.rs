//! An event's JSON, byte for byte as the apiserver's log and webhook backends write it.
//!
//! The apiserver encodes an audit.k8s.io/v1 `Event` with Go's `encoding/json`, which fixes:
//! - the fields in the Go struct's order (`kind` and `apiVersion` first), those marked
//!   `omitempty` left out when empty, `responseStatus.metadata` always `{}` (an empty struct
//!   is never omitted);
//! - maps (`annotations`, `user.extra`) sorted by key;
//! - times as meta/v1 `MicroTime`: RFC 3339 in UTC with six fractional digits;
//! - strings escaped with `\u003c`, `\u003e`, `\u0026` for `<`, `>`, `&` and `\u2028`,
//!   `\u2029` for the line and paragraph separators, on top of JSON's own escapes;
//! - the embedded request and response objects compacted, with the same escaping inside
//!   their strings.
//!
//! Written by hand into a reused buffer: a derived `Serialize` would take a detour through
//! serde's data model for every field, and none of it would produce Go's escaping.

use std::io::Write as _;
use std::net::IpAddr;
use std::time::SystemTime;

use serde::de::IgnoredAny;
use serde_json::Value;

use super::{Event, ObjectRef, ResponseStatus, UserInfo};
use crate::policy::Level;

/// The head every event starts with.
const EVENT_HEAD: &[u8] = br#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"#;

/// The head of the list a webhook is sent; the items follow.
const LIST_HEAD: &[u8] =
    br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#;

pub(super) fn write_event(e: &Event, out: &mut Vec<u8>) {
    let r = &*e.request;
    out.extend_from_slice(EVENT_HEAD);
    write_str(out, r.level.as_str());
    out.extend_from_slice(br#","auditID":"#);
    write_audit_id(out, r);
    out.extend_from_slice(br#","stage":"#);
    write_str(out, e.stage.as_str());
    out.extend_from_slice(br#","requestURI":"#);
    write_str(out, &r.request_uri);
    out.extend_from_slice(br#","verb":"#);
    write_str(out, &r.verb);
    out.extend_from_slice(br#","user":"#);
    write_user(out, &r.user);
    if let Some(user) = &r.impersonated_user {
        out.extend_from_slice(br#","impersonatedUser":"#);
        write_user(out, user);
    }
    if !r.source_ips.is_empty() {
        out.extend_from_slice(br#","sourceIPs":["#);
        for (i, ip) in r.source_ips.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_ip(out, *ip);
        }
        out.push(b']');
    }
    if !r.user_agent.is_empty() {
        out.extend_from_slice(br#","userAgent":"#);
        write_str(out, &r.user_agent);
    }
    if let Some(object_ref) = &r.object_ref {
        out.extend_from_slice(br#","objectRef":"#);
        write_object_ref(out, object_ref);
    }
    if let Some(status) = &e.response_status {
        out.extend_from_slice(br#","responseStatus":"#);
        write_status(out, status);
    }
    if r.level >= Level::Request {
        if let Some(body) = &e.request_object {
            write_body(out, "requestObject", body, r.omit_managed_fields);
        }
    }
    if r.level >= Level::RequestResponse {
        if let Some(body) = &e.response_object {
            write_body(out, "responseObject", body, r.omit_managed_fields);
        }
    }
    out.extend_from_slice(br#","requestReceivedTimestamp":"#);
    write_micro_time(out, r.received);
    out.extend_from_slice(br#","stageTimestamp":"#);
    write_micro_time(out, e.at);
    if !e.annotations.is_empty() {
        out.extend_from_slice(br#","annotations":"#);
        write_map(out, &e.annotations, |out, v| write_str(out, v));
    }
    out.push(b'}');
}

/// Append an audit.k8s.io/v1 `EventList` of `events` to `out`: the body of one webhook call.
pub(crate) fn write_event_list(events: &[bytes::Bytes], out: &mut Vec<u8>) {
    out.extend_from_slice(LIST_HEAD);
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(e);
    }
    out.extend_from_slice(b"]}");
}

fn write_audit_id(out: &mut Vec<u8>, r: &super::Request) {
    match &r.audit_id.0 {
        super::AuditIdInner::Uuid(u) => {
            let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
            out.push(b'"');
            out.extend_from_slice(u.hyphenated().encode_lower(&mut buf).as_bytes());
            out.push(b'"');
        }
        super::AuditIdInner::Given(s) => write_str(out, s),
    }
}

fn write_user(out: &mut Vec<u8>, u: &UserInfo) {
    let mut fields = Fields::new(out);
    fields.str("username", &u.username);
    fields.str("uid", &u.uid);
    if !u.groups.is_empty() {
        let out = fields.key("groups");
        write_str_array(out, &u.groups);
    }
    if !u.extra.is_empty() {
        let out = fields.key("extra");
        write_map(out, &u.extra, |out, v| write_str_array(out, v));
    }
    fields.end();
}

/// A JSON object of a sorted map's entries (Go writes a map's keys in order), each value
/// written by `value`.
fn write_map<K: AsRef<str>, V>(
    out: &mut Vec<u8>,
    map: &std::collections::BTreeMap<K, V>,
    value: impl Fn(&mut Vec<u8>, &V),
) {
    out.push(b'{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, k.as_ref());
        out.push(b':');
        value(out, v);
    }
    out.push(b'}');
}

fn write_object_ref(out: &mut Vec<u8>, o: &ObjectRef) {
    let mut fields = Fields::new(out);
    fields.str("resource", &o.resource);
    fields.str("namespace", &o.namespace);
    fields.str("name", &o.name);
    fields.str("uid", &o.uid);
    fields.str("apiGroup", &o.api_group);
    fields.str("apiVersion", &o.api_version);
    fields.str("resourceVersion", &o.resource_version);
    fields.str("subresource", &o.subresource);
    fields.end();
}

fn write_status(out: &mut Vec<u8>, s: &ResponseStatus) {
    // ListMeta is a struct, which Go's `omitempty` never leaves out.
    out.extend_from_slice(br#"{"metadata":{}"#);
    if !s.status.is_empty() {
        out.extend_from_slice(br#","status":"#);
        write_str(out, &s.status);
    }
    if !s.message.is_empty() {
        out.extend_from_slice(br#","message":"#);
        write_str(out, &s.message);
    }
    if !s.reason.is_empty() {
        out.extend_from_slice(br#","reason":"#);
        write_str(out, &s.reason);
    }
    if let Some(details) = &s.details {
        out.extend_from_slice(br#","details":"#);
        write_compact(out, details.as_bytes());
    }
    if s.code != 0 {
        out.extend_from_slice(br#","code":"#);
        write_u64(out, u64::from(s.code));
    }
    out.push(b'}');
}

/// A request or response body under `key`, compacted; without `metadata.managedFields` (its
/// own, and each list item's) when `omit_managed_fields`. A body that is not JSON (a
/// protobuf answer) is left out: the line must stay one JSON object.
fn write_body(out: &mut Vec<u8>, key: &str, body: &[u8], omit_managed_fields: bool) {
    if omit_managed_fields {
        let Ok(mut value) = serde_json::from_slice::<Value>(body) else {
            tracing::debug!(key, "audit: a body that is not JSON is left out");
            return;
        };
        strip_managed_fields(&mut value);
        let Ok(text) = serde_json::to_vec(&value) else {
            return;
        };
        push_key(out, key);
        write_compact(out, &text);
    } else {
        if serde_json::from_slice::<IgnoredAny>(body).is_err() {
            tracing::debug!(key, "audit: a body that is not JSON is left out");
            return;
        }
        push_key(out, key);
        write_compact(out, body);
    }
}

/// Remove `metadata.managedFields` from an object, or from each item of a list, as the
/// apiserver does for a rule with `omitManagedFields`. Keys keep their order (serde_json's
/// `preserve_order`, with a shifting remove).
fn strip_managed_fields(value: &mut Value) {
    fn strip_one(object: &mut Value) {
        if let Some(Value::Object(meta)) = object.get_mut("metadata") {
            meta.shift_remove("managedFields");
        }
    }
    strip_one(value);
    if let Some(Value::Array(items)) = value.get_mut("items") {
        items.iter_mut().for_each(strip_one);
    }
}

fn push_key(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
}

/// Writes an object whose fields are all `omitempty`: commas between the fields present.
struct Fields<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Fields<'a> {
    fn new(out: &'a mut Vec<u8>) -> Fields<'a> {
        out.push(b'{');
        Fields { out, first: true }
    }

    /// Start a field: its key; the caller writes the value.
    fn key(&mut self, key: &str) -> &mut Vec<u8> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    /// A string field, left out when empty.
    fn str(&mut self, key: &str, value: &str) {
        if !value.is_empty() {
            let out = self.key(key);
            write_str(out, value);
        }
    }

    fn end(self) {
        self.out.push(b'}');
    }
}

fn write_str_array(out: &mut Vec<u8>, values: &[String]) {
    out.push(b'[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, v);
    }
    out.push(b']');
}

/// An address as Go's `net.IP.String` writes it: IPv4 dotted, IPv6 in RFC 5952's form, and
/// an IPv4-mapped IPv6 address as the IPv4 address.
fn write_ip(out: &mut Vec<u8>, ip: IpAddr) {
    out.push(b'"');
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                write_u64(out, u64::from(octet));
            }
        }
        IpAddr::V6(v6) => {
            // Writing to a Vec cannot fail.
            let _ = write!(out, "{v6}");
        }
    }
    out.push(b'"');
}

fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[start..]);
}

/// `n` in exactly `width` digits, zero-padded (`n` has no more digits than that).
fn write_padded(out: &mut Vec<u8>, mut n: u32, width: usize) {
    let mut buf = [b'0'; 10];
    for slot in buf[..width].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&buf[..width]);
}

/// A meta/v1 `MicroTime`: `"2006-01-02T15:04:05.000000Z"`, the fraction truncated (as Go's
/// time formatting does), in UTC. A time before 1970 (a clock gone wrong) is written as
/// 1970-01-01.
pub(super) fn write_micro_time(out: &mut Vec<u8>, t: SystemTime) {
    let ts = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let ts = ts.max(jiff::Timestamp::UNIX_EPOCH);
    let dt = jiff::tz::Offset::UTC.to_datetime(ts);
    out.push(b'"');
    write_padded(out, dt.year() as u32, 4);
    out.push(b'-');
    write_padded(out, dt.month() as u32, 2);
    out.push(b'-');
    write_padded(out, dt.day() as u32, 2);
    out.push(b'T');
    write_padded(out, dt.hour() as u32, 2);
    out.push(b':');
    write_padded(out, dt.minute() as u32, 2);
    out.push(b':');
    write_padded(out, dt.second() as u32, 2);
    out.push(b'.');
    write_padded(out, dt.subsec_nanosecond() as u32 / 1_000, 6);
    out.extend_from_slice(b"Z\"");
}

/// Which ASCII bytes Go's `encoding/json` escapes in a string (with HTML escaping on, its
/// default): control characters, `"`, `\`, `<`, `>` and `&`.
pub(super) const ESCAPED: [bool; 128] = {
    let mut table = [false; 128];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[b'<' as usize] = true;
    table[b'>' as usize] = true;
    table[b'&' as usize] = true;
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The escape Go writes for an ASCII byte of [`ESCAPED`].
fn push_escape(out: &mut Vec<u8>, b: u8) {
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]),
    }
}

/// Whether `bytes[i..]` starts with U+2028 or U+2029 (E2 80 A8 / E2 80 A9), which Go escapes
/// because JavaScript does not allow them in a string.
fn is_line_separator(bytes: &[u8], i: usize) -> bool {
    bytes[i] == 0xe2
        && bytes.get(i + 1) == Some(&0x80)
        && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9))
}

/// Whether any of the eight bytes of `w` needs a look of its own: an ASCII byte of
/// [`ESCAPED`], or a byte of a multi-byte character (≥ 0x80, which may be U+2028 or
/// U+2029). Exact for "any", with the word tricks of "Bit Twiddling Hacks" (S. E. Anderson):
/// `(x - 0x01…) & !x & 0x80…` is non-zero when a byte of `x` is 0, and
/// `(w - n·0x01…) & !w & 0x80…` when a byte of `w` is below `n` (for `n` ≤ 0x80).
pub(super) fn needs_a_look(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let equal = |c: u8| zero_byte(w ^ (ONES * u64::from(c)));
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let found =
        control | (w & HIGH) | equal(b'"') | equal(b'\\') | equal(b'<') | equal(b'>') | equal(b'&');
    found != 0
}

/// A JSON string with Go's escaping. Runs of bytes that need none are copied at once, and
/// found eight bytes at a time: most strings (names, paths, user agents) need no escape.
pub(super) fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(word) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            if !needs_a_look(word) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        if b < 0x80 {
            if ESCAPED[usize::from(b)] {
                out.extend_from_slice(&bytes[start..i]);
                push_escape(out, b);
                start = i + 1;
            }
            i += 1;
        } else if is_line_separator(bytes, i) {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(if bytes[i + 2] == 0xa8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
            start = i;
        } else {
            i += 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Valid JSON text, compacted (whitespace outside strings dropped) and with Go's HTML and
/// line-separator escapes inside strings: what Go's encoder does to a value that marshals
/// itself (`runtime.Unknown`, the embedded objects). Other escapes are kept as they are.
pub(super) fn write_compact(out: &mut Vec<u8>, json: &[u8]) {
    let mut in_string = false;
    let mut start = 0;
    let mut i = 0;
    while i < json.len() {
        let b = json[i];
        if in_string {
            match b {
                b'\\' => {
                    // The escaped byte is copied as is, whatever it is.
                    i += 2;
                    continue;
                }
                b'"' => in_string = false,
                b'<' | b'>' | b'&' => {
                    out.extend_from_slice(&json[start..i]);
                    push_escape(out, b);
                    start = i + 1;
                }
                0xe2 if is_line_separator(json, i) => {
                    out.extend_from_slice(&json[start..i]);
                    out.extend_from_slice(if json[i + 2] == 0xa8 {
                        b"\\u2028"
                    } else {
                        b"\\u2029"
                    });
                    i += 3;
                    start = i;
                    continue;
                }
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b' ' | b'\t' | b'\n' | b'\r' => {
                    out.extend_from_slice(&json[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.extend_from_slice(&json[start..]);
}
