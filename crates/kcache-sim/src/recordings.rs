//! The recordings of a real kube-apiserver v1.28.7 that the sim is held to, kept in the
//! repository (`tests/fixtures/kube-apiserver-v1.28/`, listed in its `INDEX.md`) so a fresh
//! clone tests against them with nothing beside it. Every test reads them through here: a
//! missing recording fails the test that needs it, it never skips a check.

use std::path::PathBuf;

/// The folder of the recordings: the workspace's `tests/fixtures/`, two levels above this
/// crate, where the integration tests that use them live too.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/kube-apiserver-v1.28")
}

/// One recorded file (a body, or an `.http` sidecar), as bytes; panics when it is missing.
pub fn read(name: &str) -> Vec<u8> {
    let path = dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("recording {}: {e}", path.display()))
}

/// One recorded file as text; panics when it is missing or not UTF-8.
pub fn read_string(name: &str) -> String {
    String::from_utf8(read(name)).unwrap_or_else(|e| panic!("recording {name}: {e}"))
}
