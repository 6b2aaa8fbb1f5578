//! The memory scenario: kcache's resident bytes per cached JSON byte.

use super::*;

impl Bench {
    pub(super) async fn memory(&mut self) -> Result<(), String> {
        const S: &str = "Memory: kcache RSS per cached JSON byte";
        let n = self.scale.memory_objects;
        for kind in ["ConfigMaps (~1 KB)", "Pods (~4 KB, managedFields)"] {
            let (resource, objects) = if kind.starts_with("ConfigMaps") {
                (CONFIGMAPS, seed::configmaps(n, 10, 6))
            } else {
                (PODS, seed::pods(n, 1000, 10, 7))
            };
            let case = format!("{} {kind}", count_label(n));
            progress(format!("memory: {case}"));
            let sim = start_sim().await?;
            let config = ChildConfig::caching(&[resource]);
            let empty = {
                let k = self.kcache(&sim, &config).await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
                procstat::rss_bytes(k.pid()).unwrap_or(0)
            };
            let t = Instant::now();
            seed_sim(&sim, objects)?;
            progress(format!(
                "memory: seeded in {:.0} s",
                t.elapsed().as_secs_f64()
            ));
            let t = Instant::now();
            let k = self.kcache(&sim, &config).await?;
            let sync_secs = t.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs(2)).await;
            let full = procstat::rss_bytes(k.pid()).unwrap_or(0);
            let collection = format!("/api/v1/{}?resourceVersion=0", resource.2);
            let (status, body) = load::fetch(k.addr, &collection, Duration::from_secs(300)).await?;
            if status != 200 {
                return Err(format!("kcache LIST answered {status}"));
            }
            let (json_bytes, count) = item_bytes(&body)?;
            drop(body);
            let growth = full.saturating_sub(empty);
            let ratio = growth as f64 / json_bytes.max(1) as f64;
            let mut row = Row::new(S, &case, "kcache");
            row.set("objects", count as u64)
                .set("JSON MB", mb(json_bytes))
                .set("avg object B", json_bytes as f64 / count.max(1) as f64)
                .set("RSS empty MB", mb(empty))
                .set("RSS synced MB", mb(full))
                .set("RSS B per object", growth as f64 / count.max(1) as f64)
                .set("sync s", sync_secs)
                .ratio("RSS growth/JSON", ratio);
            self.report.push(row);
            self.report.check(
                &format!("Memory, {case}: RSS growth ≤ 1.5× the JSON bytes"),
                "≤ 1.5",
                format!("{}×", fmt_num(ratio)),
                Some(ratio <= 1.5),
            );
            drop(k);
            sim.shutdown().await;
        }
        Ok(())
    }
}
