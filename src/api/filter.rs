//! What a list or watch request selects: a namespace and label/field selectors.

use crate::object::Object;
use crate::selector::{FieldSelector, LabelSelector};

/// The objects a request asks for.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub label: LabelSelector,
    pub field: FieldSelector,
}

impl Filter {
    /// Whether every object in the requested namespace matches (no per-object checks needed).
    pub fn selects_all(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }

    /// Whether the selectors match (the namespace is checked separately by key range or
    /// [`Filter::matches`]).
    pub fn selects(&self, o: &Object) -> bool {
        (self.label.is_empty() || self.label.matches(&o.labels))
            && (self.field.is_empty() || self.field.matches(&|f| o.field(f)))
    }

    /// Namespace and selectors.
    pub fn matches(&self, o: &Object) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| o.namespace() == ns)
            && self.selects(o)
    }
}
