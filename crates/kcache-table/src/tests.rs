use super::*;
use serde_json::json;

const DEFS: &str = r#"[{"name":"Name","type":"string","format":"name","description":"","priority":0},{"name":"Size","type":"integer","format":"","description":"","priority":0},{"name":"Weight","type":"number","format":"","description":"","priority":0},{"name":"On","type":"boolean","format":"","description":"","priority":0},{"name":"Tags","type":"string","format":"","description":"","priority":1},{"name":"Seen","type":"date","format":"","description":"","priority":0}]"#;

fn crd_printer() -> Printer {
    let cols = json!([
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Weight", "type": "number", "jsonPath": ".spec.weight"},
        {"name": "On", "type": "boolean", "jsonPath": ".spec.on"},
        {"name": "Tags", "type": "string", "jsonPath": ".spec.tags"},
        {"name": "Seen", "type": "date", "jsonPath": ".status.seen"},
    ]);
    Printer::new(
        "x.example",
        "things",
        Bytes::from_static(DEFS.as_bytes()),
        Some(&cols),
    )
}

fn at(s: &str) -> SystemTime {
    let n = parse_time(s).unwrap();
    SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(n as u64)
}

#[test]
fn include_object_values() {
    assert_eq!(IncludeObject::parse(None), Ok(IncludeObject::Metadata));
    assert_eq!(IncludeObject::parse(Some("")), Ok(IncludeObject::Metadata));
    assert_eq!(IncludeObject::parse(Some("None")), Ok(IncludeObject::None));
    assert_eq!(
        IncludeObject::parse(Some("Object")),
        Ok(IncludeObject::Object)
    );
    assert_eq!(
        IncludeObject::parse(Some("object")),
        Err(InvalidIncludeObject("object".into()))
    );
    assert_eq!(
        IncludeObject::parse(Some("object"))
            .unwrap_err()
            .to_string(),
        "Unable to convert to Table as requested: includeObject: Invalid value: \
             \"object\": must be 'Metadata', 'Object', 'None', or empty"
    );
}

#[test]
fn crd_cells_by_type() {
    let p = crd_printer();
    assert!(p.supported(), "{:?}", p.unsupported_reason());
    let obj = json!({
        "metadata": {"name": "t"},
        "spec": {"size": 2.9, "weight": 7, "on": true, "tags": ["a", "<b>"]},
        "status": {"seen": "2026-11-22T09:58:00Z"},
    });
    let cells = p.cells(&obj, at("2026-11-22T10:00:00Z"));
    assert_eq!(
        cells,
        vec![
            json!("t"),
            json!(2),
            json!(7),
            json!(true),
            json!("[\"a\",\"\\u003cb\\u003e\"]"),
            json!("2m")
        ]
    );
    // Wrong types and missing values are null; a bad date is <invalid>.
    let obj = json!({"metadata": {"name": "u"}, "spec": {"size": "x", "on": 1, "tags": null},
                         "status": {"seen": "soon"}});
    let cells = p.cells(&obj, at("2026-11-22T10:00:00Z"));
    assert_eq!(
        cells,
        vec![
            json!("u"),
            Value::Null,
            Value::Null,
            Value::Null,
            json!("<no value>"),
            json!("<invalid>")
        ]
    );
}

#[test]
fn number_cells_are_written_like_go() {
    let p = crd_printer();
    let obj = br#"{"metadata":{"name":"t","resourceVersion":"5"},"spec":{"weight":7}}"#;
    let body = p.get_table(obj, IncludeObject::None, at("2026-11-22T10:00:00Z"));
    let s = std::str::from_utf8(&body).unwrap();
    assert!(
        s.contains(r#""rows":[{"cells":["t",null,7,null,null,null],"object":null}]"#),
        "{s}"
    );
    assert!(s.starts_with(r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"5"},"columnDefinitions":[{"#));
}

#[test]
fn mismatched_columns_are_unsupported() {
    let defs = Bytes::from_static(br#"[{"name":"Name"},{"name":"Size"}]"#);
    let cols = json!([{"name": "Other", "type": "string", "jsonPath": ".spec.x"}]);
    let p = Printer::new("x.example", "things", defs.clone(), Some(&cols));
    assert!(!p.supported());
    assert_eq!(
        p.cells(&json!({}), SystemTime::now()),
        vec![Value::Null, Value::Null]
    );
    let p = Printer::new(
        "",
        "pods",
        Bytes::from_static(br#"[{"name":"Name"},{"name":"Mood"}]"#),
        None,
    );
    assert!(!p.supported());
    let p = Printer::new("rbac.authorization.k8s.io", "roles", defs, None);
    assert!(!p.supported());
}

#[test]
fn default_columns() {
    let defs = Bytes::from_static(
            br#"[{"name":"Name","type":"string","format":"name","description":"","priority":0},{"name":"Created At","type":"date","format":"","description":"","priority":0}]"#,
        );
    let p = Printer::new("rbac.authorization.k8s.io", "roles", defs, None);
    assert!(p.supported());
    let cells = p.cells(
        &json!({"metadata": {"name": "r", "creationTimestamp": "2026-11-22T11:58:07+02:00"}}),
        SystemTime::now(),
    );
    assert_eq!(cells, vec![json!("r"), json!("2026-11-22T09:58:07Z")]);
    let cells = p.cells(&json!({"metadata": {"name": "r"}}), SystemTime::now());
    assert_eq!(cells[1], json!("0001-01-01T00:00:00Z"));
    // A CRD without printer columns: Name and Age.
    let defs =
        Bytes::from_static(br#"[{"name":"Name","type":"string"},{"name":"Age","type":"date"}]"#);
    let p = Printer::new("x.example", "things", defs.clone(), Some(&json!([])));
    assert!(p.supported());
    let p = Printer::new("x.example", "things", defs, None);
    assert!(p.supported());
    let cells = p.cells(
        &json!({"metadata": {"name": "t", "creationTimestamp": "2026-11-22T09:58:00Z"}}),
        at("2026-11-22T10:00:00Z"),
    );
    assert_eq!(cells, vec![json!("t"), json!("2m")]);
}

#[test]
fn object_meta_of_unstructured_objects_in_struct_order() {
    let obj = br#"{"apiVersion":"x/v1","kind":"T","metadata":{"annotations":{"b":"2","a":"1"},"creationTimestamp":"2026-11-22T09:58:08Z","deletionGracePeriodSeconds":0,"finalizers":["f"],"generation":3,"labels":{},"name":"t","namespace":"n","ownerReferences":[{"apiVersion":"v1","blockOwnerDeletion":true,"controller":true,"kind":"K","name":"o","uid":"u1"}],"resourceVersion":"7","uid":"u2","unknown":1}}"#;
    let pom = partial_object_metadata(obj);
    assert_eq!(
        std::str::from_utf8(&pom).unwrap(),
        r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"t","namespace":"n","uid":"u2","resourceVersion":"7","generation":3,"creationTimestamp":"2026-11-22T09:58:08Z","deletionGracePeriodSeconds":0,"annotations":{"a":"1","b":"2"},"ownerReferences":[{"apiVersion":"v1","kind":"K","name":"o","uid":"u1","controller":true,"blockOwnerDeletion":true}],"finalizers":["f"]}}"#
    );
}

#[test]
fn finished_pods_carry_row_conditions() {
    let defs = Bytes::from_static(
            br#"[{"name":"Name"},{"name":"Ready"},{"name":"Status"},{"name":"Restarts"},{"name":"Age"}]"#,
        );
    let p = Printer::new("", "pods", defs, None);
    assert!(p.supported());
    let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","resourceVersion":"8","creationTimestamp":"2026-11-22T09:00:00Z"},"spec":{"containers":[{"name":"a"}]},"status":{"phase":"Failed","containerStatuses":[{"name":"a","ready":false,"restartCount":0,"state":{"terminated":{"exitCode":3,"reason":"Error"}}}]}}"#;
    let body = p.get_table(pod, IncludeObject::None, at("2026-11-22T10:00:00Z"));
    let s = std::str::from_utf8(&body).unwrap();
    assert!(s.ends_with("}\n"), "{s}");
    assert!(s.contains(r#""rows":[{"cells":["p","0/1","Error","0","60m"],"conditions":[{"type":"Completed","status":"True","reason":"Failed","message":"The pod failed."}],"object":null}]}"#), "{s}");
}

#[test]
fn list_meta_and_watch_framing() {
    let defs = Bytes::from_static(br#"[{"name":"Name"},{"name":"Data"},{"name":"Age"}]"#);
    let p = Printer::new("", "configmaps", defs, None);
    let body = p.list_table(
        &[],
        "9",
        Some("tok"),
        Some(3),
        IncludeObject::Metadata,
        SystemTime::now(),
    );
    assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"9\",\"continue\":\"tok\",\"remainingItemCount\":3},\"columnDefinitions\":[{\"name\":\"Name\"},{\"name\":\"Data\"},{\"name\":\"Age\"}],\"rows\":[]}\n"
        );
    let cm = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","resourceVersion":"4","creationTimestamp":"2026-11-22T09:58:00Z"},"data":{"a":"1"}}"#;
    let ev = p.watch_event(
        "DELETED",
        cm,
        false,
        IncludeObject::None,
        at("2026-11-22T09:58:01Z"),
    );
    assert_eq!(
            std::str::from_utf8(&ev).unwrap(),
            "{\"type\":\"DELETED\",\"object\":{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"4\"},\"columnDefinitions\":null,\"rows\":[{\"cells\":[\"c\",1,\"1s\"],\"object\":null}]}}\n"
        );
    assert_eq!(
            &partial_object_metadata_list(&[], "12", None, None)[..],
            b"{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"12\"},\"items\":null}\n"
        );
}

/// A built-in object's PartialObjectMetadata in a row is its metadata as stored: the same bytes
/// as written field by field from the parsed object when the object is written as the apiserver
/// writes it (Go's field order, map keys sorted, `<` escaped), and its cells do not read them.
#[test]
fn metadata_kept_as_stored_gives_the_same_row() {
    let raw = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a\u003cb","namespace":"ns","uid":"u-1","resourceVersion":"7","creationTimestamp":"2026-11-28T10:00:00Z","labels":{"a":"2","z":"1"},"managedFields":[{"manager":"kubectl-create","operation":"Update","apiVersion":"v1","time":"2026-11-28T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:k":{}}}}]},"data":{"k":"v"}}"#;
    let whole: Value = serde_json::from_slice(raw).unwrap();
    let mut expected = Vec::new();
    write_partial(&mut expected, &whole);
    let expected = String::from_utf8(expected).unwrap();

    let kept = RowObject::parse(raw, Some(Builtin::ConfigMap));
    assert!(kept.metadata.is_some());
    assert!(kept.obj["metadata"].get("managedFields").is_none());
    let p = Printer::new("", "configmaps", Bytes::from_static(b"[]"), None);
    let now = at("2026-11-28T10:01:00Z");
    let table: Value =
        serde_json::from_slice(&p.get_table(raw, IncludeObject::Metadata, now)).unwrap();
    let row_object = serde_json::to_string(&table["rows"][0]["object"]).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&row_object).unwrap(),
        serde_json::from_str::<Value>(&expected).unwrap()
    );
    let body = String::from_utf8(p.get_table(raw, IncludeObject::Metadata, now).to_vec()).unwrap();
    assert!(body.contains(&expected), "{body}");

    // A custom resource's metadata is written in Go's field order, whatever order it is
    // stored in; a metadata that is not an object is written as the apiserver would.
    let sorted = br#"{"metadata":{"creationTimestamp":null,"name":"a","uid":"u"}}"#;
    assert!(RowObject::parse(sorted, None).metadata.is_none());
    let none = br#"{"metadata":null}"#;
    assert!(RowObject::parse(none, Some(Builtin::ConfigMap))
        .metadata
        .is_none());
}

/// A row remembered beside its object is written as a fresh print would be, whatever the
/// printer, `includeObject` or clock: taken again only while its ages read the same.
#[test]
fn remembered_rows_print_as_fresh_rows_do() {
    let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","uid":"u","resourceVersion":"9","creationTimestamp":"2026-11-28T10:00:00Z","labels":{"app":"a"}},"spec":{"containers":[{"name":"c","image":"i"}],"nodeName":"node-1"},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"podIP":"10.0.0.1","containerStatuses":[{"name":"c","ready":true,"restartCount":2,"state":{"running":{"startedAt":"2026-11-28T10:05:00Z"}},"lastState":{"terminated":{"exitCode":1,"finishedAt":"2026-11-28T10:04:30Z"}}}]}}"#;
    let defs = Bytes::from_static(
        br#"[{"name":"Name"},{"name":"Ready"},{"name":"Status"},{"name":"Restarts"},{"name":"Age"}]"#,
    );
    let printer = Printer::new("", "pods", defs, None);
    let slot = RowSlot::default();
    let print = |p: &Printer, slot: Option<&RowSlot>, include, now: &str| {
        let body = p.list_table(&[(pod, slot)], "9", None, None, include, at(now));
        String::from_utf8(body.to_vec()).unwrap()
    };
    // In order: remembered at 10:30:10 (ages in minutes: good until 10:31:00), taken again,
    // then printed afresh as the minute turns and when the clock goes back.
    for now in [
        "2026-11-28T10:30:10Z",
        "2026-11-28T10:30:59Z",
        "2026-11-28T10:31:00Z",
        "2026-11-28T10:20:00Z",
        "2026-11-28T10:20:00Z",
    ] {
        for include in [
            IncludeObject::Metadata,
            IncludeObject::None,
            IncludeObject::Object,
        ] {
            assert_eq!(
                print(&printer, Some(&slot), include, now),
                print(&printer, None, include, now),
                "{now} {include:?}"
            );
        }
    }
    let fresh = print(&printer, None, IncludeObject::None, "2026-11-28T10:31:00Z");
    assert!(
        fresh.contains(r#"["p","1/1","Running","2 (26m ago)","31m"]"#),
        "{fresh}"
    );
    // Another printer of the type (its columns changed) prints its own row.
    let fewer = Printer::new(
        "",
        "pods",
        Bytes::from_static(br#"[{"name":"Name"},{"name":"Age"}]"#),
        None,
    );
    let now = "2026-11-28T10:20:30Z";
    print(&printer, Some(&slot), IncludeObject::None, now);
    assert_eq!(
        print(&fewer, Some(&slot), IncludeObject::None, now),
        print(&fewer, None, IncludeObject::None, now)
    );
}
