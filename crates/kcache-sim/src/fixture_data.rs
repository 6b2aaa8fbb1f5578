//! The data set of the kube-apiserver v1.28 recordings, ready to create in a sim: namespaces
//! `fixtures-a/b/c`, their ConfigMaps, Secrets, Pods, the Service `web` and the Widgets.
//! Objects come from the recorded bodies (`seed_data.json`, server-assigned fields removed);
//! the 30 large `fixtures-c` ConfigMaps are generated (deterministic pseudo-random blobs of
//! the recorded size) instead of being embedded.

use serde_json::{json, Value};

use super::seed::SeedObject;

const DATA: &str = include_str!("seed_data.json");

/// The `group/resource` pairs the data set uses, as static strings.
fn intern(group: &str, resource: &str) -> Option<(&'static str, &'static str)> {
    KNOWN
        .iter()
        .find(|(g, r, _, _)| *g == group && *r == resource)
        .map(|(g, r, _, _)| (*g, *r))
}

/// group, resource, apiVersion, kind of what the data set holds.
const KNOWN: &[(&str, &str, &str, &str)] = &[
    ("", "namespaces", "v1", "Namespace"),
    ("", "configmaps", "v1", "ConfigMap"),
    ("", "secrets", "v1", "Secret"),
    ("", "pods", "v1", "Pod"),
    ("", "services", "v1", "Service"),
    (
        "fixtures.example.com",
        "widgets",
        "fixtures.example.com/v1",
        "Widget",
    ),
];

/// The object with `apiVersion` and `kind` first, as a client sends it.
fn typed(resource: &str, object: Value) -> Value {
    let Some((_, _, api_version, kind)) = KNOWN.iter().find(|(_, r, _, _)| *r == resource) else {
        return object;
    };
    let mut out = serde_json::Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!(kind));
    if let Value::Object(m) = object {
        for (k, v) in m {
            if k != "apiVersion" && k != "kind" {
                out.insert(k, v);
            }
        }
    }
    Value::Object(out)
}

/// The recorded data set in creation order (namespaces first). Widgets need the widgets CRD
/// registered first (`fixtures.example.com/v1`, kind `Widget`).
pub fn fixture_dataset() -> Vec<SeedObject> {
    let entries: Vec<Value> = serde_json::from_str(DATA).unwrap_or_default();
    let mut out: Vec<SeedObject> = entries
        .into_iter()
        .filter_map(|e| {
            let (group, resource) = intern(e["group"].as_str()?, e["resource"].as_str()?)?;
            Some(SeedObject {
                group,
                resource,
                object: typed(resource, e["object"].clone()),
            })
        })
        .collect();
    // Namespaces first, then the rest in recorded order; the big ConfigMaps go after the others.
    let at = out
        .iter()
        .position(|o| o.resource != "namespaces" && o.resource != "configmaps")
        .unwrap_or(out.len());
    let big: Vec<SeedObject> = (1..=30).map(big_configmap).collect();
    out.splice(at..at, big);
    out
}

/// `fixtures-c/big-NN`: one ~4.8 KB base64 blob each (over 128 KiB in all, for gzip tests).
fn big_configmap(i: u32) -> SeedObject {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    // A small LCG: deterministic content without a dependency.
    let mut state = u64::from(i)
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    let blob: String = (0..4800)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            B64[((state >> 33) % 64) as usize] as char
        })
        .collect();
    SeedObject {
        group: "",
        resource: "configmaps",
        object: typed(
            "configmaps",
            json!({"metadata": {"name": format!("big-{i:02}"), "namespace": "fixtures-c"}, "data": {"blob": blob}}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_set_is_complete() {
        let set = fixture_dataset();
        let count = |r: &str| set.iter().filter(|o| o.resource == r).count();
        assert_eq!(count("namespaces"), 3);
        assert_eq!(count("configmaps"), 25 + 3 + 30);
        assert_eq!(count("secrets"), 3);
        assert_eq!(count("pods"), 4);
        assert_eq!(count("services"), 1);
        assert_eq!(count("widgets"), 4);
        assert_eq!(set[0].resource, "namespaces");
    }
}
