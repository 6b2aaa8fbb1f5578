//! `kcache bench`: kcache measured side by side with nginx serving the same bytes and with the
//! simulated apiserver it caches, in one run.
//!
//! The bench process runs the simulated apiserver in-process and the load generators; kcache
//! runs as a child process (`kcache serve`, see [`kcache`]) so its CPU time and memory are its
//! own. Scenarios (each with its own sim and kcache):
//!
//! - `list`: LIST all (RV=0) of N ConfigMaps: kcache vs nginx vs the sim;
//! - `get`: GET by name, RV=0 and RV unset: kcache vs nginx vs the sim;
//! - `consistent`: consistent reads (RV unset) on each upstream profile (v1.28, v1.34), the sim
//!   with its profile's measured capacity directly vs through kcache: LIST of all ConfigMaps,
//!   of one namespace and GET of one, with ConfigMaps written and without (another type is
//!   written throughout), with the staleness check and upstream requests per read;
//! - `fresh`: consistent GET and LIST (RV unset) of one namespace of many ConfigMaps on a sim
//!   whose watch caches lag, on each profile, for a type being written and a quiet one: the
//!   sim vs kcache with its freshness probe vs kcache forwarding, with upstream requests and
//!   bytes per read;
//! - `interactive`: on each profile, a person's paced reads (one round every 2 s for minutes:
//!   LIST of a namespace of 3 ConfigMaps, of all Pods and of all ConfigMaps by pages of 500,
//!   GET of one ConfigMap, all consistent) while only another type is written, the sim
//!   directly vs through kcache back to back: p50, p99, max and the reads through kcache
//!   noticeably (100 ms) slower than the direct one beside them;
//! - `https`: LIST and GET over HTTPS with delegated auth vs plain HTTP and vs nginx HTTPS;
//! - `watch`: watch fan-out over HTTP/1.1, HTTP/2 and HTTP/2 over TLS: delivery delays and
//!   kcache's CPU per delivered event;
//! - `node`: node-scoped pod watchers (field selector): CPU per upstream event;
//! - `memory`: kcache's RSS per cached JSON byte;
//! - `stalled`: watchers that never read, during a fan-out;
//! - `protobuf`: LIST and watch fan-out of Pods in protobuf from the cache vs JSON and vs nginx
//!   serving the same protobuf bytes, and a client's cost of decoding either;
//! - `warm`: warm restart (`cache.persistDir`): kcache killed with SIGKILL during churn and
//!   started again, time from the exec to the first LIST warm vs cold, what each start asks of
//!   the upstream, disk bytes per object and write amplification under churn;
//! - `relist`: GET and LIST from the cache of a type and of another type, quiet and while the
//!   type relists a large collection back to back;
//! - `audit`: GET req/s and CPU per event with an audit trail at level Metadata, and without;
//! - `fleet`: a cluster at sig-scalability's proportions (`--nodes`, 5,000 by default): its
//!   kubelets' Pod and Node watches, kube-proxies' EndpointSlice watches and interactive users
//!   under the load test's churn, each class alone and all at once, and the herd; delivery
//!   delay, events lost, kcache's CPU and memory against what it holds (no controllers yet).
//!
//! Against a real cluster (`--kubeconfig`, [`cluster`]), and the fleet's node clients against it
//! ([`cluster_fleet`]).
//!
//! `KCACHE_BENCH_TARGET_EXE` names another kcache executable to run as the target instead of
//! the bench's own (an older build, for a before/after comparison).
// Counting allocations needs a `GlobalAlloc` implementation (`alloc_count`): it is the crate's
// only unsafe code, allowed there alone.
#![deny(unsafe_code)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod alloc_count;
mod audit;
mod auto;
pub mod cluster;
pub mod cluster_fleet;
mod consistent;
mod crd;
mod fanout;
mod fleet;
mod floor;
mod forward;
mod fresh;
mod herd;
pub mod https;
pub mod interactive;
pub mod kcache;
pub mod load;
mod memory;
pub mod nginx;
pub mod procstat;
mod protobuf;
mod reads;
mod relist;
pub mod report;
pub mod staleness;
mod users;
mod warm;
pub mod watchers;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use kcache::{ChildConfig, KcacheChild};
use kcache_sim::seed::{self, SeedObject};
use kcache_sim::{Sim, SimConfig};
use load::{LoadResult, LoadSpec};
use procstat::{CpuMeter, OthersMeter, RssPeak};
use report::{fmt_num, Report, Row};
use watchers::{Delivery, Proto};

/// Scenario names, in the order they run.
pub const SCENARIOS: &[&str] = &[
    "list",
    "get",
    "consistent",
    "fresh",
    "interactive",
    "forward",
    "crd",
    "auto",
    "https",
    "watch",
    "node",
    "memory",
    "stalled",
    "protobuf",
    "warm",
    "relist",
    "audit",
    "fleet",
];

/// Command-line options of `kcache bench`.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Small sizes and short phases (a smoke run of a minute or two).
    pub quick: bool,
    /// Scenarios to run (empty: all).
    pub scenarios: Vec<String>,
    /// Also write the results as JSON here.
    pub json: Option<PathBuf>,
    /// `apt-get install -y nginx-light` if nginx is missing.
    pub install_nginx: bool,
    /// Nodes of the `fleet` scenario's cluster (default: 5,000; 500 with `quick`).
    pub nodes: Option<usize>,
}

const CONFIGMAPS: (&str, &str, &str) = ("", "v1", "configmaps");
const PODS: (&str, &str, &str) = ("", "v1", "pods");
const SECRETS: (&str, &str, &str) = ("", "v1", "secrets");
/// Load-generator connections, for every target.
const CLIENTS: usize = 8;
/// Watchers opened at once.
const OPEN_PARALLEL: usize = 256;
/// File descriptors kept free for everything that is not a watcher.
const FD_RESERVE: u64 = 1000;

/// Sizes and durations of a run.
struct Scale {
    phase: Duration,
    list_sizes: Vec<usize>,
    get_objects: usize,
    consistent_objects: usize,
    consistent_namespaces: usize,
    writes_per_s: f64,
    /// ConfigMaps in the one namespace of the `fresh` scenario.
    fresh_objects: usize,
    /// The sim's replicas in the `fresh` scenario, by how far their watch caches lag.
    fresh_lags: Vec<Duration>,
    /// Reads before each measured `fresh` and `consistent` row, not counted.
    fresh_warmup: Duration,
    watch_objects: usize,
    watch_cases: Vec<WatchCase>,
    watch_rate: f64,
    watch_secs: f64,
    node_watchers: usize,
    node_pods: usize,
    node_rate: f64,
    node_secs: f64,
    /// Nodes of the `fleet` cluster (unless `--nodes` says), and how long its churn runs.
    fleet_nodes: usize,
    fleet_secs: f64,
    memory_objects: usize,
    stalled: usize,
    /// Objects in the stalled scenario: their list is what each stalled watcher asks for, which
    /// should exceed what the kernel buffers per connection (4 MB by default) so that kcache
    /// has to hold back the rest itself.
    stalled_objects: usize,
    stalled_fanout: usize,
    stalled_secs: f64,
    /// Pods listed and watched in the `protobuf` scenario, and its watchers (of each form).
    protobuf_pods: usize,
    protobuf_watchers: usize,
    /// ConfigMaps of each `warm` case, its churn (writes/s), and how long its disk writes
    /// are measured.
    warm_sizes: Vec<usize>,
    warm_rate: f64,
    warm_secs: Duration,
    /// ConfigMaps of the `relist` scenario's relisting type.
    relist_objects: usize,
    /// Objects, pace and duration of the `interactive` scenario.
    interactive: interactive::InteractiveScale,
}

/// What [`Bench::nginx_rows`] measured.
#[derive(Default)]
struct NginxRows {
    rows: Vec<Row>,
    /// The better req/s of nginx with `sendfile on` (the targets' reference).
    best: Option<f64>,
    /// req/s with `sendfile off`, when asked for.
    copying: Option<f64>,
}

/// One fan-out of the `watch` scenario.
#[derive(Debug, Clone, Copy)]
struct WatchCase {
    proto: Proto,
    watchers: usize,
    /// Over TLS (HTTP/2 with ALPN, as client-go connects).
    tls: bool,
}

impl WatchCase {
    fn plain(proto: Proto, watchers: usize) -> WatchCase {
        WatchCase {
            proto,
            watchers,
            tls: false,
        }
    }

    fn tls(proto: Proto, watchers: usize) -> WatchCase {
        WatchCase {
            proto,
            watchers,
            tls: true,
        }
    }
}

impl Scale {
    fn full() -> Scale {
        Scale {
            phase: Duration::from_secs(8),
            list_sizes: vec![10_000, 100_000],
            get_objects: 10_000,
            consistent_objects: 10_000,
            consistent_namespaces: 20,
            writes_per_s: 50.0,
            fresh_objects: 10_000,
            fresh_lags: vec![Duration::ZERO, Duration::from_millis(50)],
            fresh_warmup: Duration::from_secs(1),
            watch_objects: 1_000,
            watch_cases: vec![
                WatchCase::plain(Proto::H1, 1_000),
                WatchCase::plain(Proto::H1, 10_000),
                WatchCase::plain(Proto::H2 { connections: 10 }, 1_000),
                WatchCase::plain(Proto::H2 { connections: 10 }, 10_000),
                WatchCase::tls(Proto::H2 { connections: 10 }, 1_000),
                WatchCase::tls(Proto::H2 { connections: 10 }, 10_000),
            ],
            watch_rate: 10.0,
            watch_secs: 20.0,
            node_watchers: 5_000,
            node_pods: 20_000,
            node_rate: 100.0,
            node_secs: 20.0,
            fleet_nodes: 5_000,
            fleet_secs: 30.0,
            memory_objects: 100_000,
            stalled: 100,
            stalled_objects: 5_000,
            stalled_fanout: 1_000,
            stalled_secs: 15.0,
            protobuf_pods: 10_000,
            protobuf_watchers: 1_000,
            warm_sizes: vec![10_000, 100_000],
            warm_rate: 100.0,
            warm_secs: Duration::from_secs(20),
            relist_objects: 100_000,
            interactive: interactive::InteractiveScale::full(),
        }
    }

    fn quick() -> Scale {
        Scale {
            phase: Duration::from_secs(2),
            list_sizes: vec![1_000, 5_000],
            get_objects: 1_000,
            consistent_objects: 2_000,
            consistent_namespaces: 4,
            writes_per_s: 50.0,
            fresh_objects: 1_000,
            fresh_lags: vec![Duration::ZERO, Duration::from_millis(50)],
            fresh_warmup: Duration::from_millis(300),
            watch_objects: 200,
            watch_cases: vec![
                WatchCase::plain(Proto::H1, 100),
                WatchCase::plain(Proto::H1, 500),
                WatchCase::plain(Proto::H2 { connections: 2 }, 500),
                WatchCase::tls(Proto::H2 { connections: 2 }, 500),
            ],
            watch_rate: 10.0,
            watch_secs: 4.0,
            node_watchers: 200,
            node_pods: 800,
            node_rate: 100.0,
            node_secs: 4.0,
            fleet_nodes: 500,
            fleet_secs: 5.0,
            memory_objects: 5_000,
            stalled: 10,
            stalled_objects: 1_000,
            stalled_fanout: 100,
            stalled_secs: 3.0,
            protobuf_pods: 1_000,
            protobuf_watchers: 100,
            warm_sizes: vec![2_000],
            warm_rate: 100.0,
            warm_secs: Duration::from_secs(4),
            relist_objects: 10_000,
            interactive: interactive::InteractiveScale::quick(),
        }
    }
}

/// A directory under the system's temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Result<TempDir, String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("kcache-bench-{}-{n}-{label}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(TempDir(p))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// `10000` → `10k`.
fn count_label(n: usize) -> String {
    if n >= 1000 && n % 1000 == 0 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

fn progress(msg: impl AsRef<str>) {
    eprintln!("[bench] {}", msg.as_ref());
}

fn rv_of(v: &Value) -> Result<u64, String> {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "an object without a resourceVersion".to_string())
}

/// LIST and GET requests the sim has served so far.
fn upstream_requests(sim: &Sim) -> u64 {
    let (lists, gets, _, _) = sim.request_counts();
    lists + gets
}

/// Create the seed objects in the sim.
fn seed_sim(sim: &Sim, objects: Vec<SeedObject>) -> Result<(), String> {
    seed::create_all(sim, objects)
}

async fn start_sim() -> Result<Sim, String> {
    Sim::start(SimConfig::default())
        .await
        .map_err(|e| format!("starting the sim: {e}"))
}

/// The resourceVersion of a (cheap, one-item) list, from which watches start.
pub async fn list_rv(addr: std::net::SocketAddr, collection: &str) -> Result<u64, String> {
    list_rv_of(&load::Target::plain(addr), collection).await
}

/// [`list_rv`] on any target, as a number.
async fn list_rv_of(target: &load::Target, collection: &str) -> Result<u64, String> {
    list_rv_on(target, collection)
        .await?
        .parse()
        .map_err(|_| format!("list of {collection}: resourceVersion"))
}

/// [`list_rv`] on any target (HTTPS, credentials), as the server wrote it.
pub async fn list_rv_on(target: &load::Target, collection: &str) -> Result<String, String> {
    #[derive(Deserialize)]
    struct Head {
        metadata: Meta,
    }
    #[derive(Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: String,
    }
    let (status, body) = load::fetch_from(
        target,
        &format!("{collection}?limit=1"),
        Duration::from_secs(30),
    )
    .await?;
    if status != 200 {
        return Err(format!("list of {collection}: status {status}"));
    }
    let head: Head =
        serde_json::from_slice(&body).map_err(|e| format!("list of {collection}: {e}"))?;
    Ok(head.metadata.resource_version)
}

/// Sum of the items' JSON bytes of a list body, and their count.
pub fn item_bytes(body: &[u8]) -> Result<(u64, usize), String> {
    #[derive(Deserialize)]
    struct List<'a> {
        #[serde(borrow)]
        items: Vec<&'a serde_json::value::RawValue>,
    }
    let list: List = serde_json::from_slice(body).map_err(|e| format!("list body: {e}"))?;
    Ok((
        list.items.iter().map(|i| i.get().len() as u64).sum(),
        list.items.len(),
    ))
}

/// Change an object in the sim (a new annotation value) and return the write's RV.
fn bump(sim: &Sim, resource: &str, obj: &Value, seq: u64) -> Result<u64, String> {
    let mut o = obj.clone();
    o["metadata"]["annotations"]["bench.kcache.dev/seq"] = json!(seq.to_string());
    let v = sim.update("", resource, o).map_err(|e| e.to_string())?;
    rv_of(&v)
}

fn load_row(scenario: &str, case: &str, target: &str, r: &LoadResult, cores: Option<f64>) -> Row {
    let mut row = Row::new(scenario, case, target);
    row.set("req/s", r.rps())
        .set("p50 ms", ms(r.percentile(0.5)))
        .set("p99 ms", ms(r.percentile(0.99)))
        .set("MB/s", r.mb_per_s())
        .set("CPU cores", cores)
        .set("requests", r.ok)
        .set("errors", r.errors)
        .set("others CPU", r.others_cores.map(|o| o.0))
        .set("niced CPU", r.others_cores.map(|o| o.1));
    if let Some(e) = &r.first_error {
        row.note(format!("first error: {e}"));
    }
    note_disturbed(&mut row, r.others_cores.map(|o| o.0));
    row
}

/// The upstream columns of a row: requests and KB the upstream served per read.
fn set_upstream(row: &mut Row, requests: f64, bytes: f64, reads: u64) {
    let reads = reads.max(1) as f64;
    row.set("upstream req per read", requests / reads)
        .set("upstream KB per read", bytes / reads / 1e3);
}

/// The upstream columns of a row that loads the upstream itself: each read is one request
/// of `body_bytes`.
fn set_upstream_direct(row: &mut Row, body_bytes: usize) {
    row.set("upstream req per read", 1.0)
        .set("upstream KB per read", body_bytes as f64 / 1e3);
}

/// Other processes' CPU above which a measurement is flagged as disturbed.
const DISTURBED: f64 = 0.15;

fn note_disturbed(row: &mut Row, others: Option<f64>) {
    if let Some(o) = others.filter(|&o| o > DISTURBED) {
        row.note(format!(
            "disturbed: other processes used {} cores",
            fmt_num(o)
        ));
    }
}

/// The notes of a row whose answers `checker` checked: answers it could not read, stale
/// answers (the first one described), and whether the target ran in the bench process.
fn note_checked(
    row: &mut Row,
    checker: &staleness::Checker,
    unreadable: u64,
    stale: u64,
    in_process: bool,
) {
    if unreadable > 0 {
        row.note(format!("{unreadable} answers were not readable"));
    }
    if in_process {
        row.note("in the bench process");
    }
    if stale > 0 {
        if let Some(first) = checker.first_stale_answer() {
            row.note(format!("first stale answer: {first}"));
        }
    }
}

fn missing_row(scenario: &str, case: &str, target: &str, why: &str) -> Row {
    let mut row = Row::new(scenario, case, target);
    row.note(why);
    row
}

struct Bench {
    exe: PathBuf,
    nginx: Result<PathBuf, String>,
    scale: Scale,
    report: Report,
    fd_limit: u64,
    seq: AtomicU64,
    /// `--nodes`: the `fleet` cluster's size, overriding the scale's.
    nodes: Option<usize>,
}

/// Run the benchmark and print its tables (and write the JSON).
pub async fn run(opts: Options) -> Result<(), String> {
    let scenarios: Vec<String> = if opts.scenarios.is_empty() {
        SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else {
        opts.scenarios.clone()
    };
    if let Some(bad) = scenarios.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
        return Err(format!(
            "unknown scenario {bad:?}; known: {}",
            SCENARIOS.join(",")
        ));
    }
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let mut report = Report {
        machine: machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        ..Report::default()
    };
    // Another kcache build as the target (e.g. an older one, for a before/after comparison);
    // it must take the same `serve` options and configuration.
    let exe = match std::env::var_os("KCACHE_BENCH_TARGET_EXE") {
        Some(other) => {
            let other = PathBuf::from(other);
            report.notes.push(format!(
                "kcache under test: {} (KCACHE_BENCH_TARGET_EXE), not the bench's own build",
                other.display()
            ));
            other
        }
        None => exe,
    };
    if cfg!(debug_assertions) {
        let msg = "built without optimisations (debug): numbers are not representative; use `cargo run --release -- bench`";
        progress(msg);
        report.notes.push(msg.into());
    }
    let nginx = match nginx::find() {
        Some(p) => Ok(p),
        None if opts.install_nginx => {
            progress("nginx not found; apt-get install -y nginx-light");
            nginx::install()
        }
        None => Err(
            "nginx not installed (pass --install-nginx, or apt-get install -y nginx-light)"
                .to_string(),
        ),
    };
    if let Err(e) = &nginx {
        report.notes.push(e.clone());
    }
    report.notes.push(
        "CPU columns are cores used on average while measuring (1.0 = one core busy all the time); \
         `others CPU` is what processes other than the bench and its targets used meanwhile \
         (other users of the machine; rows above 0.15 are marked disturbed), `niced CPU` what \
         other lower-priority processes (background builds at nice 19) used; kcache's own \
         background threads (nice 10) count in its `CPU cores`"
            .into(),
    );
    let fd_limit = procstat::open_files_limit().unwrap_or(1024);
    report
        .notes
        .push(format!("open files limit (ulimit -n): {fd_limit}"));
    let mut bench = Bench {
        exe,
        nginx,
        scale: if opts.quick {
            Scale::quick()
        } else {
            Scale::full()
        },
        report,
        fd_limit,
        seq: AtomicU64::new(1),
        nodes: opts.nodes,
    };
    let started = Instant::now();
    let mut stop = StopSignals::new().map_err(|e| format!("watching for signals: {e}"))?;
    let mut interrupted = None;
    for s in SCENARIOS
        .iter()
        .filter(|s| scenarios.iter().any(|x| x == *s))
    {
        let t = Instant::now();
        progress(format!("scenario {s}"));
        // A signal ends the scenario by dropping it, and with it its kcache children (killed
        // on drop) and nginx; the report so far is still printed.
        let result = tokio::select! {
            r = bench.scenario(s) => r,
            signal = stop.recv() => {
                interrupted = Some(signal);
                Err(format!("interrupted by {signal}"))
            }
        };
        if let Err(e) = result {
            progress(format!("scenario {s} failed: {e}"));
            bench.report.notes.push(format!("scenario {s} failed: {e}"));
        }
        progress(format!(
            "scenario {s} took {:.0} s",
            t.elapsed().as_secs_f64()
        ));
        if interrupted.is_some() {
            break;
        }
    }
    bench.report.notes.push(format!(
        "total time {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    publish(&bench.report, opts.json.as_deref())?;
    match interrupted {
        Some(signal) => Err(format!("interrupted by {signal}")),
        None => Ok(()),
    }
}

/// The signals that stop a bench run: Ctrl-C, `kill`, a closed terminal.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn new() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next one to arrive, by name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}

impl Bench {
    /// Run one scenario by name (one of [`SCENARIOS`]).
    async fn scenario(&mut self, s: &str) -> Result<(), String> {
        match s {
            "list" => self.list().await,
            "get" => self.get().await,
            "consistent" => self.consistent().await,
            "fresh" => self.fresh().await,
            "interactive" => self.interactive().await,
            "forward" => self.forward().await,
            "crd" => self.crd().await,
            "auto" => self.auto().await,
            "https" => self.https().await,
            "watch" => self.watch().await,
            "node" => self.node().await,
            "memory" => self.memory().await,
            "protobuf" => self.protobuf().await,
            "warm" => self.warm().await,
            "relist" => self.relist().await,
            "audit" => self.audit().await,
            "fleet" => self.fleet().await,
            _ => self.stalled().await,
        }
    }
}

/// The whole report as Markdown: machine, notes, tables, targets.
/// Print a report's tables, and write it as JSON to `json` if given.
fn publish(report: &Report, json: Option<&std::path::Path>) -> Result<(), String> {
    println!("{}", render(report));
    if let Some(path) = json {
        std::fs::write(path, report.json()).map_err(|e| format!("{}: {e}", path.display()))?;
        progress(format!("JSON written to {}", path.display()));
    }
    Ok(())
}

pub fn render(report: &Report) -> String {
    let mut out = String::from("## kcache benchmark\n\n");
    for (k, v) in &report.machine {
        out.push_str(&format!(
            "- {k}: {}\n",
            v.as_str().map_or(v.to_string(), str::to_string)
        ));
    }
    out.push_str(&format!("- command: `{}`\n", report.command));
    for n in &report.notes {
        out.push_str(&format!("- {n}\n"));
    }
    out.push('\n');
    out.push_str(&report.markdown());
    out
}

/// nproc, CPU model, memory, kernel, rustc, load average.
fn machine() -> serde_json::Map<String, Value> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or("unknown".to_string(), |s| s.trim().to_string());
    let mem_kb: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or("unknown".to_string(), |s| s.trim().to_string());
    let mut m = serde_json::Map::new();
    m.insert(
        "nproc".into(),
        json!(std::thread::available_parallelism().map_or(0, |n| n.get())),
    );
    m.insert("cpu".into(), json!(model));
    m.insert(
        "memory".into(),
        json!(format!("{:.1} GiB", mem_kb as f64 / 1024.0 / 1024.0)),
    );
    m.insert(
        "kernel".into(),
        json!(read("/proc/sys/kernel/osrelease").trim()),
    );
    m.insert("rustc".into(), json!(rustc));
    m.insert(
        "load average at start".into(),
        json!(read("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")),
    );
    m
}

impl Bench {
    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The set-up most scenarios share: a sim with `n` ConfigMaps in 10 namespaces (`seed`
    /// picks their contents) and a kcache caching them. Returns the ConfigMaps as created.
    async fn configmaps_behind_kcache(
        &self,
        n: usize,
        seed: u64,
    ) -> Result<(Sim, Vec<Value>, KcacheChild), String> {
        let sim = start_sim().await?;
        let objects = seed::configmaps(n, 10, seed);
        let cms: Vec<Value> = objects
            .iter()
            .filter(|o| o.resource == "configmaps")
            .map(|o| o.object.clone())
            .collect();
        seed_sim(&sim, objects)?;
        let k = self
            .kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS]))
            .await?;
        Ok((sim, cms, k))
    }

    async fn kcache(&self, upstream: &Sim, config: &ChildConfig) -> Result<KcacheChild, String> {
        KcacheChild::start(&self.exe, &upstream.url(), config, Duration::from_secs(600)).await
    }

    /// Load one target for the phase duration; with `pid`, also that process's CPU.
    async fn measure(
        &self,
        addr: std::net::SocketAddr,
        path: &str,
        pid: Option<u32>,
        on_response: Option<load::OnResponse>,
    ) -> (LoadResult, Option<f64>) {
        let pids: Vec<u32> = pid.into_iter().collect();
        self.measure_pids(addr, path, &pids, on_response, None)
            .await
    }

    /// Load a kcache child for the phase duration: the result, its CPU, and what it cost the
    /// upstream meanwhile by its own count (None when its metrics could not be read).
    async fn measure_kcache(
        &self,
        k: &KcacheChild,
        path: &str,
    ) -> (LoadResult, Option<f64>, Option<kcache::UpstreamCost>) {
        let before = k.upstream_cost().await.ok();
        let (r, cpu) = self.measure(k.addr, path, Some(k.pid()), None).await;
        let after = k.upstream_cost().await.ok();
        let cost = before.zip(after).map(|(b, a)| a - b);
        (r, cpu, cost)
    }

    /// Load one target for the phase duration, with the CPU used by `pids` (if any).
    async fn measure_pids(
        &self,
        addr: std::net::SocketAddr,
        path: &str,
        pids: &[u32],
        on_response: Option<load::OnResponse>,
        authorization: Option<http::HeaderValue>,
    ) -> (LoadResult, Option<f64>) {
        let mut target = load::Target::plain(addr);
        target.authorization = authorization;
        self.measure_on(&target, path, pids, on_response).await
    }

    /// Load any target (HTTPS, credentials) for the phase duration, with the CPU used by
    /// `pids` (if any).
    async fn measure_on(
        &self,
        target: &load::Target,
        path: &str,
        pids: &[u32],
        on_response: Option<load::OnResponse>,
    ) -> (LoadResult, Option<f64>) {
        let mut spec = LoadSpec::to(target, path, CLIENTS, self.scale.phase);
        spec.on_response = on_response;
        self.measure_spec(spec, pids).await
    }

    /// Run one load, with the CPU used by `pids` (if any).
    async fn measure_spec(&self, spec: LoadSpec, pids: &[u32]) -> (LoadResult, Option<f64>) {
        let cpu = (!pids.is_empty()).then(|| CpuMeter::start_all(pids));
        let others = OthersMeter::start(pids);
        let mut r = load::run(spec).await;
        let used = cpu.as_ref().map(|c| c.used());
        r.others_cores = Some(others.cores(used.map_or(0.0, |u| u.0)));
        (r, used.map(|(c, w)| if w > 0.0 { c / w } else { 0.0 }))
    }

    /// nginx serving `bytes` as a static file, as the targets configure it (one process) and
    /// with a master and two workers, and with `copying` also a master and two workers with
    /// `sendfile off` (not a candidate for `best`: see [`nginx::Sending::Copying`]).
    async fn nginx_rows(
        &self,
        scenario: &str,
        case: &str,
        name: &str,
        bytes: &[u8],
        copying: bool,
    ) -> NginxRows {
        let mut modes = vec![
            (
                nginx::Mode::Single,
                nginx::Sending::Sendfile,
                "nginx, 1 process (master_process off)",
            ),
            (
                nginx::Mode::Workers(2),
                nginx::Sending::Sendfile,
                "nginx, master + 2 workers",
            ),
        ];
        if copying {
            modes.push((
                nginx::Mode::Workers(2),
                nginx::Sending::Copying,
                "nginx, master + 2 workers, sendfile off",
            ));
        }
        let mut out = NginxRows::default();
        for (mode, sending, label) in modes {
            progress(format!("{scenario} {case}: {label}"));
            match self.nginx_serving(mode, sending, name, bytes).await {
                Ok((n, path)) => {
                    let (r, cpu) = self
                        .measure_pids(n.addr, &path, &n.pids(), None, None)
                        .await;
                    match sending {
                        nginx::Sending::Sendfile => {
                            out.best = Some(out.best.map_or(r.rps(), |b| b.max(r.rps())))
                        }
                        nginx::Sending::Copying => out.copying = Some(r.rps()),
                    }
                    out.rows.push(load_row(scenario, case, label, &r, cpu));
                }
                Err(e) => out.rows.push(missing_row(scenario, case, label, &e)),
            }
        }
        out
    }

    /// nginx serving `bytes` at some path, or why not.
    async fn nginx_serving(
        &self,
        mode: nginx::Mode,
        sending: nginx::Sending,
        name: &str,
        bytes: &[u8],
    ) -> Result<(nginx::Nginx, String), String> {
        let bin = self.nginx.as_ref().map_err(|e| e.clone())?;
        let n = nginx::Nginx::start_sending(bin, mode, sending).await?;
        let path = n.put(name, bytes)?;
        let (status, got) = load::fetch(n.addr, &path, Duration::from_secs(60)).await?;
        if status != 200 || got.len() != bytes.len() {
            return Err(format!("nginx answered {status} with {} bytes", got.len()));
        }
        Ok((n, path))
    }

    /// Nodes of the `fleet` cluster: `--nodes`, else the scale's.
    fn fleet_nodes(&self) -> usize {
        self.nodes.unwrap_or(self.scale.fleet_nodes).max(1)
    }

    /// How many connections the bench may open with both of their ends in its own process
    /// (the floors): half what the open-files limit leaves.
    fn fd_limit_for_pairs(&self) -> usize {
        self.fd_limit.saturating_sub(FD_RESERVE) as usize / 2
    }

    /// Watchers beyond the open-files limit are not opened (noted).
    fn cap_watchers(&mut self, wanted: usize, what: &str) -> usize {
        let allowed = self.fd_limit.saturating_sub(FD_RESERVE) as usize;
        if wanted > allowed {
            self.report.notes.push(format!(
                "{what}: {wanted} watchers need more open files than `ulimit -n` {} allows; scaled down to {allowed}",
                self.fd_limit
            ));
            allowed
        } else {
            wanted
        }
    }
}
