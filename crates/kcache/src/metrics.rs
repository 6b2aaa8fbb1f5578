//! Prometheus metrics (`/metrics` on the admin listener), with the `prometheus-client` crate:
//! its metric handles are plain `Arc`ed atomics that a watcher can keep and bump per event
//! without a lookup. The crate encodes OpenMetrics only; scrapers that do not ask for it get
//! the Prometheus text format 0.0.4, derived from that encoding by `to_prometheus_text`.
//!
//! Each running kcache ([`crate::server::start`]) owns one [`Metrics`] registry, shared as an
//! `Arc` with what records into it (the reflectors, the API, auth, the limits) and rendered by
//! its admin `/metrics`: several instances in one process (the tests) never see each other's
//! series. Only the process figures from /proc are process-wide, as they are by nature. Labels
//! are low cardinality by construction: verbs, cached resource names (`other` for anything
//! else), HTTP codes and small fixed reason sets — never object names or client identities.
//!
//! Why one file of this length: most of it is the registration of every metric, each with
//! its help text, in one place, so that the names `docs/operations.md` lists can be checked
//! against one list (`tests/operations_doc.rs`). The unit tests are in `metrics/tests.rs`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::cache::ResourceCache;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: &'static str,
    pub resource: String,
    pub code: u16,
    pub source: &'static str,
}

/// A response's encoding and where it came from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ContentTypeLabels {
    /// `json`, `protobuf` or `other` (Table and PartialObjectMetadata are JSON).
    pub content_type: &'static str,
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DurationLabels {
    pub verb: &'static str,
    pub resource: String,
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

/// A part of a cache's memory (see `cache::CacheMemory`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemoryLabels {
    pub resource: String,
    /// `json`, `head`, `index` or `history`.
    pub component: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub resource: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TypeLabels {
    pub resource: String,
    pub r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PurposeLabels {
    pub purpose: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub resource: String,
    pub outcome: &'static str,
}

/// On-demand caching: why a type was dropped, or why one clients read is not cached.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AutoLabels {
    /// `group/version/resource` (`v1/secrets` for the core group).
    pub resource: String,
    pub reason: &'static str,
}

/// Why a type cached on demand was dropped: idle, not_served.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DroppedLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AuthnLabels {
    /// token, certificate, anonymous, local, rejected, error
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditLabels {
    /// `log` or `webhook`.
    pub backend: &'static str,
    /// `recorded`, `written`, `dropped` or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthzLabels {
    /// allowed, denied, error
    pub decision: &'static str,
    /// cache, upstream, stale
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// rate, watches, caller_watches, request_size, list_size
    pub limit: &'static str,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms … ~33 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

/// Every outcome of a consistent read (`kcache_consistent_reads_total{outcome}`), created at
/// zero per cached type by [`Metrics::init_resource`].
pub const CONSISTENT_READ_OUTCOMES: [&str; 11] = [
    "cache",
    "proven",
    "forwarded",
    "forwarded_quiet",
    "forwarded_changed",
    "forwarded_get",
    "forwarded_lagging",
    "forwarded_probe_failed",
    "timeout",
    "stale",
    "too_stale",
];

/// One request counted in `kcache_inflight_requests` for as long as this lives: dropped with
/// the request's handler however it ends, a client's cancellation included.
#[derive(Debug)]
pub(crate) struct InFlight(Gauge);

impl InFlight {
    /// Count one more request in `gauge` until the guard is dropped.
    pub(crate) fn enter(gauge: Gauge) -> InFlight {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Every metric kcache exports.
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub(crate) request_duration: Family<DurationLabels, Histogram, fn() -> Histogram>,
    pub inflight: Family<VerbLabels, Gauge>,
    pub cached_objects: Family<ResourceLabels, Gauge>,
    pub cached_bytes: Family<ResourceLabels, Gauge>,
    /// `resources[].memoryBudget` in bytes, for resources with one.
    pub cache_budget: Family<ResourceLabels, Gauge>,
    /// 1 once a resource with a budget went over it (and is passed through), else 0.
    pub cache_over_budget: Family<ResourceLabels, Gauge>,
    pub cache_memory: Family<MemoryLabels, Gauge>,
    pub(crate) upstream_events: Family<TypeLabels, Counter>,
    pub watch_events_sent: Family<ResourceLabels, Counter>,
    pub watchers: Family<ResourceLabels, Gauge>,
    pub(crate) watchers_closed: Family<ReasonLabels, Counter>,
    pub relists: Family<ResourceLabels, Counter>,
    pub upstream_expired: Family<ResourceLabels, Counter>,
    pub(crate) upstream_errors: Family<ReasonLabels, Counter>,
    pub consistent_reads: Family<OutcomeLabels, Counter>,
    pub consistent_wait: Family<ResourceLabels, Histogram, fn() -> Histogram>,
    pub cache_lag: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub cache_synced: Family<ResourceLabels, Gauge>,
    /// 1 while the upstream serves a configured resource (it has a cache), 0 while it does not.
    pub cache_served: Family<ResourceLabels, Gauge>,
    pub(crate) authentications: Family<AuthnLabels, Counter>,
    pub authorizations: Family<AuthzLabels, Counter>,
    /// 1 while kcache watches every RBAC type of the upstream (allowances RBAC gave are then
    /// remembered until RBAC changes), else 0.
    pub auth_rbac_followed: Gauge,
    /// Access verdicts taken back from `cache.persistDir` at start.
    pub auth_verdicts_restored: Counter,
    /// The audit trail's events by backend and fate, brought up to date from the auditor's
    /// own counters at each scrape (`Metrics::audit`).
    pub audit_events: Family<AuditLabels, Counter>,
    pub limited: Family<LimitLabels, Counter>,
    pub limits: Family<LimitLabels, Gauge>,
    pub open_watches: Gauge,
    pub tls_handshake_errors: Counter,
    pub cache_age: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub upstream_reachable: Family<ResourceLabels, Gauge>,
    pub upstream_requests: Family<PurposeLabels, Counter>,
    pub upstream_sent_bytes: Family<PurposeLabels, Counter>,
    pub upstream_received_bytes: Family<PurposeLabels, Counter>,
    pub(crate) responses_by_content_type: Family<ContentTypeLabels, Counter>,
    /// Warm restart (`cache.persistDir`): commits of a cache's changes, by outcome.
    pub persist_flushes: Family<OutcomeLabels, Counter>,
    pub persist_flush_seconds: Family<ResourceLabels, Histogram, fn() -> Histogram>,
    /// Objects loaded from disk at start (0: synced cold).
    pub persist_restored_objects: Family<ResourceLabels, Gauge>,
    /// Object versions of the type's protobuf mirror committed with its objects (0: none).
    pub persist_protobuf_objects: Family<ResourceLabels, Gauge>,
    /// On-demand caching (`auto`): types cached now.
    pub auto_types: Gauge,
    /// Types taken up, and dropped (by reason: idle, not_served, forbidden).
    pub auto_cached: Counter,
    pub(crate) auto_dropped: Family<DroppedLabels, Counter>,
    /// Bytes the dropped types' caches held when they were dropped.
    pub auto_released_bytes: Counter,
    /// 1 for each type clients read often enough that is not cached, by reason (denied,
    /// forbidden, not_listable, max_types, over_budget).
    pub auto_refused: Family<AutoLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered and the fixed series at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("kcache");
        let m = Metrics {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(latency_histogram),
            inflight: Family::default(),
            cached_objects: Family::default(),
            cached_bytes: Family::default(),
            cache_budget: Family::default(),
            cache_over_budget: Family::default(),
            cache_memory: Family::default(),
            upstream_events: Family::default(),
            watch_events_sent: Family::default(),
            watchers: Family::default(),
            watchers_closed: Family::default(),
            relists: Family::default(),
            upstream_expired: Family::default(),
            upstream_errors: Family::default(),
            consistent_reads: Family::default(),
            consistent_wait: Family::new_with_constructor(latency_histogram),
            cache_lag: Family::default(),
            cache_synced: Family::default(),
            cache_served: Family::default(),
            authentications: Family::default(),
            authorizations: Family::default(),
            auth_rbac_followed: Gauge::default(),
            auth_verdicts_restored: Counter::default(),
            audit_events: Family::default(),
            limited: Family::default(),
            limits: Family::default(),
            open_watches: Gauge::default(),
            tls_handshake_errors: Counter::default(),
            auto_types: Gauge::default(),
            auto_cached: Counter::default(),
            auto_dropped: Family::default(),
            auto_released_bytes: Counter::default(),
            auto_refused: Family::default(),
            cache_age: Family::default(),
            upstream_reachable: Family::default(),
            upstream_requests: Family::default(),
            upstream_sent_bytes: Family::default(),
            upstream_received_bytes: Family::default(),
            responses_by_content_type: Family::default(),
            persist_flushes: Family::default(),
            persist_flush_seconds: Family::new_with_constructor(latency_histogram),
            persist_restored_objects: Family::default(),
            persist_protobuf_objects: Family::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "requests",
            "Requests by verb, resource, code and where they were answered (cache or upstream)",
            m.requests.clone(),
        );
        r.register(
            "responses_by_content_type",
            "Responses by encoding (json, protobuf, other) and where they were answered (cache or upstream)",
            m.responses_by_content_type.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time to the response head, by verb, resource and source",
            m.request_duration.clone(),
        );
        r.register(
            "inflight_requests",
            "Requests being served (watches included)",
            m.inflight.clone(),
        );
        r.register(
            "cached_objects",
            "Objects in the cache",
            m.cached_objects.clone(),
        );
        r.register(
            "cached_bytes",
            "JSON bytes of the cached objects",
            m.cached_bytes.clone(),
        );
        r.register(
            "cache_budget_bytes",
            "The resource's memoryBudget: the most its cached objects' JSON may take (only \
             resources with a budget)",
            m.cache_budget.clone(),
        );
        r.register(
            "cache_over_budget",
            "1 once the resource's cached objects went over its memoryBudget: it is no longer \
             cached and its reads are passed through to the upstream until kcache restarts \
             (only resources with a budget)",
            m.cache_over_budget.clone(),
        );
        r.register(
            "cache_memory_bytes",
            "Estimated bytes a cache holds, by component: json (the objects' JSON), head (per \
             object beyond its JSON: struct, key, labels and fields), index (object map and \
             posting sets), history (events beyond the current objects), protobuf (the \
             protobuf mirror's object messages, every version kept)",
            m.cache_memory.clone(),
        );
        r.register(
            "upstream_events",
            "Watch events received from the upstream, by type",
            m.upstream_events.clone(),
        );
        r.register(
            "watch_events_sent",
            "Events written to downstream watchers",
            m.watch_events_sent.clone(),
        );
        r.register("watchers", "Open downstream watches", m.watchers.clone());
        r.register(
            "watchers_closed",
            "Downstream watches ended, by reason (timeout, client, slow, error, shutdown, \
             over_budget, not_served)",
            m.watchers_closed.clone(),
        );
        r.register(
            "relists",
            "Lists of a collection after its first sync (upstream 410s, restarts)",
            m.relists.clone(),
        );
        r.register(
            "upstream_expired",
            "410 Expired answers from the upstream",
            m.upstream_expired.clone(),
        );
        r.register(
            "upstream_errors",
            "Failed upstream requests, by reason",
            m.upstream_errors.clone(),
        );
        r.register(
            "upstream_requests",
            "Requests kcache sent to the upstream, by purpose (reflector_list, reflector_watch, \
             probe, token_review, access_review, pass_through, setup, protobuf_list, \
             protobuf_watch, proof, rbac)",
            m.upstream_requests.clone(),
        );
        r.register(
            "upstream_sent_bytes",
            "Request body bytes kcache sent to the upstream, by purpose",
            m.upstream_sent_bytes.clone(),
        );
        r.register(
            "upstream_received_bytes",
            "Response body bytes kcache received from the upstream, by purpose (as sent: \
             compressed when the upstream compressed them)",
            m.upstream_received_bytes.clone(),
        );
        r.register(
            "consistent_reads",
            "Reads with resourceVersion unset, by outcome (cache: caught up; proven: a quiet type's cache shown current by the upstream's metadata list of the type; forwarded: passed to the upstream, the cache not having reached the upstream's revision within the wait, or another read of the type learning whether it can; forwarded_quiet: passed to the upstream at once, the type's last wait having run out with no object event of the type since; forwarded_changed: passed to the upstream, its metadata list of a quiet type showing changes the cache has not seen yet; forwarded_get: a GET passed to the upstream at once, the upstream (v1.31 on) answering the consistency probe from its watch cache, which costs more than the GET; forwarded_lagging: passed to the upstream at once, the cache expected to take longer to catch up than the upstream to answer; forwarded_probe_failed: passed to the upstream, which answered the consistency probe with an error or slowly while reachable; timeout: 504, the cache not having caught up in time; stale: answered from the cache unconfirmed (X-Kcache-Unconfirmed) while the upstream could not be reached at all; too_stale: 504, the cache being older than maxConsistentReadStalenessSeconds)",
            m.consistent_reads.clone(),
        );
        r.register(
            "consistent_read_wait_seconds",
            "Time a consistent read waited for the cache to catch up",
            m.consistent_wait.clone(),
        );
        r.register(
            "cache_lag_seconds",
            "Seconds since the last upstream event, bookmark or list",
            m.cache_lag.clone(),
        );
        r.register(
            "cache_synced",
            "1 once the resource's cache has synced",
            m.cache_synced.clone(),
        );
        r.register(
            "cache_served",
            "1 while the upstream serves the configured resource, 0 while it does not (a CRD \
             not created yet, or deleted): then nothing of it is cached and its requests are \
             passed through",
            m.cache_served.clone(),
        );
        r.register(
            "persist_flushes",
            "Commits of a cache's changes to cache.persistDir, by outcome (ok, error)",
            m.persist_flushes.clone(),
        );
        r.register(
            "persist_flush_seconds",
            "Time one commit of a cache's changes to cache.persistDir took (diff and write)",
            m.persist_flush_seconds.clone(),
        );
        r.register(
            "persist_restored_objects",
            "Objects loaded from cache.persistDir at start (0: the cache synced from the upstream)",
            m.persist_restored_objects.clone(),
        );
        r.register(
            "persist_protobuf_objects",
            "Object versions of a type's protobuf mirror committed to cache.persistDir with its objects (0: none)",
            m.persist_protobuf_objects.clone(),
        );
        r.register(
            "authentications",
            "Callers authenticated, by how (token, certificate, anonymous, local) or why not \
             (rejected, error)",
            m.authentications.clone(),
        );
        r.register(
            "authorizations",
            "Authorization decisions on cached reads, by decision and where it came from \
             (cache, upstream SubjectAccessReview, stale while the upstream is unreachable)",
            m.authorizations.clone(),
        );
        r.register(
            "auth_rbac_followed",
            "1 while kcache watches the upstream's RBAC objects (every type), so that allowances \
             RBAC gave are remembered until RBAC changes (auth.rbacAllowedCacheSeconds); 0 with \
             auth none, before the watches are open, or while one is down",
            m.auth_rbac_followed.clone(),
        );
        r.register(
            "auth_verdicts_restored",
            "Access verdicts RBAC gave taken back from cache.persistDir at start (RBAC unchanged \
             since they were written)",
            m.auth_verdicts_restored.clone(),
        );
        r.register(
            "audit_events",
            "Audit events of the requests kcache answers, by backend (log, webhook) and result \
             (recorded, written, dropped: its queue was full, error: writing or sending failed)",
            m.audit_events.clone(),
        );
        r.register(
            "limited_requests",
            "Requests refused or cut by a limit (rate, watches, caller_watches, request_size) \
             and lists paginated by list_size",
            m.limited.clone(),
        );
        r.register("limit", "The configured limits (0: none)", m.limits.clone());
        r.register(
            "open_watches",
            "Watches open through kcache (cached and passed through), counted against \
             the watch limits",
            m.open_watches.clone(),
        );
        for result in [
            "token",
            "certificate",
            "anonymous",
            "local",
            "rejected",
            "error",
        ] {
            let _ = m.authentications.get_or_create(&AuthnLabels { result });
        }
        for limit in [
            "rate",
            "watches",
            "caller_watches",
            "request_size",
            "list_size",
        ] {
            let _ = m.limited.get_or_create(&LimitLabels { limit });
        }
        r.register(
            "auto_types",
            "Types cached on demand (the auto section) now",
            m.auto_types.clone(),
        );
        r.register(
            "auto_cached",
            "Types taken up by on-demand caching, clients having listed or watched them auto.minRequests times within auto.windowSeconds",
            m.auto_cached.clone(),
        );
        r.register(
            "auto_dropped",
            "Types cached on demand that were dropped, by reason (idle: no request for auto.idleSeconds and no watch open; not_served: the upstream stopped serving the type; forbidden: the upstream refused kcache its list or watch)",
            m.auto_dropped.clone(),
        );
        for purpose in ["idle", "not_served", "forbidden"] {
            let _ = m
                .auto_dropped
                .get_or_create(&DroppedLabels { reason: purpose });
        }
        r.register(
            "auto_released_bytes",
            "Bytes the caches of types dropped by on-demand caching held when they were dropped",
            m.auto_released_bytes.clone(),
        );
        r.register(
            "auto_refused",
            "1 for each type clients read often enough that on-demand caching does not cache, by reason (denied: by auto.deny or auto.allow; forbidden: kcache's identity may not list it; not_listable: the type has no list or watch; max_types: auto.maxTypes types are cached already; over_budget: cached once, it went over auto.memoryBudget, and stays passed through until kcache restarts)",
            m.auto_refused.clone(),
        );
        r.register(
            "tls_handshake_errors",
            "TLS handshakes that failed or timed out (plain HTTP to the HTTPS port, unknown client CA, ...)",
            m.tls_handshake_errors.clone(),
        );
        r.register(
            "cache_age_seconds",
            "Age of what the cache serves: seconds since the reflector last had confirmed contact with the upstream (event, bookmark, list page or watch opened)",
            m.cache_age.clone(),
        );
        r.register(
            "upstream_reachable",
            "1 while the reflector's requests to the upstream get through; 0 after one failed (transport error, timeout or error status) until the next succeeds",
            m.upstream_reachable.clone(),
        );
        r.register(
            "build",
            "kcache build information",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Metrics { registry, ..m }
    }

    /// One response's encoding, from its Content-Type.
    pub fn response_content_type(&self, content_type: Option<&str>, source: &'static str) {
        let media = content_type
            .and_then(|c| c.split(';').next())
            .map(str::trim);
        let content_type = match media {
            Some("application/json") => "json",
            Some("application/vnd.kubernetes.protobuf") => "protobuf",
            _ => "other",
        };
        self.responses_by_content_type
            .get_or_create(&ContentTypeLabels {
                content_type,
                source,
            })
            .inc();
    }

    /// Record a finished request (or a watch whose response head was sent).
    pub fn request(
        &self,
        verb: &'static str,
        resource: &str,
        code: u16,
        source: &'static str,
        took: Duration,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                verb,
                resource: resource.to_string(),
                code,
                source,
            })
            .inc();
        self.request_duration
            .get_or_create(&DurationLabels {
                verb,
                resource: resource.to_string(),
                source,
            })
            .observe(took.as_secs_f64());
    }

    /// Create every series of a cached resource at zero, so dashboards and alerts see the
    /// families before the first event happens.
    pub fn init_resource(&self, resource: &str) {
        let r = || resource.to_string();
        let labels = ResourceLabels { resource: r() };
        for f in [
            &self.watch_events_sent,
            &self.relists,
            &self.upstream_expired,
        ] {
            let _ = f.get_or_create(&labels);
        }
        let _ = self.watchers.get_or_create(&labels);
        for reason in [
            "timeout",
            "client",
            "slow",
            "error",
            "shutdown",
            "over_budget",
            "not_served",
        ] {
            let _ = self.watchers_closed.get_or_create(&ReasonLabels {
                resource: r(),
                reason,
            });
        }
        for reason in ["transport", "status", "decode"] {
            let _ = self.upstream_errors.get_or_create(&ReasonLabels {
                resource: r(),
                reason,
            });
        }
        for outcome in CONSISTENT_READ_OUTCOMES {
            let _ = self.consistent_reads.get_or_create(&OutcomeLabels {
                resource: r(),
                outcome,
            });
        }
        for ty in ["ADDED", "MODIFIED", "DELETED"] {
            let _ = self.upstream_events.get_or_create(&TypeLabels {
                resource: r(),
                r#type: ty,
            });
        }
        let _ = self.consistent_wait.get_or_create(&labels);
    }

    /// A per-resource counter handle, to keep and bump without a lookup.
    pub(crate) fn counter(family: &Family<ResourceLabels, Counter>, resource: &str) -> Counter {
        family.get_or_create_owned(&ResourceLabels {
            resource: resource.to_string(),
        })
    }

    pub(crate) fn gauge_add(family: &Family<ResourceLabels, Gauge>, resource: &str, delta: i64) {
        family
            .get_or_create(&ResourceLabels {
                resource: resource.to_string(),
            })
            .inc_by(delta);
    }

    pub(crate) fn reason(
        family: &Family<ReasonLabels, Counter>,
        resource: &str,
        reason: &'static str,
    ) {
        family
            .get_or_create(&ReasonLabels {
                resource: resource.to_string(),
                reason,
            })
            .inc();
    }

    /// Drop the gauges of a type no longer cached at all (one on-demand caching dropped), so
    /// that its series end instead of holding the values of a cache that is gone. Its
    /// counters stay: they are totals of what happened; so does its watcher gauge, which a
    /// watch that ends after the type was dropped still counts down.
    pub(crate) fn forget_resource(&self, resource: &str) {
        let labels = ResourceLabels {
            resource: resource.to_string(),
        };
        for family in [
            &self.cached_objects,
            &self.cached_bytes,
            &self.cache_budget,
            &self.cache_over_budget,
            &self.cache_synced,
            &self.cache_served,
            &self.upstream_reachable,
        ] {
            family.remove(&labels);
        }
        self.cache_lag.remove(&labels);
        self.cache_age.remove(&labels);
        for component in MEMORY_COMPONENTS {
            self.cache_memory.remove(&MemoryLabels {
                resource: resource.to_string(),
                component,
            });
        }
    }

    /// Bring the audit counters up to the auditor's own (it counts on its backends' side; a
    /// counter here only ever moves up to them).
    pub(crate) fn audit(
        &self,
        stats: &kcache_audit::AuditStats,
        backends: &[kcache_audit::Backend],
    ) {
        for &backend in backends {
            let c = stats.backend(backend).counts();
            for (result, n) in [
                ("recorded", c.recorded),
                ("written", c.written),
                ("dropped", c.dropped),
                ("error", c.errors),
            ] {
                let counter = self.audit_events.get_or_create(&AuditLabels {
                    backend: backend.name(),
                    result,
                });
                counter.inc_by(n.saturating_sub(counter.get()));
            }
        }
    }

    /// The exposition in `format`: cache gauges and process figures are read at scrape time,
    /// from every type's cache and the resources of the types the upstream does not serve.
    pub fn render(
        &self,
        caches: &[Arc<ResourceCache>],
        not_served: &[String],
        format: Format,
    ) -> String {
        let openmetrics = self.render_openmetrics(caches, not_served);
        match format {
            Format::OpenMetrics => openmetrics,
            Format::Prometheus => to_prometheus_text(&openmetrics),
        }
    }

    /// The OpenMetrics text.
    fn render_openmetrics(&self, caches: &[Arc<ResourceCache>], not_served: &[String]) -> String {
        for c in caches {
            let labels = ResourceLabels {
                resource: c.info.resource.clone(),
            };
            let (objects, bytes) = c.size();
            self.cached_objects
                .get_or_create(&labels)
                .set(objects as i64);
            self.cached_bytes.get_or_create(&labels).set(bytes as i64);
            if let Some(budget) = c.budget().limit() {
                self.cache_budget
                    .get_or_create(&labels)
                    .set(i64::try_from(budget).unwrap_or(i64::MAX));
                self.cache_over_budget
                    .get_or_create(&labels)
                    .set(i64::from(c.budget().is_over()));
            }
            let memory = c.memory();
            for (component, n) in [
                ("json", memory.json),
                ("head", memory.head),
                ("index", memory.index),
                ("history", memory.history),
                ("protobuf", memory.protobuf),
            ] {
                let labels = MemoryLabels {
                    resource: c.info.resource.clone(),
                    component,
                };
                self.cache_memory.get_or_create(&labels).set(n as i64);
            }
            self.cache_synced
                .get_or_create(&labels)
                .set(i64::from(c.is_synced()));
            let lag = c.contact().since_last().map_or(0.0, |d| d.as_secs_f64());
            self.cache_lag.get_or_create(&labels).set(lag);
            self.cache_age
                .get_or_create(&labels)
                .set(c.contact().age().as_secs_f64());
            self.upstream_reachable
                .get_or_create(&labels)
                .set(i64::from(c.contact().reachable()));
            self.cache_served.get_or_create(&labels).set(1);
        }
        // A type without a cache holds nothing: its series say so rather than keep the values
        // of a cache dropped when the upstream stopped serving it.
        for resource in not_served {
            let labels = ResourceLabels {
                resource: resource.clone(),
            };
            self.cache_served.get_or_create(&labels).set(0);
            self.cache_synced.get_or_create(&labels).set(0);
            self.cached_objects.get_or_create(&labels).set(0);
            self.cached_bytes.get_or_create(&labels).set(0);
            for component in MEMORY_COMPONENTS {
                let labels = MemoryLabels {
                    resource: labels.resource.clone(),
                    component,
                };
                self.cache_memory.get_or_create(&labels).set(0);
            }
        }
        let mut out = String::new();
        let _ = text::encode_registry(&mut out, &self.registry);
        out.push_str(&process_metrics());
        let _ = text::encode_eof(&mut out);
        out
    }
}

/// The components of `kcache_cache_memory_bytes`.
const MEMORY_COMPONENTS: [&str; 5] = ["json", "head", "index", "history", "protobuf"];

/// The two expositions kcache serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4: what Prometheus' text parser and most tools read.
    Prometheus,
    /// OpenMetrics 1.0.0 text, for scrapers that ask for it.
    OpenMetrics,
}

impl Format {
    /// Choose from a scrape's `Accept` header: OpenMetrics when it is accepted (q > 0) and not
    /// ranked below `text/plain`; the text format otherwise, also for no header at all.
    pub(crate) fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let (mut openmetrics, mut text) = (0.0_f64, 0.0_f64);
        for item in accept.split(',') {
            let mut parts = item.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// The response's Content-Type.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The Prometheus text format (0.0.4) of an OpenMetrics exposition. The sample lines are the
/// same in both; the metadata differs: a counter family is named with its `_total` suffix, an
/// `info` family becomes the gauge `NAME_info` (the text format has no info type, and its
/// parser rejects one), `unknown` is `untyped`, and `# UNIT` and `# EOF` do not exist.
pub(crate) fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // OpenMetrics puts HELP before TYPE, and the name in HELP depends on the type.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, ty) = match ty {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_string(), ty),
                // stateset, gaugehistogram and unknown have no text-format type.
                "stateset" => (name.to_string(), "gauge"),
                _ => (name.to_string(), "untyped"),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {ty}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Standard process metrics from /proc (Linux); empty elsewhere.
fn process_metrics() -> String {
    let mut out = String::new();
    let ticks = 100.0; // USER_HZ on Linux
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name (which may contain spaces, so split after ')').
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let utime: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let stime: f64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        out.push_str(&format!(
            "# HELP process_cpu_seconds Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total {}\n",
            (utime + stime) / ticks
        ));
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        let rss_kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        out.push_str(&format!(
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}\n",
            rss_kb * 1024
        ));
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        out.push_str(&format!(
            "# HELP process_open_fds Number of open file descriptors.\n# TYPE process_open_fds gauge\nprocess_open_fds {}\n",
            fds.count()
        ));
    }
    out
}

#[cfg(test)]
mod tests;
