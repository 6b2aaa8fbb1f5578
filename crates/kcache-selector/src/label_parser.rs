//! The label selector grammar: a byte lexer and recursive-descent parser mirroring apimachinery
//! `pkg/labels/selector.go`, and the requirement constructor whose checks and error aggregate
//! produce the apiserver's 400 messages byte for byte.
//!
//! Separate because it is the one part that must track Go's implementation quirk for quirk (NUL
//! as end of input, keywords by context, error order); the resulting types live in
//! `label.rs`.
//!
//! Why one file of this length: the lexer and the parser are the grammar together, read side by
//! side with `selector.go`.

use std::collections::BTreeSet;

use super::go_format::go_string_slice;
use super::label::{parse_go_int64, LabelOp, LabelRequirement, LabelSelector};
use super::validation::{invalid_value, label_value_errors, validate_label_key};
use super::SelectorError;

impl LabelSelector {
    /// Parses a `labelSelector` query value. The empty (or all-whitespace) string selects
    /// everything. Errors carry the apiserver's message verbatim.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        Ok(LabelSelector::from_requirements(
            LabelParser::new(s).parse()?,
        ))
    }
}

// ----- lexer -----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

/// The lexer's fixed tokens (everything but identifiers and end of string).
fn literal_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Byte lexer mirroring the apiserver's, including its quirk that a NUL byte reads like the end
/// of input (a `%00` in the query ends or splits the selector exactly as it does there).
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    /// Next byte, or 0 at the end (where the position does not advance).
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special(ch) {
            self.scan_special()
        } else {
            self.scan_identifier_or_keyword()
        }
    }

    fn scan_identifier_or_keyword(&mut self) -> (Token, String) {
        let mut buf = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
        }
        // The run stops only at ASCII bytes, so it is whole UTF-8; lossy conversion never alters it.
        let lit = String::from_utf8_lossy(&buf).into_owned();
        match literal_token(&buf) {
            Some(tok) => (tok, lit),
            None => (Token::Identifier, lit),
        }
    }

    /// Longest run of operator characters that forms a token. Every single operator character
    /// is itself a token, so this always yields one (the apiserver's error branch is dead).
    fn scan_special(&mut self) -> (Token, String) {
        let mut buf = Vec::new();
        let mut last: Option<(Token, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
            if let Some(tok) = literal_token(&buf) {
                last = Some((tok, buf.len()));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((tok, len)) => {
                let lit = String::from_utf8_lossy(buf.get(..len).unwrap_or_default()).into_owned();
                (tok, lit)
            }
            None => (Token::EndOfString, String::new()),
        }
    }
}

// ----- parser -----

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

/// Operators as the grammar distinguishes them (`==` separate from `=`) before they are folded
/// into [`LabelOp`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum ParsedOp {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

pub(super) struct LabelParser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl LabelParser {
    pub(super) fn new(s: &str) -> Self {
        let mut lexer = Lexer {
            s: s.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let (tok, lit) = lexer.lex();
            items.push((tok, lit));
            if tok == Token::EndOfString {
                break;
            }
        }
        Self { items, position: 0 }
    }

    /// In value position the keywords `in`/`notin` are ordinary identifiers (`k in (in)`).
    fn adjust(tok: Token, ctx: Context) -> Token {
        match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            _ => tok,
        }
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        match self.items.get(self.position) {
            Some((tok, lit)) => (Self::adjust(*tok, ctx), lit.clone()),
            None => (Token::EndOfString, String::new()),
        }
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let item = self.lookahead(ctx);
        self.position += 1;
        item
    }

    pub(super) fn parse(&mut self) -> Result<Vec<LabelRequirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self.parse_requirement().map_err(|e| {
                        SelectorError::new(format!("unable to parse requirement: {e}"))
                    })?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(SelectorError::new(format!(
                                    "found '{l2}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(SelectorError::new(format!(
                                "found '{l}', expected: ',' or 'end of string'"
                            )))
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(SelectorError::new(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    )))
                }
            }
        }
    }

    /// Errors are returned without the "unable to parse requirement: " prefix.
    fn parse_requirement(&mut self) -> Result<LabelRequirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (ParsedOp::Exists | ParsedOp::DoesNotExist)) = op {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            ParsedOp::In | ParsedOp::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, op, values.into_iter().collect())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<ParsedOp>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            op = Some(ParsedOp::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        // The apiserver validates the key here without a field path, hence "<nil>".
        validate_label_key(&lit, "<nil>")?;
        let (next, _) = self.lookahead(Context::Values);
        if (next == Token::EndOfString || next == Token::Comma) && op.is_none() {
            op = Some(ParsedOp::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<ParsedOp, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => ParsedOp::In,
            Token::Equals => ParsedOp::Equals,
            Token::DoubleEquals => ParsedOp::DoubleEquals,
            Token::GreaterThan => ParsedOp::GreaterThan,
            Token::LessThan => ParsedOp::LessThan,
            Token::NotIn => ParsedOp::NotIn,
            Token::NotEquals => ParsedOp::NotEquals,
            _ => {
                // The apiserver lists its binary operators by their internal names (gt, lt).
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            // This one message has no comma after the literal; clients compare it verbatim.
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    // Unreachable in practice; the apiserver quotes the stale lookahead here.
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                // `()` is the set holding the empty value, not an empty set.
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    /// A comma-separated list where empty items stand for the empty value (`(,a)`, `(a,)`).
    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut set = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.insert(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set);
                    }
                    if tok2 == Token::Comma {
                        self.consume(Context::Values);
                        set.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            Ok(BTreeSet::from([lit]))
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

/// The apiserver's requirement constructor checks, in its order, joined like its error
/// aggregate (one message alone, several as `[a, b]`, duplicates dropped).
fn new_requirement(
    key: String,
    op: ParsedOp,
    values: Vec<String>,
) -> Result<LabelRequirement, String> {
    let mut errs: Vec<String> = Vec::new();
    if let Err(e) = validate_label_key(&key, "key") {
        errs.push(e);
    }
    // The cardinality checks below cannot fail for parsed input (the grammar fixes the count),
    // but are kept so the constructor enforces its own invariants.
    let count_error = match op {
        ParsedOp::In | ParsedOp::NotIn if values.is_empty() => {
            Some("for 'in', 'notin' operators, values set can't be empty")
        }
        ParsedOp::Equals | ParsedOp::DoubleEquals | ParsedOp::NotEquals if values.len() != 1 => {
            Some("exact-match compatibility requires one single value")
        }
        ParsedOp::Exists | ParsedOp::DoesNotExist if !values.is_empty() => {
            Some("values set must be empty for exists and does not exist")
        }
        ParsedOp::GreaterThan | ParsedOp::LessThan if values.len() != 1 => {
            Some("for 'Gt', 'Lt' operators, exactly one value is required")
        }
        _ => None,
    };
    if let Some(detail) = count_error {
        errs.push(format!(
            "values: Invalid value: {}: {detail}",
            go_string_slice(&values)
        ));
    }
    if matches!(op, ParsedOp::GreaterThan | ParsedOp::LessThan) {
        for (i, v) in values.iter().enumerate() {
            if parse_go_int64(v).is_none() {
                errs.push(invalid_value(
                    &format!("values[{i}]"),
                    v,
                    "for 'Gt', 'Lt' operators, the value must be an integer",
                ));
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let problems = label_value_errors(v);
        if !problems.is_empty() {
            errs.push(invalid_value(
                &format!("values[{i}][{key}]"),
                v,
                &problems.join("; "),
            ));
        }
    }
    if !errs.is_empty() {
        return Err(aggregate(errs));
    }
    let op = match op {
        ParsedOp::Equals | ParsedOp::DoubleEquals => LabelOp::Equals,
        ParsedOp::NotEquals => LabelOp::NotEquals,
        ParsedOp::In => LabelOp::In,
        ParsedOp::NotIn => LabelOp::NotIn,
        ParsedOp::Exists => LabelOp::Exists,
        ParsedOp::DoesNotExist => LabelOp::DoesNotExist,
        ParsedOp::GreaterThan => LabelOp::GreaterThan,
        ParsedOp::LessThan => LabelOp::LessThan,
    };
    Ok(LabelRequirement { key, op, values })
}

/// Go's error aggregate text: duplicates dropped, a single message bare, several bracketed.
fn aggregate(errs: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::new();
    for e in errs {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    if unique.len() == 1 {
        unique.pop().unwrap_or_default()
    } else {
        format!("[{}]", unique.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{label_err, LABEL_VALUE_REGEX};
    use crate::LabelSelector;

    #[test]
    fn fixture_err_list_cm_malformed_label_selector() {
        assert_eq!(
            label_err("app in (web"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
    }

    #[test]
    fn fixture_err_list_cm_malformed_label_selector_2() {
        assert_eq!(
            label_err("app==web="),
            "found '=', expected: ',' or 'end of string'"
        );
    }

    #[test]
    fn label_gt_lt_messages() {
        assert_eq!(
            label_err("replicas>abc"),
            "unable to parse requirement: values[0]: Invalid value: \"abc\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert_eq!(
            label_err("replicas<"),
            "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert_eq!(
            label_err("replicas>a-"),
            format!("unable to parse requirement: [values[0]: Invalid value: \"a-\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][replicas]: Invalid value: \"a-\": {LABEL_VALUE_REGEX}]")
        );
        // A negative number is an integer but not a label value.
        assert_eq!(
            label_err("replicas>-1"),
            format!("unable to parse requirement: values[0][replicas]: Invalid value: \"-1\": {LABEL_VALUE_REGEX}")
        );
        assert_eq!(
            label_err("replicas>(1)"),
            "unable to parse requirement: found '(', expected: identifier"
        );
    }

    #[test]
    fn label_grammar_messages() {
        let cases = [
            (
                "=a",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
            (
                ",a",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            ("a,", "found '', expected: identifier after ','"),
            ("a,,b", "found ',', expected: identifier after ','"),
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            (
                "a b",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "a (b)",
                "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            // The lexer takes the longest operator, so "!=" is one token.
            (
                "!=a",
                "found '!=', expected: !, identifier, or 'end of string'",
            ),
            (
                "!!a",
                "unable to parse requirement: found '!', expected: identifier",
            ),
            ("!a=b", "found '=', expected: ',' or 'end of string'"),
            (
                "a in b",
                "unable to parse requirement: found 'b' expected: '('",
            ),
            (
                "a in",
                "unable to parse requirement: found '' expected: '('",
            ),
            (
                "a in (",
                "unable to parse requirement: found '', expected: ',', ')' or identifier",
            ),
            (
                "a in (=",
                "unable to parse requirement: found '=', expected: ',', ')' or identifier",
            ),
            (
                "a in (b c)",
                "unable to parse requirement: found 'c', expected: ',' or ')'",
            ),
            (
                "a in (b,",
                "unable to parse requirement: found '', expected: ',', or identifier",
            ),
            (
                "a in (b,=)",
                "unable to parse requirement: found '=', expected: ',', or identifier",
            ),
            ("a in (b))", "found ')', expected: ',' or 'end of string'"),
            (
                "a=(",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            (
                "a===b",
                "unable to parse requirement: found '=', expected: identifier",
            ),
            ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ];
        for (input, want) in cases {
            assert_eq!(label_err(input), want, "input {input:?}");
        }
        // A lone keyword in key position is an identifier, i.e. an Exists requirement.
        assert!(LabelSelector::parse("in").is_ok());
    }

    #[test]
    fn label_parse_shapes() {
        let sel = LabelSelector::parse(
            "  tier in (front, back,front) , !legacy,app==web,x!=y,n>3,m<10,k notin (),e ",
        )
        .unwrap();
        let got: Vec<(String, LabelOp, Vec<String>)> = sel
            .requirements()
            .iter()
            .map(|r| (r.key.clone(), r.op, r.values.clone()))
            .collect();
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                ("app".into(), LabelOp::Equals, v(&["web"])),
                ("e".into(), LabelOp::Exists, v(&[])),
                ("k".into(), LabelOp::NotIn, v(&[""])),
                ("legacy".into(), LabelOp::DoesNotExist, v(&[])),
                ("m".into(), LabelOp::LessThan, v(&["10"])),
                ("n".into(), LabelOp::GreaterThan, v(&["3"])),
                ("tier".into(), LabelOp::In, v(&["back", "front"])),
                ("x".into(), LabelOp::NotEquals, v(&["y"])),
            ]
        );
        assert_eq!(
            sel.to_string(),
            "app=web,e,k notin (),!legacy,m<10,n>3,tier in (back,front),x!=y"
        );
        // Empty items in a set stand for the empty value.
        let sel =
            LabelSelector::parse("a in (,b),c in (b,),d in (,),e in (b,,c),f in (,,b)").unwrap();
        assert_eq!(sel.requirements()[0].values, v(&["", "b"]));
        assert_eq!(sel.requirements()[1].values, v(&["", "b"]));
        assert_eq!(sel.requirements()[2].values, v(&[""]));
        assert_eq!(sel.requirements()[3].values, v(&["", "b", "c"]));
        assert_eq!(sel.requirements()[4].values, v(&["", "b"]));
        // ...but a doubled comma before the closing parenthesis is an error there.
        assert_eq!(
            label_err("d in (,,)"),
            "unable to parse requirement: found ')', expected: ',', or identifier"
        );
        assert_eq!(
            label_err("d in (b,,)"),
            "unable to parse requirement: found ')', expected: ',', or identifier"
        );
        // Keywords are ordinary words in key and value positions.
        let sel = LabelSelector::parse("in in (in,notin),notin=in").unwrap();
        assert_eq!(sel.to_string(), "in in (in,notin),notin=in");
        // `a=` and `a=,b` select the empty value.
        let sel = LabelSelector::parse("a=,b").unwrap();
        assert_eq!(sel.requirements()[0].values, v(&[""]));
        assert_eq!(sel.to_string(), "a=,b");
    }

    #[test]
    fn label_nul_byte_ends_the_selector_like_the_apiserver() {
        // Where a token starts, NUL reads as the end of input and the rest is ignored.
        let sel = LabelSelector::parse("a=b \0garbage((").unwrap();
        assert_eq!(sel.to_string(), "a=b");
        // Right after a word or operator the NUL is swallowed and lexing continues.
        assert_eq!(
            label_err("a=b\0garbage"),
            "found 'garbage', expected: ',' or 'end of string'"
        );
        assert_eq!(LabelSelector::parse("a=\0b").unwrap().to_string(), "a=b");
    }
}
