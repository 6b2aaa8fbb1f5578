//! kcache's alerting rules (`deploy/prometheus/kcache-rules.yaml`) checked with the real
//! Prometheus tools and against the code: `promtool check rules` and `promtool test rules`
//! (every alert fired by some input series and spared by others), every alert labelled,
//! annotated and linked to its section of docs/runbooks.md, only metrics kcache registers in
//! the expressions, the PrometheusRule of the kustomize component and the Helm chart's copy
//! carrying exactly the same groups, and a real Prometheus server scraping a running kcache
//! with these rules and raising the alert of an upstream made unreachable.
//!
//! promtool and prometheus come from Debian's `prometheus` package; without them these tests
//! print why they skip, unless `KCACHE_TEST_TOOLS=required` (see tests/tools_common).

mod common;
#[path = "metrics_common/mod.rs"]
mod metrics_common;
mod tools_common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{resource, EnvBuilder};
use metrics_common::{known_metric, metric_names};
use tools_common::tool;
use yaml_serde::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

const RULES: &str = "deploy/prometheus/kcache-rules.yaml";
const RULES_TESTS: &str = "deploy/prometheus/kcache-rules.test.yaml";
const KUSTOMIZE_RULE: &str = "deploy/kustomize/prometheusrule/prometheusrule.yaml";
const HELM_RULES: &str = "deploy/helm/kcache/files/kcache-rules.yaml";
const HELM_TEMPLATE: &str = "deploy/helm/kcache/templates/prometheusrule.yaml";
const RUNBOOKS: &str = "docs/runbooks.md";

fn yaml(rel: &str) -> Value {
    yaml_serde::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: invalid YAML: {e}"))
}

fn groups() -> Value {
    yaml(RULES)["groups"].clone()
}

/// Every alerting rule of the rules file.
fn alert_rules() -> Vec<Value> {
    let groups = groups();
    let rules: Vec<Value> = groups
        .as_sequence()
        .expect("groups is a list")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules is a list").clone())
        .collect();
    assert!(
        rules.iter().all(|r| r.get("alert").is_some()),
        "{RULES}: only alerting rules (a recording rule would need a test of its own)"
    );
    rules
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {v:?}"))
}

/// Runs a tool and fails the test with its output unless it succeeds.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

// ---------------------------------------------------------------------------------------------
// promtool

#[test]
fn promtool_accepts_the_rules() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let out = run(Command::new(promtool).args(["check", "rules", RULES]));
    let rules = alert_rules().len();
    assert!(
        out.contains(&format!("SUCCESS: {rules} rules found")),
        "{out}"
    );
}

#[test]
fn the_rules_unit_tests_pass() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let out = run(Command::new(promtool).args(["test", "rules", RULES_TESTS]));
    assert!(out.contains("SUCCESS"), "{out}");
}

/// A test that only ever expects an alert, or only ever its absence, proves half of it.
#[test]
fn every_alert_has_a_firing_and_a_quiet_case() {
    let tests = yaml(RULES_TESTS);
    assert_eq!(
        tests["rule_files"].as_sequence().map(Vec::len),
        Some(1),
        "{RULES_TESTS}: tests one rules file"
    );
    assert_eq!(
        Path::new(RULES_TESTS)
            .parent()
            .unwrap()
            .join(tests["rule_files"][0].as_str().expect("a path")),
        Path::new(RULES)
    );
    // alert → (firing cases, quiet cases)
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for t in tests["tests"].as_sequence().expect("tests is a list") {
        for case in t["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = str_of(case, "alertname").to_string();
            let expected = case["exp_alerts"].as_sequence().map_or(0, Vec::len);
            let entry = cases.entry(name).or_default();
            if expected > 0 {
                entry.0 += 1;
            } else {
                entry.1 += 1;
            }
        }
    }
    let alerts: BTreeSet<String> = alert_rules()
        .iter()
        .map(|r| str_of(r, "alert").to_string())
        .collect();
    for alert in &alerts {
        let (firing, quiet) = cases.get(alert).copied().unwrap_or_default();
        assert!(firing > 0, "{RULES_TESTS}: no case where {alert} fires");
        assert!(
            quiet > 0,
            "{RULES_TESTS}: no case where {alert} must not fire"
        );
    }
    for tested in cases.keys() {
        assert!(
            alerts.contains(tested),
            "{RULES_TESTS}: tests {tested}, which {RULES} does not have"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Labels, annotations and runbooks.

/// GitHub's anchor of a heading made of one word.
fn anchor(heading: &str) -> String {
    heading.to_lowercase()
}

#[test]
fn every_alert_has_a_severity_annotations_and_a_runbook_section() {
    let runbooks = read(RUNBOOKS);
    let sections: Vec<&str> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect();
    let mut names = BTreeSet::new();
    for rule in alert_rules() {
        let name = str_of(&rule, "alert");
        assert!(names.insert(name.to_string()), "{name} is defined twice");
        let severity = str_of(&rule["labels"], "severity");
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity}"
        );
        let annotations = rule["annotations"]
            .as_mapping()
            .unwrap_or_else(|| panic!("{name}: no annotations"));
        let keys: BTreeSet<&str> = annotations.keys().filter_map(Value::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["summary", "description", "runbook_url"]),
            "{name}: annotations"
        );
        assert!(!str_of(&rule["annotations"], "summary").is_empty());
        assert!(!str_of(&rule["annotations"], "description").is_empty());
        assert_eq!(
            str_of(&rule["annotations"], "runbook_url"),
            format!("{RUNBOOKS}#{}", anchor(name)),
            "{name}: runbook_url"
        );
        // The section: its heading, then what it means, how to confirm it, what to do and when
        // to escalate.
        assert!(
            sections.contains(&name),
            "{RUNBOOKS} has no section `## {name}`"
        );
        let start = runbooks.find(&format!("\n## {name}\n")).unwrap();
        let body = &runbooks[start + 1..];
        let body = &body[..body[3..].find("\n## ").map_or(body.len(), |e| e + 3)];
        for part in ["**Meaning.**", "**Confirm.**", "**Act.**", "**Escalate.**"] {
            assert!(body.contains(part), "{RUNBOOKS}, {name}: no {part}");
        }
        if let Some(d) = rule.get("for") {
            let d = d.as_str().expect("`for` is a duration");
            assert!(d.ends_with('m') || d.ends_with('s'), "{name}: for {d}");
        }
    }
    // Every alert section is one of an alert that exists.
    for s in sections.iter().filter(|s| s.starts_with("Kcache")) {
        assert!(
            names.contains(*s),
            "{RUNBOOKS}: section {s}, which is no alert of {RULES}"
        );
    }
    // Linked from the operations guide and the README.
    assert!(read("docs/operations.md").contains("(runbooks.md)"));
    assert!(read("README.md").contains("(docs/runbooks.md)"));
}

/// `up` is the one series the rules read that kcache does not export: Prometheus writes it
/// for every target it scrapes.
const PROMETHEUS_OWN: &[&str] = &["up"];

#[test]
fn the_rules_query_only_metrics_kcache_exports() {
    let mut used = BTreeSet::new();
    for rule in alert_rules() {
        let expr = str_of(&rule, "expr");
        let names = metric_names(expr);
        assert!(!names.is_empty(), "no metric in {expr}");
        for n in names {
            assert!(
                known_metric(&n) || PROMETHEUS_OWN.contains(&n.as_str()),
                "{}: unknown metric {n} in {expr}",
                str_of(&rule, "alert")
            );
            used.insert(n);
        }
    }
    // The failure modes the rules promise to watch.
    for m in [
        "up",
        "kcache_cache_synced",
        "kcache_cache_age_seconds",
        "kcache_upstream_reachable",
        "kcache_relists_total",
        "kcache_watchers_closed_total",
        "kcache_cache_over_budget",
        "kcache_consistent_reads_total",
        "kcache_upstream_errors_total",
        "kcache_requests_total",
        "kcache_authentications_total",
        "kcache_authorizations_total",
        "kcache_tls_handshake_errors_total",
    ] {
        assert!(used.contains(m), "no alert on {m}");
    }
}

// ---------------------------------------------------------------------------------------------
// The copies.

#[test]
fn the_prometheusrule_and_the_helm_chart_carry_the_rules_unchanged() {
    let rule = yaml(KUSTOMIZE_RULE);
    assert_eq!(str_of(&rule, "kind"), "PrometheusRule");
    assert_eq!(str_of(&rule, "apiVersion"), "monitoring.coreos.com/v1");
    assert!(
        rule["spec"]["groups"] == groups(),
        "{KUSTOMIZE_RULE}: its groups differ from {RULES}'s; copy them from there (indented \
         under spec:)"
    );
    let kustomization = read("deploy/kustomize/prometheusrule/kustomization.yaml");
    assert!(kustomization.contains("- prometheusrule.yaml"));

    // The chart reads its copy with .Files.Get, as it is (Helm does not render it, so the
    // rules' own {{ $labels }} stay Prometheus templates).
    assert!(
        read(HELM_RULES) == read(RULES),
        "{HELM_RULES} differs from {RULES}: cp {RULES} {HELM_RULES}"
    );
    let template = read(HELM_TEMPLATE);
    for needle in [
        "{{- if .Values.prometheusRule.enabled }}",
        "kind: PrometheusRule",
        "spec:\n  {{- .Files.Get \"files/kcache-rules.yaml\" | nindent 2 }}",
    ] {
        assert!(template.contains(needle), "{HELM_TEMPLATE}: {needle}");
    }
    let values: Value = yaml("deploy/helm/kcache/values.yaml");
    assert_eq!(
        values["prometheusRule"]["enabled"].as_bool(),
        Some(false),
        "values: prometheusRule.enabled is off by default (it needs the operator's CRDs)"
    );
    // What `nindent 2` makes of the file under `spec:` (every line indented by two) is the
    // rules' groups.
    let indented: Vec<String> = read(HELM_RULES).lines().map(|l| format!("  {l}")).collect();
    let rendered: Value = yaml_serde::from_str(&format!("spec:\n{}", indented.join("\n")))
        .expect("the indented rules file is YAML");
    assert!(rendered["spec"]["groups"] == groups());
    // And the chart packages files/.
    let ignored = read("deploy/helm/kcache/.helmignore");
    assert!(!ignored.lines().any(|l| l.starts_with("files")));
}

// ---------------------------------------------------------------------------------------------
// The tool rule itself: run this binary's own promtool test with the tools hidden.

fn self_test(test: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env_remove(tools_common::REQUIRE_VAR)
        .env(tools_common::TOOLS_PATH_VAR, "");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the test binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_missing_tool_skips_unless_tools_are_required() {
    let (ok, out) = self_test("promtool_accepts_the_rules", &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("skipped: promtool not found (apt-get install prometheus)"),
        "{out}"
    );
    let (ok, out) = self_test(
        "promtool_accepts_the_rules",
        &[(tools_common::REQUIRE_VAR, "required")],
    );
    assert!(
        !ok,
        "a missing tool passed with KCACHE_TEST_TOOLS=required:\n{out}"
    );
    assert!(out.contains("promtool not found"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// A real Prometheus scraping a running kcache.

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "kcache-{what}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (and reaped) on drop, also when the test panics.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nothing listens on now (bound, then released for Prometheus to bind).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The shipped rules with every `for:` at 2 s and every range window at 10 s: the test can
/// not wait the minutes they say. What is tested is that the expressions match what a running
/// kcache exports and the labels and annotations render; the durations are promtool's part.
/// 10 s holds ten scrapes at 1 s, enough for rate() and increase().
fn rules_for_seconds() -> String {
    let mut groups = groups();
    for g in groups.as_sequence_mut().unwrap() {
        for rule in g["rules"].as_sequence_mut().unwrap() {
            let m = rule.as_mapping_mut().unwrap();
            if m.contains_key("for") {
                m.insert("for".into(), "2s".into());
            }
            let expr = m["expr"].as_str().unwrap();
            let mut out = String::new();
            let mut rest = expr;
            while let Some(open) = rest.find('[') {
                let close = open + rest[open..].find(']').expect("a closed range");
                out.push_str(&rest[..open]);
                out.push_str("[10s]");
                rest = &rest[close + 1..];
            }
            out.push_str(rest);
            m.insert("expr".into(), out.into());
        }
    }
    let mut doc = yaml_serde::Mapping::new();
    doc.insert("groups".into(), groups);
    yaml_serde::to_string(&doc).unwrap()
}

fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// GET on Prometheus' HTTP API; None while it does not accept connections yet, or answers
/// 503 because it is still starting (loading its storage: seen on a busy machine).
async fn prom_get(base: &str, path: &str) -> Option<common::Resp> {
    tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .ok()?;
    let r = common::get(base, path).await;
    (r.status != http::StatusCode::SERVICE_UNAVAILABLE).then_some(r)
}

/// How long the test waits for Prometheus to start, scrape, and raise the alert.
const PROMETHEUS_WAIT: Duration = Duration::from_secs(60);

/// Polls `check` every 250 ms until it returns Some; panics after [`PROMETHEUS_WAIT`] with
/// what `last` says Prometheus reported, and its log.
async fn until<T, F, Fut>(what: &str, log: &Path, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + PROMETHEUS_WAIT;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "gave up after {PROMETHEUS_WAIT:?} waiting for {what}; Prometheus last \
                 reported: {last}\nits log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The alerts Prometheus reports as `(name, resource, state, runbook_url)`.
async fn alerts(base: &str) -> Result<Vec<(String, String, String, String)>, String> {
    let r = prom_get(base, "/api/v1/alerts")
        .await
        .ok_or("no connection, or not ready")?;
    let v = r.json();
    let list = v["data"]["alerts"].as_array().ok_or_else(|| r.text())?;
    Ok(list
        .iter()
        .map(|a| {
            let s = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_string();
            let runbook = a["annotations"]["runbook_url"].as_str().unwrap_or_default();
            (
                s("alertname"),
                s("resource"),
                a["state"].as_str().unwrap_or_default().into(),
                runbook.into(),
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_raises_the_alerts_of_an_unreachable_upstream() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let env = EnvBuilder::default()
        .resources(vec![resource("", "v1", "configmaps")])
        .start()
        .await;
    let dir = TempDir::new("prometheus");
    std::fs::write(dir.0.join("rules.yaml"), rules_for_seconds()).unwrap();
    let target = env.admin_url().trim_start_matches("http://").to_string();
    std::fs::write(
        dir.0.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - \
             rules.yaml\nscrape_configs:\n  - job_name: kcache\n    static_configs:\n      - \
             targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let log = dir.0.join("prometheus.log");
    let _prometheus = KillOnDrop(
        Command::new(prometheus)
            .arg(format!(
                "--config.file={}",
                dir.0.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("prometheus starts"),
    );

    // Healthy first: the target scraped, the rules loaded, and no alert about the upstream.
    let up = format!("/api/v1/query?query={}", encode("up{job=\"kcache\"}"));
    until("kcache scraped (up == 1)", &log, || async {
        let r = prom_get(&base, &up)
            .await
            .ok_or("no connection, or not ready")?;
        let v = r.json();
        match v["data"]["result"][0]["value"][1].as_str() {
            Some("1") => Ok(()),
            _ => Err(r.text()),
        }
    })
    .await;
    let loaded = until("the rules loaded", &log, || async {
        let r = prom_get(&base, "/api/v1/rules")
            .await
            .ok_or("no connection, or not ready")?;
        let v = r.json();
        let n: usize = v["data"]["groups"]
            .as_array()
            .map(|g| {
                g.iter()
                    .map(|g| g["rules"].as_array().map_or(0, Vec::len))
                    .sum()
            })
            .unwrap_or(0);
        if n > 0 {
            Ok(n)
        } else {
            Err(r.text())
        }
    })
    .await;
    assert_eq!(loaded, alert_rules().len());
    let before = alerts(&base).await.unwrap();
    assert!(
        !before.iter().any(
            |(name, ..)| name.starts_with("KcacheUpstream") || name == "KcacheStaleReadsServed"
        ),
        "alerts before the fault: {before:?}"
    );

    // The fault: the upstream unreachable. Consistent reads meanwhile are answered stale.
    env.sim.faults().set_unreachable(true);
    let want = ["KcacheUpstreamUnreachable", "KcacheStaleReadsServed"];
    let raised = until("the alerts of an unreachable upstream", &log, || async {
        let r = common::get(&env.url(), "/api/v1/configmaps").await;
        let unconfirmed = r.header("X-Kcache-Unconfirmed").map(str::to_string);
        let now = alerts(&base).await?;
        let found: Vec<_> = want
            .iter()
            .filter_map(|w| {
                now.iter().find(|(name, resource, state, runbook)| {
                    name == w
                        && resource == "configmaps"
                        && (state == "pending" || state == "firing")
                        && *runbook == format!("{RUNBOOKS}#{}", anchor(w))
                })
            })
            .cloned()
            .collect();
        if found.len() == want.len() {
            Ok(found)
        } else {
            Err(format!(
                "{now:?} (a consistent read: {}, X-Kcache-Unconfirmed {unconfirmed:?})",
                r.status
            ))
        }
    })
    .await;
    eprintln!("Prometheus raised {raised:?}");
}
