//! Field selectors as `pkg/fields/selector.go` parses them: the requirement and selector types,
//! the term splitting and value escaping (`\,` `\=` `\\`) with the apiserver's errors, the
//! canonical text form, and matching against an object's field values.
//!
//! Separate from label selectors (a different, much smaller grammar) and from the per-resource
//! rules of which fields exist ([`super::field_support`]), which parsing does not consult.

use std::fmt::{self, Write as _};

use super::SelectorError;

/// Operator of one field requirement (`=` and `==` are the same operator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOp {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// One comma-separated term of a field selector. `value` is unescaped; `field` is taken
/// verbatim (the apiserver neither unescapes nor trims it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field name, e.g. `spec.nodeName`.
    pub field: String,
    /// The operator.
    pub op: FieldOp,
    /// The unescaped value; `""` is meaningful (`spec.nodeName=` selects unscheduled pods).
    pub value: String,
}

impl FieldRequirement {
    /// Whether the object's value for the field (missing counts as `""`, like the apiserver's
    /// field sets) satisfies the requirement.
    pub fn matches_value(&self, actual: Option<&str>) -> bool {
        let actual = actual.unwrap_or("");
        match self.op {
            FieldOp::Equals => actual == self.value,
            FieldOp::NotEquals => actual != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Equals => "=",
            FieldOp::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_field_value(&self.value))
    }
}

/// A parsed field selector: the AND of its requirements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub(super) requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses a `fieldSelector` query value: comma-separated `field=value`, `field==value` or
    /// `field!=value` terms; in values `\,` `\=` `\\` are escapes and a bare `,`/`=` is an error.
    /// Empty terms are skipped and a term with empty field and value (`=`) selects everything,
    /// as in the apiserver. Errors carry the apiserver's message verbatim.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parts = split_terms(s);
        // Parse errors surface in the apiserver's order: raw terms sorted bytewise.
        parts.sort_unstable();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, raw_value)) = split_term(part) else {
                return Err(SelectorError::new(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let value = unescape_field_value(raw_value)?;
            if field.is_empty() && value.is_empty() {
                continue;
            }
            requirements.push(FieldRequirement {
                field: field.to_string(),
                op,
                value,
            });
        }
        // Canonical order (by rendered term) makes parse(display(x)) == x even where escaping
        // would reorder raw terms; it orders distinct field names exactly as the raw sort does,
        // so the first unsupported field reported by convert_fields is still the apiserver's.
        requirements.sort_by_cached_key(|r| r.to_string());
        Ok(Self { requirements })
    }

    /// The selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// True when the selector has no requirement and therefore matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, in canonical order.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether an object is selected. `fields` returns the object's value of a field; `None`
    /// counts as `""`, like the apiserver's field sets (see [`extract_fields`](super::extract_fields)).
    ///
    /// The value lifetime `'v` is free so that closures over borrowed object data qualify;
    /// a signature tying it to the field-name argument would only accept `'static` values.
    pub fn matches<'v>(&self, fields: &dyn Fn(&str) -> Option<&'v str>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(fields(&r.field)))
    }

    /// [`FieldSelector::matches`] over the output of [`extract_fields`](super::extract_fields).
    pub fn matches_fields(&self, fields: &[(&'static str, String)]) -> bool {
        self.matches(&|name| {
            fields
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        })
    }

    /// Split off the requirements `take` claims (kcache's index-field extension); the rest stay
    /// a selector in canonical order.
    pub fn partition<T>(
        self,
        mut take: impl FnMut(&FieldRequirement) -> Option<T>,
    ) -> (FieldSelector, Vec<T>) {
        let mut taken = Vec::new();
        let mut rest = Vec::new();
        for r in self.requirements {
            match take(&r) {
                Some(t) => taken.push(t),
                None => rest.push(r),
            }
        }
        (FieldSelector { requirements: rest }, taken)
    }

    /// The value a matching object must have for `field`, if an `=` term pins it (the first
    /// such term). Useful for index lookups such as `metadata.name` or `spec.nodeName`.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.op == FieldOp::Equals && r.field == field)
            .map(|r| r.value.as_str())
    }
}

/// Canonical form (values escaped, `==` written `=`); it re-parses to an equal selector.
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_char(',')?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Escapes `\`, `,` and `=` in a field selector value.
pub fn escape_field_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Reverses [`escape_field_value`], with the apiserver's errors for unknown escapes, a trailing
/// backslash, and a bare `,` or `=` (which Go prints as its code point number, e.g. 61).
pub fn unescape_field_value(raw: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(raw.len());
    let mut in_slash = false;
    for c in raw.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::new(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                )));
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(SelectorError::new(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )))
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError::new(
            "invalid field selector: invalid escape sequence: \\",
        ));
    }
    Ok(out)
}

/// Splits on commas not preceded by an escaping backslash; escapes stay in the terms.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(s.get(start..i).unwrap_or_default());
            start = i + 1;
        }
    }
    terms.push(s.get(start..).unwrap_or_default());
    terms
}

/// Splits at the first position where `!=`, `==` or `=` starts (tried in that order). The
/// field part gets no escape handling, so a field never contains `=`.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    const OPS: [(&str, FieldOp); 3] = [
        ("!=", FieldOp::NotEquals),
        ("==", FieldOp::Equals),
        ("=", FieldOp::Equals),
    ];
    for (i, _) in term.char_indices() {
        let rest = term.get(i..)?;
        for (op, kind) in OPS {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((term.get(..i)?, kind, value));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{field_err, labels};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn fixture_err_list_cm_malformed_field_selector() {
        assert_eq!(
            field_err("metadata.name"),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
    }

    #[test]
    fn field_parse_messages() {
        assert_eq!(
            field_err("a=b,metadata.name"),
            "invalid selector: 'a=b,metadata.name'; can't understand 'metadata.name'"
        );
        assert_eq!(
            field_err("a=b\\x"),
            "invalid field selector: invalid escape sequence: \\x"
        );
        assert_eq!(
            field_err("a=b\\"),
            "invalid field selector: invalid escape sequence: \\"
        );
        assert_eq!(
            field_err("a=b=c"),
            "invalid field selector: unescaped character in value: 61"
        );
        assert_eq!(
            field_err("a===b"),
            "invalid field selector: unescaped character in value: 61"
        );
        // Terms are checked in sorted order: "a..." fails before "z...".
        assert_eq!(
            field_err("zzz,a=\\q"),
            "invalid field selector: invalid escape sequence: \\q"
        );
    }

    #[test]
    fn field_parse_shapes() {
        let sel =
            FieldSelector::parse("spec.nodeName=node-1,metadata.name!=x,status.phase==Running")
                .unwrap();
        let got: Vec<(String, FieldOp, String)> = sel
            .requirements()
            .iter()
            .map(|r| (r.field.clone(), r.op, r.value.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("metadata.name".into(), FieldOp::NotEquals, "x".into()),
                ("spec.nodeName".into(), FieldOp::Equals, "node-1".into()),
                ("status.phase".into(), FieldOp::Equals, "Running".into()),
            ]
        );
        assert_eq!(
            sel.to_string(),
            "metadata.name!=x,spec.nodeName=node-1,status.phase=Running"
        );
        // Escapes in values; the value keeps what the escapes stand for.
        let sel = FieldSelector::parse("metadata.name=a\\,b\\=c\\\\d").unwrap();
        assert_eq!(sel.requirements()[0].value, "a,b=c\\d");
        assert_eq!(sel.to_string(), "metadata.name=a\\,b\\=c\\\\d");
        // Empty value is a real value.
        let sel = FieldSelector::parse("spec.nodeName=").unwrap();
        assert_eq!(sel.requirements()[0].value, "");
        // Empty terms and `=` (empty field and value) are dropped; whitespace is kept.
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert!(FieldSelector::parse(",,").unwrap().is_empty());
        assert!(FieldSelector::parse("=").unwrap().is_empty());
        assert!(FieldSelector::parse("!=").unwrap().is_empty());
        assert_eq!(FieldSelector::parse("=,a=b").unwrap().to_string(), "a=b");
        let sel = FieldSelector::parse(" a = b ").unwrap();
        assert_eq!(sel.requirements()[0].field, " a ");
        assert_eq!(sel.requirements()[0].value, " b ");
        assert_eq!(
            FieldSelector::parse("=x").unwrap().requirements()[0].field,
            ""
        );
        assert_eq!(
            FieldSelector::parse("a!b=c").unwrap().requirements()[0].field,
            "a!b"
        );
    }

    #[test]
    fn field_matching_semantics() {
        let pod = |node: &str, phase: &str| {
            vec![
                ("metadata.name", "p".to_string()),
                ("spec.nodeName", node.to_string()),
                ("status.phase", phase.to_string()),
            ]
        };
        let check = |s: &str, f: &[(&'static str, String)]| {
            FieldSelector::parse(s).unwrap().matches_fields(f)
        };
        assert!(check("spec.nodeName=node-1", &pod("node-1", "Pending")));
        assert!(!check("spec.nodeName=node-1", &pod("node-2", "Pending")));
        // `spec.nodeName=` selects unscheduled pods.
        assert!(check("spec.nodeName=", &pod("", "Pending")));
        assert!(!check("spec.nodeName=", &pod("node-1", "Pending")));
        assert!(check("spec.nodeName!=", &pod("node-1", "Pending")));
        assert!(check(
            "spec.nodeName==node-1,status.phase!=Running",
            &pod("node-1", "Pending")
        ));
        assert!(!check(
            "spec.nodeName==node-1,status.phase!=Running",
            &pod("node-1", "Running")
        ));
        // Missing fields read as "".
        assert!(check("metadata.namespace=", &pod("n", "Pending")));
        assert!(!check("metadata.namespace=x", &pod("n", "Pending")));
        assert!(check("metadata.namespace!=x", &pod("n", "Pending")));
        // Escaped value.
        let odd = vec![("metadata.name", "a,b=c".to_string())];
        assert!(check("metadata.name=a\\,b\\=c", &odd));
        // The closure form works over borrowed data.
        let map: BTreeMap<String, String> = labels(&[("metadata.name", "x")]);
        let sel = FieldSelector::parse("metadata.name=x").unwrap();
        assert!(sel.matches(&|k| map.get(k).map(String::as_str)));
        assert!(FieldSelector::everything().matches(&|_| None));
    }

    #[test]
    fn field_requires_exact_match() {
        let sel = FieldSelector::parse("metadata.name!=a,spec.nodeName=n1").unwrap();
        assert_eq!(sel.requires_exact_match("spec.nodeName"), Some("n1"));
        assert_eq!(sel.requires_exact_match("metadata.name"), None);
    }

    proptest! {
        #[test]
        fn field_round_trip(terms in proptest::collection::vec(
            ("[a-zA-Z][a-zA-Z.]{0,12}", any::<bool>(), "[a-z0-9,=\\\\ !é-]{0,8}"), 0..6)) {
            let sel = FieldSelector {
                requirements: terms
                    .iter()
                    .map(|(f, neq, v)| FieldRequirement {
                        field: f.clone(),
                        op: if *neq { FieldOp::NotEquals } else { FieldOp::Equals },
                        value: v.clone(),
                    })
                    .collect(),
            };
            let printed = sel.to_string();
            let parsed = FieldSelector::parse(&printed);
            prop_assert!(parsed.is_ok(), "{:?} -> {:?}", printed, parsed);
            let parsed = parsed.unwrap();
            let mut want = sel.requirements.clone();
            want.sort_by_cached_key(|r| r.to_string());
            prop_assert_eq!(parsed.requirements(), want.as_slice());
            prop_assert_eq!(FieldSelector::parse(&parsed.to_string()), Ok(parsed.clone()));
        }

        #[test]
        fn field_escape_round_trip(v in any::<String>()) {
            prop_assert_eq!(unescape_field_value(&escape_field_value(&v)), Ok(v));
        }
    }
}
