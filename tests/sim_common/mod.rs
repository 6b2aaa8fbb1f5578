//! Test support: a tiny raw HTTP/1.1 client (keeps chunk boundaries and timing), fixture
//! loading and seeding, and byte normalisation for server-assigned fields.
#![allow(dead_code)]

use kcache_sim::{Profile, ResourceType, Sim, SimConfig};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const UA: &str = "kubectl/v1.28.15 (linux/amd64) kubernetes/8418565";

/// One `#[tokio::test]` per upstream profile for each named `async fn NAME(p: Profile)`: a
/// module `NAME` with the tests `v1_28` and `v1_34`, each comparing the sim of that profile
/// with that profile's recordings. The profile is also the test thread's [`profile`] (tokio's
/// test runtime runs the test and its tasks on that thread).
#[macro_export]
macro_rules! per_profile {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn v1_28() {
                $crate::common::set_profile(kcache_sim::Profile::V1_28);
                super::$name(kcache_sim::Profile::V1_28).await
            }
            #[tokio::test]
            async fn v1_34() {
                $crate::common::set_profile(kcache_sim::Profile::V1_34);
                super::$name(kcache_sim::Profile::V1_34).await
            }
        }
    )*};
}

/// [`per_profile!`], and each test once more with the watches it opens sent over HTTP/2 with
/// prior knowledge (modules' tests `v1_28_h2c`, `v1_34_h2c`; see [`transport`]). For a test
/// binary that includes this module as `raw`.
#[macro_export]
macro_rules! per_profile_and_transport {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            async fn run(p: kcache_sim::Profile, t: $crate::raw::Transport) {
                $crate::common::set_profile(p);
                $crate::raw::set_transport(t);
                super::$name(p).await
            }
            #[tokio::test]
            async fn v1_28() {
                run(kcache_sim::Profile::V1_28, $crate::raw::Transport::Http1).await
            }
            #[tokio::test]
            async fn v1_34() {
                run(kcache_sim::Profile::V1_34, $crate::raw::Transport::Http1).await
            }
            #[tokio::test]
            async fn v1_28_h2c() {
                run(kcache_sim::Profile::V1_28, $crate::raw::Transport::H2c).await
            }
            #[tokio::test]
            async fn v1_34_h2c() {
                run(kcache_sim::Profile::V1_34, $crate::raw::Transport::H2c).await
            }
        }
    )*};
}

/// How a test sends the requests that choose their transport (see
/// [`per_profile_and_transport!`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http1,
    H2c,
}

thread_local! {
    static TRANSPORT: std::cell::Cell<Transport> = const { std::cell::Cell::new(Transport::Http1) };
}

/// Sets the transport of the running test.
pub fn set_transport(t: Transport) {
    TRANSPORT.set(t);
}

/// The transport of the running test: HTTP/1.1 unless `per_profile_and_transport!` runs it
/// over HTTP/2.
pub fn transport() -> Transport {
    TRANSPORT.get()
}

thread_local! {
    static PROFILE: std::cell::Cell<Profile> = const { std::cell::Cell::new(Profile::V1_28) };
}

/// Sets the profile of the running test (see `per_profile!`).
pub fn set_profile(p: Profile) {
    PROFILE.set(p);
}

/// The profile of the running test: the one `per_profile!` runs it as, else v1.28.
pub fn profile() -> Profile {
    PROFILE.get()
}

/// A recorded file of the real v1.28 apiserver as text (see `kcache_sim::recordings`).
pub fn fixture(name: &str) -> String {
    kcache_sim::recordings::read_string(name)
}

/// A recorded file of the profile's apiserver as text.
pub fn fixture_in(p: Profile, name: &str) -> String {
    kcache_sim::recordings::read_string_in(p, name)
}

/// The request line of a fixture's `.http` sidecar: (method, path-and-query).
pub fn fixture_request(name: &str) -> (String, String) {
    fixture_request_in(Profile::V1_28, name)
}

/// The recorded status code of a fixture (the `HTTP/1.1 NNN` line of its sidecar).
pub fn fixture_status_in(p: Profile, name: &str) -> u16 {
    fixture_in(p, &format!("{name}.http"))
        .lines()
        .find(|l| l.starts_with("HTTP/1.1 ") || l.starts_with("HTTP/2 "))
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {} {name}.http", p.name()))
}

/// The request line of a profile's fixture `.http` sidecar: (method, path-and-query).
pub fn fixture_request_in(p: Profile, name: &str) -> (String, String) {
    let http = fixture_in(p, &format!("{name}.http"));
    let line = http
        .lines()
        .skip_while(|l| !l.starts_with("### request"))
        .nth(1)
        .unwrap_or_else(|| panic!("no request line in {name}.http"));
    let mut parts = line.split(' ');
    (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    )
}

#[derive(Debug, Default)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// De-chunked body.
    pub body: Vec<u8>,
    /// Chunks as framed by the server, with arrival time since the request was sent.
    pub chunks: Vec<(Duration, Vec<u8>)>,
    /// Time until the status line arrived.
    pub head_after: Duration,
    /// Time until the response ended (EOF, last chunk or deadline).
    pub total: Duration,
    /// The chunked body ended with the zero-length chunk (HTTP/2: with END_STREAM).
    pub clean_end: bool,
    /// Received over HTTP/2 ([`request_h2`]).
    pub http2: bool,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    pub fn lines(&self) -> Vec<Value> {
        self.text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Sends one request (Connection: close) and reads the response until it ends or `max` passes.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: &[u8],
    max: Duration,
) -> Resp {
    // Boxed so that tests awaiting many requests keep small futures (debug builds).
    Box::pin(request_inner(addr, method, path, extra, body, max)).await
}

async fn request_inner(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: &[u8],
    max: Duration,
) -> Resp {
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: {UA}\r\nConnection: close\r\n"
    );
    if !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("accept")) {
        head.push_str("Accept: application/json, */*\r\n");
    }
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut resp = Resp::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut chunked = false;
    let mut content_length: Option<usize> = None;
    let mut head_done = false;
    let mut pos = 0;
    let deadline = start + max;
    loop {
        // Parse what we have.
        if !head_done {
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                let mut lines = head.split("\r\n");
                let status_line = lines.next().unwrap_or("");
                resp.status = status_line
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                for l in lines {
                    if let Some((k, v)) = l.split_once(':') {
                        resp.headers
                            .push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                chunked = resp
                    .header("transfer-encoding")
                    .is_some_and(|v| v.contains("chunked"));
                content_length = resp.header("content-length").and_then(|v| v.parse().ok());
                resp.head_after = start.elapsed();
                head_done = true;
                pos = end + 4;
            }
        }
        if head_done && chunked {
            while let Some(le) = find(&buf[pos..], b"\r\n") {
                let size_str = String::from_utf8_lossy(&buf[pos..pos + le]).into_owned();
                let size = usize::from_str_radix(size_str.trim(), 16).unwrap_or(0);
                if buf.len() < pos + le + 2 + size + 2 {
                    break;
                }
                let data = buf[pos + le + 2..pos + le + 2 + size].to_vec();
                pos += le + 2 + size + 2;
                if size == 0 {
                    resp.clean_end = true;
                    resp.total = start.elapsed();
                    return resp;
                }
                resp.body.extend_from_slice(&data);
                resp.chunks.push((start.elapsed(), data));
            }
        }
        if head_done && !chunked {
            if let Some(cl) = content_length {
                if buf.len() >= pos + cl {
                    resp.body = buf[pos..pos + cl].to_vec();
                    resp.total = start.elapsed();
                    resp.clean_end = true;
                    return resp;
                }
            }
        }
        let mut tmp = [0u8; 65536];
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        match tokio::time::timeout(deadline - now, stream.read(&mut tmp)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    if head_done && !chunked && content_length.is_none() {
        resp.body = buf[pos.min(buf.len())..].to_vec();
    }
    resp.total = start.elapsed();
    resp
}

/// A GET over `transport` (see [`transport`]): [`request`] or [`request_h2`].
pub async fn get_over(
    transport: Transport,
    addr: SocketAddr,
    path: &str,
    extra: &[(&str, &str)],
    max: Duration,
) -> Resp {
    match transport {
        Transport::Http1 => request(addr, "GET", path, extra, b"", max).await,
        Transport::H2c => request_h2(addr, path, extra, max).await,
    }
}

/// [`request`]'s GET over HTTP/2 with prior knowledge (h2c), as client-go sends its watches:
/// each DATA frame is a chunk, `clean_end` is the stream's END_STREAM, and the header names are
/// as HTTP/2 carries them (lower case; no `transfer-encoding` there).
pub async fn request_h2(
    addr: SocketAddr,
    path: &str,
    extra: &[(&str, &str)],
    max: Duration,
) -> Resp {
    use http_body_util::BodyExt;

    let start = Instant::now();
    let deadline = start + max;
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2c handshake");
    tokio::spawn(conn);
    let mut req = http::Request::get(format!("http://{addr}{path}")).header("user-agent", UA);
    if !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("accept")) {
        req = req.header("accept", "application/json, */*");
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let mut resp = Resp {
        http2: true,
        ..Resp::default()
    };
    let Ok(Ok(head)) = tokio::time::timeout_at(deadline.into(), sender.send_request(req)).await
    else {
        resp.total = start.elapsed();
        return resp;
    };
    resp.status = head.status().as_u16();
    resp.head_after = start.elapsed();
    resp.headers = head
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut body = head.into_body();
    loop {
        match tokio::time::timeout_at(deadline.into(), body.frame()).await {
            Ok(Some(Ok(frame))) => {
                // An empty DATA frame only carries END_STREAM (what the last, empty chunk is
                // in HTTP/1.1).
                if let Some(data) = frame.into_data().ok().filter(|d| !d.is_empty()) {
                    resp.body.extend_from_slice(&data);
                    resp.chunks.push((start.elapsed(), data.to_vec()));
                }
            }
            Ok(None) => {
                resp.clean_end = true;
                break;
            }
            Ok(Some(Err(_))) | Err(_) => break,
        }
    }
    resp.total = start.elapsed();
    resp
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub async fn get(sim: &Sim, path: &str) -> Resp {
    request(sim.addr(), "GET", path, &[], b"", Duration::from_secs(10)).await
}

pub fn widgets() -> ResourceType {
    ResourceType::custom(
        "fixtures.example.com",
        "v1",
        "widgets",
        "widget",
        "Widget",
        true,
        &["wg"],
    )
}

pub fn fast_cfg() -> SimConfig {
    SimConfig {
        bookmark_interval: Duration::from_millis(800),
        too_large_rv_wait: Duration::from_millis(300),
        ..SimConfig::default()
    }
}

/// `fast_cfg` imitating `p`.
pub fn profile_cfg(p: Profile) -> SimConfig {
    SimConfig {
        profile: p,
        ..fast_cfg()
    }
}

/// Removes the fields the server assigns so an object can be created again.
pub fn strip_server_fields(mut obj: Value) -> Value {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
            m.remove(k);
        }
    }
    obj
}

/// Creates every item of a fixture list body.
pub fn seed(sim: &Sim, group: &str, resource: &str, list_fixture: &str) {
    let list: Value = serde_json::from_str(&fixture(list_fixture)).unwrap();
    for item in list["items"].as_array().unwrap() {
        sim.create(group, resource, strip_server_fields(item.clone()))
            .unwrap();
    }
}

/// A sim with the fixture data set (fixtures-a and fixtures-b ConfigMaps, pods, widgets).
pub async fn seeded(cfg: SimConfig) -> Sim {
    let sim = Sim::start(cfg).await.unwrap();
    sim.register(widgets());
    seed(&sim, "", "configmaps", "list-cm-ns-a.json");
    seed(&sim, "", "configmaps", "list-cm-ns-b.json");
    seed(&sim, "", "pods", "list-pods-ns-a.json");
    seed(
        &sim,
        "fixtures.example.com",
        "widgets",
        "list-widgets-all.json",
    );
    sim
}

/// Replaces the string values of server-assigned keys so bodies compare across servers.
/// `rv_base`: resourceVersions become offsets from it (else `RV`).
pub fn normalize(s: &str, rv_base: Option<u64>) -> String {
    let mut out = s.to_string();
    // `time`: managedFields entries (the sim keeps the v1.28 recording's, the v1.34 one has
    // its own).
    // `clusterIP(s)`: a Service's allocated addresses.
    for key in [
        "uid",
        "creationTimestamp",
        "time",
        "continue",
        "resourceVersion",
        "clusterIP",
        "clusterIPs\":[",
    ] {
        let pat = if key.ends_with('[') {
            format!("\"{key}\"")
        } else {
            format!("\"{key}\":\"")
        };
        let mut result = String::new();
        let mut rest = out.as_str();
        while let Some(i) = rest.find(&pat) {
            result.push_str(&rest[..i + pat.len()]);
            let after = &rest[i + pat.len()..];
            let end = after.find('"').unwrap_or(after.len());
            let val = &after[..end];
            let repl = match (key, rv_base) {
                ("resourceVersion", Some(base)) => match val.parse::<u64>() {
                    Ok(n) if n >= base => format!("+{}", n - base),
                    _ => val.to_string(),
                },
                ("continue", _) if val.is_empty() => String::new(),
                _ => key.trim_end_matches("\":[").to_uppercase(),
            };
            result.push_str(&repl);
            rest = &after[end..];
        }
        result.push_str(rest);
        out = result;
    }
    // The resourceVersion the recorder wrote into cm-01 when patching it.
    const PATCHED: &str = "changed-after-rv-";
    let mut result = String::new();
    let mut rest = out.as_str();
    while let Some(i) = rest.find(PATCHED) {
        result.push_str(&rest[..i + PATCHED.len()]);
        let after = &rest[i + PATCHED.len()..];
        let end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        result.push('N');
        rest = &after[end..];
    }
    result.push_str(rest);
    out = result;
    // The random suffix of the projected service-account volume's name.
    const API_ACCESS: &str = "kube-api-access-";
    let mut result = String::new();
    let mut rest = out.as_str();
    while let Some(i) = rest.find(API_ACCESS) {
        result.push_str(&rest[..i + API_ACCESS.len()]);
        let after = &rest[i + API_ACCESS.len()..];
        let end = after
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(after.len());
        result.push_str("XXXXX");
        rest = &after[end..];
    }
    result.push_str(rest);
    out = result;
    // "current: N" in 504 messages and "(N)" in too-old messages.
    let mut result = String::new();
    let mut rest = out.as_str();
    while let Some(i) = rest.find("current: ") {
        result.push_str(&rest[..i + 9]);
        let after = &rest[i + 9..];
        let end = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        result.push('N');
        rest = &after[end..];
    }
    result.push_str(rest);
    result
}

pub fn decode_token(token: &str) -> Value {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

/// Replaces every resourceVersion by its rank among those of the text (`#0`, `#1`, ...): the
/// v1.34 recordings' RVs are sparse (other clients wrote in between), the sim's dense.
pub fn rank_rvs(s: &str) -> String {
    const PAT: &str = "\"resourceVersion\":\"";
    let value = |after: &str| after[..after.find('"').unwrap_or(after.len())].to_string();
    let mut rvs: Vec<u64> = s
        .match_indices(PAT)
        .filter_map(|(i, _)| value(&s[i + PAT.len()..]).parse().ok())
        .collect();
    rvs.sort_unstable();
    rvs.dedup();
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(PAT) {
        out.push_str(&rest[..i + PAT.len()]);
        let after = &rest[i + PAT.len()..];
        let v = value(after);
        match v
            .parse::<u64>()
            .ok()
            .and_then(|n| rvs.binary_search(&n).ok())
        {
            Some(rank) => out.push_str(&format!("#{rank}")),
            None => out.push_str(&v),
        }
        rest = &after[v.len()..];
    }
    out.push_str(rest);
    out
}
