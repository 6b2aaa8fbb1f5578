//! The envelope of every Kubernetes protobuf body (rule E9): the magic `k8s\0`, then a
//! `runtime.Unknown { typeMeta(1) { apiVersion(1), kind(2) }, raw(2), contentEncoding(3),
//! contentType(4) }` whose `raw` is the object's own message.
//!
//! Go writes `contentEncoding` and `contentType` even when empty (`1a 00 22 00` closes every
//! envelope of the recordings), so the writer does too.

use bytes::{BufMut, BytesMut};

use super::wire::{len_field_len, put_bytes_field, put_len_head, Fields};
use super::ProtoError;

/// The four bytes every Kubernetes protobuf body (and every watch event's object) starts
/// with, before the `runtime.Unknown`.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// The closing fields of a `runtime.Unknown` as Go writes them: `contentEncoding` (3) and
/// `contentType` (4), both empty.
const UNKNOWN_TAIL: [u8; 4] = [0x1a, 0x00, 0x22, 0x00];

/// A parsed envelope: the object's type and its message, borrowed from the body.
///
/// kcache keeps objects as the upstream's `raw` bytes and only needs the type to put them
/// back into envelopes of its own (a list item is bare, a GET or a watch event enveloped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// `apiVersion` of the TypeMeta (`v1`, `apps/v1`).
    pub api_version: &'a str,
    /// `kind` of the TypeMeta (`ConfigMap`, `ConfigMapList`, `Status`).
    pub kind: &'a str,
    /// The object's message, without envelope (the `runtime.Unknown`'s `raw`).
    pub raw: &'a [u8],
}

/// Parses a protobuf body: the magic, then the `runtime.Unknown`.
///
/// Fields kcache does not know are skipped; `contentType` is ignored (the apiserver leaves it
/// empty; it would only repeat the body's media type). A body with a `contentEncoding` is
/// refused with [`ProtoError::ContentEncoding`]: its `raw` would not be the object.
pub fn parse_envelope(bytes: &[u8]) -> Result<Envelope<'_>, ProtoError> {
    let Some(unknown) = bytes.strip_prefix(&MAGIC) else {
        return Err(if MAGIC.starts_with(bytes) {
            ProtoError::Truncated("envelope magic")
        } else {
            ProtoError::BadMagic
        });
    };
    let mut env = Envelope {
        api_version: "",
        kind: "",
        raw: &[],
    };
    for field in Fields::new(unknown, "runtime.Unknown") {
        let field = field?;
        match field.number {
            1 => {
                // An embedded message written twice would be merged; do the same.
                for f in Fields::new(field.bytes("runtime.Unknown.typeMeta")?, "TypeMeta") {
                    let f = f?;
                    match f.number {
                        1 => env.api_version = f.str("TypeMeta.apiVersion")?,
                        2 => env.kind = f.str("TypeMeta.kind")?,
                        _ => {}
                    }
                }
            }
            2 => env.raw = field.bytes("runtime.Unknown.raw")?,
            3 => {
                let encoding = field.bytes("runtime.Unknown.contentEncoding")?;
                if !encoding.is_empty() {
                    return Err(ProtoError::ContentEncoding(
                        String::from_utf8_lossy(encoding).into_owned(),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(env)
}

/// Bytes of the TypeMeta message.
fn type_meta_len(api_version: &str, kind: &str) -> usize {
    len_field_len(1, api_version.len()) + len_field_len(2, kind.len())
}

/// Bytes of an envelope around `raw_len` bytes of object: magic, `runtime.Unknown` with its
/// TypeMeta, raw, and the empty `contentEncoding` and `contentType`. What
/// [`write_envelope`] writes, to be known before (a Content-Length, a list's item lengths).
pub fn envelope_len(api_version: &str, kind: &str, raw_len: usize) -> usize {
    MAGIC.len()
        + len_field_len(1, type_meta_len(api_version, kind))
        + len_field_len(2, raw_len)
        + UNKNOWN_TAIL.len()
}

/// Writes the envelope of an object (or list) whose message is `raw`, as the apiserver does
/// for a GET, a list, or a watch event's object: [`envelope_len`] bytes.
pub fn write_envelope(api_version: &str, kind: &str, raw: &[u8], out: &mut BytesMut) {
    out.reserve(envelope_len(api_version, kind, raw.len()));
    put_envelope(api_version, kind, raw, out);
}

/// [`write_envelope`] into any buffer (a `Vec` for the one-off Status bodies).
pub(super) fn put_envelope(api_version: &str, kind: &str, raw: &[u8], out: &mut impl BufMut) {
    put_envelope_head(api_version, kind, raw.len(), out);
    out.put_slice(raw);
    put_envelope_tail(out);
}

/// Everything of an envelope before the `raw_len` bytes of the object: magic, TypeMeta, and
/// the key and length of `raw`. The object and [`put_envelope_tail`] follow.
pub(super) fn put_envelope_head(
    api_version: &str,
    kind: &str,
    raw_len: usize,
    out: &mut impl BufMut,
) {
    out.put_slice(&MAGIC);
    put_len_head(out, 1, type_meta_len(api_version, kind));
    put_bytes_field(out, 1, api_version.as_bytes());
    put_bytes_field(out, 2, kind.as_bytes());
    put_len_head(out, 2, raw_len);
}

/// The fields of the `runtime.Unknown` after `raw`: empty `contentEncoding` and
/// `contentType`.
pub(super) fn put_envelope_tail(out: &mut impl BufMut) {
    out.put_slice(&UNKNOWN_TAIL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_length() {
        let mut out = BytesMut::new();
        write_envelope("apps/v1", "Deployment", b"\x0a\x00", &mut out);
        assert_eq!(out.len(), envelope_len("apps/v1", "Deployment", 2));
        assert_eq!(&out[..4], b"k8s\0");
        assert_eq!(&out[out.len() - 4..], &[0x1a, 0, 0x22, 0]);
        let env = parse_envelope(&out).unwrap();
        assert_eq!(
            env,
            Envelope {
                api_version: "apps/v1",
                kind: "Deployment",
                raw: b"\x0a\x00"
            }
        );
    }

    #[test]
    fn long_raw_takes_a_longer_length() {
        let raw = vec![0u8; 20_000];
        let mut out = BytesMut::new();
        write_envelope("v1", "ConfigMap", &raw, &mut out);
        assert_eq!(out.len(), envelope_len("v1", "ConfigMap", raw.len()));
        assert_eq!(parse_envelope(&out).unwrap().raw.len(), 20_000);
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        assert_eq!(
            parse_envelope(b"{\"kind\"").unwrap_err(),
            ProtoError::BadMagic
        );
        assert_eq!(
            parse_envelope(b"k8").unwrap_err(),
            ProtoError::Truncated("envelope magic")
        );
        assert_eq!(
            parse_envelope(b"k8s\0\x12\x05ab").unwrap_err(),
            ProtoError::Truncated("runtime.Unknown")
        );
        // A gzip contentEncoding: raw is not the object.
        let mut body = b"k8s\0".to_vec();
        put_bytes_field(&mut body, 2, b"xx");
        put_bytes_field(&mut body, 3, b"gzip");
        assert_eq!(
            parse_envelope(&body).unwrap_err(),
            ProtoError::ContentEncoding("gzip".into())
        );
        // A contentType is ignored, unknown fields skipped.
        let mut body = b"k8s\0".to_vec();
        put_bytes_field(&mut body, 2, b"xx");
        put_bytes_field(&mut body, 4, b"application/vnd.kubernetes.protobuf");
        put_bytes_field(&mut body, 9, b"future");
        assert_eq!(parse_envelope(&body).unwrap().raw, b"xx");
    }
}
