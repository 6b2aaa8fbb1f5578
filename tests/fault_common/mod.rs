//! What the fault-matrix tests share: a sim and kcache under churn, downstream watchers that
//! mirror what they receive, an optional second tier, and the convergence check.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::mirror::{
    cache_view, converge_within, spawn_mirror_opts, upstream_view, Mirror, MirrorOpts, Start,
};
use crate::common::{resource, Env, EnvBuilder};
use kcache_sim::seed::apply as apply_churn;
use kcache_sim::seed::{self, Churn};
use kcache_sim::Sim;
use serde_json::Value;

pub async fn start_env(tune: impl FnOnce(&mut EnvBuilder)) -> (Env, Vec<seed::SeedObject>) {
    let seed_objects = seed::demo_cluster(&seed::DemoSpec::default());
    let mut b = EnvBuilder {
        seed: seed_objects.clone(),
        ..EnvBuilder::default()
    }
    .resources(vec![
        resource("", "v1", "configmaps"),
        resource("", "v1", "pods"),
    ]);
    tune(&mut b);
    (b.start().await, seed_objects)
}

/// Changes to configmaps and pods written straight into the sim's store (so they go on while
/// the sim's HTTP side is failing), every `period`, until stopped.
pub struct ChurnTask {
    pub stop: Arc<AtomicBool>,
    pub task: tokio::task::JoinHandle<usize>,
}

impl ChurnTask {
    pub fn start(sim: &Sim, seed_objects: &[seed::SeedObject], period: Duration) -> ChurnTask {
        let stop = Arc::new(AtomicBool::new(false));
        let mut churn = Churn::new(23, seed_objects);
        let (sim, flag) = (sim.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut n = 0;
            while !flag.load(Ordering::SeqCst) {
                apply_churn(&sim, churn.next_op());
                n += 1;
                tokio::time::sleep(period).await;
            }
            n
        });
        ChurnTask { stop, task }
    }

    pub async fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

pub type Keep = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// A downstream watcher and the part of the upstream it must end up equal to.
pub struct Watcher {
    pub name: &'static str,
    pub resource: &'static str,
    pub keep: Keep,
    pub mirror: Mirror,
}

/// Six watchers at `base` (kcache, or the edge kcache in front of it): unfiltered and
/// filtered, each way of starting.
pub fn spawn_watchers(env: &Env, base: String) -> Vec<Watcher> {
    spawn_watchers_over(env, base, false)
}

/// [`spawn_watchers`], watching over HTTP/2 (h2c) when `http2` is set.
pub fn spawn_watchers_over(env: &Env, base: String, http2: bool) -> Vec<Watcher> {
    // The newest RV of each type: the cache RV only moves with its own type's events.
    let recent = |resource| {
        env.sim
            .list("", resource)
            .iter()
            .map(crate::common::mirror::rv_of)
            .max()
            .unwrap_or(0)
    };
    let all = || -> Keep { Box::new(|_| true) };
    let w = |name, resource, collection: &str, selector: &str, start, keep| Watcher {
        name,
        resource,
        keep,
        mirror: spawn_mirror_opts(
            base.clone(),
            collection.into(),
            selector.into(),
            MirrorOpts {
                start,
                http2,
                ..MirrorOpts::default()
            },
        ),
    };
    vec![
        w(
            "configmaps, list at RV=0",
            "configmaps",
            "/api/v1/configmaps",
            "",
            Start::List,
            all(),
        ),
        w(
            "configmaps, watch at RV=0",
            "configmaps",
            "/api/v1/configmaps",
            "",
            Start::WatchFromZero,
            all(),
        ),
        w(
            "configmaps, WatchList from a recent RV",
            "configmaps",
            "/api/v1/configmaps",
            "",
            Start::WatchList(recent("configmaps")),
            all(),
        ),
        w(
            "shop tier=front, late watch resuming from history",
            "configmaps",
            "/api/v1/namespaces/shop/configmaps",
            "labelSelector=tier%3Dfront",
            Start::ListThenLateWatch(Duration::from_millis(700)),
            Box::new(|o| {
                o["metadata"]["namespace"] == "shop" && o["metadata"]["labels"]["tier"] == "front"
            }),
        ),
        w(
            "pods on node-1, WatchList from a recent RV",
            "pods",
            "/api/v1/pods",
            "fieldSelector=spec.nodeName%3Dnode-1",
            Start::WatchList(recent("pods")),
            Box::new(|o| o["spec"]["nodeName"] == "node-1"),
        ),
        w(
            "pods on node-2, watch at RV=0",
            "pods",
            "/api/v1/pods",
            "fieldSelector=spec.nodeName%3Dnode-2",
            Start::WatchFromZero,
            Box::new(|o| o["spec"]["nodeName"] == "node-2"),
        ),
    ]
}

/// Wait until every watcher has started (so the fault hits running watches).
pub async fn wait_started(watchers: &[Watcher]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while watchers
        .iter()
        .any(|w| w.mirror.lock().unwrap().starts == 0)
    {
        assert!(Instant::now() < deadline, "watchers did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where the watchers connect: to kcache in front of the sim, or to a second kcache (tier 2)
/// in front of that one, while the faults hit the sim behind tier 1.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tiers {
    One,
    Two,
}

/// The watchers' kcache: tier 1 itself, or a tier 2 caching the same types from it.
pub struct Front {
    pub edge: Option<kcache::server::Running>,
    pub url: String,
}

impl Front {
    pub async fn start(env: &Env, tiers: Tiers) -> Front {
        match tiers {
            Tiers::One => Front {
                edge: None,
                url: env.url(),
            },
            Tiers::Two => {
                let config = kcache::config::Config {
                    resources: vec![resource("", "v1", "configmaps"), resource("", "v1", "pods")],
                    ..kcache::config::Config::default()
                };
                let edge = env.start_edge(&config).await;
                let url = edge.url();
                Front {
                    edge: Some(edge),
                    url,
                }
            }
        }
    }

    /// Relists of tier 2 (0 with one tier): a fault at the sim must reach tier 2 as events,
    /// never as a relist (tier 1's downstream watches survive its own relists).
    pub fn edge_relists(&self) -> u64 {
        self.edge
            .as_ref()
            .map_or(0, |e| e.cache("", "v1", "configmaps").unwrap().relists())
    }
}

/// Every watcher and kcache's own caches (both tiers') end equal to the upstream; what each
/// kcache's caches hold stayed bounded.
pub async fn check_converged(env: &Env, front: &Front, watchers: &[Watcher], within: Duration) {
    for w in watchers {
        let sim = env.sim.clone();
        converge_within(w.name, &w.mirror, within, &|| {
            upstream_view(&sim, w.resource, &w.keep)
        })
        .await;
        assert!(
            w.mirror.lock().unwrap().events > 0,
            "{}: saw no events",
            w.name
        );
    }
    for r in ["configmaps", "pods"] {
        let cache = env.kcache.cache("", "v1", r).unwrap();
        assert_eq!(
            cache_view(&cache),
            upstream_view(&env.sim, r, &|_| true),
            "{r}"
        );
        if let Some(edge) = &front.edge {
            let cache = edge.cache("", "v1", r).unwrap();
            assert_eq!(
                cache_view(&cache),
                upstream_view(&env.sim, r, &|_| true),
                "tier 2 {r}"
            );
        }
    }
    assert_eq!(front.edge_relists(), 0, "tier 2 relisted");
    // Bounded per instance, by each kcache's own account of what its caches hold (objects,
    // their indexes, history): the tests running beside this one in the process (libtest's
    // threads) have their own instances, which this does not count. The objects are a few
    // MiB (1.5 MiB in the short cases); the history of a minute of churn a few more.
    let tiers =
        std::iter::once(("tier 1", &env.kcache)).chain(front.edge.iter().map(|e| ("tier 2", e)));
    for (tier, k) in tiers {
        let held: usize = ["configmaps", "pods"]
            .iter()
            .map(|r| {
                let m = k.cache("", "v1", r).unwrap().memory();
                m.json + m.head + m.index + m.history
            })
            .sum();
        let mib = held as f64 / (1024.0 * 1024.0);
        eprintln!("{tier}: its caches hold {mib:.1} MiB");
        assert!(mib < 32.0, "{tier}: its caches hold {mib:.1} MiB");
    }
}
