//! Continue tokens: decoding any string never panics and fails only with a 400; a decoded
//! token re-encodes to one that decodes equal; encoding any (rv, start) decodes back equal or
//! is refused with a 400.
#![no_main]

use kcache::api::ContinueToken;
use kcache::status::ApiError;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        match ContinueToken::decode(s) {
            Ok(t) => {
                let again = ContinueToken::decode(&t.encode());
                assert_eq!(again.as_ref(), Ok(&t), "{s:?}");
            }
            Err(e) => assert_eq!(ApiError::from(e).code(), 400, "{s:?}"),
        }
    }
    // The same bytes as a token to encode: 8 bytes of rv, the rest the start key.
    if data.len() >= 8 {
        let (rv, start) = data.split_at(8);
        let mut rv_bytes = [0u8; 8];
        rv_bytes.copy_from_slice(rv);
        let t = ContinueToken {
            rv: i64::from_le_bytes(rv_bytes),
            start: String::from_utf8_lossy(start).into_owned(),
        };
        match ContinueToken::decode(&t.encode()) {
            Ok(back) => assert_eq!(back, t),
            Err(e) => assert_eq!(ApiError::from(e).code(), 400, "{t:?}"),
        }
    }
});
