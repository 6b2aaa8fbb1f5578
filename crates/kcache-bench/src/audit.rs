//! The audit trail's cost: GET RV=0 by an authenticated caller (auth delegated) through two
//! kcaches over the same sim, one without an audit trail and one auditing every request at
//! level Metadata into a log file, measured in turn (ABBAAB…) so that the machine's drift, and
//! whatever the target measured first leaves behind, fall on both. Reported: req/s of each,
//! their ratio (of the median rounds), and the CPU each audit event costs (kcache's CPU per
//! request with the trail, less without it).

use super::kcache::ChildConfig;
use super::reads::bench_rbac;
use super::{load_row, progress, Bench, CONFIGMAPS};

/// Rounds of each target, measured in turn.
const ROUNDS: usize = 4;

impl Bench {
    pub(super) async fn audit(&mut self) -> Result<(), String> {
        const S: &str = "audit: GET RV=0, auth delegated, 8 clients";
        let n = self.scale.get_objects;
        progress(format!("audit: seeding {n} ConfigMaps"));
        let (sim, _, k) = self.configmaps_behind_kcache(n, 2).await?;
        drop(k);
        sim.set_rbac(Some(bench_rbac()));
        let mut plain = ChildConfig::caching(&[CONFIGMAPS]);
        plain.delegated_with_token = Some("kcache-token".into());
        let mut audited = plain.clone();
        audited.audit = Some("Metadata");
        let a = self.kcache(&sim, &plain).await?;
        let b = self.kcache(&sim, &audited).await?;
        let path = "/api/v1/namespaces/bench-1/configmaps/cm-000001?resourceVersion=0";
        let case = "one ConfigMap";
        let token = http::HeaderValue::from_static("Bearer bench-token");
        // Per target: (req/s, CPU seconds per request) of each round.
        let mut rounds: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
        let written_before = b
            .metric(&["kcache_audit_events_total{", "result=\"written\""])
            .await
            .unwrap_or(0.0);
        let mut requests_b = 0;
        for round in 0..ROUNDS {
            // Each round reverses the order of the one before (ABBAAB…): a target measured
            // second in every round would bear whatever the first leaves behind (a warmer
            // load generator, the other's connections closing).
            let mut order = [(0, &a, "no audit"), (1, &b, "audit Metadata, log")];
            if round % 2 == 1 {
                order.reverse();
            }
            for (i, k, label) in order {
                progress(format!("audit: round {}, {label}", round + 1));
                let (r, cpu) = self
                    .measure_pids(k.addr, path, &[k.pid()], None, Some(token.clone()))
                    .await;
                if i == 1 {
                    requests_b += r.ok + r.errors;
                }
                if let Some(c) = cpu.filter(|_| r.rps() > 0.0) {
                    rounds[i].push((r.rps(), c / r.rps()));
                }
                let mut row = load_row(S, case, &format!("kcache, {label}"), &r, cpu);
                row.note(format!("round {}", round + 1));
                self.report.push(row);
            }
        }
        let written = b
            .metric(&["kcache_audit_events_total{", "result=\"written\""])
            .await
            .unwrap_or(0.0)
            - written_before;
        // The median round of each: one disturbed round (a round's req/s moves by up to 10 %
        // on this machine with nothing changed) does not decide the ratio.
        let median = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
            let mut x: Vec<f64> = v.iter().map(f).collect();
            x.sort_by(f64::total_cmp);
            let n = x.len();
            (n > 0).then(|| (x[(n - 1) / 2] + x[n / 2]) / 2.0)
        };
        let rps = (median(&rounds[0], |r| r.0), median(&rounds[1], |r| r.0));
        let cpu = (median(&rounds[0], |r| r.1), median(&rounds[1], |r| r.1));
        let ratio = rps.0.zip(rps.1).map(|(a, b)| b / a);
        // One event per request: the policy leaves out the RequestReceived stage.
        let per_event_us = cpu.0.zip(cpu.1).map(|(a, b)| (b - a) * 1e6);
        self.report.check(
            "audit at Metadata: GET RV=0 req/s with the trail ≥ 95% of without",
            "≥ 0.95",
            ratio.map_or("not measured".into(), |r| format!("{r:.3}×")),
            ratio.map(|r| r >= 0.95),
        );
        self.report.check(
            "audit at Metadata: CPU per event",
            "≤ 2 µs",
            per_event_us.map_or("not measured".into(), |u| {
                format!("{u:.2} µs ({written:.0} events for {requests_b} requests)")
            }),
            per_event_us.map(|u| u <= 2.0),
        );
        drop((a, b));
        sim.shutdown().await;
        Ok(())
    }
}
