//! Table rows as kube-apiserver prints them (`pkg/printers/internalversion` for the built-in
//! kinds, a CRD's `additionalPrinterColumns` for custom resources), for the types whose
//! columns the sim serves (`table_columns`): lists, named GETs and watch events alike, so
//! `kubectl get` (with `-w` too) straight at the sim, or passed through kcache, prints what it
//! would print against a cluster.
//!
//! The sim's own model of the printers, written from the apiserver's printing rules and
//! checked against the recorded Tables (`tests`), not kcache's printer: kcache computes its
//! rows itself from its cache, and the sim is what its rows are compared with.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::encode::write_value;
use crate::types::ResourceType;
use crate::Profile;

/// What `rows[].object` carries (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    /// The query parameter's value; None for one the apiserver refuses.
    pub(crate) fn parse(v: Option<&str>) -> Option<Include> {
        match v.unwrap_or("") {
            "" | "Metadata" => Some(Include::Metadata),
            "None" => Some(Include::None),
            "Object" => Some(Include::Object),
            _ => None,
        }
    }
}

/// How one type's objects print into a Table: the served `columnDefinitions`, the profile's
/// printer of a built-in kind or a custom resource's `additionalPrinterColumns`, and what
/// `rows[].object` carries. One printer answers a list, a GET and every event of a watch.
pub(crate) struct Printer {
    profile: Profile,
    rt: Arc<ResourceType>,
    columns: Bytes,
    /// A custom resource's printer columns after Name (its CRD's, or the apiserver's default
    /// Age column when its CRD declares none); None for a built-in kind.
    custom: Option<Vec<Value>>,
    include: Include,
}

impl Printer {
    /// `crd_columns`: the `additionalPrinterColumns` of a custom resource's served version.
    pub(crate) fn new(
        profile: Profile,
        rt: Arc<ResourceType>,
        columns: Bytes,
        crd_columns: Option<Vec<Value>>,
        include: Include,
    ) -> Printer {
        // A CRD without printer columns prints its objects' age (the apiextensions-apiserver's
        // default column).
        let custom = rt.custom.then(|| {
            crd_columns.filter(|c| !c.is_empty()).unwrap_or_else(|| {
                vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
            })
        });
        Printer {
            profile,
            rt,
            columns,
            custom,
            include,
        }
    }

    /// A list's Table: its `metadata` is the list's (resourceVersion, continue, remaining
    /// count), a row per object.
    pub(crate) fn list(&self, list_meta: &Value, objects: &[Value], now: SystemTime) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024 + objects.len() * 1024);
        self.write(&mut out, list_meta, true, objects, unix_seconds(now));
        out.push(b'\n');
        out
    }

    /// A GET's Table: one row, the object's resourceVersion as the Table's (a watch's first
    /// event's object, as a document of its own).
    pub(crate) fn get(&self, object: &Value, now: SystemTime) -> Vec<u8> {
        let mut out = self.event_object(object, true, now);
        out.push(b'\n');
        out
    }

    /// The object of a watch event: a one-row Table at the object's resourceVersion. Only the
    /// first event of a watch carries the `columnDefinitions` (`with_columns`), later ones
    /// `null` (`table-watch-cm-ns-a-from-list-rv`).
    pub(crate) fn event_object(
        &self,
        object: &Value,
        with_columns: bool,
        now: SystemTime,
    ) -> Vec<u8> {
        let rv = object["metadata"]["resourceVersion"].clone();
        let meta = json!({ "resourceVersion": rv });
        let mut out = Vec::with_capacity(2048);
        self.write(
            &mut out,
            &meta,
            with_columns,
            std::slice::from_ref(object),
            unix_seconds(now),
        );
        out
    }

    fn write(
        &self,
        out: &mut Vec<u8>,
        meta: &Value,
        with_columns: bool,
        objects: &[Value],
        now: i64,
    ) {
        out.extend_from_slice(br#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":"#);
        write_value(out, meta, false);
        out.extend_from_slice(br#","columnDefinitions":"#);
        if with_columns {
            out.extend_from_slice(&self.columns);
        } else {
            out.extend_from_slice(b"null");
        }
        out.extend_from_slice(br#","rows":["#);
        for (i, o) in objects.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            self.row(out, o, now);
        }
        out.extend_from_slice(b"]}");
    }

    fn row(&self, out: &mut Vec<u8>, o: &Value, now: i64) {
        let cells = match &self.custom {
            Some(columns) => custom_cells(columns, o, now),
            None => cells(self.profile, &self.rt.resource, o, now),
        };
        out.extend_from_slice(br#"{"cells":"#);
        write_value(out, &Value::Array(cells), false);
        if let Some(c) = row_conditions(&self.rt.resource, o).filter(|_| !self.rt.custom) {
            out.extend_from_slice(br#","conditions":"#);
            write_value(out, &c, false);
        }
        out.extend_from_slice(br#","object":"#);
        match self.include {
            Include::None => out.extend_from_slice(b"null"),
            Include::Object => write_value(out, o, self.rt.custom),
            // The apiserver's PartialObjectMetadata: ObjectMeta in its struct order, custom
            // resources' too (`table-get-widget`).
            Include::Metadata => out.extend_from_slice(&crate::metadata::encode(&self.rt, o)),
        }
        out.push(b'}');
    }
}

/// A custom resource's cells: its name, then each printer column's value at its jsonPath as
/// the apiextensions-apiserver's table convertor writes it: `null` when the path finds
/// nothing, a `date` as the time since it, an `integer`/`number`/`boolean` only when the
/// value is one, a `string` as the value's text.
fn custom_cells(columns: &[Value], o: &Value, now: i64) -> Vec<Value> {
    let mut row = vec![json!(s(&o["metadata"]["name"]))];
    for c in columns {
        let value = json_path(o, s(&c["jsonPath"]));
        let cell = match (s(&c["type"]), value) {
            (_, None | Some(Value::Null)) => Value::Null,
            ("date", Some(Value::String(t))) => match time(&json!(t)) {
                Some(t) => json!(human(now - t)),
                None => json!("<invalid>"),
            },
            ("integer", Some(v)) => v
                .as_i64()
                .or_else(|| v.as_f64().map(|f| f as i64))
                .map_or(Value::Null, Value::from),
            ("number", Some(v @ Value::Number(_))) => v.clone(),
            ("boolean", Some(v @ Value::Bool(_))) => v.clone(),
            ("string", Some(Value::String(t))) => json!(t),
            // jsonpath prints other scalars as their text; objects and lists are written as
            // JSON here (Go prints them with its own `fmt` forms, which no recording shows).
            ("string", Some(v)) => json!(v.to_string()),
            _ => Value::Null,
        };
        row.push(cell);
    }
    row
}

/// The value at a CRD printer column's simple JSONPath (`.spec.size`, `.status.conditions[0].type`);
/// None when the path finds nothing or is not one the sim evaluates.
fn json_path<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let mut at = o;
    for part in path.strip_prefix('.')?.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            at = at.get(key)?;
        }
        while let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            at = at.get(r[..end].parse::<usize>().ok()?)?;
            rest = &r[end + 1..];
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(at)
}

/// Every column of `resource`'s printer for `o`, in the order `table_columns` serves them.
fn cells(profile: Profile, resource: &str, o: &Value, now: i64) -> Vec<Value> {
    let name = json!(s(&o["metadata"]["name"]));
    let age = json!(age(&o["metadata"]["creationTimestamp"], now));
    let count = |v: &Value| v.as_object().map_or(0, Map::len);
    match resource {
        "configmaps" => vec![
            name,
            json!(count(&o["data"]) + count(&o["binaryData"])),
            age,
        ],
        "secrets" => vec![name, json!(s(&o["type"])), json!(count(&o["data"])), age],
        "namespaces" => vec![name, json!(s(&o["status"]["phase"])), age],
        "services" => service(o, name, age),
        "pods" => pod(o, name, age, now),
        "deployments" => deployment(o, name, age),
        "nodes" => node(o, name, age),
        "replicasets" => {
            let (spec, status) = (&o["spec"], &o["status"]);
            let mut row = vec![
                name,
                json!(int(&spec["replicas"])),
                json!(int(&status["replicas"])),
                json!(int(&status["readyReplicas"])),
                age,
            ];
            row.extend(template(o, true));
            row
        }
        "daemonsets" => {
            let status = &o["status"];
            let mut row = vec![name];
            for k in [
                "desiredNumberScheduled",
                "currentNumberScheduled",
                "numberReady",
                "updatedNumberScheduled",
                "numberAvailable",
            ] {
                row.push(json!(int(&status[k])));
            }
            row.push(json!(labels(
                &o["spec"]["template"]["spec"]["nodeSelector"]
            )));
            row.push(age);
            row.extend(template(o, true));
            row
        }
        "statefulsets" => {
            let ready = format!(
                "{}/{}",
                int(&o["status"]["readyReplicas"]),
                int(&o["spec"]["replicas"])
            );
            let mut row = vec![name, json!(ready), age];
            row.extend(template(o, false));
            row
        }
        "jobs" => job(profile, o, name, age, now),
        "endpointslices" => {
            let ports: Vec<String> = list(&o["ports"])
                .iter()
                .map(|p| match (p["port"].as_i64(), p["name"].as_str()) {
                    (Some(port), _) => port.to_string(),
                    (None, Some(name)) => name.to_string(),
                    (None, None) => "*".into(),
                })
                .collect();
            let addresses: Vec<String> = list(&o["endpoints"])
                .iter()
                .flat_map(|e| list(&e["addresses"]))
                .map(|a| s(a).to_string())
                .collect();
            vec![
                name,
                json!(s(&o["addressType"])),
                json!(at_most_three(&ports)),
                json!(at_most_three(&addresses)),
                age,
            ]
        }
        "serviceaccounts" => vec![name, json!(list(&o["secrets"]).len()), age],
        "events" => event(o, name, now),
        _ => vec![name, age],
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// A workload's wide columns: its template's containers' names and images, and (`selector`)
/// its label selector.
fn template(o: &Value, selector: bool) -> Vec<Value> {
    let containers = list(&o["spec"]["template"]["spec"]["containers"]);
    let joined = |k: &str| {
        let all: Vec<&str> = containers.iter().map(|c| s(&c[k])).collect();
        json!(all.join(","))
    };
    let mut out = vec![joined("name"), joined("image")];
    if selector {
        out.push(json!(labels(&o["spec"]["selector"]["matchLabels"])));
    }
    out
}

/// `listWithMoreString`: the first three, `+ N more...` after them, `<unset>` for none.
fn at_most_three(all: &[String]) -> String {
    match all.len() {
        0 => "<unset>".into(),
        n if n > 3 => format!("{} + {} more...", all[..3].join(","), n - 3),
        _ => all.join(","),
    }
}

fn job(profile: Profile, o: &Value, name: Value, age: Value, now: i64) -> Vec<Value> {
    let (spec, status) = (&o["spec"], &o["status"]);
    let succeeded = int(&status["succeeded"]);
    let completions = if !spec["completions"].is_null() {
        format!("{succeeded}/{}", int(&spec["completions"]))
    } else if int(&spec["parallelism"]) > 1 {
        format!("{succeeded}/1 of {}", int(&spec["parallelism"]))
    } else {
        format!("{succeeded}/1")
    };
    let duration = match (time(&status["startTime"]), time(&status["completionTime"])) {
        (None, _) => String::new(),
        (Some(start), None) => human(now - start),
        (Some(start), Some(end)) => human(end - start),
    };
    let has = |ty: &str| {
        list(&status["conditions"])
            .iter()
            .any(|c| s(&c["type"]) == ty && s(&c["status"]) == "True")
    };
    let mut row = vec![name];
    if profile.is_1_34() {
        let state = if has("Complete") {
            "Complete"
        } else if has("Failed") {
            "Failed"
        } else if !o["metadata"]["deletionTimestamp"].is_null() {
            "Terminating"
        } else if has("Suspended") {
            "Suspended"
        } else if has("FailureTarget") {
            "FailureTarget"
        } else if has("SuccessCriteriaMet") {
            "SuccessCriteriaMet"
        } else {
            "Running"
        };
        row.push(json!(state));
    }
    row.extend([json!(completions), json!(duration), age]);
    row.extend(template(o, true));
    row
}

fn event(o: &Value, name: Value, now: i64) -> Vec<Value> {
    let since = |v: &Value| age(v, now);
    let first = match time(&o["firstTimestamp"]) {
        Some(_) => since(&o["firstTimestamp"]),
        None => since(&o["eventTime"]),
    };
    let mut last = match time(&o["lastTimestamp"]) {
        Some(_) => since(&o["lastTimestamp"]),
        None => first.clone(),
    };
    let mut count = int(&o["count"]);
    if o["series"].is_object() {
        last = since(&o["series"]["lastObservedTime"]);
        count = int(&o["series"]["count"]);
    } else if count == 0 {
        count = 1;
    }
    let involved = &o["involvedObject"];
    let kind = s(&involved["kind"]).to_lowercase();
    let target = match s(&involved["name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let first_non_empty = |a: &Value, b: &Value| match s(a) {
        "" => s(b).to_string(),
        v => v.to_string(),
    };
    let component = first_non_empty(&o["source"]["component"], &o["reportingComponent"]);
    let instance = first_non_empty(&o["source"]["host"], &o["reportingInstance"]);
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(s(&o["type"])),
        json!(s(&o["reason"])),
        json!(target),
        json!(s(&involved["fieldPath"])),
        json!(source),
        json!(s(&o["message"]).trim()),
        json!(first),
        json!(count),
        name,
    ]
}

/// A finished Pod's row condition, as the apiserver marks it for `kubectl get`'s
/// `--show-all` filtering.
fn row_conditions(resource: &str, o: &Value) -> Option<Value> {
    let (reason, message) = match (resource, s(&o["status"]["phase"])) {
        ("pods", "Succeeded") => ("Succeeded", "The pod has completed successfully."),
        ("pods", "Failed") => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

fn service(o: &Value, name: Value, age: Value) -> Vec<Value> {
    let spec = &o["spec"];
    let ty = s(&spec["type"]);
    let cluster_ip = list(&spec["clusterIPs"])
        .first()
        .map(|v| s(v).to_string())
        .unwrap_or_else(|| or_none(s(&spec["clusterIP"])));
    let external: Vec<&str> = list(&spec["externalIPs"]).iter().map(s).collect();
    let external_ip = match ty {
        "ClusterIP" | "NodePort" | "" => or_none(&external.join(",")),
        "LoadBalancer" => {
            let mut ips: Vec<&str> = list(&o["status"]["loadBalancer"]["ingress"])
                .iter()
                .map(|i| {
                    let ip = s(&i["ip"]);
                    if ip.is_empty() {
                        s(&i["hostname"])
                    } else {
                        ip
                    }
                })
                .filter(|v| !v.is_empty())
                .collect();
            ips.extend(&external);
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => s(&spec["externalName"]).to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = list(&spec["ports"])
        .iter()
        .map(|p| {
            let proto = s(&p["protocol"]);
            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(node_port) => format!("{}:{node_port}/{proto}", p["port"]),
                None => format!("{}/{proto}", p["port"]),
            }
        })
        .collect();
    vec![
        name,
        json!(ty),
        json!(cluster_ip),
        json!(external_ip),
        json!(or_none(&ports.join(","))),
        age,
        json!(labels(&spec["selector"])),
    ]
}

fn pod(o: &Value, name: Value, age: Value, now: i64) -> Vec<Value> {
    let (spec, status) = (&o["spec"], &o["status"]);
    let total = list(&spec["containers"]).len();
    let mut reason = s(&status["phase"]).to_string();
    if !s(&status["reason"]).is_empty() {
        reason = s(&status["reason"]).to_string();
    }
    let (mut restarts, mut ready) = (0, 0);
    let mut last_restart: Option<i64> = None;
    let mut note_restart = |c: &Value| {
        if let Some(t) = time(&c["lastState"]["terminated"]["finishedAt"]) {
            last_restart = Some(last_restart.map_or(t, |l: i64| l.max(t)));
        }
    };
    let mut initializing = false;
    let inits = list(&status["initContainerStatuses"]);
    for (i, c) in inits.iter().enumerate() {
        restarts += c["restartCount"].as_i64().unwrap_or(0);
        note_restart(c);
        let (terminated, waiting) = (&c["state"]["terminated"], &c["state"]["waiting"]);
        if !terminated.is_null() && terminated["exitCode"].as_i64() == Some(0) {
            continue;
        }
        initializing = true;
        reason = if !terminated.is_null() {
            match (s(&terminated["reason"]), terminated["signal"].as_i64()) {
                ("", Some(sig)) if sig != 0 => format!("Init:Signal:{sig}"),
                ("", _) => format!("Init:ExitCode:{}", terminated["exitCode"]),
                (r, _) => format!("Init:{r}"),
            }
        } else if !matches!(s(&waiting["reason"]), "" | "PodInitializing") {
            format!("Init:{}", s(&waiting["reason"]))
        } else {
            format!("Init:{i}/{}", list(&spec["initContainers"]).len())
        };
        break;
    }
    if !initializing {
        restarts = 0;
        let mut running = false;
        for c in list(&status["containerStatuses"]).iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            note_restart(c);
            let (terminated, waiting) = (&c["state"]["terminated"], &c["state"]["waiting"]);
            if !s(&waiting["reason"]).is_empty() {
                reason = s(&waiting["reason"]).to_string();
            } else if !s(&terminated["reason"]).is_empty() {
                reason = s(&terminated["reason"]).to_string();
            } else if !terminated.is_null() {
                reason = match terminated["signal"].as_i64() {
                    Some(sig) if sig != 0 => format!("Signal:{sig}"),
                    _ => format!("ExitCode:{}", terminated["exitCode"]),
                };
            } else if c["ready"].as_bool() == Some(true) && !c["state"]["running"].is_null() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let is_ready = list(&status["conditions"])
                .iter()
                .any(|c| s(&c["type"]) == "Ready" && s(&c["status"]) == "True");
            reason = if is_ready { "Running" } else { "NotReady" }.into();
        }
    }
    if !o["metadata"]["deletionTimestamp"].is_null() {
        reason = if s(&status["reason"]) == "NodeLost" {
            "Unknown"
        } else {
            "Terminating"
        }
        .into();
    }
    let restarts = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", human(now - t)),
        _ => restarts.to_string(),
    };
    let gates = list(&spec["readinessGates"]);
    let gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = list(&status["conditions"]);
        let met = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .any(|c| s(&c["type"]) == s(&g["conditionType"]) && s(&c["status"]) == "True")
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    vec![
        name,
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        age,
        json!(or_none(s(&status["podIP"]))),
        json!(or_none(s(&spec["nodeName"]))),
        json!(or_none(s(&status["nominatedNodeName"]))),
        json!(gates),
    ]
}

fn deployment(o: &Value, name: Value, age: Value) -> Vec<Value> {
    let (spec, status) = (&o["spec"], &o["status"]);
    let containers = list(&spec["template"]["spec"]["containers"]);
    let joined = |k: &str| {
        let all: Vec<&str> = containers.iter().map(|c| s(&c[k])).collect();
        all.join(",")
    };
    vec![
        name,
        json!(format!(
            "{}/{}",
            int(&status["readyReplicas"]),
            int(&spec["replicas"])
        )),
        json!(int(&status["updatedReplicas"])),
        json!(int(&status["availableReplicas"])),
        age,
        json!(joined("name")),
        json!(joined("image")),
        json!(labels(&spec["selector"]["matchLabels"])),
    ]
}

fn node(o: &Value, name: Value, age: Value) -> Vec<Value> {
    let status = &o["status"];
    let ready = list(&status["conditions"])
        .iter()
        .find(|c| s(&c["type"]) == "Ready")
        .map(|c| s(&c["status"]));
    let mut state = match ready {
        Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }
    .to_string();
    if o["spec"]["unschedulable"].as_bool() == Some(true) {
        state.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = o["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) => Some(role),
            None if k == "kubernetes.io/role" => v.as_str(),
            None => None,
        })
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let address = |ty: &str| {
        list(&status["addresses"])
            .iter()
            .find(|a| s(&a["type"]) == ty)
            .map_or("<none>".to_string(), |a| s(&a["address"]).to_string())
    };
    let info = &status["nodeInfo"];
    let or_unknown = |v: &Value| match s(v) {
        "" => "<unknown>".to_string(),
        v => v.to_string(),
    };
    vec![
        name,
        json!(state),
        json!(or_none(&roles.join(","))),
        age,
        json!(s(&info["kubeletVersion"])),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(or_unknown(&info["osImage"])),
        json!(or_unknown(&info["kernelVersion"])),
        json!(or_unknown(&info["containerRuntimeVersion"])),
    ]
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn list(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

fn or_none(v: &str) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v.into()
    }
}

/// `labels.FormatLabels`: `k=v` sorted by key, comma-separated; `<none>` for none.
fn labels(v: &Value) -> String {
    let mut pairs: Vec<String> = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", s(v)))
        .collect();
    pairs.sort();
    or_none(&pairs.join(","))
}

/// `translateTimestampSince`: `<unknown>` for an absent time.
fn age(created: &Value, now: i64) -> String {
    match time(created) {
        Some(t) => human(now - t),
        None => "<unknown>".into(),
    }
}

fn unix_seconds(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// An RFC 3339 time (`2026-11-22T09:58:07Z`, the form the sim stores) in Unix seconds.
fn time(v: &Value) -> Option<i64> {
    let t = v.as_str()?;
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[10] != b'T' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss) = (n(11..13)?, n(14..16)?, n(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// `duration.HumanDuration` of `secs` seconds.
fn human(secs: i64) -> String {
    let (minutes, hours) = (secs / 60, secs / 3600);
    match secs {
        _ if secs < -1 => "<invalid>".into(),
        _ if secs < 0 => "0s".into(),
        _ if secs < 120 => format!("{secs}s"),
        _ if minutes < 10 => match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        },
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        },
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 192 => match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        },
        _ if hours < 24 * 365 * 2 => format!("{}d", hours / 24),
        _ if hours < 24 * 365 * 8 => match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        },
        _ => format!("{}y", hours / 24 / 365),
    }
}

#[cfg(test)]
mod tests;
