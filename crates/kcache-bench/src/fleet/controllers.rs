//! The fleet's controllers: [`CONTROLLERS`] full informers of Pods, Nodes, EndpointSlices and
//! Services, as a cluster's controller manager, scheduler and operators run them, each with a
//! ServiceAccount of its own. Each lists every object of the four types (RV=0 in protobuf, as
//! client-go's reflector starts: the sim's v1.28 profile has no WatchList), then watches each
//! from there, while the cluster's Pods, Nodes and slices change at their paces.
//!
//! A controller's lists are read and dropped as they arrive (a controller would decode them
//! into its store; the bench counts bytes), at most [`LISTS_AT_ONCE`] at a time: kcache, the
//! sim and the bench share this machine's memory, and twenty lists of every Pod in flight at
//! once (some 600 MB each in protobuf at 5,000 nodes) were not tried.

use std::time::{Duration, Instant};

use kcache_sim::rbac::{Rbac, Subject};

use super::super::fanout::FanRun;
use super::super::kcache::KcacheChild;
use super::super::watchers::Proto;
use super::super::{count_label, fmt_num, load, mb, progress, Bench, Row, Sim};
use super::{
    rv_on, Access, Churn, NODE_UPDATES_PER_NODE_PER_SEC, POD_WRITES_PER_SEC, SLICE_UPDATES_PER_SEC,
};

/// Controllers with full informers: sig-scalability's load test runs the controller manager,
/// the scheduler and a few operators; twenty of them.
pub(super) const CONTROLLERS: usize = 20;

/// Lists in flight at once during the controllers' start.
const LISTS_AT_ONCE: usize = 4;

/// What every controller lists and watches.
const COLLECTIONS: [&str; 4] = [
    "/api/v1/pods",
    "/api/v1/nodes",
    "/apis/discovery.k8s.io/v1/endpointslices",
    "/api/v1/services",
];

/// The group the controllers' ServiceAccounts are bound through.
const GROUP: &str = "bench:controllers";

/// Controller `i`'s token.
pub(super) fn token(i: usize) -> String {
    format!("controller-{i}")
}

/// The controllers in the sim's table: each its own ServiceAccount, allowed to read the four
/// types cluster-wide.
pub(super) fn rbac(mut rbac: Rbac) -> Rbac {
    for i in 1..=CONTROLLERS {
        rbac = rbac.token(
            &token(i),
            &format!("system:serviceaccount:kube-system:controller-{i}"),
            &["system:serviceaccounts", GROUP],
        );
    }
    rbac.allow(
        Subject::Group(GROUP.into()),
        &["get", "list", "watch"],
        &["", "discovery.k8s.io"],
        &["pods", "nodes", "services", "endpointslices"],
        None,
    )
}

/// A watch of a whole collection from `rv`, with bookmarks.
fn watch_all(collection: &str, rv: u64) -> String {
    format!("{collection}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=900")
}

impl Bench {
    /// The controllers' start (every list), then their watches while the cluster changes: a
    /// row for the start and one per type of delivery, with their Targets.
    pub(super) async fn controllers(
        &mut self,
        k: &KcacheChild,
        sim: &Sim,
        access: &Access,
        nodes: usize,
        churn: &Churn<'_>,
    ) -> Result<(), String> {
        const S: &str =
            "fleet: controllers' informers (Pods, Nodes, EndpointSlices, Services), HTTP/2, protobuf";
        let target = access.controllers(k.addr);
        progress(format!(
            "fleet: {CONTROLLERS} controllers listing the four types, {LISTS_AT_ONCE} lists at a time"
        ));
        // Every list in turn across the controllers: the first of each type first.
        let lists: Vec<(usize, &str)> = COLLECTIONS
            .iter()
            .flat_map(|c| (0..CONTROLLERS).map(move |i| (i, *c)))
            .collect();
        let t = Instant::now();
        let listed: Vec<Result<(u16, u64), String>> =
            futures::StreamExt::collect(futures::StreamExt::buffer_unordered(
                futures::stream::iter(lists.iter().map(|(i, c)| {
                    let t = target.for_watch(*i);
                    let path = format!("{c}?resourceVersion=0");
                    async move { load::fetch_len(&t, &path, Duration::from_secs(600)).await }
                })),
                LISTS_AT_ONCE,
            ))
            .await;
        let synced = t.elapsed();
        let mut bytes = 0u64;
        let mut failed = Vec::new();
        for r in listed {
            match r {
                Ok((200, len)) => bytes += len,
                Ok((status, _)) => failed.push(format!("status {status}")),
                Err(e) => failed.push(e),
            }
        }
        let case = format!("{CONTROLLERS} controllers, {} nodes", count_label(nodes));
        let mut row = Row::new(S, &format!("start: {case}, every list"), "kcache");
        row.set("lists", lists.len() as u64)
            .set("synced s", synced.as_secs_f64())
            .set("MB listed", mb(bytes));
        if let Some(e) = failed.first() {
            row.note(format!("{} lists failed: {e}", failed.len()));
        }
        self.report.push(row);
        self.report.check(
            "fleet: controllers' start, every list answered",
            "all",
            format!(
                "{} of {} in {:.1} s",
                lists.len() - failed.len(),
                lists.len(),
                synced.as_secs_f64()
            ),
            Some(failed.is_empty()),
        );

        let mut rvs = Vec::with_capacity(3);
        for c in &COLLECTIONS[..3] {
            rvs.push(rv_on(&target, c).await?);
        }
        let watches = |collection: &str, rv: u64| -> Vec<(Option<usize>, String)> {
            (0..CONTROLLERS)
                .map(|_| (None, watch_all(collection, rv)))
                .collect()
        };
        let node_rate = NODE_UPDATES_PER_NODE_PER_SEC * nodes as f64;
        let proto = Proto::H2 {
            connections: CONTROLLERS,
        };
        let classes = self.churn_classes(
            sim,
            churn,
            nodes,
            "churn-controllers-",
            [
                (&target, proto, watches(COLLECTIONS[0], rvs[0])),
                (&target, proto, watches(COLLECTIONS[1], rvs[1])),
                (&target, proto, watches(COLLECTIONS[2], rvs[2])),
            ],
        );
        progress(format!("fleet: {case}: watching while the cluster changes"));
        let (runs, ()) = self
            .fan_runs(k, classes, self.scale.fleet_secs, async {})
            .await;
        let [pods, node_run, slices] = <[FanRun; 3]>::try_from(runs)
            .map_err(|_| "fleet: controllers: three runs expected".to_string())?;
        for (what, rate, run) in [
            ("Pods", POD_WRITES_PER_SEC, &pods),
            ("Nodes", node_rate, &node_run),
            ("EndpointSlices", SLICE_UPDATES_PER_SEC, &slices),
        ] {
            self.report.push(Self::delivery_row(
                S,
                &format!("{what}: {case}, {} writes/s", fmt_num(rate)),
                "kcache",
                run,
            ));
            self.delivery_checks(&format!("controllers' {what} events"), 250.0, nodes, run);
        }
        let all = FanRun::together(&[&pods, &node_run, &slices]);
        self.report.push(Self::fan_row(
            S,
            &format!("every type: {case}"),
            "kcache",
            &all,
        ));
        Ok(())
    }
}
