//! The `fleet` scenario: a cluster at sig-scalability's proportions (`seed::fleet`: per node
//! 30 Pods, 2 Services with their EndpointSlices; a namespace per 50 nodes) behind one kcache,
//! with its clients reading as a cluster's do.
//!
//! What it runs so far, one client class after the other, each on connections of its own over
//! HTTP/2 (one per node, as in a cluster), reading protobuf as client-go's typed clients do
//! (which has kcache keep a protobuf mirror of each type beside its JSON):
//! - the kubelets: one watch per node of the Pods scheduled to it
//!   (`fieldSelector=spec.nodeName=<node>`), while the upstream's Pods change at the load
//!   test's pace (every created Pod is updated three times: scheduled, running, ready; 100
//!   creates a second make 300 Pod updates a second);
//! - the kubelets' watches of their own Node (`fieldSelector=metadata.name=<node>`), while
//!   every Node's status is updated once a minute, as its kubelet does;
//! - the kube-proxies: one watch per node of every EndpointSlice, while each Pod's readiness
//!   change updates its Service's slice (100 a second).
//!
//! Per class: delivery delay (write acknowledged → event received), events lost, kcache's CPU
//! and memory against the JSON it holds.
//!
//! Then the herd (`herd`): every kubelet and kube-proxy away for two seconds while the cluster
//! changes, then all back at once: to the same kcache, and to one killed and started again over
//! its persistDir.
//!
//! As kcache is deployed: HTTPS, delegated authentication and authorization, every node's
//! kubelet and kube-proxy with a token of its own (`Access`). During the Node watches, 20 people
//! read the cluster with kubectl (`users`). The controllers and the churn's creates and deletes
//! are not run yet.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kcache_sim::rbac::{Rbac, Subject};
use kcache_sim::seed::{self, FleetSpec};
use serde_json::Value;

use super::fanout::{node_pod_watches, scheduled_on, FanRun};
use super::herd;
use super::https::HttpsFiles;
use super::kcache::{ChildConfig, KcacheChild};
use super::users;
use super::watchers::{self, Proto};
use super::{
    bump, count_label, fmt_num, list_rv_of, load, ms, progress, rv_of, seed_sim, start_sim, Bench,
    Sim, TempDir,
};

/// The types kcache caches: what the cluster's clients read.
const FLEET_TYPES: [(&str, &str, &str); 4] = [
    ("", "v1", "pods"),
    ("", "v1", "nodes"),
    ("", "v1", "services"),
    ("discovery.k8s.io", "v1", "endpointslices"),
];

/// Pod updates a second: clusterloader2's load test creates 100 Pods a second, and each is
/// updated three times as it is scheduled, starts and becomes ready.
const POD_UPDATES_PER_SEC: f64 = 300.0;

/// EndpointSlice updates a second: each created Pod's readiness change updates its Service's
/// slice.
const SLICE_UPDATES_PER_SEC: f64 = 100.0;

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
        seed_sim(&sim, objects)?;
        let access = Access::new(nodes)?;
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
        let case = class_case(nodes, scheduled, "Pods", POD_UPDATES_PER_SEC);
        let f = self
            .class_run(&k, &kubelets, watches, POD_UPDATES_PER_SEC, &case, |i| {
                self.write_pod(&sim, &pods, i)
            })
            .await;
        let mut row = Self::fan_row(S, &case, "kcache", &f);
        row.set("kcache RSS MB", f.rss_peak as f64 / 1e6)
            .set("JSON held MB", held_json as f64 / 1e6)
            .set("RSS / JSON held", f.rss_peak as f64 / held_json as f64);
        self.report.push(row);
        self.delivery_checks("kubelets' Pod events", 100.0, nodes, &f);

        const N: &str =
            "fleet: kubelets' own Node watches (fieldSelector=metadata.name), HTTP/2, protobuf";
        let rv = rv_on(&kubelets, "/api/v1/nodes").await?;
        let watches = (1..=nodes)
            .map(|i| {
                (
                    Some(i),
                    format!("/api/v1/nodes?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=900&fieldSelector=metadata.name%3Dnode-{i}"),
                )
            })
            .collect();
        // Every Node's status once a minute.
        let rate = nodes as f64 / 60.0;
        let case = class_case(nodes, node_objects.len(), "Nodes", rate);
        // People reading the cluster with kubectl meanwhile.
        let users = access.users(k.addr);
        let (f, reads) = tokio::join!(
            self.class_run(&k, &kubelets, watches, rate, &case, |i| {
                let (o, node) = &node_objects[i as usize % node_objects.len()];
                bump(&sim, "nodes", o, self.next_seq()).map(|rv| (rv, *node))
            }),
            users::run(&users, self.scale.fleet_secs),
        );
        self.report.push(Self::fan_row(N, &case, "kcache", &f));
        self.delivery_checks("kubelets' Node events", 250.0, nodes, &f);
        const U: &str = "fleet: interactive users (kubectl get pods as Tables, consistent, pages of 500), HTTPS";
        let case = format!(
            "{} users, {} Pods, during the Node watches",
            users::USERS,
            count_label(scheduled)
        );
        for row in reads.rows(U, &case) {
            self.report.push(row);
        }
        self.users_checks(&reads);

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
        self.fanout_checks(nodes, &f);

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
        drop(k);

        self.restarted_herd(&sim, &access, nodes, &pods, &slices)
            .await?;
        sim.shutdown().await;
        Ok(())
    }
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
}

/// kcache's own token at the sim.
const KCACHE_TOKEN: &str = "kcache-token";
/// The kube-proxies' service account.
const KUBE_PROXY: &str = "system:serviceaccount:kube-system:kube-proxy";

impl Access {
    fn new(nodes: usize) -> Result<Access, String> {
        let bearer = |t: String| {
            http::HeaderValue::from_str(&format!("Bearer {t}")).map_err(|e| e.to_string())
        };
        Ok(Access {
            files: HttpsFiles::new()?,
            kubelets: (1..=nodes)
                .map(|i| bearer(kubelet_token(i)))
                .collect::<Result<_, _>>()?,
            proxies: (1..=nodes)
                .map(|i| bearer(proxy_token(i)))
                .collect::<Result<_, _>>()?,
            users: (1..=users::USERS)
                .map(|i| bearer(user_token(i)))
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
        for i in 1..=nodes {
            rbac = rbac
                .token(
                    &kubelet_token(i),
                    &format!("system:node:node-{i}"),
                    &["system:nodes"],
                )
                .token(
                    &proxy_token(i),
                    KUBE_PROXY,
                    &[
                        "system:serviceaccounts",
                        "system:serviceaccounts:kube-system",
                    ],
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
        let mut config = ChildConfig::caching(&FLEET_TYPES);
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

fn proxy_token(node: usize) -> String {
    format!("kube-proxy-node-{node}")
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
async fn warm_protobuf(
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
        "{} nodes, {} {kind}, {} updates/s",
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
        // Every type committed to disk, as in a kcache that has run for a while (a kcache
        // killed before its first commit of a type starts that type afresh).
        let committed = Instant::now();
        for (_, _, resource) in FLEET_TYPES {
            let flushed = format!("resource=\"{resource}\"");
            while first
                .metric(&["kcache_persist_flushes_total", &flushed, "outcome=\"ok\""])
                .await?
                < 1.0
            {
                if committed.elapsed() > Duration::from_secs(600) {
                    return Err(format!(
                        "fleet: {resource} not written to the persistDir within 600 s"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let clients = herd::Clients {
            nodes,
            pods_rv: rv_on(&access.kubelets(first.addr), "/api/v1/pods").await?,
            slices_rv: rv_on(&access.proxies(first.addr), SLICES).await?,
            kubelets: access.kubelets(first.addr),
            proxies: access.proxies(first.addr),
        };
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
        self.herd_checks("kcache restarted", nodes, &h, FLEET_TYPES.len() as u64);
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
    /// restarted, one per type when it was) and, when it was not restarted, no watch; no
    /// change lost and no stream ended (a client told to relist).
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
        let (goal, met) = if lists == 0 {
            ("0", h.upstream == (0, 0))
        } else {
            ("≤ one list per type", h.upstream.0 <= lists)
        };
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
    /// no read failed.
    fn users_checks(&mut self, reads: &users::Reads) {
        for (what, sorted, goal_ms) in [
            (
                format!("a namespace's Pods ({})", users::NAMESPACE),
                &reads.namespace,
                500.0,
            ),
            ("every Pod".to_string(), &reads.all_pods, 5_000.0),
        ] {
            let p99 = users::Reads::p99_ms(sorted);
            self.report.check(
                &format!("fleet: interactive users' LIST of {what} p99"),
                &format!("≤ {} s", fmt_num(goal_ms / 1000.0)),
                p99.map_or("no read".into(), |p| {
                    format!(
                        "{p:.0} ms ({} reads, {} failed)",
                        sorted.len(),
                        reads.errors
                    )
                }),
                p99.map(|p| p <= goal_ms && reads.errors == 0),
            );
        }
    }

    /// The Targets rows of the kube-proxies' fan-out cost: kcache's CPU per delivery ≤ 2 µs
    /// and ≤ 1 core while every slice change goes to every kube-proxy.
    fn fanout_checks(&mut self, nodes: usize, f: &FanRun) {
        let us = f.cpu_per_delivery_us();
        self.report.check(
            "fleet: kube-proxies' fan-out, kcache CPU per delivery",
            "≤ 2 µs",
            format!("{us:.2} µs ({nodes} nodes)"),
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
