//! Protobuf answers from the cache (E9): which types get them, their mirrors, and the bodies.
//!
//! The JSON cache decides which objects a read returns, at which versions; the mirror
//! (`cache::Mirror`) has the upstream's protobuf bytes of those versions; this module writes
//! the envelopes around them (`crate::protobuf`). A read whose versions the mirror does not
//! have within [`MIRROR_WAIT`] goes upstream: a wrong byte is worse than a slow answer.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::stream;
use http::StatusCode;

use super::response;
use crate::cache::{Event, EventType, LineKind, Mirror, ResourceCache};
use crate::object::Object;
use crate::protobuf::{self as pb, ListMeta};
use crate::resource::ResourceInfo;
use crate::upstream::{MirrorReflector, ReflectorConfig, Upstream};

/// How long a protobuf read waits for the mirror's watch to deliver a version the JSON cache
/// already has (normally milliseconds: both watch the same upstream) before going upstream.
pub(super) const MIRROR_WAIT: Duration = Duration::from_secs(3);

/// How long a protobuf watch waits for a version the mirror's watch may still bring (see
/// `Mirror::wait_all`): a 410 makes every such client relist at once, which
/// costs them and kcache more than a late event.
pub(super) const MIRROR_WATCH_WAIT: Duration = Duration::from_secs(30);

/// Chunk size of streamed protobuf lists (as the JSON ones).
const CHUNK: usize = 64 * 1024;

/// The protobuf mirrors of the cached types, each started by the first protobuf read of its
/// type (that read, and the next ones until the mirror has listed, go upstream), so that users
/// whose clients all read JSON pay nothing for protobuf.
///
/// Each mirror lives in its cache (`ResourceCache::mirror`), so a request finds it without a
/// lookup of its own; this keeps what starts them and their tasks.
pub(crate) struct Mirrors {
    upstream: Upstream,
    cfg: ReflectorConfig,
    enabled: bool,
    tasks: std::sync::Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Drop for Mirrors {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(|p| p.into_inner());
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

impl Mirrors {
    /// `enabled: false` answers every protobuf read upstream, as kcache did before it had
    /// mirrors.
    pub(crate) fn new(upstream: Upstream, cfg: ReflectorConfig, enabled: bool) -> Mirrors {
        Mirrors {
            upstream,
            cfg,
            enabled,
            tasks: Default::default(),
        }
    }

    /// Whether the type can be answered in protobuf at all: a built-in (the apiserver serves
    /// custom resources in JSON only) cached whole (a metadata-only cache has no objects to
    /// mirror) while mirrors are enabled and the upstream has not refused protobuf for it.
    pub(crate) fn servable(&self, cache: &ResourceCache) -> bool {
        self.enabled
            && !cache.info.custom
            && !cache.strip().metadata_only
            && !cache.mirror().is_some_and(|m| m.is_unsupported())
    }

    /// The mirror of `cache` if it can answer now; starts it on first use.
    pub(crate) fn ready(&self, cache: &Arc<ResourceCache>) -> Option<Arc<Mirror>> {
        let mirror = cache.mirror_or_start(|| {
            tracing::info!(resource = %cache.info, "first protobuf read: starting the protobuf mirror");
            self.start(cache, Arc::new(Mirror::new()), None)
        });
        mirror.is_synced().then(|| mirror.clone())
    }

    /// Start the mirror of `cache` from what `persistDir` kept of it (`objects` at `rv`,
    /// see `persist`): it answers at once and watches from `rv`, as the mirror of a kcache
    /// that never stopped. Nothing when mirrors are off or the type cannot have one.
    pub(crate) fn resume(
        &self,
        cache: &Arc<ResourceCache>,
        rv: u64,
        objects: Vec<(Box<str>, u64, Bytes)>,
    ) {
        if !self.servable(cache) {
            return;
        }
        cache.mirror_or_start(|| {
            let mirror = Arc::new(Mirror::new());
            mirror.install(rv, objects, 0);
            tracing::info!(resource = %cache.info, rv, keys = mirror.keys(),
                "protobuf mirror restored from disk");
            self.start(cache, mirror, Some(rv))
        });
    }

    /// Run `mirror`'s loop (from `resume` if set) for as long as kcache runs.
    fn start(
        &self,
        cache: &Arc<ResourceCache>,
        mirror: Arc<Mirror>,
        resume: Option<u64>,
    ) -> Arc<Mirror> {
        let mut reflector = MirrorReflector::new(
            self.upstream.clone(),
            cache.clone(),
            mirror.clone(),
            self.cfg.clone(),
        );
        if let Some(rv) = resume {
            reflector = reflector.resuming(rv);
        }
        let task = tokio::spawn(reflector.run()).abort_handle();
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
        mirror
    }
}

/// The versions (resourceVersions) of `objects`, for the mirror.
pub(super) fn versions(objects: &[Arc<Object>]) -> Vec<u64> {
    objects.iter().map(|o| o.rv).collect()
}

/// A GET's body: the object's envelope.
pub(super) fn object(info: &ResourceInfo, obj: &[u8]) -> Response {
    let api_version = info.api_version();
    let mut out = BytesMut::with_capacity(pb::envelope_len(&api_version, &info.kind, obj.len()));
    pb::write_envelope(&api_version, &info.kind, obj, &mut out);
    response::protobuf(StatusCode::OK, vec![out.freeze()])
}

/// A list's body from its items' object messages, streamed in chunks when large.
pub(super) fn list(
    info: &ResourceInfo,
    rv: u64,
    token: Option<&str>,
    remaining: Option<usize>,
    items: Vec<Bytes>,
) -> Response {
    let rv = rv.to_string();
    let meta = ListMeta {
        resource_version: &rv,
        continue_token: token.unwrap_or(""),
        remaining_item_count: remaining.map(|r| r as i64),
    };
    let items_len: usize = items.iter().map(|i| pb::list_item_len(i.len())).sum();
    let mut head = BytesMut::new();
    pb::write_list_head(
        &info.api_version(),
        &format!("{}List", info.kind),
        &meta,
        items_len,
        &mut head,
    );
    if head.len() + items_len < CHUNK {
        let mut out = head;
        for i in &items {
            pb::write_list_item(i, &mut out);
        }
        pb::write_list_tail(&mut out);
        return response::protobuf(StatusCode::OK, vec![out.freeze()]);
    }
    // Copied into chunks as the client reads: memory stays a pointer per item.
    let chunks = stream::unfold(
        (Some(head), items.into_iter(), false),
        |(head, mut rest, done)| async move {
            if done {
                return None;
            }
            let mut buf = head.unwrap_or_else(|| BytesMut::with_capacity(CHUNK + 4096));
            let mut exhausted = true;
            for item in rest.by_ref() {
                pb::write_list_item(&item, &mut buf);
                if buf.len() >= CHUNK {
                    exhausted = false;
                    break;
                }
            }
            if exhausted {
                pb::write_list_tail(&mut buf);
            }
            Some((
                Ok::<_, std::convert::Infallible>(buf.freeze()),
                (None, rest, exhausted),
            ))
        },
    );
    response::stream_as(Body::from_stream(chunks), pb::MEDIA_TYPE)
}

/// What a protobuf watch frame of an event is made of: the event type, and the object version
/// it carries (its `rv`), at `at` when that differs from the version's own RV.
struct FrameSource {
    ty: &'static str,
    rv: u64,
    at: Option<u64>,
}

/// Which version a frame of `kind` carries (W2): as is, the new state for an object entering
/// the selector, the previous state at the event's RV for one leaving it. A DELETED carries
/// the deleted state; a relist's made-up deletion (and a deletion whose own version the mirror
/// missed) is the previous state at the deletion's RV, which is what the apiserver sends too.
fn frame_source(ev: &Event, kind: LineKind, exact: bool) -> FrameSource {
    let prev_at = |ty| {
        let prev = ev.prev.as_ref().unwrap_or(&ev.object);
        FrameSource {
            ty,
            rv: prev.rv,
            at: (prev.rv != ev.rv).then_some(ev.rv),
        }
    };
    match (kind, ev.ty) {
        (LineKind::Left, _) => prev_at("DELETED"),
        (LineKind::AsIs, EventType::Deleted) if !exact || ev.made_up => prev_at("DELETED"),
        (LineKind::Entered, _) => FrameSource {
            ty: "ADDED",
            rv: ev.object.rv,
            at: None,
        },
        (LineKind::AsIs, ty) => FrameSource {
            ty: ty.as_str(),
            rv: ev.object.rv,
            at: None,
        },
    }
}

/// The protobuf watch frame of an event, built once per event and shared by every protobuf
/// watcher (like the JSON lines); waits for the mirror to receive the version if it has not
/// yet. `None`: the mirror did not get it in time; the watcher must end with a 410.
pub(super) async fn watch_frame(
    info: &ResourceInfo,
    mirror: &Mirror,
    ev: &Event,
    kind: LineKind,
) -> Option<Bytes> {
    let build = |exact: bool| {
        let src = frame_source(ev, kind, exact);
        let obj = mirror.get(src.rv)?;
        frame(info, src.ty, &obj, src.at)
    };
    if let Some(line) = ev.protobuf_line(kind, || build(true)) {
        return Some(line);
    }
    // Normally the mirror's watch is a few milliseconds behind: wait for the version. A
    // deletion whose own version the mirror missed (it relisted meanwhile) is then made from
    // the previous state.
    let src = frame_source(ev, kind, true);
    let _ = mirror.wait_all(&[src.rv], MIRROR_WATCH_WAIT).await;
    ev.protobuf_line(kind, || build(true).or_else(|| build(false)))
}

/// One frame: `obj` at its own RV, or re-versioned to `at`.
fn frame(info: &ResourceInfo, ty: &str, obj: &[u8], at: Option<u64>) -> Option<Bytes> {
    let patched;
    let obj = match at {
        Some(rv) => {
            patched = pb::with_resource_version(obj, &rv.to_string()).ok()?;
            &patched[..]
        }
        None => obj,
    };
    let mut out = BytesMut::new();
    pb::write_watch_event(ty, &info.api_version(), &info.kind, obj, &mut out);
    Some(out.freeze())
}

/// The ADDED frame of an initial object (`obj`, its object message), appended to `out`.
pub(super) fn write_added(info: &ResourceInfo, api_version: &str, obj: &[u8], out: &mut BytesMut) {
    pb::write_watch_event("ADDED", api_version, &info.kind, obj, out);
}

/// A BOOKMARK frame at `rv` (with the initial-events-end annotation when `initial_end`), made
/// from the kind's empty object as the upstream encodes it; `None` until an upstream bookmark
/// has shown that (the mirror's watch asks for bookmarks).
pub(super) fn bookmark(
    info: &ResourceInfo,
    mirror: &Mirror,
    rv: u64,
    initial_end: bool,
) -> Option<Bytes> {
    let empty = mirror.bookmark_object()?;
    let mut obj = pb::with_resource_version(&empty, &rv.to_string()).ok()?;
    if initial_end {
        obj = pb::with_annotation(&obj, "k8s.io/initial-events-end", "true").ok()?;
    }
    let mut out = BytesMut::new();
    pb::write_watch_event("BOOKMARK", &info.api_version(), &info.kind, &obj, &mut out);
    Some(out.freeze())
}
