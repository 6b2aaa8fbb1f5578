//! How many objects a state holds from a key on: what a paginated list's next page needs for
//! its `remainingItemCount`, handed on from the page before it.
//!
//! A page of a list without selectors tells the client how many objects follow it (L3). The
//! cache's map has no ranks, so that count is a walk over every key after the page: a walk of
//! the whole type, less what was read, for each page. `kubectl get pods -A` at 150,000 Pods is
//! 300 pages of 500, and those walks were a fifth of kcache's CPU while 20 people ran it at
//! once (BENCHMARKS.md, "The users' floor, a page's count, and users in a running cluster").
//! A page that has counted what follows it leaves the count here under the range its next
//! page will read; that page reads it, subtracts what it selected, and leaves its own. Only
//! the first page of a read walks, and readers of the same state by the same page size share
//! the counts.
//!
//! A state at a resourceVersion is the upstream's state at that revision, so a count made of
//! one snapshot holds for any snapshot of the same RV, for as long as the cache lives. Once
//! [`KEPT`] counts are held all are forgotten at once: the pages after that walk again, as
//! without this, and leave new counts.

use std::collections::HashMap;
use std::sync::Mutex;

use super::KeyRange;

/// At most this many counts are held (about 100 bytes each): three reads of 150,000 objects
/// by pages of 500, or many more of smaller types.
const KEPT: usize = 1024;

/// The state's RV and a range of its keys.
type RangeKey = (u64, KeyRange);

/// Counts of objects in key ranges of states, left by the pages before them.
#[derive(Debug, Default)]
pub(crate) struct RangeCounts(Mutex<HashMap<RangeKey, usize>>);

impl RangeCounts {
    /// How many objects the state at `rv` holds in `range`, if a page counted them.
    pub(crate) fn get(&self, rv: u64, range: &KeyRange) -> Option<usize> {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&(rv, range.clone())).copied()
    }

    /// The state at `rv` holds `count` objects in `range`.
    pub(crate) fn keep(&self, rv: u64, range: KeyRange, count: usize) {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if counts.len() >= KEPT {
            counts.clear();
        }
        counts.insert((rv, range), count);
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use super::*;

    fn range(from: &str) -> KeyRange {
        (Bound::Included(from.into()), Bound::Unbounded)
    }

    #[test]
    fn a_count_is_of_its_state_and_range() {
        let counts = RangeCounts::default();
        counts.keep(7, range("a\0"), 10);
        assert_eq!(counts.get(8, &range("a\0")), None, "another state");
        assert_eq!(counts.get(7, &range("b\0")), None, "another range");
        assert_eq!(counts.get(7, &range("a\0")), Some(10));
        assert_eq!(
            counts.get(7, &range("a\0")),
            Some(10),
            "read by every reader"
        );
    }

    #[test]
    fn counts_of_abandoned_reads_do_not_pile_up() {
        let counts = RangeCounts::default();
        for i in 0..KEPT + 1 {
            counts.keep(i as u64, range("a\0"), i);
        }
        assert!(counts.0.lock().unwrap().len() <= KEPT);
        assert_eq!(counts.get(KEPT as u64, &range("a\0")), Some(KEPT));
    }
}
