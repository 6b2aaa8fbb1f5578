//! A simulated kube-apiserver over plain HTTP/1.1, in-process, imitating v1.28 or v1.34 by
//! profile (`SimConfig::profile`: `Profile::V1_28`, the default, or `Profile::V1_34`).
//!
//! kcache's tests, `kcache demo` (v1.34) and the benchmark run against it; kube-client and
//! kubectl talk to it exactly as to a real cluster. Behaviour follows the profile's recordings
//! in `tests/fixtures/kube-apiserver-v1.28` or `tests/fixtures/kube-apiserver-v1.34` (LIST/GET/
//! WATCH semantics, Status bodies, bytes); `kube-apiserver-v1.34/DIFF-1.28.md` lists what
//! changed. What v1.34 does differently, in the sim:
//!
//! * continue tokens write their start key with a leading `/` (not the one in a 410 Status);
//!   both forms are accepted by both profiles;
//! * lists are served from the watch cache: an RV etcd compacted (`Sim::compact`) is still
//!   answered while the type's cache window holds it (its last `SimConfig::history_limit`
//!   events; `Sim::compact_watch_cache` moves it), a future RV on the former etcd paths
//!   (Exact, `limit`, continue) waits and is then the cache path's 504, a consistent list waits
//!   for the replica's cache to reach the store's revision and answers from it; lists and
//!   WatchList bookmarks the cache answers carry its revision (the store's), not the type's
//!   last event;
//! * `resourceVersion=abc` on a list is a 400;
//! * watches: a quiet watch gets a periodic BOOKMARK as a heartbeat at the cache's revision,
//!   built-in BOOKMARKs have no `"creationTimestamp":null`, a WatchList from RV=0 served by a
//!   cache behind the store gets a plain BOOKMARK once it caught up;
//! * Pods get `metadata.generation` and the `openshift-service-ca.crt` projected source of the
//!   recordings' apiserver; the Pod Table's `Node` column description; `/version`.
//!
//! Not reproduced: aggregated discovery v2 (both profiles answer aggregated-discovery requests
//! with the legacy documents), and the discovery entries of what the sim does not serve
//! (`pods/resize`, `resource.k8s.io`, flowcontrol); the recordings' environment (DIFF section 3).
//!
//! The sim is one store ("etcd") behind one or more apiserver replicas. By default there is one
//! replica whose watch cache never lags, so "cache" answers (RV=0 lists and GETs, NotOlderThan
//! lists, watches) reflect every completed write. `SimConfig::watch_cache_lags` gives the
//! replicas behind the address instead, each with a watch cache that lags the store by its
//! delay: such a replica answers "cache" reads from the state the store had that long ago and
//! delivers every watch event that long after the write, while reads the apiserver serves from
//! etcd see the store as it is: in v1.28 resourceVersion unset, `limit` with a
//! resourceVersion, continuations and writes; in v1.34 only GETs without resourceVersion and
//! writes (its consistent lists wait for the replica's cache instead: the same result, later
//! by up to the lag; a cache that does not catch up within `too_large_rv_wait` hands the list
//! to etcd). Requests go to the replicas in turn, as through a Service, unless
//! `Sim::pin_replica` sends them all to one.
//!
//! Clients that prefer `application/vnd.kubernetes.protobuf` get protobuf for the built-in
//! kinds the `protobuf` module has a schema for (every built-in type the sim serves: core/v1,
//! the apps/v1 workloads, Jobs and EndpointSlices) and protobuf Status errors;
//! custom resources get JSON (or a 406), and so do kinds without schema and objects with a
//! field the schema does not know (see that module's docs).
//!
//! Metadata clients that ask for `as=PartialObjectMetadataList` (LIST) or
//! `as=PartialObjectMetadata` (GET, WATCH) get that form, written by the sim's own `metadata`
//! module from the recordings (`pom-*`), not by kcache's renderer. A LIST that prefers it in
//! protobuf (client-go's metadata client) gets it in protobuf, for every kind (custom
//! resources too), as the apiserver does.
//!
//! `kubectl get` (an Accept that asks for `as=Table` first) of a type whose columns the sim
//! serves (`Sim::serve_table_columns`, `table_columns::serve_builtin`) gets a Table whether it
//! lists, GETs one object (one row at its resourceVersion) or watches (each event's object a
//! one-row Table, the columns on the first only), rows printed by the sim's own `table_rows`
//! as the recorded `table-*` answers show (a custom resource's cells from its CRD object's
//! printer columns); errors, a 410 ERROR event included, stay the plain Status.
#![forbid(unsafe_code)]
// A code name in the docs that no longer exists fails `cargo doc`, not only CI's
// `-D warnings` run.
#![deny(rustdoc::broken_intra_doc_links)]

pub mod certs;
mod discovery;
mod encode;
mod faults;
mod fixture_data;
mod health;
mod http;
mod list;
mod metadata;
mod patch;
mod profile;
mod protobuf;
mod query;
pub mod rbac;
pub mod recordings;
pub mod seed;
mod selector;
mod status;
mod store;
pub mod table_columns;
mod table_rows;
pub mod tokens;
mod types;
mod watch;

pub use faults::Faults;
pub use profile::Profile;
pub use selector::{FieldSelector, LabelSelector};
pub use status::{Cause, SimError, Target};
pub use types::ResourceType;

/// One API request the sim served, as [`Sim::journal`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The user it was made as (after impersonation).
    pub user: String,
    pub method: String,
    pub path: String,
    /// The raw query string.
    pub query: String,
    /// The `Accept` header, or "".
    pub accept: String,
}

use faults::{FaultState, SimListener};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Store, UpdateMode};
use tokio::task::JoinHandle;

/// Sim behaviour knobs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The upstream version imitated (default v1.28, the sim's behaviour before profiles).
    pub profile: Profile,
    /// Period of watch BOOKMARK events (the apiserver's is about 60 s).
    pub bookmark_interval: Duration,
    /// Whether bookmarks carry the store's revision rather than the type's newest event: an
    /// apiserver whose watch caches etcd keeps current with progress notifications (etcd's
    /// `--experimental-watch-progress-notify-interval`), so that a quiet type's watchers
    /// learn that nothing of theirs changed up to now. Off by default (the recordings' 1.28
    /// behaviour); only for replicas without a lag.
    pub progress_bookmarks: bool,
    /// Events kept per resource type for watch resume and Exact lists before they are
    /// forgotten (older RVs then give 410).
    pub history_limit: usize,
    /// Whether `sendInitialEvents` (WatchList) is supported, as with `--feature-gates=WatchList=true`.
    /// When off, such watches are refused with the apiserver's 422 so clients fall back to LIST.
    pub watchlist: bool,
    /// How long a request for a resourceVersion the store has not reached waits before the
    /// 504 "Too large resource version".
    pub too_large_rv_wait: Duration,
    /// Events a watcher may fall behind before it is closed (per resource type).
    pub watch_buffer: usize,
    /// The apiserver replicas behind the address, by how far each one's watch cache lags the
    /// store (at most five minutes). Empty: one replica whose watch cache never lags.
    pub watch_cache_lags: Vec<Duration>,
    /// What a read served from etcd (resourceVersion unset: a consistent GET or LIST, kcache's
    /// freshness probe) and writing a list cost the apiserver; None: nothing. The in-process
    /// sim answers in microseconds, which no proxy in front of it can match, while a real
    /// apiserver spends an etcd round trip and CPU on each such read and saturates at a few
    /// thousand per second, and spends CPU on every object of a list it writes. This bounds
    /// the sim the same way, so a benchmark can compare "through kcache" with "direct" where
    /// it matters: the upstream's capacity. [`StorageReads::measured`] gives each profile the
    /// capacity measured on a real apiserver of its version.
    pub storage_reads: Option<StorageReads>,
}

/// The cost model of the apiserver's reads, on `concurrency` slots (its cores): a read served
/// from etcd (resourceVersion unset; a v1.34 consistent LIST too, whose apiserver asks etcd for
/// its current revision before answering from its watch cache) takes a slot for `cost`, so at
/// most `concurrency / cost` per second; a LIST, from etcd or from the watch cache alike,
/// takes one for `per_item` per object it returns (writing the list: what dominates a big
/// one). Reads beyond that queue. It waits without using the sim's CPU, so it models the
/// upstream's machine, not the test's.
#[derive(Clone, Copy, Debug)]
pub struct StorageReads {
    pub cost: Duration,
    pub concurrency: usize,
    /// A list's cost per returned object (zero: lists cost only the sim's own CPU).
    pub per_item: Duration,
}

impl StorageReads {
    /// The capacity measured on a real apiserver of `profile`'s version on a 2-core machine,
    /// 8 clients:
    /// - v1.34.9 (HTTPS): 2,305 consistent GETs/s of one ConfigMap, p50 3.2 ms: 2 slots of
    ///   0.868 ms; consistent LISTs of 10k ConfigMaps from its watch cache 7.5/s, at
    ///   resourceVersion=0 7.6/s: 26 µs per object on one of the 2 slots (260 ms per 10k);
    /// - v1.28.7: 3,747 consistent GETs/s, p50 1.9 ms: 2 slots of 0.5 ms (4,000/s); its list
    ///   cost was not measured and is taken to be v1.34's (writing the objects dominates
    ///   both; v1.28 reads a consistent list from etcd, which only adds to it).
    pub fn measured(profile: Profile) -> StorageReads {
        let per_item = Duration::from_micros(26);
        match profile {
            Profile::V1_28 => StorageReads {
                cost: Duration::from_micros(500),
                concurrency: 2,
                per_item,
            },
            Profile::V1_34 => StorageReads {
                cost: Duration::from_micros(868),
                concurrency: 2,
                per_item,
            },
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            profile: Profile::V1_28,
            bookmark_interval: Duration::from_secs(60),
            progress_bookmarks: false,
            history_limit: 10_000,
            watchlist: true,
            too_large_rv_wait: Duration::from_secs(3),
            watch_buffer: 10_000,
            watch_cache_lags: Vec::new(),
            storage_reads: None,
        }
    }
}

impl SimConfig {
    /// The defaults, imitating `profile`.
    pub fn for_profile(profile: Profile) -> SimConfig {
        SimConfig {
            profile,
            ..SimConfig::default()
        }
    }

    /// The simulated cluster of `kcache demo`: the current version (v1.34), its watch caches
    /// kept current (bookmarks every second carry the store's revision), so kcache can prove a
    /// consistent read of a quiet type fresh within a second and answer `kubectl get` from its
    /// cache. With the 1.28 default, a type without writes of its own is forwarded instead,
    /// and the sim's Tables have no rows.
    pub fn demo() -> SimConfig {
        SimConfig {
            bookmark_interval: Duration::from_secs(1),
            progress_bookmarks: true,
            ..SimConfig::for_profile(Profile::V1_34)
        }
    }
}

struct Inner {
    ctx: Arc<http::Ctx>,
    server: Mutex<Option<JoinHandle<()>>>,
}

/// A running simulated apiserver. Cheap to clone.
#[derive(Clone)]
pub struct Sim {
    inner: Arc<Inner>,
}

impl Sim {
    /// Starts a sim on `127.0.0.1:0`.
    pub async fn start(cfg: SimConfig) -> std::io::Result<Sim> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), cfg).await
    }

    /// Starts a sim on `addr`.
    pub async fn start_on(addr: SocketAddr, cfg: SimConfig) -> std::io::Result<Sim> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Store::new(cfg.history_limit, cfg.watch_buffer, cfg.profile));
        let faults = Arc::new(FaultState::new());
        let replicas = http::Replicas::new(cfg.watch_cache_lags.clone());
        let now = std::time::Instant::now();
        let storage = std::sync::Mutex::new(
            cfg.storage_reads
                .map(|r| vec![now; r.concurrency.max(1)])
                .unwrap_or_default(),
        );
        let ctx = Arc::new(http::Ctx {
            storage,
            replicas,
            store,
            faults: faults.clone(),
            cfg,
            addr,
            pf_uids: (
                uuid::Uuid::new_v4().to_string(),
                uuid::Uuid::new_v4().to_string(),
            ),
            counts: http::RequestCounts::default(),
            table_columns: Default::default(),
            rbac: Default::default(),
            journal: Default::default(),
            issuer: Default::default(),
        });
        let app = axum::Router::new()
            .fallback(http::handle)
            .with_state(ctx.clone());
        let listener = SimListener {
            inner: listener,
            faults,
        };
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "sim server stopped");
            }
        });
        Ok(Sim {
            inner: Arc::new(Inner {
                ctx,
                server: Mutex::new(Some(server)),
            }),
        })
    }

    fn store(&self) -> &Store {
        &self.inner.ctx.store
    }

    /// The upstream version this sim imitates.
    pub fn profile(&self) -> Profile {
        self.inner.ctx.cfg.profile
    }

    /// API requests served so far: (lists, gets, watches, other). Tests use it to tell what
    /// kcache answered itself from what reached the upstream.
    pub fn request_counts(&self) -> (u64, u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.inner.ctx.counts;
        (
            c.lists.load(Relaxed),
            c.gets.load(Relaxed),
            c.watches.load(Relaxed),
            c.other.load(Relaxed),
        )
    }

    /// Lists of a collection at resourceVersion=0 served so far (each returns the whole
    /// collection, whatever its limit: rule L2).
    pub fn rv0_lists(&self) -> u64 {
        self.inner
            .ctx
            .counts
            .lists_rv0
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes of the non-watch response bodies sent so far.
    pub fn bytes_sent(&self) -> u64 {
        self.inner
            .ctx
            .counts
            .bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Send every request to replica `i` of `SimConfig::watch_cache_lags` (None: in turn).
    pub fn pin_replica(&self, i: Option<usize>) {
        self.inner.ctx.replicas.pin(i);
    }

    /// Turn on token authentication and RBAC with this table (None: everything allowed, as
    /// by default). The table's rules are also served as RBAC objects
    /// ([`rbac::Rbac::objects`]), created, updated and deleted as the table changes, before
    /// the new table takes effect: a real apiserver's authorizer follows those objects, so a
    /// watcher of them hears of a change no later than the authorizer applies it. Turning
    /// RBAC off leaves the last table's objects in place.
    ///
    /// While on, RBAC objects written through the API grant what they say too (the module
    /// [`rbac`]), and ServiceAccount tokens the sim issued authenticate requests.
    pub fn set_rbac(&self, rbac: Option<rbac::Rbac>) {
        if let Some(table) = &rbac {
            self.serve_rbac_objects(table);
        }
        if let Ok(mut r) = self.inner.ctx.rbac.write() {
            *r = rbac.map(Arc::new);
        }
    }

    /// Make the served RBAC objects those of `table`: a write only for what changed.
    fn serve_rbac_objects(&self, table: &rbac::Rbac) {
        const TYPES: [(&str, &str, &str, bool); 4] = [
            ("clusterroles", "clusterrole", "ClusterRole", false),
            (
                "clusterrolebindings",
                "clusterrolebinding",
                "ClusterRoleBinding",
                false,
            ),
            ("roles", "role", "Role", true),
            ("rolebindings", "rolebinding", "RoleBinding", true),
        ];
        let group = rbac::RBAC_GROUP;
        for (resource, singular, kind, namespaced) in TYPES {
            if self.resource_type(group, resource).is_none() {
                let rt = types::builtin(group, resource, singular, kind, namespaced, &[]);
                self.store().register(rt);
            }
        }
        let wanted = table.objects();
        let key = |o: &Value| {
            let m = &o["metadata"];
            (
                m["namespace"].as_str().map(str::to_string),
                m["name"].as_str().unwrap_or_default().to_string(),
            )
        };
        for (resource, ..) in TYPES {
            let served = self.list(group, resource);
            let mine: Vec<&Value> = wanted
                .iter()
                .filter(|(r, _)| *r == resource)
                .map(|(_, o)| o)
                .collect();
            for old in &served {
                let (ns, name) = key(old);
                if !mine.iter().any(|o| key(o) == (ns.clone(), name.clone())) {
                    let _ = self.delete(group, resource, ns.as_deref(), &name);
                }
            }
            for obj in mine {
                let (ns, name) = key(obj);
                let same = |old: &Value| {
                    ["rules", "roleRef", "subjects"]
                        .iter()
                        .all(|f| old.get(*f) == obj.get(*f))
                };
                let result = match served.iter().find(|o| key(o) == (ns.clone(), name.clone())) {
                    Some(old) if same(old) => Ok(Value::Null),
                    Some(_) => self.update(group, resource, obj.clone()),
                    None => self.create(group, resource, obj.clone()),
                };
                if let Err(e) = result {
                    tracing::warn!(error = ?e, resource, name, "sim: RBAC object not written");
                }
            }
        }
    }

    /// A token for ServiceAccount `namespace/name`, bound to Pod `pod` of that namespace if
    /// given, valid for `seconds`: what a TokenRequest (`kubectl create token`) returns, signed
    /// by this sim's key (its public half at `/openid/v1/jwks`). Its TokenReview accepts it
    /// while the ServiceAccount (and the Pod) exist with the UIDs it names. RBAC must be on
    /// ([`Sim::set_rbac`]) for the sim to authenticate anything. Over HTTP the same is
    /// `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token` (a TokenRequest), answered as
    /// tests/fixtures/service-account-tokens/tokenrequest-*.json.
    pub fn token_request(
        &self,
        namespace: &str,
        name: &str,
        pod: Option<&str>,
        seconds: i64,
    ) -> Result<String, SimError> {
        let sa = self
            .get("", "serviceaccounts", Some(namespace), name)
            .ok_or(SimError::NotFound(Target {
                group: String::new(),
                resource: "serviceaccounts".into(),
                name: name.into(),
            }))?;
        let pod = match pod {
            Some(p) => Some(
                self.get("", "pods", Some(namespace), p)
                    .ok_or(SimError::NotFound(Target {
                        group: String::new(),
                        resource: "pods".into(),
                        name: p.into(),
                    }))?,
            ),
            None => None,
        };
        let now = jiff::Timestamp::now().as_second();
        let profile = self.profile();
        Ok(self
            .inner
            .ctx
            .issuer
            .mint(profile, &sa, pod.as_ref(), now, seconds))
    }

    /// From now on, keep every API request made while RBAC is on, with the identity that made
    /// it (see [`Sim::journal`]).
    pub fn keep_journal(&self) {
        let mut j = self
            .inner
            .ctx
            .journal
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        j.get_or_insert_with(Vec::new);
    }

    /// The requests kept since [`Sim::keep_journal`], oldest first.
    pub fn journal(&self) -> Vec<JournalEntry> {
        let j = self
            .inner
            .ctx
            .journal
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        j.clone().unwrap_or_default()
    }

    /// Answer `as=Table` reads of a resource (lists, GETs, watches) with these column
    /// definitions, each object printed as the apiserver prints it (a custom resource by its
    /// CustomResourceDefinition's printer columns, when the sim holds that object).
    pub fn serve_table_columns(&self, group: &str, resource: &str, columns: bytes::Bytes) {
        if let Ok(mut t) = self.inner.ctx.table_columns.lock() {
            t.insert((group.to_string(), resource.to_string()), columns);
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.ctx.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Serves another type (e.g. a CRD), or serves a registered one differently (e.g. a
    /// built-in with extra selectable fields). Built-ins are pre-registered. A custom type with
    /// selectable fields is also given its CustomResourceDefinition object, which lists them
    /// under its version's `selectableFields` (kcache reads them from there).
    pub fn register(&self, rt: ResourceType) {
        let crd = (rt.custom && !rt.selectable_fields.is_empty()).then(|| crd_object(&rt));
        self.store().register(rt);
        if let Some(crd) = crd {
            const CRDS: (&str, &str) = ("apiextensions.k8s.io", "customresourcedefinitions");
            if self.resource_type(CRDS.0, CRDS.1).is_none() {
                self.store()
                    .register(ResourceType::custom_resource_definitions());
            }
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let _ = self.store().delete(CRDS.0, CRDS.1, None, &name, None, None);
            if let Err(e) = self.store().create(CRDS.0, CRDS.1, None, crd) {
                tracing::warn!(error = ?e, "sim: CRD object not created");
            }
        }
    }

    /// Stop serving a custom type, as the apiserver does when its CustomResourceDefinition is
    /// deleted: its objects are deleted (their watchers get a DELETED event each, as a real
    /// v1.34.9 sends them), the CRD object (`{resource}.{group}`) goes if there is one, then
    /// the type's open watches end and its requests are answered 404. False when the type was
    /// not served.
    pub fn unregister(&self, group: &str, resource: &str) -> bool {
        for o in self.list(group, resource) {
            let meta = &o["metadata"];
            let (ns, name) = (meta["namespace"].as_str(), meta["name"].as_str());
            if let Some(name) = name {
                let _ = self.store().delete(group, resource, ns, name, None, None);
            }
        }
        let name = format!("{resource}.{group}");
        let _ = self.store().delete(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
            &name,
            None,
            None,
        );
        self.store().unregister(group, resource)
    }

    /// The type served as `group`/`resource`, if any.
    pub fn resource_type(&self, group: &str, resource: &str) -> Option<ResourceType> {
        self.store()
            .types()
            .into_iter()
            .find(|t| t.group == group && t.resource == resource)
            .map(|t| (*t).clone())
    }

    /// Creates an object as POST does: sets uid, resourceVersion, creationTimestamp,
    /// generation (CRs and workloads), kind/apiVersion. Namespaced objects without
    /// `metadata.namespace` go to `default`.
    pub fn create(&self, group: &str, resource: &str, obj: Value) -> Result<Value, SimError> {
        Ok(self
            .store()
            .create(group, resource, None, obj)?
            .value
            .clone())
    }

    /// [`Sim::create`] for an object that has existed since `created`: the apiserver sets an
    /// object's creationTimestamp when it is created, so a cluster that has been running a
    /// while is made of objects of many ages (what `kubectl get`'s AGE column prints).
    pub fn create_created(
        &self,
        group: &str,
        resource: &str,
        obj: Value,
        created: jiff::Timestamp,
    ) -> Result<Value, SimError> {
        let created = format!("{created:.0}");
        Ok(self
            .store()
            .create_created(group, resource, None, obj, Some(created))?
            .value
            .clone())
    }

    /// Replaces an object (status included); 409 on a stale `metadata.resourceVersion`, 404 if missing.
    pub fn update(&self, group: &str, resource: &str, obj: Value) -> Result<Value, SimError> {
        Ok(self
            .store()
            .update(group, resource, None, obj, UpdateMode::Replace)?
            .value
            .clone())
    }

    /// Deletes an object; returns its last state carrying the deletion resourceVersion.
    pub fn delete(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, SimError> {
        Ok(self
            .store()
            .delete(group, resource, namespace, name, None, None)?
            .value
            .clone())
    }

    /// One object, if it exists.
    pub fn get(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        self.store()
            .get(group, resource, namespace, name)
            .ok()
            .map(|o| o.value.clone())
    }

    /// All current objects of a type in key (namespace/name) order.
    pub fn list(&self, group: &str, resource: &str) -> Vec<Value> {
        self.store()
            .snapshot(group, resource)
            .map(|s| s.objects.values().map(|o| o.value.clone()).collect())
            .unwrap_or_default()
    }

    /// The global resourceVersion (that of the last write).
    pub fn current_rv(&self) -> u64 {
        self.store().current_rv()
    }

    /// Forgets history up to now, as an etcd compaction: older RVs give 410 (watch ERROR event,
    /// list 410). On `Profile::V1_34` lists at an older RV (Exact, `limit`, continue tokens)
    /// are still answered while the type's watch cache holds that RV: its window is the last
    /// `SimConfig::history_limit` events of the type; `compact_watch_cache` moves it to now.
    pub fn compact(&self) {
        self.store().compact();
    }

    /// Moves every type's watch-cache window up to now (as when the cache's event window has
    /// passed): on `Profile::V1_34` lists at older RVs are then answered from etcd, so a 410
    /// after `compact`. No effect on what `Profile::V1_28` serves (it reads those from etcd).
    pub fn compact_watch_cache(&self) {
        self.store().compact_watch_cache();
    }

    /// Fault injection handle.
    pub fn faults(&self) -> Faults {
        Faults {
            state: self.inner.ctx.faults.clone(),
            store: self.inner.ctx.store.clone(),
        }
    }

    /// Stops serving: the listener closes and open connections (watches included) are cut.
    pub async fn shutdown(self) {
        let handle = self
            .inner
            .server
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.inner.ctx.faults.drop_all_watches();
        self.inner.ctx.faults.kill_all_connections();
        if let Some(h) = handle {
            h.abort();
            let _ = h.await;
        }
    }
}

/// A minimal CustomResourceDefinition for a custom type: names, scope, and one served and
/// stored version with its `selectableFields` (jsonPaths are the field names with a leading
/// `.`).
fn crd_object(rt: &ResourceType) -> Value {
    let fields: Vec<Value> = rt
        .selectable_fields
        .iter()
        .map(|f| serde_json::json!({ "jsonPath": format!(".{f}") }))
        .collect();
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{}.{}", rt.resource, rt.group) },
        "spec": {
            "group": rt.group,
            "names": {
                "plural": rt.resource,
                "singular": rt.singular,
                "kind": rt.kind,
                "listKind": format!("{}List", rt.kind),
                "shortNames": rt.short_names,
            },
            "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": rt.version,
                "served": true,
                "storage": true,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                    }
                },
                "selectableFields": fields,
            }],
        },
    })
}
