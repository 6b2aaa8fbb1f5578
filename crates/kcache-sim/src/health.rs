//! The apiserver's own non-resource endpoints: `/livez`, `/readyz`, `/healthz` (each with
//! `?verbose` and `/NAME` for one check) and `/metrics` (Prometheus text format 0.0.4).
//!
//! A proxy in front of the sim must pass these through untouched, so the sim answers them in the
//! apiserver's form: check names as a v1.28 kube-apiserver reports them, `[+]NAME ok` lines,
//! the `NAME check passed` trailer, and a small exposition of apiserver metric families.

use super::profile::Profile;
use super::store::Store;
use super::types::ResourceType;
use http::StatusCode;
use percent_encoding::percent_decode_str;

/// The checks behind `/healthz` and `/livez` of a v1.28 kube-apiserver, in its order.
const HEALTH_CHECKS: &[&str] = &[
    "ping",
    "log",
    "etcd",
    "poststarthook/start-kube-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers",
    "poststarthook/priority-and-fairness-config-consumer",
    "poststarthook/priority-and-fairness-filter",
    "poststarthook/storage-object-count-tracker-hook",
    "poststarthook/start-apiextensions-informers",
    "poststarthook/start-apiextensions-controllers",
    "poststarthook/crd-informer-synced",
    "poststarthook/start-service-ip-repair-controllers",
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/scheduling/bootstrap-system-priority-classes",
    "poststarthook/priority-and-fairness-config-producer",
    "poststarthook/start-system-namespaces-controller",
    "poststarthook/bootstrap-controller",
    "poststarthook/start-cluster-authentication-info-controller",
    "poststarthook/start-kube-apiserver-identity-lease-controller",
    "poststarthook/start-deprecated-kube-apiserver-identity-lease-garbage-collector",
    "poststarthook/start-kube-apiserver-identity-lease-garbage-collector",
    "poststarthook/start-legacy-token-tracking-controller",
    "poststarthook/aggregator-reload-proxy-client-cert",
    "poststarthook/start-kube-aggregator-informers",
    "poststarthook/apiservice-registration-controller",
    "poststarthook/apiservice-status-available-controller",
    "poststarthook/kube-apiserver-autoregistration",
    "autoregister-completion",
    "poststarthook/apiservice-openapi-controller",
    "poststarthook/apiservice-openapiv3-controller",
    "poststarthook/apiservice-discovery-controller",
];

/// `/readyz` has three more: etcd readiness and informer sync after `etcd`, shutdown last.
fn checks(endpoint: &str) -> Vec<&'static str> {
    let mut list: Vec<&'static str> = HEALTH_CHECKS.to_vec();
    if endpoint == "readyz" {
        list.splice(3..3, ["etcd-readiness", "informer-sync"]);
        list.push("shutdown");
    }
    list
}

/// One answer of this module: status, Content-Type, whether the apiserver adds
/// `X-Content-Type-Options: nosniff` (its health handlers do), and the body.
pub struct Answer {
    pub code: StatusCode,
    pub content_type: &'static str,
    pub nosniff: bool,
    pub body: String,
}

/// The answer for `path` if it is one of these endpoints. `query` is the raw query string:
/// `verbose` counts when present, whatever its value, as in the apiserver.
pub fn answer(store: &Store, profile: Profile, path: &str, query: Option<&str>) -> Option<Answer> {
    if path == "/metrics" {
        return Some(Answer {
            code: StatusCode::OK,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            nosniff: false,
            body: metrics(store, profile),
        });
    }
    let rest = path.strip_prefix('/')?;
    let (endpoint, one) = match rest.split_once('/') {
        Some((e, check)) => (e, Some(check)),
        None => (rest, None),
    };
    if !matches!(endpoint, "livez" | "readyz" | "healthz") {
        return None;
    }
    let list = checks(endpoint);
    let text = |body: String| Answer {
        code: StatusCode::OK,
        content_type: "text/plain; charset=utf-8",
        nosniff: true,
        body,
    };
    if let Some(check) = one {
        // `/readyz/NAME`: that check alone; an unknown name is the mux's 404.
        return list.contains(&check).then(|| text("ok".into()));
    }
    let params: Vec<(String, String)> = query
        .map(|q| {
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    let decode = |s: &str| {
                        percent_decode_str(&s.replace('+', " "))
                            .decode_utf8_lossy()
                            .into_owned()
                    };
                    (decode(k), decode(v))
                })
                .collect()
        })
        .unwrap_or_default();
    let verbose = params.iter().any(|(k, _)| k == "verbose");
    if !verbose {
        return Some(text("ok".into()));
    }
    let excluded: Vec<&str> = params
        .iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.as_str())
        .collect();
    let mut body = String::new();
    for check in &list {
        if excluded.contains(check) {
            body.push_str(&format!("[+]{check} excluded: ok\n"));
        } else {
            body.push_str(&format!("[+]{check} ok\n"));
        }
    }
    let unknown: Vec<String> = excluded
        .iter()
        .filter(|e| !list.contains(e))
        .map(|e| format!("{e:?}"))
        .collect();
    if !unknown.is_empty() {
        body.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            unknown.join(",")
        ));
    }
    body.push_str(&format!("{endpoint} check passed\n"));
    Some(text(body))
}

/// A small exposition in the apiserver's form: its build info (a gauge, as the text format
/// has no info type), stored objects per resource, and its priority levels' seats.
fn metrics(store: &Store, profile: Profile) -> String {
    let mut out = String::new();
    out.push_str(
        "# HELP apiserver_storage_objects [STABLE] Number of stored objects at the time of last check split by kind.\n\
         # TYPE apiserver_storage_objects gauge\n",
    );
    let mut types: Vec<std::sync::Arc<ResourceType>> = store.types();
    types.sort_by(|a, b| {
        (a.group.as_str(), a.resource.as_str()).cmp(&(b.group.as_str(), b.resource.as_str()))
    });
    for rt in types {
        let n = store
            .snapshot(&rt.group, &rt.resource)
            .map_or(0, |s| s.objects.len());
        let name = if rt.group.is_empty() {
            rt.resource.clone()
        } else {
            format!("{}.{}", rt.resource, rt.group)
        };
        out.push_str(&format!(
            "apiserver_storage_objects{{resource=\"{name}\"}} {n}\n"
        ));
    }
    out.push_str(
        "# HELP apiserver_flowcontrol_nominal_limit_seats [BETA] Nominal number of execution seats configured for each priority level\n\
         # TYPE apiserver_flowcontrol_nominal_limit_seats gauge\n",
    );
    for (level, seats) in [
        ("catch-all", 13),
        ("exempt", 0),
        ("global-default", 49),
        ("leader-election", 25),
        ("node-high", 98),
        ("system", 74),
        ("workload-high", 98),
        ("workload-low", 245),
    ] {
        out.push_str(&format!(
            "apiserver_flowcontrol_nominal_limit_seats{{priority_level=\"{level}\"}} {seats}\n"
        ));
    }
    out.push_str(
        "# HELP kubernetes_build_info [ALPHA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.\n\
         # TYPE kubernetes_build_info gauge\n",
    );
    let b = profile.build_info();
    out.push_str(&format!(
        "kubernetes_build_info{{build_date=\"{}\",compiler=\"gc\",git_commit=\"{}\",git_tree_state=\"clean\",git_version=\"{}\",go_version=\"{}\",major=\"{}\",minor=\"{}\",platform=\"linux/amd64\"}} 1\n",
        b.build_date, b.git_commit, b.git_version, b.go_version, b.major, b.minor
    ));
    out
}
