//! Resource paths of the Kubernetes API, as kube-apiserver accepts them:
//! `/api/v1/[namespaces/NS/]RES[/NAME[/SUB]]`, `/apis/G/V/...` and the deprecated
//! `/.../watch/...` prefix. Anything else is not a resource path and goes upstream.

use percent_encoding::percent_decode_str;

/// A parsed resource path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// Came through the deprecated `/watch/` prefix: a watch whatever the query says.
    pub legacy_watch: bool,
}

/// Parse a request path; `None` for anything that is not a resource path.
pub fn parse(path: &str) -> Option<ResourcePath> {
    // The whole path is decoded before it is split, as kube-apiserver does (Go's URL.Path is
    // decoded): `%2F` separates segments, so kcache reads a path exactly as the upstream and
    // its authorizer will.
    let decoded = percent_decode_str(path).decode_utf8_lossy();
    // Segments borrow the path: only the fields kept are copied (every request is parsed).
    let mut segs: Vec<&str> = Vec::with_capacity(8);
    segs.extend(decoded.split('/').skip(1));
    // A trailing slash on a collection is the collection (L10).
    if segs.len() > 1 && segs.last().is_some_and(|s| s.is_empty()) {
        segs.pop();
    }
    if segs.iter().any(|s| s.is_empty()) {
        return None;
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => ("", *version, rest),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => (*group, *version, rest),
        _ => return None,
    };
    let (legacy_watch, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let path =
        |resource: &str, namespace: Option<&str>, name: Option<&str>, sub: Option<String>| {
            Some(ResourcePath {
                group: group.to_string(),
                version: version.to_string(),
                resource: resource.to_string(),
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                subresource: sub,
                legacy_watch,
            })
        };
    let (namespace, rest) = match rest {
        // `namespaces/NAME/status` and `/finalize` are subresources of a Namespace.
        ["namespaces", name, sub @ ("status" | "finalize")] => {
            return path("namespaces", None, Some(*name), Some(sub.to_string()));
        }
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
        _ => (None, rest),
    };
    match rest {
        [res] => path(res, namespace, None, None),
        [res, name] => path(res, namespace, Some(*name), None),
        [res, name, sub @ ..] => path(res, namespace, Some(*name), Some(sub.join("/"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(path: &str) -> ResourcePath {
        parse(path).unwrap()
    }

    #[test]
    fn forms() {
        let a = p("/api/v1/namespaces/ns/configmaps");
        assert_eq!(
            (
                a.group.as_str(),
                a.namespace.as_deref(),
                a.resource.as_str()
            ),
            ("", Some("ns"), "configmaps")
        );
        let b = p("/apis/apps/v1/deployments");
        assert_eq!((b.group.as_str(), b.version.as_str()), ("apps", "v1"));
        assert_eq!(b.namespace, None);
        let c = p("/api/v1/namespaces/ns/pods/x/log");
        assert_eq!(c.subresource.as_deref(), Some("log"));
        let d = p("/api/v1/namespaces/kube-system");
        assert_eq!(
            (d.resource.as_str(), d.name.as_deref()),
            ("namespaces", Some("kube-system"))
        );
        let e = p("/api/v1/namespaces/ns/status");
        assert_eq!(e.subresource.as_deref(), Some("status"));
        let f = p("/api/v1/watch/namespaces/ns/configmaps");
        assert!(f.legacy_watch);
        assert_eq!(f.resource, "configmaps");
        let g = p("/api/v1/namespaces/ns/configmaps/");
        assert_eq!(
            (g.resource.as_str(), g.name.as_deref()),
            ("configmaps", None)
        );
        assert_eq!(p("/api/v1/namespaces").resource, "namespaces");
    }

    #[test]
    fn an_encoded_slash_separates_segments_as_in_the_apiserver() {
        let a = p("/api/v1/namespaces/default%2Fconfigmaps");
        assert_eq!(a.namespace.as_deref(), Some("default"));
        assert_eq!(a.resource, "configmaps");
        assert_eq!(a.name, None);
        assert_eq!(
            p("/api/v1/namespaces/a/pods/x%2Flog")
                .subresource
                .as_deref(),
            Some("log")
        );
    }

    #[test]
    fn not_resource_paths() {
        for path in [
            "/",
            "/api",
            "/api/v1",
            "/apis/apps",
            "/version",
            "/api/v1//x",
            "/healthz",
        ] {
            assert_eq!(parse(path), None, "{path}");
        }
    }
}
