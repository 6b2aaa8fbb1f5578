//! LIST from the cache: the resourceVersion / resourceVersionMatch table, pagination with
//! continue tokens, and list bodies assembled from the objects' shared bytes.

use std::ops::Bound;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::{stream, StreamExt};
use http::StatusCode;

use super::continue_token::ContinueToken;
use super::filter::Filter;
use super::params::{parse_rv, ListOptions};
use super::{response, Answer, Form};
use crate::cache::{AtError, ObjectMap, ResourceCache, Snapshot};
use crate::object::Object;
use crate::resource::{json_str, ResourceInfo};
use crate::status::ApiError;
use crate::table;
use std::time::SystemTime;

/// Chunk size of streamed list bodies.
const CHUNK: usize = 64 * 1024;

/// Answer a LIST from `cache`, or say it must go upstream. `consistent` says the cache has
/// caught up with the upstream for a read with resourceVersion unset.
pub async fn list(
    cache: &Arc<ResourceCache>,
    filter: Filter,
    opts: &ListOptions,
    consistent: bool,
    rv_wait: std::time::Duration,
    form: Form<'_>,
) -> Result<Answer, ApiError> {
    if let Some(token) = &opts.continue_token {
        // The apiserver tolerates resourceVersion=0 next to a token (the token decides); any
        // other RV is a 400.
        if opts.resource_version.as_deref().is_some_and(|rv| rv != "0") {
            return Err(ApiError::BadRequest(
                "specifying resource version is not allowed when using continue".into(),
            ));
        }
        let token = ContinueToken::decode(token)?;
        ensure_synced(cache)?;
        let snap = if token.rv < 0 {
            // An inconsistent continuation: the latest state.
            cache.snapshot()
        } else {
            match cache.snapshot_at(token.rv as u64) {
                Ok(s) => s,
                // A token from the upstream (the first page was a consistent read passed through)
                // that the cache has not reached yet: the upstream continues it.
                Err(AtError::Future { .. }) => return Ok(Answer::Upstream),
                // Older than kcache's history, but the upstream's (etcd's) may reach further
                // back: it continues the list, or answers the 410 with an rv -1 token (L4).
                Err(AtError::TooOld { .. }) => return Ok(Answer::Upstream),
            }
        };
        return Ok(Answer::Ready(page(
            cache,
            &snap,
            &filter,
            Some(&token.start),
            opts.limit,
            form,
        )));
    }

    let Some(rv) = opts.resource_version.as_deref() else {
        // A consistent read: from the cache only once it has caught up (limit honoured, as
        // the apiserver honours it on this path).
        if !consistent {
            return Ok(Answer::Upstream);
        }
        let snap = cache.snapshot();
        return Ok(Answer::Ready(page(
            cache, &snap, &filter, None, opts.limit, form,
        )));
    };
    ensure_synced(cache)?;
    if rv == "0" {
        // Any state will do; the limit is ignored, as the apiserver's watch cache does (L2).
        return Ok(Answer::Ready(page(
            cache,
            &cache.snapshot(),
            &filter,
            None,
            0,
            form,
        )));
    }
    let n = parse_rv(rv)?;
    let rvm = opts.resource_version_match.as_deref();
    let exact = rvm == Some("Exact") || (rvm.is_none() && opts.limit > 0);
    if exact {
        // No waiting for an RV the cache has not reached: the apiserver reads etcd at once, so
        // the upstream answers right away (the state, or its immediate 500 for a future RV).
        return match cache.snapshot_at(n) {
            Ok(snap) => Ok(Answer::Ready(page(
                cache, &snap, &filter, None, opts.limit, form,
            ))),
            // Exact lists are etcd reads in the apiserver: whatever kcache's own history does
            // not hold, the upstream answers (the state, or its 410 once compacted; L5).
            Err(AtError::Future { .. }) | Err(AtError::TooOld { .. }) => Ok(Answer::Upstream),
        };
    }
    // Not older than N.
    if let Err(current) = cache.wait_for_rv(n, rv_wait).await {
        if opts.limit > 0 {
            return Ok(Answer::Upstream);
        }
        return Err(ApiError::TooLargeResourceVersion {
            requested: n,
            current,
        });
    }
    let limit = if rvm == Some("NotOlderThan") {
        opts.limit
    } else {
        0
    };
    Ok(Answer::Ready(page(
        cache,
        &cache.snapshot(),
        &filter,
        None,
        limit,
        form,
    )))
}

fn ensure_synced(cache: &ResourceCache) -> Result<(), ApiError> {
    if cache.is_synced() {
        Ok(())
    } else {
        Err(ApiError::NotReady)
    }
}

/// Key range of a request: the namespace's keys (`ns/…`) or everything, from `start`.
fn range(filter: &Filter, start: Option<&str>) -> (Bound<Arc<str>>, Bound<Arc<str>>) {
    match &filter.namespace {
        Some(ns) => {
            let lower = format!("{ns}/{}", start.unwrap_or(""));
            // '0' is the byte after '/': the end of the namespace's keys.
            (
                Bound::Included(lower.into()),
                Bound::Excluded(format!("{ns}0").into()),
            )
        }
        None => match start {
            Some(s) => (Bound::Included(s.into()), Bound::Unbounded),
            None => (Bound::Unbounded, Bound::Unbounded),
        },
    }
}

/// The objects of one page and what tells the client how to go on.
struct Page {
    objects: Vec<Arc<Object>>,
    token: Option<String>,
    remaining: Option<usize>,
}

/// Select a page: objects in key order from `start`, at most `limit` (0: all).
fn select(
    cache: &ResourceCache,
    snap: &Snapshot,
    filter: &Filter,
    start: Option<&str>,
    limit: usize,
) -> Page {
    let mut objects = Vec::new();
    let mut last_key: Option<Arc<str>> = None;
    let mut more = false;
    let mut remaining = 0usize;
    for (key, o) in snap.objects.range(range(filter, start)) {
        if limit > 0 && objects.len() == limit {
            // As from etcd, any key after a full page means a next page, whether or not it
            // matches the selectors: that page may then be empty (L3).
            more = true;
            if !filter.selects_all() {
                break;
            }
            remaining += 1;
            continue;
        }
        if filter.selects(o) {
            objects.push(o.clone());
            last_key = Some(key.clone());
        }
    }
    let token = match (more, &last_key) {
        (true, Some(k)) => {
            cache.remember(snap.clone());
            let rel = match &filter.namespace {
                Some(ns) => k.strip_prefix(&format!("{ns}/")).unwrap_or(k),
                None => k,
            };
            Some(ContinueToken::after(snap.rv as i64, rel).encode())
        }
        _ => None,
    };
    Page {
        objects,
        token,
        // Only without selectors, as the apiserver (L3).
        remaining: (more && filter.selects_all()).then_some(remaining),
    }
}

/// One page of a list at a snapshot: `limit <= 0` means everything (a plain JSON list then
/// streams in chunks instead of being built in memory).
fn page(
    cache: &ResourceCache,
    snap: &Snapshot,
    filter: &Filter,
    start: Option<&str>,
    limit: i64,
    form: Form<'_>,
) -> Response {
    let info = &cache.info;
    if limit <= 0 {
        if let Form::Json { pretty: false } = form {
            let head = list_head(info, snap.rv, None, None);
            let tail = list_tail(info, snap.rv, None, None);
            return stream_all(
                snap.objects.clone(),
                range(filter, start),
                filter.clone(),
                head,
                tail,
            );
        }
    }
    let p = select(cache, snap, filter, start, limit.max(0) as usize);
    let token = p.token.as_deref();
    let rv = snap.rv.to_string();
    let raws = || p.objects.iter().map(|o| &o.raw[..]).collect::<Vec<&[u8]>>();
    let chunks = match form {
        Form::Json { pretty } => {
            let mut items = BytesMut::new();
            for (i, o) in p.objects.iter().enumerate() {
                if i > 0 {
                    items.extend_from_slice(b",");
                }
                o.write_item(&mut items);
            }
            let chunks = vec![
                Bytes::from(list_head(info, snap.rv, token, p.remaining)),
                items.freeze(),
                Bytes::from(list_tail(info, snap.rv, token, p.remaining)),
            ];
            if pretty {
                response::prettify(chunks)
            } else {
                chunks
            }
        }
        Form::Table { printer, include } => vec![printer.list_table(
            &raws(),
            &rv,
            token,
            p.remaining.map(|r| r as u64),
            include,
            SystemTime::now(),
        )],
        Form::Metadata => vec![table::partial_object_metadata_list(
            &raws(),
            &rv,
            token,
            p.remaining.map(|r| r as u64),
        )],
    };
    response::json(StatusCode::OK, chunks)
}

/// A whole list streamed from a snapshot in ~64 KiB chunks: memory stays O(chunk) whatever the
/// list size, and the snapshot shares structure with the live cache.
struct ListCursor {
    objects: ObjectMap,
    next: (Bound<Arc<str>>, Bound<Arc<str>>),
    filter: Filter,
    first: bool,
    head: Option<String>,
    tail: Option<String>,
}

impl ListCursor {
    /// The next chunk of the body; `None` once the tail was sent.
    fn next_chunk(&mut self) -> Option<Bytes> {
        let mut buf = BytesMut::with_capacity(CHUNK + 4096);
        if let Some(h) = self.head.take() {
            buf.extend_from_slice(h.as_bytes());
        }
        let mut last: Option<Arc<str>> = None;
        let mut exhausted = true;
        for (key, o) in self.objects.range(self.next.clone()) {
            if buf.len() >= CHUNK {
                exhausted = false;
                break;
            }
            last = Some(key.clone());
            if self.filter.selects(o) {
                if !self.first {
                    buf.extend_from_slice(b",");
                }
                self.first = false;
                o.write_item(&mut buf);
            }
        }
        if let Some(k) = last {
            self.next.0 = Bound::Excluded(k);
        }
        if exhausted {
            buf.extend_from_slice(self.tail.take()?.as_bytes());
        }
        Some(buf.freeze())
    }

    fn done(&self) -> bool {
        self.tail.is_none()
    }
}

fn stream_all(
    objects: ObjectMap,
    range: (Bound<Arc<str>>, Bound<Arc<str>>),
    filter: Filter,
    head: String,
    tail: String,
) -> Response {
    let mut cursor = ListCursor {
        objects,
        next: range,
        filter,
        first: true,
        head: Some(head),
        tail: Some(tail),
    };
    let first = cursor.next_chunk().unwrap_or_default();
    if cursor.done() {
        // Fits in one chunk: small bodies get a Content-Length, as from the apiserver.
        return response::json(StatusCode::OK, vec![first]);
    }
    let rest = stream::unfold(cursor, |mut c| async move {
        let chunk = c.next_chunk()?;
        Some((Ok::<_, std::convert::Infallible>(chunk), c))
    });
    let body = stream::once(async move { Ok(first) }).chain(rest);
    response::stream(Body::from_stream(body))
}

/// The list envelope up to the first item.
fn list_head(
    info: &ResourceInfo,
    rv: u64,
    token: Option<&str>,
    remaining: Option<usize>,
) -> String {
    if info.custom {
        return format!(
            "{{\"apiVersion\":{},\"items\":[",
            json_str(&info.api_version())
        );
    }
    let mut meta = format!("\"resourceVersion\":\"{rv}\"");
    if let Some(t) = token {
        meta.push_str(&format!(",\"continue\":{}", json_str(t)));
    }
    if let Some(n) = remaining {
        meta.push_str(&format!(",\"remainingItemCount\":{n}"));
    }
    format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{{{meta}}},\"items\":[",
        json_str(&format!("{}List", info.kind)),
        json_str(&info.api_version())
    )
}

/// The list envelope after the last item (CR lists carry kind and metadata here: sorted keys).
fn list_tail(
    info: &ResourceInfo,
    rv: u64,
    token: Option<&str>,
    remaining: Option<usize>,
) -> String {
    if !info.custom {
        return "]}\n".into();
    }
    let mut meta = format!("\"continue\":{}", json_str(token.unwrap_or("")));
    if let Some(n) = remaining {
        meta.push_str(&format!(",\"remainingItemCount\":{n}"));
    }
    meta.push_str(&format!(",\"resourceVersion\":\"{rv}\""));
    format!(
        "],\"kind\":{},\"metadata\":{{{meta}}}}}\n",
        json_str(&format!("{}List", info.kind))
    )
}
