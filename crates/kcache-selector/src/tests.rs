//! Test helpers shared by the selector modules' unit tests, and the tests that span all of
//! them: the cross-check against recorded apiserver bodies and the parser-robustness properties.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

pub(super) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(super) fn label_err(s: &str) -> String {
    match LabelSelector::parse(s) {
        Ok(sel) => panic!("{s:?} parsed as {sel:?}"),
        Err(e) => e.message,
    }
}

pub(super) fn field_err(s: &str) -> String {
    match FieldSelector::parse(s) {
        Ok(sel) => panic!("{s:?} parsed as {sel:?}"),
        Err(e) => e.message,
    }
}

pub(super) fn fields_err(
    s: &str,
    group: &str,
    resource: &str,
    namespaced: bool,
    custom: bool,
) -> String {
    let sel = FieldSelector::parse(s).expect("parses");
    match validate_fields(&sel, group, resource, namespaced, custom) {
        Ok(()) => panic!("{s:?} accepted for {group}/{resource}"),
        Err(e) => e.message,
    }
}

pub(super) const NAME_PART_REGEX: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
pub(super) const LABEL_VALUE_REGEX: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

#[test]
fn recorded_messages_and_pod_fields_agree() {
    // Cross-checks against the recorded bodies of the real apiserver (a missing recording
    // fails the test).
    use kcache_sim::recordings::read_string as read;
    let status_message = |name: &str| -> String {
        let v: serde_json::Value = serde_json::from_str(&read(name)).unwrap();
        v["message"].as_str().unwrap().to_string()
    };
    let checks: [(&str, Result<(), SelectorError>); 6] = [
        (
            "err-list-cm-malformed-field-selector.json",
            FieldSelector::parse("metadata.name").map(|_| ()),
        ),
        (
            "err-list-cm-malformed-label-selector.json",
            LabelSelector::parse("app in (web").map(|_| ()),
        ),
        (
            "err-list-cm-malformed-label-selector-2.json",
            LabelSelector::parse("app==web=").map(|_| ()),
        ),
        (
            "err-list-cm-unsupported-field-selector.json",
            validate_fields(
                &FieldSelector::parse("data.index=1").unwrap(),
                "",
                "configmaps",
                true,
                false,
            ),
        ),
        (
            "err-list-pods-unsupported-field-selector.json",
            validate_fields(
                &FieldSelector::parse("spec.containers.image=nginx").unwrap(),
                "",
                "pods",
                true,
                false,
            ),
        ),
        (
            "err-list-widgets-field-selector-spec.json",
            validate_fields(
                &FieldSelector::parse("spec.color=red").unwrap(),
                "fixtures.example.com",
                "widgets",
                true,
                true,
            ),
        ),
    ];
    for (name, got) in checks {
        assert_eq!(got.unwrap_err().message, status_message(name), "{name}");
    }
    // Pod field selectors against the recorded pod list.
    {
        let body = read("list-pods-ns-a.json");
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let select = |s: &str| -> Vec<String> {
            let sel = FieldSelector::parse(s).unwrap();
            items
                .iter()
                .filter(|p| sel.matches_fields(&extract_fields("", "pods", p)))
                .map(|p| {
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        };
        assert_eq!(select("spec.nodeName="), vec!["pod-unscheduled"]);
        assert_eq!(select("spec.nodeName=node-1"), vec!["pod-1a", "pod-1b"]);
        assert_eq!(select("status.phase=Pending").len(), 4);
        assert_eq!(select("status.phase=Running").len(), 0);
        assert_eq!(select("spec.schedulerName=default-scheduler").len(), 4);
    }
}

fn grammar_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("a".to_string()),
            Just("app".to_string()),
            Just("x.io/k".to_string()),
            Just("in".to_string()),
            Just("notin".to_string()),
            Just("=".to_string()),
            Just("!".to_string()),
            Just("(".to_string()),
            Just(")".to_string()),
            Just(",".to_string()),
            Just(">".to_string()),
            Just("<".to_string()),
            Just(" ".to_string()),
            Just("\\".to_string()),
            Just("\0".to_string()),
            Just("-".to_string()),
            Just("7".to_string()),
            Just("é".to_string()),
            Just("/".to_string()),
        ],
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn parsers_never_panic_on_any_string(s in any::<String>()) {
        let _ = LabelSelector::parse(&s);
        let _ = FieldSelector::parse(&s);
    }

    #[test]
    fn parsers_never_panic_on_grammar_soup(s in grammar_soup()) {
        if let Ok(sel) = LabelSelector::parse(&s) {
            // Anything that parses prints back to an equal selector.
            prop_assert_eq!(LabelSelector::parse(&sel.to_string()), Ok(sel.clone()));
            let _ = sel.matches(&BTreeMap::new());
        }
        if let Ok(sel) = FieldSelector::parse(&s) {
            prop_assert_eq!(FieldSelector::parse(&sel.to_string()), Ok(sel.clone()));
            let _ = validate_fields(&sel, "", "pods", true, false);
        }
    }
}
