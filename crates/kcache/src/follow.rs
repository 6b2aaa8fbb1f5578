//! Following one cached type through what the upstream does with it: its reflector while the
//! upstream serves it; discovery, read again with a growing pause, while it does not (a
//! CustomResourceDefinition not created yet, or deleted); and the CRD itself, read now and
//! then, for what is changed in it in place (printer columns, selectable fields).
//!
//! Used for the configured types from start on, and for those on-demand caching takes up
//! (see [`crate::auto`]), which end here instead when the upstream stops serving them.

use std::sync::Arc;
use std::time::Duration;

use crate::api::App;
use crate::cache::{ResourceCache, Writer};
use crate::error::Report;
use crate::registry::Origin;
use crate::resource::TypeName;
use crate::upstream::{collection_url, Ended, Reflector, Upstream, UpstreamError};

/// A CRD's `selectableFields`, answered from the cache; without them (the CRD cannot be read,
/// e.g. no RBAC for it) selectors on those fields go to the upstream.
pub(crate) async fn selectable_fields(
    upstream: &Upstream,
    info: &crate::resource::ResourceInfo,
) -> Vec<String> {
    if !info.custom {
        return Vec::new();
    }
    upstream
        .crd_selectable_fields(&info.group, &info.resource, &info.version)
        .await
        .unwrap_or_else(|e| {
            tracing::info!(resource = %info, error = %Report(&e),
                "CRD not readable; field selectors beyond metadata go upstream");
            Vec::new()
        })
}

/// The longest pause between two discovery reads of a configured type the upstream does not
/// serve: a CRD created (or re-created) later is cached within this long, at one small request
/// per type per pause while it is missing.
const NOT_SERVED_RECHECK_MAX: Duration = Duration::from_secs(10);

/// One type for as long as kcache caches it. While the upstream serves it: its reflector (in
/// this task, so that stopping the task stops both). While it does not (a CRD not created
/// yet, or deleted): no cache, its requests passed through, and discovery read again after
/// 1 s, doubling to [`NOT_SERVED_RECHECK_MAX`], until it is served again, when a new cache is
/// built from what discovery and the CRD say then (kind, scope, selectable fields, and the
/// Table columns learnt afresh) and synced by a new reflector. One log line per change.
///
/// A custom type's CRD is read every [`CRD_RECHECK`] while it is cached, to follow what is
/// changed in place (see [`follow_crd`]). A type cached after start is not kept on disk
/// (`cache.persistDir`) until the next start.
///
/// An [`Origin::Auto`] type is not waited for: once the upstream stops serving it, or refuses
/// kcache its list or watch (403, with `stop_when_forbidden` set), it is dropped from the
/// registry and this ends with why.
pub(crate) async fn follow_type(
    app: Arc<App>,
    r: crate::config::ResourceConfig,
    origin: Origin,
    cache_config: crate::cache::CacheConfig,
    reflector: crate::upstream::ReflectorConfig,
    mut writer: Option<Writer>,
) -> Ended {
    loop {
        let writer = match writer.take() {
            Some(w) => w,
            None => {
                let info = served(&app.upstream, &r).await;
                tracing::info!(resource = %info, "served by the upstream; caching it");
                let (_, w) = new_cache(&app, &r, info, cache_config.clone())
                    .await
                    .split();
                forget_printer(&app, w.cache());
                app.registry.attach(&w);
                w
            }
        };
        let current = writer.cache().clone();
        let run = Reflector::new(
            app.upstream.clone(),
            writer,
            reflector.clone(),
            app.metrics.clone(),
            app.background.clone(),
        )
        .run();
        let ended = tokio::select! {
            ended = run => Some(ended),
            () = follow_crd(&app, &current), if current.info.custom => None,
        };
        match ended {
            // Passed through until restart (see `cache::budget`).
            Some(Ended::OverBudget) => return Ended::OverBudget,
            Some(ended @ (Ended::NotServed | Ended::Forbidden)) if origin == Origin::Auto => {
                if ended == Ended::Forbidden {
                    tracing::warn!(resource = %current.info,
                        "kcache may not list or watch it: no longer cached on demand");
                } else {
                    tracing::warn!(resource = %current.info,
                        "no longer served by the upstream: no longer cached on demand");
                }
                drop_auto_type(&app, &type_name(&current));
                return ended;
            }
            Some(Ended::NotServed | Ended::Forbidden) => {
                tracing::warn!(resource = %current.info,
                    "no longer served by the upstream: its cache dropped, its watches ended, \
                     its requests passed through until it is served again");
            }
            None => {
                tracing::info!(resource = %current.info,
                    "its CRD's selectableFields changed: caching it again with them");
            }
        }
        // Out of the registry, which retires the cache once no request can find it: its
        // watches are told to end.
        app.registry.detach(&current);
        forget_printer(&app, &current);
        drop(current);
        release_memory_soon();
    }
}

/// A new, empty cache of a type the upstream serves, as discovery describes it: its indexes,
/// and its CRD's selectable fields.
pub(crate) async fn new_cache(
    app: &App,
    r: &crate::config::ResourceConfig,
    info: crate::resource::ResourceInfo,
    cache_config: crate::cache::CacheConfig,
) -> ResourceCache {
    app.metrics.init_resource(&info.resource);
    let selectable = selectable_fields(&app.upstream, &info).await;
    ResourceCache::new(info, r.scope(), cache_config)
        .with_indexes(&r.indexes)
        .with_selectable_fields(&selectable)
}

/// Give the memory of a cache just dropped back to the system: glibc keeps freed pages
/// resident otherwise (see `kcache_heap`). After a pause, so that the requests and the task
/// still holding the cache have let go of it; on a blocking thread, since the walk over the
/// allocator's arenas takes milliseconds.
pub(crate) fn release_memory_soon() {
    tokio::spawn(async {
        tokio::time::sleep(RELEASE_AFTER).await;
        let _ = tokio::task::spawn_blocking(kcache_heap::release_free_memory).await;
    });
}

/// Give the allocator's free pages back to the system every `period`, for as long as kcache
/// runs (`cache.releaseMemorySeconds`). After the start's lists, a herd's connections and a
/// minute of churn, a kcache holding 660 MB measured 1,034 MB resident before a release and
/// 852 MB after it (BENCHMARKS.md, "Memory given back"): glibc returns pages only from the top
/// of each heap by itself. On a blocking thread of normal priority: the walk locks each arena
/// in turn, and a thread of lower priority could be descheduled holding a lock a reader
/// waits for.
pub(crate) async fn release_memory_every(period: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let started = std::time::Instant::now();
        let released = tokio::task::spawn_blocking(kcache_heap::release_free_memory)
            .await
            .unwrap_or(false);
        tracing::debug!(released, took = ?started.elapsed(), "free memory given back");
    }
}

/// How long after a cache is dropped its memory is given back.
const RELEASE_AFTER: Duration = Duration::from_secs(1);

/// The name a cache's type has in the registry.
fn type_name(cache: &ResourceCache) -> TypeName {
    TypeName::new(&cache.info.group, &cache.info.version, &cache.info.resource)
}

/// What a type cached on demand held when it was dropped.
pub(crate) struct Dropped {
    /// Its cache's memory estimate (see `CacheMemory::total`).
    pub bytes: usize,
    pub over_budget: bool,
}

/// Forget a type cached on demand: out of the registry first, so that no request finds its
/// cache once its watches are told to end (its probe and Table printer leave with its entry),
/// then its gauges (a configured type keeps its entry for when it is served again). Its memory
/// is given back once the last reader lets go of it. None when the type was not there.
pub(crate) fn drop_auto_type(app: &App, name: &TypeName) -> Option<Dropped> {
    // Retired by the registry as it takes it out.
    let cache = app.registry.drop_type(name)?;
    app.metrics.forget_resource(&cache.info.resource);
    let dropped = Dropped {
        bytes: cache.memory().total(),
        over_budget: cache.budget().is_over(),
    };
    drop(cache);
    release_memory_soon();
    Some(dropped)
}

/// How often a cached custom type's CRD is read, to follow what is changed in it in place.
const CRD_RECHECK: Duration = Duration::from_secs(10);

/// Follow a cached custom type's CRD, read every [`CRD_RECHECK`]: new printer columns make
/// the Table printer be built again from them (at the next Table read); selectable fields
/// other than those the cache's indexes were built with end this (the cache must be built
/// again). A CRD kcache may not read (403), or a type with no CRD (404: an aggregated API's),
/// is not read again: its printer and fields stay as they were.
async fn follow_crd(app: &App, cache: &ResourceCache) {
    let info = &cache.info;
    let read = || {
        app.upstream
            .crd_version(&info.group, &info.resource, &info.version)
    };
    // The columns a printer may have been built from; unknown until the CRD is first read,
    // when a printer built earlier (from an older CRD, perhaps) is dropped.
    let mut columns = read()
        .await
        .ok()
        .map(|v| v["additionalPrinterColumns"].clone());
    loop {
        tokio::time::sleep(CRD_RECHECK).await;
        let now = match read().await {
            Ok(now) => now,
            // Not a CRD's type (an aggregated API's), or not readable by kcache.
            Err(e) if matches!(e.code(), Some(403 | 404)) => return std::future::pending().await,
            Err(_) => continue,
        };
        if crate::upstream::selectable_fields_of(&now) != cache.selectable_fields() {
            return;
        }
        let now = now["additionalPrinterColumns"].clone();
        if columns.as_ref() != Some(&now) {
            if columns.is_some() {
                tracing::info!(resource = %info, "its CRD's printer columns changed");
            }
            forget_printer(app, cache);
            columns = Some(now);
        }
    }
}

/// What discovery says of a configured type, once the upstream serves it (read again after
/// 1 s, doubling to [`NOT_SERVED_RECHECK_MAX`], until then).
async fn served(
    upstream: &Upstream,
    r: &crate::config::ResourceConfig,
) -> crate::resource::ResourceInfo {
    let mut pause = Duration::from_secs(1);
    loop {
        tokio::time::sleep(pause).await;
        match upstream.discover(&r.group, &r.version, &r.resource).await {
            Ok(info) => return info,
            Err(UpstreamError::UnknownResource(_)) => {}
            Err(e) => {
                tracing::debug!(resource = %r.resource, error = %Report(&e), "discovery failed");
            }
        }
        pause = (pause * 2).min(NOT_SERVED_RECHECK_MAX);
    }
}

/// Where a configured type the upstream does not serve yet will be listed, for its revision
/// probe: a type restricted to a namespace is taken to be namespaced.
pub(crate) fn configured_collection(r: &crate::config::ResourceConfig) -> String {
    collection_url(
        &crate::resource::api_path(&r.group, &r.version),
        &r.resource,
        r.namespace.as_deref(),
    )
}

/// A type's Table printer is built from the columns of the CRD as it was: one re-created with
/// other columns needs them read again.
pub(crate) fn forget_printer(app: &App, cache: &ResourceCache) {
    if let Some(printer) = app.registry.printer(cache) {
        printer.forget();
    }
}
