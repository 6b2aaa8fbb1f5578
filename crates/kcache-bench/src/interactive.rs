//! The `interactive` scenario: a person reading a cluster every 2 s (`watch kubectl get …`),
//! directly and through kcache, while the cluster writes other types than the ones read.
//!
//! A consistent read (resourceVersion unset) through kcache is answered from the cache once the
//! cache has reached the upstream's revision. Writes of other types move that revision while a
//! quiet type's cache stays where its last event left it, so kcache may wait for its cache (up
//! to `consistentReads.waitSeconds`) before it answers or forwards, and a read the apiserver
//! answers in milliseconds takes seconds. Loads of many clients for a few seconds (the
//! `consistent` and `fresh` scenarios) rarely show that; paced single reads over minutes do,
//! and on v1.34 they also span the apiserver's 60 s heartbeat bookmarks, which move kcache's
//! cache revision without any object changing.
//!
//! On each upstream profile (v1.28, v1.34) the sim has its profile's measured capacity
//! (`StorageReads::measured`) and default bookmarks, and holds a namespace of 3 ConfigMaps,
//! many ConfigMaps in other namespaces and Pods; kcache caches ConfigMaps and Pods. A Secret
//! (not cached) is written once a second throughout. Every round, four consistent reads as
//! kubectl sends them (LISTs by pages of `limit`, following `continue`): the small namespace's
//! ConfigMaps, all Pods, all ConfigMaps, and GET of one ConfigMap; each read goes to the sim
//! and to kcache back to back, the one sent first alternating by round, and is timed whole (every
//! page, every body read to its end). `kcache bench --kubeconfig` runs the same rounds against
//! a real cluster (`Rounds` is shared).

use std::collections::BTreeMap;

use serde::de::IgnoredAny;

use super::fresh::Writer;
use super::*;
use kcache_sim::{Profile, StorageReads};
use load::{Client, Target};

/// The namespace of 3 ConfigMaps.
const SMALL_NS: &str = "bench-small";
const SMALL_NS_OBJECTS: usize = 3;
/// Namespaces the other ConfigMaps and the Pods are spread over.
const SPREAD: usize = 10;
/// Secret writes per second throughout: about what a small cluster's leases write (each node's
/// every 10 s, kube-controller-manager's and kube-scheduler's every 2 s).
pub(crate) const OTHER_WRITES_PER_S: f64 = 1.0;
/// A kcache read this much slower than the direct read beside it is one a person notices.
const NOTICEABLE: Duration = Duration::from_millis(100);
/// kcache's p99 may exceed the direct p99 by this much: one more hop on loopback.
const P99_MARGIN_MS: f64 = 10.0;
/// One request (one page) of a read.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

const DIRECT: &str = "sim (upstream)";
const KCACHE: &str = "kcache";

/// Sizes and pace of the scenario.
#[derive(Debug, Clone)]
pub struct InteractiveScale {
    /// ConfigMaps in the other namespaces (besides the 3 of the small one).
    pub configmaps: usize,
    pub pods: usize,
    /// How long the rounds go on, on each profile.
    pub duration: Duration,
    /// One round starts every `period` (or at once when the last one took longer).
    pub period: Duration,
    /// `limit` of every LIST page (kubectl's `--chunk-size`, 500 by default).
    pub page: usize,
}

impl InteractiveScale {
    /// Five minutes per profile: several of v1.34's 60 s heartbeat bookmarks.
    pub fn full() -> InteractiveScale {
        InteractiveScale {
            configmaps: 10_000,
            pods: 2_000,
            duration: Duration::from_secs(300),
            period: Duration::from_secs(2),
            page: 500,
        }
    }

    pub fn quick() -> InteractiveScale {
        InteractiveScale {
            configmaps: 2_000,
            pods: 500,
            duration: Duration::from_secs(30),
            ..InteractiveScale::full()
        }
    }
}

/// One read of a round.
pub(crate) struct Read {
    /// The table's case.
    pub label: String,
    /// Path without query, as kcache serves it (the direct read puts the server's base path
    /// before it).
    pub path: String,
    /// A LIST, read page by page.
    pub paged: bool,
}

impl Read {
    /// The rounds' three LISTs, all paged: one small namespace's ConfigMaps (`label`, `path`),
    /// every Pod, every ConfigMap.
    pub(crate) fn lists(label: String, path: String) -> Vec<Read> {
        let all = |label: &str, path: &str| Read {
            label: label.into(),
            path: path.into(),
            paged: true,
        };
        vec![
            Read {
                label,
                path,
                paged: true,
            },
            all("LIST pods, all namespaces", "/api/v1/pods"),
            all("LIST configmaps, all namespaces", "/api/v1/configmaps"),
        ]
    }
}

/// What the rounds measured of one read.
#[derive(Default)]
pub(crate) struct Stats {
    direct: Vec<Duration>,
    kcache: Vec<Duration>,
    /// kcache's time minus the direct one's in the rounds where both answered, in ms.
    extra_ms: Vec<f64>,
    direct_errors: u64,
    kcache_errors: u64,
    first_error: Option<String>,
    /// HTTP requests (pages) each target was sent.
    direct_requests: u64,
    kcache_requests: u64,
    /// Pages and objects of each target's last answer.
    direct_shape: (usize, usize),
    kcache_shape: (usize, usize),
    /// kcache's `kcache_consistent_reads_total` by outcome, summed over its reads of this.
    outcomes: BTreeMap<String, f64>,
    /// Requests kcache sent upstream during its reads of this, and those reads.
    upstream: f64,
    metered: u64,
}

impl Stats {
    /// One target's answer to a read (or its error).
    fn record(&mut self, kcache: bool, answer: &Result<Answer, String>) {
        let r = match answer {
            Ok(r) => r,
            Err(e) => return self.error(kcache, e.clone()),
        };
        let (times, requests, shape) = if kcache {
            (
                &mut self.kcache,
                &mut self.kcache_requests,
                &mut self.kcache_shape,
            )
        } else {
            (
                &mut self.direct,
                &mut self.direct_requests,
                &mut self.direct_shape,
            )
        };
        times.push(r.took);
        *requests += r.pages as u64;
        *shape = (r.pages, r.objects);
    }

    fn error(&mut self, kcache: bool, e: String) {
        if kcache {
            self.kcache_errors += 1;
        } else {
            self.direct_errors += 1;
        }
        self.first_error
            .get_or_insert_with(|| format!("{}: {e}", if kcache { "kcache" } else { "direct" }));
    }

    /// Reads through kcache slower than the direct one beside them by more than `NOTICEABLE`.
    fn noticeably_slower(&self) -> usize {
        self.extra_ms
            .iter()
            .filter(|&&x| x > ms(NOTICEABLE))
            .count()
    }

    fn worst_extra_ms(&self) -> f64 {
        self.extra_ms.iter().copied().fold(0.0, f64::max)
    }
}

/// The paced rounds of reads, direct and through a kcache.
pub(crate) struct Rounds<'a> {
    pub direct: &'a Target,
    /// Before every direct path: the server URL's path (a cluster behind a proxy).
    pub direct_base: &'a str,
    pub kcache: &'a Target,
    /// Whose metrics say where each read was answered and what it cost upstream.
    pub child: &'a KcacheChild,
    pub duration: Duration,
    pub period: Duration,
    pub page: usize,
}

impl Rounds<'_> {
    /// Run the rounds: one every `period` until `duration` has passed.
    pub(crate) async fn run(&self, reads: &[Read]) -> Vec<Stats> {
        let mut direct = Client::new(self.direct.clone());
        let mut kcache = Client::new(self.kcache.clone());
        let mut stats: Vec<Stats> = reads.iter().map(|_| Stats::default()).collect();
        let start = tokio::time::Instant::now();
        let mut next = start;
        let mut round = 0u64;
        // No round starts after `duration`, also when the last one overran it.
        while next.max(tokio::time::Instant::now()).duration_since(start) < self.duration {
            tokio::time::sleep_until(next).await;
            // As `watch -p` runs kubectl: a round that overran its period is followed at once
            // by the next, which keeps its whole period; none is crowded in to catch up.
            let began = tokio::time::Instant::now();
            next += self.period;
            if next < began {
                next = began + self.period;
            }
            // Whichever goes second finds the upstream's caches and connections warm from the
            // first: each goes first every other round.
            let direct_first = round % 2 == 0;
            for (read, s) in reads.iter().zip(stats.iter_mut()) {
                let page = read.paged.then_some(self.page);
                let direct_path = format!("{}{}", self.direct_base, read.path);
                let (d, k) = if direct_first {
                    let d = timed(&mut direct, &direct_path, page).await;
                    let k = self.metered(&mut kcache, &read.path, page, s).await;
                    (d, k)
                } else {
                    let k = self.metered(&mut kcache, &read.path, page, s).await;
                    let d = timed(&mut direct, &direct_path, page).await;
                    (d, k)
                };
                s.record(false, &d);
                s.record(true, &k);
                if let (Ok(d), Ok(k)) = (d, k) {
                    s.extra_ms.push(ms(k.took) - ms(d.took));
                }
            }
            round += 1;
        }
        for s in &mut stats {
            s.direct.sort_unstable();
            s.kcache.sort_unstable();
        }
        stats
    }

    /// One read through kcache, with what its metrics counted meanwhile (read outside the
    /// timing: the reads are the only consistent reads kcache serves meanwhile).
    async fn metered(
        &self,
        client: &mut Client,
        path: &str,
        page: Option<usize>,
        s: &mut Stats,
    ) -> Result<Answer, String> {
        let before = self.child.scrape().await.ok();
        let r = timed(client, path, page).await;
        let after = self.child.scrape().await.ok();
        if let (Some(b), Some(a)) = (before, after) {
            let family = "kcache_consistent_reads_total";
            let was = b.by_label(family, "outcome");
            for (outcome, n) in a.by_label(family, "outcome") {
                let d = n - was.get(&outcome).copied().unwrap_or(0.0);
                *s.outcomes.entry(outcome).or_insert(0.0) += d;
            }
            let requests = ["kcache_upstream_requests_total{"];
            s.upstream += a.sum(&requests) - b.sum(&requests);
            s.metered += 1;
        }
        r
    }
}

/// One read's answer: how long it took, its pages and objects.
pub(super) struct Answer {
    pub(super) took: Duration,
    pages: usize,
    objects: usize,
}

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default)]
    items: Vec<IgnoredAny>,
    /// A Table's (kubectl's reads).
    #[serde(default)]
    rows: Vec<IgnoredAny>,
}

#[derive(Deserialize, Default)]
struct PageMeta {
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

/// One read as kubectl sends it: a GET, or a LIST by pages of `page` objects, each page asked
/// for with the last one's `continue` until there is none; timed from the first request to the
/// last body's end.
pub(super) async fn timed(
    client: &mut Client,
    path: &str,
    page: Option<usize>,
) -> Result<Answer, String> {
    let t0 = Instant::now();
    let Some(limit) = page else {
        let (status, body) = client.get(path, REQUEST_TIMEOUT).await?;
        if status != 200 {
            return Err(refused(path, status, &body));
        }
        return Ok(Answer {
            took: t0.elapsed(),
            pages: 1,
            objects: 1,
        });
    };
    let (pages, objects) = read_pages(client, path, limit, |_, _| {}).await?;
    Ok(Answer {
        took: t0.elapsed(),
        pages,
        objects,
    })
}

/// A LIST by pages of `limit` objects as kubectl reads it: each page asked for with the last
/// one's `continue` until there is none, and handed to `page` with the URL (path and query) it
/// was read at; the pages and objects read.
pub(super) async fn read_pages(
    client: &mut Client,
    path: &str,
    limit: usize,
    mut page: impl FnMut(&str, &bytes::Bytes),
) -> Result<(usize, usize), String> {
    let (mut pages, mut objects) = (0, 0);
    let mut url = format!("{path}?limit={limit}");
    loop {
        let (status, body) = client.get(&url, REQUEST_TIMEOUT).await?;
        if status != 200 {
            return Err(refused(&url, status, &body));
        }
        let p: Page = serde_json::from_slice(&body).map_err(|e| format!("{url}: {e}"))?;
        page(&url, &body);
        pages += 1;
        objects += p.items.len() + p.rows.len();
        match p.metadata.next.filter(|t| !t.is_empty()) {
            Some(token) => url = format!("{path}?limit={limit}&continue={}", query_escape(&token)),
            None => return Ok((pages, objects)),
        }
    }
}

fn refused(path: &str, status: u16, body: &[u8]) -> String {
    format!(
        "GET {path}: status {status}: {}",
        String::from_utf8_lossy(&body[..body.len().min(200)])
    )
}

/// A continue token as a query value: the apiserver's are base64url, but nothing promises
/// that of every server.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The rows of the rounds' reads: per read, the direct one and kcache's.
pub(crate) fn push_rows(
    report: &mut Report,
    scenario: &str,
    direct_label: &str,
    reads: &[Read],
    stats: &[Stats],
) {
    for (read, s) in reads.iter().zip(stats) {
        let mut row = Row::new(scenario, &read.label, direct_label);
        row.set("reads", s.direct.len() as u64)
            .set("requests", s.direct_requests)
            .set("errors", s.direct_errors)
            .set("objects", s.direct_shape.1 as u64)
            .set("pages", s.direct_shape.0 as u64);
        set_latencies(&mut row, &s.direct);
        report.push(row);

        let mut row = Row::new(scenario, &read.label, KCACHE);
        row.set("reads", s.kcache.len() as u64)
            .set("requests", s.kcache_requests)
            .set("errors", s.kcache_errors)
            .set("objects", s.kcache_shape.1 as u64)
            .set("pages", s.kcache_shape.0 as u64);
        set_latencies(&mut row, &s.kcache);
        row.set(
            "> direct + 100 ms",
            format!("{}/{}", s.noticeably_slower(), s.extra_ms.len()),
        )
        .set("worst extra ms", s.worst_extra_ms());
        if s.metered > 0 {
            row.set("upstream req per read", s.upstream / s.metered as f64);
            let outcomes: Vec<String> = s
                .outcomes
                .iter()
                .filter(|(_, n)| **n > 0.0)
                .map(|(o, n)| format!("{o} {n}"))
                .collect();
            row.note(format!(
                "kcache_consistent_reads_total: {}",
                if outcomes.is_empty() {
                    "no change".to_string()
                } else {
                    outcomes.join(", ")
                }
            ));
        }
        if let Some(e) = &s.first_error {
            row.note(format!("first error: {e}"));
        }
        report.push(row);
    }
}

fn set_latencies(row: &mut Row, sorted: &[Duration]) {
    row.set("p50 ms", ms(load::percentile(sorted, 0.5)))
        .set("p99 ms", ms(load::percentile(sorted, 0.99)))
        .set("max ms", ms(sorted.last().copied().unwrap_or_default()));
}

/// The targets of the rounds' reads: no kcache read noticeably slower than the direct one
/// beside it, and kcache's p99 within a hop of the direct one's.
pub(crate) fn push_checks(report: &mut Report, what: &str, reads: &[Read], stats: &[Stats]) {
    for (read, s) in reads.iter().zip(stats) {
        let compared = s.extra_ms.len();
        let slower = s.noticeably_slower();
        let errors = if s.kcache_errors > 0 {
            format!(", {} kcache reads failed", s.kcache_errors)
        } else {
            String::new()
        };
        report.check(
            &format!(
                "{what}, {}: no kcache read more than 100 ms slower than the direct read beside it",
                read.label
            ),
            "0 reads > direct + 100 ms",
            format!(
                "{slower} of {compared} (worst +{} ms){errors}",
                fmt_num(s.worst_extra_ms())
            ),
            (compared > 0).then_some(slower == 0 && s.kcache_errors == 0),
        );
        let (k, d) = (
            ms(load::percentile(&s.kcache, 0.99)),
            ms(load::percentile(&s.direct, 0.99)),
        );
        report.check(
            &format!("{what}, {}: kcache p99 ≤ direct p99 + 10 ms", read.label),
            "kcache p99 ≤ direct p99 + 10 ms",
            format!("{} ms vs {} ms direct", fmt_num(k), fmt_num(d)),
            (!s.kcache.is_empty() && !s.direct.is_empty()).then_some(k <= d + P99_MARGIN_MS),
        );
    }
}

impl Bench {
    pub(super) async fn interactive(&mut self) -> Result<(), String> {
        let scale = self.scale.interactive.clone();
        run_sim(&self.exe, &scale, &Profile::ALL, &mut self.report).await
    }
}

/// The scenario on each of `profiles`, its rows, checks and notes into `report`.
pub async fn run_sim(
    exe: &Path,
    scale: &InteractiveScale,
    profiles: &[Profile],
    report: &mut Report,
) -> Result<(), String> {
    for &profile in profiles {
        run_on(exe, scale, profile, report).await?;
    }
    Ok(())
}

/// The namespace of 3 ConfigMaps, the other ConfigMaps and the Pods.
fn objects(scale: &InteractiveScale) -> Vec<SeedObject> {
    let mut out: Vec<SeedObject> = seed::configmaps(SMALL_NS_OBJECTS, 1, 31)
        .into_iter()
        .map(|mut o| {
            if o.resource == "namespaces" {
                o.object["metadata"]["name"] = json!(SMALL_NS);
            } else {
                o.object["metadata"]["namespace"] = json!(SMALL_NS);
            }
            o
        })
        .collect();
    out.extend(seed::configmaps(scale.configmaps, SPREAD, 32));
    // Both generators create the namespaces bench-1..; the Pods' copies are left out.
    out.extend(
        seed::pods(scale.pods, scale.pods.div_ceil(40), SPREAD, 33)
            .into_iter()
            .filter(|o| o.resource != "namespaces"),
    );
    out
}

async fn run_on(
    exe: &Path,
    scale: &InteractiveScale,
    profile: Profile,
    report: &mut Report,
) -> Result<(), String> {
    let s = format!(
        "Interactive consistent reads (RV unset; LISTs by pages of {}), one round every {} s, {profile} profile",
        scale.page,
        fmt_num(scale.period.as_secs_f64())
    );
    let config = SimConfig {
        storage_reads: Some(StorageReads::measured(profile)),
        ..SimConfig::for_profile(profile)
    };
    let bookmarks = config.bookmark_interval;
    progress(format!(
        "interactive {profile}: seeding {} ConfigMaps and {} Pods",
        scale.configmaps + SMALL_NS_OBJECTS,
        scale.pods
    ));
    let sim = Sim::start(config)
        .await
        .map_err(|e| format!("starting the sim: {e}"))?;
    seed_sim(&sim, objects(scale))?;
    let secret = super::fresh::other_type_secret(&sim)?;
    let writer = Writer::start(
        &sim,
        "secrets",
        Arc::new(vec![secret]),
        OTHER_WRITES_PER_S,
        1,
        None,
    );
    let child = KcacheChild::start(
        &exe.to_path_buf(),
        &sim.url(),
        &ChildConfig::caching(&[CONFIGMAPS, PODS]),
        Duration::from_secs(600),
    )
    .await;
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = writer.stop().await;
            sim.shutdown().await;
            return Err(e);
        }
    };
    let mut reads = Read::lists(
        format!("LIST configmaps in {SMALL_NS} ({SMALL_NS_OBJECTS} objects)"),
        format!("/api/v1/namespaces/{SMALL_NS}/configmaps"),
    );
    reads.push(Read {
        label: "GET one ConfigMap".into(),
        path: format!("/api/v1/namespaces/{SMALL_NS}/configmaps/cm-000001"),
        paged: false,
    });
    progress(format!(
        "interactive {profile}: {} s of rounds",
        fmt_num(scale.duration.as_secs_f64())
    ));
    let direct = Target::plain(sim.addr());
    let kcache = Target::plain(child.addr);
    let stats = Rounds {
        direct: &direct,
        direct_base: "",
        kcache: &kcache,
        child: &child,
        duration: scale.duration,
        period: scale.period,
        page: scale.page,
    }
    .run(&reads)
    .await;
    let failed = writer.stop().await;
    push_rows(report, &s, DIRECT, &reads, &stats);
    push_checks(report, &format!("Interactive, {profile}"), &reads, &stats);
    if failed > 0 {
        report.notes.push(format!(
            "interactive {profile}: {failed} Secret writes failed"
        ));
    }
    report.notes.push(format!(
        "interactive, {profile}: the sim's capacity {:?}, watch bookmarks every {} s ({}); \
         {} Secret write/s throughout, no ConfigMap or Pod written; each round reads directly \
         and through kcache back to back, each first every other round; \
         `> direct + 100 ms` counts the rounds where kcache's read took that much longer than \
         the direct one; `upstream req per read` and the consistent-read outcomes are from \
         kcache's metrics around its reads",
        StorageReads::measured(profile),
        fmt_num(bookmarks.as_secs_f64()),
        match profile {
            Profile::V1_28 => "at the type's last event",
            Profile::V1_34 => "heartbeats at the store's revision",
        },
        fmt_num(OTHER_WRITES_PER_S),
    ));
    drop(child);
    sim.shutdown().await;
    Ok(())
}
