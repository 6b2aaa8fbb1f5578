//! PATCH bodies: JSON merge patch (RFC 7386; strategic merge patch is treated the same, the
//! sim has no patch strategies) and JSON patch (RFC 6902).

use serde_json::Value;

/// Applies a JSON merge patch in place.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Splits a JSON pointer into its parent pointer and last token.
fn split(path: &str) -> Option<(&str, String)> {
    let idx = path.rfind('/')?;
    Some((&path[..idx], unescape(&path[idx + 1..])))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split(path).ok_or_else(|| format!("invalid path {path}"))?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(last, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse().map_err(|_| format!("invalid index {last}"))?
            };
            if idx > a.len() {
                return Err(format!("index {idx} out of bounds"));
            }
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(format!("missing path {parent}")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split(path).ok_or_else(|| format!("invalid path {path}"))?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => m
            .remove(&last)
            .ok_or_else(|| format!("missing path {path}")),
        Some(Value::Array(a)) => {
            let idx: usize = last.parse().map_err(|_| format!("invalid index {last}"))?;
            if idx >= a.len() {
                return Err(format!("index {idx} out of bounds"));
            }
            Ok(a.remove(idx))
        }
        _ => Err(format!("missing path {parent}")),
    }
}

/// Applies a JSON patch (array of operations).
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let Value::Array(ops) = ops else {
        return Err("json patch must be an array".into());
    };
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op.get("path").and_then(Value::as_str).unwrap_or("");
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("missing value for {kind}"))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("missing from for {kind}"))
        };
        match kind {
            "add" => add(doc, path, value()?)?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                remove(doc, path)?;
                add(doc, path, value()?)?;
            }
            "move" => {
                let v = remove(doc, from()?)?;
                add(doc, path, v)?;
            }
            "copy" => {
                let v = doc
                    .pointer(from()?)
                    .cloned()
                    .ok_or_else(|| format!("missing path {path}"))?;
                add(doc, path, v)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&value()?) {
                    return Err(format!("testing value {path} failed"));
                }
            }
            other => return Err(format!("Unexpected kind: {other}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch() {
        let mut v = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge(&mut v, &json!({"a": {"b": null, "e": 3}, "d": [2]}));
        assert_eq!(v, json!({"a": {"c": 2, "e": 3}, "d": [2]}));
    }

    #[test]
    fn json_patch_ops() {
        let mut v = json!({"metadata": {"labels": {"a": "1"}}, "l": [1, 2]});
        json_patch(
            &mut v,
            &json!([
                {"op": "add", "path": "/metadata/labels/b", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/a"},
                {"op": "replace", "path": "/l/0", "value": 9},
                {"op": "add", "path": "/l/-", "value": 3}
            ]),
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"metadata": {"labels": {"b": "2"}}, "l": [9, 2, 3]})
        );
    }
}
