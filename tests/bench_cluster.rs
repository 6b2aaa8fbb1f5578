//! `kcache bench --kubeconfig` against the simulated apiserver running as a process of its own
//! (`kcache sim`: HTTPS, a CA of its own, a bearer token, all in the kubeconfig it writes), at
//! tiny scale: read-only, then with `--writes`. The bench library is called directly (the
//! `bench` feature of the binary is off under `cargo test`); the kcache it starts and the sim
//! are this package's `kcache` binary. What is asserted is what the output promises: both
//! targets in every table, rows with requests and no errors, every write delivered and no stale
//! read, nothing written without `--writes`, and the bench's namespace gone after it. No timing
//! is asserted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kcache_bench::cluster::{self, ClusterOptions, ClusterScale};
use kcache_bench::load::{self, Target};
use kcache_bench::report::Row;
use kcache_bench::TempDir;
use serde_json::Value;

mod sim_process;
use sim_process::SimProcess;

const KCACHE: &str = env!("CARGO_BIN_EXE_kcache");

fn options(kubeconfig: &Path, writes: bool) -> ClusterOptions {
    ClusterOptions {
        kubeconfig: kubeconfig.to_path_buf(),
        context: None,
        namespace: None,
        writes,
        exe: PathBuf::from(KCACHE),
        scale: ClusterScale {
            phase: Duration::from_millis(250),
            clients: 2,
            watchers: 2,
            watch: Duration::from_millis(600),
            write_rate: 20.0,
            write_objects: 3,
            // The second case under writes, in the namespace grown.
            write_objects_large: 5,
            // A few rounds, LISTs of several pages.
            interactive: Duration::from_millis(1100),
            interactive_every: Duration::from_millis(400),
            page: 10,
        },
    }
}

/// A GET on the sim with the kubeconfig's credentials: status and JSON body.
async fn get(target: &Target, path: &str) -> (u16, Value) {
    let (status, body) = load::fetch_from(target, path, Duration::from_secs(10))
        .await
        .expect("GET from the sim");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// What the sim holds, as far as the bench could have changed it: the store's revision,
/// ConfigMap and namespace names.
async fn state(target: &Target) -> (String, Vec<String>, Vec<String>) {
    let names = |v: &Value| -> Vec<String> {
        let mut n: Vec<String> = v["items"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect();
        n.sort();
        n
    };
    let (status, cms) = get(target, "/api/v1/configmaps").await;
    assert_eq!(status, 200);
    let (status, nss) = get(target, "/api/v1/namespaces").await;
    assert_eq!(status, 200);
    let rv = cms["metadata"]["resourceVersion"]
        .as_str()
        .expect("list RV")
        .to_string();
    (rv, names(&cms), names(&nss))
}

fn num(row: &Row, column: &str) -> u64 {
    row.values
        .get(column)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{} / {}: no {column}: {:?}", row.scenario, row.target, row))
}

/// Every table has the direct and the kcache row of each case, and the read tables also the
/// row of the kcache over HTTPS with delegated authentication (the sim's kubeconfig has a
/// bearer token); read rows made requests without errors; watch rows opened every watcher
/// without errors.
fn check_tables(rows: &[Row], watchers: u64) -> Vec<String> {
    let mut scenarios: Vec<String> = rows.iter().map(|r| r.scenario.clone()).collect();
    scenarios.dedup();
    for s in &scenarios {
        let in_s: Vec<&Row> = rows.iter().filter(|r| &r.scenario == s).collect();
        for case in in_s.iter().map(|r| &r.case) {
            let targets: Vec<&str> = in_s
                .iter()
                .filter(|r| &r.case == case)
                .map(|r| r.target.as_str())
                .collect();
            let reads = s.starts_with("Cluster: LIST all")
                || s.starts_with("Cluster: LIST one namespace")
                || s.starts_with("Cluster: GET");
            let expected: &[&str] = if reads {
                &[
                    "apiserver (direct)",
                    "kcache",
                    "kcache HTTPS, auth delegated",
                ]
            } else {
                &["apiserver (direct)", "kcache"]
            };
            assert_eq!(targets, expected, "{s} / {case}");
        }
        for r in in_s {
            assert_eq!(num(r, "errors"), 0, "{s} / {}: {}", r.target, r.note);
            if s.contains("WATCH") {
                assert_eq!(num(r, "watchers"), watchers, "{s} / {}", r.target);
            } else {
                assert!(num(r, "requests") > 0, "{s} / {}", r.target);
            }
        }
    }
    scenarios
}

const INTERACTIVE: &str = "Cluster: interactive consistent reads (RV unset; LISTs by pages of 10), one round every 0.400 s";

/// The interactive table has `reads` cases, among them `cases`, each read in every round on
/// both targets (one round at least: a read through kcache may take seconds); the
/// all-namespaces LISTs took several pages.
fn check_interactive(rows: &[Row], cases: &[&str], reads: usize) {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.scenario == INTERACTIVE).collect();
    assert_eq!(rows.len(), reads * 2, "{rows:?}");
    for c in cases {
        assert!(rows.iter().any(|r| r.case == *c), "{c}: {rows:?}");
    }
    for r in &rows {
        assert!(num(r, "reads") >= 1, "{}: {r:?}", r.case);
        if r.case.starts_with("LIST configmaps, all") {
            assert!(num(r, "pages") >= 4, "{r:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_bench_against_the_sim_as_a_process() {
    let dir = TempDir::new("bench-cluster").unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let _sim = SimProcess::start(
        KCACHE,
        &kubeconfig,
        &["--configmaps", "40", "--pods", "12", "--namespaces", "3"],
    );
    // The test's own view of the sim: the same kubeconfig, HTTPS and the token.
    let sim = cluster::connect(&kubeconfig, None).await.unwrap();
    assert!(sim.target.tls.is_some(), "the sim serves HTTPS");
    assert_eq!(sim.auth, "bearer token");
    let (status, _) = get(
        &Target {
            authorization: None,
            ..sim.target.clone()
        },
        "/api/v1/configmaps",
    )
    .await;
    assert_eq!(status, 403, "without the token the sim is anonymous");
    let before = state(&sim.target).await;

    // Read-only: every read scenario and the watch, and nothing written.
    let run = cluster::run(&options(&kubeconfig, false)).await.unwrap();
    assert_eq!(run.namespace, None);
    let scenarios = check_tables(&run.report.rows, 2);
    for s in [
        "Cluster: LIST all (RV=0), 2 clients",
        "Cluster: LIST all (RV unset, consistent), 2 clients",
        "Cluster: LIST one namespace (RV unset, consistent), 2 clients",
        "Cluster: GET by name (RV=0), 2 clients",
        "Cluster: GET by name (RV unset, consistent), 2 clients",
        "Cluster: WATCH ConfigMaps, all namespaces, HTTP/2",
        INTERACTIVE,
    ] {
        assert!(
            scenarios.iter().any(|x| x == s),
            "{s} missing: {scenarios:?}"
        );
    }
    // Both resources in the LIST tables.
    let lists: Vec<&str> = run
        .report
        .rows
        .iter()
        .filter(|r| r.scenario.starts_with("Cluster: LIST all (RV=0)"))
        .map(|r| r.case.as_str())
        .collect();
    assert!(
        lists
            .iter()
            .any(|c| c.starts_with("configmaps: 40 objects")),
        "{lists:?}"
    );
    assert!(
        lists.iter().any(|c| c.starts_with("pods: 12 objects")),
        "{lists:?}"
    );
    // kube-system: the sim has no such namespace, so its LIST is empty and there is no GET.
    check_interactive(&run.report.rows, &["LIST configmaps in kube-system"], 3);
    assert_eq!(state(&sim.target).await, before, "read-only wrote nothing");
    let markdown = kcache_bench::render(&run.report);
    assert!(markdown.contains("| apiserver (direct) |") && markdown.contains("| kcache |"));

    // With writes: its own namespace, every write delivered to every watcher, no stale read,
    // and the namespace gone at the end.
    let run = cluster::run(&options(&kubeconfig, true)).await.unwrap();
    let ns = run.namespace.clone().expect("the bench's namespace");
    assert!(ns.starts_with("kcache-bench-"), "{ns}");
    let scenarios = check_tables(&run.report.rows, 2);
    // The bench's namespace, and a GET of its first ConfigMap.
    check_interactive(
        &run.report.rows,
        &[
            &format!("LIST configmaps in {ns}"),
            &format!("GET configmap {ns}/bench-0001"),
        ],
        4,
    );
    assert!(
        run.report.notes.iter().any(|n| n.starts_with(&format!(
            "interactive: Secret {ns}/kcache-bench-other updated"
        )) && !n.contains("failed")),
        "{:?}",
        run.report.notes
    );
    let watch: Vec<&Row> = run
        .report
        .rows
        .iter()
        .filter(|r| r.scenario == "Cluster: WATCH ConfigMaps of the bench's namespace, HTTP/2")
        .collect();
    assert_eq!(watch.len(), 2, "{scenarios:?}");
    for r in watch {
        let writes = num(r, "writes");
        assert!(writes > 0, "{}", r.target);
        let delivered = r.values["delivered"].as_str().unwrap();
        assert_eq!(delivered, format!("{0}/{0}", writes * 2), "{}", r.target);
    }
    let consistent: Vec<&Row> = run
        .report
        .rows
        .iter()
        .filter(|r| {
            r.scenario
                .starts_with("Cluster: consistent LIST (RV unset) of the bench's namespace")
        })
        .collect();
    // Both cases, the namespace as created and grown, direct and through kcache.
    let cases: Vec<&str> = consistent.iter().map(|r| r.case.as_str()).collect();
    assert_eq!(
        cases,
        [
            "3 ConfigMaps, 20.0 writes/s",
            "3 ConfigMaps, 20.0 writes/s",
            "5 ConfigMaps, 20.0 writes/s",
            "5 ConfigMaps, 20.0 writes/s"
        ],
        "{scenarios:?}"
    );
    for r in consistent {
        assert!(num(r, "reads checked") > 0, "{}", r.target);
        assert_eq!(num(r, "stale reads"), 0, "{}: {}", r.target, r.note);
        assert!(num(r, "writes acked") > 0, "{}", r.target);
    }
    assert!(
        run.report
            .notes
            .iter()
            .any(|n| n == &format!("namespace {ns} deleted")),
        "{:?}",
        run.report.notes
    );
    let (status, _) = get(&sim.target, &format!("/api/v1/namespaces/{ns}")).await;
    assert_eq!(status, 404, "the bench's namespace is gone");
    let after = state(&sim.target).await;
    assert_ne!(after.0, before.0, "the writes happened");
    assert_eq!(
        (&after.1, &after.2),
        (&before.1, &before.2),
        "nothing left behind"
    );
}
