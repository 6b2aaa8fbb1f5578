//! One type's memory budget (`resources[].memoryBudget`) and whether it went over it.
//!
//! The budget is checked where the bytes are already counted (the cache's JSON byte total, O(1)
//! per event): a list or event that would take the cached objects over it is not installed;
//! instead the cache is emptied and marked over budget, for good. From then on kcache passes
//! every read of the type through to the upstream (see `api`), its reflector and protobuf
//! mirror stop, and its open watches end cleanly, so that their clients resume from their last
//! resourceVersion against the upstream. Only a restart caches the type again.
//!
//! Readers need no lock for the mark: the cache sets it before it empties its state, under its
//! write lock, so a reader that reads the state first and checks the mark after never takes an
//! emptied state for the collection (it sees the mark, and passes the read on).

use std::sync::OnceLock;

use tokio::sync::watch;

/// What a cache held when it went over its memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overage {
    /// The cached objects' JSON bytes the list or event would have made.
    pub bytes: usize,
    /// The budget, in bytes.
    pub budget: usize,
}

/// The budget of one cache and, once it went over, by how much.
#[derive(Debug)]
pub struct Budget {
    limit: Option<usize>,
    over: OnceLock<Overage>,
    /// Announces the mark to tasks that wait for it (the protobuf mirror's loop).
    over_tx: watch::Sender<bool>,
}

impl Budget {
    /// A budget of `limit` JSON bytes (None: no budget).
    pub(crate) fn new(limit: Option<usize>) -> Budget {
        Budget {
            limit,
            over: OnceLock::new(),
            over_tx: watch::channel(false).0,
        }
    }

    /// The budget in bytes, if one is configured.
    pub(crate) fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// Whether objects of `bytes` JSON bytes in all would be over the budget.
    pub(crate) fn exceeds(&self, bytes: usize) -> bool {
        self.limit.is_some_and(|limit| bytes > limit)
    }

    /// Whether the type went over its budget: nothing of it is cached any more and nothing
    /// will be until kcache restarts. Readers check it after they read the cache (see the
    /// module docs): a state read while this was false is a real state of the type.
    pub fn is_over(&self) -> bool {
        self.over.get().is_some()
    }

    /// What the cache would have held when it went over its budget, if it did.
    pub(crate) fn overage(&self) -> Option<Overage> {
        self.over.get().copied()
    }

    /// Resolves once the type has gone over its budget (never, if it does not).
    pub(crate) async fn until_over(&self) {
        let mut rx = self.over_tx.subscribe();
        let _ = rx.wait_for(|over| *over).await;
    }

    /// Set the mark (the first time only): the cached objects would have taken `bytes`.
    pub(super) fn mark_over(&self, bytes: usize) {
        let _ = self.over.set(Overage {
            bytes,
            budget: self.limit.unwrap_or(0),
        });
    }

    /// Wake the tasks waiting in [`Budget::until_over`].
    pub(super) fn announce(&self) {
        self.over_tx.send_replace(true);
    }
}
