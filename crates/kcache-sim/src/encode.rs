//! JSON output exactly as the apiserver writes it: Go's encoder escaping (`<`, `>`, `&`,
//! U+2028/9 as `\u` escapes), Go struct key order for built-ins, sorted keys for custom
//! resources, and a small ordered builder for the server's own documents (Status, lists,
//! discovery). Ordering is done here rather than left to serde_json's map type, so output
//! does not depend on whether `preserve_order` is enabled.

use super::types::ResourceType;
use serde_json::Value;

/// Key order of `ObjectMeta` in Go (also how the seed keeps metadata readable after churn adds
/// labels or annotations to an object that had none).
pub(crate) const META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// An ordered JSON value for documents the server builds itself.
#[derive(Clone, Debug)]
pub enum J {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<J>),
    /// An object with keys in the given order.
    Obj(Vec<(&'static str, J)>),
    /// An object whose keys are not static (labels, annotations).
    Map(Vec<(String, J)>),
    /// Already-encoded JSON.
    Raw(Vec<u8>),
}

impl J {
    /// Shorthand for a string value.
    pub fn s(v: impl Into<String>) -> J {
        J::Str(v.into())
    }

    /// Appends the compact encoding.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            J::Null => out.extend_from_slice(b"null"),
            J::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            J::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
            J::Str(s) => write_str(out, s),
            J::Arr(items) => {
                out.push(b'[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    it.write(out);
                }
                out.push(b']');
            }
            J::Obj(fields) => {
                out.push(b'{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_str(out, k);
                    out.push(b':');
                    v.write(out);
                }
                out.push(b'}');
            }
            J::Map(fields) => {
                out.push(b'{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_str(out, k);
                    out.push(b':');
                    v.write(out);
                }
                out.push(b'}');
            }
            J::Raw(raw) => out.extend_from_slice(raw),
        }
    }

    /// Compact encoding with the trailing newline the apiserver's encoder adds.
    pub fn to_body(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.write(&mut out);
        out.push(b'\n');
        out
    }
}

/// Writes a JSON string the way Go's `encoding/json` does (HTML-safe escaping).
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x80 {
            let esc: Option<&[u8]> = match b {
                b'"' => Some(b"\\\""),
                b'\\' => Some(b"\\\\"),
                b'\n' => Some(b"\\n"),
                b'\r' => Some(b"\\r"),
                b'\t' => Some(b"\\t"),
                _ => None,
            };
            let needs_u = esc.is_none() && (b < 0x20 || b == b'<' || b == b'>' || b == b'&');
            if esc.is_some() || needs_u {
                out.extend_from_slice(&bytes[start..i]);
                match esc {
                    Some(e) => out.extend_from_slice(e),
                    None => {
                        out.extend_from_slice(b"\\u00");
                        out.push(HEX[(b >> 4) as usize]);
                        out.push(HEX[(b & 0xf) as usize]);
                    }
                }
                start = i + 1;
            }
            i += 1;
            continue;
        }
        // U+2028 and U+2029 are E2 80 A8/A9 in UTF-8; Go escapes them.
        if b == 0xE2 && i + 2 < bytes.len() && bytes[i + 1] == 0x80 && (bytes[i + 2] & 0xFE) == 0xA8
        {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(if bytes[i + 2] == 0xA8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
            start = i;
            continue;
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Writes any JSON value; `sorted` sorts object keys at every level (unstructured objects).
pub fn write_value(out: &mut Vec<u8>, v: &Value, sorted: bool) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, it, sorted);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            if sorted {
                keys.sort();
            }
            out.push(b'{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_value(out, &map[k.as_str()], sorted);
            }
            out.push(b'}');
        }
    }
}

/// Writes `obj` with keys in `order` first, then the rest in map order.
fn write_ordered(
    out: &mut Vec<u8>,
    map: &serde_json::Map<String, Value>,
    order: &[&str],
    skip: &[&str],
) {
    let mut first = true;
    let mut field = |out: &mut Vec<u8>, k: &str, v: &Value| {
        if !first {
            out.push(b',');
        }
        first = false;
        write_str(out, k);
        out.push(b':');
        if k == "metadata" {
            if let Value::Object(m) = v {
                out.push(b'{');
                write_ordered(out, m, META_ORDER, &[]);
                out.push(b'}');
                return;
            }
        }
        write_value(out, v, false);
    };
    for k in order {
        if let Some(v) = map.get(*k) {
            field(out, k, v);
        }
    }
    for (k, v) in map {
        if !order.contains(&k.as_str()) && !skip.contains(&k.as_str()) {
            field(out, k, v);
        }
    }
}

/// Serialises a stored object. Returns the bytes and the offset at which the item form
/// (without kind/apiVersion, used in built-in typed lists) continues after a `{`.
pub fn encode_object(rt: &ResourceType, obj: &Value) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(512);
    if rt.custom {
        write_value(&mut out, obj, true);
        return (out, 1);
    }
    let Value::Object(map) = obj else {
        write_value(&mut out, obj, false);
        return (out, 1);
    };
    out.push(b'{');
    write_str(&mut out, "kind");
    out.push(b':');
    write_str(&mut out, &rt.kind);
    out.push(b',');
    write_str(&mut out, "apiVersion");
    out.push(b':');
    write_str(&mut out, &rt.api_version());
    out.push(b',');
    let item_at = out.len();
    let mut order = vec!["metadata"];
    order.extend_from_slice(rt.field_order());
    write_ordered(&mut out, map, &order, &["kind", "apiVersion"]);
    out.push(b'}');
    (out, item_at)
}

/// Re-indents compact JSON with two spaces (Go's `json.Indent`), for `?pretty=true` and
/// curl-like User-Agents. Output has no trailing newline.
pub fn indent(compact: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    let body = compact.strip_suffix(b"\n").unwrap_or(compact);
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        for _ in 0..depth {
            out.extend_from_slice(b"  ");
        }
    };
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_str = true;
                out.push(c);
            }
            b'{' | b'[' => {
                let close = if c == b'{' { b'}' } else { b']' };
                if body.get(i + 1) == Some(&close) {
                    out.push(c);
                    out.push(close);
                    i += 2;
                    continue;
                }
                out.push(c);
                depth += 1;
                newline(&mut out, depth);
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            b',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// The current time as RFC 3339 with second precision in UTC, like `metav1.Time`.
pub fn now_rfc3339() -> String {
    format!("{:.0}", jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_escaping() {
        let mut out = Vec::new();
        write_str(&mut out, "<none> & \"q\"\n\u{1}\u{2028}é");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#""\u003cnone\u003e \u0026 \"q\"\n\u0001\u2028é""#
        );
    }

    #[test]
    fn now_is_metav1_time() {
        let now = now_rfc3339();
        assert_eq!(now.len(), "2026-11-22T09:58:06Z".len(), "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    }

    #[test]
    fn builtin_order_and_item_offset() {
        let rt = super::super::types::builtins()
            .into_iter()
            .find(|t| t.resource == "configmaps")
            .unwrap();
        let obj: Value = serde_json::from_str(
            r#"{"data":{"k":"v"},"metadata":{"labels":{"a":"b"},"name":"x","namespace":"n"},"immutable":true}"#,
        )
        .unwrap();
        let (bytes, at) = encode_object(&rt, &obj);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x","namespace":"n","labels":{"a":"b"}},"immutable":true,"data":{"k":"v"}}"#
        );
        let mut item = vec![b'{'];
        item.extend_from_slice(&bytes[at..]);
        assert!(item.starts_with(br#"{"metadata":{"name":"x""#));
    }

    #[test]
    fn pretty() {
        let out = indent(b"{\"a\":[1,2],\"b\":{},\"c\":\"x,y\"}\n");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": \"x,y\"\n}"
        );
    }
}
