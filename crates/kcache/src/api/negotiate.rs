//! Content negotiation: which Accept headers kcache answers from its cache, in which form, and
//! which go upstream. Protobuf is answered where the apiserver would answer it (a built-in
//! type, protobuf the client's first choice: E9) and kcache has the upstream's protobuf bytes
//! (`cache::Mirror`); elsewhere protobuf entries are skipped, which is still correct for a
//! client that lists JSON after them, since client-go decodes by the response's Content-Type.

/// How to answer a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// Plain objects as JSON, from the cache.
    Json,
    /// `as=Table` (`meta.k8s.io/v1`), as `kubectl get` asks for.
    Table,
    /// `as=PartialObjectMetadata` (GET and WATCH of metadata informers).
    PartialObjectMetadata,
    /// `as=PartialObjectMetadataList` (their LIST).
    PartialObjectMetadataList,
    /// Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), from the mirror.
    Protobuf,
    /// Something the cache does not produce (protobuf only, YAML, other `as=` forms or
    /// versions, …): the upstream answers, including its 406.
    Upstream,
}

/// Decide from the Accept header, for a type kcache answers JSON only (custom resources, or
/// protobuf turned off): see [`negotiate_with`].
#[cfg(test)]
pub(crate) fn negotiate(accept: Option<&str>) -> Representation {
    negotiate_with(accept, false)
}

/// Decide from the Accept header. The first media range kcache can produce or must hand over
/// decides. Plain protobuf decides for [`Representation::Protobuf`] when `protobuf` (the type
/// is one the apiserver serves in protobuf); else protobuf entries are skipped, because the
/// client accepts the JSON listed after them (a protobuf-only client goes upstream and gets the
/// apiserver's own answer, its 406 for a custom resource). Protobuf with `as=` (metadata, Table)
/// is always skipped: the cache does not produce those forms in protobuf.
pub fn negotiate_with(accept: Option<&str>, protobuf: bool) -> Representation {
    let Some(accept) = accept.map(str::trim).filter(|a| !a.is_empty()) else {
        return Representation::Json;
    };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let (mut as_, mut g, mut v) = (None, None, None);
        let mut q_zero = false;
        for p in parts {
            let (k, val) = p.split_once('=').unwrap_or((p, ""));
            let val = val.trim().to_string();
            match k.trim().to_ascii_lowercase().as_str() {
                "as" => as_ = Some(val),
                "g" => g = Some(val),
                "v" => v = Some(val),
                "q" => q_zero = val.parse::<f32>().is_ok_and(|q| q == 0.0),
                _ => {}
            }
        }
        if q_zero {
            continue;
        }
        let json = matches!(media.as_str(), "application/json" | "*/*" | "application/*");
        if media == "application/vnd.kubernetes.protobuf" {
            if protobuf && as_.is_none() {
                return Representation::Protobuf;
            }
            continue;
        }
        if !json {
            return Representation::Upstream;
        }
        let Some(as_) = as_ else {
            return Representation::Json;
        };
        // Only the meta.k8s.io/v1 forms are produced here; v1beta1 and others go upstream.
        if g.as_deref() != Some("meta.k8s.io") || v.as_deref() != Some("v1") {
            return Representation::Upstream;
        }
        return match as_.as_str() {
            "Table" => Representation::Table,
            "PartialObjectMetadata" => Representation::PartialObjectMetadata,
            "PartialObjectMetadataList" => Representation::PartialObjectMetadataList,
            _ => Representation::Upstream,
        };
    }
    Representation::Upstream
}

#[cfg(test)]
mod tests {
    use super::*;
    use Representation::*;

    #[test]
    fn choices() {
        assert_eq!(negotiate(None), Json);
        assert_eq!(negotiate(Some("application/json, */*")), Json);
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf, */*")),
            Json
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf,application/json")),
            Json
        );
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")),
            Table
        );
        assert_eq!(
            negotiate(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            )),
            PartialObjectMetadataList
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json")),
            PartialObjectMetadata
        );
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io")),
            Upstream
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf")),
            Upstream
        );
        assert_eq!(negotiate(Some("application/yaml")), Upstream);
    }

    #[test]
    fn protobuf_where_the_type_has_it() {
        let first = "application/vnd.kubernetes.protobuf, application/json";
        assert_eq!(negotiate_with(Some(first), true), Protobuf);
        assert_eq!(negotiate_with(Some(first), false), Json);
        assert_eq!(
            negotiate_with(
                Some("application/vnd.kubernetes.protobuf;stream=watch"),
                true
            ),
            Protobuf
        );
        // JSON first stays JSON; protobuf metadata and protobuf-only custom resources as before.
        assert_eq!(
            negotiate_with(
                Some("application/json, application/vnd.kubernetes.protobuf"),
                true
            ),
            Json
        );
        assert_eq!(
            negotiate_with(Some("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"), true),
            PartialObjectMetadata
        );
        assert_eq!(
            negotiate_with(Some("application/vnd.kubernetes.protobuf"), false),
            Upstream
        );
    }
}
