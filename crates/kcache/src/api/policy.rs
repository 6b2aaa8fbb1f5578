//! Where a read of a cached type is answered, and which state of the type the cache answers
//! it with: the read policy of docs/semantics.md ("What is answered where", "Forwarding rules",
//! "Representations", and the resourceVersion rows of "LIST" and "GET") as one function
//! ([`decide`]) of what the request asks ([`ReadRequest`], parsed once) and what the cache
//! holds ([`Held`]), giving one [`Decision`].
//!
//! The rules, in the order they are applied (the first that matches decides):
//!
//! 1. A path outside the type's scope (a namespaced type named without a namespace, a
//!    cluster-scoped one with one) goes upstream, for the apiserver's own 404 flavours.
//! 2. A parameter or field selector only the upstream can answer exactly goes upstream
//!    (never stricter than the upstream), unless the request also selects on one of kcache's
//!    own index fields, which the upstream does not know.
//! 3. Until its first sync the cache has nothing to answer with: the read goes upstream, except
//!    one on a kcache index field (it is answered, or refused with 429, by the cache: A4).
//! 4. A representation the cache does not produce goes upstream: an `Accept` it does not
//!    serve; the whole object (JSON or protobuf) of a type cached as metadata only; protobuf
//!    before the type's protobuf mirror has synced (when the client accepts only protobuf: one
//!    that accepts JSON after it is answered in JSON meanwhile, `read::decide`);
//!    `PartialObjectMetadata` for a list or
//!    `PartialObjectMetadataList` for a get or watch (the apiserver's 406); a Table of a type
//!    the cache cannot print, or that needs more than the metadata a metadata-only cache holds.
//! 5. Options that do not parse get the apiserver's 400 or 422.
//! 6. A read reaching outside what the cache holds (a cache restricted to a namespace or by
//!    selectors) goes upstream.
//! 7. A Table's `includeObject` that is not one of the apiserver's values gets its 400; a
//!    protobuf watch whose initial events end in a bookmark goes upstream until the type's
//!    mirror has seen one (the bookmark is made from the kind's empty object as the upstream
//!    encodes it).
//! 8. The resourceVersion rules: which state the cache answers with ([`Want`]), or, for a
//!    consistent read (resourceVersion unset), [`Decision::Consistent`]: the cache answers once
//!    the consistent reader (`ConsistentReader::decide`) has shown it current, and where it is
//!    answered then is the reader's to say. Until its first sync a cache answers none of them (the
//!    apiserver's 429, for the index selectors that reach it).
//!
//! A read that selects on a kcache index field is never forwarded: where a rule would forward
//! it, it is refused with a 400 naming the reason instead, and where the cache finds it does
//! not hold the state asked for, it answers the apiserver's error ([`Otherwise`]).
//!
//! Decided later, where the read is answered, is only what depends on the objects themselves:
//! whether the cache still holds a state (`Otherwise` says what then), a protobuf mirror that
//! does not yet hold an object's version, an object a cache restricted by selectors does not
//! hold.

use std::borrow::Cow;

use super::list_rule::ListRule;
use super::negotiate::Representation;
use super::request::{Options, ReadRequest, Verb};
use crate::continue_token::ContinueToken;
use crate::status::ApiError;
use crate::table::IncludeObject;

/// What a Table read can be printed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Printable {
    /// kcache has no printer for the type: the upstream prints it.
    No,
    /// Its columns read fields beyond the object's metadata.
    NeedsObject,
    /// Its columns read metadata only.
    FromMetadata,
}

/// What the cache of the type holds, as far as where a read is answered depends on it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    pub namespaced: bool,
    pub synced: bool,
    /// Objects are cached as their metadata only.
    pub metadata_only: bool,
    /// The type's protobuf mirror has synced (looked at for protobuf reads only).
    pub mirror_ready: bool,
    /// The type's protobuf mirror has seen the kind's empty object in an upstream bookmark
    /// (looked at for protobuf watches only).
    pub bookmark_object: bool,
    /// Looked at for Table reads only.
    pub printer: Printable,
}

/// Where a read of a cached type is answered.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Decision {
    /// From the cache, with the state `Want` names.
    Cache(Want),
    /// A consistent read: from the cache once it is shown current, else upstream (see
    /// `ConsistentReader::decide`); `limit` a page.
    Consistent { limit: i64 },
    /// Passed through to the upstream, for this reason (logged).
    Upstream(Cow<'static, str>),
    /// Refused by kcache with this error, once the caller is authorized.
    Refuse(ApiError),
}

/// Which state of the type the cache answers a read with.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Want {
    /// The current state (RV=0, or a consistent read the cache answers); `limit` a page (a
    /// LIST at RV=0 ignores its limit, as the apiserver's watch cache does: L2).
    Latest { limit: i64 },
    /// Exactly the state at `rv`, paged (L5).
    Exact {
        rv: u64,
        limit: i64,
        otherwise: Otherwise,
    },
    /// A state not older than `rv`, waited for (L6).
    NotOlderThan {
        rv: u64,
        limit: i64,
        otherwise: Otherwise,
    },
    /// The state a continue token names (a negative RV: the current one), from its key on.
    Continue {
        token: ContinueToken,
        limit: i64,
        otherwise: Otherwise,
    },
    /// A watch: it starts where its resourceVersion says (`watch::Start`).
    Events,
}

/// What a read gets when the cache finds it does not hold the state the read wants (a state
/// it has not reached in time, or no longer holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Otherwise {
    /// The upstream answers it.
    Forward,
    /// The apiserver's error for it (a read only the cache can answer, or a GET's wait).
    Refuse,
}

impl Otherwise {
    /// What the read gets, `error` being the apiserver's for it.
    pub(super) fn answer(self, error: ApiError) -> Result<super::Answer, ApiError> {
        match self {
            Otherwise::Forward => Ok(super::Answer::Upstream),
            Otherwise::Refuse => Err(error),
        }
    }

    /// `Forward` for a read the upstream can answer, else `Refuse`.
    fn unless_local(local: bool) -> Otherwise {
        if local {
            Otherwise::Refuse
        } else {
            Otherwise::Forward
        }
    }
}

/// Decide where a read is answered (see the module docs for the rules).
pub(super) fn decide(read: &ReadRequest<'_>, held: &Held) -> Decision {
    let local = read.local;
    // 1. The upstream's own 404 for a path outside the type's scope (G2).
    let in_namespace = read.path.namespace.is_some();
    let named = read.path.name.is_some();
    // Namespaced or cluster-wide as the type is (its Kubernetes scope; the cache's own
    // restriction, `cache::Scope`, is `within_scope` below).
    let fits_type = if held.namespaced {
        in_namespace || !named
    } else {
        !in_namespace
    };
    if !fits_type {
        return Decision::Upstream("the path is outside the type's scope".into());
    }
    // 2. Never stricter than the upstream.
    if !local {
        if let Some(why) = &read.upstream_only {
            return Decision::Upstream(Cow::Owned(format!("only the upstream answers {why}")));
        }
    }
    // 3. Nothing to answer with before the first sync.
    if !held.synced && !local {
        return Decision::Upstream("the type has not synced yet".into());
    }
    // 4. Representations the cache does not produce.
    if let Some(why) = unservable(read, held) {
        return elsewhere(local, why);
    }
    match &read.options {
        Options::Get(opts) => {
            // 6.
            if !read.within_scope {
                return Decision::Upstream("the object is outside what is cached".into());
            }
            // 7.
            if let Some(refused) = include_object_refused(read) {
                return refused;
            }
            // 8.
            get_rule(opts.resource_version.as_deref(), held.synced)
        }
        // 5.
        Options::List(Err(e)) => Decision::Refuse(e.clone()),
        Options::List(Ok(listing)) => {
            // 6.
            if !read.within_scope {
                return elsewhere(local, "this request reaches outside what is cached");
            }
            // 7.
            if let Some(refused) = include_object_refused(read) {
                return refused;
            }
            if read.verb == Verb::Watch {
                return watch_rule(read, listing, held);
            }
            // 8.
            match &listing.rule {
                Err(e) => Decision::Refuse(e.clone()),
                Ok(rule) => list_rule(rule, local, held.synced),
            }
        }
    }
}

/// The resourceVersion rows of a GET (G1, L6): RV unset a consistent read, RV=0 the current
/// state, RV=N a state not older than N, waited for (the apiserver's 504 after the wait).
fn get_rule(rv: Option<&str>, synced: bool) -> Decision {
    let rv = match rv {
        None => return Decision::Consistent { limit: 0 },
        Some(rv) => rv,
    };
    if !synced {
        return Decision::Refuse(ApiError::NotReady);
    }
    if rv == "0" {
        return Decision::Cache(Want::Latest { limit: 0 });
    }
    // Not a number: only a read only the cache can answer gets here (rule 2 forwards others).
    match super::params::parse_rv(rv) {
        Ok(rv) => Decision::Cache(Want::NotOlderThan {
            rv,
            limit: 0,
            otherwise: Otherwise::Refuse,
        }),
        Err(e) => Decision::Refuse(e),
    }
}

/// The rows of docs/semantics.md's LIST table, as [`ListRule::of`] read them from the request.
fn list_rule(rule: &ListRule, local: bool, synced: bool) -> Decision {
    let otherwise = Otherwise::unless_local(local);
    let want = match rule {
        // A token kcache cannot read (garbage, or a newer apiserver's format): the upstream's
        // to answer or refuse, never stricter than it.
        ListRule::ForeignToken(e) => {
            return match otherwise {
                Otherwise::Forward => {
                    Decision::Upstream("a continue token kcache cannot read".into())
                }
                Otherwise::Refuse => Decision::Refuse(e.clone()),
            };
        }
        ListRule::Consistent { limit } => return Decision::Consistent { limit: *limit },
        ListRule::Continue { token, limit } => Want::Continue {
            token: token.clone(),
            limit: *limit,
            otherwise,
        },
        ListRule::Any => Want::Latest { limit: 0 },
        // No waiting for an RV the cache has not reached: the apiserver reads etcd at once,
        // so the upstream answers right away (the state, or its immediate 500 for a future
        // RV); what kcache's own history no longer holds, the upstream answers too (the state,
        // or its 410 once compacted; L5).
        ListRule::Exact { rv, limit } => Want::Exact {
            rv: *rv,
            limit: *limit,
            otherwise,
        },
        // A wait that times out goes upstream when the request had a limit, else is the
        // apiserver's 504.
        ListRule::NotOlderThan { rv, limit, paged } => Want::NotOlderThan {
            rv: *rv,
            limit: *limit,
            otherwise: if *paged { otherwise } else { Otherwise::Refuse },
        },
    };
    if !synced {
        return Decision::Refuse(ApiError::NotReady);
    }
    Decision::Cache(want)
}

/// A watch: one whose initial events end in a bookmark promising a consistent state (initial
/// events with resourceVersion unset: W6b) is a consistent read; a protobuf one whose initial
/// events end in a bookmark needs the kind's bookmark object; every other start is
/// `watch::Start`'s.
fn watch_rule(read: &ReadRequest<'_>, listing: &super::request::Listing, held: &Held) -> Decision {
    let opts = &listing.opts;
    if read.representation == Representation::Protobuf && !held.bookmark_object {
        let initial = opts
            .send_initial_events
            .unwrap_or(matches!(opts.resource_version.as_deref(), None | Some("0")));
        if opts.allow_bookmarks && initial {
            return elsewhere(
                read.local,
                "no protobuf bookmark object of this kind seen yet",
            );
        }
    }
    let initial = opts
        .send_initial_events
        .unwrap_or(opts.resource_version.is_none());
    if initial && opts.allow_bookmarks && opts.resource_version.is_none() {
        return Decision::Consistent { limit: 0 };
    }
    Decision::Cache(Want::Events)
}

/// A Table read whose `includeObject` is not one of the apiserver's values: its 400.
fn include_object_refused(read: &ReadRequest<'_>) -> Option<Decision> {
    match (&read.representation, &read.include) {
        (Representation::Table, Err(e)) => Some(Decision::Refuse(e.clone().into())),
        _ => None,
    }
}

/// Where a read the cache cannot answer goes, for the reason `why`: upstream, unless it selects
/// on a kcache index field (`local`), which only the cache knows; then it is refused.
pub(super) fn elsewhere(local: bool, why: &'static str) -> Decision {
    if local {
        Decision::Refuse(ApiError::BadRequest(format!(
            "field selectors on kcache indexes are answered from the cache only, and {why}"
        )))
    } else {
        Decision::Upstream(why.into())
    }
}

/// Why the cache cannot produce the representation `read` wants, if it cannot.
fn unservable(read: &ReadRequest<'_>, held: &Held) -> Option<&'static str> {
    use Representation::*;
    let r = read.representation;
    if r == Upstream {
        return Some("the cache does not serve the requested media type");
    }
    if held.metadata_only && matches!(r, Json | Protobuf) {
        return Some("this resource is cached as metadata only");
    }
    if r == Protobuf && !held.mirror_ready {
        return Some("the protobuf mirror of this type is not ready");
    }
    // A list asks for PartialObjectMetadataList, a get or watch for PartialObjectMetadata; the
    // other way round the apiserver answers 406, so the upstream does.
    let list = read.verb == Verb::List;
    if r == PartialObjectMetadata && list {
        return Some("a list cannot be PartialObjectMetadata");
    }
    if r == PartialObjectMetadataList && !list {
        return Some("only a list can be PartialObjectMetadataList");
    }
    if r == Table {
        if held.printer == Printable::No {
            return Some("the cache cannot print this resource as a Table");
        }
        // From metadata alone: only columns of metadata, and rows without whole objects.
        let include_object = matches!(read.include, Ok(IncludeObject::Object));
        let needs_object = held.printer == Printable::NeedsObject || include_object;
        if held.metadata_only && needs_object {
            return Some("this Table needs more than the metadata this resource caches");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheConfig, ResourceCache, Scope};
    use crate::continue_token::TokenForm;
    use crate::index::IndexConfig;
    use crate::resource::ResourceInfo;

    const JSON: &str = "application/json";
    const YAML: &str = "application/yaml";
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
    const META: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
    const META_LIST: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

    const CMS: &str = "/api/v1/namespaces/ns/configmaps";
    const CM: &str = "/api/v1/namespaces/ns/configmaps/a";
    /// A selector on the configured index `data.k`: kcache's own, never forwarded.
    const LOCAL: &str = "fieldSelector=data.k%3Dv";

    /// ConfigMaps with a field index on `data.k`, restricted to `scope`.
    fn cache_in(scope: Scope) -> ResourceCache {
        ResourceCache::new(
            ResourceInfo::core_v1("configmaps", "ConfigMap"),
            scope,
            CacheConfig::default(),
        )
        .with_indexes(&[IndexConfig {
            name: "byData".into(),
            field: Some("data.k".into()),
            label: None,
        }])
    }

    fn held() -> Held {
        Held {
            namespaced: true,
            synced: true,
            metadata_only: false,
            mirror_ready: true,
            bookmark_object: true,
            printer: Printable::NeedsObject,
        }
    }

    /// The decision for a GET of `uri` (a get, list or watch by its path and query) asking
    /// for `accept`, parsed as `handle` parses it.
    fn decide_in(cache: &ResourceCache, uri: &str, accept: &str, held: Held) -> Decision {
        let (parts, ()) = http::Request::get(uri)
            .header(http::header::ACCEPT, accept)
            .body(())
            .unwrap()
            .into_parts();
        let parsed = super::super::request::Parsed::parse(&parts);
        let read = parsed
            .read(&parts.headers, cache, true)
            .expect("a read of the type");
        decide(&read, &held)
    }

    /// A decision in a few words: where, and for the cache which state and what if the
    /// cache does not hold it; a refusal by its HTTP code.
    fn said(d: &Decision) -> String {
        let otherwise = |o: &Otherwise| match o {
            Otherwise::Forward => "else upstream",
            Otherwise::Refuse => "else refused",
        };
        match d {
            Decision::Cache(Want::Latest { limit }) => format!("latest limit={limit}"),
            Decision::Cache(Want::Exact {
                rv,
                limit,
                otherwise: o,
            }) => format!("exact {rv} limit={limit} {}", otherwise(o)),
            Decision::Cache(Want::NotOlderThan {
                rv,
                limit,
                otherwise: o,
            }) => format!("not older than {rv} limit={limit} {}", otherwise(o)),
            Decision::Cache(Want::Continue {
                limit,
                otherwise: o,
                ..
            }) => format!("continue limit={limit} {}", otherwise(o)),
            Decision::Cache(Want::Events) => "events".into(),
            Decision::Consistent { limit } => format!("consistent limit={limit}"),
            Decision::Upstream(_) => "upstream".into(),
            Decision::Refuse(e) => e.code().to_string(),
        }
    }

    /// The rows of docs/semantics.md's tables that depend on the request's shape and the
    /// cache's state, and the resourceVersion rows of its LIST and GET tables, each as (what,
    /// uri, accept, held, expected).
    #[test]
    fn the_policy_row_by_row() {
        let token = crate::continue_token::ContinueToken::after(7, "ns/a", TokenForm::Rooted);
        let token = token.encode();
        let unsynced = Held {
            synced: false,
            ..held()
        };
        let rows: Vec<(&str, String, &str, Held, &str)> = vec![
            // Shape.
            ("a list, json", format!("{CMS}?resourceVersion=0"), JSON, held(), "latest limit=0"),
            ("a get, json", format!("{CM}?resourceVersion=0"), JSON, held(), "latest limit=0"),
            ("a watch, json", format!("{CMS}?watch=1"), JSON, held(), "events"),
            (
                "a get of a namespaced type without a namespace",
                "/api/v1/configmaps/a".into(),
                JSON,
                held(),
                "upstream",
            ),
            (
                "a list of a namespaced type across namespaces",
                "/api/v1/configmaps?resourceVersion=0".into(),
                JSON,
                held(),
                "latest limit=0",
            ),
            (
                "a cluster-scoped type with a namespace",
                format!("{CMS}?resourceVersion=0"),
                JSON,
                Held {
                    namespaced: false,
                    ..held()
                },
                "upstream",
            ),
            ("an unknown parameter", format!("{CMS}?x=1"), JSON, held(), "upstream"),
            (
                "an unknown parameter beside a kcache index selector",
                format!("{CMS}?x=1&resourceVersion=0&{LOCAL}"),
                JSON,
                held(),
                "latest limit=0",
            ),
            (
                "a field selector kcache does not know for the kind",
                format!("{CMS}?fieldSelector=spec.x%3Dy"),
                JSON,
                held(),
                "upstream",
            ),
            ("before the first sync", format!("{CMS}?watch=1"), JSON, unsynced, "upstream"),
            (
                "a kcache index selector before the first sync (the cache's 429: A4)",
                format!("{CMS}?resourceVersion=0&{LOCAL}"),
                JSON,
                unsynced,
                "429",
            ),
            ("yaml", format!("{CM}?resourceVersion=0"), YAML, held(), "upstream"),
            (
                "yaml with a kcache index selector",
                format!("{CMS}?{LOCAL}"),
                YAML,
                held(),
                "400",
            ),
            (
                "json of a metadata-only type",
                format!("{CM}?resourceVersion=0"),
                JSON,
                Held {
                    metadata_only: true,
                    ..held()
                },
                "upstream",
            ),
            (
                "PartialObjectMetadataList of a metadata-only type",
                format!("{CMS}?resourceVersion=0"),
                META_LIST,
                Held {
                    metadata_only: true,
                    ..held()
                },
                "latest limit=0",
            ),
            ("protobuf, mirror ready", format!("{CMS}?watch=1"), PROTOBUF, held(), "events"),
            (
                "protobuf, mirror not ready",
                format!("{CMS}?resourceVersion=0"),
                PROTOBUF,
                Held {
                    mirror_ready: false,
                    ..held()
                },
                "upstream",
            ),
            (
                "a protobuf watch with initial events and bookmarks, no bookmark object yet",
                format!("{CMS}?watch=1&resourceVersion=0&allowWatchBookmarks=true"),
                PROTOBUF,
                Held {
                    bookmark_object: false,
                    ..held()
                },
                "upstream",
            ),
            (
                "a protobuf watch from an RV, no bookmark object yet",
                format!("{CMS}?watch=1&resourceVersion=5&allowWatchBookmarks=true"),
                PROTOBUF,
                Held {
                    bookmark_object: false,
                    ..held()
                },
                "events",
            ),
            (
                "PartialObjectMetadata for a list (the apiserver's 406)",
                format!("{CMS}?resourceVersion=0"),
                META,
                held(),
                "upstream",
            ),
            (
                "PartialObjectMetadataList for a get",
                format!("{CM}?resourceVersion=0"),
                META_LIST,
                held(),
                "upstream",
            ),
            ("PartialObjectMetadata for a watch", format!("{CMS}?watch=1"), META, held(), "events"),
            ("a Table kcache prints", format!("{CMS}?resourceVersion=0"), TABLE, held(), "latest limit=0"),
            (
                "a Table with an includeObject the apiserver refuses",
                format!("{CMS}?resourceVersion=0&includeObject=All"),
                TABLE,
                held(),
                "400",
            ),
            (
                "a Table kcache cannot print",
                format!("{CMS}?resourceVersion=0"),
                TABLE,
                Held {
                    printer: Printable::No,
                    ..held()
                },
                "upstream",
            ),
            (
                "a Table of object fields, metadata-only type",
                format!("{CMS}?resourceVersion=0"),
                TABLE,
                Held {
                    metadata_only: true,
                    ..held()
                },
                "upstream",
            ),
            (
                "a Table of metadata, metadata-only type",
                format!("{CMS}?resourceVersion=0"),
                TABLE,
                Held {
                    metadata_only: true,
                    printer: Printable::FromMetadata,
                    ..held()
                },
                "latest limit=0",
            ),
            (
                "a Table of metadata with whole objects, metadata-only type",
                format!("{CMS}?resourceVersion=0&includeObject=Object"),
                TABLE,
                Held {
                    metadata_only: true,
                    printer: Printable::FromMetadata,
                    ..held()
                },
                "upstream",
            ),
            ("options that do not parse: the 400", format!("{CMS}?labelSelector=a%20b%20c"), JSON, held(), "400"),
            ("options the apiserver refuses: the 422", format!("{CMS}?resourceVersionMatch=NotOlderThan"), JSON, held(), "422"),
            // LIST, by resourceVersion (docs/semantics.md, "LIST").
            ("LIST, RV unset", CMS.into(), JSON, held(), "consistent limit=0"),
            ("LIST, RV unset, limit", format!("{CMS}?limit=500"), JSON, held(), "consistent limit=500"),
            ("LIST, RV=0, limit ignored (L2)", format!("{CMS}?resourceVersion=0&limit=2"), JSON, held(), "latest limit=0"),
            (
                "LIST, RV=N: not older than N, waited for, the 504 after",
                format!("{CMS}?resourceVersion=5"),
                JSON,
                held(),
                "not older than 5 limit=0 else refused",
            ),
            (
                "LIST, RV=N with a limit: exactly N (L5)",
                format!("{CMS}?resourceVersion=5&limit=2"),
                JSON,
                held(),
                "exact 5 limit=2 else upstream",
            ),
            (
                "LIST, RV=N, NotOlderThan, limit: the wait's timeout goes upstream",
                format!("{CMS}?resourceVersion=5&resourceVersionMatch=NotOlderThan&limit=2"),
                JSON,
                held(),
                "not older than 5 limit=2 else upstream",
            ),
            (
                "LIST, RV=N, Exact",
                format!("{CMS}?resourceVersion=5&resourceVersionMatch=Exact"),
                JSON,
                held(),
                "exact 5 limit=0 else upstream",
            ),
            (
                "LIST, RV=N, Exact, a kcache index selector: the apiserver's error, not upstream",
                format!("{CMS}?resourceVersion=5&resourceVersionMatch=Exact&{LOCAL}"),
                JSON,
                held(),
                "exact 5 limit=0 else refused",
            ),
            (
                "LIST, RV=N before the first sync, a kcache index selector",
                format!("{CMS}?resourceVersion=5&{LOCAL}"),
                JSON,
                unsynced,
                "429",
            ),
            (
                "LIST, RV not a number: the upstream's own 500 or 400",
                format!("{CMS}?resourceVersion=abc"),
                JSON,
                held(),
                "upstream",
            ),
            (
                "LIST, RV not a number, a kcache index selector: v1.28's 500",
                format!("{CMS}?resourceVersion=abc&{LOCAL}"),
                JSON,
                held(),
                "500",
            ),
            (
                "LIST, a continue token",
                format!("{CMS}?continue={token}&limit=2"),
                JSON,
                held(),
                "continue limit=2 else upstream",
            ),
            (
                "LIST, a continue token beside RV=0 (tolerated)",
                format!("{CMS}?continue={token}&resourceVersion=0"),
                JSON,
                held(),
                "continue limit=0 else upstream",
            ),
            (
                "LIST, a continue token beside another RV",
                format!("{CMS}?continue={token}&resourceVersion=7"),
                JSON,
                held(),
                "400",
            ),
            ("LIST, a continue token kcache cannot read", format!("{CMS}?continue=garbage"), JSON, held(), "upstream"),
            (
                "LIST, a continue token kcache cannot read, a kcache index selector",
                format!("{CMS}?continue=garbage&{LOCAL}"),
                JSON,
                held(),
                "400",
            ),
            // GET, by resourceVersion (docs/semantics.md, "GET").
            ("GET, RV unset", CM.into(), JSON, held(), "consistent limit=0"),
            ("GET, RV=0", format!("{CM}?resourceVersion=0"), JSON, held(), "latest limit=0"),
            (
                "GET, RV=N: not older than N, the 504 after the wait",
                format!("{CM}?resourceVersion=5"),
                JSON,
                held(),
                "not older than 5 limit=0 else refused",
            ),
            // WATCH: only a consistent start is decided here; the rest is `watch::Start`'s.
            (
                "WATCH, initial events with RV unset and bookmarks: a consistent start (W6b)",
                format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
                JSON,
                held(),
                "consistent limit=0",
            ),
            ("WATCH, RV=0", format!("{CMS}?watch=1&resourceVersion=0"), JSON, held(), "events"),
            ("WATCH of one object", "/api/v1/watch/namespaces/ns/configmaps/a".to_string(), JSON, held(), "events"),
        ];
        let cache = cache_in(Scope::default());
        for (what, uri, accept, h, want) in rows {
            let got = decide_in(&cache, &uri, accept, h);
            assert_eq!(said(&got), want, "{what}: {uri} {got:?}");
        }
    }

    /// A cache restricted to a namespace or by selectors answers only reads inside it.
    #[test]
    fn reads_outside_a_restricted_cache_go_upstream() {
        let cache = cache_in(Scope {
            namespace: Some("ns".into()),
            label: crate::selector::LabelSelector::parse("app=x").unwrap(),
            field: crate::selector::FieldSelector::everything(),
        });
        let rows = [
            (
                "another namespace",
                "/api/v1/namespaces/other/configmaps?resourceVersion=0&labelSelector=app%3Dx"
                    .to_string(),
                "upstream",
            ),
            (
                "without the restriction's selector",
                format!("{CMS}?resourceVersion=0"),
                "upstream",
            ),
            (
                "inside",
                format!("{CMS}?resourceVersion=0&labelSelector=app%3Dx"),
                "latest limit=0",
            ),
            (
                "a kcache index selector outside",
                format!("{CMS}?resourceVersion=0&{LOCAL}"),
                "400",
            ),
            (
                "a GET in another namespace",
                "/api/v1/namespaces/other/configmaps/a?resourceVersion=0".into(),
                "upstream",
            ),
        ];
        for (what, uri, want) in rows {
            let got = decide_in(&cache, &uri, JSON, held());
            assert_eq!(said(&got), want, "{what}: {uri} {got:?}");
        }
    }
}
