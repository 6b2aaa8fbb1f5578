//! The list + watch loop of a protobuf mirror (see `cache::Mirror` for why kcache keeps the
//! upstream's protobuf bytes next to its JSON cache).
//!
//! ```text
//!  ┌──► Sync ──(protobuf list, RV=0)──► mirror.install ──► Watching{rv} ◄──┐
//!  │      │                                                    │   │        │ stream ended
//!  │      │ 406, or an answer that is not protobuf             │   └────────┘ (timeoutSeconds)
//!  │      ▼                                                    │
//!  │   Unsupported (the loop ends; protobuf reads go upstream) │ ERROR frame (410), unreadable
//!  └──────────────── Backoff ◄── transport / 5xx ──────────────┘
//! ```
//!
//! Simpler than the JSON reflector on purpose: the mirror never decides what exists (the JSON
//! cache does), so it needs no diff on relist, no streaming list and no restore detection; a
//! version it lacks only makes a protobuf reader wait or go upstream.
//!
//! A mirror restored from `persistDir` (see `persist`) starts in `Watching` at the RV it was
//! stored at: a restarted kcache lists nothing for it unless that RV has expired (410).
//!
//! For the same reason its list need not be consistent: it asks for `resourceVersion=0`, which
//! the apiserver answers whole from its watch cache (`limit` is ignored there, rule L2 of
//! `docs/semantics.md`), in one request and without reading etcd, as client-go's informers
//! list. A list older than the JSON cache only makes the mirror's watch start further back.
//! Paged consistent lists cost a restarted kcache's herd one upstream request per 500 objects
//! of every mirrored type (BENCHMARKS.md, "A 5,000-node cluster's kubelets and kube-proxies").

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use rand::Rng;

use super::{Purpose, ReflectorConfig, Upstream, UpstreamError};
use crate::cache::{Mirror, ResourceCache};
use crate::error::Report;
use crate::protobuf::{self, ProtoError};

/// A list this large (bytes) is followed by giving the allocator's free pages back: one
/// answer holding a whole large type (150,000 Pods) left kcache's RSS 5 % higher for good
/// (BENCHMARKS.md, "The restarted herd's lists").
const RELEASE_AFTER_LIST: usize = 64 * 1024 * 1024;

/// How a mirror's loop failed.
enum Failure {
    /// The upstream does not serve the type in protobuf: stop for good.
    Unsupported(String),
    /// Anything else: back off and try again.
    Upstream(UpstreamError),
}

impl From<UpstreamError> for Failure {
    fn from(e: UpstreamError) -> Self {
        Failure::Upstream(e)
    }
}

impl From<ProtoError> for Failure {
    fn from(e: ProtoError) -> Self {
        Failure::Upstream(UpstreamError::Malformed(format!("protobuf: {e}")))
    }
}

/// How a watch ended.
enum End {
    /// The server closed it; resume from this RV.
    Closed { rv: u64 },
    /// An ERROR frame (410 Expired above all): list again.
    Relist,
}

enum State {
    Sync,
    Watching { rv: u64 },
}

/// Keeps one [`Mirror`] filled from the upstream.
pub(crate) struct MirrorReflector {
    upstream: Upstream,
    cache: Arc<ResourceCache>,
    mirror: Arc<Mirror>,
    cfg: ReflectorConfig,
    scope_query: String,
    /// Set for a mirror restored from disk: watch from here instead of listing first.
    resume: Option<u64>,
}

impl MirrorReflector {
    pub(crate) fn new(
        upstream: Upstream,
        cache: Arc<ResourceCache>,
        mirror: Arc<Mirror>,
        cfg: ReflectorConfig,
    ) -> MirrorReflector {
        let scope_query = super::scope_query(&cache);
        MirrorReflector {
            upstream,
            cache,
            mirror,
            cfg,
            scope_query,
            resume: None,
        }
    }

    /// For a mirror restored at `rv` (its objects installed): watch from `rv` first.
    pub(crate) fn resuming(mut self, rv: u64) -> MirrorReflector {
        self.resume = Some(rv);
        self
    }

    /// Run until the type turns out not to be servable in protobuf, its cache goes over its
    /// memory budget (the type is then passed through; see [`Budget::is_over`](crate::cache::Budget::is_over)),
    /// or the task is dropped.
    pub(crate) async fn run(self) {
        // The cache stops the mirror itself as it goes over budget (`Mirror::stop`); this ends
        // the task that feeds it.
        let cache = self.cache.clone();
        tokio::select! {
            _ = self.follow() => {}
            _ = cache.budget().until_over() => {}
            _ = cache.until_not_served() => {}
        }
    }

    async fn follow(self) {
        let name = self.cache.info.to_string();
        if !self.cache.strip().is_empty() {
            // The cached JSON lacks fields that the upstream's protobuf has: the two would
            // disagree, and a wrong byte is worse than JSON from the cache.
            self.mirror.set_unsupported(
                "kcache leaves fields out of this type's objects; the upstream's protobuf keeps them"
                    .into(),
            );
            return;
        }
        let mut state = match self.resume {
            Some(rv) => State::Watching { rv },
            None => State::Sync,
        };
        let mut attempt = 0u32;
        loop {
            let result = match state {
                State::Sync => self.sync().await.map(|rv| State::Watching { rv }),
                State::Watching { rv } => self.watch(rv).await.map(|end| match end {
                    End::Closed { rv } => State::Watching { rv },
                    End::Relist => State::Sync,
                }),
            };
            state = match result {
                Ok(next) => {
                    attempt = 0;
                    next
                }
                Err(Failure::Unsupported(why)) => {
                    tracing::info!(resource = %name, %why, "protobuf reads go upstream");
                    self.mirror.set_unsupported(why);
                    return;
                }
                Err(Failure::Upstream(e)) => {
                    tracing::warn!(resource = %name, error = %Report(&e), "protobuf mirror failed");
                    attempt = attempt.saturating_add(1);
                    tokio::time::sleep(self.cfg.backoff(attempt)).await;
                    if self.mirror.is_synced() {
                        State::Watching {
                            rv: self.mirror.rv(),
                        }
                    } else {
                        State::Sync
                    }
                }
            };
        }
    }

    /// A list in protobuf from the upstream's watch cache (see the module docs), installed
    /// whole; returns its RV. Pages are followed should an upstream answer in pages anyway.
    async fn sync(&self) -> Result<u64, Failure> {
        let collection = super::collection_path(&self.cache);
        let mut objects = Vec::new();
        let mut list_rv: Option<u64> = None;
        let mut cont: Option<String> = None;
        let mut listed = 0;
        loop {
            // A continue token carries its snapshot's RV: the apiserver refuses both together.
            let from = match &cont {
                None => "resourceVersion=0".to_string(),
                Some(c) => format!("continue={}", super::enc(c)),
            };
            let url = format!("{collection}?{from}{}", self.scope_query);
            let body = match self
                .upstream
                .get_accepting(&url, protobuf::MEDIA_TYPE, Purpose::ProtobufList)
                .await
            {
                Ok(b) => b,
                Err(UpstreamError::Status { code: 406, .. }) => {
                    return Err(Failure::Unsupported(
                        "the upstream answers 406 to protobuf".into(),
                    ))
                }
                // The snapshot behind the continue token was compacted: start over.
                Err(UpstreamError::Status { code: 410, .. }) if cont.is_some() => {
                    objects.clear();
                    list_rv = None;
                    cont = None;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            listed += body.len();
            let envelope = match protobuf::parse_envelope(&body) {
                Ok(e) => e,
                Err(ProtoError::BadMagic) => {
                    return Err(Failure::Unsupported(
                        "the upstream answers protobuf requests in another media type".into(),
                    ))
                }
                Err(e) => return Err(e.into()),
            };
            let (meta, items) = protobuf::parse_list(envelope.raw)?;
            if list_rv.is_none() {
                list_rv = Some(parse_rv(&meta.resource_version)?);
            }
            for item in items {
                let (key, rv) = key_and_rv(item)?;
                objects.push((key, rv, Bytes::copy_from_slice(item)));
            }
            if meta.continue_token.is_empty() {
                break;
            }
            cont = Some(meta.continue_token);
        }
        let rv = list_rv.unwrap_or(0);
        self.mirror.install(rv, objects, self.cache.history_start());
        if listed >= RELEASE_AFTER_LIST {
            // The list's body arrived in hyper's chunks and was joined; glibc keeps the freed
            // chunks' pages resident between the objects allocated since (see `kcache_heap`).
            let _ = tokio::task::spawn_blocking(kcache_heap::release_free_memory).await;
        }
        Ok(rv)
    }

    /// Watch from `rv` until the upstream ends the stream or sends an ERROR.
    async fn watch(&self, rv: u64) -> Result<End, Failure> {
        let (lo, hi) = self.cfg.watch_timeout;
        let timeout = rand::rng().random_range(lo.as_secs()..=hi.as_secs().max(lo.as_secs()));
        let url = format!(
            "{}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={timeout}{}",
            super::collection_path(&self.cache),
            self.scope_query
        );
        let resp = self
            .upstream
            .open_accepting(&url, protobuf::WATCH_MEDIA_TYPE, Purpose::ProtobufWatch)
            .await?;
        // An upstream that answers this watch in another media type (JSON) has no protobuf
        // form for something in it: reading on would fail the same way at every retry.
        let media = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !media.starts_with(protobuf::MEDIA_TYPE) {
            return Err(Failure::Unsupported(format!(
                "the upstream answers a protobuf watch in {media:?}"
            )));
        }
        // As the JSON reflector: a stream still open well after its timeout is on a
        // connection that died silently.
        let silent_after = Duration::from_secs(timeout) + self.upstream.request_timeout();
        let deadline = tokio::time::Instant::now() + silent_after;
        let mut body = resp.into_body();
        let mut buf = BytesMut::new();
        let mut rv = rv;
        loop {
            while let Some((frame, used)) = protobuf::next_frame(&buf)? {
                match frame.event_type {
                    "ADDED" | "MODIFIED" | "DELETED" => {
                        let raw = frame.envelope.raw;
                        let (key, orv) = key_and_rv(raw)?;
                        let deleted = frame.event_type == "DELETED";
                        let bytes = Bytes::copy_from_slice(raw);
                        self.mirror
                            .apply(&key, orv, bytes, deleted, self.cache.history_start());
                        rv = rv.max(orv);
                    }
                    "BOOKMARK" => {
                        let raw = frame.envelope.raw;
                        let brv = parse_rv(protobuf::object_meta(raw)?.resource_version)?;
                        self.mirror.bookmark(brv, Bytes::copy_from_slice(raw));
                        rv = rv.max(brv);
                    }
                    // ERROR: the upstream's 410 above all; whatever it is, the watch cannot go
                    // on from here.
                    _ => return Ok(End::Relist),
                }
                buf.advance(used);
            }
            let next = match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(next) => next,
                Err(_) => return Err(UpstreamError::Timeout(silent_after).into()),
            };
            match next {
                None => return Ok(End::Closed { rv }),
                Some(Err(e)) => return Err(UpstreamError::Body(e).into()),
                Some(Ok(f)) => {
                    if let Some(data) = f.data_ref() {
                        buf.extend_from_slice(data);
                    }
                }
            }
        }
    }
}

/// The cache key (`namespace/name` or `name`) and resourceVersion of an object message.
fn key_and_rv(obj: &[u8]) -> Result<(Box<str>, u64), Failure> {
    let meta = protobuf::object_meta(obj)?;
    let key: Box<str> = if meta.namespace.is_empty() {
        meta.name.into()
    } else {
        format!("{}/{}", meta.namespace, meta.name).into()
    };
    Ok((key, parse_rv(meta.resource_version)?))
}

fn parse_rv(rv: &str) -> Result<u64, Failure> {
    rv.parse().map_err(|_| {
        Failure::Upstream(UpstreamError::Malformed(format!(
            "protobuf resourceVersion {rv:?}"
        )))
    })
}
