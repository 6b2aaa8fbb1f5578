//! The read scenarios: LIST all and GET by name against nginx and the sim, and consistent
//! LIST under writes against forwarding, with the staleness check.

use super::*;

impl Bench {
    pub(super) async fn list(&mut self) -> Result<(), String> {
        const S: &str = "LIST all (RV=0), 8 clients";
        for n in self.scale.list_sizes.clone() {
            let case = format!("N={}", count_label(n));
            progress(format!("list {case}: seeding the sim"));
            let (sim, _, k) = self.configmaps_behind_kcache(n, 1).await?;
            let path = "/api/v1/configmaps?resourceVersion=0";
            let (status, body) = load::fetch(k.addr, path, Duration::from_secs(120)).await?;
            if status != 200 {
                return Err(format!("kcache LIST answered {status}"));
            }
            let body_len = body.len();
            let size = format!("{:.1} MB per list", mb(body_len as u64));
            progress(format!("list {case}: kcache ({size})"));
            let (kc, kc_cpu, cost) = self.measure_kcache(&k, path).await;
            let (nginx_rows, nginx_best) = self.nginx_rows(S, &case, "list.json", &body).await;
            drop(body);
            progress(format!("list {case}: sim"));
            let (sm, _) = self.measure(sim.addr(), path, None, None).await;

            let mut row = load_row(S, &case, "kcache", &kc, kc_cpu);
            if let Some(c) = cost {
                set_upstream(&mut row, c.requests, c.received_bytes, kc.ok);
            }
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
            set_upstream_direct(&mut row, body_len);
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

    pub(super) async fn get(&mut self) -> Result<(), String> {
        const S: &str = "GET by name, 8 clients";
        let n = self.scale.get_objects;
        progress(format!("get: seeding {n} ConfigMaps"));
        let (sim, _, k) = self.configmaps_behind_kcache(n, 2).await?;
        let object = "/api/v1/namespaces/bench-1/configmaps/cm-000001";
        let rv0 = format!("{object}?resourceVersion=0");
        let (status, body) = load::fetch(k.addr, &rv0, Duration::from_secs(10)).await?;
        if status != 200 {
            return Err(format!("kcache GET answered {status}"));
        }
        let case = format!("{} B object", body.len());
        let (nginx_rows, nginx_best) = self.nginx_rows(S, &case, "object.json", &body).await;
        let mut unauthenticated_rps = None;
        for (label, path) in [("RV=0", rv0.as_str()), ("RV unset (consistent)", object)] {
            progress(format!("get: kcache {label}"));
            let (kc, cpu, cost) = self.measure_kcache(&k, path).await;
            let mut row = load_row(S, &case, &format!("kcache {label}"), &kc, cpu);
            if let Some(c) = cost {
                set_upstream(&mut row, c.requests, c.received_bytes, kc.ok);
            }
            let ratio = nginx_best.map(|b| kc.rps() / b);
            if let Some(r) = ratio {
                row.ratio("kcache/best nginx", r);
            }
            unauthenticated_rps.get_or_insert(kc.rps());
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
        set_upstream_direct(&mut row, body.len());
        row.note("in the bench process");
        self.report.push(row);
        drop(k);

        // The same GET with callers authenticated and authorized (auth: delegated): the sim
        // now checks tokens and RBAC, so kcache asks it one TokenReview and one
        // SubjectAccessReview per TTL and answers from remembered verdicts in between.
        sim.set_rbac(Some(bench_rbac()));
        let mut config = ChildConfig::caching(&[CONFIGMAPS]);
        config.delegated_with_token = Some("kcache-token".into());
        let k = self.kcache(&sim, &config).await?;
        progress("get: kcache RV=0, auth delegated");
        let token = http::HeaderValue::from_static("Bearer bench-token");
        let before = k.upstream_cost().await.ok();
        let (kc, cpu) = self
            .measure_pids(k.addr, &rv0, &[k.pid()], None, Some(token))
            .await;
        let after = k.upstream_cost().await.ok();
        let mut row = load_row(S, &case, "kcache RV=0, auth delegated", &kc, cpu);
        // Token and access reviews: one each per verdict TTL, whatever the read rate.
        if let Some(c) = before.zip(after).map(|(b, a)| a - b) {
            set_upstream(&mut row, c.requests, c.received_bytes, kc.ok);
        }
        if let Some(b) = nginx_best {
            row.ratio("kcache/best nginx", kc.rps() / b);
        }
        if let Some(plain) = unauthenticated_rps {
            row.ratio("vs auth none", kc.rps() / plain);
        }
        self.report.push(row);
        drop(k);
        sim.shutdown().await;
        Ok(())
    }

    pub(super) async fn consistent(&mut self) -> Result<(), String> {
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
            if let Some(first) = checker.first_stale_answer() {
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
}

/// The sim's RBAC table for the authenticated GET: kcache's own identity reads everything and
/// may ask reviews; the bench's client may read the ConfigMaps of its namespace.
/// The bench client may read ConfigMaps everywhere; kcache may review its tokens.
pub(super) fn bench_rbac() -> kcache_sim::rbac::Rbac {
    use kcache_sim::rbac::{Rbac, Subject};
    Rbac::new()
        .proxy("kcache-token", "kcache")
        .token("bench-token", "bench-client", &[])
        .allow(
            Subject::User("bench-client".into()),
            &["get", "list", "watch"],
            &[""],
            &["configmaps"],
            None,
        )
}
