//! The HTTPS scenario: LIST and GET from kcache's cache over HTTPS with callers authenticated
//! (`auth.mode: delegated`), which is how clients reach an apiserver, side by side with the
//! same reads over plain HTTP without authentication and with nginx serving the same bytes over
//! the same HTTPS; and the certificates and client settings every HTTPS target of the bench
//! shares.

use super::*;
use load::{Target, Tls};

/// A serving certificate for 127.0.0.1 made for this run, its files (for kcache and nginx),
/// and a client that trusts it.
pub struct HttpsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client: Tls,
    /// The certificate and its key, for a server in the bench's own process (`floor`).
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
    _dir: TempDir,
}

impl HttpsFiles {
    pub fn new() -> Result<HttpsFiles, String> {
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let made = kcache_sim::certs::ServingCert::new("kcache-bench", &names)
            .map_err(|e| format!("making a certificate: {e}"))?;
        let dir = TempDir::new("tls")?;
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        std::fs::write(&cert, &made.cert_pem).map_err(|e| e.to_string())?;
        std::fs::write(&key, &made.key_pem).map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from(made.ca_der))
            .map_err(|e| format!("the CA certificate: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS client: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server_name = rustls::pki_types::ServerName::try_from("127.0.0.1")
            .map_err(|e| format!("server name: {e}"))?;
        Ok(HttpsFiles {
            cert,
            key,
            client: Tls::new(config, server_name),
            cert_der: made.cert_der,
            key_der: made.key_der,
            _dir: dir,
        })
    }

    /// A server's TLS with this certificate, as kcache's (rustls with ring, its defaults).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(self.key_der.clone().into());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS server: {e}"))?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone().into()], key)
            .map_err(|e| format!("TLS server: {e}"))?;
        Ok(Arc::new(config))
    }

    /// `addr` over HTTPS, with `authorization` on every request.
    pub fn target(&self, addr: std::net::SocketAddr, authorization: Option<&str>) -> Target {
        let mut t = Target::plain(addr);
        t.tls = Some(self.client.clone());
        t.authorization = authorization.and_then(|a| http::HeaderValue::from_str(a).ok());
        t
    }
}

impl Bench {
    pub(super) async fn https(&mut self) -> Result<(), String> {
        const S: &str = "Reads over HTTPS with delegated auth (HTTP/1.1, 8 clients)";
        let files = HttpsFiles::new()?;
        let n = self.scale.get_objects;
        let (sim, cms, plain) = self.configmaps_behind_kcache(n, 9).await?;
        // The callers' token and permissions live in the sim, which kcache asks once per
        // verdict TTL (see the `get` scenario).
        sim.set_rbac(Some(super::reads::bench_rbac()));
        let mut config = ChildConfig::caching(&[CONFIGMAPS]);
        config.delegated_with_token = Some("kcache-token".into());
        config.tls = Some((files.cert.clone(), files.key.clone()));
        let secure = self.kcache(&sim, &config).await?;
        let https = files.target(secure.addr, Some("Bearer bench-token"));
        let o = &cms[cms.len() / 2];
        let object = format!(
            "/api/v1/namespaces/{}/configmaps/{}?resourceVersion=0",
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        );
        let cases = [
            (
                format!("LIST all {} ConfigMaps, RV=0", count_label(n)),
                "/api/v1/configmaps?resourceVersion=0".to_string(),
                "list.json",
            ),
            ("GET one ConfigMap, RV=0".to_string(), object, "one.json"),
        ];
        for (case, path, file) in cases {
            let (status, body) = load::fetch_from(&https, &path, Duration::from_secs(120)).await?;
            if status != 200 {
                return Err(format!("kcache over HTTPS answered {status} to {path}"));
            }
            progress(format!("https {case}: kcache plain"));
            let (pr, pcpu, _) = self.measure_kcache(&plain, &path).await;
            progress(format!("https {case}: kcache HTTPS, auth delegated"));
            let before = secure.upstream_cost().await.ok();
            let (sr, scpu) = self.measure_on(&https, &path, &[secure.pid()], None).await;
            let after = secure.upstream_cost().await.ok();
            let (nginx_rows, nginx_best) =
                self.nginx_https_rows(S, &case, file, &body, &files).await;
            // nginx over plain HTTP too: what TLS costs a server of the same bytes on this
            // machine (the load generator decrypts on the same cores), beside kcache's ratio.
            let nginx_plain = self.nginx_rows(S, &case, file, &body, false).await;

            let mut row = load_row(S, &case, "kcache HTTP, auth none", &pr, pcpu);
            row.note(format!("{:.2} MB per read", mb(body.len() as u64)));
            self.report.push(row);
            let mut row = load_row(S, &case, "kcache HTTPS, auth delegated", &sr, scpu);
            if let Some(c) = before.zip(after).map(|(b, a)| a - b) {
                set_upstream(&mut row, c.requests, c.received_bytes, sr.ok);
            }
            let vs_plain = sr.rps() / pr.rps().max(f64::MIN_POSITIVE);
            row.ratio("HTTPS/HTTP", vs_plain);
            let vs_nginx = nginx_best.map(|b| sr.rps() / b);
            if let Some(r) = vs_nginx {
                row.ratio("kcache/best nginx HTTPS", r);
            }
            if let Some((https, plain)) = nginx_best.zip(nginx_plain.best) {
                row.ratio("best nginx HTTPS/HTTP", https / plain);
            }
            self.report.push(row);
            for r in nginx_rows.into_iter().chain(nginx_plain.rows) {
                self.report.push(r);
            }
            // What TLS may cost at most: AES-GCM over the whole body, and the load generator
            // decrypting on the same cores, make 0.9× out of reach for a large list even for
            // nginx (its HTTPS/HTTP ratio is the row beside), so the goal is 0.75×.
            self.report.check(
                &format!("{case}: kcache HTTPS + delegated auth ≥ 0.75× kcache plain HTTP"),
                "≥ 0.75",
                format!("{}×", fmt_num(vs_plain)),
                Some(vs_plain >= 0.75),
            );
            self.report.check(
                &format!("{case}: kcache HTTPS + delegated auth ≥ 0.9× nginx HTTPS"),
                "≥ 0.90 (vs the better nginx)",
                vs_nginx.map_or("nginx missing".into(), |r| format!("{}×", fmt_num(r))),
                vs_nginx.map(|r| r >= 0.9),
            );
        }
        drop(secure);
        drop(plain);
        sim.shutdown().await;
        Ok(())
    }

    /// [`Bench::nginx_rows`] over HTTPS.
    async fn nginx_https_rows(
        &self,
        scenario: &str,
        case: &str,
        name: &str,
        bytes: &[u8],
        files: &HttpsFiles,
    ) -> (Vec<Row>, Option<f64>) {
        let modes = [
            (nginx::Mode::Single, "nginx HTTPS, 1 process"),
            (nginx::Mode::Workers(2), "nginx HTTPS, master + 2 workers"),
        ];
        let mut rows = Vec::new();
        let mut best: Option<f64> = None;
        for (mode, label) in modes {
            progress(format!("{scenario} {case}: {label}"));
            match self.nginx_https(mode, name, bytes, files).await {
                Ok((n, target, path)) => {
                    let (r, cpu) = self.measure_on(&target, &path, &n.pids(), None).await;
                    best = Some(best.map_or(r.rps(), |b| b.max(r.rps())));
                    rows.push(load_row(scenario, case, label, &r, cpu));
                }
                Err(e) => rows.push(missing_row(scenario, case, label, &e)),
            }
        }
        (rows, best)
    }

    async fn nginx_https(
        &self,
        mode: nginx::Mode,
        name: &str,
        bytes: &[u8],
        files: &HttpsFiles,
    ) -> Result<(nginx::Nginx, Target, String), String> {
        let bin = self.nginx.as_ref().map_err(|e| e.clone())?;
        let n = nginx::Nginx::start_with(bin, mode, Some((&files.cert, &files.key))).await?;
        let path = n.put(name, bytes)?;
        let target = files.target(n.addr, None);
        let (status, got) = load::fetch_from(&target, &path, Duration::from_secs(60)).await?;
        if status != 200 || got.len() != bytes.len() {
            return Err(format!("nginx answered {status} with {} bytes", got.len()));
        }
        Ok((n, target, path))
    }
}
