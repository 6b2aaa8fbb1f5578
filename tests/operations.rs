//! Running kcache in production: metrics that exist and move, readiness, and a SIGTERM during
//! active watches that ends them cleanly within the grace period.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{get, get_with, resource, sample, EnvBuilder, Watch};
use kcache_sim::{Sim, SimConfig};

#[tokio::test]
async fn metrics_families_exist_and_move() {
    let env = EnvBuilder::fixtures().start().await;
    let base = env.url();
    // The upstream's last write a ConfigMap kcache has seen, so the consistent list below is
    // one the cache can prove fresh (one more object than the data set's 58).
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    // Traffic: cached list, consistent list, a watch that sees an event, a forwarded write.
    assert_eq!(
        get(
            &base,
            "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0"
        )
        .await
        .status,
        200
    );
    assert_eq!(
        get(&base, "/api/v1/namespaces/fixtures-a/configmaps")
            .await
            .status,
        200
    );
    assert_eq!(get(&base, "/api/v1/nodes").await.status, 200); // not cached: forwarded
    let mut w = Watch::open(
        &base,
        "/api/v1/namespaces/fixtures-b/configmaps?watch=1&resourceVersion=0&timeoutSeconds=5",
    )
    .await;
    assert_eq!(
        w.next_json(Duration::from_secs(5)).await.unwrap()["type"],
        "ADDED"
    );

    let m = get_with(
        &env.admin_url(),
        "/metrics",
        &[("Accept", "application/openmetrics-text; version=1.0.0")],
    )
    .await;
    assert_eq!(m.status, 200);
    assert!(m
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let t = m.text();
    for family in [
        "kcache_requests_total",
        "kcache_request_duration_seconds",
        "kcache_inflight_requests",
        "kcache_cached_objects",
        "kcache_cached_bytes",
        "kcache_upstream_events_total",
        "kcache_watch_events_sent_total",
        "kcache_watchers",
        "kcache_watchers_closed_total",
        "kcache_relists_total",
        "kcache_upstream_expired_total",
        "kcache_upstream_errors_total",
        "kcache_consistent_reads_total",
        "kcache_consistent_read_wait_seconds",
        "kcache_cache_lag_seconds",
        "kcache_cache_synced",
        "kcache_build_info",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
    ] {
        assert!(
            t.contains(&format!("# TYPE {}", family.trim_end_matches("_total")))
                || t.contains(family),
            "missing family {family}"
        );
    }
    assert!(t.trim_end().ends_with("# EOF"));
    let cm = "resource=\"configmaps\"";
    assert_eq!(
        sample(
            &t,
            &[
                "kcache_requests_total{",
                "verb=\"list\"",
                cm,
                "source=\"cache\"",
                "code=\"200\""
            ]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &t,
            &[
                "kcache_requests_total{",
                "verb=\"list\"",
                "resource=\"other\"",
                "source=\"upstream\""
            ]
        ),
        Some(1.0)
    );
    assert_eq!(sample(&t, &["kcache_cached_objects{", cm]), Some(59.0));
    assert!(sample(&t, &["kcache_cached_bytes{", cm]).unwrap() > 100_000.0);
    assert_eq!(sample(&t, &["kcache_cache_synced{", cm]), Some(1.0));
    assert_eq!(sample(&t, &["kcache_watchers{", cm]), Some(1.0));
    assert_eq!(
        sample(
            &t,
            &["kcache_consistent_reads_total{", cm, "outcome=\"cache\""]
        ),
        Some(1.0)
    );
    assert!(sample(&t, &["process_resident_memory_bytes"]).unwrap() > 1e6);

    // Counters move with traffic. Initial events are not counted as sent; nothing has
    // happened since the watch opened.
    assert_eq!(
        sample(&t, &["kcache_watch_events_sent_total{", cm]),
        Some(0.0)
    );
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "moves", "namespace": "fixtures-b"}});
    env.sim.create("", "configmaps", obj).unwrap();
    while let Some(ev) = w.next_json(Duration::from_secs(5)).await {
        if ev["object"]["metadata"]["name"] == "moves" {
            break;
        }
    }
    let t = get(&env.admin_url(), "/metrics").await.text();
    assert_eq!(
        sample(&t, &["kcache_watch_events_sent_total{", cm]),
        Some(1.0)
    );
    // The 58 objects of the initial (streaming) list, `provable-…` and `moves`.
    assert_eq!(
        sample(&t, &["kcache_upstream_events_total{", cm, "type=\"ADDED\""]),
        Some(60.0)
    );
}

#[tokio::test]
async fn readyz_reports_each_cache() {
    let env = EnvBuilder::fixtures()
        .resources(vec![resource("", "v1", "configmaps")])
        .start()
        .await;
    let r = get(&env.admin_url(), "/readyz").await;
    assert_eq!((r.status.as_u16(), r.text()), (200, "ok".to_string()));
    let v = get(&env.admin_url(), "/readyz?verbose").await.text();
    assert!(v.contains("[+]cache v1/configmaps ok"), "{v}");
    assert!(v.ends_with("readyz check passed\n"), "{v}");
}

/// The real binary: SIGTERM while watches are open ends them cleanly (EOF, no error event)
/// and the process exits 0 within the grace period.
#[tokio::test]
async fn sigterm_ends_watches_cleanly_within_grace() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    for o in kcache_sim::seed::fixture_dataset()
        .into_iter()
        .filter(|o| o.resource != "widgets")
    {
        sim.create(o.group, o.resource, o.object).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("kcache-sigterm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {}\ncontexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\nusers:\n- name: sim\n  user: {{}}\ncurrent-context: sim\n",
            sim.url()
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let admin_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("kcache.yaml");
    let mut f = std::fs::File::create(&config).unwrap();
    writeln!(
        f,
        "resources:\n- {{version: v1, resource: configmaps}}\nshutdownGraceSeconds: 3"
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args(["serve", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--config")
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + common::EVENTUALLY;
    loop {
        if let Ok(Ok(_)) = tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(("127.0.0.1", port)),
        )
        .await
        {
            if get(&format!("http://127.0.0.1:{admin_port}"), "/readyz")
                .await
                .status
                == 200
            {
                break;
            }
        }
        assert!(Instant::now() < deadline, "kcache did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut watches = Vec::new();
    for _ in 0..5 {
        let mut w = Watch::open(
            &base,
            "/api/v1/namespaces/fixtures-a/configmaps?watch=1&resourceVersion=0",
        )
        .await;
        assert_eq!(w.status, 200);
        assert!(w.next_json(Duration::from_secs(5)).await.is_some());
        watches.push(w);
    }
    let signalled = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    for mut w in watches {
        // Drain what was in flight: it must end with EOF, never an ERROR event.
        let rest = w.drain(Duration::from_secs(5)).await;
        assert!(w.ended, "watch still open after SIGTERM");
        assert!(rest.iter().all(|e| e["type"] != "ERROR"), "{rest:?}");
    }
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        // The grace period is 3 s; without it the open watches would keep kcache up for
        // good. The bound leaves a loaded machine a wide margin over it.
        assert!(
            signalled.elapsed() < Duration::from_secs(15),
            "kcache did not exit within the grace period"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "exit status {exit:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that gives up on a request (its stream reset while kcache waits for the upstream)
/// leaves `kcache_inflight_requests` as it found it: the request is no longer in flight.
#[tokio::test]
async fn a_request_its_client_gave_up_on_is_no_longer_in_flight() {
    let env = EnvBuilder::fixtures().start().await;
    let in_flight = |text: String| sample(&text, &["kcache_inflight_requests", "verb=\"list\""]);
    let before = in_flight(env.metrics().await).unwrap_or(0.0);
    // Every upstream answer now takes a minute: a forwarded list waits for it.
    env.sim.faults().set_latency(Duration::from_secs(60));
    let base = env.url();
    let client = tokio::spawn(async move {
        common::send_h2(&base, "/api/v1/nodes", &[]).await;
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while in_flight(env.metrics().await) != Some(before + 1.0) {
        assert!(Instant::now() < deadline, "the list never was in flight");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.abort();
    let deadline = Instant::now() + Duration::from_secs(10);
    while in_flight(env.metrics().await) != Some(before) {
        assert!(
            Instant::now() < deadline,
            "still in flight after its client left: {:?}",
            in_flight(env.metrics().await)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.sim.faults().set_latency(Duration::ZERO);
}
