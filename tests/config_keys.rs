//! Every key of the configuration file is optional at every depth: for every key documented in
//! `config/kcache.yaml` (its commented-out options included) a file holding that key alone
//! parses, validates, is what `kcache config check` accepts, and applies the value; a file with
//! all of them together does too; and the defaults are the ones the example file and
//! `docs/configuration.md` document.
//!
//! The keys are read from the two documents, so a key documented later is covered without
//! editing this test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use kcache::config::{Config, ConfigError};
use yaml_serde::{Mapping, Value};

const EXAMPLE: &str = include_str!("../config/kcache.yaml");
const REFERENCE: &str = include_str!("../docs/configuration.md");

/// Keys of a resource entry the example documents in prose only (no value to uncomment), with
/// a value for each. Every one must be named in the example's comments.
const PROSE_RESOURCE_KEYS: &[(&str, &str)] = &[
    ("labelSelector", "app=web"),
    ("fieldSelector", "metadata.namespace=team-a"),
    (
        "dropAnnotations",
        "[kubectl.kubernetes.io/last-applied-configuration]",
    ),
    ("metadataOnly", "true"),
];

/// Keys the reference says need others to validate ("both or neither", "needs certFile and
/// keyFile"): given alone they parse but are refused by validation, so their one-key file gets
/// these too.
const COMPANIONS: &[(&str, &[&str])] = &[
    ("tls.certFile", &["tls.keyFile"]),
    ("tls.keyFile", &["tls.certFile"]),
    ("tls.clientCAFile", &["tls.certFile", "tls.keyFile"]),
    ("audit.policyFile", &["audit.log.path"]),
    ("audit.log.path", &["audit.policyFile"]),
    (
        "audit.log.maxSizeMB",
        &["audit.policyFile", "audit.log.path"],
    ),
    (
        "audit.log.maxBackups",
        &["audit.policyFile", "audit.log.path"],
    ),
    (
        "audit.log.maxAgeDays",
        &["audit.policyFile", "audit.log.path"],
    ),
    ("audit.bufferSize", &["audit.policyFile", "audit.log.path"]),
    ("audit.forwarded", &["audit.policyFile", "audit.log.path"]),
    ("audit.webhook.kubeconfig", &["audit.policyFile"]),
    (
        "audit.webhook.batchMaxSize",
        &["audit.policyFile", "audit.webhook.kubeconfig"],
    ),
    (
        "audit.webhook.batchMaxWaitSeconds",
        &["audit.policyFile", "audit.webhook.kubeconfig"],
    ),
    (
        "audit.webhook.initialBackoffSeconds",
        &["audit.policyFile", "audit.webhook.kubeconfig"],
    ),
];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Seg {
    Key(String),
    Index(usize),
}

/// One file to load: `key` is the documented key it is about (`cache.persistDir`,
/// `resources[].indexes`), `expect` what the effective configuration must hold.
struct Case {
    key: String,
    doc: Value,
    expect: Vec<(Vec<Seg>, Value)>,
}

/// The example with its commented-out options enabled: a comment line whose text is a YAML
/// `key: value` with a one-word value, a `key:` opening a block, or a list item, at the
/// indentation of the `#`. Prose (`cache: answer from the cache ...`) has more than one word.
fn uncommented_example() -> String {
    let mut out = String::new();
    for line in EXAMPLE.lines() {
        let indent = line.len() - line.trim_start().len();
        let enabled = line
            .trim_start()
            .strip_prefix("# ")
            .filter(|text| is_option(text.trim()));
        match enabled {
            Some(text) => out.push_str(&format!("{}{text}", " ".repeat(indent))),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

fn is_option(text: &str) -> bool {
    let item = text.strip_prefix("- ");
    if item.is_some_and(|t| t.starts_with('{') && t.ends_with('}')) {
        return true;
    }
    let Some((key, rest)) = item.unwrap_or(text).split_once(':') else {
        return false;
    };
    let key_ok = key.starts_with(|c: char| c.is_ascii_lowercase())
        && key.chars().all(|c| c.is_ascii_alphanumeric());
    let value_ok = rest.is_empty()
        || rest
            .strip_prefix(' ')
            .is_some_and(|v| !v.is_empty() && !v.contains(' '));
    key_ok && value_ok
}

fn yaml(text: &str) -> Value {
    yaml_serde::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The uncommented example as YAML, with "(replace the line above)" honoured: a resource entry
/// listed again replaces the earlier one.
fn all_keys() -> Value {
    let mut v = yaml(&uncommented_example());
    let list = v["resources"].as_sequence().unwrap().clone();
    let mut kept: Vec<Value> = Vec::new();
    for item in list {
        let id = |i: &Value| (i.get("group").cloned(), i["resource"].clone());
        kept.retain(|k| id(k) != id(&item));
        kept.push(item);
    }
    v["resources"] = Value::Sequence(kept);
    v
}

/// Every leaf of a mapping with its dotted path (a list is one leaf).
fn leaves(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    for (k, val) in v.as_mapping().unwrap() {
        let path = match prefix {
            "" => k.as_str().unwrap().to_string(),
            p => format!("{p}.{}", k.as_str().unwrap()),
        };
        match val {
            Value::Mapping(m) if !m.is_empty() => leaves(&path, val, out),
            _ => {
                out.insert(path, val.clone());
            }
        }
    }
}

fn segs(path: &str) -> Vec<Seg> {
    path.split('.').map(|s| Seg::Key(s.into())).collect()
}

/// A document holding `value` at the dotted `path`, merged into `doc`.
fn put(doc: &mut Value, path: &str, value: Value) {
    let mut at = doc;
    for key in path.split('.') {
        if !at.is_mapping() {
            *at = Value::Mapping(Mapping::new());
        }
        at = at
            .as_mapping_mut()
            .unwrap()
            .entry(Value::String(key.into()))
            .or_insert(Value::Null);
    }
    *at = value;
}

fn get<'v>(v: &'v Value, path: &[Seg]) -> Option<&'v Value> {
    path.iter().try_fold(v, |v, s| match s {
        Seg::Key(k) => v.get(k.as_str()),
        Seg::Index(i) => v.get(*i),
    })
}

/// Equal as configuration values: numbers by value (`0` and `0.0`), mappings by the keys of
/// `want` (a resource entry's effective form adds `group: ""`).
fn same(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Mapping(g), Value::Mapping(w)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| same(gv, wv))),
        (Value::Sequence(g), Value::Sequence(w)) => {
            g.len() == w.len() && g.iter().zip(w).all(|(a, b)| same(a, b))
        }
        _ => got == want,
    }
}

/// Required keys of a resource entry: the reference's rows whose default is "required".
fn required_resource_keys() -> Vec<String> {
    reference_rows()
        .into_iter()
        .filter(|(_, default)| default == "required")
        .filter_map(|(k, _)| k.strip_prefix("resources[].").map(String::from))
        .collect()
}

/// The rows of the reference's tables of file keys: (key without `[]`, default cell).
fn reference_rows() -> Vec<(String, String)> {
    let start = REFERENCE
        .find("## The configuration file")
        .expect("docs/configuration.md has a section on the file");
    let end = REFERENCE[start..]
        .find("\n## ")
        .map_or(REFERENCE.len(), |e| start + e);
    let mut rows = Vec::new();
    for line in REFERENCE[start..end].lines() {
        let cells: Vec<&str> = line.split(" | ").collect();
        let Some(first) = cells[0].strip_prefix("| ") else {
            continue;
        };
        if cells.len() < 3 || !first.starts_with('`') {
            continue;
        }
        for key in first.split(", ") {
            let key = key.trim_matches('`');
            let key = key.strip_suffix("[]").unwrap_or(key).to_string();
            rows.push((key, cells[1].trim().to_string()));
        }
    }
    assert!(
        rows.len() > 30,
        "no key tables found in docs/configuration.md"
    );
    rows
}

/// One file per documented key, from the example (and its commented options) and the prose
/// keys of a resource entry.
fn cases() -> Vec<Case> {
    let active = yaml(EXAMPLE);
    let all = all_keys();
    let mut all_leaves = BTreeMap::new();
    leaves("", &all, &mut all_leaves);
    let mut cases = Vec::new();
    for (path, value) in &all_leaves {
        if path == "resources" {
            // The list as shown (the default set); its entries one by one below.
            cases.push(Case {
                key: path.clone(),
                doc: {
                    let mut d = Value::Mapping(Mapping::new());
                    put(&mut d, path, active["resources"].clone());
                    d
                },
                expect: vec![(segs(path), active["resources"].clone())],
            });
            continue;
        }
        let mut doc = Value::Mapping(Mapping::new());
        put(&mut doc, path, value.clone());
        for (key, needs) in COMPANIONS {
            if key == path {
                for n in *needs {
                    put(&mut doc, n, all_leaves[*n].clone());
                }
            }
        }
        cases.push(Case {
            key: path.clone(),
            doc,
            expect: vec![(segs(path), value.clone())],
        });
    }
    let required = required_resource_keys();
    assert!(
        !required.is_empty(),
        "the reference names the required keys"
    );
    let mut entries: Vec<Mapping> = all["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|i| i.as_mapping().unwrap().clone())
        .collect();
    for (key, value) in PROSE_RESOURCE_KEYS {
        assert!(
            EXAMPLE.contains(key),
            "{key} is not documented in config/kcache.yaml"
        );
        let mut entry = yaml("{version: v1, resource: pods}")
            .as_mapping()
            .unwrap()
            .clone();
        entry.insert(Value::String((*key).into()), yaml(value));
        entries.push(entry);
    }
    for entry in &entries {
        let base: Mapping = entry
            .iter()
            .filter(|(k, _)| required.iter().any(|r| k.as_str() == Some(r.as_str())))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in entry {
            let mut one = base.clone();
            one.insert(k.clone(), v.clone());
            let key = format!("resources[].{}", k.as_str().unwrap());
            let mut doc = Value::Mapping(Mapping::new());
            put(
                &mut doc,
                "resources",
                Value::Sequence(vec![Value::Mapping(one.clone())]),
            );
            cases.push(Case {
                key,
                doc,
                expect: vec![(
                    vec![Seg::Key("resources".into()), Seg::Index(0)],
                    Value::Mapping(one),
                )],
            });
        }
    }
    cases
}

/// The effective configuration as `kcache config check` prints it.
fn effective(c: &Config) -> Value {
    yaml_serde::to_value(c).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kcache-config-keys-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `kcache config check FILE`: Ok(stdout as YAML) or Err(stderr).
fn config_check(file: &Path) -> Result<Value, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args(["config", "check"])
        .arg(file)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(yaml(&String::from_utf8(out.stdout).unwrap()))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn error_text(e: &ConfigError) -> String {
    kcache::error::Report(e).to_string()
}

/// Load `doc` as a file the way `serve --config` and `config check` do; a list of what is wrong.
fn check(dir: &Path, n: usize, case: &Case) -> Vec<String> {
    let text = yaml_serde::to_string(&case.doc).unwrap();
    let mut wrong = Vec::new();
    let file = dir.join(format!("{n}.yaml"));
    std::fs::write(&file, &text).unwrap();
    let config = match Config::load(&file) {
        Ok(c) => c,
        Err(e) => return vec![format!("{}: {} in\n{text}", case.key, error_text(&e))],
    };
    let got = effective(&config);
    for (path, want) in &case.expect {
        match get(&got, path) {
            Some(g) if same(g, want) => {}
            g => wrong.push(format!(
                "{}: not applied: {path:?} is {g:?}, want {want:?}",
                case.key
            )),
        }
    }
    match config_check(&file) {
        Ok(printed) if printed == got => {}
        Ok(printed) => wrong.push(format!(
            "{}: `kcache config check` printed {printed:?}, not {got:?}",
            case.key
        )),
        Err(e) => wrong.push(format!("{}: `kcache config check` failed: {e}", case.key)),
    }
    wrong
}

/// The files of the report: one key of a section, the section's other keys left out.
#[test]
fn a_section_given_in_part_takes_its_other_keys_from_the_defaults() {
    let d = effective(&Config::default());
    let c = Config::parse("cache: {persistDir: /var/lib/kcache}\n").unwrap();
    assert_eq!(
        c.cache.persist_dir.as_deref(),
        Some(Path::new("/var/lib/kcache"))
    );
    assert_eq!(
        effective(&c)["cache"]["historyWindowSeconds"],
        d["cache"]["historyWindowSeconds"]
    );
    let c = Config::parse("watch: {bookmarkIntervalSeconds: 30}\n").unwrap();
    assert_eq!(c.watch.bookmark_interval_seconds, 30);
    assert_eq!(c.rv_wait(), Config::default().rv_wait());
    for text in [
        "upstream: {pageSize: 100}",
        "upstream: {streamingList: never}",
        "consistentReads: {source: upstream}",
        "consistentReads: {onTimeout: error}",
        "consistentReads: {waitSeconds: 1}",
        "cache: {}",
        "watch: {}",
        "upstream: {}",
        "consistentReads: {}",
        "staleness: {}",
        "tls: {}",
        "auth: {}",
        "limits: {}",
    ] {
        Config::parse(text).unwrap_or_else(|e| panic!("{text}: {}", error_text(&e)));
    }
}

/// The bug's reproduction: each documented key alone.
#[test]
fn every_documented_key_may_be_given_alone() {
    let cases = cases();
    let dir = scratch("alone");
    let mut wrong = Vec::new();
    for (n, case) in cases.iter().enumerate() {
        // Parsing alone, without the companions validation wants.
        let mut alone = Value::Mapping(Mapping::new());
        for (path, value) in &case.expect {
            if let [Seg::Key(k), Seg::Index(0)] = path.as_slice() {
                put(&mut alone, k, Value::Sequence(vec![value.clone()]));
            } else {
                let dotted: Vec<&str> = path
                    .iter()
                    .map(|s| match s {
                        Seg::Key(k) => k.as_str(),
                        Seg::Index(_) => unreachable!(),
                    })
                    .collect();
                put(&mut alone, &dotted.join("."), value.clone());
            }
        }
        let text = yaml_serde::to_string(&alone).unwrap();
        if let Err(e) = yaml_serde::from_str::<Config>(&text) {
            wrong.push(format!("{}: {e} in\n{text}", case.key));
            continue;
        }
        wrong.extend(check(&dir, n, case));
    }
    std::fs::remove_dir_all(&dir).ok();
    let keys: BTreeSet<&str> = cases.iter().map(|c| c.key.as_str()).collect();
    eprintln!("{} keys, {} files", keys.len(), cases.len());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every documented key together: the example with its commented options enabled.
#[test]
fn all_documented_keys_together() {
    let all = all_keys();
    let dir = scratch("all");
    let mut expect = Vec::new();
    let mut flat = BTreeMap::new();
    leaves("", &all, &mut flat);
    for (path, value) in flat {
        expect.push((segs(&path), value));
    }
    let wrong = check(
        &dir,
        0,
        &Case {
            key: "all keys".into(),
            doc: all.clone(),
            expect,
        },
    );
    std::fs::remove_dir_all(&dir).ok();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The example and the reference document the same keys, and every key kcache prints is
/// documented.
#[test]
fn the_example_and_the_reference_document_the_same_keys() {
    let documented: BTreeSet<String> = reference_rows().into_iter().map(|(k, _)| k).collect();
    let covered: BTreeSet<String> = cases().into_iter().map(|c| c.key).collect();
    let missing: Vec<_> = documented.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "in docs/configuration.md, not in config/kcache.yaml (nor PROSE_RESOURCE_KEYS): {missing:?}"
    );
    let undocumented: Vec<_> = covered.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "in config/kcache.yaml, not in docs/configuration.md: {undocumented:?}"
    );
    let printed = effective(&Config::parse(&yaml_serde::to_string(&all_keys()).unwrap()).unwrap());
    let mut keys = BTreeMap::new();
    leaves("", &printed, &mut keys);
    let mut printed_keys: BTreeSet<String> = keys.into_keys().collect();
    for entry in printed["resources"].as_sequence().unwrap() {
        for k in entry.as_mapping().unwrap().keys() {
            printed_keys.insert(format!("resources[].{}", k.as_str().unwrap()));
        }
    }
    let undocumented: Vec<_> = printed_keys.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "printed by `kcache config check`, not in docs/configuration.md: {undocumented:?}"
    );
}

/// An empty file, the example file (its values are the defaults) and each of its keys alone
/// give the same configuration, whose values are the reference's defaults.
#[test]
fn an_empty_file_has_the_documented_defaults() {
    let empty = effective(&Config::parse("{}").unwrap());
    assert_eq!(empty, effective(&Config::default()));
    assert_eq!(empty, effective(&Config::parse(EXAMPLE).unwrap()));
    let mut shown = BTreeMap::new();
    leaves("", &yaml(EXAMPLE), &mut shown);
    let mut wrong = Vec::new();
    for (path, value) in &shown {
        let mut doc = Value::Mapping(Mapping::new());
        put(&mut doc, path, value.clone());
        let text = yaml_serde::to_string(&doc).unwrap();
        match Config::parse(&text) {
            Ok(c) if effective(&c) == empty => {}
            Ok(c) => wrong.push(format!(
                "{path}: {value:?} is shown as the default, but alone gives {:?}",
                get(&effective(&c), &segs(path))
            )),
            Err(e) => wrong.push(format!("{path}: {}", error_text(&e))),
        }
    }
    // A plain resource entry, for the defaults of an entry's keys.
    let entry = effective(&Config::parse("resources: [{version: v1, resource: pods}]").unwrap())
        ["resources"][0]
        .clone();
    for (key, default) in reference_rows() {
        // The audit section is absent by default: its keys' defaults are those of the section
        // once given.
        let audit_default;
        let got = match (key.strip_prefix("resources[]."), key.strip_prefix("audit.")) {
            (Some(k), _) => entry.get(k),
            (None, Some(k)) => {
                audit_default = audit_defaults();
                get(&audit_default, &segs(k))
            }
            (None, None) => get(&empty, &segs(&key)),
        };
        if let Some(literal) = default.strip_prefix('`') {
            let literal = &literal[..literal.find('`').unwrap()];
            let want = yaml(literal);
            // A resource entry leaves out keys at their zero value.
            let left_out = got.is_none()
                && key.starts_with("resources[].")
                && matches!(&want, Value::Bool(false));
            if !left_out && !got.is_some_and(|g| same(g, &want)) {
                wrong.push(format!(
                    "{key}: docs/configuration.md says {literal}, the code {got:?}"
                ));
            }
        } else if default.starts_with("none") && got.is_some_and(|g| !is_empty(g)) {
            wrong.push(format!(
                "{key}: docs/configuration.md says {default}, the code {got:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The `audit` section as given with nothing but a log and a webhook: every other key at its
/// default.
fn audit_defaults() -> Value {
    let mut v = yaml_serde::to_value(kcache_audit::AuditConfig::default()).unwrap();
    v["log"] = yaml_serde::to_value(kcache_audit::LogConfig::default()).unwrap();
    v["webhook"] = yaml_serde::to_value(kcache_audit::WebhookConfig::default()).unwrap();
    v
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        _ => false,
    }
}

/// The one-key files are refused for the documented reason when a companion is missing, never
/// as a parse error.
#[test]
fn keys_with_companions_are_refused_alone_by_validation() {
    let all = all_keys();
    let mut flat = BTreeMap::new();
    leaves("", &all, &mut flat);
    for (key, _) in COMPANIONS {
        let mut doc = Value::Mapping(Mapping::new());
        put(&mut doc, key, flat[*key].clone());
        let text = yaml_serde::to_string(&doc).unwrap();
        match Config::parse(&text) {
            Err(ConfigError::Invalid { field, .. }) => {
                assert!(
                    field.starts_with("tls.") || field == "audit",
                    "{key}: {field}"
                )
            }
            other => panic!("{key}: {other:?}"),
        }
    }
}

/// `config/auto.yaml`, the example with on-demand caching on, is a configuration kcache
/// accepts as it is, and says what it is about.
#[test]
fn the_auto_example_is_a_valid_configuration() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/auto.yaml");
    let config = Config::load(&path).unwrap_or_else(|e| panic!("{}", error_text(&e)));
    assert!(config.auto.enabled);
    assert!(!config.auto.admits("", "secrets"));
    assert!(!config.resources.is_empty());
    config_check(&path).expect("kcache config check accepts it");
}
