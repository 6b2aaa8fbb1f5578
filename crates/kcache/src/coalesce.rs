//! Gathers an HTTP/2 connection's frames into few large writes.
//!
//! A watch event for a thousand streams of one HTTP/2 connection is a thousand DATA frames.
//! The h2 codec holds at most one frame with a payload over a few hundred bytes and flushes
//! the connection's transport before it takes the next, so every event of every stream cost
//! one `writev` and, over TLS, one record: most of kcache's CPU per delivered event at 10k
//! watchers was the kernel's (docs/benchmarks.md). This transport, between the connection
//! and the socket (or the TLS session), copies writes into one buffer and sends it when it is
//! full or when the connection has nothing more to write in this turn.
//!
//! "Nothing more in this turn" is not something the codec says: it asks for a flush after
//! every large frame. So a flush of a partly filled buffer is put off: it returns at once and
//! wakes the connection's task, and the buffer goes out at the first read of the next turn
//! (the HTTP/2 connection reads before it writes, every time it is polled), or when it fills,
//! or at shutdown. HTTP/1.1 connections (one response at a time, written by hyper with one
//! `writev` already) pass through untouched, and hold no buffer.
//!
//! The buffer lives only while it holds a turn's frames: it is taken when a turn writes and
//! given back once it is written out. A kcache in front of a large cluster holds a connection
//! per kubelet and kube-proxy, nearly all of them idle between events: 64 KiB kept by each of
//! 10,000 connections would be 640 MiB held for nothing.
//!
//! That bends `AsyncWrite`'s contract: a flush returns `Ready` with bytes still buffered. It
//! is sound only because the wake guarantees the connection another poll and h2's connection
//! reads on every poll before it writes; a codec that stopped doing so would leave a turn's
//! last frames in the buffer until the next write. A unit test runs hyper's HTTP/2 server and
//! client on both ends of this transport and fails if that happens (or if a burst of frames
//! is no longer gathered), so an upgrade of hyper or h2 that changes the order is caught.
//!
//! A flush that honours the contract was built and measured (2026-11-26, `kcache bench --quick
//! --scenarios watch`, 500 watchers on 2 connections): 12.0 instead of 8.5 µs of kcache CPU per
//! delivery over h2c, 15.5 instead of 8.5 over TLS, p99 up by 2 to 10 ms, since h2 then costs
//! one write per frame again. It was left out. Polling a connection's watch streams in one
//! sweep (`conn_task`) does not change this: the frames of a sweep still reach the codec one at
//! a time, each followed by its flush.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A write buffer this full goes out at once (four TLS records).
const CAPACITY: usize = 64 * 1024;

/// What the client speaks, once its first bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Fewer than `PREFACE.len()` bytes read so far, all matching the HTTP/2 preface.
    Undecided(usize),
    /// HTTP/1.1: writes go straight through.
    PassThrough,
    /// HTTP/2: writes are gathered.
    Gathering,
}

/// The start of the HTTP/2 connection preface; no HTTP/1.1 method starts like it.
const PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// A connection's transport that gathers HTTP/2 writes (see the module docs).
#[derive(Debug)]
pub(crate) struct Coalescing<T> {
    inner: T,
    mode: Mode,
    buf: Vec<u8>,
    /// How much of `buf` is already written.
    written: usize,
}

impl<T> Coalescing<T> {
    pub(crate) fn new(inner: T) -> Coalescing<T> {
        Coalescing {
            inner,
            mode: Mode::Undecided(0),
            buf: Vec::new(),
            written: 0,
        }
    }

    fn pending(&self) -> usize {
        self.buf.len() - self.written
    }

    /// Note what the client sent first.
    fn classify(&mut self, read: &[u8]) {
        let Mode::Undecided(seen) = self.mode else {
            return;
        };
        let take = read.len().min(PREFACE.len() - seen);
        self.mode = if read[..take] != PREFACE[seen..seen + take] {
            Mode::PassThrough
        } else if seen + take == PREFACE.len() {
            Mode::Gathering
        } else {
            Mode::Undecided(seen + take)
        };
    }
}

impl<T: AsyncWrite + Unpin> Coalescing<T> {
    /// Write out the whole buffer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = std::task::ready!(
                Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        // Given back, not cleared: an idle connection holds no buffer (see the module docs).
        self.buf = Vec::new();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Write out the buffer and flush the transport underneath (a TLS session's records).
    fn poll_flush_now(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalescing<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending() > 0 {
            // The previous turn's writes. Not writable yet: the socket wakes the task when it
            // is, and this read comes again.
            if let Poll::Ready(Err(e)) = this.poll_flush_now(cx) {
                return Poll::Ready(Err(e));
            }
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Mode::Undecided(_) = this.mode {
            this.classify(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalescing<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.mode != Mode::Gathering {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.pending() + total > CAPACITY {
            std::task::ready!(this.poll_drain(cx))?;
        }
        if total >= CAPACITY {
            // Too big to be worth a copy: straight through, after what was gathered before.
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        if this.buf.capacity() == 0 {
            // The turn's first frame: one allocation for the whole turn.
            this.buf.reserve_exact(CAPACITY);
        }
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    /// Asked once, when the connection starts: HTTP/1.1 asks before anything is read (and
    /// gets what the transport underneath does), HTTP/2 after the preface.
    fn is_write_vectored(&self) -> bool {
        self.mode == Mode::Gathering || self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.mode == Mode::Gathering && this.pending() > 0 {
            // Put off until the connection's next turn (see the module docs); the wake makes
            // sure there is one.
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_flush_now(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A transport that records each write call and serves fixed input.
    #[derive(Default)]
    struct Recorder {
        input: Vec<u8>,
        writes: Vec<Vec<u8>>,
        flushes: usize,
    }

    impl AsyncRead for Recorder {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let n = self.input.len().min(buf.remaining());
            let chunk: Vec<u8> = self.input.drain(..n).collect();
            buf.put_slice(&chunk);
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.writes.push(data.to_vec());
            Poll::Ready(Ok(data.len()))
        }

        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn connection(first_bytes: &[u8]) -> Coalescing<Recorder> {
        Coalescing::new(Recorder {
            input: first_bytes.to_vec(),
            ..Recorder::default()
        })
    }

    #[tokio::test]
    async fn http2_frames_of_one_turn_go_out_in_one_write_at_the_next_read() {
        let mut c = connection(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        let mut preface = [0u8; 24];
        c.read_exact(&mut preface).await.unwrap();
        for _ in 0..10 {
            c.write_all(&[7u8; 1300]).await.unwrap();
            c.flush().await.unwrap();
        }
        assert!(
            c.inner.writes.is_empty(),
            "flushes within a turn are put off"
        );
        let mut more = [0u8; 1];
        let _ = c.read(&mut more).await.unwrap();
        assert_eq!(c.inner.writes.len(), 1);
        assert_eq!(c.inner.writes[0].len(), 13_000);
        assert_eq!(
            c.inner.flushes, 1,
            "the transport underneath is flushed with it"
        );
        assert_eq!(
            c.buf.capacity(),
            0,
            "a connection between turns holds no buffer"
        );
    }

    #[tokio::test]
    async fn a_full_buffer_goes_out_at_once_and_shutdown_sends_the_rest() {
        let mut c = connection(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        let mut preface = [0u8; 24];
        c.read_exact(&mut preface).await.unwrap();
        let frame = vec![1u8; 1000];
        for _ in 0..70 {
            c.write_all(&frame).await.unwrap();
        }
        assert_eq!(c.inner.writes.len(), 1);
        assert_eq!(c.inner.writes[0].len(), 65_000);
        c.write_all(&vec![2u8; CAPACITY]).await.unwrap();
        assert_eq!(
            c.inner.writes.len(),
            3,
            "the rest, then the big write as it is"
        );
        c.write_all(b"tail").await.unwrap();
        c.shutdown().await.unwrap();
        assert_eq!(c.inner.writes.last().unwrap(), b"tail");
    }

    /// A socket end that counts the writes reaching it.
    struct Counted {
        inner: tokio::io::DuplexStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncRead for Counted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            let r = Pin::new(&mut self.inner).poll_write(cx, data);
            if let Poll::Ready(Ok(_)) = r {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            r
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// The put-off flush relies on how hyper's HTTP/2 server polls its transport (see the
    /// module docs): this runs the real codec on both ends and fails if a turn's last frame
    /// stays in the buffer while the client sends nothing, or if a burst is not gathered.
    // Two workers: if a put-off frame is never sent, the connection's task may spin, and the
    // timeout below still fires on the other worker.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_real_http2_codec_sends_every_turns_last_frame_and_gathers_a_burst() {
        // Every step waits on the other end (the handshake too: its SETTINGS are put off
        // like any other frame), so the whole exchange is bounded.
        tokio::time::timeout(std::time::Duration::from_secs(30), async {
            use bytes::Bytes;
            use http_body_util::{BodyExt, StreamBody};
            use hyper::body::Frame;
            use hyper_util::rt::{TokioExecutor, TokioIo};
            use std::time::Duration;

            let (client_io, server_io) = tokio::io::duplex(1 << 20);
            let writes = Arc::new(AtomicUsize::new(0));
            let (events, body) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
            let body = std::sync::Mutex::new(Some(body));
            let service = hyper::service::service_fn(move |_req| {
                let rx = body.lock().unwrap().take().expect("one request");
                let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
                    .map(|b| Ok::<_, std::convert::Infallible>(Frame::data(b)));
                async move {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(StreamBody::new(stream)))
                }
            });
            let server = Coalescing::new(Counted {
                inner: server_io,
                writes: writes.clone(),
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(server), service),
            );
            let (mut send, conn) = hyper::client::conn::http2::handshake(
                TokioExecutor::new(),
                TokioIo::new(client_io),
            )
            .await
            .unwrap();
            tokio::spawn(conn);
            let req = hyper::Request::get("http://kcache/watch")
                .body(http_body_util::Empty::<Bytes>::new())
                .unwrap();
            let mut body = send.send_request(req).await.unwrap().into_body();
            let mut received = 0usize;
            let mut next = async || {
                let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
                    .await
                    .expect(
                        "a frame put off by a flush was never sent while the client sent nothing",
                    )
                    .expect("the stream is open")
                    .unwrap();
                frame.into_data().unwrap().len()
            };
            let event = Bytes::from(vec![b'e'; 1300]);
            // One event per turn: each is the turn's last frame.
            for _ in 0..5 {
                events.send(event.clone()).unwrap();
                received += next().await;
            }
            assert_eq!(received, 5 * 1300);
            // A burst of 50 events in one turn goes out in a few writes, not 50.
            let before = writes.load(Ordering::Relaxed);
            for _ in 0..50 {
                events.send(event.clone()).unwrap();
            }
            while received < 55 * 1300 {
                received += next().await;
            }
            let burst = writes.load(Ordering::Relaxed) - before;
            assert!(burst <= 10, "50 frames took {burst} writes");
        })
        .await
        .expect("a frame put off by a flush was never sent while the client sent nothing");
    }

    #[tokio::test]
    async fn http1_passes_through() {
        let mut c = connection(b"GET /api HTTP/1.1\r\n\r\n");
        let mut req = [0u8; 8];
        c.read_exact(&mut req).await.unwrap();
        c.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        assert_eq!(c.inner.writes.len(), 1);
        assert!(c.buf.capacity() == 0, "no buffer for HTTP/1.1");
    }

    #[tokio::test]
    async fn the_preface_may_arrive_in_pieces() {
        let mut c = connection(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        for _ in 0..24 {
            let mut one = [0u8; 1];
            c.read_exact(&mut one).await.unwrap();
        }
        assert_eq!(c.mode, Mode::Gathering);
        let mut h1 = connection(b"PUT /x HTTP/1.1\r\n");
        let mut one = [0u8; 1];
        h1.read_exact(&mut one).await.unwrap();
        assert_eq!(h1.mode, Mode::Undecided(1));
        h1.read_exact(&mut one).await.unwrap();
        assert_eq!(h1.mode, Mode::PassThrough);
    }
}
