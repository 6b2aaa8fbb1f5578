//! The `fleet` scenario: a cluster at sig-scalability's proportions (`seed::fleet`: per node
//! 30 Pods, 2 Services with their EndpointSlices; a namespace per 50 nodes) behind one kcache,
//! with its clients reading as a cluster's do.
//!
//! What it runs so far: the kubelets. One watch per node of the Pods scheduled to it
//! (`fieldSelector=spec.nodeName=<node>`), each on a connection of its own over HTTP/2, while
//! the upstream's Pods change at the load test's pace (every created Pod is updated three
//! times: scheduled, running, ready; 100 creates a second make 300 Pod updates a second). It
//! reports delivery delay (write acknowledged → event received), events lost, kcache's CPU and
//! memory against the JSON it holds. The other client classes (kube-proxies, controllers,
//! interactive users), the churn's creates and deletes, TLS with an identity per node, and the
//! herd are not run yet.

use kcache_sim::seed::{self, FleetSpec};
use serde_json::Value;

use super::fanout::{node_pod_watches, scheduled_on};
use super::kcache::ChildConfig;
use super::watchers::Proto;
use super::{bump, count_label, fmt_num, list_rv, load, ms, progress, seed_sim, start_sim, Bench};

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

impl Bench {
    pub(super) async fn fleet(&mut self) -> Result<(), String> {
        const S: &str = "fleet: kubelets' Pod watches (fieldSelector=spec.nodeName), HTTP/2";
        let nodes = self.cap_watchers(self.fleet_nodes(), "fleet");
        progress(format!("fleet: seeding a cluster of {nodes} nodes"));
        let sim = start_sim().await?;
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
        let held_json: usize = objects
            .iter()
            .filter(|o| FLEET_TYPES.iter().any(|(_, _, r)| *r == o.resource))
            .map(|o| serde_json::to_vec(&o.object).map_or(0, |b| b.len()))
            .sum();
        if pods.is_empty() {
            return Err("no scheduled pods in the fleet".into());
        }
        seed_sim(&sim, objects)?;
        progress(format!(
            "fleet: {} scheduled Pods; starting kcache",
            count_label(scheduled)
        ));
        let k = self
            .kcache(&sim, &ChildConfig::caching(&FLEET_TYPES))
            .await?;
        let rv = list_rv(k.addr, "/api/v1/pods").await?;
        let watches = node_pod_watches(nodes, rv, "&allowWatchBookmarks=true");
        let case = format!(
            "{} nodes, {} Pods, {} Pod updates/s",
            count_label(nodes),
            count_label(scheduled),
            fmt_num(POD_UPDATES_PER_SEC)
        );
        progress(format!("fleet: {case}"));
        let f = self
            .fan_run(
                &k,
                &load::Target::plain(k.addr),
                // A connection of its own for each kubelet, as in a cluster.
                Proto::H2 { connections: nodes },
                watches,
                POD_UPDATES_PER_SEC,
                secs,
                |i| {
                    let (o, node) = &pods[i as usize % pods.len()];
                    bump(&sim, "pods", o, self.next_seq()).map(|rv| (rv, *node))
                },
            )
            .await;
        let mut row = Self::fan_row(S, &case, "kcache", &f);
        row.set("kcache RSS MB", f.rss_peak as f64 / 1e6)
            .set("JSON held MB", held_json as f64 / 1e6)
            .set("RSS / JSON held", f.rss_peak as f64 / held_json as f64);
        self.report.push(row);
        let d = &f.delivery;
        let p99 = ms(d.percentile(0.99));
        self.report.check(
            "fleet: kubelets' Pod events p99",
            "≤ 100 ms",
            format!("{p99:.1} ms ({nodes} nodes)"),
            (d.delivered > 0).then_some(p99 <= 100.0),
        );
        self.report.check(
            "fleet: kubelets' Pod events lost",
            "0",
            format!("{} of {}", d.missing(), d.expected),
            Some(d.missing() == 0 && d.expected > 0),
        );
        drop(k);
        sim.shutdown().await;
        Ok(())
    }
}
