//! HTTPS: the server certificate and the client CA, loaded from PEM files and reloaded when
//! they change, and the caller identity read from a verified client certificate.
//!
//! Certificates on Kubernetes are rotated in place (cert-manager, mounted Secrets), so the
//! files are polled and a new rustls config is swapped in for new connections; connections
//! already established keep the config they were accepted with.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::auth::CertIdentity;
use crate::config::TlsSettings;

/// Why TLS files could not be loaded, or a handshake failed. Each keeps the error it comes
/// from as its source (see [`crate::error::Report`]).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A certificate file that is not PEM.
    #[error("{path}: not a PEM certificate file")]
    Pem {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    /// A key file without a usable private key.
    #[error("{path}: no usable private key")]
    Key {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{path}: no certificate in the file")]
    NoCertificate { path: PathBuf },
    #[error("certificate {cert} and key {key}")]
    CertKey {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    /// A client CA certificate rustls does not accept as a trust anchor.
    #[error("client CA {path}")]
    ClientCa {
        path: PathBuf,
        source: rustls::Error,
    },
    /// No client certificate verifier can be made from the client CA bundle.
    #[error("client CA {path}")]
    ClientVerifier {
        path: PathBuf,
        source: rustls::server::VerifierBuilderError,
    },
    #[error("TLS is not configured (tls.certFile and tls.keyFile)")]
    NotConfigured,
    #[error("handshake timed out")]
    HandshakeTimeout,
    #[error("plain HTTP sent to the HTTPS port")]
    PlainHttp,
    #[error("handshake")]
    Handshake(#[source] std::io::Error),
}

/// A client that neither completes nor abandons its handshake must not hold a task forever.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What HTTP versions are offered by ALPN, preferred first: client-go and kube-rs pick h2.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

#[derive(Debug, Clone)]
struct Files {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
}

/// The files' bytes as last read; compared whole so that any change (including a symlink swap
/// of a mounted Secret, which keeps mtimes of the old target) is noticed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

/// The TLS side of the server: the current rustls config and the files it came from.
pub struct TlsServer {
    files: Files,
    reload_interval: Duration,
    current: RwLock<Arc<ServerConfig>>,
    /// Contents last tried, loaded or not, so a bad file is reported once rather than at
    /// every check.
    seen: Mutex<Contents>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("files", &self.files)
            .field("reload_interval", &self.reload_interval)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    /// Load the configured files; an error here keeps kcache from starting.
    pub fn load(settings: &TlsSettings) -> Result<TlsServer, TlsError> {
        let (Some(cert), Some(key)) = (&settings.cert_file, &settings.key_file) else {
            return Err(TlsError::NotConfigured);
        };
        let files = Files {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: settings.client_ca_file.clone(),
        };
        let contents = read(&files)?;
        let config = build(&files, &contents)?;
        Ok(TlsServer {
            files,
            reload_interval: settings.reload_interval(),
            current: RwLock::new(config),
            seen: Mutex::new(contents),
        })
    }

    /// The config new connections are accepted with.
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        // A panic while holding the lock cannot leave the Arc half-written, so a poisoned
        // lock still holds a usable config.
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Re-read the files and swap in a new config if they changed. `Ok(true)`: reloaded;
    /// `Ok(false)`: unchanged, or changed to something already reported as bad.
    pub(crate) fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let contents = read(&self.files)?;
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if *seen == contents {
                return Ok(false);
            }
            *seen = contents.clone();
        }
        let config = build(&self.files, &contents)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(true)
    }

    /// Check the files every reload interval, forever; meant to be spawned and aborted with
    /// the server.
    pub(crate) async fn watch_files(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.reload_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        // Read errors are not remembered in `seen`, so repeat a warning only when it changes.
        let mut last_warning = None;
        loop {
            ticks.tick().await;
            match self.reload_if_changed() {
                Ok(true) => {
                    last_warning = None;
                    tracing::info!(cert = %self.files.cert.display(), "TLS files changed; reloaded");
                }
                Ok(false) => last_warning = None,
                Err(e) => {
                    let message = crate::error::Report(&e).to_string();
                    if last_warning.as_ref() != Some(&message) {
                        tracing::warn!(error = %message, "TLS files changed but cannot be loaded; keeping the previous certificate");
                        last_warning = Some(message);
                    }
                }
            }
        }
    }

    /// The TLS handshake on an accepted connection, bounded by [`HANDSHAKE_TIMEOUT`], and the
    /// identity of the client certificate if one was presented (it was then verified).
    pub(crate) async fn handshake(
        &self,
        stream: TcpStream,
    ) -> Result<(TlsStream<TcpStream>, Option<CertIdentity>), TlsError> {
        let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
        let mut stream = stream;
        if looks_like_http(&stream, deadline).await {
            // As Go's server (so kube-apiserver) answers: a client pointed at http:// by
            // mistake learns why, instead of seeing the connection just close.
            use tokio::io::AsyncWriteExt;
            let _ = stream.write_all(PLAIN_HTTP_ANSWER).await;
            let _ = stream.shutdown().await;
            return Err(TlsError::PlainHttp);
        }
        let acceptor = TlsAcceptor::from(self.current());
        let stream = tokio::time::timeout_at(deadline, acceptor.accept(stream))
            .await
            .map_err(|_| TlsError::HandshakeTimeout)?
            .map_err(TlsError::Handshake)?;
        let identity = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| cert_identity(leaf));
        Ok((stream, identity))
    }
}

/// kube-apiserver's answer (Go's net/http) to plain HTTP on its TLS port.
const PLAIN_HTTP_ANSWER: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Whether a connection starts with an HTTP request line rather than a TLS record (whose
/// first byte is a record type, 0x16 for a handshake): the first five bytes are compared
/// with the starts of the common methods, as Go does.
async fn looks_like_http(stream: &TcpStream, deadline: tokio::time::Instant) -> bool {
    const STARTS: [&[u8; 5]; 5] = [b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"];
    let mut head = [0u8; 5];
    // peek returns what has arrived so far; wait (briefly) until all five bytes are there.
    loop {
        match tokio::time::timeout_at(deadline, stream.peek(&mut head)).await {
            Ok(Ok(5)) => return STARTS.iter().any(|s| **s == head),
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return false,
            Ok(Ok(n)) => {
                // A TLS record is recognisable from its first byte; only a possible request
                // line needs the rest.
                if !head[..n].iter().all(u8::is_ascii_alphabetic) {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// The user a client certificate names, as kube-apiserver reads it: the subject's CommonName
/// is the user and each Organization a group. None without a CommonName (kube-apiserver then
/// does not authenticate the certificate either) or if the certificate does not parse.
pub fn cert_identity(der: &[u8]) -> Option<CertIdentity> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    // Go keeps the last CommonName when a subject has several.
    let user = subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .last()?
        .to_string();
    if user.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .map(str::to_string)
        .collect();
    Some(CertIdentity { user, groups })
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read(files: &Files) -> Result<Contents, TlsError> {
    Ok(Contents {
        cert: read_file(&files.cert)?,
        key: read_file(&files.key)?,
        client_ca: files.client_ca.as_deref().map(read_file).transpose()?,
    })
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn build(files: &Files, contents: &Contents) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates(&files.cert, &contents.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|source| TlsError::Key {
        path: files.key.clone(),
        source,
    })?;
    let cert_key = |source| TlsError::CertKey {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(cert_key)?;
    let builder = match (&files.client_ca, &contents.client_ca) {
        (Some(path), Some(pem)) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(path, pem)? {
                roots.add(cert).map_err(|source| TlsError::ClientCa {
                    path: path.clone(),
                    source,
                })?;
            }
            // Optional: callers with a bearer token present no certificate; one that is
            // presented must still verify.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|source| TlsError::ClientVerifier {
                    path: path.clone(),
                    source,
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(cert_key)?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    fn cert_with(subject: &[(DnType, &str)]) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = DistinguishedName::new();
        for (t, v) in subject {
            params.distinguished_name.push(t.clone(), *v);
        }
        params.self_signed(&key).unwrap().der().to_vec()
    }

    /// rcgen keeps one value per attribute type, so a second Organization is written under
    /// its OID as a "custom" type.
    fn second_org() -> DnType {
        DnType::CustomDnType(vec![2, 5, 4, 10])
    }

    #[test]
    fn identity_is_common_name_and_organizations() {
        let der = cert_with(&[
            (DnType::CommonName, "alice"),
            (DnType::OrganizationName, "dev"),
            (second_org(), "ops"),
            (DnType::OrganizationalUnitName, "not-a-group"),
        ]);
        assert_eq!(
            cert_identity(&der),
            Some(CertIdentity {
                user: "alice".into(),
                groups: vec!["dev".into(), "ops".into()],
            })
        );
        let der = cert_with(&[(DnType::CommonName, "system:node:n1")]);
        assert_eq!(
            cert_identity(&der),
            Some(CertIdentity {
                user: "system:node:n1".into(),
                groups: vec![],
            })
        );
    }

    #[test]
    fn no_common_name_no_identity() {
        let der = cert_with(&[(DnType::OrganizationName, "dev")]);
        assert_eq!(cert_identity(&der), None);
        assert_eq!(cert_identity(b"not a certificate"), None);
    }

    fn write_pair(dir: &Path, cn: &str) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    }

    #[test]
    fn reload_keeps_the_old_config_on_bad_files() {
        let dir = std::env::temp_dir().join(format!("kcache-tls-unit-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        write_pair(&dir, "one");
        let settings = TlsSettings {
            cert_file: Some(dir.join("tls.crt")),
            key_file: Some(dir.join("tls.key")),
            ..TlsSettings::default()
        };
        let tls = TlsServer::load(&settings).unwrap();
        assert!(!tls.reload_if_changed().unwrap(), "unchanged files");
        let first = tls.current();

        // A key that does not match the certificate: reported once, old config kept.
        let other = KeyPair::generate().unwrap();
        std::fs::write(dir.join("tls.key"), other.serialize_pem()).unwrap();
        let e = tls.reload_if_changed().unwrap_err();
        assert!(matches!(e, TlsError::CertKey { .. }), "{e}");
        assert!(Arc::ptr_eq(&first, &tls.current()));
        assert!(!tls.reload_if_changed().unwrap(), "bad files reported once");

        std::fs::write(dir.join("tls.crt"), "garbage").unwrap();
        assert!(matches!(
            tls.reload_if_changed().unwrap_err(),
            TlsError::NoCertificate { .. }
        ));
        assert!(Arc::ptr_eq(&first, &tls.current()));

        write_pair(&dir, "two");
        assert!(tls.reload_if_changed().unwrap());
        assert!(!Arc::ptr_eq(&first, &tls.current()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn startup_errors_name_the_file() {
        let settings = TlsSettings {
            cert_file: Some("/nonexistent/tls.crt".into()),
            key_file: Some("/nonexistent/tls.key".into()),
            ..TlsSettings::default()
        };
        let e = TlsServer::load(&settings).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/tls.crt"), "{e}");
        assert!(matches!(
            TlsServer::load(&TlsSettings::default()),
            Err(TlsError::NotConfigured)
        ));
    }
}
