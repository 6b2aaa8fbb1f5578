//! Fault injection: dropped watches, injected 410s and error codes, latency, restart,
//! unreachable server, slow watchers.

#[path = "sim_common/mod.rs"]
mod common;

use common::*;
use kcache_sim::{Sim, SimConfig};
use serde_json::json;
use std::time::Duration;

const WATCH: &str = "/api/v1/namespaces/fixtures-b/configmaps?watch=1&timeoutSeconds=10";

#[tokio::test]
async fn dropped_watches_end_abruptly_and_restart_compacts() {
    let sim = seeded(fast_cfg()).await;
    let addr = sim.addr();
    let w =
        tokio::spawn(
            async move { request(addr, "GET", WATCH, &[], b"", Duration::from_secs(5)).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.faults().drop_watches();
    let r = w.await.unwrap();
    assert_eq!(r.status, 200);
    assert!(!r.clean_end, "no terminating chunk");
    assert!(r.total < Duration::from_secs(2));
    // Restart: objects kept, history gone, open watches dropped.
    let old = sim.current_rv() - 5;
    let w =
        tokio::spawn(
            async move { request(addr, "GET", WATCH, &[], b"", Duration::from_secs(5)).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.faults().restart();
    assert!(!w.await.unwrap().clean_end);
    let r = get(
        &sim,
        &format!("/api/v1/namespaces/fixtures-b/configmaps?watch=1&resourceVersion={old}"),
    )
    .await;
    assert!(
        r.text().contains("\"reason\":\"Expired\",\"code\":410"),
        "{}",
        r.text()
    );
    assert_eq!(sim.list("", "configmaps").len(), 28);
}

#[tokio::test]
async fn injected_410_and_status_codes() {
    let sim = seeded(fast_cfg()).await;
    sim.faults().fail_watches_with_410(1);
    let p = "/api/v1/namespaces/fixtures-b/configmaps?watch=1&resourceVersion=5&timeoutSeconds=1";
    let r = get(&sim, p).await;
    assert!(
        r.text()
            .starts_with("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\""),
        "{}",
        r.text()
    );
    assert!(r.text().contains("too old resource version: 5"));
    let r = get(&sim, p).await;
    assert!(!r.text().contains("ERROR"));
    sim.faults().fail_requests(2, 429);
    for _ in 0..2 {
        let r = get(&sim, "/api/v1/namespaces/fixtures-b/configmaps").await;
        assert_eq!(r.status, 429);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(r.json()["reason"], "TooManyRequests");
        assert_eq!(r.json()["details"]["retryAfterSeconds"], 1);
    }
    assert_eq!(
        get(&sim, "/api/v1/namespaces/fixtures-b/configmaps")
            .await
            .status,
        200
    );
    sim.faults().fail_requests(1, 503);
    let r = get(&sim, "/api/v1/namespaces/fixtures-b/configmaps/b-cm-1").await;
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (503, json!("ServiceUnavailable"))
    );
    sim.faults().fail_requests(1, 500);
    let r = request(
        sim.addr(),
        "DELETE",
        "/api/v1/namespaces/fixtures-b/configmaps/b-cm-1",
        &[],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (500, json!("InternalError"))
    );
    assert!(sim
        .get("", "configmaps", Some("fixtures-b"), "b-cm-1")
        .is_some());
    sim.faults().set_latency(Duration::from_millis(300));
    let r = get(&sim, "/api/v1/namespaces/fixtures-b/configmaps").await;
    assert!(r.total >= Duration::from_millis(300));
}

#[tokio::test]
async fn unreachable_and_shutdown() {
    let sim = seeded(fast_cfg()).await;
    let addr = sim.addr();
    let w =
        tokio::spawn(
            async move { request(addr, "GET", WATCH, &[], b"", Duration::from_secs(5)).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.faults().set_unreachable(true);
    assert!(!w.await.unwrap().clean_end);
    let r = get(&sim, "/api/v1/namespaces/fixtures-b/configmaps").await;
    assert_eq!(r.status, 0, "no answer while unreachable");
    sim.faults().set_unreachable(false);
    assert_eq!(
        get(&sim, "/api/v1/namespaces/fixtures-b/configmaps")
            .await
            .status,
        200
    );
    sim.clone().shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_watcher_that_falls_behind_is_closed() {
    let sim = Sim::start(SimConfig {
        watch_buffer: 16,
        ..fast_cfg()
    })
    .await
    .unwrap();
    // A client that sends the request and then does not read.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let req = format!("GET /api/v1/namespaces/slow/configmaps?watch=1&resourceVersion={}&timeoutSeconds=20 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", sim.current_rv());
    s.write_all(req.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let big = "x".repeat(20_000);
    for i in 0..600 {
        sim.create("", "configmaps", json!({"metadata": {"name": format!("c-{i}"), "namespace": "slow"}, "data": {"k": big}})).unwrap();
    }
    // Now read everything: the stream ends (closed by the server) well before its timeout,
    // with fewer events than were written.
    let mut all = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut all)).await;
    assert!(read.is_ok(), "stream closed by the server");
    let text = String::from_utf8_lossy(&all);
    let events = text.matches("{\"type\":\"ADDED\"").count();
    assert!(events < 600, "got all {events} events");
    assert!(text.ends_with("0\r\n\r\n"), "closed cleanly");
}
