//! What kcache costs the upstream is visible in its metrics by purpose, and adds up to what
//! the upstream itself served: `kcache_upstream_requests_total{purpose}` summed over purposes
//! equals the sim's own count of the requests it answered, and a passed-through answer's bytes
//! are counted as the caller received them.

mod common;

use common::{get, resource, sample, EnvBuilder};

const PURPOSES: [&str; 8] = [
    "reflector_list",
    "reflector_watch",
    "probe",
    "proof",
    "token_review",
    "access_review",
    "pass_through",
    "setup",
];

/// kcache's upstream requests by purpose, from its own /metrics.
fn by_purpose(metrics: &str, family: &str) -> Vec<(&'static str, f64)> {
    PURPOSES
        .iter()
        .map(|p| {
            let purpose = format!("purpose=\"{p}\"");
            let v = sample(metrics, &[family, &purpose])
                .unwrap_or_else(|| panic!("{family}{{{purpose}}} missing"));
            (*p, v)
        })
        .collect()
}

fn total(metrics: &str) -> f64 {
    by_purpose(metrics, "kcache_upstream_requests_total")
        .iter()
        .map(|(_, v)| v)
        .sum()
}

fn of(metrics: &str, family: &str, purpose: &str) -> f64 {
    by_purpose(metrics, family)
        .into_iter()
        .find(|(p, _)| *p == purpose)
        .map(|(_, v)| v)
        .unwrap()
}

fn sim_total(env: &common::Env) -> f64 {
    let (lists, gets, watches, other) = env.sim.request_counts();
    (lists + gets + watches + other) as f64
}

#[tokio::test]
async fn upstream_requests_and_bytes_are_counted_by_purpose() {
    let env = EnvBuilder::default()
        .resources(vec![resource("", "v1", "configmaps")])
        .start()
        .await;
    // Everything kcache asked the upstream so far (discovery, the first list and watch) is
    // counted, under the purposes that say why. kcache counts a request when it sends it, the
    // sim when it handles it, so the two agree once the reflector's watch has arrived.
    common::wait_until(
        "kcache's count of its upstream requests = the sim's",
        || async { total(&env.metrics().await) == sim_total(&env) },
    )
    .await;
    let m = env.metrics().await;
    assert!(of(&m, "kcache_upstream_requests_total", "setup") >= 1.0);
    assert!(
        of(&m, "kcache_upstream_requests_total", "reflector_list")
            + of(&m, "kcache_upstream_requests_total", "reflector_watch")
            >= 1.0
    );
    assert!(of(&m, "kcache_upstream_received_bytes_total", "setup") > 0.0);

    // A pass-through (namespaces are not cached): one request, its body's bytes.
    let before = env.metrics().await;
    let r = get(&env.url(), "/api/v1/namespaces").await;
    assert_eq!(r.status, 200);
    let after = env.metrics().await;
    let delta =
        |family: &str, purpose: &str| of(&after, family, purpose) - of(&before, family, purpose);
    assert_eq!(delta("kcache_upstream_requests_total", "pass_through"), 1.0);
    assert_eq!(
        delta("kcache_upstream_received_bytes_total", "pass_through"),
        r.body.len() as f64
    );
    assert_eq!(
        delta("kcache_upstream_sent_bytes_total", "pass_through"),
        0.0
    );

    // A consistent GET from the cache: the probe, one one-item list, and nothing else.
    let (lists, gets, _, _) = env.sim.request_counts();
    let r = get(
        &env.url(),
        "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
    )
    .await;
    assert!(r.status == 200 || r.status == 404, "{}", r.text());
    let (lists_after, gets_after, _, _) = env.sim.request_counts();
    let later = env.metrics().await;
    let probes = of(&later, "kcache_upstream_requests_total", "probe")
        - of(&after, "kcache_upstream_requests_total", "probe");
    let forwarded = of(&later, "kcache_upstream_requests_total", "pass_through")
        - of(&after, "kcache_upstream_requests_total", "pass_through");
    assert_eq!(
        (probes, forwarded),
        ((lists_after - lists) as f64, (gets_after - gets) as f64),
        "probes are lists, forwarded reads are GETs"
    );
    assert_eq!(probes + forwarded, 1.0, "one upstream request for one read");
    common::wait_until("the counts agree again", || async {
        total(&env.metrics().await) == sim_total(&env)
    })
    .await;
}
