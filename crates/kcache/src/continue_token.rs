//! Continue tokens in the apiserver's own format (L3): base64url without padding of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<next key>\u0000"}`. Using the same format means a
//! token issued by the upstream (a consistent first page passed through) can be continued from
//! the cache and the other way round.
//!
//! The start key is relative to the list's prefix. v1.28 writes it as `cm-10\u0000`, v1.34 as
//! `/cm-10\u0000` (see [`TokenForm`]); every version accepts both, so kcache does too, and
//! writes the form of the upstream it fronts. Only a key that would climb out of the list's
//! prefix is refused, as the apiserver refuses it: one that is not the same once cleaned as a
//! path (`..`, `.`, `//`, a trailing `/`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::{DecodeError, Engine};
use serde::{Deserialize, Serialize};

/// A token kcache cannot read. The apiserver answers one with a 400 carrying this message
/// (`crate::status` turns it into that answer; this module knows tokens, not HTTP).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid continue token: continue key is not valid: {0}")]
pub struct InvalidToken(String);

/// How a continue token writes its start key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenForm {
    /// `"start":"cm-10\u0000"` (v1.28).
    Relative,
    /// `"start":"/cm-10\u0000"` (v1.34).
    Rooted,
}

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// List RV the pages are consistent at; -1 asks for an inconsistent continuation at the
    /// latest state (what an expired token's replacement carries).
    pub rv: i64,
    /// Key to start at (inclusive) as the token writes it: relative to the namespace for
    /// namespaced lists, with or without a leading `/` (see `ContinueToken::key`).
    pub start: String,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    v: String,
    rv: i64,
    start: String,
}

impl ContinueToken {
    /// Token for the page starting after `last_key` (relative to the list's prefix), written
    /// in `form`.
    pub(crate) fn after(rv: i64, last_key: &str, form: TokenForm) -> ContinueToken {
        let slash = match form {
            TokenForm::Relative => "",
            TokenForm::Rooted => "/",
        };
        ContinueToken {
            rv,
            start: format!("{slash}{last_key}\u{0}"),
        }
    }

    /// The key to start at, relative to the list's prefix, whichever form the token has.
    pub(crate) fn key(&self) -> &str {
        self.start.strip_prefix('/').unwrap_or(&self.start)
    }

    /// The form the token's start key is written in.
    pub(crate) fn form(&self) -> TokenForm {
        if self.start.starts_with('/') {
            TokenForm::Rooted
        } else {
            TokenForm::Relative
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

    /// Decode, failing with the messages of the apiserver's 400s.
    pub fn decode(token: &str) -> Result<ContinueToken, InvalidToken> {
        let invalid = InvalidToken;
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
        // The apiserver roots the key (`/` + key unless it has one) and refuses it unless
        // cleaning it as a path leaves it unchanged: no key may climb out of the list's prefix.
        if !is_clean_path(wire.start.strip_prefix('/').unwrap_or(&wire.start)) {
            return Err(invalid(format!("invalid start key: {:?}", wire.start)));
        }
        Ok(ContinueToken {
            rv: wire.rv,
            start: wire.start,
        })
    }
}

/// Whether `/` + `key` is unchanged by Go's `path.Clean`: no empty, `.` or `..` segment (an
/// empty one is a doubled or trailing `/`).
fn is_clean_path(key: &str) -> bool {
    // `/` alone cleans to itself: the list from its first key.
    key.is_empty()
        || key
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_recorded_tokens() {
        let t = ContinueToken::after(353, "fixtures-a/cm-02", TokenForm::Relative);
        assert_eq!(
            t.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzUzLCJzdGFydCI6ImZpeHR1cmVzLWEvY20tMDJcdTAwMDAifQ"
        );
        let e = ContinueToken::after(-1, "cm-10", TokenForm::Relative);
        assert_eq!(
            e.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiY20tMTBcdTAwMDAifQ"
        );
        assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
    }

    /// v1.34 writes the start key with a leading `/` (DIFF-1.28.md item 1); both forms are
    /// the same key, and both are accepted.
    #[test]
    fn both_start_key_forms_are_accepted() {
        // `{"v":"meta.k8s.io/v1","rv":13721,"start":"/cm-10\u0000"}`, as a v1.34 wrote it.
        let rooted = ContinueToken::decode(
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTM3MjEsInN0YXJ0IjoiL2NtLTEwXHUwMDAwIn0",
        )
        .unwrap();
        assert_eq!((rooted.rv, rooted.key()), (13721, "cm-10\u{0}"));
        assert_eq!(rooted.form(), TokenForm::Rooted);
        assert_eq!(
            rooted,
            ContinueToken::after(13721, "cm-10", TokenForm::Rooted)
        );
        let cluster = ContinueToken::after(9, "fixtures-a/cm-03", TokenForm::Rooted);
        let back = ContinueToken::decode(&cluster.encode()).unwrap();
        assert_eq!(back.key(), "fixtures-a/cm-03\u{0}");
        for bad in ["../x\u{0}", "/../x\u{0}", "a//b", "//a", "a/./b", "a/"] {
            let t = ContinueToken {
                rv: 5,
                start: bad.into(),
            };
            assert_eq!(
                ContinueToken::decode(&t.encode()).unwrap_err().to_string(),
                format!(
                    "invalid continue token: continue key is not valid: invalid start key: {bad:?}"
                ),
            );
        }
    }

    #[test]
    fn garbage_is_400_with_the_go_message() {
        let garbage = ContinueToken::decode("not-a-valid-token").unwrap_err();
        assert_eq!(
            crate::status::ApiError::from(garbage),
            crate::status::ApiError::BadRequest(
                "invalid continue token: continue key is not valid: illegal base64 data at input byte 16"
                    .into()
            )
        );
        assert!(ContinueToken::decode("e30").is_err());
    }
}
