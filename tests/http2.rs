//! HTTP/2 (h2c, prior knowledge): client-go multiplexes all its watches on one connection, so
//! hundreds of concurrent watch streams on one connection must all work.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{EnvBuilder, Watch};
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

#[tokio::test]
async fn many_watches_share_one_http2_connection() {
    let env = EnvBuilder::fixtures().start().await;
    // HTTP/2's default stream window.
    let sender = connect_h2(env.kcache.addr, 65_535).await;

    let get = |path: String| {
        let mut sender = sender.clone();
        async move {
            let req = Request::get(format!("http://{}{path}", "kcache"))
                .header("accept", "application/json")
                .body(Empty::<Bytes>::new())
                .unwrap();
            sender.send_request(req).await.expect("h2 request")
        }
    };

    let list = get("/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0".into()).await;
    assert_eq!(list.status(), 200);
    assert_eq!(list.version(), http::Version::HTTP_2);
    let body = list.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 25);
    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // More streams than hyper's default limit of 200.
    const WATCHES: usize = 500;
    let mut watches = Vec::new();
    for _ in 0..WATCHES {
        let resp = get(format!(
            "/api/v1/namespaces/fixtures-a/configmaps?watch=1&timeoutSeconds=30&resourceVersion={rv}"
        ))
        .await;
        assert_eq!(resp.status(), 200);
        watches.push(resp.into_body());
    }
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "h2-new", "namespace": "fixtures-a"}});
    env.sim.create("", "configmaps", obj).unwrap();
    for mut body in watches {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("event in time")
            .expect("stream open")
            .expect("frame");
        let data = frame.into_data().expect("data frame");
        let line = String::from_utf8_lossy(&data);
        assert!(line.starts_with("{\"type\":\"ADDED\""), "{line}");
        assert!(line.contains("\"name\":\"h2-new\""), "{line}");
    }
}

/// An h2c connection to kcache whose streams each have `window` bytes of flow-control
/// window: a stream whose body is not read stops kcache's side once that much is in flight.
async fn connect_h2(
    addr: std::net::SocketAddr,
    window: u32,
) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(window)
        .adaptive_window(false)
        .handshake(TokioIo::new(stream))
        .await
        .expect("h2c handshake");
    tokio::spawn(conn);
    sender
}

/// A watch on a stream of `sender`'s connection, answered 200.
async fn watch_h2(
    sender: &mut hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    path: &str,
) -> Watch {
    let req = Request::get(format!("http://kcache{path}"))
        .header("accept", "application/json")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.expect("h2 request");
    assert_eq!(resp.status(), 200);
    Watch::from_response(resp)
}

/// The names of the ConfigMaps of one round of creates.
fn round_names(round: usize, per_round: usize) -> Vec<String> {
    (0..per_round)
        .map(|i| format!("h2-stall-{round:02}-{i:02}"))
        .collect()
}

/// A client that stops reading one watch of an HTTP/2 connection (its stream's window runs
/// out) holds up none of the connection's other watches; when it reads again it gets what was
/// in flight, in order, then the 410 that tells it to relist, as a watcher that fell behind the
/// history on its own connection would.
#[tokio::test]
async fn a_stalled_watch_holds_up_none_of_its_connections_other_watches() {
    const READERS: usize = 20;
    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 10;
    let mut b = EnvBuilder::fixtures();
    // Shorter than what the stalled watcher misses, so it cannot catch up from history.
    b.config.cache.history_max_events = 32;
    let env = b.start().await;
    let mut sender = connect_h2(env.kcache.addr, 4096).await;
    let list = common::get(
        &env.url(),
        "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0",
    )
    .await;
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!(
        "/api/v1/namespaces/fixtures-a/configmaps?watch=1&timeoutSeconds=60&resourceVersion={rv}"
    );
    let mut stalled = watch_h2(&mut sender, &path).await;
    let mut readers = Vec::new();
    for _ in 0..READERS {
        readers.push(watch_h2(&mut sender, &path).await);
    }
    let data = "x".repeat(512);
    for round in 0..ROUNDS {
        let names = round_names(round, PER_ROUND);
        for name in &names {
            let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "fixtures-a"}, "data": {"d": data}});
            env.sim.create("", "configmaps", obj).unwrap();
        }
        for (r, reader) in readers.iter_mut().enumerate() {
            for name in &names {
                let ev = reader
                    .next_json(Duration::from_secs(10))
                    .await
                    .unwrap_or_else(|| panic!("reader {r} got no event for {name} in time"));
                assert_eq!(ev["type"], "ADDED", "reader {r}: {ev}");
                assert_eq!(
                    ev["object"]["metadata"]["name"],
                    name.as_str(),
                    "reader {r}"
                );
            }
        }
    }
    // Now the stalled watch is read: a prefix of the events, in order, then the 410.
    let all: Vec<String> = (0..ROUNDS)
        .flat_map(|r| round_names(r, PER_ROUND))
        .collect();
    let mut got = Vec::new();
    let last = loop {
        let ev = stalled
            .next_json(Duration::from_secs(10))
            .await
            .expect("the stalled watch goes on once read");
        if ev["type"] != "ADDED" {
            break ev;
        }
        got.push(
            ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    };
    assert!(
        got.len() < all.len(),
        "the stalled watch was never held up (got all {} events): the test proves nothing",
        got.len()
    );
    assert_eq!(
        got,
        all[..got.len()],
        "what arrived is the events in order, none missing"
    );
    assert_eq!(last["type"], "ERROR", "{last}");
    assert_eq!(last["object"]["code"], 410, "{last}");
    assert!(
        stalled.next(Duration::from_secs(10)).await.is_none() && stalled.ended,
        "the stream ends after the 410"
    );
}

/// A client that cancels one watch of an HTTP/2 connection (RST_STREAM) ends kcache's
/// watcher at once, while the connection and its other watches go on.
#[tokio::test]
async fn a_watch_ends_when_its_stream_is_reset() {
    let env = EnvBuilder::fixtures().start().await;
    let mut sender = connect_h2(env.kcache.addr, 65_535).await;
    let path = "/api/v1/namespaces/fixtures-a/configmaps?watch=1&timeoutSeconds=60";
    let cancelled = watch_h2(&mut sender, path).await;
    let mut kept = watch_h2(&mut sender, path).await;
    let open = ["kcache_watchers{", "resource=\"configmaps\""];
    env.metric_reaching(&open, 2.0).await;
    // Past the initial events: both watchers wait for changes.
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "h2-reset-1", "namespace": "fixtures-a"}});
    env.sim.create("", "configmaps", obj).unwrap();
    while let Some(ev) = kept.next_json(Duration::from_secs(10)).await {
        if ev["object"]["metadata"]["name"] == "h2-reset-1" {
            break;
        }
    }
    drop(cancelled);
    common::wait_until("the cancelled watch's watcher to end", || async {
        env.metric(&open).await == Some(1.0)
    })
    .await;
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "h2-reset-2", "namespace": "fixtures-a"}});
    env.sim.create("", "configmaps", obj).unwrap();
    let ev = kept
        .next_json(Duration::from_secs(10))
        .await
        .expect("event");
    assert_eq!(ev["object"]["metadata"]["name"], "h2-reset-2", "{ev}");
}

/// Shutting down ends the watches an HTTP/2 connection runs in its own task cleanly (the
/// stream's end, no ERROR event, as on HTTP/1.1), so their clients re-watch from their last RV
/// elsewhere; and the shutdown does not wait out its grace period for them.
#[tokio::test]
async fn shutdown_ends_a_connections_watches_cleanly() {
    const WATCHES: usize = 5;
    let mut b = EnvBuilder::fixtures();
    b.config.shutdown_grace_seconds = 60;
    let env = b.start().await;
    let mut sender = connect_h2(env.kcache.addr, 65_535).await;
    let path = "/api/v1/namespaces/fixtures-a/configmaps?watch=1&timeoutSeconds=600";
    let mut watches = Vec::new();
    for _ in 0..WATCHES {
        let mut w = watch_h2(&mut sender, path).await;
        // The initial events (RV unset): after them the watcher waits in the connection's task.
        for i in 0..25 {
            let ev = w.next_json(Duration::from_secs(10)).await;
            assert!(
                ev.is_some_and(|e| e["type"] == "ADDED"),
                "initial event {i}"
            );
        }
        watches.push(w);
    }
    env.metric_reaching(
        &["kcache_watchers{", "resource=\"configmaps\""],
        WATCHES as f64,
    )
    .await;
    let common::Env { kcache, sim: _sim } = env;
    tokio::time::timeout(Duration::from_secs(30), kcache.shutdown())
        .await
        .expect("shutdown within half its grace period");
    for (i, mut w) in watches.into_iter().enumerate() {
        let rest = w.drain(Duration::from_secs(10)).await;
        assert!(rest.is_empty(), "watch {i}: no event at shutdown: {rest:?}");
        assert!(w.ended_cleanly, "watch {i} ended with END_STREAM");
    }
}
