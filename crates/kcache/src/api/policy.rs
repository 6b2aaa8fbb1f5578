//! Whether the cache can answer a read of a cached type, and if not, why: the read policy of
//! docs/semantics.md ("What is answered where", "Forwarding rules", "Representations") as one
//! function of what the request asks ([`Ask`]) and what the cache holds ([`Held`]).
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
//!    before the type's protobuf mirror has synced; `PartialObjectMetadata` for a list or
//!    `PartialObjectMetadataList` for a get or watch (the apiserver's 406); a Table of a type
//!    the cache cannot print, or that needs more than the metadata a metadata-only cache holds.
//! 5. Everything else is the cache's.
//!
//! A read that selects on a kcache index field is never forwarded: where rule 4 would forward
//! it, it is refused with a 400 naming the reason instead.
//!
//! What is decided later, per read, is in the modules that answer: whether a consistent read's
//! cache has caught up (`App::consistent`), whether a selector stays inside what a cache
//! restricted by selectors holds, and the resourceVersion rules: which state a LIST reads is
//! `list::ListRead::of`, one function of the request like this one, and whether the cache
//! holds that state is found when it is read; a watch's start is `watch::Start`.

use std::borrow::Cow;

use super::negotiate::Representation;
use crate::status::ApiError;

/// Which verb a read is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
}

/// What a read asks, as far as where it is answered depends on it.
#[derive(Debug, Clone)]
pub struct Ask {
    pub verb: Verb,
    /// The path names a namespace.
    pub in_namespace: bool,
    /// The path names an object (a GET, or a watch of one object).
    pub named: bool,
    /// What the `Accept` header asks for (see `negotiate`).
    pub representation: Representation,
    /// It selects on one of kcache's own index fields (only the cache can answer it).
    pub local: bool,
    /// A parameter or selector only the upstream can answer exactly, if any.
    pub upstream_only: Option<String>,
    /// A Table read asks for whole objects in its rows (`includeObject=Object`).
    pub include_object: bool,
}

/// What a Table read can be printed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printable {
    /// kcache has no printer for the type: the upstream prints it.
    No,
    /// Its columns read fields beyond the object's metadata.
    NeedsObject,
    /// Its columns read metadata only.
    FromMetadata,
}

/// What the cache of the type holds, as far as where a read is answered depends on it.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub namespaced: bool,
    pub synced: bool,
    /// Objects are cached as their metadata only.
    pub metadata_only: bool,
    /// The type's protobuf mirror has synced (looked at for protobuf reads only).
    pub mirror_ready: bool,
    /// Looked at for Table reads only.
    pub printer: Printable,
}

/// Where a read is answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// From the cache.
    Cache,
    /// Passed through to the upstream, for this reason (logged).
    Upstream(Cow<'static, str>),
    /// Refused by kcache: a read only the cache can answer, which it cannot.
    Refuse(ApiError),
}

/// Decide where a read is answered (see the module docs for the rules).
pub fn route(ask: &Ask, held: &Held) -> Route {
    // 1. The upstream's own 404 for a path outside the type's scope (G2).
    let scope_ok = if held.namespaced {
        ask.in_namespace || !ask.named
    } else {
        !ask.in_namespace
    };
    if !scope_ok {
        return Route::Upstream("the path is outside the type's scope".into());
    }
    // 2. Never stricter than the upstream.
    if !ask.local {
        if let Some(why) = &ask.upstream_only {
            return Route::Upstream(Cow::Owned(format!("only the upstream answers {why}")));
        }
    }
    // 3. Nothing to answer with before the first sync.
    if !held.synced && !ask.local {
        return Route::Upstream("the type has not synced yet".into());
    }
    // 4. Representations the cache does not produce.
    if let Some(why) = unservable(ask, held) {
        return elsewhere(ask.local, why);
    }
    Route::Cache
}

/// Where a read the cache cannot answer goes, for the reason `why`: upstream, unless it selects
/// on a kcache index field (`local`), which only the cache knows; then it is refused.
pub fn elsewhere(local: bool, why: &'static str) -> Route {
    if local {
        Route::Refuse(ApiError::BadRequest(format!(
            "field selectors on kcache indexes are answered from the cache only, and {why}"
        )))
    } else {
        Route::Upstream(why.into())
    }
}

/// Why the cache cannot produce the representation `ask` wants, if it cannot.
fn unservable(ask: &Ask, held: &Held) -> Option<&'static str> {
    use Representation::*;
    let r = ask.representation;
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
    let list = ask.verb == Verb::List;
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
        let needs_object = held.printer == Printable::NeedsObject || ask.include_object;
        if held.metadata_only && needs_object {
            return Some("this Table needs more than the metadata this resource caches");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use Representation as R;

    fn ask(verb: Verb) -> Ask {
        Ask {
            verb,
            in_namespace: true,
            named: verb == Verb::Get,
            representation: R::Json,
            local: false,
            upstream_only: None,
            include_object: false,
        }
    }

    fn held() -> Held {
        Held {
            namespaced: true,
            synced: true,
            metadata_only: false,
            mirror_ready: true,
            printer: Printable::NeedsObject,
        }
    }

    /// The route's kind: "cache", "upstream" or the refusal's HTTP code.
    fn kind(r: &Route) -> String {
        match r {
            Route::Cache => "cache".into(),
            Route::Upstream(_) => "upstream".into(),
            Route::Refuse(e) => e.code().to_string(),
        }
    }

    /// The rows of docs/semantics.md's tables that depend on the request's shape and the
    /// cache's state (not on resourceVersions), each as (what, ask, held, expected).
    #[test]
    fn the_policy_row_by_row() {
        let cases: Vec<(&str, Ask, Held, &str)> = vec![
            ("a list, json", ask(Verb::List), held(), "cache"),
            ("a get, json", ask(Verb::Get), held(), "cache"),
            ("a watch, json", ask(Verb::Watch), held(), "cache"),
            (
                "a get of a namespaced type without a namespace",
                Ask {
                    in_namespace: false,
                    ..ask(Verb::Get)
                },
                held(),
                "upstream",
            ),
            (
                "a list of a namespaced type across namespaces",
                Ask {
                    in_namespace: false,
                    ..ask(Verb::List)
                },
                held(),
                "cache",
            ),
            (
                "a cluster-scoped type with a namespace",
                ask(Verb::List),
                Held {
                    namespaced: false,
                    ..held()
                },
                "upstream",
            ),
            (
                "an unknown parameter",
                Ask {
                    upstream_only: Some("parameter \"x\"".into()),
                    ..ask(Verb::List)
                },
                held(),
                "upstream",
            ),
            (
                "an unknown parameter beside a kcache index selector",
                Ask {
                    upstream_only: Some("parameter \"x\"".into()),
                    local: true,
                    ..ask(Verb::List)
                },
                held(),
                "cache",
            ),
            (
                "before the first sync",
                ask(Verb::Watch),
                Held {
                    synced: false,
                    ..held()
                },
                "upstream",
            ),
            (
                "a kcache index selector before the first sync (the cache's 429)",
                Ask {
                    local: true,
                    ..ask(Verb::List)
                },
                Held {
                    synced: false,
                    ..held()
                },
                "cache",
            ),
            (
                "yaml",
                Ask {
                    representation: R::Upstream,
                    ..ask(Verb::Get)
                },
                held(),
                "upstream",
            ),
            (
                "yaml with a kcache index selector",
                Ask {
                    representation: R::Upstream,
                    local: true,
                    ..ask(Verb::List)
                },
                held(),
                "400",
            ),
            (
                "json of a metadata-only type",
                ask(Verb::Get),
                Held {
                    metadata_only: true,
                    ..held()
                },
                "upstream",
            ),
            (
                "PartialObjectMetadataList of a metadata-only type",
                Ask {
                    representation: R::PartialObjectMetadataList,
                    ..ask(Verb::List)
                },
                Held {
                    metadata_only: true,
                    ..held()
                },
                "cache",
            ),
            (
                "protobuf, mirror ready",
                Ask {
                    representation: R::Protobuf,
                    ..ask(Verb::Watch)
                },
                held(),
                "cache",
            ),
            (
                "protobuf, mirror not ready",
                Ask {
                    representation: R::Protobuf,
                    ..ask(Verb::List)
                },
                Held {
                    mirror_ready: false,
                    ..held()
                },
                "upstream",
            ),
            (
                "PartialObjectMetadata for a list (the apiserver's 406)",
                Ask {
                    representation: R::PartialObjectMetadata,
                    ..ask(Verb::List)
                },
                held(),
                "upstream",
            ),
            (
                "PartialObjectMetadataList for a get",
                Ask {
                    representation: R::PartialObjectMetadataList,
                    ..ask(Verb::Get)
                },
                held(),
                "upstream",
            ),
            (
                "PartialObjectMetadata for a watch",
                Ask {
                    representation: R::PartialObjectMetadata,
                    ..ask(Verb::Watch)
                },
                held(),
                "cache",
            ),
            (
                "a Table kcache prints",
                Ask {
                    representation: R::Table,
                    ..ask(Verb::List)
                },
                held(),
                "cache",
            ),
            (
                "a Table kcache cannot print",
                Ask {
                    representation: R::Table,
                    ..ask(Verb::List)
                },
                Held {
                    printer: Printable::No,
                    ..held()
                },
                "upstream",
            ),
            (
                "a Table of object fields, metadata-only type",
                Ask {
                    representation: R::Table,
                    ..ask(Verb::List)
                },
                Held {
                    metadata_only: true,
                    ..held()
                },
                "upstream",
            ),
            (
                "a Table of metadata, metadata-only type",
                Ask {
                    representation: R::Table,
                    ..ask(Verb::List)
                },
                Held {
                    metadata_only: true,
                    printer: Printable::FromMetadata,
                    ..held()
                },
                "cache",
            ),
            (
                "a Table of metadata with whole objects, metadata-only type",
                Ask {
                    representation: R::Table,
                    include_object: true,
                    ..ask(Verb::List)
                },
                Held {
                    metadata_only: true,
                    printer: Printable::FromMetadata,
                    ..held()
                },
                "upstream",
            ),
        ];
        for (what, a, h, want) in cases {
            let got = route(&a, &h);
            assert_eq!(kind(&got), want, "{what}: {got:?}");
        }
    }
}
