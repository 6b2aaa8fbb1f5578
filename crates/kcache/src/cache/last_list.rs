//! When the reflector last installed a complete list of the type, and why it listed.
//!
//! The cache's other figures say what it holds; this one says how it came to hold it, which
//! is the first thing to ask of a type that relists often (an upstream whose watch history is
//! too short for it answers its watches with 410 Gone) or that is older than it should be.
//! The reflector knows why it lists and records it here as it installs the list (see
//! `upstream::reflector`); the admin status page reads it.

use std::sync::Mutex;
use std::time::SystemTime;

/// Why the reflector listed the collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListReason {
    /// The first list since kcache started.
    Startup,
    /// The upstream ended the watch with 410 Gone: its history no longer held the cache's
    /// resourceVersion.
    Expired,
    /// An event kcache could not read: skipping it would leave the cache wrong, a list
    /// repairs it.
    UnreadableEvent,
    /// The state restored from disk was ahead of the upstream (another cluster, or a restore
    /// of this one).
    RestoredAhead,
}

impl ListReason {
    /// A few words for people (the status page, `kcache status`).
    pub(crate) fn describe(self) -> &'static str {
        match self {
            ListReason::Startup => "startup",
            ListReason::Expired => "410 Gone",
            ListReason::UnreadableEvent => "unreadable event",
            ListReason::RestoredAhead => "restored state ahead of upstream",
        }
    }
}

/// One installed list: when, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListRecord {
    /// Wall-clock time, to be read next to logs.
    pub at: SystemTime,
    pub reason: ListReason,
}

/// The latest list installed in one cache (None before the first; a cache restored from disk
/// has none until the reflector lists).
#[derive(Debug, Default)]
pub struct LastList(Mutex<Option<ListRecord>>);

impl LastList {
    /// A list was installed now, for `reason`.
    pub(crate) fn record(&self, reason: ListReason) {
        let record = ListRecord {
            at: SystemTime::now(),
            reason,
        };
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(record);
    }

    /// The latest list installed, if any.
    pub fn get(&self) -> Option<ListRecord> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
