//! Gathers the writes of an HTTP/2 connection between two flushes into few large writes.
//!
//! This transport sits between a connection and the socket (or the TLS session). Once the
//! client has sent the HTTP/2 preface it copies writes into one buffer and sends the buffer
//! when it is full, at a flush, or at shutdown; a write too large to be worth a copy goes
//! straight through (after what was gathered before it). HTTP/1.1 connections (one response
//! at a time, written by hyper with one `writev` already) pass through untouched and hold no
//! buffer.
//!
//! A flush is `Ready` only once every gathered byte is written to the transport underneath
//! and that transport's own flush is `Ready`, as the `AsyncWrite` contract requires: the
//! connection may rely on a finished flush having sent everything (before a GOAWAY, a
//! shutdown, or waiting on the peer). While the transport underneath is not writable, the
//! flush is `Pending` and that transport wakes the task when it is.
//!
//! The h2 codec flushes after every DATA frame larger than a few hundred bytes, so a watch
//! event per stream is still one write per frame; what is gathered is what the codec writes
//! between its flushes (a frame's header and payload, and the small frames before it).

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
pub struct Coalescing<T> {
    inner: T,
    mode: Mode,
    buf: Vec<u8>,
    /// How much of `buf` is already written.
    written: usize,
}

impl<T> Coalescing<T> {
    pub fn new(inner: T) -> Coalescing<T> {
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
            self.buf = Vec::with_capacity(CAPACITY);
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
        self.buf.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalescing<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
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

    /// `Ready` only once the buffer is written out and the transport underneath flushed (its
    /// TLS records sent); until then `Pending`, woken by that transport.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;
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
    async fn http2_writes_between_two_flushes_go_out_in_one_write() {
        let mut c = connection(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        let mut preface = [0u8; 24];
        c.read_exact(&mut preface).await.unwrap();
        for _ in 0..10 {
            c.write_all(&[7u8; 1300]).await.unwrap();
        }
        assert!(c.inner.writes.is_empty(), "gathered until the flush");
        c.flush().await.unwrap();
        assert_eq!(c.inner.writes.len(), 1);
        assert_eq!(c.inner.writes[0].len(), 13_000);
        assert_eq!(
            c.inner.flushes, 1,
            "the transport underneath is flushed with it"
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

    /// A transport underneath that takes at most `per_write` bytes a write and only `room`
    /// bytes in all before it is not writable, and whose own flush waits for `flush_ready`.
    /// While not ready it keeps the waker, as a socket does.
    struct Trickle {
        written: Vec<u8>,
        room: usize,
        per_write: usize,
        flush_ready: bool,
        flushes: usize,
        shut_down: bool,
        waker: Option<Waker>,
    }

    impl Trickle {
        fn blocked() -> Trickle {
            Trickle {
                written: Vec::new(),
                room: 0,
                per_write: 200,
                flush_ready: false,
                flushes: 0,
                shut_down: false,
                waker: None,
            }
        }
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            if self.room == 0 {
                self.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let n = data.len().min(self.per_write).min(self.room);
            self.written.extend_from_slice(&data[..n]);
            self.room -= n;
            Poll::Ready(Ok(n))
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            if !self.flush_ready {
                self.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.shut_down = true;
            Poll::Ready(Ok(()))
        }
    }

    /// A connection past the HTTP/2 preface, over a transport that is not writable yet.
    fn gathering() -> Coalescing<Trickle> {
        let mut c = Coalescing::new(Trickle::blocked());
        c.classify(PREFACE);
        assert_eq!(c.mode, Mode::Gathering);
        c
    }

    fn write(c: &mut Coalescing<Trickle>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(c).poll_write(&mut Context::from_waker(Waker::noop()), data)
    }

    fn flush(c: &mut Coalescing<Trickle>) -> Poll<io::Result<()>> {
        Pin::new(c).poll_flush(&mut Context::from_waker(Waker::noop()))
    }

    fn shutdown(c: &mut Coalescing<Trickle>) -> Poll<io::Result<()>> {
        Pin::new(c).poll_shutdown(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_flush_is_ready_only_once_every_byte_is_through_and_the_transport_flushed() {
        let mut c = gathering();
        let frame: Vec<u8> = (0..1300u32).map(|i| i as u8).collect();
        assert!(matches!(write(&mut c, &frame), Poll::Ready(Ok(1300))));

        assert!(flush(&mut c).is_pending(), "nothing could be written yet");
        assert!(c.inner.written.is_empty());
        assert!(
            c.inner.waker.take().is_some(),
            "the transport underneath wakes the task when it is writable"
        );

        c.inner.room = 500;
        assert!(flush(&mut c).is_pending(), "only part is through");
        assert_eq!(c.inner.written, frame[..500]);

        c.inner.room = usize::MAX;
        assert!(
            flush(&mut c).is_pending(),
            "every byte is through, but the transport's own flush is not done"
        );
        assert_eq!(c.inner.written, frame);
        assert_eq!(c.inner.flushes, 0);

        c.inner.flush_ready = true;
        assert!(matches!(flush(&mut c), Poll::Ready(Ok(()))));
        assert_eq!(c.inner.written, frame, "each byte once, in order");
        assert_eq!(c.inner.flushes, 1);
    }

    #[test]
    fn a_flush_with_nothing_gathered_is_the_transport_flush() {
        let mut c = gathering();
        assert!(flush(&mut c).is_pending());
        c.inner.flush_ready = true;
        assert!(matches!(flush(&mut c), Poll::Ready(Ok(()))));
        assert!(c.inner.written.is_empty());
    }

    #[test]
    fn writes_after_a_pending_flush_go_out_after_what_was_gathered() {
        let mut c = gathering();
        assert!(matches!(write(&mut c, b"first "), Poll::Ready(Ok(6))));
        c.inner.room = 3;
        assert!(flush(&mut c).is_pending());
        assert!(matches!(write(&mut c, b"second "), Poll::Ready(Ok(7))));

        // A write too big to gather waits for what was gathered before it.
        let big = vec![b'x'; CAPACITY];
        assert!(write(&mut c, &big).is_pending());
        c.inner.room = usize::MAX;
        let Poll::Ready(Ok(n)) = write(&mut c, &big) else {
            panic!("the transport is writable")
        };
        assert!(n > 0 && n <= big.len());

        c.inner.flush_ready = true;
        assert!(matches!(flush(&mut c), Poll::Ready(Ok(()))));
        let mut expected = b"first second ".to_vec();
        expected.extend_from_slice(&big[..n]);
        assert_eq!(c.inner.written, expected);
    }

    #[test]
    fn shutdown_sends_what_is_gathered_and_flushes_before_it_shuts_down() {
        let mut c = gathering();
        assert!(matches!(write(&mut c, b"GOAWAY"), Poll::Ready(Ok(6))));
        assert!(shutdown(&mut c).is_pending());
        assert!(!c.inner.shut_down, "not before the bytes are through");

        c.inner.room = usize::MAX;
        assert!(shutdown(&mut c).is_pending());
        assert!(!c.inner.shut_down, "not before the transport is flushed");
        assert_eq!(c.inner.written, b"GOAWAY");

        c.inner.flush_ready = true;
        assert!(matches!(shutdown(&mut c), Poll::Ready(Ok(()))));
        assert!(c.inner.shut_down);
        assert_eq!(c.inner.written, b"GOAWAY", "each byte once");
    }
}
