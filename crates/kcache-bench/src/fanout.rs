//! The watch scenarios: fan-out over HTTP/1.1 and HTTP/2, node-scoped watchers, stalled
//! watchers; and the fan-out run they share (open, write at a rate, measure delivery and CPU).

use super::*;

/// What one fan-out run measured.
pub(super) struct FanRun {
    opened: usize,
    failed: usize,
    first_error: Option<String>,
    open_secs: f64,
    writes: u64,
    write_errors: u64,
    pub(super) delivery: Delivery,
    cpu_seconds: f64,
    pub(super) cores: f64,
    /// CPU of the bench process (watchers, writer, sim) over the same interval.
    bench_cores: f64,
    /// CPU of everything else on the machine over the same interval (normal, lower priority).
    others_cores: (f64, f64),
    pub(super) rss_peak: u64,
    /// The median of the RSS samples: the run's steady state, past the watches' opening.
    pub(super) rss_median: u64,
    /// What kcache cost its upstream while writing, by its own count.
    upstream: Option<kcache::UpstreamCost>,
}

/// Samples a process's RSS every 200 ms until stopped; returns the peak (and the median).
pub(super) struct RssSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(u64, Vec<u64>)>,
}

impl RssSampler {
    pub(super) fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let mut peak = RssPeak::default();
            let mut samples = Vec::new();
            // Bounded: at most an hour of samples.
            for _ in 0..18_000 {
                samples.push(peak.sample(pid));
                if s.load(Ordering::Relaxed) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (peak.peak, samples)
        });
        RssSampler { stop, task }
    }

    pub(super) async fn finish(self) -> u64 {
        self.finish_with_median().await.0
    }

    /// The peak and the median of the samples.
    pub(super) async fn finish_with_median(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let (peak, mut samples) = self.task.await.unwrap_or_default();
        samples.sort_unstable();
        (peak, samples.get(samples.len() / 2).copied().unwrap_or(0))
    }
}

impl FanRun {
    /// kcache's CPU time per event line delivered to a watcher while writing (the deliveries of
    /// the last writes, which arrive after the clock stopped, are few against the whole run).
    /// The classes of one [`Bench::fan_runs`] as one: their watchers, writes and deliveries
    /// summed (the CPU, memory and upstream figures are the run's, the same in each).
    pub(super) fn together(runs: &[&FanRun]) -> FanRun {
        let first = runs.first().copied();
        let mut delays: Vec<Duration> = runs
            .iter()
            .flat_map(|r| r.delivery.delays.iter().copied())
            .collect();
        delays.sort_unstable();
        let sum = |f: fn(&FanRun) -> u64| runs.iter().map(|r| f(r)).sum::<u64>();
        FanRun {
            opened: runs.iter().map(|r| r.opened).sum(),
            failed: runs.iter().map(|r| r.failed).sum(),
            first_error: runs.iter().find_map(|r| r.first_error.clone()),
            open_secs: first.map_or(0.0, |r| r.open_secs),
            writes: sum(|r| r.writes),
            write_errors: sum(|r| r.write_errors),
            delivery: Delivery {
                watchers: runs.iter().map(|r| r.delivery.watchers).sum(),
                expected: sum(|r| r.delivery.expected),
                delivered: sum(|r| r.delivery.delivered),
                ended_early: runs.iter().map(|r| r.delivery.ended_early).sum(),
                delays,
            },
            cpu_seconds: first.map_or(0.0, |r| r.cpu_seconds),
            cores: first.map_or(0.0, |r| r.cores),
            bench_cores: first.map_or(0.0, |r| r.bench_cores),
            others_cores: first.map_or((0.0, 0.0), |r| r.others_cores),
            rss_peak: first.map_or(0, |r| r.rss_peak),
            rss_median: first.map_or(0, |r| r.rss_median),
            upstream: first.and_then(|r| r.upstream),
        }
    }

    pub(super) fn cpu_per_delivery_us(&self) -> f64 {
        if self.delivery.delivered == 0 {
            return f64::NAN;
        }
        self.cpu_seconds / self.delivery.delivered as f64 * 1e6
    }
}

/// The i-th write of a fan-out run: its resourceVersion and key (see
/// [`watchers::write_at_rate`]).
pub(super) type Write<'a> = Box<dyn FnMut(u64) -> Result<(u64, usize), String> + 'a>;

/// One client class of a fan-out run: its watchers, and the writes they follow.
pub(super) struct Class<'a> {
    pub(super) target: &'a load::Target,
    pub(super) proto: Proto,
    pub(super) watches: Vec<(Option<usize>, String)>,
    /// Writes a second.
    pub(super) rate: f64,
    pub(super) write: Write<'a>,
}

impl Bench {
    /// Open `watches` on `addr`, write at `rate` for `secs` with `write`, wait for the tail,
    /// and measure delivery and the CPU of `pid` while writing.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn fan_run<F>(
        &self,
        k: &KcacheChild,
        target: &load::Target,
        proto: Proto,
        watches: Vec<(Option<usize>, String)>,
        rate: f64,
        secs: f64,
        write: F,
    ) -> FanRun
    where
        F: FnMut(u64) -> Result<(u64, usize), String>,
    {
        let class = Class {
            target,
            proto,
            watches,
            rate,
            write: Box::new(write),
        };
        let (mut runs, ()) = self.fan_runs(k, vec![class], secs, async {}).await;
        runs.remove(0)
    }

    /// Several client classes at once: every class's watchers opened, then every class's
    /// writes at its rate for `secs`, with `alongside` (other clients) running meanwhile; the
    /// tails waited for (5 s at most in all), and each class's delivery measured. The CPU,
    /// memory and upstream figures are the whole run's, the same in every class's [`FanRun`].
    pub(super) async fn fan_runs<T>(
        &self,
        k: &KcacheChild,
        classes: Vec<Class<'_>>,
        secs: f64,
        alongside: impl std::future::Future<Output = T>,
    ) -> (Vec<FanRun>, T) {
        let pid = k.pid();
        let sampler = RssSampler::start(pid);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let t = Instant::now();
        // The hard bound on every watcher, whatever happens.
        let until = t + Duration::from_secs(300) + Duration::from_secs_f64(secs);
        let mut fans = Vec::with_capacity(classes.len());
        let mut writers = Vec::with_capacity(classes.len());
        for c in classes {
            let fan = watchers::open_to(
                c.target,
                c.proto,
                c.watches,
                stop_rx.clone(),
                until,
                OPEN_PARALLEL,
            )
            .await;
            fans.push(fan);
            writers.push((c.rate, c.write));
        }
        let open_secs = t.elapsed().as_secs_f64();
        // Let the server finish setting up before the clock starts.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let cost_before = k.upstream_cost().await.ok();
        let cpu = CpuMeter::start(pid);
        let own_cpu = CpuMeter::start(std::process::id());
        let others = OthersMeter::start(&[pid]);
        let writes = futures::future::join_all(writers.into_iter().map(|(rate, write)| {
            watchers::write_at_rate(rate, (rate * secs).round() as u64, write)
        }));
        let (logs, out) = tokio::join!(writes, alongside);
        let (cpu_seconds, wall) = cpu.used();
        let cost_after = k.upstream_cost().await.ok();
        let bench_cores = own_cpu.cores();
        let others_cores = others.cores(cpu_seconds);
        // The last writes' deliveries: until all arrived, 5 s at most.
        let tail = tokio::time::Instant::now() + Duration::from_secs(5);
        for (fan, log) in fans.iter().zip(&logs) {
            let left = tail.saturating_duration_since(tokio::time::Instant::now());
            fan.wait_for_events(fan.expected(log), left).await;
        }
        let _ = stop_tx.send(true);
        let mut received = Vec::with_capacity(fans.len());
        let mut opened = Vec::with_capacity(fans.len());
        for fan in fans {
            opened.push((fan.tasks.len(), fan.failed, fan.first_error.clone()));
            received.push(fan.finish().await);
        }
        let (rss_peak, rss_median) = sampler.finish_with_median().await;
        let upstream = cost_before.zip(cost_after).map(|(b, a)| a - b);
        let runs = logs
            .iter()
            .zip(received)
            .zip(opened)
            .map(|((log, received), (opened, failed, first_error))| FanRun {
                opened,
                failed,
                first_error,
                open_secs,
                writes: log.writes.len() as u64,
                write_errors: log.failed,
                delivery: watchers::delivery(log, &received),
                cpu_seconds,
                cores: if wall > 0.0 { cpu_seconds / wall } else { 0.0 },
                bench_cores,
                others_cores,
                rss_peak,
                rss_median,
                upstream,
            })
            .collect();
        (runs, out)
    }

    /// A class's delivery in a run of several at once (its CPU is the run's, in
    /// [`Bench::fan_row`] of all of them).
    pub(super) fn delivery_row(scenario: &str, case: &str, target: &str, f: &FanRun) -> Row {
        let d = &f.delivery;
        let mut row = Row::new(scenario, case, target);
        row.set("watchers", f.opened as u64)
            .set("writes", f.writes)
            .set("delivered", format!("{}/{}", d.delivered, d.expected))
            .set("p50 ms", ms(d.percentile(0.5)))
            .set("p99 ms", ms(d.percentile(0.99)))
            .set("max ms", ms(d.max()));
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
        row
    }

    pub(super) fn fan_row(scenario: &str, case: &str, target: &str, f: &FanRun) -> Row {
        let d = &f.delivery;
        let mut row = Self::delivery_row(scenario, case, target, f);
        row.set("kcache CPU cores", f.cores)
            .set("kcache µs per delivery", f.cpu_per_delivery_us())
            .set("bench CPU cores", f.bench_cores)
            .set("others CPU", f.others_cores.0)
            .set("niced CPU", f.others_cores.1)
            .set("open s", f.open_secs);
        // Per delivered event: what the fan-out costs the upstream (its one watch).
        if let Some(c) = &f.upstream {
            set_upstream(&mut row, c.requests, c.received_bytes, d.delivered);
        }
        note_disturbed(&mut row, Some(f.others_cores.0));
        row
    }

    pub(super) async fn watch(&mut self) -> Result<(), String> {
        const S: &str = "WATCH fan-out (ConfigMaps, all namespaces)";
        let n = self.scale.watch_objects;
        let (sim, cms, plain) = self.configmaps_behind_kcache(n, 4).await?;
        // HTTP/2 over TLS, as client-go connects: a second kcache of the same sim serving
        // HTTPS (callers unauthenticated: authentication costs only when a watch opens).
        let files = https::HttpsFiles::new()?;
        let mut config = ChildConfig::caching(&[CONFIGMAPS]);
        config.tls = Some((files.cert.clone(), files.key.clone()));
        let secure = if self.scale.watch_cases.iter().any(|c| c.tls) {
            Some(self.kcache(&sim, &config).await?)
        } else {
            None
        };
        let (rate, secs) = (self.scale.watch_rate, self.scale.watch_secs);
        let most = self.scale.watch_cases.iter().map(|c| c.watchers).max();
        for WatchCase {
            proto,
            watchers: wanted,
            tls,
        } in self.scale.watch_cases.clone()
        {
            let count = match proto {
                Proto::H1 => self.cap_watchers(wanted, "watch"),
                Proto::H2 { .. } => wanted,
            };
            let proto_label = match (proto, tls) {
                (Proto::H1, _) => "HTTP/1.1, 1 conn each".to_string(),
                (Proto::H2 { connections }, false) => {
                    format!("HTTP/2 (h2c), {connections} conns")
                }
                (Proto::H2 { connections }, true) => {
                    format!("HTTP/2 over TLS, {connections} conns")
                }
            };
            let (k, target) = match (&secure, tls) {
                (Some(s), true) => (s, files.target(s.addr, None)),
                _ => (&plain, load::Target::plain(plain.addr)),
            };
            let case = format!(
                "{} watchers, {proto_label}, {} updates/s",
                count_label(count),
                fmt_num(rate)
            );
            progress(format!("watch: {case}"));
            let rv = list_rv(plain.addr, "/api/v1/configmaps").await?;
            let path =
                format!("/api/v1/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=900");
            let watches = vec![(None, path); count];
            let f = self
                .fan_run(k, &target, proto, watches, rate, secs, |i| {
                    let o = &cms[(i as usize * 7) % cms.len()];
                    bump(&sim, "configmaps", o, self.next_seq()).map(|rv| (rv, 0))
                })
                .await;
            let mut row = Self::fan_row(S, &case, "kcache", &f);
            row.set("kcache RSS MB", mb(f.rss_peak));
            // Beside HTTP/1.1 fan-out: the least one write per delivery costs here.
            let floor = if proto == Proto::H1 && count >= 1000 {
                Some(self.floor_row(S, &case, count, rate, secs, &cms[0]).await)
            } else {
                None
            };
            if let Some((_, Some(us))) = &floor {
                row.ratio("kcache/floor µs per delivery", f.cpu_per_delivery_us() / us);
            }
            self.report.push(row);
            if let Some((floor_row, _)) = floor {
                self.report.push(floor_row);
            }
            // The targets: CPU per delivery on HTTP/1.1 and on HTTP/2 over TLS, and the
            // delivery delay of the largest fan-out. HTTP/1.1 costs one write per delivery,
            // whatever the server (the floor row), so its goal is looser than HTTP/2's.
            let per_delivery = f.cpu_per_delivery_us();
            let budget = match (proto, tls) {
                (Proto::H1, _) => Some(5.0),
                (Proto::H2 { .. }, true) => Some(2.0),
                (Proto::H2 { .. }, false) => None,
            };
            if let Some(budget) = budget.filter(|_| count >= 1000) {
                self.report.check(
                    &format!("{case}: kcache CPU per delivered event"),
                    &format!("≤ {} µs", fmt_num(budget)),
                    format!("{} µs", fmt_num(per_delivery)),
                    Some(per_delivery <= budget),
                );
            }
            let p99 = ms(f.delivery.percentile(0.99));
            // client-go's own form (HTTP/2 over TLS) at the largest fan-out: delivered soon too.
            if matches!(proto, Proto::H2 { .. }) && tls && Some(wanted) == most {
                self.report.check(
                    &format!("{case}: p99 delivery"),
                    "≤ 50 ms",
                    format!("{} ms", fmt_num(p99)),
                    Some(p99 <= 50.0),
                );
            }
            if count >= 1000 && Some(wanted) == most {
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
        drop(secure);
        drop(plain);
        sim.shutdown().await;
        Ok(())
    }

    /// The floor of HTTP/1.1 fan-out (`floor.rs`) for `count` watchers at `rate` for `secs`,
    /// writing the event line of `object`: its row and µs per delivery. Both ends of each
    /// connection are in the bench process, so it opens at most half what `ulimit -n` allows.
    async fn floor_row(
        &self,
        scenario: &str,
        case: &str,
        count: usize,
        rate: f64,
        secs: f64,
        object: &Value,
    ) -> (Row, Option<f64>) {
        let label = "floor: one write per delivery, no server";
        progress(format!("watch: {case}: {label}"));
        let connections = count.min(self.fd_limit_for_pairs());
        let mut line =
            serde_json::to_vec(&serde_json::json!({"type": "MODIFIED", "object": object}))
                .unwrap_or_default();
        line.push(b'\n');
        let mut row = Row::new(scenario, case, label);
        match floor::run(connections, rate, secs, &line).await {
            Ok(r) => {
                let what = format!(
                    "one thread writing a {} B event line as an HTTP/1.1 chunk to each connection; its CPU per delivered chunk",
                    line.len()
                );
                let us = r.fill(&mut row, what);
                (row, Some(us))
            }
            Err(e) => {
                row.note(format!("not measured: {e}"));
                (row, None)
            }
        }
    }

    pub(super) async fn node(&mut self) -> Result<(), String> {
        const S: &str = "Node-scoped pod watchers (fieldSelector=spec.nodeName)";
        let nodes = self.cap_watchers(self.scale.node_watchers, "node");
        let n = self.scale.node_pods;
        progress(format!("node: seeding {n} pods on {nodes} nodes"));
        let sim = start_sim().await?;
        let objects = seed::pods(n, nodes, 10, 5);
        let pods: Vec<(Value, usize)> = objects
            .iter()
            .filter(|o| o.resource == "pods")
            .filter_map(|o| Some((o.object.clone(), scheduled_on(o)?)))
            .collect();
        if pods.is_empty() {
            return Err("no scheduled pods in the seed".into());
        }
        seed_sim(&sim, objects)?;
        let k = self.kcache(&sim, &ChildConfig::caching(&[PODS])).await?;
        let rv = list_rv(k.addr, "/api/v1/pods").await?;
        let watches = node_pod_watches(nodes, rv, "");
        let (rate, secs) = (self.scale.node_rate, self.scale.node_secs);
        let case = format!(
            "{} watchers, {} pods, {} updates/s",
            count_label(nodes),
            count_label(pods.len()),
            fmt_num(rate)
        );
        progress(format!("node: {case}"));
        let f = self
            .fan_run(
                &k,
                &load::Target::plain(k.addr),
                Proto::H1,
                watches,
                rate,
                secs,
                |i| {
                    // A stride that visits every pod (and so every node) in turn.
                    let (o, node) = &pods[(i as usize * 7919) % pods.len()];
                    bump(&sim, "pods", o, self.next_seq()).map(|rv| (rv, *node))
                },
            )
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

    pub(super) async fn stalled(&mut self) -> Result<(), String> {
        const S: &str = "Stalled watchers during a fan-out";
        let n = self.scale.stalled_objects;
        let (sim, cms, k) = self.configmaps_behind_kcache(n, 8).await?;
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
                    &k,
                    &load::Target::plain(k.addr),
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

/// The node a seed Pod is scheduled to, by its 1-based index (`node-N`).
pub(super) fn scheduled_on(pod: &SeedObject) -> Option<usize> {
    let node = pod.object["spec"]["nodeName"].as_str()?;
    node.strip_prefix("node-")?.parse().ok()
}

/// One watch per node of the Pods scheduled to it, from `rv`, keyed by the node's index, as a
/// kubelet watches; `extra` is appended to each query (`&allowWatchBookmarks=true`, say).
pub(super) fn node_pod_watches(nodes: usize, rv: u64, extra: &str) -> Vec<(Option<usize>, String)> {
    (1..=nodes)
        .map(|i| {
            (
                Some(i),
                format!("/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=900&fieldSelector=spec.nodeName%3Dnode-{i}{extra}"),
            )
        })
        .collect()
}
