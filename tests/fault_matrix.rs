//! The fault matrix: every upstream fault kcache must ride out, each under churn with several
//! downstream watchers (unfiltered and filtered; started from a list at RV=0, a watch at RV=0,
//! a WatchList from a recent RV, and a late watch resuming from history). Every case ends with
//! every watcher's state equal to the upstream's (no missing, extra, stale or reordered
//! object), kcache's own cache equal to it, and what kcache holds bounded.
//!
//! | case | fault | asserts besides convergence |
//! |---|---|---|
//! | 1 | upstream watches dropped every 250 ms for 8 s | no relist (watches resume) |
//! | 2 | every upstream watch answers 410 for a full minute | kcache relists, backed off |
//! | 3 | 500s/503s, and latency over kcache's request timeout | consistent reads stay served |
//! | 4 | upstream restarts with compacted history, 4 times | relists after each restart |
//! | 5 | upstream unreachable for 60 s while its store changes | reads served from cache with the age header, stale in metrics and /readyz?verbose, readiness green |
//! | 6 | 1,000 downstream watchers that never read, large objects | RSS bounded; a normal watcher stays exact (in `stalled_watchers.rs`, a process of its own) |
//!
//! Cases 1-5 also run through two tiers (`..._through_two_tiers`): the watchers connect to a
//! second kcache in front of the first, the faults hit the sim behind the first, and both
//! tiers' caches and every watcher end equal to the upstream without tier 2 ever relisting
//! (a relist at tier 1 reaches tier 2 as events). Cases 1 and 4 also run with the watchers on
//! HTTP/2 (`..._over_http2`), where kcache serves a connection's watches in its own task.
//!
//! The minute-long cases sort first so they start together (libtest runs tests by name on as
//! many threads as there are cores); the others are short.

mod common;
#[path = "fault_common/mod.rs"]
mod fault_common;

use std::time::{Duration, Instant};

use common::{get, Env};
use fault_common::*;
use kcache::upstream::ReflectorConfig;

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
    check_converged(&env, &front, &watchers, Duration::from_secs(45)).await;
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
    check_converged(&env, &front, &watchers, Duration::from_secs(30)).await;
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

/// Case 1 with the downstream watchers on HTTP/2, where a connection's watches run in its own
/// task.
#[tokio::test]
async fn dropped_upstream_watches_over_http2() {
    dropped_watches_over(Tiers::One, true).await
}

async fn dropped_watches(tiers: Tiers) {
    dropped_watches_over(tiers, false).await
}

async fn dropped_watches_over(tiers: Tiers, http2: bool) {
    let (env, seed_objects) = start_env(|_| {}).await;
    let front = Front::start(&env, tiers).await;
    let watchers = spawn_watchers_over(&env, front.url.clone(), http2);
    wait_started(&watchers).await;
    let churn = ChurnTask::start(&env.sim, &seed_objects, Duration::from_millis(10));
    for _ in 0..32 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        env.sim.faults().drop_watches();
    }
    churn.stop().await;
    check_converged(&env, &front, &watchers, Duration::from_secs(30)).await;
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
        // The reflector's re-watch times out like any request of kcache's: the upstream counts
        // as lost. (Until then a slow upstream is one that still answers, and a read whose
        // probe times out is passed through: docs/semantics.md, "Stale while down".)
        let c = &cache;
        common::wait_until("the timed-out watch counts as unreachable", || async move {
            !c.contact().reachable()
        })
        .await;
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
        faults.set_latency(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    churn.stop().await;
    check_converged(&env, &front, &watchers, Duration::from_secs(30)).await;
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

/// Case 4 with the downstream watchers on HTTP/2: the relists' 410s reach watches that run in
/// their connection's task.
#[tokio::test]
async fn upstream_restart_with_compacted_history_over_http2() {
    restart_with_compacted_history_over(Tiers::One, true).await
}

async fn restart_with_compacted_history(tiers: Tiers) {
    restart_with_compacted_history_over(tiers, false).await
}

async fn restart_with_compacted_history_over(tiers: Tiers, http2: bool) {
    let (env, seed_objects) = start_env(|_| {}).await;
    let front = Front::start(&env, tiers).await;
    let watchers = spawn_watchers_over(&env, front.url.clone(), http2);
    wait_started(&watchers).await;
    let churn = ChurnTask::start(&env.sim, &seed_objects, Duration::from_millis(10));
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        env.sim.faults().restart();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    churn.stop().await;
    check_converged(&env, &front, &watchers, Duration::from_secs(30)).await;
    assert!(
        relists(&env) >= 1,
        "a compacted upstream makes kcache relist"
    );
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
