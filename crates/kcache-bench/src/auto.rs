//! The `auto` scenario: what on-demand caching takes and gives back.
//!
//! kcache caches Namespaces only, with on-demand caching on. Clients list ConfigMaps (10,000
//! of them; 1,000 with `--quick`) until kcache takes the type up; it syncs, answers from the
//! cache, and, once nothing has read it for `idleSeconds`, is dropped. The row gives kcache's
//! resident memory before, while the type is cached and after it was dropped, beside what
//! kcache counts as released (`kcache_auto_released_bytes_total`), and the time from the
//! request that crossed the threshold to the first list answered from the cache.

use super::*;
use load::{Client, Target};

/// Lists that get a type cached, and seconds without a read that get it dropped.
const MIN_REQUESTS: u32 = 3;
const IDLE_SECONDS: u64 = 5;

/// The most a step of the scenario is waited for.
const WAIT: Duration = Duration::from_secs(60);

impl Bench {
    pub(super) async fn auto(&mut self) -> Result<(), String> {
        const S: &str = "On-demand caching: a type taken up and dropped";
        let n = self.scale.get_objects;
        progress(format!("auto: seeding {n} ConfigMaps"));
        let sim = start_sim().await?;
        seed_sim(&sim, seed::configmaps(n, 10, 3))?;
        let mut config = ChildConfig::caching(&[("", "v1", "namespaces")]);
        config.auto = Some((MIN_REQUESTS, IDLE_SECONDS));
        let k = self.kcache(&sim, &config).await?;
        let rss = || procstat::rss_bytes(k.pid()).unwrap_or(0) as f64;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = rss();

        progress("auto: clients list ConfigMaps");
        let mut client = Client::new(Target::plain(k.addr));
        let path = "/api/v1/configmaps?resourceVersion=0";
        let timeout = Duration::from_secs(60);
        for _ in 0..MIN_REQUESTS {
            expect_ok(client.get(path, timeout).await?)?;
        }
        let asked = Instant::now();
        let synced = ["kcache_cache_synced{", "resource=\"configmaps\""];
        k.wait_metric(&synced, 1.0, WAIT, "auto: the type cached and synced")
            .await?;
        // Answered from the cache from then on (the cache's age header marks it).
        let cached_after = asked.elapsed();
        let cached_bytes = k
            .metric(&["kcache_cached_bytes{", "resource=\"configmaps\""])
            .await?;
        for _ in 0..5 {
            expect_ok(client.get(path, timeout).await?)?;
        }
        let taken_up = rss();

        progress(format!("auto: nothing reads it for {IDLE_SECONDS} s"));
        let dropped = ["kcache_auto_dropped_total{", "reason=\"idle\""];
        k.wait_metric(&dropped, 1.0, WAIT, "auto: the idle type dropped")
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = rss();
        let released = k.metric(&["kcache_auto_released_bytes_total"]).await?;

        let mib = |b: f64| b / (1024.0 * 1024.0);
        let case = format!("{n} ConfigMaps, listed {MIN_REQUESTS}× then idle {IDLE_SECONDS} s");
        let mut row = Row::new(S, &case, "kcache");
        row.set("RSS before MiB", mib(before))
            .set("RSS cached MiB", mib(taken_up))
            .set("RSS dropped MiB", mib(after))
            .set("RSS given back MiB", mib(taken_up - after))
            .set("cached JSON MiB", mib(cached_bytes))
            .set("released (metric) MiB", mib(released))
            .set("cached after s", cached_after.as_secs_f64())
            .note("RSS of the kcache process; released: the dropped cache's estimated bytes");
        self.report.push(row);
        let grown = taken_up - before;
        let given_back = taken_up - after;
        self.report.check(
            "On-demand caching: memory given back by a dropped type",
            "≥ half of what taking it up added to kcache's RSS",
            format!(
                "{} of {} MiB",
                fmt_num(mib(given_back)),
                fmt_num(mib(grown))
            ),
            Some(grown > 0.0 && given_back >= grown / 2.0),
        );
        drop(k);
        sim.shutdown().await;
        Ok(())
    }
}

fn expect_ok((status, body): (u16, bytes::Bytes)) -> Result<(), String> {
    if status == 200 {
        Ok(())
    } else {
        Err(format!(
            "a list answered {status}: {}",
            String::from_utf8_lossy(&body)
        ))
    }
}
