//! Who may change a cache. A [`ResourceCache`] is shared read-only (`Arc<ResourceCache>`) by
//! the HTTP layer, watches, probes and the status pages; its objects and resourceVersion are
//! changed only through its one [`Writer`], which [`ResourceCache::split`] makes once and the
//! type's reflector owns (a state restored from disk is installed through it before the
//! reflector starts). A reader therefore cannot write, and the compiler checks it.
//!
//! Two other changes are allowed besides the reflector's, each through a narrow handle the
//! writer gives the registry (`crate::registry`) when the cache is registered (a [`Keeper`]):
//! - a cache proven equal to the upstream's state at a later revision (`api::proof`) may move
//!   its resourceVersion there, as an upstream bookmark would, through a [`Prover`];
//! - a cache whose type leaves the registry (no longer served, or dropped when idle) is
//!   retired: its watches end and its protobuf mirror stops. Only the registry does that, as
//!   it takes the cache out.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{EventType, ReplaceSummary, ResourceCache};
use crate::object::Object;

/// The one handle that changes a cache's objects and resourceVersion (see the module docs).
/// Not `Clone`: there is one per cache.
pub(crate) struct Writer {
    cache: Arc<ResourceCache>,
}

impl ResourceCache {
    /// The cache, shared for reading, and its one writer.
    pub(crate) fn split(self) -> (Arc<ResourceCache>, Writer) {
        let cache = Arc::new(self);
        (cache.clone(), Writer { cache })
    }
}

impl Writer {
    /// The cache this writer changes.
    pub(crate) fn cache(&self) -> &Arc<ResourceCache> {
        &self.cache
    }

    /// Install a complete list of the collection at `rv` (initial sync or relist): see
    /// [`ResourceCache`]'s docs on replacing its state.
    pub(crate) fn replace<O: Into<Arc<Object>>>(&self, objects: Vec<O>, rv: u64) -> ReplaceSummary {
        self.cache.replace(objects, rv)
    }

    /// Install a state loaded from disk as the first sync, aged `age` (ignored once the cache
    /// has synced).
    pub(crate) fn restore(&self, objects: Vec<Arc<Object>>, rv: u64, age: Duration) {
        self.cache.restore(objects, rv, age)
    }

    /// Apply one upstream watch event (repeats at or below the cache's RV are ignored).
    pub(crate) fn apply(&self, ty: EventType, object: Object) {
        self.cache.apply(ty, object)
    }

    /// An upstream bookmark: nothing of the type changed up to `rv`.
    pub(crate) fn bookmark(&self, rv: u64) {
        self.cache.bookmark(rv)
    }

    /// A list being gathered went over the memory budget (`bytes` so far): the cache goes over
    /// budget without holding the rest of it.
    pub(crate) fn over_budget_while_listing(&self, bytes: usize) {
        self.cache.over_budget_while_listing(bytes)
    }

    /// What the registry keeps of this writer (see the module docs).
    pub(crate) fn keeper(&self) -> Keeper {
        Keeper {
            cache: self.cache.clone(),
        }
    }
}

/// The cache, read through its writer (what the reflector reads of the cache it writes).
impl std::ops::Deref for Writer {
    type Target = ResourceCache;

    fn deref(&self) -> &ResourceCache {
        &self.cache
    }
}

/// What the registry holds of a cache's writer: the cache itself (shared, read-only), a
/// [`Prover`] for it, and retiring it when its type leaves the registry.
pub(crate) struct Keeper {
    cache: Arc<ResourceCache>,
}

impl Keeper {
    /// The cache, for reading.
    pub(crate) fn cache(&self) -> &Arc<ResourceCache> {
        &self.cache
    }

    /// The cache's prover; it holds the cache weakly, keeping no dropped cache alive.
    pub(crate) fn prover(&self) -> Prover {
        Prover {
            cache: Arc::downgrade(&self.cache),
        }
    }

    /// Whether this is the keeper of `cache`.
    pub(crate) fn keeps(&self, cache: &ResourceCache) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.cache), cache)
    }

    /// The cache's type left the registry: see [`ResourceCache`]'s `stop_serving`. Taken by
    /// value: the registry, which holds the type's one keeper, gives it up as it takes the
    /// cache out.
    pub(crate) fn retire(self) {
        self.cache.stop_serving();
    }
}

/// May only move a cache's resourceVersion forward to a revision at which the upstream's state
/// of the type was proven equal to the cache's (see the module docs). Holds the cache weakly:
/// it keeps no dropped cache alive.
pub(crate) struct Prover {
    cache: Weak<ResourceCache>,
}

impl Prover {
    /// The upstream's state at `rv` is the cache's: the cache is at `rv` now, as after an
    /// upstream bookmark there.
    pub(crate) fn proven_at(&self, rv: u64) {
        if let Some(cache) = self.cache.upgrade() {
            cache.bookmark(rv);
        }
    }
}
