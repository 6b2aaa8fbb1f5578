//! The HTTP load generator: `concurrency` workers, each with one keep-alive HTTP/1.1
//! connection (hyper), sending the same GET back to back for a fixed time. Every request's
//! latency (send to last body byte) is recorded; the same code measures kcache, nginx and the
//! simulated apiserver so their numbers compare.
//!
//! Plain HTTP by default; [`Tls`] makes the same connections HTTPS (a real apiserver, kcache
//! serving TLS), and [`Target`] bundles where to connect, how, and with which credentials.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// HTTPS for the bench's connections: a rustls client config (roots, client certificate) and
/// the name the server's certificate is checked against (also sent as SNI).
#[derive(Clone)]
pub struct Tls {
    /// ALPN `http/1.1`: the load generator and HTTP/1.1 watchers.
    h1: Arc<rustls::ClientConfig>,
    /// ALPN `h2`: HTTP/2 watchers (as client-go connects).
    h2: Arc<rustls::ClientConfig>,
    pub server_name: ServerName<'static>,
}

impl Tls {
    /// `config`'s own ALPN list is replaced: each connection asks for the protocol it speaks.
    pub fn new(config: rustls::ClientConfig, server_name: ServerName<'static>) -> Tls {
        let mut h1 = config.clone();
        h1.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut h2 = config;
        h2.alpn_protocols = vec![b"h2".to_vec()];
        Tls {
            h1: Arc::new(h1),
            h2: Arc::new(h2),
            server_name,
        }
    }

    /// The TLS handshake on a connected stream, offering HTTP/2 or HTTP/1.1.
    pub async fn connect(
        &self,
        tcp: TcpStream,
        http2: bool,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let config = if http2 { &self.h2 } else { &self.h1 };
        tokio_rustls::TlsConnector::from(config.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| format!("TLS handshake with {:?}: {e}", self.server_name))
    }
}

/// Where the bench's requests go: an address, plain HTTP or HTTPS, and the `Authorization`
/// header every request carries (if any).
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// The `Host` header (HTTP/1.1) or `:authority` (HTTP/2): the server URL's host and port.
    pub authority: String,
    pub tls: Option<Tls>,
    pub authorization: Option<http::HeaderValue>,
    /// The `Accept` header (default: JSON), e.g. protobuf as client-go's typed clients send.
    pub accept: Option<http::HeaderValue>,
    /// Credentials of their own for the watches of a fan-out (`watchers::open_to`): the i-th
    /// watch sends the i-th (cycling), in place of `authorization`, as each node of a cluster
    /// has its own token.
    pub per_watch: Option<std::sync::Arc<[http::HeaderValue]>>,
}

impl Target {
    /// Plain HTTP to `addr`, no credentials: kcache, nginx and the sim in the bench.
    pub fn plain(addr: SocketAddr) -> Target {
        Target {
            addr,
            authority: addr.to_string(),
            tls: None,
            authorization: None,
            accept: None,
            per_watch: None,
        }
    }

    /// The target as the `i`-th watch of a fan-out reaches it: with its own credentials when
    /// the target has credentials per watch.
    pub fn for_watch(&self, i: usize) -> Target {
        let mut t = self.clone();
        if let Some(all) = self.per_watch.as_ref().filter(|a| !a.is_empty()) {
            t.authorization = Some(all[i % all.len()].clone());
        }
        t
    }

    /// The same target, read with `accept` as the `Accept` header.
    pub fn accepting(mut self, accept: &'static str) -> Target {
        self.accept = Some(http::HeaderValue::from_static(accept));
        self
    }

    /// A TCP connection to the target (TLS, if any, is the caller's next step: the stream
    /// types differ, and the plain path stays free of any indirection).
    pub async fn tcp(&self) -> Result<TcpStream, String> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("connect {}: {e}", self.addr))?;
        let _ = tcp.set_nodelay(true);
        Ok(tcp)
    }

    /// An HTTP/1.1 connection to the target, over TLS if it has it.
    pub async fn h1_connect(&self) -> Result<http1::SendRequest<Empty<Bytes>>, String> {
        let tcp = self.tcp().await?;
        match &self.tls {
            None => h1_handshake(tcp, self.addr).await,
            Some(tls) => h1_handshake(tls.connect(tcp, false).await?, self.addr).await,
        }
    }

    /// A GET of `path` as the bench sends it, with the target's `Host` and credentials.
    pub fn get(&self, path: &str) -> Request<Empty<Bytes>> {
        let mut req = request(&self.authority, path);
        if let Some(a) = &self.authorization {
            req.headers_mut()
                .insert(http::header::AUTHORIZATION, a.clone());
        }
        if let Some(a) = &self.accept {
            req.headers_mut().insert(http::header::ACCEPT, a.clone());
        }
        req
    }
}

/// The HTTP/1.1 handshake on a connected stream (TCP or TLS); the connection is driven by a
/// task of its own.
async fn h1_handshake<S>(
    io: S,
    addr: SocketAddr,
) -> Result<http1::SendRequest<Empty<Bytes>>, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("handshake {addr}: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Called with every complete response: when its request was sent, status, body.
pub type OnResponse = Arc<dyn Fn(Instant, u16, &Bytes) + Send + Sync>;

/// One load run.
#[derive(Clone)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    /// Path and query, e.g. `/api/v1/configmaps?resourceVersion=0`.
    pub path: String,
    pub concurrency: usize,
    /// Workers stop sending when it is over (a request in flight then completes and counts).
    pub duration: Duration,
    /// Upper bound on requests per worker, whatever the duration.
    pub max_requests_per_worker: u64,
    /// With a callback, bodies are collected and handed to it; without, only counted.
    pub on_response: Option<OnResponse>,
    /// An `Authorization` header for every request (a caller's bearer token).
    pub authorization: Option<http::HeaderValue>,
    /// HTTPS instead of plain HTTP.
    pub tls: Option<Tls>,
    /// The `Host` header (default: `addr`).
    pub authority: Option<String>,
    /// The `Accept` header (default: JSON).
    pub accept: Option<http::HeaderValue>,
    /// Requests per second over all workers, evenly paced; `None`: each worker sends its next
    /// request as soon as the last is answered. Latencies count from the send, as unpaced ones
    /// do (tokio's timers are late by up to a millisecond, which counting from when a request
    /// was due would add to every latency); a worker that falls behind catches up at once.
    pub rate: Option<f64>,
}

impl LoadSpec {
    pub fn new(
        addr: SocketAddr,
        path: impl Into<String>,
        concurrency: usize,
        duration: Duration,
    ) -> Self {
        LoadSpec {
            addr,
            path: path.into(),
            concurrency,
            duration,
            max_requests_per_worker: 10_000_000,
            on_response: None,
            authorization: None,
            tls: None,
            authority: None,
            accept: None,
            rate: None,
        }
    }

    /// The same load against `target` (its address, TLS and credentials).
    pub fn to(
        target: &Target,
        path: impl Into<String>,
        concurrency: usize,
        duration: Duration,
    ) -> Self {
        let mut spec = LoadSpec::new(target.addr, path, concurrency, duration);
        spec.authorization = target.authorization.clone();
        spec.tls = target.tls.clone();
        spec.authority = Some(target.authority.clone());
        spec.accept = target.accept.clone();
        spec
    }

    fn target(&self) -> Target {
        Target {
            addr: self.addr,
            authority: self
                .authority
                .clone()
                .unwrap_or_else(|| self.addr.to_string()),
            tls: self.tls.clone(),
            authorization: self.authorization.clone(),
            accept: self.accept.clone(),
            per_watch: None,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct LoadResult {
    /// Requests answered 2xx.
    pub ok: u64,
    /// Requests that failed or were not answered 2xx.
    pub errors: u64,
    /// Body bytes of the 2xx answers.
    pub bytes: u64,
    /// From the first send until the last worker finished.
    pub elapsed: Duration,
    /// Latencies of the 2xx answers, sorted.
    pub latencies: Vec<Duration>,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
    /// CPU used by other processes on the machine meanwhile, at normal and at lower priority
    /// (set by the caller, if measured).
    pub others_cores: Option<(f64, f64)>,
}

impl LoadResult {
    pub fn rps(&self) -> f64 {
        per_second(self.ok as f64, self.elapsed)
    }

    pub fn mb_per_s(&self) -> f64 {
        per_second(self.bytes as f64 / 1e6, self.elapsed)
    }

    /// Latency percentile `q` in 0..=1 (nearest rank), zero without data.
    pub fn percentile(&self, q: f64) -> Duration {
        percentile(&self.latencies, q)
    }
}

fn per_second(x: f64, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        x / d.as_secs_f64()
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Default)]
struct WorkerResult {
    ok: u64,
    errors: u64,
    bytes: u64,
    latencies: Vec<Duration>,
    first_error: Option<String>,
}

impl WorkerResult {
    fn error(&mut self, e: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
}

/// Run the load and gather the workers' results.
pub async fn run(spec: LoadSpec) -> LoadResult {
    let start = Instant::now();
    let deadline = start + spec.duration;
    let target = Arc::new(spec.target());
    let spec = Arc::new(spec);
    let workers: Vec<_> = (0..spec.concurrency.max(1))
        .map(|i| tokio::spawn(worker(spec.clone(), target.clone(), deadline, i)))
        .collect();
    let mut out = LoadResult::default();
    for w in workers {
        match w.await {
            Ok(r) => {
                out.ok += r.ok;
                out.errors += r.errors;
                out.bytes += r.bytes;
                out.latencies.extend(r.latencies);
                if out.first_error.is_none() {
                    out.first_error = r.first_error;
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    out.elapsed = start.elapsed();
    out.latencies.sort_unstable();
    out
}

async fn connect(target: &Target) -> Result<http1::SendRequest<Empty<Bytes>>, String> {
    target.h1_connect().await
}

/// A GET request as the bench sends it (JSON, not a curl User-Agent, so no indentation).
pub fn get_request(addr: SocketAddr, path: &str) -> Request<Empty<Bytes>> {
    request(&addr.to_string(), path)
}

fn request(authority: &str, path: &str) -> Request<Empty<Bytes>> {
    Request::get(path)
        .header(http::header::HOST, authority)
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "kcache-bench")
        .body(Empty::new())
        .expect("a valid request")
}

async fn worker(
    spec: Arc<LoadSpec>,
    target: Arc<Target>,
    deadline: Instant,
    index: usize,
) -> WorkerResult {
    let mut r = WorkerResult::default();
    let mut sender = None;
    let mut sent = 0u64;
    // Paced: each worker's share of the rate, the workers' first requests spread over one
    // period so that they do not send in step.
    let period = spec
        .rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(spec.concurrency.max(1) as f64 / r));
    let mut due =
        period.map(|p| Instant::now() + p.mul_f64(index as f64 / spec.concurrency.max(1) as f64));
    while Instant::now() < deadline && sent < spec.max_requests_per_worker {
        let s = match sender.as_mut() {
            Some(s) => s,
            None => match connect(&target).await {
                Ok(s) => sender.insert(s),
                Err(e) => {
                    r.error(e);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        sent += 1;
        if s.ready().await.is_err() {
            sender = None;
            continue;
        }
        if let (Some(due), Some(period)) = (due.as_mut(), period) {
            tokio::time::sleep_until((*due).into()).await;
            *due += period;
        }
        let t0 = Instant::now();
        match exchange(s, &target, &spec.path, spec.on_response.is_some()).await {
            Ok((status, len, body)) => {
                let latency = t0.elapsed();
                if (200..300).contains(&status) {
                    r.ok += 1;
                    r.bytes += len;
                    r.latencies.push(latency);
                } else {
                    r.error(format!("status {status}"));
                }
                if let Some(cb) = &spec.on_response {
                    cb(t0, status, &body);
                }
            }
            Err(e) => {
                r.error(e);
                sender = None;
            }
        }
    }
    r
}

/// One request: (status, body length, body if collected).
async fn exchange(
    s: &mut http1::SendRequest<Empty<Bytes>>,
    target: &Target,
    path: &str,
    collect: bool,
) -> Result<(u16, u64, Bytes), String> {
    let req = target.get(path);
    let resp = s
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    if collect {
        let bytes = body
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        return Ok((status, bytes.len() as u64, bytes));
    }
    let mut len = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        if let Some(d) = frame.data_ref() {
            len += d.len() as u64;
        }
    }
    Ok((status, len, Bytes::new()))
}

/// One GET on a fresh connection, its body read and dropped as it arrives: (status, body
/// length). For lists too large to hold, many at once.
pub async fn fetch_len(
    target: &Target,
    path: &str,
    timeout: Duration,
) -> Result<(u16, u64), String> {
    let (status, len, _) = fetch_on_new_connection(target, path, timeout, false).await?;
    Ok((status, len))
}

/// One GET on a fresh connection: (status, body). For fetching a body once and for probes.
pub async fn fetch(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    fetch_from(&Target::plain(addr), path, timeout).await
}

/// [`fetch`] from any target (HTTPS, with credentials).
pub async fn fetch_from(
    target: &Target,
    path: &str,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let (status, _, body) = fetch_on_new_connection(target, path, timeout, true).await?;
    Ok((status, body))
}

/// One GET on a fresh connection: (status, body length, body if `collect`).
async fn fetch_on_new_connection(
    target: &Target,
    path: &str,
    timeout: Duration,
    collect: bool,
) -> Result<(u16, u64, Bytes), String> {
    let work = async {
        let mut s = connect(target).await?;
        s.ready().await.map_err(|e| format!("connection: {e}"))?;
        exchange(&mut s, target, path, collect).await
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("GET {path}: no answer within {timeout:?}"))?
}

/// One keep-alive connection for requests sent one after another, as a client that pages
/// through a list does (each page's request waits for the last one's `continue`). Reconnects
/// when the server has closed the connection meanwhile.
pub struct Client {
    target: Target,
    sender: Option<http1::SendRequest<Empty<Bytes>>>,
}

impl Client {
    pub fn new(target: Target) -> Client {
        Client {
            target,
            sender: None,
        }
    }

    /// GET `path` and read the whole body: (status, body), at most `timeout`.
    pub async fn get(&mut self, path: &str, timeout: Duration) -> Result<(u16, Bytes), String> {
        tokio::time::timeout(timeout, self.get_retrying(path))
            .await
            .map_err(|_| format!("GET {path}: no answer within {timeout:?}"))?
    }

    async fn get_retrying(&mut self, path: &str) -> Result<(u16, Bytes), String> {
        // A kept connection can have been closed by the server while idle (between paced
        // rounds) without the client having noticed: one more try on a new connection.
        let reused = self.sender.as_ref().is_some_and(|s| !s.is_closed());
        match self.get_once(path).await {
            Err(_) if reused => self.get_once(path).await,
            r => r,
        }
    }

    async fn get_once(&mut self, path: &str) -> Result<(u16, Bytes), String> {
        let mut s = match self.sender.take() {
            Some(s) if !s.is_closed() => s,
            _ => self.target.h1_connect().await?,
        };
        s.ready().await.map_err(|e| format!("connection: {e}"))?;
        let (status, _, body) = exchange(&mut s, &self.target, path, true).await?;
        self.sender = Some(s);
        Ok((status, body))
    }
}
