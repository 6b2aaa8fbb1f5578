//! Test support: kcache's metrics registry as a scrape renders it, with every family present.
//! A family is rendered only once it has a series, so each gets one, as a running kcache gives
//! them (per-resource series at start, the others with the first request and scrape). Also the
//! sample names that exposition has, and the metric names a PromQL expression uses: what the
//! dashboard and the alerting rules are checked against.
#![allow(dead_code)]

use std::collections::BTreeSet;

use kcache::metrics::{
    AuditLabels, AuthzLabels, Format, LimitLabels, MemoryLabels, Metrics, OutcomeLabels,
    PurposeLabels, ResourceLabels, VerbLabels,
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
    let text = m.render(&[], &[], format);
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
    let _ = m.auto_refused.get_or_create(&kcache::metrics::AutoLabels {
        resource: "v1/secrets".into(),
        reason: "denied",
    });
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
        &m.cache_served,
        &m.upstream_reachable,
        &m.persist_restored_objects,
        &m.persist_protobuf_objects,
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
    let _ = m.audit_events.get_or_create(&AuditLabels {
        backend: "log",
        result: "dropped",
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

/// The sample names kcache exports, read from what it renders on /metrics: counters with
/// `_total`, histograms with `_bucket`, `_sum` and `_count`, info with `_info`.
pub fn exported_metrics() -> &'static BTreeSet<String> {
    static NAMES: std::sync::OnceLock<BTreeSet<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let text = exposition(kcache::metrics::Format::OpenMetrics);
        let mut names = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (family, kind) = rest.split_once(' ').unwrap();
                let suffixes: &[&str] = match kind {
                    "counter" => &["_total"],
                    "histogram" => &["_bucket", "_sum", "_count"],
                    "info" => &["_info"],
                    _ => &[""],
                };
                names.extend(suffixes.iter().map(|s| format!("{family}{s}")));
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                names.insert(line[..end].to_string());
            }
        }
        names
    })
}

pub fn known_metric(name: &str) -> bool {
    exported_metrics().contains(name)
}

/// PromQL modifiers followed by a parenthesised list of label names.
const LABEL_LISTS: &str = "by without on ignoring group_left group_right";
/// PromQL keywords and aggregation operators (which may precede `by`): never metric names.
const KEYWORDS: &str = "and or unless bool offset inf nan sum min max avg count group stddev \
                        stdvar topk bottomk quantile count_values limitk limit_ratio";

fn is_one_of(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}

/// Metric names in a PromQL expression: identifiers that are not functions, keywords, label
/// names (inside `{}` or `by (...)`/`without (...)`), strings, durations or Grafana variables.
pub fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut depth_braces = 0;
    let mut depth_brackets = 0;
    // After `by`/`without`/`on`/`ignoring`/`group_*`, the next (...) holds label names.
    let mut label_list_pending = false;
    let mut label_list_depth: Option<usize> = None;
    let mut parens = 0usize;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                let quote = c;
                i += 1;
                while i < chars.len() && chars[i] != quote {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                continue;
            }
            '{' => depth_braces += 1,
            '}' => depth_braces -= 1,
            '[' => depth_brackets += 1,
            ']' => depth_brackets -= 1,
            '(' => {
                parens += 1;
                if label_list_pending {
                    label_list_depth = Some(parens);
                    label_list_pending = false;
                }
            }
            ')' => {
                if label_list_depth == Some(parens) {
                    label_list_depth = None;
                }
                parens -= 1;
            }
            '$' => {
                // A Grafana variable: $name, ${name}, $__rate_interval.
                i += 1;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '{' | '}'))
                {
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':'))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let is_call = chars.get(j) == Some(&'(');
            let lower = word.to_lowercase();
            if is_one_of(LABEL_LISTS, &lower) {
                label_list_pending = true;
            } else if depth_braces == 0
                && depth_brackets == 0
                && label_list_depth.is_none()
                && !is_call
                && !is_one_of(KEYWORDS, &lower)
            {
                names.push(word);
            }
            continue;
        }
        if c.is_ascii_digit() {
            // Numbers (and exponents such as 1e3) are not names.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    names
}
