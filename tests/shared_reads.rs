//! Identical consistent reads that kcache forwards share one upstream request when they
//! arrive together (docs/semantics.md, "Identical reads share one forwarded request"), on both
//! upstream versions: each reader gets the upstream's answer, as the apiserver would answer
//! it, with an `Audit-Id` of its own, and the upstream serves a few requests for a crowd of
//! readers, not one each. So do GETs, a small namespace's LISTs, and a LIST of 150 objects
//! (a namespace too small a part of its type for a proof by the type's metadata to pay).
//!
//! The sim answers consistent reads in 20 ms, one at a time, as a busy apiserver would: readers
//! sent together overlap with the requests out. The ConfigMaps are quiet (only a Secret is
//! written), so kcache forwards their consistent reads at once.

mod common;
#[path = "sim_common/mod.rs"]
mod raw;

use std::collections::HashSet;
use std::time::Duration;

use common::{get, resource, Env, EnvBuilder, Resp};
use kcache::api::CACHE_AGE_HEADER;
use kcache_sim::{Profile, SimConfig, StorageReads};
use serde_json::{json, Value};

const NS: &str = "shared";
const READERS: usize = 8;
/// A namespace of 150 ConfigMaps, and one of 600 more: the type is over three times the
/// namespace, so its LIST is forwarded, not proven (`api::proof`).
const LARGE: (&str, usize) = ("shared-large", 150);
const OTHER: (&str, usize) = ("shared-other", 600);

async fn start(profile: Profile) -> Env {
    let env = EnvBuilder {
        sim: SimConfig {
            storage_reads: Some(StorageReads {
                cost: Duration::from_millis(20),
                concurrency: 1,
                per_item: Duration::ZERO,
            }),
            ..SimConfig::for_profile(profile)
        },
        ..EnvBuilder::default()
    }
    .resources(vec![resource("", "v1", "configmaps")])
    .start()
    .await;
    for (ns, n) in [(NS, 3), LARGE, OTHER] {
        for i in 0..n {
            env.sim
                .create(
                    "",
                    "configmaps",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm-{i}"), "namespace": ns}, "data": {"i": i}}),
                )
                .unwrap();
        }
    }
    env.settle("", "configmaps").await;
    // Found quiet: its reads are forwarded at once from then on.
    env.write_other_type(NS, "before");
    let first = get(&env.url(), &format!("/api/v1/namespaces/{NS}/configmaps")).await;
    assert_eq!(first.status, 200, "{}", first.text());
    env.wait_quiet("configmaps", true).await;
    env
}

/// `READERS` reads of `path` sent together through kcache, after a write of another type;
/// the upstream requests they cost (by `count`), and their answers.
async fn together(env: &Env, path: &str, count: impl Fn(&Env) -> u64) -> (u64, Vec<Resp>) {
    env.write_other_type(NS, &format!("before-{}", path.len()));
    let before = count(env);
    let url = env.url();
    let answers = futures::future::join_all((0..READERS).map(|_| get(&url, path))).await;
    (count(env) - before, answers)
}

/// What a client relies on in each answer: the direct answer's status, body (but the list's
/// revision, which moves with the writes of other types) and content type; one `Audit-Id`
/// per answer.
fn assert_as_direct(profile: Profile, answers: &[Resp], direct: &Resp, what: &str) {
    let strip = |r: &Resp| -> Value {
        let mut v = r.json();
        if v["kind"].as_str().is_some_and(|k| k.ends_with("List")) {
            v["metadata"]["resourceVersion"] = Value::Null;
        }
        v
    };
    let mut ids = HashSet::new();
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(
            a.status,
            direct.status,
            "{profile} {what} {i}: {}",
            a.text()
        );
        assert_eq!(strip(a), strip(direct), "{profile} {what} {i}");
        assert_eq!(
            a.header("content-type"),
            direct.header("content-type"),
            "{profile} {what} {i}"
        );
        assert!(
            ids.insert(a.header("audit-id").expect("audit-id").to_string()),
            "{profile} {what} {i}: an Audit-Id of its own"
        );
        assert!(
            a.header(CACHE_AGE_HEADER).is_none(),
            "{profile} {what} {i}: forwarded, not from the cache"
        );
    }
}

async fn identical_reads_arriving_together_share_requests(profile: Profile) {
    let env = start(profile).await;
    let lists: fn(&Env) -> u64 = |env| env.sim.request_counts().0;
    let gets: fn(&Env) -> u64 = |env| env.sim.request_counts().1;
    let cases = [
        ("LIST", format!("/api/v1/namespaces/{NS}/configmaps"), lists),
        (
            "GET",
            format!("/api/v1/namespaces/{NS}/configmaps/cm-1"),
            gets,
        ),
        (
            "150-object LIST",
            format!("/api/v1/namespaces/{}/configmaps", LARGE.0),
            lists,
        ),
    ];
    for (what, path, count) in cases {
        let (sent, answers) = together(&env, &path, count).await;
        let direct = get(&env.sim.url(), &path).await;
        assert_as_direct(profile, &answers, &direct, what);
        // Two sent at once; the other six queued for one more.
        assert!(
            sent <= 3,
            "{profile}: {READERS} identical {what}s sent {sent} upstream requests"
        );
    }
    // A read that differs (another representation) is not given the others' answer.
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let url = env.url();
    let metadata = [(
        "accept",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )];
    let (json, partial) =
        futures::future::join(get(&url, &path), common::get_with(&url, &path, &metadata)).await;
    assert_eq!(json.json()["kind"], "ConfigMapList", "{profile}");
    assert_eq!(
        partial.json()["kind"],
        "PartialObjectMetadataList",
        "{profile}"
    );
}

per_profile!(identical_reads_arriving_together_share_requests);
