//! Fault injection: dropped watches, injected 410s and error codes, latency, a simulated
//! restart, and an unreachable server (connections accepted and closed at once, open ones cut).

use super::status::SimError;
use super::store::Store;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Shared fault state, read by the HTTP layer.
pub struct FaultState {
    /// Bumped to end every open watch abruptly.
    pub drop_watches: watch::Sender<u64>,
    /// Bumped to cut every open connection.
    pub kill_connections: watch::Sender<u64>,
    /// Bumped to have every open watch send its periodic bookmark now.
    pub bookmark_now: watch::Sender<u64>,
    fail_410: AtomicUsize,
    /// While set, every watch gets the 410 (whatever `fail_410` says).
    fail_all_410: AtomicBool,
    fail_requests: Mutex<(usize, u16)>,
    latency: Mutex<Duration>,
    /// How far behind the writes protobuf watch streams run (see `Faults::lag_protobuf_watches`).
    protobuf_watch_lag: Mutex<Duration>,
    unreachable: AtomicBool,
    withhold_end: AtomicBool,
}

impl FaultState {
    /// No faults.
    pub fn new() -> FaultState {
        FaultState {
            drop_watches: watch::channel(0).0,
            kill_connections: watch::channel(0).0,
            bookmark_now: watch::channel(0).0,
            fail_410: AtomicUsize::new(0),
            fail_all_410: AtomicBool::new(false),
            fail_requests: Mutex::new((0, 500)),
            latency: Mutex::new(Duration::ZERO),
            protobuf_watch_lag: Mutex::new(Duration::ZERO),
            unreachable: AtomicBool::new(false),
            withhold_end: AtomicBool::new(false),
        }
    }

    /// Whether this watch fails with 410: always while `fail_all_watches_with_410` is on, else
    /// by taking one pending injected 410, if any.
    pub fn take_watch_410(&self) -> bool {
        if self.fail_all_410.load(Ordering::SeqCst) {
            return true;
        }
        self.fail_410
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Takes one pending injected request failure, if any.
    pub fn take_request_failure(&self) -> Option<SimError> {
        let mut f = self.fail_requests.lock().unwrap_or_else(|e| e.into_inner());
        if f.0 == 0 {
            return None;
        }
        f.0 -= 1;
        Some(SimError::injected(f.1))
    }

    /// Whether streaming lists leave out their initial-events-end bookmark.
    pub fn withholds_initial_events_end(&self) -> bool {
        self.withhold_end.load(Ordering::SeqCst)
    }

    /// The added latency.
    pub fn latency(&self) -> Duration {
        *self.latency.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How far behind the writes a protobuf watch started now runs.
    pub fn protobuf_watch_lag(&self) -> Duration {
        *self
            .protobuf_watch_lag
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn bump(tx: &watch::Sender<u64>) {
        tx.send_modify(|v| *v += 1);
    }

    /// Ends every open watch abruptly.
    pub fn drop_all_watches(&self) {
        Self::bump(&self.drop_watches);
    }

    /// Cuts every open connection (used on shutdown and when becoming unreachable).
    pub fn kill_all_connections(&self) {
        Self::bump(&self.kill_connections);
    }
}

impl Default for FaultState {
    fn default() -> Self {
        Self::new()
    }
}

/// Handle for injecting faults into a running sim.
#[derive(Clone)]
pub struct Faults {
    pub(crate) state: Arc<FaultState>,
    pub(crate) store: Arc<Store>,
}

impl Faults {
    /// Every open watch sends its periodic bookmark now, as when its interval runs out (so a
    /// test need not wait the apiserver's minute): an event's RV where the watch saw one of
    /// its type, else v1.34's heartbeat at its cache's revision (none on v1.28).
    pub fn send_bookmarks_now(&self) {
        FaultState::bump(&self.state.bookmark_now);
    }

    /// Ends every open watch stream abruptly (connection closed, no final event).
    pub fn drop_watches(&self) {
        self.state.drop_all_watches();
    }

    /// The next `n` watch requests get the ERROR 410 "too old resource version" event at once.
    pub fn fail_watches_with_410(&self, n: usize) {
        self.state.fail_410.store(n, Ordering::SeqCst);
    }

    /// While on, every watch request gets the ERROR 410 event at once (an upstream whose
    /// watch cache keeps expiring); turning it on also ends the open watches, so they come
    /// back and meet it.
    pub fn fail_all_watches_with_410(&self, on: bool) {
        self.state.fail_all_410.store(on, Ordering::SeqCst);
        if on {
            self.state.drop_all_watches();
        }
    }

    /// The next `n` API requests (any verb) answer `code` with a Status
    /// (500 InternalError, 503 ServiceUnavailable, 429 TooManyRequests + Retry-After, ...).
    pub fn fail_requests(&self, n: usize, code: u16) {
        *self
            .state
            .fail_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = (n, code);
    }

    /// While on, streaming lists (`sendInitialEvents=true`) send their initial events but not
    /// the initial-events-end bookmark, as a v1.28 apiserver was seen doing for types nobody
    /// writes (in front of etcd 3.4, WatchList on): a client waiting for it waits until the
    /// type's next write.
    pub fn withhold_initial_events_end(&self, on: bool) {
        self.state.withhold_end.store(on, Ordering::SeqCst);
    }

    /// Adds `d` before every response.
    pub fn set_latency(&self, d: Duration) {
        *self.state.latency.lock().unwrap_or_else(|e| e.into_inner()) = d;
    }

    /// Protobuf watches started from now on deliver each event `d` after its write, JSON ones
    /// at once: one of a client's two streams held back, as a loaded apiserver, connection or
    /// client can hold one back (a lagging watch cache, for protobuf streams only).
    pub fn lag_protobuf_watches(&self, d: Duration) {
        *self
            .state
            .protobuf_watch_lag
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = d;
    }

    /// Simulates an apiserver restart with compacted history: drops all watches and forgets
    /// history (older RVs now give 410); objects are kept.
    pub fn restart(&self) {
        self.store.compact();
        self.state.drop_all_watches();
    }

    /// While on, every new connection is closed at once and open ones are cut.
    pub fn set_unreachable(&self, on: bool) {
        self.state.unreachable.store(on, Ordering::SeqCst);
        if on {
            self.state.drop_all_watches();
            self.state.kill_all_connections();
        }
    }
}

/// The listener handed to axum: drops connections while the sim is unreachable and wraps the
/// rest so they can be cut.
pub struct SimListener {
    /// The bound socket.
    pub inner: TcpListener,
    /// Fault state.
    pub faults: Arc<FaultState>,
}

impl axum::serve::Listener for SimListener {
    type Io = SimConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    if self.faults.unreachable.load(Ordering::SeqCst) {
                        drop(stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let rx = self.faults.kill_connections.subscribe();
                    return (SimConn::new(stream, rx), addr);
                }
                // Accept errors (e.g. too many files) are transient; back off briefly.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A TCP connection that fails all I/O once the kill signal fires.
pub struct SimConn {
    inner: TcpStream,
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
    dead: bool,
}

impl SimConn {
    fn new(inner: TcpStream, mut rx: watch::Receiver<u64>) -> SimConn {
        let killed = Box::pin(async move {
            // Any change (or the sender going away on shutdown) kills the connection.
            let _ = rx.changed().await;
        });
        SimConn {
            inner,
            killed,
            dead: false,
        }
    }

    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.dead && self.killed.as_mut().poll(cx).is_ready() {
            self.dead = true;
        }
        if self.dead {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection cut by the sim",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for SimConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
