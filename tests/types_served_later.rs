//! A configured type the upstream does not serve yet (kcache deployed before the operator
//! that installs its CustomResourceDefinition): kcache starts, passes the type's requests
//! through (the upstream's own 404), holds no readiness on it, and caches it once the upstream
//! serves it.

mod common;

use std::time::Duration;

use common::{create_widget_crd, get, resource, wait_until, EnvBuilder};

const WIDGETS: &str = "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets";

fn widget(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "fixtures.example.com/v1",
        "kind": "Widget",
        "metadata": { "name": name, "namespace": "fixtures-a" },
        "spec": { "size": 1 }
    })
}

#[tokio::test]
async fn a_type_served_only_later_is_passed_through_then_cached() {
    // The widgets CRD does not exist when kcache starts.
    let env = EnvBuilder::default()
        .resources(vec![
            resource("", "v1", "configmaps"),
            resource("fixtures.example.com", "v1", "widgets"),
        ])
        .start()
        .await;
    let base = env.url();

    // Started and ready, saying why the type is not cached.
    let ready = get(&env.kcache.admin_url(), "/readyz?verbose").await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert!(
        ready
            .text()
            .contains("[+]cache fixtures.example.com/v1/widgets not served by the upstream"),
        "{}",
        ready.text()
    );
    assert!(env
        .kcache
        .cache("fixtures.example.com", "v1", "widgets")
        .is_none());

    // Its reads are the upstream's: the same 404, not from a cache.
    let through = get(&base, WIDGETS).await;
    let direct = get(&env.sim.url(), WIDGETS).await;
    assert_eq!(through.status, 404, "{}", through.text());
    assert_eq!(through.status, direct.status);
    assert_eq!(through.body, direct.body);
    assert!(through.header(kcache::api::CACHE_AGE_HEADER).is_none());

    // The CRD is created and a widget with it: the type is cached within a few seconds.
    create_widget_crd(&env.sim, None);
    env.sim.register(common::widget_type());
    env.sim
        .create("fixtures.example.com", "widgets", widget("late"))
        .unwrap();
    let cache = {
        let k = &env.kcache;
        wait_until("widgets cached and synced", || async move {
            k.cache("fixtures.example.com", "v1", "widgets")
                .is_some_and(|c| c.is_synced())
        })
        .await;
        k.cache("fixtures.example.com", "v1", "widgets").unwrap()
    };
    assert_eq!(cache.len(), 1);
    let list = get(&base, &format!("{WIDGETS}?resourceVersion=0")).await;
    assert_eq!(list.status, 200, "{}", list.text());
    assert!(list.header(kcache::api::CACHE_AGE_HEADER).is_some());
    let body: serde_json::Value = serde_json::from_slice(&list.body).unwrap();
    assert_eq!(body["items"][0]["metadata"]["name"], "late");
    let ready = get(&env.kcache.admin_url(), "/readyz?verbose").await;
    assert!(!ready.text().contains("not served"), "{}", ready.text());

    // A watch from the cache sees the next widget.
    let mut w = common::Watch::open(&base, &format!("{WIDGETS}?watch=1&resourceVersion=0")).await;
    env.sim
        .create("fixtures.example.com", "widgets", widget("later"))
        .unwrap();
    let mut names = Vec::new();
    while names.len() < 2 {
        let e = w
            .next_json(Duration::from_secs(10))
            .await
            .expect("watch event");
        names.push(
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    names.sort();
    assert_eq!(names, ["late", "later"]);
}
