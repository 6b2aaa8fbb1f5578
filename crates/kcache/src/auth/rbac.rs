//! Following the upstream's RBAC objects, so that access reviews RBAC allowed can be
//! remembered for as long as RBAC does not change.
//!
//! Why: every cached read is authorized by a SubjectAccessReview, remembered for
//! `auth.allowedCacheSeconds` (20 s). When thousands of clients reconnect at once (a network
//! blip, an upstream restart, a rollout of their own) more than that after their last
//! request, each identity costs the upstream a review again, about a millisecond of its CPU
//! each (docs/scaling.md). The RBAC authorizer decides from four kinds of objects only
//! (ClusterRoles, ClusterRoleBindings, Roles, RoleBindings); while none of them changes, a
//! verdict it gave stays what it would give. So kcache lists and watches them, and keeps an allowance
//! whose reason says RBAC gave it (`RBAC: allowed by …`) for `auth.rbacAllowedCacheSeconds`
//! (5 minutes, the apiserver's own `--authorization-webhook-cache-authorized-ttl`), and forgets
//! every remembered verdict the moment any RBAC object changes: a revoked binding takes effect
//! through kcache as soon as kcache hears of it, not 20 s later.
//!
//! The changes are an epoch ([`RbacChanges::epoch`]) that the access-review memo asks in: any
//! event moves it on. The long lifetime is given only while it is safe
//! ([`RbacChanges::settled`]):
//! - every RBAC type is being watched: while a watch is down changes go unseen, and the epoch
//!   moves when it goes down, so the verdicts given before are asked again;
//! - no change in the last [`SETTLE`] (the watches' first opening is not one): kcache may
//!   hear of a change before the apiserver's authorizer (or another replica's) has applied
//!   it, and a review answered in that gap would be kept with the old rules; verdicts asked
//!   then get the short lifetime.
//!
//! Verdicts other authorizers give (the Node authorizer, a webhook) and every denial keep the
//! short lifetimes: kcache cannot see what they decide from.
//!
//! The objects' keys and resourceVersions are kept too, summed up in a digest
//! ([`RbacChanges::digest`]): equal digests at two moments mean RBAC did not change between
//! them, which lets a restarted kcache take back the verdicts it wrote down (`kept`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;

use crate::error::Report;
use crate::upstream::{
    enc, LineStream, Purpose, ReflectorConfig, Upstream, UpstreamError, WatchLine,
};

/// The RBAC authorizer's reason starts so for everything it allows (e.g. `RBAC: allowed by
/// ClusterRoleBinding "x" of ClusterRole "y" to User "z"`, in tests/fixtures/audit).
pub(super) const RBAC_ALLOWED: &str = "RBAC: allowed by ";

/// How long after an RBAC change verdicts keep the short lifetime (see the module docs).
pub(crate) const SETTLE: Duration = Duration::from_secs(10);

/// The collections the RBAC authorizer reads.
const RBAC_TYPES: [&str; 4] = [
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/apis/rbac.authorization.k8s.io/v1/roles",
    "/apis/rbac.authorization.k8s.io/v1/rolebindings",
];

/// `changed_ms` before any change.
const NEVER: u64 = u64::MAX;

/// Every RBAC type watched: one bit per entry of [`RBAC_TYPES`].
const ALL_WATCHED: u8 = (1 << RBAC_TYPES.len()) - 1;

/// What kcache knows of the upstream's RBAC objects: an epoch that moves on at each change,
/// and whether every type is being watched.
#[derive(Debug)]
pub(crate) struct RbacChanges {
    epoch: AtomicU64,
    /// A bit per RBAC type, set while its watch is open.
    watched: AtomicU8,
    /// When the epoch last moved, in milliseconds since `origin` ([`NEVER`] before it first
    /// does: the watches' first opening is not a change).
    changed_ms: AtomicU64,
    origin: Instant,
    /// Every RBAC object's key (`namespace/name`) and resourceVersion, per type: what
    /// [`RbacChanges::digest`] sums up.
    objects: Mutex<[BTreeMap<String, String>; RBAC_TYPES.len()]>,
    /// Told each time a watch opens (see [`RbacChanges::wait_followed`]).
    opened: tokio::sync::Notify,
}

impl Default for RbacChanges {
    fn default() -> Self {
        RbacChanges {
            epoch: AtomicU64::new(0),
            watched: AtomicU8::new(0),
            changed_ms: AtomicU64::new(NEVER),
            origin: Instant::now(),
            objects: Mutex::default(),
            opened: tokio::sync::Notify::new(),
        }
    }
}

impl RbacChanges {
    /// The current epoch: read it before asking for a verdict.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether a verdict RBAC gives now may be kept for the long lifetime: every RBAC type is
    /// watched and none changed in the last [`SETTLE`].
    pub(crate) fn settled(&self, now: Instant) -> bool {
        let changed_ms = self.changed_ms.load(Ordering::Acquire);
        let since_change = now
            .saturating_duration_since(self.origin)
            .saturating_sub(Duration::from_millis(changed_ms));
        self.followed() && (changed_ms == NEVER || since_change >= SETTLE)
    }

    /// Whether every RBAC type is being watched (the `kcache_auth_rbac_followed` gauge).
    pub(crate) fn followed(&self) -> bool {
        self.watched.load(Ordering::Acquire) == ALL_WATCHED
    }

    /// An RBAC object changed, or changes may have gone unseen: every verdict remembered so
    /// far is stale.
    fn changed(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.changed_ms.store(ms, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    fn watching(&self, i: usize) {
        self.watched.fetch_or(1 << i, Ordering::AcqRel);
        self.opened.notify_waiters();
    }

    /// Wait until every RBAC type is watched (at most `within`); whether it is.
    pub(crate) async fn wait_followed(&self, within: Duration) -> bool {
        let wait = async {
            loop {
                let opened = self.opened.notified();
                if self.followed() {
                    return;
                }
                opened.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }

    /// A digest of every RBAC object kcache follows (each one's key and resourceVersion), while
    /// every type is watched: equal digests mean RBAC is as it was (any change of an object
    /// changes its resourceVersion). None while a type is not watched.
    pub(crate) fn digest(&self) -> Option<String> {
        if !self.followed() {
            return None;
        }
        let objects = self.objects();
        let mut sum = ring::digest::Context::new(&ring::digest::SHA256);
        for (collection, of_type) in RBAC_TYPES.iter().zip(objects.iter()) {
            for (key, rv) in of_type {
                for part in [*collection, key.as_str(), rv.as_str()] {
                    sum.update(part.as_bytes());
                    sum.update(b"\0");
                }
            }
        }
        let digest = sum.finish();
        Some(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, [BTreeMap<String, String>; RBAC_TYPES.len()]> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watch of type `i` is down: what changes meanwhile goes unseen, so the verdicts
    /// given while it was open are forgotten. A type never watched (kcache's identity may not
    /// list it) gave no verdict a long life: failing again forgets nothing.
    fn lost(&self, i: usize) {
        let was = self.watched.fetch_and(!(1 << i), Ordering::AcqRel);
        if was & (1 << i) != 0 {
            self.changed();
        }
    }

    /// Follow every RBAC type until the task is dropped; `followed` is set to 1 while every
    /// type is watched.
    pub(crate) async fn follow(self: Arc<Self>, upstream: Upstream, followed: Gauge) {
        let each = (0..RBAC_TYPES.len()).map(|i| follow_type(&self, &upstream, i, &followed));
        futures::future::join_all(each).await;
    }
}

/// Why one RBAC watch stopped.
enum Stop {
    /// The watch ended as watches do (the upstream's timeout): watch again from where it was.
    Ended,
    /// The resourceVersion is too old (410): list again. What changed meanwhile is unknown.
    Expired,
    /// The upstream could not be asked, or refused.
    Failed(UpstreamError),
}

/// List one RBAC type and watch it from there, for ever; each event moves the epoch on.
async fn follow_type(changes: &RbacChanges, upstream: &Upstream, i: usize, followed: &Gauge) {
    let collection = RBAC_TYPES[i];
    let mut from: Option<String> = None;
    let mut failures: u32 = 0;
    loop {
        let opened = Instant::now();
        let stop = match &from {
            None => match list_all(upstream, collection).await {
                Ok((rv, objects)) => {
                    changes.objects()[i] = objects;
                    from = Some(rv);
                    continue;
                }
                Err(e) => Stop::Failed(e),
            },
            Some(rv) => {
                let rv = rv.clone();
                let watching = || {
                    changes.watching(i);
                    followed.set(i64::from(changes.followed()));
                    failures = 0;
                };
                watch(changes, upstream, i, &rv, &mut from, watching).await
            }
        };
        if !matches!(stop, Stop::Ended) {
            changes.lost(i);
            followed.set(0);
        }
        match stop {
            Stop::Ended => {
                // An upstream (or a proxy before it) that ends watches at once is not
                // asked again in a tight loop.
                if opened.elapsed() < Duration::from_secs(1) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            Stop::Expired => from = None,
            Stop::Failed(e) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(
                        collection,
                        error = %Report(&e),
                        "RBAC objects cannot be followed: allowed access reviews are \
                         remembered for auth.allowedCacheSeconds only until they can"
                    );
                }
                // The reflectors' backoff: exponential with jitter, so that kcache's replicas do
                // not retry together.
                tokio::time::sleep(ReflectorConfig::default().backoff(failures)).await;
            }
        }
    }
}

/// A list of RBAC objects, or a watch event's object: only what the digest needs.
#[derive(Debug, Default, Deserialize)]
struct Listed {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Item>,
}

#[derive(Debug, Default, Deserialize)]
struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default, rename = "continue")]
    next: String,
}

/// An object of a list or a watch event (a Status for an ERROR event: its code and message).
#[derive(Debug, Default, Deserialize)]
struct Item {
    #[serde(default)]
    metadata: ItemMeta,
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ItemMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
}

impl ItemMeta {
    fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

/// Every object of one RBAC type (key → resourceVersion) and the list's resourceVersion, in
/// pages of 500 (one consistent snapshot).
async fn list_all(
    upstream: &Upstream,
    collection: &str,
) -> Result<(String, BTreeMap<String, String>), UpstreamError> {
    let mut objects = BTreeMap::new();
    let mut next = String::new();
    loop {
        let mut path = format!("{collection}?limit=500");
        if !next.is_empty() {
            path.push_str("&continue=");
            path.push_str(&enc(&next));
        }
        let body = upstream.get(&path, Purpose::Rbac).await?;
        let list: Listed =
            serde_json::from_slice(&body).map_err(UpstreamError::decode("RBAC list"))?;
        for item in list.items {
            objects.insert(item.metadata.key(), item.metadata.resource_version);
        }
        if list.metadata.next.is_empty() {
            if list.metadata.resource_version.is_empty() {
                return Err(UpstreamError::Malformed(format!(
                    "{collection}: no resourceVersion"
                )));
            }
            return Ok((list.metadata.resource_version, objects));
        }
        next = list.metadata.next;
    }
}

/// Watch one type from `rv`, keeping `from` at the last version seen; `watching` is called
/// once the watch is open.
async fn watch(
    changes: &RbacChanges,
    upstream: &Upstream,
    i: usize,
    rv: &str,
    from: &mut Option<String>,
    watching: impl FnOnce(),
) -> Stop {
    let path = format!(
        "{}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}",
        RBAC_TYPES[i]
    );
    let body = match upstream.open(&path, Purpose::Rbac).await {
        Ok(resp) => resp.into_body(),
        Err(e) if e.code() == Some(410) => return Stop::Expired,
        Err(e) => return Stop::Failed(e),
    };
    watching();
    let mut lines = LineStream::new(body);
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => return Stop::Ended,
            Err(e) => return Stop::Failed(e),
        };
        let event = match WatchLine::parse(&line) {
            Ok(event) => event,
            Err(e) => return Stop::Failed(e),
        };
        let item: Item = serde_json::from_slice(&event.object).unwrap_or_default();
        match event.ty.as_str() {
            "ADDED" | "MODIFIED" => {
                let rv = item.metadata.resource_version.clone();
                changes.objects()[i].insert(item.metadata.key(), rv);
                changes.changed();
            }
            "DELETED" => {
                changes.objects()[i].remove(&item.metadata.key());
                changes.changed();
            }
            "ERROR" if item.code == Some(410) => return Stop::Expired,
            "ERROR" => {
                let message = item.message.unwrap_or_default();
                return Stop::Failed(UpstreamError::Malformed(format!(
                    "{}: watch error: {message}",
                    RBAC_TYPES[i]
                )));
            }
            _ => {}
        }
        if !item.metadata.resource_version.is_empty() {
            *from = Some(item.metadata.resource_version);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_only_with_every_type_watched_and_no_recent_change() {
        let changes = RbacChanges::default();
        let later = Instant::now() + SETTLE * 2;
        assert!(!changes.settled(later), "nothing watched yet");
        for i in 0..RBAC_TYPES.len() {
            changes.watching(i);
        }
        assert!(
            changes.settled(Instant::now()),
            "no change yet: settled at once"
        );
        let before = changes.epoch();
        changes.lost(2);
        assert!(changes.epoch() > before, "a lost watch may hide changes");
        let lost = changes.epoch();
        changes.lost(2);
        assert_eq!(
            changes.epoch(),
            lost,
            "failing again while down changes nothing"
        );
        assert!(!changes.settled(later));
        changes.watching(2);
        assert!(!changes.settled(Instant::now()), "just changed");
        assert!(changes.settled(Instant::now() + SETTLE * 2));
    }
}
