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
    let body = table(
        profile,
        resource,
        &columns,
        want["metadata"].clone(),
        objects,
        Include::Metadata,
        date(profile, name),
    );
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
