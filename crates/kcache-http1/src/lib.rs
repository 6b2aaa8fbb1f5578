//! An HTTP/1.1 client for requests without a body (GET and HEAD), run in the task that awaits
//! the answer.
//!
//! kcache passes many small reads to one upstream. A pooled hyper client runs each connection
//! in a task of its own: the request is handed to that task over a channel, the answer's head
//! comes back over another, and each piece of the body is handed across again, so one small
//! request wakes two tasks several times. Here the caller's task writes the request and reads
//! the answer from the socket itself, and the body is read as the caller polls it: a small
//! request costs one wait for the socket.
//!
//! What it does:
//! - one origin (scheme, host, port, and a path put before each request's) per [`Client`], over
//!   TCP or TLS (rustls);
//! - a pool of kept-alive idle connections, most recently used first;
//! - answers framed by `Content-Length`, the chunked transfer coding, or the connection's end
//!   (RFC 9112 §6.3), streamed as they arrive;
//! - a request sent on a pooled connection that turns out to be closed (no byte of an answer
//!   came back), or that gets a 408 (the server closing it as idle as the request came), is
//!   sent once more on a new connection: only GET and HEAD are sent, and both are safe to
//!   repeat (RFC 9110 §9.2.2, §15.5.9).
//!
//! What it guarantees:
//! - an answer is only ever read as the answer to the request just sent: a connection goes
//!   back to the pool only when its answer was read to its end with nothing after it, and a
//!   pooled connection on which anything came while it was idle (a server's 408 before it
//!   closes, stray bytes, the close itself) is closed instead of reused;
//! - the answer's head comes within a bound ([`Builder::head_timeout`], 70 s by default; a
//!   request may carry its own, [`HeadTimeoutOverride`]), or the request fails with
//!   [`Error::HeadTimeout`] and its connection is closed;
//! - at most 16 interim (1xx) answers are read past before the final one; a 101 is an error,
//!   since no request asks to switch protocols;
//! - framing as RFC 9112 says where a server errs: `Transfer-Encoding` overrides
//!   `Content-Length` (§6.3), and then the connection is closed after the answer; in an
//!   HTTP/1.0 answer `Transfer-Encoding` means faulty framing, so the body is what comes until
//!   the server closes (§6.1);
//! - fields about one connection (RFC 9110 §7.6.1) stay on it: a request is sent without
//!   `Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`,
//!   `Upgrade`, `Proxy-Authorization`, `Content-Length` and the fields its `Connection` names;
//!   an answer is handed on without `Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`,
//!   `Trailer`, `Upgrade` and the fields its `Connection` names, and its `Transfer-Encoding`
//!   and `Content-Length` describe the body handed on (no `chunked` once the coding is taken
//!   off, no `Content-Length` beside a `Transfer-Encoding`).
//!
//! What it does not do, by design: request bodies, protocol upgrades, `Expect`, HTTP/2 and
//! proxies. [`Client::can_send`] says which requests it takes; callers send the others through
//! a general client.
#![forbid(unsafe_code)]
#![deny(rustdoc::broken_intra_doc_links)]

mod body;
mod head;
mod pool;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use http::{header, Method, Request, Response, StatusCode};

pub use body::Body;
use pool::{Conn, Pool};
use stream::{Origin, Stream};

/// Why a request got no answer, or its answer's body broke off.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URI given to [`Builder::build`] is not an `http` or `https` origin.
    #[error("not an http(s) origin: {0}")]
    Origin(String),
    /// The TLS server name is not a DNS name or an IP address.
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
    /// The TCP connection was not established within the connect timeout.
    #[error("connecting to {0}: timed out after {1:?}")]
    ConnectTimeout(String, Duration),
    /// The answer's head did not come within this bound of the request's write (see
    /// [`Builder::head_timeout`]); the connection is closed, and the request not sent again.
    #[error("no answer's head within {0:?}")]
    HeadTimeout(Duration),
    /// The TCP connection or the TLS handshake failed.
    #[error("connecting to {0}: {1}")]
    Connect(String, #[source] std::io::Error),
    /// Writing the request or reading the answer failed.
    #[error("upstream connection: {0}")]
    Io(#[from] std::io::Error),
    /// The connection ended before the answer's head was complete.
    #[error("upstream connection closed before an answer")]
    Closed,
    /// The connection ended before the body its head announced was complete.
    #[error("upstream connection closed in the middle of an answer's body")]
    Truncated,
    /// The answer is not HTTP/1.1 this client can read.
    #[error("malformed upstream answer: {0}")]
    Malformed(String),
    /// The client was asked to send a request it does not take (see [`Client::can_send`]).
    #[error("request not sent: {0}")]
    Unsupported(&'static str),
}

/// Settings of a [`Client`]; [`Client::builder`] gives the defaults.
#[derive(Clone)]
pub struct Builder {
    tls: Option<Arc<rustls::ClientConfig>>,
    server_name: Option<String>,
    connect_timeout: Option<Duration>,
    head_timeout: Option<Duration>,
    max_idle: usize,
    idle_timeout: Duration,
    read_size: usize,
}

/// The default bound on the wait for an answer's head. A head timeout is there to catch an
/// upstream that does not answer at all, not a slow answer: the apiserver bounds a request
/// that is not long-running at 60 s by default (`--request-timeout`) and then answers a 504
/// itself, which this leaves time to arrive. Long-running requests (watches) get their head
/// at once.
const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(70);

/// The most interim (1xx) answers read past before the final one: a server may send a few
/// (`103 Early Hints`), and one that sends them without end must not hold the request.
const MAX_INTERIM: usize = 16;

/// A request's own bound on the wait for its answer's head, in place of the client's
/// [`Builder::head_timeout`]: put it in the request's extensions. `None` waits as long as it
/// takes: for a long-running read whose head waits on data, such as a followed log
/// (`pods/{name}/log?follow=true`) of a container that writes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadTimeoutOverride(pub Option<Duration>);

impl Builder {
    /// The TLS settings for an `https` origin (their ALPN is set to `http/1.1`).
    pub fn tls(mut self, config: rustls::ClientConfig) -> Builder {
        let mut config = config;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        self.tls = Some(Arc::new(config));
        self
    }

    /// The name the server's certificate is checked against, and sent as SNI, when it is not
    /// the origin's host (a kubeconfig's `tls-server-name`).
    pub fn server_name(mut self, name: Option<String>) -> Builder {
        self.server_name = name;
        self
    }

    /// The bound on establishing a TCP connection; none by default.
    pub fn connect_timeout(mut self, timeout: Option<Duration>) -> Builder {
        self.connect_timeout = timeout;
        self
    }

    /// The bound on the wait for an answer's head, from the start of the request's write to
    /// the end of the final answer's head (interim 1xx answers included): 70 s by default;
    /// `None` for no bound. On expiry the request fails with [`Error::HeadTimeout`] and its
    /// connection is closed. The body is not bounded: a watch's streams as long as it lasts.
    /// A request may carry its own bound ([`HeadTimeoutOverride`]).
    pub fn head_timeout(mut self, timeout: Option<Duration>) -> Builder {
        self.head_timeout = timeout;
        self
    }

    /// How many idle connections are kept (128 by default); more are closed when freed.
    pub fn max_idle(mut self, n: usize) -> Builder {
        self.max_idle = n;
        self
    }

    /// How long an idle connection is kept (60 s by default).
    pub fn idle_timeout(mut self, timeout: Duration) -> Builder {
        self.idle_timeout = timeout;
        self
    }

    /// The most one read from a connection takes at once (16 KiB by default, one TLS record).
    /// A connection's buffer holds no more than this beyond an answer's unread part.
    pub fn read_size(mut self, bytes: usize) -> Builder {
        self.read_size = bytes.max(1024);
        self
    }

    /// A client of `origin`'s scheme, host and port. A path in `origin` is put before each
    /// request's path (as kube-client joins a cluster URL with a request's path).
    pub fn build(self, origin: &http::Uri) -> Result<Client, Error> {
        let origin = Origin::new(origin, self.tls, self.server_name.as_deref())?;
        Ok(Client {
            shared: Arc::new(Shared {
                origin,
                connect_timeout: self.connect_timeout,
                head_timeout: self.head_timeout,
                pool: Pool::new(self.max_idle, self.idle_timeout),
                read_size: self.read_size,
            }),
        })
    }
}

/// An HTTP/1.1 client of one origin; clones share its connections.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

struct Shared {
    origin: Origin,
    connect_timeout: Option<Duration>,
    head_timeout: Option<Duration>,
    pool: Pool,
    read_size: usize,
}

impl Client {
    /// Default settings: plain TCP, no connect timeout, a 70 s head timeout, 128 idle
    /// connections for 60 s.
    pub fn builder() -> Builder {
        Builder {
            tls: None,
            server_name: None,
            connect_timeout: None,
            head_timeout: Some(DEFAULT_HEAD_TIMEOUT),
            max_idle: 128,
            idle_timeout: Duration::from_secs(60),
            read_size: 16 * 1024,
        }
    }

    /// Whether this client takes `req`: a GET or HEAD without a body, not asking to upgrade
    /// the protocol or for a `100 Continue`.
    pub fn can_send<B: http_body::Body>(req: &Request<B>) -> bool {
        req.body().size_hint().exact() == Some(0)
            && unsendable(req.method(), req.headers()).is_none()
    }

    /// Send a request's head (its path, query and headers, less those about the connection;
    /// the origin is the client's) and await the answer's head, within the head timeout; the
    /// body streams from the connection as it is polled.
    pub async fn send(&self, req: http::request::Parts) -> Result<Response<Body>, Error> {
        if let Some(why) = unsendable(&req.method, &req.headers) {
            return Err(Error::Unsupported(why));
        }
        let origin = &self.shared.origin;
        let bytes = head::encode(&req, origin.authority(), origin.prefix());
        let no_body = req.method == Method::HEAD;
        let head_timeout = req
            .extensions
            .get::<HeadTimeoutOverride>()
            .map_or(self.shared.head_timeout, |o| o.0);
        if let Some(conn) = self.shared.pool.take() {
            match self.exchange(conn, &bytes, no_body, head_timeout).await {
                Err(e) if e.answer_unstarted => {}
                // A server closing an idle connection may send a 408 first; one that crossed
                // the request on its way is no answer to it, and RFC 9110 §15.5.9 lets the
                // client repeat the request. Only on a reused connection: on a new one, a 408
                // is the server's answer to this request.
                Ok(answer) if answer.status() == StatusCode::REQUEST_TIMEOUT => {}
                done => return done.map_err(|e| e.error),
            }
        }
        let conn = self.connect().await?;
        self.exchange(conn, &bytes, no_body, head_timeout)
            .await
            .map_err(|e| e.error)
    }

    async fn connect(&self) -> Result<Conn, Error> {
        let shared = &self.shared;
        let stream = Stream::connect(&shared.origin, shared.connect_timeout).await?;
        Ok(Conn::new(stream))
    }

    /// [`Client::answer`] within `head_timeout`. On its expiry the exchange, and with it the
    /// connection, is dropped: the answer may still come, and nothing else could be sent on
    /// the connection before it. It is not sent again either: the upstream may be working
    /// on it, and the caller has waited its bound.
    async fn exchange(
        &self,
        conn: Conn,
        request: &[u8],
        no_body: bool,
        head_timeout: Option<Duration>,
    ) -> Result<Response<Body>, Failure> {
        let answer = self.answer(conn, request, no_body);
        let Some(limit) = head_timeout else {
            return answer.await;
        };
        tokio::time::timeout(limit, answer)
            .await
            .unwrap_or(Err(Failure {
                error: Error::HeadTimeout(limit),
                answer_unstarted: false,
            }))
    }

    /// Write the request on `conn` and read the answer's head; on a failure, whether nothing
    /// of an answer came back (then the request may be sent again on another connection).
    async fn answer(
        &self,
        mut conn: Conn,
        request: &[u8],
        no_body: bool,
    ) -> Result<Response<Body>, Failure> {
        use tokio::io::AsyncWriteExt as _;
        let unstarted = |error| Failure {
            error,
            answer_unstarted: true,
        };
        conn.stream
            .write_all(request)
            .await
            .map_err(|e| unstarted(e.into()))?;
        conn.stream.flush().await.map_err(|e| unstarted(e.into()))?;
        let mut interim = 0;
        loop {
            let head = head::read(&mut conn, self.shared.read_size, no_body)
                .await
                .map_err(|e| Failure {
                    error: e.error,
                    answer_unstarted: !e.started && interim == 0,
                })?;
            // An interim answer (1xx other than 101, which `head::read` refuses) precedes the
            // final one (RFC 9110 §15.2); a client may skip those it does not expect.
            if head.parts.status.is_informational() {
                interim += 1;
                if interim > MAX_INTERIM {
                    return Err(Failure {
                        error: Error::Malformed(format!(
                            "more than {MAX_INTERIM} interim (1xx) answers"
                        )),
                        answer_unstarted: false,
                    });
                }
                continue;
            }
            let body = Body::new(conn, &head, self.shared.clone());
            return Ok(Response::from_parts(head.parts, body));
        }
    }
}

/// Why a request's method and headers are not for this client, if they are not.
fn unsendable(method: &Method, headers: &http::HeaderMap) -> Option<&'static str> {
    if method != Method::GET && method != Method::HEAD {
        return Some("only GET and HEAD");
    }
    if headers.contains_key(header::UPGRADE) || headers.contains_key(header::EXPECT) {
        return Some("upgrade or expect");
    }
    None
}

struct Failure {
    error: Error,
    answer_unstarted: bool,
}

#[cfg(test)]
mod tests;
