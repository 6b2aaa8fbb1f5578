//! The floor of watch fan-out: what one write of a watcher's bytes to each of N loopback
//! connections costs the writing thread, with no HTTP server, cache or watcher behind it.
//!
//! - **HTTP/1.1** ([`run`]): kcache delivers an event to a current HTTP/1.1 watcher with one
//!   write of an HTTP chunk on the watcher's own connection, so this is the least any server
//!   can spend per delivery on this machine and kernel; the `watch` scenario puts it beside
//!   kcache's own figure.
//! - **TLS** ([`run_tls`]): the fleet's kube-proxies read over HTTPS, and kcache gathers the
//!   events of a fan-out's gap into one write per watcher (`watch.fanoutWritesPerSecond`). The
//!   floor then is one TLS write of the gap's frames per connection: the encryption, the copy
//!   into the socket and the loopback's receive, without HTTP/2's framing or any server.
//!
//! On loopback the sender's write also runs the receiving side's TCP processing (the packet is
//! delivered in the sender's context), so the floor includes that, as kcache's figure does.
//!
//! The floor of large reads is of another kind ([`serve_pages`]): kubectl's pages, recorded from
//! kcache, answered from memory by a plain HTTPS server. Readers that time whole paginated
//! LISTs against it measure what the machine spends on the bytes alone: the TLS on both ends,
//! the loopback, and the readers' own parsing, which in the bench shares the cores.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::load::Tls;

/// What one floor run measured.
pub struct FloorRun {
    pub connections: usize,
    /// Events written (connections × ticks × events a write).
    pub writes: u64,
    /// Events the readers received whole.
    pub delivered: u64,
    /// CPU time of the writing thread while writing.
    pub cpu_seconds: f64,
}

impl FloorRun {
    /// Its columns in `row`, with `what` the writer wrote as the note; its µs per delivery.
    pub fn fill(&self, row: &mut super::Row, what: String) -> f64 {
        let us = self.cpu_per_delivery_us();
        row.set("watchers", self.connections as u64)
            .set("writes", self.writes)
            .set("delivered", format!("{}/{}", self.delivered, self.writes))
            .set("floor µs per delivery", us)
            .note(what);
        us
    }

    /// The writer's CPU per delivered chunk, in µs.
    pub fn cpu_per_delivery_us(&self) -> f64 {
        if self.delivered == 0 {
            return f64::NAN;
        }
        self.cpu_seconds / self.delivered as f64 * 1e6
    }
}

/// Write `line` as an HTTP/1.1 chunk to each of `connections` loopback connections, `rate`
/// times a second for `secs`, from one thread of its own, while readers in the calling runtime
/// drain them (as kcache's watchers would be). The writer's CPU is measured on its own thread.
pub async fn run(
    connections: usize,
    rate: f64,
    secs: f64,
    line: &[u8],
) -> Result<FloorRun, String> {
    let mut chunk = format!("{:x}\r\n", line.len()).into_bytes();
    chunk.extend_from_slice(line);
    chunk.extend_from_slice(b"\r\n");
    let spec = Spec {
        connections,
        rate,
        secs,
        chunk,
        events_per_chunk: 1,
        tls: None,
    };
    write_to_all(spec).await
}

/// Write `events_per_write` copies of `frame` as one write over TLS to each of `connections`
/// loopback connections, `rate` writes a second for `secs`, as [`run`] does: what a server
/// that gathers a gap's events into one write spends per event delivered, at the least.
/// `server` is the TLS the writer serves (as kcache's), `client` the readers'.
pub async fn run_tls(
    connections: usize,
    rate: f64,
    secs: f64,
    frame: &[u8],
    events_per_write: usize,
    server: Arc<rustls::ServerConfig>,
    client: Tls,
) -> Result<FloorRun, String> {
    let spec = Spec {
        connections,
        rate,
        secs,
        chunk: frame.repeat(events_per_write.max(1)),
        events_per_chunk: events_per_write.max(1) as u64,
        tls: Some((server, client)),
    };
    write_to_all(spec).await
}

/// One floor run: `chunk` (carrying `events_per_chunk` events) written to each connection
/// `rate` times a second for `secs`, in plain TCP or over TLS.
struct Spec {
    connections: usize,
    rate: f64,
    secs: f64,
    chunk: Vec<u8>,
    events_per_chunk: u64,
    tls: Option<(Arc<rustls::ServerConfig>, Tls)>,
}

/// A writer's end of one connection.
type WriteEnd = Box<dyn AsyncWrite + Unpin + Send>;

async fn write_to_all(spec: Spec) -> Result<FloorRun, String> {
    let Spec {
        connections,
        rate,
        secs,
        chunk,
        events_per_chunk,
        tls,
    } = spec;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let ticks = (rate * secs).ceil().max(1.0) as u64;
    let period = Duration::from_secs_f64(1.0 / rate.max(f64::MIN_POSITIVE));
    let chunk_len = chunk.len() as u64;
    let (server, client) = tls.map_or((None, None), |(s, c)| (Some(s), Some(c)));
    let writer = std::thread::spawn(move || -> Result<(u64, f64), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            let mut accepted = Vec::with_capacity(connections);
            while accepted.len() < connections {
                let (s, _) = tokio::time::timeout(Duration::from_secs(30), listener.accept())
                    .await
                    .map_err(|_| "the floor's readers did not connect".to_string())?
                    .map_err(|e| e.to_string())?;
                // As kcache's listener sets it: watch events go out at once.
                let _ = s.set_nodelay(true);
                accepted.push(s);
            }
            let mut conns: Vec<WriteEnd> = match server {
                None => accepted
                    .into_iter()
                    .map(|s| Box::new(s) as WriteEnd)
                    .collect(),
                // The handshakes before the clock starts, all at once as the readers make them.
                Some(config) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(config);
                    futures::future::join_all(accepted.into_iter().map(|s| acceptor.accept(s)))
                        .await
                        .into_iter()
                        .map(|s| s.map(|s| Box::new(s) as WriteEnd))
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("the floor's TLS handshake: {e}"))?
                }
            };
            let start_cpu =
                super::procstat::thread_cpu_seconds().ok_or("no /proc/thread-self/stat")?;
            let mut writes = 0u64;
            let started = Instant::now();
            for tick in 0..ticks {
                tokio::time::sleep_until((started + period * tick as u32).into()).await;
                for c in &mut conns {
                    if c.write_all(&chunk).await.is_ok() && c.flush().await.is_ok() {
                        writes += 1;
                    }
                }
            }
            let cpu = super::procstat::thread_cpu_seconds().ok_or("no /proc/thread-self/stat")?
                - start_cpu;
            // Closed as a server ends a watch: TLS readers see a clean end.
            for c in &mut conns {
                let _ = c.shutdown().await;
            }
            Ok((writes, cpu))
        })
    });
    let mut readers = Vec::with_capacity(connections);
    for _ in 0..connections {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let client = client.clone();
        readers.push(tokio::spawn(async move {
            let mut s: Box<dyn AsyncRead + Unpin + Send> = match client {
                None => Box::new(tcp),
                Some(tls) => match tls.connect(tcp, false).await {
                    Ok(s) => Box::new(s),
                    Err(_) => return 0,
                },
            };
            let mut buf = vec![0u8; 64 * 1024];
            let mut total = 0u64;
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            total
        }));
    }
    let (writes, cpu_seconds) = tokio::task::spawn_blocking(move || writer.join())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|_| "the floor's writer panicked".to_string())??;
    // The writer's thread has ended and closed its connections: every reader sees EOF.
    let mut bytes = 0u64;
    for r in readers {
        bytes += r.await.unwrap_or(0);
    }
    Ok(FloorRun {
        connections,
        writes: writes * events_per_chunk,
        delivered: bytes / chunk_len * events_per_chunk,
        cpu_seconds,
    })
}

/// Recorded answers served over HTTPS by the path and query they were read at: the floor of
/// paginated reads. Stopped when dropped.
pub struct PageServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for PageServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serve `pages` (each body by the path and query it was read at; anything else is a 404) over
/// HTTPS with `server`'s TLS, HTTP/1.1 as kubectl reads, from a runtime of two worker threads
/// of its own, as kcache runs in a process of its own. Each answer is the recorded bytes,
/// shared, not copied: what any server spends at the least to send these pages.
pub fn serve_pages(
    pages: HashMap<String, Bytes>,
    server: Arc<rustls::ServerConfig>,
) -> Result<PageServer, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let pages = Arc::new(pages);
    std::thread::spawn(move || {
        rt.block_on(async move {
            let Ok(listener) = TcpListener::from_std(listener) else {
                return;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(server);
            loop {
                let tcp = tokio::select! {
                    _ = &mut stopped => return,
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, _)) => tcp,
                        Err(_) => continue,
                    },
                };
                let _ = tcp.set_nodelay(true);
                let (acceptor, pages) = (acceptor.clone(), pages.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        std::future::ready(Ok::<_, Infallible>(recorded(&pages, &req)))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        // The runtime ends here, and with it every connection it served.
    });
    Ok(PageServer {
        addr,
        stop: Some(stop),
    })
}

/// The recorded answer to `req`, or a 404.
fn recorded(
    pages: &HashMap<String, Bytes>,
    req: &http::Request<Incoming>,
) -> http::Response<Full<Bytes>> {
    let key = req.uri().path_and_query().map_or("", |p| p.as_str());
    let (status, body) = match pages.get(key) {
        Some(body) => (http::StatusCode::OK, body.clone()),
        None => (http::StatusCode::NOT_FOUND, Bytes::new()),
    };
    let mut resp = http::Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_chunk_written_is_delivered_and_the_writer_is_measured() {
        let line = br#"{"type":"MODIFIED","object":{}}"#;
        let r = run(20, 50.0, 0.2, line).await.unwrap();
        assert_eq!(r.connections, 20);
        assert_eq!(r.writes, 20 * 10, "20 connections × 10 ticks");
        assert_eq!(r.delivered, r.writes);
        assert!(r.cpu_seconds >= 0.0 && r.cpu_per_delivery_us() >= 0.0);
    }

    #[tokio::test]
    async fn every_event_of_a_tls_write_is_delivered() {
        let https = crate::https::HttpsFiles::new().unwrap();
        let frame = [7u8; 300];
        let r = run_tls(
            5,
            20.0,
            0.2,
            &frame,
            3,
            https.server_config().unwrap(),
            https.client.clone(),
        )
        .await
        .unwrap();
        assert_eq!(r.writes, 5 * 4 * 3, "5 connections × 4 ticks × 3 events");
        assert_eq!(r.delivered, r.writes);
    }

    #[tokio::test]
    async fn recorded_pages_are_served_by_the_url_they_were_read_at() {
        let https = crate::https::HttpsFiles::new().unwrap();
        let first = Bytes::from_static(br#"{"metadata":{"continue":"a b"},"rows":[{},{}]}"#);
        let last = Bytes::from_static(br#"{"metadata":{},"rows":[{}]}"#);
        let pages = HashMap::from([
            ("/x?limit=2".to_string(), first.clone()),
            ("/x?limit=2&continue=a%20b".to_string(), last.clone()),
        ]);
        let server = serve_pages(pages, https.server_config().unwrap()).unwrap();
        let mut client = crate::load::Client::new(https.target(server.addr, None));
        let mut read = Vec::new();
        let (pages, objects) = crate::interactive::read_pages(&mut client, "/x", 2, |u, b| {
            read.push((u.to_string(), b.clone()))
        })
        .await
        .unwrap();
        assert_eq!((pages, objects), (2, 3));
        assert_eq!(read[0], ("/x?limit=2".to_string(), first));
        assert_eq!(read[1].1, last);
        let (status, _) = client.get("/y", Duration::from_secs(5)).await.unwrap();
        assert_eq!(status, 404, "only what was recorded is answered");
    }
}
