//! `resources[].metadataOnly`: a type cached as PartialObjectMetadata only. Metadata informers
//! (client-go's metadata client, kube-runtime's `metadata_watcher`) are answered from the
//! cache with exactly the upstream's bytes; every read of whole objects, and every Table or
//! selector that needs more than metadata, goes to the upstream.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const POM_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const POM: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

fn configmap(ns: &str, name: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app},
            "annotations": {"note": "<&>"}},
        // The part a metadata-only cache does not hold.
        "data": {"big": "x".repeat(4000)}})
}

fn pod(ns: &str, name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}})
}

async fn env() -> Env {
    let mut b = EnvBuilder::default();
    let mut cms = resource("", "v1", "configmaps");
    cms.metadata_only = true;
    cms.indexes = vec![kcache::index::IndexConfig {
        name: "byApp".into(),
        field: None,
        label: Some("app".into()),
    }];
    let mut pods = resource("", "v1", "pods");
    pods.metadata_only = true;
    b.config.resources = vec![cms, pods];
    let env = b.start().await;
    for i in 0..6 {
        let app = if i % 2 == 0 { "web" } else { "db" };
        env.sim
            .create("", "configmaps", configmap("shop", &format!("cm-{i}"), app))
            .unwrap();
    }
    env.sim
        .create("", "configmaps", configmap("other", "cm-x", "web"))
        .unwrap();
    for (i, node) in ["n1", "n2", "n1"].iter().enumerate() {
        env.sim
            .create("", "pods", pod("shop", &format!("p-{i}"), node))
            .unwrap();
    }
    env.settle("", "pods").await;
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    env
}

/// Requests of `verb` on `resource` that kcache answered 200 from `source` so far.
async fn answered(env: &Env, verb: &str, resource: &str, source: &str) -> f64 {
    env.metric(&[
        "kcache_requests_total{",
        &format!("verb=\"{verb}\""),
        &format!("resource=\"{resource}\""),
        &format!("source=\"{source}\""),
        "code=\"200\"",
    ])
    .await
    .unwrap_or(0.0)
}

/// GET `path` with `accept` from kcache and from the sim: the bodies must be equal, and kcache
/// must have answered it from `source`.
async fn same_as_upstream(env: &Env, verb: &str, path: &str, accept: &str, source: &str) -> Resp {
    let resource = path
        .split('?')
        .next()
        .unwrap()
        .split('/')
        .find(|s| ["configmaps", "pods", "widgets"].contains(s))
        .unwrap();
    let before = answered(env, verb, resource, source).await;
    let headers = [("Accept", accept)];
    let ours = get_with(&env.url(), path, &headers).await;
    let theirs = get_with(&env.sim.url(), path, &headers).await;
    assert_eq!(ours.status, theirs.status, "{path} ({accept})");
    assert_eq!(ours.text(), theirs.text(), "{path} ({accept})");
    assert_eq!(
        answered(env, verb, resource, source).await,
        before + 1.0,
        "{path} ({accept}) answered from the {source}"
    );
    ours
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_reads_come_from_the_cache_and_whole_objects_from_the_upstream() {
    let env = env().await;
    // Metadata informers' reads: the upstream's bytes, from the cache.
    for path in [
        "/api/v1/configmaps?resourceVersion=0",
        "/api/v1/configmaps",
        "/api/v1/namespaces/shop/configmaps?resourceVersion=0",
        "/api/v1/namespaces/shop/configmaps?labelSelector=app%3Dweb",
        "/api/v1/configmaps?fieldSelector=metadata.namespace%3Dother",
        "/api/v1/namespaces/nobody/configmaps?resourceVersion=0",
        "/api/v1/pods?resourceVersion=0",
    ] {
        let r = same_as_upstream(&env, "list", path, POM_LIST, "cache").await;
        let list = r.json();
        assert_eq!(list["kind"], "PartialObjectMetadataList", "{path}");
        for item in list["items"].as_array().into_iter().flatten() {
            assert_eq!(item["kind"], "PartialObjectMetadata");
            assert!(item.get("data").is_none() && item.get("spec").is_none());
        }
    }
    let r = same_as_upstream(
        &env,
        "get",
        "/api/v1/namespaces/shop/configmaps/cm-1",
        POM,
        "cache",
    )
    .await;
    assert_eq!(r.json()["metadata"]["annotations"]["note"], "<&>");
    // Pages: the same items and counts as the upstream's (continue tokens are each one's own).
    let page = get_with(
        &env.url(),
        "/api/v1/namespaces/shop/configmaps?limit=4",
        &[("Accept", POM_LIST)],
    )
    .await
    .json();
    let upstream = get_with(
        &env.sim.url(),
        "/api/v1/namespaces/shop/configmaps?limit=4",
        &[("Accept", POM_LIST)],
    )
    .await
    .json();
    assert_eq!(page["items"], upstream["items"]);
    assert_eq!(
        page["metadata"]["remainingItemCount"],
        upstream["metadata"]["remainingItemCount"]
    );
    let token = page["metadata"]["continue"].as_str().unwrap();
    let rest = get_with(
        &env.url(),
        &format!("/api/v1/namespaces/shop/configmaps?limit=4&continue={token}"),
        &[("Accept", POM_LIST)],
    )
    .await
    .json();
    assert_eq!(rest["items"].as_array().unwrap().len(), 2);

    // kcache's own index queries list what the cache holds: PartialObjectMetadata.
    let r = get(
        &env.url(),
        "/apis/kcache.dev/v1/indexes/core/v1/configmaps/byApp?values=db",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let by_app = r.json();
    assert_eq!(by_app["kind"], "PartialObjectMetadataList");
    let names: Vec<&str> = by_app["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cm-1", "cm-3", "cm-5"]);

    // Whole objects are not in the cache: the upstream answers.
    same_as_upstream(
        &env,
        "list",
        "/api/v1/configmaps?resourceVersion=0",
        "application/json",
        "upstream",
    )
    .await;
    same_as_upstream(
        &env,
        "get",
        "/api/v1/namespaces/shop/configmaps/cm-1",
        "application/json",
        "upstream",
    )
    .await;
    // A field outside metadata cannot be checked on metadata.
    same_as_upstream(
        &env,
        "list",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1",
        POM_LIST,
        "upstream",
    )
    .await;
    // kubectl's Table of ConfigMaps has a DATA column: not printable from metadata.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    same_as_upstream(&env, "list", "/api/v1/configmaps", table, "upstream").await;
}

/// key → resourceVersion of what the sim holds.
fn upstream(env: &Env) -> BTreeMap<String, String> {
    common::mirror::upstream_view(&env.sim, "configmaps", &|_| true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_metadata_informers_through_kcache_end_equal_to_the_upstream() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube_client::core::PartialObjectMeta;
    use kube_runtime::{reflector, watcher, WatchStreamExt};
    let env = env().await;
    let client =
        kube_client::Client::try_from(kube_client::Config::new(env.url().parse().unwrap()))
            .unwrap();
    // kube-rs reads `PartialObjectMeta` with metadata-only requests, as client-go's metadata
    // informers do.
    let api: kube_client::Api<PartialObjectMeta<ConfigMap>> = kube_client::Api::all(client);
    // A list-then-watch informer and a WatchList (streaming) one.
    let mut stores = Vec::new();
    for config in [
        watcher::Config::default().any_semantic(),
        watcher::Config::default().streaming_lists(),
    ] {
        let (reader, writer) = reflector::store();
        let stream = reflector(writer, watcher(api.clone(), config)).applied_objects();
        let task = tokio::spawn(async move {
            let mut stream = stream.boxed();
            while stream.next().await.is_some() {}
        });
        tokio::time::timeout(Duration::from_secs(60), reader.wait_until_ready())
            .await
            .expect("store ready in time")
            .unwrap();
        stores.push((reader, task));
    }
    // Churn: creates, updates of data only (a new RV, the same metadata otherwise), label
    // changes and deletes.
    for round in 0..5 {
        env.sim
            .create(
                "",
                "configmaps",
                configmap("shop", &format!("new-{round}"), "web"),
            )
            .unwrap();
        let mut o = env
            .sim
            .get("", "configmaps", Some("shop"), &format!("cm-{round}"))
            .unwrap();
        o["data"]["big"] = json!(format!("changed {round}"));
        env.sim.update("", "configmaps", o).unwrap();
        let mut o = env.sim.get("", "configmaps", Some("shop"), "cm-5").unwrap();
        o["metadata"]["labels"]["round"] = json!(round.to_string());
        env.sim.update("", "configmaps", o).unwrap();
        env.sim
            .delete("", "configmaps", Some("shop"), &format!("new-{round}"))
            .ok();
    }
    for (reader, _) in &stores {
        wait_until("the metadata informer equals the upstream", || async {
            common::mirror::store_view(reader) == upstream(&env)
        })
        .await;
        let cm5 = reader
            .state()
            .into_iter()
            .find(|m| m.metadata.name.as_deref() == Some("cm-5"))
            .unwrap();
        assert_eq!(
            cm5.metadata.labels.as_ref().unwrap().get("round"),
            Some(&"4".to_string())
        );
    }
    for (_, task) in stores {
        task.abort();
    }
    // Every read they made was answered by the cache, none by the upstream.
    for verb in ["list", "watch"] {
        assert_eq!(
            answered(&env, verb, "configmaps", "upstream").await,
            0.0,
            "{verb}s forwarded"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_holds_the_metadata_and_watches_carry_it() {
    let env = env().await;
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    // What the cache holds is the upstream's PartialObjectMetadata, not the 4 KB objects.
    let upstream: Value = get_with(
        &env.sim.url(),
        "/api/v1/configmaps",
        &[("Accept", POM_LIST)],
    )
    .await
    .json();
    let metadata_bytes: usize = upstream["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| serde_json::to_vec(i).unwrap().len())
        .sum();
    let (objects, bytes) = cache.size();
    assert_eq!(objects, upstream["items"].as_array().unwrap().len());
    assert!(
        bytes <= metadata_bytes * 11 / 10 && bytes < objects * 4000,
        "{bytes} cached bytes for {objects} objects ({metadata_bytes} of metadata)"
    );
    // A metadata watch: events and bookmarks are PartialObjectMetadata.
    let rv = upstream["metadata"]["resourceVersion"].as_str().unwrap();
    let mut w = Watch::open_with(
        &env.url(),
        &format!("/api/v1/namespaces/shop/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"),
        &[("Accept", POM)],
    )
    .await;
    let mut o = env.sim.get("", "configmaps", Some("shop"), "cm-2").unwrap();
    o["metadata"]["labels"]["changed"] = json!("yes");
    env.sim.update("", "configmaps", o).unwrap();
    let ev = loop {
        let ev = w
            .next_json(Duration::from_secs(10))
            .await
            .expect("an event");
        if ev["type"] != "BOOKMARK" {
            break ev;
        }
        assert_eq!(ev["object"]["kind"], "PartialObjectMetadata");
    };
    assert_eq!(ev["type"], "MODIFIED");
    assert_eq!(ev["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(ev["object"]["metadata"]["labels"]["changed"], "yes");
    // The same line as the upstream's own metadata watch from the same RV.
    let mut theirs = Watch::open_with(
        &env.sim.url(),
        &format!("/api/v1/namespaces/shop/configmaps?watch=1&resourceVersion={rv}"),
        &[("Accept", POM)],
    )
    .await;
    let upstream_ev = theirs
        .next_json(Duration::from_secs(10))
        .await
        .expect("the upstream's event");
    assert_eq!(ev, upstream_ev);
}

/// Widgets (a custom resource) cached as metadata only, with printer columns `columns` in
/// their CRD and the matching Table columns served by the sim.
async fn widgets_env(columns: Value) -> Env {
    let mut b = EnvBuilder {
        widgets: true,
        ..EnvBuilder::default()
    };
    let mut widgets = resource("fixtures.example.com", "v1", "widgets");
    widgets.metadata_only = true;
    b.config.resources = vec![widgets];
    let env = b.start().await;
    create_widget_crd(&env.sim, Some(columns.clone()));
    // The Table columns the apiserver derives from them: Name, then each column.
    let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0})];
    for c in columns.as_array().unwrap() {
        defs.push(json!({"name": c["name"], "type": c["type"], "format": "",
            "description": format!("Custom resource definition column (in JSONPath format): {}", c["jsonPath"].as_str().unwrap()),
            "priority": 0}));
    }
    env.sim.serve_table_columns(
        "fixtures.example.com",
        "widgets",
        bytes::Bytes::from(serde_json::to_vec(&defs).unwrap()),
    );
    for (name, owner) in [("w-1", "ann"), ("w-2", "bob")] {
        env.sim
            .create(
                "fixtures.example.com",
                "widgets",
                json!({"apiVersion": "fixtures.example.com/v1", "kind": "Widget",
                    "metadata": {"name": name, "namespace": "shop", "labels": {"owner": owner}},
                    "spec": {"size": 3, "color": "red"}}),
            )
            .unwrap();
    }
    env.last_write_of(
        "fixtures.example.com",
        "widgets",
        "fixtures.example.com/v1",
        "Widget",
    )
    .await;
    env
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
const WIDGETS: &str = "/apis/fixtures.example.com/v1/namespaces/shop/widgets";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_of_metadata_columns_come_from_a_metadata_only_cache() {
    let env = widgets_env(json!([
        {"name": "Owner", "type": "string", "jsonPath": ".metadata.labels.owner"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]))
    .await;
    let before = answered(&env, "list", "widgets", "cache").await;
    let t = get_with(&env.url(), WIDGETS, &[("Accept", TABLE)]).await;
    assert_eq!(t.status, 200, "{}", t.text());
    assert_eq!(
        answered(&env, "list", "widgets", "cache").await,
        before + 1.0
    );
    let t = t.json();
    let rows: Vec<(Value, Value)> = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["cells"][0].clone(), r["cells"][1].clone()))
        .collect();
    assert_eq!(
        rows,
        vec![(json!("w-1"), json!("ann")), (json!("w-2"), json!("bob"))]
    );
    for r in t["rows"].as_array().unwrap() {
        assert_eq!(r["object"]["kind"], "PartialObjectMetadata");
    }
    // Rows with whole objects need the objects.
    let before = answered(&env, "list", "widgets", "upstream").await;
    get_with(
        &env.url(),
        &format!("{WIDGETS}?includeObject=Object"),
        &[("Accept", TABLE)],
    )
    .await;
    assert_eq!(
        answered(&env, "list", "widgets", "upstream").await,
        before + 1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_of_spec_columns_are_passed_through() {
    let env = widgets_env(json!([
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]))
    .await;
    let before = answered(&env, "list", "widgets", "upstream").await;
    get_with(&env.url(), WIDGETS, &[("Accept", TABLE)]).await;
    assert_eq!(
        answered(&env, "list", "widgets", "upstream").await,
        before + 1.0
    );
    // Metadata reads of the same type still come from the cache.
    same_as_upstream(&env, "list", WIDGETS, POM_LIST, "cache").await;
}
