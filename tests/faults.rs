//! Upstream faults during churn: dropped watches, 410 storms, 5xx, an apiserver restart with
//! compacted history. Afterwards every downstream watcher's view must equal the upstream's —
//! no missing, extra or stale object — and every watcher must have seen its events in order.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{get, resource, EnvBuilder, Watch};
use kcache::demo::apply_churn;
use kcache::sim::seed::{self, Churn};
use serde_json::Value;

/// What a client-go-style reflector holds: key → resourceVersion.
type View = BTreeMap<String, String>;

#[derive(Default)]
struct MirrorState {
    view: View,
    last_rv: u64,
    relists: usize,
    /// Order violations seen (must stay empty).
    violations: Vec<String>,
}

fn key(o: &Value) -> String {
    let m = &o["metadata"];
    format!(
        "{}/{}",
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or("")
    )
}

fn rv_of(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A downstream client that lists, watches from the list RV, re-watches from its last RV when
/// the stream ends, and relists on a 410 — what client-go's reflector does.
fn spawn_mirror(base: String, collection: String, selector: String) -> Arc<Mutex<MirrorState>> {
    let state = Arc::new(Mutex::new(MirrorState::default()));
    let st = state.clone();
    tokio::spawn(async move {
        let sep = if selector.is_empty() { "" } else { "&" };
        'relist: loop {
            let list = get(
                &base,
                &format!("{collection}?resourceVersion=0{sep}{selector}"),
            )
            .await;
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
                    .map(|o| {
                        (
                            key(o),
                            o["metadata"]["resourceVersion"]
                                .as_str()
                                .unwrap()
                                .to_string(),
                        )
                    })
                    .collect();
                s.last_rv = list["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                s.relists += 1;
            }
            loop {
                let from = st.lock().unwrap().last_rv;
                let mut w = Watch::open(
                    &base,
                    &format!("{collection}?watch=1&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={from}{sep}{selector}"),
                )
                .await;
                if w.status != 200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                while let Some(ev) = w.next_json(Duration::from_secs(10)).await {
                    let ty = ev["type"].as_str().unwrap_or("").to_string();
                    let obj = &ev["object"];
                    let mut s = st.lock().unwrap();
                    if ty == "ERROR" {
                        assert_eq!(obj["code"], 410, "unexpected error event {ev}");
                        drop(s);
                        continue 'relist;
                    }
                    let rv = rv_of(obj);
                    // Made-up deletes after an upstream relist may share the relist's RV.
                    if rv < s.last_rv || (rv == s.last_rv && ty != "DELETED" && ty != "BOOKMARK") {
                        let msg = format!("{ty} {} at rv {rv} after rv {}", key(obj), s.last_rv);
                        s.violations.push(msg);
                    }
                    s.last_rv = s.last_rv.max(rv);
                    match ty.as_str() {
                        "ADDED" | "MODIFIED" => {
                            s.view.insert(key(obj), rv.to_string());
                        }
                        "DELETED" => {
                            s.view.remove(&key(obj));
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
fn upstream_view(sim: &kcache::sim::Sim, resource: &str, keep: &dyn Fn(&Value) -> bool) -> View {
    sim.list("", resource)
        .iter()
        .filter(|o| keep(o))
        .map(|o| {
            (
                key(o),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

async fn converge(name: &str, mirror: &Arc<Mutex<MirrorState>>, want: &dyn Fn() -> View) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
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
                panic!("{name}: view differs from upstream; missing/stale {missing:?}; extra/stale {extra:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run churn while `fault` is injected a few times, then check every mirror. Returns how often
/// kcache relisted its configmaps.
async fn fault_scenario(fault: impl Fn(&kcache::sim::Sim, usize)) -> u64 {
    let seed_objects = seed::demo_cluster(&seed::DemoSpec::default());
    let mut churn = Churn::new(11, &seed_objects);
    let env = EnvBuilder {
        seed: seed_objects,
        ..EnvBuilder::default()
    }
    .resources(vec![
        resource("", "v1", "configmaps"),
        resource("", "v1", "pods"),
    ])
    .start()
    .await;
    let base = env.url();
    let all_cms = spawn_mirror(base.clone(), "/api/v1/configmaps".into(), String::new());
    let front = spawn_mirror(
        base.clone(),
        "/api/v1/namespaces/shop/configmaps".into(),
        "labelSelector=tier%3Dfront".into(),
    );
    let node1 = spawn_mirror(
        base.clone(),
        "/api/v1/pods".into(),
        "fieldSelector=spec.nodeName%3Dnode-1".into(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    for round in 0..6 {
        for _ in 0..40 {
            apply_churn(&env.sim, churn.next_op());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        fault(&env.sim, round);
    }
    for _ in 0..40 {
        apply_churn(&env.sim, churn.next_op());
    }

    let sim = env.sim.clone();
    converge("all configmaps", &all_cms, &|| {
        upstream_view(&sim, "configmaps", &|_| true)
    })
    .await;
    converge("shop tier=front", &front, &|| {
        upstream_view(&sim, "configmaps", &|o| {
            o["metadata"]["namespace"] == "shop" && o["metadata"]["labels"]["tier"] == "front"
        })
    })
    .await;
    converge("pods on node-1", &node1, &|| {
        upstream_view(&sim, "pods", &|o| o["spec"]["nodeName"] == "node-1")
    })
    .await;
    // kcache's own cache equals the upstream too.
    let cache = env.kcache.cache("", "v1", "configmaps").unwrap();
    let cached: View = cache
        .snapshot()
        .objects
        .values()
        .map(|o| (format!("{}/{}", o.namespace(), o.name()), o.rv.to_string()))
        .collect();
    assert_eq!(cached, upstream_view(&env.sim, "configmaps", &|_| true));
    cache.relists()
}

#[tokio::test]
async fn upstream_watch_drops() {
    let relists = fault_scenario(|sim, _| sim.faults().drop_watches()).await;
    assert_eq!(
        relists, 0,
        "a dropped watch resumes from its RV, it does not relist"
    );
}

#[tokio::test]
async fn upstream_410_storm() {
    let relists = fault_scenario(|sim, _| {
        sim.faults().fail_watches_with_410(3);
        sim.faults().drop_watches();
    })
    .await;
    assert!(relists > 0, "a 410 makes kcache relist");
}

#[tokio::test]
async fn upstream_restart_with_compacted_history() {
    fault_scenario(|sim, round| {
        if round % 2 == 0 {
            sim.faults().restart();
        }
    })
    .await;
}

#[tokio::test]
async fn upstream_errors_and_latency() {
    fault_scenario(|sim, round| {
        sim.faults()
            .fail_requests(2, if round % 2 == 0 { 500 } else { 503 });
        sim.faults()
            .set_latency(Duration::from_millis(if round % 2 == 0 { 30 } else { 0 }));
        sim.faults().drop_watches();
    })
    .await;
}
