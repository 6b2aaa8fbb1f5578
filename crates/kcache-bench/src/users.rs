//! The fleet's interactive users: people running `kubectl get pods` against the cluster while
//! its kubelets and kube-proxies are connected.
//!
//! Each user has a connection and a token of their own and reads as kubectl does: consistent
//! LISTs (resourceVersion unset) as Tables, by pages of 500 following `continue`, each timed
//! whole. Every round reads one namespace's Pods; every fifth also reads every Pod of the cluster
//! (`kubectl get pods -A`); a user pauses 2 s between rounds, as `watch kubectl get …` does.
//! The goals are the sig-scalability SLOs' far inside: a namespace's LIST p99 ≤ 0.5 s, all Pods
//! p99 ≤ 5 s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::interactive::{read_pages, timed, Answer};
use super::load::{self, Client};
use super::{ms, Row};

/// How many users read at once.
pub(super) const USERS: usize = 20;

/// kubectl's page size.
const PAGE: usize = 500;

/// A user's pause between rounds.
const PAUSE: Duration = Duration::from_secs(2);

/// Every this many rounds a user also lists every Pod.
const ALL_PODS_EVERY: usize = 5;

/// What kubectl asks a LIST for: a Table, or JSON from a server that prints none.
const KUBECTL_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io, application/json";

/// Every Pod of the cluster (`kubectl get pods -A`).
const ALL_PODS: &str = "/api/v1/pods";

/// The namespace each round reads.
pub(super) const NAMESPACE: &str = "shop";

/// What the users measured: each read's time, by kind.
#[derive(Default)]
pub(super) struct Reads {
    pub(super) namespace: Vec<Duration>,
    pub(super) all_pods: Vec<Duration>,
    pub(super) errors: usize,
    pub(super) first_error: Option<String>,
}

impl Reads {
    /// One read's answer, into the reads of its kind.
    fn record(
        &mut self,
        answer: Result<Answer, String>,
        kind: fn(&mut Reads) -> &mut Vec<Duration>,
    ) {
        match answer {
            Ok(a) => kind(self).push(a.took),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }

    fn add(&mut self, other: Reads) {
        self.namespace.extend(other.namespace);
        self.all_pods.extend(other.all_pods);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn sort(&mut self) {
        self.namespace.sort_unstable();
        self.all_pods.sort_unstable();
    }

    /// The p99 of one kind's reads, in ms (None when there were none).
    pub(super) fn p99_ms(sorted: &[Duration]) -> Option<f64> {
        (!sorted.is_empty()).then(|| ms(load::percentile(sorted, 0.99)))
    }

    /// One row per kind of read, of `target` (what answered them).
    pub(super) fn rows(&self, scenario: &str, case: &str, target: &str) -> Vec<Row> {
        let kinds = [
            (format!("{NAMESPACE}'s Pods"), &self.namespace),
            ("every Pod".to_string(), &self.all_pods),
        ];
        kinds
            .into_iter()
            .map(|(what, sorted)| {
                let mut row = Row::new(scenario, &format!("{case}: {what}"), target);
                row.set("reads", sorted.len() as u64)
                    .set("p50 ms", ms(load::percentile(sorted, 0.5)))
                    .set("p99 ms", ms(load::percentile(sorted, 0.99)))
                    .set("max ms", ms(sorted.last().copied().unwrap_or_default()));
                if self.errors > 0 {
                    row.note(format!(
                        "{} reads failed: {}",
                        self.errors,
                        self.first_error.as_deref().unwrap_or("?")
                    ));
                }
                row
            })
            .collect()
    }
}

/// Run the users against `target` (its per-watch credentials give each user a token) for
/// `secs`, and gather their reads.
pub(super) async fn run(target: &load::Target, secs: f64) -> Reads {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let users: Vec<_> = (0..USERS)
        .map(|i| {
            let target = target.for_watch(i).accepting(KUBECTL_ACCEPT);
            tokio::spawn(user(target, i, until))
        })
        .collect();
    let mut reads = Reads::default();
    for u in users {
        match u.await {
            Ok(r) => reads.add(r),
            Err(e) => {
                reads.errors += 1;
                reads.first_error.get_or_insert(e.to_string());
            }
        }
    }
    reads.sort();
    reads
}

/// Every page the users read, as `target` answers them now, by the path and query each was
/// read at: one read of the namespace and one of every Pod, as the first user sends them.
pub(super) async fn record(target: &load::Target) -> Result<HashMap<String, Bytes>, String> {
    let target = target.for_watch(0).accepting(KUBECTL_ACCEPT);
    let mut client = Client::new(target);
    let mut pages = HashMap::new();
    for path in [
        format!("/api/v1/namespaces/{NAMESPACE}/pods"),
        ALL_PODS.to_string(),
    ] {
        read_pages(&mut client, &path, PAGE, |url, body| {
            pages.insert(url.to_string(), body.clone());
        })
        .await?;
    }
    Ok(pages)
}

/// One user until `until`: rounds of reads with a pause between them, the first round staggered
/// by the user's number so that the users do not read in step.
async fn user(target: load::Target, i: usize, until: Instant) -> Reads {
    let mut client = Client::new(target);
    let mut reads = Reads::default();
    tokio::time::sleep(PAUSE.mul_f64(i as f64 / USERS as f64)).await;
    let mut round = i;
    let namespace = format!("/api/v1/namespaces/{NAMESPACE}/pods");
    while Instant::now() < until {
        let answer = timed(&mut client, &namespace, Some(PAGE)).await;
        reads.record(answer, |r| &mut r.namespace);
        if round % ALL_PODS_EVERY == 0 {
            let answer = timed(&mut client, ALL_PODS, Some(PAGE)).await;
            reads.record(answer, |r| &mut r.all_pods);
        }
        round += 1;
        tokio::time::sleep(PAUSE).await;
    }
    reads
}
