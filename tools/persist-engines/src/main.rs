//! kcache's warm-restart workload on redb and on fjall, side by side, in one run:
//!
//! 1. one commit of N objects (keys `ns-k/name-i`, values of ~1.1 KB, like the ConfigMaps of
//!    the `warm` bench scenario);
//! 2. re-open and read everything back in key order (what a warm start does);
//! 3. 100 changes a second at random keys, committed durably once a second (what the
//!    persister does), for a number of simulated seconds (600 unless given): bytes the process wrote to disk
//!    (`/proc/self/io` `write_bytes`) per byte of changed value — the write amplification;
//! 4. the directory's allocated bytes per object.
//!
//! Run: `cargo run --release --manifest-path tools/persist-engines/Cargo.toml [N [SECONDS]]`.

use std::path::{Path, PathBuf};
use std::time::Instant;

const PER_SECOND: usize = 100;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    // Simulated seconds of changes (an LSM tree's compactions show only over longer runs).
    let seconds: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(600);
    let root = std::env::temp_dir().join(format!("persist-engines-{}", std::process::id()));
    println!("| engine | objects | first commit s | warm read s | write amplification, {PER_SECOND}/s for {seconds} s | disk B/object |");
    println!("|---|---:|---:|---:|---:|---:|");
    for engine in [Engine::Redb, Engine::Fjall] {
        let dir = root.join(engine.name());
        std::fs::create_dir_all(&dir).unwrap();
        let r = run(engine, &dir, n, seconds);
        println!(
            "| {} | {n} | {:.2} | {:.2} | {:.1}× | {:.0} |",
            engine.name(),
            r.first_commit,
            r.read,
            r.amplification,
            r.disk as f64 / n as f64
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[derive(Clone, Copy)]
enum Engine {
    Redb,
    Fjall,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Redb => "redb 2",
            Engine::Fjall => "fjall 2",
        }
    }
}

struct Measured {
    first_commit: f64,
    read: f64,
    amplification: f64,
    disk: u64,
}

fn key(i: usize) -> String {
    format!("ns-{}/configmap-{i:07}", i % 20)
}

/// A ConfigMap-sized JSON value whose bytes change with `version`.
fn value(i: usize, version: usize) -> Vec<u8> {
    let mut v = format!(
        "{{\"metadata\":{{\"name\":\"configmap-{i:07}\",\"resourceVersion\":\"{version}\"}},\"data\":{{\"k\":\""
    )
    .into_bytes();
    let mut x = (i as u64).wrapping_mul(6364136223846793005) ^ version as u64;
    while v.len() < 1100 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.push(b'a' + (x >> 59) as u8);
    }
    v.extend_from_slice(b"\"}}");
    v
}

fn written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Allocated bytes of every file under `dir` (`du`, not lengths: redb's file is sparse).
fn allocated(dir: &Path) -> u64 {
    let out = std::process::Command::new("du")
        .args(["-s", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The random keys changed in second `s`.
fn changes(s: usize, n: usize) -> impl Iterator<Item = usize> {
    let mut x = 0x9e3779b97f4a7c15u64 ^ s as u64;
    (0..PER_SECOND).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    })
}

fn run(engine: Engine, dir: &Path, n: usize, seconds: usize) -> Measured {
    match engine {
        Engine::Redb => run_redb(dir, n, seconds),
        Engine::Fjall => run_fjall(dir, n, seconds),
    }
}

const TABLE: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("objects");

fn run_redb(dir: &Path, n: usize, seconds: usize) -> Measured {
    use redb::{ReadableTable, ReadableTableMetadata};
    let file: PathBuf = dir.join("store.redb");
    let t = Instant::now();
    {
        let db = redb::Database::create(&file).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut table = tx.open_table(TABLE).unwrap();
            for i in 0..n {
                table
                    .insert(key(i).as_str(), value(i, 0).as_slice())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let first_commit = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let db = redb::Database::create(&file).unwrap();
    {
        let tx = db.begin_read().unwrap();
        let table = tx.open_table(TABLE).unwrap();
        let mut bytes = 0;
        for e in table.iter().unwrap() {
            let (_, v) = e.unwrap();
            bytes += v.value().len();
        }
        assert!(bytes > 0 && table.len().unwrap() == n as u64);
    }
    let read = t.elapsed().as_secs_f64();
    let before = written();
    let mut changed = 0;
    for s in 0..seconds {
        let tx = db.begin_write().unwrap();
        {
            let mut table = tx.open_table(TABLE).unwrap();
            for i in changes(s, n) {
                let v = value(i, s + 1);
                changed += v.len();
                table.insert(key(i).as_str(), v.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let amplification = (written() - before) as f64 / changed as f64;
    drop(db);
    Measured {
        first_commit,
        read,
        amplification,
        disk: allocated(dir),
    }
}

fn run_fjall(dir: &Path, n: usize, seconds: usize) -> Measured {
    use fjall::{Config, PartitionCreateOptions, PersistMode};
    let t = Instant::now();
    {
        let ks = Config::new(dir).open().unwrap();
        let part = ks
            .open_partition("objects", PartitionCreateOptions::default())
            .unwrap();
        let mut batch = ks.batch();
        for i in 0..n {
            batch.insert(&part, key(i), value(i, 0));
        }
        batch.commit().unwrap();
        ks.persist(PersistMode::SyncAll).unwrap();
    }
    let first_commit = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let ks = Config::new(dir).open().unwrap();
    let part = ks
        .open_partition("objects", PartitionCreateOptions::default())
        .unwrap();
    {
        let mut bytes = 0;
        let mut count = 0;
        for e in part.iter() {
            let (_, v) = e.unwrap();
            bytes += v.len();
            count += 1;
        }
        assert!(bytes > 0 && count == n);
    }
    let read = t.elapsed().as_secs_f64();
    let before = written();
    let mut changed = 0;
    for s in 0..seconds {
        let mut batch = ks.batch();
        for i in changes(s, n) {
            let v = value(i, s + 1);
            changed += v.len();
            batch.insert(&part, key(i), v);
        }
        batch.commit().unwrap();
        ks.persist(PersistMode::SyncAll).unwrap();
    }
    // What the LSM tree writes later for these changes (memtable flushes, compactions) counts
    // too: flush now so it is in the figure.
    part.rotate_memtable_and_wait().unwrap();
    let amplification = (written() - before) as f64 / changed as f64;
    drop(part);
    drop(ks);
    Measured {
        first_commit,
        read,
        amplification,
        disk: allocated(dir),
    }
}
