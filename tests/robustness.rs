//! Bad input of any kind gets a clear answer: random paths and query parameters sent through
//! the whole server (routing, parameter parsing, selectors, continue tokens) never panic, never
//! hang and never produce a 5xx of kcache's own — only the apiserver's own 500 for a
//! non-numeric resourceVersion (L7). (The parsers alone are also fuzzed: see `fuzz/`.)

mod common;

use std::time::Duration;

use common::{get, EnvBuilder};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

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
        Just("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIvLi4vIn0".to_string()),
        "[A-Za-z0-9%=!(),._~-]{0,24}",
    ];
    (key, value).prop_map(|(k, v)| (k.to_string(), v))
}

#[test]
fn random_requests_get_clear_answers() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let env = rt.block_on(EnvBuilder::fixtures().start());
    let base = env.url();
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
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
            let rv_not_a_number = params
                .iter()
                .any(|(k, v)| k == "resourceVersion" && !v.is_empty() && v.parse::<u64>().is_err());
            prop_assert!(
                status < 500 || (status == 500 && rv_not_a_number) || status == 504,
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
