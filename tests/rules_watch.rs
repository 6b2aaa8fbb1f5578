//! Rule-by-rule conformance of kcache's WATCH with kube-apiserver v1.28 and v1.34 (W1–W7 of
//! docs/semantics.md), once per upstream profile: streams kcache serves from its cache, compared
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
use kcache_sim::Profile;
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
/// Over the test's transport (see `per_profile_and_transport!`).
fn spawn_watch(env: &Env, path: String, max: Duration) -> JoinHandle<Resp> {
    let addr: SocketAddr = env.kcache.addr;
    let transport = raw::transport();
    tokio::spawn(async move { raw::get_over(transport, addr, &path, &[], max).await })
}

/// The recorder's writes behind `watch-cm-ns-a-from-list-rv`: create, label, patch, relabel
/// (leaves app=web), relabel another (enters app=web), delete both.
fn replay_recorded_writes(env: &Env) {
    for line in fixture("watch-cm-ns-a-from-list-rv.json").lines() {
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
    // HTTP/2 frames the body itself, and has no such header.
    let framing = (!r.http2).then_some("chunked");
    assert_eq!(r.header("transfer-encoding"), framing, "{what}");
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

/// A recorded one-bookmark stream with the bookmark's resourceVersion set to `rv`.
fn with_bookmark_rv(recorded: &str, rv: u64) -> String {
    let ev: Value = serde_json::from_str(recorded.lines().next().unwrap()).unwrap();
    let at = ev["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap();
    recorded.replace(
        &format!("\"resourceVersion\":\"{at}\""),
        &format!("\"resourceVersion\":\"{rv}\""),
    )
}

/// The stream compared with the recording: resourceVersions as offsets from `base` (ours) and
/// from the recording's list RV (v1.28, whose RVs are as dense as the sim's), or as ranks
/// (v1.34, whose cluster had other writers: the order of RVs is what a client relies on).
fn same_stream(ours: &str, base: u64, name: &str) {
    let recorded = fixture(name);
    match profile() {
        Profile::V1_28 => assert_eq!(
            raw::normalize(ours, Some(base)),
            raw::normalize(&recorded, Some(3909)),
            "{name}"
        ),
        Profile::V1_34 => assert_eq!(
            raw::normalize(&raw::rank_rvs(ours), Some(u64::MAX)),
            raw::normalize(&raw::rank_rvs(&recorded), Some(u64::MAX)),
            "{name}"
        ),
    }
}

per_profile_and_transport!(w1_w2_stream_format_selector_transitions_legacy_path);

/// W1 + W2: the recorded watches replayed. `{"type":T,"object":O}\n` per event, one chunk each,
/// objects complete with kind/apiVersion, headers before any event, a clean end at
/// timeoutSeconds; a selector watch sees ADDED on entering, DELETED with the previous object
/// but the new RV on leaving, the unfiltered one MODIFIED for both; real deletes carry the
/// deletion RV. The legacy `/watch/` path and a single-object watch (field selector or
/// `/watch/…/NAME`) give the same streams, also when replayed from kcache's history.
/// (`…/NAME?watch=1` is no watch: a v1.34.9 apiserver answers it with the object.)
async fn w1_w2_stream_format_selector_transitions_legacy_path(p: Profile) {
    // The apiserver's 60 s bookmark interval: the recordings (16 s) hold no bookmark.
    let env = common::EnvBuilder::fixtures().start().await;
    assert_eq!(env.sim.profile(), p);
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
            format!("/api/v1/watch/namespaces/fixtures-a/configmaps/watch-new-1?resourceVersion={base}&timeoutSeconds=1"),
            "watch-cm-ns-a-single-object-field-name.json",
        ),
    ] {
        let r = send(&env, &path).await;
        assert_watch_response(&r, &path);
        assert!(r.clean_end);
        same_stream(&r.text(), base, fixture);
    }
}

per_profile_and_transport!(w2_selector_transitions_match_upstream_streams);

/// W2 for every kind of selector: kcache's streams are byte-identical to the upstream's own
/// for the same requests (label and field selectors, set-based and negated, namespaces, CRs)
/// while objects enter, leave, change inside and are deleted.
async fn w2_selector_transitions_match_upstream_streams(p: Profile) {
    let env = common::EnvBuilder::fixtures().start().await;
    assert_eq!(env.sim.profile(), p);
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

per_profile_and_transport!(w3_too_old_rv_is_200_one_error_then_eof);

/// W3: a watch from an RV older than the retained history: HTTP 200, exactly one ERROR event
/// carrying the 410 Expired Status ("too old resource version: N (M)", M = the oldest RV still
/// servable), then the stream ends; also through the legacy path.
async fn w3_too_old_rv_is_200_one_error_then_eof(p: Profile) {
    let mut b = builder();
    b.config.cache.history_max_events = 4;
    let env = b.start().await;
    // The v1.34 recordings of ConfigMap watches at RV 1 replay history instead (that server's
    // ConfigMap watch cache still held RV 1: DIFF-1.28.md section 3); its widget ones are the
    // 410, as at v1.28.
    let (names, collection) = match p {
        Profile::V1_28 => {
            for i in 0..6 {
                create_cm(&env, "fixtures-b", &format!("churn-{i}"), json!({}));
            }
            env.settle("", "configmaps").await;
            (
                [
                    "err-watch-cm-rv1-too-old",
                    "err-watch-legacy-path-rv1-too-old",
                ],
                CMS_B.to_string(),
            )
        }
        Profile::V1_34 => {
            for i in 0..6 {
                create_widget(&env, "fixtures-b", &format!("churn-{i}"), json!({}));
            }
            env.settle(WIDGET_GROUP, "widgets").await;
            (
                [
                    "err-watch-widgets-rv1-too-old",
                    "err-watch-legacy-path-widgets-rv1-too-old",
                ],
                format!("/apis/{WIDGET_GROUP}/v1/namespaces/fixtures-b/widgets"),
            )
        }
    };
    let oldest_of = |name: &str, text: &str| -> u64 {
        text.split("too old resource version: 1 (")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {text}"))
    };
    let mut oldest = None;
    for name in names {
        let (_, path) = fixture_request(name);
        let r = send(&env, &path).await;
        assert_watch_response(&r, name);
        assert!(r.clean_end, "{name}: the stream ends after the ERROR");
        assert!(r.total < Duration::from_secs(1), "{name}: at once");
        let text = r.text();
        let m = oldest_of(name, &text);
        let rec = recorded(name).body().to_string();
        let rec_m = oldest_of(name, &rec);
        assert_eq!(
            text,
            rec.replace(&format!("({rec_m})"), &format!("({m})")),
            "{name}"
        );
        assert_eq!(r.chunks.len(), 1);
        oldest = Some(m);
    }
    // M is the oldest RV a watch may start from; one less is too old.
    let m = oldest.unwrap();
    let ok = send(
        &env,
        &format!("{collection}?watch=1&resourceVersion={m}&timeoutSeconds=1"),
    )
    .await;
    assert_eq!(ok.status, 200);
    assert!(!ok.text().contains("ERROR"), "{}", ok.text());
    assert!(ok.lines().iter().any(|l| l["type"] == "ADDED"));
    let old = send(
        &env,
        &format!(
            "{collection}?watch=1&resourceVersion={}&timeoutSeconds=1",
            m - 1
        ),
    )
    .await;
    assert!(
        old.text()
            .contains(&format!("too old resource version: {} ({m})", m - 1)),
        "{}",
        old.text()
    );
}

per_profile_and_transport!(w4_timeout_ends_cleanly_future_rv_silent);

/// W4: `timeoutSeconds` ends the stream cleanly with no final event (0 bytes when nothing
/// happened; headers at once); a future RV on a plain watch is accepted silently, and events
/// come once the store passes it.
async fn w4_timeout_ends_cleanly_future_rv_silent(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    let cm_rv = cache_rv(&env, "", "configmaps");
    let (_, timeout1) = fixture_request("watch-cm-ns-a-timeout1-bookmarks");
    let timeout1 = spawn_watch(
        &env,
        replace_rv(
            &timeout1,
            request_rv("watch-cm-ns-a-timeout1-bookmarks"),
            cm_rv,
        ),
        Duration::from_secs(5),
    );
    let (_, future) = fixture_request("watch-widgets-rv-future");
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

per_profile_and_transport!(w5_periodic_bookmarks_only_when_moved_and_asked);

/// W5: with `allowWatchBookmarks`, a periodic BOOKMARK (built-in form with
/// `creationTimestamp:null` up to v1.33, without from v1.34; CR form with sorted keys) carrying
/// the RV of the type's last event (v1.28; not the global RV) or of the cache (v1.34), once the
/// type moved past the watch's start RV, even by writes the watch does not see. None without
/// the parameter; none on a quiet type at v1.28, a heartbeat at v1.34.
async fn w5_periodic_bookmarks_only_when_moved_and_asked(p: Profile) {
    let env = fixtures_env().await;
    let cm_start = cache_rv(&env, "", "configmaps");
    let w_start = cache_rv(&env, WIDGET_GROUP, "widgets");
    let pod_start = cache_rv(&env, "", "pods");
    let opened = [
        ("configmaps", watches_of(&env, "configmaps") + 2),
        ("widgets", watches_of(&env, "widgets") + 1),
        ("pods", watches_of(&env, "pods") + 1),
    ];
    let (_, cm_path) = fixture_request("watch-cm-ns-b-periodic-bookmark");
    let cm = spawn_watch(
        &env,
        with_param(
            &replace_rv(
                &cm_path,
                request_rv("watch-cm-ns-b-periodic-bookmark"),
                cm_start,
            ),
            "timeoutSeconds=4",
        ),
        Duration::from_secs(7),
    );
    let cm_no_param = spawn_watch(
        &env,
        format!("{CMS_B}?resourceVersion={cm_start}&watch=1&timeoutSeconds=3"),
        Duration::from_secs(7),
    );
    let (_, w_path) = fixture_request("watch-widgets-label-periodic-bookmark");
    let widgets = spawn_watch(
        &env,
        with_param(
            &replace_rv(
                &w_path,
                request_rv("watch-widgets-label-periodic-bookmark"),
                w_start,
            ),
            "timeoutSeconds=4",
        ),
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
    let global = env.sim.current_rv();
    // v1.28: at the type's last event. v1.34's bookmarks carry its watch cache's revision,
    // which etcd's progress notifications move past the type's events: kcache's are at its
    // cache's RV, which the upstream's bookmarks move likewise (the form is the same).
    let bookmark_rv_ok = |rv: u64, type_rv: u64| match p {
        Profile::V1_28 => rv == type_rv,
        Profile::V1_34 => (type_rv..=global).contains(&rv),
    };
    let recorded_cm = fixture("watch-cm-ns-b-periodic-bookmark.json");
    for l in cm.text().lines() {
        let rv = rv_of(&serde_json::from_str::<Value>(l).unwrap()["object"]);
        assert!(bookmark_rv_ok(rv, cm_rv), "bookmark at {rv}: {l}");
        assert_eq!(format!("{l}\n"), with_bookmark_rv(&recorded_cm, rv));
    }
    // Periodic, not at once: the 1 s interval. (That one comes at all is checked above.)
    let first = cm.chunks[0].0;
    assert!(
        first >= Duration::from_millis(800),
        "first bookmark after {first:?} (interval 1 s)"
    );
    let widgets = widgets.await.unwrap();
    assert!(!widgets.text().is_empty(), "CR bookmark");
    let recorded_w = fixture("watch-widgets-label-periodic-bookmark.json");
    for l in widgets.text().lines() {
        let rv = rv_of(&serde_json::from_str::<Value>(l).unwrap()["object"]);
        assert!(bookmark_rv_ok(rv, w_rv), "bookmark at {rv}: {l}");
        assert_eq!(format!("{l}\n"), with_bookmark_rv(&recorded_w, rv));
    }
    let quiet = quiet.await.unwrap();
    let mut silent = vec![(cm_no_param.await.unwrap(), "without allowWatchBookmarks")];
    match p {
        Profile::V1_28 => silent.push((quiet, "quiet type")),
        // v1.34's periodic bookmark is a heartbeat: a type without events gets one too, at the
        // cache's revision once that moved past the watch's start (the recorded
        // `watch-widgets-no-bookmark-90s-cache-behind`), in the built-in form.
        Profile::V1_34 => {
            assert_watch_response(&quiet, "quiet type");
            assert!(!quiet.text().is_empty(), "quiet type: a heartbeat bookmark");
            for l in quiet.text().lines() {
                let rv = rv_of(&serde_json::from_str::<Value>(l).unwrap()["object"]);
                assert!(rv > pod_start && rv <= global, "heartbeat at {rv}");
                assert_eq!(
                    l,
                    format!(
                        r#"{{"type":"BOOKMARK","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}}}}}}"#
                    )
                );
            }
        }
    }
    for (r, what) in silent {
        assert_watch_response(&r, what);
        assert_eq!(r.text(), "", "{what}: no bookmark");
        assert!(
            r.clean_end && r.total >= Duration::from_millis(2900),
            "{what}"
        );
    }
}

per_profile_and_transport!(w6_watchlist_initial_events_and_end_bookmark);

/// W6: WatchList (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`): ADDED for every
/// object, then the `k8s.io/initial-events-end` BOOKMARK - at once for RV=0 (at the cache RV),
/// for RV="" once the cache reaches the upstream's current RV (a write of the type releases
/// it) -, then live events; without allowWatchBookmarks no bookmark; an RV the cache has not
/// reached holds the headers 3 s, then 200 with one ERROR event carrying the 504.
async fn w6_watchlist_initial_events_and_end_bookmark(p: Profile) {
    let env = fixtures_env().await;
    let future = env.sim.current_rv() + 1000;
    // v1.34 answers an explicit RV its cache reaches at once (the recording's is etcd's
    // current revision: ADDED x3 and the end bookmark, no wait). In front of it kcache's cache
    // of the quiet type reaches the upstream's revision with the upstream's next bookmark.
    let explicit_current = (p == Profile::V1_34).then(|| {
        spawn_watch(
            &env,
            with_param(
                &replace_rv(
                    &fixture_request("watchlist-widgets-rv-explicit-cache-behind").1,
                    request_rv("watchlist-widgets-rv-explicit-cache-behind"),
                    env.sim.current_rv(),
                ),
                "timeoutSeconds=2",
            ),
            Duration::from_secs(8),
        )
    });
    let explicit = spawn_watch(
        &env,
        replace_rv(
            &fixture_request("watchlist-widgets-rv-explicit-cache-behind").1,
            request_rv("watchlist-widgets-rv-explicit-cache-behind"),
            future,
        ),
        Duration::from_secs(8),
    );
    // RV=0: ADDED, then the end bookmark at the type's RV, at once.
    for (name, group, res) in [
        ("watchlist-cm-ns-b-rv0", "", "configmaps"),
        ("watchlist-widgets-rv0", WIDGET_GROUP, "widgets"),
    ] {
        let (_, path) = fixture_request(name);
        let r = send(&env, &with_param(&path, "timeoutSeconds=1")).await;
        assert_watch_response(&r, name);
        assert_eq!(
            sorted_lines(&norm(&r.text())),
            sorted_lines(&norm(&without_catch_up_bookmark(recorded(name).body()))),
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
    let (_, path) = fixture_request(name);
    let r = send(&env, &with_param(&path, "timeoutSeconds=1")).await;
    assert_eq!(
        sorted_lines(&norm(&r.text())),
        sorted_lines(&norm(recorded(name).body()))
    );
    // RV="": the end bookmark promises a state no older than the upstream's when the watch
    // began (W6b). On a type whose cache has reached the upstream's revision (the last write
    // was a widget) kcache answers at once, the bookmark at that revision.
    let released_by = create_widget(&env, "fixtures-b", "w-tmp-b", json!({}));
    env.settle(WIDGET_GROUP, "widgets").await;
    let (_, rv_empty) = fixture_request("watchlist-widgets-rv-empty-unblocked-by-write");
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
    // (v1.34 too: its periodic bookmarks to a watch that has seen an event of its type, as
    // kcache's has seen w-tmp-b, carry that event's RV, not its revision.)
    create_cm(&env, "fixtures-b", "moves-global", json!({}));
    let global = env.sim.current_rv();
    found_quiet(&env, WIDGETS).await;
    let r = send(&env, &with_param(&rv_empty, "timeoutSeconds=1")).await;
    assert_eq!(r.status, 200);
    assert_forwarded(&r, "RV=\"\" WatchList of a quiet type");
    for l in r.lines().iter().filter(|l| l["type"] == "BOOKMARK") {
        assert!(rv_of(&l["object"]) >= global, "{}", r.text());
    }
    if let Some(w) = explicit_current {
        let r = w.await.unwrap();
        assert_watch_response(&r, "explicit current RV");
        let name = "watchlist-widgets-rv-explicit-cache-behind";
        assert!(
            r.head_after < Duration::from_millis(2900),
            "before the 3 s limit: {:?}",
            r.head_after
        );
        assert!(r.text().lines().count() >= 4, "{}", r.text());
        let first4 = r.text().lines().take(4).collect::<Vec<_>>().join("\n");
        assert_eq!(
            sorted_lines(&norm(&first4)),
            sorted_lines(&norm(recorded(name).body())),
            "{name}"
        );
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
    // The v1.28 recording of it; v1.34's was answered (above), the event is the same one.
    let want = raw::fixture_in(
        kcache_sim::Profile::V1_28,
        "watchlist-widgets-rv-explicit-cache-behind.json",
    )
    .replace("4730", &future.to_string());
    assert_eq!(norm(&r.text()), norm(&want));
}

/// Wait until kcache's cache of a type has reached `rv` (on v1.34 the upstream's bookmarks
/// carry its revision to quiet types).
async fn wait_cache(env: &Env, group: &str, resource: &str, rv: u64) {
    common::wait_until(&format!("{resource} cache at {rv}"), || {
        let at = cache_rv(env, group, resource);
        async move { at >= rv }
    })
    .await;
}

/// A recorded WatchList stream without v1.34's plain BOOKMARK after the initial-events-end
/// one (its watch cache catching up with etcd's revision: DIFF-1.28.md item 4), which kcache
/// does not send: a plain bookmark only moves the RV a client resumes from, and the one it
/// would resume from without it is valid.
fn without_catch_up_bookmark(body: &str) -> String {
    let mut out = String::new();
    let mut ended = false;
    for l in body.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let plain_bookmark =
            v["type"] == "BOOKMARK" && v["object"]["metadata"].get("annotations").is_none();
        if !(ended && plain_bookmark) {
            out.push_str(l);
            out.push('\n');
        }
        ended |= v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true";
    }
    out
}

/// A consistent read of a quiet type (one the upstream's later writes of other types put
/// behind the upstream's revision) is forwarded, and kcache goes on to find the type quiet.
async fn found_quiet(env: &Env, collection: &str) {
    let r = send(env, collection).await;
    assert_eq!(r.status, 200, "{collection}: {}", r.text());
    assert!(!from_cache(&r), "{collection}: forwarded");
}

per_profile_and_transport!(w6_w7_rv_unset_watch_of_a_quiet_type_is_the_upstreams);

/// W6b and W7 (docs/semantics.md): on a type nobody writes, the recorded v1.28 apiserver never
/// sent the end bookmark of an RV="" WatchList or of a reflector-style RV-unset watch (none in
/// 90 s; only a write of the type released it); v1.34 sends it at once, at etcd's revision.
/// kcache cannot prove such a type current, so a bookmark from its cache would promise a state
/// it cannot vouch for: it passes both watches to the upstream, whose stream the client gets,
/// and answers at once (no probe, no wait) once the type has been found quiet.
async fn w6_w7_rv_unset_watch_of_a_quiet_type_is_the_upstreams(p: Profile) {
    let env = fixtures_env().await;
    // Another type's write: the upstream's global RV is ahead of the widget cache, as recorded.
    create_cm(&env, "fixtures-b", "moves-global", json!({}));
    let global = env.sim.current_rv();
    match p {
        Profile::V1_28 => found_quiet(&env, WIDGETS).await,
        // v1.34's bookmarks are a heartbeat at its revision: kcache's cache of the quiet type
        // reaches the upstream's revision with the next one, and kcache can prove it current.
        Profile::V1_34 => wait_cache(&env, WIDGET_GROUP, "widgets", global).await,
    }
    let names = [
        "watchlist-widgets-rv-empty",
        "watch-widgets-rv-unset-bookmarks",
    ];
    let watches = names.map(|name| {
        let (_, path) = fixture_request(name);
        spawn_watch(
            &env,
            with_param(&path, "timeoutSeconds=2"),
            Duration::from_secs(6),
        )
    });
    for (name, w) in names.into_iter().zip(watches) {
        let r = w.await.unwrap();
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        match p {
            Profile::V1_28 => assert_forwarded(&r, name),
            Profile::V1_34 => {
                // From the cache, as v1.34 answers: the initial events in key order and the
                // end bookmark at once (at kcache's cache RV, the upstream's revision).
                assert_from_cache(&r, name);
                let first4 = r.text().lines().take(4).collect::<Vec<_>>().join("\n");
                let rec4 = recorded(name)
                    .body()
                    .lines()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join("\n");
                assert_eq!(norm(&first4), norm(&rec4), "{name}");
                let mut lines = 0;
                let at = r.chunks.iter().find_map(|(at, data)| {
                    lines += data.iter().filter(|b| **b == b'\n').count();
                    (lines >= 4).then_some(*at)
                });
                assert!(
                    at.is_some_and(|at| at < Duration::from_millis(500)),
                    "{name}: the end bookmark at once, not after {at:?}"
                );
            }
        }
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
                    .body()
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

per_profile_and_transport!(w7_rv_unset_or_0_watch_gets_initial_events);

/// W7: a classic watch with RV unset or 0 gets ADDED for every object first (in any order)
/// and, with allowWatchBookmarks, the initial-events-end bookmark - at once for RV=0 and, on a
/// type the latest write touched, for RV unset too.
async fn w7_rv_unset_or_0_watch_gets_initial_events(p: Profile) {
    let env = pre_patch_env().await;
    assert_eq!(env.sim.profile(), p);
    set_cm01(&env, true);
    env.settle("", "configmaps").await;
    let name = "watch-cm-ns-a-rv-unset-timeout3";
    let (_, path) = fixture_request(name);
    let r = send(&env, &path.replace("timeoutSeconds=3", "timeoutSeconds=1")).await;
    assert_watch_response(&r, name);
    assert!(r.clean_end);
    assert_eq!(
        sorted_lines(&norm(&r.text())),
        sorted_lines(&norm(recorded(name).body()))
    );
    let name = "watch-widgets-rv0-bookmarks";
    let (_, path) = fixture_request(name);
    let r = send(&env, &with_param(&path, "timeoutSeconds=1")).await;
    assert_watch_response(&r, name);
    assert_eq!(
        sorted_lines(&norm(&r.text())),
        sorted_lines(&norm(recorded(name).body()))
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
