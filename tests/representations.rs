//! Table and PartialObjectMetadata answers from the cache (what `kubectl get` and metadata
//! informers ask for). The cells' bytes are checked against the recordings in
//! `tests/table_fixtures.rs`; this checks the wiring: negotiation, list/get/watch forms,
//! includeObject, pagination metadata, and forwarding when kcache cannot print a type.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{create_widget_crd, fixture, get_with, Env, EnvBuilder, Watch};
use serde_json::Value;

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const POM_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const POM: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// The recorded columnDefinitions of a Table fixture, as raw bytes.
fn recorded_columns(name: &str) -> Bytes {
    let v: Value = serde_json::from_slice(&fixture(name)).unwrap();
    Bytes::from(serde_json::to_vec(&v["columnDefinitions"]).unwrap())
}

async fn env() -> Env {
    let env = EnvBuilder::fixtures().start().await;
    // The sim hands out the real apiserver's column definitions (from the recordings) and the
    // widgets CRD, as an upstream would; kcache computes every row itself.
    env.sim.serve_table_columns(
        "",
        "configmaps",
        recorded_columns("table-list-cm-ns-a.json"),
    );
    env.sim
        .serve_table_columns("", "pods", recorded_columns("table-list-pods-ns-a.json"));
    env.sim.serve_table_columns(
        "fixtures.example.com",
        "widgets",
        recorded_columns("table-list-widgets-ns-a.json"),
    );
    create_widget_crd(&env.sim, None);
    env
}

fn from_cache(r: &common::Resp) -> bool {
    r.header("x-kubernetes-pf-flowschema-uid").is_none()
}

#[tokio::test]
async fn tables_from_the_cache() {
    let env = env().await;
    let base = env.url();
    // Consistent reads are the cache's once it can prove them: the upstream's last write is
    // of the type read (in a namespace the reads do not show).
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let r = get_with(
        &base,
        "/api/v1/namespaces/fixtures-a/configmaps?limit=500",
        &[("Accept", TABLE)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(from_cache(&r), "kubectl get answered by kcache");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let t = r.json();
    assert_eq!(
        (t["kind"].as_str(), t["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(
        serde_json::to_vec(&t["columnDefinitions"]).unwrap(),
        &recorded_columns("table-list-cm-ns-a.json")[..]
    );
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 25);
    assert_eq!(rows[0]["cells"][0], "cm-01");
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
    // Pagination metadata like any list.
    let p = get_with(
        &base,
        "/api/v1/namespaces/fixtures-a/configmaps?limit=5",
        &[("Accept", TABLE)],
    )
    .await
    .json();
    assert_eq!(p["rows"].as_array().unwrap().len(), 5);
    assert_eq!(p["metadata"]["remainingItemCount"], 20);
    assert!(p["metadata"]["continue"].is_string());
    // includeObject.
    let none = get_with(
        &base,
        "/api/v1/namespaces/fixtures-b/configmaps?includeObject=None",
        &[("Accept", TABLE)],
    )
    .await
    .json();
    assert!(none["rows"][0]["object"].is_null());
    let obj = get_with(
        &base,
        "/api/v1/namespaces/fixtures-b/configmaps?includeObject=Object",
        &[("Accept", TABLE)],
    )
    .await
    .json();
    assert_eq!(obj["rows"][0]["object"]["kind"], "ConfigMap");
    let bad = get_with(
        &base,
        "/api/v1/namespaces/fixtures-b/configmaps?includeObject=Bogus",
        &[("Accept", TABLE)],
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.text().contains("includeObject: Invalid value"),
        "{}",
        bad.text()
    );
    // A GET: one row, the object's RV.
    env.last_write_of("", "pods", "v1", "Pod").await;
    let g = get_with(
        &base,
        "/api/v1/namespaces/fixtures-a/pods/pod-1a",
        &[("Accept", TABLE)],
    )
    .await;
    assert!(from_cache(&g));
    let g = g.json();
    assert_eq!(g["rows"].as_array().unwrap().len(), 1);
    assert_eq!(g["rows"][0]["cells"][0], "pod-1a");
    assert_eq!(
        g["metadata"]["resourceVersion"],
        g["rows"][0]["object"]["metadata"]["resourceVersion"]
    );
    // Custom resources: columns from the CRD's additionalPrinterColumns.
    env.last_write_of(
        "fixtures.example.com",
        "widgets",
        "fixtures.example.com/v1",
        "Widget",
    )
    .await;
    let w = get_with(
        &base,
        "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets",
        &[("Accept", TABLE)],
    )
    .await;
    assert!(from_cache(&w));
    let w = w.json();
    let red = w["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "w-red")
        .unwrap()
        .clone();
    assert_eq!(red["cells"][1], 3, "Size column from .spec.size");
    assert_eq!(red["cells"][2], "red");
    // A type whose columns kcache cannot get (the sim gives none for secrets): forwarded.
    let s = get_with(
        &base,
        "/api/v1/namespaces/fixtures-a/secrets",
        &[("Accept", TABLE)],
    )
    .await;
    assert!(!from_cache(&s));
}

#[tokio::test]
async fn table_watch_sends_columns_once() {
    let env = env().await;
    let base = env.url();
    let mut w = Watch::open_with(
        &base,
        "/api/v1/namespaces/fixtures-b/configmaps?watch=1&resourceVersion=0&timeoutSeconds=5",
        &[("Accept", TABLE)],
    )
    .await;
    let first = w.next_json(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Table");
    assert!(first["object"]["columnDefinitions"].is_array());
    let second = w.next_json(Duration::from_secs(5)).await.unwrap();
    assert!(second["object"]["columnDefinitions"].is_null());
    assert_eq!(second["object"]["rows"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn partial_object_metadata_from_the_cache() {
    let env = env().await;
    let base = env.url();
    let l = get_with(
        &base,
        "/api/v1/namespaces/fixtures-a/configmaps?limit=5&resourceVersion=0",
        &[("Accept", POM_LIST)],
    )
    .await;
    assert!(from_cache(&l));
    let l = l.json();
    assert_eq!(l["kind"], "PartialObjectMetadataList");
    assert_eq!(
        l["items"].as_array().unwrap().len(),
        25,
        "limit ignored at RV=0"
    );
    assert_eq!(l["items"][0]["kind"], "PartialObjectMetadata");
    assert!(l["items"][0].get("data").is_none());
    let empty = get_with(
        &base,
        "/api/v1/namespaces/nowhere/configmaps?resourceVersion=0",
        &[("Accept", POM_LIST)],
    )
    .await
    .json();
    assert!(
        empty["items"].is_null(),
        "empty PartialObjectMetadataList has items: null"
    );
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let g = get_with(
        &base,
        "/api/v1/namespaces/fixtures-a/configmaps/cm-03",
        &[("Accept", POM)],
    )
    .await;
    assert!(from_cache(&g));
    assert_eq!(
        g.json()["metadata"]["annotations"]["fixtures.example.com/note"],
        "has an annotation"
    );
    assert!(g.body.ends_with(b"}\n"));
    let mut w = Watch::open_with(
        &base,
        "/api/v1/namespaces/fixtures-b/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=3",
        &[("Accept", POM)],
    )
    .await;
    let events = w.drain(Duration::from_secs(4)).await;
    assert!(events.len() >= 4, "{events:?}");
    for e in &events {
        assert_eq!(e["object"]["kind"], "PartialObjectMetadata", "{e}");
    }
    assert_eq!(events[3]["type"], "BOOKMARK");
}
