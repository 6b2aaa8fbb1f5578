//! What every API request goes through first (not the health and metrics endpoints, which
//! probes and scrapers reach without credentials): who is calling, and whether they may make
//! another request now. Authorization comes later, per request, once it is known what the
//! request reads; watch limits once it is known to be a watch.
//!
//! A plain function called at the top of each API handler rather than a tower layer: it runs
//! on every request, and a middleware's per-request boxing and service cloning cost more than
//! the checks themselves when auth is `none`.

use axum::response::Response;
use http::{header, Extensions, HeaderMap};

use super::{response, App};
use crate::auth::{Caller, ConnInfo};
use crate::status::ApiError;

/// A request admission refused.
pub struct Refused {
    /// The caller, when authentication accepted them (a rate or size limit refused them): the
    /// audit trail names them, as the apiserver's names the user its flow control refuses.
    pub caller: Option<Caller>,
    /// The error answer to send.
    pub response: Response,
}

/// Authenticate, then apply the per-caller rate and the request-size limit: the caller, or
/// the refusal.
pub async fn admit(
    app: &App,
    headers: &HeaderMap,
    extensions: &Extensions,
) -> Result<Caller, Refused> {
    let conn = extensions.get::<ConnInfo>();
    let caller = match app.auth.authenticate(headers, conn).await {
        Ok(c) => c,
        Err(e) => {
            return Err(Refused {
                caller: None,
                response: response::error(&ApiError::from(e)),
            })
        }
    };
    if let Err(e) = app.limits.admit(&caller.limit_key) {
        tracing::debug!(caller = caller.name(), "rate limited");
        return Err(Refused {
            caller: Some(caller),
            response: response::error(&e),
        });
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Err(e) = app.limits.check_request_size(declared) {
        return Err(Refused {
            caller: Some(caller),
            response: response::error(&e),
        });
    }
    Ok(caller)
}

/// Whether a request asks to act as someone else (`Impersonate-User`, `-Group`, `-Uid`,
/// `-Extra-*`). Such requests are never answered from the cache: the upstream checks the
/// caller's right to impersonate and answers as the impersonated user.
pub fn impersonates(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
}
