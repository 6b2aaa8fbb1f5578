//! Seed data for the simulated cluster.
//!
//! Everything here is plain data: the functions return Kubernetes objects as
//! [`serde_json::Value`]s wrapped in [`SeedObject`]s, in the order a client would create them,
//! and [`Churn`] produces an endless, deterministic stream of changes on top of them.
//!
//! The objects look like what a real apiserver stores *after* defaulting and admission (pods
//! carry the `kube-api-access-*` volume, default tolerations, `priority`, ...) because the
//! simulated apiserver does neither; only the fields the apiserver always assigns itself
//! (`uid`, `resourceVersion`, `creationTimestamp`, `generation`) are left out.
//!
//! References between objects (`ownerReferences`, an EndpointSlice's `targetRef`, an Event's
//! `involvedObject`) need the referenced object's uid before the apiserver has assigned one.
//! They carry [`uid_for`] of the referenced object; an apiserver that assigns `uid_for` as the
//! uid of created objects (or rewrites the references) gets a fully consistent cluster.
//!
//! All randomness comes from a [`StdRng`] seeded by the caller, so the same seed always gives
//! byte-identical objects.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::{json, Map, Value};

use crate::encode::META_ORDER;

// ---------------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------------

/// One object to create.
///
/// `group` is the API group (`""` for the core group), `resource` the plural resource name and
/// `object` the full object with `apiVersion`/`kind` set; its metadata has no `uid`,
/// `resourceVersion` or `creationTimestamp` because the apiserver assigns those.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedObject {
    /// API group, `""` for the core group.
    pub group: &'static str,
    /// Plural resource name, e.g. `"configmaps"`.
    pub resource: &'static str,
    /// The object itself.
    pub object: Value,
}

impl SeedObject {
    fn new(group: &'static str, resource: &'static str, object: Value) -> Self {
        SeedObject {
            group,
            resource,
            object,
        }
    }

    /// `metadata.name` (empty if missing).
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("")
    }

    /// `metadata.namespace`, `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        self.object["metadata"]["namespace"].as_str()
    }

    /// The object's `kind`.
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or("")
    }
}

/// Shape of the demo cluster built by [`demo_cluster`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSpec {
    /// Number of namespaces; the first four are `shop`, `payments`, `monitoring`, `default`,
    /// further ones `team-5`, `team-6`, ...
    pub namespaces: usize,
    /// Number of nodes, named `node-1` .. `node-N`.
    pub nodes: usize,
    /// Deployments in every namespace.
    pub deployments_per_namespace: usize,
    /// Replicas of every deployment.
    pub replicas: usize,
    /// ConfigMaps in every namespace (the first is always `kube-root-ca.crt`).
    pub configmaps_per_namespace: usize,
    /// Secrets in every namespace.
    pub secrets_per_namespace: usize,
    /// Services in every namespace (each with an EndpointSlice when it selects pods).
    pub services_per_namespace: usize,
    /// Images each node reports beyond the four every node has: a node of a busy cluster
    /// lists dozens, which make most of its size.
    pub node_images: usize,
    /// Whether the deployments' pods carry the managedFields of their creator and their
    /// kubelet, as pods read from a real apiserver do.
    pub pod_managed_fields: bool,
    /// Seed of the random generator; equal seeds give equal clusters.
    pub seed: u64,
}

impl Default for DemoSpec {
    /// A small, pleasant demo: 4 namespaces, 3 nodes, 2 deployments of 2 replicas per
    /// namespace, 5 ConfigMaps, 2 Secrets and 2 Services per namespace.
    fn default() -> Self {
        DemoSpec {
            namespaces: 4,
            nodes: 3,
            deployments_per_namespace: 2,
            replicas: 2,
            configmaps_per_namespace: 5,
            secrets_per_namespace: 2,
            services_per_namespace: 2,
            node_images: 0,
            pod_managed_fields: false,
            seed: 1,
        }
    }
}

/// One churn step produced by [`Churn::next_op`].
#[derive(Debug, Clone, PartialEq)]
pub enum ChurnOp {
    /// Create this object (it does not exist yet).
    Create(SeedObject),
    /// Replace an existing object with this full object (one change applied, e.g. a label, the
    /// `kcache.dev/churn` annotation, a ConfigMap value or a pod's status).
    Update(SeedObject),
    /// Delete an existing object.
    Delete {
        /// API group, `""` for core.
        group: &'static str,
        /// Plural resource name.
        resource: &'static str,
        /// Namespace of the object, `None` for cluster-scoped objects.
        namespace: Option<String>,
        /// Name of the object.
        name: String,
    },
}

// ---------------------------------------------------------------------------------------------
// Time, hashing and small random helpers
// ---------------------------------------------------------------------------------------------

/// The wall clock of the generated data: the demo cluster "was created" on this morning,
/// 2026-11-22T09:00:00Z, the same day the real-apiserver fixtures were recorded, so timestamps
/// look alike.
const EPOCH: i64 = 1_795_338_000;

/// The instant `secs` (+ `nanos`) after the Unix epoch.
fn timestamp(secs: i64, nanos: i32) -> jiff::Timestamp {
    jiff::Timestamp::new(secs, nanos).expect("seed timestamps are within jiff's range")
}

/// `metav1.Time` as the apiserver writes it: RFC 3339, second precision, UTC.
fn rfc3339(secs: i64) -> String {
    format!("{:.0}", timestamp(secs, 0))
}

/// `metav1.MicroTime`, used by events written through events.k8s.io.
fn micro_time(secs: i64, micros: u32) -> String {
    let micros = (micros % 1_000_000) as i32;
    format!("{:.6}", timestamp(secs, micros * 1_000))
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME)
    })
}

/// SplitMix64 finaliser: spreads FNV's weak low bits over the whole word.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `out` with bytes that depend only on `text`: used where real values are content
/// hashes (image digests) or where another component must be able to recompute them (uids).
fn stable_bytes(text: &str, out: &mut [u8]) {
    let mut state = fnv1a(text.as_bytes());
    for chunk in out.chunks_mut(8) {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let word = mix64(state).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn stable_hex(text: &str, len: usize) -> String {
    let mut bytes = vec![0u8; len.div_ceil(2)];
    stable_bytes(text, &mut bytes);
    let mut s = to_hex(&bytes);
    s.truncate(len);
    s
}

/// A version 4 (random) UUID of these bytes, RFC 4122 variant, as the random uids Kubernetes
/// uses; the same bytes give the same UUID.
fn format_uuid(b: [u8; 16]) -> String {
    uuid::Builder::from_random_bytes(b)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// The uid seed data uses when it refers to another seed object (ownerReferences,
/// EndpointSlice targetRefs, Event involvedObjects, Job controller-uid labels).
///
/// It depends only on the kind, namespace and name, so an apiserver can assign exactly this uid
/// when it creates a seed object and every reference then resolves.
pub fn uid_for(kind: &str, namespace: Option<&str>, name: &str) -> String {
    let key = format!("{kind}\0{}\0{name}", namespace.unwrap_or(""));
    let mut b = [0u8; 16];
    stable_bytes(&key, &mut b);
    format_uuid(b)
}

fn random_uuid(rng: &mut StdRng) -> String {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    format_uuid(b)
}

/// Alphabet of generated name suffixes: Kubernetes leaves out vowels and look-alike characters
/// so that random suffixes never spell words.
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn suffix(rng: &mut StdRng, len: usize) -> String {
    (0..len)
        .map(|_| char::from(SUFFIX_ALPHABET[rng.random_range(0..SUFFIX_ALPHABET.len())]))
        .collect()
}

fn random_hex(rng: &mut StdRng, len: usize) -> String {
    let mut bytes = vec![0u8; len.div_ceil(2)];
    rng.fill_bytes(&mut bytes);
    let mut s = to_hex(&bytes);
    s.truncate(len);
    s
}

fn random_base64(rng: &mut StdRng, raw_len: usize) -> String {
    let mut bytes = vec![0u8; raw_len];
    rng.fill_bytes(&mut bytes);
    BASE64.encode(bytes)
}

fn b64(text: &str) -> String {
    BASE64.encode(text.as_bytes())
}

/// A PEM block whose body is random DER-looking bytes (a SEQUENCE header, so it starts with the
/// familiar "MII").
fn fake_pem(rng: &mut StdRng, label: &str, der_len: usize) -> String {
    let mut der = vec![0u8; der_len];
    rng.fill_bytes(&mut der);
    let body_len = der_len.saturating_sub(4);
    der[0] = 0x30;
    der[1] = 0x82;
    der[2] = (body_len >> 8) as u8;
    der[3] = (body_len & 0xff) as u8;
    let encoded = BASE64.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

// ---------------------------------------------------------------------------------------------
// Object building blocks
// ---------------------------------------------------------------------------------------------

/// Builder for `metadata`, emitting fields in apiserver order whatever order they were set in.
#[derive(Default)]
struct Meta {
    name: String,
    generate_name: Option<String>,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    owners: Vec<Value>,
    managed_fields: Option<Value>,
}

impl Meta {
    fn new(name: impl Into<String>) -> Self {
        Meta {
            name: name.into(),
            ..Meta::default()
        }
    }

    fn ns(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    fn generate_name(mut self, prefix: &str) -> Self {
        self.generate_name = Some(prefix.to_string());
        self
    }

    fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    fn labels(mut self, labels: &BTreeMap<String, String>) -> Self {
        self.labels
            .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }

    fn annotation(mut self, key: &str, value: impl Into<String>) -> Self {
        self.annotations.insert(key.to_string(), value.into());
        self
    }

    /// Adds a controller ownerReference to `kind`/`name` in this object's namespace.
    fn owner(mut self, api_version: &str, kind: &str, name: &str) -> Self {
        let uid = uid_for(kind, self.namespace.as_deref(), name);
        self.owners.push(json!({
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": true,
            "blockOwnerDeletion": true
        }));
        self
    }

    fn build(self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), Value::String(self.name));
        if let Some(g) = self.generate_name {
            m.insert("generateName".into(), Value::String(g));
        }
        if let Some(ns) = self.namespace {
            m.insert("namespace".into(), Value::String(ns));
        }
        if !self.labels.is_empty() {
            m.insert("labels".into(), string_map(&self.labels));
        }
        if !self.annotations.is_empty() {
            m.insert("annotations".into(), string_map(&self.annotations));
        }
        if !self.owners.is_empty() {
            m.insert("ownerReferences".into(), Value::Array(self.owners));
        }
        if let Some(mf) = self.managed_fields {
            m.insert("managedFields".into(), mf);
        }
        Value::Object(m)
    }
}

fn string_map(map: &BTreeMap<String, String>) -> Value {
    Value::Object(
        map.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn labels_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A built-in object; `kind` comes first as in the apiserver's JSON.
fn builtin(api_version: &str, kind: &str, metadata: Value, body: Vec<(&str, Value)>) -> Value {
    let mut m = Map::new();
    m.insert("kind".into(), Value::String(kind.into()));
    m.insert("apiVersion".into(), Value::String(api_version.into()));
    m.insert("metadata".into(), metadata);
    for (k, v) in body {
        m.insert(k.to_string(), v);
    }
    Value::Object(m)
}

/// Rebuilds `metadata` in apiserver field order (see [`META_ORDER`]).
fn reorder_metadata(object: &mut Value) {
    let Some(Value::Object(meta)) = object.get_mut("metadata") else {
        return;
    };
    let mut old = std::mem::take(meta);
    for key in META_ORDER {
        if let Some(v) = old.remove(*key) {
            meta.insert((*key).to_string(), v);
        }
    }
    meta.extend(old);
}

fn node_name(index: usize) -> String {
    format!("node-{index}")
}

/// InternalIP of node `index` (1-based), in the style of a kind cluster's docker network.
fn host_ip(index: usize) -> String {
    format!("172.18.{}.{}", (index + 1) / 250, (index + 1) % 250 + 2)
}

/// Third and second octet of node `index`'s /24 pod CIDR inside 10.244.0.0/12-ish space.
fn pod_cidr_octets(index: usize) -> (usize, usize) {
    (244 + index / 256, index % 256)
}

fn pod_cidr(index: usize) -> String {
    let (a, b) = pod_cidr_octets(index);
    format!("10.{a}.{b}.0/24")
}

/// Address number `n` (0-based) of node `index`'s pod CIDR; wraps after 252 pods, which a real
/// node (110 pods max) never reaches, only the large benchmark sets.
fn pod_ip(index: usize, n: usize) -> String {
    let (a, b) = pod_cidr_octets(index);
    format!("10.{a}.{b}.{}", n % 252 + 2)
}

// ---------------------------------------------------------------------------------------------
// Namespaces and nodes
// ---------------------------------------------------------------------------------------------

fn namespace_object(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Value {
    // The apiserver always adds kubernetes.io/metadata.name; it is included here so a simulator
    // without that admission step still serves what a real server would.
    let mut meta = Meta::new(name).label("kubernetes.io/metadata.name", name);
    for (k, v) in labels {
        meta = meta.label(k, v);
    }
    for (k, v) in annotations {
        meta = meta.annotation(k, *v);
    }
    builtin(
        "v1",
        "Namespace",
        meta.build(),
        vec![
            ("spec", json!({"finalizers": ["kubernetes"]})),
            ("status", json!({"phase": "Active"})),
        ],
    )
}

fn namespace_seed(name: &str, labels: &[(&str, &str)]) -> SeedObject {
    SeedObject::new("", "namespaces", namespace_object(name, labels, &[]))
}

/// Images every node reports as present (kubelet lists pulled images in node status).
const NODE_IMAGES: &[(&str, u64)] = &[
    ("docker.io/library/nginx:1.27", 72_955_450),
    ("docker.io/library/redis:7.2", 45_871_203),
    ("quay.io/prometheus/node-exporter:v1.8.1", 11_742_384),
    ("registry.k8s.io/pause:3.9", 321_520),
];

fn node_object(index: usize, extra_images: usize, rng: &mut StdRng) -> Value {
    let name = node_name(index);
    let zone = ["zone-a", "zone-b", "zone-c"][(index + 2) % 3];
    let joined = rfc3339(EPOCH - 3_600 + index as i64 * 17);
    let heartbeat = rfc3339(EPOCH + 900 + index as i64);
    let meta = Meta::new(&name)
        .label("beta.kubernetes.io/arch", "amd64")
        .label("beta.kubernetes.io/os", "linux")
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/hostname", &name)
        .label("kubernetes.io/os", "linux")
        .label("topology.kubernetes.io/zone", zone)
        .annotation(
            "kubeadm.alpha.kubernetes.io/cri-socket",
            "unix:///run/containerd/containerd.sock",
        )
        .annotation("node.alpha.kubernetes.io/ttl", "0")
        .annotation(
            "volumes.kubernetes.io/controller-managed-attach-detach",
            "true",
        );
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind,
            "status": status,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": joined,
            "reason": reason,
            "message": message
        })
    };
    let extra: Vec<(String, u64)> = (0..extra_images)
        .map(|k| {
            let image = format!(
                "registry.example.com/team-{}/service-{k}:v1.{}.{}",
                k % 7,
                k % 10,
                k % 5
            );
            (image, 20_000_000 + (k as u64 * 7_919_993) % 400_000_000)
        })
        .collect();
    let images: Vec<Value> = NODE_IMAGES
        .iter()
        .map(|(image, size)| (*image, *size))
        .chain(extra.iter().map(|(image, size)| (image.as_str(), *size)))
        .map(|(image, size)| {
            let repo = image.split(':').next().unwrap_or(image);
            json!({
                "names": [format!("{repo}@sha256:{}", stable_hex(image, 64)), image],
                "sizeBytes": size
            })
        })
        .collect();
    let machine_id = random_hex(rng, 32);
    builtin(
        "v1",
        "Node",
        meta.build(),
        vec![
            (
                "spec",
                json!({
                    "podCIDR": pod_cidr(index),
                    "podCIDRs": [pod_cidr(index)],
                    "providerID": format!("kind://docker/kcache/{name}")
                }),
            ),
            (
                "status",
                json!({
                    "capacity": {
                        "cpu": "4",
                        "ephemeral-storage": "102626232Ki",
                        "hugepages-1Gi": "0",
                        "hugepages-2Mi": "0",
                        "memory": "16374584Ki",
                        "pods": "110"
                    },
                    "allocatable": {
                        "cpu": "4",
                        "ephemeral-storage": "102626232Ki",
                        "hugepages-1Gi": "0",
                        "hugepages-2Mi": "0",
                        "memory": "16272184Ki",
                        "pods": "110"
                    },
                    "conditions": [
                        condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                            "kubelet has sufficient memory available"),
                        condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                            "kubelet has no disk pressure"),
                        condition("PIDPressure", "False", "KubeletHasSufficientPID",
                            "kubelet has sufficient PID available"),
                        condition("Ready", "True", "KubeletReady",
                            "kubelet is posting ready status"),
                    ],
                    "addresses": [
                        {"type": "InternalIP", "address": host_ip(index)},
                        {"type": "Hostname", "address": name}
                    ],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "nodeInfo": {
                        "machineID": machine_id,
                        "systemUUID": random_uuid(rng),
                        "bootID": random_uuid(rng),
                        "kernelVersion": "6.1.0-18-amd64",
                        "osImage": "Debian GNU/Linux 12 (bookworm)",
                        "containerRuntimeVersion": "containerd://1.7.13",
                        "kubeletVersion": "v1.28.7",
                        "kubeProxyVersion": "v1.28.7",
                        "operatingSystem": "linux",
                        "architecture": "amd64"
                    },
                    "images": images
                }),
            ),
        ],
    )
}

fn node_seed(index: usize, extra_images: usize, rng: &mut StdRng) -> SeedObject {
    SeedObject::new("", "nodes", node_object(index, extra_images, rng))
}

// ---------------------------------------------------------------------------------------------
// Pods: containers, specs, statuses and managedFields
// ---------------------------------------------------------------------------------------------

const API_ACCESS_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[derive(Debug, Clone)]
struct ContainerSpec {
    name: String,
    image: String,
    command: Vec<String>,
    args: Vec<String>,
    ports: Vec<(String, u16)>,
    env: Vec<Value>,
    requests: Vec<(&'static str, String)>,
    limits: Vec<(&'static str, String)>,
    mounts: Vec<Value>,
    readiness: Option<Value>,
}

impl ContainerSpec {
    fn new(name: &str, image: &str) -> Self {
        ContainerSpec {
            name: name.to_string(),
            image: image.to_string(),
            command: Vec::new(),
            args: Vec::new(),
            ports: Vec::new(),
            env: Vec::new(),
            requests: Vec::new(),
            limits: Vec::new(),
            mounts: Vec::new(),
            readiness: None,
        }
    }

    /// The container as stored; `api_volume` adds the service-account token mount that
    /// admission injects into pods (but not into workload templates).
    fn to_value(&self, api_volume: Option<&str>) -> Value {
        let mut c = Map::new();
        c.insert("name".into(), json!(self.name));
        c.insert("image".into(), json!(self.image));
        if !self.command.is_empty() {
            c.insert("command".into(), json!(self.command));
        }
        if !self.args.is_empty() {
            c.insert("args".into(), json!(self.args));
        }
        if !self.ports.is_empty() {
            let ports: Vec<Value> = self
                .ports
                .iter()
                .map(|(name, port)| json!({"name": name, "containerPort": port, "protocol": "TCP"}))
                .collect();
            c.insert("ports".into(), Value::Array(ports));
        }
        if !self.env.is_empty() {
            c.insert("env".into(), Value::Array(self.env.clone()));
        }
        let mut resources = Map::new();
        if !self.limits.is_empty() {
            resources.insert("limits".into(), resource_list(&self.limits));
        }
        if !self.requests.is_empty() {
            resources.insert("requests".into(), resource_list(&self.requests));
        }
        c.insert("resources".into(), Value::Object(resources));
        let mut mounts = self.mounts.clone();
        if let Some(vol) = api_volume {
            mounts.push(json!({"name": vol, "readOnly": true, "mountPath": API_ACCESS_MOUNT}));
        }
        if !mounts.is_empty() {
            c.insert("volumeMounts".into(), Value::Array(mounts));
        }
        if let Some(probe) = &self.readiness {
            c.insert("readinessProbe".into(), probe.clone());
        }
        c.insert(
            "terminationMessagePath".into(),
            json!("/dev/termination-log"),
        );
        c.insert("terminationMessagePolicy".into(), json!("File"));
        c.insert("imagePullPolicy".into(), json!("IfNotPresent"));
        Value::Object(c)
    }
}

fn resource_list(items: &[(&'static str, String)]) -> Value {
    let mut sorted: Vec<_> = items.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    Value::Object(
        sorted
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v)))
            .collect(),
    )
}

/// The parts of a pod spec that a workload's template and its pods share.
#[derive(Debug, Clone)]
struct PodShape {
    containers: Vec<ContainerSpec>,
    volumes: Vec<Value>,
    restart_policy: &'static str,
    grace_seconds: u32,
    hostname: Option<String>,
    subdomain: Option<String>,
    affinity: Option<Value>,
    extra_tolerations: Vec<Value>,
}

impl PodShape {
    fn new(containers: Vec<ContainerSpec>) -> Self {
        PodShape {
            containers,
            volumes: Vec::new(),
            restart_policy: "Always",
            grace_seconds: 30,
            hostname: None,
            subdomain: None,
            affinity: None,
            extra_tolerations: Vec::new(),
        }
    }

    /// The spec as stored in a Deployment/ReplicaSet/... template: defaulted, not admitted.
    fn template_spec(&self) -> Value {
        self.spec(PodSpecMode::Template, None, None)
    }

    /// `mode` decides which of the defaulting/admission fields are present, `node` is
    /// `spec.nodeName`, `api_volume` the name of the injected `kube-api-access-*` volume.
    fn spec(&self, mode: PodSpecMode, node: Option<&str>, api_volume: Option<&str>) -> Value {
        let admitted = mode == PodSpecMode::Admitted;
        let mut s = Map::new();
        let mut volumes = self.volumes.clone();
        if let (true, Some(vol)) = (admitted, api_volume) {
            volumes.push(api_access_volume(vol));
        }
        if !volumes.is_empty() {
            s.insert("volumes".into(), Value::Array(volumes));
        }
        let api_mount = if admitted { api_volume } else { None };
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|c| c.to_value(api_mount))
            .collect();
        s.insert("containers".into(), Value::Array(containers));
        s.insert("restartPolicy".into(), json!(self.restart_policy));
        s.insert(
            "terminationGracePeriodSeconds".into(),
            json!(self.grace_seconds),
        );
        s.insert("dnsPolicy".into(), json!("ClusterFirst"));
        if admitted {
            s.insert("serviceAccountName".into(), json!("default"));
            s.insert("serviceAccount".into(), json!("default"));
        }
        if mode != PodSpecMode::Template {
            if let Some(node) = node {
                s.insert("nodeName".into(), json!(node));
            }
        }
        s.insert("securityContext".into(), json!({}));
        if let Some(h) = &self.hostname {
            s.insert("hostname".into(), json!(h));
        }
        if let Some(d) = &self.subdomain {
            s.insert("subdomain".into(), json!(d));
        }
        if let Some(a) = &self.affinity {
            s.insert("affinity".into(), a.clone());
        }
        s.insert("schedulerName".into(), json!("default-scheduler"));
        if admitted {
            let mut tolerations = self.extra_tolerations.clone();
            for key in [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
            ] {
                if !tolerations.iter().any(|t| t["key"] == key) {
                    tolerations.push(json!({
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300
                    }));
                }
            }
            s.insert("tolerations".into(), Value::Array(tolerations));
            s.insert("priority".into(), json!(0));
        }
        if mode != PodSpecMode::Template {
            s.insert("enableServiceLinks".into(), json!(true));
        }
        if admitted {
            s.insert("preemptionPolicy".into(), json!("PreemptLowerPriority"));
        }
        Value::Object(s)
    }

    /// QoS class as the apiserver computes it from requests and limits.
    fn qos_class(&self) -> &'static str {
        let any = self
            .containers
            .iter()
            .any(|c| !c.requests.is_empty() || !c.limits.is_empty());
        if !any {
            return "BestEffort";
        }
        let guaranteed = self.containers.iter().all(|c| {
            ["cpu", "memory"].iter().all(|r| {
                let limit = c.limits.iter().find(|(k, _)| k == r).map(|(_, v)| v);
                let request = c.requests.iter().find(|(k, _)| k == r).map(|(_, v)| v);
                limit.is_some() && (request.is_none() || request == limit)
            })
        });
        if guaranteed {
            "Guaranteed"
        } else {
            "Burstable"
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodSpecMode {
    /// Inside a workload's pod template.
    Template,
    /// What the creating client sent after defaulting (what its managedFields entry covers).
    Sent,
    /// What is stored after admission (service account volume, tolerations, priority).
    Admitted,
}

fn api_access_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ],
            "defaultMode": 420
        }
    })
}

/// The fully qualified image reference the container runtime reports.
fn qualified_image(image: &str) -> String {
    let first = image.split('/').next().unwrap_or(image);
    if image.contains('/') && (first.contains('.') || first.contains(':')) {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

fn image_id(image: &str) -> String {
    let q = qualified_image(image);
    let repo = match q.rfind(':') {
        Some(i) if i > q.rfind('/').unwrap_or(0) => &q[..i],
        _ => q.as_str(),
    };
    format!("{repo}@sha256:{}", stable_hex(&q, 64))
}

/// Where and when a pod runs.
#[derive(Debug, Clone)]
struct Placement {
    node: String,
    host_ip: String,
    pod_ip: String,
    /// When the kubelet started the pod.
    started: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodPhase {
    /// Not scheduled, or scheduled but the kubelet has not started it.
    Pending,
    Running,
    Succeeded,
}

fn pod_condition(kind: &str, status: &str, at: i64) -> Value {
    json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": rfc3339(at)})
}

fn pod_status(
    shape: &PodShape,
    phase: PodPhase,
    placement: Option<&Placement>,
    rng: &mut StdRng,
) -> Value {
    let qos = shape.qos_class();
    let Some(p) = placement else {
        return json!({"phase": "Pending", "qosClass": qos});
    };
    if phase == PodPhase::Pending {
        return json!({
            "phase": "Pending",
            "conditions": [pod_condition("PodScheduled", "True", p.started)],
            "qosClass": qos
        });
    }
    let t0 = p.started;
    let running = phase == PodPhase::Running;
    let ready_at = t0 + 3;
    let statuses: Vec<Value> = shape
        .containers
        .iter()
        .map(|c| {
            let id = format!("containerd://{}", random_hex(rng, 64));
            let state = if running {
                json!({"running": {"startedAt": rfc3339(t0 + 2)}})
            } else {
                json!({"terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": rfc3339(t0 + 2),
                    "finishedAt": rfc3339(t0 + 9),
                    "containerID": id
                }})
            };
            json!({
                "name": c.name,
                "state": state,
                "lastState": {},
                "ready": running,
                "restartCount": 0,
                "image": qualified_image(&c.image),
                "imageID": image_id(&c.image),
                "containerID": id,
                "started": running
            })
        })
        .collect();
    let (ready_conditions, phase_name) = if running {
        (
            vec![
                pod_condition("Ready", "True", ready_at),
                pod_condition("ContainersReady", "True", ready_at),
            ],
            "Running",
        )
    } else {
        let mut ready = pod_condition("Ready", "False", t0 + 10);
        ready["reason"] = json!("PodCompleted");
        let mut containers = pod_condition("ContainersReady", "False", t0 + 10);
        containers["reason"] = json!("PodCompleted");
        (vec![ready, containers], "Succeeded")
    };
    let mut conditions = vec![pod_condition("Initialized", "True", t0)];
    conditions.extend(ready_conditions);
    conditions.push(pod_condition("PodScheduled", "True", t0));
    json!({
        "phase": phase_name,
        "conditions": conditions,
        "hostIP": p.host_ip,
        "hostIPs": [{"ip": p.host_ip}],
        "podIP": p.pod_ip,
        "podIPs": [{"ip": p.pod_ip}],
        "startTime": rfc3339(t0),
        "containerStatuses": statuses,
        "qosClass": qos
    })
}

/// Fields whose value, when an object, is itself listed as owned (`"."`) in managedFields:
/// granular maps (labels, data, resource lists) and optional nested structs.
const SELF_OWNED_FIELDS: &[&str] = &[
    "labels",
    "annotations",
    "data",
    "binaryData",
    "limits",
    "requests",
    "nodeSelector",
    "rollingUpdate",
    "configMap",
    "secret",
    "emptyDir",
    "readinessProbe",
    "livenessProbe",
    "httpGet",
    "tcpSocket",
    "valueFrom",
    "fieldRef",
    "secretKeyRef",
];

/// Key fields of associative lists; every other list is atomic in managedFields.
fn list_keys(field: &str, items: &[Value]) -> Option<&'static [&'static str]> {
    match field {
        "containers" | "initContainers" | "env" | "volumes" => Some(&["name"]),
        "ports" if items.iter().all(|i| i.get("containerPort").is_some()) => {
            Some(&["containerPort", "protocol"])
        }
        "ports" => Some(&["port", "protocol"]),
        "volumeMounts" => Some(&["mountPath"]),
        "conditions" => Some(&["type"]),
        "podIPs" | "hostIPs" => Some(&["ip"]),
        "ownerReferences" => Some(&["uid"]),
        _ => None,
    }
}

/// The `fieldsV1` set covering every field present in `value` (structured-merge-diff style:
/// `f:` struct/map members, `k:` associative list items, `.` for the field itself).
fn fields_v1(value: &Value) -> Value {
    field_set(value, "", false)
}

fn field_set(value: &Value, field: &str, self_owned: bool) -> Value {
    let mut out = BTreeMap::new();
    match value {
        Value::Object(m) if !m.is_empty() => {
            if self_owned || SELF_OWNED_FIELDS.contains(&field) {
                out.insert(".".to_string(), json!({}));
            }
            for (k, child) in m {
                out.insert(format!("f:{k}"), field_set(child, k, false));
            }
        }
        Value::Array(items) if !items.is_empty() => {
            if let Some(keys) = list_keys(field, items) {
                for item in items {
                    let key: Vec<String> = keys
                        .iter()
                        .map(|k| format!("{}:{}", json!(k), item.get(*k).unwrap_or(&Value::Null)))
                        .collect();
                    out.insert(
                        format!("k:{{{}}}", key.join(",")),
                        field_set(item, "", true),
                    );
                }
            }
        }
        _ => {}
    }
    Value::Object(out.into_iter().collect())
}

fn managed_entry(manager: &str, at: i64, fields: Value, subresource: Option<&str>) -> Value {
    let mut m = Map::new();
    m.insert("manager".into(), json!(manager));
    m.insert("operation".into(), json!("Update"));
    m.insert("apiVersion".into(), json!("v1"));
    m.insert("time".into(), json!(rfc3339(at)));
    m.insert("fieldsType".into(), json!("FieldsV1"));
    m.insert("fieldsV1".into(), fields);
    if let Some(s) = subresource {
        m.insert("subresource".into(), json!(s));
    }
    Value::Object(m)
}

/// Everything needed to build one pod.
struct PodPlan<'a> {
    namespace: &'a str,
    name: String,
    generate_name: Option<String>,
    labels: BTreeMap<String, String>,
    /// `(apiVersion, kind, name)` of the controlling owner.
    owner: Option<(&'static str, &'static str, String)>,
    shape: &'a PodShape,
    placement: Option<Placement>,
    phase: PodPhase,
    /// Whether to include the creator's and the kubelet's managedFields entries.
    managed_fields: bool,
}

fn build_pod(plan: PodPlan<'_>, rng: &mut StdRng) -> Value {
    let api_volume = format!("kube-api-access-{}", suffix(rng, 5));
    let node = plan.placement.as_ref().map(|p| p.node.as_str());
    let spec = plan
        .shape
        .spec(PodSpecMode::Admitted, node, Some(&api_volume));
    let status = pod_status(plan.shape, plan.phase, plan.placement.as_ref(), rng);
    let mut meta = Meta::new(&plan.name).ns(plan.namespace);
    if let Some(g) = &plan.generate_name {
        meta = meta.generate_name(g);
    }
    meta = meta.labels(&plan.labels);
    if let Some((api_version, kind, owner)) = &plan.owner {
        meta = meta.owner(api_version, kind, owner);
    }
    if plan.managed_fields {
        let created = plan.placement.as_ref().map_or(EPOCH, |p| p.started - 1);
        // What the creator sent: metadata it set plus the defaulted spec, without the fields
        // admission added afterwards (as in the recorded pods' kubectl-create entries).
        let mut sent_meta = Map::new();
        if let Some(g) = &plan.generate_name {
            sent_meta.insert("generateName".into(), json!(g));
        }
        if !plan.labels.is_empty() {
            sent_meta.insert("labels".into(), string_map(&plan.labels));
        }
        let creator = if plan.owner.is_some() {
            "kube-controller-manager"
        } else {
            "kubectl-create"
        };
        if plan.owner.is_some() {
            let owners = meta.owners.clone();
            sent_meta.insert("ownerReferences".into(), Value::Array(owners));
        }
        let sent = json!({
            "metadata": sent_meta,
            "spec": plan.shape.spec(PodSpecMode::Sent, node, None),
        });
        let mut entries = vec![managed_entry(creator, created, fields_v1(&sent), None)];
        if plan.phase != PodPhase::Pending || plan.placement.is_some() {
            let mut kubelet_status = status.clone();
            if let Some(m) = kubelet_status.as_object_mut() {
                m.remove("qosClass");
            }
            let at = plan.placement.as_ref().map_or(created, |p| p.started + 3);
            entries.push(managed_entry(
                "kubelet",
                at,
                fields_v1(&json!({"status": kubelet_status})),
                Some("status"),
            ));
        }
        meta.managed_fields = Some(Value::Array(entries));
    }
    builtin(
        "v1",
        "Pod",
        meta.build(),
        vec![("spec", spec), ("status", status)],
    )
}

// ---------------------------------------------------------------------------------------------
// Applications of the demo cluster
// ---------------------------------------------------------------------------------------------

/// A kind of application a namespace runs.
#[derive(Debug, Clone, Copy)]
struct AppProfile {
    name: &'static str,
    image: &'static str,
    port: u16,
    port_name: &'static str,
    cpu: &'static str,
    memory: &'static str,
    memory_limit: &'static str,
    args: &'static [&'static str],
    /// File in the app's `<name>-config` ConfigMap and the directory it is mounted at.
    config_file: &'static str,
    config_dir: &'static str,
}

const fn app(
    name: &'static str,
    image: &'static str,
    port: (u16, &'static str),
    resources: (&'static str, &'static str, &'static str),
    args: &'static [&'static str],
    config: (&'static str, &'static str),
) -> AppProfile {
    AppProfile {
        name,
        image,
        port: port.0,
        port_name: port.1,
        cpu: resources.0,
        memory: resources.1,
        memory_limit: resources.2,
        args,
        config_file: config.0,
        config_dir: config.1,
    }
}

const SHOP_APPS: &[AppProfile] = &[
    app(
        "storefront",
        "nginx:1.27",
        (80, "http"),
        ("100m", "64Mi", "128Mi"),
        &[],
        ("default.conf", "/etc/nginx/conf.d"),
    ),
    app(
        "cart",
        "redis:7.2",
        (6379, "redis"),
        ("50m", "128Mi", "256Mi"),
        &["redis-server", "/etc/redis/redis.conf"],
        ("redis.conf", "/etc/redis"),
    ),
    app(
        "catalog",
        "httpd:2.4",
        (80, "http"),
        ("100m", "96Mi", "192Mi"),
        &[],
        ("catalog.conf", "/usr/local/apache2/conf/extra"),
    ),
];
const PAYMENTS_APPS: &[AppProfile] = &[
    app(
        "payments-api",
        "python:3.12-slim",
        (8000, "http"),
        ("250m", "256Mi", "512Mi"),
        &["python", "-m", "http.server", "8000"],
        ("settings.yaml", "/etc/payments"),
    ),
    app(
        "ledger-cache",
        "memcached:1.6",
        (11211, "memcache"),
        ("50m", "64Mi", "128Mi"),
        &["memcached", "-m", "64"],
        ("memcached.conf", "/etc/memcached"),
    ),
    app(
        "fraud-check",
        "nginx:1.27",
        (8080, "http"),
        ("100m", "64Mi", "128Mi"),
        &[],
        ("default.conf", "/etc/nginx/conf.d"),
    ),
];
const MONITORING_APPS: &[AppProfile] = &[
    app(
        "prometheus",
        "prom/prometheus:v2.53.0",
        (9090, "web"),
        ("200m", "512Mi", "1Gi"),
        &["--config.file=/etc/prometheus/prometheus.yml"],
        ("prometheus.yml", "/etc/prometheus"),
    ),
    app(
        "grafana",
        "grafana/grafana:11.1.0",
        (3000, "http"),
        ("100m", "128Mi", "256Mi"),
        &[],
        ("grafana.ini", "/etc/grafana"),
    ),
    app(
        "alertmanager",
        "prom/alertmanager:v0.27.0",
        (9093, "web"),
        ("50m", "64Mi", "128Mi"),
        &["--config.file=/etc/alertmanager/alertmanager.yml"],
        ("alertmanager.yml", "/etc/alertmanager"),
    ),
];
const DEFAULT_APPS: &[AppProfile] = &[
    app(
        "hello",
        "nginx:1.27",
        (80, "http"),
        ("50m", "32Mi", "64Mi"),
        &[],
        ("default.conf", "/etc/nginx/conf.d"),
    ),
    app(
        "session-cache",
        "redis:7.2",
        (6379, "redis"),
        ("50m", "128Mi", "256Mi"),
        &["redis-server", "/etc/redis/redis.conf"],
        ("redis.conf", "/etc/redis"),
    ),
    app(
        "echo",
        "hashicorp/http-echo:1.0",
        (5678, "http"),
        ("10m", "16Mi", "32Mi"),
        &["-text=hello from kcache"],
        ("banner.txt", "/etc/echo"),
    ),
];

const POSTGRES: AppProfile = app(
    "postgres",
    "postgres:16",
    (5432, "postgres"),
    ("250m", "256Mi", "512Mi"),
    &[],
    ("postgresql.conf", "/etc/postgresql"),
);
const NODE_EXPORTER: AppProfile = app(
    "node-exporter",
    "quay.io/prometheus/node-exporter:v1.8.1",
    (9100, "metrics"),
    ("10m", "24Mi", "48Mi"),
    &["--path.rootfs=/host"],
    ("", ""),
);

fn apps_for(namespace: &str, index: usize) -> Vec<AppProfile> {
    match namespace {
        "shop" => SHOP_APPS.to_vec(),
        "payments" => PAYMENTS_APPS.to_vec(),
        "monitoring" => MONITORING_APPS.to_vec(),
        "default" => DEFAULT_APPS.to_vec(),
        _ => {
            // Other namespaces get a rotation of everything, so neighbours differ.
            let all: Vec<AppProfile> =
                [SHOP_APPS, PAYMENTS_APPS, MONITORING_APPS, DEFAULT_APPS].concat();
            let n = all.len();
            (0..n).map(|i| all[(i + index * 3) % n]).collect()
        }
    }
}

/// Container name: the image's repository basename, as `kubectl create deployment` does.
fn container_name(image: &str) -> String {
    let base = image.rsplit('/').next().unwrap_or(image);
    base.split(':').next().unwrap_or(base).to_string()
}

fn config_text(app: &AppProfile, namespace: &str) -> String {
    let port = app.port;
    let name = app.name;
    match app.config_file {
        "default.conf" => format!(
            "server {{\n    listen {port};\n    server_name {name}.{namespace}.svc;\n    location / {{\n        root /usr/share/nginx/html;\n        index index.html;\n    }}\n    location /healthz {{\n        return 200 'ok';\n    }}\n}}\n"
        ),
        "redis.conf" => "maxmemory 192mb\nmaxmemory-policy allkeys-lru\nappendonly no\nsave \"\"\n".to_string(),
        "prometheus.yml" => format!(
            "global:\n  scrape_interval: 30s\nscrape_configs:\n  - job_name: node-exporter\n    kubernetes_sd_configs:\n      - role: endpoints\n        namespaces:\n          names: [{namespace}]\n"
        ),
        "postgresql.conf" => "max_connections = 100\nshared_buffers = 128MB\nlog_min_duration_statement = 250\n".to_string(),
        file => format!(
            "# {file} for {name}\nlisten: 0.0.0.0:{port}\nlogLevel: info\nnamespace: {namespace}\nmetrics:\n  enabled: true\n"
        ),
    }
}

fn app_container(app: &AppProfile, with_config: bool) -> ContainerSpec {
    let mut c = ContainerSpec::new(&container_name(app.image), app.image);
    c.args = app.args.iter().map(|s| s.to_string()).collect();
    c.ports = vec![(app.port_name.to_string(), app.port)];
    c.env = vec![
        json!({"name": "APP_NAME", "value": app.name}),
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}}),
    ];
    c.requests = vec![
        ("cpu", app.cpu.to_string()),
        ("memory", app.memory.to_string()),
    ];
    c.limits = vec![("memory", app.memory_limit.to_string())];
    if with_config && !app.config_dir.is_empty() {
        c.mounts
            .push(json!({"name": "config", "readOnly": true, "mountPath": app.config_dir}));
    }
    c.readiness = Some(json!({
        "tcpSocket": {"port": app.port},
        "initialDelaySeconds": 3,
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3
    }));
    c
}

fn app_shape(app: &AppProfile, config_map: Option<&str>) -> PodShape {
    let mut shape = PodShape::new(vec![app_container(app, config_map.is_some())]);
    if let Some(cm) = config_map {
        shape
            .volumes
            .push(json!({"name": "config", "configMap": {"name": cm, "defaultMode": 420}}));
    }
    shape
}

// ---------------------------------------------------------------------------------------------
// The demo cluster
// ---------------------------------------------------------------------------------------------

/// Round-robin pod placement over the nodes, with per-node pod IP counters.
struct Scheduler {
    nodes: usize,
    next: usize,
    allocated: Vec<usize>,
}

impl Scheduler {
    fn new(nodes: usize) -> Self {
        Scheduler {
            nodes,
            next: 0,
            allocated: vec![0; nodes],
        }
    }

    /// Next node in turn, or `None` when there are no nodes (pods then stay Pending).
    fn place(&mut self, started: i64) -> Option<Placement> {
        if self.nodes == 0 {
            return None;
        }
        let i = self.next % self.nodes;
        self.next += 1;
        Some(self.place_on(i + 1, started))
    }

    /// Placement on node `index` (1-based), e.g. for a DaemonSet pod.
    fn place_on(&mut self, index: usize, started: i64) -> Placement {
        let n = self.allocated[index - 1];
        self.allocated[index - 1] += 1;
        Placement {
            node: node_name(index),
            host_ip: host_ip(index),
            pod_ip: pod_ip(index, n),
            started,
        }
    }
}

/// Appends `-2`, `-3`, ... until `name` is unused.
fn unique_name(base: String, used: &mut HashSet<String>) -> String {
    let mut name = base.clone();
    let mut n = 2;
    while used.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    used.insert(name.clone());
    name
}

fn demo_namespace_names(count: usize) -> Vec<String> {
    const NAMED: [&str; 4] = ["shop", "payments", "monitoring", "default"];
    (0..count)
        .map(|i| {
            NAMED
                .get(i)
                .map_or_else(|| format!("team-{}", i + 1), |s| s.to_string())
        })
        .collect()
}

/// A deployment planned before anything is emitted, so Services and EndpointSlices (which
/// come first in creation order) can already list its pods.
struct PlannedDeployment {
    app: AppProfile,
    name: String,
    hash: String,
    shape: PodShape,
    pods: Vec<PlannedPod>,
}

struct PlannedPod {
    name: String,
    placement: Option<Placement>,
}

struct Demo<'a> {
    spec: &'a DemoSpec,
    rng: StdRng,
    out: Vec<SeedObject>,
    scheduler: Scheduler,
    /// Seconds after [`EPOCH`] of the next thing that "happens"; advances as objects are made.
    clock: i64,
    next_cluster_ip: u32,
    ca_pem: String,
}

impl Demo<'_> {
    fn tick(&mut self, secs: i64) -> i64 {
        self.clock += secs;
        EPOCH + self.clock
    }

    fn cluster_ip(&mut self) -> String {
        let n = self.next_cluster_ip;
        self.next_cluster_ip += 1;
        format!("10.96.{}.{}", n / 250, n % 250 + 2)
    }

    fn push(&mut self, group: &'static str, resource: &'static str, object: Value) {
        self.out.push(SeedObject::new(group, resource, object));
    }

    fn namespace(&mut self, ns: &str, ns_index: usize) {
        let apps = apps_for(ns, ns_index);
        let mut used = HashSet::new();
        let app_names: Vec<(AppProfile, String)> = (0..self.spec.deployments_per_namespace)
            .map(|d| {
                let app = apps[d % apps.len()];
                (app, unique_name(app.name.to_string(), &mut used))
            })
            .collect();

        // ConfigMaps first, because deployments mount their "<app>-config".
        let mut cm_names = HashSet::new();
        let mut config_maps = Vec::new();
        for i in 0..self.spec.configmaps_per_namespace {
            let cm = self.config_map(ns, i, &app_names, &mut cm_names);
            config_maps.push(cm);
        }
        let mut deployments = Vec::new();
        for (app, name) in &app_names {
            let cm = format!("{name}-config");
            let config = cm_names.contains(&cm).then_some(cm.as_str());
            let shape = app_shape(app, config);
            let hash = suffix(&mut self.rng, 10);
            let started = self.clock + 60;
            let pods = (0..self.spec.replicas)
                .map(|_| {
                    let t = EPOCH + started + self.rng.random_range(0..20);
                    PlannedPod {
                        name: format!("{name}-{hash}-{}", suffix(&mut self.rng, 5)),
                        placement: self.scheduler.place(t),
                    }
                })
                .collect();
            deployments.push(PlannedDeployment {
                app: *app,
                name: name.clone(),
                hash,
                shape,
                pods,
            });
        }

        self.push(
            "",
            "serviceaccounts",
            builtin(
                "v1",
                "ServiceAccount",
                Meta::new("default").ns(ns).build(),
                vec![],
            ),
        );
        for cm in config_maps {
            self.push("", "configmaps", cm);
        }
        let mut secret_names = HashSet::new();
        for i in 0..self.spec.secrets_per_namespace {
            let secret = self.secret(ns, i, &app_names, &mut secret_names);
            self.push("", "secrets", secret);
        }
        self.services(ns, &deployments);
        for d in &deployments {
            self.deployment(ns, d);
        }
        self.extras(ns, ns_index);
        // Events for the first deployment's first pod, as `kubectl get events` would show.
        if let Some(d) = deployments.first() {
            if let Some(pod) = d.pods.first() {
                let container = &d.shape.containers[0];
                self.pod_events(
                    ns,
                    &pod.name,
                    pod.placement.as_ref(),
                    &container.name,
                    &container.image,
                );
            }
        }
    }

    fn config_map(
        &mut self,
        ns: &str,
        i: usize,
        apps: &[(AppProfile, String)],
        used: &mut HashSet<String>,
    ) -> Value {
        if i == 0 {
            used.insert("kube-root-ca.crt".to_string());
            // Published into every namespace by kube-controller-manager; pods' projected
            // service-account volume reads it.
            let meta = Meta::new("kube-root-ca.crt").ns(ns).annotation(
                "kubernetes.io/description",
                "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.",
            );
            return builtin(
                "v1",
                "ConfigMap",
                meta.build(),
                vec![("data", json!({"ca.crt": self.ca_pem}))],
            );
        }
        if apps.is_empty() {
            let name = unique_name(format!("{ns}-settings"), used);
            let meta = Meta::new(&name).ns(ns);
            return builtin(
                "v1",
                "ConfigMap",
                meta.build(),
                vec![("data", json!({"LOG_LEVEL": "info", "REGION": "eu-west-1"}))],
            );
        }
        let j = i - 1;
        let (app, app_name) = &apps[j % apps.len()];
        let variant = j / apps.len();
        let base = match variant {
            0 => format!("{app_name}-config"),
            1 => format!("{app_name}-env"),
            2 => format!("{app_name}-flags"),
            _ => format!("{app_name}-config"),
        };
        let name = unique_name(base, used);
        let meta = Meta::new(&name).ns(ns).label("app", app_name);
        let data = match variant {
            1 => json!({
                "LOG_LEVEL": (["info", "debug", "warn"][self.rng.random_range(0..3)]),
                "LISTEN_PORT": app.port.to_string(),
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.monitoring.svc:4317",
                "TZ": "UTC"
            }),
            2 => {
                let mut flags = Map::new();
                for flag in ["new-checkout", "dark-mode", "async-refunds", "beta-search"] {
                    flags.insert(flag.into(), json!(self.rng.random_bool(0.5).to_string()));
                }
                json!({"flags.json": Value::Object(flags).to_string()})
            }
            _ => {
                let mut data = Map::new();
                let file = if app.config_file.is_empty() {
                    "config.yaml"
                } else {
                    app.config_file
                };
                data.insert(file.into(), json!(config_text(app, ns)));
                Value::Object(data)
            }
        };
        builtin("v1", "ConfigMap", meta.build(), vec![("data", data)])
    }

    fn secret(
        &mut self,
        ns: &str,
        i: usize,
        apps: &[(AppProfile, String)],
        used: &mut HashSet<String>,
    ) -> Value {
        let app_name = apps
            .get(i % apps.len().max(1))
            .map_or_else(|| ns.to_string(), |(_, n)| n.clone());
        let (base, kind, data) = match i % 3 {
            0 => {
                let password: String = suffix(&mut self.rng, 20);
                (
                    format!("{app_name}-credentials"),
                    "Opaque",
                    json!({"password": b64(&password), "username": b64(&app_name.replace('-', "_"))}),
                )
            }
            1 => {
                let crt = fake_pem(&mut self.rng, "CERTIFICATE", 420);
                let key = fake_pem(&mut self.rng, "PRIVATE KEY", 300);
                (
                    format!("{app_name}-tls"),
                    "kubernetes.io/tls",
                    json!({"tls.crt": b64(&crt), "tls.key": b64(&key)}),
                )
            }
            _ => {
                let token = suffix(&mut self.rng, 24);
                let auth = b64(&format!("robot:{token}"));
                let config = json!({"auths": {"registry.example.com": {"username": "robot", "password": token, "auth": auth}}});
                (
                    "registry-credentials".to_string(),
                    "kubernetes.io/dockerconfigjson",
                    json!({".dockerconfigjson": b64(&config.to_string())}),
                )
            }
        };
        let name = unique_name(base, used);
        let mut meta = Meta::new(&name).ns(ns);
        if kind != "kubernetes.io/dockerconfigjson" {
            meta = meta.label("app", &app_name);
        }
        builtin(
            "v1",
            "Secret",
            meta.build(),
            vec![("data", data), ("type", json!(kind))],
        )
    }

    fn services(&mut self, ns: &str, deployments: &[PlannedDeployment]) {
        let mut used = HashSet::new();
        let mut slices = Vec::new();
        for i in 0..self.spec.services_per_namespace {
            let Some(d) = deployments.get(i % deployments.len().max(1)) else {
                // Nothing to select: an ExternalName service, as used for off-cluster databases.
                let name = unique_name(format!("external-db-{}", i + 1), &mut used);
                let meta = Meta::new(&name).ns(ns);
                let svc = builtin(
                    "v1",
                    "Service",
                    meta.build(),
                    vec![
                        (
                            "spec",
                            json!({"type": "ExternalName", "sessionAffinity": "None", "externalName": format!("db{}.example.com", i + 1)}),
                        ),
                        ("status", json!({"loadBalancer": {}})),
                    ],
                );
                self.push("", "services", svc);
                continue;
            };
            let (base, port, port_name) = if i < deployments.len() {
                (d.name.clone(), d.app.port, d.app.port_name)
            } else {
                (format!("{}-metrics", d.name), 9102, "metrics")
            };
            let name = unique_name(base, &mut used);
            let ip = self.cluster_ip();
            let meta = Meta::new(&name).ns(ns).label("app", &d.name);
            let svc = builtin(
                "v1",
                "Service",
                meta.build(),
                vec![
                    (
                        "spec",
                        json!({
                            "ports": [{"name": port_name, "protocol": "TCP", "port": port, "targetPort": port}],
                            "selector": {"app": d.name},
                            "clusterIP": ip,
                            "clusterIPs": [ip],
                            "type": "ClusterIP",
                            "sessionAffinity": "None",
                            "ipFamilies": ["IPv4"],
                            "ipFamilyPolicy": "SingleStack",
                            "internalTrafficPolicy": "Cluster"
                        }),
                    ),
                    ("status", json!({"loadBalancer": {}})),
                ],
            );
            self.push("", "services", svc);
            let pods: Vec<(&str, Option<&Placement>)> = d
                .pods
                .iter()
                .map(|p| (p.name.as_str(), p.placement.as_ref()))
                .collect();
            let slice = self.endpoint_slice(ns, &name, &d.name, (port_name, port), &pods);
            slices.push(slice);
        }
        for s in slices {
            self.push("discovery.k8s.io", "endpointslices", s);
        }
    }

    fn endpoint_slice(
        &mut self,
        ns: &str,
        service: &str,
        app: &str,
        port: (&str, u16),
        pods: &[(&str, Option<&Placement>)],
    ) -> Value {
        let endpoints: Vec<Value> = pods
            .iter()
            .filter_map(|(pod, placement)| {
                let p = (*placement)?;
                Some(json!({
                    "addresses": [p.pod_ip],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "targetRef": {"kind": "Pod", "namespace": ns, "name": pod, "uid": uid_for("Pod", Some(ns), pod)},
                    "nodeName": p.node
                }))
            })
            .collect();
        let changed = self.tick(1);
        let meta = Meta::new(format!("{service}-{}", suffix(&mut self.rng, 5)))
            .generate_name(&format!("{service}-"))
            .ns(ns)
            .label("app", app)
            .label(
                "endpointslice.kubernetes.io/managed-by",
                "endpointslice-controller.k8s.io",
            )
            .label("kubernetes.io/service-name", service)
            .annotation(
                "endpoints.kubernetes.io/last-change-trigger-time",
                rfc3339(changed),
            )
            .owner("v1", "Service", service);
        builtin(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            meta.build(),
            vec![
                ("addressType", json!("IPv4")),
                ("endpoints", Value::Array(endpoints)),
                (
                    "ports",
                    json!([{"name": port.0, "protocol": "TCP", "port": port.1}]),
                ),
            ],
        )
    }

    fn deployment(&mut self, ns: &str, d: &PlannedDeployment) {
        let replicas = d.pods.len();
        let ready = d.pods.iter().filter(|p| p.placement.is_some()).count();
        let created = self.tick(5);
        let rs_name = format!("{}-{}", d.name, d.hash);
        let app_labels = labels_of(&[("app", d.name.as_str())]);
        let template = |labels: &BTreeMap<String, String>| json!({"metadata": {"creationTimestamp": null, "labels": string_map(labels)}, "spec": d.shape.template_spec()});
        let (available, reason, message) = if ready == replicas {
            (
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            )
        } else {
            (
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        };
        let mut status = Map::new();
        status.insert("observedGeneration".into(), json!(1));
        if replicas > 0 {
            status.insert("replicas".into(), json!(replicas));
            status.insert("updatedReplicas".into(), json!(replicas));
        }
        if ready > 0 {
            status.insert("readyReplicas".into(), json!(ready));
            status.insert("availableReplicas".into(), json!(ready));
        }
        if ready < replicas {
            status.insert("unavailableReplicas".into(), json!(replicas - ready));
        }
        let t = rfc3339(created + 25);
        status.insert(
            "conditions".into(),
            json!([
                {"type": "Available", "status": available, "lastUpdateTime": t, "lastTransitionTime": t, "reason": reason, "message": message},
                {"type": "Progressing", "status": "True", "lastUpdateTime": t, "lastTransitionTime": rfc3339(created),
                 "reason": "NewReplicaSetAvailable", "message": format!("ReplicaSet \"{rs_name}\" has successfully progressed.")}
            ]),
        );
        let meta = Meta::new(&d.name)
            .ns(ns)
            .labels(&app_labels)
            .annotation("deployment.kubernetes.io/revision", "1");
        let dep = builtin(
            "apps/v1",
            "Deployment",
            meta.build(),
            vec![
                (
                    "spec",
                    json!({
                        "replicas": replicas,
                        "selector": {"matchLabels": string_map(&app_labels)},
                        "template": template(&app_labels),
                        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
                        "revisionHistoryLimit": 10,
                        "progressDeadlineSeconds": 600
                    }),
                ),
                ("status", Value::Object(status)),
            ],
        );
        self.push("apps", "deployments", dep);

        let mut rs_labels = app_labels.clone();
        rs_labels.insert("pod-template-hash".into(), d.hash.clone());
        let surge = replicas.div_ceil(4);
        let meta = Meta::new(&rs_name)
            .ns(ns)
            .labels(&rs_labels)
            .annotation(
                "deployment.kubernetes.io/desired-replicas",
                replicas.to_string(),
            )
            .annotation(
                "deployment.kubernetes.io/max-replicas",
                (replicas + surge).to_string(),
            )
            .annotation("deployment.kubernetes.io/revision", "1")
            .owner("apps/v1", "Deployment", &d.name);
        let mut rs_status = Map::new();
        rs_status.insert("replicas".into(), json!(replicas));
        if replicas > 0 {
            rs_status.insert("fullyLabeledReplicas".into(), json!(replicas));
        }
        if ready > 0 {
            rs_status.insert("readyReplicas".into(), json!(ready));
            rs_status.insert("availableReplicas".into(), json!(ready));
        }
        rs_status.insert("observedGeneration".into(), json!(1));
        let rs = builtin(
            "apps/v1",
            "ReplicaSet",
            meta.build(),
            vec![
                (
                    "spec",
                    json!({
                        "replicas": replicas,
                        "selector": {"matchLabels": string_map(&rs_labels)},
                        "template": template(&rs_labels)
                    }),
                ),
                ("status", Value::Object(rs_status)),
            ],
        );
        self.push("apps", "replicasets", rs);

        for p in &d.pods {
            let phase = if p.placement.is_some() {
                PodPhase::Running
            } else {
                PodPhase::Pending
            };
            let pod = build_pod(
                PodPlan {
                    namespace: ns,
                    name: p.name.clone(),
                    generate_name: Some(format!("{rs_name}-")),
                    labels: rs_labels.clone(),
                    owner: Some(("apps/v1", "ReplicaSet", rs_name.clone())),
                    shape: &d.shape,
                    placement: p.placement.clone(),
                    phase,
                    managed_fields: self.spec.pod_managed_fields,
                },
                &mut self.rng,
            );
            self.push("", "pods", pod);
        }
    }

    /// The non-Deployment workloads: a Job in the first namespace, a StatefulSet in the second
    /// and a DaemonSet in the third (all in the first one when there are fewer namespaces).
    fn extras(&mut self, ns: &str, ns_index: usize) {
        let n = self.spec.namespaces;
        if ns_index == 0 {
            self.job(ns);
        }
        if ns_index == 1 % n {
            self.stateful_set(ns);
        }
        if ns_index == 2 % n {
            self.daemon_set(ns);
        }
    }

    fn job(&mut self, ns: &str) {
        let name = "schema-migrate";
        let uid = uid_for("Job", Some(ns), name);
        let labels = labels_of(&[
            ("batch.kubernetes.io/controller-uid", uid.as_str()),
            ("batch.kubernetes.io/job-name", name),
            ("controller-uid", uid.as_str()),
            ("job-name", name),
        ]);
        let mut c = ContainerSpec::new("migrate", "busybox:1.36");
        c.command = vec![
            "sh".into(),
            "-c".into(),
            "echo applying migrations && sleep 5".into(),
        ];
        c.requests = vec![("cpu", "10m".into()), ("memory", "16Mi".into())];
        let mut shape = PodShape::new(vec![c]);
        shape.restart_policy = "Never";
        let start = self.tick(10);
        let placement = self.scheduler.place(start);
        let done = placement.is_some();
        let mut status = Map::new();
        status.insert("startTime".into(), json!(rfc3339(start)));
        if done {
            status.insert("completionTime".into(), json!(rfc3339(start + 12)));
            status.insert("succeeded".into(), json!(1));
            status.insert(
                "conditions".into(),
                json!([{"type": "Complete", "status": "True", "lastProbeTime": rfc3339(start + 12), "lastTransitionTime": rfc3339(start + 12)}]),
            );
        } else {
            status.insert("active".into(), json!(1));
        }
        status.insert("uncountedTerminatedPods".into(), json!({}));
        status.insert("ready".into(), json!(0));
        let meta = Meta::new(name)
            .ns(ns)
            .label("batch.kubernetes.io/controller-uid", &uid)
            .label("batch.kubernetes.io/job-name", name)
            .label("controller-uid", &uid)
            .label("job-name", name);
        let job = builtin(
            "batch/v1",
            "Job",
            meta.build(),
            vec![
                (
                    "spec",
                    json!({
                        "parallelism": 1,
                        "completions": 1,
                        "backoffLimit": 6,
                        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                        "template": {"metadata": {"creationTimestamp": null, "labels": string_map(&labels)}, "spec": shape.template_spec()},
                        "completionMode": "NonIndexed",
                        "suspend": false
                    }),
                ),
                ("status", Value::Object(status)),
            ],
        );
        self.push("batch", "jobs", job);
        let pod_name = format!("{name}-{}", suffix(&mut self.rng, 5));
        let pod = build_pod(
            PodPlan {
                namespace: ns,
                name: pod_name,
                generate_name: Some(format!("{name}-")),
                labels,
                owner: Some(("batch/v1", "Job", name.to_string())),
                shape: &shape,
                placement,
                phase: if done {
                    PodPhase::Succeeded
                } else {
                    PodPhase::Pending
                },
                managed_fields: false,
            },
            &mut self.rng,
        );
        self.push("", "pods", pod);
    }

    fn stateful_set(&mut self, ns: &str) {
        let app = POSTGRES;
        let name = app.name;
        let replicas = self.spec.replicas;
        let revision = format!("{name}-{}", suffix(&mut self.rng, 10));
        let mut shape = app_shape(&app, None);
        shape.containers[0]
            .env
            .push(json!({"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"}));
        shape.containers[0]
            .env
            .push(json!({"name": "POSTGRES_HOST_AUTH_METHOD", "value": "trust"}));
        shape.containers[0]
            .mounts
            .push(json!({"name": "data", "mountPath": "/var/lib/postgresql/data"}));
        shape.volumes.push(json!({"name": "data", "emptyDir": {}}));
        let labels = labels_of(&[("app", name)]);

        // The governing headless Service and its EndpointSlice come with the StatefulSet.
        let meta = Meta::new(name).ns(ns).labels(&labels);
        let svc = builtin(
            "v1",
            "Service",
            meta.build(),
            vec![
                (
                    "spec",
                    json!({
                        "ports": [{"name": app.port_name, "protocol": "TCP", "port": app.port, "targetPort": app.port}],
                        "selector": {"app": name},
                        "clusterIP": "None",
                        "clusterIPs": ["None"],
                        "type": "ClusterIP",
                        "sessionAffinity": "None",
                        "ipFamilies": ["IPv4"],
                        "ipFamilyPolicy": "SingleStack",
                        "internalTrafficPolicy": "Cluster"
                    }),
                ),
                ("status", json!({"loadBalancer": {}})),
            ],
        );
        self.push("", "services", svc);
        let start = self.tick(30);
        let pods: Vec<(String, Option<Placement>)> = (0..replicas)
            .map(|i| {
                (
                    format!("{name}-{i}"),
                    self.scheduler.place(start + i as i64 * 15),
                )
            })
            .collect();
        let refs: Vec<(&str, Option<&Placement>)> =
            pods.iter().map(|(n, p)| (n.as_str(), p.as_ref())).collect();
        let slice = self.endpoint_slice(ns, name, name, (app.port_name, app.port), &refs);
        self.push("discovery.k8s.io", "endpointslices", slice);

        let ready = pods.iter().filter(|(_, p)| p.is_some()).count();
        let mut status = Map::new();
        status.insert("observedGeneration".into(), json!(1));
        status.insert("replicas".into(), json!(replicas));
        if ready > 0 {
            status.insert("readyReplicas".into(), json!(ready));
        }
        status.insert("currentReplicas".into(), json!(replicas));
        status.insert("updatedReplicas".into(), json!(replicas));
        status.insert("currentRevision".into(), json!(revision));
        status.insert("updateRevision".into(), json!(revision));
        status.insert("collisionCount".into(), json!(0));
        status.insert("availableReplicas".into(), json!(ready));
        let sts = builtin(
            "apps/v1",
            "StatefulSet",
            Meta::new(name).ns(ns).labels(&labels).build(),
            vec![
                (
                    "spec",
                    json!({
                        "replicas": replicas,
                        "selector": {"matchLabels": string_map(&labels)},
                        "template": {"metadata": {"creationTimestamp": null, "labels": string_map(&labels)}, "spec": shape.template_spec()},
                        "serviceName": name,
                        "podManagementPolicy": "OrderedReady",
                        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                        "revisionHistoryLimit": 10,
                        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"}
                    }),
                ),
                ("status", Value::Object(status)),
            ],
        );
        self.push("apps", "statefulsets", sts);
        for (i, (pod_name, placement)) in pods.into_iter().enumerate() {
            let mut pod_shape = shape.clone();
            pod_shape.hostname = Some(pod_name.clone());
            // The controller names each pod's DNS entry under the headless service.
            pod_shape.subdomain = Some(name.to_string());
            let mut pod_labels = labels.clone();
            pod_labels.insert("apps.kubernetes.io/pod-index".into(), i.to_string());
            pod_labels.insert("controller-revision-hash".into(), revision.clone());
            pod_labels.insert(
                "statefulset.kubernetes.io/pod-name".into(),
                pod_name.clone(),
            );
            let phase = if placement.is_some() {
                PodPhase::Running
            } else {
                PodPhase::Pending
            };
            let pod = build_pod(
                PodPlan {
                    namespace: ns,
                    name: pod_name,
                    generate_name: Some(format!("{name}-")),
                    labels: pod_labels,
                    owner: Some(("apps/v1", "StatefulSet", name.to_string())),
                    shape: &pod_shape,
                    placement,
                    phase,
                    managed_fields: false,
                },
                &mut self.rng,
            );
            self.push("", "pods", pod);
        }
    }

    fn daemon_set(&mut self, ns: &str) {
        let app = NODE_EXPORTER;
        let name = app.name;
        let hash = suffix(&mut self.rng, 9);
        let mut shape = app_shape(&app, None);
        shape.containers[0]
            .mounts
            .push(json!({"name": "root", "readOnly": true, "mountPath": "/host", "mountPropagation": "HostToContainer"}));
        shape
            .volumes
            .push(json!({"name": "root", "hostPath": {"path": "/", "type": ""}}));
        let labels = labels_of(&[("app", name)]);
        let nodes = self.spec.nodes;
        let ds = builtin(
            "apps/v1",
            "DaemonSet",
            Meta::new(name)
                .ns(ns)
                .labels(&labels)
                .annotation("deprecated.daemonset.template.generation", "1")
                .build(),
            vec![
                (
                    "spec",
                    json!({
                        "selector": {"matchLabels": string_map(&labels)},
                        "template": {"metadata": {"creationTimestamp": null, "labels": string_map(&labels)}, "spec": shape.template_spec()},
                        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                        "revisionHistoryLimit": 10
                    }),
                ),
                (
                    "status",
                    json!({
                        "currentNumberScheduled": nodes,
                        "numberMisscheduled": 0,
                        "desiredNumberScheduled": nodes,
                        "numberReady": nodes,
                        "observedGeneration": 1,
                        "updatedNumberScheduled": nodes,
                        "numberAvailable": nodes
                    }),
                ),
            ],
        );
        self.push("apps", "daemonsets", ds);
        let start = self.tick(20);
        // Among thousands of nodes two random suffixes meet; the controller, as every user of
        // generateName does, draws again.
        let mut used = HashSet::new();
        for index in 1..=nodes {
            let node = node_name(index);
            let mut pod_shape = shape.clone();
            // The DaemonSet controller pins each pod to its node with a node affinity and
            // tolerates the node conditions that would otherwise evict it.
            pod_shape.affinity = Some(
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]}}}),
            );
            let mut tolerations = Vec::new();
            for key in [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
            ] {
                tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute"}));
            }
            for key in [
                "node.kubernetes.io/disk-pressure",
                "node.kubernetes.io/memory-pressure",
                "node.kubernetes.io/pid-pressure",
                "node.kubernetes.io/unschedulable",
            ] {
                tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoSchedule"}));
            }
            pod_shape.extra_tolerations = tolerations;
            let mut pod_labels = labels.clone();
            pod_labels.insert("controller-revision-hash".into(), hash.clone());
            pod_labels.insert("pod-template-generation".into(), "1".into());
            let placement = self.scheduler.place_on(index, start + index as i64);
            let pod = build_pod(
                PodPlan {
                    namespace: ns,
                    name: loop {
                        let pod = format!("{name}-{}", suffix(&mut self.rng, 5));
                        if used.insert(pod.clone()) {
                            break pod;
                        }
                    },
                    generate_name: Some(format!("{name}-")),
                    labels: pod_labels,
                    owner: Some(("apps/v1", "DaemonSet", name.to_string())),
                    shape: &pod_shape,
                    placement: Some(placement),
                    phase: PodPhase::Running,
                    managed_fields: false,
                },
                &mut self.rng,
            );
            self.push("", "pods", pod);
        }
    }

    /// The scheduler's and kubelet's events for one pod start.
    fn pod_events(
        &mut self,
        ns: &str,
        pod: &str,
        placement: Option<&Placement>,
        container: &str,
        image: &str,
    ) {
        let involved = |field_path: Option<String>| {
            let mut o = json!({"kind": "Pod", "namespace": ns, "name": pod, "uid": uid_for("Pod", Some(ns), pod), "apiVersion": "v1"});
            if let Some(fp) = field_path {
                o["fieldPath"] = json!(fp);
            }
            o
        };
        let Some(p) = placement else {
            let at = self.tick(1);
            let meta = Meta::new(format!("{pod}.{}", random_hex(&mut self.rng, 16))).ns(ns);
            let ev = builtin(
                "v1",
                "Event",
                meta.build(),
                vec![
                    ("involvedObject", involved(None)),
                    ("reason", json!("FailedScheduling")),
                    (
                        "message",
                        json!("0/0 nodes are available: no nodes available to schedule pods."),
                    ),
                    ("source", json!({})),
                    ("firstTimestamp", Value::Null),
                    ("lastTimestamp", Value::Null),
                    ("type", json!("Warning")),
                    (
                        "eventTime",
                        json!(micro_time(at, self.rng.random_range(0..1_000_000))),
                    ),
                    ("action", json!("Scheduling")),
                    ("reportingComponent", json!("default-scheduler")),
                    (
                        "reportingInstance",
                        json!("default-scheduler-control-plane"),
                    ),
                ],
            );
            self.push("", "events", ev);
            return;
        };
        let t = p.started;
        let scheduled = builtin(
            "v1",
            "Event",
            Meta::new(format!("{pod}.{}", random_hex(&mut self.rng, 16)))
                .ns(ns)
                .build(),
            vec![
                ("involvedObject", involved(None)),
                ("reason", json!("Scheduled")),
                (
                    "message",
                    json!(format!("Successfully assigned {ns}/{pod} to {}", p.node)),
                ),
                ("source", json!({})),
                ("firstTimestamp", Value::Null),
                ("lastTimestamp", Value::Null),
                ("type", json!("Normal")),
                (
                    "eventTime",
                    json!(micro_time(t - 1, self.rng.random_range(0..1_000_000))),
                ),
                ("action", json!("Binding")),
                ("reportingComponent", json!("default-scheduler")),
                (
                    "reportingInstance",
                    json!("default-scheduler-control-plane"),
                ),
            ],
        );
        self.push("", "events", scheduled);
        let kubelet = [
            (
                "Pulled",
                format!("Container image \"{image}\" already present on machine"),
            ),
            ("Created", format!("Created container {container}")),
            ("Started", format!("Started container {container}")),
        ];
        for (i, (reason, message)) in kubelet.into_iter().enumerate() {
            let at = rfc3339(t + 1 + i as i64 / 2);
            let ev = builtin(
                "v1",
                "Event",
                Meta::new(format!("{pod}.{}", random_hex(&mut self.rng, 16)))
                    .ns(ns)
                    .build(),
                vec![
                    (
                        "involvedObject",
                        involved(Some(format!("spec.containers{{{container}}}"))),
                    ),
                    ("reason", json!(reason)),
                    ("message", json!(message)),
                    ("source", json!({"component": "kubelet", "host": p.node})),
                    ("firstTimestamp", json!(at)),
                    ("lastTimestamp", json!(at)),
                    ("count", json!(1)),
                    ("type", json!("Normal")),
                    ("eventTime", Value::Null),
                    ("reportingComponent", json!("kubelet")),
                    ("reportingInstance", json!(p.node)),
                ],
            );
            self.push("", "events", ev);
        }
    }
}

mod fleet;
pub use fleet::{fleet, FleetSpec};

/// A realistic small cluster, in creation order.
///
/// Namespaces and nodes (`node-1`..`node-N`) come first; then, per namespace: ServiceAccount
/// `default`, ConfigMaps (the first is `kube-root-ca.crt`), Secrets, Services, their
/// EndpointSlices, and for every Deployment the Deployment, its ReplicaSet (controller
/// ownerReference, `pod-template-hash` label) and its Running pods (spread round-robin over the
/// nodes, owned by the ReplicaSet). The first namespace also gets a completed Job, the second a
/// StatefulSet `postgres` with its headless Service, the third a DaemonSet `node-exporter` with a
/// pod on every node; every namespace gets scheduler/kubelet Events for one pod. With no nodes,
/// pods are Pending without `nodeName`.
pub fn demo_cluster(spec: &DemoSpec) -> Vec<SeedObject> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let ca_pem = fake_pem(&mut rng, "CERTIFICATE", 790);
    let next_cluster_ip = rng.random_range(0..2_000);
    let mut demo = Demo {
        spec,
        rng,
        out: Vec::new(),
        scheduler: Scheduler::new(spec.nodes),
        clock: 0,
        next_cluster_ip,
        ca_pem,
    };
    let names = demo_namespace_names(spec.namespaces);
    for ns in &names {
        let team = ns.as_str();
        let env = if ns == "default" {
            "shared"
        } else {
            "production"
        };
        let obj = namespace_object(ns, &[("environment", env), ("team", team)], &[]);
        demo.push("", "namespaces", obj);
    }
    for index in 1..=spec.nodes {
        let node = node_seed(index, spec.node_images, &mut demo.rng);
        demo.out.push(node);
    }
    for (i, ns) in names.iter().enumerate() {
        demo.namespace(ns, i);
    }
    demo.out
}

// ---------------------------------------------------------------------------------------------
// Benchmark data
// ---------------------------------------------------------------------------------------------

fn bench_namespaces(count: usize) -> Vec<String> {
    (1..=count.max(1)).map(|i| format!("bench-{i}")).collect()
}

const BENCH_APPS: &[&str] = &["web", "api", "worker", "db", "cache"];

/// Benchmark data: `n` ConfigMaps of about 1 KB of compact JSON each, spread round-robin over
/// `namespaces` namespaces `bench-1`..`bench-N` (at least one), which come first in the result.
///
/// ConfigMaps are `cm-000001`.. with labels `app` (one of five values) and `tier`
/// (`front`/`back`), and data keys `app.properties`, `LOG_LEVEL`, `index` and a `payload` that
/// brings each object to 900-1150 bytes.
pub fn configmaps(n: usize, namespaces: usize, seed: u64) -> Vec<SeedObject> {
    let mut rng = StdRng::seed_from_u64(seed);
    let ns_names = bench_namespaces(namespaces);
    let mut out: Vec<SeedObject> = ns_names
        .iter()
        .map(|ns| namespace_seed(ns, &[("purpose", "benchmark")]))
        .collect();
    for i in 1..=n {
        let ns = &ns_names[(i - 1) % ns_names.len()];
        let app = BENCH_APPS[rng.random_range(0..BENCH_APPS.len())];
        let tier = if rng.random_bool(0.5) {
            "front"
        } else {
            "back"
        };
        let meta = Meta::new(format!("cm-{i:06}"))
            .ns(ns)
            .label("app", app)
            .label("tier", tier);
        let properties = format!(
            "server.port=8080\nserver.shutdown=graceful\nspring.application.name={app}\ncache.ttl.seconds={}\nfeature.audit={}\n",
            rng.random_range(30..3600),
            rng.random_bool(0.5)
        );
        let mut data = Map::new();
        data.insert("app.properties".into(), json!(properties));
        data.insert(
            "LOG_LEVEL".into(),
            json!(["info", "debug", "warn", "error"][rng.random_range(0..4)]),
        );
        data.insert("index".into(), json!(i.to_string()));
        data.insert("payload".into(), json!(""));
        let mut cm = builtin(
            "v1",
            "ConfigMap",
            meta.build(),
            vec![("data", Value::Object(data))],
        );
        // Pad to a jittered target so sizes vary a little, like real config.
        let target = 900 + rng.random_range(0..250usize);
        let current = serde_json::to_string(&cm).map_or(0, |s| s.len());
        let pad = target.saturating_sub(current);
        // Base64 of k bytes is 4*ceil(k/3) characters.
        cm["data"]["payload"] = json!(random_base64(&mut rng, pad / 4 * 3));
        out.push(SeedObject::new("", "configmaps", cm));
    }
    out
}

/// Benchmark data: `n` Running Pods of about 4 KB of compact JSON each, including two
/// realistic `managedFields` entries (the creator's `kubectl-create` Update and the kubelet's
/// `status` subresource Update).
///
/// Pods are spread round-robin over `nodes` nodes (`spec.nodeName` = `node-1`..`node-N`) and
/// `namespaces` namespaces `bench-1`..`bench-N`; namespaces and nodes come first in the result.
/// With `nodes == 0` the pods are Pending and unscheduled.
pub fn pods(n: usize, nodes: usize, namespaces: usize, seed: u64) -> Vec<SeedObject> {
    let mut rng = StdRng::seed_from_u64(seed);
    let ns_names = bench_namespaces(namespaces);
    let mut out: Vec<SeedObject> = ns_names
        .iter()
        .map(|ns| namespace_seed(ns, &[("purpose", "benchmark")]))
        .collect();
    for index in 1..=nodes {
        out.push(node_seed(index, 0, &mut rng));
    }
    let profiles: Vec<AppProfile> = [SHOP_APPS, PAYMENTS_APPS, DEFAULT_APPS].concat();
    let mut scheduler = Scheduler::new(nodes);
    for i in 1..=n {
        let ns = &ns_names[(i - 1) % ns_names.len()];
        let app = profiles[rng.random_range(0..profiles.len())];
        // A lean variant of the demo containers (one env var, no probe, no config volume),
        // which together with the managedFields lands at about 4 KB.
        let mut shape = app_shape(&app, None);
        shape.containers[0].env.truncate(1);
        shape.containers[0].readiness = None;
        let started = EPOCH + 60 + (i as i64) / 10;
        let placement = scheduler.place(started);
        let phase = if placement.is_some() {
            PodPhase::Running
        } else {
            PodPhase::Pending
        };
        let tier = if rng.random_bool(0.5) {
            "front"
        } else {
            "back"
        };
        let pod = build_pod(
            PodPlan {
                namespace: ns,
                name: format!("{}-{i:06}", app.name),
                generate_name: None,
                labels: labels_of(&[("app", app.name), ("tier", tier), ("version", "v1")]),
                owner: None,
                shape: &shape,
                placement,
                phase,
                managed_fields: true,
            },
            &mut rng,
        );
        out.push(SeedObject::new("", "pods", pod));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The recorded fixture data set (the recorded bodies themselves, see `fixture_data`)
// ---------------------------------------------------------------------------------------------

pub use super::fixture_data::fixture_dataset;

// ---------------------------------------------------------------------------------------------
// Churn
// ---------------------------------------------------------------------------------------------

/// Identity of a tracked object: resource, namespace, name.
type Key = (&'static str, Option<String>, String);

fn key_of(o: &SeedObject) -> Key {
    (
        o.resource,
        o.namespace().map(str::to_string),
        o.name().to_string(),
    )
}

/// Deterministic generator of cluster changes.
///
/// It tracks the ConfigMaps and Pods it knows about (those of `initial` plus the ones it
/// created, minus the ones it deleted) and only ever updates or deletes tracked objects;
/// namespaces and nodes are never touched. About 70 % of the steps are updates (every update
/// bumps the `kcache.dev/churn` annotation and may also toggle the `tier` label between
/// `front`/`back`, add or remove the `churn=hot` label, change a ConfigMap value, or move a pod
/// along Pending → Running → not ready → ready), the rest creates and deletes of ConfigMaps and
/// Pods, kept within half and twice the initial population. A deleted pod that belongs to a
/// ReplicaSet, StatefulSet or DaemonSet is replaced by a new Pending pod on the next step, as its
/// controller would.
#[derive(Debug)]
pub struct Churn {
    rng: StdRng,
    counter: u64,
    namespaces: Vec<String>,
    /// Node names and their InternalIPs.
    nodes: Vec<(String, String)>,
    live: Vec<SeedObject>,
    index: HashMap<Key, usize>,
    initial_configmaps: usize,
    initial_pods: usize,
    pending: VecDeque<ChurnOp>,
}

impl Churn {
    /// Starts churning on top of `initial` (usually what was just seeded).
    pub fn new(seed: u64, initial: &[SeedObject]) -> Self {
        let mut namespaces: Vec<String> = Vec::new();
        let mut nodes = Vec::new();
        let mut live = Vec::new();
        for o in initial {
            match (o.group, o.resource) {
                ("", "namespaces") => namespaces.push(o.name().to_string()),
                ("", "nodes") => {
                    let ip = o.object["status"]["addresses"]
                        .as_array()
                        .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
                        .and_then(|x| x["address"].as_str())
                        .unwrap_or("172.18.0.2")
                        .to_string();
                    nodes.push((o.name().to_string(), ip));
                }
                ("", "configmaps") | ("", "pods") => live.push(o.clone()),
                _ => {}
            }
            if let Some(ns) = o.namespace() {
                if !namespaces.iter().any(|n| n == ns) {
                    namespaces.push(ns.to_string());
                }
            }
        }
        if namespaces.is_empty() {
            namespaces.push("default".to_string());
        }
        let index = live
            .iter()
            .enumerate()
            .map(|(i, o)| (key_of(o), i))
            .collect();
        let initial_configmaps = live.iter().filter(|o| o.resource == "configmaps").count();
        let initial_pods = live.len() - initial_configmaps;
        Churn {
            rng: StdRng::seed_from_u64(seed),
            counter: 0,
            namespaces,
            nodes,
            live,
            index,
            initial_configmaps,
            initial_pods,
            pending: VecDeque::new(),
        }
    }

    /// The next change.
    pub fn next_op(&mut self) -> ChurnOp {
        self.counter += 1;
        if let Some(op) = self.pending.pop_front() {
            return op;
        }
        let roll = self.rng.random_range(0..100);
        let op = if roll < 70 {
            self.update()
        } else if roll < 85 {
            self.create()
        } else {
            self.delete()
        };
        op.or_else(|| self.update())
            .or_else(|| self.create())
            .unwrap_or_else(|| self.create_configmap())
    }

    fn now(&self) -> i64 {
        EPOCH + 3_600 + self.counter as i64
    }

    fn track(&mut self, o: SeedObject) {
        self.index.insert(key_of(&o), self.live.len());
        self.live.push(o);
    }

    fn untrack(&mut self, i: usize) -> SeedObject {
        let removed = self.live.swap_remove(i);
        self.index.remove(&key_of(&removed));
        if let Some(moved) = self.live.get(i) {
            self.index.insert(key_of(moved), i);
        }
        removed
    }

    fn count(&self, resource: &str) -> usize {
        self.live.iter().filter(|o| o.resource == resource).count()
    }

    fn fresh_name(&mut self, resource: &'static str, ns: &str, base: &str) -> String {
        let mut name = base.to_string();
        while self
            .index
            .contains_key(&(resource, Some(ns.to_string()), name.clone()))
        {
            name = format!("{base}-{}", suffix(&mut self.rng, 3));
        }
        name
    }

    fn create(&mut self) -> Option<ChurnOp> {
        let cms = self.count("configmaps");
        let pods = self.live.len() - cms;
        let cm_ok = cms < (self.initial_configmaps * 2).max(4);
        let pod_ok = pods < (self.initial_pods * 2).max(4);
        match (cm_ok, pod_ok) {
            (false, false) => None,
            (true, false) => Some(self.create_configmap()),
            (false, true) => Some(self.create_pod()),
            (true, true) => Some(if self.rng.random_bool(0.5) {
                self.create_configmap()
            } else {
                self.create_pod()
            }),
        }
    }

    fn create_configmap(&mut self) -> ChurnOp {
        let ns = self.namespaces[self.rng.random_range(0..self.namespaces.len())].clone();
        let name = self.fresh_name("configmaps", &ns, &format!("churn-cm-{:06}", self.counter));
        let app = BENCH_APPS[self.rng.random_range(0..BENCH_APPS.len())];
        let tier = if self.rng.random_bool(0.5) {
            "front"
        } else {
            "back"
        };
        let meta = Meta::new(&name)
            .ns(&ns)
            .label("app", app)
            .label("tier", tier);
        let data = json!({"generation": "1", "token": random_base64(&mut self.rng, 24)});
        let obj = SeedObject::new(
            "",
            "configmaps",
            builtin("v1", "ConfigMap", meta.build(), vec![("data", data)]),
        );
        self.track(obj.clone());
        ChurnOp::Create(obj)
    }

    fn create_pod(&mut self) -> ChurnOp {
        let ns = self.namespaces[self.rng.random_range(0..self.namespaces.len())].clone();
        let name = self.fresh_name("pods", &ns, &format!("churn-pod-{:06}", self.counter));
        let app = BENCH_APPS[self.rng.random_range(0..BENCH_APPS.len())];
        let tier = if self.rng.random_bool(0.5) {
            "front"
        } else {
            "back"
        };
        let mut c = ContainerSpec::new(
            "main",
            if app == "cache" {
                "redis:7.2"
            } else {
                "nginx:1.27"
            },
        );
        c.requests = vec![("cpu", "10m".into()), ("memory", "32Mi".into())];
        let shape = PodShape::new(vec![c]);
        let node = self.pick_node();
        let mut pod = build_pod(
            PodPlan {
                namespace: &ns,
                name,
                generate_name: None,
                labels: labels_of(&[("app", app), ("tier", tier)]),
                owner: None,
                shape: &shape,
                placement: None,
                phase: PodPhase::Pending,
                managed_fields: false,
            },
            &mut self.rng,
        );
        if let Some((node, _)) = node {
            schedule_pending(&mut pod, &node, self.now());
        }
        let obj = SeedObject::new("", "pods", pod);
        self.track(obj.clone());
        ChurnOp::Create(obj)
    }

    fn pick_node(&mut self) -> Option<(String, String)> {
        if self.nodes.is_empty() {
            None
        } else {
            Some(self.nodes[self.rng.random_range(0..self.nodes.len())].clone())
        }
    }

    fn delete(&mut self) -> Option<ChurnOp> {
        let cms = self.count("configmaps");
        let pods = self.live.len() - cms;
        let cm_floor = self.initial_configmaps / 2;
        let pod_floor = self.initial_pods / 2;
        let candidates: Vec<usize> = (0..self.live.len())
            .filter(|&i| {
                let o = &self.live[i];
                match o.resource {
                    // Pods mount kube-root-ca.crt; deleting it would break them.
                    "configmaps" => cms > cm_floor && o.name() != "kube-root-ca.crt",
                    _ => pods > pod_floor,
                }
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let i = candidates[self.rng.random_range(0..candidates.len())];
        let gone = self.untrack(i);
        if gone.resource == "pods" {
            if let Some(replacement) = self.replacement(&gone) {
                self.track(replacement.clone());
                self.pending.push_back(ChurnOp::Create(replacement));
            }
        }
        Some(ChurnOp::Delete {
            group: gone.group,
            resource: gone.resource,
            namespace: gone.namespace().map(str::to_string),
            name: gone.name().to_string(),
        })
    }

    /// The pod a controller would create after `gone` was deleted, if it had one.
    fn replacement(&mut self, gone: &SeedObject) -> Option<SeedObject> {
        let owner_kind = gone.object["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
            .and_then(|r| r["kind"].as_str())?
            .to_string();
        if !matches!(
            owner_kind.as_str(),
            "ReplicaSet" | "StatefulSet" | "DaemonSet"
        ) {
            return None;
        }
        let ns = gone.namespace()?.to_string();
        let mut pod = gone.object.clone();
        let name = if owner_kind == "StatefulSet" {
            // StatefulSet pods keep their identity.
            gone.name().to_string()
        } else {
            let prefix = pod["metadata"]["generateName"]
                .as_str()
                .unwrap_or("pod-")
                .to_string();
            let base = format!("{prefix}{}", suffix(&mut self.rng, 5));
            self.fresh_name("pods", &ns, &base)
        };
        pod["metadata"]["name"] = json!(name);
        if let Some(Value::Object(spec)) = pod.get_mut("spec") {
            spec.remove("nodeName");
            if let Some(Value::Array(vols)) = spec.get_mut("volumes") {
                let fresh = format!("kube-api-access-{}", suffix(&mut self.rng, 5));
                for v in vols.iter_mut() {
                    if v["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("kube-api-access-"))
                    {
                        v["name"] = json!(fresh);
                    }
                }
                if let Some(Value::Array(cs)) = spec.get_mut("containers") {
                    for c in cs {
                        if let Some(Value::Array(ms)) = c.get_mut("volumeMounts") {
                            for m in ms {
                                if m["mountPath"] == API_ACCESS_MOUNT {
                                    m["name"] = json!(fresh);
                                }
                            }
                        }
                    }
                }
            }
        }
        let qos = pod["status"]["qosClass"].clone();
        pod["status"] = json!({"phase": "Pending", "qosClass": qos});
        // A DaemonSet replacement goes back to the same node; others to any node.
        let node = if owner_kind == "DaemonSet" {
            gone.object["spec"]["nodeName"].as_str().map(str::to_string)
        } else {
            self.pick_node().map(|(n, _)| n)
        };
        if let Some(node) = node {
            schedule_pending(&mut pod, &node, self.now());
        }
        Some(SeedObject::new("", "pods", pod))
    }

    fn update(&mut self) -> Option<ChurnOp> {
        if self.live.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..self.live.len());
        let counter = self.counter.to_string();
        let now = self.now();
        let choice = self.rng.random_range(0..4);
        let node_ips = self.nodes.clone();
        let value_token = random_base64(&mut self.rng, 12);
        let container_id = random_hex(&mut self.rng, 64);
        let pod_ip_host = self.rng.random_range(2..254);
        let obj = &mut self.live[i];
        set_meta_entry(
            &mut obj.object,
            "annotations",
            "kcache.dev/churn",
            Some(&counter),
        );
        match choice {
            0 => {
                let tier = match obj.object["metadata"]["labels"]["tier"].as_str() {
                    Some("front") => "back",
                    _ => "front",
                };
                set_meta_entry(&mut obj.object, "labels", "tier", Some(tier));
            }
            1 => {
                let hot = obj.object["metadata"]["labels"]["churn"].is_string();
                set_meta_entry(&mut obj.object, "labels", "churn", (!hot).then_some("hot"));
            }
            // Immutable ConfigMaps only accept metadata changes, so they skip this one.
            2 if obj.resource == "configmaps" && obj.object["immutable"] != true => {
                set_data_value(&mut obj.object, &value_token);
            }
            2 if obj.resource == "pods" => {
                advance_pod(&mut obj.object, &node_ips, now, &container_id, pod_ip_host);
            }
            _ => {}
        }
        Some(ChurnOp::Update(obj.clone()))
    }
}

/// Marks a new Pending pod as bound to `node` (what the scheduler's binding does).
fn schedule_pending(pod: &mut Value, node: &str, now: i64) {
    if let Some(Value::Object(spec)) = pod.get_mut("spec") {
        // Rebuild so nodeName sits where the apiserver puts it (after serviceAccount).
        let old = std::mem::take(spec);
        for (k, v) in old {
            let after_sa = k == "serviceAccount";
            spec.insert(k, v);
            if after_sa {
                spec.insert("nodeName".into(), json!(node));
            }
        }
        if !spec.contains_key("nodeName") {
            spec.insert("nodeName".into(), json!(node));
        }
    }
    let qos = pod["status"]["qosClass"].clone();
    pod["status"] = json!({
        "phase": "Pending",
        "conditions": [pod_condition("PodScheduled", "True", now)],
        "qosClass": qos
    });
}

/// Adds (`Some`) or removes (`None`) one entry of `metadata.labels`/`metadata.annotations`,
/// dropping the map when it becomes empty and keeping metadata in apiserver order.
fn set_meta_entry(object: &mut Value, map: &str, key: &str, value: Option<&str>) {
    let meta = &mut object["metadata"];
    match value {
        Some(v) => {
            if !meta[map].is_object() {
                meta[map] = json!({});
            }
            if let Some(m) = meta[map].as_object_mut() {
                m.insert(key.to_string(), json!(v));
                sort_map(m);
            }
        }
        None => {
            let now_empty = meta[map].as_object_mut().is_some_and(|m| {
                m.remove(key);
                m.is_empty()
            });
            if now_empty {
                if let Some(m) = meta.as_object_mut() {
                    m.remove(map);
                }
            }
        }
    }
    reorder_metadata(object);
}

/// Go marshals maps with sorted keys; keep that after inserting.
fn sort_map(m: &mut Map<String, Value>) {
    let mut entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    m.extend(entries);
}

/// Changes one ConfigMap value: the first key of `data` gets a churn suffix (or a `churn` key
/// appears when there is no data).
fn set_data_value(cm: &mut Value, token: &str) {
    if !cm["data"].is_object() {
        cm["data"] = json!({});
    }
    if let Some(data) = cm["data"].as_object_mut() {
        let key = data
            .keys()
            .find(|k| *k != "ca.crt")
            .cloned()
            .unwrap_or_else(|| "churn".to_string());
        let base = data
            .get(&key)
            .and_then(Value::as_str)
            .map(|s| s.split(" #churn:").next().unwrap_or(s).to_string())
            .unwrap_or_default();
        data.insert(key, json!(format!("{base} #churn:{token}")));
    }
}

/// Moves a pod one step along its life: a scheduled Pending pod on a known node starts
/// Running; a Running pod flips between ready and not ready (restarting its containers when it
/// becomes ready again). Unscheduled pods, pods on unknown nodes and finished pods stay as they
/// are, as no kubelet would act on them.
fn advance_pod(
    pod: &mut Value,
    nodes: &[(String, String)],
    now: i64,
    container_id: &str,
    ip_host: u32,
) {
    let Some(node) = pod["spec"]["nodeName"].as_str().map(str::to_string) else {
        return;
    };
    let Some((node_index, (_, host))) = nodes.iter().enumerate().find(|(_, (n, _))| *n == node)
    else {
        return;
    };
    match pod["status"]["phase"].as_str() {
        Some("Pending") => {
            let containers: Vec<(String, String)> = pod["spec"]["containers"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            (
                                c["name"].as_str().unwrap_or("main").to_string(),
                                c["image"].as_str().unwrap_or("").to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let pod_ip = pod_ip(node_index + 1, 200 + ip_host as usize);
            let statuses: Vec<Value> = containers
                .iter()
                .enumerate()
                .map(|(i, (name, image))| {
                    json!({
                        "name": name,
                        "state": {"running": {"startedAt": rfc3339(now)}},
                        "lastState": {},
                        "ready": true,
                        "restartCount": 0,
                        "image": qualified_image(image),
                        "imageID": image_id(image),
                        "containerID": format!("containerd://{}", stable_hex(&format!("{container_id}{i}"), 64)),
                        "started": true
                    })
                })
                .collect();
            let qos = pod["status"]["qosClass"].clone();
            pod["status"] = json!({
                "phase": "Running",
                "conditions": [
                    pod_condition("Initialized", "True", now - 1),
                    pod_condition("Ready", "True", now),
                    pod_condition("ContainersReady", "True", now),
                    pod_condition("PodScheduled", "True", now - 2)
                ],
                "hostIP": host,
                "hostIPs": [{"ip": host}],
                "podIP": pod_ip,
                "podIPs": [{"ip": pod_ip}],
                "startTime": rfc3339(now - 1),
                "containerStatuses": statuses,
                "qosClass": qos
            });
        }
        Some("Running") => {
            let ready = pod["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True");
            let names: Vec<String> = pod["status"]["containerStatuses"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| c["name"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(Value::Array(conditions)) = pod["status"].get_mut("conditions") {
                for c in conditions.iter_mut() {
                    if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                        let Some(m) = c.as_object_mut() else { continue };
                        m.insert("status".into(), json!(if ready { "False" } else { "True" }));
                        m.insert("lastTransitionTime".into(), json!(rfc3339(now)));
                        if ready {
                            m.insert("reason".into(), json!("ContainersNotReady"));
                            m.insert(
                                "message".into(),
                                json!(format!(
                                    "containers with unready status: [{}]",
                                    names.join(" ")
                                )),
                            );
                        } else {
                            m.remove("reason");
                            m.remove("message");
                        }
                    }
                }
            }
            if let Some(Value::Array(statuses)) = pod["status"].get_mut("containerStatuses") {
                for (i, s) in statuses.iter_mut().enumerate() {
                    s["ready"] = json!(!ready);
                    if !ready {
                        // Becoming ready again after a crash: the container restarted.
                        let old_id = s["containerID"].clone();
                        let started = s["state"]["running"]["startedAt"].clone();
                        s["lastState"] = json!({"terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "startedAt": started,
                            "finishedAt": rfc3339(now - 1),
                            "containerID": old_id
                        }});
                        s["state"] = json!({"running": {"startedAt": rfc3339(now)}});
                        s["restartCount"] = json!(s["restartCount"].as_u64().unwrap_or(0) + 1);
                        s["containerID"] = json!(format!(
                            "containerd://{}",
                            stable_hex(&format!("{container_id}{i}"), 64)
                        ));
                    }
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// Create `objects` in `sim`, in order (owners before what they own).
pub fn create_all(sim: &crate::Sim, objects: Vec<SeedObject>) -> Result<(), String> {
    create_each(sim, objects, |_| None)
}

/// Create `objects` in `sim` as [`create_all`] does, each as old as in a cluster that has run
/// for a month ([`living_age`]), not created the moment the sim started. What a client sees
/// that depends on it: the AGE column of `kubectl get`, which for an object under ten minutes
/// old changes every second (Go's `HumanDuration`: `2m13s`), and for most objects of a
/// living cluster holds for a minute, an hour or a day (`95m`, `5h`, `12d`).
pub fn create_all_living(sim: &crate::Sim, objects: Vec<SeedObject>) -> Result<(), String> {
    let now = jiff::Timestamp::now();
    // A month back from now is always a timestamp jiff can hold.
    create_each(sim, objects, |i| now.checked_sub(living_age(i)).ok())
}

/// Create `objects` in order, the `i`-th created at `created(i)` (None: now).
fn create_each(
    sim: &crate::Sim,
    objects: Vec<SeedObject>,
    created: impl Fn(usize) -> Option<jiff::Timestamp>,
) -> Result<(), String> {
    for (i, o) in objects.into_iter().enumerate() {
        let what = format!("{}/{}", o.resource, o.name());
        match created(i) {
            None => sim.create(o.group, o.resource, o.object),
            Some(at) => sim.create_created(o.group, o.resource, o.object, at),
        }
        .map_err(|e| format!("seeding {what}: {e}"))?;
    }
    Ok(())
}

/// The age of the `i`-th object of a living cluster: an hour to a month, spread evenly by
/// the hour over the objects (a cluster's objects are replaced at every rollout, so few are
/// as old as the cluster).
pub fn living_age(i: usize) -> std::time::Duration {
    const HOURS: u64 = 30 * 24;
    // 7 and the month's 720 hours share no factor: consecutive objects get ages far apart.
    let hours = 1 + (i as u64).wrapping_mul(7) % HOURS;
    std::time::Duration::from_secs(hours * 3600)
}

/// Apply one churn step to `sim`; a failure (an object deleted meanwhile, say) is only logged:
/// churn is background noise, and the next step goes on.
pub fn apply(sim: &crate::Sim, op: ChurnOp) {
    let result = match op {
        ChurnOp::Create(o) => sim.create(o.group, o.resource, o.object).map(|_| ()),
        ChurnOp::Update(o) => sim.update(o.group, o.resource, o.object).map(|_| ()),
        ChurnOp::Delete {
            group,
            resource,
            namespace,
            name,
        } => sim
            .delete(group, resource, namespace.as_deref(), &name)
            .map(|_| ()),
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "churn step failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A living cluster's objects are of many ages, an hour to a month; what a client creates
    /// afterwards is created now, as the apiserver stamps it.
    #[tokio::test]
    async fn a_living_cluster_is_made_of_objects_of_many_ages() {
        let sim = crate::Sim::start(crate::SimConfig::default())
            .await
            .unwrap();
        let objects = fleet(&FleetSpec { nodes: 3, seed: 1 });
        let nodes = objects.iter().filter(|o| o.resource == "nodes").count();
        create_all_living(&sim, objects).unwrap();
        let now = jiff::Timestamp::now();
        let age = |o: &Value| {
            let created: jiff::Timestamp = o["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            now.duration_since(created).as_secs()
        };
        let ages: HashSet<i64> = sim.list("", "nodes").iter().map(age).collect();
        assert_eq!(ages.len(), nodes, "each Node of its own age");
        let pods = sim.list("", "pods");
        assert!(pods.len() > 30);
        for pod in &pods {
            let age = age(pod);
            assert!((3600 - 60..=30 * 24 * 3600 + 60).contains(&age), "{age} s");
        }
        let mut pod = pods[0].clone();
        pod["metadata"]["name"] = "created-now".into();
        pod["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        let created = sim.create("", "pods", pod).unwrap();
        assert!(age(&created) < 60, "a new object is created now");
    }

    /// Key-order assertions only make sense when serde_json keeps insertion order (its
    /// `preserve_order` feature); without it every map is sorted.
    fn maps_preserve_order() -> bool {
        let mut m = Map::new();
        m.insert("b".into(), Value::Null);
        m.insert("a".into(), Value::Null);
        m.keys().next().map(String::as_str) == Some("b")
    }

    fn compact_len(v: &Value) -> usize {
        serde_json::to_string(v).unwrap().len()
    }

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    fn is_dns_subdomain(s: &str) -> bool {
        s.len() <= 253 && s.split('.').all(is_dns_label)
    }

    fn is_label_value(s: &str) -> bool {
        s.is_empty()
            || (s.len() <= 63
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
    }

    fn is_qualified_name(s: &str) -> bool {
        let (prefix, name) = match s.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, s),
        };
        prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
    }

    /// Checks names, namespaces, label keys/values and annotation keys of every object.
    fn assert_valid_objects(objects: &[SeedObject]) {
        for o in objects {
            let name = o.name();
            assert!(is_dns_subdomain(name), "bad name {name:?}");
            if matches!(o.resource, "namespaces" | "services") {
                assert!(is_dns_label(name), "bad {} name {name:?}", o.resource);
            }
            if let Some(ns) = o.namespace() {
                assert!(is_dns_label(ns), "bad namespace {ns:?}");
            }
            assert!(o.object["metadata"].get("uid").is_none());
            assert!(o.object["metadata"].get("resourceVersion").is_none());
            assert!(o.object["metadata"].get("creationTimestamp").is_none());
            if let Some(labels) = o.object["metadata"]["labels"].as_object() {
                for (k, v) in labels {
                    assert!(is_qualified_name(k), "bad label key {k:?}");
                    assert!(
                        is_label_value(v.as_str().unwrap()),
                        "bad label value {v} on {name}"
                    );
                }
            }
            if let Some(annotations) = o.object["metadata"]["annotations"].as_object() {
                for k in annotations.keys() {
                    assert!(is_qualified_name(k), "bad annotation key {k:?}");
                }
            }
            assert!(o.object["apiVersion"].is_string() && o.object["kind"].is_string());
        }
    }

    fn identities(objects: &[SeedObject]) -> HashSet<(String, String, Option<String>, String)> {
        objects
            .iter()
            .map(|o| {
                (
                    o.group.to_string(),
                    o.kind().to_string(),
                    o.namespace().map(str::to_string),
                    o.name().to_string(),
                )
            })
            .collect()
    }

    fn node_names(objects: &[SeedObject]) -> HashSet<String> {
        objects
            .iter()
            .filter(|o| o.resource == "nodes")
            .map(|o| o.name().to_string())
            .collect()
    }

    fn of<'a>(objects: &'a [SeedObject], resource: &str) -> Vec<&'a SeedObject> {
        objects.iter().filter(|o| o.resource == resource).collect()
    }

    #[test]
    fn timestamps_are_the_apiservers_format() {
        assert_eq!(
            EPOCH,
            "2026-11-22T09:00:00Z"
                .parse::<jiff::Timestamp>()
                .unwrap()
                .as_second()
        );
        assert_eq!(rfc3339(EPOCH), "2026-11-22T09:00:00Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-86_400 * 1_000 + 1), "1967-04-07T00:00:01Z");
        assert_eq!(micro_time(EPOCH, 42), "2026-11-22T09:00:00.000042Z");
        assert_eq!(micro_time(EPOCH, 0), "2026-11-22T09:00:00.000000Z");
        assert_eq!(
            micro_time(EPOCH - 1, 999_999),
            "2026-11-22T08:59:59.999999Z"
        );
    }

    #[test]
    fn uuids_are_version_4_of_their_bytes() {
        assert_eq!(format_uuid([0; 16]), "00000000-0000-4000-8000-000000000000");
        assert_eq!(
            format_uuid([0xff; 16]),
            "ffffffff-ffff-4fff-bfff-ffffffffffff"
        );
        let b: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(format_uuid(b), "00112233-4455-4677-8899-aabbccddeeff");
    }

    #[test]
    fn uid_for_is_stable_and_uuid_shaped() {
        let a = uid_for("Pod", Some("shop"), "web-1");
        assert_eq!(a, uid_for("Pod", Some("shop"), "web-1"));
        assert_ne!(a, uid_for("Pod", Some("payments"), "web-1"));
        assert_ne!(a, uid_for("ConfigMap", Some("shop"), "web-1"));
        assert_eq!(a.len(), 36);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'));
        assert!(a.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()));
    }

    #[test]
    fn demo_default_has_expected_shape_and_order() {
        let spec = DemoSpec::default();
        let objs = demo_cluster(&spec);
        // Namespaces and nodes come first.
        let first_other = objs
            .iter()
            .position(|o| !matches!(o.resource, "namespaces" | "nodes"))
            .unwrap();
        assert_eq!(first_other, spec.namespaces + spec.nodes);
        assert!(objs[first_other..]
            .iter()
            .all(|o| !matches!(o.resource, "namespaces" | "nodes")));
        let ns: Vec<&str> = objs[..4].iter().map(|o| o.name()).collect();
        assert_eq!(ns, ["shop", "payments", "monitoring", "default"]);

        assert_eq!(of(&objs, "serviceaccounts").len(), 4);
        assert_eq!(of(&objs, "configmaps").len(), 4 * 5);
        assert_eq!(of(&objs, "secrets").len(), 4 * 2);
        // Two per namespace plus the StatefulSet's headless service.
        assert_eq!(of(&objs, "services").len(), 4 * 2 + 1);
        assert_eq!(of(&objs, "endpointslices").len(), 4 * 2 + 1);
        assert_eq!(of(&objs, "deployments").len(), 4 * 2);
        assert_eq!(of(&objs, "replicasets").len(), 4 * 2);
        assert_eq!(of(&objs, "statefulsets").len(), 1);
        assert_eq!(of(&objs, "daemonsets").len(), 1);
        assert_eq!(of(&objs, "jobs").len(), 1);
        // Deployment pods + postgres replicas + one node-exporter per node + the job's pod.
        assert_eq!(of(&objs, "pods").len(), 4 * 2 * 2 + 2 + 3 + 1);
        assert_eq!(of(&objs, "events").len(), 4 * 4);
        assert_eq!(identities(&objs).len(), objs.len(), "duplicate objects");
        assert_valid_objects(&objs);

        // Per namespace: serviceaccount, configmaps, secrets, services, endpointslices, then
        // workloads; each deployment before its replicaset before its pods.
        let shop: Vec<&str> = objs
            .iter()
            .filter(|o| o.namespace() == Some("shop"))
            .map(|o| o.resource)
            .collect();
        let pos = |r: &str| shop.iter().position(|x| *x == r).unwrap();
        assert!(pos("serviceaccounts") < pos("configmaps"));
        assert!(pos("configmaps") < pos("secrets"));
        assert!(pos("secrets") < pos("services"));
        assert!(pos("services") < pos("endpointslices"));
        assert!(pos("endpointslices") < pos("deployments"));
        assert!(pos("deployments") < pos("replicasets"));
        assert!(pos("replicasets") < pos("pods"));
    }

    #[test]
    fn demo_pods_look_like_real_running_pods() {
        let objs = demo_cluster(&DemoSpec::default());
        let nodes = node_names(&objs);
        let mut ips = HashSet::new();
        for p in of(&objs, "pods") {
            let pod = &p.object;
            let node = pod["spec"]["nodeName"].as_str().unwrap();
            assert!(nodes.contains(node), "unknown node {node}");
            let containers = pod["spec"]["containers"].as_array().unwrap();
            assert!(!containers.is_empty());
            for c in containers {
                assert!(c["image"].as_str().unwrap().contains(':'));
                assert!(c["volumeMounts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["mountPath"] == API_ACCESS_MOUNT));
            }
            assert!(pod["spec"]["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"].as_str().unwrap().starts_with("kube-api-access-")));
            assert!(pod["spec"]["tolerations"].as_array().unwrap().len() >= 2);
            assert_eq!(pod["spec"]["serviceAccountName"], "default");
            let phase = pod["status"]["phase"].as_str().unwrap();
            assert!(phase == "Running" || phase == "Succeeded", "{phase}");
            let ip = pod["status"]["podIP"].as_str().unwrap();
            assert_eq!(pod["status"]["podIPs"][0]["ip"], ip);
            assert!(ips.insert(ip.to_string()), "duplicate pod IP {ip}");
            assert!(pod["status"]["hostIP"]
                .as_str()
                .unwrap()
                .starts_with("172.18."));
            assert_eq!(pod["status"]["conditions"].as_array().unwrap().len(), 4);
            assert_eq!(
                pod["status"]["containerStatuses"].as_array().unwrap().len(),
                containers.len()
            );
            if phase == "Running" {
                assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true);
            }
        }
        // Deployment pods carry app and pod-template-hash labels matching their ReplicaSet.
        for rs in of(&objs, "replicasets") {
            let hash = rs.object["metadata"]["labels"]["pod-template-hash"]
                .as_str()
                .unwrap();
            let app = rs.object["metadata"]["labels"]["app"].as_str().unwrap();
            assert!(rs.name().ends_with(hash));
            let pods: Vec<_> = of(&objs, "pods")
                .into_iter()
                .filter(|p| p.object["metadata"]["ownerReferences"][0]["name"] == rs.name())
                .collect();
            assert_eq!(pods.len(), 2);
            for p in pods {
                assert_eq!(p.object["metadata"]["labels"]["app"], app);
                assert_eq!(p.object["metadata"]["labels"]["pod-template-hash"], hash);
                assert!(p.name().starts_with(&format!("{}-", rs.name())));
            }
        }
        // Pods are spread evenly over the nodes.
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for p in of(&objs, "pods") {
            *per_node
                .entry(p.object["spec"]["nodeName"].as_str().unwrap())
                .or_default() += 1;
        }
        let (min, max) = (
            per_node.values().min().unwrap(),
            per_node.values().max().unwrap(),
        );
        assert!(max - min <= 2, "{per_node:?}");
    }

    #[test]
    fn metadata_fields_are_in_apiserver_order() {
        if !maps_preserve_order() {
            return;
        }
        let objs = demo_cluster(&DemoSpec::default());
        let order: Vec<&str> = [
            "name",
            "generateName",
            "namespace",
            "labels",
            "annotations",
            "ownerReferences",
        ]
        .to_vec();
        for o in &objs {
            let keys: Vec<&str> = o.object["metadata"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            let positions: Vec<usize> = keys
                .iter()
                .map(|k| order.iter().position(|x| x == k).unwrap())
                .collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        }
    }

    /// Every ownerReference (and EndpointSlice targetRef, Event involvedObject) names an object
    /// of the set, in the same namespace, with that object's `uid_for`.
    fn assert_references_resolve(objs: &[SeedObject]) {
        let ids = identities(objs);
        let group_of = |api_version: &str| {
            api_version
                .rsplit_once('/')
                .map_or("", |(g, _)| g)
                .to_string()
        };
        let mut refs = 0;
        for o in objs {
            let ns = o.namespace().map(str::to_string);
            let mut check = |r: &Value| {
                let kind = r["kind"].as_str().unwrap();
                let name = r["name"].as_str().unwrap();
                let group = group_of(r["apiVersion"].as_str().unwrap_or("v1"));
                assert!(
                    ids.contains(&(group, kind.to_string(), ns.clone(), name.to_string())),
                    "{} {} refers to missing {kind} {name}",
                    o.kind(),
                    o.name()
                );
                assert_eq!(
                    r["uid"].as_str().unwrap(),
                    uid_for(kind, ns.as_deref(), name)
                );
                refs += 1;
            };
            if let Some(owners) = o.object["metadata"]["ownerReferences"].as_array() {
                for r in owners {
                    assert_eq!(r["controller"], true);
                    check(r);
                }
            }
            if let Some(eps) = o.object["endpoints"].as_array() {
                for e in eps {
                    check(&e["targetRef"]);
                }
            }
            if o.resource == "events" {
                check(&o.object["involvedObject"]);
            }
        }
        assert!(refs > 0);
    }

    #[test]
    fn demo_references_point_at_existing_objects() {
        assert_references_resolve(&demo_cluster(&DemoSpec::default()));
        let bigger = DemoSpec {
            namespaces: 7,
            nodes: 5,
            deployments_per_namespace: 4,
            replicas: 3,
            configmaps_per_namespace: 9,
            secrets_per_namespace: 4,
            services_per_namespace: 6,
            node_images: 3,
            pod_managed_fields: true,
            seed: 99,
        };
        let objs = demo_cluster(&bigger);
        assert_references_resolve(&objs);
        assert_valid_objects(&objs);
        assert_eq!(identities(&objs).len(), objs.len());
        let nodes = node_names(&objs);
        assert!(of(&objs, "pods")
            .iter()
            .all(|p| nodes.contains(p.object["spec"]["nodeName"].as_str().unwrap())));
    }

    #[test]
    fn endpoint_slices_match_service_pods() {
        let objs = demo_cluster(&DemoSpec::default());
        for slice in of(&objs, "endpointslices") {
            let ns = slice.namespace();
            let svc_name = slice.object["metadata"]["labels"]["kubernetes.io/service-name"]
                .as_str()
                .unwrap();
            let svc = of(&objs, "services")
                .into_iter()
                .find(|s| s.name() == svc_name && s.namespace() == ns)
                .unwrap();
            let selector = svc.object["spec"]["selector"].as_object().unwrap();
            let selected: HashMap<&str, &str> = of(&objs, "pods")
                .into_iter()
                .filter(|p| p.namespace() == ns)
                .filter(|p| {
                    selector
                        .iter()
                        .all(|(k, v)| &p.object["metadata"]["labels"][k] == v)
                })
                .map(|p| (p.name(), p.object["status"]["podIP"].as_str().unwrap()))
                .collect();
            let endpoints = slice.object["endpoints"].as_array().unwrap();
            assert_eq!(endpoints.len(), selected.len(), "{svc_name}");
            for e in endpoints {
                let pod = e["targetRef"]["name"].as_str().unwrap();
                assert_eq!(e["addresses"][0].as_str().unwrap(), selected[pod]);
            }
            assert_eq!(
                slice.object["ports"][0]["port"],
                svc.object["spec"]["ports"][0]["port"]
            );
        }
    }

    #[test]
    fn demo_without_nodes_leaves_pods_pending() {
        let spec = DemoSpec {
            nodes: 0,
            ..DemoSpec::default()
        };
        let objs = demo_cluster(&spec);
        assert!(of(&objs, "nodes").is_empty());
        let pods = of(&objs, "pods");
        assert!(!pods.is_empty());
        for p in pods {
            assert_eq!(p.object["status"]["phase"], "Pending");
            assert!(p.object["spec"].get("nodeName").is_none());
        }
        assert_references_resolve(&objs);
        assert_valid_objects(&objs);
    }

    #[test]
    fn demo_handles_tiny_and_empty_specs() {
        let zero = DemoSpec {
            namespaces: 0,
            nodes: 0,
            deployments_per_namespace: 0,
            replicas: 0,
            configmaps_per_namespace: 0,
            secrets_per_namespace: 0,
            services_per_namespace: 0,
            node_images: 0,
            pod_managed_fields: false,
            seed: 3,
        };
        assert!(demo_cluster(&zero).is_empty());
        let one = DemoSpec {
            namespaces: 1,
            nodes: 1,
            deployments_per_namespace: 0,
            services_per_namespace: 2,
            ..DemoSpec::default()
        };
        let objs = demo_cluster(&one);
        assert_valid_objects(&objs);
        assert_references_resolve(&objs);
        assert_eq!(of(&objs, "statefulsets").len(), 1);
        assert_eq!(of(&objs, "daemonsets").len(), 1);
        assert_eq!(of(&objs, "jobs").len(), 1);
        // Without deployments, services become ExternalName ones.
        assert!(of(&objs, "services")
            .iter()
            .any(|s| s.object["spec"]["type"] == "ExternalName"));
    }

    #[test]
    fn generators_are_deterministic_per_seed() {
        let spec = DemoSpec::default();
        assert_eq!(demo_cluster(&spec), demo_cluster(&spec));
        assert_ne!(
            demo_cluster(&spec),
            demo_cluster(&DemoSpec {
                seed: 2,
                ..spec.clone()
            })
        );
        assert_eq!(configmaps(50, 3, 7), configmaps(50, 3, 7));
        assert_ne!(configmaps(50, 3, 7), configmaps(50, 3, 8));
        assert_eq!(pods(20, 3, 2, 7), pods(20, 3, 2, 7));
        assert_ne!(pods(20, 3, 2, 7), pods(20, 3, 2, 8));
        assert_eq!(fixture_dataset(), fixture_dataset());
        let initial = demo_cluster(&spec);
        let run = |seed| {
            let mut churn = Churn::new(seed, &initial);
            (0..200).map(|_| churn.next_op()).collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn benchmark_configmaps_are_about_one_kilobyte() {
        let objs = configmaps(500, 4, 11);
        assert_eq!(of(&objs, "namespaces").len(), 4);
        assert!(objs[..4].iter().all(|o| o.resource == "namespaces"));
        let cms = of(&objs, "configmaps");
        assert_eq!(cms.len(), 500);
        let mut total = 0;
        for cm in &cms {
            let len = compact_len(&cm.object);
            assert!((717..=1331).contains(&len), "configmap of {len} bytes");
            assert!(cm.object["data"].as_object().unwrap().len() >= 3);
            total += len;
        }
        let mean = total / cms.len();
        assert!((900..=1150).contains(&mean), "mean {mean}");
        // Round-robin over the namespaces.
        let per_ns: HashSet<_> = cms.iter().map(|c| c.namespace().unwrap()).collect();
        assert_eq!(per_ns.len(), 4);
        assert_valid_objects(&objs);
        assert_eq!(identities(&objs).len(), objs.len());
        // Zero namespaces still puts them somewhere.
        let one = configmaps(3, 0, 1);
        assert_eq!(one[0].name(), "bench-1");
        assert_eq!(one.len(), 4);
    }

    #[test]
    fn benchmark_pods_are_about_four_kilobytes_with_managed_fields() {
        let objs = pods(300, 5, 3, 13);
        assert_eq!(
            objs.iter()
                .take_while(|o| o.resource == "namespaces")
                .count(),
            3
        );
        assert_eq!(
            objs[3..]
                .iter()
                .take_while(|o| o.resource == "nodes")
                .count(),
            5
        );
        let nodes = node_names(&objs);
        let pod_objs = of(&objs, "pods");
        assert_eq!(pod_objs.len(), 300);
        for p in &pod_objs {
            let len = compact_len(&p.object);
            assert!((2867..=5325).contains(&len), "pod of {len} bytes");
            assert!(nodes.contains(p.object["spec"]["nodeName"].as_str().unwrap()));
            let mf = p.object["metadata"]["managedFields"].as_array().unwrap();
            assert_eq!(mf.len(), 2);
            assert_eq!(mf[0]["manager"], "kubectl-create");
            assert_eq!(mf[1]["manager"], "kubelet");
            assert_eq!(mf[1]["subresource"], "status");
            let spec_fields = &mf[0]["fieldsV1"]["f:spec"];
            assert!(spec_fields["f:containers"]
                .as_object()
                .unwrap()
                .keys()
                .all(|k| k.starts_with("k:{\"name\":")));
            assert!(
                spec_fields.get("f:tolerations").is_none(),
                "admission fields are not the creator's"
            );
            assert!(
                mf[1]["fieldsV1"]["f:status"]["f:conditions"]["k:{\"type\":\"Ready\"}"]["."]
                    .is_object()
            );
        }
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for p in &pod_objs {
            *per_node
                .entry(p.object["spec"]["nodeName"].as_str().unwrap())
                .or_default() += 1;
        }
        assert!(per_node.values().all(|&c| c == 60), "{per_node:?}");
        assert_valid_objects(&objs);
        assert_eq!(identities(&objs).len(), objs.len());
        let unscheduled = pods(4, 0, 1, 1);
        assert!(of(&unscheduled, "pods")
            .iter()
            .all(|p| p.object["status"]["phase"] == "Pending"));
    }

    #[test]
    fn fields_v1_matches_the_recorded_shape() {
        // The recorded pod-1a's kubectl-create entry, rebuilt from what kubectl sent.
        let mut c = ContainerSpec::new("main", "registry.example.com/nginx:1.25");
        c.command = Vec::new();
        let shape = PodShape::new(vec![c]);
        let sent = json!({
            "metadata": {"labels": {"app": "web", "tier": "front"}},
            "spec": shape.spec(PodSpecMode::Sent, Some("node-1"), None)
        });
        let expected: Value = serde_json::from_str(r#"{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:tier":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"main\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:nodeName":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}"#).unwrap();
        assert_eq!(fields_v1(&sent), expected);
        // Keys come out sorted even with preserve_order.
        assert_eq!(
            serde_json::to_string(&fields_v1(&sent)).unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
    }

    fn replay_churn(
        initial: &[SeedObject],
        seed: u64,
        steps: usize,
    ) -> HashMap<&'static str, usize> {
        let mut existing: HashMap<(String, Option<String>, String), Value> = initial
            .iter()
            .map(|o| {
                (
                    (
                        o.resource.to_string(),
                        o.namespace().map(str::to_string),
                        o.name().to_string(),
                    ),
                    o.object.clone(),
                )
            })
            .collect();
        let namespaces: HashSet<String> = initial
            .iter()
            .filter(|o| o.resource == "namespaces")
            .map(|o| o.name().to_string())
            .collect();
        let mut churn = Churn::new(seed, initial);
        let mut stats = HashMap::new();
        for step in 0..steps {
            match churn.next_op() {
                ChurnOp::Create(o) => {
                    assert!(matches!(o.resource, "configmaps" | "pods"));
                    let key = (
                        o.resource.to_string(),
                        o.namespace().map(str::to_string),
                        o.name().to_string(),
                    );
                    assert!(
                        !existing.contains_key(&key),
                        "step {step}: create of existing {key:?}"
                    );
                    if !namespaces.is_empty() {
                        assert!(
                            namespaces.contains(o.namespace().unwrap()),
                            "created in unknown namespace"
                        );
                    }
                    assert_valid_objects(std::slice::from_ref(&o));
                    existing.insert(key, o.object);
                    *stats.entry("create").or_default() += 1;
                }
                ChurnOp::Update(o) => {
                    let key = (
                        o.resource.to_string(),
                        o.namespace().map(str::to_string),
                        o.name().to_string(),
                    );
                    let old = existing
                        .get(&key)
                        .unwrap_or_else(|| panic!("step {step}: update of missing {key:?}"));
                    assert_ne!(old, &o.object, "step {step}: update without a change");
                    if old["immutable"] == true {
                        assert_eq!(old["data"], o.object["data"], "immutable data changed");
                    }
                    assert_eq!(
                        old["metadata"]["ownerReferences"],
                        o.object["metadata"]["ownerReferences"]
                    );
                    assert_eq!(
                        old["spec"], o.object["spec"],
                        "pod spec must not change on update"
                    );
                    assert_eq!(
                        o.object["metadata"]["annotations"]["kcache.dev/churn"],
                        (step + 1).to_string()
                    );
                    assert_valid_objects(std::slice::from_ref(&o));
                    existing.insert(key, o.object);
                    *stats.entry("update").or_default() += 1;
                }
                ChurnOp::Delete {
                    group,
                    resource,
                    namespace,
                    name,
                } => {
                    assert_eq!(group, "");
                    assert!(
                        matches!(resource, "configmaps" | "pods"),
                        "deleting {resource}"
                    );
                    let key = (resource.to_string(), namespace, name);
                    assert!(
                        existing.remove(&key).is_some(),
                        "step {step}: delete of missing {key:?}"
                    );
                    *stats.entry("delete").or_default() += 1;
                }
            }
        }
        stats
    }

    #[test]
    fn churn_only_touches_existing_objects() {
        let stats = replay_churn(&demo_cluster(&DemoSpec::default()), 1, 3000);
        assert!(stats["update"] > 1800, "{stats:?}");
        assert!(stats["create"] > 200, "{stats:?}");
        assert!(stats["delete"] > 200, "{stats:?}");
        let stats = replay_churn(&fixture_dataset(), 2, 2000);
        assert!(stats["delete"] > 0 && stats["create"] > 0, "{stats:?}");
        replay_churn(&configmaps(30, 2, 1), 3, 500);
        replay_churn(&pods(30, 2, 2, 1), 4, 500);
        // From nothing at all it still produces valid steps.
        let stats = replay_churn(&[], 5, 200);
        assert!(stats["create"] > 0);
    }

    #[test]
    fn churn_moves_labels_and_pod_phases() {
        let initial = demo_cluster(&DemoSpec::default());
        let mut churn = Churn::new(9, &initial);
        let mut hot_added = 0;
        let mut hot_removed = 0;
        let mut tiers = HashSet::new();
        let mut phases = HashSet::new();
        let mut not_ready = 0;
        let mut replacements = 0;
        let mut last_delete_was_owned_pod = false;
        let owned: HashSet<String> = of(&initial, "pods")
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        let mut previous: HashMap<String, Value> = initial
            .iter()
            .map(|o| (format!("{}/{}", o.resource, o.name()), o.object.clone()))
            .collect();
        for _ in 0..3000 {
            let op = churn.next_op();
            match &op {
                ChurnOp::Update(o) => {
                    let key = format!("{}/{}", o.resource, o.name());
                    let before = previous.get(&key).unwrap();
                    let had = before["metadata"]["labels"]["churn"].is_string();
                    let has = o.object["metadata"]["labels"]["churn"].is_string();
                    hot_added += usize::from(!had && has);
                    hot_removed += usize::from(had && !has);
                    if let Some(t) = o.object["metadata"]["labels"]["tier"].as_str() {
                        tiers.insert(t.to_string());
                    }
                    if let Some(p) = o.object["status"]["phase"].as_str() {
                        phases.insert(p.to_string());
                    }
                    if o.object["status"]["conditions"]
                        .as_array()
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "False")
                        })
                    {
                        not_ready += 1;
                    }
                    previous.insert(key, o.object.clone());
                }
                ChurnOp::Create(o) => {
                    if last_delete_was_owned_pod
                        && o.object["metadata"]["ownerReferences"].is_array()
                    {
                        replacements += 1;
                        assert_eq!(o.object["status"]["phase"], "Pending");
                    }
                    previous.insert(format!("{}/{}", o.resource, o.name()), o.object.clone());
                }
                ChurnOp::Delete { resource, name, .. } => {
                    last_delete_was_owned_pod = *resource == "pods" && owned.contains(name);
                    continue;
                }
            }
            last_delete_was_owned_pod = false;
        }
        assert!(
            hot_added > 10 && hot_removed > 10,
            "{hot_added} {hot_removed}"
        );
        assert!(tiers.contains("front") && tiers.contains("back"));
        assert!(
            phases.contains("Running") && phases.contains("Pending"),
            "{phases:?}"
        );
        assert!(not_ready > 0);
        assert!(replacements > 0);
    }

    #[test]
    fn churn_keeps_metadata_ordered() {
        if !maps_preserve_order() {
            return;
        }
        let mut churn = Churn::new(3, &fixture_dataset());
        for _ in 0..500 {
            if let ChurnOp::Update(o) | ChurnOp::Create(o) = churn.next_op() {
                let keys: Vec<&String> = o.object["metadata"].as_object().unwrap().keys().collect();
                let pos: Vec<usize> = keys
                    .iter()
                    .map(|k| META_ORDER.iter().position(|x| x == k).unwrap())
                    .collect();
                assert!(pos.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
            }
        }
    }
}
