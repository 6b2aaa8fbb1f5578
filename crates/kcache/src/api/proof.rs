//! A quiet type's cache proven current by a read cheaper than the one it answers.
//!
//! A type nobody writes never reaches a revision that other types' writes moved, so the probe
//! cannot prove its cache fresh and its consistent reads go upstream (`consistent`). A
//! consistent metadata-only LIST of the type's collection (`PartialObjectMetadataList`, one
//! page, resourceVersion unset) can: it gives the upstream's revision `R` as of after the read
//! arrived, and every live object's key and resourceVersion there. An object's
//! resourceVersion names one version of it, so if the upstream's keys and resourceVersions at
//! `R` are exactly the cache's at its RV `c`, the two states are the same: nothing of the type
//! changed between `c` and `R` (a create or an update gives an object a resourceVersion above
//! `c`; a delete removes a key; a delete and a re-create of a name is a create). The cache
//! then holds the state at `R`, moves its RV there (as an upstream bookmark at `R` would), and
//! answers. See docs/semantics.md, "Quiet types proven by their metadata".
//!
//! It pays where the metadata is much smaller than the read: measured 2026-11-27 for 10k
//! ConfigMaps, 2.8 MB in 23 ms against 19 MB in 87 ms for the JSON list (v1.34). kcache
//! measures both per type and proves only where the proof is expected to be faster
//! ([`proof_pays`]).
//!
//! Readers share proofs (`shared_call`): a reader waits for a metadata list sent after it
//! arrived, and every reader that arrived before that list was sent gets its answer. Under
//! load the upstream serves a few proofs per round trip of the type, not one per read.

use std::time::{Duration, Instant};

use crate::cache::{Proof, Prover, ResourceCache, MEASURED_FROM, PROOF_SHARE};
use crate::error::Report;
use crate::upstream::{metadata_list_url, MetadataList, Upstream};

/// How often a proof is tried for a large read although it is not expected to pay: what one
/// slow proof measured (a cold upstream, a busy moment) is measured again within this, for
/// one metadata list of the type.
const PROOF_RETRY_EVERY: Duration = Duration::from_secs(30);

/// Whether proving `cache` current is expected to save at least a quarter of what forwarding a
/// read of `whole` objects takes, and at least a millisecond (`whole`: all of the read's pages:
/// a client that pages reads them all, and a proven cache answers every page). Both are
/// consistent lists and pay the same round trip (on v1.31 and later, the same wait for etcd's
/// progress notification); where that is most of either (a small type), the proof would only
/// add work for the upstream and kcache. `retry`: a large read whose proof is not expected to
/// pay is proven anyway once per [`PROOF_RETRY_EVERY`], to measure proofs again (for a quiet
/// type, whose reads would otherwise never be proven again).
///
/// Before a read of the type was forwarded and timed, a proof is taken to cost a
/// [`PROOF_SHARE`]th of a forwarded read per object, so it pays for a read of at least a third
/// of the type's objects (and of at least [`MEASURED_FROM`]): a large type's first reads are
/// proven, not forwarded whole. An object's metadata is part of it, so such a proof never costs
/// the upstream much more than the read; one that fails has the read forwarded and timed.
pub(super) fn proof_pays(
    cache: &ResourceCache,
    round_trip: Duration,
    whole: usize,
    retry: bool,
) -> bool {
    let freshness = cache.freshness();
    let objects = cache.len();
    let Some(forward) = freshness.measured_forward(whole, round_trip) else {
        // Counted in one object's metadata: the read's objects at PROOF_SHARE each, the
        // proof's at one each. The same rule as below, less the round trip both pay.
        let read = whole.saturating_mul(PROOF_SHARE as usize);
        return whole >= MEASURED_FROM && read.saturating_sub(objects) >= read / 4;
    };
    let Some(proof) = freshness.expected_proof(objects, round_trip) else {
        return false;
    };
    forward.saturating_sub(proof) >= (forward / 4).max(Duration::from_millis(1))
        || (retry && whole >= MEASURED_FROM && freshness.retry_proof(PROOF_RETRY_EVERY))
}

/// Prove `cache` current with the upstream's metadata list of its collection (see the module
/// docs), sent after this call, shared with the type's other readers that join before it is
/// sent. `prover`: the type's, which moves the cache's RV once it is proven; `round_trip`: the
/// probe's, what the measurement subtracts.
pub(super) async fn prove(
    upstream: &Upstream,
    cache: &ResourceCache,
    prover: &Prover,
    round_trip: Duration,
) -> Proof {
    cache
        .freshness()
        .proofs()
        .join(|| prove_once(upstream, cache, prover, round_trip))
        .await
}

/// One proof of `cache` (see [`prove`]); `prover` moves its RV once it is proven.
async fn prove_once(
    upstream: &Upstream,
    cache: &ResourceCache,
    prover: &Prover,
    round_trip: Duration,
) -> Proof {
    // Taken first: the metadata list is read after it, so its revision is at least the
    // snapshot's.
    let snap = cache.snapshot();
    let started = Instant::now();
    let list = match upstream.metadata_list(&metadata_list_url(cache)).await {
        Ok(list) => list,
        Err(e) => {
            tracing::debug!(resource = %cache.info, error = %Report(&e),
                "proof of a quiet cache failed; forwarding the reads");
            return Proof::Failed;
        }
    };
    cache
        .freshness()
        .record_proof(snap.objects.len(), started.elapsed(), round_trip);
    if !same_state(&snap.objects, snap.rv, &list) {
        return Proof::Changed;
    }
    // Nothing of the type happened between the snapshot's RV and the list's: the cache holds
    // the upstream's state at the list's revision, as after a bookmark there.
    prover.proven_at(list.rv);
    Proof::Proven
}

/// Whether the upstream's objects at `list.rv` are exactly `objects`, the cache's at `rv`:
/// the same keys with the same resourceVersions, and the list no older than the cache.
fn same_state(objects: &crate::cache::ObjectMap, rv: u64, list: &MetadataList) -> bool {
    list.rv >= rv
        && list.items.len() == objects.len()
        && objects
            .iter()
            .zip(&list.items)
            .all(|((key, object), item)| key.as_str() == &*item.key && object.rv == item.rv)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::upstream::ItemVersion;

    fn list(rv: u64, items: &[(&str, u64)]) -> MetadataList {
        MetadataList {
            rv,
            items: items
                .iter()
                .map(|(k, rv)| ItemVersion {
                    key: (*k).into(),
                    rv: *rv,
                })
                .collect(),
            bytes: 0,
        }
    }

    fn objects(items: &[(&str, u64)]) -> crate::cache::ObjectMap {
        items
            .iter()
            .map(|(k, rv)| {
                let (ns, name) = k.split_once('/').unwrap();
                let json = format!(
                    r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}}}}"#
                );
                let info = crate::resource::ResourceInfo::core_v1("configmaps", "ConfigMap");
                let o = crate::object::Object::from_upstream(&info, json.into(), false).unwrap();
                let o = Arc::new(o);
                (crate::object::Key::of(&o), o)
            })
            .collect()
    }

    #[test]
    fn only_the_same_keys_at_the_same_versions_prove() {
        let cached = objects(&[("a/x", 5), ("a/y", 7)]);
        assert!(same_state(&cached, 9, &list(12, &[("a/x", 5), ("a/y", 7)])));
        // A create, an update, a delete, a delete and re-create of the same name.
        assert!(!same_state(
            &cached,
            9,
            &list(12, &[("a/x", 5), ("a/y", 7), ("a/z", 11)])
        ));
        assert!(!same_state(
            &cached,
            9,
            &list(12, &[("a/x", 5), ("a/y", 10)])
        ));
        assert!(!same_state(&cached, 9, &list(12, &[("a/x", 5)])));
        assert!(!same_state(
            &cached,
            9,
            &list(12, &[("a/x", 5), ("a/y", 11)])
        ));
        // A list older than the cache proves nothing about now.
        assert!(!same_state(&cached, 9, &list(8, &[("a/x", 5), ("a/y", 7)])));
    }
}
