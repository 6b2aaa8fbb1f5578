//! The selectable field values of one object, extracted from its JSON the way the apiserver
//! builds each kind's field set (Go zero values for absent booleans and counters, the pod IP
//! from `status.podIP` or `status.podIPs`, the shared event field set).
//!
//! Separate because it reads objects, not selectors: it runs once per cached object (see
//! `crate::object`) and its output is what field selectors are matched against.

/// The selectable field values of one object (its JSON as the apiserver serves it), rendered
/// like the apiserver's field set: `metadata.name`, `metadata.namespace` when the object has
/// one, and the per-kind fields. Missing strings are `""`; booleans and counters render Go's
/// zero value (`"false"`, `"0"`) when absent, as the typed objects do.
///
/// Names are the field-set names (`involvedObject.kind`, `spec.nodeName`), which is what
/// [`convert_fields`](super::convert_fields) output uses; the client aliases (`regarding.kind`, `spec.host`, ...) are
/// included as well so that an unconverted selector matches identically.
pub fn extract_fields(
    group: &str,
    resource: &str,
    obj: &serde_json::Value,
) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> =
        vec![("metadata.name", text(obj, &["metadata", "name"]))];
    if let Some(ns) = obj.pointer("/metadata/namespace").and_then(|v| v.as_str()) {
        if !ns.is_empty() {
            out.push(("metadata.namespace", ns.to_string()));
        }
    }
    match (group, resource) {
        ("", "pods") => {
            let node_name = text(obj, &["spec", "nodeName"]);
            out.push(("spec.host", node_name.clone()));
            out.push(("spec.nodeName", node_name));
            out.push(("spec.restartPolicy", text(obj, &["spec", "restartPolicy"])));
            out.push(("spec.schedulerName", text(obj, &["spec", "schedulerName"])));
            // The deprecated serviceAccount field stands in when serviceAccountName is unset.
            let mut sa = text(obj, &["spec", "serviceAccountName"]);
            if sa.is_empty() {
                sa = text(obj, &["spec", "serviceAccount"]);
            }
            out.push(("spec.serviceAccountName", sa));
            out.push(("spec.hostNetwork", boolean(obj, &["spec", "hostNetwork"])));
            out.push(("status.phase", text(obj, &["status", "phase"])));
            out.push(("status.podIP", pod_ip(obj)));
            out.push(("status.podIPs", String::new()));
            out.push((
                "status.nominatedNodeName",
                text(obj, &["status", "nominatedNodeName"]),
            ));
        }
        ("", "nodes") => {
            out.push((
                "spec.unschedulable",
                boolean(obj, &["spec", "unschedulable"]),
            ));
        }
        ("", "namespaces") => out.push(("status.phase", text(obj, &["status", "phase"]))),
        ("", "secrets") => out.push(("type", text(obj, &["type"]))),
        ("", "replicationcontrollers") => {
            out.push(("status.replicas", integer(obj, &["status", "replicas"])));
        }
        ("", "events") => {
            let involved = |f| text(obj, &["involvedObject", f]);
            push_event_fields(
                &mut out,
                [
                    involved("kind"),
                    involved("namespace"),
                    involved("name"),
                    involved("uid"),
                    involved("apiVersion"),
                    involved("resourceVersion"),
                    involved("fieldPath"),
                ],
                text(obj, &["reason"]),
                text(obj, &["reportingComponent"]),
                text(obj, &["source", "component"]),
                text(obj, &["type"]),
                false,
            );
        }
        ("events.k8s.io", "events") => {
            let regarding = |f| text(obj, &["regarding", f]);
            push_event_fields(
                &mut out,
                [
                    regarding("kind"),
                    regarding("namespace"),
                    regarding("name"),
                    regarding("uid"),
                    regarding("apiVersion"),
                    regarding("resourceVersion"),
                    regarding("fieldPath"),
                ],
                text(obj, &["reason"]),
                text(obj, &["reportingController"]),
                text(obj, &["deprecatedSource", "component"]),
                text(obj, &["type"]),
                true,
            );
        }
        ("batch", "jobs") => {
            out.push(("status.successful", integer(obj, &["status", "succeeded"])));
        }
        ("certificates.k8s.io", "certificatesigningrequests" | "clustertrustbundles") => {
            out.push(("spec.signerName", text(obj, &["spec", "signerName"])));
        }
        _ => {}
    }
    out
}

/// Event field set, shared by core/v1 and events.k8s.io/v1 (the latter is converted to the
/// former inside the apiserver, so both select on `involvedObject.*` names).
fn push_event_fields(
    out: &mut Vec<(&'static str, String)>,
    involved: [String; 7],
    reason: String,
    reporting: String,
    source_component: String,
    kind: String,
    with_events_v1_aliases: bool,
) {
    const INTERNAL: [&str; 7] = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
    ];
    const REGARDING: [&str; 7] = [
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
    ];
    for ((internal, regarding), value) in INTERNAL.iter().zip(REGARDING).zip(involved) {
        if with_events_v1_aliases {
            out.push((regarding, value.clone()));
        }
        out.push((internal, value));
    }
    // `source` falls back to the reporting controller when the legacy source is unset.
    let source = if source_component.is_empty() {
        reporting.clone()
    } else {
        source_component
    };
    if with_events_v1_aliases {
        out.push(("reportingController", reporting.clone()));
    }
    out.push(("reason", reason));
    out.push(("reportingComponent", reporting));
    out.push(("source", source));
    out.push(("type", kind));
}

/// The apiserver derives the pod IP from its internal list, which v1 conversion fills from
/// `status.podIP` when set (it wins over a differing `podIPs[0]`), else from `status.podIPs`.
fn pod_ip(obj: &serde_json::Value) -> String {
    let ip = text(obj, &["status", "podIP"]);
    if !ip.is_empty() {
        return ip;
    }
    obj.pointer("/status/podIPs/0/ip")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

fn lookup<'a>(obj: &'a serde_json::Value, path: &[&str]) -> Option<&'a serde_json::Value> {
    path.iter().try_fold(obj, |v, key| v.get(key))
}

fn text(obj: &serde_json::Value, path: &[&str]) -> String {
    lookup(obj, path)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

fn boolean(obj: &serde_json::Value, path: &[&str]) -> String {
    let b = lookup(obj, path).and_then(|v| v.as_bool()).unwrap_or(false);
    b.to_string()
}

fn integer(obj: &serde_json::Value, path: &[&str]) -> String {
    match lookup(obj, path) {
        Some(v) => v
            .as_i64()
            .map(|n| n.to_string())
            .or_else(|| v.as_u64().map(|n| n.to_string()))
            .unwrap_or_else(|| "0".to_string()),
        None => "0".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::{convert_fields, FieldSelector};
    use serde_json::json;

    #[test]
    fn extract_pod_fields() {
        let pod = json!({
            "metadata": {"name": "pod-1a", "namespace": "fixtures-a"},
            "spec": {"restartPolicy": "Always", "serviceAccountName": "default", "serviceAccount": "default",
                     "nodeName": "node-1", "securityContext": {}, "schedulerName": "default-scheduler"},
            "status": {"phase": "Pending", "qosClass": "BestEffort"}
        });
        let f = extract_fields("", "pods", &pod);
        let get = |k: &str| f.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("metadata.name"), Some("pod-1a"));
        assert_eq!(get("metadata.namespace"), Some("fixtures-a"));
        assert_eq!(get("spec.nodeName"), Some("node-1"));
        assert_eq!(get("spec.restartPolicy"), Some("Always"));
        assert_eq!(get("spec.schedulerName"), Some("default-scheduler"));
        assert_eq!(get("spec.serviceAccountName"), Some("default"));
        assert_eq!(get("spec.hostNetwork"), Some("false"));
        assert_eq!(get("status.phase"), Some("Pending"));
        assert_eq!(get("status.podIP"), Some(""));
        assert_eq!(get("status.nominatedNodeName"), Some(""));
        let unscheduled = json!({"metadata": {"name": "pod-unscheduled", "namespace": "fixtures-a"},
                                 "spec": {"hostNetwork": true}, "status": {"phase": "Pending",
                                 "podIPs": [{"ip": "10.0.0.2"}, {"ip": "fd00::2"}]}});
        let f2 = extract_fields("", "pods", &unscheduled);
        let sel = |s: &str, f: &[(&'static str, String)]| {
            FieldSelector::parse(s).unwrap().matches_fields(f)
        };
        assert!(sel("spec.nodeName=", &f2));
        assert!(!sel("spec.nodeName=", &f));
        assert!(sel("spec.hostNetwork=true,status.podIP=10.0.0.2", &f2));
        assert!(sel("spec.host=node-1", &f));
        let both = json!({"status": {"podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.2"}]}});
        assert!(sel(
            "status.podIP=10.0.0.9",
            &extract_fields("", "pods", &both)
        ));
    }

    #[test]
    fn extract_other_kinds() {
        let get = |g: &str, r: &str, o: serde_json::Value, k: &str| {
            extract_fields(g, r, &o)
                .into_iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v)
        };
        assert_eq!(
            get(
                "",
                "nodes",
                json!({"metadata": {"name": "n"}}),
                "spec.unschedulable"
            )
            .as_deref(),
            Some("false")
        );
        assert_eq!(
            get(
                "",
                "nodes",
                json!({"spec": {"unschedulable": true}}),
                "spec.unschedulable"
            )
            .as_deref(),
            Some("true")
        );
        assert_eq!(
            get(
                "",
                "nodes",
                json!({"metadata": {"name": "n"}}),
                "metadata.namespace"
            ),
            None
        );
        assert_eq!(
            get(
                "",
                "namespaces",
                json!({"status": {"phase": "Active"}}),
                "status.phase"
            )
            .as_deref(),
            Some("Active")
        );
        assert_eq!(
            get(
                "",
                "secrets",
                json!({"type": "kubernetes.io/basic-auth"}),
                "type"
            )
            .as_deref(),
            Some("kubernetes.io/basic-auth")
        );
        assert_eq!(
            get(
                "",
                "replicationcontrollers",
                json!({"status": {"replicas": 3}}),
                "status.replicas"
            )
            .as_deref(),
            Some("3")
        );
        assert_eq!(
            get("", "replicationcontrollers", json!({}), "status.replicas").as_deref(),
            Some("0")
        );
        assert_eq!(
            get(
                "batch",
                "jobs",
                json!({"status": {"succeeded": 2}}),
                "status.successful"
            )
            .as_deref(),
            Some("2")
        );
        assert_eq!(
            get(
                "certificates.k8s.io",
                "certificatesigningrequests",
                json!({"spec": {"signerName": "kubernetes.io/kubelet-serving"}}),
                "spec.signerName"
            )
            .as_deref(),
            Some("kubernetes.io/kubelet-serving")
        );
        let ev = json!({"involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns", "uid": "u",
                        "apiVersion": "v1", "resourceVersion": "5", "fieldPath": "spec.containers{c}"},
                        "reason": "Pulled", "type": "Normal", "reportingComponent": "kubelet", "source": {}});
        assert_eq!(
            get("", "events", ev.clone(), "involvedObject.fieldPath").as_deref(),
            Some("spec.containers{c}")
        );
        assert_eq!(
            get("", "events", ev.clone(), "source").as_deref(),
            Some("kubelet")
        );
        assert_eq!(
            get(
                "",
                "events",
                json!({"source": {"component": "sched"}, "reportingComponent": "x"}),
                "source"
            )
            .as_deref(),
            Some("sched")
        );
        let ev1 = json!({"regarding": {"kind": "Pod", "name": "p"}, "reportingController": "kubelet", "type": "Warning",
                         "deprecatedSource": {"component": "old"}});
        let f = extract_fields("events.k8s.io", "events", &ev1);
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches_fields(&f);
        assert!(m("regarding.kind=Pod,regarding.name=p,reportingController=kubelet,source=old,type=Warning"));
        let conv = convert_fields(
            &FieldSelector::parse("regarding.kind=Pod").unwrap(),
            "events.k8s.io",
            "events",
            true,
            false,
        )
        .unwrap();
        assert!(conv.matches_fields(&f));
        // Unknown kinds: metadata only.
        let f = extract_fields(
            "",
            "configmaps",
            &json!({"metadata": {"name": "cm-07", "namespace": "fixtures-a"}}),
        );
        assert_eq!(
            f,
            vec![
                ("metadata.name", "cm-07".to_string()),
                ("metadata.namespace", "fixtures-a".to_string())
            ]
        );
        // Garbage input never panics.
        for v in [
            json!(null),
            json!(3),
            json!([1, 2]),
            json!({"metadata": 5, "status": {"replicas": "x"}}),
        ] {
            for (g, r) in [
                ("", "pods"),
                ("", "events"),
                ("events.k8s.io", "events"),
                ("", "replicationcontrollers"),
            ] {
                let _ = extract_fields(g, r, &v);
            }
        }
    }
}
