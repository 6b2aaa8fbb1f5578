//! The bench's `fleet` shape at a hundred nodes, as CI can run it: a cluster at
//! sig-scalability's proportions (`seed::fleet`) behind kcache, each node's kubelet watching its
//! Pods in protobuf over HTTP/2 while the upstream's Pods change. Every change reaches the
//! kubelet of its node, none is lost, and at the end each kubelet's Pods through kcache are the
//! upstream's; a controller's informer of every Pod ends equal to the upstream's too. And the
//! herd: every kubelet and kube-proxy back at once after a gap, each resuming its watch where
//! it was, gets what it missed without the upstream being asked.

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

/// The fleet at a hundred nodes behind kcache, which caches what the kubelets and kube-proxies
/// read.
async fn fleet() -> common::Env {
    common::init_logs();
    let mut b = EnvBuilder::default().resources(vec![
        resource("", "v1", "pods"),
        resource("", "v1", "nodes"),
        resource("discovery.k8s.io", "v1", "endpointslices"),
    ]);
    b.seed = seed::fleet(&FleetSpec {
        nodes: NODES,
        seed: 45,
    });
    b.start().await
}

/// The kubelets' Pod watches from `rv`, one per node, keyed by its node.
fn kubelet_watches(rv: u64) -> Vec<(Option<usize>, String)> {
    (1..=NODES)
        .map(|i| {
            (
                Some(i),
                format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=120&fieldSelector=spec.nodeName%3Dnode-{i}"),
            )
        })
        .collect()
}

/// Open `watches` as kubelets and kube-proxies read: protobuf, a connection of their own, all
/// at once.
async fn open_all(
    env: &common::Env,
    watches: Vec<(Option<usize>, String)>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> watchers::FanOut {
    let target = load::Target::plain(env.kcache.addr)
        .accepting("application/vnd.kubernetes.protobuf, application/json");
    let n = watches.len();
    let fan = watchers::open_to(
        &target,
        Proto::H2 { connections: n },
        watches,
        stop,
        Instant::now() + Duration::from_secs(120),
        n,
    )
    .await;
    assert_eq!(fan.failed, 0, "{:?}", fan.first_error);
    fan
}

/// `count` Pod updates that visit the nodes in turn, a different Pod of the node each round,
/// each keyed by its node.
async fn update_pods(env: &common::Env, count: u64) -> watchers::WriteLog {
    let mut by_node: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
    for p in env.sim.list("", "pods") {
        if let Some(node) = node_of(&p) {
            by_node.entry(node).or_default().push(p);
        }
    }
    assert!(by_node.values().map(Vec::len).sum::<usize>() >= 30 * NODES);
    let log = watchers::write_at_rate(1_000.0, count, |i| {
        let on_node = &by_node[&(i as usize % NODES + 1)];
        let mut pod = on_node[i as usize / NODES % on_node.len()].clone();
        pod["metadata"]["annotations"]["bench.kcache.dev/seq"] = json!(i.to_string());
        let v = env.sim.update("", "pods", pod).map_err(|e| e.to_string())?;
        Ok((rv_of(&v), node_of(&v).unwrap()))
    })
    .await;
    assert_eq!(log.writes.len() as u64, count, "{:?}", log.first_error);
    assert_eq!(log.per_key().len(), NODES, "the updates visited every node");
    log
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubelet_gets_its_pods_changes_and_ends_equal_to_the_upstream() {
    let env = fleet().await;
    let rv = list_rv(env.kcache.addr, "/api/v1/pods").await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let fan = open_all(&env, kubelet_watches(rv), stop_rx).await;
    let log = update_pods(&env, UPDATES).await;
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

/// A controller's informer of every Pod, as client-go's reflector keeps one: a list (RV=0),
/// then a watch from its resourceVersion whose events it applies to its store. While Pods are
/// updated, created and deleted across the cluster, each of three controllers ends with the
/// upstream's Pods, each at the upstream's resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_controllers_informer_ends_equal_to_the_upstream() {
    const CONTROLLERS: usize = 3;
    let env = fleet().await;
    let url = env.url();
    let mut informers = Vec::new();
    for _ in 0..CONTROLLERS {
        let (status, body) = load::fetch(
            env.kcache.addr,
            "/api/v1/pods?resourceVersion=0",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(status, 200);
        let list: Value = serde_json::from_slice(&body).unwrap();
        let store = versions(list["items"].as_array().unwrap());
        let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
        let watch = common::Watch::open_with(
            &url,
            &format!("/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=120"),
            &[],
        )
        .await;
        assert_eq!(watch.status, 200);
        informers.push((store, watch));
    }

    // Updates on every node, then Pods created and deleted.
    let mut last = update_pods(&env, UPDATES)
        .await
        .writes
        .keys()
        .max()
        .copied();
    let template = env.sim.list("", "pods").remove(0);
    for i in 0..20 {
        let mut pod = template.clone();
        pod["metadata"]["name"] = json!(format!("controller-test-{i}"));
        for server_set in ["uid", "resourceVersion", "creationTimestamp"] {
            pod["metadata"].as_object_mut().unwrap().remove(server_set);
        }
        last = Some(rv_of(&env.sim.create("", "pods", pod).unwrap()));
    }
    for p in env.sim.list("", "pods").iter().skip(7).step_by(97).take(20) {
        let ns = p["metadata"]["namespace"].as_str();
        let name = p["metadata"]["name"].as_str().unwrap();
        last = Some(rv_of(&env.sim.delete("", "pods", ns, name).unwrap()));
    }
    let last = last.unwrap();

    let upstream = versions(&env.sim.list("", "pods"));
    for (i, (mut store, mut watch)) in informers.into_iter().enumerate() {
        loop {
            let event = watch
                .next_json(Duration::from_secs(30))
                .await
                .unwrap_or_else(|| {
                    panic!("controller {i}: the watch ended before the last change")
                });
            let object = &event["object"];
            let key = format!(
                "{}/{}",
                object["metadata"]["namespace"].as_str().unwrap(),
                object["metadata"]["name"].as_str().unwrap()
            );
            match event["type"].as_str().unwrap() {
                "ADDED" | "MODIFIED" => {
                    let rv = object["metadata"]["resourceVersion"].as_str().unwrap();
                    store.insert(key, rv.to_string());
                }
                "DELETED" => {
                    store.remove(&key);
                }
                other => panic!("controller {i}: a {other} event"),
            }
            if rv_of(object) >= last {
                break;
            }
        }
        assert_eq!(store, upstream, "controller {i}");
    }
}

/// The herd: every kubelet and kube-proxy away while the cluster changes (a network blip, a
/// load balancer resetting its connections), then all back at once, each resuming its watch
/// from the resourceVersion it had seen, as client-go's reflector does after a broken stream.
/// kcache answers every one from its history: each client gets exactly the changes it missed,
/// none is told to relist (a 410 would end its stream), and the upstream is asked for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_resuming_its_watches_at_once_gets_what_it_missed_and_costs_the_upstream_nothing() {
    const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";
    const SLICE_UPDATES: u64 = 100;
    let env = fleet().await;
    let pods_rv = list_rv(env.kcache.addr, "/api/v1/pods").await.unwrap();
    let slices_rv = list_rv(env.kcache.addr, SLICES).await.unwrap();
    let proxy_watches = vec![
        (
            None,
            format!("{SLICES}?watch=1&resourceVersion={slices_rv}&allowWatchBookmarks=true&timeoutSeconds=120"),
        );
        NODES
    ];

    // The clients as they were before the blip: every one watching, in protobuf, which has
    // kcache keep a protobuf mirror of both types.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (kubelets, proxies) = tokio::join!(
        open_all(&env, kubelet_watches(pods_rv), stop_rx.clone()),
        open_all(&env, proxy_watches.clone(), stop_rx),
    );
    common::wait_until("the protobuf mirrors synced", || {
        let synced = [("", "pods"), ("discovery.k8s.io", "endpointslices")]
            .into_iter()
            .all(|(group, resource)| {
                env.kcache
                    .cache(group, "v1", resource)
                    .and_then(|c| c.mirror().map(|m| m.is_synced()))
                    .unwrap_or(false)
            });
        async move { synced }
    })
    .await;
    stop_tx.send(true).unwrap();
    drop((kubelets.finish().await, proxies.finish().await));

    // The gap: the cluster changes while nobody watches.
    let pods = update_pods(&env, UPDATES).await;
    let all_slices = env.sim.list("discovery.k8s.io", "endpointslices");
    assert!(all_slices.len() >= 2 * NODES);
    let slices = watchers::write_at_rate(1_000.0, SLICE_UPDATES, |i| {
        let mut slice = all_slices[i as usize * 7 % all_slices.len()].clone();
        slice["metadata"]["annotations"]["bench.kcache.dev/seq"] = json!(i.to_string());
        let v = env
            .sim
            .update("discovery.k8s.io", "endpointslices", slice)
            .map_err(|e| e.to_string())?;
        Ok((rv_of(&v), 0))
    })
    .await;
    assert_eq!(slices.writes.len() as u64, SLICE_UPDATES);

    // Everyone back at once.
    let upstream = || {
        let (lists, _, watches, _) = env.sim.request_counts();
        (lists, watches)
    };
    let before = upstream();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (kubelets, proxies) = tokio::join!(
        open_all(&env, kubelet_watches(pods_rv), stop_rx.clone()),
        open_all(&env, proxy_watches, stop_rx),
    );
    let expected = (kubelets.expected(&pods), proxies.expected(&slices));
    assert_eq!(expected, (UPDATES, SLICE_UPDATES * NODES as u64));
    let (kubelets_synced, proxies_synced) = tokio::join!(
        kubelets.wait_for_events(expected.0, Duration::from_secs(60)),
        proxies.wait_for_events(expected.1, Duration::from_secs(60)),
    );
    assert!(
        kubelets_synced && proxies_synced,
        "every client gets what it missed"
    );
    assert_eq!(
        upstream(),
        before,
        "the upstream was asked for no list and no watch"
    );
    stop_tx.send(true).unwrap();
    let kubelets = watchers::delivery(&pods, &kubelets.finish().await);
    let proxies = watchers::delivery(&slices, &proxies.finish().await);
    for d in [kubelets, proxies] {
        assert_eq!(
            (d.delivered, d.missing(), d.ended_early),
            (d.expected, 0, 0)
        );
    }
}
