//! A small cache of upstream verdicts (TokenReview, SubjectAccessReview): each answer is kept
//! for a TTL chosen from the answer itself (acceptances longer than refusals), concurrent
//! askers of the same question wait for one upstream call instead of each making their own,
//! and while the upstream cannot be asked an expired answer may still be used for a while
//! (stale-if-error), so that a cache that keeps serving through an upstream outage keeps
//! recognising its callers.
//!
//! Answers may also be asked in an *epoch* ([`Memo::get_in`]): an answer is fresh only in the
//! epoch it was asked in, so that moving to the next epoch makes every remembered answer
//! stale at once (access reviews, when the upstream's RBAC objects change).

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use dashmap::DashMap;

/// Where an answer came from (for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A fresh remembered answer.
    Cached,
    /// Asked the upstream just now (or waited for a concurrent ask).
    Upstream,
    /// The upstream failed; an expired answer within the stale-if-error window was used.
    Stale,
}

impl Source {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Cached => "cache",
            Source::Upstream => "upstream",
            Source::Stale => "stale",
        }
    }
}

struct Entry<V> {
    value: V,
    /// The epoch the answer was asked in: fresh in that epoch only.
    epoch: u64,
    fresh_until: Instant,
    usable_until: Instant,
}

struct Slot<V> {
    entry: RwLock<Option<Entry<V>>>,
    /// Held while asking the upstream: later askers queue here and then find the answer.
    asking: tokio::sync::Mutex<()>,
}

/// Remembered answers by question (a string key).
pub(crate) struct Memo<V> {
    slots: DashMap<String, Arc<Slot<V>>>,
    /// Most questions remembered; beyond it expired answers are swept, and if that is not
    /// enough new questions are asked without being remembered (memory stays bounded however
    /// many distinct tokens or attributes callers send).
    capacity: usize,
    stale_if_error: Duration,
}

impl<V: Clone> Memo<V> {
    pub(crate) fn new(capacity: usize, stale_if_error: Duration) -> Memo<V> {
        Memo {
            slots: DashMap::new(),
            capacity,
            stale_if_error,
        }
    }

    /// The remembered answer to `key`, or the one `ask` gets (kept for `ttl(&answer)`).
    pub(crate) async fn get<E, F, Fut>(
        &self,
        key: &str,
        ttl: impl Fn(&V) -> Duration,
        ask: F,
    ) -> Result<(V, Source), E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.get_in(0, key, ttl, ask).await
    }

    /// [`Memo::get`] in `epoch`: a remembered answer asked in another epoch is not fresh, and
    /// a new one is kept as asked in `epoch`. The caller reads the epoch before asking, so an
    /// epoch that moves on while the upstream answers leaves that answer stale. An answer of
    /// an earlier epoch is still used while the upstream cannot be asked (stale-if-error): it
    /// is the last answer there is.
    pub(crate) async fn get_in<E, F, Fut>(
        &self,
        epoch: u64,
        key: &str,
        ttl: impl Fn(&V) -> Duration,
        ask: F,
    ) -> Result<(V, Source), E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let now = Instant::now();
        let slot = match self.slots.get(key) {
            Some(s) => s.clone(),
            None => {
                if self.slots.len() >= self.capacity {
                    self.sweep(now);
                }
                if self.slots.len() >= self.capacity {
                    return ask().await.map(|v| (v, Source::Upstream));
                }
                self.slots
                    .entry(key.to_string())
                    .or_insert_with(|| {
                        Arc::new(Slot {
                            entry: RwLock::new(None),
                            asking: tokio::sync::Mutex::new(()),
                        })
                    })
                    .clone()
            }
        };
        if let Some(v) = fresh(&slot, now, epoch) {
            return Ok((v, Source::Cached));
        }
        let _asking = slot.asking.lock().await;
        // Someone else may have asked while this caller queued.
        if let Some(v) = fresh(&slot, Instant::now(), epoch) {
            return Ok((v, Source::Upstream));
        }
        match ask().await {
            Ok(v) => {
                let now = Instant::now();
                let fresh_until = now + ttl(&v);
                *slot.entry.write().unwrap_or_else(|e| e.into_inner()) = Some(Entry {
                    value: v.clone(),
                    epoch,
                    fresh_until,
                    usable_until: fresh_until + self.stale_if_error,
                });
                Ok((v, Source::Upstream))
            }
            Err(e) => {
                let entry = slot.entry.read().unwrap_or_else(|e| e.into_inner());
                match entry.as_ref() {
                    Some(en) if en.usable_until > Instant::now() => {
                        Ok((en.value.clone(), Source::Stale))
                    }
                    _ => Err(e),
                }
            }
        }
    }

    /// Forget answers past their stale-if-error window.
    fn sweep(&self, now: Instant) {
        self.slots.retain(|_, slot| {
            slot.entry
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                // Questions being asked right now have no entry yet: keep them.
                .is_none_or(|e| e.usable_until > now)
        });
    }

    /// Every answer fresh in `epoch` that `keep` accepts, with how long it stays fresh: what
    /// may be written down to be restored after a restart ([`Memo::restore`]).
    pub(crate) fn fresh_in(
        &self,
        epoch: u64,
        keep: impl Fn(&V) -> bool,
    ) -> Vec<(String, V, Duration)> {
        let now = Instant::now();
        self.slots
            .iter()
            .filter_map(|slot| {
                let entry = slot.entry.read().unwrap_or_else(|e| e.into_inner());
                let e = entry.as_ref()?;
                let fresh = e.epoch == epoch && e.fresh_until > now && keep(&e.value);
                fresh.then(|| (slot.key().clone(), e.value.clone(), e.fresh_until - now))
            })
            .collect()
    }

    /// Remember `value` as the answer to `key`, asked in `epoch`, fresh for `ttl`: an answer
    /// written down before a restart. An answer already there is kept.
    pub(crate) fn restore(&self, epoch: u64, key: String, value: V, ttl: Duration) {
        if self.slots.len() >= self.capacity || self.slots.contains_key(&key) {
            return;
        }
        let fresh_until = Instant::now() + ttl;
        let entry = Entry {
            value,
            epoch,
            fresh_until,
            usable_until: fresh_until + self.stale_if_error,
        };
        self.slots.insert(
            key,
            Arc::new(Slot {
                entry: RwLock::new(Some(entry)),
                asking: tokio::sync::Mutex::new(()),
            }),
        );
    }

    /// Questions remembered (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

fn fresh<V: Clone>(slot: &Slot<V>, now: Instant, epoch: u64) -> Option<V> {
    slot.entry
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .filter(|e| e.fresh_until > now && e.epoch == epoch)
        .map(|e| e.value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn concurrent_askers_share_one_upstream_call() {
        let memo: Arc<Memo<u32>> = Arc::new(Memo::new(100, Duration::ZERO));
        let calls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let (memo, calls) = (memo.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                memo.get(
                    "q",
                    |_| Duration::from_secs(60),
                    || async {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok::<_, ()>(7)
                    },
                )
                .await
                .unwrap()
                .0
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 7);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn ttl_by_answer_and_stale_if_error() {
        let memo: Memo<bool> = Memo::new(100, Duration::from_secs(60));
        let ttl = |allowed: &bool| {
            if *allowed {
                Duration::from_secs(60)
            } else {
                Duration::ZERO
            }
        };
        // A refusal is not remembered (TTL 0): the next ask goes upstream.
        let (v, s) = memo
            .get("no", ttl, || async { Ok::<_, ()>(false) })
            .await
            .unwrap();
        assert_eq!((v, s), (false, Source::Upstream));
        let (v, s) = memo
            .get("no", ttl, || async { Ok::<_, ()>(true) })
            .await
            .unwrap();
        assert_eq!((v, s), (true, Source::Upstream));
        let (_, s) = memo.get("no", ttl, || async { Err(()) }).await.unwrap();
        assert_eq!(s, Source::Cached);
        // Expired but within stale-if-error: used when the upstream fails.
        let memo: Memo<bool> = Memo::new(100, Duration::from_secs(60));
        memo.get("k", |_| Duration::ZERO, || async { Ok::<_, ()>(true) })
            .await
            .unwrap();
        let (v, s) = memo
            .get("k", |_| Duration::ZERO, || async { Err(()) })
            .await
            .unwrap();
        assert_eq!((v, s), (true, Source::Stale));
        // Never seen: the error stands.
        assert!(memo
            .get("new", |_| Duration::ZERO, || async { Err::<bool, _>(()) })
            .await
            .is_err());
    }

    #[tokio::test]
    async fn a_new_epoch_makes_every_answer_stale_but_usable_while_the_upstream_is_down() {
        let memo: Memo<u8> = Memo::new(100, Duration::from_secs(60));
        let hour = |_: &u8| Duration::from_secs(3600);
        let ask = |v| move || async move { Ok::<_, ()>(v) };
        assert_eq!(
            memo.get_in(1, "k", hour, ask(1)).await,
            Ok((1, Source::Upstream))
        );
        assert_eq!(
            memo.get_in(1, "k", hour, ask(2)).await,
            Ok((1, Source::Cached))
        );
        // The next epoch asks again, and keeps the new answer.
        assert_eq!(
            memo.get_in(2, "k", hour, ask(2)).await,
            Ok((2, Source::Upstream))
        );
        assert_eq!(
            memo.get_in(2, "k", hour, ask(3)).await,
            Ok((2, Source::Cached))
        );
        // An answer of an earlier epoch is the last there is while the upstream is down.
        let down = || async { Err::<u8, ()>(()) };
        assert_eq!(
            memo.get_in(3, "k", hour, down).await,
            Ok((2, Source::Stale))
        );
    }

    #[tokio::test]
    async fn memory_is_bounded() {
        let memo: Memo<u8> = Memo::new(10, Duration::ZERO);
        for i in 0..100 {
            memo.get(
                &i.to_string(),
                |_| Duration::from_secs(60),
                || async { Ok::<_, ()>(1) },
            )
            .await
            .unwrap();
        }
        assert!(memo.len() <= 10);
    }
}
