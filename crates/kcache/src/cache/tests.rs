use super::*;
use crate::index::KeySet;
use budget::Overage;
use bytes::Bytes;

fn info() -> ResourceInfo {
    ResourceInfo::core_v1("configmaps", "ConfigMap")
}

fn cm(name: &str, rv: u64, label: &str) -> Object {
    let raw = format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{{"v":"{label}"}}}}}}"#
    );
    Object::from_upstream(&info(), Bytes::from(raw), false).unwrap()
}

fn names(s: &Snapshot) -> Vec<String> {
    s.objects
        .values()
        .map(|o| format!("{}@{}", o.name(), o.rv))
        .collect()
}

#[test]
fn postings_follow_events_relists_and_rebuilt_snapshots() {
    let label = IndexConfig {
        name: "byV".into(),
        field: None,
        label: Some("v".into()),
    };
    let c =
        ResourceCache::new(info(), Scope::default(), CacheConfig::default()).with_indexes(&[label]);
    let consistent = |s: &Snapshot| {
        let built = Postings::build(&c.indexes, s.objects.iter());
        assert_eq!(
            s.postings.as_ref().unwrap().dump(),
            built.dump(),
            "at {}",
            s.rv
        );
    };
    c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x")], 10);
    c.apply(EventType::Added, cm("c", 11, "y"));
    c.apply(EventType::Modified, cm("a", 12, "y"));
    c.apply(EventType::Deleted, cm("b", 13, "x"));
    c.replace(vec![cm("a", 12, "y"), cm("d", 14, "x")], 20);
    let now = c.snapshot();
    assert_eq!(
        now.postings.as_ref().unwrap().dump(),
        [
            (0, "x".to_string(), vec!["ns/d".to_string()]),
            (0, "y".to_string(), vec!["ns/a".to_string()]),
        ]
    );
    for rv in [10, 11, 12, 13, 20] {
        consistent(&c.snapshot_at(rv).unwrap());
    }
}

/// Keys point at objects: the map and every posting set holding an object hold its
/// current version's key, also where its indexed values did not change, so that no key
/// keeps an old version alive; states rebuilt by undoing events hold the older versions.
#[test]
fn keys_follow_the_current_version() {
    let label = IndexConfig {
        name: "byV".into(),
        field: None,
        label: Some("v".into()),
    };
    let c =
        ResourceCache::new(info(), Scope::default(), CacheConfig::default()).with_indexes(&[label]);
    // Enough objects with one value for a persistent set, and one alone in a small one.
    let mut objects: Vec<Object> = (0..40).map(|i| cm(&format!("o{i:02}"), 5, "x")).collect();
    objects.push(cm("solo", 5, "y"));
    c.replace(objects, 10);
    c.apply(EventType::Modified, cm("o07", 11, "x"));
    c.apply(EventType::Modified, cm("solo", 12, "y"));
    let versions = |s: &Snapshot, value: &str, key: &str| {
        let (map_key, o) = s.objects.get_key_value(key).unwrap();
        let postings = s.postings.as_ref().unwrap();
        let set = postings.get(0, value).unwrap();
        let posted = set.iter().find(|k| k.as_str() == key).unwrap();
        (map_key.object().rv, o.rv, posted.object().rv)
    };
    let now = c.snapshot();
    assert!(matches!(
        now.postings.as_ref().unwrap().get(0, "x"),
        Some(KeySet::Many(_))
    ));
    assert_eq!(versions(&now, "x", "ns/o07"), (11, 11, 11));
    assert_eq!(versions(&now, "y", "ns/solo"), (12, 12, 12));
    assert_eq!(versions(&now, "x", "ns/o08"), (5, 5, 5));
    let before = c.snapshot_at(10).unwrap();
    assert_eq!(versions(&before, "x", "ns/o07"), (5, 5, 5));
    assert_eq!(versions(&before, "y", "ns/solo"), (5, 5, 5));
}

#[test]
fn rebuilds_older_states_by_undoing_events() {
    let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
    c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x")], 10);
    c.apply(EventType::Added, cm("c", 11, "x"));
    c.apply(EventType::Modified, cm("a", 12, "y"));
    c.apply(EventType::Deleted, cm("b", 13, "x"));
    assert_eq!(names(&c.snapshot()), ["a@12", "c@11"]);
    assert_eq!(names(&c.snapshot_at(10).unwrap()), ["a@5", "b@6"]);
    assert_eq!(names(&c.snapshot_at(11).unwrap()), ["a@5", "b@6", "c@11"]);
    assert_eq!(names(&c.snapshot_at(12).unwrap()), ["a@12", "b@6", "c@11"]);
    assert_eq!(c.snapshot_at(9).err(), Some(AtError::TooOld { oldest: 10 }));
    assert_eq!(
        c.snapshot_at(14).err(),
        Some(AtError::Future { current: 13 })
    );
}

#[test]
fn relist_turns_differences_into_events() {
    let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
    c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x"), cm("c", 7, "x")], 10);
    let s = c.replace(
        vec![cm("a", 5, "x"), cm("b", 14, "y"), cm("d", 12, "x")],
        20,
    );
    assert_eq!((s.added, s.modified, s.deleted, s.reset), (1, 1, 1, false));
    let mut cursor = c.cursor_after(10, true, c.epoch()).unwrap();
    let batch = c.read_from(&mut cursor, 100).unwrap();
    assert_eq!(batch.caught_up, Some(20));
    let got: Vec<_> = batch
        .events
        .iter()
        .map(|e| (e.ty, e.object.name().to_string(), e.rv))
        .collect();
    // The delete gets the lowest RV after the old state that no change took.
    assert_eq!(
        got,
        [
            (EventType::Deleted, "c".into(), 11),
            (EventType::Added, "d".into(), 12),
            (EventType::Modified, "b".into(), 14),
        ]
    );
    // A client resuming from inside the relist's range gets the real changes above its RV
    // and every made-up delete: it may hold that RV from the upstream (a forwarded list),
    // whose state can still have objects kcache numbered a delete for below it. A delete
    // given twice is harmless to informers; a missed one is not.
    let read = |rv| {
        let mut cursor = c.cursor_after(rv, true, c.epoch()).unwrap();
        let events = c.read_from(&mut cursor, 100).unwrap().events;
        events
            .iter()
            .map(|e| format!("{}@{}", e.object.name(), e.rv))
            .collect::<Vec<_>>()
    };
    assert_eq!(read(11), ["c@11", "d@12", "b@14"]);
    assert_eq!(read(12), ["c@12", "b@14"]);
    // Never below the client's own RV.
    assert_eq!(read(14), ["c@14"]);
    assert!(read(20).is_empty());
    assert_eq!(read(10), ["c@11", "d@12", "b@14"]);
    // The state before the relist is still reachable.
    assert_eq!(names(&c.snapshot_at(10).unwrap()), ["a@5", "b@6", "c@7"]);
}

/// Deletes a relist makes up may share the relist's RV (here: 600 deletes, 9 free RVs);
/// read in batches smaller than their number, each must still come exactly once (by RV,
/// the rest of a batch boundary would be taken for delivered).
#[test]
fn events_sharing_an_rv_are_read_once_across_batches() {
    let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
    let before: Vec<Object> = (0..600).map(|i| cm(&format!("o{i:03}"), 5, "x")).collect();
    c.replace(before, 10);
    let mut cursor = c.cursor_after(10, false, c.epoch()).unwrap();
    c.replace(vec![cm("new", 15, "x")], 20);
    let mut seen = Vec::new();
    let caught_up = loop {
        let batch = c.read_from(&mut cursor, 256).unwrap();
        seen.extend(
            batch
                .events
                .iter()
                .map(|e| (e.ty, e.object.name().to_string())),
        );
        if let Some(rv) = batch.caught_up {
            break rv;
        }
    };
    assert_eq!(caught_up, 20);
    assert_eq!(seen.len(), 601);
    assert!(seen.contains(&(EventType::Added, "new".to_string())));
    let deleted: std::collections::BTreeSet<_> = seen
        .iter()
        .filter(|(ty, _)| *ty == EventType::Deleted)
        .map(|(_, n)| n.clone())
        .collect();
    assert_eq!(deleted.len(), 600, "every delete once");
}

/// With fewer free RVs than deletes (not possible with a real upstream), the rest share
/// the relist's RV and come again to a client resuming at it.
#[test]
fn deletes_without_free_rvs_share_the_relist_rv() {
    let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
    c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x"), cm("c", 7, "x")], 10);
    c.replace(vec![cm("n", 11, "x")], 12);
    let mut cursor = c.cursor_after(10, true, c.epoch()).unwrap();
    let got: Vec<_> = c
        .read_from(&mut cursor, 100)
        .unwrap()
        .events
        .iter()
        .map(|e| (e.ty, e.object.name().to_string(), e.rv, e.synthetic))
        .collect();
    assert_eq!(
        got,
        [
            (EventType::Added, "n".into(), 11, false),
            (EventType::Deleted, "a".into(), 12, false),
            (EventType::Deleted, "b".into(), 12, true),
            (EventType::Deleted, "c".into(), 12, true),
        ]
    );
    let mut at_12 = c.cursor_after(12, true, c.epoch()).unwrap();
    assert_eq!(c.read_from(&mut at_12, 100).unwrap().events.len(), 2);
}

#[test]
fn backwards_rv_resets_history() {
    let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
    c.replace(vec![cm("a", 5, "x")], 10);
    let epoch = c.epoch();
    let (mut placed, _) = c.position();
    let s = c.replace(vec![cm("a", 2, "x")], 3);
    assert!(s.reset);
    assert!(
        c.read_from(&mut placed, 10).is_err(),
        "a placed watcher ends"
    );
    assert!(
        c.cursor_after(10, true, epoch).is_err(),
        "so does one placed later"
    );
    assert_eq!(c.rv(), 3);
}

#[test]
fn history_is_bounded() {
    let cfg = CacheConfig {
        history_max_events: 2,
        ..CacheConfig::default()
    };
    let c = ResourceCache::new(info(), Scope::default(), cfg);
    c.replace(Vec::<Object>::new(), 1);
    for i in 2..6 {
        c.apply(EventType::Added, cm(&format!("o{i}"), i, "x"));
    }
    assert_eq!(
        c.cursor_after(1, false, c.epoch()).err(),
        Some(AtError::TooOld { oldest: 3 })
    );
    let mut cursor = c.cursor_after(3, false, c.epoch()).unwrap();
    assert_eq!(c.read_from(&mut cursor, 10).unwrap().events.len(), 2);
    assert_eq!(
        c.cursor_after(9, false, c.epoch()).err(),
        Some(AtError::Future { current: 5 })
    );
}

fn budgeted(budget: usize) -> ResourceCache {
    let cfg = CacheConfig {
        memory_budget: Some(budget),
        ..CacheConfig::default()
    };
    ResourceCache::new(info(), Scope::default(), cfg)
}

/// At the budget exactly the objects stay; one byte over, by a list or an event, nothing
/// of the type is kept any more, for good, and everything waiting on it wakes.
#[tokio::test]
async fn over_the_budget_the_cache_empties_itself_for_good() {
    let len = |o: Object| o.raw().len();
    let at_budget = len(cm("a", 11, "y")) + len(cm("b", 6, "x"));
    let c = budgeted(at_budget);
    c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x")], 10);
    assert!(!c.budget().is_over());
    // Replacing an object counts its new size only: exactly at the budget.
    c.apply(EventType::Modified, cm("a", 11, "y"));
    assert!(!c.budget().is_over());
    assert_eq!(c.size(), (2, at_budget));
    let (mut cursor, _) = c.position();
    let waiter = {
        let mut rx = c.subscribe();
        tokio::spawn(async move { rx.changed().await.is_ok() })
    };
    c.apply(EventType::Added, cm("c", 12, "x"));
    assert!(c.budget().is_over());
    assert_eq!(
        c.budget().overage(),
        Some(Overage {
            bytes: at_budget + len(cm("c", 12, "x")),
            budget: at_budget
        })
    );
    assert_eq!(c.size(), (0, 0));
    assert!(c.snapshot().objects.is_empty());
    assert!(c.memory().history == 0 && c.memory().json == 0);
    assert!(waiter.await.unwrap(), "watchers are woken");
    // A watcher that reads now gets nothing it could take for the collection; it checks
    // the mark after reading.
    assert!(c.read_from(&mut cursor, 10).is_err() || c.budget().is_over());
    // Nothing is taken any more.
    c.apply(EventType::Deleted, cm("c", 13, "x"));
    c.replace(vec![cm("a", 11, "y")], 20);
    assert_eq!(c.size(), (0, 0));
    assert!(c.budget().is_over() && c.is_settled());
    // A wait for an RV ends at once.
    assert!(c.wait_for_rv(100, Duration::from_secs(30)).await.is_err());
    tokio::time::timeout(Duration::from_secs(5), c.budget().until_over())
        .await
        .unwrap();
}

#[test]
fn a_list_over_the_budget_is_not_installed() {
    let size = cm("a", 5, "x").raw().len();
    let c = budgeted(size * 2 - 1);
    c.replace(vec![cm("a", 5, "x"), cm("b", 6, "x")], 10);
    assert!(c.budget().is_over() && !c.is_synced() && c.is_settled());
    assert_eq!(c.size(), (0, 0));
    let unbounded = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
    assert!(!unbounded.budget().exceeds(usize::MAX));
}

#[test]
fn stale_events_are_ignored() {
    let c = ResourceCache::new(info(), Scope::default(), CacheConfig::default());
    c.replace(vec![cm("a", 5, "x")], 10);
    c.apply(EventType::Modified, cm("a", 9, "y"));
    assert_eq!(names(&c.snapshot()), ["a@5"]);
}
