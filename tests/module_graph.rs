//! The modules of each library crate (kcache and the leaf crates it is built on) depend on
//! each other one way: no top-level module uses one that (directly or through others) uses it
//! back, and no two submodules of one parent do either. A circle means neither side can be read, tested or changed without the other.
//!
//! The graph is read from the sources as text: every `crate::…` and `super::…` path (in `use`
//! lines and in code, `{…}` groups included; comments left out) is resolved to the module it
//! names. A path from module `a::x` to `a::y::z` is an arrow `a::x -> a::y` between the two
//! siblings under `a`; a path to an item of an ancestor (`super::Thing`) is no arrow. What a
//! parent re-exports (`pub use`) counts as the parent's, not as the submodule it comes from.
//!
//! Test code (`#[cfg(test)]` modules, inline or in files of their own) is left out: a unit test
//! may check its module's output with a module above it (the cache's event line, say) without
//! the library depending on that module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module, as the path of its segments below the crate root (`["upstream", "cost"]`).
type Module = Vec<String>;

/// Where an arrow was seen: the file and line of one path that makes it.
type Evidence = String;

/// The arrows between sibling modules, each with the first place that makes it.
type Graph = BTreeMap<Module, BTreeMap<Module, Evidence>>;

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/kcache/src");

/// Each library crate of the workspace, with arrows it is known to have (the reading finds
/// the arrows there are: without them this test would pass on anything).
const CRATES: [(&str, &[(&str, &str)]); 5] = [
    ("crates/kcache/src", &[("upstream", "metrics")]),
    ("crates/kcache-selector/src", &[("label_parser", "label")]),
    ("crates/kcache-json/src", &[]),
    ("crates/kcache-table/src", &[("project", "cells")]),
    ("crates/kcache-protobuf/src", &[("status", "wire")]),
];

#[test]
fn modules_of_the_library_depend_on_each_other_one_way() {
    for (src, known) in CRATES {
        let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join(src));
        for (from, to) in known {
            assert!(
                graph
                    .get(&module(from))
                    .is_some_and(|to_| to_.contains_key(&module(to))),
                "{src}: the arrow {from} -> {to} is not found: the reading of the sources is broken"
            );
        }
        let cycles = cycles(&graph);
        assert!(
            cycles.is_empty(),
            "{src}: modules that import each other (each arrow with a place that makes it):\n{}",
            cycles.join("\n")
        );
    }
}

/// `cargo test` in the root (the README's test command) runs every crate's own tests: each
/// workspace member, once, is a default member too.
#[test]
fn the_test_command_runs_every_crate() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("the workspace's manifest");
    let list = |key: &str| -> Vec<String> {
        manifest
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key}"))
            .trim_end_matches(']')
            .split(',')
            .map(|m| m.trim().trim_matches('"').to_string())
            .filter(|m| !m.is_empty())
            .collect()
    };
    let members = list("members = [");
    let defaults: BTreeSet<String> = list("default-members = [").into_iter().collect();
    let unique: BTreeSet<&String> = members.iter().collect();
    assert_eq!(
        unique.len(),
        members.len(),
        "a member named twice: {members:?}"
    );
    for m in &members {
        assert!(
            defaults.contains(m),
            "{m}: not a default member, so `cargo test` skips it"
        );
    }
    for (src, _) in CRATES {
        let krate = src.trim_end_matches("/src");
        assert!(members.iter().any(|m| m == krate), "{krate}: not a member");
    }
}

/// What a request starts and leaves running is tracked (`App::tasks`), so that shutdown waits
/// for it: the HTTP layer (`api`) spawns no task of its own, but for the protobuf mirrors'
/// reflectors, which are kept by their handles and end with their type.
#[test]
fn the_http_layer_leaves_no_untracked_task() {
    let mut files = Vec::new();
    collect_files(&Path::new(SRC).join("api"), &mut files);
    assert!(files.len() > 10, "the api module's files are not found");
    let mut found = Vec::new();
    for file in files {
        let code = without_tests(&std::fs::read_to_string(&file).unwrap());
        for (i, line) in code.lines().enumerate() {
            let line = line.trim();
            if line.starts_with("//") || !line.contains("tokio::spawn(") {
                continue;
            }
            if file.ends_with("api/protobuf.rs") && line.contains(".abort_handle()") {
                continue;
            }
            found.push(format!("{}:{}: {line}", file.display(), i + 1));
        }
    }
    assert!(
        found.is_empty(),
        "tasks spawned outside App::tasks:\n{}",
        found.join("\n")
    );
}

#[test]
fn paths_are_read_through_groups_and_relative_to_the_file() {
    let code = "use super::{go_format::go_quote, SelectorError};\n\
                // use crate::metrics::Metrics;\n\
                let x = crate::upstream::{cost::{self, Purpose}, probe};\n\
                use super::super::api::watch;";
    let found: Vec<Module> = paths(code).into_iter().map(|(_, p)| p).collect();
    let selector_label = module("selector::label");
    let resolved: Vec<Module> = found.iter().map(|p| resolve(&selector_label, p)).collect();
    assert_eq!(
        resolved,
        [
            module("selector::go_format::go_quote"),
            module("selector::SelectorError"),
            module("upstream::cost"),
            module("upstream::cost::Purpose"),
            module("upstream::probe"),
            module("api::watch"),
        ]
    );
}

fn module(path: &str) -> Module {
    path.split("::").map(str::to_string).collect()
}

/// Every module of the crate below `src`, and the arrows between siblings.
fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    collect_files(src, &mut files);
    let sources: BTreeMap<Module, (String, String)> = files
        .iter()
        .map(|f| {
            let place = f.strip_prefix(src).unwrap().to_string_lossy().into_owned();
            (
                module_of(src, f),
                (place, std::fs::read_to_string(f).unwrap()),
            )
        })
        .collect();
    let test_only: Vec<Module> = sources
        .iter()
        .flat_map(|(parent, (_, code))| {
            test_modules(code).into_iter().map(|name| {
                let mut child = parent.clone();
                child.push(name);
                child
            })
        })
        .collect();
    let sources: BTreeMap<Module, (String, String)> = sources
        .into_iter()
        .filter(|(m, _)| !test_only.iter().any(|t| m.starts_with(t)))
        .collect();
    let modules: BTreeSet<Module> = sources.keys().cloned().collect();
    let mut graph = Graph::new();
    for (from, (file, code)) in &sources {
        for (line, path) in paths(&without_tests(code)) {
            let to = resolve(from, &path);
            let Some((a, b)) = sibling_arrow(from, &to, &modules) else {
                continue;
            };
            let place = format!("{file}:{line}");
            graph.entry(a).or_default().entry(b).or_insert(place);
        }
    }
    graph
}

fn collect_files(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The names of the modules `code` declares for tests only, in files of their own
/// (`#[cfg(test)] mod tests;`).
fn test_modules(code: &str) -> Vec<String> {
    let lines: Vec<&str> = code.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|w| w[0] == "#[cfg(test)]")
        .filter_map(|w| w[1].strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// `code` with its inline test modules (`#[cfg(test)] mod tests { … }`) blanked, lines kept.
/// rustfmt closes a module at the crate's top level with a `}` alone at column 0.
fn without_tests(code: &str) -> String {
    let mut kept = Vec::new();
    let mut in_tests = false;
    let mut after_cfg_test = false;
    for line in code.lines() {
        if after_cfg_test && line.starts_with("mod ") && line.ends_with('{') {
            in_tests = true;
        }
        after_cfg_test = line == "#[cfg(test)]";
        kept.push(if in_tests { "" } else { line });
        if in_tests && line == "}" {
            in_tests = false;
        }
    }
    kept.join("\n")
}

/// `upstream/cost.rs` is `upstream::cost`, `upstream/mod.rs` is `upstream`, `lib.rs` the root.
fn module_of(src: &Path, file: &Path) -> Module {
    let mut segments: Module = file
        .strip_prefix(src)
        .unwrap()
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(segments.last().map(String::as_str), Some("mod" | "lib")) {
        segments.pop();
    }
    segments
}

/// The arrow a path from `from` to `to` makes: between the two modules where their paths part,
/// when both are modules (a file or directory of the crate).
fn sibling_arrow(
    from: &Module,
    to: &Module,
    modules: &BTreeSet<Module>,
) -> Option<(Module, Module)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common >= from.len() || common >= to.len() {
        // Into itself or one of its submodules, or to an item of an ancestor.
        return None;
    }
    let a = from[..=common].to_vec();
    let b = to[..=common].to_vec();
    modules.contains(&b).then_some((a, b))
}

/// A path as written (`super`, `crate` and `self` included) made absolute from `from`.
fn resolve(from: &Module, path: &Module) -> Module {
    let mut absolute = Vec::new();
    for (i, segment) in path.iter().enumerate() {
        match segment.as_str() {
            "crate" if i == 0 => absolute.clear(),
            "super" if i == 0 => absolute = from[..from.len().saturating_sub(1)].to_vec(),
            "super" => {
                absolute.pop();
            }
            "self" => {}
            _ => absolute.push(segment.clone()),
        }
    }
    absolute
}

/// Every `crate::…` and `super::…` path in `code`, with its line, comments left out. A group
/// (`a::{b, c::d}`, over several lines or not) gives one path per member.
fn paths(code: &str) -> Vec<(usize, Module)> {
    let code: Vec<&str> = code
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect();
    let code = code.join("\n");
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let starts = code[at..].starts_with("crate::") || code[at..].starts_with("super::");
        let within_a_word =
            at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || b"_:".contains(&bytes[at - 1]));
        if starts && !within_a_word {
            let line = code[..at].matches('\n').count() + 1;
            let mut tree = Vec::new();
            at = use_tree(&code, at, Vec::new(), &mut tree);
            found.extend(tree.into_iter().map(|p| (line, p)));
        } else {
            at += code[at..].chars().next().map_or(1, char::len_utf8);
        }
    }
    found
}

/// Reads one path or group starting at `at`, below `prefix`; returns where it ends.
fn use_tree(code: &str, mut at: usize, mut prefix: Module, out: &mut Vec<Module>) -> usize {
    loop {
        at = skip_space(code, at);
        if code[at..].starts_with('{') {
            at += 1;
            loop {
                at = skip_space(code, use_tree(code, at, prefix.clone(), out));
                match code[at..].chars().next() {
                    Some(',') => at = skip_space(code, at + 1),
                    Some('}') => return at + 1,
                    _ => return at,
                }
                if code[at..].starts_with('}') {
                    return at + 1;
                }
            }
        }
        let rest = &code[at..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len == 0 {
            // `*`, or the end of the path.
            out.push(prefix);
            return at;
        }
        prefix.push(rest[..len].to_string());
        at += len;
        if !code[at..].starts_with("::") {
            out.push(prefix);
            return at;
        }
        at += 2;
    }
}

fn skip_space(code: &str, at: usize) -> usize {
    code.len() - code[at..].trim_start().len()
}

/// The circles of the graph, each written `a -> b -> a` with the places that make its arrows.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for start in graph.keys() {
        let mut stack = Vec::new();
        walk(graph, start, &mut stack, &mut done, &mut found);
    }
    found
}

/// Depth first from `at`; `stack` is the path walked to it. An arrow back into the stack
/// closes a circle.
fn walk(
    graph: &Graph,
    at: &Module,
    stack: &mut Vec<Module>,
    done: &mut BTreeSet<Module>,
    found: &mut Vec<String>,
) {
    if done.contains(at) {
        return;
    }
    if let Some(i) = stack.iter().position(|m| m == at) {
        let mut circle = stack[i..].to_vec();
        circle.push(at.clone());
        let arrows: Vec<String> = circle
            .windows(2)
            .map(|w| {
                format!(
                    "{} -> {} ({})",
                    w[0].join("::"),
                    w[1].join("::"),
                    graph[&w[0]][&w[1]]
                )
            })
            .collect();
        found.push(arrows.join(", "));
        return;
    }
    stack.push(at.clone());
    for next in graph.get(at).into_iter().flat_map(BTreeMap::keys) {
        walk(graph, next, stack, done, found);
    }
    stack.pop();
    done.insert(at.clone());
}
