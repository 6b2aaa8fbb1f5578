//! Who may change a cache. A [`ResourceCache`] is shared read-only (`Arc<ResourceCache>`) by
//! the HTTP layer, watches, probes and the status pages; its objects and resourceVersion are
//! changed only through its one [`Writer`], which [`ResourceCache::split`] makes once and the
//! type's reflector owns (a state restored from disk is installed through it before the
//! reflector starts). A reader therefore cannot write, and the compiler checks it.
//!
//! One other change is allowed besides the reflector's, narrowly: a cache proven equal to the
//! upstream's state at a later revision (`api::proof`) may move its resourceVersion there, as
//! an upstream bookmark would. That takes a [`Prover`], which only the writer hands out.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{EventType, ReplaceSummary, ResourceCache};
use crate::object::Object;

/// The one handle that changes a cache's objects and resourceVersion (see the module docs).
/// Not `Clone`: there is one per cache.
pub struct Writer {
    cache: Arc<ResourceCache>,
}

impl ResourceCache {
    /// The cache, shared for reading, and its one writer.
    pub fn split(self) -> (Arc<ResourceCache>, Writer) {
        let cache = Arc::new(self);
        (cache.clone(), Writer { cache })
    }
}

impl Writer {
    /// The cache this writer changes.
    pub fn cache(&self) -> &Arc<ResourceCache> {
        &self.cache
    }

    /// Install a complete list of the collection at `rv` (initial sync or relist): see
    /// [`ResourceCache`]'s docs on replacing its state.
    pub fn replace<O: Into<Arc<Object>>>(&self, objects: Vec<O>, rv: u64) -> ReplaceSummary {
        self.cache.replace(objects, rv)
    }

    /// Install a state loaded from disk as the first sync, aged `age` (ignored once the cache
    /// has synced).
    pub fn restore(&self, objects: Vec<Arc<Object>>, rv: u64, age: Duration) {
        self.cache.restore(objects, rv, age)
    }

    /// Apply one upstream watch event (repeats at or below the cache's RV are ignored).
    pub fn apply(&self, ty: EventType, object: Object) {
        self.cache.apply(ty, object)
    }

    /// An upstream bookmark: nothing of the type changed up to `rv`.
    pub fn bookmark(&self, rv: u64) {
        self.cache.bookmark(rv)
    }

    /// A list being gathered went over the memory budget (`bytes` so far): the cache goes over
    /// budget without holding the rest of it.
    pub fn over_budget_while_listing(&self, bytes: usize) {
        self.cache.over_budget_while_listing(bytes)
    }

    /// The narrow capability of moving the cache's resourceVersion to a revision at which the
    /// upstream's state was proven to be the cache's.
    pub fn prover(&self) -> Prover {
        Prover {
            cache: Arc::downgrade(&self.cache),
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

/// May only move a cache's resourceVersion forward to a revision at which the upstream's state
/// of the type was proven equal to the cache's (see the module docs). Holds the cache weakly:
/// it keeps no dropped cache alive.
#[derive(Clone)]
pub struct Prover {
    cache: Weak<ResourceCache>,
}

impl Prover {
    /// The upstream's state at `rv` is the cache's: the cache is at `rv` now, as after an
    /// upstream bookmark there.
    pub fn proven_at(&self, rv: u64) {
        if let Some(cache) = self.cache.upgrade() {
            cache.bookmark(rv);
        }
    }

    /// Whether this is the prover of `cache`.
    pub fn proves(&self, cache: &ResourceCache) -> bool {
        std::ptr::eq(self.cache.as_ptr(), cache)
    }
}
