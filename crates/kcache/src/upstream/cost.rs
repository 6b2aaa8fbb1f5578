//! What kcache costs the upstream: its requests and the bytes both ways, by purpose.
//!
//! kcache exists to take load off the apiserver, and it adds some of its own (lists and
//! watches of every cached type, freshness probes, token and access reviews, the requests it
//! passes through). Counting each by purpose lets an operator see, next to what kcache
//! answered from its cache (`kcache_requests_total{source="cache"}`), what the apiserver still
//! served for it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;

use super::client::AnswerBody;
use crate::metrics::{Metrics, PurposeLabels};

/// Why kcache sends a request to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A reflector's list (initial, relist, or its pages).
    ReflectorList,
    /// A reflector's watch, streaming list included.
    ReflectorWatch,
    /// The freshness probe of consistent reads.
    Probe,
    /// A TokenReview of a caller's token.
    TokenReview,
    /// A SubjectAccessReview of a caller's request.
    AccessReview,
    /// A request kcache does not answer from its cache, passed through.
    PassThrough,
    /// Start-up and printer set-up: discovery, CRDs, Table column definitions.
    Setup,
    /// The protobuf mirror's list of a type some client reads in protobuf (its pages too).
    ProtobufList,
    /// The protobuf mirror's watch.
    ProtobufWatch,
    /// A consistent metadata-only list proving a cache current (see
    /// [`Upstream::metadata_list`](super::Upstream::metadata_list)).
    Proof,
    /// Following the upstream's RBAC objects (with delegated auth): a list and a watch of
    /// each RBAC type, so that access reviews RBAC allowed can be remembered for
    /// as long as RBAC does not change.
    Rbac,
}

impl Purpose {
    /// Every purpose, in declaration order (so `ALL[p as usize] == p`), for series that exist
    /// at zero from the start.
    pub const ALL: [Purpose; 11] = [
        Purpose::ReflectorList,
        Purpose::ReflectorWatch,
        Purpose::Probe,
        Purpose::TokenReview,
        Purpose::AccessReview,
        Purpose::PassThrough,
        Purpose::Setup,
        Purpose::ProtobufList,
        Purpose::ProtobufWatch,
        Purpose::Proof,
        Purpose::Rbac,
    ];

    /// The `purpose` label value.
    pub fn label(self) -> &'static str {
        match self {
            Purpose::ReflectorList => "reflector_list",
            Purpose::ReflectorWatch => "reflector_watch",
            Purpose::Probe => "probe",
            Purpose::TokenReview => "token_review",
            Purpose::AccessReview => "access_review",
            Purpose::PassThrough => "pass_through",
            Purpose::Setup => "setup",
            Purpose::ProtobufList => "protobuf_list",
            Purpose::ProtobufWatch => "protobuf_watch",
            Purpose::Proof => "proof",
            Purpose::Rbac => "rbac",
        }
    }
}

/// The counters of every purpose in one kcache's metrics, looked up once: a pass-through
/// request must not hash label sets three times to be counted.
pub(super) struct Counters {
    /// Requests, sent bytes and received bytes, indexed by `Purpose as usize`.
    by_purpose: Vec<[Counter; 3]>,
}

impl Counters {
    pub(super) fn new(m: &Metrics) -> Counters {
        let by_purpose = Purpose::ALL
            .iter()
            .map(|p| {
                let labels = PurposeLabels { purpose: p.label() };
                [
                    m.upstream_requests.get_or_create(&labels).clone(),
                    m.upstream_sent_bytes.get_or_create(&labels).clone(),
                    m.upstream_received_bytes.get_or_create(&labels).clone(),
                ]
            })
            .collect();
        Counters { by_purpose }
    }

    /// Count one request of `purpose` with a body of `sent` bytes; the counter of the bytes
    /// its answer will bring.
    pub(super) fn count_request(&self, purpose: Purpose, sent: u64) -> Counter {
        let [requests, sent_bytes, received] = &self.by_purpose[purpose as usize];
        requests.inc();
        sent_bytes.inc_by(sent);
        received.clone()
    }
}

/// An upstream response body that counts its bytes as they arrive (as sent on the wire's
/// HTTP layer: a compressed body counts compressed). Counting frame by frame keeps a watch's
/// bytes visible while it runs, not only when it ends.
pub(crate) struct CountedBody {
    inner: AnswerBody,
    received: Option<Counter>,
}

impl CountedBody {
    pub(super) fn new(inner: AnswerBody, received: Option<Counter>) -> CountedBody {
        CountedBody { inner, received }
    }
}

impl HttpBody for CountedBody {
    type Data = Bytes;
    type Error = kube_client::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, kube_client::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(counter)) = (&polled, &self.received) {
            if let Some(data) = frame.data_ref() {
                counter.inc_by(data.len() as u64);
            }
        }
        polled
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}
