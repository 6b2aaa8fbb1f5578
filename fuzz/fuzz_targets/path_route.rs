//! Request path → ResourcePath: never panics; a parsed path has no empty parts, and writing it
//! back out (segments percent-encoded) parses to the same ResourcePath.
#![no_main]

use kcache::api::fuzzing::{parse_path, ResourcePath};
use libfuzzer_sys::fuzz_target;

fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn render(p: &ResourcePath) -> String {
    let mut out = if p.group.is_empty() {
        format!("/api/{}", enc(&p.version))
    } else {
        format!("/apis/{}/{}", enc(&p.group), enc(&p.version))
    };
    if p.legacy_watch {
        out.push_str("/watch");
    }
    if let Some(ns) = &p.namespace {
        out.push_str(&format!("/namespaces/{}", enc(ns)));
    }
    out.push('/');
    out.push_str(&enc(&p.resource));
    if let Some(name) = &p.name {
        out.push('/');
        out.push_str(&enc(name));
    }
    if let Some(sub) = &p.subresource {
        // The parser decodes the whole path before splitting it (as the apiserver does) and
        // joins the segments after the name with '/': encoded or not, it parses back the same.
        out.push('/');
        out.push_str(&enc(sub));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Some(p) = parse_path(s) else {
        return;
    };
    assert!(
        !p.version.is_empty() && !p.resource.is_empty(),
        "{s:?} -> {p:?}"
    );
    assert!(p.namespace.as_deref() != Some(""), "{s:?} -> {p:?}");
    assert!(p.name.as_deref() != Some(""), "{s:?} -> {p:?}");
    assert!(
        p.subresource.is_none() || p.name.is_some(),
        "{s:?} -> {p:?}"
    );
    let rendered = render(&p);
    assert_eq!(
        parse_path(&rendered).as_ref(),
        Some(&p),
        "{s:?} rendered as {rendered:?}"
    );
});
