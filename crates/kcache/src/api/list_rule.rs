//! Which state of the collection a LIST reads: the resourceVersion rules of docs/semantics.md's
//! LIST table as one function of the request, apart from the cache that then serves it: what
//! a request asks (`request`) and the policy's input (`policy`).

use crate::api::params::{parse_rv, ListOptions};
use crate::continue_token::ContinueToken;
use crate::status::ApiError;

/// Which state of the collection a LIST reads, from its `resourceVersion`,
/// `resourceVersionMatch`, `limit` and `continue`: the rows of the LIST table of
/// docs/semantics.md, as one function of the request (`ListRule::of`). Whether the cache
/// holds that state is decided when it is read (`list::list`): a state it has not reached or no
/// longer holds is the upstream's to answer.
///
/// `pub` (in a private module) because `request::Listing::rule` holds it and `api::fuzzing`
/// re-exports the parsed request: a narrower visibility is a `private_interfaces` warning. For
/// the same reason `ListRule::of` above is not a link: public docs may not link a private item.
#[derive(Debug, PartialEq)]
pub enum ListRule {
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

impl ListRule {
    /// The read `opts` asks for; a 400 for what the apiserver refuses with one.
    pub(in crate::api) fn of(opts: &ListOptions) -> Result<ListRule, ApiError> {
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
                Ok(token) => ListRule::Continue {
                    token,
                    limit: opts.limit,
                },
                Err(e) => ListRule::ForeignToken(e.into()),
            });
        }
        let Some(rv) = rv else {
            return Ok(ListRule::Consistent { limit: opts.limit });
        };
        if rv == "0" {
            return Ok(ListRule::Any);
        }
        let n = parse_rv(rv)?;
        let rvm = opts.resource_version_match.as_deref();
        let exact = rvm == Some("Exact") || (rvm.is_none() && opts.limit > 0);
        Ok(if exact {
            ListRule::Exact {
                rv: n,
                limit: opts.limit,
            }
        } else {
            ListRule::NotOlderThan {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::continue_token::TokenForm;

    /// The LIST table of docs/semantics.md, row by row: which state each combination of
    /// `resourceVersion`, `resourceVersionMatch`, `limit` and `continue` reads.
    #[test]
    fn list_rules_follow_the_table_of_semantics_md() {
        let info = crate::resource::ResourceInfo::core_v1("pods", "Pod");
        let indexes = crate::index::IndexSet::default();
        let token = ContinueToken::after(7, "default/p-1", TokenForm::Rooted);
        let encoded = token.encode();
        let encoded = encoded.as_str();
        let read = |q: &[(&str, &str)]| {
            let q: Vec<(String, String)> = q
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let opts = ListOptions::parse(&q, &info, &indexes, false).expect("valid options");
            ListRule::of(&opts)
        };
        // (query, the read it asks for)
        type Row<'a> = (Vec<(&'a str, &'a str)>, Result<ListRule, ApiError>);
        let rows: Vec<Row<'_>> = vec![
            // RVM unset, RV unset: the most recent state, limit honoured.
            (vec![], Ok(ListRule::Consistent { limit: 0 })),
            (
                vec![("limit", "500")],
                Ok(ListRule::Consistent { limit: 500 }),
            ),
            // RV=0: any state, limit ignored (L2).
            (vec![("resourceVersion", "0")], Ok(ListRule::Any)),
            (
                vec![("resourceVersion", "0"), ("limit", "500")],
                Ok(ListRule::Any),
            ),
            // RV=N, no limit: not older than N, unpaged.
            (
                vec![("resourceVersion", "5")],
                Ok(ListRule::NotOlderThan {
                    rv: 5,
                    limit: 0,
                    paged: false,
                }),
            ),
            // RV=N with a limit: exactly N (L5).
            (
                vec![("resourceVersion", "5"), ("limit", "2")],
                Ok(ListRule::Exact { rv: 5, limit: 2 }),
            ),
            // Exact: exactly N, with or without a limit.
            (
                vec![("resourceVersion", "5"), ("resourceVersionMatch", "Exact")],
                Ok(ListRule::Exact { rv: 5, limit: 0 }),
            ),
            (
                vec![
                    ("resourceVersion", "5"),
                    ("resourceVersionMatch", "Exact"),
                    ("limit", "2"),
                ],
                Ok(ListRule::Exact { rv: 5, limit: 2 }),
            ),
            // NotOlderThan: not older than N, limit honoured (and a timeout passed upstream).
            (
                vec![
                    ("resourceVersion", "5"),
                    ("resourceVersionMatch", "NotOlderThan"),
                    ("limit", "2"),
                ],
                Ok(ListRule::NotOlderThan {
                    rv: 5,
                    limit: 2,
                    paged: true,
                }),
            ),
            (
                vec![
                    ("resourceVersion", "5"),
                    ("resourceVersionMatch", "NotOlderThan"),
                ],
                Ok(ListRule::NotOlderThan {
                    rv: 5,
                    limit: 0,
                    paged: false,
                }),
            ),
            (
                vec![
                    ("resourceVersion", "0"),
                    ("resourceVersionMatch", "NotOlderThan"),
                    ("limit", "2"),
                ],
                Ok(ListRule::Any),
            ),
            // continue: the token's state from its key; RV=0 beside it tolerated, any other RV
            // refused; a token kcache cannot read is the upstream's.
            (
                vec![("continue", encoded), ("limit", "2")],
                Ok(ListRule::Continue {
                    token: token.clone(),
                    limit: 2,
                }),
            ),
            (
                vec![("continue", encoded), ("resourceVersion", "0")],
                Ok(ListRule::Continue {
                    token: token.clone(),
                    limit: 0,
                }),
            ),
            (
                vec![("continue", encoded), ("resourceVersion", "7")],
                Err(ApiError::BadRequest(
                    "specifying resource version is not allowed when using continue".into(),
                )),
            ),
        ];
        for (q, want) in rows {
            assert_eq!(read(&q), want, "{q:?}");
        }
        assert!(
            matches!(
                read(&[("continue", "not-a-token")]),
                Ok(ListRule::ForeignToken(_))
            ),
            "a token kcache cannot read goes upstream"
        );
    }
}
