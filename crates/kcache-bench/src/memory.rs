//! The memory scenario: kcache's resident bytes per cached JSON byte.

use super::*;

const S: &str = "Memory: kcache RSS per cached JSON byte";

/// The kinds the mixed case caches (those of `seed::demo_cluster`): group, version, resource.
const MIXED: &[(&str, &str, &str)] = &[
    ("", "v1", "namespaces"),
    ("", "v1", "nodes"),
    ("", "v1", "serviceaccounts"),
    ("", "v1", "configmaps"),
    ("", "v1", "secrets"),
    ("", "v1", "services"),
    ("", "v1", "pods"),
    ("", "v1", "events"),
    ("apps", "v1", "deployments"),
    ("apps", "v1", "replicasets"),
    ("apps", "v1", "statefulsets"),
    ("apps", "v1", "daemonsets"),
    ("batch", "v1", "jobs"),
    ("discovery.k8s.io", "v1", "endpointslices"),
];

/// The mixed case's cluster: about 3,500 objects of 14 kinds, most of them ConfigMaps, Pods,
/// Secrets, ReplicaSets and Deployments (the same at every scale: small sets are the point).
fn mixed_cluster() -> Vec<SeedObject> {
    seed::demo_cluster(&seed::DemoSpec {
        namespaces: 12,
        nodes: 10,
        deployments_per_namespace: 12,
        replicas: 4,
        configmaps_per_namespace: 150,
        secrets_per_namespace: 40,
        services_per_namespace: 8,
        node_images: 0,
        pod_managed_fields: false,
        seed: 8,
    })
}

/// The memory controls of a case's cached types.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Controls {
    metadata_only: bool,
    drop_managed_fields: bool,
}

impl Controls {
    const NONE: Controls = Controls {
        metadata_only: false,
        drop_managed_fields: false,
    };
}

impl Bench {
    pub(super) async fn memory(&mut self) -> Result<(), String> {
        let n = self.scale.memory_objects;
        let count = count_label(n);
        self.memory_case(
            &format!("{count} ConfigMaps (~1 KB)"),
            &[CONFIGMAPS],
            seed::configmaps(n, 10, 6),
            Controls::NONE,
        )
        .await?;
        self.memory_case(
            &format!("{count} Pods (~4 KB, managedFields)"),
            &[PODS],
            seed::pods(n, 1000, 10, 7),
            Controls::NONE,
        )
        .await?;
        // The same Pods, as a metadata informer's type would be cached.
        let metadata = Controls {
            metadata_only: true,
            drop_managed_fields: false,
        };
        self.memory_case(
            &format!("{count} Pods, metadataOnly"),
            &[PODS],
            seed::pods(n, 1000, 10, 7),
            metadata,
        )
        .await?;
        let lean = Controls {
            drop_managed_fields: true,
            ..metadata
        };
        self.memory_case(
            &format!("{count} Pods, metadataOnly + dropManagedFields"),
            &[PODS],
            seed::pods(n, 1000, 10, 7),
            lean,
        )
        .await?;
        let objects = mixed_cluster();
        let kinds: Vec<(&'static str, &'static str, &'static str)> = MIXED
            .iter()
            .filter(|(g, _, r)| objects.iter().any(|o| o.group == *g && o.resource == *r))
            .copied()
            .collect();
        let case = format!(
            "mixed: {} objects of {} kinds",
            count_label(objects.len()),
            kinds.len()
        );
        self.memory_case(&case, &kinds, objects, Controls::NONE)
            .await
    }

    /// One row: a kcache caching `resources` of a sim seeded with `objects`, its RSS synced
    /// less its RSS with an empty upstream, per byte of the list items it then serves.
    async fn memory_case(
        &mut self,
        case: &str,
        resources: &[(&'static str, &'static str, &'static str)],
        objects: Vec<SeedObject>,
        controls: Controls,
    ) -> Result<(), String> {
        progress(format!("memory: {case}"));
        let sim = start_sim().await?;
        // A metadata-only cache is read as metadata informers read it; its bytes are the
        // PartialObjectMetadata items it serves.
        let metadata_only = controls.metadata_only;
        let mut config = ChildConfig::caching(resources);
        config.metadata_only = metadata_only;
        config.drop_managed_fields = controls.drop_managed_fields;
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
        let (mut json_bytes, mut count) = (0u64, 0usize);
        for (group, version, resource) in resources {
            let collection = if group.is_empty() {
                format!("/api/{version}/{resource}?resourceVersion=0")
            } else {
                format!("/apis/{group}/{version}/{resource}?resourceVersion=0")
            };
            let mut target = load::Target::plain(k.addr);
            if metadata_only {
                target.accept = Some(http::HeaderValue::from_static(
                    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                ));
            }
            let (status, body) =
                load::fetch_from(&target, &collection, Duration::from_secs(300)).await?;
            if status != 200 {
                return Err(format!("kcache LIST {collection} answered {status}"));
            }
            let (bytes, items) = item_bytes(&body)?;
            json_bytes += bytes;
            count += items;
        }
        // What the sync cost the upstream (a LIST or a streamed list, then the watches), by
        // kcache's own count (the LISTs above are answered from the cache and cost it nothing).
        let sync_cost = k.upstream_cost().await?;
        let parts = memory_components(&k).await?;
        let growth = full.saturating_sub(empty);
        let ratio = growth as f64 / json_bytes.max(1) as f64;
        let mut row = Row::new(S, case, "kcache");
        row.set("objects", count as u64)
            .set("JSON MB", mb(json_bytes))
            .set("avg object B", json_bytes as f64 / count.max(1) as f64)
            .set("RSS empty MB", mb(empty))
            .set("RSS synced MB", mb(full))
            .set("RSS B per object", growth as f64 / count.max(1) as f64)
            .set("sync s", sync_secs)
            .set("sync upstream req", sync_cost.requests)
            .set("sync upstream MB", mb(sync_cost.received_bytes as u64));
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
        // No target is set for memory controls: their rows are compared by RSS per
        // object with the full cache's row of the same Pods.
        if controls != Controls::NONE {
            drop(k);
            sim.shutdown().await;
            return Ok(());
        }
        self.report.check(
            &format!("Memory, {case}: RSS growth ≤ 1.2× the JSON bytes"),
            "≤ 1.2",
            format!("{}×", fmt_num(ratio)),
            Some(ratio <= 1.2),
        );
        drop(k);
        sim.shutdown().await;
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
