//! `kcache bench --kubeconfig … --scenarios fleet --quick` against the simulated apiserver
//! running as a process of its own (`kcache sim`: HTTPS, a bearer token of `system:masters`),
//! at a small fleet. The bench writes its fleet, ServiceAccounts, a ClusterRole and its
//! binding, asks a TokenRequest per node client, reads the apiserver's `/metrics`, runs the
//! node clients directly and through a kcache it starts with delegated authentication, and
//! deletes everything. What is asserted is what a user relies on: the run finishes, its report
//! has the fleet's rows for both targets, no event was lost, and none of the bench's objects
//! is left in the cluster. No timing is asserted.

use std::path::PathBuf;
use std::time::Duration;

use kcache_bench::cluster;
use kcache_bench::cluster_fleet::{self, FleetOptions};
use kcache_bench::load::{self, Target};
use kcache_bench::report::Row;
use kcache_bench::TempDir;
use serde_json::Value;

mod sim_process;
use sim_process::SimProcess;

const KCACHE: &str = env!("CARGO_BIN_EXE_kcache");
/// Nodes of the fleet: two node clients each.
const NODES: usize = 20;
/// The churn's pace (`--churn`; the bench's 100 a second is 500 writes a second). A write goes
/// out at its time whether or not the one before it was answered, so a Pod's status update
/// can reach a sim that has not yet stored the Pod: debug builds of the sim, the bench and
/// kcache sharing two loaded cores answer 500 a second only some of the time. A fifth of
/// that keeps every write answered in time; what is asserted does not depend on the pace.
const PODS_PER_SEC: f64 = 20.0;

/// A GET on the sim with the kubeconfig's credentials: status and JSON body.
async fn get(target: &Target, path: &str) -> (u16, Value) {
    let (status, body) = load::fetch_from(target, path, Duration::from_secs(30))
        .await
        .expect("GET from the sim");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The names of the objects of `collection` labelled as the bench labels what it creates.
async fn bench_objects(target: &Target, collection: &str) -> Vec<String> {
    let (status, list) = get(
        target,
        &format!("{collection}?labelSelector=app.kubernetes.io%2Fcreated-by%3Dkcache-bench"),
    )
    .await;
    assert_eq!(status, 200, "{collection}: {list}");
    list["items"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            format!(
                "{}/{}",
                m["namespace"].as_str().unwrap_or(""),
                m["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn num(row: &Row, column: &str) -> f64 {
    row.values
        .get(column)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{} / {}: no {column}: {:?}", row.scenario, row.target, row))
}

const COLLECTIONS: [&str; 8] = [
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/api/v1/pods",
    "/api/v1/services",
    "/api/v1/serviceaccounts",
    "/apis/discovery.k8s.io/v1/endpointslices",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_bench_against_the_sim_as_a_process() {
    let dir = TempDir::new("bench-fleet").unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let _sim = SimProcess::start(
        KCACHE,
        &kubeconfig,
        &["--configmaps", "5", "--pods", "5", "--namespaces", "1"],
    );
    let sim = cluster::connect(&kubeconfig, None).await.unwrap();

    let opts = FleetOptions {
        exe: PathBuf::from(KCACHE),
        pods_per_sec: PODS_PER_SEC,
        ..FleetOptions::quick(kubeconfig.clone(), NODES)
    };
    let report = cluster_fleet::run(&opts).await.expect("the fleet bench");

    let case = format!("{NODES} nodes, {} clients", 2 * NODES);
    let rows = |scenario: &str| -> Vec<&Row> {
        report
            .rows
            .iter()
            .filter(|r| r.scenario.starts_with(scenario))
            .collect()
    };
    // The start and the herd: both targets, every client synced, none failed.
    for scenario in [
        "fleet (cluster): every node client listing",
        "fleet (cluster): the herd, every node client",
    ] {
        let rows = rows(scenario);
        let targets: Vec<&str> = rows.iter().map(|r| r.target.as_str()).collect();
        assert_eq!(
            targets,
            ["apiserver (direct)", "kcache HTTPS, auth delegated"],
            "{scenario}"
        );
        for r in rows {
            assert_eq!(r.case, case);
            assert!(r.note.is_empty(), "{scenario} / {}: {}", r.target, r.note);
            assert!(num(r, "synced s") > 0.0, "{r:?}");
        }
    }
    // The churn: per target, both classes of events, every one delivered.
    let churn = rows("fleet (cluster): node clients under the load test's Pod churn");
    assert_eq!(churn.len(), 4, "{churn:?}");
    for r in &churn {
        assert!(r.note.is_empty(), "{} / {}: {}", r.case, r.target, r.note);
        assert_eq!(num(r, "watchers") as usize, NODES, "{r:?}");
        let delivered = r.values["delivered"].as_str().expect("delivered");
        let (got, expected) = delivered.split_once('/').expect("n/m");
        assert!(expected != "0", "{} / {}: no events", r.case, r.target);
        assert_eq!(got, expected, "{} / {}: events lost", r.case, r.target);
        // The apiserver's own figures, from its /metrics.
        assert!(num(r, "apiserver RSS MB") > 0.0, "{r:?}");
    }
    for target in ["apiserver (direct)", "kcache HTTPS, auth delegated"] {
        assert_eq!(
            churn.iter().filter(|r| r.target == target).count(),
            2,
            "{target}"
        );
    }
    // The herd against a restarted kcache: every client back.
    let restarted = rows("fleet (cluster): the herd against a kcache restarted");
    assert_eq!(restarted.len(), 1, "{:?}", report.rows);
    assert!(restarted[0].note.is_empty(), "{}", restarted[0].note);
    // The report's own verdicts on losses.
    for c in &report.checks {
        if c.target.contains("lost or later than 5 s") {
            assert_eq!(c.pass, Some(true), "{}: {}", c.target, c.measured);
        }
    }
    assert!(
        report.notes.iter().any(|n| n.starts_with("deleted: ")),
        "{:?}",
        report.notes
    );
    // Nothing of the bench's is left.
    for collection in COLLECTIONS {
        let left = bench_objects(&sim.target, collection).await;
        assert!(left.is_empty(), "{collection}: left behind: {left:?}");
    }
}
