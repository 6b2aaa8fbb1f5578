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
    out.push_str(&process_metrics());
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

/// The process collector's two families that say what the apiserver costs, CPU time and
/// resident memory, in its form (tests/fixtures/kube-apiserver-v1.34/metrics-process.txt):
/// read from `/proc/self`, so they are this process's. A sim run as a process of its own
/// (`kcache sim`) is then measured as an apiserver is; an in-process sim reports the whole
/// process it runs in, test and clients included. Left out where `/proc` is not there.
fn process_metrics() -> String {
    let Some((cpu, rss)) = process_use() else {
        return String::new();
    };
    format!(
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
         # TYPE process_cpu_seconds_total counter\n\
         process_cpu_seconds_total {}\n\
         # HELP process_resident_memory_bytes Resident memory size in bytes.\n\
         # TYPE process_resident_memory_bytes gauge\n\
         process_resident_memory_bytes {}\n",
        go_float(cpu),
        go_float(rss)
    )
}

/// This process's CPU seconds (user and system) and resident bytes.
fn process_use() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command name, which may hold spaces, in parentheses: utime and stime are the
    // 12th and 13th fields from there, in clock ticks (USER_HZ: 100 on Linux, as Go's
    // process collector also takes it).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<f64>()
        .ok()?;
    Some((ticks / 100.0, rss_kb * 1024.0))
}

/// A number as the Prometheus Go client writes one (`strconv.FormatFloat(v, 'g', -1, 64)`):
/// the shortest digits, in exponent form from 1e+06 up (`2.8510208e+08`) and below 1e-04.
fn go_float(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let exp = v.abs().log10().floor() as i32;
    if (-4..6).contains(&exp) {
        return format!("{v}");
    }
    // Rust's `{:e}` is shortest too: `2.8510208e8`; Go signs the exponent and gives it two
    // digits at least.
    let e = format!("{v:e}");
    let (mantissa, exponent) = e.split_once('e').unwrap_or((&e, "0"));
    let n: i32 = exponent.parse().unwrap_or(0);
    let sign = if n < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", n.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_the_go_client_writes_them() {
        assert_eq!(go_float(2.15), "2.15");
        assert_eq!(go_float(284_971_008.0), "2.84971008e+08");
        assert_eq!(go_float(285_102_080.0), "2.8510208e+08");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(999_999.0), "999999");
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(0.00001), "1e-05");
    }

    /// The process families, in the recorded form: the same lines but for the figures.
    #[test]
    fn the_process_figures_are_in_the_recorded_form() {
        let recorded =
            include_str!("../../../tests/fixtures/kube-apiserver-v1.34/metrics-process.txt");
        let ours = process_metrics();
        let shape = |text: &str| -> Vec<String> {
            text.lines()
                .map(|l| match l.starts_with('#') {
                    true => l.to_string(),
                    false => l.split(' ').next().unwrap_or_default().to_string(),
                })
                .collect()
        };
        assert_eq!(shape(&ours), shape(recorded));
        // A process that has not yet used a clock tick (10 ms) of CPU reports 0 seconds; every
        // process has memory.
        for line in ours.lines().filter(|l| !l.starts_with('#')) {
            let (family, value) = line.split_once(' ').unwrap();
            let value: f64 = value.parse().unwrap();
            match family {
                "process_resident_memory_bytes" => assert!(value > 0.0, "{line}"),
                _ => assert!(value >= 0.0, "{line}"),
            }
        }
    }
}
