//! Response bodies made of the cache's shared bytes, handed to the socket without copying them.
//!
//! A large LIST body is mostly its items, and every item is already in memory as a slice of
//! its object's one allocation (JSON) or of the protobuf mirror's bytes. Copying them into
//! 64 KiB chunks before the write was a quarter of kcache's CPU for a protobuf list of 10k
//! Pods (a `perf` profile of the bench's `protobuf` row, 2026-11-27: `memmove` 26 %, the
//! kernel's copy into the socket 27 %). Here a chunk is instead a list of [`Bytes`] handles
//! ([`Pieces`]) that hyper passes to one `writev` (up to 64 at a time), or rustls encrypts
//! straight from into full-size records: the kernel's or the cipher's copy is the only one.
//!
//! axum's body type carries `Bytes` only, so such a body cannot pass through the router as
//! itself. A response made by [`response`] carries two readings of one source, whichever is
//! taken first: its axum body, which flattens each chunk into one `Bytes` (what anything
//! between the handler and the connection sees, e.g. gzip, and the tests that call the router
//! directly), and a [`Handoff`] in its extensions, which the connection's service
//! ([`ServedBody::from_response`]) takes to send the pieces themselves. Only one of them ever
//! gets the source, so a body is never sent twice or half each way.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// A chunk of a body: byte strings sent one after another, none of them empty.
#[derive(Debug, Default, Clone)]
pub struct Pieces {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl Pieces {
    pub fn with_capacity(n: usize) -> Pieces {
        Pieces {
            parts: VecDeque::with_capacity(n),
            remaining: 0,
        }
    }

    /// Append `b` (a handle, not a copy); empty ones are skipped so that [`Buf::chunk`] is
    /// empty only at the end.
    pub fn push(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.remaining += b.len();
            self.parts.push_back(b);
        }
    }

    pub fn push_static(&mut self, b: &'static [u8]) {
        self.push(Bytes::from_static(b));
    }

    pub fn len(&self) -> usize {
        self.remaining
    }

    /// All of it in one allocation (a copy): for readers that need one slice.
    pub fn flatten(mut self) -> Bytes {
        if self.parts.len() == 1 {
            return self.parts.pop_front().unwrap_or_default();
        }
        let mut out = BytesMut::with_capacity(self.remaining);
        for p in &self.parts {
            out.extend_from_slice(p);
        }
        out.freeze()
    }
}

impl Buf for Pieces {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |b| &b[..])
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.remaining,
            "advanced past the end of a body chunk"
        );
        self.remaining -= cnt;
        while cnt > 0 {
            let Some(front) = self.parts.front_mut() else {
                return;
            };
            if cnt < front.len() {
                front.advance(cnt);
                return;
            }
            cnt -= front.len();
            self.parts.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, part) in dst.iter_mut().zip(&self.parts) {
            *slot = IoSlice::new(part);
            n += 1;
        }
        n
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        // A whole first part is handed over as it is (h2 takes DATA frame payloads this way).
        match self.parts.front() {
            Some(front) if front.len() >= len => {
                let out = front.slice(..len);
                self.advance(len);
                out
            }
            _ => {
                assert!(len <= self.remaining, "copied past the end of a body chunk");
                let mut out = BytesMut::with_capacity(len);
                out.put((&mut *self).take(len));
                out.freeze()
            }
        }
    }
}

/// Where a body's chunks come from, in order; `None` once it is complete.
pub type Source = Box<dyn Iterator<Item = Pieces> + Send>;

/// The source of one response, taken once by whichever reading comes first.
type Shared = Arc<Mutex<Option<Source>>>;

fn take_source(shared: &Shared) -> Option<Source> {
    shared.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// The extension by which the connection's service finds a body's pieces (see the module docs).
#[derive(Clone)]
pub struct Handoff(Shared);

/// A streamed response body whose chunks come from `source`: its axum body flattens them, and
/// the connection sends them as they are (see the module docs).
pub fn response(
    builder: http::response::Builder,
    source: Source,
) -> Result<axum::response::Response, http::Error> {
    let shared: Shared = Arc::new(Mutex::new(Some(source)));
    builder
        .extension(Handoff(shared.clone()))
        .body(axum::body::Body::new(Flattened {
            shared,
            source: None,
        }))
}

/// The axum reading of a body: each chunk copied into one `Bytes`.
struct Flattened {
    shared: Shared,
    /// Taken from `shared` on the first poll.
    source: Option<Source>,
}

impl Body for Flattened {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.source.is_none() {
            self.source = take_source(&self.shared);
        }
        let next = self.source.as_mut().and_then(|s| s.next());
        Poll::Ready(next.map(|p| Ok(Frame::data(p.flatten()))))
    }
}

/// The body type of kcache's HTTP connections: axum's, or a body of [`Pieces`].
pub enum ServedBody {
    Axum(axum::body::Body),
    Pieces(Source),
}

impl ServedBody {
    /// The body the connection sends for `resp`: its pieces if it has them and nothing read
    /// its axum body yet, else its axum body.
    pub fn from_response(mut resp: axum::response::Response) -> http::Response<ServedBody> {
        let handed = resp
            .extensions_mut()
            .remove::<Handoff>()
            .and_then(|Handoff(shared)| take_source(&shared));
        match handed {
            Some(source) => resp.map(|_| ServedBody::Pieces(source)),
            None => resp.map(ServedBody::Axum),
        }
    }
}

/// A chunk of a [`ServedBody`].
pub enum ServedBuf {
    Bytes(Bytes),
    Pieces(Pieces),
}

impl Buf for ServedBuf {
    fn remaining(&self) -> usize {
        match self {
            ServedBuf::Bytes(b) => b.remaining(),
            ServedBuf::Pieces(p) => p.remaining(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            ServedBuf::Bytes(b) => b.chunk(),
            ServedBuf::Pieces(p) => p.chunk(),
        }
    }

    fn advance(&mut self, cnt: usize) {
        match self {
            ServedBuf::Bytes(b) => b.advance(cnt),
            ServedBuf::Pieces(p) => p.advance(cnt),
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        match self {
            ServedBuf::Bytes(b) => b.chunks_vectored(dst),
            ServedBuf::Pieces(p) => p.chunks_vectored(dst),
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        match self {
            ServedBuf::Bytes(b) => b.copy_to_bytes(len),
            ServedBuf::Pieces(p) => p.copy_to_bytes(len),
        }
    }
}

impl Body for ServedBody {
    type Data = ServedBuf;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<ServedBuf>, Self::Error>>> {
        match self.get_mut() {
            ServedBody::Axum(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|f| f.map(|f| f.map_data(ServedBuf::Bytes)))),
            // The source is synchronous: a chunk is made when hyper asks for it, which it does
            // only while its write queue has room.
            ServedBody::Pieces(source) => {
                Poll::Ready(source.next().map(|p| Ok(Frame::data(ServedBuf::Pieces(p)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ServedBody::Axum(b) => b.is_end_stream(),
            ServedBody::Pieces(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ServedBody::Axum(b) => b.size_hint(),
            ServedBody::Pieces(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn pieces(parts: &[&'static str]) -> Pieces {
        let mut p = Pieces::default();
        for s in parts {
            p.push_static(s.as_bytes());
        }
        p
    }

    #[test]
    fn pieces_read_as_one_byte_string_however_they_are_consumed() {
        let whole = "head,item-one,item-two,tail";
        let make = || pieces(&["head", ",", "item-one", "", ",", "", "item-two", ",tail"]);
        assert_eq!(make().len(), whole.len());
        assert_eq!(make().flatten(), whole.as_bytes());
        // In vectored writes of up to three slices, advancing by what each wrote.
        let mut p = make();
        let mut out = Vec::new();
        while p.has_remaining() {
            let mut iov = [IoSlice::new(&[]); 3];
            let n = p.chunks_vectored(&mut iov);
            assert!(n > 0 && iov[..n].iter().all(|s| !s.is_empty()));
            // A short write: all but the last byte of what was offered.
            let offered: Vec<u8> = iov[..n].iter().flat_map(|s| s.iter().copied()).collect();
            let wrote = offered.len().saturating_sub(1).max(1);
            out.extend_from_slice(&offered[..wrote]);
            p.advance(wrote);
        }
        assert_eq!(out, whole.as_bytes());
        // Byte strings of any length, as h2 takes DATA frames.
        let mut p = make();
        let mut out = Vec::new();
        while p.has_remaining() {
            let n = p.remaining().min(5);
            out.extend_from_slice(&p.copy_to_bytes(n));
        }
        assert_eq!(out, whole.as_bytes());
    }

    fn source(chunks: Vec<Pieces>) -> Source {
        Box::new(chunks.into_iter())
    }

    #[tokio::test]
    async fn a_body_is_read_whole_by_whichever_reading_comes_first() {
        let chunks = || vec![pieces(&["{", "\"a\"", "}"]), pieces(&["[", "]"])];
        // The connection takes the pieces: the axum body left behind is empty.
        let resp = response(http::Response::builder(), source(chunks())).unwrap();
        let served = ServedBody::from_response(resp);
        let ServedBody::Pieces(_) = served.body() else {
            panic!("the connection did not get the pieces");
        };
        let body = served.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "{\"a\"}[]");

        // Something read the axum body first (gzip, a test): the connection sends that.
        let resp = response(http::Response::builder(), source(chunks())).unwrap();
        let (parts, body) = resp.into_parts();
        let read = body.collect().await.unwrap().to_bytes();
        assert_eq!(read, "{\"a\"}[]");
        let served = ServedBody::from_response(axum::response::Response::from_parts(
            parts,
            axum::body::Body::from(read),
        ));
        let ServedBody::Axum(_) = served.body() else {
            panic!("the pieces were taken twice");
        };
        let body = served.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "{\"a\"}[]");
    }
}
