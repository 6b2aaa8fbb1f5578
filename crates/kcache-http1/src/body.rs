//! An answer's body, read from its connection as it is polled; the connection goes back to
//! the pool when the body has been read to its end.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf as _, Bytes};
use http_body::{Frame, SizeHint};

use crate::head::{Framing, Head};
use crate::pool::Conn;
use crate::{Error, Shared};

/// The most a chunk-size line or a trailer field may take before it is called malformed.
const MAX_LINE: usize = 4096;

/// An answer's body. Dropped before its end, it closes its connection; read to its end, the
/// connection is kept for another request when the answer allows it.
pub struct Body {
    reading: Option<Reading>,
}

struct Reading {
    conn: Conn,
    state: State,
    keep_alive: bool,
    shared: Arc<Shared>,
}

/// Where the body stands in its framing.
#[derive(Debug, Clone, Copy)]
enum State {
    /// This many bytes left.
    Length(u64),
    /// Everything until the connection ends.
    UntilClose,
    /// Expecting a chunk-size line.
    ChunkSize,
    /// Inside a chunk, this many bytes left.
    ChunkData(u64),
    /// Expecting the line break after a chunk's data.
    ChunkEnd,
    /// After the last chunk: trailer fields (ignored) up to an empty line.
    Trailers,
}

/// What the buffered bytes gave.
enum Next {
    Data(Bytes),
    End,
    NeedMore,
}

impl Body {
    pub(crate) fn new(conn: Conn, head: &Head, shared: Arc<Shared>) -> Body {
        let state = match head.framing {
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        };
        let mut body = Body {
            reading: Some(Reading {
                conn,
                state,
                keep_alive: head.keep_alive,
                shared,
            }),
        };
        body.finish_if_done();
        body
    }

    /// After the last byte of a body of known length, hand the connection back at once
    /// rather than when the caller polls past the end.
    fn finish_if_done(&mut self) {
        if matches!(&self.reading, Some(r) if matches!(r.state, State::Length(0))) {
            self.finish();
        }
    }

    fn finish(&mut self) {
        if let Some(r) = self.reading.take() {
            // Bytes after the body would be an answer to nothing: such a connection is not
            // reused.
            if r.keep_alive && r.conn.buf.is_empty() {
                r.shared.pool.put(r.conn);
            }
        }
    }

    fn fail(&mut self, error: Error) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        self.reading = None;
        Poll::Ready(Some(Err(error)))
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.reading.as_ref().map(|r| r.state);
        f.debug_struct("Body").field("state", &state).finish()
    }
}

impl Reading {
    /// Take what the buffer holds of the body, as far as the framing allows.
    fn next(&mut self) -> Result<Next, Error> {
        let buf = &mut self.conn.buf;
        loop {
            match &mut self.state {
                State::Length(0) => return Ok(Next::End),
                State::Length(left) | State::ChunkData(left) => {
                    if buf.is_empty() {
                        return Ok(Next::NeedMore);
                    }
                    let n = (*left).min(buf.len() as u64);
                    *left -= n;
                    let data = buf.split_to(n as usize).freeze();
                    if let State::ChunkData(0) = self.state {
                        self.state = State::ChunkEnd;
                    }
                    return Ok(Next::Data(data));
                }
                State::UntilClose => {
                    if buf.is_empty() {
                        return Ok(Next::NeedMore);
                    }
                    return Ok(Next::Data(buf.split().freeze()));
                }
                State::ChunkSize => {
                    let Some(line) = take_line(buf)? else {
                        return Ok(Next::NeedMore);
                    };
                    let size = chunk_size(&line)?;
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::ChunkData(size)
                    };
                }
                State::ChunkEnd => {
                    let Some(line) = take_line(buf)? else {
                        return Ok(Next::NeedMore);
                    };
                    if !line.is_empty() {
                        return Err(Error::Malformed("no line break after a chunk".into()));
                    }
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    let Some(line) = take_line(buf)? else {
                        return Ok(Next::NeedMore);
                    };
                    if line.is_empty() {
                        return Ok(Next::End);
                    }
                }
            }
        }
    }

    /// Read more of the connection into its buffer; `Ok(0)` when it ended.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        self.conn.poll_fill(cx, self.shared.read_size)
    }
}

/// One line (without its line break, CRLF or a bare LF) from the front of `buf`, if a whole
/// one has arrived.
fn take_line(buf: &mut bytes::BytesMut) -> Result<Option<Bytes>, Error> {
    let Some(end) = buf.iter().position(|b| *b == b'\n') else {
        if buf.len() > MAX_LINE {
            return Err(Error::Malformed("a chunk line is too long".into()));
        }
        return Ok(None);
    };
    let mut line = buf.split_to(end).freeze();
    buf.advance(1);
    if line.last() == Some(&b'\r') {
        line.truncate(line.len() - 1);
    }
    Ok(Some(line))
}

/// A chunk-size line's size: hexadecimal digits, then optional extensions after `;`.
fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let digits = line
        .split(|b| *b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    std::str::from_utf8(digits)
        .ok()
        .filter(|d| !d.is_empty() && d.len() <= 16)
        .and_then(|d| u64::from_str_radix(d, 16).ok())
        .ok_or_else(|| Error::Malformed(format!("chunk size {:?}", String::from_utf8_lossy(line))))
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        loop {
            let Some(reading) = this.reading.as_mut() else {
                return Poll::Ready(None);
            };
            match reading.next() {
                Ok(Next::Data(data)) => {
                    this.finish_if_done();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Next::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Next::NeedMore) => {}
                Err(e) => return this.fail(e),
            }
            match ready!(reading.poll_fill(cx)) {
                Ok(0) if matches!(reading.state, State::UntilClose) => {
                    this.reading = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(Error::Truncated),
                Ok(_) => {}
                Err(e) => return this.fail(e.into()),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.reading.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.reading {
            None => SizeHint::with_exact(0),
            Some(Reading {
                state: State::Length(n),
                ..
            }) => SizeHint::with_exact(*n),
            Some(_) => SizeHint::default(),
        }
    }
}
