//! A consistent read the upstream answers ([`Forwarded`]): shared with identical reads where
//! small, and, for a LIST, timed, since what the upstream takes bounds later reads' waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::shared_read;
use super::{ConsistentRead, ConsistentReader};
use crate::cache::ResourceCache;

impl ConsistentReader<'_> {
    /// How the read, a consistent GET or LIST of the type decided for the upstream, is
    /// forwarded (see [`Forwarded`]); a LIST is untimed before the probe has a round trip.
    pub(in crate::api) fn forwarded(&self) -> Forwarded {
        let objects = self.read.objects();
        let timing = match self.read {
            ConsistentRead::Get => None,
            ConsistentRead::List { .. } => {
                self.probe.round_trip().map(|round_trip| ForwardTiming {
                    cache: self.cache.clone(),
                    objects,
                    round_trip,
                })
            }
        };
        Forwarded {
            timing,
            shared: shared_read::fits(self.cache, objects),
        }
    }
}

/// A consistent read forwarded: shared with identical reads that arrive together
/// (`api::shared_read`) where its answer is expected to be small enough to share, and, for a
/// LIST, timed until its answer is sent in full: what the upstream takes to answer the type's
/// reads bounds how long later ones wait for the cache.
pub(crate) struct Forwarded {
    timing: Option<ForwardTiming>,
    pub(in crate::api) shared: bool,
}

impl Forwarded {
    /// `resp`, the upstream's answer to this read (a request that arrived at `started`),
    /// with its body recording the time when its last byte has gone out, if it is timed and
    /// the upstream answered it (a client that leaves early records nothing).
    pub(in crate::api) fn timed(
        self,
        resp: axum::response::Response,
        started: Instant,
    ) -> axum::response::Response {
        match self.timing {
            Some(timing) if resp.status().is_success() => resp.map(|body| {
                axum::body::Body::new(TimedBody {
                    body,
                    started,
                    timing: Some(timing),
                })
            }),
            _ => resp,
        }
    }
}

/// A forwarded consistent LIST being timed (see [`ConsistentReader::forwarded`]).
struct ForwardTiming {
    cache: Arc<ResourceCache>,
    objects: usize,
    round_trip: Duration,
}

/// A forwarded body that records, at its end, how long the read took.
struct TimedBody {
    body: axum::body::Body,
    started: Instant,
    timing: Option<ForwardTiming>,
}

impl TimedBody {
    fn record(&mut self) {
        if let Some(t) = self.timing.take() {
            t.cache
                .freshness()
                .record_forward(t.objects, self.started.elapsed(), t.round_trip);
        }
    }
}

impl Drop for TimedBody {
    /// A body of known length is not polled past its last byte: it ends when it is dropped
    /// with nothing left.
    fn drop(&mut self) {
        use http_body::Body as _;
        if self.body.is_end_stream() || self.body.size_hint().exact() == Some(0) {
            self.record();
        }
    }
}

impl http_body::Body for TimedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        // The end is the last frame of a body that knows it (hyper polls no further), or the
        // end of the stream.
        let ended = match &polled {
            std::task::Poll::Ready(None) => true,
            std::task::Poll::Ready(Some(Ok(_))) => self.body.is_end_stream(),
            _ => false,
        };
        if ended {
            self.record();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
