//! The sim's Tables beyond lists (what `kubectl get NAME` and `kubectl get -w` ask for)
//! compared with the recordings of each upstream profile: the named GETs of a Pod, a
//! ConfigMap, a Namespace and a custom resource, the 404 of a missing object, a watch that
//! replays the recorded writes, and the too-old watch. Each answer is the recorded request's
//! (its path and `Accept`); what changes per run (resourceVersions, uids, timestamps, AGE
//! cells) is normalised, everything else is compared as the client reads it: status,
//! `Content-Type`, kind, `columnDefinitions`, cells, and each row's object, key order included.

#[path = "sim_common/mod.rs"]
mod common;

use common::*;
use kcache_sim::{Profile, ResourceType, Sim};
use serde_json::{json, Value};
use std::time::Duration;

const CMS_A: &str = "/api/v1/namespaces/fixtures-a/configmaps";

/// The `Accept` header of a recorded request.
fn recorded_accept(p: Profile, name: &str) -> String {
    fixture_in(p, &format!("{name}.http"))
        .lines()
        .skip_while(|l| !l.starts_with("### request"))
        .take_while(|l| !l.starts_with("### response"))
        .find_map(|l| l.strip_prefix("Accept: "))
        .unwrap_or_else(|| panic!("{name}.http: no Accept header"))
        .to_string()
}

/// A GET of `path` asking for `accept` (a recorded request's `Accept`), as kubectl sends it.
async fn get_as(addr: std::net::SocketAddr, path: &str, accept: &str, max: Duration) -> Resp {
    request(addr, "GET", path, &[("Accept", accept)], b"", max).await
}

/// A recorded response header.
fn recorded_header(p: Profile, name: &str, header: &str) -> Option<String> {
    let prefix = format!("{header}: ");
    fixture_in(p, &format!("{name}.http"))
        .lines()
        .skip_while(|l| !l.starts_with("### response"))
        .take_while(|l| !l.starts_with("### timeline"))
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_string))
}

/// The seeded sim of the fixtures, serving what the recordings' apiserver prints: the
/// profile's built-in columns, the Widget CRD (its printer columns) with the recorded Widget
/// columns, and the recorded `fixtures-a` Namespace.
async fn sim_with_tables(p: Profile) -> Sim {
    let sim = seeded(profile_cfg(p)).await;
    kcache_sim::table_columns::serve_builtin(&sim);
    let widget_table: Value =
        serde_json::from_str(&fixture_in(p, "table-get-widget.json")).unwrap();
    sim.serve_table_columns(
        "fixtures.example.com",
        "widgets",
        serde_json::to_vec(&widget_table["columnDefinitions"])
            .unwrap()
            .into(),
    );
    sim.register(ResourceType::custom_resource_definitions());
    for (group, resource, recorded) in [
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "get-crd.json",
        ),
        ("", "namespaces", "get-namespace.json"),
    ] {
        let obj: Value = serde_json::from_str(&fixture_in(p, recorded)).unwrap();
        sim.create(group, resource, strip_server_fields(obj))
            .unwrap();
    }
    sim
}

/// The index of the `Age` column among a Table's columns.
fn age_column(table: &Value) -> usize {
    table["columnDefinitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no columns: {table}"))
        .iter()
        .position(|c| c["name"] == "Age")
        .expect("an Age column")
}

/// A Table as compared across servers: its `age` cells masked, then per-run values normalised
/// (and `managedFields`, which the sim does not keep, dropped when `keep_managed` is false).
fn comparable(table: &Value, age: usize, keep_managed: bool) -> String {
    let mut t = table.clone();
    for row in t["rows"].as_array_mut().into_iter().flatten() {
        row["cells"][age] = json!("AGE");
        if !keep_managed {
            if let Some(meta) = row["object"]["metadata"].as_object_mut() {
                meta.remove("managedFields");
            }
        }
    }
    normalize(&serde_json::to_string(&t).unwrap(), None)
}

per_profile!(named_gets_as_tables_match_the_recordings);

/// `kubectl get pod pod-1a` and the like: one row at the object's resourceVersion, the
/// columns of the kind (a custom resource's from its CRD), `includeObject` Metadata, and the
/// plain 404 Status for a missing object.
async fn named_gets_as_tables_match_the_recordings(p: Profile) {
    let sim = sim_with_tables(p).await;
    for name in [
        "table-get-pod",
        "table-get-cm",
        "table-get-namespace",
        "table-get-widget",
        "err-table-get-cm-missing",
    ] {
        let (method, path) = fixture_request_in(p, name);
        let accept = recorded_accept(p, name);
        let r = request(
            sim.addr(),
            &method,
            &path,
            &[("Accept", &accept)],
            b"",
            Duration::from_secs(10),
        )
        .await;
        let what = format!("{p} {name} ({method} {path})");
        assert_eq!(r.status, fixture_status_in(p, name), "{what}: {}", r.text());
        assert_eq!(
            r.header("content-type").map(str::to_string),
            recorded_header(p, name, "Content-Type"),
            "{what}"
        );
        let want = fixture_in(p, &format!("{name}.json"));
        if r.status != 200 {
            assert_eq!(r.text(), want, "{what}");
            continue;
        }
        let (got, want): (Value, Value) = (r.json(), serde_json::from_str(&want).unwrap());
        assert_eq!(got["kind"], "Table", "{what}");
        assert_eq!(
            got["columnDefinitions"], want["columnDefinitions"],
            "{what}"
        );
        let object = &got["rows"][0]["object"];
        assert_eq!(
            got["metadata"],
            json!({"resourceVersion": object["metadata"]["resourceVersion"]}),
            "{what}: the Table's resourceVersion is the object's"
        );
        let age = age_column(&want);
        assert_eq!(
            comparable(&got, age, true),
            comparable(&want, age, true),
            "{what}"
        );
    }
    // `includeObject` as asked (the recordings show it on lists only).
    let cm = "/api/v1/namespaces/fixtures-a/configmaps/cm-03";
    let accept = recorded_accept(p, "table-get-cm");
    for (include, object_kind) in [("None", Value::Null), ("Object", json!("ConfigMap"))] {
        let r = get_as(
            sim.addr(),
            &format!("{cm}?includeObject={include}"),
            &accept,
            Duration::from_secs(10),
        )
        .await;
        let t = r.json();
        let object = &t["rows"][0]["object"];
        assert_eq!(
            object.get("kind").cloned().unwrap_or(Value::Null),
            object_kind,
            "{include}"
        );
    }
}

/// The writes of the recorded timeline of `table-watch-cm-ns-a-from-list-rv`, in its words
/// (checked against the `.http` file's `->` lines), each with the request that makes it.
fn timeline_writes() -> Vec<(&'static str, &'static str, String, Value)> {
    let cm = |name: &str| format!("{CMS_A}/{name}");
    let labels = |app: &str| json!({"metadata": {"labels": {"app": app}}});
    vec![
        (
            "kubectl create cm watch-new-1 (no labels), then kubectl label cm watch-new-1 app=web",
            "POST",
            CMS_A.into(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watch-new-1"}, "data": {"k": "v1"}}),
        ),
        ("", "PATCH", cm("watch-new-1"), labels("web")),
        (
            "kubectl create cm watch-new-2 (labels app=db)",
            "POST",
            CMS_A.into(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watch-new-2", "labels": {"app": "db"}}, "data": {"k": "v1"}}),
        ),
        (
            "patch cm watch-new-1 data k=v2 (still app=web)",
            "PATCH",
            cm("watch-new-1"),
            json!({"data": {"k": "v2"}}),
        ),
        (
            "label cm watch-new-1 app=api --overwrite (stops matching app=web)",
            "PATCH",
            cm("watch-new-1"),
            labels("api"),
        ),
        (
            "label cm watch-new-2 app=web --overwrite (starts matching app=web)",
            "PATCH",
            cm("watch-new-2"),
            labels("web"),
        ),
        (
            "delete cm watch-new-1",
            "DELETE",
            cm("watch-new-1"),
            Value::Null,
        ),
        (
            "delete cm watch-new-2",
            "DELETE",
            cm("watch-new-2"),
            Value::Null,
        ),
    ]
}

/// The events of a watch body.
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

per_profile!(table_watch_replays_the_recorded_timeline);

/// `kubectl get cm -w` after its list: every event's object a one-row Table at the object's
/// resourceVersion, only the first with the columns, rows' objects PartialObjectMetadata
/// (`includeObject` unset), DELETED with the object's last state, as recorded.
async fn table_watch_replays_the_recorded_timeline(p: Profile) {
    let name = "table-watch-cm-ns-a-from-list-rv";
    let http = fixture_in(p, &format!("{name}.http"));
    let recorded_actions: Vec<&str> = http
        .lines()
        .filter_map(|l| l.strip_prefix("-> +"))
        .map(|l| l.split_once("  ").unwrap().1)
        .collect();
    let writes = timeline_writes();
    let said: Vec<&str> = writes
        .iter()
        .map(|w| w.0)
        .filter(|w| !w.is_empty())
        .collect();
    assert_eq!(
        said, recorded_actions,
        "{p}: the recorded timeline's writes"
    );

    let sim = sim_with_tables(p).await;
    // kubectl watches from its list's resourceVersion.
    let (_, recorded_path) = fixture_request_in(p, name);
    let list_rv = sim.current_rv();
    let path = recorded_path.replace(
        &format!("resourceVersion={}", recorded_rv(&recorded_path)),
        &format!("resourceVersion={list_rv}"),
    );
    let accept = recorded_accept(p, name);
    let addr = sim.addr();
    let watch =
        tokio::spawn(async move { get_as(addr, &path, &accept, Duration::from_secs(3)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (_, method, path, body) in &writes {
        let (body, content_type) = match *method {
            "POST" => (serde_json::to_vec(body).unwrap(), "application/json"),
            "PATCH" => (
                serde_json::to_vec(body).unwrap(),
                "application/merge-patch+json",
            ),
            _ => (Vec::new(), "application/json"),
        };
        let r = request(
            sim.addr(),
            method,
            path,
            &[("Content-Type", content_type)],
            &body,
            Duration::from_secs(5),
        )
        .await;
        assert!(r.status < 300, "{method} {path}: {}", r.text());
    }
    let r = watch.await.unwrap();
    assert_eq!(r.status, 200, "{p}: {}", r.text());
    assert_eq!(
        r.header("content-type").map(str::to_string),
        recorded_header(p, name, "Content-Type")
    );
    let (got, want) = (
        events(&r.text()),
        events(&fixture_in(p, &format!("{name}.json"))),
    );
    let types = |evs: &[Value]| -> Vec<String> {
        evs.iter()
            .map(|e| format!("{} {}", e["type"], e["object"]["rows"][0]["cells"][0]))
            .collect()
    };
    assert_eq!(types(&got), types(&want), "{p}: the events");
    let age = age_column(&want[0]["object"]);
    let mut last_rv = list_rv;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let (g, w) = (&g["object"], &w["object"]);
        let what = format!("{p} event {i}");
        if i == 0 {
            assert_eq!(g["columnDefinitions"], w["columnDefinitions"], "{what}");
        } else {
            assert_eq!(g["columnDefinitions"], Value::Null, "{what}");
        }
        // The Table's resourceVersion is its object's, each newer than the last.
        for t in [g, w] {
            assert_eq!(
                t["metadata"],
                json!({"resourceVersion": t["rows"][0]["object"]["metadata"]["resourceVersion"]}),
                "{what}"
            );
        }
        let rv: u64 = g["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv > last_rv, "{what}: resourceVersion {rv} after {last_rv}");
        last_rv = rv;
        // The sim keeps no field managers of its own: managedFields are left out.
        assert_eq!(
            comparable(g, age, false),
            comparable(w, age, false),
            "{what}"
        );
    }
}

/// The `resourceVersion` of a request path.
fn recorded_rv(path: &str) -> &str {
    let q = path.split_once("resourceVersion=").unwrap().1;
    &q[..q.find('&').unwrap_or(q.len())]
}

per_profile!(too_old_table_watch_is_the_plain_error_event);

/// A Table watch from a resourceVersion the watch cache no longer holds: the ERROR event
/// carries the plain Status (no Table), and the stream ends. v1.34's ConfigMap recording
/// replays history instead (its cache still reached RV 1: the recording's environment), so
/// v1.34 is held to the Widget one; its history replay is checked in
/// `table_watch_history_is_replayed_as_tables`.
async fn too_old_table_watch_is_the_plain_error_event(p: Profile) {
    let sim = sim_with_tables(p).await;
    sim.compact();
    let floor = sim.current_rv();
    let name = match p {
        Profile::V1_28 => "err-table-watch-cm-rv1-too-old",
        Profile::V1_34 => "err-table-watch-widgets-rv1-too-old",
    };
    let (_, path) = fixture_request_in(p, name);
    let r = get_as(
        sim.addr(),
        &path,
        &recorded_accept(p, name),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, fixture_status_in(p, name), "{name}");
    assert!(r.clean_end, "{name}: the stream ends after the ERROR event");
    let recorded = fixture_in(p, &format!("{name}.json"));
    let at = recorded.find(" (").unwrap();
    let recorded_floor = &recorded[at + 2..at + 2 + recorded[at + 2..].find(')').unwrap()];
    let want = recorded.replace(&format!("({recorded_floor})"), &format!("({floor})"));
    assert_eq!(r.text(), want, "{name}");
}

/// v1.34's `err-table-watch-cm-rv1-too-old`: a cache that still reaches RV 1 replays the
/// namespace's ConfigMap history as Table events (the first with the columns) and keeps the
/// stream open. The recorder's own earlier writes are its environment; the seeded ConfigMaps'
/// ADDED events are compared with the recorded ones.
#[tokio::test]
async fn table_watch_history_is_replayed_as_tables() {
    let p = Profile::V1_34;
    set_profile(p);
    let name = "err-table-watch-cm-rv1-too-old";
    let sim = sim_with_tables(p).await;
    let (_, path) = fixture_request_in(p, name);
    let r = get_as(
        sim.addr(),
        &path,
        &recorded_accept(p, name),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(r.status, fixture_status_in(p, name));
    assert!(!r.clean_end, "the stream stays open");
    let (got, want) = (
        events(&r.text()),
        events(&fixture_in(p, &format!("{name}.json"))),
    );
    assert_eq!(
        got[0]["object"]["columnDefinitions"],
        want[0]["object"]["columnDefinitions"]
    );
    assert!(got[1..]
        .iter()
        .chain(&want[1..])
        .all(|e| e["object"]["columnDefinitions"].is_null()));
    let age = age_column(&want[0]["object"]);
    // The ConfigMaps of the fixtures (`cm-01`..`cm-25`) as created: the recording's other
    // events are the recorder's own writes before and after seeding them.
    let seeded_name = |e: &Value| {
        let name = e["object"]["rows"][0]["cells"][0]
            .as_str()
            .unwrap_or_default();
        name.len() == 5 && name.starts_with("cm-") && name[3..].bytes().all(|b| b.is_ascii_digit())
    };
    let added = |evs: &[Value]| -> Vec<String> {
        evs.iter()
            .filter(|e| e["type"] == "ADDED" && seeded_name(e))
            .map(|e| {
                let mut t = e["object"].clone();
                t["columnDefinitions"] = Value::Null;
                comparable(&t, age, false)
            })
            .collect()
    };
    let want = added(&want);
    assert_eq!(want.len(), 25);
    assert_eq!(added(&got), want);
}
