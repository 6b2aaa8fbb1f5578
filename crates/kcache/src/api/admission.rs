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
use crate::auth::service_account::{Bound, BoundObjects};
use crate::auth::{Caller, ConnInfo};
use crate::status::ApiError;

/// A request admission refused.
pub(super) struct Refused {
    /// The caller, when authentication accepted them (a rate or size limit refused them): the
    /// audit trail names them, as the apiserver's names the user its flow control refuses.
    pub caller: Option<Caller>,
    /// The error answer to send.
    pub response: Response,
}

/// Authenticate, then apply the per-caller rate and the request-size limit: the caller, or
/// the refusal.
pub(super) async fn admit(
    app: &App,
    headers: &HeaderMap,
    extensions: &Extensions,
) -> Result<Caller, Refused> {
    let conn = extensions.get::<ConnInfo>();
    let caller = match app
        .auth
        .authenticate(headers, conn, &Cached(app.registry()))
        .await
    {
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
pub(super) fn impersonates(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
}

/// kcache's caches, as ServiceAccount token verification looks objects up in them
/// (`auth::service_account`): an object counts only from a cache of the whole type that is
/// synced and current (in contact with the upstream, not a state restored from disk the
/// upstream has not confirmed yet); anything else sends the token to a TokenReview.
struct Cached<'a>(&'a crate::registry::Registry);

impl BoundObjects for Cached<'_> {
    fn holds(&self, kind: Bound, namespace: &str, name: &str, uid: &str) -> bool {
        let (resource, key) = match kind {
            Bound::ServiceAccount => ("serviceaccounts", format!("{namespace}/{name}")),
            Bound::Pod => ("pods", format!("{namespace}/{name}")),
            Bound::Node => ("nodes", name.to_string()),
        };
        let Some(cache) = self.0.get("", "v1", resource).map(|s| s.cache.clone()) else {
            return false;
        };
        let scope = &cache.scope;
        let whole = scope.namespace.is_none() && scope.label.is_empty() && scope.field.is_empty();
        let current =
            cache.is_synced() && cache.contact().confirmed() && cache.contact().reachable();
        if !whole || !current {
            return false;
        }
        let snapshot = cache.snapshot();
        let Some(object) = snapshot.objects.get(key.as_str()) else {
            return false;
        };
        #[derive(serde::Deserialize)]
        struct Meta<'a> {
            #[serde(borrow)]
            metadata: Fields<'a>,
        }
        #[derive(serde::Deserialize)]
        struct Fields<'a> {
            #[serde(borrow, default)]
            uid: &'a str,
            #[serde(default, rename = "deletionTimestamp")]
            deletion: Option<serde::de::IgnoredAny>,
        }
        serde_json::from_slice::<Meta<'_>>(object.raw())
            .is_ok_and(|m| m.metadata.uid == uid && m.metadata.deletion.is_none())
    }
}
