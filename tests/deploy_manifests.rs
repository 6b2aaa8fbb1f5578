//! The deployment artifacts (Dockerfile, `deploy/`) checked against the code they deploy:
//! every manifest parses and names itself, kustomizations list only files that exist, the RBAC
//! of every kcache pod covers what its configuration caches and how it authenticates callers,
//! kcache containers run a command line the real binary accepts (TLS files included, mounted
//! from the volumes they name), probes and exposure are safe and follow TLS, the image builds
//! with the README's command, the Grafana dashboard queries only metrics kcache exports, and
//! the Helm chart's values and template references resolve. (Rendering the Helm templates needs helm:
//! `deploy/render-check.sh`.)

#[path = "metrics_common/mod.rs"]
mod metrics_common;

use metrics_common::{exported_metrics, known_metric, metric_names};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kcache::config::{Config, ResourceConfig};
use serde::Deserialize;
use yaml_serde::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn rel(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every `.yaml`/`.yml` file under `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The documents of a (multi-document) YAML text; empty documents are skipped.
fn documents_of(text: &str, origin: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|doc| {
            Value::deserialize(doc).unwrap_or_else(|e| panic!("{origin}: invalid YAML: {e}"))
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn documents(path: &Path) -> Vec<Value> {
    documents_of(&read(path), &rel(path))
}

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(v, path).and_then(Value::as_str)
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn seq<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path)
        .and_then(Value::as_sequence)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn strings(v: &Value, path: &[&str]) -> Vec<String> {
    seq(v, path)
        .iter()
        .map(|x| match x {
            Value::String(s) => s.clone(),
            other => yaml_serde::to_string(other).unwrap().trim().to_string(),
        })
        .collect()
}

fn kind(v: &Value) -> &str {
    s(v, &["kind"]).unwrap_or("")
}

fn name(v: &Value) -> &str {
    s(v, &["metadata", "name"]).unwrap_or("")
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_mapping)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => yaml_serde::to_string(other).unwrap().trim().to_string(),
                    };
                    (k.as_str().unwrap_or_default().to_string(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `selector` (a label map) selects a pod with `labels` when each of its pairs is there.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

// ---------------------------------------------------------------------------------------------
// Manifest sets: a kustomization (with its bases) or one example file.

const KUSTOMIZATION: &str = "kustomization.yaml";

/// What one `kubectl apply -k DIR` or `kubectl apply -f FILE` creates.
#[derive(Default)]
struct ManifestSet {
    origin: String,
    /// (file, document) of every object.
    objects: Vec<(String, Value)>,
    /// ConfigMap name → key → text: generated ones and those among the objects.
    config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// The namespace a kustomization puts objects in.
    namespace: Option<String>,
}

impl ManifestSet {
    fn from_file(path: &Path) -> ManifestSet {
        let mut set = ManifestSet {
            origin: rel(path),
            ..ManifestSet::default()
        };
        for doc in documents(path) {
            set.add(rel(path), doc);
        }
        set
    }

    fn add(&mut self, file: String, doc: Value) {
        if kind(&doc) == "ConfigMap" {
            let data = string_map(doc.get("data"));
            self.config_maps.insert(name(&doc).to_string(), data);
        }
        self.objects.push((file, doc));
    }

    /// A kustomization directory, its resources (files and directories) followed.
    fn from_kustomization(dir: &Path) -> ManifestSet {
        let k = kustomization(dir);
        let mut set = ManifestSet {
            origin: rel(dir),
            namespace: s(&k, &["namespace"]).map(str::to_string),
            ..ManifestSet::default()
        };
        for r in strings(&k, &["resources"]) {
            let path = dir.join(&r);
            if path.is_dir() {
                let base = ManifestSet::from_kustomization(&path);
                set.namespace = set.namespace.or(base.namespace);
                set.objects.extend(base.objects);
                set.config_maps.extend(base.config_maps);
            } else {
                for doc in documents(&path) {
                    set.add(rel(&path), doc);
                }
            }
        }
        for (cm, files) in generator_files(&k) {
            let data = files
                .into_iter()
                .map(|(key, file)| (key, read(&dir.join(file))))
                .collect();
            set.config_maps.insert(cm, data);
        }
        set
    }

    fn of_kind<'a>(&'a self, k: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects
            .iter()
            .map(|(_, d)| d)
            .filter(move |d| kind(d) == k)
    }

    fn namespace_of(&self, doc: &Value) -> String {
        self.namespace
            .clone()
            .or_else(|| s(doc, &["metadata", "namespace"]).map(str::to_string))
            .unwrap_or_else(|| "default".into())
    }

    /// Every (workload, pod spec, pod labels) of Deployments and Pods.
    fn pods(&self) -> Vec<(&Value, &Value, BTreeMap<String, String>)> {
        let mut out = Vec::new();
        for (_, d) in &self.objects {
            let (spec, labels) = match kind(d) {
                "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => (
                    get(d, &["spec", "template", "spec"]),
                    get(d, &["spec", "template", "metadata", "labels"]),
                ),
                "Pod" => (d.get("spec"), get(d, &["metadata", "labels"])),
                _ => continue,
            };
            let spec =
                spec.unwrap_or_else(|| panic!("{}: {} has no pod spec", self.origin, name(d)));
            out.push((d, spec, string_map(labels)));
        }
        out
    }
}

fn kustomization(dir: &Path) -> Value {
    let path = dir.join(KUSTOMIZATION);
    let docs = documents(&path);
    assert_eq!(docs.len(), 1, "{}: one document", rel(&path));
    docs.into_iter().next().unwrap()
}

/// configMapGenerator entries: ConfigMap name → [(key, file)].
fn generator_files(k: &Value) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    for g in seq(k, &["configMapGenerator"]) {
        let cm = s(g, &["name"]).expect("configMapGenerator entry without a name");
        let files = strings(g, &["files"])
            .into_iter()
            .map(|f| match f.split_once('=') {
                Some((key, file)) => (key.to_string(), file.to_string()),
                None => {
                    let key = Path::new(&f).file_name().unwrap().to_string_lossy();
                    (key.to_string(), f.clone())
                }
            })
            .collect();
        out.insert(cm.to_string(), files);
    }
    out
}

fn kustomization_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = yaml_files(&root().join("deploy/kustomize"))
        .into_iter()
        .filter(|p| p.file_name().unwrap() == KUSTOMIZATION)
        .map(|p| p.parent().unwrap().to_path_buf())
        .collect();
    dirs.sort();
    assert!(
        dirs.iter().any(|d| d.ends_with("base")),
        "deploy/kustomize/base is missing"
    );
    dirs
}

fn example_files() -> Vec<PathBuf> {
    let files = yaml_files(&root().join("deploy/examples"));
    assert!(!files.is_empty(), "deploy/examples has no manifest");
    files
}

/// Every manifest set the repository ships.
fn manifest_sets() -> Vec<ManifestSet> {
    kustomization_dirs()
        .iter()
        .map(|d| ManifestSet::from_kustomization(d))
        .chain(example_files().iter().map(|f| ManifestSet::from_file(f)))
        .collect()
}

/// Files that are inputs of a configMapGenerator (kcache configurations, not manifests).
fn generator_inputs() -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for dir in kustomization_dirs() {
        for files in generator_files(&kustomization(&dir)).into_values() {
            out.extend(files.into_iter().map(|(_, f)| dir.join(f)));
        }
    }
    out
}

#[test]
fn every_manifest_parses_and_names_itself() {
    let generated = generator_inputs();
    let mut checked = 0;
    let files = yaml_files(&root().join("deploy/kustomize"))
        .into_iter()
        .chain(example_files());
    for path in files {
        let origin = rel(&path);
        if generated.contains(&path) {
            continue; // checked as kcache configurations below
        }
        let docs = documents(&path);
        assert!(!docs.is_empty(), "{origin}: no document");
        for doc in docs {
            assert!(doc.is_mapping(), "{origin}: a document is not a mapping");
            let api = s(&doc, &["apiVersion"]).unwrap_or("");
            assert!(!api.is_empty(), "{origin}: a document without apiVersion");
            let k = kind(&doc);
            assert!(!k.is_empty(), "{origin}: a document without kind");
            if path.file_name().unwrap() == KUSTOMIZATION {
                assert!(
                    k == "Kustomization" || k == "Component",
                    "{origin}: kind {k}"
                );
                assert!(
                    api.starts_with("kustomize.config.k8s.io/"),
                    "{origin}: {api}"
                );
            } else {
                assert!(
                    !name(&doc).is_empty(),
                    "{origin}: a {k} without metadata.name"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} documents found");
}

#[test]
fn kustomizations_list_only_files_that_exist_and_every_manifest_is_listed() {
    for dir in kustomization_dirs() {
        let k = kustomization(&dir);
        let origin = rel(&dir.join(KUSTOMIZATION));
        let mut listed = BTreeSet::new();
        for r in strings(&k, &["resources"])
            .into_iter()
            .chain(strings(&k, &["components"]))
        {
            let path = dir.join(&r);
            assert!(path.exists(), "{origin}: lists {r}, which does not exist");
            if path.is_dir() {
                assert!(
                    path.join(KUSTOMIZATION).exists(),
                    "{origin}: {r} is a directory without a {KUSTOMIZATION}"
                );
            }
            listed.insert(path);
        }
        for files in generator_files(&k).into_values() {
            for (_, f) in files {
                let path = dir.join(&f);
                assert!(
                    path.is_file(),
                    "{origin}: generates from {f}, which does not exist"
                );
                listed.insert(path);
            }
        }
        for p in seq(&k, &["patches"]) {
            if let Some(f) = s(p, &["path"]) {
                assert!(dir.join(f).is_file(), "{origin}: patch {f} does not exist");
                listed.insert(dir.join(f));
            }
        }
        // A manifest in the directory that the kustomization does not list is never applied.
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let is_yaml = matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            );
            if is_yaml && path.file_name().unwrap() != KUSTOMIZATION {
                assert!(
                    listed.contains(&path),
                    "{origin}: does not list {}",
                    rel(&path)
                );
            }
        }
        // commonLabels (and labels with includeSelectors) also rewrite the NetworkPolicy's
        // selectors of *client* pods (`kubectl kustomize` shows them gaining kcache's own
        // labels), which would lock every client out, or let the wrong pods in.
        assert!(
            k.get("commonLabels").is_none(),
            "{origin}: use `labels` without includeSelectors, not commonLabels"
        );
        for l in seq(&k, &["labels"]) {
            assert_ne!(
                l.get("includeSelectors").and_then(Value::as_bool),
                Some(true),
                "{origin}: labels with includeSelectors rewrite NetworkPolicy peer selectors"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// kcache containers.

/// A container running kcache's image.
fn is_kcache(container: &Value) -> bool {
    let image = s(container, &["image"]).unwrap_or("");
    let without_tag = image.split('@').next().unwrap();
    let last = without_tag.rsplit('/').next().unwrap();
    last.split(':').next().unwrap() == "kcache"
}

struct KcachePod<'a> {
    set: &'a ManifestSet,
    workload: &'a Value,
    spec: &'a Value,
    labels: BTreeMap<String, String>,
    container: &'a Value,
    args: Vec<String>,
}

impl KcachePod<'_> {
    fn origin(&self) -> String {
        format!(
            "{} {}/{}",
            self.set.origin,
            kind(self.workload),
            name(self.workload)
        )
    }

    fn flag(&self, flag: &str) -> Option<&str> {
        let i = self.args.iter().position(|a| a == flag)?;
        self.args.get(i + 1).map(String::as_str)
    }

    fn listen(&self) -> std::net::SocketAddr {
        let l = self
            .flag("--listen")
            .unwrap_or_else(|| panic!("{}: kcache without an explicit --listen", self.origin()));
        l.parse()
            .unwrap_or_else(|_| panic!("{}: --listen {l} is not an address", self.origin()))
    }

    /// kcache's admin address (its own /livez, /readyz, /metrics): `--admin-listen`, else the
    /// config file's `adminListen` (which has a default).
    fn admin_listen(&self) -> std::net::SocketAddr {
        let l = match self.flag("--admin-listen") {
            Some(l) => l.to_string(),
            None => self.config().admin_listen,
        };
        l.parse()
            .unwrap_or_else(|_| panic!("{}: admin address {l} is not an address", self.origin()))
    }

    /// The container port named `name`.
    fn port_named(&self, name: &str) -> Option<u64> {
        seq(self.container, &["ports"])
            .iter()
            .find(|p| s(p, &["name"]) == Some(name))
            .and_then(|p| get(p, &["containerPort"]))
            .and_then(Value::as_u64)
    }

    /// The text of the configuration file `--config` names, from the ConfigMap mounted there.
    fn config_text(&self) -> String {
        let origin = self.origin();
        let path = self
            .flag("--config")
            .unwrap_or_else(|| panic!("{origin}: kcache without --config"));
        for m in seq(self.container, &["volumeMounts"]) {
            let mount = s(m, &["mountPath"]).unwrap_or("");
            let Some(file) = path.strip_prefix(mount).and_then(|f| f.strip_prefix('/')) else {
                continue;
            };
            let volume = seq(self.spec, &["volumes"])
                .iter()
                .find(|v| s(v, &["name"]) == s(m, &["name"]))
                .unwrap_or_else(|| panic!("{origin}: no volume for mount {mount}"));
            let cm = s(volume, &["configMap", "name"])
                .unwrap_or_else(|| panic!("{origin}: {mount} is not a ConfigMap volume"));
            let data = self
                .set
                .config_maps
                .get(cm)
                .unwrap_or_else(|| panic!("{origin}: ConfigMap {cm} is not in the manifests"));
            return data
                .get(file)
                .unwrap_or_else(|| panic!("{origin}: ConfigMap {cm} has no key {file}"))
                .clone();
        }
        panic!("{origin}: --config {path} is not under a mounted volume");
    }

    fn config(&self) -> Config {
        Config::parse(&self.config_text())
            .unwrap_or_else(|e| panic!("{}: invalid kcache configuration: {e}", self.origin()))
    }

    /// The auth mode kcache runs with: `--auth`, else the config file's, else `none`.
    fn auth_mode(&self) -> String {
        if let Some(m) = self.flag("--auth") {
            return m.to_string();
        }
        let text = self.config_text();
        let doc: Value = yaml_serde::from_str(&text).unwrap_or(Value::Null);
        s(&doc, &["auth", "mode"]).unwrap_or("none").to_string()
    }

    /// A TLS file kcache reads: the flag's value, else the config file's `tls` entry.
    fn tls_file(&self, flag: &str) -> Option<String> {
        if let Some(f) = self.flag(flag) {
            return Some(f.to_string());
        }
        let t = self.config().tls;
        let from_config = match flag {
            "--tls-cert-file" => t.cert_file,
            "--tls-key-file" => t.key_file,
            "--client-ca-file" => t.client_ca_file,
            _ => unreachable!("{flag}"),
        };
        from_config.map(|p| p.display().to_string())
    }

    /// The volume source a file inside the container comes from: (volume, key in it).
    fn mounted(&self, path: &str) -> (&Value, String) {
        let origin = self.origin();
        let mut best: Option<(&Value, &str)> = None;
        for m in seq(self.container, &["volumeMounts"]) {
            let mount = s(m, &["mountPath"]).unwrap_or("").trim_end_matches('/');
            let Some(file) = path.strip_prefix(mount).and_then(|f| f.strip_prefix('/')) else {
                continue;
            };
            // The deepest mount holding the path is the one that shows.
            let deeper = best.is_none_or(|(b, _)| {
                s(b, &["mountPath"])
                    .unwrap_or("")
                    .trim_end_matches('/')
                    .len()
                    < mount.len()
            });
            if deeper {
                best = Some((m, file));
            }
        }
        let (m, file) = best.unwrap_or_else(|| panic!("{origin}: {path} is not under a mount"));
        assert!(
            get(m, &["subPath"]).is_none(),
            "{origin}: {path} is mounted with subPath, which is never updated (no rotation)"
        );
        let volume = seq(self.spec, &["volumes"])
            .iter()
            .find(|v| s(v, &["name"]) == s(m, &["name"]))
            .unwrap_or_else(|| panic!("{origin}: no volume for the mount of {path}"));
        (volume, file.to_string())
    }
}

/// The Secret a file comes from, and its key there; panics unless it is a Secret volume that
/// projects that key.
fn secret_file(pod: &KcachePod<'_>, path: &str) -> (String, String) {
    let origin = pod.origin();
    let (volume, key) = pod.mounted(path);
    let secret = s(volume, &["secret", "secretName"])
        .unwrap_or_else(|| panic!("{origin}: {path} is not in a Secret volume: {volume:?}"));
    let items = seq(volume, &["secret", "items"]);
    let key = if items.is_empty() {
        key
    } else {
        items
            .iter()
            .find(|i| s(i, &["path"]) == Some(key.as_str()))
            .and_then(|i| s(i, &["key"]))
            .unwrap_or_else(|| panic!("{origin}: Secret volume {secret} does not project {key}"))
            .to_string()
    };
    (secret.to_string(), key)
}

fn kcache_pods(set: &ManifestSet) -> Vec<KcachePod<'_>> {
    let mut out = Vec::new();
    for (workload, spec, labels) in set.pods() {
        let containers = seq(spec, &["containers"])
            .iter()
            .chain(seq(spec, &["initContainers"]));
        for c in containers.filter(|c| is_kcache(c)) {
            let command = strings(c, &["command"]);
            assert!(
                command.is_empty() || command == ["/kcache"],
                "{}: kcache container overrides the entrypoint with {command:?}",
                set.origin
            );
            out.push(KcachePod {
                set,
                workload,
                spec,
                labels: labels.clone(),
                container: c,
                args: strings(c, &["args"]),
            });
        }
    }
    out
}

fn all_kcache_pods(sets: &[ManifestSet]) -> Vec<KcachePod<'_>> {
    let pods: Vec<_> = sets.iter().flat_map(kcache_pods).collect();
    assert!(
        sets.iter().all(|s| !kcache_pods(s).is_empty()),
        "a manifest set without a kcache container"
    );
    pods
}

/// Run the real binary with a container's arguments (its config file taken from the manifests)
/// and an unreadable kubeconfig: it must get past the command line and the configuration and
/// stop at the kubeconfig.
fn run_real_cli(pod: &KcachePod<'_>) {
    let dir = std::env::temp_dir().join(format!(
        "kcache-deploy-test-{}-{}",
        std::process::id(),
        name(pod.workload)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("kcache.yaml");
    std::fs::write(&config, pod.config_text()).unwrap();
    let mut args = pod.args.clone();
    let i = args.iter().position(|a| a == "--config").unwrap();
    args[i + 1] = config.display().to_string();
    // TLS files: real PEM files in place of the mounted ones, so that kcache gets past them
    // whenever it reads them.
    let tls = test_tls_files(&dir);
    for (flag, file) in [
        ("--tls-cert-file", &tls.cert),
        ("--tls-key-file", &tls.key),
        ("--client-ca-file", &tls.ca),
    ] {
        if let Some(i) = args.iter().position(|a| a == flag) {
            args[i + 1] = file.display().to_string();
        }
    }
    args.push("--kubeconfig".into());
    args.push(dir.join("no-such-kubeconfig").display().to_string());
    let mut child = Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args(&args)
        .env_remove("KCACHE_CONFIG")
        .env_remove("KCACHE_LISTEN")
        .env_remove("KCACHE_ADMIN_LISTEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{}: kcache {args:?} did not stop", pod.origin());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}: kcache {args:?}: {stderr}",
        pod.origin()
    );
    assert!(
        stderr.contains("kubeconfig") && !stderr.contains("Usage:"),
        "{}: kcache {args:?} failed before reading the kubeconfig: {stderr}",
        pod.origin()
    );
}

struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// A CA, and a serving certificate it signed for kcache's Service, as PEM files in `dir`.
fn test_tls_files(dir: &Path) -> TlsFiles {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["kcache.kcache-system.svc".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let files = TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        ca: dir.join("ca.crt"),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    std::fs::write(&files.ca, ca.pem()).unwrap();
    files
}

#[test]
fn the_test_tls_files_load_as_kcache_loads_them() {
    let dir = std::env::temp_dir().join(format!("kcache-deploy-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = test_tls_files(&dir);
    let config = Config::parse(&format!(
        "tls: {{certFile: {}, keyFile: {}, clientCAFile: {}}}\n",
        files.cert.display(),
        files.key.display(),
        files.ca.display()
    ))
    .unwrap();
    let loaded = kcache::tls::TlsServer::load(&config.tls);
    std::fs::remove_dir_all(&dir).ok();
    loaded.expect("the generated certificate, key and CA load");
}

#[test]
fn kcache_containers_run_a_command_line_the_binary_accepts() {
    let sets = manifest_sets();
    for pod in all_kcache_pods(&sets) {
        let origin = pod.origin();
        let serve = pod.args.iter().position(|a| a == "serve");
        assert!(
            serve.is_some(),
            "{origin}: args {:?} do not run `serve`",
            pod.args
        );
        assert!(pod.flag("--config").is_some(), "{origin}: no --config");
        if let Some(f) = pod.flag("--log-format") {
            assert!(f == "text" || f == "json", "{origin}: --log-format {f}");
        }
        pod.listen();
        pod.config();
        run_real_cli(&pod);
    }
}

#[test]
fn tls_files_come_from_mounted_secrets_and_every_network_listener_serves_https() {
    let sets = manifest_sets();
    for pod in all_kcache_pods(&sets) {
        let origin = pod.origin();
        let cert = pod.tls_file("--tls-cert-file");
        let key = pod.tls_file("--tls-key-file");
        assert_eq!(
            cert.is_some(),
            key.is_some(),
            "{origin}: certificate and key go together"
        );
        if pod.listen().ip().is_loopback() {
            // Nothing outside the pod reaches it: plain HTTP is fine.
        } else {
            // Callers' bearer tokens must not cross the network in clear text.
            assert!(
                cert.is_some(),
                "{origin}: listens on {} without TLS",
                pod.listen()
            );
        }
        if let (Some(cert), Some(key)) = (cert, key) {
            let (cert_secret, cert_key) = secret_file(&pod, &cert);
            let (key_secret, key_key) = secret_file(&pod, &key);
            assert_eq!(
                cert_secret, key_secret,
                "{origin}: certificate and key from one Secret"
            );
            // The keys of a kubernetes.io/tls Secret (kubectl create secret tls, cert-manager).
            assert_eq!(
                (cert_key.as_str(), key_key.as_str()),
                ("tls.crt", "tls.key"),
                "{origin}"
            );
        }
        if let Some(ca) = pod.tls_file("--client-ca-file") {
            let (volume, _) = pod.mounted(&ca);
            assert!(
                volume.get("secret").is_some() || volume.get("configMap").is_some(),
                "{origin}: client CA {ca} not from a Secret or ConfigMap"
            );
        }
    }
    // The base serves HTTPS from the Secret kcache-tls.
    let base = ManifestSet::from_kustomization(&root().join("deploy/kustomize/base"));
    let pods = kcache_pods(&base);
    let pod = &pods[0];
    assert_eq!(pod.flag("--auth"), Some("delegated"), "base: --auth");
    let cert = pod.flag("--tls-cert-file").expect("base: --tls-cert-file");
    assert_eq!(secret_file(pod, cert).0, "kcache-tls", "base: TLS Secret");
}

#[test]
fn the_cert_manager_overlay_issues_the_mounted_secret_for_the_service_names() {
    let set = ManifestSet::from_kustomization(&root().join("deploy/kustomize/cert-manager"));
    let pods = kcache_pods(&set);
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    let ns = set.namespace_of(pod.workload);
    let (secret, _) = secret_file(pod, pod.flag("--tls-cert-file").unwrap());
    let certs: Vec<&Value> = set.of_kind("Certificate").collect();
    let serving = certs
        .iter()
        .find(|c| s(c, &["spec", "secretName"]) == Some(&secret))
        .unwrap_or_else(|| panic!("no Certificate writes Secret {secret}"));
    assert_ne!(
        get(serving, &["spec", "isCA"]).and_then(Value::as_bool),
        Some(true),
        "the serving certificate is not a CA"
    );
    assert!(strings(serving, &["spec", "usages"]).contains(&"server auth".to_string()));
    let names = strings(serving, &["spec", "dnsNames"]);
    for svc in set.of_kind("Service") {
        let want = format!("{}.{ns}.svc", name(svc));
        assert!(names.contains(&want), "dnsNames {names:?} lack {want}");
    }
    // Every issuerRef names an Issuer of the overlay; the CA Issuer's Secret is a CA's.
    for c in &certs {
        let issuer = s(c, &["spec", "issuerRef", "name"]).unwrap();
        assert_eq!(s(c, &["spec", "issuerRef", "kind"]), Some("Issuer"));
        let issuer = set
            .of_kind("Issuer")
            .find(|i| name(i) == issuer)
            .unwrap_or_else(|| panic!("Certificate {}: no Issuer {issuer}", name(c)));
        if let Some(ca_secret) = s(issuer, &["spec", "ca", "secretName"]) {
            assert!(
                certs
                    .iter()
                    .any(|c| s(c, &["spec", "secretName"]) == Some(ca_secret)
                        && get(c, &["spec", "isCA"]).and_then(Value::as_bool) == Some(true)),
                "Issuer {}: {ca_secret} is not a CA Certificate's Secret",
                name(issuer)
            );
        }
    }
}

#[test]
fn kcache_configurations_in_deploy_are_valid() {
    for path in generator_inputs() {
        Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", rel(&path)));
    }
    let sets = manifest_sets();
    for pod in all_kcache_pods(&sets) {
        pod.config();
    }
}

#[test]
fn probes_hit_livez_and_readyz_where_the_kubelet_can_reach_them() {
    let sets = manifest_sets();
    let mut probed = 0;
    for pod in all_kcache_pods(&sets) {
        let origin = pod.origin();
        let c = pod.container;
        // The probes are kcache's own endpoints, on the admin listener (plain HTTP); on the
        // API port /livez and /readyz are kube-apiserver's.
        let listen = pod.admin_listen();
        if listen.ip().is_loopback() {
            // The kubelet probes the pod's IP: a probe of a loopback-only kcache always fails.
            for p in ["livenessProbe", "readinessProbe", "startupProbe"] {
                let probe = c.get(p);
                assert!(
                    probe
                        .is_none_or(|p| p.get("httpGet").is_none() && p.get("tcpSocket").is_none()),
                    "{origin}: {p} cannot reach kcache listening on {listen}"
                );
            }
            continue;
        }
        let ports = seq(c, &["ports"]);
        let port_of = |probe: &str| {
            let port = get(c, &[probe, "httpGet", "port"])
                .unwrap_or_else(|| panic!("{origin}: no {probe}.httpGet.port"));
            let number = match port {
                Value::String(n) => ports
                    .iter()
                    .find(|p| s(p, &["name"]) == Some(n))
                    .and_then(|p| get(p, &["containerPort"]))
                    .and_then(Value::as_u64)
                    .unwrap_or_else(|| panic!("{origin}: {probe} names unknown port {n}")),
                other => other.as_u64().unwrap(),
            };
            assert_eq!(
                number,
                u64::from(listen.port()),
                "{origin}: {probe} is not on kcache's admin port"
            );
        };
        assert_eq!(
            s(c, &["livenessProbe", "httpGet", "path"]),
            Some("/livez"),
            "{origin}: liveness probe"
        );
        assert_eq!(
            s(c, &["readinessProbe", "httpGet", "path"]),
            Some("/readyz"),
            "{origin}: readiness probe"
        );
        // The admin listener never serves TLS: an HTTPS probe fails the handshake.
        let scheme = "HTTP";
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if c.get(probe).is_some() {
                assert_eq!(
                    s(c, &[probe, "httpGet", "scheme"]).unwrap_or("HTTP"),
                    scheme,
                    "{origin}: {probe} scheme"
                );
            }
        }
        port_of("livenessProbe");
        port_of("readinessProbe");
        probed += 1;
    }
    assert!(probed >= 1, "no kcache Deployment with probes");
}

#[test]
fn kcache_reachable_from_other_pods_only_behind_a_network_policy() {
    let sets = manifest_sets();
    for pod in all_kcache_pods(&sets) {
        if pod.listen().ip().is_loopback() {
            continue;
        }
        let origin = pod.origin();
        let policy = pod
            .set
            .of_kind("NetworkPolicy")
            .find(|np| {
                selects(
                    &string_map(get(np, &["spec", "podSelector", "matchLabels"])),
                    &pod.labels,
                )
            })
            .unwrap_or_else(|| {
                panic!(
                    "{origin}: listens on {} without a NetworkPolicy",
                    pod.listen()
                )
            });
        assert!(
            strings(policy, &["spec", "policyTypes"]).contains(&"Ingress".to_string()),
            "{origin}: the NetworkPolicy does not restrict ingress"
        );
        let rules = seq(policy, &["spec", "ingress"]);
        assert!(
            !rules.is_empty(),
            "{origin}: the NetworkPolicy admits nothing"
        );
        for rule in rules {
            for port in seq(rule, &["ports"]) {
                if let Some(Value::String(p)) = port.get("port") {
                    assert!(
                        seq(pod.container, &["ports"])
                            .iter()
                            .any(|cp| s(cp, &["name"]) == Some(p)),
                        "{origin}: the NetworkPolicy admits port {p}, which kcache does not have"
                    );
                }
            }
            let from = seq(rule, &["from"]);
            assert!(
                !from.is_empty(),
                "{origin}: an ingress rule without `from` admits everyone"
            );
            for peer in from {
                assert!(
                    !string_map(get(peer, &["podSelector", "matchLabels"])).is_empty(),
                    "{origin}: an ingress peer without pod labels: {peer:?}"
                );
            }
        }
    }
}

#[test]
fn kcache_pods_run_locked_down() {
    let sets = manifest_sets();
    for pod in all_kcache_pods(&sets) {
        let origin = pod.origin();
        let c = pod.container;
        let either = |path: &[&str]| {
            let full = [&["securityContext"][..], path].concat();
            get(c, &full).or_else(|| get(pod.spec, &full)).cloned()
        };
        assert_eq!(
            either(&["runAsNonRoot"]),
            Some(Value::Bool(true)),
            "{origin}"
        );
        assert_eq!(
            either(&["seccompProfile", "type"])
                .as_ref()
                .and_then(Value::as_str),
            Some("RuntimeDefault"),
            "{origin}"
        );
        let sc = |k: &str| get(c, &["securityContext", k]).and_then(Value::as_bool);
        assert_eq!(sc("readOnlyRootFilesystem"), Some(true), "{origin}");
        assert_eq!(sc("allowPrivilegeEscalation"), Some(false), "{origin}");
        assert_eq!(
            strings(c, &["securityContext", "capabilities", "drop"]),
            ["ALL"],
            "{origin}"
        );
        assert!(
            get(c, &["resources", "requests", "memory"]).is_some()
                && get(c, &["resources", "limits", "memory"]).is_some(),
            "{origin}: memory request and limit"
        );
    }
}

#[test]
fn services_and_disruption_budgets_select_kcache_pods() {
    for set in manifest_sets() {
        let pods = kcache_pods(&set);
        for svc in set.of_kind("Service") {
            let selector = string_map(get(svc, &["spec", "selector"]));
            let pod = pods
                .iter()
                .find(|p| selects(&selector, &p.labels))
                .unwrap_or_else(|| {
                    panic!(
                        "{}: Service {} selects no kcache pod",
                        set.origin,
                        name(svc)
                    )
                });
            for port in seq(svc, &["spec", "ports"]) {
                if let Some(Value::String(target)) = port.get("targetPort") {
                    assert!(
                        seq(pod.container, &["ports"])
                            .iter()
                            .any(|p| s(p, &["name"]) == Some(target)),
                        "{}: Service port targets unknown port {target}",
                        set.origin
                    );
                }
            }
        }
        for sm in set.of_kind("ServiceMonitor") {
            for ep in seq(sm, &["spec", "endpoints"]) {
                let port = s(ep, &["port"]).unwrap_or("");
                let target = set
                    .of_kind("Service")
                    .flat_map(|svc| seq(svc, &["spec", "ports"]))
                    .find(|p| s(p, &["name"]) == Some(port))
                    .and_then(|p| s(p, &["targetPort"]))
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: ServiceMonitor scrapes unknown Service port {port}",
                            set.origin
                        )
                    });
                // kcache's own /metrics is on the admin listener (on the API port, /metrics is
                // kube-apiserver's), which is plain HTTP.
                for pod in &pods {
                    assert_eq!(
                        pod.port_named(target),
                        Some(u64::from(pod.admin_listen().port())),
                        "{}: ServiceMonitor port {port} is not kcache's admin port",
                        set.origin
                    );
                    assert!(
                        !pod.admin_listen().ip().is_loopback(),
                        "{}: Prometheus cannot reach a loopback admin address",
                        set.origin
                    );
                }
                assert_eq!(s(ep, &["path"]), Some("/metrics"), "{}", set.origin);
                assert_eq!(
                    s(ep, &["scheme"]),
                    Some("http"),
                    "{}: ServiceMonitor scheme",
                    set.origin
                );
            }
        }
        for pdb in set.of_kind("PodDisruptionBudget") {
            let selector = string_map(get(pdb, &["spec", "selector", "matchLabels"]));
            assert!(
                pods.iter().any(|p| selects(&selector, &p.labels)),
                "{}: PodDisruptionBudget selects no kcache pod",
                set.origin
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// RBAC.

/// The ClusterRole rules bound to a service account in a manifest set.
fn rules_of(set: &ManifestSet, sa: &str, namespace: &str) -> Vec<Value> {
    let mut rules = Vec::new();
    for b in set.of_kind("ClusterRoleBinding") {
        let bound = seq(b, &["subjects"]).iter().any(|subject| {
            s(subject, &["kind"]) == Some("ServiceAccount")
                && s(subject, &["name"]) == Some(sa)
                && s(subject, &["namespace"]) == Some(namespace)
        });
        if !bound {
            continue;
        }
        assert_eq!(
            s(b, &["roleRef", "kind"]),
            Some("ClusterRole"),
            "{}",
            set.origin
        );
        let role = s(b, &["roleRef", "name"]).unwrap();
        let role = set
            .of_kind("ClusterRole")
            .find(|r| name(r) == role)
            .unwrap_or_else(|| {
                panic!("{}: ClusterRole {role} is not in the manifests", set.origin)
            });
        rules.extend(seq(role, &["rules"]).iter().cloned());
    }
    rules
}

fn grants(rules: &[Value], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        let has =
            |field: &str, want: &str| strings(r, &[field]).iter().any(|x| x == want || x == "*");
        has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
    })
}

fn grants_url(rules: &[Value], url: &str) -> bool {
    rules.iter().any(|r| {
        strings(r, &["nonResourceURLs"]).iter().any(|u| u == url)
            && strings(r, &["verbs"])
                .iter()
                .any(|v| v == "get" || v == "*")
    })
}

fn assert_can_cache(rules: &[Value], resources: &[ResourceConfig], origin: &str) {
    for r in resources {
        for verb in ["get", "list", "watch"] {
            assert!(
                grants(rules, &r.group, &r.resource, verb),
                "{origin}: no `{verb}` on {}/{} (group {:?})",
                r.version,
                r.resource,
                r.group
            );
        }
    }
}

#[test]
fn the_shipped_cluster_role_can_cache_everything_in_config_kcache_yaml() {
    let documented = Config::load(&root().join("config/kcache.yaml")).unwrap();
    let base = ManifestSet::from_kustomization(&root().join("deploy/kustomize/base"));
    let pods = kcache_pods(&base);
    assert_eq!(pods.len(), 1, "one kcache container in the base");
    let pod = &pods[0];
    let sa = s(pod.spec, &["serviceAccountName"]).expect("base: serviceAccountName");
    let rules = rules_of(&base, sa, &base.namespace_of(pod.workload));
    assert_can_cache(
        &rules,
        &documented.resources,
        "base ClusterRole vs config/kcache.yaml",
    );
    for url in ["/api", "/api/*", "/apis", "/apis/*", "/version"] {
        assert!(grants_url(&rules, url), "base: discovery {url}");
    }
    assert!(grants(
        &rules,
        "authentication.k8s.io",
        "tokenreviews",
        "create"
    ));
    assert!(grants(
        &rules,
        "authorization.k8s.io",
        "subjectaccessreviews",
        "create"
    ));
    // The base sets no client CA, so no caller is ever impersonated: the powerful verb is
    // not granted (clusterrole.yaml says how to add it together with a client CA).
    let args = pod.args.join(" ");
    assert!(!args.contains("--client-ca-file"), "base: client CA set");
    for what in ["users", "groups"] {
        assert!(
            !grants(&rules, "", what, "impersonate"),
            "base: impersonate {what} without a client CA"
        );
    }
    // Credential-less local callers act as kcache: nothing beyond reading, the two reviews,
    // and impersonating users and groups (never service accounts, uids or extras).
    for r in &rules {
        let resources = strings(r, &["resources"]);
        for verb in strings(r, &["verbs"]) {
            let review = resources
                .iter()
                .all(|x| x == "tokenreviews" || x == "subjectaccessreviews");
            let people = strings(r, &["apiGroups"]) == [""]
                && resources.iter().all(|x| x == "users" || x == "groups");
            assert!(
                ["get", "list", "watch"].contains(&verb.as_str())
                    || (verb == "create" && review)
                    || (verb == "impersonate" && people),
                "base ClusterRole grants `{verb}` in {r:?}"
            );
        }
        assert!(
            !strings(r, &["resources"])
                .iter()
                .any(|x| x == "secrets" || x == "*"),
            "base ClusterRole grants secrets or everything: {r:?}"
        );
    }
}

#[test]
fn every_kcache_pod_may_list_and_watch_what_its_configuration_caches() {
    let sets = manifest_sets();
    for pod in all_kcache_pods(&sets) {
        let origin = pod.origin();
        let sa = s(pod.spec, &["serviceAccountName"])
            .unwrap_or_else(|| panic!("{origin}: no serviceAccountName"));
        let rules = rules_of(pod.set, sa, &pod.set.namespace_of(pod.workload));
        assert!(
            !rules.is_empty(),
            "{origin}: service account {sa} is bound to nothing"
        );
        assert_can_cache(&rules, &pod.config().resources, &origin);
        for url in ["/api", "/api/*", "/apis", "/apis/*"] {
            assert!(grants_url(&rules, url), "{origin}: discovery {url}");
        }
        // Callers are authenticated by TokenReview and cached reads authorized by
        // SubjectAccessReview: without `create` on them every caller gets 503s.
        let mode = pod.auth_mode();
        if mode == "delegated" || mode == "trust-local" {
            for (group, resource) in [
                ("authentication.k8s.io", "tokenreviews"),
                ("authorization.k8s.io", "subjectaccessreviews"),
            ] {
                assert!(
                    grants(&rules, group, resource, "create"),
                    "{origin}: --auth {mode} needs create on {resource}"
                );
            }
            // Allowances RBAC gave are remembered until RBAC changes, which kcache
            // watches for.
            if pod.config().auth.rbac_allowed_cache_seconds > 0 {
                for resource in [
                    "clusterroles",
                    "clusterrolebindings",
                    "roles",
                    "rolebindings",
                ] {
                    for verb in ["list", "watch"] {
                        assert!(
                            grants(&rules, "rbac.authorization.k8s.io", resource, verb),
                            "{origin}: --auth {mode} needs {verb} on {resource}"
                        );
                    }
                }
            }
        }
        // Client-certificate callers are passed on impersonated.
        if pod.tls_file("--client-ca-file").is_some() {
            for what in ["users", "groups"] {
                assert!(
                    grants(&rules, "", what, "impersonate"),
                    "{origin}: a client CA needs impersonate on {what}"
                );
            }
        }
        for r in &rules {
            if strings(r, &["verbs"])
                .iter()
                .any(|v| v == "impersonate" || v == "*")
            {
                for x in strings(r, &["resources"]) {
                    assert!(
                        x == "users" || x == "groups",
                        "{origin}: impersonate on {x}: kcache impersonates only users and groups"
                    );
                }
            }
        }
    }
}

#[test]
fn the_deployed_default_resources_are_the_documented_ones() {
    let documented = Config::load(&root().join("config/kcache.yaml")).unwrap();
    let base = Config::load(&root().join("deploy/kustomize/base/kcache.yaml")).unwrap();
    assert_eq!(base.resources, documented.resources, "kustomize base");
    let values = helm_values();
    let helm: Vec<ResourceConfig> =
        yaml_serde::from_value(values["resources"].clone()).expect("helm values: resources");
    assert_eq!(helm, documented.resources, "helm values.yaml");
}

#[test]
fn assert_can_cache_rejects_a_missing_verb() {
    let rules: Vec<Value> = yaml_serde::from_str(
        "- {apiGroups: [apps], resources: [deployments], verbs: [get, list]}\n",
    )
    .unwrap();
    let r: Vec<ResourceConfig> =
        yaml_serde::from_str("- {group: apps, version: v1, resource: deployments}\n").unwrap();
    let caught = std::panic::catch_unwind(|| assert_can_cache(&rules, &r, "test"));
    assert!(caught.is_err(), "a role without watch must be rejected");
}

// ---------------------------------------------------------------------------------------------
// Dockerfile.

/// Dockerfile instructions, continuation lines joined: (INSTRUCTION, rest).
fn dockerfile() -> Vec<(String, String)> {
    let text = read(&root().join("Dockerfile"));
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(t);
                let (ins, rest) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((ins.to_uppercase(), rest.trim().to_string()));
                current.clear();
            }
        }
    }
    out
}

/// The README's build command (from its "In front of a real cluster" section).
fn readme_build_command() -> String {
    let readme = read(&root().join("README.md"));
    let section = readme
        .split("## In front of a real cluster")
        .nth(1)
        .expect("README: section \"In front of a real cluster\"");
    section
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("cargo build"))
        .expect("README: a `cargo build` command")
        .to_string()
}

#[test]
fn the_image_is_built_with_the_readme_command_and_runs_kcache_as_non_root() {
    let ins = dockerfile();
    let build = readme_build_command();
    assert_eq!(build, "cargo build --release");
    let runs: Vec<&str> = ins
        .iter()
        .filter(|(i, _)| i == "RUN")
        .map(|(_, r)| r.as_str())
        .collect();
    let builds: Vec<&str> = runs
        .iter()
        .flat_map(|r| r.match_indices("cargo build").map(|(i, _)| &r[i..]))
        .collect();
    assert!(!builds.is_empty(), "the Dockerfile builds nothing");
    for b in builds {
        assert!(
            b.starts_with(&format!("{build} --locked")),
            "every build must be `{build} --locked`: {b}"
        );
    }
    let froms: Vec<&str> = ins
        .iter()
        .filter(|(i, _)| i == "FROM")
        .map(|(_, r)| r.as_str())
        .collect();
    assert!(froms.len() >= 2, "multi-stage: {froms:?}");
    assert!(
        froms[0].starts_with("rust:1-bookworm"),
        "build stage: {}",
        froms[0]
    );
    let last = froms.last().unwrap();
    assert!(last.contains("nonroot"), "runtime stage: {last}");
    // Everything after the last FROM is the runtime stage.
    let start = ins.iter().rposition(|(i, _)| i == "FROM").unwrap();
    let runtime = &ins[start + 1..];
    let one = |name: &str| {
        let found: Vec<&String> = runtime
            .iter()
            .filter(|(i, _)| i == name)
            .map(|(_, r)| r)
            .collect();
        assert_eq!(found.len(), 1, "runtime stage: one {name}");
        found[0].clone()
    };
    let user = one("USER");
    let uid: u32 = user.split(':').next().unwrap().parse().unwrap_or_else(|_| {
        panic!("USER {user} must be numeric for Kubernetes' runAsNonRoot check")
    });
    assert_ne!(uid, 0, "USER {user}");
    let entrypoint: Vec<String> = serde_json::from_str(&one("ENTRYPOINT")).expect("exec form");
    assert_eq!(entrypoint, ["/kcache"]);
    let cmd: Vec<String> = serde_json::from_str(&one("CMD")).expect("exec form");
    assert_eq!(cmd, ["serve", "--config", "/etc/kcache/kcache.yaml"]);
    // The API port and the admin port of the configuration the image ships.
    let shipped = Config::load(&root().join("config/kcache.yaml")).unwrap();
    let port = |a: &str| {
        a.parse::<std::net::SocketAddr>()
            .unwrap()
            .port()
            .to_string()
    };
    assert_eq!(
        one("EXPOSE"),
        format!("{} {}", port(&shipped.listen), port(&shipped.admin_listen))
    );
    let copies: Vec<&String> = runtime
        .iter()
        .filter(|(i, _)| i == "COPY")
        .map(|(_, r)| r)
        .collect();
    assert!(copies
        .iter()
        .any(|c| c.ends_with("/target/release/kcache /kcache")));
    assert!(copies.contains(&&"config/kcache.yaml /etc/kcache/kcache.yaml".to_string()));
    assert!(
        !ins.iter().any(|(i, _)| i == "HEALTHCHECK"),
        "no HEALTHCHECK: Kubernetes probes do it"
    );
    // The dependency layer loads the whole workspace: every member's manifest is copied
    // and given a placeholder source, or cargo cannot read the workspace at all.
    let manifest = read(&root().join("Cargo.toml"));
    let members: Vec<&str> = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("the workspace's members")
        .trim_end_matches(']')
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .collect();
    assert!(members.len() > 3, "{members:?}");
    let placeholders = ins
        .iter()
        .find(|(i, r)| i == "RUN" && r.contains("fn main() {}"))
        .map(|(_, r)| r.clone())
        .expect("the dependency layer's placeholders");
    for member in members {
        let copy = format!("{member}/Cargo.toml {member}/");
        assert!(
            ins.iter().any(|(i, r)| i == "COPY" && r == &copy),
            "COPY {copy}: a workspace member's manifest missing from the dependency layer"
        );
        assert!(
            placeholders.contains(&format!("{member}/src/lib.rs")),
            "{member}/src/lib.rs: no placeholder in the dependency layer"
        );
    }
    // Every file copied from the build context exists and is not excluded by .dockerignore.
    let ignore = read(&root().join(".dockerignore"));
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/'))
        .collect();
    assert!(
        ignored.contains(&"target") && ignored.contains(&".git"),
        "{ignored:?}"
    );
    for (i, rest) in &ins {
        if i != "COPY" || rest.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = rest.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            let src = src.trim_end_matches('/');
            assert!(
                root().join(src).exists(),
                "COPY {src}: not in the repository"
            );
            assert!(
                !ignored
                    .iter()
                    .any(|ig| src == *ig || src.starts_with(&format!("{ig}/"))),
                "COPY {src}: excluded by .dockerignore"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Grafana dashboard.

#[test]
fn exported_metrics_are_read_from_the_real_registry() {
    for m in [
        "kcache_requests_total",
        "kcache_request_duration_seconds_bucket",
        "kcache_cache_lag_seconds",
        "kcache_authentications_total",
        "kcache_open_watches",
        "kcache_build_info",
    ] {
        assert!(known_metric(m), "{m}: {:?}", exported_metrics());
    }
    assert!(!known_metric("kcache_requests"));
    assert!(!known_metric("kcache_open_watches_total"));
}

fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                if k == "expr" {
                    out.push(v.as_str().expect("expr is a string").to_string());
                } else {
                    collect_exprs(v, out);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

fn dashboard() -> serde_json::Value {
    let path = root().join("deploy/grafana/kcache-dashboard.json");
    serde_json::from_str(&read(&path)).expect("the dashboard is JSON")
}

#[test]
fn metric_names_finds_metrics_and_only_metrics() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, source) (rate(kcache_request_duration_seconds_bucket{job=~"$job", resource=~"a|b"}[$__rate_interval]))) / on (x) group_left(y) kcache_bogus_total offset 5m > bool 1e3"#,
    );
    assert_eq!(
        names,
        [
            "kcache_request_duration_seconds_bucket",
            "kcache_bogus_total"
        ]
    );
    assert!(known_metric("kcache_request_duration_seconds_bucket"));
    assert!(!known_metric("kcache_bogus_total"));
    assert!(!known_metric("kcache_requests_total_bucket"));
}

#[test]
fn the_dashboard_queries_only_metrics_kcache_exports() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "schemaVersion");
    let mut exprs = Vec::new();
    collect_exprs(&d["panels"], &mut exprs);
    assert!(exprs.len() >= 15, "only {} queries", exprs.len());
    let mut used = BTreeSet::new();
    for e in &exprs {
        let names = metric_names(e);
        assert!(!names.is_empty(), "no metric in {e}");
        for n in names {
            assert!(known_metric(&n), "unknown metric {n} in {e}");
            used.insert(n);
        }
    }
    // Variables: label_values(metric, label) over known metrics.
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let mut var_names = BTreeSet::new();
    for v in vars {
        var_names.insert(v["name"].as_str().unwrap().to_string());
        if v["type"] == "query" {
            let q = v["query"].as_str().expect("variable query");
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("variable query {q}"));
            let metric = inner.split(['{', ',']).next().unwrap().trim();
            assert!(
                known_metric(metric),
                "variable over unknown metric {metric}"
            );
        }
    }
    assert!(var_names.contains("DS_PROMETHEUS") && var_names.contains("resource"));
    // Every panel and query uses the datasource variable; every $variable is defined.
    let text = serde_json::to_string(&d["panels"]).unwrap();
    for (i, _) in text.match_indices("\"uid\":") {
        let rest = &text[i + 6..];
        assert!(
            rest.starts_with("\"${DS_PROMETHEUS}\""),
            "a datasource uid not ${{DS_PROMETHEUS}}: {}",
            &rest[..rest.len().min(40)]
        );
    }
    for e in &exprs {
        for (i, _) in e.match_indices('$') {
            let var: String = e[i + 1..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            assert!(
                var.starts_with("__") || var_names.contains(&var),
                "undefined variable ${var} in {e}"
            );
        }
    }
    // The panels the dashboard promises.
    for m in [
        "kcache_requests_total",
        "kcache_request_duration_seconds_bucket",
        "kcache_inflight_requests",
        "kcache_cached_objects",
        "kcache_cached_bytes",
        "kcache_watchers",
        "kcache_watch_events_sent_total",
        "kcache_cache_lag_seconds",
        "kcache_relists_total",
        "kcache_upstream_expired_total",
        "kcache_upstream_errors_total",
        "kcache_watchers_closed_total",
        "kcache_consistent_reads_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "kcache_authentications_total",
        "kcache_authorizations_total",
        "kcache_limited_requests_total",
        "kcache_open_watches",
        "kcache_cache_age_seconds",
        "kcache_upstream_reachable",
    ] {
        assert!(used.contains(m), "no panel shows {m}");
    }
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
    }
}

// ---------------------------------------------------------------------------------------------
// Helm chart (Go templates: not rendered here; see deploy/render-check.sh).

fn chart_dir() -> PathBuf {
    root().join("deploy/helm/kcache")
}

fn helm_values() -> Value {
    let docs = documents(&chart_dir().join("values.yaml"));
    assert_eq!(docs.len(), 1, "values.yaml: one document");
    docs.into_iter().next().unwrap()
}

fn helm_templates() -> BTreeMap<String, String> {
    let dir = chart_dir().join("templates");
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().to_string(),
                read(&p),
            )
        })
        .collect()
}

/// The quoted name after each occurrence of `keyword "`.
fn quoted_after(text: &str, keyword: &str) -> Vec<String> {
    let pattern = format!("{keyword} \"");
    text.match_indices(&pattern)
        .map(|(i, _)| {
            let rest = &text[i + pattern.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        })
        .collect()
}

#[test]
fn the_helm_chart_parses_and_its_references_resolve() {
    let chart = documents(&chart_dir().join("Chart.yaml"));
    assert_eq!(chart.len(), 1);
    let chart = &chart[0];
    assert_eq!(s(chart, &["apiVersion"]), Some("v2"));
    assert_eq!(s(chart, &["name"]), Some("kcache"));
    assert!(s(chart, &["version"]).is_some_and(|v| !v.is_empty()));
    assert_eq!(
        s(chart, &["appVersion"]),
        Some(env!("CARGO_PKG_VERSION")),
        "Chart.yaml appVersion is kcache's version"
    );
    let values = helm_values();
    assert_eq!(
        s(&values, &["auth"]),
        Some("delegated"),
        "kcache listens on 0.0.0.0 in the chart, where it must authenticate callers"
    );
    assert_eq!(
        get(&values, &["networkPolicy", "enabled"]).and_then(Value::as_bool),
        Some(true),
        "the NetworkPolicy is on by default"
    );

    let templates = helm_templates();
    for t in [
        "_helpers.tpl",
        "NOTES.txt",
        "deployment.yaml",
        "service.yaml",
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "configmap.yaml",
        "pdb.yaml",
        "networkpolicy.yaml",
        "servicemonitor.yaml",
    ] {
        assert!(templates.contains_key(t), "templates/{t} is missing");
    }
    let mut defined = BTreeSet::new();
    for text in templates.values() {
        defined.extend(quoted_after(text, "define"));
    }
    for (file, text) in &templates {
        assert_eq!(
            text.matches("{{").count(),
            text.matches("}}").count(),
            "templates/{file}: unbalanced braces"
        );
        for used in quoted_after(text, "include")
            .into_iter()
            .chain(quoted_after(text, "template"))
        {
            assert!(
                defined.contains(&used),
                "templates/{file}: {used} is not defined"
            );
        }
        // include (print $.Template.BasePath "/x.yaml") names another template file.
        for (i, _) in text.match_indices("$.Template.BasePath \"/") {
            let rest = &text[i + "$.Template.BasePath \"/".len()..];
            let f = &rest[..rest.find('"').unwrap()];
            assert!(
                templates.contains_key(f),
                "templates/{file}: refers to missing {f}"
            );
        }
        // Every .Values.a.b path exists in values.yaml.
        for (i, _) in text.match_indices(".Values.") {
            let path: String = text[i + ".Values.".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '.' || *c == '_')
                .collect();
            let keys: Vec<&str> = path.trim_end_matches('.').split('.').collect();
            assert!(
                get(&values, &keys).is_some(),
                "templates/{file}: .Values.{path} is not in values.yaml"
            );
        }
    }
    let deployment = &templates["deployment.yaml"];
    for needle in [
        "/livez",
        "/readyz",
        "- serve",
        "- --config",
        "- --listen",
        "- --admin-listen",
    ] {
        assert!(deployment.contains(needle), "deployment.yaml: {needle}");
    }
    // --auth is always passed, and `none` (which kcache refuses on 0.0.0.0) fails rendering
    // with a message instead of producing pods that crash-loop.
    assert!(
        deployment.contains("- --auth\n            - {{ .Values.auth | quote }}"),
        "deployment.yaml passes --auth"
    );
    assert!(
        deployment.contains("{{- if eq .Values.auth \"none\" }}")
            && deployment.contains("{{- fail"),
        "deployment.yaml refuses auth=none"
    );
    let role = &templates["clusterrole.yaml"];
    assert!(
        role.contains("range .Values.resources"),
        "ClusterRole from the resources list"
    );
    for verb in ["get", "list", "watch"] {
        assert!(role.contains(verb), "clusterrole.yaml: {verb}");
    }
    for needle in [
        "- apiGroups: [authentication.k8s.io]\n    resources: [tokenreviews]\n    verbs: [create]",
        "- apiGroups: [authorization.k8s.io]\n    resources: [subjectaccessreviews]\n    verbs: [create]",
        "- apiGroups: [rbac.authorization.k8s.io]\n    resources: [clusterroles, clusterrolebindings, roles, rolebindings]\n    verbs: [list, watch]",
        // Impersonation only where client certificates are verified.
        "{{- if include \"kcache.clientCA\" . }}",
        "- apiGroups: [\"\"]\n    resources: [users, groups]\n    verbs: [impersonate]",
        // The CRDs of cached custom resources, by name, read-only: their selectableFields.
        "{{- if contains \".\" (get . \"group\" | default \"\") }}",
        "- apiGroups: [apiextensions.k8s.io]\n    resources: [customresourcedefinitions]\n    resourceNames:",
        "      - {{ . | quote }}\n      {{- end }}\n    verbs: [get]",
    ] {
        assert!(role.contains(needle), "clusterrole.yaml: {needle}");
    }
    assert!(
        deployment.contains("- --client-ca-file")
            && deployment.contains("{{- if include \"kcache.clientCA\" . }}"),
        "deployment.yaml passes --client-ca-file with tls.clientCA"
    );
}

#[test]
fn the_helm_chart_serves_https_from_its_secret_and_probes_follow_tls() {
    let values = helm_values();
    assert_eq!(
        get(&values, &["tls", "enabled"]).and_then(Value::as_bool),
        Some(true),
        "TLS is on by default: delegated auth sends bearer tokens"
    );
    for key in ["secretName", "certManager", "clientCA"] {
        assert!(get(&values, &["tls", key]).is_some(), "values: tls.{key}");
    }
    let templates = helm_templates();
    let deployment = &templates["deployment.yaml"];
    // The flags, inside `if .Values.tls.enabled`, name files in the mounted Secret.
    let flags = "{{- if .Values.tls.enabled }}\n            # HTTPS from the mounted Secret, reread every tls.reloadIntervalSeconds.\n            - --tls-cert-file\n            - /etc/kcache-tls/tls.crt\n            - --tls-key-file\n            - /etc/kcache-tls/tls.key\n";
    assert!(deployment.contains(flags), "deployment.yaml: TLS flags");
    for needle in [
        "- name: tls\n              mountPath: /etc/kcache-tls\n",
        "- name: tls\n          secret:\n            secretName: {{ include \"kcache.tlsSecretName\" . }}",
        "- name: client-ca\n              mountPath: /etc/kcache-client-ca\n",
        "- /etc/kcache-client-ca/{{ .Values.tls.clientCA.key }}",
    ] {
        assert!(deployment.contains(needle), "deployment.yaml: {needle}");
    }
    // The API port follows TLS; both probes and the ServiceMonitor use the admin port, which
    // is plain HTTP whatever TLS says.
    assert_eq!(
        deployment
            .matches("port: admin\n              scheme: HTTP\n")
            .count(),
        2,
        "deployment.yaml: probes on the admin port"
    );
    assert!(deployment
        .contains("- --admin-listen\n            - 0.0.0.0:{{ include \"kcache.adminPort\" . }}"));
    assert!(deployment.contains(
        "- name: admin\n              containerPort: {{ include \"kcache.adminPort\" . }}"
    ));
    assert!(deployment.contains("- name: {{ include \"kcache.portName\" . }}"));
    for file in ["service.yaml", "networkpolicy.yaml"] {
        assert!(
            templates[file].contains("{{ include \"kcache.portName\" . }}"),
            "{file}: the API port follows TLS"
        );
    }
    for file in ["service.yaml", "networkpolicy.yaml", "servicemonitor.yaml"] {
        assert!(templates[file].contains("admin"), "{file}: the admin port");
    }
    assert!(templates["servicemonitor.yaml"]
        .contains("- port: admin\n      path: /metrics\n      scheme: http\n"));
    assert!(!templates["servicemonitor.yaml"].contains("tlsConfig"));
    let helpers = &templates["_helpers.tpl"];
    assert!(helpers.contains("{{- if .Values.tls.enabled }}8443{{ else }}8080{{ end -}}"));
    assert!(helpers.contains("{{- if .Values.tls.enabled }}https{{ else }}http{{ end -}}"));
}

#[test]
fn the_helm_configmap_renders_a_configuration_kcache_accepts() {
    let templates = helm_templates();
    let cm = &templates["configmap.yaml"];
    for needle in [
        "toYaml .Values.resources",
        "dropManagedFields: {{ .Values.dropManagedFields }}",
        "limits:\n      {{- toYaml .Values.limits | nindent 6 }}",
        "{{- with .Values.config }}\n    {{- toYaml . | nindent 4 }}",
    ] {
        assert!(cm.contains(needle), "configmap.yaml: {needle}");
    }
    // What the template renders with the default values: those keys, then `config`'s.
    let values = helm_values();
    let mut doc = yaml_serde::Mapping::new();
    for key in ["resources", "dropManagedFields", "limits"] {
        doc.insert(key.into(), values[key].clone());
    }
    for (k, v) in values["config"].as_mapping().expect("values: config") {
        assert!(
            !doc.contains_key(k),
            "values: config.{k:?} would be rendered twice"
        );
        doc.insert(k.clone(), v.clone());
    }
    let text = yaml_serde::to_string(&doc).unwrap();
    let config =
        Config::parse(&text).unwrap_or_else(|e| panic!("the chart's kcache.yaml: {e}\n{text}"));
    let limits: kcache::limits::LimitConfig =
        yaml_serde::from_value(values["limits"].clone()).expect("values: limits");
    assert_eq!(
        yaml_serde::to_value(&config.limits).unwrap(),
        yaml_serde::to_value(&limits).unwrap()
    );
    // The defaults are kcache's own.
    assert_eq!(
        yaml_serde::to_value(&limits).unwrap(),
        yaml_serde::to_value(kcache::limits::LimitConfig::default()).unwrap(),
        "values: limits are kcache's defaults"
    );
}

// ---------------------------------------------------------------------------------------------
// The deployment guide (docs/deployment.md, linked from the README).

#[test]
fn the_deployment_guide_names_paths_that_exist() {
    // The README is a front page that points to docs/deployment.md, which holds the guide.
    let readme = read(&root().join("README.md"));
    assert!(
        readme.contains("(docs/deployment.md)"),
        "README links to docs/deployment.md"
    );
    let section = read(&root().join("docs/deployment.md"));
    for (i, _) in section.match_indices("deploy/") {
        if i > 0 && section.as_bytes()[i - 1].is_ascii_alphanumeric() {
            continue;
        }
        let path: String = section[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '-' | '_'))
            .collect();
        let path = path.trim_end_matches(['.', '/']);
        assert!(
            root().join(path).exists(),
            "docs/deployment.md mentions {path}, which does not exist"
        );
    }
    for needle in [
        "kubectl apply -k",
        "helm install",
        "sidecar",
        "NetworkPolicy",
    ] {
        assert!(section.contains(needle), "docs/deployment.md: {needle}");
    }
}
