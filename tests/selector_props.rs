//! Property tests for the request parsers, the companions of the fuzz targets in `fuzz/`:
//! generated label and field selectors (every operator the apiserver has) survive a
//! text → parse → print → parse round trip and select exactly what a plain reference evaluation
//! selects; and any string given as a selector, a query string, a continue token or a path is
//! either accepted or refused with a 4xx Status, never a panic or a 5xx.

use std::collections::{BTreeMap, BTreeSet};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use kcache::api::fuzzing::{parse_path, parse_query, GetOptions, ListOptions};
use kcache::api::ContinueToken;
use kcache::index::IndexSet;
use kcache::resource::ResourceInfo;
use kcache::selector::{escape_field_value, FieldSelector, LabelSelector};
use kcache::status::ApiError;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use proptest::prelude::*;

// ----- label selectors -----

/// A label requirement as the test means it, independent of kcache's types.
#[derive(Debug, Clone)]
enum Req {
    Eq(String, String),
    Neq(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    NotExists(String),
    Gt(String, i64),
    Lt(String, i64),
}

impl Req {
    fn key(&self) -> &str {
        match self {
            Req::Eq(k, _)
            | Req::Neq(k, _)
            | Req::In(k, _)
            | Req::NotIn(k, _)
            | Req::Exists(k)
            | Req::NotExists(k)
            | Req::Gt(k, _)
            | Req::Lt(k, _) => k,
        }
    }

    /// The Kubernetes semantics, written out plainly: `!=` and `notin` hold for a missing label,
    /// `>`/`<` need the label to be present and a base-10 int64.
    fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
        let have = labels.get(self.key());
        let int = |v: &String| -> Option<i64> {
            let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let n: i128 = v.parse().ok()?;
            i64::try_from(n).ok()
        };
        match self {
            Req::Eq(_, v) => have == Some(v),
            Req::Neq(_, v) => have != Some(v),
            Req::In(_, set) => have.is_some_and(|h| set.contains(h)),
            Req::NotIn(_, set) => !have.is_some_and(|h| set.contains(h)),
            Req::Exists(_) => have.is_some(),
            Req::NotExists(_) => have.is_none(),
            Req::Gt(_, n) => have.and_then(int).is_some_and(|h| h > *n),
            Req::Lt(_, n) => have.and_then(int).is_some_and(|h| h < *n),
        }
    }
}

/// Keys that requirements share, so generated label sets hit them; `in` and `notin` are
/// keywords only in operator position and must work as keys.
fn label_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("app".to_string()),
        Just("tier".to_string()),
        Just("in".to_string()),
        Just("notin".to_string()),
        Just("example.com/Name-1".to_string()),
        "[a-z0-9]([a-z0-9-]{0,5}[a-z0-9])?(\\.[a-z]{1,3})?/[A-Za-z0-9]([A-Za-z0-9._-]{0,6}[A-Za-z0-9])?",
        "[A-Za-z0-9]([A-Za-z0-9._-]{0,8}[A-Za-z0-9])?",
    ]
}

fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("web".to_string()),
        Just("in".to_string()),
        Just("notin".to_string()),
        Just("7".to_string()),
        Just("007".to_string()),
        Just("9223372036854775807".to_string()),
        // Digits, but beyond int64: never satisfies `>`/`<`.
        Just("99999999999999999999".to_string()),
        "[0-9]{1,4}",
        "[A-Za-z0-9]([A-Za-z0-9._-]{0,8}[A-Za-z0-9])?",
    ]
}

fn threshold() -> impl Strategy<Value = i64> {
    prop_oneof![0..1000i64, Just(0), Just(7), Just(i64::MAX)]
}

fn req() -> impl Strategy<Value = Req> {
    let set = || proptest::collection::btree_set(label_value(), 1..4);
    prop_oneof![
        (label_key(), label_value()).prop_map(|(k, v)| Req::Eq(k, v)),
        (label_key(), label_value()).prop_map(|(k, v)| Req::Neq(k, v)),
        (label_key(), set()).prop_map(|(k, s)| Req::In(k, s)),
        (label_key(), set()).prop_map(|(k, s)| Req::NotIn(k, s)),
        label_key().prop_map(Req::Exists),
        label_key().prop_map(Req::NotExists),
        (label_key(), threshold()).prop_map(|(k, n)| Req::Gt(k, n)),
        (label_key(), threshold()).prop_map(|(k, n)| Req::Lt(k, n)),
    ]
}

/// How a requirement is spelled: optional whitespace around operators, `==` for `=`, and the
/// order of set members (they are a set; any order, the empty member included, is the same).
#[derive(Debug, Clone)]
struct Spelling {
    pad: &'static str,
    double_equals: bool,
    rotate: usize,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    (
        prop_oneof![Just(""), Just(" "), Just("\t"), Just("  ")],
        any::<bool>(),
        0..4usize,
    )
        .prop_map(|(pad, double_equals, rotate)| Spelling {
            pad,
            double_equals,
            rotate,
        })
}

fn render(r: &Req, sp: &Spelling) -> String {
    let p = sp.pad;
    let set = |s: &BTreeSet<String>| {
        let mut v: Vec<&str> = s.iter().map(String::as_str).collect();
        let n = sp.rotate % v.len();
        v.rotate_left(n);
        v.join(&format!("{p},{p}"))
    };
    match r {
        Req::Eq(k, v) if sp.double_equals => format!("{k}{p}=={p}{v}"),
        Req::Eq(k, v) => format!("{k}{p}={p}{v}"),
        Req::Neq(k, v) => format!("{k}{p}!={p}{v}"),
        // The keyword needs whitespace before it, or it would be part of the key.
        Req::In(k, s) => format!("{k} in{p}({p}{}{p})", set(s)),
        Req::NotIn(k, s) => format!("{k} notin{p}({p}{}{p})", set(s)),
        Req::Exists(k) => k.clone(),
        Req::NotExists(k) => format!("!{p}{k}"),
        Req::Gt(k, n) => format!("{k}{p}>{p}{n}"),
        Req::Lt(k, n) => format!("{k}{p}<{p}{n}"),
    }
}

/// Label sets over the keys and values the selector mentions, plus some others.
fn labels_for(reqs: &[Req]) -> impl Strategy<Value = BTreeMap<String, String>> {
    let mut keys: Vec<String> = reqs.iter().map(|r| r.key().to_string()).collect();
    keys.push("other".into());
    let mut values: Vec<String> = reqs
        .iter()
        .flat_map(|r| match r {
            Req::Eq(_, v) | Req::Neq(_, v) => vec![v.clone()],
            Req::In(_, s) | Req::NotIn(_, s) => s.iter().cloned().collect(),
            Req::Gt(_, n) | Req::Lt(_, n) => vec![
                n.to_string(),
                n.saturating_add(1).to_string(),
                n.saturating_sub(1).max(0).to_string(),
            ],
            Req::Exists(_) | Req::NotExists(_) => vec![],
        })
        .collect();
    values.extend(["", "x", "99999999999999999999"].map(String::from));
    let entry = (
        proptest::sample::select(keys),
        proptest::sample::select(values),
    );
    proptest::collection::btree_map(entry.0, entry.1, 0..5)
}

/// Label sets or field values by name.
type Sets = Vec<BTreeMap<String, String>>;

fn case() -> impl Strategy<Value = (Vec<(Req, Spelling)>, Sets)> {
    proptest::collection::vec((req(), spelling()), 0..6).prop_flat_map(|reqs| {
        let plain: Vec<Req> = reqs.iter().map(|(r, _)| r.clone()).collect();
        let sets = proptest::collection::vec(labels_for(&plain), 1..8);
        (Just(reqs), sets)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn label_selectors_round_trip_and_match_like_the_reference((reqs, label_sets) in case()) {
        let text = reqs
            .iter()
            .map(|(r, sp)| render(r, sp))
            .collect::<Vec<_>>()
            .join(",");
        let sel = LabelSelector::parse(&text);
        prop_assert!(sel.is_ok(), "{:?} -> {:?}", text, sel);
        let sel = sel.unwrap();
        prop_assert_eq!(sel.requirements().len(), reqs.len());
        let printed = sel.to_string();
        prop_assert_eq!(LabelSelector::parse(&printed), Ok(sel.clone()), "printed {:?}", printed);
        for labels in &label_sets {
            let want = reqs.iter().all(|(r, _)| r.holds(labels));
            prop_assert_eq!(sel.matches(labels), want, "{:?} on {:?}", text, labels);
        }
    }
}

// ----- field selectors -----

#[derive(Debug, Clone)]
struct FieldReq {
    field: String,
    /// 0: `=`, 1: `==`, 2: `!=`.
    op: u8,
    value: String,
}

impl FieldReq {
    /// A missing field reads as "", as in the apiserver's field sets.
    fn holds(&self, fields: &BTreeMap<String, String>) -> bool {
        let have = fields.get(&self.field).map(String::as_str).unwrap_or("");
        (have == self.value) != (self.op == 2)
    }

    fn render(&self) -> String {
        let op = ["=", "==", "!="][usize::from(self.op)];
        format!("{}{op}{}", self.field, escape_field_value(&self.value))
    }
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("metadata.name".to_string()),
        Just("spec.nodeName".to_string()),
        Just("status.phase".to_string()),
        "[a-zA-Z][a-zA-Z0-9.]{0,10}",
    ]
}

fn field_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("node-1".to_string()),
        Just("a,b".to_string()),
        Just("x=y".to_string()),
        Just("back\\slash".to_string()),
        Just("\\".to_string()),
        Just("=".to_string()),
        "[a-z0-9,=\\\\ !é-]{0,8}",
    ]
}

fn field_case() -> impl Strategy<Value = (Vec<FieldReq>, Sets)> {
    proptest::collection::vec(
        (field_name(), 0..3u8, field_value()).prop_map(|(field, op, value)| FieldReq {
            field,
            op,
            value,
        }),
        0..6,
    )
    .prop_flat_map(|reqs| {
        let mut names: Vec<String> = reqs.iter().map(|r| r.field.clone()).collect();
        names.push("other".into());
        let mut values: Vec<String> = reqs.iter().map(|r| r.value.clone()).collect();
        values.extend(["", "zzz"].map(String::from));
        let sets = proptest::collection::vec(
            proptest::collection::btree_map(
                proptest::sample::select(names),
                proptest::sample::select(values),
                0..4,
            ),
            1..8,
        );
        (Just(reqs), sets)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn field_selectors_round_trip_and_match_like_the_reference((reqs, field_sets) in field_case()) {
        let text = reqs.iter().map(FieldReq::render).collect::<Vec<_>>().join(",");
        let sel = FieldSelector::parse(&text);
        prop_assert!(sel.is_ok(), "{:?} -> {:?}", text, sel);
        let sel = sel.unwrap();
        prop_assert_eq!(sel.requirements().len(), reqs.len());
        let printed = sel.to_string();
        prop_assert_eq!(FieldSelector::parse(&printed), Ok(sel.clone()), "printed {:?}", printed);
        for fields in &field_sets {
            let want = reqs.iter().all(|r| r.holds(fields));
            let got = sel.matches(&|name| fields.get(name).map(String::as_str));
            prop_assert_eq!(got, want, "{:?} on {:?}", text, fields);
        }
    }
}

// ----- any input: accepted, or a 4xx -----

fn pods() -> ResourceInfo {
    ResourceInfo {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        kind: "Pod".into(),
        namespaced: true,
        custom: false,
    }
}

fn list_options(query: &str) -> Result<ListOptions, kcache::status::ApiError> {
    ListOptions::parse(
        &parse_query(Some(query)),
        &pods(),
        &IndexSet::default(),
        false,
    )
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// Strings near the selector grammars, so that parses get deep before failing.
fn selector_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("app"),
            Just("x.io/k"),
            Just("metadata.name"),
            Just(" in "),
            Just(" notin "),
            Just("="),
            Just("=="),
            Just("!="),
            Just("!"),
            Just("("),
            Just(")"),
            Just(","),
            Just(">"),
            Just("<"),
            Just(" "),
            Just("\\"),
            Just("\0"),
            Just("-"),
            Just("9"),
            Just("é"),
            Just("/"),
        ],
        0..20,
    )
    .prop_map(|parts| parts.concat())
}

fn any_or_soup() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), selector_soup()]
}

/// Query strings from parameter names kcache reads and values of every kind, raw or encoded.
fn query_soup() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("labelSelector"),
        Just("fieldSelector"),
        Just("resourceVersion"),
        Just("resourceVersionMatch"),
        Just("limit"),
        Just("timeoutSeconds"),
        Just("continue"),
        Just("watch"),
        Just("allowWatchBookmarks"),
        Just("sendInitialEvents"),
        Just("pretty"),
        Just("bogus"),
    ];
    let value = prop_oneof![
        Just("Exact".to_string()),
        Just("NotOlderThan".to_string()),
        Just("99999999999999999999".to_string()),
        Just("-1".to_string()),
        Just("%ZZ".to_string()),
        Just("%FF%FE".to_string()),
        selector_soup().prop_map(|s| enc(&s)),
        any::<String>().prop_map(|s| enc(&s)),
        "[A-Za-z0-9%+=!(),._~-]{0,16}",
    ];
    proptest::collection::vec((key, value, any::<bool>()), 0..6).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v, with_eq)| {
                if with_eq {
                    format!("{k}={v}")
                } else {
                    k.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("&")
    })
}

/// Base64 of JSON-ish bytes, to get continue tokens past the base64 stage.
fn token_soup() -> impl Strategy<Value = String> {
    let json = prop_oneof![
        Just(r#"{"v":"meta.k8s.io/v1","rv":5,"start":"a\u0000"}"#.to_string()),
        Just(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#.to_string()),
        Just(r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"../x"}"#.to_string()),
        Just(r#"{"v":"meta.k8s.io/v1","rv":1e3,"start":"a"}"#.to_string()),
        Just(r#"{"v":"meta.k8s.io/v1","rv":99999999999999999999,"start":"a"}"#.to_string()),
        Just(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"a","rv":2}"#.to_string()),
        Just(r#"{"v":"x","rv":1,"start":"a"}"#.to_string()),
        Just("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[".to_string()),
        any::<String>(),
    ];
    (json, 0..3usize).prop_map(|(j, cut)| {
        let bytes = j.as_bytes();
        URL_SAFE_NO_PAD.encode(&bytes[..bytes.len().saturating_sub(cut)])
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_label_selector_is_accepted_or_a_400(s in any_or_soup()) {
        let direct = LabelSelector::parse(&s);
        let via_query = list_options(&format!("labelSelector={}", enc(&s)));
        match (&direct, &via_query) {
            (Ok(sel), Ok(opts)) => prop_assert_eq!(&opts.label, sel),
            (Err(e), Err(api)) => {
                prop_assert_eq!(api.code(), 400);
                prop_assert_eq!(api, &kcache::status::ApiError::BadRequest(e.message.clone()));
            }
            _ => prop_assert!(false, "{:?}: {:?} vs {:?}", s, direct, via_query),
        }
    }

    #[test]
    fn any_field_selector_is_accepted_or_a_400(s in any_or_soup()) {
        let via_query = list_options(&format!("fieldSelector={}", enc(&s)));
        if let Err(e) = &via_query {
            prop_assert_eq!(e.code(), 400, "{:?}: {:?}", s, e);
        }
        if FieldSelector::parse(&s).is_err() {
            prop_assert!(via_query.is_err(), "{:?}", s);
        }
    }

    #[test]
    fn any_query_string_is_accepted_or_a_4xx(q in prop_oneof![any::<String>(), query_soup()]) {
        let _ = GetOptions::parse(&parse_query(Some(&q)));
        for legacy_watch in [false, true] {
            let r = ListOptions::parse(&parse_query(Some(&q)), &pods(), &IndexSet::default(), legacy_watch);
            if let Err(e) = r {
                let code = e.code();
                prop_assert!(code == 400 || code == 422, "{:?}: {} {:?}", q, code, e);
                let body: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
                prop_assert_eq!(&body["kind"], "Status");
                prop_assert_eq!(body["code"].as_u64(), Some(u64::from(code)));
            }
        }
    }

    #[test]
    fn any_continue_token_is_accepted_or_a_400(s in prop_oneof![any::<String>(), token_soup()]) {
        match ContinueToken::decode(&s) {
            Ok(t) => prop_assert_eq!(ContinueToken::decode(&t.encode()), Ok(t)),
            Err(e) => prop_assert_eq!(ApiError::from(e).code(), 400, "{:?}", s),
        }
    }

    #[test]
    fn any_path_is_a_resource_path_or_none(
        segs in proptest::collection::vec(
            prop_oneof![
                Just("api".to_string()),
                Just("apis".to_string()),
                Just("v1".to_string()),
                Just("namespaces".to_string()),
                Just("watch".to_string()),
                Just("status".to_string()),
                Just("".to_string()),
                Just("%2F".to_string()),
                Just("%FF".to_string()),
                any::<String>(),
            ],
            0..8,
        )
    ) {
        let path = format!("/{}", segs.join("/"));
        if let Some(p) = parse_path(&path) {
            prop_assert!(!p.resource.is_empty() && !p.version.is_empty(), "{:?}", path);
        }
    }
}
