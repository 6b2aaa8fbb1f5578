//! The fleet's herd: every kubelet and kube-proxy of the cluster reconnecting at once, after a
//! gap in which the cluster went on changing: to the same kcache (a network blip, a load
//! balancer resetting its connections), or to one started again over its persistDir (a crash,
//! a rollout).
//!
//! Each client resumes its watch from the last resourceVersion it had seen, as client-go's
//! reflector does when a watch stream breaks: it watches again from there, and lists only if
//! it is told (410) that the version is too old. So what a herd costs is kcache's history and
//! its fan-out, not lists: kcache must answer every resumed watch from what it holds, send each
//! client the changes it missed, and send the upstream nothing.
//!
//! Measured: how long until every client has its watch back (its response headers) and has
//! received every change of the gap meant for it; the upstream's lists and watches meanwhile
//! (the sim counts what it serves); the TokenReviews and SubjectAccessReviews kcache sends for
//! the clients' tokens; changes lost and streams ended (a 410 ends one); kcache's CPU and peak
//! RSS.

use std::time::{Duration, Instant};

use super::fanout::{node_pod_watches, RssSampler};
use super::kcache::KcacheChild;
use super::watchers::{self, Delivery, FanOut, Proto, WriteLog};
use super::{load, CpuMeter, Row, Sim, OPEN_PARALLEL};

/// How long the clients are away while the cluster changes.
pub(super) const GAP_SECS: f64 = 2.0;

/// How long a herd may take before the bench stops waiting for it (the goal is 30 s).
const PATIENCE: Duration = Duration::from_secs(90);

/// The upstream's lists and watches so far, as the sim counts them.
pub(super) fn upstream(sim: &Sim) -> (u64, u64) {
    let (lists, _, watches, _) = sim.request_counts();
    (lists, watches)
}

/// kcache's TokenReviews and SubjectAccessReviews so far, by its own count.
pub(super) async fn reviews(k: &KcacheChild) -> (u64, u64) {
    let sent = |purpose: &'static str| async move {
        k.metric(&["kcache_upstream_requests_total", purpose])
            .await
            .unwrap_or(0.0) as u64
    };
    (
        sent("purpose=\"token_review\"").await,
        sent("purpose=\"access_review\"").await,
    )
}

/// What a row says of clients that had not synced when the bench stopped waiting.
pub(super) fn not_synced() -> String {
    format!("not within {} s", PATIENCE.as_secs())
}

/// When `fan` had received every change of `log` meant for it, counted from `t`; None if not
/// within the bench's patience.
async fn synced(fan: &FanOut, log: &WriteLog, t: Instant) -> Option<Duration> {
    let n = fan.expected(log);
    fan.wait_for_events(n, PATIENCE.saturating_sub(t.elapsed()))
        .await
        .then(|| t.elapsed())
}

/// What one herd measured.
pub(super) struct HerdRun {
    pub(super) clients: usize,
    pub(super) failed: usize,
    pub(super) first_error: Option<String>,
    /// Until every watch had its response headers.
    pub(super) open: Duration,
    /// Until every kubelet, and every kube-proxy, had received the gap's changes meant for it
    /// (None: not within the bench's patience).
    pub(super) kubelets_synced: Option<Duration>,
    pub(super) proxies_synced: Option<Duration>,
    pub(super) kubelets: Delivery,
    pub(super) proxies: Delivery,
    /// The TokenReviews and SubjectAccessReviews kcache sent during the herd.
    pub(super) reviews: (u64, u64),
    /// The upstream's lists and watches during the herd (and the restart before it).
    pub(super) upstream: (u64, u64),
    pub(super) cpu_seconds: f64,
    pub(super) rss_peak: u64,
}

impl HerdRun {
    /// Until every client had synced, if every one did.
    pub(super) fn synced(&self) -> Option<Duration> {
        Some(self.kubelets_synced?.max(self.proxies_synced?))
    }

    pub(super) fn lost(&self) -> u64 {
        self.kubelets.missing() + self.proxies.missing()
    }

    pub(super) fn ended_early(&self) -> usize {
        self.kubelets.ended_early + self.proxies.ended_early
    }

    pub(super) fn row(&self, scenario: &str, case: &str) -> Row {
        let secs =
            |d: Option<Duration>| d.map_or_else(not_synced, |d| format!("{:.2}", d.as_secs_f64()));
        let mut row = Row::new(scenario, case, "kcache");
        row.set("watches", self.clients as u64)
            .set("all open s", self.open.as_secs_f64())
            .set("kubelets synced s", secs(self.kubelets_synced))
            .set("kube-proxies synced s", secs(self.proxies_synced))
            .set(
                "delivered",
                format!(
                    "{}/{}",
                    self.kubelets.delivered + self.proxies.delivered,
                    self.kubelets.expected + self.proxies.expected
                ),
            )
            .set("streams ended", self.ended_early() as u64)
            .set("upstream lists", self.upstream.0)
            .set("upstream watches", self.upstream.1)
            .set("TokenReviews", self.reviews.0)
            .set("SubjectAccessReviews", self.reviews.1)
            .set("kcache CPU s", self.cpu_seconds)
            .set("kcache RSS MB", self.rss_peak as f64 / 1e6);
        if self.failed > 0 {
            row.note(format!(
                "{} watches failed to open: {}",
                self.failed,
                self.first_error.as_deref().unwrap_or("?")
            ));
        }
        row
    }
}

/// The two classes that reconnect: the kubelets' Pod watches and the kube-proxies'
/// EndpointSlice watches, one each per node, each on a connection of its own.
pub(super) struct Clients {
    pub(super) nodes: usize,
    /// The Pods' and the EndpointSlices' resourceVersion the clients had seen last.
    pub(super) pods_rv: u64,
    pub(super) slices_rv: u64,
    /// How each class reaches kcache (its credentials per watch).
    pub(super) kubelets: load::Target,
    pub(super) proxies: load::Target,
}

/// Open every client's watch once and close it again, as clients that have been served by a
/// kcache for a while: their access verdicts are then the kcache's. How many failed to open.
pub(super) async fn watch_once(clients: &Clients) -> usize {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (kubelets, proxies) = open_all(clients, stop_rx, Instant::now() + PATIENCE).await;
    let _ = stop_tx.send(true);
    let failed = kubelets.failed + proxies.failed;
    kubelets.finish().await;
    proxies.finish().await;
    failed
}

/// Every kubelet's Pod watch and every kube-proxy's slice watch, from the versions they had
/// seen, each class on a connection per node, all opening at once.
async fn open_all(
    clients: &Clients,
    stop: tokio::sync::watch::Receiver<bool>,
    until: Instant,
) -> (FanOut, FanOut) {
    let nodes = clients.nodes;
    let kubelet_watches = node_pod_watches(nodes, clients.pods_rv, "&allowWatchBookmarks=true");
    let proxy_path = super::fleet::proxy_watch(clients.slices_rv);
    let h2 = Proto::H2 { connections: nodes };
    tokio::join!(
        watchers::open_to(
            &clients.kubelets,
            h2,
            kubelet_watches,
            stop.clone(),
            until,
            OPEN_PARALLEL
        ),
        watchers::open_to(
            &clients.proxies,
            h2,
            vec![(None, proxy_path); nodes],
            stop,
            until,
            OPEN_PARALLEL
        ),
    )
}

/// Open every client's watch at once on `k` (they find the changes `pods` and `slices` made
/// during the gap), wait until each has them, and measure; the upstream's lists and watches
/// are counted from `since` (its [`upstream`] when the herd's cause began).
pub(super) async fn run(
    k: &KcacheChild,
    sim: &Sim,
    clients: &Clients,
    pods: &WriteLog,
    slices: &WriteLog,
    since: (u64, u64),
) -> HerdRun {
    let pid = k.pid();
    let sampler = RssSampler::start(pid);
    let reviews_before = reviews(k).await;
    let cpu = CpuMeter::start(pid);
    let t = Instant::now();
    let until = t + PATIENCE + Duration::from_secs(30);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (kubelets, proxies) = open_all(clients, stop_rx, until).await;
    let open = t.elapsed();
    let (kubelets_synced, proxies_synced) =
        tokio::join!(synced(&kubelets, pods, t), synced(&proxies, slices, t));
    let (cpu_seconds, _) = cpu.used();
    let upstream_after = upstream(sim);
    let reviews_after = reviews(k).await;
    let _ = stop_tx.send(true);
    let failed = kubelets.failed + proxies.failed;
    let first_error = kubelets.first_error.clone().or(proxies.first_error.clone());
    let kubelets_received = kubelets.finish().await;
    let proxies_received = proxies.finish().await;
    HerdRun {
        clients: kubelets_received.len() + proxies_received.len(),
        failed,
        first_error,
        open,
        kubelets_synced,
        proxies_synced,
        kubelets: watchers::delivery(pods, &kubelets_received),
        proxies: watchers::delivery(slices, &proxies_received),
        upstream: (upstream_after.0 - since.0, upstream_after.1 - since.1),
        reviews: (
            reviews_after.0.saturating_sub(reviews_before.0),
            reviews_after.1.saturating_sub(reviews_before.1),
        ),
        cpu_seconds,
        rss_peak: sampler.finish().await,
    }
}
