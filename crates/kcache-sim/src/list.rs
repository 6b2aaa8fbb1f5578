//! LIST: which state answers (consistent read, cache, exact history, continuation), paging,
//! continue tokens, and the list envelope built from stored object bytes (or, for metadata
//! clients, the PartialObjectMetadataList of the `metadata` module).

use super::encode::{write_str, J};
use super::metadata::{self, Form};
use super::profile::Profile;
use super::protobuf::{self, ListMeta, Media};
use super::query::{parse_rv, ListOptions, Rvm};
use super::status::SimError;
use super::store::{Snapshot, Store, StoredObj};
use super::types::ResourceType;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

/// Encodes a continue token: base64url (no padding) of
/// `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}`, the key relative to the list's
/// prefix (v1.28: `cm-10`; v1.34 writes it with a leading `/`: `/cm-10`; the token inside a
/// 410 Expired Status has none in either).
pub fn encode_continue(rv: i64, start_after: &str, slash: bool) -> String {
    let mut json = Vec::new();
    json.extend_from_slice(b"{\"v\":\"meta.k8s.io/v1\",\"rv\":");
    json.extend_from_slice(rv.to_string().as_bytes());
    json.extend_from_slice(b",\"start\":");
    let lead = if slash { "/" } else { "" };
    write_str(&mut json, &format!("{lead}{start_after}\u{0}"));
    json.push(b'}');
    URL_SAFE_NO_PAD.encode(json)
}

/// Decodes a continue token into (start key relative to the list prefix, rv). Both forms of
/// start key are accepted, whatever the profile: like the apiserver's `DecodeContinue`, a `/`
/// is put in front of a key without one, and the key is refused unless Go's `path.Clean`
/// leaves it unchanged (no `.` or `..` segment, no empty segment, no trailing `/`).
pub fn decode_continue(token: &str) -> Result<(String, i64), SimError> {
    let bad = |why: String| SimError::BadRequest(format!("invalid continue token: {why}"));
    let raw = URL_SAFE_NO_PAD.decode(token.as_bytes()).map_err(|e| {
        bad(format!(
            "continue key is not valid: {}",
            go_base64_error(token, &e)
        ))
    })?;
    let v: serde_json::Value =
        serde_json::from_slice(&raw).map_err(|e| bad(format!("continue key is not valid: {e}")))?;
    let version = v.get("v").and_then(|x| x.as_str()).unwrap_or("");
    if version != "meta.k8s.io/v1" {
        return Err(bad(format!(
            "continue key is not valid: server does not recognize this encoded version {version}"
        )));
    }
    let rv = v.get("rv").and_then(|x| x.as_i64()).unwrap_or(0);
    if rv == 0 {
        return Err(bad(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
        ));
    }
    let start = v.get("start").and_then(|x| x.as_str()).unwrap_or("");
    if start.is_empty() {
        return Err(bad(
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)".into(),
        ));
    }
    let rel = start.strip_prefix('/').unwrap_or(start);
    if !path_is_clean(rel) {
        return Err(bad(format!("continue key is not valid: {start}")));
    }
    Ok((rel.to_string(), rv))
}

/// Whether Go's `path.Clean("/" + rel)` is `"/" + rel`: every segment non-empty and neither
/// `.` nor `..` (`"/"` alone is clean).
fn path_is_clean(rel: &str) -> bool {
    rel.is_empty()
        || rel
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// Go reports the offset of the first bad byte (or the end for a bad length).
fn go_base64_error(token: &str, err: &base64::DecodeError) -> String {
    let at = match err {
        base64::DecodeError::InvalidByte(i, _) => *i,
        base64::DecodeError::InvalidLastSymbol(i, _) => *i,
        _ => token.len().saturating_sub(1),
    };
    format!("illegal base64 data at input byte {at}")
}

/// Which objects a LIST covers.
pub struct Scope<'a> {
    /// The type.
    pub rt: &'a ResourceType,
    /// Namespace from the URL, if any.
    pub ns: Option<&'a str>,
}

impl Scope<'_> {
    fn prefix(&self) -> String {
        self.ns.map(|ns| format!("{ns}/")).unwrap_or_default()
    }
}

/// One page of results.
struct Page {
    items: Vec<Arc<StoredObj>>,
    /// Key (relative to the list prefix) of the last item when more objects follow.
    more_after: Option<String>,
    remaining: Option<u64>,
}

fn select(
    snap: &Snapshot,
    scope: &Scope,
    opts: &ListOptions,
    start: Option<&str>,
    limit: Option<usize>,
) -> Page {
    let prefix = scope.prefix();
    let lo = match start {
        Some(s) => format!("{prefix}{s}"),
        None => prefix.clone(),
    };
    // Keys under "ns/" end before "ns0" ('0' follows '/').
    let hi = scope.ns.map(|ns| format!("{ns}0"));
    let range = (
        Bound::Included(lo),
        match hi {
            Some(h) => Bound::Excluded(h),
            None => Bound::Unbounded,
        },
    );
    let mut items = Vec::new();
    let mut iter = snap.objects.range(range);
    let mut more_after = None;
    for (key, obj) in iter.by_ref() {
        if opts.labels.matches(&obj.value) && opts.fields.matches(&obj.value) {
            items.push(obj.clone());
            if limit.is_some_and(|l| items.len() >= l) {
                more_after = Some(key[prefix.len()..].to_string());
                break;
            }
        }
    }
    let mut remaining = None;
    if more_after.is_some() {
        let rest = iter.count() as u64;
        if rest == 0 {
            more_after = None;
        } else if opts.unfiltered() {
            remaining = Some(rest);
        }
    }
    Page {
        items,
        more_after,
        remaining,
    }
}

/// How a list is written: the negotiated encoding and form.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    /// JSON or protobuf.
    pub media: Media,
    /// The objects' own form or PartialObjectMetadata (then always JSON).
    pub form: Form,
    /// The upstream imitated (continue tokens write their start key with a leading `/` in v1.34).
    pub profile: Profile,
}

/// Builds the list body in `output.media` when every item has that form, else in JSON (with the
/// trailing newline), and says which it is and how many items it holds. The apiserver transforms a list only once it has
/// it, so a form that cannot be a list is refused here, after any error of the read itself.
fn body(
    rt: &ResourceType,
    list_rv: u64,
    page: &Page,
    continue_rv: i64,
    output: Output,
) -> Result<(Vec<u8>, Media, usize), SimError> {
    let media = output.media;
    let token = page
        .more_after
        .as_deref()
        .map(|k| encode_continue(continue_rv, k, output.profile.slash_start_keys()));
    match output.form {
        Form::Object => {}
        Form::Metadata => return Err(metadata::wrong_form(rt, true)),
        Form::MetadataList => {
            if media == Media::Protobuf {
                let items: Option<Vec<&[u8]>> = page
                    .items
                    .iter()
                    .map(|o| o.proto_metadata().map(|b| &b[..]))
                    .collect();
                if let Some(items) = items {
                    let rv = list_rv.to_string();
                    let meta = ListMeta {
                        resource_version: &rv,
                        continue_token: token.as_deref().unwrap_or(""),
                        remaining_item_count: page.remaining.map(|r| r as i64),
                    };
                    let body = protobuf::metadata_list_body(&meta, &items);
                    return Ok((body, Media::Protobuf, page.items.len()));
                }
            }
            let items = page.items.iter().map(|o| &o.metadata(rt)[..]);
            let body = metadata::list_body(list_rv, token.as_deref(), page.remaining, items);
            return Ok((body, Media::Json, page.items.len()));
        }
    }
    if media == Media::Protobuf {
        let items: Option<Vec<&[u8]>> = page
            .items
            .iter()
            .map(|o| o.proto(rt).map(|b| &b[..]))
            .collect();
        if let Some(items) = items {
            let rv = list_rv.to_string();
            let meta = ListMeta {
                resource_version: &rv,
                continue_token: token.as_deref().unwrap_or(""),
                remaining_item_count: page.remaining.map(|r| r as i64),
            };
            let body = protobuf::list_body(rt, &meta, &items);
            return Ok((body, Media::Protobuf, page.items.len()));
        }
    }
    let size: usize = page.items.iter().map(|o| o.bytes.len() + 1).sum();
    let mut out = Vec::with_capacity(size + 256);
    let items = |out: &mut Vec<u8>| {
        out.extend_from_slice(b"\"items\":[");
        for (i, o) in page.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            o.write_item(out);
        }
        out.push(b']');
    };
    let list_kind = format!("{}List", rt.kind);
    if rt.custom {
        // Unstructured lists: keys sorted, `continue` always present.
        out.extend_from_slice(b"{\"apiVersion\":");
        write_str(&mut out, &rt.api_version());
        out.push(b',');
        items(&mut out);
        out.extend_from_slice(b",\"kind\":");
        write_str(&mut out, &list_kind);
        let mut meta = vec![("continue", J::Str(token.unwrap_or_default()))];
        if let Some(r) = page.remaining {
            meta.push(("remainingItemCount", J::Int(r as i64)));
        }
        meta.push(("resourceVersion", J::Str(list_rv.to_string())));
        out.extend_from_slice(b",\"metadata\":");
        J::Obj(meta).write(&mut out);
        out.push(b'}');
    } else {
        let mut meta = vec![("resourceVersion", J::Str(list_rv.to_string()))];
        if let Some(t) = token {
            meta.push(("continue", J::Str(t)));
        }
        if let Some(r) = page.remaining {
            meta.push(("remainingItemCount", J::Int(r as i64)));
        }
        J::Obj(vec![
            ("kind", J::Str(list_kind)),
            ("apiVersion", J::Str(rt.api_version())),
            ("metadata", J::Obj(meta)),
        ])
        .write(&mut out);
        out.pop();
        out.push(b',');
        items(&mut out);
        out.push(b'}');
    }
    out.push(b'\n');
    Ok((out, Media::Json, page.items.len()))
}

fn page_limit(limit: i64) -> Option<usize> {
    (limit > 0).then(|| usize::try_from(limit).unwrap_or(usize::MAX))
}

/// Serves a LIST following the apiserver's resourceVersion/limit/continue table: the body, its
/// media type and its number of items.
///
/// v1.28 reads etcd for a consistent list, `limit` with a resourceVersion, `Exact` and
/// continuations: an old RV is a 410 once compacted, a future one an instant 500. v1.34 serves
/// all of them from the watch cache: an old RV the cache window still holds is answered even
/// when etcd compacted it (410 only beyond the window, see `Store::snapshot_at`), a future one
/// waits for the cache and then is the cache path's 504; a consistent list waits until the
/// replica's cache reaches the store's revision and answers from it (ConsistentListFromCache;
/// past `too_large_wait` it falls back to etcd). Lists the cache answers carry the cache's
/// revision (the store's, kept current by progress notifications) rather than the type's last
/// event.
pub async fn list(
    store: &Store,
    scope: &Scope<'_>,
    opts: &ListOptions,
    too_large_wait: Duration,
    lag: Duration,
    output: Output,
) -> Result<(Vec<u8>, Media, usize), SimError> {
    let rt = scope.rt;
    let (group, resource) = (rt.group.as_str(), rt.resource.as_str());
    let v134 = output.profile.is_1_34();
    // Continuation: served from history at the token's RV (consistent pages).
    if let Some(token) = &opts.continue_token {
        if opts.rv.as_deref().is_some_and(|rv| rv != "0") {
            return Err(SimError::BadRequest(
                "specifying resource version is not allowed when using continue".into(),
            ));
        }
        let (start, token_rv) = decode_continue(token)?;
        let limit = page_limit(opts.limit);
        if token_rv < 0 {
            let snap = if v134 {
                consistent_from_cache(store, group, resource, lag, too_large_wait).await?
            } else {
                store.snapshot(group, resource)?
            };
            let page = select(&snap, scope, opts, Some(&start), limit);
            return body(rt, snap.rv, &page, -1, output);
        }
        let token_rv = token_rv as u64;
        let snap = match exact(store, group, resource, token_rv, lag, too_large_wait, v134).await {
            Err(SimError::Expired { .. }) => return Err(expired_continue(&start)),
            other => other?,
        };
        let page = select(&snap, scope, opts, Some(&start), limit);
        return body(rt, token_rv, &page, token_rv as i64, output);
    }
    let Some(rv_raw) = opts.rv.as_deref() else {
        // Consistent read of the latest state; limit honoured.
        let snap = if v134 {
            consistent_from_cache(store, group, resource, lag, too_large_wait).await?
        } else {
            store.snapshot(group, resource)?
        };
        let page = select(&snap, scope, opts, None, page_limit(opts.limit));
        return body(rt, snap.rv, &page, snap.rv as i64, output);
    };
    let rv = parse_rv(rv_raw).map_err(|e| match (v134, e) {
        // v1.34 validates the list options before storage: a 400.
        (true, SimError::Internal(msg)) => {
            SimError::BadRequest(format!("invalid resource version: {msg}"))
        }
        (_, e) => e,
    })?;
    // The resourceVersion the watch cache answers at: the type's last event (v1.28), the
    // cache's revision (v1.34).
    let cache_rv = |snap: &Snapshot| if v134 { snap.rv } else { snap.type_rv };
    if rv == 0 {
        // Served from the "cache": everything, limit ignored (L2).
        let snap = store.lagged(group, resource, lag)?;
        let page = select(&snap, scope, opts, None, None);
        return body(rt, cache_rv(&snap), &page, 0, output);
    }
    let limit = page_limit(opts.limit);
    match (&opts.rvm, limit) {
        (Some(Rvm::Exact), _) | (None, Some(_)) => {
            let snap = exact(store, group, resource, rv, lag, too_large_wait, v134).await?;
            let page = select(&snap, scope, opts, None, limit);
            body(rt, rv, &page, rv as i64, output)
        }
        (Some(Rvm::NotOlderThan), Some(_)) if v134 => {
            // The cache, once it has reached the RV, pages its current state.
            if !store.wait_for_lagged(rv, lag, too_large_wait).await {
                return Err(SimError::TooLargeResourceVersion {
                    requested: rv,
                    current: store.current_rv(),
                });
            }
            let snap = store.lagged(group, resource, lag)?;
            let page = select(&snap, scope, opts, None, limit);
            body(rt, snap.rv, &page, snap.rv as i64, output)
        }
        (Some(Rvm::NotOlderThan), Some(_)) => {
            let snap = store.snapshot(group, resource)?;
            if rv > snap.rv {
                return Err(SimError::TooLargeResourceVersion {
                    requested: rv,
                    current: snap.rv,
                });
            }
            let page = select(&snap, scope, opts, None, limit);
            body(rt, snap.rv, &page, snap.rv as i64, output)
        }
        (_, None) => {
            // "Cache" path: wait for the RV, then the current state.
            if !store.wait_for_lagged(rv, lag, too_large_wait).await {
                return Err(SimError::TooLargeResourceVersion {
                    requested: rv,
                    current: store.current_rv(),
                });
            }
            let snap = store.lagged(group, resource, lag)?;
            let page = select(&snap, scope, opts, None, None);
            let list_rv = if v134 {
                snap.rv.max(rv)
            } else {
                snap.type_rv.max(rv)
            };
            body(rt, list_rv, &page, 0, output)
        }
    }
}

/// The state at exactly `rv`: from etcd (v1.28: an instant 500 for a future RV, 410 once
/// compacted) or from the watch cache (v1.34: a future RV waits for the cache and is then a
/// 504, an old one is served while the cache window holds it).
async fn exact(
    store: &Store,
    group: &str,
    resource: &str,
    rv: u64,
    lag: Duration,
    too_large_wait: Duration,
    v134: bool,
) -> Result<Snapshot, SimError> {
    if v134 && !store.wait_for_lagged(rv, lag, too_large_wait).await {
        return Err(SimError::TooLargeResourceVersion {
            requested: rv,
            current: store.current_rv(),
        });
    }
    store.snapshot_at(group, resource, rv, v134)
}

/// How often v1.34's apiserver asks etcd for a progress notification while consistent lists
/// wait for a watch cache (its progress requester's 100 ms tick).
pub const PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_millis(100);

/// v1.34's consistent list (ConsistentListFromCache): the replica's watch cache first catches
/// up with the store's revision of now, then answers from its own state (the same objects as
/// etcd, later by the replica's lag). A cache that does not catch up within `too_large_wait`
/// hands the read to etcd.
///
/// A type whose last event is older than the store's revision (the last write was of another
/// type) waits first for the progress notification that moves its cache to that revision:
/// until the next [`PROGRESS_NOTIFY_INTERVAL`] tick of a sim-wide ticker (~50 ms on average),
/// or an event of its own, whichever comes first (`Store::wait_for_progress`). A type whose
/// last write is the store's latest revision answers at once. This is what v1.34.9 does on a
/// real cluster: there a consistent LIST of a type written last answers at once, one of a
/// type behind the revision waits ~50-100 ms (kcache's `limit=1` freshness probe, a consistent
/// list too, alike).
async fn consistent_from_cache(
    store: &Store,
    group: &str,
    resource: &str,
    lag: Duration,
    too_large_wait: Duration,
) -> Result<Snapshot, SimError> {
    store
        .wait_for_progress(group, resource, PROGRESS_NOTIFY_INTERVAL)
        .await?;
    if lag.is_zero() {
        return store.snapshot(group, resource);
    }
    let target = store.current_rv();
    if store.wait_for_lagged(target, lag, too_large_wait).await {
        store.lagged(group, resource, lag)
    } else {
        store.snapshot(group, resource)
    }
}

fn expired_continue(start: &str) -> SimError {
    SimError::Expired {
        message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into(),
        continue_token: Some(encode_continue(-1, start.trim_end_matches('\u{0}'), false)),
    }
}

/// A list body of the given objects (deletecollection's answer).
pub fn body_of(
    rt: &ResourceType,
    rv: u64,
    items: Vec<Arc<StoredObj>>,
    output: Output,
) -> Result<(Vec<u8>, Media), SimError> {
    body(
        rt,
        rv,
        &Page {
            items,
            more_after: None,
            remaining: None,
        },
        0,
        output,
    )
    .map(|(body, media, _)| (body, media))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_matches_apiserver_bytes() {
        assert_eq!(
            encode_continue(353, "fixtures-a/cm-02", false),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzUzLCJzdGFydCI6ImZpeHR1cmVzLWEvY20tMDJcdTAwMDAifQ"
        );
        assert_eq!(
            encode_continue(-1, "cm-10", false),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiY20tMTBcdTAwMDAifQ"
        );
        let (start, rv) = decode_continue(&encode_continue(7, "a/b", false)).unwrap();
        assert_eq!((start.as_str(), rv), ("a/b\u{0}", 7));
        let (start, rv) = decode_continue(&encode_continue(7, "a/b", true)).unwrap();
        assert_eq!((start.as_str(), rv), ("a/b\u{0}", 7));
    }

    #[test]
    fn bad_token_message() {
        assert_eq!(
            decode_continue("not-a-valid-token").unwrap_err().to_string(),
            "invalid continue token: continue key is not valid: illegal base64 data at input byte 16"
        );
    }
}
