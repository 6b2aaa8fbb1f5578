//! kcache: a caching proxy for the Kubernetes API.
//!
//! One reflector per configured resource ([`upstream`]) keeps an in-memory cache ([`cache`])
//! equal to the upstream kube-apiserver; the HTTP layer ([`api`]) serves LIST, GET and WATCH
//! from it exactly as kube-apiserver would and passes everything else through.
//!
//! Comments cite the rules of the Kubernetes API that the code relies on by ID (L2, W6b, E10,
//! …): they are defined in the repository's `docs/semantics.md`, each with the recording of a
//! real kube-apiserver that shows it (`tests/fixtures/kube-apiserver-v1.28/`). The crates and
//! the path of one event and one request through them are in `docs/ARCHITECTURE.md`.
#![forbid(unsafe_code)]
// What no path from the crate's root reaches is `pub(crate)`, not `pub`: the public surface is
// what the binary, the bench and the tests use, and nothing else reads as if it were.
#![deny(unreachable_pub)]
// A code name in the docs that no longer exists fails `cargo doc`, not only CI's
// `-D warnings` run.
#![deny(rustdoc::broken_intra_doc_links)]

// Public: what the `kcache` binary, the integration tests in `tests/` and the fuzz targets in
// `fuzz/` use. The other modules are the library's own.
pub mod api;
pub mod auth;
// Of crates of their own (no part of kcache in them), used here as kcache's modules.
use kcache_json::{gojson, json_view};
use kcache_protobuf as protobuf;
pub use kcache_selector as selector;
pub use kcache_table as table;
mod auto;
mod background;
pub mod cache;
mod chunk_pool;
mod coalesce;
pub mod config;
mod conn_task;
mod continue_token;
mod demand;
pub mod error;
mod follow;
pub mod index;
mod latency;
pub mod limits;
pub mod metrics;
pub mod object;
pub mod persist;
pub mod resource;
pub mod server;
mod shared_call;
pub mod status;
pub mod tls;
pub mod upstream;
