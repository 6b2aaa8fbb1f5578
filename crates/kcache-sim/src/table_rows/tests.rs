//! The sim's rows against the apiserver's: each recorded Table whose objects were recorded too
//! is printed again from those objects at the recording's `Date`, in both profiles.

use super::*;
use crate::recordings::read_string_in;
use crate::Profile;

/// The recording's `Date` header as a time.
fn date(profile: Profile, name: &str) -> SystemTime {
    let http = read_string_in(profile, &format!("{name}.http"));
    let line = http
        .lines()
        .find_map(|l| l.strip_prefix("Date: "))
        .expect("a Date header");
    // `Thu, 26 Nov 2026 12:39:51 GMT`
    let p: Vec<&str> = line.split_whitespace().collect();
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let m = months.iter().position(|m| *m == p[2]).unwrap() + 1;
    let iso = format!("{}-{m:02}-{:0>2}T{}Z", p[3], p[1], p[4]);
    let secs = time(&Value::String(iso)).unwrap();
    UNIX_EPOCH + std::time::Duration::from_secs(secs as u64)
}

fn items(profile: Profile, name: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(&read_string_in(profile, name)).unwrap();
    match v.get("items") {
        Some(items) => items.as_array().unwrap().clone(),
        None => vec![v],
    }
}

/// The recorded Table `name`'s rows, against the sim's from `objects`.
fn check(profile: Profile, name: &str, resource: &str, objects: &[Value]) {
    let want: Value =
        serde_json::from_str(&read_string_in(profile, &format!("{name}.json"))).unwrap();
    let columns = serde_json::to_vec(&want["columnDefinitions"]).unwrap();
    let rt = crate::types::builtins()
        .into_iter()
        .find(|t| t.resource == resource)
        .unwrap();
    let printer = Printer::new(
        profile,
        Arc::new(rt),
        Bytes::from(columns),
        None,
        Include::Metadata,
    );
    let body = printer.list(&want["metadata"], objects, date(profile, name));
    let got: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(got["metadata"], want["metadata"], "{name}");
    assert_eq!(
        got["columnDefinitions"], want["columnDefinitions"],
        "{name}"
    );
    let (got, want) = (list(&got["rows"]), list(&want["rows"]));
    assert_eq!(got.len(), want.len(), "{name}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g["cells"], w["cells"], "{name}");
        assert_eq!(g.get("conditions"), w.get("conditions"), "{name}");
        assert_eq!(g["object"], w["object"], "{name}");
    }
}

#[test]
fn rows_are_the_recorded_apiservers() {
    for profile in [Profile::V1_28, Profile::V1_34] {
        let pods = items(profile, "list-pods-ns-a.json");
        check(profile, "table-list-pods-ns-a", "pods", &pods);
        let cms = items(profile, "list-cm-ns-a-trailing-slash.json");
        check(profile, "table-list-cm-ns-a", "configmaps", &cms);
        let service = items(profile, "get-service.json");
        check(profile, "table-list-services-ns-a", "services", &service);
    }
}

/// The printer of `resource` with a recorded Table's columns (a custom resource's printer
/// columns from the recorded CRD).
fn printer_for(profile: Profile, table: &str, resource: &str) -> Printer {
    let want: Value =
        serde_json::from_str(&read_string_in(profile, &format!("{table}.json"))).unwrap();
    let columns = Bytes::from(serde_json::to_vec(&want["columnDefinitions"]).unwrap());
    if resource == "widgets" {
        let crd: Value = serde_json::from_str(&read_string_in(profile, "get-crd.json")).unwrap();
        let rt = ResourceType::custom(
            "fixtures.example.com",
            "v1",
            "widgets",
            "widget",
            "Widget",
            true,
            &[],
        );
        let printer_columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .cloned();
        return Printer::new(
            profile,
            Arc::new(rt),
            columns,
            printer_columns,
            Include::Metadata,
        );
    }
    let rt = crate::types::builtins()
        .into_iter()
        .find(|t| t.resource == resource)
        .unwrap();
    Printer::new(profile, Arc::new(rt), columns, None, Include::Metadata)
}

/// The bytes of a printed Table against a recorded one's, with where they part.
fn assert_same(name: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    let from = at.saturating_sub(120);
    panic!(
        "{name}: differs at byte {at}\n got: …{}\nwant: …{}",
        String::from_utf8_lossy(&got[from..(at + 120).min(got.len())]),
        String::from_utf8_lossy(&want[from..(at + 120).min(want.len())]),
    );
}

#[test]
fn gets_are_the_recorded_apiservers_byte_for_byte() {
    for profile in [Profile::V1_28, Profile::V1_34] {
        for (table, resource, object) in [
            ("table-get-pod", "pods", "get-pod.json"),
            ("table-get-cm", "configmaps", "get-cm.json"),
            ("table-get-namespace", "namespaces", "get-namespace.json"),
            ("table-get-widget", "widgets", "get-widget.json"),
        ] {
            let object: Value = serde_json::from_str(&read_string_in(profile, object)).unwrap();
            let got = printer_for(profile, table, resource).get(&object, date(profile, table));
            let want = read_string_in(profile, &format!("{table}.json"));
            assert_same(&format!("{profile} {table}"), &got, want.as_bytes());
        }
    }
}

/// The recorded Table watch, each line printed again from the plain watch's object at the same
/// resourceVersion (recorded at the same time) at its arrival time: the columns on the first
/// line only, every line byte for byte.
#[test]
fn watch_events_are_the_recorded_apiservers_byte_for_byte() {
    for profile in [Profile::V1_28, Profile::V1_34] {
        let name = "table-watch-cm-ns-a-from-list-rv";
        let http = read_string_in(profile, &format!("{name}.http"));
        // `# recorded: 2026-11-26T12:41:00.070Z`: when curl started; the timeline counts from
        // there. The ages are whole seconds, so the arrival's fraction matters.
        let started = http
            .lines()
            .find_map(|l| l.strip_prefix("# recorded: "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap();
        let (whole, millis) = started.trim_end_matches('Z').split_once('.').unwrap();
        let start = UNIX_EPOCH
            + std::time::Duration::from_secs(time(&json!(format!("{whole}Z"))).unwrap() as u64)
            + std::time::Duration::from_millis(millis.parse().unwrap());
        let arrivals: Vec<std::time::Duration> = http
            .lines()
            .filter_map(|l| l.strip_prefix("<- +"))
            .filter(|l| l.contains("Table/"))
            .map(|l| {
                std::time::Duration::from_secs_f64(l.split('s').next().unwrap().parse().unwrap())
            })
            .collect();
        let plain: Vec<Value> = read_string_in(profile, "watch-cm-ns-a-from-list-rv.json")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let recorded = read_string_in(profile, &format!("{name}.json"));
        let printer = printer_for(profile, "table-get-cm", "configmaps");
        let lines: Vec<&str> = recorded.lines().collect();
        assert_eq!(lines.len(), arrivals.len());
        for (i, line) in lines.iter().enumerate() {
            let event: Value = serde_json::from_str(line).unwrap();
            let rv = &event["object"]["metadata"]["resourceVersion"];
            let source = plain
                .iter()
                .find(|e| &e["object"]["metadata"]["resourceVersion"] == rv)
                .unwrap_or_else(|| panic!("no plain event at {rv}"));
            let object = printer.event_object(&source["object"], i == 0, start + arrivals[i]);
            let got = crate::store::frame(source["type"].as_str().unwrap(), &object);
            assert_same(
                &format!("{profile} {name} line {}", i + 1),
                &got,
                format!("{line}\n").as_bytes(),
            );
        }
    }
}

#[test]
fn custom_resource_cells_follow_their_printer_columns() {
    let columns = vec![
        json!({"name": "Size", "type": "integer", "jsonPath": ".spec.size"}),
        json!({"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"}),
        json!({"name": "On", "type": "boolean", "jsonPath": ".spec.on"}),
        json!({"name": "Size text", "type": "string", "jsonPath": ".spec.size"}),
        json!({"name": "First", "type": "string", "jsonPath": ".spec.items[1].name"}),
        json!({"name": "Missing", "type": "string", "jsonPath": ".status.phase"}),
        json!({"name": "Not a number", "type": "integer", "jsonPath": ".spec.color"}),
        json!({"name": "When", "type": "date", "jsonPath": ".spec.when"}),
        json!({"name": "Bad date", "type": "date", "jsonPath": ".spec.color"}),
    ];
    let o = json!({
        "metadata": {"name": "w"},
        "spec": {"size": 3, "ratio": 0.5, "on": true, "color": "red",
                 "items": [{"name": "a"}, {"name": "b"}], "when": "2026-11-26T12:38:10Z"},
    });
    let now = time(&json!("2026-11-26T12:39:54Z")).unwrap();
    assert_eq!(
        custom_cells(&columns, &o, now),
        vec![
            json!("w"),
            json!(3),
            json!(0.5),
            json!(true),
            json!("3"),
            json!("b"),
            Value::Null,
            Value::Null,
            json!("104s"),
            json!("<invalid>"),
        ]
    );
}

#[test]
fn ages_print_as_the_apiserver_prints_them() {
    for (secs, want) in [
        (-5, "<invalid>"),
        (-1, "0s"),
        (45, "45s"),
        (119, "119s"),
        (127, "2m7s"),
        (600, "10m"),
        (3 * 3600 + 45 * 60, "3h45m"),
        (51 * 3600, "2d3h"),
        (740 * 86_400, "2y10d"),
    ] {
        assert_eq!(human(secs), want, "{secs}");
    }
    assert_eq!(time(&json!("2026-11-26T12:39:51Z")), Some(1_795_696_791));
    assert_eq!(time(&json!("soon")), None);
}
