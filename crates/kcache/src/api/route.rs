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
    let mut segs: Vec<String> = decoded.split('/').skip(1).map(str::to_string).collect();
    // A trailing slash on a collection is the collection (L10).
    if segs.len() > 1 && segs.last().is_some_and(String::is_empty) {
        segs.pop();
    }
    if segs.iter().any(String::is_empty) {
        return None;
    }
    let (group, version, rest) = match segs.first().map(String::as_str) {
        Some("api") if segs.len() >= 3 => (String::new(), segs[1].clone(), &segs[2..]),
        Some("apis") if segs.len() >= 4 => (segs[1].clone(), segs[2].clone(), &segs[3..]),
        _ => return None,
    };
    let (legacy_watch, rest) = match rest.first().map(String::as_str) {
        Some("watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    let mut p = ResourcePath {
        group,
        version,
        resource: String::new(),
        namespace: None,
        name: None,
        subresource: None,
        legacy_watch,
    };
    let rest: &[String] =
        if rest.first().map(String::as_str) == Some("namespaces") && rest.len() >= 3 {
            // `namespaces/NAME/status` and `/finalize` are subresources of a Namespace.
            if rest.len() == 3 && (rest[2] == "status" || rest[2] == "finalize") {
                p.resource = "namespaces".into();
                p.name = Some(rest[1].clone());
                p.subresource = Some(rest[2].clone());
                return Some(p);
            }
            p.namespace = Some(rest[1].clone());
            &rest[2..]
        } else {
            rest
        };
    match rest {
        [res] => p.resource = res.clone(),
        [res, name] => {
            p.resource = res.clone();
            p.name = Some(name.clone());
        }
        [res, name, sub @ ..] if !sub.is_empty() => {
            p.resource = res.clone();
            p.name = Some(name.clone());
            p.subresource = Some(sub.join("/"));
        }
        _ => return None,
    }
    Some(p)
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
