//! The `fleet` scenario: a cluster at sig-scalability's proportions (`seed::fleet`: per node
//! 30 Pods, 2 Services with their EndpointSlices; a namespace per 50 nodes) behind one kcache,
//! with its clients reading as a cluster's do.
//!
//! What it runs so far, one client class after the other, each on connections of its own over
//! HTTP/2 (one per node, as in a cluster), reading protobuf as client-go's typed clients do
//! (which has kcache keep a protobuf mirror of each type beside its JSON):
//! - the kubelets: one watch per node of the Pods scheduled to it
//!   (`fieldSelector=spec.nodeName=<node>`), while the upstream's Pods change at the load
//!   test's pace (`PodChurn`: 100 creates a second, each Pod then scheduled, running, ready
//!   and deleted, 500 writes a second; a kubelet sees its Pods appear when scheduled and go
//!   when deleted);
//! - the kubelets' watches of their own Node (`fieldSelector=metadata.name=<node>`), while
//!   every Node's status is updated once a minute, as its kubelet does;
//! - 20 controllers with full informers (`controllers`): every Pod, Node, EndpointSlice and
//!   Service listed, then Pods, Nodes and slices watched while they change;
//! - the kube-proxies: one watch per node of every EndpointSlice, while each Pod's readiness
//!   change updates its Service's slice (100 a second).
//!
//! Per class: delivery delay (write acknowledged → event received), events lost, kcache's CPU
//! and memory against what it holds (`Held`: JSON and protobuf).
//!
//! Then the herd (`herd`): every kubelet and kube-proxy away for two seconds while the cluster
//! changes, then all back at once: to the same kcache, and to one killed and started again over
//! its persistDir. Between the two herds, every class at once (`all_at_once`): the kubelets'
//! Pod and Node watches, the kube-proxies' and the users, with Pods, Nodes and slices changing
//! together, as a cluster runs them.
//!
//! As kcache is deployed: HTTPS, delegated authentication and authorization, every node's
//! kubelet and kube-proxy with a token of its own (`Access`). After the Node watches, while the
//! Pods change, 20 people read the cluster with kubectl (`users`); then the same people read the
//! same pages from a server that only sends them (`users_floor`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kcache_sim::rbac::{Rbac, Subject};
use kcache_sim::seed::{self, FleetSpec};
use serde_json::Value;

mod controllers;

use super::fanout::{node_pod_watches, scheduled_on, Class, FanRun};
use super::floor;
use super::herd;
use super::https::HttpsFiles;
use super::kcache::{ChildConfig, KcacheChild};
use super::users;
use super::watchers::{self, Proto};
use super::{
    bump, count_label, fmt_num, list_rv_of, load, ms, progress, rv_of, start_sim, Bench, Row, Sim,
    TempDir,
};

/// The types kcache caches: what the cluster's clients read.
const FLEET_TYPES: [(&str, &str, &str); 4] = [
    ("", "v1", "pods"),
    ("", "v1", "nodes"),
    ("", "v1", "services"),
    ("discovery.k8s.io", "v1", "endpointslices"),
];

/// What the every-class phase adds to the machine's memory per node (the bench's clients,
/// their buffers of what they have not read yet when they fall behind, up to a window of 1 MB
/// for each kube-proxy's watch, the events they record, and kcache's own connections), and
/// per node and second of churn as the backlog grows. Measured at 5,000 nodes (2026-11-29):
/// 2.2 GB with 5 s of churn; with 30 s more than the 5.2 GB left, and the kernel killed the
/// bench.
const AT_ONCE_BYTES_PER_NODE: f64 = 400_000.0;
const AT_ONCE_BYTES_PER_NODE_SECOND: f64 = 50_000.0;

/// The memory the kernel says it can give without swapping (`MemAvailable`), in bytes.
fn mem_available() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(u64::MAX, |kb| kb * 1024)
}

/// The interactive users' rows.
const USERS_SCENARIO: &str =
    "fleet: interactive users (kubectl get pods as Tables, consistent, pages of 500), HTTPS";

/// Every Node's status once a minute, as its kubelet writes it.
const NODE_UPDATES_PER_NODE_PER_SEC: f64 = 1.0 / 60.0;

/// Pod updates a second while the clients are away in a herd's gap (`gap`): three for each
/// Pod clusterloader2's load test creates a second.
const POD_UPDATES_PER_SEC: f64 = 300.0;

/// Pod writes a second of the clients' phases (`PodChurn`): clusterloader2's load test
/// creates 100 Pods a second, updates each three times (scheduled, running, ready) and
/// deletes 100 a second.
const POD_WRITES_PER_SEC: f64 = 500.0;

/// The steps of a churned Pod's life, in order: created, scheduled, running, ready, deleted.
const POD_STEPS: u64 = 5;

/// How many Pods are created between two steps of one Pod's life: a second at the load
/// test's 100 creates a second, so that a Pod lives four seconds.
const POD_STEP_LAG: u64 = 100;

/// The Pods of the load test's churn: created unscheduled (no kubelet sees it), scheduled to
/// a node (its kubelet's watch sees it appear), running, ready, then deleted (and gone from
/// its kubelet's watch), one step per write in turn, each step of a Pod [`POD_STEP_LAG`]
/// creates after the one before. A write is keyed by the node whose kubelet must see it (0:
/// none). Until the first Pods are old enough for a step, that step's writes update one of
/// the seeded Pods instead.
struct PodChurn<'a> {
    /// Seeded Pods, each with its node: the template of a created Pod, and what the first
    /// writes update.
    seeded: &'a [(Value, usize)],
    nodes: usize,
    /// Names are this and the Pod's number: each phase's churn has its own.
    prefix: &'static str,
    /// The churned Pods alive, by number, as last written.
    live: std::collections::HashMap<u64, Value>,
}

impl<'a> PodChurn<'a> {
    fn new(seeded: &'a [(Value, usize)], nodes: usize, prefix: &'static str) -> PodChurn<'a> {
        PodChurn {
            seeded,
            nodes,
            prefix,
            live: std::collections::HashMap::new(),
        }
    }

    /// The `i`-th write: its resourceVersion and the node whose kubelet sees it.
    fn write(&mut self, bench: &Bench, sim: &Sim, i: u64) -> Result<(u64, usize), String> {
        let step = i % POD_STEPS;
        let Some(n) = (i / POD_STEPS).checked_sub(step * POD_STEP_LAG) else {
            return bench.write_pod(sim, self.seeded, i);
        };
        let node = (n % self.nodes as u64) as usize + 1;
        let written = match step {
            0 => {
                let mut pod = self.seeded[0].0.clone();
                let meta = &mut pod["metadata"];
                meta["name"] = format!("{}{n}", self.prefix).into();
                if let Some(meta) = meta.as_object_mut() {
                    for server_set in [
                        "uid",
                        "resourceVersion",
                        "creationTimestamp",
                        "managedFields",
                    ] {
                        meta.remove(server_set);
                    }
                }
                if let Some(spec) = pod["spec"].as_object_mut() {
                    spec.remove("nodeName");
                }
                pod["status"] = serde_json::json!({"phase": "Pending"});
                let v = sim.create("", "pods", pod).map_err(|e| e.to_string())?;
                let rv = rv_of(&v)?;
                self.live.insert(n, v);
                return Ok((rv, 0));
            }
            4 => {
                let pod = self.live.remove(&n).ok_or("a churned Pod deleted twice")?;
                let ns = pod["metadata"]["namespace"].as_str().map(str::to_owned);
                let name = format!("{}{n}", self.prefix);
                sim.delete("", "pods", ns.as_deref(), &name)
                    .map_err(|e| e.to_string())?
            }
            _ => {
                let pod = self.live.get_mut(&n).ok_or("a churned Pod not created")?;
                match step {
                    1 => pod["spec"]["nodeName"] = format!("node-{node}").into(),
                    2 => pod["status"]["phase"] = "Running".into(),
                    _ => {
                        pod["status"]["conditions"] =
                            serde_json::json!([{"type": "Ready", "status": "True"}])
                    }
                }
                let v = sim
                    .update("", "pods", pod.clone())
                    .map_err(|e| e.to_string())?;
                *pod = v.clone();
                v
            }
        };
        rv_of(&written).map(|rv| (rv, node))
    }
}

/// EndpointSlice updates a second: each created Pod's readiness change updates its Service's
/// slice.
const SLICE_UPDATES_PER_SEC: f64 = 100.0;

/// kcache's defaults for a fan-out's writes (docs/configuration.md): each type's writes to its
/// watchers a second (`watch.fanoutWritesPerSecond`), and the longest a watcher's events wait
/// to be gathered (`watch.fanoutMaxDelayMillis`).
const FANOUT_WRITES_PER_SEC: f64 = 20_000.0;
const FANOUT_MAX_DELAY_SECS: f64 = 0.1;

impl Bench {
    pub(super) async fn fleet(&mut self) -> Result<(), String> {
        const S: &str =
            "fleet: kubelets' Pod watches (fieldSelector=spec.nodeName), HTTP/2, protobuf";
        let nodes = self.cap_watchers(self.fleet_nodes(), "fleet");
        progress(format!("fleet: seeding a cluster of {nodes} nodes"));
        let sim = start_sim().await?;
        // kubectl's Tables: the sim hands out the built-in kinds' columns, as an apiserver does
        // (without them kcache cannot print Pods and passes every Table read through).
        kcache_sim::table_columns::serve_builtin(&sim);
        let objects = seed::fleet(&FleetSpec { nodes, seed: 45 });
        let secs = self.scale.fleet_secs;
        let writes = (POD_UPDATES_PER_SEC * secs).round() as usize;
        let scheduled = objects
            .iter()
            .filter(|o| o.resource == "pods" && o.object["spec"]["nodeName"].is_string())
            .count();
        // The Pods the churn updates, each with the node it is on (1-based, as in its
        // name): one in every `stride` of the scheduled ones, so that the updates visit the
        // nodes in turn, and no more than it writes (a copy of all 150,000 would double the
        // bench's memory).
        let stride = (scheduled / writes.max(1)).max(1);
        let pods: Vec<(Value, usize)> = objects
            .iter()
            .filter(|o| o.resource == "pods" && o.object["spec"]["nodeName"].is_string())
            .step_by(stride)
            .filter_map(|o| Some((o.object.clone(), scheduled_on(o)?)))
            .collect();
        let node_objects: Vec<(Value, usize)> = objects
            .iter()
            .filter(|o| o.resource == "nodes")
            .filter_map(|o| {
                let i = o.name().strip_prefix("node-")?.parse().ok()?;
                Some((o.object.clone(), i))
            })
            .collect();
        let slices: Vec<Value> = objects
            .iter()
            .filter(|o| o.resource == "endpointslices")
            .map(|o| o.object.clone())
            .collect();
        let held_json: usize = objects
            .iter()
            .filter(|o| FLEET_TYPES.iter().any(|(_, _, r)| *r == o.resource))
            .map(|o| serde_json::to_vec(&o.object).map_or(0, |b| b.len()))
            .sum();
        if pods.is_empty() {
            return Err("no scheduled pods in the fleet".into());
        }
        // A cluster that has run a while: its objects of many ages, as `kubectl get` prints
        // them (a cluster created the moment the bench starts has every AGE change each second).
        seed::create_all_living(&sim, objects)?;
        let access = Access::new(&sim, nodes)?;
        sim.set_rbac(Some(access.rbac(nodes)));
        progress(format!(
            "fleet: {} scheduled Pods; starting kcache",
            count_label(scheduled)
        ));
        let k = self.kcache(&sim, &access.kcache_config()).await?;
        let (kubelets, proxies) = (access.kubelets(k.addr), access.proxies(k.addr));
        // The cluster's clients have been reading for a while: the protobuf mirrors are up.
        warm_protobuf(&k, &kubelets, "/api/v1/pods").await?;
        warm_protobuf(&k, &kubelets, "/api/v1/nodes").await?;
        warm_protobuf(&k, &proxies, SLICES).await?;
        let rv = rv_on(&kubelets, "/api/v1/pods").await?;
        let watches = node_pod_watches(nodes, rv, "&allowWatchBookmarks=true");
        let case = class_case(nodes, scheduled, "Pods", POD_WRITES_PER_SEC);
        let mut churn = PodChurn::new(&pods, nodes, "churn-");
        let f = self
            .class_run(&k, &kubelets, watches, POD_WRITES_PER_SEC, &case, |i| {
                churn.write(self, &sim, i)
            })
            .await;
        let mut row = Self::fan_row(S, &case, "kcache", &f);
        row.set("kcache RSS MB", f.rss_peak as f64 / 1e6)
            .set("JSON held MB", held_json as f64 / 1e6)
            .set("RSS / JSON held", f.rss_peak as f64 / held_json as f64);
        let held = Held::of(&k).await;
        held.set(&mut row, f.rss_peak);
        row.set("kcache RSS median MB", f.rss_median as f64 / 1e6)
            .set(
                "RSS median / JSON and protobuf held",
                held.ratio(f.rss_median),
            );
        self.report.push(row);
        self.report.check(
            "fleet: kcache RSS against what it holds (JSON and protobuf)",
            "≤ 1.3×",
            format!(
                "{:.2}× ({} MB RSS, {} MB held, {nodes} nodes)",
                held.ratio(f.rss_peak),
                f.rss_peak / 1_000_000,
                held.total() / 1_000_000
            ),
            Some(held.ratio(f.rss_peak) <= 1.3),
        );
        self.delivery_checks("kubelets' Pod events", 100.0, nodes, &f);

        const N: &str =
            "fleet: kubelets' own Node watches (fieldSelector=metadata.name), HTTP/2, protobuf";
        let rv = rv_on(&kubelets, "/api/v1/nodes").await?;
        let watches = node_watches(nodes, rv);
        // Every Node's status once a minute.
        let rate = NODE_UPDATES_PER_NODE_PER_SEC * nodes as f64;
        let case = class_case(nodes, node_objects.len(), "Nodes", rate);
        let f = self
            .class_run(&k, &kubelets, watches, rate, &case, |i| {
                self.write_node(&sim, &node_objects, i)
            })
            .await;
        self.report.push(Self::fan_row(N, &case, "kcache", &f));
        self.delivery_checks("kubelets' Node events", 250.0, nodes, &f);

        // People reading the cluster with kubectl, in a phase of their own as every class
        // has, while its Pods go on changing at the load test's pace, as a cluster's do: Pods
        // kept still while only Nodes are written would be a quiet type, whose consistent reads
        // kcache cannot prove current from its cache (BENCHMARKS.md, "The users' floor, a
        // page's count, and users in a running cluster").
        let users = access.users(k.addr);
        let secs = self.scale.fleet_secs;
        let case = format!(
            "{} users, {} Pods, while the Pods change",
            users::USERS,
            count_label(scheduled)
        );
        progress(format!("fleet: {case}"));
        let mut pod_churn = PodChurn::new(&pods, nodes, "users-");
        let (reads, pods_churned) = tokio::join!(
            users::run(&users, secs),
            watchers::write_at_rate(
                POD_WRITES_PER_SEC,
                (POD_WRITES_PER_SEC * secs).round() as u64,
                |i| pod_churn.write(self, &sim, i),
            )
        );
        for mut row in reads.rows(USERS_SCENARIO, &case, "kcache") {
            if pods_churned.failed > 0 {
                row.note(format!(
                    "{} of the Pods' churn writes failed: {}",
                    pods_churned.failed,
                    pods_churned.first_error.as_deref().unwrap_or("?")
                ));
            }
            self.report.push(row);
        }
        let floor = self.users_floor(&access, &users, &case).await;
        self.users_checks("", &reads, floor.as_ref());

        // The controllers: every change of every type, to each of them.
        let churn = Churn {
            pods: &pods,
            nodes: &node_objects,
            slices: &slices,
        };
        self.controllers(&k, &sim, &access, nodes, &churn).await?;

        // The kube-proxies last: at thousands of nodes their fan-out is more than this machine
        // delivers, and the backlog kcache is left with would be counted as the next class's.
        const P: &str =
            "fleet: kube-proxies' EndpointSlice watches (all namespaces), HTTP/2, protobuf";
        let rv = rv_on(&proxies, SLICES).await?;
        let path = proxy_watch(rv);
        let case = class_case(nodes, slices.len(), "EndpointSlices", SLICE_UPDATES_PER_SEC);
        let f = self
            .class_run(
                &k,
                &proxies,
                vec![(None, path); nodes],
                SLICE_UPDATES_PER_SEC,
                &case,
                |i| self.write_slice(&sim, &slices, i),
            )
            .await;
        self.report.push(Self::fan_row(P, &case, "kcache", &f));
        self.delivery_checks("kube-proxies' EndpointSlice events", 250.0, nodes, &f);
        let floor = self.proxies_floor(P, &case, &access, &proxies, nodes).await;
        self.fanout_checks(nodes, &f, floor);

        // The herd: every kubelet and kube-proxy away for a moment while the cluster goes on
        // changing, then all of them back at once, each resuming from what it had seen.
        const H: &str = "fleet: the herd, every kubelet and kube-proxy re-watching at once from its last resourceVersion (same kcache), HTTP/2, protobuf";
        // Let kcache see the kube-proxies' connections close first.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let clients = herd::Clients {
            nodes,
            pods_rv: rv_on(&kubelets, "/api/v1/pods").await?,
            slices_rv: rv_on(&proxies, SLICES).await?,
            kubelets: kubelets.clone(),
            proxies: proxies.clone(),
        };
        progress(format!(
            "fleet: the herd: {nodes} kubelets and {nodes} kube-proxies away for {} s",
            fmt_num(herd::GAP_SECS)
        ));
        let (pod_log, slice_log) = self.gap(&sim, &pods, &slices).await;
        progress("fleet: the herd: every client back at once");
        let h = herd::run(
            &k,
            &sim,
            &clients,
            &pod_log,
            &slice_log,
            herd::upstream(&sim),
        )
        .await;
        self.report
            .push(h.row(H, &herd_case(nodes, &pod_log, &slice_log)));
        self.herd_checks("same kcache", nodes, &h, 0);

        self.all_at_once(&k, &sim, &access, nodes, &churn, held_json)
            .await?;
        drop(k);

        self.restarted_herd(&sim, &access, nodes, &pods, &slices)
            .await?;
        sim.shutdown().await;
        Ok(())
    }
}

/// What kcache holds of the cluster, by its own count (`kcache_cached_bytes`, and the
/// `protobuf` component of `kcache_cache_memory_bytes`: its mirrors' messages).
struct Held {
    json: u64,
    protobuf: u64,
    /// Beside them, by kcache's estimate (`kcache_cache_memory_bytes`): the versions, lines
    /// and events only the watch history keeps, and the objects' heads with the indexes.
    history: u64,
    heads_and_indexes: u64,
}

impl Held {
    async fn of(k: &KcacheChild) -> Held {
        let sum = |parts: &'static [&'static str]| async move {
            k.metric(parts).await.unwrap_or(0.0) as u64
        };
        Held {
            json: sum(&["kcache_cached_bytes{"]).await,
            protobuf: sum(&["kcache_cache_memory_bytes{", "component=\"protobuf\""]).await,
            history: sum(&["kcache_cache_memory_bytes{", "component=\"history\""]).await,
            heads_and_indexes: sum(&["kcache_cache_memory_bytes{", "component=\"head\""]).await
                + sum(&["kcache_cache_memory_bytes{", "component=\"index\""]).await,
        }
    }

    fn total(&self) -> u64 {
        self.json + self.protobuf
    }

    fn ratio(&self, rss: u64) -> f64 {
        rss as f64 / self.total().max(1) as f64
    }

    /// Its columns in a row, with `rss` against it.
    fn set(&self, row: &mut Row, rss: u64) {
        row.set("protobuf held MB", self.protobuf as f64 / 1e6)
            .set("history MB", self.history as f64 / 1e6)
            .set("heads and indexes MB", self.heads_and_indexes as f64 / 1e6)
            .set("RSS / JSON and protobuf held", self.ratio(rss));
    }
}

/// What the churn writes: Pods (with their nodes), Nodes (with their numbers) and slices.
struct Churn<'a> {
    pods: &'a [(Value, usize)],
    nodes: &'a [(Value, usize)],
    slices: &'a [Value],
}

/// One class's watchers of a churned type: where, how, and their watches.
type Watchers<'a> = (&'a load::Target, Proto, Vec<(Option<usize>, String)>);

impl Bench {
    /// The classes a churn drives, each watched by its `watchers`: Pods at the load test's
    /// pace (`PodChurn`, names from `prefix`), every Node once a minute, and the slices.
    fn churn_classes<'a>(
        &'a self,
        sim: &'a Sim,
        churn: &'a Churn<'a>,
        nodes: usize,
        prefix: &'static str,
        [pods, node, slices]: [Watchers<'a>; 3],
    ) -> Vec<Class<'a>> {
        let class = |(target, proto, watches): Watchers<'a>, rate, write| Class {
            target,
            proto,
            watches,
            rate,
            write,
        };
        let mut churned = PodChurn::new(churn.pods, nodes, prefix);
        vec![
            class(
                pods,
                POD_WRITES_PER_SEC,
                Box::new(move |i| churned.write(self, sim, i)),
            ),
            class(
                node,
                NODE_UPDATES_PER_NODE_PER_SEC * nodes as f64,
                Box::new(move |i| self.write_node(sim, churn.nodes, i)),
            ),
            class(
                slices,
                SLICE_UPDATES_PER_SEC,
                Box::new(move |i| self.write_slice(sim, churn.slices, i)),
            ),
        ]
    }
}

/// The kubelets' watches of their own Node from `rv`, node i's keyed i.
fn node_watches(nodes: usize, rv: u64) -> Vec<(Option<usize>, String)> {
    (1..=nodes)
        .map(|i| {
            (
                Some(i),
                format!("/api/v1/nodes?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=900&fieldSelector=metadata.name%3Dnode-{i}"),
            )
        })
        .collect()
}

/// How the cluster's clients reach kcache, as it is deployed in front of them: HTTPS with
/// delegated authentication and authorization, each node's kubelet with its node's identity
/// (`system:node:<node>`, group `system:nodes`) and each kube-proxy with a token of its own of
/// the kube-proxy service account, reading protobuf with JSON after it as client-go's typed
/// clients do.
struct Access {
    files: HttpsFiles,
    kubelets: Arc<[http::HeaderValue]>,
    proxies: Arc<[http::HeaderValue]>,
    /// The interactive users', cluster admins (`system:masters`).
    users: Arc<[http::HeaderValue]>,
    /// The controllers', each a ServiceAccount of its own (`controllers`).
    controllers: Arc<[http::HeaderValue]>,
}

/// kcache's own token at the sim.
const KCACHE_TOKEN: &str = "kcache-token";
/// The kube-proxies' service account.
const KUBE_PROXY: &str = "system:serviceaccount:kube-system:kube-proxy";

impl Access {
    /// The clients' credentials: the kube-proxies' are tokens of their ServiceAccount, made
    /// by `sim` as a TokenRequest makes them (one per node, as each kube-proxy Pod has its
    /// own), which kcache checks itself once the first has been reviewed.
    fn new(sim: &Sim, nodes: usize) -> Result<Access, String> {
        let bearer = |t: String| {
            http::HeaderValue::from_str(&format!("Bearer {t}")).map_err(|e| e.to_string())
        };
        let account =
            serde_json::json!({"metadata": {"name": "kube-proxy", "namespace": "kube-system"}});
        sim.create("", "serviceaccounts", account)
            .map_err(|e| format!("the kube-proxies' ServiceAccount: {e}"))?;
        let proxy_token = |_| {
            sim.token_request("kube-system", "kube-proxy", None, 24 * 3600)
                .map_err(|e| format!("a kube-proxy's token: {e}"))
        };
        Ok(Access {
            files: HttpsFiles::new()?,
            kubelets: (1..=nodes)
                .map(|i| bearer(kubelet_token(i)))
                .collect::<Result<_, _>>()?,
            proxies: (1..=nodes)
                .map(|i| proxy_token(i).and_then(bearer))
                .collect::<Result<_, _>>()?,
            users: (1..=users::USERS)
                .map(|i| bearer(user_token(i)))
                .collect::<Result<_, _>>()?,
            controllers: (1..=controllers::CONTROLLERS)
                .map(|i| bearer(controllers::token(i)))
                .collect::<Result<_, _>>()?,
        })
    }

    /// What the sim's authenticator and authorizer know: kcache, and every node's kubelet and
    /// kube-proxy, allowed what they read (a subset of the apiserver's bootstrap roles).
    fn rbac(&self, nodes: usize) -> Rbac {
        let mut rbac = Rbac::new().proxy(KCACHE_TOKEN, "kcache").allow_masters();
        for i in 1..=users::USERS {
            rbac = rbac.token(&user_token(i), &format!("user-{i}"), &["system:masters"]);
        }
        rbac = controllers::rbac(rbac);
        for i in 1..=nodes {
            rbac = rbac.token(
                &kubelet_token(i),
                &format!("system:node:node-{i}"),
                &["system:nodes"],
            );
        }
        rbac.allow(
            Subject::Group("system:nodes".into()),
            &["get", "list", "watch"],
            &[""],
            &["pods", "nodes"],
            None,
        )
        .allow(
            Subject::User(KUBE_PROXY.into()),
            &["list", "watch"],
            &["discovery.k8s.io", ""],
            &["endpointslices", "services"],
            None,
        )
    }

    /// kcache serving HTTPS, authenticating and authorizing its callers through the sim.
    fn kcache_config(&self) -> ChildConfig {
        // With the ServiceAccounts: kcache checks the kube-proxies' tokens itself.
        let mut config = ChildConfig::caching(&[
            FLEET_TYPES[0],
            FLEET_TYPES[1],
            FLEET_TYPES[2],
            FLEET_TYPES[3],
            ("", "v1", "serviceaccounts"),
        ]);
        config.tls = Some((self.files.cert.clone(), self.files.key.clone()));
        config.delegated_with_token = Some(KCACHE_TOKEN.into());
        config
    }

    /// The kubelets at `addr`: the i-th watch of a fan-out with node i+1's token.
    fn kubelets(&self, addr: std::net::SocketAddr) -> load::Target {
        self.clients(addr, &self.kubelets)
    }

    /// The interactive users at `addr`, each with their own token.
    fn users(&self, addr: std::net::SocketAddr) -> load::Target {
        self.clients(addr, &self.users)
    }

    /// The controllers at `addr`: the i-th watch of a class with controller i+1's token.
    fn controllers(&self, addr: std::net::SocketAddr) -> load::Target {
        self.clients(addr, &self.controllers)
    }

    /// The kube-proxies at `addr`, each watch with its own token.
    fn proxies(&self, addr: std::net::SocketAddr) -> load::Target {
        self.clients(addr, &self.proxies)
    }

    fn clients(
        &self,
        addr: std::net::SocketAddr,
        tokens: &Arc<[http::HeaderValue]>,
    ) -> load::Target {
        let mut t = self
            .files
            .target(addr, None)
            .accepting("application/vnd.kubernetes.protobuf, application/json");
        t.authorization = tokens.first().cloned();
        t.per_watch = Some(tokens.clone());
        t
    }
}

fn kubelet_token(node: usize) -> String {
    format!("kubelet-node-{node}")
}

fn user_token(user: usize) -> String {
    format!("user-{user}")
}

/// The resourceVersion of a list of `collection` through `target` (read as JSON).
async fn rv_on(target: &load::Target, collection: &str) -> Result<u64, String> {
    let json = load::Target {
        accept: None,
        ..target.clone()
    };
    list_rv_of(&json, collection).await
}

/// Have kcache answer protobuf reads of `collection` from its cache. The first protobuf read of
/// a type starts the type's protobuf mirror and is passed through until the mirror has synced,
/// so read until one is answered from the cache (a list that selects nothing, to keep each read
/// small).
pub(super) async fn warm_protobuf(
    k: &KcacheChild,
    target: &load::Target,
    collection: &str,
) -> Result<(), String> {
    let from_cache = || {
        k.metric(&[
            "kcache_responses_by_content_type_total",
            "content_type=\"protobuf\"",
            "source=\"cache\"",
        ])
    };
    let path =
        format!("{collection}?resourceVersion=0&labelSelector=bench.kcache.dev%2Fnone%3Dnone");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let before = from_cache().await.unwrap_or(0.0);
        let (status, _) = load::fetch_from(target, &path, Duration::from_secs(60)).await?;
        if status != 200 {
            return Err(format!("protobuf list of {collection}: status {status}"));
        }
        if from_cache().await.unwrap_or(0.0) > before {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the protobuf mirror of {collection} did not sync in 600 s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The kube-proxies' collection.
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

/// One EndpointSlice's protobuf watch frame as kcache sends it to a kube-proxy: the first slice
/// of a protobuf list from kcache, written by kcache's own frame writer as a MODIFIED event.
async fn slice_frame(proxies: &load::Target) -> Result<Vec<u8>, String> {
    let path = format!("{SLICES}?resourceVersion=0&limit=1");
    let (status, body) = load::fetch_from(proxies, &path, Duration::from_secs(60)).await?;
    if status != 200 {
        return Err(format!("a protobuf slice from {path}: status {status}"));
    }
    let bad = |e: kcache_protobuf::ProtoError| format!("a protobuf slice from {path}: {e}");
    let list = kcache_protobuf::parse_envelope(&body).map_err(bad)?;
    let (_, items) = kcache_protobuf::parse_list(list.raw).map_err(bad)?;
    let item = items.first().ok_or(format!("no slice in {path}"))?;
    let mut frame = bytes::BytesMut::new();
    kcache_protobuf::write_watch_event(
        "MODIFIED",
        "discovery.k8s.io/v1",
        "EndpointSlice",
        item,
        &mut frame,
    );
    Ok(frame.to_vec())
}

/// A kube-proxy's watch of every EndpointSlice from `rv`, with bookmarks.
pub(super) fn proxy_watch(rv: u64) -> String {
    format!("{SLICES}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=900")
}

/// A herd's case: its cluster, its clients and what changed while they were away.
fn herd_case(nodes: usize, pods: &watchers::WriteLog, slices: &watchers::WriteLog) -> String {
    format!(
        "{} nodes, {} watches, a {} s gap of {} Pod and {} EndpointSlice updates",
        count_label(nodes),
        count_label(2 * nodes),
        fmt_num(herd::GAP_SECS),
        pods.writes.len(),
        slices.writes.len()
    )
}

/// A client class's case: its cluster and its churn.
fn class_case(nodes: usize, objects: usize, kind: &str, rate: f64) -> String {
    format!(
        "{} nodes, {} {kind}, {} writes/s",
        count_label(nodes),
        count_label(objects),
        fmt_num(rate)
    )
}

impl Bench {
    /// Run one client class: `watches` on connections of their own over HTTP/2 (one per
    /// watch, as each node's client has its own), `write` at `rate` for the scale's time.
    async fn class_run<F>(
        &self,
        k: &KcacheChild,
        target: &load::Target,
        watches: Vec<(Option<usize>, String)>,
        rate: f64,
        case: &str,
        write: F,
    ) -> FanRun
    where
        F: FnMut(u64) -> Result<(u64, usize), String>,
    {
        progress(format!("fleet: {case}"));
        let connections = watches.len();
        self.fan_run(
            k,
            target,
            Proto::H2 { connections },
            watches,
            rate,
            self.scale.fleet_secs,
            write,
        )
        .await
    }

    /// The `i`-th Pod update of the churn: one of `pods` (with its node), a new annotation.
    fn write_pod(
        &self,
        sim: &Sim,
        pods: &[(Value, usize)],
        i: u64,
    ) -> Result<(u64, usize), String> {
        let (o, node) = &pods[i as usize % pods.len()];
        bump(sim, "pods", o, self.next_seq()).map(|rv| (rv, *node))
    }

    /// The `i`-th Node status update of the churn, with its node.
    fn write_node(
        &self,
        sim: &Sim,
        nodes: &[(Value, usize)],
        i: u64,
    ) -> Result<(u64, usize), String> {
        let (o, node) = &nodes[i as usize % nodes.len()];
        bump(sim, "nodes", o, self.next_seq()).map(|rv| (rv, *node))
    }

    /// Every client class at once, as a cluster runs them: each kubelet's watches of its Pods
    /// and of its Node, each kube-proxy's watch of every EndpointSlice, and the interactive
    /// users' reads, while Pods, Nodes and slices all change at their paces. Each class's
    /// delivery is measured as when it runs alone; kcache's CPU and memory are the cluster's.
    /// A kubelet's two watches are on two connections here (client-go would share one): a
    /// connection more per node than a cluster has.
    async fn all_at_once(
        &mut self,
        k: &KcacheChild,
        sim: &Sim,
        access: &Access,
        nodes: usize,
        churn: &Churn<'_>,
        held_json: usize,
    ) -> Result<(), String> {
        const S: &str = "fleet: every client class at once (kubelets' Pods and Node, kube-proxies' EndpointSlices, users), HTTP/2, protobuf";
        // Every client of the cluster is in this one process, with what kcache sends it and
        // it has not read yet; on a machine that cannot hold that beside the sim and kcache,
        // the phase would end the whole bench (the kernel's OOM killer).
        let secs = self.scale.fleet_secs;
        let need = (AT_ONCE_BYTES_PER_NODE + AT_ONCE_BYTES_PER_NODE_SECOND * secs) * nodes as f64;
        let need = need as u64;
        let available = mem_available();
        if available < need {
            let note = format!(
                "skipped: {nodes} nodes' clients at once need about {} MB of the bench's memory, {} MB available",
                need / 1_000_000,
                available / 1_000_000
            );
            progress(format!("fleet: every class at once {note}"));
            let mut row = Row::new(S, &format!("{} nodes", count_label(nodes)), "kcache");
            row.note(note);
            self.report.push(row);
            return Ok(());
        }
        let (kubelets, proxies) = (access.kubelets(k.addr), access.proxies(k.addr));
        let users = access.users(k.addr);
        let pods_rv = rv_on(&kubelets, "/api/v1/pods").await?;
        let nodes_rv = rv_on(&kubelets, "/api/v1/nodes").await?;
        let slices_rv = rv_on(&proxies, SLICES).await?;
        let node_rate = NODE_UPDATES_PER_NODE_PER_SEC * nodes as f64;
        let proto = Proto::H2 { connections: nodes };
        let classes = self.churn_classes(
            sim,
            churn,
            nodes,
            "churn-at-once-",
            [
                (
                    &kubelets,
                    proto,
                    node_pod_watches(nodes, pods_rv, "&allowWatchBookmarks=true"),
                ),
                (&kubelets, proto, node_watches(nodes, nodes_rv)),
                (&proxies, proto, vec![(None, proxy_watch(slices_rv)); nodes]),
            ],
        );
        progress(format!(
            "fleet: every class at once: {nodes} kubelets (Pods and Node), {nodes} kube-proxies, {} users",
            users::USERS
        ));
        let (runs, reads) = self
            .fan_runs(k, classes, secs, users::run(&users, secs))
            .await;
        let [pod_run, node_run, proxy_run] = <[FanRun; 3]>::try_from(runs)
            .map_err(|_| "fleet: every class at once: three runs expected".to_string())?;
        let pods_case = format!(
            "{} nodes, Pods created, scheduled, running, ready and deleted, {} writes/s",
            count_label(nodes),
            fmt_num(POD_WRITES_PER_SEC)
        );
        let nodes_case = class_case(nodes, churn.nodes.len(), "Nodes", node_rate);
        let slices_case = class_case(
            nodes,
            churn.slices.len(),
            "EndpointSlices",
            SLICE_UPDATES_PER_SEC,
        );
        self.report.push(Self::delivery_row(
            S,
            &format!("kubelets' Pods: {pods_case}"),
            "kcache",
            &pod_run,
        ));
        self.report.push(Self::delivery_row(
            S,
            &format!("kubelets' Nodes: {nodes_case}"),
            "kcache",
            &node_run,
        ));
        self.report.push(Self::delivery_row(
            S,
            &format!("kube-proxies' EndpointSlices: {slices_case}"),
            "kcache",
            &proxy_run,
        ));
        let all = FanRun::together(&[&pod_run, &node_run, &proxy_run]);
        let mut row = Self::fan_row(S, "every class", "kcache", &all);
        row.set("kcache RSS MB", all.rss_peak as f64 / 1e6)
            .set("JSON held MB", held_json as f64 / 1e6)
            .set("RSS / JSON held", all.rss_peak as f64 / held_json as f64);
        Held::of(k).await.set(&mut row, all.rss_peak);
        self.report.push(row);
        for row in reads.rows(
            USERS_SCENARIO,
            "20 users, with every other class at once",
            "kcache",
        ) {
            self.report.push(row);
        }
        self.users_checks("at once: ", &reads, None);
        self.delivery_checks("at once: kubelets' Pod events", 100.0, nodes, &pod_run);
        self.delivery_checks("at once: kubelets' Node events", 250.0, nodes, &node_run);
        self.delivery_checks(
            "at once: kube-proxies' EndpointSlice events",
            250.0,
            nodes,
            &proxy_run,
        );
        self.report.check(
            "fleet: at once: kcache CPU",
            "≤ 1 core",
            format!("{:.2} cores ({nodes} nodes)", all.cores),
            Some(all.cores <= 1.0),
        );
        Ok(())
    }

    /// The `i`-th EndpointSlice update of the churn. Every kube-proxy watches every slice: the
    /// key is not used.
    fn write_slice(&self, sim: &Sim, slices: &[Value], i: u64) -> Result<(u64, usize), String> {
        let mut slice = slices[i as usize % slices.len()].clone();
        slice["metadata"]["annotations"]["bench.kcache.dev/seq"] =
            self.next_seq().to_string().into();
        let v = sim
            .update("discovery.k8s.io", "endpointslices", slice)
            .map_err(|e| e.to_string())?;
        rv_of(&v).map(|rv| (rv, 0))
    }

    /// The herd against a kcache restarted over its persistDir, as a crash or a rollout
    /// restarts it: a kcache of its own (the first one is gone, to leave the machine's memory
    /// to this one), synced and committed to disk, killed (SIGKILL: the state on disk is up to
    /// a second old), the cluster changing for the gap while it is down, started again over
    /// the same directory, and every client back at once as soon as it is ready.
    async fn restarted_herd(
        &mut self,
        sim: &Sim,
        access: &Access,
        nodes: usize,
        pods: &[(Value, usize)],
        slices: &[Value],
    ) -> Result<(), String> {
        const R: &str = "fleet: the herd against a kcache restarted over its persistDir (SIGKILL, started again), HTTP/2, protobuf";
        let store = TempDir::new("persist")?;
        let mut config = access.kcache_config();
        config.persist_dir = Some(store.path().to_owned());
        progress("fleet: the restarted herd: a kcache with a persistDir");
        let mut first = self.kcache(sim, &config).await?;
        // The protobuf mirrors up, as in a kcache its clients have read through for a while,
        // and every type and mirror committed to disk.
        let (kubelets, proxies) = (access.kubelets(first.addr), access.proxies(first.addr));
        warm_protobuf(&first, &kubelets, "/api/v1/pods").await?;
        warm_protobuf(&first, &kubelets, "/api/v1/nodes").await?;
        warm_protobuf(&first, &proxies, SLICES).await?;
        let all: Vec<&str> = FLEET_TYPES.iter().map(|(_, _, r)| *r).collect();
        first
            .wait_committed(
                &all,
                &["pods", "nodes", "endpointslices"],
                Duration::from_secs(600),
            )
            .await?;
        let clients = herd::Clients {
            nodes,
            pods_rv: rv_on(&kubelets, "/api/v1/pods").await?,
            slices_rv: rv_on(&proxies, SLICES).await?,
            kubelets,
            proxies,
        };
        // Its clients' watches served once, as by a kcache its cluster has used: their access
        // verdicts are written down with the rest (one per kubelet, one for the kube-proxies'
        // account), as in front of the real apiserver.
        let failed = herd::watch_once(&clients).await;
        if failed > 0 {
            return Err(format!(
                "{failed} watches failed to open on the first kcache"
            ));
        }
        first
            .wait_verdicts_kept(store.path(), nodes + 1, Duration::from_secs(60))
            .await?;
        // From here on, whatever the upstream is asked is the restart's and the herd's.
        let baseline = herd::upstream(sim);
        first.kill_9();
        progress(format!(
            "fleet: the restarted herd: kcache killed, the cluster changing for {} s",
            fmt_num(herd::GAP_SECS)
        ));
        let (pod_log, slice_log) = self.gap(sim, pods, slices).await;
        let exec = Instant::now();
        let mut second = KcacheChild::start_unready(&self.exe, &sim.url(), &config)?;
        second.wait_ready(Duration::from_secs(600)).await?;
        let ready = exec.elapsed();
        // The clients come back to where kcache now listens.
        let clients = herd::Clients {
            kubelets: access.kubelets(second.addr),
            proxies: access.proxies(second.addr),
            ..clients
        };
        progress("fleet: the restarted herd: every client back at once");
        let h = herd::run(&second, sim, &clients, &pod_log, &slice_log, baseline).await;
        let mut row = h.row(R, &herd_case(nodes, &pod_log, &slice_log));
        row.set("restart to ready s", ready.as_secs_f64());
        self.report.push(row);
        // One list per type kcache follows: the fleet's, the ServiceAccounts and the four RBAC
        // types (docs/security.md).
        let followed = FLEET_TYPES.len() + 1 + 4;
        self.herd_checks("kcache restarted", nodes, &h, followed as u64);
        Ok(())
    }

    /// The gap of a herd: the churn of Pods and EndpointSlices at the classes' rates for
    /// `herd::GAP_SECS`, while no client watches.
    async fn gap(
        &self,
        sim: &Sim,
        pods: &[(Value, usize)],
        slices: &[Value],
    ) -> (watchers::WriteLog, watchers::WriteLog) {
        let count = |rate: f64| (rate * herd::GAP_SECS).round() as u64;
        tokio::join!(
            watchers::write_at_rate(POD_UPDATES_PER_SEC, count(POD_UPDATES_PER_SEC), |i| {
                self.write_pod(sim, pods, i)
            }),
            watchers::write_at_rate(SLICE_UPDATES_PER_SEC, count(SLICE_UPDATES_PER_SEC), |i| {
                self.write_slice(sim, slices, i)
            }),
        )
    }

    /// A herd's Targets rows (`which`: same kcache, or restarted): every client synced within
    /// 30 s; the upstream asked for no more than `lists` lists (none when kcache was not
    /// restarted, one per type when it was); no change lost and no stream ended (a client
    /// told to relist). The upstream's watches are shown, not held to a number: kcache renews
    /// each of its own every 5 to 10 minutes (`timeoutSeconds`, as client-go's reflector
    /// does), whatever its clients do, and a herd's seconds can hold a renewal.
    fn herd_checks(&mut self, which: &str, nodes: usize, h: &herd::HerdRun, lists: u64) {
        let synced = h.synced();
        self.report.check(
            &format!("fleet: the herd ({which}): every client re-watching and synced"),
            "≤ 30 s",
            synced.map_or_else(herd::not_synced, |d| {
                format!(
                    "{:.2} s ({} watches, {nodes} nodes)",
                    d.as_secs_f64(),
                    h.clients
                )
            }),
            Some(synced.is_some_and(|d| d <= Duration::from_secs(30)) && h.failed == 0),
        );
        let goal = if lists == 0 {
            "no list"
        } else {
            "≤ one list per type"
        };
        let met = h.upstream.0 <= lists;
        self.report.check(
            &format!("fleet: the herd ({which}): upstream lists and watches"),
            goal,
            format!("{} lists, {} watches", h.upstream.0, h.upstream.1),
            Some(met),
        );
        // A token is reviewed at most once, and a (user, verb, resource, namespace) at most
        // once: every kubelet is its own user, the kube-proxies share one.
        let (tokens, access) = h.reviews;
        self.report.check(
            &format!("fleet: the herd ({which}): TokenReviews and SubjectAccessReviews"),
            "≤ one per token, ≤ one per (user, verb, resource, namespace)",
            format!(
                "{tokens} TokenReviews for {} tokens, {access} SubjectAccessReviews for {} users",
                h.clients,
                nodes + 1
            ),
            Some(tokens <= h.clients as u64 && access <= nodes as u64 + 1),
        );
        self.report.check(
            &format!("fleet: the herd ({which}): changes lost, clients told to relist"),
            "0",
            format!("{} lost, {} streams ended", h.lost(), h.ended_early()),
            Some(h.lost() == 0 && h.ended_early() == 0),
        );
    }

    /// The interactive users' Targets rows: a namespace's LIST p99 ≤ 0.5 s, every Pod's ≤ 5 s,
    /// no read failed; with the `floor`'s p99 beside each, when measured.
    /// `when`: the phase, in the target's name ("" for the users' own phase).
    fn users_checks(&mut self, when: &str, reads: &users::Reads, floor: Option<&users::Reads>) {
        type Kind = fn(&users::Reads) -> &Vec<Duration>;
        let kinds: [(String, Kind, f64); 2] = [
            (
                format!("a namespace's Pods ({})", users::NAMESPACE),
                |r| &r.namespace,
                500.0,
            ),
            ("every Pod".to_string(), |r| &r.all_pods, 5_000.0),
        ];
        for (what, kind, goal_ms) in kinds {
            let sorted = kind(reads);
            let p99 = users::Reads::p99_ms(sorted);
            let beside = floor
                .and_then(|f| users::Reads::p99_ms(kind(f)))
                .zip(p99)
                .map_or(String::new(), |(fl, p)| {
                    format!("; the floor {fl:.0} ms, kcache {:.2}× it", p / fl)
                });
            self.report.check(
                &format!("fleet: {when}interactive users' LIST of {what} p99"),
                &format!("≤ {} s", fmt_num(goal_ms / 1000.0)),
                p99.map_or("no read".into(), |p| {
                    format!(
                        "{p:.0} ms ({} reads, {} failed{beside})",
                        sorted.len(),
                        reads.errors
                    )
                }),
                p99.map(|p| p <= goal_ms && reads.errors == 0),
            );
        }
    }

    /// The floor under the users' reads (`floor::serve_pages`): the pages they read, recorded
    /// from kcache once its users are done, answered from memory by a plain HTTPS server while
    /// the same users read them again the same way, for as long. What is left of their time is
    /// the bytes': TLS on both ends, the loopback, and the users' own parsing, all on the
    /// bench's cores. Its rows, and the reads.
    async fn users_floor(
        &mut self,
        access: &Access,
        users: &load::Target,
        case: &str,
    ) -> Option<users::Reads> {
        let label = "floor: the same pages from memory over HTTPS, no server work";
        progress(format!("fleet: the users' {label}"));
        let run = async {
            let pages = users::record(users).await?;
            let server = floor::serve_pages(pages, access.files.server_config()?)?;
            let reads = users::run(&access.users(server.addr), self.scale.fleet_secs).await;
            drop(server);
            Ok::<_, String>(reads)
        };
        match run.await {
            Ok(reads) => {
                for row in reads.rows(USERS_SCENARIO, case, label) {
                    self.report.push(row);
                }
                Some(reads)
            }
            Err(e) => {
                let mut row = Row::new(USERS_SCENARIO, case, label);
                row.note(format!("not measured: {e}"));
                self.report.push(row);
                None
            }
        }
    }

    /// The floor under the kube-proxies' fan-out (`floor::run_tls`): a slice's protobuf watch
    /// frame, as many times as kcache gathers into one write per watcher at this many nodes,
    /// written over TLS to as many loopback connections as there are kube-proxies, at the
    /// pace of kcache's writes to each; its row, and its µs per delivered event.
    async fn proxies_floor(
        &mut self,
        scenario: &str,
        case: &str,
        access: &Access,
        proxies: &load::Target,
        nodes: usize,
    ) -> Option<f64> {
        let label = "floor: the gathered frames over TLS, one write per gap, no server";
        let mut row = Row::new(scenario, case, label);
        // The gap kcache leaves between two writes to one watcher: watchers / the type's write
        // budget, at most the longest wait (docs/configuration.md, `watch`'s defaults).
        let gap = (nodes as f64 / FANOUT_WRITES_PER_SEC).min(FANOUT_MAX_DELAY_SECS);
        // The gap's events in one write, at the updates' pace in all.
        let events = (SLICE_UPDATES_PER_SEC * gap).round().max(1.0) as usize;
        let writes_per_sec = SLICE_UPDATES_PER_SEC / events as f64;
        // Both ends of each connection are in the bench: at most half what it may open.
        let connections = nodes.min(self.fd_limit_for_pairs());
        let secs = self.scale.fleet_secs.min(10.0);
        progress(format!("fleet: {case}: {label}"));
        let run = async {
            let frame = slice_frame(proxies).await?;
            let server = access.files.server_config()?;
            let client = access.files.client.clone();
            let r = floor::run_tls(
                connections,
                writes_per_sec,
                secs,
                &frame,
                events,
                server,
                client,
            )
            .await?;
            Ok::<_, String>((r, frame.len()))
        };
        let us = match run.await {
            Ok((r, frame_len)) => Some(r.fill(
                &mut row,
                format!(
                    "one thread writing {events} EndpointSlice watch frames of {frame_len} B as one TLS write to each connection, {} times a second; its CPU per event delivered",
                    fmt_num(writes_per_sec)
                ),
            )),
            Err(e) => {
                row.note(format!("not measured: {e}"));
                None
            }
        };
        self.report.push(row);
        us
    }

    /// The Targets rows of the kube-proxies' fan-out cost: kcache's CPU per delivery ≤ 2 µs
    /// (with the `floor` beside it, when measured) and ≤ 1 core while every slice change goes
    /// to every kube-proxy.
    fn fanout_checks(&mut self, nodes: usize, f: &FanRun, floor: Option<f64>) {
        let us = f.cpu_per_delivery_us();
        let floor = floor.map_or(String::new(), |fl| {
            format!("; the TLS floor {fl:.2} µs, kcache {:.2}× it", us / fl)
        });
        self.report.check(
            "fleet: kube-proxies' fan-out, kcache CPU per delivery",
            "≤ 2 µs",
            format!("{us:.2} µs ({nodes} nodes{floor})"),
            us.is_finite().then_some(us <= 2.0),
        );
        self.report.check(
            "fleet: kube-proxies' fan-out, kcache CPU",
            "≤ 1 core",
            format!("{:.2} cores ({nodes} nodes)", f.cores),
            Some(f.cores <= 1.0),
        );
    }

    /// The Targets rows of one client class: its p99 against `p99_goal_ms`, and none lost.
    fn delivery_checks(&mut self, what: &str, p99_goal_ms: f64, nodes: usize, f: &FanRun) {
        let d = &f.delivery;
        let p99 = ms(d.percentile(0.99));
        self.report.check(
            &format!("fleet: {what} p99"),
            &format!("≤ {p99_goal_ms} ms"),
            format!("{p99:.1} ms ({nodes} nodes)"),
            (d.delivered > 0).then_some(p99 <= p99_goal_ms),
        );
        // Not received when the bench stops reading, 5 s after the last write: lost, or so
        // late that a client would be as badly off.
        self.report.check(
            &format!("fleet: {what} lost or later than 5 s"),
            "0",
            format!("{} of {}", d.missing(), d.expected),
            Some(d.missing() == 0 && d.expected > 0),
        );
    }
}
