//! Label selector parser: never panics; whatever parses prints back to an equal selector, and
//! the printed form is a fixed point.
#![no_main]

use std::collections::BTreeMap;

use kcache::selector::LabelSelector;
use kcache::status::ApiError;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match LabelSelector::parse(s) {
        Ok(sel) => {
            let printed = sel.to_string();
            let again = LabelSelector::parse(&printed)
                .unwrap_or_else(|e| panic!("{s:?} printed as {printed:?} fails: {e}"));
            assert_eq!(again, sel, "{s:?} printed as {printed:?}");
            assert_eq!(again.to_string(), printed);
            // Matching against a label set built from the selector's own values is total.
            let labels: BTreeMap<String, String> = sel
                .requirements()
                .iter()
                .filter_map(|r| Some((r.key.clone(), r.values.first()?.clone())))
                .collect();
            let _ = sel.matches(&labels);
            let _ = sel.matches(&BTreeMap::new());
        }
        Err(e) => {
            assert!(!e.message.is_empty());
            assert_eq!(ApiError::BadRequest(e.message).code(), 400);
        }
    }
});
