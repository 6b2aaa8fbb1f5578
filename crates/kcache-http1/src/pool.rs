//! Kept-alive connections between requests.

use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncRead as _, ReadBuf};

use crate::stream::Stream;

/// One connection and what has been read from it but not yet used.
pub(crate) struct Conn {
    pub(crate) stream: Stream,
    pub(crate) buf: BytesMut,
}

impl Conn {
    pub(crate) fn new(stream: Stream) -> Conn {
        Conn {
            stream,
            buf: BytesMut::new(),
        }
    }

    /// Read more of the connection into its buffer, at most about `read_size` at once; `Ok(0)`
    /// when the connection ended. The one place that sizes the buffer, for heads and bodies.
    pub(crate) fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        read_size: usize,
    ) -> Poll<std::io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < read_size / 4 {
            self.buf.reserve(read_size);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.buf)
    }

    /// Whether an idle connection may carry another request: nothing has come on it since
    /// its last answer ended. Whatever came answers no request of ours (a server timing the
    /// connection out may send a 408 before it closes, RFC 9110 §15.5.9); sent on such a
    /// connection, a request would get it for an answer. The end of the stream means the
    /// server closed it.
    fn is_quiet(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        // What the stream holds, without waiting: over TLS, records already decrypted (or a
        // close_notify) are only seen through the stream; a read here also lets TLS take
        // records that carry no data (session tickets) without calling them bytes.
        let mut cx = Context::from_waker(Waker::noop());
        let mut byte = [0u8; 1];
        let mut probe = ReadBuf::new(&mut byte);
        match Pin::new(&mut self.stream).poll_read(&mut cx, &mut probe) {
            Poll::Pending => self.stream.quiet(),
            // A byte, the end of the stream, or an error.
            Poll::Ready(_) => false,
        }
    }
}

/// Idle connections, the most recently freed taken first: it is the likeliest to be still
/// open, and the others age out.
pub(crate) struct Pool {
    idle: Mutex<Vec<(Conn, Instant)>>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl Pool {
    pub(crate) fn new(max_idle: usize, idle_timeout: Duration) -> Pool {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_timeout,
        }
    }

    /// An idle connection freed within the idle timeout on which nothing has come since, if
    /// any; older ones, and ones something came on, are closed.
    pub(crate) fn take(&self) -> Option<Conn> {
        loop {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let (mut conn, freed) = idle.pop()?;
            if freed.elapsed() >= self.idle_timeout {
                // The newest is too old, so all are; they are closed outside the lock.
                let old = std::mem::take(&mut *idle);
                drop(idle);
                drop((conn, old));
                return None;
            }
            drop(idle);
            // Checked outside the lock: it asks the socket.
            if conn.is_quiet() {
                return Some(conn);
            }
        }
    }

    /// Keep a connection whose last answer was read to its end.
    pub(crate) fn put(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push((conn, Instant::now()));
        }
    }

    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Block the thread until something came on every idle connection (see
    /// [`Stream::block_until_readable`]).
    #[cfg(test)]
    pub(crate) fn block_until_readable(&self) {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        for (conn, _) in idle.iter() {
            conn.stream.block_until_readable();
        }
    }
}
