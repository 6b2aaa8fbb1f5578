//! kcache's own limits: request size, open watches (overall and per caller), list size, and
//! a per-caller request rate. They protect the proxy (and, through it, the upstream) from one
//! caller starving the others; each refusal is the Status the apiserver sends for the same
//! condition (413, 429 with Retry-After) and is counted in `kcache_limited_requests_total`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;

use crate::metrics::{self, Metrics};
use crate::status::ApiError;

/// The limits (`limits:` in the config, read as is). Zero means no limit.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitConfig {
    /// Largest request body (the apiserver's is 3 MiB).
    pub max_request_bytes: usize,
    /// Watches open through kcache at once.
    pub max_watches: usize,
    /// Watches one caller may hold open at once.
    pub max_watches_per_caller: usize,
    /// Most objects in one list answer from the cache; larger lists are paginated (the
    /// answer carries a continue token), as if the client had asked for `limit=N`.
    pub max_list_items: usize,
    /// Sustained requests per second per caller.
    pub per_caller_qps: f64,
    /// Requests a caller may make in a burst above the rate.
    pub per_caller_burst: u32,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            max_request_bytes: 3 * 1024 * 1024,
            max_watches: 0,
            max_watches_per_caller: 0,
            max_list_items: 0,
            per_caller_qps: 0.0,
            per_caller_burst: 0,
        }
    }
}

/// Callers remembered by the rate limiter before idle ones are forgotten.
const MAX_TRACKED_CALLERS: usize = 100_000;

struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The limits' live state.
pub(crate) struct Limits {
    config: LimitConfig,
    watches: AtomicUsize,
    caller_watches: DashMap<Arc<str>, usize>,
    buckets: DashMap<Arc<str>, Bucket>,
    metrics: Arc<Metrics>,
}

impl Limits {
    pub(crate) fn new(config: LimitConfig, metrics: Arc<Metrics>) -> Arc<Limits> {
        let m = &metrics;
        for (limit, v) in [
            ("request_size", config.max_request_bytes as i64),
            ("watches", config.max_watches as i64),
            ("caller_watches", config.max_watches_per_caller as i64),
            ("list_size", config.max_list_items as i64),
            ("rate", config.per_caller_qps.ceil() as i64),
        ] {
            m.limits
                .get_or_create(&metrics::LimitLabels { limit })
                .set(v);
        }
        Arc::new(Limits {
            config,
            watches: AtomicUsize::new(0),
            caller_watches: DashMap::new(),
            buckets: DashMap::new(),
            metrics,
        })
    }

    /// Count a request refused or cut by `limit` in `kcache_limited_requests_total`.
    pub(crate) fn count_limited(&self, limit: &'static str) {
        self.metrics
            .limited
            .get_or_create(&metrics::LimitLabels { limit })
            .inc();
    }

    pub(crate) fn max_request_bytes(&self) -> usize {
        self.config.max_request_bytes
    }

    /// The page size a cached list is answered with: the client's `limit` (0: all) capped by
    /// `maxListItems`.
    pub(crate) fn list_limit(&self, requested: i64) -> i64 {
        let max = self.config.max_list_items as i64;
        if max > 0 && (requested <= 0 || requested > max) {
            max
        } else {
            requested
        }
    }

    /// Count a list answer that the list-size limit cut into pages.
    pub(crate) fn note_paginated(&self) {
        self.count_limited("list_size");
    }

    /// A declared body size over the limit is refused before the body is read.
    pub(crate) fn check_request_size(&self, content_length: Option<u64>) -> Result<(), ApiError> {
        let max = self.config.max_request_bytes;
        match content_length {
            Some(n) if max > 0 && n > max as u64 => {
                self.count_limited("request_size");
                Err(ApiError::TooLarge(format!(
                    "the request body is larger than {max} bytes"
                )))
            }
            _ => Ok(()),
        }
    }

    /// Take one request from the caller's token bucket, or a 429 saying when to retry.
    pub(crate) fn admit(&self, caller: &Arc<str>) -> Result<(), ApiError> {
        let qps = self.config.per_caller_qps;
        if qps <= 0.0 {
            return Ok(());
        }
        let burst = f64::from(self.config.per_caller_burst.max(1));
        let now = Instant::now();
        if self.buckets.len() >= MAX_TRACKED_CALLERS && !self.buckets.contains_key(caller) {
            // Forget callers whose bucket has refilled: they are indistinguishable from new.
            self.buckets
                .retain(|_, b| b.tokens + now.duration_since(b.last).as_secs_f64() * qps < burst);
        }
        let mut b = self
            .buckets
            .entry(caller.clone())
            .or_insert_with(|| Bucket {
                tokens: burst,
                last: now,
            });
        b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * qps).min(burst);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        self.count_limited("rate");
        let wait = ((1.0 - b.tokens) / qps).ceil().max(1.0) as u32;
        Err(ApiError::TooManyRequests {
            message: "Too many requests, please try again later.".into(),
            retry_after: wait,
        })
    }

    /// Reserve a watch for `caller`; the slot is given back when dropped (when the watch's
    /// response body ends).
    pub(crate) fn watch(self: &Arc<Self>, caller: &Arc<str>) -> Result<WatchSlot, ApiError> {
        let too_many = |limit: &'static str, what: String| {
            self.count_limited(limit);
            ApiError::TooManyRequests {
                message: format!("Too many requests, please try again later: {what}"),
                retry_after: 1,
            }
        };
        let max = self.config.max_watches;
        let open = self.watches.fetch_add(1, Ordering::SeqCst);
        if max > 0 && open >= max {
            self.watches.fetch_sub(1, Ordering::SeqCst);
            return Err(too_many("watches", format!("{max} watches are open")));
        }
        let per = self.config.max_watches_per_caller;
        {
            let mut mine = self.caller_watches.entry(caller.clone()).or_insert(0);
            if per > 0 && *mine >= per {
                drop(mine);
                self.watches.fetch_sub(1, Ordering::SeqCst);
                return Err(too_many(
                    "caller_watches",
                    format!("{caller} has {per} watches open"),
                ));
            }
            *mine += 1;
        }
        self.metrics.open_watches.inc();
        Ok(WatchSlot {
            limits: self.clone(),
            caller: caller.clone(),
        })
    }

    /// Watches open now (overall).
    #[cfg(test)]
    pub(crate) fn open_watches(&self) -> usize {
        self.watches.load(Ordering::SeqCst)
    }
}

/// One open watch, counted until dropped.
pub(crate) struct WatchSlot {
    limits: Arc<Limits>,
    caller: Arc<str>,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.limits.watches.fetch_sub(1, Ordering::SeqCst);
        self.limits.metrics.open_watches.dec();
        // Remove the caller's entry at zero so the map holds only callers with open watches.
        self.limits
            .caller_watches
            .remove_if_mut(&self.caller, |_, n| {
                *n = n.saturating_sub(1);
                *n == 0
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_slots_are_counted_and_given_back() {
        let l = Limits::new(
            LimitConfig {
                max_watches: 3,
                max_watches_per_caller: 2,
                ..Default::default()
            },
            Arc::default(),
        );
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let a1 = l.watch(&a).unwrap();
        let _a2 = l.watch(&a).unwrap();
        let e = l.watch(&a).err().unwrap();
        assert_eq!(e.code(), 429);
        let _b1 = l.watch(&b).unwrap();
        assert_eq!(l.watch(&b).err().unwrap().code(), 429, "overall limit");
        drop(a1);
        assert_eq!(l.open_watches(), 2);
        let _b2 = l.watch(&b).unwrap();
        assert_eq!(l.open_watches(), 3);
    }

    #[test]
    fn rate_allows_a_burst_then_says_when_to_retry() {
        let l = Limits::new(
            LimitConfig {
                per_caller_qps: 0.5,
                per_caller_burst: 3,
                ..Default::default()
            },
            Arc::default(),
        );
        let a: Arc<str> = "a".into();
        for _ in 0..3 {
            l.admit(&a).unwrap();
        }
        let e = l.admit(&a).unwrap_err();
        assert_eq!(e.code(), 429);
        assert_eq!(e.retry_after(), Some(2));
        // Another caller is not affected.
        l.admit(&"b".into()).unwrap();
    }

    #[test]
    fn list_limit_caps_only_above_the_maximum() {
        let l = Limits::new(
            LimitConfig {
                max_list_items: 100,
                ..Default::default()
            },
            Arc::default(),
        );
        assert_eq!(l.list_limit(0), 100);
        assert_eq!(l.list_limit(500), 100);
        assert_eq!(l.list_limit(20), 20);
        let none = Limits::new(LimitConfig::default(), Arc::default());
        assert_eq!(none.list_limit(0), 0);
    }
}
