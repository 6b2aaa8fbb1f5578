//! The `forward` scenario: what kcache's hop adds to a request it passes to the upstream.
//!
//! Two GETs kcache forwards, a namespace (a type it does not cache) and a consistent GET of a
//! cached ConfigMap (resourceVersion unset, which kcache forwards at once in front of the
//! sim's v1.34 profile), each sent to the sim directly, through nginx as a reverse proxy and through
//! kcache. nginx is the reference for a hop that only forwards (one process, kept-alive
//! upstream connections, unbuffered answers). One client shows the latency a hop adds to a
//! request; eight, its CPU per request when the hop is busy.

use super::*;
use kcache_sim::Profile;

/// The two forwarded reads: (case, path).
const READS: [(&str, &str); 2] = [
    (
        "GET a namespace (type not cached)",
        "/api/v1/namespaces/bench-1",
    ),
    (
        "GET one ConfigMap, RV unset (consistent)",
        "/api/v1/namespaces/bench-1/configmaps/cm-000001",
    ),
];

impl Bench {
    pub(super) async fn forward(&mut self) -> Result<(), String> {
        const S: &str = "Forwarded requests: the hop";
        let n = self.scale.get_objects;
        progress(format!("forward: seeding {n} ConfigMaps"));
        // v1.34: a consistent GET is forwarded at once (the upstream answers kcache's probe
        // from its watch cache, which costs more than the GET).
        let sim = Sim::start(SimConfig::for_profile(Profile::V1_34))
            .await
            .map_err(|e| format!("starting the sim: {e}"))?;
        seed_sim(&sim, seed::configmaps(n, 10, 3))?;
        let k = self
            .kcache(&sim, &ChildConfig::caching(&[CONFIGMAPS]))
            .await?;
        let proxy = match &self.nginx {
            Ok(binary) => Some(nginx::Nginx::start_proxy(binary, sim.addr()).await?),
            Err(_) => None,
        };
        for (read, path) in READS {
            for clients in [1, CLIENTS] {
                let case = format!("{read}, {clients} client{}", plural(clients));
                progress(format!("forward: {case}"));
                let (direct, _) = self.measure_clients(sim.addr(), path, clients, &[]).await;
                let added = |r: &LoadResult| ms(r.percentile(0.5)) - ms(direct.percentile(0.5));
                let mut row = load_row(S, &case, "sim (upstream), direct", &direct, None);
                row.note("in the bench process");
                self.report.push(row);
                let mut nginx_us = None;
                if let Some(p) = &proxy {
                    let (r, cores) = self
                        .measure_clients(p.addr, path, clients, &[p.pid()])
                        .await;
                    let mut row = load_row(S, &case, "nginx reverse proxy", &r, cores);
                    nginx_us = cpu_per_request_us(&r, cores);
                    row.set("added p50 ms", added(&r))
                        .set("CPU µs per request", nginx_us);
                    self.report.push(row);
                }
                let before = k.upstream_cost().await.ok();
                let (r, cores) = self
                    .measure_clients(k.addr, path, clients, &[k.pid()])
                    .await;
                let after = k.upstream_cost().await.ok();
                let kcache_us = cpu_per_request_us(&r, cores);
                let mut row = load_row(S, &case, "kcache", &r, cores);
                row.set("added p50 ms", added(&r))
                    .set("CPU µs per request", kcache_us);
                if let Some(c) = before.zip(after).map(|(b, a)| a - b) {
                    set_upstream(&mut row, c.requests, c.received_bytes, r.ok);
                }
                if let Some((kc, ng)) = kcache_us.zip(nginx_us) {
                    row.ratio("kcache/nginx CPU per request", kc / ng);
                }
                self.report.push(row);
                if read.starts_with("GET one ConfigMap") && clients == 1 {
                    let a = added(&r);
                    self.report.check(
                        "Forwarded consistent GET, 1 client: kcache's added p50",
                        "≤ 0.2 ms",
                        format!("{} ms", fmt_num(a)),
                        Some(a <= 0.2),
                    );
                }
                if read.starts_with("GET one ConfigMap") && clients == CLIENTS {
                    self.report.check(
                        "Forwarded consistent GET, 8 clients: kcache CPU per forwarded request",
                        "≤ 30 µs",
                        kcache_us.map_or("no CPU reading".into(), |u| {
                            format!(
                                "{} µs (nginx reverse proxy: {})",
                                fmt_num(u),
                                nginx_us.map_or("missing".into(), |n| format!("{} µs", fmt_num(n)))
                            )
                        }),
                        kcache_us.map(|u| u <= 30.0),
                    );
                }
            }
        }
        drop(proxy);
        drop(k);
        sim.shutdown().await;
        Ok(())
    }

    /// Load one target with `clients` connections for the phase duration, with the CPU used by
    /// `pids` (if any).
    async fn measure_clients(
        &self,
        addr: std::net::SocketAddr,
        path: &str,
        clients: usize,
        pids: &[u32],
    ) -> (LoadResult, Option<f64>) {
        let spec = LoadSpec::new(addr, path, clients, self.scale.phase);
        self.measure_spec(spec, pids).await
    }
}

/// CPU time per answered request, in µs, from the cores a target used while loaded.
fn cpu_per_request_us(r: &LoadResult, cores: Option<f64>) -> Option<f64> {
    let rps = r.rps();
    cores.filter(|_| rps > 0.0).map(|c| c / rps * 1e6)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
