//! `kcache sim`: the simulated apiserver as a process of its own, a stand-in for a real
//! cluster (for `kcache bench --kubeconfig` and its test). It seeds ConfigMaps and Pods, serves
//! HTTPS with a certificate it makes for itself, checks bearer tokens against its RBAC table,
//! and writes a kubeconfig (server URL, CA, token) pointing at itself.
//!
//! The sim speaks plain HTTP; TLS is terminated in front of it, in this process, and each
//! connection's bytes are passed on to the sim on loopback (HTTP/1.1 or HTTP/2, as ALPN agreed:
//! the sim detects which).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use tokio::net::{TcpListener, TcpStream};

use kcache_sim::seed;
use kcache_sim::{Sim, SimConfig};

use crate::CliError;

/// Options of `kcache sim`.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Where the (HTTPS) API is served; port 0: any free port.
    pub listen: String,
    /// Where the kubeconfig goes (written once the server listens).
    pub kubeconfig_out: PathBuf,
    pub configmaps: usize,
    pub pods: usize,
    /// Namespaces `bench-1`.. the objects are spread over.
    pub namespaces: usize,
    /// Serve plain HTTP without tokens instead (the kubeconfig says so).
    pub plain_http: bool,
    /// Watch bookmarks every second carrying the store's revision (an apiserver whose etcd
    /// sends progress notifications), instead of the 1.28 defaults.
    pub progress_bookmarks: bool,
}

/// Run until SIGINT/SIGTERM.
pub async fn run(opts: SimOptions) -> Result<(), CliError> {
    let listen: SocketAddr = opts.listen.parse().map_err(|source| CliError::SimListen {
        addr: opts.listen.clone(),
        source,
    })?;
    // Plain HTTP: the sim itself on the listen address. HTTPS: the sim on a loopback port of
    // its own, TLS on the listen address.
    let sim_addr = if opts.plain_http {
        listen
    } else {
        SocketAddr::from(([127, 0, 0, 1], 0))
    };
    // By default the 1.28 behaviour of the recordings, as a cluster without extra tuning.
    let config = if opts.progress_bookmarks {
        SimConfig::demo()
    } else {
        SimConfig::default()
    };
    let sim = Sim::start_on(sim_addr, config)
        .await
        .map_err(CliError::Sim)?;
    let mut objects = seed::configmaps(opts.configmaps, opts.namespaces, 1);
    // Both generators create the namespaces `bench-1`..; the pods' copies are left out.
    objects.extend(
        seed::pods(opts.pods, opts.pods.div_ceil(40), opts.namespaces, 2)
            .into_iter()
            .filter(|o| o.resource != "namespaces"),
    );
    seed::create_all(&sim, objects)?;

    if opts.plain_http {
        let mut addr = sim.addr();
        if addr.ip().is_unspecified() {
            addr = SocketAddr::from(([127, 0, 0, 1], addr.port()));
        }
        let url = format!("http://{addr}");
        write_kubeconfig(&opts.kubeconfig_out, &url, None, None)?;
        println!(
            "simulated cluster at {url} (plain HTTP, no authentication); kubeconfig: {}",
            opts.kubeconfig_out.display()
        );
    } else {
        // A random token per run: the kubeconfig is the only way in.
        let token = format!("kcache-sim-{}", uuid::Uuid::new_v4().simple());
        sim.set_rbac(Some(admin_rbac(&token)));
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| CliError::Listen {
                addr: opts.listen.clone(),
                source,
            })?;
        let addr = local_addr(&listener, &opts.listen)?;
        let (ca_pem, server_config) = self_signed(addr)?;
        let url = format!("https://{addr}");
        write_kubeconfig(&opts.kubeconfig_out, &url, Some(&ca_pem), Some(&token))?;
        println!(
            "simulated cluster at {url} (HTTPS, bearer token); kubeconfig: {}",
            opts.kubeconfig_out.display()
        );
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
        tokio::spawn(forward_tls(listener, acceptor, sim.addr()));
    }
    until_signal().await;
    sim.shutdown().await;
    Ok(())
}

fn local_addr(listener: &TcpListener, listen: &str) -> Result<SocketAddr, CliError> {
    let addr = listener.local_addr().map_err(|source| CliError::Listen {
        addr: listen.to_string(),
        source,
    })?;
    // A kubeconfig cannot point at 0.0.0.0; loopback reaches a wildcard listener.
    if addr.ip().is_unspecified() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], addr.port())));
    }
    Ok(addr)
}

/// The sim's table: the token's user is in `system:masters`, which may do everything, as a
/// cluster admin's kubeconfig can.
fn admin_rbac(token: &str) -> kcache_sim::rbac::Rbac {
    use kcache_sim::rbac::Rbac;
    Rbac::new()
        .token(token, "kcache-sim-admin", &["system:masters"])
        .allow_masters()
}

/// A CA made for this run and a serving certificate it signs for the listen address: the CA
/// (PEM) for the kubeconfig, and the server side of TLS (HTTP/2 and HTTP/1.1 by ALPN).
fn self_signed(addr: SocketAddr) -> Result<(String, rustls::ServerConfig), CliError> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let ip = addr.ip().to_string();
    if !names.contains(&ip) {
        names.push(ip);
    }
    let cert = kcache_sim::certs::ServingCert::new("kcache-sim", &names)
        .map_err(|e| CliError::Other(format!("making the sim's certificate: {e}")))?;
    let key_der = rustls::pki_types::PrivateKeyDer::try_from(cert.key_der)
        .map_err(|e| CliError::Other(format!("the sim's key: {e}")))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert_der.into()], key_der)
        .map_err(|e| CliError::Other(format!("the sim's TLS config: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((cert.ca_pem, config))
}

/// Write the kubeconfig next to where it goes, then move it in place: whoever waits for the
/// file sees it whole, and only once the server listens.
fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_pem: Option<&str>,
    token: Option<&str>,
) -> Result<(), CliError> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca = ca_pem.map_or(String::new(), |pem| {
        format!("    certificate-authority-data: {}\n", b64(pem))
    });
    let user = token.map_or("{}".to_string(), |t| format!("{{token: {t}}}"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kcache-sim\n  cluster:\n    server: {server}\n{ca}\
         users:\n- name: kcache-sim-admin\n  user: {user}\n\
         contexts:\n- name: kcache-sim\n  context:\n    cluster: kcache-sim\n    user: kcache-sim-admin\n\
         current-context: kcache-sim\n"
    );
    let io = |source: std::io::Error| CliError::Other(format!("{}: {source}", path.display()));
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, text).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Accept TLS connections and pass each one's bytes to the sim.
async fn forward_tls(listener: TcpListener, acceptor: tokio_rustls::TlsAcceptor, sim: SocketAddr) {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(_) => {
                // Out of file descriptors, say: wait for some to be released.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                return;
            };
            if let Ok(mut upstream) = TcpStream::connect(sim).await {
                let _ = upstream.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            }
        });
    }
}

async fn until_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
