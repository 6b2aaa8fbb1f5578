//! `Upstream::metadata_list` against the simulated apiserver of each profile: a consistent
//! metadata-only list names every object the sim holds, with its resourceVersion, at the
//! sim's current revision (moved by writes of other types too), read from the protobuf answer
//! the apiserver sends for built-in types and custom resources alike.

#[path = "sim_common/mod.rs"]
mod common;

use common::{profile_cfg, seeded};
use kcache::metrics::{Metrics, PurposeLabels};
use kcache::upstream::{ItemVersion, MetadataList, Purpose, Upstream, METADATA_LIST_ACCEPT};
use kcache_sim::{Profile, Sim};
use serde_json::{json, Value};

/// What the sim holds of a type, as a metadata list's items: cache keys and resourceVersions
/// in key order, of the objects `keep` keeps.
fn sim_items(
    sim: &Sim,
    group: &str,
    resource: &str,
    keep: impl Fn(&Value) -> bool,
) -> Vec<ItemVersion> {
    let mut items: Vec<ItemVersion> = sim
        .list(group, resource)
        .iter()
        .filter(|o| keep(o))
        .map(|o| {
            let m = &o["metadata"];
            let name = m["name"].as_str().unwrap();
            let key = match m["namespace"].as_str() {
                Some(ns) => format!("{ns}/{name}"),
                None => name.to_string(),
            };
            ItemVersion {
                key: key.into(),
                rv: m["resourceVersion"].as_str().unwrap().parse().unwrap(),
            }
        })
        .collect();
    items.sort_by(|a, b| a.key.cmp(&b.key));
    items
}

/// Whether an object is in `ns` (None: any namespace).
fn within(ns: Option<&str>) -> impl Fn(&Value) -> bool + '_ {
    move |o| ns.is_none_or(|ns| o["metadata"]["namespace"] == ns)
}

/// A metadata list, checked to have come as protobuf (the body the same request gets is a
/// `k8s\0` envelope of that length).
async fn list(up: &Upstream, path: &str) -> MetadataList {
    let l = up
        .metadata_list(path)
        .await
        .unwrap_or_else(|e| panic!("{path}: {}", kcache::error::Report(&e)));
    let body = up
        .get_accepting(path, METADATA_LIST_ACCEPT, Purpose::Setup)
        .await
        .unwrap();
    assert!(body.starts_with(b"k8s\0"), "{path}: not protobuf");
    assert_eq!(l.bytes, body.len(), "{path}");
    l
}

async fn lists_every_object_at_the_current_revision(p: Profile) {
    let sim = seeded(profile_cfg(p)).await;
    let metrics = Metrics::new();
    let up = Upstream::from_url(&sim.url())
        .unwrap()
        .with_metrics(&metrics);
    let cases = [
        ("/api/v1/configmaps", "", "configmaps", None),
        (
            "/api/v1/namespaces/fixtures-a/configmaps",
            "",
            "configmaps",
            Some("fixtures-a"),
        ),
        (
            "/api/v1/namespaces/no-such-ns/configmaps",
            "",
            "configmaps",
            Some("no-such-ns"),
        ),
        ("/api/v1/pods", "", "pods", None),
        (
            "/apis/fixtures.example.com/v1/widgets",
            "fixtures.example.com",
            "widgets",
            None,
        ),
    ];
    for (path, group, resource, ns) in cases {
        let l = list(&up, path).await;
        assert_eq!(
            l.items,
            sim_items(&sim, group, resource, within(ns)),
            "{path}"
        );
        assert_eq!(l.rv, sim.current_rv(), "{path}");
        assert!(l.max_item_rv() <= l.rv, "{path}");
    }
    assert!(!sim_items(&sim, "", "configmaps", within(Some("fixtures-a"))).is_empty());

    // A scoped cache's selectors.
    let web = list(&up, "/api/v1/configmaps?labelSelector=app%3Dweb").await;
    let want = sim_items(&sim, "", "configmaps", |o| {
        o["metadata"]["labels"]["app"] == "web"
    });
    assert!(!want.is_empty());
    assert_eq!(web.items, want);

    // Writes of other types move the revision; the configmaps stay as they were.
    let before = list(&up, "/api/v1/configmaps").await;
    for i in 0..3 {
        sim.create(
            "fixtures.example.com",
            "widgets",
            json!({"apiVersion": "fixtures.example.com/v1", "kind": "Widget",
                "metadata": {"name": format!("moved-{i}"), "namespace": "fixtures-a"},
                "spec": {"color": "red"}}),
        )
        .unwrap();
    }
    let after = list(&up, "/api/v1/configmaps").await;
    assert_eq!(after.rv, sim.current_rv());
    assert!(after.rv > before.rv);
    assert_eq!(after.items, before.items);
    assert!(after.max_item_rv() < after.rv);

    // A write of the type itself: one more item, at the new revision.
    let created = sim
        .create(
            "",
            "configmaps",
            json!({"metadata": {"name": "new", "namespace": "fixtures-a"}}),
        )
        .unwrap();
    let rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let now = list(&up, "/api/v1/configmaps").await;
    assert_eq!(now.items.len(), after.items.len() + 1);
    assert_eq!((now.rv, now.max_item_rv()), (rv, rv));
    assert_eq!(now.items, sim_items(&sim, "", "configmaps", within(None)));

    // Every metadata list was counted as a proof (the checks' own GETs as setup).
    let proofs = metrics
        .upstream_requests
        .get_or_create(&PurposeLabels { purpose: "proof" })
        .get();
    assert_eq!(proofs, 9);
}

per_profile!(lists_every_object_at_the_current_revision);
