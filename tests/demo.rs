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

/// Cells that print the time since something: they may read a second apart in two answers.
const AGES: [&str; 4] = ["Age", "Last Seen", "First Seen", "Duration"];

/// `kubectl get <type> -A` of every type the demo seeds prints rows, straight from the
/// simulated cluster (which prints them as the apiserver does) and through kcache (which
/// prints them from its cache) alike: the same columns, the same rows, the same cells; and
/// `kubectl get <type> NAME` of one of them prints that row.
#[tokio::test]
async fn every_seeded_type_prints_the_same_rows_from_the_sim_and_through_kcache() {
    // The demo's profile (v1.34) and v1.28, whose Job printer has no Status column.
    for profile in kcache_sim::Profile::ALL {
        same_rows_from_the_sim_and_through_kcache(profile).await;
    }
}

async fn same_rows_from_the_sim_and_through_kcache(profile: kcache_sim::Profile) {
    let types: [(&str, &str, &str); 14] = [
        ("", "v1", "namespaces"),
        ("", "v1", "nodes"),
        ("", "v1", "pods"),
        ("", "v1", "services"),
        ("", "v1", "configmaps"),
        ("", "v1", "secrets"),
        ("", "v1", "serviceaccounts"),
        ("", "v1", "events"),
        ("apps", "v1", "deployments"),
        ("apps", "v1", "replicasets"),
        ("apps", "v1", "daemonsets"),
        ("apps", "v1", "statefulsets"),
        ("batch", "v1", "jobs"),
        ("discovery.k8s.io", "v1", "endpointslices"),
    ];
    let config = kcache::config::Config {
        resources: types
            .iter()
            .map(|(g, v, r)| common::resource(g, v, r))
            .collect(),
        ..Default::default()
    };
    let env = EnvBuilder {
        sim: kcache_sim::SimConfig {
            progress_bookmarks: true,
            ..kcache_sim::SimConfig::for_profile(profile)
        },
        seed: seed::demo_cluster(&seed::DemoSpec::default()),
        config,
        ..EnvBuilder::default()
    }
    .start()
    .await;
    kcache_sim::table_columns::serve_builtin(&env.sim);
    for (group, version, resource) in types {
        // kubectl's read (consistent, pages of 500). In front of v1.28 kcache may pass a
        // consistent read through (it answers one only once it has proven its cache current),
        // so there the read is at resourceVersion=0, answered from its cache on every version.
        let query = match profile {
            kcache_sim::Profile::V1_34 => "limit=500",
            _ => "limit=500&resourceVersion=0",
        };
        let path = match group {
            "" => format!("/api/{version}/{resource}?{query}"),
            g => format!("/apis/{g}/{version}/{resource}?{query}"),
        };
        let table = |base: String| {
            let path = path.clone();
            async move {
                let r = get_with(&base, &path, &[("Accept", KUBECTL_TABLE)]).await;
                assert_eq!(r.status, 200, "{base}{path}: {}", r.text());
                r
            }
        };
        let (direct, through) = (table(env.sim.url()).await, table(env.url()).await);
        // kcache printed these rows itself, from its cache; it has no printer of its own for
        // ServiceAccounts, and passes their Tables through.
        assert_eq!(
            through.headers.contains_key("x-kcache-cache-age"),
            resource != "serviceaccounts",
            "{path}: from the cache or passed through"
        );
        let (direct, through) = (direct.json(), through.json());
        let columns = names(&direct);
        assert_eq!(names(&through), columns, "{path}");
        let rows = |t: &serde_json::Value| t["rows"].as_array().cloned().unwrap_or_default();
        let (direct_rows, through_rows) = (rows(&direct), rows(&through));
        assert!(!direct_rows.is_empty(), "{path}: no rows from the sim");
        if resource == "jobs" {
            assert_eq!(
                columns.contains(&"Status".to_string()),
                profile == kcache_sim::Profile::V1_34
            );
        }
        assert_eq!(direct_rows.len(), through_rows.len(), "{path}");
        for (d, t) in direct_rows.iter().zip(&through_rows) {
            let (d_cells, t_cells) = (
                d["cells"].as_array().unwrap(),
                t["cells"].as_array().unwrap(),
            );
            assert_eq!(d_cells.len(), columns.len(), "{path}: {d}");
            assert_eq!(t_cells.len(), columns.len(), "{path}: {t}");
            for (i, column) in columns.iter().enumerate() {
                if !AGES.contains(&column.as_str()) {
                    assert_eq!(d_cells[i], t_cells[i], "{path}: column {column}\n{d}\n{t}");
                }
            }
            assert_eq!(
                d["object"]["metadata"]["name"],
                t["object"]["metadata"]["name"]
            );
        }
        // `kubectl get <type> NAME` of the first object: one row, the list's, from the sim
        // and through kcache alike.
        let meta = &direct_rows[0]["object"]["metadata"];
        let name = meta["name"].as_str().unwrap();
        let object_path = match (group, meta["namespace"].as_str()) {
            ("", None) => format!("/api/{version}/{resource}/{name}"),
            ("", Some(ns)) => format!("/api/{version}/namespaces/{ns}/{resource}/{name}"),
            (g, None) => format!("/apis/{g}/{version}/{resource}/{name}"),
            (g, Some(ns)) => format!("/apis/{g}/{version}/namespaces/{ns}/{resource}/{name}"),
        };
        for base in [env.sim.url(), env.url()] {
            let r = get_with(&base, &object_path, &[("Accept", KUBECTL_TABLE)]).await;
            assert_eq!(r.status, 200, "{base}{object_path}: {}", r.text());
            let t = r.json();
            assert_eq!(names(&t), columns, "{base}{object_path}");
            let rows = rows(&t);
            assert_eq!(rows.len(), 1, "{base}{object_path}: {t}");
            let (got, want) = (
                rows[0]["cells"].as_array().unwrap(),
                direct_rows[0]["cells"].as_array().unwrap(),
            );
            assert_eq!(got.len(), columns.len(), "{base}{object_path}");
            for (i, column) in columns.iter().enumerate() {
                if !AGES.contains(&column.as_str()) {
                    assert_eq!(got[i], want[i], "{base}{object_path}: column {column}");
                }
            }
        }
    }
}
