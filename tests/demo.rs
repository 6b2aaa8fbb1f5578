//! What a visitor sees first: `kcache demo`, then `kubectl get` through kcache. The demo's
//! simulated cluster hands out the apiserver's Table columns, and kcache prints the rows from
//! its cache.

mod common;

use common::{get_with, EnvBuilder};
use kcache_sim::seed;

/// What kubectl 1.28 sends for `kubectl get`.
const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

fn names(table: &serde_json::Value) -> Vec<String> {
    table["columnDefinitions"]
        .as_array()
        .unwrap_or_else(|| panic!("not a Table: {table}"))
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn kubectl_get_prints_the_apiservers_columns_on_the_demo() {
    let env = EnvBuilder {
        sim: kcache_sim::SimConfig::demo(),
        seed: seed::demo_cluster(&seed::DemoSpec::default()),
        ..EnvBuilder::default()
    }
    .start()
    .await;
    kcache_sim::table_columns::serve_builtin(&env.sim);
    let cases: [(&str, &[&str]); 4] = [
        (
            "/api/v1/pods",
            &["Name", "Ready", "Status", "Restarts", "Age"],
        ),
        (
            "/apis/apps/v1/deployments",
            &["Name", "Ready", "Up-to-date", "Available", "Age"],
        ),
        (
            "/api/v1/nodes",
            &["Name", "Status", "Roles", "Age", "Version"],
        ),
        (
            "/api/v1/services",
            &[
                "Name",
                "Type",
                "Cluster-IP",
                "External-IP",
                "Port(s)",
                "Age",
            ],
        ),
    ];
    for (path, want) in cases {
        // kubectl reads with resourceVersion unset and pages of 500.
        let r = get_with(
            &env.url(),
            &format!("{path}?limit=500"),
            &[("Accept", KUBECTL_TABLE)],
        )
        .await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let t = r.json();
        let got = names(&t);
        assert_eq!(&got[..want.len()], want, "{path}");
        let rows = t["rows"].as_array().unwrap();
        assert!(!rows.is_empty(), "{path}: no rows");
        for row in rows {
            let cells = row["cells"].as_array().unwrap();
            assert_eq!(cells.len(), got.len(), "{path}: {row}");
            assert!(
                cells[0].as_str().is_some_and(|n| !n.is_empty()),
                "{path}: {row}"
            );
        }
    }
}
