//! Label selectors as values: the requirement and selector types, their canonical text form
//! and matching against an object's labels.
//!
//! Separate from the grammar (`label_parser.rs`, which also holds [`LabelSelector::parse`]) so
//! that code that only holds or applies a parsed selector (the cache, the watch routing) reads
//! the semantics without the lexer and the apiserver's error wording around them. The parser
//! produces these types; this module does not know the parser.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// Operator of one label requirement. `==` parses to [`LabelOp::Equals`]: the apiserver treats
/// the two spellings identically.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOp {
    /// `key=value` / `key==value`: the label exists and has that value.
    Equals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (a,b)`: the label exists and has one of the values.
    In,
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn,
    /// `key`: the label exists.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>N`: the label exists, is an integer, and is greater than N.
    GreaterThan,
    /// `key<N`: the label exists, is an integer, and is less than N.
    LessThan,
}

/// One comma-separated term of a label selector. `values` is sorted and free of duplicates
/// (the apiserver keeps them in a string set); it is empty for `Exists`/`DoesNotExist` and has
/// exactly one entry for the exact-match and `>`/`<` operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    /// The label key (a valid qualified name).
    pub key: String,
    /// The operator.
    pub op: LabelOp,
    /// The operand values (valid label values).
    pub values: Vec<String>,
}

impl LabelRequirement {
    /// Whether a label set satisfies this requirement, with the apiserver's semantics: `!=` and
    /// `notin` match objects lacking the key; `>`/`<` never match a missing or non-integer label.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_value(labels.get(&self.key).map(String::as_str))
    }

    /// [`LabelRequirement::matches`] given the object's value of this requirement's key.
    pub fn matches_value(&self, actual: Option<&str>) -> bool {
        match self.op {
            LabelOp::Equals | LabelOp::In => {
                actual.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            LabelOp::NotEquals | LabelOp::NotIn => {
                actual.is_none_or(|v| !self.values.iter().any(|x| x == v))
            }
            LabelOp::Exists => actual.is_some(),
            LabelOp::DoesNotExist => actual.is_none(),
            LabelOp::GreaterThan | LabelOp::LessThan => {
                let Some(have) = actual.and_then(parse_go_int64) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Some(want) = parse_go_int64(want) else {
                    return false;
                };
                if self.op == LabelOp::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == LabelOp::DoesNotExist {
            f.write_char('!')?;
        }
        f.write_str(&self.key)?;
        let op = match self.op {
            LabelOp::Exists | LabelOp::DoesNotExist => return Ok(()),
            LabelOp::Equals => "=",
            LabelOp::NotEquals => "!=",
            LabelOp::GreaterThan => ">",
            LabelOp::LessThan => "<",
            LabelOp::In => " in ",
            LabelOp::NotIn => " notin ",
        };
        f.write_str(op)?;
        let set = matches!(self.op, LabelOp::In | LabelOp::NotIn);
        if set {
            f.write_char('(')?;
        }
        f.write_str(&self.values.join(","))?;
        if set {
            f.write_char(')')?;
        }
        Ok(())
    }
}

/// A parsed label selector: the AND of its requirements, sorted by key like the apiserver's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// The selector of these requirements, in the order the apiserver keeps them.
    pub(super) fn from_requirements(mut requirements: Vec<LabelRequirement>) -> Self {
        // The apiserver sorts by key so that equivalent selectors print alike; a stable sort keeps
        // same-key requirements in source order, which Display then reproduces.
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self { requirements }
    }

    /// The selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// True when the selector has no requirement and therefore matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }

    /// Whether an object with these labels is selected (all requirements hold).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// [`LabelSelector::matches`] reading the labels through a lookup, for objects that keep
    /// their labels in their own bytes rather than in a map (see kcache's `object` module).
    pub fn matches_with<'v>(&self, label: &dyn Fn(&str) -> Option<&'v str>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(label(&r.key)))
    }

    /// The value a matching object must have for `key`, if the selector pins one: the first
    /// requirement on `key` decides, and only `=`/`==`/`in` with a single value pin it. Useful
    /// for index lookups.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.op, r.values.as_slice()) {
            (LabelOp::Equals | LabelOp::In, [v]) => Some(v.as_str()),
            _ => None,
        }
    }
}

/// Canonical form (`==` is written `=`); it re-parses to an equal selector.
impl fmt::Display for LabelSelector {
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

/// Go's `strconv.ParseInt(s, 10, 64)`: optional sign, ASCII digits, no overflow. Rust's `i64`
/// parser accepts exactly that language.
pub(super) fn parse_go_int64(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::labels;
    use proptest::prelude::*;

    #[test]
    fn label_empty_and_whitespace_select_everything() {
        for s in ["", " ", "\t\r\n "] {
            let sel = LabelSelector::parse(s).unwrap();
            assert!(sel.is_empty());
            assert_eq!(sel, LabelSelector::everything());
            assert!(sel.matches(&labels(&[("any", "thing")])));
            assert_eq!(sel.to_string(), "");
        }
    }

    #[test]
    fn label_matching_semantics() {
        let web_front = labels(&[("app", "web"), ("tier", "front")]);
        let web = labels(&[("app", "web")]);
        let none = labels(&[]);
        let check =
            |s: &str, l: &BTreeMap<String, String>| LabelSelector::parse(s).unwrap().matches(l);

        assert!(check("app=web", &web));
        assert!(check("app==web", &web));
        assert!(!check("app=web", &none));
        // != and notin match objects lacking the key.
        assert!(check("tier!=front", &web));
        assert!(!check("tier!=front", &web_front));
        assert!(check("tier notin (front)", &web));
        assert!(check("tier notin (front)", &none));
        assert!(!check("tier notin (front,back)", &web_front));
        assert!(check("tier in (front,back)", &web_front));
        assert!(!check("tier in (front,back)", &web));
        assert!(check("tier", &web_front));
        assert!(!check("tier", &web));
        assert!(check("!tier", &web));
        assert!(!check("!tier", &web_front));
        // Comma is AND.
        assert!(check("app=web,tier=front", &web_front));
        assert!(!check("app=web,tier=front", &web));
        // `in ()` means the empty value, which a present empty label satisfies.
        assert!(check("tier in ()", &labels(&[("tier", "")])));
        assert!(!check("tier in ()", &none));
        assert!(check("tier=", &labels(&[("tier", "")])));
    }

    #[test]
    fn label_gt_lt_matching() {
        let check =
            |s: &str, l: &[(&str, &str)]| LabelSelector::parse(s).unwrap().matches(&labels(l));
        assert!(check("n>3", &[("n", "4")]));
        assert!(!check("n>3", &[("n", "3")]));
        assert!(check("n<3", &[("n", "-7")]));
        assert!(check("n<3", &[("n", "+2")]));
        assert!(!check("n<3", &[("n", "3")]));
        assert!(!check("n>3", &[]));
        assert!(!check("n>3", &[("n", "four")]));
        assert!(!check("n>3", &[("n", "99999999999999999999")]));
        assert!(!check("n<3", &[("n", "")]));
    }

    #[test]
    fn label_fixture_data_set() {
        // fixtures-a configmaps: 01..06 app=web,tier=front; 07..10 app=web,tier=back;
        // 11..13 app=db,tier=back; 14..15 app=web; 16..25 unlabelled.
        let cms: Vec<(String, BTreeMap<String, String>)> = (1..=25)
            .map(|i| {
                let l = match i {
                    1..=6 => labels(&[("app", "web"), ("tier", "front")]),
                    7..=10 => labels(&[("app", "web"), ("tier", "back")]),
                    11..=13 => labels(&[("app", "db"), ("tier", "back")]),
                    14..=15 => labels(&[("app", "web")]),
                    _ => labels(&[]),
                };
                (format!("cm-{i:02}"), l)
            })
            .collect();
        let select = |s: &str| -> Vec<String> {
            let sel = LabelSelector::parse(s).unwrap();
            cms.iter()
                .filter(|(_, l)| sel.matches(l))
                .map(|(n, _)| n.clone())
                .collect()
        };
        let names = |xs: &[u32]| xs.iter().map(|i| format!("cm-{i:02}")).collect::<Vec<_>>();
        assert_eq!(
            select("app=web,tier notin (front)"),
            names(&[7, 8, 9, 10, 14, 15])
        );
        assert_eq!(select("!tier"), names(&(14..=25).collect::<Vec<_>>()));
        assert_eq!(select("tier in (front)"), names(&[1, 2, 3, 4, 5, 6]));
        assert_eq!(select("app=web").len(), 12);
    }

    #[test]
    fn label_requires_exact_match() {
        let sel = LabelSelector::parse("app in (web),tier in (a,b),x!=y").unwrap();
        assert_eq!(sel.requires_exact_match("app"), Some("web"));
        assert_eq!(sel.requires_exact_match("tier"), None);
        assert_eq!(sel.requires_exact_match("x"), None);
        assert_eq!(sel.requires_exact_match("nope"), None);
    }

    fn label_key() -> impl Strategy<Value = String> {
        (
            proptest::option::of("[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?(\\.[a-z0-9]{1,4}){0,2}"),
            "[A-Za-z0-9]([A-Za-z0-9._-]{0,10}[A-Za-z0-9])?",
        )
            .prop_map(|(prefix, name)| match prefix {
                Some(p) => format!("{p}/{name}"),
                None => name,
            })
    }

    fn label_value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("in".to_string()),
            "[A-Za-z0-9]([A-Za-z0-9._-]{0,10}[A-Za-z0-9])?",
        ]
    }

    fn label_requirement_text() -> impl Strategy<Value = String> {
        // A set is written without repeats: the apiserver rejects some spellings with two empty
        // items (`(,,)`), and Display never produces them.
        (
            label_key(),
            0..9usize,
            proptest::collection::btree_set(label_value(), 1..4),
            0..1000u32,
        )
            .prop_map(|(k, op, vals, n)| {
                let vals: Vec<String> = vals.into_iter().collect();
                match op {
                    0 => format!("{k}={}", vals[0]),
                    1 => format!("{k}=={}", vals[0]),
                    2 => format!("{k}!={}", vals[0]),
                    3 => format!("{k} in ({})", vals.join(",")),
                    4 => format!("{k} notin ({})", vals.join(", ")),
                    5 => k,
                    6 => format!("!{k}"),
                    7 => format!("{k}>{n}"),
                    _ => format!("{k} < {n}"),
                }
            })
    }

    proptest! {
        #[test]
        fn label_round_trip(reqs in proptest::collection::vec(label_requirement_text(), 0..6)) {
            let text = reqs.join(",");
            let sel = LabelSelector::parse(&text);
            prop_assert!(sel.is_ok(), "{:?} -> {:?}", text, sel);
            let sel = sel.unwrap();
            prop_assert_eq!(sel.requirements().len(), reqs.len());
            let printed = sel.to_string();
            prop_assert_eq!(LabelSelector::parse(&printed), Ok(sel.clone()));
        }
    }
}
