//! Support for the rule-by-rule conformance tests (`rules.rs`, `rules_watch.rs`): replay a
//! recorded request against kcache (the simulated apiserver seeded with the recorded data set
//! behind it) and compare what a client sees with the recording: status, the body with
//! server-assigned values normalised, and the headers clients rely on (E6, E7).
//!
//! The including test crate declares `mod common;` (kcache + sim harness) and
//! `#[path = "sim_common/mod.rs"] mod raw;` (raw HTTP/1.1 client, fixture files, normaliser).
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{json, Value};

pub use crate::common::profile;
use crate::common::{Env, EnvBuilder};
use crate::raw::{self, Resp};
use kcache_sim::Profile;

/// A recording of the running test's profile (see `common::profile`) as text.
pub fn fixture(name: &str) -> String {
    raw::fixture_in(profile(), name)
}

/// The request line of a recording of the running test's profile: (method, path-and-query).
pub fn fixture_request(name: &str) -> (String, String) {
    raw::fixture_request_in(profile(), name)
}

/// The `resourceVersion=N` of a recording's request (the recordings' RVs differ by profile).
pub fn request_rv(name: &str) -> u64 {
    let (_, path) = fixture_request(name);
    let q = path
        .split_once("resourceVersion=")
        .unwrap_or_else(|| panic!("{name}: no resourceVersion in {path}"))
        .1;
    q[..q.find('&').unwrap_or(q.len())].parse().unwrap()
}

/// A continue token's start key as the running test's profile writes it: v1.34 roots it with
/// a `/` (`"/cm-10\u0000"`), v1.28 does not (DIFF-1.28.md item 1).
pub fn start_key(key: &str) -> String {
    match profile() {
        Profile::V1_28 => format!("{key}\u{0}"),
        Profile::V1_34 => format!("/{key}\u{0}"),
    }
}

/// `text` with the number after each `current: ` (the RV in a 504's message) replaced by `rv`.
pub fn with_current(text: &str, rv: u64) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("current: ") {
        out.push_str(&rest[..i + 9]);
        let after = &rest[i + 9..];
        let end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        out.push_str(&rv.to_string());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The namespace of most recordings.
pub const CMS_A: &str = "/api/v1/namespaces/fixtures-a/configmaps";
pub const CMS_B: &str = "/api/v1/namespaces/fixtures-b/configmaps";
pub const WIDGETS_A: &str = "/apis/fixtures.example.com/v1/namespaces/fixtures-a/widgets";
pub const WIDGETS: &str = "/apis/fixtures.example.com/v1/widgets";
pub const WIDGET_GROUP: &str = "fixtures.example.com";

/// The recorded data set behind kcache, with a 1 s bookmark interval so that W5 needs no
/// minute-long waits.
pub fn builder() -> EnvBuilder {
    let mut b = EnvBuilder::fixtures();
    b.config.watch.bookmark_interval_seconds = 1;
    if profile() == Profile::V1_34 {
        // The v1.34 recordings' `fixtures-a` namespace carries one more label and
        // managedFields entry (set by another seed of that cluster, DIFF-1.28.md section 3).
        let recorded: Value = serde_json::from_str(&fixture("get-namespace.json")).unwrap();
        let mut ns = raw::strip_server_fields(recorded);
        ns["apiVersion"] = json!("v1");
        ns["kind"] = json!("Namespace");
        let seeded = b
            .seed
            .iter_mut()
            .find(|o| o.resource == "namespaces" && o.name() == "fixtures-a")
            .expect("fixtures-a in the data set");
        seeded.object = ns;
    }
    b
}

pub async fn fixtures_env() -> Env {
    builder().start().await
}

/// The data set as it was before the recorder patched `cm-01` (RV 357 in the recordings):
/// the state most `fixtures-a` list recordings show.
pub async fn pre_patch_env() -> Env {
    let env = fixtures_env().await;
    set_cm01(&env, false);
    env.settle("", "configmaps").await;
    env
}

/// Put `cm-01` in its recorded state before (`patched = false`) or after the recorder's patch.
/// Returns the new resourceVersion.
pub fn set_cm01(env: &Env, patched: bool) -> u64 {
    let list = if patched {
        "list-cm-ns-a-trailing-slash.json"
    } else {
        "list-cm-ns-a.json"
    };
    let recorded: Value = serde_json::from_str(&raw::fixture(list)).unwrap();
    let mut cm = raw::strip_server_fields(recorded["items"][0].clone());
    assert_eq!(cm["metadata"]["name"], "cm-01");
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    let out = env.sim.update("", "configmaps", cm).expect("update cm-01");
    rv_of(&out)
}

/// `metadata.resourceVersion` of an object or list as a number.
pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {v}"))
}

/// The RV kcache's cache of a resource is at.
pub fn cache_rv(env: &Env, group: &str, resource: &str) -> u64 {
    env.kcache
        .app
        .registry()
        .all()
        .find(|c| c.info.group == group && c.info.resource == resource)
        .expect("cached resource")
        .rv()
}

/// RV of the newest object of a type in the sim (the apiserver's "cache RV" of that type).
pub fn type_rv(env: &Env, group: &str, resource: &str) -> u64 {
    env.sim
        .list(group, resource)
        .iter()
        .map(rv_of)
        .max()
        .unwrap_or(0)
}

/// Create a ConfigMap in the sim; returns its RV.
pub fn create_cm(env: &Env, ns: &str, name: &str, labels: Value) -> u64 {
    let o = env
        .sim
        .create(
            "",
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": ns, "labels": labels},
                   "data": {"k": "v"}}),
        )
        .expect("create configmap");
    rv_of(&o)
}

/// Create a Widget in the sim; returns its RV.
pub fn create_widget(env: &Env, ns: &str, name: &str, labels: Value) -> u64 {
    let o = env
        .sim
        .create(
            WIDGET_GROUP,
            "widgets",
            json!({"apiVersion": "fixtures.example.com/v1", "kind": "Widget",
                   "metadata": {"name": name, "namespace": ns, "labels": labels},
                   "spec": {"color": "grey", "size": 1}}),
        )
        .expect("create widget");
    rv_of(&o)
}

/// GET through kcache with kubectl's User-Agent and JSON Accept.
pub async fn send(env: &Env, path: &str) -> Resp {
    send_with(env, path, &[]).await
}

/// Over the test's transport (see `per_profile_and_transport!`).
pub async fn send_with(env: &Env, path: &str, headers: &[(&str, &str)]) -> Resp {
    let max = Duration::from_secs(15);
    raw::get_over(raw::transport(), env.kcache.addr, path, headers, max).await
}

/// Whether kcache answered itself: answers forwarded from the upstream carry its API Priority
/// and Fairness headers, kcache's own answers do not.
pub fn from_cache(r: &Resp) -> bool {
    r.header("x-kubernetes-pf-flowschema-uid").is_none()
}

pub fn assert_from_cache(r: &Resp, what: &str) {
    assert!(from_cache(r), "{what}: expected kcache to answer itself");
}

pub fn assert_forwarded(r: &Resp, what: &str) {
    assert!(!from_cache(r), "{what}: expected the upstream's answer");
}

/// The cached (group, resource) a request path names.
fn type_of_path(path: &str) -> (String, String) {
    let path = path.split('?').next().unwrap_or("");
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _, rest @ ..] => ("", rest),
        ["apis", group, _, rest @ ..] => (*group, rest),
        _ => panic!("not a resource path: {path}"),
    };
    let resource = match rest {
        ["namespaces", _, res, ..] => res,
        [res, ..] => res,
        [] => panic!("not a resource path: {path}"),
    };
    (group.to_string(), resource.to_string())
}

/// Whether a resource path names one object (a GET) rather than a collection.
fn names_object(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or("");
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.as_slice() {
        ["api", _, rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => return false,
    };
    match rest {
        // `namespaces/NS/RESOURCE[/NAME…]`; `namespaces/NAME` is a GET of a namespace.
        ["namespaces", _, _, more @ ..] => !more.is_empty(),
        [_, _, ..] => true,
        _ => false,
    }
}

/// Who answers a consistent read (resourceVersion unset): the cache when kcache can prove it
/// has every write the upstream acknowledged — the type's cache RV has reached the upstream's
/// revision, which with no write in flight is the sim's current RV — and the upstream
/// otherwise (kcache waits, then forwards). Either way the client gets the upstream's status
/// and bytes, which the callers compare with the recording. A GET may be forwarded even then:
/// it stops waiting for a probe slower than the GET itself (a v1.34 consistent list of a type
/// behind etcd's revision waits for a progress notification), so only a GET the cache
/// answered is checked, to have come from a cache that was current.
pub fn assert_consistent_source(env: &Env, r: &Resp, path: &str, what: &str) {
    let (group, resource) = type_of_path(path);
    let current = cache_rv(env, &group, &resource) >= env.sim.current_rv();
    if names_object(path) {
        if from_cache(r) {
            assert!(current, "{what}: answered by a cache behind the upstream");
        }
    } else if current {
        assert_from_cache(r, what);
    } else {
        assert_forwarded(r, what);
    }
}

/// [`assert_consistent_source`] for the request of fixture `name`.
pub fn assert_consistent_fixture(env: &Env, r: &Resp, name: &str) {
    let (_, path) = fixture_request(name);
    assert_consistent_source(env, r, &path, name);
}

/// The recorded response of a fixture: status line, headers and body.
pub struct Recorded {
    name: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body's length; for a recording kept only as an excerpt (a body of megabytes), the
    /// original's, which the excerpt states.
    pub body_len: usize,
    /// None when only an excerpt is kept.
    body: Option<String>,
}

impl Recorded {
    /// The recorded body. A fixture kept only as an excerpt has none to compare with: asking
    /// for it is a mistake in the test, not an empty body.
    pub fn body(&self) -> &str {
        self.body.as_deref().unwrap_or_else(|| {
            panic!(
                "fixture {}: only an excerpt of the body is recorded",
                self.name
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub fn recorded(name: &str) -> Recorded {
    let http = fixture(&format!("{name}.http"));
    let mut lines = http
        .lines()
        .skip_while(|l| !l.starts_with("### response"))
        .skip(1);
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers = lines
        .take_while(|l| !l.is_empty() && !l.starts_with("###") && !l.starts_with("curl:"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let dir = kcache_sim::recordings::dir_of(profile());
    let body = ["json", "txt"]
        .iter()
        .find_map(|ext| std::fs::read_to_string(dir.join(format!("{name}.{ext}"))).ok());
    let excerpt = || {
        let text = std::fs::read_to_string(dir.join(format!("{name}.excerpt.json"))).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v["_excerpt"]["original_bytes"].as_u64()
    };
    // Only an answer that has no body may lack a recorded one; for any other a missing file
    // would make every comparison with it a comparison with nothing.
    let (method, _) = fixture_request(name);
    let bodyless = method == "HEAD" || matches!(status, 100..=199 | 204 | 304);
    let (body_len, body) = match (body, excerpt()) {
        (Some(body), _) => (body.len(), Some(body)),
        (None, Some(original)) => (original as usize, None),
        (None, None) if bodyless => (0, Some(String::new())),
        (None, None) => panic!(
            "fixture {name} ({}): no recorded body ({name}.json, .txt or .excerpt.json)",
            dir.display()
        ),
    };
    Recorded {
        name: name.to_string(),
        status,
        headers,
        body_len,
        body,
    }
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Bodies under this size carry Content-Length, larger ones are chunked (E6).
const SMALL_BODY: usize = 2048;

/// E6 framing for a non-streaming answer.
pub fn assert_framing(r: &Resp, what: &str) {
    let chunked = r
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"));
    if r.body.len() < SMALL_BODY {
        assert_eq!(
            r.header("content-length").and_then(|v| v.parse().ok()),
            Some(r.body.len()),
            "{what}: a {}-byte body carries Content-Length (E6)",
            r.body.len()
        );
        assert!(!chunked, "{what}: small bodies are not chunked (E6)");
    } else {
        assert!(
            chunked,
            "{what}: a {}-byte body is chunked (E6)",
            r.body.len()
        );
        assert!(
            r.header("content-length").is_none(),
            "{what}: chunked answers carry no Content-Length"
        );
    }
}

/// The headers every answer has (E7), plus those the recording shows for this answer.
pub fn assert_headers(r: &Resp, rec: &Recorded, what: &str) {
    for h in [
        "content-type",
        "cache-control",
        "retry-after",
        "x-content-type-options",
    ] {
        assert_eq!(r.header(h), rec.header(h), "{what}: header {h}");
    }
    assert!(
        r.header("audit-id").is_some_and(is_uuid),
        "{what}: Audit-Id is a UUID: {:?}",
        r.header("audit-id")
    );
    assert!(r.header("date").is_some(), "{what}: Date");
    assert_framing(r, what);
    // Where the recorded body is clearly on one side of the threshold, the framing must agree
    // with the recording too.
    let rec_len = rec
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    if rec.body_len.abs_diff(SMALL_BODY) > 64 {
        assert_eq!(
            r.header("content-length").is_some(),
            rec_len.is_some(),
            "{what}: framing as recorded"
        );
    }
}

/// Normalised text for comparing bodies across servers (uid, RVs, timestamps, tokens).
pub fn norm(s: &str) -> String {
    raw::normalize(s, None)
}

/// Replay fixture `name`'s own request against kcache and compare with the recording.
pub async fn check(env: &Env, name: &str) -> Resp {
    let (_, path) = fixture_request(name);
    check_path(env, name, &path).await
}

/// Send `path` (a variant of the fixture's request) and compare with fixture `name`.
pub async fn check_path(env: &Env, name: &str, path: &str) -> Resp {
    let rec = recorded(name);
    let r = send(env, path).await;
    let what = format!("{name} ({path})");
    assert_eq!(r.status, rec.status, "{what}: status; body {}", r.text());
    assert_eq!(norm(&r.text()), norm(rec.body()), "{what}: body");
    assert_headers(&r, &rec, &what);
    r
}

/// Like [`check`] for a cluster-wide list whose recording holds other clients' objects too
/// (the v1.34 cluster's: DIFF-1.28.md section 3): only the items of the `fixtures-*`
/// namespaces are compared, with the list envelope, status and the headers but framing.
pub async fn check_fixtures_items(env: &Env, name: &str) -> Resp {
    let (_, path) = fixture_request(name);
    let rec = recorded(name);
    let r = send(env, &path).await;
    let what = format!("{name} ({path})");
    assert_eq!(r.status, rec.status, "{what}: status; body {}", r.text());
    let fixtures_items = |body: &str| {
        let mut v: Value = serde_json::from_str(body).unwrap();
        v["items"].as_array_mut().expect("items").retain(|i| {
            i["metadata"]["namespace"]
                .as_str()
                .is_some_and(|ns| ns.starts_with("fixtures-"))
        });
        norm(&serde_json::to_string(&v).unwrap())
    };
    assert_eq!(
        fixtures_items(&r.text()),
        fixtures_items(rec.body()),
        "{what}"
    );
    for h in ["content-type", "cache-control"] {
        assert_eq!(r.header(h), rec.header(h), "{what}: header {h}");
    }
    assert_framing(&r, &what);
    r
}

/// Like [`check`], and the body must be byte-identical to the recording (Status bodies that
/// carry no server-assigned values).
pub async fn check_verbatim(env: &Env, name: &str) -> Resp {
    let r = check(env, name).await;
    assert_eq!(r.text(), recorded(name).body(), "{name}: verbatim body");
    r
}

/// `path` with one more query parameter.
pub fn with_param(path: &str, param: &str) -> String {
    if path.contains('?') {
        format!("{path}&{param}")
    } else {
        format!("{path}?{param}")
    }
}

/// `path` with `resourceVersion=<old>` replaced by `resourceVersion=<new>`.
pub fn replace_rv(path: &str, old: u64, new: u64) -> String {
    let from = format!("resourceVersion={old}");
    assert!(path.contains(&from), "{path} has no {from}");
    path.replace(&from, &format!("resourceVersion={new}"))
}

/// Lines of a watch body, sorted (initial events come in no particular order, W6/W7).
pub fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// `(namespace, name)` of a list's items, in order.
pub fn item_keys(list: &Value) -> Vec<(String, String)> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                i["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The body with the list's own `metadata.resourceVersion` value replaced by `RV`.
pub fn without_list_rv(body: &str, list_rv: u64) -> String {
    let pat = format!("\"resourceVersion\":\"{list_rv}\"");
    // Built-in lists start with the list metadata; CR lists end with it.
    let custom = body.starts_with("{\"apiVersion\"");
    let at = if custom {
        body.rfind(&pat)
    } else {
        body.find(&pat)
    }
    .unwrap_or_else(|| panic!("list RV {list_rv} not in {}", &body[..body.len().min(200)]));
    let mut out = body.to_string();
    out.replace_range(at..at + pat.len(), "\"resourceVersion\":\"RV\"");
    out
}

/// GET with another User-Agent than kubectl's (the raw client always sends kubectl's): status
/// and de-chunked body.
pub async fn get_as(env: &Env, path: &str, ua: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = env.kcache.addr;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: {ua}\r\nAccept: application/json, */*\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("answer in time")
        .unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, mut rest) = text.split_once("\r\n\r\n").expect("head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (status, rest.to_string());
    }
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("chunk size");
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return (status, body);
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}
