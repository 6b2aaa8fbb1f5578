//! kcache's Kubernetes audit trail: the apiserver's audit Policy, audit.k8s.io/v1 events, and
//! the log and webhook backends, as the apiserver has them.
//!
//! # Why kcache audits
//!
//! A cluster's audit log is the apiserver's record of who did what. kcache answers most
//! reads (LIST, GET, WATCH) from its own cache, so those reads never reach the apiserver
//! and never appear in its audit log: without a trail of its own, putting kcache in front of
//! an apiserver would hide every read it serves. kcache therefore records them itself, with
//! the apiserver's own policy file, in the apiserver's own event format, to the same kinds
//! of destination, so that the events can be shipped and read alongside the apiserver's.
//! Requests kcache forwards under the caller's own identity are audited by the apiserver
//! already; recording them here too is optional ([`AuditConfig::forwarded`]).
//!
//! # The pipeline
//!
//! 1. [`Policy`]: on each request, [`Policy::evaluate`] gives its level and the stages to
//!    leave out ([`RuleOutcome`]); it borrows the request's attributes and allocates nothing.
//! 2. [`Request`] and [`Event`]: for an audited request, its data is built once, shared in
//!    an `Arc`, and each stage's event adds only the time and what the stage knows.
//! 3. [`Auditor::record`]: the event is serialised once, on the recording thread, and its
//!    line appended, without waiting, to one bounded buffer per backend (its shelf,
//!    `bufferSize` events).
//! 4. The backends take their shelves whole, on their own: the log backend on a thread of its
//!    own (file IO blocks), writing the lines and rotating the file as the apiserver does; the
//!    webhook backend on a task, POSTing batches as an `EventList` with retries.
//!
//! # Never block, drop and count
//!
//! An audit trail must not slow down or stop what it records. When a backend falls behind
//! (a slow disk, a webhook that is down) and its queue is full, [`Auditor::record`] drops
//! the event for that backend and counts it ([`AuditStats`]: `dropped`), and the request goes
//! on. The apiserver's batching backends make the same trade. The counters tell an operator
//! when the trail has gaps: `kcache_audit_events_total{backend,result}` with `result` one of
//! `recorded`, `written`, `dropped`, `error`.
//!
//! # Use
//!
//! ```no_run
//! # async fn example(config: kcache_audit::AuditConfig) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::SystemTime;
//! use kcache_audit::{
//!     Attributes, AuditId, Auditor, Policy, Request, ResourceAttributes, ResponseStatus,
//!     Stage, UserInfo,
//! };
//!
//! let policy = Policy::load(&config.policy_file)?;
//! let auditor = Auditor::start(&config, policy).await?;
//!
//! // On a request:
//! let user = Arc::new(UserInfo { username: "alice".into(), ..UserInfo::default() });
//! let resource = ResourceAttributes {
//!     group: "", version: "v1", resource: "pods", subresource: None,
//!     namespace: Some("default"), name: None,
//! };
//! let attributes = Attributes {
//!     user: &user.username, groups: &user.groups, verb: "list",
//!     path: "/api/v1/namespaces/default/pods", resource: Some(resource),
//! };
//! let outcome = auditor.policy().evaluate(&attributes);
//! if outcome.records(Stage::RequestReceived) || outcome.records(Stage::ResponseComplete) {
//!     let uri = "/api/v1/namespaces/default/pods?limit=500";
//!     let request = Arc::new(Request::new(
//!         &outcome, AuditId::random(), "list", uri, user, SystemTime::now(),
//!     ));
//!     auditor.record(request.received_event());
//!     // … the answer is sent …
//!     auditor.record(
//!         request
//!             .event(Stage::ResponseComplete, SystemTime::now())
//!             .with_status(ResponseStatus::from_code(200)),
//!     );
//! }
//!
//! // At shutdown: write and send what is queued.
//! auditor.shutdown().await;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(rustdoc::broken_intra_doc_links)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

pub mod config;
pub mod event;
mod log;
pub mod policy;
mod shelf;
pub mod stats;
mod webhook;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

pub use config::{AuditConfig, AuditConfigError, LogConfig, WebhookConfig};
pub use event::{Annotations, AuditId, Event, ObjectRef, Request, ResponseStatus, UserInfo};
pub use policy::{
    Attributes, Level, Policy, PolicyError, ResourceAttributes, RuleOutcome, Stage, Stages,
};
pub use stats::{AuditStats, Backend, BackendCounts, BackendStats};

use log::LogSettings;
use shelf::{Put, Shelf};
use webhook::WebhookSettings;

/// Why the audit trail could not start. kcache should not serve without the trail it was
/// configured to keep, as the apiserver does not start without its.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The `audit:` section is invalid.
    #[error(transparent)]
    Config(#[from] AuditConfigError),
    /// The log file (or its directory) could not be opened or created.
    #[error("opening the audit log {path}")]
    OpenLog {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The log backend's thread could not be started.
    #[error("starting the audit log's thread")]
    Thread(#[source] std::io::Error),
    /// The webhook's kubeconfig could not be read, or has no usable current context.
    #[error("reading the audit webhook's kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        source: kube_client::config::KubeconfigError,
    },
    /// The webhook kubeconfig's server is not an absolute URL.
    #[error("audit webhook kubeconfig {path}: server {server:?} is not an absolute http(s) URL")]
    WebhookUrl {
        /// The file.
        path: String,
        /// Its server URL.
        server: String,
    },
    /// The webhook's HTTP client could not be built (its TLS settings, its credentials).
    #[error("building the audit webhook's client")]
    Client(#[source] kube_client::Error),
}

/// What a backend is told besides its shelf's lines.
pub(crate) enum Item {
    /// The shelf has lines again, after the backend last emptied it.
    Ready,
    /// Write (or send) everything recorded before this, then answer.
    Flush(oneshot::Sender<()>),
    /// As `Flush`, then stop.
    Shutdown(oneshot::Sender<()>),
}

/// A backend told to shut down (`done` answers that): its shelf refuses later lines, its
/// control channel takes no more items, and the answers of the Flush and Shutdown items already
/// in it are returned with `done`, to be given once the shelf's last lines are written.
pub(crate) fn close(
    shelf: &Shelf,
    control: &mut mpsc::Receiver<Item>,
    done: oneshot::Sender<()>,
) -> Vec<oneshot::Sender<()>> {
    shelf.close();
    control.close();
    let mut waiting = vec![done];
    while let Ok(item) = control.try_recv() {
        if let Item::Flush(done) | Item::Shutdown(done) = item {
            waiting.push(done);
        }
    }
    waiting
}

/// Room for a backend's `Item`s: `Ready` comes at most once per taking of the shelf, and a
/// `Ready` that finds no room is not needed (the backend has items to read and takes the
/// shelf on each).
const CONTROL_ITEMS: usize = 16;

/// The configuration in the units the backends use (the tests shorten its times and sizes
/// below what the YAML can say).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) buffer_size: usize,
    pub(crate) forwarded: bool,
    pub(crate) log: Option<LogSettings>,
    pub(crate) webhook: Option<WebhookSettings>,
}

impl Settings {
    pub(crate) fn from_config(config: &AuditConfig) -> Settings {
        Settings {
            buffer_size: config.buffer_size,
            forwarded: config.forwarded,
            log: config.log.as_ref().map(LogSettings::from_config),
            webhook: config.webhook.as_ref().map(WebhookSettings::from_config),
        }
    }
}

/// The running audit trail: the policy, and a queue to each backend. Cheap to clone (one
/// `Arc`); every clone records into the same queues.
#[derive(Clone)]
pub struct Auditor {
    inner: Arc<Inner>,
}

struct Inner {
    policy: Policy,
    forwarded: bool,
    queues: Vec<Queue>,
    stats: Arc<AuditStats>,
}

/// One backend, as the recording side holds it: its shelf and what tells it of the shelf.
struct Queue {
    backend: Backend,
    shelf: Arc<Shelf>,
    control: mpsc::Sender<Item>,
    /// Whether the last event was dropped: the first drop of a run is logged, not each.
    dropping: AtomicBool,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backends: Vec<&str> = self.inner.queues.iter().map(|q| q.backend.name()).collect();
        f.debug_struct("Auditor")
            .field("backends", &backends)
            .field("rules", &self.inner.policy.rule_count())
            .finish()
    }
}

impl Auditor {
    /// Check `config`, open the log file and read the webhook's kubeconfig (whichever are
    /// configured), and start the backends: the log's thread, the webhook's task (on the
    /// current tokio runtime). `policy` is usually [`Policy::load`] of
    /// [`AuditConfig::policy_file`].
    pub async fn start(config: &AuditConfig, policy: Policy) -> Result<Auditor, AuditError> {
        config.validate()?;
        Auditor::start_with(Settings::from_config(config), policy).await
    }

    pub(crate) async fn start_with(
        settings: Settings,
        policy: Policy,
    ) -> Result<Auditor, AuditError> {
        let stats = Arc::new(AuditStats::default());
        let mut queues = Vec::new();
        // The webhook first: if its kubeconfig is wrong, no log thread has been started.
        if let Some(webhook) = settings.webhook {
            let (queue, control) = Queue::new(Backend::Webhook, settings.buffer_size);
            webhook::start(
                webhook,
                Arc::clone(&queue.shelf),
                control,
                Arc::clone(&stats),
            )
            .await?;
            queues.push(queue);
        }
        if let Some(log) = settings.log {
            let (queue, control) = Queue::new(Backend::Log, settings.buffer_size);
            log::start(log, Arc::clone(&queue.shelf), control, Arc::clone(&stats))?;
            queues.push(queue);
        }
        Ok(Auditor {
            inner: Arc::new(Inner {
                policy,
                forwarded: settings.forwarded,
                queues,
                stats,
            }),
        })
    }

    /// The policy that decides each request's level.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// Whether requests forwarded under the caller's own identity are audited too
    /// ([`AuditConfig::forwarded`]).
    pub fn audits_forwarded(&self) -> bool {
        self.inner.forwarded
    }

    /// Put `event` on every backend's shelf, without waiting. An event of a stage its request
    /// does not record (level `None`, or an omitted stage) is ignored. A backend whose shelf
    /// is full (it is behind) or that has stopped does not get it: it is counted as dropped
    /// there.
    ///
    /// The event is serialised here, once for all backends, into a buffer this thread reuses,
    /// and its line copied onto each shelf; the event and its parts are freed on the thread
    /// that made them. Freed on a backend's thread instead, each of them would be a free into
    /// another thread's allocator arena (measured 2026-11-28 with the bench's `audit`
    /// scenario: more than the serialising).
    pub fn record(&self, event: Event) {
        if !event.request.records(event.stage) {
            return;
        }
        thread_local! {
            static LINE: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(4096));
        }
        LINE.with(|line| {
            let mut line = line.borrow_mut();
            line.clear();
            event.write_json(&mut line);
            line.push(b'\n');
            for queue in &self.inner.queues {
                queue.put(&line, self.inner.stats.backend(queue.backend));
            }
            if line.capacity() > 64 * 1024 {
                *line = Vec::with_capacity(4096);
            }
        });
    }

    /// The counters of each backend (shared: they keep counting).
    pub fn stats(&self) -> Arc<AuditStats> {
        Arc::clone(&self.inner.stats)
    }

    /// The backends configured, in no particular order.
    pub fn backends(&self) -> impl Iterator<Item = Backend> + '_ {
        self.inner.queues.iter().map(|q| q.backend)
    }

    /// Wait until every event recorded before the call is written to the log (and flushed
    /// to the file) and sent to the webhook (a partial batch is sent at once), or given up
    /// after the webhook's retries. Waits for room in a full queue.
    pub async fn flush(&self) {
        self.each_backend(Item::Flush).await;
    }

    /// [`Auditor::flush`], then stop the backends: events recorded afterwards, from any
    /// clone, are dropped and counted. A webhook that keeps failing holds this up for its
    /// retries (about a minute and a half with the apiserver's 10-second initial backoff):
    /// bound it with a timeout where that matters.
    pub async fn shutdown(self) {
        self.each_backend(Item::Shutdown).await;
    }

    /// Send each backend the item `make` builds around an answer channel, then wait for
    /// every answer (the backends work through their queues at the same time).
    async fn each_backend(&self, make: fn(oneshot::Sender<()>) -> Item) {
        let mut answers = Vec::with_capacity(self.inner.queues.len());
        for queue in &self.inner.queues {
            let (done, answer) = oneshot::channel();
            // A backend that has stopped has nothing left to do.
            if queue.control.send(make(done)).await.is_ok() {
                answers.push(answer);
            }
        }
        for answer in answers {
            let _ = answer.await;
        }
    }
}

impl Queue {
    /// A backend's shelf of `limit` events, and the receiving end of what tells it.
    fn new(backend: Backend, limit: usize) -> (Queue, mpsc::Receiver<Item>) {
        let (control, receiver) = mpsc::channel(CONTROL_ITEMS);
        let queue = Queue {
            backend,
            shelf: Arc::new(Shelf::new(limit)),
            control,
            dropping: AtomicBool::new(false),
        };
        (queue, receiver)
    }

    /// Put one line on the shelf, count it, and wake the backend if the shelf was empty.
    fn put(&self, line: &[u8], stats: &BackendStats) {
        let why = match self.shelf.put(line) {
            put @ (Put::First | Put::Added) => {
                stats.add_recorded(1);
                if put == Put::First {
                    // No room means the backend has items to read, and it takes the shelf
                    // on each of them.
                    let _ = self.control.try_send(Item::Ready);
                }
                if self.dropping.load(Ordering::Relaxed) {
                    self.dropping.store(false, Ordering::Relaxed);
                    tracing::info!(
                        backend = self.backend.name(),
                        "audit: the backend has caught up; events are kept again"
                    );
                }
                return;
            }
            Put::Full => "it is behind and holds as many as bufferSize allows",
            Put::Closed => "it has stopped",
        };
        stats.add_dropped(1);
        if !self.dropping.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                backend = self.backend.name(),
                "audit: events are dropped (and counted) because {why}"
            );
        }
    }
}
