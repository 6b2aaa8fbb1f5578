//! The JSON-to-protobuf encoder: a stored object's JSON walked along the schema table, each
//! message written as Go's generated (gogo-protobuf) marshallers write it.
//!
//! * fields in ascending field number;
//! * a non-pointer scalar (string, int32/int64, bool) always, its zero value when the JSON
//!   lacks it or has `null`;
//! * a pointer (and a `[]byte`) only when the JSON has it, not `null`;
//! * a non-pointer nested struct always, from its JSON object or, when absent or `null`, as
//!   the zero struct (whose own non-pointer fields are then written as zeros);
//! * slices one field per element; maps one entry `{key = 1, value = 2}` per key in byte
//!   order of the keys, key and value always written;
//! * `metav1.Time` `{seconds = 1, nanos = 2}` (both always), but nothing at all (length 0)
//!   for the zero time, as `Time.MarshalToSizedBuffer` does; `metav1.MicroTime` the same,
//!   its nanos truncated to microseconds;
//! * int32 as a sign-extended 64-bit varint (a negative int32 takes 10 bytes).
//!
//! Anything the schema cannot say for sure is refused ([`Unencodable`]): a JSON key the
//! message does not have, a value of the wrong JSON type, an unparseable time. The caller
//! then answers in JSON.

use super::schema::{message, Field, Kind, Message};
use super::wire::{put_bytes_field, put_nested, put_varint_field};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{Map, Value};

/// Why an object has no protobuf form in the sim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unencodable(pub String);

type Result<T> = std::result::Result<T, Unencodable>;

fn fail<T>(why: impl Into<String>) -> Result<T> {
    Err(Unencodable(why.into()))
}

/// Encodes a top-level object of `kind` (its message, without envelope). `kind` and
/// `apiVersion` belong to the envelope, so they are accepted and skipped.
pub fn encode_object(kind: &str, obj: &Value) -> Result<Vec<u8>> {
    let Some(msg) = message(kind) else {
        return fail(format!("no schema for kind {kind}"));
    };
    let Value::Object(map) = obj else {
        return fail("not a JSON object");
    };
    let mut out = Vec::with_capacity(512);
    encode_message(msg, Some(map), &["kind", "apiVersion"], &mut out)?;
    Ok(out)
}

/// Encodes the `PartialObjectMetadata { metadata ObjectMeta = 1 }` of an object of any kind,
/// custom resources included (the `meta.k8s.io` kinds have a protobuf form whatever the
/// object's own kind has): its ObjectMeta exactly as [`encode_object`] writes it inside the
/// object, everything else left out.
pub fn encode_partial_metadata(obj: &Value) -> Result<Vec<u8>> {
    let Value::Object(map) = obj else {
        return fail("not a JSON object");
    };
    let meta = map.get("metadata").filter(|v| !v.is_null());
    let mut out = Vec::with_capacity(256);
    write_value(Kind::Msg("ObjectMeta"), 1, meta, true, &mut out, "metadata")?;
    Ok(out)
}

/// Writes `msg`'s fields from `obj` (None: the zero struct).
fn encode_message(
    msg: &Message,
    obj: Option<&Map<String, Value>>,
    skip: &[&str],
    out: &mut Vec<u8>,
) -> Result<()> {
    if let Some(obj) = obj {
        if let Some(k) = obj
            .keys()
            .find(|k| !msg.keys.contains(k.as_str()) && !skip.contains(&k.as_str()))
        {
            return fail(format!("unknown field {k:?}"));
        }
    }
    for f in &msg.fields {
        if f.json.is_empty() {
            // An embedded struct: its fields are in this same JSON object.
            let Kind::Msg(inner) = f.kind else {
                return fail("inline field that is not a message");
            };
            let inner = message(inner).ok_or_else(|| Unencodable(format!("no message {inner}")))?;
            // The parent already checked the keys; the inner message must not reject the
            // parent's own.
            put_nested(out, f.number, |out| encode_fields(inner, obj, out))?;
            continue;
        }
        let v = obj.and_then(|o| o.get(f.json)).filter(|v| !v.is_null());
        if f.repeated {
            match v {
                None => {}
                Some(Value::Array(items)) => {
                    for it in items {
                        encode_single(f, Some(it), out)?;
                    }
                }
                Some(_) => return fail(format!("{} is not an array", f.json)),
            }
        } else if f.map {
            match v {
                None => {}
                Some(Value::Object(m)) => {
                    let mut keys: Vec<&String> = m.keys().collect();
                    keys.sort();
                    for k in keys {
                        let val = &m[k.as_str()];
                        // A null map value is the type's zero value in Go.
                        let val = (!val.is_null()).then_some(val);
                        put_nested(out, f.number, |entry| {
                            put_bytes_field(entry, 1, k.as_bytes());
                            write_value(f.kind, 2, val, true, entry, f.json)
                        })?;
                    }
                }
                Some(_) => return fail(format!("{} is not an object", f.json)),
            }
        } else {
            if v.is_none() && f.pointer {
                continue;
            }
            encode_single(f, v, out)?;
        }
    }
    Ok(())
}

/// [`encode_message`] without the unknown-key check (for inline embedded structs).
fn encode_fields(msg: &Message, obj: Option<&Map<String, Value>>, out: &mut Vec<u8>) -> Result<()> {
    // Keys of the parent are allowed: check only that those the inner message has are
    // well-formed, which `encode_message` does field by field.
    let skip: Vec<&str> = obj
        .map(|o| {
            o.keys()
                .map(String::as_str)
                .filter(|k| !msg.keys.contains(k))
                .collect()
        })
        .unwrap_or_default();
    encode_message(msg, obj, &skip, out)
}

fn encode_single(f: &Field, v: Option<&Value>, out: &mut Vec<u8>) -> Result<()> {
    write_value(f.kind, f.number, v, !f.pointer, out, f.json)
}

/// Writes one value of `kind` as field `number`. `v` None: the zero value. `always`: a
/// `[]byte` absent is still written (map values); otherwise a nil `[]byte` is not.
fn write_value(
    kind: Kind,
    number: u32,
    v: Option<&Value>,
    always: bool,
    out: &mut Vec<u8>,
    name: &str,
) -> Result<()> {
    let wrong = |what: &str| fail(format!("{name} is not {what}"));
    match kind {
        Kind::Str => match v {
            None => put_bytes_field(out, number, b""),
            Some(Value::String(s)) => put_bytes_field(out, number, s.as_bytes()),
            Some(_) => return wrong("a string"),
        },
        Kind::I32 | Kind::I64 => {
            let n = match v {
                None => 0,
                Some(Value::Number(n)) => match n.as_i64() {
                    Some(n) => n,
                    None => return wrong("an integer"),
                },
                Some(_) => return wrong("an integer"),
            };
            if kind == Kind::I32 && i32::try_from(n).is_err() {
                return wrong("an int32");
            }
            put_varint_field(out, number, n as u64);
        }
        Kind::Bool => match v {
            None => put_varint_field(out, number, 0),
            Some(Value::Bool(b)) => put_varint_field(out, number, u64::from(*b)),
            Some(_) => return wrong("a bool"),
        },
        Kind::Bytes => match v {
            None if always => put_bytes_field(out, number, b""),
            None => {}
            Some(Value::String(s)) => match BASE64.decode(s) {
                Ok(b) => put_bytes_field(out, number, &b),
                Err(_) => return wrong("base64"),
            },
            Some(_) => return wrong("a base64 string"),
        },
        Kind::Time | Kind::MicroTime => {
            let t = match v {
                None => None,
                Some(Value::String(s)) => match s.parse::<jiff::Timestamp>() {
                    Ok(t) => Some(t),
                    Err(_) => return wrong("an RFC 3339 time"),
                },
                Some(_) => return wrong("a time"),
            };
            put_nested(out, number, |buf| {
                if let Some(t) = t {
                    let mut nanos = t.subsec_nanosecond();
                    if kind == Kind::MicroTime {
                        nanos -= nanos % 1000;
                    }
                    put_varint_field(buf, 1, t.as_second() as u64);
                    put_varint_field(buf, 2, i64::from(nanos) as u64);
                }
                Ok(())
            })?;
        }
        Kind::Quantity => {
            let number_text;
            let s = match v {
                None => "0",
                Some(Value::String(s)) => s.as_str(),
                Some(Value::Number(n)) => {
                    number_text = n.to_string();
                    number_text.as_str()
                }
                Some(_) => return wrong("a quantity"),
            };
            put_nested(out, number, |buf| {
                put_bytes_field(buf, 1, s.as_bytes());
                Ok(())
            })?;
        }
        Kind::IntOrString => {
            let (ty, int, s): (u64, i64, &str) = match v {
                None => (0, 0, ""),
                Some(Value::Number(n)) => match n.as_i64().filter(|n| i32::try_from(*n).is_ok()) {
                    Some(n) => (0, n, ""),
                    None => return wrong("an int32"),
                },
                Some(Value::String(s)) => (1, 0, s),
                Some(_) => return wrong("an int or string"),
            };
            put_nested(out, number, |buf| {
                put_varint_field(buf, 1, ty);
                put_varint_field(buf, 2, int as u64);
                put_bytes_field(buf, 3, s.as_bytes());
                Ok(())
            })?;
        }
        Kind::RawJson => {
            let mut json = Vec::new();
            if let Some(v) = v {
                crate::encode::write_value(&mut json, v, false);
            }
            put_nested(out, number, |buf| {
                put_bytes_field(buf, 1, &json);
                Ok(())
            })?;
        }
        Kind::Msg(name) => {
            let msg = message(name).ok_or_else(|| Unencodable(format!("no message {name}")))?;
            let obj = match v {
                None => None,
                Some(Value::Object(m)) => Some(m),
                Some(_) => return wrong("an object"),
            };
            put_nested(out, number, |buf| encode_message(msg, obj, &[], buf))?;
        }
    }
    Ok(())
}
