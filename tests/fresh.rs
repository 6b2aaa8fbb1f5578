//! Consistent reads are never stale, and cheap for the upstream, in front of an upstream whose
//! watch cache lags its store (etcd) and in front of two replicas with different lags behind
//! one address: a write the upstream acknowledged before a read (resourceVersion unset) is in
//! the answer every time, and kcache never learns freshness from a `resourceVersion=0` list (a
//! lagging replica answers that, with the whole collection: rule L2 of
//! docs/semantics.md).

mod common;

use std::time::Duration;

use common::{get, resource, Env, EnvBuilder};
use kcache_sim::SimConfig;
use serde_json::{json, Value};

const NS: &str = "default";

async fn start(lags: Vec<Duration>) -> Env {
    start_caching(
        lags,
        vec![
            resource("", "v1", "configmaps"),
            resource("", "v1", "secrets"),
        ],
    )
    .await
}

async fn start_caching(lags: Vec<Duration>, resources: Vec<kcache::config::ResourceConfig>) -> Env {
    EnvBuilder {
        sim: SimConfig {
            bookmark_interval: Duration::from_secs(1),
            watch_cache_lags: lags,
            ..SimConfig::default()
        },
        ..EnvBuilder::default()
    }
    .resources(resources)
    .start()
    .await
}

fn object(kind: &str, name: &str, i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": kind,
        "metadata": {"name": name, "namespace": NS}, "data": {"i": i.to_string()}})
}

fn rv_of(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_string()
}

/// A consistent GET and LIST of `resource` through kcache show `name` at `rv`.
async fn assert_reads_see(env: &Env, resource: &str, name: &str, rv: &str, round: usize) {
    let r = get(
        &env.url(),
        &format!("/api/v1/namespaces/{NS}/{resource}/{name}"),
    )
    .await;
    assert_eq!(r.status, 200, "round {round}: GET {name}: {}", r.text());
    assert_eq!(rv_of(&r.json()), rv, "round {round}: GET {name}");
    let r = get(&env.url(), &format!("/api/v1/namespaces/{NS}/{resource}")).await;
    assert_eq!(r.status, 200, "round {round}: LIST: {}", r.text());
    let list = r.json();
    let item = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|o| o["metadata"]["name"] == name);
    assert!(item.is_some(), "round {round}: LIST misses {name}");
    assert_eq!(rv_of(item.unwrap()), rv, "round {round}: LIST item {name}");
    let list_rv: u64 = rv_of(&list).parse().expect("list RV");
    assert!(
        list_rv >= rv.parse::<u64>().unwrap(),
        "round {round}: list RV"
    );
}

/// Writes then reads, `rounds` times, alternating creates and updates of a ConfigMap.
async fn read_your_writes(env: &Env, rounds: usize) {
    for i in 0..rounds {
        let name = format!("ryw-{}", i / 2);
        let written = if i % 2 == 0 {
            env.sim
                .create("", "configmaps", object("ConfigMap", &name, i))
        } else {
            env.sim
                .update("", "configmaps", object("ConfigMap", &name, i))
        }
        .expect("write");
        assert_reads_see(env, "configmaps", &name, &rv_of(&written), i).await;
    }
}

/// One apiserver whose watch cache lags etcd by 200 ms: what it acknowledged is read back
/// through kcache at once, every time.
#[tokio::test]
async fn read_your_writes_with_a_lagging_watch_cache() {
    let env = start(vec![Duration::from_millis(200)]).await;
    read_your_writes(&env, 20).await;
}

/// Two apiservers behind one address, one without lag and one 400 ms behind. kcache's watch
/// is on the lagging one (pinned while it re-watches); then requests take turns again, so
/// kcache's reads of the upstream meet both replicas.
#[tokio::test]
async fn read_your_writes_with_two_replicas() {
    let env = start(vec![Duration::ZERO, Duration::from_millis(400)]).await;
    env.sim.pin_replica(Some(1));
    env.sim.faults().drop_watches();
    // kcache has re-watched (on the lagging replica) once it sees a write made after the drop.
    env.sim
        .create("", "configmaps", object("ConfigMap", "pinned", 0))
        .unwrap();
    env.settle("", "configmaps").await;
    env.sim.pin_replica(None);
    read_your_writes(&env, 20).await;
}

/// A busy type whose watch lags the upstream by 1 s: waiting for the cache would hold every
/// consistent GET for the lag while the upstream answers in about a millisecond. The first read
/// probes, waits no longer than the upstream takes to answer a GET, and is forwarded; kcache
/// goes on learning the lag off the reader's path, and meanwhile and after, GETs are forwarded
/// at once, one upstream GET and no probe each. Each shows the write acknowledged before it.
#[tokio::test]
async fn busy_gets_behind_a_lagging_watch_are_forwarded_at_once() {
    let env = start(vec![Duration::from_secs(1)]).await;
    for i in 0..10 {
        let name = format!("lagging-{i}");
        let written = env
            .sim
            .create("", "configmaps", object("ConfigMap", &name, i))
            .unwrap();
        let (lists, gets, _, _) = env.sim.request_counts();
        let r = get(
            &env.url(),
            &format!("/api/v1/namespaces/{NS}/configmaps/{name}"),
        )
        .await;
        assert_eq!(r.status, 200, "read {i}: {}", r.text());
        assert_eq!(rv_of(&r.json()), rv_of(&written), "read {i}: stale");
        let (lists_after, gets_after, _, _) = env.sim.request_counts();
        let upstream = (lists_after - lists, gets_after - gets);
        if i == 0 {
            // Nothing measured yet: the read probes, and goes upstream.
            assert_eq!(upstream, (1, 1), "read {i}: one probe, then forwarded");
        } else {
            // Forwarded without waiting: with a probe while kcache still learns the lag (the
            // probe is what tells an unreachable upstream), without one once it knows.
            assert_eq!(upstream.1, 1, "read {i}: one forwarded GET");
            assert!(upstream.0 <= 1, "read {i}: at most the probe: {upstream:?}");
        }
    }
}

/// A type nobody writes cannot reach the upstream's revision (other types' writes move it):
/// its consistent reads are forwarded, and a write to it the cache has not heard of yet (the
/// watch cache lags) is in the answer. Once the first read has gone upstream, later ones are
/// forwarded at once, without a probe: while kcache learns the type's verdict off the reader's
/// path, and once it has found the type quiet.
#[tokio::test]
async fn quiet_type_is_forwarded_not_stale() {
    let env = start(vec![Duration::from_millis(500)]).await;
    let seeded = env
        .sim
        .create("", "secrets", object("Secret", "quiet-0", 0))
        .unwrap();
    env.settle("", "secrets").await;
    for round in 1..=5 {
        // The busy type moves the upstream's revision past the quiet type's.
        env.sim
            .create(
                "",
                "configmaps",
                object("ConfigMap", &format!("busy-{round}"), round),
            )
            .unwrap();
        assert_reads_see(&env, "secrets", "quiet-0", &rv_of(&seeded), round).await;
    }
    // Nothing of the type has happened since: the next read is forwarded without a probe.
    let (lists, gets, _, _) = env.sim.request_counts();
    let r = get(
        &env.url(),
        &format!("/api/v1/namespaces/{NS}/secrets/quiet-0"),
    )
    .await;
    assert_eq!(r.status, 200);
    let (lists_after, gets_after, _, _) = env.sim.request_counts();
    assert_eq!(gets_after - gets, 1, "one forwarded GET");
    assert!(lists_after - lists <= 1, "at most the probe");
    // A write of the quiet type that kcache has not seen yet (the watch cache lags by 500 ms)
    // must be in the next consistent reads.
    for round in 0..5 {
        let name = format!("quiet-{}", round + 1);
        let written = env
            .sim
            .create("", "secrets", object("Secret", &name, round))
            .unwrap();
        assert_reads_see(&env, "secrets", &name, &rv_of(&written), round).await;
    }
}

/// Freshness is never learnt from a `resourceVersion=0` list, for a busy type or a quiet one.
#[tokio::test]
async fn probe_never_lists_a_collection_at_rv0() {
    let env = start(vec![Duration::from_millis(100)]).await;
    env.sim
        .create("", "secrets", object("Secret", "quiet", 0))
        .unwrap();
    env.settle("", "secrets").await;
    let before = env.sim.rv0_lists();
    for i in 0..10 {
        let name = format!("busy-{i}");
        let written = env
            .sim
            .create("", "configmaps", object("ConfigMap", &name, i))
            .unwrap();
        assert_reads_see(&env, "configmaps", &name, &rv_of(&written), i).await;
        let r = get(
            &env.url(),
            &format!("/api/v1/namespaces/{NS}/secrets/quiet"),
        )
        .await;
        assert_eq!(r.status, 200);
        let r = get(&env.url(), &format!("/api/v1/namespaces/{NS}/secrets")).await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        env.sim.rv0_lists() - before,
        0,
        "resourceVersion=0 lists sent"
    );
}

/// What a downstream watcher of ConfigMaps in `default` holds: name → resourceVersion.
type Mirror = std::collections::BTreeMap<String, String>;

fn upstream_mirror(env: &Env) -> Mirror {
    env.sim
        .list("", "configmaps")
        .iter()
        .filter(|o| o["metadata"]["namespace"] == NS)
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                rv_of(o),
            )
        })
        .collect()
}

/// Apply watch events to `m` until it equals the upstream; panics on an ERROR event (a 410
/// would tell the client to relist) or when the stream ends first.
async fn follow_until_equal(env: &Env, w: &mut common::Watch, m: &mut Mirror) {
    // Generous: only a broken kcache gets near it (events arrive within the sim's lags).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if *m == upstream_mirror(env) {
            return;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let ev = w
            .next_json(left)
            .await
            .unwrap_or_else(|| panic!("watch ended or stalled; mirror {m:?}"));
        let name = ev["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        match ev["type"].as_str().unwrap() {
            "ADDED" | "MODIFIED" => {
                m.insert(name, rv_of(&ev["object"]));
            }
            "DELETED" => {
                m.remove(&name);
            }
            "BOOKMARK" => {}
            other => panic!("{other} event to a downstream watcher: {ev}"),
        }
    }
}

/// A relist answered by a replica whose watch cache lags is not an upstream restore: the
/// upstream's history is compacted and kcache's watch gets a 410 while the relist (a streaming
/// list at resourceVersion=0) meets a replica 3 s behind. Downstream watchers are not told to
/// relist (no 410) and end equal to the upstream, through writes before and after.
#[tokio::test]
async fn relist_from_a_lagging_replica_does_not_reset_watchers() {
    // Only ConfigMaps: the one injected 410 must reach their reflector's watch.
    let env = start_caching(
        vec![Duration::ZERO, Duration::from_secs(3)],
        vec![resource("", "v1", "configmaps")],
    )
    .await;
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    // A downstream watcher from a consistent starting point.
    let list = get(
        &env.url(),
        &format!("/api/v1/namespaces/{NS}/configmaps?resourceVersion=0"),
    )
    .await
    .json();
    let mut mirror: Mirror = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                rv_of(o),
            )
        })
        .collect();
    let mut w = common::Watch::open(
        &env.url(),
        &format!(
            "/api/v1/namespaces/{NS}/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion={}",
            rv_of(&list)
        ),
    )
    .await;
    assert_eq!(w.status, 200);
    // Writes kcache sees through the replica without lag; the lagging one has not got them.
    env.sim.pin_replica(Some(0));
    env.sim.faults().drop_watches();
    for i in 0..20 {
        env.sim
            .create(
                "",
                "configmaps",
                object("ConfigMap", &format!("before-{i}"), i),
            )
            .unwrap();
    }
    env.settle("", "configmaps").await;
    follow_until_equal(&env, &mut w, &mut mirror).await;
    // History compacted, kcache's watch expired; its relist goes to the lagging replica.
    let relists = cache.relists();
    env.sim.pin_replica(Some(1));
    env.sim.compact();
    env.sim.faults().fail_watches_with_410(1);
    env.sim.faults().drop_watches();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while cache.relists() == relists {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kcache did not relist"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.sim.pin_replica(None);
    for i in 0..20 {
        let name = format!("before-{i}");
        if i % 2 == 0 {
            env.sim.delete("", "configmaps", Some(NS), &name).unwrap();
        } else {
            env.sim
                .update("", "configmaps", object("ConfigMap", &name, 100 + i))
                .unwrap();
        }
        env.sim
            .create(
                "",
                "configmaps",
                object("ConfigMap", &format!("after-{i}"), i),
            )
            .unwrap();
    }
    follow_until_equal(&env, &mut w, &mut mirror).await;
}
