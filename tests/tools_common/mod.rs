//! Test support: the external programs some tests run (promtool, prometheus, a browser), found
//! on the machine or skipped.
//!
//! [`tool`] is the one rule every such test follows, so that `cargo test` on a fresh clone
//! passes without them while CI, which installs them, cannot pass by skipping:
//!
//! - the program is looked up by name in the directories of `KCACHE_TEST_TOOLS_PATH` if that
//!   variable is set (a `PATH`-like list; empty finds nothing: how to try the skip path on a
//!   machine that has the tools), else of `PATH`;
//! - found: its path;
//! - not found: a `skipped: NAME not found (apt-get install PACKAGE)` line on standard error
//!   and `None`, and the test returns at once;
//! - not found while `KCACHE_TEST_TOOLS=required` is set (as `.ci/run` does): the test fails.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// The directories searched instead of `PATH` when set.
pub const TOOLS_PATH_VAR: &str = "KCACHE_TEST_TOOLS_PATH";
/// `required`: a missing tool fails the test instead of skipping it.
pub const REQUIRE_VAR: &str = "KCACHE_TEST_TOOLS";

/// The Debian package that installs `name`, for the skip message.
fn package_of(name: &str) -> &str {
    match name {
        "promtool" | "prometheus" => "prometheus",
        other => other,
    }
}

/// The path of the program `name`, or `None` after printing why the calling test is skipped.
///
/// # Panics
///
/// If the program is not found and `KCACHE_TEST_TOOLS=required`.
pub fn tool(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os(TOOLS_PATH_VAR)
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    let found = std::env::split_paths(&dirs)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| is_executable(p));
    if found.is_none() {
        let why = format!("{name} not found (apt-get install {})", package_of(name));
        if std::env::var(REQUIRE_VAR).is_ok_and(|v| v == "required") {
            panic!("{why}, and {REQUIRE_VAR}=required");
        }
        // Past the test harness' capture (which takes only the print macros' output), so
        // that the skip shows in a plain `cargo test` run, where the test passes.
        let _ = writeln!(std::io::stderr(), "skipped: {why}");
    }
    found
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
