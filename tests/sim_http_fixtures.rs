//! LIST, GET, error and discovery answers compared byte for byte with the recordings of a
//! real kube-apiserver, for each upstream profile with its own recordings (v1.28, v1.34;
//! server-assigned uid/resourceVersion/creationTimestamp/continue values normalised).

#[path = "sim_common/mod.rs"]
mod common;

use common::*;
use kcache_sim::Profile;
use serde_json::{json, Value};
use std::time::Duration;

/// Request the fixture's own request line and compare the normalised body, status and (for a
/// paged list) the continue token's start key with the sim's profile's recording.
async fn check(sim: &kcache_sim::Sim, name: &str) {
    let p = sim.profile();
    let (method, path) = fixture_request_in(p, name);
    let resp = request(
        sim.addr(),
        &method,
        &path,
        &[],
        b"",
        Duration::from_secs(10),
    )
    .await;
    let want = fixture_in(p, &format!("{name}.json"));
    assert_eq!(
        normalize(&resp.text(), None),
        normalize(&want, None),
        "{p} fixture {name} ({method} {path})"
    );
    assert_eq!(
        resp.status,
        fixture_status_in(p, name),
        "{p} status of {name}"
    );
    let token = |body: &str| {
        serde_json::from_str::<Value>(body).ok().and_then(|v| {
            v.pointer("/metadata/continue")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(|t| decode_token(t)["start"].clone())
        })
    };
    assert_eq!(
        token(&resp.text()),
        token(&want),
        "{p} continue start key of {name}"
    );
}

per_profile!(lists_match_recorded_bytes);

async fn lists_match_recorded_bytes(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    for name in [
        "list-cm-ns-a",
        "list-cm-ns-b",
        "list-cm-ns-b-watch-0",
        "list-cm-ns-b-watch-false",
        "list-cm-missing-namespace-empty",
        "list-cm-ns-a-field-name",
        "list-cm-ns-a-field-name-neq-and-label",
        "list-cm-ns-a-field-namespace-other",
        "list-cm-ns-a-label-app-web",
        "list-cm-ns-a-label-not-tier",
        "list-cm-ns-a-label-tier-in-front",
        "list-cm-ns-a-label-app-web-tier-notin-front",
        "list-cm-ns-a-label-app-web-limit3",
        "list-cm-ns-a-limit10-page1",
        "list-pods-ns-a",
        "list-pods-ns-a-field-nodename-node1",
        "list-pods-ns-a-field-nodename-empty",
        "list-pods-ns-a-field-phase-pending",
        "list-pods-ns-a-field-phase-running",
        "list-pods-ns-a-field-schedulername",
        "list-widgets-ns-a",
        "list-widgets-ns-a-rv0",
        "list-widgets-ns-a-field-name",
        "list-widgets-ns-a-label-app-web",
        "list-widgets-ns-a-limit2",
        "list-widgets-ns-c-empty",
        "list-widgets-ns-c-empty-rv0",
        "list-widgets-all",
        "list-cm-all-field-namespace",
    ] {
        check(&sim, name).await;
    }
    // Variants recorded after cm-01 was patched: they must equal the plain list.
    let plain = get(&sim, "/api/v1/namespaces/fixtures-a/configmaps")
        .await
        .text();
    for name in [
        "list-cm-ns-a-trailing-slash",
        "list-cm-ns-a-limit-negative-ignored",
        "list-cm-ns-a-allowwatchbookmarks-maybe-ignored",
    ] {
        let (_, path) = fixture_request_in(p, name);
        assert_eq!(get(&sim, &path).await.text(), plain, "{name}");
    }
    // Pretty printing for ?pretty=true (indent 2, no trailing newline).
    let resp = get(&sim, "/api/v1/namespaces/fixtures-b/configmaps?pretty=true").await;
    let want = fixture_in(p, "list-cm-ns-b-pretty-param.json");
    let compact =
        |s: &str| serde_json::to_string(&serde_json::from_str::<Value>(s).unwrap()).unwrap();
    assert_eq!(
        normalize(&compact(&resp.text()), None),
        normalize(&compact(&want), None)
    );
    assert!(resp
        .text()
        .starts_with("{\n  \"kind\": \"ConfigMapList\",\n  \"apiVersion\""));
    assert!(!resp.text().ends_with('\n'));
}

/// The start key of the continue token in a recorded list body.
fn recorded_start(p: Profile, name: &str) -> Value {
    let body: Value = serde_json::from_str(&fixture_in(p, &format!("{name}.json"))).unwrap();
    decode_token(body["metadata"]["continue"].as_str().unwrap())["start"].clone()
}

per_profile!(paging_tokens_and_list_resource_versions);

async fn paging_tokens_and_list_resource_versions(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    let fixture = |name: &str| fixture_in(p, name);
    let rv = sim.current_rv();
    // Namespaced pages: start key relative to the namespace (v1.34: with a leading `/`), all
    // pages at the first page's RV.
    let p1 = get(&sim, "/api/v1/namespaces/fixtures-a/configmaps?limit=10")
        .await
        .json();
    let t1 = p1["metadata"]["continue"].as_str().unwrap().to_string();
    let start = recorded_start(p, "list-cm-ns-a-limit10-page1");
    assert_eq!(
        start,
        match p {
            Profile::V1_28 => "cm-10\u{0}",
            Profile::V1_34 => "/cm-10\u{0}",
        }
    );
    assert_eq!(
        decode_token(&t1),
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    );
    assert_eq!(p1["metadata"]["remainingItemCount"], 15);
    assert_eq!(p1["metadata"]["resourceVersion"], rv.to_string());
    // A write between pages does not show up (consistent snapshot).
    sim.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "cm-99", "namespace": "fixtures-a"}}),
    )
    .unwrap();
    let p2 = get(
        &sim,
        &format!("/api/v1/namespaces/fixtures-a/configmaps?limit=10&continue={t1}"),
    )
    .await;
    assert_eq!(
        normalize(&p2.text(), None),
        normalize(&fixture("list-cm-ns-a-limit10-page2.json"), None)
    );
    let t2 = p2.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let p3 = get(
        &sim,
        &format!("/api/v1/namespaces/fixtures-a/configmaps?limit=10&continue={t2}"),
    )
    .await;
    assert_eq!(
        normalize(&p3.text(), None),
        normalize(&fixture("list-cm-ns-a-limit10-page3-last.json"), None)
    );
    assert_eq!(p3.json()["metadata"]["resourceVersion"], rv.to_string());
    // Cluster-wide: namespace/name keys.
    let all = get(&sim, "/api/v1/configmaps?limit=5").await.json();
    let tok = decode_token(all["metadata"]["continue"].as_str().unwrap());
    let lead = if p == Profile::V1_34 { "/" } else { "" };
    assert_eq!(tok["start"], format!("{lead}fixtures-a/cm-05\u{0}"));
    // The recording's cluster-wide token has the same form (its items differ: other clients).
    assert!(recorded_start(p, "list-cm-all-limit5-page1")
        .as_str()
        .unwrap()
        .starts_with(&format!("{lead}fixtures-a/cm-")));
    // Custom resources too.
    let w = get(
        &sim,
        "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets?limit=2",
    )
    .await
    .json();
    assert_eq!(
        decode_token(w["metadata"]["continue"].as_str().unwrap())["start"],
        recorded_start(p, "list-widgets-ns-a-limit2")
    );
    assert_eq!(all["metadata"]["remainingItemCount"], 24);
    // RV=0 ignores limit and reports the watch cache's RV: the type's last event RV in v1.28,
    // the store's revision in v1.34 (recorded: `list-widgets-ns-a-rv0` at 13831, the last
    // widget written at 13619); RV unset reports the global RV.
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
    let cached = get(&sim, "/api/v1/configmaps?limit=5&resourceVersion=0")
        .await
        .json();
    assert!(cached["metadata"].get("continue").is_none());
    assert_eq!(cached["items"].as_array().unwrap().len(), 29);
    let cm_rv = sim
        .list("", "configmaps")
        .iter()
        .map(|c| {
            c["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .max()
        .unwrap();
    assert_ne!(
        widget_rv,
        sim.current_rv(),
        "the widgets are not the last write"
    );
    let (cm_rv, widget_rv) = match p {
        Profile::V1_28 => (cm_rv, widget_rv),
        Profile::V1_34 => (sim.current_rv(), sim.current_rv()),
    };
    assert_eq!(cached["metadata"]["resourceVersion"], cm_rv.to_string());
    let w0 = get(
        &sim,
        "/apis/fixtures.example.com/v1/widgets?resourceVersion=0",
    )
    .await
    .json();
    assert_eq!(w0["metadata"]["resourceVersion"], widget_rv.to_string());
    let w = get(&sim, "/apis/fixtures.example.com/v1/widgets")
        .await
        .json();
    assert_eq!(
        w["metadata"]["resourceVersion"],
        sim.current_rv().to_string()
    );
}

/// A continue token with this start key and RV.
fn token(rv: u64, start: &str) -> String {
    use base64::Engine;
    let json = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

per_profile!(continue_start_keys_of_both_forms_are_accepted);

/// Both profiles take a start key with or without the leading `/` (the apiserver's
/// `DecodeContinue` adds a missing one) and refuse one that `path.Clean` would change.
async fn continue_start_keys_of_both_forms_are_accepted(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    let rv = sim.current_rv();
    let page = |start: &str| {
        format!(
            "/api/v1/namespaces/fixtures-a/configmaps?limit=10&continue={}",
            token(rv, start)
        )
    };
    let plain = get(&sim, &page("cm-10\u{0}")).await;
    let slashed = get(&sim, &page("/cm-10\u{0}")).await;
    assert_eq!(plain.status, 200);
    assert_eq!(
        normalize(&plain.text(), None),
        normalize(&fixture_in(p, "list-cm-ns-a-limit10-page2.json"), None)
    );
    assert_eq!(slashed.text(), plain.text());
    // Cluster-wide keys (namespace/name) likewise.
    let all = |start: &str| format!("/api/v1/configmaps?limit=3&continue={}", token(rv, start));
    let a = get(&sim, &all("fixtures-a/cm-24\u{0}")).await;
    let b = get(&sim, &all("/fixtures-a/cm-24\u{0}")).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.text(), b.text());
    let names: Vec<String> = a.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["cm-25", "b-cm-1", "b-cm-2"]);
    // Keys that path.Clean changes are refused, quoting the key as sent.
    for bad in [
        "../fixtures-b/b-cm-1\u{0}",
        "/../fixtures-b/b-cm-1\u{0}",
        "./cm-10\u{0}",
        "a/./cm-10\u{0}",
        "//cm-10\u{0}",
        "a//cm-10\u{0}",
        "cm-10/",
    ] {
        let r = get(&sim, &page(bad)).await;
        assert_eq!(r.status, 400, "{bad:?}");
        let status = r.json();
        assert_eq!(status["reason"], "BadRequest");
        assert_eq!(
            status["message"],
            format!("invalid continue token: continue key is not valid: {bad}"),
            "{bad:?}"
        );
    }
    // The recorded refusal of a token that is not base64.
    let (_, path) = fixture_request_in(p, "err-list-cm-continue-invalid");
    let r = get(&sim, &path).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.text(), fixture_in(p, "err-list-cm-continue-invalid.json"));
}

per_profile!(version_is_the_recorded_one);

/// `/version` is the profile's recorded document, byte for byte (indented, no newline).
async fn version_is_the_recorded_one(p: Profile) {
    let sim = kcache_sim::Sim::start(profile_cfg(p)).await.unwrap();
    assert_eq!(sim.profile(), p);
    let v = get(&sim, "/version").await;
    assert_eq!(v.status, 200);
    assert_eq!(v.header("content-type"), Some("application/json"));
    assert_eq!(v.text(), fixture_in(p, "discovery-version.json"));
    assert_eq!(v.json()["gitVersion"], p.git_version());
    assert!(v.json()["gitVersion"]
        .as_str()
        .unwrap()
        .starts_with(&format!("{}.", p.name())));
}

/// v1.28 reads these from etcd: 410 once compacted, an instant 500 for a future RV.
#[tokio::test]
async fn v1_28_exact_lists_come_from_history_and_expire() {
    let sim = seeded(fast_cfg()).await;
    let before = sim.current_rv();
    let mut cm = sim
        .get("", "configmaps", Some("fixtures-a"), "cm-01")
        .unwrap();
    cm["data"]["index"] = json!("patched");
    sim.update("", "configmaps", cm).unwrap();
    let q = format!("/api/v1/namespaces/fixtures-a/configmaps?resourceVersionMatch=Exact&resourceVersion={before}&fieldSelector=metadata.name%3Dcm-01");
    let old = get(&sim, &q).await.json();
    assert_eq!(old["metadata"]["resourceVersion"], before.to_string());
    assert_ne!(old["items"][0]["data"]["index"], "patched");
    // Exact before any object existed: empty list at that RV.
    let empty = get(
        &sim,
        "/api/v1/namespaces/fixtures-a/configmaps?resourceVersionMatch=Exact&resourceVersion=2",
    )
    .await
    .json();
    assert_eq!(empty["items"], json!([]));
    assert_eq!(empty["metadata"]["resourceVersion"], "2");
    // NotOlderThan + limit: current state at the current RV.
    let nt = get(&sim, &format!("/api/v1/namespaces/fixtures-a/configmaps?resourceVersionMatch=NotOlderThan&resourceVersion={before}&limit=2")).await.json();
    assert_eq!(
        nt["metadata"]["resourceVersion"],
        sim.current_rv().to_string()
    );
    // Future RV on the etcd path: immediate 500; on the cache path: wait then 504.
    let r = get(&sim, "/api/v1/namespaces/fixtures-a/configmaps?resourceVersionMatch=Exact&resourceVersion=99999999").await;
    assert_eq!(r.text(), fixture("err-list-cm-rvm-exact-future-rv.json"));
    let r = get(
        &sim,
        "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=99999999&limit=5",
    )
    .await;
    assert_eq!(r.text(), fixture("err-list-cm-rv-future-limit5.json"));
    for (path, name) in [
        ("/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=99999999", "err-list-cm-rv-future-no-rvm.json"),
        ("/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=99999999&resourceVersionMatch=NotOlderThan", "err-list-cm-rvm-notolderthan-future-rv.json"),
        ("/api/v1/namespaces/fixtures-a/configmaps/cm-01?resourceVersion=99999999", "err-get-cm-rv-future.json"),
    ] {
        let r = get(&sim, path).await;
        assert_eq!(r.status, 504);
        assert!(r.total >= Duration::from_millis(290), "waited {:?}", r.total);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(normalize(&r.text(), None), normalize(&fixture(name), None));
    }
    // Continue token, then compaction: 410 with an rv -1 token.
    let p1 = get(&sim, "/api/v1/namespaces/fixtures-a/configmaps?limit=10")
        .await
        .json();
    let t1 = p1["metadata"]["continue"].as_str().unwrap().to_string();
    sim.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "after", "namespace": "other"}}),
    )
    .unwrap();
    sim.compact();
    let r = get(
        &sim,
        &format!("/api/v1/namespaces/fixtures-a/configmaps?limit=10&continue={t1}"),
    )
    .await;
    assert_eq!(r.status, 410);
    assert_eq!(r.text(), fixture("err-list-cm-continue-expired-410.json"));
    let r = get(&sim, &format!("/api/v1/namespaces/fixtures-a/configmaps?resourceVersionMatch=Exact&resourceVersion={before}")).await;
    assert_eq!(
        r.text(),
        fixture("err-list-cm-rvm-exact-compacted-410.json")
    );
    let r = get(
        &sim,
        &format!("/api/v1/namespaces/fixtures-a/configmaps?resourceVersion={before}&limit=3"),
    )
    .await;
    assert_eq!(r.text(), fixture("err-list-cm-rv-compacted-limit-410.json"));
    // Without limit an old RV is fine (served as current state).
    let r = get(
        &sim,
        &format!("/api/v1/namespaces/fixtures-a/configmaps?resourceVersion={before}"),
    )
    .await;
    assert_eq!(r.status, 200);
    // The rv -1 token continues at the current state.
    let tok = r.json();
    assert!(tok["items"].as_array().unwrap().len() >= 25);
}

/// v1.34 serves Exact lists, `limit` with a resourceVersion and continuations from its watch
/// cache: an RV etcd compacted is still answered while the cache window holds it (the
/// `*-within-cache-window-200` recordings), a 410 only beyond it (the widget recordings), and
/// a future RV waits and is then a 504, as on the cache path.
#[tokio::test]
async fn v1_34_exact_lists_come_from_the_watch_cache_window() {
    let p = Profile::V1_34;
    let fixture = |name: &str| fixture_in(p, name);
    let sim = seeded(profile_cfg(p)).await;
    let cms = "/api/v1/namespaces/fixtures-a/configmaps";
    let p1 = get(&sim, &format!("{cms}?limit=10")).await.json();
    let t1 = p1["metadata"]["continue"].as_str().unwrap().to_string();
    let before = sim.current_rv();
    let mut cm = sim
        .get("", "configmaps", Some("fixtures-a"), "cm-01")
        .unwrap();
    cm["data"]["greeting"] = json!(format!("changed-after-rv-{before}"));
    sim.update("", "configmaps", cm).unwrap();
    sim.compact();
    // Compacted in etcd, held by the watch cache: the state at that RV.
    for (path, name) in [
        (
            format!("{cms}?limit=10&continue={t1}"),
            "err-list-cm-continue-expired-within-cache-window-200",
        ),
        (
            format!("{cms}?resourceVersion={before}&resourceVersionMatch=Exact"),
            "err-list-cm-rvm-exact-compacted-within-cache-window-200",
        ),
        (
            format!("{cms}?resourceVersion={before}&limit=5"),
            "err-list-cm-rv-compacted-limit-within-cache-window-200",
        ),
    ] {
        let r = get(&sim, &path).await;
        assert_eq!(r.status, fixture_status_in(p, name), "{name}");
        assert_eq!(
            normalize(&r.text(), None),
            normalize(&fixture(&format!("{name}.json")), None),
            "{name}"
        );
        let got = r.json();
        assert_eq!(got["metadata"]["resourceVersion"], before.to_string());
        let want: Value = serde_json::from_str(&fixture(&format!("{name}.json"))).unwrap();
        if let Some(t) = want["metadata"]["continue"].as_str() {
            let ours = decode_token(got["metadata"]["continue"].as_str().unwrap());
            assert_eq!(ours["start"], decode_token(t)["start"], "{name}");
            assert_eq!(ours["rv"], json!(before), "{name}");
        }
    }
    // Beyond the cache window (and compacted): the recorded 410s, byte for byte.
    sim.compact_watch_cache();
    let widgets = "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets";
    for (path, name) in [
        (
            format!(
                "{widgets}?limit=1&continue={}",
                token(before, "/w-blue\u{0}")
            ),
            "err-list-widgets-continue-expired-410",
        ),
        (
            format!("{widgets}?resourceVersion={before}&resourceVersionMatch=Exact"),
            "err-list-widgets-rvm-exact-compacted-410",
        ),
        (
            format!("{widgets}?resourceVersion={before}&limit=2"),
            "err-list-widgets-rv-compacted-limit-410",
        ),
    ] {
        let r = get(&sim, &path).await;
        assert_eq!(r.status, 410, "{name}");
        assert_eq!(r.text(), fixture(&format!("{name}.json")), "{name}");
    }
    // Only etcd compacted, the cache window moved: etcd still answers.
    let sim = seeded(profile_cfg(p)).await;
    let before = sim.current_rv();
    sim.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "later", "namespace": "fixtures-a"}}),
    )
    .unwrap();
    sim.compact_watch_cache();
    let r = get(
        &sim,
        &format!("{cms}?resourceVersion={before}&resourceVersionMatch=Exact"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 25);
    // Future RVs on the former etcd path: a 504 after the wait, as on the cache path.
    for name in [
        "err-list-cm-rvm-exact-future-rv",
        "err-list-cm-rv-future-limit5",
        "err-list-cm-rv-future-no-rvm",
        "err-list-cm-rvm-notolderthan-future-rv",
        "err-get-cm-rv-future",
    ] {
        let (_, path) = fixture_request_in(p, name);
        let r = get(&sim, &path).await;
        assert_eq!(r.status, 504, "{name}");
        assert!(
            r.total >= Duration::from_millis(290),
            "waited {:?}",
            r.total
        );
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(
            normalize(&r.text(), None),
            normalize(&fixture(&format!("{name}.json")), None),
            "{name}"
        );
    }
    // A future RV the store reaches within the wait is served.
    let target = sim.current_rv() + 1;
    let addr = sim.addr();
    let waiting = tokio::spawn(async move {
        let path = format!(
            "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion={target}&resourceVersionMatch=Exact"
        );
        request(addr, "GET", &path, &[], b"", Duration::from_secs(5)).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    sim.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "in-time", "namespace": "fixtures-a"}}),
    )
    .unwrap();
    let r = waiting.await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["metadata"]["resourceVersion"], target.to_string());
    // `resourceVersion=abc` on a list is v1.34's 400 (a GET keeps the 500 of storage).
    check(&sim, "err-list-cm-rv-not-a-number").await;
}

per_profile!(error_statuses_match_recorded_bytes);

async fn error_statuses_match_recorded_bytes(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    for name in [
        "err-get-cm-missing",
        "err-get-cm-missing-rv0",
        "err-get-cm-missing-namespace",
        "err-get-widget-missing",
        "err-get-cm-without-namespace",
        "err-get-cluster-scoped-with-namespace",
        "err-get-cluster-scoped-with-namespace-nodes",
        "err-unknown-resource-core",
        "err-unknown-resource-core-get",
        "err-unknown-subresource",
        "err-unknown-version-of-known-group",
        "err-list-cm-continue-invalid",
        "err-list-cm-continue-with-rv",
        "err-list-cm-limit-abc",
        "err-list-cm-timeoutseconds-abc",
        "err-list-cm-malformed-field-selector",
        "err-list-cm-malformed-label-selector",
        "err-list-cm-malformed-label-selector-2",
        "err-list-cm-rv-not-a-number",
        "err-list-cm-rvm-bogus",
        "err-list-cm-rvm-exact-rv0",
        "err-list-cm-rvm-without-rv",
        "err-list-cm-unsupported-field-selector",
        "err-list-pods-unsupported-field-selector",
        "err-list-pods-unsupported-field-selector-rv0",
        "err-list-widgets-field-selector-spec",
        "err-list-sendinitialevents-without-watch",
        "err-watch-cm-timeoutseconds-abc",
        "err-watch-cm-unsupported-field-selector",
        "err-watch-rvm-without-sendinitialevents",
        "err-watch-sendinitialevents-rvm-exact",
        "err-watch-sendinitialevents-without-rvm",
        "err-watch-sendinitialevents-without-rvm-rv0",
    ] {
        check(&sim, name).await;
    }
    // Plain-text 404s.
    for name in [
        "err-unknown-group",
        "err-unknown-path",
        "err-unknown-resource-in-crd-group",
        "err-get-namespace-scoped-as-cluster-widget",
    ] {
        let (method, path) = fixture_request_in(p, name);
        let r = request(sim.addr(), &method, &path, &[], b"", Duration::from_secs(5)).await;
        assert_eq!(r.status, 404, "{name}");
        assert_eq!(r.text(), "404 page not found\n", "{name}");
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
    // Headers of an ordinary answer.
    let r = get(&sim, "/api/v1/namespaces/fixtures-b/configmaps").await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("cache-control"), Some("no-cache, private"));
    assert_eq!(r.header("audit-id").map(str::len), Some(36));
    assert!(
        r.header("content-length").is_some(),
        "small bodies carry Content-Length"
    );
    let big = get(&sim, "/api/v1/namespaces/fixtures-a/configmaps").await;
    assert_eq!(
        big.header("transfer-encoding"),
        Some("chunked"),
        "large bodies are chunked"
    );
}

async fn send(sim: &kcache_sim::Sim, method: &str, path: &str, ct: &str, body: &str) -> Resp {
    request(
        sim.addr(),
        method,
        path,
        &[("Content-Type", ct)],
        body.as_bytes(),
        Duration::from_secs(5),
    )
    .await
}

per_profile!(writes_match_recorded_statuses);

async fn writes_match_recorded_statuses(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    let fixture = |name: &str| fixture_in(p, name);
    let cms = "/api/v1/namespaces/fixtures-a/configmaps";
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"posted-cm","labels":{"app":"web"}},"data":{"k":"v"}}"#;
    let created = send(&sim, "POST", cms, "application/json", body).await;
    assert_eq!(created.status, 201);
    let obj = created.json();
    assert_eq!(obj["kind"], "ConfigMap");
    assert_eq!(obj["metadata"]["namespace"], "fixtures-a");
    assert!(created.text().starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"posted-cm","namespace":"fixtures-a","uid":""#));
    let again = send(&sim, "POST", cms, "application/json", body).await;
    assert_eq!(again.text(), fixture("err-post-cm-already-exists-409.json"));
    let stale = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"posted-cm","resourceVersion":"1"},"data":{"k":"x"}}"#;
    let r = send(
        &sim,
        "PUT",
        &format!("{cms}/posted-cm"),
        "application/json",
        stale,
    )
    .await;
    assert_eq!(r.text(), fixture("err-put-cm-conflict-409.json"));
    let other = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other-name"},"data":{"k":"x"}}"#;
    let r = send(
        &sim,
        "PUT",
        &format!("{cms}/posted-cm"),
        "application/json",
        other,
    )
    .await;
    assert_eq!(r.text(), fixture("err-put-cm-name-mismatch-400.json"));
    let wrong_ns = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"fixtures-b"}}"#;
    let r = send(&sim, "POST", cms, "application/json", wrong_ns).await;
    assert_eq!(r.text(), fixture("err-post-cm-namespace-mismatch-400.json"));
    let r = send(
        &sim,
        "POST",
        cms,
        "application/json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bad""#,
    )
    .await;
    assert_eq!(r.text(), fixture("err-post-cm-invalid-json.json"));
    let r = send(&sim, "POST", cms, "application/json", "this is not json").await;
    assert_eq!(r.text(), fixture("err-post-cm-not-json.json"));
    let r = send(
        &sim,
        "POST",
        cms,
        "application/json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name!"}}"#,
    )
    .await;
    assert_eq!(r.text(), fixture("err-post-cm-invalid-name-422.json"));
    let r = send(
        &sim,
        "PATCH",
        &format!("{cms}/posted-cm"),
        "application/json",
        r#"{"data":{"k":"y"}}"#,
    )
    .await;
    assert_eq!(
        r.text(),
        fixture("err-patch-cm-unsupported-content-type-415.json")
    );
    let r = send(
        &sim,
        "PATCH",
        &format!("{cms}/cm-05"),
        "application/merge-patch+json",
        r#"{"data":{"k":"y"}}"#,
    )
    .await;
    assert_eq!(r.text(), fixture("err-patch-cm-immutable-422.json"));
    let r = send(
        &sim,
        "PATCH",
        &format!("{cms}/posted-cm"),
        "application/merge-patch+json",
        r#"{"data":{"k":"v2"}}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"], json!({"k": "v2"}));
    let uid = r.json()["metadata"]["uid"].as_str().unwrap().to_string();
    let r = send(
        &sim,
        "DELETE",
        &format!("{cms}/posted-cm"),
        "application/json",
        "",
    )
    .await;
    let deleted = fixture("delete-cm-200.json");
    let recorded_uid = serde_json::from_str::<Value>(&deleted).unwrap()["details"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(r.text(), deleted.replace(&recorded_uid, &uid));
    let r = send(
        &sim,
        "DELETE",
        &format!("{cms}/posted-cm"),
        "application/json",
        "",
    )
    .await;
    assert_eq!(r.text(), fixture("err-delete-cm-missing-404.json"));
    // CRs: DELETE returns the object; status subresource GET is the object.
    let w = get(
        &sim,
        "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets/w-red/status",
    )
    .await;
    assert_eq!(
        normalize(&w.text(), None),
        normalize(&fixture("get-widget-status-subresource.json"), None)
    );
    let r = send(
        &sim,
        "DELETE",
        "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets/w-red",
        "application/json",
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "Widget");
    assert!(sim
        .get(
            "fixtures.example.com",
            "widgets",
            Some("fixtures-a"),
            "w-red"
        )
        .is_none());
    // Pods (and Services, ServiceAccounts, Namespaces), whose storage sets
    // ReturnDeletedObject: the object at the deletion's resourceVersion, the one its watchers'
    // DELETED event carries; a Secret's DELETE is a Status like a ConfigMap's.
    let r = send(
        &sim,
        "DELETE",
        "/api/v1/namespaces/fixtures-a/pods/pod-1a?gracePeriodSeconds=0",
        "application/json",
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "Pod");
    assert_eq!(
        r.json()["metadata"]["resourceVersion"],
        sim.current_rv().to_string()
    );
    sim.create(
        "",
        "secrets",
        json!({"metadata": {"name": "gone", "namespace": "fixtures-a"}, "type": "Opaque"}),
    )
    .unwrap();
    let r = send(
        &sim,
        "DELETE",
        "/api/v1/namespaces/fixtures-a/secrets/gone",
        "application/json",
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["kind"], "Status");
}

per_profile!(gets_and_status_subresource);

async fn gets_and_status_subresource(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    for name in ["get-pod", "get-widget", "get-widget-rv0"] {
        check(&sim, name).await;
    }
    let obj = get(&sim, "/api/v1/namespaces/fixtures-a/pods/pod-1a")
        .await
        .json();
    let rv = obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let same = get(
        &sim,
        &format!("/api/v1/namespaces/fixtures-a/pods/pod-1a?resourceVersion={rv}"),
    )
    .await;
    assert_eq!(same.json(), obj);
    // PUT on the main resource ignores status; PUT on /status takes only status.
    let mut changed = obj.clone();
    changed["status"]["phase"] = json!("Running");
    changed["metadata"]["labels"]["new"] = json!("yes");
    let body = changed.to_string();
    let r = send(
        &sim,
        "PUT",
        "/api/v1/namespaces/fixtures-a/pods/pod-1a",
        "application/json",
        &body,
    )
    .await;
    assert_eq!(r.json()["status"]["phase"], "Pending");
    assert_eq!(r.json()["metadata"]["labels"]["new"], "yes");
    let mut changed = r.json();
    changed["status"]["phase"] = json!("Running");
    let r = send(
        &sim,
        "PUT",
        "/api/v1/namespaces/fixtures-a/pods/pod-1a/status",
        "application/json",
        &changed.to_string(),
    )
    .await;
    assert_eq!(r.json()["status"]["phase"], "Running");
    let running = get(&sim, "/api/v1/pods?fieldSelector=status.phase%3DRunning")
        .await
        .json();
    assert_eq!(running["items"].as_array().unwrap().len(), 1);
    // No status subresource on configmaps.
    let r = get(
        &sim,
        "/api/v1/namespaces/fixtures-a/configmaps/cm-01/status",
    )
    .await;
    assert_eq!(r.status, 404);
}

fn without(mut v: Value, keys: &[&str]) -> Value {
    if let Value::Object(m) = &mut v {
        for k in keys {
            m.remove(*k);
        }
        for (_, x) in m.iter_mut() {
            *x = without(x.take(), keys);
        }
    } else if let Value::Array(a) = &mut v {
        for x in a.iter_mut() {
            *x = without(x.take(), keys);
        }
    }
    v
}

per_profile!(discovery_documents);

async fn discovery_documents(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    let fixture = |name: &str| fixture_in(p, name);
    let r = get(&sim, "/apis/fixtures.example.com").await;
    assert_eq!(r.text(), fixture("discovery-apis-fixtures.json"));
    let r = get(&sim, "/apis/fixtures.example.com/v1").await;
    let want = without(
        serde_json::from_str(&fixture("discovery-apis-fixtures-v1.json")).unwrap(),
        &["storageVersionHash", "categories"],
    );
    assert_eq!(r.json(), want);
    let r = get(&sim, "/api").await;
    let want = fixture("discovery-api.json")
        .replace("127.0.0.1:6443", &sim.addr().to_string())
        .replace("127.0.0.1:6543", &sim.addr().to_string());
    assert_eq!(r.text(), want);
    // Every built-in entry we serve is the recorded one (the sim lists no subresource but
    // `status`: v1.34's new `pods/resize` is not served, so not listed).
    for (path, doc) in [
        ("/api/v1", "discovery-api-v1.json"),
        ("/apis/apps/v1", "discovery-apis-apps-v1.json"),
    ] {
        let ours = get(&sim, path).await.json();
        let theirs = without(
            serde_json::from_str(&fixture(doc)).unwrap(),
            &["storageVersionHash"],
        );
        assert_eq!(ours["kind"], theirs["kind"]);
        assert_eq!(ours.get("apiVersion"), theirs.get("apiVersion"));
        for entry in ours["resources"].as_array().unwrap() {
            let recorded = theirs["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == entry["name"]);
            assert_eq!(Some(entry), recorded, "{path} {}", entry["name"]);
        }
    }
    let groups = get(&sim, "/apis").await.json();
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["apps", "batch", "discovery.k8s.io", "fixtures.example.com"]
    );
    let v = get(&sim, "/version").await;
    assert_eq!(v.text(), fixture("discovery-version.json"));
    assert!(!v.text().ends_with('\n'));
    // Aggregated discovery v2beta1 is answered with the legacy document.
    let agg = request(sim.addr(), "GET", "/apis", &[("Accept", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")], b"", Duration::from_secs(5)).await;
    assert_eq!(agg.header("content-type"), Some("application/json"));
    assert_eq!(agg.json()["kind"], "APIGroupList");
    assert_eq!(get(&sim, "/readyz").await.text(), "ok");
    assert_eq!(get(&sim, "/livez").await.text(), "ok");
}

per_profile!(the_recorded_data_set_seeds_cleanly);

async fn the_recorded_data_set_seeds_cleanly(p: Profile) {
    let sim = kcache_sim::Sim::start(profile_cfg(p)).await.unwrap();
    let fixture = |name: &str| fixture_in(p, name);
    sim.register(widgets());
    for o in kcache_sim::seed::fixture_dataset() {
        sim.create(o.group, o.resource, o.object).unwrap();
    }
    // Later recordings (after cm-01 was patched) match the seeded state.
    let r = get(&sim, "/api/v1/namespaces/fixtures-a/configmaps/").await;
    assert_eq!(
        normalize(&r.text(), None),
        normalize(&fixture("list-cm-ns-a-trailing-slash.json"), None)
    );
    for (path, name) in [
        (
            "/api/v1/namespaces/fixtures-a/secrets/sec-opaque",
            "get-secret-opaque.json",
        ),
        (
            "/api/v1/namespaces/fixtures-a/services/web",
            "get-service.json",
        ),
        ("/api/v1/namespaces/fixtures-a/pods/pod-1a", "get-pod.json"),
        (
            "/api/v1/namespaces/fixtures-b/configmaps",
            "list-cm-ns-b.json",
        ),
        (
            "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets",
            "list-widgets-ns-a.json",
        ),
    ] {
        assert_eq!(
            normalize(&get(&sim, path).await.text(), None),
            normalize(&fixture(name), None),
            "{path}"
        );
    }
    let ns = get(&sim, "/api/v1/namespaces/fixtures-a").await.json();
    let want: Value = serde_json::from_str(&fixture("get-namespace.json")).unwrap();
    assert_eq!(ns["spec"], want["spec"]);
    assert_eq!(ns["status"], want["status"]);
    let big = get(&sim, "/api/v1/namespaces/fixtures-c/configmaps").await;
    assert_eq!(big.json()["items"].as_array().unwrap().len(), 30);
    assert!(big.body.len() > 128 * 1024);
}
