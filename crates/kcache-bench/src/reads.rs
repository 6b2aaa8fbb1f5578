//! The read scenarios: LIST all and GET by name against nginx and the sim.

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
            let nginx = self.nginx_rows(S, &case, "list.json", &body, true).await;
            drop(body);
            progress(format!("list {case}: sim"));
            let (sm, _) = self.measure(sim.addr(), path, None, None).await;

            let mut row = load_row(S, &case, "kcache", &kc, kc_cpu);
            if let Some(c) = cost {
                set_upstream(&mut row, c.requests, c.received_bytes, kc.ok);
            }
            row.note(&size);
            let ratio = nginx.best.map(|b| kc.rps() / b);
            if let Some(r) = ratio {
                row.ratio("kcache/best nginx", r);
            }
            if let Some(c) = nginx.copying {
                row.ratio("kcache/nginx sendfile off", kc.rps() / c);
            }
            row.ratio("kcache/sim", kc.rps() / sm.rps());
            self.report.push(row);
            for r in nginx.rows {
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
        let nginx = self.nginx_rows(S, &case, "object.json", &body, false).await;
        let mut unauthenticated_rps = None;
        for (label, path) in [("RV=0", rv0.as_str()), ("RV unset (consistent)", object)] {
            progress(format!("get: kcache {label}"));
            let (kc, cpu, cost) = self.measure_kcache(&k, path).await;
            let mut row = load_row(S, &case, &format!("kcache {label}"), &kc, cpu);
            if let Some(c) = cost {
                set_upstream(&mut row, c.requests, c.received_bytes, kc.ok);
            }
            let ratio = nginx.best.map(|b| kc.rps() / b);
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
        for r in nginx.rows {
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
        if let Some(b) = nginx.best {
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
