//! The HTTP face of kcache: decides per request whether the cache answers (LIST, GET, WATCH of
//! a cached resource, asking for plain JSON) or the upstream does (everything else), and
//! answers exactly as kube-apiserver would.
//!
//! Why one file of this length: the request entry (`handle`), what it gathers for the read
//! policy (`policy::route`) and the dispatch to the verb modules; the read policy,
//! consistency, lists, gets and watches are each their own module.

pub mod admin;
mod admission;
mod consistent;
mod filter;
#[doc(hidden)]
pub mod fuzzing;
mod get;
mod indexes;
mod list;
mod negotiate;
mod params;
mod plan;
mod policy;
mod protobuf;
mod proxy;
mod response;
mod route;
mod staleness;
mod watch;
mod watch_body;

pub use crate::continue_token::ContinueToken;
use consistent::{mark_unconfirmed, Consistency, Read};
pub use consistent::{ConsistentReads, UNCONFIRMED_HEADER};
pub use filter::Filter;
pub use negotiate::{negotiate, negotiate_with, Representation};
pub use protobuf::Mirrors;
pub use staleness::{Staleness, CACHE_AGE_HEADER};
pub use watch::WatchConfig;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::get as get_route;
use axum::Router;
use http::{header, Method};

use crate::auth::{Attributes, Auth, Caller, Forward};
use crate::cache::{Registry, ResourceCache};
use crate::error::Report;
use crate::limits::Limits;
use crate::metrics::{self, Metrics};
use crate::selector::FieldSelector;
use crate::status::ApiError;
use crate::table::{IncludeObject, Printer};
use crate::upstream::{collection_path, RevisionProbe, Upstream};
use params::{GetOptions, ListOptions};
use policy::Verb;

/// Everything a request handler needs.
pub struct App {
    pub registry: Registry,
    pub upstream: Upstream,
    /// The upstream's current revision, one probe per cached collection (keyed by
    /// [`collection_path`]), each listing its own collection first (see [`RevisionProbe`]).
    pub probes: std::collections::HashMap<String, Arc<RevisionProbe>>,
    /// Table printers, built on first use from the upstream's column definitions.
    pub printers: dashmap::DashMap<(String, String), Arc<Printer>>,
    pub watch: WatchConfig,
    pub consistent: ConsistentReads,
    /// What consistent reads get while the upstream cannot confirm the cache is current.
    pub staleness: Staleness,
    /// How long reads wait for the cache to reach a requested resourceVersion (the
    /// apiserver's 3 s before its 504).
    pub rv_wait: Duration,
    /// Set when the server is shutting down: readiness fails and watches end cleanly so their
    /// clients re-watch against another replica.
    pub stopping: tokio::sync::watch::Sender<bool>,
    pub auth: Auth,
    pub limits: Arc<Limits>,
    /// This kcache's metrics, served on the admin listener's `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The protobuf mirrors of the cached types that clients read in protobuf.
    pub mirrors: Mirrors,
    /// How long caches take to reach a probed revision, over every type: what a type that has
    /// not measured its own may expect (see docs/semantics.md, "Consistent reads").
    pub catch_up: crate::latency::LatencyEstimate,
    /// Work no reader waits on (see [`crate::background`]): rendering `/metrics`, which walks
    /// every cached object to estimate its memory.
    pub(crate) background: crate::background::Background,
}

impl App {
    /// The Table printer of a resource; None when the upstream's columns cannot be had or
    /// kcache cannot fill them (then the upstream answers Table requests itself).
    async fn printer(&self, cache: &ResourceCache) -> Option<Arc<Printer>> {
        let key = (cache.info.group.clone(), cache.info.resource.clone());
        if let Some(p) = self.printers.get(&key) {
            return p.supported().then(|| p.clone());
        }
        let columns = match self.upstream.table_columns(&collection_path(cache)).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(resource = %cache.info, error = %Report(&e), "no Table columns from upstream");
                return None;
            }
        };
        let crd_columns = if cache.info.custom {
            let info = &cache.info;
            match self
                .upstream
                .crd_printer_columns(&info.group, &info.resource, &info.version)
                .await
            {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::debug!(resource = %cache.info, error = %Report(&e), "no CRD printer columns");
                    return None;
                }
            }
        } else {
            None
        };
        let printer = Arc::new(Printer::new(&key.0, &key.1, columns, crd_columns.as_ref()));
        if let Some(reason) = printer.unsupported_reason() {
            tracing::info!(resource = %cache.info, %reason, "Table requests go upstream");
        }
        self.printers.insert(key, printer.clone());
        printer.supported().then_some(printer)
    }
}

/// How an answer from the cache is rendered (from the request's Accept header).
#[derive(Clone, Copy)]
pub enum Form<'a> {
    /// The objects as JSON: the typed or CR list, the object (indented for humans when
    /// `pretty`).
    Json { pretty: bool },
    /// A `meta.k8s.io/v1` Table, as `kubectl get` asks for.
    Table {
        printer: &'a Printer,
        include: IncludeObject,
    },
    /// PartialObjectMetadata(List), as metadata informers ask for.
    Metadata,
    /// Kubernetes protobuf, the upstream's bytes from the type's mirror.
    Protobuf(&'a crate::cache::Mirror),
}

/// What a cache handler decided.
pub enum Answer {
    Ready(Response),
    /// The cache cannot answer this exactly; forward it.
    Upstream,
}

/// The API router: the index endpoints, and everything else through [`handle`]; all API
/// handlers start with `admission::admit`. kcache's own health and metrics are on the
/// [`admin::router`]; here `/livez`, `/readyz`, `/healthz` and `/metrics` are the upstream's.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(
            "/apis/kcache.dev/v1/indexes",
            get_route(indexes::list_indexes),
        )
        .route(
            "/apis/kcache.dev/v1/indexes/{group}/{version}/{resource}/{index}",
            get_route(indexes::query),
        )
        .route(
            "/apis/kcache.dev/v1/indexes/{group}/{version}/{resource}/{index}/counts",
            get_route(indexes::counts),
        )
        .fallback(handle)
        .with_state(app)
}

/// Serve one request from the cache when it can be answered exactly, else forward it.
pub async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let started = std::time::Instant::now();
    let (parts, body) = req.into_parts();
    // First: every limit and decision after it is per caller.
    let caller = match admission::admit(&app, &parts.headers, &parts.extensions).await {
        Ok(c) => c,
        Err(refused) => return refused,
    };
    let path = route::parse(parts.uri.path());
    let q = params::parse_query(parts.uri.query());
    let verb = verb_of(&parts, path.as_ref(), &q);
    // Label only cached resources by name: arbitrary paths must not create label values.
    let resource = path
        .as_ref()
        .filter(|p| {
            app.registry
                .get(&p.group, &p.version, &p.resource)
                .is_some()
        })
        .map_or("other", |p| p.resource.as_str())
        .to_string();
    let m = &app.metrics;
    let inflight = m
        .inflight
        .get_or_create_owned(&metrics::VerbLabels { verb });
    inflight.inc();
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let gzip = response::accepts_gzip(
        parts
            .headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok()),
    );
    // Watches hold a slot for as long as their response body lives.
    let slot = if verb == "watch" {
        match app.limits.watch(&caller.limit_key) {
            Ok(s) => Some(s),
            Err(e) => {
                inflight.dec();
                return response::error(&e);
            }
        }
    } else {
        None
    };
    // kcache's own errors are encoded as the apiserver would have encoded the answer: in
    // protobuf where kcache answers protobuf (a built-in type whose reader asked for protobuf
    // first, with protobuf on: E9).
    let protobuf_errors = path
        .as_ref()
        .and_then(|p| app.registry.get(&p.group, &p.version, &p.resource))
        .is_some_and(|c| {
            negotiate_with(
                parts
                    .headers
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok()),
                app.mirrors.servable(c),
            ) == Representation::Protobuf
        });
    let impersonating = admission::impersonates(&parts.headers);
    let cached = if impersonating {
        Ok(Answer::Upstream)
    } else {
        serve_from_cache(&app, &parts, path, q, &caller, protobuf_errors).await
    };
    let (resp, source) = match cached {
        // Large cached lists and objects are gzipped for clients that accept it; watches never
        // (the upstream's own answers come back as it encoded them).
        Ok(Answer::Ready(resp)) if gzip && verb != "watch" => {
            (response::gzip_if_large(resp).await, "cache")
        }
        Ok(Answer::Ready(resp)) => (resp, "cache"),
        Ok(Answer::Upstream)
            if impersonating && matches!(caller.forward, Forward::Impersonate(_)) =>
        {
            // kcache already impersonates this caller; nesting would lend it kcache's own
            // impersonation rights.
            (
                response::error(&ApiError::Forbidden {
                    group: String::new(),
                    resource: "users".into(),
                    name: None,
                    message: format!(
                        "User {:?} cannot impersonate through kcache with a client certificate; \
                         use a bearer token",
                        caller.name()
                    ),
                }),
                "cache",
            )
        }
        Ok(Answer::Upstream) => (
            proxy::forward(
                &app.upstream,
                Request::from_parts(parts, body),
                &caller.forward,
                &app.limits,
            )
            .await,
            "upstream",
        ),
        Err(e) => (response::error_as(&e, protobuf_errors), "cache"),
    };
    inflight.dec();
    let resp = match slot {
        // Refused watches are whole Status bodies (sized, as the apiserver sends them) and
        // hold no slot.
        Some(slot) if resp.status().is_success() => resp.map(|b| {
            // The slot is released when the body (the watch stream) is dropped.
            axum::body::Body::new(http_body_util::BodyExt::map_frame(b, move |f| {
                let _ = &slot;
                f
            }))
        }),
        _ => resp,
    };
    let code = resp.status().as_u16();
    m.request(verb, &resource, code, source, started.elapsed());
    m.response_content_type(
        resp.headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        source,
    );
    tracing::debug!(%method, %uri, code, source, ms = started.elapsed().as_millis() as u64, "request");
    resp
}

/// The verb of a request, as the apiserver names them (`list`, `watch`, `get`, `create`, …).
fn verb_of(
    req: &http::request::Parts,
    path: Option<&route::ResourcePath>,
    q: &[(String, String)],
) -> &'static str {
    let watch_param = q
        .iter()
        .any(|(k, v)| k == "watch" && v != "0" && !v.eq_ignore_ascii_case("false"));
    match (&req.method, path) {
        (&Method::GET, Some(p)) if p.legacy_watch || watch_param => "watch",
        (&Method::GET, Some(p)) if p.name.is_some() => "get",
        (&Method::GET, Some(_)) => "list",
        (&Method::POST, Some(_)) => "create",
        (&Method::PUT, Some(_)) => "update",
        (&Method::PATCH, Some(_)) => "patch",
        (&Method::DELETE, Some(_)) => "delete",
        _ => "other",
    }
}

/// `path` and `q` are the request's parsed path and query (parsed once, in [`handle`]).
async fn serve_from_cache(
    app: &App,
    req: &http::request::Parts,
    path: Option<route::ResourcePath>,
    q: Vec<(String, String)>,
    caller: &Caller,
    protobuf_errors: bool,
) -> Result<Answer, ApiError> {
    if req.method != Method::GET {
        return Ok(Answer::Upstream);
    }
    let Some(path) = path else {
        return Ok(Answer::Upstream);
    };
    if path.subresource.is_some() {
        return Ok(Answer::Upstream);
    }
    let Some(cache) = app.registry.get(&path.group, &path.version, &path.resource) else {
        return Ok(Answer::Upstream);
    };
    if cache.budget().is_over() {
        return over_budget(&q, cache);
    }
    let answer = from_cache(app, req, path, &q, caller, cache).await;
    // Checked again after the cache was read: a type that went over its budget meanwhile may
    // have been read emptied, so whatever was made of it is dropped, unsent (see
    // `ResourceCache::is_over_budget`). A watch's stream checks for itself as it goes.
    if cache.budget().is_over() {
        return over_budget(&q, cache);
    }
    // Whatever the cache answers from here on, errors included, carries its age.
    Ok(staleness::stamp(answer, cache, protobuf_errors))
}

/// A read of a type that went over its memory budget: passed through to the upstream as a
/// read of an uncached type is, except one selecting on a kcache index field, which the
/// upstream does not know and kcache can no longer answer.
fn over_budget(q: &[(String, String)], cache: &ResourceCache) -> Result<Answer, ApiError> {
    if names_index_field(field_selector(q).as_ref(), cache) {
        return Err(over_budget_error(cache));
    }
    Ok(Answer::Upstream)
}

/// What kcache answers for what only its cache of a type over budget could answer (its
/// indexes).
fn over_budget_error(cache: &ResourceCache) -> ApiError {
    ApiError::OverBudget {
        group: cache.info.group.clone(),
        resource: cache.info.resource.clone(),
        budget: cache.budget().limit().unwrap_or(0),
    }
}

/// [`serve_from_cache`] once the resource is known to be cached.
async fn from_cache(
    app: &App,
    req: &http::request::Parts,
    path: route::ResourcePath,
    q: &[(String, String)],
    caller: &Caller,
    cache: &Arc<ResourceCache>,
) -> Result<Answer, ApiError> {
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
    let include_param = q
        .iter()
        .find(|(k, _)| k == "includeObject")
        .map(|(_, v)| v.as_str());
    let metadata_only = cache.strip().metadata_only;
    let ask = policy::Ask {
        verb,
        in_namespace: path.namespace.is_some(),
        named: path.name.is_some(),
        representation,
        local,
        upstream_only: upstream_only(q, field_selector.as_ref(), cache, verb != Verb::Get),
        include_object: include_param == Some("Object"),
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
        metadata_only,
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
    let refusal = match route {
        policy::Route::Cache => None,
        policy::Route::Upstream(why) => {
            tracing::debug!(resource = %info, %why, "forwarded");
            return Ok(Answer::Upstream);
        }
        policy::Route::Refuse(e) => Some(e),
    };
    // The cache holds what kcache may read; the caller may read only what the upstream's
    // authorizer allows them, asked before anything of the cache is looked at (and before a
    // refusal, which would otherwise tell an unauthorized caller about the cache).
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
    if let Some(e) = refusal {
        return Err(e);
    }
    // What the cache finds it cannot answer from here on (see `policy::elsewhere`).
    let forward = |why: &'static str| match policy::elsewhere(local, why) {
        policy::Route::Refuse(e) => Err(e),
        _ => Ok(Answer::Upstream),
    };
    let user_agent = header(header::USER_AGENT);
    let ns = path.namespace.clone();

    let form = |pretty: bool| -> Result<Form<'_>, ApiError> {
        Ok(match (&printer, representation) {
            (Some(printer), _) => Form::Table {
                printer,
                include: IncludeObject::parse(include_param)?,
            },
            (None, Representation::Json) => Form::Json { pretty },
            (None, Representation::Protobuf) => match &mirror {
                Some(m) => Form::Protobuf(m),
                None => Form::Json { pretty },
            },
            (None, _) => Form::Metadata,
        })
    };
    if let (Some(name), false) = (&path.name, is_watch) {
        if !cache
            .scope
            .covers(ns.as_deref(), &cache.scope.label, &cache.scope.field)
        {
            return Ok(Answer::Upstream);
        }
        let opts = GetOptions::parse(q);
        let consistency = match opts.resource_version {
            None => Some(app.consistent(cache, Read::Get).await?),
            Some(_) => None,
        };
        let key = match &ns {
            Some(ns) => format!("{ns}/{name}"),
            None => name.clone(),
        };
        let pretty = response::wants_pretty(opts.pretty, user_agent);
        let answer = get::get(
            cache,
            &key,
            name,
            &opts,
            consistency.is_some_and(Consistency::answered_by_cache),
            app.rv_wait,
            form(pretty)?,
        )
        .await;
        return mark_unconfirmed(answer, consistency);
    }

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
    if !cache.scope.covers(ns.as_deref(), &opts.label, &opts.field) {
        return forward("this request reaches outside what is cached");
    }
    let filter = Filter {
        namespace: if info.namespaced { ns } else { None },
        label: opts.label.clone(),
        field: opts.field.clone(),
        indexed: opts.indexed.clone(),
    };
    if opts.watch {
        let stopping = app.stopping.subscribe();
        let encoding = match (form(false)?, printer.clone(), &mirror) {
            (Form::Table { include, .. }, Some(printer), _) => {
                watch::Encoding::Table { printer, include }
            }
            (Form::Metadata, _, _) => watch::Encoding::Metadata,
            (Form::Protobuf(_), _, Some(mirror)) => {
                // The end-of-initial-events bookmark is made from the kind's empty object as
                // the upstream encodes it; until an upstream bookmark has shown it, the
                // upstream answers the watches that need one.
                let initial = opts
                    .send_initial_events
                    .unwrap_or(matches!(opts.resource_version.as_deref(), None | Some("0")));
                if opts.allow_bookmarks && initial && mirror.bookmark_object().is_none() {
                    return forward("no protobuf bookmark object of this kind seen yet");
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
            Some(app.consistent(cache, Read::List).await?)
        } else {
            None
        };
        if consistency == Some(Consistency::Upstream) && !local {
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
        return mark_unconfirmed(resp.map(Answer::Ready), consistency);
    }
    let pretty = response::wants_pretty(opts.pretty, user_agent);
    let consistency = if opts.resource_version.is_none() && opts.continue_token.is_none() {
        Some(app.consistent(cache, Read::List).await?)
    } else {
        None
    };
    let answer = list::list(
        cache,
        filter,
        &opts,
        consistency.is_some_and(Consistency::answered_by_cache),
        app.rv_wait,
        form(pretty)?,
        local,
        &app.limits,
        app.upstream.version().token_form(),
    )
    .await;
    mark_unconfirmed(answer, consistency)
}

/// The request's field selector, for deciding where it is answered; one that does not parse is
/// left to the options parser and its 400.
fn field_selector(q: &[(String, String)]) -> Option<FieldSelector> {
    q.iter()
        .find(|(k, _)| k == "fieldSelector")
        .and_then(|(_, v)| FieldSelector::parse(v).ok())
}

/// Whether the request's field selector names a configured field-path index of `cache` (a CRD
/// selectable field of the same name is the upstream's, not kcache's own).
fn names_index_field(sel: Option<&FieldSelector>, cache: &ResourceCache) -> bool {
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
