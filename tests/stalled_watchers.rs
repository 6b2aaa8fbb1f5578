//! Case 6 of the fault matrix (`fault_matrix.rs`): 1,000 downstream watchers that never read,
//! during churn of large objects. In a test binary of its own, so that the process's resident
//! memory, which it bounds, is this kcache's and its sim's alone, not also that of the tests
//! that would run beside it.

mod common;
#[path = "fault_common/mod.rs"]
mod fault_common;

use std::time::Duration;

use common::mirror::{converge_within, upstream_view};
use fault_common::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// Resident memory of this process (kcache and the sim run in it), in MiB.
fn rss_mib() -> f64 {
    kcache_bench::procstat::rss_bytes(std::process::id()).unwrap_or(0) as f64 / (1024.0 * 1024.0)
}

/// A watch request on a socket that is never read (with a small receive buffer, so the
/// kernel absorbs little and kcache's side fills up).
async fn stalled_watch(addr: &str, path: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(addr.parse().unwrap()).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s
}

/// Case 6: 1,000 downstream watchers that never read, during churn of 32 KiB objects.
#[tokio::test]
async fn stalled_downstream_watchers() {
    const BIG: usize = 64;
    const BLOB: usize = 32 * 1024;
    // Short histories, so that what grows is what the stalled watchers hold, not history.
    let (env, seed_objects) = start_env(|b| {
        b.config.cache.history_max_events = 256;
        b.sim.history_limit = 512;
    })
    .await;
    let front = Front::start(&env, Tiers::One).await;
    let base = env.url();
    let blob = |i: usize| format!("{i:08}{}", "x".repeat(BLOB - 8));
    for i in 0..BIG {
        env.sim
            .create(
                "",
                "configmaps",
                json!({"metadata": {"name": format!("big-{i}"), "namespace": "payments"},
                       "data": {"blob": blob(0)}}),
            )
            .unwrap();
    }
    env.settle("", "configmaps").await;
    let watchers = spawn_watchers(&env, front.url.clone());
    wait_started(&watchers).await;
    let rss_before = rss_mib();
    let addr = base.trim_start_matches("http://").to_string();
    let rv = env.kcache.cache("", "v1", "configmaps").unwrap().rv();
    let mut stalled = Vec::new();
    for i in 0..1000 {
        // Half start with every object as initial events, half from a recent RV.
        let path = if i % 2 == 0 {
            "/api/v1/configmaps?watch=1&resourceVersion=0".to_string()
        } else {
            format!("/api/v1/configmaps?watch=1&resourceVersion={rv}")
        };
        stalled.push(stalled_watch(&addr, &path).await);
    }
    let churn = ChurnTask::start(&env.sim, &seed_objects, Duration::from_millis(20));
    let mut peak = rss_mib();
    let mut half_way = 0.0;
    // 64 objects × 32 KiB rewritten 12 times: 24 MiB of events for every watcher, 24 GiB in
    // all: far more than the socket buffers take, so every stalled watcher blocks early on.
    for round in 1..=12 {
        if round == 7 {
            half_way = rss_mib();
        }
        for i in 0..BIG {
            let mut o = env
                .sim
                .get("", "configmaps", Some("payments"), &format!("big-{i}"))
                .unwrap();
            o["data"]["blob"] = json!(blob(round * 1000 + i));
            env.sim.update("", "configmaps", o).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak = peak.max(rss_mib());
        eprintln!("round {round}: {:.0} MiB", rss_mib());
    }
    churn.stop().await;
    let sim = env.sim.clone();
    for w in &watchers {
        converge_within(w.name, &w.mirror, Duration::from_secs(30), &|| {
            upstream_view(&sim, w.resource, &w.keep)
        })
        .await;
        peak = peak.max(rss_mib());
    }
    let grown = peak - rss_before;
    let late = peak - half_way;
    eprintln!(
        "1,000 stalled watchers: RSS {rss_before:.0} MiB before, {half_way:.0} MiB half-way, \
         peak {peak:.0} MiB (+{grown:.0} MiB; +{late:.0} MiB in the second half)"
    );
    // Bounded per watcher, not per event: what kcache holds for a watcher that does not read
    // is its channel (16 chunks), hyper's write buffer and the batch in hand — refcounted
    // shared event lines for live events (~0.15 MiB a watcher with its connection), private
    // 16 KiB initial-event chunks, at most 4 queued, for one started at RV=0 (≤ ~0.45 MiB
    // with hyper's write queue; measured +110 MiB for this mix) — so RSS reaches a
    // plateau once the watchers are blocked, however many events follow.
    assert!(
        grown < 384.0,
        "RSS grew by {grown:.0} MiB with 1,000 stalled watchers"
    );
    assert!(
        late < 96.0,
        "RSS kept growing with events: +{late:.0} MiB in the second half"
    );
    drop(stalled);
}
