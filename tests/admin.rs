//! kcache's own endpoints live on the admin listener; on the API address `/livez`, `/readyz`,
//! `/healthz`, `/metrics` and every other path kcache does not answer from its cache are the
//! upstream's, byte for byte.

mod common;

use common::{get, get_with, EnvBuilder};

/// Status, the headers a client acts on, and the body, as the client sees them.
fn seen(r: &common::Resp) -> (u16, Option<String>, Option<String>, String) {
    (
        r.status.as_u16(),
        r.header("content-type").map(str::to_string),
        r.header("x-content-type-options").map(str::to_string),
        steady(&r.text()),
    )
}

/// A body without the values of the apiserver's process figures (`process_*` samples of its
/// `/metrics`), which move between two reads of the same apiserver; their names stay.
fn steady(text: &str) -> String {
    text.lines()
        .map(|l| match l.split_once(' ') {
            Some((name, _)) if name.starts_with("process_") => name,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn health_and_metrics_on_the_api_address_are_the_upstreams() {
    let env = EnvBuilder::fixtures().start().await;
    let sim = env.sim.url();
    let kcache = env.url();
    for path in [
        "/healthz?verbose=1",
        "/healthz",
        "/livez",
        "/livez?verbose",
        "/readyz",
        "/readyz?verbose",
        "/readyz?verbose&exclude=etcd",
        "/readyz/informer-sync",
        "/livez/no-such-check",
        "/metrics",
        "/no/such/path",
    ] {
        let direct = get(&sim, path).await;
        let through = get(&kcache, path).await;
        assert_eq!(
            seen(&through),
            seen(&direct),
            "{path}: kcache answered {:?}",
            through.text()
        );
    }
    // What the e2e health spec looks for is there.
    let verbose = get(&kcache, "/healthz?verbose=1").await.text();
    assert!(verbose.contains("[+]etcd ok\n"), "{verbose}");
    assert!(verbose.ends_with("healthz check passed\n"), "{verbose}");
    let metrics = get(&kcache, "/metrics").await.text();
    assert!(metrics.contains("# TYPE apiserver_storage_objects gauge\n"));
    assert!(!metrics.contains("kcache_"), "{metrics}");
    // Whatever the scraper asks for, the upstream's own exposition comes back.
    let om = get_with(
        &kcache,
        "/metrics",
        &[("Accept", "application/openmetrics-text; version=1.0.0")],
    )
    .await;
    assert_eq!(
        om.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
}

/// Checks `text` against the Prometheus text format 0.0.4 as its parser reads it: only HELP
/// and TYPE comments, a known type per family, declared before and at most once, and every
/// sample a well-formed line of the family declared last (histograms and summaries with
/// their suffixes, buckets with `le`). Returns the families and their types.
fn parse_text_format(text: &str) -> Vec<(String, String)> {
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut families: Vec<(String, String)> = Vec::new();
    let mut seen_samples: std::collections::HashSet<String> = Default::default();
    let mut current: Option<(String, String)> = None;
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect(line);
            assert!(valid_name(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                "not a text-format type: {line}"
            );
            assert!(
                !families.iter().any(|(n, _)| n == name),
                "second TYPE for {name}"
            );
            assert!(!seen_samples.contains(name), "TYPE after samples: {line}");
            families.push((name.to_string(), ty.to_string()));
            current = Some((name.to_string(), ty.to_string()));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(valid_name(name), "{line}");
            continue;
        }
        assert!(!line.starts_with('#'), "not a text-format comment: {line}");
        let name_end = line.find(['{', ' ']).expect(line);
        let name = &line[..name_end];
        assert!(valid_name(name), "{line}");
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(after) = rest.strip_prefix('{') {
            let mut chars = after.char_indices().peekable();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                if c == '}' {
                    end = Some(i);
                    break;
                }
                if c == ',' || c == ' ' {
                    continue;
                }
                let key_start = i;
                let mut key_end = i;
                for (j, c) in chars.by_ref() {
                    if c == '=' {
                        key_end = j;
                        break;
                    }
                }
                labels.push(after[key_start..key_end].to_string());
                assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                let mut escaped = false;
                for (_, c) in chars.by_ref() {
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        (true, c) => {
                            assert!(matches!(c, '\\' | '"' | 'n'), "bad escape: {line}");
                            escaped = false
                        }
                        _ => {}
                    }
                }
            }
            let end = end.expect(line);
            rest = &after[end + 1..];
        }
        let mut fields = rest.split_whitespace();
        let value = fields.next().expect(line);
        assert!(
            value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
            "bad value: {line}"
        );
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().expect(line);
        }
        assert!(fields.next().is_none(), "{line}");
        let (family, ty) = current.as_ref().expect("a sample before any TYPE");
        let ok = match ty.as_str() {
            "histogram" => [
                format!("{family}_bucket"),
                format!("{family}_sum"),
                format!("{family}_count"),
            ]
            .contains(&name.to_string()),
            "summary" => [
                family.clone(),
                format!("{family}_sum"),
                format!("{family}_count"),
            ]
            .contains(&name.to_string()),
            _ => name == family,
        };
        assert!(ok, "sample {name} under TYPE {family} {ty}");
        if name.ends_with("_bucket") && ty == "histogram" {
            assert!(labels.iter().any(|l| l == "le"), "{line}");
        }
        seen_samples.insert(family.clone());
    }
    families
}

#[tokio::test]
async fn kcaches_own_endpoints_are_on_the_admin_listener() {
    let env = EnvBuilder::fixtures().start().await;
    let admin = env.admin_url();
    assert_ne!(env.kcache.admin_addr, env.kcache.addr);

    for path in ["/livez", "/healthz", "/readyz"] {
        let r = get(&admin, path).await;
        assert_eq!(
            (r.status.as_u16(), r.text()),
            (200, "ok".to_string()),
            "{path}"
        );
    }
    assert_eq!(
        get(&admin, "/livez?verbose").await.text(),
        "[+]ping ok\nlivez check passed\n"
    );
    let ready = get(&admin, "/readyz?verbose").await.text();
    assert!(ready.starts_with("[+]shutdown ok\n"), "{ready}");
    assert!(ready.contains("[+]cache v1/configmaps "), "{ready}");
    assert!(ready.ends_with("readyz check passed\n"), "{ready}");

    // No API on the admin port, and no admin endpoint answered by kcache on the API port.
    let api = get(&admin, "/api/v1/namespaces/fixtures-a/configmaps").await;
    assert_eq!(api.status.as_u16(), 404);
    assert!(!get(&env.url(), "/metrics").await.text().contains("kcache_"));

    // The Prometheus text format unless OpenMetrics is asked for.
    let m = get(&admin, "/metrics").await;
    assert_eq!(
        m.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let families = parse_text_format(&m.text());
    let type_of = |name: &str| {
        families
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    };
    assert_eq!(type_of("kcache_build_info"), Some("gauge"));
    assert_eq!(type_of("kcache_requests_total"), Some("counter"));
    assert_eq!(
        type_of("kcache_request_duration_seconds"),
        Some("histogram")
    );
    assert_eq!(type_of("kcache_cached_objects"), Some("gauge"));
    assert_eq!(type_of("process_cpu_seconds_total"), Some("counter"));
    assert!(m
        .text()
        .contains("kcache_cached_objects{resource=\"configmaps\"} "));
    assert!(m.text().contains("kcache_build_info{version=\""));

    let om = get_with(
        &admin,
        "/metrics",
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
        )],
    )
    .await;
    assert_eq!(
        om.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let om = om.text();
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains("# TYPE kcache_build info\n"), "{om}");
    assert!(om.contains("# TYPE kcache_requests counter\n"), "{om}");
    // The same series in both forms: the metrics are this kcache's own and no API request
    // came between the two scrapes, so only values that follow the clock may differ.
    let series = |t: &str| -> std::collections::BTreeSet<String> {
        t.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string())
            .collect()
    };
    let (text, om) = (series(&m.text()), series(&om));
    assert_eq!(
        text,
        om,
        "only in text: {:?}; only in OpenMetrics: {:?}",
        text.difference(&om).collect::<Vec<_>>(),
        om.difference(&text).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn shutdown_closes_the_admin_listener_too() {
    let env = EnvBuilder::fixtures().start().await;
    let admin = env.kcache.admin_addr;
    assert_eq!(get(&env.admin_url(), "/readyz").await.status.as_u16(), 200);
    env.kcache.shutdown().await;
    assert!(
        tokio::net::TcpStream::connect(admin).await.is_err(),
        "the admin port still accepts after shutdown"
    );
}
