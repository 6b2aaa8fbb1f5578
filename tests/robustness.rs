//! Bad input of any kind gets a clear answer: random paths and query parameters sent through
//! the whole server (routing, parameter parsing, selectors, continue tokens) never panic, never
//! hang and never produce a 5xx of kcache's own — only the apiserver's own 500s, passed on.
//! (The parsers alone are also fuzzed: see `fuzz/`.)

mod common;

use std::time::Duration;

use common::{get, EnvBuilder, Watch};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// The fixtures behind kcache, with short waits for future resourceVersions (in kcache, then
/// in the sim, before their 504): many requests here ask for one.
fn short_waits() -> EnvBuilder {
    let mut b = EnvBuilder::fixtures();
    b.sim.too_large_rv_wait = Duration::from_millis(500);
    b.config.watch.resource_version_wait_seconds = 1;
    b.config.consistent_reads.wait_seconds = 1;
    b
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("api".to_string()),
        Just("apis".to_string()),
        Just("v1".to_string()),
        Just("namespaces".to_string()),
        Just("fixtures-a".to_string()),
        Just("configmaps".to_string()),
        Just("pods".to_string()),
        Just("watch".to_string()),
        Just("fixtures.example.com".to_string()),
        Just("widgets".to_string()),
        Just("cm-01".to_string()),
        Just("status".to_string()),
        Just("..".to_string()),
        Just("%2F".to_string()),
        Just("%ZZ".to_string()),
        Just("".to_string()),
        "[a-z0-9.-]{1,12}",
        // Anything a client can put in a path segment, percent signs included.
        "[A-Za-z0-9._~!$&'()*+,;=:@%-]{1,8}",
    ]
}

fn param() -> impl Strategy<Value = (String, String)> {
    let key = prop_oneof![
        Just("labelSelector"),
        Just("fieldSelector"),
        Just("resourceVersion"),
        Just("resourceVersionMatch"),
        Just("limit"),
        Just("continue"),
        Just("allowWatchBookmarks"),
        Just("sendInitialEvents"),
        Just("includeObject"),
        Just("pretty"),
        Just("bogus"),
    ];
    let value = prop_oneof![
        Just("0".to_string()),
        Just("".to_string()),
        Just("Exact".to_string()),
        Just("NotOlderThan".to_string()),
        Just("app in (web".to_string()),
        Just("app%3Dweb%2Ctier!%3Dfront".to_string()),
        Just("metadata.name%3Dcm-01".to_string()),
        Just("spec.nodeName%3D".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("-5".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("18446744073709551615".to_string()),
        Just("+1".to_string()),
        Just("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIvLi4vIn0".to_string()),
        "[A-Za-z0-9%=!(),._~-]{0,24}",
    ];
    (key, value).prop_map(|(k, v)| (k.to_string(), v))
}

#[test]
fn random_requests_get_clear_answers() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let env = rt.block_on(short_waits().start());
    let base = env.url();
    let sim_url = env.sim.url();
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        // A case that fails by not answering costs its whole timeout: shrink a little only.
        max_shrink_iters: 16,
        ..Config::default()
    });
    // Mostly paths of cached resources (so parameters reach kcache's own parsing), some junk.
    let template = prop_oneof![
        Just("/api/v1/namespaces/{a}/configmaps"),
        Just("/api/v1/configmaps"),
        Just("/api/v1/namespaces/{a}/configmaps/{b}"),
        Just("/api/v1/namespaces/{a}/pods"),
        Just("/api/v1/pods/{b}"),
        Just("/api/v1/watch/namespaces/{a}/configmaps"),
        Just("/apis/fixtures.example.com/v1/namespaces/{a}/widgets"),
        Just("/apis/fixtures.example.com/v1/widgets/{b}"),
        Just("/api/v1/namespaces/{a}"),
        Just("/{a}/{b}"),
    ];
    let strategy = (
        template,
        segment(),
        segment(),
        prop::collection::vec(segment(), 0..4),
        prop::collection::vec(param(), 0..5),
    );
    runner
        .run(&strategy, |(template, a, b, extra, params)| {
            let mut path = template.replace("{a}", &a).replace("{b}", &b);
            for s in &extra {
                if s.len() % 3 == 0 {
                    path.push('/');
                    path.push_str(s);
                }
            }
            let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            // A watch must end by itself for the client to read the whole answer.
            path.push_str("?timeoutSeconds=1");
            for q in &query {
                path.push('&');
                path.push_str(q);
            }
            // What no HTTP client can send is not input a server sees.
            prop_assume!(path.parse::<http::Uri>().is_ok());
            let resp = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), get(&base, &path)).await
            });
            let resp =
                resp.map_err(|_| TestCaseError::fail(format!("no answer in 10 s: {path}")))?;
            let status = resp.status.as_u16();
            // The apiserver has 500s of its own (a non-numeric resourceVersion; a future one on
            // its etcd path, as recorded in `err-list-cm-rvm-exact-future-rv`): kcache may pass
            // one on, but never make one. So a 500 must be what the apiserver itself answers.
            let upstream_500 = status == 500 && {
                let direct = rt.block_on(async {
                    tokio::time::timeout(Duration::from_secs(10), get(&sim_url, &path)).await
                });
                direct.is_ok_and(|d| d.status.as_u16() == 500 && d.text() == resp.text())
            };
            prop_assert!(
                status < 500 || upstream_500 || status == 504,
                "{path} -> {status}: {}",
                resp.text()
            );
            if status >= 400 && resp.header("content-type") == Some("application/json") {
                let v = resp.json();
                prop_assert_eq!(&v["kind"], "Status", "{} -> {}", path, resp.text());
                prop_assert_eq!(v["code"].as_u64(), Some(u64::from(status)));
            }
            Ok(())
        })
        .unwrap();
}

/// Numbers at and beyond the ends of their types, in every parameter that takes one.
const EXTREMES: &[&str] = &[
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "-1",
    "0",
    "+1",
    "",
    "%20",
    "1e3",
];

/// Continue tokens whose numbers are extreme: rv at i64's ends, -1, and rv past i64.
fn extreme_tokens() -> Vec<String> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    [
        "9223372036854775807",
        "-9223372036854775808",
        "-1",
        "1",
        "18446744073709551615",
    ]
    .iter()
    .map(|rv| {
        URL_SAFE_NO_PAD.encode(format!(
            r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":"cm-01\u0000"}}"#
        ))
    })
    .collect()
}

/// Every extreme value, in every numeric parameter of lists, gets, watches and continue
/// tokens, gets an answer with the status the apiserver (the sim) gives it, and no request
/// makes kcache stop answering.
#[test]
fn extreme_numbers_get_the_apiservers_answers() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let env = short_waits().start().await;
        let (kcache, sim) = (env.url(), env.sim.url());
        let mut paths = Vec::new();
        let list = "/api/v1/namespaces/fixtures-a/configmaps";
        for v in EXTREMES {
            paths.push(format!("{list}?limit={v}"));
            paths.push(format!("{list}?limit={v}&resourceVersion=0"));
            paths.push(format!("{list}?resourceVersion={v}"));
            paths.push(format!(
                "{list}?resourceVersion={v}&resourceVersionMatch=NotOlderThan"
            ));
            paths.push(format!(
                "{list}?resourceVersion={v}&resourceVersionMatch=Exact"
            ));
            paths.push(format!("{list}/cm-01?resourceVersion={v}"));
            // Passed through (a parameter kcache does not know): the upstream's answer, as is.
            paths.push(format!("{list}/cm-01?resourceVersion={v}&newerParameter=1"));
            paths.push(format!(
                "{list}?watch=1&timeoutSeconds={v}&resourceVersion={v}"
            ));
        }
        for t in extreme_tokens() {
            paths.push(format!("{list}?limit=1&continue={t}"));
            paths.push(format!("/api/v1/configmaps?limit=1&continue={t}"));
        }
        for path in &paths {
            // Watches whose timeout is left open would never end: only their head is compared.
            let watch = path.contains("watch=1");
            let (ours, theirs) = if watch {
                let ours = bounded(path, Watch::open(&kcache, path)).await;
                let theirs = bounded(path, Watch::open(&sim, path)).await;
                (ours.status.as_u16(), theirs.status.as_u16())
            } else {
                let ours = bounded(path, get(&kcache, path)).await;
                let theirs = bounded(path, get(&sim, path)).await;
                if ours.status.as_u16() >= 400 && ours.status != 504 {
                    let v = ours.json();
                    assert_eq!(v["kind"], "Status", "{path}: {}", ours.text());
                }
                (ours.status.as_u16(), theirs.status.as_u16())
            };
            assert_eq!(ours, theirs, "{path}: kcache {ours}, apiserver {theirs}");
        }
        // Still serving.
        let after = get(&kcache, &format!("{list}?resourceVersion=0")).await;
        assert_eq!(after.status, 200);
    });
}

/// An answer within a bound that no request of the list above needs (the sim's own wait for
/// a future resourceVersion is 3 s, kcache's consistent wait shorter).
async fn bounded<T>(path: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .unwrap_or_else(|_| panic!("no answer in 30 s: {path}"))
}

/// A timeout beyond what a clock can add (i64::MAX seconds) is "never" for a watch from the
/// cache: the stream stays open and delivers events.
#[test]
fn a_huge_watch_timeout_keeps_the_stream_open() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let env = EnvBuilder::fixtures().start().await;
        let mut w = Watch::open(
            &env.url(),
            "/api/v1/namespaces/fixtures-a/configmaps?watch=1&timeoutSeconds=9223372036854775807",
        )
        .await;
        assert_eq!(w.status, 200);
        env.sim
            .create(
                "",
                "configmaps",
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "after-open", "namespace": "fixtures-a"}}),
            )
            .unwrap();
        loop {
            let ev = w
                .next_json(Duration::from_secs(30))
                .await
                .expect("the watch ended or went quiet before the new ConfigMap's event");
            if ev["object"]["metadata"]["name"] == "after-open" {
                assert_eq!(ev["type"], "ADDED");
                break;
            }
        }
    });
}

/// A negative timeout is a timer that has already fired, as in the apiserver: the stream ends
/// at once instead of living for the server-chosen half hour.
#[test]
fn a_negative_watch_timeout_ends_the_stream_at_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let env = EnvBuilder::fixtures().start().await;
        for base in [env.url(), env.sim.url()] {
            let mut w = Watch::open(
                &base,
                "/api/v1/namespaces/fixtures-a/configmaps?watch=1&timeoutSeconds=-1",
            )
            .await;
            assert_eq!(w.status, 200);
            tokio::time::timeout(Duration::from_secs(30), async {
                while w.next(Duration::from_secs(30)).await.is_some() {}
            })
            .await
            .unwrap_or_else(|_| panic!("{base}: the watch with timeoutSeconds=-1 stayed open"));
            assert!(
                w.ended,
                "{base}: the watch with timeoutSeconds=-1 stayed open"
            );
        }
    });
}
