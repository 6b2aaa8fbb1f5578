//! The bench's `fleet` shape at a hundred nodes, as CI can run it: a cluster at
//! sig-scalability's proportions (`seed::fleet`) behind kcache, each node's kubelet watching its
//! Pods in protobuf over HTTP/2 while the upstream's Pods change. Every change reaches the
//! kubelet of its node, none is lost, and at the end each kubelet's Pods through kcache are the
//! upstream's.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{resource, EnvBuilder};
use kcache_bench::watchers::{self, Proto};
use kcache_bench::{list_rv, load};
use kcache_sim::seed::{self, FleetSpec};
use serde_json::{json, Value};

const NODES: usize = 100;
const UPDATES: u64 = 300;

/// The node a Pod is on, by its 1-based index.
fn node_of(pod: &Value) -> Option<usize> {
    pod["spec"]["nodeName"]
        .as_str()?
        .strip_prefix("node-")?
        .parse()
        .ok()
}

/// name → resourceVersion of the Pods in a list's items.
fn versions(items: &[Value]) -> BTreeMap<String, String> {
    items
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap(),
                    p["metadata"]["name"].as_str().unwrap()
                ),
                p["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubelet_gets_its_pods_changes_and_ends_equal_to_the_upstream() {
    common::init_logs();
    let mut b = EnvBuilder::default().resources(vec![
        resource("", "v1", "pods"),
        resource("", "v1", "nodes"),
    ]);
    b.seed = seed::fleet(&FleetSpec {
        nodes: NODES,
        seed: 45,
    });
    let env = b.start().await;
    let pods: Vec<Value> = env
        .sim
        .list("", "pods")
        .into_iter()
        .filter(|p| node_of(p).is_some())
        .collect();
    assert!(pods.len() >= 30 * NODES);

    let rv = list_rv(env.kcache.addr, "/api/v1/pods").await.unwrap();
    let watches: Vec<(Option<usize>, String)> = (1..=NODES)
        .map(|i| {
            (
                Some(i),
                format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=120&fieldSelector=spec.nodeName%3Dnode-{i}"),
            )
        })
        .collect();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // As a kubelet reads: protobuf, a connection of its own.
    let target = load::Target::plain(env.kcache.addr)
        .accepting("application/vnd.kubernetes.protobuf, application/json");
    let fan = watchers::open_to(
        &target,
        Proto::H2 { connections: NODES },
        watches,
        stop_rx,
        Instant::now() + Duration::from_secs(120),
        32,
    )
    .await;
    assert_eq!(fan.failed, 0, "{:?}", fan.first_error);

    // Updates that visit the nodes in turn, a different Pod of the node each round.
    let mut by_node: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
    for p in pods {
        by_node.entry(node_of(&p).unwrap()).or_default().push(p);
    }
    let sim = env.sim.clone();
    let log = watchers::write_at_rate(1_000.0, UPDATES, |i| {
        let on_node = &by_node[&(i as usize % NODES + 1)];
        let mut pod = on_node[i as usize / NODES % on_node.len()].clone();
        pod["metadata"]["annotations"]["bench.kcache.dev/seq"] = json!(i.to_string());
        let v = sim.update("", "pods", pod).map_err(|e| e.to_string())?;
        let rv: u64 = v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        Ok((rv, node_of(&v).unwrap()))
    })
    .await;
    assert_eq!(log.writes.len() as u64, UPDATES, "{:?}", log.first_error);
    let expected = fan.expected(&log);
    assert_eq!(expected, UPDATES, "each change is for one kubelet");
    assert!(
        fan.wait_for_events(expected, Duration::from_secs(60)).await,
        "every change reaches its kubelet"
    );
    stop_tx.send(true).unwrap();
    let received = fan.finish().await;
    let d = watchers::delivery(&log, &received);
    assert_eq!((d.delivered, d.missing(), d.ended_early), (UPDATES, 0, 0));
    assert_eq!(log.per_key().len(), NODES, "the updates visited every node");

    // Each kubelet's Pods through kcache, as it lists them, are the upstream's.
    let upstream = env.sim.list("", "pods");
    for i in 1..=NODES {
        let (status, body) = load::fetch(
            env.kcache.addr,
            &format!("/api/v1/pods?resourceVersion=0&fieldSelector=spec.nodeName%3Dnode-{i}"),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(status, 200);
        let list: Value = serde_json::from_slice(&body).unwrap();
        let theirs: Vec<Value> = upstream
            .iter()
            .filter(|p| node_of(p) == Some(i))
            .cloned()
            .collect();
        assert_eq!(
            versions(list["items"].as_array().unwrap()),
            versions(&theirs),
            "node-{i}"
        );
    }
}
