//! Label and field selectors as kube-apiserver v1.28 parses, validates and applies them.
//!
//! Clients compare error bodies, so every error text here is the apiserver's, byte for byte:
//! the label grammar and messages follow apimachinery `pkg/labels/selector.go` (plus the
//! `util/validation` and `field.Error` formatting it uses), the field grammar follows
//! `pkg/fields/selector.go`, and the per-resource field support follows the field-label
//! conversion functions registered in `pkg/apis/*/v1/conversion.go` (or the apiserver's
//! default conversion, or the CRD converter for custom resources).
//!
//! Typical use for a LIST/WATCH request:
//! 1. [`LabelSelector::parse`] and [`FieldSelector::parse`] the query parameters (a 400 with
//!    the error message on failure);
//! 2. [`convert_fields`] (or [`validate_fields`]) the field selector against the resource
//!    (again a 400 on failure);
//! 3. per object, [`LabelSelector::matches`] its labels and [`FieldSelector::matches_fields`]
//!    the output of [`extract_fields`].
//!
//! One file per concern:
//! - `label`: label selector types, canonical form and matching;
//! - `label_parser`: the label grammar and its apiserver error messages;
//! - `validation`: label key/value validation messages (`util/validation`);
//! - `go_format`: Go's `%q`/`%#v` as embedded in those messages;
//! - `field`: field selector types, parsing, escaping and matching;
//! - `field_support`: which fields each resource type accepts in v1.28;
//! - `object_fields`: an object's selectable field values.
//!
//! Everything public is re-exported here, so callers use the crate's root paths only.
#![forbid(unsafe_code)]
#![deny(rustdoc::broken_intra_doc_links)]

mod field;
mod field_support;
mod go_format;
mod label;
mod label_parser;
mod object_fields;
#[cfg(test)]
mod tests;
mod validation;

pub use field::{
    escape_field_value, unescape_field_value, FieldOp, FieldRequirement, FieldSelector,
};
pub use field_support::{
    convert_fields, field_spec, known_field, validate_fields, FieldSpec, UnsupportedField,
};
pub use go_format::go_quote;
pub use label::{LabelOp, LabelRequirement, LabelSelector};
pub use object_fields::{extract_fields, field_name, field_name_index, object_fields};

/// A selector that the apiserver would reject; `message` is the text of its 400 BadRequest
/// Status, verbatim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    /// The Status `message`, exactly as kube-apiserver v1.28 words it.
    pub message: String,
}

impl SelectorError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
