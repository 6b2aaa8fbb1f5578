//! `kcache bench`: kcache measured side by side with nginx serving the same bytes and with the
//! simulated apiserver it caches, in one run.
//!
//! The bench process runs the simulated apiserver in-process and the load generators; kcache
//! runs as a child process (`kcache serve`, see [`kcache`]) so its CPU time and memory are its
//! own. Scenarios (each with its own sim and kcache):
//!
//! - `list`: LIST all (RV=0) of N ConfigMaps: kcache vs nginx vs the sim;
//! - `get`: GET by name, RV=0 and RV unset: kcache vs nginx vs the sim;
//! - `consistent`: LIST of one namespace with RV unset under writes, with the staleness check:
//!   kcache answering from its cache vs kcache forwarding to the sim (and the sim itself);
//! - `watch`: watch fan-out over HTTP/1.1 and HTTP/2: delivery delays and kcache's CPU;
//! - `node`: node-scoped pod watchers (field selector): CPU per upstream event;
//! - `memory`: kcache's RSS per cached JSON byte;
//! - `stalled`: watchers that never read, during a fan-out.

pub mod kcache;
pub mod load;
pub mod nginx;
pub mod procstat;
pub mod report;
pub mod staleness;
pub mod watchers;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::sim::seed::{self, SeedObject};
use crate::sim::{Sim, SimConfig};
use kcache::{ChildConfig, KcacheChild};
use load::{LoadResult, LoadSpec};
use procstat::{CpuMeter, OthersMeter, RssPeak};
use report::{fmt_num, Report, Row};
use watchers::{Delivery, Proto};

/// Scenario names, in the order they run.
pub const SCENARIOS: &[&str] = &[
    "list",
    "get",
    "consistent",
    "watch",
    "node",
    "memory",
    "stalled",
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
}

const CONFIGMAPS: (&str, &str, &str) = ("", "v1", "configmaps");
const PODS: (&str, &str, &str) = ("", "v1", "pods");
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
    watch_objects: usize,
    watch_cases: Vec<(Proto, usize)>,
    watch_rate: f64,
    watch_secs: f64,
    node_watchers: usize,
    node_pods: usize,
    node_rate: f64,
    node_secs: f64,
    memory_objects: usize,
    stalled: usize,
    /// Objects in the stalled scenario: their list is what each stalled watcher asks for, which
    /// should exceed what the kernel buffers per connection (4 MB by default) so that kcache
    /// has to hold back the rest itself.
    stalled_objects: usize,
    stalled_fanout: usize,
    stalled_secs: f64,
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
            watch_objects: 1_000,
            watch_cases: vec![
                (Proto::H1, 1_000),
                (Proto::H1, 10_000),
                (Proto::H2 { connections: 10 }, 10_000),
            ],
            watch_rate: 10.0,
            watch_secs: 20.0,
            node_watchers: 5_000,
            node_pods: 20_000,
            node_rate: 100.0,
            node_secs: 20.0,
            memory_objects: 100_000,
            stalled: 100,
            stalled_objects: 5_000,
            stalled_fanout: 1_000,
            stalled_secs: 15.0,
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
            watch_objects: 200,
            watch_cases: vec![
                (Proto::H1, 100),
                (Proto::H1, 500),
                (Proto::H2 { connections: 2 }, 500),
            ],
            watch_rate: 10.0,
            watch_secs: 4.0,
            node_watchers: 200,
            node_pods: 800,
            node_rate: 100.0,
            node_secs: 4.0,
            memory_objects: 5_000,
            stalled: 10,
            stalled_objects: 1_000,
            stalled_fanout: 100,
            stalled_secs: 3.0,
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
    crate::demo::seed_sim(sim, objects)
}

async fn start_sim() -> Result<Sim, String> {
    Sim::start(SimConfig::default())
        .await
        .map_err(|e| format!("starting the sim: {e}"))
}

/// The resourceVersion of a (cheap, one-item) list, from which watches start.
pub async fn list_rv(addr: std::net::SocketAddr, collection: &str) -> Result<u64, String> {
    #[derive(Deserialize)]
    struct Head {
        metadata: Meta,
    }
    #[derive(Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: String,
    }
    let (status, body) = load::fetch(
        addr,
        &format!("{collection}?limit=1"),
        Duration::from_secs(30),
    )
    .await?;
    if status != 200 {
        return Err(format!("list of {collection}: status {status}"));
    }
    let head: Head =
        serde_json::from_slice(&body).map_err(|e| format!("list of {collection}: {e}"))?;
    head.metadata
        .resource_version
        .parse()
        .map_err(|_| format!("list of {collection}: resourceVersion"))
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

fn missing_row(scenario: &str, case: &str, target: &str, why: &str) -> Row {
    let mut row = Row::new(scenario, case, target);
    row.note(why);
    row
}

/// What one fan-out run measured.
struct FanRun {
    opened: usize,
    failed: usize,
    first_error: Option<String>,
    open_secs: f64,
    writes: u64,
    write_errors: u64,
    delivery: Delivery,
    cpu_seconds: f64,
    cores: f64,
    /// CPU of the bench process (watchers, writer, sim) over the same interval.
    bench_cores: f64,
    /// CPU of everything else on the machine over the same interval (normal, lower priority).
    others_cores: (f64, f64),
    rss_peak: u64,
}

/// Samples a process's RSS every 200 ms until stopped; returns the peak.
struct RssSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let mut peak = RssPeak::default();
            // Bounded: at most an hour of samples.
            for _ in 0..18_000 {
                peak.sample(pid);
                if s.load(Ordering::Relaxed) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            peak.peak
        });
        RssSampler { stop, task }
    }

    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(0)
    }
}

struct Bench {
    exe: PathBuf,
    nginx: Result<PathBuf, String>,
    scale: Scale,
    report: Report,
    fd_limit: u64,
    seq: AtomicU64,
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
         lower-priority processes (background builds at nice 19) used"
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
    };
    let started = Instant::now();
    for s in SCENARIOS
        .iter()
        .filter(|s| scenarios.iter().any(|x| x == *s))
    {
        let t = Instant::now();
        progress(format!("scenario {s}"));
        let result = match *s {
            "list" => bench.list().await,
            "get" => bench.get().await,
            "consistent" => bench.consistent().await,
            "watch" => bench.watch().await,
            "node" => bench.node().await,
            "memory" => bench.memory().await,
            _ => bench.stalled().await,
        };
        if let Err(e) = result {
            progress(format!("scenario {s} failed: {e}"));
            bench.report.notes.push(format!("scenario {s} failed: {e}"));
        }
        progress(format!(
            "scenario {s} took {:.0} s",
            t.elapsed().as_secs_f64()
        ));
    }
    bench.report.notes.push(format!(
        "total time {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    let report = bench.report;
    println!("{}", render(&report));
    if let Some(path) = &opts.json {
        std::fs::write(path, report.json()).map_err(|e| format!("{}: {e}", path.display()))?;
        progress(format!("JSON written to {}", path.display()));
    }
    Ok(())
}

/// The whole report as Markdown: machine, notes, tables, targets.
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
        self.measure_pids(addr, path, &pids, on_response).await
    }

    /// Load one target for the phase duration, with the CPU used by `pids` (if any).
    async fn measure_pids(
        &self,
        addr: std::net::SocketAddr,
        path: &str,
        pids: &[u32],
        on_response: Option<load::OnResponse>,
    ) -> (LoadResult, Option<f64>) {
        let mut spec = LoadSpec::new(addr, path, CLIENTS, self.scale.phase);
        spec.on_response = on_response;
        let cpu = (!pids.is_empty()).then(|| CpuMeter::start_all(pids));
        let others = OthersMeter::start();
        let mut r = load::run(spec).await;
        let used = cpu.as_ref().map(|c| c.used());
        r.others_cores = Some(others.cores(used.map_or(0.0, |u| u.0)));
        (r, used.map(|(c, w)| if w > 0.0 { c / w } else { 0.0 }))
    }

    /// nginx serving `bytes` as a static file, as the issue configures it (one process) and
    /// with a master and two workers: their rows, and the better req/s (None without nginx).
    async fn nginx_rows(
        &self,
        scenario: &str,
        case: &str,
        name: &str,
        bytes: &[u8],
    ) -> (Vec<Row>, Option<f64>) {
        let modes = [
            (nginx::Mode::Single, "nginx, 1 process (master_process off)"),
            (nginx::Mode::Workers(2), "nginx, master + 2 workers"),
        ];
        let mut rows = Vec::new();
        let mut best: Option<f64> = None;
        for (mode, label) in modes {
            progress(format!("{scenario} {case}: {label}"));
            match self.nginx_serving(mode, name, bytes).await {
                Ok((n, path)) => {
                    let (r, cpu) = self.measure_pids(n.addr, &path, &n.pids(), None).await;
                    best = Some(best.map_or(r.rps(), |b| b.max(r.rps())));
                    rows.push(load_row(scenario, case, label, &r, cpu));
                }
                Err(e) => rows.push(missing_row(scenario, case, label, &e)),
            }
        }
        (rows, best)
    }

    /// nginx serving `bytes` at some path, or why not.
    async fn nginx_serving(
        &self,
        mode: nginx::Mode,
        name: &str,
        bytes: &[u8],
    ) -> Result<(nginx::Nginx, String), String> {
        let bin = self.nginx.as_ref().map_err(|e| e.clone())?;
        let n = nginx::Nginx::start_mode(bin, mode).await?;
        let path = n.put(name, bytes)?;
        let (status, got) = load::fetch(n.addr, &path, Duration::from_secs(60)).await?;
        if status != 200 || got.len() != bytes.len() {
            return Err(format!("nginx answered {status} with {} bytes", got.len()));
        }
        Ok((n, path))
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

    // ------------------------------------------------------------------------------------
    // LIST all
    // ------------------------------------------------------------------------------------

    async fn list(&mut self) -> Result<(), String> {
        const S: &str = "LIST all (RV=0), 8 clients";
        for n in self.scale.list_sizes.clone() {
            let case = format!("N={}", count_label(n));
            progress(format!("list {case}: seeding the sim"));
            let sim = start_sim().await?;
            seed_sim(&sim, seed::configmaps(n, 10, 1))?;
            let k = self
                .kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS]))
                .await?;
            let path = "/api/v1/configmaps?resourceVersion=0";
            let (status, body) = load::fetch(k.addr, path, Duration::from_secs(120)).await?;
            if status != 200 {
                return Err(format!("kcache LIST answered {status}"));
            }
            let size = format!("{:.1} MB per list", mb(body.len() as u64));
            progress(format!("list {case}: kcache ({size})"));
            let (kc, kc_cpu) = self.measure(k.addr, path, Some(k.pid()), None).await;
            let (nginx_rows, nginx_best) = self.nginx_rows(S, &case, "list.json", &body).await;
            drop(body);
            progress(format!("list {case}: sim"));
            let (sm, _) = self.measure(sim.addr(), path, None, None).await;

            let mut row = load_row(S, &case, "kcache", &kc, kc_cpu);
            row.note(&size);
            let ratio = nginx_best.map(|b| kc.rps() / b);
            if let Some(r) = ratio {
                row.ratio("kcache/best nginx", r);
            }
            row.ratio("kcache/sim", kc.rps() / sm.rps());
            self.report.push(row);
            for r in nginx_rows {
                self.report.push(r);
            }
            let mut row = load_row(S, &case, "sim (upstream)", &sm, None);
            row.note("in the bench process");
            self.report.push(row);
            self.report.check(
                &format!(
                    "LIST all RV=0, N={}: kcache ≥ 50% of nginx req/s",
                    count_label(n)
                ),
                "≥ 0.50 (vs the better nginx)",
                ratio.map_or("nginx missing".into(), |r| format!("{}×", fmt_num(r))),
                ratio.map(|r| r >= 0.5),
            );
            drop(k);
            sim.shutdown().await;
        }
        Ok(())
    }

    // ------------------------------------------------------------------------------------
    // GET by name
    // ------------------------------------------------------------------------------------

    async fn get(&mut self) -> Result<(), String> {
        const S: &str = "GET by name, 8 clients";
        let n = self.scale.get_objects;
        progress(format!("get: seeding {n} ConfigMaps"));
        let sim = start_sim().await?;
        seed_sim(&sim, seed::configmaps(n, 10, 2))?;
        let k = self
            .kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS]))
            .await?;
        let object = "/api/v1/namespaces/bench-1/configmaps/cm-000001";
        let rv0 = format!("{object}?resourceVersion=0");
        let (status, body) = load::fetch(k.addr, &rv0, Duration::from_secs(10)).await?;
        if status != 200 {
            return Err(format!("kcache GET answered {status}"));
        }
        let case = format!("{} B object", body.len());
        let (nginx_rows, nginx_best) = self.nginx_rows(S, &case, "object.json", &body).await;
        for (label, path) in [("RV=0", rv0.as_str()), ("RV unset (consistent)", object)] {
            progress(format!("get: kcache {label}"));
            let upstream_before = upstream_requests(&sim);
            let (kc, cpu) = self.measure(k.addr, path, Some(k.pid()), None).await;
            let upstream = upstream_requests(&sim) - upstream_before;
            let mut row = load_row(S, &case, &format!("kcache {label}"), &kc, cpu);
            row.set(
                "upstream req per read",
                upstream as f64 / kc.ok.max(1) as f64,
            );
            let ratio = nginx_best.map(|b| kc.rps() / b);
            if let Some(r) = ratio {
                row.ratio("kcache/best nginx", r);
            }
            self.report.push(row);
            self.report.check(
                &format!("GET {label}: kcache ≥ 50% of nginx req/s"),
                "≥ 0.50 (vs the better nginx)",
                ratio.map_or("nginx missing".into(), |r| format!("{}×", fmt_num(r))),
                ratio.map(|r| r >= 0.5),
            );
        }
        for r in nginx_rows {
            self.report.push(r);
        }
        progress("get: sim");
        let (sm, _) = self.measure(sim.addr(), object, None, None).await;
        let mut row = load_row(S, &case, "sim (upstream), RV unset", &sm, None);
        row.note("in the bench process");
        self.report.push(row);
        drop(k);
        sim.shutdown().await;
        Ok(())
    }

    // ------------------------------------------------------------------------------------
    // Consistent LIST under writes
    // ------------------------------------------------------------------------------------

    async fn consistent(&mut self) -> Result<(), String> {
        const S: &str = "Consistent LIST (RV unset) of one namespace under writes, 8 clients";
        let n = self.scale.consistent_objects;
        let spread = self.scale.consistent_namespaces;
        progress(format!(
            "consistent: seeding {n} ConfigMaps in {spread} namespaces"
        ));
        let sim = start_sim().await?;
        let objects = seed::configmaps(n, spread, 3);
        let in_ns: Arc<Vec<Value>> = Arc::new(
            objects
                .iter()
                .filter(|o| o.resource == "configmaps" && o.namespace() == Some("bench-1"))
                .map(|o| o.object.clone())
                .collect(),
        );
        seed_sim(&sim, objects)?;
        let rate = self.scale.writes_per_s;
        let case = format!("{} objects, {} writes/s", in_ns.len(), fmt_num(rate));
        let path = "/api/v1/namespaces/bench-1/configmaps";
        let mut forwarding_rps = None;
        let mut cache_result = None;
        for target in ["kcache", "kcache forwarding to the sim", "sim (upstream)"] {
            progress(format!("consistent: {target}"));
            let child = match target {
                "kcache" => Some(
                    self.kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS]))
                        .await?,
                ),
                "sim (upstream)" => None,
                _ => {
                    let mut c = ChildConfig::caching(&[CONFIGMAPS]);
                    c.forward_consistent = true;
                    Some(self.kcache(&sim, &c).await?)
                }
            };
            let addr = child.as_ref().map_or(sim.addr(), |c| c.addr);
            let checker = Arc::new(staleness::Checker::default());
            let writes = (rate * self.scale.phase.as_secs_f64()).ceil() as u64;
            let writer = {
                let sim = sim.clone();
                let checker = checker.clone();
                let objs = in_ns.clone();
                let first = self.seq.fetch_add(writes, Ordering::Relaxed);
                tokio::spawn(async move {
                    let start = tokio::time::Instant::now();
                    let mut failed = 0u64;
                    for i in 0..writes {
                        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate))
                            .await;
                        let o = &objs[(i as usize) % objs.len()];
                        match bump(&sim, "configmaps", o, first + i) {
                            Ok(rv) => checker
                                .acks
                                .record(o["metadata"]["name"].as_str().unwrap_or(""), rv),
                            Err(_) => failed += 1,
                        }
                    }
                    failed
                })
            };
            let cb = checker.clone();
            let on_response: load::OnResponse =
                Arc::new(move |sent, status, body| cb.check(sent, status, body));
            let upstream_before = upstream_requests(&sim);
            let (r, cpu) = self
                .measure(
                    addr,
                    path,
                    child.as_ref().map(|c| c.pid()),
                    Some(on_response),
                )
                .await;
            let write_failures = writer.await.unwrap_or(writes);
            let upstream = upstream_requests(&sim) - upstream_before;
            let stale = checker.stale_reads.load(Ordering::Relaxed);
            let reads = checker.reads.load(Ordering::Relaxed);
            let unreadable = checker.unreadable.load(Ordering::Relaxed);
            let mut row = load_row(S, &case, target, &r, cpu);
            row.set(
                "upstream req per read",
                upstream as f64 / r.ok.max(1) as f64,
            )
            .set("reads checked", reads)
            .set("stale reads", stale)
            .set("writes acked", checker.acks.len() as u64);
            if unreadable > 0 {
                row.note(format!("{unreadable} answers were not a readable list"));
            }
            let mismatches = checker.scan_mismatches.load(Ordering::Relaxed);
            if mismatches > 0 {
                row.note(format!(
                    "{mismatches} answers scanned differently than parsed"
                ));
            }
            if write_failures > 0 {
                row.note(format!("{write_failures} writes failed"));
            }
            if let Some(first) = checker
                .first_stale
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                row.note(format!("first stale answer: {first}"));
            }
            if target == "sim (upstream)" {
                row.note("in the bench process");
            }
            match target {
                "kcache" => cache_result = Some((r.rps(), stale, reads, unreadable)),
                "sim (upstream)" => {}
                _ => forwarding_rps = Some(r.rps()),
            }
            self.report.push(row);
            drop(child);
        }
        // The kcache row gets the ratio to forwarding.
        if let (Some((rps, stale, reads, unreadable)), Some(fwd)) = (cache_result, forwarding_rps) {
            let ratio = rps / fwd;
            if let Some(row) = self
                .report
                .rows
                .iter_mut()
                .find(|r| r.scenario == S && r.target == "kcache")
            {
                row.ratio("kcache/forwarding", ratio);
            }
            self.report.check(
                "Consistent LIST: never stale",
                "0 stale reads",
                format!("{stale} stale of {reads} reads checked ({unreadable} unreadable)"),
                Some(stale == 0 && reads > 0 && unreadable == 0),
            );
            self.report.check(
                "Consistent LIST: ≥ 5× the throughput of forwarding to the sim",
                "≥ 5.0",
                format!("{}×", fmt_num(ratio)),
                Some(ratio >= 5.0),
            );
        }
        sim.shutdown().await;
        Ok(())
    }

    // ------------------------------------------------------------------------------------
    // Watch fan-out
    // ------------------------------------------------------------------------------------

    /// Open `watches` on `addr`, write at `rate` for `secs` with `write`, wait for the tail,
    /// and measure delivery and the CPU of `pid` while writing.
    #[allow(clippy::too_many_arguments)]
    async fn fan_run<F>(
        &self,
        pid: u32,
        addr: std::net::SocketAddr,
        proto: Proto,
        watches: Vec<(Option<usize>, String)>,
        rate: f64,
        secs: f64,
        write: F,
    ) -> FanRun
    where
        F: FnMut(u64) -> Result<(u64, usize), String>,
    {
        let sampler = RssSampler::start(pid);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let t = Instant::now();
        // The hard bound on every watcher, whatever happens.
        let until = t + Duration::from_secs(300) + Duration::from_secs_f64(secs);
        let fan = watchers::open(addr, proto, watches, stop_rx, until, OPEN_PARALLEL).await;
        let open_secs = t.elapsed().as_secs_f64();
        let (opened, failed, first_error) = (fan.tasks.len(), fan.failed, fan.first_error.clone());
        // Let the server finish setting up before the clock starts.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let cpu = CpuMeter::start(pid);
        let own_cpu = CpuMeter::start(std::process::id());
        let others = OthersMeter::start();
        let log = watchers::write_at_rate(rate, (rate * secs).round() as u64, write).await;
        let (cpu_seconds, wall) = cpu.used();
        let bench_cores = own_cpu.cores();
        let others_cores = others.cores(cpu_seconds);
        // The last writes' deliveries: until all arrived, 5 s at most.
        fan.wait_for_events(fan.expected(&log), Duration::from_secs(5))
            .await;
        let _ = stop_tx.send(true);
        let received = fan.finish().await;
        let rss_peak = sampler.finish().await;
        let delivery = watchers::delivery(&log, &received);
        FanRun {
            opened,
            failed,
            first_error,
            open_secs,
            writes: log.writes.len() as u64,
            write_errors: log.failed,
            delivery,
            cpu_seconds,
            cores: if wall > 0.0 { cpu_seconds / wall } else { 0.0 },
            bench_cores,
            others_cores,
            rss_peak,
        }
    }

    fn fan_row(scenario: &str, case: &str, target: &str, f: &FanRun) -> Row {
        let d = &f.delivery;
        let mut row = Row::new(scenario, case, target);
        row.set("watchers", f.opened as u64)
            .set("writes", f.writes)
            .set("delivered", format!("{}/{}", d.delivered, d.expected))
            .set("p50 ms", ms(d.percentile(0.5)))
            .set("p99 ms", ms(d.percentile(0.99)))
            .set("max ms", ms(d.max()))
            .set("kcache CPU cores", f.cores)
            .set("bench CPU cores", f.bench_cores)
            .set("others CPU", f.others_cores.0)
            .set("niced CPU", f.others_cores.1)
            .set("open s", f.open_secs);
        if f.failed > 0 {
            row.note(format!(
                "{} watchers failed to open: {}",
                f.failed,
                f.first_error.as_deref().unwrap_or("?")
            ));
        }
        if d.ended_early > 0 {
            row.note(format!("{} streams ended early", d.ended_early));
        }
        if f.write_errors > 0 {
            row.note(format!("{} writes failed", f.write_errors));
        }
        note_disturbed(&mut row, Some(f.others_cores.0));
        row
    }

    async fn watch(&mut self) -> Result<(), String> {
        const S: &str = "WATCH fan-out (ConfigMaps, all namespaces)";
        let n = self.scale.watch_objects;
        let sim = start_sim().await?;
        let objects = seed::configmaps(n, 10, 4);
        let cms: Vec<Value> = objects
            .iter()
            .filter(|o| o.resource == "configmaps")
            .map(|o| o.object.clone())
            .collect();
        seed_sim(&sim, objects)?;
        let k = self
            .kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS]))
            .await?;
        let (rate, secs) = (self.scale.watch_rate, self.scale.watch_secs);
        for (proto, wanted) in self.scale.watch_cases.clone() {
            let count = match proto {
                Proto::H1 => self.cap_watchers(wanted, "watch"),
                Proto::H2 { .. } => wanted,
            };
            let proto_label = match proto {
                Proto::H1 => "HTTP/1.1, 1 conn each".to_string(),
                Proto::H2 { connections } => format!("HTTP/2 (h2c), {connections} conns"),
            };
            let case = format!(
                "{} watchers, {proto_label}, {} updates/s",
                count_label(count),
                fmt_num(rate)
            );
            progress(format!("watch: {case}"));
            let rv = list_rv(k.addr, "/api/v1/configmaps").await?;
            let path =
                format!("/api/v1/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=900");
            let watches = vec![(None, path); count];
            let f = self
                .fan_run(k.pid(), k.addr, proto, watches, rate, secs, |i| {
                    let o = &cms[(i as usize * 7) % cms.len()];
                    bump(&sim, "configmaps", o, self.next_seq()).map(|rv| (rv, 0))
                })
                .await;
            let mut row = Self::fan_row(S, &case, "kcache", &f);
            row.set("kcache RSS MB", mb(f.rss_peak));
            self.report.push(row);
            if count >= 1000
                && wanted
                    == self
                        .scale
                        .watch_cases
                        .iter()
                        .map(|c| c.1)
                        .max()
                        .unwrap_or(0)
            {
                let p99 = ms(f.delivery.percentile(0.99));
                let complete = f.delivery.missing() == 0 && f.failed == 0;
                self.report.check(
                    &format!("{} watchers ({proto_label}) at {} updates/s: p99 delivery ≤ 100 ms using < 1 core", count_label(count), fmt_num(rate)),
                    "p99 ≤ 100 ms, < 1.0 core, all delivered",
                    format!(
                        "p99 {} ms, {} cores, {}/{} delivered",
                        fmt_num(p99),
                        fmt_num(f.cores),
                        f.delivery.delivered,
                        f.delivery.expected
                    ),
                    Some(p99 <= 100.0 && f.cores < 1.0 && complete),
                );
            }
            // Let kcache notice the closed connections before the next case.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        drop(k);
        sim.shutdown().await;
        Ok(())
    }

    // ------------------------------------------------------------------------------------
    // Node-scoped pod watchers
    // ------------------------------------------------------------------------------------

    async fn node(&mut self) -> Result<(), String> {
        const S: &str = "Node-scoped pod watchers (fieldSelector=spec.nodeName)";
        let nodes = self.cap_watchers(self.scale.node_watchers, "node");
        let n = self.scale.node_pods;
        progress(format!("node: seeding {n} pods on {nodes} nodes"));
        let sim = start_sim().await?;
        let objects = seed::pods(n, nodes, 10, 5);
        let pods: Vec<(Value, usize)> = objects
            .iter()
            .filter(|o| o.resource == "pods")
            .filter_map(|o| {
                let node = o.object["spec"]["nodeName"].as_str()?;
                let i: usize = node.strip_prefix("node-")?.parse().ok()?;
                Some((o.object.clone(), i))
            })
            .collect();
        if pods.is_empty() {
            return Err("no scheduled pods in the seed".into());
        }
        seed_sim(&sim, objects)?;
        let k = self.kcache(&sim, &ChildConfig::caching(&[PODS])).await?;
        let rv = list_rv(k.addr, "/api/v1/pods").await?;
        let watches: Vec<(Option<usize>, String)> = (1..=nodes)
            .map(|i| {
                (
                    Some(i),
                    format!("/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=900&fieldSelector=spec.nodeName%3Dnode-{i}"),
                )
            })
            .collect();
        let (rate, secs) = (self.scale.node_rate, self.scale.node_secs);
        let case = format!(
            "{} watchers, {} pods, {} updates/s",
            count_label(nodes),
            count_label(pods.len()),
            fmt_num(rate)
        );
        progress(format!("node: {case}"));
        let f = self
            .fan_run(k.pid(), k.addr, Proto::H1, watches, rate, secs, |i| {
                // A stride that visits every pod (and so every node) in turn.
                let (o, node) = &pods[(i as usize * 7919) % pods.len()];
                bump(&sim, "pods", o, self.next_seq()).map(|rv| (rv, *node))
            })
            .await;
        let mut row = Self::fan_row(S, &case, "kcache", &f);
        let per_event = if f.writes > 0 {
            f.cpu_seconds / f.writes as f64 * 1e6
        } else {
            f64::NAN
        };
        row.set("CPU µs per upstream event", per_event);
        self.report.push(row);
        drop(k);
        sim.shutdown().await;
        Ok(())
    }

    // ------------------------------------------------------------------------------------
    // Memory
    // ------------------------------------------------------------------------------------

    async fn memory(&mut self) -> Result<(), String> {
        const S: &str = "Memory: kcache RSS per cached JSON byte";
        let n = self.scale.memory_objects;
        for kind in ["ConfigMaps (~1 KB)", "Pods (~4 KB, managedFields)"] {
            let (resource, objects) = if kind.starts_with("ConfigMaps") {
                (CONFIGMAPS, seed::configmaps(n, 10, 6))
            } else {
                (PODS, seed::pods(n, 1000, 10, 7))
            };
            let case = format!("{} {kind}", count_label(n));
            progress(format!("memory: {case}"));
            let sim = start_sim().await?;
            let config = ChildConfig::caching(&[resource]);
            let empty = {
                let k = self.kcache(&sim, &config).await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
                procstat::rss_bytes(k.pid()).unwrap_or(0)
            };
            let t = Instant::now();
            seed_sim(&sim, objects)?;
            progress(format!(
                "memory: seeded in {:.0} s",
                t.elapsed().as_secs_f64()
            ));
            let t = Instant::now();
            let k = self.kcache(&sim, &config).await?;
            let sync_secs = t.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs(2)).await;
            let full = procstat::rss_bytes(k.pid()).unwrap_or(0);
            let collection = format!("/api/v1/{}?resourceVersion=0", resource.2);
            let (status, body) = load::fetch(k.addr, &collection, Duration::from_secs(300)).await?;
            if status != 200 {
                return Err(format!("kcache LIST answered {status}"));
            }
            let (json_bytes, count) = item_bytes(&body)?;
            drop(body);
            let growth = full.saturating_sub(empty);
            let ratio = growth as f64 / json_bytes.max(1) as f64;
            let mut row = Row::new(S, &case, "kcache");
            row.set("objects", count as u64)
                .set("JSON MB", mb(json_bytes))
                .set("avg object B", json_bytes as f64 / count.max(1) as f64)
                .set("RSS empty MB", mb(empty))
                .set("RSS synced MB", mb(full))
                .set("RSS B per object", growth as f64 / count.max(1) as f64)
                .set("sync s", sync_secs)
                .ratio("RSS growth/JSON", ratio);
            self.report.push(row);
            self.report.check(
                &format!("Memory, {case}: RSS growth ≤ 1.5× the JSON bytes"),
                "≤ 1.5",
                format!("{}×", fmt_num(ratio)),
                Some(ratio <= 1.5),
            );
            drop(k);
            sim.shutdown().await;
        }
        Ok(())
    }

    // ------------------------------------------------------------------------------------
    // Stalled watchers
    // ------------------------------------------------------------------------------------

    async fn stalled(&mut self) -> Result<(), String> {
        const S: &str = "Stalled watchers during a fan-out";
        let n = self.scale.stalled_objects;
        let sim = start_sim().await?;
        let objects = seed::configmaps(n, 10, 8);
        let cms: Vec<Value> = objects
            .iter()
            .filter(|o| o.resource == "configmaps")
            .map(|o| o.object.clone())
            .collect();
        seed_sim(&sim, objects)?;
        let k = self
            .kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS]))
            .await?;
        let (_, list) = load::fetch(
            k.addr,
            "/api/v1/configmaps?resourceVersion=0",
            Duration::from_secs(60),
        )
        .await?;
        let initial_mb = mb(list.len() as u64);
        drop(list);
        let fanout = self.cap_watchers(self.scale.stalled_fanout, "stalled");
        let stalled_n = self.scale.stalled;
        let (rate, secs) = (self.scale.watch_rate, self.scale.stalled_secs);
        let mut baseline: Option<(f64, u64)> = None;
        for with_stalled in [false, true] {
            let case = if with_stalled {
                format!(
                    "{} watchers + {stalled_n} stalled, {} objects",
                    count_label(fanout),
                    count_label(n)
                )
            } else {
                format!(
                    "{} watchers, none stalled, {} objects",
                    count_label(fanout),
                    count_label(n)
                )
            };
            progress(format!("stalled: {case}"));
            let rss_start = procstat::rss_bytes(k.pid()).unwrap_or(0);
            let stalled = if with_stalled {
                // Each asks for the initial state (a whole list's worth of events), then never
                // reads: kcache's writes to them back up at once.
                let s = watchers::open_stalled(
                    k.addr,
                    "/api/v1/configmaps?watch=1&resourceVersion=0&timeoutSeconds=900",
                    stalled_n,
                )
                .await;
                tokio::time::sleep(Duration::from_secs(2)).await;
                Some(s)
            } else {
                None
            };
            let rss_stalled = procstat::rss_bytes(k.pid()).unwrap_or(0);
            let rv = list_rv(k.addr, "/api/v1/configmaps").await?;
            let path =
                format!("/api/v1/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=900");
            let f = self
                .fan_run(
                    k.pid(),
                    k.addr,
                    Proto::H1,
                    vec![(None, path); fanout],
                    rate,
                    secs,
                    |i| {
                        let o = &cms[(i as usize * 7) % cms.len()];
                        bump(&sim, "configmaps", o, self.next_seq()).map(|rv| (rv, 0))
                    },
                )
                .await;
            // What the kernel holds for kcache's connections now (the stalled ones' backlog).
            let (_, queued) = procstat::tcp_send_queues(k.addr.port());
            let mut row = Self::fan_row(S, &case, "kcache", &f);
            row.set("RSS before MB", mb(rss_start))
                .set("RSS after stalling MB", mb(rss_stalled))
                .set("RSS peak MB", mb(f.rss_peak))
                .set("kernel send queues MB", mb(queued));
            let p99 = ms(f.delivery.percentile(0.99));
            match (&stalled, baseline) {
                (None, _) => baseline = Some((p99, f.rss_peak)),
                (Some(s), Some((base_p99, base_peak))) => {
                    if s.failed > 0 {
                        row.note(format!("{} stalled watchers failed to connect", s.failed));
                    }
                    row.ratio("p99 with/without stalled", p99 / base_p99);
                    let extra = f.rss_peak.saturating_sub(base_peak);
                    row.note(format!(
                        "RSS peak {} MB above the run without stalled watchers ({} KB per stalled \
                         watcher; each asked for {} MB of initial events)",
                        fmt_num(mb(extra)),
                        fmt_num(extra as f64 / 1024.0 / stalled_n.max(1) as f64),
                        fmt_num(initial_mb)
                    ));
                }
                (Some(_), None) => {}
            }
            self.report.push(row);
            drop(stalled);
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        drop(k);
        sim.shutdown().await;
        Ok(())
    }
}
