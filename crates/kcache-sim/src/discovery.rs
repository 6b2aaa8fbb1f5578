//! Legacy discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/G`, `/apis/G/V`)
//! built from the registered types, in the apiserver's JSON shapes.

use super::encode::J;
use super::profile::Profile;
use super::types::ResourceType;
use std::net::SocketAddr;
use std::sync::Arc;

/// `/version` as the profile's apiserver recorded it (always indented, no newline).
pub fn version(profile: Profile) -> Vec<u8> {
    let b = profile.build_info();
    let mut fields = vec![("major", J::s(b.major)), ("minor", J::s(b.minor))];
    for (k, v) in b.compatibility.into_iter().flatten() {
        fields.push((k, J::s(v)));
    }
    fields.extend([
        ("gitVersion", J::s(b.git_version)),
        ("gitCommit", J::s(b.git_commit)),
        ("gitTreeState", J::s("clean")),
        ("buildDate", J::s(b.build_date)),
        ("goVersion", J::s(b.go_version)),
        ("compiler", J::s("gc")),
        ("platform", J::s("linux/amd64")),
    ]);
    super::encode::indent(&J::Obj(fields).to_body())
}

/// `/api` (APIVersions).
pub fn api_versions(addr: SocketAddr) -> J {
    J::Obj(vec![
        ("kind", J::s("APIVersions")),
        ("versions", J::Arr(vec![J::s("v1")])),
        (
            "serverAddressByClientCIDRs",
            J::Arr(vec![J::Obj(vec![
                ("clientCIDR", J::s("0.0.0.0/0")),
                ("serverAddress", J::s(addr.to_string())),
            ])]),
        ),
    ])
}

/// The versions served for each non-core group, in registration order.
fn groups(types: &[Arc<ResourceType>]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, versions)) => {
                if !versions.contains(&t.version) {
                    versions.push(t.version.clone());
                }
            }
            None => out.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    out
}

fn group_json(name: &str, versions: &[String], with_type_meta: bool) -> J {
    let gv = |v: &String| {
        J::Obj(vec![
            ("groupVersion", J::Str(format!("{name}/{v}"))),
            ("version", J::s(v)),
        ])
    };
    let mut f = Vec::new();
    if with_type_meta {
        f.push(("kind", J::s("APIGroup")));
        f.push(("apiVersion", J::s("v1")));
    }
    f.push(("name", J::s(name)));
    f.push(("versions", J::Arr(versions.iter().map(gv).collect())));
    if let Some(first) = versions.first() {
        f.push(("preferredVersion", gv(first)));
    }
    J::Obj(f)
}

/// `/apis` (APIGroupList).
pub fn api_group_list(types: &[Arc<ResourceType>]) -> J {
    let groups = groups(types)
        .iter()
        .map(|(g, v)| group_json(g, v, false))
        .collect();
    J::Obj(vec![
        ("kind", J::s("APIGroupList")),
        ("apiVersion", J::s("v1")),
        ("groups", J::Arr(groups)),
    ])
}

/// `/apis/G` (APIGroup), if the group is served.
pub fn api_group(types: &[Arc<ResourceType>], group: &str) -> Option<J> {
    groups(types)
        .into_iter()
        .find(|(g, _)| g == group)
        .map(|(g, v)| group_json(&g, &v, true))
}

fn resource_json(t: &ResourceType) -> J {
    let mut f = vec![
        ("name", J::s(&t.resource)),
        ("singularName", J::s(&t.singular)),
        ("namespaced", J::Bool(t.namespaced)),
        ("kind", J::s(&t.kind)),
        (
            "verbs",
            J::Arr(t.verbs().iter().map(|v| J::s(*v)).collect()),
        ),
    ];
    if !t.short_names.is_empty() {
        f.push((
            "shortNames",
            J::Arr(t.short_names.iter().map(J::s).collect()),
        ));
    }
    if !t.categories().is_empty() {
        f.push((
            "categories",
            J::Arr(t.categories().iter().map(|c| J::s(*c)).collect()),
        ));
    }
    J::Obj(f)
}

fn status_json(t: &ResourceType) -> J {
    J::Obj(vec![
        ("name", J::Str(format!("{}/status", t.resource))),
        ("singularName", J::s("")),
        ("namespaced", J::Bool(t.namespaced)),
        ("kind", J::s(&t.kind)),
        (
            "verbs",
            J::Arr(
                ["get", "patch", "update"]
                    .iter()
                    .map(|v| J::s(*v))
                    .collect(),
            ),
        ),
    ])
}

/// `/api/v1` or `/apis/G/V` (APIResourceList), if that group/version is served.
pub fn resource_list(types: &[Arc<ResourceType>], group: &str, version: &str) -> Option<J> {
    let mut served: Vec<&Arc<ResourceType>> = types
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    // Built-in groups list resources alphabetically; CRD groups in registration order.
    if !served.iter().any(|t| t.custom) {
        served.sort_by(|a, b| a.resource.cmp(&b.resource));
    }
    let mut resources = Vec::new();
    for t in served {
        resources.push(resource_json(t));
        if t.has_status() {
            resources.push(status_json(t));
        }
    }
    let mut f = vec![("kind", J::s("APIResourceList"))];
    if group.is_empty() {
        // The core group's list has no apiVersion (as recorded).
        f.push(("groupVersion", J::s(version)));
    } else {
        f.push(("apiVersion", J::s("v1")));
        f.push(("groupVersion", J::Str(format!("{group}/{version}"))));
    }
    f.push(("resources", J::Arr(resources)));
    Some(J::Obj(f))
}
