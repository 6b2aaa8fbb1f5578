//! The schema table that drives the encoder, parsed once from `schema.txt` (see the
//! comments at its top for the notation).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// What a field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `string` (varint-length bytes).
    Str,
    /// `int32`: written as the sign-extended 64-bit varint, as Go does.
    I32,
    /// `int64`.
    I64,
    /// `bool`.
    Bool,
    /// `[]byte`: base64 in JSON, raw bytes on the wire.
    Bytes,
    /// `metav1.Time`: `{seconds int64 = 1, nanos int32 = 2}`, length 0 for the zero time.
    Time,
    /// `metav1.MicroTime`: as [`Kind::Time`], its nanos truncated to microseconds.
    MicroTime,
    /// `resource.Quantity`: `{string = 1}`.
    Quantity,
    /// `intstr.IntOrString`: `{type int64 = 1, intVal int32 = 2, strVal string = 3}`.
    IntOrString,
    /// A message `{raw bytes = 1}` holding the value's compact JSON (`FieldsV1`).
    RawJson,
    /// A nested message of the schema.
    Msg(&'static str),
}

/// One field of a message.
#[derive(Clone, Debug)]
pub struct Field {
    /// The JSON key; empty for an embedded struct whose fields are inline in the parent.
    pub json: &'static str,
    /// The protobuf field number.
    pub number: u32,
    /// What it holds.
    pub kind: Kind,
    /// A Go pointer (or a `[]byte`): written only when present and not null.
    pub pointer: bool,
    /// A slice: one field per element.
    pub repeated: bool,
    /// A `map[string]T`: one entry message per key.
    pub map: bool,
}

/// One message: its fields in ascending field number, and every JSON key it accepts
/// (those of inline embedded structs included).
#[derive(Debug)]
pub struct Message {
    pub fields: Vec<Field>,
    pub keys: HashSet<&'static str>,
}

const SOURCE: &str = include_str!("schema.txt");

/// The parsed table, by message name.
pub fn messages() -> &'static HashMap<&'static str, Message> {
    static TABLE: OnceLock<HashMap<&'static str, Message>> = OnceLock::new();
    TABLE.get_or_init(|| parse(SOURCE))
}

/// The message named `name`, if the schema has it.
pub fn message(name: &str) -> Option<&'static Message> {
    messages().get(name)
}

fn kind_of(t: &'static str) -> Kind {
    match t {
        "s" => Kind::Str,
        "i32" => Kind::I32,
        "i64" => Kind::I64,
        "b" => Kind::Bool,
        "bytes" => Kind::Bytes,
        "time" => Kind::Time,
        "mtime" => Kind::MicroTime,
        "q" => Kind::Quantity,
        "ios" => Kind::IntOrString,
        "json" => Kind::RawJson,
        name => Kind::Msg(name),
    }
}

/// Parses the table. A malformed line is a bug in `schema.txt`: it panics (on first use,
/// which every test does).
fn parse(src: &'static str) -> HashMap<&'static str, Message> {
    let mut raw: Vec<(&'static str, Vec<Field>)> = Vec::new();
    for line in src.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if !line.starts_with(' ') {
            let name = trimmed.strip_suffix(':').expect("schema: `Message:` line");
            raw.push((name, Vec::new()));
            continue;
        }
        let mut parts = trimmed.split_whitespace();
        let (Some(json), Some(number), Some(ty), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            panic!("schema: bad field line {line:?}");
        };
        let number: u32 = number.parse().expect("schema: field number");
        let (repeated, ty) = match ty.strip_prefix("[]") {
            Some(rest) => (true, rest),
            None => (false, ty),
        };
        let (map, ty) = match ty.strip_prefix("{}") {
            Some(rest) => (true, rest),
            None => (false, ty),
        };
        let (pointer, ty) = match ty.strip_suffix('?') {
            Some(rest) => (true, rest),
            None => (false, ty),
        };
        let field = Field {
            json: if json == "-" { "" } else { json },
            number,
            kind: kind_of(ty),
            pointer,
            repeated,
            map,
        };
        raw.last_mut()
            .expect("schema: field before message")
            .1
            .push(field);
    }
    let mut table: HashMap<&'static str, Message> = HashMap::new();
    for (name, mut fields) in raw.iter().cloned() {
        fields.sort_by_key(|f| f.number);
        let mut keys = HashSet::new();
        collect_keys(&raw, &fields, &mut keys);
        let dup = table.insert(name, Message { fields, keys });
        assert!(dup.is_none(), "schema: message {name} defined twice");
    }
    for m in table.values() {
        for f in &m.fields {
            if let Kind::Msg(n) = f.kind {
                assert!(table.contains_key(n), "schema: unknown message {n}");
            }
        }
    }
    table
}

/// The JSON keys of `fields`, through inline embedded structs.
fn collect_keys(
    raw: &[(&'static str, Vec<Field>)],
    fields: &[Field],
    keys: &mut HashSet<&'static str>,
) {
    for f in fields {
        if !f.json.is_empty() {
            keys.insert(f.json);
            continue;
        }
        let Kind::Msg(inner) = f.kind else {
            panic!("schema: an inline field must be a message");
        };
        let (_, inner_fields) = raw
            .iter()
            .find(|(n, _)| *n == inner)
            .unwrap_or_else(|| panic!("schema: unknown message {inner}"));
        collect_keys(raw, inner_fields, keys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_parses_and_orders_fields() {
        let meta = message("ObjectMeta").unwrap();
        let numbers: Vec<u32> = meta.fields.iter().map(|f| f.number).collect();
        let mut sorted = numbers.clone();
        sorted.sort_unstable();
        assert_eq!(numbers, sorted);
        assert!(message("Probe").unwrap().keys.contains("exec"));
        assert!(message("ConfigMapKeySelector")
            .unwrap()
            .keys
            .contains("name"));
        assert!(message("Pod").is_some() && message("Widget").is_none());
    }
}
