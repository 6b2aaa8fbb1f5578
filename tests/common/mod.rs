//! Test harness: the simulated apiserver and kcache in front of it, both in-process on
//! loopback, plus a raw HTTP/1.1 client that shows bytes and headers as a client sees them.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kcache::config::{Config, ResourceConfig};
use kcache::server::{self, Running};
use kcache::upstream::Upstream;
use kcache_sim::rbac::Rbac;
use kcache_sim::seed::{self, SeedObject};
use kcache_sim::{Profile, ResourceType, Sim, SimConfig};
use tokio::net::{TcpListener, TcpStream};

pub mod mirror;

thread_local! {
    static PROFILE: std::cell::Cell<Profile> = const { std::cell::Cell::new(Profile::V1_28) };
}

/// Sets the upstream profile of the running test (`per_profile!` of `sim_common`, whose
/// generated tests call `crate::common::set_profile`): the sim [`EnvBuilder`] starts imitates
/// it and the rule tests compare with its recordings.
pub fn set_profile(p: Profile) {
    PROFILE.set(p);
}

/// The profile of the running test: the one `per_profile!` runs it as, else v1.28. Tokio's
/// test runtime runs the test and its tasks on the test's thread.
pub fn profile() -> Profile {
    PROFILE.get()
}

/// A recorded body of the real apiserver (see `kcache_sim::recordings`).
pub fn fixture(name: &str) -> Vec<u8> {
    kcache_sim::recordings::read(name)
}

/// Logs of kcache in tests, when `KCACHE_TEST_LOG` is set (e.g. `info`).
pub fn init_logs() {
    if let Ok(level) = std::env::var("KCACHE_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(level))
            .with_test_writer()
            .try_init();
    }
}

/// The sim and kcache in front of it.
pub struct Env {
    pub sim: Sim,
    pub kcache: Running,
}

/// What to start.
pub struct EnvBuilder {
    pub sim: SimConfig,
    pub config: Config,
    pub seed: Vec<SeedObject>,
    pub widgets: bool,
    /// Token auth and RBAC in the sim, and the token kcache uses as its own identity.
    pub rbac: Option<(Rbac, String)>,
}

impl Default for EnvBuilder {
    fn default() -> Self {
        EnvBuilder {
            sim: SimConfig {
                bookmark_interval: Duration::from_secs(1),
                ..SimConfig::for_profile(profile())
            },
            config: Config::default(),
            seed: Vec::new(),
            widgets: false,
            rbac: None,
        }
    }
}

/// `group/version/resource` → a resource config entry.
pub fn resource(group: &str, version: &str, resource: &str) -> ResourceConfig {
    ResourceConfig::new(group, version, resource)
}

/// Serve the widgets' CustomResourceDefinition of the recordings (its server-assigned fields
/// left to the sim), with these `additionalPrinterColumns` instead of the recorded ones if
/// given: kcache reads a custom resource's printer columns from it.
pub fn create_widget_crd(sim: &Sim, printer_columns: Option<serde_json::Value>) {
    sim.register(ResourceType::custom_resource_definitions());
    let mut crd: serde_json::Value = serde_json::from_slice(&fixture("get-crd.json")).unwrap();
    let meta = crd["metadata"].as_object_mut().unwrap();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        meta.remove(k);
    }
    if let Some(columns) = printer_columns {
        crd["spec"]["versions"][0]["additionalPrinterColumns"] = columns;
    }
    sim.create("apiextensions.k8s.io", "customresourcedefinitions", crd)
        .unwrap();
}

/// The widgets CRD of the recordings.
pub fn widget_type() -> ResourceType {
    ResourceType {
        group: "fixtures.example.com".into(),
        version: "v1".into(),
        resource: "widgets".into(),
        singular: "widget".into(),
        kind: "Widget".into(),
        namespaced: true,
        short_names: vec!["wg".into()],
        custom: true,
        selectable_fields: Vec::new(),
    }
}

impl EnvBuilder {
    /// The data set of the recordings, with configmaps, secrets, pods, services, namespaces
    /// and widgets cached.
    pub fn fixtures() -> EnvBuilder {
        let mut b = EnvBuilder {
            seed: seed::fixture_dataset(),
            widgets: true,
            ..EnvBuilder::default()
        };
        b.config.resources = vec![
            resource("", "v1", "configmaps"),
            resource("", "v1", "secrets"),
            resource("", "v1", "pods"),
            resource("", "v1", "services"),
            resource("", "v1", "namespaces"),
            resource("fixtures.example.com", "v1", "widgets"),
        ];
        b
    }

    /// Serve HTTPS with these settings.
    pub fn tls(mut self, settings: kcache::config::TlsSettings) -> Self {
        self.config.tls = settings;
        self
    }

    pub fn resources(mut self, list: Vec<ResourceConfig>) -> Self {
        self.config.resources = list;
        self
    }

    pub async fn start(self) -> Env {
        init_logs();
        let sim = Sim::start(self.sim).await.expect("sim starts");
        if self.widgets {
            sim.register(widget_type());
        }
        for o in self.seed {
            sim.create(o.group, o.resource, o.object)
                .expect("seed object");
        }
        let upstream = match self.rbac {
            Some((rbac, token)) => {
                sim.set_rbac(Some(rbac));
                Upstream::from_url_with_token(&sim.url(), &token).expect("upstream")
            }
            None => Upstream::from_url(&sim.url()).expect("upstream"),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let kcache = server::start(&self.config, upstream, listener, admin)
            .await
            .expect("kcache starts");
        assert!(
            kcache.wait_synced(Duration::from_secs(20)).await,
            "caches sync"
        );
        Env { sim, kcache }
    }
}

impl Env {
    pub fn url(&self) -> String {
        self.kcache.url()
    }

    /// A second kcache (tier 2) whose upstream is this one's kcache (tier 1), caching what
    /// `config` says, synced.
    pub async fn start_edge(&self, config: &Config) -> Running {
        let upstream = Upstream::from_url(&self.url()).expect("tier 1 as an upstream");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let edge = server::start(config, upstream, listener, admin)
            .await
            .expect("tier 2 starts");
        assert!(
            edge.wait_synced(Duration::from_secs(30)).await,
            "tier 2 syncs from tier 1"
        );
        edge
    }

    /// kcache's admin listener: its own health and metrics.
    pub fn admin_url(&self) -> String {
        self.kcache.admin_url()
    }

    /// Make the upstream's last write one of a (namespaced) type, in namespace `provable`, and
    /// wait for kcache to see it: kcache answers a consistent read (resourceVersion unset) from
    /// its cache only once the type's cache RV has reached the upstream's revision, and forwards
    /// it otherwise, so tests of what the cache serves read a type it can prove fresh.
    pub async fn last_write_of(&self, group: &str, resource: &str, api_version: &str, kind: &str) {
        let name = format!("provable-{}", self.sim.current_rv() + 1);
        self.sim
            .create(
                group,
                resource,
                serde_json::json!({"apiVersion": api_version, "kind": kind,
                    "metadata": {"name": name, "namespace": "provable"}}),
            )
            .expect("write");
        self.settle(group, resource).await;
    }

    /// A write of a Secret in `namespace` (kcache's consistent-read tests cache no Secrets):
    /// the upstream's revision moves while the cached types stay quiet.
    pub fn write_other_type(&self, namespace: &str, name: &str) {
        self.sim
            .create(
                "",
                "secrets",
                serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "namespace": namespace}}),
            )
            .expect("write of another type");
    }

    /// kcache's count of consistent reads of a core `resource` answered as `outcome`.
    pub fn consistent_outcome(&self, resource: &str, outcome: &'static str) -> u64 {
        self.kcache
            .metrics()
            .consistent_reads
            .get_or_create(&kcache::metrics::OutcomeLabels {
                resource: resource.into(),
                outcome,
            })
            .get()
    }

    /// Wait until what kcache learnt of a core `resource`'s consistent reads is `quiet` or not.
    pub async fn wait_quiet(&self, resource: &str, quiet: bool) {
        let cache = self
            .kcache
            .cache("", "v1", resource)
            .expect("cached resource");
        let what = format!("{resource} found quiet: {quiet}");
        wait_until(&what, || {
            let cache = cache.clone();
            async move { (cache.verdict() == kcache::cache::Verdict::Quiet) == quiet }
        })
        .await;
    }

    /// Wait until kcache's cache of a resource has reached the sim's current RV.
    pub async fn settle(&self, group: &str, resource: &str) {
        let want = self.sim.current_rv();
        let cache = self
            .kcache
            .app
            .registry()
            .all()
            .find(|c| c.info.group == group && c.info.resource == resource)
            .expect("cached resource")
            .clone();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        // The cache RV only moves with this type's events, so wait for its newest object.
        loop {
            let newest = self
                .sim
                .list(group, resource)
                .iter()
                .filter_map(|o| {
                    o["metadata"]["resourceVersion"]
                        .as_str()?
                        .parse::<u64>()
                        .ok()
                })
                .max()
                .unwrap_or(0);
            if cache.rv() >= newest.min(want) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "cache did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A kubeconfig at `path` pointing at `sim` without credentials: what the real binary
/// (`kcache serve`, run as a process) is given in front of an in-process sim.
pub fn write_kubeconfig(path: &std::path::Path, sim: &Sim) {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: sim, cluster: {{server: \"{}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: sim, user: u}}}}]\n\
             current-context: c\n",
            sim.url()
        ),
    )
    .unwrap();
}

/// How long [`wait_until`] waits before it gives up: generous, for a loaded 2-core machine.
pub const EVENTUALLY: Duration = Duration::from_secs(30);

/// Poll `cond` every few ms until it holds; panic naming `what` after [`EVENTUALLY`]. For
/// tests whose point is that something happens (or in which order), not how fast.
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up after {EVENTUALLY:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The value of the first sample line (`name{labels} value`) of an exposition whose name and
/// labels contain all of `parts`; None if there is none.
pub fn sample(text: &str, parts: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| parts.iter().all(|p| l.contains(p)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

impl Env {
    /// This kcache's own `/metrics` (Prometheus text format), from its admin listener.
    pub async fn metrics(&self) -> String {
        get(&self.admin_url(), "/metrics").await.text()
    }

    /// One sample of this kcache's `/metrics` (see [`sample`]).
    pub async fn metric(&self, parts: &[&str]) -> Option<f64> {
        sample(&self.metrics().await, parts)
    }

    /// Wait until one sample of this kcache's `/metrics` (see [`sample`]) is at least `want`
    /// (see [`wait_until`]) and return it: a counter may go past, which is the caller's to
    /// judge.
    pub async fn metric_reaching(&self, parts: &[&str], want: f64) -> f64 {
        let what = format!("{parts:?} to reach {want}");
        wait_until(&what, || async {
            self.metric(parts).await.is_some_and(|v| v >= want)
        })
        .await;
        self.metric(parts).await.unwrap_or_default()
    }
}

/// A response read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn send(base: &str, path: &str, headers: &[(&str, &str)]) -> hyper::Response<Incoming> {
    let addr = base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender
        .send_request(kubectl_get(&addr, path, headers))
        .await
        .expect("request")
}

/// [`send`] over an HTTP/2 connection of its own (h2c, prior knowledge). Dropping the
/// returned future before it is ready cancels the request (RST_STREAM) and closes the
/// connection, as a client that gives up does.
pub async fn send_h2(
    base: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> hyper::Response<Incoming> {
    let addr = base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .expect("h2c handshake");
    tokio::spawn(conn);
    let uri = format!("http://{addr}{path}");
    sender
        .send_request(kubectl_get(&addr, &uri, headers))
        .await
        .expect("request")
}

/// A GET as kubectl sends it: its User-Agent, and JSON unless `headers` say otherwise.
fn kubectl_get(addr: &str, uri: &str, headers: &[(&str, &str)]) -> Request<Empty<Bytes>> {
    let mut req = Request::get(uri).header("Host", addr).header(
        "User-Agent",
        "kubectl/v1.28.15 (linux/amd64) kubernetes/8418565",
    );
    let mut has_accept = false;
    for (k, v) in headers {
        has_accept |= k.eq_ignore_ascii_case("accept");
        req = req.header(*k, *v);
    }
    if !has_accept {
        req = req.header("Accept", "application/json, */*");
    }
    req.body(Empty::<Bytes>::new()).unwrap()
}

/// GET with kubectl's User-Agent and JSON Accept (unless given), read whole.
pub async fn get(base: &str, path: &str) -> Resp {
    get_with(base, path, &[]).await
}

pub async fn get_with(base: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let resp = send(base, path, headers).await;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Resp {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// A watch stream read line by line.
pub struct Watch {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
    buf: Vec<u8>,
    pub ended: bool,
    /// It ended as the server meant it to (the last chunk; HTTP/2: END_STREAM), not cut off.
    pub ended_cleanly: bool,
}

impl Watch {
    pub async fn open(base: &str, path: &str) -> Watch {
        Watch::open_with(base, path, &[]).await
    }

    pub async fn open_with(base: &str, path: &str, headers: &[(&str, &str)]) -> Watch {
        Watch::from_response(send(base, path, headers).await)
    }

    /// [`Watch::open_with`] over HTTP/2 (h2c), on a connection of its own.
    pub async fn open_h2_with(base: &str, path: &str, headers: &[(&str, &str)]) -> Watch {
        Watch::from_response(send_h2(base, path, headers).await)
    }

    /// A watch's response, from whichever client sent the request.
    pub fn from_response(resp: http::Response<Incoming>) -> Watch {
        let (parts, body) = resp.into_parts();
        Watch {
            status: parts.status,
            headers: parts.headers,
            body,
            buf: Vec::new(),
            ended: false,
            ended_cleanly: false,
        }
    }

    /// The next event line (without newline) within `timeout`; None on timeout or end.
    pub async fn next(&mut self, timeout: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(String::from_utf8_lossy(&line[..pos]).into_owned());
            }
            if self.ended {
                return None;
            }
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return None,
                Ok(None) => (self.ended, self.ended_cleanly) = (true, true),
                Ok(Some(Err(_))) => self.ended = true,
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
            }
        }
    }

    /// What has arrived and not been taken yet (for binary streams: protobuf watches).
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Take the first `n` buffered bytes.
    pub fn take_buffered(&mut self, n: usize) -> Vec<u8> {
        self.buf.drain(..n).collect()
    }

    /// Read one more chunk before `deadline`; false on timeout or at the end of the stream.
    pub async fn read_more(&mut self, deadline: tokio::time::Instant) -> bool {
        if self.ended {
            return false;
        }
        match tokio::time::timeout_at(deadline, self.body.frame()).await {
            Err(_) => false,
            Ok(None) => {
                (self.ended, self.ended_cleanly) = (true, true);
                false
            }
            Ok(Some(Err(_))) => {
                self.ended = true;
                false
            }
            Ok(Some(Ok(f))) => {
                if let Ok(d) = f.into_data() {
                    self.buf.extend_from_slice(&d);
                }
                true
            }
        }
    }

    /// The next event as JSON.
    pub async fn next_json(&mut self, timeout: Duration) -> Option<serde_json::Value> {
        let line = self.next(timeout).await?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad event {line}: {e}")))
    }

    /// The object names of the next `n` events, and how many writes (HTTP frames) brought
    /// them; panics unless they all arrive within `timeout`.
    pub async fn names_and_writes(&mut self, n: usize, timeout: Duration) -> (Vec<String>, usize) {
        let read = async {
            let (mut names, mut writes) = (Vec::new(), 0);
            while names.len() < n {
                let frame = self.body.frame().await.expect("the watch is open").unwrap();
                if let Ok(data) = frame.into_data() {
                    writes += 1;
                    self.buf.extend_from_slice(&data);
                }
                while let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=end).collect();
                    let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
                    let name = v["object"]["metadata"]["name"].as_str().unwrap_or_default();
                    names.push(name.to_string());
                }
            }
            (names, writes)
        };
        tokio::time::timeout(timeout, read)
            .await
            .unwrap_or_else(|_| panic!("fewer than {n} events within {timeout:?}"))
    }

    /// Every event until `timeout` passes with nothing new (or the stream ends).
    pub async fn drain(&mut self, quiet: Duration) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        while let Some(ev) = self.next_json(quiet).await {
            out.push(ev);
        }
        out
    }
}

/// Remove what differs between two servers holding the same objects: server-assigned
/// metadata (uid, resourceVersion, creationTimestamp, managedFields, generation) and list RVs.
pub fn normalize(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(meta)) = m.get_mut("metadata") {
                for k in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "managedFields",
                    "generation",
                    "continue",
                ] {
                    if meta.contains_key(k) {
                        meta.insert(k.into(), Value::String("*".into()));
                    }
                }
            }
            for (_, child) in m.iter_mut() {
                normalize(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// Any request with a body, read whole.
pub async fn request(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let addr = base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("Host", addr.as_str())
        .header("Accept", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(
            req.body(http_body_util::Full::new(Bytes::copy_from_slice(body)))
                .unwrap(),
        )
        .await
        .expect("request");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Resp {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}
