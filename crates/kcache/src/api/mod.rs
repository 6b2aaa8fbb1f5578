//! The HTTP face of kcache: decides per request whether the cache answers (LIST, GET, WATCH of
//! a cached resource, asking for plain JSON) or the upstream does (everything else), and
//! answers exactly as kube-apiserver would.
//!
//! This module is the request entry (`handle`) and what every handler shares (`App`). A
//! request goes, in this order: admitted (`admission`), parsed once (`request`), and, for a
//! read of a cached type, decided by the rules of `policy`, authorized and read in `read`; the
//! answer is encoded by the module that reads (`list`, `get`, `watch`) with `response`.

pub mod admin;
mod admission;
pub(crate) mod audit;
mod consistent;
mod filter;
#[doc(hidden)]
pub mod fuzzing;
mod get;
mod indexes;
mod list;
mod list_rule;
mod negotiate;
mod params;
mod plan;
mod policy;
mod proof;
mod protobuf;
mod proxy;
mod read;
mod request;
mod response;
mod route;
mod shared_read;
mod staleness;
mod watch;
mod watch_body;

pub use crate::continue_token::ContinueToken;
pub(crate) use consistent::ConsistentReads;
pub use consistent::UNCONFIRMED_HEADER;
pub use filter::Filter;
pub use negotiate::{negotiate_with, Representation};
pub(crate) use protobuf::Mirrors;
use request::Verb;
pub(crate) use staleness::Staleness;
pub use staleness::CACHE_AGE_HEADER;
pub(crate) use watch::{Fanout, WatchConfig};

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::get as get_route;
use axum::Router;
use http::header;

use crate::auth::{Auth, Caller, Forward};
use crate::cache::ResourceCache;
use crate::limits::Limits;
use crate::metrics::{self, Metrics};
use crate::registry::{Registry, Served};
use crate::status::ApiError;
use crate::table::{IncludeObject, Printer};
use crate::upstream::Upstream;

/// Everything a request handler needs: made once by [`crate::server::start`], shared by every
/// handler and task. Its fields are the library's own; what
/// tests and tools read of a running kcache is [`App::registry`].
pub struct App {
    pub(crate) registry: Registry,
    pub(crate) upstream: Upstream,
    /// Lists and watches of uncached types, counted when on-demand caching is on (the
    /// library's `demand` module).
    pub(crate) demand: Option<crate::demand::Demand>,
    pub(crate) watch: WatchConfig,
    pub(crate) consistent: ConsistentReads,
    /// What consistent reads get while the upstream cannot confirm the cache is current.
    pub(crate) staleness: Staleness,
    /// How long reads wait for the cache to reach a requested resourceVersion (the
    /// apiserver's 3 s before its 504).
    pub(crate) rv_wait: Duration,
    /// Set when the server is shutting down: readiness fails and watches end cleanly so their
    /// clients re-watch against another replica.
    pub(crate) stopping: tokio::sync::watch::Sender<bool>,
    pub(crate) auth: Auth,
    pub(crate) limits: Arc<Limits>,
    /// This kcache's metrics, served on the admin listener's `/metrics`.
    pub(crate) metrics: Arc<Metrics>,
    /// The protobuf mirrors of the cached types that clients read in protobuf.
    pub(crate) mirrors: Mirrors,
    /// Work no reader waits on (see [`crate::background`]): rendering `/metrics` and
    /// `/status`, which walk every cached object to estimate its memory.
    pub(crate) background: crate::background::Background,
    /// When this kcache started: the uptime on the admin `/status`.
    pub(crate) started: std::time::Instant,
    /// Identical small consistent reads being forwarded, shared (`shared_read`).
    shared_reads: shared_read::SharedReads,
    /// The audit trail of what kcache answers (`audit` in the configuration), if kept.
    pub(crate) audit: Option<audit::Audit>,
    /// The tasks requests leave running after their answer (a consistent read's wait for its
    /// type to catch up, an upgraded connection's copy): shutdown waits for them, within its
    /// grace period, as it waits for the requests themselves.
    pub(crate) tasks: tokio_util::task::TaskTracker,
}

/// What an [`App`] takes from the configuration.
pub(crate) struct AppSettings {
    pub watch: WatchConfig,
    pub consistent: ConsistentReads,
    pub staleness: Staleness,
    /// How long reads wait for the cache to reach a requested resourceVersion.
    pub rv_wait: Duration,
    pub auth: crate::auth::AuthConfig,
    pub limits: crate::limits::LimitConfig,
    /// How the protobuf mirrors list and watch the upstream.
    pub reflector: crate::upstream::ReflectorConfig,
    /// Whether protobuf reads of built-in types are answered from the cache.
    pub protobuf: bool,
    /// The audit trail, when the configuration keeps one (started by [`crate::server::start`]).
    pub audit: Option<audit::Audit>,
}

impl App {
    /// The app of a kcache starting now: `registry` holds the configured types (each with its
    /// cache, if served, and its revision probe), `demand` the counts of on-demand caching
    /// (None when it is off).
    pub(crate) fn new(
        settings: AppSettings,
        upstream: Upstream,
        registry: Registry,
        metrics: Arc<Metrics>,
        background: crate::background::Background,
        demand: Option<crate::demand::Demand>,
    ) -> App {
        let (stopping, _) = tokio::sync::watch::channel(false);
        App {
            auth: Auth::new(settings.auth, upstream.clone(), metrics.clone()),
            limits: Limits::new(settings.limits, metrics.clone()),
            mirrors: Mirrors::new(upstream.clone(), settings.reflector, settings.protobuf),
            stopping,
            registry,
            upstream,
            demand,
            watch: settings.watch,
            consistent: settings.consistent,
            staleness: settings.staleness,
            rv_wait: settings.rv_wait,
            metrics,
            background,
            started: std::time::Instant::now(),
            shared_reads: Default::default(),
            audit: settings.audit,
            tasks: Default::default(),
        }
    }

    /// Every type kcache knows of, with its cache.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// What decides `read`, a consistent read of `served`'s type (`limit`: its page size), and
    /// forwards it when the upstream answers, with the type's probe and prover the request
    /// found with its cache.
    fn consistent_reader<'a>(
        &'a self,
        read: &request::ReadRequest<'_>,
        limit: i64,
        served: &'a Served,
    ) -> consistent::ConsistentReader<'a> {
        consistent::ConsistentReader::new(
            read,
            limit,
            served,
            &self.consistent,
            &self.metrics,
            &self.upstream,
            &self.staleness,
            &self.tasks,
        )
    }
}

/// How an answer from the cache is rendered (from the request's Accept header).
#[derive(Clone, Copy)]
pub(crate) enum Form<'a> {
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

/// How kcache answered a request: the `kcache.dev/answered-by` annotation of its audit
/// events. The read path marks its answers (a response extension) where the answer alone
/// does not tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnsweredBy {
    /// From the cache, at the state the request named (not a consistent read).
    Cache,
    /// A consistent read from the cache, shown current (by the upstream's revision or a proof
    /// by metadata).
    Proven,
    /// A consistent read from the cache while the upstream could not be reached to confirm it.
    Unconfirmed,
    /// The answer of an identical read another caller forwarded: the upstream never saw this
    /// caller's request.
    Shared,
    /// Forwarded under the caller's own identity: the upstream answered (and audits it).
    Upstream,
    /// kcache's own refusal (401, 403, 429, a 4xx for bad input, a 504 wait).
    Refused,
}

impl AnsweredBy {
    /// The annotation's value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Cache => "cache",
            AnsweredBy::Proven => "proven",
            AnsweredBy::Unconfirmed => "unconfirmed",
            AnsweredBy::Shared => "shared",
            AnsweredBy::Upstream => "upstream",
            AnsweredBy::Refused => "refused",
        }
    }
}

/// What a cache handler decided.
pub(crate) enum Answer {
    Ready(Response),
    /// The cache cannot answer this exactly; forward it.
    Upstream,
    /// A consistent read of a cached type to forward: shared with identical ones, timed
    /// (`consistent::Forwarded`).
    Consistent(consistent::Forwarded),
}

/// The API router: the index endpoints, and everything else through [`handle`]; all API
/// handlers start with `admission::admit`. kcache's own health and metrics are on the
/// [`admin::router`]; here `/livez`, `/readyz`, `/healthz` and `/metrics` are the upstream's.
pub(crate) fn router(app: Arc<App>) -> Router {
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
///
/// In order: admission (who calls, and their limits: every step after it is per caller), the
/// request's type found once by its path, the request parsed once (with its type's facts, as
/// the read the type's cache might answer), then the answer (from the cache, or forwarded),
/// and last what is recorded of it (audit, metrics, log).
pub(crate) async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let started = std::time::Instant::now();
    // When the request arrived, for its audit events (only where a trail is kept).
    let received = app.audit.as_ref().map(|_| std::time::SystemTime::now());
    let (parts, body) = req.into_parts();
    let caller = match admission::admit(&app, &parts.headers, &parts.extensions).await {
        Ok(c) => c,
        Err(r) => return refused(&app, received, &parts, r),
    };
    let impersonating = admission::impersonates(&parts.headers);
    // The type, found once by the request's path, and the request read once with its facts.
    let path = route::parse(parts.uri.path());
    let served = path
        .as_ref()
        .and_then(|p| app.registry.get(&p.group, &p.version, &p.resource));
    let cache = served.as_ref().map(|s| &s.cache);
    let parsed = request::Parsed::with_path(&parts, path);
    let read = served.as_ref().filter(|_| !impersonating).and_then(|s| {
        let protobuf = app.mirrors.servable(&s.cache);
        parsed.read(&parts.headers, &s.cache, protobuf)
    });
    let verb = parsed.verb;
    // What the audit trail says of the request, taken before the request is handed on.
    let audited = (app.audit.as_ref().zip(received))
        .and_then(|(a, received)| a.begin(received, &parts, &parsed, Some(&caller)));
    let inflight = in_flight(&app, verb);
    // Watches hold a slot for as long as their response body lives.
    let slot = match (verb == Verb::Watch).then(|| app.limits.watch(&caller.limit_key)) {
        Some(Err(e)) => return response::error(&e),
        slot => slot.and_then(Result::ok),
    };
    let from_cache = match (read, &served) {
        (Some(read), Some(served)) => read_cache(&app, &read, served, &caller).await,
        _ => FromCache::default(),
    };
    // For the log line, once the request itself is handed on.
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let request = Answering {
        parts,
        body,
        caller: &caller,
        parsed: &parsed,
        cache,
        impersonating,
        started,
    };
    let (resp, source) = answer(&app, request, from_cache.answer, from_cache.protobuf_errors).await;
    drop(inflight);
    let resp = match (&app.audit, audited) {
        (Some(audit), Some(pending)) => {
            let (answered, watch) = (answered_by(&resp, source), verb == Verb::Watch);
            audit.finish(pending, resp, answered, from_cache.verdict, watch)
        }
        _ => resp,
    };
    let resp = hold_watch_slot(resp, slot);
    let resource = cache.map(|c| c.info.resource.as_str());
    record(&app, verb, &method, &uri, resource, &resp, source, started);
    resp
}

/// The guard that counts a request of `verb` in flight until `handle` returns or is dropped
/// (its client gone): no way out of `handle`, a cancelled request's included, leaves the
/// count behind.
fn in_flight(app: &App, verb: Verb) -> metrics::InFlight {
    let labels = metrics::VerbLabels {
        verb: verb.as_str(),
    };
    metrics::InFlight::enter(app.metrics.inflight.get_or_create_owned(&labels))
}

/// What a cached type's cache made of a request.
struct FromCache {
    /// Its answer, or [`Answer::Upstream`] for one the cache cannot answer exactly.
    answer: Result<Answer, ApiError>,
    /// kcache's own errors are encoded as the apiserver would have encoded the answer: in
    /// protobuf where kcache answers protobuf (a built-in type whose reader asked for
    /// protobuf first, with protobuf on: E9).
    protobuf_errors: bool,
    /// What the authorizer answered, once kcache asked it (for the audit trail).
    verdict: Option<crate::auth::Verdict>,
}

impl Default for FromCache {
    /// Nothing: the upstream answers.
    fn default() -> FromCache {
        FromCache {
            answer: Ok(Answer::Upstream),
            protobuf_errors: false,
            verdict: None,
        }
    }
}

/// A read of a cached type (`served`), made by a caller not impersonating anyone (the upstream
/// answers those), with the representation it asks for.
async fn read_cache(
    app: &App,
    read: &request::ReadRequest<'_>,
    served: &Served,
    caller: &Caller,
) -> FromCache {
    let protobuf_errors = read.representation == Representation::Protobuf;
    let mut verdict = None;
    let answer = serve_from_cache(app, read, served, caller, protobuf_errors, &mut verdict).await;
    FromCache {
        answer,
        protobuf_errors,
        verdict,
    }
}

/// A request admission refused: its answer, audited where a trail is kept.
fn refused(
    app: &App,
    received: Option<std::time::SystemTime>,
    parts: &http::request::Parts,
    refused: admission::Refused,
) -> Response {
    let admission::Refused { caller, response } = refused;
    match (&app.audit, received) {
        (Some(audit), Some(received)) => {
            let parsed = request::Parsed::parse(parts);
            match audit.begin(received, parts, &parsed, caller.as_ref()) {
                Some(p) => audit.finish(p, response, AnsweredBy::Refused, None, false),
                None => response,
            }
        }
        _ => response,
    }
}

/// An admitted request on its way to its answer.
struct Answering<'a> {
    parts: http::request::Parts,
    body: axum::body::Body,
    caller: &'a Caller,
    parsed: &'a request::Parsed,
    /// The cache of the type the request names, looked up once for all that follows.
    cache: Option<&'a Arc<ResourceCache>>,
    impersonating: bool,
    started: std::time::Instant,
}

/// The answer to an admitted request, and where it came from (`"cache"` or `"upstream"`):
/// what its type's cache gave (`cached`), else forwarded (`protobuf_errors`: kcache's own
/// errors are encoded in protobuf).
async fn answer(
    app: &App,
    request: Answering<'_>,
    cached: Result<Answer, ApiError>,
    protobuf_errors: bool,
) -> (Response, &'static str) {
    let Answering {
        parts,
        body,
        caller,
        parsed,
        cache,
        impersonating,
        started,
    } = request;
    let gzip = response::accepts_gzip(
        parts
            .headers
            .get(header::ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok()),
    );
    match cached {
        // Large cached lists and objects are gzipped for clients that accept it; watches never
        // (the upstream's own answers come back as it encoded them).
        Ok(Answer::Ready(resp)) if gzip && parsed.verb != Verb::Watch => {
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
        Ok(Answer::Consistent(forwarded)) => {
            let req = Request::from_parts(parts, body);
            let shared = forwarded.shared;
            let sent = |resp| forwarded.timed(resp, started);
            let resp = if shared {
                app.shared_reads
                    .forward(app, req, &caller.forward, sent)
                    .await
            } else {
                sent(proxy::forward(app, req, &caller.forward).await)
            };
            (resp, "upstream")
        }
        Ok(Answer::Upstream) => {
            let resp = proxy::forward(app, Request::from_parts(parts, body), &caller.forward).await;
            // On-demand caching counts the lists and watches of an uncached type the upstream
            // answered: a caller the upstream refuses must not make kcache cache anything.
            if cache.is_none() && resp.status().is_success() {
                note_demand(app, parsed);
            }
            (resp, "upstream")
        }
        Err(e) => (response::error_as(&e, protobuf_errors), "cache"),
    }
}

/// A watch's answer, holding its slot of the watch limits until its body (the watch stream) is
/// dropped. Refused watches are whole Status bodies (sized, as the apiserver sends them) and
/// hold no slot.
fn hold_watch_slot(resp: Response, slot: Option<crate::limits::WatchSlot>) -> Response {
    match slot {
        Some(slot) if resp.status().is_success() => resp.map(|b| {
            axum::body::Body::new(http_body_util::BodyExt::map_frame(b, move |f| {
                let _ = &slot;
                f
            }))
        }),
        _ => resp,
    }
}

/// What the metrics and the log keep of an answered request (`resource`: its type's, if
/// cached).
fn record(
    app: &App,
    verb: Verb,
    method: &http::Method,
    uri: &http::Uri,
    resource: Option<&str>,
    resp: &Response,
    source: &'static str,
    started: std::time::Instant,
) {
    // Label only cached resources by name: arbitrary paths must not create label values.
    let resource = resource.unwrap_or("other");
    let m = &app.metrics;
    m.request(
        verb.as_str(),
        resource,
        resp.status().as_u16(),
        source,
        started.elapsed(),
    );
    m.response_content_type(
        resp.headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        source,
    );
    tracing::debug!(%method, %uri, code = resp.status().as_u16(), source,
        ms = started.elapsed().as_millis() as u64, "request");
}

/// How kcache answered `resp` (`source`: where it came from).
pub(super) fn answered_by(resp: &Response, source: &str) -> AnsweredBy {
    if resp.extensions().get::<audit::Refusal>().is_some() {
        return AnsweredBy::Refused;
    }
    match (resp.extensions().get::<AnsweredBy>(), source) {
        (Some(a), _) => *a,
        (None, "cache") => AnsweredBy::Cache,
        (None, _) => AnsweredBy::Upstream,
    }
}

/// Count a list or watch of an uncached type for on-demand caching, when it is on.
fn note_demand(app: &App, parsed: &request::Parsed) {
    if let (Some(p), Some(demand), Verb::List | Verb::Watch) =
        (&parsed.path, &app.demand, parsed.verb)
    {
        if p.subresource.is_none() {
            demand.note(&p.group, &p.version, &p.resource);
        }
    }
}

/// A GET, LIST or WATCH of a cached type: from the cache where the policy says so (see
/// `read`), unless the type went over its memory budget.
async fn serve_from_cache(
    app: &App,
    read: &request::ReadRequest<'_>,
    served: &Served,
    caller: &Caller,
    protobuf_errors: bool,
    verdict: &mut Option<crate::auth::Verdict>,
) -> Result<Answer, ApiError> {
    let cache = &served.cache;
    if cache.budget().is_over() {
        return over_budget(read.local, cache);
    }
    let answer = read::from_cache(app, read, caller, served, verdict).await;
    // Checked again after the cache was read: a type that went over its budget meanwhile may
    // have been read emptied, so whatever was made of it is dropped, unsent (see
    // `cache::Budget::is_over`). A watch's stream checks for itself as it goes.
    if cache.budget().is_over() {
        return over_budget(read.local, cache);
    }
    // Whatever the cache answers from here on, errors included, carries its age.
    Ok(staleness::stamp(answer, cache, protobuf_errors))
}

/// A read of a type that went over its memory budget: passed through to the upstream as a
/// read of an uncached type is, except one selecting on a kcache index field, which the
/// upstream does not know and kcache can no longer answer.
/// `local`: the read selects on a kcache index field.
fn over_budget(local: bool, cache: &ResourceCache) -> Result<Answer, ApiError> {
    if local {
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
