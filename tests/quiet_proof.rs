//! A quiet type's consistent LIST answered from the cache once the upstream's metadata list of
//! the type shows the cache holds its state (docs/semantics.md, "Quiet types proven by their
//! metadata"), on both upstream versions; and every change the cache has not seen yet makes
//! the proof fail, so the read goes upstream: a create alone, an update alone, a delete
//! alone, and a delete and a re-create of the same name. Readers that arrive together share
//! proofs (a few metadata lists for a crowd of readers), a large read whose wait for the
//! revision runs out is proven rather than forwarded, and so are a large type's first reads.
//!
//! The sim's watch cache lags its store by half a second (except in the run-out-wait test,
//! whose type must keep up), so a change written just before a
//! read reaches kcache's cache only after the read was decided: the proof, read from the
//! upstream's current state, must see it. Another type is written before each read, so the
//! upstream's revision is past the ConfigMaps' and the freshness probe alone could not prove
//! the cache.

mod common;
#[path = "sim_common/mod.rs"]
mod raw;

use std::time::Duration;

use common::{get, resource, Env, EnvBuilder};
use kcache::api::CACHE_AGE_HEADER;
use kcache_sim::seed::SeedObject;
use kcache_sim::{Profile, SimConfig, StorageReads};
use serde_json::{json, Value};

const NS: &str = "quiet";
const OBJECTS: usize = 1000;

fn cm(name: &str, v: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS}, "data": {"v": v}})
}

async fn start(profile: Profile) -> Env {
    start_lagging(profile, Duration::from_millis(500)).await
}

/// The seeded type behind a watch cache `lag` late (zero: one that never lags).
async fn start_lagging(profile: Profile, lag: Duration) -> Env {
    let seed = (0..OBJECTS)
        .map(|i| SeedObject {
            group: "",
            resource: "configmaps",
            object: cm(&format!("cm-{i:03}"), "0"),
        })
        .collect();
    let env = EnvBuilder {
        sim: SimConfig {
            watch_cache_lags: if lag.is_zero() { Vec::new() } else { vec![lag] },
            // A list costs the upstream per object, as a real one's does (here more, so that
            // what the upstream spends outweighs what a debug build of kcache and the sim
            // spend on the same bytes): forwarding the type's reads is measurably dearer than
            // proving them.
            storage_reads: Some(StorageReads {
                per_item: Duration::from_micros(200),
                ..StorageReads::measured(profile)
            }),
            ..SimConfig::for_profile(profile)
        },
        seed,
        ..EnvBuilder::default()
    }
    .resources(vec![resource("", "v1", "configmaps")])
    .start()
    .await;
    // A v1.28 reflector lists from the lagging watch cache, which shows the seed `lag` late.
    let cache = env.kcache.app.registry().all().next().unwrap().clone();
    common::wait_until("the seed is cached", || {
        let cache = cache.clone();
        async move { cache.len() == OBJECTS }
    })
    .await;
    env
}

fn outcome(env: &Env, outcome: &'static str) -> u64 {
    env.consistent_outcome("configmaps", outcome)
}

/// Every outcome counted, for failure messages.
fn outcomes(env: &Env) -> Vec<(&'static str, u64)> {
    kcache::metrics::CONSISTENT_READ_OUTCOMES
        .iter()
        .map(|o| (*o, outcome(env, o)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The names and data of a list's items.
fn items(v: &Value) -> Vec<(String, String)> {
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["data"]["v"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A consistent LIST of every ConfigMap, after a write of another type: kcache's answer is
/// the upstream's state. Returns whether the cache answered.
async fn read(env: &Env, round: &mut usize) -> bool {
    *round += 1;
    env.write_other_type(NS, &format!("other-{round}"));
    let before = env.sim.current_rv();
    let ours = get(&env.url(), "/api/v1/configmaps").await;
    assert_eq!(ours.status, 200, "{}", ours.text());
    let direct = get(&env.sim.url(), "/api/v1/configmaps").await;
    let ours = (ours.header(CACHE_AGE_HEADER).is_some(), ours.json());
    assert_eq!(items(&ours.1), items(&direct.json()), "read {round}");
    let rv: u64 = ours.1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv >= before, "read {round}: list RV {rv} below {before}");
    ours.0
}

/// Wait until the type has been found quiet again (after a change reached the cache): the
/// change's event ends the quiet verdict, the next read waits for a revision only another
/// type's write reached, and, that wait run out, is proven (or goes upstream), after which
/// kcache finds the type quiet again. Returns whether that read was answered from the cache.
async fn quiet_again(env: &Env, round: &mut usize) -> bool {
    env.wait_quiet("configmaps", false).await;
    let cached = read(env, round).await;
    env.wait_quiet("configmaps", true).await;
    cached
}

async fn changes_the_cache_has_not_seen_fail_the_proof(profile: Profile) {
    let env = start(profile).await;
    let mut round = 0;
    // The first read is proven (a large type, nothing measured yet); kcache then finds the
    // type quiet.
    assert!(read(&env, &mut round).await, "{profile}: first read");
    env.wait_quiet("configmaps", true).await;
    // Unchanged: proven, from the cache.
    assert!(
        read(&env, &mut round).await,
        "{profile}: unchanged ({:?})",
        outcomes(&env)
    );
    assert_eq!(outcome(&env, "proven"), 2, "{profile}");
    type Change = fn(&Env);
    let changes: [(&str, Change); 4] = [
        ("a create", |env| {
            env.sim.create("", "configmaps", cm("new", "1")).unwrap();
        }),
        ("an update", |env| {
            env.sim.update("", "configmaps", cm("cm-007", "2")).unwrap();
        }),
        ("a delete", |env| {
            env.sim
                .delete("", "configmaps", Some(NS), "cm-008")
                .unwrap();
        }),
        ("a delete and a re-create", |env| {
            env.sim
                .delete("", "configmaps", Some(NS), "cm-009")
                .unwrap();
            env.sim.create("", "configmaps", cm("cm-009", "0")).unwrap();
        }),
    ];
    let mut proven = 2;
    for (i, (what, change)) in changes.into_iter().enumerate() {
        change(&env);
        assert!(!read(&env, &mut round).await, "{profile}: {what}");
        assert_eq!(
            outcome(&env, "forwarded_changed"),
            i as u64 + 1,
            "{profile}: {what} fails the proof ({:?})",
            outcomes(&env)
        );
        proven += u64::from(quiet_again(&env, &mut round).await);
        assert!(read(&env, &mut round).await, "{profile}: after {what}");
        proven += 1;
    }
    // Every read answered from the cache was proven.
    assert_eq!(outcome(&env, "proven"), proven, "{profile}");
}

per_profile!(changes_the_cache_has_not_seen_fail_the_proof);

/// Readers of every ConfigMap that arrive together.
const READERS: usize = 8;

/// After a write of another type (`other`), [`READERS`] consistent LISTs of every ConfigMap
/// sent together: each answered from the cache with the upstream's objects and a revision no
/// older than the write's. Returns the lists the upstream served meanwhile.
async fn together_from_the_cache(env: &Env, profile: Profile, other: &str) -> u64 {
    env.write_other_type(NS, other);
    let before = env.sim.current_rv();
    let (lists, ..) = env.sim.request_counts();
    let url = env.url();
    let reads = (0..READERS).map(|_| get(&url, "/api/v1/configmaps"));
    let answers = futures::future::join_all(reads).await;
    let (lists_after, ..) = env.sim.request_counts();
    let direct = get(&env.sim.url(), "/api/v1/configmaps").await.json();
    for (i, ours) in answers.iter().enumerate() {
        assert_eq!(ours.status, 200, "{}", ours.text());
        assert!(
            ours.header(CACHE_AGE_HEADER).is_some(),
            "{profile}: reader {i} from the cache ({:?})",
            outcomes(env)
        );
        let ours = ours.json();
        assert_eq!(items(&ours), items(&direct), "{profile}: reader {i}");
        let rv: u64 = ours["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            rv >= before,
            "{profile}: reader {i}: list RV {rv} below {before}"
        );
    }
    lists_after - lists
}

/// Readers of a quiet type that arrive together share one proof: each waits for a metadata
/// list sent after it arrived, and the upstream serves one such list per batch of them, not
/// one per reader (at most a few while they keep coming).
async fn readers_arriving_together_share_a_proof(profile: Profile) {
    let env = start(profile).await;
    let mut round = 0;
    assert!(read(&env, &mut round).await, "{profile}: first read");
    env.wait_quiet("configmaps", true).await;
    assert!(read(&env, &mut round).await, "{profile}: proven alone");
    let sent = together_from_the_cache(&env, profile, "together").await;
    assert_eq!(outcome(&env, "proven"), 2 + READERS as u64, "{profile}");
    // Two sent at once; the other six queued for one more.
    assert!(
        sent <= 3,
        "{profile}: {READERS} readers arriving together sent {sent} metadata lists"
    );
}

per_profile!(readers_arriving_together_share_a_proof);

/// A large read of a type that keeps up (its last wait reached the upstream's revision) whose
/// wait runs out, because only another type was written since: proven by the type's metadata
/// where that pays, not forwarded whole.
async fn a_large_read_whose_wait_runs_out_is_proven(profile: Profile) {
    // A watch cache that does not lag: the type's cache reaches a revision of its own write
    // at once.
    let env = start_lagging(profile, Duration::ZERO).await;
    let mut round = 0;
    // The first read is proven: proofs of the type are measured.
    assert!(read(&env, &mut round).await, "{profile}: first read");
    env.wait_quiet("configmaps", true).await;
    // A write of the type: the next read waits for it and reaches it (from the cache).
    env.sim.update("", "configmaps", cm("cm-001", "1")).unwrap();
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    common::wait_until("the update is cached", || {
        let cache = cache.clone();
        async move { cache.verdict() != kcache::cache::Verdict::Quiet }
    })
    .await;
    let cached = get(&env.url(), "/api/v1/configmaps").await;
    assert!(
        cached.header(CACHE_AGE_HEADER).is_some(),
        "{profile}: reached"
    );
    assert_eq!(
        cache.verdict(),
        kcache::cache::Verdict::Reaches,
        "{profile}: {:?}",
        outcomes(&env)
    );
    // Only another type is written now: the wait runs out, and the read is proven.
    let (forwarded, proven) = (outcome(&env, "forwarded"), outcome(&env, "proven"));
    assert!(
        read(&env, &mut round).await,
        "{profile}: {:?}",
        outcomes(&env)
    );
    assert_eq!(
        outcome(&env, "proven"),
        proven + 1,
        "{profile}: {:?}",
        outcomes(&env)
    );
    assert_eq!(outcome(&env, "forwarded"), forwarded, "{profile}");
}

per_profile!(a_large_read_whose_wait_runs_out_is_proven);

/// A kcache's first consistent LISTs of a large quiet type, several readers at once, before
/// any read of the type was forwarded: proven by the type's metadata, none forwarded whole.
async fn a_large_types_first_reads_are_proven(profile: Profile) {
    let env = start(profile).await;
    together_from_the_cache(&env, profile, "first").await;
    // Each proven, or (in front of v1.34, whose periodic bookmarks carry etcd's revision)
    // reached: none forwarded.
    assert_eq!(
        outcome(&env, "proven") + outcome(&env, "cache"),
        READERS as u64,
        "{profile}: {:?}",
        outcomes(&env)
    );
    assert!(
        outcome(&env, "proven") > 0,
        "{profile}: {:?}",
        outcomes(&env)
    );
}

per_profile!(a_large_types_first_reads_are_proven);
