//! Test support: kcache's metrics registry as a scrape renders it, with every family present.
//! A family is rendered only once it has a series, so each gets one, as a running kcache gives
//! them (per-resource series at start, the others with the first request and scrape).
#![allow(dead_code)]

use kcache::metrics::{
    AuthzLabels, Format, LimitLabels, MemoryLabels, Metrics, OutcomeLabels, PurposeLabels,
    ResourceLabels, VerbLabels,
};

/// Where the families are registered: `r.register(` once per family.
const METRICS_SOURCE: &str = include_str!("../../crates/kcache/src/metrics.rs");

/// What `/metrics` renders in `format` once every family has a series.
///
/// # Panics
///
/// If a family registered in metrics.rs is not rendered: it has no series here, and every
/// check built on this exposition would miss it.
pub fn exposition(format: Format) -> String {
    let m = Metrics::new();
    with_a_series_in_every_family(&m);
    let text = m.render(&kcache::cache::Registry::default(), format);
    let families = METRICS_SOURCE.matches("r.register(").count();
    let rendered = text
        .lines()
        .filter(|l| l.starts_with("# HELP kcache_"))
        .count();
    assert_eq!(
        rendered, families,
        "metrics.rs registers {families} families and {rendered} are rendered: give the new \
         one a series in tests/metrics_common\n{text}"
    );
    text
}

/// A series in every family, through what kcache itself calls where it can (a cached
/// resource's series at zero, a request, a response), by hand for the rest.
fn with_a_series_in_every_family(m: &Metrics) {
    m.init_resource("pods");
    m.request("get", "pods", 200, "cache", std::time::Duration::ZERO);
    m.response_content_type(Some("application/json"), "cache");
    let pods = || ResourceLabels {
        resource: "pods".into(),
    };
    for gauge in [
        &m.cached_objects,
        &m.cached_bytes,
        &m.cache_budget,
        &m.cache_over_budget,
        &m.cache_synced,
        &m.upstream_reachable,
        &m.persist_restored_objects,
    ] {
        let _ = gauge.get_or_create(&pods());
    }
    let _ = m.cache_lag.get_or_create(&pods());
    let _ = m.cache_age.get_or_create(&pods());
    let _ = m.persist_flush_seconds.get_or_create(&pods());
    let _ = m.cache_memory.get_or_create(&MemoryLabels {
        resource: "pods".into(),
        component: "json",
    });
    let _ = m.persist_flushes.get_or_create(&OutcomeLabels {
        resource: "pods".into(),
        outcome: "ok",
    });
    let _ = m.inflight.get_or_create(&VerbLabels { verb: "get" });
    let _ = m.limits.get_or_create(&LimitLabels { limit: "watches" });
    let _ = m.authorizations.get_or_create(&AuthzLabels {
        decision: "allowed",
        source: "cache",
    });
    let setup = PurposeLabels { purpose: "setup" };
    for counter in [
        &m.upstream_requests,
        &m.upstream_sent_bytes,
        &m.upstream_received_bytes,
    ] {
        let _ = counter.get_or_create(&setup);
    }
}
