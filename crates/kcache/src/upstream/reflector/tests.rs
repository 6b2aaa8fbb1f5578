//! The loop's transitions, state by state, as the loop relies on them: each is fed what a
//! list, watch or check came to, without an upstream.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;

use super::state::{backoff, Failed, Machine, Note, State, Transition, WatchEnd};
use super::watch::{parse_bookmark, Bookmark, Phase, Stream};
use super::{Ended, ReflectorConfig, StreamingList, UpstreamError};
use crate::cache::{CacheConfig, ListReason, ResourceCache, Scope};
use crate::object::Object;
use crate::resource::ResourceInfo;

fn machine() -> Machine {
    Machine::new(&ReflectorConfig::default())
}

/// What the I/O does when it installs a list.
fn install(m: &mut Machine) {
    m.installs += 1;
}

fn failed() -> UpstreamError {
    UpstreamError::Timeout(Duration::from_secs(1))
}

fn status(code: u16) -> UpstreamError {
    UpstreamError::Status {
        code,
        message: "no".into(),
    }
}

fn to(t: Transition) -> State {
    match t {
        Transition::To(s) => s,
        other => panic!("expected a plain transition, got {other:?}"),
    }
}

fn noted(t: Transition) -> (Note, State) {
    match t {
        Transition::Noted(note, s) => (note, s),
        other => panic!("expected a noted transition, got {other:?}"),
    }
}

fn failure(t: Transition) -> (Failed, State) {
    match t {
        Transition::Failed { failed, then, .. } => (failed, then),
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn backoff_of(then: State, attempt: u32) -> State {
    State::Backoff {
        then: Box::new(then),
        attempt,
    }
}

#[test]
fn the_loop_starts_by_listing_resuming_or_stopping() {
    assert_eq!(Machine::start(false, None), State::Sync);
    assert_eq!(Machine::start(false, Some(42)), State::Resume { rv: 42 });
    // A cache restored over its budget has nothing to follow.
    assert_eq!(Machine::start(true, Some(42)), State::Stopped);
    assert_eq!(Machine::start(true, None), State::Stopped);
}

#[test]
fn sync_streams_unless_the_config_says_never() {
    assert_eq!(machine().sync(), State::StreamingList);
    let never = ReflectorConfig {
        streaming_list: StreamingList::Never,
        ..ReflectorConfig::default()
    };
    assert_eq!(Machine::new(&never).sync(), State::PagedList);
}

#[test]
fn a_list_that_ends_in_a_closed_stream_goes_on_watching_there() {
    let mut m = machine();
    m.sync();
    install(&mut m);
    let next = m.after_streaming_list(Ok(WatchEnd::Closed { rv: 7 }), 7);
    assert_eq!(to(next), State::Watching { rv: 7 });

    let mut m = machine();
    m.streaming = false;
    assert_eq!(m.sync(), State::PagedList);
    install(&mut m);
    let next = m.after_list(Ok(WatchEnd::Closed { rv: 9 }), 9);
    assert_eq!(to(next), State::Watching { rv: 9 });
}

#[test]
fn a_sync_that_fails_before_any_install_is_retried_after_a_backoff() {
    let mut m = machine();
    m.sync();
    let (what, then) = failure(m.after_streaming_list(Err(failed()), 0));
    assert_eq!((what, &then), (Failed::Sync, &State::Sync));
    assert_eq!(m.after_error(None, false, then), backoff_of(State::Sync, 1));

    m.streaming = false;
    m.sync();
    let (what, then) = failure(m.after_list(Err(status(500)), 0));
    assert_eq!((what, &then), (Failed::Sync, &State::Sync));
    assert_eq!(
        m.after_error(Some(500), false, then),
        backoff_of(State::Sync, 1)
    );
}

#[test]
fn a_streaming_sync_that_fails_after_its_install_resumes_watching_at_the_cache_rv() {
    let mut m = machine();
    m.sync();
    install(&mut m);
    let (what, then) = failure(m.after_streaming_list(Err(failed()), 12));
    assert_eq!((what, &then), (Failed::Watch, &State::Watching { rv: 12 }));
    assert_eq!(
        m.after_error(None, false, then),
        backoff_of(State::Watching { rv: 12 }, 1)
    );
    // An install of an earlier sync does not count for this one.
    m.sync();
    let (what, then) = failure(m.after_streaming_list(Err(failed()), 12));
    assert_eq!((what, then), (Failed::Sync, State::Sync));
}

#[test]
fn a_streaming_list_the_upstream_does_not_support_falls_back_to_paged_lists_for_good() {
    for code in [400, 422] {
        let mut m = machine();
        m.sync();
        let (note, next) = noted(m.after_streaming_list(Err(status(code)), 0));
        assert!(matches!(note, Note::StreamingRejected { message } if message == "no"));
        assert_eq!(next, State::PagedList);
        assert_eq!(m.sync(), State::PagedList, "the next sync too");
    }
    // Silent before its end bookmark: the same, logged as such.
    let mut m = machine();
    m.sync();
    let (note, next) = noted(m.after_streaming_list(Ok(WatchEnd::Silent), 0));
    assert_eq!((note, next), (Note::StreamingSilent, State::PagedList));
    assert_eq!(m.sync(), State::PagedList);
}

#[test]
fn a_streaming_list_expired_before_its_install_is_listed_by_pages_this_once() {
    let mut m = machine();
    m.sync();
    let next = m.after_streaming_list(Ok(WatchEnd::Relist), 0);
    assert_eq!(to(next), State::PagedList);
    assert_eq!(
        m.sync(),
        State::StreamingList,
        "the next sync streams again"
    );
    // Expired after its install, in its live part: a relist as from a watch.
    install(&mut m);
    let next = m.after_streaming_list(Ok(WatchEnd::Relist), 5);
    assert_eq!(to(next), backoff_of(State::Sync, 1));
}

#[test]
fn initial_events_ending_behind_the_cache_are_not_installed_and_listed_consistently() {
    let info = ResourceInfo::core_v1("configmaps", "ConfigMap");
    let (_, cache) =
        ResourceCache::new(info.clone(), Scope::default(), CacheConfig::default()).split();
    let cm = |name: &str, rv: u64| {
        let raw = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
        );
        Object::from_upstream(&info, Bytes::from(raw), false).unwrap()
    };
    cache.replace(vec![cm("a", 10)], 10);
    let synced_rv = cache.is_synced().then(|| cache.rv());
    assert_eq!(synced_rv, Some(10));

    let mut stream = Stream::new(0, true);
    assert_eq!(stream.bookmark(5, true, synced_rv), Bookmark::Behind);
    let mut m = machine();
    m.sync();
    let (note, next) = noted(m.after_streaming_list(Ok(WatchEnd::Behind { rv: 5 }), 10));
    assert_eq!(
        (note, next),
        (Note::LaggingWatchCache { rv: 5 }, State::PagedList)
    );
    assert_eq!(
        m.sync(),
        State::StreamingList,
        "streaming lists stay in use"
    );

    // At or past the cache's RV, or into an empty cache, the gathered list is installed and
    // the stream goes live.
    for (rv, synced_rv) in [(10, synced_rv), (11, synced_rv), (3, None)] {
        let mut stream = Stream::new(0, true);
        if let Phase::Listing(gathering) = &mut stream.phase {
            gathering.objects.push(cm("b", rv).into());
        }
        assert!(
            matches!(stream.bookmark(rv, true, synced_rv), Bookmark::Install(o) if o.len() == 1)
        );
        assert!(!stream.is_listing());
        assert_eq!(stream.closed().unwrap(), WatchEnd::Closed { rv });
    }
}

#[test]
fn a_streaming_list_goes_live_only_at_its_end_bookmark() {
    let mut stream = Stream::new(0, true);
    // A bookmark amid the initial events is not the end.
    assert_eq!(stream.bookmark(4, false, None), Bookmark::Skip);
    assert!(stream.is_listing());
    // Cut before its end: truncated, not a watch to resume.
    assert!(matches!(stream.closed(), Err(UpstreamError::Truncated)));
    assert!(matches!(stream.bookmark(6, true, None), Bookmark::Install(o) if o.is_empty()));
    // Live: bookmarks mark the cache; only an ordinary one is progress of the watch.
    assert_eq!(
        stream.bookmark(8, false, Some(6)),
        Bookmark::Mark { progressed: true }
    );
    assert_eq!(
        stream.bookmark(7, true, Some(8)),
        Bookmark::Mark { progressed: false }
    );
    assert_eq!(stream.closed().unwrap(), WatchEnd::Closed { rv: 8 });
    // A plain watch is live from the start and resumes where it began if nothing came.
    assert_eq!(
        Stream::new(30, false).closed().unwrap(),
        WatchEnd::Closed { rv: 30 }
    );
}

#[test]
fn bookmarks_give_their_rv_and_whether_they_end_the_initial_events() {
    let end = br#"{"metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}"#;
    assert_eq!(parse_bookmark(end).unwrap(), (12, true));
    let plain = br#"{"metadata":{"resourceVersion":"13"}}"#;
    assert_eq!(parse_bookmark(plain).unwrap(), (13, false));
    assert!(matches!(
        parse_bookmark(br#"{"metadata":{}}"#),
        Err(UpstreamError::Malformed(_))
    ));
}

#[test]
fn a_closed_watch_resumes_where_it_ended_and_a_failed_one_from_the_newest_rv() {
    let mut m = machine();
    let next = m.after_watch(5, Ok(WatchEnd::Closed { rv: 9 }), 9);
    assert_eq!(to(next), State::Watching { rv: 9 });
    let (what, then) = failure(m.after_watch(5, Err(failed()), 8));
    assert_eq!((what, then), (Failed::Watch, State::Watching { rv: 8 }));
    let (_, then) = failure(m.after_watch(5, Err(failed()), 0));
    assert_eq!(then, State::Watching { rv: 5 });
}

#[test]
fn watches_expiring_without_progress_relist_after_a_growing_backoff() {
    let mut m = machine();
    for attempt in 1..=3 {
        m.progressed = false;
        let (note, next) = noted(m.after_watch(5, Ok(WatchEnd::Relist), 5));
        assert_eq!(note, Note::WatchExpired { rv: 5 });
        assert_eq!(next, backoff_of(State::Sync, attempt));
    }
    // A watch that delivered something relists at once, and the streak starts over.
    m.progressed = true;
    let (_, next) = noted(m.after_watch(5, Ok(WatchEnd::Relist), 5));
    assert_eq!(next, backoff_of(State::Sync, 0));
    m.progressed = false;
    let (_, next) = noted(m.after_watch(5, Ok(WatchEnd::Relist), 5));
    assert_eq!(next, backoff_of(State::Sync, 1));
}

#[test]
fn resume_watches_from_the_stored_rv_unless_the_upstream_is_behind_it() {
    let mut m = machine();
    assert_eq!(to(m.after_resume(10, Ok(10))), State::Watching { rv: 10 });
    assert_eq!(to(m.after_resume(10, Ok(15))), State::Watching { rv: 10 });
    assert_eq!(m.list_reason, ListReason::Startup);
    let (note, next) = noted(m.after_resume(10, Ok(4)));
    assert_eq!(
        (note, next),
        (
            Note::RestoredAhead {
                stored: 10,
                upstream: 4
            },
            State::Sync
        )
    );
    assert_eq!(m.list_reason, ListReason::RestoredAhead);
    // Unreachable: the restored state is served meanwhile, and the check retried.
    let (what, then) = failure(m.after_resume(10, Err(failed())));
    assert_eq!((what, then), (Failed::Resume, State::Resume { rv: 10 }));
}

#[test]
fn errors_that_end_the_loop() {
    let then = || State::Watching { rv: 3 };
    let mut m = machine();
    // A configured type is retried on 403; one that says so stops.
    assert_eq!(
        m.after_error(Some(403), false, then()),
        backoff_of(then(), 1)
    );
    m.stop_when_forbidden = true;
    assert_eq!(m.after_error(Some(403), false, then()), State::Forbidden);
    assert_eq!(State::Forbidden.ended(), Some(Ended::Forbidden));
    // A 404 ends it only when discovery no longer lists the type.
    assert_eq!(m.after_error(Some(404), true, then()), State::NotServed);
    assert_eq!(State::NotServed.ended(), Some(Ended::NotServed));
    assert_eq!(
        m.after_error(Some(404), false, then()),
        backoff_of(then(), 1)
    );
    assert_eq!(m.after_error(None, true, then()), backoff_of(then(), 1));
}

#[test]
fn over_the_budget_the_loop_stops() {
    let mut m = machine();
    m.sync();
    assert_eq!(
        to(m.after_streaming_list(Ok(WatchEnd::OverBudget), 0)),
        State::Stopped
    );
    assert_eq!(
        to(m.after_list(Ok(WatchEnd::OverBudget), 0)),
        State::Stopped
    );
    assert_eq!(
        to(m.after_watch(5, Ok(WatchEnd::OverBudget), 5)),
        State::Stopped
    );
    assert_eq!(State::Stopped.ended(), Some(Ended::OverBudget));
    for running in [
        State::Sync,
        State::Watching { rv: 1 },
        State::Resume { rv: 1 },
    ] {
        assert_eq!(running.ended(), None);
    }
}

#[tokio::test]
async fn backoff_waits_then_gives_its_then() {
    let cfg = ReflectorConfig {
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_secs(1),
        ..ReflectorConfig::default()
    };
    // Attempt 0 (a relist after a watch that progressed) does not wait at all.
    let slow = ReflectorConfig {
        backoff_initial: Duration::from_secs(3600),
        ..ReflectorConfig::default()
    };
    assert_eq!(
        backoff(&slow, State::Sync, 0).now_or_never(),
        Some(State::Sync)
    );
    assert_eq!(backoff(&slow, State::Sync, 1).now_or_never(), None);
    let started = Instant::now();
    let next = backoff(&cfg, State::Watching { rv: 4 }, 1).await;
    assert_eq!(next, State::Watching { rv: 4 });
    // Attempt 1 waits 20 ms doubled, jittered over its upper half.
    assert!(started.elapsed() >= Duration::from_millis(20));
}
