//! kcache's own limits: per-caller rate (429 + Retry-After), open watches per caller and
//! overall, list size (forced pagination that still adds up to the whole list), and request
//! size (413), each answered with the apiserver's Status and counted in the metrics.

mod common;

use std::time::Duration;

use common::{get, get_with, request, wait_until, EnvBuilder, Watch};

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

#[tokio::test]
async fn a_caller_over_its_rate_gets_429_with_retry_after() {
    let mut b = EnvBuilder::fixtures();
    b.config.limits.per_caller_qps = 0.5;
    b.config.limits.per_caller_burst = 3;
    let env = b.start().await;
    let url = env.url();
    let path = "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0";
    for _ in 0..3 {
        assert_eq!(get(&url, path).await.status, 200);
    }
    let r = get(&url, path).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("2"));
    let s = r.json();
    assert_eq!(s["reason"], "TooManyRequests");
    assert_eq!(s["details"]["retryAfterSeconds"], 2);
    // kcache's own endpoints are on the admin listener, outside the API's limits.
    assert_eq!(get(&env.admin_url(), "/readyz").await.status, 200);
    let m = get(&env.admin_url(), "/metrics").await.text();
    // This kcache's own count: exactly the one request refused.
    assert_eq!(
        metric(&m, "kcache_limited_requests_total{limit=\"rate\"}"),
        1.0,
        "{m}"
    );
    // After the advertised wait, the caller is served again. The wait is the behaviour under
    // test; waiting longer (a loaded machine) only refills the bucket more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(get(&url, path).await.status, 200);
}

#[tokio::test]
async fn watches_are_limited_per_caller_and_given_back_when_they_end() {
    let mut b = EnvBuilder::fixtures();
    b.config.limits.max_watches_per_caller = 2;
    b.config.limits.max_watches = 10;
    let env = b.start().await;
    let url = env.url();
    let path = "/api/v1/namespaces/fixtures-a/configmaps?watch=1&resourceVersion=0";
    let w1 = Watch::open(&url, path).await;
    let w2 = Watch::open(&url, path).await;
    assert_eq!((w1.status.as_u16(), w2.status.as_u16()), (200, 200));
    let w3 = Watch::open(&url, path).await;
    assert_eq!(w3.status, 429);
    assert_eq!(w3.headers.get("retry-after").unwrap(), "1");
    let m = get(&env.admin_url(), "/metrics").await.text();
    assert_eq!(metric(&m, "kcache_open_watches"), 2.0, "{m}");
    assert_eq!(metric(&m, "kcache_limit{limit=\"caller_watches\"}"), 2.0);
    assert_eq!(
        metric(
            &m,
            "kcache_limited_requests_total{limit=\"caller_watches\"}"
        ),
        1.0
    );
    // A closed watch frees its slot once the server notices the closed connection: wait for
    // that (the open-watch gauge), then the caller may open another.
    drop(w1);
    wait_until("the closed watch's slot given back", || async {
        metric(&env.metrics().await, "kcache_open_watches") == 1.0
    })
    .await;
    let w = Watch::open(&url, path).await;
    assert_eq!(w.status, 200);
}

#[tokio::test]
async fn large_lists_are_paginated_and_the_pages_add_up() {
    let mut b = EnvBuilder::fixtures();
    b.config.limits.max_list_items = 2;
    let env = b.start().await;
    let url = env.url();
    // Consistent reads are the cache's (and so paginated by kcache) once it can prove them.
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    // The whole list, straight from the upstream.
    let want = get(&env.sim.url(), "/api/v1/configmaps").await.json();
    let want: Vec<String> = want["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(want.len() > 2, "the fixtures have more than 2 configmaps");
    for first in [
        "/api/v1/configmaps?resourceVersion=0",
        "/api/v1/configmaps",
        "/api/v1/configmaps?limit=500",
    ] {
        let mut got = Vec::new();
        let mut path = first.to_string();
        let mut pages = 0;
        loop {
            let r = get(&url, &path).await;
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            let v = r.json();
            let items = v["items"].as_array().unwrap();
            assert!(items.len() <= 2, "{path}: page of {}", items.len());
            got.extend(
                items
                    .iter()
                    .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
            );
            pages += 1;
            match v["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => {
                    path = format!("/api/v1/configmaps?continue={c}");
                }
                _ => break,
            }
        }
        assert_eq!(got, want, "{first}");
        assert_eq!(pages, want.len().div_ceil(2), "{first}");
    }
    // A client asking for less than the maximum gets what it asked for.
    let r = get(&url, "/api/v1/configmaps?limit=1").await.json();
    assert_eq!(r["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn request_bodies_over_the_limit_get_413() {
    let mut b = EnvBuilder::fixtures();
    b.config.limits.max_request_bytes = 1024;
    let env = b.start().await;
    let url = env.url();
    let big = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big","namespace":"fixtures-a"}},"data":{{"k":"{}"}}}}"#,
        "x".repeat(2048)
    );
    let r = request(
        &url,
        "POST",
        "/api/v1/namespaces/fixtures-a/configmaps",
        &[("Content-Type", "application/json")],
        big.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["reason"], "RequestEntityTooLarge");
    assert_eq!(
        env.metric(&["kcache_limited_requests_total{limit=\"request_size\"}"])
            .await,
        Some(1.0)
    );
    // Below the limit, the write goes through.
    let small = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"small","namespace":"fixtures-a"}}"#;
    let r = request(
        &url,
        "POST",
        "/api/v1/namespaces/fixtures-a/configmaps",
        &[("Content-Type", "application/json")],
        small.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let _ = get_with;
}
