//! A borrowed view of a JSON object: its members in document order, each value left as the
//! unparsed text it is in the document (a `&RawValue`). Reading an object's head this way
//! allocates nothing per value and no `serde_json::Value` tree: only the members that are read
//! are parsed further, and strings without escapes are slices of the document itself, so the
//! cache can keep them as positions in the object's bytes (kcache's `object` module).
//!
//! Lookups follow `serde_json::Value`'s rules, which the cache used before: the last of
//! duplicate keys wins, and reading a member of something that is not an object gives nothing.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The members of one JSON object, borrowed from the document.
#[derive(Debug, Default)]
pub struct Members<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> Members<'a> {
    /// Parse a whole JSON document. Invalid JSON is an error; valid JSON that is not an object
    /// has no members.
    pub fn parse(text: &'a str) -> Result<Members<'a>, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The members of a value inside a parsed document (none if it is not an object).
    pub fn of(value: &'a RawValue) -> Members<'a> {
        // The document was validated when its enclosing value was parsed.
        Members::parse(value.get()).unwrap_or_default()
    }

    /// The value of `key` (the last one, if the key is repeated).
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.members
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
    }

    /// The members of the object at `key` (none if absent or not an object).
    pub fn object(&self, key: &str) -> Members<'a> {
        self.get(key).map(Members::of).unwrap_or_default()
    }

    /// The string at `key`, if it is one.
    pub fn str(&self, key: &str) -> Option<Cow<'a, str>> {
        self.get(key).and_then(as_str)
    }

    /// Every member in document order (repeated keys included).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &'a RawValue)> + '_ {
        self.members.iter().map(|(k, v)| (k.as_ref(), *v))
    }

    /// Every member in document order, keys as parsed (borrowed unless escaped).
    pub fn entries(&self) -> &[(Cow<'a, str>, &'a RawValue)] {
        &self.members
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// A JSON string's value: a slice of the document when it has no escapes (the common case,
/// and what lets the cache point into the object's bytes), else decoded.
pub fn as_str(value: &RawValue) -> Option<Cow<'_, str>> {
    let text = value.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

/// A JSON boolean.
pub fn as_bool(value: &RawValue) -> Option<bool> {
    match value.get() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// A JSON number, as `serde_json::Value` would hold it (so that it renders the same).
pub fn as_number(value: &RawValue) -> Option<serde_json::Number> {
    let text = value.get();
    if !text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// The elements of a JSON array (none if it is not one).
pub fn elements(value: &RawValue) -> Vec<&RawValue> {
    if !value.get().starts_with('[') {
        return Vec::new();
    }
    serde_json::from_str(value.get()).unwrap_or_default()
}

/// Where `part` starts in `doc`, if it is a slice of it: how a borrowed string becomes a
/// position in the bytes the cache keeps. Only addresses are compared.
pub fn offset_in(doc: &str, part: &str) -> Option<usize> {
    let start = doc.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    (at >= start && at + part.len() <= start + doc.len()).then(|| at - start)
}

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MembersVisitor(std::marker::PhantomData))
    }
}

struct MembersVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de> Visitor<'de> for MembersVisitor<'de> {
    type Value = Members<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut members = Vec::new();
        while let Some(Key(k)) = map.next_key()? {
            let v: &'de RawValue = map.next_value()?;
            members.push((k, v));
        }
        Ok(Members { members })
    }

    // Anything else is valid JSON without members (it is still read through, so that the
    // whole document is checked).
    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Members::default())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Members::default())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Members::default())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Members::default())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Members::default())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Members::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Members::default())
    }
}

/// An object key, borrowed unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(s)))
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_borrow_unescaped_strings_and_decode_escaped_ones() {
        let doc = r#"{"a":"plain","b":"esc\"aped\u00e9","c":{"d":[1,2]},"a":"last"}"#;
        let m = Members::parse(doc).unwrap();
        // The last of a repeated key wins, as in serde_json::Value.
        let a = m.str("a").unwrap();
        assert!(matches!(a, Cow::Borrowed("last")));
        assert_eq!(offset_in(doc, &a), doc.find("last"));
        let b = m.str("b").unwrap();
        assert!(matches!(b, Cow::Owned(_)));
        assert_eq!(b, "esc\"apedé");
        assert_eq!(offset_in(doc, &b), None);
        assert_eq!(elements(m.object("c").get("d").unwrap()).len(), 2);
        assert!(m.object("a").is_empty());
        assert!(m.object("missing").is_empty());
        assert_eq!(m.str("c"), None);
    }

    #[test]
    fn escaped_keys_and_non_objects() {
        let m = Members::parse(r#"{"k\u0065y":true, "n": -1.5e3}"#).unwrap();
        assert_eq!(m.get("key").map(as_bool), Some(Some(true)));
        assert_eq!(
            m.get("n").and_then(as_number).map(|n| n.to_string()),
            Some(serde_json::json!(-1.5e3).to_string())
        );
        for doc in ["[1,{\"a\":2}]", "3", "\"s\"", "null", "true"] {
            assert!(Members::parse(doc).unwrap().is_empty(), "{doc}");
        }
        for bad in ["{", "{\"a\":}", "[1", "{\"a\":1} x", "{\"a\":\"\\q\"}"] {
            assert!(Members::parse(bad).is_err(), "{bad}");
        }
    }
}
