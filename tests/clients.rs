//! Real clients through kcache: kube-rs `Api` list/get/watch and kube-runtime's watcher with
//! both initial-list strategies, against the simulated apiserver under churn. Every test runs
//! against each upstream profile (v1.28, v1.34: `NAME::v1_28`, `NAME::v1_34`).

mod common;
#[path = "sim_common/mod.rs"]
mod raw;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{resource, EnvBuilder};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kcache_sim::seed::apply as apply_churn;
use kcache_sim::seed::{self, Churn};
use kcache_sim::Profile;
use kube_client::api::{Api, ListParams, WatchEvent, WatchParams};
use kube_client::{Client, Config};
use kube_runtime::{reflector, watcher, WatchStreamExt};

fn client(url: &str) -> Client {
    Client::try_from(Config::new(url.parse().unwrap())).unwrap()
}

/// name → resourceVersion of what the sim holds now.
fn sim_state(sim: &kcache_sim::Sim, group: &str, resource: &str) -> BTreeMap<String, String> {
    sim.list(group, resource)
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            (
                format!(
                    "{}/{}",
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap()
                ),
                m["resourceVersion"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn store_state<K: kube_client::Resource>(items: Vec<Arc<K>>) -> BTreeMap<String, String> {
    items
        .iter()
        .map(|o| {
            let m = o.meta();
            (
                format!(
                    "{}/{}",
                    m.namespace.clone().unwrap_or_default(),
                    m.name.clone().unwrap()
                ),
                m.resource_version.clone().unwrap(),
            )
        })
        .collect()
}

per_profile!(kube_rs_api_list_get_watch);

async fn kube_rs_api_list_get_watch(p: Profile) {
    let env = EnvBuilder::fixtures().start().await;
    assert_eq!(env.sim.profile(), p);
    let api: Api<ConfigMap> = Api::namespaced(client(&env.url()), "fixtures-a");

    // RV=0 list from the cache; RV unset (consistent) goes upstream; both see the same objects.
    let cached = api.list(&ListParams::default().match_any()).await.unwrap();
    let consistent = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(cached.items.len(), 25);
    let names = |l: &kube_client::core::ObjectList<ConfigMap>| {
        l.items
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&cached), names(&consistent));
    assert_eq!(names(&cached)[0], "cm-01", "items in key order");

    // Paging as kubectl does (limit, RV unset): the first page is a consistent read from the
    // upstream; its continue token is followed wherever it can be answered exactly.
    let mut all = Vec::new();
    let mut lp = ListParams::default().limit(10);
    loop {
        let page = api.list(&lp).await.unwrap();
        all.extend(page.items.iter().map(|c| c.metadata.name.clone().unwrap()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!(all, names(&cached));

    let cm = api.get("cm-03").await.unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("cm-03"));
    let missing = api.get("nope").await.unwrap_err();
    assert!(
        matches!(missing, kube_client::Error::Api(ref s) if s.code == 404),
        "{missing:?}"
    );

    // Watch from the list RV sees a create, an update and a delete in order.
    let rv = cached.metadata.resource_version.clone().unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(20), &rv)
        .await
        .unwrap()
        .boxed();
    let mut obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "watch-new-1", "namespace": "fixtures-a"}, "data": {"k": "v"}});
    env.sim.create("", "configmaps", obj.clone()).unwrap();
    obj["data"]["k"] = "v2".into();
    env.sim.update("", "configmaps", obj).unwrap();
    env.sim
        .delete("", "configmaps", Some("fixtures-a"), "watch-new-1")
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .expect("event in time")
            .unwrap()
            .expect("stream open");
        match ev {
            WatchEvent::Added(c) => seen.push(("ADDED", c.metadata.name.unwrap())),
            WatchEvent::Modified(c) => seen.push(("MODIFIED", c.metadata.name.unwrap())),
            WatchEvent::Deleted(c) => seen.push(("DELETED", c.metadata.name.unwrap())),
            _ => {}
        }
    }
    let want: Vec<_> = ["ADDED", "MODIFIED", "DELETED"]
        .into_iter()
        .map(|t| (t, "watch-new-1".to_string()))
        .collect();
    assert_eq!(seen, want);
}

/// kube-runtime's watcher feeding a reflector store, with either initial-list strategy, ends
/// equal to the upstream after churn.
async fn runtime_watcher_converges(p: Profile, streaming: bool) {
    let mut b = EnvBuilder::default().resources(vec![
        resource("", "v1", "pods"),
        resource("", "v1", "configmaps"),
    ]);
    b.seed = seed::demo_cluster(&seed::DemoSpec::default());
    let mut churn = Churn::new(3, &b.seed);
    let env = b.start().await;
    assert_eq!(env.sim.profile(), p);
    let api: Api<Pod> = Api::all(client(&env.url()));
    let mut cfg = watcher::Config::default().any_semantic();
    if streaming {
        cfg = cfg.streaming_lists();
    }
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, cfg)).applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = stream.boxed();
        while stream.next().await.is_some() {}
    });
    tokio::time::timeout(Duration::from_secs(20), reader.wait_until_ready())
        .await
        .expect("store ready in time")
        .unwrap();
    for _ in 0..200 {
        apply_churn(&env.sim, churn.next_op());
    }
    let want = sim_state(&env.sim, "", "pods");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let got = store_state(reader.state());
        if got == want {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "store never equalled the upstream: {} vs {} objects",
            got.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();
}

per_profile!(runtime_watcher_list_watch);

async fn runtime_watcher_list_watch(p: Profile) {
    runtime_watcher_converges(p, false).await;
}

per_profile!(runtime_watcher_streaming_list);

async fn runtime_watcher_streaming_list(p: Profile) {
    runtime_watcher_converges(p, true).await;
}

per_profile!(paged_list_when_upstream_lacks_streaming_lists);

/// An upstream without WatchList (the v1.28 default) rejects sendInitialEvents; kcache falls
/// back to a paged list and still serves and follows changes.
async fn paged_list_when_upstream_lacks_streaming_lists(p: Profile) {
    let mut b = EnvBuilder::fixtures();
    b.sim.watchlist = false;
    b.config.upstream.page_size = 7;
    let env = b.start().await;
    assert_eq!(env.sim.profile(), p);
    let api: Api<ConfigMap> = Api::namespaced(client(&env.url()), "fixtures-a");
    let list = api.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(list.items.len(), 25);
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "late", "namespace": "fixtures-a"}});
    let created = env.sim.create("", "configmaps", obj).unwrap();
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap();
    // A read at the new RV waits for the cache to get there.
    let got = api
        .get_with("late", &kube_client::api::GetParams::at(rv))
        .await
        .unwrap();
    assert_eq!(got.metadata.resource_version.as_deref(), Some(rv));
}

per_profile!(restricted_cache_forwards_outside_its_scope);

/// A cache restricted to one namespace answers inside it and forwards the rest.
async fn restricted_cache_forwards_outside_its_scope(p: Profile) {
    let mut b = EnvBuilder::fixtures();
    let mut cms = resource("", "v1", "configmaps");
    cms.namespace = Some("fixtures-b".into());
    b.config.resources = vec![cms];
    let env = b.start().await;
    assert_eq!(env.sim.profile(), p);
    assert_eq!(env.kcache.cache("", "v1", "configmaps").unwrap().len(), 3);
    let inside: Api<ConfigMap> = Api::namespaced(client(&env.url()), "fixtures-b");
    assert_eq!(
        inside
            .list(&ListParams::default().match_any())
            .await
            .unwrap()
            .items
            .len(),
        3
    );
    let outside: Api<ConfigMap> = Api::namespaced(client(&env.url()), "fixtures-a");
    assert_eq!(
        outside
            .list(&ListParams::default().match_any())
            .await
            .unwrap()
            .items
            .len(),
        25
    );
    let all: Api<ConfigMap> = Api::all(client(&env.url()));
    assert_eq!(
        all.list(&ListParams::default().match_any())
            .await
            .unwrap()
            .items
            .len(),
        58
    );
}

per_profile!(consistent_reads_from_cache_are_never_stale);

/// Consistent reads (resourceVersion unset) are answered from the cache, never stale: a write
/// the upstream acknowledged before the read is always visible, under churn, and the reads
/// themselves do not reach the upstream (only the shared probes do).
async fn consistent_reads_from_cache_are_never_stale(p: Profile) {
    let seed_objects = seed::demo_cluster(&seed::DemoSpec::default());
    let mut churn = Churn::new(5, &seed_objects);
    let env = EnvBuilder {
        seed: seed_objects,
        ..EnvBuilder::default()
    }
    .resources(vec![
        resource("", "v1", "configmaps"),
        resource("", "v1", "pods"),
    ])
    .start()
    .await;
    assert_eq!(env.sim.profile(), p);
    let sim = env.sim.clone();
    let churner = tokio::spawn(async move {
        loop {
            apply_churn(&sim, churn.next_op());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let api: Api<ConfigMap> = Api::namespaced(client(&env.url()), "shop");
    let before = env.sim.request_counts();
    let rounds = 20;
    for i in 0..rounds {
        // Every few rounds the upstream watch drops just before the write, so kcache's cache
        // lags and the read must wait for it (a stale answer would miss the object).
        if i % 2 == 0 {
            env.sim.faults().drop_watches();
        }
        let name = format!("fresh-{i}");
        let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop"}, "data": {"i": i.to_string()}});
        let created = env.sim.create("", "configmaps", obj).unwrap();
        let rv = created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        // Acknowledged by the upstream: a consistent GET and LIST through kcache must see it.
        let got = api.get(&name).await.unwrap();
        assert_eq!(got.metadata.resource_version.as_deref(), Some(rv.as_str()));
        let list = api.list(&ListParams::default()).await.unwrap();
        assert!(
            list.items
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(name.as_str())),
            "stale list"
        );
    }
    churner.abort();
    let after = env.sim.request_counts();
    // Each consistent read costs the upstream one or two one-object requests at most: one-item
    // probe lists, or for a GET whose cache lags (the watch was just dropped) the GET itself.
    let upstream = (after.0 - before.0) + (after.1 - before.1);
    assert!(
        upstream <= 4 * rounds,
        "too many upstream requests for {} reads: {upstream}",
        2 * rounds
    );
}
