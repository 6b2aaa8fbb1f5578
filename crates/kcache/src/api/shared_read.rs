//! Identical consistent reads that kcache forwards, sent upstream once for every reader that
//! arrived before the request was sent.
//!
//! Some consistent reads of cached types are forwarded, because the upstream answers them
//! sooner than kcache could prove its cache current (`api::consistent`): a quiet type's LIST
//! of a namespace, a GET in front of v1.31 and later, a read whose proof failed. When many
//! clients send the same such read at once (the same object or namespace, read by many
//! replicas of one controller), each waits for an
//! upstream request sent after it arrived (`shared_call`), and the readers that queued for the
//! same request get its answer. The upstream's answer to a request sent after a reader arrived
//! reflects every write acknowledged before that reader's read began, so it is as consistent
//! an answer to each of them as a request of its own would get (docs/semantics.md, "Identical
//! reads share one forwarded request"). A reader that finds a slot free sends its own request
//! at once, as before: sharing only ever replaces waiting for a busy upstream.
//!
//! Identical means the same method, path and query, and the same `Accept`, `Accept-Encoding` and
//! `User-Agent` (which decide the answer's representation, compression and, for some agents,
//! pretty-printing). The readers' identities may differ: each was authorized by kcache for
//! this read before it was decided (`api::read`), and the apiserver's answer to a read it
//! allows does not depend on who asked. Each shared answer gets an `Audit-Id` of its own, as
//! kcache's answers from the cache do.
//!
//! Only answers of at most [`SHARED_BYTES`] are shared: a read expected to be larger (by the
//! cached objects' mean size) is forwarded on its own ([`fits`]). The leading request's answer
//! is read whole before anyone gets it (for such an answer, a small part of the upstream's
//! time to write it); one that turns out larger goes on streaming to its own reader, and the
//! others send their own requests.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;

use super::{proxy, response, AnsweredBy, App};
use crate::auth::Forward;
use crate::cache::ResourceCache;
use crate::shared_call::{SharedCalls, Turn};

/// The largest answer shared; a larger one streams to its own reader only.
const SHARED_BYTES: usize = 1 << 20;

/// Whether a read of about `objects` of `cache`'s objects is expected to be answered in at
/// most [`SHARED_BYTES`] (at the cached objects' mean size). A larger read is forwarded on its
/// own: readers queued for it would wait for the first MiB of another's answer only to send
/// their own.
pub(super) fn fits(cache: &ResourceCache, objects: usize) -> bool {
    let (cached, bytes) = cache.size();
    objects.saturating_mul(bytes / cached.max(1)) <= SHARED_BYTES
}

/// An answer read whole, for every reader that waited for it.
struct Shared {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// What readers waiting for a request get: its answer, or None when it is not shared (too
/// large, or cut): then each sends its own.
type Outcome = Option<Arc<Shared>>;

/// The identical reads out and waiting, by what makes them identical.
#[derive(Default)]
pub(crate) struct SharedReads {
    calls: dashmap::DashMap<Arc<str>, Arc<SharedCalls<Outcome>>>,
}

impl SharedReads {
    /// Forward `req` (a consistent GET or LIST of a cached type, authorized, decided for the
    /// upstream) as [`proxy::forward`] does, sharing the request with identical reads that
    /// arrive together (see the module docs). `sent`: applied to the answer of a request this
    /// reader sent (the forwarded LIST's timing), not to an answer shared with it.
    pub(super) async fn forward(
        &self,
        app: &App,
        req: Request,
        how: &Forward,
        sent: impl FnOnce(Response) -> Response,
    ) -> Response {
        let key: Arc<str> = key(&req).into();
        let calls = self.calls.entry(key.clone()).or_default().clone();
        let resp = match calls.turn().await {
            Turn::Answer(Some(shared)) => shared.response(),
            Turn::Answer(None) => sent(proxy::forward(app, req, how).await),
            Turn::Lead(leader) if !leader.shares() => {
                let resp = proxy::forward(app, req, how).await;
                // The answer's head is in: the slot goes to the readers that queued meanwhile.
                drop(leader);
                sent(resp)
            }
            Turn::Lead(leader) => {
                let (shared, resp) = read_whole(proxy::forward(app, req, how).await).await;
                leader.finish(&shared);
                sent(resp)
            }
        };
        // A key is kept only while reads of it are out or waiting: the map holds what is in
        // flight, not every path ever read.
        if calls.is_idle() {
            self.calls.remove_if(&key, |_, c| c.is_idle());
        }
        resp
    }
}

/// What makes two reads identical for the upstream (see the module docs).
fn key(req: &Request) -> String {
    let header = |name| {
        req.headers()
            .get(name)
            .map_or(&b""[..], HeaderValue::as_bytes)
    };
    let mut key = format!("{} {}", req.method(), req.uri());
    for name in [header::ACCEPT, header::ACCEPT_ENCODING, header::USER_AGENT] {
        key.push('\n');
        key.push_str(&String::from_utf8_lossy(header(name)));
    }
    key
}

/// `resp` read whole for sharing, and the leading reader's own answer; a body over
/// [`SHARED_BYTES`], or one the upstream cut, is not shared and goes on to the leading
/// reader as it comes.
async fn read_whole(resp: Response) -> (Outcome, Response) {
    let (parts, mut body) = resp.into_parts();
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut size = 0;
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                size += data.len();
                chunks.push(data);
                if size > SHARED_BYTES {
                    let rest = body.into_data_stream();
                    let all = futures::stream::iter(chunks.into_iter().map(Ok)).chain(rest);
                    return (None, Response::from_parts(parts, Body::from_stream(all)));
                }
            }
            Some(Err(e)) => {
                let all = futures::stream::iter(chunks.into_iter().map(Ok))
                    .chain(futures::stream::once(async { Err(e) }));
                return (None, Response::from_parts(parts, Body::from_stream(all)));
            }
        }
    }
    let body = match chunks.len() {
        1 => chunks.pop().unwrap_or_default(),
        _ => chunks.concat().into(),
    };
    let shared = Shared {
        status: parts.status,
        headers: parts.headers.clone(),
        body: body.clone(),
    };
    let own = Response::from_parts(parts, framed(&shared.headers, body));
    (Some(Arc::new(shared)), own)
}

/// A whole body framed as the upstream framed it: with its `Content-Length`, or chunked.
fn framed(headers: &HeaderMap, body: Bytes) -> Body {
    if headers.contains_key(header::CONTENT_LENGTH) {
        Body::from(body)
    } else {
        Body::from_stream(futures::stream::once(async {
            Ok::<_, std::io::Error>(body)
        }))
    }
}

impl Shared {
    /// This answer for one more reader, with an `Audit-Id` of its own.
    fn response(&self) -> Response {
        let mut resp = Response::new(framed(&self.headers, self.body.clone()));
        *resp.status_mut() = self.status;
        *resp.headers_mut() = self.headers.clone();
        resp.headers_mut().insert("audit-id", response::audit_id());
        resp.extensions_mut().insert(AnsweredBy::Shared);
        resp
    }
}
