//! The staleness check of consistent reads: every write acknowledged before a read was sent
//! must be in that read's answer.
//!
//! The writer records each acknowledged write (object name, resourceVersion, when); for each
//! LIST answer, the checker takes the writes acknowledged before the request was sent and
//! requires every such object in the answer at that resourceVersion or a later one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use serde::Deserialize;

/// Acknowledged writes in the order they were acknowledged.
#[derive(Default)]
pub struct AckLog {
    acks: Mutex<Vec<(Instant, String, u64)>>,
}

impl AckLog {
    /// Call when the write has returned.
    pub fn record(&self, name: &str, rv: u64) {
        let mut acks = self.acks.lock().unwrap_or_else(|e| e.into_inner());
        // Taken under the lock, so the log is ordered by time.
        acks.push((Instant::now(), name.to_string(), rv));
    }

    /// For each object written before `t`: the resourceVersion of its last such write.
    pub fn required_before(&self, t: Instant) -> HashMap<String, u64> {
        let acks = self.acks.lock().unwrap_or_else(|e| e.into_inner());
        let end = acks.partition_point(|(at, _, _)| *at < t);
        let mut req = HashMap::new();
        for (_, name, rv) in &acks[..end] {
            let e = req.entry(name.clone()).or_insert(0);
            *e = (*e).max(*rv);
        }
        req
    }

    /// The resourceVersion of the last write of `name` acknowledged before `t`, if any.
    pub fn required_for(&self, name: &str, t: Instant) -> Option<u64> {
        let acks = self.acks.lock().unwrap_or_else(|e| e.into_inner());
        let end = acks.partition_point(|(at, _, _)| *at < t);
        acks[..end]
            .iter()
            .filter(|(_, n, _)| n == name)
            .map(|(_, _, rv)| *rv)
            .max()
    }

    pub fn len(&self) -> usize {
        self.acks.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Deserialize)]
struct List {
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Object {
    metadata: Meta,
}

#[derive(Deserialize)]
struct Item {
    metadata: Meta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: String,
    resource_version: String,
}

/// (name, resourceVersion) of every item of a LIST body, by parsing it.
pub fn parse_items(body: &[u8]) -> Result<Vec<(String, u64)>, String> {
    let list: List = serde_json::from_slice(body).map_err(|e| format!("list body: {e}"))?;
    Ok(list
        .items
        .into_iter()
        .map(|i| {
            let rv = i.metadata.resource_version.parse().unwrap_or(0);
            (i.metadata.name, rv)
        })
        .collect())
}

const ITEM_START: &[u8] = b"{\"metadata\":{\"name\":\"";
const RV_FIELD: &[u8] = b"\"resourceVersion\":\"";

/// (name, resourceVersion) of every item of a LIST body by substring search, about ten times
/// cheaper than parsing (the checker runs in the load generator, on the same cores as the
/// servers it measures). It relies on the apiserver's encoding of list items: each starts with
/// `{"metadata":{"name":"`, and the item's `resourceVersion` is the next one after the name.
/// `None` when the body does not look like that; [`Checker`] then parses, and it also parses
/// a sample of answers to confirm both ways agree.
pub fn scan_items(body: &[u8]) -> Option<Vec<(String, u64)>> {
    use memchr::memmem;
    static ITEM: std::sync::LazyLock<memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memmem::Finder::new(ITEM_START));
    static RV: std::sync::LazyLock<memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memmem::Finder::new(RV_FIELD));
    let mut out = Vec::new();
    let starts: Vec<usize> = ITEM.find_iter(body).collect();
    if starts.is_empty() {
        return None;
    }
    for (i, &start) in starts.iter().enumerate() {
        let name_at = start + ITEM_START.len();
        let name_len = memchr::memchr2(b'"', b'\\', &body[name_at..])?;
        if body[name_at + name_len] != b'"' {
            return None;
        }
        let name = std::str::from_utf8(&body[name_at..name_at + name_len]).ok()?;
        // The RV must come before the next item starts.
        let end = starts.get(i + 1).copied().unwrap_or(body.len());
        let rv_at = name_at + RV.find(&body[name_at..end])? + RV_FIELD.len();
        let digits = memchr::memchr(b'"', &body[rv_at..end])?;
        let rv: u64 = std::str::from_utf8(&body[rv_at..rv_at + digits])
            .ok()?
            .parse()
            .ok()?;
        out.push((name.to_string(), rv));
    }
    Some(out)
}

/// The required writes a LIST body misses: one message per object absent or older.
pub fn stale_objects(required: &HashMap<String, u64>, body: &[u8]) -> Result<Vec<String>, String> {
    stale_in(required, &parse_items(body)?)
}

fn stale_in(
    required: &HashMap<String, u64>,
    items: &[(String, u64)],
) -> Result<Vec<String>, String> {
    let seen: HashMap<&str, u64> = items.iter().map(|(n, rv)| (n.as_str(), *rv)).collect();
    let mut stale = Vec::new();
    for (name, &rv) in required {
        match seen.get(name.as_str()) {
            None => stale.push(format!("{name}: written at {rv}, absent")),
            Some(&got) if got < rv => stale.push(format!("{name}: written at {rv}, read {got}")),
            Some(_) => {}
        }
    }
    Ok(stale)
}

/// Counts reads and stale answers; shared by the load workers.
#[derive(Default)]
pub struct Checker {
    pub acks: AckLog,
    pub reads: AtomicU64,
    /// Reads whose answer missed a write acknowledged before they were sent.
    pub stale_reads: AtomicU64,
    /// Answers that were not a readable 200 list.
    pub unreadable: AtomicU64,
    /// Answers where the fast scan and the parse disagreed (the parse's verdict is used).
    pub scan_mismatches: AtomicU64,
    pub first_stale: Mutex<Option<String>>,
}

impl Checker {
    /// The first stale answer found, described (None while none was).
    pub fn first_stale_answer(&self) -> Option<String> {
        self.first_stale
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Check one answer to a read sent at `sent`.
    pub fn check(&self, sent: Instant, status: u16, body: &[u8]) {
        self.reads.fetch_add(1, Relaxed);
        if status != 200 {
            self.unreadable.fetch_add(1, Relaxed);
            return;
        }
        let required = self.acks.required_before(sent);
        let n = self.reads.load(Relaxed);
        let items = match scan_items(body) {
            // Every 32nd answer is also parsed, to confirm the scan.
            Some(scanned) if n % 32 != 1 => Ok(scanned),
            Some(scanned) => parse_items(body).inspect(|parsed| {
                if *parsed != scanned {
                    self.scan_mismatches.fetch_add(1, Relaxed);
                }
            }),
            None => parse_items(body),
        };
        match items.and_then(|items| stale_in(&required, &items)) {
            Ok(stale) if stale.is_empty() => {}
            Ok(stale) => {
                self.stale_reads.fetch_add(1, Relaxed);
                let mut first = self.first_stale.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert_with(|| stale[0].clone());
            }
            Err(_) => {
                self.unreadable.fetch_add(1, Relaxed);
            }
        }
    }

    /// Check one answer to a GET of a single object sent at `sent`: the object must be at
    /// the resourceVersion of its last write acknowledged before then, or later.
    pub fn check_object(&self, sent: Instant, status: u16, body: &[u8]) {
        self.reads.fetch_add(1, Relaxed);
        let obj = match serde_json::from_slice::<Object>(body) {
            Ok(o) if status == 200 => o,
            _ => {
                self.unreadable.fetch_add(1, Relaxed);
                return;
            }
        };
        let got = obj.metadata.resource_version.parse().unwrap_or(0);
        let name = obj.metadata.name;
        if let Some(rv) = self.acks.required_for(&name, sent).filter(|&rv| got < rv) {
            self.stale_reads.fetch_add(1, Relaxed);
            let mut first = self.first_stale.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert_with(|| format!("{name}: written at {rv}, read {got}"));
        }
    }
}
