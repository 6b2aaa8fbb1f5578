//! What can be wrong with protobuf bytes kcache is asked to read.

/// Why protobuf bytes (from the upstream apiserver, or a client) could not be read.
///
/// kcache only reads what it needs to build envelopes around objects, so these errors name
/// the part being read (`"ObjectMeta"`, `"WatchEvent"`, …) rather than a full decode path: they
/// end up in logs, and a client is answered with a generic error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The input ends in the middle of the named message (a tag, a varint or a length-delimited
    /// value runs past its end). For a stream, [`next_frame`](super::next_frame) returns
    /// `Ok(None)` instead while a frame is incomplete; this is for bytes that claim to be whole.
    #[error("protobuf input ends inside {0}")]
    Truncated(&'static str),
    /// A body or a watch event's object does not start with the `k8s\0` magic of the
    /// Kubernetes protobuf envelope (rule E9).
    #[error("protobuf body does not start with the k8s\\0 magic")]
    BadMagic,
    /// Bytes that are not protobuf as Go's Kubernetes types marshal it; the text says which
    /// part (an overlong varint, a group wire type, a field of the wrong wire type, a singular
    /// message written twice, …).
    #[error("malformed protobuf: {0}")]
    Malformed(&'static str),
    /// A string field kcache returns as `&str` (the name, namespace, resourceVersion, kind, …)
    /// is not UTF-8.
    #[error("protobuf string field {0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    /// An envelope whose `contentEncoding` is set: its `raw` would need decoding (e.g. gzip)
    /// before it is the object, which kcache cannot do without knowing the encoding. The
    /// apiserver never sets it.
    #[error("protobuf envelope with contentEncoding {0:?}, which kcache cannot interpret")]
    ContentEncoding(String),
}
