//! HTTPS: HTTP/1.1 and ALPN-negotiated HTTP/2 over TLS, optional client certificates checked
//! against the client CA, certificate reload, and plain HTTP sent to the TLS port.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::EnvBuilder;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache::config::TlsSettings;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

struct Ca {
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A leaf signed by this CA; `orgs` become Organization attributes.
    fn issue(
        &self,
        cn: &str,
        orgs: &[&str],
        sans: &[&str],
        purpose: ExtendedKeyUsagePurpose,
    ) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        // rcgen keeps one value per attribute type, so a second Organization goes under its
        // OID as a "custom" type.
        assert!(orgs.len() <= 2, "at most two organizations");
        for (i, o) in orgs.iter().enumerate() {
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                DnType::CustomDnType(vec![2, 5, 4, 10])
            };
            params.distinguished_name.push(ty, *o);
        }
        params.extended_key_usages = vec![purpose];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Leaf { cert, key }
    }

    fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }
}

struct Leaf {
    cert: Certificate,
    key: KeyPair,
}

impl Leaf {
    fn chain_and_key(&self) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let key = PrivateKeyDer::try_from(self.key.serialize_der()).unwrap();
        (vec![self.cert.der().clone()], key)
    }
}

fn server_cert(ca: &Ca, cn: &str) -> Leaf {
    ca.issue(
        cn,
        &[],
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )
}

fn write_server_files(dir: &Path, leaf: &Leaf) {
    // Key first: a check between the two writes sees a mismatched pair, which must be
    // skipped rather than served.
    std::fs::write(dir.join("tls.key"), leaf.key.serialize_pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), leaf.cert.pem()).unwrap();
}

struct Setup {
    dir: PathBuf,
    server_ca: Ca,
    client_ca: Ca,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn setup() -> (Setup, TlsSettings) {
    let dir = std::env::temp_dir().join(format!("kcache-tls-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let server_ca = Ca::new("kcache-test-server-ca");
    let client_ca = Ca::new("kcache-test-client-ca");
    write_server_files(&dir, &server_cert(&server_ca, "kcache-1"));
    std::fs::write(dir.join("client-ca.crt"), client_ca.cert.pem()).unwrap();
    let settings = TlsSettings {
        cert_file: Some(dir.join("tls.crt")),
        key_file: Some(dir.join("tls.key")),
        client_ca_file: Some(dir.join("client-ca.crt")),
        reload_interval_seconds: 1,
    };
    (
        Setup {
            dir,
            server_ca,
            client_ca,
        },
        settings,
    )
}

async fn connect(
    addr: std::net::SocketAddr,
    server_ca: &Ca,
    alpn: &[&[u8]],
    client: Option<&Leaf>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = RootCertStore::empty();
    roots.add(server_ca.der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some(leaf) => {
            let (chain, key) = leaf.chain_and_key();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::IpAddress(addr.ip().into());
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

const LIST: &str = "/api/v1/namespaces/fixtures-a/configmaps?resourceVersion=0";

/// One LIST over an established TLS stream, in the HTTP version asked for.
async fn list(
    stream: TlsStream<TcpStream>,
    http2: bool,
) -> Result<(http::Version, serde_json::Value), String> {
    let (version, body) = fetch(stream, http2, LIST, "application/json").await?;
    let v = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    Ok((version, v))
}

/// One GET of `path` over an established TLS stream, in the HTTP version asked for: the
/// version answered and the body, read whole.
async fn fetch(
    stream: TlsStream<TcpStream>,
    http2: bool,
    path: &str,
    accept: &str,
) -> Result<(http::Version, Bytes), String> {
    let req = Request::get(format!("https://kcache{path}"))
        .header("accept", accept)
        .header("host", "kcache")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = if http2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(req).await.map_err(|e| e.to_string())?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(req).await.map_err(|e| e.to_string())?
    };
    let version = resp.version();
    if resp.status() != 200 {
        return Err(format!("status {}", resp.status()));
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((version, body))
}

fn items(v: &serde_json::Value) -> usize {
    v["items"].as_array().map_or(0, Vec::len)
}

/// The CommonName of the certificate the server presented.
fn server_cn(stream: &TlsStream<TcpStream>) -> String {
    let chain = stream.get_ref().1.peer_certificates().unwrap();
    kcache::tls::cert_identity(&chain[0]).unwrap().user
}

#[tokio::test]
async fn https_over_http1_and_alpn_http2() {
    let (pki, settings) = setup();
    let env = EnvBuilder::fixtures().tls(settings).start().await;
    let addr = env.kcache.addr;
    assert!(env.url().starts_with("https://"), "{}", env.url());

    let s = connect(addr, &pki.server_ca, &[b"http/1.1"], None)
        .await
        .unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (version, v) = list(s, false).await.unwrap();
    assert_eq!(version, http::Version::HTTP_11);
    assert_eq!(items(&v), 25);

    // What client-go and kube-rs do: offer both, get h2.
    let s = connect(addr, &pki.server_ca, &[b"h2", b"http/1.1"], None)
        .await
        .unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (version, v) = list(s, true).await.unwrap();
    assert_eq!(version, http::Version::HTTP_2);
    assert_eq!(items(&v), 25);

    // No ALPN at all: HTTP/1.1.
    let s = connect(addr, &pki.server_ca, &[], None).await.unwrap();
    let (_, v) = list(s, false).await.unwrap();
    assert_eq!(items(&v), 25);

    // kube-rs trusting the server CA.
    let mut config = kube_client::Config::new(env.url().parse().unwrap());
    config.root_cert = Some(vec![pki.server_ca.der().to_vec()]);
    let client = kube_client::Client::try_from(config).unwrap();
    let api: kube_client::Api<ConfigMap> = kube_client::Api::namespaced(client, "fixtures-a");
    let got = api.list(&Default::default()).await.unwrap();
    assert_eq!(got.items.len(), 25);
}

/// A list larger than a body chunk streams in chunks (JSON from the cache, protobuf from the
/// mirror): over TLS, in HTTP/1.1 (chunked) and HTTP/2 (DATA frames), it is byte for byte what
/// the upstream sends.
#[tokio::test]
async fn a_large_list_is_the_upstreams_bytes_over_http1_and_http2() {
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";
    let (pki, settings) = setup();
    let env = EnvBuilder::fixtures().tls(settings).start().await;
    env.last_write_of("", "configmaps", "v1", "ConfigMap").await;
    let addr = env.kcache.addr;
    for path in [
        "/api/v1/namespaces/fixtures-c/configmaps?resourceVersion=0",
        "/api/v1/configmaps?resourceVersion=0",
    ] {
        for (accept, content_type) in [
            ("application/json", "content_type=\"json\""),
            (PROTOBUF, "content_type=\"protobuf\""),
        ] {
            // Responses of that type this kcache answered from its cache so far.
            let from_cache = || async {
                let parts = [
                    "kcache_responses_by_content_type_total",
                    content_type,
                    "source=\"cache\"",
                ];
                env.metric(&parts).await.unwrap_or(0.0)
            };
            let theirs = common::get_with(&env.sim.url(), path, &[("Accept", accept)]).await;
            assert_eq!(theirs.status, 200);
            assert!(theirs.body.len() > 64 * 1024, "{path}: a small list");
            for http2 in [false, true] {
                let alpn: &[&[u8]] = if http2 { &[b"h2"] } else { &[b"http/1.1"] };
                // The first protobuf read of a type starts its mirror, and is answered in
                // JSON (the client accepts it) until the mirror has synced: read until the
                // cache answers in protobuf, and compare that answer.
                common::wait_until("answered from the cache", || async {
                    let s = connect(addr, &pki.server_ca, alpn, None).await.unwrap();
                    let before = from_cache().await;
                    let (_, ours) = fetch(s, http2, path, accept).await.unwrap();
                    let cached = from_cache().await > before;
                    assert!(
                        !cached || ours == theirs.body,
                        "{path} ({accept}, http2: {http2}): kcache's {} bytes differ from the \
                         upstream's {}",
                        ours.len(),
                        theirs.body.len()
                    );
                    cached
                })
                .await;
            }
        }
    }
}

#[tokio::test]
async fn client_certificates_are_optional_but_verified() {
    let (pki, settings) = setup();
    let env = EnvBuilder::fixtures().tls(settings).start().await;
    let addr = env.kcache.addr;
    let alpn: &[&[u8]] = &[b"h2", b"http/1.1"];

    let alice = pki.client_ca.issue(
        "alice",
        &["dev", "ops"],
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    assert_eq!(
        kcache::tls::cert_identity(alice.cert.der()),
        Some(kcache::auth::CertIdentity {
            user: "alice".into(),
            groups: vec!["dev".into(), "ops".into()],
        })
    );
    let s = connect(addr, &pki.server_ca, alpn, Some(&alice))
        .await
        .unwrap();
    let (_, v) = list(s, true).await.unwrap();
    assert_eq!(items(&v), 25);

    let s = connect(addr, &pki.server_ca, alpn, None).await.unwrap();
    let (_, v) = list(s, true).await.unwrap();
    assert_eq!(items(&v), 25);

    // With TLS 1.3 the client may finish its side before the server rejects the
    // certificate, so the failure can show on connect or on the first request.
    let mallory = Ca::new("other-ca").issue(
        "mallory",
        &["dev"],
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    // This kcache's own count: every handshake so far succeeded.
    let errors = env.kcache.metrics().tls_handshake_errors.clone();
    assert_eq!(errors.get(), 0);
    let rejected = match connect(addr, &pki.server_ca, alpn, Some(&mallory)).await {
        Err(_) => true,
        Ok(s) => list(s, true).await.is_err(),
    };
    assert!(rejected, "a certificate from another CA must be refused");
    // Counted by the server once its side of the handshake has failed, which may be after
    // the client saw the failure.
    common::wait_until("the handshake error counted", || {
        let n = errors.get();
        async move { n == 1 }
    })
    .await;
    assert_eq!(errors.get(), 1);
}

#[tokio::test]
async fn a_rotated_certificate_is_served_to_new_connections() {
    let (pki, settings) = setup();
    let env = EnvBuilder::fixtures().tls(settings).start().await;
    let addr = env.kcache.addr;
    let alpn: &[&[u8]] = &[b"h2"];

    let old = connect(addr, &pki.server_ca, alpn, None).await.unwrap();
    assert_eq!(server_cn(&old), "kcache-1");

    // A broken file is not served: the old certificate stays.
    std::fs::write(pki.dir.join("tls.crt"), "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let s = connect(addr, &pki.server_ca, alpn, None).await.unwrap();
    assert_eq!(server_cn(&s), "kcache-1");

    write_server_files(&pki.dir, &server_cert(&pki.server_ca, "kcache-2"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = connect(addr, &pki.server_ca, alpn, None).await.unwrap();
        if server_cn(&s) == "kcache-2" {
            let (_, v) = list(s, true).await.unwrap();
            assert_eq!(items(&v), 25);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "new certificate not served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The connection made before the rotation keeps working.
    let (_, v) = list(old, true).await.unwrap();
    assert_eq!(items(&v), 25);
}

#[tokio::test]
async fn plain_http_to_the_tls_port_gets_the_apiservers_400() {
    let (_pki, settings) = setup();
    let env = EnvBuilder::fixtures().tls(settings).start().await;
    let mut tcp = TcpStream::connect(env.kcache.addr).await.unwrap();
    tcp.write_all(format!("GET {LIST} HTTP/1.1\r\nHost: kcache\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got))
        .await
        .expect("the server closes the connection instead of hanging")
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
    );
    // Anything else that is not TLS gets a TLS alert at most, and the connection closed.
    let mut tcp = TcpStream::connect(env.kcache.addr).await.unwrap();
    tcp.write_all(b"\x00\x01garbage\r\n").await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got))
        .await
        .expect("closed, not hanging");
    assert!(read.is_err() || !got.starts_with(b"HTTP/"), "{got:?}");
}

#[tokio::test]
async fn a_silent_client_does_not_block_others() {
    let (pki, settings) = setup();
    let env = EnvBuilder::fixtures().tls(settings).start().await;
    // Connected but never says anything: its handshake task waits alone.
    let _silent = TcpStream::connect(env.kcache.addr).await.unwrap();
    let s = connect(env.kcache.addr, &pki.server_ca, &[b"h2"], None)
        .await
        .unwrap();
    let (_, v) = list(s, true).await.unwrap();
    assert_eq!(items(&v), 25);
}

#[tokio::test]
async fn graceful_shutdown_ends_tls_connections() {
    let (pki, settings) = setup();
    let env = EnvBuilder::fixtures().tls(settings).start().await;
    let addr = env.kcache.addr;
    let s = connect(addr, &pki.server_ca, &[b"h2"], None).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::get(format!("https://kcache{LIST}&watch=1"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();

    let common::Env { sim: _sim, kcache } = env;
    tokio::time::timeout(Duration::from_secs(5), kcache.shutdown())
        .await
        .expect("shutdown within the grace period");
    // The watch ends (cleanly or not) rather than hanging.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
    assert!(ended.is_ok(), "the watch stream ends on shutdown");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}

/// One request over a fresh TLS connection (HTTP/1.1): status and body.
async fn call(
    addr: std::net::SocketAddr,
    pki: &Setup,
    client: &Leaf,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let stream = connect(addr, &pki.server_ca, &[b"http/1.1"], Some(client))
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "kcache")
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A client certificate is an identity: its reads from the cache are authorized for that
/// user and groups, and what kcache passes through is done by impersonating them (so the
/// upstream, not kcache's own privileges, decides).
#[tokio::test]
async fn client_certificate_callers_are_authorized_and_impersonated() {
    use kcache_sim::rbac::{Rbac, Subject};
    let (pki, settings) = setup();
    let kcache_user = "system:serviceaccount:kcache:kcache";
    let rbac = Rbac::new()
        .proxy("kcache-token", kcache_user)
        .allow(
            Subject::User(kcache_user.into()),
            &["impersonate"],
            &[""],
            &["users", "groups"],
            None,
        )
        .allow(
            Subject::Group("dev".into()),
            &["get", "list", "watch", "create"],
            &[""],
            &["configmaps"],
            Some("fixtures-a"),
        );
    let mut b = EnvBuilder::fixtures().tls(settings);
    b.rbac = Some((rbac, "kcache-token".into()));
    b.config.auth.mode = kcache::auth::AuthMode::Delegated;
    let env = b.start().await;
    let addr = env.kcache.addr;
    let alice = pki
        .client_ca
        .issue("alice", &["dev"], &[], ExtendedKeyUsagePurpose::ClientAuth);

    let (code, _) = call(addr, &pki, &alice, "GET", LIST, "").await;
    assert_eq!(code, 200);
    let (code, body) = call(
        addr,
        &pki,
        &alice,
        "GET",
        "/api/v1/namespaces/fixtures-a/secrets?resourceVersion=0",
        "",
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"User \"alice\" cannot list resource \"secrets\""#),
        "{body}"
    );

    let cm = |ns: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"from-alice","namespace":"{ns}"}}}}"#
        )
    };
    let (code, body) = call(
        addr,
        &pki,
        &alice,
        "POST",
        "/api/v1/namespaces/fixtures-a/configmaps",
        &cm("fixtures-a"),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // The upstream refuses alice, by name: kcache impersonated her.
    let (code, body) = call(
        addr,
        &pki,
        &alice,
        "POST",
        "/api/v1/namespaces/fixtures-b/configmaps",
        &cm("fixtures-b"),
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains(r#"User \"alice\""#), "{body}");
}
