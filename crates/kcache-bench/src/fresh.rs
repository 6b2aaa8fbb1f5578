//! The `fresh` scenario: consistent reads (resourceVersion unset) of one namespace's
//! ConfigMaps on a sim whose apiserver replicas' watch caches lag etcd, directly and through
//! kcache's freshness probe, for a type being written and for a quiet one.
//!
//! - busy: ConfigMaps are written at a steady rate, so kcache's cache keeps reaching the
//!   revision its probe learns and answers from the cache;
//! - quiet: no ConfigMap is written, but Secrets are (not cached), so the global revision
//!   moves past the ConfigMap cache's and kcache has to forward the reads.
//!
//! It runs on each upstream profile (v1.28, v1.34). The sim serves reads from etcd
//! (resourceVersion unset: the direct reads, kcache's probes and forwarded reads) and writes
//! lists at the bounded rate its profile's real apiserver measured
//! (`StorageReads::measured`).
//!
//! Every row counts the sim's LIST and GET requests and response bytes over its phase (the
//! reads themselves when loading the sim, kcache's probes and forwarded reads otherwise) and
//! checks every answer against the writes acknowledged before its request was sent.

use super::*;

/// Targets of each (workload, read): the sim directly, kcache with its freshness probe (its
/// watch through the replica that does not lag, and through the one that lags most), and
/// kcache forwarding every consistent read.
const SIM: &str = "sim (upstream)";
const PROBE: &str = "kcache (probe), watch via unlagged replica";
const PROBE_LAGGING: &str = "kcache (probe), watch via lagging replica";
const FORWARDING: &str = "kcache forwarding all";
const TARGETS: [&str; 4] = [SIM, PROBE, PROBE_LAGGING, FORWARDING];

/// A background writer at a steady rate until stopped; returns its failed writes.
pub(super) struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl Writer {
    /// Write `objects[pick(i)]` of `resource` at `rate` per second; acknowledged writes go to
    /// `acks` when given.
    pub(super) fn start(
        sim: &Sim,
        resource: &'static str,
        objects: Arc<Vec<Value>>,
        rate: f64,
        first_seq: u64,
        acks: Option<Arc<staleness::Checker>>,
    ) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let sim = sim.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let start = tokio::time::Instant::now();
                let mut failed = 0u64;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate))
                        .await;
                    // Every other write is to the first object (the one the GETs read).
                    let k = if i % 2 == 0 {
                        0
                    } else {
                        1 + (i as usize / 2) % (objects.len() - 1).max(1)
                    };
                    let o = &objects[k.min(objects.len() - 1)];
                    match bump(&sim, resource, o, first_seq + i) {
                        Ok(rv) => {
                            if let Some(c) = &acks {
                                c.acks
                                    .record(o["metadata"]["name"].as_str().unwrap_or(""), rv);
                            }
                        }
                        Err(_) => failed += 1,
                    }
                    i += 1;
                }
                failed
            })
        };
        Writer { stop, task }
    }

    pub(super) async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(u64::MAX)
    }
}

impl Bench {
    pub(super) async fn fresh(&mut self) -> Result<(), String> {
        for profile in kcache_sim::Profile::ALL {
            self.fresh_on(profile).await?;
        }
        Ok(())
    }

    async fn fresh_on(&mut self, profile: kcache_sim::Profile) -> Result<(), String> {
        let s = format!(
            "Consistent reads (RV unset) of one namespace, watch caches lagging, {profile} profile, 8 clients"
        );
        let s = s.as_str();
        let n = self.scale.fresh_objects;
        let lags = self.scale.fresh_lags.clone();
        let lag_label = lags
            .iter()
            .map(|d| format!("{} ms", d.as_millis()))
            .collect::<Vec<_>>()
            .join(", ");
        progress(format!(
            "fresh {profile}: seeding {n} ConfigMaps in one namespace; replicas' watch caches lag {lag_label}"
        ));
        let sim = Sim::start(SimConfig {
            watch_cache_lags: lags.clone(),
            storage_reads: Some(kcache_sim::StorageReads::measured(profile)),
            ..SimConfig::for_profile(profile)
        })
        .await
        .map_err(|e| format!("starting the sim: {e}"))?;
        let objects = seed::configmaps(n, 1, 5);
        let cms: Arc<Vec<Value>> = Arc::new(
            objects
                .iter()
                .filter(|o| o.resource == "configmaps")
                .map(|o| o.object.clone())
                .collect(),
        );
        seed_sim(&sim, objects)?;
        // The other type the quiet workload writes: one Secret, not cached by kcache.
        let secret = other_type_secret(&sim)?;
        let secrets = Arc::new(vec![secret]);

        // Each kcache lists and watches through the replica it starts on (pinned), and reads
        // alternate between the replicas afterwards.
        let lagging_replica = (0..lags.len()).max_by_key(|&i| lags[i]).unwrap_or(0);
        let unlagged_replica = (0..lags.len()).min_by_key(|&i| lags[i]).unwrap_or(0);
        let caching = ChildConfig::caching(&[CONFIGMAPS]);
        // A moment after readiness too, for the watch that follows the initial list.
        let settle = Duration::from_millis(500);
        sim.pin_replica(Some(unlagged_replica));
        let probing = self.kcache(&sim, &caching).await;
        tokio::time::sleep(settle).await;
        sim.pin_replica(Some(lagging_replica));
        let probing_lagging = self.kcache(&sim, &caching).await;
        tokio::time::sleep(settle).await;
        sim.pin_replica(None);
        let (probing, probing_lagging) = (probing?, probing_lagging?);
        let mut fwd = ChildConfig::caching(&[CONFIGMAPS]);
        fwd.forward_consistent = true;
        let forwarding = self.kcache(&sim, &fwd).await?;

        let name = cms[0]["metadata"]["name"]
            .as_str()
            .ok_or("a ConfigMap without a name")?
            .to_string();
        let get = format!("/api/v1/namespaces/bench-1/configmaps/{name}");
        let list = "/api/v1/namespaces/bench-1/configmaps";
        // One checker for the whole scenario: it knows every ConfigMap write, so the quiet
        // workload's reads must still show the busy one's writes. Rows take deltas.
        let checker = Arc::new(staleness::Checker::default());
        let rate = self.scale.writes_per_s;
        let warmup = self.scale.fresh_warmup;
        let (mut all_stale, mut all_reads) = (0u64, 0u64);
        for busy in [true, false] {
            let workload = if busy {
                format!("busy: {} ConfigMap writes/s", fmt_num(rate))
            } else {
                format!(
                    "quiet: no ConfigMap writes, {} Secret writes/s",
                    fmt_num(rate)
                )
            };
            let writes_each = (rate * 600.0) as u64;
            let first = self.seq.fetch_add(writes_each, Ordering::Relaxed);
            let writer = if busy {
                Writer::start(
                    &sim,
                    "configmaps",
                    cms.clone(),
                    rate,
                    first,
                    Some(checker.clone()),
                )
            } else {
                Writer::start(&sim, "secrets", secrets.clone(), rate, first, None)
            };
            for (op, path, is_get) in [("GET one", get.as_str(), true), ("LIST ns", list, false)] {
                let case = format!("{op}, {workload}");
                for target in TARGETS {
                    progress(format!("fresh {profile}: {case}: {target}"));
                    let (addr, pid) = match target {
                        SIM => (sim.addr(), None),
                        FORWARDING => (forwarding.addr, Some(forwarding.pid())),
                        PROBE_LAGGING => (probing_lagging.addr, Some(probing_lagging.pid())),
                        _ => (probing.addr, Some(probing.pid())),
                    };
                    // Warm up: a few reads while the writer runs (the first quiet read through
                    // kcache waits for the probe to give up before it is forwarded).
                    let until = Instant::now() + warmup;
                    while Instant::now() < until {
                        let _ = load::fetch(addr, path, Duration::from_secs(30)).await;
                    }
                    let cb = checker.clone();
                    let on_response: load::OnResponse = if is_get {
                        Arc::new(move |sent, status, body| cb.check_object(sent, status, body))
                    } else {
                        Arc::new(move |sent, status, body| cb.check(sent, status, body))
                    };
                    let counts = |c: &staleness::Checker| {
                        (
                            c.reads.load(Ordering::Relaxed),
                            c.stale_reads.load(Ordering::Relaxed),
                            c.unreadable.load(Ordering::Relaxed),
                        )
                    };
                    let before = counts(&checker);
                    let up_before = (upstream_requests(&sim), sim.bytes_sent(), sim.rv0_lists());
                    let (r, cpu) = self.measure(addr, path, pid, Some(on_response)).await;
                    let up_requests = upstream_requests(&sim) - up_before.0;
                    let up_bytes = sim.bytes_sent() - up_before.1;
                    let rv0 = sim.rv0_lists() - up_before.2;
                    let after = counts(&checker);
                    let (reads, stale, unreadable) =
                        (after.0 - before.0, after.1 - before.1, after.2 - before.2);
                    let per_read = |x: u64| x as f64 / r.ok.max(1) as f64;
                    let mut row = load_row(s, &case, target, &r, cpu);
                    row.set("upstream req per read", per_read(up_requests))
                        .set("upstream KB per read", per_read(up_bytes) / 1e3)
                        .set("reads checked", reads)
                        .set("stale reads", stale);
                    if rv0 > 0 {
                        row.note(format!("{rv0} RV=0 lists upstream"));
                    }
                    note_checked(&mut row, &checker, unreadable, stale, target == SIM);
                    self.report.push(row);
                    all_stale += stale;
                    all_reads += reads;
                }
            }
            let failed = writer.stop().await;
            if failed > 0 {
                self.report.notes.push(format!(
                    "fresh {profile}, {workload}: {failed} writes failed"
                ));
            }
        }
        self.report.notes.push(format!(
            "fresh, {profile}: {n} ConfigMaps in one namespace; the sim's replicas' watch caches lag {lag_label} \
             (requests alternate between them; each kcache's list and watch were pinned to one replica \
             as it started); each row is preceded by {} s of warm-up reads \
             (not counted); upstream columns are the sim's LIST+GET requests and response bytes \
             during the row divided by the reads",
            fmt_num(warmup.as_secs_f64())
        ));
        self.report.check(
            &format!("Consistent reads with lagging watch caches, {profile}: never stale"),
            "0 stale reads",
            format!("{all_stale} stale of {all_reads} reads checked"),
            Some(all_stale == 0 && all_reads > 0),
        );
        drop(probing);
        drop(probing_lagging);
        drop(forwarding);
        sim.shutdown().await;
        Ok(())
    }
}

/// The one Secret the workloads write as "another type" (Secrets are not cached): it moves the
/// upstream's revision past a quiet ConfigMap cache's, as a cluster's other writes do.
pub(crate) fn other_type_secret(sim: &Sim) -> Result<Value, String> {
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "bench-other", "namespace": "bench-1"},
        "type": "Opaque",
        "data": {"k": "dg=="},
    });
    sim.create("", "secrets", secret.clone())
        .map_err(|e| format!("creating the Secret: {e}"))?;
    Ok(secret)
}
