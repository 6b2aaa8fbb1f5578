//! kcache: a caching proxy for the Kubernetes API.
//!
//! One reflector per configured resource ([`upstream`]) keeps an in-memory cache ([`cache`])
//! equal to the upstream kube-apiserver; the HTTP layer ([`api`]) serves LIST, GET and WATCH
//! from it exactly as kube-apiserver would and passes everything else through.
#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod cache;
pub mod config;
pub mod error;
pub mod gojson;
pub mod index;
pub mod latency;
pub mod limits;
pub mod metrics;
pub mod object;
pub mod resource;
pub mod selector;
pub mod server;
pub mod status;
pub mod table;
pub mod tls;
pub mod upstream;
