//! Serving while the upstream is down: the cache-age header on every answer from the cache,
//! the policy for consistent reads that cannot be confirmed current, and the readiness detail.
//!
//! A cache's age is the time since its reflector last had confirmed contact with the upstream:
//! an event, a bookmark, a list page or a watch opened ([`Contact::age`](crate::cache::Contact::age)). On a healthy
//! upstream it stays below the bookmark interval; it grows while the upstream is unreachable.

use std::time::Duration;

use axum::response::Response;
use http::HeaderValue;

use super::{response, Answer};
use crate::cache::ResourceCache;
use crate::status::ApiError;

/// The response header carrying the age, in seconds with millisecond precision.
pub const CACHE_AGE_HEADER: &str = "x-kcache-cache-age";

/// The staleness policy (config section `staleness`).
#[derive(Debug, Clone)]
pub(crate) struct Staleness {
    /// None: a consistent read the upstream cannot confirm is served from the cache however
    /// old it is. Some(max): only while the cache is at most `max` old, then 504.
    pub max_consistent_read: Option<Duration>,
    /// Bound on kcache's own upstream requests (applied to the upstream handle at start).
    pub upstream_request_timeout: Duration,
}

impl Default for Staleness {
    fn default() -> Self {
        Staleness {
            max_consistent_read: None,
            upstream_request_timeout: crate::upstream::DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

impl Staleness {
    /// May a consistent read be answered from `cache` without confirmation from the upstream?
    /// Err is the 504 to answer instead.
    pub(crate) fn allow_unconfirmed(&self, cache: &ResourceCache) -> Result<(), ApiError> {
        let age = cache.contact().age();
        match self.max_consistent_read {
            Some(max) if age > max => Err(ApiError::Timeout(format!(
                "the upstream has not answered for {:.0}s and the cached {} may be stale \
                 (more than maxConsistentReadStalenessSeconds={}); retry, or read with \
                 resourceVersion=0 to accept the cached state",
                age.as_secs_f64(),
                cache.info.resource,
                max.as_secs()
            ))),
            _ => Ok(()),
        }
    }
}

/// The age header value of a cache.
fn age_value(cache: &ResourceCache) -> HeaderValue {
    // Integer formatting: this runs on every cached answer, and float formatting costs more
    // than the rest of a small GET's header work. Digits and a dot are always a valid value.
    let ms = cache.contact().age().as_millis();
    HeaderValue::from_str(&format!("{}.{:03}", ms / 1000, ms % 1000))
        .unwrap_or(HeaderValue::from_static("0"))
}

/// A cache handler's outcome as the answer to send, its age stamped on it (an error the cache
/// decided on is an answer from the cache too, in protobuf when `protobuf`); a forwarded one
/// stays as it is.
pub(super) fn stamp(
    answer: Result<Answer, ApiError>,
    cache: &ResourceCache,
    protobuf: bool,
) -> Answer {
    match answer {
        Ok(Answer::Ready(resp)) => Answer::Ready(with_age(resp, cache)),
        Ok(answer @ (Answer::Upstream | Answer::Consistent(_))) => answer,
        Err(e) => Answer::Ready(with_age(response::error_as(&e, protobuf), cache)),
    }
}

/// Mark a response as served from `cache`, with its age.
pub(super) fn with_age(mut resp: Response, cache: &ResourceCache) -> Response {
    resp.headers_mut()
        .insert(CACHE_AGE_HEADER, age_value(cache));
    resp
}

/// How long a reachable upstream may send a synced cache no event or bookmark before the
/// cache is called stale (in `/readyz?verbose` and the admin `/status`): well above the
/// apiserver's bookmark interval of about a minute.
pub(super) const QUIET_AFTER: Duration = Duration::from_secs(120);

/// The `/readyz?verbose` detail of a cache. A synced cache stays ready while stale: every
/// replica fronts the same upstream, so failing readiness would take all of them out of the
/// Service at once and turn stale reads into no reads; the age is in the detail, the metrics
/// and every answer instead.
///
/// A type over its memory budget is ready too, with a warning: every read of it is answered
/// correctly, by the upstream.
pub(super) fn ready_detail(cache: &ResourceCache) -> String {
    if let Some(over) = cache.budget().overage() {
        return format!(
            "ok (warning: over memoryBudget of {} bytes at {} bytes; not cached, reads passed \
             through to the upstream until kcache restarts)",
            over.budget, over.bytes
        );
    }
    if !cache.is_synced() {
        return "not synced".into();
    }
    let age = cache.contact().age();
    if cache.is_unconfirmed() {
        format!(
            "ok (restored from disk, {}s old; upstream not reached yet)",
            age.as_secs()
        )
    } else if !cache.contact().reachable() {
        format!("ok (stale: upstream unreachable for {}s)", age.as_secs())
    } else if age > QUIET_AFTER {
        format!("ok (no upstream event or bookmark for {}s)", age.as_secs())
    } else {
        "ok".into()
    }
}
