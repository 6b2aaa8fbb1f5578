//! Caller authentication and authorization: a ServiceAccount allowed to read ConfigMaps in
//! one namespace reads exactly that through kcache, with every decision coming from the
//! upstream (the sim's TokenReview and SubjectAccessReview over a small RBAC table), and
//! requests kcache passes through carry the caller's identity, never kcache's.

mod common;

use std::time::Duration;

use common::{fixture, get_with, request, EnvBuilder, Watch};
use kcache::auth::AuthMode;
use kcache_sim::rbac::{Rbac, Subject};

const KCACHE: &str = "system:serviceaccount:kcache:kcache";
const APP: &str = "system:serviceaccount:team-a:app";

fn table() -> Rbac {
    Rbac::new()
        .proxy("kcache-token", KCACHE)
        .token("app-token", APP, &["system:serviceaccounts"])
        .token("admin-token", "admin", &["system:masters"])
        .allow(
            Subject::User(APP.into()),
            &["get", "list", "watch", "create"],
            &[""],
            &["configmaps"],
            Some("fixtures-a"),
        )
        .allow_masters()
}

async fn env(mode: AuthMode, rbac: Rbac) -> common::Env {
    let mut b = EnvBuilder::fixtures();
    b.rbac = Some((rbac, "kcache-token".into()));
    b.config.auth.mode = mode;
    b.config.auth.denied_cache_seconds = 1;
    b.start().await
}

/// How many `review` requests (a path ending, `/tokenreviews` or `/subjectaccessreviews`) the
/// sim's journal holds.
fn posted(sim: &kcache_sim::Sim, review: &str) -> usize {
    sim.journal()
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with(review))
        .count()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[tokio::test]
async fn a_service_account_reads_its_own_configmaps_and_nothing_else() {
    let env = env(AuthMode::Delegated, table()).await;
    let url = env.url();
    let app = bearer("app-token");
    let h = [("Authorization", app.as_str())];
    let lists_before = env.sim.request_counts().0;

    // Its own namespace: from the cache (RV=0 never reaches the upstream).
    let r = get_with(
        &url,
        "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0",
        &h,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.json()["items"].as_array().unwrap().is_empty());
    let r = get_with(&url, "/api/v1/namespaces/fixtures-a/configmaps", &h).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        env.sim.request_counts().0 <= lists_before + 2,
        "only the consistent read's one-item probes reached the upstream"
    );
    let name = r.json()["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let r = get_with(
        &url,
        &format!("/api/v1/namespaces/fixtures-a/configmaps/{name}"),
        &h,
    )
    .await;
    assert_eq!(r.status, 200);

    // Secrets in the same namespace, another namespace, all namespaces: the apiserver's 403s.
    let forbidden = |path: &'static str, message: &'static str| {
        let (url, h) = (url.clone(), h);
        async move {
            let r = get_with(&url, path, &h).await;
            assert_eq!(r.status, 403, "{path}: {}", r.text());
            assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
            let s = r.json();
            assert_eq!(s["reason"], "Forbidden");
            assert_eq!(s["message"], message, "{path}");
        }
    };
    forbidden(
        "/api/v1/namespaces/fixtures-a/secrets?resourceVersion=0",
        "secrets is forbidden: User \"system:serviceaccount:team-a:app\" cannot list resource \"secrets\" in API group \"\" in the namespace \"fixtures-a\"",
    )
    .await;
    forbidden(
        "/api/v1/namespaces/fixtures-b/configmaps",
        "configmaps is forbidden: User \"system:serviceaccount:team-a:app\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"fixtures-b\"",
    )
    .await;
    forbidden(
        "/api/v1/configmaps?resourceVersion=0",
        "configmaps is forbidden: User \"system:serviceaccount:team-a:app\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope",
    )
    .await;
    forbidden(
        "/api/v1/namespaces/fixtures-a/secrets/sec-basic",
        "secrets \"sec-basic\" is forbidden: User \"system:serviceaccount:team-a:app\" cannot get resource \"secrets\" in API group \"\" in the namespace \"fixtures-a\"",
    )
    .await;
    forbidden(
        "/apis/fixtures.example.com/v1/widgets?watch=1",
        "widgets.fixtures.example.com is forbidden: User \"system:serviceaccount:team-a:app\" cannot watch resource \"widgets\" in API group \"fixtures.example.com\" at the cluster scope",
    )
    .await;

    // Watches: its own namespace streams, another is refused before any event.
    let mut w = Watch::open_with(
        &url,
        "/api/v1/namespaces/fixtures-a/configmaps?watch=1&resourceVersion=0",
        &h,
    )
    .await;
    assert_eq!(w.status, 200);
    let ev = w.next_json(Duration::from_secs(5)).await.expect("an event");
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["namespace"], "fixtures-a");

    // An admin (by group) reads everything, through the same cache.
    let admin = bearer("admin-token");
    let r = get_with(
        &url,
        "/api/v1/secrets?resourceVersion=0",
        &[("Authorization", admin.as_str())],
    )
    .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn unauthenticated_and_anonymous_callers_get_the_recorded_answers() {
    let env = env(AuthMode::Delegated, table()).await;
    let url = env.url();
    let r = get_with(
        &url,
        "/api/v1/namespaces/fixtures-a/configmaps",
        &[("Authorization", "Bearer not-a-valid-token")],
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body, fixture("err-unauthenticated-401.json"));
    let r = get_with(
        &url,
        "/api/v1/namespaces/fixtures-a/configmaps",
        &[("Authorization", "Basic YTpi")],
    )
    .await;
    assert_eq!(r.status, 401);
    // No credentials: system:anonymous, which the RBAC table allows nothing.
    let r = get_with(&url, "/api/v1/namespaces/fixtures-a/configmaps", &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.body, fixture("err-anonymous-forbidden-403.json"));
    // kcache's health and metrics, on the admin listener, stay open to probes and scrapers.
    for path in ["/readyz", "/livez", "/metrics"] {
        assert_eq!(
            get_with(&env.admin_url(), path, &[]).await.status,
            200,
            "{path}"
        );
    }
    // On the API address they are the upstream's, asked for as system:anonymous, to whom
    // the apiserver shows its health.
    for path in ["/readyz", "/livez"] {
        assert_eq!(get_with(&url, path, &[]).await.status, 200, "{path}");
    }
}

#[tokio::test]
async fn decisions_come_from_the_upstream_and_expire() {
    let env = env(AuthMode::Delegated, table()).await;
    let url = env.url();
    let app = bearer("app-token");
    let h = [("Authorization", app.as_str())];
    let path = "/api/v1/namespaces/fixtures-a/secrets?resourceVersion=0";
    assert_eq!(get_with(&url, path, &h).await.status, 403);
    // The upstream's RBAC changes: a RoleBinding for secrets appears.
    env.sim.set_rbac(Some(table().allow(
        Subject::User(APP.into()),
        &["list"],
        &[""],
        &["secrets"],
        Some("fixtures-a"),
    )));
    // Denials are remembered for deniedCacheSeconds (1 s here), then asked again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = get_with(&url, path, &h).await;
        if r.status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {}", r.status);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Tokens are checked by the upstream too: one the sim forgets stops working once the
    // accepted-token TTL has passed (not tested at 60 s); an unknown one is refused at once.
    let r = get_with(&url, path, &[("Authorization", "Bearer other")]).await;
    assert_eq!(r.status, 401);
}

/// A ServiceAccount's tokens are each reviewed, but what the account may do is asked once.
/// Since v1.30 every token of an account carries an ID of its own in the TokenReview's answer
/// (`extra`: `authentication.kubernetes.io/credential-id`, checked against v1.34.9); asked
/// with it, the kube-proxies of a cluster, one account with a token per node, cost a
/// SubjectAccessReview per node instead of one.
#[tokio::test]
async fn tokens_of_one_service_account_share_its_access_reviews() {
    common::set_profile(kcache_sim::Profile::V1_34);
    let tokens = ["app-token", "app-token-2", "app-token-3"];
    let rbac = tokens[1..].iter().fold(table(), |rbac, token| {
        rbac.token(token, APP, &["system:serviceaccounts"])
    });
    let env = env(AuthMode::Delegated, rbac).await;
    env.sim.keep_journal();
    for token in tokens {
        let auth = bearer(token);
        let r = get_with(
            &env.url(),
            "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0",
            &[("Authorization", auth.as_str())],
        )
        .await;
        assert_eq!(r.status, 200, "{token}: {}", r.text());
    }
    let posted = |review: &str| posted(&env.sim, review);
    assert_eq!(posted("/tokenreviews"), 3, "a TokenReview per token");
    assert_eq!(
        posted("/subjectaccessreviews"),
        1,
        "one access review for the account"
    );
}

/// What RBAC allowed is remembered until RBAC changes, not for `allowedCacheSeconds`: a herd
/// of clients coming back after the short lifetime costs the upstream no access review, and a
/// revoked binding still takes effect as soon as kcache hears of it (the sim serves its rule
/// table as RBAC objects, as an apiserver's authorizer reads them).
#[tokio::test]
async fn allowances_rbac_gave_last_until_rbac_changes() {
    let mut b = EnvBuilder::fixtures();
    b.rbac = Some((table(), "kcache-token".into()));
    b.config.auth.mode = AuthMode::Delegated;
    // Without the RBAC objects, every read would be reviewed again.
    b.config.auth.allowed_cache_seconds = 0;
    b.config.auth.denied_cache_seconds = 0;
    let env = b.start().await;
    env.metric_reaching(&["kcache_auth_rbac_followed"], 1.0)
        .await;
    env.sim.keep_journal();
    let url = env.url();
    let app = bearer("app-token");
    let read = || {
        let (url, app) = (url.clone(), app.clone());
        async move {
            get_with(
                &url,
                "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0",
                &[("Authorization", app.as_str())],
            )
            .await
            .status
        }
    };
    let reviews = || posted(&env.sim, "/subjectaccessreviews");
    for _ in 0..5 {
        assert_eq!(read().await, 200);
    }
    assert_eq!(reviews(), 1, "one review while RBAC stays as it was");

    // The app's RoleBinding goes: kcache hears of it and asks again, and the upstream refuses.
    let revoked = Rbac::new()
        .proxy("kcache-token", KCACHE)
        .token("app-token", APP, &["system:serviceaccounts"])
        .allow_masters();
    env.sim.set_rbac(Some(revoked));
    common::wait_until("the revocation to reach kcache", || async {
        read().await == 403
    })
    .await;
    let asked = reviews();
    assert!(asked >= 2, "asked again after the change");
    // The refusal is not kept either (denials keep their own short lifetime): granted again,
    // the app reads again.
    env.sim.set_rbac(Some(table()));
    common::wait_until("the grant to reach kcache", || async {
        read().await == 200
    })
    .await;
}

/// A kcache restarted over its persistDir takes back the access verdicts RBAC gave, so the
/// clients coming back cost the upstream no SubjectAccessReview, unless RBAC changed while it
/// was stopped: then none is taken back, and a revoked binding is honoured at once.
#[tokio::test]
async fn a_restarted_kcache_keeps_what_rbac_allowed_unless_rbac_changed() {
    let dir = std::env::temp_dir().join(format!("kcache-verdicts-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut b = EnvBuilder::fixtures();
    b.rbac = Some((table(), "kcache-token".into()));
    b.config.auth.mode = AuthMode::Delegated;
    b.config.cache.persist_dir = Some(dir.clone());
    let config = b.config.clone();
    let common::Env { sim, kcache } = b.start().await;
    sim.keep_journal();
    let app = bearer("app-token");
    let read = |url: String| {
        let app = app.clone();
        async move {
            let h = [("Authorization", app.as_str())];
            let path = "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0";
            get_with(&url, path, &h).await.status
        }
    };
    let reviews = || posted(&sim, "/subjectaccessreviews");
    let restart = || async {
        let upstream = kcache::upstream::Upstream::from_url_with_token(&sim.url(), "kcache-token")
            .expect("upstream");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let k = kcache::server::start(&config, upstream, listener, admin)
            .await
            .expect("kcache starts");
        assert!(k.wait_synced(Duration::from_secs(20)).await);
        k
    };
    assert_eq!(read(kcache.url()).await, 200);
    assert_eq!(reviews(), 1);
    // Written down within its period.
    let file = dir.join("access-verdicts.json");
    common::wait_until("the verdicts written down", || async {
        std::fs::read_to_string(&file).is_ok_and(|t| t.contains("fixtures-a"))
    })
    .await;
    kcache.shutdown().await;

    // Read at once, as a herd comes back the moment kcache is ready: the read waits for the
    // verdicts to be taken back rather than asking the upstream.
    let kcache = restart().await;
    assert_eq!(read(kcache.url()).await, 200);
    assert_eq!(reviews(), 1, "no review after the restart");
    let restored = ["kcache_auth_verdicts_restored_total"];
    let metric = |k: &kcache::server::Running| {
        let url = k.admin_url();
        async move { common::sample(&common::get(&url, "/metrics").await.text(), &restored) }
    };
    assert_eq!(metric(&kcache).await, Some(1.0));
    kcache.shutdown().await;

    // RBAC changes while kcache is stopped: the app's binding goes.
    sim.set_rbac(Some(
        Rbac::new()
            .proxy("kcache-token", KCACHE)
            .token("app-token", APP, &["system:serviceaccounts"])
            .allow_masters(),
    ));
    let kcache = restart().await;
    assert_eq!(
        read(kcache.url()).await,
        403,
        "the revocation is honoured at once"
    );
    assert_eq!(reviews(), 2);
    assert_eq!(metric(&kcache).await, Some(0.0));
    kcache.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// ServiceAccount tokens (what `kubectl create token` and every Pod's projected token are) are
/// checked by kcache itself once the upstream's review of one like it confirmed the issuer,
/// audience and the user's form: the upstream sees one TokenReview, not one per token. Only
/// while kcache's cache holds the account: a deleted account's new tokens are reviewed, and
/// refused.
async fn service_account_tokens_cost_one_review(profile: kcache_sim::Profile) {
    common::set_profile(profile);
    let mut b = EnvBuilder::fixtures();
    b.config
        .resources
        .push(common::resource("", "v1", "serviceaccounts"));
    b.rbac = Some((table(), "kcache-token".into()));
    b.config.auth.mode = AuthMode::Delegated;
    let env = b.start().await;
    let url = env.url();
    let admin = bearer("admin-token");
    let account = "/api/v1/namespaces/team-a/serviceaccounts/app";
    env.sim
        .create(
            "",
            "serviceaccounts",
            serde_json::json!({"metadata": {"name": "app", "namespace": "team-a"}}),
        )
        .unwrap();
    let held = |want: u16| {
        let (url, admin) = (url.clone(), admin.clone());
        async move {
            let h = [("Authorization", admin.as_str())];
            let path = format!("{account}?resourceVersion=0");
            get_with(&url, &path, &h).await.status == want
        }
    };
    common::wait_until("kcache to hold the account", || held(200)).await;
    env.sim.keep_journal();
    let read = |token: String| {
        let url = url.clone();
        async move {
            let auth = bearer(&token);
            let r = get_with(
                &url,
                "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0",
                &[("Authorization", auth.as_str())],
            )
            .await;
            (r.status, r.text())
        }
    };
    let token = || env.sim.token_request("team-a", "app", None, 3600).unwrap();
    // All at once, as a fleet starts: the first token's review confirms what the others
    // need, and they wait for it rather than each being reviewed.
    let reads = (0..8).map(|_| read(token()));
    for (status, text) in futures::future::join_all(reads).await {
        assert_eq!(status, 200, "{text}");
    }
    let reviews = || posted(&env.sim, "/tokenreviews");
    assert_eq!(
        reviews(),
        1,
        "the first token reviewed, the others verified"
    );
    let verified = env
        .metric(&["kcache_authentications_total", "result=\"verified\""])
        .await;
    assert_eq!(verified, Some(7.0));

    // The account goes: once kcache's cache has seen it go, a new token is reviewed, and the
    // upstream refuses it.
    let unused = token();
    env.sim
        .delete("", "serviceaccounts", Some("team-a"), "app")
        .unwrap();
    common::wait_until("kcache to see the account go", || held(404)).await;
    let (status, text) = read(unused).await;
    assert_eq!(status, 401, "{text}");
    assert_eq!(reviews(), 2);
}

#[tokio::test]
async fn service_account_tokens_cost_one_review_v1_34() {
    service_account_tokens_cost_one_review(kcache_sim::Profile::V1_34).await;
}

#[tokio::test]
async fn service_account_tokens_cost_one_review_v1_28() {
    service_account_tokens_cost_one_review(kcache_sim::Profile::V1_28).await;
}

#[tokio::test]
async fn pass_through_carries_the_callers_identity() {
    let env = env(AuthMode::Delegated, table()).await;
    let url = env.url();
    let app = bearer("app-token");
    let cm = |ns: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"via-kcache","namespace":"{ns}"}}}}"#
        )
    };
    let h = [
        ("Authorization", app.as_str()),
        ("Content-Type", "application/json"),
    ];
    // Allowed to the app: created upstream.
    let r = request(
        &url,
        "POST",
        "/api/v1/namespaces/fixtures-a/configmaps",
        &h,
        cm("fixtures-a").as_bytes(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    // Not allowed to the app (kcache itself could not either, but the upstream names the
    // caller): the upstream's 403 names the app, so the app's token went upstream.
    let r = request(
        &url,
        "POST",
        "/api/v1/namespaces/fixtures-b/configmaps",
        &h,
        cm("fixtures-b").as_bytes(),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains(APP), "{}", r.text());
    // Anonymous: passed through without credentials.
    let r = request(
        &url,
        "POST",
        "/api/v1/namespaces/fixtures-a/configmaps",
        &[("Content-Type", "application/json")],
        cm("fixtures-a").as_bytes(),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(r.text().contains("system:anonymous"), "{}", r.text());
    // A read of a cached resource that the cache would not answer itself (protobuf) is
    // still authorized first: refused as the upstream would refuse it.
    let r = get_with(
        &url,
        "/api/v1/namespaces/fixtures-a/secrets",
        &[
            ("Authorization", app.as_str()),
            ("Accept", "application/vnd.kubernetes.protobuf"),
        ],
    )
    .await;
    assert_eq!(r.status, 403);
    // Impersonation requests go upstream, where the caller's right to impersonate is checked.
    let r = get_with(
        &url,
        "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0",
        &[
            ("Authorization", app.as_str()),
            ("Impersonate-User", "admin"),
        ],
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(
        r.text()
            .contains("cannot impersonate resource \\\"users\\\""),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn index_queries_need_cluster_wide_list() {
    let env = env(AuthMode::Delegated, table()).await;
    let url = env.url();
    let admin = bearer("admin-token");
    // Pods are indexed by spec.nodeName (a selectable field) out of the box.
    let path = "/apis/kcache.dev/v1/indexes/core/v1/pods/spec.nodeName?values=x".to_string();
    let r = get_with(&url, &path, &[("Authorization", admin.as_str())]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let app = bearer("app-token");
    let r = get_with(&url, &path, &[("Authorization", app.as_str())]).await;
    assert_eq!(r.status, 403, "{}", r.text());
    let r = get_with(
        &url,
        &format!("{}/counts", path.split('?').next().unwrap()),
        &[("Authorization", app.as_str())],
    )
    .await;
    assert_eq!(r.status, 403);
}

#[tokio::test]
async fn trust_local_lets_local_callers_act_as_kcache_but_honours_tokens() {
    let env = env(AuthMode::TrustLocal, table()).await;
    let url = env.url();
    let r = get_with(&url, "/api/v1/secrets?resourceVersion=0", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let app = bearer("app-token");
    let r = get_with(
        &url,
        "/api/v1/secrets?resourceVersion=0",
        &[("Authorization", app.as_str())],
    )
    .await;
    assert_eq!(r.status, 403);
}

#[tokio::test]
async fn no_authentication_is_refused_on_a_network_address() {
    let mut config = kcache::config::Config::default();
    let err = kcache::config::Config::parse("listen: 0.0.0.0:8080\n").unwrap_err();
    assert!(err.to_string().contains("auth.mode"), "{err}");
    assert!(
        kcache::config::Config::parse("listen: 0.0.0.0:8080\nauth:\n  mode: delegated\n").is_ok()
    );
    config.listen = "0.0.0.0:0".into();
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let upstream = kcache::upstream::Upstream::from_url("http://127.0.0.1:9").unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    match kcache::server::start(&config, upstream, listener, admin).await {
        Err(kcache::server::StartError::Insecure(e)) => {
            assert!(e.to_string().contains("refusing"), "{e}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("started on 0.0.0.0 without authentication"),
    }
    // The real binary says so and exits non-zero before contacting any upstream.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--kubeconfig",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("refusing to listen on 0.0.0.0:0 with auth mode `none`"),
        "{text}"
    );
}

/// exec through kcache: a protocol upgrade passed through with the caller's own token, the
/// stream then carried both ways; refused by the upstream, naming the caller, where its RBAC
/// says no.
#[tokio::test]
async fn exec_upgrades_pass_through_as_the_caller() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rbac = table().allow(
        Subject::User(APP.into()),
        &["create"],
        &[""],
        &["pods/exec"],
        Some("fixtures-a"),
    );
    let env = env(AuthMode::Delegated, rbac).await;
    let addr = env.kcache.addr;
    let exec = |ns: &'static str| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "POST /api/v1/namespaces/{ns}/pods/pod-1a/exec?command=sh&stdin=true HTTP/1.1\r\n\
             Host: kcache\r\nAuthorization: Bearer app-token\r\nConnection: Upgrade\r\n\
             Upgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
                .await
                .expect("response head in time")
                .unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&head));
            head.push(b[0]);
        }
        (s, String::from_utf8_lossy(&head).into_owned())
    };
    let (mut s, head) = exec("fixtures-a").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: spdy/3.1"),
        "{head}"
    );
    s.write_all(b"echo through kcache").await.unwrap();
    let mut got = vec![0u8; 19];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(&got, b"echo through kcache");

    // The pod in fixtures-b does not exist either, but the upstream refuses first, as the
    // app (not kcache, which may not exec anywhere) — its own token went upstream.
    let (mut s, head) = exec("fixtures-b").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let mut body = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut body)).await;
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains(r#"pods \"pod-1a\" is forbidden: User \"system:serviceaccount:team-a:app\" cannot create resource \"pods/exec\""#),
        "{body}"
    );
    assert!(body.contains(APP), "{body}");
}
