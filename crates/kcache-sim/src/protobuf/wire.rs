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

/// Appends field `number` as a length-delimited field whose content `body` writes into the
/// same buffer: one byte is reserved for the length and the content moved along when the
/// length takes more, so nested messages need no buffer of their own.
pub fn put_nested<E>(
    out: &mut Vec<u8>,
    number: u32,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    put_varint(out, (u64::from(number) << 3) | 2);
    let at = out.len();
    out.push(0);
    body(out)?;
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut head = Vec::with_capacity(10);
        put_varint(&mut head, len as u64);
        out.splice(at..at + 1, head);
    }
    Ok(())
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

    #[test]
    fn nested_lengths_are_fixed_up_in_place() {
        for len in [0usize, 1, 127, 128, 300, 20_000] {
            let mut direct = vec![7];
            put_bytes_field(&mut direct, 3, &vec![b'x'; len]);
            let mut nested = vec![7];
            put_nested::<()>(&mut nested, 3, |out| {
                out.extend(std::iter::repeat_n(b'x', len));
                Ok(())
            })
            .unwrap();
            assert_eq!(nested, direct, "{len}");
        }
    }
}
