//! A request (method, URI, Accept, User-Agent) → `Parsed` → `ReadRequest`: never panics; a read
//! is a GET, LIST or WATCH of the type itself; every error it carries is the apiserver's 4xx
//! with a Status body (or the 500 of a non-number resourceVersion, which only the upstream
//! answers); and what it derives (locality, upstream-only, scope, representation) follows from
//! the request.
//!
//! Input: the first byte picks the method (bits 0-2), whether the type is answered in protobuf
//! (bit 3) and the cache (bits 4-5); the rest is lines: the URI, then the Accept and
//! User-Agent values (a header is absent when its line is). URI bytes an HTTP parser would
//! refuse are percent-encoded, so that the fuzzer's bytes reach kcache's own parsers.
#![no_main]

use std::sync::OnceLock;

use http::header::{HeaderValue, ACCEPT, USER_AGENT};
use http::Method;
use kcache::api::fuzzing::{ListRule, Options, Parsed, ReadRequest, Verb};
use kcache::api::{negotiate_with, Representation};
use kcache::cache::{CacheConfig, ResourceCache, Scope};
use kcache::index::IndexConfig;
use kcache::object::Strip;
use kcache::resource::ResourceInfo;
use kcache::selector::{known_field, FieldOp, FieldSelector, LabelSelector};
use kcache::status::ApiError;
use kcache::table::IncludeObject;
use libfuzzer_sys::fuzz_target;

const METHODS: [Method; 8] = [
    Method::GET,
    Method::GET,
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];

/// The parameters kcache answers exactly (request.rs's list, written out again here so that a
/// change there is a change the target notices).
const KNOWN_PARAMS: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "includeObject",
    "labelSelector",
    "limit",
    "pretty",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeout",
    "timeoutSeconds",
    "watch",
];

fn pod_info() -> ResourceInfo {
    ResourceInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        kind: "Pod".into(),
        namespaced: true,
        custom: false,
    }
}

fn index(name: &str, field: Option<&str>, label: Option<&str>) -> IndexConfig {
    IndexConfig {
        name: name.into(),
        field: field.map(String::from),
        label: label.map(String::from),
    }
}

/// Pods with a field-path and a label index: unrestricted, restricted to a namespace and by
/// selectors, and cached as metadata only; and a custom resource whose configured index and
/// CRD selectable field share a path (the selectable field is the upstream's, not kcache's).
fn caches() -> &'static [ResourceCache; 4] {
    static CACHES: OnceLock<[ResourceCache; 4]> = OnceLock::new();
    CACHES.get_or_init(|| {
        let pod_indexes = [
            index("images", Some("spec.containers[*].image"), None),
            index("app", None, Some("app")),
        ];
        let pods =
            |scope, cfg| ResourceCache::new(pod_info(), scope, cfg).with_indexes(&pod_indexes);
        let restricted = Scope {
            namespace: Some("default".into()),
            label: LabelSelector::parse("app=web").expect("a label selector"),
            field: FieldSelector::parse("status.phase=Running").expect("a field selector"),
        };
        let metadata_only = CacheConfig {
            strip: Strip {
                metadata_only: true,
                ..Strip::default()
            },
            ..CacheConfig::default()
        };
        let widgets = ResourceInfo {
            group: "example.com".into(),
            version: "v1".into(),
            resource: "widgets".into(),
            kind: "Widget".into(),
            namespaced: true,
            custom: true,
        };
        [
            pods(Scope::default(), CacheConfig::default()),
            pods(restricted, CacheConfig::default()),
            pods(Scope::default(), metadata_only),
            ResourceCache::new(widgets, Scope::default(), CacheConfig::default())
                .with_indexes(&[
                    index("byColor", Some("spec.color"), None),
                    index("bySize", Some("spec.size"), None),
                ])
                .with_selectable_fields(&[".spec.color".into(), ".spec.shape".into()]),
        ]
    })
}

/// The request target as an HTTP parser would pass it on: bytes outside the URI character set
/// (and `#`, which would start a fragment) percent-encoded.
fn uri_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 1);
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let method = METHODS[usize::from(flags & 7)].clone();
    let protobuf = flags & 8 != 0;
    let cache = &caches()[usize::from((flags >> 4) & 3)];
    let mut lines = rest.split(|&b| b == b'\n');
    let target = uri_text(lines.next().unwrap_or_default());
    let Ok(uri) =
        http::Uri::try_from(target.as_str()).or_else(|_| http::Uri::try_from(format!("/{target}")))
    else {
        return;
    };
    let mut req = http::Request::builder().method(method.clone()).uri(uri);
    for (name, line) in [(ACCEPT, lines.next()), (USER_AGENT, lines.next())] {
        // A value HTTP cannot carry (a control character) never reaches kcache.
        if let Some(v) = line.and_then(|l| HeaderValue::from_bytes(l).ok()) {
            req = req.header(name, v);
        }
    }
    let Ok(req) = req.body(()) else {
        return;
    };
    let (parts, ()) = req.into_parts();

    let parsed = Parsed::parse(&parts);
    check_verb(&parsed, &method);
    let read = parsed.read(&parts.headers, cache, protobuf);
    let readable = parsed
        .path
        .as_ref()
        .is_some_and(|p| p.subresource.is_none())
        && matches!(parsed.verb, Verb::Get | Verb::List | Verb::Watch);
    assert_eq!(
        read.is_some(),
        readable,
        "{:?} {:?}",
        parts.uri,
        parsed.verb
    );
    if let Some(read) = read {
        check_read(&read, &parsed, &parts.headers, cache, protobuf);
    }
});

/// The verb follows from the method and the path; a watch from `/watch/` or a `watch` value
/// other than `0`/`false`.
fn check_verb(parsed: &Parsed, method: &Method) {
    let Some(path) = &parsed.path else {
        assert_eq!(parsed.verb, Verb::Other);
        return;
    };
    assert!(!path.resource.is_empty() && !path.version.is_empty());
    let expected = match *method {
        Method::GET => {
            // The first `watch` value counts, and only for a collection.
            let watch = path.legacy_watch
                || (path.name.is_none()
                    && parsed
                        .query
                        .iter()
                        .find(|(k, _)| k == "watch")
                        .is_some_and(|(_, v)| v != "0" && !v.eq_ignore_ascii_case("false")));
            if watch {
                Verb::Watch
            } else if path.name.is_some() {
                Verb::Get
            } else {
                Verb::List
            }
        }
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE => Verb::Delete,
        _ => Verb::Other,
    };
    assert_eq!(parsed.verb, expected);
}

/// The first value of a query parameter, as Go's `url.Values.Get`.
fn first<'q>(q: &'q [(String, String)], key: &str) -> Option<&'q str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn check_read(
    read: &ReadRequest<'_>,
    parsed: &Parsed,
    headers: &http::HeaderMap,
    cache: &ResourceCache,
    protobuf: bool,
) {
    let q = &parsed.query;
    let path = read.path;
    assert_eq!(read.verb, parsed.verb);
    assert!(matches!(read.verb, Verb::Get | Verb::List | Verb::Watch));
    assert!(path.subresource.is_none());
    assert_eq!(Some(path), parsed.path.as_ref());

    // Headers: the representation is negotiate's for the Accept value kcache can read.
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
    assert_eq!(read.representation, negotiate_with(accept, protobuf));
    if !protobuf {
        assert_ne!(read.representation, Representation::Protobuf);
    }
    if accept.is_none_or(|a| a.trim().is_empty()) {
        assert_eq!(read.representation, Representation::Json);
    }
    assert_eq!(
        read.user_agent,
        headers.get(USER_AGENT).and_then(|v| v.to_str().ok())
    );

    // includeObject: one of the apiserver's values, or its 400.
    match (&read.include, first(q, "includeObject")) {
        (Ok(IncludeObject::Metadata), None | Some("" | "Metadata")) => {}
        (Ok(IncludeObject::None), Some("None")) | (Ok(IncludeObject::Object), Some("Object")) => {}
        (Err(e), Some(v)) if !matches!(v, "" | "Metadata" | "None" | "Object") => {
            check_error(&ApiError::from(e.clone()), &[400]);
        }
        (got, v) => panic!("includeObject {v:?} parsed as {got:?}"),
    }

    // Locality: a field selector (the first, as the apiserver reads it) naming a configured
    // field-path index that is not a CRD selectable field.
    let field = first(q, "fieldSelector").map(FieldSelector::parse);
    let field = field.as_ref().and_then(|f| f.as_ref().ok());
    let indexes = &cache.indexes;
    let local = field.is_some_and(|f| {
        f.requirements().iter().any(|r| {
            indexes.by_selector_field(&r.field).is_some()
                && indexes.by_selectable_field(&r.field).is_none()
        })
    });
    assert_eq!(read.local, local, "{q:?}");

    check_upstream_only(read, q, field, cache);

    let scope = &cache.scope;
    let ns_ok =
        scope.namespace.is_none() || scope.namespace.as_deref() == path.namespace.as_deref();
    match &read.options {
        Options::Get(opts) => {
            assert_eq!(read.verb, Verb::Get);
            assert_eq!(
                opts.resource_version.as_deref(),
                first(q, "resourceVersion").filter(|v| !v.is_empty())
            );
            assert_eq!(read.within_scope, ns_ok);
        }
        Options::List(Err(e)) => {
            assert_ne!(read.verb, Verb::Get);
            check_error(e, &[400, 422]);
            // Answered by its error first, so never sent elsewhere for its scope.
            assert!(read.within_scope);
        }
        Options::List(Ok(listing)) => {
            assert_ne!(read.verb, Verb::Get);
            let opts = &listing.opts;
            // A LIST is never a watch, and a WATCH always one.
            if read.verb == Verb::List {
                assert!(!opts.watch, "{q:?}");
            }
            if read.verb == Verb::Watch {
                assert!(opts.watch, "{q:?}");
            }
            if path.legacy_watch {
                assert!(opts.watch);
            }
            let namespace = if cache.info.namespaced {
                path.namespace.clone()
            } else {
                None
            };
            assert_eq!(listing.filter.namespace, namespace);
            assert_eq!(listing.filter.label, opts.label);
            assert_eq!(listing.filter.field, opts.field);
            assert_eq!(listing.filter.indexed, opts.indexed);
            // A watch of one object selects it by its name, whatever characters it holds.
            {
                // Indexed terms are taken out of the field selector; what is left names none.
                for r in opts.field.requirements() {
                    assert!(indexes.by_selector_field(&r.field).is_none(), "{q:?}");
                    assert!(indexes.by_selectable_field(&r.field).is_none(), "{q:?}");
                }
                if let Some(name) = &path.name {
                    assert!(
                        opts.field
                            .requirements()
                            .iter()
                            .any(|r| r.field == "metadata.name"
                                && r.op == FieldOp::Equals
                                && &r.value == name),
                        "{name:?}: {}",
                        opts.field
                    );
                }
            }
            let label_ok = scope
                .label
                .requirements()
                .iter()
                .all(|r| opts.label.requirements().contains(r));
            let field_ok = scope
                .field
                .requirements()
                .iter()
                .all(|r| opts.field.requirements().contains(r));
            assert_eq!(read.within_scope, ns_ok && label_ok && field_ok);
            match &listing.rule {
                Ok(ListRule::ForeignToken(e)) => check_error(e, &[400]),
                Ok(_) => {}
                Err(e) if e.code() == 500 => {
                    // A resourceVersion that is not a number: only the upstream answers it.
                    assert!(read.upstream_only.is_some(), "{q:?}");
                    check_error(e, &[500]);
                }
                Err(e) => check_error(e, &[400]),
            }
        }
    }
}

/// `upstream_only` is set exactly for an unknown parameter, a resourceVersion that is not a
/// number, or (for a list or watch) a field selector on a field kcache cannot check.
fn check_upstream_only(
    read: &ReadRequest<'_>,
    q: &[(String, String)],
    field: Option<&FieldSelector>,
    cache: &ResourceCache,
) {
    let unknown = q.iter().any(|(k, _)| !KNOWN_PARAMS.contains(&k.as_str()));
    // The first non-empty resourceVersion, digits only and within a u64 (Go's ParseUint).
    let bad_rv = q
        .iter()
        .find(|(k, v)| k == "resourceVersion" && !v.is_empty())
        .is_some_and(|(_, v)| !v.bytes().all(|b| b.is_ascii_digit()) || v.parse::<u64>().is_err());
    let info = &cache.info;
    let metadata_only = cache.strip().metadata_only;
    let foreign_field = read.verb != Verb::Get
        && field.is_some_and(|f| {
            f.requirements().iter().any(|r| {
                let known = known_field(
                    &r.field,
                    &info.group,
                    &info.resource,
                    info.namespaced,
                    info.custom,
                ) || cache.indexes.by_selectable_field(&r.field).is_some();
                !known || (metadata_only && !r.field.starts_with("metadata."))
            })
        });
    assert_eq!(
        read.upstream_only.is_some(),
        unknown || bad_rv || foreign_field,
        "{q:?}: {:?}",
        read.upstream_only
    );
}

/// An error the read carries: one of `codes`, with a Status body that says the same.
fn check_error(e: &ApiError, codes: &[u16]) {
    assert!(
        codes.contains(&e.code()),
        "{} not in {codes:?}: {e:?}",
        e.code()
    );
    let body: serde_json::Value = serde_json::from_slice(&e.body()).expect("a JSON Status");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["code"], e.code());
    assert!(body["message"].is_string());
}
