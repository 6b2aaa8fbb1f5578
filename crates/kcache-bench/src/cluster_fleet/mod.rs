//! `kcache bench --kubeconfig PATH --scenarios fleet [--nodes N] [--churn N]`: the `fleet`
//! scenario's node clients against a real cluster, directly and through a kcache the bench
//! starts in front of it, one after the other, with what each costs the apiserver.
//!
//! The bench writes into the cluster the fleet the simulated scenario starts from (its
//! objects from `seed::fleet`, 500 nodes by default: namespaces, Nodes, Services without
//! selectors, their EndpointSlices and 30 Pods bound to each node), every name starting with
//! a prefix of its own (`kcache-fleet-<time>-<pid>`) and every object labelled
//! `app.kubernetes.io/created-by: kcache-bench`, and deletes them all at the end, after an
//! error or Ctrl-C too. The Nodes are unschedulable and tainted `NoSchedule`: no scheduler
//! places a pod on them. A cluster's controllers may still act on them (the node lifecycle
//! controller marks them NotReady); run it on a cluster kept for tests.
//!
//! The clients, each on a connection of its own over HTTP/2 with a token of its own (a
//! ServiceAccount per node for its kubelet, one for the kube-proxies with a token per node,
//! all in the namespace `<prefix>-system`, allowed to read what they read by one
//! ClusterRole), reading protobuf as client-go's typed clients do:
//! - one kubelet per node: its Pods (`fieldSelector=spec.nodeName=<node>`);
//! - one kube-proxy per node: every EndpointSlice.
//!
//! For each target (the apiserver, then kcache over HTTPS with delegated authentication):
//! 1. **start**: every client lists (RV=0, as client-go's reflector starts) and watches from
//!    there, all at once;
//! 2. **churn**: the load test's Pod life (created on a node, running, ready, deleted with no
//!    grace period, a step a second apart) at its pace, and as many EndpointSlice updates, the
//!    slices in turn: delivery delay from each write's sending to its event's arrival, per
//!    class;
//! 3. **herd**: every client's connection dropped at once, and every watch opened again from
//!    the last resourceVersion it saw, all at once;
//! 4. through kcache only, the herd against a kcache killed (SIGKILL) and started again over
//!    its `persistDir`: how long until ready and every client synced, and what the restart
//!    and the herd cost the apiserver.
//!
//! The apiserver's CPU and memory come from its own `/metrics` (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`), read with the kubeconfig's credentials: on a cluster of
//! several replicas, that of whichever replica answers the bench's read; etcd's not at all.

mod apiserver;
mod objects;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{json, Value};

use super::cluster::{connect, CallError, Cluster};
use super::kcache::{ChildConfig, KcacheChild};
use super::load::{self, Target};
use super::procstat::CpuMeter;
use super::report::{fmt_num, Report, Row};
use super::watchers::{self, Delivery, Proto, WriteLog};
use super::{mb, ms, progress};
use apiserver::{apiserver_use, ApiserverSampler};

/// What kcache caches: what the node clients read.
const TYPES: [(&str, &str, &str); 2] = [
    ("", "v1", "pods"),
    ("discovery.k8s.io", "v1", "endpointslices"),
];
/// Cached beside the types the clients read: with the accounts in its cache, kcache checks
/// the clients' ServiceAccount tokens itself once one like them has been reviewed.
const ACCOUNTS: (&str, &str, &str) = ("", "v1", "serviceaccounts");
const DIRECT: &str = "apiserver (direct)";
const KCACHE: &str = "kcache HTTPS, auth delegated";
/// The label on everything the bench creates.
const CREATED_BY: &str = "app.kubernetes.io/created-by";
/// Objects created at once while seeding and deleting.
const PARALLEL: usize = 32;
const PODS: &str = "/api/v1/pods";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";
const START: &str =
    "fleet (cluster): every node client listing (RV=0) and watching at once, HTTP/2, protobuf";
const HERD: &str = "fleet (cluster): the herd, every node client re-watching at once from its last resourceVersion, HTTP/2, protobuf";
const RESTARTED: &str = "fleet (cluster): the herd against a kcache restarted over its persistDir (SIGKILL, started again), HTTP/2, protobuf";
const CHURN: &str =
    "fleet (cluster): node clients under the load test's Pod churn, HTTP/2, protobuf";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// Options of `kcache bench --kubeconfig … --scenarios fleet`.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    pub kubeconfig: PathBuf,
    pub context: Option<String>,
    /// The kcache executable to start as `kcache serve`.
    pub exe: PathBuf,
    pub nodes: usize,
    /// Seconds of churn per target.
    pub secs: f64,
    /// Pods created (and deleted) a second during the churn; each also gets two status
    /// updates and an EndpointSlice update.
    pub pods_per_sec: f64,
}

impl FleetOptions {
    /// Full length: 30 s of churn at the load test's 100 Pods a second.
    pub fn standard(kubeconfig: PathBuf, nodes: usize) -> FleetOptions {
        FleetOptions {
            kubeconfig,
            context: None,
            exe: PathBuf::new(),
            nodes,
            secs: 30.0,
            pods_per_sec: 100.0,
        }
    }

    /// A smoke run: 5 s of churn.
    pub fn quick(kubeconfig: PathBuf, nodes: usize) -> FleetOptions {
        FleetOptions {
            secs: 5.0,
            ..FleetOptions::standard(kubeconfig, nodes)
        }
    }
}

/// Run, print the tables, write the JSON.
pub async fn run_and_print(
    opts: &FleetOptions,
    json: Option<&std::path::Path>,
) -> Result<(), String> {
    super::publish(&run(opts).await?, json)
}

/// Run the scenario and return its report (not printed). Whatever happens, what the bench
/// created is deleted before this returns.
pub async fn run(opts: &FleetOptions) -> Result<Report, String> {
    let cluster = connect(&opts.kubeconfig, opts.context.as_deref()).await?;
    let fleet = Fleet::new(&cluster, opts.nodes);
    let mut report = Report {
        machine: super::machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        ..Report::default()
    };
    report.notes.push(format!(
        "cluster: {} ({}); objects of the bench's own under the prefix {}, deleted at the end",
        cluster.url, cluster.auth, fleet.prefix
    ));
    let result = tokio::select! {
        r = fleet.run(opts, &mut report) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted (Ctrl-C)".into()),
    };
    progress(format!("fleet: deleting everything under {}", fleet.prefix));
    match fleet.delete().await {
        Ok(note) => report.notes.push(note),
        Err(e) => report
            .notes
            .push(format!("deleting the bench's objects failed: {e}")),
    }
    result.map(|()| report)
}

/// The bench's fleet in one cluster: its names, and what it created.
struct Fleet<'a> {
    cluster: &'a Cluster,
    prefix: String,
    nodes: usize,
    /// The namespaces created, the identities' first.
    namespaces: std::sync::Mutex<Vec<String>>,
}

impl<'a> Fleet<'a> {
    fn new(cluster: &'a Cluster, nodes: usize) -> Fleet<'a> {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Fleet {
            cluster,
            // Unique to this run: the clean-up deletes by it.
            prefix: format!("kcache-fleet-{secs}-{}", std::process::id()),
            nodes: nodes.max(1),
            namespaces: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn node(&self, i: usize) -> String {
        format!("{}-node-{i}", self.prefix)
    }

    fn system(&self) -> String {
        format!("{}-system", self.prefix)
    }

    async fn run(&self, opts: &FleetOptions, report: &mut Report) -> Result<(), String> {
        let seeded = self.seed().await?;
        let clients = self.identities().await?;
        let base = &self.cluster.base_path;
        let direct = Side {
            label: DIRECT,
            kubelets: clients.kubelets(self.cluster.target.clone()),
            proxies: clients.proxies(self.cluster.target.clone()),
            base: base.clone(),
            kcache: None,
        };
        let direct_run = self.side(opts, &direct, &seeded).await?;
        progress("fleet: starting kcache in front of the cluster");
        let files = super::https::HttpsFiles::new()?;
        let mut config = ChildConfig::caching(&[TYPES[0], TYPES[1], ACCOUNTS]);
        // kcache's own identity is the kubeconfig's.
        config.delegated_with_token = Some(String::new());
        config.tls = Some((files.cert.clone(), files.key.clone()));
        // Its state on disk, for the restarted herd.
        let store = super::TempDir::new("persist")?;
        config.persist_dir = Some(store.path().to_owned());
        let k = KcacheChild::start_with_kubeconfig(
            &opts.exe,
            &opts.kubeconfig,
            opts.context.as_deref(),
            &config,
            Duration::from_secs(600),
        )
        .await?;
        let kcache_run = {
            let through = Side::through(&clients, &files, &k);
            // The clients have been reading through kcache for a while: its protobuf copies of
            // the two types are up.
            for c in [PODS, SLICES] {
                super::fleet::warm_protobuf(&k, &through.kubelets_or_proxies(c), c).await?;
            }
            // And its state is on disk: what it writes from here on are the changes.
            committed(&k).await?;
            self.side(opts, &through, &seeded).await?
        };
        let restarted = self
            .restarted_herd(opts, &clients, &files, &config, k)
            .await?;
        self.report(opts, report, &direct_run, &kcache_run);
        restarted.report(report, self.nodes, &direct_run.herd);
        Ok(())
    }

    /// The herd against a kcache restarted over its persistDir, as a rollout or a crash
    /// restarts it: `k`'s state committed to disk (both types and their protobuf mirrors), the
    /// clients' last resourceVersion noted, `k` killed (SIGKILL), started again over the same
    /// directory, and every node client back at once as soon as it is ready.
    async fn restarted_herd(
        &self,
        opts: &FleetOptions,
        clients: &Clients,
        files: &super::https::HttpsFiles,
        config: &ChildConfig,
        mut k: KcacheChild,
    ) -> Result<Restarted, String> {
        committed(&k).await?;
        let json = Target {
            accept: None,
            ..clients.kubelets(files.target(k.addr, None))
        };
        let rv = super::list_rv_on(&json, PODS)
            .await?
            .parse::<u64>()
            .map_err(|e| format!("the list's resourceVersion: {e}"))?;
        let before = self.apiserver_cpu().await?;
        progress("fleet: kcache restarted: killed, started again over its persistDir");
        k.kill_9();
        drop(k);
        let exec = Instant::now();
        let k = KcacheChild::start_with_kubeconfig(
            &opts.exe,
            &opts.kubeconfig,
            opts.context.as_deref(),
            config,
            Duration::from_secs(600),
        )
        .await?;
        let ready = exec.elapsed();
        let side = Side::through(clients, files, &k);
        progress("fleet: kcache restarted: every node client back at once");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (herd, kubelets, proxies) = self.connect_all(&side, Some(rv), stop_rx).await?;
        let synced = exec.elapsed();
        let apiserver_cpu = self.apiserver_cpu().await? - before;
        let _ = stop_tx.send(true);
        kubelets.finish().await;
        proxies.finish().await;
        // A fresh process: its counts are the restart's and the herd's.
        let sent = |purpose: &'static str| {
            let k = &k;
            async move {
                k.metric(&["kcache_upstream_requests_total", purpose])
                    .await
                    .unwrap_or(0.0) as u64
            }
        };
        let lists =
            sent("purpose=\"reflector_list\"").await + sent("purpose=\"protobuf_list\"").await;
        let watches =
            sent("purpose=\"reflector_watch\"").await + sent("purpose=\"protobuf_watch\"").await;
        Ok(Restarted {
            ready,
            synced,
            apiserver_cpu,
            cost: KcacheCost::of(&k).await,
            lists,
            watches,
            herd,
        })
    }

    async fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        self.call_status(method, path, body)
            .await
            .map_err(String::from)
    }

    async fn call_status(
        &self,
        method: http::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, CallError> {
        let content_type = if method == http::Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        self.cluster
            .call(method, &self.cluster.path(path), content_type, body)
            .await
    }

    /// One target's phases: start, churn, herd.
    async fn side(
        &self,
        opts: &FleetOptions,
        side: &Side<'_>,
        seeded: &Seeded,
    ) -> Result<SideRun, String> {
        progress(format!(
            "fleet: {}: every node client listing and watching at once",
            side.label
        ));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (start, kubelets, proxies) = self.connect_all(side, None, stop_rx).await?;
        progress(format!(
            "fleet: {}: churn for {} s at {} Pods a second",
            side.label,
            fmt_num(opts.secs),
            fmt_num(opts.pods_per_sec)
        ));
        let sampler = ApiserverSampler::start(self);
        let cpu = side.kcache.map(|k| CpuMeter::start(k.pid()));
        let (pods, slices) = self.churn(opts, seeded, side.label).await;
        let kcache_cores = cpu.map(|c| c.cores());
        let api = sampler.finish().await;
        let deadline = Instant::now() + Duration::from_secs(5);
        for (fan, log) in [(&kubelets, &pods), (&proxies, &slices)] {
            let left = deadline.saturating_duration_since(Instant::now());
            fan.wait_for_events(fan.expected(log), left).await;
        }
        let _ = stop_tx.send(true);
        let k_received = kubelets.finish().await;
        let p_received = proxies.finish().await;
        let last = newest_rv(&[&k_received, &p_received]);
        let churn = Churned {
            pods: watchers::delivery(&pods, &k_received),
            slices: watchers::delivery(&slices, &p_received),
            writes: pods.writes.len() as u64 + slices.writes.len() as u64,
            write_errors: pods.failed + slices.failed,
            first_error: pods.first_error.clone().or(slices.first_error.clone()),
            apiserver_cores: api.cores,
            apiserver_rss: api.rss_peak,
            kcache_cores,
        };
        let herd = self.herd(side, last).await?;
        Ok(SideRun { start, churn, herd })
    }

    /// The start's lists: every kubelet its Pods and every kube-proxy every slice, at RV=0
    /// and all at once, each on a connection of its own. Returns the resourceVersion the
    /// watches start from (one list's: every list is at least as new).
    async fn start_lists(&self, side: &Side<'_>) -> Result<String, String> {
        let json = Target {
            accept: None,
            ..side.kubelets.clone()
        };
        let rv = super::list_rv_on(&json, &format!("{}{PODS}", side.base)).await?;
        let lists = (1..=self.nodes).flat_map(|i| {
            [
                (
                    side.kubelets.for_watch(i - 1),
                    format!(
                        "{}{PODS}?resourceVersion=0&fieldSelector=spec.nodeName%3D{}",
                        side.base,
                        self.node(i)
                    ),
                ),
                (
                    side.proxies.for_watch(i - 1),
                    format!("{}{SLICES}?resourceVersion=0", side.base),
                ),
            ]
        });
        let results: Vec<Result<(u16, bytes::Bytes), String>> = futures::future::join_all(
            lists.map(|(t, path)| async move { list_as_clients_do(&t, &path).await }),
        )
        .await;
        for r in results {
            match r {
                Ok((200, _)) => {}
                Ok((status, body)) => {
                    return Err(format!(
                        "{}: a node client's list answered {status}: {}",
                        side.label,
                        String::from_utf8_lossy(&body[..body.len().min(300)])
                    ))
                }
                Err(e) => return Err(format!("{}: a node client's list: {e}", side.label)),
            }
        }
        Ok(rv)
    }

    /// Every kubelet's watch of its Pods from `rv`, keyed by its node.
    fn pod_watches(&self, base: &str, rv: &str) -> Vec<(Option<usize>, String)> {
        (1..=self.nodes)
            .map(|i| {
                let node = self.node(i);
                let path = format!(
                    "{base}{PODS}?{}&fieldSelector=spec.nodeName%3D{node}",
                    watch_from(rv)
                );
                (Some(i), path)
            })
            .collect()
    }

    /// The herd: every client's connection gone at once, and every watch opened again from
    /// `rv` (the last resourceVersion the clients saw), all at once.
    async fn herd(&self, side: &Side<'_>, rv: u64) -> Result<Phase, String> {
        progress(format!(
            "fleet: {}: the herd, every node client re-watching at once",
            side.label
        ));
        // Let the server see the connections close first.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (phase, kubelets, proxies) = self.connect_all(side, Some(rv), stop_rx).await?;
        let _ = stop_tx.send(true);
        kubelets.finish().await;
        proxies.finish().await;
        Ok(phase)
    }

    /// Every node client connecting at once: listing first, then watching from the lists'
    /// resourceVersion (`from` None, the start), or watching from `from` (the herd). Returns
    /// how long until every watch was open and what that cost, and the watches (open until
    /// `stop`).
    async fn connect_all(
        &self,
        side: &Side<'_>,
        from: Option<u64>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(Phase, watchers::FanOut, watchers::FanOut), String> {
        let nodes = self.nodes;
        let until = Instant::now() + Duration::from_secs(3600);
        let before = self.apiserver_cpu().await?;
        let kcache_before = match side.kcache {
            Some(k) => Some(KcacheCost::of(k).await),
            None => None,
        };
        let cpu = side.kcache.map(|k| CpuMeter::start(k.pid()));
        let t = Instant::now();
        let rv = match from {
            Some(rv) => rv.to_string(),
            None => self.start_lists(side).await?,
        };
        let slices = format!("{}{SLICES}?{}", side.base, watch_from(&rv));
        let proto = Proto::H2 { connections: nodes };
        let (kubelets, proxies) = tokio::join!(
            watchers::open_to(
                &side.kubelets,
                proto,
                self.pod_watches(&side.base, &rv),
                stop.clone(),
                until,
                nodes
            ),
            watchers::open_to(
                &side.proxies,
                proto,
                vec![(None, slices); nodes],
                stop,
                until,
                nodes
            ),
        );
        let secs = t.elapsed().as_secs_f64();
        let kcache = match (side.kcache, kcache_before) {
            (Some(k), Some(b)) => Some(KcacheCost::of(k).await.since(&b)),
            _ => None,
        };
        let phase = Phase {
            secs,
            apiserver_cpu: self.apiserver_cpu().await? - before,
            kcache_cpu: cpu.map(|c| c.used().0),
            kcache,
            failed: kubelets.failed + proxies.failed,
            first_error: kubelets.first_error.clone().or(proxies.first_error.clone()),
        };
        Ok((phase, kubelets, proxies))
    }

    /// The churn: the load test's Pod life at `pods_per_sec` (created on a node, running,
    /// ready, deleted, a step a second apart), and an EndpointSlice updated per Pod, the
    /// slices in turn.
    /// Writes go out at their times whatever the earlier ones' answers: a slow apiserver
    /// delays the events, not the writes.
    async fn churn(
        &self,
        opts: &FleetOptions,
        seeded: &Seeded,
        label: &str,
    ) -> (WriteLog, WriteLog) {
        let rate = opts.pods_per_sec.max(1.0);
        let pods = (rate * opts.secs).round() as u64;
        let lag = rate.round().max(1.0) as u64;
        let tag = if label == DIRECT { "d" } else { "k" };
        let pod_writes = write_at_rate(4.0 * rate, 4 * (pods + 3 * lag), |i| {
            let step = i % 4;
            let n = (i / 4).checked_sub(step * lag)?;
            if n >= pods {
                return None;
            }
            let node = (n as usize % self.nodes) + 1;
            let name = format!("churn-{tag}-{n}");
            let ns = seeded.pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            let path = format!("/api/v1/namespaces/{ns}/pods");
            let (method, path, body) = match step {
                0 => {
                    let mut pod = seeded.pod.clone();
                    pod["metadata"]["name"] = name.into();
                    pod["spec"]["nodeName"] = self.node(node).into();
                    (http::Method::POST, path, Some(pod))
                }
                1 => (
                    http::Method::PATCH,
                    format!("{path}/{name}/status"),
                    Some(json!({"status": {"phase": "Running"}})),
                ),
                2 => (
                    http::Method::PATCH,
                    format!("{path}/{name}/status"),
                    Some(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
                ),
                _ => (
                    http::Method::DELETE,
                    format!("{path}/{name}?gracePeriodSeconds=0"),
                    None,
                ),
            };
            Some(async move {
                let v = self.call(method, &path, body).await?;
                super::rv_of(&v).map(|rv| (rv, node))
            })
        });
        let slice_writes = write_at_rate(rate, pods, |i| {
            let (ns, name) = &seeded.slices[i as usize % seeded.slices.len()];
            let path = format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/{name}");
            let seq = format!("{label}-{i}");
            let body = json!({"metadata": {"annotations": {"bench.kcache.dev/seq": seq}}});
            Some(async move {
                let v = self.call(http::Method::PATCH, &path, Some(body)).await?;
                super::rv_of(&v).map(|rv| (rv, 0))
            })
        });
        tokio::join!(pod_writes, slice_writes)
    }

    /// The apiserver's CPU seconds so far.
    async fn apiserver_cpu(&self) -> Result<f64, String> {
        apiserver_use(&self.cluster.target, &self.cluster.path("/metrics"))
            .await
            .map(|(cpu, _)| cpu)
    }

    /// The rows of both targets side by side, and the Targets.
    fn report(&self, opts: &FleetOptions, report: &mut Report, direct: &SideRun, kcache: &SideRun) {
        let nodes = self.nodes;
        let case = format!("{nodes} nodes, {} clients", 2 * nodes);
        for (scenario, phase) in [(START, 0), (HERD, 1)] {
            for (label, run) in [(DIRECT, direct), (KCACHE, kcache)] {
                let p = if phase == 0 { &run.start } else { &run.herd };
                let mut row = Row::new(scenario, &case, label);
                row.set("synced s", p.secs)
                    .set("apiserver CPU s", p.apiserver_cpu)
                    .set("kcache CPU s", p.kcache_cpu)
                    .set("kcache upstream requests", p.kcache.map(|c| c.requests))
                    .set("TokenReviews", p.kcache.map(|c| c.token_reviews))
                    .set("SubjectAccessReviews", p.kcache.map(|c| c.access_reviews));
                if p.failed > 0 {
                    row.note(format!(
                        "{} clients failed: {}",
                        p.failed,
                        p.first_error.as_deref().unwrap_or("?")
                    ));
                }
                report.push(row);
            }
        }
        for (label, run) in [(DIRECT, direct), (KCACHE, kcache)] {
            let c = &run.churn;
            for (class, d) in [
                ("kubelets' Pods", &c.pods),
                ("kube-proxies' EndpointSlices", &c.slices),
            ] {
                let mut row = Row::new(
                    CHURN,
                    &format!(
                        "{class}: {case}, {} Pods/s for {} s",
                        fmt_num(opts.pods_per_sec),
                        fmt_num(opts.secs)
                    ),
                    label,
                );
                row.set("watchers", d.watchers as u64)
                    .set("delivered", format!("{}/{}", d.delivered, d.expected))
                    .set("p50 ms", ms(d.percentile(0.5)))
                    .set("p99 ms", ms(d.percentile(0.99)))
                    .set("max ms", ms(d.max()))
                    .set("apiserver CPU cores", c.apiserver_cores)
                    .set("apiserver RSS MB", mb(c.apiserver_rss))
                    .set("kcache CPU cores", c.kcache_cores);
                if d.ended_early > 0 {
                    row.note(format!("{} streams ended early", d.ended_early));
                }
                if c.write_errors > 0 {
                    row.note(format!(
                        "{} of {} writes failed: {}",
                        c.write_errors,
                        c.writes + c.write_errors,
                        c.first_error.as_deref().unwrap_or("?")
                    ));
                }
                report.push(row);
            }
        }
        for (what, d, k) in [
            ("herd", direct.herd.apiserver_cpu, kcache.herd.apiserver_cpu),
            (
                "start",
                direct.start.apiserver_cpu,
                kcache.start.apiserver_cpu,
            ),
        ] {
            report.check(
                &format!(
                    "fleet (cluster): the {what}: the apiserver's CPU through kcache against \
                     direct"
                ),
                "≤ 1/10",
                format!("{k:.2} s against {d:.2} s ({nodes} nodes)"),
                (d > 0.0).then_some(k <= d / 10.0),
            );
        }
        for (what, d, k) in [
            (
                "kubelets' Pod events",
                &direct.churn.pods,
                &kcache.churn.pods,
            ),
            (
                "kube-proxies' EndpointSlice events",
                &direct.churn.slices,
                &kcache.churn.slices,
            ),
        ] {
            let (dp, kp) = (ms(d.percentile(0.99)), ms(k.percentile(0.99)));
            report.check(
                &format!("fleet (cluster): {what} p99 through kcache"),
                "≤ direct + 10 ms",
                format!("{kp:.1} ms against {dp:.1} ms ({nodes} nodes)"),
                (d.delivered > 0 && k.delivered > 0).then_some(kp <= dp + 10.0),
            );
            report.check(
                &format!("fleet (cluster): {what} lost or later than 5 s through kcache"),
                "0",
                format!(
                    "{} of {} (direct: {} of {})",
                    k.missing(),
                    k.expected,
                    d.missing(),
                    d.expected
                ),
                Some(k.missing() == 0 && k.expected > 0),
            );
        }
    }
}

/// What the churn starts from.
struct Seeded {
    /// A seeded Pod as written: the churn's are made from it.
    pod: Value,
    /// (namespace, name) of every EndpointSlice.
    slices: Vec<(String, String)>,
}

/// The node clients' tokens.
struct Clients {
    kubelets: Arc<[http::HeaderValue]>,
    proxies: Arc<[http::HeaderValue]>,
}

impl Clients {
    fn kubelets(&self, target: Target) -> Target {
        Self::each(target, &self.kubelets)
    }

    fn proxies(&self, target: Target) -> Target {
        Self::each(target, &self.proxies)
    }

    fn each(target: Target, tokens: &Arc<[http::HeaderValue]>) -> Target {
        let mut t = target.accepting(PROTOBUF);
        t.authorization = tokens.first().cloned();
        t.per_watch = Some(tokens.clone());
        t
    }
}

/// A target the node clients read: the apiserver, or kcache in front of it.
struct Side<'k> {
    label: &'static str,
    kubelets: Target,
    proxies: Target,
    /// Before every path (the server URL's path, for the apiserver).
    base: String,
    kcache: Option<&'k KcacheChild>,
}

impl<'k> Side<'k> {
    /// The node clients through `k` (HTTPS with the bench's certificate), each with its token.
    fn through(
        clients: &Clients,
        files: &super::https::HttpsFiles,
        k: &'k KcacheChild,
    ) -> Side<'k> {
        Side {
            label: KCACHE,
            kubelets: clients.kubelets(files.target(k.addr, None)),
            proxies: clients.proxies(files.target(k.addr, None)),
            base: String::new(),
            kcache: Some(k),
        }
    }

    fn kubelets_or_proxies(&self, collection: &str) -> Target {
        if collection == SLICES {
            self.proxies.clone()
        } else {
            self.kubelets.clone()
        }
    }
}

/// A phase in which every client connects: how long until all had, and what it cost.
struct Phase {
    secs: f64,
    apiserver_cpu: f64,
    kcache_cpu: Option<f64>,
    /// What kcache asked of the upstream meanwhile.
    kcache: Option<KcacheCost>,
    failed: usize,
    first_error: Option<String>,
}

struct Churned {
    pods: Delivery,
    slices: Delivery,
    writes: u64,
    write_errors: u64,
    first_error: Option<String>,
    apiserver_cores: f64,
    apiserver_rss: u64,
    kcache_cores: Option<f64>,
}

struct SideRun {
    start: Phase,
    churn: Churned,
    herd: Phase,
}

/// The herd against a restarted kcache.
struct Restarted {
    /// From the exec to ready.
    ready: Duration,
    /// From the exec to every watch open again.
    synced: Duration,
    /// The apiserver's CPU from the kill to every watch open again.
    apiserver_cpu: f64,
    /// Everything the new kcache asked of the upstream.
    cost: KcacheCost,
    lists: u64,
    watches: u64,
    herd: Phase,
}

impl Restarted {
    /// Its row, beside the direct herd's apiserver CPU, and its Targets.
    fn report(&self, report: &mut Report, nodes: usize, direct: &Phase) {
        let mut row = Row::new(
            RESTARTED,
            &format!("{nodes} nodes, {} clients", 2 * nodes),
            KCACHE,
        );
        row.set("restart to ready s", self.ready.as_secs_f64())
            .set("synced s", self.synced.as_secs_f64())
            .set("apiserver CPU s", self.apiserver_cpu)
            .set("direct herd's apiserver CPU s", direct.apiserver_cpu)
            .set("kcache upstream requests", self.cost.requests)
            .set("lists", self.lists)
            .set("watches", self.watches)
            .set("TokenReviews", self.cost.token_reviews)
            .set("SubjectAccessReviews", self.cost.access_reviews);
        if self.herd.failed > 0 {
            row.note(format!(
                "{} clients failed: {}",
                self.herd.failed,
                self.herd.first_error.as_deref().unwrap_or("?")
            ));
        }
        report.push(row);
        report.check(
            "fleet (cluster): the herd against a restarted kcache: upstream lists",
            "≤ one per type",
            format!("{} lists, {} watches", self.lists, self.watches),
            Some(self.lists <= TYPES.len() as u64 + 1),
        );
        report.check(
            "fleet (cluster): the herd against a restarted kcache: every client synced",
            "≤ 30 s",
            format!("{:.2} s from the exec", self.synced.as_secs_f64()),
            Some(self.synced <= Duration::from_secs(30) && self.herd.failed == 0),
        );
    }
}

/// What kcache asked of the upstream, by its own count.
#[derive(Debug, Clone, Copy)]
struct KcacheCost {
    requests: u64,
    token_reviews: u64,
    access_reviews: u64,
}

impl KcacheCost {
    async fn of(k: &KcacheChild) -> KcacheCost {
        let (token_reviews, access_reviews) = super::herd::reviews(k).await;
        KcacheCost {
            requests: k.upstream_cost().await.map_or(0, |c| c.requests as u64),
            token_reviews,
            access_reviews,
        }
    }

    fn since(&self, before: &KcacheCost) -> KcacheCost {
        KcacheCost {
            requests: self.requests.saturating_sub(before.requests),
            token_reviews: self.token_reviews.saturating_sub(before.token_reviews),
            access_reviews: self.access_reviews.saturating_sub(before.access_reviews),
        }
    }
}

/// Wait until `k` has committed both types, and their protobuf mirrors, to its persistDir.
async fn committed(k: &KcacheChild) -> Result<(), String> {
    progress("fleet: waiting for kcache's state on disk");
    let types = TYPES.map(|(_, _, resource)| resource);
    let with_accounts = [types[0], types[1], ACCOUNTS.2];
    k.wait_committed(&with_accounts, &types, Duration::from_secs(600))
        .await
}

/// The query of a watch from `rv`, as client-go's reflector opens one.
fn watch_from(rv: &str) -> String {
    format!("watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1800")
}

/// A list as client-go sends it: answered 429 (the apiserver's in-flight limit, or its
/// priority and fairness queues full), it is sent again a second later, for two minutes.
async fn list_as_clients_do(t: &Target, path: &str) -> Result<(u16, bytes::Bytes), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let answer = load::fetch_from(t, path, Duration::from_secs(300)).await?;
        if answer.0 != 429 || Instant::now() > deadline {
            return Ok(answer);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The newest resourceVersion any watcher has seen.
fn newest_rv(received: &[&[watchers::Received]]) -> u64 {
    received
        .iter()
        .flat_map(|r| r.iter())
        .flat_map(|r| r.events.iter().map(|(rv, _)| *rv))
        .max()
        .unwrap_or(0)
}

/// `count` writes at `rate` a second, each sent at its time whether or not the ones before
/// it have been answered (`write(i)`: None skips the i-th); each answered one is logged with
/// its resourceVersion and key, at the time it was sent (a watcher often has the event
/// before the writer has the answer).
async fn write_at_rate<F, W>(rate: f64, count: u64, mut write: F) -> WriteLog
where
    F: FnMut(u64) -> Option<W>,
    W: std::future::Future<Output = Result<(u64, usize), String>>,
{
    let start = tokio::time::Instant::now();
    let mut log = WriteLog::default();
    let mut pending = FuturesUnordered::new();
    let record = |log: &mut WriteLog, (sent, r): (Instant, Result<(u64, usize), String>)| match r {
        Ok((rv, key)) => {
            log.writes.insert(rv, (sent, key));
        }
        Err(e) => {
            log.failed += 1;
            log.first_error.get_or_insert(e);
        }
    };
    let mut i = 0;
    while i < count || !pending.is_empty() {
        let next = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::select! {
            _ = tokio::time::sleep_until(next), if i < count => {
                if let Some(w) = write(i) {
                    let sent = Instant::now();
                    pending.push(async move { (sent, w.await) });
                }
                i += 1;
            }
            Some(done) = pending.next(), if !pending.is_empty() => record(&mut log, done),
        }
    }
    log.elapsed = start.elapsed();
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write slower than the interval between writes does not hold the next ones back:
    /// 10 writes at 100 a second, each answered after 200 ms, are all sent within 0.1 s.
    #[tokio::test]
    async fn writes_go_out_at_their_times_whatever_the_answers() {
        let sent = std::sync::Mutex::new(Vec::new());
        let t = Instant::now();
        let log = write_at_rate(100.0, 10, |i| {
            sent.lock().unwrap().push(t.elapsed());
            Some(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok((i + 1, 0))
            })
        })
        .await;
        assert_eq!(log.writes.len(), 10);
        let sent = sent.into_inner().unwrap();
        assert!(
            sent[9] < Duration::from_millis(190),
            "the last sent at {:?}",
            sent[9]
        );
        assert!(
            log.elapsed < Duration::from_millis(1000),
            "{:?}",
            log.elapsed
        );
    }
}
