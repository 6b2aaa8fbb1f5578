use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::Value;

use super::*;
use crate::cache::{CacheConfig, Scope};
use crate::metrics::Format as MetricsFormat;
use crate::object::Object;
use crate::resource::ResourceInfo;

fn info() -> ResourceInfo {
    ResourceInfo::core_v1("configmaps", "ConfigMap")
}

fn cm(name: &str, rv: u64) -> Object {
    let raw =
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#);
    Object::from_upstream(&info(), Bytes::from(raw), false).unwrap()
}

/// A report of one small synced cache, as `collect` builds it.
fn small_report() -> StatusReport {
    let (cache, writer) =
        ResourceCache::new(info(), Scope::default(), CacheConfig::default()).split();
    writer.replace(vec![cm("a", 8), cm("b", 9)], 10);
    cache.last_list().record(ListReason::Startup);
    let metrics = Metrics::new();
    metrics.init_resource("configmaps");
    metrics
        .consistent_reads
        .get_or_create(&OutcomeLabels {
            resource: "configmaps".into(),
            outcome: "cache",
        })
        .inc();
    let entry = cache_status(&cache, Origin::Configured, &metrics);
    StatusReport {
        version: "0.1.0".into(),
        uptime_seconds: 12.5,
        shutting_down: false,
        upstream: UpstreamStatus {
            url: "https://10.0.0.1:6443".into(),
            reachable: true,
            version: Some("v1.34.1".into()),
            requests: BTreeMap::from([("reflector_list".to_string(), 1)]),
        },
        caches: vec![entry],
        auto: None,
    }
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

/// The field names and types tools read: a change here is a change of the JSON interface.
#[test]
fn json_shape() {
    let report = small_report();
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(
        keys(&v),
        [
            "caches",
            "shuttingDown",
            "upstream",
            "uptimeSeconds",
            "version"
        ]
    );
    assert!(v["uptimeSeconds"].is_f64());
    assert!(v["shuttingDown"].is_boolean());
    let up = &v["upstream"];
    assert_eq!(keys(up), ["reachable", "requests", "url", "version"]);
    assert!(up["reachable"].is_boolean());
    assert_eq!(up["version"], "v1.34.1");
    assert_eq!(up["requests"]["reflector_list"], 1);
    let c = &v["caches"][0];
    assert_eq!(
        keys(c),
        [
            "ageSeconds",
            "bytes",
            "condition",
            "consistentReads",
            "droppedWatchers",
            "group",
            "lastList",
            "name",
            "objects",
            "origin",
            "reachable",
            "relists",
            "resource",
            "resourceVersion",
            "resourceVersionAgeSeconds",
            "synced",
            "version",
            "watchers",
        ]
    );
    assert_eq!(c["name"], "v1/configmaps");
    assert_eq!(c["origin"], "configured");
    assert_eq!(c["group"], "");
    assert_eq!(c["version"], "v1");
    assert_eq!(c["resource"], "configmaps");
    assert_eq!(c["synced"], true);
    assert_eq!(c["objects"], 2);
    assert!(c["bytes"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(
        c["resourceVersion"], "10",
        "a string, as every resourceVersion"
    );
    assert!(c["resourceVersionAgeSeconds"].is_f64());
    assert!(c["ageSeconds"].is_f64());
    // The replace confirmed contact: a reachable, synced cache.
    assert_eq!(c["reachable"], true);
    assert_eq!(c["condition"], "synced");
    assert_eq!(c["relists"], 0);
    assert_eq!(c["watchers"], 0);
    assert_eq!(c["droppedWatchers"], 0);
    assert_eq!(keys(&c["lastList"]), ["at", "reason", "secondsAgo"]);
    assert_eq!(c["lastList"]["reason"], "startup");
    assert!(c["lastList"]["secondsAgo"].is_f64());
    let at = c["lastList"]["at"].as_str().unwrap();
    assert!(
        at.parse::<jiff::Timestamp>().is_ok() && at.ends_with('Z'),
        "{at}"
    );
    let reads = c["consistentReads"].as_object().unwrap();
    assert_eq!(reads.len(), CONSISTENT_READ_OUTCOMES.len());
    assert_eq!(reads["cache"], 1);
    assert_eq!(reads["timeout"], 0);
    // On-demand caching, when on: its own section.
    let mut with_auto = small_report();
    with_auto.auto = Some(AutoStatus {
        types: 1,
        refused: vec![RefusedStatus {
            name: "v1/secrets".into(),
            reason: "denied".into(),
            seconds_ago: 3.0,
        }],
    });
    let a = serde_json::to_value(&with_auto).unwrap();
    assert_eq!(keys(&a["auto"]), ["refused", "types"]);
    assert_eq!(
        keys(&a["auto"]["refused"][0]),
        ["name", "reason", "secondsAgo"]
    );
    assert!(text::render(&with_auto)
        .contains("cached on demand: 1 type; not cached: v1/secrets (denied)"));
    // What `kcache status` reads back is what was sent.
    let back: StatusReport = serde_json::from_value(v).unwrap();
    assert_eq!(back, report);
}

/// Before its first sync a type has no RV age and no last list: nulls, not absent fields.
#[test]
fn a_type_not_synced_has_nulls() {
    let cache = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
    let v =
        serde_json::to_value(cache_status(&cache, Origin::Configured, &Metrics::new())).unwrap();
    assert_eq!(v["condition"], "syncing");
    assert_eq!(v["synced"], false);
    assert!(v["resourceVersionAgeSeconds"].is_null());
    assert!(v["lastList"].is_null());
}

/// The outcomes read here are the ones `Metrics::init_resource` creates, and dropped watchers
/// are its `slow` reason.
#[test]
fn outcomes_are_the_metrics_own() {
    let metrics = Metrics::new();
    metrics.init_resource("things");
    let text = metrics.render(&[], &[], MetricsFormat::OpenMetrics);
    let label = |family: &str, label: &str| -> Vec<String> {
        let mut v: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains("resource=\"things\""))
            .filter_map(|l| {
                let rest = l.split(&format!("{label}=\"")).nth(1)?;
                Some(rest.split('"').next()?.to_string())
            })
            .collect();
        v.sort();
        v
    };
    let mut ours: Vec<String> = CONSISTENT_READ_OUTCOMES.map(String::from).to_vec();
    ours.sort();
    assert_eq!(label("kcache_consistent_reads_total", "outcome"), ours);
    assert!(label("kcache_watchers_closed_total", "reason").contains(&"slow".to_string()));
}

#[test]
fn format_choice() {
    use Format::*;
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    for (format, accept, want) in [
        (None, Some(browser), Some(Html)),
        (None, Some("application/json"), Some(Json)),
        (None, Some("*/*"), Some(Text)),
        (None, None, Some(Text)),
        (None, Some("text/html;q=0, application/json"), Some(Json)),
        (Some("json"), Some(browser), Some(Json)),
        (Some("text"), Some(browser), Some(Text)),
        (Some("html"), None, Some(Html)),
        (Some("yaml"), None, None),
    ] {
        assert_eq!(
            Format::choose(format, accept),
            want,
            "{format:?} {accept:?}"
        );
    }
}

#[test]
fn the_page_escapes_and_marks_rows() {
    let mut report = small_report();
    report.upstream.url = "https://x/\"><script>alert(1)</script>".into();
    report.upstream.version = Some("v1<b>".into());
    let mut stale = report.caches[0].clone();
    stale.name = "example.com/v1/<widgets>".into();
    stale.condition = Condition::Stale;
    report.caches.push(stale);
    let page = html::render(&report);
    assert!(!page.contains("<script"), "{page}");
    assert!(!page.contains("<b>"), "{page}");
    assert!(page.contains("&lt;script&gt;"), "{page}");
    assert!(
        page.contains(r#"<tr class="synced" data-type="v1/configmaps">"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<tr class="attention" data-type="example.com/v1/&lt;widgets&gt;">"#),
        "{page}"
    );
    assert!(page.contains(r#"<meta http-equiv="refresh" content="5">"#));
    // Self-contained: nothing for the browser to fetch.
    for external in ["<script", "<link", "src=", "url("] {
        assert!(!page.contains(external), "{external} in {page}");
    }
}

#[test]
fn the_text_table_is_aligned() {
    let mut report = small_report();
    let mut other = report.caches[0].clone();
    other.name = "apps/v1/deployments".into();
    other.objects = 123_456;
    other.condition = Condition::Syncing;
    other.last_list = None;
    report.caches.push(other);
    let out = text::render(&report);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(
            "kcache 0.1.0, up 12s; upstream https://10.0.0.1:6443 (v1.34.1), reachable"
        ),
        "{out}"
    );
    assert_eq!(lines[1], "upstream requests: reflector_list 1", "{out}");
    let table = &lines[3..];
    assert_eq!(table.len(), 3, "{out}");
    // Left-aligned columns start, right-aligned (numbers) end, at the same place in every row.
    let state_at = table[0].find("STATE").unwrap();
    let objects_end = table[0].find("OBJECTS").unwrap() + "OBJECTS".len();
    for (line, state, objects) in [(table[1], "synced", "2"), (table[2], "SYNCING", "123456")] {
        assert_eq!(line.find(state), Some(state_at), "{out}");
        let end = line.find(&format!("{objects} ")).unwrap() + objects.len();
        assert_eq!(end, objects_end, "{out}");
    }
    assert!(table[1].ends_with("cache 1"), "{out}");
    assert!(table[1].contains("startup"), "{out}");
}

#[test]
fn human_figures() {
    assert_eq!(text::bytes(512), "512 B");
    assert_eq!(text::bytes(1536), "1.5 KiB");
    assert_eq!(text::bytes(5 * 1024 * 1024), "5.0 MiB");
    assert_eq!(text::duration(0.25), "0.2s");
    assert_eq!(text::duration(42.0), "42s");
    assert_eq!(text::duration(185.0), "3m05s");
    assert_eq!(text::duration(7500.0), "2h05m");
    assert_eq!(text::duration(2.0 * 86400.0 + 3600.0), "2d01h");
}
