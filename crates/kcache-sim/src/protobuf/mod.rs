//! Kubernetes protobuf, as kube-apiserver v1.28.7 writes it (rule E9 of `docs/semantics.md`,
//! the `protobuf-*` recordings): content negotiation, an encoder from the stored JSON to
//! each kind's message, and what goes around objects (the `k8s\0` envelope, lists, watch
//! frames, Status errors).
//!
//! * **Negotiation** ([`negotiate`]): the client's most preferred acceptable media type wins,
//!   in the order of its `Accept` (q-values respected). `application/vnd.kubernetes.protobuf`
//!   (with or without `;stream=watch`) is acceptable for built-in kinds; custom resources
//!   have no protobuf form, so `protobuf, application/json` gets JSON and protobuf alone a
//!   406 (whose Status body is itself protobuf, as recorded). Errors are protobuf Status
//!   objects whenever the client prefers protobuf, whatever the resource.
//!   A protobuf clause asking for `as=PartialObjectMetadataList` (`g=meta.k8s.io;v=v1`) is
//!   answered in protobuf on a LIST, for built-in kinds and custom resources alike, as the
//!   apiserver does (the `meta.k8s.io` kinds have a protobuf form whatever the object's);
//!   other protobuf clauses asking for another form (`as=Table`, `as=PartialObjectMetadata`)
//!   are skipped, and the JSON ones are answered as the `metadata` module says.
//! * **Objects** ([`encode_object`], cached per stored object version): the stored JSON walked along a hand-written schema
//!   table (`schema.txt`: per message, JSON name, field number, type, pointer or not, from
//!   upstream's `generated.proto` and Go types), written as Go's gogo-protobuf marshallers
//!   do (see `encode.rs`). Covered kinds: core/v1 ConfigMap, Secret, Namespace, Pod,
//!   Service, Node, ServiceAccount, Event, Endpoints (and Status for errors); apps/v1
//!   Deployment, ReplicaSet, StatefulSet, DaemonSet; batch/v1 Job; discovery.k8s.io/v1
//!   EndpointSlice: every built-in type the sim serves. Other built-in kinds (one
//!   registered with [`crate::Sim::register`]) have no schema, so they are JSON.
//! * **Never guessing**: an object with a JSON field the schema does not have (or of the
//!   wrong JSON type), or a built-in kind without schema, has no protobuf form here, and the
//!   request is answered in JSON, even to a client that accepts only protobuf: a GET of it,
//!   a list containing it, a watch whose initial state or replay contains it (the whole
//!   stream is JSON). A watch already streaming
//!   protobuf that meets such an event ends (the client re-watches from its last
//!   resourceVersion, and that watch replays the event, so it gets JSON). A real apiserver
//!   never does this (it drops unknown fields when it decodes); a client asking for
//!   protobuf must treat a JSON answer as "no protobuf here", which kcache does.
//! * **Metadata lists** ([`encode_partial_metadata`], [`metadata_list_body`]): a
//!   `meta.k8s.io/v1` `PartialObjectMetadataList { metadata ListMeta = 1, items = 2 }` whose
//!   items are `PartialObjectMetadata { metadata ObjectMeta = 1 }`, the ObjectMeta written as
//!   the object's own encoding writes it. An object whose metadata the schema cannot encode
//!   makes the list JSON, as for the full form.
//! * **Envelopes**: `k8s\0` + `runtime.Unknown { typeMeta { apiVersion = 1, kind = 2 } = 1,
//!   raw = 2, contentEncoding = 3, contentType = 4 }`, the last two always written empty.
//!   Lists: `XxxList { metadata ListMeta = 1, items = 2 }` with bare item messages. Watch
//!   frames: a 4-byte big-endian length, then a bare (not enveloped)
//!   `WatchEvent { type = 1, object RawExtension { raw = 1 } = 2 }` whose `raw` is the
//!   object's own `k8s\0` envelope. BOOKMARKs and ERRORs go through the same encoder.
//! * **gzip**: protobuf bodies over 128 KiB to clients sending `Accept-Encoding: gzip` are
//!   gzipped (rule E8, `gzip-protobuf-list-cm-ns-c-big`); watches never. The stream is
//!   flate2's, not Go's: the bytes differ from a recording, the content does not. (The sim's
//!   JSON bodies are not compressed, as before this module.)
//!
//! Limits: request bodies must be JSON (a protobuf body is a 400); Table and
//! PartialObjectMetadata answers of a GET or WATCH, discovery and the
//! CustomResourceDefinition objects stay JSON; quantities are written as stored (the apiserver canonicalises them, the sim's JSON
//! does not either).

mod encode;
mod schema;
mod wire;

pub use encode::{encode_partial_metadata, Unencodable};

use super::encode::J;
use super::metadata::{self, Form};
use super::types::ResourceType;
use bytes::Bytes;
use serde_json::Value;
use wire::{put_bytes_field, put_len_head, put_varint_field};

/// The media type of protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The `Content-Type` of a protobuf watch, exactly as the apiserver writes it.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The magic before every `runtime.Unknown`.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Bodies over this many bytes are gzipped for clients that accept it (rule E8).
pub const GZIP_THRESHOLD: usize = 128 * 1024;

/// The encoding of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    Json,
    Protobuf,
}

/// The encoding and form the apiserver picks for `accept`: the client's most preferred
/// media type the server can produce; protobuf only when `protobuf_ok` (a built-in kind).
/// None: nothing acceptable (406). No `Accept` at all is JSON.
///
/// JSON clauses may ask for the PartialObjectMetadata forms (see
/// [`metadata::clause_form`]). A protobuf clause asking for `PartialObjectMetadataList` is
/// acceptable whatever `protobuf_ok` says (the list kind has its own protobuf form); other
/// protobuf clauses asking for another form (`as=...`) are skipped: the sim has no protobuf
/// Table or single PartialObjectMetadata, and the clients that ask for them list the JSON
/// form next.
pub fn negotiate(accept: Option<&str>, protobuf_ok: bool) -> Option<(Media, Form)> {
    pick(accept, protobuf_ok, true)
}

/// The encoding of an error response: as [`negotiate`], but a clause asking for another form
/// is never acceptable for a Status. None: the apiserver writes the Status as indented JSON
/// (`err-pom-list-wrong-as`, whose only clause is `as=PartialObjectMetadata`).
pub fn negotiate_error(accept: Option<&str>) -> Option<Media> {
    pick(accept, true, false).map(|(media, _)| media)
}

fn pick(accept: Option<&str>, protobuf_ok: bool, transforms: bool) -> Option<(Media, Form)> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some((Media::Json, Form::Object));
    };
    let mut clauses: Vec<(f32, &str, Vec<&str>)> = accept
        .split(',')
        .map(|clause| {
            let mut parts = clause.split(';');
            let media = parts.next().unwrap_or("").trim();
            let params: Vec<&str> = parts.map(str::trim).collect();
            let q = params
                .iter()
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (q, media, params)
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    // Stable: equal q keeps the client's order.
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, media, params) in clauses {
        let other_form = params.iter().any(|p| p.starts_with("as="));
        match media.to_ascii_lowercase().as_str() {
            "" | "*/*" | "application/*" | "application/json" => {
                match metadata::clause_form(&params) {
                    Some(Form::Object) => return Some((Media::Json, Form::Object)),
                    Some(form) if transforms => return Some((Media::Json, form)),
                    _ => {}
                }
            }
            "application/vnd.kubernetes.protobuf" if !other_form && protobuf_ok => {
                return Some((Media::Protobuf, Form::Object))
            }
            "application/vnd.kubernetes.protobuf"
                if transforms && metadata::clause_form(&params) == Some(Form::MetadataList) =>
            {
                return Some((Media::Protobuf, Form::MetadataList))
            }
            _ => {}
        }
    }
    None
}

/// Whether `rt` has a protobuf form here: a built-in kind the schema covers.
pub fn kind_supported(rt: &ResourceType) -> bool {
    const GROUPS: [&str; 4] = ["", "apps", "batch", "discovery.k8s.io"];
    !rt.custom
        && GROUPS.contains(&rt.group.as_str())
        && rt.version == "v1"
        && schema::message(&rt.kind).is_some()
}

/// The bare message of an object of type `rt`, or why it has none.
pub fn encode_object(rt: &ResourceType, obj: &Value) -> Result<Vec<u8>, Unencodable> {
    if !kind_supported(rt) {
        return Err(Unencodable(format!("{} has no protobuf schema", rt.kind)));
    }
    encode::encode_object(&rt.kind, obj)
}

/// Appends `k8s\0` + the `runtime.Unknown` around `raw`.
pub fn put_envelope(api_version: &str, kind: &str, raw: &[u8], out: &mut Vec<u8>) {
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    put_bytes_field(&mut type_meta, 1, api_version.as_bytes());
    put_bytes_field(&mut type_meta, 2, kind.as_bytes());
    out.extend_from_slice(MAGIC);
    put_bytes_field(out, 1, &type_meta);
    put_bytes_field(out, 2, raw);
    put_bytes_field(out, 3, b"");
    put_bytes_field(out, 4, b"");
}

/// An object's envelope.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + kind.len() + api_version.len() + 16);
    put_envelope(api_version, kind, raw, &mut out);
    out
}

/// The ListMeta of a list.
pub struct ListMeta<'a> {
    pub resource_version: &'a str,
    pub continue_token: &'a str,
    pub remaining_item_count: Option<i64>,
}

/// A list body: the envelope of `XxxList { metadata, items }`, each item a bare message.
pub fn list_body(rt: &ResourceType, meta: &ListMeta<'_>, items: &[&[u8]]) -> Vec<u8> {
    list_body_of(&rt.api_version(), &format!("{}List", rt.kind), meta, items)
}

/// A `meta.k8s.io/v1` PartialObjectMetadataList body, each item a bare
/// `PartialObjectMetadata` message (see [`encode_partial_metadata`]).
pub fn metadata_list_body(meta: &ListMeta<'_>, items: &[&[u8]]) -> Vec<u8> {
    list_body_of(
        metadata::API_VERSION,
        "PartialObjectMetadataList",
        meta,
        items,
    )
}

fn list_body_of(api_version: &str, kind: &str, meta: &ListMeta<'_>, items: &[&[u8]]) -> Vec<u8> {
    let mut lm = Vec::with_capacity(64);
    put_bytes_field(&mut lm, 1, b"");
    put_bytes_field(&mut lm, 2, meta.resource_version.as_bytes());
    put_bytes_field(&mut lm, 3, meta.continue_token.as_bytes());
    if let Some(n) = meta.remaining_item_count {
        put_varint_field(&mut lm, 4, n as u64);
    }
    let size: usize = items.iter().map(|i| i.len() + 6).sum::<usize>() + lm.len() + 8;
    let mut list = Vec::with_capacity(size);
    put_bytes_field(&mut list, 1, &lm);
    for it in items {
        put_bytes_field(&mut list, 2, it);
    }
    envelope(api_version, kind, &list)
}

/// One watch frame: the 4-byte big-endian length, then `WatchEvent { type, object:
/// RawExtension { raw = envelope } }`.
pub fn watch_frame(event_type: &str, envelope: &[u8]) -> Bytes {
    let mut raw_ext = Vec::with_capacity(envelope.len() + 6);
    put_bytes_field(&mut raw_ext, 1, envelope);
    let mut ev = Vec::with_capacity(raw_ext.len() + event_type.len() + 12);
    ev.extend_from_slice(&[0; 4]);
    put_bytes_field(&mut ev, 1, event_type.as_bytes());
    put_len_head(&mut ev, 2, raw_ext.len());
    ev.extend_from_slice(&raw_ext);
    let len = u32::try_from(ev.len() - 4).unwrap_or(u32::MAX);
    ev[..4].copy_from_slice(&len.to_be_bytes());
    Bytes::from(ev)
}

/// A `metav1.Status` (as the sim builds it in JSON) in its protobuf envelope.
pub fn status_body(status: &J) -> Vec<u8> {
    let mut json = Vec::new();
    status.write(&mut json);
    let value: Value = serde_json::from_slice(&json).unwrap_or(Value::Null);
    // The schema has every field the sim's Status has; an empty message is the fallback
    // should it ever not.
    let raw = encode::encode_object("Status", &value).unwrap_or_default();
    envelope("v1", "Status", &raw)
}

/// An ERROR watch frame carrying a Status.
pub fn status_frame(status: &J) -> Bytes {
    watch_frame("ERROR", &status_body(status))
}

/// Gzip (for bodies over [`GZIP_THRESHOLD`]).
pub fn gzip(body: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 2),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests;
