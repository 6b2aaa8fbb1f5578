//! The request parsers of this module, for the fuzz targets in `fuzz/` and the property tests
//! in `tests/`. Re-exports only: nothing here is used by kcache itself, and it is not a stable
//! interface.

pub use super::filter::IndexRequirement;
pub use super::list_rule::ListRule;
pub use super::params::{parse_query, parse_rv, GetOptions, ListOptions, WatchTimeout};
pub use super::request::{Listing, Options, Parsed, ReadRequest, Verb};
pub use super::route::{parse as parse_path, ResourcePath};
pub use crate::continue_token::{ContinueToken, InvalidToken};
