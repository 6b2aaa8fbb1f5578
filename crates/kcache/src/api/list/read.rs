//! Which state of the collection a LIST reads: the resourceVersion rules of docs/semantics.md's
//! LIST table as one function of the request, apart from the cache that then serves it.

use crate::api::params::{parse_rv, ListOptions};
use crate::continue_token::ContinueToken;
use crate::status::ApiError;

/// Which state of the collection a LIST reads, from its `resourceVersion`,
/// `resourceVersionMatch`, `limit` and `continue`: the rows of the LIST table of
/// docs/semantics.md, as one function of the request ([`ListRead::of`]). Whether the cache
/// holds that state is decided when it is read (`list::list`): a state it has not reached or no
/// longer holds is the upstream's to answer.
#[derive(Debug, PartialEq)]
pub(in crate::api) enum ListRead {
    /// A `continue` token kcache can read: the state at its RV (a negative RV: the latest
    /// state, an inconsistent continuation), from the token's key on; `limit` a page.
    Continue { token: ContinueToken, limit: i64 },
    /// A `continue` token kcache cannot read (garbage, or a newer apiserver's format): the
    /// upstream's to answer or refuse, never stricter than it; this is the error a read only
    /// the cache can answer gets instead.
    ForeignToken(ApiError),
    /// RV unset: the most recent state, from the cache once it has caught up (decided before
    /// the list runs); `limit` honoured, as the apiserver honours it on this path.
    Consistent { limit: i64 },
    /// RV=0: any state, the current one; `limit` ignored, as the apiserver's watch cache
    /// ignores it (L2).
    Any,
    /// `resourceVersionMatch=Exact`, or RV=N with a `limit`: exactly the state at N, paged
    /// (L5).
    Exact { rv: u64, limit: i64 },
    /// RV=N otherwise: not older than N. Waits for N (L6); `limit` is honoured only with
    /// `resourceVersionMatch=NotOlderThan`. A wait that times out goes upstream when the
    /// request had a `limit` (`paged`), else is the apiserver's 504.
    NotOlderThan { rv: u64, limit: i64, paged: bool },
}

impl ListRead {
    /// The read `opts` asks for; a 400 for what the apiserver refuses with one.
    pub(in crate::api) fn of(opts: &ListOptions) -> Result<ListRead, ApiError> {
        let rv = opts.resource_version.as_deref();
        if let Some(token) = &opts.continue_token {
            // The apiserver tolerates resourceVersion=0 next to a token (the token decides);
            // any other RV is a 400.
            if rv.is_some_and(|rv| rv != "0") {
                return Err(ApiError::BadRequest(
                    "specifying resource version is not allowed when using continue".into(),
                ));
            }
            return Ok(match ContinueToken::decode(token) {
                Ok(token) => ListRead::Continue {
                    token,
                    limit: opts.limit,
                },
                Err(e) => ListRead::ForeignToken(e.into()),
            });
        }
        let Some(rv) = rv else {
            return Ok(ListRead::Consistent { limit: opts.limit });
        };
        if rv == "0" {
            return Ok(ListRead::Any);
        }
        let n = parse_rv(rv)?;
        let rvm = opts.resource_version_match.as_deref();
        let exact = rvm == Some("Exact") || (rvm.is_none() && opts.limit > 0);
        Ok(if exact {
            ListRead::Exact {
                rv: n,
                limit: opts.limit,
            }
        } else {
            ListRead::NotOlderThan {
                rv: n,
                limit: if rvm == Some("NotOlderThan") {
                    opts.limit
                } else {
                    0
                },
                paged: opts.limit > 0,
            }
        })
    }
}
