//! On-demand caching (the config's `auto` section): a type that is not configured, which
//! clients list or watch often enough (counted in [`crate::demand`]), is cached like a
//! configured one, and dropped again once nothing reads it.
//!
//! One task decides, in the order a type meets them: a type already known (configured, or
//! taken up already) is left alone; one `auto.deny` names (or `auto.allow` does not) is
//! refused without a request to the upstream, so kcache never reads a denied type; then, past
//! `auto.maxTypes`, refused; then discovery, which lists one object of the type as kcache:
//! a type the upstream does not serve is left (clients are reading 404s), one without list and
//! watch, or that kcache's identity may not list (403), is refused. A refused type is named
//! on `/status` and in `kcache_auto_refused`, and considered again once
//! [`RECONSIDER_AFTER`] has passed (RBAC may be granted meanwhile); one refused for want of
//! room is considered again whenever clients ask. A refusal not renewed (clients stopped
//! reading the type) is forgotten a little later.
//!
//! A type taken up gets an empty cache, a consistency probe and the task that follows it
//! ([`crate::follow::follow_type`]); its reads pass through until it has synced, and it holds
//! no readiness. The same task drops types: one that no request has found for
//! `auto.idleSeconds` with no watch open on it leaves the registry (its requests pass
//! through from then on), its reflector is stopped, its watches end, and its memory is freed
//! once the last reader lets go of it. A type that went over `auto.memoryBudget` is passed
//! through, as a configured one is, and once idle is dropped and refused (`over_budget`) until
//! kcache restarts. One whose list or watch the upstream refuses kcache after it was taken up
//! (RBAC that allows list but not watch, or revoked since) is dropped at once and refused as
//! `forbidden`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::api::App;
use crate::config::{AutoSettings, Config};
use crate::demand::{Demand, Refusal};
use crate::error::Report;
use crate::follow;
use crate::metrics::{AutoLabels, DroppedLabels, ResourceLabels};
use crate::registry::Origin;
use crate::resource::TypeName;
use crate::upstream::{collection_path, Ended, ReflectorConfig, RevisionProbe, UpstreamError};

/// Bounds on the pause between two looks for idle types.
const SWEEP_MIN: Duration = Duration::from_millis(200);
const SWEEP_MAX: Duration = Duration::from_secs(5);

/// How long a refused type stays refused before clients' reads of it are considered again.
pub(crate) const RECONSIDER_AFTER: Duration = Duration::from_secs(300);

/// The task that takes types up and drops them, for as long as kcache runs (stopping kcache
/// aborts it, which stops the tasks of the types it took up).
pub(crate) fn spawn(
    app: Arc<App>,
    config: &Config,
    wanted: mpsc::UnboundedReceiver<TypeName>,
) -> JoinHandle<()> {
    let auto = Auto {
        app,
        config: config.clone(),
        followed: HashMap::new(),
        not_served: HashMap::new(),
    };
    tokio::spawn(auto.run(wanted))
}

struct Auto {
    app: Arc<App>,
    /// The `auto` section, and the cache and reflector settings every cached type shares.
    config: Config,
    /// The types taken up, each with the task that follows it.
    followed: HashMap<TypeName, JoinHandle<Ended>>,
    /// Types discovery did not know when last asked: not asked again before
    /// [`RECONSIDER_AFTER`]. Not shown: their names come from request paths.
    not_served: HashMap<TypeName, Instant>,
}

/// Stopping on-demand caching (kcache stopping: its task aborted) stops the types' tasks too.
impl Drop for Auto {
    fn drop(&mut self) {
        for task in self.followed.values() {
            task.abort();
        }
    }
}

impl Auto {
    async fn run(mut self, mut wanted: mpsc::UnboundedReceiver<TypeName>) {
        // Idleness is checked a few times per idle period, so that a type is dropped within
        // about 1.25 of it, and at least every few seconds, which is also how soon a type the
        // upstream stopped serving leaves the counts.
        let every = (self.settings().idle() / 4).clamp(SWEEP_MIN, SWEEP_MAX);
        let mut sweep = tokio::time::interval(every);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                name = wanted.recv() => match name {
                    Some(name) => self.consider(name).await,
                    // Not while the app (which holds the sender) lives.
                    None => break,
                },
                _ = sweep.tick() => self.sweep(),
            }
        }
    }

    /// A type clients have read `auto.minRequests` times in a window.
    async fn consider(&mut self, name: TypeName) {
        let app = self.app.clone();
        let registry = &app.registry;
        if registry.knows(&name.group, &name.resource) {
            return;
        }
        if self.recently_refused(&name) {
            return;
        }
        if !self.settings().admits(&name.group, &name.resource) {
            return self.refuse(name, Refusal::Denied);
        }
        self.forget_ended();
        if self.followed.len() >= self.settings().max_types {
            return self.refuse(name, Refusal::MaxTypes);
        }
        let upstream = &app.upstream;
        let info = match upstream
            .discover(&name.group, &name.version, &name.resource)
            .await
        {
            Ok(info) => info,
            Err(UpstreamError::UnknownResource(_)) => {
                self.not_served.insert(name, Instant::now());
                return;
            }
            Err(UpstreamError::NotListable(_)) => return self.refuse(name, Refusal::NotListable),
            Err(e) if e.code() == Some(403) => {
                tracing::warn!(resource = %name, error = %Report(&e),
                    "read often, but kcache may not list it: passed through (see /status)");
                return self.refuse(name, Refusal::Forbidden);
            }
            Err(e) => {
                // Asked again when clients next read it often enough.
                tracing::debug!(resource = %name, error = %Report(&e), "discovery failed");
                return;
            }
        };
        let r = self
            .settings()
            .resource_config(&name.group, &name.version, &name.resource);
        let cache_config = self.config.cache_config_for(&r);
        let (cache, writer) = follow::new_cache(&self.app, &r, info, cache_config.clone())
            .await
            .split();
        let probe = RevisionProbe::new(upstream.clone(), vec![collection_path(&cache)]);
        if !registry.insert(name.clone(), Origin::Auto, Some(&writer), probe) {
            return;
        }
        self.unrefuse(&name);
        self.not_served.remove(&name);
        tracing::info!(resource = %name, "read often: cached on demand");
        // A 403 after discovery's check (RBAC that allows list but not watch, or revoked
        // since) ends the reflector, and the type is refused as `forbidden`.
        let reflector = ReflectorConfig {
            stop_when_forbidden: true,
            ..self.config.reflector_config()
        };
        let task = tokio::spawn(follow::follow_type(
            self.app.clone(),
            r,
            Origin::Auto,
            cache_config,
            reflector,
            Some(writer),
        ));
        self.followed.insert(name, task);
        self.app.metrics.auto_cached.inc();
        self.count_types();
    }

    /// Drop every type taken up that is idle.
    fn sweep(&mut self) {
        let idle_after = self.settings().idle();
        for entry in self.app.registry.entries() {
            // A type between two caches (its CRD's selectable fields changed: rebuilt within
            // a second or so) is looked at again at the next sweep.
            if entry.origin != Origin::Auto || entry.idle < idle_after || entry.cache.is_none() {
                continue;
            }
            let watched = entry.cache.as_ref().is_some_and(|c| {
                self.app
                    .metrics
                    .watchers
                    .get(&ResourceLabels {
                        resource: c.info.resource.clone(),
                    })
                    .is_some_and(|g| g.get() > 0)
            });
            if !watched {
                self.drop_idle(&entry.name);
            }
        }
        self.forget_ended();
        let now = Instant::now();
        self.not_served
            .retain(|_, at| now.duration_since(*at) < RECONSIDER_AFTER);
        // A type still read often is refused again (and its refusal renewed) within a window
        // of being reconsidered; one older than that is no longer read: it leaves /status.
        let stale = RECONSIDER_AFTER + 2 * self.settings().window();
        for (name, reason) in self
            .demand()
            .map_or(Vec::new(), |d| d.expire_refusals(stale))
        {
            self.app.metrics.auto_refused.remove(&AutoLabels {
                resource: name.to_string(),
                reason: reason.as_str(),
            });
        }
    }

    /// The reflector stopped, then the type dropped (see [`follow::drop_auto_type`]).
    fn drop_idle(&mut self, name: &TypeName) {
        if let Some(task) = self.followed.remove(name) {
            task.abort();
        }
        self.count_types();
        let Some(dropped) = follow::drop_auto_type(&self.app, name) else {
            return;
        };
        if dropped.over_budget {
            // Not taken up again: it would list the whole type only to go over again.
            self.refuse(name.clone(), Refusal::OverBudget);
        }
        let metrics = &self.app.metrics;
        metrics.auto_released_bytes.inc_by(dropped.bytes as u64);
        metrics
            .auto_dropped
            .get_or_create(&DroppedLabels { reason: "idle" })
            .inc();
        tracing::info!(resource = %name, bytes = dropped.bytes,
            idle_seconds = self.settings().idle_seconds, "idle: no longer cached on demand");
    }

    /// Forget the tasks that ended by themselves, having dropped their type from the registry
    /// already: the upstream stopped serving it, or refused kcache its list or watch (then
    /// the type is refused as `forbidden`).
    fn forget_ended(&mut self) {
        let ended: Vec<TypeName> = self
            .followed
            .iter()
            .filter(|(name, task)| {
                task.is_finished() && !self.app.registry.knows(&name.group, &name.resource)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in ended {
            let Some(task) = self.followed.remove(&name) else {
                continue;
            };
            let why = futures::FutureExt::now_or_never(task).and_then(Result::ok);
            let reason = if why == Some(Ended::Forbidden) {
                self.refuse(name.clone(), Refusal::Forbidden);
                "forbidden"
            } else {
                "not_served"
            };
            self.app
                .metrics
                .auto_dropped
                .get_or_create(&DroppedLabels { reason })
                .inc();
        }
        self.count_types();
    }

    fn settings(&self) -> &AutoSettings {
        &self.config.auto
    }

    fn count_types(&self) {
        self.app.metrics.auto_types.set(self.followed.len() as i64);
    }

    fn recently_refused(&self, name: &TypeName) -> bool {
        self.not_served
            .get(name)
            .is_some_and(|at| at.elapsed() < RECONSIDER_AFTER)
            || self
                .demand()
                .is_some_and(|d| d.refused_lately(name, RECONSIDER_AFTER))
    }

    fn demand(&self) -> Option<&Demand> {
        self.app.demand.as_ref()
    }

    fn refuse(&self, name: TypeName, reason: Refusal) {
        let Some(demand) = self.demand() else { return };
        let resource = name.to_string();
        let before = demand.refuse(name, reason);
        let metric = &self.app.metrics.auto_refused;
        if let Some(before) = before.filter(|b| *b != reason) {
            metric.remove(&AutoLabels {
                resource: resource.clone(),
                reason: before.as_str(),
            });
        }
        metric
            .get_or_create(&AutoLabels {
                resource,
                reason: reason.as_str(),
            })
            .set(1);
    }

    fn unrefuse(&self, name: &TypeName) {
        let Some(before) = self.demand().and_then(|d| d.unrefuse(name)) else {
            return;
        };
        self.app.metrics.auto_refused.remove(&AutoLabels {
            resource: name.to_string(),
            reason: before.as_str(),
        });
    }
}
