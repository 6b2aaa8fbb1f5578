use super::*;
use crate::cache::{CacheConfig, EventType, Scope};

fn cm(name: &str, rv: u64) -> Object {
    let raw = format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"k":"v{rv}"}}}}"#
    );
    Object::from_upstream(&info(), Bytes::from(raw), false).unwrap()
}

fn info() -> ResourceInfo {
    ResourceInfo::core_v1("configmaps", "ConfigMap")
}

fn config() -> ResourceConfig {
    ResourceConfig::new("", "v1", "configmaps")
}

fn record() -> Record {
    Record {
        config: fingerprint(&config(), &Strip::default()),
        kind: "ConfigMap".into(),
        namespaced: true,
        custom: false,
        selectable: Vec::new(),
        rv: 0,
        confirmed_ms: 0,
        objects: 0,
        mirror_rv: None,
        mirror_pending: Vec::new(),
    }
}

/// A new cache's writer (which reads it too).
fn new_cache() -> Writer {
    ResourceCache::new(info(), Scope::default(), CacheConfig::default())
        .split()
        .1
}

fn contents(cache: &ResourceCache) -> Vec<(String, Vec<u8>)> {
    cache
        .snapshot()
        .objects
        .iter()
        .map(|(k, o)| (k.as_str().to_owned(), o.raw().to_vec()))
        .collect()
}

#[tokio::test]
async fn flushes_follow_the_cache_and_load_back_equal() {
    let dir = tempdir();
    let store = Arc::new(Store::open(&dir).unwrap());
    let cache = new_cache();
    cache.replace(vec![cm("a", 5), cm("b", 6), cm("c", 7)], 10);
    let key = resource_key(&config());
    let mut p = Persister::new(
        store.clone(),
        vec![Tracked::new(
            cache.cache().clone(),
            key.clone(),
            record(),
            false,
        )],
        FLUSH_EVERY,
        Arc::new(Metrics::new()),
    );
    p.flush().await;
    cache.apply(EventType::Modified, cm("a", 11));
    cache.apply(EventType::Deleted, cm("b", 12));
    cache.apply(EventType::Added, cm("d", 13));
    p.flush().await;
    let stored = store
        .load(&key, &fingerprint(&config(), &Strip::default()))
        .unwrap()
        .unwrap();
    assert_eq!(stored.record.rv, 13);
    assert_eq!(stored.record.objects, 3);
    let again = new_cache();
    restore(&again, &stored).unwrap();
    assert!(again.is_synced());
    assert_eq!(again.rv(), 13);
    assert_eq!(contents(&again), contents(&cache));
    // Restored, not yet confirmed: consistent reads must not take it as current.
    assert!(again.contact().since_last().is_none());
    drop(p);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

fn budgeted(budget: usize) -> Writer {
    ResourceCache::new(
        info(),
        Scope::default(),
        CacheConfig {
            memory_budget: Some(budget),
            ..CacheConfig::default()
        },
    )
    .split()
    .1
}

/// A cache that goes over its budget is forgotten on disk, so the next start syncs it from
/// the upstream (and goes over again there, cheaply, if it still is).
#[tokio::test]
async fn a_cache_over_its_budget_is_not_kept() {
    let dir = tempdir();
    let store = Arc::new(Store::open(&dir).unwrap());
    let size = cm("a", 5).raw().len();
    let cache = budgeted(size * 3);
    cache.replace(vec![cm("a", 5), cm("b", 6)], 10);
    let key = resource_key(&config());
    let mut p = Persister::new(
        store.clone(),
        vec![Tracked::new(
            cache.cache().clone(),
            key.clone(),
            record(),
            false,
        )],
        FLUSH_EVERY,
        Arc::new(Metrics::new()),
    );
    p.flush().await;
    let fp = fingerprint(&config(), &Strip::default());
    assert!(store.load(&key, &fp).unwrap().is_some());
    cache.apply(EventType::Added, cm("c", 11));
    cache.apply(EventType::Added, cm("d", 12));
    assert!(cache.budget().is_over());
    p.flush().await;
    assert!(store.load(&key, &fp).unwrap().is_none(), "discarded");
    p.flush().await;
    assert!(
        store.load(&key, &fp).unwrap().is_none(),
        "and not written again"
    );
    drop(p);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stored state over the budget (lowered since) is not loaded whole: the cache goes over
/// budget at once.
#[test]
fn a_stored_state_over_the_budget_is_not_restored() {
    let mut r = record();
    r.rv = 9;
    r.objects = 2;
    let stored = Stored {
        record: r,
        objects: vec![
            ("ns/a".into(), Bytes::copy_from_slice(cm("a", 5).raw())),
            ("ns/b".into(), Bytes::copy_from_slice(cm("b", 6).raw())),
        ],
    };
    let cache = budgeted(cm("a", 5).raw().len());
    restore(&cache, &stored).unwrap();
    assert!(cache.budget().is_over());
    assert_eq!(cache.size(), (0, 0));
    assert!(cache.is_settled() && !cache.is_synced());
}

#[test]
fn a_restored_cache_is_aged_and_unconfirmed_until_the_upstream_is_reached() {
    let mut r = record();
    r.rv = 9;
    r.objects = 1;
    r.confirmed_ms = now_ms() - 5_000;
    let stored = Stored {
        record: r,
        objects: vec![("ns/a".into(), Bytes::copy_from_slice(cm("a", 5).raw()))],
    };
    let cache = new_cache();
    assert!(!cache.is_unconfirmed(), "not synced: nothing to confirm");
    restore(&cache, &stored).unwrap();
    assert!(cache.is_synced());
    assert!(cache.is_unconfirmed());
    assert!(
        cache.contact().age() >= Duration::from_secs(5),
        "{:?}",
        cache.contact().age()
    );
    assert_eq!(cache.history_start(), 9, "no history before the stored RV");
    cache.contact().heard();
    assert!(!cache.is_unconfirmed());
    assert!(cache.contact().age() < Duration::from_secs(5));
    // A later restore is ignored: the cache has synced.
    let mut other = stored;
    other.record.rv = 20;
    restore(&new_cache(), &other).unwrap();
    restore(&cache, &other).unwrap();
    assert_eq!(cache.rv(), 9);
}

#[test]
fn a_load_overlapped_with_parsing_restores_every_object_in_order_or_nothing() {
    let dir = tempdir();
    let store = Store::open(&dir).unwrap();
    let key = resource_key(&config());
    // More than two batches, so several parsing threads each get some.
    let objects: Vec<(String, Bytes)> = (0..2 * BATCH + 10)
        .map(|i| {
            let name = format!("cm-{i:05}");
            (
                format!("ns/{name}"),
                Bytes::copy_from_slice(cm(&name, 5).raw()),
            )
        })
        .collect();
    let mut r = record();
    r.rv = 9;
    r.objects = objects.len() as u64;
    store.write(&key, &r, true, &objects, &[], None).unwrap();
    let record = store.record(&key, &r.config).unwrap().unwrap();
    let cache = new_cache();
    restore_from(&store, &cache, &key, &record).unwrap();
    assert_eq!(cache.rv(), 9);
    let want: Vec<(String, Vec<u8>)> = objects
        .iter()
        .map(|(k, v)| (k.clone(), v.to_vec()))
        .collect();
    assert_eq!(contents(&cache), want);
    // One object that does not parse, in the last batch: nothing is restored.
    store
        .write(
            &key,
            &record,
            false,
            &[("ns/cm-99999".into(), Bytes::from_static(b"{not json"))],
            &["ns/cm-00000".into()],
            None,
        )
        .unwrap();
    let cache = new_cache();
    assert!(restore_from(&store, &cache, &key, &record).is_err());
    assert!(!cache.is_synced());
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_differently_configured_resource_is_not_loaded() {
    let dir = tempdir();
    let store = Store::open(&dir).unwrap();
    let key = resource_key(&config());
    let mut r = record();
    r.objects = 1;
    r.rv = 5;
    let raw = Bytes::copy_from_slice(cm("a", 5).raw());
    store
        .write(&key, &r, false, &[("ns/a".into(), raw)], &[], None)
        .unwrap();
    assert!(store.load(&key, &r.config).unwrap().is_some());
    let mut scoped = config();
    scoped.namespace = Some("other".into());
    assert!(matches!(
        store.load(&key, &fingerprint(&scoped, &Strip::default())),
        Err(PersistError::Mismatch { .. })
    ));
    store.discard(&key).unwrap();
    assert!(store.load(&key, &r.config).unwrap().is_none());
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_whole_write_replaces_what_is_stored() {
    let dir = tempdir();
    let store = Store::open(&dir).unwrap();
    let key = resource_key(&config());
    let obj = |name: &str| {
        (
            format!("ns/{name}"),
            Bytes::copy_from_slice(cm(name, 5).raw()),
        )
    };
    let mut r = record();
    r.objects = 2;
    store
        .write(&key, &r, false, &[obj("a"), obj("b")], &[], None)
        .unwrap();
    r.objects = 1;
    store.write(&key, &r, true, &[obj("c")], &[], None).unwrap();
    let stored = store.load(&key, &r.config).unwrap().unwrap();
    let keys: Vec<&str> = stored.objects.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["ns/c"]);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_record_that_does_not_match_its_table_is_refused() {
    let dir = tempdir();
    let store = Store::open(&dir).unwrap();
    let key = resource_key(&config());
    let mut r = record();
    r.objects = 2;
    let raw = Bytes::copy_from_slice(cm("a", 5).raw());
    assert!(store
        .write(&key, &r, false, &[("ns/a".into(), raw)], &[], None)
        .is_err());
    // Nothing of the refused flush was committed.
    assert!(store.load(&key, &r.config).unwrap().is_none());
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unparsable_or_misplaced_objects_are_not_restored() {
    let mut r = record();
    r.rv = 9;
    r.objects = 1;
    let bad = Stored {
        record: r.clone(),
        objects: vec![("ns/a".into(), Bytes::from_static(b"{not json"))],
    };
    let cache = new_cache();
    assert!(restore(&cache, &bad).is_err());
    assert!(!cache.is_synced());
    let misplaced = Stored {
        record: r.clone(),
        objects: vec![("ns/b".into(), Bytes::copy_from_slice(cm("a", 5).raw()))],
    };
    assert!(restore(&cache, &misplaced).is_err());
    let newer = Stored {
        record: r,
        objects: vec![("ns/a".into(), Bytes::copy_from_slice(cm("a", 50).raw()))],
    };
    assert!(restore(&cache, &newer).is_err());
    assert!(!cache.is_synced());
}

#[test]
fn a_file_that_is_not_a_database_is_replaced_and_one_in_use_is_refused() {
    let dir = tempdir();
    std::fs::write(
        dir.join(FILE),
        b"certainly not a redb file, just some bytes",
    )
    .unwrap();
    let store = Store::open(&dir).unwrap();
    assert!(store.load("/v1/configmaps", "x").unwrap().is_none());
    assert!(matches!(
        Store::open(&dir),
        Err(PersistError::Locked { .. })
    ));
    drop(store);
    // Another schema version is discarded too.
    {
        let db = Database::create(dir.join(FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert(SCHEMA_KEY, b"999".as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open(&dir).unwrap();
    drop(store);
    let db = Database::create(dir.join(FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let meta = txn.open_table(META).unwrap();
    assert_eq!(
        meta.get(SCHEMA_KEY).unwrap().unwrap().value(),
        SCHEMA.to_string().as_bytes()
    );
    drop(meta);
    drop(txn);
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_byte_changed_on_disk_is_caught_and_the_file_replaced() {
    let dir = tempdir();
    let key = resource_key(&config());
    let raw = Bytes::copy_from_slice(cm("needle", 5).raw());
    {
        let store = Store::open(&dir).unwrap();
        let mut r = record();
        r.objects = 1;
        r.rv = 5;
        store
            .write(&key, &r, false, &[("ns/needle".into(), raw)], &[], None)
            .unwrap();
    }
    // Change one byte inside the stored object (a string: the JSON would still parse).
    let path = dir.join(FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(6)
        .position(|w| w == b"needle")
        .expect("the object is in the file");
    bytes[at] = b'N';
    std::fs::write(&path, bytes).unwrap();
    let store = Store::open(&dir).unwrap();
    assert!(
        store.load(&key, &record().config).unwrap().is_none(),
        "the changed file was replaced, not served"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn resources_no_longer_configured_are_dropped() {
    let dir = tempdir();
    let store = Store::open(&dir).unwrap();
    let mut r = record();
    r.objects = 0;
    store
        .write("/v1/configmaps", &r, false, &[], &[], None)
        .unwrap();
    store
        .write("/v1/secrets", &r, false, &[], &[], None)
        .unwrap();
    let keep: HashSet<String> = ["/v1/configmaps".to_string()].into();
    assert_eq!(
        store.retain(&keep).unwrap(),
        vec!["/v1/secrets".to_string()]
    );
    assert!(store.load("/v1/secrets", &r.config).unwrap().is_none());
    assert!(store.load("/v1/configmaps", &r.config).unwrap().is_some());
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A protobuf mirror is stored beside its objects, at the versions flushed; a version the
/// mirror lacks at a flush is written once it has it, and until then the stored mirror
/// resumes below it, so that its watch brings it.
#[tokio::test]
async fn the_protobuf_mirror_is_stored_with_the_objects_it_has_versions_of() {
    let dir = tempdir();
    let store = Arc::new(Store::open(&dir).unwrap());
    let cache = new_cache();
    cache.replace(vec![cm("a", 5), cm("b", 6)], 10);
    let key = resource_key(&config());
    let tracked = Tracked::new(cache.cache().clone(), key.clone(), record(), false);
    let mut p = Persister::new(
        store.clone(),
        vec![tracked],
        FLUSH_EVERY,
        Arc::new(Metrics::new()),
    );
    let stored_mirror = || stored_with_mirror(&store, &key).1;
    // No mirror: nothing of it is stored.
    p.flush().await;
    assert!(stored_mirror().is_none());
    let mirror = mirror_of(&cache);
    mirror.install(
        10,
        vec![("ns/a".into(), 5, pb("a5")), ("ns/b".into(), 6, pb("b6"))],
        0,
    );
    // Synced since the last flush: written though no object changed.
    p.flush().await;
    let m = stored_mirror().unwrap();
    assert_eq!(m.rv, 10);
    assert_eq!(
        m.objects,
        vec![("ns/a".into(), 5, pb("a5")), ("ns/b".into(), 6, pb("b6"))]
    );
    // The JSON watch runs ahead of the mirror's: a's new version is not in the mirror yet.
    cache.apply(EventType::Modified, cm("a", 11));
    cache.apply(EventType::Deleted, cm("b", 12));
    p.flush().await;
    let m = stored_mirror().unwrap();
    assert_eq!(m.rv, 10, "resumes below the version it lacks");
    assert_eq!(m.objects, vec![("ns/a".into(), 5, pb("a5"))]);
    mirror.apply("ns/a", 11, pb("a11"), false, 0);
    mirror.apply("ns/b", 12, pb("b12"), true, 0);
    // Retried without a change of the objects.
    p.flush().await;
    let m = stored_mirror().unwrap();
    assert_eq!(m.rv, 12);
    assert_eq!(m.objects, vec![("ns/a".into(), 11, pb("a11"))]);
    // Forgetting the resource forgets its mirror.
    store.discard(&key).unwrap();
    let mut r = record();
    r.mirror_rv = Some(12);
    assert!(store.read_mirror(&key, &r).unwrap().is_none());
    drop(p);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// After a restart the stored mirror is the restored mirror's committed state: nothing is
/// written while nothing changes (not the whole mirror again), and a version it lacked before
/// the restart is written once its watch brings it.
#[tokio::test]
async fn a_restored_mirror_is_not_written_again_and_its_pending_versions_are() {
    let dir = tempdir();
    let store = Arc::new(Store::open(&dir).unwrap());
    let key = resource_key(&config());
    let cache = new_cache();
    cache.replace(vec![cm("a", 5), cm("b", 6)], 10);
    let mirror = mirror_of(&cache);
    // b's version is not in the mirror yet when the cache is flushed and kcache stops.
    mirror.install(5, vec![("ns/a".into(), 5, pb("a5"))], 0);
    let tracked = Tracked::new(cache.cache().clone(), key.clone(), record(), false);
    let mut p = Persister::new(
        store.clone(),
        vec![tracked],
        FLUSH_EVERY,
        Arc::new(Metrics::new()),
    );
    p.flush().await;
    drop(p);
    let (stored, stored_mirror) = stored_with_mirror(&store, &key);
    let stored_mirror = stored_mirror.unwrap();
    assert_eq!(stored.mirror_pending, vec!["ns/b".to_string()]);
    assert_eq!(stored_mirror.rv, 5);

    // The restart: the cache and its mirror restored as kcache restores them.
    let again = new_cache();
    restore_from(&store, &again, &key, &stored).unwrap();
    let mirror = mirror_of(&again);
    mirror.install(stored_mirror.rv, stored_mirror.objects.clone(), 0);
    let tracked = Tracked::new(again.cache().clone(), key.clone(), record(), true)
        .mirror_restored(&stored_mirror);
    let metrics = Arc::new(Metrics::new());
    let mut p = Persister::new(store.clone(), vec![tracked], FLUSH_EVERY, metrics.clone());
    let flushes = || {
        metrics
            .persist_flushes
            .get_or_create(&OutcomeLabels {
                resource: "configmaps".into(),
                outcome: "ok",
            })
            .get()
    };
    // Nothing changed and b's version still missing: a retry, but nothing new to write.
    mirror.apply("ns/a", 7, pb("a7"), false, 0);
    p.flush().await;
    let m = stored_with_mirror(&store, &key).1.unwrap();
    assert_eq!(m.rv, 5, "still below b's version");
    assert_eq!(m.objects, vec![("ns/a".into(), 5, pb("a5"))]);
    // The mirror's watch brings it: written, and the mirror resumes from its own RV.
    mirror.apply("ns/b", 6, pb("b6"), false, 0);
    p.flush().await;
    let (stored, m) = stored_with_mirror(&store, &key);
    let m = m.unwrap();
    assert!(stored.mirror_pending.is_empty());
    assert_eq!(m.rv, 7);
    assert_eq!(
        m.objects,
        vec![("ns/a".into(), 5, pb("a5")), ("ns/b".into(), 6, pb("b6"))]
    );
    // Nothing left to write: no flush at all.
    let before = flushes();
    p.flush().await;
    assert_eq!(flushes(), before);
    drop(p);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The protobuf mirror of `cache`, started empty.
fn mirror_of(cache: &Writer) -> Arc<crate::cache::Mirror> {
    cache
        .cache()
        .mirror_or_start(|| Arc::new(crate::cache::Mirror::new()))
        .clone()
}

/// Protobuf bytes standing for an object version's.
fn pb(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The record stored of `key`, and the protobuf mirror stored with it.
fn stored_with_mirror(store: &Store, key: &str) -> (Record, Option<StoredMirror>) {
    let record = store.record(key, &record().config).unwrap().unwrap();
    let mirror = store.read_mirror(key, &record).unwrap();
    (record, mirror)
}

/// A fresh directory under the system's temporary directory.
fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kcache-persist-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
