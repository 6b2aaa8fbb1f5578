//! Protobuf wire primitives: varints, keys, length-delimited fields.

/// Appends `v` as a varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a varint field (wire type 0). Go writes int32 sign-extended to 64 bits, so callers
/// pass `n as i64 as u64`.
pub fn put_varint_field(out: &mut Vec<u8>, number: u32, v: u64) {
    put_varint(out, u64::from(number) << 3);
    put_varint(out, v);
}

/// Appends the key and length of a length-delimited field (wire type 2).
pub fn put_len_head(out: &mut Vec<u8>, number: u32, len: usize) {
    put_varint(out, (u64::from(number) << 3) | 2);
    put_varint(out, len as u64);
}

/// Appends a whole length-delimited field: a string, bytes, or an encoded message.
pub fn put_bytes_field(out: &mut Vec<u8>, number: u32, value: &[u8]) {
    put_len_head(out, number, value.len());
    out.extend_from_slice(value);
}

/// Appends an encoded nested message as field `number`.
pub fn put_len_field(out: &mut Vec<u8>, number: u32, message: &[u8]) {
    put_bytes_field(out, number, message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_as_go_writes_them() {
        let mut out = Vec::new();
        put_varint_field(&mut out, 6, 406);
        assert_eq!(out, [0x30, 0x96, 0x03]);
        out.clear();
        // int32 -1: ten bytes.
        put_varint_field(&mut out, 1, -1i32 as i64 as u64);
        assert_eq!(out.len(), 11);
        out.clear();
        put_bytes_field(&mut out, 17, b"");
        assert_eq!(out, [0x8a, 0x01, 0x00]);
    }
}
