//! The benchmark's building blocks at tiny scale, in-process: the load generator, a watch
//! fan-out over HTTP/1.1 and HTTP/2, the staleness checker (including a planted stale answer),
//! /proc readings, nginx when installed, and the report. No timing is asserted.

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{resource, EnvBuilder};
use kcache_bench::report::{Report, Row};
use kcache_bench::staleness::{parse_items, scan_items, stale_objects, AckLog, Checker};
use kcache_bench::watchers::{self, Proto};
use kcache_bench::{item_bytes, list_rv, load, nginx, procstat};
use kcache_sim::seed;
use serde_json::json;

fn configmap_env(n: usize) -> EnvBuilder {
    let mut b = EnvBuilder::default().resources(vec![resource("", "v1", "configmaps")]);
    b.seed = seed::configmaps(n, 2, 11);
    b
}

#[tokio::test]
async fn load_generator_counts_every_request_and_byte() {
    let env = configmap_env(40).start().await;
    let path = "/api/v1/configmaps?resourceVersion=0";
    // The same bytes from kcache and from the sim (kcache keeps the upstream's bytes).
    let (status, body) = load::fetch(env.kcache.addr, path, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (json_bytes, items) = item_bytes(&body).unwrap();
    assert_eq!(items, 40);
    assert!(json_bytes > 30_000, "{json_bytes}");

    for addr in [env.kcache.addr, env.sim.addr()] {
        let mut spec = load::LoadSpec::new(addr, path, 3, Duration::from_millis(300));
        spec.max_requests_per_worker = 50;
        let r = load::run(spec).await;
        assert_eq!(r.errors, 0, "{:?}", r.first_error);
        assert!(r.ok > 0);
        assert_eq!(r.latencies.len() as u64, r.ok);
        assert_eq!(r.bytes, r.ok * body.len() as u64);
        assert!(r.latencies.windows(2).all(|w| w[0] <= w[1]), "sorted");
        assert!(r.percentile(0.5) <= r.percentile(0.99));
    }

    // A failing target is counted as errors, not hidden.
    let mut spec = load::LoadSpec::new(
        env.kcache.addr,
        "/api/v1/nosuchthings",
        1,
        Duration::from_millis(100),
    );
    spec.max_requests_per_worker = 5;
    let r = load::run(spec).await;
    assert_eq!(r.ok, 0);
    assert!(r.errors > 0);
}

/// Watchers of `proto`, reading JSON or (with `accept`) another media type, get every event.
async fn fan_out_delivers_all(proto: Proto, accept: Option<&'static str>) {
    let env = configmap_env(30).start().await;
    let objects: Vec<_> = env
        .sim
        .list("", "configmaps")
        .into_iter()
        .take(10)
        .collect();
    let rv = list_rv(env.kcache.addr, "/api/v1/configmaps")
        .await
        .unwrap();
    let path = format!("/api/v1/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=60");
    // 20 watchers of everything and one of a single namespace (keyed: it gets half).
    let mut watches = vec![(None, path); 20];
    watches.push((
        Some(1),
        format!(
            "/api/v1/namespaces/bench-1/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=60"
        ),
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let until = Instant::now() + Duration::from_secs(60);
    let mut target = load::Target::plain(env.kcache.addr);
    if let Some(accept) = accept {
        target = target.accepting(accept);
    }
    let fan = watchers::open_to(&target, proto, watches, stop_rx, until, 8).await;
    assert_eq!(fan.failed, 0, "{:?}", fan.first_error);
    assert_eq!(fan.tasks.len(), 21);

    let sim = env.sim.clone();
    let log = watchers::write_at_rate(200.0, 10, |i| {
        let mut o = objects[i as usize].clone();
        o["metadata"]["annotations"] = json!({"bench": i.to_string()});
        let v = sim.update("", "configmaps", o).map_err(|e| e.to_string())?;
        let rv: u64 = v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let key = if v["metadata"]["namespace"] == "bench-1" {
            1
        } else {
            2
        };
        Ok((rv, key))
    })
    .await;
    assert_eq!(log.writes.len(), 10, "{:?}", log.first_error);
    let expected = fan.expected(&log);
    assert_eq!(expected, 20 * 10 + log.per_key()[&1]);
    assert!(
        fan.wait_for_events(expected, Duration::from_secs(30)).await,
        "all events arrive"
    );
    stop_tx.send(true).unwrap();
    let received = fan.finish().await;
    let d = watchers::delivery(&log, &received);
    assert_eq!(d.watchers, 21);
    assert_eq!(d.expected, expected);
    assert_eq!(d.delivered, expected);
    assert_eq!(d.missing(), 0);
    assert_eq!(d.ended_early, 0);
    assert_eq!(d.delays.len() as u64, expected);
    assert!(d.percentile(0.5) <= d.max());
}

#[tokio::test]
async fn http1_fan_out_delivers_every_event() {
    fan_out_delivers_all(Proto::H1, None).await;
}

#[tokio::test]
async fn http2_fan_out_delivers_every_event() {
    fan_out_delivers_all(Proto::H2 { connections: 2 }, None).await;
}

#[tokio::test]
async fn protobuf_watchers_find_every_event_in_protobuf_frames() {
    fan_out_delivers_all(
        Proto::H2 { connections: 2 },
        Some("application/vnd.kubernetes.protobuf, application/json"),
    )
    .await;
}

#[tokio::test]
async fn stalled_watchers_connect_and_kcache_keeps_serving() {
    let env = configmap_env(20).start().await;
    let stalled = watchers::open_stalled(
        env.kcache.addr,
        "/api/v1/configmaps?watch=1&resourceVersion=0&timeoutSeconds=60",
        3,
    )
    .await;
    assert_eq!(stalled.failed, 0);
    let (connections, _) = procstat::tcp_send_queues(env.kcache.addr.port());
    assert!(connections >= 3, "{connections}");
    let (status, _) = load::fetch(env.kcache.admin_addr, "/readyz", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(status, 200);
}

#[test]
fn staleness_checker_finds_a_planted_stale_answer() {
    let body = |b_rv: u64| {
        json!({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
        "items": [
            {"metadata": {"name": "a", "resourceVersion": "5"}, "data": {"name": "x"}},
            {"metadata": {"name": "b", "resourceVersion": b_rv.to_string()}}
        ]})
        .to_string()
    };
    let required: HashMap<String, u64> = [("a".to_string(), 5), ("b".to_string(), 7)].into();
    assert!(stale_objects(&required, body(7).as_bytes())
        .unwrap()
        .is_empty());
    assert!(stale_objects(&required, body(8).as_bytes())
        .unwrap()
        .is_empty());
    let stale = stale_objects(&required, body(6).as_bytes()).unwrap();
    assert_eq!(
        scan_items(body(6).as_bytes()).unwrap(),
        vec![("a".to_string(), 5), ("b".to_string(), 6)]
    );
    // Items in another shape are parsed instead.
    assert!(scan_items(br#"{"items":[{"kind":"X","metadata":{"name":"a"}}]}"#).is_none());
    assert_eq!(stale, vec!["b: written at 7, read 6".to_string()]);
    let missing: HashMap<String, u64> = [("c".to_string(), 1)].into();
    assert_eq!(
        stale_objects(&missing, body(7).as_bytes()).unwrap().len(),
        1
    );

    // Only writes acknowledged before the read was sent count.
    let checker = Checker::default();
    let before_any = Instant::now();
    checker.acks.record("a", 5);
    checker.acks.record("b", 7);
    let after = Instant::now();
    assert!(checker.acks.required_before(before_any).is_empty());
    assert_eq!(checker.acks.required_before(after), required);
    checker.check(before_any, 200, body(6).as_bytes());
    assert_eq!(checker.stale_reads.load(Ordering::Relaxed), 0);
    checker.check(after, 200, body(7).as_bytes());
    assert_eq!(checker.stale_reads.load(Ordering::Relaxed), 0);
    checker.check(after, 200, body(6).as_bytes());
    assert_eq!(checker.stale_reads.load(Ordering::Relaxed), 1);
    checker.check(after, 500, b"{}");
    assert_eq!(checker.unreadable.load(Ordering::Relaxed), 1);
    assert_eq!(checker.reads.load(Ordering::Relaxed), 4);
    assert!(checker.first_stale.lock().unwrap().is_some());
    let log = AckLog::default();
    assert!(log.is_empty());

    // A GET's answer is one object, checked against that object's writes only.
    let object = |name: &str, rv: u64| {
        json!({"kind": "ConfigMap", "metadata": {"name": name, "resourceVersion": rv.to_string()}})
            .to_string()
    };
    assert_eq!(checker.acks.required_for("b", after), Some(7));
    assert_eq!(checker.acks.required_for("b", before_any), None);
    let checker = Checker {
        acks: checker.acks,
        ..Checker::default()
    };
    checker.check_object(after, 200, object("b", 7).as_bytes());
    checker.check_object(before_any, 200, object("b", 6).as_bytes());
    checker.check_object(after, 200, object("c", 1).as_bytes());
    assert_eq!(checker.stale_reads.load(Ordering::Relaxed), 0);
    checker.check_object(after, 200, object("b", 6).as_bytes());
    assert_eq!(checker.stale_reads.load(Ordering::Relaxed), 1);
    checker.check_object(after, 404, object("b", 7).as_bytes());
    assert_eq!(checker.unreadable.load(Ordering::Relaxed), 1);
    assert_eq!(checker.reads.load(Ordering::Relaxed), 5);
}

#[tokio::test]
async fn consistent_lists_from_kcache_under_writes_are_never_stale() {
    let env = configmap_env(40).start().await;
    let checker = Arc::new(Checker::default());
    let objects: Vec<_> = env
        .sim
        .list("", "configmaps")
        .into_iter()
        .filter(|o| o["metadata"]["namespace"] == "bench-1")
        .collect();
    let writer = {
        let sim = env.sim.clone();
        let checker = checker.clone();
        tokio::spawn(async move {
            for i in 0..20u64 {
                let mut o = objects[i as usize % objects.len()].clone();
                o["metadata"]["resourceVersion"] = json!(null);
                o["metadata"]["annotations"] = json!({"seq": i.to_string()});
                let v = sim.update("", "configmaps", o).unwrap();
                let rv = v["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                checker
                    .acks
                    .record(v["metadata"]["name"].as_str().unwrap(), rv);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let cb = checker.clone();
    let mut spec = load::LoadSpec::new(
        env.kcache.addr,
        "/api/v1/namespaces/bench-1/configmaps",
        2,
        Duration::from_millis(400),
    );
    spec.max_requests_per_worker = 200;
    spec.on_response = Some(Arc::new(move |sent, status, body| {
        cb.check(sent, status, body)
    }));
    let r = load::run(spec).await;
    writer.await.unwrap();
    assert_eq!(checker.scan_mismatches.load(Ordering::Relaxed), 0);
    let (_, body) = load::fetch(
        env.kcache.addr,
        "/api/v1/namespaces/bench-1/configmaps",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let scanned = scan_items(&body).expect("the apiserver's list encoding");
    assert_eq!(scanned.len(), 20);
    assert_eq!(scanned, parse_items(&body).unwrap());
    assert_eq!(r.errors, 0, "{:?}", r.first_error);
    assert!(checker.reads.load(Ordering::Relaxed) > 0);
    assert_eq!(checker.unreadable.load(Ordering::Relaxed), 0);
    assert_eq!(
        checker.stale_reads.load(Ordering::Relaxed),
        0,
        "{:?}",
        checker.first_stale.lock().unwrap()
    );
}

#[test]
fn proc_readings_of_this_process() {
    let pid = std::process::id();
    assert!(procstat::rss_bytes(pid).unwrap() > 0);
    assert!(procstat::cpu_seconds(pid).is_some());
    assert!(procstat::open_files_limit().unwrap() > 0);
    let meter = procstat::CpuMeter::start(pid);
    let (cpu, wall) = meter.used();
    assert!(cpu >= 0.0 && wall >= 0.0);
}

#[tokio::test]
async fn nginx_serves_the_bytes_it_is_given() {
    let Some(bin) = nginx::find() else {
        eprintln!("nginx not installed; skipping");
        return;
    };
    let n = nginx::Nginx::start(&bin).await.expect("nginx starts");
    let bytes = br#"{"kind":"ConfigMapList","items":[]}"#;
    let path = n.put("list.json", bytes).unwrap();
    let (status, got) = load::fetch(n.addr, &path, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(&got[..], &bytes[..]);
    drop(n);

    // With a master and workers; dropping it stops them all.
    let n = nginx::Nginx::start_mode(&bin, nginx::Mode::Workers(2))
        .await
        .expect("nginx starts");
    let pids = n.pids();
    assert_eq!(pids.len(), 3, "master and two workers: {pids:?}");
    let path = n.put("object.json", bytes).unwrap();
    let (status, got) = load::fetch(n.addr, &path, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!((status, &got[..]), (200, &bytes[..]));
    drop(n);
    for p in pids {
        assert!(
            procstat::rss_bytes(p).is_none(),
            "nginx process {p} still runs"
        );
    }

    // Copying (`sendfile off`): the same bytes, larger than nginx's output buffers.
    let n = nginx::Nginx::start_sending(&bin, nginx::Mode::Workers(2), nginx::Sending::Copying)
        .await
        .expect("nginx starts");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let path = n.put("big.json", &big).unwrap();
    let (status, got) = load::fetch(n.addr, &path, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(got[..] == big[..], "nginx copying sent other bytes");

    // As a reverse proxy (the `forward` scenario's reference hop): the upstream's answer, as is.
    let up = nginx::Nginx::start(&bin).await.expect("nginx starts");
    let path = up.put("object.json", bytes).unwrap();
    let proxy = nginx::Nginx::start_proxy(&bin, up.addr)
        .await
        .expect("nginx proxy starts");
    let (status, got) = load::fetch(proxy.addr, &path, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!((status, &got[..]), (200, &bytes[..]));
}

#[test]
fn report_renders_rows_and_targets() {
    let mut report = Report::default();
    let mut row = Row::new("LIST", "N=1k", "kcache");
    row.set("req/s", 1234.5)
        .set("errors", 0u64)
        .ratio("kcache/nginx", 0.75);
    report.push(row);
    report.push(Row::new("LIST", "N=1k", "nginx"));
    report.check("LIST ≥ 50% of nginx", "≥ 0.50", "0.75×".into(), Some(true));
    report.check("memory", "≤ 1.5", "2.0×".into(), Some(false));
    let md = report.markdown();
    assert!(
        md.contains("| case | target | req/s | errors | ratio | note |"),
        "{md}"
    );
    assert!(
        md.contains("| N=1k | kcache | 1234 | 0 | kcache/nginx 0.750× |"),
        "{md}"
    );
    assert!(md.contains("| N=1k | nginx | — | — |"), "{md}");
    assert!(md.contains("| PASS |") && md.contains("| MISS |"), "{md}");
    let v: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(v["rows"][0]["values"]["req/s"], 1234.5);
    assert_eq!(v["checks"][1]["pass"], false);
}

/// The bench reads what a kcache child cost its upstream from the child's own metrics: one
/// passed-through GET is one upstream request and its body's bytes.
#[tokio::test]
async fn kcache_child_reports_its_upstream_cost() {
    use kcache_bench::kcache::{ChildConfig, KcacheChild};
    let sim = kcache_sim::Sim::start(kcache_sim::SimConfig::default())
        .await
        .unwrap();
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_kcache"));
    let config = ChildConfig::caching(&[("", "v1", "configmaps")]);
    let k = KcacheChild::start(&exe, &sim.url(), &config, Duration::from_secs(60))
        .await
        .unwrap();
    // Settled: the reflector's list and watch have been counted.
    let mut before = k.upstream_cost().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (lists, gets, watches, other) = sim.request_counts();
        if before.requests == (lists + gets + watches + other) as f64 {
            break;
        }
        assert!(Instant::now() < deadline, "counts never agreed: {before:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
        before = k.upstream_cost().await.unwrap();
    }
    assert!(before.requests >= 2.0, "{before:?}");
    // Namespaces are not cached: passed through.
    let (status, body) = load::fetch(k.addr, "/api/v1/namespaces", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let cost = k.upstream_cost().await.unwrap() - before;
    assert_eq!(cost.requests, 1.0);
    assert_eq!(cost.received_bytes, body.len() as f64);
}

/// The `interactive` scenario at a tiny scale on both profiles: every read of every round,
/// directly and through kcache, in rows, and its targets checked (PASS or MISS alike: no
/// timing is asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_rounds_read_both_targets_on_each_profile() {
    use kcache_bench::interactive::{self, InteractiveScale};
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_kcache"));
    // One round or a few: kcache's reads may take seconds.
    let scale = InteractiveScale {
        configmaps: 40,
        pods: 12,
        duration: Duration::from_millis(600),
        period: Duration::from_millis(300),
        // Several pages for the LISTs of all namespaces: `continue` followed on both targets.
        page: 10,
    };
    // The profiles side by side: a read kcache holds back takes seconds (what the scenario
    // is there to show), and one after the other would double the test's time.
    let (mut report, mut v134) = (Report::default(), Report::default());
    let (a, b) = tokio::join!(
        interactive::run_sim(&exe, &scale, &[kcache_sim::Profile::V1_28], &mut report),
        interactive::run_sim(&exe, &scale, &[kcache_sim::Profile::V1_34], &mut v134),
    );
    a.unwrap();
    b.unwrap();
    report.rows.extend(v134.rows);
    report.checks.extend(v134.checks);
    // Shown when an assertion fails.
    eprintln!("{}", report.markdown());
    for profile in ["v1.28", "v1.34"] {
        let rows: Vec<&Row> = report
            .rows
            .iter()
            .filter(|r| r.scenario.ends_with(&format!("{profile} profile")))
            .collect();
        let cases: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.case.as_str(), r.target.as_str()))
            .collect();
        let mut expected = Vec::new();
        for case in [
            "LIST configmaps in bench-small (3 objects)",
            "LIST pods, all namespaces",
            "LIST configmaps, all namespaces",
            "GET one ConfigMap",
        ] {
            expected.push((case, "sim (upstream)"));
            expected.push((case, "kcache"));
        }
        assert_eq!(cases, expected, "{profile}");
        for r in rows {
            let value = |c: &str| r.values[c].as_u64().unwrap();
            assert_eq!(value("errors"), 0, "{profile} {}: {}", r.case, r.note);
            assert!(value("reads") >= 1, "{profile} {}: {r:?}", r.case);
            let (objects, pages) = match r.case.as_str() {
                "LIST configmaps in bench-small (3 objects)" => (3, 1),
                "LIST pods, all namespaces" => (12, 2),
                "LIST configmaps, all namespaces" => (43, 5),
                _ => (1, 1),
            };
            assert_eq!(
                (value("objects"), value("pages")),
                (objects, pages),
                "{profile} {}",
                r.case
            );
            if r.target == "kcache" {
                assert!(r.values.contains_key("upstream req per read"), "{r:?}");
                assert!(r.note.contains("kcache_consistent_reads_total"), "{r:?}");
            }
        }
        let checks = report
            .checks
            .iter()
            .filter(|c| c.target.starts_with(&format!("Interactive, {profile},")))
            .count();
        assert_eq!(checks, 8, "{profile}");
    }
}
