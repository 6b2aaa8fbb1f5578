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

use std::sync::Arc;
use std::time::{Duration, Instant};

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
}
