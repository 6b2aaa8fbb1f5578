//! Query string → ListOptions / GetOptions: never panics, errors are 400 or 422, and parsed
//! selectors, continue tokens, resourceVersions and watch timeouts obey their own invariants.
#![no_main]

use std::sync::OnceLock;

use std::time::Duration;

use kcache::api::fuzzing::{parse_query, parse_rv, GetOptions, ListOptions};
use kcache::api::ContinueToken;
use kcache::index::{IndexConfig, IndexSet};
use kcache::resource::ResourceInfo;
use kcache::selector::LabelSelector;
use kcache::status::ApiError;
use libfuzzer_sys::fuzz_target;

fn pods() -> &'static (ResourceInfo, IndexSet) {
    static PODS: OnceLock<(ResourceInfo, IndexSet)> = OnceLock::new();
    PODS.get_or_init(|| {
        let info = ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            kind: "Pod".into(),
            namespaced: true,
            custom: false,
        };
        let configured = [
            IndexConfig {
                name: "images".into(),
                field: Some("spec.containers[*].image".into()),
                label: None,
            },
            IndexConfig {
                name: "app".into(),
                field: None,
                label: Some("app".into()),
            },
        ];
        let indexes = IndexSet::new("", "pods", false, &configured);
        (info, indexes)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let q = parse_query(Some(s));
    let get = GetOptions::parse(&q);
    check_rv(get.resource_version.as_deref());
    let (info, indexes) = pods();
    for legacy_watch in [false, true] {
        match ListOptions::parse(&q, info, indexes, legacy_watch) {
            Ok(opts) => {
                assert!(opts.watch || !legacy_watch);
                let printed = opts.label.to_string();
                assert_eq!(LabelSelector::parse(&printed).as_ref(), Ok(&opts.label));
                // The numbers a watch turns into time: a deadline for any timeoutSeconds.
                let now = tokio::time::Instant::now();
                assert!(opts.timeout.deadline(now, Duration::from_secs(1800)) >= now);
                check_rv(opts.resource_version.as_deref());
                if let Some(token) = &opts.continue_token {
                    if let Err(e) = ContinueToken::decode(token) {
                        assert_eq!(ApiError::from(e).code(), 400);
                    }
                }
            }
            Err(e) => {
                let code = e.code();
                assert!(code == 400 || code == 422, "{s:?}: {code} {e:?}");
                let _ = e.body();
            }
        }
    }
});

/// A resourceVersion is a number or the apiserver's 500 (L7), never a panic.
fn check_rv(rv: Option<&str>) {
    if let Some(Err(e)) = rv.map(parse_rv) {
        assert_eq!(e.code(), 500, "{rv:?}: {e:?}");
    }
}
