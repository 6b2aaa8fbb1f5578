//! Query string → ListOptions / GetOptions: never panics, errors are 400 or 422, and parsed
//! selectors and continue tokens obey their own invariants.
#![no_main]

use std::sync::OnceLock;

use kcache::api::fuzzing::{parse_query, GetOptions, ListOptions};
use kcache::api::ContinueToken;
use kcache::index::{IndexConfig, IndexSet};
use kcache::resource::ResourceInfo;
use kcache::selector::LabelSelector;
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
    let _ = GetOptions::parse(&q);
    let (info, indexes) = pods();
    for legacy_watch in [false, true] {
        match ListOptions::parse(&q, info, indexes, legacy_watch) {
            Ok(opts) => {
                assert!(opts.watch || !legacy_watch);
                let printed = opts.label.to_string();
                assert_eq!(LabelSelector::parse(&printed).as_ref(), Ok(&opts.label));
                if let Some(token) = &opts.continue_token {
                    if let Err(e) = ContinueToken::decode(token) {
                        assert_eq!(e.code(), 400, "{e:?}");
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
