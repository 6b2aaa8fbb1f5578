//! Table column definitions for the built-in kinds of the demo cluster, so that `kubectl get`
//! through kcache prints the apiserver's columns (kcache takes the columns from its upstream
//! and computes the cells from its cache).
//!
//! Where the recordings hold a Table of the kind, its `columnDefinitions` are used byte for
//! byte, from the sim's profile's recordings (v1.34 changed the Pod `Node` column's
//! description; the other recorded columns are the same in both). The recordings have no Deployment or Node Table; for those two the sim writes the
//! columns the apiserver's printers declare (names, types, formats and priorities), with short
//! descriptions of its own: kubectl prints names and honours priorities, not descriptions.

use crate::Profile;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The recorded Tables the columns come from, by (group, resource).
const RECORDED: &[(&str, &str, &str)] = &[
    (
        "",
        "pods",
        include_str!("../../../tests/fixtures/kube-apiserver-v1.28/table-list-pods-ns-a.json"),
    ),
    (
        "",
        "configmaps",
        include_str!("../../../tests/fixtures/kube-apiserver-v1.28/table-list-cm-ns-a.json"),
    ),
    (
        "",
        "secrets",
        include_str!("../../../tests/fixtures/kube-apiserver-v1.28/table-list-secrets-ns-a.json"),
    ),
    (
        "",
        "services",
        include_str!("../../../tests/fixtures/kube-apiserver-v1.28/table-list-services-ns-a.json"),
    ),
    (
        "",
        "namespaces",
        include_str!("../../../tests/fixtures/kube-apiserver-v1.28/table-list-namespaces.json"),
    ),
];

/// The v1.34 recording of the one Table whose columns changed since v1.28.
const RECORDED_1_34_PODS: &str =
    include_str!("../../../tests/fixtures/kube-apiserver-v1.34/table-list-pods-ns-a.json");

/// (name, type, priority, description) of the columns of kinds without a recording.
type Column = (&'static str, &'static str, u8, &'static str);

const DEPLOYMENTS: &[Column] = &[
    (
        "Ready",
        "string",
        0,
        "Ready replicas out of the desired replicas.",
    ),
    (
        "Up-to-date",
        "integer",
        0,
        "Replicas that run the latest pod template.",
    ),
    ("Available", "integer", 0, "Replicas available to serve."),
    ("Age", "string", 0, "Time since the object was created."),
    (
        "Containers",
        "string",
        1,
        "Names of the pod template's containers.",
    ),
    (
        "Images",
        "string",
        1,
        "Images of the pod template's containers.",
    ),
    (
        "Selector",
        "string",
        1,
        "Label selector of the deployment's pods.",
    ),
];

const NODES: &[Column] = &[
    (
        "Status",
        "string",
        0,
        "Whether the node is ready and schedulable.",
    ),
    (
        "Roles",
        "string",
        0,
        "Roles from the node-role.kubernetes.io labels.",
    ),
    ("Age", "string", 0, "Time since the object was created."),
    (
        "Version",
        "string",
        0,
        "Kubelet version reported by the node.",
    ),
    (
        "Internal-IP",
        "string",
        1,
        "The node's internal IP address.",
    ),
    (
        "External-IP",
        "string",
        1,
        "The node's external IP address.",
    ),
    (
        "OS-Image",
        "string",
        1,
        "Operating system image reported by the node.",
    ),
    (
        "Kernel-Version",
        "string",
        1,
        "Kernel version reported by the node.",
    ),
    (
        "Container-Runtime",
        "string",
        1,
        "Container runtime reported by the node.",
    ),
];

/// The columns of every built-in kind the demo holds that kcache prints, as
/// (group, resource, `columnDefinitions` JSON array), as v1.28 declares them.
pub fn builtin() -> Vec<(&'static str, &'static str, Bytes)> {
    builtin_for(Profile::V1_28)
}

/// [`builtin`] as the profile's apiserver declares them.
pub fn builtin_for(profile: Profile) -> Vec<(&'static str, &'static str, Bytes)> {
    #[derive(Deserialize)]
    struct Table<'a> {
        #[serde(borrow, rename = "columnDefinitions")]
        columns: &'a RawValue,
    }
    let mut out: Vec<_> = RECORDED
        .iter()
        .map(|(group, resource, body)| {
            let body = match (profile, *resource) {
                (Profile::V1_34, "pods") => RECORDED_1_34_PODS,
                _ => body,
            };
            // The recordings are part of the build: a malformed one is a build-time fact,
            // caught by this module's test.
            let t: Table<'_> = serde_json::from_str(body).expect("recorded Table");
            (
                *group,
                *resource,
                Bytes::copy_from_slice(t.columns.get().as_bytes()),
            )
        })
        .collect();
    out.push(("apps", "deployments", written(DEPLOYMENTS)));
    out.push(("", "nodes", written(NODES)));
    out
}

/// A `columnDefinitions` array: the Name column first, as every printer has it.
fn written(columns: &[Column]) -> Bytes {
    let name = serde_json::json!({
        "name": "Name", "type": "string", "format": "name",
        "description": "Name of the object, unique within its namespace.", "priority": 0,
    });
    let rest = columns.iter().map(|(name, ty, priority, description)| {
        serde_json::json!({
            "name": name, "type": ty, "format": "",
            "description": description, "priority": priority,
        })
    });
    let all: Vec<_> = std::iter::once(name).chain(rest).collect();
    Bytes::from(serde_json::to_vec(&all).unwrap_or_default())
}

/// Let `sim` hand out the Table columns of the built-in kinds, so `kubectl get` through kcache
/// prints the apiserver's columns (READY, STATUS, RESTARTS, AGE for pods).
pub fn serve_builtin(sim: &crate::Sim) {
    for (group, resource, columns) in builtin_for(sim.profile()) {
        sim.serve_table_columns(group, resource, columns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_columns_are_taken_verbatim_and_every_kind_has_name_first() {
        let all = builtin();
        assert_eq!(all.len(), RECORDED.len() + 2);
        for (group, resource, columns) in &all {
            let v: serde_json::Value = serde_json::from_slice(columns).unwrap();
            let names: Vec<&str> = v
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
            assert_eq!(names[0], "Name", "{group}/{resource}");
        }
        let pods = &all.iter().find(|(_, r, _)| *r == "pods").unwrap().2;
        let recorded = crate::recordings::read_string("table-list-pods-ns-a.json");
        assert!(recorded.contains(std::str::from_utf8(pods).unwrap()));
        for want in ["\"Ready\"", "\"Status\"", "\"Restarts\"", "\"Age\""] {
            assert!(std::str::from_utf8(pods).unwrap().contains(want), "{want}");
        }
    }

    #[test]
    fn each_profile_serves_its_recorded_columns() {
        for p in Profile::ALL {
            let all = builtin_for(p);
            for (group, resource, columns) in &all {
                let name = match *resource {
                    "pods" => "table-list-pods-ns-a.json",
                    "configmaps" => "table-list-cm-ns-a.json",
                    "secrets" => "table-list-secrets-ns-a.json",
                    "services" => "table-list-services-ns-a.json",
                    "namespaces" => "table-list-namespaces.json",
                    _ => continue,
                };
                let recorded = crate::recordings::read_string_in(p, name);
                assert!(
                    recorded.contains(std::str::from_utf8(columns).unwrap()),
                    "{p} {group}/{resource}"
                );
            }
            let pods = &all.iter().find(|(_, r, _)| *r == "pods").unwrap().2;
            let node = if p == Profile::V1_34 {
                "NodeName indicates in which node this pod is scheduled."
            } else {
                "NodeName is a request to schedule this pod onto a specific node."
            };
            assert!(std::str::from_utf8(pods).unwrap().contains(node), "{p}");
        }
    }
}
