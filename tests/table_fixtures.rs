//! The Table printer against the kube-apiserver recordings of each upstream profile (v1.28,
//! v1.34): every `table-*` fixture whose objects were recorded too is rebuilt from those
//! objects (with the fixture's own `columnDefinitions` and `now` = its `Date` header) and
//! compared byte for byte; so are the Table watch, one line at a time, and the
//! PartialObjectMetadata fixtures. Each test runs once per profile (`v1_28`, `v1_34`), reading
//! that profile's folder.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kcache::table::{
    partial_object_metadata, partial_object_metadata_list, IncludeObject, Printer, RowSlot,
};
use serde_json::value::RawValue;
use serde_json::Value;

use kcache_sim::Profile;
use std::cell::Cell;

thread_local! {
    /// The profile whose recordings the running test reads (set by `per_profile!`).
    static PROFILE: Cell<Profile> = const { Cell::new(Profile::V1_28) };
}

/// One recorded file of the running test's profile.
fn read(name: &str) -> Vec<u8> {
    kcache_sim::recordings::read_in(PROFILE.get(), name)
}

/// One `#[test]` per profile for each named `fn NAME()`: a module `NAME` with `v1_28` and
/// `v1_34`, each running the body with that profile's recordings.
macro_rules! per_profile {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn v1_28() {
                super::PROFILE.set(kcache_sim::Profile::V1_28);
                super::$name()
            }
            #[test]
            fn v1_34() {
                super::PROFILE.set(kcache_sim::Profile::V1_34);
                super::$name()
            }
        }
    )*};
}

per_profile!(
    pod_tables,
    configmap_tables,
    widget_tables,
    service_and_namespace_tables,
    secret_and_namespace_list_tables,
    table_watch_events,
    partial_object_metadata_fixtures,
);

fn http(name: &str) -> String {
    String::from_utf8(read(&format!("{name}.http"))).unwrap()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

fn at(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, millis: u64) -> SystemTime {
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s;
    UNIX_EPOCH + Duration::from_secs(secs as u64) + Duration::from_millis(millis)
}

/// The response's `Date:` header (`Sun, 22 Nov 2026 09:59:50 GMT`).
fn date_header(name: &str) -> SystemTime {
    let text = http(name);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Date: "))
        .unwrap_or_else(|| panic!("{name}.http has no Date header"));
    let parts: Vec<&str> = line.split_whitespace().collect();
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == parts[2])
    .unwrap() as i64
        + 1;
    let hms: Vec<i64> = parts[4].split(':').map(|p| p.parse().unwrap()).collect();
    at(
        parts[3].parse().unwrap(),
        month,
        parts[1].parse().unwrap(),
        hms[0],
        hms[1],
        hms[2],
        0,
    )
}

/// The `includeObject` of the fixture's request.
fn include_of(name: &str) -> IncludeObject {
    let text = http(name);
    let line = text
        .lines()
        .skip_while(|l| !l.starts_with("### request"))
        .nth(1)
        .unwrap()
        .to_string();
    let value = line
        .split(['?', '&', ' '])
        .find_map(|kv| kv.strip_prefix("includeObject="));
    IncludeObject::parse(value).unwrap()
}

#[derive(serde::Deserialize)]
struct TableParts<'a> {
    #[serde(borrow, rename = "columnDefinitions")]
    column_definitions: &'a RawValue,
    metadata: ListMeta,
}

#[derive(serde::Deserialize, Default)]
struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default)]
    r#continue: Option<String>,
    #[serde(default, rename = "remainingItemCount")]
    remaining_item_count: Option<u64>,
}

#[derive(serde::Deserialize)]
struct ListParts<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

/// Objects of a list fixture, full (typed list items get their `kind`/`apiVersion` back).
fn list_objects(name: &str, kind_api_version: Option<(&str, &str)>) -> Vec<Vec<u8>> {
    let body = read(name);
    let list: ListParts = serde_json::from_slice(&body).unwrap();
    list.items
        .iter()
        .map(|item| full_object(item.get().as_bytes(), kind_api_version))
        .collect()
}

fn full_object(item: &[u8], kind_api_version: Option<(&str, &str)>) -> Vec<u8> {
    match kind_api_version {
        None => item.to_vec(),
        Some((kind, api_version)) => {
            let mut out =
                format!(r#"{{"kind":"{kind}","apiVersion":"{api_version}","#).into_bytes();
            out.extend_from_slice(&item[1..]);
            out
        }
    }
}

/// The Widget CRD's v1 printer columns.
fn widget_columns() -> Value {
    let crd: Value = serde_json::from_slice(&read("get-crd.json")).unwrap();
    crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1")
        .unwrap()["additionalPrinterColumns"]
        .clone()
}

fn assert_same(name: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let from = at.saturating_sub(150);
    panic!(
        "{name}: bodies differ at byte {at} (got {} bytes, want {})\n got: …{}\nwant: …{}",
        got.len(),
        want.len(),
        String::from_utf8_lossy(&got[from..(at + 150).min(got.len())]),
        String::from_utf8_lossy(&want[from..(at + 150).min(want.len())]),
    );
}

/// Rebuilds a list Table fixture from `objects` and compares it.
fn check_list(name: &str, group: &str, resource: &str, crd: Option<&Value>, objects: &[Vec<u8>]) {
    let body = read(&format!("{name}.json"));
    let parts: TableParts = serde_json::from_slice(&body).unwrap();
    let printer = Printer::new(
        group,
        resource,
        Bytes::copy_from_slice(parts.column_definitions.get().as_bytes()),
        crd,
    );
    assert!(
        printer.supported(),
        "{name}: {:?}",
        printer.unsupported_reason()
    );
    // Printed, then again from the rows remembered beside each object: both as recorded.
    let slots: Vec<RowSlot> = objects.iter().map(|_| RowSlot::default()).collect();
    let rows: Vec<(&[u8], Option<&RowSlot>)> = objects
        .iter()
        .zip(&slots)
        .map(|(o, slot)| (o.as_slice(), Some(slot)))
        .collect();
    for _ in 0..2 {
        let got = printer.list_table(
            &rows,
            &parts.metadata.resource_version,
            parts.metadata.r#continue.as_deref(),
            parts.metadata.remaining_item_count,
            include_of(name),
            date_header(name),
        );
        assert_same(name, &got, &body);
    }
}

/// Rebuilds a one-row GET Table fixture from `object` and compares it.
fn check_get(name: &str, group: &str, resource: &str, crd: Option<&Value>, object: &[u8]) {
    let body = read(&format!("{name}.json"));
    let parts: TableParts = serde_json::from_slice(&body).unwrap();
    let printer = Printer::new(
        group,
        resource,
        Bytes::copy_from_slice(parts.column_definitions.get().as_bytes()),
        crd,
    );
    let got = printer.get_table(object, include_of(name), date_header(name));
    assert_same(name, &got, &body);
}

fn pod_tables() {
    let pods = list_objects("list-pods-ns-a.json", Some(("Pod", "v1")));
    check_list("table-list-pods-ns-a", "", "pods", None, &pods);
    check_list(
        "table-list-pods-ns-a-include-object",
        "",
        "pods",
        None,
        &pods,
    );
    check_get("table-get-pod", "", "pods", None, &read("get-pod.json"));
}

fn configmap_tables() {
    let ns_a = list_objects(
        "list-cm-ns-a-trailing-slash.json",
        Some(("ConfigMap", "v1")),
    );
    assert_eq!(ns_a.len(), 25);
    check_list("table-list-cm-ns-a", "", "configmaps", None, &ns_a);
    check_list(
        "table-list-cm-ns-a-limit5",
        "",
        "configmaps",
        None,
        &ns_a[..5],
    );
    let ns_b = list_objects("list-cm-ns-b.json", Some(("ConfigMap", "v1")));
    check_list(
        "table-list-cm-ns-b-accept-table-only-v1",
        "",
        "configmaps",
        None,
        &ns_b,
    );
    check_list(
        "table-list-cm-ns-b-include-none",
        "",
        "configmaps",
        None,
        &ns_b,
    );
    check_list(
        "table-list-cm-ns-b-include-object",
        "",
        "configmaps",
        None,
        &ns_b,
    );
    check_list("table-list-cm-ns-empty", "", "configmaps", None, &[]);
    check_get("table-get-cm", "", "configmaps", None, &read("get-cm.json"));
}

fn widget_tables() {
    let columns = widget_columns();
    let widgets = list_objects("list-widgets-ns-a.json", None);
    let crd = Some(&columns);
    let g = "fixtures.example.com";
    check_list("table-list-widgets-ns-a", g, "widgets", crd, &widgets);
    check_list(
        "table-list-widgets-ns-a-include-object",
        g,
        "widgets",
        crd,
        &widgets,
    );
    check_list("table-list-widgets-ns-c-empty", g, "widgets", crd, &[]);
    check_get(
        "table-get-widget",
        g,
        "widgets",
        crd,
        &read("get-widget.json"),
    );
}

fn service_and_namespace_tables() {
    check_list(
        "table-list-services-ns-a",
        "",
        "services",
        None,
        &[read("get-service.json")],
    );
    check_get(
        "table-get-namespace",
        "",
        "namespaces",
        None,
        &read("get-namespace.json"),
    );
}

/// Objects for a Table fixture whose objects were not recorded on their own: the recorded row
/// metadata plus the given body fields.
fn objects_from_rows(name: &str, kind: &str, body: impl Fn(&str) -> Value) -> Vec<Vec<u8>> {
    let table: Value = serde_json::from_slice(&read(&format!("{name}.json"))).unwrap();
    table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let meta = &row["object"]["metadata"];
            let mut obj = serde_json::Map::new();
            obj.insert("kind".into(), kind.into());
            obj.insert("apiVersion".into(), "v1".into());
            obj.insert("metadata".into(), meta.clone());
            if let Value::Object(fields) = body(meta["name"].as_str().unwrap()) {
                obj.extend(fields);
            }
            serde_json::to_vec(&Value::Object(obj)).unwrap()
        })
        .collect()
}

fn secret_and_namespace_list_tables() {
    // The secrets' type and data, as the recorder created them.
    let secret = |name: &str| match name {
        "sec-opaque" => {
            serde_json::json!({"data": {"password": "eA==", "username": "eQ=="}, "type": "Opaque"})
        }
        "sec-dockercfg" => {
            serde_json::json!({"data": {".dockerconfigjson": "e30="}, "type": "kubernetes.io/dockerconfigjson"})
        }
        "sec-basic" => {
            serde_json::json!({"data": {"password": "eA==", "username": "eQ=="}, "type": "kubernetes.io/basic-auth"})
        }
        other => panic!("unexpected secret {other}"),
    };
    let secrets = objects_from_rows("table-list-secrets-ns-a", "Secret", secret);
    check_list("table-list-secrets-ns-a", "", "secrets", None, &secrets);

    // The phase as the row shows it (v1.34's recording has other clients' Terminating ones).
    let table: Value = serde_json::from_slice(&read("table-list-namespaces.json")).unwrap();
    let phase = |name: &str| {
        table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["cells"][0] == name)
            .map_or(Value::from("Active"), |r| r["cells"][1].clone())
    };
    let namespaces = objects_from_rows(
        "table-list-namespaces",
        "Namespace",
        |name| serde_json::json!({"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": phase(name)}}),
    );
    check_list("table-list-namespaces", "", "namespaces", None, &namespaces);
}

fn table_watch_events() {
    let name = "table-watch-cm-ns-a-from-list-rv";
    let text = http(name);
    // `# recorded: 2026-11-22T10:11:52.373Z`: when curl started; the timeline counts from there.
    let recorded = text
        .lines()
        .find_map(|l| l.strip_prefix("# recorded: "))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let n = |r: std::ops::Range<usize>| -> i64 { recorded[r].parse().unwrap() };
    let start = at(
        n(0..4),
        n(5..7),
        n(8..10),
        n(11..13),
        n(14..16),
        n(17..19),
        n(20..23) as u64,
    );
    let arrivals: Vec<Duration> = text
        .lines()
        .filter_map(|l| l.strip_prefix("<- +"))
        .filter(|l| l.contains("Table/"))
        .map(|l| Duration::from_secs_f64(l.split('s').next().unwrap().parse().unwrap()))
        .collect();

    // The same changes as seen by a plain watch started at the same time.
    let plain = read("watch-cm-ns-a-from-list-rv.json");
    let plain: Vec<Value> = plain
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();

    let body = read(&format!("{name}.json"));
    let lines: Vec<&[u8]> = body.split_inclusive(|b| *b == b'\n').collect();
    assert_eq!(lines.len(), 8);
    assert_eq!(arrivals.len(), lines.len());
    let first: Value = serde_json::from_slice(lines[0]).unwrap();
    let columns = serde_json::to_vec(&first["object"]["columnDefinitions"]).unwrap();
    let printer = Printer::new("", "configmaps", Bytes::from(columns), None);
    assert!(printer.supported());

    for (i, line) in lines.iter().enumerate() {
        let event: Value = serde_json::from_slice(line).unwrap();
        let rv = event["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap();
        let source = plain
            .iter()
            .find(|e| e["object"]["metadata"]["resourceVersion"] == rv)
            .unwrap_or_else(|| panic!("no plain event at RV {rv}"));
        let ty = source["type"].as_str().unwrap();
        let object = raw_event_object(&read("watch-cm-ns-a-from-list-rv.json"), rv);
        let got = printer.watch_event(
            ty,
            &object,
            i == 0,
            IncludeObject::Metadata,
            start + arrivals[i],
        );
        assert_same(&format!("{name} line {}", i + 1), &got, line);
    }
}

/// The raw bytes of the object of the watch line at `rv`.
fn raw_event_object(stream: &[u8], rv: &str) -> Vec<u8> {
    #[derive(serde::Deserialize)]
    struct Event<'a> {
        #[serde(borrow)]
        object: &'a RawValue,
    }
    for line in stream.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let e: Event = serde_json::from_slice(line).unwrap();
        let v: Value = serde_json::from_str(e.object.get()).unwrap();
        if v["metadata"]["resourceVersion"] == rv {
            return e.object.get().as_bytes().to_vec();
        }
    }
    panic!("no event at RV {rv}")
}

fn partial_object_metadata_fixtures() {
    let mut got = partial_object_metadata(&read("get-cm.json")).to_vec();
    got.push(b'\n');
    assert_same("pom-get-cm", &got, &read("pom-get-cm.json"));

    let check = |name: &str, objects: &[Vec<u8>]| {
        let body = read(&format!("{name}.json"));
        #[derive(serde::Deserialize)]
        struct Head {
            metadata: ListMeta,
        }
        let head: Head = serde_json::from_slice(&body).unwrap();
        let refs: Vec<&[u8]> = objects.iter().map(Vec::as_slice).collect();
        let got = partial_object_metadata_list(
            &refs,
            &head.metadata.resource_version,
            head.metadata.r#continue.as_deref(),
            head.metadata.remaining_item_count,
        );
        assert_same(name, &got, &body);
    };
    let ns_a = list_objects(
        "list-cm-ns-a-trailing-slash.json",
        Some(("ConfigMap", "v1")),
    );
    check("pom-list-cm-ns-a", &ns_a[..5]);
    check("pom-list-cm-ns-empty", &[]);
    check(
        "pom-list-widgets-ns-a",
        &list_objects("list-widgets-ns-a.json", None),
    );
}
