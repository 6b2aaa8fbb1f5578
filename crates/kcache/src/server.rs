//! Wiring: discover the configured resources, start one reflector per resource, and serve the
//! API. Used by `kcache serve`, `kcache demo` and the tests alike.
//!
//! Why one file of this length: [`start`] and its named steps, then the accept loop (`serve`)
//! with its TLS and connection details; each is short, and together they are the order in
//! which a kcache comes up, read top to bottom.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{self, App};
use crate::auth::{AuthError, ConnInfo};
use crate::background::Background;
use crate::cache::{ResourceCache, Writer};
use crate::config::Config;
use crate::conn_task;
use crate::error::Report;
use crate::follow;
use crate::metrics::Metrics;
use crate::persist;
use crate::registry::{Origin, Registry};
use crate::resource::TypeName;
use crate::tls::{TlsError, TlsServer};
use crate::upstream::{collection_path, RevisionProbe, Upstream, UpstreamError};

/// Why kcache could not start; each keeps the error it comes from as its source (see
/// [`crate::error::Report`]).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("resource {resource}")]
    Discovery {
        resource: String,
        source: UpstreamError,
    },
    #[error("listening")]
    Listen(#[from] std::io::Error),
    #[error("listening on {addr} (adminListen)")]
    AdminListen {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Insecure(#[from] AuthError),
    #[error("TLS")]
    Tls(#[from] TlsError),
    #[error("cache.persistDir")]
    Persist(#[from] crate::persist::PersistError),
    #[error("audit")]
    Audit(#[from] kcache_audit::AuditError),
    #[error("audit.policyFile")]
    AuditPolicy(#[from] kcache_audit::PolicyError),
}

/// How long stopping waits for the audit trail's queued events to be written or sent.
const AUDIT_FLUSH: Duration = Duration::from_secs(10);

/// A running kcache.
pub struct Running {
    /// The API address.
    pub addr: SocketAddr,
    /// The admin address: kcache's own `/livez`, `/readyz`, `/healthz`, `/metrics` and
    /// `/status`.
    pub admin_addr: SocketAddr,
    pub app: Arc<App>,
    /// One task per configured type (see [`follow::follow_type`]), and on-demand caching's.
    reflectors: Vec<JoinHandle<()>>,
    server: JoinHandle<()>,
    admin: JoinHandle<()>,
    stop: watch::Sender<bool>,
    tls: bool,
    /// Writes the caches to disk (`cache.persistDir`).
    persister: Option<crate::persist::PersisterHandle>,
    /// How long shutdown waits for requests, and the tasks they left, to finish.
    grace: Duration,
}

impl Running {
    /// `http://ADDR`, or `https://ADDR` when serving TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// `http://ADMIN_ADDR`: the admin listener is always plain HTTP.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr)
    }

    /// Wait until every cache has synced (or gone over its memory budget: see
    /// `ResourceCache::is_settled`); false on timeout.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.app.registry.configured_settled() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// This kcache's metrics (what its admin `/metrics` serves), for tests and diagnostics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.app.metrics
    }

    /// The cache of one resource, for tests and diagnostics.
    pub fn cache(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceCache>> {
        self.app
            .registry
            .get(group, version, resource)
            .map(|s| s.cache.clone())
    }

    /// Stop: fail readiness, end watches cleanly, stop accepting, let in-flight requests
    /// finish within the grace period, then stop the reflectors.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let started = tokio::time::Instant::now();
        let _ = self.server.await;
        let _ = self.admin.await;
        // What requests left running (see `App::tasks`), within what is left of the grace
        // period; an exec session still open then ends with the process.
        self.app.tasks.close();
        let left = self.grace.saturating_sub(started.elapsed());
        if tokio::time::timeout(left, self.app.tasks.wait())
            .await
            .is_err()
        {
            tracing::info!(
                tasks = self.app.tasks.len(),
                "grace period over; tasks left by requests end with kcache"
            );
        }
        for r in &self.reflectors {
            r.abort();
        }
        // After the reflectors: the last flush holds the caches' final states.
        if let Some(p) = self.persister {
            p.stop().await;
        }
        // After the server: every request's events are recorded; written out before exit,
        // within a bound (a webhook that keeps failing would hold the exit for its retries).
        if let Some(audit) = &self.app.audit {
            let flushed = tokio::time::timeout(AUDIT_FLUSH, audit.auditor().flush()).await;
            if flushed.is_err() {
                tracing::warn!("audit: events still queued at exit are lost");
            }
        }
    }

    /// Serve until the process is told to stop (SIGINT/SIGTERM).
    pub async fn until_signal(self) {
        self.until_signal_or(std::future::pending()).await;
    }

    /// Serve until the process is told to stop (SIGINT/SIGTERM) or `also` completes.
    pub async fn until_signal_or(self, also: impl std::future::Future<Output = ()>) {
        tokio::select! {
            () = shutdown_signal() => {}
            () = also => {}
        }
        tracing::info!("shutting down");
        self.shutdown().await;
    }
}

/// The audit trail the configuration asks for: its policy file read and its backends
/// started (a policy that does not parse stops kcache, as it stops the apiserver).
async fn start_audit(config: &Config) -> Result<Option<crate::api::audit::Audit>, StartError> {
    let Some(audit) = &config.audit else {
        return Ok(None);
    };
    let policy = kcache_audit::Policy::load(&audit.policy_file)?;
    let auditor = kcache_audit::Auditor::start(audit, policy).await?;
    tracing::info!(policy = %audit.policy_file.display(), "requests kcache answers are audited");
    Ok(Some(crate::api::audit::Audit::new(auditor)))
}

/// Bind the admin listener at `config.adminListen`.
pub async fn bind_admin(config: &Config) -> Result<TcpListener, StartError> {
    TcpListener::bind(&config.admin_listen)
        .await
        .map_err(|e| StartError::AdminListen {
            addr: config.admin_listen.clone(),
            source: e,
        })
}

/// Read the upstream's `/version` within `timeout`; whether it was had.
async fn learn_version(upstream: &Upstream, timeout: Duration) -> bool {
    match tokio::time::timeout(timeout, upstream.learn_version()).await {
        Ok(Ok(minor)) => {
            tracing::info!(minor, "upstream version");
            true
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %Report(&e), "upstream version not known yet");
            false
        }
        Err(_) => false,
    }
}

/// Discover, start reflectors, serve the API on `listener` and kcache's own endpoints on
/// `admin` (see [`bind_admin`]; tests pass any free port).
///
/// In this order, each a step below: refuse an unsafe exposure and load TLS (fail fast, before a
/// long sync); learn the upstream's version; build each resource's cache, from disk where it
/// was kept; keep the caches on disk from then on; start one consistency probe and one
/// reflector per cached collection; then serve.
pub async fn start(
    config: &Config,
    upstream: Upstream,
    listener: TcpListener,
    admin: TcpListener,
) -> Result<Running, StartError> {
    let auth = config.auth_config();
    check_exposure(config, &auth, &listener)?;
    // Before discovery: a bad certificate should fail fast, not after a long sync.
    let tls = if config.tls.enabled() {
        Some(Arc::new(TlsServer::load(&config.tls)?))
    } else {
        None
    };
    let staleness = config.staleness();
    // This instance's metrics: everything below records into them, its admin /metrics shows
    // them; the upstream handle counts every request it sends there too.
    let metrics = Arc::new(Metrics::new());
    let upstream = upstream
        .with_request_timeout(staleness.upstream_request_timeout)
        .with_metrics(&metrics);
    learn_version_soon(&upstream).await;
    let store = match &config.cache.persist_dir {
        Some(dir) => {
            let store = persist::Store::open(dir)?;
            tracing::info!(path = %store.path().display(), "caches are kept on disk");
            Some(Arc::new(store))
        }
        None => None,
    };
    let built = build_caches(config, &upstream, &metrics, store.as_deref()).await?;
    let persister = store.map(|store| keep_on_disk(config, store, built.tracked, &metrics));
    let registry = register(&built.types, &upstream);
    // Decoding and installing lists, rendering `/metrics` and `/status`: below the readers'
    // priority (see `background`).
    let background = Background::for_this_machine()?;
    let (demand, wanted) = if config.auto.enabled {
        let (d, w) = crate::demand::Demand::new(config.auto.min_requests, config.auto.window());
        (Some(d), Some(w))
    } else {
        (None, None)
    };
    let mut settings = config.app_settings();
    settings.audit = start_audit(config).await?;
    // What kcache renders itself follows the upstream's version (see `learn_version_soon`).
    settings.watch.upstream = upstream.version().clone();
    let app = Arc::new(App::new(
        settings,
        upstream.clone(),
        registry,
        metrics.clone(),
        background,
        demand,
    ));
    // Protobuf readers of a restored type are answered from the start, as before the restart.
    for (cache, mirror) in built.mirrors {
        app.mirrors.resume(&cache, mirror.rv, mirror.objects);
    }
    let stop = app.stopping.clone();
    // One task per configured type, for as long as kcache runs: its reflector while the
    // upstream serves it, discovery while it does not.
    let mut reflectors: Vec<JoinHandle<()>> = built
        .types
        .into_iter()
        .map(|(r, cache)| {
            let cache_config = config.cache_config_for(&r);
            let (app, reflector) = (app.clone(), config.reflector_config());
            tokio::spawn(async move {
                follow::follow_type(app, r, Origin::Configured, cache_config, reflector, cache)
                    .await;
            })
        })
        .collect();
    if let Some(wanted) = wanted {
        tracing::info!(
            min_requests = config.auto.min_requests,
            window_seconds = config.auto.window_seconds,
            max_types = config.auto.max_types,
            "types clients read that are not configured are cached on demand (auto)"
        );
        reflectors.push(crate::auto::spawn(app.clone(), config, wanted));
    }
    // With delegated auth: the upstream's RBAC objects, so that what RBAC allowed is
    // remembered until RBAC changes (see `auth::rbac`). Kept with the reflectors: it runs
    // as long as they do and stops with them.
    if let Some(follow) = app.auth.follow_rbac() {
        reflectors.push(tokio::spawn(follow));
    }
    if config.cache.release_memory_seconds > 0 {
        let period = Duration::from_secs(config.cache.release_memory_seconds);
        reflectors.push(tokio::spawn(follow::release_memory_every(period)));
    }
    log_when_synced(app.clone());
    let addr = listener.local_addr()?;
    let router = api::router(app.clone());
    let grace = config.shutdown_grace();
    let tls_enabled = tls.is_some();
    let server = tokio::spawn(serve(
        listener,
        router,
        tls,
        stop.subscribe(),
        grace,
        metrics.clone(),
    ));
    // Same shutdown as the API: stop accepting, let in-flight scrapes and probes finish.
    let admin_addr = admin.local_addr()?;
    let admin = tokio::spawn(serve(
        admin,
        api::admin::router(app.clone()),
        None,
        stop.subscribe(),
        grace,
        metrics,
    ));
    tracing::info!(%admin_addr, "kcache's /livez, /readyz, /healthz, /metrics and /status served here");
    Ok(Running {
        addr,
        admin_addr,
        app,
        reflectors,
        server,
        admin,
        stop,
        tls: tls_enabled,
        persister,
        grace,
    })
}

/// Refuse an authentication mode the listen address makes unsafe, and say once when callers'
/// tokens would cross the network in clear.
fn check_exposure(
    config: &Config,
    auth: &crate::auth::AuthConfig,
    listener: &TcpListener,
) -> Result<(), StartError> {
    crate::auth::check_listen(auth.mode, &listener.local_addr()?)?;
    if auth.mode != crate::auth::AuthMode::None {
        tracing::info!(
            mode = auth.mode.as_str(),
            "callers are authenticated; cached reads authorized by SubjectAccessReview"
        );
        if !config.tls.enabled() && !listener.local_addr()?.ip().is_loopback() {
            // Allowed (TLS may end at a sidecar or mesh), but worth saying once.
            tracing::warn!(
                "serving plain HTTP on a network address: callers' bearer tokens cross the \
                 network unencrypted; set tls.certFile and tls.keyFile"
            );
        }
    }
    Ok(())
}

/// What kcache renders itself follows the upstream's version (continue tokens, bookmark
/// objects, where consistent GETs are answered); without an answer (a warm restart with the
/// upstream down) the newest recorded behaviour is assumed, and continue tokens follow the
/// upstream's own once one is seen. Asked briefly here (discovery needs the upstream anyway),
/// then in the background, so that an unreachable upstream does not hold up a warm start.
async fn learn_version_soon(upstream: &Upstream) {
    if learn_version(upstream, Duration::from_secs(2)).await {
        return;
    }
    let upstream = upstream.clone();
    tokio::spawn(async move {
        let mut pause = Duration::from_secs(1);
        while !learn_version(&upstream, upstream.request_timeout()).await {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(30));
        }
    });
}

/// The caches of the configured resources, and what the persister tracks of them.
struct Built {
    tracked: Vec<persist::Tracked>,
    /// The protobuf mirrors restored with their caches, started once the app exists.
    mirrors: Vec<(Arc<ResourceCache>, persist::StoredMirror)>,
    /// Every configured resource with its cache's writer (for its reflector); none for one
    /// the upstream does not serve (yet), whose requests are passed through meanwhile (see
    /// [`follow::follow_type`]).
    types: Vec<(crate::config::ResourceConfig, Option<Writer>)>,
}

/// One cache per configured resource: its facts discovered from the upstream (or, for a
/// resource kept on disk, from the store, so that it is served before the upstream is reached
/// at all), its indexes, and its stored state restored.
async fn build_caches(
    config: &Config,
    upstream: &Upstream,
    metrics: &Metrics,
    store: Option<&persist::Store>,
) -> Result<Built, StartError> {
    let mut built = Built {
        tracked: Vec::new(),
        mirrors: Vec::new(),
        types: Vec::new(),
    };
    for r in &config.resources {
        let name = TypeName::new(&r.group, &r.version, &r.resource);
        let key = persist::resource_key(r);
        let cache_config = config.cache_config_for(r);
        let fingerprint = persist::fingerprint(r, &cache_config.strip);
        let stored = store.and_then(|s| load_stored(s, &key, &fingerprint));
        let info = match &stored {
            Some(record) => record.info(r),
            None => match upstream.discover(&r.group, &r.version, &r.resource).await {
                Ok(info) => info,
                // A CRD not created yet (kcache deployed before the operator that installs
                // it): the type's requests are the upstream's until it is served.
                Err(UpstreamError::UnknownResource(_)) => {
                    tracing::warn!(resource = %name,
                        "not served by the upstream; its requests are passed through until it is");
                    built.types.push((r.clone(), None));
                    continue;
                }
                Err(source) => {
                    return Err(StartError::Discovery {
                        resource: name.to_string(),
                        source,
                    })
                }
            },
        };
        metrics.init_resource(&info.resource);
        let selectable = match &stored {
            Some(record) => record.selectable.clone(),
            None => follow::selectable_fields(upstream, &info).await,
        };
        let (cache, writer) = ResourceCache::new(info, r.scope(), cache_config)
            .with_indexes(&r.indexes)
            .with_selectable_fields(&selectable)
            .split();
        if let Some(store) = store {
            let mut restored_mirror = None;
            let restored = match &stored {
                Some(stored) => match restore(store, &writer, &key, stored) {
                    Ok(()) => {
                        restored_mirror = restore_mirror(store, &key, stored);
                        true
                    }
                    Err(e) => {
                        tracing::warn!(resource = %cache.info, error = %Report(&e),
                            "stored cache unusable; discarding it and syncing from the upstream");
                        discard(store, &key);
                        false
                    }
                },
                None => false,
            };
            metrics
                .persist_restored_objects
                .get_or_create(&crate::metrics::ResourceLabels {
                    resource: cache.info.resource.clone(),
                })
                .set(if restored { cache.len() as i64 } else { 0 });
            let record = persist::Record {
                config: fingerprint,
                kind: cache.info.kind.clone(),
                namespaced: cache.info.namespaced,
                custom: cache.info.custom,
                selectable,
                rv: 0,
                confirmed_ms: 0,
                objects: 0,
                mirror_rv: None,
                mirror_pending: Vec::new(),
            };
            let mut tracked = persist::Tracked::new(cache.clone(), key, record, restored);
            // Started with the app (`Mirrors::resume`), which may decline it (protobuf off
            // now): the persister then finds no mirror and stores none.
            if let Some(mirror) = restored_mirror {
                tracked = tracked.mirror_restored(&mirror);
                built.mirrors.push((cache.clone(), mirror));
            }
            built.tracked.push(tracked);
        }
        built.types.push((r.clone(), Some(writer)));
    }
    Ok(built)
}

/// Drop what the store holds of resources no longer configured, and start writing the
/// tracked caches to it.
fn keep_on_disk(
    config: &Config,
    store: Arc<persist::Store>,
    tracked: Vec<persist::Tracked>,
    metrics: &Arc<Metrics>,
) -> persist::PersisterHandle {
    let keep: std::collections::HashSet<String> =
        config.resources.iter().map(persist::resource_key).collect();
    match store.retain(&keep) {
        Ok(gone) if !gone.is_empty() => {
            tracing::info!(resources = ?gone, "discarded stored caches of resources no longer configured")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %Report(&e), "could not discard stored caches"),
    }
    persist::Persister::new(store, tracked, persist::FLUSH_EVERY, metrics.clone()).spawn()
}

/// The registry of the configured types: each with its cache (if the upstream serves it) and
/// its revision probe. Types not served yet get their probe too, so that their consistent
/// reads can be answered from the cache once they are.
///
/// Each probe lists its own type's collection first, then the others'. The revision is global
/// (see upstream::probe), but from v1.31 on the apiserver answers a consistent list from its
/// watch cache once that cache has reached the revision: the type's own watch cache is current
/// right after a write of that type, where another type's must first wait for a progress
/// notification from etcd (tens of milliseconds).
fn register(
    types: &[(crate::config::ResourceConfig, Option<Writer>)],
    upstream: &Upstream,
) -> Registry {
    let collections: Vec<String> = types
        .iter()
        .map(|(r, cache)| match cache {
            Some(w) => collection_path(w.cache()),
            None => follow::configured_collection(r),
        })
        .collect();
    let registry = Registry::default();
    for (i, (r, writer)) in types.iter().enumerate() {
        let mut order = vec![collections[i].clone()];
        order.extend(
            collections
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, c)| c.clone()),
        );
        let name = TypeName::new(&r.group, &r.version, &r.resource);
        let probe = RevisionProbe::new(upstream.clone(), order);
        registry.insert(name, Origin::Configured, writer.as_ref(), probe);
    }
    registry
}

/// One summary line once everything has synced (readiness turns green then).
fn log_when_synced(app: Arc<App>) {
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        while !app.registry.configured_settled() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (objects, bytes) = app
            .registry
            .all()
            .map(|c| c.size())
            .fold((0, 0), |(o, b), (o2, b2)| (o + o2, b + b2));
        tracing::info!(
            resources = app.registry.all().count(),
            objects,
            bytes,
            secs = started.elapsed().as_secs_f64(),
            "all caches synced; ready"
        );
    });
}

// The store is read and pruned on the runtime's thread: once, at start, before anything is
// served, so there is nothing else for the thread to do meanwhile.

/// The stored record of one resource, None if there is none or it cannot be used (then it is
/// discarded, and the resource syncs from the upstream). Its objects are read by [`restore`].
fn load_stored(store: &persist::Store, key: &str, fingerprint: &str) -> Option<persist::Record> {
    // A panic in the store while reading a damaged file is one more unusable file.
    let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.record(key, fingerprint)
    }))
    .unwrap_or(Err(persist::PersistError::Unreadable));
    match loaded {
        Ok(stored) => stored,
        Err(e) => {
            tracing::warn!(resource = key, error = %Report(&e),
                "stored cache unusable; discarding it and syncing from the upstream");
            discard(store, key);
            None
        }
    }
}

/// Read a resource's stored objects into its cache ([`persist::restore_from`]); a panic in the
/// store while reading a damaged file is one more unusable file.
fn restore(
    store: &persist::Store,
    writer: &Writer,
    key: &str,
    record: &persist::Record,
) -> Result<(), persist::PersistError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        persist::restore_from(store, writer, key, record)
    }))
    .unwrap_or(Err(persist::PersistError::Unreadable))
}

/// The protobuf mirror stored with a restored resource, if any; one that cannot be read is
/// left out (the mirror then lists, as without a store) with a warning.
fn restore_mirror(
    store: &persist::Store,
    key: &str,
    record: &persist::Record,
) -> Option<persist::StoredMirror> {
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.read_mirror(key, record)
    }))
    .unwrap_or(Err(persist::PersistError::Unreadable));
    read.unwrap_or_else(|e| {
        tracing::warn!(resource = key, error = %Report(&e),
            "stored protobuf mirror unusable; it lists from the upstream");
        None
    })
}

fn discard(store: &persist::Store, key: &str) {
    if let Err(e) = store.discard(key) {
        tracing::warn!(resource = key, error = %Report(&e), "could not discard a stored cache");
    }
}

/// Concurrent HTTP/2 streams per connection: client-go multiplexes every watch of a process on
/// one connection, so the limit must be in the thousands (hyper's default is 200).
const MAX_CONCURRENT_STREAMS: u32 = 10_000;

/// Accept connections and serve HTTP/1.1 and HTTP/2 on each, with protocol upgrades
/// (exec/attach/port-forward pass-through) allowed. Without TLS, HTTP/2 is prior knowledge
/// (h2c); with TLS, the handshake comes first and the version is whatever the client speaks
/// after it (ALPN h2 clients send the HTTP/2 preface, which the auto builder detects).
async fn serve(
    listener: TcpListener,
    router: axum::Router,
    tls: Option<Arc<TlsServer>>,
    mut stopped: watch::Receiver<bool>,
    grace: Duration,
    metrics: Arc<Metrics>,
) {
    use crate::coalesce::Coalescing;
    use hyper_util::rt::TokioIo;
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let graceful = GracefulShutdown::new();
    let reloader = tls.clone().map(|t| tokio::spawn(t.watch_files()));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: pause instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Watch events are small writes that must go out at once.
                let _ = stream.set_nodelay(true);
                let Some(tls) = &tls else {
                    let info = ConnInfo::new(peer, None);
                    let service = TowerToHyperService::new(with_conn_info(router.clone(), info));
                    let (executor, joining) = conn_task::executor();
                    let conn = connection_builder(executor)
                        .serve_connection_with_upgrades(
                            TokioIo::new(Coalescing::new(stream)),
                            service,
                        )
                        .into_owned();
                    let conn = joining.with(graceful.watch(conn));
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                    });
                    continue;
                };
                let conn = TlsConn {
                    tls: tls.clone(),
                    router: router.clone(),
                    watcher: graceful.watcher(),
                    metrics: metrics.clone(),
                };
                tokio::spawn(conn.serve(stream, peer));
            }
            _ = async { stopped.wait_for(|s| *s).await.map(|_| ()) } => break,
        }
    }
    drop(listener);
    if let Some(r) = reloader {
        r.abort();
    }
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!("grace period over; closing remaining connections");
    }
}

/// How one connection is served: HTTP/1.1 or HTTP/2, whichever the client speaks. A builder
/// per connection, because each HTTP/2 connection has an executor of its own, whose watch
/// streams run in the connection's task (see `conn_task`).
fn connection_builder(
    executor: conn_task::StreamExecutor,
) -> hyper_util::server::conn::auto::Builder<conn_task::StreamExecutor> {
    let mut builder = hyper_util::server::conn::auto::Builder::new(executor);
    builder
        .http2()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        // Flow-control windows sized for large lists rather than the 64 KiB default.
        .initial_stream_window_size(4 * 1024 * 1024)
        .initial_connection_window_size(16 * 1024 * 1024);
    builder
}

/// What one HTTPS connection's task needs.
struct TlsConn {
    tls: Arc<TlsServer>,
    router: axum::Router,
    watcher: hyper_util::server::graceful::Watcher,
    metrics: Arc<Metrics>,
}

impl TlsConn {
    /// Handshake, then serve. The handshake runs in the connection's own task so a slow
    /// client cannot stall the accept loop; holding the watcher makes shutdown wait for it.
    async fn serve(self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        use crate::coalesce::Coalescing;
        use hyper_util::rt::TokioIo;
        use hyper_util::service::TowerToHyperService;

        let (stream, client_cert) = match self.tls.handshake(stream).await {
            Ok(done) => done,
            Err(e) => {
                self.metrics.tls_handshake_errors.inc();
                tracing::debug!(%peer, error = %Report(&e), "TLS handshake failed");
                return;
            }
        };
        let info = ConnInfo::new(peer, client_cert);
        let service = TowerToHyperService::new(with_conn_info(self.router, info));
        let (executor, joining) = conn_task::executor();
        let conn = connection_builder(executor)
            .serve_connection_with_upgrades(TokioIo::new(Coalescing::new(stream)), service)
            .into_owned();
        if let Err(e) = joining.with(self.watcher.watch(conn)).await {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    }
}

/// The router with the connection's facts put in each request's extensions, where the
/// authentication layer finds them.
fn with_conn_info<B>(
    router: axum::Router,
    info: ConnInfo,
) -> tower::util::MapRequest<axum::Router, impl FnMut(http::Request<B>) -> http::Request<B> + Clone>
{
    tower::util::MapRequest::new(router, move |mut req: http::Request<B>| {
        req.extensions_mut().insert(info.clone());
        req
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
