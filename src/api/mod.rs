//! The HTTP face of kcache: decides per request whether the cache answers (LIST, GET, WATCH of
//! a cached resource, asking for plain JSON) or the upstream does (everything else), and
//! answers exactly as kube-apiserver would.

mod continue_token;
mod filter;
mod get;
mod list;
mod negotiate;
mod params;
mod proxy;
mod response;
mod route;
mod watch;

pub use continue_token::ContinueToken;
pub use filter::Filter;
pub use negotiate::{negotiate, Representation};
pub use watch::WatchConfig;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get as get_route;
use axum::Router;
use http::{header, Method, StatusCode};

use crate::cache::{Registry, ResourceCache};
use crate::selector::FieldSelector;
use crate::status::ApiError;
use crate::upstream::{RvProbe, Upstream};
use params::{GetOptions, ListOptions};

/// Everything a request handler needs.
pub struct App {
    pub registry: Registry,
    pub upstream: Upstream,
    /// Consistent-read probes, by (group, resource).
    pub probes: HashMap<(String, String), Arc<RvProbe>>,
    pub watch: WatchConfig,
    pub consistent: ConsistentReads,
    /// How long reads wait for the cache to reach a requested resourceVersion (the
    /// apiserver's 3 s before its 504).
    pub rv_wait: Duration,
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
    fn probe(&self, cache: &ResourceCache) -> Option<&Arc<RvProbe>> {
        self.probes
            .get(&(cache.info.group.clone(), cache.info.resource.clone()))
    }

    /// Make the cache fit for a consistent read: Ok(true) once it has reached everything the
    /// upstream had when the read arrived; Ok(false) when the upstream must answer instead.
    async fn consistent(&self, cache: &ResourceCache) -> Result<bool, ApiError> {
        if !self.consistent.from_cache || !cache.is_synced() {
            return Ok(false);
        }
        let Some(probe) = self.probe(cache) else {
            return Ok(false);
        };
        let target = match probe.target().await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(resource = %cache.info, error = %e, "consistency probe failed; forwarding");
                return Ok(false);
            }
        };
        match cache.wait_for_rv(target, self.consistent.wait).await {
            Ok(()) => Ok(true),
            Err(_) if self.consistent.fallback => Ok(false),
            Err(current) => Err(ApiError::TooLargeResourceVersion {
                requested: target,
                current,
            }),
        }
    }
}

/// What a cache handler decided.
pub enum Answer {
    Ready(Response),
    /// The cache cannot answer this exactly; forward it.
    Upstream,
}

/// The router: kcache's own health endpoints, everything else through [`handle`].
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/livez", get_route(|| async { "ok" }))
        .route("/healthz", get_route(|| async { "ok" }))
        .route("/readyz", get_route(readyz))
        .fallback(handle)
        .with_state(app)
}

/// Ready once every cached resource has synced; lists them with `?verbose`.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let mut lines = Vec::new();
    let mut ready = true;
    let mut caches: Vec<_> = app.registry.all().collect();
    caches.sort_by_key(|c| c.info.to_string());
    for c in caches {
        let synced = c.is_synced();
        ready &= synced;
        let mark = if synced { "+" } else { "-" };
        lines.push(format!(
            "[{mark}]cache {} {}",
            c.info,
            if synced { "ok" } else { "not synced" }
        ));
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    lines.push(if ready {
        "readyz check passed".into()
    } else {
        "readyz check failed".into()
    });
    (status, lines.join("\n") + "\n").into_response()
}

/// Serve one request from the cache when it can be answered exactly, else forward it.
pub async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    match serve_from_cache(&app, &parts).await {
        Ok(Answer::Ready(resp)) => resp,
        Ok(Answer::Upstream) => {
            proxy::forward(&app.upstream, Request::from_parts(parts, body)).await
        }
        Err(e) => response::error(&e),
    }
}

async fn serve_from_cache(app: &App, req: &http::request::Parts) -> Result<Answer, ApiError> {
    if req.method != Method::GET {
        return Ok(Answer::Upstream);
    }
    let Some(path) = route::parse(req.uri.path()) else {
        return Ok(Answer::Upstream);
    };
    if path.subresource.is_some() {
        return Ok(Answer::Upstream);
    }
    let Some(cache) = app.registry.get(&path.group, &path.version, &path.resource) else {
        return Ok(Answer::Upstream);
    };
    let info = &cache.info;
    // Scope mismatches get the upstream's own 404 flavours (G2).
    let scope_ok = if info.namespaced {
        path.namespace.is_some() || path.name.is_none()
    } else {
        path.namespace.is_none()
    };
    if !scope_ok {
        return Ok(Answer::Upstream);
    }
    let header = |h: header::HeaderName| req.headers.get(h).and_then(|v| v.to_str().ok());
    if negotiate(header(header::ACCEPT)) != Representation::Json {
        return Ok(Answer::Upstream);
    }
    let user_agent = header(header::USER_AGENT);
    let q = params::parse_query(req.uri.query());
    let ns = path.namespace.clone();

    let is_watch = path.legacy_watch
        || q.iter()
            .find(|(k, _)| k == "watch")
            .is_some_and(|(_, v)| v != "0" && !v.eq_ignore_ascii_case("false"));
    if let (Some(name), false) = (&path.name, is_watch) {
        if !cache
            .scope
            .covers(ns.as_deref(), &cache.scope.label, &cache.scope.field)
        {
            return Ok(Answer::Upstream);
        }
        let opts = GetOptions::parse(&q);
        let consistent = opts.resource_version.is_none() && app.consistent(cache).await?;
        let key = match &ns {
            Some(ns) => format!("{ns}/{name}"),
            None => name.clone(),
        };
        let pretty = response::wants_pretty(opts.pretty, user_agent);
        return get::get(cache, &key, name, &opts, consistent, app.rv_wait, pretty).await;
    }

    let mut opts = ListOptions::parse(&q, info, path.legacy_watch)?;
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
        return Ok(Answer::Upstream);
    }
    let filter = Filter {
        namespace: if info.namespaced { ns } else { None },
        label: opts.label.clone(),
        field: opts.field.clone(),
    };
    if opts.watch {
        let resp = watch::watch(cache.clone(), app.probe(cache), filter, &opts, &app.watch).await?;
        return Ok(Answer::Ready(resp));
    }
    let pretty = response::wants_pretty(opts.pretty, user_agent);
    let consistent = opts.resource_version.is_none()
        && opts.continue_token.is_none()
        && app.consistent(cache).await?;
    list::list(cache, filter, &opts, consistent, app.rv_wait, pretty).await
}
