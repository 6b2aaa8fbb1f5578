//! apimachinery `util/validation` for label keys and values (qualified names with their DNS-1123
//! subdomain prefix, label values) with their v1.28 messages, and `field.Error` formatting.
//!
//! Separate from the grammar because it follows a different upstream source with its own
//! wording: the parser decides where a key or value is, this decides whether it is valid and
//! says why.

use std::fmt::Write as _;

use super::go_format::go_quote;

pub(super) fn validate_label_key(key: &str, path: &str) -> Result<(), String> {
    let problems = qualified_name_errors(key);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(invalid_value(path, key, &problems.join("; ")))
    }
}

/// `field.Invalid(path, value, detail).Error()` for a string value.
pub(super) fn invalid_value(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {}: {detail}", go_quote(value))
}

// ----- apimachinery util/validation messages (v1.28 wording) -----

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

fn regex_error(msg: &str, regex: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{regex}')");
    }
    // The double space in "',  or '" is the apiserver's own.
    let mut out = format!("{msg} (e.g. ");
    for (i, ex) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        let _ = write!(out, "'{ex}', ");
    }
    let _ = write!(out, "regex used for validation is '{regex}')");
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
fn is_dns1123_subdomain(s: &str) -> bool {
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(f), Some(l)) => {
                lower_alnum(f) && lower_alnum(l) && b.iter().all(|c| lower_alnum(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !is_dns1123_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `validation.IsQualifiedName` (label keys).
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `validation.IsValidLabelValue`.
pub(super) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use crate::tests::{label_err, LABEL_VALUE_REGEX, NAME_PART_REGEX};
    use crate::LabelSelector;

    #[test]
    fn label_key_validation_messages() {
        assert_eq!(
            label_err("app:monolith"),
            format!("unable to parse requirement: <nil>: Invalid value: \"app:monolith\": {NAME_PART_REGEX}")
        );
        assert_eq!(
            label_err("app.kubernetes_io/name=x"),
            "unable to parse requirement: <nil>: Invalid value: \"app.kubernetes_io/name\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(
            label_err("a/b/c"),
            "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        );
        assert_eq!(
            label_err("/x"),
            "unable to parse requirement: <nil>: Invalid value: \"/x\": prefix part must be non-empty"
        );
        assert_eq!(
            label_err("example.com/"),
            format!("unable to parse requirement: <nil>: Invalid value: \"example.com/\": name part must be non-empty; {NAME_PART_REGEX}")
        );
        let long = "a".repeat(64);
        assert_eq!(
            label_err(&long),
            format!("unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 characters")
        );
        assert!(LabelSelector::parse(&"a".repeat(63)).is_ok());
        // Control characters are quoted the way Go's %q does.
        assert_eq!(
            label_err("a\u{1}b"),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"a\\x01b\": {NAME_PART_REGEX}"
            )
        );
        assert_eq!(
            label_err("a\"é"),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"a\\\"é\": {NAME_PART_REGEX}"
            )
        );
    }

    #[test]
    fn label_value_validation_messages() {
        assert_eq!(
            label_err("app=-web"),
            format!("unable to parse requirement: values[0][app]: Invalid value: \"-web\": {LABEL_VALUE_REGEX}")
        );
        let long = "v".repeat(64);
        assert_eq!(
            label_err(&format!("app={long}")),
            format!("unable to parse requirement: values[0][app]: Invalid value: \"{long}\": must be no more than 63 characters")
        );
        // Values are sorted before validation, so indexes refer to the sorted set.
        assert_eq!(
            label_err("app in (z, -a, -b)"),
            format!("unable to parse requirement: [values[0][app]: Invalid value: \"-a\": {LABEL_VALUE_REGEX}, values[1][app]: Invalid value: \"-b\": {LABEL_VALUE_REGEX}]")
        );
    }
}
