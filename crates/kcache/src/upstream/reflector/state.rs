//! The reflector's loop as data: its states, the facts its transitions depend on besides the
//! state itself, and each transition as a plain function of what a list, watch or check came
//! to. Nothing here reads the network or the clock (but [`backoff`], which only sleeps), so
//! every transition is checked without an upstream; the parent module runs the I/O and feeds
//! its outcome in. The table of transitions is in the parent module's docs.

use super::super::UpstreamError;
use super::{Ended, ReflectorConfig, StreamingList};
use crate::cache::ListReason;

/// The states of the loop; see the module docs of [`reflector`](super).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum State {
    /// List the type: by a streaming list while the upstream is taken to support one, else
    /// by pages ([`Machine::sync`]).
    Sync,
    /// A streaming list: one watch stream whose initial events are gathered until the
    /// initial-events-end bookmark, installed, and followed on the same stream by live
    /// events (see [`Phase`](super::watch::Phase)).
    StreamingList,
    /// A consistent list by pages, installed; the watch starts at its RV.
    PagedList,
    /// A cache restored from disk at `rv`: check that the upstream is not behind it before
    /// resuming the watch there.
    Resume { rv: u64 },
    /// One watch stream from `rv`, its events applied to the cache.
    Watching { rv: u64 },
    /// Wait [`ReflectorConfig::backoff`] of `attempt` (none for 0), then go on to `then`.
    Backoff { then: Box<State>, attempt: u32 },
    /// The cache went over its memory budget: the loop ends.
    Stopped,
    /// The upstream no longer serves the type (its list or watch answered 404 and discovery
    /// no longer lists it): the loop ends.
    NotServed,
    /// The upstream refused the list or watch (403) and the config says to stop on it.
    Forbidden,
}

impl State {
    /// Why the loop ends in this state, for the terminal ones.
    pub(super) fn ended(&self) -> Option<Ended> {
        match self {
            State::Stopped => Some(Ended::OverBudget),
            State::NotServed => Some(Ended::NotServed),
            State::Forbidden => Some(Ended::Forbidden),
            _ => None,
        }
    }

    /// `then` after a backoff of `attempt`.
    fn backoff(then: State, attempt: u32) -> State {
        State::Backoff {
            then: Box::new(then),
            attempt,
        }
    }
}

/// How a list or a watch stream ended (an error aside).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WatchEnd {
    /// The server closed it (timeoutSeconds), or a paged list was installed: watch from this
    /// RV.
    Closed { rv: u64 },
    /// 410 or an event kcache could not take: the cache must relist.
    Relist,
    /// A streaming relist's initial events ended at an RV older than the cache's: answered by
    /// a watch cache that lags (another replica's, or this one's behind etcd), not installed.
    Behind { rv: u64 },
    /// A streaming list's stream said nothing for [`ReflectorConfig::initial_events_idle`]
    /// before its initial-events-end bookmark.
    Silent,
    /// The list or an event took the cache over its memory budget: stop.
    OverBudget,
}

/// What the loop does after one list, watch or check.
#[derive(Debug)]
pub(super) enum Transition {
    /// Go on to this state.
    To(State),
    /// Go on to this state, for a reason logged as it is taken.
    Noted(Note, State),
    /// The request failed: the error is counted and logged as `failed`, then `then` is
    /// retried after a backoff unless the error ends the loop ([`Machine::after_error`]).
    Failed {
        failed: Failed,
        error: UpstreamError,
        then: State,
    },
}

/// A transition worth a log line, and what the line says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Note {
    /// The upstream rejected the streaming list's parameters: paged lists from now on.
    StreamingRejected { message: String },
    /// The streaming list went silent before its end bookmark: paged lists from now on.
    StreamingSilent,
    /// A streaming relist ended at `rv`, older than the cache: list consistently instead.
    LaggingWatchCache { rv: u64 },
    /// The watch from `rv` expired (410) or delivered an unreadable event: relist.
    WatchExpired { rv: u64 },
    /// The state restored from disk at `stored` is ahead of the upstream at `upstream`.
    RestoredAhead { stored: u64, upstream: u64 },
}

/// What failed, for the log line of a [`Transition::Failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failed {
    /// A list before the cache synced in this sync.
    Sync,
    /// A watch, or a streaming list after its initial events were installed.
    Watch,
    /// The check of the upstream's revision before resuming a restored cache.
    Resume,
}

/// The facts the transitions depend on besides the state: kept across states, changed only
/// by the transitions and by the I/O that installs lists and reads watch events.
#[derive(Debug)]
pub(super) struct Machine {
    /// Whether [`State::Sync`] tries a streaming list: set by the config, and cleared for good
    /// once the upstream rejected one or held back its end bookmark.
    pub streaming: bool,
    /// Lists installed so far: tells whether a failed sync had already synced.
    pub installs: u64,
    /// [`Machine::installs`] when the current sync began.
    pub installs_at_sync: u64,
    /// Why the next list is made: set where the cause is seen, recorded in the cache with the
    /// list it led to (see [`LastList`](crate::cache::LastList)).
    pub list_reason: ListReason,
    /// Whether the current watch has delivered a live event or bookmark.
    pub progressed: bool,
    /// Watches in a row that ended in a relist without delivering anything: relists are
    /// backed off by it, so an upstream answering every watch with 410 is not relisted in a
    /// hot loop.
    pub relist_streak: u32,
    /// See [`ReflectorConfig::stop_when_forbidden`].
    pub stop_when_forbidden: bool,
}

impl Machine {
    pub(super) fn new(cfg: &ReflectorConfig) -> Machine {
        Machine {
            streaming: cfg.streaming_list == StreamingList::Auto,
            installs: 0,
            installs_at_sync: 0,
            list_reason: ListReason::Startup,
            progressed: false,
            relist_streak: 0,
            stop_when_forbidden: cfg.stop_when_forbidden,
        }
    }

    /// The first state, for a cache over its budget, restored from disk at `restored`, or
    /// empty. A restored cache resumes its watch from the stored RV: the upstream sends what
    /// changed since, or a 410 that makes it relist (see `persist`). One restored over its
    /// budget has nothing to follow.
    pub(super) fn start(over_budget: bool, restored: Option<u64>) -> State {
        match restored {
            _ if over_budget => State::Stopped,
            Some(rv) => State::Resume { rv },
            None => State::Sync,
        }
    }

    /// [`State::Sync`]: a streaming list while the upstream is taken to support one, else a
    /// paged list.
    pub(super) fn sync(&mut self) -> State {
        self.installs_at_sync = self.installs;
        if self.streaming {
            State::StreamingList
        } else {
            State::PagedList
        }
    }

    /// After [`State::StreamingList`], with the cache then at `cache_rv`. The streaming form
    /// falls back to a paged list when the upstream rejects it (400/422) or goes silent before
    /// its end bookmark (for good, in both cases), when it expired before its initial events
    /// were installed (the streaming form cannot be had right now, a paged list can: looping
    /// on the stream would leave the cache without any list for as long as the upstream keeps
    /// answering 410), and when a lagging watch cache answered (going back to its state would
    /// look like an upstream restore: history dropped, every downstream watch ended with 410;
    /// a consistent paged list is answered from etcd, so it is at least as new as anything
    /// the cache saw, and only if even that is older was the upstream restored).
    pub(super) fn after_streaming_list(
        &mut self,
        end: Result<WatchEnd, UpstreamError>,
        cache_rv: u64,
    ) -> Transition {
        match end {
            Err(UpstreamError::Status { code, message }) if code == 422 || code == 400 => {
                self.streaming = false;
                Transition::Noted(Note::StreamingRejected { message }, State::PagedList)
            }
            Ok(WatchEnd::Relist) if !self.synced_in_this_sync() => Transition::To(State::PagedList),
            Ok(WatchEnd::Silent) => {
                self.streaming = false;
                Transition::Noted(Note::StreamingSilent, State::PagedList)
            }
            Ok(WatchEnd::Behind { rv }) => {
                Transition::Noted(Note::LaggingWatchCache { rv }, State::PagedList)
            }
            other => self.after_list(other, cache_rv),
        }
    }

    /// After [`State::PagedList`] (or a streaming list that did not fall back to one), with
    /// the cache then at `cache_rv`. A sync that failed after it installed its list (a
    /// streaming list whose live part failed) is an ordinary watch failure: resume from the
    /// cache RV, do not relist.
    pub(super) fn after_list(
        &mut self,
        end: Result<WatchEnd, UpstreamError>,
        cache_rv: u64,
    ) -> Transition {
        match end {
            Ok(WatchEnd::Closed { rv }) => Transition::To(State::Watching { rv }),
            Ok(WatchEnd::OverBudget) => Transition::To(State::Stopped),
            Ok(WatchEnd::Relist | WatchEnd::Behind { .. } | WatchEnd::Silent) => {
                Transition::To(self.relist())
            }
            Err(error) if self.synced_in_this_sync() => Transition::Failed {
                failed: Failed::Watch,
                error,
                then: State::Watching { rv: cache_rv },
            },
            Err(error) => Transition::Failed {
                failed: Failed::Sync,
                error,
                then: State::Sync,
            },
        }
    }

    /// After [`State::Watching`] from `rv`, with the cache then at `cache_rv`: a closed stream
    /// is resumed where it ended, a failed one from the newest RV known.
    pub(super) fn after_watch(
        &mut self,
        rv: u64,
        end: Result<WatchEnd, UpstreamError>,
        cache_rv: u64,
    ) -> Transition {
        match end {
            Ok(WatchEnd::Closed { rv }) => Transition::To(State::Watching { rv }),
            Ok(WatchEnd::OverBudget) => Transition::To(State::Stopped),
            Ok(WatchEnd::Relist | WatchEnd::Behind { .. } | WatchEnd::Silent) => {
                Transition::Noted(Note::WatchExpired { rv }, self.relist())
            }
            Err(error) => Transition::Failed {
                failed: Failed::Watch,
                error,
                then: State::Watching {
                    rv: cache_rv.max(rv),
                },
            },
        }
    }

    /// After [`State::Resume`] at `rv`, given the upstream's current revision. A state from
    /// disk whose RV the upstream has not reached is from another cluster, or from before a
    /// restore of this one: a watch from there would wait for a revision that never comes (or
    /// be refused with "Too large resource version" again and again), serving the stored
    /// state for good. Relist instead, which replaces it as an upstream restore (history
    /// dropped, watches ended).
    pub(super) fn after_resume(
        &mut self,
        rv: u64,
        current: Result<u64, UpstreamError>,
    ) -> Transition {
        match current {
            Ok(current) if current >= rv => Transition::To(State::Watching { rv }),
            Ok(current) => {
                self.list_reason = ListReason::RestoredAhead;
                Transition::Noted(
                    Note::RestoredAhead {
                        stored: rv,
                        upstream: current,
                    },
                    State::Sync,
                )
            }
            Err(error) => Transition::Failed {
                failed: Failed::Resume,
                error,
                then: State::Resume { rv },
            },
        }
    }

    /// Where to go after a watch that ended in a relist: at once when the watch had been
    /// working, else after a growing backoff (an upstream that expires every watch at once
    /// would otherwise be listed in a loop).
    pub(super) fn relist(&mut self) -> State {
        if self.progressed {
            self.relist_streak = 0;
        } else {
            self.relist_streak = self.relist_streak.saturating_add(1);
        }
        State::backoff(State::Sync, self.relist_streak)
    }

    /// After a failed list or watch answered `code`; `undiscovered`: discovery, asked on a
    /// 404 only, no longer lists the type. That ends the loop (the type's CRD was deleted:
    /// retrying would cost the upstream a request every backoff step for as long as it stays
    /// deleted); a 403 ends it if the config says so; anything else is retried after `then`'s
    /// backoff.
    pub(super) fn after_error(&self, code: Option<u16>, undiscovered: bool, then: State) -> State {
        if code == Some(403) && self.stop_when_forbidden {
            return State::Forbidden;
        }
        if code == Some(404) && undiscovered {
            return State::NotServed;
        }
        State::backoff(then, 1)
    }

    /// Whether a list was installed since the current sync began.
    fn synced_in_this_sync(&self) -> bool {
        self.installs > self.installs_at_sync
    }
}

/// [`State::Backoff`]: waits the backoff of `attempt` (none for 0), then gives `then`.
pub(super) async fn backoff(cfg: &ReflectorConfig, then: State, attempt: u32) -> State {
    if attempt > 0 {
        tokio::time::sleep(cfg.backoff(attempt)).await;
    }
    then
}
