//! The apiserver's audit Policy (audit.k8s.io/v1 `Policy`, the file of `--audit-policy-file`)
//! and the level it gives each request.
//!
//! The file is read once ([`Policy::parse`], [`Policy::load`]: the document's shape and its
//! checks are in `file`) into rules that keep only what matching needs. [`Policy::evaluate`]
//! runs on every request kcache serves, so it compares borrowed strings and allocates
//! nothing. Its semantics are those of the apiserver's policy checker
//! (`k8s.io/apiserver/pkg/audit/policy/checker.go`): the first rule that matches decides;
//! no rule matching means level `None`; a rule's `omitStages` are added to the policy's, and
//! a rule's `omitManagedFields`, when given, replaces the policy's.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

mod file;
#[cfg(test)]
mod tests;

/// How much of a request the audit trail records (audit.k8s.io/v1 `Level`). The variants are
/// ordered: each records everything the one before it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
pub enum Level {
    /// Not audited: no event at all.
    None,
    /// The request's metadata (user, verb, resource, timestamps, response code), not its
    /// body nor the response's.
    Metadata,
    /// Metadata and the request's body (for resource requests).
    Request,
    /// Metadata, the request's body and the response's body (for resource requests).
    RequestResponse,
}

impl Level {
    /// The name the policy file and the events use.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A point in a request's handling at which an event is recorded (audit.k8s.io/v1 `Stage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum Stage {
    /// As soon as the request arrives, before it is handled.
    RequestReceived,
    /// Once the response's head is sent and before its body: only for long-running requests
    /// (watches).
    ResponseStarted,
    /// Once the response's body is complete.
    ResponseComplete,
    /// When handling the request panicked.
    Panic,
}

impl Stage {
    /// Every stage, in the order a request goes through them.
    pub const ALL: [Stage; 4] = [
        Stage::RequestReceived,
        Stage::ResponseStarted,
        Stage::ResponseComplete,
        Stage::Panic,
    ];

    /// The name the policy file and the events use.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Stage::RequestReceived => 1,
            Stage::ResponseStarted => 2,
            Stage::ResponseComplete => 4,
            Stage::Panic => 8,
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of [`Stage`]s, one bit each: what a policy's `omitStages` become, so that asking
/// whether a stage is omitted costs one `and`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stages(u8);

impl Stages {
    /// No stage.
    pub const EMPTY: Stages = Stages(0);

    /// This set with `stage` added.
    #[must_use]
    pub fn with(self, stage: Stage) -> Stages {
        Stages(self.0 | stage.bit())
    }

    /// The stages in either set.
    #[must_use]
    pub fn union(self, other: Stages) -> Stages {
        Stages(self.0 | other.0)
    }

    /// Whether `stage` is in the set.
    pub fn contains(self, stage: Stage) -> bool {
        self.0 & stage.bit() != 0
    }

    /// Whether the set has no stage.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The stages in the set, in [`Stage::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Stage> {
        Stage::ALL.into_iter().filter(move |s| self.contains(*s))
    }
}

impl FromIterator<Stage> for Stages {
    fn from_iter<I: IntoIterator<Item = Stage>>(iter: I) -> Stages {
        iter.into_iter().fold(Stages::EMPTY, Stages::with)
    }
}

impl fmt::Debug for Stages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// What the policy decided for one request: its level, the stages not to record, and whether
/// `metadata.managedFields` is left out of the bodies it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleOutcome {
    /// The level of the rule that matched, or `None` when none did.
    pub level: Level,
    /// The rule's `omitStages` together with the policy's.
    pub omit_stages: Stages,
    /// The rule's `omitManagedFields` if it has one, else the policy's.
    pub omit_managed_fields: bool,
}

impl RuleOutcome {
    /// Whether an event is recorded at `stage`: the level is not `None` and the stage is not
    /// omitted. Whether the stage happens at all is the caller's to know (see
    /// [`RuleOutcome::stages`]).
    pub fn records(&self, stage: Stage) -> bool {
        self.level != Level::None && !self.omit_stages.contains(stage)
    }

    /// The stages a request that completes normally is recorded at: `RequestReceived` and
    /// `ResponseComplete` for every request, `ResponseStarted` too for a long-running one (a
    /// watch), less the omitted ones; empty at level `None`. (`Panic` is recorded instead of
    /// `ResponseComplete` when handling fails that way: ask [`RuleOutcome::records`].)
    pub fn stages(&self, long_running: bool) -> Stages {
        let mut all = Stages::EMPTY
            .with(Stage::RequestReceived)
            .with(Stage::ResponseComplete);
        if long_running {
            all = all.with(Stage::ResponseStarted);
        }
        Stage::ALL
            .into_iter()
            .filter(|s| all.contains(*s) && self.records(*s))
            .collect()
    }
}

/// The request as the policy sees it: who asks, what for, and on what. Everything is
/// borrowed from the caller's own parsed request.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// The authenticated user's name (`system:anonymous` for anonymous callers).
    pub user: &'a str,
    /// The authenticated user's groups.
    pub groups: &'a [String],
    /// The Kubernetes verb (`get`, `list`, `watch`, …); for a non-resource request, the
    /// lower-cased HTTP method.
    pub verb: &'a str,
    /// The request's path, without the query: what `nonResourceURLs` match.
    pub path: &'a str,
    /// The resource acted on; `None` for a non-resource request (`/version`, `/healthz`,
    /// discovery under `/apis`).
    pub resource: Option<ResourceAttributes<'a>>,
}

/// The resource a resource request acts on.
#[derive(Debug, Clone, Copy)]
pub struct ResourceAttributes<'a> {
    /// The API group; `""` is the core group.
    pub group: &'a str,
    /// The API version (not matched by policies; recorded in the event's `objectRef`).
    pub version: &'a str,
    /// The resource, plural and lower-case (`pods`).
    pub resource: &'a str,
    /// The subresource (`log`, `status`, `scale`), if any.
    pub subresource: Option<&'a str>,
    /// The namespace; `None` for a cluster-scoped resource, or a request across all
    /// namespaces.
    pub namespace: Option<&'a str>,
    /// The object's name; `None` for a collection (list, watch, create).
    pub name: Option<&'a str>,
}

/// Why a policy file was refused. The apiserver refuses to start on each of these (except
/// that it only warns on unknown fields, which kcache refuses: see [`Policy::parse`]).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("reading audit policy {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML (or JSON), or not a Policy's shape: an unknown field, an unknown level or
    /// stage, a value of the wrong type.
    #[error("parsing audit policy: {0}")]
    Parse(#[source] yaml_serde::Error),
    /// `apiVersion` is not `audit.k8s.io/v1`.
    #[error(
        "audit policy apiVersion {found:?}: only audit.k8s.io/v1 is read (the apiserver has \
         not read v1alpha1 nor v1beta1 since Kubernetes 1.24; the fields are the same)"
    )]
    ApiVersion {
        /// What the file has (empty when it has none).
        found: String,
    },
    /// `kind` is not `Policy`.
    #[error("audit policy kind {found:?}: expected Policy")]
    Kind {
        /// What the file has (empty when it has none).
        found: String,
    },
    /// `rules` is missing or empty.
    #[error("audit policy has no rules")]
    NoRules,
    /// A value the apiserver's validation of a Policy refuses.
    #[error("audit policy {field}: {message}")]
    Invalid {
        /// Where, in the apiserver's notation (`rules[2].nonResourceURLs[0]`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

/// An audit policy, ready to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    rules: Vec<Rule>,
    /// What a request no rule matches gets: level `None`, with the policy's own settings.
    unmatched: RuleOutcome,
}

/// One rule: the lists it matches on (an empty list matches everything) and what it decides.
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    outcome: RuleOutcome,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    namespaces: Vec<String>,
    resources: Vec<GroupResources>,
    non_resource_urls: Vec<String>,
}

/// Resources of one API group a rule matches.
#[derive(Debug, Clone, PartialEq)]
struct GroupResources {
    group: String,
    /// Patterns: `pods`, `pods/log`, `*`, `pods/*`, `*/scale`. Empty: every resource of the
    /// group.
    resources: Vec<String>,
    resource_names: Vec<String>,
}

impl Policy {
    /// Read a policy from its YAML (or JSON) text: `apiVersion: audit.k8s.io/v1`, `kind:
    /// Policy`, at least one rule, and only known fields, levels and stages.
    ///
    /// Stricter than the apiserver in one way: a field the Policy does not have (`verb:`
    /// for `verbs:`) is an error here, where the apiserver logs a warning and drops the field
    /// (a rule that silently loses its `verbs` matches every verb).
    pub fn parse(yaml: &str) -> Result<Policy, PolicyError> {
        file::parse(yaml)
    }

    /// [`Policy::parse`] on the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Policy, PolicyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Policy::parse(&text)
    }

    /// The outcome of the first rule that matches the request, or level `None` (with the
    /// policy's own `omitStages` and `omitManagedFields`) when no rule does.
    pub fn evaluate(&self, a: &Attributes<'_>) -> RuleOutcome {
        self.rules
            .iter()
            .find(|rule| rule.matches(a))
            .map_or(self.unmatched, |rule| rule.outcome)
    }

    /// How many rules the policy has.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }
}

impl Rule {
    /// Every list the rule has must match (checker.go's `ruleMatches`). A rule with
    /// `namespaces` or `resources` matches only resource requests, one with `nonResourceURLs`
    /// only the others, one with neither matches both.
    fn matches(&self, a: &Attributes<'_>) -> bool {
        if !self.users.is_empty() && !has(&self.users, a.user) {
            return false;
        }
        if !self.user_groups.is_empty() && !a.groups.iter().any(|g| has(&self.user_groups, g)) {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, a.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return match &a.resource {
                Some(r) => self.matches_resource(r),
                None => false,
            };
        }
        if !self.non_resource_urls.is_empty() {
            return a.resource.is_none()
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(a.path, spec));
        }
        true
    }

    fn matches_resource(&self, r: &ResourceAttributes<'_>) -> bool {
        // A cluster-scoped resource has the namespace "" (which a rule lists to match it).
        if !self.namespaces.is_empty() && !has(&self.namespaces, r.namespace.unwrap_or("")) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let name = r.name.unwrap_or("");
        self.resources.iter().any(|gr| {
            gr.group == r.group
                && (gr.resources.is_empty()
                    || ((gr.resource_names.is_empty() || has(&gr.resource_names, name))
                        && gr
                            .resources
                            .iter()
                            .any(|pattern| resource_matches(pattern, r.resource, r.subresource))))
        })
    }
}

/// A `resources` pattern against a request's resource and subresource, as the apiserver
/// matches them: `*` matches everything, subresources included; `pods` only pods itself;
/// `pods/log` that subresource; `*/scale` the scale subresource of any resource; `pods/*`
/// every subresource of pods, and pods itself as well.
fn resource_matches(pattern: &str, resource: &str, subresource: Option<&str>) -> bool {
    if pattern == "*" {
        return true;
    }
    let subresource = subresource.filter(|s| !s.is_empty());
    // "resource/subresource" compared without building it.
    let exact = match (subresource, pattern.split_once('/')) {
        (None, _) => pattern == resource,
        (Some(sub), Some((res, pat_sub))) => res == resource && pat_sub == sub,
        (Some(_), None) => false,
    };
    if exact {
        return true;
    }
    if let (Some(sub), Some(pat_sub)) = (subresource, pattern.strip_prefix("*/")) {
        if pat_sub == sub {
            return true;
        }
    }
    pattern.strip_suffix("/*") == Some(resource)
}

/// A `nonResourceURLs` entry against a path: `*` matches every path, an entry ending in `*`
/// every path it is a prefix of, any other only the same path.
fn path_matches(path: &str, spec: &str) -> bool {
    if spec == "*" || spec == path {
        return true;
    }
    match spec.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix.trim_end_matches('*')),
        None => false,
    }
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|s| s == value)
}
