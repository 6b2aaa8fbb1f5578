//! A paginated consistent LIST (kubectl's default `get`, chunks of 500; `--chunk-size=2`)
//! returns every object exactly once in front of every upstream version, whether the first
//! page came from kcache's cache or from the upstream, and whichever of them serves the pages
//! after it: continue tokens move between the cache and the upstream in both directions.
//!
//! v1.34 writes a token's start key with a leading `/` (DIFF-1.28.md item 1); kcache accepts
//! both forms and writes the form of the upstream it fronts.

mod common;
#[path = "sim_common/mod.rs"]
mod raw;

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine;
use common::{get, resource, Env, EnvBuilder};
use kcache::api::CACHE_AGE_HEADER;
use kcache_sim::{Profile, SimConfig};
use serde_json::{json, Value};

const NS: &str = "paged";

/// kcache in front of a sim of `profile` with 1,200 ConfigMaps in two namespaces, ConfigMaps
/// cached; bookmarks rare, so a quiet ConfigMap cache cannot be proven fresh by one.
async fn env(profile: Profile) -> Env {
    let env = EnvBuilder {
        sim: SimConfig {
            bookmark_interval: Duration::from_secs(600),
            ..SimConfig::for_profile(profile)
        },
        ..EnvBuilder::default()
    }
    .resources(vec![resource("", "v1", "configmaps")])
    .start()
    .await;
    for ns in [NS, "paged-2"] {
        env.sim
            .create(
                "",
                "namespaces",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .unwrap();
        for i in 0..600 {
            env.sim
                .create(
                    "",
                    "configmaps",
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm-{i:04}"), "namespace": ns},
                        "data": {"i": i.to_string()}}),
                )
                .unwrap();
        }
    }
    env.settle("", "configmaps").await;
    env
}

/// The start key a token writes, decoded.
fn start_key(token: &str) -> String {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .expect("base64url token");
    let v: Value = serde_json::from_slice(&raw).expect("JSON token");
    v["start"].as_str().unwrap().to_string()
}

/// `namespace/name` of an object.
fn key_of(o: &Value) -> String {
    format!(
        "{}/{}",
        o["metadata"]["namespace"].as_str().unwrap(),
        o["metadata"]["name"].as_str().unwrap()
    )
}

/// One page: its item names, its continue token, and whether kcache's cache answered it.
struct Page {
    names: Vec<String>,
    token: Option<String>,
    cached: bool,
    /// `remainingItemCount`.
    remaining: Option<u64>,
}

async fn page(base: &str, path: &str) -> Page {
    let r = get(base, path).await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    let body = r.json();
    let names = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(key_of)
        .collect();
    let token = body["metadata"]["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(String::from);
    Page {
        names,
        token,
        cached: r.header(CACHE_AGE_HEADER).is_some(),
        remaining: body["metadata"]["remainingItemCount"].as_u64(),
    }
}

/// Walk a paginated list, each page sent to `route(i)` (0: kcache, 1: the upstream directly),
/// and check it returns exactly `want`, each object once. Returns which pages the cache
/// answered.
async fn walk(
    env: &Env,
    collection: &str,
    limit: usize,
    route: impl Fn(usize) -> usize,
    want: &BTreeSet<String>,
    profile: Profile,
) -> Vec<bool> {
    let bases = [env.url(), env.sim.url()];
    let mut seen = Vec::new();
    let mut cached = Vec::new();
    let mut token: Option<String> = None;
    for i in 0.. {
        let path = match &token {
            None => format!("{collection}?limit={limit}"),
            Some(t) => format!("{collection}?limit={limit}&continue={t}"),
        };
        let p = page(&bases[route(i)], &path).await;
        cached.push(route(i) == 0 && p.cached);
        seen.extend(p.names);
        let Some(t) = p.token else { break };
        // Whoever wrote it, it is in the upstream's own form.
        let rooted = start_key(&t).starts_with('/');
        assert_eq!(rooted, profile == Profile::V1_34, "{profile}: token {t}");
        token = Some(t);
        assert!(i < 2000, "{profile}: the list does not end");
    }
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "{profile}: an object came twice");
    assert_eq!(&unique, want, "{profile}: objects missing or extra");
    cached
}

async fn consistent_lists_page_through_cache_and_upstream(profile: Profile) {
    let env = env(profile).await;
    let all: BTreeSet<String> = env.sim.list("", "configmaps").iter().map(key_of).collect();
    let ns: BTreeSet<String> = all
        .iter()
        .filter(|k| k.starts_with(&format!("{NS}/")))
        .cloned()
        .collect();
    let cluster = "/api/v1/configmaps".to_string();
    let namespaced = format!("/api/v1/namespaces/{NS}/configmaps");

    // A type kcache can prove fresh (the upstream's last write is one of its own): the first
    // page comes from the cache, with kcache's token in the upstream's form, and the chain
    // goes on through kcache, the upstream, and kcache again.
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let mut all = all;
    all.insert(
        env.sim
            .list("", "configmaps")
            .iter()
            .filter(|o| o["metadata"]["namespace"] == "provable")
            .map(|o| format!("provable/{}", o["metadata"]["name"].as_str().unwrap()))
            .next()
            .unwrap(),
    );
    let cached = walk(&env, &cluster, 500, |i| i % 2, &all, profile).await;
    assert!(cached[0], "{profile}: first page from the cache");
    let cached = walk(
        &env,
        &namespaced,
        2,
        |i| usize::from(i % 3 == 1),
        &ns,
        profile,
    )
    .await;
    assert!(cached[0], "{profile}: first page from the cache");

    // A type the probe cannot prove fresh (the upstream's last write is of another type): a
    // chain the upstream began (kcache would prove its own first page by the type's metadata,
    // `tests/quiet_proof.rs`), continued through kcache: its token is at a revision the cache
    // has not reached, so every page is the upstream's, and the upstream continues them. Once
    // the cache has passed that revision (a later write of the type), kcache continues such a
    // token from its cache: the state at the token's revision, without the later write.
    env.sim
        .create(
            "",
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}),
        )
        .unwrap();
    let cached = walk(&env, &cluster, 500, |i| usize::from(i == 0), &all, profile).await;
    assert!(
        cached.iter().all(|c| !c),
        "{profile}: the upstream's chain: {cached:?}"
    );
    let first = page(&env.sim.url(), &format!("{namespaced}?limit=2")).await;
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let mut seen = first.names;
    let mut token = first.token;
    while let Some(t) = token {
        assert_eq!(start_key(&t).starts_with('/'), profile == Profile::V1_34);
        let p = page(&env.url(), &format!("{namespaced}?limit=2&continue={t}")).await;
        assert!(p.cached, "{profile}: continued from the cache");
        seen.extend(p.names);
        token = p.token;
    }
    assert_eq!(
        seen.iter().cloned().collect::<BTreeSet<_>>(),
        ns,
        "{profile}"
    );
    assert_eq!(seen.len(), ns.len(), "{profile}");
}

per_profile!(consistent_lists_page_through_cache_and_upstream,);

/// A paginated read in progress: what it has seen, and its next page's path.
struct Reader {
    collection: String,
    limit: usize,
    seen: Vec<String>,
    next: Option<String>,
}

impl Reader {
    fn new(collection: &str, limit: usize) -> Reader {
        Reader {
            collection: collection.to_string(),
            limit,
            seen: Vec::new(),
            next: Some(format!("{collection}?limit={limit}")),
        }
    }

    /// Read the next page and check its count against `total`, the objects of the state the
    /// read is of: each page says how many follow it, the last page nothing.
    async fn step(&mut self, env: &Env, total: usize, what: &str) {
        let path = self.next.take().expect("a page to read");
        let Page {
            names,
            token,
            cached,
            remaining,
        } = page(&env.url(), &path).await;
        assert!(cached, "{what}: {path} from the cache");
        self.seen.extend(names);
        match &token {
            Some(t) => {
                assert_eq!(
                    remaining,
                    Some((total - self.seen.len()) as u64),
                    "{what}: after {} of {total}",
                    self.seen.len()
                );
                self.next = Some(format!(
                    "{}?limit={}&continue={t}",
                    self.collection, self.limit
                ));
            }
            None => {
                assert_eq!(remaining, None, "{what}: the last page");
                assert_eq!(self.seen.len(), total, "{what}: every object once");
            }
        }
    }

    fn done(&self) -> bool {
        self.next.is_none()
    }
}

/// kcache counts what follows a page once per read, not once per page: each page after the
/// first takes its count from the page before it. Whatever page size and range the reads
/// use, however they interleave, and whatever is written between their pages, every page's
/// `remainingItemCount` is what the state the read is of holds after it.
async fn every_page_counts_what_follows_it(profile: Profile) {
    let env = env(profile).await;
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let cluster = "/api/v1/configmaps";
    let namespaced = format!("/api/v1/namespaces/{NS}/configmaps");
    let total = env.sim.list("", "configmaps").len();
    let in_ns = |n: &str| {
        env.sim
            .list("", "configmaps")
            .iter()
            .filter(|o| o["metadata"]["namespace"] == n)
            .count()
    };
    let ns_total = in_ns(NS);
    // Two readers of the same state by the same pages, a third by other pages, and a
    // namespace's read, their pages interleaved.
    let mut readers = [
        (Reader::new(cluster, 250), total),
        (Reader::new(cluster, 250), total),
        (Reader::new(cluster, 333), total),
        (Reader::new(&namespaced, 100), ns_total),
    ];
    let mut step = 0;
    while readers.iter().any(|(r, _)| !r.done()) {
        for (i, (r, t)) in readers.iter_mut().enumerate() {
            if !r.done() {
                r.step(&env, *t, &format!("{profile}: reader {i}")).await;
            }
        }
        // A write between pages: the reads go on in the state they began in.
        if step == 1 {
            env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
        }
        step += 1;
    }
    // A read begun after the write is of the state with it.
    let mut after = Reader::new(cluster, 250);
    while !after.done() {
        after
            .step(&env, total + 1, &format!("{profile}: after the write"))
            .await;
    }
    let mut ns_after = Reader::new(&namespaced, 100);
    while !ns_after.done() {
        ns_after
            .step(&env, ns_total, &format!("{profile}: {NS} after the write"))
            .await;
    }
}

per_profile!(every_page_counts_what_follows_it,);
