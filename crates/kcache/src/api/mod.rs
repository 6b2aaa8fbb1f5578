//! The HTTP face of kcache: decides per request whether the cache answers (LIST, GET, WATCH of
//! a cached resource, asking for plain JSON) or the upstream does (everything else), and
//! answers exactly as kube-apiserver would.

pub mod admin;
mod admission;
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
}

/// How reads with resourceVersion unset are answered.
#[derive(Debug, Clone)]
pub struct ConsistentReads {
    /// Answer them from the cache once it has caught up with the upstream (else forward all).
    pub from_cache: bool,
    /// How long to wait for the cache to catch up.
    pub wait: Duration,
    /// After the wait: forward to the upstream (true) or answer 504 (false).
    pub fallback: bool,
}

impl Default for ConsistentReads {
    fn default() -> Self {
        ConsistentReads {
            from_cache: true,
            wait: Duration::from_secs(3),
            fallback: true,
        }
    }
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

    /// Decide where a consistent read is answered: [`Consistency::Cache`] once the cache has
    /// reached the upstream's revision as of after the read arrived (see [`RevisionProbe`] for
    /// why that is never stale), [`Consistency::Upstream`] when the upstream must answer, and
    /// [`Consistency::Unconfirmed`] only while the upstream cannot be reached at all.
    ///
    /// Never slower than passing the read through, as far as kcache can tell beforehand:
    /// - a type already found unprovable at the RV it is still at is forwarded at once (no
    ///   probe, no wait: nothing of it has happened since);
    /// - a GET whose cache is expected to take longer to catch up than the upstream takes to
    ///   answer (a lagging watch) is forwarded at once: forwarding costs the upstream one
    ///   object, no more than the probe itself;
    /// - a wait is bounded by how long this cache is expected to take to catch up (a few times
    ///   its measured catch-up), not by the full `consistentReads.waitSeconds`: a type whose
    ///   events arrive within milliseconds of a write and that has not reached the revision
    ///   after many times that is quiet, and waiting longer only delays the read. One read per
    ///   second still waits the full time, so a watch that starts lagging is measured again;
    /// - a GET is forwarded at once when the upstream answers consistent lists from its watch
    ///   cache (v1.31 on, [`crate::upstream::UpstreamVersion::consistent_lists_from_watch_cache`]): there the
    ///   probe, a consistent list, waits ~50-100 ms for etcd's progress notification whenever
    ///   the type's last event is older than etcd's revision, while the GET itself is read from
    ///   etcd at once. Proving the cache would cost the upstream a request and the reader a
    ///   wait, to save the upstream a one-object read;
    /// - a probe the upstream answered with an error, or that got no answer in time while the
    ///   reflector still reaches the upstream, forwards the read (one replica's 429, 5xx or
    ///   slowness is not an outage); only an upstream that cannot be reached at all (the
    ///   connection refused or cut, or no answer while the reflector has lost it too) has
    ///   the cache answer unconfirmed.
    async fn consistent(&self, cache: &ResourceCache, read: Read) -> Result<Consistency, ApiError> {
        // A state restored from disk that the reflector has not yet confirmed with the upstream
        // is treated as no state: the read goes upstream, as it would before a first sync (the
        // stale-while-down policy below is for states this kcache has seen current).
        if !self.consistent.from_cache || !cache.is_synced() || cache.is_unconfirmed() {
            return Ok(Consistency::Upstream);
        }
        let Some(probe) = self.probes.get(&collection_path(cache)) else {
            return Ok(Consistency::Upstream);
        };
        let resource = cache.info.resource.clone();
        let outcome = |o: &'static str| {
            self.metrics
                .consistent_reads
                .get_or_create(&metrics::OutcomeLabels {
                    resource: resource.clone(),
                    outcome: o,
                })
                .inc()
        };
        // With `fallback` off the read gets its full wait before the 504 instead, and while the
        // reflector cannot reach the upstream the probe decides (stale while down, below).
        let quick = self.consistent.fallback && cache.contact().reachable();
        if quick && cache.is_unprovable() {
            outcome("forwarded");
            return Ok(Consistency::Upstream);
        }
        if read == Read::Get && quick {
            if self.upstream.version().consistent_lists_from_watch_cache() {
                outcome("forwarded_get");
                return Ok(Consistency::Upstream);
            }
            if waiting_is_slower(cache, probe) {
                outcome("forwarded_lagging");
                return Ok(Consistency::Upstream);
            }
        }
        let started = std::time::Instant::now();
        let target = match probe.target().await {
            Ok(t) => t,
            Err(e) => {
                // The upstream answered (an error status), or gave no answer in time while the
                // reflector still reaches it (one slow replica): it can answer the read itself.
                if e.upstream_answered()
                    .unwrap_or_else(|| cache.contact().reachable())
                {
                    tracing::debug!(resource = %cache.info, error = %Report(&e),
                        "consistency probe failed; forwarding the read");
                    outcome("forwarded_probe_failed");
                    return Ok(Consistency::Upstream);
                }
                // Not reachable at all: forwarding would fail too. Serve what the cache has,
                // marked, unless it is older than the policy allows.
                tracing::debug!(resource = %cache.info, error = %Report(&e), age = ?cache.contact().age(),
                    "upstream unreachable; answering from the cache unconfirmed");
                if let Err(refused) = self.staleness.allow_unconfirmed(cache) {
                    outcome("too_stale");
                    return Err(refused);
                }
                outcome("stale");
                return Ok(Consistency::Unconfirmed);
            }
        };
        let probed = std::time::Instant::now();
        let bound = if quick {
            self.wait_bound(cache, probe)
        } else {
            self.consistent.wait
        };
        let waited = cache.wait_for_rv(target, bound).await;
        // Only a wait that ended is a catch-up: one that ran out says the type cannot reach
        // `P` at all (a quiet type, which the unprovable memo below handles), not how far its
        // watch lags, and counting it would keep the type's GETs forwarded long after.
        if waited.is_ok() {
            let took = probed.elapsed();
            cache.freshness().record_catch_up(took);
            self.catch_up.record(took);
        }
        self.metrics
            .consistent_wait
            .get_or_create(&metrics::ResourceLabels {
                resource: resource.clone(),
            })
            .observe(started.elapsed().as_secs_f64());
        match waited {
            Ok(()) => {
                outcome("cache");
                Ok(Consistency::Cache)
            }
            Err(current) => {
                cache.freshness().mark_unprovable(current);
                if self.consistent.fallback {
                    outcome("forwarded");
                    Ok(Consistency::Upstream)
                } else {
                    outcome("timeout");
                    Err(ApiError::TooLargeResourceVersion {
                        requested: target,
                        current,
                    })
                }
            }
        }
    }

    /// How long a consistent read waits for `cache` to reach the probed revision: a few times
    /// what this type is expected to take (its measured catch-up, plus a little, at most the
    /// full wait; the full wait for one read per second, to measure a watch that started
    /// lagging). A type that has not measured its own: the full wait for its first read, then
    /// a few times any type's catch-up, else the probe's round trip.
    fn wait_bound(&self, cache: &ResourceCache, probe: &RevisionProbe) -> Duration {
        let full = self.consistent.wait;
        let short = |expected: Duration| {
            expected
                .saturating_mul(CATCH_UP_BOUND_FACTOR)
                .saturating_add(CATCH_UP_SLACK)
                .min(full)
        };
        if let Some(own) = cache.freshness().expected_catch_up() {
            let bound = short(own);
            return if bound < full
                && cache
                    .freshness()
                    .take_catch_up_sample(CATCH_UP_SAMPLE_EVERY)
            {
                full
            } else {
                bound
            };
        }
        if cache.freshness().first_catch_up_try() {
            return full;
        }
        self.catch_up
            .get()
            .or_else(|| probe.round_trip())
            .map_or(full, short)
    }
}

/// Where a consistent read is answered (see [`App::consistent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Consistency {
    /// The cache has reached the upstream's current revision.
    Cache,
    /// The upstream answers.
    Upstream,
    /// The upstream cannot be reached at all: the cache answers, marked with
    /// [`UNCONFIRMED_HEADER`] (within `staleness.maxConsistentReadStalenessSeconds`).
    Unconfirmed,
}

impl Consistency {
    fn answered_by_cache(self) -> bool {
        self != Consistency::Upstream
    }
}

/// Set (`true`) on a consistent read answered from the cache while the upstream could not be
/// reached to confirm it current (see docs/semantics.md, "Stale while down").
pub const UNCONFIRMED_HEADER: &str = "x-kcache-unconfirmed";

/// Mark an answer as unconfirmed when it is one (`c`: the decision of a consistent read, None
/// for a read that was not one).
fn mark_unconfirmed(
    answer: Result<Answer, ApiError>,
    c: Option<Consistency>,
) -> Result<Answer, ApiError> {
    match answer {
        Ok(Answer::Ready(mut resp)) if c == Some(Consistency::Unconfirmed) => {
            resp.headers_mut()
                .insert(UNCONFIRMED_HEADER, http::HeaderValue::from_static("true"));
            Ok(Answer::Ready(resp))
        }
        other => other,
    }
}

/// A consistent read waits this many times the expected catch-up (plus [`CATCH_UP_SLACK`]):
/// the events of a write arrive within about one catch-up, so several without the revision
/// mean there is nothing of this type to arrive.
const CATCH_UP_BOUND_FACTOR: u32 = 4;

/// Added to the bounded wait: scheduling noise on a busy machine, so a cache that is current
/// is not forwarded for being a few milliseconds late.
const CATCH_UP_SLACK: Duration = Duration::from_millis(20);

/// Which kind of consistent read is deciding between the cache and the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Get,
    /// A LIST, or a watch whose initial events must be consistent (its end bookmark promises
    /// a state no older than the upstream's when it began).
    List,
}

/// Reads forwarded because the cache lags still wait, one per this long (or per twenty
/// catch-ups, when those are longer), to measure the lag again: at most ~5% of the time one
/// reader pays the lag, and a watch that caught up is noticed within about a second.
const CATCH_UP_SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Whether a consistent GET would wait longer for the cache than the upstream takes to answer
/// it: the cache's expected catch-up exceeds the probe's round trip (both measured, see
/// [`App::consistent`]). Unknown estimates mean "wait", which measures them.
fn waiting_is_slower(cache: &ResourceCache, probe: &RevisionProbe) -> bool {
    let (Some(round_trip), Some(catch_up)) =
        (probe.round_trip(), cache.freshness().expected_catch_up())
    else {
        return false;
    };
    catch_up > round_trip
        && !cache
            .freshness()
            .take_catch_up_sample(CATCH_UP_SAMPLE_EVERY.max(catch_up.saturating_mul(20)))
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
    let field_selector = q
        .iter()
        .find(|(k, _)| k == "fieldSelector")
        .and_then(|(_, v)| FieldSelector::parse(v).ok());
    if names_index_field(field_selector.as_ref(), cache) {
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
    // Parsed here once for both checks; a selector that does not parse is left to the
    // options parser and its 400.
    let field_selector = q
        .iter()
        .find(|(k, _)| k == "fieldSelector")
        .and_then(|(_, v)| FieldSelector::parse(v).ok());
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
    // come from the upstream once per type), the protobuf mirror (started on first use).
    let printer = match representation {
        Representation::Table => app.printer(cache).await,
        _ => None,
    };
    let mirror = match representation {
        Representation::Protobuf => app.mirrors.ready(cache),
        _ => None,
    };
    let held = policy::Held {
        namespaced: info.namespaced,
        synced: cache.is_synced(),
        metadata_only,
        mirror_ready: mirror.is_some(),
        printer: match &printer {
            None => policy::Printable::No,
            Some(p) if p.reads_only_metadata() => policy::Printable::FromMetadata,
            Some(_) => policy::Printable::NeedsObject,
        },
    };
    let refusal = match policy::route(&ask, &held) {
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
