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
//!
//! # Public API
//!
//! What the `kcache` binary (`src/` of the root package) uses, and, beside it, what the
//! integration tests in `tests/` read of a running kcache and the fuzz targets in `fuzz/`
//! parse with. The bench, the sim and the audit crate do not link the library (the bench runs
//! the binary). Everything else is `pub(crate)`.
//!
//! - [`config`]: [`Config`](config::Config), read from the YAML file or text, with its
//!   settings. The binary; the tests build theirs.
//! - [`server`]: [`start`](server::start) and [`bind_admin`](server::bind_admin), and the
//!   [`Running`](server::Running) kcache they give: its URLs, a wait for its caches to sync,
//!   shutdown, and each cache's read-only view for tests. The binary (`serve`, `demo`).
//! - [`upstream`]: the kube-apiserver client, [`Upstream`](upstream::Upstream), from a
//!   kubeconfig or a URL. The binary; the tests and the demo point it at the sim.
//! - [`auth`]: the [`AuthMode`](auth::AuthMode) flag and
//!   [`check_listen`](auth::check_listen), which refuses to serve unauthenticated beyond
//!   loopback. The binary.
//! - [`error`]: an error with its causes, for messages. The binary.
//! - [`api`]: the admin listener's status report and its text form
//!   ([`api::admin::status`], for `kcache status`), the headers kcache adds to its answers,
//!   and the request parsers of the fuzz targets and the property tests
//!   (`api::fuzzing`, hidden).
//! - [`cache`]: the [`ResourceCache`](cache::ResourceCache) of one type: what a reader sees
//!   (size, sync, verdict, snapshot; no mutator), and a cache built empty for the fuzz
//!   targets.
//! - [`registry`]: the [`Registry`](registry::Registry) of the types a running kcache knows,
//!   through which the tests reach every type's cache.
//! - [`metrics`]: what `/metrics` counts, read by the tests; [`persist`]: the warm-restart
//!   store, opened by the tests of restarts; [`tls`]: the serving certificate and client
//!   identities; [`limits`]: the request limits' settings.
//! - [`index`], [`object`], [`resource`], [`status`]: the types the items above name (an
//!   index's settings, how objects are stripped, a resource's identity, the apiserver's
//!   errors).
//! - [`selector`], [`table`]: the crates of label and field selectors and of Tables, as kcache
//!   uses them.
#![forbid(unsafe_code)]
// What no path from the crate's root reaches is `pub(crate)`, not `pub`: the public surface is
// the list above, and nothing else reads as if it were.
#![deny(unreachable_pub)]
// A code name in the docs that no longer exists fails `cargo doc`, not only CI's
// `-D warnings` run.
#![deny(rustdoc::broken_intra_doc_links)]

// Public: the modules of the list in the crate's docs; in each, only what those users name (and
// the types that it names) is `pub`. The other modules are the library's own.
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
mod printers;
pub mod registry;
pub mod resource;
pub mod server;
mod shared_call;
pub mod status;
pub mod tls;
pub mod upstream;
