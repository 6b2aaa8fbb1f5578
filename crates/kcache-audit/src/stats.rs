//! What became of the events, counted per backend: the numbers behind
//! `kcache_audit_events_total{backend,result}`.

use std::sync::atomic::{AtomicU64, Ordering};

/// A backend: where events go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The file (or standard output).
    Log,
    /// The webhook.
    Webhook,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 2] = [Backend::Log, Backend::Webhook];

    /// Its name as a metric label: `log`, `webhook`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Log => "log",
            Backend::Webhook => "webhook",
        }
    }
}

/// The counters of every backend. Shared with the backends, which count as they go; read
/// them at any time.
#[derive(Debug, Default)]
pub struct AuditStats {
    log: BackendStats,
    webhook: BackendStats,
}

impl AuditStats {
    /// The counters of `backend` (all 0 for a backend that is not configured).
    pub fn backend(&self, backend: Backend) -> &BackendStats {
        match backend {
            Backend::Log => &self.log,
            Backend::Webhook => &self.webhook,
        }
    }
}

/// One backend's counters. Every event taken is eventually `written` or an `error`
/// (`recorded` − `written` − `errors` are still queued or in flight); `dropped` events were
/// never taken.
#[derive(Debug, Default)]
pub struct BackendStats {
    recorded: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    errors: AtomicU64,
}

/// A reading of a backend's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackendCounts {
    /// Events put in the backend's queue.
    pub recorded: u64,
    /// Events written to the file, or accepted by the webhook.
    pub written: u64,
    /// Events not queued: the queue was full (the backend is behind) or the backend had
    /// stopped.
    pub dropped: u64,
    /// Queued events lost: the write failed, or the webhook refused or could not be reached
    /// after every retry.
    pub errors: u64,
}

impl BackendStats {
    /// Read the counters (each is read on its own: they may be a moment apart).
    pub fn counts(&self) -> BackendCounts {
        BackendCounts {
            recorded: self.recorded.load(Ordering::Relaxed),
            written: self.written.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn add_recorded(&self, n: u64) {
        self.recorded.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_written(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_errors(&self, n: u64) {
        self.errors.fetch_add(n, Ordering::Relaxed);
    }
}
