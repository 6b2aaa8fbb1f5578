//! The metadata list read from bodies built independently of kcache's own writers: protobuf
//! from the generated Kubernetes types (k8s-pb), JSON as the recordings' `pom-*` answers.

use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message as _;

use super::*;

/// The objects of the tests: (namespace, name, resourceVersion), not in key order.
const OBJECTS: [(&str, &str, &str); 4] = [
    ("fixtures-b", "cm-01", "360"),
    ("fixtures-a", "cm-02", "308"),
    ("fixtures-a", "cm-01", "357"),
    ("", "cluster-wide", "12"),
];

/// What both forms of [`OBJECTS`] at list RV 4884 read as.
fn expected(bytes: usize) -> MetadataList {
    let item = |key: &str, rv| ItemVersion {
        key: key.into(),
        rv,
    };
    MetadataList {
        rv: 4884,
        items: vec![
            item("cluster-wide", 12),
            item("fixtures-a/cm-01", 357),
            item("fixtures-a/cm-02", 308),
            item("fixtures-b/cm-01", 360),
        ],
        bytes,
    }
}

/// A protobuf PartialObjectMetadataList of `objects` in its `k8s\0` envelope, with the
/// ObjectMeta fields a real answer carries besides the three read (uid, labels, a time).
fn protobuf_body(
    api_version: &str,
    kind: &str,
    rv: &str,
    objects: &[(&str, &str, &str)],
) -> Vec<u8> {
    let items = objects
        .iter()
        .map(|(ns, name, rv)| meta::PartialObjectMetadata {
            metadata: Some(meta::ObjectMeta {
                name: Some(name.to_string()),
                namespace: (!ns.is_empty()).then(|| ns.to_string()),
                uid: Some(format!("uid-{name}")),
                resource_version: Some(rv.to_string()),
                creation_timestamp: Some(meta::Time {
                    seconds: Some(1_700_000_000),
                    nanos: Some(0),
                }),
                labels: [("app".to_string(), "web".to_string())].into(),
                ..Default::default()
            }),
        })
        .collect();
    let list = meta::PartialObjectMetadataList {
        metadata: Some(meta::ListMeta {
            self_link: Some(String::new()),
            resource_version: Some(rv.to_string()),
            r#continue: Some(String::new()),
            remaining_item_count: None,
        }),
        items,
    };
    envelope(api_version, kind, list.encode_to_vec())
}

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend_from_slice(&unknown.encode_to_vec());
    body
}

/// A JSON PartialObjectMetadataList of `objects` as the apiserver writes it
/// (`pom-list-cm-ns-a`: items with kind and apiVersion, metadata in struct order, managed
/// fields).
fn json_body(rv: &str, objects: &[(&str, &str, &str)]) -> Vec<u8> {
    let items: Vec<serde_json::Value> = objects
        .iter()
        .map(|(ns, name, rv)| {
            let mut m = serde_json::json!({"name": name});
            if !ns.is_empty() {
                m["namespace"] = (*ns).into();
            }
            m["uid"] = format!("uid-{name}").into();
            m["resourceVersion"] = (*rv).into();
            m["creationTimestamp"] = "2026-11-22T09:58:05Z".into();
            m["labels"] = serde_json::json!({"app": "web"});
            m["managedFields"] = serde_json::json!([{"manager": "kubectl-create",
                "operation": "Update", "apiVersion": "v1", "time": "2026-11-22T09:58:05Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}}}}]);
            serde_json::json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": m})
        })
        .collect();
    let items = if items.is_empty() {
        serde_json::Value::Null
    } else {
        items.into()
    };
    let list = serde_json::json!({"kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv}, "items": items});
    let mut body = serde_json::to_vec(&list).unwrap();
    body.push(b'\n');
    body
}

const PROTOBUF: Option<&str> = Some("application/vnd.kubernetes.protobuf");
const JSON: Option<&str> = Some("application/json");

#[test]
fn protobuf_and_json_read_the_same() {
    let pb = protobuf_body(LIST_API_VERSION, LIST_KIND, "4884", &OBJECTS);
    let json = json_body("4884", &OBJECTS);
    let from_pb = MetadataList::parse(PROTOBUF, &pb, "test").unwrap();
    let from_json = MetadataList::parse(JSON, &json, "test").unwrap();
    assert_eq!(from_pb, expected(pb.len()));
    assert_eq!(from_json, expected(json.len()));
    assert_eq!(from_pb.max_item_rv(), 360);
    // The protobuf is the smaller (much more so with real managed fields).
    assert!(pb.len() < json.len(), "{} vs {}", pb.len(), json.len());
}

#[test]
fn media_type_parameters_and_case_are_ignored() {
    let pb = protobuf_body(LIST_API_VERSION, LIST_KIND, "4884", &OBJECTS);
    let ct = "Application/Vnd.Kubernetes.Protobuf; as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    assert_eq!(
        MetadataList::parse(Some(ct), &pb, "test").unwrap(),
        expected(pb.len())
    );
    let json = json_body("4884", &OBJECTS);
    let ct = "application/json;charset=utf-8";
    assert_eq!(
        MetadataList::parse(Some(ct), &json, "test").unwrap(),
        expected(json.len())
    );
}

#[test]
fn empty_lists() {
    // JSON: `"items":null` (`pom-list-cm-ns-empty`); protobuf: no items field at all.
    let json = br#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"4884"},"items":null}"#;
    let pb = protobuf_body(LIST_API_VERSION, LIST_KIND, "4884", &[]);
    for (ct, body) in [(JSON, &json[..]), (PROTOBUF, &pb[..])] {
        let list = MetadataList::parse(ct, body, "test").unwrap();
        assert_eq!(
            (list.rv, list.items.len(), list.max_item_rv()),
            (4884, 0, 0)
        );
    }
}

#[test]
fn the_recorded_answers_read() {
    for profile in [kcache_sim::Profile::V1_28, kcache_sim::Profile::V1_34] {
        let read = |name: &str| kcache_sim::recordings::read_in(profile, &format!("{name}.json"));
        for (name, count) in [("pom-list-cm-ns-empty", 0), ("pom-list-widgets-ns-a", 3)] {
            let list = MetadataList::parse(JSON, &read(name), name)
                .unwrap_or_else(|e| panic!("{name}: {}", crate::error::Report(&e)));
            assert_eq!(list.items.len(), count, "{name}");
            assert!(list.rv > 0 && list.max_item_rv() <= list.rv, "{name}");
        }
        // A page (`limit=5`, with a continue token) is not the whole list.
        let e = MetadataList::parse(JSON, &read("pom-list-cm-ns-a"), "page").unwrap_err();
        assert!(matches!(e, UpstreamError::Malformed(_)), "{e:?}");
    }
}

#[test]
fn anything_else_is_an_error() {
    let pb = protobuf_body(LIST_API_VERSION, LIST_KIND, "4884", &OBJECTS);
    let json = json_body("4884", &OBJECTS);
    let malformed = |ct: Option<&str>, body: &[u8]| {
        let e = MetadataList::parse(ct, body, "test").unwrap_err();
        assert!(
            matches!(
                e,
                UpstreamError::Malformed(_)
                    | UpstreamError::Decode { .. }
                    | UpstreamError::Protobuf { .. }
            ),
            "{e:?}"
        );
    };
    // Another media type, or none.
    malformed(None, &json);
    malformed(Some("text/plain"), &json);
    malformed(Some("application/yaml"), &json);
    // The other form's bytes under a media type.
    malformed(JSON, &pb);
    malformed(PROTOBUF, &json);
    // Every truncation of both before its end (the protobuf envelope's last four bytes, an
    // empty contentEncoding and contentType, and the JSON's newline, may go).
    for n in 0..pb.len() - 4 {
        malformed(PROTOBUF, &pb[..n]);
    }
    for n in 0..json.len() - 1 {
        malformed(JSON, &json[..n]);
    }
    // Another kind: the full list, a Status, or the v1beta1 form.
    malformed(
        PROTOBUF,
        &protobuf_body("v1", "ConfigMapList", "4884", &OBJECTS),
    );
    malformed(
        PROTOBUF,
        &protobuf_body("meta.k8s.io/v1beta1", LIST_KIND, "4884", &OBJECTS),
    );
    malformed(
        JSON,
        br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#,
    );
    malformed(
        JSON,
        br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":500}"#,
    );
    // A page of the list.
    let mut page =
        meta::PartialObjectMetadataList::decode(protobuf::parse_envelope(&pb).unwrap().raw)
            .unwrap();
    page.metadata.as_mut().unwrap().r#continue = Some("token".into());
    malformed(
        PROTOBUF,
        &envelope(LIST_API_VERSION, LIST_KIND, page.encode_to_vec()),
    );
    // resourceVersions that are not numbers, an item without a name.
    malformed(
        PROTOBUF,
        &protobuf_body(LIST_API_VERSION, LIST_KIND, "", &OBJECTS),
    );
    malformed(
        PROTOBUF,
        &protobuf_body(LIST_API_VERSION, LIST_KIND, "1", &[("a", "b", "x1")]),
    );
    malformed(
        PROTOBUF,
        &protobuf_body(LIST_API_VERSION, LIST_KIND, "1", &[("a", "", "1")]),
    );
    malformed(JSON, &json_body("-1", &OBJECTS));
    malformed(JSON, &json_body("1", &[("a", "b", "")]));
    malformed(JSON, &json_body("1", &[("a", "", "1")]));
    // An item that is not a PartialObjectMetadata (no metadata field).
    let mut raw = meta::PartialObjectMetadataList {
        metadata: Some(meta::ListMeta {
            resource_version: Some("1".into()),
            ..Default::default()
        }),
        items: vec![],
    }
    .encode_to_vec();
    raw.extend_from_slice(b"\x12\x02\x12\x00");
    malformed(PROTOBUF, &envelope(LIST_API_VERSION, LIST_KIND, raw));
}

#[test]
fn arbitrary_bytes_never_panic() {
    // Flipping each byte of a valid body: either an error or a list, never a panic.
    let pb = protobuf_body(LIST_API_VERSION, LIST_KIND, "4884", &OBJECTS);
    let json = json_body("4884", &OBJECTS);
    for (ct, body) in [(PROTOBUF, pb), (JSON, json)] {
        for i in 0..body.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut b = body.clone();
                b[i] ^= flip;
                let _ = MetadataList::parse(ct, &b, "test");
            }
        }
    }
}

#[test]
fn the_url_is_the_reflectors_collection_with_its_selectors_only() {
    use crate::cache::{CacheConfig, Scope};
    use crate::resource::ResourceInfo;
    use crate::selector::{FieldSelector, LabelSelector};
    let info = ResourceInfo::core_v1("configmaps", "ConfigMap");
    let cache = |scope| ResourceCache::new(info.clone(), scope, CacheConfig::default());
    assert_eq!(
        metadata_list_url(&cache(Scope::default())),
        "/api/v1/configmaps"
    );
    let scoped = Scope {
        namespace: Some("team-a".into()),
        label: LabelSelector::parse("app=web").unwrap(),
        field: FieldSelector::parse("metadata.name!=x").unwrap(),
    };
    assert_eq!(
        metadata_list_url(&cache(scoped)),
        "/api/v1/namespaces/team%2Da/configmaps?labelSelector=app%3Dweb&fieldSelector=metadata%2Ename%21%3Dx"
    );
}
