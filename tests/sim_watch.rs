//! WATCH streams compared with the recordings of each upstream profile: selector
//! transitions, the 410 ERROR event, bookmarks (v1.34: heartbeats, no null creationTimestamp),
//! WatchList (v1.34: initial events in key order, the end bookmark at the cache's revision),
//! timeouts and chunk framing.

#[path = "sim_common/mod.rs"]
mod common;

use common::*;
use kcache_sim::{Profile, Sim, SimConfig};
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

/// The resourceVersion of a recorded request (`resourceVersion=N` in its query).
fn request_rv(p: Profile, name: &str) -> u64 {
    let (_, path) = fixture_request_in(p, name);
    let q = path.split_once("resourceVersion=").unwrap().1;
    q[..q.find('&').unwrap_or(q.len())].parse().unwrap()
}

/// A stream compared across servers: resourceVersions as offsets from the watch's start RV
/// (v1.28, whose recordings' RVs are as dense as the sim's) or as ranks (v1.34).
fn stream(p: Profile, s: &str, base: u64) -> String {
    match p {
        Profile::V1_28 => normalize(s, Some(base)),
        Profile::V1_34 => normalize(&common::rank_rvs(s), Some(u64::MAX)),
    }
}

/// The resourceVersion of the last event of a recorded stream.
fn last_rv(text: &str) -> String {
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    last["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

per_profile!(selector_transitions_match_recording);

async fn selector_transitions_match_recording(p: Profile) {
    let fixture = |name: &str| fixture_in(p, name);
    let rec_base = request_rv(p, "watch-cm-ns-a-from-list-rv");
    let sim = seeded(SimConfig {
        too_large_rv_wait: Duration::from_millis(300),
        ..SimConfig::for_profile(p)
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
        stream(p, &all.text(), base),
        stream(p, &fixture("watch-cm-ns-a-from-list-rv.json"), rec_base)
    );
    let want_web = stream(
        p,
        &fixture("watch-cm-ns-a-label-app-web-from-list-rv.json"),
        rec_base,
    );
    assert_eq!(stream(p, &web.text(), base), want_web);
    // One chunk per event.
    assert_eq!(all.chunks.len(), 8);
    // The same stream replayed from history, through the legacy /watch/ path.
    let legacy = watch(
        &sim,
        &format!("/api/v1/watch/namespaces/fixtures-a/configmaps?labelSelector=app%3Dweb&resourceVersion={base}&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(stream(p, &legacy.text(), base), want_web);
    // Single-object watch by field selector.
    let one = watch(
        &sim,
        &format!("{CMS_A}?fieldSelector=metadata.name%3Dwatch-new-1&resourceVersion={base}&watch=true&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        stream(p, &one.text(), base),
        stream(
            p,
            &fixture("watch-cm-ns-a-single-object-field-name.json"),
            rec_base
        )
    );
}

per_profile!(too_old_resource_version_is_an_error_event);

/// The ConfigMap recordings of v1.34 replay history instead (its cache still reached RV 1: the
/// recording's environment), so v1.34 is held to the Widget ones.
async fn too_old_resource_version_is_an_error_event(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    sim.compact();
    let floor = sim.current_rv();
    let names = match p {
        Profile::V1_28 => [
            "err-watch-cm-rv1-too-old",
            "err-watch-legacy-path-rv1-too-old",
        ],
        Profile::V1_34 => [
            "err-watch-widgets-rv1-too-old",
            "err-watch-legacy-path-widgets-rv1-too-old",
        ],
    };
    for name in names {
        let (_, path) = fixture_request_in(p, name);
        let r = watch(&sim, &path, Duration::from_secs(5)).await;
        assert_eq!(r.status, 200);
        assert!(
            r.clean_end,
            "the server ends the stream after the ERROR event"
        );
        let recorded = fixture_in(p, &format!("{name}.json"));
        let at = recorded.find(" (").unwrap();
        let recorded_floor = &recorded[at + 2..at + 2 + recorded[at + 2..].find(')').unwrap()];
        let want = recorded.replace(&format!("({recorded_floor})"), &format!("({floor})"));
        assert_eq!(r.text(), want, "{name}");
    }
}

per_profile!(periodic_bookmarks_follow_the_type_rv);

/// A watch whose type had an event since its start gets periodic bookmarks at the type's
/// newest event (both versions); a quiet one none in v1.28 and, in v1.34, a heartbeat at the
/// store's revision once that moved past its start.
async fn periodic_bookmarks_follow_the_type_rv(p: Profile) {
    let fixture = |name: &str| fixture_in(p, name);
    let sim = seeded(profile_cfg(p)).await;
    let start = sim.current_rv();
    let addr = sim.addr();
    let bm = tokio::spawn(async move {
        let p = format!("/api/v1/namespaces/fixtures-b/configmaps?allowWatchBookmarks=true&resourceVersion={start}&watch=1&timeoutSeconds=4");
        request(addr, "GET", &p, &[], b"", Duration::from_secs(6)).await
    });
    // A quiet type: no event newer than the start RV.
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
    let recorded = fixture("watch-cm-ns-b-periodic-bookmark.json");
    let want = recorded.replace(&last_rv(&recorded), &other_rv.to_string());
    for l in &lines {
        assert_eq!(format!("{l}\n"), want);
    }
    let first = bm.chunks[0].0;
    assert!(
        first >= Duration::from_millis(700) && first < Duration::from_millis(1500),
        "first bookmark after {first:?}"
    );
    match p {
        Profile::V1_28 => assert!(
            quiet.body.is_empty(),
            "no bookmark without a newer event: {}",
            quiet.text()
        ),
        Profile::V1_34 => {
            // The recording: no widget written, a BOOKMARK at an RV no widget has.
            let recorded = fixture("watch-widgets-no-bookmark-90s-cache-behind.json");
            let want = recorded.replace(&last_rv(&recorded), &other_rv.to_string());
            let text = quiet.text();
            assert!(!text.is_empty(), "a heartbeat on the quiet watch");
            for l in text.lines() {
                assert_eq!(format!("{l}\n"), want);
            }
        }
    }
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

/// v1.34's heartbeat needs the store to move: a watch on a store where nothing at all happened
/// since its start gets no bookmark, and one from a future RV stays silent.
#[tokio::test]
async fn v1_34_no_heartbeat_before_the_store_moves_past_the_start() {
    let sim = seeded(profile_cfg(Profile::V1_34)).await;
    let start = sim.current_rv();
    let r = watch(
        &sim,
        &format!("/apis/fixtures.example.com/v1/widgets?allowWatchBookmarks=true&resourceVersion={start}&watch=1&timeoutSeconds=2"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        (r.status, r.text(), r.clean_end),
        (200, String::new(), true)
    );
    let (_, path) = fixture_request_in(Profile::V1_34, "watch-widgets-rv-future");
    let addr = sim.addr();
    let future = tokio::spawn(async move {
        request(
            addr,
            "GET",
            &format!("{path}&allowWatchBookmarks=true&timeoutSeconds=2"),
            &[],
            b"",
            Duration::from_secs(5),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    sim.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "elsewhere", "namespace": "fixtures-a"}}),
    )
    .unwrap();
    let r = future.await.unwrap();
    assert_eq!((r.status, r.body.len(), r.clean_end), (200, 0, true));
}

per_profile!(watchlist_sends_initial_events_then_end_bookmark);

async fn watchlist_sends_initial_events_then_end_bookmark(p: Profile) {
    let fixture = |name: &str| fixture_in(p, name);
    // v1.34 sends the initial events in key order (v1.28 in any order).
    let lines_of = |s: &str| match p {
        Profile::V1_28 => sorted_lines(s),
        Profile::V1_34 => s.lines().map(str::to_string).collect(),
    };
    let sim = seeded(profile_cfg(p)).await;
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
    // The end bookmark's RV: the type's (v1.28) or the cache's revision (v1.34).
    let (cm_rv, widget_rv) = match p {
        Profile::V1_28 => (cm_rv, widget_rv),
        Profile::V1_34 => (sim.current_rv(), sim.current_rv()),
    };
    // RV=0, built-in form. (v1.34's recording has a second, plain bookmark because its cache
    // was behind etcd: `v1_34_watchlist_from_a_cache_behind_catches_up_with_a_bookmark`.)
    let (_, path) = fixture_request_in(p, "watchlist-cm-ns-b-rv0");
    let r = watch(
        &sim,
        &format!("{path}&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    let mut want: Vec<String> = lines_of(&fixture("watchlist-cm-ns-b-rv0.json"));
    if p == Profile::V1_34 {
        assert!(want
            .pop()
            .unwrap()
            .contains(r#""metadata":{"resourceVersion":"#));
    }
    let want = want.join("\n") + "\n";
    assert_eq!(
        lines_of(&normalize(&r.text(), None)),
        lines_of(&normalize(&want, None))
    );
    let last = r.lines().pop().unwrap();
    assert_eq!(
        last["object"]["metadata"]["resourceVersion"],
        cm_rv.to_string()
    );
    // CR form.
    let (_, path) = fixture_request_in(p, "watchlist-widgets-rv0");
    let r = watch(
        &sim,
        &format!("{path}&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    let want = fixture("watchlist-widgets-rv0.json");
    assert_eq!(
        lines_of(&normalize(&r.text(), None)),
        lines_of(&normalize(&want, None))
    );
    assert_eq!(
        r.text().lines().last().unwrap(),
        want.lines()
            .last()
            .unwrap()
            .replace(&last_rv(&want), &widget_rv.to_string())
    );
    // W7: a reflector-style watch from RV "" is defaulted to WatchList; its bookmark is at the
    // current RV.
    let (_, path) = fixture_request_in(p, "watch-widgets-rv-unset-bookmarks");
    let r = watch(
        &sim,
        &format!("{path}&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    let lines = r.lines();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[3]["object"]["metadata"]["resourceVersion"],
        sim.current_rv().to_string()
    );
    if p == Profile::V1_34 {
        assert_eq!(
            normalize(&r.text(), None),
            normalize(&fixture("watch-widgets-rv-unset-bookmarks.json"), None)
        );
    }
    // Without allowWatchBookmarks: no bookmark (watchlist-cm-ns-b-without-bookmarks).
    let (_, path) = fixture_request_in(p, "watchlist-cm-ns-b-without-bookmarks");
    let r = watch(
        &sim,
        &format!("{path}&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        lines_of(&normalize(&r.text(), None)),
        lines_of(&normalize(
            &fixture("watchlist-cm-ns-b-without-bookmarks.json"),
            None
        ))
    );
    // An explicit RV the store has reached is answered at once (v1.34's recording, whose RV
    // was etcd's current one; v1.28's cache was behind there: see below).
    let now = sim.current_rv();
    let r = watch(
        &sim,
        &format!("/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets?allowWatchBookmarks=true&resourceVersion={now}&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=1&timeoutSeconds=1"),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        r.head_after < Duration::from_millis(200),
        "{:?}",
        r.head_after
    );
    let lines = r.lines();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[3]["object"]["metadata"]["resourceVersion"],
        now.to_string()
    );
    if p == Profile::V1_34 {
        assert_eq!(
            normalize(&r.text(), None),
            normalize(
                &fixture("watchlist-widgets-rv-explicit-cache-behind.json"),
                None
            )
        );
    }
    // A WatchList for an RV the store has not reached: headers held, then an ERROR 504 event
    // (v1.28's recording, whose cache was behind etcd).
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
    let want = fixture_in(
        Profile::V1_28,
        "watchlist-widgets-rv-explicit-cache-behind.json",
    )
    .replace("4730", &future.to_string());
    assert_eq!(normalize(&r.text(), None), normalize(&want, None));
    assert!(r.clean_end);
}

/// v1.34: a WatchList from RV=0 served by a watch cache behind the store's revision ends its
/// initial events at the cache's RV, then sends a plain BOOKMARK at the revision it was
/// behind once it has caught up (`watchlist-cm-ns-b-rv0`: 15007, then 15011 0.2 s later).
#[tokio::test]
async fn v1_34_watchlist_from_a_cache_behind_catches_up_with_a_bookmark() {
    let p = Profile::V1_34;
    let lag = Duration::from_millis(300);
    let sim = seeded(SimConfig {
        watch_cache_lags: vec![lag],
        ..profile_cfg(p)
    })
    .await;
    // Wait (on the lagging replica's own terms) until its cache holds the seeded objects.
    let caught_up = get(
        &sim,
        &format!(
            "/api/v1/namespaces/fixtures-b/configmaps?resourceVersion={}&resourceVersionMatch=NotOlderThan",
            sim.current_rv()
        ),
    )
    .await;
    assert_eq!(caught_up.status, 200);
    let behind = sim.current_rv();
    // Another client's write elsewhere: the cache is behind it for `lag`.
    sim.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "elsewhere", "namespace": "fixtures-a"}}),
    )
    .unwrap();
    let now = sim.current_rv();
    let (_, path) = fixture_request_in(p, "watchlist-cm-ns-b-rv0");
    let r = watch(
        &sim,
        &format!("{path}&timeoutSeconds=2"),
        Duration::from_secs(5),
    )
    .await;
    let recorded = fixture_in(p, "watchlist-cm-ns-b-rv0.json");
    assert_eq!(
        normalize(&common::rank_rvs(&r.text()), Some(u64::MAX)),
        normalize(&common::rank_rvs(&recorded), Some(u64::MAX))
    );
    let lines = r.lines();
    assert_eq!(lines.len(), 5);
    assert_eq!(
        lines[3]["object"]["metadata"]["resourceVersion"],
        behind.to_string()
    );
    assert_eq!(
        lines[4]["object"]["metadata"]["resourceVersion"],
        now.to_string()
    );
    // The catch-up bookmark comes once the cache has reached the write, not before.
    let (at_end, at_catch_up) = (r.chunks[3].0, r.chunks[4].0);
    assert!(
        at_catch_up > at_end && at_catch_up >= Duration::from_millis(200),
        "{at_end:?} {at_catch_up:?}"
    );
}

per_profile!(watch_parameter_forms_and_timeouts);

async fn watch_parameter_forms_and_timeouts(p: Profile) {
    let lines_of = |s: &str| match p {
        Profile::V1_28 => sorted_lines(s),
        Profile::V1_34 => s.lines().map(str::to_string).collect(),
    };
    let sim = seeded(profile_cfg(p)).await;
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
            lines_of(&normalize(&r.text(), None)),
            lines_of(&normalize(&fixture_in(p, &format!("{name}.json")), None)),
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

per_profile!(without_the_watchlist_gate_clients_fall_back);

async fn without_the_watchlist_gate_clients_fall_back(p: Profile) {
    let sim = Sim::start(SimConfig {
        watchlist: false,
        ..profile_cfg(p)
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

/// `?watch` watches a collection only: a named GET with it is a GET of the object, and a
/// repeated `watch` counts by its first value, as a v1.34.9 apiserver answers them (checked
/// 2026-11-28; kcache's `Parsed::parse` reads them the same way).
#[tokio::test]
async fn watch_is_a_collection_parameter_read_by_its_first_value() {
    let sim = seeded(profile_cfg(Profile::V1_34)).await;
    let name = sim.list("", "configmaps")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let ns = sim.list("", "configmaps")[0]["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    let r = get(
        &sim,
        &format!("/api/v1/namespaces/{ns}/configmaps/{name}?watch=1"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "ConfigMap", "the object, not a stream");
    let r = get(
        &sim,
        &format!("/api/v1/namespaces/{ns}/configmaps?watch=0&watch=1"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "ConfigMapList", "a list, not a stream");
}
