//! The floor of HTTP/1.1 watch fan-out: what one write of an event's chunk to each of N
//! loopback connections costs the writing thread, with no HTTP server, cache or watcher behind
//! it. kcache delivers an event to a current HTTP/1.1 watcher with one such write (an HTTP chunk
//! on the watcher's own connection), so this is the least any server can spend per delivery on
//! this machine and kernel; the `watch` scenario puts it beside kcache's own figure.
//!
//! On loopback the sender's write also runs the receiving side's TCP processing (the packet is
//! delivered in the sender's context), so the floor includes that, as kcache's figure does.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What one floor run measured.
pub struct FloorRun {
    pub connections: usize,
    /// Chunks written (connections × ticks).
    pub writes: u64,
    /// Chunks the readers received whole.
    pub delivered: u64,
    /// CPU time of the writing thread while writing.
    pub cpu_seconds: f64,
}

impl FloorRun {
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
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let ticks = (rate * secs).ceil().max(1.0) as u64;
    let period = Duration::from_secs_f64(1.0 / rate.max(f64::MIN_POSITIVE));
    let chunk_len = chunk.len() as u64;
    let writer = std::thread::spawn(move || -> Result<(u64, f64), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let listener = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            let mut conns = Vec::with_capacity(connections);
            while conns.len() < connections {
                let (s, _) = tokio::time::timeout(Duration::from_secs(30), listener.accept())
                    .await
                    .map_err(|_| "the floor's readers did not connect".to_string())?
                    .map_err(|e| e.to_string())?;
                // As kcache's listener sets it: watch events go out at once.
                let _ = s.set_nodelay(true);
                conns.push(s);
            }
            let start_cpu =
                super::procstat::thread_cpu_seconds().ok_or("no /proc/thread-self/stat")?;
            let mut writes = 0u64;
            let started = Instant::now();
            for tick in 0..ticks {
                tokio::time::sleep_until((started + period * tick as u32).into()).await;
                for c in &mut conns {
                    if c.write_all(&chunk).await.is_ok() {
                        writes += 1;
                    }
                }
            }
            let cpu = super::procstat::thread_cpu_seconds().ok_or("no /proc/thread-self/stat")?
                - start_cpu;
            Ok((writes, cpu))
        })
    });
    let mut readers = Vec::with_capacity(connections);
    for _ in 0..connections {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        readers.push(tokio::spawn(async move {
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
        writes,
        delivered: bytes / chunk_len,
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
}
