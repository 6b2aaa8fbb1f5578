//! Memory controls per resource: annotations left out before caching (`dropAnnotations`).
//! Clients get each object exactly as the apiserver would send it without those annotations:
//! in LIST, GET and WATCH, byte for byte; protobuf readers get JSON from the cache (the
//! upstream's protobuf would still carry the annotations).

mod common;

use std::time::Duration;

use common::*;
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
