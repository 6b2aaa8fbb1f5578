//! What kcache knows about one cached resource type: its group/version/resource, kind, scope and
//! the wire form of its lists. Resolved once from upstream discovery.

use std::fmt;

/// A resource type as served by the upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group, "" for the core group.
    pub group: String,
    pub version: String,
    /// Plural resource name, as in the URL.
    pub resource: String,
    pub kind: String,
    pub namespaced: bool,
    /// Served by a CustomResourceDefinition: objects and lists use the unstructured wire form
    /// (sorted keys, items keep `apiVersion`/`kind`, `"continue":""` on the last page).
    pub custom: bool,
}

impl ResourceInfo {
    /// `v1` for core, `group/version` otherwise.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The URL prefix of this group/version (`/api/v1` or `/apis/G/V`).
    pub(crate) fn api_path(&self) -> String {
        api_path(&self.group, &self.version)
    }

    /// Heuristic used until the upstream's own list form is seen: built-in groups are the core
    /// group, dot-less groups (`apps`, `batch`, …) and `*.k8s.io`.
    pub(crate) fn guess_custom(group: &str) -> bool {
        !(group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io"))
    }

    /// The exact bytes a typed built-in object starts with before its other fields:
    /// `{"kind":"K","apiVersion":"V",`. List items of typed lists are the object without it.
    pub(crate) fn typed_prefix(&self) -> String {
        format!(
            "{{\"kind\":{},\"apiVersion\":{},",
            json_str(&self.kind),
            json_str(&self.api_version())
        )
    }
}

#[cfg(test)]
impl ResourceInfo {
    /// A namespaced built-in of the core group (`v1`), as unit tests describe ConfigMaps and
    /// Pods.
    pub(crate) fn core_v1(resource: &str, kind: &str) -> ResourceInfo {
        ResourceInfo {
            group: "".into(),
            version: "v1".into(),
            resource: resource.into(),
            kind: kind.into(),
            namespaced: true,
            custom: false,
        }
    }
}

impl fmt::Display for ResourceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_type_name(f, &self.group, &self.version, &self.resource)
    }
}

/// A type, by name: what is known of one that has no cache.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TypeName {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl TypeName {
    pub(crate) fn new(group: &str, version: &str, resource: &str) -> TypeName {
        TypeName {
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
        }
    }
}

impl std::fmt::Display for TypeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_type_name(f, &self.group, &self.version, &self.resource)
    }
}

/// The URL prefix of a group/version (`/api/v1` or `/apis/G/V`).
pub(crate) fn api_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// How logs, `/readyz` and `/status` name a type: `group/version/resource`, or
/// `version/resource` for the core group.
pub(crate) fn write_type_name(
    f: &mut fmt::Formatter<'_>,
    group: &str,
    version: &str,
    resource: &str,
) -> fmt::Result {
    if group.is_empty() {
        write!(f, "{version}/{resource}")
    } else {
        write!(f, "{group}/{version}/{resource}")
    }
}

/// A JSON string literal.
pub(crate) fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_guess() {
        assert!(!ResourceInfo::guess_custom(""));
        assert!(!ResourceInfo::guess_custom("apps"));
        assert!(!ResourceInfo::guess_custom("discovery.k8s.io"));
        assert!(ResourceInfo::guess_custom("fixtures.example.com"));
    }
}
