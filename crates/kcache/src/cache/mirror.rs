//! The protobuf mirror of a cache: the upstream's own protobuf bytes of each object version the
//! cache can still serve, so that a protobuf reader gets from kcache what the apiserver sends.
//!
//! Why a mirror and not a transcoder: Go's protobuf encoding of an object depends on which of
//! its Go struct fields are pointers (a non-pointer field is written even when empty, a nil
//! pointer is not), which the JSON does not say. Only the apiserver's own bytes are right for
//! every kind, so a second upstream list + watch (in protobuf, see `upstream::mirror`) fills
//! this store, and kcache only writes the envelopes around its bytes (`crate::protobuf`).
//!
//! The JSON cache stays the one authority on which objects exist at which resourceVersion; the
//! mirror answers "the bytes of the object version written at `rv`", a fact that never changes,
//! so the two streams need not be in step: a reader that finds a version missing waits for the
//! mirror's watch to deliver it (or is answered by the upstream). Every write of the upstream
//! gets its own resourceVersion (an etcd revision), so within one type an RV names one object
//! version: readers look versions up by RV alone, which a list of 10k objects does 10k times.
//!
//! A mirror exists only for types some client has read in protobuf: JSON-only users pay
//! nothing for it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

/// Whether a mirror can answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MirrorStatus {
    /// Its first list has not completed: protobuf reads go upstream.
    Starting,
    /// Listed and watching.
    Synced,
    /// The upstream does not serve this type in protobuf (or kcache changes its objects, see
    /// `upstream::mirror`): protobuf reads go upstream for good.
    Unsupported(String),
}

/// How many applied events between sweeps of versions no reader can need any more.
const SWEEP_EVERY: u64 = 1024;

#[derive(Debug)]
struct State {
    /// Per object key, its known versions oldest first: (resourceVersion, object message).
    versions: HashMap<Box<str>, Vec<(u64, Bytes)>>,
    /// The same messages by resourceVersion, for readers.
    by_rv: HashMap<u64, Bytes, BuildHasherDefault<RvHasher>>,
    /// Keys whose last version is a deletion, with the deletion's RV.
    deleted: HashMap<Box<str>, u64>,
    /// The kind's empty object as the upstream encodes it (from an upstream BOOKMARK): what
    /// kcache's own protobuf bookmarks are made of.
    bookmark: Option<Bytes>,
    status: MirrorStatus,
    /// The RV of the mirror's last list, event or bookmark.
    rv: u64,
    /// Events applied since the last sweep.
    since_sweep: u64,
    /// Set by [`Mirror::stop`]: the mirror holds nothing and takes nothing from then on.
    stopped: bool,
    /// The bytes of every message in `by_rv`: what the mirror holds, for the memory figures.
    bytes: usize,
}

impl State {
    /// Keep the message of the version at `rv` for readers.
    fn keep(&mut self, rv: u64, message: Bytes) {
        self.bytes += message.len();
        if let Some(old) = self.by_rv.insert(rv, message) {
            self.bytes -= old.len();
        }
    }
}

/// The protobuf bytes of one cached resource's object versions; see the module docs.
#[derive(Debug)]
pub struct Mirror {
    state: Mutex<State>,
    /// Bumped on every change, so readers waiting for a version wake up.
    changed: watch::Sender<u64>,
}

impl Default for Mirror {
    fn default() -> Self {
        Mirror::new()
    }
}

impl Mirror {
    pub(crate) fn new() -> Mirror {
        Mirror {
            state: Mutex::new(State {
                versions: HashMap::new(),
                by_rv: HashMap::default(),
                deleted: HashMap::new(),
                bookmark: None,
                status: MirrorStatus::Starting,
                rv: 0,
                since_sweep: 0,
                stopped: false,
                bytes: 0,
            }),
            changed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent under a panic (every change is one insert or removal),
        // so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn announce(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The upstream has no protobuf form of this type (for good).
    pub(crate) fn is_unsupported(&self) -> bool {
        matches!(self.lock().status, MirrorStatus::Unsupported(_))
    }

    pub fn is_synced(&self) -> bool {
        self.lock().status == MirrorStatus::Synced
    }

    /// The mirror's resourceVersion (its last list, event or bookmark).
    pub(crate) fn rv(&self) -> u64 {
        self.lock().rv
    }

    /// Number of object keys with at least one version (for tests and metrics).
    pub(crate) fn keys(&self) -> usize {
        self.lock().versions.len()
    }

    /// The bytes of the object messages it holds, every version kept (for the memory
    /// figures).
    pub(crate) fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Protobuf reads of this type go upstream from now on.
    pub(crate) fn set_unsupported(&self, why: String) {
        let mut st = self.lock();
        if !st.stopped {
            st.status = MirrorStatus::Unsupported(why);
        }
        drop(st);
        self.announce();
    }

    /// The type is no longer cached (its cache went over its memory budget): drop every
    /// version and take none from now on, whatever its loop still delivers. Readers waiting
    /// for versions wake up and go upstream.
    pub(crate) fn stop(&self) {
        let mut st = self.lock();
        st.stopped = true;
        st.status = MirrorStatus::Unsupported("the type is no longer cached".into());
        st.versions = HashMap::new();
        st.by_rv = HashMap::default();
        st.bytes = 0;
        st.deleted = HashMap::new();
        st.bookmark = None;
        drop(st);
        self.announce();
    }

    /// A list's objects: every version is added (a relist does not drop the versions that
    /// history readers may still need; the sweep does, by `floor`), then the mirror is synced.
    pub(crate) fn install(&self, rv: u64, objects: Vec<(Box<str>, u64, Bytes)>, floor: u64) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        // Keys the list no longer has were deleted while the mirror was not watching: at the
        // latest at the list's RV, so the sweep can drop them once the floor passes it.
        let listed: std::collections::HashSet<&str> =
            objects.iter().map(|(k, _, _)| &**k).collect();
        let vanished: Vec<Box<str>> = st
            .versions
            .keys()
            .filter(|k| !listed.contains(&***k) && !st.deleted.contains_key(*k))
            .cloned()
            .collect();
        drop(listed);
        for key in vanished {
            st.deleted.insert(key, rv);
        }
        for (key, orv, bytes) in objects {
            st.deleted.remove(&key);
            st.keep(orv, bytes.clone());
            insert(st.versions.entry(key).or_default(), orv, bytes);
        }
        st.rv = st.rv.max(rv);
        st.status = MirrorStatus::Synced;
        sweep(&mut st, floor);
        drop(st);
        self.announce();
    }

    /// One upstream watch event: `bytes` is the object message at `rv` (for a deletion, the
    /// last state carrying the deletion's RV). `floor` is the oldest RV the JSON cache can
    /// still serve: versions that cannot be the state at any RV from there on are dropped.
    pub(crate) fn apply(&self, key: &str, rv: u64, bytes: Bytes, deleted: bool, floor: u64) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        st.keep(rv, bytes.clone());
        match st.versions.get_mut(key) {
            Some(v) => insert(v, rv, bytes),
            None => {
                st.versions.insert(key.into(), vec![(rv, bytes)]);
            }
        }
        if deleted {
            st.deleted.insert(key.into(), rv);
        } else {
            st.deleted.remove(key);
        }
        st.rv = st.rv.max(rv);
        st.since_sweep += 1;
        if st.since_sweep >= SWEEP_EVERY {
            sweep(&mut st, floor);
        }
        drop(st);
        self.announce();
    }

    /// An upstream bookmark: the RV moves on, and its object is kept as the kind's empty
    /// object for kcache's own bookmarks.
    pub(crate) fn bookmark(&self, rv: u64, object: Bytes) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        st.rv = st.rv.max(rv);
        if st.bookmark.is_none() {
            st.bookmark = Some(object);
        }
        drop(st);
        self.announce();
    }

    /// The kind's empty object as the upstream encodes it, once an upstream bookmark showed it.
    pub(crate) fn bookmark_object(&self) -> Option<Bytes> {
        self.lock().bookmark.clone()
    }

    /// The object message of the version written at `rv`, if the mirror has it.
    pub(crate) fn get(&self, rv: u64) -> Option<Bytes> {
        self.lock().by_rv.get(&rv).cloned()
    }

    /// The object messages of many versions at once (one lock for a whole list), waiting up to
    /// `wait` for the mirror's watch to deliver versions it does not have yet. It runs behind or ahead of the JSON cache's watch, by a
    /// few milliseconds normally, by seconds on a loaded upstream or kcache (BENCHMARKS.md,
    /// "Every client class at once"): a read waits a little, then goes upstream; a watch, which
    /// a missing version ends with a 410 that makes its client relist, waits longer. `None`
    /// when they did not come, when the mirror stopped being usable, or at once when its watch
    /// has passed the newest version wanted without bringing them all (it never will: it
    /// relisted past them).
    pub(crate) async fn wait_all(&self, wanted: &[u64], wait: Duration) -> Option<Vec<Bytes>> {
        let mut changed = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        let newest = wanted.iter().copied().max().unwrap_or(0);
        loop {
            {
                // One lock for the look-up and the mirror's position: a version applied
                // between the two would look passed over.
                let st = self.lock();
                if let Some(found) = found(&st, wanted) {
                    return Some(found);
                }
                if st.status != MirrorStatus::Synced || st.rv >= newest {
                    return None;
                }
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => continue,
                _ => return None,
            }
        }
    }
}

/// The object messages of `wanted`, if the mirror has every one.
fn found(st: &State, wanted: &[u64]) -> Option<Vec<Bytes>> {
    wanted.iter().map(|rv| st.by_rv.get(rv).cloned()).collect()
}

/// Hashes a resourceVersion for the readers' map: RVs come from the upstream, not from
/// clients, so a multiplicative hash is enough (no need for SipHash's cost per lookup).
#[derive(Default)]
struct RvHasher(u64);

impl Hasher for RvHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Insert keeping versions ordered by RV (a relist may bring a version older than the last
/// event seen); the same RV twice is one version.
fn insert(versions: &mut Vec<(u64, Bytes)>, rv: u64, bytes: Bytes) {
    match versions.binary_search_by_key(&rv, |(r, _)| *r) {
        Ok(_) => {}
        Err(at) => versions.insert(at, (rv, bytes)),
    }
}

/// Drop what no reader can need: a version is the state of its object from its RV until the
/// next version's, so one followed by a version at or below `floor` (the oldest RV the JSON
/// cache serves) is never asked for again; neither is an object deleted at or below `floor`.
fn sweep(st: &mut State, floor: u64) {
    st.since_sweep = 0;
    let gone: Vec<Box<str>> = st
        .deleted
        .iter()
        .filter(|(_, rv)| **rv <= floor)
        .map(|(k, _)| k.clone())
        .collect();
    let State {
        versions,
        by_rv,
        deleted,
        bytes,
        ..
    } = st;
    let mut forget = |rv: u64| {
        if let Some(message) = by_rv.remove(&rv) {
            *bytes -= message.len();
        }
    };
    for k in gone {
        deleted.remove(&k);
        for (rv, _) in versions.remove(&k).unwrap_or_default() {
            forget(rv);
        }
    }
    for v in versions.values_mut() {
        let keep_from = v.iter().rposition(|(rv, _)| *rv <= floor).unwrap_or(0);
        for (rv, _) in v.drain(..keep_from) {
            forget(rv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn versions_are_found_exactly_and_swept_below_the_floor() {
        let m = Mirror::new();
        m.install(
            10,
            vec![("ns/a".into(), 5, b("a5")), ("ns/b".into(), 7, b("b7"))],
            0,
        );
        assert!(m.is_synced());
        m.apply("ns/a", 11, b("a11"), false, 0);
        m.apply("ns/b", 12, b("b12"), true, 0);
        assert_eq!(m.get(5), Some(b("a5")));
        assert_eq!(m.get(11), Some(b("a11")));
        assert_eq!(m.get(6), None);
        // What it holds: every version kept (a5, b7, a11, b12).
        assert_eq!(m.bytes(), 2 + 2 + 3 + 3);
        // The JSON cache now serves from RV 11 on: a5 is no state at any RV ≥ 11, b is gone
        // only once its deletion is at or below the floor.
        m.install(12, vec![("ns/a".into(), 11, b("a11"))], 11);
        assert_eq!(m.get(5), None);
        assert_eq!(m.get(11), Some(b("a11")));
        assert_eq!(m.get(12), Some(b("b12")));
        m.install(13, vec![("ns/a".into(), 11, b("a11"))], 12);
        assert_eq!(m.get(12), None);
        assert_eq!(m.keys(), 1);
        // Only a11 is left; a version listed again is held once.
        assert_eq!(m.bytes(), 3);
        m.stop();
        assert_eq!(m.bytes(), 0);
    }

    #[test]
    fn a_key_missing_from_a_relist_is_dropped_once_the_floor_passes_the_list() {
        let m = Mirror::new();
        m.install(
            10,
            vec![("a".into(), 5, b("a5")), ("b".into(), 6, b("b6"))],
            0,
        );
        // b was deleted while the mirror was not watching: the next list lacks it.
        m.install(20, vec![("a".into(), 5, b("a5"))], 10);
        assert_eq!(m.get(6), Some(b("b6")), "still the state at RVs below 20");
        m.install(30, vec![("a".into(), 5, b("a5"))], 20);
        assert_eq!(m.get(6), None);
        assert_eq!(m.keys(), 1);
    }

    #[tokio::test]
    async fn a_stopped_mirror_holds_and_takes_nothing() {
        let m = std::sync::Arc::new(Mirror::new());
        m.install(10, vec![("a".into(), 10, b("a10"))], 0);
        let reader = {
            let m = m.clone();
            tokio::spawn(async move { m.wait_all(&[11], Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        m.stop();
        assert_eq!(
            reader.await.unwrap(),
            None,
            "a waiting reader goes upstream at once"
        );
        m.install(12, vec![("a".into(), 12, b("a12"))], 0);
        m.apply("a", 13, b("a13"), false, 0);
        m.bookmark(14, b("bm"));
        assert_eq!((m.keys(), m.get(12), m.get(13)), (0, None, None));
        assert!(m.is_unsupported() && m.bookmark_object().is_none());
    }

    /// A watcher waits for a version as long as the mirror's watch may still bring it: not
    /// once it has gone past it, nor past its bound.
    #[tokio::test(start_paused = true)]
    async fn a_watcher_waits_until_the_mirror_passes_its_version() {
        let m = std::sync::Arc::new(Mirror::new());
        m.install(10, vec![("a".into(), 10, b("a10"))], 0);
        let cap = Duration::from_secs(30);
        let reader = {
            let m = m.clone();
            tokio::spawn(async move { m.wait_all(&[20], cap).await })
        };
        // Ten seconds behind, far longer than a read waits.
        tokio::time::sleep(Duration::from_secs(10)).await;
        m.apply("a", 20, b("a20"), false, 0);
        assert_eq!(reader.await.unwrap(), Some(vec![b("a20")]));
        // Gone past it without it: it will never come.
        m.apply("a", 26, b("a26"), false, 0);
        assert_eq!(m.wait_all(&[25], cap).await, None);
        // Never coming at all: given up at the bound.
        let started = tokio::time::Instant::now();
        assert_eq!(m.wait_all(&[30], cap).await, None);
        assert_eq!(started.elapsed(), cap);
    }

    #[tokio::test]
    async fn a_reader_waits_for_a_version_the_watch_has_not_delivered_yet() {
        let m = std::sync::Arc::new(Mirror::new());
        m.install(10, vec![("a".into(), 10, b("a10"))], 0);
        let reader = {
            let m = m.clone();
            tokio::spawn(async move { m.wait_all(&[10, 11], Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        m.apply("a", 11, b("a11"), false, 0);
        assert_eq!(reader.await.unwrap(), Some(vec![b("a10"), b("a11")]));
        // A version that never comes: the reader gives up at its bound.
        assert_eq!(m.wait_all(&[12], Duration::from_millis(20)).await, None);
    }
}
