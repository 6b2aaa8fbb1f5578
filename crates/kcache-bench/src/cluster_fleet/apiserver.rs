//! The apiserver's own figures, from its `/metrics`: what the fleet costs it.

use std::time::{Duration, Instant};

use super::super::load::{self, Target};
use super::Fleet;

/// The apiserver's CPU seconds and resident bytes so far, from its `/metrics`.
pub(super) async fn apiserver_use(target: &Target, path: &str) -> Result<(f64, f64), String> {
    let (status, body) = load::fetch_from(target, path, Duration::from_secs(30)).await?;
    if status != 200 {
        return Err(format!("the apiserver's /metrics answered {status}"));
    }
    let text = String::from_utf8_lossy(&body);
    let value = |name: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .ok_or(format!("the apiserver's /metrics has no {name}"))
    };
    Ok((
        value("process_cpu_seconds_total")?,
        value("process_resident_memory_bytes")?,
    ))
}

/// The apiserver's CPU over an interval and its peak memory, read from its `/metrics` once a
/// second.
pub(super) struct ApiserverSampler {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<(f64, f64, u64)>,
    start: Instant,
}

pub(super) struct ApiserverUse {
    pub(super) cores: f64,
    pub(super) rss_peak: u64,
}

impl ApiserverSampler {
    pub(super) fn start(fleet: &Fleet<'_>) -> ApiserverSampler {
        let cluster_target = fleet.cluster.target.clone();
        let path = fleet.cluster.path("/metrics");
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let read = || apiserver_use(&cluster_target, &path);
            let first = read().await.ok();
            let mut last = first;
            let mut peak = first.map_or(0.0, |f| f.1);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        if let Ok(s) = read().await {
                            peak = peak.max(s.1);
                            last = Some(s);
                        }
                    }
                }
            }
            if let Ok(s) = read().await {
                peak = peak.max(s.1);
                last = Some(s);
            }
            (
                first.map_or(0.0, |f| f.0),
                last.map_or(0.0, |l| l.0),
                peak as u64,
            )
        });
        ApiserverSampler {
            stop,
            task,
            start: Instant::now(),
        }
    }

    pub(super) async fn finish(self) -> ApiserverUse {
        let _ = self.stop.send(());
        let wall = self.start.elapsed().as_secs_f64();
        let (first, last, rss_peak) = self.task.await.unwrap_or((0.0, 0.0, 0));
        ApiserverUse {
            cores: if wall > 0.0 {
                (last - first) / wall
            } else {
                0.0
            },
            rss_peak,
        }
    }
}
