//! Upstream faults during churn: dropped watches, 410 storms, 5xx, an apiserver restart with
//! compacted history. Afterwards every downstream watcher's view must equal the upstream's —
//! no missing, extra or stale object — and every watcher must have seen its events in order.

mod common;

use std::time::Duration;

use common::mirror::{cache_view, converge, spawn_mirror, upstream_view};
use common::{resource, EnvBuilder};
use kcache_sim::seed::apply as apply_churn;
use kcache_sim::seed::{self, Churn};

/// Run churn while `fault` is injected a few times, then check every mirror. Returns how often
/// kcache relisted its configmaps.
async fn fault_scenario(fault: impl Fn(&kcache_sim::Sim, usize)) -> u64 {
    let seed_objects = seed::demo_cluster(&seed::DemoSpec::default());
    let mut churn = Churn::new(11, &seed_objects);
    let env = EnvBuilder {
        seed: seed_objects,
        ..EnvBuilder::default()
    }
    .resources(vec![
        resource("", "v1", "configmaps"),
        resource("", "v1", "pods"),
    ])
    .start()
    .await;
    let base = env.url();
    let all_cms = spawn_mirror(base.clone(), "/api/v1/configmaps".into(), String::new());
    let front = spawn_mirror(
        base.clone(),
        "/api/v1/namespaces/shop/configmaps".into(),
        "labelSelector=tier%3Dfront".into(),
    );
    let node1 = spawn_mirror(
        base.clone(),
        "/api/v1/pods".into(),
        "fieldSelector=spec.nodeName%3Dnode-1".into(),
    );
    // Each mirror has listed; its watch resumes from that list's RV, so churn may start.
    for m in [&all_cms, &front, &node1] {
        common::wait_until("the mirror's first list", || async {
            m.lock().unwrap().starts >= 1
        })
        .await;
    }

    for round in 0..6 {
        for _ in 0..40 {
            apply_churn(&env.sim, churn.next_op());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        fault(&env.sim, round);
    }
    for _ in 0..40 {
        apply_churn(&env.sim, churn.next_op());
    }

    let sim = env.sim.clone();
    converge("all configmaps", &all_cms, &|| {
        upstream_view(&sim, "configmaps", &|_| true)
    })
    .await;
    converge("shop tier=front", &front, &|| {
        upstream_view(&sim, "configmaps", &|o| {
            o["metadata"]["namespace"] == "shop" && o["metadata"]["labels"]["tier"] == "front"
        })
    })
    .await;
    converge("pods on node-1", &node1, &|| {
        upstream_view(&sim, "pods", &|o| o["spec"]["nodeName"] == "node-1")
    })
    .await;
    // kcache's own cache equals the upstream too.
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    assert_eq!(
        cache_view(&cache),
        upstream_view(&env.sim, "configmaps", &|_| true)
    );
    cache.relists()
}

#[tokio::test]
async fn upstream_watch_drops() {
    let relists = fault_scenario(|sim, _| sim.faults().drop_watches()).await;
    assert_eq!(
        relists, 0,
        "a dropped watch resumes from its RV, it does not relist"
    );
}

#[tokio::test]
async fn upstream_410_storm() {
    let relists = fault_scenario(|sim, _| {
        sim.faults().fail_watches_with_410(3);
        sim.faults().drop_watches();
    })
    .await;
    assert!(relists > 0, "a 410 makes kcache relist");
}

#[tokio::test]
async fn upstream_restart_with_compacted_history() {
    fault_scenario(|sim, round| {
        if round % 2 == 0 {
            sim.faults().restart();
        }
    })
    .await;
}

#[tokio::test]
async fn upstream_errors_and_latency() {
    fault_scenario(|sim, round| {
        sim.faults()
            .fail_requests(2, if round % 2 == 0 { 500 } else { 503 });
        sim.faults()
            .set_latency(Duration::from_millis(if round % 2 == 0 { 30 } else { 0 }));
        sim.faults().drop_watches();
    })
    .await;
}
