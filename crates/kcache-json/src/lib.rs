//! JSON the way kcache needs it, apart from anything of kcache's own:
//!
//! - [`gojson`]: values written as kube-apiserver (Go's `encoding/json`) writes them: its
//!   escaping of `<`, `>` and `&`, its numbers, map keys sorted where Go sorts them;
//! - [`json_view`]: objects read in place, their members as positions in the bytes rather
//!   than built values, so that a cache can keep them beside the object's bytes.
#![forbid(unsafe_code)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod gojson;
pub mod json_view;
