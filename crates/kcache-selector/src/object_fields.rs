//! The selectable field values of one object, extracted from its JSON the way the apiserver
//! builds each kind's field set (Go zero values for absent booleans and counters, the pod IP
//! from `status.podIP` or `status.podIPs`, the shared event field set).
//!
//! Separate because it reads objects, not selectors: it runs once per cached object (see
//! kcache's `object` module) and its output is what field selectors are matched against.

use std::borrow::Cow;

use kcache_json::json_view::{self, Members};

/// Every name [`extract_fields`] can give, so that a cached object can keep a field's name as
/// a one-byte position in this list (see kcache's `object` module).
const FIELD_NAMES: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.host",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
    "spec.unschedulable",
    "type",
    "status.replicas",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
    "reason",
    "reportingComponent",
    "source",
    "status.successful",
    "spec.signerName",
];

/// The position of a field name in the list of selectable field names.
pub fn field_name_index(name: &str) -> Option<u8> {
    FIELD_NAMES
        .iter()
        .position(|n| *n == name)
        .and_then(|i| u8::try_from(i).ok())
}

/// The field name at a position given by [`field_name_index`].
pub fn field_name(index: u8) -> Option<&'static str> {
    FIELD_NAMES.get(usize::from(index)).copied()
}

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
    let text = obj.to_string();
    let members = Members::parse(&text).unwrap_or_default();
    object_fields(group, resource, &members)
        .into_iter()
        .map(|(n, v)| (n, v.into_owned()))
        .collect()
}

/// [`extract_fields`] over a borrowed view of the object: what the cache runs once per
/// upstream object. Values are slices of the object's text where it has them unescaped.
pub fn object_fields<'a>(
    group: &str,
    resource: &str,
    obj: &Members<'a>,
) -> Vec<(&'static str, Cow<'a, str>)> {
    let meta = obj.object("metadata");
    let mut out: Vec<(&'static str, Cow<'a, str>)> = vec![("metadata.name", text(&meta, "name"))];
    if let Some(ns) = meta.str("namespace") {
        if !ns.is_empty() {
            out.push(("metadata.namespace", ns));
        }
    }
    match (group, resource) {
        ("", "pods") => {
            let spec = obj.object("spec");
            let status = obj.object("status");
            let node_name = text(&spec, "nodeName");
            out.push(("spec.host", node_name.clone()));
            out.push(("spec.nodeName", node_name));
            out.push(("spec.restartPolicy", text(&spec, "restartPolicy")));
            out.push(("spec.schedulerName", text(&spec, "schedulerName")));
            // The deprecated serviceAccount field stands in when serviceAccountName is unset.
            let mut sa = text(&spec, "serviceAccountName");
            if sa.is_empty() {
                sa = text(&spec, "serviceAccount");
            }
            out.push(("spec.serviceAccountName", sa));
            out.push(("spec.hostNetwork", boolean(&spec, "hostNetwork")));
            out.push(("status.phase", text(&status, "phase")));
            out.push(("status.podIP", pod_ip(&status)));
            out.push(("status.podIPs", Cow::Borrowed("")));
            out.push((
                "status.nominatedNodeName",
                text(&status, "nominatedNodeName"),
            ));
        }
        ("", "nodes") => {
            out.push((
                "spec.unschedulable",
                boolean(&obj.object("spec"), "unschedulable"),
            ));
        }
        ("", "namespaces") => out.push(("status.phase", text(&obj.object("status"), "phase"))),
        ("", "secrets") => out.push(("type", text(obj, "type"))),
        ("", "replicationcontrollers") => {
            out.push((
                "status.replicas",
                integer(&obj.object("status"), "replicas"),
            ));
        }
        ("", "events") => {
            let involved = obj.object("involvedObject");
            let involved = |f| text(&involved, f);
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
                text(obj, "reason"),
                text(obj, "reportingComponent"),
                text(&obj.object("source"), "component"),
                text(obj, "type"),
                false,
            );
        }
        ("events.k8s.io", "events") => {
            let regarding = obj.object("regarding");
            let regarding = |f| text(&regarding, f);
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
                text(obj, "reason"),
                text(obj, "reportingController"),
                text(&obj.object("deprecatedSource"), "component"),
                text(obj, "type"),
                true,
            );
        }
        ("batch", "jobs") => {
            out.push((
                "status.successful",
                integer(&obj.object("status"), "succeeded"),
            ));
        }
        ("certificates.k8s.io", "certificatesigningrequests" | "clustertrustbundles") => {
            out.push(("spec.signerName", text(&obj.object("spec"), "signerName")));
        }
        _ => {}
    }
    out
}

/// Event field set, shared by core/v1 and events.k8s.io/v1 (the latter is converted to the
/// former inside the apiserver, so both select on `involvedObject.*` names).
fn push_event_fields<'a>(
    out: &mut Vec<(&'static str, Cow<'a, str>)>,
    involved: [Cow<'a, str>; 7],
    reason: Cow<'a, str>,
    reporting: Cow<'a, str>,
    source_component: Cow<'a, str>,
    kind: Cow<'a, str>,
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
fn pod_ip<'a>(status: &Members<'a>) -> Cow<'a, str> {
    let ip = text(status, "podIP");
    if !ip.is_empty() {
        return ip;
    }
    status
        .get("podIPs")
        .and_then(|ips| json_view::elements(ips).first().copied())
        .map(|first| text(&Members::of(first), "ip"))
        .unwrap_or_default()
}

fn text<'a>(obj: &Members<'a>, key: &str) -> Cow<'a, str> {
    obj.str(key).unwrap_or_default()
}

fn boolean<'a>(obj: &Members<'a>, key: &str) -> Cow<'a, str> {
    let b = obj.get(key).and_then(json_view::as_bool).unwrap_or(false);
    Cow::Borrowed(if b { "true" } else { "false" })
}

fn integer<'a>(obj: &Members<'a>, key: &str) -> Cow<'a, str> {
    let n = obj.get(key).and_then(json_view::as_number);
    match n.and_then(|n| {
        n.as_i64()
            .map(|n| n.to_string())
            .or_else(|| n.as_u64().map(|n| n.to_string()))
    }) {
        Some(s) => Cow::Owned(s),
        None => Cow::Borrowed("0"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{convert_fields, FieldSelector};
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
