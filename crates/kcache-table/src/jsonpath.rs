//! The part of client-go's JSONPath that CRD `additionalPrinterColumns` use, evaluated on
//! JSON values with client-go's semantics (missing keys allowed): fields (`.a.b`, `['a.b']`),
//! `.*`, indexes and slices (`[0]`, `[-1]`, `[1:3]`, `[*]`) and filters
//! (`[?(@.type=="Ready")]`, `!=`, `<`, `<=`, `>`, `>=`, bare `[?(@.x)]` for existence).

use serde_json::Value;

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonPath {
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    /// `.*`: every value of a map, every element of an array.
    Wildcard,
    /// `[start:end]` (also `[i]` as `i:i+1` and `[*]` as `:`).
    Slice {
        start: Option<i64>,
        end: Option<i64>,
        /// `[i]`: the end was derived from the start (`i+1`).
        single: bool,
    },
    Filter(Filter),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Operand,
    /// `None` for `[?(@.x)]` (the element has `x`).
    op: Option<(CmpOp, Operand)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `@...`: a path relative to the element.
    Path(Vec<Step>),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// A JSONPath the printer does not handle (recursive descent, unions, functions, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unsupported(pub String);

impl JsonPath {
    /// Parses a CRD column `jsonPath` (without the `{}` template braces).
    pub(crate) fn parse(path: &str) -> Result<JsonPath, Unsupported> {
        let mut p = Parser {
            s: path.trim().as_bytes(),
            i: 0,
        };
        let steps = p.steps(false)?;
        if p.i != p.s.len() {
            return Err(Unsupported(format!("unexpected text in {path:?}")));
        }
        Ok(JsonPath { steps })
    }

    /// Whether the path reads only inside the object's `metadata` (its first step is that
    /// field): such a column can be printed from a PartialObjectMetadata.
    pub(crate) fn within_metadata(&self) -> bool {
        matches!(self.steps.first(), Some(Step::Field(f)) if f == "metadata")
    }

    /// client-go's `FindResults(...)[0]` with missing keys allowed; `Err` where client-go
    /// reports an error (index out of range, not a list, incomparable filter values).
    pub(crate) fn find<'a>(&self, root: &'a Value) -> Result<Vec<&'a Value>, ()> {
        eval(&self.steps, vec![root])
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn err<T>(&self, what: &str) -> Result<T, Unsupported> {
        Err(Unsupported(format!(
            "{what} at {} in {:?}",
            self.i,
            String::from_utf8_lossy(self.s)
        )))
    }

    /// Steps until the end, or (inside a filter) until an operator or `)`.
    fn steps(&mut self, in_filter: bool) -> Result<Vec<Step>, Unsupported> {
        let mut steps = Vec::new();
        // A leading `$` names the root.
        if self.peek() == Some(b'$') {
            self.i += 1;
        }
        while let Some(c) = self.peek() {
            match c {
                b'.' => {
                    self.i += 1;
                    if self.peek() == Some(b'.') {
                        return self.err("recursive descent");
                    }
                    if self.peek() == Some(b'*') {
                        self.i += 1;
                        steps.push(Step::Wildcard);
                        continue;
                    }
                    let name = self.field_name();
                    if name.is_empty() {
                        // A lone trailing `.` (or the path `.`) means the current value.
                        continue;
                    }
                    steps.push(Step::Field(name));
                }
                b'[' => {
                    self.i += 1;
                    steps.push(self.bracket()?);
                }
                b' ' | b'=' | b'!' | b'<' | b'>' | b')' if in_filter => break,
                _ => return self.err("unexpected character"),
            }
        }
        Ok(steps)
    }

    /// A field name up to the next terminator; `\` escapes the next character.
    fn field_name(&mut self) -> String {
        let mut name = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                b'\\' => {
                    self.i += 1;
                    if let Some(n) = self.peek() {
                        name.push(n);
                        self.i += 1;
                    }
                }
                b'.' | b'[' | b']' | b' ' | b',' | b'$' | b'@' | b'{' | b'}' | b'(' | b')'
                | b'=' | b'!' | b'<' | b'>' => break,
                _ => {
                    name.push(c);
                    self.i += 1;
                }
            }
        }
        String::from_utf8_lossy(&name).into_owned()
    }

    /// After `[`: an index, slice, `*`, quoted field name or filter, through `]`.
    fn bracket(&mut self) -> Result<Step, Unsupported> {
        let step = match self.peek() {
            Some(b'*') => {
                self.i += 1;
                Step::Slice {
                    start: None,
                    end: None,
                    single: false,
                }
            }
            Some(q @ (b'\'' | b'"')) => {
                self.i += 1;
                let name = self.quoted(q)?;
                Step::Field(name)
            }
            Some(b'?') => {
                self.i += 1;
                if self.peek() != Some(b'(') {
                    return self.err("expected ( after ?");
                }
                self.i += 1;
                let filter = self.filter()?;
                if self.peek() != Some(b')') {
                    return self.err("expected ) closing the filter");
                }
                self.i += 1;
                Step::Filter(filter)
            }
            _ => {
                let start = self.int()?;
                if self.peek() == Some(b':') {
                    self.i += 1;
                    let end = self.int()?;
                    if self.peek() == Some(b':') {
                        return self.err("slice step");
                    }
                    Step::Slice {
                        start,
                        end,
                        single: false,
                    }
                } else {
                    let Some(start) = start else {
                        return self.err("empty index");
                    };
                    Step::Slice {
                        start: Some(start),
                        end: Some(start + 1),
                        single: true,
                    }
                }
            }
        };
        if self.peek() != Some(b']') {
            return self.err("expected ]");
        }
        self.i += 1;
        Ok(step)
    }

    fn int(&mut self) -> Result<Option<i64>, Unsupported> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        if text.is_empty() {
            return Ok(None);
        }
        match text.parse() {
            Ok(n) => Ok(Some(n)),
            Err(_) => self.err("bad number"),
        }
    }

    fn quoted(&mut self, q: u8) -> Result<String, Unsupported> {
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            self.i += 1;
            if c == b'\\' {
                if let Some(n) = self.peek() {
                    out.push(n);
                    self.i += 1;
                }
            } else if c == q {
                return Ok(String::from_utf8_lossy(&out).into_owned());
            } else {
                out.push(c);
            }
        }
        self.err("unterminated quote")
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    fn filter(&mut self) -> Result<Filter, Unsupported> {
        self.skip_spaces();
        let left = self.operand()?;
        self.skip_spaces();
        let op = match (self.peek(), self.s.get(self.i + 1).copied()) {
            (Some(b'='), Some(b'=')) => Some((CmpOp::Eq, 2)),
            (Some(b'!'), Some(b'=')) => Some((CmpOp::Ne, 2)),
            (Some(b'<'), Some(b'=')) => Some((CmpOp::Le, 2)),
            (Some(b'>'), Some(b'=')) => Some((CmpOp::Ge, 2)),
            (Some(b'<'), _) => Some((CmpOp::Lt, 1)),
            (Some(b'>'), _) => Some((CmpOp::Gt, 1)),
            (Some(b')'), _) => None,
            _ => return self.err("unknown filter operator"),
        };
        let op = match op {
            None => None,
            Some((op, len)) => {
                self.i += len;
                self.skip_spaces();
                let right = self.operand()?;
                self.skip_spaces();
                Some((op, right))
            }
        };
        Ok(Filter { left, op })
    }

    fn operand(&mut self) -> Result<Operand, Unsupported> {
        match self.peek() {
            Some(b'@') => {
                self.i += 1;
                Ok(Operand::Path(self.steps(true)?))
            }
            Some(q @ (b'\'' | b'"')) => {
                self.i += 1;
                Ok(Operand::Str(self.quoted(q)?))
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                self.i += 1;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_digit() || c == b'.' || c == b'e' || c == b'E')
                {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                if let Ok(n) = text.parse::<i64>() {
                    Ok(Operand::Int(n))
                } else if let Ok(f) = text.parse::<f64>() {
                    Ok(Operand::Float(f))
                } else {
                    self.err("bad number")
                }
            }
            _ => {
                let rest = &self.s[self.i..];
                if rest.starts_with(b"true") {
                    self.i += 4;
                    Ok(Operand::Bool(true))
                } else if rest.starts_with(b"false") {
                    self.i += 5;
                    Ok(Operand::Bool(false))
                } else {
                    self.err("unsupported filter operand")
                }
            }
        }
    }
}

/// `template.Indirect`: JSON null counts as a nil value that later steps skip.
fn is_nil(v: &Value) -> bool {
    v.is_null()
}

fn eval<'a>(steps: &[Step], mut cur: Vec<&'a Value>) -> Result<Vec<&'a Value>, ()> {
    for step in steps {
        let mut next = Vec::new();
        match step {
            Step::Field(name) => {
                for v in cur.iter().copied().filter(|v| !is_nil(v)) {
                    if let Some(found) = v.as_object().and_then(|m| m.get(name)) {
                        next.push(found);
                    }
                }
            }
            Step::Wildcard => {
                for v in cur.iter().copied().filter(|v| !is_nil(v)) {
                    match v {
                        Value::Object(m) => next.extend(m.values()),
                        Value::Array(a) => next.extend(a.iter()),
                        _ => {}
                    }
                }
            }
            Step::Slice { start, end, single } => {
                // client-go stops at the first input that asks for zero elements.
                'inputs: for v in cur.iter().copied().filter(|v| !is_nil(v)) {
                    let Value::Array(items) = v else {
                        return Err(());
                    };
                    let len = items.len() as i64;
                    let mut s = start.unwrap_or(0);
                    if s < 0 {
                        s += len;
                    }
                    let mut e = end.unwrap_or(len);
                    if end.is_some() && (e < 0 || (*single && e == 0)) {
                        e += len;
                    }
                    if e == s {
                        break 'inputs;
                    }
                    if s >= len || s < 0 || e > len || e < 0 || s > e {
                        return Err(());
                    }
                    next.extend(items[s as usize..e as usize].iter());
                }
            }
            Step::Filter(filter) => {
                for v in cur.iter().copied().filter(|v| !is_nil(v)) {
                    let Value::Array(items) = v else {
                        return Err(());
                    };
                    for item in items {
                        if filter_matches(filter, item)? {
                            next.push(item);
                        }
                    }
                }
            }
        }
        cur = next;
        if cur.is_empty() {
            break;
        }
    }
    Ok(cur)
}

/// A comparable scalar in client-go's template comparison (`basicKind`).
enum Scalar<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
}

fn scalar(v: &Value) -> Result<Scalar<'_>, ()> {
    match v {
        Value::String(s) => Ok(Scalar::Str(s)),
        Value::Bool(b) => Ok(Scalar::Bool(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(Scalar::Int(i))
            } else {
                n.as_f64().map(Scalar::Float).ok_or(())
            }
        }
        _ => Err(()),
    }
}

fn filter_matches(filter: &Filter, item: &Value) -> Result<bool, ()> {
    let owned_left;
    let left: &Value = match &filter.left {
        Operand::Path(steps) => {
            let found = eval(steps, vec![item])?;
            match found.len() {
                0 => return Ok(false),
                1 => found[0],
                _ => return Err(()),
            }
        }
        lit => {
            owned_left = literal(lit);
            &owned_left
        }
    };
    let Some((op, right)) = &filter.op else {
        return Ok(true);
    };
    let owned_right;
    let right: &Value = match right {
        Operand::Path(steps) => {
            let found = eval(steps, vec![item])?;
            match found.len() {
                0 => return Ok(false),
                1 => found[0],
                _ => return Err(()),
            }
        }
        lit => {
            owned_right = literal(lit);
            &owned_right
        }
    };
    compare(*op, scalar(left)?, scalar(right)?)
}

fn literal(op: &Operand) -> Value {
    match op {
        Operand::Str(s) => Value::from(s.as_str()),
        Operand::Int(i) => Value::from(*i),
        Operand::Float(f) => Value::from(*f),
        Operand::Bool(b) => Value::from(*b),
        Operand::Path(_) => Value::Null,
    }
}

fn compare(op: CmpOp, a: Scalar<'_>, b: Scalar<'_>) -> Result<bool, ()> {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (&a, &b) {
        (Scalar::Str(x), Scalar::Str(y)) => Some(x.cmp(y)),
        (Scalar::Int(x), Scalar::Int(y)) => Some(x.cmp(y)),
        (Scalar::Float(x), Scalar::Float(y)) => x.partial_cmp(y),
        (Scalar::Bool(x), Scalar::Bool(y)) => {
            return match op {
                CmpOp::Eq => Ok(x == y),
                CmpOp::Ne => Ok(x != y),
                _ => Err(()),
            };
        }
        _ => return Err(()),
    };
    let Some(ord) = ord else {
        return Ok(matches!(op, CmpOp::Ne));
    };
    Ok(match op {
        CmpOp::Eq => ord == Ordering::Equal,
        CmpOp::Ne => ord != Ordering::Equal,
        CmpOp::Lt => ord == Ordering::Less,
        CmpOp::Le => ord != Ordering::Greater,
        CmpOp::Gt => ord == Ordering::Greater,
        CmpOp::Ge => ord != Ordering::Less,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn find(path: &str, v: &Value) -> Result<Vec<Value>, ()> {
        JsonPath::parse(path)
            .unwrap()
            .find(v)
            .map(|r| r.into_iter().cloned().collect())
    }

    #[test]
    fn fields_indexes_and_wildcards() {
        let obj = json!({
            "spec": {"size": 7, "ports": [{"port": 80}, {"port": 443}], "dotted.key": "d"},
            "status": {"phase": null},
        });
        assert_eq!(find(".spec.size", &obj), Ok(vec![json!(7)]));
        assert_eq!(find(".spec.missing.deeper", &obj), Ok(vec![]));
        assert_eq!(find(".spec.ports[0].port", &obj), Ok(vec![json!(80)]));
        assert_eq!(find(".spec.ports[-1].port", &obj), Ok(vec![json!(443)]));
        assert_eq!(
            find(".spec.ports[*].port", &obj),
            Ok(vec![json!(80), json!(443)])
        );
        assert_eq!(find(".spec.ports[0:1].port", &obj), Ok(vec![json!(80)]));
        assert_eq!(find(".spec.ports[5].port", &obj), Err(()));
        assert_eq!(find(".spec.size[0]", &obj), Err(()));
        assert_eq!(find(".spec['dotted.key']", &obj), Ok(vec![json!("d")]));
        assert_eq!(find(".spec.dotted\\.key", &obj), Ok(vec![json!("d")]));
        assert_eq!(find(".status.phase", &obj), Ok(vec![Value::Null]));
        assert_eq!(find(".status.phase.x", &obj), Ok(vec![]));
    }

    #[test]
    fn filters() {
        let obj = json!({"status": {"conditions": [
            {"type": "Synced", "status": "False", "n": 1},
            {"type": "Ready", "status": "True", "n": 2},
        ]}});
        assert_eq!(
            find(".status.conditions[?(@.type==\"Ready\")].status", &obj),
            Ok(vec![json!("True")])
        );
        assert_eq!(
            find(".status.conditions[?(@.type == 'Ready')].status", &obj),
            Ok(vec![json!("True")])
        );
        assert_eq!(
            find(".status.conditions[?(@.type!=\"Ready\")].type", &obj),
            Ok(vec![json!("Synced")])
        );
        assert_eq!(
            find(".status.conditions[?(@.n>1)].type", &obj),
            Ok(vec![json!("Ready")])
        );
        assert_eq!(
            find(".status.conditions[?(@.n)].n", &obj).map(|v| v.len()),
            Ok(2)
        );
        // Comparing a string with a number is an error in client-go.
        assert_eq!(find(".status.conditions[?(@.type==1)].type", &obj), Err(()));
    }

    #[test]
    fn unsupported_paths() {
        assert!(JsonPath::parse("..spec").is_err());
        assert!(JsonPath::parse(".spec[0,1]").is_err());
        assert!(JsonPath::parse(".spec[").is_err());
    }
}
