//! Property tests for the typed read, the companion of the `read_request` fuzz target in
//! `fuzz/`: a request's method, URI and headers → `Parsed` → `ReadRequest`.
//!
//! Requests are generated from parts (paths of cached and uncached types, namespaces and names
//! with odd characters, subresources, query strings mixing every list, get and watch option
//! with valid and invalid values, Accept and User-Agent headers), and what kcache reads of
//! them is checked against what the parts say: the verb, the path, the representation, which
//! reads only kcache can answer (`local`) or only the upstream (`upstream_only`), the scope,
//! and that every error is the apiserver's 4xx with a Status body. A second property throws
//! arbitrary text at the same code, which must never panic.
//!
//! The `apiserver_difference_*` tests at the end pin inputs kcache reads differently from
//! kube-apiserver; they are ignored until kcache reads them the same.

use std::sync::OnceLock;

use http::header::{HeaderValue, ACCEPT, USER_AGENT};
use http::Method;
use kcache::api::fuzzing::{
    parse_query, ContinueToken, ListRule, Options, Parsed, ReadRequest, ResourcePath, Verb,
};
use kcache::api::Representation;
use kcache::cache::{CacheConfig, ResourceCache, Scope};
use kcache::index::IndexConfig;
use kcache::object::Strip;
use kcache::resource::ResourceInfo;
use kcache::selector::{FieldOp, FieldSelector, LabelSelector};
use kcache::status::ApiError;
use kcache::table::IncludeObject;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use proptest::prelude::*;

// ----- the caches -----

/// Which cache a read of pods meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodCache {
    /// Every pod.
    Whole,
    /// Restricted to namespace `default`, label `app=web` and field `status.phase=Running`.
    Restricted,
    /// Pods as their metadata only.
    MetadataOnly,
}

struct Caches {
    whole: ResourceCache,
    restricted: ResourceCache,
    metadata_only: ResourceCache,
    /// `widgets.example.com`: configured indexes on `spec.color` and `spec.size`, and CRD
    /// selectable fields `spec.color` and `spec.shape`.
    widgets: ResourceCache,
}

fn index(name: &str, field: Option<&str>, label: Option<&str>) -> IndexConfig {
    IndexConfig {
        name: name.into(),
        field: field.map(String::from),
        label: label.map(String::from),
    }
}

fn caches() -> &'static Caches {
    static CACHES: OnceLock<Caches> = OnceLock::new();
    CACHES.get_or_init(|| {
        let info = ResourceInfo {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            kind: "Pod".into(),
            namespaced: true,
            custom: false,
        };
        // A field-path index (named `images`, selected as `images` or by its path without
        // `[*]`) and a label index, as a config would give them.
        let configured = [
            index("images", Some("spec.containers[*].image"), None),
            index("app", None, Some("app")),
        ];
        let pods =
            |scope, cfg| ResourceCache::new(info.clone(), scope, cfg).with_indexes(&configured);
        let restricted = Scope {
            namespace: Some("default".into()),
            label: LabelSelector::parse("app=web").unwrap(),
            field: FieldSelector::parse("status.phase=Running").unwrap(),
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
        Caches {
            whole: pods(Scope::default(), CacheConfig::default()),
            restricted: pods(restricted, CacheConfig::default()),
            metadata_only: pods(Scope::default(), metadata_only),
            widgets: ResourceCache::new(widgets, Scope::default(), CacheConfig::default())
                .with_indexes(&[
                    index("byColor", Some("spec.color"), None),
                    index("bySize", Some("spec.size"), None),
                ])
                .with_selectable_fields(&[".spec.color".into(), ".spec.shape".into()]),
        }
    })
}

// ----- generated requests -----

/// The type a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Pods,
    Widgets,
    /// Not cached: `read` is still called, with the pods cache, and must not panic.
    ConfigMaps,
    Deployments,
}

impl Ty {
    fn group_version_resource(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Ty::Pods => ("", "v1", "pods"),
            Ty::Widgets => ("example.com", "v1", "widgets"),
            Ty::ConfigMaps => ("", "v1", "configmaps"),
            Ty::Deployments => ("apps", "v1", "deployments"),
        }
    }
}

/// One query value and how it is written in the URI.
#[derive(Debug, Clone)]
struct Value {
    text: String,
    /// Spaces as `+` rather than `%20`.
    plus_for_space: bool,
}

#[derive(Debug, Clone)]
struct Request {
    method: Method,
    ty: Ty,
    pod_cache: PodCache,
    legacy_watch: bool,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<&'static str>,
    trailing_slash: bool,
    params: Vec<(&'static str, Value)>,
    accept: Option<Vec<&'static str>>,
    accept_separator: &'static str,
    user_agent: Option<Vec<u8>>,
    protobuf: bool,
}

/// What a path segment may hold unencoded besides letters and digits.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

impl Request {
    fn uri(&self) -> String {
        let (group, version, resource) = self.ty.group_version_resource();
        let seg = |s: &str| utf8_percent_encode(s, SEGMENT).to_string();
        let mut uri = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        if self.legacy_watch {
            uri.push_str("/watch");
        }
        if let Some(ns) = &self.namespace {
            uri.push_str(&format!("/namespaces/{}", seg(ns)));
        }
        uri.push_str(&format!("/{resource}"));
        if let Some(name) = &self.name {
            uri.push_str(&format!("/{}", seg(name)));
            if let Some(sub) = self.subresource {
                uri.push_str(&format!("/{sub}"));
            }
        }
        if self.trailing_slash && self.name.is_none() {
            uri.push('/');
        }
        if !self.params.is_empty() {
            let pairs: Vec<String> = self
                .params
                .iter()
                .map(|(k, v)| {
                    let mut enc = utf8_percent_encode(&v.text, NON_ALPHANUMERIC).to_string();
                    if v.plus_for_space {
                        enc = enc.replace("%20", "+");
                    }
                    format!("{k}={enc}")
                })
                .collect();
            uri.push('?');
            uri.push_str(&pairs.join("&"));
        }
        uri
    }

    fn parts(&self) -> http::request::Parts {
        let mut b = http::Request::builder()
            .method(self.method.clone())
            .uri(self.uri());
        if let Some(accept) = &self.accept {
            b = b.header(ACCEPT, accept.join(self.accept_separator));
        }
        if let Some(ua) = &self.user_agent {
            b = b.header(USER_AGENT, HeaderValue::from_bytes(ua).unwrap());
        }
        b.body(()).unwrap().into_parts().0
    }

    fn cache(&self) -> &'static ResourceCache {
        let c = caches();
        match (self.ty, self.pod_cache) {
            (Ty::Widgets, _) => &c.widgets,
            (_, PodCache::Whole) => &c.whole,
            (_, PodCache::Restricted) => &c.restricted,
            (_, PodCache::MetadataOnly) => &c.metadata_only,
        }
    }

    /// The first value of a parameter, as the apiserver reads it (Go's `url.Values.Get`).
    fn first(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.text.as_str())
    }
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("p".to_string()),
        Just("web-0".to_string()),
        Just("default".to_string()),
        Just("status".to_string()),
        Just("watch".to_string()),
        Just("a b".to_string()),
        Just("a+b".to_string()),
        Just("a%b".to_string()),
        Just("a?b".to_string()),
        Just("a#b".to_string()),
        Just("a;b".to_string()),
        Just("a!b".to_string()),
        Just("ünï".to_string()),
        Just("system:node:n1".to_string()),
        "[a-z0-9]([a-z0-9.-]{0,10}[a-z0-9])?",
        // No '/': an encoded slash separates segments, so the name would not be this name.
        "[^/]{1,12}",
    ]
    .prop_filter("a name", |s| !s.is_empty() && s != "." && s != "..")
}

fn path_part() -> impl Strategy<Value = (Option<String>, Option<String>, Option<&'static str>)> {
    let ns = prop_oneof![
        3 => Just(Some("default".to_string())),
        1 => Just(None),
        1 => names().prop_map(Some),
    ];
    let name = prop_oneof![2 => Just(None), 2 => names().prop_map(Some)];
    let sub = prop_oneof![
        12 => Just(None),
        1 => Just(Some("status")),
        1 => Just(Some("log")),
        1 => Just(Some("exec")),
        1 => Just(Some("proxy/a/b")),
    ];
    (ns, name, sub)
}

fn valid_token() -> String {
    ContinueToken {
        rv: 5,
        start: "p-1".into(),
    }
    .encode()
}

/// A query parameter: every ListOptions and GetOptions parameter, `includeObject`, `pretty`,
/// `timeout` and a few kcache does not know, each with valid and invalid values.
fn param() -> impl Strategy<Value = (&'static str, String)> {
    fn one_of(key: &'static str, values: &[&'static str]) -> BoxedStrategy<(&'static str, String)> {
        proptest::sample::select(values.to_vec())
            .prop_map(move |v| (key, v.to_string()))
            .boxed()
    }
    prop_oneof![
        2 => one_of("watch", &["1", "true", "0", "false", "FALSE", "", "maybe"]),
        2 => one_of(
            "labelSelector",
            &[
                "app=web",
                "app=web,tier!=db",
                "app in (web,db)",
                "!app",
                "tier",
                "",
                "app==",
                "a b c",
                "(",
                "app=web;x",
                "app=wéb",
            ],
        ),
        5 => one_of(
            "fieldSelector",
            &[
                "metadata.name=p",
                "metadata.namespace!=kube-system",
                "spec.nodeName=n1",
                "status.phase=Running",
                "status.phase=Running,spec.nodeName=",
                "images=nginx",
                "spec.containers.image=nginx",
                "images!=nginx,status.phase=Running",
                "spec.containers[*].image=x",
                "spec.unknown=x",
                "metadata.labels=x",
                "spec.color=red",
                "spec.size=5",
                "spec.shape=round",
                "byColor=red",
                "a=b=c",
                "metadata.name=a\\,b",
                "=",
                "",
                "status.phase",
            ],
        ),
        2 => one_of(
            "resourceVersion",
            &[
                "",
                "0",
                "1",
                "17",
                "18446744073709551615",
                "18446744073709551616",
                "abc",
                "-1",
                "+5",
                " 5",
            ],
        ),
        2 => one_of(
            "resourceVersionMatch",
            &["Exact", "NotOlderThan", "", "exact", "Bogus"],
        ),
        2 => one_of(
            "limit",
            &["0", "-1", "500", "abc", "9223372036854775808", "", "+5", "1 "],
        ),
        2 => prop_oneof![
            Just(("continue", valid_token())),
            Just(("continue", "garbage".to_string())),
            Just(("continue", String::new())),
        ],
        2 => one_of(
            "timeoutSeconds",
            &["0", "30", "-1", "abc", "9223372036854775807", "", "-9223372036854775808"],
        ),
        2 => one_of("allowWatchBookmarks", &["true", "false", ""]),
        2 => one_of("sendInitialEvents", &["true", "false", ""]),
        2 => one_of("pretty", &["true", "0", ""]),
        2 => one_of(
            "includeObject",
            &["None", "Object", "Metadata", "", "object", "bogus"],
        ),
        1 => one_of("timeout", &["30s", "bogus"]),
        1 => one_of("bogus", &["x"]),
        1 => one_of("dryRun", &["All"]),
    ]
}

/// Accept ranges: every form kcache produces, forms it hands to the upstream, and garbage.
const RANGES: &[&str] = &[
    "application/json",
    "*/*",
    "application/*",
    "application/vnd.kubernetes.protobuf",
    "application/vnd.kubernetes.protobuf;stream=watch",
    "application/json;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
    "application/json;as=Bogus;v=v1;g=meta.k8s.io",
    "application/json;q=0",
    "application/yaml",
    "text/html",
    "???",
    "",
];

/// What kcache's negotiation (negotiate.rs) decides for the ranges above, in order: the first
/// range it can produce or must hand over decides; q=0 ranges, and protobuf it does not answer,
/// are skipped.
fn expected_representation(ranges: Option<&[&str]>, protobuf: bool) -> Representation {
    use Representation::*;
    let Some(ranges) = ranges else { return Json };
    if ranges.join(",").trim().is_empty() {
        return Json;
    }
    for r in ranges {
        let decided = match *r {
            "application/json" | "*/*" | "application/*" => Some(Json),
            "application/vnd.kubernetes.protobuf"
            | "application/vnd.kubernetes.protobuf;stream=watch" => protobuf.then_some(Protobuf),
            "application/json;as=Table;v=v1;g=meta.k8s.io" => Some(Table),
            "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io" => {
                Some(PartialObjectMetadata)
            }
            "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io" => {
                Some(PartialObjectMetadataList)
            }
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
            | "application/json;q=0" => None,
            _ => Some(Upstream),
        };
        if let Some(d) = decided {
            return d;
        }
    }
    Upstream
}

fn request() -> impl Strategy<Value = Request> {
    let method = prop_oneof![
        8 => Just(Method::GET),
        1 => Just(Method::HEAD),
        1 => Just(Method::POST),
        1 => Just(Method::PUT),
        1 => Just(Method::PATCH),
        1 => Just(Method::DELETE),
    ];
    let ty = prop_oneof![
        4 => Just(Ty::Pods),
        2 => Just(Ty::Widgets),
        1 => Just(Ty::ConfigMaps),
        1 => Just(Ty::Deployments),
    ];
    let pod_cache = prop_oneof![
        Just(PodCache::Whole),
        Just(PodCache::Restricted),
        Just(PodCache::MetadataOnly),
    ];
    let params = proptest::collection::vec(
        (param(), any::<bool>()).prop_map(|((k, text), plus_for_space)| {
            (
                k,
                Value {
                    text,
                    plus_for_space,
                },
            )
        }),
        0..7,
    );
    let accept = proptest::option::weighted(
        0.8,
        proptest::collection::vec(proptest::sample::select(RANGES), 1..4),
    );
    let user_agent = proptest::option::of(prop_oneof![
        Just(b"kubectl/v1.28.0 (linux/amd64) kubernetes/abcdef".to_vec()),
        Just(b"curl/8.5.0".to_vec()),
        Just(b"Mozilla/5.0".to_vec()),
        Just(b"client \xff\xfe".to_vec()),
        Just(Vec::new()),
    ]);
    (
        (
            method,
            ty,
            pod_cache,
            proptest::bool::weighted(0.2),
            path_part(),
            any::<bool>(),
        ),
        params,
        (accept, prop_oneof![Just(","), Just(", ")]),
        user_agent,
        any::<bool>(),
    )
        .prop_map(
            |(
                (
                    method,
                    ty,
                    pod_cache,
                    legacy_watch,
                    (namespace, name, subresource),
                    trailing_slash,
                ),
                params,
                (accept, accept_separator),
                user_agent,
                protobuf,
            )| Request {
                method,
                ty,
                pod_cache,
                legacy_watch,
                namespace,
                subresource: subresource.filter(|_| name.is_some()),
                name,
                trailing_slash,
                params,
                accept,
                accept_separator,
                user_agent,
                protobuf,
            },
        )
}

// ----- what every read obeys, whatever the request -----

/// The invariants of any request, generated or arbitrary: `Parsed` and `ReadRequest` are built
/// without a panic, a read is a GET, LIST or WATCH of the type itself, and its errors are the
/// apiserver's, with a Status body.
fn check_any(parts: &http::request::Parts, cache: &ResourceCache, protobuf: bool) {
    let parsed = Parsed::parse(parts);
    if parsed.path.is_none() {
        assert_eq!(parsed.verb, Verb::Other);
    }
    let read = parsed.read(&parts.headers, cache, protobuf);
    let readable = parsed
        .path
        .as_ref()
        .is_some_and(|p| p.subresource.is_none())
        && matches!(parsed.verb, Verb::Get | Verb::List | Verb::Watch);
    assert_eq!(read.is_some(), readable, "{:?}", parts.uri);
    let Some(read) = read else { return };
    assert_eq!(read.verb, parsed.verb);
    assert!(read.path.subresource.is_none());
    if !protobuf {
        assert_ne!(read.representation, Representation::Protobuf);
    }
    if let Err(e) = &read.include {
        check_status(&ApiError::from(e.clone()), &[400]);
    }
    match &read.options {
        Options::Get(_) => assert_eq!(read.verb, Verb::Get),
        Options::List(Err(e)) => {
            assert_ne!(read.verb, Verb::Get);
            check_status(e, &[400, 422]);
            assert!(read.within_scope);
        }
        Options::List(Ok(listing)) => {
            assert_ne!(read.verb, Verb::Get);
            if read.verb == Verb::List {
                assert!(!listing.opts.watch, "{:?}", parts.uri);
            }
            match &listing.rule {
                Ok(ListRule::ForeignToken(e)) => check_status(e, &[400]),
                Ok(_) => {}
                // A resourceVersion that is not a number is the apiserver's 500 (L7) to give:
                // only a read no upstream can answer gets it from kcache.
                Err(e) if e.code() == 500 => {
                    assert!(read.upstream_only.is_some(), "{:?}", parts.uri);
                    check_status(e, &[500]);
                }
                Err(e) => check_status(e, &[400]),
            }
        }
    }
}

/// `e` is one of `codes`, and its Status body says so.
fn check_status(e: &ApiError, codes: &[u16]) {
    assert!(codes.contains(&e.code()), "{} for {e:?}", e.code());
    let body: serde_json::Value = serde_json::from_slice(&e.body()).expect("a JSON Status");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["code"].as_u64(), Some(u64::from(e.code())));
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
}

// ----- what a generated request's parts say -----

/// The generated fields kube-apiserver v1.28 selects pods on; the other generated fields are
/// kcache's own index fields or fields no apiserver knows.
const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "status.phase",
];

/// The fields the generated field selector names, or None when it does not parse (a term
/// without an operator, or a bare `=` in a value).
fn selector_fields(sel: &str) -> Option<Vec<String>> {
    if matches!(sel, "a=b=c" | "status.phase") {
        return None;
    }
    // Terms split at commas that are not escaped; a term's field ends at its operator.
    let mut terms = vec![String::new()];
    let mut chars = sel.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let last = terms.last_mut().unwrap();
                last.push(c);
                last.extend(chars.next());
            }
            ',' => terms.push(String::new()),
            _ => terms.last_mut().unwrap().push(c),
        }
    }
    Some(
        terms
            .iter()
            .filter_map(|t| t.split(['=', '!']).next())
            .filter(|f| !f.is_empty())
            .map(String::from)
            .collect(),
    )
}

/// A generated request reads back as generated (path, query, verb), and a read of a cached
/// type as its parts say.
fn check_generated(r: &Request) {
    let parts = r.parts();
    let cache = r.cache();
    check_any(&parts, cache, r.protobuf);

    let parsed = Parsed::parse(&parts);
    let (group, version, resource) = r.ty.group_version_resource();
    let expected_path = ResourcePath {
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        subresource: r.subresource.map(String::from),
        legacy_watch: r.legacy_watch,
    };
    assert_eq!(parsed.path.as_ref(), Some(&expected_path), "{}", r.uri());
    let decoded: Vec<(String, String)> = r
        .params
        .iter()
        .map(|(k, v)| (k.to_string(), v.text.clone()))
        .collect();
    assert_eq!(parsed.query, decoded);

    // The first `watch` value counts, and only for a collection (a named GET ignores it).
    let watch = r.legacy_watch
        || (r.name.is_none()
            && r.params
                .iter()
                .find(|(k, _)| *k == "watch")
                .is_some_and(|(_, v)| !matches!(v.text.as_str(), "0" | "false" | "FALSE")));
    let verb = match r.method {
        Method::GET if watch => Verb::Watch,
        Method::GET if r.name.is_some() => Verb::Get,
        Method::GET => Verb::List,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE => Verb::Delete,
        _ => Verb::Other,
    };
    assert_eq!(parsed.verb, verb, "{}", r.uri());

    let read = parsed.read(&parts.headers, cache, r.protobuf);
    let Some(read) = read else {
        assert!(r.subresource.is_some() || !matches!(verb, Verb::Get | Verb::List | Verb::Watch));
        return;
    };
    if matches!(r.ty, Ty::Pods | Ty::Widgets) {
        check_cached(r, &read);
    }
}

/// A read of the cache's own type, against what its parts say.
fn check_cached(r: &Request, read: &ReadRequest<'_>) {
    assert_eq!(
        read.representation,
        expected_representation(r.accept.as_deref(), r.protobuf),
        "{:?}",
        r.accept
    );
    let ua = r
        .user_agent
        .as_deref()
        .and_then(|u| std::str::from_utf8(u).ok());
    assert_eq!(read.user_agent, ua);

    match (&read.include, r.first("includeObject")) {
        (Ok(IncludeObject::Metadata), None | Some("" | "Metadata"))
        | (Ok(IncludeObject::None), Some("None"))
        | (Ok(IncludeObject::Object), Some("Object"))
        | (Err(_), Some("object" | "bogus")) => {}
        (got, v) => panic!("includeObject {v:?} read as {got:?}"),
    }

    // Only the first fieldSelector counts, as in the apiserver.
    let fields = r.first("fieldSelector").and_then(selector_fields);
    let widgets = r.ty == Ty::Widgets;
    // kcache's own index fields; a CRD selectable field on the same path is the upstream's.
    let own = |f: &str| {
        if widgets {
            matches!(f, "spec.size" | "byColor" | "bySize")
        } else {
            matches!(f, "images" | "spec.containers.image")
        }
    };
    let local = fields.as_ref().is_some_and(|fs| fs.iter().any(|f| own(f)));
    assert_eq!(read.local, local, "{}", r.uri());

    let known_param = |k: &str| !matches!(k, "bogus" | "dryRun");
    let bad_rv = r
        .params
        .iter()
        .find(|(k, v)| *k == "resourceVersion" && !v.text.is_empty())
        .is_some_and(|(_, v)| {
            !matches!(v.text.as_str(), "0" | "1" | "17" | "18446744073709551615")
        });
    let metadata_only = !widgets && r.pod_cache == PodCache::MetadataOnly;
    let foreign_field = read.verb != Verb::Get
        && fields.as_ref().is_some_and(|fs| {
            fs.iter().any(|f| {
                let known = if widgets {
                    matches!(
                        f.as_str(),
                        "metadata.name" | "metadata.namespace" | "spec.color" | "spec.shape"
                    )
                } else {
                    POD_FIELDS.contains(&f.as_str())
                };
                !known || (metadata_only && !f.starts_with("metadata."))
            })
        });
    let upstream_only = r.params.iter().any(|(k, _)| !known_param(k)) || bad_rv || foreign_field;
    assert_eq!(
        read.upstream_only.is_some(),
        upstream_only,
        "{}: {:?}",
        r.uri(),
        read.upstream_only
    );

    let restricted = !widgets && r.pod_cache == PodCache::Restricted;
    let ns_ok = !restricted || r.namespace.as_deref() == Some("default");
    match &read.options {
        Options::Get(opts) => {
            assert_eq!(
                opts.resource_version.as_deref(),
                r.first("resourceVersion").filter(|v| !v.is_empty())
            );
            assert_eq!(read.within_scope, ns_ok);
        }
        Options::List(Err(_)) => assert!(read.within_scope),
        Options::List(Ok(listing)) => {
            let opts = &listing.opts;
            if read.verb == Verb::Watch {
                assert!(opts.watch, "{}", r.uri());
            }
            assert_eq!(listing.filter.namespace, r.namespace);
            assert_eq!(listing.filter.label, opts.label);
            assert_eq!(listing.filter.field, opts.field);
            if let Some(name) = r.name.as_deref() {
                assert!(
                    opts.field
                        .requirements()
                        .iter()
                        .any(|q| q.field == "metadata.name"
                            && q.op == FieldOp::Equals
                            && q.value == name),
                    "{name:?}: {}",
                    opts.field
                );
            }
            // Inside what the restricted cache holds: its namespace, and its label and field
            // requirements repeated by the request (the generated selectors that do).
            let label_ok = !restricted
                || matches!(
                    r.first("labelSelector"),
                    Some("app=web" | "app=web,tier!=db")
                );
            let field_ok = !restricted
                || matches!(
                    r.first("fieldSelector"),
                    Some(
                        "status.phase=Running"
                            | "status.phase=Running,spec.nodeName="
                            | "images!=nginx,status.phase=Running"
                    )
                );
            assert_eq!(
                read.within_scope,
                ns_ok && label_ok && field_ok,
                "{}: {} / {}",
                r.uri(),
                opts.label,
                opts.field
            );
        }
    }
}

/// Text near the request grammar, so that arbitrary requests get deep before failing.
fn uri_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("/api/v1"),
            Just("/apis/example.com/v1"),
            Just("/watch"),
            Just("/namespaces/default"),
            Just("/pods"),
            Just("/widgets"),
            Just("/p"),
            Just("/status"),
            Just("/"),
            Just("%2F"),
            Just("%FF"),
            Just("%"),
            Just("?"),
            Just("&"),
            Just("="),
            Just("watch=1"),
            Just("watch=0"),
            Just("fieldSelector=images%3Dx"),
            Just("fieldSelector=metadata.name%3Dp"),
            Just("labelSelector=app%3Dweb"),
            Just("resourceVersion=abc"),
            Just("resourceVersionMatch=Exact"),
            Just("sendInitialEvents=true"),
            Just("continue=x"),
            Just("includeObject=x"),
            Just("+"),
            Just(";"),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

/// Any text as a request target: what an HTTP parser refuses percent-encoded.
fn target(text: &str) -> http::Uri {
    let mut out = String::from("/");
    for b in text.trim_start_matches('/').bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.parse().expect("an encoded request target")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn generated_requests_read_as_their_parts_say(r in request()) {
        check_generated(&r);
    }

    #[test]
    fn any_request_is_read_without_a_panic(
        uri in prop_oneof![any::<String>(), uri_soup()],
        method in proptest::sample::select(vec![Method::GET, Method::HEAD, Method::DELETE]),
        accept in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        user_agent in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
        which in 0..4usize,
        protobuf in any::<bool>(),
    ) {
        let mut b = http::Request::builder().method(method).uri(target(&uri));
        for (name, value) in [(ACCEPT, accept), (USER_AGENT, user_agent)] {
            if let Some(v) = value.and_then(|v| HeaderValue::from_bytes(&v).ok()) {
                b = b.header(name, v);
            }
        }
        let parts = b.body(()).unwrap().into_parts().0;
        let c = caches();
        let cache = [&c.whole, &c.restricted, &c.metadata_only, &c.widgets][which];
        check_any(&parts, cache, protobuf);
    }
}

// ----- where kcache reads a request differently from kube-apiserver -----
//
// Each test states what the apiserver does with the input and fails while kcache differs.

fn read_of(
    uri: &str,
    accept: Option<&[u8]>,
    protobuf: bool,
    f: impl FnOnce(&Parsed, Option<ReadRequest<'_>>),
) {
    let mut b = http::Request::get(uri);
    if let Some(a) = accept {
        b = b.header(ACCEPT, HeaderValue::from_bytes(a).unwrap());
    }
    let parts = b.body(()).unwrap().into_parts().0;
    let parsed = Parsed::parse(&parts);
    let read = parsed.read(&parts.headers, &caches().whole, protobuf);
    f(&parsed, read);
}

/// Go's `url.Values.Get` and the ListOptions decoder take a parameter's first value: with
/// `watch=0&watch=1` the apiserver lists (checked against a v1.34.9 apiserver, 2026-11-28),
/// and so does kcache.
#[test]
fn a_repeated_watch_parameter_counts_by_its_first_value() {
    read_of(
        "/api/v1/namespaces/default/pods?watch=0&watch=1",
        None,
        false,
        |parsed, _| {
            assert_eq!(parsed.verb, Verb::List);
        },
    );
}

/// `GET …/pods/NAME?watch=1` is routed to the apiserver's GET handler (only the deprecated
/// `/watch/` prefix routes a named path to the watch handler), which ignores `watch`: the
/// object, not a stream (checked against a v1.34.9 apiserver, 2026-11-28); so does kcache.
#[test]
fn a_named_get_with_watch_is_a_get() {
    read_of(
        "/api/v1/namespaces/default/pods/p?watch=1",
        None,
        false,
        |parsed, _| {
            assert_eq!(parsed.verb, Verb::Get);
        },
    );
}

/// A watch of one object with a field selector: the apiserver requires the selector to
/// require `metadata.name` to be the path's name, else 400 "fieldSelector metadata.name
/// doesn't match requested name" (checked against a v1.34.9 apiserver, 2026-11-28); so does
/// kcache.
#[test]
fn a_named_watch_with_another_field_selector_is_a_400() {
    read_of(
        "/api/v1/watch/namespaces/default/pods/p?fieldSelector=spec.nodeName%3Dn1",
        None,
        false,
        |_, read| match read.expect("a read").options {
            Options::List(Err(e)) => assert_eq!(e.code(), 400),
            _ => panic!("accepted"),
        },
    );
}

/// The apiserver selects a watched object by its name as a value (`OneTermEqualSelector`), and
/// so does kcache: a name with `,`, `=` or `\` (allowed in names of types validated as path
/// segments, such as RBAC roles) is that name, escaped.
#[test]
fn a_named_watch_of_a_name_with_selector_syntax() {
    for name in ["a=b", "a,b", "a\\b", "x,images=nginx"] {
        let uri = format!(
            "/api/v1/watch/namespaces/default/pods/{}",
            utf8_percent_encode(name, SEGMENT)
        );
        read_of(&uri, None, false, |_, read| {
            match &read.expect("a read").options {
                Options::List(Ok(l)) => assert_eq!(
                    l.opts.field.requirements(),
                    FieldSelector::parse(&format!(
                        "metadata.name={}",
                        kcache::selector::escape_field_value(name)
                    ))
                    .unwrap()
                    .requirements(),
                    "{name:?}"
                ),
                Options::List(Err(e)) => panic!("{name:?}: {e:?}"),
                Options::Get(_) => panic!("a get"),
            }
        });
    }
}

/// Go's `url.ParseQuery` drops a pair with a `;` or an invalid `%` escape; kcache keeps it:
/// `labelSelector=%zz` is the apiserver's whole list but kcache's 400, and `watch=1;` the
/// apiserver's list but kcache's watch.
#[test]
#[ignore = "kcache differs from kube-apiserver"]
fn apiserver_difference_query_pairs_go_drops() {
    assert_eq!(parse_query(Some("labelSelector=%zz")), vec![]);
    read_of(
        "/api/v1/namespaces/default/pods?watch=1;",
        None,
        false,
        |parsed, _| {
            assert_eq!(parsed.verb, Verb::List);
        },
    );
}

/// The apiserver negotiates over `goautoneg.ParseAccept`: ranges sorted by q and specific
/// before wildcard, type and parameter names compared as sent, and an Accept it cannot match
/// is its 406. kcache answers these from the cache in another form than the apiserver's (YAML,
/// protobuf, a plain list, a 406: the upstream's to give).
#[test]
#[ignore = "kcache differs from kube-apiserver"]
fn apiserver_difference_accept_headers() {
    use Representation::*;
    // (Accept, protobuf answered for the type, what would be the apiserver's answer)
    let cases: &[(&[u8], bool, &[Representation])] = &[
        (
            b"application/json;q=0.5, application/yaml",
            false,
            &[Upstream],
        ),
        (b"*/*, application/yaml", false, &[Upstream]),
        (
            b"application/json;q=0.9, application/vnd.kubernetes.protobuf",
            true,
            &[Protobuf, Upstream],
        ),
        (b"APPLICATION/JSON", false, &[Upstream]),
        (
            b"application/json;AS=Table;V=v1;G=meta.k8s.io",
            false,
            &[Json, Upstream],
        ),
        (b"application/\xffjson", false, &[Upstream]),
    ];
    for (accept, protobuf, apiserver) in cases {
        read_of(
            "/api/v1/namespaces/default/pods",
            Some(accept),
            *protobuf,
            |_, read| {
                let r = read.expect("a read").representation;
                assert!(
                    apiserver.contains(&r),
                    "{}: {r:?}",
                    String::from_utf8_lossy(accept)
                );
            },
        );
    }
}
