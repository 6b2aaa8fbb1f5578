//! LIST from the cache: the resourceVersion / resourceVersionMatch table, pagination with
//! continue tokens, and list bodies assembled from the objects' shared bytes.

use std::ops::Bound;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::{stream, StreamExt};
use http::StatusCode;

use super::filter::Filter;
use super::plan::{self, Candidates};
use super::policy::Want;
use super::{protobuf, response, Answer, Form};
use crate::cache::{AtError, KeyRange, ObjectMap, ResourceCache, Snapshot};
use crate::chunk_pool::{self, Chunks};
use crate::continue_token::{ContinueToken, TokenForm};
use crate::limits::Limits;
use crate::object::{Key, Object};
use crate::resource::{json_str, ResourceInfo};
use crate::status::ApiError;
use crate::table;
use std::time::SystemTime;

/// Chunk size of list bodies, streamed or built as a page.
const CHUNK: usize = 64 * 1024;

/// What a LIST from the cache is bounded by.
pub(super) struct ListSettings<'a> {
    /// How long a read waits for the cache to reach a resourceVersion it asks for.
    pub rv_wait: std::time::Duration,
    /// The list-size limit, which turns larger answers into pages.
    pub limits: &'a Limits,
    /// How continue tokens are written (as the upstream's version writes them).
    pub tokens: TokenForm,
}

/// Answer a LIST of `filter` from `cache` with the state `want` names (as the policy decided
/// it), or say it must go upstream.
pub(super) async fn list(
    cache: &Arc<ResourceCache>,
    want: &Want,
    filter: &Filter,
    form: Form<'_>,
    settings: &ListSettings<'_>,
) -> Result<Answer, ApiError> {
    // The list-size limit turns larger answers into pages, whatever the client asked for.
    let cap = |requested: i64| {
        let l = settings.limits.list_limit(requested);
        if l != requested {
            settings.limits.note_paginated();
        }
        l
    };
    // The state to read, where in it to start, and the limit.
    let (snap, start, limit) = match want {
        Want::Latest { limit } => (cache.snapshot(), None, *limit),
        Want::Continue {
            token,
            limit,
            otherwise,
        } => {
            let snap = if token.rv < 0 {
                cache.snapshot()
            } else {
                // A token from the upstream (the first page was a consistent read passed
                // through) that the cache has not reached yet, or older than kcache's history
                // while the upstream's (etcd's) may reach further back: the upstream continues
                // it, or answers the 410 with an rv -1 token (L4).
                match cache.snapshot_at(token.rv as u64) {
                    Ok(s) => s,
                    Err(e) => return otherwise.answer(not_held(token.rv as u64, e)),
                }
            };
            (snap, Some(token.key()), *limit)
        }
        Want::Exact {
            rv,
            limit,
            otherwise,
        } => match cache.snapshot_at(*rv) {
            Ok(s) => (s, None, *limit),
            Err(e) => return otherwise.answer(not_held(*rv, e)),
        },
        Want::NotOlderThan {
            rv,
            limit,
            otherwise,
        } => {
            if let Err(current) = cache.wait_for_rv(*rv, settings.rv_wait).await {
                return otherwise.answer(ApiError::TooLargeResourceVersion {
                    requested: *rv,
                    current,
                });
            }
            (cache.snapshot(), None, *limit)
        }
        // Not a LIST's: the upstream answers whatever asked this.
        Want::Events => return Ok(Answer::Upstream),
    };
    Ok(page(
        cache,
        &snap,
        filter,
        start,
        cap(limit),
        form,
        settings.tokens,
    )
    .await)
}

/// The error for a state at `requested` the cache does not hold: the apiserver's, for a read
/// only the cache can answer (others go upstream).
fn not_held(requested: u64, e: AtError) -> ApiError {
    match e {
        AtError::Future { current } => ApiError::TooLargeResourceVersion { requested, current },
        AtError::TooOld { oldest } => ApiError::Expired {
            message: format!("too old resource version: {requested} ({oldest})"),
            continue_token: None,
        },
    }
}

/// The objects of one page and what tells the client how to go on.
struct Page {
    objects: Vec<Arc<Object>>,
    token: Option<String>,
    remaining: Option<usize>,
}

/// Whether a list of `snap` with this filter can read an index instead of scanning.
fn indexed<'a>(
    cache: &ResourceCache,
    snap: &'a Snapshot,
    filter: &Filter,
) -> Option<Candidates<'a>> {
    plan::plan(filter, &cache.indexes, snap.postings.as_ref()?)
}

/// Select a page: objects in key order from `start`, at most `limit` (0: all).
fn select(
    cache: &ResourceCache,
    snap: &Snapshot,
    filter: &Filter,
    start: Option<&str>,
    limit: usize,
    tokens: TokenForm,
) -> Page {
    select_with(
        cache,
        snap,
        filter,
        start,
        limit,
        indexed(cache, snap, filter),
        tokens,
    )
}

/// [`select`] over the given candidates (None: a scan of the range).
fn select_with(
    cache: &ResourceCache,
    snap: &Snapshot,
    filter: &Filter,
    start: Option<&str>,
    limit: usize,
    candidates: Option<Candidates<'_>>,
    tokens: TokenForm,
) -> Page {
    let mut objects = Vec::new();
    let mut last_key: Option<&Key> = None;
    let mut more = false;
    let mut remaining = 0usize;
    let bounds = filter.keys(start);
    // A page of every object of a range says how many follow it, which is a walk to the
    // range's end unless the page before counted them (`cache::range_counts`).
    let counted = limit > 0 && filter.selects_all() && candidates.is_none();
    let in_range = if counted {
        cache.range_count(snap.rv, &bounds)
    } else {
        None
    };
    let items: Box<dyn Iterator<Item = (&Key, &Arc<Object>)>> = match &candidates {
        Some(c) => Box::new(
            c.keys(bounds.clone())
                .filter_map(|k| snap.objects.get_key_value(k)),
        ),
        None => Box::new(snap.objects.range(bounds.clone())),
    };
    for (key, o) in items {
        if limit > 0 && objects.len() == limit {
            if !filter.selects_all() {
                break;
            }
            more = true;
            if in_range.is_some() {
                break;
            }
            remaining += 1;
            continue;
        }
        if filter.selects(o) {
            objects.push(o.clone());
            last_key = Some(key);
        }
    }
    if let (true, Some(n), Some(last)) = (more, in_range, &last_key) {
        remaining = match n.checked_sub(objects.len()) {
            Some(rest) if rest > 0 => rest,
            // Not what this state holds (no page counts so): counted here after all.
            _ => keys_after(snap, last, &bounds).count(),
        };
    }
    if let (false, true, Some(last)) = (
        filter.selects_all(),
        limit > 0 && objects.len() == limit,
        &last_key,
    ) {
        // As from etcd, any key after a full page means a next page, whether or not it
        // matches the selectors: that page may then be empty (L3).
        more = keys_after(snap, last, &bounds).next().is_some();
    }
    let token = match (more, &last_key) {
        (true, Some(k)) => {
            cache.remember(snap.clone());
            let rel = match &filter.namespace {
                Some(ns) => k.strip_prefix(&format!("{ns}/")).unwrap_or(k),
                None => k,
            };
            // Tokens carry an int64 RV, as etcd's revisions are; an RV beyond that (no etcd
            // has one) continues at the latest state rather than wrapping around.
            let rv = i64::try_from(snap.rv).unwrap_or(-1);
            let token = ContinueToken::after(rv, rel, tokens);
            if counted {
                // What follows this page is what the next page reads.
                cache.keep_range_count(snap.rv, filter.keys(Some(token.key())), remaining);
            }
            Some(token.encode())
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

/// The objects of `snap` after `last`, to the end of `range`.
fn keys_after<'a>(
    snap: &'a Snapshot,
    last: &Key,
    range: &KeyRange,
) -> impl Iterator<Item = (&'a Key, &'a Arc<Object>)> {
    snap.objects.range((
        Bound::Excluded(Arc::<str>::from(last.as_str())),
        range.1.clone(),
    ))
}

/// One page of a list at a snapshot: `limit <= 0` means everything (a plain JSON list then
/// streams in chunks instead of being built in memory).
async fn page(
    cache: &ResourceCache,
    snap: &Snapshot,
    filter: &Filter,
    start: Option<&str>,
    limit: i64,
    form: Form<'_>,
    tokens: TokenForm,
) -> Answer {
    let info = &cache.info;
    if let Form::Protobuf(mirror) = form {
        let p = select(cache, snap, filter, start, limit.max(0) as usize, tokens);
        let versions = protobuf::versions(&p.objects);
        return match mirror.wait_all(&versions, protobuf::MIRROR_WAIT).await {
            Some(items) => Answer::Ready(protobuf::list(
                info,
                snap.rv,
                p.token.as_deref(),
                p.remaining,
                items,
            )),
            None => Answer::Upstream,
        };
    }
    // An indexed list is selective: it is built in memory like a page.
    if limit <= 0 && indexed(cache, snap, filter).is_none() {
        // The envelope around the items, and the whole body when there are none (only a
        // PartialObjectMetadataList differs then: `"items":null`).
        let envelope = match form {
            Form::Json { pretty: false } => Some((
                list_head(info, snap.rv, None, None),
                list_tail(info, snap.rv, None, None),
                None,
            )),
            // A metadata-only cache's objects are the list's items as they are.
            Form::Metadata if cache.strip().metadata_only => {
                let (head, empty) =
                    table::partial_object_metadata_list_head(&snap.rv.to_string(), None, None);
                Some((head, "]}\n".to_string(), Some(empty)))
            }
            _ => None,
        };
        if let Some((head, tail, empty)) = envelope {
            return Answer::Ready(stream_all(
                snap.objects.clone(),
                filter.keys(start),
                filter.clone(),
                head,
                tail,
                empty,
            ));
        }
    }
    let p = select(cache, snap, filter, start, limit.max(0) as usize, tokens);
    Answer::Ready(render(info, snap, p, form))
}

/// A page of the objects whose index `index` has one of `values` (the index query endpoint):
/// the same envelope and continue tokens as a LIST.
pub(super) fn index_page(
    cache: &ResourceCache,
    snap: &Snapshot,
    index: usize,
    values: &[&str],
    start: Option<&str>,
    limit: i64,
    tokens: TokenForm,
) -> Response {
    let filter = Filter::default();
    let candidates = snap
        .postings
        .as_ref()
        .map(|p| plan::candidates(p, index, values))
        .unwrap_or_default();
    let p = select_with(
        cache,
        snap,
        &filter,
        start,
        limit.max(0) as usize,
        Some(candidates),
        tokens,
    );
    // A metadata-only cache's objects are PartialObjectMetadata: listed as such.
    let form = if cache.strip().metadata_only {
        Form::Metadata
    } else {
        Form::Json { pretty: false }
    };
    render(&cache.info, snap, p, form)
}

/// The response for one selected page.
fn render(info: &ResourceInfo, snap: &Snapshot, p: Page, form: Form<'_>) -> Response {
    let token = p.token.as_deref();
    let rv = snap.rv.to_string();
    let raws = || p.objects.iter().map(|o| o.raw()).collect::<Vec<&[u8]>>();
    let chunks = match form {
        Form::Json { pretty } => {
            let mut items = Chunks::new(CHUNK);
            items
                .buf()
                .extend_from_slice(list_head(info, snap.rv, token, p.remaining).as_bytes());
            for (i, o) in p.objects.iter().enumerate() {
                items.room_for(o.item_len() + 1);
                if i > 0 {
                    items.buf().extend_from_slice(b",");
                }
                o.write_item(items.buf());
            }
            items
                .buf()
                .extend_from_slice(list_tail(info, snap.rv, token, p.remaining).as_bytes());
            let chunks = items.finish();
            if pretty {
                response::prettify(chunks)
            } else {
                chunks
            }
        }
        Form::Table { printer, include } => {
            let mut rows = Chunks::new(CHUNK);
            let mut table = printer.list_rows(
                rows.buf(),
                &rv,
                token,
                p.remaining.map(|r| r as u64),
                include,
                SystemTime::now(),
            );
            for o in &p.objects {
                // A row is its cells and (by default) the object's metadata: about as long
                // as the object, rarely longer.
                rows.room_for(o.raw().len());
                table.row(rows.buf(), o.raw(), Some(o.row_slot()));
            }
            table.finish(rows.buf());
            rows.finish()
        }
        // `page` answers protobuf itself, with the mirror's bytes.
        Form::Protobuf(_) => {
            return response::error(&ApiError::Internal(
                "a protobuf list reached the JSON renderer".into(),
            ))
        }
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
    next: KeyRange,
    filter: Filter,
    first: bool,
    head: Option<String>,
    tail: Option<String>,
    /// The whole body when no item is selected, if it is not head and tail around nothing.
    empty: Option<String>,
}

impl ListCursor {
    /// The next chunk of the body; `None` once the tail was sent.
    fn next_chunk(&mut self) -> Option<Bytes> {
        let mut buf = chunk_pool::take(CHUNK + chunk_pool::MARGIN);
        if let Some(h) = self.head.take() {
            buf.extend_from_slice(h.as_bytes());
        }
        let head_len = buf.len();
        let mut last: Option<&Key> = None;
        let mut exhausted = true;
        for (key, o) in self.objects.range(self.next.clone()) {
            if buf.len() >= CHUNK {
                exhausted = false;
                break;
            }
            let selected = self.filter.selects(o);
            // The chunk ends before an item that would not fit in its buffer: growing the
            // buffer would copy all of it into a fresh, unpooled allocation.
            if selected && buf.len() > head_len && buf.len() + o.item_len() >= buf.capacity() {
                exhausted = false;
                break;
            }
            last = Some(key);
            if selected {
                if !self.first {
                    buf.extend_from_slice(b",");
                }
                self.first = false;
                o.write_item(&mut buf);
            }
        }
        if let Some(k) = last.map(|k| Arc::<str>::from(k.as_str())) {
            self.next.0 = Bound::Excluded(k);
        }
        if exhausted {
            let tail = self.tail.take()?;
            // Nothing selected: this is the first chunk (chunks end early only once items
            // filled them), so it can still be the empty body instead.
            if self.first {
                if let Some(empty) = self.empty.take() {
                    return Some(Bytes::from(empty));
                }
            }
            buf.extend_from_slice(tail.as_bytes());
        }
        Some(chunk_pool::finish(buf))
    }

    fn done(&self) -> bool {
        self.tail.is_none()
    }
}

fn stream_all(
    objects: ObjectMap,
    range: KeyRange,
    filter: Filter,
    head: String,
    tail: String,
    empty: Option<String>,
) -> Response {
    let mut cursor = ListCursor {
        objects,
        next: range,
        filter,
        first: true,
        head: Some(head),
        tail: Some(tail),
        empty,
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

#[cfg(test)]
mod tests;
