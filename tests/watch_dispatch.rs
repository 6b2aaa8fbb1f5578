//! Index-aware watch dispatch: kubelet-style watchers (`fieldSelector=spec.nodeName=<node>`)
//! receive only their node's events, an event costs selector evaluations for the matching
//! watchers only, and every watcher still sees exactly its events, in order.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{resource, EnvBuilder};
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

/// (type, name) of every event a watch sends until it has been quiet for `quiet`.
async fn events(mut body: Incoming, quiet: Duration) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Ok(Some(Ok(frame))) = tokio::time::timeout(quiet, body.frame()).await {
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
}

#[tokio::test]
async fn node_scoped_watchers_cost_only_their_own_events() {
    let env = EnvBuilder::default()
        .resources(vec![resource("", "v1", "pods")])
        .start()
        .await;
    let cache = env.kcache.cache("", "v1", "pods").unwrap();
    let stream = TcpStream::connect(env.kcache.addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = cache.selector_evaluations();

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

    let got = futures::future::join_all(
        watches
            .into_iter()
            .map(|w| events(w, Duration::from_millis(500))),
    )
    .await;
    let ev = |t: &str, n: &str| (t.to_string(), n.to_string());
    for (i, evs) in got.iter().enumerate() {
        let want = match i {
            1 => vec![ev("ADDED", "p1"), ev("MODIFIED", "p1"), ev("DELETED", "p1")],
            2 => vec![ev("ADDED", "p2"), ev("DELETED", "p2")],
            3 => vec![ev("ADDED", "p1")],
            _ => vec![],
        };
        assert_eq!(evs, &want, "watcher of node-{i}");
    }
    // Five events, six (watcher, event) pairs that match (the move is seen by two nodes): not
    // 5 × 500 evaluations.
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = cache.selector_evaluations();
    env.sim.create("", "pods", pod("p3", "node-4")).unwrap();
    env.settle("", "pods").await;
    for evs in futures::future::join_all(
        others
            .into_iter()
            .map(|w| events(w, Duration::from_millis(500))),
    )
    .await
    {
        assert_eq!(evs, [ev("ADDED", "p3")]);
    }
    assert_eq!(cache.selector_evaluations() - before, 20);
}
