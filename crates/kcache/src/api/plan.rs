//! Query planning for lists: which index posting sets can stand in for a scan.
//!
//! Every equality requirement on an indexed field or label (field `=`/`==`, label `=`/`==`/`in`)
//! narrows the candidates to the keys of its value(s). The plan takes the requirement with the
//! fewest candidates (set sizes are O(1) to read); the candidates are then visited in key order
//! and every other requirement is checked by the full filter, which makes the result identical
//! to a scan.

use std::iter::Peekable;

use super::filter::Filter;
use crate::cache::{KeyRange, Postings};
use crate::index::{IndexSet, KeySet};
use crate::object::Key;
use crate::selector::{FieldOp, LabelOp};

/// The keys an indexed list visits: the union of a few posting sets.
#[derive(Default)]
pub(super) struct Candidates<'a> {
    sets: Vec<&'a KeySet<Key>>,
}

impl<'a> Candidates<'a> {
    /// How many keys (an upper bound when the sets overlap).
    pub(super) fn len(&self) -> usize {
        self.sets.iter().map(|s| s.len()).sum()
    }

    /// The candidate keys within `range`, in key order, each once.
    pub(super) fn keys(&self, range: KeyRange) -> impl Iterator<Item = &'a Key> + 'a {
        let iters: Vec<Peekable<Box<dyn Iterator<Item = &'a Key> + 'a>>> = self
            .sets
            .iter()
            .map(|s| s.range(range.clone()).peekable())
            .collect();
        Union { iters }
    }
}

/// A k-way merge of ordered key iterators (k is the number of values of one `in`: small).
struct Union<'a> {
    iters: Vec<Peekable<Box<dyn Iterator<Item = &'a Key> + 'a>>>,
}

impl<'a> Iterator for Union<'a> {
    type Item = &'a Key;

    fn next(&mut self) -> Option<&'a Key> {
        let min = self
            .iters
            .iter_mut()
            .filter_map(|i| i.peek().copied())
            .min()?;
        for it in &mut self.iters {
            if it.peek().is_some_and(|k| *k == min) {
                it.next();
            }
        }
        Some(min)
    }
}

/// The keys with any of `values` for index `index`.
pub(super) fn candidates<'a>(
    postings: &'a Postings,
    index: usize,
    values: &[&str],
) -> Candidates<'a> {
    Candidates {
        sets: values
            .iter()
            .filter_map(|v| postings.get(index, v))
            .collect(),
    }
}

/// The most selective index lookup for `filter`, or None when no requirement is indexed.
pub(super) fn plan<'a>(
    filter: &Filter,
    indexes: &IndexSet,
    postings: &'a Postings,
) -> Option<Candidates<'a>> {
    let lookup = |i: usize, values: &mut dyn Iterator<Item = &str>| Candidates {
        sets: values.filter_map(|v| postings.get(i, v)).collect(),
    };
    let mut best: Option<Candidates<'a>> = None;
    let mut consider = |c: Candidates<'a>| {
        if best.as_ref().is_none_or(|b| c.len() < b.len()) {
            best = Some(c);
        }
    };
    for r in filter.field.requirements() {
        if r.op != FieldOp::Equals {
            continue;
        }
        if let Some(i) = indexes.by_field(&r.field) {
            consider(lookup(i, &mut std::iter::once(r.value.as_str())));
        }
    }
    for r in filter.label.requirements() {
        if !matches!(r.op, LabelOp::Equals | LabelOp::In) {
            continue;
        }
        if let Some(i) = indexes.by_label(&r.key) {
            consider(lookup(i, &mut r.values.iter().map(String::as_str)));
        }
    }
    for r in &filter.indexed {
        if r.op == FieldOp::Equals {
            consider(lookup(r.index, &mut std::iter::once(r.value.as_str())));
        }
    }
    best
}
