//! The sim's protobuf answers compared byte for byte with the protobuf recordings of a real
//! kube-apiserver v1.28 (`protobuf-*`, `err-protobuf-*`, `gzip-protobuf-*`), over HTTP:
//! negotiation, Content-Type, envelopes, lists and paging, watch frames, Status errors,
//! gzip, and the JSON answers where the apiserver (or the sim's "never guess" rule) gives
//! JSON. Server-assigned values (uid, resourceVersion, creationTimestamp, continue) are
//! normalised inside the protobuf messages, as `sim_http_fixtures.rs` does in JSON.

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
use kcache_sim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::time::Duration;

const PB: &str = "application/vnd.kubernetes.protobuf";
const PB_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const CMS_A: &str = "/api/v1/namespaces/fixtures-a/configmaps";
const CMS_B: &str = "/api/v1/namespaces/fixtures-b/configmaps";

// ---- a minimal protobuf reader/rewriter, to normalise server-assigned values -------------

fn varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = buf[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[derive(Clone, Debug, PartialEq)]
enum F {
    Varint(u64),
    Bytes(Vec<u8>),
}

/// The fields of a message, in wire order.
fn fields(buf: &[u8]) -> Vec<(u32, F)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos);
        let v = match key & 7 {
            0 => F::Varint(varint(buf, &mut pos)),
            2 => {
                let len = varint(buf, &mut pos) as usize;
                let v = buf[pos..pos + len].to_vec();
                pos += len;
                F::Bytes(v)
            }
            t => panic!("wire type {t}"),
        };
        out.push(((key >> 3) as u32, v));
    }
    out
}

fn write(fields: &[(u32, F)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        match v {
            F::Varint(x) => {
                put_varint(&mut out, u64::from(*n) << 3);
                put_varint(&mut out, *x);
            }
            F::Bytes(b) => {
                put_varint(&mut out, (u64::from(*n) << 3) | 2);
                put_varint(&mut out, b.len() as u64);
                out.extend_from_slice(b);
            }
        }
    }
    out
}

/// The message with every length-delimited field `n` rewritten by `f`.
fn map(msg: &[u8], n: u32, f: &dyn Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let fs: Vec<(u32, F)> = fields(msg)
        .into_iter()
        .map(|(k, v)| match v {
            F::Bytes(b) if k == n => (k, F::Bytes(f(&b))),
            other => (k, other),
        })
        .collect();
    let out = write(&fs);
    assert_eq!(write(&fields(msg)), msg, "the reader round-trips");
    out
}

/// The first length-delimited field `n` of a message.
fn get(msg: &[u8], n: u32) -> Vec<u8> {
    fields(msg)
        .into_iter()
        .find_map(|(k, v)| match v {
            F::Bytes(b) if k == n => Some(b),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no field {n}"))
}

fn rv_text(rv: &[u8], base: Option<u64>) -> Vec<u8> {
    let s = std::str::from_utf8(rv).unwrap();
    match (base, s.parse::<u64>()) {
        (Some(b), Ok(n)) if n >= b => format!("+{}", n - b).into_bytes(),
        (None, _) if !s.is_empty() => b"RV".to_vec(),
        _ => rv.to_vec(),
    }
}

/// ObjectMeta: uid, resourceVersion, creationTimestamp.
fn norm_meta(m: &[u8], base: Option<u64>) -> Vec<u8> {
    let m = map(m, 5, &|_| b"UID".to_vec());
    let m = map(&m, 6, &|rv| rv_text(rv, base));
    map(&m, 8, &|_| Vec::new())
}

/// An object: its ObjectMeta (field 1).
fn norm_obj(o: &[u8], base: Option<u64>) -> Vec<u8> {
    map(o, 1, &|m| norm_meta(m, base))
}

/// A list: ListMeta resourceVersion and continue, and each item.
fn norm_list(l: &[u8]) -> Vec<u8> {
    let l = map(l, 1, &|lm| {
        let lm = map(lm, 2, &|rv| rv_text(rv, None));
        map(&lm, 3, &|c| {
            if c.is_empty() {
                Vec::new()
            } else {
                b"CONT".to_vec()
            }
        })
    });
    map(&l, 2, &|o| norm_obj(o, None))
}

/// A body: `k8s\0` + Unknown whose raw (field 2) goes through `f`.
fn norm_env(body: &[u8], f: &dyn Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    assert_eq!(&body[..4], b"k8s\0", "magic");
    let mut out = b"k8s\0".to_vec();
    out.extend(map(&body[4..], 2, f));
    out
}

/// The frames of a watch body.
fn frames(body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        out.push(rest[4..4 + len].to_vec());
        rest = &rest[4 + len..];
    }
    out
}

fn frame(ev: &[u8]) -> Vec<u8> {
    let mut out = (ev.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(ev);
    out
}

/// A watch body with each event's object normalised.
fn norm_watch(body: &[u8], base: Option<u64>) -> Vec<u8> {
    frames(body)
        .iter()
        .flat_map(|ev| {
            let ev = map(ev, 2, &|raw_ext| {
                map(raw_ext, 1, &|env| norm_env(env, &|o| norm_obj(o, base)))
            });
            frame(&ev)
        })
        .collect()
}

/// (type, apiVersion, kind, raw) of each frame.
fn events(body: &[u8]) -> Vec<(String, String, String, Vec<u8>)> {
    frames(body)
        .iter()
        .map(|ev| {
            let ty = String::from_utf8(get(ev, 1)).unwrap();
            let env = get(&get(ev, 2), 1);
            let (av, kind, raw) = envelope(&env);
            (ty, av, kind, raw)
        })
        .collect()
}

/// (apiVersion, kind, raw) of an envelope.
fn envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    assert_eq!(&body[..4], b"k8s\0", "magic");
    let u = &body[4..];
    let tm = get(u, 1);
    (
        String::from_utf8(get(&tm, 1)).unwrap(),
        String::from_utf8(get(&tm, 2)).unwrap(),
        get(u, 2),
    )
}

// ---- helpers -----------------------------------------------------------------------------

fn read(name: &str) -> Vec<u8> {
    kcache_sim::recordings::read_in(profile(), name)
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The `Accept` (and `Accept-Encoding`) a fixture's request sent.
fn recorded_headers(name: &str) -> Vec<(String, String)> {
    fixture(&format!("{name}.http"))
        .lines()
        .skip_while(|l| !l.starts_with("### request"))
        .skip(2)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(": "))
        .filter(|(k, _)| *k == "Accept" || *k == "Accept-Encoding")
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A recorded response header.
fn recorded_header(name: &str, header: &str) -> Option<String> {
    fixture(&format!("{name}.http"))
        .lines()
        .skip_while(|l| !l.starts_with("### response"))
        .find_map(|l| {
            l.split_once(": ")
                .filter(|(k, _)| k.eq_ignore_ascii_case(header))
                .map(|(_, v)| v.to_string())
        })
}

/// Requests a fixture's own request line with its own Accept headers; checks the status and
/// Content-Type (and Content-Encoding) against the recording.
async fn replay(sim: &Sim, name: &str, path: Option<&str>, max: Duration) -> Resp {
    let (method, recorded_path) = fixture_request(name);
    let headers = recorded_headers(name);
    let extra: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let path = path.unwrap_or(&recorded_path);
    let resp = request(sim.addr(), &method, path, &extra, b"", max).await;
    let status: u16 = fixture(&format!("{name}.http"))
        .lines()
        .find(|l| l.starts_with("HTTP/1.1 "))
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert_eq!(resp.status, status, "status of {name}");
    for h in ["Content-Type", "Content-Encoding", "Vary"] {
        assert_eq!(
            resp.header(h),
            recorded_header(name, h).as_deref(),
            "{h} of {name}"
        );
    }
    resp
}

/// Creates every item of a JSON list body (the server-assigned fields removed).
fn seed_items(sim: &Sim, list: &Value) {
    for item in list["items"].as_array().unwrap() {
        sim.create("", "configmaps", strip_server_fields(item.clone()))
            .unwrap();
    }
}

// ---- the recordings ----------------------------------------------------------------------

async fn get_list_and_paging_match_the_recordings(_p: Profile) {
    let sim = Sim::start(fast_cfg()).await.unwrap();
    // fixtures-a as it was when the protobuf recordings were made (cm-01 patched).
    let a: Value = serde_json::from_str(&fixture("list-cm-ns-a-trailing-slash.json")).unwrap();
    seed_items(&sim, &a);
    let b: Value = serde_json::from_str(&fixture("list-cm-ns-b.json")).unwrap();
    seed_items(&sim, &b);

    let r = replay(&sim, "protobuf-get-cm", None, Duration::from_secs(5)).await;
    assert_eq!(
        norm_env(&r.body, &|o| norm_obj(o, None)),
        norm_env(&read("protobuf-get-cm.bin"), &|o| norm_obj(o, None))
    );
    assert_eq!(
        r.header("Content-Length"),
        Some(r.body.len().to_string().as_str())
    );

    for name in ["protobuf-list-cm-ns-b", "protobuf-list-cm-ns-a-limit5"] {
        let r = replay(&sim, name, None, Duration::from_secs(5)).await;
        assert_eq!(
            norm_env(&r.body, &norm_list),
            norm_env(&read(&format!("{name}.bin")), &norm_list),
            "{name}"
        );
        let (av, kind, _) = envelope(&r.body);
        assert_eq!((av.as_str(), kind.as_str()), ("v1", "ConfigMapList"));
    }

    // The next page through the continue token, and its last page: same items as in JSON.
    let (_, _, raw) = envelope(
        &request(
            sim.addr(),
            "GET",
            &format!("{CMS_A}?limit=5"),
            &[("Accept", PB)],
            b"",
            Duration::from_secs(5),
        )
        .await
        .body,
    );
    let token = String::from_utf8(get(&get(&raw, 1), 3)).unwrap();
    let lead = if profile() == Profile::V1_34 { "/" } else { "" };
    assert_eq!(decode_token(&token)["start"], format!("{lead}cm-05\u{0}"));
    let page2 = request(
        sim.addr(),
        "GET",
        &format!("{CMS_A}?limit=20&continue={token}"),
        &[("Accept", PB)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(page2.header("Content-Type"), Some(PB));
    let (_, _, raw) = envelope(&page2.body);
    let lm = fields(&get(&raw, 1));
    // selfLink, resourceVersion, continue always; no remainingItemCount on the last page.
    assert_eq!(lm.len(), 3);
    assert_eq!(lm[2], (3, F::Bytes(Vec::new())));
    let items: Vec<Vec<u8>> = fields(&raw)
        .into_iter()
        .filter(|(n, _)| *n == 2)
        .map(|(_, v)| match v {
            F::Bytes(b) => b,
            F::Varint(_) => panic!("item"),
        })
        .collect();
    assert_eq!(items.len(), 20);
    let names: Vec<String> = items
        .iter()
        .map(|o| String::from_utf8(get(&get(o, 1), 1)).unwrap())
        .collect();
    assert_eq!(names.first().map(String::as_str), Some("cm-06"));
    assert_eq!(names.last().map(String::as_str), Some("cm-25"));
}

async fn big_lists_are_gzipped(_p: Profile) {
    let sim = Sim::start(fast_cfg()).await.unwrap();
    let c: Value = serde_json::from_slice(&gunzip(&read("gzip-list-cm-ns-c-big.json.gz"))).unwrap();
    seed_items(&sim, &c);
    let name = "gzip-protobuf-list-cm-ns-c-big";
    let r = replay(&sim, name, None, Duration::from_secs(5)).await;
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"));
    assert_eq!(
        norm_env(&gunzip(&r.body), &norm_list),
        norm_env(&gunzip(&read(&format!("{name}.bin.gz"))), &norm_list)
    );
    // Without Accept-Encoding: the same bytes, not compressed.
    let plain = request(
        sim.addr(),
        "GET",
        "/api/v1/namespaces/fixtures-c/configmaps",
        &[("Accept", PB)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(plain.header("Content-Encoding"), None);
    assert_eq!(plain.body, gunzip(&r.body));
    // A small list with Accept-Encoding: gzip is not compressed.
    let small = request(
        sim.addr(),
        "GET",
        &format!("{CMS_A}?limit=1"),
        &[("Accept", PB), ("Accept-Encoding", "gzip")],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(small.header("Content-Encoding"), None);
}

async fn errors_match_the_recordings(_p: Profile) {
    let sim = seeded(fast_cfg()).await;
    let r = replay(
        &sim,
        "protobuf-err-get-cm-missing",
        None,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.body, read("protobuf-err-get-cm-missing.bin"));

    // Custom resources: protobuf alone is a 406 (itself a protobuf Status) ...
    let r = replay(
        &sim,
        "err-protobuf-list-widgets-406",
        None,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.body, read("err-protobuf-list-widgets-406.json"));
    // ... protobuf then JSON falls back to JSON.
    let name = "protobuf-list-widgets-falls-back-json";
    let r = replay(&sim, name, None, Duration::from_secs(5)).await;
    assert_eq!(
        normalize(&r.text(), None),
        normalize(&fixture(&format!("{name}.json")), None)
    );

    // 410 for a compacted resourceVersion: one ERROR frame, then the stream ends. (v1.34's
    // recording replays history instead: its cache still reached RV 1, the recording's
    // environment; no protobuf form of the Widget one.)
    if profile() == Profile::V1_34 {
        return;
    }
    // Beyond the watch cache's window too (v1.34 serves older lists from it).
    sim.compact();
    sim.compact_watch_cache();
    let floor = sim.current_rv();
    let name = "err-protobuf-watch-cm-rv1-too-old";
    let r = replay(&sim, name, None, Duration::from_secs(5)).await;
    assert!(r.clean_end);
    let recorded = read(&format!("{name}.bin"));
    // The recording's "(1484)" is its compaction floor; the sim says its own.
    let set_floor = |body: &[u8], text: &str| -> Vec<u8> {
        frames(body)
            .iter()
            .flat_map(|ev| {
                frame(&map(ev, 2, &|re| {
                    map(re, 1, &|env| {
                        norm_env(env, &|status| map(status, 3, &|_| text.as_bytes().to_vec()))
                    })
                }))
            })
            .collect()
    };
    assert_eq!(
        set_floor(&r.body, "MSG"),
        set_floor(&recorded, "MSG"),
        "everything but the message"
    );
    let evs = events(&r.body);
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].0, "ERROR");
    assert_eq!(
        String::from_utf8(get(&evs[0].3, 3)).unwrap(),
        format!("too old resource version: 1 ({floor})")
    );
    assert_eq!(
        set_floor(&r.body, "too old resource version: 1 (1484)"),
        recorded
    );
}

/// Replays the writes of the recorded watch (create, label, patch, relabel, delete), with the
/// recorded objects so that their managedFields are the recording's.
fn replay_recorded_writes(sim: &Sim) {
    for line in fixture("watch-cm-ns-a-from-list-rv.json").lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        let obj = strip_server_fields(ev["object"].clone());
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        match ev["type"].as_str().unwrap() {
            "ADDED" => {
                sim.create("", "configmaps", obj).unwrap();
            }
            "MODIFIED" => {
                sim.update("", "configmaps", obj).unwrap();
            }
            "DELETED" => {
                sim.delete("", "configmaps", Some("fixtures-a"), &name)
                    .unwrap();
            }
            other => panic!("unexpected {other}"),
        }
    }
}

async fn watch_matches_the_recording(_p: Profile) {
    let sim = seeded(fast_cfg()).await;
    let base = sim.current_rv();
    let addr = sim.addr();
    let name = "protobuf-watch-cm-ns-a-label-app-web";
    let path = format!(
        "{CMS_A}?labelSelector=app%3Dweb&resourceVersion={base}&watch=true&timeoutSeconds=2"
    );
    let watch = tokio::spawn(async move {
        request(
            addr,
            "GET",
            &path,
            &[("Accept", PB_WATCH)],
            b"",
            Duration::from_secs(5),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    replay_recorded_writes(&sim);
    let r = watch.await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some(PB_WATCH));
    assert_eq!(
        r.header("Content-Type").map(str::to_string),
        recorded_header(name, "Content-Type")
    );
    assert!(r.clean_end);
    // v1.28's RVs as offsets from the start; v1.34's recording has other clients' writes
    // in between, so its RVs are only normalised away.
    let (ours, recorded) = match profile() {
        Profile::V1_28 => (Some(base), Some(3909)),
        Profile::V1_34 => (None, None),
    };
    assert_eq!(
        norm_watch(&r.body, ours),
        norm_watch(&read(&format!("{name}.bin")), recorded)
    );
    // One chunk per frame.
    assert_eq!(r.chunks.len(), 5);
    // The same events replayed from history.
    let again = request(
        sim.addr(),
        "GET",
        &format!(
            "{CMS_A}?labelSelector=app%3Dweb&resourceVersion={base}&watch=true&timeoutSeconds=1"
        ),
        &[("Accept", PB)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(again.header("Content-Type"), Some(PB_WATCH));
    assert_eq!(again.body, r.body);
}

async fn bookmarks_are_protobuf_objects_of_the_kind(_p: Profile) {
    let sim = seeded(fast_cfg()).await;
    // WatchList: the initial ADDED events, then the initial-events-end BOOKMARK.
    let r = request(
        sim.addr(),
        "GET",
        &format!("{CMS_B}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"),
        &[("Accept", PB_WATCH)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.header("Content-Type"), Some(PB_WATCH));
    let evs = events(&r.body);
    let types: Vec<&str> = evs.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "ADDED", "BOOKMARK"]);
    let (_, av, kind, raw) = &evs[3];
    assert_eq!((av.as_str(), kind.as_str()), ("v1", "ConfigMap"));
    let rv = sim.current_rv().to_string();
    // ConfigMap { metadata: ObjectMeta { name "", generateName "", namespace "", selfLink "",
    // uid "", resourceVersion, generation 0, creationTimestamp (zero: empty), annotations
    // {k8s.io/initial-events-end: true} } }: the maps data/binaryData have no entries.
    let key = b"k8s.io/initial-events-end";
    let mut entry = vec![0x0a, key.len() as u8];
    entry.extend_from_slice(key);
    entry.extend_from_slice(&[0x12, 4]);
    entry.extend_from_slice(b"true");
    let mut meta = vec![
        0x0a,
        0,
        0x12,
        0,
        0x1a,
        0,
        0x22,
        0,
        0x2a,
        0,
        0x32,
        rv.len() as u8,
    ];
    meta.extend_from_slice(rv.as_bytes());
    meta.extend_from_slice(&[0x38, 0, 0x42, 0, 0x62, entry.len() as u8]);
    meta.extend_from_slice(&entry);
    let mut want = vec![0x0a, meta.len() as u8];
    want.extend_from_slice(&meta);
    assert_eq!(raw, &want);

    // A periodic bookmark of a Pod watch: an empty Pod with only the resourceVersion, its
    // spec and status there with their always-written fields.
    let start = sim.current_rv();
    let addr = sim.addr();
    let w = tokio::spawn(async move {
        let p = format!("/api/v1/namespaces/fixtures-a/pods?allowWatchBookmarks=true&resourceVersion={start}&watch=1&timeoutSeconds=3");
        request(
            addr,
            "GET",
            &p,
            &[("Accept", PB_WATCH)],
            b"",
            Duration::from_secs(6),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pod = sim.get("", "pods", Some("fixtures-a"), "pod-1a").unwrap();
    let mut changed = pod.clone();
    changed["metadata"]["labels"]["touched"] = json!("yes");
    sim.update("", "pods", changed).unwrap();
    let r = w.await.unwrap();
    let evs = events(&r.body);
    assert_eq!(evs[0].0, "MODIFIED");
    let bm = evs.iter().find(|e| e.0 == "BOOKMARK").expect("a bookmark");
    assert_eq!(bm.2, "Pod");
    let top: Vec<u32> = fields(&bm.3).iter().map(|(n, _)| *n).collect();
    assert_eq!(top, [1, 2, 3], "metadata, spec and status always written");
    let spec = get(&bm.3, 2);
    // restartPolicy(3) dnsPolicy(6) serviceAccountName(8) serviceAccount(9) nodeName(10)
    // hostNetwork(11) hostPID(12) hostIPC(13) hostname(16) subdomain(17) schedulerName(19)
    // priorityClassName(24): the non-pointer fields of PodSpec.
    let spec_fields: Vec<u32> = fields(&spec).iter().map(|(n, _)| *n).collect();
    assert_eq!(spec_fields, [3, 6, 8, 9, 10, 11, 12, 13, 16, 17, 19, 24]);
    let status_fields: Vec<u32> = fields(&get(&bm.3, 3)).iter().map(|(n, _)| *n).collect();
    // phase message reason hostIP podIP qosClass nominatedNodeName resize.
    assert_eq!(status_fields, [1, 3, 4, 5, 6, 9, 11, 14]);
}

async fn pods_and_other_builtins_are_protobuf(_p: Profile) {
    let sim = seeded(fast_cfg()).await;
    let r = request(
        sim.addr(),
        "GET",
        "/api/v1/namespaces/fixtures-a/pods",
        &[(
            "Accept",
            "application/vnd.kubernetes.protobuf, application/json",
        )],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.header("Content-Type"), Some(PB));
    let (_, kind, raw) = envelope(&r.body);
    assert_eq!(kind, "PodList");
    assert_eq!(fields(&raw).iter().filter(|(n, _)| *n == 2).count(), 4);

    // The demo cluster: every seed object of a covered kind is served in protobuf.
    let demo = Sim::start(SimConfig::default()).await.unwrap();
    kcache_sim::seed::create_all(
        &demo,
        kcache_sim::seed::demo_cluster(&kcache_sim::seed::DemoSpec::default()),
    )
    .unwrap();
    for (path, kind) in [
        ("/api/v1/pods", "PodList"),
        ("/api/v1/configmaps", "ConfigMapList"),
        ("/api/v1/secrets", "SecretList"),
        ("/api/v1/services", "ServiceList"),
        ("/api/v1/namespaces", "NamespaceList"),
        ("/api/v1/nodes", "NodeList"),
        ("/api/v1/serviceaccounts", "ServiceAccountList"),
        ("/api/v1/events", "EventList"),
        ("/api/v1/endpoints", "EndpointsList"),
        ("/apis/apps/v1/deployments", "DeploymentList"),
        ("/apis/apps/v1/replicasets", "ReplicaSetList"),
        ("/apis/apps/v1/statefulsets", "StatefulSetList"),
        ("/apis/apps/v1/daemonsets", "DaemonSetList"),
        ("/apis/batch/v1/jobs", "JobList"),
        (
            "/apis/discovery.k8s.io/v1/endpointslices",
            "EndpointSliceList",
        ),
    ] {
        let r = request(
            demo.addr(),
            "GET",
            path,
            &[("Accept", PB)],
            b"",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("Content-Type"), Some(PB), "{path}");
        let (api_version, list_kind, _) = envelope(&r.body);
        assert_eq!(list_kind, kind);
        let want_version = match path.strip_prefix("/apis/") {
            Some(rest) => rest.split('/').take(2).collect::<Vec<_>>().join("/"),
            None => "v1".to_string(),
        };
        assert_eq!(api_version, want_version, "{path}");
    }
    // A built-in kind without schema (every type the sim serves by default has one: this one
    // is registered as a built-in): JSON, even to a protobuf-only client (the sim does not
    // guess; a real apiserver would answer protobuf, only custom resources get the 406).
    demo.register(kcache_sim::ResourceType {
        group: "networking.k8s.io".into(),
        version: "v1".into(),
        resource: "ingresses".into(),
        singular: "ingress".into(),
        kind: "Ingress".into(),
        namespaced: true,
        short_names: vec!["ing".into()],
        ..kcache_sim::ResourceType::default()
    });
    for accept in [PB, "application/vnd.kubernetes.protobuf, application/json"] {
        let r = request(
            demo.addr(),
            "GET",
            "/apis/networking.k8s.io/v1/ingresses",
            &[("Accept", accept)],
            b"",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        // Watches too, from now (nothing to encode at the start) and with the initial state.
        let now = demo.current_rv();
        for query in [format!("resourceVersion={now}&"), String::new()] {
            let r = request(
                demo.addr(),
                "GET",
                &format!("/apis/networking.k8s.io/v1/ingresses?{query}watch=true&timeoutSeconds=1"),
                &[("Accept", accept)],
                b"",
                Duration::from_secs(5),
            )
            .await;
            assert_eq!(r.status, 200);
            assert_eq!(r.header("Content-Type"), Some("application/json"));
        }
        // And an empty list.
        let r = request(
            demo.addr(),
            "GET",
            "/apis/networking.k8s.io/v1/namespaces/nowhere/ingresses",
            &[("Accept", accept)],
            b"",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(r.header("Content-Type"), Some("application/json"));
    }
    // JSON clients are unaffected.
    let r = common::get(&demo, "/api/v1/pods").await;
    assert_eq!(r.header("Content-Type"), Some("application/json"));
}

async fn an_object_with_an_unknown_field_is_answered_in_json(_p: Profile) {
    let sim = seeded(fast_cfg()).await;
    let start = sim.current_rv();
    let addr = sim.addr();
    // A protobuf watch from now: the first event is protobuf, the odd object ends it.
    let live = tokio::spawn(async move {
        let p = format!("{CMS_B}?resourceVersion={start}&watch=true&timeoutSeconds=5");
        request(
            addr,
            "GET",
            &p,
            &[("Accept", PB_WATCH)],
            b"",
            Duration::from_secs(8),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    sim.create(
        "",
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "plain", "namespace": "fixtures-b"}}),
    )
    .unwrap();
    let plain_rv = sim.current_rv();
    sim.create(
        "",
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "odd", "namespace": "fixtures-b"},
               "futureField": {"x": 1}}),
    )
    .unwrap();
    let live = live.await.unwrap();
    assert_eq!(live.header("Content-Type"), Some(PB_WATCH));
    assert!(live.clean_end);
    assert!(
        live.total < Duration::from_secs(4),
        "ended before its timeout"
    );
    let evs = events(&live.body);
    assert_eq!(evs.len(), 1);
    assert_eq!(get(&get(&evs[0].3, 1), 1), b"plain");
    // Re-watching from the last event seen: the replay has the odd object, so JSON.
    let again = request(
        sim.addr(),
        "GET",
        &format!("{CMS_B}?resourceVersion={plain_rv}&watch=true&timeoutSeconds=1"),
        &[("Accept", PB_WATCH)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(again.header("Content-Type"), Some("application/json"));
    assert_eq!(again.lines()[0]["object"]["futureField"], json!({"x": 1}));
    // GET of it and a list containing it: JSON; the other objects are still protobuf.
    for path in [format!("{CMS_B}/odd"), CMS_B.to_string()] {
        let r = request(
            sim.addr(),
            "GET",
            &path,
            &[("Accept", PB)],
            b"",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Content-Type"), Some("application/json"), "{path}");
    }
    let r = request(
        sim.addr(),
        "GET",
        &format!("{CMS_B}/plain"),
        &[("Accept", PB)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.header("Content-Type"), Some(PB));
    // A watch whose initial state has it: the whole stream is JSON.
    let r = request(
        sim.addr(),
        "GET",
        &format!("{CMS_B}?watch=true&timeoutSeconds=1"),
        &[("Accept", PB_WATCH)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(r.lines().len(), 5);
}

async fn writes_and_other_errors_answer_protobuf_clients_in_protobuf(_p: Profile) {
    let sim = seeded(fast_cfg()).await;
    let body =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"posted"},"data":{"k":"v"}}"#;
    let r = request(
        sim.addr(),
        "POST",
        CMS_B,
        &[("Accept", PB), ("Content-Type", "application/json")],
        body,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.header("Content-Type"), Some(PB));
    let (_, kind, raw) = envelope(&r.body);
    assert_eq!(kind, "ConfigMap");
    assert_eq!(get(&get(&raw, 1), 1), b"posted");
    // Its data map: one entry {key 1, value 2}.
    assert_eq!(get(&raw, 2), [0x0a, 1, b'k', 0x12, 1, b'v']);

    // DELETE of a built-in: a Status Success.
    let r = request(
        sim.addr(),
        "DELETE",
        &format!("{CMS_B}/posted"),
        &[("Accept", PB)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some(PB));
    let (av, kind, status) = envelope(&r.body);
    assert_eq!((av.as_str(), kind.as_str()), ("v1", "Status"));
    assert_eq!(get(&status, 2), b"Success");
    let details = get(&status, 5);
    assert_eq!(get(&details, 1), b"posted");
    assert_eq!(get(&details, 3), b"configmaps");

    // A 504 for a future resourceVersion: its cause and Retry-After.
    let r = request(
        sim.addr(),
        "GET",
        &format!("{CMS_B}?resourceVersion={}", sim.current_rv() + 1000),
        &[("Accept", PB)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, 504);
    assert_eq!(r.header("Content-Type"), Some(PB));
    assert_eq!(r.header("Retry-After"), Some("1"));
    let (_, kind, status) = envelope(&r.body);
    assert_eq!(kind, "Status");
    let details = get(&status, 5);
    let cause = get(&details, 4);
    assert_eq!(get(&cause, 1), b"ResourceVersionTooLarge");
    let retry = fields(&details)
        .into_iter()
        .find(|(n, _)| *n == 5)
        .map(|(_, v)| v);
    assert_eq!(retry, Some(F::Varint(1)));

    // The same error to a JSON client is JSON, as before.
    let r = common::get(
        &sim,
        &format!("{CMS_B}?resourceVersion={}", sim.current_rv() + 1000),
    )
    .await;
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    // A non-API path keeps its plain-text 404.
    let r = request(
        sim.addr(),
        "GET",
        "/apis/nonexistent.example.com/v1/things",
        &[("Accept", PB)],
        b"",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
}

/// A list's resourceVersion, continue, remainingItemCount and items' (name,
/// resourceVersion, uid).
type ListSummary = (String, String, Option<u64>, Vec<(String, String, String)>);

/// A [`ListSummary`] from a protobuf list body.
fn proto_list(body: &[u8]) -> ListSummary {
    let (_, _, raw) = envelope(body);
    let lm = get(&raw, 1);
    let text = |m: &[u8], n: u32| String::from_utf8(get(m, n)).unwrap();
    let remaining = fields(&lm).into_iter().find_map(|(n, v)| match v {
        F::Varint(x) if n == 4 => Some(x),
        _ => None,
    });
    let items = fields(&raw)
        .into_iter()
        .filter_map(|(n, v)| match v {
            F::Bytes(o) if n == 2 => {
                let m = get(&o, 1);
                Some((text(&m, 1), text(&m, 6), text(&m, 5)))
            }
            _ => None,
        })
        .collect();
    (text(&lm, 2), text(&lm, 3), remaining, items)
}

/// A [`ListSummary`] from a JSON list.
fn json_list(v: &Value) -> ListSummary {
    let m = &v["metadata"];
    let s = |x: &Value| x.as_str().unwrap_or("").to_string();
    let items = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            (s(&m["name"]), s(&m["resourceVersion"]), s(&m["uid"]))
        })
        .collect();
    (
        s(&m["resourceVersion"]),
        s(&m["continue"]),
        m["remainingItemCount"].as_u64(),
        items,
    )
}

async fn lists_and_watches_are_the_json_ones_in_protobuf(_p: Profile) {
    let sim = seeded(fast_cfg()).await;
    let first = sim.current_rv();
    // Some history: updates and a delete, so that Exact lists and resumed watches differ
    // from the current state.
    for i in 1..=3 {
        let mut cm = sim
            .get("", "configmaps", Some("fixtures-a"), &format!("cm-0{i}"))
            .unwrap();
        cm["data"]["extra"] = json!(format!("v{i}"));
        sim.update("", "configmaps", cm).unwrap();
    }
    sim.delete("", "configmaps", Some("fixtures-a"), "cm-25")
        .unwrap();
    let token = {
        let r = common::get(&sim, &format!("{CMS_A}?limit=4")).await;
        r.json()["metadata"]["continue"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let queries = [
        String::new(),
        "resourceVersion=0".into(),
        "limit=4".into(),
        format!("limit=4&continue={token}"),
        "labelSelector=app%3Dweb&limit=3".into(),
        "fieldSelector=metadata.name%21%3Dcm-01".into(),
        format!("resourceVersion={first}&resourceVersionMatch=Exact"),
        format!("resourceVersion={first}&resourceVersionMatch=NotOlderThan&limit=2"),
        format!("resourceVersion={first}"),
    ];
    for q in &queries {
        let path = format!("{CMS_A}?{q}");
        let j = common::get(&sim, &path).await;
        let p = request(
            sim.addr(),
            "GET",
            &path,
            &[("Accept", PB)],
            b"",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(p.status, j.status, "{q}");
        assert_eq!(p.header("Content-Type"), Some(PB), "{q}");
        assert_eq!(proto_list(&p.body), json_list(&j.json()), "{q}");
    }
    // Errors are the same Status, in protobuf: a bad continue token (400), an expired RV.
    // Beyond the watch cache's window too (v1.34 serves older lists from it).
    sim.compact();
    sim.compact_watch_cache();
    for q in [
        "continue=not-a-token".to_string(),
        format!("resourceVersion={first}&resourceVersionMatch=Exact"),
    ] {
        let path = format!("{CMS_A}?{q}");
        let j = common::get(&sim, &path).await;
        let p = request(
            sim.addr(),
            "GET",
            &path,
            &[("Accept", PB)],
            b"",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(p.status, j.status, "{q}");
        assert_eq!(p.header("Content-Type"), Some(PB));
        let (_, kind, status) = envelope(&p.body);
        assert_eq!(kind, "Status");
        let text = |n: u32| String::from_utf8(get(&status, n)).unwrap();
        let jv = j.json();
        assert_eq!(text(3), jv["message"].as_str().unwrap(), "{q}");
        assert_eq!(text(4), jv["reason"].as_str().unwrap(), "{q}");
    }
}

per_profile!(
    get_list_and_paging_match_the_recordings,
    big_lists_are_gzipped,
    errors_match_the_recordings,
    watch_matches_the_recording,
    bookmarks_are_protobuf_objects_of_the_kind,
    pods_and_other_builtins_are_protobuf,
    an_object_with_an_unknown_field_is_answered_in_json,
    writes_and_other_errors_answer_protobuf_clients_in_protobuf,
    lists_and_watches_are_the_json_ones_in_protobuf,
);
