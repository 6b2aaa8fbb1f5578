//! Field selector parser: never panics; whatever parses prints back to an equal selector, and
//! the per-resource check (pods, and a custom resource) never panics either.
#![no_main]

use kcache::selector::{validate_fields, FieldSelector};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sel) = FieldSelector::parse(s) else {
        return;
    };
    let printed = sel.to_string();
    let again = FieldSelector::parse(&printed)
        .unwrap_or_else(|e| panic!("{s:?} printed as {printed:?} fails: {e}"));
    assert_eq!(again, sel, "{s:?} printed as {printed:?}");
    assert_eq!(again.to_string(), printed);
    let _ = sel.matches(&|_| Some("x"));
    let _ = validate_fields(&sel, "", "pods", true, false);
    let _ = validate_fields(&sel, "example.com", "widgets", true, true);
});
