//! The consistency promises of reads with resourceVersion unset, on an upstream that lags, one
//! that fails, and one that cannot be reached, on both upstream versions:
//!
//! - a WatchList (`sendInitialEvents=true`, resourceVersion unset) never gets its
//!   initial-events-end bookmark below the upstream's revision when the watch began: what the
//!   client then holds includes every write acknowledged before it asked;
//! - `consistentReads.source: upstream` passes such watches through, as it does lists and gets;
//! - a consistency probe the upstream answers with an error passes the read through (the
//!   upstream can answer it), and the cache answers unconfirmed, marked, only while the upstream
//!   cannot be reached at all;
//! - a consistent GET reads its own write on both versions, from the cache in front of v1.28
//!   and straight from the upstream, without a probe, in front of v1.34 (whose probe waits for
//!   etcd's progress notification while the GET itself does not).

mod common;
#[path = "sim_common/mod.rs"]
mod raw;

use std::time::Duration;

use common::{get, resource, wait_until, Env, EnvBuilder, Watch};
use kcache::api::{CACHE_AGE_HEADER, UNCONFIRMED_HEADER};
use kcache::config::ConsistentSource;
use kcache_sim::{Profile, SimConfig};
use serde_json::{json, Value};

const NS: &str = "fixtures-a";

async fn env(profile: Profile, lags: Vec<Duration>, source: ConsistentSource) -> Env {
    let mut b = EnvBuilder {
        sim: SimConfig {
            bookmark_interval: Duration::from_secs(600),
            watch_cache_lags: lags,
            ..SimConfig::for_profile(profile)
        },
        ..EnvBuilder::default()
    }
    .resources(vec![resource("", "v1", "configmaps")]);
    b.config.consistent_reads.source = source;
    let env = b.start().await;
    env.sim
        .create(
            "",
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        )
        .unwrap();
    env
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS}, "data": {"k": "v"}})
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

const WATCHLIST: &str = "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&watch=1&timeoutSeconds=5";

/// Read a WatchList until its initial-events-end bookmark: the names of the objects before it
/// and the bookmark's RV.
async fn until_end_bookmark(w: &mut Watch) -> (Vec<String>, u64) {
    let mut names = Vec::new();
    loop {
        let ev = w
            .next_json(Duration::from_secs(10))
            .await
            .expect("the end bookmark comes");
        let obj = &ev["object"];
        if ev["type"] == "BOOKMARK" {
            assert_eq!(
                obj["metadata"]["annotations"]["k8s.io/initial-events-end"], "true",
                "{ev}"
            );
            return (names, rv_of(obj));
        }
        names.push(obj["metadata"]["name"].as_str().unwrap().to_string());
    }
}

/// Writes acknowledged just before a WatchList on a watch cache 300 ms behind: the end
/// bookmark is never below them and the initial events hold them, every time; also when a
/// write of another type came last (the ConfigMaps cannot then reach the upstream's revision,
/// and the upstream answers the watch).
async fn watchlist_on_a_lagging_upstream_is_consistent(profile: Profile) {
    let env = env(
        profile,
        vec![Duration::from_millis(300)],
        ConsistentSource::Cache,
    )
    .await;
    let path = format!("/api/v1/namespaces/{NS}/configmaps?{WATCHLIST}");
    for i in 0..6 {
        let written = env
            .sim
            .create("", "configmaps", cm(&format!("cm-{i}")))
            .unwrap();
        let written = if i % 2 == 1 {
            env.sim
                .create(
                    "",
                    "namespaces",
                    json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": format!("other-{i}")}}),
                )
                .unwrap()
        } else {
            written
        };
        let mut w = Watch::open(&env.url(), &path).await;
        let (names, end) = until_end_bookmark(&mut w).await;
        assert!(
            end >= rv_of(&written),
            "{profile}: bookmark at {end} below the write at {}",
            rv_of(&written)
        );
        assert!(
            names.contains(&format!("cm-{i}")),
            "{profile}: write {i} missing from {names:?}"
        );
    }
}

/// `consistentReads.source: upstream`: a WatchList with resourceVersion unset is the upstream's.
async fn source_upstream_covers_watchlists(profile: Profile) {
    let env = env(profile, Vec::new(), ConsistentSource::Upstream).await;
    env.sim.create("", "configmaps", cm("a")).unwrap();
    env.settle("", "configmaps").await;
    let w = Watch::open(
        &env.url(),
        &format!("/api/v1/namespaces/{NS}/configmaps?{WATCHLIST}"),
    )
    .await;
    assert!(
        w.headers.get(CACHE_AGE_HEADER).is_none(),
        "{profile}: passed through"
    );
    // A watch from a resourceVersion is still the cache's.
    let w = Watch::open(
        &env.url(),
        &format!("/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1"),
    )
    .await;
    assert!(
        w.headers.get(CACHE_AGE_HEADER).is_some(),
        "{profile}: from cache"
    );
}

/// A probe answered with a 429 (one busy replica): the read goes to the upstream, which
/// answers it; with the upstream unreachable the cache answers, marked unconfirmed.
async fn failed_probe_forwards_while_the_upstream_answers(profile: Profile) {
    let env = env(profile, Vec::new(), ConsistentSource::Cache).await;
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let path = "/api/v1/configmaps";
    let r = get(&env.url(), path).await;
    assert_eq!(r.status, 200);
    assert!(r.header(CACHE_AGE_HEADER).is_some(), "{profile}: provable");
    // The next request the upstream gets, the probe, is refused.
    env.sim.faults().fail_requests(1, 429);
    let r = get(&env.url(), path).await;
    assert_eq!(r.status, 200, "{profile}: {}", r.text());
    assert!(
        r.header(CACHE_AGE_HEADER).is_none(),
        "{profile}: the upstream answered"
    );
    assert_eq!(
        outcome_count(&env, "forwarded_probe_failed"),
        1,
        "{profile}"
    );
    // Unreachable at all: the cache answers, marked.
    env.sim.faults().set_unreachable(true);
    let r = get(&env.url(), path).await;
    assert_eq!(r.status, 200, "{profile}: {}", r.text());
    assert_eq!(r.header(UNCONFIRMED_HEADER), Some("true"), "{profile}");
    assert!(r.header(CACHE_AGE_HEADER).is_some());
    env.sim.faults().set_unreachable(false);
}

/// kcache's count of consistent reads of ConfigMaps with `outcome`.
fn outcome_count(env: &Env, outcome: &'static str) -> u64 {
    env.consistent_outcome("configmaps", outcome)
}

/// Requests kcache sent the upstream to learn its revision.
fn probes_sent(env: &Env) -> u64 {
    env.kcache
        .metrics()
        .upstream_requests
        .get_or_create(&kcache::metrics::PurposeLabels { purpose: "probe" })
        .get()
}

/// A client writes a ConfigMap and reads it back with a consistent GET, five times, behind two
/// replicas whose watch caches lag 0 and 50 ms. Every read sees its write. In front of v1.28 the
/// probe decides (a one-object read from etcd, like the GET): the cache answers once it has
/// caught up, and the read is forwarded when waiting would take longer than the upstream takes
/// to answer it (the 50 ms replica's watch); in front of v1.34 the GET goes upstream at once,
/// with no probe: there the probe, a consistent list, is served from the watch cache and may
/// wait ~100 ms for etcd's progress notification, while the GET is read from etcd at once, so
/// proving the cache would only make the reader wait.
async fn consistent_gets_are_answered_where_fastest(profile: Profile) {
    let lags = vec![Duration::ZERO, Duration::from_millis(50)];
    let env = env(profile, lags, ConsistentSource::Cache).await;
    env.sim.create("", "configmaps", cm("mine")).unwrap();
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let probes_before = probes_sent(&env);
    let path = format!("/api/v1/namespaces/{NS}/configmaps/mine");
    let mut from_cache = Vec::new();
    for i in 0..5 {
        let mut obj = cm("mine");
        obj["data"]["k"] = json!(format!("v{i}"));
        let written = env.sim.update("", "configmaps", obj).unwrap();
        let r = get(&env.url(), &path).await;
        assert_eq!(r.status, 200, "{profile}: {}", r.text());
        let read = r.json();
        assert_eq!(read["data"]["k"], format!("v{i}"), "{profile}: own write");
        assert_eq!(rv_of(&read), rv_of(&written), "{profile}");
        from_cache.push(r.header(CACHE_AGE_HEADER).is_some());
    }
    match profile {
        Profile::V1_28 => {
            assert_eq!(
                outcome_count(&env, "cache")
                    + outcome_count(&env, "forwarded")
                    + outcome_count(&env, "forwarded_lagging"),
                5
            );
            assert_eq!(outcome_count(&env, "forwarded_get"), 0);
            assert!(
                probes_sent(&env) > probes_before,
                "v1.28: the probe decides"
            );
        }
        Profile::V1_34 => {
            assert_eq!(from_cache, [false; 5], "v1.34: the upstream answers");
            assert_eq!(outcome_count(&env, "forwarded_get"), 5);
            assert_eq!(probes_sent(&env), probes_before, "v1.34: no probe");
        }
    }
}

/// A type nobody writes while another type is written: the upstream's revision moves past the
/// type's cache, and nothing of the type is on its way to move the cache there. Its consistent
/// LISTs, the very first included, are answered within about what the upstream takes to answer
/// them: kcache does not make a reader wait for a revision its cache cannot reach (the first
/// read used to wait the whole `consistentReads.waitSeconds`, 3 s). A bookmark (v1.34 sends a
/// heartbeat one about every minute, at etcd's revision) moves the cache's RV without any
/// object changing; that is no news about the type, and the next read is forwarded at once as
/// well. Every answer is the upstream's state.
async fn a_quiet_types_reads_wait_for_nothing(profile: Profile) {
    let seed = (1..=3)
        .map(|i| kcache_sim::seed::SeedObject {
            group: "",
            resource: "configmaps",
            object: cm(&format!("quiet-{i}")),
        })
        .collect();
    let env = EnvBuilder {
        // The profile's own bookmark interval (a minute): none comes during the test.
        sim: SimConfig::for_profile(profile),
        seed,
        ..EnvBuilder::default()
    }
    .resources(vec![resource("", "v1", "configmaps")])
    .start()
    .await;
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let read = |round: usize| {
        let (env, path) = (&env, &path);
        async move {
            // The other type moves the upstream's revision past the ConfigMaps'.
            env.write_other_type(NS, &format!("other-{round}"));
            let direct = get(&env.sim.url(), path).await;
            let started = std::time::Instant::now();
            let r = get(&env.url(), path).await;
            let took = started.elapsed();
            assert_eq!(r.status, 200, "{profile}: {}", r.text());
            let names = |v: Value| -> Vec<String> {
                v["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
                    .collect()
            };
            assert_eq!(names(r.json()), names(direct.json()), "{profile}");
            // The sim answers in milliseconds; a second is far beyond any forwarded read here
            // and far below the old full wait.
            assert!(
                took < Duration::from_secs(1),
                "{profile}: read {round} took {took:?}"
            );
        }
    };
    read(0).await;
    // kcache goes on waiting off the reader's path, and finds the type quiet.
    env.wait_quiet("configmaps", true).await;
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    read(1).await;
    assert_eq!(outcome_count(&env, "forwarded_quiet"), 1, "{profile}");
    // The periodic bookmark: v1.34's heartbeat at its cache's revision, past the ConfigMaps'
    // last event (v1.28 sends none to a watch that saw no event of its type).
    let before = cache.rv();
    env.sim.faults().send_bookmarks_now();
    if profile == Profile::V1_34 {
        wait_until("the heartbeat bookmark moves the cache's RV", || {
            let cache = cache.clone();
            async move { cache.rv() > before }
        })
        .await;
    }
    read(2).await;
    assert_eq!(outcome_count(&env, "forwarded_quiet"), 2, "{profile}");
    assert_eq!(outcome_count(&env, "timeout"), 0);
}

per_profile!(
    a_quiet_types_reads_wait_for_nothing,
    watchlist_on_a_lagging_upstream_is_consistent,
    source_upstream_covers_watchlists,
    failed_probe_forwards_while_the_upstream_answers,
    consistent_gets_are_answered_where_fastest,
);
