//! Warm restart: each cached resource's objects and resourceVersion kept on disk
//! (`cache.persistDir`), so that a restarted kcache serves reads at `resourceVersion=0` at once
//! and resumes its upstream watches where it stopped instead of relisting every type.
//!
//! **Why redb.** The store is [redb](https://docs.rs/redb): pure Rust (no C library to build
//! or link, and nothing `unsafe` of kcache's own), one file, and copy-on-write B-trees whose
//! commits are atomic: a commit either lands whole or not at all, so a `kill -9` or a power
//! loss in the middle of a flush leaves the last committed state, never half of one. That is
//! the property kcache needs: a stored set of objects is only worth serving if it is exactly
//! the cache's state at the stored resourceVersion. Measured against fjall on this workload
//! (BENCHMARKS.md, "Measured apart from the bench"), redb writes ~2.5× more bytes per change and takes
//! ~1.8× the disk; it is kept for its single file and the crash tests it passes, and fjall is
//! the candidate if that cost matters.
//!
//! **What is stored.** A table `meta` holds the schema version and, per resource, a
//! [`Record`]: the resourceVersion the stored objects are valid at, when that state was last
//! confirmed with the upstream, the discovery facts (kind, scope, list form, a CRD's
//! selectable fields) and a fingerprint of the resource's configuration. A table per resource
//! holds its objects, key (`namespace/name`) → the upstream JSON bytes exactly as the cache
//! holds them.
//!
//! **Writes are off the event path.** The reflector and the cache never wait on the disk: a
//! `Persister` task takes the cache's [`Snapshot`](crate::cache::Snapshot) (objects and RV
//! at one instant, O(1)) about once a second, diffs its map against the one it last committed, and commits the
//! difference and the snapshot's RV in one transaction (on a blocking thread). The diff skips
//! the subtrees the two maps share, so a flush costs in proportion to what changed. The stored
//! state is therefore always one the cache really had at the stored RV. With `persistDir`
//! unset none of this exists, and the cache pays nothing.
//!
//! **Loading.** At start, a resource whose record matches its configuration is loaded into its
//! cache before its reflector starts (`restore_from`, which reads each object's head on one
//! thread per core while the file is read); the reflector then checks that the upstream
//! has reached the stored RV and resumes its watch from there (a 410 makes it relist, as any
//! expired watch does; an upstream behind the stored RV, another cluster or a restore, too). Anything that cannot be
//! loaded — a file that is not a readable database, another schema version, an object that
//! does not parse, a resource configured differently or no longer configured — is discarded
//! with a warning and that resource syncs cold: stored data is never served wrong. Every page's
//! checksum is verified when the file is opened (by redb's own repair after a crash, else by
//! an integrity check), so a byte changed on the disk behind redb's back is caught too, not
//! only a file redb cannot open.
//!
//! **Protobuf mirrors are stored beside their objects.** A type some client reads in protobuf
//! has a mirror of the upstream's protobuf bytes (`cache::Mirror`), which a restarted kcache
//! would otherwise fill with a list of the whole type before answering protobuf again (the
//! largest upstream cost of a restart: BENCHMARKS.md, "The restarted herd's lists"). Each flush
//! also writes, to a second table, the mirror's bytes of the flushed objects' versions, and the
//! record says from which RV the stored mirror can resume its watch (`mirror_rv`: at most the
//! mirror's own RV, and below any flushed version the mirror did not have yet, which are
//! retried at the next flushes, and named in the record so that a restart goes on retrying
//! them). A restarted kcache installs them and watches from there; its flushes then write
//! what changes, not the whole mirror again.
//!
//! **Watch history is not stored.** A restored cache's history starts at the stored RV: a
//! downstream watch resuming from an older RV gets 410 Expired and relists, one from the stored
//! RV or later gets every event after it.
//!
//! Why one file of this length: the record format, the store that reads and writes it, and
//! the persister that decides when to write change together whenever the format does (the
//! fingerprint, the integrity check and the restore all read the same record). The tests are
//! in `persist/tests.rs`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use imbl::ordmap::DiffItem;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cache::{ObjectMap, ResourceCache, Writer};
use crate::config::ResourceConfig;
use crate::metrics::{Metrics, OutcomeLabels, ResourceLabels};
use crate::object::{Object, ObjectError, Strip};
use crate::resource::ResourceInfo;

/// The database file inside `cache.persistDir`.
pub const FILE: &str = "kcache.redb";

/// Bumped whenever what is stored changes meaning; a file of another version is discarded.
pub(crate) const SCHEMA: u64 = 1;

/// How many objects a warm start's load hands to a parsing thread at a time.
const BATCH: usize = 1024;

/// The memory redb may keep of the file's pages (nine tenths a read cache, one tenth a write
/// buffer). redb's default is 1 GiB, and every page a commit writes goes into its read cache
/// until that is full; but kcache reads the file only once, at start, so those pages are
/// never read again: kcache's own resident memory, counted nowhere, growing with the state
/// written (BENCHMARKS.md, "The store's page cache"). What a commit does read again are the
/// B-trees' branch pages on the way to the keys it changes, a few MB even at 150,000 objects;
/// beyond the write buffer a large commit writes its pages out as it goes. The one cost is at
/// start: opening checks every page and the load then reads them again, from the system's
/// page cache instead of redb's (about 0.2 s more for 100k ConfigMaps); a cache large enough to
/// keep them would raise every restart's peak memory by as much as the file.
const STORE_CACHE_BYTES: usize = 64 << 20;

/// How often changes are committed.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// A quiet resource's record is rewritten this often all the same, so that the stored
/// "confirmed at" time (the age a restart starts from) stays close to the truth.
const REFRESH_EVERY: Duration = Duration::from_secs(60);

/// How long after a failed flush the next is tried.
const RETRY_AFTER: Duration = Duration::from_secs(30);

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const SCHEMA_KEY: &str = "schema";
const RECORD_PREFIX: &str = "resource:";
const OBJECTS_PREFIX: &str = "objects:";
const PROTOBUF_PREFIX: &str = "protobuf:";

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("creating {path}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("removing {path}")]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is in use by another process (another kcache with the same cache.persistDir?)"
    )]
    Locked { path: PathBuf },
    #[error("the database file is damaged (reading it failed)")]
    Unreadable,
    #[error("database")]
    Db(#[source] Box<redb::Error>),
    #[error("stored data has schema version {found}; this kcache reads {SCHEMA}")]
    Schema { found: String },
    #[error("stored record of {resource}")]
    Record {
        resource: String,
        source: serde_json::Error,
    },
    #[error("stored object {key:?} of {resource}")]
    Object {
        resource: String,
        key: String,
        source: ObjectError,
    },
    #[error("stored {resource}: {why}")]
    Mismatch { resource: String, why: String },
    #[error("the write task")]
    Task(#[source] tokio::task::JoinError),
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for PersistError {
            fn from(e: $t) -> Self {
                PersistError::Db(Box::new(e.into()))
            }
        }
    )*};
}
from_redb!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// What is kept of one resource besides its objects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// [`fingerprint`] of the resource's configuration when the objects were cached: a
    /// different scope or `dropManagedFields` would make them the wrong objects.
    pub config: String,
    pub kind: String,
    pub namespaced: bool,
    pub custom: bool,
    /// A custom resource's `selectableFields` (jsonPaths) from its CRD.
    pub selectable: Vec<String>,
    /// The resourceVersion the stored objects are the cache's state at.
    pub rv: u64,
    /// When that state was last confirmed current with the upstream (ms since the epoch).
    pub confirmed_ms: u64,
    /// How many objects are stored: a check on the table.
    pub objects: u64,
    /// Set when the type's protobuf mirror is stored too: the RV its watch resumes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_rv: Option<u64>,
    /// The keys whose stored object version the stored mirror lacks (its watch brings them
    /// after `mirror_rv`; the flushes after a restart write them once it has).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirror_pending: Vec<String>,
}

/// A protobuf mirror as loaded from the store: per key, the version's RV and its bytes.
#[derive(Debug)]
pub(crate) struct StoredMirror {
    pub rv: u64,
    pub objects: Vec<(Box<str>, u64, Bytes)>,
    /// The keys of the stored objects whose version it lacks ([`Record::mirror_pending`]).
    pub pending: Vec<String>,
}

/// What one flush writes of a type's protobuf mirror.
#[derive(Debug)]
pub(crate) struct MirrorWrite {
    /// Replace what is stored (the first write of a mirror).
    pub whole: bool,
    /// Key → the version's RV and its bytes. The objects deleted are deleted from it too.
    pub upserts: Vec<(String, u64, Bytes)>,
}

/// A resource as loaded from the store.
#[derive(Debug)]
pub struct Stored {
    pub record: Record,
    /// Key → the object's JSON bytes, in key order.
    pub objects: Vec<(String, Bytes)>,
}

impl Record {
    /// The discovery facts of the resource as they were when it was stored.
    pub(crate) fn info(&self, r: &ResourceConfig) -> ResourceInfo {
        ResourceInfo {
            group: r.group.clone(),
            version: r.version.clone(),
            resource: r.resource.clone(),
            kind: self.kind.clone(),
            namespaced: self.namespaced,
            custom: self.custom,
        }
    }

    /// How long before now the stored state was last confirmed current.
    pub(crate) fn age(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.confirmed_ms))
    }
}

impl Stored {
    /// How long before now the stored state was last confirmed current.
    #[cfg(test)]
    pub(crate) fn age(&self) -> Duration {
        self.record.age()
    }
}

/// The store key of a configured resource (`group/version/resource`, group empty for core).
pub fn resource_key(r: &ResourceConfig) -> String {
    format!("{}/{}/{}", r.group, r.version, r.resource)
}

/// What of a resource's configuration decides which objects its cache holds, and in what
/// form: its scope (namespace, selectors) and what its cache leaves out of objects (`strip`,
/// the cache's own `CacheConfig::strip`). Indexes are not part of it: they are computed again
/// from the bytes at load.
pub fn fingerprint(r: &ResourceConfig, strip: &Strip) -> String {
    let mut f = serde_json::json!({
        "namespace": r.namespace,
        "labelSelector": r.label_selector,
        "fieldSelector": r.field_selector,
        "dropManagedFields": strip.managed_fields,
        "dropAnnotations": strip.annotations,
    });
    // Only when set, so that the stores of full caches written before the option existed
    // still match.
    if strip.metadata_only {
        f["metadataOnly"] = true.into();
    }
    f.to_string()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn objects_table(key: &str) -> String {
    format!("{OBJECTS_PREFIX}{key}")
}

fn protobuf_table(key: &str) -> String {
    format!("{PROTOBUF_PREFIX}{key}")
}

/// The database.
pub struct Store {
    db: Database,
    path: PathBuf,
}

impl Store {
    /// Open (or create) the store in `dir`. A file that is not a readable database of this
    /// schema is discarded with a warning and created anew; a file another process holds open
    /// is an error.
    pub fn open(dir: &Path) -> Result<Store, PersistError> {
        std::fs::create_dir_all(dir).map_err(|source| PersistError::Dir {
            path: dir.to_owned(),
            source,
        })?;
        let path = dir.join(FILE);
        match Store::open_file(&path) {
            Ok(s) => Ok(s),
            Err(e @ PersistError::Locked { .. }) => Err(e),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %crate::error::Report(&e),
                    "stored cache unreadable; discarding it and syncing from the upstream");
                std::fs::remove_file(&path).map_err(|source| PersistError::Remove {
                    path: path.clone(),
                    source,
                })?;
                Store::open_file(&path)
            }
        }
    }

    fn open_file(path: &Path) -> Result<Store, PersistError> {
        // redb reports most damage as an error but asserts on some (a file cut short panics
        // in its page manager), so a panic while opening is one more "unreadable file". The
        // panic unwinds before any database exists: nothing of it is left half-open.
        // redb repairs a file not closed cleanly (a kill, a crash) while opening it, and that
        // repair verifies every page's checksum; the callback tells that it ran.
        let repaired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = repaired.clone();
        let opened = std::panic::catch_unwind(move || {
            Database::builder()
                .set_cache_size(STORE_CACHE_BYTES)
                .set_repair_callback(move |_| {
                    flag.store(true, std::sync::atomic::Ordering::Relaxed)
                })
                .create(path)
        })
        .map_err(|_| PersistError::Unreadable)?;
        let mut db = match opened {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(PersistError::Locked {
                    path: path.to_owned(),
                })
            }
            Err(e) => return Err(e.into()),
        };
        // A file closed cleanly is opened without any check of its pages: a bit changed on
        // the disk could then reach a client as a wrong object that still parses. So unless
        // the open's repair has just checked every page, check them now (a read of the
        // whole file, which the load then finds in the page cache); Ok(false) is a file rolled
        // back to its last good commit, which is still a state the cache had. Not both: after
        // a kill the two would walk the whole file four times, a third of a warm start at
        // 100k objects (BENCHMARKS.md, warm restart).
        if !repaired.load(std::sync::atomic::Ordering::Relaxed) {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.check_integrity()))
                .map_err(|_| PersistError::Unreadable)??;
        }
        let txn = db.begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            let found = meta.get(SCHEMA_KEY)?.map(|v| v.value().to_vec());
            match found {
                Some(v) if v == SCHEMA.to_string().as_bytes() => {}
                Some(v) => {
                    return Err(PersistError::Schema {
                        found: String::from_utf8_lossy(&v).into_owned(),
                    })
                }
                None => {
                    if meta.len()? > 0 {
                        return Err(PersistError::Schema {
                            found: "none".into(),
                        });
                    }
                    meta.insert(SCHEMA_KEY, SCHEMA.to_string().as_bytes())?;
                }
            }
        }
        txn.commit()?;
        Ok(Store {
            db,
            path: path.to_owned(),
        })
    }

    /// Give the file's free pages back to the file system.
    pub(crate) fn compact(&mut self) -> Result<(), PersistError> {
        self.db
            .compact()
            .map_err(|e| PersistError::Db(Box::new(e.into())))?;
        Ok(())
    }

    /// The database file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The stored state of resource `key`, if any. Err when what is stored cannot be used
    /// (the caller discards it); the objects are checked further by `restore`.
    pub fn load(&self, key: &str, config: &str) -> Result<Option<Stored>, PersistError> {
        let Some(record) = self.record(key, config)? else {
            return Ok(None);
        };
        let mut objects = Vec::with_capacity(usize::try_from(record.objects).unwrap_or(0));
        self.read_objects(key, &record, |batch| objects.extend(batch))?;
        Ok(Some(Stored { record, objects }))
    }

    /// The record of resource `key`, if any; Err when it cannot be used (the caller discards
    /// the resource): unreadable, or stored for another configuration.
    pub(crate) fn record(&self, key: &str, config: &str) -> Result<Option<Record>, PersistError> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let Some(raw) = meta.get(format!("{RECORD_PREFIX}{key}").as_str())? else {
            return Ok(None);
        };
        let record: Record =
            serde_json::from_slice(raw.value()).map_err(|source| PersistError::Record {
                resource: key.to_owned(),
                source,
            })?;
        if record.config != config {
            return Err(PersistError::Mismatch {
                resource: key.to_owned(),
                why: "configured differently (scope or dropManagedFields) since it was stored"
                    .into(),
            });
        }
        Ok(Some(record))
    }

    /// Read the objects of resource `key` in key order, handing them to `each` in batches of
    /// [`BATCH`]; Err if there are not as many as `record` says. A transaction of its own,
    /// apart from the record's: both are read at start, before anything writes.
    fn read_objects(
        &self,
        key: &str,
        record: &Record,
        mut each: impl FnMut(Vec<(String, Bytes)>),
    ) -> Result<(), PersistError> {
        let txn = self.db.begin_read()?;
        let name = objects_table(key);
        let table = txn.open_table(TableDefinition::<&str, &[u8]>::new(&name))?;
        let mut read = 0u64;
        let mut batch = Vec::with_capacity(BATCH);
        for entry in table.iter()? {
            let (k, v) = entry?;
            batch.push((k.value().to_owned(), Bytes::copy_from_slice(v.value())));
            read += 1;
            if batch.len() == BATCH {
                each(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
            }
        }
        if !batch.is_empty() {
            each(batch);
        }
        if read != record.objects {
            return Err(PersistError::Mismatch {
                resource: key.to_owned(),
                why: format!("{read} objects stored, the record says {}", record.objects),
            });
        }
        Ok(())
    }

    /// The protobuf mirror stored with resource `key` (whose record is `record`), if any.
    /// Err when it cannot be read; the caller then lets the mirror list as it would without
    /// a store.
    pub(crate) fn read_mirror(
        &self,
        key: &str,
        record: &Record,
    ) -> Result<Option<StoredMirror>, PersistError> {
        let Some(rv) = record.mirror_rv else {
            return Ok(None);
        };
        let txn = self.db.begin_read()?;
        let name = protobuf_table(key);
        let table = match txn.open_table(TableDefinition::<&str, &[u8]>::new(&name)) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut objects = Vec::with_capacity(usize::try_from(table.len()?).unwrap_or(0));
        for entry in table.iter()? {
            let (k, v) = entry?;
            let (version, bytes) =
                split_version(v.value()).ok_or_else(|| PersistError::Mismatch {
                    resource: key.to_owned(),
                    why: format!(
                        "the protobuf of {:?} is stored without its version",
                        k.value()
                    ),
                })?;
            objects.push((k.value().into(), version, Bytes::copy_from_slice(bytes)));
        }
        Ok(Some(StoredMirror {
            rv,
            objects,
            pending: record.mirror_pending.clone(),
        }))
    }

    /// Forget resource `key` (its record, objects and protobuf mirror).
    pub(crate) fn discard(&self, key: &str) -> Result<(), PersistError> {
        let txn = self.db.begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            meta.remove(format!("{RECORD_PREFIX}{key}").as_str())?;
            for name in [objects_table(key), protobuf_table(key)] {
                txn.delete_table(TableDefinition::<&str, &[u8]>::new(&name))?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Forget every resource whose key is not in `keep` (no longer configured).
    pub(crate) fn retain(&self, keep: &HashSet<String>) -> Result<Vec<String>, PersistError> {
        let mut gone = Vec::new();
        {
            let txn = self.db.begin_read()?;
            let meta = txn.open_table(META)?;
            for entry in meta.iter()? {
                let (k, _) = entry?;
                if let Some(key) = k.value().strip_prefix(RECORD_PREFIX) {
                    if !keep.contains(key) {
                        gone.push(key.to_owned());
                    }
                }
            }
            for t in txn.list_tables()? {
                let name = t.name();
                let key = name
                    .strip_prefix(OBJECTS_PREFIX)
                    .or_else(|| name.strip_prefix(PROTOBUF_PREFIX));
                if let Some(key) = key {
                    if !keep.contains(key) && !gone.iter().any(|g| g == key) {
                        gone.push(key.to_owned());
                    }
                }
            }
        }
        for key in &gone {
            self.discard(key)?;
        }
        Ok(gone)
    }

    /// Commit one flush of resource `key`: the objects upserted and deleted since the last
    /// one (with `whole`, `upserts` is every object and replaces what is stored), what
    /// changed of its protobuf mirror (the objects deleted leave it too), and the record of
    /// the state they make. One transaction: all of it or none.
    pub(crate) fn write(
        &self,
        key: &str,
        record: &Record,
        whole: bool,
        upserts: &[(String, Bytes)],
        deletes: &[String],
        mirror: Option<&MirrorWrite>,
    ) -> Result<(), PersistError> {
        let txn = self.db.begin_write()?;
        if let Some(m) = mirror {
            let name = protobuf_table(key);
            if m.whole {
                txn.delete_table(TableDefinition::<&str, &[u8]>::new(&name))?;
            }
            let mut table = txn.open_table(TableDefinition::<&str, &[u8]>::new(&name))?;
            for k in deletes {
                table.remove(k.as_str())?;
            }
            let mut value = Vec::new();
            for (k, rv, bytes) in &m.upserts {
                value.clear();
                value.extend_from_slice(&rv.to_be_bytes());
                value.extend_from_slice(bytes);
                table.insert(k.as_str(), value.as_slice())?;
            }
        }
        {
            let name = objects_table(key);
            if whole {
                txn.delete_table(TableDefinition::<&str, &[u8]>::new(&name))?;
            }
            let mut table = txn.open_table(TableDefinition::<&str, &[u8]>::new(&name))?;
            for k in deletes {
                table.remove(k.as_str())?;
            }
            for (k, v) in upserts {
                table.insert(k.as_str(), v.as_ref())?;
            }
            let stored = table.len()?;
            if stored != record.objects {
                // The diff did not start from what is stored: refuse rather than commit a
                // record that does not describe the table.
                return Err(PersistError::Mismatch {
                    resource: key.to_owned(),
                    why: format!(
                        "a flush would leave {stored} objects for a state of {}",
                        record.objects
                    ),
                });
            }
            let mut meta = txn.open_table(META)?;
            let value = serde_json::to_vec(record).map_err(|source| PersistError::Record {
                resource: key.to_owned(),
                source,
            })?;
            meta.insert(format!("{RECORD_PREFIX}{key}").as_str(), value.as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }
}

/// A stored protobuf version: its RV (8 bytes, big-endian), then its bytes.
fn split_version(value: &[u8]) -> Option<(u64, &[u8])> {
    let (rv, bytes) = value.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*rv), bytes))
}

/// Install a loaded resource in its (new, empty) cache, marked restored: served at
/// `resourceVersion=0` at once, with its age counted from when it was last confirmed, but not
/// taken as confirmed current by consistent reads until the reflector has reached the
/// upstream. Err, with the cache left empty, when an object does not parse or is not stored
/// under its own key.
#[cfg(test)]
pub(crate) fn restore(writer: &Writer, stored: &Stored) -> Result<(), PersistError> {
    let cache: &ResourceCache = writer;
    // Reading each object's head is most of a warm start (BENCHMARKS.md, warm restart), and
    // each object is read on its own: the objects are split over the machine's cores.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let part = stored.objects.len().div_ceil(threads).max(1);
    let parsed: Vec<Result<Vec<Arc<Object>>, PersistError>> = std::thread::scope(|s| {
        let parts: Vec<_> = stored
            .objects
            .chunks(part)
            .map(|objects| s.spawn(|| parse(cache, objects, stored.record.rv)))
            .collect();
        parts
            .into_iter()
            .map(|p| p.join().unwrap_or(Err(PersistError::Unreadable)))
            .collect()
    });
    let mut objects = Vec::with_capacity(stored.objects.len());
    for p in parsed {
        objects.extend(p?);
    }
    writer.restore(objects, stored.record.rv, stored.age());
    Ok(())
}

/// Read the heads of stored objects and check each is stored under its own key and is not
/// newer than the stored state (`rv`).
fn parse(
    cache: &ResourceCache,
    stored: &[(String, Bytes)],
    rv: u64,
) -> Result<Vec<Arc<Object>>, PersistError> {
    let resource = cache.info.to_string();
    let mut objects = Vec::with_capacity(stored.len());
    for (key, raw) in stored {
        // The bytes are what the cache held, with what it leaves out (managed fields, dropped
        // annotations) already left out.
        let o = Object::from_upstream_indexed(&cache.info, &cache.indexes, raw.clone(), false)
            .map_err(|source| PersistError::Object {
                resource: resource.clone(),
                key: key.clone(),
                source,
            })?;
        if o.key() != key {
            return Err(PersistError::Mismatch {
                resource,
                why: format!("object {:?} stored under key {key:?}", o.key()),
            });
        }
        if o.rv > rv {
            return Err(PersistError::Mismatch {
                resource,
                why: format!(
                    "object {key:?} at resourceVersion {} is newer than the stored state ({rv})",
                    o.rv
                ),
            });
        }
        objects.push(Arc::new(o));
    }
    Ok(objects)
}

/// One batch of a warm start's load, parsed: its place in key order, and its objects.
type Parsed = (usize, Vec<Arc<Object>>);

/// Install resource `key` of `store` (its [`Store::record`] is `record`) in its (new, empty)
/// cache, as `restore` does, reading the file and the objects' heads at the same time: this
/// thread reads the objects in batches while one thread per core reads their heads. Err, with
/// the cache left empty, as `restore`, or when the objects cannot be read.
pub(crate) fn restore_from(
    store: &Store,
    writer: &Writer,
    key: &str,
    record: &Record,
) -> Result<(), PersistError> {
    let cache: &ResourceCache = writer;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Unbounded: a parser that failed still drains it, but one that panicked does not, and
    // the reader must never wait for it. At most the stored objects, as a whole load holds.
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Vec<(String, Bytes)>)>();
    let rx = std::sync::Mutex::new(rx);
    let (read, parsed) = std::thread::scope(|s| {
        let parsers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut result: Result<Vec<Parsed>, PersistError> = Ok(Vec::new());
                    loop {
                        let next = rx
                            .lock()
                            .map_err(|_| ())
                            .and_then(|r| r.recv().map_err(|_| ()));
                        let Ok((at, batch)) = next else {
                            break;
                        };
                        if let Ok(done) = &mut result {
                            match parse(cache, &batch, record.rv) {
                                Ok(objects) => done.push((at, objects)),
                                Err(e) => result = Err(e),
                            }
                        }
                    }
                    result
                })
            })
            .collect();
        let mut at = 0;
        let read = store.read_objects(key, record, |batch| {
            let _ = tx.send((at, batch));
            at += 1;
        });
        drop(tx);
        let parsed: Vec<_> = parsers
            .into_iter()
            .map(|p| p.join().unwrap_or(Err(PersistError::Unreadable)))
            .collect();
        (read, parsed)
    });
    read?;
    let mut batches = Vec::new();
    for p in parsed {
        batches.extend(p?);
    }
    // Back in key order, as read.
    batches.sort_unstable_by_key(|(at, _)| *at);
    let objects: Vec<Arc<Object>> = batches.into_iter().flat_map(|(_, b)| b).collect();
    writer.restore(objects, record.rv, record.age());
    Ok(())
}

/// One resource the persister keeps on disk.
pub(crate) struct Tracked {
    pub cache: Arc<ResourceCache>,
    pub key: String,
    /// The record's fixed part (configuration and discovery facts); the RV, time and count
    /// are filled in at each flush.
    pub record: Record,
    /// What is committed: the objects and the RV (None: not known; the next flush writes
    /// every object).
    committed: Option<(ObjectMap, u64)>,
    written: Option<std::time::Instant>,
    /// After a failed flush, the next is not tried before this (see `flush_one`).
    retry_at: Option<std::time::Instant>,
    /// Set once what is stored of a cache over its memory budget was discarded.
    forgotten: bool,
    /// What is committed of the type's protobuf mirror.
    mirror: MirrorCommitted,
}

/// What the store holds of a type's protobuf mirror.
#[derive(Debug, Default)]
struct MirrorCommitted {
    /// The mirror's bytes of every committed object version but `pending`'s; false: nothing
    /// (the next flush with a synced mirror writes it whole).
    stored: bool,
    /// Keys whose committed version the mirror did not have yet when it was flushed: the
    /// next flushes try them again, and the stored mirror resumes below them.
    pending: HashSet<String>,
}

impl Tracked {
    /// Track `cache`; `restored` says whether its current state is what the store holds (it
    /// was just loaded), else the store holds nothing of it.
    pub(crate) fn new(
        cache: Arc<ResourceCache>,
        key: String,
        record: Record,
        restored: bool,
    ) -> Tracked {
        let committed = restored.then(|| {
            let snap = cache.snapshot();
            (snap.objects, snap.rv)
        });
        Tracked {
            cache,
            key,
            record,
            committed,
            written: restored.then(std::time::Instant::now),
            retry_at: None,
            forgotten: false,
            mirror: MirrorCommitted::default(),
        }
    }

    /// The cache's protobuf mirror was restored from the store (`stored`, installed by
    /// `Mirrors::resume`): what the store holds of it is the mirror's committed state, so the
    /// flushes from here on write what changes, not the whole mirror again.
    pub(crate) fn mirror_restored(mut self, stored: &StoredMirror) -> Tracked {
        self.mirror = MirrorCommitted {
            stored: true,
            pending: stored.pending.iter().cloned().collect(),
        };
        self
    }
}

/// The task that commits what changed in the caches, about once a second and at shutdown.
pub(crate) struct Persister {
    store: Arc<Store>,
    tracked: Vec<Tracked>,
    every: Duration,
    metrics: Arc<Metrics>,
}

/// A running [`Persister`]: [`PersisterHandle::stop`] makes it flush once more and end.
pub(crate) struct PersisterHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl PersisterHandle {
    /// Flush what is left and wait for the task to end (the store is closed then).
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl Persister {
    pub(crate) fn new(
        store: Arc<Store>,
        tracked: Vec<Tracked>,
        every: Duration,
        metrics: Arc<Metrics>,
    ) -> Persister {
        Persister {
            store,
            tracked,
            every,
            metrics,
        }
    }

    pub(crate) fn spawn(self) -> PersisterHandle {
        let (stop, rx) = watch::channel(false);
        PersisterHandle {
            stop,
            task: tokio::spawn(self.run(rx)),
        }
    }

    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopping = tokio::select! {
                _ = tick.tick() => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            if stopping {
                break;
            }
            self.flush().await;
        }
        self.flush().await;
        // Copy-on-write leaves freed pages behind in the file; giving them back at a clean
        // stop keeps the file near the size of what it holds (a stop that never comes, a
        // kill, only leaves a larger file, whose free pages later commits reuse).
        if let Ok(mut store) = Arc::try_unwrap(self.store) {
            let compacted = tokio::task::spawn_blocking(move || store.compact()).await;
            if let Ok(Err(e)) = compacted {
                tracing::info!(error = %crate::error::Report(&e), "could not compact the stored cache");
            }
        }
    }

    /// Commit each synced cache's changes since its last commit.
    pub(crate) async fn flush(&mut self) {
        for t in &mut self.tracked {
            let started = std::time::Instant::now();
            let outcome = match flush_one(&self.store, t).await {
                Ok(false) => continue,
                Ok(true) => "ok",
                Err(e) => {
                    tracing::warn!(resource = %t.cache.info, error = %crate::error::Report(&e),
                        "could not write the cache to disk; retrying in 30s");
                    "error"
                }
            };
            let resource = t.cache.info.resource.clone();
            let protobuf = match (&t.committed, t.mirror.stored) {
                (Some((objects, _)), true) => objects.len().saturating_sub(t.mirror.pending.len()),
                _ => 0,
            };
            self.metrics
                .persist_protobuf_objects
                .get_or_create(&ResourceLabels {
                    resource: resource.clone(),
                })
                .set(i64::try_from(protobuf).unwrap_or(i64::MAX));
            self.metrics
                .persist_flush_seconds
                .get_or_create(&ResourceLabels {
                    resource: resource.clone(),
                })
                .observe(started.elapsed().as_secs_f64());
            self.metrics
                .persist_flushes
                .get_or_create(&OutcomeLabels { resource, outcome })
                .inc();
        }
    }
}

/// Commit one cache's changes; Ok(false) when there was nothing to commit.
async fn flush_one(store: &Arc<Store>, t: &mut Tracked) -> Result<bool, PersistError> {
    // A type no longer cached (over its budget, or no longer served) is not restored either.
    if t.cache.budget().is_over() || t.cache.is_not_served() {
        return forget(store, t).await;
    }
    if !t.cache.is_synced() || t.retry_at.is_some_and(|at| std::time::Instant::now() < at) {
        return Ok(false);
    }
    let snap = t.cache.snapshot();
    // After the snapshot: one taken as the cache went over budget may be of the emptied cache.
    if t.cache.budget().is_over() {
        return forget(store, t).await;
    }
    let due = t.written.is_none_or(|w| w.elapsed() >= REFRESH_EVERY);
    // A mirror synced since the last flush, or versions it lacked then, are written without
    // waiting for the objects to change.
    let mirror_due = t.cache.mirror().is_some_and(|m| m.is_synced())
        && (!t.mirror.stored || !t.mirror.pending.is_empty());
    if t.committed.as_ref().is_some_and(|(_, rv)| *rv == snap.rv) && !due && !mirror_due {
        return Ok(false);
    }
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    // The objects upserted, for the mirror's part.
    let mut changed: Vec<&Arc<Object>> = Vec::new();
    match &t.committed {
        None => {
            for (k, o) in snap.objects.iter() {
                upserts.push((k.as_str().to_owned(), o.raw_bytes()));
                changed.push(o);
            }
        }
        Some((old, _)) => {
            for item in old.diff(&snap.objects) {
                match item {
                    DiffItem::Add(k, o) => {
                        upserts.push((k.as_str().to_owned(), o.raw_bytes()));
                        changed.push(o);
                    }
                    DiffItem::Update {
                        old: (_, a),
                        new: (k, b),
                    } => {
                        if !Arc::ptr_eq(a, b) {
                            upserts.push((k.as_str().to_owned(), b.raw_bytes()));
                            changed.push(b);
                        }
                    }
                    DiffItem::Remove(k, _) => deletes.push(k.as_str().to_owned()),
                }
            }
        }
    }
    let whole = t.committed.is_none();
    let (mirror, pending, mirror_rv) = mirror_part(t, &snap, whole, &changed);
    // When the state was last confirmed: now minus how long the cache has gone without
    // hearing from the upstream.
    let mut record = t.record.clone();
    record.rv = snap.rv;
    record.objects = snap.objects.len() as u64;
    record.mirror_rv = mirror_rv;
    record.mirror_pending = pending.iter().cloned().collect();
    record.mirror_pending.sort_unstable();
    let age_ms = u64::try_from(t.cache.contact().age().as_millis()).unwrap_or(u64::MAX);
    record.confirmed_ms = now_ms().saturating_sub(age_ms);
    let store = store.clone();
    let key = t.key.clone();
    let written = tokio::task::spawn_blocking(move || {
        store.write(&key, &record, whole, &upserts, &deletes, mirror.as_ref())
    })
    .await
    .map_err(PersistError::Task)
    .and_then(|r| r);
    if let Err(e) = written {
        // What is stored is still the last commit, but the next attempt writes every object
        // instead of the changes since: holding on to the committed map would keep every
        // object replaced since alive for as long as the disk refuses (full, read-only). Not
        // before a pause, so a failing disk is not rewritten in full every second.
        t.committed = None;
        t.mirror = MirrorCommitted::default();
        t.retry_at = Some(std::time::Instant::now() + RETRY_AFTER);
        return Err(e);
    }
    t.retry_at = None;
    t.committed = Some((snap.objects, snap.rv));
    t.mirror = MirrorCommitted {
        stored: mirror_rv.is_some(),
        pending,
    };
    t.written = Some(std::time::Instant::now());
    Ok(true)
}

/// What a flush writes of the type's protobuf mirror (None: nothing, the mirror is not
/// synced or there is none), the keys it still lacks versions of, and the RV the stored
/// mirror resumes from (None: nothing stored is usable). `whole`: the objects are written
/// whole; `changed`: the objects the flush writes.
fn mirror_part(
    t: &Tracked,
    snap: &crate::cache::Snapshot,
    whole: bool,
    changed: &[&Arc<Object>],
) -> (Option<MirrorWrite>, HashSet<String>, Option<u64>) {
    let Some(mirror) = t.cache.mirror().filter(|m| m.is_synced()) else {
        return (None, HashSet::new(), None);
    };
    let whole = whole || !t.mirror.stored;
    let mut write = MirrorWrite {
        whole,
        upserts: Vec::new(),
    };
    let mut pending = HashSet::new();
    // Below the first version the mirror lacks, so that its watch brings it.
    let mut resume = mirror.rv().min(snap.rv);
    let mut take = |key: &str, o: &Object| match mirror.get(o.rv) {
        Some(bytes) => write.upserts.push((key.to_owned(), o.rv, bytes)),
        None => {
            resume = resume.min(o.rv.saturating_sub(1));
            pending.insert(key.to_owned());
        }
    };
    if whole {
        for (k, o) in snap.objects.iter() {
            take(k.as_str(), o);
        }
    } else {
        for o in changed {
            take(o.key(), o);
        }
        // A pending key also changed is taken twice: the same version, written once more.
        for key in &t.mirror.pending {
            if let Some(o) = snap.objects.get(key.as_str()) {
                take(key, o);
            }
        }
    }
    (Some(write), pending, Some(resume))
}

/// A cache that went over its memory budget holds nothing and is passed through until kcache
/// restarts: what is stored of it is discarded (once), so that the next start does not load
/// a state that was about to go over the budget, and the type syncs from the upstream as
/// without `persistDir` (going over the budget again if it still is). Ok(true) when it was
/// discarded now.
async fn forget(store: &Arc<Store>, t: &mut Tracked) -> Result<bool, PersistError> {
    if t.forgotten {
        return Ok(false);
    }
    let s = store.clone();
    let key = t.key.clone();
    tokio::task::spawn_blocking(move || s.discard(&key))
        .await
        .map_err(PersistError::Task)??;
    t.forgotten = true;
    t.committed = None;
    Ok(true)
}

#[cfg(test)]
mod tests;
