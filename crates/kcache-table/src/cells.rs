//! Cells of the built-in kinds, computed from the v1 JSON of an object the way kube-apiserver
//! v1.28's printers compute them from the internal object (wide output: priority-1 columns
//! included). Each kind yields every column it knows by name; the printer picks the ones the
//! upstream's `columnDefinitions` name, in their order.
//!
//! Why one file of this length: one function per built-in kind, each a transcription of that
//! kind's printer; they share the small helpers at the top and nothing else, so splitting
//! them would only scatter a flat list. The tests are in `cells/tests.rs`.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::duration::{human_duration, parse_time, since, sub};

/// A built-in kind with a printer here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builtin {
    Pod,
    ConfigMap,
    Secret,
    Service,
    Namespace,
    Node,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    Event,
    /// `events.k8s.io/v1` Events: the same printer after conversion to the core shape.
    EventV1,
    EndpointSlice,
}

impl Builtin {
    pub(crate) fn lookup(group: &str, resource: &str) -> Option<Builtin> {
        Some(match (group, resource) {
            ("", "pods") => Builtin::Pod,
            ("", "configmaps") => Builtin::ConfigMap,
            ("", "secrets") => Builtin::Secret,
            ("", "services") => Builtin::Service,
            ("", "namespaces") => Builtin::Namespace,
            ("", "nodes") => Builtin::Node,
            ("apps", "deployments") => Builtin::Deployment,
            ("apps", "replicasets") => Builtin::ReplicaSet,
            ("apps", "statefulsets") => Builtin::StatefulSet,
            ("apps", "daemonsets") => Builtin::DaemonSet,
            ("batch", "jobs") => Builtin::Job,
            ("", "events") => Builtin::Event,
            ("events.k8s.io", "events") => Builtin::EventV1,
            ("discovery.k8s.io", "endpointslices") => Builtin::EndpointSlice,
            _ => return None,
        })
    }
}

/// One object's cells by column name, plus the row conditions (pods that finished).
pub(crate) struct Row {
    pub(crate) cells: Vec<(&'static str, Value)>,
    pub(crate) conditions: Option<Value>,
}

impl Row {
    fn plain(cells: Vec<(&'static str, Value)>) -> Row {
        Row {
            cells,
            conditions: None,
        }
    }
}

/// Every column `kind` knows, computed for `obj` at `now` (Unix nanoseconds).
pub(crate) fn row(kind: Builtin, obj: &Value, now: i128) -> Row {
    match kind {
        Builtin::Pod => pod(obj, now),
        Builtin::ConfigMap => Row::plain(vec![
            ("Name", name(obj)),
            (
                "Data",
                json!(len(at(obj, &["data"])) + len(at(obj, &["binaryData"]))),
            ),
            ("Age", age(obj, now)),
        ]),
        Builtin::Secret => Row::plain(vec![
            ("Name", name(obj)),
            ("Type", json!(str_at(obj, &["type"]))),
            ("Data", json!(len(at(obj, &["data"])))),
            ("Age", age(obj, now)),
        ]),
        Builtin::Service => service(obj, now),
        Builtin::Namespace => Row::plain(vec![
            ("Name", name(obj)),
            ("Status", json!(str_at(obj, &["status", "phase"]))),
            ("Age", age(obj, now)),
        ]),
        Builtin::Node => node(obj, now),
        Builtin::Deployment => deployment(obj, now),
        Builtin::ReplicaSet => replica_set(obj, now),
        Builtin::StatefulSet => stateful_set(obj, now),
        Builtin::DaemonSet => daemon_set(obj, now),
        Builtin::Job => job(obj, now),
        Builtin::Event => event(obj, now),
        Builtin::EventV1 => event(&event_v1_as_core(obj), now),
        Builtin::EndpointSlice => endpoint_slice(obj, now),
    }
}

// ----- access helpers ----------------------------------------------------------------------

static NULL: Value = Value::Null;

fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    let mut cur = v;
    for key in path {
        match cur.get(key) {
            Some(next) => cur = next,
            None => return &NULL,
        }
    }
    cur
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path).as_str().unwrap_or("")
}

fn int_at(v: &Value, path: &[&str]) -> i64 {
    let x = at(v, path);
    x.as_i64()
        .or_else(|| x.as_f64().map(|f| f as i64))
        .unwrap_or(0)
}

fn list<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path).as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// Number of entries of a map (or array).
fn len(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    }
}

fn time_at(v: &Value, path: &[&str]) -> Option<i128> {
    at(v, path).as_str().and_then(parse_time)
}

fn name(obj: &Value) -> Value {
    json!(str_at(obj, &["metadata", "name"]))
}

fn age(obj: &Value, now: i128) -> Value {
    json!(since(time_at(obj, &["metadata", "creationTimestamp"]), now))
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_string()
    } else {
        s.to_string()
    }
}

// ----- shared formatting -------------------------------------------------------------------

/// `labels.FormatLabels`: `k=v` pairs sorted by key, `<none>` when empty.
fn format_labels(map: &Value) -> String {
    let Some(m) = map.as_object() else {
        return "<none>".to_string();
    };
    let mut pairs: Vec<(&String, &str)> = m
        .iter()
        .map(|(k, v)| (k, v.as_str().unwrap_or("")))
        .collect();
    pairs.sort();
    let s = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    or_none(&s)
}

/// `metav1.LabelSelectorAsSelector(sel).String()`; `Err` for an invalid selector.
fn selector_string(sel: &Value) -> Result<String, ()> {
    let Some(sel) = sel.as_object() else {
        // A nil selector selects nothing; its string is empty.
        return Ok(String::new());
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for expr in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let key = str_at(expr, &["key"]);
        let mut values: Vec<&str> = list(expr, &["values"])
            .iter()
            .map(|v| v.as_str().unwrap_or(""))
            .collect();
        values.sort_unstable();
        let text = match str_at(expr, &["operator"]) {
            "In" | "NotIn" if values.is_empty() => return Err(()),
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" | "DoesNotExist" if !values.is_empty() => return Err(()),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key.to_string(), text));
    }
    // The requirements are sorted by key (stable for equal keys).
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(","))
}

/// `metav1.FormatLabelSelector`: the selector string, `<none>` if empty, `<error>` if invalid.
fn format_label_selector(sel: &Value) -> String {
    match selector_string(sel) {
        Ok(s) => or_none(&s),
        Err(()) => "<error>".to_string(),
    }
}

/// `layoutContainerCells`: container names and images, comma-separated.
fn containers(pod_spec: &Value) -> (Value, Value) {
    let cs = list(pod_spec, &["containers"]);
    let names: Vec<&str> = cs.iter().map(|c| str_at(c, &["name"])).collect();
    let images: Vec<&str> = cs.iter().map(|c| str_at(c, &["image"])).collect();
    (json!(names.join(",")), json!(images.join(",")))
}

/// `listWithMoreString`: up to three items, then `+ N more...`; `<unset>` when empty.
fn list_with_more(items: &[String]) -> String {
    const MAX: usize = 3;
    let shown = &items[..items.len().min(MAX)];
    let ret = shown.join(",");
    if items.len() > MAX {
        return format!("{ret} + {} more...", items.len() - MAX);
    }
    if ret.is_empty() {
        return "<unset>".to_string();
    }
    ret
}

// ----- pods --------------------------------------------------------------------------------

const POD_SUCCEEDED_MESSAGE: &str = "The pod has completed successfully.";
const POD_FAILED_MESSAGE: &str = "The pod failed.";

fn is_restartable_init_container(init_containers: &[Value], name: &str) -> bool {
    init_containers
        .iter()
        .find(|c| str_at(c, &["name"]) == name)
        .is_some_and(|c| str_at(c, &["restartPolicy"]) == "Always")
}

fn has_condition(conditions: &[Value], ty: &str) -> bool {
    conditions
        .iter()
        .any(|c| str_at(c, &["type"]) == ty && str_at(c, &["status"]) == "True")
}

/// `isPodInitializedConditionTrue`: the first `Initialized` condition decides.
fn initialized(conditions: &[Value]) -> bool {
    conditions
        .iter()
        .find(|c| str_at(c, &["type"]) == "Initialized")
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

/// A container's last termination time, if it is later than `latest`.
fn later_termination(container: &Value, latest: &mut Option<i128>) {
    let terminated = at(container, &["lastState", "terminated"]);
    if terminated.is_null() {
        return;
    }
    let finished = time_at(terminated, &["finishedAt"]);
    // metav1.Time.Before on the zero time: a zero date is before any real one.
    let before = match (*latest, finished) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(l), Some(f)) => l < f,
    };
    if before {
        *latest = finished;
    }
}

/// The Ready, Status and Restarts of a pod (`printPod`).
pub(crate) struct PodSummary {
    pub(crate) ready: String,
    pub(crate) status: String,
    pub(crate) restarts: String,
}

pub(crate) fn pod_summary(pod: &Value, now: i128) -> PodSummary {
    let spec = at(pod, &["spec"]);
    let status = at(pod, &["status"]);
    let init_specs = list(spec, &["initContainers"]);
    let conditions = list(status, &["conditions"]);

    let mut restarts: i64 = 0;
    let mut restartable_init_restarts: i64 = 0;
    let mut total = list(spec, &["containers"]).len();
    let mut ready = 0usize;
    let mut last_restart: Option<i128> = None;
    let mut last_restartable_init_restart: Option<i128> = None;

    let phase = str_at(status, &["phase"]);
    let mut reason = phase.to_string();
    if !str_at(status, &["reason"]).is_empty() {
        reason = str_at(status, &["reason"]).to_string();
    }
    for c in conditions {
        if str_at(c, &["type"]) == "PodScheduled" && str_at(c, &["reason"]) == "SchedulingGated" {
            reason = "SchedulingGated".to_string();
        }
    }

    total += init_specs
        .iter()
        .filter(|c| str_at(c, &["restartPolicy"]) == "Always")
        .count();

    let mut initializing = false;
    for (i, c) in list(status, &["initContainerStatuses"]).iter().enumerate() {
        let restart_count = int_at(c, &["restartCount"]);
        restarts += restart_count;
        later_termination(c, &mut last_restart);
        let cname = str_at(c, &["name"]);
        let restartable = is_restartable_init_container(init_specs, cname);
        if restartable {
            restartable_init_restarts += restart_count;
            later_termination(c, &mut last_restartable_init_restart);
        }
        let terminated = at(c, &["state", "terminated"]);
        let waiting = at(c, &["state", "waiting"]);
        if !terminated.is_null() && int_at(terminated, &["exitCode"]) == 0 {
            continue;
        }
        if restartable && at(c, &["started"]).as_bool() == Some(true) {
            if at(c, &["ready"]).as_bool() == Some(true) {
                ready += 1;
            }
            continue;
        }
        if !terminated.is_null() {
            // Initialization failed.
            let r = str_at(terminated, &["reason"]);
            reason = if r.is_empty() {
                let signal = int_at(terminated, &["signal"]);
                if signal != 0 {
                    format!("Init:Signal:{signal}")
                } else {
                    format!("Init:ExitCode:{}", int_at(terminated, &["exitCode"]))
                }
            } else {
                format!("Init:{r}")
            };
        } else if !waiting.is_null()
            && !str_at(waiting, &["reason"]).is_empty()
            && str_at(waiting, &["reason"]) != "PodInitializing"
        {
            reason = format!("Init:{}", str_at(waiting, &["reason"]));
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    if !initializing || initialized(conditions) {
        restarts = restartable_init_restarts;
        last_restart = last_restartable_init_restart;
        let mut has_running = false;
        for c in list(status, &["containerStatuses"]).iter().rev() {
            restarts += int_at(c, &["restartCount"]);
            later_termination(c, &mut last_restart);
            let waiting = at(c, &["state", "waiting"]);
            let terminated = at(c, &["state", "terminated"]);
            if !waiting.is_null() && !str_at(waiting, &["reason"]).is_empty() {
                reason = str_at(waiting, &["reason"]).to_string();
            } else if !terminated.is_null() && !str_at(terminated, &["reason"]).is_empty() {
                reason = str_at(terminated, &["reason"]).to_string();
            } else if !terminated.is_null() {
                let signal = int_at(terminated, &["signal"]);
                reason = if signal != 0 {
                    format!("Signal:{signal}")
                } else {
                    format!("ExitCode:{}", int_at(terminated, &["exitCode"]))
                };
            } else if at(c, &["ready"]).as_bool() == Some(true)
                && !at(c, &["state", "running"]).is_null()
            {
                has_running = true;
                ready += 1;
            }
        }
        // Back to Running when a container still runs after another one completed.
        if reason == "Completed" && has_running {
            reason = if has_condition(conditions, "Ready") {
                "Running".to_string()
            } else {
                "NotReady".to_string()
            };
        }
    }

    let deleting = !at(pod, &["metadata", "deletionTimestamp"]).is_null();
    if deleting && str_at(status, &["reason"]) == "NodeLost" {
        reason = "Unknown".to_string();
    } else if deleting {
        reason = "Terminating".to_string();
    }

    let restarts_str = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };
    PodSummary {
        ready: format!("{ready}/{total}"),
        status: reason,
        restarts: restarts_str,
    }
}

fn pod(obj: &Value, now: i128) -> Row {
    let summary = pod_summary(obj, now);
    let status = at(obj, &["status"]);
    // The internal PodIPs start with status.podIP when it is set.
    let mut ip = str_at(status, &["podIP"]);
    if ip.is_empty() {
        ip = list(status, &["podIPs"])
            .first()
            .map(|p| str_at(p, &["ip"]))
            .unwrap_or("");
    }
    let gates = list(obj, &["spec", "readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = list(status, &["conditions"]);
        let true_count = gates
            .iter()
            .filter(|g| {
                let ty = str_at(g, &["conditionType"]);
                conditions
                    .iter()
                    .find(|c| str_at(c, &["type"]) == ty)
                    .is_some_and(|c| str_at(c, &["status"]) == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };
    let conditions = match str_at(status, &["phase"]) {
        "Succeeded" => Some(json!([{
            "type": "Completed", "status": "True", "reason": "Succeeded",
            "message": POD_SUCCEEDED_MESSAGE,
        }])),
        "Failed" => Some(json!([{
            "type": "Completed", "status": "True", "reason": "Failed",
            "message": POD_FAILED_MESSAGE,
        }])),
        _ => None,
    };
    Row {
        cells: vec![
            ("Name", name(obj)),
            ("Ready", json!(summary.ready)),
            ("Status", json!(summary.status)),
            ("Restarts", json!(summary.restarts)),
            ("Age", age(obj, now)),
            ("IP", json!(or_none(ip))),
            ("Node", json!(or_none(str_at(obj, &["spec", "nodeName"])))),
            (
                "Nominated Node",
                json!(or_none(str_at(status, &["nominatedNodeName"]))),
            ),
            ("Readiness Gates", json!(readiness_gates)),
        ],
        conditions,
    }
}

// ----- services ----------------------------------------------------------------------------

/// `loadBalancerStatusStringer` in wide mode: the sorted, unique IPs or hostnames.
fn load_balancer_ingress(status: &Value) -> String {
    let set: BTreeSet<&str> = list(status, &["loadBalancer", "ingress"])
        .iter()
        .filter_map(|i| {
            let ip = str_at(i, &["ip"]);
            let host = str_at(i, &["hostname"]);
            if !ip.is_empty() {
                Some(ip)
            } else if !host.is_empty() {
                Some(host)
            } else {
                None
            }
        })
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

fn service_external_ip(svc: &Value) -> String {
    let external: Vec<&str> = list(svc, &["spec", "externalIPs"])
        .iter()
        .map(|v| v.as_str().unwrap_or(""))
        .collect();
    match str_at(svc, &["spec", "type"]) {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".to_string()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let lb = load_balancer_ingress(at(svc, &["status"]));
            if !external.is_empty() {
                let mut results: Vec<&str> = Vec::new();
                if !lb.is_empty() {
                    results.extend(lb.split(','));
                }
                results.extend(external);
                return results.join(",");
            }
            if !lb.is_empty() {
                return lb;
            }
            "<pending>".to_string()
        }
        "ExternalName" => str_at(svc, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    }
}

fn service(obj: &Value, now: i128) -> Row {
    let spec = at(obj, &["spec"]);
    let mut cluster_ip = str_at(spec, &["clusterIP"]);
    if cluster_ip.is_empty() {
        cluster_ip = list(spec, &["clusterIPs"])
            .first()
            .and_then(Value::as_str)
            .unwrap_or("");
    }
    let ports: Vec<String> = list(spec, &["ports"])
        .iter()
        .map(|p| {
            let port = int_at(p, &["port"]);
            let proto = str_at(p, &["protocol"]);
            let node_port = int_at(p, &["nodePort"]);
            if node_port > 0 {
                format!("{port}:{node_port}/{proto}")
            } else {
                format!("{port}/{proto}")
            }
        })
        .collect();
    Row::plain(vec![
        ("Name", name(obj)),
        ("Type", json!(str_at(spec, &["type"]))),
        ("Cluster-IP", json!(or_none(cluster_ip))),
        ("External-IP", json!(service_external_ip(obj))),
        ("Port(s)", json!(or_none(&ports.join(",")))),
        ("Age", age(obj, now)),
        ("Selector", json!(format_labels(at(spec, &["selector"])))),
    ])
}

// ----- nodes -------------------------------------------------------------------------------

fn node(obj: &Value, now: i128) -> Row {
    let status = at(obj, &["status"]);
    // The last condition of type Ready wins, as in the printer's map.
    let ready = list(status, &["conditions"])
        .iter()
        .rev()
        .find(|c| str_at(c, &["type"]) == "Ready");
    let mut states = vec![match ready {
        Some(c) if str_at(c, &["status"]) == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    }];
    if at(obj, &["spec", "unschedulable"]).as_bool() == Some(true) {
        states.push("SchedulingDisabled".to_string());
    }
    let mut roles = BTreeSet::new();
    if let Some(labels) = at(obj, &["metadata", "labels"]).as_object() {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_string());
                }
            } else if k == "kubernetes.io/role" && v.as_str().is_some_and(|v| !v.is_empty()) {
                roles.insert(v.as_str().unwrap_or("").to_string());
            }
        }
    }
    let roles = roles.into_iter().collect::<Vec<_>>().join(",");
    let address = |ty: &str| {
        list(status, &["addresses"])
            .iter()
            .find(|a| str_at(a, &["type"]) == ty)
            .map(|a| str_at(a, &["address"]).to_string())
            .unwrap_or_else(|| "<none>".to_string())
    };
    let info = at(status, &["nodeInfo"]);
    let unknown = |s: &str| {
        if s.is_empty() {
            "<unknown>".to_string()
        } else {
            s.to_string()
        }
    };
    Row::plain(vec![
        ("Name", name(obj)),
        ("Status", json!(states.join(","))),
        ("Roles", json!(or_none(&roles))),
        ("Age", age(obj, now)),
        ("Version", json!(str_at(info, &["kubeletVersion"]))),
        ("Internal-IP", json!(address("InternalIP"))),
        ("External-IP", json!(address("ExternalIP"))),
        ("OS-Image", json!(unknown(str_at(info, &["osImage"])))),
        (
            "Kernel-Version",
            json!(unknown(str_at(info, &["kernelVersion"]))),
        ),
        (
            "Container-Runtime",
            json!(unknown(str_at(info, &["containerRuntimeVersion"]))),
        ),
    ])
}

// ----- workloads ---------------------------------------------------------------------------

fn deployment(obj: &Value, now: i128) -> Row {
    let (names, images) = containers(at(obj, &["spec", "template", "spec"]));
    let selector = selector_string(at(obj, &["spec", "selector"]))
        .unwrap_or_else(|()| "<invalid>".to_string());
    Row::plain(vec![
        ("Name", name(obj)),
        (
            "Ready",
            json!(format!(
                "{}/{}",
                int_at(obj, &["status", "readyReplicas"]),
                int_at(obj, &["spec", "replicas"])
            )),
        ),
        (
            "Up-to-date",
            json!(int_at(obj, &["status", "updatedReplicas"])),
        ),
        (
            "Available",
            json!(int_at(obj, &["status", "availableReplicas"])),
        ),
        ("Age", age(obj, now)),
        ("Containers", names),
        ("Images", images),
        ("Selector", json!(selector)),
    ])
}

fn replica_set(obj: &Value, now: i128) -> Row {
    let (names, images) = containers(at(obj, &["spec", "template", "spec"]));
    Row::plain(vec![
        ("Name", name(obj)),
        ("Desired", json!(int_at(obj, &["spec", "replicas"]))),
        ("Current", json!(int_at(obj, &["status", "replicas"]))),
        ("Ready", json!(int_at(obj, &["status", "readyReplicas"]))),
        ("Age", age(obj, now)),
        ("Containers", names),
        ("Images", images),
        (
            "Selector",
            json!(format_label_selector(at(obj, &["spec", "selector"]))),
        ),
    ])
}

fn stateful_set(obj: &Value, now: i128) -> Row {
    let (names, images) = containers(at(obj, &["spec", "template", "spec"]));
    Row::plain(vec![
        ("Name", name(obj)),
        (
            "Ready",
            json!(format!(
                "{}/{}",
                int_at(obj, &["status", "readyReplicas"]),
                int_at(obj, &["spec", "replicas"])
            )),
        ),
        ("Age", age(obj, now)),
        ("Containers", names),
        ("Images", images),
    ])
}

fn daemon_set(obj: &Value, now: i128) -> Row {
    let template = at(obj, &["spec", "template", "spec"]);
    let (names, images) = containers(template);
    let status = at(obj, &["status"]);
    Row::plain(vec![
        ("Name", name(obj)),
        (
            "Desired",
            json!(int_at(status, &["desiredNumberScheduled"])),
        ),
        (
            "Current",
            json!(int_at(status, &["currentNumberScheduled"])),
        ),
        ("Ready", json!(int_at(status, &["numberReady"]))),
        (
            "Up-to-date",
            json!(int_at(status, &["updatedNumberScheduled"])),
        ),
        ("Available", json!(int_at(status, &["numberAvailable"]))),
        (
            "Node Selector",
            json!(format_labels(at(template, &["nodeSelector"]))),
        ),
        ("Age", age(obj, now)),
        ("Containers", names),
        ("Images", images),
        (
            "Selector",
            json!(format_label_selector(at(obj, &["spec", "selector"]))),
        ),
    ])
}

fn job(obj: &Value, now: i128) -> Row {
    let spec = at(obj, &["spec"]);
    let status = at(obj, &["status"]);
    let succeeded = int_at(status, &["succeeded"]);
    let completions = if !at(spec, &["completions"]).is_null() {
        format!("{succeeded}/{}", int_at(spec, &["completions"]))
    } else {
        let parallelism = int_at(spec, &["parallelism"]);
        if parallelism > 1 {
            format!("{succeeded}/1 of {parallelism}")
        } else {
            format!("{succeeded}/1")
        }
    };
    let start = time_at(status, &["startTime"]);
    let completion = time_at(status, &["completionTime"]);
    let duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(s), None) => since(Some(s), now),
        (Some(s), Some(c)) => human_duration(sub(c, s)),
    };
    // The Status column of newer apiservers (the v1.28 printer has no such column).
    let conditions = list(status, &["conditions"]);
    let condition = |ty: &str| {
        conditions
            .iter()
            .find(|c| str_at(c, &["type"]) == ty)
            .is_some_and(|c| str_at(c, &["status"]) == "True")
    };
    let job_status = if condition("Complete") {
        "Complete"
    } else if condition("Failed") {
        "Failed"
    } else if !at(obj, &["metadata", "deletionTimestamp"]).is_null() {
        "Terminating"
    } else if condition("Suspended") {
        "Suspended"
    } else if condition("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = containers(at(spec, &["template", "spec"]));
    Row::plain(vec![
        ("Name", name(obj)),
        ("Status", json!(job_status)),
        ("Completions", json!(completions)),
        ("Duration", json!(duration)),
        ("Age", age(obj, now)),
        ("Containers", names),
        ("Images", images),
        (
            "Selector",
            json!(format_label_selector(at(spec, &["selector"]))),
        ),
    ])
}

// ----- events ------------------------------------------------------------------------------

/// An `events.k8s.io/v1` Event in the core/v1 shape the printer reads.
fn event_v1_as_core(ev: &Value) -> Value {
    let mut core = json!({
        "metadata": at(ev, &["metadata"]).clone(),
        "involvedObject": at(ev, &["regarding"]).clone(),
        "reason": at(ev, &["reason"]).clone(),
        "message": at(ev, &["note"]).clone(),
        "source": at(ev, &["deprecatedSource"]).clone(),
        "firstTimestamp": at(ev, &["deprecatedFirstTimestamp"]).clone(),
        "lastTimestamp": at(ev, &["deprecatedLastTimestamp"]).clone(),
        "count": at(ev, &["deprecatedCount"]).clone(),
        "type": at(ev, &["type"]).clone(),
        "eventTime": at(ev, &["eventTime"]).clone(),
        "series": at(ev, &["series"]).clone(),
        "reportingComponent": at(ev, &["reportingController"]).clone(),
        "reportingInstance": at(ev, &["reportingInstance"]).clone(),
    });
    if let Some(m) = core.as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    core
}

fn event(obj: &Value, now: i128) -> Row {
    let mut first = since(time_at(obj, &["firstTimestamp"]), now);
    if time_at(obj, &["firstTimestamp"]).is_none() {
        first = since(time_at(obj, &["eventTime"]), now);
    }
    let mut last = since(time_at(obj, &["lastTimestamp"]), now);
    if time_at(obj, &["lastTimestamp"]).is_none() {
        last = first.clone();
    }
    let mut count = int_at(obj, &["count"]);
    let series = at(obj, &["series"]);
    if !series.is_null() {
        last = since(time_at(series, &["lastObservedTime"]), now);
        count = int_at(series, &["count"]);
    } else if count == 0 {
        // Singleton events of the new API have no count.
        count = 1;
    }
    let involved = at(obj, &["involvedObject"]);
    let kind = str_at(involved, &["kind"]).to_lowercase();
    let target = match str_at(involved, &["name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let component = first_non_empty(
        str_at(obj, &["source", "component"]),
        str_at(obj, &["reportingComponent"]),
    );
    let host = first_non_empty(
        str_at(obj, &["source", "host"]),
        str_at(obj, &["reportingInstance"]),
    );
    let source = if host.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {host}")
    };
    Row::plain(vec![
        ("Last Seen", json!(last)),
        ("Type", json!(str_at(obj, &["type"]))),
        ("Reason", json!(str_at(obj, &["reason"]))),
        ("Object", json!(target)),
        ("Subobject", json!(str_at(involved, &["fieldPath"]))),
        ("Source", json!(source)),
        ("Message", json!(str_at(obj, &["message"]).trim())),
        ("First Seen", json!(first)),
        ("Count", json!(count)),
        ("Name", name(obj)),
    ])
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() {
        b
    } else {
        a
    }
}

// ----- endpoint slices ---------------------------------------------------------------------

fn endpoint_slice(obj: &Value, now: i128) -> Row {
    let ports: Vec<String> = list(obj, &["ports"])
        .iter()
        .map(|p| {
            if let Some(n) = at(p, &["port"]).as_i64() {
                n.to_string()
            } else if let Some(name) = at(p, &["name"]).as_str() {
                name.to_string()
            } else {
                "*".to_string()
            }
        })
        .collect();
    let addresses: Vec<String> = list(obj, &["endpoints"])
        .iter()
        .flat_map(|e| list(e, &["addresses"]).iter())
        .map(|a| a.as_str().unwrap_or("").to_string())
        .collect();
    Row::plain(vec![
        ("Name", name(obj)),
        ("AddressType", json!(str_at(obj, &["addressType"]))),
        ("Ports", json!(list_with_more(&ports))),
        ("Endpoints", json!(list_with_more(&addresses))),
        ("Age", age(obj, now)),
    ])
}

#[cfg(test)]
mod tests;
