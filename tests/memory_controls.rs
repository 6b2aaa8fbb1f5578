//! Memory controls per resource.
//!
//! - Annotations left out before caching (`dropAnnotations`). Clients get each object exactly
//!   as the apiserver would send it without those annotations: in LIST, GET and WATCH, byte
//!   for byte; protobuf readers get JSON from the cache (the upstream's protobuf would still
//!   carry the annotations).
//! - A memory budget (`memoryBudget`). A resource whose cached objects go over it is no longer
//!   cached: every read of it is passed through to the upstream, exactly as for an uncached
//!   resource, until kcache restarts; its open watches end cleanly and their clients resume
//!   from their last resourceVersion against the upstream, missing nothing.

mod common;

use std::time::Duration;

use common::mirror::{
    kube_runtime_configmaps, spawn_mirror_opts, store_view, upstream_view, MirrorOpts, Start,
};
use common::*;
use k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent;
use kcache::config::Config;
use kcache::index::IndexConfig;
use prost::Message;
use serde_json::{json, Value};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn applied(name: &str, others: bool) -> Value {
    let mut annotations = json!({
        LAST_APPLIED: format!("{{\"apiVersion\":\"v1\",\"data\":{{\"big\":\"{}\"}},\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{name}\"}}}}\n", "x".repeat(2000)),
    });
    if others {
        annotations["a.example.com/keep"] = json!("<kept>");
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
        "data": {"big": "x".repeat(2000)}})
}

async fn env() -> Env {
    let mut b = EnvBuilder::default();
    let mut cms = resource("", "v1", "configmaps");
    cms.drop_annotations = vec![LAST_APPLIED.into()];
    b.config.resources = vec![cms];
    let env = b.start().await;
    env.sim
        .create("", "configmaps", applied("only", false))
        .unwrap();
    env.sim
        .create("", "configmaps", applied("among-others", true))
        .unwrap();
    env.settle("", "configmaps").await;
    env
}

/// The upstream's bytes of `name` once the annotation is gone, at the RV it had before: what
/// the apiserver would have sent for the object without it.
async fn upstream_without(env: &Env, name: &str, rv: &str) -> String {
    let mut o = env.sim.get("", "configmaps", Some("shop"), name).unwrap();
    let annotations = o["metadata"]["annotations"].as_object_mut().unwrap();
    annotations.remove(LAST_APPLIED);
    if annotations.is_empty() {
        o["metadata"].as_object_mut().unwrap().remove("annotations");
    }
    let updated = env.sim.update("", "configmaps", o).unwrap();
    let new_rv = updated["metadata"]["resourceVersion"].as_str().unwrap();
    let body = get(
        &env.sim.url(),
        &format!("/api/v1/namespaces/shop/configmaps/{name}"),
    )
    .await
    .text();
    body.replace(
        &format!("\"resourceVersion\":\"{new_rv}\""),
        &format!("\"resourceVersion\":\"{rv}\""),
    )
}

#[tokio::test]
async fn dropped_annotations_are_left_out_byte_for_byte() {
    let env = env().await;
    for name in ["only", "among-others"] {
        let ours = get(
            &env.url(),
            &format!("/api/v1/namespaces/shop/configmaps/{name}?resourceVersion=0"),
        )
        .await;
        assert_eq!(ours.status, 200);
        let text = ours.text();
        assert!(!text.contains(LAST_APPLIED), "{name}: {text}");
        let rv = ours.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(text, upstream_without(&env, name, &rv).await, "{name}");
    }
    let kept = get(
        &env.url(),
        "/api/v1/namespaces/shop/configmaps/among-others?resourceVersion=0",
    )
    .await
    .json();
    assert_eq!(
        kept["metadata"]["annotations"],
        json!({"a.example.com/keep": "<kept>"})
    );
    let only = get(
        &env.url(),
        "/api/v1/namespaces/shop/configmaps/only?resourceVersion=0",
    )
    .await
    .json();
    assert!(only["metadata"].get("annotations").is_none());
}

#[tokio::test]
async fn lists_and_watches_carry_the_stripped_objects() {
    let env = env().await;
    let list = get(&env.url(), "/api/v1/configmaps?resourceVersion=0").await;
    assert_eq!(list.status, 200);
    assert!(!list.text().contains(LAST_APPLIED));
    assert_eq!(list.json()["items"].as_array().unwrap().len(), 2);
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut w = Watch::open(
        &env.url(),
        &format!("/api/v1/configmaps?watch=1&resourceVersion={rv}"),
    )
    .await;
    env.sim
        .create("", "configmaps", applied("new", true))
        .unwrap();
    let ev = w
        .next_json(Duration::from_secs(10))
        .await
        .expect("an event");
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "new");
    assert_eq!(
        ev["object"]["metadata"]["annotations"],
        json!({"a.example.com/keep": "<kept>"})
    );
    // Protobuf readers get JSON from the cache: the upstream's protobuf has the annotation.
    // (The first protobuf read may still go upstream, while kcache finds it has no mirror.)
    let url = env.url();
    let read_as_protobuf = || {
        get_with(
            &url,
            "/api/v1/configmaps?resourceVersion=0",
            &[(
                "Accept",
                "application/vnd.kubernetes.protobuf, application/json",
            )],
        )
    };
    assert_eq!(read_as_protobuf().await.status, 200);
    wait_until(
        "the protobuf mirror gives up on the stripped type",
        || async {
            let r = read_as_protobuf().await;
            r.header("content-type") == Some("application/json") && !r.text().contains(LAST_APPLIED)
        },
    )
    .await;
}

// ---- memoryBudget ------------------------------------------------------------------------

/// A ConfigMap of about `size` bytes of JSON in namespace `shop`.
fn sized(name: &str, size: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
        "data": {"blob": "b".repeat(size)}})
}

/// Configmaps with `budget` (and a label index, so kcache's index endpoints have one to
/// answer for) and secrets without one.
fn budgeted(budget: &str) -> EnvBuilder {
    let mut cms = resource("", "v1", "configmaps");
    cms.memory_budget = Some(budget.into());
    cms.indexes = vec![IndexConfig {
        name: "byApp".into(),
        field: None,
        label: Some("app".into()),
    }];
    EnvBuilder::default().resources(vec![cms, resource("", "v1", "secrets")])
}

/// The same request to kcache and to the sim: both answers, kcache's first.
async fn both(env: &Env, path: &str, headers: &[(&str, &str)]) -> (Resp, Resp) {
    let ours = get_with(&env.url(), path, headers).await;
    let theirs = get_with(&env.sim.url(), path, headers).await;
    (ours, theirs)
}

#[tokio::test]
async fn over_budget_at_the_initial_list_passes_the_resource_through() {
    let mut b = budgeted("4Ki");
    for i in 0..8 {
        b.seed.push(kcache_sim::seed::SeedObject {
            group: "",
            resource: "configmaps",
            object: sized(&format!("cm-{i}"), 1000),
        });
    }
    // Started and settled although configmaps never synced: over budget is final.
    let env = b.start().await;
    env.sim
        .create(
            "",
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "shop"}, "data": {"k": "dg=="}}),
        )
        .unwrap();
    env.settle("", "secrets").await;
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    assert!(cache.budget().is_over());
    assert_eq!(cache.size(), (0, 0), "nothing of it is kept");

    // Every form of read is the upstream's answer, byte for byte, and reaches the upstream.
    let json_accept: &[(&str, &str)] = &[];
    let table: &[(&str, &str)] = &[(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )];
    let metadata: &[(&str, &str)] = &[(
        "Accept",
        "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json",
    )];
    let protobuf: &[(&str, &str)] = &[(
        "Accept",
        "application/vnd.kubernetes.protobuf, application/json",
    )];
    for (path, headers) in [
        ("/api/v1/configmaps?resourceVersion=0", json_accept),
        ("/api/v1/configmaps", json_accept),
        ("/api/v1/namespaces/shop/configmaps?limit=3", json_accept),
        ("/api/v1/namespaces/shop/configmaps/cm-3", json_accept),
        (
            "/api/v1/namespaces/shop/configmaps/cm-3?resourceVersion=0",
            json_accept,
        ),
        (
            "/api/v1/namespaces/shop/configmaps?resourceVersion=0",
            table,
        ),
        ("/api/v1/configmaps?resourceVersion=0", metadata),
        ("/api/v1/configmaps?resourceVersion=0", protobuf),
        ("/api/v1/namespaces/shop/configmaps/cm-3", protobuf),
    ] {
        let before = env.sim.request_counts();
        let (ours, theirs) = both(&env, path, headers).await;
        let after = env.sim.request_counts();
        assert_eq!(ours.status, 200, "{path} {headers:?}: {}", ours.text());
        assert_eq!(ours.status, theirs.status, "{path}");
        assert_eq!(ours.body, theirs.body, "{path} {headers:?}");
        assert_eq!(
            ours.header("content-type"),
            theirs.header("content-type"),
            "{path}"
        );
        assert!(
            ours.header("x-kcache-cache-age").is_none(),
            "{path}: not from the cache"
        );
        let reads = |c: (u64, u64, u64, u64)| c.0 + c.1;
        assert_eq!(
            reads(after),
            reads(before) + 2,
            "{path}: both reached the sim"
        );
    }
    // A watch too: through kcache, the upstream's events.
    let rv = get(&env.url(), "/api/v1/configmaps").await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let watches = env.sim.request_counts().2;
    let mut w = Watch::open(
        &env.url(),
        &format!("/api/v1/configmaps?watch=1&resourceVersion={rv}"),
    )
    .await;
    assert_eq!(w.status, 200);
    assert!(w.headers.get("x-kcache-cache-age").is_none());
    assert_eq!(
        env.sim.request_counts().2,
        watches + 1,
        "the watch is the upstream's"
    );
    env.sim.create("", "configmaps", sized("late", 10)).unwrap();
    let ev = w
        .next_json(Duration::from_secs(10))
        .await
        .expect("an event");
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "late");

    // kcache's own indexes of it cannot be answered: a clear Status, not a wrong answer.
    for path in [
        "/apis/kcache.dev/v1/indexes/core/v1/configmaps/byApp?values=web",
        "/apis/kcache.dev/v1/indexes/core/v1/configmaps/byApp/counts",
    ] {
        let r = get(&env.url(), path).await;
        assert_eq!(r.status, 503, "{path}: {}", r.text());
        let status = r.json();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "ServiceUnavailable");
        assert_eq!(status["code"], 503);
        let message = status["message"].as_str().unwrap();
        assert!(
            message.contains("configmaps") && message.contains("memoryBudget"),
            "{message}"
        );
    }

    // Nor are they listed among kcache's indexes any more.
    let listed = get(&env.url(), "/apis/kcache.dev/v1/indexes").await.json();
    let resources: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["resource"].as_str().unwrap())
        .collect();
    assert!(!resources.contains(&"configmaps"), "{resources:?}");
    assert!(resources.contains(&"secrets"), "{resources:?}");

    // The other resource is still served from the cache.
    let secrets = get(&env.url(), "/api/v1/secrets?resourceVersion=0").await;
    assert_eq!(secrets.status, 200);
    assert!(
        secrets.header("x-kcache-cache-age").is_some(),
        "from the cache"
    );

    // Metrics, readiness.
    let m = env.metrics().await;
    assert_eq!(
        sample(
            &m,
            &["kcache_cache_over_budget{", "resource=\"configmaps\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &m,
            &["kcache_cache_budget_bytes{", "resource=\"configmaps\""]
        ),
        Some(4096.0)
    );
    assert_eq!(
        sample(&m, &["kcache_cache_over_budget{", "resource=\"secrets\""]),
        None,
        "no budget, no series"
    );
    assert_eq!(
        sample(&m, &["kcache_cached_objects{", "resource=\"configmaps\""]),
        Some(0.0)
    );
    assert!(
        sample(
            &m,
            &[
                "kcache_requests_total{",
                "verb=\"list\"",
                "resource=\"configmaps\"",
                "source=\"upstream\""
            ]
        )
        .is_some_and(|n| n >= 1.0),
        "{m}"
    );
    let ready = get(&env.admin_url(), "/readyz?verbose").await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    let text = ready.text();
    let line = text
        .lines()
        .find(|l| l.contains("cache v1/configmaps"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.starts_with("[+]cache v1/configmaps ok (warning: over memoryBudget"),
        "{line}"
    );
    assert!(text.contains("[+]cache v1/secrets ok\n"), "{text}");
    assert!(text.ends_with("readyz check passed\n"), "{text}");
    assert_eq!(get(&env.admin_url(), "/readyz").await.status, 200);
}

/// One raw client-go-style follower of every ConfigMap: list, then watch from the list's RV
/// for as long as the server keeps the stream open (`timeoutSeconds` far away), so that the
/// only end it sees is kcache's.
struct Follower {
    view: common::mirror::View,
    rv: u64,
}

impl Follower {
    /// Apply one event; panics on anything but ADDED, MODIFIED, DELETED and BOOKMARK.
    fn apply(&mut self, ev: &Value) {
        let o = &ev["object"];
        let rv = common::mirror::rv_of(o);
        match ev["type"].as_str().unwrap() {
            "ADDED" | "MODIFIED" => {
                self.view.insert(common::mirror::key(o), rv.to_string());
            }
            "DELETED" => {
                self.view.remove(&common::mirror::key(o));
            }
            "BOOKMARK" => {}
            other => panic!("{other} event: {ev}"),
        }
        self.rv = self.rv.max(rv);
    }
}

/// The next length-prefixed frame of a protobuf watch; None at its end (or after `timeout`).
async fn next_frame(w: &mut Watch, timeout: Duration) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if w.buffered().len() >= 4 {
            let len = u32::from_be_bytes(w.buffered()[..4].try_into().unwrap()) as usize;
            if w.buffered().len() >= 4 + len {
                let frame: Vec<u8> = w.take_buffered(4 + len);
                return Some(frame[4..].to_vec());
            }
        }
        if !w.read_more(deadline).await {
            return None;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_during_churn_ends_watches_cleanly_and_they_resume_upstream() {
    let mut b = budgeted("24Ki");
    for i in 0..5 {
        b.seed.push(kcache_sim::seed::SeedObject {
            group: "",
            resource: "configmaps",
            object: sized(&format!("seed-{i}"), 1000),
        });
    }
    let env = b.start().await;
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    assert!(!cache.budget().is_over(), "under budget at first");
    let base = env.url();

    // A raw follower, a client-go-style mirror and kube-runtime's watcher, all through kcache.
    let list = get(&base, "/api/v1/configmaps?resourceVersion=0").await;
    assert!(
        list.header("x-kcache-cache-age").is_some(),
        "from the cache"
    );
    let list = list.json();
    let mut follower = Follower {
        view: list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (common::mirror::key(o), common::mirror::rv_of(o).to_string()))
            .collect(),
        rv: list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
    };
    let watch_path = |rv: u64| {
        format!("/api/v1/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion={rv}")
    };
    let mut w = Watch::open(&base, &watch_path(follower.rv)).await;
    assert_eq!(w.status, 200);
    assert!(
        w.headers.get("x-kcache-cache-age").is_some(),
        "from the cache"
    );
    // A protobuf watch (client-go's typed clients), once the type's protobuf mirror serves.
    let protobuf: &[(&str, &str)] = &[(
        "Accept",
        "application/vnd.kubernetes.protobuf, application/json",
    )];
    wait_until("protobuf answered from the cache", || async {
        let r = get_with(&base, "/api/v1/configmaps?resourceVersion=0", protobuf).await;
        r.header("x-kcache-cache-age").is_some()
            && r.header("content-type") == Some("application/vnd.kubernetes.protobuf")
    })
    .await;
    let mut pw = Watch::open_with(&base, &watch_path(follower.rv), protobuf).await;
    assert_eq!(pw.status, 200);
    assert!(
        pw.headers.get("x-kcache-cache-age").is_some(),
        "from the cache"
    );
    let mirror = spawn_mirror_opts(
        base.clone(),
        "/api/v1/configmaps".into(),
        String::new(),
        MirrorOpts {
            start: Start::List,
            timeout_seconds: 600,
            ..MirrorOpts::default()
        },
    );
    let (store, runtime) = kube_runtime_configmaps(&base).await;

    // Churn: creates (each ~1 KiB, so the budget is crossed part way), updates and deletes,
    // going on after the switch.
    let sim = env.sim.clone();
    let churn = tokio::spawn(async move {
        for i in 0..60 {
            sim.create("", "configmaps", sized(&format!("cm-{i}"), 1000))
                .unwrap();
            if i % 3 == 2 {
                let mut o = sim
                    .get("", "configmaps", Some("shop"), &format!("cm-{}", i - 1))
                    .unwrap();
                o["data"]["blob"] = json!("changed");
                sim.update("", "configmaps", o).unwrap();
            }
            if i % 5 == 4 {
                sim.delete("", "configmaps", Some("shop"), &format!("cm-{}", i - 3))
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });

    // The raw watch: events from the cache, then a clean end (no ERROR event), once kcache
    // went over the budget and not before.
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    let mut from_cache = 0;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(!left.is_zero(), "the watch did not end");
        match w.next_json(left).await {
            Some(ev) => {
                assert_ne!(ev["type"], "ERROR", "a clean end, not {ev}");
                follower.apply(&ev);
                from_cache += 1;
            }
            None if w.ended => break,
            None => {}
        }
    }
    assert!(
        cache.budget().is_over(),
        "the stream ended because of the budget"
    );
    assert!(from_cache > 0, "the watch was live before the switch");
    // The protobuf watch ends cleanly too, without an ERROR frame (its mirror stopped with the
    // cache: no 410 for a frame it could no longer make).
    let mut frames = 0;
    while let Some(frame) = next_frame(&mut pw, EVENTUALLY).await {
        let ev = WatchEvent::decode(&frame[..]).expect("WatchEvent");
        assert_ne!(ev.r#type.as_deref(), Some("ERROR"), "a clean end");
        frames += 1;
    }
    assert!(pw.ended, "the protobuf watch ended");
    assert!(frames > 0, "the protobuf watch was live before the switch");
    // Nothing of the resource is kept any more.
    assert_eq!(cache.size(), (0, 0));
    assert_eq!(cache.snapshot().objects.len(), 0);

    // The follower resumes from the last RV it got: answered by the upstream, which knows
    // that RV (no 410), and with every change since.
    let watches = env.sim.request_counts().2;
    let mut w = Watch::open(&base, &watch_path(follower.rv)).await;
    assert_eq!(w.status, 200);
    assert!(
        w.headers.get("x-kcache-cache-age").is_none(),
        "passed through"
    );
    assert!(env.sim.request_counts().2 > watches, "the upstream's watch");
    churn.await.unwrap();
    let want = || upstream_view(&env.sim, "configmaps", &|_| true);
    while follower.view != want() {
        let ev = w.next_json(EVENTUALLY).await.unwrap_or_else(|| {
            panic!(
                "the follower's view stayed {:?}, not {:?}",
                follower.view,
                want()
            )
        });
        assert_ne!(ev["type"], "ERROR", "{ev}");
        follower.apply(&ev);
    }

    // The client-go-style mirror and kube-runtime end equal to the upstream, without a relist.
    common::mirror::converge("mirror", &mirror, &want).await;
    assert_eq!(
        mirror.lock().unwrap().starts,
        1,
        "no relist: no 410 reached the mirror"
    );
    wait_until("kube-runtime's store equals the upstream", || async {
        store_view(&store) == want()
    })
    .await;
    runtime.abort();

    let m = env.metrics().await;
    assert_eq!(
        sample(
            &m,
            &["kcache_cache_over_budget{", "resource=\"configmaps\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, &["kcache_cached_objects{", "resource=\"configmaps\""]),
        Some(0.0)
    );
    assert!(
        sample(
            &m,
            &[
                "kcache_watchers_closed_total{",
                "resource=\"configmaps\"",
                "reason=\"over_budget\""
            ]
        )
        .is_some_and(|n| n >= 1.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, &["kcache_watchers{", "resource=\"configmaps\""]),
        Some(0.0),
        "no watch of it is served from the cache any more"
    );
}

#[test]
fn memory_budgets_are_quantities() {
    let budget = |q: &str| {
        Config::parse(&format!(
            "resources:\n- version: v1\n  resource: pods\n  memoryBudget: '{q}'\n"
        ))
        .map(|c| c.resources[0].memory_budget_bytes())
    };
    for (q, bytes) in [
        ("512Mi", 512 << 20),
        ("2Gi", 2 << 30),
        ("500M", 500_000_000),
        ("1000000", 1_000_000),
        ("1.5Gi", 3 << 29),
        ("64k", 64_000),
        ("1e6", 1_000_000),
    ] {
        assert_eq!(budget(q).unwrap(), Some(bytes), "{q}");
    }
    let none = Config::parse("resources:\n- version: v1\n  resource: pods\n").unwrap();
    assert_eq!(
        none.resources[0].memory_budget_bytes(),
        None,
        "absent: no budget"
    );
    for q in [
        "", "lots", "-1Gi", "0", "1.5", "512MB", "100m", "1Gi ", "Gi",
    ] {
        let e = budget(q).unwrap_err();
        let text = kcache::error::Report(&e).to_string();
        assert!(
            text.starts_with("resources[0].memoryBudget:"),
            "{q:?}: {text}"
        );
    }
    // A number in YAML is taken as bytes.
    let c = Config::parse("resources:\n- version: v1\n  resource: pods\n  memoryBudget: 4096\n")
        .unwrap();
    assert_eq!(c.resources[0].memory_budget_bytes(), Some(4096));
}
