//! WATCH streams compared with the recordings: selector transitions, the 410 ERROR event,
//! bookmarks, WatchList, timeouts and chunk framing.

#[path = "sim_common/mod.rs"]
mod common;

use common::*;
use kcache_sim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::time::Duration;

const CMS_A: &str = "/api/v1/namespaces/fixtures-a/configmaps";

/// Replays the writes behind `watch-cm-ns-a-from-list-rv` (create, label, patch, relabel, delete).
fn replay_recorded_writes(sim: &Sim) {
    for line in fixture("watch-cm-ns-a-from-list-rv.json").lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        let obj = strip_server_fields(ev["object"].clone());
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        match ev["type"].as_str().unwrap() {
            "ADDED" => {
                sim.create("", "configmaps", obj).unwrap();
            }
            "MODIFIED" => {
                sim.update("", "configmaps", obj).unwrap();
            }
            "DELETED" => {
                sim.delete("", "configmaps", Some("fixtures-a"), &name)
                    .unwrap();
            }
            other => panic!("unexpected {other}"),
        }
    }
}

fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

async fn watch(sim: &Sim, path: &str, max: Duration) -> Resp {
    request(sim.addr(), "GET", path, &[], b"", max).await
}

#[tokio::test]
async fn selector_transitions_match_recording() {
    let sim = seeded(SimConfig {
        too_large_rv_wait: Duration::from_millis(300),
        ..SimConfig::default()
    })
    .await;
    let base = sim.current_rv();
    let addr = sim.addr();
    let all = tokio::spawn(async move {
        let p = format!(
            "{CMS_A}?allowWatchBookmarks=true&resourceVersion={base}&watch=true&timeoutSeconds=2"
        );
        request(addr, "GET", &p, &[], b"", Duration::from_secs(5)).await
    });
    let web = tokio::spawn(async move {
        let p = format!("{CMS_A}?allowWatchBookmarks=true&labelSelector=app%3Dweb&resourceVersion={base}&watch=true&timeoutSeconds=2");
        request(addr, "GET", &p, &[], b"", Duration::from_secs(5)).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    replay_recorded_writes(&sim);
    let all = all.await.unwrap();
    let web = web.await.unwrap();
    assert_eq!(all.status, 200);
    assert!(all.clean_end, "timeoutSeconds ends the stream cleanly");
    assert_eq!(
        normalize(&all.text(), Some(base)),
        normalize(&fixture("watch-cm-ns-a-from-list-rv.json"), Some(3909))
    );
    let want_web = normalize(
        &fixture("watch-cm-ns-a-label-app-web-from-list-rv.json"),
        Some(3909),
    );
    assert_eq!(normalize(&web.text(), Some(base)), want_web);
    // One chunk per event.
    assert_eq!(all.chunks.len(), 8);
    // The same stream replayed from history, through the legacy /watch/ path.
    let legacy = watch(
        &sim,
        &format!("/api/v1/watch/namespaces/fixtures-a/configmaps?labelSelector=app%3Dweb&resourceVersion={base}&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(normalize(&legacy.text(), Some(base)), want_web);
    // Single-object watch by field selector.
    let one = watch(
        &sim,
        &format!("{CMS_A}?fieldSelector=metadata.name%3Dwatch-new-1&resourceVersion={base}&watch=true&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        normalize(&one.text(), Some(base)),
        normalize(
            &fixture("watch-cm-ns-a-single-object-field-name.json"),
            Some(3909)
        )
    );
}

#[tokio::test]
async fn too_old_resource_version_is_an_error_event() {
    let sim = seeded(fast_cfg()).await;
    sim.compact();
    let floor = sim.current_rv();
    for path in [
        format!("{CMS_A}?resourceVersion=1&watch=true"),
        "/api/v1/watch/namespaces/fixtures-a/configmaps?resourceVersion=1".to_string(),
    ] {
        let r = watch(&sim, &path, Duration::from_secs(5)).await;
        assert_eq!(r.status, 200);
        assert!(
            r.clean_end,
            "the server ends the stream after the ERROR event"
        );
        let want =
            fixture("err-watch-cm-rv1-too-old.json").replace("(1484)", &format!("({floor})"));
        assert_eq!(r.text(), want);
    }
}

#[tokio::test]
async fn periodic_bookmarks_follow_the_type_rv() {
    let sim = seeded(fast_cfg()).await;
    let start = sim.current_rv();
    let addr = sim.addr();
    let bm = tokio::spawn(async move {
        let p = format!("/api/v1/namespaces/fixtures-b/configmaps?allowWatchBookmarks=true&resourceVersion={start}&watch=1&timeoutSeconds=4");
        request(addr, "GET", &p, &[], b"", Duration::from_secs(6)).await
    });
    // A quiet type: no event newer than the start RV, so no bookmark at all.
    let quiet = tokio::spawn(async move {
        let p = format!("/apis/fixtures.example.com/v1/widgets?allowWatchBookmarks=true&resourceVersion={start}&watch=1&timeoutSeconds=3");
        request(addr, "GET", &p, &[], b"", Duration::from_secs(6)).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A write in another namespace: filtered out, but it advances the type's RV.
    let other = sim
        .create(
            "",
            "configmaps",
            json!({"metadata": {"name": "elsewhere", "namespace": "fixtures-a"}}),
        )
        .unwrap();
    let other_rv: u64 = other["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let bm = bm.await.unwrap();
    let quiet = quiet.await.unwrap();
    let text = bm.text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        !lines.is_empty(),
        "a bookmark after the type moved past the start RV"
    );
    let want =
        fixture("watch-cm-ns-b-periodic-bookmark.json").replace("5565", &other_rv.to_string());
    for l in &lines {
        assert_eq!(format!("{l}\n"), want);
    }
    let first = bm.chunks[0].0;
    assert!(
        first >= Duration::from_millis(700) && first < Duration::from_millis(1500),
        "first bookmark after {first:?}"
    );
    assert!(
        quiet.body.is_empty(),
        "no bookmark without a newer event: {}",
        quiet.text()
    );
    assert!(quiet.clean_end);
    assert!(
        quiet.total >= Duration::from_millis(2900),
        "ended by timeoutSeconds: {:?}",
        quiet.total
    );
    assert!(
        quiet.head_after < Duration::from_millis(500),
        "headers before the first event"
    );
}

#[tokio::test]
async fn watchlist_sends_initial_events_then_end_bookmark() {
    let sim = seeded(fast_cfg()).await;
    let widget_rv = sim
        .list("fixtures.example.com", "widgets")
        .iter()
        .map(|w| {
            w["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .max()
        .unwrap();
    let cm_rv: u64 = sim
        .get("", "configmaps", Some("fixtures-b"), "b-cm-3")
        .unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // RV=0: bookmark at the type's RV (built-in form).
    let (_, path) = fixture_request("watchlist-cm-ns-b-rv0");
    let r = watch(
        &sim,
        &format!("{path}&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        sorted_lines(&normalize(&r.text(), None)),
        sorted_lines(&normalize(&fixture("watchlist-cm-ns-b-rv0.json"), None))
    );
    let last = r.lines().pop().unwrap();
    assert_eq!(
        last["object"]["metadata"]["resourceVersion"],
        cm_rv.to_string()
    );
    // CR form.
    let r = watch(
        &sim,
        "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets?allowWatchBookmarks=true&resourceVersion=0&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=1&timeoutSeconds=1",
        Duration::from_secs(5),
    )
    .await;
    let want = fixture("watchlist-widgets-rv0.json");
    assert_eq!(
        sorted_lines(&normalize(&r.text(), None)),
        sorted_lines(&normalize(&want, None))
    );
    assert_eq!(
        r.text().lines().last().unwrap(),
        want.lines()
            .last()
            .unwrap()
            .replace("348", &widget_rv.to_string())
    );
    // W7: a reflector-style watch from RV "" is defaulted to WatchList; its bookmark is at the current RV.
    let r = watch(&sim, "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets?allowWatchBookmarks=true&watch=1&timeoutSeconds=1", Duration::from_secs(5)).await;
    let lines = r.lines();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[3]["object"]["metadata"]["resourceVersion"],
        sim.current_rv().to_string()
    );
    // Without allowWatchBookmarks: no bookmark (watchlist-cm-ns-b-without-bookmarks).
    let (_, path) = fixture_request("watchlist-cm-ns-b-without-bookmarks");
    let r = watch(
        &sim,
        &format!("{path}&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        sorted_lines(&normalize(&r.text(), None)),
        sorted_lines(&normalize(
            &fixture("watchlist-cm-ns-b-without-bookmarks.json"),
            None
        ))
    );
    // A WatchList for an RV the store has not reached: headers held, then an ERROR 504 event.
    let future = sim.current_rv() + 1000;
    let r = watch(
        &sim,
        &format!("/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets?allowWatchBookmarks=true&resourceVersion={future}&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=1"),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        r.head_after >= Duration::from_millis(290),
        "headers held {:?}",
        r.head_after
    );
    let want = fixture("watchlist-widgets-rv-explicit-cache-behind.json")
        .replace("4730", &future.to_string());
    assert_eq!(normalize(&r.text(), None), normalize(&want, None));
    assert!(r.clean_end);
}

#[tokio::test]
async fn watch_parameter_forms_and_timeouts() {
    let sim = seeded(fast_cfg()).await;
    for (q, name) in [
        ("watch=", "watch-cm-ns-b-watch-empty-value-is-true"),
        ("watch=maybe", "watch-cm-ns-b-watch-maybe-is-true"),
    ] {
        let r = watch(
            &sim,
            &format!("/api/v1/namespaces/fixtures-b/configmaps?{q}&timeoutSeconds=1"),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(
            sorted_lines(&normalize(&r.text(), None)),
            sorted_lines(&normalize(&fixture(&format!("{name}.json")), None)),
            "{q}"
        );
        assert_eq!(r.chunks.len(), 3, "one chunk per event");
        assert!(r.clean_end);
        assert!(
            r.total >= Duration::from_millis(950) && r.total < Duration::from_millis(2500),
            "{:?}",
            r.total
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    }
    // A plain watch from a future RV is accepted silently.
    let r = watch(
        &sim,
        "/apis/fixtures.example.com/v1/widgets?resourceVersion=99999999&watch=1&timeoutSeconds=1",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!((r.status, r.body.len(), r.clean_end), (200, 0, true));
    // ...and sees events once the store passes that RV (not before).
    let target = sim.current_rv() + 2;
    let addr = sim.addr();
    let w = tokio::spawn(async move {
        let p = format!("/api/v1/namespaces/fixtures-b/configmaps?resourceVersion={target}&watch=1&timeoutSeconds=1");
        request(addr, "GET", &p, &[], b"", Duration::from_secs(5)).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..3 {
        sim.create(
            "",
            "configmaps",
            json!({"metadata": {"name": format!("f-{i}"), "namespace": "fixtures-b"}}),
        )
        .unwrap();
    }
    let names: Vec<Value> = w
        .await
        .unwrap()
        .lines()
        .iter()
        .map(|l| l["object"]["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("f-2")]);
}

#[tokio::test]
async fn without_the_watchlist_gate_clients_fall_back() {
    let sim = Sim::start(SimConfig {
        watchlist: false,
        ..fast_cfg()
    })
    .await
    .unwrap();
    sim.register(widgets());
    seed(
        &sim,
        "fixtures.example.com",
        "widgets",
        "list-widgets-ns-a.json",
    );
    let r = watch(
        &sim,
        "/apis/fixtures.example.com/v1/widgets?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=1",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.text(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"ListOptions.meta.k8s.io \\\"\\\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled\",\"reason\":\"Invalid\",\"details\":{\"group\":\"meta.k8s.io\",\"kind\":\"ListOptions\",\"causes\":[{\"reason\":\"FieldValueForbidden\",\"message\":\"Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled\",\"field\":\"sendInitialEvents\"}]},\"code\":422}\n"
    );
    // A classic watch from RV 0: ADDED in key order, no initial-events-end bookmark.
    let r = watch(&sim, "/apis/fixtures.example.com/v1/widgets?allowWatchBookmarks=true&resourceVersion=0&watch=1&timeoutSeconds=1", Duration::from_secs(5)).await;
    let names: Vec<Value> = r
        .lines()
        .iter()
        .map(|l| l["object"]["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("w-blue"), json!("w-green"), json!("w-red")]);
    assert!(r.lines().iter().all(|l| l["type"] == "ADDED"));
}
