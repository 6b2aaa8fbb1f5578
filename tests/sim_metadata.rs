//! Metadata-only reads (PartialObjectMetadata, rule E4): the sim's LIST, GET and 406 compared
//! byte for byte with the `pom-*` recordings, its LIST in protobuf decoded with the generated
//! types, and its paging and WATCH streams in that form compared with the full objects the
//! same sim serves in JSON.

#[path = "sim_common/mod.rs"]
mod common;

use common::*;
use kcache_sim::Profile;

// The running test's profile decides which recordings these read and which upstream the sim
// imitates (`per_profile!` sets it; see `common::profile`).
fn fixture(name: &str) -> String {
    fixture_in(profile(), name)
}

fn fixture_request(name: &str) -> (String, String) {
    fixture_request_in(profile(), name)
}

fn fast_cfg() -> kcache_sim::SimConfig {
    profile_cfg(profile())
}
use k8s_pb::api::core::v1::ConfigMapList;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use kcache_sim::Sim;
use prost::Message as _;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// What client-go's metadata client sends for a LIST (answered in protobuf) ...
const POM_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// ... what kubectl sent for the recorded ones (answered in JSON) ...
const POM_LIST_JSON: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
/// ... and for a GET or WATCH.
const POM: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

const CMS_A: &str = "/api/v1/namespaces/fixtures-a/configmaps";
const CMS_B: &str = "/api/v1/namespaces/fixtures-b/configmaps";
const WIDGETS_A: &str = "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets";

/// A sim holding the recorded data set as it was when the `pom-*` fixtures were recorded
/// (after cm-01 was patched).
async fn recorded_state() -> Sim {
    let sim = Sim::start(fast_cfg()).await.unwrap();
    sim.register(widgets());
    for o in kcache_sim::seed::fixture_dataset() {
        sim.create(o.group, o.resource, o.object).unwrap();
    }
    sim
}

async fn get_as(sim: &Sim, path: &str, accept: &str) -> Resp {
    request(
        sim.addr(),
        "GET",
        path,
        &[("Accept", accept)],
        b"",
        Duration::from_secs(10),
    )
    .await
}

/// A request header of a fixture's `.http` sidecar.
fn fixture_header(name: &str, header: &str) -> String {
    let http = fixture(&format!("{name}.http"));
    let prefix = format!("{header}: ");
    http.lines()
        .skip_while(|l| !l.starts_with("### request"))
        .take_while(|l| !l.starts_with("### response"))
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {header} in {name}.http"))
        .to_string()
}

/// A response header of a fixture's `.http` sidecar.
fn fixture_response_header(name: &str, header: &str) -> Option<String> {
    let http = fixture(&format!("{name}.http"));
    let prefix = format!("{header}: ");
    http.lines()
        .skip_while(|l| !l.starts_with("### response"))
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
}

/// Sends the fixture's request with its own Accept header and compares the body (server-assigned
/// values normalised), the status and how the body is framed.
async fn check(sim: &Sim, name: &str) {
    let (method, path) = fixture_request(name);
    let accept = fixture_header(name, "Accept");
    let resp = request(
        sim.addr(),
        &method,
        &path,
        &[("Accept", &accept)],
        b"",
        Duration::from_secs(10),
    )
    .await;
    let want = fixture(&format!("{name}.json"));
    assert_eq!(
        normalize(&resp.text(), None),
        normalize(&want, None),
        "fixture {name} ({method} {path})"
    );
    let want_status: u16 = fixture(&format!("{name}.http"))
        .lines()
        .find(|l| l.starts_with("HTTP/1.1 "))
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert_eq!(resp.status, want_status, "status of {name}");
    assert_eq!(
        resp.header("Content-Type"),
        Some("application/json"),
        "{name}"
    );
    let chunked = fixture_response_header(name, "Transfer-Encoding").is_some();
    assert_eq!(
        resp.header("Transfer-Encoding").is_some(),
        chunked,
        "framing of {name}"
    );
}

async fn metadata_reads_match_recorded_bytes(_p: Profile) {
    let sim = recorded_state().await;
    for name in [
        "pom-list-cm-ns-a",
        "pom-list-cm-ns-empty",
        "pom-list-widgets-ns-a",
        "pom-get-cm",
        "err-pom-list-wrong-as",
    ] {
        check(&sim, name).await;
    }
}

async fn wrong_forms_fallbacks_and_errors(_p: Profile) {
    let sim = recorded_state().await;
    // client-go's Accept: a list in protobuf (see `metadata_lists_in_protobuf`); an object
    // in JSON, the protobuf clause for it skipped.
    let l = get_as(&sim, &format!("{CMS_A}?limit=5"), POM_LIST).await;
    assert_eq!(l.header("Content-Type"), Some(PROTOBUF));
    let g = get_as(&sim, &format!("{CMS_A}/cm-03"), POM).await;
    assert_eq!(
        normalize(&g.text(), None),
        normalize(&fixture("pom-get-cm.json"), None)
    );
    // The singular form on a list is refused even with a fallback after it (negotiation picks
    // the first acceptable clause; the transformation fails later), in compact JSON then.
    let r = get_as(&sim, CMS_A, POM).await;
    assert_eq!(r.status, 406);
    let compact: Value = serde_json::from_str(&fixture("err-pom-list-wrong-as.json")).unwrap();
    assert_eq!(r.text(), format!("{compact}\n"));
    // The list form on an object: the other 406, naming the object's type.
    let r = get_as(&sim, &format!("{CMS_A}/cm-03"), POM_LIST).await;
    assert_eq!(r.status, 406);
    assert_eq!(
        r.json()["message"],
        "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)"
    );
    let r = get_as(
        &sim,
        WIDGETS_A,
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(
        r.json()["message"],
        "you requested PartialObjectMetadata, but the requested object is a list (*unstructured.UnstructuredList)"
    );
    // Read errors come first, and with only a transformation acceptable they are indented.
    let only = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let r = get_as(&sim, &format!("{CMS_A}/nope"), only).await;
    assert_eq!(r.status, 404);
    assert!(
        r.text().starts_with("{\n  \"kind\": \"Status\""),
        "{}",
        r.text()
    );
    let r = get_as(&sim, &format!("{CMS_A}/nope"), POM).await;
    assert_eq!(r.status, 404);
    assert!(r.text().starts_with("{\"kind\":\"Status\""), "{}", r.text());
    let r = get_as(
        &sim,
        &format!("{CMS_A}?labelSelector=app+in+(web"),
        POM_LIST,
    )
    .await;
    assert_eq!(r.status, 400);
    // A form the apiserver does not offer is skipped: JSON if listed after it, else 406.
    let beta = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta2";
    let r = get_as(&sim, CMS_B, &format!("{beta},application/json")).await;
    assert_eq!(r.json()["kind"], "ConfigMapList");
    assert_eq!(get_as(&sim, CMS_B, beta).await.status, 406);
    // Selectors and resourceVersion=0 as for the full form.
    let web = get_as(
        &sim,
        &format!("{CMS_A}?labelSelector=app%3Dweb&resourceVersion=0"),
        POM_LIST_JSON,
    )
    .await
    .json();
    let full = get(
        &sim,
        &format!("{CMS_A}?labelSelector=app%3Dweb&resourceVersion=0"),
    )
    .await
    .json();
    assert_eq!(web["metadata"], full["metadata"]);
    assert_same_objects(&web["items"], &full["items"]);
}

/// The media type of protobuf bodies.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A protobuf body's envelope decoded with the generated types: (apiVersion, kind, raw).
fn envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    assert_eq!(&body[..4], b"k8s\0", "{}", String::from_utf8_lossy(body));
    let u = Unknown::decode(&body[4..]).unwrap();
    let tm = u.type_meta.unwrap_or_default();
    (
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
        u.raw.unwrap_or_default(),
    )
}

/// A PartialObjectMetadataList in protobuf, decoded with the generated types.
async fn protobuf_metadata_list(
    sim: &Sim,
    path: &str,
    accept: &str,
) -> meta::PartialObjectMetadataList {
    let r = get_as(sim, path, accept).await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    assert_eq!(r.header("Content-Type"), Some(PROTOBUF), "{path}");
    let (api_version, kind, raw) = envelope(&r.body);
    assert_eq!(
        (api_version.as_str(), kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadataList"),
        "{path}"
    );
    meta::PartialObjectMetadataList::decode(&raw[..]).unwrap()
}

/// client-go's metadata lists are answered in protobuf, built-in types and custom resources
/// alike, and say what the JSON form says.
async fn metadata_lists_in_protobuf(_p: Profile) {
    let sim = recorded_state().await;
    let paths = [
        CMS_A.to_string(),
        CMS_B.to_string(),
        WIDGETS_A.to_string(),
        "/api/v1/configmaps".to_string(),
        "/apis/fixtures.example.com/v1/widgets".to_string(),
        "/api/v1/namespaces/no-such-ns/configmaps".to_string(),
        format!("{CMS_A}?labelSelector=app%3Dweb"),
        format!("{CMS_A}?limit=2"),
        format!("{WIDGETS_A}?limit=2"),
    ];
    for path in &paths {
        let list = protobuf_metadata_list(&sim, path, POM_LIST).await;
        // Nothing is written between the two reads.
        let json = get_as(&sim, path, POM_LIST_JSON).await.json();
        let lm = list.metadata.unwrap();
        assert_eq!(
            lm.resource_version.as_deref(),
            json["metadata"]["resourceVersion"].as_str(),
            "{path}"
        );
        assert_eq!(
            lm.r#continue.as_deref(),
            Some(json["metadata"]["continue"].as_str().unwrap_or("")),
            "{path}"
        );
        assert_eq!(
            lm.remaining_item_count,
            json["metadata"]["remainingItemCount"].as_i64(),
            "{path}"
        );
        let got: Vec<Value> = list
            .items
            .iter()
            .map(|i| {
                let m = i.metadata.as_ref().unwrap();
                json!([m.namespace, m.name, m.resource_version, m.uid, m.labels])
            })
            .collect();
        let want: Vec<Value> = json["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|i| {
                let m = &i["metadata"];
                let labels = m.get("labels").cloned().unwrap_or_else(|| json!({}));
                json!([
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"],
                    m["resourceVersion"],
                    m["uid"],
                    labels
                ])
            })
            .collect();
        assert_eq!(got, want, "{path}");
    }
    // Each item's ObjectMeta is the object's own, as its full protobuf form carries it.
    let full = get_as(&sim, CMS_A, PROTOBUF).await;
    let (_, kind, raw) = envelope(&full.body);
    assert_eq!(kind, "ConfigMapList");
    let full = ConfigMapList::decode(&raw[..]).unwrap();
    let pom = protobuf_metadata_list(&sim, CMS_A, POM_LIST).await;
    assert!(!pom.items.is_empty());
    assert_eq!(
        pom.items
            .into_iter()
            .map(|i| i.metadata)
            .collect::<Vec<_>>(),
        full.items
            .into_iter()
            .map(|c| c.metadata)
            .collect::<Vec<_>>()
    );
    // Protobuf alone is enough for a custom resource (it has no protobuf form of its own).
    let only =
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let w = protobuf_metadata_list(&sim, WIDGETS_A, only).await;
    assert_eq!(w.items.len(), 3);
    assert_eq!(get_as(&sim, WIDGETS_A, PROTOBUF).await.status, 406);
}

/// `{"kind":"PartialObjectMetadata",..,"metadata":M}` for each full object, in order.
fn assert_same_objects(pom: &Value, full: &Value) {
    let pom = pom.as_array().unwrap();
    let full = full.as_array().unwrap();
    assert_eq!(pom.len(), full.len());
    for (p, f) in pom.iter().zip(full) {
        assert_eq!(p, &as_pom(f));
    }
}

fn as_pom(full: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": full["metadata"]})
}

async fn paging_in_metadata_form(_p: Profile) {
    let sim = recorded_state().await;
    for (path, cr) in [(CMS_A, false), (WIDGETS_A, true)] {
        let mut pom_next = format!("{path}?limit=2");
        let mut full_next = pom_next.clone();
        let mut pages = 0;
        loop {
            let p = get_as(&sim, &pom_next, POM_LIST_JSON).await.json();
            let f = get(&sim, &full_next).await.json();
            pages += 1;
            assert_eq!(p["kind"], "PartialObjectMetadataList");
            assert_eq!(
                p["metadata"]["resourceVersion"],
                f["metadata"]["resourceVersion"]
            );
            assert_eq!(
                p["metadata"]["remainingItemCount"],
                f["metadata"]["remainingItemCount"]
            );
            assert_same_objects(&p["items"], &f["items"]);
            let token = p["metadata"]["continue"].as_str().map(str::to_string);
            match (token, f["metadata"]["continue"].as_str()) {
                (Some(t), Some(ft)) if !ft.is_empty() => {
                    assert_eq!(t, ft, "same token in both forms");
                    pom_next = format!("{path}?limit=2&continue={t}");
                    full_next = pom_next.clone();
                }
                (None, ft) => {
                    // Custom resources' own lists say "continue":"" on the last page; the
                    // PartialObjectMetadataList's ListMeta leaves it out.
                    assert_eq!(ft, cr.then_some(""), "{path}");
                    assert!(p["metadata"].get("remainingItemCount").is_none());
                    break;
                }
                other => panic!("tokens differ: {other:?}"),
            }
        }
        assert!(pages >= 2, "{path}");
    }
    // An expired continue token: the same 410 as for the full form (fresh token included).
    let first = get_as(&sim, &format!("{CMS_A}?limit=10"), POM_LIST_JSON)
        .await
        .json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    sim.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "after-page-1", "namespace": "fixtures-a"}}),
    )
    .unwrap();
    // Beyond the watch cache's window too (v1.34 serves older lists from it).
    sim.compact();
    sim.compact_watch_cache();
    let next = format!("{CMS_A}?limit=10&continue={token}");
    let pom = get_as(&sim, &next, POM_LIST).await;
    let full = get(&sim, &next).await;
    assert_eq!(pom.status, 410);
    assert_eq!(pom.text(), full.text());
}

/// A watch read as it arrives: the response head, then one line per event.
struct Stream {
    sock: TcpStream,
    status: u16,
    /// Bytes after the head, still chunk-framed.
    raw: Vec<u8>,
    /// De-chunked bytes not yet returned as lines.
    body: Vec<u8>,
}

impl Stream {
    /// Sends the request and waits for the response head (the sim registers the watch
    /// before it answers, so writes from now on are seen).
    async fn open(addr: SocketAddr, path: &str, accept: &str) -> Stream {
        let mut sock = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: {UA}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
        );
        sock.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let end = loop {
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let mut tmp = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut tmp))
                .await
                .expect("response head in time")
                .unwrap();
            assert!(n > 0, "connection closed before the head");
            raw.extend_from_slice(&tmp[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        assert!(
            head.to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{head}"
        );
        raw.drain(..end + 4);
        Stream {
            sock,
            status,
            raw,
            body: Vec::new(),
        }
    }

    /// The next event line, or None when the stream ends or nothing comes within `max`.
    async fn next_line(&mut self, max: Duration) -> Option<String> {
        let deadline = Instant::now() + max;
        loop {
            if let Some(i) = self.body.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.body.drain(..=i).collect();
                return Some(String::from_utf8(line).unwrap().trim_end().to_string());
            }
            if let Some(le) = self.raw.windows(2).position(|w| w == b"\r\n") {
                let size_text = String::from_utf8_lossy(&self.raw[..le]).into_owned();
                let size = usize::from_str_radix(size_text.trim(), 16).unwrap();
                if size == 0 {
                    return None;
                }
                if self.raw.len() >= le + 2 + size + 2 {
                    let data = self.raw[le + 2..le + 2 + size].to_vec();
                    self.body.extend_from_slice(&data);
                    self.raw.drain(..le + 2 + size + 2);
                    continue;
                }
            }
            let mut tmp = [0u8; 65536];
            let n = tokio::time::timeout_at(deadline, self.sock.read(&mut tmp))
                .await
                .ok()?
                .ok()?;
            if n == 0 {
                return None;
            }
            self.raw.extend_from_slice(&tmp[..n]);
        }
    }

    async fn next_json(&mut self) -> Value {
        let line = self
            .next_line(Duration::from_secs(10))
            .await
            .expect("an event");
        serde_json::from_str(&line).unwrap()
    }

    /// The next event that is not a periodic BOOKMARK (those come on a timer, so they may
    /// fall between any two events).
    async fn next_event(&mut self) -> Value {
        loop {
            let ev = self.next_json().await;
            let periodic = ev["type"] == "BOOKMARK"
                && ev["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"].is_null();
            if !periodic {
                return ev;
            }
        }
    }
}

/// Reads one event from each stream and checks that the metadata one carries the
/// PartialObjectMetadata of the full one; returns both.
async fn next_pair(meta: &mut Stream, full: &mut Stream) -> (Value, Value) {
    let m = meta.next_event().await;
    let f = full.next_event().await;
    assert_eq!(m["type"], f["type"], "{m}\n{f}");
    // A BOOKMARK's metadata is not the same: the PartialObjectMetadata is a Go ObjectMeta
    // (`"creationTimestamp":null`), a custom resource's own bookmark is not (checked apart).
    if m["type"] != "BOOKMARK" {
        assert_eq!(m["object"], as_pom(&f["object"]), "{}", f["type"]);
    }
    (m, f)
}

async fn watch_events_in_metadata_form(p: Profile) {
    // v1.34 writes no zero creationTimestamp in a BOOKMARK's ObjectMeta.
    let null_ts = if p == Profile::V1_28 {
        r#","creationTimestamp":null"#
    } else {
        ""
    };
    let sim = seeded(fast_cfg()).await;
    let rv = sim.current_rv();
    let path = format!(
        "{CMS_B}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&labelSelector=app%3Dmeta&timeoutSeconds=30"
    );
    let mut meta = Stream::open(sim.addr(), &path, POM).await;
    let mut full = Stream::open(sim.addr(), &path, "application/json, */*").await;
    assert_eq!((meta.status, full.status), (200, 200));
    // Keys in other than Go's order, so the struct order of the metadata form shows.
    let created = sim
        .create(
            "",
            "configmaps",
            json!({"metadata": {
                "labels": {"tier": "x", "app": "meta"},
                "annotations": {"note": "<&>"},
                "ownerReferences": [{"uid": "0b9f", "name": "owner", "kind": "Deployment", "apiVersion": "apps/v1", "controller": true}],
                "namespace": "fixtures-b",
                "name": "meta-1"
            }, "data": {"k": "v"}}),
        )
        .unwrap();
    let (m, _) = next_pair(&mut meta, &mut full).await;
    assert_eq!(m["type"], "ADDED");
    let line = serde_json::to_string(&m).unwrap();
    assert!(
        line.contains(r#""metadata":{"name":"meta-1","namespace":"fixtures-b","uid":"#),
        "{line}"
    );
    assert!(m["object"].get("data").is_none());
    // Changed while matching: MODIFIED; stops matching: DELETED with the previous state and
    // the new RV; matches again: ADDED; deleted: DELETED.
    let mut obj = created.clone();
    obj["data"]["k"] = json!("v2");
    let modified = sim.update("", "configmaps", obj).unwrap();
    let (m, _) = next_pair(&mut meta, &mut full).await;
    assert_eq!(m["type"], "MODIFIED");
    let mut obj = modified.clone();
    obj["metadata"]["labels"]["app"] = json!("other");
    let left = sim.update("", "configmaps", obj).unwrap();
    let (m, _) = next_pair(&mut meta, &mut full).await;
    assert_eq!(m["type"], "DELETED");
    assert_eq!(m["object"]["metadata"]["labels"]["app"], "meta");
    assert_eq!(
        m["object"]["metadata"]["resourceVersion"],
        left["metadata"]["resourceVersion"]
    );
    let mut obj = left.clone();
    obj["metadata"]["labels"]["app"] = json!("meta");
    sim.update("", "configmaps", obj).unwrap();
    let (m, _) = next_pair(&mut meta, &mut full).await;
    assert_eq!(m["type"], "ADDED");
    sim.delete("", "configmaps", Some("fixtures-b"), "meta-1")
        .unwrap();
    let (m, _) = next_pair(&mut meta, &mut full).await;
    assert_eq!(m["type"], "DELETED");
    // The type moved past the start: periodic BOOKMARKs, as PartialObjectMetadata, the next
    // one at the delete's RV (the type's last event).
    let rv = sim.current_rv();
    let want = format!(
        r#"{{"type":"BOOKMARK","object":{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{{"resourceVersion":"{rv}"{null_ts}}}}}}}"#
    );
    let rv_text = rv.to_string();
    loop {
        let line = meta.next_line(Duration::from_secs(10)).await.unwrap();
        let ev: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(ev["type"], "BOOKMARK", "{line}");
        if ev["object"]["metadata"]["resourceVersion"] == rv_text.as_str() {
            assert_eq!(line, want);
            break;
        }
    }
    // A watch from a compacted RV: one ERROR event, a plain Status as for the full form.
    // Beyond the watch cache's window too (v1.34 serves older lists from it).
    sim.compact();
    sim.compact_watch_cache();
    let old = format!("{CMS_B}?watch=1&resourceVersion={}", rv - 1);
    let mut meta = Stream::open(sim.addr(), &old, POM).await;
    let mut full = Stream::open(sim.addr(), &old, "application/json, */*").await;
    let m = meta.next_line(Duration::from_secs(10)).await.unwrap();
    assert_eq!(Some(m), full.next_line(Duration::from_secs(10)).await);
    assert_eq!(meta.next_line(Duration::from_secs(10)).await, None);
}

async fn watch_list_in_metadata_form(p: Profile) {
    // v1.34 writes no zero creationTimestamp in a BOOKMARK's ObjectMeta.
    let null_ts = if p == Profile::V1_28 {
        r#","creationTimestamp":null"#
    } else {
        ""
    };
    let sim = seeded(fast_cfg()).await;
    let list = get_as(&sim, WIDGETS_A, POM_LIST_JSON).await.json();
    let path = format!(
        "{WIDGETS_A}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=30"
    );
    let mut meta = Stream::open(sim.addr(), &path, POM).await;
    let mut full = Stream::open(sim.addr(), &path, "application/json, */*").await;
    let mut added = Vec::new();
    let (m, f) = loop {
        let (m, f) = next_pair(&mut meta, &mut full).await;
        if m["type"] != "ADDED" {
            break (m, f);
        }
        added.push(m["object"].clone());
    };
    // The initial state is the list's items (the same bytes: struct order for a CR).
    assert_eq!(Value::Array(added), list["items"]);
    assert_eq!(m["type"], "BOOKMARK");
    let rv = f["object"]["metadata"]["resourceVersion"].as_str().unwrap();
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{{"resourceVersion":"{rv}"{null_ts},"annotations":{{"k8s.io/initial-events-end":"true"}}}}}}}}"#
        )
    );
    // Then live events, still in metadata form.
    let mut w = sim
        .get(
            "fixtures.example.com",
            "widgets",
            Some("fixtures-a"),
            "w-blue",
        )
        .unwrap();
    w["metadata"]["labels"] = json!({"b": "1", "a": "2"});
    sim.update("fixtures.example.com", "widgets", w).unwrap();
    let (m, _) = next_pair(&mut meta, &mut full).await;
    assert_eq!(m["type"], "MODIFIED");
    // A custom resource's metadata keeps Go's struct order, not the sorted order of its JSON.
    let pom = get_as(&sim, &format!("{WIDGETS_A}/w-blue"), POM)
        .await
        .text();
    assert!(
        pom.starts_with(r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"w-blue","namespace":"fixtures-a","uid":"#),
        "{pom}"
    );
    assert!(pom.contains(r#""labels":{"a":"2","b":"1"},"managedFields":[{"manager":"#));
}

per_profile!(
    metadata_reads_match_recorded_bytes,
    wrong_forms_fallbacks_and_errors,
    metadata_lists_in_protobuf,
    paging_in_metadata_form,
    watch_events_in_metadata_form,
    watch_list_in_metadata_form,
);
