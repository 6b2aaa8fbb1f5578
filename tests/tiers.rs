//! Tiers: kcache in front of kcache in front of the sim. kcache speaks the Kubernetes API on
//! both sides, so an edge kcache (tier 2) can cache from a central one (tier 1) instead of
//! from the apiserver. What must hold through two tiers is what holds through one: watchers
//! of the edge end equal to the upstream, a relist at tier 1 reaches them as ordinary events
//! (no 410, no relist of their own), WatchList's end bookmark and bookmarks pass, and a
//! consistent read at the edge is never stale.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::mirror::{
    cache_view, converge_within, kube_runtime_configmaps, spawn_mirror_opts, store_view,
    upstream_view, Mirror, MirrorOpts, Start,
};
use common::{get, resource, Env, EnvBuilder};
use kcache::server::Running;
use kcache_sim::seed;
use serde_json::Value;

/// The sim, tier 1 (`env.kcache`, in front of the sim) and tier 2 (`edge`, in front of tier 1),
/// both caching what `b` configures.
struct Tiers {
    env: Env,
    edge: Running,
}

async fn tiers(b: EnvBuilder) -> Tiers {
    let config = b.config.clone();
    let env = b.start().await;
    let edge = env.start_edge(&config).await;
    Tiers { env, edge }
}

fn label<'a>(o: &'a Value, k: &str) -> &'a str {
    o["metadata"]["labels"][k].as_str().unwrap_or("")
}

/// ConfigMaps in the upstream at the start.
const CONFIGMAPS: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_at_tier_1_reaches_tier_2_watchers_as_events() {
    let b = EnvBuilder {
        seed: seed::configmaps(CONFIGMAPS, 4, 7),
        ..EnvBuilder::default()
    }
    .resources(vec![resource("", "v1", "configmaps")]);
    let Tiers { env, edge } = tiers(b).await;
    let base = edge.url();
    let cms = "/api/v1/configmaps".to_string();
    let start = |start: Start| MirrorOpts {
        start,
        timeout_seconds: 10,
        ..MirrorOpts::default()
    };
    let recent = edge.cache("", "v1", "configmaps").unwrap().rv();
    type Want = Box<dyn Fn(&Value) -> bool>;
    let mirror = |selector: &str, opts: MirrorOpts| {
        spawn_mirror_opts(base.clone(), cms.clone(), selector.into(), opts)
    };
    let mirrors: Vec<(&str, Mirror, Want)> = vec![
        (
            "list+watch",
            mirror("", start(Start::List)),
            Box::new(|_| true),
        ),
        (
            "label app=web",
            mirror("labelSelector=app%3Dweb", start(Start::List)),
            Box::new(|o| label(o, "app") == "web"),
        ),
        (
            "watch from RV=0",
            mirror("", start(Start::WatchFromZero)),
            Box::new(|_| true),
        ),
        (
            "WatchList (end bookmark through two tiers)",
            mirror("", start(Start::WatchList(recent))),
            Box::new(|_| true),
        ),
        (
            "metadata watch",
            mirror(
                "",
                MirrorOpts {
                    accept: Some(
                        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
                    ),
                    ..start(Start::WatchFromZero)
                },
            ),
            Box::new(|_| true),
        ),
    ];
    // kube-runtime's watcher against the edge, as a real client.
    let (reader, runtime) = kube_runtime_configmaps(&base).await;
    let sim = env.sim.clone();
    for (name, m, keep) in &mirrors {
        let want = upstream_view(&sim, "configmaps", keep.as_ref());
        converge_within(name, m, Duration::from_secs(60), &|| want.clone()).await;
    }
    let starts_before: BTreeMap<&str, usize> = mirrors
        .iter()
        .map(|(name, m, _)| (*name, m.lock().unwrap().starts))
        .collect();
    let central = env.kcache.cache("", "v1", "configmaps").unwrap();
    let edge_cache = edge.cache("", "v1", "configmaps").unwrap();
    let (central_relists, edge_relists) = (central.relists(), edge_cache.relists());

    // Tier 1 is cut off from the sim while half the ConfigMaps are deleted, some changed and
    // some created, and the sim forgets its history: tier 1's resume gets a 410 and it relists.
    env.sim.faults().set_unreachable(true);
    let mut names: Vec<(String, String)> = sim
        .list("", "configmaps")
        .iter()
        .map(|o| {
            (
                o["metadata"]["namespace"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    names.sort();
    for (ns, name) in names.iter().take(CONFIGMAPS / 2) {
        sim.delete("", "configmaps", Some(ns), name)
            .expect("delete");
    }
    for (ns, name) in names.iter().skip(CONFIGMAPS / 2).take(200) {
        let mut o = sim.get("", "configmaps", Some(ns), name).unwrap();
        o["data"]["changed"] = Value::from("yes");
        o["metadata"]["labels"]["app"] = Value::from("web");
        sim.update("", "configmaps", o).expect("update");
    }
    for i in 0..100 {
        let o = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("new-{i:03}"), "namespace": "bench-1",
                         "labels": {"app": "web"}},
            "data": {"k": "v"}
        });
        sim.create("", "configmaps", o).expect("create");
    }
    env.sim.faults().restart();
    env.sim.faults().set_unreachable(false);

    // Both tiers catch up; only tier 1 relisted.
    let upstream_all = upstream_view(&sim, "configmaps", &|_| true);
    for (tier, cache) in [("tier 1", &central), ("tier 2", &edge_cache)] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while cache_view(cache) != upstream_all {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{tier}'s cache did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(central.relists() > central_relists, "tier 1 relisted");
    assert_eq!(
        edge_cache.relists(),
        edge_relists,
        "tier 2 followed tier 1's relist as events, without a relist of its own"
    );
    // Every watcher of the edge ends equal to the upstream, by events.
    for (name, m, keep) in &mirrors {
        let want = upstream_view(&sim, "configmaps", keep.as_ref());
        converge_within(name, m, Duration::from_secs(60), &|| want.clone()).await;
        let s = m.lock().unwrap();
        assert_eq!(
            s.starts, starts_before[name],
            "{name}: restarted from a list or initial events"
        );
        assert!(s.events >= 1, "{name}: saw the changes as events");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while store_view(&reader) != upstream_all {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kube-runtime store through two tiers: {} objects, upstream {}",
            reader.state().len(),
            upstream_all.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    runtime.abort();
}

#[tokio::test]
async fn consistent_reads_through_two_tiers_are_never_stale() {
    let b = EnvBuilder {
        seed: seed::configmaps(200, 2, 3),
        ..EnvBuilder::default()
    }
    .resources(vec![resource("", "v1", "configmaps")]);
    let Tiers { env, edge } = tiers(b).await;
    // Each write is acknowledged by the upstream before the read is sent: a consistent read
    // (resourceVersion unset) at the edge must include it, at its RV or a later one.
    for i in 0..40 {
        let name = format!("w-{i:02}");
        let written = env
            .sim
            .create(
                "",
                "configmaps",
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "bench-1"}, "data": {"i": i.to_string()}}),
            )
            .expect("write");
        let rv: u64 = written["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let got = get(
            &edge.url(),
            &format!("/api/v1/namespaces/bench-1/configmaps/{name}"),
        )
        .await;
        assert_eq!(got.status, 200, "GET {name} at the edge: {}", got.text());
        let list = get(&edge.url(), "/api/v1/namespaces/bench-1/configmaps").await;
        assert_eq!(list.status, 200);
        let list = list.json();
        let list_rv: u64 = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            list_rv >= rv,
            "list at {list_rv} is older than the write at {rv}"
        );
        let found = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["metadata"]["name"] == name.as_str());
        assert!(found, "the consistent list at the edge lacks {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_watchers_end_equal_to_the_upstream_through_faults_at_tier_1() {
    let b = EnvBuilder {
        seed: seed::configmaps(500, 4, 9),
        ..EnvBuilder::default()
    }
    .resources(vec![resource("", "v1", "configmaps")]);
    let Tiers { env, edge } = tiers(b).await;
    let base = edge.url();
    let cms = "/api/v1/configmaps".to_string();
    let recent = edge.cache("", "v1", "configmaps").unwrap().rv();
    let mirror = |selector: &str, start: Start| {
        spawn_mirror_opts(
            base.clone(),
            cms.clone(),
            selector.into(),
            MirrorOpts {
                start,
                ..MirrorOpts::default()
            },
        )
    };
    type Want = Box<dyn Fn(&Value) -> bool>;
    let mirrors: Vec<(&str, Mirror, Want)> = vec![
        ("list+watch", mirror("", Start::List), Box::new(|_| true)),
        (
            "namespace bench-2",
            mirror("fieldSelector=metadata.namespace%3Dbench-2", Start::List),
            Box::new(|o| o["metadata"]["namespace"] == "bench-2"),
        ),
        (
            "WatchList",
            mirror("", Start::WatchList(recent)),
            Box::new(|_| true),
        ),
    ];
    // Churn on the upstream while tier 1's upstream watches are dropped, then answered 410,
    // then its requests fail: every fault tier 1 handles must stay invisible at the edge
    // (beyond, at worst, a 410 that makes an edge watcher relist from the edge).
    let sim = env.sim.clone();
    let churn = tokio::spawn(async move {
        let objects = sim.list("", "configmaps");
        for i in 0..600usize {
            let o = &objects[(i * 7) % objects.len()];
            let (ns, name) = (
                o["metadata"]["namespace"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            );
            match i % 10 {
                0 => {
                    let _ = sim.delete("", "configmaps", Some(&ns), &name);
                }
                1 => {
                    let mut n = o.clone();
                    let m = n["metadata"].as_object_mut().unwrap();
                    m.remove("resourceVersion");
                    m.remove("uid");
                    m.remove("creationTimestamp");
                    m.insert("name".into(), Value::from(format!("{name}-{i}")));
                    let _ = sim.create("", "configmaps", n);
                }
                _ => {
                    if let Some(mut cur) = sim.get("", "configmaps", Some(&ns), &name) {
                        cur["data"]["i"] = Value::from(i.to_string());
                        let _ = sim.update("", "configmaps", cur);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let faults = env.sim.faults();
    for _ in 0..8 {
        faults.drop_watches();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    faults.fail_all_watches_with_410(true);
    tokio::time::sleep(Duration::from_secs(2)).await;
    faults.fail_all_watches_with_410(false);
    faults.fail_requests(5, 500);
    churn.await.unwrap();
    let sim = env.sim.clone();
    for (name, m, keep) in &mirrors {
        converge_within(name, m, Duration::from_secs(60), &|| {
            upstream_view(&sim, "configmaps", keep.as_ref())
        })
        .await;
    }
    assert!(
        env.kcache.cache("", "v1", "configmaps").unwrap().relists() >= 1,
        "the 410s made tier 1 relist"
    );
}
