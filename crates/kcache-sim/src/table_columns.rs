//! Table column definitions for the built-in kinds of the demo cluster, so that `kubectl get`
//! through kcache prints the apiserver's columns (kcache takes the columns from its upstream
//! and computes the cells from its cache). The sim prints lists, GETs and watch events of these
//! kinds with them (`table_rows`).
//!
//! Where the recordings hold a Table of the kind, its `columnDefinitions` are used byte for
//! byte, from the sim's profile's recordings (v1.34 changed the Pod `Node` column's
//! description; the other recorded columns are the same in both). For the kinds the recordings
//! have no Table of, the sim writes the columns the apiserver's printers declare (names, types,
//! formats and priorities, from `pkg/printers/internalversion` of each version: a Job's
//! `Status` is v1.34's only), with short descriptions of its own: kubectl prints names and
//! honours priorities, not descriptions.

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

/// The columns most printers share, as the apiserver declares them.
const AGE: Column = ("Age", "string", 0, "Time since the object was created.");
const CONTAINERS: Column = (
    "Containers",
    "string",
    1,
    "Names of each container in the template.",
);
const IMAGES: Column = (
    "Images",
    "string",
    1,
    "Images referenced by each container in the template.",
);

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
    AGE,
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
    AGE,
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

const REPLICASETS: &[Column] = &[
    ("Desired", "integer", 0, "Desired replicas."),
    ("Current", "integer", 0, "Replicas the set has."),
    ("Ready", "integer", 0, "Ready replicas."),
    AGE,
    CONTAINERS,
    IMAGES,
    ("Selector", "string", 1, "Label selector of the set's pods."),
];

const DAEMONSETS: &[Column] = &[
    (
        "Desired",
        "integer",
        0,
        "Nodes that should run the daemon pod.",
    ),
    (
        "Current",
        "integer",
        0,
        "Nodes that run at least one daemon pod.",
    ),
    ("Ready", "integer", 0, "Nodes whose daemon pod is ready."),
    (
        "Up-to-date",
        "integer",
        0,
        "Nodes that run the updated daemon pod.",
    ),
    (
        "Available",
        "integer",
        0,
        "Nodes whose daemon pod is available.",
    ),
    (
        "Node Selector",
        "string",
        0,
        "The pod template's node selector.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    (
        "Selector",
        "string",
        1,
        "Label selector of the daemon set's pods.",
    ),
];

const STATEFULSETS: &[Column] = &[
    ("Ready", "string", 0, "Number of the pod with ready state"),
    AGE,
    CONTAINERS,
    IMAGES,
];

/// A Job's columns after its `Status` (v1.34 has it, v1.28 does not).
const JOBS: &[Column] = &[
    ("Completions", "string", 0, "Pods that succeeded."),
    (
        "Duration",
        "string",
        0,
        "Time required to complete the job.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    ("Selector", "string", 1, "Label selector of the job's pods."),
];

const JOB_STATUS: Column = ("Status", "string", 0, "Status of the job.");

const ENDPOINTSLICES: &[Column] = &[
    ("AddressType", "string", 0, "Type of the slice's addresses."),
    ("Ports", "string", 0, "The slice's ports."),
    (
        "Endpoints",
        "string",
        0,
        "The slice's endpoints' addresses.",
    ),
    AGE,
];

const SERVICEACCOUNTS: &[Column] = &[
    ("Secrets", "string", 0, "Secrets the account may use."),
    AGE,
];

/// An Event's columns: the only printer without `Name` first (it is last, and wide).
const EVENTS: &[Column] = &[
    ("Last Seen", "string", 0, "When the event was last seen."),
    ("Type", "string", 0, "Type of the event."),
    ("Reason", "string", 0, "Why the action was taken."),
    ("Object", "string", 0, "The object the event is about."),
    (
        "Subobject",
        "string",
        1,
        "The part of the object the event is about.",
    ),
    (
        "Source",
        "string",
        1,
        "The component that reported the event.",
    ),
    ("Message", "string", 0, "A description of the event."),
    ("First Seen", "string", 1, "When the event was first seen."),
    ("Count", "string", 1, "How many times the event occurred."),
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
    out.push(("apps", "replicasets", written(REPLICASETS)));
    out.push(("apps", "daemonsets", written(DAEMONSETS)));
    out.push(("apps", "statefulsets", written(STATEFULSETS)));
    let jobs: Vec<Column> = match profile {
        Profile::V1_34 => std::iter::once(JOB_STATUS)
            .chain(JOBS.iter().copied())
            .collect(),
        Profile::V1_28 => JOBS.to_vec(),
    };
    out.push(("batch", "jobs", written(&jobs)));
    out.push((
        "discovery.k8s.io",
        "endpointslices",
        written(ENDPOINTSLICES),
    ));
    out.push(("", "serviceaccounts", written(SERVICEACCOUNTS)));
    let events: Vec<_> = EVENTS.iter().map(column).chain([name_column(1)]).collect();
    out.push(("", "events", array(events)));
    out
}

/// A `columnDefinitions` array: the Name column first, as every printer but the Event's has it.
fn written(columns: &[Column]) -> Bytes {
    array(
        std::iter::once(name_column(0))
            .chain(columns.iter().map(column))
            .collect(),
    )
}

fn name_column(priority: u8) -> serde_json::Value {
    serde_json::json!({
        "name": "Name", "type": "string", "format": "name",
        "description": "Name of the object, unique within its namespace.", "priority": priority,
    })
}

fn column((name, ty, priority, description): &Column) -> serde_json::Value {
    serde_json::json!({
        "name": name, "type": ty, "format": "",
        "description": description, "priority": priority,
    })
}

fn array(columns: Vec<serde_json::Value>) -> Bytes {
    Bytes::from(serde_json::to_vec(&columns).unwrap_or_default())
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
        assert_eq!(all.len(), RECORDED.len() + 9);
        for (group, resource, columns) in all.iter().filter(|(_, r, _)| *r != "events") {
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
