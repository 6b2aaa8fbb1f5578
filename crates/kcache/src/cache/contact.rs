//! How recently one type's reflector heard from the upstream: the cache's age.
//!
//! Every answer the cache gives carries its age (`X-Kcache-Cache-Age`), and consistent reads
//! answered while the upstream cannot be reached are refused once the age passes the
//! configured staleness limit (docs/semantics.md, "Stale while down"). The age runs from the
//! last *confirmed* contact: an event, a bookmark, a list page or a watch opened. Before any,
//! it runs from the cache's creation, plus the age a state restored from disk already had.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// Contact with the upstream, as the reflector reports it.
#[derive(Debug)]
pub struct Contact {
    /// When the reflector last had confirmed contact with the upstream.
    last: RwLock<Option<Instant>>,
    /// Before any contact the age runs from here.
    created: Instant,
    /// How old a state loaded from disk already was when it was loaded (ms): added to the age
    /// until the first contact.
    restored_age: AtomicU64,
    /// Whether the reflector's latest request to the upstream got through.
    reachable: AtomicBool,
}

impl Default for Contact {
    fn default() -> Self {
        Contact {
            last: RwLock::new(None),
            created: Instant::now(),
            restored_age: AtomicU64::new(0),
            reachable: AtomicBool::new(false),
        }
    }
}

impl Contact {
    /// The upstream answered: the cache is confirmed current as of now.
    pub(crate) fn heard(&self) {
        *self.last.write().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.reachable.store(true, Ordering::Relaxed);
    }

    /// The reflector's request to the upstream failed; the cache ages until the next contact.
    pub(crate) fn lost(&self) {
        self.reachable.store(false, Ordering::Relaxed);
    }

    /// Whether the reflector's latest request to the upstream got through.
    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    /// A state restored from disk was already `age` old when it was loaded.
    pub(crate) fn restored(&self, age: Duration) {
        self.restored_age.store(
            u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Whether the reflector has reached the upstream since the cache was created: a state
    /// restored from disk is not confirmed current until then.
    pub(crate) fn confirmed(&self) -> bool {
        self.since_last().is_some()
    }

    /// Time since the last confirmed contact (None before any).
    pub(crate) fn since_last(&self) -> Option<Duration> {
        self.last
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .map(|t| t.elapsed())
    }

    /// How old what the cache serves may be: the time since the last confirmed contact
    /// (before any: since the cache was created, plus the age of a restored state).
    pub fn age(&self) -> Duration {
        self.since_last().unwrap_or_else(|| {
            let restored = self.restored_age.load(Ordering::Relaxed);
            self.created.elapsed() + Duration::from_millis(restored)
        })
    }
}
