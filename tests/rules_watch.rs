//! Rule-by-rule conformance of kcache's WATCH with kube-apiserver v1.28 (W1–W7 of
//! docs/semantics.md): streams kcache serves from its cache, compared
//! with the recordings after replaying the recorder's writes against the simulated apiserver.
//! kcache runs with a 1 s bookmark interval where bookmarks are the subject (W5), and with the
//! apiserver's 60 s where a recording without bookmarks is replayed.

mod common;
#[path = "sim_common/mod.rs"]
mod raw;
#[path = "rules_common/mod.rs"]
mod rules_common;

use std::net::SocketAddr;
use std::time::Duration;

use common::Env;
use raw::Resp;
use rules_common::*;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// Watches of `resource` kcache has answered from its cache so far (its own
/// `kcache_requests_total`, counted once a watch is registered and its headers are out).
fn watches_of(env: &Env, resource: &str) -> u64 {
    env.kcache
        .metrics()
        .requests
        .get_or_create(&kcache::metrics::RequestLabels {
            verb: "watch",
            resource: resource.to_string(),
            code: 200,
            source: "cache",
        })
        .get()
}

/// Wait until kcache has answered `n` watches of `resource` (see [`watches_of`]): writes made
/// after this reach them as live events. Instead of sleeping for the watches to open.
async fn wait_watches(env: &Env, resource: &str, n: u64) {
    common::wait_until(&format!("{n} watches of {resource} answered"), || {
        let got = watches_of(env, resource);
        async move { got >= n }
    })
    .await;
}

/// Open a watch on kcache in the background, read until the server ends it (or `max`).
fn spawn_watch(env: &Env, path: String, max: Duration) -> JoinHandle<Resp> {
    let addr: SocketAddr = env.kcache.addr;
    tokio::spawn(async move { raw::request(addr, "GET", &path, &[], b"", max).await })
}

/// The recorder's writes behind `watch-cm-ns-a-from-list-rv`: create, label, patch, relabel
/// (leaves app=web), relabel another (enters app=web), delete both.
fn replay_recorded_writes(env: &Env) {
    for line in raw::fixture("watch-cm-ns-a-from-list-rv.json").lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        let obj = raw::strip_server_fields(ev["object"].clone());
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        match ev["type"].as_str().unwrap() {
            "ADDED" => {
                env.sim.create("", "configmaps", obj).unwrap();
            }
            "MODIFIED" => {
                env.sim.update("", "configmaps", obj).unwrap();
            }
            "DELETED" => {
                env.sim
                    .delete("", "configmaps", Some("fixtures-a"), &name)
                    .unwrap();
            }
            other => panic!("unexpected {other}"),
        }
    }
}

/// Headers and framing of a watch response (W1, E6, E7).
fn assert_watch_response(r: &Resp, what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", r.text());
    assert_from_cache(r, what);
    assert_eq!(r.header("content-type"), Some("application/json"), "{what}");
    assert_eq!(
        r.header("cache-control"),
        Some("no-cache, private"),
        "{what}"
    );
    assert!(r.header("audit-id").is_some(), "{what}");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{what}");
    assert!(r.header("content-length").is_none(), "{what}");
}

/// One chunk per event line.
fn assert_one_chunk_per_event(r: &Resp, what: &str) {
    for (_, chunk) in &r.chunks {
        let text = String::from_utf8_lossy(chunk);
        assert_eq!(
            text.matches('\n').count(),
            1,
            "{what}: one event per chunk: {text}"
        );
        assert!(text.ends_with('\n'));
    }
}

/// The stream's RV offsets normalised from `base` (ours) and 3909 (the recording's list RV).
fn same_stream(ours: &str, base: u64, fixture: &str) {
    assert_eq!(
        raw::normalize(ours, Some(base)),
        raw::normalize(&raw::fixture(fixture), Some(3909)),
        "{fixture}"
    );
}

/// W1 + W2: the recorded watches replayed. `{"type":T,"object":O}\n` per event, one chunk each,
/// objects complete with kind/apiVersion, headers before any event, a clean end at
/// timeoutSeconds; a selector watch sees ADDED on entering, DELETED with the previous object
/// but the new RV on leaving, the unfiltered one MODIFIED for both; real deletes carry the
/// deletion RV. The legacy `/watch/` path and a single-object watch (field selector or
/// `…/NAME?watch=1`) give the same streams, also when replayed from kcache's history.
#[tokio::test]
async fn w1_w2_stream_format_selector_transitions_legacy_path() {
    // The apiserver's 60 s bookmark interval: the recordings (16 s) hold no bookmark.
    let env = common::EnvBuilder::fixtures().start().await;
    env.settle("", "configmaps").await;
    let base = env.sim.current_rv();
    let all = spawn_watch(
        &env,
        format!(
            "{CMS_A}?allowWatchBookmarks=true&resourceVersion={base}&watch=true&timeoutSeconds=2"
        ),
        Duration::from_secs(6),
    );
    let web = spawn_watch(
        &env,
        format!("{CMS_A}?allowWatchBookmarks=true&labelSelector=app%3Dweb&resourceVersion={base}&watch=true&timeoutSeconds=2"),
        Duration::from_secs(6),
    );
    wait_watches(&env, "configmaps", 2).await;
    replay_recorded_writes(&env);
    let all = all.await.unwrap();
    let web = web.await.unwrap();
    for (r, fixture) in [
        (&all, "watch-cm-ns-a-from-list-rv.json"),
        (&web, "watch-cm-ns-a-label-app-web-from-list-rv.json"),
    ] {
        assert_watch_response(r, fixture);
        // The writes came after kcache had answered both watches: the headers were sent
        // without waiting for an event.
        assert!(
            !r.chunks.is_empty() && r.head_after <= r.chunks[0].0,
            "{fixture}: headers before the first event"
        );
        assert!(
            r.clean_end,
            "{fixture}: timeoutSeconds ends with the zero chunk"
        );
        // timeoutSeconds=2 is what ends it: not before, and (generously) not much later.
        assert!(
            r.total >= Duration::from_millis(1900) && r.total < Duration::from_secs(10),
            "{fixture}: {:?}",
            r.total
        );
        assert_one_chunk_per_event(r, fixture);
        same_stream(&r.text(), base, fixture);
        for l in r.lines() {
            assert_eq!(l["object"]["kind"], "ConfigMap");
            assert_eq!(l["object"]["apiVersion"], "v1");
        }
    }
    assert_eq!(all.chunks.len(), 8);
    // W2 spelled out: the leave event is the old object (app=web) at the new RV.
    let all_lines = all.lines();
    let web_lines = web.lines();
    let leave = web_lines
        .iter()
        .find(|l| l["type"] == "DELETED" && l["object"]["metadata"]["name"] == "watch-new-1")
        .expect("leave event");
    let relabel = all_lines
        .iter()
        .find(|l| l["object"]["metadata"]["labels"]["app"] == "api")
        .expect("relabel");
    assert_eq!(relabel["type"], "MODIFIED");
    assert_eq!(leave["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(
        leave["object"]["metadata"]["resourceVersion"],
        relabel["object"]["metadata"]["resourceVersion"]
    );
    let enter = web_lines
        .iter()
        .find(|l| l["object"]["metadata"]["name"] == "watch-new-2")
        .expect("enter event");
    assert_eq!(enter["type"], "ADDED");
    assert_eq!(enter["object"]["metadata"]["labels"]["app"], "web");
    let real_delete = all_lines.last().unwrap();
    assert_eq!(real_delete["type"], "DELETED");
    assert_eq!(rv_of(&real_delete["object"]), env.sim.current_rv());

    // The same streams replayed from history: legacy path, single-object watches.
    for (path, fixture) in [
        (
            format!("/api/v1/watch/namespaces/fixtures-a/configmaps?resourceVersion={base}&labelSelector=app%3Dweb&timeoutSeconds=1"),
            "watch-legacy-path-cm-ns-a.json",
        ),
        (
            format!("{CMS_A}?fieldSelector=metadata.name%3Dwatch-new-1&resourceVersion={base}&watch=true&timeoutSeconds=1"),
            "watch-cm-ns-a-single-object-field-name.json",
        ),
        (
            format!("{CMS_A}/watch-new-1?resourceVersion={base}&watch=true&timeoutSeconds=1"),
            "watch-cm-ns-a-single-object-field-name.json",
        ),
    ] {
        let r = send(&env, &path).await;
        assert_watch_response(&r, &path);
        assert!(r.clean_end);
        same_stream(&r.text(), base, fixture);
    }
}

/// W2 for every kind of selector: kcache's streams are byte-identical to the upstream's own
/// for the same requests (label and field selectors, set-based and negated, namespaces, CRs)
/// while objects enter, leave, change inside and are deleted.
#[tokio::test]
async fn w2_selector_transitions_match_upstream_streams() {
    let env = common::EnvBuilder::fixtures().start().await;
    for (g, r) in [("", "configmaps"), ("", "pods"), (WIDGET_GROUP, "widgets")] {
        env.settle(g, r).await;
    }
    let base = env.sim.current_rv();
    let q = |p: &str| {
        with_param(
            p,
            &format!("watch=1&resourceVersion={base}&timeoutSeconds=2"),
        )
    };
    let paths = [
        q(CMS_A),
        q(&format!("{CMS_A}?labelSelector=app%3Dweb")),
        q(&format!("{CMS_A}?labelSelector=app%21%3Dweb")),
        q("/api/v1/configmaps?labelSelector=tier%20notin%20%28front%29"),
        q("/api/v1/configmaps?labelSelector=%21tier"),
        q("/api/v1/configmaps?fieldSelector=metadata.namespace%3Dfixtures-b"),
        q("/api/v1/configmaps?fieldSelector=metadata.name%21%3Dcm-01%2Cmetadata.namespace%3Dfixtures-a&labelSelector=tier"),
        q("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1"),
        q("/api/v1/pods?fieldSelector=spec.nodeName%3D"),
        q("/api/v1/namespaces/fixtures-a/pods?fieldSelector=status.phase%3DRunning"),
        q(&format!("{WIDGETS}?labelSelector=app%3Dweb")),
        q(&format!("{WIDGETS_A}?fieldSelector=metadata.name%3Dw-blue")),
    ];
    let sim_addr = env.sim.addr();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let opened: Vec<(&str, u64)> = ["configmaps", "pods", "widgets"]
        .into_iter()
        .map(|r| {
            let n = paths
                .iter()
                .filter(|p| p.contains(&format!("/{r}?")))
                .count() as u64;
            (r, watches_of(&env, r) + n)
        })
        .collect();
    for p in &paths {
        ours.push(spawn_watch(&env, p.clone(), Duration::from_secs(6)));
        let p = p.clone();
        theirs.push(tokio::spawn(async move {
            raw::request(sim_addr, "GET", &p, &[], b"", Duration::from_secs(6)).await
        }));
    }
    // kcache's watches are registered before the writes; the upstream's start at `base`, so
    // they replay any write made before they opened.
    for (r, n) in opened {
        wait_watches(&env, r, n).await;
    }
    let sim = &env.sim;
    let relabel = |ns: &str, name: &str, labels: Value| {
        let mut o = sim.get("", "configmaps", Some(ns), name).unwrap();
        o["metadata"]["labels"] = labels;
        sim.update("", "configmaps", o).unwrap();
    };
    relabel(
        "fixtures-a",
        "cm-01",
        json!({"app": "api", "tier": "front"}),
    );
    relabel(
        "fixtures-a",
        "cm-07",
        json!({"app": "web", "tier": "front"}),
    );
    relabel("fixtures-a", "cm-16", json!({"tier": "back"}));
    relabel("fixtures-a", "cm-14", json!({"app": "web", "tier": "back"}));
    relabel("fixtures-b", "b-cm-1", json!({}));
    sim.delete("", "configmaps", Some("fixtures-a"), "cm-02")
        .unwrap();
    sim.delete("", "configmaps", Some("fixtures-a"), "cm-20")
        .unwrap();
    create_cm(&env, "fixtures-b", "b-cm-4", json!({"app": "web"}));
    let mut pod = sim
        .get("", "pods", Some("fixtures-a"), "pod-unscheduled")
        .unwrap();
    pod["spec"]["nodeName"] = json!("node-1");
    sim.update("", "pods", pod).unwrap();
    let mut pod = sim.get("", "pods", Some("fixtures-a"), "pod-1a").unwrap();
    pod["spec"]["nodeName"] = json!("node-2");
    pod["status"]["phase"] = json!("Running");
    sim.update("", "pods", pod).unwrap();
    sim.delete("", "pods", Some("fixtures-a"), "pod-1b")
        .unwrap();
    let mut w = sim
        .get(WIDGET_GROUP, "widgets", Some("fixtures-a"), "w-red")
        .unwrap();
    w["metadata"]["labels"] = json!({"app": "db"});
    sim.update(WIDGET_GROUP, "widgets", w).unwrap();
    let mut w = sim
        .get(WIDGET_GROUP, "widgets", Some("fixtures-a"), "w-blue")
        .unwrap();
    w["metadata"]["labels"] = json!({"app": "web"});
    sim.update(WIDGET_GROUP, "widgets", w).unwrap();
    sim.delete(WIDGET_GROUP, "widgets", Some("fixtures-a"), "w-blue")
        .unwrap();
    for ((p, o), t) in paths.iter().zip(ours).zip(theirs) {
        let (o, t) = (o.await.unwrap(), t.await.unwrap());
        assert_watch_response(&o, p);
        assert!(!t.text().is_empty(), "{p}: the writes concern this watch");
        assert_eq!(o.text(), t.text(), "{p}");
        assert_eq!(o.chunks.len(), t.chunks.len(), "{p}: one chunk per event");
    }
}

/// W3: a watch from an RV older than the retained history: HTTP 200, exactly one ERROR event
/// carrying the 410 Expired Status ("too old resource version: N (M)", M = the oldest RV still
/// servable), then the stream ends; also through the legacy path.
#[tokio::test]
async fn w3_too_old_rv_is_200_one_error_then_eof() {
    let mut b = builder();
    b.config.cache.history_max_events = 4;
    let env = b.start().await;
    for i in 0..6 {
        create_cm(&env, "fixtures-b", &format!("churn-{i}"), json!({}));
    }
    env.settle("", "configmaps").await;
    let mut oldest = None;
    for name in [
        "err-watch-cm-rv1-too-old",
        "err-watch-legacy-path-rv1-too-old",
    ] {
        let (_, path) = raw::fixture_request(name);
        let r = send(&env, &path).await;
        assert_watch_response(&r, name);
        assert!(r.clean_end, "{name}: the stream ends after the ERROR");
        assert!(r.total < Duration::from_secs(1), "{name}: at once");
        let text = r.text();
        let m: u64 = text
            .split("too old resource version: 1 (")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {text}"));
        assert_eq!(
            text,
            recorded(name).body.replace("(1484)", &format!("({m})")),
            "{name}"
        );
        assert_eq!(r.chunks.len(), 1);
        oldest = Some(m);
    }
    // M is the oldest RV a watch may start from; one less is too old.
    let m = oldest.unwrap();
    let ok = send(
        &env,
        &format!("{CMS_B}?watch=1&resourceVersion={m}&timeoutSeconds=1"),
    )
    .await;
    assert_eq!(ok.status, 200);
    assert!(!ok.text().contains("ERROR"), "{}", ok.text());
    assert!(ok.lines().iter().any(|l| l["type"] == "ADDED"));
    let old = send(
        &env,
        &format!("{CMS_B}?watch=1&resourceVersion={}&timeoutSeconds=1", m - 1),
    )
    .await;
    assert!(
        old.text()
            .contains(&format!("too old resource version: {} ({m})", m - 1)),
        "{}",
        old.text()
    );
}

/// W4: `timeoutSeconds` ends the stream cleanly with no final event (0 bytes when nothing
/// happened; headers at once); a future RV on a plain watch is accepted silently, and events
/// come once the store passes it.
#[tokio::test]
async fn w4_timeout_ends_cleanly_future_rv_silent() {
    let env = fixtures_env().await;
    let cm_rv = cache_rv(&env, "", "configmaps");
    let (_, timeout1) = raw::fixture_request("watch-cm-ns-a-timeout1-bookmarks");
    let timeout1 = spawn_watch(
        &env,
        replace_rv(&timeout1, 4231, cm_rv),
        Duration::from_secs(5),
    );
    let (_, future) = raw::fixture_request("watch-widgets-rv-future");
    let future = spawn_watch(
        &env,
        with_param(&future, "timeoutSeconds=2"),
        Duration::from_secs(6),
    );
    let r = timeout1.await.unwrap();
    assert_watch_response(&r, "timeoutSeconds=1");
    assert!((r.status, r.body.len(), r.clean_end) == (200, 0, true));
    // timeoutSeconds=1 ends it: not before; the upper bound only says "not hanging".
    assert!(
        r.total >= Duration::from_millis(950) && r.total < Duration::from_secs(10),
        "{:?}",
        r.total
    );
    // At once, not held like a future RV's 3 s (below): a bound a loaded machine keeps.
    assert!(r.head_after < Duration::from_secs(2), "headers at once");
    let target = env.sim.current_rv() + 2;
    let opened = watches_of(&env, "configmaps") + 1;
    let near = spawn_watch(
        &env,
        format!("{CMS_B}?resourceVersion={target}&watch=1&timeoutSeconds=1"),
        Duration::from_secs(6),
    );
    wait_watches(&env, "configmaps", opened).await;
    for i in 0..3 {
        create_cm(&env, "fixtures-b", &format!("f-{i}"), json!({}));
    }
    let r = future.await.unwrap();
    assert_watch_response(&r, "future RV");
    assert_eq!((r.body.len(), r.clean_end), (0, true), "{}", r.text());
    assert!(r.total >= Duration::from_millis(1950));
    let r = near.await.unwrap();
    let names: Vec<Value> = r
        .lines()
        .iter()
        .map(|l| l["object"]["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("f-2")], "only events after the requested RV");
}

/// W5: with `allowWatchBookmarks`, a periodic BOOKMARK (built-in form with
/// `creationTimestamp:null`, CR form with sorted keys) carrying the RV of the type's last event
/// - not the global RV - once the type moved past the watch's start RV, even by writes the
/// watch does not see. No bookmark on a quiet type, none without the parameter.
#[tokio::test]
async fn w5_periodic_bookmarks_only_when_moved_and_asked() {
    let env = fixtures_env().await;
    let cm_start = cache_rv(&env, "", "configmaps");
    let w_start = cache_rv(&env, WIDGET_GROUP, "widgets");
    let pod_start = cache_rv(&env, "", "pods");
    let opened = [
        ("configmaps", watches_of(&env, "configmaps") + 2),
        ("widgets", watches_of(&env, "widgets") + 1),
        ("pods", watches_of(&env, "pods") + 1),
    ];
    let (_, cm_path) = raw::fixture_request("watch-cm-ns-b-periodic-bookmark");
    let cm = spawn_watch(
        &env,
        with_param(&replace_rv(&cm_path, 5429, cm_start), "timeoutSeconds=4"),
        Duration::from_secs(7),
    );
    let cm_no_param = spawn_watch(
        &env,
        format!("{CMS_B}?resourceVersion={cm_start}&watch=1&timeoutSeconds=3"),
        Duration::from_secs(7),
    );
    let (_, w_path) = raw::fixture_request("watch-widgets-label-periodic-bookmark");
    let widgets = spawn_watch(
        &env,
        with_param(&replace_rv(&w_path, 4433, w_start), "timeoutSeconds=4"),
        Duration::from_secs(7),
    );
    let quiet = spawn_watch(
        &env,
        format!(
            "/api/v1/pods?allowWatchBookmarks=true&resourceVersion={pod_start}&watch=1&timeoutSeconds=3"
        ),
        Duration::from_secs(7),
    );
    for (r, n) in opened {
        wait_watches(&env, r, n).await;
    }
    // Writes these watches filter out (other namespace, no app=web label)...
    let cm_rv = create_cm(&env, "fixtures-a", "bm-demo", json!({}));
    let w_rv = create_widget(&env, "fixtures-b", "w-tmp-b", json!({}));
    // ...and one that moves the global RV only.
    env.sim
        .create(
            "",
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "moves-global", "namespace": "fixtures-a"}}),
        )
        .unwrap();
    let cm = cm.await.unwrap();
    assert_watch_response(&cm, "cm bookmarks");
    assert!(!cm.text().is_empty(), "a bookmark once the type moved");
    let want =
        raw::fixture("watch-cm-ns-b-periodic-bookmark.json").replace("5565", &cm_rv.to_string());
    for l in cm.text().lines() {
        assert_eq!(format!("{l}\n"), want);
    }
    // Periodic, not at once: the 1 s interval. (That one comes at all is checked above.)
    let first = cm.chunks[0].0;
    assert!(
        first >= Duration::from_millis(800),
        "first bookmark after {first:?} (interval 1 s)"
    );
    let widgets = widgets.await.unwrap();
    assert!(!widgets.text().is_empty(), "CR bookmark");
    let want = raw::fixture("watch-widgets-label-periodic-bookmark.json")
        .replace("4437", &w_rv.to_string());
    for l in widgets.text().lines() {
        assert_eq!(format!("{l}\n"), want);
    }
    for (r, what) in [
        (cm_no_param.await.unwrap(), "without allowWatchBookmarks"),
        (quiet.await.unwrap(), "quiet type"),
    ] {
        assert_watch_response(&r, what);
        assert_eq!(r.text(), "", "{what}: no bookmark");
        assert!(
            r.clean_end && r.total >= Duration::from_millis(2900),
            "{what}"
        );
    }
}

/// W6: WatchList (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`): ADDED for every
/// object, then the `k8s.io/initial-events-end` BOOKMARK - at once for RV=0 (at the cache RV),
/// for RV="" once the cache reaches the upstream's current RV (a write of the type releases
/// it) -, then live events; without allowWatchBookmarks no bookmark; an RV the cache has not
/// reached holds the headers 3 s, then 200 with one ERROR event carrying the 504.
#[tokio::test]
async fn w6_watchlist_initial_events_and_end_bookmark() {
    let env = fixtures_env().await;
    let future = env.sim.current_rv() + 1000;
    let explicit = spawn_watch(
        &env,
        replace_rv(
            &raw::fixture_request("watchlist-widgets-rv-explicit-cache-behind").1,
            4730,
            future,
        ),
        Duration::from_secs(8),
    );
    // RV=0: ADDED, then the end bookmark at the type's RV, at once.
    for (name, group, res) in [
        ("watchlist-cm-ns-b-rv0", "", "configmaps"),
        ("watchlist-widgets-rv0", WIDGET_GROUP, "widgets"),
    ] {
        let (_, path) = raw::fixture_request(name);
        let r = send(&env, &with_param(&path, "timeoutSeconds=1")).await;
        assert_watch_response(&r, name);
        assert_eq!(
            sorted_lines(&norm(&r.text())),
            sorted_lines(&norm(&recorded(name).body)),
            "{name}"
        );
        let lines = r.lines();
        let end = lines.last().unwrap();
        assert_eq!(end["type"], "BOOKMARK", "{name}: the bookmark comes last");
        assert_eq!(
            end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        assert_eq!(rv_of(&end["object"]), cache_rv(&env, group, res), "{name}");
        let at = r.chunks.last().unwrap().0;
        assert!(
            at < Duration::from_millis(500),
            "{name}: bookmark after {at:?}"
        );
    }
    // Without allowWatchBookmarks: initial events only.
    let name = "watchlist-cm-ns-b-without-bookmarks";
    let (_, path) = raw::fixture_request(name);
    let r = send(&env, &with_param(&path, "timeoutSeconds=1")).await;
    assert_eq!(
        sorted_lines(&norm(&r.text())),
        sorted_lines(&norm(&recorded(name).body))
    );
    // RV="": the end bookmark promises a state no older than the upstream's when the watch
    // began (W6b). On a type whose cache has reached the upstream's revision (the last write
    // was a widget) kcache answers at once, the bookmark at that revision.
    let released_by = create_widget(&env, "fixtures-b", "w-tmp-b", json!({}));
    env.settle(WIDGET_GROUP, "widgets").await;
    let (_, rv_empty) = raw::fixture_request("watchlist-widgets-rv-empty-unblocked-by-write");
    let r = send(&env, &with_param(&rv_empty, "timeoutSeconds=1")).await;
    assert_watch_response(&r, "RV=\"\" WatchList");
    assert_from_cache(&r, "RV=\"\" WatchList of a type at the upstream's revision");
    let lines = r.lines();
    assert_eq!(lines.len(), 4, "{}", r.text());
    assert_eq!(lines[3]["type"], "BOOKMARK");
    assert_eq!(
        lines[3]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert!(rv_of(&lines[3]["object"]) >= released_by);
    assert!(r.chunks.last().unwrap().0 < Duration::from_millis(500));
    // On a type kcache cannot prove fresh (another type's write moved the upstream's revision)
    // the upstream answers it, bookmark and all: kcache never sends one below that revision.
    create_cm(&env, "fixtures-b", "moves-global", json!({}));
    let global = env.sim.current_rv();
    found_quiet(&env, WIDGETS).await;
    let r = send(&env, &with_param(&rv_empty, "timeoutSeconds=1")).await;
    assert_eq!(r.status, 200);
    assert_forwarded(&r, "RV=\"\" WatchList of a quiet type");
    for l in r.lines().iter().filter(|l| l["type"] == "BOOKMARK") {
        assert!(rv_of(&l["object"]) >= global, "{}", r.text());
    }
    // An explicit RV the cache has not reached: headers held 3 s, then the 504 as an event.
    let r = explicit.await.unwrap();
    assert_watch_response(&r, "explicit future RV");
    // The 3 s wait is the behaviour: at least that, and (generously) not hanging.
    assert!(
        r.head_after >= Duration::from_millis(2950) && r.head_after < Duration::from_secs(10),
        "headers held {:?}",
        r.head_after
    );
    assert!(r.clean_end);
    let want = recorded("watchlist-widgets-rv-explicit-cache-behind")
        .body
        .replace("4730", &future.to_string());
    assert_eq!(norm(&r.text()), norm(&want));
}

/// A consistent read of a quiet type (one the upstream's later writes of other types put
/// behind the upstream's revision) waits in vain and is forwarded, and kcache remembers the type
/// as unprovable at its current RV.
async fn found_quiet(env: &Env, collection: &str) {
    let r = send(env, collection).await;
    assert_eq!(r.status, 200, "{collection}: {}", r.text());
    assert!(!from_cache(&r), "{collection}: forwarded");
}

/// W6b and W7 (docs/semantics.md): on a type nobody writes, the recorded v1.28 apiserver never
/// sent the end bookmark of an RV="" WatchList or of a reflector-style RV-unset watch (none in
/// 90 s; only a write of the type released it); v1.34 sends it at once, at etcd's revision.
/// kcache cannot prove such a type current, so a bookmark from its cache would promise a state
/// it cannot vouch for: it passes both watches to the upstream, whose stream the client gets,
/// and answers at once (no probe, no wait) once a read of the type has been found unprovable.
#[tokio::test]
async fn w6_w7_rv_unset_watch_of_a_quiet_type_is_the_upstreams() {
    let env = fixtures_env().await;
    // Another type's write: the upstream's global RV is ahead of the widget cache, as recorded.
    create_cm(&env, "fixtures-b", "moves-global", json!({}));
    let global = env.sim.current_rv();
    found_quiet(&env, WIDGETS).await;
    let names = [
        "watchlist-widgets-rv-empty",
        "watch-widgets-rv-unset-bookmarks",
    ];
    let watches = names.map(|name| {
        let (_, path) = raw::fixture_request(name);
        spawn_watch(
            &env,
            with_param(&path, "timeoutSeconds=2"),
            Duration::from_secs(6),
        )
    });
    for (name, w) in names.into_iter().zip(watches) {
        let r = w.await.unwrap();
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        assert_forwarded(&r, name);
        assert!(
            r.head_after < Duration::from_millis(500),
            "{name}: passed through at once, after {:?}",
            r.head_after
        );
        let initial: Vec<String> = r.text().lines().take(3).map(String::from).collect();
        assert_eq!(
            sorted_lines(&norm(&initial.join("\n"))),
            sorted_lines(&norm(
                &recorded(name)
                    .body
                    .lines()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
            "{name}: the initial events"
        );
        for l in r.lines().iter().filter(|l| l["type"] == "BOOKMARK") {
            assert!(rv_of(&l["object"]) >= global, "{name}: {}", r.text());
        }
    }
}

/// W7: a classic watch with RV unset or 0 gets ADDED for every object first (in any order)
/// and, with allowWatchBookmarks, the initial-events-end bookmark - at once for RV=0 and, on a
/// type the latest write touched, for RV unset too.
#[tokio::test]
async fn w7_rv_unset_or_0_watch_gets_initial_events() {
    let env = pre_patch_env().await;
    set_cm01(&env, true);
    env.settle("", "configmaps").await;
    let name = "watch-cm-ns-a-rv-unset-timeout3";
    let (_, path) = raw::fixture_request(name);
    let r = send(&env, &path.replace("timeoutSeconds=3", "timeoutSeconds=1")).await;
    assert_watch_response(&r, name);
    assert!(r.clean_end);
    assert_eq!(
        sorted_lines(&norm(&r.text())),
        sorted_lines(&norm(&recorded(name).body))
    );
    let name = "watch-widgets-rv0-bookmarks";
    let (_, path) = raw::fixture_request(name);
    let r = send(&env, &with_param(&path, "timeoutSeconds=1")).await;
    assert_watch_response(&r, name);
    assert_eq!(
        sorted_lines(&norm(&r.text())),
        sorted_lines(&norm(&recorded(name).body))
    );
    assert_eq!(r.lines().last().unwrap()["type"], "BOOKMARK");
    // RV unset on the type written last: the end bookmark at once, at the upstream's RV.
    let r = send(
        &env,
        &format!("{CMS_A}?allowWatchBookmarks=true&watch=1&timeoutSeconds=1"),
    )
    .await;
    let lines = r.lines();
    assert_eq!(lines.len(), 26, "{}", r.text());
    assert!(lines[..25].iter().all(|l| l["type"] == "ADDED"));
    let end = &lines[25];
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(rv_of(&end["object"]), env.sim.current_rv());
    assert!(r.chunks.last().unwrap().0 < Duration::from_millis(500));
}
