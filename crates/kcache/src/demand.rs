//! How often clients list and watch types kcache does not cache, and what on-demand caching
//! (the config's `auto` section) refused of them. The HTTP layer counts here as it passes such
//! requests through; a type that reaches the threshold within a window is sent, once per
//! window, to whatever takes types up (see `crate::auto`), so that counting never waits on it.
//! The admin endpoints read the refusals here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::resource::TypeName;

/// The most types counted in one window. The names come from request paths, which need not
/// name any type the upstream serves: beyond this, a window counts no new names.
const MAX_COUNTED: usize = 1024;

/// The most refusals kept (a deny pattern with a wildcard matches names from request paths).
const MAX_REFUSED: usize = 256;

/// Why a type clients read is not cached on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Named by `auto.deny`, or not by a non-empty `auto.allow`.
    Denied,
    /// kcache's identity may not list it (the upstream answered 403).
    Forbidden,
    /// Discovery does not give the type both list and watch.
    NotListable,
    /// `auto.maxTypes` types are cached on demand already.
    MaxTypes,
    /// Cached once, it went over `auto.memoryBudget`: passed through until kcache restarts, as
    /// a configured type over its budget is.
    OverBudget,
}

impl Refusal {
    /// The word on `/status` and in `kcache_auto_refused`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::Denied => "denied",
            Refusal::Forbidden => "forbidden",
            Refusal::NotListable => "not_listable",
            Refusal::MaxTypes => "max_types",
            Refusal::OverBudget => "over_budget",
        }
    }
}

/// A type refused, as `/status` shows it.
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub name: TypeName,
    pub reason: Refusal,
    pub since: Instant,
}

/// The count of lists and watches per uncached type in the current window, and the types
/// refused.
pub(crate) struct Demand {
    min_requests: u32,
    window: Duration,
    counts: Mutex<Window>,
    wanted: mpsc::UnboundedSender<TypeName>,
    refused: Mutex<HashMap<TypeName, Refused>>,
}

struct Window {
    started: Instant,
    counts: HashMap<TypeName, u32>,
}

impl Demand {
    /// A counter sending each type read `min_requests` times within `window` to the
    /// returned receiver.
    pub(crate) fn new(
        min_requests: u32,
        window: Duration,
    ) -> (Demand, mpsc::UnboundedReceiver<TypeName>) {
        let (wanted, rx) = mpsc::unbounded_channel();
        let demand = Demand {
            min_requests: min_requests.max(1),
            window,
            counts: Mutex::new(Window {
                started: Instant::now(),
                counts: HashMap::new(),
            }),
            wanted,
            refused: Mutex::default(),
        };
        (demand, rx)
    }

    /// Record that `name` is not cached, and why; the reason it had before, if any.
    pub(crate) fn refuse(&self, name: TypeName, reason: Refusal) -> Option<Refusal> {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if refused.len() >= MAX_REFUSED && !refused.contains_key(&name) {
            return None;
        }
        let since = Instant::now();
        refused
            .insert(
                name.clone(),
                Refused {
                    name,
                    reason,
                    since,
                },
            )
            .map(|r| r.reason)
    }

    /// Forget a refusal (the type is cached now); the reason it had.
    pub(crate) fn unrefuse(&self, name: &TypeName) -> Option<Refusal> {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused.remove(name).map(|r| r.reason)
    }

    /// Whether `name` was refused within `lately`, for a reason that holds that long (one
    /// refused for want of room is considered again at once: room may have been made; one
    /// over its budget never, until kcache restarts).
    pub(crate) fn refused_lately(&self, name: &TypeName, lately: Duration) -> bool {
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused.get(name).is_some_and(|r| match r.reason {
            Refusal::MaxTypes => false,
            Refusal::OverBudget => true,
            _ => r.since.elapsed() < lately,
        })
    }

    /// Forget the refusals made more than `after` ago (clients no longer read those types
    /// often enough to ask again), but for types over their budget, which stay refused;
    /// what was forgotten.
    pub(crate) fn expire_refusals(&self, after: Duration) -> Vec<(TypeName, Refusal)> {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let old: Vec<TypeName> = refused
            .values()
            .filter(|r| r.reason != Refusal::OverBudget && r.since.elapsed() >= after)
            .map(|r| r.name.clone())
            .collect();
        old.into_iter()
            .filter_map(|name| refused.remove(&name).map(|r| (name, r.reason)))
            .collect()
    }

    /// The types refused now, by name.
    pub(crate) fn refused(&self) -> Vec<Refused> {
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Refused> = refused.values().cloned().collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Count one list or watch of `group/version/resource`, a type kcache does not cache.
    pub(crate) fn note(&self, group: &str, version: &str, resource: &str) {
        let name = TypeName::new(group, version, resource);
        let reached = {
            let mut w = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            if w.started.elapsed() >= self.window {
                w.started = Instant::now();
                w.counts.clear();
            }
            if w.counts.len() >= MAX_COUNTED && !w.counts.contains_key(&name) {
                return;
            }
            let n = w.counts.entry(name.clone()).or_default();
            *n = n.saturating_add(1);
            *n == self.min_requests
        };
        if reached {
            // The receiver is gone only when kcache is stopping.
            let _ = self.wanted.send(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_is_wanted_once_per_window_at_the_threshold() {
        let (demand, mut wanted) = Demand::new(3, Duration::from_secs(3600));
        demand.note("", "v1", "configmaps");
        demand.note("", "v1", "configmaps");
        demand.note("apps", "v1", "deployments");
        assert!(wanted.try_recv().is_err());
        demand.note("", "v1", "configmaps");
        assert_eq!(wanted.try_recv().unwrap().resource, "configmaps");
        demand.note("", "v1", "configmaps");
        assert!(wanted.try_recv().is_err(), "once per window");
    }

    #[test]
    fn refusals_hold_as_long_as_their_reason() {
        let (demand, _wanted) = Demand::new(1, Duration::from_secs(60));
        let name = |r: &str| TypeName::new("", "v1", r);
        let lately = Duration::from_secs(300);
        assert_eq!(demand.refuse(name("secrets"), Refusal::Denied), None);
        demand.refuse(name("leases"), Refusal::MaxTypes);
        demand.refuse(name("events"), Refusal::OverBudget);
        assert!(demand.refused_lately(&name("secrets"), lately));
        assert!(!demand.refused_lately(&name("secrets"), Duration::ZERO));
        assert!(
            !demand.refused_lately(&name("leases"), lately),
            "room may come"
        );
        assert!(
            demand.refused_lately(&name("events"), Duration::ZERO),
            "until restart"
        );
        let names: Vec<_> = demand
            .refused()
            .into_iter()
            .map(|r| r.name.resource)
            .collect();
        assert_eq!(names, ["events", "leases", "secrets"]);

        let mut expired = demand.expire_refusals(Duration::ZERO);
        expired.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            expired,
            [
                (name("leases"), Refusal::MaxTypes),
                (name("secrets"), Refusal::Denied)
            ]
        );
        assert_eq!(demand.refused().len(), 1, "over budget stays");
        assert_eq!(demand.unrefuse(&name("events")), Some(Refusal::OverBudget));
    }

    #[test]
    fn a_new_window_counts_from_zero() {
        let (demand, mut wanted) = Demand::new(2, Duration::ZERO);
        demand.note("", "v1", "configmaps");
        demand.note("", "v1", "configmaps");
        assert!(wanted.try_recv().is_err(), "each read opens a new window");
    }
}
