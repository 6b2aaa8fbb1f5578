//! The `auto` section: on-demand caching of types clients read that are not configured.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{parse_quantity, ConfigError, ResourceConfig};

/// On-demand caching: a type that is not configured, which clients list or watch at least
/// `minRequests` times within `windowSeconds`, is cached (cluster-wide, no indexes) until it
/// goes `idleSeconds` without a request; its reads pass through until it has synced. Off
/// unless `enabled`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AutoSettings {
    pub enabled: bool,
    /// Lists and watches of one type within `windowSeconds` that get it cached.
    pub min_requests: u32,
    pub window_seconds: u64,
    /// The most types cached on demand at once; a type asked for beyond it stays passed
    /// through (until another is dropped).
    pub max_types: usize,
    /// A type cached on demand that no request reads for this long (and that no watch is
    /// open on) is dropped, its memory freed.
    pub idle_seconds: u64,
    /// Types that may be cached on demand, as `RESOURCE[.GROUP]` (`leases.coordination.k8s.io`,
    /// `*.example.com`, `configmaps` for the core group, `*` for every type); empty: any.
    pub allow: Vec<String>,
    /// Types never cached on demand, in the same form; wins over `allow`.
    pub deny: Vec<String>,
    /// Each type's memory budget, as a resource's `memoryBudget`.
    pub memory_budget: Option<String>,
}

impl Default for AutoSettings {
    fn default() -> Self {
        AutoSettings {
            enabled: false,
            min_requests: 5,
            window_seconds: 60,
            max_types: 20,
            idle_seconds: 600,
            allow: Vec::new(),
            // Secrets are the one type a shared read cache should not hold unasked: a memory
            // dump, or a bug in kcache's authorization, would give all of them away.
            deny: vec!["secrets".into()],
            memory_budget: Some("256Mi".into()),
        }
    }
}

/// One `allow` or `deny` entry: a resource and a group, either of which may be any (`*`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TypePattern {
    resource: Option<String>,
    group: Option<String>,
}

impl TypePattern {
    fn parse(text: &str) -> Result<TypePattern, String> {
        let any = |s: &str| (s != "*").then(|| s.to_string());
        if text == "*" {
            return Ok(TypePattern {
                resource: None,
                group: None,
            });
        }
        let (resource, group) = text.split_once('.').unwrap_or((text, ""));
        let plural = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        if !(resource == "*" || plural(resource)) || (group.contains('*') && group != "*") {
            return Err(format!(
                "{text:?} is not RESOURCE[.GROUP] (e.g. leases.coordination.k8s.io, *.apps, secrets)"
            ));
        }
        Ok(TypePattern {
            resource: any(resource),
            group: any(group),
        })
    }

    fn matches(&self, group: &str, resource: &str) -> bool {
        self.resource.as_deref().is_none_or(|r| r == resource)
            && self.group.as_deref().is_none_or(|g| g == group)
    }
}

impl AutoSettings {
    /// Whether `group/resource` may be cached on demand (by `allow` and `deny`). The entries
    /// were validated on load.
    pub fn admits(&self, group: &str, resource: &str) -> bool {
        let listed = |entries: &[String]| {
            entries
                .iter()
                .filter_map(|e| TypePattern::parse(e).ok())
                .any(|p| p.matches(group, resource))
        };
        (self.allow.is_empty() || listed(&self.allow)) && !listed(&self.deny)
    }

    /// The entry a type cached on demand is cached by: the whole collection, with the
    /// section's memory budget.
    pub(crate) fn resource_config(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> ResourceConfig {
        let mut r = ResourceConfig::new(group, version, resource);
        r.memory_budget = self.memory_budget.clone();
        r
    }

    pub(crate) fn window(&self) -> Duration {
        Duration::from_secs(self.window_seconds)
    }

    pub(crate) fn idle(&self) -> Duration {
        Duration::from_secs(self.idle_seconds)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            field: format!("auto.{field}"),
            message,
        };
        for (field, value) in [
            ("minRequests", u64::from(self.min_requests)),
            ("windowSeconds", self.window_seconds),
            ("idleSeconds", self.idle_seconds),
        ] {
            if value == 0 {
                return Err(invalid(field, "must be at least 1".into()));
            }
        }
        for (field, entries) in [("allow", &self.allow), ("deny", &self.deny)] {
            for (i, e) in entries.iter().enumerate() {
                TypePattern::parse(e).map_err(|m| invalid(&format!("{field}[{i}]"), m))?;
            }
        }
        if let Some(q) = &self.memory_budget {
            parse_quantity(q).map_err(|m| invalid("memoryBudget", m))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_and_deny_name_types_as_kubectl_does() {
        let mut auto = AutoSettings::default();
        assert!(auto.admits("coordination.k8s.io", "leases"));
        assert!(auto.admits("", "configmaps"));
        assert!(!auto.admits("", "secrets"), "denied by default");
        assert!(
            auto.admits("example.com", "secrets"),
            "another group's secrets"
        );

        auto.allow = vec!["*.example.com".into(), "leases.coordination.k8s.io".into()];
        auto.deny = vec!["gadgets.*".into()];
        assert!(auto.admits("example.com", "widgets"));
        assert!(auto.admits("coordination.k8s.io", "leases"));
        assert!(!auto.admits("", "configmaps"), "not allowed");
        assert!(!auto.admits("example.com", "gadgets"), "deny wins");

        auto.allow = vec!["*".into()];
        auto.deny = Vec::new();
        assert!(auto.admits("", "secrets"));
    }

    #[test]
    fn malformed_entries_are_refused_by_name() {
        for bad in ["", "Widgets", "wid*ets.example.com", "widgets.ex*.com"] {
            let auto = AutoSettings {
                deny: vec![bad.into()],
                ..AutoSettings::default()
            };
            let err = auto.validate().unwrap_err().to_string();
            assert!(err.starts_with("auto.deny[0]:"), "{bad:?}: {err}");
        }
        let auto = AutoSettings {
            min_requests: 0,
            ..AutoSettings::default()
        };
        assert!(auto.validate().is_err());
    }
}
