//! The `relist` scenario: reads served from the cache while a large collection is listed again.
//!
//! A relist (after the upstream's 410) replaces a type's whole collection; kcache turns the
//! difference into events for its watchers and rebuilds the type's posting sets. Whatever of
//! that runs under the type's lock holds up its readers, and readers blocked on a lock hold up
//! the tokio workers they run on, and with them every other request. This scenario measures
//! GET and LIST (resourceVersion=0, answered from the cache) of the relisting type and of
//! another type in the same kcache, quiet and while the large type relists back to back, under
//! two loads: 8 unpaced clients, which saturate a small machine, and a paced rate that leaves
//! CPU to spare.
//!
//! Relists are forced the way an upstream forces them: the sim ends every watch and answers the
//! next ones with 410 Gone, so both cached types list again (the other one is small). The sim
//! runs apart from the load generator, at the lowest priority (see `SimApart`).

use super::*;

/// The other type's namespace, Secrets and the relisting type's small namespace.
const OTHER_NS: &str = "relist-other";
const SMALL_NS: &str = "relist-small";
const SMALL: usize = 20;
/// The paced load's rate: a busy kcache that still has CPU to spare on two cores (about a
/// fifth of what 8 clients reach unpaced), as a deployment sized for its load runs. The
/// unpaced rows saturate the machine, where any extra work takes CPU from someone.
const PACED: f64 = 5_000.0;

impl Bench {
    pub(super) async fn relist(&mut self) -> Result<(), String> {
        let n = self.scale.relist_objects;
        let s = format!(
            "Reads from the cache while {} ConfigMaps relist, 8 clients",
            count_label(n)
        );
        let s = s.as_str();
        progress(format!("relist: seeding {n} ConfigMaps"));
        let apart = SimApart::start().await?;
        let sim = apart.sim.clone();
        seed_sim(&sim, seed::configmaps(n, 10, 11))?;
        for ns in [OTHER_NS, SMALL_NS] {
            sim.create(
                "",
                "namespaces",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .map_err(|e| e.to_string())?;
        }
        for i in 0..SMALL {
            sim.create(
                "",
                "secrets",
                json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": format!("s-{i}"), "namespace": OTHER_NS},
                    "data": {"k": "dg=="}}),
            )
            .map_err(|e| e.to_string())?;
            sim.create(
                "",
                "configmaps",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("small-{i}"), "namespace": SMALL_NS},
                    "data": {"k": "v"}}),
            )
            .map_err(|e| e.to_string())?;
        }
        let k = self
            .kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS, SECRETS]))
            .await?;
        let reads = [
            (
                "GET one Secret (other type)",
                format!("/api/v1/namespaces/{OTHER_NS}/secrets/s-0?resourceVersion=0"),
            ),
            (
                "LIST 20 Secrets (other type)",
                format!("/api/v1/namespaces/{OTHER_NS}/secrets?resourceVersion=0"),
            ),
            (
                "GET one ConfigMap (relisting type)",
                format!("/api/v1/namespaces/{SMALL_NS}/configmaps/small-0?resourceVersion=0"),
            ),
            (
                "LIST 20 ConfigMaps of a namespace (relisting type)",
                format!("/api/v1/namespaces/{SMALL_NS}/configmaps?resourceVersion=0"),
            ),
        ];
        for (case, path) in &reads {
            for rate in [None, Some(PACED)] {
                let load = |what: &str| match rate {
                    None => format!("kcache, {what}"),
                    Some(r) => format!("kcache, {what}, {} req/s paced", fmt_num(r)),
                };
                let spec = || {
                    let mut spec = LoadSpec::to(
                        &load::Target::plain(k.addr),
                        path.as_str(),
                        CLIENTS,
                        self.scale.phase,
                    );
                    spec.rate = rate;
                    spec
                };
                progress(format!("relist {case}: {}", load("quiet")));
                let (r, cpu) = self.measure_spec(spec(), &[k.pid()]).await;
                let quiet_p99 = r.percentile(0.99);
                let mut row = load_row(s, case, &load("no relist"), &r, cpu);
                set_tail(&mut row, &r);
                self.report.push(row);

                progress(format!("relist {case}: {}", load("relisting")));
                let relisting = Relisting::start(&sim, &k);
                let (r, cpu) = self.measure_spec(spec(), &[k.pid()]).await;
                let relists = relisting.stop().await?;
                let mut row = load_row(s, case, &load("relisting back to back"), &r, cpu);
                set_tail(&mut row, &r);
                row.set("relists", relists);
                let p99 = r.percentile(0.99);
                if !quiet_p99.is_zero() {
                    row.ratio("p99 relisting/quiet", ms(p99) / ms(quiet_p99));
                }
                self.report.push(row);
            }
        }
        Ok(())
    }
}

/// A sim on threads of its own, apart from the load generator's, and at the lowest priority.
///
/// The sim serving a 100k-object list spends long stretches of CPU in one task; on the load
/// generator's runtime that task would delay the generator's own tasks, and at normal priority
/// its threads would take their share of the two cores from kcache's workers: the rows would
/// count the upstream's work as kcache's latency. The real upstream is another machine.
struct SimApart {
    sim: Sim,
    runtime: Option<tokio::runtime::Runtime>,
}

impl SimApart {
    async fn start() -> Result<SimApart, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sim")
            .on_thread_start(lowest_priority)
            .enable_all()
            .build()
            .map_err(|e| format!("the sim's runtime: {e}"))?;
        let sim = runtime
            .spawn(start_sim())
            .await
            .map_err(|e| format!("starting the sim: {e}"))??;
        Ok(SimApart {
            sim,
            runtime: Some(runtime),
        })
    }
}

impl Drop for SimApart {
    fn drop(&mut self) {
        // Dropped from async code, where waiting for the runtime's tasks is not allowed.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(target_os = "linux")]
fn lowest_priority() {
    let tid = Some(rustix::thread::gettid());
    if let Err(e) = rustix::process::setpriority_process(tid, 19) {
        progress(format!("relist: the sim keeps normal priority ({e})"));
    }
}

#[cfg(not(target_os = "linux"))]
fn lowest_priority() {}

/// The latency tail a stall shows in: a relist blocks readers for a moment, a few times per
/// phase, which the p99 of a phase of thousands of reads may not show.
fn set_tail(row: &mut Row, r: &LoadResult) {
    row.set("p99.9 ms", ms(r.percentile(0.999))).set(
        "max ms",
        ms(r.latencies.iter().copied().max().unwrap_or_default()),
    );
}

/// Relists of the cached types, forced back to back until stopped.
struct Relisting {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<u64, String>>,
}

impl Relisting {
    fn start(sim: &Sim, k: &KcacheChild) -> Relisting {
        let stop = Arc::new(AtomicBool::new(false));
        let sim = sim.clone();
        let admin = k.admin_addr;
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            let relists =
                || kcache::metric_at(admin, &["kcache_relists_total{", "resource=\"configmaps\""]);
            let first = relists().await?;
            let mut done = first;
            let mut seq = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                // A write of each type first, so both watches have delivered something when
                // they are expired: the reflector relists at once after a watch that worked
                // (one that 410s straight away is relisted only after a growing backoff).
                for (resource, obj) in [
                    (
                        "configmaps",
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "small-0", "namespace": SMALL_NS}, "data": {"k": "v"}}),
                    ),
                    (
                        "secrets",
                        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": "s-0", "namespace": OTHER_NS}, "data": {"k": "dg=="}}),
                    ),
                ] {
                    seq += 1;
                    bump(&sim, resource, &obj, seq)?;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                // Every watch ends and is answered 410 until the ConfigMaps have relisted (a
                // streaming relist is answered 410 too, so it is a paged list, however long it
                // takes); then watches work again.
                sim.faults().fail_all_watches_with_410(true);
                let tried = Instant::now();
                let relisted = loop {
                    // Not more often: a scrape of kcache's metrics walks every cached object
                    // (for its memory estimates), work the rows would otherwise count.
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let now = relists().await?;
                    if now > done {
                        done = now;
                        break true;
                    }
                    if tried.elapsed() > Duration::from_secs(120) {
                        break false;
                    }
                };
                sim.faults().fail_all_watches_with_410(false);
                if !relisted {
                    return Err("no relist of the ConfigMaps within 120 s".into());
                }
            }
            Ok((done - first) as u64)
        });
        Relisting { stop, task }
    }

    async fn stop(self) -> Result<u64, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.task
            .await
            .map_err(|e| format!("relisting task: {e}"))?
    }
}
