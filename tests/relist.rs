//! A relist at scale: while kcache is cut off from its upstream, 10,500 ConfigMaps (and 500
//! Pods) are deleted, changed and created and the upstream's history is compacted, so kcache's watch
//! resume gets a 410 and it relists. kcache turns the difference into ordinary events; every
//! downstream watcher — of every kind kcache serves — must then end equal to the upstream, with
//! every DELETE seen, and without being told to relist (no 410 to any of them).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::mirror::{
    cache_view, converge_within, kube_runtime_configmaps, spawn_mirror_opts, store_view,
    upstream_view, Mirror, MirrorOpts, Start,
};
use common::{resource, EnvBuilder};
use kcache::cache::ListReason;
use kcache::index::IndexConfig;
use kcache_sim::seed;
use serde_json::Value;

/// ConfigMaps in the upstream before the relist.
const CONFIGMAPS: usize = 10_500;
/// Of them, deleted while kcache is cut off (every one must reach every watcher).
const DELETED: usize = 9_000;
/// Of the survivors, changed while cut off (and moved into the `app=web` selection).
const CHANGED: usize = 1_000;
/// Created while cut off.
const CREATED: usize = 500;
/// Pods (watched per node, index-routed), of which half are deleted while cut off.
const PODS: usize = 1_000;

fn ns_of(o: &Value) -> &str {
    o["metadata"]["namespace"].as_str().unwrap_or("")
}

fn label<'a>(o: &'a Value, k: &str) -> &'a str {
    o["metadata"]["labels"][k].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relist_of_10k_changes_reaches_every_watcher() {
    let mut b = EnvBuilder {
        seed: seed::configmaps(CONFIGMAPS, 4, 7),
        ..EnvBuilder::default()
    };
    // The pods' namespaces (bench-1, bench-2) are among the ConfigMaps' already.
    b.seed.extend(
        seed::pods(PODS, 10, 2, 8)
            .into_iter()
            .filter(|o| o.resource != "namespaces"),
    );
    let mut cms = resource("", "v1", "configmaps");
    // A label index, so label-selected watchers are routed through index dispatch.
    cms.indexes = vec![IndexConfig {
        name: "byApp".into(),
        field: None,
        label: Some("app".into()),
    }];
    let env = b
        .resources(vec![cms, resource("", "v1", "pods")])
        .start()
        .await;
    // The upstream hands out the real apiserver's ConfigMap columns (from the recordings), so
    // the Table watch is answered from kcache's cache, not passed through.
    let columns: Value =
        serde_json::from_slice(&common::fixture("table-list-cm-ns-a.json")).unwrap();
    env.sim.serve_table_columns(
        "",
        "configmaps",
        serde_json::to_vec(&columns["columnDefinitions"])
            .unwrap()
            .into(),
    );
    let base = env.url();
    let cms_all = "/api/v1/configmaps".to_string();
    let mirror = |collection: &str, selector: &str, opts: MirrorOpts| {
        spawn_mirror_opts(base.clone(), collection.into(), selector.into(), opts)
    };
    // Long enough for 10,500 initial events to reach a debug-built client on a loaded machine.
    let start = |start: Start| MirrorOpts {
        start,
        timeout_seconds: 20,
        ..MirrorOpts::default()
    };
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(true);
    let recent = env.kcache.cache("", "v1", "configmaps").unwrap().rv();

    type Want = Box<dyn Fn(&Value) -> bool>;
    let mut mirrors: Vec<(&str, Mirror, &str, Want)> = vec![
        (
            "unfiltered list+watch",
            mirror(&cms_all, "", start(Start::List)),
            "configmaps",
            Box::new(|_| true),
        ),
        (
            "namespace bench-2",
            mirror(
                "/api/v1/namespaces/bench-2/configmaps",
                "",
                start(Start::List),
            ),
            "configmaps",
            Box::new(|o| ns_of(o) == "bench-2"),
        ),
        (
            "label app=web (index-routed)",
            mirror(&cms_all, "labelSelector=app%3Dweb", start(Start::List)),
            "configmaps",
            Box::new(|o| label(o, "app") == "web"),
        ),
        (
            "label tier!=front (scanned)",
            mirror(&cms_all, "labelSelector=tier%21%3Dfront", start(Start::List)),
            "configmaps",
            Box::new(|o| label(o, "tier") != "front"),
        ),
        (
            "field metadata.namespace=bench-3 (scanned: metadata fields are not indexed)",
            mirror(
                &cms_all,
                "fieldSelector=metadata.namespace%3Dbench-3",
                start(Start::List),
            ),
            "configmaps",
            Box::new(|o| ns_of(o) == "bench-3"),
        ),
        (
            "field metadata.namespace!=bench-1 (scanned)",
            mirror(
                &cms_all,
                "fieldSelector=metadata.namespace%21%3Dbench-1",
                start(Start::List),
            ),
            "configmaps",
            Box::new(|o| ns_of(o) != "bench-1"),
        ),
        (
            "pods on node-3 (index-routed)",
            mirror(
                "/api/v1/pods",
                "fieldSelector=spec.nodeName%3Dnode-3",
                start(Start::List),
            ),
            "pods",
            Box::new(|o| o["spec"]["nodeName"] == "node-3"),
        ),
        (
            "watch from RV=0",
            mirror(&cms_all, "", start(Start::WatchFromZero)),
            "configmaps",
            Box::new(|_| true),
        ),
        (
            "WatchList",
            mirror(&cms_all, "", start(Start::WatchList(recent))),
            "configmaps",
            Box::new(|_| true),
        ),
        (
            "metadata watch",
            mirror(
                &cms_all,
                "",
                MirrorOpts {
                    accept: Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"),
                    ..start(Start::WatchFromZero)
                },
            ),
            "configmaps",
            Box::new(|_| true),
        ),
        (
            "Table watch",
            mirror(
                &cms_all,
                "",
                MirrorOpts {
                    accept: Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
                    ..start(Start::WatchFromZero)
                },
            ),
            "configmaps",
            Box::new(|_| true),
        ),
        (
            "slow reader",
            mirror(
                &cms_all,
                "",
                MirrorOpts {
                    gate: Some(gate_rx),
                    ..start(Start::List)
                },
            ),
            "configmaps",
            Box::new(|_| true),
        ),
    ];

    // kube-runtime's watcher, as a real client.
    let (reader, runtime) = kube_runtime_configmaps(&base).await;

    // Every mirror holds the whole starting state before the upstream is cut off.
    let sim = env.sim.clone();
    for (name, m, res, keep) in &mirrors {
        let want = upstream_view(&sim, res, keep.as_ref());
        converge_within(name, m, Duration::from_secs(60), &|| want.clone()).await;
    }
    let starts_before: BTreeMap<&str, usize> = mirrors
        .iter()
        .map(|(name, m, ..)| (*name, m.lock().unwrap().starts))
        .collect();
    let events_before: BTreeMap<&str, usize> = mirrors
        .iter()
        .map(|(name, m, ..)| (*name, m.lock().unwrap().events))
        .collect();

    // Cut off: the slow reader stops reading, the upstream changes and forgets its history.
    gate_tx.send_replace(false);
    env.sim.faults().set_unreachable(true);
    let mut names: Vec<(String, String)> = env
        .sim
        .list("", "configmaps")
        .iter()
        .map(|o| {
            (
                ns_of(o).to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    names.sort();
    for (ns, name) in names.iter().take(DELETED) {
        env.sim
            .delete("", "configmaps", Some(ns), name)
            .expect("delete");
    }
    for (ns, name) in names.iter().skip(DELETED).take(CHANGED) {
        let mut o = env.sim.get("", "configmaps", Some(ns), name).unwrap();
        o["data"]["changed"] = Value::from("yes");
        o["metadata"]["labels"]["app"] = Value::from("web");
        env.sim.update("", "configmaps", o).expect("update");
    }
    for i in 0..CREATED {
        let o = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("new-{i:05}"), "namespace": format!("bench-{}", i % 4 + 1),
                         "labels": {"app": if i % 2 == 0 { "web" } else { "db" }, "tier": "front"}},
            "data": {"k": "v"}
        });
        env.sim.create("", "configmaps", o).expect("create");
    }
    let pods: Vec<(String, String)> = env
        .sim
        .list("", "pods")
        .iter()
        .map(|o| {
            (
                ns_of(o).to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (ns, name) in pods.iter().step_by(2) {
        env.sim.delete("", "pods", Some(ns), name).expect("delete");
    }
    env.sim.faults().restart();
    env.sim.faults().set_unreachable(false);

    // kcache relists (its resume is answered 410) and catches up with the upstream.
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    let upstream_all = upstream_view(&sim, "configmaps", &|_| true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while cache_view(&cache) != upstream_all {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kcache's cache did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        cache.relists() >= 1,
        "the resume was expired: kcache relisted"
    );
    // The reflector recorded why (what the admin `/status` shows).
    assert_eq!(
        cache.last_list().get().map(|l| l.reason),
        Some(ListReason::Expired)
    );
    gate_tx.send_replace(true);

    // Every watcher ends equal to the upstream…
    for (name, m, res, keep) in &mirrors {
        let want = upstream_view(&sim, res, keep.as_ref());
        converge_within(name, m, Duration::from_secs(60), &|| want.clone()).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while store_view(&reader) != upstream_all {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kube-runtime store: {} objects, upstream {}",
            reader.state().len(),
            upstream_all.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The routed watcher got more of the relist's events than its queue holds (256, see
    // `cache/dispatch.rs`), all appended at once: its queue overflowed and it went on from the
    // history, and still missed nothing (above).
    let routed = "label app=web (index-routed)";
    let routed_events = mirrors
        .iter()
        .find(|(name, ..)| *name == routed)
        .map(|(_, m, ..)| m.lock().unwrap().events - events_before[routed])
        .unwrap();
    assert!(
        routed_events > 256,
        "{routed}: {routed_events} events from the relist, not enough to overflow its queue"
    );
    // …by events, not by being told to start over (no 410, no relist of their own).
    for (name, m, ..) in mirrors.drain(..) {
        let s = m.lock().unwrap();
        assert_eq!(
            s.starts, starts_before[name],
            "{name}: restarted from a list or initial events"
        );
        assert!(s.events >= 1, "{name}: saw the changes as events");
    }
    runtime.abort();
}
