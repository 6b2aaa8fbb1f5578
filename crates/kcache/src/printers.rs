//! A cached type's Table printer, built from the upstream's column definitions on the type's
//! first Table read, and what kcache remembers of a type whose columns it could not get.
//!
//! A failed fetch is remembered with a backoff (10 s, doubling to 5 minutes): until then the
//! type's Table reads are passed through without asking the upstream for its columns again,
//! so Table reads of a type the upstream prints no columns for cost the upstream one request
//! each (the caller's own), not two.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cache::ResourceCache;
use crate::error::Report;
use crate::table::Printer;
use crate::upstream::{collection_path, Upstream};

/// How long a failed column fetch is remembered, at first.
const FIRST_BACKOFF: Duration = Duration::from_secs(10);
/// The longest a failed column fetch is remembered.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// A type's Table printer, as its registry entry keeps it (see `crate::registry`): not asked
/// for yet, built, or a failed fetch being remembered.
#[derive(Default)]
pub(crate) struct PrinterSlot {
    state: std::sync::Mutex<Option<State>>,
}

/// What [`PrinterSlot::known`] finds.
pub(crate) enum Known {
    /// A printer that prints the type.
    Printer(Arc<Printer>),
    /// kcache cannot print the type (its columns are not all supported, or could not be had
    /// lately): the upstream prints it.
    Unprintable,
    /// Not asked yet, or a failed fetch may be tried again: only the upstream can tell.
    Unknown,
}

#[derive(Clone)]
enum State {
    /// Built; it may still be unable to print the type (`Printer::supported`).
    Built(Arc<Printer>),
    /// The last fetch failed; none is tried again before `retry_at`.
    Failed {
        retry_at: Instant,
        backoff: Duration,
    },
}

impl PrinterSlot {
    fn state(&self) -> Option<State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, state: Option<State>) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// What is known of the type's printer without asking the upstream.
    pub(crate) fn known(&self) -> Known {
        match self.state() {
            Some(State::Built(p)) if p.supported() => Known::Printer(p),
            Some(State::Built(_)) => Known::Unprintable,
            Some(State::Failed { retry_at, .. }) if Instant::now() < retry_at => Known::Unprintable,
            _ => Known::Unknown,
        }
    }

    /// The printer of `cache`'s type, fetching its columns from the upstream when they are not
    /// known (and a failed fetch is not being remembered); None when kcache cannot print the
    /// type.
    pub(crate) async fn get(
        &self,
        upstream: &Upstream,
        cache: &ResourceCache,
    ) -> Option<Arc<Printer>> {
        match self.known() {
            Known::Printer(p) => return Some(p),
            Known::Unprintable => return None,
            Known::Unknown => {}
        }
        match build(upstream, cache).await {
            Some(printer) => {
                if let Some(reason) = printer.unsupported_reason() {
                    tracing::info!(resource = %cache.info, %reason, "Table requests go upstream");
                }
                self.set(Some(State::Built(printer.clone())));
                printer.supported().then_some(printer)
            }
            None => {
                let backoff = match self.state() {
                    Some(State::Failed { backoff, .. }) => (backoff * 2).min(MAX_BACKOFF),
                    _ => FIRST_BACKOFF,
                };
                let retry_at = Instant::now() + backoff;
                self.set(Some(State::Failed { retry_at, backoff }));
                None
            }
        }
    }

    /// Forget the printer (its CRD was re-created, perhaps with other columns).
    pub(crate) fn forget(&self) {
        self.set(None);
    }
}

/// A printer from the upstream's columns (and a custom resource's printer columns); None when
/// they cannot be had.
async fn build(upstream: &Upstream, cache: &ResourceCache) -> Option<Arc<Printer>> {
    let columns = match upstream.table_columns(&collection_path(cache)).await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(resource = %cache.info, error = %Report(&e), "no Table columns from upstream");
            return None;
        }
    };
    let info = &cache.info;
    let crd_columns = if info.custom {
        match upstream
            .crd_printer_columns(&info.group, &info.resource, &info.version)
            .await
        {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!(resource = %info, error = %Report(&e), "no CRD printer columns");
                return None;
            }
        }
    } else {
        None
    };
    Some(Arc::new(Printer::new(
        &info.group,
        &info.resource,
        columns,
        crd_columns.as_ref(),
    )))
}
