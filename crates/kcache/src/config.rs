//! `config/kcache.yaml`: which resources to cache and how. Every option is documented in the
//! example file and the README; an invalid file is an error naming the field.
//!
//! Why one file of this length: it is the schema, one documented field per configuration key
//! with its default, and the checks that relate them; `tests/config_keys.rs` holds it to
//! `config/kcache.yaml`. The unit tests are in `config/tests.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::api::{ConsistentReads, WatchConfig};
use crate::auth::{AuthConfig, AuthMode};
use crate::cache::{CacheConfig, Scope};
use crate::index::IndexConfig;
use crate::limits::LimitConfig;
use crate::selector::{FieldSelector, LabelSelector};
use crate::upstream::{ReflectorConfig, StreamingList};

mod auto;
pub(crate) use auto::AutoSettings;

/// Why a config file was rejected. The file's read and YAML errors are kept as the source
/// (see [`crate::error::Report`]).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Not YAML, or not a config: unknown or mistyped fields (`path`: the file, `config` for
    /// text).
    #[error("parsing {path}")]
    Parse {
        path: String,
        source: yaml_serde::Error,
    },
    /// A value the config may not have.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

/// The whole configuration. Every key is optional at every depth: a key left out (or a section
/// given in part) takes its value from the `Default` impls, which are the documented defaults.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Address to serve on (`--listen` overrides it).
    pub listen: String,
    /// Address of kcache's own endpoints, plain HTTP and unauthenticated: `/livez`, `/readyz`,
    /// `/healthz` and `/metrics` (`--admin-listen` overrides it). They are kept off the API
    /// address, where those paths are the upstream's.
    pub admin_listen: String,
    /// Resources to cache; everything else is passed through.
    pub resources: Vec<ResourceConfig>,
    /// Drop `metadata.managedFields` before caching (saves memory; clients see objects
    /// without them).
    pub drop_managed_fields: bool,
    pub cache: CacheSettings,
    pub watch: WatchSettings,
    pub upstream: UpstreamSettings,
    pub consistent_reads: ConsistentReadSettings,
    pub staleness: StalenessSettings,
    /// Seconds in-flight requests may take to finish on SIGTERM before kcache exits.
    pub shutdown_grace_seconds: u64,
    /// Serve HTTPS instead of plain HTTP (see [`TlsSettings`]).
    pub tls: TlsSettings,
    pub auth: AuthSettings,
    /// kcache's own limits; 0 means no limit.
    pub limits: LimitConfig,
    /// On-demand caching of types that are not configured (see `AutoSettings`).
    pub auto: AutoSettings,
    /// The audit trail of the requests kcache answers itself (absent: none is kept), named as
    /// the apiserver's audit flags are (see `kcache_audit::AuditConfig`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<kcache_audit::AuditConfig>,
}

/// Caller authentication and authorization (`--auth` overrides `mode`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthSettings {
    /// `none` (loopback only), `delegated` or `trust-local`.
    pub mode: AuthMode,
    /// Seconds an accepted token is remembered.
    pub token_cache_seconds: u64,
    /// Seconds a rejected token is remembered.
    pub token_failure_cache_seconds: u64,
    /// Seconds an allowed SubjectAccessReview is remembered.
    pub allowed_cache_seconds: u64,
    /// Seconds a denied one is remembered.
    pub denied_cache_seconds: u64,
    /// Seconds an allowed SubjectAccessReview whose reason says RBAC allowed it is remembered,
    /// while kcache watches the upstream's RBAC objects and none changes (any change forgets
    /// every remembered verdict); 0: RBAC objects are not watched.
    pub rbac_allowed_cache_seconds: u64,
    /// Seconds past those TTLs a verdict may still be used while the upstream is unreachable.
    pub stale_if_error_seconds: u64,
    /// Whether kcache verifies ServiceAccount tokens itself (signature, issuer, audience,
    /// lifetime, and the objects they name, from its caches) where it can, instead of a
    /// TokenReview each; what it cannot check is still reviewed.
    pub verify_service_account_tokens: bool,
}

impl Default for AuthSettings {
    fn default() -> Self {
        let d = AuthConfig::default();
        AuthSettings {
            mode: d.mode,
            token_cache_seconds: d.token_ttl.as_secs(),
            token_failure_cache_seconds: d.token_failure_ttl.as_secs(),
            allowed_cache_seconds: d.allowed_ttl.as_secs(),
            denied_cache_seconds: d.denied_ttl.as_secs(),
            rbac_allowed_cache_seconds: d.rbac_allowed_ttl.as_secs(),
            stale_if_error_seconds: d.stale_if_error.as_secs(),
            verify_service_account_tokens: d.verify_service_account_tokens,
        }
    }
}

fn default_grace() -> u64 {
    10
}

/// Reads with resourceVersion unset ("most recent", what kubectl and relisting informers send).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsistentReadSettings {
    /// `cache`: answer from the cache once it has caught up with the upstream's current
    /// resourceVersion; `upstream`: always forward them.
    pub source: ConsistentSource,
    /// Seconds to wait for the cache to catch up.
    pub wait_seconds: u64,
    /// After the wait: `upstream` forwards the read, `error` answers 504.
    pub on_timeout: ConsistentSource,
}

/// Where a consistent read is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsistentSource {
    Cache,
    Upstream,
    Error,
}

impl Default for ConsistentReadSettings {
    fn default() -> Self {
        ConsistentReadSettings {
            source: ConsistentSource::Cache,
            wait_seconds: 3,
            on_timeout: ConsistentSource::Upstream,
        }
    }
}

/// What kcache serves while the upstream cannot be reached. A cache's age is the time since
/// its reflector last had confirmed contact with the upstream: an event, a bookmark, a list
/// page or a watch opened.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct StalenessSettings {
    /// While the upstream cannot be reached at all, consistent reads (resourceVersion unset),
    /// which nothing can confirm current, are served from the cache, marked, while the cache
    /// is at most this many seconds old, and then get a 504 Timeout (0: however old). Reads
    /// with a resourceVersion are always served from the cache.
    pub max_consistent_read_staleness_seconds: u64,
    /// Seconds kcache waits for the upstream to answer one of its own requests (a list page,
    /// a consistency probe, a watch's response head) before counting it unreachable.
    pub upstream_request_timeout_seconds: u64,
}

/// Two minutes: long enough to ride out an apiserver's restart or a rolling upgrade of its
/// replicas (typically under a minute each), short enough that a client asking for the current
/// state does not get one from long before an outage as if it were current; after it the
/// client gets the 504 it would get without kcache. The readiness detail calls a cache with no
/// contact for as long stale too (docs/operations.md).
const DEFAULT_MAX_CONSISTENT_READ_STALENESS: u64 = 120;

impl Default for StalenessSettings {
    fn default() -> Self {
        StalenessSettings {
            max_consistent_read_staleness_seconds: DEFAULT_MAX_CONSISTENT_READ_STALENESS,
            upstream_request_timeout_seconds: crate::upstream::DEFAULT_REQUEST_TIMEOUT.as_secs(),
        }
    }
}

impl StalenessSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.upstream_request_timeout_seconds == 0 {
            return Err(ConfigError::Invalid {
                field: "staleness.upstreamRequestTimeoutSeconds".into(),
                message: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// One resource to cache.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceConfig {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    pub version: String,
    /// Plural resource name, as in URLs (`pods`, `deployments`, `widgets`).
    pub resource: String,
    /// Cache only this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Cache only objects matching this label selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Cache only objects matching this field selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<String>,
    /// Extra indexes (the type's selectable fields are always indexed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<IndexConfig>,
    /// Annotations left out of this type's objects before caching (for example
    /// `kubectl.kubernetes.io/last-applied-configuration`, often the largest part of an object):
    /// clients see the objects as the apiserver would send them without those annotations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop_annotations: Vec<String>,
    /// Cache only each object's metadata (`meta.k8s.io/v1` PartialObjectMetadata, listed and
    /// watched from the upstream in that form): metadata informers, `kubectl get` Tables whose
    /// columns need only metadata and kcache's index queries are answered from the cache;
    /// every read of whole objects is passed through.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub metadata_only: bool,
    /// The most this type's cached objects may take, as a Kubernetes quantity (`512Mi`, `2Gi`,
    /// `500M`, or plain bytes); absent: no budget. Counted as the sum of the cached objects'
    /// JSON bytes (see [`ResourceConfig::memory_budget_bytes`]). A type that goes over it is no
    /// longer cached: its reads are passed through to the upstream until kcache restarts.
    #[serde(
        default,
        deserialize_with = "quantity_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory_budget: Option<String>,
}

/// A quantity as its text: YAML gives `512Mi` as a string and `4096` as a number, and both
/// are quantities (a number is bytes).
fn quantity_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Text(String),
        Number(u64),
    }
    Ok(Option::<Text>::deserialize(d)?.map(|t| match t {
        Text::Text(s) => s,
        Text::Number(n) => n.to_string(),
    }))
}

/// Bytes of a Kubernetes quantity: digits with an optional fraction, then a binary suffix
/// (`Ki` `Mi` `Gi` `Ti` `Pi` `Ei`), a decimal one (`k` `M` `G` `T` `P` `E`), a decimal
/// exponent (`e6`, `E6`) or nothing (bytes). The result must be a whole number of bytes above
/// zero, so `1.5Gi` is fine and `0.5` or `100m` (milli) are not. Err is the message for the
/// field.
pub(crate) fn parse_quantity(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a quantity of bytes like 512Mi, 2Gi, 500M or 1000000");
    let digits_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(bad());
    }
    // The value is mantissa × multiplier / 10^fraction digits, in integers: no rounding.
    let (multiplier, divisor_exp): (u128, u32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "k" => (10u128.pow(3), 0),
        "M" => (10u128.pow(6), 0),
        "G" => (10u128.pow(9), 0),
        "T" => (10u128.pow(12), 0),
        "P" => (10u128.pow(15), 0),
        "E" => (10u128.pow(18), 0),
        "m" => (1, 3),
        s if s.starts_with(['e', 'E']) => {
            let exp: u32 = s[1..].parse().ok().filter(|e| *e <= 18).ok_or_else(bad)?;
            (10u128.pow(exp), 0)
        }
        _ => return Err(bad()),
    };
    let mantissa: u128 = format!("{whole}{fraction}").parse().map_err(|_| bad())?;
    let divisor = 10u128
        .checked_pow(fraction.len() as u32 + divisor_exp)
        .ok_or_else(bad)?;
    let scaled = mantissa.checked_mul(multiplier).ok_or_else(bad)?;
    if scaled % divisor != 0 {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    match u64::try_from(scaled / divisor) {
        Ok(0) => Err("must be more than 0; omit it for no budget".into()),
        Ok(bytes) => Ok(bytes),
        Err(_) => Err(bad()),
    }
}

/// Retention of history and snapshots.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CacheSettings {
    /// Seconds of events kept for watch resume and consistent pages.
    pub history_window_seconds: u64,
    /// At most this many events per resource, whatever their age.
    pub history_max_events: usize,
    /// Answer protobuf reads of built-in types from the cache: the first protobuf read of a
    /// type starts its protobuf mirror (a second upstream list and watch, in protobuf, whose
    /// bytes the answers carry). `false`: no mirrors; readers that accept JSON after protobuf
    /// get JSON from the cache (client-go decodes by Content-Type), protobuf-only readers are
    /// passed through.
    pub protobuf: bool,
    /// Keep each cached resource's objects and resourceVersion in a database in this
    /// directory, so that a restarted kcache serves them at once and resumes its upstream
    /// watches instead of relisting (see `persist`). Absent: nothing is written to disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persist_dir: Option<PathBuf>,
    /// Every this many seconds, ask the allocator to give the free pages of kcache's heap back
    /// to the system (glibc's `malloc_trim`, see `kcache_heap`); 0: never. glibc keeps what
    /// was freed among live allocations resident: the lists parsed at start, a herd's
    /// buffers, objects replaced by churn.
    pub release_memory_seconds: u64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        let d = CacheConfig::default();
        CacheSettings {
            history_window_seconds: d.history_window.as_secs(),
            history_max_events: d.history_max_events,
            protobuf: true,
            persist_dir: None,
            release_memory_seconds: 10,
        }
    }
}

/// Downstream watch behaviour.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WatchSettings {
    /// Seconds between periodic bookmarks (the apiserver: 60).
    pub bookmark_interval_seconds: u64,
    /// Seconds a read waits for the cache to reach a requested resourceVersion before the
    /// 504 (the apiserver: 3).
    pub resource_version_wait_seconds: u64,
    /// Writes a second, summed over the watchers of one type that every change wakes, above
    /// which each of them writes at most once per `watchers / fanoutWritesPerSecond` and the
    /// changes in between go out together (see `api::Fanout`). 0: never.
    pub fanout_writes_per_second: u64,
    /// The longest an event waits to go out with later ones (milliseconds). 0: never.
    pub fanout_max_delay_millis: u64,
}

impl Default for WatchSettings {
    fn default() -> Self {
        let fanout = crate::api::Fanout::default();
        WatchSettings {
            bookmark_interval_seconds: 60,
            resource_version_wait_seconds: 3,
            fanout_writes_per_second: fanout.writes_per_second,
            fanout_max_delay_millis: fanout.max_delay.as_millis() as u64,
        }
    }
}

/// How kcache reads from the upstream.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UpstreamSettings {
    /// Page size of the initial paged list.
    pub page_size: u32,
    /// `auto` (use sendInitialEvents when the upstream supports it) or `never`.
    pub streaming_list: StreamingList,
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        UpstreamSettings {
            page_size: 500,
            streaming_list: StreamingList::Auto,
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

/// Loopback by default, like `listen`; 8081 sits next to the API's 8080 and is the port
/// Kubernetes controllers commonly probe for health, away from Prometheus' own 9090.
fn default_admin_listen() -> String {
    "127.0.0.1:8081".into()
}

/// The default resource set: what controllers, kubelets and dashboards read most.
pub(crate) fn default_resources() -> Vec<ResourceConfig> {
    [
        ("", "v1", "pods"),
        ("", "v1", "nodes"),
        ("", "v1", "namespaces"),
        ("", "v1", "services"),
        ("", "v1", "configmaps"),
        ("", "v1", "events"),
        ("discovery.k8s.io", "v1", "endpointslices"),
        ("apps", "v1", "deployments"),
        ("apps", "v1", "replicasets"),
        ("apps", "v1", "statefulsets"),
        ("apps", "v1", "daemonsets"),
        ("batch", "v1", "jobs"),
    ]
    .into_iter()
    .map(|(g, v, r)| ResourceConfig::new(g, v, r))
    .collect()
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: default_listen(),
            admin_listen: default_admin_listen(),
            resources: default_resources(),
            drop_managed_fields: false,
            cache: CacheSettings::default(),
            watch: WatchSettings::default(),
            upstream: UpstreamSettings::default(),
            consistent_reads: ConsistentReadSettings::default(),
            staleness: StalenessSettings::default(),
            shutdown_grace_seconds: default_grace(),
            auth: AuthSettings::default(),
            limits: LimitConfig::default(),
            tls: TlsSettings::default(),
            auto: AutoSettings::default(),
            audit: None,
        }
    }
}

impl Config {
    /// Read and validate a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                source,
            },
            other => other,
        })
    }

    /// Parse and validate YAML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config = yaml_serde::from_str(text).map_err(|source| ConfigError::Parse {
            path: "config".into(),
            source,
        })?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: String, message: String| ConfigError::Invalid { field, message };
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "listen".into(),
                format!("{:?} is not an address like 127.0.0.1:8080", self.listen),
            ));
        }
        let admin = self
            .admin_listen
            .parse::<std::net::SocketAddr>()
            .map_err(|_| {
                invalid(
                    "adminListen".into(),
                    format!(
                        "{:?} is not an address like 127.0.0.1:8081",
                        self.admin_listen
                    ),
                )
            })?;
        // Port 0 (any free port) may be given for both; otherwise they must differ.
        if admin.port() != 0 && self.listen.parse::<std::net::SocketAddr>().ok() == Some(admin) {
            return Err(invalid(
                "adminListen".into(),
                "must differ from listen".into(),
            ));
        }
        if self.resources.is_empty() {
            return Err(invalid(
                "resources".into(),
                "at least one resource is needed".into(),
            ));
        }
        for (i, r) in self.resources.iter().enumerate() {
            let field = |f: &str| format!("resources[{i}].{f}");
            if r.version.trim().is_empty() {
                return Err(invalid(field("version"), "must not be empty".into()));
            }
            if r.resource.trim().is_empty() || r.resource.contains('/') {
                return Err(invalid(
                    field("resource"),
                    format!("{:?} is not a plural resource name", r.resource),
                ));
            }
            if let Some(s) = &r.label_selector {
                LabelSelector::parse(s).map_err(|e| invalid(field("labelSelector"), e.message))?;
            }
            if let Some(s) = &r.field_selector {
                let sel = FieldSelector::parse(s)
                    .map_err(|e| invalid(field("fieldSelector"), e.message))?;
                // A metadata-only cache cannot check a field outside metadata on what it holds,
                // so no request could be answered from it.
                if let Some(other) = sel
                    .requirements()
                    .iter()
                    .find(|q| r.metadata_only && !q.field.starts_with("metadata."))
                {
                    return Err(invalid(
                        field("fieldSelector"),
                        format!(
                            "{:?} is not a metadata field, and metadataOnly caches only metadata",
                            other.field
                        ),
                    ));
                }
            }
            for (j, ix) in r.indexes.iter().enumerate() {
                let at = field(&format!("indexes[{j}]"));
                ix.validate().map_err(|m| invalid(at.clone(), m))?;
                if let Some(path) = ix
                    .field
                    .as_deref()
                    .filter(|p| r.metadata_only && !p.starts_with("metadata."))
                {
                    return Err(invalid(
                        at,
                        format!("{path:?} is not a metadata field, and metadataOnly caches only metadata"),
                    ));
                }
                if r.indexes[..j].iter().any(|o| o.name == ix.name) {
                    return Err(invalid(at, format!("index {} is defined twice", ix.name)));
                }
            }
            if let Some(q) = &r.memory_budget {
                parse_quantity(q).map_err(|m| invalid(field("memoryBudget"), m))?;
            }
            if self.resources[..i]
                .iter()
                .any(|o| o.group == r.group && o.resource == r.resource)
            {
                return Err(invalid(
                    field("resource"),
                    format!("{} is listed twice", r.resource),
                ));
            }
        }
        self.auto.validate()?;
        if self.upstream.page_size == 0 {
            return Err(invalid(
                "upstream.pageSize".into(),
                "must be at least 1".into(),
            ));
        }
        if self.watch.bookmark_interval_seconds == 0 {
            return Err(invalid(
                "watch.bookmarkIntervalSeconds".into(),
                "must be at least 1".into(),
            ));
        }
        if self.consistent_reads.source == ConsistentSource::Error {
            return Err(invalid(
                "consistentReads.source".into(),
                "must be cache or upstream".into(),
            ));
        }
        if self.consistent_reads.on_timeout == ConsistentSource::Cache {
            return Err(invalid(
                "consistentReads.onTimeout".into(),
                "must be upstream or error".into(),
            ));
        }
        self.staleness.validate()?;
        if self.cache.history_max_events == 0 {
            return Err(invalid(
                "cache.historyMaxEvents".into(),
                "must be at least 1".into(),
            ));
        }
        if self
            .cache
            .persist_dir
            .as_ref()
            .is_some_and(|d| d.as_os_str().is_empty())
        {
            return Err(invalid(
                "cache.persistDir".into(),
                "must be a directory; omit it to keep nothing on disk".into(),
            ));
        }
        if let Ok(addr) = self.listen.parse::<std::net::SocketAddr>() {
            crate::auth::check_listen(self.auth.mode, &addr)
                .map_err(|e| invalid("auth.mode".into(), e.to_string()))?;
        }
        let l = &self.limits;
        if !(l.per_caller_qps >= 0.0 && l.per_caller_qps.is_finite()) {
            return Err(invalid(
                "limits.perCallerQps".into(),
                "must be a number >= 0".into(),
            ));
        }
        if l.per_caller_qps > 0.0 && l.per_caller_burst == 0 {
            return Err(invalid(
                "limits.perCallerBurst".into(),
                "must be at least 1 when perCallerQps is set".into(),
            ));
        }
        self.validate_tls()?;
        if let Some(audit) = &self.audit {
            audit.validate().map_err(|e| ConfigError::Invalid {
                field: "audit".into(),
                message: e.to_string(),
            })?;
        }
        Ok(())
    }

    pub(crate) fn auth_config(&self) -> AuthConfig {
        let a = &self.auth;
        AuthConfig {
            mode: a.mode,
            token_ttl: Duration::from_secs(a.token_cache_seconds),
            token_failure_ttl: Duration::from_secs(a.token_failure_cache_seconds),
            allowed_ttl: Duration::from_secs(a.allowed_cache_seconds),
            denied_ttl: Duration::from_secs(a.denied_cache_seconds),
            rbac_allowed_ttl: Duration::from_secs(a.rbac_allowed_cache_seconds),
            stale_if_error: Duration::from_secs(a.stale_if_error_seconds),
            verify_service_account_tokens: a.verify_service_account_tokens,
            keep_dir: self.cache.persist_dir.clone(),
        }
    }

    pub(crate) fn cache_config(&self) -> CacheConfig {
        CacheConfig {
            history_window: Duration::from_secs(self.cache.history_window_seconds),
            history_max_events: self.cache.history_max_events,
            strip: crate::object::Strip::managed_fields(self.drop_managed_fields),
            ..CacheConfig::default()
        }
    }

    /// [`Config::cache_config`] for one configured resource (what it is cached without).
    pub(crate) fn cache_config_for(&self, r: &ResourceConfig) -> CacheConfig {
        let mut cfg = self.cache_config();
        cfg.strip.annotations = r.drop_annotations.clone();
        cfg.strip.metadata_only = r.metadata_only;
        cfg.memory_budget = r
            .memory_budget_bytes()
            .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
        cfg
    }

    /// What the HTTP layer takes from the configuration (the upstream's version in `watch`
    /// is the server's to fill in, once it is known).
    pub(crate) fn app_settings(&self) -> crate::api::AppSettings {
        crate::api::AppSettings {
            watch: self.watch_config(),
            consistent: self.consistent_reads(),
            staleness: self.staleness(),
            rv_wait: self.rv_wait(),
            auth: self.auth_config(),
            limits: self.limits.clone(),
            reflector: self.reflector_config(),
            protobuf: self.protobuf_enabled(),
            // Started by `server::start`, which owns the runtime its backends run on.
            audit: None,
        }
    }

    pub(crate) fn watch_config(&self) -> WatchConfig {
        WatchConfig {
            bookmark_interval: Duration::from_secs(self.watch.bookmark_interval_seconds),
            rv_wait: self.rv_wait(),
            upstream: Default::default(),
            fanout: crate::api::Fanout {
                writes_per_second: self.watch.fanout_writes_per_second,
                max_delay: Duration::from_millis(self.watch.fanout_max_delay_millis),
            },
        }
    }

    pub(crate) fn consistent_reads(&self) -> ConsistentReads {
        ConsistentReads {
            from_cache: self.consistent_reads.source == ConsistentSource::Cache,
            wait: Duration::from_secs(self.consistent_reads.wait_seconds),
            fallback: self.consistent_reads.on_timeout == ConsistentSource::Upstream,
        }
    }

    pub(crate) fn staleness(&self) -> crate::api::Staleness {
        let s = &self.staleness;
        crate::api::Staleness {
            max_consistent_read: (s.max_consistent_read_staleness_seconds > 0)
                .then(|| Duration::from_secs(s.max_consistent_read_staleness_seconds)),
            upstream_request_timeout: Duration::from_secs(s.upstream_request_timeout_seconds),
        }
    }

    pub(crate) fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_seconds)
    }

    pub fn rv_wait(&self) -> Duration {
        Duration::from_secs(self.watch.resource_version_wait_seconds)
    }

    /// Whether protobuf reads are answered from the cache (see [`CacheSettings::protobuf`]).
    pub(crate) fn protobuf_enabled(&self) -> bool {
        self.cache.protobuf
    }

    pub(crate) fn reflector_config(&self) -> ReflectorConfig {
        ReflectorConfig {
            page_size: self.upstream.page_size,
            streaming_list: self.upstream.streaming_list,
            ..ReflectorConfig::default()
        }
    }
}

/// HTTPS serving. Without `certFile` and `keyFile` kcache serves plain HTTP.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first (`--tls-cert-file` overrides it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the leaf certificate (`--tls-key-file` overrides it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// PEM bundle of CAs whose client certificates identify callers (`--client-ca-file`
    /// overrides it). Presenting a certificate stays optional.
    #[serde(rename = "clientCAFile", skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<PathBuf>,
    /// Seconds between checks of the files for changes (rotated certificates are picked up
    /// without a restart).
    pub reload_interval_seconds: u64,
}

fn default_tls_reload() -> u64 {
    10
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            reload_interval_seconds: default_tls_reload(),
        }
    }
}

impl TlsSettings {
    /// Whether kcache serves HTTPS.
    pub(crate) fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    /// How often the files are checked for changes.
    pub(crate) fn reload_interval(&self) -> Duration {
        Duration::from_secs(self.reload_interval_seconds)
    }
}

impl Config {
    /// Check the `tls` section. Public because command-line flags can change it after the file
    /// was validated.
    pub fn validate_tls(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: &str| ConfigError::Invalid {
            field: format!("tls.{field}"),
            message: message.into(),
        };
        let t = &self.tls;
        for (field, path) in [
            ("certFile", &t.cert_file),
            ("keyFile", &t.key_file),
            ("clientCAFile", &t.client_ca_file),
        ] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(invalid(field, "must not be empty"));
            }
        }
        match (&t.cert_file, &t.key_file) {
            (Some(_), None) => return Err(invalid("keyFile", "is required with certFile")),
            (None, Some(_)) => return Err(invalid("certFile", "is required with keyFile")),
            _ => {}
        }
        if t.client_ca_file.is_some() && t.cert_file.is_none() {
            return Err(invalid(
                "clientCAFile",
                "needs certFile and keyFile (client certificates need TLS)",
            ));
        }
        if t.reload_interval_seconds == 0 {
            return Err(invalid("reloadIntervalSeconds", "must be at least 1"));
        }
        Ok(())
    }
}

impl ResourceConfig {
    /// `group/version/resource`, cached whole with no restriction, index or memory control:
    /// what a config entry naming only those three means.
    pub fn new(group: &str, version: &str, resource: &str) -> ResourceConfig {
        ResourceConfig {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            namespace: None,
            label_selector: None,
            field_selector: None,
            indexes: Vec::new(),
            drop_annotations: Vec::new(),
            metadata_only: false,
            memory_budget: None,
        }
    }

    /// The memory budget in bytes (None: no budget). The quantity was validated on load.
    pub fn memory_budget_bytes(&self) -> Option<u64> {
        self.memory_budget
            .as_deref()
            .and_then(|q| parse_quantity(q).ok())
    }

    /// The part of the collection this resource caches. Selectors were validated on load.
    pub(crate) fn scope(&self) -> Scope {
        Scope {
            namespace: self.namespace.clone(),
            label: self
                .label_selector
                .as_deref()
                .and_then(|s| LabelSelector::parse(s).ok())
                .unwrap_or_default(),
            field: self
                .field_selector
                .as_deref()
                .and_then(|s| FieldSelector::parse(s).ok())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests;
