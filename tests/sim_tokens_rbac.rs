//! The sim's TokenRequest (`POST …/serviceaccounts/NAME/token`) and its authorizer's reading
//! of RBAC objects written through the API, against tests/fixtures/service-account-tokens
//! (recorded from a v1.34.9 apiserver): the answers' shapes and Status bodies, the reasons of
//! SubjectAccessReviews word for word, and a requested token authenticating requests that
//! a ClusterRoleBinding or a RoleBinding written by a client then allows or not.

#[path = "sim_common/mod.rs"]
mod common;

use std::time::Duration;

use common::*;
use kcache_sim::rbac::Rbac;
use kcache_sim::{Profile, Sim};
use serde_json::{json, Value};

const ADMIN: &str = "admin-token";
const NS: &str = "tokreq-check";

fn recorded(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/service-account-tokens/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A v1.34 sim with RBAC on: `ADMIN` is a cluster admin, as in the recordings' cluster; the
/// namespace's ServiceAccount `app` and Pod `tokpod`.
async fn sim() -> Sim {
    let sim = Sim::start(profile_cfg(Profile::V1_34)).await.unwrap();
    sim.set_rbac(Some(
        Rbac::new()
            .token(ADMIN, "admin", &["system:masters"])
            .allow_masters(),
    ));
    sim.create("", "namespaces", json!({"metadata": {"name": NS}}))
        .unwrap();
    sim.create(
        "",
        "serviceaccounts",
        json!({"metadata": {"name": "app", "namespace": NS}}),
    )
    .unwrap();
    sim.create(
        "",
        "pods",
        json!({"metadata": {"name": "tokpod", "namespace": NS},
            "spec": {"serviceAccountName": "app", "containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .unwrap();
    sim
}

/// A request as `token` (None: anonymous), from kubectl (`common::UA`).
async fn call(sim: &Sim, token: Option<&str>, method: &str, path: &str, body: &Value) -> Resp {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(b) = &bearer {
        headers.push(("Authorization", b.as_str()));
    }
    let body = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).unwrap()
    };
    request(
        sim.addr(),
        method,
        path,
        &headers,
        &body,
        Duration::from_secs(10),
    )
    .await
}

/// The keys, in order, and the JSON types of a value, all the way down: what two answers
/// that differ only in their tokens, names, times and UIDs have in common.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::String(_) => json!("string"),
        Value::Number(_) => json!("number"),
        Value::Bool(_) => json!("bool"),
        Value::Null => Value::Null,
    }
}

/// Seconds since 1970 of an RFC 3339 time (`2026-11-29T13:53:33Z`).
fn unix_seconds(t: &str) -> i64 {
    t.parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{t:?}: {e}"))
        .as_second()
}

fn token_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/serviceaccounts/{name}/token")
}

/// A token for `app`, from the sim's TokenRequest.
async fn token(sim: &Sim, spec: Value) -> String {
    let r = call(
        sim,
        Some(ADMIN),
        "POST",
        &token_path("app"),
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["status"]["token"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_token_request_is_answered_as_the_apiserver_answers_it() {
    let sim = sim().await;
    let sa = sim.get("", "serviceaccounts", Some(NS), "app").unwrap();
    for (file, spec) in [
        (
            "tokenrequest-serviceaccount.json",
            json!({"expirationSeconds": 7200}),
        ),
        (
            "tokenrequest-pod-bound.json",
            json!({"audiences": ["https://kubernetes.default.svc.cluster.local"],
                "expirationSeconds": 3600,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "tokpod"}}),
        ),
    ] {
        let body =
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
        let r = call(&sim, Some(ADMIN), "POST", &token_path("app"), &body).await;
        assert_eq!(r.status, 201, "{file}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let ours = r.json();
        let theirs = recorded(file);
        assert_eq!(shape(&ours), shape(&theirs), "{file}: {ours}");
        // What does not depend on the cluster is the recording's.
        for pointer in [
            "/kind",
            "/apiVersion",
            "/metadata/name",
            "/metadata/namespace",
            "/metadata/managedFields/0/operation",
            "/metadata/managedFields/0/fieldsV1",
            "/metadata/managedFields/0/subresource",
            "/spec",
        ] {
            assert_eq!(
                ours.pointer(pointer),
                theirs.pointer(pointer),
                "{file}: {pointer}"
            );
        }
        // The manager is the client's User-Agent up to its `/` (the recordings' was
        // `kcache-bench/x`).
        assert_eq!(ours["metadata"]["managedFields"][0]["manager"], "kubectl");
        assert_eq!(ours["metadata"]["uid"], sa["metadata"]["uid"]);
        let at = |p: &str| unix_seconds(ours.pointer(p).and_then(Value::as_str).unwrap());
        assert_eq!(
            at("/status/expirationTimestamp") - at("/metadata/creationTimestamp"),
            ours["spec"]["expirationSeconds"].as_i64().unwrap()
        );
    }

    // A ServiceAccount that does not exist, a lifetime too short, and the subresource read:
    // the recorded Status bodies.
    let r = call(
        &sim,
        Some(ADMIN),
        "POST",
        &token_path("missing"),
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        recorded("tokenrequest-missing-serviceaccount-404.json")
    );
    let r = call(
        &sim,
        Some(ADMIN),
        "POST",
        &token_path("app"),
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 60}}),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json(),
        recorded("tokenrequest-expiration-too-short-422.json")
    );
    let r = call(&sim, Some(ADMIN), "GET", &token_path("app"), &Value::Null).await;
    assert_eq!(r.status, 405, "{}", r.text());
    // Anonymous: refused by the authorizer before anything else, as recorded.
    let r = call(&sim, None, "POST", &token_path("app"), &json!({"spec": {}})).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "serviceaccounts \"app\" is forbidden: User \"system:anonymous\" cannot create resource \
         \"serviceaccounts/token\" in API group \"\" in the namespace \"tokreq-check\""
    );
}

#[tokio::test]
async fn a_requested_token_is_allowed_what_rbac_objects_written_through_the_api_grant() {
    let sim = sim().await;
    let app = token(&sim, json!({})).await;
    let user = format!("system:serviceaccount:{NS}:app");
    let pods = "/api/v1/pods";
    let configmaps = |ns: &str| format!("/api/v1/namespaces/{ns}/configmaps");
    // The token authenticates (not a 401) and nothing allows it anything yet.
    let r = call(&sim, Some(&app), "GET", pods, &Value::Null).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(
        r.json()["message"],
        format!(
            "pods is forbidden: User \"{user}\" cannot list resource \"pods\" in API group \"\" \
             at the cluster scope"
        )
    );

    // As recorded: a ClusterRole bound to the namespace's ServiceAccounts' group, and a
    // RoleBinding of it to the ServiceAccount itself.
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "tokreq-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": ["get", "list", "watch"]},
                  {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "tokreq-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tokreq-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": format!("system:serviceaccounts:{NS}")}]});
    let role_binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "tokreq-sa", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tokreq-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": NS}]});
    for (path, body) in [
        (format!("{rbac}/clusterroles"), &role),
        (format!("{rbac}/clusterrolebindings"), &binding),
        (
            format!("{rbac}/namespaces/{NS}/rolebindings"),
            &role_binding,
        ),
    ] {
        let r = call(&sim, Some(ADMIN), "POST", &path, body).await;
        assert_eq!(r.status, 201, "{path}: {}", r.text());
    }
    let r = call(&sim, Some(&app), "GET", pods, &Value::Null).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 1);
    // Not what the role leaves out.
    let r = call(&sim, Some(&app), "GET", "/api/v1/nodes", &Value::Null).await;
    assert_eq!(r.status, 403);
    let r = call(
        &sim,
        Some(&app),
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/tokpod"),
        &Value::Null,
    )
    .await;
    assert_eq!(r.status, 403);

    // The SubjectAccessReviews of the recordings: the same reasons, word for word.
    for file in [
        "subjectaccessreview-clusterrolebinding-group.json",
        "subjectaccessreview-rolebinding-serviceaccount.json",
    ] {
        let theirs = recorded(file);
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": theirs["spec"]});
        let r = call(
            &sim,
            Some(ADMIN),
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &review,
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["status"], theirs["status"], "{file}");
    }

    // The ClusterRoleBinding gone: only the RoleBinding's namespace is left to the token.
    let r = call(
        &sim,
        Some(ADMIN),
        "DELETE",
        &format!("{rbac}/clusterrolebindings/tokreq-reader"),
        &Value::Null,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(&sim, Some(&app), "GET", pods, &Value::Null).await;
    assert_eq!(r.status, 403);
    let r = call(&sim, Some(&app), "GET", &configmaps(NS), &Value::Null).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(
        &sim,
        Some(&app),
        "GET",
        &configmaps("default"),
        &Value::Null,
    )
    .await;
    assert_eq!(r.status, 403);

    // A token for another audience is not the apiserver's; one whose ServiceAccount is gone
    // is no one's.
    let other = token(&sim, json!({"audiences": ["vault"]})).await;
    let r = call(&sim, Some(&other), "GET", &configmaps(NS), &Value::Null).await;
    assert_eq!(r.status, 401);
    sim.delete("", "serviceaccounts", Some(NS), "app").unwrap();
    let r = call(&sim, Some(&app), "GET", &configmaps(NS), &Value::Null).await;
    assert_eq!(r.status, 401);
}

/// The apiserver's process figures, which the fleet bench reads to tell what it cost it.
#[test]
fn times_are_read_as_unix_seconds() {
    assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), 0);
    assert_eq!(unix_seconds("2026-11-29T13:53:33Z"), 1_795_960_413);
    assert_eq!(
        unix_seconds("2024-03-01T00:00:00Z") - unix_seconds("2024-02-28T00:00:00Z"),
        2 * 86_400
    );
}

#[tokio::test]
async fn metrics_have_the_process_figures() {
    let sim = sim().await;
    let r = call(&sim, Some(ADMIN), "GET", "/metrics", &Value::Null).await;
    assert_eq!(r.status, 200);
    let text = r.text();
    for family in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
        let value: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(family)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {family}: {text}"))
            .parse()
            .unwrap();
        // CPU time counts in ticks of 10 ms: a test process may not have used one yet.
        if family == "process_resident_memory_bytes" {
            assert!(value > 0.0, "{family} {value}");
        } else {
            assert!(value >= 0.0, "{family} {value}");
        }
    }
}
