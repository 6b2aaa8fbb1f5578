//! The policy file's shape (audit.k8s.io/v1 `Policy`, `PolicyRule`, `GroupResources`) and the
//! checks the apiserver makes on it (`k8s.io/apiserver/pkg/apis/audit/validation`), turned
//! into the [`Policy`] that evaluates requests.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::{GroupResources, Level, Policy, PolicyError, Rule, RuleOutcome, Stage, Stages};

const API_VERSION: &str = "audit.k8s.io/v1";
const KIND: &str = "Policy";

/// Only `apiVersion` and `kind`, read first so that a file of another version or kind gets
/// that error rather than one about a field.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyDoc {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    /// ObjectMeta, there "for interoperability with API infrastructure": accepted, unused.
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<IgnoredAny>,
    #[serde(default)]
    rules: Vec<RuleDoc>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuleDoc {
    level: Option<Level>,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResourcesDoc>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GroupResourcesDoc {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

pub(super) fn parse(yaml: &str) -> Result<Policy, PolicyError> {
    let header: Header = yaml_serde::from_str(yaml).map_err(PolicyError::Parse)?;
    let api_version = header.api_version.unwrap_or_default();
    if api_version != API_VERSION {
        return Err(PolicyError::ApiVersion { found: api_version });
    }
    let kind = header.kind.unwrap_or_default();
    if kind != KIND {
        return Err(PolicyError::Kind { found: kind });
    }
    let doc: PolicyDoc = yaml_serde::from_str(yaml).map_err(PolicyError::Parse)?;
    if doc.rules.is_empty() {
        return Err(PolicyError::NoRules);
    }
    let policy_stages: Stages = doc.omit_stages.iter().copied().collect();
    let rules = doc
        .rules
        .into_iter()
        .enumerate()
        .map(|(i, rule)| compile_rule(i, rule, policy_stages, doc.omit_managed_fields))
        .collect::<Result<Vec<Rule>, PolicyError>>()?;
    Ok(Policy {
        rules,
        unmatched: RuleOutcome {
            level: Level::None,
            omit_stages: policy_stages,
            omit_managed_fields: doc.omit_managed_fields,
        },
    })
}

fn compile_rule(
    index: usize,
    rule: RuleDoc,
    policy_stages: Stages,
    policy_omit_managed_fields: bool,
) -> Result<Rule, PolicyError> {
    let invalid = |field: String, message: String| PolicyError::Invalid {
        field: format!("rules[{index}].{field}"),
        message,
    };
    let Some(level) = rule.level else {
        return Err(invalid("level".into(), "Required value".into()));
    };
    for (i, url) in rule.non_resource_urls.iter().enumerate() {
        if let Some(message) = non_resource_url_problem(url) {
            return Err(invalid(format!("nonResourceURLs[{i}]"), message.into()));
        }
    }
    if !rule.non_resource_urls.is_empty()
        && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
    {
        return Err(invalid(
            "nonResourceURLs".into(),
            "rules cannot apply to both regular resources and non-resource URLs".into(),
        ));
    }
    for (i, gr) in rule.resources.iter().enumerate() {
        if !gr.group.is_empty() && !is_dns_subdomain(&gr.group) {
            return Err(invalid(
                format!("resources[{i}].group"),
                format!(
                    "{:?} is not a lower-case DNS subdomain (an API group is named without \
                     its version)",
                    gr.group
                ),
            ));
        }
        if !gr.resource_names.is_empty() && gr.resources.is_empty() {
            return Err(invalid(
                format!("resources[{i}].resourceNames"),
                "using resourceNames requires at least one resource".into(),
            ));
        }
    }
    let rule_stages: Stages = rule.omit_stages.iter().copied().collect();
    Ok(Rule {
        outcome: RuleOutcome {
            level,
            omit_stages: rule_stages.union(policy_stages),
            omit_managed_fields: rule
                .omit_managed_fields
                .unwrap_or(policy_omit_managed_fields),
        },
        users: rule.users,
        user_groups: rule.user_groups,
        verbs: rule.verbs,
        namespaces: rule.namespaces,
        resources: rule
            .resources
            .into_iter()
            .map(|gr| GroupResources {
                group: gr.group,
                resources: gr.resources,
                resource_names: gr.resource_names,
            })
            .collect(),
        non_resource_urls: rule.non_resource_urls,
    })
}

/// What the apiserver says of a `nonResourceURLs` entry it refuses, if it does.
fn non_resource_url_problem(url: &str) -> Option<&'static str> {
    if url == "*" {
        return None;
    }
    if !url.starts_with('/') {
        return Some("non-resource URL rules must begin with a '/' character");
    }
    if url[..url.len() - 1].contains('*') {
        return Some("non-resource URL wildcards '*' must be the final character of the rule");
    }
    None
}

/// An RFC 1123 subdomain as Kubernetes names API groups: at most 253 characters, dot-separated
/// labels of lower-case letters, digits and `-`, each starting and ending with a letter or
/// digit.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let bytes = label.as_bytes();
            let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
                }
                _ => false,
            }
        })
}
