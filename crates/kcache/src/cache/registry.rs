//! Which resource types kcache knows of, and the cache serving each while the upstream serves
//! it. A request finds its type's cache here; a type without one (not served by the upstream,
//! or not known at all) is passed through.
//!
//! Types are added at start (the configured ones) and at run time (those on-demand caching
//! takes up, which it also drops again when they go idle). Both are rare next to lookups, which
//! happen on every request: a lookup takes one read lock and clones an `Arc`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::{Keeper, Prover, ResourceCache, Writer};

/// A type, by name: what is known of one that has no cache.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TypeName {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl TypeName {
    pub(crate) fn new(group: &str, version: &str, resource: &str) -> TypeName {
        TypeName {
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
        }
    }
}

impl std::fmt::Display for TypeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::resource::write_type_name(f, &self.group, &self.version, &self.resource)
    }
}

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
    /// The type's cache, held through what its writer gave the registry (see [`Keeper`]);
    /// None while the upstream does not serve the type.
    cache: Option<Keeper>,
    /// Seconds from the registry's epoch to the last request that found this cache; kept for
    /// [`Origin::Auto`] types only, whose idleness decides when they are dropped.
    used: AtomicU64,
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

    /// Add a type, with its cache if the upstream serves it (else its requests pass through
    /// until [`Registry::install`]); false, and nothing changed, when a version of the type
    /// is there already.
    pub(crate) fn insert(&self, name: TypeName, origin: Origin, cache: Option<&Writer>) -> bool {
        let mut slots = self.write();
        let group = slots.entry(name.group.clone()).or_default();
        if group.contains_key(&name.resource) {
            return false;
        }
        let used = AtomicU64::new(self.now());
        group.insert(
            name.resource.clone(),
            Slot {
                name,
                origin,
                cache: cache.map(Writer::keeper),
                used,
            },
        );
        true
    }

    /// Give a type its cache, once the upstream serves it; false when the type is not there.
    pub(crate) fn install(&self, writer: &Writer) -> bool {
        let mut slots = self.write();
        let info = &writer.cache().info;
        match slot_mut(&mut slots, &info.group, &info.version, &info.resource) {
            Some(slot) => {
                slot.cache = Some(writer.keeper());
                true
            }
            None => false,
        }
    }

    /// Take a type's cache out once the upstream no longer serves it: its requests pass
    /// through from then on (until [`Registry::install`] gives it a new one), and the cache is
    /// retired (its watches end; see [`Keeper`]) once no request can find it.
    pub(crate) fn remove(&self, cache: &ResourceCache) {
        let mut slots = self.write();
        let info = &cache.info;
        let slot = slot_mut(&mut slots, &info.group, &info.version, &info.resource);
        let removed = slot.and_then(|slot| {
            let keeps = slot.cache.as_ref().is_some_and(|k| k.keeps(cache));
            keeps.then(|| slot.cache.take()).flatten()
        });
        drop(slots);
        if let Some(k) = removed {
            k.retire();
        }
    }

    /// Forget a type altogether (an idle on-demand type): its requests pass through as those
    /// of any type kcache does not know. Its cache, if it had one, is retired (see [`Keeper`])
    /// and returned.
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
        let keeper = slot.cache?;
        keeper.retire();
        Some(keeper.cache().clone())
    }

    /// The cache serving `group/version/resource`, if that exact version is cached and the
    /// upstream serves it.
    pub(crate) fn get(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<Arc<ResourceCache>> {
        let slots = self.read();
        let slot = slot(&slots, group, version, resource)?;
        let cache = slot.cache.as_ref()?.cache().clone();
        if slot.origin == Origin::Auto {
            let now = self.now();
            // Written once a second at most: every request of the type reads it.
            if slot.used.load(Ordering::Relaxed) != now {
                slot.used.store(now, Ordering::Relaxed);
            }
        }
        Some(cache)
    }

    /// What may move `cache`'s resourceVersion to a revision proven current, while `cache` is
    /// its type's cache here.
    pub(crate) fn prover(&self, cache: &ResourceCache) -> Option<Prover> {
        let slots = self.read();
        let info = &cache.info;
        let keeper = slot(&slots, &info.group, &info.version, &info.resource)?
            .cache
            .as_ref()?;
        keeper.keeps(cache).then(|| keeper.prover())
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
            .filter_map(|s| s.cache.as_ref().map(|k| k.cache().clone()))
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
            .filter_map(|s| s.cache.as_ref())
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
                cache: s.cache.as_ref().map(|k| k.cache().clone()),
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
