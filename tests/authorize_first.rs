//! Nothing is done for a caller before it is authorized: a caller with a valid token and no
//! RBAC at all reads every configured type as a Table, in protobuf and in JSON (lists, gets,
//! watches, consistent and not), and lists and watches types kcache does not cache, over and
//! over. Every read is refused with the apiserver's 403, and on its behalf kcache asks the
//! upstream nothing but who the caller is and what it may do (TokenReview,
//! SubjectAccessReview): no Table columns are fetched, no protobuf mirror starts, no proof or
//! probe is sent, and no type is taken up by on-demand caching.
//!
//! The same reads by an allowed caller do all of that, which shows the reads above would have
//! cost something had they been authorized.

mod common;

use common::{get_with, wait_until, Env, EnvBuilder};
use kcache::auth::AuthMode;
use kcache_sim::rbac::{Rbac, Subject};
use kcache_sim::JournalEntry;

const KCACHE: &str = "system:serviceaccount:kcache:kcache";
const NOBODY: &str = "system:serviceaccount:team-a:nobody";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf,application/json";

/// The configured types of `EnvBuilder::fixtures`, as collection paths.
const CACHED: [&str; 6] = [
    "/api/v1/namespaces/fixtures-a/configmaps",
    "/api/v1/namespaces/fixtures-a/secrets",
    "/api/v1/namespaces/fixtures-a/pods",
    "/api/v1/namespaces/fixtures-a/services",
    "/api/v1/namespaces",
    "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets",
];

/// Types kcache does not cache, which the sim serves.
const UNCACHED: [&str; 2] = [
    "/api/v1/namespaces/fixtures-a/serviceaccounts",
    "/apis/apps/v1/namespaces/fixtures-a/deployments",
];

fn table() -> Rbac {
    Rbac::new()
        .proxy("kcache-token", KCACHE)
        .token("nobody-token", NOBODY, &["system:serviceaccounts"])
        .token("admin-token", "admin", &["system:masters"])
        .allow_masters()
        .allow(
            Subject::User(KCACHE.into()),
            &["get", "list", "watch"],
            &["*"],
            &["*"],
            None,
        )
}

/// kcache with delegated authentication, on-demand caching after two reads, protobuf on.
async fn env() -> Env {
    let mut b = EnvBuilder::fixtures();
    b.rbac = Some((table(), "kcache-token".into()));
    b.config.auth.mode = AuthMode::Delegated;
    b.config.cache.protobuf = true;
    b.config.auto.enabled = true;
    b.config.auto.min_requests = 2;
    let env = b.start().await;
    env.sim.keep_journal();
    env
}

/// What kcache asked the upstream as itself, other than reviews of its callers.
fn own_requests(journal: &[JournalEntry]) -> Vec<&JournalEntry> {
    journal
        .iter()
        .filter(|e| e.user == KCACHE)
        .filter(|e| {
            !(e.method == "POST"
                && (e.path.ends_with("/tokenreviews") || e.path.ends_with("/subjectaccessreviews")))
        })
        .collect()
}

/// Every read an informer, `kubectl get` or a typed client makes of a type: Table, protobuf
/// and JSON lists (consistent and at RV=0), a get, and watches.
fn reads_of(collection: &str) -> Vec<(String, &'static str)> {
    let mut reads = Vec::new();
    for accept in [TABLE, PROTOBUF, "application/json"] {
        reads.push((collection.to_string(), accept));
        reads.push((format!("{collection}?resourceVersion=0"), accept));
        reads.push((format!("{collection}?limit=2"), accept));
        reads.push((format!("{collection}/some-name"), accept));
        reads.push((
            format!("{collection}?watch=1&resourceVersion=0&timeoutSeconds=1"),
            accept,
        ));
    }
    reads
}

#[tokio::test]
async fn a_caller_without_rbac_costs_the_upstream_nothing_but_its_reviews() {
    let env = env().await;
    let url = env.url();
    let nobody = "Bearer nobody-token";
    for round in 0..3 {
        for collection in CACHED.iter().chain(UNCACHED.iter()) {
            for (path, accept) in reads_of(collection) {
                let r = get_with(
                    &url,
                    &path,
                    &[("Authorization", nobody), ("Accept", accept)],
                )
                .await;
                assert_eq!(
                    r.status,
                    403,
                    "round {round}: {path} ({accept}): {}",
                    r.text()
                );
            }
        }
    }
    let journal = env.sim.journal();
    let own = own_requests(&journal);
    assert!(
        own.is_empty(),
        "kcache asked the upstream, as itself, on behalf of a caller it refused:\n{own:#?}"
    );
    // What the upstream saw of the refused caller's own: its passed-through reads.
    assert!(journal.iter().any(|e| e.user == NOBODY));

    // A control: an allowed caller lists another uncached type often enough to have it taken
    // up. On-demand caching considers types one at a time, in the order they were wanted, so
    // once this one is cached, any type the refused reads had made wanted was considered.
    let admin = "Bearer admin-token";
    for _ in 0..2 {
        let r = get_with(&url, "/api/v1/endpoints", &[("Authorization", admin)]).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let k = &env.kcache;
    wait_until("endpoints cached on demand", || async move {
        k.app
            .registry()
            .all()
            .any(|c| c.info.resource == "endpoints")
    })
    .await;
    for c in k.app.registry().all() {
        assert!(
            c.mirror().is_none(),
            "{}: a protobuf mirror started for a refused caller",
            c.info
        );
        assert!(
            !matches!(c.info.resource.as_str(), "serviceaccounts" | "deployments"),
            "{}: taken up on demand for lists the upstream refused",
            c.info
        );
    }
}

/// The control for the test above: the same Table and protobuf reads by an allowed caller
/// make kcache fetch the type's columns and start its protobuf mirror.
#[tokio::test]
async fn an_allowed_callers_table_and_protobuf_reads_fetch_columns_and_start_mirrors() {
    let env = env().await;
    let url = env.url();
    let admin = "Bearer admin-token";
    for accept in [TABLE, PROTOBUF] {
        let path = "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0";
        let r = get_with(&url, path, &[("Authorization", admin), ("Accept", accept)]).await;
        assert_eq!(r.status, 200, "{accept}: {}", r.text());
    }
    let journal = env.sim.journal();
    let own = own_requests(&journal);
    assert!(
        own.iter().any(|e| e.accept.contains("as=Table")),
        "the Table read fetched the columns: {own:#?}"
    );
    let cms = env.kcache.cache("", "v1", "configmaps").unwrap();
    assert!(
        cms.mirror().is_some(),
        "the protobuf read started the mirror"
    );
}

/// A Table read whose columns the upstream cannot give is passed through; kcache does not ask
/// for the columns again on every such read, but after a backoff.
#[tokio::test]
async fn a_failed_column_fetch_is_remembered() {
    let env = env().await;
    let url = env.url();
    let admin = "Bearer admin-token";
    // The sim serves no Table columns for Secrets: the fetch fails.
    for _ in 0..5 {
        let path = "/api/v1/namespaces/fixtures-a/secrets?resourceVersion=0";
        let r = get_with(&url, path, &[("Authorization", admin), ("Accept", TABLE)]).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let journal = env.sim.journal();
    let fetches = own_requests(&journal)
        .into_iter()
        .filter(|e| e.accept.contains("as=Table") && e.path.ends_with("/secrets"))
        .count();
    assert_eq!(
        fetches, 1,
        "one column fetch for five Table reads: {journal:#?}"
    );
}
