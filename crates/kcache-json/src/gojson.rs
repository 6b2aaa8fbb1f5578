//! JSON output the way Go's `encoding/json` writes it: HTML-safe string escaping (`<`, `>`,
//! `&` and U+2028/9 as `\u` escapes), Go's float formatting, and a choice between keeping a
//! map's key order (typed objects, raw fields) and sorting keys (Go maps, unstructured).

use serde_json::{Number, Value};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string literal, escaped like Go's encoder does.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x80 {
            let short: Option<&[u8]> = match b {
                b'"' => Some(b"\\\""),
                b'\\' => Some(b"\\\\"),
                b'\n' => Some(b"\\n"),
                b'\r' => Some(b"\\r"),
                b'\t' => Some(b"\\t"),
                _ => None,
            };
            let unicode = short.is_none() && (b < 0x20 || matches!(b, b'<' | b'>' | b'&'));
            if short.is_some() || unicode {
                out.extend_from_slice(&bytes[start..i]);
                if let Some(e) = short {
                    out.extend_from_slice(e);
                } else {
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
                start = i + 1;
            }
            i += 1;
            continue;
        }
        // U+2028 / U+2029 (E2 80 A8 / E2 80 A9) are escaped by Go for JavaScript safety.
        if b == 0xE2 && i + 2 < bytes.len() && bytes[i + 1] == 0x80 && bytes[i + 2] & 0xFE == 0xA8 {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(if bytes[i + 2] == 0xA8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
            start = i;
            continue;
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends any JSON value. `sorted` sorts object keys at every level (Go maps).
pub fn write_value(out: &mut Vec<u8>, v: &Value, sorted: bool) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item, sorted);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if sorted {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_value(out, v, sorted);
            }
            out.push(b'}');
        }
    }
}

fn write_number(out: &mut Vec<u8>, n: &Number) {
    if n.is_i64() || n.is_u64() {
        out.extend_from_slice(n.to_string().as_bytes());
    } else if let Some(f) = n.as_f64() {
        out.extend_from_slice(go_json_float(f).as_bytes());
    } else {
        out.extend_from_slice(n.to_string().as_bytes());
    }
}

/// Splits the shortest round-trip representation of a finite `f` into its decimal digits
/// (no leading/trailing zeros, at least one digit) and the decimal exponent of the first
/// digit: `f = 0.d1d2d3… × 10^(exp+1)`, i.e. `d1.d2d3… × 10^exp`.
fn shortest_digits(f: f64) -> (String, i32) {
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    (digits.to_string(), exp.parse().unwrap_or(0))
}

/// `%e` with the shortest precision (`strconv.FormatFloat(f, 'e', -1, 64)`): `1.5e+07`.
fn go_fmt_e(f: f64) -> String {
    let (digits, exp) = shortest_digits(f);
    let mut s = String::new();
    if f.is_sign_negative() {
        s.push('-');
    }
    s.push_str(&digits[..1]);
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    s.push('e');
    s.push(if exp < 0 { '-' } else { '+' });
    let e = exp.unsigned_abs();
    if e < 10 {
        s.push('0');
    }
    s.push_str(&e.to_string());
    s
}

/// `%f` with the shortest precision (`strconv.FormatFloat(f, 'f', -1, 64)`).
fn go_fmt_f(f: f64) -> String {
    // Rust's Display for f64 is the shortest round-trip form without an exponent.
    format!("{f}")
}

/// A float64 as Go's `encoding/json` writes it.
pub fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".to_string();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let mut s = go_fmt_e(f);
        // Go trims a leading zero from a two-digit negative exponent: e-07 → e-7.
        let n = s.len();
        if n >= 4 && &s[n - 4..n - 1] == "e-0" {
            s.remove(n - 2);
        }
        return s;
    }
    go_fmt_f(f)
}

/// A float64 as `fmt.Sprint` writes it (`%v`, i.e. `%g` with the shortest precision).
pub fn go_fmt_v(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // strconv's %g with the shortest precision switches to %e at exponents < -4 or >= 6.
    let (_, exp) = shortest_digits(f);
    if !(-4..6).contains(&exp) {
        return go_fmt_e(f);
    }
    go_fmt_f(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, v, false);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_like_go() {
        assert_eq!(
            s(&Value::from("<none> & \"q\"\n\u{1}\u{2028}é")),
            r#""\u003cnone\u003e \u0026 \"q\"\n\u0001\u2028é""#
        );
    }

    #[test]
    fn floats_like_encoding_json() {
        assert_eq!(go_json_float(7.0), "7");
        assert_eq!(go_json_float(1.5), "1.5");
        assert_eq!(go_json_float(0.000001), "0.000001");
        assert_eq!(go_json_float(0.0000001), "1e-7");
        assert_eq!(go_json_float(1e20), "100000000000000000000");
        assert_eq!(go_json_float(1e21), "1e+21");
        assert_eq!(go_json_float(-2.5e-10), "-2.5e-10");
    }

    #[test]
    fn floats_like_fmt_v() {
        assert_eq!(go_fmt_v(1.5), "1.5");
        assert_eq!(go_fmt_v(100.0), "100");
        assert_eq!(go_fmt_v(0.0001), "0.0001");
        assert_eq!(go_fmt_v(0.00001), "1e-05");
        assert_eq!(go_fmt_v(123456.0), "123456");
        assert_eq!(go_fmt_v(1234567.0), "1.234567e+06");
        assert_eq!(go_fmt_v(1e21), "1e+21");
    }
}
