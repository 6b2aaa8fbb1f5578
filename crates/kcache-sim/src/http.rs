//! The HTTP face of the sim: path routing (with the apiserver's three kinds of 404), verbs,
//! response headers and framing, and the mapping of every `SimError` to a response.

use super::discovery;
use super::encode::indent;
use super::faults::FaultState;
use super::list::{self, Scope};
use super::metadata::{self, Form};
use super::patch;
use super::protobuf::{self, Media};
use super::query::{list_options, parse_rv, Query};
use super::rbac::{self as reviews, identify, Allowed, Rbac};
use super::status::{delete_success, SimError, Target};
use super::store::{Store, StoredObj, UpdateMode};
use super::table_rows::{Include, Printer};
use super::types::ResourceType;
use super::watch::{self, WatchEnv};
use super::SimConfig;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{header, Method, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::Value;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

/// Everything a request handler needs.
pub struct Ctx {
    /// The object store.
    pub store: Arc<Store>,
    /// Fault injection state.
    pub faults: Arc<FaultState>,
    /// Configuration.
    pub cfg: SimConfig,
    /// The bound address (for `/api`'s serverAddressByClientCIDRs).
    pub addr: SocketAddr,
    /// Fixed APF flow-schema / priority-level UIDs for the response headers.
    pub pf_uids: (String, String),
    /// API requests served, by kind (for tests and the benchmark: what reached the upstream).
    pub counts: RequestCounts,
    /// Table column definitions to answer `as=Table` reads (lists, GETs, watches) with, by
    /// (group, resource): the columns come from outside (their descriptions are the real
    /// apiserver's API documentation), the rows are the sim's own (`table_rows`). Without
    /// columns for a type, its Table reads are answered in the objects' own form.
    pub table_columns: std::sync::Mutex<std::collections::HashMap<(String, String), bytes::Bytes>>,
    /// Token authentication and RBAC, when a test turned them on.
    pub rbac: std::sync::RwLock<Option<Arc<Rbac>>>,
    /// Every API request with the identity that made it, once a test asked for them
    /// (`Sim::keep_journal`; RBAC on): who made the upstream do what.
    pub journal: std::sync::Mutex<Option<Vec<crate::JournalEntry>>>,
    /// The apiserver replicas behind the address.
    pub replicas: Replicas,
    /// When each of `SimConfig::storage_reads`' slots is next free (empty: no cost model).
    pub storage: std::sync::Mutex<Vec<std::time::Instant>>,
    /// The key ServiceAccount tokens are signed with (`Sim::token_request`).
    pub issuer: super::tokens::Issuer,
}

impl Ctx {
    /// Pay what a read served from etcd costs (`SimConfig::storage_reads`; nothing by default).
    async fn storage_read(&self) {
        if let Some(model) = self.cfg.storage_reads {
            self.busy(model.cost).await;
        }
    }

    /// Pay what writing a list of `items` objects costs (`StorageReads::per_item`), a quarter
    /// of it for their metadata only (`as=PartialObjectMetadataList`: measured 2026-11-27 on a
    /// v1.34.9 apiserver, 10k ConfigMaps' metadata in 23 ms against their JSON list in 87 ms).
    async fn list_written(&self, items: usize, form: Form) {
        if let Some(model) = self.cfg.storage_reads {
            let per_item = match form {
                Form::MetadataList => model.per_item / 4,
                _ => model.per_item,
            };
            let cost = per_item.saturating_mul(u32::try_from(items).unwrap_or(u32::MAX));
            if !cost.is_zero() {
                self.busy(cost).await;
            }
        }
    }

    /// Take the slot that frees first and hold it for `cost` from then. Booking slot time keeps
    /// the capacity exact (`concurrency / cost` per second) however late a sleeper wakes, and
    /// the sleep is a blocking thread's: tokio's timer rounds up to whole milliseconds, which
    /// would add up to 1 ms to every read the model means to take 0.5 ms.
    async fn busy(&self, cost: std::time::Duration) {
        let now = std::time::Instant::now();
        let done = {
            let mut slots = self.storage.lock().unwrap_or_else(|e| e.into_inner());
            let Some(slot) = slots.iter_mut().min() else {
                return;
            };
            let done = (*slot).max(now) + cost;
            *slot = done;
            done
        };
        let wait = done.saturating_duration_since(now);
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(wait)).await;
    }
}

/// Apiserver replicas sharing the one store ("etcd"), each with its own watch cache lagging it
/// by its own delay; requests go to them in turn, or all to a pinned one.
#[derive(Debug, Default)]
pub struct Replicas {
    /// Watch-cache lag of each replica (empty: one replica without lag).
    pub lags: Vec<std::time::Duration>,
    next: std::sync::atomic::AtomicUsize,
    /// `usize::MAX`: none pinned.
    pinned: std::sync::atomic::AtomicUsize,
}

impl Replicas {
    pub fn new(lags: Vec<std::time::Duration>) -> Replicas {
        Replicas {
            lags,
            next: Default::default(),
            pinned: std::sync::atomic::AtomicUsize::new(usize::MAX),
        }
    }

    /// Send every request to replica `i` (None: round-robin again).
    pub fn pin(&self, i: Option<usize>) {
        self.pinned
            .store(i.unwrap_or(usize::MAX), std::sync::atomic::Ordering::SeqCst);
    }

    /// The watch-cache lag of the replica that takes the next request.
    fn pick(&self) -> std::time::Duration {
        use std::sync::atomic::Ordering::SeqCst;
        if self.lags.is_empty() {
            return std::time::Duration::ZERO;
        }
        let i = match self.pinned.load(SeqCst) {
            usize::MAX => self.next.fetch_add(1, SeqCst),
            i => i,
        };
        self.lags[i % self.lags.len()]
    }
}

/// The watch-cache lag of the replica serving a request.
#[derive(Clone, Copy)]
struct Lag(std::time::Duration);

/// Counters of what reached the sim.
#[derive(Debug, Default)]
pub struct RequestCounts {
    pub lists: std::sync::atomic::AtomicU64,
    pub gets: std::sync::atomic::AtomicU64,
    pub watches: std::sync::atomic::AtomicU64,
    pub other: std::sync::atomic::AtomicU64,
    /// Lists of a collection at resourceVersion=0 (whole collections: limit is ignored there).
    pub lists_rv0: std::sync::atomic::AtomicU64,
    /// Bytes of the non-watch response bodies.
    pub bytes: std::sync::atomic::AtomicU64,
}

/// Largest request body accepted (the apiserver's limit is 3 MiB for objects; leave room).
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Bodies shorter than this get a Content-Length; longer ones are chunked (Go's buffering).
const CHUNK_THRESHOLD: usize = 2048;

/// The single axum handler: every request goes through here.
/// Classify a request for the counters: a GET of a collection is a list or a watch, a GET of
/// something with a name a get.
fn count(c: &RequestCounts, method: &http::Method, path: &str, query: &Query) {
    use std::sync::atomic::Ordering::Relaxed;
    let segs = path.trim_matches('/').split('/').count();
    let collection = if path.starts_with("/api/") {
        segs == 3 || segs == 5
    } else {
        segs == 4 || segs == 6
    };
    let counter = if method != http::Method::GET
        || !(path.starts_with("/api/") || path.starts_with("/apis/"))
    {
        &c.other
    } else if query.flag("watch") || path.contains("/watch/") {
        &c.watches
    } else if collection {
        if query.get("resourceVersion") == Some("0") {
            c.lists_rv0.fetch_add(1, Relaxed);
        }
        &c.lists
    } else {
        &c.gets
    };
    counter.fetch_add(1, Relaxed);
}

pub async fn handle(State(ctx): State<Arc<Ctx>>, mut req: Request) -> Response {
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query());
    let ua = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let pretty = query.flag("pretty")
        || ["curl", "Wget", "Mozilla/5.0"]
            .iter()
            .any(|p| ua.starts_with(p));
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let gzip = req
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(accepts_gzip);
    // Errors are negotiated against every serializer, protobuf included, whatever the
    // resource (the 406 for a custom resource is protobuf when the client asked for it).
    // A Status has no other form, so an Accept of only `as=...` clauses finds nothing for it.
    let error_media = protobuf::negotiate_error(accept.as_deref());
    let api = path.starts_with("/api");
    let f = Fmt {
        pretty,
        proto_errors: api && error_media == Some(Media::Protobuf),
        raw_errors: api && error_media.is_none(),
        media: Media::Json,
        form: Form::Object,
        gzip,
    };
    count(&ctx.counts, req.method(), &path, &query);
    req.extensions_mut().insert(Lag(ctx.replicas.pick()));
    if let Some(a) = super::health::answer(&ctx.store, ctx.cfg.profile, &path, req.uri().query()) {
        let mut b = base(&ctx, a.code, a.content_type);
        if a.nosniff {
            b = b.header("X-Content-Type-Options", "nosniff");
        }
        return finish(b, Body::from(a.body));
    }
    let latency = ctx.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if path.starts_with("/api") {
        if let Some(err) = ctx.faults.take_request_failure() {
            return error_response(&ctx, &err, f);
        }
        let rbac = ctx.rbac.read().ok().and_then(|r| r.clone());
        if let Some(rbac) = rbac {
            let service_account = |token: &str| service_account_user(&ctx, token);
            let who = match identify(&rbac, &ctx.store, req.headers(), service_account) {
                Ok(who) => who,
                Err(e) => return error_response(&ctx, &e, f),
            };
            if let Some(journal) = ctx
                .journal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                journal.push(crate::JournalEntry {
                    user: who.name.clone(),
                    method: req.method().to_string(),
                    path: path.clone(),
                    query: req.uri().query().unwrap_or_default().to_string(),
                    accept: accept.clone().unwrap_or_default(),
                });
            }
            if req.method() == Method::POST {
                let review = match path.as_str() {
                    "/apis/authentication.k8s.io/v1/tokenreviews" => Some(true),
                    "/apis/authorization.k8s.io/v1/subjectaccessreviews" => Some(false),
                    _ => None,
                };
                if let Some(token) = review {
                    let answer = reviews::answer(
                        &rbac,
                        &ctx.store,
                        &who,
                        token,
                        ctx.cfg.profile,
                        service_account,
                        req,
                    );
                    return match answer.await {
                        Ok(body) => json(&ctx, StatusCode::CREATED, body, f),
                        Err(e) => error_response(&ctx, &e, f),
                    };
                }
            }
            req.extensions_mut().insert(Allowed {
                rbac,
                who,
                store: ctx.store.clone(),
            });
        }
    }
    match route(&ctx, req, &path, &query, f).await {
        Ok(resp) => resp,
        Err(err) => error_response(&ctx, &err, f),
    }
}

/// The TokenReview user of a ServiceAccount token this sim issued, if it is still valid and
/// meant for the apiserver (a token asked for another audience authenticates elsewhere).
fn service_account_user(ctx: &Ctx, token: &str) -> Option<serde_json::Value> {
    let claims = ctx
        .issuer
        .check(token, jiff::Timestamp::now().as_second())?;
    let audiences = claims["aud"].as_array()?;
    if !audiences.iter().any(|a| a == super::tokens::ISSUER) {
        return None;
    }
    super::tokens::user(&claims, ctx.cfg.profile, |resource, ns, name| {
        ctx.store
            .get("", resource, Some(ns), name)
            .ok()
            .map(|o| o.value.clone())
    })
}

/// The field manager the apiserver names for a request without `?fieldManager`: its
/// User-Agent up to the first `/` (`kubectl/v1.34.9 …` is `kubectl`).
fn field_manager(req: &Request) -> String {
    let ua = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    ua.split('/').next().unwrap_or_default().to_string()
}

fn base(ctx: &Ctx, code: StatusCode, content_type: &'static str) -> http::response::Builder {
    Response::builder()
        .status(code)
        .header("Audit-Id", uuid::Uuid::new_v4().to_string())
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::CONTENT_TYPE, content_type)
        .header("X-Kubernetes-Pf-Flowschema-Uid", ctx.pf_uids.0.as_str())
        .header("X-Kubernetes-Pf-Prioritylevel-Uid", ctx.pf_uids.1.as_str())
}

fn sized_body(bytes: Vec<u8>) -> Body {
    if bytes.len() < CHUNK_THRESHOLD {
        Body::from(bytes)
    } else {
        let bytes = Bytes::from(bytes);
        Body::from_stream(futures::stream::once(
            async move { Ok::<_, Infallible>(bytes) },
        ))
    }
}

fn finish(builder: http::response::Builder, body: Body) -> Response {
    builder.body(body).unwrap_or_else(|_| {
        let mut r = Response::new(Body::from("internal error building response"));
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

/// How a response is written: what the client negotiated.
#[derive(Clone, Copy, Debug)]
struct Fmt {
    /// Indented JSON (`?pretty`, curl-like User-Agents).
    pretty: bool,
    /// Status errors in protobuf.
    proto_errors: bool,
    /// No `Accept` clause fits a Status: the apiserver then writes errors as indented JSON
    /// whatever the User-Agent (`err-pom-list-wrong-as`).
    raw_errors: bool,
    /// The encoding of objects and lists (set once the resource is known).
    media: Media,
    /// The form of objects and lists: their own, or PartialObjectMetadata (set with `media`).
    form: Form,
    /// The client accepts gzip.
    gzip: bool,
}

/// Whether an `Accept-Encoding` allows gzip.
fn accepts_gzip(v: &str) -> bool {
    v.split(',').any(|part| {
        let mut it = part.split(';');
        let coding = it.next().unwrap_or("").trim();
        let q_zero = it.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                == Some(0.0)
        });
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !q_zero
    })
}

/// A protobuf body: `Content-Type: application/vnd.kubernetes.protobuf`, gzipped above
/// the threshold for clients that accept it.
fn proto(ctx: &Ctx, code: StatusCode, body: Vec<u8>, f: Fmt) -> Response {
    ctx.counts
        .bytes
        .fetch_add(body.len() as u64, std::sync::atomic::Ordering::Relaxed);
    let b = base(ctx, code, protobuf::MEDIA_TYPE);
    if f.gzip && body.len() > protobuf::GZIP_THRESHOLD {
        let b = b
            .header(header::CONTENT_ENCODING, "gzip")
            .header(header::VARY, "Accept-Encoding");
        let gz = Bytes::from(protobuf::gzip(&body));
        return finish(
            b,
            Body::from_stream(futures::stream::once(
                async move { Ok::<_, Infallible>(gz) },
            )),
        );
    }
    finish(b, sized_body(body))
}

fn json(ctx: &Ctx, code: StatusCode, body: Vec<u8>, f: Fmt) -> Response {
    let body = if f.pretty { indent(&body) } else { body };
    ctx.counts
        .bytes
        .fetch_add(body.len() as u64, std::sync::atomic::Ordering::Relaxed);
    finish(base(ctx, code, "application/json"), sized_body(body))
}

/// The one place errors become responses.
fn error_response(ctx: &Ctx, err: &SimError, f: Fmt) -> Response {
    if let SimError::PageNotFound = err {
        let b = base(ctx, StatusCode::NOT_FOUND, "text/plain; charset=utf-8")
            .header("X-Content-Type-Options", "nosniff");
        return finish(b, Body::from("404 page not found\n"));
    }
    let code = StatusCode::from_u16(err.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if f.proto_errors {
        let mut b = base(ctx, code, protobuf::MEDIA_TYPE);
        if let Some(secs) = err.retry_after() {
            b = b.header(header::RETRY_AFTER, secs.to_string());
        }
        return finish(b, sized_body(protobuf::status_body(&err.status_json())));
    }
    let mut body = err.status_json().to_body();
    if f.pretty || f.raw_errors {
        body = indent(&body);
    }
    let mut b = base(ctx, code, "application/json");
    if let Some(secs) = err.retry_after() {
        b = b.header(header::RETRY_AFTER, secs.to_string());
    }
    finish(b, sized_body(body))
}

fn object_response(
    ctx: &Ctx,
    rt: &ResourceType,
    code: StatusCode,
    obj: &StoredObj,
    f: Fmt,
) -> Response {
    match f.form {
        Form::Object => {}
        Form::Metadata => {
            let meta = obj.metadata(rt);
            let mut body = Vec::with_capacity(meta.len() + 1);
            body.extend_from_slice(meta);
            body.push(b'\n');
            return json(ctx, code, body, f);
        }
        // The apiserver transforms the object after the read (or write) succeeded.
        Form::MetadataList => return error_response(ctx, &metadata::wrong_form(rt, false), f),
    }
    if f.media == Media::Protobuf {
        if let Some(env) = obj.proto_envelope(rt) {
            return proto(ctx, code, env, f);
        }
    }
    let mut body = Vec::with_capacity(obj.bytes.len() + 1);
    body.extend_from_slice(&obj.bytes);
    body.push(b'\n');
    json(ctx, code, body, f)
}

/// The columns served for `rt` when the client asks for a Table first (`table_columns`); None
/// otherwise, and the request is answered in the objects' own form.
fn table_asked(ctx: &Ctx, req: &Request, rt: &ResourceType) -> Option<bytes::Bytes> {
    let accept = req.headers().get(header::ACCEPT)?.to_str().ok()?;
    let first = accept.split(',').next()?;
    if !(first.contains("as=Table") && first.contains("g=meta.k8s.io") && first.contains("v=v1")) {
        return None;
    }
    ctx.table_columns
        .lock()
        .ok()?
        .get(&(rt.group.clone(), rt.resource.clone()))
        .cloned()
}

/// How the objects of `a`'s type print for this request: the served `columns`, the type's
/// printer (a custom resource's from its CRD's `additionalPrinterColumns`) and the
/// `includeObject` asked for (a 400 for one the apiserver refuses, before anything is read).
fn table_printer(
    ctx: &Ctx,
    a: &Addressed,
    query: &Query,
    columns: bytes::Bytes,
) -> Result<Printer, SimError> {
    let include = Include::parse(query.get("includeObject")).ok_or_else(|| {
        SimError::BadRequest(format!(
            "Unable to convert to Table as requested: includeObject: Invalid value: \"{}\": \
             must be 'Metadata', 'Object', 'None', or empty",
            query.get("includeObject").unwrap_or_default()
        ))
    })?;
    Ok(Printer::new(
        ctx.cfg.profile,
        a.rt.clone(),
        columns,
        crd_printer_columns(ctx, &a.rt),
        include,
    ))
}

/// The `additionalPrinterColumns` of a custom resource's served version, from its
/// CustomResourceDefinition object when the sim has one (`{resource}.{group}`).
fn crd_printer_columns(ctx: &Ctx, rt: &ResourceType) -> Option<Vec<Value>> {
    if !rt.custom {
        return None;
    }
    let name = format!("{}.{}", rt.resource, rt.group);
    let crd = ctx
        .store
        .get(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
            &name,
        )
        .ok()?;
    crd.value
        .pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v["name"] == rt.version.as_str())?
        .get("additionalPrinterColumns")?
        .as_array()
        .cloned()
}

/// A GET, LIST or WATCH asked as a Table of a type whose columns the sim serves: a list is
/// the page the list would answer, a GET one row at the object's resourceVersion, a watch
/// one-row Tables as its events' objects (the first with the columns). Each object is printed
/// as the apiserver prints it (`table_rows`); errors are the same plain Status as without.
async fn table_read(
    ctx: &Ctx,
    a: &Addressed,
    query: &Query,
    columns: bytes::Bytes,
    f: Fmt,
) -> Result<Response, SimError> {
    let printer = table_printer(ctx, a, query, columns)?;
    if a.watch_path || (a.name.is_none() && query.flag("watch")) {
        let opts = watch_options(ctx, a, query)?;
        return watch_response(ctx, a, opts, f, Some(printer)).await;
    }
    let f = Fmt {
        pretty: false,
        media: Media::Json,
        ..f
    };
    let now = std::time::SystemTime::now();
    let body = match &a.name {
        Some(name) => printer.get(&read_one(ctx, a, name, query).await?.value, now),
        None => table_list(ctx, a, query, &printer, now).await?,
    };
    Ok(json(ctx, StatusCode::OK, body, f))
}

/// A list's Table body: the page the list would answer (limit, continue, resourceVersion and
/// selectors as for any list).
async fn table_list(
    ctx: &Ctx,
    a: &Addressed,
    query: &Query,
    printer: &Printer,
    now: std::time::SystemTime,
) -> Result<Vec<u8>, SimError> {
    let opts = list_options(query, &a.rt, false, ctx.cfg.watchlist)?;
    let scope = Scope {
        rt: &a.rt,
        ns: a.ns.as_deref(),
    };
    if query.get("resourceVersion").is_none_or(str::is_empty) {
        ctx.storage_read().await;
    }
    let output = list::Output {
        media: Media::Json,
        form: Form::Object,
        profile: ctx.cfg.profile,
    };
    let (body, _, items) = list::list(
        &ctx.store,
        &scope,
        &opts,
        ctx.cfg.too_large_rv_wait,
        a.lag,
        output,
    )
    .await?;
    ctx.list_written(items, Form::Object).await;
    #[derive(serde::Deserialize)]
    struct Page {
        metadata: serde_json::Value,
        #[serde(default)]
        items: Option<Vec<serde_json::Value>>,
    }
    let page: Page = serde_json::from_slice(&body)
        .map_err(|e| SimError::Internal(format!("a list the sim wrote: {e}")))?;
    Ok(printer.list(&page.metadata, &page.items.unwrap_or_default(), now))
}

async fn route(
    ctx: &Ctx,
    req: Request,
    path: &str,
    query: &Query,
    f: Fmt,
) -> Result<Response, SimError> {
    let mut segs: Vec<String> = path
        .split('/')
        .skip(1)
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    if segs.len() > 1 && segs.last().is_some_and(String::is_empty) {
        segs.pop();
    }
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let types = ctx.store.types();
    let ok = |j: super::encode::J| Ok(json(ctx, StatusCode::OK, j.to_body(), f));
    match segs.as_slice() {
        ["version"] => Ok(finish(
            base(ctx, StatusCode::OK, "application/json"),
            Body::from(discovery::version(ctx.cfg.profile)),
        )),
        ["api"] => ok(discovery::api_versions(ctx.addr)),
        // The service-account issuer's discovery: its keys, for whoever verifies its tokens.
        // Served as `application/jwk-set+json` only: asked for JSON alone, the apiserver
        // answers 406 (tests/fixtures/service-account-tokens/jwks-accept-json-406.json).
        ["openid", "v1", "jwks"] => {
            let accept = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("*/*");
            if !accept.contains("application/jwk-set+json") && !accept.contains("*/*") {
                return Ok(finish(
                    base(ctx, StatusCode::NOT_ACCEPTABLE, "application/json"),
                    Body::from(super::tokens::JWKS_NOT_ACCEPTABLE),
                ));
            }
            Ok(finish(
                base(ctx, StatusCode::OK, "application/jwk-set+json"),
                Body::from(ctx.issuer.jwks()),
            ))
        }
        [".well-known", "openid-configuration"] => Ok(finish(
            base(ctx, StatusCode::OK, "application/json"),
            Body::from(
                ctx.issuer
                    .openid_configuration(&format!("https://{}", ctx.addr)),
            ),
        )),
        ["api", "v1"] => {
            ok(discovery::resource_list(&types, "", "v1").ok_or(SimError::NoSuchResource)?)
        }
        ["api", "v1", rest @ ..] => resource(ctx, req, &types, "", "v1", rest, query, f).await,
        ["api", ..] => Err(SimError::NoSuchResource),
        ["apis"] => ok(discovery::api_group_list(&types)),
        ["apis", group] => ok(discovery::api_group(&types, group).ok_or(SimError::PageNotFound)?),
        ["apis", group, version, rest @ ..] => {
            let in_group: Vec<&Arc<ResourceType>> =
                types.iter().filter(|t| t.group == *group).collect();
            if in_group.is_empty() {
                return Err(SimError::PageNotFound);
            }
            let custom = in_group.iter().all(|t| t.custom);
            if !in_group.iter().any(|t| t.version == *version) {
                return Err(if custom {
                    SimError::PageNotFound
                } else {
                    SimError::NoSuchResource
                });
            }
            if rest.is_empty() {
                return ok(discovery::resource_list(&types, group, version)
                    .ok_or(SimError::NoSuchResource)?);
            }
            resource(ctx, req, &types, group, version, rest, query, f).await
        }
        _ => Err(SimError::PageNotFound),
    }
}

/// A parsed resource path.
struct Addressed {
    rt: Arc<ResourceType>,
    ns: Option<String>,
    name: Option<String>,
    status: bool,
    /// `pods/NAME/exec`: a protocol upgrade (the sim echoes what it is sent).
    exec: bool,
    /// `serviceaccounts/NAME/token`: a TokenRequest.
    token: bool,
    watch_path: bool,
    /// The watch-cache lag of the replica serving the request.
    lag: std::time::Duration,
}

fn address(
    types: &[Arc<ResourceType>],
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Addressed, SimError> {
    let custom = types.iter().filter(|t| t.group == group).all(|t| t.custom);
    let not_found = || {
        if custom {
            SimError::PageNotFound
        } else {
            SimError::NoSuchResource
        }
    };
    let find = |res: &str| {
        types
            .iter()
            .find(|t| t.group == group && t.version == version && t.resource == res)
    };
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, res, tail @ ..] if find(res).is_some_and(|t| t.namespaced) => {
            (Some(ns.to_string()), [&[*res][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let (res, name, sub) = match rest.as_slice() {
        [res] => (*res, None, None),
        [res, name] => (*res, Some(*name), None),
        [res, name, sub] => (*res, Some(*name), Some(*sub)),
        _ => return Err(not_found()),
    };
    let rt = find(res).ok_or_else(not_found)?.clone();
    // A namespaced object needs its namespace; a cluster-scoped one must not have one.
    if rt.namespaced && ns.is_none() && name.is_some() {
        return Err(not_found());
    }
    if name.is_some_and(str::is_empty) {
        return Err(not_found());
    }
    let core = |resource: &str| rt.group.is_empty() && rt.resource == resource && !watch_path;
    let (status, exec, token) = match sub {
        None => (false, false, false),
        Some("status") if rt.has_status() && !watch_path => (true, false, false),
        Some("exec") if core("pods") => (false, true, false),
        Some("token") if core("serviceaccounts") => (false, false, true),
        Some(_) => return Err(not_found()),
    };
    Ok(Addressed {
        rt,
        ns,
        name: name.map(str::to_string),
        status,
        exec,
        token,
        watch_path,
        lag: std::time::Duration::ZERO,
    })
}

/// `pods/NAME/exec`: the pod must exist; the connection is upgraded to the protocol the client
/// asked for and then echoes every byte back (a stand-in for a container's stdin/stdout).
async fn exec(ctx: &Ctx, a: &Addressed, mut req: Request) -> Result<Response, SimError> {
    let name = a.name.clone().unwrap_or_default();
    ctx.store
        .get(&a.rt.group, &a.rt.resource, a.ns.as_deref(), &name)?;
    let Some(protocol) = req.headers().get(header::UPGRADE).cloned() else {
        return Err(SimError::BadRequest("Upgrade request required".into()));
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(io) = upgrade.await {
            let (mut r, mut w) = tokio::io::split(hyper_util::rt::TokioIo::new(io));
            let _ = tokio::io::copy(&mut r, &mut w).await;
        }
    });
    Ok(finish(
        base(
            ctx,
            StatusCode::SWITCHING_PROTOCOLS,
            "application/octet-stream",
        )
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, protocol),
        Body::empty(),
    ))
}

/// 403 unless the RBAC table allows the request (its verb from the method and query).
fn authorize(
    allowed: &Allowed,
    a: &Addressed,
    method: &Method,
    query: &Query,
) -> Result<(), SimError> {
    // `?watch` makes a watch of a collection only: a named GET with it is a GET (the
    // apiserver's item handler has no watch; only the `/watch/` path watches one object).
    let watch = a.watch_path || (a.name.is_none() && query.flag("watch"));
    let verb = match (method, &a.name) {
        (&Method::GET, _) if watch => "watch",
        (&Method::GET, Some(_)) => "get",
        (&Method::GET, None) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, Some(_)) => "delete",
        (&Method::DELETE, None) => "deletecollection",
        _ => "unknown",
    };
    let resource = if a.exec {
        format!("{}/exec", a.rt.resource)
    } else if a.token {
        format!("{}/token", a.rt.resource)
    } else if a.status {
        format!("{}/status", a.rt.resource)
    } else {
        a.rt.resource.clone()
    };
    allowed.check(&reviews::Request {
        verb,
        group: &a.rt.group,
        resource: &resource,
        namespace: a.ns.as_deref(),
        name: a.name.as_deref(),
    })
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    ctx: &Ctx,
    req: Request,
    types: &[Arc<ResourceType>],
    group: &str,
    version: &str,
    rest: &[&str],
    query: &Query,
    f: Fmt,
) -> Result<Response, SimError> {
    let mut a = address(types, group, version, rest)?;
    if let Some(Lag(lag)) = req.extensions().get::<Lag>() {
        a.lag = *lag;
    }
    if let Some(allowed) = req.extensions().get::<Allowed>() {
        authorize(allowed, &a, req.method(), query)?;
    }
    if a.exec {
        return exec(ctx, &a, req).await;
    }
    if a.token {
        // Only created (after the authorizer, as on the apiserver: a GET is a 405 then).
        if req.method() != Method::POST {
            return Err(SimError::MethodNotAllowed);
        }
        let manager = query
            .get("fieldManager")
            .map_or_else(|| field_manager(&req), str::to_string);
        let body = read_body(req).await?;
        let ns = a.ns.as_deref().unwrap_or_default();
        let name = a.name.as_deref().unwrap_or_default();
        let answer = super::tokens::token_request(
            &ctx.issuer,
            ctx.cfg.profile,
            ns,
            name,
            &body,
            &manager,
            jiff::Timestamp::now().as_second(),
            |resource, name| {
                ctx.store
                    .get("", resource, Some(ns), name)
                    .ok()
                    .map(|o| o.value.clone())
            },
        )?;
        return Ok(json(ctx, StatusCode::CREATED, answer, f));
    }
    // A status subresource has no printer of its type's (the apiserver's default columns,
    // which the sim does not serve): it is answered in its own form.
    if req.method() == Method::GET && !a.status {
        if let Some(columns) = table_asked(ctx, &req, &a.rt) {
            return table_read(ctx, &a, query, columns, f).await;
        }
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let mut f = f;
    // Custom resources have no protobuf form (protobuf alone is a 406). Built-ins do; those
    // the sim cannot encode (no schema, or a field it does not know) are answered in JSON.
    // A metadata list is protobuf for every kind (its items are only ObjectMeta); a watch
    // asking for one gets the objects in their own JSON form (see `watch`).
    (f.media, f.form) = protobuf::negotiate(accept, !a.rt.custom).ok_or(SimError::NotAcceptable)?;
    // `?watch` makes a watch of a collection only: a named GET with it is a GET (the
    // apiserver's item handler has no watch; only the `/watch/` path watches one object).
    let watch = a.watch_path || (a.name.is_none() && query.flag("watch"));
    let metadata_list = f.form == Form::MetadataList;
    if (metadata_list && watch) || (!metadata_list && !protobuf::kind_supported(&a.rt)) {
        f.media = Media::Json;
    }
    let method = req.method().clone();
    match (&a.name, method) {
        (None, Method::GET) => collection_get(ctx, &a, query, f).await,
        (None, Method::POST) if !a.watch_path && (a.ns.is_some() || !a.rt.namespaced) => {
            let body = read_body(req).await?;
            let obj = decode(&a.rt, &body)?;
            let created = ctx
                .store
                .create(&a.rt.group, &a.rt.resource, a.ns.as_deref(), obj)?;
            Ok(object_response(
                ctx,
                &a.rt,
                StatusCode::CREATED,
                &created,
                f,
            ))
        }
        (None, Method::DELETE) if !a.watch_path => delete_collection(ctx, &a, query, f),
        (Some(_), Method::GET) if a.watch_path => {
            let opts = watch_options(ctx, &a, query)?;
            watch_response(ctx, &a, opts, f, None).await
        }
        (Some(name), Method::GET) => get(ctx, &a, name, query, f).await,
        (Some(name), Method::PUT) if !a.watch_path => {
            let body = read_body(req).await?;
            let obj = decode(&a.rt, &body)?;
            let mode = if a.status {
                UpdateMode::Status
            } else {
                UpdateMode::Main
            };
            let url = Some((a.ns.as_deref(), name.as_str()));
            let updated = ctx
                .store
                .update(&a.rt.group, &a.rt.resource, url, obj, mode)?;
            Ok(object_response(ctx, &a.rt, StatusCode::OK, &updated, f))
        }
        (Some(name), Method::PATCH) if !a.watch_path => {
            let ct = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .unwrap_or("")
                .trim()
                .to_string();
            let body = read_body(req).await?;
            let (obj, code) = apply_patch(ctx, &a, name, &ct, &body)?;
            Ok(object_response(ctx, &a.rt, code, &obj, f))
        }
        (Some(name), Method::DELETE) if !a.watch_path => {
            let body = read_body(req).await?;
            let opts: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let pre_rv = opts
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str);
            let pre_uid = opts.pointer("/preconditions/uid").and_then(Value::as_str);
            let gone = ctx.store.delete(
                &a.rt.group,
                &a.rt.resource,
                a.ns.as_deref(),
                name,
                pre_rv,
                pre_uid,
            )?;
            if a.rt.returns_deleted_object() {
                return Ok(object_response(ctx, &a.rt, StatusCode::OK, &gone, f));
            }
            let target = Target {
                group: a.rt.group.clone(),
                resource: a.rt.resource.clone(),
                name: name.clone(),
            };
            let status = delete_success(&target, gone.uid());
            Ok(match f.media {
                Media::Protobuf => proto(ctx, StatusCode::OK, protobuf::status_body(&status), f),
                Media::Json => json(ctx, StatusCode::OK, status.to_body(), f),
            })
        }
        _ => Err(SimError::MethodNotAllowed),
    }
}

/// The options of a watch of `a`: of a collection, or (the `/watch/` path with a name) of
/// one object, by its name or a field selector that requires exactly that name (the
/// apiserver's 400 otherwise, as a v1.34.9 apiserver answers it).
fn watch_options(
    ctx: &Ctx,
    a: &Addressed,
    query: &Query,
) -> Result<super::query::ListOptions, SimError> {
    let mut opts = list_options(query, &a.rt, a.watch_path, ctx.cfg.watchlist)?;
    if let Some(name) = &a.name {
        if opts.fields.is_empty() {
            opts.fields = super::selector::FieldSelector::with_name(name, &a.rt);
        } else if opts.fields.required_name() != Some(name.as_str()) {
            return Err(SimError::BadRequest(
                "fieldSelector metadata.name doesn't match requested name".into(),
            ));
        }
    }
    Ok(opts)
}

async fn collection_get(
    ctx: &Ctx,
    a: &Addressed,
    query: &Query,
    f: Fmt,
) -> Result<Response, SimError> {
    let opts = list_options(query, &a.rt, a.watch_path, ctx.cfg.watchlist)?;
    if opts.watch {
        return watch_response(ctx, a, opts, f, None).await;
    }
    let scope = Scope {
        rt: &a.rt,
        ns: a.ns.as_deref(),
    };
    if query.get("resourceVersion").is_none_or(str::is_empty) {
        ctx.storage_read().await;
    }
    let (body, media, items) = list::list(
        &ctx.store,
        &scope,
        &opts,
        ctx.cfg.too_large_rv_wait,
        a.lag,
        list::Output {
            media: f.media,
            form: f.form,
            profile: ctx.cfg.profile,
        },
    )
    .await?;
    ctx.list_written(items, f.form).await;
    Ok(match media {
        Media::Protobuf => proto(ctx, StatusCode::OK, body, f),
        Media::Json => json(ctx, StatusCode::OK, body, f),
    })
}

/// A watch; `table`: its events' objects printed as one-row Tables.
async fn watch_response(
    ctx: &Ctx,
    a: &Addressed,
    opts: super::query::ListOptions,
    f: Fmt,
    table: Option<Printer>,
) -> Result<Response, SimError> {
    let env = WatchEnv {
        bookmark_interval: ctx.cfg.bookmark_interval,
        too_large_wait: ctx.cfg.too_large_rv_wait,
        drop_rx: ctx.faults.drop_watches.subscribe(),
        bookmark_rx: ctx.faults.bookmark_now.subscribe(),
        fail_410: ctx.faults.take_watch_410(),
        withhold_end: ctx.faults.withholds_initial_events_end(),
        lag: match f.media {
            Media::Protobuf => a.lag.max(ctx.faults.protobuf_watch_lag()),
            Media::Json => a.lag,
        },
        progress_bookmarks: ctx.cfg.progress_bookmarks,
        media: f.media,
        form: f.form,
        profile: ctx.cfg.profile,
        table,
    };
    let (rx, media) =
        watch::start(ctx.store.clone(), a.rt.clone(), a.ns.clone(), opts, env).await?;
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let content_type = match media {
        Media::Protobuf => protobuf::WATCH_MEDIA_TYPE,
        Media::Json => "application/json",
    };
    Ok(finish(base(ctx, StatusCode::OK, content_type), body))
}

async fn get(
    ctx: &Ctx,
    a: &Addressed,
    name: &str,
    query: &Query,
    f: Fmt,
) -> Result<Response, SimError> {
    let obj = read_one(ctx, a, name, query).await?;
    Ok(object_response(ctx, &a.rt, StatusCode::OK, &obj, f))
}

/// The object a GET reads: from the serving replica's watch cache for a resourceVersion (0
/// included), from the store ("etcd") without one.
async fn read_one(
    ctx: &Ctx,
    a: &Addressed,
    name: &str,
    query: &Query,
) -> Result<Arc<StoredObj>, SimError> {
    // A resourceVersion (0 included) is served by the watch cache, none by etcd.
    if let Some(rv) = query.get("resourceVersion").filter(|s| !s.is_empty()) {
        let rv = parse_rv(rv)?;
        if rv > 0
            && !ctx
                .store
                .wait_for_lagged(rv, a.lag, ctx.cfg.too_large_rv_wait)
                .await
        {
            return Err(SimError::TooLargeResourceVersion {
                requested: rv,
                current: ctx.store.current_rv(),
            });
        }
        if !a.lag.is_zero() {
            let snap = ctx.store.lagged(&a.rt.group, &a.rt.resource, a.lag)?;
            let ns = if a.rt.namespaced {
                a.ns.as_deref()
            } else {
                None
            };
            return snap
                .objects
                .get(&super::store::obj_key(ns, name))
                .cloned()
                .ok_or_else(|| {
                    SimError::NotFound(Target {
                        group: a.rt.group.clone(),
                        resource: a.rt.resource.clone(),
                        name: name.to_string(),
                    })
                });
        }
    } else {
        ctx.storage_read().await;
    }
    ctx.store
        .get(&a.rt.group, &a.rt.resource, a.ns.as_deref(), name)
}

fn delete_collection(
    ctx: &Ctx,
    a: &Addressed,
    query: &Query,
    f: Fmt,
) -> Result<Response, SimError> {
    let opts = list_options(query, &a.rt, false, ctx.cfg.watchlist)?;
    let snap = ctx.store.snapshot(&a.rt.group, &a.rt.resource)?;
    let mut gone = Vec::new();
    for obj in snap.objects.values() {
        let in_ns = a.ns.as_deref().is_none_or(|ns| obj.namespace() == Some(ns));
        if in_ns && opts.labels.matches(&obj.value) && opts.fields.matches(&obj.value) {
            let name = obj
                .value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            // Already gone (a concurrent delete) is fine for a collection delete.
            if let Ok(g) = ctx.store.delete(
                &a.rt.group,
                &a.rt.resource,
                obj.namespace(),
                name,
                None,
                None,
            ) {
                gone.push(g);
            }
        }
    }
    let output = list::Output {
        media: f.media,
        form: f.form,
        profile: ctx.cfg.profile,
    };
    let (body, media) = list::body_of(&a.rt, ctx.store.current_rv(), gone, output)?;
    Ok(match media {
        Media::Protobuf => proto(ctx, StatusCode::OK, body, f),
        Media::Json => json(ctx, StatusCode::OK, body, f),
    })
}

fn apply_patch(
    ctx: &Ctx,
    a: &Addressed,
    name: &str,
    ct: &str,
    body: &[u8],
) -> Result<(Arc<StoredObj>, StatusCode), SimError> {
    enum Kind {
        Merge,
        Json,
        Apply,
    }
    let kind = match ct {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => Kind::Merge,
        "application/json-patch+json" => Kind::Json,
        "application/apply-patch+yaml" | "application/apply-patch+json" => Kind::Apply,
        _ => return Err(SimError::UnsupportedMediaType),
    };
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| SimError::BadRequest(format!("error decoding patch: {e}")))?;
    let (group, resource) = (a.rt.group.as_str(), a.rt.resource.as_str());
    let mode = if a.status {
        UpdateMode::Status
    } else {
        UpdateMode::Main
    };
    let pinned_rv = patch.pointer("/metadata/resourceVersion").is_some();
    // The apiserver retries a patch on conflict unless the patch itself pins a resourceVersion.
    for _ in 0..5 {
        let current = match ctx.store.get(group, resource, a.ns.as_deref(), name) {
            Ok(c) => c,
            Err(SimError::NotFound(_)) if matches!(kind, Kind::Apply) => {
                let mut obj = Value::Object(Default::default());
                patch::merge(&mut obj, &patch);
                let created = ctx.store.create(group, resource, a.ns.as_deref(), obj)?;
                return Ok((created, StatusCode::CREATED));
            }
            Err(e) => return Err(e),
        };
        let mut obj = current.value.clone();
        match kind {
            Kind::Merge | Kind::Apply => patch::merge(&mut obj, &patch),
            Kind::Json => patch::json_patch(&mut obj, &patch).map_err(SimError::BadRequest)?,
        }
        match ctx
            .store
            .update(group, resource, Some((a.ns.as_deref(), name)), obj, mode)
        {
            Err(SimError::Conflict(_)) if !pinned_rv => continue,
            other => return other.map(|o| (o, StatusCode::OK)),
        }
    }
    Err(SimError::Conflict(Target {
        group: group.into(),
        resource: resource.into(),
        name: name.into(),
    }))
}

async fn read_body(req: Request) -> Result<Bytes, SimError> {
    axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| SimError::BadRequest(format!("unable to read the request body: {e}")))
}

/// Decodes a request object with the apiserver's error text for undecodable bodies.
fn decode(rt: &ResourceType, body: &[u8]) -> Result<Value, SimError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        SimError::BadRequest(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {} ({})",
            rt.kind,
            go_json_error(body, &e),
            quote_body(body)
        ))
    })?;
    if v.get("kind")
        .is_none_or(|k| k.as_str().is_none_or(str::is_empty))
    {
        return Err(SimError::BadRequest(format!(
            "Object 'Kind' is missing in '{}'",
            String::from_utf8_lossy(body)
        )));
    }
    Ok(v)
}

/// Go's `encoding/json` wording for the common syntax errors.
fn go_json_error(body: &[u8], e: &serde_json::Error) -> String {
    if e.is_eof() {
        return "unexpected end of JSON input".into();
    }
    let trimmed: &[u8] = body.trim_ascii_start();
    for lit in ["true", "false", "null"] {
        let l = lit.as_bytes();
        if trimmed.first() == l.first() {
            if let Some(i) = (1..l.len()).find(|i| trimmed.get(*i) != l.get(*i)) {
                if let Some(c) = trimmed.get(i) {
                    return format!(
                        "invalid character '{}' in literal {lit} (expecting '{}')",
                        *c as char, l[i] as char
                    );
                }
            }
        }
    }
    match trimmed.first() {
        Some(c)
            if !matches!(
                c,
                b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
            ) =>
        {
            format!(
                "invalid character '{}' looking for beginning of value",
                *c as char
            )
        }
        _ => e.to_string(),
    }
}

/// The apiserver quotes the start of an undecodable body: as text when it looks like JSON,
/// as hex otherwise.
fn quote_body(body: &[u8]) -> String {
    const MAX: usize = 30;
    let head = &body[..body.len().min(MAX)];
    let more = if body.len() > MAX { " ..." } else { "" };
    if body
        .trim_ascii_start()
        .first()
        .is_some_and(|c| *c == b'{' || *c == b'[')
    {
        format!("{}{more}", String::from_utf8_lossy(head))
    } else {
        let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}{more}")
    }
}
