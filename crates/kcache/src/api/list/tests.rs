use super::*;
use crate::api::filter::IndexRequirement;
use crate::cache::{CacheConfig, EventType, Scope, Writer};
use crate::index::IndexConfig;
use crate::selector::{FieldOp, FieldSelector, LabelSelector};
use proptest::prelude::*;

const NODES: [&str; 4] = ["", "n1", "n2", "n3"];
const APPS: [&str; 4] = ["", "x", "y", "z"];
const IMAGES: [&str; 3] = ["i1", "i2", "i3"];

/// A cache of Pods, by its writer (which reads it too).
fn pods() -> Writer {
    let info = ResourceInfo::core_v1("pods", "Pod");
    ResourceCache::new(info, Scope::default(), CacheConfig::default())
        .with_indexes(&[
            IndexConfig {
                name: "byImage".into(),
                field: Some("spec.containers[*].image".into()),
                label: None,
            },
            IndexConfig {
                name: "byApp".into(),
                field: None,
                label: Some("app".into()),
            },
        ])
        .split()
        .1
}

/// (namespace, name, node, phase, app, images bitmask)
type Pod = (usize, usize, usize, bool, usize, u8);

fn pod(c: &ResourceCache, p: Pod, rv: u64) -> Object {
    let (ns, name, node, running, app, images) = p;
    let labels = if APPS[app].is_empty() {
        String::new()
    } else {
        format!(r#","labels":{{"app":"{}"}}"#, APPS[app])
    };
    let containers: Vec<String> = (0..3)
        .filter(|i| images & (1 << i) != 0)
        .map(|i| format!(r#"{{"name":"c{i}","image":"{}"}}"#, IMAGES[i]))
        .collect();
    let raw = format!(
        r#"{{"metadata":{{"name":"p{name}","namespace":"ns{ns}","resourceVersion":"{rv}"{labels}}},"spec":{{"nodeName":"{}","containers":[{}]}},"status":{{"phase":"{}"}}}}"#,
        NODES[node],
        containers.join(","),
        if running { "Running" } else { "Pending" }
    );
    Object::from_upstream_indexed(&c.info, &c.indexes, Bytes::from(raw), false).unwrap()
}

fn pod_strategy() -> impl Strategy<Value = Pod> {
    (
        0..2usize,
        0..12usize,
        0..4usize,
        any::<bool>(),
        0..4usize,
        0..8u8,
    )
}

/// (node terms, app terms, image terms, namespace, phase)
type Terms = (
    Vec<(bool, usize)>,
    Vec<(usize, usize)>,
    Vec<(bool, usize)>,
    Option<usize>,
    Option<bool>,
);

fn filter_strategy() -> impl Strategy<Value = Terms> {
    (
        prop::collection::vec((any::<bool>(), 0..4usize), 0..2),
        prop::collection::vec((0..4usize, 0..4usize), 0..2),
        prop::collection::vec((any::<bool>(), 0..3usize), 0..2),
        prop::option::of(0..2usize),
        prop::option::of(any::<bool>()),
    )
}

fn make_filter(c: &ResourceCache, (fields, labels, images, ns, phase): Terms) -> Filter {
    let mut f: Vec<String> = fields
        .iter()
        .map(|(eq, n)| format!("spec.nodeName{}{}", if *eq { "=" } else { "!=" }, NODES[*n]))
        .collect();
    if let Some(running) = phase {
        f.push(format!(
            "status.phase={}",
            if running { "Running" } else { "Pending" }
        ));
    }
    let l: Vec<String> = labels
        .iter()
        .map(|(op, a)| {
            let v = if APPS[*a].is_empty() { "x" } else { APPS[*a] };
            match op {
                0 => format!("app={v}"),
                1 => format!("app in ({v},z)"),
                2 => format!("app!={v}"),
                _ => "!app".to_string(),
            }
        })
        .collect();
    let (index, slot) = c.indexes.by_selector_field("byImage").unwrap();
    Filter {
        namespace: ns.map(|n| format!("ns{n}")),
        label: LabelSelector::parse(&l.join(",")).unwrap(),
        field: FieldSelector::parse(&f.join(",")).unwrap(),
        indexed: images
            .iter()
            .map(|(eq, i)| IndexRequirement {
                index,
                slot,
                op: if *eq {
                    FieldOp::Equals
                } else {
                    FieldOp::NotEquals
                },
                value: IMAGES[*i].into(),
            })
            .collect(),
    }
}

/// Every page of a list, following continue tokens: (keys, token, remaining) per page.
fn pages(
    c: &ResourceCache,
    snap: &Snapshot,
    f: &Filter,
    limit: usize,
    use_index: bool,
) -> Vec<(Vec<String>, Option<String>, Option<usize>)> {
    let mut out = Vec::new();
    let mut start: Option<String> = None;
    loop {
        let candidates = if use_index { indexed(c, snap, f) } else { None };
        let p = select_with(
            c,
            snap,
            f,
            start.as_deref(),
            limit,
            candidates,
            TokenForm::Relative,
        );
        let keys = p.objects.iter().map(|o| o.key().to_string()).collect();
        out.push((keys, p.token.clone(), p.remaining));
        match p.token {
            Some(t) => start = Some(ContinueToken::decode(&t).unwrap().key().to_string()),
            None => return out,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn indexed_lists_equal_scans(
        initial in prop::collection::vec(pod_strategy(), 0..30),
        changes in prop::collection::vec((pod_strategy(), 0..3usize), 0..20),
        filter in filter_strategy(),
        limit in 0..5usize,
        back in 0..20usize,
    ) {
        let c = pods();
        let objs: Vec<Object> = initial.iter().enumerate().map(|(i, p)| pod(&c, *p, i as u64 + 1)).collect();
        c.replace(objs, 100);
        for (i, (p, ty)) in changes.iter().enumerate() {
            let ty = [EventType::Added, EventType::Modified, EventType::Deleted][*ty];
            c.apply(ty, pod(&c, *p, 101 + i as u64));
        }
        let f = make_filter(&c, filter);
        let now = c.snapshot();
        let old = c.snapshot_at(now.rv.saturating_sub(back as u64).max(100)).unwrap();
        for snap in [&now, &old] {
            prop_assert_eq!(pages(&c, snap, &f, limit, true), pages(&c, snap, &f, limit, false));
        }
    }
}

#[test]
fn an_equality_on_an_indexed_field_uses_the_index() {
    let c = pods();
    c.replace(
        (0..3)
            .map(|i| pod(&c, (0, i, i + 1, true, 1, 1), 1 + i as u64))
            .collect(),
        10,
    );
    let snap = c.snapshot();
    let f = Filter {
        field: FieldSelector::parse("spec.nodeName=n2").unwrap(),
        ..Filter::default()
    };
    let cands = indexed(&c, &snap, &f).expect("indexed");
    assert_eq!(cands.len(), 1);
    let f = Filter {
        field: FieldSelector::parse("spec.nodeName!=n2").unwrap(),
        ..Filter::default()
    };
    assert!(indexed(&c, &snap, &f).is_none());
}

/// Objects of assorted sizes, some larger than a whole chunk: the streamed body is the whole
/// list, and a chunk ends before an item that would overflow its buffer rather than growing
/// it (only a chunk of one oversized item is larger than a buffer).
#[test]
fn a_streamed_list_ends_each_chunk_before_an_item_that_does_not_fit() {
    let info = ResourceInfo::core_v1("configmaps", "ConfigMap");
    let sizes = [
        10, 3_000, 40_000, 70_000, 500, 65_000, 200_000, 1, 16_000, 30_000,
    ];
    let mut objects = ObjectMap::new();
    let mut items = Vec::new();
    for i in 0..60 {
        let data = "x".repeat(sizes[i % sizes.len()]);
        let raw = format!(
            r#"{{"metadata":{{"name":"cm{i:03}","namespace":"ns","resourceVersion":"{}"}},"data":{{"k":"{data}"}}}}"#,
            i + 1
        );
        let o = Object::from_upstream(&info, Bytes::from(raw), false).unwrap();
        let mut item = Vec::new();
        o.write_item(&mut item);
        items.push(item);
        let o = Arc::new(o);
        objects.insert(Key::of(&o), o);
    }
    let head = list_head(&info, 60, None, None);
    let tail = list_tail(&info, 60, None, None);
    let mut cursor = ListCursor {
        objects,
        next: (Bound::Unbounded, Bound::Unbounded),
        filter: Filter::default(),
        first: true,
        head: Some(head.clone()),
        tail: Some(tail.clone()),
        empty: None,
    };
    let mut body = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = cursor.next_chunk() {
        chunks += 1;
        let one_oversized_item = items
            .iter()
            .any(|i| i.len() + 2 >= chunk.len() && i.len() > CHUNK);
        assert!(
            chunk.len() <= CHUNK + chunk_pool::MARGIN || one_oversized_item,
            "a chunk of {} bytes grew its buffer",
            chunk.len()
        );
        body.extend_from_slice(&chunk);
    }
    let joined: Vec<&[u8]> = items.iter().map(|i| &i[..]).collect();
    let expected = [head.as_bytes(), &joined.join(&b","[..]), tail.as_bytes()].concat();
    assert!(body == expected, "the chunks make the whole list");
    assert!(chunks >= 20, "{chunks} chunks");
}

/// A page larger than a chunk goes out in several, and together they are the page a client
/// reads: the same bytes as the list's items written whole (JSON), and as the printer's
/// Table of the same objects (kubectl's pages of 500 Pods are ~1.6 MB).
#[tokio::test]
async fn a_page_larger_than_a_chunk_is_the_whole_page() {
    use http_body_util::BodyExt;

    let c = pods();
    let objs: Vec<Object> = (0..1_500)
        .map(|i| {
            pod(
                &c,
                (i % 2, i, i % 4, i % 3 == 0, i % 4, (i % 8) as u8),
                i as u64 + 1,
            )
        })
        .collect();
    c.replace(objs, 2_000);
    let snap = c.snapshot();
    let f = Filter::default();
    let page = || select_with(&c, &snap, &f, None, 1_200, None, TokenForm::Relative);
    let body = |form| {
        let r = render(&c.info, &snap, page(), form);
        assert_eq!(r.status(), StatusCode::OK);
        async { r.into_body().collect().await.unwrap().to_bytes() }
    };

    let p = page();
    assert!(p.token.is_some() && p.remaining == Some(300));
    let items: Vec<Vec<u8>> = p
        .objects
        .iter()
        .map(|o| {
            let mut item = Vec::new();
            o.write_item(&mut item);
            item
        })
        .collect();
    let whole = [
        list_head(&c.info, snap.rv, p.token.as_deref(), p.remaining).as_bytes(),
        &items.join(&b","[..]),
        list_tail(&c.info, snap.rv, p.token.as_deref(), p.remaining).as_bytes(),
    ]
    .concat();
    assert!(whole.len() > 3 * CHUNK, "{} bytes", whole.len());
    let json = body(Form::Json { pretty: false }).await;
    assert!(json == whole, "the JSON page's chunks make the page");

    let defs = Bytes::from_static(
        br#"[{"name":"Name"},{"name":"Ready"},{"name":"Status"},{"name":"Restarts"},{"name":"Age"}]"#,
    );
    let printer = table::Printer::new("", "pods", defs, None);
    let include = table::IncludeObject::Metadata;
    let table = body(Form::Table {
        printer: &printer,
        include,
    })
    .await;
    let rows: Vec<(&[u8], _)> = p.objects.iter().map(|o| (o.raw(), None)).collect();
    let rv = snap.rv.to_string();
    let remaining = p.remaining.map(|r| r as u64);
    let t0 = printer.list_table(
        &rows,
        &rv,
        p.token.as_deref(),
        remaining,
        include,
        SystemTime::now(),
    );
    // The printer's own Table of the same objects, its ages the same (the pods have none).
    assert!(table == t0, "the Table page's chunks make the Table");
    let t: serde_json::Value = serde_json::from_slice(&table).unwrap();
    assert_eq!(t["rows"].as_array().map(Vec::len), Some(1_200));
}
