//! What a list or watch request selects: a namespace and label/field selectors.

use std::ops::Bound;

use crate::cache::KeyRange;
use crate::object::Object;
use crate::selector::{FieldOp, FieldSelector, LabelSelector};

/// The objects a request asks for.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub label: LabelSelector,
    pub field: FieldSelector,
    /// Field-selector terms on configured field-path indexes (a kcache extension the
    /// apiserver would reject), taken out of `field`.
    pub indexed: Vec<IndexRequirement>,
}

/// `path=value` / `path!=value` on a configured field-path index: `=` holds when any of the
/// object's values equals, `!=` when none does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRequirement {
    /// Position in the resource's [`crate::index::IndexSet`].
    pub index: usize,
    /// Where the object keeps this index's values.
    pub slot: u16,
    pub op: FieldOp,
    pub value: String,
}

impl IndexRequirement {
    fn matches(&self, o: &Object) -> bool {
        let any = o.index_values(self.slot).any(|v| v == self.value);
        any == (self.op == FieldOp::Equals)
    }
}

impl Filter {
    /// Whether every object in the requested namespace matches (no per-object checks needed).
    pub(crate) fn selects_all(&self) -> bool {
        self.label.is_empty() && self.field.is_empty() && self.indexed.is_empty()
    }

    /// The range of keys the request's namespace holds (`ns/…`), or every key, from `start`
    /// on: a cache orders its objects by key, so a namespace's are one range of its map.
    pub(crate) fn keys(&self, start: Option<&str>) -> KeyRange {
        match &self.namespace {
            Some(ns) => {
                let lower = format!("{ns}/{}", start.unwrap_or(""));
                // '0' is the byte after '/': the end of the namespace's keys.
                (
                    Bound::Included(lower.into()),
                    Bound::Excluded(format!("{ns}0").into()),
                )
            }
            None => match start {
                Some(s) => (Bound::Included(s.into()), Bound::Unbounded),
                None => (Bound::Unbounded, Bound::Unbounded),
            },
        }
    }

    /// Whether the selectors match (the namespace is checked separately, by key range).
    pub(crate) fn selects(&self, o: &Object) -> bool {
        (self.label.is_empty() || self.label.matches_with(&|k| o.label(k)))
            && (self.field.is_empty() || self.field.matches(&|f| o.field(f)))
            && self.indexed.iter().all(|r| r.matches(o))
    }
}
