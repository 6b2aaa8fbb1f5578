//! A request parsed once: [`Parsed`] is what [`super::handle`] reads of every request (its
//! verb, resource path and query), and [`ReadRequest`] what a GET, LIST or WATCH of a cached
//! type asks, with everything where and how it is answered depends on (the representation, the
//! selectors, the options and their resourceVersion rule). Every later step takes these and
//! derives nothing from the request again.
//!
//! Parsing never refuses: an option that does not parse is kept as the error the apiserver
//! would answer, which the read gets only once its caller is authorized and the cache is found
//! to be the one to answer it (`policy`); a request only the upstream can answer is forwarded
//! before any of that.

use http::header;

use super::filter::Filter;
use super::list_rule::ListRule;
use super::negotiate::{negotiate_with, Representation};
use super::params::{self, parse_query, GetOptions, ListOptions};
use super::route::{self, ResourcePath};
use crate::cache::ResourceCache;
use crate::selector::{escape_field_value, FieldSelector};
use crate::status::ApiError;
use crate::table::{IncludeObject, InvalidIncludeObject};

/// The verb of a request, as the apiserver names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    /// Not a resource path, or a method with no verb of its own.
    Other,
}

impl Verb {
    /// The verb's name in metrics and authorization attributes.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Other => "other",
        }
    }
}

/// What `super::handle` reads of every request, once.
pub struct Parsed {
    pub verb: Verb,
    /// The resource path; None for anything else (discovery, `/version`, …).
    pub path: Option<ResourcePath>,
    /// The decoded query pairs, in order.
    pub query: Vec<(String, String)>,
}

impl Parsed {
    pub fn parse(req: &http::request::Parts) -> Parsed {
        Parsed::with_path(req, route::parse(req.uri.path()))
    }

    /// [`Parsed::parse`] of a request whose path was parsed already (`route::parse`): to find
    /// its type before the rest is read.
    pub(crate) fn with_path(req: &http::request::Parts, path: Option<ResourcePath>) -> Parsed {
        let query = parse_query(req.uri.query());
        // Go's query reading: the first value of a repeated parameter counts.
        let watch_param = query
            .iter()
            .find(|(k, _)| k == "watch")
            .is_some_and(|(_, v)| v != "0" && !v.eq_ignore_ascii_case("false"));
        use http::Method;
        let verb = match (&req.method, &path) {
            // `?watch` watches a collection only: the apiserver's handler of a named object has
            // no watch (only the `/watch/` path watches one object), so a named GET with it
            // is a GET.
            (&Method::GET, Some(p)) if p.legacy_watch || (watch_param && p.name.is_none()) => {
                Verb::Watch
            }
            (&Method::GET, Some(p)) if p.name.is_some() => Verb::Get,
            (&Method::GET, Some(_)) => Verb::List,
            (&Method::POST, Some(_)) => Verb::Create,
            (&Method::PUT, Some(_)) => Verb::Update,
            (&Method::PATCH, Some(_)) => Verb::Patch,
            (&Method::DELETE, Some(_)) => Verb::Delete,
            _ => Verb::Other,
        };
        Parsed { verb, path, query }
    }

    /// The request as a read the cache of its type might answer: a GET, LIST or WATCH of the
    /// type itself (no subresource). None for anything else, which goes upstream. `protobuf`:
    /// whether kcache answers protobuf for the type.
    pub fn read<'r>(
        &'r self,
        headers: &'r http::HeaderMap,
        cache: &ResourceCache,
        protobuf: bool,
    ) -> Option<ReadRequest<'r>> {
        let path = self.path.as_ref()?;
        if path.subresource.is_some() || !matches!(self.verb, Verb::Get | Verb::List | Verb::Watch)
        {
            return None;
        }
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        let representation = negotiate_with(accept, protobuf);
        let mut read =
            ReadRequest::new(self.verb, path, &self.query, headers, cache, representation);
        read.json_after_protobuf = representation == Representation::Protobuf
            && negotiate_with(accept, false) == Representation::Json;
        Some(read)
    }
}

/// A GET, LIST or WATCH of a cached type, as parsed once.
pub struct ReadRequest<'r> {
    /// [`Verb::Get`], [`Verb::List`] or [`Verb::Watch`].
    pub verb: Verb,
    pub path: &'r ResourcePath,
    pub representation: Representation,
    /// A protobuf read whose client accepts JSON after protobuf (client-go's typed clients
    /// do): it can be answered in JSON from the cache while the type's protobuf mirror has not
    /// synced (`read::decide`).
    pub json_after_protobuf: bool,
    /// It selects on one of kcache's own index fields, which the upstream would refuse with a
    /// 400: such a read is never forwarded (`policy`).
    pub local: bool,
    /// A parameter or field selector only the upstream can answer exactly, if any.
    pub upstream_only: Option<String>,
    /// `includeObject` (looked at for Tables only), or the apiserver's 400 for its value.
    pub include: Result<IncludeObject, InvalidIncludeObject>,
    pub user_agent: Option<&'r str>,
    pub options: Options,
    /// Whether its namespace (and a LIST's or WATCH's selectors) stay inside what the cache
    /// holds: a cache restricted to a namespace or by selectors holds no more. True for
    /// options that do not parse, which are answered by their error first.
    pub within_scope: bool,
}

/// The options of a read, by verb.
pub enum Options {
    /// A GET: which state it reads, and `pretty`.
    Get(GetOptions),
    /// A LIST or WATCH: its options, filter and (for a LIST) resourceVersion rule; or the
    /// 400/422 that parsing them gives.
    List(Result<Box<Listing>, ApiError>),
}

/// The options of a LIST or WATCH, with what follows from them.
pub struct Listing {
    pub opts: ListOptions,
    /// The objects it selects.
    pub filter: Filter,
    /// Which state a LIST reads (its row of the LIST table; a watch's start is
    /// `watch::Start`'s, from the same options).
    pub rule: Result<ListRule, ApiError>,
}

impl<'r> ReadRequest<'r> {
    fn new(
        verb: Verb,
        path: &'r ResourcePath,
        q: &'r [(String, String)],
        headers: &'r http::HeaderMap,
        cache: &ResourceCache,
        representation: Representation,
    ) -> ReadRequest<'r> {
        // Parsed here once for every check and the options; one that does not parse is left
        // to the options and their 400.
        let field = q
            .iter()
            .find(|(k, _)| k == "fieldSelector")
            .map(|(_, v)| FieldSelector::parse(v));
        let parsed = field.as_ref().and_then(|f| f.as_ref().ok());
        let local = names_index_field(parsed, cache);
        let upstream_only = upstream_only(q, parsed, cache, verb != Verb::Get);
        let options = match verb {
            Verb::Get => Options::Get(GetOptions::parse(q)),
            _ => Options::List(listing(path, q, field, cache).map(Box::new)),
        };
        let scope = &cache.scope;
        let ns = path.namespace.as_deref();
        let within_scope = match &options {
            Options::Get(_) => scope.covers(ns, &scope.label, &scope.field),
            Options::List(Ok(l)) => scope.covers(ns, &l.opts.label, &l.opts.field),
            Options::List(Err(_)) => true,
        };
        ReadRequest {
            within_scope,
            verb,
            path,
            representation,
            json_after_protobuf: false,
            local,
            upstream_only,
            include: IncludeObject::parse(
                q.iter()
                    .find(|(k, _)| k == "includeObject")
                    .map(|(_, v)| v.as_str()),
            ),
            user_agent: headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
            options,
        }
    }
}

/// The options, filter and rule of a LIST or WATCH of `path`.
fn listing(
    path: &ResourcePath,
    q: &[(String, String)],
    field: Option<Result<FieldSelector, crate::selector::SelectorError>>,
    cache: &ResourceCache,
) -> Result<Listing, ApiError> {
    let info = &cache.info;
    let field = field
        .transpose()
        .map_err(|e| ApiError::BadRequest(e.message));
    let mut opts =
        ListOptions::parse_with_field(q, field, info, &cache.indexes, path.legacy_watch)?;
    if let Some(name) = &path.name {
        // `/watch/.../NAME`: a watch of one object, as the apiserver's handler makes it: the
        // object by its name (escaped: a name may hold `=`, `,` or `\`), or a field selector
        // of the client's that already requires exactly that name, else its 400.
        if opts.field.is_empty() {
            let sel = format!("metadata.name={}", escape_field_value(name));
            opts.field = FieldSelector::parse(&sel).map_err(|e| ApiError::BadRequest(e.message))?;
        } else if opts.field.requires_exact_match("metadata.name") != Some(name.as_str()) {
            return Err(ApiError::BadRequest(
                "fieldSelector metadata.name doesn't match requested name".into(),
            ));
        }
    }
    let filter = Filter {
        namespace: if info.namespaced {
            path.namespace.clone()
        } else {
            None
        },
        label: opts.label.clone(),
        field: opts.field.clone(),
        indexed: opts.indexed.clone(),
    };
    Ok(Listing {
        rule: ListRule::of(&opts),
        opts,
        filter,
    })
}

/// Whether the request's field selector names a configured field-path index of `cache` (a CRD
/// selectable field of the same name is the upstream's, not kcache's own).
pub(super) fn names_index_field(sel: Option<&FieldSelector>, cache: &ResourceCache) -> bool {
    sel.is_some_and(|s| {
        s.requirements().iter().any(|r| {
            cache.indexes.by_selectable_field(&r.field).is_none()
                && cache.indexes.by_selector_field(&r.field).is_some()
        })
    })
}

/// The query parameters kcache answers GET, LIST and WATCH with exactly: kube-apiserver
/// v1.28's ListOptions and GetOptions, `includeObject` of Table requests, `pretty`, and
/// `timeout`, which only bounds how long the server may work on the request.
const KNOWN_PARAMS: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "includeObject",
    "labelSelector",
    "limit",
    "pretty",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeout",
    "timeoutSeconds",
    "watch",
];

/// Why the cache cannot answer a request exactly, if it cannot: a parameter kcache does not
/// know (a newer apiserver may honour it), or, when the request selects (`selects`: a list or
/// watch), a field selector on a field kcache does not know for the kind (a newer apiserver
/// may select on it: Service `spec.type` since 1.30; or the CRD could not be read). A field
/// selector that does not parse stays kcache's 400: its syntax is the same on every version.
fn upstream_only(
    q: &[(String, String)],
    sel: Option<&FieldSelector>,
    cache: &ResourceCache,
    selects: bool,
) -> Option<String> {
    if let Some((k, _)) = q.iter().find(|(k, _)| !KNOWN_PARAMS.contains(&k.as_str())) {
        return Some(format!("parameter {k:?}"));
    }
    // Refused by every version, but with a 500 up to v1.33 and a 400 from v1.34 on: the
    // upstream's own answer is the exact one.
    if let Some((_, rv)) = q
        .iter()
        .find(|(k, v)| k == "resourceVersion" && !v.is_empty())
    {
        if params::parse_rv(rv).is_err() {
            return Some(format!("resourceVersion {rv:?} is not a number"));
        }
    }
    if !selects {
        return None;
    }
    let sel = sel?;
    let info = &cache.info;
    // A metadata-only cache can check metadata fields only.
    let metadata_only = cache.strip().metadata_only;
    sel.requirements()
        .iter()
        .find(|r| {
            let known = crate::selector::known_field(
                &r.field,
                &info.group,
                &info.resource,
                info.namespaced,
                info.custom,
            ) || cache.indexes.by_selectable_field(&r.field).is_some();
            !known || (metadata_only && !r.field.starts_with("metadata."))
        })
        .map(|r| format!("field selector on {:?}", r.field))
}
