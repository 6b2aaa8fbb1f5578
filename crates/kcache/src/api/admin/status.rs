//! `/status` on the admin listener: every cached type's figures at a glance, for people on a
//! node (an HTML page for a browser, a plain-text table for a terminal) and for tools (JSON).
//!
//! One function, `collect`, reads the figures where they are kept (each cache, its
//! reflector's record of its last list, the metrics registry, the upstream handle) into a
//! [`StatusReport`]; the JSON is that struct, and `html` and [`text`] render it, as does
//! `kcache status` from the JSON. Like `/metrics` it holds no object data: type names and
//! figures only. The memory estimate walks every cached object, so the report is collected on
//! the background threads, as `/metrics` is rendered.

pub(crate) mod html;
pub mod text;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::super::{staleness, App};
use crate::cache::{ListReason, ResourceCache};
use crate::metrics::{
    Metrics, OutcomeLabels, PurposeLabels, ReasonLabels, ResourceLabels, CONSISTENT_READ_OUTCOMES,
};
use crate::registry::Origin;
use crate::resource::TypeName;
use crate::upstream::Purpose;

/// Everything `/status` shows: the process, the upstream, and one entry per cached type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// kcache's version.
    pub version: String,
    /// Seconds since this kcache started.
    pub uptime_seconds: f64,
    /// Whether a shutdown is under way (readiness fails, watches are being ended).
    pub shutting_down: bool,
    pub(crate) upstream: UpstreamStatus,
    /// One entry per cached type, ordered by name.
    pub(crate) caches: Vec<CacheStatus>,
    /// On-demand caching, when the configuration turns it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) auto: Option<AutoStatus>,
}

/// On-demand caching (the configuration's `auto` section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AutoStatus {
    /// Types cached on demand now (`kcache_auto_types`); their entries are in `caches`.
    pub types: u64,
    /// Types clients read often enough that are not cached, with the reason
    /// (`kcache_auto_refused`).
    pub refused: Vec<RefusedStatus>,
}

/// A type on-demand caching does not cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RefusedStatus {
    /// `group/version/resource`.
    pub name: String,
    /// denied, forbidden, not_listable, max_types or over_budget.
    pub reason: String,
    /// Seconds since it was refused.
    pub seconds_ago: f64,
}

/// The upstream, as kcache sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpstreamStatus {
    /// Where it is.
    pub url: String,
    /// Whether the latest request of at least one reflector got through (each type's own is in
    /// its entry).
    pub reachable: bool,
    /// Its `gitVersion` (`v1.34.1`); null until its `/version` was read.
    pub version: Option<String>,
    /// Requests kcache sent it, by purpose (`kcache_upstream_requests_total`).
    pub requests: BTreeMap<String, u64>,
}

/// One cached type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CacheStatus {
    /// `group/version/resource`, as logs and `/readyz?verbose` name it (`v1/pods`).
    pub name: String,
    /// The API group (empty for the core group).
    pub group: String,
    pub version: String,
    /// The plural resource.
    pub resource: String,
    /// Why it is cached: `configured`, or `auto` (cached on demand).
    #[serde(default = "configured")]
    pub origin: String,
    /// What to make of the figures below, in one word.
    pub condition: Condition,
    /// Whether the cache holds a complete list of the type.
    pub synced: bool,
    /// Objects cached.
    pub objects: u64,
    /// Estimated bytes the cache holds: objects, indexes, event history and protobuf mirror
    /// (`kcache_cache_memory_bytes`, summed).
    pub bytes: u64,
    /// The cache's resourceVersion (the upstream's, as a string like every resourceVersion).
    pub resource_version: String,
    /// Seconds since an event, a bookmark or a list moved the resourceVersion; null before
    /// the first sync.
    pub resource_version_age_seconds: Option<f64>,
    /// Seconds since the reflector last heard from the upstream (`kcache_cache_age_seconds`).
    pub age_seconds: f64,
    /// Whether this type's reflector's latest request to the upstream got through.
    pub reachable: bool,
    /// The latest complete list installed, and why it was made; null before the first (and
    /// for a state restored from disk, until the reflector lists).
    pub last_list: Option<LastList>,
    /// Lists after the first (`kcache_relists_total`).
    pub relists: u64,
    /// Downstream watches open now (`kcache_watchers`).
    pub watchers: u64,
    /// Downstream watches ended for being too slow to keep up
    /// (`kcache_watchers_closed_total{reason="slow"}`).
    pub dropped_watchers: u64,
    /// Reads with resourceVersion unset, by outcome (`kcache_consistent_reads_total`).
    pub consistent_reads: BTreeMap<String, u64>,
}

/// The latest list of a type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LastList {
    /// When, RFC 3339 in UTC.
    pub at: String,
    /// Seconds ago.
    pub seconds_ago: f64,
    pub reason: ListReason,
}

/// What a type's figures amount to; every state but `synced` is marked on the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Condition {
    /// Synced, and the upstream heard from recently.
    Synced,
    /// Not synced yet: reads of the type go to the upstream.
    Syncing,
    /// Loaded from disk at start, not confirmed by the upstream yet.
    Restored,
    /// Synced, but the upstream is unreachable or has sent nothing for a while
    /// (see `staleness::QUIET_AFTER`).
    Stale,
    /// Over its memory budget: not cached, reads passed through until kcache restarts.
    OverBudget,
    /// Configured, but the upstream does not serve the type (a CRD not created yet, or
    /// deleted): not cached, its requests passed through until it is served.
    NotServed,
}

impl Condition {
    /// The condition of `cache`, by the rules `/readyz?verbose` describes it with.
    pub(crate) fn of(cache: &ResourceCache) -> Condition {
        if cache.budget().is_over() {
            Condition::OverBudget
        } else if !cache.is_synced() {
            Condition::Syncing
        } else if cache.is_unconfirmed() {
            Condition::Restored
        } else if !cache.contact().reachable() || cache.contact().age() > staleness::QUIET_AFTER {
            Condition::Stale
        } else {
            Condition::Synced
        }
    }

    /// The word shown for it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Condition::Synced => "synced",
            Condition::Syncing => "syncing",
            Condition::Restored => "restored",
            Condition::Stale => "stale",
            Condition::OverBudget => "over budget",
            Condition::NotServed => "not served",
        }
    }
}

fn configured() -> String {
    Origin::Configured.as_str().to_string()
}

/// The report of a running kcache. O(objects) for the memory estimates: run it on the
/// background threads (see [`report`]).
pub(crate) fn collect(app: &App) -> StatusReport {
    let caches: Vec<CacheStatus> = app
        .registry
        .entries()
        .into_iter()
        .map(|e| match &e.cache {
            Some(c) => cache_status(c, e.origin, &app.metrics),
            None => not_served_status(e.name, e.origin),
        })
        .collect();
    let auto = app.demand.as_ref().map(|d| AutoStatus {
        types: u64::try_from(app.metrics.auto_types.get()).unwrap_or(0),
        refused: d
            .refused()
            .into_iter()
            .map(|r| RefusedStatus {
                name: r.name.to_string(),
                reason: r.reason.as_str().to_string(),
                seconds_ago: r.since.elapsed().as_secs_f64(),
            })
            .collect(),
    });
    let requests = Purpose::ALL
        .iter()
        .map(|p| {
            let n = read_counter(
                &app.metrics.upstream_requests,
                &PurposeLabels { purpose: p.label() },
            );
            (p.label().to_string(), n)
        })
        .collect();
    StatusReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_seconds: app.started.elapsed().as_secs_f64(),
        shutting_down: *app.stopping.borrow(),
        upstream: UpstreamStatus {
            url: app.upstream.url.clone(),
            reachable: app.registry.all().any(|c| c.contact().reachable()),
            version: app.upstream.version().git_version(),
            requests,
        },
        caches,
        auto,
    }
}

/// [`collect`] on the background threads, so that a large cache's memory estimate does not
/// hold up the requests queued on a tokio worker.
pub(crate) async fn report(app: std::sync::Arc<App>) -> StatusReport {
    app.background.clone().run(move || collect(&app)).await
}

fn cache_status(c: &ResourceCache, origin: Origin, metrics: &Metrics) -> CacheStatus {
    let resource = c.info.resource.clone();
    let memory = c.memory();
    let labels = ResourceLabels {
        resource: resource.clone(),
    };
    let consistent_reads = CONSISTENT_READ_OUTCOMES
        .iter()
        .map(|&outcome| {
            let n = read_counter(
                &metrics.consistent_reads,
                &OutcomeLabels {
                    resource: resource.clone(),
                    outcome,
                },
            );
            (outcome.to_string(), n)
        })
        .collect();
    CacheStatus {
        name: c.info.to_string(),
        group: c.info.group.clone(),
        version: c.info.version.clone(),
        resource: resource.clone(),
        origin: origin.as_str().to_string(),
        condition: Condition::of(c),
        synced: c.is_synced(),
        objects: memory.objects as u64,
        bytes: memory.total() as u64,
        resource_version: c.rv().to_string(),
        resource_version_age_seconds: c.rv_age().map(|d| d.as_secs_f64()),
        age_seconds: c.contact().age().as_secs_f64(),
        reachable: c.contact().reachable(),
        last_list: c.last_list().get().map(|l| LastList {
            at: rfc3339(l.at),
            seconds_ago: SystemTime::now()
                .duration_since(l.at)
                .unwrap_or(Duration::ZERO)
                .as_secs_f64(),
            reason: l.reason,
        }),
        relists: c.relists(),
        watchers: metrics
            .watchers
            .get(&labels)
            .map_or(0, |g| u64::try_from(g.get()).unwrap_or(0)),
        dropped_watchers: read_counter(
            &metrics.watchers_closed,
            &ReasonLabels {
                resource,
                reason: "slow",
            },
        ),
        consistent_reads,
    }
}

/// A configured type the upstream does not serve: nothing cached, nothing to show but that.
fn not_served_status(name: TypeName, origin: Origin) -> CacheStatus {
    CacheStatus {
        name: name.to_string(),
        group: name.group,
        version: name.version,
        resource: name.resource,
        origin: origin.as_str().to_string(),
        condition: Condition::NotServed,
        synced: false,
        objects: 0,
        bytes: 0,
        resource_version: String::new(),
        resource_version_age_seconds: None,
        age_seconds: 0.0,
        reachable: true,
        last_list: None,
        relists: 0,
        watchers: 0,
        dropped_watchers: 0,
        consistent_reads: BTreeMap::new(),
    }
}

/// A counter's value, 0 for a series not created yet (read without creating it).
fn read_counter<L>(
    family: &prometheus_client::metrics::family::Family<
        L,
        prometheus_client::metrics::counter::Counter,
    >,
    labels: &L,
) -> u64
where
    L: Clone + std::hash::Hash + Eq,
{
    family.get(labels).map_or(0, |c| c.get())
}

/// `2026-01-02T03:04:05Z`: seconds are enough next to log lines.
fn rfc3339(at: SystemTime) -> String {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    jiff::Timestamp::from_second(i64::try_from(secs).unwrap_or(0))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// How `/status` is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The page for a browser.
    Html,
    /// The report itself, for tools.
    Json,
    /// The table `kcache status` prints, for `curl` in a terminal.
    Text,
}

impl Format {
    /// `?format=html|json|text` wins; else a browser (Accept with `text/html`) gets the page,
    /// a tool asking for `application/json` the JSON, and anything else (curl's `*/*`) the
    /// text. None for an unknown `format`.
    pub(crate) fn choose(format: Option<&str>, accept: Option<&str>) -> Option<Format> {
        match format {
            Some("html") => return Some(Format::Html),
            Some("json") => return Some(Format::Json),
            Some("text") => return Some(Format::Text),
            Some(_) => return None,
            None => {}
        }
        let accepts = |media: &str| {
            accept.is_some_and(|a| {
                a.split(',').any(|item| {
                    let mut parts = item.split(';');
                    let m = parts.next().unwrap_or("").trim();
                    let refused =
                        parts.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
                    m.eq_ignore_ascii_case(media) && !refused
                })
            })
        };
        Some(if accepts("text/html") {
            Format::Html
        } else if accepts("application/json") {
            Format::Json
        } else {
            Format::Text
        })
    }

    /// The response's Content-Type.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Html => "text/html; charset=utf-8",
            Format::Json => "application/json",
            Format::Text => "text/plain; charset=utf-8",
        }
    }
}

#[cfg(test)]
mod tests;
