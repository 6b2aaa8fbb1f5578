//! Rule-by-rule conformance of kcache's LIST and GET with kube-apiserver v1.28 and v1.34: one
//! test per rule of docs/semantics.md, as the recordings show it (L1–L10, G1–G2, the E-rules of
//! list and get answers, reads before sync), run once per upstream profile (`NAME::v1_28`,
//! `NAME::v1_34`) against that profile's sim and recordings. Each replays the recorded request against kcache
//! (the simulated apiserver, seeded with the recorded data set, behind it) and compares the
//! normalised body and the headers with the recording. Requests with `resourceVersion` set are
//! answered from kcache's cache; RV-unset requests are consistent reads kcache forwards: both
//! paths are checked, and which one answered is asserted.
//!
//! WATCH rules are in `rules_watch.rs`.

mod common;
#[path = "sim_common/mod.rs"]
mod raw;
#[path = "rules_common/mod.rs"]
mod rules_common;

use std::time::{Duration, Instant};

use common::{resource, Env};
use kcache::config::Config;
use kcache::upstream::Upstream;
use kcache_sim::{Profile, Sim, SimConfig};
use rules_common::*;
use serde_json::{json, Value};

per_profile!(l1_rv0_and_consistent_lists_from_cache);

/// L1: `resourceVersion=0` is answered from the cache with the same items and bytes as the
/// consistent read (only the list RV differs: the type's last RV, not the global one); typed
/// built-in items carry no kind/apiVersion, CR lists have sorted keys and `"continue":""`;
/// items are sorted by namespace/name. RV unset is a consistent read: answered from the cache
/// when its RV has reached the upstream's revision, by the upstream otherwise, with the same
/// items and bytes either way.
async fn l1_rv0_and_consistent_lists_from_cache(p: Profile) {
    let env = pre_patch_env().await;
    for (group, res) in [
        ("", "configmaps"),
        ("", "pods"),
        ("", "namespaces"),
        ("", "secrets"),
        ("", "services"),
        (WIDGET_GROUP, "widgets"),
    ] {
        env.settle(group, res).await;
    }
    // Recorded RV=0 answers, replayed.
    for name in ["list-widgets-ns-a-rv0", "list-widgets-ns-c-empty-rv0"] {
        let r = check(&env, name).await;
        assert_from_cache(&r, name);
    }
    // Recorded RV-unset answers: forwarded as recorded, and the same bytes from the cache.
    for name in [
        "list-cm-ns-a",
        "list-cm-ns-b",
        "list-pods-ns-a",
        "list-widgets-ns-a",
        "list-widgets-all",
        "list-widgets-ns-c-empty",
    ] {
        let r = check(&env, name).await;
        assert_consistent_fixture(&env, &r, name);
        let (_, path) = fixture_request(name);
        let r = check_path(&env, name, &with_param(&path, "resourceVersion=0")).await;
        assert_from_cache(&r, name);
    }
    // Every collection: RV=0 and RV unset differ only in the list RV.
    let global = env.sim.current_rv();
    for (path, group, res) in [
        (CMS_A, "", "configmaps"),
        ("/api/v1/configmaps", "", "configmaps"),
        ("/api/v1/namespaces/fixtures-c/configmaps", "", "configmaps"),
        ("/api/v1/pods", "", "pods"),
        ("/api/v1/namespaces", "", "namespaces"),
        ("/api/v1/namespaces/fixtures-a/secrets", "", "secrets"),
        ("/api/v1/services", "", "services"),
        (WIDGETS, WIDGET_GROUP, "widgets"),
        (WIDGETS_A, WIDGET_GROUP, "widgets"),
    ] {
        let cached = send(&env, &with_param(path, "resourceVersion=0")).await;
        let consistent = send(&env, path).await;
        assert_eq!((cached.status, consistent.status), (200, 200), "{path}");
        assert_from_cache(&cached, path);
        assert_consistent_source(&env, &consistent, path, path);
        let cached_rv = rv_of(&cached.json());
        match p {
            Profile::V1_28 => assert_eq!(
                cached_rv,
                type_rv(&env, group, res),
                "{path}: RV=0 list RV is the type's RV"
            ),
            // v1.34 reports the store's revision, kcache the RV its cache has reached, which
            // its bookmarks move past the type's last write: a state no older than every item
            // and no newer than the upstream's.
            Profile::V1_34 => assert!(
                cached_rv >= type_rv(&env, group, res) && cached_rv <= global,
                "{path}: RV=0 list RV {cached_rv} outside [type RV, {global}]"
            ),
        }
        // The consistent read is answered from the cache once it has caught up: its list RV
        // is a state no older than every write the upstream had completed (the apiserver
        // reports its global RV; kcache the RV of the state it served, which may be lower
        // when the newest writes were to other types).
        let consistent_rv = rv_of(&consistent.json());
        assert!(
            consistent_rv >= cached_rv && consistent_rv <= global,
            "{path}: RV unset list RV {consistent_rv} outside [{cached_rv}, {global}]"
        );
        assert_eq!(
            without_list_rv(&cached.text(), cached_rv),
            without_list_rv(&consistent.text(), consistent_rv),
            "{path}: same items and bytes"
        );
        assert_framing(&cached, path);
        assert_eq!(cached.header("content-type"), Some("application/json"));
        assert_eq!(cached.header("cache-control"), Some("no-cache, private"));
        let keys = item_keys(&cached.json());
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "{path}: items in key order");
        let text = cached.text();
        if group.is_empty() {
            assert!(text.starts_with(r#"{"kind":""#), "{path}");
            if let Some(first) = cached.json()["items"].get(0) {
                assert!(first.get("kind").is_none() && first.get("apiVersion").is_none());
            }
        } else {
            assert!(
                text.ends_with(&(format!(
                    r#"],"kind":"WidgetList","metadata":{{"continue":"","resourceVersion":"{cached_rv}"}}}}"#
                ) + "\n")),
                "{path}: CR list envelope: {text}"
            );
            for item in cached.json()["items"].as_array().unwrap() {
                assert_eq!(item["kind"], "Widget");
            }
        }
    }
    // The recorded cluster-wide RV=0 list (other namespaces of the real cluster aside, and
    // fixtures-c, whose large ConfigMaps the data set generates rather than replays).
    // v1.34's is stored as an excerpt (its cluster held 10,000 more ConfigMaps).
    let rec = match p {
        Profile::V1_28 => fixture("list-cm-all-rv0.json"),
        Profile::V1_34 => fixture("list-cm-all-rv0.excerpt.json"),
    };
    let rec: Value = serde_json::from_str(&rec).unwrap();
    let ours = send(&env, "/api/v1/configmaps?resourceVersion=0")
        .await
        .json();
    let ours_ab: Vec<Value> = ours["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["metadata"]["namespace"] != "fixtures-c")
        .cloned()
        .collect();
    let rec_ab: Vec<Value> = rec["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| {
            i["metadata"]["namespace"]
                .as_str()
                .is_some_and(|n| n.starts_with("fixtures-") && n != "fixtures-c")
        })
        .cloned()
        .collect();
    let normalized = |v: Vec<Value>| {
        let mut v = Value::Array(v);
        common::normalize(&mut v);
        v
    };
    assert_eq!(normalized(ours_ab), normalized(rec_ab));
    // A consistent read sees a write that completed just before it, cache or not.
    let rv = create_cm(&env, "fixtures-b", "just-written", json!({}));
    let r = send(&env, CMS_B).await.json();
    assert_eq!(rv_of(&r), rv);
    assert!(item_keys(&r).contains(&("fixtures-b".into(), "just-written".into())));
}

per_profile!(l2_limit_ignored_at_rv0_negative_ignored_abc_400);

/// L2: `limit` is ignored with `resourceVersion=0` (full list, no continue); `limit=-1` is
/// accepted and ignored; `limit=abc` is a 400.
async fn l2_limit_ignored_at_rv0_negative_ignored_abc_400(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    let (_, path) = fixture_request("list-cm-all-limit5-rv0");
    let limited = send(&env, &path).await;
    assert_eq!(limited.status, 200);
    assert_from_cache(&limited, &path);
    assert_headers(&limited, &recorded("list-cm-all-limit5-rv0"), &path);
    let full = send(&env, "/api/v1/configmaps?resourceVersion=0").await;
    assert_eq!(limited.text(), full.text(), "limit ignored at RV=0");
    let v = limited.json();
    assert!(v["metadata"].get("continue").is_none());
    assert!(v["metadata"].get("remainingItemCount").is_none());
    assert_eq!(
        v["items"].as_array().unwrap().len(),
        env.sim.list("", "configmaps").len()
    );
    // CR form too: no token, "continue":"".
    let w = send(&env, &format!("{WIDGETS_A}?limit=1&resourceVersion=0")).await;
    assert_eq!(w.json()["items"].as_array().unwrap().len(), 3);
    assert_eq!(w.json()["metadata"]["continue"], "");
    // limit=-1, forwarded and from the cache.
    let r = check(&env, "list-cm-ns-a-limit-negative-ignored").await;
    assert_consistent_fixture(&env, &r, "list-cm-ns-a-limit-negative-ignored");
    let r = check_path(
        &env,
        "list-cm-ns-a-limit-negative-ignored",
        &format!("{CMS_A}?limit=-1&resourceVersion=0"),
    )
    .await;
    assert_from_cache(&r, "limit=-1&resourceVersion=0");
    // limit=abc: kcache's own 400, whatever the RV.
    let r = check_verbatim(&env, "err-list-cm-limit-abc").await;
    assert_from_cache(&r, "limit=abc");
    for path in [
        format!("{CMS_A}?limit=abc&resourceVersion=0"),
        format!("{CMS_A}?limit=abc&resourceVersion=0&watch=1"),
        format!("{WIDGETS_A}?limit=abc"),
    ] {
        let r = send(&env, &path).await;
        assert_eq!(r.status, 400, "{path}");
        assert_eq!(r.text(), recorded("err-list-cm-limit-abc").body(), "{path}");
    }
}

per_profile!(l3_continue_upstream_first_page_from_cache);

/// L3 (kubectl's way): the first page is a consistent read (answered from the cache once it
/// has caught up); its token continues from the cache's history at the token's RV, so a write between pages
/// does not show up, every page reports the first page's RV, `remainingItemCount` counts down
/// and the last page has neither `continue` nor `remainingItemCount`.
async fn l3_continue_upstream_first_page_from_cache(p: Profile) {
    let env = pre_patch_env().await;
    assert_eq!(env.sim.profile(), p);
    let p1 = check(&env, "list-cm-ns-a-limit10-page1").await;
    assert_from_cache(&p1, "first page");
    let p1 = p1.json();
    let rv = rv_of(&p1);
    assert!(rv <= env.sim.current_rv());
    let t1 = p1["metadata"]["continue"].as_str().unwrap().to_string();
    assert_eq!(
        raw::decode_token(&t1),
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start_key("cm-10")})
    );
    assert_eq!(p1["metadata"]["remainingItemCount"], 15);
    // Writes between pages, inside the remaining range and to an object already listed.
    create_cm(&env, "fixtures-a", "cm-10a", json!({"app": "web"}));
    set_cm01(&env, true);
    env.sim
        .delete("", "configmaps", Some("fixtures-a"), "cm-25")
        .unwrap();
    env.settle("", "configmaps").await;
    assert!(cache_rv(&env, "", "configmaps") > rv);

    let p2 = check_path(
        &env,
        "list-cm-ns-a-limit10-page2",
        &format!("{CMS_A}?limit=10&continue={t1}"),
    )
    .await;
    assert_from_cache(&p2, "page 2");
    let p2 = p2.json();
    assert_eq!(rv_of(&p2), rv, "every page reports the first page's RV");
    assert_eq!(p2["metadata"]["remainingItemCount"], 5);
    let t2 = p2["metadata"]["continue"].as_str().unwrap().to_string();
    assert_eq!(
        raw::decode_token(&t2),
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start_key("cm-20")})
    );
    let p3 = check_path(
        &env,
        "list-cm-ns-a-limit10-page3-last",
        &format!("{CMS_A}?limit=10&continue={t2}"),
    )
    .await;
    assert_from_cache(&p3, "page 3");
    let p3 = p3.json();
    assert_eq!(rv_of(&p3), rv);
    assert!(p3["metadata"].get("continue").is_none());
    assert!(p3["metadata"].get("remainingItemCount").is_none());

    // Cluster-wide pages: namespace/name keys; all pages at one RV; together the whole list.
    let all = send(&env, "/api/v1/configmaps").await.json();
    let total = all["items"].as_array().unwrap().len();
    let mut page = send(&env, "/api/v1/configmaps?limit=5").await;
    assert_from_cache(&page, "cluster-wide first page");
    let first = page.json();
    let rv = rv_of(&first);
    assert_eq!(
        raw::decode_token(first["metadata"]["continue"].as_str().unwrap())["start"],
        start_key("fixtures-a/cm-05")
    );
    let mut keys = Vec::new();
    let mut remaining = total;
    loop {
        let v = page.json();
        assert_eq!(rv_of(&v), rv);
        keys.extend(item_keys(&v));
        remaining -= v["items"].as_array().unwrap().len();
        let Some(t) = v["metadata"]["continue"].as_str() else {
            assert!(v["metadata"].get("remainingItemCount").is_none());
            break;
        };
        assert_eq!(v["metadata"]["remainingItemCount"], remaining);
        page = send(&env, &format!("/api/v1/configmaps?limit=5&continue={t}")).await;
        assert_from_cache(&page, "cluster-wide next page");
    }
    assert_eq!(keys, item_keys(&all));

    // CR pages: the last page carries "continue":"" (and no remainingItemCount).
    let w1 = check(&env, "list-widgets-ns-a-limit2").await.json();
    let t = w1["metadata"]["continue"].as_str().unwrap();
    assert_eq!(raw::decode_token(t)["start"], start_key("w-green"));
    let w2 = send(&env, &format!("{WIDGETS_A}?limit=2&continue={t}")).await;
    let v = w2.json();
    assert_eq!(v["metadata"]["continue"], "");
    assert!(v["metadata"].get("remainingItemCount").is_none());
    assert_eq!(item_keys(&v), [("fixtures-a".into(), "w-red".into())]);
    assert_eq!(rv_of(&v), rv_of(&w1));
    assert!(w2.text().ends_with(
        &(format!(
            r#"],"kind":"WidgetList","metadata":{{"continue":"","resourceVersion":"{}"}}}}"#,
            rv_of(&w1)
        ) + "\n")
    ));
}

per_profile!(l3_cache_pages_match_upstream_pages);

/// L3 on the cache path: `limit` with `resourceVersion=N` is an exact list at N kcache answers
/// itself, page for page byte-identical to the upstream's consistent pages at the same RV
/// (tokens included), with and without selectors: a page may be short, `continue` is set while
/// keys follow, `remainingItemCount` only without selectors.
async fn l3_cache_pages_match_upstream_pages(p: Profile) {
    let env = pre_patch_env().await;
    assert_eq!(env.sim.profile(), p);
    let n = env.sim.current_rv();
    assert_eq!(cache_rv(&env, "", "configmaps"), n);
    // The recorded first pages, from the cache.
    let r = check_path(
        &env,
        "list-cm-ns-a-limit10-page1",
        &format!("{CMS_A}?limit=10&resourceVersion={n}"),
    )
    .await;
    assert_from_cache(&r, "limit=10&resourceVersion=N");
    let r = check_path(
        &env,
        "list-cm-ns-a-label-app-web-limit3",
        &format!("{CMS_A}?labelSelector=app%3Dweb&limit=3&resourceVersion={n}"),
    )
    .await;
    assert!(r.json()["metadata"].get("remainingItemCount").is_none());
    assert!(r.json()["metadata"]["continue"].is_string());

    async fn compare_chains(env: &Env, query: &str, n: u64) {
        // kcache from its cache at N, the sim's own consistent pages (also at N).
        let mut ours = send(env, &format!("{query}&resourceVersion={n}")).await;
        let mut theirs = raw::get(&env.sim, query).await;
        let mut pages = 0;
        loop {
            assert_from_cache(&ours, query);
            assert_eq!(ours.status, 200, "{query}: {}", ours.text());
            assert_eq!(ours.text(), theirs.text(), "{query}: page {pages}");
            assert_framing(&ours, query);
            pages += 1;
            let v = theirs.json();
            let Some(t) = v["metadata"]["continue"].as_str().filter(|t| !t.is_empty()) else {
                break;
            };
            let next = format!("{query}&continue={t}");
            ours = send(env, &next).await;
            theirs = raw::get(&env.sim, &next).await;
        }
        assert!(pages >= 1);
    }
    for q in [
        format!("{CMS_A}?limit=10"),
        format!("{CMS_A}?limit=1"),
        "/api/v1/configmaps?limit=7".to_string(),
        format!("{CMS_A}?labelSelector=app%3Dweb&limit=3"),
        format!("{CMS_A}?labelSelector=app%3Ddb&limit=3"),
        format!("{CMS_A}?labelSelector=tier%3Dback&limit=2"),
        format!("{CMS_A}?labelSelector=app%3Dweb&limit=100"),
        format!("{CMS_A}?fieldSelector=metadata.name%21%3Dcm-01&limit=8"),
        "/api/v1/configmaps?labelSelector=app%3Dweb&limit=4".to_string(),
    ] {
        compare_chains(&env, &q, n).await;
    }
    // A continue without limit: the rest of the list at the token's RV.
    let first = send(&env, &format!("{CMS_A}?limit=10&resourceVersion={n}")).await;
    let t = first.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let rest = format!("{CMS_A}?continue={t}");
    let ours = send(&env, &rest).await;
    assert_from_cache(&ours, &rest);
    assert_eq!(ours.text(), raw::get(&env.sim, &rest).await.text());
    assert_eq!(ours.json()["items"].as_array().unwrap().len(), 15);
    // CRs: make a widget the latest write so that N is also the widgets' RV.
    let n = create_widget(&env, "fixtures-c", "w-latest", json!({}));
    env.settle(WIDGET_GROUP, "widgets").await;
    for q in [
        format!("{WIDGETS_A}?limit=2"),
        format!("{WIDGETS}?limit=1"),
        format!("{WIDGETS}?labelSelector=app%3Dweb&limit=1"),
    ] {
        compare_chains(&env, &q, n).await;
    }
}

per_profile!(l4_continue_errors_and_expiry);

/// L4: a garbage token (the upstream's own 400) and a token with a resourceVersion are 400s
/// (RV=0 alongside a token is tolerated: the token decides); a token whose RV is gone from
/// kcache's history and compacted
/// upstream is a 410 whose own token (rv -1) continues at the latest state.
async fn l4_continue_errors_and_expiry(p: Profile) {
    let mut b = builder();
    b.config.cache.history_max_events = 4;
    let env = b.start().await;
    // A token kcache cannot read may be a newer apiserver's: the upstream refuses it.
    let r = check_verbatim(&env, "err-list-cm-continue-invalid").await;
    assert_forwarded(&r, "garbage token");
    let r = check_verbatim(&env, "err-list-cm-continue-with-rv").await;
    assert_from_cache(&r, "token with RV");

    let p1 = send(&env, &format!("{CMS_A}?limit=10")).await.json();
    let t1 = p1["metadata"]["continue"].as_str().unwrap().to_string();
    let p2 = send(&env, &format!("{CMS_A}?limit=10&continue={t1}")).await;
    // RV=0 with a token: treated as a plain continue.
    let r = send(
        &env,
        &format!("{CMS_A}?limit=10&resourceVersion=0&continue={t1}"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), p2.text());

    // Churn beyond kcache's history: the upstream still has the token's RV, so the page is
    // still the consistent one (without the later cm-10b).
    create_cm(&env, "fixtures-a", "cm-10b", json!({}));
    for i in 0..8 {
        create_cm(&env, "fixtures-b", &format!("churn-{i}"), json!({}));
    }
    env.settle("", "configmaps").await;
    let r = send(&env, &format!("{CMS_A}?limit=10&continue={t1}")).await;
    assert_eq!((r.status, r.text()), (200, p2.text()));
    // Once the upstream has compacted too: 410.
    env.sim.compact();
    let r = send(&env, &format!("{CMS_A}?limit=10&continue={t1}")).await;
    let r = match p {
        // Our first page's token starts at cm-10 like the recorded one: the same 410, verbatim.
        Profile::V1_28 => {
            let name = "err-list-cm-continue-expired-410";
            let rec = recorded(name);
            assert_eq!(
                (r.status, r.text()),
                (410, rec.body().to_string()),
                "{name}"
            );
            assert_headers(&r, &rec, name);
            r
        }
        // v1.34 still answers the token from its watch cache window (the recorded replay of
        // the 1.28 410): the consistent page 2, as before the compaction. Only once that
        // window has moved on is it the 410, whose token has no leading `/`, with the bytes
        // of the recorded one (of a widget token) but for that token.
        Profile::V1_34 => {
            let name = "err-list-cm-continue-expired-within-cache-window-200";
            let rec = recorded(name);
            assert_eq!((r.status, r.text()), (200, p2.text()), "{name}");
            assert_eq!(norm(&r.text()), norm(rec.body()), "{name}");
            assert_headers(&r, &rec, name);
            assert_forwarded(&r, name);
            env.sim.compact_watch_cache();
            let r = send(&env, &format!("{CMS_A}?limit=10&continue={t1}")).await;
            let name = "err-list-widgets-continue-expired-410";
            let rec = recorded(name);
            assert_eq!(r.status, 410, "{}", r.text());
            let without_token = |body: &str| {
                let mut v: Value = serde_json::from_str(body).unwrap();
                v["metadata"]["continue"] = json!("TOKEN");
                v.to_string()
            };
            assert_eq!(
                without_token(&r.text()),
                without_token(rec.body()),
                "{name}"
            );
            let rec_token = serde_json::from_str::<Value>(rec.body()).unwrap()["metadata"]
                ["continue"]
                .as_str()
                .map(raw::decode_token)
                .unwrap();
            assert_eq!(rec_token["start"], "w-blue\u{0}", "no `/` in a 410's token");
            assert_headers(&r, &rec, name);
            r
        }
    };
    let t = r.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        raw::decode_token(&t),
        json!({"v": "meta.k8s.io/v1", "rv": -1, "start": "cm-10\u{0}"})
    );
    // The rv -1 token continues at the latest state (an inconsistent list).
    let r = send(&env, &format!("{CMS_A}?limit=10&continue={t}")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(item_keys(&v)[0], ("fixtures-a".into(), "cm-10b".into()));
    assert_eq!(rv_of(&v), env.sim.current_rv());
}

per_profile!(l5_exact_from_history_not_older_than_current);

/// L5: `resourceVersionMatch=Exact` returns the state at that RV (the historic cm-01 after a
/// later patch), even for an RV older than kcache's own history (the upstream still has it,
/// as etcd had RV 2); `NotOlderThan` and an old RV without limit give the current state; a
/// future RV on this path fails at once with the upstream's 500.
async fn l5_exact_from_history_not_older_than_current(p: Profile) {
    let env = pre_patch_env().await;
    let before = env.sim.current_rv();
    let patched = set_cm01(&env, true);
    env.settle("", "configmaps").await;
    for name in [
        "list-cm-ns-a-rvm-exact-old-rv",
        "list-cm-ns-a-rvm-exact-old-rv-nolimit",
    ] {
        let (_, path) = fixture_request(name);
        let r = check_path(&env, name, &replace_rv(&path, request_rv(name), before)).await;
        assert_from_cache(&r, name);
        let v = r.json();
        assert_eq!(rv_of(&v), before, "{name}: list RV is the requested RV");
        assert_eq!(v["items"][0]["data"]["greeting"], "hello-1", "{name}");
    }
    // Current state for NotOlderThan (+limit) and for an old RV without limit.
    for name in [
        "list-cm-ns-a-rvm-notolderthan-old-rv",
        "list-cm-ns-a-rv-old-nolimit-cache",
    ] {
        let (_, path) = fixture_request(name);
        let r = check_path(&env, name, &replace_rv(&path, request_rv(name), before)).await;
        let v = r.json();
        assert!(rv_of(&v) >= patched, "{name}");
        assert_eq!(
            v["items"][0]["data"]["greeting"], "changed-after-rv-354",
            "{name}"
        );
    }
    // Older than anything kcache has seen, but not compacted upstream.
    let r = check(&env, "list-cm-ns-a-rvm-exact-rv2-before-compaction").await;
    assert!(r.text().contains(r#""metadata":{"resourceVersion":"2"}"#));
    let names = [
        "err-list-cm-rvm-exact-future-rv",
        "err-list-cm-rv-future-limit5",
    ];
    match p {
        // Future RV with Exact or limit: the upstream's immediate 500.
        Profile::V1_28 => {
            for name in names {
                let t = Instant::now();
                check_verbatim(&env, name).await;
                // Immediate: well under the 3 s a cache-path wait would take (a loaded
                // machine's margin is the rest).
                assert!(
                    t.elapsed() < Duration::from_millis(2500),
                    "{name}: immediate, took {:?}",
                    t.elapsed()
                );
            }
        }
        // v1.34 waits 3 s for the RV, then answers the cache path's 504 with its current RV;
        // kcache forwards it (both at once).
        Profile::V1_34 => {
            let reqs = names.map(|name| {
                let (_, path) = fixture_request(name);
                let addr = env.kcache.addr;
                tokio::spawn(async move {
                    raw::request(addr, "GET", &path, &[], b"", Duration::from_secs(10)).await
                })
            });
            for (name, req) in names.into_iter().zip(reqs) {
                let r = req.await.unwrap();
                let rec = recorded(name);
                assert_eq!(r.status, 504, "{name}: {}", r.text());
                assert_forwarded(&r, name);
                assert!(
                    r.head_after >= Duration::from_millis(2950),
                    "{name}: answered after {:?}",
                    r.head_after
                );
                assert_eq!(
                    r.text(),
                    with_current(rec.body(), env.sim.current_rv()),
                    "{name}"
                );
                assert_headers(&r, &rec, name);
            }
        }
    }
}

per_profile!(l5_compacted_rv_is_410_without_limit_current);

/// L5 after compaction: Exact (or limit) at an RV that neither kcache's history nor the
/// upstream holds is a 410; without limit the same old RV is served from the cache as the
/// current state.
async fn l5_compacted_rv_is_410_without_limit_current(p: Profile) {
    let mut b = builder();
    b.config.cache.history_max_events = 4;
    let env = b.start().await;
    // The recorded state (cm-01 before the recorder's patch), which v1.34 replays.
    set_cm01(&env, false);
    let before = env.sim.current_rv();
    for i in 0..8 {
        create_cm(&env, "fixtures-b", &format!("churn-{i}"), json!({}));
    }
    env.sim.compact();
    env.settle("", "configmaps").await;
    if p == Profile::V1_34 {
        // v1.34 answers them from its watch cache window, compaction or not (the recorded
        // replays of the 1.28 410s); kcache, whose history no longer holds the RV, forwards.
        for (name, path) in [
            (
                "err-list-cm-rvm-exact-compacted-within-cache-window-200",
                format!("{CMS_A}?resourceVersion={before}&resourceVersionMatch=Exact"),
            ),
            (
                "err-list-cm-rv-compacted-limit-within-cache-window-200",
                format!("{CMS_A}?resourceVersion={before}&limit=5"),
            ),
        ] {
            let r = check_path(&env, name, &path).await;
            assert_forwarded(&r, name);
            assert_eq!(rv_of(&r.json()), before, "{name}");
        }
        // Beyond the window: the 410s, as recorded for widgets (the same bytes).
        env.sim.compact_watch_cache();
    }
    let (exact_410, limit_410) = match p {
        Profile::V1_28 => (
            "err-list-cm-rvm-exact-compacted-410",
            "err-list-cm-rv-compacted-limit-410",
        ),
        Profile::V1_34 => (
            "err-list-widgets-rvm-exact-compacted-410",
            "err-list-widgets-rv-compacted-limit-410",
        ),
    };
    for (name, path) in [
        (
            exact_410,
            format!("{CMS_A}?resourceVersion={before}&resourceVersionMatch=Exact"),
        ),
        (
            limit_410,
            format!("{CMS_A}?resourceVersion={before}&limit=3"),
        ),
    ] {
        let r = send(&env, &path).await;
        let rec = recorded(name);
        assert_eq!(r.status, 410, "{path}");
        assert_eq!(r.text(), rec.body(), "{path}");
        assert_headers(&r, &rec, &path);
    }
    let (_, path) = fixture_request("list-cm-ns-a-rv-compacted-cache-ok");
    let r = check_path(
        &env,
        "list-cm-ns-a-rv-compacted-cache-ok",
        &replace_rv(
            &path,
            request_rv("list-cm-ns-a-rv-compacted-cache-ok"),
            before,
        ),
    )
    .await;
    assert_from_cache(&r, "compacted RV without limit");
    assert_eq!(rv_of(&r.json()), cache_rv(&env, "", "configmaps"));
}

per_profile!(l6_future_rv_waits_3s_then_504);

/// L6: on the cache path (list without limit, with or without NotOlderThan, and GET) a future
/// RV blocks 3 s, then 504 with the exact Status, `current` = the cache's RV and Retry-After: 1.
/// An RV the cache reaches within the wait is answered as soon as it does.
async fn l6_future_rv_waits_3s_then_504(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    let names = [
        "err-list-cm-rv-future-no-rvm",
        "err-list-cm-rvm-notolderthan-future-rv",
        "err-get-cm-rv-future",
    ];
    let reqs = names.map(|name| {
        let (_, path) = fixture_request(name);
        let addr = env.kcache.addr;
        tokio::spawn(async move {
            raw::request(addr, "GET", &path, &[], b"", Duration::from_secs(10)).await
        })
    });
    // Meanwhile: a reachable RV is answered once the cache gets there.
    let target = env.sim.current_rv() + 1;
    let addr = env.kcache.addr;
    let soon = tokio::spawn(async move {
        let p = format!("{CMS_B}?resourceVersion={target}");
        raw::request(addr, "GET", &p, &[], b"", Duration::from_secs(10)).await
    });
    // The write once all four reads are waiting (kcache's own in-flight gauge): three lists,
    // one GET.
    let inflight = |verb: &'static str| {
        env.kcache
            .metrics()
            .inflight
            .get_or_create(&kcache::metrics::VerbLabels { verb })
            .get()
    };
    common::wait_until("the reads waiting", || {
        let waiting = (inflight("list"), inflight("get"));
        async move { waiting == (3, 1) }
    })
    .await;
    create_cm(&env, "fixtures-b", "arrives", json!({}));
    let soon = soon.await.unwrap();
    // A 200, not the 504 the end of the wait gives: answered once the cache got there.
    assert_eq!(soon.status, 200, "{}", soon.text());
    assert!(item_keys(&soon.json()).contains(&("fixtures-b".into(), "arrives".into())));

    for (name, req) in names.into_iter().zip(reqs) {
        let r = req.await.unwrap();
        let rec = recorded(name);
        assert_eq!(r.status, 504, "{name}: {}", r.text());
        assert_from_cache(&r, name);
        // The 3 s wait is the behaviour: at least that, and (generously) not hanging.
        assert!(
            r.head_after >= Duration::from_millis(2950) && r.head_after < Duration::from_secs(10),
            "{name}: answered after {:?}",
            r.head_after
        );
        // `current` is the cache's RV when the wait ended (after "arrives").
        let want = with_current(rec.body(), cache_rv(&env, "", "configmaps"));
        assert_eq!(r.text(), want, "{name}");
        assert_headers(&r, &rec, name);
        assert_eq!(r.header("retry-after"), Some("1"));
    }
}

per_profile!(l7_validation_errors_verbatim);

/// L7: ListOptions validation (422 Invalid, kind ListOptions, group meta.k8s.io) and number
/// parse errors (400), verbatim, from kcache's own code, for lists and watches. A non-numeric
/// RV is refused by every version, but differently (a 500 up to v1.33, a 400 from v1.34), so
/// the upstream answers it: verbatim too.
async fn l7_validation_errors_verbatim(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    for name in [
        "err-list-cm-rvm-without-rv",
        "err-list-cm-rvm-exact-rv0",
        "err-list-cm-rvm-bogus",
        "err-list-sendinitialevents-without-watch",
        "err-watch-sendinitialevents-without-rvm",
        "err-watch-sendinitialevents-without-rvm-rv0",
        "err-watch-rvm-without-sendinitialevents",
        "err-watch-sendinitialevents-rvm-exact",
        "err-list-cm-limit-abc",
        "err-list-cm-timeoutseconds-abc",
        "err-watch-cm-timeoutseconds-abc",
    ] {
        let r = check_verbatim(&env, name).await;
        assert_from_cache(&r, name);
    }
    let r = check_verbatim(&env, "err-list-cm-rv-not-a-number").await;
    assert_forwarded(&r, "err-list-cm-rv-not-a-number");
    // The same rules for a custom resource.
    let r = send(
        &env,
        &format!("{WIDGETS_A}?resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.text(), recorded("err-list-cm-rvm-without-rv").body());
}

per_profile!(l8_query_booleans);

/// L8: only `0` and `false` (any case) are false: `?watch=` and `?watch=maybe` open watches,
/// `watch=0|false|FALSE` are lists; an unknown `allowWatchBookmarks` on a list is ignored.
async fn l8_query_booleans(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    for name in [
        "watch-cm-ns-b-watch-empty-value-is-true",
        "watch-cm-ns-b-watch-maybe-is-true",
    ] {
        let (_, path) = fixture_request(name);
        let r = send(&env, &with_param(&path, "timeoutSeconds=1")).await;
        assert_eq!(r.status, 200, "{name}");
        assert_from_cache(&r, name);
        assert!(r.clean_end, "{name}: ended by timeoutSeconds");
        assert_eq!(
            sorted_lines(&norm(&r.text())),
            sorted_lines(&norm(recorded(name).body())),
            "{name}"
        );
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    }
    for name in ["list-cm-ns-b-watch-0", "list-cm-ns-b-watch-false"] {
        let r = check(&env, name).await;
        assert_consistent_fixture(&env, &r, name);
        let (_, path) = fixture_request(name);
        let r = check_path(&env, name, &with_param(&path, "resourceVersion=0")).await;
        assert_from_cache(&r, name);
    }
    let r = check_path(
        &env,
        "list-cm-ns-b-watch-false",
        &format!("{CMS_B}?watch=FALSE&resourceVersion=0"),
    )
    .await;
    assert_from_cache(&r, "watch=FALSE");
    let name = "list-cm-ns-a-allowwatchbookmarks-maybe-ignored";
    check(&env, name).await;
    let (_, path) = fixture_request(name);
    let r = check_path(&env, name, &with_param(&path, "resourceVersion=0")).await;
    assert_from_cache(&r, name);
}

per_profile!(l9_label_selectors);

/// L9, labels: every operator (`=`, `==`, `!=`, `in`, `notin` - objects lacking the key match
/// -, `k`, `!k`, `>`, `<`, comma = AND) gives the upstream's answer from the cache; the
/// recorded selector lists replay on both paths; malformed selectors are the parser's 400, on
/// lists and watches alike.
async fn l9_label_selectors(p: Profile) {
    let env = pre_patch_env().await;
    assert_eq!(env.sim.profile(), p);
    for name in [
        "list-cm-ns-a-label-app-web",
        "list-cm-ns-a-label-tier-in-front",
        "list-cm-ns-a-label-app-web-tier-notin-front",
        "list-cm-ns-a-label-not-tier",
        "list-widgets-ns-a-label-app-web",
    ] {
        let r = check(&env, name).await;
        assert_consistent_fixture(&env, &r, name);
        let (_, path) = fixture_request(name);
        let r = check_path(&env, name, &with_param(&path, "resourceVersion=0")).await;
        assert_from_cache(&r, name);
    }
    for (i, rank) in ["1", "2", "3", "10", "x"].iter().enumerate() {
        create_cm(
            &env,
            "sel",
            &format!("ranked-{i}"),
            json!({"rank": rank, "app": if i % 2 == 0 { "web" } else { "db" }}),
        );
    }
    env.settle("", "configmaps").await;
    for sel in [
        "app=web",
        "app==web",
        "app!=web",
        "app in (web,db)",
        "app notin (web)",
        "tier",
        "!tier",
        "rank>2",
        "rank<3",
        "app=web,tier=front",
        "app=web,tier!=front",
        "app in (web),!tier,rank",
        " app = web , tier in ( front ) ",
        "",
    ] {
        let enc = percent_encoding::utf8_percent_encode(sel, percent_encoding::NON_ALPHANUMERIC);
        let cached = send(
            &env,
            &format!("/api/v1/configmaps?labelSelector={enc}&resourceVersion=0"),
        )
        .await;
        let consistent = send(&env, &format!("/api/v1/configmaps?labelSelector={enc}")).await;
        assert_eq!((cached.status, consistent.status), (200, 200), "{sel:?}");
        assert_from_cache(&cached, sel);
        assert_eq!(
            item_keys(&cached.json()),
            item_keys(&consistent.json()),
            "{sel:?}"
        );
        assert_eq!(
            without_list_rv(&cached.text(), rv_of(&cached.json())),
            without_list_rv(&consistent.text(), rv_of(&consistent.json())),
            "{sel:?}"
        );
    }
    // Selector syntax, valid and not: kcache's parser answers exactly as the upstream's.
    for sel in [
        "app in ()",
        "app in (web",
        "app=",
        "=web",
        "app in (a b)",
        "!app=web",
        "app notin web",
        "app=we b",
        "app==web=",
        "app,,tier",
        "example.com/app=web",
        "app<1,b>2",
    ] {
        let enc = percent_encoding::utf8_percent_encode(sel, percent_encoding::NON_ALPHANUMERIC);
        let path = format!("{CMS_A}?labelSelector={enc}&resourceVersion=0");
        let ours = send(&env, &path).await;
        let upstream = raw::get(&env.sim, &path).await;
        assert_from_cache(&ours, sel);
        assert_eq!(
            (ours.status, ours.text()),
            (upstream.status, upstream.text()),
            "labelSelector {sel:?}"
        );
    }
    // Key and value validation as apimachinery's label parser words it (the sim does not
    // validate these, so the expected messages are spelled out). Go's JSON escapes `<`, `>`
    // and `&` in strings: `<nil>` goes out as `\u003cnil\u003e`.
    const QUALIFIED: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let long_key = "k".repeat(64);
    let long_value = "v".repeat(64);
    for (sel, message) in [
        (
            "app>x".to_string(),
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer".to_string(),
        ),
        (
            "a/b/c=1".to_string(),
            format!("unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name {QUALIFIED} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
        ),
        (
            "-app=web".to_string(),
            format!("unable to parse requirement: <nil>: Invalid value: \"-app\": name part {QUALIFIED}"),
        ),
        (
            "a&b=1".to_string(),
            format!("unable to parse requirement: <nil>: Invalid value: \"a&b\": name part {QUALIFIED}"),
        ),
        (
            format!("{long_key}=1"),
            format!("unable to parse requirement: <nil>: Invalid value: \"{long_key}\": name part must be no more than 63 characters"),
        ),
        (
            format!("app={long_value}"),
            format!("unable to parse requirement: values[0][app]: Invalid value: \"{long_value}\": must be no more than 63 characters"),
        ),
    ] {
        let enc = percent_encoding::utf8_percent_encode(&sel, percent_encoding::NON_ALPHANUMERIC);
        let r = send(&env, &format!("{CMS_A}?labelSelector={enc}&resourceVersion=0")).await;
        let go_escaped = serde_json::to_string(&message)
            .unwrap()
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026");
        assert_eq!(
            (r.status, r.text()),
            (
                400,
                format!("{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":{go_escaped},\"reason\":\"BadRequest\",\"code\":400}}\n")
            ),
            "labelSelector {sel:?}"
        );
    }
    for name in [
        "err-list-cm-malformed-label-selector",
        "err-list-cm-malformed-label-selector-2",
        "err-list-cm-malformed-field-selector",
    ] {
        let r = check_verbatim(&env, name).await;
        assert_from_cache(&r, name);
        let (_, path) = fixture_request(name);
        for variant in ["resourceVersion=0", "watch=1", "watch=1&resourceVersion=0"] {
            let r = send(&env, &with_param(&path, variant)).await;
            assert_eq!(r.status, 400, "{name} {variant}");
            assert_eq!(r.text(), recorded(name).body(), "{name} {variant}");
        }
    }
}

per_profile!(l9_field_selectors);

/// L9, fields: `metadata.name`/`metadata.namespace` everywhere (a namespace contradicting the
/// URL gives an empty list), the pod fields (empty nodeName = unscheduled), secret type,
/// namespace phase, `=`/`==`/`!=` and AND; fields kcache does not know for the kind go to the
/// upstream, whose 400 has the per-kind message, for lists, RV=0 lists and watches (no stream
/// is opened).
async fn l9_field_selectors(p: Profile) {
    let env = fixtures_env().await;
    for name in [
        "list-cm-ns-a-field-name",
        "list-cm-ns-a-field-name-neq-and-label",
        "list-cm-ns-a-field-namespace-other",
        "list-cm-all-field-namespace",
        "list-widgets-ns-a-field-name",
        "list-pods-ns-a-field-nodename-node1",
        "list-pods-ns-a-field-nodename-empty",
        "list-pods-ns-a-field-phase-pending",
        "list-pods-ns-a-field-phase-running",
        "list-pods-ns-a-field-schedulername",
    ] {
        let r = check(&env, name).await;
        assert_consistent_fixture(&env, &r, name);
        let (_, path) = fixture_request(name);
        let r = check_path(&env, name, &with_param(&path, "resourceVersion=0")).await;
        assert_from_cache(&r, name);
    }
    let name = "list-pods-all-field-nodename-node1-rv0";
    let r = match p {
        Profile::V1_28 => check(&env, name).await,
        // The v1.34 cluster had 40 more pods on node-1 (another client's).
        Profile::V1_34 => check_fixtures_items(&env, name).await,
    };
    assert_from_cache(&r, "pods by node");
    for (res, sel) in [
        ("pods", "spec.nodeName=node-2"),
        ("pods", "spec.nodeName!=node-1"),
        ("pods", "spec.restartPolicy=Always"),
        ("pods", "spec.schedulerName==default-scheduler"),
        ("pods", "spec.serviceAccountName=default"),
        ("pods", "spec.hostNetwork=false"),
        ("pods", "status.phase!=Running"),
        ("pods", "status.podIP="),
        ("pods", "status.nominatedNodeName="),
        ("pods", "metadata.namespace=fixtures-a,spec.nodeName=node-1"),
        ("secrets", "type=Opaque"),
        ("secrets", "type!=Opaque"),
        ("namespaces", "status.phase=Active"),
        ("namespaces", "metadata.name=fixtures-b"),
        (
            "configmaps",
            "metadata.name==cm-03,metadata.namespace=fixtures-a",
        ),
    ] {
        let enc = percent_encoding::utf8_percent_encode(sel, percent_encoding::NON_ALPHANUMERIC);
        let path = format!("/api/v1/{res}?fieldSelector={enc}");
        let cached = send(&env, &with_param(&path, "resourceVersion=0")).await;
        let consistent = send(&env, &path).await;
        assert_from_cache(&cached, &path);
        assert_eq!(cached.status, consistent.status, "{path}");
        if cached.status == 200 {
            assert_eq!(
                without_list_rv(&cached.text(), rv_of(&cached.json())),
                without_list_rv(&consistent.text(), rv_of(&consistent.json())),
                "{path}"
            );
        } else {
            // Not a selectable field of this kind in v1.28: the same 400 either way.
            assert_eq!(cached.status, 400, "{path}");
            assert_eq!(cached.text(), consistent.text(), "{path}");
        }
    }
    // Fields kcache does not know for the kind (Service's two are selectable from v1.30 on):
    // the upstream answers, here v1.28's 400 for a type without a field-label conversion.
    for sel in ["spec.type=ClusterIP", "spec.clusterIP!="] {
        let enc = percent_encoding::utf8_percent_encode(sel, percent_encoding::NON_ALPHANUMERIC);
        let path = format!("/api/v1/services?fieldSelector={enc}");
        for path in [with_param(&path, "resourceVersion=0"), path] {
            let ours = send(&env, &path).await;
            assert_forwarded(&ours, &path);
            let upstream = raw::get(&env.sim, &path).await;
            assert_eq!(ours.status, 400, "{path}");
            assert_eq!(ours.text(), upstream.text(), "{path}");
            let field = sel.split(['=', '!']).next().unwrap();
            assert_eq!(
                ours.json()["message"],
                format!(
                    "\"{field}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                ),
                "{path}"
            );
        }
    }
    // Field selector syntax, escapes included: kcache answers exactly as the upstream; a
    // selector that parses but names a field ConfigMaps do not select on is the upstream's.
    let unknown_field = ["=cm-01", "a&b=1", "spec.x<y=1"];
    for sel in [
        "metadata.name",
        "metadata.name=",
        "=cm-01",
        "metadata.name!cm-01",
        "metadata.name=cm-01,",
        "metadata.name=cm\\,01",
        "metadata.name=cm\\=01",
        "metadata.name=cm\\\\01",
        "metadata.name==cm-01,metadata.name!=cm-02",
        "metadata.name in (cm-01)",
        "metadata.name>cm-01",
        "a&b=1",
        "spec.x<y=1",
    ] {
        let enc = percent_encoding::utf8_percent_encode(sel, percent_encoding::NON_ALPHANUMERIC);
        let path = format!("{CMS_A}?fieldSelector={enc}&resourceVersion=0");
        let ours = send(&env, &path).await;
        let upstream = raw::get(&env.sim, &path).await;
        if unknown_field.contains(&sel) {
            assert_forwarded(&ours, sel);
        } else {
            assert_from_cache(&ours, sel);
        }
        assert_eq!(
            (ours.status, ours.text()),
            (upstream.status, upstream.text()),
            "fieldSelector {sel:?}"
        );
    }
    // (The sim words this one differently from apimachinery's fields.InvalidEscapeSequence.)
    let r = send(
        &env,
        &format!("{CMS_A}?fieldSelector=metadata.name%3Dcm%5Cx&resourceVersion=0"),
    )
    .await;
    assert_eq!(
        (r.status, r.text()),
        (400, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"invalid field selector: invalid escape sequence: \\\\x\",\"reason\":\"BadRequest\",\"code\":400}\n".to_string())
    );
    for name in [
        "err-list-cm-unsupported-field-selector",
        "err-list-pods-unsupported-field-selector",
        "err-list-pods-unsupported-field-selector-rv0",
        "err-list-widgets-field-selector-spec",
        "err-watch-cm-unsupported-field-selector",
    ] {
        // Fields the kind does not select on in v1.28 may be selectable on a newer upstream:
        // kcache forwards, and the recorded 400 is the upstream's own.
        let r = check_verbatim(&env, name).await;
        assert_forwarded(&r, name);
        let (_, path) = fixture_request(name);
        for variant in ["resourceVersion=0", "watch=1", "watch=1&resourceVersion=0"] {
            let r = send(&env, &with_param(&path, variant)).await;
            assert_eq!(r.status, 400, "{name} {variant}");
            assert_eq!(r.text(), recorded(name).body(), "{name} {variant}");
            assert!(r.header("transfer-encoding").is_none(), "not a stream");
        }
    }
}

per_profile!(l10_missing_namespace_and_trailing_slash);

/// L10: a list in a namespace that does not exist is an empty 200 list (a GET there is a 404
/// for the object); a trailing slash on a collection is the list.
async fn l10_missing_namespace_and_trailing_slash(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    let name = "list-cm-missing-namespace-empty";
    let r = check(&env, name).await;
    assert_consistent_fixture(&env, &r, name);
    let (_, path) = fixture_request(name);
    let r = check_path(&env, name, &with_param(&path, "resourceVersion=0")).await;
    assert_from_cache(&r, name);
    assert!(r.text().ends_with("\"items\":[]}\n"));
    let r = send(
        &env,
        "/apis/fixtures.example.com/v1/namespaces/no-such-ns/widgets?resourceVersion=0",
    )
    .await;
    assert_from_cache(&r, "empty CR list");
    assert_eq!(
        norm(&r.text()),
        norm(recorded("list-widgets-ns-c-empty-rv0").body())
    );
    let name = "err-get-cm-missing-namespace";
    let r = check_verbatim(&env, name).await;
    assert_consistent_fixture(&env, &r, name);
    let (_, path) = fixture_request(name);
    let r = send(&env, &with_param(&path, "resourceVersion=0")).await;
    assert_from_cache(&r, name);
    assert_eq!(
        (r.status, r.text()),
        (404, recorded(name).body().to_string())
    );
    let name = "list-cm-ns-a-trailing-slash";
    let r = check(&env, name).await;
    assert_consistent_fixture(&env, &r, name);
    let r = check_path(&env, name, &format!("{CMS_A}/?resourceVersion=0")).await;
    assert_from_cache(&r, name);
    let r = send(&env, &format!("{WIDGETS_A}/?resourceVersion=0")).await;
    assert_from_cache(&r, "CR trailing slash");
    assert_eq!(
        norm(&r.text()),
        norm(recorded("list-widgets-ns-a-rv0").body())
    );
}

per_profile!(g1_get_rv0_identical_to_rv_unset);

/// G1: GET with RV unset (forwarded) and RV=0 (cache) give byte-identical objects, as does an
/// RV the cache has reached; `/status` is the whole object.
async fn g1_get_rv0_identical_to_rv_unset(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    let r = check(&env, "get-cm-rv0").await;
    assert_from_cache(&r, "get-cm-rv0");
    assert_eq!(r.body, send(&env, &format!("{CMS_A}/cm-03")).await.body);
    for name in ["get-namespace-rv0", "get-widget-rv0"] {
        let r = check(&env, name).await;
        assert_from_cache(&r, name);
    }
    for name in [
        "get-cm",
        "get-cm-binarydata",
        "get-cm-immutable",
        "get-namespace",
        "get-pod",
        "get-secret-opaque",
        "get-service",
        "get-widget",
        "get-widget-status-subresource",
    ] {
        let r = check(&env, name).await;
        if name.ends_with("-subresource") {
            assert_forwarded(&r, name);
        } else {
            assert_consistent_fixture(&env, &r, name);
        }
        let (_, path) = fixture_request(name);
        if path.ends_with("/status") {
            continue;
        }
        let rv = rv_of(&r.json());
        for q in [
            "resourceVersion=0".to_string(),
            format!("resourceVersion={rv}"),
        ] {
            let cached = send(&env, &with_param(&path, &q)).await;
            assert_from_cache(&cached, &path);
            assert_eq!(cached.status, 200);
            assert_eq!(cached.text(), r.text(), "{name} {q}");
            assert_headers(&cached, &recorded(name), name);
        }
    }
    // The status subresource is the whole object.
    let status = send(&env, &format!("{WIDGETS_A}/w-red/status")).await;
    assert_eq!(
        status.text(),
        send(&env, &format!("{WIDGETS_A}/w-red?resourceVersion=0"))
            .await
            .text()
    );
}

per_profile!(g2_three_kinds_of_404);

/// G2: three kinds of 404: a missing object (the cache's answer at RV=0 is byte-identical to
/// the upstream's; CRs add details.group), the generic Status 404 of a built-in group, and the
/// plain-text `404 page not found` of unknown groups and unserved paths.
async fn g2_three_kinds_of_404(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    let r = check_verbatim(&env, "err-get-cm-missing-rv0").await;
    assert_from_cache(&r, "err-get-cm-missing-rv0");
    let r = check_verbatim(&env, "err-get-cm-missing").await;
    assert_consistent_fixture(&env, &r, "err-get-cm-missing");
    assert_eq!(r.text(), recorded("err-get-cm-missing-rv0").body());
    let r = check_verbatim(&env, "err-get-widget-missing").await;
    assert_consistent_fixture(&env, &r, "err-get-widget-missing");
    let (_, path) = fixture_request("err-get-widget-missing");
    let cached = send(&env, &with_param(&path, "resourceVersion=0")).await;
    assert_from_cache(&cached, "widget missing RV=0");
    assert_eq!(
        (cached.status, cached.text()),
        (404, recorded("err-get-widget-missing").body().to_string())
    );
    for name in [
        "err-get-cm-without-namespace",
        "err-get-cluster-scoped-with-namespace",
        "err-get-cluster-scoped-with-namespace-nodes",
        "err-unknown-resource-core",
        "err-unknown-resource-core-get",
        "err-unknown-subresource",
        "err-unknown-version-of-known-group",
        "err-unknown-group",
        "err-unknown-path",
        "err-unknown-resource-in-crd-group",
        "err-get-namespace-scoped-as-cluster-widget",
    ] {
        check_verbatim(&env, name).await;
        // The same with RV=0: still not a cache question.
        let (_, path) = fixture_request(name);
        let r = send(&env, &with_param(&path, "resourceVersion=0")).await;
        assert_eq!(
            (r.status, r.text()),
            (404, recorded(name).body().to_string()),
            "{name}"
        );
    }
}

per_profile!(not_synced_reads_are_passed_through);

/// A cache that has not synced yet answers nothing itself: every read of its type (lists at any
/// RV, continuations, gets, watches) is passed through to the upstream, which can answer it, so
/// no client gets a 429 the upstream would not give. Only kcache's own index selectors, which
/// the upstream does not know, get the apiserver's 429 "storage is (re)initializing" with
/// Retry-After: 1 (A4).
async fn not_synced_reads_are_passed_through(p: Profile) {
    let sim = Sim::start(SimConfig::for_profile(p)).await.unwrap();
    for o in kcache_sim::seed::fixture_dataset()
        .into_iter()
        .filter(|o| o.resource == "namespaces" || o.resource == "configmaps")
    {
        sim.create(o.group, o.resource, o.object).unwrap();
    }
    let mut cms = resource("", "v1", "configmaps");
    cms.indexes = vec![kcache::index::IndexConfig {
        name: "byData".into(),
        field: Some("data.k".into()),
        label: None,
    }];
    let config = Config {
        resources: vec![cms],
        ..Config::default()
    };
    let upstream = Upstream::from_url(&sim.url()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kcache = kcache::server::start(&config, upstream, listener, admin)
        .await
        .unwrap();
    // The reflector has not run yet (single-threaded test runtime): its streaming list is
    // answered without the end bookmark from now on, and every answer takes 3 s, so the cache
    // stays unsynced (3 s for the stream's head, 2 s of silence, 3 s for the paged list) while
    // we ask. The reads are sent together: those passed through take 3 s too.
    sim.faults().withhold_initial_events_end(true);
    sim.faults().set_latency(Duration::from_secs(3));
    let first_page = raw::request(
        kcache.addr,
        "GET",
        &format!("{CMS_A}?limit=10"),
        &[],
        b"",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(first_page.status, 200, "{}", first_page.text());
    let token = first_page.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let paths = [
        format!("{CMS_A}?resourceVersion=0"),
        format!("{CMS_A}?resourceVersion=5&limit=2"),
        format!("{CMS_A}?limit=10&continue={token}"),
        format!("{CMS_A}/cm-01?resourceVersion=0"),
        format!("{CMS_A}/cm-01"),
        format!("{CMS_A}?watch=1&timeoutSeconds=5"),
        format!("{CMS_A}?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=5"),
    ];
    let answers = futures::future::join_all(paths.iter().map(|path| {
        // A watch's head is enough.
        let max = if path.contains("watch=1") { 4 } else { 10 };
        raw::request(kcache.addr, "GET", path, &[], b"", Duration::from_secs(max))
    }))
    .await;
    for (path, r) in paths.iter().zip(answers) {
        assert!(
            r.status == 200 || r.status == 410,
            "{path}: {} {}",
            r.status,
            r.text()
        );
        assert!(
            r.header(kcache::api::CACHE_AGE_HEADER).is_none(),
            "{path}: answered by the upstream"
        );
    }
    assert!(!kcache.app.registry().all().any(|c| c.is_synced()));
    // kcache's own index selector: only the cache can answer it.
    const WANT: &str = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"storage is (re)initializing\",\"reason\":\"TooManyRequests\",\"details\":{\"retryAfterSeconds\":1},\"code\":429}\n";
    // At RV=0, and as a consistent read (RV unset), which an empty cache must not answer
    // with an empty list either.
    for path in [
        format!("{CMS_A}?resourceVersion=0&fieldSelector=data.k%3Dv"),
        format!("{CMS_A}?fieldSelector=data.k%3Dv"),
    ] {
        let r = raw::request(kcache.addr, "GET", &path, &[], b"", Duration::from_secs(5)).await;
        assert_eq!(r.status, 429, "{path}: {}", r.text());
        assert_eq!(r.text(), WANT, "{path}");
        assert_eq!(r.header("retry-after"), Some("1"), "{path}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(r.header("audit-id").is_some());
        assert_framing(&r, &path);
    }
    sim.faults().withhold_initial_events_end(false);
    sim.faults().set_latency(Duration::ZERO);
    assert!(kcache.wait_synced(Duration::from_secs(30)).await);
    let r = raw::request(
        kcache.addr,
        "GET",
        &format!("{CMS_B}?resourceVersion=0"),
        &[],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.header(kcache::api::CACHE_AGE_HEADER).is_some());
}

per_profile!(e1_compact_json_or_pretty_printing);

/// E1: compact JSON with one trailing newline for programs; `?pretty=true` or a curl/Wget/browser
/// User-Agent get 2-space indentation without the newline, from the cache as from upstream.
async fn e1_compact_json_or_pretty_printing(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    let compact_norm = |s: &str| {
        let mut v: Value = serde_json::from_str(s).unwrap();
        common::normalize(&mut v);
        v
    };
    for (name, ua) in [
        ("list-cm-ns-b-pretty-param", raw::UA),
        ("list-cm-ns-b-curl-useragent-pretty", "curl/8.5.0"),
        ("list-cm-ns-b-curl-useragent-pretty", "Wget/1.21"),
        ("list-cm-ns-b-curl-useragent-pretty", "Mozilla/5.0 (X11)"),
    ] {
        let rec = recorded(name);
        let (_, path) = fixture_request(name);
        for p in [path.clone(), with_param(&path, "resourceVersion=0")] {
            let (status, body) = get_as(&env, &p, ua).await;
            assert_eq!(status, 200, "{p}");
            assert_eq!(compact_norm(&body), compact_norm(rec.body()), "{p} as {ua}");
            assert!(
                body.starts_with("{\n  \"kind\": \"ConfigMapList\",\n  \"apiVersion\": \"v1\",\n"),
                "{p} as {ua}: {body}"
            );
            assert!(!body.ends_with('\n'), "{p} as {ua}: no trailing newline");
        }
    }
    let (_, get) = get_as(
        &env,
        &format!("{CMS_A}/cm-03?resourceVersion=0&pretty=true"),
        raw::UA,
    )
    .await;
    assert!(get.starts_with("{\n  \"kind\": \"ConfigMap\",\n"), "{get}");
    assert!(!get.ends_with('\n'));
    let compact = check_path(
        &env,
        "get-cm-rv0",
        &format!("{CMS_A}/cm-03?resourceVersion=0&pretty=false"),
    )
    .await;
    assert!(compact.text().ends_with("}\n") && !compact.text().contains("\n  "));
}

per_profile!(e8_gzip_for_large_lists);

/// E8: bodies over 128 KiB are gzipped when the client accepts gzip (the recordings show the
/// watch cache doing it for RV=0 lists too); smaller bodies never are.
async fn e8_gzip_for_large_lists(p: Profile) {
    use std::io::Read;
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    let (_, path) = fixture_request("gzip-list-cm-ns-c-big-rv0");
    let r = send_with(&env, &path, &[("Accept-Encoding", "gzip")]).await;
    assert_from_cache(&r, "big list");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert!(r.header("content-length").is_none());
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut plain)
        .expect("valid gzip");
    let uncompressed = send(&env, &path).await;
    assert!(uncompressed.header("content-encoding").is_none());
    assert_eq!(plain, uncompressed.text(), "gunzips to the plain answer");
    assert!(plain.len() > 128 * 1024);
    // Small bodies are never compressed.
    let (_, small) = fixture_request("gzip-list-cm-ns-b-small-not-compressed");
    let r = send_with(
        &env,
        &with_param(&small, "resourceVersion=0"),
        &[("Accept-Encoding", "gzip")],
    )
    .await;
    assert!(r.header("content-encoding").is_none());
    // Watches are never compressed, even with 157 KB of initial events.
    let (_, watch) = fixture_request("gzip-watch-cm-ns-c-not-compressed");
    let r = send_with(
        &env,
        &with_param(&watch, "timeoutSeconds=1"),
        &[("Accept-Encoding", "gzip")],
    )
    .await;
    assert!(r.header("content-encoding").is_none());
    assert!(r.body.len() > 128 * 1024);
}

per_profile!(e4_e5_e9_w8_other_representations_forwarded);

/// E4, E5, E9 (and W8): representations the cache does not produce are forwarded and come
/// back exactly as the upstream produces them: Tables of a type whose columns kcache cannot
/// get from the upstream (this sim serves none here), `v1beta1` Tables, protobuf only.
/// (Tables and PartialObjectMetadata kcache can produce: `tests/representations.rs`.)
async fn e4_e5_e9_w8_other_representations_forwarded(p: Profile) {
    let env = fixtures_env().await;
    assert_eq!(env.sim.profile(), p);
    const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    const TABLE_V1BETA1: &str = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    for (accept, path) in [
        (TABLE, format!("{CMS_B}?resourceVersion=0")),
        (TABLE, format!("{CMS_A}/cm-03?resourceVersion=0")),
        (TABLE_V1BETA1, format!("{CMS_B}?resourceVersion=0")),
        (PROTOBUF, format!("{CMS_B}?resourceVersion=0")),
        (PROTOBUF, format!("{WIDGETS_A}?resourceVersion=0")),
    ] {
        let r = send_with(&env, &path, &[("Accept", accept)]).await;
        assert_forwarded(&r, &path);
        let direct = raw::request(
            env.sim.addr(),
            "GET",
            &path,
            &[("Accept", accept)],
            b"",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(r.status, direct.status, "{path} as {accept}");
        assert_eq!(norm(&r.text()), norm(&direct.text()), "{path} as {accept}");
        assert_eq!(r.header("content-type"), direct.header("content-type"));
    }
    let path = format!("{CMS_B}?watch=1&resourceVersion=0&timeoutSeconds=1");
    let r = send_with(&env, &path, &[("Accept", TABLE)]).await;
    assert_forwarded(&r, "Table watch");
    assert_eq!(r.status, 200);
}
