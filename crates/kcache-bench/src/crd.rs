//! The `crd` scenario: what a cached custom type costs the upstream once its
//! CustomResourceDefinition is deleted.
//!
//! kcache caches 1,000 objects of a custom type; the type is then deleted (the sim stops
//! serving it, as the apiserver does when its CRD goes). The row counts kcache's upstream
//! requests per minute while the type stays deleted: discovery reads, bounded by their backoff,
//! and nothing else (a reflector retrying a type that is gone was the cost before).

use super::*;
use kcache_sim::ResourceType;

const GROUP: &str = "bench.example.com";

impl Bench {
    pub(super) async fn crd(&mut self) -> Result<(), String> {
        const S: &str = "A deleted CRD's type";
        let sim = start_sim().await?;
        sim.register(ResourceType {
            group: GROUP.into(),
            version: "v1".into(),
            resource: "widgets".into(),
            singular: "widget".into(),
            kind: "Widget".into(),
            namespaced: true,
            custom: true,
            ..ResourceType::default()
        });
        for i in 0..1000 {
            sim.create(
                GROUP,
                "widgets",
                json!({
                    "apiVersion": format!("{GROUP}/v1"),
                    "kind": "Widget",
                    "metadata": { "name": format!("w-{i:04}"), "namespace": "bench-1" },
                    "spec": { "size": i }
                }),
            )
            .map_err(|e| format!("seeding widgets: {e:?}"))?;
        }
        let k = self
            .kcache(&sim, &ChildConfig::caching(&[(GROUP, "v1", "widgets")]))
            .await?;
        progress("crd: the type deleted");
        sim.unregister(GROUP, "widgets");
        let served = ["kcache_cache_served{", "resource=\"widgets\""];
        k.wait_metric(
            &served,
            0.0,
            Duration::from_secs(30),
            "crd: kcache finding the type deleted",
        )
        .await?;
        // Past the first backoff steps (1, 2, 4, 8 s): the steady rate.
        tokio::time::sleep(Duration::from_secs(16)).await;
        let window = self.scale.phase * 4;
        let before = k.upstream_cost().await?;
        tokio::time::sleep(window).await;
        let after = k.upstream_cost().await?;
        let per_minute = (after - before).requests / window.as_secs_f64() * 60.0;
        let mut row = Row::new(S, "1,000 objects cached, then the CRD deleted", "kcache");
        row.set("upstream req per minute", per_minute)
            .set("window s", window.as_secs_f64())
            .note("discovery reads only: the type's reflector stopped on the 404");
        self.report.push(row);
        self.report.check(
            "A deleted CRD's type: kcache's upstream requests",
            "≤ 7 per minute (discovery every ≤ 10 s)",
            format!("{} per minute", fmt_num(per_minute)),
            Some(per_minute <= 7.0),
        );
        drop(k);
        sim.shutdown().await;
        Ok(())
    }
}
