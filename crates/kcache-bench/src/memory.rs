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
            let parts = memory_components(&k).await?;
            let growth = full.saturating_sub(empty);
            let ratio = growth as f64 / json_bytes.max(1) as f64;
            let mut row = Row::new(S, &case, "kcache");
            row.set("objects", count as u64)
                .set("JSON MB", mb(json_bytes))
                .set("avg object B", json_bytes as f64 / count.max(1) as f64)
                .set("RSS empty MB", mb(empty))
                .set("RSS synced MB", mb(full))
                .set("RSS B per object", growth as f64 / count.max(1) as f64)
                .set("sync s", sync_secs);
            // kcache's own estimate of where the bytes go (`kcache_cache_memory_bytes`).
            for (component, column) in [
                ("json", "json B/obj"),
                ("head", "head B/obj"),
                ("index", "index B/obj"),
                ("history", "history B/obj"),
            ] {
                let bytes = parts.get(component).copied().unwrap_or(0.0);
                row.set(column, bytes / count.max(1) as f64);
            }
            row.ratio("RSS growth/JSON", ratio);
            self.report.push(row);
            self.report.check(
                &format!("Memory, {case}: RSS growth ≤ 1.2× the JSON bytes"),
                "≤ 1.2",
                format!("{}×", fmt_num(ratio)),
                Some(ratio <= 1.2),
            );
            drop(k);
            sim.shutdown().await;
        }
        Ok(())
    }
}

/// `kcache_cache_memory_bytes` of a running kcache, summed by component over resources.
async fn memory_components(
    k: &KcacheChild,
) -> Result<std::collections::BTreeMap<String, f64>, String> {
    let (status, body) = load::fetch(k.admin_addr, "/metrics", Duration::from_secs(30)).await?;
    if status != 200 {
        return Err(format!("kcache /metrics answered {status}"));
    }
    let mut out = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&body).lines() {
        let Some(rest) = line.strip_prefix("kcache_cache_memory_bytes{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let component = labels
            .split(',')
            .find_map(|l| l.strip_prefix("component=\""))
            .map(|c| c.trim_end_matches('"').to_string());
        if let (Some(c), Ok(v)) = (component, value.trim().parse::<f64>()) {
            *out.entry(c).or_insert(0.0) += v;
        }
    }
    Ok(out)
}
