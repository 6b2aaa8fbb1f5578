//! The audit trail of what kcache answers itself (`audit` in the configuration): a mixed run of
//! reads answered from the cache, proven current, shared with another caller's forwarded read,
//! refused, a watch and a write, by callers kcache authenticates, leaves in the log exactly the
//! events the apiserver's own policy file asks for, each an audit.k8s.io/v1 Event as the
//! apiserver writes it (checked against the Event's schema here, independently of the writer),
//! with the caller, the object, the answer's code, kcache's authorization decision and how kcache
//! answered. Requests forwarded under the caller's own identity (the write, a shared read's
//! leader) are the apiserver's to audit and leave none.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{get, get_with, request, resource, Env, EnvBuilder, Watch};
use kcache::auth::AuthMode;
use kcache::config::{Config, ResourceConfig};
use kcache::index::IndexConfig;
use kcache_sim::rbac::{Rbac, Subject};
use kcache_sim::{SimConfig, StorageReads};
use serde::Deserialize;
use serde_json::{json, Value};

const KCACHE: &str = "system:serviceaccount:kcache:kcache";
const APP: &str = "system:serviceaccount:team-a:app";
const NOBODY: &str = "system:serviceaccount:team-a:nobody";
const OPS: &str = "ops";
const NS: &str = "audited";
const READERS: usize = 8;

/// The apiserver's Policy format: Secrets never audited, everything else at Metadata, without
/// the RequestReceived stage (as most clusters' policies have it).
const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    resources:
      - group: ""
        resources: ["secrets"]
  - level: Metadata
"#;

fn table() -> Rbac {
    Rbac::new()
        .proxy("kcache-token", KCACHE)
        .token("app-token", APP, &["system:serviceaccounts"])
        .token("nobody-token", NOBODY, &["system:serviceaccounts"])
        .token("ops-token", OPS, &[])
        .allow(
            Subject::User(APP.into()),
            &["get", "list", "watch", "create"],
            &[""],
            &["configmaps"],
            Some(NS),
        )
        .named("app-configmaps")
        .allow(
            Subject::User(OPS.into()),
            &["list"],
            &[""],
            &["configmaps"],
            None,
        )
        .named("ops-list-configmaps")
        .allow(
            Subject::User(KCACHE.into()),
            &["get", "list", "watch"],
            &["*"],
            &["*"],
            None,
        )
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kcache-audit-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// kcache caching ConfigMaps, auditing into `dir/audit.log` by [`POLICY`], in front of a sim
/// that takes 20 ms per read (so that identical reads sent together overlap).
async fn env(dir: &Path, mode: AuthMode) -> Env {
    env_with(dir, mode, |_| {}).await
}

/// As [`env`], with `tune` applied to kcache's configuration.
async fn env_with(dir: &Path, mode: AuthMode, tune: impl FnOnce(&mut Config)) -> Env {
    std::fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    let audit: kcache_audit::AuditConfig = serde_json::from_value(json!({
        "policyFile": dir.join("policy.yaml"),
        "log": {"path": dir.join("audit.log")},
    }))
    .unwrap();
    let mut b = EnvBuilder {
        sim: SimConfig {
            storage_reads: Some(StorageReads {
                cost: Duration::from_millis(20),
                concurrency: 1,
                per_item: Duration::ZERO,
            }),
            ..SimConfig::default()
        },
        ..EnvBuilder::default()
    }
    .resources(vec![ResourceConfig {
        indexes: vec![IndexConfig {
            name: "team".into(),
            field: None,
            label: Some("team".into()),
        }],
        ..resource("", "v1", "configmaps")
    }]);
    if mode != AuthMode::None {
        b.rbac = Some((table(), "kcache-token".into()));
    }
    b.config.auth.mode = mode;
    b.config.audit = Some(audit);
    tune(&mut b.config);
    let env = b.start().await;
    for i in 0..3 {
        env.sim
            .create(
                "",
                "configmaps",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i}"), "namespace": NS}}),
            )
            .unwrap();
    }
    env.settle("", "configmaps").await;
    env
}

/// An audit.k8s.io/v1 Event, as the apiserver's JSON log holds one: every field it may have,
/// and no other.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct Event {
    kind: String,
    api_version: String,
    level: String,
    #[serde(rename = "auditID")]
    audit_id: String,
    stage: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    verb: String,
    user: UserInfo,
    impersonated_user: Option<UserInfo>,
    #[serde(rename = "sourceIPs", default)]
    source_ips: Vec<String>,
    user_agent: Option<String>,
    object_ref: Option<ObjectRef>,
    response_status: Option<Value>,
    request_object: Option<Value>,
    response_object: Option<Value>,
    request_received_timestamp: String,
    stage_timestamp: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct UserInfo {
    #[serde(default)]
    username: String,
    uid: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
    extra: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct ObjectRef {
    resource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    api_group: Option<String>,
    api_version: Option<String>,
    resource_version: Option<String>,
    subresource: Option<String>,
}

/// Every event of the log, each checked against the schema and the apiserver's formats.
fn events(log: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            let e: Event = serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("not an audit.k8s.io/v1 Event ({err}): {line}"));
            assert_eq!(
                (e.kind.as_str(), e.api_version.as_str()),
                ("Event", "audit.k8s.io/v1")
            );
            for t in [&e.request_received_timestamp, &e.stage_timestamp] {
                // MicroTime: RFC 3339 with six fractional digits, UTC.
                assert!(
                    t.len() == 27 && t.ends_with('Z') && t.as_bytes()[19] == b'.',
                    "{t}"
                );
            }
            uuid::Uuid::parse_str(&e.audit_id).expect("auditID is a UUID");
            e
        })
        .collect()
}

/// The authorizer's reason an event gives (`None`: no decision recorded).
fn reason(e: &Event) -> Option<&str> {
    e.annotations
        .get("authorization.k8s.io/reason")
        .map(String::as_str)
}

/// What a test relies on in one event.
fn summary(e: &Event) -> (String, String, String, u64, String, String) {
    (
        e.user.username.clone(),
        e.verb.clone(),
        e.stage.clone(),
        e.response_status
            .as_ref()
            .map_or(0, |s| s["code"].as_u64().unwrap_or(0)),
        e.annotations
            .get("kcache.dev/answered-by")
            .cloned()
            .unwrap_or_default(),
        e.annotations
            .get("authorization.k8s.io/decision")
            .cloned()
            .unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_mixed_run_leaves_exactly_the_events_the_policy_asks_for() {
    let dir = tempdir();
    let env = env(&dir, AuthMode::Delegated).await;
    let url = env.url();
    let app = [("Authorization", "Bearer app-token")];
    let nobody = [("Authorization", "Bearer nobody-token")];
    let cms = format!("/api/v1/namespaces/{NS}/configmaps");

    // From the cache: a LIST at RV=0.
    let r = get_with(&url, &format!("{cms}?resourceVersion=0"), &app).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let cached_id = r.header("audit-id").unwrap().to_string();
    // Refused by kcache: a caller without RBAC.
    let r = get_with(&url, &format!("{cms}?resourceVersion=0"), &nobody).await;
    assert_eq!(r.status, 403, "{}", r.text());
    // Refused before authorization: a token the upstream does not accept. The apiserver
    // records it at ResponseStarted only, with no user (tests/fixtures/audit).
    let r = get_with(&url, &cms, &[("Authorization", "Bearer unknown-token")]).await;
    assert_eq!(r.status, 401, "{}", r.text());
    // Never audited (level None): Secrets, whatever the answer.
    let r = get_with(&url, &format!("/api/v1/namespaces/{NS}/secrets"), &app).await;
    assert_eq!(r.status, 403, "{}", r.text());
    // A watch: ResponseStarted when it starts streaming, ResponseComplete when it ends.
    let mut w = Watch::open_with(
        &url,
        &format!("{cms}?watch=1&resourceVersion=0&timeoutSeconds=1"),
        &app,
    )
    .await;
    while w.next(Duration::from_secs(5)).await.is_some() {}
    drop(w);
    // A refused watch: both stages too, as the apiserver records one.
    let r = get_with(&url, &format!("{cms}?watch=1&resourceVersion=0"), &nobody).await;
    assert_eq!(r.status, 403, "{}", r.text());

    // Shared: identical consistent GETs of a quiet type, sent together; the leaders' requests
    // reach the upstream (which audits them), the others share their answers.
    env.write_other_type(NS, "quiet");
    let first = get_with(&url, &format!("{cms}/cm-0"), &app).await;
    assert_eq!(first.status, 200, "{}", first.text());
    env.wait_quiet("configmaps", true).await;
    env.write_other_type(NS, "again");
    let gets = || env.sim.request_counts().1;
    let before = gets();
    let one = format!("{cms}/cm-0");
    let answers = futures::future::join_all((0..READERS).map(|_| get_with(&url, &one, &app))).await;
    assert!(answers.iter().all(|a| a.status == 200));
    let forwarded = usize::try_from(gets() - before).unwrap();
    assert!(
        forwarded < READERS,
        "{forwarded} of {READERS} forwarded: none shared"
    );

    // kcache's own API: an index query reads the cached objects as a cluster-wide LIST
    // does, and is audited as one.
    let ops = [("Authorization", "Bearer ops-token")];
    let index = "/apis/kcache.dev/v1/indexes/core/v1/configmaps/team";
    let r = get_with(&url, &format!("{index}?values=a"), &ops).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = get_with(&url, &format!("{index}/counts"), &app).await;
    assert_eq!(r.status, 403, "{}", r.text());

    // A write: forwarded under the caller's own identity, audited by the apiserver only.
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "written", "namespace": NS}});
    let headers = [app[0], ("Content-Type", "application/json")];
    let r = request(&url, "POST", &cms, &headers, body.to_string().as_bytes()).await;
    assert_eq!(r.status, 201, "{}", r.text());
    // Proven: a consistent LIST of the type just written, answered from the cache once kcache
    // has seen the upstream's revision.
    env.settle("", "configmaps").await;
    let proven_before = env.consistent_outcome("configmaps", "cache");
    let r = get_with(&url, &cms, &app).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        env.consistent_outcome("configmaps", "cache"),
        proven_before + 1
    );

    // Every event is written before kcache stops.
    env.kcache.shutdown().await;
    let events = events(&dir.join("audit.log"));
    let mut got: Vec<_> = events.iter().map(summary).collect();
    got.sort();
    let app_user = APP.to_string();
    let s = |user: &str, verb: &str, stage: &str, code: u64, by: &str, decision: &str| {
        (
            user.to_string(),
            verb.to_string(),
            stage.to_string(),
            code,
            by.to_string(),
            decision.to_string(),
        )
    };
    let mut want = vec![
        s(&app_user, "list", "ResponseComplete", 200, "cache", "allow"),
        s(NOBODY, "list", "ResponseComplete", 403, "refused", "forbid"),
        s(NOBODY, "watch", "ResponseStarted", 403, "refused", "forbid"),
        s(
            NOBODY,
            "watch",
            "ResponseComplete",
            403,
            "refused",
            "forbid",
        ),
        s("", "list", "ResponseStarted", 401, "refused", ""),
        s(&app_user, "watch", "ResponseStarted", 200, "cache", "allow"),
        s(OPS, "list", "ResponseComplete", 200, "cache", "allow"),
        s(
            &app_user,
            "list",
            "ResponseComplete",
            403,
            "refused",
            "forbid",
        ),
        s(
            &app_user,
            "watch",
            "ResponseComplete",
            200,
            "cache",
            "allow",
        ),
        s(
            &app_user,
            "list",
            "ResponseComplete",
            200,
            "proven",
            "allow",
        ),
    ];
    // The first GET found the type quiet and went upstream; of the crowd, those not forwarded.
    for _ in 0..READERS - forwarded {
        want.push(s(
            &app_user,
            "get",
            "ResponseComplete",
            200,
            "shared",
            "allow",
        ));
    }
    want.sort();
    assert_eq!(got, want, "{events:#?}");

    // What each event says of the request.
    let cached = events
        .iter()
        .find(|e| e.audit_id == cached_id)
        .expect("the cached LIST's event");
    assert_eq!(cached.level, "Metadata");
    assert_eq!(cached.request_uri, format!("{cms}?resourceVersion=0"));
    assert!(cached
        .user_agent
        .as_deref()
        .unwrap()
        .starts_with("kubectl/"));
    assert_eq!(cached.source_ips, vec!["127.0.0.1".to_string()]);
    assert!(cached
        .user
        .groups
        .contains(&"system:serviceaccounts".to_string()));
    let o = cached.object_ref.as_ref().unwrap();
    assert_eq!(o.resource.as_deref(), Some("configmaps"));
    assert_eq!(o.namespace.as_deref(), Some(NS));
    assert_eq!(o.api_version.as_deref(), Some("v1"));
    assert_eq!(
        o.api_group, None,
        "the core group is left out, as the apiserver does"
    );
    assert_eq!(
        cached.response_status,
        Some(json!({"metadata": {}, "code": 200}))
    );
    // The authorizer's reason beside kcache's decision, as the apiserver writes it: RBAC's
    // binding when it allows, empty when it denies.
    assert_eq!(
        reason(cached),
        Some(
            format!(
                "RBAC: allowed by RoleBinding \"app-configmaps/{NS}\" of Role \"app-configmaps\" \
                 to User \"{APP}\""
            )
            .as_str()
        )
    );
    let by_index = events.iter().find(|e| e.user.username == OPS).unwrap();
    assert_eq!(
        reason(by_index),
        Some(
            "RBAC: allowed by ClusterRoleBinding \"ops-list-configmaps\" of ClusterRole \
             \"ops-list-configmaps\" to User \"ops\""
        )
    );
    assert_eq!(by_index.request_uri, format!("{index}?values=a"));
    let o = by_index.object_ref.as_ref().unwrap();
    assert_eq!(
        (o.resource.as_deref(), o.namespace.as_deref()),
        (Some("configmaps"), None)
    );
    let refused = events.iter().find(|e| e.user.username == NOBODY).unwrap();
    assert_eq!(reason(refused), Some(""));
    let status = refused.response_status.as_ref().unwrap();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["status"], "Failure");
    assert!(status["message"]
        .as_str()
        .unwrap()
        .starts_with("configmaps is forbidden: User"));
    // The watch's two stages are one request's.
    let watch: Vec<_> = events
        .iter()
        .filter(|e| e.verb == "watch" && e.user.username == APP)
        .collect();
    assert_eq!(watch[0].audit_id, watch[1].audit_id);
    assert_eq!(
        watch[0].request_received_timestamp,
        watch[1].request_received_timestamp
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `auth: none` kcache knows no caller: its events carry no user, and say where the
/// request came from.
#[tokio::test]
async fn without_authentication_the_events_say_the_user_is_unknown() {
    let dir = tempdir();
    let env = env(&dir, AuthMode::None).await;
    let url = env.url();
    let r = get(
        &url,
        &format!("/api/v1/namespaces/{NS}/configmaps?resourceVersion=0"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    env.kcache.shutdown().await;
    let events = events(&dir.join("audit.log"));
    assert_eq!(events.len(), 1, "{events:#?}");
    let e = &events[0];
    assert_eq!(e.user.username, "");
    assert!(e.user.groups.is_empty());
    assert_eq!(e.source_ips, vec!["127.0.0.1".to_string()]);
    assert!(e.user_agent.is_some());
    assert_eq!(
        e.annotations.get("authorization.k8s.io/decision"),
        None,
        "kcache decided nothing"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A caller refused by a limit was authenticated first: the event names them, as the
/// apiserver's names the user its flow control refuses, with no decision (none was made).
#[tokio::test]
async fn a_caller_over_its_rate_is_named_in_the_event() {
    let dir = tempdir();
    let env = env_with(&dir, AuthMode::Delegated, |c| {
        c.limits.per_caller_qps = 0.01;
        c.limits.per_caller_burst = 1;
    })
    .await;
    let url = env.url();
    let app = [("Authorization", "Bearer app-token")];
    let path = format!("/api/v1/namespaces/{NS}/configmaps?resourceVersion=0");
    assert_eq!(get_with(&url, &path, &app).await.status, 200);
    let r = get_with(&url, &path, &app).await;
    assert_eq!(r.status, 429, "{}", r.text());
    env.kcache.shutdown().await;
    let events = events(&dir.join("audit.log"));
    let limited: Vec<_> = events
        .iter()
        .filter(|e| e.response_status.as_ref().is_some_and(|s| s["code"] == 429))
        .collect();
    assert_eq!(limited.len(), 1, "{events:#?}");
    let e = limited[0];
    assert_eq!(e.user.username, APP);
    assert!(e
        .user
        .groups
        .contains(&"system:serviceaccounts".to_string()));
    assert_eq!(e.stage, "ResponseComplete");
    assert_eq!(e.annotations["kcache.dev/answered-by"], "refused");
    assert_eq!(reason(e), None, "kcache decided nothing");
    assert_eq!(
        e.response_status.as_ref().unwrap()["reason"],
        "TooManyRequests"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
