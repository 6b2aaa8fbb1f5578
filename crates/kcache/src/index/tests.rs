use super::*;
use serde_json::json;

#[test]
fn paths_parse_and_extract() {
    let p = FieldPath::parse("spec.containers[*].image").unwrap();
    assert_eq!(p.plain(), "spec.containers.image");
    let text = json!({"spec": {"containers": [{"image": "a"}, {"image": "b"}, {"name": "x"}],
                         "replicas": 3, "paused": true}})
    .to_string();
    let obj = Members::parse(&text).unwrap();
    let mut out = Vec::new();
    p.values(&obj, &mut out);
    assert_eq!(out, ["a", "b"]);
    out.clear();
    FieldPath::parse("spec.replicas")
        .unwrap()
        .values(&obj, &mut out);
    FieldPath::parse("spec.paused")
        .unwrap()
        .values(&obj, &mut out);
    FieldPath::parse("spec.containers")
        .unwrap()
        .values(&obj, &mut out);
    FieldPath::parse("spec.nope")
        .unwrap()
        .values(&obj, &mut out);
    assert_eq!(out, ["3", "true"]);
    for bad in ["", "spec..x", "spec.x[0]", "spec.[*]", "a b"] {
        assert!(FieldPath::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn config_validation() {
    let ok = |name: &str, field: Option<&str>, label: Option<&str>| {
        IndexConfig {
            name: name.into(),
            field: field.map(Into::into),
            label: label.map(Into::into),
        }
        .validate()
    };
    assert!(ok("byImage", Some("spec.containers[*].image"), None).is_ok());
    assert!(ok("byApp", None, Some("app.kubernetes.io/name")).is_ok());
    assert!(ok("", None, Some("app")).is_err());
    assert!(ok("a.b", None, Some("app")).is_err());
    assert!(ok("x", None, None).is_err());
    assert!(ok("x", Some("a"), Some("b")).is_err());
    assert!(ok("x", None, Some("bad key!")).is_err());
    assert!(ok("x", Some("spec.[*]"), None).is_err());
}

#[test]
fn key_sets_grow_and_shrink() {
    let mut k: KeySet<Arc<str>> = KeySet::Few(Arc::from([]));
    let key = |i: usize| -> Arc<str> { Arc::from(format!("ns/k{i:03}")) };
    for i in (0..40).rev() {
        k.insert(&key(i));
        k.insert(&key(i));
    }
    assert!(matches!(k, KeySet::Many(_)));
    assert_eq!(k.len(), 40);
    let mid: Vec<_> = k
        .range((Bound::Excluded(key(10)), Bound::Included(key(12))))
        .map(|x| x.to_string())
        .collect();
    assert_eq!(mid, ["ns/k011", "ns/k012"]);
    for i in 0..35 {
        k.remove(&key(i));
    }
    assert!(matches!(k, KeySet::Few(_)));
    let rest: Vec<_> = k.iter().map(|x| x.to_string()).collect();
    assert_eq!(
        rest,
        ["ns/k035", "ns/k036", "ns/k037", "ns/k038", "ns/k039"]
    );
    let mid: Vec<_> = k
        .range((Bound::Included(key(36)), Bound::Excluded(key(38))))
        .map(|x| x.to_string())
        .collect();
    assert_eq!(mid, ["ns/k036", "ns/k037"]);
}

/// A set made at once from sorted keys is the set inserted key by key, and every item is
/// inserted once in the dense order.
#[test]
fn key_sets_from_sorted_keys() {
    let key = |i: usize| -> Arc<str> { Arc::from(format!("ns/k{i:03}")) };
    for n in [0, 1, 16, 17, 40, 333] {
        let keys: Vec<Arc<str>> = (0..n).map(key).collect();
        let mut seen = Vec::new();
        dense_order(&keys, |k| seen.push(k.clone()));
        seen.sort();
        assert_eq!(seen, keys);
        let mut one_by_one: KeySet<Arc<str>> = KeySet::Few(Arc::from([]));
        for k in &keys {
            one_by_one.insert(k);
        }
        let mut shuffled = keys.clone();
        shuffled.reverse();
        shuffled.extend(keys.iter().take(3).cloned());
        for made in [
            KeySet::from_sorted(keys.clone()),
            KeySet::from_sorted(shuffled),
        ] {
            assert_eq!(made.len(), n);
            assert_eq!(matches!(made, KeySet::Few(_)), n <= FEW_MAX);
            assert!(made.iter().eq(one_by_one.iter()));
        }
    }
}

#[test]
fn selectable_fields_have_one_value() {
    let configured = [IndexConfig {
        name: "byTag".into(),
        field: Some("spec.tags[*]".into()),
        label: None,
    }];
    let s = IndexSet::new("example.com", "widgets", true, &configured).with_selectable_fields(&[
        ".spec.color".into(),
        ".spec.size".into(),
        ".spec.on".into(),
        "spec.nodot".into(),
        ".spec.list[*].x".into(),
    ]);
    assert_eq!(s.len(), 4);
    assert!(s.by_selectable_field("spec.nodot").is_none());
    assert!(s.by_selector_field("spec.color").is_none());
    let (color, cs) = s.by_selectable_field("spec.color").unwrap();
    let (_, ss) = s.by_selectable_field("spec.size").unwrap();
    let (_, os) = s.by_selectable_field("spec.on").unwrap();
    assert_eq!((color, cs, ss, os), (1, 1, 2, 3));
    let text = json!({"spec": {"size": 3, "on": true, "tags": ["a", "b"]}}).to_string();
    let v = s.extract(&Members::parse(&text).unwrap());
    let got: Vec<(u16, &str)> = v.iter().map(|(s, v)| (*s, v.as_ref())).collect();
    assert_eq!(got, [(0, "a"), (0, "b"), (1, ""), (2, "3"), (3, "true")]);
}

#[test]
fn path_values_borrow_unescaped_strings() {
    let p = FieldPath::parse("spec.containers[*].image").unwrap();
    let text = r#"{"spec":{"containers":[{"image":"plain"},{"image":"a\u002fb"},{"image":1.5}]}}"#;
    let mut out = Vec::new();
    p.values(&Members::parse(text).unwrap(), &mut out);
    assert_eq!(out, ["plain", "a/b", "1.5"]);
    // The unescaped value is the object's own text; the escaped one is decoded, as
    // serde_json::Value would give it.
    assert!(matches!(out[0], Cow::Borrowed(_)));
    assert_eq!(json_view::offset_in(text, &out[0]), text.find("plain"));
    assert!(matches!(out[1], Cow::Owned(_)));
}

#[test]
fn builtin_fields_are_indexed() {
    let s = IndexSet::new("", "pods", false, &[]);
    assert!(s.by_field("spec.nodeName").is_some());
    assert!(s.by_field("status.phase").is_some());
    assert!(s.by_field("spec.host").is_none());
    assert!(IndexSet::new("", "configmaps", false, &[]).is_empty());
}
