//! The protobuf wire format, as much of it as kcache needs: varints, field keys and
//! length-delimited fields, written straight into the output buffer, and a reader that walks
//! a message's fields without decoding them.
//!
//! Sizes are computed arithmetically ([`varint_len`], [`len_field_len`]) so that a writer can
//! put a length before the bytes it measures without encoding anything twice.

use bytes::BufMut;

use super::ProtoError;

/// Wire type of a varint field (int32, int64, bool, enum).
const VARINT: u8 = 0;
/// Wire type of a fixed 8-byte field (fixed64, double).
const FIXED64: u8 = 1;
/// Wire type of a length-delimited field (string, bytes, message, map entry).
const LEN: u8 = 2;
/// Wire types 3 and 4 (groups) are never produced by gogo-protobuf for Kubernetes types.
const FIXED32: u8 = 5;

/// The largest field number protobuf allows (2^29 - 1).
const MAX_FIELD: u64 = (1 << 29) - 1;

/// Bytes taken by `v` encoded as a varint (1 to 10).
pub(super) const fn varint_len(v: u64) -> usize {
    // Bits needed (at least one, for 0), 7 per byte.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// The key (tag) of a field: number and wire type.
const fn key(field: u32, wire_type: u8) -> u64 {
    ((field as u64) << 3) | wire_type as u64
}

/// Bytes of a whole length-delimited field whose value is `len` bytes: key, length, value.
pub(super) const fn len_field_len(field: u32, len: usize) -> usize {
    varint_len(key(field, LEN)) + varint_len(len as u64) + len
}

/// Bytes of a whole varint field holding `v`.
pub(super) const fn varint_field_len(field: u32, v: u64) -> usize {
    varint_len(key(field, VARINT)) + varint_len(v)
}

/// Writes `v` as a varint.
pub(super) fn put_varint(out: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Writes the key and length of a length-delimited field; its `len` bytes of value follow.
pub(super) fn put_len_head(out: &mut impl BufMut, field: u32, len: usize) {
    put_varint(out, key(field, LEN));
    put_varint(out, len as u64);
}

/// Writes a whole length-delimited field (a string, bytes, or an already encoded message).
/// Go writes non-pointer strings even when empty, so callers write `""` as `key 00`.
pub(super) fn put_bytes_field(out: &mut impl BufMut, field: u32, value: &[u8]) {
    put_len_head(out, field, value.len());
    out.put_slice(value);
}

/// Writes a whole varint field. Go writes int32 and int64 alike as the 64-bit two's
/// complement (a negative int32 takes 10 bytes), so callers pass `i as i64 as u64`.
pub(super) fn put_varint_field(out: &mut impl BufMut, field: u32, v: u64) {
    put_varint(out, key(field, VARINT));
    put_varint(out, v);
}

/// Reads a varint at the start of `buf`: the value and the bytes it took.
pub(super) fn get_varint(buf: &[u8], what: &'static str) -> Result<(u64, usize), ProtoError> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        // The tenth byte holds only the 64th bit.
        if i == 9 && b > 1 {
            return Err(ProtoError::Malformed("varint over 64 bits"));
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((v, i + 1));
        }
    }
    // Fewer than ten bytes, the last with its continuation bit set.
    Err(ProtoError::Truncated(what))
}

/// The value of one field as found on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Value<'a> {
    Varint(u64),
    /// A fixed32 or fixed64 field (Kubernetes types have none where kcache looks).
    Fixed,
    /// A length-delimited field: string, bytes, message or map entry, not decoded.
    Bytes(&'a [u8]),
}

/// One field of a message, with where it is in the message (key included), so that a writer
/// can copy everything around it unchanged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field<'a> {
    pub number: u32,
    pub value: Value<'a>,
    /// Offset of the field's key in the message.
    pub start: usize,
    /// Offset just past the field's value.
    pub end: usize,
}

impl<'a> Field<'a> {
    /// The value of a length-delimited field; `what` names the field for the error.
    pub fn bytes(&self, what: &'static str) -> Result<&'a [u8], ProtoError> {
        match self.value {
            Value::Bytes(b) => Ok(b),
            _ => Err(ProtoError::Malformed(what)),
        }
    }

    /// The value of a string field, checked to be UTF-8.
    pub fn str(&self, what: &'static str) -> Result<&'a str, ProtoError> {
        std::str::from_utf8(self.bytes(what)?).map_err(|_| ProtoError::InvalidUtf8(what))
    }

    /// The value of a varint field.
    pub fn varint(&self, what: &'static str) -> Result<u64, ProtoError> {
        match self.value {
            Value::Varint(v) => Ok(v),
            _ => Err(ProtoError::Malformed(what)),
        }
    }
}

/// The fields of one message, in wire order, each skipped over without being decoded.
/// Stops after the first error.
pub(super) struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The message's name, for errors.
    what: &'static str,
}

impl<'a> Fields<'a> {
    /// The fields of `message`; `what` names the message in errors.
    pub fn new(message: &'a [u8], what: &'static str) -> Self {
        Fields {
            buf: message,
            pos: 0,
            what,
        }
    }

    fn read(&mut self) -> Result<Field<'a>, ProtoError> {
        let start = self.pos;
        let rest = &self.buf[start..];
        let (k, n) = get_varint(rest, self.what)?;
        let number = k >> 3;
        if number == 0 || number > MAX_FIELD {
            return Err(ProtoError::Malformed("field number out of range"));
        }
        let rest = &rest[n..];
        let (value, used) = match (k & 7) as u8 {
            VARINT => {
                let (v, used) = get_varint(rest, self.what)?;
                (Value::Varint(v), used)
            }
            LEN => {
                let (len, used) = get_varint(rest, self.what)?;
                let value = usize::try_from(len)
                    .ok()
                    .and_then(|len| rest.get(used..used.checked_add(len)?))
                    .ok_or(ProtoError::Truncated(self.what))?;
                (Value::Bytes(value), used + value.len())
            }
            FIXED64 if rest.len() >= 8 => (Value::Fixed, 8),
            FIXED32 if rest.len() >= 4 => (Value::Fixed, 4),
            FIXED64 | FIXED32 => return Err(ProtoError::Truncated(self.what)),
            _ => return Err(ProtoError::Malformed("group or unknown wire type")),
        };
        self.pos = start + n + used;
        Ok(Field {
            number: number as u32,
            value,
            start,
            end: self.pos,
        })
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, ProtoError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let field = self.read();
        if field.is_err() {
            self.pos = self.buf.len();
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_match_the_encoding() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            (1 << 35) - 1,
            1 << 35,
            u64::MAX >> 1,
            u64::MAX,
            -1i64 as u64,
            -404i32 as i64 as u64,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
            assert_eq!(get_varint(&out, "t"), Ok((v, out.len())), "{v}");
        }
        let mut out = Vec::new();
        put_varint(&mut out, 404);
        assert_eq!(out, [0x94, 0x03]);
    }

    #[test]
    fn bad_varints() {
        assert_eq!(get_varint(&[], "x"), Err(ProtoError::Truncated("x")));
        assert_eq!(
            get_varint(&[0x80, 0x80], "x"),
            Err(ProtoError::Truncated("x"))
        );
        assert_eq!(
            get_varint(&[0xff; 10], "x"),
            Err(ProtoError::Malformed("varint over 64 bits"))
        );
        assert_eq!(
            get_varint(
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
                "x"
            ),
            Err(ProtoError::Malformed("varint over 64 bits"))
        );
    }

    #[test]
    fn fields_walk_and_report_positions() {
        let mut m = Vec::new();
        put_bytes_field(&mut m, 1, b"abc");
        put_varint_field(&mut m, 7, 300);
        put_bytes_field(&mut m, 17, b"");
        m.extend_from_slice(&[0x45, 1, 2, 3, 4]); // field 8, fixed32
        let fields: Vec<Field<'_>> = Fields::new(&m, "M").map(Result::unwrap).collect();
        assert_eq!(fields.len(), 4);
        assert_eq!(
            (fields[0].number, fields[0].value),
            (1, Value::Bytes(b"abc"))
        );
        assert_eq!((fields[0].start, fields[0].end), (0, 5));
        assert_eq!((fields[1].number, fields[1].value), (7, Value::Varint(300)));
        assert_eq!(
            (fields[2].number, fields[2].start, fields[2].end),
            (17, 8, 11)
        );
        assert_eq!(len_field_len(17, 0), 3);
        assert_eq!(fields[3].value, Value::Fixed);
        assert_eq!(fields[3].end, m.len());
    }

    #[test]
    fn fields_reject_bad_input() {
        fn first(b: &[u8]) -> Result<Field<'_>, ProtoError> {
            Fields::new(b, "M").next().unwrap()
        }
        assert_eq!(
            first(&[0x0a, 5, b'a']).unwrap_err(),
            ProtoError::Truncated("M")
        );
        assert_eq!(
            first(&[0x0b]).unwrap_err(),
            ProtoError::Malformed("group or unknown wire type")
        );
        assert_eq!(
            first(&[0x02, 0]).unwrap_err(),
            ProtoError::Malformed("field number out of range")
        );
        assert_eq!(
            first(&[0x09, 1, 2]).unwrap_err(),
            ProtoError::Truncated("M")
        );
        // A length past usize (or the buffer) is truncation, not a panic.
        let mut huge = vec![0x0a];
        put_varint(&mut huge, u64::MAX);
        assert_eq!(first(&huge).unwrap_err(), ProtoError::Truncated("M"));
        // After an error the walk ends.
        let mut it = Fields::new(&[0x0b, 0x08, 0x01], "M");
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}
