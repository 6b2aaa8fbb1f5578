//! Continue tokens in the apiserver's own format (L3): base64url without padding of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<next key>\u0000"}`. Using the same format means a
//! token issued by the upstream (a consistent first page passed through) can be continued from
//! the cache and the other way round.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::{DecodeError, Engine};
use serde::{Deserialize, Serialize};

use crate::status::ApiError;

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// List RV the pages are consistent at; -1 asks for an inconsistent continuation at the
    /// latest state (what an expired token's replacement carries).
    pub rv: i64,
    /// Key to start at (inclusive): relative to the namespace for namespaced lists.
    pub start: String,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    v: String,
    rv: i64,
    start: String,
}

impl ContinueToken {
    /// Token for the page starting after `last_key`.
    pub fn after(rv: i64, last_key: &str) -> ContinueToken {
        ContinueToken {
            rv,
            start: format!("{last_key}\u{0}"),
        }
    }

    pub fn encode(&self) -> String {
        let wire = Wire {
            v: "meta.k8s.io/v1".into(),
            rv: self.rv,
            start: self.start.clone(),
        };
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&wire).unwrap_or_default())
    }

    /// Decode with the apiserver's 400 messages.
    pub fn decode(token: &str) -> Result<ContinueToken, ApiError> {
        let invalid = |why: String| {
            ApiError::BadRequest(format!(
                "invalid continue token: continue key is not valid: {why}"
            ))
        };
        let data = URL_SAFE_NO_PAD.decode(token).map_err(|e| {
            let at = match e {
                DecodeError::InvalidByte(at, _) | DecodeError::InvalidLastSymbol(at, _) => at,
                DecodeError::InvalidLength(len) => len.saturating_sub(1),
                DecodeError::InvalidPadding => token.len(),
            };
            invalid(format!("illegal base64 data at input byte {at}"))
        })?;
        let wire: Wire = serde_json::from_slice(&data).map_err(|e| invalid(e.to_string()))?;
        if wire.v != "meta.k8s.io/v1" {
            return Err(invalid(format!(
                "server does not recognize this encoded version {:?}",
                wire.v
            )));
        }
        if wire.rv == 0 {
            return Err(invalid(
                "incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
            ));
        }
        if wire.start.is_empty() {
            return Err(invalid(
                "encoded start key empty (version meta.k8s.io/v1)".into(),
            ));
        }
        // The apiserver rejects keys that would climb out of the collection's prefix.
        if wire.start.starts_with('/') || wire.start.split('/').any(|s| s == ".." || s == ".") {
            return Err(ApiError::BadRequest(format!(
                "invalid continue token: continue key is not valid: invalid start key: {:?}",
                wire.start
            )));
        }
        Ok(ContinueToken {
            rv: wire.rv,
            start: wire.start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_recorded_tokens() {
        let t = ContinueToken::after(353, "fixtures-a/cm-02");
        assert_eq!(
            t.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzUzLCJzdGFydCI6ImZpeHR1cmVzLWEvY20tMDJcdTAwMDAifQ"
        );
        let e = ContinueToken::after(-1, "cm-10");
        assert_eq!(
            e.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiY20tMTBcdTAwMDAifQ"
        );
        assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
    }

    #[test]
    fn garbage_is_400_with_the_go_message() {
        assert_eq!(
            ContinueToken::decode("not-a-valid-token").unwrap_err(),
            ApiError::BadRequest(
                "invalid continue token: continue key is not valid: illegal base64 data at input byte 16"
                    .into()
            )
        );
        assert_eq!(ContinueToken::decode("e30").unwrap_err().code(), 400);
    }
}
