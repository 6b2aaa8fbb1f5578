//! Types that come and go. A configured type the upstream does not serve yet (kcache deployed
//! before the operator that installs its CustomResourceDefinition): kcache starts, passes the
//! type's requests through (the upstream's own 404), holds no readiness on it, and caches it
//! once the upstream serves it; it follows the CRD's deletion, re-creation and changes in
//! place.

mod common;
#[path = "sim_common/mod.rs"]
mod raw;

use std::time::Duration;

use bytes::Bytes;
use common::{create_widget_crd, fixture, get, get_with, resource, wait_until, Env, EnvBuilder};
use serde_json::Value;

const WIDGETS: &str = "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets";
const GROUP: &str = "fixtures.example.com";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// The widgets' Table column definitions as the apiserver gives them for the recorded CRD,
/// with the column `Color` named `name` instead.
fn column_definitions(name: &str) -> Bytes {
    let v: Value = serde_json::from_slice(&fixture("table-list-widgets-ns-a.json")).unwrap();
    let text = serde_json::to_string(&v["columnDefinitions"]).unwrap();
    Bytes::from(text.replace("\"Color\"", &format!("{name:?}")))
}

/// The recorded CRD's printer columns, with `Color` named `name`.
fn printer_columns(name: &str) -> Value {
    let v: Value = serde_json::from_slice(&fixture("get-crd.json")).unwrap();
    let text =
        serde_json::to_string(&v["spec"]["versions"][0]["additionalPrinterColumns"]).unwrap();
    serde_json::from_str(&text.replace("\"Color\"", &format!("{name:?}"))).unwrap()
}

/// Create the widgets CRD with its `Color` column named `column`, as the upstream serves it.
fn create_widgets(env: &Env, column: &str) {
    env.sim
        .serve_table_columns(GROUP, "widgets", column_definitions(column));
    create_widget_crd(&env.sim, Some(printer_columns(column)));
    env.sim.register(common::widget_type());
}

/// The widgets' cache once it has synced.
async fn synced_widgets(env: &Env) -> std::sync::Arc<kcache::cache::ResourceCache> {
    let k = &env.kcache;
    wait_until("widgets cached and synced", || async move {
        k.cache(GROUP, "v1", "widgets")
            .is_some_and(|c| c.is_synced())
    })
    .await;
    k.cache(GROUP, "v1", "widgets").unwrap()
}

/// The column names of a Table of the widgets read through kcache, and whether the cache
/// answered it.
async fn table_columns(env: &Env) -> (Vec<String>, bool) {
    let path = format!("{WIDGETS}?resourceVersion=0");
    let r = get_with(&env.url(), &path, &[("Accept", TABLE)]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let names = v["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    (names, r.header(kcache::api::CACHE_AGE_HEADER).is_some())
}

/// The widgets' condition on the admin `/status`.
async fn condition(env: &Env) -> String {
    let r = get(&env.kcache.admin_url(), "/status?format=json").await;
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    let widgets = v["caches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["resource"] == "widgets")
        .unwrap_or_else(|| panic!("no widgets in /status: {v}"));
    widgets["condition"].as_str().unwrap().to_string()
}

/// The widgets' `kcache_cache_served` sample, as scraped.
async fn served_metric(env: &Env) -> Option<f64> {
    env.metric(&["kcache_cache_served{", "resource=\"widgets\""])
        .await
}

/// kcache caching ConfigMaps and the widgets, whose CRD does not exist yet.
async fn env_with_widgets_configured() -> Env {
    EnvBuilder::default()
        .resources(vec![
            resource("", "v1", "configmaps"),
            resource(GROUP, "v1", "widgets"),
        ])
        .start()
        .await
}

/// The name of the object a watch event carries.
fn object_name(event: &Value) -> String {
    event["object"]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

fn upstream_requests(env: &Env, purpose: &'static str) -> u64 {
    env.kcache
        .metrics()
        .upstream_requests
        .get_or_create(&kcache::metrics::PurposeLabels { purpose })
        .get()
}

fn widget(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "fixtures.example.com/v1",
        "kind": "Widget",
        "metadata": { "name": name, "namespace": "fixtures-a" },
        "spec": { "size": 1 }
    })
}

async fn a_type_served_only_later_is_passed_through_then_cached(_: kcache_sim::Profile) {
    // The widgets CRD does not exist when kcache starts.
    let env = env_with_widgets_configured().await;
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
    assert!(env.kcache.cache(GROUP, "v1", "widgets").is_none());
    assert_eq!(condition(&env).await, "not_served");
    assert_eq!(served_metric(&env).await, Some(0.0));

    // Its reads are the upstream's: the same 404, not from a cache.
    let through = get(&base, WIDGETS).await;
    let direct = get(&env.sim.url(), WIDGETS).await;
    assert_eq!(through.status, 404, "{}", through.text());
    assert_eq!(through.status, direct.status);
    assert_eq!(through.body, direct.body);
    assert!(through.header(kcache::api::CACHE_AGE_HEADER).is_none());

    // The CRD is created and a widget with it: the type is cached within a few seconds.
    create_widgets(&env, "Color");
    env.sim.create(GROUP, "widgets", widget("late")).unwrap();
    let cache = synced_widgets(&env).await;
    assert_eq!(cache.len(), 1);
    let list = get(&base, &format!("{WIDGETS}?resourceVersion=0")).await;
    assert_eq!(list.status, 200, "{}", list.text());
    assert!(list.header(kcache::api::CACHE_AGE_HEADER).is_some());
    let body: Value = serde_json::from_slice(&list.body).unwrap();
    assert_eq!(body["items"][0]["metadata"]["name"], "late");
    let ready = get(&env.kcache.admin_url(), "/readyz?verbose").await;
    assert!(!ready.text().contains("not served"), "{}", ready.text());
    assert_eq!(condition(&env).await, "synced");
    assert_eq!(served_metric(&env).await, Some(1.0));
    let (columns, cached) = table_columns(&env).await;
    assert!(
        cached && columns.contains(&"Color".to_string()),
        "{columns:?}"
    );

    // A watch from the cache sees the next widget.
    let mut w = common::Watch::open(&base, &format!("{WIDGETS}?watch=1&resourceVersion=0")).await;
    env.sim.create(GROUP, "widgets", widget("later")).unwrap();
    let mut names = Vec::new();
    while names.len() < 2 {
        let e = w
            .next_json(Duration::from_secs(10))
            .await
            .expect("watch event");
        names.push(object_name(&e));
    }
    names.sort();
    assert_eq!(names, ["late", "later"]);
    drop(cache);

    // The CRD is deleted: as from a real v1.34.9, the watch gets a DELETED event for each
    // object, then ends as the apiserver ends its own; the cache is dropped and reads are the
    // upstream's 404 again.
    assert!(env.sim.unregister(GROUP, "widgets"));
    let mut deleted = Vec::new();
    while let Some(e) = w.next_json(Duration::from_secs(20)).await {
        assert_eq!(e["type"], "DELETED", "{e}");
        deleted.push(object_name(&e));
    }
    deleted.sort();
    assert_eq!(deleted, ["late", "later"]);
    assert!(w.ended_cleanly, "the watch ends with the type, cleanly");
    {
        let k = &env.kcache;
        wait_until("widgets no longer cached", || async move {
            k.cache(GROUP, "v1", "widgets").is_none()
        })
        .await;
    }
    let through = get(&base, WIDGETS).await;
    let direct = get(&env.sim.url(), WIDGETS).await;
    assert_eq!(through.status, 404, "{}", through.text());
    assert_eq!(through.body, direct.body);
    let ready = get(&env.kcache.admin_url(), "/readyz?verbose").await;
    assert_eq!(ready.status, 200);
    assert!(
        ready.text().contains("widgets not served"),
        "{}",
        ready.text()
    );
    assert_eq!(condition(&env).await, "not_served");
    assert_eq!(served_metric(&env).await, Some(0.0));

    // While it stays deleted the reflector does not retry it; discovery is read every few
    // seconds at most (1 s, 2 s, 4 s ...).
    let (lists, watches, setup) = (
        upstream_requests(&env, "reflector_list"),
        upstream_requests(&env, "reflector_watch"),
        upstream_requests(&env, "setup"),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(upstream_requests(&env, "reflector_list"), lists);
    assert_eq!(upstream_requests(&env, "reflector_watch"), watches);
    let discovery = upstream_requests(&env, "setup") - setup;
    assert!(discovery <= 4, "{discovery} discovery reads in 3 s");

    // Re-created with the column renamed: cached again, its Table with the new column.
    create_widgets(&env, "Owner");
    env.sim.create(GROUP, "widgets", widget("again")).unwrap();
    let cache = synced_widgets(&env).await;
    assert_eq!(cache.len(), 1);
    let (columns, cached) = table_columns(&env).await;
    assert!(cached, "the Table comes from the cache");
    assert!(
        columns.contains(&"Owner".to_string()) && !columns.contains(&"Color".to_string()),
        "{columns:?}"
    );
}

per_profile!(a_type_served_only_later_is_passed_through_then_cached);

/// A CRD changed in place is followed: renamed printer columns reach the Table, and new
/// selectable fields are answered from the cache.
async fn a_crd_changed_in_place_is_followed(_: kcache_sim::Profile) {
    let env = env_with_widgets_configured().await;
    create_widgets(&env, "Color");
    synced_widgets(&env).await;
    let mut blue = widget("blue");
    blue["spec"]["color"] = "blue".into();
    env.sim.create(GROUP, "widgets", blue).unwrap();
    let (columns, cached) = table_columns(&env).await;
    assert!(
        cached && columns.contains(&"Color".to_string()),
        "{columns:?}"
    );

    // A printer column renamed in the CRD, in place.
    const CRDS: (&str, &str) = ("apiextensions.k8s.io", "customresourcedefinitions");
    let name = format!("widgets.{GROUP}");
    let mut crd = env.sim.get(CRDS.0, CRDS.1, None, &name).unwrap();
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = printer_columns("Owner");
    env.sim.update(CRDS.0, CRDS.1, crd).unwrap();
    env.sim
        .serve_table_columns(GROUP, "widgets", column_definitions("Owner"));
    let e = &env;
    wait_until("the Table has the renamed column", || async move {
        let (columns, cached) = table_columns(e).await;
        cached && columns.contains(&"Owner".to_string())
    })
    .await;

    // A selectable field added to the CRD: answered from the cache once kcache has it.
    env.sim
        .register(common::widget_type().with_selectable_fields(&["spec.color"]));
    let path = format!("{WIDGETS}?fieldSelector=spec.color%3Dblue&resourceVersion=0");
    let path = &path;
    wait_until(
        "the new selectable field answered from the cache",
        || async move {
            let r = get(&e.url(), path).await;
            r.status == 200 && r.header(kcache::api::CACHE_AGE_HEADER).is_some()
        },
    )
    .await;
    let r = get(&env.url(), path).await;
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["items"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["items"][0]["metadata"]["name"], "blue");
}

per_profile!(a_crd_changed_in_place_is_followed);
