//! Indexes through kcache's field-selector extension: lists and watches on configured
//! field-path indexes answered from the cache (never forwarded: the upstream would 400), the
//! apiserver's own 400 for every other unsupported field.

mod common;

use std::time::Duration;

use common::{get, resource, EnvBuilder, Watch};
use kcache::index::IndexConfig;
use serde_json::json;

fn pod(name: &str, node: &str, images: &[&str], app: &str) -> serde_json::Value {
    let containers: Vec<_> = images
        .iter()
        .enumerate()
        .map(|(i, im)| json!({"name": format!("c{i}"), "image": im}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "idx", "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": containers},
    })
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

async fn env() -> common::Env {
    let mut pods = resource("", "v1", "pods");
    pods.indexes = vec![
        IndexConfig {
            name: "byImage".into(),
            field: Some("spec.containers[*].image".into()),
            label: None,
        },
        IndexConfig {
            name: "byApp".into(),
            field: None,
            label: Some("app".into()),
        },
    ];
    let env = EnvBuilder::default().resources(vec![pods]).start().await;
    for (n, node, images, app) in [
        ("a", "n1", &["nginx:1.27", "sidecar:1"][..], "web"),
        ("b", "n2", &["redis:7"][..], "db"),
        ("c", "n1", &["nginx:1.27"][..], "web"),
        ("d", "n2", &["sidecar:1"][..], "web"),
    ] {
        env.sim
            .create("", "pods", pod(n, node, images, app))
            .unwrap();
    }
    env.settle("", "pods").await;
    env
}

#[tokio::test]
async fn lists_select_on_index_paths_and_names() {
    let env = env().await;
    let base = env.url();
    for q in [
        "fieldSelector=spec.containers.image=nginx:1.27",
        "fieldSelector=byImage=nginx:1.27",
        "fieldSelector=byImage==nginx:1.27&resourceVersion=0",
        "fieldSelector=byImage=nginx:1.27,spec.nodeName=n1",
        "fieldSelector=byImage=nginx:1.27&labelSelector=app=web",
    ] {
        let r = get(&base, &format!("/api/v1/namespaces/idx/pods?{q}")).await;
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        assert_eq!(names(&r.json()), ["a", "c"], "{q}");
    }
    let r = get(&base, "/api/v1/pods?fieldSelector=byImage!=sidecar:1").await;
    assert_eq!(names(&r.json()), ["b", "c"]);
    // Paged, consistent: the continue token continues from the cache too.
    let r = get(
        &base,
        "/api/v1/pods?fieldSelector=byImage=sidecar:1&limit=1",
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(names(&v), ["a"]);
    let token = v["metadata"]["continue"].as_str().unwrap().to_string();
    let r = get(
        &base,
        &format!("/api/v1/pods?fieldSelector=byImage=sidecar:1&limit=1&continue={token}"),
    )
    .await;
    assert_eq!(names(&r.json()), ["d"]);
    // Other fields keep the apiserver's exact 400.
    let r = get(
        &base,
        "/api/v1/pods?fieldSelector=spec.containers%5B*%5D.image=x",
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "field label not supported: spec.containers[*].image"
    );
    let r = get(&base, "/api/v1/pods?fieldSelector=byApp=web").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["message"], "field label not supported: byApp");
}

#[tokio::test]
async fn watches_select_on_index_fields() {
    let env = env().await;
    let base = env.url();
    let mut w = Watch::open(
        &base,
        "/api/v1/namespaces/idx/pods?watch=1&resourceVersion=0&fieldSelector=byImage=redis:7&timeoutSeconds=10",
    )
    .await;
    let first = w.next_json(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["metadata"]["name"], "b");
    env.sim
        .create("", "pods", pod("e", "n3", &["redis:7"], "db"))
        .unwrap();
    env.sim
        .create("", "pods", pod("f", "n3", &["other"], "db"))
        .unwrap();
    let mut c = env.sim.get("", "pods", Some("idx"), "c").unwrap();
    c["spec"]["containers"][0]["image"] = json!("redis:7");
    env.sim.update("", "pods", c).unwrap();
    let got: Vec<(String, String)> = w
        .drain(Duration::from_millis(500))
        .await
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ADDED".to_string(), "e".to_string()),
            ("ADDED".to_string(), "c".to_string())
        ]
    );
}

#[tokio::test]
async fn the_index_endpoint_lists_queries_and_counts() {
    let env = env().await;
    let base = env.url();
    let r = get(&base, "/apis/kcache.dev/v1/indexes").await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["kind"], "IndexList");
    let pods = &v["items"][0];
    assert_eq!(pods["resource"], "pods");
    let index_names: Vec<&str> = pods["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert!(index_names.contains(&"spec.nodeName"), "{index_names:?}");
    assert!(
        index_names.ends_with(&["byImage", "byApp"]),
        "{index_names:?}"
    );

    let q = "/apis/kcache.dev/v1/indexes/core/v1/pods/byImage?values=redis:7,sidecar:1";
    let r = get(&base, q).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["kind"], "PodList");
    assert_eq!(names(&v), ["a", "b", "d"]);
    // Paged with the LIST envelope and continue tokens.
    let r = get(&base, &format!("{q}&limit=2")).await;
    let v = r.json();
    assert_eq!(names(&v), ["a", "b"]);
    assert_eq!(v["metadata"]["remainingItemCount"], 1);
    let token = v["metadata"]["continue"].as_str().unwrap().to_string();
    let v = get(&base, &format!("{q}&limit=2&continue={token}"))
        .await
        .json();
    assert_eq!(names(&v), ["d"]);
    assert!(v["metadata"]["continue"].is_null());

    let r = get(
        &base,
        "/apis/kcache.dev/v1/indexes/core/v1/pods/spec.nodeName/counts",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["counts"], json!({"n1": 2, "n2": 2}));

    let r = get(
        &base,
        "/apis/kcache.dev/v1/indexes/core/v1/pods/nope?values=x",
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["kind"], "Status");
    let r = get(&base, "/apis/kcache.dev/v1/indexes/core/v1/pods/byApp").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["kind"], "Status");
}
