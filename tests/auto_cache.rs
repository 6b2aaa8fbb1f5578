//! On-demand caching (the config's `auto` section): a type nobody configured is cached once
//! clients list or watch it often enough, answers from the cache once synced, and is dropped,
//! its memory released, once idle; a denied type, and one kcache's own identity may not list,
//! stay passed through with the reason on `/status` and in a metric. Readiness never waits
//! for a type cached on demand.

mod common;
#[path = "sim_common/mod.rs"]
mod raw;

use common::{get, get_with, resource, wait_until, Env, EnvBuilder};
use kcache::api::CACHE_AGE_HEADER;
use kcache_sim::rbac::{Rbac, Subject};
use serde_json::Value;

const SERVICE_ACCOUNTS: &str = "/api/v1/serviceaccounts";

/// kcache caching ConfigMaps only, with on-demand caching on after `min_requests` lists and
/// dropping types after `idle_seconds`.
fn builder(min_requests: u32, idle_seconds: u64) -> EnvBuilder {
    let mut b = EnvBuilder::default().resources(vec![resource("", "v1", "configmaps")]);
    b.config.auto.enabled = true;
    b.config.auto.min_requests = min_requests;
    b.config.auto.idle_seconds = idle_seconds;
    b
}

fn service_account(namespace: &str, name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": name, "namespace": namespace },
    })
}

fn seed_service_accounts(env: &Env) {
    for (ns, name) in [("team-a", "builder"), ("team-b", "deployer")] {
        env.sim
            .create("", "serviceaccounts", service_account(ns, name))
            .unwrap();
    }
}

/// The admin `/status` as JSON.
async fn status(env: &Env) -> Value {
    let r = get(&env.admin_url(), "/status?format=json").await;
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).unwrap()
}

/// Wait until the ServiceAccounts are cached and synced (without reading them through kcache,
/// which would count as use).
async fn wait_cached(env: &Env) {
    let k = &env.kcache;
    wait_until(
        "serviceaccounts cached on demand and synced",
        || async move {
            k.app
                .registry()
                .all()
                .any(|c| c.info.resource == "serviceaccounts" && c.is_synced())
        },
    )
    .await;
}

async fn a_type_read_often_is_cached_and_answered_from_the_cache(_: kcache_sim::Profile) {
    let env = builder(3, 3600).start().await;
    seed_service_accounts(&env);
    let base = env.url();

    // Below the threshold: passed through, nothing cached.
    for _ in 0..2 {
        let r = get(&base, SERVICE_ACCOUNTS).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.header(CACHE_AGE_HEADER).is_none());
    }
    assert!(env.kcache.cache("", "v1", "serviceaccounts").is_none());

    // The third list (a namespaced one counts too) takes it up; reads pass through until it
    // has synced, and readiness does not wait for it.
    let r = get(&base, "/api/v1/namespaces/team-a/serviceaccounts").await;
    assert_eq!(r.status, 200, "{}", r.text());
    wait_cached(&env).await;
    let ready = get(&env.admin_url(), "/readyz?verbose").await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert!(
        ready
            .text()
            .contains("[+]cache v1/serviceaccounts ok (cached on demand)"),
        "{}",
        ready.text()
    );

    // Answered from the cache now, as the upstream answers.
    let path = format!("{SERVICE_ACCOUNTS}?resourceVersion=0");
    let cached = get(&base, &path).await;
    assert_eq!(cached.status, 200, "{}", cached.text());
    assert!(cached.header(CACHE_AGE_HEADER).is_some(), "from the cache");
    let names = |v: &Value| -> Vec<String> {
        let mut n: Vec<String> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    let direct = get(&env.sim.url(), &path).await;
    assert_eq!(names(&cached.json()), names(&direct.json()));
    assert_eq!(cached.json()["kind"], "ServiceAccountList");

    // Shown as cached on demand.
    let s = status(&env).await;
    let entry = s["caches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["resource"] == "serviceaccounts")
        .unwrap_or_else(|| panic!("{s}"));
    assert_eq!(entry["origin"], "auto");
    assert_eq!(entry["condition"], "synced");
    assert_eq!(s["auto"]["types"], 1);
    assert_eq!(env.metric(&["kcache_auto_types "]).await, Some(1.0));
    assert_eq!(env.metric(&["kcache_auto_cached_total "]).await, Some(1.0));
}

per_profile!(a_type_read_often_is_cached_and_answered_from_the_cache);

async fn an_idle_type_is_dropped_and_its_memory_released(_: kcache_sim::Profile) {
    let env = builder(2, 1).start().await;
    seed_service_accounts(&env);
    let base = env.url();
    for _ in 0..2 {
        assert_eq!(get(&base, SERVICE_ACCOUNTS).await.status, 200);
    }
    wait_cached(&env).await;
    let weak = std::sync::Arc::downgrade(
        &env.kcache
            .app
            .registry()
            .all()
            .find(|c| c.info.resource == "serviceaccounts")
            .unwrap(),
    );

    // Nothing reads it: dropped after a second or so, what it held counted as released.
    let k = &env.kcache;
    wait_until("the idle type dropped", || async move {
        !k.app
            .registry()
            .all()
            .any(|c| c.info.resource == "serviceaccounts")
    })
    .await;
    let released = env
        .metric(&["kcache_auto_released_bytes_total "])
        .await
        .unwrap();
    assert!(released > 0.0, "released {released} bytes");
    assert_eq!(
        env.metric(&["kcache_auto_dropped_total{", "reason=\"idle\""])
            .await,
        Some(1.0)
    );
    assert_eq!(env.metric(&["kcache_auto_types "]).await, Some(0.0));
    // Nothing holds the cache any more: its memory is freed.
    let weak = &weak;
    wait_until("the dropped cache freed", || async move {
        weak.upgrade().is_none()
    })
    .await;
    // Its cache gauges end with it.
    let metrics = env.metrics().await;
    assert!(
        !metrics.contains("kcache_cached_objects{resource=\"serviceaccounts\"}"),
        "{metrics}"
    );

    // Its reads are the upstream's again.
    let r = get(&base, &format!("{SERVICE_ACCOUNTS}?resourceVersion=0")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header(CACHE_AGE_HEADER).is_none());
    let s = status(&env).await;
    assert!(
        !s["caches"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["resource"] == "serviceaccounts"),
        "{s}"
    );
}

per_profile!(an_idle_type_is_dropped_and_its_memory_released);

const KCACHE: &str = "system:serviceaccount:kcache:kcache";

/// kcache's identity may read everything but ServiceAccounts; `admin-token` may do anything.
fn rbac_without_service_accounts() -> Rbac {
    let kcache = || Subject::User(KCACHE.into());
    Rbac::new()
        .token("kcache-token", KCACHE, &[])
        .allow(
            kcache(),
            &["get", "list", "watch"],
            &["*"],
            &["configmaps", "secrets", "namespaces"],
            None,
        )
        .allow(
            kcache(),
            &["create"],
            &["authentication.k8s.io", "authorization.k8s.io"],
            &["tokenreviews", "subjectaccessreviews"],
            None,
        )
        .token("admin-token", "admin", &["system:masters"])
        .allow_masters()
}

async fn denied_and_forbidden_types_stay_passed_through_with_the_reason(_: kcache_sim::Profile) {
    let mut b = builder(2, 3600);
    b.rbac = Some((rbac_without_service_accounts(), "kcache-token".into()));
    b.config.auth.mode = kcache::auth::AuthMode::Delegated;
    let env = b.start().await;
    seed_service_accounts(&env);
    let base = env.url();
    let admin = [("Authorization", "Bearer admin-token")];

    // Secrets are denied by default; ServiceAccounts kcache may not list. The caller may read
    // both, and does, through kcache, from the upstream.
    for _ in 0..3 {
        for path in ["/api/v1/secrets", SERVICE_ACCOUNTS] {
            let r = get_with(&base, path, &admin).await;
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            assert!(r.header(CACHE_AGE_HEADER).is_none());
        }
    }
    let e = &env;
    wait_until("both refusals on /status", || async move {
        status(e).await["auto"]["refused"]
            .as_array()
            .is_some_and(|r| r.len() == 2)
    })
    .await;
    let refused = status(&env).await["auto"]["refused"].clone();
    assert_eq!(refused[0]["name"], "v1/secrets");
    assert_eq!(refused[0]["reason"], "denied");
    assert_eq!(refused[1]["name"], "v1/serviceaccounts");
    assert_eq!(refused[1]["reason"], "forbidden");
    for (name, reason) in [
        ("v1/secrets", "denied"),
        ("v1/serviceaccounts", "forbidden"),
    ] {
        let resource = format!("resource=\"{name}\"");
        let reason = format!("reason=\"{reason}\"");
        assert_eq!(
            env.metric(&["kcache_auto_refused{", &resource, &reason])
                .await,
            Some(1.0),
            "{name}"
        );
    }
    assert!(env.kcache.cache("", "v1", "secrets").is_none());
    assert!(env.kcache.cache("", "v1", "serviceaccounts").is_none());
    let text = get(&env.admin_url(), "/status?format=text").await.text();
    assert!(
        text.contains("not cached: v1/secrets (denied), v1/serviceaccounts (forbidden)"),
        "{text}"
    );
}

per_profile!(denied_and_forbidden_types_stay_passed_through_with_the_reason);

const WIDGETS: &str = "/apis/fixtures.example.com/v1/widgets";

/// A custom type cached on demand whose CRD is then deleted: dropped, its watches ended, its
/// reads the upstream's 404; taken up again once clients read it after it is back.
async fn a_type_the_upstream_stops_serving_is_dropped(_: kcache_sim::Profile) {
    let env = builder(2, 3600).start().await;
    env.sim.register(common::widget_type());
    env.sim
        .create(
            "fixtures.example.com",
            "widgets",
            serde_json::json!({
                "apiVersion": "fixtures.example.com/v1", "kind": "Widget",
                "metadata": {"name": "w1", "namespace": "team-a"}, "spec": {"size": 1}
            }),
        )
        .unwrap();
    let base = env.url();
    for _ in 0..2 {
        assert_eq!(get(&base, WIDGETS).await.status, 200);
    }
    let k = &env.kcache;
    wait_until("widgets cached on demand and synced", || async move {
        k.cache("fixtures.example.com", "v1", "widgets")
            .is_some_and(|c| c.is_synced())
    })
    .await;
    let mut watch =
        common::Watch::open(&base, &format!("{WIDGETS}?watch=1&resourceVersion=0")).await;
    let added = watch.next_json(common::EVENTUALLY).await.expect("ADDED");
    assert_eq!(added["type"], "ADDED");

    env.sim.unregister("fixtures.example.com", "widgets");
    let deleted = watch.next_json(common::EVENTUALLY).await.expect("DELETED");
    assert_eq!(deleted["type"], "DELETED");
    assert!(watch.next_json(common::EVENTUALLY).await.is_none());
    assert!(watch.ended_cleanly, "the watch ends with the type, cleanly");
    wait_until("widgets dropped", || async move {
        k.cache("fixtures.example.com", "v1", "widgets").is_none()
    })
    .await;
    env.metric_reaching(
        &["kcache_auto_dropped_total{", "reason=\"not_served\""],
        1.0,
    )
    .await;
    let r = get(&base, WIDGETS).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.body, get(&env.sim.url(), WIDGETS).await.body);
}

per_profile!(a_type_the_upstream_stops_serving_is_dropped);

/// Past `auto.maxTypes`, a type stays passed through (reason `max_types`) until another is
/// dropped.
async fn types_beyond_max_types_stay_passed_through(_: kcache_sim::Profile) {
    let mut b = builder(1, 3600);
    b.config.auto.max_types = 1;
    let env = b.start().await;
    seed_service_accounts(&env);
    let base = env.url();
    assert_eq!(get(&base, SERVICE_ACCOUNTS).await.status, 200);
    wait_cached(&env).await;
    let r = get(&base, "/api/v1/services").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let e = &env;
    wait_until("services refused for want of room", || async move {
        status(e).await["auto"]["refused"][0]["reason"] == "max_types"
    })
    .await;
    assert!(env.kcache.cache("", "v1", "services").is_none());
    assert_eq!(
        status(&env).await["auto"]["refused"][0]["name"],
        "v1/services"
    );
}

per_profile!(types_beyond_max_types_stay_passed_through);

/// kcache's identity may list ServiceAccounts but not watch them: discovery's one-object list
/// passes, the type is taken up, its reflector's watch gets 403, and the type is dropped and
/// refused as `forbidden` instead of being retried for ever.
async fn a_type_kcache_may_list_but_not_watch_is_refused(_: kcache_sim::Profile) {
    let kcache = || Subject::User(KCACHE.into());
    let rbac = rbac_without_service_accounts().allow(
        kcache(),
        &["get", "list"],
        &[""],
        &["serviceaccounts"],
        None,
    );
    let mut b = builder(2, 3600);
    b.rbac = Some((rbac, "kcache-token".into()));
    b.config.auth.mode = kcache::auth::AuthMode::Delegated;
    let env = b.start().await;
    seed_service_accounts(&env);
    let base = env.url();
    let admin = [("Authorization", "Bearer admin-token")];
    for _ in 0..2 {
        let r = get_with(&base, SERVICE_ACCOUNTS, &admin).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    env.metric_reaching(&["kcache_auto_dropped_total{", "reason=\"forbidden\""], 1.0)
        .await;
    let refused = status(&env).await["auto"]["refused"].clone();
    assert_eq!(refused[0]["name"], "v1/serviceaccounts", "{refused}");
    assert_eq!(refused[0]["reason"], "forbidden");
    assert!(env.kcache.cache("", "v1", "serviceaccounts").is_none());
    // The caller still reads it, from the upstream.
    let r = get_with(&base, SERVICE_ACCOUNTS, &admin).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header(CACHE_AGE_HEADER).is_none());
}

per_profile!(a_type_kcache_may_list_but_not_watch_is_refused);
