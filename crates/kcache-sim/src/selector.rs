//! Label and field selectors, parsed with the apiserver's grammar and error messages
//! (deliberately independent of kcache's own implementation).

use super::types::{FieldPath, ResourceType};
use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    NotEq,
    In,
    NotIn,
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector (requirements are ANDed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
    End,
}

impl Tok {
    fn lit(&self) -> &str {
        match self {
            Tok::Ident(s) => s,
            Tok::Bang => "!",
            Tok::Eq => "=",
            Tok::DoubleEq => "==",
            Tok::NotEq => "!=",
            Tok::Open => "(",
            Tok::Close => ")",
            Tok::Comma => ",",
            Tok::Gt => ">",
            Tok::Lt => "<",
            Tok::End => "",
        }
    }
}

fn lex(input: &str) -> Vec<Tok> {
    let chars: Vec<char> = input.chars().collect();
    let mut toks = Vec::new();
    let special = |c: char| matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<');
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let (tok, len) = match (c, next) {
            ('!', Some('=')) => (Tok::NotEq, 2),
            ('=', Some('=')) => (Tok::DoubleEq, 2),
            ('!', _) => (Tok::Bang, 1),
            ('=', _) => (Tok::Eq, 1),
            ('(', _) => (Tok::Open, 1),
            (')', _) => (Tok::Close, 1),
            (',', _) => (Tok::Comma, 1),
            ('>', _) => (Tok::Gt, 1),
            ('<', _) => (Tok::Lt, 1),
            _ => {
                let start = i;
                let mut j = i;
                while j < chars.len() && !chars[j].is_whitespace() && !special(chars[j]) {
                    j += 1;
                }
                (Tok::Ident(chars[start..j].iter().collect()), j - start)
            }
        };
        toks.push(tok);
        i += len;
    }
    toks.push(Tok::End);
    toks
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Tok {
        self.toks.get(self.pos).cloned().unwrap_or(Tok::End)
    }

    fn next(&mut self) -> Tok {
        let t = self.peek();
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            match self.peek() {
                Tok::Ident(_) | Tok::Bang => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    match self.next() {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let t = self.peek();
                            if !matches!(t, Tok::Ident(_) | Tok::Bang) {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    t.lit()
                                ));
                            }
                        }
                        t => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                t.lit()
                            ))
                        }
                    }
                }
                Tok::End => return Ok(reqs),
                t => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.lit()
                    ))
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut t = self.next();
        let negated = t == Tok::Bang;
        if negated {
            t = self.next();
        }
        let Tok::Ident(key) = t else {
            return Err(format!("found '{}', expected: identifier", t.lit()));
        };
        if negated {
            return Ok(Requirement {
                key,
                op: Op::NotExists,
                values: vec![],
            });
        }
        if matches!(self.peek(), Tok::End | Tok::Comma) {
            return Ok(Requirement {
                key,
                op: Op::Exists,
                values: vec![],
            });
        }
        let op = match self.next() {
            Tok::Eq | Tok::DoubleEq => Op::Eq,
            Tok::NotEq => Op::NotEq,
            Tok::Gt => Op::Gt(0),
            Tok::Lt => Op::Lt(0),
            Tok::Ident(w) if w == "in" => Op::In,
            Tok::Ident(w) if w == "notin" => Op::NotIn,
            t => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    t.lit()
                ))
            }
        };
        let values = match op {
            Op::In | Op::NotIn => self.set_values()?,
            _ => self.exact_value()?,
        };
        let op = match op {
            Op::Gt(_) | Op::Lt(_) => {
                let n: i64 = values.first().and_then(|v| v.parse().ok()).ok_or_else(|| {
                    "for 'Gt', 'Lt' operators, the value must be an integer".to_string()
                })?;
                if matches!(op, Op::Gt(_)) {
                    Op::Gt(n)
                } else {
                    Op::Lt(n)
                }
            }
            op => op,
        };
        Ok(Requirement { key, op, values })
    }

    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        match self.peek() {
            Tok::End | Tok::Comma => Ok(vec![String::new()]),
            _ => match self.next() {
                Tok::Ident(v) => Ok(vec![v]),
                t => Err(format!("found '{}', expected: identifier", t.lit())),
            },
        }
    }

    fn set_values(&mut self) -> Result<Vec<String>, String> {
        let t = self.next();
        if t != Tok::Open {
            return Err(format!("found '{}' expected: '('", t.lit()));
        }
        match self.peek() {
            Tok::Ident(_) | Tok::Comma => {
                let vals = self.ident_list()?;
                let t = self.next();
                if t != Tok::Close {
                    return Err(format!("found '{}', expected: ')'", t.lit()));
                }
                Ok(vals)
            }
            Tok::Close => {
                self.next();
                Ok(vec![String::new()])
            }
            t => Err(format!(
                "found '{}', expected: ',', ')' or identifier",
                t.lit()
            )),
        }
    }

    fn ident_list(&mut self) -> Result<Vec<String>, String> {
        let mut vals = Vec::new();
        loop {
            match self.next() {
                Tok::Ident(v) => {
                    vals.push(v);
                    match self.peek() {
                        Tok::Comma => {
                            self.next();
                            if self.peek() == Tok::Close {
                                vals.push(String::new());
                                return Ok(vals);
                            }
                        }
                        Tok::Close => return Ok(vals),
                        t => return Err(format!("found '{}', expected: ',' or ')'", t.lit())),
                    }
                }
                Tok::Comma => {
                    vals.push(String::new());
                    if self.peek() == Tok::Close {
                        return Ok(vals);
                    }
                }
                t => return Err(format!("found '{}', expected: ',', or identifier", t.lit())),
            }
        }
    }
}

impl LabelSelector {
    /// Parses `labelSelector`; the error is the apiserver's 400 message.
    pub fn parse(input: &str) -> Result<LabelSelector, String> {
        let mut p = Parser {
            toks: lex(input),
            pos: 0,
        };
        Ok(LabelSelector { reqs: p.parse()? })
    }

    /// True when the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| {
            let v = get(&r.key);
            match &r.op {
                Op::Eq | Op::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotEq | Op::NotIn => v.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                Op::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

/// One parsed `label op value` term before the type check.
#[derive(Clone, Debug)]
pub struct FieldTermRaw {
    label: String,
    negate: bool,
    value: String,
}

#[derive(Clone, Debug)]
struct FieldTerm {
    path: FieldPath,
    value: String,
    negate: bool,
}

/// A parsed field selector, already checked against the resource type.
#[derive(Clone, Debug, Default)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

/// Splits on commas not escaped by a backslash.
fn split_terms(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == ',' {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
}

fn unescape(v: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid escape sequence: \\{e}")),
                None => return Err("invalid escape sequence: \\".into()),
            },
            ',' | '=' => return Err(format!("invalid field selector: unescaped character '{c}'")),
            c => out.push(c),
        }
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses `fieldSelector` syntax (400 messages as the apiserver's); labels are checked
    /// later by [`FieldSelector::resolve`], after ListOptions validation, as the apiserver does.
    pub fn parse_terms(input: &str) -> Result<Vec<FieldTermRaw>, String> {
        let mut parts = split_terms(input);
        parts.sort();
        let mut parsed = Vec::new();
        for part in parts.iter().filter(|p| !p.is_empty()) {
            let split = (0..part.len())
                .filter(|i| part.is_char_boundary(*i))
                .find_map(|i| {
                    let rest = &part[i..];
                    ["!=", "==", "="]
                        .iter()
                        .find(|op| rest.starts_with(**op))
                        .map(|op| (&part[..i], *op, &rest[op.len()..]))
                });
            let Some((lhs, op, rhs)) = split else {
                return Err(format!(
                    "invalid selector: '{input}'; can't understand '{part}'"
                ));
            };
            parsed.push(FieldTermRaw {
                label: lhs.to_string(),
                negate: op == "!=",
                value: unescape(rhs)?,
            });
        }
        Ok(parsed)
    }

    /// Checks each label against the type (the apiserver's field label conversion).
    pub fn resolve(terms: Vec<FieldTermRaw>, rt: &ResourceType) -> Result<FieldSelector, String> {
        let mut out = Vec::new();
        for t in terms {
            let path = rt.field_path(&t.label)?;
            out.push(FieldTerm {
                path,
                value: t.value,
                negate: t.negate,
            });
        }
        Ok(FieldSelector { terms: out })
    }

    /// Parses and resolves in one step.
    pub fn parse(input: &str, rt: &ResourceType) -> Result<FieldSelector, String> {
        Self::resolve(Self::parse_terms(input)?, rt)
    }

    /// True when the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value of `metadata.name=` when the selector pins a single name (for the
    /// legacy `/watch/.../NAME` path and quick lookups).
    pub fn with_name(name: &str, rt: &ResourceType) -> FieldSelector {
        let path = rt.field_path("metadata.name").unwrap_or(FieldPath {
            path: "metadata.name".into(),
            default: "",
        });
        FieldSelector {
            terms: vec![FieldTerm {
                path,
                value: name.into(),
                negate: false,
            }],
        }
    }

    /// The value an `=` term requires of `metadata.name`, if one does (the first).
    pub fn required_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| !t.negate && t.path.path == "metadata.name")
            .map(|t| t.value.as_str())
    }

    /// Adds the terms of `other` (AND).
    pub fn and(mut self, other: FieldSelector) -> FieldSelector {
        self.terms.extend(other.terms);
        self
    }

    /// Matches an object.
    pub fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|t| {
            let mut cur = Some(obj);
            for seg in t.path.path.split('.') {
                cur = cur.and_then(|v| v.get(seg));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => t.path.default.to_string(),
            };
            (actual == t.value) != t.negate
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "front", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=web"));
        assert!(m("app==web,tier=front"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db)"));
        assert!(!m("tier notin (front)"));
        assert!(m("missing notin (x)"));
        assert!(m("app"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("n>4"));
        assert!(!m("n<5"));
        assert!(m(""));
    }

    #[test]
    fn label_errors_match_apiserver() {
        assert_eq!(
            LabelSelector::parse("app in (web").unwrap_err(),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            LabelSelector::parse("app==web=").unwrap_err(),
            "found '=', expected: ',' or 'end of string'"
        );
    }

    #[test]
    fn field_selectors() {
        let types = super::super::types::builtins();
        let pods = types.iter().find(|t| t.resource == "pods").unwrap();
        let cms = types.iter().find(|t| t.resource == "configmaps").unwrap();
        let o = obj(json!({}));
        assert!(FieldSelector::parse("spec.nodeName=n1", pods)
            .unwrap()
            .matches(&o));
        assert!(
            FieldSelector::parse("spec.nodeName!=n2,metadata.name=a", pods)
                .unwrap()
                .matches(&o)
        );
        assert!(!FieldSelector::parse("metadata.namespace=other", cms)
            .unwrap()
            .matches(&o));
        assert!(FieldSelector::parse("status.phase=", pods)
            .unwrap()
            .matches(&o));
        assert_eq!(
            FieldSelector::parse("data.index=1", cms).unwrap_err(),
            "\"data.index\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert_eq!(
            FieldSelector::parse("spec.containers.image=x", pods).unwrap_err(),
            "field label not supported: spec.containers.image"
        );
        // v1.28: Service has no field-label conversion; a newer apiserver selects spec.type.
        let svc = types.iter().find(|t| t.resource == "services").unwrap();
        assert_eq!(
            FieldSelector::parse("spec.type=ClusterIP", svc).unwrap_err(),
            "\"spec.type\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        let newer = svc
            .clone()
            .with_selectable_fields(&["spec.type", "spec.clusterIP"]);
        let s = json!({"metadata": {"name": "a"}, "spec": {"type": "ClusterIP"}});
        assert!(FieldSelector::parse("spec.type=ClusterIP", &newer)
            .unwrap()
            .matches(&s));
        assert!(FieldSelector::parse("spec.clusterIP=", &newer)
            .unwrap()
            .matches(&s));
        assert_eq!(
            FieldSelector::parse("spec.ports=1", &newer).unwrap_err(),
            "field label not supported: spec.ports"
        );
        assert_eq!(
            FieldSelector::parse("metadata.name", cms).unwrap_err(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
    }
}
