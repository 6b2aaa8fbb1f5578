//! `kcache demo`: the built-in simulated cluster, seeded with a small realistic workload and a
//! little churn, with kcache in front of it. Lets anyone try kcache with kubectl and no cluster.

use std::time::Duration;

use tokio::net::TcpListener;

use kcache::auth::AuthMode;
use kcache::config::Config;
use kcache::server;
use kcache::upstream::Upstream;
use kcache_sim::seed::{self, Churn, DemoSpec};
use kcache_sim::{table_columns, Sim, SimConfig};

use crate::CliError;

/// Options of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Where kcache listens.
    pub listen: String,
    /// Where the simulated cluster listens (port 0: any free port).
    pub sim_listen: String,
    /// Changes per second made to the simulated cluster (0: none).
    pub churn_per_second: f64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            listen: "127.0.0.1:8080".into(),
            sim_listen: "127.0.0.1:0".into(),
            churn_per_second: 1.0,
        }
    }
}

/// Lists of a type nobody configured after which the demo caches it (see `auto.minRequests`).
const DEMO_AUTO_MIN_REQUESTS: u32 = 3;

/// Run the demo until SIGINT/SIGTERM.
pub async fn run(opts: DemoOptions, mut config: Config) -> Result<(), CliError> {
    let sim_addr = opts
        .sim_listen
        .parse()
        .map_err(|source| CliError::SimListen {
            addr: opts.sim_listen.clone(),
            source,
        })?;
    let sim = Sim::start_on(sim_addr, SimConfig::demo())
        .await
        .map_err(CliError::Sim)?;
    table_columns::serve_builtin(&sim);
    let initial = seed::demo_cluster(&DemoSpec::default());
    let mut churn = Churn::new(7, &initial);
    seed::create_all(&sim, initial)?;
    if opts.churn_per_second > 0.0 {
        let sim = sim.clone();
        let period = Duration::from_secs_f64(1.0 / opts.churn_per_second);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                seed::apply(&sim, churn.next_op());
            }
        });
    }

    config.listen = opts.listen;
    // On-demand caching on, with a low threshold, so that a newcomer sees a type nobody
    // configured (ServiceAccounts) taken up after a few reads.
    config.auto.enabled = true;
    config.auto.min_requests = DEMO_AUTO_MIN_REQUESTS;
    let authenticated = config.auth.mode != AuthMode::None;
    let upstream = if authenticated {
        sim.set_rbac(Some(demo_rbac()));
        Upstream::from_url_with_token(&sim.url(), "kcache-token")
    } else {
        Upstream::from_url(&sim.url())
    }?;
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|source| CliError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
    let admin = server::bind_admin(&config).await?;
    let running = server::start(&config, upstream, listener, admin).await?;
    if !running.wait_synced(Duration::from_secs(30)).await {
        return Err(CliError::Other(
            "the caches did not sync within 30 s".into(),
        ));
    }
    let k = running.url();
    let admin = running.admin_url();
    println!(
        "\nkcache demo is running.\n\
         \x20 simulated cluster (upstream): {sim}\n\
         \x20 kcache:                       {k}\n\
         \x20 kcache health and metrics:    {admin}/readyz?verbose  {admin}/metrics\n\
         \x20 kcache's caches at a glance:  {admin}/status in a browser, or: kcache status --admin {admin}\n\n\
         Point kubectl at kcache:\n\
         \x20 kubectl --server {k} get pods -A -o wide\n\
         \x20 kubectl --server {k} get configmaps -A --chunk-size=2\n\
         \x20 kubectl --server {k} get pods -A -w\n\
         \x20 curl '{k}/api/v1/pods?resourceVersion=0&fieldSelector=spec.nodeName=node-1'\n\
         Types nobody configured are cached once read {DEMO_AUTO_MIN_REQUESTS} times within a minute (auto):\n\
         \x20 kubectl --server {k} get serviceaccounts -A   (run it {DEMO_AUTO_MIN_REQUESTS} times, then see /status)\n\
         Compare with the simulated cluster directly: kubectl --server {sim} get pods -A -o yaml\n\
         Or use a kubeconfig: kubectl config set-cluster kcache --server={k} && \
kubectl config set-context kcache --cluster=kcache && kubectl config use-context kcache\n\n\
         Ctrl-C stops both.",
        sim = sim.url()
    );
    if authenticated {
        println!(
            "\nCallers are authenticated ({mode}) and every cached read is authorized by the\n\
             simulated cluster's RBAC. Tokens to try:\n\
             \x20 admin-token   user admin, may do everything\n\
             \x20 viewer-token  user viewer, may read configmaps and pods in namespace shop\n\
             \x20 kubectl --server {k} --token viewer-token get pods -n shop     (allowed)\n\
             \x20 kubectl --server {k} --token viewer-token get secrets -n shop  (403)\n\
             \x20 kubectl --server {k} --token viewer-token get pods -A          (403: cluster-wide)",
            mode = config.auth.mode.as_str()
        );
    }
    running.until_signal().await;
    sim.shutdown().await;
    Ok(())
}

/// The simulated cluster's RBAC table when the demo authenticates callers.
fn demo_rbac() -> kcache_sim::rbac::Rbac {
    use kcache_sim::rbac::{Rbac, Subject};
    Rbac::new()
        .proxy("kcache-token", "system:serviceaccount:kcache:kcache")
        .token("admin-token", "admin", &["system:masters"])
        .token("viewer-token", "viewer", &[])
        .allow_masters()
        .allow(
            Subject::User("viewer".into()),
            &["get", "list", "watch"],
            &[""],
            &["configmaps", "pods"],
            Some("shop"),
        )
}
