//! The `warm` scenario: warm restart (`cache.persistDir`) at scale, with kcache as a real
//! process (`kcache serve`, the sim in the bench process).
//!
//! For each size: a sim with N ConfigMaps; kcache started with an empty `persistDir` (a cold
//! start that also writes the file); churn at `warm_rate` writes/s (updates, and as many
//! creates as deletes, so the size holds); the disk writes of that churn, from
//! `/proc/PID/io`; then kcache killed with SIGKILL at a pseudo-random moment relative to its
//! once-a-second commit. With the churn still running, a cold kcache (no `persistDir`) and then
//! the warm one (the killed process's directory) are started, each timed from the exec to the
//! first byte and to the end of the first 200 answer to `LIST ?resourceVersion=0`, and to
//! having caught up with the upstream; what each asked of the upstream meanwhile comes from
//! its own metrics. A downstream watcher starts from the warm kcache's first LIST (its
//! resourceVersion is the restored one); when the churn stops it must hold exactly what the
//! upstream holds, and the warm kcache must not have relisted.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use http_body_util::BodyExt;

use super::*;

const S: &str = "Warm restart: start to first LIST, SIGKILL during churn";
const D: &str = "Warm restart: disk per object and writes under churn";
const LIST: &str = "/api/v1/configmaps?resourceVersion=0";

/// key (`namespace/name`) → resourceVersion.
type View = BTreeMap<String, u64>;

/// Minimal view of a list or an object: what [`View`] needs.
#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

#[derive(Deserialize)]
struct Item {
    metadata: Meta,
}

#[derive(Deserialize)]
struct ListBody {
    metadata: Meta,
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    object: Item,
}

fn key_of(m: &Meta) -> String {
    format!("{}/{}", m.namespace, m.name)
}

fn upstream_view(sim: &Sim) -> Result<View, String> {
    sim.list("", "configmaps")
        .iter()
        .map(|o| {
            let key = format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            );
            Ok((key, rv_of(o)?))
        })
        .collect()
}

/// What a start took, from the exec.
struct Start {
    /// To the first byte (the response head) of the first 200 LIST.
    head: Duration,
    /// To the end of that LIST's body.
    list: Duration,
    /// To the cache having reached the upstream's revision at the first LIST.
    caught_up: Duration,
    items: usize,
    list_bytes: usize,
    /// The first LIST's resourceVersion and contents.
    rv: u64,
    view: View,
    /// What kcache asked of the upstream until caught up (its own metrics).
    cost: kcache::UpstreamCost,
    /// Reflector list requests and relists until caught up (0 and 0 for a resumed watch).
    lists: f64,
    relists: f64,
    /// Cores other processes used from the exec to the end of the first LIST (the bench
    /// process and kcache excepted): a start timed on a busy machine shows here.
    others: f64,
}

/// Churn on the sim from a task, at `rate` writes per second: one write in ten creates a
/// ConfigMap, one in ten deletes the oldest created (once more than 20 exist), the others
/// update a random seeded one.
struct Churn {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    /// JSON bytes of the objects the writes produced (a deletion counts the deleted object):
    /// about what the upstream's watch events carry, and what kcache must keep on disk.
    json_bytes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Churn {
    fn start(sim: &Sim, cms: Vec<Value>, rate: f64) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let json_bytes = Arc::new(AtomicU64::new(0));
        let (sim, s, w, b) = (
            sim.clone(),
            stop.clone(),
            writes.clone(),
            json_bytes.clone(),
        );
        let task = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut created: std::collections::VecDeque<String> = Default::default();
            let ns = cms[0]["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            let mut i: u64 = 0;
            while !s.load(Ordering::Relaxed) {
                tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / rate)).await;
                i += 1;
                // xorshift: a fixed, cheap sequence of objects to change.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let written = if i % 10 == 0 {
                    let name = format!("warm-{i}");
                    created.push_back(name.clone());
                    let o = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": ns},
                        "data": {"created": i.to_string()}});
                    sim.create("", "configmaps", o)
                } else if i % 10 == 5 && created.len() > 20 {
                    let name = created.pop_front().unwrap_or_default();
                    sim.delete("", "configmaps", Some(&ns), &name)
                } else {
                    let mut o = cms[(x % cms.len() as u64) as usize].clone();
                    o["metadata"]["annotations"]["bench.kcache.dev/seq"] = json!(i.to_string());
                    sim.update("", "configmaps", o)
                };
                if let Ok(v) = written {
                    w.fetch_add(1, Ordering::Relaxed);
                    let len = serde_json::to_vec(&v).map_or(0, |b| b.len());
                    b.fetch_add(len as u64, Ordering::Relaxed);
                }
            }
        });
        Churn {
            stop,
            writes,
            json_bytes,
            task,
        }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
    }
}

/// `write_bytes` (bytes the process caused to be written to the storage layer) and `wchar`
/// (bytes passed to write calls, sockets included) of `/proc/PID/io`.
fn proc_io(pid: u32) -> Option<(u64, u64)> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    let field = |name: &str| -> Option<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .parse()
            .ok()
    };
    Some((field("write_bytes:")?, field("wchar:")?))
}

/// The bytes the file system has allocated to `path`: redb grows its file in steps that stay
/// sparse until written, so the length overstates what the file takes on the disk.
fn allocated(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

/// A downstream watcher through kcache from `rv`, holding the state it has been told.
struct Watcher {
    view: Arc<Mutex<View>>,
    /// The resourceVersion of the last event or bookmark.
    rv: Arc<AtomicU64>,
    /// An ERROR event (e.g. 410) or a closed stream: the watcher did not follow to the end.
    failed: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    async fn open(addr: std::net::SocketAddr, view: View, rv: u64) -> Result<Watcher, String> {
        let target = load::Target::plain(addr);
        let mut s = target.h1_connect().await?;
        s.ready()
            .await
            .map_err(|e| format!("watch connection: {e}"))?;
        let path = format!(
            "/api/v1/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=3600"
        );
        let resp = s
            .send_request(target.get(&path))
            .await
            .map_err(|e| format!("watch: {e}"))?;
        if resp.status() != 200 {
            return Err(format!("watch answered {}", resp.status()));
        }
        let view = Arc::new(Mutex::new(view));
        let last = Arc::new(AtomicU64::new(rv));
        let failed = Arc::new(Mutex::new(None));
        let (v, l, f) = (view.clone(), last.clone(), failed.clone());
        let task = tokio::spawn(async move {
            let mut body = resp.into_body();
            let mut buf: Vec<u8> = Vec::new();
            let why = loop {
                let frame = match body.frame().await {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => break format!("watch body: {e}"),
                    None => break "the watch ended".to_string(),
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                buf.extend_from_slice(&data);
                while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    let event: WatchEvent = match serde_json::from_slice(&line) {
                        Ok(e) => e,
                        Err(_) => {
                            *f.lock().unwrap() = Some(format!(
                                "event: {}",
                                String::from_utf8_lossy(&line[..line.len().min(300)])
                            ));
                            return;
                        }
                    };
                    let m = &event.object.metadata;
                    let at: u64 = m.resource_version.parse().unwrap_or(0);
                    match event.kind.as_str() {
                        "ADDED" | "MODIFIED" => {
                            v.lock().unwrap().insert(key_of(m), at);
                        }
                        "DELETED" => {
                            v.lock().unwrap().remove(&key_of(m));
                        }
                        _ => {}
                    }
                    l.store(at, Ordering::Relaxed);
                }
            };
            *f.lock().unwrap() = Some(why);
        });
        Ok(Watcher {
            view,
            rv: last,
            failed,
            task,
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Time a kcache started at `exec`: the first 200 LIST at RV=0 (retried while kcache is not
/// listening yet or answers 429 before its first sync), then until its cache has reached
/// the upstream's revision as it was at that LIST.
async fn time_start(
    k: &mut KcacheChild,
    sim: &Sim,
    exec: Instant,
    timeout: Duration,
) -> Result<Start, String> {
    let others = procstat::OthersMeter::start(&[k.pid()]);
    let target = load::Target::plain(k.addr);
    let (head, list, body) = loop {
        if exec.elapsed() > timeout {
            return Err(format!(
                "no LIST answered within {timeout:?}: {}",
                k.log_tail()
            ));
        }
        if let Some(why) = k.exited() {
            return Err(why);
        }
        let Ok(mut s) = target.h1_connect().await else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        if s.ready().await.is_err() {
            continue;
        }
        let Ok(resp) = s.send_request(target.get(LIST)).await else {
            continue;
        };
        let head = exec.elapsed();
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("LIST body: {e}"))?
            .to_bytes();
        if status == 200 {
            break (head, exec.elapsed(), body);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let others = others
        .cores(procstat::cpu_seconds(k.pid()).unwrap_or(0.0))
        .0;
    let upstream_rv = sim.current_rv();
    let parsed: ListBody = serde_json::from_slice(&body).map_err(|e| format!("LIST: {e}"))?;
    let rv: u64 = parsed
        .metadata
        .resource_version
        .parse()
        .map_err(|_| "LIST without a resourceVersion".to_string())?;
    let view: View = parsed
        .items
        .iter()
        .map(|i| {
            (
                key_of(&i.metadata),
                i.metadata.resource_version.parse().unwrap_or(0),
            )
        })
        .collect();
    // Caught up: a one-item list at NotOlderThan the upstream's revision is answered (kcache
    // waits for its cache to reach it, up to watch.resourceVersionWaitSeconds, then 504s).
    let caught = format!(
        "/api/v1/configmaps?resourceVersion={upstream_rv}&resourceVersionMatch=NotOlderThan&limit=1"
    );
    loop {
        if exec.elapsed() > timeout {
            return Err(format!(
                "not caught up with the upstream within {timeout:?}"
            ));
        }
        if let Ok((200, _)) = load::fetch(k.addr, &caught, Duration::from_secs(10)).await {
            break;
        }
    }
    let caught_up = exec.elapsed();
    Ok(Start {
        head,
        list,
        caught_up,
        items: view.len(),
        list_bytes: body.len(),
        rv,
        view,
        cost: k.upstream_cost().await?,
        lists: k
            .metric(&[
                "kcache_upstream_requests_total{",
                "purpose=\"reflector_list\"",
            ])
            .await?,
        relists: k.metric(&["kcache_relists_total"]).await?,
        others,
    })
}

fn start_row(case: &str, target: &str, s: &Start) -> Row {
    let mut row = Row::new(S, case, target);
    row.set("exec→first byte ms", ms(s.head))
        .set("exec→LIST done ms", ms(s.list))
        .set("exec→caught up ms", ms(s.caught_up))
        .set("items", s.items as u64)
        .set("LIST MB", mb(s.list_bytes as u64))
        .set("upstream req", s.cost.requests)
        .set("upstream MB", s.cost.received_bytes / 1e6)
        .set("reflector lists", s.lists)
        .set("relists", s.relists)
        .set("others CPU", s.others);
    note_disturbed(&mut row, Some(s.others));
    row
}

impl Bench {
    pub(super) async fn warm(&mut self) -> Result<(), String> {
        for n in self.scale.warm_sizes.clone() {
            self.warm_case(n).await?;
        }
        Ok(())
    }

    async fn warm_case(&mut self, n: usize) -> Result<(), String> {
        let case = format!("{} ConfigMaps (~1 KB)", count_label(n));
        let rate = self.scale.warm_rate;
        let timeout = Duration::from_secs(300);
        progress(format!("warm: {case}: seeding"));
        let sim = Sim::start(SimConfig {
            bookmark_interval: Duration::from_secs(1),
            ..SimConfig::default()
        })
        .await
        .map_err(|e| format!("starting the sim: {e}"))?;
        let objects = seed::configmaps(n, 10, 11);
        let cms: Vec<Value> = objects
            .iter()
            .filter(|o| o.resource == "configmaps")
            .map(|o| o.object.clone())
            .collect();
        seed_sim(&sim, objects)?;
        let store = TempDir::new("persist")?;
        let file = store.path().join("kcache.redb");
        let mut persisted = ChildConfig::caching(&[CONFIGMAPS]);
        persisted.persist_dir = Some(store.path().to_owned());

        // A cold start that writes the file (no churn yet).
        progress(format!("warm: {case}: cold start with an empty persistDir"));
        let exec = Instant::now();
        let mut first = KcacheChild::start_unready(&self.exe, &sim.url(), &persisted)?;
        let cold_quiet = time_start(&mut first, &sim, exec, timeout).await?;
        self.report.push(start_row(
            &case,
            "cold, empty persistDir, no churn",
            &cold_quiet,
        ));
        let flushed = Instant::now();
        while first
            .metric(&["kcache_persist_flushes_total", "outcome=\"ok\""])
            .await?
            < 1.0
        {
            if flushed.elapsed() > timeout {
                return Err("no commit to disk".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let first_commit = first.metric(&["kcache_persist_flush_seconds_sum"]).await?;
        let file_after_sync = std::fs::metadata(&file).map_or(0, |m| m.len());
        let disk_after_sync = allocated(&file);

        // Disk writes under churn, in steady state.
        progress(format!("warm: {case}: churn at {rate}/s, disk writes"));
        let churn = Churn::start(&sim, cms, rate);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let pid = first.pid();
        let io0 = proc_io(pid).ok_or("no /proc/PID/io")?;
        let (w0, b0) = (
            churn.writes.load(Ordering::Relaxed),
            churn.json_bytes.load(Ordering::Relaxed),
        );
        let f0 = first
            .metric(&["kcache_persist_flushes_total", "outcome=\"ok\""])
            .await?;
        let t0 = Instant::now();
        tokio::time::sleep(self.scale.warm_secs).await;
        let secs = t0.elapsed().as_secs_f64();
        let io1 = proc_io(pid).ok_or("no /proc/PID/io")?;
        let events = churn.writes.load(Ordering::Relaxed) - w0;
        let event_bytes = churn.json_bytes.load(Ordering::Relaxed) - b0;
        let commits = first
            .metric(&["kcache_persist_flushes_total", "outcome=\"ok\""])
            .await?
            - f0;
        let disk = io1.0 - io0.0;
        let file_after_churn = std::fs::metadata(&file).map_or(0, |m| m.len());
        let disk_after_churn = allocated(&file);
        // What the store costs in memory: kcache's resident set against what its cache holds
        // by its own count (`kcache_cache_memory_bytes`: objects, heads, indexes, history).
        let rss = procstat::rss_bytes(pid).unwrap_or(0);
        let held = first.metric(&["kcache_cache_memory_bytes{"]).await?;
        let json_per_object = cold_quiet.list_bytes as f64 / n.max(1) as f64;
        let mut row = Row::new(D, &case, "kcache, persistDir");
        row.set("file MB after sync", mb(file_after_sync))
            .set("file B/object", file_after_sync as f64 / n as f64)
            .set("allocated B/object", disk_after_sync as f64 / n as f64)
            .set("list B/object", json_per_object)
            .set("first commit ms", first_commit * 1e3)
            .set("events/s", events as f64 / secs)
            .set("event JSON KB/s", event_bytes as f64 / secs / 1e3)
            .set("commits/s", commits / secs)
            .set("disk write KB/s", disk as f64 / secs / 1e3)
            .set("write calls KB/s", (io1.1 - io0.1) as f64 / secs / 1e3)
            .set("file MB after churn", mb(file_after_churn))
            .set("allocated MB after churn", mb(disk_after_churn))
            .set("kcache RSS MB after churn", mb(rss))
            .set("cache memory MB", held / 1e6);
        row.ratio(
            "disk bytes / event byte",
            disk as f64 / event_bytes.max(1) as f64,
        );
        self.report.push(row);

        // SIGKILL at a moment that falls anywhere in the commit cycle (about 1 s).
        let offset = Duration::from_millis(100 + (self.next_seq() * 379) % 900);
        tokio::time::sleep(offset).await;
        progress(format!(
            "warm: {case}: SIGKILL {:.0} ms into the next second",
            ms(offset)
        ));
        first.kill_9();
        drop(first);

        // With the churn going on: cold (no persistDir), then warm on the killed one's file.
        progress(format!("warm: {case}: cold start during churn"));
        let exec = Instant::now();
        let mut cold = KcacheChild::start_unready(
            &self.exe,
            &sim.url(),
            &ChildConfig::caching(&[CONFIGMAPS]),
        )?;
        let cold_start = time_start(&mut cold, &sim, exec, timeout).await?;
        cold.kill_9();
        drop(cold);
        progress(format!("warm: {case}: warm start during churn"));
        let exec = Instant::now();
        let mut warm = KcacheChild::start_unready(&self.exe, &sim.url(), &persisted)?;
        let warm_start = time_start(&mut warm, &sim, exec, timeout).await?;
        let watcher = Watcher::open(warm.addr, warm_start.view.clone(), warm_start.rv).await?;
        self.report
            .push(start_row(&case, "cold, during churn", &cold_start));
        let mut row = start_row(&case, "warm, after SIGKILL, during churn", &warm_start);
        row.ratio(
            "cold/warm to LIST done",
            cold_start.list.as_secs_f64() / warm_start.list.as_secs_f64().max(1e-9),
        );
        if cold_start.cost.received_bytes > 0.0 {
            row.note(format!(
                "upstream bytes saved vs cold: {:.1} MB ({:.0}%), requests {} vs {}",
                (cold_start.cost.received_bytes - warm_start.cost.received_bytes) / 1e6,
                100.0 * (1.0 - warm_start.cost.received_bytes / cold_start.cost.received_bytes),
                fmt_num(warm_start.cost.requests),
                fmt_num(cold_start.cost.requests)
            ));
        }
        self.report.push(row);

        // Some more churn through the resumed watch, then stop: the watcher must end equal.
        tokio::time::sleep(Duration::from_secs(3)).await;
        churn.stop().await;
        let end = sim.current_rv();
        let upstream = upstream_view(&sim)?;
        let waited = Instant::now();
        let mut equal = false;
        while waited.elapsed() < Duration::from_secs(60) {
            if watcher.failed.lock().unwrap().is_some() {
                break;
            }
            if watcher.rv.load(Ordering::Relaxed) >= end
                && *watcher.view.lock().unwrap() == upstream
            {
                equal = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let failed = watcher.failed.lock().unwrap().clone();
        let relists = warm.metric(&["kcache_relists_total"]).await?;
        let lists = warm
            .metric(&[
                "kcache_upstream_requests_total{",
                "purpose=\"reflector_list\"",
            ])
            .await?;
        self.report.check(
            &format!("Warm restart, {case}: first complete LIST within 1 s of the exec"),
            "≤ 1 s",
            format!(
                "{} ms (cold {} ms)",
                fmt_num(ms(warm_start.list)),
                fmt_num(ms(cold_start.list))
            ),
            Some(warm_start.list <= Duration::from_secs(1)),
        );
        self.report.check(
            &format!("Warm restart, {case}: upstream watch resumed without a list"),
            "0 reflector lists, 0 relists",
            format!("{lists} lists, {relists} relists"),
            Some(lists == 0.0 && relists == 0.0),
        );
        self.report.check(
            &format!(
                "Warm restart, {case}: a watcher from the restored RV ends equal to the upstream"
            ),
            "equal",
            match (&failed, equal) {
                (_, true) => format!("equal ({} objects)", upstream.len()),
                (Some(why), false) => format!("not equal: {why}"),
                (None, false) => "not equal within 60 s".to_string(),
            },
            Some(equal),
        );
        drop(watcher);
        drop(warm);
        sim.shutdown().await;
        Ok(())
    }
}
