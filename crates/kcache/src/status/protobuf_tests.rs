//! kcache's Status errors in protobuf (rule E9): each `ApiError` as the apiserver writes it,
//! against the recordings of kube-apiserver v1.28 byte for byte, and decoded by an independent
//! decoder (k8s-pb's generated types).

use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use kcache_protobuf::{next_frame, parse_envelope, status_envelope, status_watch_event};
use kcache_sim::recordings::read;
use prost::Message;
use serde_json::{json, Value};

use super::{ApiError, Cause};

#[test]
fn not_found_status_byte_for_byte() {
    let e = ApiError::NotFound {
        group: "".into(),
        resource: "configmaps".into(),
        name: "does-not-exist".into(),
    };
    assert_eq!(
        status_envelope(&e.to_status()),
        read("protobuf-err-get-cm-missing.bin")
    );
}

#[test]
fn not_acceptable_status_byte_for_byte() {
    // The body is protobuf despite the recording's .json name (rule E9).
    let e = ApiError::NotAcceptable(
        "only the following media types are accepted: application/json, application/yaml, \
         application/vnd.kubernetes.protobuf"
            .into(),
    );
    assert_eq!(
        status_envelope(&e.to_status()),
        read("err-protobuf-list-widgets-406.json")
    );
}

#[test]
fn expired_watch_error_frame_byte_for_byte() {
    let e = ApiError::Expired {
        message: "too old resource version: 1 (1484)".into(),
        continue_token: None,
    };
    let frame = status_watch_event(&e.to_status());
    assert_eq!(frame, read("err-protobuf-watch-cm-rv1-too-old.bin"));
    let (f, used) = next_frame(&frame).unwrap().unwrap();
    assert_eq!(used, frame.len());
    assert_eq!(
        (f.event_type, f.envelope.api_version, f.envelope.kind),
        ("ERROR", "v1", "Status")
    );
}

/// Decodes a Status body with k8s-pb and checks it against its JSON form field by field.
fn assert_status_decodes_to(body: &[u8], json: &Value) {
    let env = parse_envelope(body).unwrap();
    assert_eq!((env.api_version, env.kind), ("v1", "Status"));
    let s = meta::Status::decode(env.raw).unwrap();
    let text = |v: &Value, k: &str| Some(v[k].as_str().unwrap_or("").to_string());
    let m = s.metadata.unwrap();
    assert_eq!(m.r#continue, text(&json["metadata"], "continue"));
    assert_eq!(m.resource_version, Some(String::new()));
    assert_eq!(s.status, text(json, "status"));
    assert_eq!(s.message, text(json, "message"));
    assert_eq!(s.reason, text(json, "reason"));
    assert_eq!(s.code, json["code"].as_i64().map(|c| c as i32));
    match (&s.details, json.get("details")) {
        (None, None) => {}
        (Some(d), Some(jd)) => {
            assert_eq!(d.name, text(jd, "name"));
            assert_eq!(d.group, text(jd, "group"));
            assert_eq!(d.kind, text(jd, "kind"));
            assert_eq!(d.uid, Some(String::new()));
            assert_eq!(
                d.retry_after_seconds,
                Some(jd["retryAfterSeconds"].as_i64().unwrap_or(0) as i32)
            );
            let causes = jd["causes"].as_array().cloned().unwrap_or_default();
            assert_eq!(d.causes.len(), causes.len());
            for (c, jc) in d.causes.iter().zip(&causes) {
                assert_eq!(c.reason, text(jc, "reason"));
                assert_eq!(c.message, text(jc, "message"));
                assert_eq!(c.field, text(jc, "field"));
            }
        }
        other => panic!("details differ: {other:?}"),
    }
}

#[test]
fn statuses_with_causes_retry_and_continue_decode() {
    let errors = [
        ApiError::TooLargeResourceVersion {
            requested: 99,
            current: 7,
        },
        ApiError::InvalidListOptions(vec![
            Cause::forbidden("resourceVersionMatch", "a"),
            Cause::not_supported("sendInitialEvents", "x", &["true", "false"]),
        ]),
        ApiError::TooManyRequests {
            message: "slow down".into(),
            retry_after: 3,
        },
        ApiError::NotReady,
        ApiError::NotFoundGeneric,
        ApiError::Internal("no reason <here> & there".into()),
        ApiError::Expired {
            message: "The provided continue parameter is too old".into(),
            continue_token: Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ".into()),
        },
        ApiError::Forbidden {
            group: "apps".into(),
            resource: "deployments".into(),
            name: Some("d".into()),
            message: "User \"u\" cannot get resource".into(),
        },
    ];
    for e in errors {
        let json = e.to_status();
        let body = status_envelope(&json);
        assert_status_decodes_to(&body, &json);
        // The ERROR frame carries the same envelope.
        let frame = status_watch_event(&json);
        let (f, used) = next_frame(&frame).unwrap().unwrap();
        assert_eq!(used, frame.len());
        assert_eq!(f.event_type, "ERROR");
        assert_eq!(parse_envelope(&body).unwrap(), f.envelope);
    }
}

#[test]
fn status_details_written_as_go_does() {
    // `details: {}` (the generic 404) is a set pointer: all its fields written empty.
    let body = status_envelope(&ApiError::NotFoundGeneric.to_status());
    let raw = parse_envelope(&body).unwrap().raw;
    let details = [0x2a, 10, 0x0a, 0, 0x12, 0, 0x1a, 0, 0x28, 0, 0x32, 0];
    assert!(raw.windows(details.len()).any(|w| w == details));
    // A 500 without reason still writes an empty reason; negative codes sign-extend.
    let body = status_envelope(
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "m", "code": -1}),
    );
    let raw = parse_envelope(&body).unwrap().raw;
    assert!(
        raw.ends_with(&[0x22, 0, 0x30, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])
    );
    assert_eq!(meta::Status::decode(raw).unwrap().code, Some(-1));
}
