//! What of the upstream's behaviour depends on its version, learnt from the upstream itself.
//!
//! kcache answers as the apiserver it fronts would, and apiservers of different versions answer
//! some things differently (the recordings of v1.28 and v1.34 and their differences are in
//! `tests/fixtures/kube-apiserver-v1.34/DIFF-1.28.md`; docs/compatibility.md says what kcache
//! relies on per version). What kcache renders itself follows the upstream:
//!
//! - **Continue tokens.** v1.34 writes the start key with a leading `/`
//!   (`"start":"/cm-10\u0000"`), v1.28 without. Both versions accept both forms, but a client
//!   must not be able to tell kcache's tokens from the upstream's, so kcache writes the form it
//!   last saw the upstream write ([`UpstreamVersion::learn_token`]: every upstream list page
//!   kcache reads, its consistency probes included), and until it has seen one, the form of
//!   the upstream's version.
//! - **Bookmark objects** of built-in kinds carry `"creationTimestamp":null` up to v1.33 and
//!   not from v1.34 on.
//! - **An unparsable `resourceVersion`** is a 500 up to v1.33 and a 400 from v1.34 on.
//!
//! And what it costs the upstream to prove the cache current:
//!
//! - **Consistent lists from the watch cache.** From v1.31 on (`ConsistentListFromCache`, on
//!   by default) the apiserver answers a consistent list from its watch cache once that has
//!   caught up with etcd, which for a type whose last event is older than etcd's revision
//!   means waiting for etcd's next progress notification (~50-100 ms, a 100 ms tick), while a
//!   consistent GET is still read from etcd at once. kcache's consistency probe is such a
//!   list, so on those versions proving a GET from the cache costs more than the GET itself
//!   (see `ConsistentReader::decide`).
//!
//! Behaviour known only for v1.28 and v1.34 is switched at 1.34; a version kcache could not
//! learn (the upstream unreachable at start) is taken for the newest one recorded. Nothing
//! here decides whether the cache may answer: a difference that would is passed through to
//! the upstream instead (see docs/compatibility.md).

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use serde::Deserialize;

pub(crate) use crate::continue_token::TokenForm;

/// The first minor version recorded with the newer behaviours listed in the module docs.
const NEWER_FROM_MINOR: u32 = 34;

/// The first minor version whose apiserver answers consistent lists from its watch cache by
/// default (the `ConsistentListFromCache` feature went to beta, on, in v1.31).
const LISTS_FROM_WATCH_CACHE_FROM_MINOR: u32 = 31;

/// The upstream's version and the forms learnt from its answers; shared by every handle of
/// one upstream (cheap to clone).
#[derive(Debug, Clone, Default)]
pub(crate) struct UpstreamVersion {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The minor version from `/version` (0: not known).
    minor: AtomicU32,
    /// The token form last seen in an upstream answer: 0 none yet, 1 relative, 2 rooted.
    token_form: AtomicU8,
    /// `gitVersion` from `/version` (`v1.34.1`), for people: the admin status page.
    git_version: std::sync::RwLock<Option<String>>,
}

impl UpstreamVersion {
    /// Take the version from the body of the upstream's `/version`. Returns the minor version
    /// when the body could be read.
    pub(crate) fn learn_version(&self, body: &[u8]) -> Option<u32> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Info {
            minor: String,
            git_version: Option<String>,
        }
        let info: Info = serde_json::from_slice(body).ok()?;
        if let Some(v) = info.git_version {
            *self
                .inner
                .git_version
                .write()
                .unwrap_or_else(|e| e.into_inner()) = Some(v);
        }
        // Vendors append to it ("34+").
        let digits: String = info
            .minor
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let minor = digits.parse().ok()?;
        self.inner.minor.store(minor, Ordering::Relaxed);
        Some(minor)
    }

    /// The minor version, when known.
    pub(crate) fn minor(&self) -> Option<u32> {
        match self.inner.minor.load(Ordering::Relaxed) {
            0 => None,
            m => Some(m),
        }
    }

    /// The upstream's `gitVersion`, once `/version` was read and had one.
    pub(crate) fn git_version(&self) -> Option<String> {
        self.inner
            .git_version
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Note the form of a continue token the upstream wrote (ignored when it does not decode:
    /// then it is not the apiserver's own format, and says nothing).
    pub(crate) fn learn_token(&self, token: &str) {
        let Ok(t) = crate::continue_token::ContinueToken::decode(token) else {
            return;
        };
        let form = match t.form() {
            TokenForm::Relative => 1,
            TokenForm::Rooted => 2,
        };
        self.inner.token_form.store(form, Ordering::Relaxed);
    }

    /// The form of the continue tokens kcache writes: the upstream's own.
    pub(crate) fn token_form(&self) -> TokenForm {
        match self.inner.token_form.load(Ordering::Relaxed) {
            1 => TokenForm::Relative,
            2 => TokenForm::Rooted,
            _ if self.newer() => TokenForm::Rooted,
            _ => TokenForm::Relative,
        }
    }

    /// Whether bookmark objects of built-in kinds carry `"creationTimestamp":null`.
    pub(crate) fn null_creation_timestamp_in_bookmarks(&self) -> bool {
        !self.newer()
    }

    /// Whether an unparsable `resourceVersion` is a 400 (else the older 500).
    #[cfg(test)]
    pub(crate) fn invalid_rv_is_bad_request(&self) -> bool {
        self.newer()
    }

    /// Whether the upstream answers a consistent list (kcache's consistency probe) from its
    /// watch cache, which may first wait for a progress notification from etcd, rather than
    /// from etcd, as it answers a consistent GET. Unknown: taken as yes (the newest behaviour).
    pub(crate) fn consistent_lists_from_watch_cache(&self) -> bool {
        self.minor()
            .is_none_or(|m| m >= LISTS_FROM_WATCH_CACHE_FROM_MINOR)
    }

    fn newer(&self) -> bool {
        self.minor().is_none_or(|m| m >= NEWER_FROM_MINOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_and_forms() {
        let v = UpstreamVersion::default();
        assert_eq!(
            v.token_form(),
            TokenForm::Rooted,
            "unknown: the newest recorded"
        );
        assert!(v.consistent_lists_from_watch_cache());
        assert_eq!(
            v.learn_version(br#"{"major":"1","minor":"28","gitVersion":"v1.28.7"}"#),
            Some(28)
        );
        assert_eq!(v.token_form(), TokenForm::Relative);
        assert_eq!(v.git_version().as_deref(), Some("v1.28.7"));
        assert!(v.null_creation_timestamp_in_bookmarks());
        assert!(!v.invalid_rv_is_bad_request());
        assert!(!v.consistent_lists_from_watch_cache());
        assert_eq!(v.learn_version(br#"{"major":"1","minor":"31"}"#), Some(31));
        assert!(v.consistent_lists_from_watch_cache());
        assert!(!v.invalid_rv_is_bad_request());
        assert_eq!(v.learn_version(br#"{"major":"1","minor":"34+"}"#), Some(34));
        assert!(v.invalid_rv_is_bad_request());
        // What the upstream wrote wins over what its version suggests.
        v.learn_token("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzUzLCJzdGFydCI6ImZpeHR1cmVzLWEvY20tMDJcdTAwMDAifQ");
        assert_eq!(v.token_form(), TokenForm::Relative);
        assert_eq!(v.learn_version(b"not json"), None);
    }
}
