//! Go's text formatting where the apiserver's messages embed it: `%q` (`strconv.Quote`, with an
//! approximation of `unicode.IsPrint`) and `%#v` of a `[]string`.
//!
//! Separate because it is Go runtime behaviour, not selector logic, and is shared by the label
//! validation messages, the field-support messages and the table printer.

use std::fmt::Write as _;

/// Go's `%q` (`strconv.Quote`) for a string.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if go_is_print(c) => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// Approximates Go's `unicode.IsPrint` without Unicode tables: ASCII exactly; beyond ASCII,
/// controls, separators (other than U+0020), format characters, private-use code points and
/// noncharacters are non-printable. Unassigned code points count as printable here (Go escapes
/// them); only an invalid label key or value made of such characters would be quoted differently.
fn go_is_print(c: char) -> bool {
    let u = c as u32;
    if u < 0x80 {
        return (0x20..0x7f).contains(&u);
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let format_chars: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x0600, 0x0605),
        (0x061C, 0x061C),
        (0x06DD, 0x06DD),
        (0x070F, 0x070F),
        (0x0890, 0x0891),
        (0x08E2, 0x08E2),
        (0x180E, 0x180E),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x2064),
        (0x2066, 0x206F),
        (0xFEFF, 0xFEFF),
        (0xFFF9, 0xFFFB),
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x1343F),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0001, 0xE0001),
        (0xE0020, 0xE007F),
        // private use
        (0xE000, 0xF8FF),
        (0xF0000, 0x10FFFF),
        // noncharacters
        (0xFDD0, 0xFDEF),
    ];
    if format_chars.iter().any(|&(lo, hi)| (lo..=hi).contains(&u)) {
        return false;
    }
    u & 0xFFFE != 0xFFFE
}

/// Go's `%#v` of a `[]string` (only reachable through constructor checks the grammar rules out).
pub(super) fn go_string_slice(values: &[String]) -> String {
    let inner: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[]string{{{}}}", inner.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_matches_strconv_quote() {
        assert_eq!(go_quote("abc"), "\"abc\"");
        assert_eq!(go_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(
            go_quote("\u{7}\u{8}\u{c}\n\r\t\u{b}\u{0}\u{7f}"),
            "\"\\a\\b\\f\\n\\r\\t\\v\\x00\\x7f\""
        );
        assert_eq!(go_quote("é日本"), "\"é日本\"");
        assert_eq!(
            go_quote("\u{a0}\u{200b}\u{feff}\u{85}"),
            "\"\\u00a0\\u200b\\ufeff\\u0085\""
        );
        assert_eq!(go_quote("\u{10ffff}"), "\"\\U0010ffff\"");
        assert_eq!(go_quote("😀"), "\"😀\"");
    }
}
