//! The fault matrix: every upstream fault kcache must ride out, each under churn with several
//! downstream watchers (unfiltered and filtered; started from a list at RV=0, a watch at RV=0,
//! a WatchList from a recent RV, and a late watch resuming from history). Every case ends with
//! every watcher's state equal to the upstream's (no missing, extra, stale or reordered
//! object), kcache's own cache equal to it, and the process's memory bounded.
//!
//! | case | fault | asserts besides convergence |
//! |---|---|---|
//! | 1 | upstream watches dropped every 250 ms for 8 s | no relist (watches resume) |
//! | 2 | every upstream watch answers 410 for a full minute | kcache relists, backed off |
//! | 3 | 500s/503s, and latency over kcache's request timeout | consistent reads stay served |
//! | 4 | upstream restarts with compacted history, 4 times | relists after each restart |
//! | 5 | upstream unreachable for 60 s while its store changes | reads served from cache with the age header, stale in metrics and /readyz?verbose, readiness green |
//! | 6 | 1,000 downstream watchers that never read, large objects | RSS bounded; a normal watcher stays exact |
//!
//! Cases 1-5 also run through two tiers (`..._through_two_tiers`): the watchers connect to a
//! second kcache in front of the first, the faults hit the sim behind the first, and both
//! tiers' caches and every watcher end equal to the upstream without tier 2 ever relisting
//! (a relist at tier 1 reaches tier 2 as events).
//!
//! The minute-long cases sort first so they start together (libtest runs tests by name on as
//! many threads as there are cores); the others are short.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::mirror::{
    cache_view, converge_within, spawn_mirror_with, upstream_view, Mirror, Start,
};
use common::{get, resource, Env, EnvBuilder};
use kcache::upstream::ReflectorConfig;
use kcache_sim::seed::apply as apply_churn;
use kcache_sim::seed::{self, Churn};
use kcache_sim::Sim;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// Resident memory of this process (kcache and the sim run in it), in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

async fn start_env(tune: impl FnOnce(&mut EnvBuilder)) -> (Env, Vec<seed::SeedObject>) {
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
struct ChurnTask {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl ChurnTask {
    fn start(sim: &Sim, seed_objects: &[seed::SeedObject], period: Duration) -> ChurnTask {
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

    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

type Keep = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// A downstream watcher and the part of the upstream it must end up equal to.
struct Watcher {
    name: &'static str,
    resource: &'static str,
    keep: Keep,
    mirror: Mirror,
}

/// Six watchers at `base` (kcache, or the edge kcache in front of it): unfiltered and
/// filtered, each way of starting.
fn spawn_watchers(env: &Env, base: String) -> Vec<Watcher> {
    // The newest RV of each type: the cache RV only moves with its own type's events.
    let recent = |resource| {
        env.sim
            .list("", resource)
            .iter()
            .map(common::mirror::rv_of)
            .max()
            .unwrap_or(0)
    };
    let all = || -> Keep { Box::new(|_| true) };
    let w = |name, resource, collection: &str, selector: &str, start, keep| Watcher {
        name,
        resource,
        keep,
        mirror: spawn_mirror_with(base.clone(), collection.into(), selector.into(), start),
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
async fn wait_started(watchers: &[Watcher]) {
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
enum Tiers {
    One,
    Two,
}

/// The watchers' kcache: tier 1 itself, or a tier 2 caching the same types from it.
struct Front {
    edge: Option<kcache::server::Running>,
    url: String,
}

impl Front {
    async fn start(env: &Env, tiers: Tiers) -> Front {
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
    fn edge_relists(&self) -> u64 {
        self.edge
            .as_ref()
            .map_or(0, |e| e.cache("", "v1", "configmaps").unwrap().relists())
    }
}

/// Every watcher and kcache's own caches (both tiers') end equal to the upstream; memory
/// stayed bounded.
async fn check_converged(
    env: &Env,
    front: &Front,
    watchers: &[Watcher],
    within: Duration,
    rss_before: f64,
) {
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
    // The objects here are a few MiB; the two tests running beside this one (libtest's
    // threads) start their own sim and kcache, a few tens of MiB each.
    let grown = rss_mib() - rss_before;
    eprintln!("RSS grew by {grown:.0} MiB");
    assert!(grown < 512.0, "RSS grew by {grown:.0} MiB");
}

/// How many relists in a row fit in `window`: the first at once (its watch had worked), each
/// later one after its backoff (attempt 1, 2, …; see `ReflectorConfig::backoff`), with every
/// wait at its longest, and at its shortest (the jitter halves it at most).
fn relists_within(window: Duration, cfg: &ReflectorConfig) -> (u64, u64) {
    let count = |scale: f64| {
        let (mut n, mut spent) = (1u64, Duration::ZERO);
        loop {
            let exp = cfg
                .backoff_initial
                .saturating_mul(1u32 << n.min(16) as u32)
                .min(cfg.backoff_max);
            spent += exp.mul_f64(scale);
            if spent > window {
                return n;
            }
            n += 1;
        }
    };
    (count(1.0), count(0.5))
}

fn relists(env: &Env) -> u64 {
    env.kcache.cache("", "v1", "configmaps").unwrap().relists()
}

/// The age header of an answer, parsed.
fn age_of(r: &common::Resp) -> f64 {
    let v = r
        .header(kcache::api::CACHE_AGE_HEADER)
        .unwrap_or_else(|| panic!("no {} header", kcache::api::CACHE_AGE_HEADER));
    v.parse().unwrap_or_else(|_| panic!("age {v:?}"))
}

/// Case 2: every watch answers 410 for a full minute, under churn.
#[tokio::test]
async fn a_minute_of_410_on_every_watch() {
    minute_of_410(Tiers::One).await
}

#[tokio::test]
async fn a_minute_of_410_on_every_watch_through_two_tiers() {
    minute_of_410(Tiers::Two).await
}

async fn minute_of_410(tiers: Tiers) {
    let (env, seed_objects) = start_env(|_| {}).await;
    let front = Front::start(&env, tiers).await;
    let rss = rss_mib();
    let watchers = spawn_watchers(&env, front.url.clone());
    wait_started(&watchers).await;
    let churn = ChurnTask::start(&env.sim, &seed_objects, Duration::from_millis(20));
    let before = relists(&env);
    env.sim.faults().fail_all_watches_with_410(true);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Reads keep being served from the cache meanwhile.
        let r = get(&env.url(), "/api/v1/configmaps?resourceVersion=0").await;
        assert_eq!(r.status, 200);
        age_of(&r);
    }
    env.sim.faults().fail_all_watches_with_410(false);
    let during = relists(&env) - before;
    // Backed off as the reflector's schedule says (about eight in a minute), not thousands:
    // at most as many as fit when every backoff runs its shortest, plus the one under way; at
    // least as many as fit when every one runs its longest, less that one and one for the
    // time the relists themselves take.
    let (slowest, fastest) = relists_within(started.elapsed(), &ReflectorConfig::default());
    assert!(
        (slowest.saturating_sub(2)..=fastest + 1).contains(&during),
        "{during} relists during a minute of 410s; the backoff schedule allows {slowest}..={fastest}"
    );
    let ops = churn.stop().await;
    eprintln!("410 minute: {ops} changes, {during} relists");
    // After the storm the reflector may still sleep out its last backoff (≤ 30 s).
    check_converged(&env, &front, &watchers, Duration::from_secs(45), rss).await;
}

/// Case 5: the upstream is unreachable for 60 s while its store keeps changing.
#[tokio::test]
async fn a_minute_upstream_unreachable() {
    minute_unreachable(Tiers::One).await
}

#[tokio::test]
async fn a_minute_upstream_unreachable_through_two_tiers() {
    minute_unreachable(Tiers::Two).await
}

async fn minute_unreachable(tiers: Tiers) {
    let (env, seed_objects) = start_env(|_| {}).await;
    let front = Front::start(&env, tiers).await;
    let rss = rss_mib();
    let base = env.url();
    let watchers = spawn_watchers(&env, front.url.clone());
    wait_started(&watchers).await;
    let churn = ChurnTask::start(&env.sim, &seed_objects, Duration::from_millis(20));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let name = {
        let cms = env.sim.list("", "configmaps");
        let o = cms
            .iter()
            .find(|o| o["metadata"]["namespace"] == "shop")
            .unwrap();
        o["metadata"]["name"].as_str().unwrap().to_string()
    };
    env.sim.faults().set_unreachable(true);
    let started = Instant::now();
    let mut checks = 0;
    while started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let down = started.elapsed().as_secs_f64();
        // LIST and GET, RV=0 and unset, answered from the cache with its age.
        for path in [
            "/api/v1/configmaps?resourceVersion=0".to_string(),
            "/api/v1/configmaps".to_string(),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1".to_string(),
            format!("/api/v1/namespaces/shop/configmaps/{name}"),
            format!("/api/v1/namespaces/shop/configmaps/{name}?resourceVersion=0"),
        ] {
            let t = Instant::now();
            let r = get(&base, &path).await;
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            let age = age_of(&r);
            assert!(age >= down - 1.5, "{path}: age {age} after {down:.1}s down");
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "{path} took {:?}",
                t.elapsed()
            );
        }
        // Through tier 2 too: tier 1 answers its consistency probes from its cache.
        if tiers == Tiers::Two {
            for path in ["/api/v1/configmaps?resourceVersion=0", "/api/v1/configmaps"] {
                let r = get(&front.url, path).await;
                assert_eq!(r.status, 200, "tier 2 {path}: {}", r.text());
            }
        }
        let ready = get(&env.admin_url(), "/readyz").await;
        assert_eq!(ready.status, 200, "stays ready while stale");
        let verbose = get(&env.admin_url(), "/readyz?verbose").await.text();
        assert!(
            verbose.contains("[+]cache v1/configmaps ok (stale: upstream unreachable for"),
            "{verbose}"
        );
        let m = get(&env.admin_url(), "/metrics").await.text();
        assert!(
            m.contains("kcache_upstream_reachable{resource=\"configmaps\"} 0"),
            "metrics say reachable"
        );
        let age: f64 = m
            .lines()
            .find_map(|l| l.strip_prefix("kcache_cache_age_seconds{resource=\"configmaps\"} "))
            .and_then(|v| v.parse().ok())
            .expect("kcache_cache_age_seconds");
        assert!(age >= down - 1.5, "metric age {age} after {down:.1}s down");
        checks += 1;
    }
    let last = get(&env.admin_url(), "/readyz?verbose").await.text();
    eprintln!(
        "after a minute down: {}",
        last.lines()
            .find(|l| l.contains("configmaps"))
            .unwrap_or("")
    );
    env.sim.faults().set_unreachable(false);
    let ops = churn.stop().await;
    eprintln!("unreachable minute: {ops} changes, {checks} rounds of checks");
    check_converged(&env, &front, &watchers, Duration::from_secs(30), rss).await;
    let m = get(&env.admin_url(), "/metrics").await.text();
    assert!(m.contains("kcache_upstream_reachable{resource=\"configmaps\"} 1"));
    let verbose = get(&env.admin_url(), "/readyz?verbose").await.text();
    assert!(verbose.contains("[+]cache v1/configmaps ok\n"), "{verbose}");
}

/// Case 1: upstream watches dropped mid-stream, again and again.
#[tokio::test]
async fn dropped_upstream_watches() {
    dropped_watches(Tiers::One).await
}

#[tokio::test]
async fn dropped_upstream_watches_through_two_tiers() {
    dropped_watches(Tiers::Two).await
}

async fn dropped_watches(tiers: Tiers) {
    let (env, seed_objects) = start_env(|_| {}).await;
    let front = Front::start(&env, tiers).await;
    let rss = rss_mib();
    let watchers = spawn_watchers(&env, front.url.clone());
    wait_started(&watchers).await;
    let churn = ChurnTask::start(&env.sim, &seed_objects, Duration::from_millis(10));
    for _ in 0..32 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        env.sim.faults().drop_watches();
    }
    churn.stop().await;
    check_converged(&env, &front, &watchers, Duration::from_secs(30), rss).await;
    assert_eq!(relists(&env), 0, "a dropped watch resumes from its RV");
}

/// Case 3: 500s and 503s, and latency beyond kcache's request timeout (1 s here).
#[tokio::test]
async fn upstream_errors_and_timeouts() {
    errors_and_timeouts(Tiers::One).await
}

#[tokio::test]
async fn upstream_errors_and_timeouts_through_two_tiers() {
    errors_and_timeouts(Tiers::Two).await
}

async fn errors_and_timeouts(tiers: Tiers) {
    let (env, seed_objects) = start_env(|b| {
        b.config.staleness.upstream_request_timeout_seconds = 1;
    })
    .await;
    let front = Front::start(&env, tiers).await;
    let rss = rss_mib();
    let base = env.url();
    let watchers = spawn_watchers(&env, front.url.clone());
    wait_started(&watchers).await;
    let churn = ChurnTask::start(&env.sim, &seed_objects, Duration::from_millis(10));
    let faults = env.sim.faults();
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    for round in 0..2 {
        faults.fail_requests(4, if round == 0 { 500 } else { 503 });
        faults.drop_watches();
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Every upstream answer now takes longer than kcache waits.
        faults.set_latency(Duration::from_secs(3));
        faults.drop_watches();
        let t = Instant::now();
        let r = get(&base, "/api/v1/configmaps").await;
        // The probe gives up after the request timeout; the cache answers, stale.
        assert_eq!(r.status, 200, "{}", r.text());
        age_of(&r);
        assert!(
            t.elapsed() < Duration::from_millis(2500),
            "took {:?}",
            t.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            !cache.contact().reachable(),
            "a timed-out watch counts as unreachable"
        );
        faults.set_latency(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    churn.stop().await;
    check_converged(&env, &front, &watchers, Duration::from_secs(30), rss).await;
    assert!(cache.contact().reachable());
}

/// Case 4: the upstream restarts with its history compacted.
#[tokio::test]
async fn upstream_restart_with_compacted_history() {
    restart_with_compacted_history(Tiers::One).await
}

#[tokio::test]
async fn upstream_restart_with_compacted_history_through_two_tiers() {
    restart_with_compacted_history(Tiers::Two).await
}

async fn restart_with_compacted_history(tiers: Tiers) {
    let (env, seed_objects) = start_env(|_| {}).await;
    let front = Front::start(&env, tiers).await;
    let rss = rss_mib();
    let watchers = spawn_watchers(&env, front.url.clone());
    wait_started(&watchers).await;
    let churn = ChurnTask::start(&env.sim, &seed_objects, Duration::from_millis(10));
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        env.sim.faults().restart();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    churn.stop().await;
    check_converged(&env, &front, &watchers, Duration::from_secs(30), rss).await;
    assert!(
        relists(&env) >= 1,
        "a compacted upstream makes kcache relist"
    );
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

// ---- the staleness policy ----

/// Answers from the cache carry `X-Kcache-Cache-Age`; answers passed through do not.
#[tokio::test]
async fn cache_age_header_on_cached_answers_only() {
    let (env, _) = start_env(|_| {}).await;
    let base = env.url();
    let h = kcache::api::CACHE_AGE_HEADER;
    // Consistent reads are the cache's once it can prove them fresh.
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let name = env
        .sim
        .list("", "configmaps")
        .iter()
        .find(|o| o["metadata"]["namespace"] == "shop")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .unwrap();
    for path in [
        "/api/v1/configmaps?resourceVersion=0".to_string(),
        "/api/v1/configmaps".to_string(),
        "/api/v1/configmaps?limit=2".to_string(),
        format!("/api/v1/namespaces/shop/configmaps/{name}"),
        format!("/api/v1/namespaces/shop/configmaps/{name}?resourceVersion=0"),
        // A 404 decided by the cache is an answer from the cache too.
        "/api/v1/namespaces/shop/configmaps/no-such-thing".to_string(),
        "/apis/kcache.dev/v1/indexes/core/v1/pods/spec.nodeName?values=node-1".to_string(),
        "/apis/kcache.dev/v1/indexes/core/v1/pods/spec.nodeName/counts".to_string(),
    ] {
        let r = get(&base, &path).await;
        let age = age_of(&r);
        // Bookmarks come every second here.
        assert!((0.0..3.0).contains(&age), "{path}: age {age}");
        let v = r.header(h).unwrap();
        assert!(
            v.contains('.') && v.split('.').nth(1).unwrap().len() == 3,
            "{v}"
        );
    }
    let w = common::Watch::open(&base, "/api/v1/configmaps?watch=1&resourceVersion=0").await;
    assert_eq!(w.status, 200);
    assert!(w.headers.get(h).is_some(), "watch response head");
    for path in [
        "/api/v1/namespaces",                 // not cached
        "/api/v1",                            // discovery
        "/api/v1/namespaces/shop/pods/x/log", // subresource
    ] {
        let r = get(&base, path).await;
        assert!(r.header(h).is_none(), "{path} was passed through");
    }
    // Table requests for a type whose columns kcache cannot get also go upstream.
    let r = common::get_with(
        &base,
        "/api/v1/configmaps?resourceVersion=0",
        &[("Accept", "application/vnd.kubernetes.protobuf")],
    )
    .await;
    assert!(r.header(h).is_none(), "protobuf is passed through");
}

/// With maxConsistentReadStalenessSeconds=2 and the upstream unreachable, consistent reads
/// are served from the cache for 2 s and then get the apiserver's 504 Timeout; reads at RV=0
/// keep being served.
#[tokio::test]
async fn consistent_reads_get_504_once_older_than_the_limit() {
    let (env, _) =
        start_env(|b| b.config.staleness.max_consistent_read_staleness_seconds = 2).await;
    let base = env.url();
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    // Consistent reads are the cache's once it can prove them fresh (also after recovery).
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    // Fresh: the contact before going down is at most a bookmark interval (1 s) old.
    while cache.contact().age() > Duration::from_millis(300) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.sim.faults().set_unreachable(true);
    let r = get(&base, "/api/v1/configmaps").await;
    assert_eq!(r.status, 200, "younger than the limit: {}", r.text());
    assert!(age_of(&r) < 2.0);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for path in [
        "/api/v1/configmaps",
        "/api/v1/namespaces/shop/configmaps/kube-root-ca.crt",
    ] {
        let r = get(&base, path).await;
        assert_eq!(r.status, 504, "{path}: {}", r.text());
        let s = r.json();
        assert_eq!(s["reason"], "Timeout");
        assert_eq!(s["code"], 504);
        assert!(
            s["message"].as_str().unwrap().starts_with("Timeout: "),
            "{s}"
        );
        assert_eq!(r.header("Retry-After"), Some("1"));
    }
    for path in [
        "/api/v1/configmaps?resourceVersion=0",
        "/api/v1/namespaces/shop/configmaps/kube-root-ca.crt?resourceVersion=0",
    ] {
        let r = get(&base, path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(age_of(&r) >= 2.0);
    }
    let m = get(&env.admin_url(), "/metrics").await.text();
    assert!(
        m.contains("kcache_consistent_reads_total{resource=\"configmaps\",outcome=\"too_stale\"}")
    );
    env.sim.faults().set_unreachable(false);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(&base, "/api/v1/configmaps").await;
        // Confirmed current by the probe: served even before the reflector is back (the age
        // header still says how long the reflector has not heard from the upstream).
        if r.status == 200 {
            age_of(&r);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "consistent reads recover: {}",
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
