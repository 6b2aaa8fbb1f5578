//! Index-aware watch dispatch: kubelet-style watchers (`fieldSelector=spec.nodeName=<node>`)
//! receive only their node's events, an event costs selector evaluations for the matching
//! watchers only, and every watcher still sees exactly its events, in order.

mod common;

use bytes::Bytes;
use common::{resource, wait_until, Env, EnvBuilder, EVENTUALLY};
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::net::TcpStream;

const NODES: usize = 500;

fn pod(name: &str, node: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "d"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
}

/// The sample of the events kcache wrote to the pods watchers.
const EVENTS_SENT: &[&str] = &["kcache_watch_events_sent_total", "resource=\"pods\""];

/// (type, name) of the next `n` events a watch sends (more if they come in the same frame);
/// fails naming `who` unless they all arrive within [`EVENTUALLY`].
async fn events(body: &mut Incoming, n: usize, who: String) -> Vec<(String, String)> {
    let read = async {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while out.len() < n {
            let frame = body.frame().await.expect("the watch is open").unwrap();
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
            }
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
                out.push((
                    v["type"].as_str().unwrap().to_string(),
                    v["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ));
            }
        }
        out
    };
    tokio::time::timeout(EVENTUALLY, read)
        .await
        .unwrap_or_else(|_| panic!("{who}: fewer than {n} events within {EVENTUALLY:?}"))
}

/// An HTTP/2 connection to kcache, as client-go's watchers share one.
async fn h2(env: &Env) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(env.kcache.addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

/// Wait until `n` pods watchers run (each has read its start and waits for events).
async fn watchers_running(env: &Env, n: usize) {
    env.metric_reaching(&["kcache_watchers{", "resource=\"pods\""], n as f64)
        .await;
}

#[tokio::test]
async fn node_scoped_watchers_cost_only_their_own_events() {
    let env = EnvBuilder::default()
        .resources(vec![resource("", "v1", "pods")])
        .start()
        .await;
    let cache = env.kcache.cache("", "v1", "pods").unwrap();
    let sender = h2(&env).await;
    let open = |path: String| {
        let mut sender = sender.clone();
        async move {
            let req = Request::get(format!("http://kcache{path}"))
                .body(Empty::<Bytes>::new())
                .unwrap();
            let resp = sender.send_request(req).await.unwrap();
            assert_eq!(resp.status(), 200);
            resp.into_body()
        }
    };
    let rv = cache.rv();
    let mut watches = Vec::new();
    for i in 0..NODES {
        watches.push(
            open(format!(
                "/api/v1/pods?watch=1&timeoutSeconds=60&resourceVersion={rv}&fieldSelector=spec.nodeName=node-{i}"
            ))
            .await,
        );
    }
    // Each watcher has read the (empty) history since its start RV: from here on only events
    // count.
    watchers_running(&env, NODES).await;
    let before = cache.selector_evaluations();
    let sent_before = env.metric(EVENTS_SENT).await.unwrap();

    env.sim.create("", "pods", pod("p1", "node-1")).unwrap();
    env.sim.create("", "pods", pod("p2", "node-2")).unwrap();
    let mut p1 = env.sim.get("", "pods", Some("d"), "p1").unwrap();
    p1["metadata"]["labels"] = json!({"x": "y"});
    env.sim.update("", "pods", p1).unwrap();
    let mut p1 = env.sim.get("", "pods", Some("d"), "p1").unwrap();
    p1["spec"]["nodeName"] = json!("node-3");
    env.sim.update("", "pods", p1).unwrap();
    env.sim.delete("", "pods", Some("d"), "p2").unwrap();
    env.settle("", "pods").await;

    let ev = |t: &str, n: &str| (t.to_string(), n.to_string());
    let want = |i: usize| match i {
        1 => vec![ev("ADDED", "p1"), ev("MODIFIED", "p1"), ev("DELETED", "p1")],
        2 => vec![ev("ADDED", "p2"), ev("DELETED", "p2")],
        3 => vec![ev("ADDED", "p1")],
        _ => vec![],
    };
    let got = futures::future::join_all(
        watches
            .iter_mut()
            .enumerate()
            .map(|(i, w)| events(w, want(i).len(), format!("watcher of node-{i}"))),
    )
    .await;
    for (i, evs) in got.iter().enumerate() {
        assert_eq!(evs, &want(i), "watcher of node-{i}");
    }
    // Five events, six (watcher, event) pairs that match (the move is seen by two nodes): not
    // 5 × 500 evaluations, and no watcher was sent more than its own.
    wait_until("6 selector evaluations", || async {
        cache.selector_evaluations() - before >= 6
    })
    .await;
    let sent = env.metric_reaching(EVENTS_SENT, sent_before + 6.0).await;
    assert_eq!(sent - sent_before, 6.0, "events sent to the node watchers");
    let evaluations = cache.selector_evaluations() - before;
    assert_eq!(evaluations, 6, "selector evaluations for 5 events");

    // Watchers without an indexed equality still evaluate every event.
    let mut others = Vec::new();
    for _ in 0..20 {
        others.push(
            open(format!(
                "/api/v1/pods?watch=1&timeoutSeconds=60&resourceVersion={}&fieldSelector=spec.nodeName!=node-1",
                cache.rv()
            ))
            .await,
        );
    }
    watchers_running(&env, NODES + 20).await;
    let before = cache.selector_evaluations();
    let sent_before = env.metric(EVENTS_SENT).await.unwrap();
    env.sim.create("", "pods", pod("p3", "node-4")).unwrap();
    env.settle("", "pods").await;
    for evs in futures::future::join_all(
        others
            .iter_mut()
            .enumerate()
            .map(|(i, w)| events(w, 1, format!("unindexed watcher {i}"))),
    )
    .await
    {
        assert_eq!(evs, [ev("ADDED", "p3")]);
    }
    // The node-4 watcher of the first part is still open and gets it too.
    assert_eq!(
        events(&mut watches[4], 1, "watcher of node-4".into()).await,
        [ev("ADDED", "p3")]
    );
    let sent = env.metric_reaching(EVENTS_SENT, sent_before + 21.0).await;
    assert_eq!(sent - sent_before, 21.0, "events sent for one event");
    // The 20 evaluate every event; of the 500 indexed ones only node-4's does.
    assert_eq!(cache.selector_evaluations() - before, 21);
}

/// Kubelets also watch their own Node (`fieldSelector=metadata.name=<node>`): such a watcher is
/// routed by the object's name, so a Node's status update costs one evaluation, not one per
/// kubelet. Measured before: at 5,000
/// nodes, 83 status updates a second took kcache 1.86 cores (the bench's `fleet` scenario).
#[tokio::test]
async fn watchers_of_one_named_object_cost_only_its_events() {
    const KUBELETS: usize = 200;
    let env = EnvBuilder::default()
        .resources(vec![resource("", "v1", "nodes")])
        .start()
        .await;
    let node = |name: &str| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    for i in 0..KUBELETS {
        env.sim
            .create("", "nodes", node(&format!("node-{i}")))
            .unwrap();
    }
    env.settle("", "nodes").await;
    let cache = env.kcache.cache("", "v1", "nodes").unwrap();
    let sender = h2(&env).await;
    let rv = cache.rv();
    let mut watches = Vec::new();
    for i in 0..KUBELETS {
        let path = format!("/api/v1/nodes?watch=1&timeoutSeconds=60&resourceVersion={rv}&fieldSelector=metadata.name%3Dnode-{i}");
        let req = Request::get(format!("http://kcache{path}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = sender.clone().send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        watches.push(resp.into_body());
    }
    env.metric_reaching(&["kcache_watchers{", "resource=\"nodes\""], KUBELETS as f64)
        .await;
    let before = cache.selector_evaluations();
    for i in [1, 2] {
        let mut n = env
            .sim
            .get("", "nodes", None, &format!("node-{i}"))
            .unwrap();
        n["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        env.sim.update("", "nodes", n).unwrap();
    }
    env.settle("", "nodes").await;
    for i in [1, 2] {
        let got = events(&mut watches[i], 1, format!("watcher of node-{i}")).await;
        assert_eq!(got, [("MODIFIED".to_string(), format!("node-{i}"))]);
    }
    wait_until("2 selector evaluations", || async {
        cache.selector_evaluations() - before >= 2
    })
    .await;
    assert_eq!(
        cache.selector_evaluations() - before,
        2,
        "selector evaluations for 2 updates"
    );
}

/// Every kube-proxy watches every EndpointSlice: each change is one write per watcher. When a
/// type's writes would exceed `watch.fanoutWritesPerSecond`, each of its watchers writes at
/// most once per gap (watchers / that rate, at most `fanoutMaxDelayMillis`): the changes in
/// between reach it in one write, every one of them, in order.
#[tokio::test]
async fn watchers_of_a_busy_type_get_every_change_in_order_in_fewer_writes() {
    const WATCHERS: usize = 4;
    const CHANGES: usize = 20;
    let mut b = EnvBuilder::default().resources(vec![resource("", "v1", "configmaps")]);
    // Four watchers at four writes a second: a gap of one second between two writes of each.
    b.config.watch.fanout_writes_per_second = WATCHERS as u64;
    b.config.watch.fanout_max_delay_millis = 1_000;
    let env = b.start().await;
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    let rv = cache.rv();
    let mut watches = Vec::new();
    for _ in 0..WATCHERS {
        let w = common::Watch::open(
            &env.url(),
            &format!("/api/v1/configmaps?watch=1&timeoutSeconds=60&resourceVersion={rv}"),
        )
        .await;
        assert_eq!(w.status, 200);
        watches.push(w);
    }
    env.metric_reaching(
        &["kcache_watchers{", "resource=\"configmaps\""],
        WATCHERS as f64,
    )
    .await;

    for i in 0..CHANGES {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i:02}"), "namespace": "d"}});
        env.sim.create("", "configmaps", cm).unwrap();
    }
    let want: Vec<String> = (0..CHANGES).map(|i| format!("cm-{i:02}")).collect();
    for (i, w) in watches.iter_mut().enumerate() {
        let (names, writes) = w.names_and_writes(CHANGES, EVENTUALLY).await;
        assert_eq!(names, want, "watcher {i}: every change, in order");
        // The first change goes out at once; the ones made within the next second wait for
        // the gap's end and go out with it (a third write only if the creates took longer).
        assert!(
            writes <= 3,
            "watcher {i}: {writes} writes for {CHANGES} changes"
        );
    }
}
