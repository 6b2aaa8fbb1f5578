//! The layer in front of every API request (not the health and metrics endpoints, which
//! probes and scrapers reach without credentials, as on the apiserver's own /livez,
//! /readyz and (via RBAC-less scrape configs) /metrics): who is calling, and whether they
//! may make another request now. Authorization comes later, per request, once it is known
//! what the request reads; watch limits once it is known to be a watch.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::header;

use super::{response, App};
use crate::auth::{Caller, ConnInfo, Forward, UserInfo};

/// Authenticate, apply the per-caller rate and the request-size limit, and hand the
/// [`Caller`] to the handlers in the request's extensions.
pub async fn admit(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let conn = req.extensions().get::<ConnInfo>().cloned();
    let caller = match app.auth.authenticate(req.headers(), conn.as_ref()).await {
        Ok(c) => c,
        Err(e) => return response::error(&e),
    };
    if let Err(e) = app.limits.admit(&caller.limit_key) {
        tracing::debug!(caller = caller.name(), "rate limited");
        return response::error(&e);
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Err(e) = app.limits.check_request_size(declared) {
        return response::error(&e);
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The caller [`admit`] found. A request that did not pass through it (which the router
/// does not allow) is treated as anonymous, never as kcache.
pub fn caller_of(extensions: &http::Extensions) -> Caller {
    extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller {
            user: Some(Arc::new(UserInfo::anonymous())),
            forward: Forward::Anonymous,
            limit_key: "system:anonymous".into(),
        })
}

/// Whether a request asks to act as someone else (`Impersonate-User`, `-Group`, `-Uid`,
/// `-Extra-*`). Such requests are never answered from the cache: the upstream checks the
/// caller's right to impersonate and answers as the impersonated user.
pub fn impersonates(headers: &http::HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
}
