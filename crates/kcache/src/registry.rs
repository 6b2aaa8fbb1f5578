//! Which resource types kcache knows of: one entry per type, holding all kcache keeps of it:
//! the cache serving it while the upstream serves it (through its writer's keeper), its
//! revision probe and its Table printer (the cache holds its own protobuf mirror). A request
//! finds its type here once, as a `Served` it carries to its answer; a type without a cache
//! (not served by the upstream, or not known at all) is passed through.
//!
//! One entry rather than a map per concern: what is kept of a type cannot outlive the type or
//! be missing for it, and a lookup is by the request's own group, version and resource, never
//! by a key formatted to match (a probe keyed by a collection path formatted one way at start
//! and another at lookup would silently send every consistent read upstream).
//!
//! Types are added at start (the configured ones) and at run time (those on-demand caching
//! takes up, which it also drops again when they go idle). Both are rare next to lookups, which
//! happen on every request: a lookup takes one read lock and clones an `Arc`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::cache::{Keeper, Prover, ResourceCache, Writer};
use crate::printers::PrinterSlot;
use crate::resource::TypeName;
use crate::upstream::RevisionProbe;

/// Why kcache caches a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Listed in the configuration's `resources`: cached for as long as kcache runs, and
    /// ready only once synced.
    Configured,
    /// Taken up by on-demand caching (`auto`) because clients read it: holds no readiness,
    /// and is dropped again once idle.
    Auto,
}

impl Origin {
    /// The word shown for it on `/status`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Origin::Configured => "configured",
            Origin::Auto => "auto",
        }
    }
}

/// One type, as [`Registry::entries`] reports it.
#[derive(Clone)]
pub(crate) struct Entry {
    pub name: TypeName,
    pub origin: Origin,
    /// None while the upstream does not serve the type.
    pub cache: Option<Arc<ResourceCache>>,
    /// Since a request last found the type's cache (since it was added, before that).
    pub idle: Duration,
}

/// A served type as a request finds it ([`Registry::get`]): its cache and what is kept beside
/// it, made once when the type is served, taken under one look-up and carried through the
/// request, so that no later step looks the type up again (and none can find a different
/// entry: a type dropped meanwhile is still the one the request started with, as a read that
/// took the cache just before a retirement still answers a state the type had).
pub(crate) struct Served {
    pub cache: Arc<ResourceCache>,
    /// The type's Table printer.
    pub printer: Arc<PrinterSlot>,
    /// What tells a consistent read the revision the cache must reach.
    pub probe: Arc<RevisionProbe>,
    /// What may move the cache's resourceVersion to a revision proven current.
    pub prover: Prover,
}

/// Every type kcache caches, by API group and plural resource (nested maps, so that a lookup
/// from a request's `&str`s allocates nothing).
pub struct Registry {
    slots: RwLock<HashMap<String, HashMap<String, Slot>>>,
    /// What [`Slot::used`] counts from.
    epoch: Instant,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            slots: RwLock::default(),
            epoch: Instant::now(),
        }
    }
}

struct Slot {
    name: TypeName,
    origin: Origin,
    /// The type's cache and what a request finds of it; None while the upstream does not
    /// serve the type.
    serving: Option<Serving>,
    /// Seconds from the registry's epoch to the last request that found this cache; kept for
    /// [`Origin::Auto`] types only, whose idleness decides when they are dropped.
    used: AtomicU64,
    /// What tells a consistent read the revision its cache must reach; kept while the type
    /// waits to be served, so that its reads are answered from the cache once it is.
    probe: Arc<RevisionProbe>,
    /// The type's Table printer, built on its first Table read.
    printer: Arc<PrinterSlot>,
}

/// A served type's cache, held through what its writer gave the registry (see [`Keeper`]),
/// and what a request finds of it, made once when the type starts being served: a lookup on
/// every request then costs one reference count, not one per part.
struct Serving {
    keeper: Keeper,
    served: Arc<Served>,
}

impl Slot {
    /// Serve the type from `keeper`'s cache.
    fn serve(&mut self, keeper: Keeper) {
        let served = Arc::new(Served {
            cache: keeper.cache().clone(),
            printer: self.printer.clone(),
            probe: self.probe.clone(),
            prover: keeper.prover(),
        });
        self.serving = Some(Serving { keeper, served });
    }

    /// Stop serving the type: its keeper, if it had one.
    fn unserve(&mut self) -> Option<Keeper> {
        self.serving.take().map(|s| s.keeper)
    }

    /// The keeper of the type's cache, while it is served.
    fn keeper(&self) -> Option<&Keeper> {
        self.serving.as_ref().map(|s| &s.keeper)
    }
}

impl Registry {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, HashMap<String, Slot>>> {
        self.slots.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, HashMap<String, Slot>>> {
        self.slots.write().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_secs()
    }

    /// Add a type with its revision probe, and its cache if the upstream serves it (else its
    /// requests pass through until [`Registry::attach`]); false, and nothing changed, when a
    /// version of the type is there already.
    pub(crate) fn insert(
        &self,
        name: TypeName,
        origin: Origin,
        cache: Option<&Writer>,
        probe: Arc<RevisionProbe>,
    ) -> bool {
        let mut slots = self.write();
        let group = slots.entry(name.group.clone()).or_default();
        if group.contains_key(&name.resource) {
            return false;
        }
        let used = AtomicU64::new(self.now());
        let mut slot = Slot {
            name,
            origin,
            serving: None,
            used,
            probe,
            printer: Arc::default(),
        };
        if let Some(writer) = cache {
            slot.serve(writer.keeper());
        }
        group.insert(slot.name.resource.clone(), slot);
        true
    }

    /// Give a type its cache, once the upstream serves it; false when the type is not there.
    pub(crate) fn attach(&self, writer: &Writer) -> bool {
        let mut slots = self.write();
        let info = &writer.cache().info;
        match slot_mut(&mut slots, &info.group, &info.version, &info.resource) {
            Some(slot) => {
                slot.serve(writer.keeper());
                true
            }
            None => false,
        }
    }

    /// Take a type's cache out once the upstream no longer serves it: its requests pass
    /// through from then on (until [`Registry::attach`] gives it a new one), and the cache is
    /// retired (its watches end; see [`Keeper`]) once no request can find it.
    pub(crate) fn detach(&self, cache: &ResourceCache) {
        let mut slots = self.write();
        let info = &cache.info;
        let slot = slot_mut(&mut slots, &info.group, &info.version, &info.resource);
        let removed = slot.and_then(|slot| {
            let keeps = slot.keeper().is_some_and(|k| k.keeps(cache));
            keeps.then(|| slot.unserve()).flatten()
        });
        drop(slots);
        if let Some(k) = removed {
            k.retire();
        }
    }

    /// Forget a type altogether (an idle on-demand type), and with its entry all that was kept
    /// of it: its requests pass through as those of any type kcache does not know. Its cache,
    /// if it had one, is retired (see [`Keeper`]) and returned.
    pub(crate) fn drop_type(&self, name: &TypeName) -> Option<Arc<ResourceCache>> {
        let mut slots = self.write();
        let group = slots.get_mut(&name.group)?;
        if group.get(&name.resource)?.name != *name {
            return None;
        }
        let slot = group.remove(&name.resource)?;
        if group.is_empty() {
            slots.remove(&name.group);
        }
        drop(slots);
        let keeper = slot.serving?.keeper;
        let cache = keeper.cache().clone();
        keeper.retire();
        Some(cache)
    }

    /// What a request of `group/version/resource` finds of its type, if that exact version is
    /// cached and the upstream serves it: the cache and what is kept beside it, under one
    /// look-up, for the whole request.
    pub(crate) fn get(&self, group: &str, version: &str, resource: &str) -> Option<Arc<Served>> {
        let slots = self.read();
        let slot = slot(&slots, group, version, resource)?;
        let served = slot.serving.as_ref()?.served.clone();
        if slot.origin == Origin::Auto {
            let now = self.now();
            // Written once a second at most: every request of the type reads it.
            if slot.used.load(Ordering::Relaxed) != now {
                slot.used.store(now, Ordering::Relaxed);
            }
        }
        Some(served)
    }

    /// The Table printer of `cache`'s type.
    pub(crate) fn printer(&self, cache: &ResourceCache) -> Option<Arc<PrinterSlot>> {
        self.part_of(cache, |slot| Some(slot.printer.clone()))
    }

    /// What `part` takes of the entry of `cache`'s type, under the read lock.
    fn part_of<T>(
        &self,
        cache: &ResourceCache,
        part: impl FnOnce(&Slot) -> Option<T>,
    ) -> Option<T> {
        let info = &cache.info;
        part(slot(
            &self.read(),
            &info.group,
            &info.version,
            &info.resource,
        )?)
    }

    /// Whether some version of `group/resource` is here, with a cache or not.
    pub(crate) fn knows(&self, group: &str, resource: &str) -> bool {
        self.read()
            .get(group)
            .is_some_and(|g| g.contains_key(resource))
    }

    /// Every type's cache (the types the upstream does not serve have none).
    pub fn all(&self) -> impl Iterator<Item = Arc<ResourceCache>> {
        let caches: Vec<_> = self
            .read()
            .values()
            .flat_map(HashMap::values)
            .filter_map(|s| s.keeper().map(|k| k.cache().clone()))
            .collect();
        caches.into_iter()
    }

    /// Whether every configured type's cache has settled (see [`ResourceCache::is_settled`]):
    /// what readiness waits for. Types cached on demand are not waited for.
    pub(crate) fn configured_settled(&self) -> bool {
        self.read()
            .values()
            .flat_map(HashMap::values)
            .filter(|s| s.origin == Origin::Configured)
            .filter_map(Slot::keeper)
            .all(|k| k.cache().is_settled())
    }

    /// Every type, sorted by name.
    pub(crate) fn entries(&self) -> Vec<Entry> {
        let now = self.now();
        let mut out: Vec<Entry> = self
            .read()
            .values()
            .flat_map(HashMap::values)
            .map(|s| Entry {
                name: s.name.clone(),
                origin: s.origin,
                cache: s.keeper().map(|k| k.cache().clone()),
                idle: Duration::from_secs(now.saturating_sub(s.used.load(Ordering::Relaxed))),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The configured types the upstream does not serve (yet), by name. (An on-demand type is
    /// only added once the upstream serves it; one it stops serving is dropped.)
    pub(crate) fn not_served(&self) -> Vec<TypeName> {
        self.entries()
            .into_iter()
            .filter(|e| e.cache.is_none())
            .map(|e| e.name)
            .collect()
    }
}

fn slot<'a>(
    slots: &'a HashMap<String, HashMap<String, Slot>>,
    group: &str,
    version: &str,
    resource: &str,
) -> Option<&'a Slot> {
    slots
        .get(group)?
        .get(resource)
        .filter(|s| s.name.version == version)
}

fn slot_mut<'a>(
    slots: &'a mut HashMap<String, HashMap<String, Slot>>,
    group: &str,
    version: &str,
    resource: &str,
) -> Option<&'a mut Slot> {
    slots
        .get_mut(group)?
        .get_mut(resource)
        .filter(|s| s.name.version == version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheConfig, Scope};
    use crate::resource::ResourceInfo;
    use crate::upstream::Upstream;

    fn info() -> ResourceInfo {
        ResourceInfo::core_v1("configmaps", "ConfigMap")
    }

    /// A probe nothing asks: these tests read no revision.
    fn probe() -> Arc<RevisionProbe> {
        let upstream = Upstream::from_url("http://127.0.0.1:9").unwrap();
        RevisionProbe::new(upstream, vec!["/api/v1/configmaps".into()])
    }

    #[test]
    fn the_registry_gives_a_type_its_cache_only_while_the_upstream_serves_it() {
        let registry = Registry::default();
        let name = TypeName::new("", "v1", "configmaps");
        assert!(registry.insert(name.clone(), Origin::Configured, None, probe()));
        assert!(registry.get("", "v1", "configmaps").is_none());
        assert_eq!(registry.all().count(), 0);
        assert_eq!(registry.not_served(), std::slice::from_ref(&name));
        assert_eq!(name.to_string(), "v1/configmaps");

        let (cache, writer) =
            ResourceCache::new(info(), Scope::default(), CacheConfig::default()).split();
        assert!(registry.attach(&writer));
        assert!(registry
            .get("", "v1", "configmaps")
            .is_some_and(|s| Arc::ptr_eq(&s.cache, &cache)));
        assert!(
            registry.get("", "v2", "configmaps").is_none(),
            "another version"
        );
        assert!(registry.not_served().is_empty());

        // Taken out when the upstream stops serving it, and retired: its watchers are told.
        let rv = cache.subscribe();
        registry.detach(&cache);
        assert!(registry.get("", "v1", "configmaps").is_none());
        assert!(cache.is_not_served());
        assert!(rv.has_changed().unwrap());
        assert_eq!(registry.not_served().len(), 1);

        // A type that is not configured gets no slot.
        let mut other = info();
        other.resource = "secrets".into();
        let (_, secrets) =
            ResourceCache::new(other, Scope::default(), CacheConfig::default()).split();
        assert!(!registry.attach(&secrets));
    }

    #[test]
    fn a_type_added_at_run_time_is_found_until_it_is_dropped() {
        let registry = Registry::default();
        let name = TypeName::new("", "v1", "configmaps");
        let (cache, writer) =
            ResourceCache::new(info(), Scope::default(), CacheConfig::default()).split();
        assert!(registry.insert(name.clone(), Origin::Auto, Some(&writer), probe()));
        // One version of a type at a time.
        let mut v2 = name.clone();
        v2.version = "v2".into();
        assert!(!registry.insert(v2.clone(), Origin::Auto, None, probe()));
        assert!(registry.knows("", "configmaps"));
        assert!(registry.get("", "v1", "configmaps").is_some());
        let entries = registry.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].origin, Origin::Auto);
        assert!(entries[0].idle < std::time::Duration::from_secs(2));

        assert!(registry.drop_type(&v2).is_none(), "not the version there");
        let dropped = registry.drop_type(&name).expect("its cache");
        assert!(Arc::ptr_eq(&dropped, &cache));
        assert!(registry.get("", "v1", "configmaps").is_none());
        assert!(!registry.knows("", "configmaps"));
        assert!(registry.entries().is_empty());
    }

    #[test]
    fn a_request_finds_its_types_probe_and_printer_with_its_cache_until_the_entry_leaves() {
        let registry = Registry::default();
        let name = TypeName::new("", "v1", "configmaps");
        let (cache, writer) =
            ResourceCache::new(info(), Scope::default(), CacheConfig::default()).split();
        let probe = probe();
        assert!(registry.insert(name.clone(), Origin::Auto, Some(&writer), probe.clone()));
        let served = registry.get("", "v1", "configmaps").expect("served");
        assert!(Arc::ptr_eq(&served.cache, &cache));
        assert!(Arc::ptr_eq(&served.probe, &probe));
        let again = registry.get("", "v1", "configmaps").expect("served");
        assert!(Arc::ptr_eq(&served.printer, &again.printer), "one printer");
        assert!(Arc::ptr_eq(
            &registry.printer(&cache).expect("a printer slot"),
            &served.printer
        ));

        // A configured type keeps its entry while it is not served, but a request finds none.
        registry.detach(&cache);
        assert!(registry.get("", "v1", "configmaps").is_none());
        assert!(registry.printer(&cache).is_some());

        registry.drop_type(&name);
        assert!(registry.printer(&cache).is_none());
    }
}
