//! HTTP/2 (h2c, prior knowledge): client-go multiplexes all its watches on one connection, so
//! hundreds of concurrent watch streams on one connection must all work.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::EnvBuilder;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

#[tokio::test]
async fn many_watches_share_one_http2_connection() {
    let env = EnvBuilder::fixtures().start().await;
    let stream = TcpStream::connect(env.kcache.addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2c handshake");
    tokio::spawn(conn);

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
