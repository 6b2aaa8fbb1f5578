//! The `kcache` binary: a thin command line over the library.
//!
//! `kcache demo` (cargo feature `demo`, on by default) links the simulated apiserver, so the
//! README's first command works from a fresh clone; `kcache bench` (feature `bench`, off by
//! default) links the benchmark. The container image is built with `--no-default-features`:
//! what runs in production carries neither.
#![forbid(unsafe_code)]

#[cfg(feature = "demo")]
mod demo;
#[cfg(feature = "demo")]
mod sim;
mod status;

/// With the bench linked, the binary counts allocations where the bench asks it to (its
/// client decode rows; see `kcache_bench::alloc_count`); elsewhere it is the system allocator.
#[cfg(feature = "bench")]
#[global_allocator]
static ALLOCATOR: kcache_bench::alloc_count::Counting = kcache_bench::alloc_count::Counting;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kcache::auth::AuthError;
use kcache::config::{Config, ConfigError};
use kcache::server::{self, StartError};
use kcache::upstream::{Upstream, UpstreamError};

/// Why a command failed. The library's errors are kept whole, so `main` can print their
/// causes down to the root one.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("listening on {addr}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("printing the configuration")]
    Print(#[source] yaml_serde::Error),
    #[error(transparent)]
    Status(#[from] status::StatusError),
    #[cfg(feature = "demo")]
    #[error("--sim-listen {addr}")]
    SimListen {
        addr: String,
        source: std::net::AddrParseError,
    },
    #[cfg(feature = "demo")]
    #[error("starting the simulated cluster")]
    Sim(#[source] std::io::Error),
    /// What the demo's seeding and the bench report as text.
    #[error("{0}")]
    Other(String),
}

impl From<String> for CliError {
    fn from(message: String) -> CliError {
        CliError::Other(message)
    }
}

#[derive(Parser)]
#[command(
    name = "kcache",
    version,
    about = "A caching proxy for the Kubernetes API"
)]
struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "KCACHE_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file and print the effective configuration (defaults filled in).
    Check {
        /// The file to check.
        file: PathBuf,
    },
}

/// HTTPS files; each overrides its counterpart in the config file's `tls` section.
#[derive(clap::Args)]
struct TlsFlags {
    /// PEM certificate chain to serve HTTPS with (tls.certFile).
    #[arg(long, env = "KCACHE_TLS_CERT_FILE")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of the certificate (tls.keyFile).
    #[arg(long, env = "KCACHE_TLS_KEY_FILE")]
    tls_key_file: Option<PathBuf>,
    /// PEM CA bundle that verifies (optional) client certificates (tls.clientCAFile).
    #[arg(long, env = "KCACHE_CLIENT_CA_FILE")]
    client_ca_file: Option<PathBuf>,
}

impl TlsFlags {
    /// Apply the flags and re-check the section, since a flag can complete or break it.
    fn apply(self, config: &mut Config) -> Result<(), ConfigError> {
        let tls = &mut config.tls;
        tls.cert_file = self.tls_cert_file.or(tls.cert_file.take());
        tls.key_file = self.tls_key_file.or(tls.key_file.take());
        tls.client_ca_file = self.client_ca_file.or(tls.client_ca_file.take());
        config.validate_tls()
    }
}

/// `--auth`: the library's `auth.mode`, as the command line spells it (the library has no
/// command-line parser of its own).
#[derive(Clone, Copy, clap::ValueEnum)]
enum AuthFlag {
    None,
    Delegated,
    TrustLocal,
}

impl From<AuthFlag> for kcache::auth::AuthMode {
    fn from(flag: AuthFlag) -> Self {
        match flag {
            AuthFlag::None => kcache::auth::AuthMode::None,
            AuthFlag::Delegated => kcache::auth::AuthMode::Delegated,
            AuthFlag::TrustLocal => kcache::auth::AuthMode::TrustLocal,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Kubernetes API from a cache in front of a real cluster.
    Serve {
        /// Kubeconfig of the upstream cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context to use.
        #[arg(long)]
        context: Option<String>,
        /// Configuration file (see config/kcache.yaml).
        #[arg(long, env = "KCACHE_CONFIG")]
        config: Option<PathBuf>,
        /// Address to listen on (overrides the config file).
        #[arg(long, env = "KCACHE_LISTEN")]
        listen: Option<String>,
        /// Address of kcache's own /livez, /readyz, /healthz, /metrics and /status, plain
        /// HTTP without authentication (overrides adminListen; default 127.0.0.1:8081).
        #[arg(long, env = "KCACHE_ADMIN_LISTEN")]
        admin_listen: Option<String>,
        /// Caller authentication (overrides auth.mode): `none` is only allowed on a loopback
        /// address; `delegated` checks tokens and permissions with the upstream;
        /// `trust-local` also lets credential-less loopback callers act as kcache.
        #[arg(long, env = "KCACHE_AUTH", value_enum)]
        auth: Option<AuthFlag>,
        #[command(flatten)]
        tls: TlsFlags,
        /// Stop, as on SIGTERM, when the process that started kcache ends, however it ends:
        /// `kcache bench` starts its targets so, and a bench killed outright leaves none behind.
        #[arg(long, hide = true)]
        exit_with_parent: bool,
    },
    /// Configuration file tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print a running kcache's caches at a glance, from its admin listener's /status.
    ///
    /// Per cached type: its state, objects, memory estimate, resourceVersion and the time
    /// since it moved, the last list (when and why), relists, open watchers, watchers dropped
    /// for being slow and consistent-read outcomes; above them the upstream's reachability,
    /// version and requests by purpose. The admin listener serves the same figures as a page
    /// to a browser and as JSON (/status?format=json). Exits non-zero when the admin listener
    /// cannot be reached.
    Status {
        /// The running kcache's admin listener (its adminListen, or --admin-listen).
        #[arg(
            long,
            value_name = "URL",
            env = "KCACHE_ADMIN_URL",
            default_value = "http://127.0.0.1:8081"
        )]
        admin: String,
    },
    /// Start the built-in simulated cluster with kcache in front of it.
    #[cfg(feature = "demo")]
    Demo {
        /// Address kcache listens on.
        #[arg(long, env = "KCACHE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: String,
        /// Address of kcache's own /livez, /readyz, /healthz, /metrics and /status.
        #[arg(long, env = "KCACHE_ADMIN_LISTEN", default_value = "127.0.0.1:8081")]
        admin_listen: String,
        /// Address the simulated cluster listens on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        sim_listen: String,
        /// Changes per second made to the simulated cluster.
        #[arg(long, default_value_t = 1.0)]
        churn: f64,
        /// Configuration file (see config/kcache.yaml).
        #[arg(long, env = "KCACHE_CONFIG")]
        config: Option<PathBuf>,
        /// Caller authentication: with `delegated` or `trust-local` the simulated cluster
        /// checks tokens and RBAC, and the demo prints tokens to try.
        #[arg(long, value_enum)]
        auth: Option<AuthFlag>,
    },
    /// Run the simulated apiserver as a process of its own (a stand-in for a real cluster):
    /// HTTPS with a certificate of its own and a bearer token, written into a kubeconfig.
    #[cfg(feature = "demo")]
    Sim {
        /// Address to serve the API on (port 0: any free port; the kubeconfig says which).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Where to write the kubeconfig (server URL, CA, token), once the server listens.
        #[arg(long)]
        kubeconfig_out: PathBuf,
        /// ConfigMaps to seed (about 1 KB each).
        #[arg(long, default_value_t = 1000)]
        configmaps: usize,
        /// Pods to seed (about 4 KB each, 40 per node).
        #[arg(long, default_value_t = 200)]
        pods: usize,
        /// Namespaces the objects are spread over (bench-1..).
        #[arg(long, default_value_t = 10)]
        namespaces: usize,
        /// Serve plain HTTP without authentication instead of HTTPS with a token.
        #[arg(long)]
        plain_http: bool,
        /// Send watch bookmarks every second with the store's revision (as with etcd progress
        /// notifications), so kcache can answer consistent reads of quiet types from its cache.
        #[arg(long)]
        progress_bookmarks: bool,
    },
    /// Measure kcache against nginx serving the same bytes and against the simulated
    /// apiserver (build with --release); prints Markdown tables. With --kubeconfig: against a
    /// real cluster, direct and through a kcache it starts (see docs/benchmarks.md).
    #[cfg(feature = "bench")]
    Bench {
        /// Small sizes and short phases (about a minute; a smoke run).
        #[arg(long)]
        quick: bool,
        /// Scenarios to run, comma-separated:
        /// list,get,consistent,fresh,interactive,forward,crd,auto,https,watch,node,memory,stalled,protobuf,warm,relist,audit,fleet.
        /// With --kubeconfig only `fleet`: the fleet's node clients against the cluster,
        /// directly and through kcache (it writes, then deletes, a fleet of its own).
        #[arg(long, value_delimiter = ',')]
        scenarios: Vec<String>,
        /// Also write the results as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Install nginx (apt-get install -y nginx-light) if it is missing.
        #[arg(long, conflicts_with = "kubeconfig")]
        install_nginx: bool,
        /// Nodes of the `fleet` scenario's cluster (default 5000; 500 with --quick; with
        /// --kubeconfig 500, 100 with --quick).
        #[arg(long)]
        nodes: Option<usize>,
        /// Pods created (and deleted) a second by `--scenarios fleet` against a cluster
        /// (default 100, the load test's pace).
        #[arg(long, requires = "kubeconfig")]
        churn: Option<f64>,
        /// Bench a real cluster: read it directly and through a kcache started in front of it.
        /// Read-only unless --writes.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context to use (with --kubeconfig).
        #[arg(long, requires = "kubeconfig")]
        context: Option<String>,
        /// Namespace of the one-namespace LIST and the GETs (default: the one with the most
        /// objects; for the interactive rounds the bench's own with --writes, else kube-system).
        #[arg(long, requires = "kubeconfig")]
        namespace: Option<String>,
        /// Create a namespace of the bench's own, write ConfigMaps there (watch delivery and
        /// consistent reads under writes) and a Secret (another type, during the interactive
        /// rounds), and delete it at the end.
        #[arg(long, requires = "kubeconfig")]
        writes: bool,
        /// Load-generator connections per read row (with --kubeconfig; default 8, 4 with --quick).
        #[arg(long, requires = "kubeconfig")]
        clients: Option<usize>,
        /// Watchers per target (with --kubeconfig; default 100, 20 with --quick).
        #[arg(long, requires = "kubeconfig")]
        watchers: Option<usize>,
    },
}

/// Logs to stdout at `default_level` unless `KCACHE_LOG` says otherwise; `bench` logs to
/// stderr (its tables go to stdout) and only warnings by default.
fn init_logs(format: LogFormat, bench: bool) {
    let default_level = if bench { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KCACHE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour codes only where a person reads them: a file, a pipe or a log collector gets
    // plain text.
    use std::io::IsTerminal;
    let (writer, terminal) = if bench {
        (
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
            std::io::stderr().is_terminal(),
        )
    } else {
        (
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stdout),
            std::io::stdout().is_terminal(),
        )
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(terminal)
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load_config(
    path: Option<PathBuf>,
    listen: Option<String>,
    admin_listen: Option<String>,
) -> Result<Config, ConfigError> {
    let mut config = match path {
        Some(p) => Config::load(&p)?,
        None => Config::default(),
    };
    if let Some(l) = listen {
        config.listen = l;
    }
    if let Some(l) = admin_listen {
        config.admin_listen = l;
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "bench")]
    let bench = matches!(cli.command, Command::Bench { .. });
    #[cfg(not(feature = "bench"))]
    let bench = false;
    init_logs(cli.log_format, bench);
    let result = match cli.command {
        Command::Serve {
            kubeconfig,
            context,
            config,
            listen,
            admin_listen,
            auth,
            tls,
            exit_with_parent,
        } => {
            serve(
                kubeconfig,
                context,
                config,
                (listen, admin_listen),
                auth,
                tls,
                exit_with_parent,
            )
            .await
        }
        Command::Config {
            command: ConfigCommand::Check { file },
        } => Config::load(&file)
            .map_err(CliError::from)
            .and_then(|c| yaml_serde::to_string(&c).map_err(CliError::Print))
            .map(|yaml| print!("{yaml}")),
        Command::Status { admin } => status::run(&admin).await.map_err(CliError::from),
        #[cfg(feature = "demo")]
        Command::Demo {
            listen,
            admin_listen,
            sim_listen,
            churn,
            config,
            auth,
        } => match load_config(config, None, Some(admin_listen)) {
            Ok(mut config) => {
                if let Some(mode) = auth {
                    config.auth.mode = mode.into();
                }
                let opts = demo::DemoOptions {
                    listen,
                    sim_listen,
                    churn_per_second: churn,
                };
                demo::run(opts, config).await
            }
            Err(e) => Err(e.into()),
        },
        #[cfg(feature = "demo")]
        Command::Sim {
            listen,
            kubeconfig_out,
            configmaps,
            pods,
            namespaces,
            plain_http,
            progress_bookmarks,
        } => {
            sim::run(sim::SimOptions {
                listen,
                kubeconfig_out,
                configmaps,
                pods,
                namespaces: namespaces.max(1),
                plain_http,
                progress_bookmarks,
            })
            .await
        }
        #[cfg(feature = "bench")]
        Command::Bench {
            quick,
            scenarios,
            json,
            nodes,
            churn,
            kubeconfig: Some(kubeconfig),
            context,
            ..
        } if !scenarios.is_empty() || nodes.is_some() || churn.is_some() => {
            match scenarios.as_slice() {
                [fleet] if fleet == "fleet" => {
                    let nodes = nodes.unwrap_or(if quick { 100 } else { 500 }).max(1);
                    let mut opts = if quick {
                        kcache_bench::cluster_fleet::FleetOptions::quick(kubeconfig, nodes)
                    } else {
                        kcache_bench::cluster_fleet::FleetOptions::standard(kubeconfig, nodes)
                    };
                    opts.context = context;
                    opts.pods_per_sec = churn.unwrap_or(opts.pods_per_sec).max(1.0);
                    bench_cluster_fleet(opts, json).await
                }
                _ => Err(CliError::from(
                    "with --kubeconfig, --scenarios takes only `fleet` (and --nodes and --churn only with it)"
                        .to_string(),
                )),
            }
        }
        #[cfg(feature = "bench")]
        Command::Bench {
            quick,
            json,
            kubeconfig: Some(kubeconfig),
            context,
            namespace,
            writes,
            clients,
            watchers,
            ..
        } => {
            bench_cluster(
                kcache_bench::cluster::ClusterOptions {
                    kubeconfig,
                    context,
                    namespace,
                    writes,
                    // This binary, filled in by bench_cluster.
                    exe: PathBuf::new(),
                    scale: {
                        let mut s = if quick {
                            kcache_bench::cluster::ClusterScale::quick()
                        } else {
                            kcache_bench::cluster::ClusterScale::standard()
                        };
                        s.clients = clients.unwrap_or(s.clients).max(1);
                        s.watchers = watchers.unwrap_or(s.watchers).max(1);
                        s
                    },
                },
                json,
            )
            .await
        }
        #[cfg(feature = "bench")]
        Command::Bench {
            quick,
            scenarios,
            json,
            install_nginx,
            nodes,
            kubeconfig: None,
            ..
        } => kcache_bench::run(kcache_bench::Options {
            quick,
            scenarios,
            json,
            install_nginx,
            nodes,
        })
        .await
        .map_err(CliError::from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error, then each cause down to the root one: `kcache: resource v1/pods:
            // caused by: upstream request failed: caused by: … Connection refused`.
            let mut line = format!("kcache: {e}");
            for cause in kcache::error::causes(&e) {
                line.push_str(": caused by: ");
                line.push_str(&cause);
            }
            eprintln!("{line}");
            ExitCode::FAILURE
        }
    }
}

/// `kcache bench --kubeconfig … --scenarios fleet`, with this binary as the kcache it starts.
#[cfg(feature = "bench")]
async fn bench_cluster_fleet(
    mut opts: kcache_bench::cluster_fleet::FleetOptions,
    json: Option<PathBuf>,
) -> Result<(), CliError> {
    opts.exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    kcache_bench::cluster_fleet::run_and_print(&opts, json.as_deref())
        .await
        .map_err(CliError::from)
}

/// `kcache bench --kubeconfig`: the cluster bench, with this binary as the kcache it starts.
#[cfg(feature = "bench")]
async fn bench_cluster(
    mut opts: kcache_bench::cluster::ClusterOptions,
    json: Option<PathBuf>,
) -> Result<(), CliError> {
    opts.exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    kcache_bench::cluster::run_and_print(&opts, json.as_deref())
        .await
        .map_err(CliError::from)
}

async fn serve(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    config: Option<PathBuf>,
    (listen, admin_listen): (Option<String>, Option<String>),
    auth: Option<AuthFlag>,
    tls: TlsFlags,
    exit_with_parent: bool,
) -> Result<(), CliError> {
    // Read before anything else: a parent that ends before this read goes unnoticed.
    let parent = exit_with_parent.then(std::os::unix::process::parent_id);
    let mut config = load_config(config, listen, admin_listen)?;
    tls.apply(&mut config)?;
    if let Some(mode) = auth {
        config.auth.mode = mode.into();
    }
    // Before anything else: an open cache on a network address must not even start.
    if let Ok(addr) = config.listen.parse() {
        kcache::auth::check_listen(config.auth.mode, &addr)?;
    }
    let upstream = Upstream::from_kubeconfig(kubeconfig, context).await?;
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|source| CliError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
    let admin = server::bind_admin(&config).await?;
    tracing::info!(upstream = %upstream.url, "discovering resources");
    let running = server::start(&config, upstream, listener, admin).await?;
    tracing::info!(
        addr = %running.addr,
        admin = %running.admin_addr,
        "serving; point clients at {}; health and metrics at {}",
        running.url(),
        running.admin_url()
    );
    match parent {
        Some(parent) => running.until_signal_or(parent_gone(parent)).await,
        None => running.until_signal().await,
    }
    Ok(())
}

/// Returns once this process's parent is no longer `parent`: it ended and the process was
/// handed to another (init, or a subreaper). No signal tells a child that its parent died
/// without setting one up through unsafe code, so this looks once a second.
async fn parent_gone(parent: u32) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        if std::os::unix::process::parent_id() != parent {
            tracing::warn!(
                parent,
                "the process that started kcache has ended; stopping"
            );
            return;
        }
    }
}

#[cfg(all(test, feature = "bench"))]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// `kcache bench --help` names every scenario the bench runs, in its order.
    #[test]
    fn bench_help_lists_every_scenario() {
        let cmd = Cli::command();
        let bench = cmd
            .get_subcommands()
            .find(|c| c.get_name() == "bench")
            .expect("bench subcommand");
        let help = bench
            .get_arguments()
            .find(|a| a.get_id() == "scenarios")
            .and_then(|a| a.get_help())
            .expect("--scenarios help")
            .to_string();
        let listed = help.rsplit(' ').next().unwrap_or_default();
        assert_eq!(
            listed.trim_end_matches('.'),
            kcache_bench::SCENARIOS.join(",")
        );
    }
}
