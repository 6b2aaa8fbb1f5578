//! `kcache bench --kubeconfig PATH`: the read and watch scenarios against a real cluster,
//! direct to its apiserver and through a kcache the bench starts in front of it, side by side
//! in the same tables as the simulated runs.
//!
//! - Reads: LIST all ConfigMaps and all Pods (RV=0 and RV unset), LIST of one namespace, GET of
//!   one object (RV=0 and RV unset). The objects and the namespace are picked from the first
//!   LIST; nothing is written.
//! - Watch: N watchers of ConfigMaps on each target at once, over HTTP/2 (as client-go
//!   connects). Read-only, they see whatever the cluster changes; the kcache row says how long
//!   after the direct watchers its watchers saw the same event.
//! - Interactive: a person's paced reads, one round every 2 s for a few minutes, each read
//!   direct and through kcache back to back (see [`super::interactive`]): consistent LISTs by
//!   pages of 500 of a small namespace's ConfigMaps (the one given, else the bench's own with
//!   `writes`, else `kube-system`), of all Pods and of all ConfigMaps, and a consistent GET of
//!   one ConfigMap there (`kube-root-ca.crt`, which every namespace has, when present). The
//!   cluster's own writes of other types (leases, events) move its revision meanwhile; with
//!   `writes` the bench adds one, a Secret of its namespace updated once a second.
//! - With `writes`: a namespace of the bench's own (a new, unique name; creation fails rather
//!   than reuse an existing one) with a few ConfigMaps, updated at a fixed rate to drive the
//!   watch rows (delivery delay from each write's acknowledgement) and a consistent LIST under
//!   writes with the staleness check. The namespace is deleted at the end, also after an error
//!   or Ctrl-C. Nothing is written anywhere else.
//!
//! The direct target is the kubeconfig's server with its CA and credentials (bearer token,
//! token file, exec plugin or client certificate, read through kube-client as `kcache serve`
//! reads them). kcache runs as a child (`kcache serve --kubeconfig PATH`, caching ConfigMaps and
//! Pods) in two forms, each read row measuring both: over plain HTTP on loopback with
//! `auth.mode: none` (kcache's own cost, no TLS, no authentication), and over HTTPS with
//! `auth.mode: delegated` (the deployed form: the bench's requests carry the kubeconfig's
//! bearer token, which kcache checks with the cluster by TokenReview and SubjectAccessReview),
//! so that the kcache rows a platform engineer compares with the direct ones pay what the
//! apiserver's pay. A kubeconfig whose credentials are not a bearer token (a client
//! certificate) gets the plain rows only, with a note. The watch rows use the plain kcache.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_client::client::ConfigExt;
use kube_client::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;
use serde_json::{json, Value};

use super::interactive::{push_checks, push_rows, Read, Rounds, OTHER_WRITES_PER_S};
use super::kcache::{ChildConfig, KcacheChild, UpstreamCost};
use super::load::{self, LoadResult, LoadSpec, Target, Tls};
use super::procstat::{CpuMeter, OthersMeter};
use super::report::{fmt_num, Report, Row};
use super::watchers::{self, Delivery, Proto, WriteLog};
use super::{list_rv_on, load_row, mb, ms, progress, set_upstream, set_upstream_direct, staleness};

/// The resources the bench reads and kcache caches.
const RESOURCES: [(&str, &str, &str); 2] = [("", "v1", "configmaps"), ("", "v1", "pods")];
const DIRECT: &str = "apiserver (direct)";
const KCACHE: &str = "kcache";
const KCACHE_SECURE: &str = "kcache HTTPS, auth delegated";
/// The label on everything the bench creates, so that an operator can find leftovers.
const CREATED_BY: &str = "app.kubernetes.io/created-by";
/// The Secret the interactive rounds write with `writes`: another type than the ones read.
const OTHER_SECRET: &str = "kcache-bench-other";

/// Options of a cluster run.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub kubeconfig: PathBuf,
    pub context: Option<String>,
    /// The namespace of the one-namespace LIST and the GETs (default: the namespace with the
    /// most objects of each resource).
    pub namespace: Option<String>,
    /// Create a namespace of its own and write ConfigMaps there.
    pub writes: bool,
    /// The kcache executable to start as `kcache serve`.
    pub exe: PathBuf,
    pub scale: ClusterScale,
}

/// Sizes and durations of a cluster run.
#[derive(Debug, Clone)]
pub struct ClusterScale {
    /// How long each read row loads its target.
    pub phase: Duration,
    /// Load-generator connections per read row.
    pub clients: usize,
    /// Watchers per target.
    pub watchers: usize,
    /// How long the watchers watch (and, with writes, the writer writes).
    pub watch: Duration,
    /// Writes per second with `writes`.
    pub write_rate: f64,
    /// ConfigMaps the bench creates in its namespace with `writes`.
    pub write_objects: usize,
    /// ConfigMaps in the bench's namespace for the second consistent-under-writes case (more
    /// are created before it): a namespace whose LIST costs the upstream more than the probe
    /// (the first case's costs about what the probe does).
    pub write_objects_large: usize,
    /// How long the interactive rounds go on, one every `interactive_every`.
    pub interactive: Duration,
    pub interactive_every: Duration,
    /// `limit` of every page of the interactive LISTs.
    pub page: usize,
}

impl ClusterScale {
    pub fn standard() -> ClusterScale {
        ClusterScale {
            phase: Duration::from_secs(5),
            clients: 8,
            watchers: 100,
            watch: Duration::from_secs(20),
            write_rate: 10.0,
            write_objects: 20,
            write_objects_large: 500,
            interactive: Duration::from_secs(300),
            interactive_every: Duration::from_secs(2),
            page: 500,
        }
    }

    pub fn quick() -> ClusterScale {
        ClusterScale {
            phase: Duration::from_secs(1),
            clients: 4,
            watchers: 20,
            watch: Duration::from_secs(4),
            write_rate: 10.0,
            write_objects: 10,
            write_objects_large: 100,
            interactive: Duration::from_secs(10),
            ..ClusterScale::standard()
        }
    }
}

/// What a run produced: the tables, and the namespace it wrote in (deleted by then).
pub struct ClusterRun {
    pub report: Report,
    pub namespace: Option<String>,
}

/// The cluster of a kubeconfig, as the bench reaches it.
pub struct Cluster {
    /// The server URL, for the report.
    pub url: String,
    /// The apiserver itself: address, TLS, credentials.
    pub target: Target,
    /// The server URL's path (a cluster behind a proxy may live under one), before every path.
    pub base_path: String,
    /// What the credentials are, for the report (never their value).
    pub auth: &'static str,
    /// kube-client with the same settings: the bench's writes.
    client: kube_client::Client,
}

/// Read a kubeconfig as `kcache serve --kubeconfig` does, and turn its server, CA and
/// credentials into a load-generator target.
pub async fn connect(kubeconfig: &Path, context: Option<&str>) -> Result<Cluster, String> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = kube_client::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
    let uri = config.cluster_url.clone();
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => return Err(format!("server {uri}: unsupported scheme {other:?}")),
    };
    let host = uri
        .host()
        .ok_or_else(|| format!("server {uri}: no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    // One address for the whole run: the load generator connects by address.
    let addr: SocketAddr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| format!("resolving {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolving {host}: no address"))?;
    let tls = if https {
        let rustls_config = config
            .rustls_client_config()
            .map_err(|e| format!("TLS settings of the kubeconfig: {e}"))?;
        let name = config.tls_server_name.clone().unwrap_or(host.clone());
        let server_name = rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|e| format!("TLS server name {name:?}: {e}"))?;
        Some(Tls::new(rustls_config, server_name))
    } else {
        None
    };
    let auth = describe_auth(&config);
    let authorization = authorization(&config).await?;
    let authority = uri
        .authority()
        .map_or_else(|| addr.to_string(), |a| a.as_str().to_string());
    let client = kube_client::Client::try_from(config.clone())
        .map_err(|e| format!("client for {uri}: {e}"))?;
    Ok(Cluster {
        url: uri.to_string(),
        target: Target {
            addr,
            authority,
            tls,
            authorization,
            accept: None,
            per_watch: None,
        },
        base_path: uri.path().trim_end_matches('/').to_string(),
        auth,
        client,
    })
}

fn describe_auth(config: &kube_client::Config) -> &'static str {
    let a = &config.auth_info;
    if a.exec.is_some() {
        "exec plugin token"
    } else if a.token.is_some() || a.token_file.is_some() {
        "bearer token"
    } else if a.client_certificate.is_some() || a.client_certificate_data.is_some() {
        "client certificate"
    } else if a.username.is_some() {
        "basic auth"
    } else if a.auth_provider.is_some() {
        "auth provider token"
    } else {
        "none"
    }
}

/// The `Authorization` header kube-client would send with this config (a token, a token file,
/// an exec plugin's token, basic auth; none for a client certificate), taken once: kube-client's
/// own auth layer is run over a request that goes nowhere but here.
async fn authorization(config: &kube_client::Config) -> Result<Option<http::HeaderValue>, String> {
    use tower::{Layer, ServiceExt};
    let layer = config
        .auth_layer()
        .map_err(|e| format!("credentials of the kubeconfig: {e}"))?;
    let Some(layer) = layer else {
        return Ok(None);
    };
    let capture = tower::service_fn(|req: http::Request<kube_client::client::Body>| async move {
        // tower-http's layer wants an HTTP response; the header rides in its body.
        let header = req.headers().get(http::header::AUTHORIZATION).cloned();
        Ok::<_, tower::BoxError>(http::Response::new(header))
    });
    layer
        .layer(capture)
        .oneshot(http::Request::new(kube_client::client::Body::empty()))
        .await
        .map(http::Response::into_body)
        .map_err(|e| format!("credentials of the kubeconfig: {e}"))
}

impl Cluster {
    /// A path on the apiserver (under the server URL's path, if any).
    pub(super) fn path(&self, p: &str) -> String {
        format!("{}{p}", self.base_path)
    }

    /// A write (or a read of the bench's own objects) through kube-client: the JSON answer.
    pub(super) async fn call(
        &self,
        method: http::Method,
        path: &str,
        content_type: &str,
        body: Option<Value>,
    ) -> Result<Value, CallError> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let req = http::Request::builder()
            .method(method.clone())
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, "application/json")
            .body(bytes)
            .map_err(|e| CallError::Other(format!("{method} {path}: {e}")))?;
        self.client
            .request::<Value>(req)
            .await
            .map_err(|e| match e {
                kube_client::Error::Api(s) => CallError::Status {
                    code: s.code,
                    message: format!("{method} {path}: {} ({})", s.message, s.code),
                },
                other => CallError::Other(format!("{method} {path}: {other}")),
            })
    }
}

/// Why one of the bench's own API calls failed.
#[derive(Debug)]
pub(super) enum CallError {
    Status { code: u16, message: String },
    Other(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Status { message, .. } | CallError::Other(message) => f.write_str(message),
        }
    }
}

impl From<CallError> for String {
    fn from(e: CallError) -> String {
        e.to_string()
    }
}

/// Run the cluster bench and return its report (not printed).
pub async fn run(opts: &ClusterOptions) -> Result<ClusterRun, String> {
    let cluster = connect(&opts.kubeconfig, opts.context.as_deref()).await?;
    progress(format!(
        "cluster {} ({}, credentials: {})",
        cluster.url,
        if cluster.target.tls.is_some() {
            "HTTPS"
        } else {
            "plain HTTP"
        },
        cluster.auth
    ));
    let mut report = Report {
        machine: super::machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        ..Report::default()
    };
    report.notes.extend(notes(&cluster, opts));
    if cfg!(debug_assertions) {
        report.notes.push(
            "built without optimisations (debug): numbers are not representative; use `cargo run --release --features bench -- bench`"
                .into(),
        );
    }
    if !opts.writes {
        let mut bench = ClusterBench {
            cluster: &cluster,
            opts,
            report,
            namespace: None,
            seq: AtomicU64::new(1),
        };
        bench.run_interruptible().await?;
        return Ok(ClusterRun {
            report: bench.report,
            namespace: None,
        });
    }
    let ns = own_namespace_name();
    progress(format!("creating namespace {ns}"));
    create_namespace(&cluster, &ns).await?;
    let mut bench = ClusterBench {
        cluster: &cluster,
        opts,
        report,
        namespace: Some(ns.clone()),
        seq: AtomicU64::new(1),
    };
    let result = bench.run_interruptible().await;
    // Whatever happened above (an error, Ctrl-C), the namespace goes.
    progress(format!("deleting namespace {ns}"));
    let objects = opts.scale.write_objects.max(opts.scale.write_objects_large);
    let cleanup = delete_namespace(&cluster, &ns, objects).await;
    let mut report = bench.report;
    match &cleanup {
        Ok(note) => report.notes.push(note.clone()),
        Err(e) => report
            .notes
            .push(format!("deleting namespace {ns} failed: {e}")),
    }
    result?;
    cleanup?;
    Ok(ClusterRun {
        report,
        namespace: Some(ns),
    })
}

/// Run, print the tables, write the JSON: `kcache bench --kubeconfig`.
pub async fn run_and_print(opts: &ClusterOptions, json: Option<&Path>) -> Result<(), String> {
    super::publish(&run(opts).await?.report, json)
}

fn notes(cluster: &Cluster, opts: &ClusterOptions) -> Vec<String> {
    let transport = if cluster.target.tls.is_some() {
        "HTTPS"
    } else {
        "plain HTTP"
    };
    let mut notes = vec![
        format!(
            "cluster: {} ({transport}, credentials: {}); `{DIRECT}` rows load it with the kubeconfig's credentials, \
             so they include its TLS, authentication and authorization",
            cluster.url, cluster.auth
        ),
        "`kcache` rows: a kcache started by the bench (`kcache serve --kubeconfig`, caching ConfigMaps and Pods) \
         on 127.0.0.1, reached over plain HTTP with `auth.mode: none` (allowed on loopback only): no TLS and no \
         authentication of the bench's requests; kcache's own requests to the cluster use the kubeconfig's credentials"
            .into(),
    ];
    if bearer(cluster).is_some() {
        notes.push(format!(
            "`{KCACHE_SECURE}` rows: a second such kcache as it is deployed, over HTTPS (a certificate made for the run) \
             with `auth.mode: delegated`: the bench's requests carry the kubeconfig's bearer token, which kcache checks \
             with the cluster (TokenReview, SubjectAccessReview; each verdict remembered briefly)"
        ));
    }
    notes.extend([
        format!(
            "{} clients per read row for {:.1} s each; {} watchers per target over HTTP/2 for {:.0} s",
            opts.scale.clients,
            opts.scale.phase.as_secs_f64(),
            opts.scale.watchers,
            opts.scale.watch.as_secs_f64()
        ),
        "upstream columns: requests and KB the cluster served per read (direct: the read itself; kcache: \
         from its kcache_upstream_requests_total and kcache_upstream_received_bytes_total)"
            .into(),
        if opts.writes {
            format!(
                "--writes: a namespace of the bench's own with {} ConfigMaps ({} for the second case under writes), \
                 updated {} times/s, deleted at the end",
                opts.scale.write_objects,
                opts.scale.write_objects_large,
                fmt_num(opts.scale.write_rate)
            )
        } else {
            "read-only: nothing was written to the cluster (pass --writes for the delivery-delay and consistent-under-writes rows)"
                .into()
        },
    ]);
    notes
}

/// The kubeconfig's credentials as a bearer token (an `Authorization: Bearer` header), the only
/// form kcache's delegated authentication checks with the cluster.
fn bearer(cluster: &Cluster) -> Option<http::HeaderValue> {
    cluster
        .target
        .authorization
        .clone()
        .filter(|a| a.as_bytes().starts_with(b"Bearer "))
}

/// The kcache in its deployed form, with what reaches it.
struct Secure {
    child: KcacheChild,
    /// HTTPS, with the kubeconfig's bearer token on every request.
    target: Target,
    /// The serving certificate's files, kept while the child serves them.
    _files: super::https::HttpsFiles,
}

/// `kcache-bench-<seconds>-<pid>`: unique per run, and recognisable.
fn own_namespace_name() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("kcache-bench-{secs}-{}", std::process::id())
}

async fn create_namespace(cluster: &Cluster, ns: &str) -> Result<(), String> {
    let body = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": ns, "labels": {CREATED_BY: "kcache-bench"}},
    });
    // A POST: if the name exists the cluster answers 409 and the bench stops, rather than
    // writing into (and later deleting) a namespace that is not its own.
    cluster
        .call(
            http::Method::POST,
            &cluster.path("/api/v1/namespaces"),
            "application/json",
            Some(body),
        )
        .await?;
    Ok(())
}

/// Delete the bench's ConfigMaps and its namespace, and wait (a minute at most) until the
/// namespace is gone. The ConfigMaps go first by name so that nothing is left even where
/// deleting a namespace does not remove its contents at once.
async fn delete_namespace(cluster: &Cluster, ns: &str, objects: usize) -> Result<String, String> {
    // Gone already is as good as deleted.
    let delete = |path: String| async move {
        match cluster
            .call(http::Method::DELETE, &path, "application/json", None)
            .await
        {
            Ok(_) | Err(CallError::Status { code: 404, .. }) => Ok(()),
            Err(e) => Err(String::from(e)),
        }
    };
    for name in object_names(objects) {
        delete(cluster.path(&format!("/api/v1/namespaces/{ns}/configmaps/{name}"))).await?;
    }
    delete(cluster.path(&format!("/api/v1/namespaces/{ns}/secrets/{OTHER_SECRET}"))).await?;
    let path = cluster.path(&format!("/api/v1/namespaces/{ns}"));
    delete(path.clone()).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match cluster
            .call(http::Method::GET, &path, "application/json", None)
            .await
        {
            Err(CallError::Status { code: 404, .. }) => {
                return Ok(format!("namespace {ns} deleted"));
            }
            Ok(_) if Instant::now() >= deadline => {
                return Ok(format!(
                    "namespace {ns} deleted, still terminating after 60 s (the cluster finishes it)"
                ));
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => return Err(e.into()),
        }
    }
}

fn object_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("bench-{i:04}")).collect()
}

/// One resource as the first LIST found it.
struct Sample {
    resource: &'static str,
    objects: usize,
    bytes: usize,
    /// The namespace of the one-namespace LIST and its object count.
    namespace: Option<(String, usize)>,
    /// (namespace, name) of the object to GET.
    object: Option<(String, String)>,
}

#[derive(Deserialize)]
struct NameList {
    items: Vec<NameItem>,
}

#[derive(Deserialize)]
struct NameItem {
    metadata: NameMeta,
}

#[derive(Deserialize)]
struct NameMeta {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

struct ClusterBench<'a> {
    cluster: &'a Cluster,
    opts: &'a ClusterOptions,
    report: Report,
    /// The bench's own namespace, with `writes`.
    namespace: Option<String>,
    /// The next value the writer puts into a ConfigMap.
    seq: AtomicU64,
}

impl ClusterBench<'_> {
    /// Everything but the namespace's creation and deletion, stopped by Ctrl-C (the kcache
    /// child and the connections go with the dropped future; the caller then cleans up).
    async fn run_interruptible(&mut self) -> Result<(), String> {
        tokio::select! {
            r = self.scenarios() => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted (Ctrl-C)".into()),
        }
    }

    async fn scenarios(&mut self) -> Result<(), String> {
        let mut samples = Vec::new();
        for (_, _, resource) in RESOURCES {
            samples.push(self.sample(resource).await?);
        }
        if let Some(ns) = &self.namespace {
            self.create_objects(ns, 0, self.opts.scale.write_objects)
                .await?;
        }
        progress("starting kcache in front of the cluster");
        let k = KcacheChild::start_with_kubeconfig(
            &self.opts.exe,
            &self.opts.kubeconfig,
            self.opts.context.as_deref(),
            &ChildConfig::caching(&RESOURCES),
            Duration::from_secs(600),
        )
        .await?;
        let kcache = Target::plain(k.addr);
        let secure = self.start_secure().await?;
        for s in &samples {
            self.reads(s, &k, &kcache, secure.as_ref()).await;
        }
        drop(secure);
        // Before the bench's ConfigMaps are written: the rounds read types nobody writes.
        self.interactive(&k, &kcache).await?;
        if let Some(ns) = self.namespace.clone() {
            self.consistent_under_writes(&ns, &k, &kcache).await?;
        }
        self.watch(&k, &kcache).await
    }

    /// The kcache in its deployed form: HTTPS, callers authenticated and authorized by the
    /// cluster (None, with a note, when the kubeconfig has no bearer token to read it with).
    async fn start_secure(&mut self) -> Result<Option<Secure>, String> {
        let Some(token) = bearer(self.cluster) else {
            self.report.notes.push(format!(
                "no `{KCACHE_SECURE}` rows: the kubeconfig's credentials ({}) are not a bearer token, \
                 which is what kcache's delegated authentication checks",
                self.cluster.auth
            ));
            return Ok(None);
        };
        progress("starting kcache over HTTPS with delegated authentication");
        let files = super::https::HttpsFiles::new()?;
        let mut config = ChildConfig::caching(&RESOURCES);
        // kcache's own identity is the kubeconfig's: no token of its own.
        config.delegated_with_token = Some(String::new());
        config.tls = Some((files.cert.clone(), files.key.clone()));
        let child = KcacheChild::start_with_kubeconfig(
            &self.opts.exe,
            &self.opts.kubeconfig,
            self.opts.context.as_deref(),
            &config,
            Duration::from_secs(600),
        )
        .await?;
        let mut target = files.target(child.addr, None);
        target.authorization = Some(token);
        // Checked once before any row: a caller the cluster does not let kcache authenticate
        // would otherwise fill the rows with 401s and 403s.
        let path = "/api/v1/configmaps?resourceVersion=0&limit=1";
        let (status, body) = load::fetch_from(&target, path, Duration::from_secs(60)).await?;
        if status != 200 {
            return Err(format!(
                "kcache over HTTPS with delegated authentication answered {status} to {path}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        Ok(Some(Secure {
            child,
            target,
            _files: files,
        }))
    }

    /// The first LIST of a resource (RV=0, direct): its size, a namespace and an object.
    async fn sample(&self, resource: &'static str) -> Result<Sample, String> {
        progress(format!("listing {resource}"));
        let path = self
            .cluster
            .path(&format!("/api/v1/{resource}?resourceVersion=0"));
        let (status, body) =
            load::fetch_from(&self.cluster.target, &path, Duration::from_secs(300)).await?;
        if status != 200 {
            return Err(format!(
                "LIST {resource} answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        let list: NameList =
            serde_json::from_slice(&body).map_err(|e| format!("LIST {resource}: {e}"))?;
        let mut per_ns: BTreeMap<String, usize> = BTreeMap::new();
        for i in &list.items {
            if let Some(ns) = &i.metadata.namespace {
                *per_ns.entry(ns.clone()).or_default() += 1;
            }
        }
        // The given namespace, else the one with the most objects (the first such by name).
        let namespace = match &self.opts.namespace {
            Some(ns) => Some((ns.clone(), per_ns.get(ns).copied().unwrap_or(0))),
            None => per_ns
                .iter()
                .max_by_key(|(ns, n)| (**n, std::cmp::Reverse(*ns)))
                .map(|(ns, n)| (ns.clone(), *n)),
        };
        let object = namespace.as_ref().and_then(|(ns, _)| {
            list.items
                .iter()
                .find(|i| i.metadata.namespace.as_deref() == Some(ns))
                .map(|i| (ns.clone(), i.metadata.name.clone()))
        });
        Ok(Sample {
            resource,
            objects: list.items.len(),
            bytes: body.len(),
            namespace,
            object,
        })
    }

    /// Load one target for a phase; with `pid`, that process's CPU too.
    async fn measure(
        &self,
        target: &Target,
        path: &str,
        pid: Option<u32>,
        on_response: Option<load::OnResponse>,
    ) -> (LoadResult, Option<f64>) {
        let mut spec = LoadSpec::to(target, path, self.opts.scale.clients, self.opts.scale.phase);
        spec.on_response = on_response;
        let cpu = pid.map(|p| CpuMeter::start_all(&[p]));
        let others = OthersMeter::start(&pid.into_iter().collect::<Vec<_>>());
        let mut r = load::run(spec).await;
        let used = cpu.as_ref().map(|c| c.used());
        r.others_cores = Some(others.cores(used.map_or(0.0, |u| u.0)));
        (r, used.map(|(c, w)| if w > 0.0 { c / w } else { 0.0 }))
    }

    /// One read through a kcache: its row, with the upstream cost its metrics counted meanwhile
    /// and its ratio to the `direct` row.
    #[allow(clippy::too_many_arguments)]
    async fn kcache_row(
        &self,
        scenario: &str,
        case: &str,
        label: &str,
        path: &str,
        k: &KcacheChild,
        target: &Target,
        direct: &LoadResult,
    ) -> (LoadResult, Row) {
        let before = k.upstream_cost().await.ok();
        let (r, cpu) = self.measure(target, path, Some(k.pid()), None).await;
        let after = k.upstream_cost().await.ok();
        let mut row = load_row(scenario, case, label, &r, cpu);
        if let Some(c) = before.zip(after).map(|(b, a): (UpstreamCost, _)| a - b) {
            set_upstream(&mut row, c.requests, c.received_bytes, r.ok);
        }
        if direct.rps() > 0.0 {
            row.ratio("kcache/direct", r.rps() / direct.rps());
        }
        (r, row)
    }

    /// One read on every target: the direct row, then each kcache's with its upstream cost and
    /// the ratio to direct (and the HTTPS one's to the plain one).
    async fn read_pair(
        &mut self,
        scenario: &str,
        case: &str,
        path: &str,
        k: &KcacheChild,
        kcache: &Target,
        secure: Option<&Secure>,
    ) {
        progress(format!("{scenario}, {case}: direct"));
        let (d, _) = self
            .measure(&self.cluster.target, &self.cluster.path(path), None, None)
            .await;
        let mut row = load_row(scenario, case, DIRECT, &d, None);
        let body = d.bytes.checked_div(d.ok).unwrap_or(0);
        set_upstream_direct(&mut row, body as usize);
        self.report.push(row);
        progress(format!("{scenario}, {case}: kcache"));
        let (r, row) = self
            .kcache_row(scenario, case, KCACHE, path, k, kcache, &d)
            .await;
        self.report.push(row);
        let Some(secure) = secure else {
            return;
        };
        progress(format!("{scenario}, {case}: {KCACHE_SECURE}"));
        // Its upstream columns include the cluster's TokenReviews and SubjectAccessReviews:
        // kcache remembers each verdict briefly, so they are a few per row, not one per read.
        let (sr, mut row) = self
            .kcache_row(
                scenario,
                case,
                KCACHE_SECURE,
                path,
                &secure.child,
                &secure.target,
                &d,
            )
            .await;
        if r.rps() > 0.0 {
            row.ratio("HTTPS/HTTP", sr.rps() / r.rps());
        }
        self.report.push(row);
    }

    async fn reads(
        &mut self,
        s: &Sample,
        k: &KcacheChild,
        kcache: &Target,
        secure: Option<&Secure>,
    ) {
        let c = self.opts.scale.clients;
        let r = s.resource;
        let all = format!("{r}: {} objects, {:.1} MB", s.objects, mb(s.bytes as u64));
        self.read_pair(
            &format!("Cluster: LIST all (RV=0), {c} clients"),
            &all,
            &format!("/api/v1/{r}?resourceVersion=0"),
            k,
            kcache,
            secure,
        )
        .await;
        self.read_pair(
            &format!("Cluster: LIST all (RV unset, consistent), {c} clients"),
            &all,
            &format!("/api/v1/{r}"),
            k,
            kcache,
            secure,
        )
        .await;
        match &s.namespace {
            Some((ns, n)) => {
                self.read_pair(
                    &format!("Cluster: LIST one namespace (RV unset, consistent), {c} clients"),
                    &format!("{r} in {ns}: {n} objects"),
                    &format!("/api/v1/namespaces/{ns}/{r}"),
                    k,
                    kcache,
                    secure,
                )
                .await
            }
            None => self.report.notes.push(format!(
                "{r}: none found, so no one-namespace LIST and no GET"
            )),
        }
        if let Some((ns, name)) = &s.object {
            let object = format!("/api/v1/namespaces/{ns}/{r}/{name}");
            let case = format!("{r} {ns}/{name}");
            self.read_pair(
                &format!("Cluster: GET by name (RV=0), {c} clients"),
                &case,
                &format!("{object}?resourceVersion=0"),
                k,
                kcache,
                secure,
            )
            .await;
            self.read_pair(
                &format!("Cluster: GET by name (RV unset, consistent), {c} clients"),
                &case,
                &object,
                k,
                kcache,
                secure,
            )
            .await;
        }
    }

    /// The interactive rounds (see the module's docs), their rows and checks.
    async fn interactive(&mut self, k: &KcacheChild, kcache: &Target) -> Result<(), String> {
        let scale = self.opts.scale.clone();
        // A namespace of a few ConfigMaps: the one asked for, else the bench's own, else
        // kube-system, which every cluster has (with a few ConfigMaps of its components).
        let ns = self
            .opts
            .namespace
            .clone()
            .or_else(|| self.namespace.clone())
            .unwrap_or_else(|| "kube-system".into());
        let list = format!("/api/v1/namespaces/{ns}/configmaps");
        let mut reads = Read::lists(format!("LIST configmaps in {ns}"), list.clone());
        match self.configmap_to_get(&list).await? {
            Some(name) => reads.push(Read {
                label: format!("GET configmap {ns}/{name}"),
                path: format!("{list}/{name}"),
                paged: false,
            }),
            None => self.report.notes.push(format!(
                "interactive: no ConfigMap in {ns}, so no GET in the rounds"
            )),
        }
        let scenario = format!(
            "Cluster: interactive consistent reads (RV unset; LISTs by pages of {}), one round every {} s",
            scale.page,
            fmt_num(scale.interactive_every.as_secs_f64())
        );
        progress(format!(
            "{scenario}: {} s",
            fmt_num(scale.interactive.as_secs_f64())
        ));
        let cluster = self.cluster;
        let rounds = Rounds {
            direct: &cluster.target,
            direct_base: &cluster.base_path,
            kcache,
            child: k,
            duration: scale.interactive,
            period: scale.interactive_every,
            page: scale.page,
        };
        let stats = match &self.namespace {
            Some(own) => {
                self.create_other_secret(own).await?;
                let stop = AtomicBool::new(false);
                let (stats, (writes, failed, error)) = tokio::join!(
                    async {
                        let stats = rounds.run(&reads).await;
                        stop.store(true, Ordering::Relaxed);
                        stats
                    },
                    self.write_other(own, &stop)
                );
                self.report.notes.push(format!(
                    "interactive: Secret {own}/{OTHER_SECRET} updated {writes} times during the rounds{}",
                    match (failed, error) {
                        (0, _) => String::new(),
                        (n, e) => format!(", {n} writes failed: {}", e.unwrap_or_default()),
                    }
                ));
                stats
            }
            None => rounds.run(&reads).await,
        };
        push_rows(&mut self.report, &scenario, DIRECT, &reads, &stats);
        push_checks(&mut self.report, "Cluster interactive", &reads, &stats);
        self.report.notes.push(format!(
            "interactive: {} s of rounds, each read directly and through the plain kcache back to back \
             (each first every other round); the cluster's own writes of other types move its revision \
             meanwhile{}; `> direct + 100 ms` counts the rounds where kcache's read took that much longer \
             than the direct one",
            fmt_num(scale.interactive.as_secs_f64()),
            if self.namespace.is_some() {
                ", and the bench's Secret written once a second"
            } else {
                " (with --writes the bench adds a Secret written once a second)"
            }
        ));
        Ok(())
    }

    /// The ConfigMap the rounds GET: `kube-root-ca.crt` (every namespace has it since
    /// Kubernetes 1.20), else the first one listed, else none.
    async fn configmap_to_get(&self, list: &str) -> Result<Option<String>, String> {
        let path = self.cluster.path(&format!("{list}?limit=500"));
        let (status, body) =
            load::fetch_from(&self.cluster.target, &path, Duration::from_secs(60)).await?;
        if status != 200 {
            return Err(format!(
                "LIST {list} answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        let names: NameList =
            serde_json::from_slice(&body).map_err(|e| format!("LIST {list}: {e}"))?;
        let names: Vec<String> = names.items.into_iter().map(|i| i.metadata.name).collect();
        Ok(names
            .iter()
            .find(|n| *n == "kube-root-ca.crt")
            .or(names.first())
            .cloned())
    }

    /// The Secret of the bench's namespace that the interactive rounds' writer updates.
    async fn create_other_secret(&self, ns: &str) -> Result<(), String> {
        let body = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": OTHER_SECRET, "labels": {CREATED_BY: "kcache-bench"}},
            "type": "Opaque",
        });
        let path = self
            .cluster
            .path(&format!("/api/v1/namespaces/{ns}/secrets"));
        self.cluster
            .call(http::Method::POST, &path, "application/json", Some(body))
            .await?;
        Ok(())
    }

    /// Update the bench's Secret once a second (a new annotation value each time) until
    /// `stop`: (writes, failed writes, the first failure).
    async fn write_other(&self, ns: &str, stop: &AtomicBool) -> (u64, u64, Option<String>) {
        let path = self
            .cluster
            .path(&format!("/api/v1/namespaces/{ns}/secrets/{OTHER_SECRET}"));
        let start = tokio::time::Instant::now();
        let (mut writes, mut failed, mut first_error) = (0u64, 0u64, None);
        for i in 0u64.. {
            tokio::time::sleep_until(
                start + Duration::from_secs_f64(i as f64 / OTHER_WRITES_PER_S),
            )
            .await;
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            let patch =
                json!({"metadata": {"annotations": {"kcache.dev/bench-seq": seq.to_string()}}});
            match self
                .cluster
                .call(
                    http::Method::PATCH,
                    &path,
                    "application/merge-patch+json",
                    Some(patch),
                )
                .await
            {
                Ok(_) => writes += 1,
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        (writes, failed, first_error)
    }

    /// The bench's ConfigMaps in its namespace (about 1 KB each), past the first `from` up to
    /// `to` in all.
    async fn create_objects(&self, ns: &str, from: usize, to: usize) -> Result<(), String> {
        progress(format!(
            "creating {} ConfigMaps in {ns}",
            to.saturating_sub(from)
        ));
        let path = self
            .cluster
            .path(&format!("/api/v1/namespaces/{ns}/configmaps"));
        for name in object_names(to).into_iter().skip(from) {
            let body = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {CREATED_BY: "kcache-bench"}},
                "data": {"seq": "0", "payload": "x".repeat(900)},
            });
            self.cluster
                .call(http::Method::POST, &path, "application/json", Some(body))
                .await?;
        }
        Ok(())
    }

    /// Consistent LIST (RV unset) of the bench's namespace while its ConfigMaps are updated,
    /// as it is, then grown to `write_objects_large`: throughput and the staleness check (every
    /// write acknowledged before a read was sent must be in its answer), direct and through
    /// kcache.
    async fn consistent_under_writes(
        &mut self,
        ns: &str,
        k: &KcacheChild,
        kcache: &Target,
    ) -> Result<(), String> {
        let (small, large) = (
            self.opts.scale.write_objects,
            self.opts.scale.write_objects_large,
        );
        self.consistent_under_writes_of(ns, k, kcache, small)
            .await?;
        if large > small {
            self.create_objects(ns, small, large).await?;
            self.consistent_under_writes_of(ns, k, kcache, large)
                .await?;
        }
        Ok(())
    }

    /// [`ClusterBench::consistent_under_writes`] with `objects` ConfigMaps in the namespace,
    /// all of them written.
    async fn consistent_under_writes_of(
        &mut self,
        ns: &str,
        k: &KcacheChild,
        kcache: &Target,
        objects: usize,
    ) -> Result<(), String> {
        let scale = &self.opts.scale;
        let scenario = format!(
            "Cluster: consistent LIST (RV unset) of the bench's namespace under writes, {} clients",
            scale.clients
        );
        let case = format!(
            "{objects} ConfigMaps, {} writes/s",
            fmt_num(scale.write_rate)
        );
        let path = format!("/api/v1/namespaces/{ns}/configmaps");
        let direct_path = self.cluster.path(&path);
        let mut direct_rps = None;
        for (label, target) in [(DIRECT, &self.cluster.target), (KCACHE, kcache)] {
            progress(format!("{scenario}: {label}"));
            let checker = Arc::new(staleness::Checker::default());
            let count = (scale.write_rate * scale.phase.as_secs_f64()).ceil() as u64;
            let writer = {
                let checker = checker.clone();
                let writes = Writes::new(self.cluster, ns, objects);
                let seq = &self.seq;
                async move {
                    writes
                        .at_rate(scale.write_rate, count, seq, Some(&checker.acks))
                        .await
                }
            };
            let cb = checker.clone();
            let on_response: load::OnResponse =
                Arc::new(move |sent, status, body| cb.check(sent, status, body));
            let is_kcache = label == KCACHE;
            let p = if is_kcache { &path } else { &direct_path };
            let before = if is_kcache {
                k.upstream_cost().await.ok()
            } else {
                None
            };
            let ((r, cpu), log) = tokio::join!(
                self.measure(target, p, is_kcache.then(|| k.pid()), Some(on_response)),
                writer
            );
            let mut row = load_row(&scenario, &case, label, &r, cpu);
            if is_kcache {
                let after = k.upstream_cost().await.ok();
                if let Some(c) = before.zip(after).map(|(b, a)| a - b) {
                    set_upstream(&mut row, c.requests, c.received_bytes, r.ok);
                }
                if let Some(d) = direct_rps.filter(|d: &f64| *d > 0.0) {
                    row.ratio("kcache/direct", r.rps() / d);
                }
            } else {
                let body = r.bytes.checked_div(r.ok).unwrap_or(0);
                set_upstream_direct(&mut row, body as usize);
                direct_rps = Some(r.rps());
            }
            row.set("reads checked", checker.reads.load(Ordering::Relaxed))
                .set("stale reads", checker.stale_reads.load(Ordering::Relaxed))
                .set("writes acked", checker.acks.len() as u64);
            if log.failed > 0 {
                row.note(format!(
                    "{} writes failed: {}",
                    log.failed,
                    log.first_error.as_deref().unwrap_or("?")
                ));
            }
            if let Some(first) = checker.first_stale_answer() {
                row.note(format!("first stale answer: {first}"));
            }
            self.report.push(row);
        }
        Ok(())
    }

    /// N watchers of ConfigMaps on each target at once. With writes: the bench's namespace,
    /// delivery delay from each write's send. Read-only: all namespaces, whatever
    /// the cluster changes meanwhile, and how far kcache's watchers trail the direct ones.
    async fn watch(&mut self, k: &KcacheChild, kcache: &Target) -> Result<(), String> {
        let scale = self.opts.scale.clone();
        let n = scale.watchers.max(1);
        // client-go multiplexes watches over HTTP/2; the apiserver allows 100 streams per
        // connection by default (kube-apiserver --http2-max-streams-per-connection), so one
        // connection per hundred watchers.
        let proto = Proto::H2 {
            connections: n.div_ceil(100),
        };
        let collection = match &self.namespace {
            Some(ns) => format!("/api/v1/namespaces/{ns}/configmaps"),
            None => "/api/v1/configmaps".to_string(),
        };
        let scenario = format!(
            "Cluster: WATCH ConfigMaps{}, HTTP/2",
            if self.namespace.is_some() {
                " of the bench's namespace"
            } else {
                ", all namespaces"
            }
        );
        let case = match &self.namespace {
            Some(_) => format!(
                "{n} watchers per target, {} writes/s",
                fmt_num(scale.write_rate)
            ),
            None => format!(
                "{n} watchers per target, {:.0} s",
                scale.watch.as_secs_f64()
            ),
        };
        progress(format!("{scenario}: {case}"));
        let direct_collection = self.cluster.path(&collection);
        let direct_rv = list_rv_on(&self.cluster.target, &direct_collection).await?;
        let kcache_rv = list_rv_on(kcache, &collection).await?;
        let watch = |base: &str, rv: &str| {
            format!(
                "{base}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1800"
            )
        };
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let until = Instant::now() + scale.watch + Duration::from_secs(120);
        let direct_watches = vec![(None, watch(&direct_collection, &direct_rv)); n];
        let kcache_watches = vec![(None, watch(&collection, &kcache_rv)); n];
        let (direct, kc) = tokio::join!(
            watchers::open_to(
                &self.cluster.target,
                proto,
                direct_watches,
                stop_rx.clone(),
                until,
                64
            ),
            watchers::open_to(kcache, proto, kcache_watches, stop_rx, until, 64),
        );
        let cpu = CpuMeter::start(k.pid());
        let log = match &self.namespace {
            Some(ns) => {
                let count = (scale.write_rate * scale.watch.as_secs_f64()).round() as u64;
                Writes::new(self.cluster, ns, scale.write_objects)
                    .at_rate(scale.write_rate, count, &self.seq, None)
                    .await
            }
            None => {
                tokio::time::sleep(scale.watch).await;
                WriteLog::default()
            }
        };
        let kcache_cores = cpu.cores();
        // The last writes' deliveries: until all arrived, 5 s at most for both.
        let deadline = Instant::now() + Duration::from_secs(5);
        for fan in [&direct, &kc] {
            let left = deadline.saturating_duration_since(Instant::now());
            fan.wait_for_events(fan.expected(&log), left).await;
        }
        let _ = stop_tx.send(true);
        let (d_opened, d_failed, d_error) = (
            direct.tasks.len(),
            direct.failed,
            direct.first_error.clone(),
        );
        let (k_opened, k_failed, k_error) = (kc.tasks.len(), kc.failed, kc.first_error.clone());
        let d_received = direct.finish().await;
        let k_received = kc.finish().await;
        for (label, opened, failed, error, received, cores) in [
            (DIRECT, d_opened, d_failed, d_error, &d_received, None),
            (
                KCACHE,
                k_opened,
                k_failed,
                k_error,
                &k_received,
                Some(kcache_cores),
            ),
        ] {
            let mut row = Row::new(&scenario, &case, label);
            row.set("watchers", opened as u64);
            let events: u64 = received.iter().map(|r| r.events.len() as u64).sum();
            row.set("events seen", events);
            if self.namespace.is_some() {
                let d = watchers::delivery(&log, received);
                row.set("writes", log.writes.len() as u64)
                    .set("delivered", format!("{}/{}", d.delivered, d.expected))
                    .set("p50 ms", ms(d.percentile(0.5)))
                    .set("p99 ms", ms(d.percentile(0.99)))
                    .set("max ms", ms(d.max()));
                note_delivery(&mut row, &d);
            } else if label == KCACHE {
                let behind = trailing(&d_received, received);
                row.set("events compared", behind.len() as u64)
                    .set("p50 ms behind direct", ms(load::percentile(&behind, 0.5)))
                    .set("p99 ms behind direct", ms(load::percentile(&behind, 0.99)));
            }
            row.set("kcache CPU cores", cores);
            if failed > 0 {
                row.note(format!(
                    "{failed} watchers failed to open: {}",
                    error.as_deref().unwrap_or("?")
                ));
            }
            let errors: Vec<&str> = received.iter().filter_map(|r| r.error.as_deref()).collect();
            if let Some(e) = errors.first() {
                row.note(format!("{} streams failed: {e}", errors.len()));
            }
            if log.failed > 0 {
                row.note(format!(
                    "{} writes failed: {}",
                    log.failed,
                    log.first_error.as_deref().unwrap_or("?")
                ));
            }
            row.set("errors", (failed + errors.len()) as u64);
            self.report.push(row);
        }
        Ok(())
    }
}

fn note_delivery(row: &mut Row, d: &Delivery) {
    if d.ended_early > 0 {
        row.note(format!("{} streams ended early", d.ended_early));
    }
}

/// For every resourceVersion a kcache watcher saw that a direct watcher saw too: how long after
/// the first direct arrival it arrived (zero if it came first), sorted.
fn trailing(direct: &[watchers::Received], kcache: &[watchers::Received]) -> Vec<Duration> {
    let mut first: HashMap<u64, Instant> = HashMap::new();
    for r in direct {
        for (rv, at) in &r.events {
            first
                .entry(*rv)
                .and_modify(|t| *t = (*t).min(*at))
                .or_insert(*at);
        }
    }
    let mut out: Vec<Duration> = kcache
        .iter()
        .flat_map(|r| r.events.iter())
        .filter_map(|(rv, at)| first.get(rv).map(|t| at.saturating_duration_since(*t)))
        .collect();
    out.sort_unstable();
    out
}

/// The bench's writes: merge patches of its own ConfigMaps, in turn.
struct Writes<'a> {
    cluster: &'a Cluster,
    ns: &'a str,
    names: Vec<String>,
}

impl<'a> Writes<'a> {
    fn new(cluster: &'a Cluster, ns: &'a str, objects: usize) -> Writes<'a> {
        Writes {
            cluster,
            ns,
            names: object_names(objects.max(1)),
        }
    }

    /// `count` writes at `rate` per second; each acknowledged one is logged with its
    /// resourceVersion (key 0: every watcher should see it) and the time it was sent, and in
    /// `acks` if given. The time logged is the send's, not the acknowledgement's: a watcher
    /// often has the event before the writer has the answer, and delays measured from the
    /// answer would be zero; from the send they include the write's round trip, the same for
    /// both targets.
    async fn at_rate(
        &self,
        rate: f64,
        count: u64,
        seq: &AtomicU64,
        acks: Option<&staleness::AckLog>,
    ) -> WriteLog {
        // A rate of zero (or less) would put every write at infinity.
        let rate = rate.max(0.1);
        let start = tokio::time::Instant::now();
        let mut log = WriteLog::default();
        for i in 0..count {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
            let name = &self.names[i as usize % self.names.len()];
            // A value never written before: a patch that changes nothing makes no event.
            let value = seq.fetch_add(1, Ordering::Relaxed);
            let sent = Instant::now();
            match self.write(name, value).await {
                Ok(rv) => {
                    log.writes.insert(rv, (sent, 0));
                    if let Some(a) = acks {
                        a.record(name, rv);
                    }
                }
                Err(e) => {
                    log.failed += 1;
                    log.first_error.get_or_insert(e);
                }
            }
        }
        log.elapsed = start.elapsed();
        log
    }

    async fn write(&self, name: &str, seq: u64) -> Result<u64, String> {
        let path = self
            .cluster
            .path(&format!("/api/v1/namespaces/{}/configmaps/{name}", self.ns));
        let v = self
            .cluster
            .call(
                http::Method::PATCH,
                &path,
                "application/merge-patch+json",
                Some(json!({"data": {"seq": seq.to_string()}})),
            )
            .await?;
        super::rv_of(&v)
    }
}
