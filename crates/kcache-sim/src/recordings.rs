//! The recordings of real kube-apiservers that the sim is held to, one folder per upstream
//! version profile, kept in the repository (`tests/fixtures/kube-apiserver-v1.28/` and
//! `.../kube-apiserver-v1.34/`, each listed in its `INDEX.md`; the v1.34 folder's
//! `DIFF-1.28.md` lists the differences) so a fresh clone tests against them with nothing
//! beside it. Every test reads them through here: a missing recording fails the test that
//! needs it, it never skips a check. The functions without a profile read the v1.28 set.

use crate::Profile;
use std::path::PathBuf;

/// The folder of the v1.28 recordings.
pub fn dir() -> PathBuf {
    dir_of(Profile::V1_28)
}

/// The folder of a profile's recordings: the workspace's `tests/fixtures/<fixtures_dir>`, two
/// levels above this crate, where the integration tests that use them live too.
pub fn dir_of(profile: Profile) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(profile.fixtures_dir())
}

/// One recorded file of v1.28 (a body, or an `.http` sidecar), as bytes; panics when it is
/// missing.
pub fn read(name: &str) -> Vec<u8> {
    read_in(Profile::V1_28, name)
}

/// One recorded file of v1.28 as text; panics when it is missing or not UTF-8.
pub fn read_string(name: &str) -> String {
    read_string_in(Profile::V1_28, name)
}

/// One recorded file of `profile`, as bytes; panics when it is missing.
pub fn read_in(profile: Profile, name: &str) -> Vec<u8> {
    let path = dir_of(profile).join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("recording {}: {e}", path.display()))
}

/// One recorded file of `profile` as text; panics when it is missing or not UTF-8.
pub fn read_string_in(profile: Profile, name: &str) -> String {
    String::from_utf8(read_in(profile, name))
        .unwrap_or_else(|e| panic!("recording {} {name}: {e}", profile.name()))
}
