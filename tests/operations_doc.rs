//! docs/operations.md says what kcache exports: its metric tables name exactly the metrics
//! kcache registers, and every purpose an upstream request is counted under. An operator
//! writes alerts and dashboards from that page; a metric missing there is one nobody watches,
//! and one there that kcache does not export is an alert that never fires.

#[path = "metrics_common/mod.rs"]
mod metrics_common;

use std::collections::BTreeSet;

use kcache::metrics::Format;
use kcache::upstream::Purpose;

const OPERATIONS: &str = include_str!("../docs/operations.md");

/// The header row of the page's metric tables.
const METRIC_TABLE: &str = "| metric | labels | meaning |";

#[test]
fn every_registered_metric_is_documented_and_every_documented_one_registered() {
    let registered = registered_metrics();
    let documented = documented_metrics();
    // Both readings find something: an empty set on both sides would compare equal.
    assert!(
        registered.contains("kcache_requests_total"),
        "{registered:?}"
    );
    assert!(
        documented.contains("kcache_requests_total"),
        "{documented:?}"
    );
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "registered but not in docs/operations.md: {undocumented:?}"
    );
    let unregistered: Vec<_> = documented.difference(&registered).collect();
    assert!(
        unregistered.is_empty(),
        "in docs/operations.md but not registered: {unregistered:?}"
    );
}

#[test]
fn every_upstream_request_purpose_is_documented() {
    let row = OPERATIONS
        .lines()
        .find(|l| l.starts_with("| `kcache_upstream_requests_total`"))
        .expect("docs/operations.md has a row for kcache_upstream_requests_total");
    for purpose in Purpose::ALL {
        let label = format!("`{}`", purpose.label());
        assert!(
            row.contains(&label),
            "the purpose {label} is not in docs/operations.md's kcache_upstream_requests_total row"
        );
    }
}

/// The families a scrape in the Prometheus text format names in its `# HELP` lines (counters
/// with their `_total`), from the registry kcache serves, process metrics included.
fn registered_metrics() -> BTreeSet<String> {
    metrics_common::exposition(Format::Prometheus)
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .map(|rest| rest.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

/// Every metric name in the first column of the page's metric tables (a cell may name
/// several: `` `a`, `b` ``).
fn documented_metrics() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_table = false;
    for line in OPERATIONS.lines() {
        if line == METRIC_TABLE {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let first_cell = line.split('|').nth(1).unwrap_or_default();
        names.extend(first_cell.split('`').skip(1).step_by(2).map(str::to_string));
    }
    names
}
