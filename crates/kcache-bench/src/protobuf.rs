//! The protobuf scenario: what kubelets, controllers and schedulers (client-go's typed clients,
//! which ask for `application/vnd.kubernetes.protobuf, application/json`) get from kcache's
//! cache, side by side with JSON readers of the same cache and with nginx serving the same
//! protobuf bytes; what a client pays to decode the same list in either form (in Rust: k8s-pb
//! against k8s-openapi); and a watch fan-out with protobuf watchers against JSON ones.

use bytes::Bytes;
use prost::Message;

use super::*;
use crate::alloc_count::{self, Allocations};
use load::Target;

/// What client-go's typed clients send.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// Decodes of the list per client row (the median is reported).
const DECODES: usize = 5;

impl Bench {
    pub(super) async fn protobuf(&mut self) -> Result<(), String> {
        const S: &str = "Protobuf from the cache (Pods)";
        let n = self.scale.protobuf_pods;
        progress(format!("protobuf: seeding {n} pods"));
        let sim = start_sim().await?;
        let objects = seed::pods(n, 50, 10, 13);
        let pods: Vec<Value> = objects
            .iter()
            .filter(|o| o.resource == "pods")
            .map(|o| o.object.clone())
            .collect();
        seed_sim(&sim, objects)?;
        let k = self.kcache(&sim, &ChildConfig::caching(&[PODS])).await?;
        let json = Target::plain(k.addr);
        let pb = Target::plain(k.addr).accepting(PROTOBUF);
        let path = "/api/v1/pods?resourceVersion=0";

        // The first protobuf read starts the type's protobuf mirror (a second upstream list
        // and watch): what that costs the upstream, once.
        let before = k.upstream_cost().await.ok();
        let rss_before = procstat::rss_bytes(k.pid());
        let pb_body = warm(&k, &pb, path).await?;
        let mirror_cost = before.zip(k.upstream_cost().await.ok()).map(|(b, a)| a - b);
        // What the mirror holds costs memory: kcache's RSS growth while it started.
        let mirror_rss = rss_before
            .zip(procstat::rss_bytes(k.pid()))
            .map(|(b, a)| a.saturating_sub(b));
        let (status, json_body) = load::fetch_from(&json, path, Duration::from_secs(120)).await?;
        if status != 200 {
            return Err(format!("kcache JSON LIST answered {status}"));
        }

        let case = format!("LIST all {} Pods, RV=0", count_label(n));
        progress(format!("protobuf {case}: kcache JSON"));
        let (jr, jcpu) = self.measure_on(&json, path, &[k.pid()], None).await;
        progress(format!("protobuf {case}: kcache protobuf"));
        let cost_before = k.upstream_cost().await.ok();
        let (pr, pcpu) = self.measure_on(&pb, path, &[k.pid()], None).await;
        let cost = cost_before
            .zip(k.upstream_cost().await.ok())
            .map(|(b, a)| a - b);
        let nginx = self.nginx_rows(S, &case, "pods.pb", &pb_body, true).await;
        progress(format!("protobuf {case}: sim"));
        let sim_pb = Target::plain(sim.addr()).accepting(PROTOBUF);
        let (sr, _) = self.measure_on(&sim_pb, path, &[], None).await;

        let mut row = load_row(S, &case, "kcache, JSON", &jr, jcpu);
        row.note(format!("{:.2} MB per read", mb(json_body.len() as u64)));
        self.report.push(row);
        let mut row = load_row(S, &case, "kcache, protobuf", &pr, pcpu);
        if let Some(c) = cost {
            set_upstream(&mut row, c.requests, c.received_bytes, pr.ok);
        }
        row.ratio(
            "protobuf/JSON req/s",
            pr.rps() / jr.rps().max(f64::MIN_POSITIVE),
        );
        if let Some(b) = nginx.best {
            row.ratio("kcache/best nginx", pr.rps() / b);
        }
        if let Some(c) = nginx.copying {
            row.ratio("kcache/nginx sendfile off", pr.rps() / c);
        }
        row.note(format!(
            "{:.2} MB per read ({:.0} % of the JSON)",
            mb(pb_body.len() as u64),
            100.0 * pb_body.len() as f64 / json_body.len().max(1) as f64
        ));
        if let Some(c) = mirror_cost {
            row.note(format!(
                "starting the protobuf mirror cost the upstream {:.0} requests, {:.2} MB, once",
                c.requests,
                mb(c.received_bytes as u64)
            ));
        }
        if let Some(grown) = mirror_rss {
            row.set("mirror RSS MB", mb(grown)).set(
                "mirror RSS/protobuf bytes",
                grown as f64 / pb_body.len().max(1) as f64,
            );
        }
        self.report.push(row);
        for r in nginx.rows {
            self.report.push(r);
        }
        let mut row = load_row(S, &case, "sim (upstream), protobuf", &sr, None);
        set_upstream_direct(&mut row, pb_body.len());
        row.note("in the bench process");
        self.report.push(row);

        self.decode_rows(S, n, &json_body, &pb_body)?;
        drop(json_body);
        drop(pb_body);

        // Watch fan-out: the same watchers in JSON and in protobuf (HTTP/2, as client-go).
        let watchers = self.scale.protobuf_watchers;
        let proto = Proto::H2 { connections: 10 };
        let (rate, secs) = (self.scale.watch_rate, self.scale.watch_secs);
        for (label, target) in [("JSON", &json), ("protobuf", &pb)] {
            let case = format!(
                "{} watchers, HTTP/2 (h2c), 10 conns, {} updates/s",
                count_label(watchers),
                fmt_num(rate)
            );
            progress(format!("protobuf {case}: {label}"));
            let rv = list_rv(k.addr, "/api/v1/pods").await?;
            let path = format!("/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=900");
            let f = self
                .fan_run(
                    &k,
                    target,
                    proto,
                    vec![(None, path); watchers],
                    rate,
                    secs,
                    |i| {
                        let o = &pods[(i as usize * 7) % pods.len()];
                        bump(&sim, "pods", o, self.next_seq()).map(|rv| (rv, 0))
                    },
                )
                .await;
            let row = Self::fan_row(S, &case, &format!("kcache, {label} watchers"), &f);
            self.report.push(row);
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        drop(k);
        sim.shutdown().await;
        Ok(())
    }

    /// A client's cost of decoding the same list as JSON (k8s-openapi, serde_json) and as
    /// protobuf (k8s-pb, prost): median time, allocations and bytes allocated per decode.
    fn decode_rows(&mut self, s: &str, n: usize, json: &[u8], pb: &[u8]) -> Result<(), String> {
        type JsonPodList = k8s_openapi::List<k8s_openapi::api::core::v1::Pod>;
        let case = format!("client decode of the {}-Pod list", count_label(n));
        progress(format!("protobuf {case}"));
        let raw = unwrap_list(pb)?;
        let (json_ms, json_allocs, json_items) = decode_median(|| {
            serde_json::from_slice::<JsonPodList>(json)
                .map(|l| l.items.len())
                .map_err(|e| format!("JSON PodList: {e}"))
        })?;
        let (pb_ms, pb_allocs, pb_items) = decode_median(|| {
            k8s_pb::api::core::v1::PodList::decode(raw)
                .map(|l| l.items.len())
                .map_err(|e| format!("protobuf PodList: {e}"))
        })?;
        if json_items != pb_items {
            return Err(format!(
                "the JSON list has {json_items} pods, the protobuf one {pb_items}"
            ));
        }
        let push = |target: &str, ms: f64, a: Allocations, bytes: usize| {
            let mut row = Row::new(s, &case, target);
            row.set("decode ms", ms)
                .set("allocations", a.count)
                .set("allocated MB", mb(a.bytes))
                .set("body MB", mb(bytes as u64));
            row
        };
        let row = push("k8s-openapi (JSON)", json_ms, json_allocs, json.len());
        self.report.push(row);
        let mut row = push("k8s-pb (protobuf)", pb_ms, pb_allocs, pb.len());
        row.ratio(
            "JSON/protobuf decode time",
            json_ms / pb_ms.max(f64::MIN_POSITIVE),
        );
        if pb_allocs.count > 0 {
            row.ratio(
                "JSON/protobuf allocations",
                json_allocs.count as f64 / pb_allocs.count as f64,
            );
        }
        self.report.push(row);
        Ok(())
    }
}

/// Read `path` in protobuf until kcache answers it from its cache (the first reads start the
/// mirror and go upstream); the body.
async fn warm(k: &KcacheChild, target: &Target, path: &str) -> Result<Bytes, String> {
    const FROM_CACHE: &[&str] = &[
        "kcache_responses_by_content_type_total",
        "content_type=\"protobuf\"",
        "source=\"cache\"",
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let before = k.metric(FROM_CACHE).await?;
        let (status, body) = load::fetch_from(target, path, Duration::from_secs(120)).await?;
        if status != 200 || !body.starts_with(b"k8s\0") {
            return Err(format!(
                "a protobuf LIST answered {status} with {} (not protobuf): does the upstream serve this type in protobuf?",
                String::from_utf8_lossy(&body[..body.len().min(80)])
            ));
        }
        if k.metric(FROM_CACHE).await? > before {
            return Ok(body);
        }
        if Instant::now() > deadline {
            return Err("kcache did not answer protobuf from its cache within 120 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The list message inside a protobuf body's `k8s\0` envelope (runtime.Unknown's field 2),
/// borrowed from the body.
fn unwrap_list(body: &[u8]) -> Result<&[u8], String> {
    let unknown = body
        .strip_prefix(b"k8s\0")
        .ok_or("a protobuf body without the k8s\\0 magic")?;
    watchers::field(unknown, 2).ok_or_else(|| "a runtime.Unknown without raw bytes".into())
}

/// Decode `DECODES` times: the median milliseconds, the allocations of one decode, and what
/// the decode returned.
fn decode_median<T: PartialEq>(
    mut decode: impl FnMut() -> Result<T, String>,
) -> Result<(f64, Allocations, T), String> {
    let mut times = Vec::with_capacity(DECODES);
    let mut allocs = Allocations::default();
    let mut out = None;
    for _ in 0..DECODES {
        let t = Instant::now();
        let (r, a) = alloc_count::count(&mut decode);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        allocs = a;
        out = Some(r?);
    }
    times.sort_by(f64::total_cmp);
    let out = out.ok_or("no decode ran")?;
    Ok((times[times.len() / 2], allocs, out))
}
