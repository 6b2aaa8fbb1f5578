//! Access verdicts RBAC gave, kept in `cache.persistDir` across a restart.
//!
//! Why: a kcache restarted over its `persistDir` serves its cached objects at once, but its
//! remembered verdicts were gone, so every client coming back cost the upstream a
//! SubjectAccessReview per identity and question: 501 for the 1,000 node clients of a
//! 500-node cluster, more of the apiserver's CPU than the same clients reconnecting to it
//! directly (BENCHMARKS.md, "Against a real v1.34.9 apiserver").
//!
//! What makes it safe: a verdict RBAC gave holds for as long as no RBAC object changes (see
//! [`super::rbac`]). kcache writes down, every [`EVERY`], the allowances RBAC gave that are
//! fresh in the current epoch, with when each stops being fresh and a digest of every RBAC
//! object's key and resourceVersion at that moment. After a restart it lists RBAC again and
//! takes the verdicts back only if the digest is the same: nothing was created, changed or
//! deleted meanwhile. Each keeps only the freshness it had left (wall-clock time, capped at
//! `auth.rbacAllowedCacheSeconds`). Denials and other authorizers' verdicts are never written.
//!
//! The file holds user names, groups and the questions they asked, never a token: it is
//! written with mode 0600 beside the cached objects, which are at least as sensitive.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};

use super::authz::Decision;
use super::memo::Memo;
use super::rbac::{RbacChanges, RBAC_ALLOWED};

/// How often the verdicts are written down (a restart loses at most this much of them).
pub(super) const EVERY: Duration = Duration::from_secs(10);

/// The file's name in the persist directory.
pub(super) const FILE: &str = "access-verdicts.json";

/// How long kcache waits at start for its RBAC watches before giving up on the file.
const WAIT_FOR_RBAC: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Kept {
    /// [`RbacChanges::digest`] when the verdicts were written.
    rbac: String,
    verdicts: Vec<Verdict>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Verdict {
    /// The memo's question.
    key: String,
    /// The authorizer's reason (its audit annotation).
    reason: String,
    /// When it stops being fresh, in Unix milliseconds.
    until_ms: u64,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Take the kept verdicts back if RBAC is as it was, then write them down every [`EVERY`],
/// for as long as kcache runs.
///
/// `done` is set once the kept verdicts are taken back, or found not to be takeable: access
/// reviews wait for it (briefly) so that clients coming back the moment kcache is ready find
/// them.
pub(super) async fn keep(
    dir: PathBuf,
    rbac: Arc<RbacChanges>,
    memo: Arc<Memo<Decision>>,
    cap: Duration,
    restored: Counter,
    done: tokio::sync::watch::Sender<bool>,
) {
    let path = dir.join(FILE);
    if path.exists() && rbac.wait_followed(WAIT_FOR_RBAC).await {
        let n = restore(&path, &rbac, &memo, cap);
        if n > 0 {
            tracing::info!(
                verdicts = n,
                "access verdicts RBAC gave taken back from persistDir"
            );
        }
        restored.inc_by(n as u64);
    }
    done.send_replace(true);
    let mut last = None;
    loop {
        tokio::time::sleep(EVERY).await;
        let Some(kept) = snapshot(&rbac, &memo) else {
            continue;
        };
        if last.as_ref() == Some(&kept) {
            continue;
        }
        let write = {
            let path = path.clone();
            let bytes = serde_json::to_vec(&kept).unwrap_or_default();
            tokio::task::spawn_blocking(move || write_file(&path, &bytes))
        };
        match write.await {
            Ok(Ok(())) => last = Some(kept),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, path = %path.display(), "access verdicts not written")
            }
            Err(_) => {}
        }
    }
}

/// The verdicts to write down now: RBAC's allowances fresh in the current epoch, if RBAC is
/// followed and did not change while they were gathered.
fn snapshot(rbac: &RbacChanges, memo: &Memo<Decision>) -> Option<Kept> {
    let epoch = rbac.epoch();
    let digest = rbac.digest()?;
    let now = SystemTime::now();
    let verdicts = memo
        .fresh_in(epoch, |d| d.allowed && d.reason.starts_with(RBAC_ALLOWED))
        .into_iter()
        .map(|(key, d, left)| Verdict {
            key,
            reason: d.reason.to_string(),
            until_ms: unix_ms(now + left),
        })
        .collect();
    (rbac.epoch() == epoch).then_some(Kept {
        rbac: digest,
        verdicts,
    })
}

/// Put the kept verdicts back into `memo`, if the file's RBAC digest is today's; how many.
fn restore(path: &Path, rbac: &RbacChanges, memo: &Memo<Decision>, cap: Duration) -> usize {
    let Ok(bytes) = std::fs::read(path) else {
        return 0;
    };
    let Ok(kept) = serde_json::from_slice::<Kept>(&bytes) else {
        tracing::warn!(path = %path.display(), "access verdicts unreadable: not taken back");
        return 0;
    };
    let epoch = rbac.epoch();
    if rbac.digest().as_deref() != Some(kept.rbac.as_str()) {
        tracing::info!(
            "RBAC changed while kcache was stopped: the access verdicts it kept are dropped"
        );
        return 0;
    }
    let now = unix_ms(SystemTime::now());
    let mut restored = 0;
    for v in kept.verdicts {
        let left = Duration::from_millis(v.until_ms.saturating_sub(now)).min(cap);
        if left.is_zero() {
            continue;
        }
        let decision = Decision::allowed(v.reason.into());
        memo.restore(epoch, v.key, decision, left);
        restored += 1;
    }
    restored
}

/// Write `bytes` to `path` whole or not at all (a temporary file renamed over it), readable by
/// kcache's user only.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("json.tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}
