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
struct Item {
    metadata: Meta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: String,
    resource_version: String,
}

/// The required writes a LIST body misses: one message per object absent or older.
pub fn stale_objects(required: &HashMap<String, u64>, body: &[u8]) -> Result<Vec<String>, String> {
    let list: List = serde_json::from_slice(body).map_err(|e| format!("list body: {e}"))?;
    let seen: HashMap<&str, u64> = list
        .items
        .iter()
        .map(|i| {
            (
                i.metadata.name.as_str(),
                i.metadata.resource_version.parse().unwrap_or(0),
            )
        })
        .collect();
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
    pub first_stale: Mutex<Option<String>>,
}

impl Checker {
    /// Check one answer to a read sent at `sent`.
    pub fn check(&self, sent: Instant, status: u16, body: &[u8]) {
        self.reads.fetch_add(1, Relaxed);
        if status != 200 {
            self.unreadable.fetch_add(1, Relaxed);
            return;
        }
        let required = self.acks.required_before(sent);
        match stale_objects(&required, body) {
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
}
