//! The webhook backend against a small HTTP server that records what is POSTed to it and
//! answers as each test scripts. Tests wait for the server's posts and for
//! [`Auditor::flush`], never for time to pass.

use std::collections::VecDeque;
use std::sync::Mutex;

use axum::extract::State;
use http::StatusCode;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::*;
use crate::testing::{numbered_events, TempDir};
use crate::{Auditor, Level, Settings};

/// One request the server received.
#[derive(Debug)]
struct Post {
    method: http::Method,
    /// Path and query.
    target: String,
    content_type: Option<String>,
    authorization: Option<String>,
    body: Value,
}

impl Post {
    /// The audit IDs of the list's events, checking that the body is an EventList.
    fn ids(&self) -> Vec<String> {
        assert_eq!(self.body["kind"], "EventList", "{}", self.body);
        assert_eq!(self.body["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(self.body["metadata"], serde_json::json!({}));
        self.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                assert_eq!(e["kind"], "Event");
                e["auditID"].as_str().unwrap().to_string()
            })
            .collect()
    }
}

/// Permits the server's gate starts with: more answers than any test needs.
const GATE_OPEN: u32 = 1 << 20;

struct ServerState {
    posts: mpsc::UnboundedSender<Post>,
    /// Answers to give, in order; 200 once they run out.
    script: Mutex<VecDeque<StatusCode>>,
    /// Each answer waits for a permit (after the post is recorded).
    gate: Arc<Semaphore>,
}

/// The test's side of the server.
struct Hook {
    addr: std::net::SocketAddr,
    posts: mpsc::UnboundedReceiver<Post>,
    gate: Arc<Semaphore>,
    _dir: TempDir,
    kubeconfig: PathBuf,
}

impl Hook {
    /// A server answering `script` then 200s, with a kubeconfig whose server is
    /// `http://<address><path>` and whose user has the token `tok`.
    async fn start(script: &[StatusCode], path: &str) -> Hook {
        let (posts_tx, posts) = mpsc::unbounded_channel();
        let gate = Arc::new(Semaphore::new(GATE_OPEN as usize));
        let state = Arc::new(ServerState {
            posts: posts_tx,
            script: Mutex::new(script.iter().copied().collect()),
            gate: Arc::clone(&gate),
        });
        let app = axum::Router::new().fallback(answer).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let dir = TempDir::new("webhook");
        let kubeconfig = dir.path().join("webhook.kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: audit
  cluster:
    server: http://{addr}{path}
users:
- name: kcache
  user:
    token: tok
contexts:
- name: audit
  context:
    cluster: audit
    user: kcache
current-context: audit
"
            ),
        )
        .unwrap();
        Hook {
            addr,
            posts,
            gate,
            _dir: dir,
            kubeconfig,
        }
    }

    /// Settings for this webhook: batches of `batch_max_size`, an hour's wait unless given,
    /// retries 10 ms apart, 3 attempts.
    fn settings(&self, batch_max_size: usize, batch_max_wait: Option<Duration>) -> Settings {
        Settings {
            buffer_size: 100,
            forwarded: false,
            log: None,
            webhook: Some(WebhookSettings {
                kubeconfig: self.kubeconfig.clone(),
                batch_max_size,
                batch_max_wait: batch_max_wait.unwrap_or(Duration::from_secs(3600)),
                initial_backoff: Duration::from_millis(10),
                attempts: 3,
                request_timeout: Duration::from_secs(30),
            }),
        }
    }

    /// The next post (waiting at most a minute: a safety net, not a timing).
    async fn next(&mut self) -> Post {
        tokio::time::timeout(Duration::from_secs(60), self.posts.recv())
            .await
            .expect("no post within a minute")
            .expect("server gone")
    }

    /// Whether a post has arrived that was not taken yet.
    fn pending(&mut self) -> bool {
        !self.posts.is_empty()
    }
}

async fn answer(
    State(state): State<Arc<ServerState>>,
    request: axum::extract::Request,
) -> StatusCode {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let header = |name: http::header::HeaderName| {
        parts
            .headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let post = Post {
        method: parts.method.clone(),
        target: parts.uri.path_and_query().unwrap().to_string(),
        content_type: header(CONTENT_TYPE),
        authorization: header(http::header::AUTHORIZATION),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let _ = state.posts.send(post);
    let permit = state.gate.acquire().await.unwrap();
    permit.forget();
    state
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(StatusCode::OK)
}

fn ids(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("id-{i}")).collect()
}

#[tokio::test]
async fn batches_by_size_as_an_event_list() {
    let mut hook = Hook::start(&[], "/audit").await;
    let auditor = Auditor::start_with(hook.settings(3, None), crate::testing::record_all())
        .await
        .unwrap();
    for e in numbered_events(Level::Metadata, 7) {
        auditor.record(e);
    }
    let first = hook.next().await;
    assert_eq!(first.method, http::Method::POST);
    assert_eq!(first.target, "/audit");
    assert_eq!(first.content_type.as_deref(), Some("application/json"));
    assert_eq!(first.authorization.as_deref(), Some("Bearer tok"));
    assert_eq!(first.ids(), ids(0..3));
    assert_eq!(hook.next().await.ids(), ids(3..6));
    // The seventh waits for more (an hour) until flushed.
    auditor.flush().await;
    assert_eq!(hook.next().await.ids(), ids(6..7));
    let counts = auditor.stats().backend(Backend::Webhook).counts();
    assert_eq!(
        (
            counts.recorded,
            counts.written,
            counts.dropped,
            counts.errors
        ),
        (7, 7, 0, 0)
    );
}

#[tokio::test]
async fn a_batch_goes_after_its_wait() {
    let mut hook = Hook::start(&[], "/audit").await;
    let wait = Duration::from_millis(50);
    let auditor = Auditor::start_with(hook.settings(100, Some(wait)), crate::testing::record_all())
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    for e in numbered_events(Level::Metadata, 2) {
        auditor.record(e);
    }
    // No flush: the wait alone sends it.
    let post = hook.next().await;
    assert!(started.elapsed() >= wait);
    assert_eq!(post.ids(), ids(0..2));
    auditor.flush().await;
    assert!(!hook.pending());
    assert_eq!(
        auditor.stats().backend(Backend::Webhook).counts().written,
        2
    );
}

#[tokio::test]
async fn a_failed_send_is_retried() {
    let mut hook = Hook::start(&[StatusCode::INTERNAL_SERVER_ERROR], "/audit").await;
    let auditor = Auditor::start_with(hook.settings(10, None), crate::testing::record_all())
        .await
        .unwrap();
    for e in numbered_events(Level::Metadata, 2) {
        auditor.record(e);
    }
    auditor.flush().await;
    let failed = hook.next().await;
    let retried = hook.next().await;
    assert_eq!(failed.body, retried.body);
    assert_eq!(retried.ids(), ids(0..2));
    assert!(!hook.pending());
    let counts = auditor.stats().backend(Backend::Webhook).counts();
    assert_eq!((counts.written, counts.errors), (2, 0));
}

#[tokio::test]
async fn a_batch_is_given_up_after_its_attempts() {
    let failures = [
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::BAD_REQUEST,
        StatusCode::INTERNAL_SERVER_ERROR,
    ];
    let mut hook = Hook::start(&failures, "/audit").await;
    let auditor = Auditor::start_with(hook.settings(10, None), crate::testing::record_all())
        .await
        .unwrap();
    for e in numbered_events(Level::Metadata, 2) {
        auditor.record(e);
    }
    auditor.flush().await;
    for _ in 0..3 {
        assert_eq!(hook.next().await.ids(), ids(0..2));
    }
    assert!(!hook.pending());
    let counts = auditor.stats().backend(Backend::Webhook).counts();
    assert_eq!((counts.written, counts.errors), (0, 2));
    // The webhook is back: the next batch goes.
    auditor.record(numbered_events(Level::Metadata, 1).remove(0));
    auditor.flush().await;
    assert_eq!(hook.next().await.ids(), ids(0..1));
    let counts = auditor.stats().backend(Backend::Webhook).counts();
    assert_eq!((counts.recorded, counts.written, counts.errors), (3, 1, 2));
}

#[tokio::test]
async fn a_slow_webhook_fills_the_queue_and_events_are_dropped() {
    let mut hook = Hook::start(&[], "/audit").await;
    // Hold every answer until the test lets it go.
    let held = hook.gate.acquire_many(GATE_OPEN).await.unwrap();
    held.forget();
    let mut settings = hook.settings(1, None);
    settings.buffer_size = 2;
    let auditor = Auditor::start_with(settings, crate::testing::record_all())
        .await
        .unwrap();
    let mut events = numbered_events(Level::Metadata, 6).into_iter();
    auditor.record(events.next().unwrap());
    // The first batch is at the webhook, which does not answer.
    assert_eq!(hook.next().await.ids(), ids(0..1));
    // Two fit in the queue; the other three find it full, and `record` does not wait.
    for e in events {
        auditor.record(e);
    }
    let counts = auditor.stats().backend(Backend::Webhook).counts();
    assert_eq!((counts.recorded, counts.dropped, counts.written), (3, 3, 0));
    hook.gate.add_permits(100);
    auditor.flush().await;
    assert_eq!(hook.next().await.ids(), ids(1..2));
    assert_eq!(hook.next().await.ids(), ids(2..3));
    let counts = auditor.stats().backend(Backend::Webhook).counts();
    assert_eq!(
        (
            counts.recorded,
            counts.written,
            counts.dropped,
            counts.errors
        ),
        (3, 3, 3, 0)
    );
}

#[tokio::test]
async fn posts_go_to_exactly_the_configured_url() {
    for (path, want) in [
        ("/audit/v1/events?key=a%2Fb", "/audit/v1/events?key=a%2Fb"),
        ("/hook/", "/hook/"),
        ("", "/"),
    ] {
        let mut hook = Hook::start(&[], path).await;
        let auditor = Auditor::start_with(hook.settings(1, None), crate::testing::record_all())
            .await
            .unwrap();
        auditor.record(numbered_events(Level::Metadata, 1).remove(0));
        assert_eq!(hook.next().await.target, want, "server {}{path}", hook.addr);
        auditor.shutdown().await;
    }
}

#[tokio::test]
async fn shutdown_sends_the_partial_batch_and_stops() {
    let mut hook = Hook::start(&[], "/audit").await;
    let auditor = Auditor::start_with(hook.settings(10, None), crate::testing::record_all())
        .await
        .unwrap();
    let other = auditor.clone();
    for e in numbered_events(Level::Metadata, 4) {
        auditor.record(e);
    }
    auditor.shutdown().await;
    assert_eq!(hook.next().await.ids(), ids(0..4));
    // A clone records into the stopped backend: dropped, counted.
    other.record(numbered_events(Level::Metadata, 1).remove(0));
    let counts = other.stats().backend(Backend::Webhook).counts();
    assert_eq!((counts.recorded, counts.written, counts.dropped), (4, 4, 1));
    other.flush().await;
}

#[tokio::test]
async fn a_bad_kubeconfig_stops_the_start() {
    let dir = TempDir::new("bad-kubeconfig");
    let settings = |kubeconfig: PathBuf| Settings {
        buffer_size: 10,
        forwarded: false,
        log: None,
        webhook: Some(WebhookSettings {
            kubeconfig,
            batch_max_size: 1,
            batch_max_wait: Duration::from_secs(1),
            initial_backoff: Duration::from_secs(1),
            attempts: 1,
            request_timeout: Duration::from_secs(1),
        }),
    };
    let missing = Auditor::start_with(
        settings(dir.path().join("missing")),
        crate::testing::record_all(),
    )
    .await;
    assert!(
        matches!(missing, Err(AuditError::Kubeconfig { .. })),
        "{missing:?}"
    );
    let no_context = dir.path().join("no-context");
    std::fs::write(
        &no_context,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster: {server: 'http://127.0.0.1:1/audit'}\n",
    )
    .unwrap();
    let e = Auditor::start_with(settings(no_context), crate::testing::record_all())
        .await
        .unwrap_err();
    assert!(matches!(e, AuditError::Kubeconfig { .. }), "{e:?}");
    assert!(e.to_string().contains("no-context"), "{e}");
}

#[test]
fn settings_from_the_configuration() {
    let s = WebhookSettings::from_config(&WebhookConfig {
        kubeconfig: "/etc/kcache/audit-webhook.kubeconfig".into(),
        ..WebhookConfig::default()
    });
    assert_eq!(s.batch_max_size, 400);
    assert_eq!(s.batch_max_wait, Duration::from_secs(30));
    assert_eq!(s.initial_backoff, Duration::from_secs(10));
    assert_eq!(
        (s.attempts, s.request_timeout),
        (5, Duration::from_secs(30))
    );
}
