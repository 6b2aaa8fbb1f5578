//! The protobuf writers against the recordings of kube-apiserver v1.28 (byte for byte), and
//! its output decoded by an independent decoder (k8s-pb's generated types).

use std::io::Read;

use bytes::BytesMut;
use k8s_pb::api::core::v1::{ConfigMap, ConfigMapList};
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use kcache_sim::recordings::read;
use prost::Message;

use super::list::list_body_len;
use super::object::ObjectMeta;
use super::watch::watch_event_len;
use super::*;

/// A gzip-encoded recording, decompressed.
fn read_gz(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(&read(name)[..])
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Every protobuf list recording, decompressed.
fn list_recordings() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("protobuf-list-cm-ns-b", read("protobuf-list-cm-ns-b.bin")),
        (
            "protobuf-list-cm-ns-a-limit5",
            read("protobuf-list-cm-ns-a-limit5.bin"),
        ),
        (
            "gzip-protobuf-list-cm-ns-c-big",
            read_gz("gzip-protobuf-list-cm-ns-c-big.bin.gz"),
        ),
    ]
}

/// The items of the limit-5 list (cm-01..cm-05 of fixtures-a: labels, an annotation on
/// cm-03, binaryData on cm-04, immutable on cm-05), as bare messages.
fn limit5_items() -> Vec<Vec<u8>> {
    let body = read("protobuf-list-cm-ns-a-limit5.bin");
    let env = parse_envelope(&body).unwrap();
    let (_, items) = parse_list(env.raw).unwrap();
    items.into_iter().map(<[u8]>::to_vec).collect()
}

/// Every object message of the recordings: the GET, the items of every list and the objects
/// of the watch, with its name.
fn recorded_objects() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let get = read("protobuf-get-cm.bin");
    out.push(parse_envelope(&get).unwrap().raw.to_vec());
    for (_, body) in list_recordings() {
        let (_, items) = parse_list(parse_envelope(&body).unwrap().raw).unwrap();
        out.extend(items.into_iter().map(<[u8]>::to_vec));
    }
    let stream = read("protobuf-watch-cm-ns-a-label-app-web.bin");
    let mut at = 0;
    while let Some((frame, used)) = next_frame(&stream[at..]).unwrap() {
        out.push(frame.envelope.raw.to_vec());
        at += used;
    }
    out.into_iter()
        .map(|o| (object_meta(&o).unwrap().name.to_string(), o))
        .collect()
}

// ----- envelopes and GET ----------------------------------------------------------------

#[test]
fn get_rebuilds_byte_for_byte_and_decodes() {
    let body = read("protobuf-get-cm.bin");
    let env = parse_envelope(&body).unwrap();
    assert_eq!((env.api_version, env.kind), ("v1", "ConfigMap"));
    assert_eq!(envelope_len("v1", "ConfigMap", env.raw.len()), body.len());
    let mut out = BytesMut::new();
    write_envelope(env.api_version, env.kind, env.raw, &mut out);
    assert_eq!(out[..], body[..]);

    let cm = ConfigMap::decode(env.raw).unwrap();
    let m = cm.metadata.as_ref().unwrap();
    assert_eq!(m.name.as_deref(), Some("cm-04"));
    assert_eq!(cm.binary_data["blob"], [0, 1, 2, 3, 4, 5, 0xff]);
    assert_eq!(
        object_meta(env.raw).unwrap(),
        ObjectMeta {
            name: "cm-04",
            namespace: "fixtures-a",
            resource_version: m.resource_version.as_deref().unwrap(),
        }
    );
}

// ----- lists ----------------------------------------------------------------------------

#[test]
fn lists_rebuild_byte_for_byte() {
    for (name, body) in list_recordings() {
        let env = parse_envelope(&body).unwrap();
        assert_eq!(
            (env.api_version, env.kind),
            ("v1", "ConfigMapList"),
            "{name}"
        );
        let (meta, items) = parse_list(env.raw).unwrap();
        let items_len: usize = items.iter().map(|i| list_item_len(i.len())).sum();
        let meta = meta.as_list_meta();
        assert_eq!(
            list_body_len("v1", "ConfigMapList", &meta, items_len),
            body.len(),
            "{name}"
        );
        // Written in several chunks, as kcache streams it.
        let mut chunks = vec![BytesMut::new()];
        write_list_head("v1", "ConfigMapList", &meta, items_len, &mut chunks[0]);
        for pair in items.chunks(2) {
            let mut chunk = BytesMut::new();
            for item in pair {
                write_list_item(item, &mut chunk);
            }
            chunks.push(chunk);
        }
        let mut tail = BytesMut::new();
        write_list_tail(&mut tail);
        chunks.push(tail);
        assert_eq!(chunks.concat(), body, "{name}");

        // The same as an independent decoder reads it.
        let list = ConfigMapList::decode(env.raw).unwrap();
        let lm = list.metadata.unwrap();
        assert_eq!(lm.resource_version.as_deref(), Some(meta.resource_version));
        assert_eq!(lm.r#continue.as_deref(), Some(meta.continue_token));
        assert_eq!(lm.remaining_item_count, meta.remaining_item_count);
        assert_eq!(list.items.len(), items.len());
        for (cm, item) in list.items.iter().zip(&items) {
            let m = cm.metadata.as_ref().unwrap();
            let got = object_meta(item).unwrap();
            assert_eq!(Some(got.name), m.name.as_deref());
            assert_eq!(Some(got.namespace), m.namespace.as_deref());
            assert_eq!(Some(got.resource_version), m.resource_version.as_deref());
        }
    }
}

#[test]
fn list_fixtures_have_the_expected_metadata() {
    let lists = list_recordings();
    let meta = |i: usize| parse_list(parse_envelope(&lists[i].1).unwrap().raw).unwrap();
    let (m, items) = meta(0);
    assert_eq!(
        (m.continue_token.as_str(), m.remaining_item_count),
        ("", None)
    );
    assert_eq!(items.len(), 3);
    let (m, items) = meta(1);
    assert!(!m.continue_token.is_empty());
    assert_eq!(m.remaining_item_count, Some(20));
    assert_eq!(items.len(), 5);
    let (m, items) = meta(2);
    assert_eq!(
        (m.continue_token.as_str(), m.remaining_item_count),
        ("", None)
    );
    assert_eq!(items.len(), 30);
}

// ----- watch ----------------------------------------------------------------------------

#[test]
fn watch_frames_reencode_byte_for_byte() {
    let stream = read("protobuf-watch-cm-ns-a-label-app-web.bin");
    let mut at = 0;
    let mut seen = Vec::new();
    let mut out = BytesMut::new();
    while at < stream.len() {
        let (frame, used) = next_frame(&stream[at..]).unwrap().unwrap();
        let env = frame.envelope;
        assert_eq!(
            watch_event_len(frame.event_type, env.api_version, env.kind, env.raw.len()),
            used
        );
        let before = out.len();
        write_watch_event(
            frame.event_type,
            env.api_version,
            env.kind,
            env.raw,
            &mut out,
        );
        assert_eq!(out[before..], stream[at..at + used], "frame at {at}");
        let m = object_meta(env.raw).unwrap();
        seen.push((
            frame.event_type.to_string(),
            m.name.to_string(),
            m.resource_version.to_string(),
        ));
        ConfigMap::decode(env.raw).unwrap();
        at += used;
    }
    assert_eq!(out[..], stream[..]);
    let want = [
        ("ADDED", "watch-new-1", "3911"),
        ("MODIFIED", "watch-new-1", "3913"),
        ("DELETED", "watch-new-1", "3914"),
        ("ADDED", "watch-new-2", "3915"),
        ("DELETED", "watch-new-2", "3917"),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(t, n, rv)| (t.to_string(), n.to_string(), rv.to_string()))
        .collect();
    assert_eq!(seen, want);
    // Any prefix of the stream short of a frame's end reads as "not yet".
    assert_eq!(next_frame(&stream[..341]).unwrap(), None);
    assert!(next_frame(&stream[..342]).unwrap().is_some());
}

// ----- changing objects -----------------------------------------------------------------

/// `obj` decoded, and with its resourceVersion and annotations as given.
fn decoded(obj: &[u8]) -> ConfigMap {
    ConfigMap::decode(obj).unwrap()
}

#[test]
fn with_resource_version_changes_only_the_rv() {
    let objects = recorded_objects();
    assert_eq!(objects.len(), 1 + 3 + 5 + 30 + 5);
    for (name, obj) in &objects {
        for rv in ["", "1", "3914", "18446744073709551615", &"9".repeat(200)] {
            let out = with_resource_version(obj, rv).unwrap();
            assert_eq!(object_meta(&out).unwrap().resource_version, rv);
            let mut want = decoded(obj);
            want.metadata.as_mut().unwrap().resource_version = Some(rv.to_string());
            assert_eq!(decoded(&out), want, "{name}");
            // prost writes these messages as Go does (no empty map values here), so its
            // encoding of the changed object is an independent check of the bytes.
            assert_eq!(out, want.encode_to_vec(), "{name}");
        }
        // Setting it back gives the original bytes.
        let rv = object_meta(obj).unwrap().resource_version.to_string();
        let there = with_resource_version(obj, "123").unwrap();
        assert_eq!(with_resource_version(&there, &rv).unwrap(), *obj);
    }
}

#[test]
fn prost_reencodes_the_fixtures_exactly() {
    // The premise of the prost comparisons: these objects re-encode to the recorded bytes.
    for (name, obj) in recorded_objects() {
        assert_eq!(decoded(&obj).encode_to_vec(), obj, "{name}");
    }
}

#[test]
fn with_annotation_adds_in_key_order() {
    let items = limit5_items();
    // cm-03 has an annotation already; the others none.
    let cm03 = decoded(&items[2]);
    assert_eq!(
        cm03.metadata.as_ref().unwrap().name.as_deref(),
        Some("cm-03")
    );
    assert!(!cm03.metadata.as_ref().unwrap().annotations.is_empty());
    for (name, obj) in &recorded_objects() {
        for (key, value) in [
            ("k8s.io/initial-events-end", "true"),
            ("a", "first"),
            ("zzz", "last"),
            ("fixtures.example.com/note", "replaced"),
            ("fixtures.example.com/a", "before it"),
        ] {
            let out = with_annotation(obj, key, value).unwrap();
            let mut want = decoded(obj);
            let m = want.metadata.as_mut().unwrap();
            m.annotations.insert(key.into(), value.into());
            assert_eq!(decoded(&out), want, "{name} {key}");
            assert_eq!(out, want.encode_to_vec(), "{name} {key}");
            assert_eq!(object_meta(&out).unwrap(), object_meta(obj).unwrap());
        }
    }
}

#[test]
fn bookmark_object_from_an_empty_configmap() {
    // What the apiserver sends as a bookmark: an empty object at the bookmark's RV, with the
    // initial-events-end annotation at the end of the initial events.
    let empty = ConfigMap {
        metadata: Some(meta::ObjectMeta::default()),
        ..ConfigMap::default()
    }
    .encode_to_vec();
    let out = with_resource_version(&empty, "3917").unwrap();
    let out = with_annotation(&out, "k8s.io/initial-events-end", "true").unwrap();
    let cm = decoded(&out);
    let m = cm.metadata.unwrap();
    assert_eq!(m.resource_version.as_deref(), Some("3917"));
    assert_eq!(m.annotations["k8s.io/initial-events-end"], "true");
    let mut frame = BytesMut::new();
    write_watch_event("BOOKMARK", "v1", "ConfigMap", &out, &mut frame);
    let (f, _) = next_frame(&frame).unwrap().unwrap();
    assert_eq!(f.envelope.raw, &out[..]);
}

#[test]
fn constants() {
    assert_eq!(MEDIA_TYPE, "application/vnd.kubernetes.protobuf");
    assert_eq!(WATCH_MEDIA_TYPE, format!("{MEDIA_TYPE};stream=watch"));
    // The Content-Type of the recordings.
    let http = kcache_sim::recordings::read_string("protobuf-watch-cm-ns-a-label-app-web.http");
    assert!(http.contains(&format!("Content-Type: {WATCH_MEDIA_TYPE}\n")));
    let http = kcache_sim::recordings::read_string("protobuf-get-cm.http");
    assert!(http.contains(&format!("Content-Type: {MEDIA_TYPE}\n")));
}

// ----- generated inputs -----------------------------------------------------------------

mod generated {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// Map keys and values prost writes as Go does: prost leaves out an entry's empty key or
    /// value, Go writes both, so the generated ones are never empty.
    fn entries() -> impl Strategy<Value = BTreeMap<String, String>> {
        proptest::collection::btree_map("[a-zA-Z0-9./_-]{1,40}", "[ -~]{1,60}", 0..6)
    }

    prop_compose! {
        /// A ConfigMap with metadata of varied sizes (lengths cross the one- and two-byte
        /// varint boundaries) and data.
        fn config_map()(
            name in "[a-z0-9-]{1,200}",
            namespace in "[a-z0-9-]{0,63}",
            rv in "[0-9]{0,20}",
            labels in entries(),
            annotations in entries(),
            finalizers in proptest::collection::vec("[a-z./]{1,30}", 0..3),
            data in entries(),
        ) -> ConfigMap {
            ConfigMap {
                metadata: Some(meta::ObjectMeta {
                    name: Some(name),
                    generate_name: Some(String::new()),
                    namespace: Some(namespace),
                    resource_version: Some(rv),
                    labels,
                    annotations,
                    finalizers,
                    ..meta::ObjectMeta::default()
                }),
                data,
                ..ConfigMap::default()
            }
        }
    }

    proptest! {
        #[test]
        fn splices_match_prost(
            cm in config_map(),
            rv in "[0-9]{0,300}",
            key in "[a-zA-Z0-9./_-]{1,40}",
            value in "[ -~]{1,200}",
        ) {
            let obj = cm.encode_to_vec();
            let m = cm.metadata.as_ref().unwrap();
            let got = object_meta(&obj).unwrap();
            prop_assert_eq!(Some(got.name), m.name.as_deref());
            prop_assert_eq!(Some(got.namespace), m.namespace.as_deref());
            prop_assert_eq!(Some(got.resource_version), m.resource_version.as_deref());

            let mut want = cm.clone();
            want.metadata.as_mut().unwrap().resource_version = Some(rv.clone());
            prop_assert_eq!(with_resource_version(&obj, &rv).unwrap(), want.encode_to_vec());

            let mut want = cm;
            want.metadata.as_mut().unwrap().annotations.insert(key.clone(), value.clone());
            prop_assert_eq!(with_annotation(&obj, &key, &value).unwrap(), want.encode_to_vec());
        }

        #[test]
        fn lists_and_frames_round_trip(
            rv in "[0-9]{0,20}",
            token in "[a-zA-Z0-9]{0,300}",
            remaining in proptest::option::of(any::<i64>()),
            items in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..400), 0..8),
            event_type in "[A-Z]{0,10}",
        ) {
            let meta = ListMeta { resource_version: &rv, continue_token: &token, remaining_item_count: remaining };
            let items_len = items.iter().map(|i| list_item_len(i.len())).sum();
            let mut body = BytesMut::new();
            write_list_head("v1", "ConfigMapList", &meta, items_len, &mut body);
            for item in &items {
                write_list_item(item, &mut body);
            }
            write_list_tail(&mut body);
            prop_assert_eq!(body.len(), list_body_len("v1", "ConfigMapList", &meta, items_len));
            let env = parse_envelope(&body).unwrap();
            let (got, got_items) = parse_list(env.raw).unwrap();
            prop_assert_eq!(got.as_list_meta(), meta);
            prop_assert_eq!(got_items, items.iter().map(Vec::as_slice).collect::<Vec<_>>());

            for item in &items {
                let mut frame = BytesMut::new();
                write_watch_event(&event_type, "apps/v1", "Deployment", item, &mut frame);
                prop_assert_eq!(frame.len(), watch_event_len(&event_type, "apps/v1", "Deployment", item.len()));
                let (f, used) = next_frame(&frame).unwrap().unwrap();
                prop_assert_eq!(used, frame.len());
                prop_assert_eq!(f.event_type, event_type.as_str());
                prop_assert_eq!(f.envelope.raw, item.as_slice());
            }
        }
    }
}
