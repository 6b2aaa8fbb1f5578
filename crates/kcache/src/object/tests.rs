use super::*;
use crate::index::IndexConfig;

fn cm_info() -> ResourceInfo {
    ResourceInfo::core_v1("configmaps", "ConfigMap")
}

fn pod_info() -> ResourceInfo {
    ResourceInfo {
        resource: "pods".into(),
        kind: "Pod".into(),
        ..cm_info()
    }
}

/// Whether `part` lies inside `whole` (same allocation).
fn inside(part: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

#[test]
fn list_item_and_watch_object_share_bytes() {
    let item = Bytes::from_static(br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"web"}},"data":{"k":"v"}}"#);
    let o = Object::from_upstream(&cm_info(), item.clone(), false).unwrap();
    assert_eq!(
            o.raw(),
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"web"}},"data":{"k":"v"}}"#
        );
    let mut out = Vec::new();
    o.write_item(&mut out);
    assert_eq!(&out[..], &item[..]);
    assert_eq!(o.item_len(), out.len());
    assert_eq!(o.key(), "ns/a");
    assert_eq!(o.namespace(), "ns");
    assert_eq!(o.name(), "a");
    assert_eq!(o.rv, 7);
    assert_eq!(o.label("app"), Some("web"));
    assert_eq!(o.label("tier"), None);
    assert_eq!(o.field("metadata.name"), Some("a"));
    // A list item owns no watch line.
    assert_eq!(o.line("ADDED"), None);

    let w = Object::from_upstream(&cm_info(), o.raw_bytes(), false).unwrap();
    assert_eq!(w.raw(), o.raw());
    let mut out = Vec::new();
    w.write_item(&mut out);
    assert_eq!(&out[..], &item[..]);
    assert_eq!(w.item_len(), out.len());
}

#[test]
fn an_event_object_is_its_line() {
    let raw = Bytes::from_static(br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"web"}}}"#);
    let o = Object::from_upstream_event(
        &cm_info(),
        &IndexSet::default(),
        "MODIFIED",
        raw.clone(),
        false,
    )
    .unwrap();
    assert_eq!(o.raw(), &raw[..]);
    let line = o.line("MODIFIED").unwrap();
    assert_eq!(line, crate::cache::event_line("MODIFIED", &raw));
    // One allocation: the raw JSON and the head's unescaped label are inside the line's.
    assert!(inside(o.raw(), &line));
    assert!(inside(o.raw_bytes().as_ref(), &line));
    assert!(inside(o.label("app").unwrap().as_bytes(), o.raw()));
    assert!(o.holds(&line));
    assert!(!o.holds(&raw));
    // Another type's line is not there.
    assert_eq!(o.line("ADDED"), None);
    assert_eq!(o.line("MODIFIE"), None);
    // An event of the type shares the bytes; one of another type copies them.
    let o = Arc::new(o);
    let ev = crate::cache::Event::new(crate::cache::EventType::Modified, o.clone(), None, false);
    assert!(inside(ev.line(), &line) && ev.line().len() == line.len());
    let ev = crate::cache::Event::new(crate::cache::EventType::Added, o.clone(), None, false);
    assert!(!o.holds(ev.line()));
    assert_eq!(ev.line(), &crate::cache::event_line("ADDED", &raw));
}

#[test]
fn head_values_point_into_the_json_unless_escaped() {
    let configured = [IndexConfig {
        name: "byImage".into(),
        field: Some("spec.containers[*].image".into()),
        label: None,
    }];
    let indexes = IndexSet::new("", "pods", false, &configured);
    let raw = Bytes::from(
        r#"{"metadata":{"name":"p","namespace":"ns","resourceVersion":"12","labels":{"z":"last","app":"w\u0065b","n":1,"dup":"a","dup":"b","gone":"x","gone":null}},"spec":{"nodeName":"node-1","schedulerName":"s\"q","containers":[{"image":"img:1"},{"image":"a\/b"},{"image":"img:1"}],"hostNetwork":true},"status":{"podIPs":[{"ip":"10.0.0.2"}],"phase":"Running"}}"#,
    );
    for line in [None, Some("ADDED")] {
        let o = match line {
            None => Object::from_upstream_indexed(&pod_info(), &indexes, raw.clone(), false),
            Some(ty) => Object::from_upstream_event(&pod_info(), &indexes, ty, raw.clone(), false),
        }
        .unwrap();
        // Labels as a serde_json::Value map gives them: strings only, the last one of a
        // repeated key, sorted.
        let labels: Vec<(&str, &str)> = o.labels().collect();
        assert_eq!(
            labels,
            [("app", "web"), ("dup", "b"), ("z", "last")],
            "{line:?}"
        );
        assert!(inside(o.label("z").unwrap().as_bytes(), o.raw()));
        assert!(!inside(o.label("app").unwrap().as_bytes(), o.raw()));
        assert_eq!(o.field("spec.nodeName"), Some("node-1"));
        assert_eq!(o.field("spec.host"), Some("node-1"));
        assert!(inside(
            o.field("spec.nodeName").unwrap().as_bytes(),
            o.raw()
        ));
        assert_eq!(o.field("spec.schedulerName"), Some("s\"q"));
        assert_eq!(o.field("spec.hostNetwork"), Some("true"));
        assert_eq!(o.field("spec.restartPolicy"), Some(""));
        assert_eq!(o.field("status.podIP"), Some("10.0.0.2"));
        assert_eq!(o.field("status.phase"), Some("Running"));
        assert_eq!(o.field("metadata.namespace"), Some("ns"));
        assert_eq!(o.field("nope"), None);
        let images: Vec<&str> = o.index_values(0).collect();
        assert_eq!(images, ["a/b", "img:1"]);
        assert_eq!(o.index_values(1).count(), 0);
        // The same values as the Value-based extraction of the selector module.
        let value: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        for (name, v) in selector::extract_fields("", "pods", &value) {
            assert_eq!(o.field(name), Some(v.as_str()), "{name}");
        }
    }
}

/// Heads of objects beyond 64 KiB take 32-bit words; either width reads the same, and
/// `with_rv` picks the width again for the new bytes.
#[test]
fn head_words_widen_for_large_objects() {
    let object = |pad: usize| {
        Bytes::from(format!(
            r#"{{"metadata":{{"name":"p","namespace":"ns","resourceVersion":"7","labels":{{"a":"1","b":"x\ty"}}}},"spec":{{"nodeName":"n","hostNetwork":true}},"data":"{}"}}"#,
            "z".repeat(pad)
        ))
    };
    let small = Object::from_upstream(&pod_info(), object(10), false).unwrap();
    assert_eq!(small.word_width, 2);
    // Just below the limit: the head fits 16-bit words until the RV grows by 5 digits.
    let edge = u16::MAX as usize - small.buf.len() + 10 - 2;
    let near = Object::from_upstream(&pod_info(), object(edge), false).unwrap();
    assert_eq!(near.word_width, 2);
    let large = Object::from_upstream(&pod_info(), object(70_000), false).unwrap();
    assert_eq!(large.word_width, 4);
    for o in [
        &small,
        &near,
        &large,
        &near.with_rv(123_456),
        &large.with_rv(8),
    ] {
        assert_eq!(o.labels().collect::<Vec<_>>(), [("a", "1"), ("b", "x\ty")]);
        assert_eq!(o.field("spec.nodeName"), Some("n"));
        assert_eq!(o.field("spec.hostNetwork"), Some("true"));
        assert_eq!(o.field("spec.restartPolicy"), Some(""));
        assert_eq!(o.name(), "p");
    }
    assert_eq!(near.with_rv(123_456).word_width, 4);
    assert_eq!(large.with_rv(8).word_width, 4);
}

/// The struct stays within 72 bytes: with its `Arc` counters an 88-byte allocation, which
/// glibc serves from a 96-byte chunk (one more word would take a 112-byte one). Its Table row
/// slot (a lock and a pointer) is 16 of them: a chunk of 80 bytes without it.
#[test]
fn the_struct_stays_small() {
    assert!(std::mem::size_of::<Object>() <= 72);
    assert_eq!(std::mem::size_of::<crate::table::RowSlot>(), 16);
    assert_eq!(std::mem::size_of::<Key>(), 8);
}

#[test]
fn rv_replacement() {
    let raw = Bytes::from_static(br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#);
    let o = Object::from_upstream(&cm_info(), raw, false).unwrap();
    assert_eq!(
            &o.raw_with_rv(1234)[..],
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"1234"}}"#
        );
}

#[test]
fn with_rv_keeps_the_head() {
    let configured = [IndexConfig {
        name: "byRv".into(),
        field: Some("metadata.resourceVersion".into()),
        label: None,
    }];
    let indexes = IndexSet::new("", "pods", false, &configured);
    let raw = Bytes::from_static(br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","resourceVersion":"7","labels":{"a":"1","b":"x\ty"}},"spec":{"nodeName":"n"}}"#);
    let o = Object::from_upstream_event(&pod_info(), &indexes, "ADDED", raw, false).unwrap();
    let d = o.with_rv(123456);
    assert_eq!(d.rv, 123456);
    assert_eq!(d.raw(), &o.raw_with_rv(123456)[..]);
    assert_eq!(d.line("ADDED"), None);
    assert_eq!(d.labels().collect::<Vec<_>>(), [("a", "1"), ("b", "x\ty")]);
    assert_eq!(d.field("spec.nodeName"), Some("n"));
    // The index value read from the old resourceVersion stays what it was.
    assert_eq!(d.index_values(0).collect::<Vec<_>>(), ["7"]);
    let mut item = Vec::new();
    d.write_item(&mut item);
    assert!(
        item.starts_with(br#"{"metadata":{"name":"p","namespace":"ns","resourceVersion":"123456""#)
    );
    assert_eq!(&d.with_rv(8).raw_with_rv(7)[..], o.raw());
}

#[test]
fn drops_managed_fields_exactly() {
    let cases = [
        (
            r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","managedFields":[{"manager":"x"}]}}"#,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#,
        ),
        (
            r#"{"metadata":{"managedFields":[{"manager":"x"}],"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"k":"\u003c"}}"#,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"k":"\u003c"}}"#,
        ),
        (
            r#"{"metadata":{"name":"a", "managedFields" : [] , "namespace":"ns","resourceVersion":"7"}}"#,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#,
        ),
    ];
    for (input, want) in cases {
        let o = Object::from_upstream(&cm_info(), Bytes::from(input), true).unwrap();
        assert_eq!(std::str::from_utf8(o.raw()).unwrap(), want);
        assert_eq!(
            &o.raw_with_rv(9)[..],
            want.replace("\"7\"", "\"9\"").as_bytes()
        );
        // Kept when not asked to drop them.
        let kept = Object::from_upstream(&cm_info(), Bytes::from(input), false).unwrap();
        assert!(kept.raw().windows(13).any(|w| w == b"managedFields"));
    }
}

#[test]
fn drops_annotations_exactly() {
    let last = "kubectl.kubernetes.io/last-applied-configuration";
    let strip = Strip {
        managed_fields: true,
        annotations: vec![last.to_string()],
        ..Strip::default()
    };
    let cases = [
        // The only annotation: the map goes, as Go's omitempty leaves an empty one out.
        (
            r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"apiVersion\":\"v1\",\"data\":{\"k\":\"\\u003c\"}}\n"},"managedFields":[{"manager":"x"}]},"data":{"k":"\u003c"}}"#,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"k":"\u003c"}}"#,
        ),
        // Among others: they stay, in order, byte for byte.
        (
            r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","annotations":{"a":"1","kubectl.kubernetes.io/last-applied-configuration":"{}","z":"\u0026"}}}"#,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","annotations":{"a":"1","z":"\u0026"}}}"#,
        ),
        // Not there: untouched.
        (
            r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","annotations":{"a":"1"}}}"#,
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","annotations":{"a":"1"}}}"#,
        ),
    ];
    for (input, want) in cases {
        let o = Object::from_upstream_stripped(
            &cm_info(),
            &IndexSet::default(),
            input.as_bytes(),
            &strip,
            None,
        )
        .unwrap();
        assert_eq!(std::str::from_utf8(o.raw()).unwrap(), want);
        assert_eq!(o.rv, 7);
    }
}

#[test]
fn type_fields_in_another_order_are_moved_to_the_front() {
    let raw = Bytes::from_static(br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"apiVersion":"v1","data":{},"kind":"ConfigMap"}"#);
    let o = Object::from_upstream(&cm_info(), raw, false).unwrap();
    assert_eq!(
        std::str::from_utf8(o.raw()).unwrap(),
        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{}}"#
    );
    assert_eq!(o.rv, 7);
}

#[test]
fn rejects_objects_without_head() {
    for bad in [
        &b"{}"[..],
        b"[1",
        b"[1]",
        b"{\"metadata\":{\"name\":\"a\"}}",
        b"{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"x\"}}",
        b"{\"metadata\":{\"name\":\"a\",\"resourceVersion\":7}}",
        b"{\"metadata\":{\"name\":\"\xff\",\"resourceVersion\":\"7\"}}",
    ] {
        assert!(
            Object::from_upstream(&cm_info(), Bytes::copy_from_slice(bad), false).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn metadata_only_keeps_the_partial_object_metadata_as_it_came() {
    let build = |raw: &str, strip: &Strip, line: Option<&str>| {
        Object::from_upstream_stripped(
            &cm_info(),
            &IndexSet::default(),
            raw.as_bytes(),
            strip,
            line,
        )
        .unwrap()
    };
    let strip = Strip {
        metadata_only: true,
        ..Strip::default()
    };
    let pom = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"7","creationTimestamp":"2026-11-22T09:58:05Z","labels":{"app":"web"}}}"#;
    let o = build(pom, &strip, None);
    assert_eq!(o.raw(), pom.as_bytes());
    // PartialObjectMetadataList items carry their type fields.
    let mut item = Vec::new();
    o.write_item(&mut item);
    assert_eq!(&item[..], pom.as_bytes());
    assert_eq!((o.key(), o.rv, o.label("app")), ("ns/a", 7, Some("web")));
    // A whole object (an upstream that ignored `as=`) becomes the same PartialObjectMetadata.
    let full = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"7","creationTimestamp":"2026-11-22T09:58:05Z","labels":{"app":"web"}},"data":{"k":"v"}}"#;
    assert_eq!(build(full, &strip, Some("ADDED")).raw(), pom.as_bytes());
    // With managedFields dropped too.
    let strip = Strip {
        managed_fields: true,
        metadata_only: true,
        ..Strip::default()
    };
    let with_managed = pom.replace(
        r#""labels":{"app":"web"}"#,
        r#""labels":{"app":"web"},"managedFields":[{"manager":"m"}]"#,
    );
    assert_eq!(build(&with_managed, &strip, None).raw(), pom.as_bytes());
}
