//! Content negotiation: which Accept headers kcache answers from its JSON cache, and which go
//! upstream. client-go decodes by the response's Content-Type, so JSON is correct for any client
//! that lists JSON among its choices, even after protobuf.

/// How to answer a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// Plain objects as JSON, from the cache.
    Json,
    /// Something the cache does not produce (Table, PartialObjectMetadata, YAML, protobuf
    /// only, …): the upstream answers, including its 406.
    Upstream,
}

/// Decide from the Accept header. The first media range kcache can produce or must hand over
/// decides; protobuf entries are skipped because the client accepts the JSON listed after them.
pub fn negotiate(accept: Option<&str>) -> Representation {
    let Some(accept) = accept.map(str::trim).filter(|a| !a.is_empty()) else {
        return Representation::Json;
    };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut has_as = false;
        let mut q_zero = false;
        for p in parts {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            match k.trim().to_ascii_lowercase().as_str() {
                "as" => has_as = true,
                "q" => q_zero = v.trim().parse::<f32>().is_ok_and(|q| q == 0.0),
                _ => {}
            }
        }
        if q_zero {
            continue;
        }
        match media.as_str() {
            "application/json" | "*/*" | "application/*" if !has_as => return Representation::Json,
            "application/json" => return Representation::Upstream,
            "application/vnd.kubernetes.protobuf" => continue,
            _ => return Representation::Upstream,
        }
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
            Upstream
        );
        assert_eq!(
            negotiate(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            )),
            Upstream
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf")),
            Upstream
        );
        assert_eq!(negotiate(Some("application/yaml")), Upstream);
    }
}
