//! A GET, LIST or WATCH of a cached type, in three steps, in this order:
//!
//! 1. [`plan`]: the request and the cache's state become a [`Planned`] read: passed through,
//!    refused with a Status, or answered from the cache in a given representation. The rules
//!    are [`policy::route`]'s (the table of docs/semantics.md); this step only gathers what they
//!    ask about (the verb, the representation, a printer for Tables, the protobuf mirror).
//! 2. [`authorize`]: the caller's permission, asked of the upstream's authorizer before
//!    anything of the cache is looked at, a refusal included (which would otherwise tell an
//!    unauthorized caller about the cache). A read passed through is authorized upstream.
//! 3. Rendering ([`render_get`], [`render_watch`], [`render_list`]): the answer from the
//!    cache's state. What the cache only finds out while reading (a continue token of
//!    another kcache, a watch needing a protobuf bookmark it has not seen) still goes upstream
//!    from here, through [`policy::elsewhere`].

use std::sync::Arc;

use http::header;

use super::consistent::{mark_unconfirmed, Consistency, Read};
use super::filter::Filter;
use super::negotiate::{negotiate_with, Representation};
use super::params::{self, GetOptions, ListOptions};
use super::policy::{self, Verb};
use super::{field_selector, get, list, names_index_field, response, route, watch};
use super::{Answer, App, Form};
use crate::auth::{Attributes, Caller};
use crate::cache::{Mirror, ResourceCache};
use crate::selector::FieldSelector;
use crate::status::ApiError;
use crate::table::{IncludeObject, Printer};

/// A read of a cached type: planned, authorized, then rendered (see the module docs).
pub(super) async fn from_cache(
    app: &App,
    req: &http::request::Parts,
    path: route::ResourcePath,
    q: &[(String, String)],
    caller: &Caller,
    cache: &Arc<ResourceCache>,
) -> Result<Answer, ApiError> {
    let read = match plan(app, req, &path, q, cache).await {
        Planned::Upstream => return Ok(Answer::Upstream),
        Planned::Refused { verb, error } => {
            authorize(app, caller, verb, &path, cache).await?;
            return Err(error);
        }
        Planned::Cache(read) => read,
    };
    authorize(app, caller, read.verb, &path, cache).await?;
    match read.verb {
        Verb::Get => render_get(app, &read, path, q, cache).await,
        Verb::Watch | Verb::List => {
            let Some((opts, filter)) = list_options(&path, q, cache)? else {
                return read.elsewhere("this request reaches outside what is cached");
            };
            if read.verb == Verb::Watch {
                render_watch(app, &read, opts, filter, cache).await
            } else {
                render_list(app, &read, opts, filter, cache).await
            }
        }
    }
}

/// Where a read is answered, as [`plan`] decided it.
enum Planned<'q> {
    /// By the upstream (the reason is logged).
    Upstream,
    /// By kcache with this error, once the caller is authorized for the read.
    Refused { verb: Verb, error: ApiError },
    /// From the cache.
    Cache(CacheRead<'q>),
}

/// What answering a read from the cache needs, found while planning it.
struct CacheRead<'q> {
    verb: Verb,
    /// The read selects on one of kcache's own index fields: the upstream would answer 400, so
    /// what the cache cannot answer is refused rather than passed through.
    local: bool,
    representation: Representation,
    /// The Table printer, for a Table read.
    printer: Option<Arc<Printer>>,
    /// The type's protobuf mirror, for a protobuf read.
    mirror: Option<Arc<Mirror>>,
    /// `includeObject` as the request gave it.
    include: Option<&'q str>,
    user_agent: Option<&'q str>,
}

impl CacheRead<'_> {
    /// How the answer is rendered.
    fn form(&self, pretty: bool) -> Result<Form<'_>, ApiError> {
        Ok(match (&self.printer, self.representation) {
            (Some(printer), _) => Form::Table {
                printer,
                include: IncludeObject::parse(self.include)?,
            },
            (None, Representation::Json) => Form::Json { pretty },
            (None, Representation::Protobuf) => match &self.mirror {
                Some(m) => Form::Protobuf(m),
                None => Form::Json { pretty },
            },
            (None, _) => Form::Metadata,
        })
    }

    /// What the cache finds it cannot answer once it reads (see [`policy::elsewhere`]).
    fn elsewhere(&self, why: &'static str) -> Result<Answer, ApiError> {
        match policy::elsewhere(self.local, why) {
            policy::Route::Refuse(e) => Err(e),
            _ => Ok(Answer::Upstream),
        }
    }
}

/// Step 1: gather what [`policy::route`] asks about and ask it.
async fn plan<'q>(
    app: &App,
    req: &'q http::request::Parts,
    path: &route::ResourcePath,
    q: &'q [(String, String)],
    cache: &Arc<ResourceCache>,
) -> Planned<'q> {
    let info = &cache.info;
    let is_watch = path.legacy_watch
        || q.iter()
            .find(|(k, _)| k == "watch")
            .is_some_and(|(_, v)| v != "0" && !v.eq_ignore_ascii_case("false"));
    let verb = match (&path.name, is_watch) {
        (_, true) => Verb::Watch,
        (Some(_), false) => Verb::Get,
        (None, false) => Verb::List,
    };
    // A selector on a configured index field is kcache's own: the upstream would answer 400, so
    // such a request is never forwarded; where the cache cannot answer it, it gets an error.
    // Parsed here once for both checks.
    let field_selector = field_selector(q);
    let local = names_index_field(field_selector.as_ref(), cache);
    let header = |h: header::HeaderName| req.headers.get(h).and_then(|v| v.to_str().ok());
    let representation = negotiate_with(header(header::ACCEPT), app.mirrors.servable(cache));
    let include = q
        .iter()
        .find(|(k, _)| k == "includeObject")
        .map(|(_, v)| v.as_str());
    let ask = policy::Ask {
        verb,
        in_namespace: path.namespace.is_some(),
        named: path.name.is_some(),
        representation,
        local,
        upstream_only: upstream_only(q, field_selector.as_ref(), cache, verb != Verb::Get),
        include_object: include == Some("Object"),
    };
    // Only what this read's representation needs is looked up: a printer (its columns may
    // come from the upstream once per type).
    let printer = match representation {
        Representation::Table => app.printer(cache).await,
        _ => None,
    };
    let mut held = policy::Held {
        namespaced: info.namespaced,
        synced: cache.is_synced(),
        metadata_only: cache.strip().metadata_only,
        mirror_ready: true,
        printer: match &printer {
            None => policy::Printable::No,
            Some(p) if p.reads_only_metadata() => policy::Printable::FromMetadata,
            Some(_) => policy::Printable::NeedsObject,
        },
    };
    let mut route = policy::route(&ask, &held);
    // The protobuf mirror (a second upstream list and watch of the type) is started by the
    // first protobuf read the cache would otherwise answer, so the policy is asked first as if
    // it were ready; a read that goes upstream for another reason starts none.
    let mirror = match (representation, &route) {
        (Representation::Protobuf, policy::Route::Cache) => {
            let mirror = app.mirrors.ready(cache);
            if mirror.is_none() {
                held.mirror_ready = false;
                route = policy::route(&ask, &held);
            }
            mirror
        }
        _ => None,
    };
    match route {
        policy::Route::Upstream(why) => {
            tracing::debug!(resource = %info, %why, "forwarded");
            Planned::Upstream
        }
        policy::Route::Refuse(error) => Planned::Refused { verb, error },
        policy::Route::Cache => Planned::Cache(CacheRead {
            verb,
            local,
            representation,
            printer,
            mirror,
            include,
            user_agent: header(header::USER_AGENT),
        }),
    }
}

/// Step 2: the cache holds what kcache may read; the caller may read only what the
/// upstream's authorizer allows them.
async fn authorize(
    app: &App,
    caller: &Caller,
    verb: Verb,
    path: &route::ResourcePath,
    cache: &ResourceCache,
) -> Result<(), ApiError> {
    let info = &cache.info;
    app.auth
        .authorize(
            caller,
            &Attributes {
                verb: match verb {
                    Verb::Get => "get",
                    Verb::List => "list",
                    Verb::Watch => "watch",
                },
                group: &info.group,
                version: &path.version,
                resource: &info.resource,
                namespace: path.namespace.as_deref(),
                name: path.name.as_deref(),
            },
        )
        .await?;
    Ok(())
}

/// A GET of one object.
async fn render_get(
    app: &App,
    read: &CacheRead<'_>,
    path: route::ResourcePath,
    q: &[(String, String)],
    cache: &Arc<ResourceCache>,
) -> Result<Answer, ApiError> {
    let ns = path.namespace.as_deref();
    if !cache
        .scope
        .covers(ns, &cache.scope.label, &cache.scope.field)
    {
        return Ok(Answer::Upstream);
    }
    let name = path.name.as_deref().unwrap_or_default();
    let opts = GetOptions::parse(q);
    let consistency = match opts.resource_version {
        None => Some(app.consistent(cache, Read::Get).await?),
        Some(_) => None,
    };
    let key = match ns {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    let pretty = response::wants_pretty(opts.pretty, read.user_agent);
    let answer = get::get(
        cache,
        &key,
        name,
        &opts,
        consistency.is_some_and(Consistency::answered_by_cache),
        app.rv_wait,
        read.form(pretty)?,
    )
    .await;
    mark_unconfirmed(answer, consistency)
}

/// The options and filter of a LIST or WATCH, or `None` when it reaches outside what the
/// cache holds (its configured scope).
fn list_options(
    path: &route::ResourcePath,
    q: &[(String, String)],
    cache: &ResourceCache,
) -> Result<Option<(ListOptions, Filter)>, ApiError> {
    let info = &cache.info;
    let mut opts = ListOptions::parse(q, info, &cache.indexes, path.legacy_watch)?;
    if let Some(name) = &path.name {
        // `.../NAME?watch=1`: a watch of one object.
        let mut sel = opts.field.to_string();
        if !sel.is_empty() {
            sel.push(',');
        }
        sel.push_str(&format!("metadata.name={name}"));
        opts.field = FieldSelector::parse(&sel).map_err(|e| ApiError::BadRequest(e.message))?;
    }
    let ns = path.namespace.clone();
    if !cache.scope.covers(ns.as_deref(), &opts.label, &opts.field) {
        return Ok(None);
    }
    let filter = Filter {
        namespace: if info.namespaced { ns } else { None },
        label: opts.label.clone(),
        field: opts.field.clone(),
        indexed: opts.indexed.clone(),
    };
    Ok(Some((opts, filter)))
}

/// A WATCH.
async fn render_watch(
    app: &App,
    read: &CacheRead<'_>,
    opts: ListOptions,
    filter: Filter,
    cache: &Arc<ResourceCache>,
) -> Result<Answer, ApiError> {
    let stopping = app.stopping.subscribe();
    let encoding = match (read.form(false)?, read.printer.clone(), &read.mirror) {
        (Form::Table { include, .. }, Some(printer), _) => {
            watch::Encoding::Table { printer, include }
        }
        (Form::Metadata, _, _) => watch::Encoding::Metadata,
        (Form::Protobuf(_), _, Some(mirror)) => {
            // The end-of-initial-events bookmark is made from the kind's empty object as the
            // upstream encodes it; until an upstream bookmark has shown it, the upstream
            // answers the watches that need one.
            let initial = opts
                .send_initial_events
                .unwrap_or(matches!(opts.resource_version.as_deref(), None | Some("0")));
            if opts.allow_bookmarks && initial && mirror.bookmark_object().is_none() {
                return read.elsewhere("no protobuf bookmark object of this kind seen yet");
            }
            watch::Encoding::Protobuf(mirror.clone())
        }
        _ => watch::Encoding::Json,
    };
    // A watch whose end bookmark promises a consistent state (initial events with
    // resourceVersion unset: W6b) is served from the cache only once it has reached the
    // upstream's current revision; otherwise the upstream answers it, bookmark and all.
    let initial = opts
        .send_initial_events
        .unwrap_or(opts.resource_version.is_none());
    // While the upstream cannot be reached at all, such a watch is served as a consistent
    // list would be then: unconfirmed, marked, within the staleness bound.
    let consistency = if initial && opts.allow_bookmarks && opts.resource_version.is_none() {
        let whole = list::expected_objects(cache, &filter);
        Some(app.consistent(cache, Read::list(whole, 0)).await?)
    } else {
        None
    };
    if consistency == Some(Consistency::Upstream) && !read.local {
        return Ok(Answer::Upstream);
    }
    let resp = watch::watch(
        cache.clone(),
        filter,
        &opts,
        &app.watch,
        stopping,
        encoding,
        &app.metrics,
    )
    .await;
    mark_unconfirmed(resp.map(Answer::Ready), consistency)
}

/// A LIST.
async fn render_list(
    app: &App,
    read: &CacheRead<'_>,
    opts: ListOptions,
    filter: Filter,
    cache: &Arc<ResourceCache>,
) -> Result<Answer, ApiError> {
    let pretty = response::wants_pretty(opts.pretty, read.user_agent);
    // A consistent read, sized: what forwarding it would cost bounds its wait.
    let consistent = (opts.resource_version.is_none() && opts.continue_token.is_none())
        .then(|| Read::list(list::expected_objects(cache, &filter), opts.limit));
    let consistency = match consistent {
        Some(read) => Some(app.consistent(cache, read).await?),
        None => None,
    };
    let answer = list::list(
        cache,
        filter,
        &opts,
        consistency.is_some_and(Consistency::answered_by_cache),
        app.rv_wait,
        read.form(pretty)?,
        read.local,
        &app.limits,
        app.upstream.version().token_form(),
    )
    .await;
    match answer {
        Ok(Answer::Upstream) if consistency == Some(Consistency::Upstream) => {
            Ok(app.forward_timed(cache, consistent.map_or(0, Read::objects)))
        }
        answer => mark_unconfirmed(answer, consistency),
    }
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
