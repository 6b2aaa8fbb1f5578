//! Protobuf watch streams (rule E9): a sequence of frames, each a 4-byte big-endian length
//! then a `WatchEvent { type(1) string, object(2) RawExtension { raw(1) bytes } }`, where
//! `raw` is the object's whole envelope (`k8s\0`…), not the bare message.

use bytes::{BufMut, BytesMut};

use super::envelope::{envelope_len, parse_envelope, put_envelope, Envelope};
use super::wire::{len_field_len, put_bytes_field, put_len_head, Fields};
use super::ProtoError;

/// Bytes of the length prefix of every frame.
const PREFIX_LEN: usize = 4;

/// One event read from a protobuf watch stream, borrowed from the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchFrame<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub event_type: &'a str,
    /// The event's object (for `ERROR`, a `Status`), in its envelope.
    pub envelope: Envelope<'a>,
}

/// Bytes of the WatchEvent message around an object envelope of `envelope_len` bytes.
fn event_len(event_type: &str, envelope_len: usize) -> usize {
    len_field_len(1, event_type.len()) + len_field_len(2, len_field_len(1, envelope_len))
}

/// Bytes of a whole frame (length prefix included) around an object envelope of
/// `envelope_len` bytes.
pub(super) fn frame_len_around(event_type: &str, envelope_len: usize) -> usize {
    PREFIX_LEN + event_len(event_type, envelope_len)
}

/// Bytes of the whole frame [`write_watch_event`] writes (length prefix included), for an
/// object message of `obj_len` bytes.
pub fn watch_event_len(event_type: &str, api_version: &str, kind: &str, obj_len: usize) -> usize {
    frame_len_around(event_type, envelope_len(api_version, kind, obj_len))
}

/// Writes the frame's length prefix and the WatchEvent up to the envelope's first byte.
///
/// # Panics
///
/// If the event is over 4 GiB, which a frame cannot say (objects are a few MiB at most: the
/// apiserver's own limits).
pub(super) fn put_event_head(event_type: &str, envelope_len: usize, out: &mut impl BufMut) {
    let len = event_len(event_type, envelope_len);
    out.put_u32(u32::try_from(len).expect("a watch event over 4 GiB"));
    put_bytes_field(out, 1, event_type.as_bytes());
    put_len_head(out, 2, len_field_len(1, envelope_len));
    put_len_head(out, 1, envelope_len);
}

/// Writes one frame of a protobuf watch stream: the length prefix, then a WatchEvent of type
/// `event_type` whose object is `obj` (a bare object message, as kcache keeps it) in its
/// envelope: `watch_event_len` bytes.
///
/// # Panics
///
/// If the event is over 4 GiB, which a frame's length prefix cannot say.
pub fn write_watch_event(
    event_type: &str,
    api_version: &str,
    kind: &str,
    obj: &[u8],
    out: &mut BytesMut,
) {
    out.reserve(watch_event_len(event_type, api_version, kind, obj.len()));
    put_event_head(event_type, envelope_len(api_version, kind, obj.len()), out);
    put_envelope(api_version, kind, obj, out);
}

/// The length of the frame at the start of `buf` (its prefix included), once its 4-byte
/// prefix has arrived. A stream reader can refuse a frame over its limit before buffering it.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    let prefix: [u8; PREFIX_LEN] = buf.get(..PREFIX_LEN)?.try_into().ok()?;
    // Saturating: on a 32-bit target a 4 GiB frame must not wrap around to a small one.
    Some((u32::from_be_bytes(prefix) as usize).saturating_add(PREFIX_LEN))
}

/// Reads the frame at the start of `buf`: the event and the bytes it took (prefix included),
/// or `None` while `buf` does not yet hold the whole frame (read more and call again with the
/// same start). Unknown WatchEvent fields are skipped.
pub fn next_frame(buf: &[u8]) -> Result<Option<(WatchFrame<'_>, usize)>, ProtoError> {
    let Some(len) = frame_len(buf) else {
        return Ok(None);
    };
    let Some(event) = buf.get(PREFIX_LEN..len) else {
        return Ok(None);
    };
    let mut event_type = "";
    let mut raw = None;
    for f in Fields::new(event, "WatchEvent") {
        let f = f?;
        match f.number {
            1 => event_type = f.str("WatchEvent.type")?,
            2 => {
                for g in Fields::new(f.bytes("WatchEvent.object")?, "RawExtension") {
                    let g = g?;
                    if g.number == 1 {
                        raw = Some(g.bytes("RawExtension.raw")?);
                    }
                }
            }
            _ => {}
        }
    }
    let raw = raw.ok_or(ProtoError::Malformed("WatchEvent without an object"))?;
    let frame = WatchFrame {
        event_type,
        envelope: parse_envelope(raw)?,
    };
    Ok(Some((frame, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_in_pieces() {
        let obj = vec![0x0a; 200];
        let mut out = BytesMut::new();
        write_watch_event("ADDED", "v1", "ConfigMap", &obj, &mut out);
        write_watch_event("BOOKMARK", "apps/v1", "Deployment", b"\x0a\x00", &mut out);
        let first = watch_event_len("ADDED", "v1", "ConfigMap", obj.len());
        assert_eq!(
            out.len(),
            first + watch_event_len("BOOKMARK", "apps/v1", "Deployment", 2)
        );
        assert_eq!(frame_len(&out), Some(first));
        for cut in 0..first {
            assert_eq!(next_frame(&out[..cut]).unwrap(), None, "{cut}");
        }
        let (frame, used) = next_frame(&out).unwrap().unwrap();
        assert_eq!(used, first);
        assert_eq!(frame.event_type, "ADDED");
        assert_eq!(frame.envelope.kind, "ConfigMap");
        assert_eq!(frame.envelope.raw, &obj[..]);
        let (frame, used) = next_frame(&out[first..]).unwrap().unwrap();
        assert_eq!(used, out.len() - first);
        assert_eq!(
            frame.envelope,
            Envelope {
                api_version: "apps/v1",
                kind: "Deployment",
                raw: b"\x0a\x00"
            }
        );
    }

    #[test]
    fn bad_frames() {
        // A whole frame whose event has no object.
        let frame = [0, 0, 0, 3, 0x0a, 1, b'X'];
        assert_eq!(
            next_frame(&frame).unwrap_err(),
            ProtoError::Malformed("WatchEvent without an object")
        );
        // An object that is not an envelope.
        let frame = [0, 0, 0, 6, 0x12, 4, 0x0a, 2, b'{', b'}'];
        assert_eq!(next_frame(&frame).unwrap_err(), ProtoError::BadMagic);
    }
}
