//! The webhook backend: events POSTed in batches, as an audit.k8s.io/v1 `EventList`, to the
//! server of a kubeconfig, as the apiserver's `--audit-webhook-config-file` sends them.
//!
//! One task gathers events into a batch, sent when it has `batchMaxSize` events or
//! `batchMaxWaitSeconds` after its first one. A failed send is tried again after the
//! apiserver's backoff for audit webhooks (`k8s.io/apiserver/pkg/util/webhook`: the initial
//! backoff, times 1.5 each time, up to 20% more at random, 5 attempts in all), whatever the
//! failure, as its audit webhook does; then the batch is given up and counted as errors.
//! One batch is in flight at a time: while the webhook is slow its shelf fills, and events
//! that find it full are dropped and counted ([`crate::Auditor::record`] never waits).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::uri::{PathAndQuery, Uri};
use kube_client::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::WebhookConfig;
use crate::event::write_event_list;
use crate::shelf::Shelf;
use crate::stats::{AuditStats, Backend, BackendStats};
use crate::{AuditError, Item};

#[cfg(test)]
mod tests;

/// What the backend needs from the configuration, in the units it uses.
#[derive(Debug, Clone)]
pub(crate) struct WebhookSettings {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) batch_max_size: usize,
    pub(crate) batch_max_wait: Duration,
    pub(crate) initial_backoff: Duration,
    /// Sends of one batch before it is given up.
    pub(crate) attempts: u32,
    /// Bound on one send, its answer included.
    pub(crate) request_timeout: Duration,
}

/// The apiserver's audit webhook: 5 attempts, 30 seconds each.
const ATTEMPTS: u32 = 5;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl WebhookSettings {
    pub(crate) fn from_config(config: &WebhookConfig) -> WebhookSettings {
        WebhookSettings {
            kubeconfig: config.kubeconfig.clone(),
            batch_max_size: config.batch_max_size,
            batch_max_wait: config.batch_max_wait(),
            initial_backoff: config.initial_backoff(),
            attempts: ATTEMPTS,
            request_timeout: REQUEST_TIMEOUT,
        }
    }
}

/// Why one send failed (logged; the batch is retried or given up).
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("building the request")]
    Request(#[source] http::Error),
    #[error("sending")]
    Transport(#[source] kube_client::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the webhook answered {0}")]
    Status(http::StatusCode),
}

/// The webhook's client and where to POST.
struct Webhook {
    client: kube_client::Client,
    /// The server URL's path and query: what is POSTed to.
    target: PathAndQuery,
    /// The server URL, for logs.
    url: String,
}

/// Read the kubeconfig and build the client (an error here stops kcache's start, as a bad
/// `--audit-webhook-config-file` stops the apiserver's), then start the task that sends
/// what `shelf` gathers.
pub(crate) async fn start(
    settings: WebhookSettings,
    shelf: Arc<Shelf>,
    control: mpsc::Receiver<Item>,
    stats: Arc<AuditStats>,
) -> Result<(), AuditError> {
    let webhook = connect(&settings).await?;
    tokio::spawn(run(webhook, settings, shelf, control, stats));
    Ok(())
}

async fn connect(settings: &WebhookSettings) -> Result<Webhook, AuditError> {
    let path = settings.kubeconfig.display().to_string();
    let kubeconfig_error = |source| AuditError::Kubeconfig {
        path: path.clone(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(&settings.kubeconfig).map_err(kubeconfig_error)?;
    let mut config =
        kube_client::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(kubeconfig_error)?;
    // Retries are this backend's own (every failure, the apiserver's backoff); the client's
    // would retry some failures up to 15 times inside one attempt.
    config.default_retry = false;
    let url = config.cluster_url.to_string();
    let server = config.cluster_url.clone();
    let (Some(scheme), Some(authority)) = (server.scheme(), server.authority()) else {
        return Err(AuditError::WebhookUrl { path, server: url });
    };
    // kube-client puts its cluster URL's path before each request's path. The webhook's URL
    // is the whole address to POST to, so the client gets the origin alone and each request
    // the URL's path and query: the POST goes to exactly the configured URL, with or
    // without a trailing slash.
    let target = server
        .path_and_query()
        .filter(|p| !p.as_str().is_empty())
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    config.cluster_url = Uri::builder()
        .scheme(scheme.clone())
        .authority(authority.clone())
        .path_and_query("/")
        .build()
        .map_err(|_| AuditError::WebhookUrl {
            path: path.clone(),
            server: url.clone(),
        })?;
    let client = kube_client::Client::try_from(config).map_err(AuditError::Client)?;
    Ok(Webhook {
        client,
        target,
        url,
    })
}

/// Gather events into batches and send them until told to stop or every recorder is gone.
async fn run(
    webhook: Webhook,
    settings: WebhookSettings,
    shelf: Arc<Shelf>,
    mut control: mpsc::Receiver<Item>,
    stats: Arc<AuditStats>,
) {
    let mut sender = Sender {
        webhook,
        stats: stats.backend(Backend::Webhook),
        batch: Vec::with_capacity(settings.batch_max_size),
        deadline: None,
        settings,
    };
    loop {
        let item = match sender.deadline {
            Some(at) => tokio::select! {
                item = control.recv() => item,
                () = tokio::time::sleep_until(at) => {
                    sender.send().await;
                    continue;
                }
            },
            None => control.recv().await,
        };
        match item {
            Some(Item::Ready) => sender.take(&shelf).await,
            Some(Item::Flush(done)) => {
                sender.take(&shelf).await;
                sender.send().await;
                let _ = done.send(());
            }
            Some(Item::Shutdown(done)) => {
                // Nothing gets in after this: events recorded from now on are dropped and
                // counted. Those that got in before are sent.
                let waiting = crate::close(&shelf, &mut control, done);
                sender.take(&shelf).await;
                sender.send().await;
                for done in waiting {
                    let _ = done.send(());
                }
                return;
            }
            None => {
                // Every recorder is gone: send what they left.
                sender.take(&shelf).await;
                sender.send().await;
                return;
            }
        }
    }
}

/// The sending side: the webhook, the batch being gathered and when it must go.
struct Sender<'a> {
    webhook: Webhook,
    settings: WebhookSettings,
    stats: &'a BackendStats,
    batch: Vec<Bytes>,
    /// When the batch must go: `batch_max_wait` after its first event.
    deadline: Option<Instant>,
}

impl Sender<'_> {
    /// Take the shelf's lines into the batch, sending each batch that fills.
    async fn take(&mut self, shelf: &Shelf) {
        let taken = shelf.take(Vec::new());
        if taken.events == 0 {
            return;
        }
        let lines = Bytes::from(taken.bytes);
        for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if self.batch.is_empty() {
                self.deadline = Some(Instant::now() + self.settings.batch_max_wait);
            }
            self.batch.push(lines.slice_ref(line));
            if self.batch.len() >= self.settings.batch_max_size {
                self.send().await;
            }
        }
    }

    /// Send the batch (if it has events).
    async fn send(&mut self) {
        self.deadline = None;
        send(&self.webhook, &self.settings, &mut self.batch, self.stats).await;
    }
}

/// Send the batch (if it has events) with retries, count the outcome, and empty it.
async fn send(
    webhook: &Webhook,
    settings: &WebhookSettings,
    batch: &mut Vec<Bytes>,
    stats: &BackendStats,
) {
    if batch.is_empty() {
        return;
    }
    let count = batch.len() as u64;
    // About a kilobyte an event at level Metadata.
    let mut body = Vec::with_capacity(batch.len() * 1024);
    write_event_list(batch, &mut body);
    batch.clear();
    let payload = Bytes::from(body);
    let mut backoff = settings.initial_backoff;
    for attempt in 1..=settings.attempts {
        match webhook
            .post(payload.clone(), settings.request_timeout)
            .await
        {
            Ok(()) => {
                stats.add_written(count);
                return;
            }
            Err(e) if attempt == settings.attempts => {
                stats.add_errors(count);
                tracing::warn!(
                    url = %webhook.url, events = count, attempts = attempt,
                    error = %ErrorChain(&e),
                    "audit webhook: batch given up (counted as errors)"
                );
                return;
            }
            Err(e) => {
                tracing::debug!(url = %webhook.url, attempt, error = %ErrorChain(&e), "audit webhook: send failed; retrying");
                tokio::time::sleep(with_jitter(backoff)).await;
                backoff = backoff.mul_f64(1.5);
            }
        }
    }
}

impl Webhook {
    /// One POST of an `EventList`; a 2xx answer is success.
    async fn post(&self, payload: Bytes, timeout: Duration) -> Result<(), SendError> {
        let request = http::Request::post(Uri::from(self.target.clone()))
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, */*")
            .body(kube_client::client::Body::from(payload))
            .map_err(SendError::Request)?;
        let exchange = async {
            let response = self
                .client
                .send(request)
                .await
                .map_err(SendError::Transport)?;
            let status = response.status();
            // Read the answer to its end so that the connection can be used again.
            let _ = response.into_body().collect_bytes().await;
            if status.is_success() {
                Ok(())
            } else {
                Err(SendError::Status(status))
            }
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(SendError::Timeout(timeout)))
    }
}

/// `base` plus up to 20% of it, at random (the apiserver's jitter of 0.2): many kcaches
/// retrying at once do not all come back at the same instant.
fn with_jitter(base: Duration) -> Duration {
    let random = RandomState::new().build_hasher().finish();
    let fraction = (random % 1_000) as f64 / 1_000.0;
    base + base.mul_f64(0.2 * fraction)
}

/// An error and its sources, `: `-separated, for one log line.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(e) = source {
            write!(f, ": {e}")?;
            source = e.source();
        }
        Ok(())
    }
}
