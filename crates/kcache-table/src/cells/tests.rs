use super::*;

fn now() -> i128 {
    parse_time("2026-11-22T10:00:00Z").unwrap()
}

fn status(pod: Value) -> (String, String, String) {
    super::super::project::assert_same_row(Builtin::Pod, &pod, now());
    let s = pod_summary(&pod, now());
    (s.ready, s.status, s.restarts)
}

fn strs(a: &str, b: &str, c: &str) -> (String, String, String) {
    (a.to_string(), b.to_string(), c.to_string())
}

#[test]
fn pending_pod() {
    let pod = json!({"spec": {"containers": [{"name": "main"}]}, "status": {"phase": "Pending"}});
    assert_eq!(status(pod), strs("0/1", "Pending", "0"));
}

#[test]
fn container_creating_and_crash_loop() {
    let pod = json!({
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": "Pending", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ContainerCreating"}}},
            {"name": "b", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ContainerCreating"}}},
        ]},
    });
    assert_eq!(status(pod), strs("0/2", "ContainerCreating", "0"));

    let pod = json!({
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-22T09:00:00Z"}}},
            {"name": "b", "ready": false, "restartCount": 5,
             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-22T09:57:30Z"}}},
        ]},
    });
    assert_eq!(
        status(pod),
        strs("1/2", "CrashLoopBackOff", "6 (2m30s ago)")
    );
}

#[test]
fn completed_and_not_ready() {
    let pod = json!({
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        ]},
    });
    assert_eq!(status(pod.clone()), strs("0/1", "Completed", "0"));
    let row = super::pod(&pod, now());
    assert_eq!(
        row.conditions,
        Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                         "message": "The pod has completed successfully."}])
        )
    );

    // One container completed, another still running: NotReady without a Ready condition,
    // Running with one.
    let mut pod = json!({
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "b", "ready": true, "restartCount": 0, "state": {"running": {}}},
        ]},
    });
    // Statuses are walked from the last: b (running) then a (Completed).
    assert_eq!(status(pod.clone()), strs("1/2", "NotReady", "0"));
    pod["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    assert_eq!(status(pod), strs("1/2", "Running", "0"));
}

#[test]
fn init_containers() {
    let pod = json!({
        "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "a"}]},
        "status": {"phase": "Pending",
            "initContainerStatuses": [{"name": "init", "ready": false, "restartCount": 0,
                "state": {"running": {}}}],
            "containerStatuses": [{"name": "a", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}}}]},
    });
    assert_eq!(status(pod), strs("0/1", "Init:0/1", "0"));

    let pod = json!({
        "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "a"}]},
        "status": {"phase": "Pending",
            "initContainerStatuses": [{"name": "init", "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    });
    assert_eq!(status(pod), strs("0/1", "Init:CrashLoopBackOff", "3"));

    let pod = json!({
        "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "a"}]},
        "status": {"phase": "Failed",
            "initContainerStatuses": [{"name": "init", "restartCount": 0,
                "state": {"terminated": {"exitCode": 2}}}]},
    });
    assert_eq!(status(pod), strs("0/1", "Init:ExitCode:2", "0"));
}

#[test]
fn sidecar_init_containers_count() {
    let pod = json!({
        "spec": {"initContainers": [{"name": "side", "restartPolicy": "Always"}],
                 "containers": [{"name": "a"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}],
            "initContainerStatuses": [{"name": "side", "ready": true, "started": true,
                "restartCount": 2, "state": {"running": {}}}],
            "containerStatuses": [{"name": "a", "ready": true, "restartCount": 0,
                "state": {"running": {}}}]},
    });
    assert_eq!(status(pod), strs("2/2", "Running", "2"));
}

#[test]
fn terminating_and_unknown() {
    let pod = json!({
        "metadata": {"deletionTimestamp": "2026-11-22T09:59:00Z"},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}}]},
    });
    assert_eq!(status(pod), strs("1/1", "Terminating", "0"));
    let pod = json!({
        "metadata": {"deletionTimestamp": "2026-11-22T09:59:00Z"},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Running", "reason": "NodeLost"},
    });
    assert_eq!(status(pod), strs("0/1", "Unknown", "0"));
}

#[test]
fn scheduling_gated() {
    let pod = json!({
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
    });
    assert_eq!(status(pod), strs("0/1", "SchedulingGated", "0"));
}

#[test]
fn selectors() {
    assert_eq!(
        selector_string(&json!({"matchLabels": {"b": "2", "a": "1"}})),
        Ok("a=1,b=2".to_string())
    );
    assert_eq!(
        selector_string(&json!({"matchLabels": {"app": "x"}, "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["web", "api"]},
                {"key": "env", "operator": "NotIn", "values": ["dev"]},
                {"key": "z", "operator": "Exists"},
                {"key": "gone", "operator": "DoesNotExist"}]})),
        Ok("app=x,env notin (dev),!gone,tier in (api,web),z".to_string())
    );
    assert_eq!(selector_string(&json!({})), Ok(String::new()));
    assert_eq!(format_label_selector(&json!({})), "<none>");
    assert_eq!(
        format_label_selector(&json!({"matchExpressions": [{"key": "a", "operator": "Bad"}]})),
        "<error>"
    );
    assert_eq!(format_labels(&json!({"b": "2", "a": "1"})), "a=1,b=2");
    assert_eq!(format_labels(&Value::Null), "<none>");
}

#[test]
fn nodes_and_workloads() {
    let n = json!({
        "metadata": {"name": "n1", "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "edge"}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "False"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.28.7", "osImage": "Debian"}},
    });
    let cells: Vec<Value> = row(Builtin::Node, &n, now())
        .cells
        .into_iter()
        .map(|c| c.1)
        .collect();
    assert_eq!(
        cells,
        vec![
            json!("n1"),
            json!("NotReady,SchedulingDisabled"),
            json!("control-plane,edge"),
            json!("2d"),
            json!("v1.28.7"),
            json!("10.0.0.1"),
            json!("<none>"),
            json!("Debian"),
            json!("<unknown>"),
            json!("<unknown>"),
        ]
    );
    let d = json!({
        "metadata": {"name": "web", "creationTimestamp": "2026-11-22T07:00:00Z"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": {"containers": [
                {"name": "a", "image": "nginx:1"}, {"name": "b", "image": "busybox"}]}}},
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    });
    let cells: Vec<Value> = row(Builtin::Deployment, &d, now())
        .cells
        .into_iter()
        .map(|c| c.1)
        .collect();
    assert_eq!(
        cells,
        vec![
            json!("web"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("3h"),
            json!("a,b"),
            json!("nginx:1,busybox"),
            json!("app=web"),
        ]
    );
    let j = json!({
        "metadata": {"name": "j", "creationTimestamp": "2026-11-22T09:00:00Z"},
        "spec": {"parallelism": 2},
        "status": {"succeeded": 1, "startTime": "2026-11-22T09:00:05Z",
            "completionTime": "2026-11-22T09:03:17Z",
            "conditions": [{"type": "Complete", "status": "True"}]},
    });
    let cells: Vec<Value> = row(Builtin::Job, &j, now())
        .cells
        .into_iter()
        .map(|c| c.1)
        .collect();
    assert_eq!(
        &cells[..5],
        &[
            json!("j"),
            json!("Complete"),
            json!("1/1 of 2"),
            json!("3m12s"),
            json!("60m")
        ]
    );
}

#[test]
fn events_and_slices() {
    let e = json!({
        "metadata": {"name": "pod-a.123"},
        "involvedObject": {"kind": "Pod", "name": "pod-a", "fieldPath": "spec.containers{a}"},
        "reason": "Pulled", "message": " pulled \n", "type": "Normal",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2026-11-22T09:50:00Z", "lastTimestamp": "2026-11-22T09:59:00Z",
        "count": 3,
    });
    let cells: Vec<Value> = row(Builtin::Event, &e, now())
        .cells
        .into_iter()
        .map(|c| c.1)
        .collect();
    assert_eq!(
        cells,
        vec![
            json!("60s"),
            json!("Normal"),
            json!("Pulled"),
            json!("pod/pod-a"),
            json!("spec.containers{a}"),
            json!("kubelet, node-1"),
            json!("pulled"),
            json!("10m"),
            json!(3),
            json!("pod-a.123"),
        ]
    );
    let v1 = json!({
        "metadata": {"name": "x"}, "regarding": {"kind": "Node", "name": "n"},
        "reason": "R", "note": "n", "type": "Warning",
        "eventTime": "2026-11-22T09:59:30.000000Z",
        "reportingController": "ctl", "reportingInstance": "ctl-1",
    });
    let cells: Vec<Value> = row(Builtin::EventV1, &v1, now())
        .cells
        .into_iter()
        .map(|c| c.1)
        .collect();
    assert_eq!(cells[0], json!("30s"));
    assert_eq!(cells[3], json!("node/n"));
    assert_eq!(cells[5], json!("ctl, ctl-1"));
    assert_eq!(cells[8], json!(1));

    let s = json!({
        "metadata": {"name": "web-abc"}, "addressType": "IPv4",
        "ports": [{"port": 80}, {"name": "x"}, {}, {"port": 8080}],
        "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3", "10.0.0.4"]}],
    });
    let cells: Vec<Value> = row(Builtin::EndpointSlice, &s, now())
        .cells
        .into_iter()
        .map(|c| c.1)
        .collect();
    assert_eq!(cells[2], json!("80,x,* + 1 more..."));
    assert_eq!(cells[3], json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more..."));
    let empty = json!({"metadata": {"name": "e"}, "addressType": "IPv4"});
    let cells: Vec<Value> = row(Builtin::EndpointSlice, &empty, now())
        .cells
        .into_iter()
        .map(|c| c.1)
        .collect();
    assert_eq!(cells[2], json!("<unset>"));
    assert_eq!(cells[4], json!("<unknown>"));
}

#[test]
fn services() {
    let lb = json!({
        "metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.5",
            "ports": [{"port": 443, "nodePort": 30443, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}, {"hostname": "a.example"}]}},
    });
    let cells: Vec<Value> = row(Builtin::Service, &lb, now())
        .cells
        .into_iter()
        .map(|c| c.1)
        .collect();
    assert_eq!(cells[3], json!("1.2.3.4,a.example"));
    assert_eq!(cells[4], json!("443:30443/TCP"));
    assert_eq!(cells[6], json!("<none>"));
    let pending = json!({"spec": {"type": "LoadBalancer"}});
    assert_eq!(service_external_ip(&pending), "<pending>");
    let ext = json!({"spec": {"type": "ExternalName", "externalName": "db.example"}});
    assert_eq!(service_external_ip(&ext), "db.example");
}
