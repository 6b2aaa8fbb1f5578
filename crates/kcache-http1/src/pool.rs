//! Kept-alive connections between requests.

use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;

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

    /// An idle connection freed within the idle timeout, if any; older ones are closed.
    pub(crate) fn take(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let (conn, freed) = idle.pop()?;
        if freed.elapsed() < self.idle_timeout {
            return Some(conn);
        }
        // The newest is too old, so all are; they are closed outside the lock.
        let old = std::mem::take(&mut *idle);
        drop(idle);
        drop((conn, old));
        None
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
}
