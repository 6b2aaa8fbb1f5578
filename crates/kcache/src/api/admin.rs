//! kcache's own endpoints, served on the admin listener (plain HTTP, no authentication):
//! `/livez`, `/healthz`, `/readyz` (each with `?verbose`), `/metrics` and `/status` (see
//! [`status`]). They hold no object data: cache names, counts, sizes and timings only. On the
//! API address the same paths are passed to the upstream, whose health and metrics they are
//! there.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http::{header, StatusCode};

pub mod status;

use super::{params, staleness, App};
use crate::metrics::Format;
use crate::registry::Origin;

/// The admin router. Anything else is a plain 404.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/status", get(status_page))
        .with_state(app)
}

/// Whether the query has `verbose` (any value, as the apiserver reads it).
fn verbose(req: &Request) -> bool {
    req.uri().query().is_some_and(|q| {
        params::parse_query(Some(q))
            .iter()
            .any(|(k, _)| k == "verbose")
    })
}

/// The process is alive while it answers; with `?verbose`, in the apiserver's form.
async fn livez(req: Request) -> Response {
    alive("livez", &req)
}

async fn healthz(req: Request) -> Response {
    alive("healthz", &req)
}

fn alive(name: &str, req: &Request) -> Response {
    if verbose(req) {
        format!("[+]ping ok\n{name} check passed\n").into_response()
    } else {
        "ok".into_response()
    }
}

/// `/metrics`: the Prometheus text format unless the scraper asks for OpenMetrics.
async fn metrics_text(State(app): State<Arc<App>>, req: Request) -> Response {
    let format = Format::negotiate(
        req.headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    );
    // O(objects) for the memory estimates: off the workers that answer reads, so a scrape
    // of a large cache does not hold up the requests queued behind it.
    let text = {
        let app = app.clone();
        app.background
            .clone()
            .run(move || {
                if let Some(audit) = &app.audit {
                    let auditor = audit.auditor();
                    let backends: Vec<_> = auditor.backends().collect();
                    app.metrics.audit(&auditor.stats(), &backends);
                }
                let caches: Vec<_> = app.registry.all().collect();
                let not_served: Vec<String> = app
                    .registry
                    .not_served()
                    .into_iter()
                    .map(|name| name.resource)
                    .collect();
                app.metrics.render(&caches, &not_served, format)
            })
            .await
    };
    ([(header::CONTENT_TYPE, format.content_type())], text).into_response()
}

/// `/status`: the page, the JSON or the text table, as the caller asks (see
/// [`status::Format::choose`]).
async fn status_page(State(app): State<Arc<App>>, req: Request) -> Response {
    let query = params::parse_query(req.uri().query());
    let format = query
        .iter()
        .find(|(k, _)| k == "format")
        .map(|(_, v)| v.as_str());
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let Some(format) = status::Format::choose(format, accept) else {
        return (
            StatusCode::BAD_REQUEST,
            "format must be html, json or text\n",
        )
            .into_response();
    };
    let report = status::report(app).await;
    let body = match format {
        status::Format::Html => status::html::render(&report),
        status::Format::Text => status::text::render(&report),
        status::Format::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => json + "\n",
            // Plain data: it always serialises, but a failure must not look like a report.
            Err(e) => {
                return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
            }
        },
    };
    (
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// Ready once every cached resource has synced (or gone over its memory budget, and so is
/// passed through) and no shutdown is under way; lists them with `?verbose`.
async fn readyz(State(app): State<Arc<App>>, req: Request) -> Response {
    let verbose = verbose(&req);
    let mut lines = Vec::new();
    let stopping = *app.stopping.borrow();
    let mut ready = !stopping;
    lines.push(format!(
        "[{}]shutdown {}",
        if stopping { "-" } else { "+" },
        if stopping { "in progress" } else { "ok" }
    ));
    for entry in app.registry.entries() {
        let name = &entry.name;
        let Some(c) = &entry.cache else {
            // A configured type the upstream does not serve holds nothing up: its requests
            // are the upstream's own, as for a type kcache does not cache.
            lines.push(format!(
                "[+]cache {name} not served by the upstream (requests passed through)"
            ));
            continue;
        };
        // A synced cache stays ready while stale; see `staleness::ready_detail`.
        let detail = staleness::ready_detail(c);
        if entry.origin == Origin::Auto {
            // Nobody configured it: until it has synced, its reads pass through, as they did
            // before it was taken up.
            lines.push(format!("[+]cache {name} {detail} (cached on demand)"));
            continue;
        }
        let synced = c.is_settled();
        ready &= synced;
        let mark = if synced { "+" } else { "-" };
        lines.push(format!("[{mark}]cache {name} {detail}"));
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let summary = if ready {
        "readyz check passed"
    } else {
        "readyz check failed"
    };
    if ready && !verbose {
        return (status, "ok").into_response();
    }
    lines.push(summary.into());
    (status, lines.join("\n") + "\n").into_response()
}
