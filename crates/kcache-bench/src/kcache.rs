//! kcache under test, as a child process (`kcache serve`) so that its CPU time and memory are
//! its own: the bench process also runs the simulated apiserver and the load generator.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;

/// What the child caches and how.
#[derive(Debug, Clone)]
pub struct ChildConfig {
    /// `(group, version, resource)` to cache.
    pub resources: Vec<(&'static str, &'static str, &'static str)>,
    /// Forward consistent reads instead of answering them from the cache.
    pub forward_consistent: bool,
    /// Authenticate callers (`auth.mode: delegated`), with this bearer token as kcache's own
    /// identity towards the sim. In front of a kubeconfig ([`KcacheChild::start_with_kubeconfig`])
    /// kcache's identity is the kubeconfig's, and the token is not used.
    pub delegated_with_token: Option<String>,
    /// Serve HTTPS with this certificate and key (PEM files) instead of plain HTTP.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Cache every resource as metadata only (`resources[].metadataOnly`).
    pub metadata_only: bool,
    /// `dropManagedFields: true`.
    pub drop_managed_fields: bool,
    /// Keep the caches on disk here (`cache.persistDir`), for a warm restart.
    pub persist_dir: Option<PathBuf>,
    /// On-demand caching on (`auto`), with this `minRequests` and `idleSeconds`.
    pub auto: Option<(u32, u64)>,
    /// Audit every request at this level (`Metadata`, ...) into a log in kcache's directory
    /// (`audit`, with a policy of one rule, without the RequestReceived stage; the log
    /// rotated at 4 MB, one backup kept).
    pub audit: Option<&'static str>,
}

impl ChildConfig {
    pub fn caching(resources: &[(&'static str, &'static str, &'static str)]) -> Self {
        ChildConfig {
            resources: resources.to_vec(),
            forward_consistent: false,
            delegated_with_token: None,
            tls: None,
            metadata_only: false,
            drop_managed_fields: false,
            persist_dir: None,
            auto: None,
            audit: None,
        }
    }

    fn yaml(&self, dir: &Path) -> String {
        let mut y = String::from("resources:\n");
        for (g, v, r) in &self.resources {
            y.push_str(&format!(
                "  - {{ group: \"{g}\", version: {v}, resource: {r}, metadataOnly: {} }}\n",
                self.metadata_only
            ));
        }
        if self.drop_managed_fields {
            y.push_str("dropManagedFields: true\n");
        }
        if self.delegated_with_token.is_some() {
            y.push_str("auth:\n  mode: delegated\n");
        }
        if let Some((cert, key)) = &self.tls {
            y.push_str(&format!(
                "tls:\n  certFile: {}\n  keyFile: {}\n",
                cert.display(),
                key.display()
            ));
        }
        if let Some(dir) = &self.persist_dir {
            // The `cache` section's other keys at their defaults (docs/configuration.md).
            y.push_str(&format!(
                "cache:\n  historyWindowSeconds: 300\n  historyMaxEvents: 100000\n  persistDir: \"{}\"\n",
                dir.display()
            ));
        }
        if let Some((min_requests, idle_seconds)) = self.auto {
            y.push_str(&format!(
                "auto:\n  enabled: true\n  minRequests: {min_requests}\n  idleSeconds: {idle_seconds}\n"
            ));
        }
        if self.audit.is_some() {
            // The log is kept small (two files of 4 MB) so that a run measures what a
            // kcache that has run for a while pays: a log whose rotated files are deleted,
            // written into page-cache pages the kernel reuses. With the defaults (100 MB
            // files, every backup kept) a run's 2 GB of log grow into memory this VM had not
            // touched, which cost about 1 µs more per event (BENCHMARKS.md, "The audit
            // trail's cost").
            y.push_str(&format!(
                "audit:\n  policyFile: \"{}\"\n  log:\n    path: \"{}\"\n    maxSizeMB: 4\n    maxBackups: 1\n",
                dir.join("audit-policy.yaml").display(),
                dir.join("audit.log").display()
            ));
        }
        if self.forward_consistent {
            y.push_str(
                "consistentReads:\n  source: upstream\n  waitSeconds: 3\n  onTimeout: upstream\n",
            );
        }
        y
    }
}

/// A running `kcache serve`; killed on drop.
pub struct KcacheChild {
    child: Child,
    pub addr: SocketAddr,
    /// kcache's own `/readyz` and `/metrics`.
    pub admin_addr: SocketAddr,
    dir: TempDir,
}

impl KcacheChild {
    /// Start `exe serve` against `upstream` (a plain-HTTP URL, no credentials) and wait until
    /// `/readyz` on the admin address answers 200 (every cache synced), at most `ready_timeout`.
    pub async fn start(
        exe: &PathBuf,
        upstream: &str,
        config: &ChildConfig,
        ready_timeout: Duration,
    ) -> Result<KcacheChild, String> {
        let mut k = Self::start_unready(exe, upstream, config)?;
        k.wait_ready(ready_timeout).await?;
        Ok(k)
    }

    /// [`KcacheChild::start`] without waiting until ready: the caller times the start from
    /// the exec.
    pub fn start_unready(
        exe: &PathBuf,
        upstream: &str,
        config: &ChildConfig,
    ) -> Result<KcacheChild, String> {
        let dir = TempDir::new("kcache")?;
        let kubeconfig = dir.path().join("kubeconfig");
        let user = match &config.delegated_with_token {
            Some(t) => format!("{{token: {t}}}"),
            None => "{}".into(),
        };
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {upstream}\n\
                 users:\n- name: anonymous\n  user: {user}\ncontexts:\n- name: sim\n  context:\n    cluster: sim\n    user: anonymous\n\
                 current-context: sim\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        Self::launch(exe, dir, &kubeconfig, None, config)
    }

    /// Start `exe serve` in front of the cluster of a kubeconfig (a real one: its server URL,
    /// CA and credentials, as `kcache serve --kubeconfig` reads them), and wait until ready.
    pub async fn start_with_kubeconfig(
        exe: &PathBuf,
        kubeconfig: &Path,
        context: Option<&str>,
        config: &ChildConfig,
        ready_timeout: Duration,
    ) -> Result<KcacheChild, String> {
        let dir = TempDir::new("kcache")?;
        Self::spawn(exe, dir, kubeconfig, context, config, ready_timeout).await
    }

    async fn spawn(
        exe: &PathBuf,
        dir: TempDir,
        kubeconfig: &Path,
        context: Option<&str>,
        config: &ChildConfig,
        ready_timeout: Duration,
    ) -> Result<KcacheChild, String> {
        let mut k = Self::launch(exe, dir, kubeconfig, context, config)?;
        k.wait_ready(ready_timeout).await?;
        Ok(k)
    }

    fn launch(
        exe: &PathBuf,
        dir: TempDir,
        kubeconfig: &Path,
        context: Option<&str>,
        config: &ChildConfig,
    ) -> Result<KcacheChild, String> {
        let config_path = dir.path().join("kcache.yaml");
        std::fs::write(&config_path, config.yaml(dir.path())).map_err(|e| e.to_string())?;
        if let Some(level) = config.audit {
            let policy = format!(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: {level}\n"
            );
            std::fs::write(dir.path().join("audit-policy.yaml"), policy)
                .map_err(|e| e.to_string())?;
        }
        let port = super::free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let admin_addr = SocketAddr::from(([127, 0, 0, 1], super::free_port()?));
        let log =
            std::fs::File::create(dir.path().join("kcache.log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(exe);
        command.arg("serve").arg("--kubeconfig").arg(kubeconfig);
        // The child stops when the bench ends, however it ends (a signal the bench catches
        // drops the child and kills it; one it cannot, SIGKILL, leaves this). Another build
        // under test (`KCACHE_BENCH_TARGET_EXE`) may predate the flag.
        if std::env::current_exe().is_ok_and(|own| own == *exe) {
            command.arg("--exit-with-parent");
        }
        if let Some(c) = context {
            command.arg("--context").arg(c);
        }
        let child = command
            .arg("--config")
            .arg(&config_path)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--admin-listen")
            .arg(admin_addr.to_string())
            .env(
                "KCACHE_LOG",
                std::env::var("KCACHE_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("KCACHE_CONFIG")
            .env_remove("KCACHE_LISTEN")
            .env_remove("KCACHE_ADMIN_LISTEN")
            .env_remove("KCACHE_AUTH")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {} serve: {e}", exe.display()))?;
        Ok(KcacheChild {
            child,
            addr,
            admin_addr,
            dir,
        })
    }

    /// Wait until `/readyz` answers 200 (every cache synced or restored), at most `ready_timeout`.
    pub async fn wait_ready(&mut self, ready_timeout: Duration) -> Result<(), String> {
        let k = self;
        let admin_addr = k.admin_addr;
        let deadline = Instant::now() + ready_timeout;
        loop {
            if let Ok((200, _)) =
                super::load::fetch(admin_addr, "/readyz", Duration::from_secs(2)).await
            {
                return Ok(());
            }
            if let Ok(Some(status)) = k.child.try_wait() {
                return Err(format!("kcache exited ({status}): {}", k.log_tail()));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "kcache not ready within {ready_timeout:?}: {}",
                    k.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Why the process is no longer running, if it is not.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("kcache exited ({status}): {}", self.log_tail())),
            _ => None,
        }
    }

    /// SIGKILL, as a crash or an OOM kill would end it: nothing of it runs after this.
    pub fn kill_9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What this kcache has cost its upstream so far, from its own metrics
    /// (`kcache_upstream_requests_total` and `kcache_upstream_received_bytes_total`, summed
    /// over purposes): what a bench row reports per read, and what works against any upstream,
    /// not only a sim that counts for itself.
    pub async fn upstream_cost(&self) -> Result<UpstreamCost, String> {
        let text = self.metrics_text().await?;
        Ok(UpstreamCost {
            requests: sum_series(&text, &["kcache_upstream_requests_total{"]),
            received_bytes: sum_series(&text, &["kcache_upstream_received_bytes_total{"]),
        })
    }

    /// The sum of the series whose line contains every one of `parts` (the family name first,
    /// then label pairs such as `source="cache"`).
    pub async fn metric(&self, parts: &[&str]) -> Result<f64, String> {
        metric_at(self.admin_addr, parts).await
    }

    /// Wait until the metric matching `parts` (see [`KcacheChild::metric`]) reads `want`, at
    /// most `timeout`; the error says `what` did not happen, with kcache's last log lines.
    pub async fn wait_metric(
        &self,
        parts: &[&str],
        want: f64,
        timeout: Duration,
        what: &str,
    ) -> Result<(), String> {
        self.wait_metric_until(parts, |v| v == want, timeout, what)
            .await
    }

    /// Wait until the metric matching `parts` satisfies `done` (an unreadable metric never
    /// does), at most `timeout`; the error says `what` did not happen.
    async fn wait_metric_until(
        &self,
        parts: &[&str],
        done: impl Fn(f64) -> bool,
        timeout: Duration,
        what: &str,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while !done(self.metric(parts).await.unwrap_or(f64::NAN)) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "{what}: not within {timeout:?}\n{}",
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Wait until the access verdicts RBAC gave are written down in `persist_dir`, at least
    /// `watches` of them for watches (kcache does it every 10 s; docs/security.md,
    /// "Remembered verdicts"), as in a kcache that has run for a while: one killed before that
    /// restarts without them.
    pub async fn wait_verdicts_kept(
        &self,
        persist_dir: &Path,
        watches: usize,
        timeout: Duration,
    ) -> Result<(), String> {
        let file = persist_dir.join("access-verdicts.json");
        let deadline = Instant::now() + timeout;
        // A verdict's key holds its verb between NULs (kcache's `auth::authz`), written as
        // JSON escapes.
        let kept =
            |t: &str| t.contains("\"key\"") && t.matches("\\u0000watch\\u0000").count() >= watches;
        while !std::fs::read_to_string(&file).is_ok_and(|t| kept(&t)) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "access verdicts not written to {} within {timeout:?}\n{}",
                    file.display(),
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// Wait until every one of `resources` has been committed to the persistDir, and the
    /// protobuf mirror of each of `mirrored` with it, as in a kcache that has run for a while
    /// (one killed before its first commit of a type starts that type afresh).
    pub async fn wait_committed(
        &self,
        resources: &[&str],
        mirrored: &[&str],
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        for resource in resources {
            let of = format!("resource=\"{resource}\"");
            let parts = ["kcache_persist_flushes_total", &of, "outcome=\"ok\""];
            let what = format!("{resource} written to the persistDir");
            self.wait_metric_until(&parts, |n| n >= 1.0, left(), &what)
                .await?;
        }
        for resource in mirrored {
            let of = format!("resource=\"{resource}\"");
            let parts = ["kcache_persist_protobuf_objects", &of];
            let what = format!("{resource}'s protobuf mirror written to the persistDir");
            self.wait_metric_until(&parts, |n| n >= 1.0, left(), &what)
                .await?;
        }
        Ok(())
    }

    async fn metrics_text(&self) -> Result<String, String> {
        metrics_text_at(self.admin_addr).await
    }

    /// All of kcache's metrics at one moment: several series read from one scrape.
    pub async fn scrape(&self) -> Result<Scrape, String> {
        Ok(Scrape(self.metrics_text().await?))
    }

    /// The last lines kcache logged.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("kcache.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }
}

/// [`KcacheChild::metric`] of the kcache whose admin address is `admin`: for tasks that
/// outlive a borrow of the child.
pub async fn metric_at(admin: SocketAddr, parts: &[&str]) -> Result<f64, String> {
    Ok(sum_series(&metrics_text_at(admin).await?, parts))
}

async fn metrics_text_at(admin: SocketAddr) -> Result<String, String> {
    let (status, body) = super::load::fetch(admin, "/metrics", Duration::from_secs(5)).await?;
    if status != 200 {
        return Err(format!("kcache /metrics answered {status}"));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The sum of the values of the series in a Prometheus text exposition whose lines start with
/// `parts[0]` and contain the other parts.
fn sum_series(text: &str, parts: &[&str]) -> f64 {
    let Some((family, labels)) = parts.split_first() else {
        return 0.0;
    };
    text.lines()
        .filter(|l| l.starts_with(family) && labels.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// kcache's metrics as one scrape of `/metrics` gave them.
pub struct Scrape(String);

impl Scrape {
    /// The sum of the series whose line contains every one of `parts` (see
    /// [`KcacheChild::metric`]).
    pub fn sum(&self, parts: &[&str]) -> f64 {
        sum_series(&self.0, parts)
    }

    /// The series of `family` (e.g. `kcache_consistent_reads_total`) summed by the value of
    /// one of their labels (e.g. `outcome`), whatever values it takes: a new one shows up
    /// without the bench knowing it.
    pub fn by_label(&self, family: &str, label: &str) -> BTreeMap<String, f64> {
        let head = format!("{family}{{");
        let key = format!("{label}=\"");
        let mut out = BTreeMap::new();
        for line in self.0.lines().filter(|l| l.starts_with(&head)) {
            let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
                continue;
            };
            // The label itself, not one whose name ends in it.
            let Some(at) = [b'{', b',']
                .iter()
                .filter_map(|&b| line.find(&format!("{}{key}", b as char)))
                .min()
            else {
                continue;
            };
            let rest = &line[at + 1 + key.len()..];
            let Some(end) = rest.find('"') else { continue };
            *out.entry(rest[..end].to_string()).or_insert(0.0) += value;
        }
        out
    }
}

/// Upstream requests and response bytes, as kcache counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UpstreamCost {
    pub requests: f64,
    pub received_bytes: f64,
}

impl std::ops::Sub for UpstreamCost {
    type Output = UpstreamCost;

    fn sub(self, before: UpstreamCost) -> UpstreamCost {
        UpstreamCost {
            requests: self.requests - before.requests,
            received_bytes: self.received_bytes - before.received_bytes,
        }
    }
}

impl Drop for KcacheChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
