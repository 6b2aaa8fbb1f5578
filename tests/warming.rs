//! A kcache that is still warming up answers every read through the upstream, and a streaming
//! list whose initial-events-end bookmark does not come is given up within seconds.
//!
//! The upstream here withholds that bookmark, as a v1.28 apiserver with WatchList on was seen
//! doing for types nobody writes: a cache waiting for it would never sync, and one that
//! refused reads meanwhile (429) would fail clients the upstream could answer.

mod common;

use std::time::{Duration, Instant};

use common::{get, resource};
use kcache::config::Config;
use kcache::upstream::Upstream;
use kcache_sim::{Sim, SimConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_type_is_read_through_while_warming_and_synced_within_seconds() {
    common::init_logs();
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    for o in kcache_sim::seed::fixture_dataset()
        .into_iter()
        .filter(|o| o.resource == "namespaces" || o.resource == "secrets")
    {
        sim.create(o.group, o.resource, o.object).unwrap();
    }
    sim.faults().withhold_initial_events_end(true);
    let config = Config {
        resources: vec![resource("", "v1", "secrets")],
        ..Config::default()
    };
    let upstream = Upstream::from_url(&sim.url()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let kcache = kcache::server::start(&config, upstream, listener, admin)
        .await
        .unwrap();
    let base = kcache.url();
    // From the first moment: every read is answered (by the upstream while unsynced).
    let mut reads = 0;
    while started.elapsed() < Duration::from_secs(6) {
        for path in [
            "/api/v1/namespaces/fixtures-a/secrets",
            "/api/v1/namespaces/fixtures-a/secrets?resourceVersion=0",
            "/api/v1/secrets?limit=1",
        ] {
            let r = get(&base, path).await;
            assert_eq!(
                r.status,
                200,
                "{path} after {:?}: {}",
                started.elapsed(),
                r.text()
            );
            reads += 1;
            if r.header(kcache::api::CACHE_AGE_HEADER).is_some() {
                // Only a synced cache answers (and a cache stays synced once it is).
                assert!(kcache.app.registry().all().all(|c| c.is_synced()), "{path}");
            }
        }
        if kcache.app.registry().all().all(|c| c.is_synced()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let synced_after = started.elapsed();
    assert!(
        kcache.app.registry().all().all(|c| c.is_synced()),
        "not synced after {synced_after:?}"
    );
    assert!(
        synced_after < Duration::from_secs(5),
        "synced after {synced_after:?}"
    );
    assert!(reads > 0);
    // Synced: answered from the cache now.
    let r = get(
        &base,
        "/api/v1/namespaces/fixtures-a/secrets?resourceVersion=0",
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.header(kcache::api::CACHE_AGE_HEADER).is_some());
    // No 429 reached a client.
    let metrics = common::get(&kcache.admin_url(), "/metrics").await.text();
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("kcache_requests_total") && l.contains("code=\"429\"")),
        "{metrics}"
    );
}
