//! Downstream clients that follow kcache the way client-go's reflector does, and the
//! upstream's state to compare them with: the fault tests end with every mirror equal to the
//! upstream (no missing, extra, stale or reordered object).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::{get, Watch};

/// What a client-go-style reflector holds: key → resourceVersion.
pub type View = BTreeMap<String, String>;

/// How a mirror starts (and starts again after a 410).
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// LIST at resourceVersion=0, then watch from the list's RV (client-go's reflector).
    List,
    /// LIST at resourceVersion=0, wait, then watch from that by then older RV: the watch
    /// resumes from kcache's history.
    ListThenLateWatch(Duration),
    /// WATCH at resourceVersion=0: initial ADDED events and the end bookmark, then live events.
    WatchFromZero,
    /// WatchList from a recent RV (sendInitialEvents, resourceVersionMatch=NotOlderThan);
    /// after a 410 from the last RV the mirror had.
    WatchList(u64),
}

#[derive(Default)]
pub struct MirrorState {
    pub view: View,
    pub last_rv: u64,
    /// Times the mirror (re)started from a list or initial events.
    pub starts: usize,
    /// Order violations seen (must stay empty).
    pub violations: Vec<String>,
    /// Live events applied.
    pub events: usize,
}

pub type Mirror = Arc<Mutex<MirrorState>>;

pub fn key(o: &Value) -> String {
    let m = &o["metadata"];
    format!(
        "{}/{}",
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or("")
    )
}

pub fn rv_of(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn is_end_bookmark(o: &Value) -> bool {
    o["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
}

/// A mirror with client-go's classic start: list at RV=0, then watch.
pub fn spawn_mirror(base: String, collection: String, selector: String) -> Mirror {
    spawn_mirror_with(base, collection, selector, Start::List)
}

/// A downstream client that starts as `start` says, re-watches from its last RV when a
/// stream ends, and starts again on a 410 — what client-go's reflector does.
pub fn spawn_mirror_with(
    base: String,
    collection: String,
    selector: String,
    start: Start,
) -> Mirror {
    spawn_mirror_opts(
        base,
        collection,
        selector,
        MirrorOpts {
            start,
            ..MirrorOpts::default()
        },
    )
}

/// How a mirror talks to kcache beyond its start.
pub struct MirrorOpts {
    pub start: Start,
    /// The watch's Accept header (JSON when None): a PartialObjectMetadata or Table watch
    /// is followed by the same key and RV as a JSON one.
    pub accept: Option<&'static str>,
    /// While this reads false the mirror stops reading its stream (a slow client whose
    /// connection fills up), and resumes when it turns true.
    pub gate: Option<tokio::sync::watch::Receiver<bool>>,
    /// Each watch's `timeoutSeconds`: short, so mirrors re-watch (resume) often; long enough
    /// for the initial events of the collection to arrive.
    pub timeout_seconds: u32,
    /// Watch over HTTP/2 (h2c, prior knowledge), as client-go does, instead of HTTP/1.1.
    pub http2: bool,
}

impl Default for MirrorOpts {
    fn default() -> Self {
        MirrorOpts {
            start: Start::List,
            accept: None,
            gate: None,
            timeout_seconds: 3,
            http2: false,
        }
    }
}

/// The object a watch event is about: Table events carry it as the one row's object.
fn subject(obj: &Value) -> &Value {
    if obj["kind"] == "Table" {
        &obj["rows"][0]["object"]
    } else {
        obj
    }
}

/// A mirror with every option; see [`spawn_mirror_with`].
pub fn spawn_mirror_opts(
    base: String,
    collection: String,
    selector: String,
    opts: MirrorOpts,
) -> Mirror {
    let MirrorOpts {
        start,
        accept,
        mut gate,
        timeout_seconds,
        http2,
    } = opts;
    let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
    let state = Arc::new(Mutex::new(MirrorState::default()));
    let st = state.clone();
    tokio::spawn(async move {
        let sel = if selector.is_empty() {
            String::new()
        } else {
            format!("&{selector}")
        };
        let mut first = true;
        'restart: loop {
            // Initial events pending until the end bookmark, for the watch-started modes.
            let mut initial: Option<View> = None;
            match start {
                Start::List | Start::ListThenLateWatch(_) => {
                    let list = get(&base, &format!("{collection}?resourceVersion=0{sel}")).await;
                    if list.status != 200 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    let list = list.json();
                    {
                        let mut s = st.lock().unwrap();
                        s.view = list["items"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|o| (key(o), rv_of(o).to_string()))
                            .collect();
                        s.last_rv = list["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap()
                            .parse()
                            .unwrap();
                        s.starts += 1;
                    }
                    if let Start::ListThenLateWatch(d) = start {
                        tokio::time::sleep(d).await;
                    }
                }
                Start::WatchFromZero | Start::WatchList(_) => initial = Some(View::new()),
            }
            loop {
                let last_rv = st.lock().unwrap().last_rv;
                let query = match (start, initial.is_some()) {
                    (Start::WatchFromZero, true) => "resourceVersion=0".to_string(),
                    (Start::WatchList(recent), true) => format!(
                        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={}",
                        if first { recent } else { last_rv }
                    ),
                    _ => format!("resourceVersion={last_rv}"),
                };
                let path = format!("{collection}?watch=1&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}&{query}{sel}");
                let mut w = if http2 {
                    Watch::open_h2_with(&base, &path, &headers).await
                } else {
                    Watch::open_with(&base, &path, &headers).await
                };
                if w.status != 200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                if initial.is_some() {
                    // A stream that ended before its end bookmark starts over.
                    initial = Some(View::new());
                }
                loop {
                    if let Some(g) = &mut gate {
                        let _ = g.wait_for(|open| *open).await;
                    }
                    let Some(ev) = w.next_json(Duration::from_secs(10)).await else {
                        break;
                    };
                    let ty = ev["type"].as_str().unwrap_or("").to_string();
                    let obj = if ty == "ERROR" {
                        &ev["object"]
                    } else {
                        subject(&ev["object"])
                    };
                    if ty == "ERROR" {
                        if obj["code"] == 410 {
                            continue 'restart;
                        }
                        // 504 "Too large resource version" and the like: try again.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        break;
                    }
                    let rv = rv_of(obj);
                    let mut s = st.lock().unwrap();
                    if let Some(pending) = &mut initial {
                        match ty.as_str() {
                            "ADDED" => {
                                pending.insert(key(obj), rv.to_string());
                            }
                            "BOOKMARK" if is_end_bookmark(obj) => {
                                s.view = std::mem::take(pending);
                                s.last_rv = rv;
                                s.starts += 1;
                                first = false;
                                initial = None;
                            }
                            "BOOKMARK" => {}
                            other => panic!("{other} event among the initial events: {ev}"),
                        }
                        continue;
                    }
                    // Made-up deletes after an upstream relist may share the relist's RV.
                    if rv < s.last_rv || (rv == s.last_rv && ty != "DELETED" && ty != "BOOKMARK") {
                        let msg = format!("{ty} {} at rv {rv} after rv {}", key(obj), s.last_rv);
                        s.violations.push(msg);
                    }
                    s.last_rv = s.last_rv.max(rv);
                    match ty.as_str() {
                        "ADDED" | "MODIFIED" => {
                            s.view.insert(key(obj), rv.to_string());
                            s.events += 1;
                        }
                        "DELETED" => {
                            s.view.remove(&key(obj));
                            s.events += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
    });
    state
}

/// What the sim holds, filtered like a watcher's selector.
pub fn upstream_view(sim: &kcache_sim::Sim, resource: &str, keep: &dyn Fn(&Value) -> bool) -> View {
    sim.list("", resource)
        .iter()
        .filter(|o| keep(o))
        .map(|o| (key(o), rv_of(o).to_string()))
        .collect()
}

/// What kcache's own cache of a resource holds.
pub fn cache_view(cache: &kcache::cache::ResourceCache) -> View {
    cache
        .snapshot()
        .objects
        .values()
        .map(|o| (format!("{}/{}", o.namespace(), o.name()), o.rv.to_string()))
        .collect()
}

/// Wait until the mirror equals `want` (re-evaluated each time), at most `within`; panics with
/// the differences otherwise, or at once on an order violation.
pub async fn converge_within(
    name: &str,
    mirror: &Mirror,
    within: Duration,
    want: &dyn Fn() -> View,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let want = want();
        {
            let s = mirror.lock().unwrap();
            assert!(
                s.violations.is_empty(),
                "{name}: out of order: {:?}",
                s.violations
            );
            if s.view == want {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                let missing: Vec<_> = want
                    .iter()
                    .filter(|(k, v)| s.view.get(*k) != Some(v))
                    .take(5)
                    .collect();
                let extra: Vec<_> = s
                    .view
                    .iter()
                    .filter(|(k, v)| want.get(*k) != Some(v))
                    .take(5)
                    .collect();
                panic!(
                    "{name}: view differs from upstream; missing/stale {missing:?}; extra/stale {extra:?} \
                     ({} vs {} objects, {} starts, {} events, last rv {})",
                    s.view.len(),
                    want.len(),
                    s.starts,
                    s.events,
                    s.last_rv
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn converge(name: &str, mirror: &Mirror, want: &dyn Fn() -> View) {
    converge_within(name, mirror, Duration::from_secs(30), want).await
}

/// kube-runtime's watcher and reflector store over every ConfigMap at `base`, as a real
/// client: the store once it is ready, and the task driving it (abort it at the end).
pub async fn kube_runtime_configmaps(
    base: &str,
) -> (
    kube_runtime::reflector::Store<k8s_openapi::api::core::v1::ConfigMap>,
    tokio::task::JoinHandle<()>,
) {
    use futures::StreamExt;
    use kube_runtime::{reflector, watcher, WatchStreamExt};
    let client =
        kube_client::Client::try_from(kube_client::Config::new(base.parse().expect("url")))
            .expect("client");
    let api: kube_client::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube_client::Api::all(client);
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(api, watcher::Config::default().any_semantic()),
    )
    .applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = stream.boxed();
        while stream.next().await.is_some() {}
    });
    tokio::time::timeout(Duration::from_secs(60), reader.wait_until_ready())
        .await
        .expect("kube-runtime store ready in time")
        .expect("kube-runtime store");
    (reader, task)
}

/// What a kube-runtime reflector store holds (whole objects or their metadata): key →
/// resourceVersion.
pub fn store_view<K>(store: &kube_runtime::reflector::Store<K>) -> View
where
    K: kube_client::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .iter()
        .map(|c| {
            let m = c.meta();
            (
                format!(
                    "{}/{}",
                    m.namespace.as_deref().unwrap_or(""),
                    m.name.as_deref().unwrap_or("")
                ),
                m.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}
