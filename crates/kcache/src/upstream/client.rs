//! The HTTP clients every upstream request goes through, and the body of their answers.
//!
//! Two clients share kube-client's layers (base URL, credentials with their refresh, extra
//! headers) and differ below them:
//! - reads without a body (GET and HEAD that ask for no upgrade: every forwarded read, kcache's
//!   lists, probes and proofs) go through [`kcache_http1::Client`], which writes the request
//!   and reads the answer in the task that awaits it;
//! - everything else goes through hyper's pooled client, which runs each connection in a task
//!   of its own: writes with their bodies, protocol upgrades (exec, port-forward), and the
//!   watches of kcache's own reflectors and mirrors.
//!
//! Why two: a forwarded read is the most frequent thing kcache sends, and with hyper's pooled
//! client each one handed its request to the connection's task and its answer back, head and
//! body, waking two tasks several times per request; read in the caller's task, it waits on
//! the socket once. hyper stays for what that client does not do, and for kcache's own
//! watches: one long request per type gains nothing from a cheaper request, and hyper hands
//! a burst of upstream events to the reflector one chunk at a time, so that watchers are
//! woken per event and write one chunk per event as the upstream did (docs/semantics.md, W1).
//! Read from one buffer back to back, a burst reached watchers as one chunk.
//!
//! Neither goes through `kube_client::Client`: that wraps the same layers in a
//! `tower::buffer::Buffer`, which hands every request to a worker task over a channel and
//! boxes its answer's body. kcache's requests need neither the queue (the clients are shared
//! by clones, and their pools bound connections) nor the boxing.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use kube_client::client::Body;
use kube_client::Config;

use super::{Purpose, UpstreamError};

/// The most an upstream connection of hyper's client buffers of what it reads (hyper's own
/// default is about 400 KB); [`kcache_http1::Client`] reads the same amount at most. A
/// connection's read buffer grows to its bound during a big answer and never shrinks, and the
/// connection then carries one type's long watch: with the default, the buffers of 14 watches
/// that began with a streamed list held 2.6 MB, two thirds as much as the 3.9 MB of objects
/// they cached (a heap profile of the bench's mixed memory case). A TLS record is at most
/// 16 KiB, so reading more at once saves nothing over HTTPS.
const READ_BUFFER_MAX: usize = 16 * 1024;

type Stack = tower::util::BoxCloneSyncService<Request<Body>, Response<AnswerBody>, tower::BoxError>;

/// The two clients of one set of credentials (see the module's documentation).
#[derive(Clone)]
pub(super) struct Clients {
    reads: Stack,
    general: Stack,
}

impl Clients {
    pub(super) fn new(config: &Config) -> Result<Clients, UpstreamError> {
        use kube_client::client::ConfigExt;
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(config.connect_timeout);
        let https = config.rustls_https_connector_with_connector(http)?;
        let hyper =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http1_max_buf_size(READ_BUFFER_MAX)
                .build(https);
        let general =
            tower::ServiceExt::map_response(hyper, |r: Response<_>| r.map(AnswerBody::Hyper));

        let mut reads = kcache_http1::Client::builder()
            .connect_timeout(config.connect_timeout)
            .server_name(config.tls_server_name.clone())
            .read_size(READ_BUFFER_MAX);
        if config.cluster_url.scheme_str() == Some("https") {
            reads = reads.tls(config.rustls_client_config()?);
        }
        let reads = reads
            .build(&config.cluster_url)
            .map_err(|e| UpstreamError::Transport(kube_client::Error::Service(e.into())))?;
        let reads = tower::service_fn(move |req: Request<Body>| {
            let reads = reads.clone();
            async move {
                let answer = reads.send(req.into_parts().0).await?;
                Ok::<_, kcache_http1::Error>(answer.map(AnswerBody::Http1))
            }
        });
        Ok(Clients {
            // kcache-http1 joins the cluster URL's path with each request's itself, without
            // the base-URI layer's URI built and parsed again per request.
            reads: layered(config, reads, false)?,
            general: layered(config, general, true)?,
        })
    }

    /// The client for `req`, sent for `purpose` (see the module's documentation).
    pub(super) fn for_request(&self, req: &Request<Body>, purpose: Purpose) -> Stack {
        let own_watch = matches!(purpose, Purpose::ReflectorWatch | Purpose::ProtobufWatch);
        if !own_watch && kcache_http1::Client::can_send(req) {
            self.reads.clone()
        } else {
            self.general.clone()
        }
    }
}

/// kube-client's layers over `inner`, boxed; `base_uri`: with the layer that joins the
/// cluster URL with each request's path.
fn layered<S>(config: &Config, inner: S, base_uri: bool) -> Result<Stack, UpstreamError>
where
    S: tower::Service<Request<Body>, Response = Response<AnswerBody>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
{
    use kube_client::client::ConfigExt;
    let service = tower::ServiceBuilder::new()
        .option_layer(base_uri.then(|| config.base_uri_layer()))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(Into::into)
        .service(inner);
    Ok(tower::util::BoxCloneSyncService::new(service))
}

/// The body of an upstream answer, from whichever client carried it.
pub(super) enum AnswerBody {
    /// From hyper's pooled client.
    Hyper(hyper::body::Incoming),
    /// From [`kcache_http1::Client`].
    Http1(kcache_http1::Body),
}

impl HttpBody for AnswerBody {
    type Data = Bytes;
    type Error = kube_client::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, kube_client::Error>>> {
        match self.get_mut() {
            AnswerBody::Hyper(b) => Pin::new(b)
                .poll_frame(cx)
                .map_err(kube_client::Error::HyperError),
            AnswerBody::Http1(b) => Pin::new(b)
                .poll_frame(cx)
                .map_err(|e| kube_client::Error::Service(e.into())),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AnswerBody::Hyper(b) => b.size_hint(),
            AnswerBody::Http1(b) => b.size_hint(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            AnswerBody::Hyper(b) => b.is_end_stream(),
            AnswerBody::Http1(b) => b.is_end_stream(),
        }
    }
}

/// A request that got no answer, as kube-client reports it: its own errors (a credential that
/// could not be refreshed) as they are, the transport's as a service error.
pub(super) fn transport_error(e: tower::BoxError) -> UpstreamError {
    let e = e
        .downcast::<kube_client::Error>()
        .map(|e| *e)
        .or_else(|e| {
            e.downcast::<hyper::Error>()
                .map(|e| kube_client::Error::HyperError(*e))
        })
        .unwrap_or_else(kube_client::Error::Service);
    UpstreamError::Transport(e)
}
