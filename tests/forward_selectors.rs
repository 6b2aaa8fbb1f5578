//! Never stricter than the upstream (issue 10, item 6): a field selector or parameter kcache
//! cannot answer exactly from its cache goes to the upstream, which answers or refuses it; a
//! CRD's `selectableFields`, read from the CRD, are answered from the cache.
//!
//! The sim models kube-apiserver v1.28 (Service selects on metadata only, as the recordings in
//! tests/fixtures/kube-apiserver-v1.28/INDEX.md show for types without a field-label
//! conversion); `ResourceType::selectable_fields` models a newer one.

mod common;

use std::time::Duration;

use common::{get, resource, Env, EnvBuilder, Watch};
use kcache::upstream::Upstream;
use kcache_sim::{ResourceType, Sim, SimConfig};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// Whether kcache answered itself: the upstream's answers carry its API Priority and Fairness
/// headers (the sim sets them as the apiserver does), kcache's own do not.
fn from_cache(headers: &http::HeaderMap) -> bool {
    !headers.contains_key("x-kubernetes-pf-flowschema-uid")
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The list's items as bytes (the list RV of the cache and of the upstream may differ).
fn items(r: &common::Resp) -> String {
    let v = r.json();
    assert!(v["items"].is_array(), "a list: {}", r.text());
    serde_json::to_string(&v["items"]).unwrap()
}

fn names(r: &common::Resp) -> Vec<String> {
    r.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn service(ns: &str, name: &str, kind: &str) -> Value {
    let mut spec = json!({"type": kind, "ports": [{"port": 80}]});
    if kind == "ClusterIP" && name.starts_with("headless") {
        spec["clusterIP"] = json!("None");
    }
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

async fn services_env() -> Env {
    let env = EnvBuilder::fixtures().start().await;
    for (name, kind) in [
        ("np", "NodePort"),
        ("lb", "LoadBalancer"),
        ("headless", "ClusterIP"),
    ] {
        env.sim
            .create("", "services", service("fixtures-a", name, kind))
            .unwrap();
    }
    env.settle("", "services").await;
    env
}

/// (a) A v1.28 upstream refuses Service `spec.type`: kcache forwards, and the client gets the
/// upstream's own 400, byte for byte, for lists, cache lists and watches.
#[tokio::test]
async fn service_type_on_a_v128_upstream_is_its_400() {
    let env = services_env().await;
    let base = env.url();
    let sel = enc("spec.type=ClusterIP");
    for path in [
        format!("/api/v1/services?fieldSelector={sel}"),
        format!("/api/v1/services?fieldSelector={sel}&resourceVersion=0"),
        format!("/api/v1/namespaces/fixtures-a/services?fieldSelector={sel}&limit=1"),
        format!("/api/v1/services?fieldSelector={sel}&watch=1&resourceVersion=0"),
    ] {
        let ours = get(&base, &path).await;
        let direct = get(&env.sim.url(), &path).await;
        assert_eq!(direct.status, 400, "{path}: {}", direct.text());
        assert!(!from_cache(&ours.headers), "{path}: forwarded");
        assert_eq!(
            (ours.status, &ours.body),
            (direct.status, &direct.body),
            "{path}"
        );
    }
    assert_eq!(
        get(&base, &format!("/api/v1/services?fieldSelector={sel}"))
            .await
            .json()["message"],
        "\"spec.type\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
}

/// (b) A newer upstream selects Services by `spec.type` and `spec.clusterIP`: through kcache
/// the client gets the upstream's answer, the same items as asking it directly.
#[tokio::test]
async fn service_type_on_a_newer_upstream_is_its_answer() {
    let env = services_env().await;
    let newer = env
        .sim
        .resource_type("", "services")
        .unwrap()
        .with_selectable_fields(&["spec.type", "spec.clusterIP"]);
    env.sim.register(newer);
    let base = env.url();
    for (sel, want) in [
        ("spec.type=NodePort", vec!["np"]),
        ("spec.type!=ClusterIP", vec!["lb", "np"]),
        ("spec.clusterIP=None", vec!["headless"]),
        (
            "spec.type==LoadBalancer,metadata.namespace=fixtures-a",
            vec!["lb"],
        ),
    ] {
        for path in [
            format!("/api/v1/services?fieldSelector={}", enc(sel)),
            format!(
                "/api/v1/services?fieldSelector={}&resourceVersion=0",
                enc(sel)
            ),
        ] {
            let ours = get(&base, &path).await;
            let direct = get(&env.sim.url(), &path).await;
            assert_eq!(ours.status, 200, "{path}: {}", ours.text());
            assert!(!from_cache(&ours.headers), "{path}: forwarded");
            assert_eq!(items(&ours), items(&direct), "{path}");
            assert_eq!(names(&ours), want, "{path}");
        }
    }
    // A watch is passed through as the upstream's stream.
    let path = format!(
        "/api/v1/namespaces/fixtures-a/services?watch=1&resourceVersion=0&timeoutSeconds=5&fieldSelector={}",
        enc("spec.type=NodePort")
    );
    let mut w = Watch::open(&base, &path).await;
    assert_eq!(w.status, 200);
    assert!(!from_cache(&w.headers), "watch forwarded");
    let first = w.next_json(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("np"))
    );
}

fn gadgets() -> ResourceType {
    ResourceType::custom(
        "example.com",
        "v1",
        "gadgets",
        "gadget",
        "Gadget",
        true,
        &[],
    )
    .with_selectable_fields(&["spec.color", "spec.size", "status.ready"])
}

fn gadget(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Gadget",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// The sim serving `rt` (a CRD with selectable fields) with a few gadgets, and kcache caching
/// it. `crd_readable: false` deletes the CRD object first, as if kcache could not read it.
async fn gadgets_env(rt: ResourceType, crd_readable: bool) -> Env {
    common::init_logs();
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_secs(1),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    sim.register(rt);
    if !crd_readable {
        sim.delete(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
            "gadgets.example.com",
        )
        .unwrap();
    }
    for (ns, name, spec) in [
        ("shop", "g1", json!({"color": "red", "size": 3})),
        ("shop", "g2", json!({"color": "blue", "size": 5})),
        ("shop", "g3", json!({"size": 3})),
        ("lab", "g4", json!({"color": "red", "size": 7})),
    ] {
        sim.create("example.com", "gadgets", gadget(ns, name, spec))
            .unwrap();
    }
    let mut b = EnvBuilder::default();
    b.config.resources = vec![resource("example.com", "v1", "gadgets")];
    let upstream = Upstream::from_url(&sim.url()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kcache = kcache::server::start(&b.config, upstream, listener, admin)
        .await
        .unwrap();
    assert!(kcache.wait_synced(Duration::from_secs(20)).await);
    Env { sim, kcache }
}

const SELECTORS: [&str; 9] = [
    "spec.color=red",
    "spec.color==red",
    "spec.color!=red",
    "spec.color=",
    "spec.size=3",
    "spec.size!=3",
    "status.ready=",
    "spec.color=red,spec.size=3",
    "spec.color=red,metadata.namespace=lab",
];

/// (c) Field selectors on a CRD's selectableFields: LIST and WATCH are answered from the cache
/// (the upstream is not asked), equal to the upstream's own answers.
#[tokio::test]
async fn crd_selectable_fields_from_the_cache() {
    let env = gadgets_env(gadgets(), true).await;
    let base = env.url();
    for sel in SELECTORS {
        for path in [
            format!(
                "/apis/example.com/v1/gadgets?resourceVersion=0&fieldSelector={}",
                enc(sel)
            ),
            format!(
                "/apis/example.com/v1/namespaces/shop/gadgets?resourceVersion=0&fieldSelector={}",
                enc(sel)
            ),
        ] {
            let before = env.sim.request_counts();
            let ours = get(&base, &path).await;
            assert_eq!(
                env.sim.request_counts(),
                before,
                "{path}: upstream not asked"
            );
            assert_eq!(ours.status, 200, "{path}: {}", ours.text());
            assert!(from_cache(&ours.headers), "{path}: from the cache");
            let direct = get(&env.sim.url(), &path).await;
            assert_eq!(direct.status, 200, "{path}");
            assert_eq!(items(&ours), items(&direct), "{path}");
        }
    }
    // Consistent reads and pages too (the consistency probe asks the upstream for its RV
    // only, never for the selection).
    let path = format!(
        "/apis/example.com/v1/gadgets?limit=1&fieldSelector={}",
        enc("spec.color=red")
    );
    let first = get(&base, &path).await;
    assert!(from_cache(&first.headers));
    assert_eq!(names(&first), ["g4"]);
    let token = first.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let next = get(&base, &format!("{path}&continue={}", enc(&token))).await;
    assert!(from_cache(&next.headers));
    assert_eq!(names(&next), ["g1"]);

    // WATCH: the same events as the upstream's watch, the upstream not asked.
    let path = format!(
        "/apis/example.com/v1/namespaces/shop/gadgets?watch=1&resourceVersion=0&timeoutSeconds=20&fieldSelector={}",
        enc("spec.color=red")
    );
    let watches = env.sim.request_counts().2;
    let mut ours = Watch::open(&base, &path).await;
    assert_eq!(ours.status, 200);
    assert!(from_cache(&ours.headers), "watch from the cache");
    let mut direct = Watch::open(&env.sim.url(), &path).await;
    assert_eq!(direct.status, 200);
    assert_eq!(
        env.sim.request_counts().2,
        watches + 1,
        "only the direct watch reached the upstream"
    );
    let summary = |e: &Value| {
        (
            e["type"].as_str().unwrap().to_string(),
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
            e["object"]["spec"]["color"].clone(),
        )
    };
    let mut seen = (Vec::new(), Vec::new());
    let e = ours
        .next_json(Duration::from_secs(5))
        .await
        .expect("initial");
    seen.0.push(summary(&e));
    let e = direct
        .next_json(Duration::from_secs(5))
        .await
        .expect("initial");
    seen.1.push(summary(&e));
    // g2 turns red (ADDED), g1 turns blue (DELETED), g5 is created red (ADDED), g3 stays out.
    let mut g2 = env
        .sim
        .get("example.com", "gadgets", Some("shop"), "g2")
        .unwrap();
    g2["spec"]["color"] = json!("red");
    env.sim.update("example.com", "gadgets", g2).unwrap();
    let mut g1 = env
        .sim
        .get("example.com", "gadgets", Some("shop"), "g1")
        .unwrap();
    g1["spec"]["color"] = json!("blue");
    env.sim.update("example.com", "gadgets", g1).unwrap();
    let mut g3 = env
        .sim
        .get("example.com", "gadgets", Some("shop"), "g3")
        .unwrap();
    g3["spec"]["size"] = json!(4);
    env.sim.update("example.com", "gadgets", g3).unwrap();
    env.sim
        .create(
            "example.com",
            "gadgets",
            gadget("shop", "g5", json!({"color": "red"})),
        )
        .unwrap();
    for _ in 0..3 {
        let e = ours.next_json(Duration::from_secs(5)).await.expect("event");
        seen.0.push(summary(&e));
        let e = direct
            .next_json(Duration::from_secs(5))
            .await
            .expect("event");
        seen.1.push(summary(&e));
    }
    assert_eq!(seen.0, seen.1);
    let types: Vec<_> = seen.0.iter().map(|(t, n, _)| format!("{t} {n}")).collect();
    assert_eq!(types, ["ADDED g1", "ADDED g2", "DELETED g1", "ADDED g5"]);
    assert_eq!(env.sim.request_counts().2, watches + 1);
}

/// (d) A custom resource without selectableFields: a selector on a spec field is forwarded and
/// the client gets the upstream's 400 (the recorded v1.28 one for widgets is
/// `field label not supported: spec.color`).
#[tokio::test]
async fn unknown_custom_resource_field_is_the_upstreams_400() {
    let env = EnvBuilder::fixtures().start().await;
    let base = env.url();
    for path in [
        "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets?fieldSelector=spec.color%3Dred",
        "/apis/fixtures.example.com/v1/widgets?fieldSelector=spec.color%3Dred&resourceVersion=0",
        "/apis/fixtures.example.com/v1/widgets?fieldSelector=spec.color%3Dred&watch=1",
    ] {
        let ours = get(&base, path).await;
        let direct = get(&env.sim.url(), path).await;
        assert!(!from_cache(&ours.headers), "{path}: forwarded");
        assert_eq!(ours.status, 400, "{path}");
        assert_eq!(ours.body, direct.body, "{path}");
        assert_eq!(ours.json()["message"], "field label not supported: spec.color");
    }
}

/// When kcache cannot read the CRD, selectors on its selectable fields go to the upstream,
/// which answers them.
#[tokio::test]
async fn crd_not_readable_forwards_selectable_fields() {
    let env = gadgets_env(gadgets(), false).await;
    let path = format!(
        "/apis/example.com/v1/gadgets?resourceVersion=0&fieldSelector={}",
        enc("spec.color=red")
    );
    let ours = get(&env.url(), &path).await;
    assert!(!from_cache(&ours.headers), "forwarded");
    assert_eq!(ours.status, 200, "{}", ours.text());
    assert_eq!(names(&ours), ["g4", "g1"]);
    // metadata fields stay the cache's.
    let ours = get(
        &env.url(),
        "/apis/example.com/v1/gadgets?resourceVersion=0&fieldSelector=metadata.name%3Dg2",
    )
    .await;
    assert!(from_cache(&ours.headers));
    assert_eq!(names(&ours), ["g2"]);
}

/// A query parameter kcache does not know may mean something to a newer upstream: the request
/// is the upstream's; the parameters kcache knows stay answered from the cache.
#[tokio::test]
async fn unknown_parameters_are_forwarded() {
    let env = EnvBuilder::fixtures().start().await;
    let base = env.url();
    let cms = "/api/v1/namespaces/fixtures-a/configmaps";
    let known = get(
        &base,
        &format!("{cms}?resourceVersion=0&limit=2&pretty=false&timeout=30s"),
    )
    .await;
    assert!(from_cache(&known.headers));
    for q in ["shardSelector=x", "resourceVersion=0&someNewOption=1"] {
        let path = format!("{cms}?{q}");
        let ours = get(&base, &path).await;
        assert!(!from_cache(&ours.headers), "{path}: forwarded");
        assert_eq!(ours.status, 200, "{path}");
        let direct = get(&env.sim.url(), &path).await;
        assert_eq!(items(&ours), items(&direct), "{path}");
    }
}
