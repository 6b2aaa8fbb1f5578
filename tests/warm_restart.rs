//! Warm restart (`cache.persistDir`): a kcache stopped and started again with the same directory
//! serves what it had cached at `resourceVersion=0` before it has reached the upstream, then
//! resumes its upstream watch from the stored resourceVersion (no list) and ends equal to the
//! upstream; a resume the upstream has compacted away relists; a stored state ahead of the
//! upstream (another cluster, a restore) is replaced; a damaged file is discarded and kcache
//! syncs cold.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{get, get_with, mirror, resource, sample, wait_until, EnvBuilder};
use kcache::config::Config;
use kcache::server::{self, Running};
use kcache::upstream::Upstream;
use kcache_sim::Sim;
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// key → resourceVersion.
type View = BTreeMap<String, String>;

fn view_of(items: &[Value]) -> View {
    items
        .iter()
        .map(|o| (mirror::key(o), mirror::rv_of(o).to_string()))
        .collect()
}

fn upstream_view(sim: &Sim) -> View {
    mirror::upstream_view(sim, "configmaps", &|_| true)
}

/// What kcache serves to a LIST at resourceVersion=0 (from its cache, whatever its age).
async fn cached_view(kcache: &Running) -> View {
    let r = get(&kcache.url(), "/api/v1/configmaps?resourceVersion=0").await;
    assert_eq!(r.status, 200, "{}", r.text());
    view_of(r.json()["items"].as_array().expect("items"))
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kcache-warm-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn builder(dir: &Path) -> EnvBuilder {
    let mut b = EnvBuilder::default().resources(vec![resource("", "v1", "configmaps")]);
    b.config.cache.persist_dir = Some(dir.to_owned());
    b
}

fn configmap(i: usize, data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "namespace": format!("ns-{}", i % 3)},
        "data": {"k": data}})
}

fn create(sim: &Sim, range: std::ops::Range<usize>) {
    for i in range {
        sim.create("", "configmaps", configmap(i, "v1"))
            .expect("create");
    }
}

/// While kcache is stopped: change 0..5, delete 5..10, create N..N+5.
fn change_meanwhile(sim: &Sim, n: usize) {
    for i in 0..5 {
        sim.update("", "configmaps", configmap(i, "v2"))
            .expect("update");
    }
    for i in 5..10 {
        sim.delete(
            "",
            "configmaps",
            Some(&format!("ns-{}", i % 3)),
            &format!("cm-{i}"),
        )
        .expect("delete");
    }
    create(sim, n..n + 5);
}

async fn start_kcache(sim: &Sim, config: &Config) -> Running {
    let upstream = Upstream::from_url(&sim.url()).expect("upstream");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    server::start(config, upstream, listener, admin)
        .await
        .expect("kcache starts")
}

async fn metric(kcache: &Running, parts: &[&str]) -> f64 {
    let text = get(&kcache.admin_url(), "/metrics").await.text();
    sample(&text, parts).unwrap_or(0.0)
}

async fn equal_to_upstream(kcache: &Running, sim: &Sim) {
    wait_until("kcache serves what the upstream holds", || async {
        cached_view(kcache).await == upstream_view(sim)
    })
    .await;
}

/// A first kcache with `dir` that has cached `n` ConfigMaps, stopped cleanly.
async fn first_run(dir: &Path, n: usize) -> (Sim, Config) {
    let b = builder(dir);
    let config = b.config.clone();
    let env = b.start().await;
    create(&env.sim, 0..n);
    equal_to_upstream(&env.kcache, &env.sim).await;
    let common::Env { sim, kcache } = env;
    kcache.shutdown().await;
    (sim, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_serves_the_stored_state_at_once_and_resumes_the_watch_without_a_list() {
    let dir = tempdir();
    let (sim, config) = first_run(&dir, 40).await;
    let before = upstream_view(&sim);
    change_meanwhile(&sim, 40);
    // The upstream cannot be reached: whatever the new kcache serves comes from the disk.
    sim.faults().set_unreachable(true);
    let kcache = start_kcache(&sim, &config).await;
    let cache = kcache.cache("", "v1", "configmaps").expect("cached");
    assert!(cache.is_synced(), "restored before the reflector ran");
    let r = get(&kcache.url(), "/api/v1/configmaps?resourceVersion=0").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(view_of(r.json()["items"].as_array().unwrap()), before);
    assert!(r.header("x-kcache-cache-age").is_some());
    assert_eq!(
        metric(
            &kcache,
            &["kcache_persist_restored_objects", "resource=\"configmaps\""]
        )
        .await,
        40.0
    );
    // Ready (serving the stored state), and saying where the state came from.
    let ready = get(&kcache.admin_url(), "/readyz?verbose").await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert!(
        ready.text().contains("restored from disk"),
        "{}",
        ready.text()
    );
    // A consistent read is not answered from a state the upstream has not confirmed: it goes
    // upstream, which cannot be reached.
    let consistent = get(&kcache.url(), "/api/v1/configmaps").await;
    assert_ne!(consistent.status, 200, "{}", consistent.text());

    sim.faults().set_unreachable(false);
    equal_to_upstream(&kcache, &sim).await;
    assert_eq!(cache.relists(), 0);
    let cm = "resource=\"configmaps\"";
    // No relist: no paged list (the one `limit=1` revision check before the resume counts as
    // a probe), and the only ADDED events are the 5 objects created meanwhile (a streaming list
    // would have sent all 40 again).
    assert_eq!(
        metric(
            &kcache,
            &[
                "kcache_upstream_requests_total",
                "purpose=\"reflector_list\""
            ]
        )
        .await,
        0.0
    );
    assert_eq!(
        metric(
            &kcache,
            &["kcache_upstream_events_total{", cm, "type=\"ADDED\""]
        )
        .await,
        5.0
    );
    assert_eq!(
        metric(
            &kcache,
            &["kcache_upstream_events_total{", cm, "type=\"DELETED\""]
        )
        .await,
        5.0
    );
    // Now confirmed: consistent reads are answered, and equal the upstream.
    wait_until("a consistent read is answered", || async {
        get(&kcache.url(), "/api/v1/configmaps").await.status == 200
    })
    .await;
    kcache.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_past_the_upstream_history_relists_and_ends_equal() {
    let dir = tempdir();
    let (sim, config) = first_run(&dir, 30).await;
    change_meanwhile(&sim, 30);
    // The upstream's history no longer reaches back to the stored resourceVersion.
    sim.faults().restart();
    let kcache = start_kcache(&sim, &config).await;
    let cache = kcache.cache("", "v1", "configmaps").expect("cached");
    equal_to_upstream(&kcache, &sim).await;
    wait_until("the resume's 410 made kcache relist", || async {
        cache.relists() >= 1
    })
    .await;
    equal_to_upstream(&kcache, &sim).await;
    // A change after the relist still arrives.
    sim.create("", "configmaps", configmap(1000, "late"))
        .expect("create");
    equal_to_upstream(&kcache, &sim).await;
    kcache.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

async fn damaged_file_is_discarded(damage: impl FnOnce(&Path)) {
    let dir = tempdir();
    let (sim, config) = first_run(&dir, 30).await;
    change_meanwhile(&sim, 30);
    damage(&dir.join(kcache::persist::FILE));
    let kcache = start_kcache(&sim, &config).await;
    let cache = kcache.cache("", "v1", "configmaps").expect("cached");
    assert!(kcache.wait_synced(Duration::from_secs(20)).await);
    // Synced cold: the first answer is already the upstream's state (a restored one would be
    // the state before the changes), from a full initial list (30 - 5 + 5 objects ADDED).
    assert_eq!(cached_view(&kcache).await, upstream_view(&sim));
    assert_eq!(cache.relists(), 0);
    assert_eq!(
        metric(
            &kcache,
            &[
                "kcache_upstream_events_total{",
                "resource=\"configmaps\"",
                "type=\"ADDED\""
            ]
        )
        .await,
        30.0
    );
    let text = get(&kcache.admin_url(), "/metrics").await.text();
    assert_eq!(
        sample(
            &text,
            &["kcache_persist_restored_objects", "resource=\"configmaps\""]
        ),
        Some(0.0)
    );
    wait_until("the new file gets a commit", || async {
        metric(&kcache, &["kcache_persist_flushes_total", "outcome=\"ok\""]).await >= 1.0
    })
    .await;
    // And the new file works: a second restart restores from it.
    kcache.shutdown().await;
    let kcache = start_kcache(&sim, &config).await;
    let cache = kcache.cache("", "v1", "configmaps").expect("cached");
    assert!(cache.is_synced(), "restored from the new file");
    equal_to_upstream(&kcache, &sim).await;
    kcache.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_file_is_discarded_and_kcache_syncs_cold() {
    damaged_file_is_discarded(|path| {
        // Garbage over the first pages (the headers and roots).
        let mut bytes = std::fs::read(path).unwrap();
        let n = bytes.len().min(8192);
        for (i, b) in bytes[..n].iter_mut().enumerate() {
            *b = (i * 7 + 13) as u8;
        }
        std::fs::write(path, bytes).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_file_is_discarded_and_kcache_syncs_cold() {
    damaged_file_is_discarded(|path| {
        let len = std::fs::metadata(path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(len / 3).unwrap();
    })
    .await;
}

/// Time to the first LIST answer after start, cold and warm, for `KCACHE_WARM_N` (10,000)
/// ConfigMaps, and the file's bytes per object. A measurement: `cargo test --release --test
/// warm_restart -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn measure_time_to_first_list_warm_and_cold() {
    let n: usize = std::env::var("KCACHE_WARM_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = tempdir();
    let config = builder(&dir).config;
    let sim = Sim::start(kcache_sim::SimConfig {
        bookmark_interval: Duration::from_secs(1),
        ..kcache_sim::SimConfig::default()
    })
    .await
    .unwrap();
    for i in 0..n {
        sim.create(
            "",
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": format!("ns-{}", i % 20),
                    "labels": {"app": "bench", "tier": format!("t{}", i % 5)}},
                "data": {"key": "x".repeat(200)}}),
        )
        .unwrap();
    }
    let first_list = |kcache: Running| async move {
        loop {
            let r = get(&kcache.url(), "/api/v1/configmaps?resourceVersion=0").await;
            if r.status == 200 {
                assert_eq!(r.json()["items"].as_array().unwrap().len(), n);
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        kcache
    };
    let mut cold_config = config.clone();
    cold_config.cache.persist_dir = None;
    let started = Instant::now();
    let kcache = first_list(start_kcache(&sim, &cold_config).await).await;
    let cold = started.elapsed();
    let json_bytes = kcache.cache("", "v1", "configmaps").unwrap().size().1;
    kcache.shutdown().await;

    // Cold with persistDir: the first flush writes every object in one commit.
    let started = Instant::now();
    let kcache = first_list(start_kcache(&sim, &config).await).await;
    let cold_persist = started.elapsed();
    wait_until("the first commit", || async {
        metric(&kcache, &["kcache_persist_flushes_total", "outcome=\"ok\""]).await >= 1.0
    })
    .await;
    let first_flush = metric(&kcache, &["kcache_persist_flush_seconds_sum"]).await;
    kcache.shutdown().await;
    let file = std::fs::metadata(dir.join(kcache::persist::FILE))
        .unwrap()
        .len();

    let started = Instant::now();
    let kcache = start_kcache(&sim, &config).await;
    let started_in = started.elapsed();
    let kcache = first_list(kcache).await;
    let warm = started.elapsed();
    kcache.shutdown().await;
    println!(
        "{n} ConfigMaps: first full LIST after start: cold {cold:?} (with persistDir {cold_persist:?}), \
         warm {warm:?} (start returned after {started_in:?}); first commit of all objects {:.0} ms; \
         file {file} bytes = {:.0} B/object for {:.0} B/object of JSON",
        first_flush * 1000.0,
        file as f64 / n as f64,
        json_bytes as f64 / n as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Set `dir` up for the real binary in front of `sim`: `dir/kubeconfig`, and `dir/kcache.yaml`
/// caching ConfigMaps with `persistDir` `dir/db` (returned).
fn binary_setup(dir: &Path, sim: &Sim) -> PathBuf {
    common::write_kubeconfig(&dir.join("kubeconfig"), sim);
    let db = dir.join("db");
    std::fs::write(
        dir.join("kcache.yaml"),
        format!(
            "resources: [{{version: v1, resource: configmaps}}]\n\
             cache: {{historyWindowSeconds: 300, historyMaxEvents: 100000, persistDir: \"{}\"}}\n",
            db.display()
        ),
    )
    .unwrap();
    db
}

/// `kcache serve` (the real binary) on the set-up of [`binary_setup`], on free ports: the
/// child, its API URL and its admin URL.
fn serve(dir: &Path) -> (std::process::Child, String, String) {
    let free = |_| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string()
    };
    let (listen, admin) = (free(0), free(1));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args(["serve", "--config"])
        .arg(dir.join("kcache.yaml"))
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .args(["--listen", &listen, "--admin-listen", &admin])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kcache starts");
    (child, format!("http://{listen}"), format!("http://{admin}"))
}

/// What the binary at `url` serves to a LIST at resourceVersion=0; None while it does not
/// listen yet or is not synced.
async fn list_binary(url: String) -> Option<View> {
    let addr = url.trim_start_matches("http://").to_owned();
    if tokio::net::TcpStream::connect(&addr).await.is_err() {
        return None;
    }
    let r = get(&url, "/api/v1/configmaps?resourceVersion=0").await;
    (r.status == 200).then(|| view_of(r.json()["items"].as_array().unwrap()))
}

/// The real binary killed with SIGKILL while the upstream churns: the file it leaves holds
/// exactly the upstream's state at the stored resourceVersion (no half-written flush), and the
/// binary started again on it resumes its watch without a list and ends equal to the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_churn_leaves_a_consistent_file_and_the_restart_resumes() {
    common::init_logs();
    let dir = tempdir();
    let sim = Sim::start(kcache_sim::SimConfig {
        bookmark_interval: Duration::from_secs(1),
        ..kcache_sim::SimConfig::default()
    })
    .await
    .unwrap();
    let db = binary_setup(&dir, &sim);
    let list = list_binary;
    // key → the resourceVersion of its current version, after each write: the upstream's
    // state at every RV, to check the file against.
    let mut state: BTreeMap<String, u64> = BTreeMap::new();
    let mut history: Vec<(u64, BTreeMap<String, u64>)> = Vec::new();
    let rv_of = |o: &Value| -> u64 {
        o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let key = |i: usize| format!("ns-{}/cm-{i}", i % 3);
    for i in 0..300 {
        let o = sim.create("", "configmaps", configmap(i, "v1")).unwrap();
        state.insert(key(i), rv_of(&o));
    }
    history.push((sim.current_rv(), state.clone()));
    let (mut child, url, _) = serve(&dir);
    wait_until("the binary serves the upstream's state", || {
        let url = url.clone();
        let sim = &sim;
        async move { list(url).await == Some(upstream_view(sim)) }
    })
    .await;
    // Churn: updates, deletes and creates, a few hundred a second; SIGKILL in the middle, after
    // some flushes have happened during the churn.
    let mut next = 300;
    let started = Instant::now();
    let mut killed = false;
    let mut round = 0usize;
    let mut creates: Vec<u64> = Vec::new();
    while started.elapsed() < Duration::from_millis(4500) {
        round += 1;
        let i = (round * 7919) % next;
        let o = if round % 5 == 0 {
            next += 1;
            sim.create("", "configmaps", configmap(next - 1, "new"))
                .map(|o| (key(next - 1), Some(o)))
        } else if round % 7 == 0 && state.contains_key(&key(i)) {
            sim.delete(
                "",
                "configmaps",
                Some(&format!("ns-{}", i % 3)),
                &format!("cm-{i}"),
            )
            .map(|_| (key(i), None))
        } else if state.contains_key(&key(i)) {
            sim.update("", "configmaps", configmap(i, &format!("r{round}")))
                .map(|o| (key(i), Some(o)))
        } else {
            continue;
        };
        let (k, o) = o.expect("write");
        if round % 5 == 0 {
            creates.push(sim.current_rv());
        }
        match o {
            Some(o) => state.insert(k, rv_of(&o)),
            None => state.remove(&k),
        };
        history.push((sim.current_rv(), state.clone()));
        if !killed && started.elapsed() > Duration::from_millis(2300) {
            child.kill().expect("SIGKILL");
            let _ = child.wait();
            killed = true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(killed);
    // What the killed process left: a state the upstream really had, at the stored RV.
    let key_cm = kcache::persist::resource_key(&resource("", "v1", "configmaps"));
    let stored = {
        let store = kcache::persist::Store::open(&db).expect("the file opens after a kill");
        store
            .load(
                &key_cm,
                &kcache::persist::fingerprint(
                    &resource("", "v1", "configmaps"),
                    &kcache::object::Strip::default(),
                ),
            )
            .expect("the file loads")
            .expect("something was stored")
    };
    let at = stored.record.rv;
    let expected = &history
        .iter()
        .rev()
        .find(|(rv, _)| *rv <= at)
        .expect("a state at or before the stored RV")
        .1;
    let got: BTreeMap<String, u64> = stored
        .objects
        .iter()
        .map(|(k, raw)| {
            let v: Value = serde_json::from_slice(raw).unwrap();
            (k.clone(), rv_of(&v))
        })
        .collect();
    assert_eq!(
        &got, expected,
        "the stored state is the upstream's at RV {at}"
    );
    assert!(
        at > history[0].0,
        "some churn was flushed before the kill (stored RV {at})"
    );
    // Started again on the file: resumes, no list, ends equal to the upstream.
    let (mut child, url, admin) = serve(&dir);
    wait_until("the restarted binary serves the upstream's state", || {
        let url = url.clone();
        let sim = &sim;
        async move { list(url).await == Some(upstream_view(sim)) }
    })
    .await;
    let metrics = get(&admin, "/metrics").await.text();
    assert_eq!(
        sample(
            &metrics,
            &[
                "kcache_upstream_requests_total",
                "purpose=\"reflector_list\""
            ]
        )
        .unwrap_or(0.0),
        0.0
    );
    let added = sample(
        &metrics,
        &[
            "kcache_upstream_events_total{",
            "resource=\"configmaps\"",
            "type=\"ADDED\"",
        ],
    )
    .unwrap_or(0.0);
    // A resumed watch: exactly the objects created after the stored RV came as ADDED (an
    // initial list would have sent every object).
    let created_after = creates.iter().filter(|rv| **rv > at).count();
    assert_eq!(added, created_after as f64, "ADDED events after a resume");
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The stored state is from another cluster, or from before a restore of this one: its RV is
/// ahead of everything the upstream has. kcache must not keep serving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_state_ahead_of_the_upstream_is_replaced() {
    let dir = tempdir();
    let (old, config) = first_run(&dir, 60).await;
    drop(old);
    let sim = Sim::start(kcache_sim::SimConfig {
        bookmark_interval: Duration::from_secs(1),
        ..kcache_sim::SimConfig::default()
    })
    .await
    .unwrap();
    for i in 100..105 {
        sim.create("", "configmaps", configmap(i, "other")).unwrap();
    }
    let kcache = start_kcache(&sim, &config).await;
    let cache = kcache.cache("", "v1", "configmaps").expect("cached");
    // The reflector finds the upstream behind the stored RV (it would otherwise wait for
    // that revision for good) and relists: the stored state is replaced, as after an upstream
    // restore.
    equal_to_upstream(&kcache, &sim).await;
    assert_eq!(cache.relists(), 1);
    assert!(cache.rv() <= sim.current_rv());
    kcache.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The upstream's writes during a churn, to tell its state at any resourceVersion.
#[derive(Default)]
struct WriteLog {
    /// The state before the first logged write: key → resourceVersion.
    initial: BTreeMap<String, u64>,
    /// (resourceVersion of the write, key, the key's new resourceVersion or None if deleted).
    writes: Vec<(u64, String, Option<u64>)>,
}

impl WriteLog {
    /// The upstream's objects at `rv`.
    fn state_at(&self, rv: u64) -> BTreeMap<String, u64> {
        let mut state = self.initial.clone();
        for (_, key, now) in self.writes.iter().take_while(|(at, ..)| *at <= rv) {
            match now {
                Some(v) => state.insert(key.clone(), *v),
                None => state.remove(key),
            };
        }
        state
    }
}

/// Churn on `sim` until `stop`: updates, creates and deletes of `cm-*` in `ns-0..3`, a few
/// hundred a second, each logged with its resourceVersion (under the lock, so the log is in
/// the upstream's order).
fn churn(
    sim: Sim,
    log: std::sync::Arc<std::sync::Mutex<WriteLog>>,
    first_new: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let key = |i: usize| format!("ns-{}/cm-{i}", i % 3);
        let rv_of = |o: &Value| mirror::rv_of(o);
        let mut next = first_new;
        let mut round = 0usize;
        let mut live = log.lock().unwrap().initial.clone();
        while !*stop.borrow() {
            round += 1;
            {
                let mut log = log.lock().unwrap();
                let i = (round * 7919) % next;
                let exists = live.contains_key(&key(i));
                let write = if round % 5 == 0 {
                    next += 1;
                    let o = sim
                        .create("", "configmaps", configmap(next - 1, "new"))
                        .expect("create");
                    Some((key(next - 1), Some(rv_of(&o))))
                } else if round % 7 == 0 && exists {
                    sim.delete(
                        "",
                        "configmaps",
                        Some(&format!("ns-{}", i % 3)),
                        &format!("cm-{i}"),
                    )
                    .expect("delete");
                    Some((key(i), None))
                } else if exists {
                    let o = sim
                        .update("", "configmaps", configmap(i, &format!("r{round}")))
                        .expect("update");
                    Some((key(i), Some(rv_of(&o))))
                } else {
                    None
                };
                if let Some((k, now)) = write {
                    match now {
                        Some(v) => live.insert(k.clone(), v),
                        None => live.remove(&k),
                    };
                    log.writes.push((sim.current_rv(), k, now));
                }
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    })
}

/// `kill -9` at many moments of a churning kcache's life — right after the exec, while it
/// loads the file, right after it serves, around and during its commits — each time followed
/// by a start on what it left: what the file holds is always either the upstream's exact state
/// at the stored resourceVersion or nothing (discarded, then kcache syncs cold), never another
/// state; and at the end clients (a client-go-style list+watch, kube-rs's watcher, and a raw
/// watch from the restored resourceVersion) hold exactly what the upstream holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_kill_9_during_churn_never_leaves_a_wrong_state() {
    common::init_logs();
    let dir = tempdir();
    let sim = Sim::start(kcache_sim::SimConfig {
        bookmark_interval: Duration::from_secs(1),
        ..kcache_sim::SimConfig::default()
    })
    .await
    .unwrap();
    let db = binary_setup(&dir, &sim);
    let n = 2000;
    create(&sim, 0..n);
    let log = std::sync::Arc::new(std::sync::Mutex::new(WriteLog {
        initial: sim
            .list("", "configmaps")
            .iter()
            .map(|o| (mirror::key(o), mirror::rv_of(o)))
            .collect(),
        writes: Vec::new(),
    }));
    let first_rv = sim.current_rv();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let churning = churn(sim.clone(), log.clone(), n, stopped);
    let cm = resource("", "v1", "configmaps");
    let (key_cm, fingerprint) = (
        kcache::persist::resource_key(&cm),
        kcache::persist::fingerprint(&cm, &kcache::object::Strip::default()),
    );
    // When to kill, in ms: after the exec (before it serves: during the start, the integrity
    // check, the load), or after it first serves (around the first whole commit, the commits of
    // changes about every second, and between them).
    enum At {
        Exec(u64),
        Serving(u64),
    }
    let rounds = [
        At::Serving(1500),
        At::Exec(0),
        At::Exec(30),
        At::Serving(0),
        At::Serving(1030),
        At::Serving(370),
        At::Exec(120),
        At::Serving(2250),
    ];
    let (mut loaded, mut newer) = (0, 0);
    let mut last_rv = 0;
    for (round, at) in rounds.iter().enumerate() {
        let (mut child, url, _) = serve(&dir);
        let wait = match at {
            At::Exec(ms) => Duration::from_millis(*ms),
            At::Serving(ms) => {
                let started = Instant::now();
                while list_binary(url.clone()).await.is_none() {
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "round {round}: never served"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Duration::from_millis(*ms)
            }
        };
        tokio::time::sleep(wait).await;
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        // What it left either loads and is the upstream's state at its RV, or is discarded.
        let store = kcache::persist::Store::open(&db).expect("the store opens after a kill");
        match store
            .load(&key_cm, &fingerprint)
            .expect("loads or is absent")
        {
            None => {}
            Some(stored) => {
                let at = stored.record.rv;
                let got: BTreeMap<String, u64> = stored
                    .objects
                    .iter()
                    .map(|(k, raw)| {
                        let v: Value = serde_json::from_slice(raw).unwrap();
                        assert_eq!(&mirror::key(&v), k, "stored under its own key");
                        (k.clone(), mirror::rv_of(&v))
                    })
                    .collect();
                let want = log.lock().unwrap().state_at(at);
                assert!(
                    got == want,
                    "round {round}: the stored state ({} objects) is not the upstream's at RV {at} ({} objects)",
                    got.len(),
                    want.len()
                );
                loaded += 1;
                if at > last_rv {
                    newer += 1;
                }
                last_rv = last_rv.max(at);
            }
        }
        drop(store);
    }
    assert!(loaded >= 4, "only {loaded} kills left a stored state");
    assert!(newer >= 2, "the stored state moved on only {newer} times");
    assert!(last_rv > first_rv, "some churn was committed");

    // The last start: its first answer is the restored state; a raw watch from that state's
    // RV, a client-go-style mirror and kube-rs's watcher all end equal to the upstream.
    let (mut child, url, admin) = serve(&dir);
    let restored = loop {
        if let Some(v) = list_binary(url.clone()).await {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let list = get(&url, "/api/v1/configmaps?resourceVersion=0")
        .await
        .json();
    let from: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut view: BTreeMap<String, String> = view_of(list["items"].as_array().unwrap());
    let mut watch = common::Watch::open(
        &url,
        &format!("/api/v1/configmaps?watch=1&resourceVersion={from}&allowWatchBookmarks=true"),
    )
    .await;
    assert_eq!(watch.status, 200);
    let mirror_state =
        mirror::spawn_mirror(url.clone(), "/api/v1/configmaps".into(), String::new());
    let (store, kube_task) = mirror::kube_runtime_configmaps(&url).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.send(true).unwrap();
    churning.await.unwrap();
    let end = sim.current_rv();
    let upstream = upstream_view(&sim);
    // The raw watch: every change since the restored RV, none missed (no ERROR event).
    let mut seen = from;
    while seen < end || view != upstream {
        let ev = watch
            .next_json(Duration::from_secs(20))
            .await
            .expect("the watch goes on to the upstream's revision");
        let o = &ev["object"];
        match ev["type"].as_str().unwrap() {
            "ADDED" | "MODIFIED" => {
                view.insert(mirror::key(o), mirror::rv_of(o).to_string());
            }
            "DELETED" => {
                view.remove(&mirror::key(o));
            }
            "BOOKMARK" => {}
            other => panic!("unexpected {other} event: {ev}"),
        }
        seen = mirror::rv_of(o);
    }
    assert_eq!(view, upstream);
    assert!(!restored.is_empty());
    mirror::converge("client-go-style mirror", &mirror_state, &|| {
        upstream_view(&sim)
    })
    .await;
    wait_until("kube-rs's watcher store equals the upstream", || async {
        mirror::store_view(&store) == upstream_view(&sim)
    })
    .await;
    kube_task.abort();
    let metrics = get(&admin, "/metrics").await.text();
    assert_eq!(
        sample(
            &metrics,
            &[
                "kcache_upstream_requests_total",
                "purpose=\"reflector_list\""
            ]
        )
        .unwrap_or(0.0),
        0.0,
        "the last start resumed from the file"
    );
    child.kill().unwrap();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Downstream watchers across a restart (the watch history itself is not persisted): one
/// resuming from a resourceVersion older than the restored state gets 410 Expired, as the
/// apiserver's Status in an ERROR event, and relists; one resuming at the restored RV gets
/// every change made while kcache was down, in order, none missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_watchers_resume_from_the_restored_rv_and_older_ones_get_410() {
    let dir = tempdir();
    let (sim, config) = first_run(&dir, 30).await;
    let stored_rv = {
        let cm = resource("", "v1", "configmaps");
        let store = kcache::persist::Store::open(&dir).unwrap();
        store
            .load(
                &kcache::persist::resource_key(&cm),
                &kcache::persist::fingerprint(&cm, &kcache::object::Strip::default()),
            )
            .unwrap()
            .expect("stored")
            .record
            .rv
    };
    // A watcher of the first kcache had seen an RV before the stored one.
    let older = stored_rv - 1;
    change_meanwhile(&sim, 30);
    let kcache = start_kcache(&sim, &config).await;
    let url = kcache.url();
    let mut old = common::Watch::open(
        &url,
        &format!("/api/v1/configmaps?watch=1&resourceVersion={older}"),
    )
    .await;
    assert_eq!(old.status, 200);
    let ev = old
        .next_json(Duration::from_secs(10))
        .await
        .expect("an event");
    assert_eq!(ev["type"], "ERROR", "{ev}");
    assert_eq!(ev["object"]["kind"], "Status", "{ev}");
    assert_eq!(ev["object"]["code"], 410, "{ev}");
    assert_eq!(ev["object"]["reason"], "Expired", "{ev}");
    // At the restored RV: the 15 changes made meanwhile, as the upstream made them.
    let mut resumed = common::Watch::open(
        &url,
        &format!("/api/v1/configmaps?watch=1&resourceVersion={stored_rv}"),
    )
    .await;
    assert_eq!(resumed.status, 200);
    let mut got = Vec::new();
    while got.len() < 15 {
        let ev = resumed
            .next_json(Duration::from_secs(10))
            .await
            .expect("every change made while kcache was down");
        got.push((
            ev["type"].as_str().unwrap().to_owned(),
            ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
            mirror::rv_of(&ev["object"]),
        ));
    }
    let want: Vec<(String, String, u64)> = (0..5)
        .map(|i| ("MODIFIED", i))
        .chain((5..10).map(|i| ("DELETED", i)))
        .chain((30..35).map(|i| ("ADDED", i)))
        .map(|(t, i)| (t.to_owned(), format!("cm-{i}"), 0))
        .collect();
    let strip = |v: &[(String, String, u64)]| -> Vec<(String, String)> {
        v.iter().map(|(t, n, _)| (t.clone(), n.clone())).collect()
    };
    assert_eq!(strip(&got), strip(&want));
    assert!(
        got.windows(2).all(|w| w[0].2 < w[1].2),
        "in RV order: {got:?}"
    );
    assert!(got[0].2 > stored_rv);
    kcache.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A type read in protobuf before a restart keeps its protobuf mirror on disk: the restarted
/// kcache answers protobuf reads from the cache at once, with the upstream's bytes, and its
/// mirror resumes its watch instead of listing the whole type again (the largest upstream
/// cost of a restarted kcache's herd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_protobuf_mirror_and_lists_nothing_for_it() {
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    let path = "/api/v1/namespaces/ns-1/configmaps?resourceVersion=0";
    let accept = [("Accept", PROTOBUF)];
    let from_cache = |k: &Running| {
        let k = k.admin_url();
        async move {
            let text = get(&k, "/metrics").await.text();
            sample(
                &text,
                &[
                    "kcache_responses_by_content_type_total",
                    "content_type=\"protobuf\"",
                    "source=\"cache\"",
                ],
            )
            .unwrap_or(0.0)
        }
    };
    let dir = tempdir();
    let b = builder(&dir);
    let config = b.config.clone();
    let env = b.start().await;
    create(&env.sim, 0..20);
    equal_to_upstream(&env.kcache, &env.sim).await;
    // A protobuf reader starts the type's mirror.
    wait_until("protobuf answered from the cache", || async {
        let before = from_cache(&env.kcache).await;
        let r = get_with(&env.kcache.url(), path, &accept).await;
        assert_eq!(r.status, 200);
        from_cache(&env.kcache).await > before
    })
    .await;
    let common::Env { sim, kcache } = env;
    kcache.shutdown().await;

    let kcache = start_kcache(&sim, &config).await;
    // The first protobuf read is answered from the cache, with the upstream's bytes.
    let ours = get_with(&kcache.url(), path, &accept).await;
    let theirs = get_with(&sim.url(), path, &accept).await;
    assert_eq!(ours.status, 200);
    assert_eq!(from_cache(&kcache).await, 1.0, "passed through");
    assert_eq!(ours.header("content-type"), theirs.header("content-type"));
    assert!(ours.body == theirs.body, "kcache's bytes differ");
    // Changes after the restart reach the restored mirror through its watch.
    sim.update("", "configmaps", configmap(1, "v2"))
        .expect("update");
    wait_until("the change answered in protobuf", || async {
        let ours = get_with(&kcache.url(), path, &accept).await;
        let theirs = get_with(&sim.url(), path, &accept).await;
        ours.body == theirs.body
    })
    .await;
    let protobuf_lists = metric(
        &kcache,
        &[
            "kcache_upstream_requests_total",
            "purpose=\"protobuf_list\"",
        ],
    )
    .await;
    assert_eq!(protobuf_lists, 0.0, "the restored mirror listed its type");
    kcache.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
