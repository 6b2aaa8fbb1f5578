//! The events' JSON against the shape the apiserver's audit log has, piece by piece and
//! whole, and read back with serde_json.

use std::time::Duration;

use serde_json::{json, Value};

use super::json::{needs_a_look, write_compact, write_micro_time, write_str, ESCAPED};
use super::*;
use crate::testing::{sample_event, sample_request, sample_time, sample_user};

fn to_string(e: &Event) -> String {
    let mut out = Vec::new();
    e.write_json(&mut out);
    String::from_utf8(out).unwrap()
}

fn parse(e: &Event) -> Value {
    let text = to_string(e);
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text}"))
}

/// A Metadata-level ResponseComplete event of a controller's LIST, as a kube-apiserver's
/// audit log has it: field order, omitted empty fields, `\u0026` for the `&` of the query,
/// microsecond timestamps, sorted annotations.
#[test]
fn metadata_event_as_the_apiserver_writes_it() {
    let expected = concat!(
        r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","#,
        r#""auditID":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d","stage":"ResponseComplete","#,
        r#""requestURI":"/api/v1/namespaces/kube-system/pods?labelSelector=app%3Ddns\u0026limit=500","#,
        r#""verb":"list","#,
        r#""user":{"username":"system:serviceaccount:kube-system:replicaset-controller","#,
        r#""uid":"2b5a3b0e-8c9d-4f7e-9a41-5e0c6c1d2f3a","#,
        r#""groups":["system:serviceaccounts","system:serviceaccounts:kube-system","system:authenticated"]},"#,
        r#""sourceIPs":["10.0.0.12"],"#,
        r#""userAgent":"kube-controller-manager/v1.30.2 (linux/amd64) kubernetes/3968350/system:serviceaccount:kube-system:replicaset-controller","#,
        r#""objectRef":{"resource":"pods","namespace":"kube-system","apiVersion":"v1"},"#,
        r#""responseStatus":{"metadata":{},"code":200},"#,
        r#""requestReceivedTimestamp":"2024-05-01T12:30:45.123456Z","#,
        r#""stageTimestamp":"2024-05-01T12:30:45.124956Z","#,
        r#""annotations":{"authorization.k8s.io/decision":"allow","#,
        r#""authorization.k8s.io/reason":"RBAC: allowed by ClusterRoleBinding \"system:controller:replicaset-controller\" of ClusterRole \"system:controller:replicaset-controller\" to ServiceAccount \"replicaset-controller/kube-system\""}}"#,
    );
    assert_eq!(to_string(&sample_event(Level::Metadata)), expected);
}

/// An event as a kube-apiserver's audit log has it, read back into this crate's types.
fn event_from_log(v: &Value) -> Event {
    let text = |key: &str| v[key].as_str().unwrap_or_default().to_string();
    let time = |key: &str| -> SystemTime {
        let ts: jiff::Timestamp = v[key].as_str().unwrap().parse().unwrap();
        ts.into()
    };
    let outcome = RuleOutcome {
        level: serde_json::from_value(v["level"].clone()).unwrap(),
        omit_stages: Stages::EMPTY,
        omit_managed_fields: false,
    };
    let mut request = Request::new(
        &outcome,
        AuditId::given(text("auditID")),
        text("verb"),
        text("requestURI"),
        Arc::new(serde_json::from_value(v["user"].clone()).unwrap()),
        time("requestReceivedTimestamp"),
    );
    if let Some(user) = v.get("impersonatedUser") {
        request.impersonated_user = Some(Arc::new(serde_json::from_value(user.clone()).unwrap()));
    }
    request.source_ips = serde_json::from_value(v["sourceIPs"].clone()).unwrap_or_default();
    request.user_agent = text("userAgent");
    if let Some(o) = v.get("objectRef") {
        let field = |key: &str| o[key].as_str().unwrap_or_default().to_string();
        request.object_ref = Some(ObjectRef {
            resource: field("resource"),
            namespace: field("namespace"),
            name: field("name"),
            uid: field("uid"),
            api_group: field("apiGroup"),
            api_version: field("apiVersion"),
            resource_version: field("resourceVersion"),
            subresource: field("subresource"),
        });
    }
    let stage = serde_json::from_value(v["stage"].clone()).unwrap();
    let mut event = Arc::new(request).event(stage, time("stageTimestamp"));
    if let Some(s) = v.get("responseStatus") {
        let field = |key: &str| s[key].as_str().unwrap_or_default().to_string();
        event.response_status = Some(ResponseStatus {
            code: s["code"].as_u64().unwrap_or_default() as u16,
            status: field("status"),
            message: field("message"),
            reason: field("reason"),
            details: s.get("details").map(Value::to_string),
        });
    }
    if let Some(Value::Object(annotations)) = v.get("annotations") {
        for (key, value) in annotations {
            event = event.annotate(key.clone(), value.as_str().unwrap().to_string());
        }
    }
    event
}

/// Every line of a v1.34.9 kube-apiserver's audit log (a 401 at ResponseStarted, a 403 with
/// details and an empty annotation, a list, a watch's two stages, an anonymous GET), read
/// into events and written again: the same bytes.
#[test]
fn an_apiservers_log_written_again_is_the_same() {
    let log = include_str!("testdata/kube-apiserver-v1.34.9.jsonl");
    for line in log.lines() {
        let event = event_from_log(&serde_json::from_str(line).unwrap());
        assert_eq!(to_string(&event), line);
    }
}

#[test]
fn the_json_reads_back() {
    let v = parse(&sample_event(Level::Metadata));
    assert_eq!(v["kind"], "Event");
    assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(v["level"], "Metadata");
    assert_eq!(
        v["requestURI"],
        "/api/v1/namespaces/kube-system/pods?labelSelector=app%3Ddns&limit=500"
    );
    let user: UserInfo = serde_json::from_value(v["user"].clone()).unwrap();
    assert_eq!(user, sample_user());
    assert_eq!(v["responseStatus"], json!({"metadata": {}, "code": 200}));
    assert_eq!(v["annotations"]["authorization.k8s.io/decision"], "allow");
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "kind",
            "apiVersion",
            "level",
            "auditID",
            "stage",
            "requestURI",
            "verb",
            "user",
            "sourceIPs",
            "userAgent",
            "objectRef",
            "responseStatus",
            "requestReceivedTimestamp",
            "stageTimestamp",
            "annotations"
        ]
    );
}

#[test]
fn request_received_has_neither_status_nor_annotations() {
    let mut request = sample_request(Level::Metadata);
    request.source_ips.clear();
    request.user_agent.clear();
    request.object_ref = None;
    request.user = Arc::new(UserInfo::default());
    let e = Arc::new(request).received_event();
    assert_eq!(
        to_string(&e),
        concat!(
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","#,
            r#""auditID":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d","stage":"RequestReceived","#,
            r#""requestURI":"/api/v1/namespaces/kube-system/pods?labelSelector=app%3Ddns\u0026limit=500","#,
            r#""verb":"list","user":{},"#,
            r#""requestReceivedTimestamp":"2024-05-01T12:30:45.123456Z","#,
            r#""stageTimestamp":"2024-05-01T12:30:45.123456Z"}"#
        )
    );
}

#[test]
fn users_extra_and_impersonation() {
    let mut request = sample_request(Level::Metadata);
    let mut extra = BTreeMap::new();
    extra.insert("scopes".to_string(), vec!["b".to_string(), "a".to_string()]);
    extra.insert(
        "authentication.kubernetes.io/pod-name".to_string(),
        vec!["p-1".to_string()],
    );
    request.user = Arc::new(UserInfo {
        username: "alice".into(),
        extra,
        ..UserInfo::default()
    });
    request.impersonated_user = Some(Arc::new(UserInfo {
        username: "bob".into(),
        groups: vec!["dev".into()],
        ..UserInfo::default()
    }));
    let text = to_string(&Arc::new(request).received_event());
    assert!(
        text.contains(concat!(
            r#""user":{"username":"alice","extra":{"authentication.kubernetes.io/pod-name":["p-1"],"scopes":["b","a"]}},"#,
            r#""impersonatedUser":{"username":"bob","groups":["dev"]},"#
        )),
        "{text}"
    );
}

/// The hand-written user JSON is the derived one's (which is authentication.k8s.io's).
#[test]
fn user_json_is_the_serde_json() {
    let mut user = sample_user();
    user.extra.insert("k".into(), vec!["<v>".into()]);
    let mut request = sample_request(Level::Metadata);
    request.user = Arc::new(user.clone());
    let v = parse(&Arc::new(request).received_event());
    assert_eq!(v["user"], serde_json::to_value(&user).unwrap());
}

#[test]
fn strings_are_escaped_as_go_escapes_them() {
    let rows = [
        ("plain", r#""plain""#),
        ("a&b<c>d", r#""a\u0026b\u003cc\u003ed""#),
        ("quote\" backslash\\", r#""quote\" backslash\\""#),
        ("\n\r\t\u{8}\u{c}", r#""\n\r\t\b\f""#),
        // DEL (0x7f) is not escaped by Go.
        ("\u{0}\u{1f}\u{7f}", "\"\\u0000\\u001f\u{7f}\""),
        ("line\u{2028}para\u{2029}", r#""line\u2028para\u2029""#),
        ("é — 日本 \u{2027}\u{202a}", "\"é — 日本 \u{2027}\u{202a}\""),
    ];
    for (input, want) in rows {
        let mut out = Vec::new();
        write_str(&mut out, input);
        let got = String::from_utf8(out).unwrap();
        assert_eq!(got, want, "{input:?}");
        let back: String = serde_json::from_str(&got).unwrap();
        assert_eq!(back, input);
    }
}

/// The eight-byte check flags a word exactly when one of its bytes needs a look: every byte
/// value, at every position.
#[test]
fn the_word_check_agrees_with_the_byte_table() {
    for position in 0..8 {
        for b in 0..=255u8 {
            let mut word = [b'a'; 8];
            word[position] = b;
            let want = b >= 0x80 || ESCAPED[usize::from(b)];
            assert_eq!(
                needs_a_look(u64::from_le_bytes(word)),
                want,
                "{b:#04x} at {position}"
            );
        }
    }
}

/// Strings of every length up to 40 with a character that needs escaping (or a multi-byte
/// one) at every position: they read back the same, and nothing Go escapes is left raw.
#[test]
fn escaping_at_every_position() {
    let specials = [
        "<", ">", "&", "\"", "\\", "\n", "\u{1}", "é", "\u{2028}", "\u{2029}", "日",
    ];
    for len in 0..40 {
        for at in 0..len {
            for special in specials {
                let input: String = (0..len)
                    .map(|i| {
                        if i == at {
                            special.to_string()
                        } else {
                            "x".to_string()
                        }
                    })
                    .collect();
                let mut out = Vec::new();
                write_str(&mut out, &input);
                let text = String::from_utf8(out).unwrap();
                let back: String = serde_json::from_str(&text).unwrap();
                assert_eq!(back, input);
                let inner = &text[1..text.len() - 1];
                assert!(
                    !inner.contains(['<', '>', '&', '\n', '\u{1}', '\u{2028}', '\u{2029}']),
                    "{text}"
                );
            }
        }
    }
}

#[test]
fn micro_times() {
    let rows = [
        (SystemTime::UNIX_EPOCH, "1970-01-01T00:00:00.000000Z"),
        (sample_time(), "2024-05-01T12:30:45.123456Z"),
        // Truncated, not rounded, as Go formats.
        (
            SystemTime::UNIX_EPOCH + Duration::new(951_782_399, 999_999_999),
            "2000-02-28T23:59:59.999999Z",
        ),
        (
            SystemTime::UNIX_EPOCH + Duration::new(951_868_800, 1_000),
            "2000-03-01T00:00:00.000001Z",
        ),
        (
            SystemTime::UNIX_EPOCH - Duration::from_secs(10),
            "1970-01-01T00:00:00.000000Z",
        ),
    ];
    for (time, want) in rows {
        let mut out = Vec::new();
        write_micro_time(&mut out, time);
        assert_eq!(String::from_utf8(out).unwrap(), format!("\"{want}\""));
    }
}

#[test]
fn embedded_json_is_compacted_and_escaped() {
    let rows = [
        (
            "{\n  \"a\": [1, 2],\n  \"b\" : \"x y\"\n}\n",
            r#"{"a":[1,2],"b":"x y"}"#,
        ),
        (
            r#"{"q":"say \"hi\" \\ <b>&"}"#,
            r#"{"q":"say \"hi\" \\ \u003cb\u003e\u0026"}"#,
        ),
        ("{\"s\":\"a\u{2028}b\"}", r#"{"s":"a\u2028b"}"#),
        (r#"{"u":"\u003c already"}"#, r#"{"u":"\u003c already"}"#),
        (" [ ] ", "[]"),
    ];
    for (input, want) in rows {
        let mut out = Vec::new();
        write_compact(&mut out, input.as_bytes());
        let got = String::from_utf8(out).unwrap();
        assert_eq!(got, want, "{input:?}");
        let a: Value = serde_json::from_str(&got).unwrap();
        let b: Value = serde_json::from_str(input).unwrap();
        assert_eq!(a, b);
    }
}

const POD: &str = r#"{
  "kind": "Pod", "apiVersion": "v1",
  "metadata": {"name": "p", "namespace": "default",
    "managedFields": [{"manager": "kubectl", "operation": "Apply"}], "uid": "u1"},
  "spec": {"containers": [{"name": "c", "image": "nginx"}]}
}"#;

fn with_bodies(level: Level, omit_managed_fields: bool) -> Value {
    let mut request = sample_request(level);
    request.omit_managed_fields = omit_managed_fields;
    let list = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"7"}},"items":[{POD},{POD}]}}"#
    );
    let mut e = Arc::new(request).event(Stage::ResponseComplete, sample_time());
    e.request_object = Some(Bytes::from_static(POD.as_bytes()));
    e.response_object = Some(Bytes::from(list));
    parse(&e)
}

#[test]
fn bodies_follow_the_level() {
    let rows = [
        (Level::Metadata, false, false),
        (Level::Request, true, false),
        (Level::RequestResponse, true, true),
    ];
    for (level, request_object, response_object) in rows {
        let v = with_bodies(level, false);
        assert_eq!(v.get("requestObject").is_some(), request_object, "{level}");
        assert_eq!(
            v.get("responseObject").is_some(),
            response_object,
            "{level}"
        );
    }
    let v = with_bodies(Level::RequestResponse, false);
    let pod: Value = serde_json::from_str(POD).unwrap();
    assert_eq!(v["requestObject"], pod);
    assert_eq!(v["responseObject"]["items"][1], pod);
}

#[test]
fn managed_fields_are_left_out_when_the_rule_says_so() {
    let v = with_bodies(Level::RequestResponse, true);
    let metadata = &v["requestObject"]["metadata"];
    assert!(metadata.get("managedFields").is_none(), "{metadata}");
    // The other keys stay, in their order.
    let keys: Vec<&str> = metadata
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["name", "namespace", "uid"]);
    for item in v["responseObject"]["items"].as_array().unwrap() {
        assert!(item["metadata"].get("managedFields").is_none(), "{item}");
        assert_eq!(item["metadata"]["uid"], "u1");
    }
    assert_eq!(v["responseObject"]["metadata"]["resourceVersion"], "7");
}

#[test]
fn a_body_that_is_not_json_is_left_out() {
    for omit_managed_fields in [false, true] {
        let mut request = sample_request(Level::RequestResponse);
        request.omit_managed_fields = omit_managed_fields;
        let mut e = Arc::new(request).event(Stage::ResponseComplete, sample_time());
        e.response_object = Some(Bytes::from_static(b"k8s\x00\x0a\x0fprotobuf"));
        e.request_object = Some(Bytes::from_static(b"{\"a\":1} trailing"));
        let v = parse(&e);
        assert!(v.get("responseObject").is_none());
        assert!(v.get("requestObject").is_none());
    }
}

#[test]
fn response_status_from_a_status_body() {
    let not_found = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
        "message":"pods \"x\" not found","reason":"NotFound",
        "details":{"name":"x","kind":"pods"},"code":404}"#;
    let rows: [(&str, u16, &[u8], &str); 4] = [
        (
            "a NotFound",
            404,
            not_found,
            r#"{"metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#,
        ),
        (
            "the code sent wins over the body's",
            410,
            not_found,
            r#"{"metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":410}"#,
        ),
        (
            "not a Status",
            200,
            br#"{"kind":"Pod","status":{"phase":"Running"}}"#,
            r#"{"metadata":{},"code":200}"#,
        ),
        (
            "not JSON",
            502,
            b"Bad Gateway",
            r#"{"metadata":{},"code":502}"#,
        ),
    ];
    for (what, code, body, want) in rows {
        let status = ResponseStatus::from_status_body(code, body);
        let e = Arc::new(sample_request(Level::Metadata))
            .event(Stage::ResponseComplete, sample_time())
            .with_status(status);
        let v = parse(&e);
        let want: Value = serde_json::from_str(want).unwrap();
        assert_eq!(v["responseStatus"], want, "{what}");
        let text = to_string(&e);
        assert!(text.contains(&want.to_string()), "{what}: {text}");
    }
}

#[test]
fn source_ips_as_go_writes_them() {
    let mut request = sample_request(Level::Metadata);
    request.source_ips = ["192.0.2.1", "2001:db8:0:0:0:0:0:1", "::ffff:198.51.100.7"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let v = parse(&Arc::new(request).received_event());
    assert_eq!(
        v["sourceIPs"],
        json!(["192.0.2.1", "2001:db8::1", "198.51.100.7"])
    );
}

#[test]
fn object_ref_from_attributes() {
    let r = ResourceAttributes {
        group: "apps",
        version: "v1",
        resource: "deployments",
        subresource: Some("scale"),
        namespace: Some("web"),
        name: Some("front"),
    };
    let mut request = sample_request(Level::Metadata);
    request.object_ref = Some(ObjectRef::from_attributes(&r));
    let text = to_string(&Arc::new(request).received_event());
    assert!(
        text.contains(r#""objectRef":{"resource":"deployments","namespace":"web","name":"front","apiGroup":"apps","apiVersion":"v1","subresource":"scale"}"#),
        "{text}"
    );
}

#[test]
fn audit_ids() {
    let id = AuditId::random().to_string();
    let uuid = uuid::Uuid::parse_str(&id).unwrap();
    assert_eq!(uuid.get_version_num(), 4);
    assert_eq!(id.len(), 36);
    let mut request = sample_request(Level::Metadata);
    request.audit_id = AuditId::random();
    let want = request.audit_id.to_string();
    let v = parse(&Arc::new(request).received_event());
    assert_eq!(v["auditID"], want);
    assert_eq!(AuditId::given("x<y").to_string(), "x<y");
}

#[test]
fn an_event_list() {
    let events: Vec<bytes::Bytes> = crate::testing::numbered_events(Level::Metadata, 3)
        .into_iter()
        .map(|e| {
            let mut json = Vec::new();
            e.write_json(&mut json);
            json.into()
        })
        .collect();
    let mut out = Vec::new();
    write_event_list(&events, &mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with(
        r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[{"kind":"Event","#
    ));
    let v: Value = serde_json::from_str(&text).unwrap();
    let ids: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["auditID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["id-0", "id-1", "id-2"]);
    let mut empty = Vec::new();
    write_event_list(&[], &mut empty);
    assert_eq!(
        String::from_utf8(empty).unwrap(),
        r#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[]}"#
    );
}

/// What serialising a Metadata event costs: `cargo test -p kcache-audit --release --
/// --ignored --nocapture serialise_speed`. The target is 1 µs an event.
#[test]
#[ignore]
fn serialise_speed() {
    let event = sample_event(Level::Metadata);
    let mut out = Vec::with_capacity(4096);
    let rounds = 1_000_000u32;
    let mut bytes = 0;
    // Warm up, then measure.
    for _ in 0..10_000 {
        out.clear();
        event.write_json(&mut out);
    }
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        out.clear();
        std::hint::black_box(&event).write_json(&mut out);
        bytes += std::hint::black_box(&out).len();
    }
    let per = start.elapsed().as_nanos() as f64 / f64::from(rounds);
    println!(
        "serialising a Metadata event: {per:.0} ns ({} bytes)",
        bytes / rounds as usize
    );
}
