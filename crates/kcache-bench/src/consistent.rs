//! The `consistent` scenario: consistent reads (resourceVersion unset, kubectl's default) of
//! ConfigMaps, the sim directly vs through kcache, on each upstream profile (v1.28, v1.34)
//! side by side: LIST of all of them, LIST of one namespace and GET of one, with ConfigMaps
//! being written and without.
//!
//! Each profile's sim has the capacity a real apiserver of its version measured
//! (`StorageReads::measured`: consistent reads from etcd, the cost of writing a list per
//! object), and another type (a Secret) is written throughout at a low rate, as a real
//! cluster's leases and events are: a ConfigMap cache is then behind the upstream's revision
//! whenever no ConfigMap was written last. That is when a v1.34 consistent list (kcache's
//! freshness probe too) waits for the apiserver's next progress notification, and when kcache
//! cannot prove its cache current and forwards.
//!
//! Every row checks each answer against the ConfigMap writes acknowledged before its request
//! was sent (one checker per profile: the reads without writes must still show the earlier
//! writes) and counts the sim's LIST and GET requests per read (the reads themselves when
//! loading the sim; kcache's probes and forwarded reads otherwise); kcache rows also give
//! where kcache answered (`kcache_consistent_reads_total{outcome}`).

use super::fresh::Writer;
use super::*;
use kcache_sim::{Profile, StorageReads};

const SIM: &str = "sim (upstream)";
const KCACHE: &str = "kcache";
const FORWARDING: &str = "kcache forwarding all";

/// Writes of the other type (Secrets) per second, throughout.
const OTHER_WRITES_PER_S: f64 = 5.0;

/// One measured case.
struct Case {
    label: String,
    path: String,
    is_get: bool,
    /// ConfigMaps are written meanwhile.
    writes: bool,
}

/// What a target's row measured, for the profile's checks.
struct Measured {
    rps: f64,
    p99: Duration,
    stale: u64,
    upstream_per_read: f64,
}

impl Bench {
    pub(super) async fn consistent(&mut self) -> Result<(), String> {
        for profile in Profile::ALL {
            self.consistent_on(profile).await?;
        }
        Ok(())
    }

    async fn consistent_on(&mut self, profile: Profile) -> Result<(), String> {
        let s = format!("Consistent reads (RV unset), {profile} profile, 8 clients");
        let n = self.scale.consistent_objects;
        let spread = self.scale.consistent_namespaces;
        progress(format!(
            "consistent {profile}: seeding {n} ConfigMaps in {spread} namespaces"
        ));
        let sim = Sim::start(SimConfig {
            storage_reads: Some(StorageReads::measured(profile)),
            ..SimConfig::for_profile(profile)
        })
        .await
        .map_err(|e| format!("starting the sim: {e}"))?;
        let objects = seed::configmaps(n, spread, 3);
        let in_ns: Arc<Vec<Value>> = Arc::new(
            objects
                .iter()
                .filter(|o| o.resource == "configmaps" && o.namespace() == Some("bench-1"))
                .map(|o| o.object.clone())
                .collect(),
        );
        seed_sim(&sim, objects)?;
        let secret = super::fresh::other_type_secret(&sim)?;
        let other_first = self.seq.fetch_add(1_000_000, Ordering::Relaxed);
        let other = Writer::start(
            &sim,
            "secrets",
            Arc::new(vec![secret]),
            OTHER_WRITES_PER_S,
            other_first,
            None,
        );
        let kc = self
            .kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS]))
            .await?;
        let mut fwd_config = ChildConfig::caching(&[CONFIGMAPS]);
        fwd_config.forward_consistent = true;
        let forwarding = self.kcache(&sim, &fwd_config).await?;

        let name = in_ns[0]["metadata"]["name"]
            .as_str()
            .ok_or("a ConfigMap without a name")?
            .to_string();
        let rate = self.scale.writes_per_s;
        let list_ns = "/api/v1/namespaces/bench-1/configmaps".to_string();
        let get = format!("{list_ns}/{name}");
        let written = format!("{} ConfigMap writes/s", fmt_num(rate));
        // Written first, so that the reads without writes are checked against them too.
        let cases = [
            Case {
                label: format!("LIST ns ({} objects), {written}", in_ns.len()),
                path: list_ns.clone(),
                is_get: false,
                writes: true,
            },
            Case {
                label: format!("GET one, {written}"),
                path: get.clone(),
                is_get: true,
                writes: true,
            },
            Case {
                label: format!("LIST all ({} objects)", count_label(n)),
                path: "/api/v1/configmaps".into(),
                is_get: false,
                writes: false,
            },
            Case {
                label: format!("LIST ns ({} objects)", in_ns.len()),
                path: list_ns,
                is_get: false,
                writes: false,
            },
            Case {
                label: "GET one".into(),
                path: get,
                is_get: true,
                writes: false,
            },
        ];
        let checker = Arc::new(staleness::Checker::default());
        let warmup = self.scale.fresh_warmup;
        let mut checks = Vec::new();
        for case in &cases {
            let writer = case.writes.then(|| {
                let first = self.seq.fetch_add(1_000_000, Ordering::Relaxed);
                Writer::start(
                    &sim,
                    "configmaps",
                    in_ns.clone(),
                    rate,
                    first,
                    Some(checker.clone()),
                )
            });
            let mut targets = vec![SIM, KCACHE];
            if case.writes && !case.is_get {
                targets.push(FORWARDING);
            }
            let mut sim_result = None;
            let mut kcache_result = None;
            for target in targets {
                progress(format!("consistent {profile}: {}: {target}", case.label));
                let child = match target {
                    SIM => None,
                    KCACHE => Some(&kc),
                    _ => Some(&forwarding),
                };
                let addr = child.map_or(sim.addr(), |c| c.addr);
                // Warm up (not counted): the first read of a type kcache cannot prove current
                // waits for the probe before it is forwarded.
                let until = Instant::now() + warmup;
                while Instant::now() < until {
                    let _ = load::fetch(addr, &case.path, Duration::from_secs(30)).await;
                }
                let measured = self
                    .consistent_row(&s, case, target, &sim, child, &checker)
                    .await;
                match target {
                    SIM => sim_result = Some(measured),
                    KCACHE => kcache_result = Some(measured),
                    _ => {}
                }
            }
            if let Some(w) = writer {
                let failed = w.stop().await;
                if failed > 0 {
                    self.report.notes.push(format!(
                        "consistent {profile}, {}: {failed} writes failed",
                        case.label
                    ));
                }
            }
            if let (Some(sm), Some(kc)) = (sim_result, kcache_result) {
                let ratio = kc.rps / sm.rps.max(f64::MIN_POSITIVE);
                if let Some(row) = self
                    .report
                    .rows
                    .iter_mut()
                    .rev()
                    .find(|r| r.scenario == s && r.case == case.label && r.target == KCACHE)
                {
                    row.ratio("kcache/sim", ratio);
                }
                checks.push((case.label.clone(), ratio, sm, kc));
            }
        }
        let failed = other.stop().await;
        if failed > 0 {
            self.report.notes.push(format!(
                "consistent {profile}: {failed} Secret writes failed"
            ));
        }
        for (label, ratio, sm, kc) in checks {
            let extra_p99 = ms(kc.p99) - ms(sm.p99);
            let pass = ratio >= 0.95 && extra_p99 <= 5.0 && kc.stale == 0;
            let pass = pass && kc.upstream_per_read <= 1.0 + 1e-9;
            self.report.check(
                &format!("Consistent {label}, {profile}: kcache as fast as the sim, never stale, ≤ 1 upstream request per read"),
                "≥ 0.95× the sim's req/s, p99 ≤ the sim's + 5 ms, 0 stale, ≤ 1 upstream req per read",
                format!(
                    "{}×, p99 {} ms vs {} ms, {} stale, {} upstream req per read",
                    fmt_num(ratio),
                    fmt_num(ms(kc.p99)),
                    fmt_num(ms(sm.p99)),
                    kc.stale,
                    fmt_num(kc.upstream_per_read)
                ),
                Some(pass),
            );
        }
        drop(kc);
        drop(forwarding);
        sim.shutdown().await;
        self.report.notes.push(format!(
            "consistent, {profile}: the sim's capacity {:?}; {} Secret writes/s throughout; \
             each row is preceded by {} s of warm-up reads (not counted); `upstream req per \
             read` is the sim's LIST+GET requests during the row divided by the reads",
            StorageReads::measured(profile),
            fmt_num(OTHER_WRITES_PER_S),
            fmt_num(warmup.as_secs_f64())
        ));
        Ok(())
    }

    /// Load one target with one case's reads and push its row.
    async fn consistent_row(
        &mut self,
        s: &str,
        case: &Case,
        target: &str,
        sim: &Sim,
        child: Option<&KcacheChild>,
        checker: &Arc<staleness::Checker>,
    ) -> Measured {
        let cb = checker.clone();
        let on_response: load::OnResponse = if case.is_get {
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
        let before = counts(checker);
        let up_before = upstream_requests(sim);
        let k_before = match child {
            Some(k) => Some(outcomes(k).await),
            None => None,
        };
        let addr = child.map_or(sim.addr(), |c| c.addr);
        let (r, cpu) = self
            .measure(addr, &case.path, child.map(|c| c.pid()), Some(on_response))
            .await;
        let up = upstream_requests(sim) - up_before;
        let k_after = match child {
            Some(k) => Some(outcomes(k).await),
            None => None,
        };
        let after = counts(checker);
        let (reads, stale, unreadable) =
            (after.0 - before.0, after.1 - before.1, after.2 - before.2);
        let per_read = up as f64 / r.ok.max(1) as f64;
        let mut row = load_row(s, &case.label, target, &r, cpu);
        row.set("upstream req per read", per_read)
            .set("reads checked", reads)
            .set("stale reads", stale);
        if let (Some(b), Some(a)) = (k_before, k_after) {
            let d: Vec<f64> = a.iter().zip(&b).map(|(a, b)| a - b).collect();
            row.note(format!(
                "kcache answered {} from its cache, forwarded {} (+{} GETs at once, +{} lagging, +{} probe failed); {} probes",
                d[0], d[1], d[2], d[3], d[4], d[5]
            ));
        }
        note_checked(&mut row, checker, unreadable, stale, target == SIM);
        self.report.push(row);
        Measured {
            rps: r.rps(),
            p99: r.percentile(0.99),
            stale,
            upstream_per_read: per_read,
        }
    }
}

/// kcache's consistent-read outcomes so far (cache, forwarded, forwarded_get,
/// forwarded_lagging, forwarded_probe_failed) and its probes.
async fn outcomes(k: &KcacheChild) -> Vec<f64> {
    let mut v = Vec::new();
    for o in [
        "cache",
        "forwarded",
        "forwarded_get",
        "forwarded_lagging",
        "forwarded_probe_failed",
    ] {
        let label = format!("outcome=\"{o}\"");
        v.push(
            k.metric(&["kcache_consistent_reads_total{", &label])
                .await
                .unwrap_or(0.0),
        );
    }
    v.push(
        k.metric(&["kcache_upstream_requests_total{", "purpose=\"probe\""])
            .await
            .unwrap_or(0.0),
    );
    v
}
